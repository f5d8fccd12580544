"""rrelu_with_noise in training (F.rrelu(training=True), nn.RReLU().train()),
native on tpu. Its slopes come from the tpu generator (Philox), so the values
are not CPU's: the tests check the semantics instead. The noise is 1 where
x > 0 and uniform in [lower, upper] where x <= 0, output == x * noise,
gradient == grad * noise, the draws repeat under torch.manual_seed and differ
otherwise, and evaluation mode still equals CPU's result. None of it falls
back (fallback mode "error")."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from conftest import make

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def native(fn):
    """fn() with fallbacks raising, and asserting none was counted."""
    torch_tpu.reset_counts()
    mode = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("error")
    try:
        return fn()
    finally:
        torch_tpu.set_fallback_mode(mode)
        assert torch_tpu.fallback_counts() == {}


def _x(shape=(64, 130), dtype=torch.float32, seed=0):
    x = make(shape, torch.float32, seed=seed).to(dtype)
    x.view(-1)[:7] = 0  # zero draws a slope too (CPU: x <= 0)
    return x


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("lower,upper", [(1 / 8, 1 / 3), (0.05, 0.9), (0.25, 0.25)])
def test_noise_range_placement_and_output(dtype, lower, upper):
    x = _x(dtype=dtype)
    tx = x.to("tpu")
    noise = torch.empty_like(tx)
    out = native(lambda: torch.ops.aten.rrelu_with_noise(tx, noise, lower, upper, True))
    assert out.device.type == "tpu" and out.dtype == dtype
    n, o = noise.cpu().double(), out.cpu()
    pos = x > 0
    assert bool((n[pos] == 1).all())
    neg = n[~pos]
    lo = torch.tensor(lower, dtype=dtype).double()   # the bounds as the dtype rounds them
    hi = torch.tensor(upper, dtype=dtype).double()
    assert bool(((neg >= lo) & (neg <= hi)).all()), (neg.min(), neg.max())
    # output is x * noise, rounded to the dtype like any multiplication
    assert torch.equal(o, (x * noise.cpu()))
    if upper > lower:
        assert neg.unique().numel() > neg.numel() // 4 if dtype in (torch.float32, torch.float64) \
            else neg.unique().numel() > 4
        mid = (lower + upper) / 2
        assert abs(float(neg.mean()) - mid) < 0.05 * (upper - lower) + 0.01
    else:
        assert bool((neg == lo).all())


def test_functional_and_module_forward_backward():
    x = _x((40, 50), seed=1)
    tx = x.to("tpu").requires_grad_(True)
    g = make((40, 50), seed=2)
    m = torch.nn.RReLU(0.1, 0.3).train()

    def run():
        y1 = F.rrelu(tx, 0.1, 0.3, training=True)
        y2 = m(tx)
        (y1 * g.to("tpu")).sum().backward()
        return y1, y2
    y1, y2 = native(run)
    for y in (y1, y2):
        ratio = torch.where(x > 0, torch.ones_like(x), y.detach().cpu() / x)
        neg = ratio[x < 0]
        assert bool(((neg >= 0.1 - 1e-6) & (neg <= 0.3 + 1e-6)).all())
        assert torch.equal(y.detach().cpu()[x > 0], x[x > 0])
    assert not torch.equal(y1.detach().cpu(), y2.detach().cpu())   # fresh draws each call
    # d out / d x is the slope of each element: grad * (out / x) where x != 0
    slope = torch.where(x > 0, torch.ones_like(x), y1.detach().cpu() / x)
    nz = x != 0
    torch.testing.assert_close(tx.grad.cpu()[nz], (g * slope)[nz])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=lambda d: str(d)[6:])
def test_gradient_is_grad_times_noise(dtype):
    x = _x((33, 17), dtype=dtype, seed=3).to("tpu").requires_grad_(True)
    g = make((33, 17), dtype, seed=4).to("tpu")
    noise = torch.empty_like(x, requires_grad=False)

    def run():
        out = torch.ops.aten.rrelu_with_noise(x, noise, 0.125, 1 / 3, True)
        out.backward(g)
        return out
    native(run)
    assert torch.equal(x.grad.cpu(), (g * noise).cpu())


def test_reproducible_under_manual_seed():
    x = _x((257,), seed=5).to("tpu")

    def draw():
        return F.rrelu(x, training=True).cpu()
    torch.manual_seed(7)
    a, a2 = draw(), draw()
    torch.manual_seed(7)
    b, b2 = draw(), draw()
    torch.manual_seed(8)
    c = draw()
    assert torch.equal(a, b) and torch.equal(a2, b2)
    assert not torch.equal(a, a2) and not torch.equal(a, c)


def test_noncontiguous_and_batched_input():
    base = _x((6, 40), seed=6)
    x = base.to("tpu").t()             # transposed
    noise = torch.empty(40, 6, device="tpu")
    out = native(lambda: torch.ops.aten.rrelu_with_noise(x, noise, 0.1, 0.4, True))
    xc = base.t()
    assert torch.equal(out.cpu(), xc * noise.cpu())
    n = noise.cpu()
    assert bool((n[xc > 0] == 1).all()) and bool(((n[xc <= 0] >= 0.1) & (n[xc <= 0] <= 0.4)).all())


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_eval_mode_matches_cpu(dtype):
    x = _x((20, 30), dtype=dtype, seed=7)
    m = torch.nn.RReLU(0.1, 0.3).eval()
    got = native(lambda: m(x.to("tpu")))
    assert torch.equal(got.cpu(), m(x))
    got = native(lambda: F.rrelu(x.to("tpu"), training=False))
    assert torch.equal(got.cpu(), F.rrelu(x, training=False))


def test_eval_mode_draws_nothing_from_the_generator():
    """As on the CPU, evaluation uses the mean slope and leaves the generator
    where it was: the next training draw is the one it would have been."""
    x = _x((300,), seed=9).to("tpu")
    torch.manual_seed(3)
    want = F.rrelu(x, training=True).cpu()
    torch.manual_seed(3)
    state = torch.tpu.get_rng_state()
    native(lambda: F.rrelu(x, training=False))
    native(lambda: torch.nn.RReLU().eval()(x))
    assert torch.equal(torch.tpu.get_rng_state(), state)
    assert torch.equal(F.rrelu(x, training=True).cpu(), want)
