"""Normalisation and resampling families: batch_norm (and instance_norm through
it), group_norm, layer_norm, upsample/interpolate. (Their OpInfo entries:
test_opinfo_native.py.) (b) gradients match CPU autograd with
zero fallbacks; running statistics are updated in place as on the CPU."""

import pytest
import torch
import torch.nn.functional as F

import torch_tpu


# (OpInfo name, variant, dtypes)


# Native, but half-precision rounding differs from the CPU kernels' by more than
# the tolerance on a few elements (the CPU rounds intermediate terms in the
# half type in ways not yet reproduced).


def _grad_check(fn, *shapes, dtype=torch.float64, atol=1e-7, rtol=1e-6, cl=False):
    torch.manual_seed(0)
    cpu = [torch.randn(s, dtype=dtype) for s in shapes]
    fmt = torch.channels_last if len(shapes[0]) == 4 else torch.channels_last_3d
    if cl:
        cpu[0] = cpu[0].contiguous(memory_format=fmt)
    cpu = [t.requires_grad_() for t in cpu]
    tpu = [t.detach().to("tpu").requires_grad_() for t in cpu]
    if cl:
        assert tpu[0].is_contiguous(memory_format=fmt)
    torch_tpu.reset_counts()
    with torch_tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_NEVER):
        prev = torch_tpu._C.fallback_mode()
        torch_tpu.set_fallback_mode("error")
        try:
            out = fn(*tpu)
            g = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(1))
            out.backward(g.to("tpu"))
            torch.tpu.synchronize()
        finally:
            torch_tpu.set_fallback_mode(prev)
    assert torch_tpu.fallback_counts() == {}
    ref = fn(*cpu)
    ref.backward(g)
    torch.testing.assert_close(out.cpu(), ref.detach(), atol=atol, rtol=rtol)
    for a, b in zip(tpu, cpu):
        torch.testing.assert_close(a.grad.cpu(), b.grad, atol=atol, rtol=rtol)


@pytest.mark.parametrize("cl", [False, True])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_grad_and_running_stats(training, cl):
    rm_c, rv_c = torch.rand(6, dtype=torch.float64), torch.rand(6, dtype=torch.float64) + 0.5
    rm_t, rv_t = rm_c.to("tpu"), rv_c.to("tpu")

    def fn(x, w, b):
        rm, rv = (rm_t, rv_t) if x.device.type == "tpu" else (rm_c, rv_c)
        return F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.3, eps=1e-3)

    _grad_check(fn, (4, 6, 5, 3), (6,), (6,), cl=cl)
    torch.testing.assert_close(rm_t.cpu(), rm_c)
    torch.testing.assert_close(rv_t.cpu(), rv_c)
    if training:
        assert not torch.equal(rm_c, torch.zeros(6, dtype=torch.float64))


def test_batch_norm_1d_and_instance_norm():
    _grad_check(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
                (32, 7), (7,), (7,))
    _grad_check(lambda x, w, b: F.instance_norm(x, weight=w, bias=b), (3, 4, 9, 5), (4,), (4,))


@pytest.mark.parametrize("cl", [False, True])
def test_group_norm_grad(cl):
    _grad_check(lambda x, w, b: F.group_norm(x, 3, w, b, eps=1e-4), (2, 6, 5, 4), (6,), (6,),
                cl=cl)
    _grad_check(lambda x: F.group_norm(x, 2), (3, 4, 10))


def test_layer_norm_grad_and_masked_outputs():
    _grad_check(lambda x, w, b: F.layer_norm(x, (5, 4), w, b), (3, 5, 4), (5, 4), (5, 4))
    # A masked-off gradient is an undefined tensor (None), as on the CPU.
    x = torch.randn(3, 5, dtype=torch.float64)
    args = lambda d: (x.to(d), x.to(d), [5], torch.zeros(3, 1, dtype=torch.float64, device=d),
                      torch.ones(3, 1, dtype=torch.float64, device=d), None, None)
    got = torch.ops.aten.native_layer_norm_backward(*args("tpu"), [True, False, False])
    want = torch.ops.aten.native_layer_norm_backward(*args("cpu"), [True, False, False])
    assert [t is None for t in got] == [t is None for t in want] == [False, True, True]


def test_rms_norm_fused_native_grad():
    _grad_check(lambda x, w: F.rms_norm(x, (6,), w, eps=1e-4), (5, 3, 6), (6,))
    _grad_check(lambda x: F.rms_norm(x, (3, 6)), (5, 3, 6))
    # rms_norm reaches the fused kernel and its backward (no composite ops).
    x = torch.randn(4, 8, device="tpu", requires_grad=True)
    w = torch.randn(8, device="tpu", requires_grad=True)
    torch_tpu.reset_counts()
    F.rms_norm(x, (8,), w).sum().backward()
    counts = torch_tpu._C.native_counts()
    assert counts.get("_fused_rms_norm.default") == 1
    assert counts.get("_fused_rms_norm_backward.default") == 1
    assert "rsqrt.default" not in counts


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_layer_norm_half_matches_cpu(dtype):
    x = torch.randn(8, 64).to(dtype)
    w, b = torch.randn(64).to(dtype), torch.randn(64).to(dtype)
    torch_tpu.reset_counts()
    got = F.layer_norm(x.to("tpu"), (64,), w.to("tpu"), b.to("tpu"))
    assert torch_tpu.fallback_counts() == {}
    torch.testing.assert_close(got.cpu(), F.layer_norm(x, (64,), w, b))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape,affine", [
    ((512, 128), True), ((200, 333), False), ((4, 50, 129), True), ((700, 1), True),
    ((3, 40), True)], ids=str)
def test_layer_norm_backward_half_matches_cpu(dtype, shape, affine):
    """layer_norm's backward on half-type rows (float32 copies, no double):
    grad_input against PyTorch CPU; grad_weight and grad_bias (column sums
    over the rows) against the float64 computation rounded once, because
    PyTorch CPU's own half-type column sums are ~10x further from it (at
    512x128 bfloat16: max error 1.5 against tpu's 0.16, for sums up to 60)."""
    n = shape[-1]
    g = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(*shape, generator=g) * 2 + 1).to(dtype)
    gy = torch.randn(*shape, generator=g).to(dtype)
    ps = [(torch.rand(n, generator=g) + 0.5).to(dtype), torch.randn(n, generator=g).to(dtype)]
    ps = ps if affine else []

    def run(dev, dt=None):
        ts = [t.to(dev) for t in [x, gy] + ps]
        ts = [t.to(dt) if dt else t for t in ts]
        ts = [t.detach().requires_grad_() for t in ts]
        y = F.layer_norm(ts[0], (n,), *ts[2:])
        y.backward(ts[1])
        return [t.grad.cpu() for t in ts[:1] + ts[2:]]
    torch_tpu.reset_counts()
    got = run("tpu")
    assert torch_tpu.fallback_counts() == {}
    tol = dict(atol=2e-2, rtol=1.6e-2) if dtype == torch.bfloat16 else dict(atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(got[0], run("cpu")[0], **tol)
    exact = [t.to(dtype) for t in run("cpu", torch.float64)]
    ulp = 2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -11
    for a, e in zip(got[1:], exact[1:]):  # mean and rstd come rounded to dtype
        torch.testing.assert_close(a, e, atol=2 * ulp * e.abs().max().item() + 1e-6,
                                   rtol=2 * ulp)


@pytest.mark.parametrize("mode,shape,kw", [
    ("nearest", (2, 3, 5, 4), dict(scale_factor=2)),
    ("nearest", (2, 3, 5, 4), dict(size=(7, 3))),
    ("nearest-exact", (2, 3, 5, 4, 3), dict(size=(3, 7, 4))),
    ("linear", (2, 3, 7), dict(size=12, align_corners=True)),
    ("bilinear", (2, 3, 5, 4), dict(scale_factor=2.5, align_corners=False)),
    ("bilinear", (2, 3, 5, 4), dict(size=(3, 9), align_corners=True)),
    ("bicubic", (2, 3, 5, 4), dict(size=(9, 7), align_corners=False)),
    ("bicubic", (2, 3, 5, 4), dict(size=(3, 3), align_corners=True)),
    ("trilinear", (1, 2, 3, 4, 5), dict(scale_factor=1.7)),
])
@pytest.mark.parametrize("cl", [False, True])
def test_interpolate_grad(mode, shape, kw, cl):
    _grad_check(lambda x: F.interpolate(x, mode=mode, **kw), shape,
                cl=cl and len(shape) in (4, 5))


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_grad(mode, pad, align):
    def fn(x, g):
        return F.grid_sample(x, g.clamp(-1.2, 1.2), mode=mode, padding_mode=pad,
                             align_corners=align)

    if mode == "bicubic":  # forward native; its backward is not native yet
        x = torch.randn(2, 3, 5, 6, dtype=torch.float64)
        g = torch.rand(2, 4, 7, 2, dtype=torch.float64) * 2.4 - 1.2
        torch_tpu.reset_counts()
        got = fn(x.to("tpu"), g.to("tpu"))
        assert torch_tpu.fallback_counts() == {}
        torch.testing.assert_close(got.cpu(), fn(x, g))
        return
    _grad_check(fn, (2, 3, 5, 6), (2, 4, 7, 2))


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
def test_grid_sample_3d_grad(mode, pad):
    _grad_check(lambda x, g: F.grid_sample(x, g.clamp(-1.2, 1.2), mode=mode, padding_mode=pad,
                                           align_corners=False), (2, 3, 4, 5, 3), (2, 3, 2, 4, 3))


def test_affine_grid_native():
    theta = torch.randn(3, 2, 3, dtype=torch.float64)
    torch_tpu.reset_counts()
    got = F.affine_grid(theta.to("tpu"), (3, 2, 5, 7), align_corners=False)
    assert torch_tpu.fallback_counts() == {}
    torch.testing.assert_close(got.cpu(), F.affine_grid(theta, (3, 2, 5, 7), align_corners=False))


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_export_overloads(training):
    """_batch_norm_no_update (eval) and batch_norm_backward (the reserve-taking
    overload export and compile paths use) run natively and match the CPU."""
    torch.manual_seed(0)
    x, g = torch.randn(4, 3, 5, dtype=torch.float64), torch.randn(4, 3, 5, dtype=torch.float64)
    w, b = torch.rand(3, dtype=torch.float64), torch.rand(3, dtype=torch.float64)
    rm, rv = torch.rand(3, dtype=torch.float64), torch.rand(3, dtype=torch.float64) + 0.5
    tpu = lambda *a: [t.to("tpu") if isinstance(t, torch.Tensor) else t for t in a]
    aten = torch.ops.aten
    if training:
        fw = aten._batch_norm_with_update(x, w, b, rm.clone(), rv.clone(), 0.1, 1e-5)
    else:
        fw = aten._batch_norm_no_update(x, w, b, rm, rv, 0.1, 1e-5)
    args = (g, x, w, rm, rv, fw[1], fw[2], training, 1e-5, [True, True, True], fw[3])
    torch_tpu.reset_counts()
    got = aten.batch_norm_backward(*tpu(*args))
    if not training:
        got_fw = aten._batch_norm_no_update(*tpu(x, w, b, rm, rv, 0.1, 1e-5))
        for a, e in zip(got_fw, fw):
            torch.testing.assert_close(a.cpu(), e)
    assert torch_tpu.fallback_counts() == {}
    for a, e in zip(got, aten.batch_norm_backward(*args)):
        torch.testing.assert_close(a.cpu(), e)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("size", [(3, 4), (9, 11), (2, 13)])
@pytest.mark.parametrize("align", [False, True])
def test_interpolate_antialias_grad(mode, size, align):
    _grad_check(lambda x: F.interpolate(x, size=size, mode=mode, align_corners=align,
                                        antialias=True), (2, 3, 7, 8))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_layer_norm_backward_half_nan_bits(dtype):
    """A NaN with a payload in a half-type row: grad_input's NaNs are the
    quiet NaNs tpu_convert makes (float16: sign | 0x7e00, payload dropped;
    bfloat16: the float32 NaN's top bits), whichever conversion ran."""
    x = torch.randn(64, 128).to(dtype)
    bits = x.view(torch.int16)
    bits[0, 5] = 0x7d01 if dtype == torch.float16 else 0x7f81  # signalling, payload 1
    w, b, gy = torch.ones(128, dtype=dtype), torch.zeros(128, dtype=dtype), torch.ones_like(x)
    xs = x.to("tpu").requires_grad_()
    F.layer_norm(xs, (128,), w.to("tpu"), b.to("tpu")).backward(gy.to("tpu"))
    gx = xs.grad.cpu()
    assert gx[0].isnan().all() and not gx[1:].isnan().any()
    got = gx[0].view(torch.int16).int() & 0x7fff
    if dtype == torch.float16:
        assert (got == 0x7e00).all(), got.unique()
    else:  # bfloat16 keeps the top payload bits: quiet bit set, no rounding
        assert ((got & 0x7fc0) == 0x7fc0).all(), got.unique()
