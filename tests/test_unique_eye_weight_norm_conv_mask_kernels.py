"""eye (shape family), weight_norm (its own family),
unique / unique_consecutive / bincount (the unique family, through sync_size),
convolution_backward's output_mask (absent gradients), _efficientzerotensor
(sgn's backward) and the functional aten::copy.

(The OpInfo entries of eye, unique, unique_consecutive and bincount:
test_opinfo_native.py.) (b) gradients and module forward/backward against CPU autograd with no
fallback; (c) what the OpInfo samples do not reach.
"""
import copy

import pytest
import torch

import torch_tpu
from torch_tpu.tools import coverage


def _same(a, b):
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    assert len(a) == len(b)
    for u, v in zip(a, b):
        v = v.cpu()
        assert u.dtype == v.dtype and u.shape == v.shape, (u, v)
        torch.testing.assert_close(v, u, rtol=0, atol=0, equal_nan=True)


# ---- eye -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_eye_forms(dtype):
    torch_tpu.reset_counts()
    _same(torch.eye(5, dtype=dtype), torch.eye(5, dtype=dtype, device="tpu"))
    _same(torch.eye(3, 7, dtype=dtype), torch.eye(3, 7, dtype=dtype, device="tpu"))
    out = torch.full((4, 2), 3, dtype=dtype, device="tpu").t()  # strided, written in place
    torch.eye(2, 4, out=out)
    _same(torch.eye(2, 4, dtype=dtype), out)
    assert torch_tpu.fallback_counts() == {}
    assert "eye.m_out" in torch_tpu.native_ops()


# ---- unique / unique_consecutive / bincount ----------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.uint8,
                                   torch.bool])
def test_unique_flags_and_nans(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 7, (13, 31), generator=g).to(dtype)
    if dtype.is_floating_point:
        x[::3, ::5] = float("nan")
    xt = x.to("tpu")
    torch_tpu.reset_counts()
    for sorted_ in (True, False):
        for inv in (False, True):
            for cnt in (False, True):
                _same(torch.unique(x, sorted_, inv, cnt), torch.unique(xt, sorted_, inv, cnt))
                _same(torch.unique_consecutive(x, inv, cnt),
                      torch.unique_consecutive(xt, inv, cnt))
                _same(torch.unique_consecutive(x.t(), inv, cnt),
                      torch.unique_consecutive(xt.t(), inv, cnt))
    _same(torch.unique(x[:0]), torch.unique(xt[:0]))
    assert torch_tpu.fallback_counts() == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_unique_with_dim(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, 2, (40, 3, 2), generator=g).to(dtype)
    if dtype.is_floating_point:
        x[5, 1, 0] = float("nan")  # a NaN slice equals nothing; its place follows std::sort
    xt = x.to("tpu")
    torch_tpu.reset_counts()
    for dim in (0, 1, -1):
        for inv in (False, True):
            _same(torch.unique(x, True, inv, True, dim=dim),
                  torch.unique(xt, True, inv, True, dim=dim))
            _same(torch.unique_consecutive(x, inv, True, dim=dim),
                  torch.unique_consecutive(xt, inv, True, dim=dim))
    assert torch_tpu.fallback_counts() == {}


def test_bincount_weights_and_errors():
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 40, (500,), generator=g)
    torch_tpu.reset_counts()
    for w in (None, torch.rand(500, generator=g), torch.rand(500, generator=g).double(),
              torch.randn(500, generator=g).bfloat16(), torch.randint(0, 5, (500,), generator=g)):
        wt = None if w is None else w.to("tpu")
        for minlength in (0, 10, 100):
            _same(torch.bincount(x, w, minlength), torch.bincount(x.to("tpu"), wt, minlength))
    _same(torch.bincount(x[:0]), torch.bincount(x[:0].to("tpu")))
    _same(torch.bincount(x[::3].int()), torch.bincount(x[::3].int().to("tpu")))
    assert torch_tpu.fallback_counts() == {}
    bad = torch.tensor([1, -1, 2])
    with pytest.raises(RuntimeError):
        torch.bincount(bad)
    with pytest.raises(RuntimeError):
        torch.bincount(bad.to("tpu"))


# ---- convolution_backward's output_mask ------------------------------------------------

CONV_CASES = {
    "input_only": dict(x=True, w=False, b=False),
    "weight_only": dict(x=False, w=True, b=False),
    "bias_only": dict(x=False, w=False, b=True),
    "weight_bias": dict(x=False, w=True, b=True),
    "all": dict(x=True, w=True, b=True),
    "input_no_bias": dict(x=True, w=True, b=None),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv2d_gradients_with_output_masks(case, dtype):
    req = CONV_CASES[case]
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 4, 9, 8, dtype=dtype), torch.randn(6, 2, 3, 3, dtype=dtype), \
        torch.randn(6, dtype=dtype)
    res = {}
    for dev in ("cpu", "tpu"):
        xs = x.to(dev, copy=True).requires_grad_(req["x"])
        ws = w.to(dev, copy=True).requires_grad_(req["w"])
        bs = None if req["b"] is None else b.to(dev, copy=True).requires_grad_(req["b"])
        y = torch.nn.functional.conv2d(xs, ws, bs, stride=(2, 1), padding=1, groups=2)
        torch_tpu.reset_counts()
        y.backward(torch.linspace(-1, 1, y.numel(), dtype=dtype).reshape(y.shape).to(dev))
        if dev == "tpu":
            assert torch_tpu.fallback_counts() == {}
        res[dev] = [t.grad for t in (xs, ws, bs) if t is not None]
    for c, t in zip(res["cpu"], res["tpu"]):
        assert (c is None) == (t is None)
        if c is not None:
            torch.testing.assert_close(t.cpu(), c)


def test_convolution_backward_masked_outputs_are_undefined():
    torch.manual_seed(0)
    x, w = torch.randn(1, 3, 6, 6), torch.randn(4, 3, 3, 3)
    go = torch.randn(1, 4, 4, 4)
    args = ([4], [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    for mask in ([True, False, False], [False, True, False], [False, False, True],
                 [False, True, True]):
        want = torch.ops.aten.convolution_backward(go, x, w, *args, mask)
        torch_tpu.reset_counts()
        got = torch.ops.aten.convolution_backward(go.to("tpu"), x.to("tpu"), w.to("tpu"), *args,
                                                  mask)
        assert torch_tpu.fallback_counts() == {}
        for c, t, m in zip(want, got, mask):
            assert (c is None) == (not m) and (t is None) == (not m), (mask, c, t)
            if m:
                torch.testing.assert_close(t.cpu(), c)


# ---- sgn's backward: _efficientzerotensor -----------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_sgn_gradients_native(dtype):
    x = torch.randn(5, 7).to(dtype)
    xc = x.clone().requires_grad_()
    (xc.sgn() * 3 + xc.sin()).sum().backward()
    xt = x.to("tpu").requires_grad_()
    torch_tpu.reset_counts()
    (xt.sgn() * 3 + xt.sin()).sum().backward()
    assert torch_tpu.fallback_counts() == {}
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
    # sgn alone: the gradient is a zero tensor, as on the CPU
    xc2, xt2 = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    xc2.sgn().sum().backward()
    torch_tpu.reset_counts()
    xt2.sgn().sum().backward()
    g = xt2.grad
    assert g.device.type == "tpu" and g.shape == x.shape and g.dtype == dtype
    assert g._is_zerotensor() == xc2.grad._is_zerotensor()
    torch.testing.assert_close(g.cpu(), xc2.grad)
    torch.testing.assert_close((g + 1).cpu(), xc2.grad + 1)
    assert torch_tpu.fallback_counts() == {}


def test_efficientzerotensor_direct():
    torch_tpu.reset_counts()
    z = torch.ops.aten._efficientzerotensor([3, 4], dtype=torch.float32, device="tpu")
    assert z.device.type == "tpu" and z._is_zerotensor()
    y = torch.ones(3, 4, device="tpu")
    torch.testing.assert_close((y * z).cpu(), torch.zeros(3, 4))
    torch.testing.assert_close((y + z).cpu(), torch.ones(3, 4))
    assert torch_tpu.fallback_counts() == {}


# ---- weight_norm ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("kind", ["linear", "conv1d"])
def test_weight_norm_module(kind, dim, dtype):
    torch.manual_seed(0)
    if kind == "linear":
        mod = torch.nn.Linear(12, 7)
        x = torch.randn(5, 12)
    else:  # wav2vec2's positional conv: weight_norm over dim 2 in the model, 0/-1 here
        mod = torch.nn.Conv1d(6, 8, 5, padding=2, groups=2)
        x = torch.randn(3, 6, 20)
    if kind == "conv1d" and dim == 1:
        dim = 2  # the last dim of a 3-d weight
    mod = mod.to(dtype)
    x = x.to(dtype)
    mt = torch.nn.utils.weight_norm(copy.deepcopy(mod).to("tpu"), dim=dim)
    m64 = torch.nn.utils.weight_norm(copy.deepcopy(mod).double(), dim=dim)
    mc = torch.nn.utils.weight_norm(mod, dim=dim)
    yc = mc(x)
    yc.square().sum().backward()
    y64 = m64(x.double())
    y64.square().sum().backward()
    torch_tpu.reset_counts()
    xt = x.to("tpu")
    yt = mt(xt)
    yt.square().sum().backward()
    assert torch_tpu.fallback_counts() == {}
    names = ("weight_g", "weight_v", "bias")
    got = [yt.cpu()] + [getattr(mt, n).grad.cpu() for n in names]
    want = [yc] + [getattr(mc, n).grad for n in names]
    if dtype == torch.bfloat16:
        # bfloat16 gradients of weight_norm cancel (v's gradient subtracts its
        # projection on v): the CPU's rounding differs between its kernels
        # (AVX2 and AVX-512 BF16 CPUs disagree by several ulps), so tpu must
        # be at least as close as the CPU to the float64 computation, within
        # bfloat16's tolerance of each tensor's magnitude
        exact = [y64] + [getattr(m64, n).grad for n in names]
        assert coverage.as_close_as_cpu(got, want, exact, tensor_scale=True)
        assert not coverage.as_close_as_cpu([g * 1.1 for g in got], want, exact,
                                            tensor_scale=True)  # the check can fail
    else:
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_weight_norm_interface_direct(dtype):
    torch.manual_seed(1)
    v = torch.randn(9, 4, 3).to(dtype)
    for dim in (0, 2):
        gshape = [1, 1, 1]
        gshape[dim] = v.shape[dim]
        g = torch.rand(gshape).to(dtype) + 0.5
        want = torch._weight_norm_interface(v, g, dim)
        torch_tpu.reset_counts()
        got = torch._weight_norm_interface(v.to("tpu"), g.to("tpu"), dim)
        gw = torch.randn_like(v)
        bwant = torch.ops.aten._weight_norm_interface_backward(gw, v, g, want[1], dim)
        bgot = torch.ops.aten._weight_norm_interface_backward(gw.to("tpu"), v.to("tpu"),
                                                              g.to("tpu"), got[1], dim)
        assert torch_tpu.fallback_counts() == {}
        tol = dict(rtol=1e-2, atol=1e-2) if dtype == torch.bfloat16 else {}
        for c, t in zip(want + bwant, got + bgot):
            assert c.dtype == t.dtype and c.shape == t.shape
            torch.testing.assert_close(t.cpu(), c, **tol)


# ---- the functional copy ----------------------------------------------------------------------

def test_functional_copy_native():
    a = torch.randn(3, 4)
    b = torch.arange(4, dtype=torch.float64)
    at_, bt = a.to("tpu"), b.to("tpu")
    torch_tpu.reset_counts()
    for self_, src in ((at_, bt), (at_.t().contiguous().t(), bt), (at_, b), (at_[:, ::2], bt[:2])):
        r = torch.ops.aten.copy(self_, src)
        assert r.dtype == self_.dtype and r.shape == self_.shape
        assert r.stride() == self_.stride() or not self_.is_contiguous()
        torch.testing.assert_close(r.cpu(), src.cpu().float().expand(self_.shape))
    r = torch.ops.aten.copy(at_.t(), bt[:3])
    assert r.stride() == at_.t().stride()
    assert torch_tpu.fallback_counts() == {}
