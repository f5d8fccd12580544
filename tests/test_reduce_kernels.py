"""Reductions, distances and RNG ops of the reduce2 work: native on tpu.

(The OpInfo entries of these ops: test_opinfo_native.py.)
(b) gradients equal CPU autograd's with TORCH_TPU_FALLBACK=error;
(c) random ops: moments over large samples, reproducibility from the seed
    and from a tpu Generator, zero fallbacks.
"""
import math

import pytest
import torch

import torch_tpu
from conftest import no_fallback



# (name, variant) of op_db entries that must run natively.


# ---- gradients ------------------------------------------------------------------

GRADS = {
    "vector_norm2": ([(6, 7)], lambda x: torch.linalg.vector_norm(x, dim=1)),
    "vector_norm3": ([(6, 7)], lambda x: torch.linalg.vector_norm(x, 3, dim=(0, 1))),
    "norm": ([(6, 7)], lambda x: torch.norm(x)),
    "norm_dim": ([(6, 7)], lambda x: torch.norm(x, p=2.5, dim=0, keepdim=True)),
    "logsumexp": ([(6, 7)], lambda x: torch.logsumexp(x, 1)),
    "aminmax": ([(6, 7)], lambda x: torch.aminmax(x, dim=1)[0] * 2 + torch.aminmax(x, dim=1)[1]),
    "var": ([(6, 7)], lambda x: torch.var(x, 1)),
    "std_mean": ([(6, 7)], lambda x: sum(torch.std_mean(x, 1, unbiased=False))),
    "cdist2_batched": ([(2, 5, 4), (2, 6, 4)], lambda a, b: torch.cdist(a, b)),
    "cdist2_mm": ([(30, 4), (40, 4)], lambda a, b: torch.cdist(a, b)),
    "cdist1": ([(5, 4), (6, 4)], lambda a, b: torch.cdist(a, b, p=1)),
    "cdist0.5": ([(5, 4), (6, 4)], lambda a, b: torch.cdist(a, b, p=0.5)),
    "cdist3": ([(5, 4), (6, 4)], lambda a, b: torch.cdist(a, b, p=3)),
    "cdist_inf": ([(5, 4), (6, 4)], lambda a, b: torch.cdist(a, b, p=float("inf"))),
    "dist": ([(5, 4), (5, 4)], lambda a, b: torch.dist(a, b, 3)),
    "cosine_similarity": ([(5, 4), (5, 4)], lambda a, b: torch.nn.functional.cosine_similarity(a, b)),
    "pairwise_distance": ([(5, 4), (5, 4)], lambda a, b: torch.nn.functional.pairwise_distance(a, b)),
    "pdist2": ([(7, 3)], lambda a: torch.nn.functional.pdist(a)),
    "pdist1": ([(7, 3)], lambda a: torch.nn.functional.pdist(a, p=1)),
    "pdist3": ([(7, 3)], lambda a: torch.nn.functional.pdist(a, p=3)),
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradients_native(name, dtype):
    shapes, fn = GRADS[name]
    gen = torch.Generator().manual_seed(len(name))
    xs = [torch.randn(*s, dtype=dtype, generator=gen, requires_grad=True) for s in shapes]
    ys = [x.detach().to("tpu").requires_grad_() for x in xs]
    want = fn(*xs)
    want.backward(torch.ones_like(want))
    torch_tpu.reset_counts()
    with _fallback_error():
        got = fn(*ys)
        got.backward(torch.ones_like(got))
    assert torch_tpu.fallback_counts() == {}
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-7, atol=1e-7)
    torch.testing.assert_close(got.detach().cpu(), want.detach(), **tol)
    for x, y in zip(xs, ys):
        torch.testing.assert_close(y.grad.cpu(), x.grad, **tol)


class _fallback_error:
    def __enter__(self):
        self.mode = torch_tpu._C.fallback_mode()
        torch_tpu.set_fallback_mode("error")

    def __exit__(self, *exc):
        torch_tpu.set_fallback_mode(self.mode)


# ---- forward semantics not covered by op_db samples -------------------------------

def _both(fn):
    torch_tpu.reset_counts()
    with _fallback_error():
        got = fn("tpu")
    assert torch_tpu.fallback_counts() == {}
    return got, fn("cpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16],
                         ids=str)
def test_norms_orders_and_dtypes(dtype):
    base = torch.randn(33, 70, generator=torch.Generator().manual_seed(1)).to(dtype)
    base[3, 5] = 0.0
    for ord in [0, 1, 2, 3.5, -1.5, float("inf"), -float("inf")]:
        for dim in [None, 1, (0,), (0, 1)]:
            got, want = _both(lambda d: torch.linalg.vector_norm(base.to(d).t(), ord, dim=dim))
            torch.testing.assert_close(got.cpu(), want, rtol=2e-2 if dtype in (
                torch.float16, torch.bfloat16) else 1e-5, atol=1e-5)
    got, want = _both(lambda d: torch.linalg.vector_norm(base.to(d), 2, dim=1,
                                                         dtype=torch.float64))
    assert got.dtype == torch.float64
    torch.testing.assert_close(got.cpu(), want)


def test_reduction_edge_values():
    x = torch.tensor([[1.0, float("nan"), -3.0], [float("inf"), 2.0, -float("inf")]])
    for fn in [lambda d: torch.nansum(x.to(d), 1), lambda d: torch.logsumexp(x.to(d), 1),
               lambda d: torch.aminmax(x.to(d), dim=1)[1],
               lambda d: torch.count_nonzero(x.to(d), dim=0),
               lambda d: torch.logsumexp(torch.full((3,), -float("inf"), device=d), 0)]:
        got, want = _both(fn)
        torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    i = torch.tensor([[3, -2, 7], [0, 5, 5]], dtype=torch.int32)
    for fn in [lambda d: torch.aminmax(i.to(d))[0], lambda d: torch.nansum(i.to(d)),
               lambda d: torch.logsumexp(i.to(d), 1), lambda d: torch.count_nonzero(i.to(d))]:
        got, want = _both(fn)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want)


def test_equal_is_native():
    a = torch.randn(5, 6)
    t = a.to("tpu")
    torch_tpu.reset_counts()
    with _fallback_error():
        assert torch.equal(t, t.clone())
        assert not torch.equal(t, t + 1)
        assert not torch.equal(t, t[:, :5])
        n = torch.tensor([1.0, float("nan")], device="tpu")
        assert not torch.equal(n, n)
    assert torch_tpu.fallback_counts() == {}


def test_renorm_and_histc_native():
    x = torch.randn(6, 40, generator=torch.Generator().manual_seed(3))
    for fn in [lambda d: torch.renorm(x.to(d), 2, 0, 5.0), lambda d: torch.renorm(x.to(d), 1, 1, 1.0),
               lambda d: torch.histc(x.to(d), 13, -1, 2), lambda d: torch.histc(x.to(d), 7)]:
        got, want = _both(fn)
        torch.testing.assert_close(got.cpu(), want)
    y = x.clone().to("tpu")
    y.renorm_(3, 1, 0.5)
    torch.testing.assert_close(y.cpu(), x.renorm(3, 1, 0.5))


def test_cdist_compute_modes_and_broadcast():
    gen = torch.Generator().manual_seed(4)
    a, b = torch.randn(3, 1, 30, 8, generator=gen), torch.randn(4, 40, 8, generator=gen)
    for mode in ["use_mm_for_euclid_dist_if_necessary", "donot_use_mm_for_euclid_dist"]:
        for p in [0.0, 1.0, 2.0, 2.5, float("inf")]:
            got, want = _both(lambda d: torch.cdist(a.to(d), b.to(d), p, compute_mode=mode))
            torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)


# ---- random ----------------------------------------------------------------------

N = 1 << 20


def _moments(t):
    t = t.double().cpu()
    return t.mean().item(), t.var().item()


def _native(fn):
    torch_tpu.reset_counts()
    with _fallback_error():
        out = fn()
    assert torch_tpu.fallback_counts() == {}
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_random_distributions(dtype):
    e = lambda: torch.empty(N, device="tpu", dtype=dtype)  # noqa: E731
    se = 5 / math.sqrt(N)
    m, v = _moments(_native(lambda: e().exponential_(2.0)))
    assert abs(m - 0.5) < 0.5 * se * 4 + 0.004 and abs(v - 0.25) < 0.01
    m, v = _moments(_native(lambda: e().geometric_(0.25)))
    assert abs(m - 4.0) < 0.02 and abs(v - 12.0) < 0.3
    m, v = _moments(_native(lambda: e().log_normal_(0.0, 0.5)))
    assert abs(m - math.exp(0.125)) < 0.01 and abs(v - (math.exp(0.25) - 1) * math.exp(0.25)) < 0.02
    c = _native(lambda: e().cauchy_(1.0, 2.0)).double().cpu()
    assert abs((c < 1.0).double().mean().item() - 0.5) < 0.005
    assert abs((c < 3.0).double().mean().item() - 0.75) < 0.005
    mean = torch.linspace(-3, 3, N, device="tpu", dtype=dtype)
    r = _native(lambda: torch.normal(mean, 0.5)).double().cpu() - mean.double().cpu()
    assert abs(r.mean().item()) < 0.01 and abs(r.std().item() - 0.5) < 0.01
    std = torch.full((N,), 2.0, device="tpu", dtype=dtype)
    m, v = _moments(_native(lambda: torch.normal(1.0, std)))
    assert abs(m - 1.0) < 0.02 and abs(v - 4.0) < 0.05
    m, v = _moments(_native(lambda: torch.normal(torch.zeros(N, device="tpu", dtype=dtype), std)))
    assert abs(m) < 0.02 and abs(v - 4.0) < 0.05
    p = torch.full((N,), 0.3, device="tpu", dtype=dtype)
    m, v = _moments(_native(lambda: torch.bernoulli(p)))
    assert abs(m - 0.3) < 0.005
    m, v = _moments(_native(lambda: torch.empty(N, device="tpu").bernoulli_(p)))
    assert abs(m - 0.3) < 0.005
    m, v = _moments(_native(lambda: torch.randint(0, 10, (N,), device="tpu")))
    assert abs(m - 4.5) < 0.02 and abs(v - 8.25) < 0.1


def test_random_reproducible_from_seed_and_generator():
    ops = [lambda g: torch.randn(1000, device="tpu", generator=g),
           lambda g: torch.rand(1000, device="tpu", generator=g),
           lambda g: torch.empty(1000, device="tpu").exponential_(generator=g),
           lambda g: torch.empty(1000, device="tpu").cauchy_(generator=g),
           lambda g: torch.normal(torch.zeros(1000, device="tpu"), 1.0, generator=g),
           lambda g: torch.bernoulli(torch.full((1000,), 0.5, device="tpu"), generator=g),
           lambda g: torch.randint(0, 100, (1000,), device="tpu", generator=g)]
    for op in ops:
        torch.manual_seed(123)
        a = _native(lambda: op(None)).cpu()
        torch.manual_seed(123)
        b = _native(lambda: op(None)).cpu()
        c = _native(lambda: op(None)).cpu()
        assert torch.equal(a, b) and not torch.equal(b, c)
        g = torch.Generator(device="tpu")
        g.manual_seed(7)
        d = _native(lambda: op(g)).cpu()
        g.manual_seed(7)
        e = _native(lambda: op(g)).cpu()
        assert torch.equal(d, e) and not torch.equal(d, a)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_poisson_and_standard_gamma(dtype):
    for lam in [0.7, 4.0, 25.0]:
        p = _native(lambda: torch.poisson(torch.full((N // 4,), lam, device="tpu", dtype=dtype)))
        assert p.dtype == dtype and torch.equal(p.cpu(), p.cpu().floor())
        m, v = _moments(p)
        assert abs(m - lam) < 0.02 * lam + 0.01 and abs(v - lam) < 0.05 * lam
    for alpha in [0.4, 1.0, 7.5]:
        g = _native(lambda: torch._standard_gamma(
            torch.full((N // 4,), alpha, device="tpu", dtype=dtype)))
        m, v = _moments(g)
        assert g.dtype == dtype and (g.cpu() > 0).all()
        assert abs(m - alpha) < 0.02 * alpha + 0.01 and abs(v - alpha) < 0.06 * alpha
    rate = torch.full((N // 4,), 4.0, device="tpu")
    s = _native(lambda: torch.distributions.Gamma(rate / 2, rate).sample())
    assert abs(s.mean().item() - 0.5) < 0.01
    torch.manual_seed(5)
    a = _native(lambda: torch.poisson(rate)).cpu()
    torch.manual_seed(5)
    assert torch.equal(a, _native(lambda: torch.poisson(rate)).cpu())


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_histc_integer_inputs_count_like_float(dtype):
    # CPU has no integer histc; tpu counts integers as CUDA does (transformers'
    # MoE layers histogram int expert ids on accelerators), equal to the
    # float histogram of the same values.
    x = torch.randint(0, 9, (2000,), generator=torch.Generator().manual_seed(3)).to(dtype)
    got = torch.histc(x.to("tpu"), bins=8, min=0, max=7)
    assert got.dtype == dtype
    assert torch.equal(got.cpu().double(), torch.histc(x.double(), bins=8, min=0, max=7))


def test_hash_tensor_matches_cpu_bits_and_errors():
    """hash_tensor: xor of the elements' float64/int64 bit patterns, a uint64
    result, over all dims or some; uint32 input raises as on the CPU."""
    torch.manual_seed(0)
    x = torch.randn(6, 5, 7)
    with no_fallback():
        got = [torch.hash_tensor(x.to("tpu")).cpu(),
               torch.hash_tensor(x.to("tpu"), dim=(0, 2), keepdim=True).cpu(),
               torch.hash_tensor(x.to(torch.int16).to("tpu"), dim=1).cpu()]
    want = [torch.hash_tensor(x), torch.hash_tensor(x, dim=(0, 2), keepdim=True),
            torch.hash_tensor(x.to(torch.int16), dim=1)]
    for g, w in zip(got, want):
        assert g.dtype == torch.uint64 and g.shape == w.shape
        assert torch.equal(g.view(torch.int64), w.view(torch.int64))
    with pytest.raises(NotImplementedError):
        torch.hash_tensor(x.to(torch.uint32).to("tpu"))
