"""Rarely used nn ops native on tpu (issue 27), with no CPU fallback and equal
to PyTorch CPU: multilabel_margin_loss (forward and backward, every
reduction, -1-terminated target lists, 0-dim/1-D/2-D/empty inputs),
fractional_max_pool2d/3d given random_samples (outputs, indices and
gradients exactly equal, every float dtype), nn.CTCLoss (_ctc_loss and its
backward: reductions, zero_infinity, padded and concatenated targets,
lengths as lists, host tensors and device tensors), and their argument
errors, and those of max_pool2d (forward and backward) and
multi_margin_loss, raised by the native kernels with CPU's exception
type and message."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu


@pytest.fixture
def fallback_error():
    mode = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("error")
    torch_tpu.reset_counts()
    yield
    torch_tpu.set_fallback_mode(mode)


def test_rows_are_bound():
    names = set(torch_tpu.native_ops())
    for n in ["multilabel_margin_loss_forward", "multilabel_margin_loss_backward",
              "fractional_max_pool2d", "fractional_max_pool2d_backward",
              "fractional_max_pool3d", "fractional_max_pool3d_backward", "_ctc_loss",
              "_ctc_loss.Tensor", "_ctc_loss_backward", "_ctc_loss_backward.Tensor"]:
        assert n in names or n + ".default" in names, n


# ---- multilabel_margin_loss ----------------------------------------------------------------

def _targets(shape, seed):
    """Per row: a few classes, then -1, then junk the loss must not read."""
    g = torch.Generator().manual_seed(seed)
    c = shape[-1] if shape else 1
    t = torch.randint(-1, c, shape, generator=g)
    if len(shape) == 2:
        for i in range(shape[0]):
            k = i % (c + 1)
            if k < c:
                t[i, k] = -1
    return t


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("shape", [(6, 9), (40, 3), (9,), (), (1, 1)])
def test_multilabel_margin_loss(dtype, reduction, shape, fallback_error):
    torch.manual_seed(3)
    x = torch.randn(shape, dtype=dtype)
    t = _targets(shape, 5)
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    y = F.multilabel_margin_loss(xc, t, reduction=reduction)
    yt = F.multilabel_margin_loss(xt, t.to("tpu"), reduction=reduction)
    gy = torch.randn(y.shape, dtype=dtype)
    y.backward(gy)
    yt.backward(gy.to("tpu"))
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    assert yt.shape == y.shape
    torch.testing.assert_close(yt.cpu(), y, **tol)
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, **tol)
    # the forward's is_target, and the backward op on its own
    out, ist = torch.ops.aten.multilabel_margin_loss_forward(x, t, 1)
    outt, istt = torch.ops.aten.multilabel_margin_loss_forward(x.to("tpu"), t.to("tpu"), 1)
    assert istt.dtype == ist.dtype and torch.equal(istt.cpu(), ist)
    assert torch_tpu.fallback_counts() == {}


def test_multilabel_margin_loss_strided_and_empty(fallback_error):
    x = torch.randn(7, 12, dtype=torch.float64)[:, ::2]
    t = _targets((7, 6), 9)
    tt = torch.zeros(6, 7, dtype=torch.long).t()
    tt.copy_(t)
    y = F.multilabel_margin_loss(x, t, reduction="none")
    yt = F.multilabel_margin_loss(x.to("tpu"), tt.to("tpu").t().contiguous().t(), reduction="none")
    torch.testing.assert_close(yt.cpu(), y, rtol=1e-12, atol=1e-12)
    e = torch.randn(0, 4, device="tpu", requires_grad=True)
    ye = F.multilabel_margin_loss(e, torch.zeros(0, 4, dtype=torch.long, device="tpu"),
                                  reduction="none")
    assert ye.shape == (0,)
    ye.sum().backward()
    assert e.grad.shape == (0, 4)
    assert torch_tpu.fallback_counts() == {}


def test_multilabel_margin_loss_target_out_of_range(fallback_error):
    with pytest.raises(RuntimeError, match="argument #2 'target' is out of range"):
        F.multilabel_margin_loss(torch.randn(3, 4, device="tpu"),
                                 torch.tensor([[0, 4, -1, 0]] * 3, device="tpu")).item()
    with pytest.raises(RuntimeError, match="argument #2 'target' is out of range"):
        F.multilabel_margin_loss(torch.randn(3, 4, device="tpu"),
                                 torch.tensor([[0, -2, -1, 0]] * 3, device="tpu")).item()


# ---- fractional_max_pool2d / 3d ---------------------------------------------------------------

POOL_CASES = [
    # (spatial dims, input shape, kernel, output size)
    (2, (2, 3, 9, 11), (2, 3), (5, 6)),
    (2, (4, 13, 7), (3, 2), (9, 4)),
    (2, (1, 2, 31, 17), (3, 3), (20, 1)),
    (2, (2, 2, 8, 8), (1, 1), (8, 8)),
    (3, (2, 2, 7, 6, 9), (2, 3, 2), (4, 3, 5)),
    (3, (3, 8, 6, 5), (2, 2, 3), (4, 4, 2)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", range(len(POOL_CASES)))
def test_fractional_max_pool_exact(dtype, case, fallback_error):
    sd, shape, k, o = POOL_CASES[case]
    torch.manual_seed(case)
    x = torch.randn(shape).to(dtype)
    if case == 2:
        x[0, 0, 3, 4] = float("nan")  # a NaN wins its windows
    n = shape[0] if len(shape) == sd + 2 else 1
    rs = torch.rand(n, shape[-sd - 1], sd).to(dtype)
    fn = F.fractional_max_pool2d if sd == 2 else F.fractional_max_pool3d
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    y, i = fn(xc, k, output_size=o, return_indices=True, _random_samples=rs)
    yt, it = fn(xt, k, output_size=o, return_indices=True, _random_samples=rs.to("tpu"))
    assert torch.equal(it.cpu(), i)
    torch.testing.assert_close(yt.cpu(), y, rtol=0, atol=0, equal_nan=True)
    gy = torch.randn(y.shape).to(dtype)
    y.backward(gy)
    yt.backward(gy.to("tpu"))
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=0, atol=0)
    assert torch_tpu.fallback_counts() == {}


def test_fractional_max_pool_output_ratio_and_empty_batch(fallback_error):
    x = torch.randn(2, 3, 10, 10)
    rs = torch.rand(2, 3, 2)
    y = F.fractional_max_pool2d(x, 3, output_ratio=(0.5, 0.5), _random_samples=rs)
    yt = F.fractional_max_pool2d(x.to("tpu"), 3, output_ratio=(0.5, 0.5),
                                 _random_samples=rs.to("tpu"))
    assert torch.equal(yt.cpu(), y)
    e, ei = torch.ops.aten.fractional_max_pool2d(torch.randn(0, 3, 7, 8, device="tpu"), [2, 3],
                                                 [4, 5], torch.rand(0, 3, 2, device="tpu"))
    assert e.shape == (0, 3, 4, 5) and ei.dtype == torch.long
    assert torch_tpu.fallback_counts() == {}


# ---- ctc_loss ---------------------------------------------------------------------------

def _ctc_inputs(dtype, T=16, B=5, C=7, S=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    lp = torch.randn(T, B, C, dtype=dtype, generator=g).log_softmax(2)
    tg = torch.randint(1, C, (B, S), generator=g)
    tg[0, 1] = tg[0, 2]  # a repeated label: needs a blank between them
    il = torch.tensor([T, T - 3, 4, 0, T])[:B]
    tl = torch.tensor([S, 3, 5, 0, 0])[:B]  # item 2 cannot align (inf), 3 and 4 are empty
    return lp, tg, il, tl


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("zero_infinity", [False, True])
@pytest.mark.parametrize("form", ["padded", "concatenated", "int_lists", "int32_targets"])
def test_ctc_loss(dtype, reduction, zero_infinity, form, fallback_error):
    lp, tg, il, tl = _ctc_inputs(dtype)
    if form == "concatenated":
        tg = torch.cat([tg[b, :tl[b]] for b in range(len(tl))])
    if form == "int32_targets":
        tg = tg.int()
    lens = (il.tolist(), tl.tolist()) if form == "int_lists" else (il, tl)
    a, b = lp.clone().requires_grad_(), lp.to("tpu").requires_grad_()
    y = F.ctc_loss(a, tg, *lens, blank=0, reduction=reduction, zero_infinity=zero_infinity)
    yt = F.ctc_loss(b, tg.to("tpu"), *lens, blank=0, reduction=reduction,
                    zero_infinity=zero_infinity)
    gy = torch.rand(y.shape, dtype=dtype) + 0.5
    y.backward(gy)
    yt.backward(gy.to("tpu"))
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-11, atol=1e-12)
    torch.testing.assert_close(yt.cpu(), y, equal_nan=True, **tol)
    torch.testing.assert_close(b.grad.cpu(), a.grad, equal_nan=True, **tol)
    assert torch_tpu.fallback_counts() == {}


def test_ctc_loss_outputs_and_unbatched(fallback_error):
    lp, tg, il, tl = _ctc_inputs(torch.float64, C=5)
    lp[:, :, 2] = -1e4  # a label that is (nearly) never emitted
    nll, alpha = torch.ops.aten._ctc_loss(lp, tg, il.tolist(), tl.tolist(), 3, False)
    nllt, alphat = torch.ops.aten._ctc_loss(lp.to("tpu"), tg.to("tpu"), il.tolist(),
                                            tl.tolist(), 3, False)
    torch.testing.assert_close(nllt.cpu(), nll, rtol=1e-12, atol=1e-12)
    assert alphat.shape == alpha.shape
    for b in range(len(il)):  # the CPU sets only each item's computed region
        if il[b] > 0:
            torch.testing.assert_close(alphat[b, :il[b], :2 * tl[b] + 1].cpu(),
                                       alpha[b, :il[b], :2 * tl[b] + 1], rtol=1e-12, atol=1e-12)
    x = torch.randn(10, 6, dtype=torch.float64).log_softmax(1)
    t = torch.tensor([1, 2, 2, 5])
    a, b = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    y = F.ctc_loss(a, t, torch.tensor(10), torch.tensor(4), reduction="none")
    yt = F.ctc_loss(b, t.to("tpu"), torch.tensor(10), torch.tensor(4), reduction="none")
    y.backward()
    yt.backward()
    torch.testing.assert_close(yt.cpu(), y)
    torch.testing.assert_close(b.grad.cpu(), a.grad)
    assert torch_tpu.fallback_counts() == {}


@pytest.mark.parametrize("lengths", ["host_tensors", "device_int32", "lists"])
def test_ctc_loss_large_batch_and_device_lengths(lengths, fallback_error):
    """Lengths bind as device int64 copies of lists and host tensors (or as
    the device tensors given), so batches beyond an int-list attr's 12
    entries stay native."""
    g = torch.Generator().manual_seed(4)
    lp = torch.randn(30, 40, 9, dtype=torch.float64, generator=g).log_softmax(2)
    tg = torch.randint(1, 9, (40, 8), generator=g)
    il = torch.randint(20, 31, (40,), generator=g)
    tl = torch.randint(0, 9, (40,), generator=g)
    lens = {"host_tensors": (il, tl), "device_int32": (il.int().to("tpu"), tl.int().to("tpu")),
            "lists": (il.tolist(), tl.tolist())}[lengths]
    a, b = lp.clone().requires_grad_(), lp.to("tpu").requires_grad_()
    y = F.ctc_loss(a, tg, il, tl)
    yt = F.ctc_loss(b, tg.to("tpu"), *lens)
    y.backward()
    yt.backward()
    torch.testing.assert_close(yt.cpu(), y, rtol=1e-11, atol=1e-12)
    torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-11, atol=1e-12)
    assert torch_tpu.fallback_counts() == {}


# ---- errors raised natively (CPU's type and message, fallbacks turned into errors) -----------

A = torch.ops.aten
_X4 = (2, 3, 7, 8)


def _lp(d):
    return torch.randn(6, 2, 4, device=d).log_softmax(2)


def _tg(d):
    return torch.ones(2, 3, dtype=torch.long, device=d)


def _mp_backward(d, grad=None, indices=None, grad_dtype=None, kernel=(2, 2), padding=(0, 0)):
    """max_pool2d_with_indices_backward of a [2, 3, 7, 8] input pooled 2x2
    (output [2, 3, 3, 4]), with one argument made wrong."""
    x = torch.randn(_X4, device=d)
    out, idx = A.max_pool2d_with_indices(x, [2, 2], [2, 2])
    g = torch.randn(grad, device=d) if grad else torch.randn_like(out)
    if grad_dtype is not None:
        g = g.to(grad_dtype)
    if indices:
        idx = torch.zeros(indices, dtype=torch.long, device=d)
    return A.max_pool2d_with_indices_backward(g, x, list(kernel), [2, 2], list(padding), [1, 1],
                                              False, idx)


ERROR_CASES = {
    "mlm_rank3": lambda d: F.multilabel_margin_loss(
        torch.randn(2, 3, 4, device=d), torch.zeros(2, 3, 4, dtype=torch.long, device=d)),
    "mlm_empty_classes": lambda d: F.multilabel_margin_loss(
        torch.randn(3, 0, device=d), torch.zeros(3, 0, dtype=torch.long, device=d)),
    "mlm_target_size": lambda d: F.multilabel_margin_loss(
        torch.randn(3, 4, device=d), torch.zeros(3, 5, dtype=torch.long, device=d)),
    "mlm_target_1d": lambda d: F.multilabel_margin_loss(
        torch.randn(3, 4, device=d), torch.zeros(3, dtype=torch.long, device=d)),
    "mlm_target_int32": lambda d: F.multilabel_margin_loss(
        torch.randn(3, 4, device=d), torch.zeros(3, 4, dtype=torch.int, device=d)),
    "mlm_half": lambda d: F.multilabel_margin_loss(
        torch.randn(3, 4, device=d).half(), torch.zeros(3, 4, dtype=torch.long, device=d)),
    "fmp2_kernel_zero": lambda d: A.fractional_max_pool2d(torch.randn(_X4, device=d), [0, 3],
                                                          [4, 5], torch.rand(2, 3, 2, device=d)),
    "fmp2_too_high": lambda d: A.fractional_max_pool2d(torch.randn(_X4, device=d), [2, 3],
                                                       [7, 5], torch.rand(2, 3, 2, device=d)),
    "fmp2_too_wide": lambda d: A.fractional_max_pool2d(torch.randn(_X4, device=d), [2, 3],
                                                       [4, 7], torch.rand(2, 3, 2, device=d)),
    "fmp2_rank2": lambda d: A.fractional_max_pool2d(torch.randn(7, 8, device=d), [2, 3], [4, 5],
                                                    torch.rand(1, 1, 2, device=d)),
    "fmp2_empty_channels": lambda d: A.fractional_max_pool2d(
        torch.randn(2, 0, 7, 8, device=d), [2, 3], [4, 5], torch.rand(2, 0, 2, device=d)),
    "fmp2_samples_channels": lambda d: A.fractional_max_pool2d(
        torch.randn(_X4, device=d), [2, 3], [4, 5], torch.rand(2, 2, 2, device=d)),
    "fmp2_samples_batch": lambda d: A.fractional_max_pool2d(
        torch.randn(_X4, device=d), [2, 3], [4, 5], torch.rand(1, 3, 2, device=d)),
    "fmp2_samples_last": lambda d: A.fractional_max_pool2d(
        torch.randn(_X4, device=d), [2, 3], [4, 5], torch.rand(2, 3, 3, device=d)),
    "fmp2_samples_rank": lambda d: A.fractional_max_pool2d(
        torch.randn(3, 7, 8, device=d), [2, 3], [4, 5], torch.rand(3, 2, device=d)),
    "fmp2_samples_dtype": lambda d: A.fractional_max_pool2d(
        torch.randn(_X4, device=d), [2, 3], [4, 5], torch.rand(2, 3, 2, device=d).double()),
    "fmp2_negative_output": lambda d: A.fractional_max_pool2d(
        torch.randn(_X4, device=d), [2, 3], [-1, 5], torch.rand(2, 3, 2, device=d)),
    "fmp3_kernel_zero": lambda d: A.fractional_max_pool3d(
        torch.randn(2, 3, 7, 8, 6, device=d), [0, 3, 2], [4, 5, 3],
        torch.rand(2, 3, 3, device=d)),
    "fmp3_too_deep": lambda d: A.fractional_max_pool3d(
        torch.randn(2, 3, 7, 8, 6, device=d), [2, 3, 2], [7, 5, 3],
        torch.rand(2, 3, 3, device=d)),
    "fmp3_too_wide": lambda d: A.fractional_max_pool3d(
        torch.randn(2, 3, 7, 8, 6, device=d), [2, 3, 2], [4, 5, 9],
        torch.rand(2, 3, 3, device=d)),
    "fmp3_rank3": lambda d: A.fractional_max_pool3d(torch.randn(3, 7, 8, device=d), [2, 3, 2],
                                                    [4, 5, 3], torch.rand(2, 3, 3, device=d)),
    "fmp3_window_reaches_end": lambda d: A.fractional_max_pool3d(
        torch.randn(3, 8, 6, 5, device=d), [2, 2, 3], [4, 5, 2], torch.rand(1, 3, 3, device=d)),
    "fmp3_samples_last": lambda d: A.fractional_max_pool3d(
        torch.randn(2, 3, 7, 8, 6, device=d), [2, 3, 2], [4, 5, 3],
        torch.rand(2, 3, 2, device=d)),
    "fmp2_backward_grad_size": lambda d: A.fractional_max_pool2d_backward(
        torch.randn(2, 3, 4, 6, device=d), torch.randn(_X4, device=d), [2, 3], [4, 5],
        torch.zeros(2, 3, 4, 5, dtype=torch.long, device=d)),
    "ctc_blank": lambda d: A._ctc_loss(_lp(d), _tg(d), [6, 6], [3, 3], 4),
    "ctc_input_lengths_count": lambda d: A._ctc_loss(_lp(d), _tg(d), [6], [3, 3]),
    "ctc_target_lengths_count": lambda d: A._ctc_loss(_lp(d), _tg(d), [6, 6], [3]),
    "ctc_target_length_negative": lambda d: A._ctc_loss(_lp(d), _tg(d), [6, 6], [3, -1]),
    "ctc_input_length_negative": lambda d: A._ctc_loss(_lp(d), _tg(d), [6, -1], [3, 1]),
    "ctc_input_length_too_long": lambda d: A._ctc_loss(_lp(d), _tg(d), [6, 7], [3, 1]),
    "ctc_targets_too_short": lambda d: A._ctc_loss(_lp(d), _tg(d), [6, 6], [4, 1]),
    "ctc_targets_batch": lambda d: A._ctc_loss(_lp(d), torch.ones(3, 3, dtype=torch.long,
                                                                  device=d), [6, 6], [3, 1]),
    "ctc_concatenated_size": lambda d: A._ctc_loss(_lp(d), torch.ones(5, dtype=torch.long,
                                                                      device=d), [6, 6], [3, 1]),
    "ctc_log_probs_2d": lambda d: A._ctc_loss(torch.randn(6, 4, device=d), _tg(d), [6, 6],
                                              [3, 1]),
    "ctc_targets_3d": lambda d: A._ctc_loss(_lp(d), torch.ones(2, 3, 1, dtype=torch.long,
                                                               device=d), [6, 6], [3, 1]),
    "ctc_targets_float": lambda d: A._ctc_loss(_lp(d), torch.ones(2, 3, device=d), [6, 6],
                                               [3, 1]),
    "ctc_half": lambda d: A._ctc_loss(_lp(d).half(), _tg(d), [6, 6], [3, 1]),
    "maxpool_kernel_zero": lambda d: F.max_pool2d(torch.randn(_X4, device=d), 0),
    "maxpool_kernel_negative": lambda d: F.max_pool2d(torch.randn(_X4, device=d), (2, -1)),
    "maxpool_stride_zero": lambda d: F.max_pool2d(torch.randn(_X4, device=d), 2, stride=0),
    "maxpool_stride_negative": lambda d: F.max_pool2d(torch.randn(_X4, device=d), 2,
                                                      stride=(-1, 1)),
    "maxpool_pad_over_half": lambda d: F.max_pool2d(torch.randn(_X4, device=d), 2, padding=2),
    "maxpool_pad_over_half_indices": lambda d: F.max_pool2d(
        torch.randn(_X4, device=d), 2, padding=2, return_indices=True),
    "maxpool_pad_over_half_dilated": lambda d: F.max_pool2d(torch.randn(_X4, device=d), 3,
                                                            padding=2, dilation=2),
    "maxpool_pad_negative": lambda d: F.max_pool2d(torch.randn(_X4, device=d), 2, padding=-1),
    "maxpool_dilation_zero": lambda d: F.max_pool2d(torch.randn(_X4, device=d), 2, dilation=0),
    "maxpool_output_too_small": lambda d: F.max_pool2d(torch.randn(2, 3, 2, 2, device=d), 3),
    "maxpool_rank2": lambda d: F.max_pool2d(torch.randn(8, 8, device=d), 2),
    "maxpool_empty_channels": lambda d: F.max_pool2d(torch.randn(2, 0, 8, 8, device=d), 2),
    "maxpool_kernel_3_ints": lambda d: A.max_pool2d_with_indices(torch.randn(_X4, device=d),
                                                                 [2, 2, 2]),
    "maxpool_channels_last_pad": lambda d: F.max_pool2d(
        torch.randn(_X4, device=d).contiguous(memory_format=torch.channels_last), 2, padding=2),
    "maxpool_bwd_grad_size": lambda d: _mp_backward(d, grad=(2, 3, 4, 4)),
    "maxpool_bwd_grad_rank": lambda d: _mp_backward(d, grad=(3, 3, 4)),
    "maxpool_bwd_indices_size": lambda d: _mp_backward(d, indices=(2, 3, 3, 3)),
    "maxpool_bwd_grad_dtype": lambda d: _mp_backward(d, grad_dtype=torch.float64),
    "maxpool_bwd_kernel_zero": lambda d: _mp_backward(d, kernel=[0, 2]),
    "maxpool_bwd_pad_over_half": lambda d: _mp_backward(d, padding=[2, 0]),
    "maxpool_bwd_kernel_3_ints": lambda d: _mp_backward(d, kernel=[2, 2, 2]),
    "mmargin_target_size": lambda d: F.multi_margin_loss(
        torch.randn(3, 5, device=d), torch.tensor([1, 2], device=d)),
    "mmargin_target_2d": lambda d: F.multi_margin_loss(
        torch.randn(3, 5, device=d), torch.zeros(3, 1, dtype=torch.long, device=d)),
    "mmargin_vector_target_size": lambda d: F.multi_margin_loss(
        torch.randn(5, device=d), torch.tensor([1, 2], device=d)),
    "mmargin_rank3": lambda d: F.multi_margin_loss(
        torch.randn(3, 5, 2, device=d), torch.zeros(3, dtype=torch.long, device=d)),
    "mmargin_empty_classes": lambda d: F.multi_margin_loss(
        torch.randn(3, 0, device=d), torch.zeros(3, dtype=torch.long, device=d)),
    "mmargin_weight_2d": lambda d: A.multi_margin_loss(
        torch.randn(3, 5, device=d), torch.zeros(3, dtype=torch.long, device=d), 1, 1.0,
        torch.ones(1, 5, device=d)),
    "mmargin_weight_size": lambda d: A.multi_margin_loss(
        torch.randn(3, 5, device=d), torch.zeros(3, dtype=torch.long, device=d), 1, 1.0,
        torch.ones(4, device=d)),
    "mmargin_backward_target_size": lambda d: A.multi_margin_loss_backward(
        torch.tensor(1.0, device=d), torch.randn(3, 5, device=d), torch.tensor([1, 2], device=d),
        1, 1.0),
}


# The CPU has no half kernel (NotImplementedError); tpu leaves those dtypes to
# the fallback, so with fallbacks turned into errors only the type matches.
TYPE_ONLY = {"mlm_half", "ctc_half"}


@pytest.mark.parametrize("name", sorted(ERROR_CASES))
def test_native_errors_match_cpu(name):
    fn = ERROR_CASES[name]
    with pytest.raises(Exception) as want:
        fn("cpu")
    mode = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("error")
    try:
        with pytest.raises(type(want.value)) as got:
            r = fn("tpu")
            (r[0] if isinstance(r, tuple) else r).cpu()
    finally:
        torch_tpu.set_fallback_mode(mode)
    if name not in TYPE_ONLY:
        # errors found while a kernel runs carry the runtime's "in op ..." prefix
        assert str(want.value).splitlines()[0] in str(got.value)
