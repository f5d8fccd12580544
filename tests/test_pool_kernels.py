"""Pooling and padding: native on tpu (no CPU fallback) and equal to the CPU.

(The OpInfo entries of the pooling and padding functionals:
test_opinfo_native.py.)
(b) gradients against CPU autograd, with zero fallbacks, over layouts
(contiguous, channels_last, strided, batch-less) and options.
"""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu.tools import coverage


def _channels_last(x):
    if x.dim() == 4:
        return x.contiguous(memory_format=torch.channels_last)
    if x.dim() == 5:
        return x.contiguous(memory_format=torch.channels_last_3d)
    return x


def _strided(x):
    # Every other element of a twice-as-wide tensor along the last dim.
    wide = torch.cat([x, x], dim=-1)
    return wide[..., ::2].copy_(x)


LAYOUTS = {"contiguous": lambda x: x, "channels_last": _channels_last, "strided": _strided}

GRAD_CASES = {
    "max_pool1d": ((2, 3, 17), lambda x: F.max_pool1d(x, 3, 2, 1, dilation=2, ceil_mode=True)),
    "max_pool2d": ((2, 3, 11, 12), lambda x: F.max_pool2d(x, 3, 2, 1)),
    "max_pool2d_nobatch": ((3, 9, 10), lambda x: F.max_pool2d(x, (2, 3), (1, 2), (1, 0),
                                                              ceil_mode=True)),
    "max_pool3d": ((2, 3, 5, 6, 7), lambda x: F.max_pool3d(x, 2, (1, 2, 2), 1, dilation=(1, 2, 1))),
    "avg_pool1d": ((2, 3, 17), lambda x: F.avg_pool1d(x, 4, 3, 2, ceil_mode=True,
                                                      count_include_pad=False)),
    "avg_pool2d": ((2, 3, 11, 12), lambda x: F.avg_pool2d(x, 3, 2, 1)),
    "avg_pool2d_div": ((3, 9, 10), lambda x: F.avg_pool2d(x, 3, 2, 1, divisor_override=4)),
    "avg_pool3d": ((2, 3, 5, 6, 7), lambda x: F.avg_pool3d(x, 3, 2, 1, ceil_mode=True,
                                                           count_include_pad=False)),
    "adaptive_avg_pool1d": ((2, 3, 17), lambda x: F.adaptive_avg_pool1d(x, 5)),
    "adaptive_avg_pool2d": ((2, 3, 11, 12), lambda x: F.adaptive_avg_pool2d(x, (4, 5))),
    "adaptive_avg_pool3d": ((2, 3, 5, 6, 7), lambda x: F.adaptive_avg_pool3d(x, (2, 4, 3))),
    "adaptive_max_pool1d": ((2, 3, 17), lambda x: F.adaptive_max_pool1d(x, 5)),
    "adaptive_max_pool2d": ((2, 3, 11, 12), lambda x: F.adaptive_max_pool2d(x, (4, 5))),
    "adaptive_max_pool3d": ((2, 3, 5, 6, 7), lambda x: F.adaptive_max_pool3d(x, (2, 4, 3))),
    "max_unpool2d": ((2, 3, 8, 10), lambda x: F.max_unpool2d(
        *F.max_pool2d(x, 2, return_indices=True), 2, output_size=(8, 10))),
    "max_unpool3d": ((2, 3, 4, 6, 5), lambda x: F.max_unpool3d(
        *F.max_pool3d(x, 2, return_indices=True), 2, output_size=(4, 6, 5))),
    "pad_constant": ((2, 3, 6, 7), lambda x: F.pad(x, (1, -2, 3, 0), value=0.5)),
    "pad_reflect1d": ((2, 3, 9), lambda x: F.pad(x, (3, 4), mode="reflect")),
    "pad_reflect2d": ((2, 3, 6, 7), lambda x: F.pad(x, (2, 3, 5, 1), mode="reflect")),
    "pad_reflect3d": ((2, 3, 4, 5, 6), lambda x: F.pad(x, (1, 2, 3, 1, 0, 2), mode="reflect")),
    "pad_replicate1d": ((2, 3, 9), lambda x: F.pad(x, (3, 4), mode="replicate")),
    "pad_replicate2d": ((3, 6, 7), lambda x: F.pad(x, (2, 3, 5, 1), mode="replicate")),
    "pad_replicate3d": ((2, 3, 4, 5, 6), lambda x: F.pad(x, (1, 2, 3, 1, 0, 2), mode="replicate")),
    "pad_circular2d": ((2, 3, 6, 7), lambda x: F.pad(x, (2, 3, 1, 2), mode="circular")),
}

TOL = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-10, 1e-10),
       torch.bfloat16: (1e-3, 1.6e-2), torch.float16: (1e-3, 1e-3)}


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradients_native(name, layout, dtype):
    shape, fn = GRAD_CASES[name]
    if name.startswith("avg_pool3d") and dtype in (torch.float16, torch.bfloat16):
        pytest.skip("the CPU has no half-type avg_pool3d")
    torch.manual_seed(0)
    base = torch.randn(*shape, dtype=torch.float64).to(dtype)
    x_cpu = LAYOUTS[layout](base.clone()).requires_grad_()
    x_tpu = LAYOUTS[layout](base.to("tpu")).detach().requires_grad_()
    y_cpu = fn(x_cpu)
    g = torch.randn(y_cpu.shape, dtype=torch.float64).to(dtype)
    torch_tpu.reset_counts()
    y_tpu = fn(x_tpu)
    y_tpu.backward(g.to("tpu"))
    got = x_tpu.grad.cpu()
    assert torch_tpu.fallback_counts() == {}, torch_tpu.fallback_counts()
    y_cpu.backward(g)
    atol, rtol = TOL[dtype]
    actual, expected = (y_tpu.detach().cpu(), got), (y_cpu.detach(), x_cpu.grad)
    try:
        for a, e in zip(actual, expected):
            torch.testing.assert_close(a, e, atol=atol, rtol=rtol)
    except AssertionError:
        if dtype not in (torch.float16, torch.bfloat16):
            raise
        # tpu sums half types in float32 and rounds once; the CPU rounds each
        # addition: the float64 computation of the same values decides
        x64 = LAYOUTS[layout](base.double()).requires_grad_()
        y64 = fn(x64)
        y64.backward(g.double())
        assert coverage.as_close_as_cpu(actual, expected, (y64.detach(), x64.grad)), \
            "tpu's half-type result is further from float64 than the CPU's"


def test_max_pool_nan_and_indices_match_cpu():
    x = torch.randn(2, 3, 8, 9)
    x[0, 0, 1, 1] = float("nan")
    x[1, 2, 4:6, 4:6] = float("nan")
    x[0, 1] = float("-inf")
    torch_tpu.reset_counts()
    got, gi = F.max_pool2d(x.to("tpu"), 3, 2, 1, return_indices=True)
    assert torch_tpu.fallback_counts() == {}
    want, wi = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(gi.cpu(), wi)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32,
                                   torch.int64], ids=str)
def test_integer_forward_native(dtype):
    x = torch.randint(-50, 50, (2, 3, 9, 10)).to(dtype)
    cases = [lambda t: F.max_pool2d(t, 3, 2, 1, return_indices=True),
             lambda t: F.pad(t, (1, 2, 3, 1), mode="reflect"),
             lambda t: F.pad(t, (1, 2, 3, 1), mode="replicate"),
             lambda t: F.pad(t, (1, 2, 3, 1), value=7)]
    if dtype == torch.int64:
        cases.append(lambda t: F.avg_pool2d(t, 3, 2, 1, count_include_pad=False))
    for fn in cases:
        torch_tpu.reset_counts()
        got = fn(x.to("tpu"))
        assert torch_tpu.fallback_counts() == {}
        want = fn(x)
        for a, b in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            assert torch.equal(a.cpu(), b)


def test_rejected_arguments_raise_like_cpu():
    x = torch.randn(1, 2, 5, 5)
    for fn, exc in [(lambda t: F.max_pool2d(t, 2, padding=2), RuntimeError),
                    (lambda t: F.pad(t, (5, 0), mode="reflect"), RuntimeError),
                    (lambda t: F.avg_pool2d(t, 2, divisor_override=0), RuntimeError)]:
        with pytest.raises(exc):
            fn(x)
        with pytest.raises(exc):
            fn(x.to("tpu"))
