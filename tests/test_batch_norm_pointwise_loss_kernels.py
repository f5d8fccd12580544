"""Batch norm's training forms and the pointwise losses native on tpu (zero
fallbacks) and equal to CPU: batch norm's in-place running statistics
(_native_batch_norm_legit, _batch_norm_with_update: rows with mutated
inputs), the pointwise losses (mse, smooth_l1, huber, binary_cross_entropy,
multi_margin, forward and backward), channel_shuffle and narrow_copy: gradients against CPU autograd and a
BatchNorm2d training step (their OpInfo entries: test_opinfo_native.py)."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu.tools import coverage


@pytest.fixture
def fallback_error():
    mode = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("error")
    yield
    torch_tpu.set_fallback_mode(mode)


def test_rows_are_bound():
    names = set(torch_tpu.native_ops())
    for n in ["_native_batch_norm_legit", "_native_batch_norm_legit.out", "_batch_norm_with_update",
              "mse_loss", "mse_loss_backward", "smooth_l1_loss_backward", "huber_loss_backward",
              "binary_cross_entropy_backward", "channel_shuffle"]:
        assert n in names or n + ".default" in names, n


LOSSES = {
    "mse": lambda x, t, r: F.mse_loss(x, t, reduction=r),
    "smooth_l1": lambda x, t, r: F.smooth_l1_loss(x, t, reduction=r, beta=0.6),
    "smooth_l1_beta0": lambda x, t, r: F.smooth_l1_loss(x, t, reduction=r, beta=0.0),
    "huber": lambda x, t, r: F.huber_loss(x, t, reduction=r, delta=0.7),
    "bce": lambda x, t, r: F.binary_cross_entropy(x, t, reduction=r),
    "bce_weight": lambda x, t, r: F.binary_cross_entropy(
        x, t, weight=torch.linspace(0.5, 2, x.shape[-1], dtype=x.dtype, device=x.device),
        reduction=r),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_loss_gradients(name, reduction, dtype, fallback_error):
    torch.manual_seed(1)
    x = torch.rand(6, 33, dtype=dtype) * 0.98 + 0.01
    t = torch.rand(6, 33, dtype=dtype)
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    tc, tt = t.clone().requires_grad_(name != "bce" and name != "bce_weight"), t.to("tpu")
    tt.requires_grad_(tc.requires_grad)
    torch_tpu.reset_counts()
    y, yt = LOSSES[name](xc, tc, reduction), LOSSES[name](xt, tt, reduction)
    gy = torch.randn(y.shape, dtype=dtype)
    y.backward(gy)
    yt.backward(gy.to("tpu"))
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(yt.cpu(), y, **tol)
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, **tol)
    if tc.requires_grad:
        torch.testing.assert_close(tt.grad.cpu(), tc.grad, **tol)
    assert torch_tpu.fallback_counts() == {}


def test_bce_input_range_raises():
    x = torch.tensor([0.5, 1.5], device="tpu")
    with pytest.raises(RuntimeError):
        F.binary_cross_entropy(x, torch.ones(2, device="tpu")).item()


def test_channel_shuffle_gradient(fallback_error):
    x = torch.randn(2, 12, 3, 5)
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    w = torch.randn(2, 12, 3, 5)
    (F.channel_shuffle(xc, 4) * w).sum().backward()
    (F.channel_shuffle(xt, 4) * w.to("tpu")).sum().backward()
    assert torch.equal(F.channel_shuffle(xt, 4).cpu(), F.channel_shuffle(x, 4))
    assert torch.equal(xt.grad.cpu(), xc.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_batchnorm2d_train_step(dtype, channels_last, fallback_error):
    torch.manual_seed(0)
    m = torch.nn.BatchNorm2d(5, momentum=0.3).to(dtype)
    mt = torch.nn.BatchNorm2d(5, momentum=0.3).to(dtype).to("tpu")
    mt.load_state_dict(m.state_dict())
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    torch_tpu.reset_counts()
    for step in range(3):
        x = (torch.randn(4, 5, 6, 7) * 2 + step).to(dtype).contiguous(memory_format=fmt)
        xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
        y, yt = m(xc), mt(xt)
        gy = torch.randn(y.shape).to(dtype)
        y.backward(gy)
        yt.backward(gy.to("tpu"))
        tol = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-9, atol=1e-10),
               torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}[dtype]
        torch.testing.assert_close(yt.cpu(), y, **tol)
        torch.testing.assert_close(xt.grad.cpu(), xc.grad, **tol)
        torch.testing.assert_close(mt.weight.grad.cpu(), m.weight.grad, **tol)
        torch.testing.assert_close(mt.bias.grad.cpu(), m.bias.grad, **tol)
    torch.testing.assert_close(mt.running_mean.cpu(), m.running_mean, **tol)
    torch.testing.assert_close(mt.running_var.cpu(), m.running_var, **tol)
    assert int(mt.num_batches_tracked) == 3
    assert torch_tpu.fallback_counts() == {}
    native = torch_tpu._C.native_counts() if hasattr(torch_tpu._C, "native_counts") else None
    if native is not None:
        assert any("batch_norm" in k for k in native), native


def test_mutated_input_on_cpu_falls_back():
    """A mutated input (running_mean!) that is not a tpu tensor cannot be
    written by a kernel: the call goes to the CPU (which raises its device
    error), never silently drops the update."""
    x = torch.randn(4, 3, 5, device="tpu")
    rm, rv = torch.zeros(3), torch.ones(3)
    mode = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("silent")
    try:
        try:
            torch.ops.aten._native_batch_norm_legit(x, None, None, rm, rv, True, 0.5, 1e-5)
        except RuntimeError:
            return
        assert not torch.equal(rm, torch.zeros(3))  # the CPU fallback updated it
    finally:
        torch_tpu.set_fallback_mode(mode)


def test_batch_norm_legit_updates_running_stats_in_place(fallback_error):
    x = torch.randn(8, 3, 4)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    rmt, rvt = rm.to("tpu"), rv.to("tpu")
    out = torch.ops.aten._native_batch_norm_legit(x, None, None, rm, rv, True, 0.25, 1e-5)
    outt = torch.ops.aten._native_batch_norm_legit(x.to("tpu"), None, None, rmt, rvt, True, 0.25,
                                                   1e-5)
    for a, b in zip(outt, out):
        torch.testing.assert_close(a.cpu(), b)
    torch.testing.assert_close(rmt.cpu(), rm)
    torch.testing.assert_close(rvt.cpu(), rv)
    # _batch_norm_with_update on a strided (every other element) running_mean
    base = torch.zeros(6, device="tpu")
    rms = base[::2]
    r = torch.ops.aten._batch_norm_with_update(x.to("tpu"), None, None, rms, rvt, 0.5, 1e-5)
    assert r[3].dtype == torch.uint8 and r[3].numel() == 0
    torch.testing.assert_close(rms.cpu(), x.mean((0, 2)) * 0.5)
    assert torch.equal(base[1::2].cpu(), torch.zeros(3))


ERROR_OPS = ["masked_select", "aminmax", "nn.functional.softshrink", "narrow_copy", "roll", "gather",
             "index_select", "take", "bernoulli"]


@pytest.mark.parametrize("name", ERROR_OPS)
def test_error_inputs_raise_cpu_type(name):
    from torch.testing._internal.common_methods_invocations import op_db
    ops = [op for op in op_db if coverage.op_key(op) == name]
    assert ops, name
    rec = coverage.check_error_inputs(ops[0])
    assert rec["cpu_raised"] > 0
    assert rec["same_type"] == rec["cpu_raised"], rec


def test_out_with_internal_overlap_raises():
    x = torch.randn(6, device="tpu")
    out = torch.zeros(1, device="tpu").expand(3)
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.gather(x, 0, torch.tensor([0, 2, 4], device="tpu"), out=out)
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.add(x[:3], 1, out=out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16])
def test_narrow_copy_native(dtype, fallback_error):
    x = (torch.randn(4, 9, 5) * 5).to(dtype)
    xt = x.to("tpu")
    for dim, start, length in [(1, 2, 4), (-1, -3, 3), (0, 0, 0), (2, 4, 1)]:
        assert torch.equal(torch.narrow_copy(xt, dim, start, length).cpu(),
                           torch.narrow_copy(x, dim, start, length))
    assert torch.equal(torch.narrow_copy(xt.transpose(0, 2), 1, 1, 3).cpu(),
                       torch.narrow_copy(x.transpose(0, 2), 1, 1, 3))


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_multi_margin_loss_gradients(p, reduction, weighted, fallback_error):
    torch.manual_seed(2)
    for shape in [(6, 9), (9,)]:
        x = torch.randn(*shape, dtype=torch.float64)
        t = torch.randint(0, 9, shape[:-1])
        w = torch.rand(9, dtype=torch.float64) + 0.5 if weighted else None
        xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
        y = F.multi_margin_loss(xc, t, p=p, margin=0.6, weight=w, reduction=reduction)
        yt = F.multi_margin_loss(xt, t.to("tpu"), p=p, margin=0.6,
                                 weight=None if w is None else w.to("tpu"), reduction=reduction)
        gy = torch.randn(y.shape, dtype=torch.float64)
        y.backward(gy)
        yt.backward(gy.to("tpu"))
        torch.testing.assert_close(yt.cpu(), y)
        torch.testing.assert_close(xt.grad.cpu(), xc.grad)


def test_multi_margin_loss_target_out_of_range():
    with pytest.raises(RuntimeError, match="target out of range"):
        F.multi_margin_loss(torch.randn(3, 4, device="tpu"),
                            torch.tensor([0, 5, 1], device="tpu")).item()
