"""Random numbers on tpu: reproducibility under torch.manual_seed, the
generator state round trip, generator objects, and distributions checked
against the same statistics of CPU samples."""
import pytest
import torch
import torch.nn.functional as F

from conftest import TPU0, assert_same, make

N = 100_000


def twice(fn, seed=1234):
    torch.manual_seed(seed)
    a = fn()
    torch.manual_seed(seed)
    b = fn()
    return a, b


RNG_OPS = {
    "rand": lambda: torch.rand(1000, device="tpu"),
    "rand_f64": lambda: torch.rand(3, 5, dtype=torch.float64, device="tpu"),
    "rand_bf16": lambda: torch.rand(64, dtype=torch.bfloat16, device="tpu"),
    "randn": lambda: torch.randn(17, 33, device="tpu"),
    "randn_f16": lambda: torch.randn(100, dtype=torch.float16, device="tpu"),
    "dropout": lambda: F.dropout(torch.ones(40, 50, device="tpu"), p=0.3, training=True),
    "dropout_module": lambda: torch.nn.Dropout(0.5)(torch.ones(1000, device="tpu")),
    "bernoulli_p": lambda: torch.bernoulli(torch.full((500,), 0.3, device="tpu")),
    "bernoulli_": lambda: torch.empty(500, device="tpu").bernoulli_(0.7),
    "uniform_": lambda: torch.empty(300, device="tpu").uniform_(-2, 5),
    "normal_": lambda: torch.empty(300, device="tpu").normal_(3, 0.5),
    "randint": lambda: torch.randint(0, 10, (200,), device="tpu"),
    "randperm": lambda: torch.randperm(50, device="tpu"),
    "multinomial": lambda: torch.multinomial(torch.tensor([0.1, 0.2, 0.7], device="tpu"), 20,
                                             replacement=True),
}


@pytest.mark.parametrize("name", list(RNG_OPS))
def test_same_seed_same_numbers(name):
    a, b = twice(RNG_OPS[name])
    assert a.device == TPU0
    torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["rand", "randn", "dropout", "bernoulli_p", "uniform_",
                                  "normal_", "randint", "randperm"])
def test_different_seeds_differ(name):
    fn = RNG_OPS[name]
    torch.manual_seed(1)
    a = fn().cpu()
    torch.manual_seed(2)
    b = fn().cpu()
    assert not torch.equal(a, b)


def test_consecutive_draws_differ():
    torch.manual_seed(3)
    a = torch.rand(100, device="tpu").cpu()
    b = torch.rand(100, device="tpu").cpu()
    assert not torch.equal(a, b)
    c = torch.randn(100, device="tpu").cpu()
    d = torch.randn(100, device="tpu").cpu()
    assert not torch.equal(c, d)


def test_rng_state_roundtrip():
    torch.manual_seed(4)
    torch.rand(10, device="tpu")
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = torch.rand(257, device="tpu").cpu()
    b = torch.randn(31, device="tpu").cpu()
    m = F.dropout(torch.ones(99, device="tpu"), 0.5).cpu()
    torch.tpu.set_rng_state(state)
    torch.testing.assert_close(torch.rand(257, device="tpu").cpu(), a, rtol=0, atol=0)
    torch.testing.assert_close(torch.randn(31, device="tpu").cpu(), b, rtol=0, atol=0)
    torch.testing.assert_close(F.dropout(torch.ones(99, device="tpu"), 0.5).cpu(), m,
                               rtol=0, atol=0)
    # the all-devices forms
    states = torch.tpu.get_rng_state_all()
    c = torch.rand(5, device="tpu").cpu()
    torch.tpu.set_rng_state_all(states)
    torch.testing.assert_close(torch.rand(5, device="tpu").cpu(), c, rtol=0, atol=0)


def test_tpu_rng_is_independent_of_cpu_rng():
    """Drawing on the CPU does not change what tpu draws next (and vice versa)."""
    torch.manual_seed(5)
    a = torch.rand(50, device="tpu").cpu()
    torch.manual_seed(5)
    torch.rand(1000)  # CPU draws in between
    b = torch.rand(50, device="tpu").cpu()
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.manual_seed(5)
    c1 = torch.rand(20)
    torch.manual_seed(5)
    torch.rand(1000, device="tpu")
    torch.testing.assert_close(torch.rand(20), c1, rtol=0, atol=0)


def test_tpu_manual_seed_and_initial_seed():
    torch.tpu.manual_seed(77)
    assert torch.tpu.initial_seed() == 77
    a = torch.rand(10, device="tpu").cpu()
    torch.tpu.manual_seed_all(77)
    torch.testing.assert_close(torch.rand(10, device="tpu").cpu(), a, rtol=0, atol=0)
    torch.manual_seed(78)
    assert torch.tpu.initial_seed() == 78


def test_generator_objects():
    g = torch.Generator(device="tpu")
    assert g.device.type == "tpu"
    g.manual_seed(9)
    a = torch.rand(100, device="tpu", generator=g).cpu()
    g.manual_seed(9)
    b = torch.rand(100, device="tpu", generator=g).cpu()
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    # a private generator does not advance the default one
    torch.manual_seed(9)
    d1 = torch.rand(10, device="tpu").cpu()
    torch.manual_seed(9)
    torch.rand(10, device="tpu", generator=g)
    d2 = torch.rand(10, device="tpu").cpu()
    torch.testing.assert_close(d1, d2, rtol=0, atol=0)
    # state of a generator object
    s = g.get_state()
    x = torch.randn(20, device="tpu", generator=g).cpu()
    g.set_state(s)
    torch.testing.assert_close(torch.randn(20, device="tpu", generator=g).cpu(), x,
                               rtol=0, atol=0)
    s2 = g.get_state()
    x2 = torch.empty(20, device="tpu").normal_(generator=g).cpu()
    g.set_state(s2)
    torch.testing.assert_close(torch.empty(20, device="tpu").normal_(generator=g).cpu(), x2,
                               rtol=0, atol=0)


def test_fork_rng_restores_tpu_state():
    torch.manual_seed(10)
    with torch.random.fork_rng(device_type="tpu"):
        torch.rand(100, device="tpu")
    a = torch.rand(10, device="tpu").cpu()
    torch.manual_seed(10)
    b = torch.rand(10, device="tpu").cpu()
    torch.testing.assert_close(a, b, rtol=0, atol=0)


# ---- distributions, compared with CPU samples ---------------------------------------------


def moments(x):
    x = x.double()
    return x.mean().item(), x.std().item(), x.min().item(), x.max().item()


def assert_like_cpu_sample(tpu_sample, cpu_sample, mean_tol, std_tol):
    tm, ts, tmin, tmax = moments(tpu_sample.cpu())
    cm, cs, cmin, cmax = moments(cpu_sample)
    assert abs(tm - cm) < mean_tol, (tm, cm)
    assert abs(ts - cs) < std_tol, (ts, cs)
    return tmin, tmax


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16,
                                   torch.float16], ids=str)
def test_rand_uniform_distribution(dtype):
    torch.manual_seed(11)
    t = torch.rand(N, dtype=dtype, device="tpu")
    assert t.dtype == dtype
    lo, hi = assert_like_cpu_sample(t, torch.rand(N, dtype=dtype), 0.01, 0.01)
    assert 0.0 <= lo and hi < 1.0
    # ten equal bins each hold about a tenth of the sample
    hist = torch.histc(t.cpu().float(), bins=10, min=0, max=1) / N
    assert ((hist - 0.1).abs() < 0.01).all(), hist


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_randn_normal_distribution(dtype):
    torch.manual_seed(12)
    t = torch.randn(N, dtype=dtype, device="tpu")
    assert_like_cpu_sample(t, torch.randn(N, dtype=dtype), 0.02, 0.02)
    # about 68% within one standard deviation, 95% within two
    x = t.cpu().double()
    assert abs((x.abs() < 1).double().mean().item() - 0.6827) < 0.01
    assert abs((x.abs() < 2).double().mean().item() - 0.9545) < 0.01


def test_uniform_and_normal_parameters():
    torch.manual_seed(13)
    u = torch.empty(N, device="tpu").uniform_(-2, 5)
    lo, hi = assert_like_cpu_sample(u, torch.empty(N).uniform_(-2, 5), 0.05, 0.05)
    assert -2 <= lo and hi < 5
    n = torch.empty(N, device="tpu").normal_(3, 0.5)
    assert_like_cpu_sample(n, torch.empty(N).normal_(3, 0.5), 0.01, 0.01)
    n2 = torch.normal(torch.full((N,), -1.0, device="tpu"), 2.0)
    assert n2.device == TPU0
    assert_like_cpu_sample(n2, torch.normal(torch.full((N,), -1.0), 2.0), 0.04, 0.04)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_bernoulli_and_dropout_statistics(p):
    torch.manual_seed(14)
    b = torch.bernoulli(torch.full((N,), p, device="tpu")).cpu()
    assert set(b.unique().tolist()) <= {0.0, 1.0}
    assert abs(b.mean().item() - p) < 0.01
    x = make((N,), seed=15)
    xt = x.to("tpu")
    y = F.dropout(xt, p=p, training=True)
    kept = (y != 0).cpu()
    assert abs(kept.double().mean().item() - (1 - p)) < 0.01
    # kept elements are scaled by 1/(1-p), exactly as the CPU computes it
    expected = torch.where(kept, x / (1 - p), torch.zeros_like(x))
    assert_same(y, expected, atol=1e-6, rtol=1e-6)
    # eval mode and p=0 are identities
    assert_same(F.dropout(xt, p=p, training=False), x, exact=True)
    assert_same(F.dropout(xt, p=0.0, training=True), x, exact=True)


def test_native_dropout_mask_matches_output():
    torch.manual_seed(16)
    x = make((300, 7), seed=17)
    out, mask = torch.native_dropout(x.to("tpu"), 0.4, True)
    assert mask.dtype == torch.bool and mask.device == TPU0
    expected = x * mask.cpu() / 0.6
    assert_same(out, expected, atol=1e-6, rtol=1e-6)


def test_randint_and_randperm_ranges():
    torch.manual_seed(18)
    r = torch.randint(3, 13, (N,), device="tpu").cpu()
    assert r.dtype == torch.int64
    assert r.min().item() == 3 and r.max().item() == 12
    counts = torch.bincount(r - 3, minlength=10).double() / N
    assert ((counts - 0.1).abs() < 0.01).all(), counts
    p = torch.randperm(1000, device="tpu")
    assert p.device == TPU0
    torch.testing.assert_close(p.cpu().sort().values, torch.arange(1000), rtol=0, atol=0)
