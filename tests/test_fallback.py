"""The counted CPU fallback: ops without a native tpu kernel give the CPU's
results on tpu tensors, are counted in torch_tpu.fallback_counts(), warn
once per op, and raise NotImplementedError in "error" mode (set from Python
or with TORCH_TPU_FALLBACK=error). In-place and out= fallbacks write into
the tpu tensors.

Ops are picked, at run time, among candidates that have no native kernel
(torch_tpu.native_ops()), so the tests keep exercising the fallback as
kernels are added."""
import warnings

import pytest
import torch

import torch_tpu
from conftest import TPU0, assert_same, check, check_result, make, run_checks


def native(name):
    return name in set(torch_tpu.native_ops())


def fallback_count(name):
    """Fallback calls of an ATen op, any overload (in-place ops are counted
    under their out= overload: i0_ -> aten::i0.out)."""
    base = name.split("::")[-1].split(".")[0].rstrip("_")
    return sum(v for k, v in torch_tpu.fallback_counts().items()
               if k.split("::")[-1].split(".")[0].rstrip("_") == base)


def pick(candidates):
    """(aten name, callable) of the first candidate without a native kernel."""
    for aten, fn in candidates:
        if not native(aten) and not native(aten.split(".")[0]):
            return aten, fn
    pytest.fail(f"every candidate has a native kernel now: {[c[0] for c in candidates]}")


UNARY_FALLBACKS = [  # (histogram is native now)
    ("tpu_fb::affine", torch.ops.tpu_fb.affine),
]
INPLACE_FALLBACKS = [
    ("i0_", torch.Tensor.i0_),
    ("digamma_", torch.Tensor.digamma_),
    ("erfinv_", torch.Tensor.erfinv_),
    ("cumsum_", lambda t: t.cumsum_(0)),
    ("cumprod_", lambda t: t.cumprod_(0)),
    ("igammac_", lambda t: t.abs_().add_(0.5).igammac_(torch.full_like(t, 1.5))),
    ("mvlgamma_", lambda t: t.abs_().add_(0.5).mvlgamma_(1)),
    ("tpu_fb::affine_", torch.ops.tpu_fb.affine_),
]
BINARY_INPLACE_FALLBACKS = [
    ("hypot_", torch.Tensor.hypot_),
    ("nextafter_", torch.Tensor.nextafter_),
    ("igamma_", lambda a, b: a.abs_().add_(0.5).igamma_(b.abs() + 0.5)),
    ("igammac_", lambda a, b: a.abs_().add_(0.5).igammac_(b.abs() + 0.5)),
    ("mvlgamma_", lambda a, b: a.abs_().add_(0.5).mul_(b.abs() + 1).mvlgamma_(1)),
    ("tpu_fb::scale_", torch.ops.tpu_fb.scale_),
]
OUT_FALLBACKS = [
    ("tpu_fb::affine.out", lambda x, out: torch.ops.tpu_fb.affine.out(x, out=out)),
]


def test_linalg_fallback_gives_cpu_result_and_is_counted():
    # _linalg_svd runs natively for real dtypes: complex takes the fallback (README)
    nuc = lambda a: torch.linalg.matrix_norm(a, "nuc")  # noqa: E731
    x = (make((4, 4), torch.float32, seed=1) * 0.5).to(torch.complex64)
    before = fallback_count("_linalg_svd")
    t, c = check(nuc, x, atol=1e-5, rtol=1e-5)
    assert t.device == TPU0
    assert fallback_count("_linalg_svd") > before
    check(nuc, (make((3, 5, 5), torch.float64, seed=2) * 0.3).to(torch.complex128),
          atol=1e-3, rtol=1e-3)


def test_unary_fallback_result_and_counter():
    aten, fn = pick(UNARY_FALLBACKS)
    x = make((3, 7), seed=3, low=0.1, high=4)
    before = fallback_count(aten)
    for _ in range(3):
        check(fn, x)
    assert fallback_count(aten) - before == 3
    assert aten not in " ".join(torch_tpu.native_counts())


def test_fallback_on_noncontiguous_input():
    aten, fn = pick(UNARY_FALLBACKS)
    check(fn, make((4, 6), seed=4, noncontig=True))
    check(lambda t: fn(t.t()), make((5, 3), seed=5))


def test_fallback_returning_several_tensors():
    # fake_quantize_per_tensor_affine_cachemask returns (output, mask): no native kernel
    op = "fake_quantize_per_tensor_affine_cachemask"
    assert not native(op)
    x = make((3, 4, 4), torch.float32, seed=6)
    before = fallback_count(op)
    check(lambda t: torch.ops.aten.fake_quantize_per_tensor_affine_cachemask(t, 0.1, 0, -128, 127),
          x)
    assert fallback_count(op) > before


def test_fallback_autograd_matches_cpu():
    x = (make((4, 4), torch.float32, seed=7) * 0.5).to(torch.complex64)  # complex: the fallback
    c = x.clone().requires_grad_()
    t = x.to("tpu").requires_grad_()
    torch.linalg.matrix_norm(c, "nuc").backward()
    before = fallback_count("_linalg_svd")
    torch.linalg.matrix_norm(t, "nuc").backward()  # the SVD on the CPU, its backward native
    assert fallback_count("_linalg_svd") - before >= 1
    assert t.grad.device == TPU0
    assert_same(t.grad, c.grad, atol=1e-3, rtol=1e-3)


def test_warns_once_per_op():
    # an ATen op no other test sends to the CPU (the warning is once per process):
    # index_add with a complex alpha, a fallback by decision (README)
    aten = "aten::index_add"
    idx = torch.tensor([0, 2], device="tpu")
    fn = lambda t: t.index_add(0, idx, t[:2], alpha=2j)  # noqa: E731
    x = make((5, 2), seed=8).to(torch.complex64).to("tpu")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fn(x)
        fn(x)
        fn(x * 2)
    msgs = [str(m.message) for m in w if aten in str(m.message)]
    assert len(msgs) == 1, msgs
    assert "CPU" in msgs[0] and "fallback_counts" in msgs[0]


def test_silent_mode_does_not_warn_but_counts():
    torch_tpu.set_fallback_mode("silent")
    fn = lambda t: t.clone().mvlgamma_(1)  # noqa: E731
    assert not native("mvlgamma")
    x = make((6,), seed=9, low=0.5, high=3)
    before = fallback_count("mvlgamma")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        check(fn, x)
    assert not [m for m in w if "mvlgamma" in str(m.message)]
    assert fallback_count("mvlgamma") == before + 1


def test_error_mode_raises_not_implemented():
    aten, fn = pick(UNARY_FALLBACKS)
    x = make((4,), seed=10)
    xt = x.to("tpu")
    torch_tpu.set_fallback_mode("error")
    assert torch_tpu._C.fallback_mode() == "error"
    with pytest.raises(NotImplementedError, match=aten):
        fn(xt)
    # bridge-level ops (creation, copies, views) still work
    assert_same(xt.view(2, 2).t().contiguous(), x.view(2, 2).t().contiguous(), exact=True)
    torch_tpu.set_fallback_mode("warn")
    check(fn, x)


def test_set_fallback_mode_rejects_unknown_modes():
    with pytest.raises(RuntimeError):
        torch_tpu.set_fallback_mode("sometimes")
    assert torch_tpu._C.fallback_mode() in ("warn", "silent", "error")


@pytest.mark.parametrize("view", ["whole", "slice", "transposed"])
def test_inplace_fallback_writes_into_tpu_tensor(view):
    aten, fn = pick(INPLACE_FALLBACKS)
    views = {"whole": lambda t: t, "slice": lambda t: t[1:, ::2],
             "transposed": lambda t: t.t()}
    x = make((4, 6), seed=11, low=-0.9, high=0.9)
    xt = x.to("tpu")
    ptr = xt.data_ptr()
    before = fallback_count(aten)
    r_cpu = fn(views[view](x))
    r_tpu = fn(views[view](xt))
    assert fallback_count(aten) == before + 1
    assert xt.data_ptr() == ptr
    assert_same(r_tpu, r_cpu)
    assert_same(xt, x)  # the base tensor was updated, untouched elements unchanged


def test_binary_inplace_fallback():
    aten, fn = pick(BINARY_INPLACE_FALLBACKS)
    x, y = make((3, 4), seed=12), make((4,), seed=13)
    before = fallback_count(aten)
    check(lambda a, b: (fn(a, b), a)[1], x, y)
    check(lambda a, b: (fn(a[:, 1:3], b[1:3]), a)[1], x, y)
    assert fallback_count(aten) == before + 2


@pytest.mark.parametrize("out_kind", ["right", "wrong_size", "empty", "noncontig"])
def test_out_fallback_writes_into_tpu_tensor(out_kind):
    aten, fn = pick(OUT_FALLBACKS)
    x = make((3, 4), seed=14, low=0.2, high=3)
    outs = {"right": lambda d: torch.full((3, 4), -1.0, device=d),
            "wrong_size": lambda d: torch.full((5,), -1.0, device=d),
            "empty": lambda d: torch.empty(0, device=d),
            "noncontig": lambda d: torch.full((4, 3), -1.0, device=d).t()}
    o_cpu, o_tpu = outs[out_kind]("cpu"), outs[out_kind]("tpu")
    ptr = o_tpu.data_ptr()
    before = fallback_count(aten)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r_cpu = fn(x, o_cpu)
        r_tpu = fn(x.to("tpu"), o_tpu)
    assert fallback_count(aten) == before + 1
    assert r_tpu is o_tpu
    assert o_tpu.device == TPU0
    assert_same(o_tpu, o_cpu)
    assert o_tpu.stride() == o_cpu.stride()
    if out_kind in ("right", "noncontig"):
        assert o_tpu.data_ptr() == ptr


def test_fallback_with_cpu_scalar_tensor_argument():
    x = make((5,), seed=15, low=0.1, high=2)
    got = torch.special.xlog1py(x.to("tpu"), torch.tensor(0.5))
    assert got.device == TPU0
    assert_same(got, torch.special.xlog1py(x, torch.tensor(0.5)))


def test_counters_api():
    torch_tpu.reset_counts()
    assert sum(torch_tpu.fallback_counts().values()) == 0
    aten, fn = pick(UNARY_FALLBACKS)
    fn(make((3, 3), seed=16).to("tpu"))
    counts = torch_tpu.fallback_counts()
    assert isinstance(counts, dict)
    assert sum(v for k, v in counts.items() if aten in k) == 1
    torch_tpu.reset_counts()
    assert sum(torch_tpu.fallback_counts().values()) == 0


def test_native_ops_are_counted_as_native():
    ops = torch_tpu.native_ops()
    assert isinstance(ops, list) and ops == sorted(ops)
    assert "add.Tensor" in ops, "the elementwise family binds aten::add.Tensor"
    torch_tpu.reset_counts()
    x = make((4,), seed=17)
    check(lambda a: a + a, x)
    assert torch_tpu.native_counts().get("add.Tensor", 0) == 1
    assert not any("add.Tensor" in k for k in torch_tpu.fallback_counts())


def test_no_binding_errors():
    """Every runtime op's ATen overloads bound (a broken binding silently
    falls back)."""
    assert torch_tpu._C.binding_errors() == []


# ---- TORCH_TPU_FALLBACK=error (child process) -------------------------------------------

ERROR_ENV = r'''
import warnings

@check
def mode_is_error():
    assert torch_tpu._C.fallback_mode() == "error"

@check
def fallback_op_raises():
    x = torch.rand(4, 2, dtype=torch.complex64).tpu()
    try:
        x.index_add(0, torch.tensor([0, 2]).tpu(), x[:2], alpha=2j)
    except NotImplementedError as e:
        assert "index_add" in str(e), e
    else:
        raise AssertionError("no NotImplementedError")

@check
def core_ops_still_work():
    x = torch.arange(6.0).view(2, 3)
    t = x.tpu()
    assert_close(t.t().contiguous().cpu(), x.t().contiguous(), rtol=0, atol=0)

@check
def switching_back_to_warn_works():
    torch_tpu.set_fallback_mode("warn")
    x = torch.rand(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_close(torch.special.bessel_j0(x.tpu()).cpu(), torch.special.bessel_j0(x))
'''


@pytest.fixture(scope="module")
def error_env_results():
    return run_checks(ERROR_ENV, TORCH_TPU_FALLBACK="error")


@pytest.mark.parametrize("name", ["mode_is_error", "fallback_op_raises", "core_ops_still_work",
                                  "switching_back_to_warn_works"])
def test_fallback_env_error(error_env_results, name):
    check_result(error_env_results, name)


def test_convolution_native_with_gradients():
    """conv (which PyTorch would route to convolution_overrideable) runs
    natively, forward and backward, with results and grads equal to CPU's
    (float32 sums in another order) and left on tpu."""
    import torch.nn.functional as F
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    xt = x.detach().to("tpu").requires_grad_()
    wt = w.detach().to("tpu").requires_grad_()
    torch_tpu.reset_counts()
    y, yt = F.conv2d(x, w, padding=1), F.conv2d(xt, wt, padding=1)
    y.square().sum().backward()
    yt.square().sum().backward()
    assert yt.device.type == "tpu" and xt.grad.device.type == "tpu"
    torch.testing.assert_close(yt.cpu(), y, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(xt.grad.cpu(), x.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(wt.grad.cpu(), w.grad, atol=1e-4, rtol=1e-4)
    assert torch_tpu.fallback_counts() == {}
    native = torch_tpu.native_counts()
    assert native.get("convolution.default", 0) >= 1
    assert native.get("convolution_backward.default", 0) >= 1


def test_sparse_tensors_raise_naming_the_op():
    """Sparse layouts are not supported on tpu (a decision, docs/architecture.md):
    making a sparse tensor on tpu, or running an op on one, raises
    NotImplementedError naming the op, not PyTorch's generic dispatcher
    error; the same data as a dense tensor runs."""
    i, v = torch.tensor([[0, 1, 1], [2, 0, 2]]), torch.tensor([3.0, 4.0, 5.0])
    s = torch.sparse_coo_tensor(i, v, (2, 3))
    attempts = [lambda: s.to("tpu"),
                lambda: torch.sparse_coo_tensor(i.to("tpu"), v.to("tpu"), (2, 3)),
                lambda: s.to_sparse_csr().to("tpu").to_dense(),
                lambda: torch.ones(3, 3, device="tpu").to_sparse()]
    for f in attempts:
        with pytest.raises(NotImplementedError, match="sparse tensors are not supported on tpu"):
            f()
    torch.testing.assert_close(s.to_dense().to("tpu").sum(1).cpu(), s.to_dense().sum(1))
