"""The linalg families (linalg, linalg_decomp, linalg_simple; their OpInfo
entries: test_opinfo_native.py): gradients of cholesky, solve, inv, det, svd, eigh, qr (and more)
match CPU autograd with no fallback; LinAlgError and half-dtype errors
keep PyTorch's exception types."""
import pytest
import torch

import torch_tpu
from torch_tpu.tools import coverage

# matrix_exp runs natively in float16, bfloat16, float32 and float64 (computed
# in float64, see runtime/src/kernels/linalg/matfn.c)


# ---- gradients --------------------------------------------------------------------

def _spd(n, batch=(), dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*batch, n, n, generator=g, dtype=dtype)
    return a @ a.mT + n * torch.eye(n, dtype=dtype)


def _mat(*shape, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


def _well(n, batch=(), dtype=torch.float64, seed=2):
    return _mat(*batch, n, n, dtype=dtype, seed=seed) + n * torch.eye(n, dtype=dtype)


GRAD_CASES = {
    "cholesky": (lambda a: torch.linalg.cholesky(a), lambda: [_spd(4, (2,))]),
    "cholesky_upper": (lambda a: torch.linalg.cholesky(a, upper=True), lambda: [_spd(3)]),
    "solve": (lambda a, b: torch.linalg.solve(a, b), lambda: [_well(4, (3,)), _mat(3, 4, 2)]),
    "solve_vec_right": (lambda a, b: torch.linalg.solve(a, b, left=False),
                        lambda: [_well(3, (2,)), _mat(2, 5, 3)]),
    "inv": (lambda a: torch.linalg.inv(a), lambda: [_well(5, (2,))]),
    "det": (lambda a: torch.linalg.det(a), lambda: [_well(4, (3,))]),
    "slogdet": (lambda a: torch.linalg.slogdet(a)[1], lambda: [_well(4, (2,))]),
    "svd": (lambda a: (lambda u, s, v: (u @ torch.diag_embed(s) @ v, s))(
        *torch.linalg.svd(a, full_matrices=False)), lambda: [_mat(2, 5, 3)]),
    "svdvals": (lambda a: torch.linalg.svdvals(a), lambda: [_mat(4, 6)]),
    "eigh": (lambda a: (lambda w, v: (w, v @ torch.diag_embed(w) @ v.mT))(*torch.linalg.eigh(a)),
             lambda: [_spd(4, (2,))]),
    "eigvalsh": (lambda a: torch.linalg.eigvalsh(a), lambda: [_spd(5)]),
    "matrix_sqrth": (lambda a: torch.linalg.matrix_sqrth(a), lambda: [_spd(4, (2,))]),
    "polar": (lambda a: torch.linalg.polar(a), lambda: [_mat(2, 5, 3)]),
    "qr": (lambda a: torch.linalg.qr(a), lambda: [_mat(2, 5, 3)]),
    "qr_complete_square": (lambda a: torch.linalg.qr(a, mode="complete"), lambda: [_mat(4, 4)]),
    "lu_factor": (lambda a: torch.linalg.lu_factor(a)[0], lambda: [_well(4, (2,))]),
    "lu": (lambda a: torch.linalg.lu(a)[1:], lambda: [_mat(2, 5, 3)]),
    "solve_triangular": (lambda a, b: torch.linalg.solve_triangular(a.triu(), b, upper=True),
                         lambda: [_well(4), _mat(2, 4, 3)]),
    "cholesky_solve": (lambda b, l: torch.cholesky_solve(b, l),
                       lambda: [_mat(3, 2), torch.linalg.cholesky(_spd(3))]),
    "trace": (lambda a: torch.trace(a), lambda: [_mat(3, 5)]),
    "matrix_exp": (lambda a: torch.linalg.matrix_exp(a), lambda: [_mat(2, 4, 4) * 0.7]),
    "lstsq": (lambda a, b: torch.linalg.lstsq(a, b).solution, lambda: [_mat(2, 5, 3), _mat(2, 5, 2)]),
    "cross": (lambda a, b: torch.linalg.cross(a, b), lambda: [_mat(4, 3), _mat(4, 3, seed=5)]),
    "addbmm": (lambda s, a, b: torch.addbmm(s, a, b, beta=0.5, alpha=2.0),
               lambda: [_mat(3, 4), _mat(2, 3, 5), _mat(2, 5, 4, seed=7)]),
}


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradients_match_cpu(name):
    fn, make = GRAD_CASES[name]
    cpu_in = [t.requires_grad_(True) for t in make()]
    tpu_in = [t.detach().to("tpu").requires_grad_(True) for t in cpu_in]
    cpu_out = _flat(fn(*cpu_in))
    g = torch.Generator().manual_seed(11)
    weights = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in cpu_out]
    sum(((o * w).sum() for o, w in zip(cpu_out, weights))).backward()
    torch_tpu.reset_counts()
    mode = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("error")
    try:
        tpu_out = _flat(fn(*tpu_in))
        sum(((o * w.to("tpu")).sum() for o, w in zip(tpu_out, weights))).backward()
    finally:
        torch_tpu.set_fallback_mode(mode)
    assert torch_tpu.fallback_counts() == {}
    for o, c in zip(tpu_out, cpu_out):
        torch.testing.assert_close(o.detach().cpu(), c.detach(), atol=1e-8, rtol=1e-8)
    for t, c in zip(tpu_in, cpu_in):
        assert t.grad is not None and t.grad.device.type == "tpu"
        torch.testing.assert_close(t.grad.cpu(), c.grad, atol=1e-8, rtol=1e-7)


def _no_fallback(fn):
    torch_tpu.reset_counts()
    mode = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("error")
    try:
        return fn()
    finally:
        torch_tpu.set_fallback_mode(mode)
        assert torch_tpu.fallback_counts() == {}


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("scale", [0.05, 0.7, 3.0])
def test_matrix_exp_complex_matches_cpu(scale, dtype):
    """complex matrix_exp (the real 2n x 2n embedding, in float64), forward and
    backward (a complex 2n x 2n matrix_exp), batched and strided, natively:
    complex128 within tolerance of CPU's; complex64 of complex128's result
    rounded (at least as close to it as CPU's complex64 kernel, which loses
    ~eps32 * |exp(A)| at large norms, as for float32)."""
    g = torch.Generator().manual_seed(11)
    a = torch.complex(torch.randn(2, 5, 5, generator=g, dtype=torch.float64),
                      torch.randn(2, 5, 5, generator=g, dtype=torch.float64)) * scale
    ref = a.clone().requires_grad_(True)  # complex128 on the CPU: the reference
    torch.linalg.matrix_exp(ref).abs().sum().backward()
    a = a.to(dtype)
    ca = a.clone().requires_grad_(True)
    torch.linalg.matrix_exp(ca).abs().sum().backward()
    ta = a.to("tpu").mT.contiguous().mT.requires_grad_(True)

    def run():
        out = torch.linalg.matrix_exp(ta)
        out.abs().sum().backward()
        empty = torch.linalg.matrix_exp(torch.empty(3, 0, 0, dtype=dtype, device="tpu"))
        return out, empty
    out, empty = _no_fallback(run)
    assert out.dtype == dtype and ta.grad.dtype == dtype and empty.shape == (3, 0, 0)
    got, cpu = out.detach().cpu(), torch.linalg.matrix_exp(a)
    want = torch.linalg.matrix_exp(ref.detach()).to(dtype)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(ta.grad.cpu(), ref.grad.to(dtype), rtol=1e-5 * (1 + scale),
                               atol=1e-5 * (1 + scale))
    err = lambda x: (x.to(torch.complex128) - want.to(torch.complex128)).abs().max()  # noqa: E731
    assert err(got) <= err(cpu) * 1.01 + 1e-12 * want.abs().max()


@pytest.mark.parametrize("scale", [0.05, 0.5, 1.5])
def test_matrix_exp_float32_matches_cpu(scale):
    """float32 matrix_exp of moderate norms (every Padé/Taylor degree and a
    few squarings): within float32's default tolerance of CPU's float32
    result, forward and backward, and natively."""
    a = _mat(3, 6, 6, dtype=torch.float32, seed=4) * scale
    w = _mat(3, 6, 6, dtype=torch.float32, seed=9)
    ca = a.clone().requires_grad_(True)
    (torch.linalg.matrix_exp(ca) * w).sum().backward()
    ta = a.to("tpu").requires_grad_(True)

    def run():
        out = torch.linalg.matrix_exp(ta)
        (out * w.to("tpu")).sum().backward()
        return out
    out = _no_fallback(run)
    assert out.dtype == torch.float32 and ta.grad.dtype == torch.float32
    torch.testing.assert_close(out.detach().cpu(), torch.linalg.matrix_exp(a))
    torch.testing.assert_close(ta.grad.cpu(), ca.grad)


def test_matrix_exp_float32_large_norm_vs_float64():
    """The op_db's samples (entries up to 9, |exp(A)| ~ 1e5): CPU's float32
    kernel is off by ~eps32 * |exp(A)| in the small entries, beyond float32's
    element-wise tolerance of the float64 result. tpu's float32 result is the
    float64 one rounded: within float32 rounding of the float64 reference
    (tensor-scaled) and never further from it than the CPU's."""
    g = torch.Generator().manual_seed(3)
    a = (torch.rand(4, 5, 5, generator=g) * 18 - 9)
    ref = torch.linalg.matrix_exp(a.double())
    got = _no_fallback(lambda: torch.linalg.matrix_exp(a.to("tpu"))).cpu().double()
    cpu = torch.linalg.matrix_exp(a).double()
    scale = ref.abs().amax(dim=(-2, -1), keepdim=True)
    err_tpu = ((got - ref).abs() / scale).max()
    err_cpu = ((cpu - ref).abs() / scale).max()
    assert err_tpu <= 2 ** -24 * 1.01, (err_tpu, err_cpu)
    assert err_tpu <= err_cpu
    assert coverage.as_close_as_cpu(got.float(), cpu.float(), ref, tensor_scale=True,
                                    dtypes=(torch.float32,))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matrix_exp_half_types_native_and_exact(dtype):
    """float16/bfloat16 run natively in float64 and round once: within the
    half type's rounding of the float64 result, where PyTorch's CPU kernel
    (working in the half type) is off by orders of magnitude or overflows
    (randn * 0.1 already); never further from float64 than the CPU. The
    backward (matrix_exp of a 2n x 2n block matrix) is native too."""
    a = (_mat(3, 4, 4, dtype=torch.float32, seed=5) * 0.3).to(dtype)
    ref = torch.linalg.matrix_exp(a.double())
    t = a.to("tpu").requires_grad_()
    got = _no_fallback(lambda: torch.linalg.matrix_exp(t))
    assert got.dtype == dtype
    eps = 2 ** -10 if dtype == torch.float16 else 2 ** -7
    scale = ref.abs().amax(dim=(-2, -1), keepdim=True)
    err_tpu = ((got.detach().cpu().double() - ref).abs() / scale).max()
    err_cpu = ((torch.linalg.matrix_exp(a).double() - ref).abs() / scale).nan_to_num(
        float("inf")).max()
    assert err_tpu <= eps, err_tpu
    assert err_tpu <= err_cpu
    _no_fallback(lambda: got.float().sum().backward())
    ref_grad = torch.func.grad(lambda x: torch.linalg.matrix_exp(x).sum())(a.double())
    torch.testing.assert_close(t.grad.cpu().double(), ref_grad, rtol=4 * eps, atol=4 * eps * 10)


# ---- semantics: layouts, info, errors ------------------------------------------------

def test_strided_and_broadcast_operands():
    """Transposed, sliced and broadcast operands read and write correctly."""
    a = _well(6, (3,))[:, ::2, ::2].mT          # non-contiguous square matrices
    b = _mat(6, 3, 8)[::2, :, 1::3]             # strided B: (3, 3, 2)
    torch_tpu.reset_counts()
    ta, tb = a.to("tpu"), b.to("tpu")
    torch.testing.assert_close(torch.linalg.solve(ta, tb).cpu(), torch.linalg.solve(a, b))
    torch.testing.assert_close(torch.linalg.solve(ta[0], tb).cpu(), torch.linalg.solve(a[0], b))
    torch.testing.assert_close(torch.linalg.inv(ta.mT).cpu(), torch.linalg.inv(a.mT))
    out = torch.empty(3, 3, 3, dtype=torch.float64, device="tpu").mT   # strided out=
    torch.linalg.solve(ta, tb, out=out)
    torch.testing.assert_close(out.cpu(), torch.linalg.solve(a, b))
    s = _spd(4).expand(5, 4, 4)                 # stride-0 batch
    torch.testing.assert_close(torch.linalg.cholesky(s.to("tpu")).cpu(), torch.linalg.cholesky(s))
    assert torch_tpu.fallback_counts() == {}


def test_info_semantics_and_linalg_errors():
    """_ex variants report info like the CPU; the others raise LinAlgError."""
    bad = torch.tensor([[[4.0, 2.0], [2.0, 1.0]], [[4.0, 0.0], [0.0, 9.0]],
                        [[1.0, 0.0], [0.0, -1.0]]], dtype=torch.float64)
    torch_tpu.reset_counts()
    L, info = torch.linalg.cholesky_ex(bad.to("tpu"))
    Lc, infoc = torch.linalg.cholesky_ex(bad)
    assert info.cpu().tolist() == infoc.tolist()
    torch.testing.assert_close(L[1].cpu(), Lc[1])
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.cholesky(bad.to("tpu"))
    sing = torch.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=torch.float64)
    _, info = torch.linalg.inv_ex(sing.to("tpu"))
    assert info.item() == torch.linalg.inv_ex(sing)[1].item() == 2
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.inv(sing.to("tpu"))
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.solve(sing.to("tpu"), torch.ones(2, 1, dtype=torch.float64, device="tpu"))
    assert torch.linalg.det(sing.to("tpu")).item() == 0.0
    sign, logabs = torch.linalg.slogdet(sing.to("tpu"))
    assert sign.item() == 0.0 and logabs.item() == float("-inf")
    assert torch_tpu.fallback_counts() == {}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int32])
def test_unsupported_dtypes_raise_like_cpu(dtype):
    a = torch.eye(3).to(dtype)
    for fn in (torch.linalg.inv, torch.linalg.cholesky, torch.linalg.svdvals, torch.linalg.det):
        with pytest.raises(Exception) as cpu_err:
            fn(a)
        with pytest.raises(Exception) as tpu_err:
            fn(a.to("tpu"))
        assert type(tpu_err.value) is type(cpu_err.value)


def test_ldl_round_trip():
    """ldl_factor/ldl_solve (no derivative in PyTorch): A X = B on an indefinite matrix."""
    a = _mat(3, 5, 5)
    a = a + a.mT
    b = _mat(3, 5, 2, seed=4)
    torch_tpu.reset_counts()
    ld, piv = torch.linalg.ldl_factor(a.to("tpu"))
    ldc, pivc = torch.linalg.ldl_factor(a)
    torch.testing.assert_close(ld.cpu(), ldc)
    assert torch.equal(piv.cpu(), pivc)
    x = torch.linalg.ldl_solve(ld, piv, b.to("tpu"))
    torch.testing.assert_close((a @ x.cpu()), b)
    assert torch_tpu.fallback_counts() == {}


def test_empty_and_scalar_shapes():
    torch_tpu.reset_counts()
    for shape in ((0, 3, 3), (2, 0, 0), (3, 3)):
        a = torch.eye(shape[-1], dtype=torch.float64).expand(*shape).contiguous()
        torch.testing.assert_close(torch.linalg.inv(a.to("tpu")).cpu(), torch.linalg.inv(a))
        torch.testing.assert_close(torch.linalg.det(a.to("tpu")).cpu(), torch.linalg.det(a))
        torch.testing.assert_close(torch.linalg.svdvals(a.to("tpu")).cpu(), torch.linalg.svdvals(a))
    assert torch_tpu.fallback_counts() == {}


# ---- eig / eigvals (geev; runtime/src/kernels/linalg/eig.c) ----------------------------

def _eig_in(shape, dtype, seed=3):
    return _mat(*shape, dtype=dtype, seed=seed)


EIG_CASES = {  # name: (make input on the CPU)
    "square": lambda dt: _eig_in((5, 5), dt),
    "batched": lambda dt: _eig_in((2, 3, 6, 6), dt),
    "one_by_one": lambda dt: _eig_in((4, 1, 1), dt),
    "empty_matrix": lambda dt: _eig_in((0, 0), dt),
    "empty_batch": lambda dt: _eig_in((0, 3, 3), dt),
    "zero_size_batch": lambda dt: _eig_in((2, 0, 0), dt),
    "transposed_slices": lambda dt: _eig_in((3, 8, 8), dt)[:, ::2, ::2].mT,
    "expanded": lambda dt: _eig_in((4, 4), dt).expand(3, 4, 4),
    "rotation": lambda dt: torch.tensor([[0.0, -1.0], [1.0, 0.0]]).to(dt),  # eigenvalues ±i
    "triangular": lambda dt: torch.tensor([[2.0, 1.0, 4.0], [0.0, -3.0, 5.0],
                                           [0.0, 0.0, 0.5]]).to(dt),
}
EIG_DTYPES = [torch.float32, torch.float64, torch.complex64, torch.complex128]


def _phase_fixed(v, ref):
    """v's columns times the unit factor that makes the component where ref's column is
    largest real and positive (eigenvectors are unique up to such a factor)."""
    if v.numel() == 0:
        return v
    k = ref.abs().argmax(dim=-2, keepdim=True)
    p = v.gather(-2, k)
    return v * (p.abs() / p)


@pytest.mark.parametrize("dtype", EIG_DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(EIG_CASES))
def test_eig_matches_cpu(name, dtype):
    """linalg.eig / eigvals run natively and agree with the CPU: eigenvalues in the
    same order, eigenvectors up to a unit factor per column (real input: a complex
    pair's sign can differ, see eig.c), A V = V diag(w), CPU's column-major layout."""
    a = EIG_CASES[name](dtype)
    w, v = torch.linalg.eig(a)
    ta = a.to("tpu")
    tw, tv = _no_fallback(lambda: torch.linalg.eig(ta))
    tvals = _no_fallback(lambda: torch.linalg.eigvals(ta))
    tw, tv, tvals = tw.cpu(), tv.cpu(), tvals.cpu()
    assert tw.dtype == w.dtype and tv.dtype == v.dtype and tvals.dtype == w.dtype
    assert tw.shape == w.shape and tv.shape == v.shape and tvals.shape == w.shape
    assert tv.stride() == v.stride()
    torch.testing.assert_close(tw, w)
    torch.testing.assert_close(tvals, w)
    torch.testing.assert_close(_phase_fixed(tv, v), _phase_fixed(v, v))
    ca = a.to(w.dtype)
    torch.testing.assert_close(ca @ tv, tv * tw.unsqueeze(-2), atol=1e-4, rtol=1e-4)
    if v.numel():
        torch.testing.assert_close(torch.linalg.vector_norm(tv, dim=-2),
                                   torch.ones(tw.shape, dtype=tw.real.dtype))


def test_eig_real_pair_eigenvectors_are_conjugate():
    """Real input: a complex pair's eigenvectors are conjugates, built from geev's
    two real columns (a wrong pairing would fail A V = V diag(w))."""
    a = torch.tensor([[1.0, -2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 3.0]], dtype=torch.float64)
    w, v = _no_fallback(lambda: torch.linalg.eig(a.to("tpu")))
    w, v = w.cpu(), v.cpu()
    torch.testing.assert_close(w, torch.linalg.eig(a)[0])
    pair = (w.imag != 0).nonzero().flatten().tolist()
    assert len(pair) == 2
    torch.testing.assert_close(v[:, pair[0]], v[:, pair[1]].conj())
    torch.testing.assert_close(a.to(v.dtype) @ v, v * w)


def test_eig_out_variants():
    a = _eig_in((3, 4, 4), torch.float64)
    w = torch.empty(3, 4, dtype=torch.complex128, device="tpu")
    v = torch.empty(0, dtype=torch.complex128, device="tpu")
    vals = torch.empty(0, dtype=torch.complex128, device="tpu")
    _no_fallback(lambda: torch.linalg.eig(a.to("tpu"), out=(w, v)))
    _no_fallback(lambda: torch.linalg.eigvals(a.to("tpu"), out=vals))
    cw, cv = torch.linalg.eig(a)
    torch.testing.assert_close(w.cpu(), cw)
    torch.testing.assert_close(vals.cpu(), cw)
    torch.testing.assert_close(_phase_fixed(v.cpu(), cv), _phase_fixed(cv, cv))


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_eig_nonfinite_input(bad):
    """linalg.eig raises CPU's RuntimeError for an inf or NaN anywhere in the batch;
    eigvals (which does not check on the CPU, where some such inputs crash MKL)
    gives NaN eigenvalues for that matrix only."""
    a = torch.eye(3, dtype=torch.float64).repeat(2, 1, 1)
    a[1, 2, 0] = bad
    with pytest.raises(RuntimeError) as cpu_err:
        torch.linalg.eig(a)
    with pytest.raises(RuntimeError) as tpu_err:
        torch.linalg.eig(a.to("tpu"))[0].cpu()
    assert str(cpu_err.value) in str(tpu_err.value)
    vals = _no_fallback(lambda: torch.linalg.eigvals(a.to("tpu"))).cpu()
    torch.testing.assert_close(vals[0], torch.ones(3, dtype=torch.complex128))
    assert vals[1].real.isnan().all() and vals[1].imag.isnan().all()


@pytest.mark.parametrize("make", [lambda: torch.randn(2, 3), lambda: torch.randn(3),
                                  lambda: torch.eye(3, dtype=torch.float16),
                                  lambda: torch.eye(3, dtype=torch.int32)],
                         ids=["non_square", "vector", "float16", "int32"])
def test_eig_bad_input_raises_like_cpu(make):
    a = make()
    for fn in (torch.linalg.eig, torch.linalg.eigvals):
        with pytest.raises(Exception) as cpu_err:
            fn(a)
        with pytest.raises(Exception) as tpu_err:
            fn(a.to("tpu"))
        assert type(tpu_err.value) is type(cpu_err.value)
        assert str(cpu_err.value).split("\n")[0] in str(tpu_err.value)
