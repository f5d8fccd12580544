"""The convolution family (convolution, convolution_backward, im2col, col2im):
native on tpu, equal to CPU, forward and backward, with zero fallbacks
(the OpInfo entries: test_opinfo_native.py)."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu


@pytest.fixture
def no_fallback():
    mode = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("error")
    torch_tpu.reset_counts()
    try:
        yield
    finally:
        torch_tpu.set_fallback_mode(mode)
    assert torch_tpu.fallback_counts() == {}


# (function, input shape, weight shape, bias?, kwargs, memory format)
CASES = {
    "conv1d": (F.conv1d, (2, 3, 11), (4, 3, 3), True, dict(stride=2, padding=1), None),
    "conv1d_batchless": (F.conv1d, (3, 10), (2, 3, 4), False, dict(dilation=2), None),
    "conv2d": (F.conv2d, (2, 3, 9, 8), (4, 3, 3, 3), True, dict(padding=1), None),
    "conv2d_stride_dilation": (F.conv2d, (2, 4, 11, 10), (6, 2, 3, 2),
                               True, dict(stride=(2, 1), padding=(2, 1), dilation=(2, 3),
                                          groups=2), None),
    "conv2d_channels_last": (F.conv2d, (2, 8, 7, 9), (5, 8, 3, 3), True, dict(padding=1),
                             torch.channels_last),
    "conv2d_depthwise": (F.conv2d, (2, 6, 9, 9), (6, 1, 3, 3), True,
                         dict(padding=1, groups=6), None),
    "conv2d_depthwise_stride": (F.conv2d, (2, 4, 10, 9), (8, 1, 3, 3), False,
                                dict(stride=2, padding=1, groups=4), torch.channels_last),
    # float32 3x3 stride 1 with >= 16 channels and >= 64 2x2 tiles per sample:
    # the Winograd F(2x2, 3x3) path
    "conv2d_winograd": (F.conv2d, (2, 32, 17, 16), (24, 32, 3, 3), True, dict(padding=1), None),
    "conv2d_winograd_groups_pad0": (F.conv2d, (1, 32, 18, 17), (32, 16, 3, 3), False,
                                    dict(groups=2), None),
    "conv2d_winograd_channels_last_pad2": (F.conv2d, (2, 16, 14, 13), (16, 16, 3, 3), True,
                                           dict(padding=2), torch.channels_last),
    "conv_transpose2d_winograd": (F.conv_transpose2d, (2, 16, 17, 15), (16, 24, 3, 3), True,
                                  dict(padding=1), None),
    # enough tiles for the weight gradient's Winograd sums to split over threads
    "conv2d_winograd_wide": (F.conv2d, (4, 64, 28, 30), (48, 64, 3, 3), True, dict(padding=1),
                             None),
    "conv2d_1x1": (F.conv2d, (2, 16, 6, 7), (8, 16, 1, 1), True, {}, None),
    "conv2d_same": (F.conv2d, (1, 3, 8, 8), (4, 3, 4, 3), True, dict(padding="same"), None),
    "conv2d_batchless": (F.conv2d, (3, 7, 7), (2, 3, 3, 3), True, dict(stride=2), None),
    "conv3d": (F.conv3d, (2, 2, 5, 6, 4), (3, 2, 2, 3, 2), True, dict(padding=1), None),
    "conv3d_channels_last": (F.conv3d, (1, 4, 4, 5, 6), (4, 2, 3, 3, 3), True,
                             dict(padding=1, groups=2), torch.channels_last_3d),
    "conv_transpose1d": (F.conv_transpose1d, (2, 3, 7), (3, 4, 3), True,
                         dict(stride=2, padding=1, output_padding=1), None),
    "conv_transpose2d": (F.conv_transpose2d, (2, 4, 5, 6), (4, 3, 3, 3), True,
                         dict(stride=2, padding=1, output_padding=1, groups=2), None),
    "conv_transpose2d_dilation": (F.conv_transpose2d, (1, 3, 5, 5), (3, 2, 3, 2), False,
                                  dict(stride=(1, 2), dilation=2), torch.channels_last),
    "conv_transpose3d": (F.conv_transpose3d, (1, 2, 3, 4, 3), (2, 3, 2, 3, 2), True,
                         dict(stride=2, padding=(0, 1, 0)), None),
    "conv_transpose2d_batchless": (F.conv_transpose2d, (3, 4, 4), (3, 2, 3, 3), True,
                                   dict(stride=2), None),
}


def _run(name, device, dtype, exact=False, absolute=False):
    """The case's output and gradients on `device` in `dtype`; with ``exact``
    the same in float64 on the dtype-rounded inputs (on the CPU), and with
    ``absolute`` also every operand made non-negative (the sums of |terms|:
    convolutions are linear in each operand)."""
    fn, xs, ws, has_bias, kw, fmt = CASES[name]
    g = torch.Generator().manual_seed(len(name))
    run_dtype = torch.float64 if exact else dtype

    def draw(shape):
        t = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype).to(run_dtype)
        return t.abs() if absolute else t

    x, w = draw(xs), draw(ws)
    out_ch = ws[0] if "transpose" not in name else ws[1] * kw.get("groups", 1)
    b = draw(out_ch) if has_bias else None
    if fmt is not None:
        x = x.contiguous(memory_format=fmt)
    leaves = [t.to(device).requires_grad_() for t in (x, w, b) if t is not None]
    xd, wd = leaves[0], leaves[1]
    bd = leaves[2] if has_bias else None
    y = fn(xd, wd, bd, **kw)
    gy = draw(y.shape).to(device)
    grads = torch.autograd.grad(y, leaves, gy)
    return [y.detach().cpu()] + [t.cpu() for t in grads]


TOL = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-10, 1e-10),
       torch.bfloat16: (5e-2, 5e-2), torch.float16: (5e-3, 5e-3)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16],
                         ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_and_gradients_match_cpu(name, dtype, no_fallback):
    got = _run(name, "tpu", dtype)
    want = _run(name, "cpu", dtype if dtype != torch.bfloat16 else torch.float32)
    atol, rtol = TOL[dtype]
    for k, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == dtype
        scale = max(1.0, b.abs().max().item())
        torch.testing.assert_close(a.float(), b.float(), atol=atol * scale, rtol=rtol,
                                   msg=lambda m: f"result {k}: {m}")
    native = torch_tpu.native_counts()
    assert native.get("convolution.default", 0) >= 1
    assert native.get("convolution_backward.default", 0) >= 1


def test_output_mask_weight_only(no_fallback):
    x = torch.randn(2, 3, 8, 8)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    (gw,) = torch.autograd.grad(F.conv2d(x.to("tpu"), w.to("tpu")).sum(), [w])
    (want,) = torch.autograd.grad(F.conv2d(x, w).sum(), [w])
    torch.testing.assert_close(gw.cpu(), want, atol=1e-4, rtol=1e-4)


def test_unfold_fold_and_gradients(no_fallback):
    x = torch.randn(2, 3, 9, 7, dtype=torch.float64)
    kw = dict(kernel_size=(2, 3), dilation=(1, 2), padding=1, stride=(2, 1))
    xd = x.to("tpu").requires_grad_()
    xc = x.clone().requires_grad_()
    cols_d, cols_c = F.unfold(xd, **kw), F.unfold(xc, **kw)
    torch.testing.assert_close(cols_d.detach().cpu(), cols_c.detach())
    back_d, back_c = F.fold(cols_d, (9, 7), **kw), F.fold(cols_c, (9, 7), **kw)
    torch.testing.assert_close(back_d.detach().cpu(), back_c.detach())
    g = torch.randn(back_c.shape, dtype=torch.float64)
    (gd,) = torch.autograd.grad(back_d, [xd], g.to("tpu"))
    (gc,) = torch.autograd.grad(back_c, [xc], g)
    torch.testing.assert_close(gd.cpu(), gc)


def test_out_variant_into_strided_output(no_fallback):
    x = torch.randn(2, 3, 6, 6)
    w = torch.randn(4, 3, 3, 3)
    b = torch.randn(4)
    base = torch.zeros(2, 8, 4, 8, device="tpu")
    out = base[:, ::2, :, ::2]
    torch.ops.aten.convolution.out(x.to("tpu"), w.to("tpu"), b.to("tpu"), [1, 1], [0, 0],
                                   [1, 1], False, [0], 1, out=out)
    torch.testing.assert_close(out.cpu(), F.conv2d(x, w, b), atol=1e-5, rtol=1e-5)
    assert base[:, 1::2].abs().sum().item() == 0


def test_integer_convolution_native():
    x = torch.randint(-3, 4, (2, 3, 7, 7))
    w = torch.randint(-3, 4, (4, 3, 3, 3))
    torch_tpu.reset_counts()
    got = F.conv2d(x.to("tpu"), w.to("tpu"), stride=2, padding=1, dilation=2)
    assert torch_tpu.fallback_counts() == {}
    assert torch.equal(got.cpu(), F.conv2d(x, w, stride=2, padding=1, dilation=2))
    got = F.conv2d(x.int().to("tpu"), w.int().to("tpu"), padding=1)
    assert torch.equal(got.cpu(), F.conv2d(x.int(), w.int(), padding=1))
    assert torch_tpu.fallback_counts() == {}


@pytest.mark.parametrize("make", [
    lambda d: F.conv2d(torch.ones(1, 2, 5, 5, dtype=torch.bool, device=d),
                       torch.ones(3, 2, 3, 3, dtype=torch.bool, device=d)),
    lambda d: F.conv2d(torch.ones(1, 2, 5, 5, device=d), torch.ones(3, 3, 3, 3, device=d)),
    lambda d: F.conv2d(torch.ones(1, 2, 5, 5, device=d), torch.ones(3, 2, 3, 3, device=d,
                                                                    dtype=torch.float64)),
    lambda d: F.conv2d(torch.ones(1, 2, 2, 2, device=d), torch.ones(3, 2, 3, 3, device=d)),
    lambda d: F.conv_transpose2d(torch.ones(1, 2, 3, 3, dtype=torch.int32, device=d),
                                 torch.ones(2, 3, 3, 3, dtype=torch.int32, device=d)),
], ids=["bool", "channels", "dtypes", "too_small", "int32_transposed"])
def test_errors_match_cpu(make):
    with pytest.raises(Exception) as cpu:
        make("cpu")
    with pytest.raises(Exception) as tpu:
        make("tpu")
    assert type(tpu.value) is type(cpu.value)


# ---- half types round once ---------------------------------------------------------------

_MANT = {torch.float16: (10, -24), torch.bfloat16: (7, -133)}


def _half_ulp(r, dtype):
    """The spacing of `dtype` at each |r| (float64 in, float64 out)."""
    bits, tiny = _MANT[dtype]
    _, e = torch.frexp(r.abs())
    return torch.pow(2.0, (e - 1 - bits).clamp(min=tiny).double())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_half_types_round_once_against_float64(name, dtype, no_fallback):
    """Every half-type result and gradient is the float64 result rounded once:
    within half a unit in the last place of the dtype, plus float32's own
    accumulation error (2^-16 of the sum of the terms' magnitudes). A kernel
    that rounds a column sum, a col2im partial sum or the sum before the bias
    to the half type exceeds it (PyTorch's CPU without AVX-512 FP16 does, for
    float16 transposed convolutions; with it, the CPU meets this bound)."""
    got = _run(name, "tpu", dtype)
    exact = _run(name, "cpu", dtype, exact=True)
    mag = _run(name, "cpu", dtype, exact=True, absolute=True)
    for k, (a, r, m) in enumerate(zip(got, exact, mag)):
        assert a.dtype == dtype
        a = a.double()
        err = (a - r).abs()
        bound = 0.5 * _half_ulp(torch.maximum(a.abs(), r.abs()), dtype) + 2.0 ** -16 * m
        worst = (err / bound).max().item() if err.numel() else 0.0
        assert worst <= 1.0, (f"result {k}: error {err.max().item():.4g} is {worst:.2f}x the "
                              f"one-rounding bound")


def test_half_col2im_round_once_against_float64(no_fallback):
    """fold (col2im) of float16 columns: each output the float64 sum of its
    overlapping columns, rounded once."""
    g = torch.Generator().manual_seed(3)
    cols = torch.randn(2, 3 * 9, 64, generator=g).half()
    kw = dict(output_size=(10, 10), kernel_size=3, padding=0, stride=1)
    got = F.fold(cols.to("tpu"), **kw).cpu().double()
    exact = F.fold(cols.double(), **kw)
    mag = F.fold(cols.double().abs(), **kw)
    bound = 0.5 * _half_ulp(torch.maximum(got.abs(), exact.abs()), torch.float16) + 2.0 ** -16 * mag
    assert bool(((got - exact).abs() <= bound).all())
