"""The elementwise_special and activation families (their OpInfo entries:
test_opinfo_native.py): gradients match CPU autograd with no fallback."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu

# OpInfo names (op_key, variants included by prefix "name."). Aliases
# (special.psi, special.gammaln, negative, ...) share their op's OpInfo.


def _u(lo, hi, *shape):
    g = torch.Generator().manual_seed(sum(shape) + int(10 * hi))
    return torch.rand(*shape, generator=g, dtype=torch.float64) * (hi - lo) + lo


GRAD_CASES = {
    "acos": (torch.acos, [_u(-0.9, 0.9, 7, 5)]),
    "asin": (torch.asin, [_u(-0.9, 0.9, 7, 5)]),
    "atan": (torch.atan, [_u(-3, 3, 7, 5)]),
    "acosh": (torch.acosh, [_u(1.1, 4, 7, 5)]),
    "asinh": (torch.asinh, [_u(-3, 3, 7, 5)]),
    "atanh": (torch.atanh, [_u(-0.9, 0.9, 7, 5)]),
    "sinh": (torch.sinh, [_u(-3, 3, 7, 5)]),
    "cosh": (torch.cosh, [_u(-3, 3, 7, 5)]),
    "atan2": (torch.atan2, [_u(-3, 3, 7, 5), _u(0.5, 3, 5)]),
    "hypot": (torch.hypot, [_u(-3, 3, 7, 5), _u(0.5, 3, 7, 5)]),
    "copysign": (torch.copysign, [_u(0.5, 3, 7, 5), _u(-3, 3, 7, 5)]),
    "logaddexp": (torch.logaddexp, [_u(-3, 3, 7, 5), _u(-3, 3, 7, 5)]),
    "logaddexp2": (torch.logaddexp2, [_u(-3, 3, 7, 5), _u(-3, 3, 7, 5)]),
    "xlogy": (torch.xlogy, [_u(-3, 3, 7, 5), _u(0.5, 3, 7, 5)]),
    "xlog1py": (torch.special.xlog1py, [_u(-3, 3, 7, 5), _u(0.5, 3, 7, 5)]),
    "fmax": (torch.fmax, [_u(-3, 3, 7, 5), _u(-3, 3, 7, 5)]),
    "fmin": (torch.fmin, [_u(-3, 3, 7, 5), _u(-3, 3, 7, 5)]),
    "frac": (torch.frac, [_u(-3, 3, 7, 5)]),
    "nan_to_num": (torch.nan_to_num, [_u(-3, 3, 7, 5)]),
    "deg2rad": (torch.deg2rad, [_u(-3, 3, 7, 5)]),
    "rad2deg": (torch.rad2deg, [_u(-3, 3, 7, 5)]),
    "logit": (torch.logit, [_u(0.1, 0.9, 7, 5)]),
    "logit_eps": (lambda x: torch.logit(x, 0.2), [_u(0.01, 0.99, 7, 5)]),
    "sinc": (torch.sinc, [_u(-3, 3, 7, 5)]),
    "float_power": (lambda x: torch.float_power(x, 2.5), [_u(0.5, 3, 7, 5)]),
    "lgamma": (torch.lgamma, [_u(0.5, 5, 7, 5)]),
    "digamma": (torch.digamma, [_u(0.5, 5, 7, 5)]),
    "polygamma2": (lambda x: torch.polygamma(2, x), [_u(0.5, 5, 7, 5)]),
    "mvlgamma": (lambda x: torch.mvlgamma(x, 3), [_u(1.5, 5, 7, 5)]),
    "erfc": (torch.erfc, [_u(-3, 3, 7, 5)]),
    "erfinv": (torch.erfinv, [_u(-0.9, 0.9, 7, 5)]),
    "erfcx": (torch.special.erfcx, [_u(-3, 3, 7, 5)]),
    "i0": (torch.i0, [_u(-3, 3, 7, 5)]),
    "i0e": (torch.special.i0e, [_u(-3, 3, 7, 5)]),
    "i1": (torch.special.i1, [_u(-3, 3, 7, 5)]),
    "i1e": (torch.special.i1e, [_u(-3, 3, 7, 5)]),
    "ndtr": (torch.special.ndtr, [_u(-3, 3, 7, 5)]),
    "ndtri": (torch.special.ndtri, [_u(0.1, 0.9, 7, 5)]),
    "log_ndtr": (torch.special.log_ndtr, [_u(-3, 3, 7, 5)]),
    "entr": (torch.special.entr, [_u(0.1, 3, 7, 5)]),
    "softplus": (lambda x: F.softplus(x, beta=2, threshold=3), [_u(-3, 3, 7, 5)]),
    "hardsigmoid": (F.hardsigmoid, [_u(-5, 5, 7, 5)]),
    "hardswish": (F.hardswish, [_u(-5, 5, 7, 5)]),
    "mish": (F.mish, [_u(-3, 3, 7, 5)]),
    "softshrink": (lambda x: F.softshrink(x, 0.7), [_u(-3, 3, 7, 5)]),
    "hardshrink": (lambda x: F.hardshrink(x, 0.7), [_u(-3, 3, 7, 5)]),
    "logsigmoid": (F.logsigmoid, [_u(-3, 3, 7, 5)]),
    "glu": (lambda x: F.glu(x, 0), [_u(-3, 3, 8, 5)]),
    "glu_last": (lambda x: F.glu(x, -1), [_u(-3, 3, 7, 6)]),
    "celu": (lambda x: F.celu(x, 1.5), [_u(-3, 3, 7, 5)]),
    "selu": (F.selu, [_u(-3, 3, 7, 5)]),
    "prelu": (F.prelu, [_u(-3, 3, 4, 3, 5), _u(0.1, 0.5, 3)]),
    "prelu_shared": (F.prelu, [_u(-3, 3, 4, 3, 5), _u(0.1, 0.5, 1)]),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), [_u(-3, 3, 7, 5)]),
    "tanh": (torch.tanh, [_u(-3, 3, 7, 5)]),
    "rrelu_eval": (lambda x: F.rrelu(x, 0.1, 0.3, training=False), [_u(-3, 3, 7, 5)]),
    "clamp_tensor": (torch.clamp, [_u(-3, 3, 7, 5), _u(-2, 0, 5), _u(0, 2, 7, 1)]),
    "addr": (lambda s, a, b: torch.addr(s, a, b, beta=0.5, alpha=2),
             [_u(-3, 3, 7, 5), _u(-3, 3, 7), _u(-3, 3, 5)]),
    "zeta_q": (lambda x, q: torch.special.zeta(x.detach(), q), [_u(1.5, 4, 7, 5), _u(0.5, 3, 7, 5)]),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradients_native(name, dtype):
    fn, args = GRAD_CASES[name]
    cpu = [a.to(dtype).requires_grad_() for a in args]
    tpu = [a.to(dtype).to("tpu").detach().requires_grad_() for a in args]
    out_c = fn(*cpu)
    g = torch.randn(out_c.shape, generator=torch.Generator().manual_seed(1), dtype=dtype)
    out_c.backward(g)
    torch_tpu.reset_counts()
    with _error_mode():
        out_t = fn(*tpu)
        out_t.backward(g.to("tpu"))
    assert torch_tpu.fallback_counts() == {}
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-7, atol=1e-7)
    torch.testing.assert_close(out_t.detach().cpu(), out_c.detach(), **tol)
    checked = 0
    for a, b in zip(tpu, cpu):
        if b.grad is not None:
            torch.testing.assert_close(a.grad.cpu(), b.grad, **tol)
            checked += 1
    assert checked > 0


class _error_mode:
    """TORCH_TPU_FALLBACK=error for the block."""

    def __enter__(self):
        self.prev = torch_tpu._C.fallback_mode()
        torch_tpu.set_fallback_mode("error")

    def __exit__(self, *exc):
        torch_tpu.set_fallback_mode(self.prev)


def test_half_trunc_division_rounds_quotient_like_cpu():
    # CPU rounds a/b to the half type before truncating; the samples include
    # quotients where that differs from truncating the exact quotient.
    g = torch.Generator().manual_seed(0)
    for dt in (torch.float16, torch.bfloat16):
        a = (torch.randn(20000, generator=g) * 300).to(dt)
        b = (torch.rand(20000, generator=g) * 4 + 0.1).to(dt)
        want = torch.div(a, b, rounding_mode="trunc")
        exact = torch.trunc(a.float() / b.float()).to(dt)
        assert (exact != want).any()  # the case is exercised
        got = torch.div(a.to("tpu"), b.to("tpu"), rounding_mode="trunc").cpu()
        assert torch.equal(got, want), dt


def test_in_place_and_out_forms():
    x = _u(-0.9, 0.9, 6, 7).float()
    t = x.to("tpu")
    t.acos_()
    torch.testing.assert_close(t.cpu(), x.acos())
    a = torch.arange(-6, 6, dtype=torch.int32)
    s = torch.tensor(2, dtype=torch.int32)
    ta = a.to("tpu")
    ta <<= 3
    torch.testing.assert_close(ta.cpu(), a << 3)
    out = torch.empty(12, dtype=torch.int32, device="tpu")
    torch.bitwise_right_shift(a.to("tpu"), s.to("tpu"), out=out)
    torch.testing.assert_close(out.cpu(), a >> 2)
    y = torch.empty(6, 14, device="tpu")[:, ::2]  # strided out=
    torch.special.i0e(x.to("tpu"), out=y)
    torch.testing.assert_close(y.cpu(), torch.special.i0e(x))
