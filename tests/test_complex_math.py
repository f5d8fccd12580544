"""Complex64/complex128 as first-class dtypes on tpu (issue 27): elementwise
math, sum/mean, the matmul family and cat run natively (no CPU fallback)
and match PyTorch CPU, in strict eager and (in the test command's
DEFER_AND_FUSE pass) deferred. The C tests check the kernels against plain
references; these check the ATen bindings, dtype rules, in-place and out=
forms, and broadcasting with real operands."""
import pytest
import torch

from conftest import no_fallback

CDTYPES = [torch.complex64, torch.complex128]


def _c(shape, dtype, seed=0, lo=-2.0, hi=2.0):
    g = torch.Generator().manual_seed(seed)
    re = torch.empty(shape, dtype=torch.float64).uniform_(lo, hi, generator=g)
    im = torch.empty(shape, dtype=torch.float64).uniform_(lo, hi, generator=g)
    return torch.complex(re, im).to(dtype)


def _tol(dtype):
    return dict(rtol=2e-5, atol=2e-5) if dtype == torch.complex64 else dict(rtol=1e-11, atol=1e-11)


def _check(fn, *args, dtype, **kw):
    want = fn(*args, **kw)
    with no_fallback():
        got = fn(*[a.to("tpu") if isinstance(a, torch.Tensor) else a for a in args], **kw)
        got_cpu = got.cpu()
    assert got.device.type == "tpu" and got.dtype == want.dtype
    torch.testing.assert_close(got_cpu, want, equal_nan=True, **_tol(dtype))


UNARY = ["neg", "reciprocal", "abs", "angle", "sgn", "exp", "exp2", "expm1", "log", "log2",
         "log10", "log1p", "sqrt", "rsqrt", "sigmoid", "sin", "cos", "tan", "asin", "acos",
         "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "square"]


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("op", UNARY)
def test_unary_math_matches_cpu(op, dtype):
    x = _c((7, 9), dtype)
    _check(getattr(torch, op), x.t(), dtype=dtype)  # strided


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow", "eq", "ne"])
def test_binary_math_matches_cpu(op, dtype):
    x, y = _c((5, 6), dtype, 1), _c((6,), dtype, 2)
    _check(getattr(torch, op), x, y, dtype=dtype)                       # broadcast row
    _check(getattr(torch, op), x, y.real.to(torch.float32), dtype=dtype)  # a real other
    _check(getattr(torch, op), x.real.contiguous(), y, dtype=dtype)   # a real self
    _check(getattr(torch, op), x, 2.5, dtype=dtype)                   # a number


@pytest.mark.parametrize("dtype", CDTYPES)
def test_arithmetic_forms_match_cpu(dtype):
    x, y, z = _c((4, 5), dtype, 3), _c((4, 5), dtype, 4), _c((5,), dtype, 5)
    _check(lambda a, b: torch.add(a, b, alpha=-1.5), x, y, dtype=dtype)
    _check(lambda a, b: torch.sub(a, b, alpha=2), x, y, dtype=dtype)
    _check(lambda a, b: torch.rsub(a, b), x, y, dtype=dtype)
    _check(lambda a, b, c: torch.addcmul(a, b, c, value=0.5), x, y, z, dtype=dtype)
    _check(lambda a, b, c: torch.addcdiv(a, b, c, value=-2), x, y, z, dtype=dtype)
    _check(lambda a, b: torch.lerp(a, b, 0.3), x, y, dtype=dtype)
    _check(lambda a, b: torch.lerp(a, b, 0.8), x, y, dtype=dtype)
    _check(lambda a, b: torch.where(a.real > 0, a, b), x, y, dtype=dtype)
    _check(lambda a: a ** 2, x, dtype=dtype)
    _check(lambda a: a ** -0.5, x, dtype=dtype)
    _check(lambda a: a ** 1.7, x, dtype=dtype)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_inplace_and_out_forms_match_cpu(dtype):
    x, y = _c((3, 4), dtype, 6), _c((3, 4), dtype, 7)

    def inplace(a, b):
        a = a.clone()
        a.mul_(b).add_(b, alpha=0.5).div_(b + 3).exp_()
        return a

    _check(inplace, x, y, dtype=dtype)

    def with_out(a, b):
        out = torch.empty_like(a)
        torch.sub(a, b, out=out)
        r = torch.empty(a.shape, dtype=a.real.dtype, device=a.device)
        torch.abs(out, out=r)
        return torch.complex(r, torch.angle(out))

    _check(with_out, x, y, dtype=dtype)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_complex_and_polar_build_complex_tensors(dtype):
    part = torch.float32 if dtype == torch.complex64 else torch.float64
    re, im = torch.randn(4, 5, dtype=part), torch.randn(5, dtype=part)
    _check(torch.complex, re, im, dtype=dtype)
    _check(torch.polar, re.abs(), im, dtype=dtype)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_sum_and_mean_match_cpu(dtype):
    x = _c((3, 4, 5), dtype, 8)
    _check(torch.sum, x, dtype=dtype)
    _check(torch.mean, x.transpose(0, 2), dtype=dtype)
    _check(lambda a: a.sum(-1), x, dtype=dtype)
    _check(lambda a: a.sum((0, 2), keepdim=True), x, dtype=dtype)
    _check(lambda a: a.mean(1), x, dtype=dtype)
    _check(lambda a: a.sum(dim=[]), x, dtype=dtype)
    _check(lambda a: a.to(torch.complex64).sum(1, dtype=torch.complex128), x, dtype=dtype)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_matmul_family_matches_cpu(dtype):
    a, b, c = _c((3, 4), dtype, 9), _c((4, 5), dtype, 10), _c((3, 5), dtype, 11)
    _check(torch.mm, a, b, dtype=dtype)
    _check(lambda x, y: x @ y, a.t().contiguous().t(), b, dtype=dtype)
    _check(torch.bmm, _c((2, 3, 4), dtype, 12), _c((2, 4, 6), dtype, 13), dtype=dtype)
    _check(lambda x, y, z: torch.addmm(z, x, y, beta=0.5, alpha=2), a, b, c, dtype=dtype)
    _check(torch.mv, a, b[:, 0], dtype=dtype)
    _check(torch.dot, b[:, 0], b[:, 1], dtype=dtype)
    _check(torch.vdot, b[:, 0], b[:, 1], dtype=dtype)
    _check(torch.matmul, _c((2, 3, 4), dtype, 14), b, dtype=dtype)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_cat_and_stack_match_cpu(dtype):
    x, y = _c((2, 3), dtype, 15), _c((4, 3), dtype, 16)
    _check(lambda a, b: torch.cat([a, b]), x, y, dtype=dtype)
    _check(lambda a, b: torch.cat([a, b.real], 0), x, y, dtype=dtype)  # promoted
    _check(lambda a, b: torch.stack([a, b[:2]], 1), x, y, dtype=dtype)


def test_complex_rope_written_with_complex_math_stays_native():
    """Llama's reference RoPE with complex numbers, forward and backward."""
    torch.manual_seed(0)
    x = torch.randn(2, 8, 4, 16)
    freqs = torch.outer(torch.arange(8.0), 1.0 / (10000 ** (torch.arange(0, 16, 2.0) / 16)))

    def rope(t, dev):
        fc = torch.polar(torch.ones_like(freqs), freqs).to(dev)
        tc = torch.view_as_complex(t.reshape(*t.shape[:-1], -1, 2))
        out = torch.view_as_real(tc * fc.view(1, 8, 1, 8)).flatten(3)
        return (out * out).sum(), out

    xc = x.clone().requires_grad_()
    loss, out = rope(xc, "cpu")
    loss.backward()
    with no_fallback():
        xt = x.to("tpu").requires_grad_()
        loss_t, out_t = rope(xt, "tpu")
        loss_t.backward()
        got = (out_t.cpu(), xt.grad.cpu())
    torch.testing.assert_close(got[0], out)
    torch.testing.assert_close(got[1], xc.grad)


# Complex Python numbers as operands: (name, fn) rows, each run on complex64,
# complex128, and the real dtypes a complex number promotes (float32 ->
# complex64, float64 -> complex128, int64 and bool -> complex64), as CPU does.
CX_NUMBER_CASES = [
    ("mul_1j", lambda a: a * 1j),
    ("rmul", lambda a: (0.5 - 2j) * a),
    ("add", lambda a: a + (2 + 3j)),
    ("radd", lambda a: (2 + 3j) + a),
    ("sub", lambda a: a - 1j),
    ("rsub", lambda a: 1j - a),
    ("div", lambda a: a / (1 + 1j)),
    ("rdiv", lambda a: (1 + 1j) / (a + 3)),
    ("pow", lambda a: (a + 3) ** (0.5 + 0.25j)),
    ("eq", lambda a: torch.eq(a, 1j)),
    ("ne", lambda a: torch.ne(a, 2 + 0j)),
    ("where_other", lambda a: torch.where(a.real > 0, a, 1j)),
    ("where_self", lambda a: torch.where(a.real > 0, -2j, a)),
    ("zero_dim_cpu_tensor", lambda a: a * torch.tensor(1 - 1j, dtype=torch.complex128)),
]
CX_ALPHA_CASES = [
    ("add_alpha", lambda a, b: torch.add(a, b, alpha=2j)),
    ("sub_alpha", lambda a, b: torch.sub(a, b, alpha=1 - 0.5j)),
    ("rsub_alpha", lambda a, b: torch.rsub(a, b, alpha=-3j)),
    ("addcmul_value", lambda a, b: torch.addcmul(a, a, b, value=0.5j)),
    ("addcdiv_value", lambda a, b: torch.addcdiv(a, a, b + 3, value=1 + 2j)),
    ("add_inplace_alpha", lambda a, b: a.clone().add_(b, alpha=2j)),
    ("mul_inplace", lambda a, b: a.clone().mul_(1j).sub_(1j)),
    # the matmul family's beta and alpha (matmul_complex.c); beta 0 ignores self
    ("addmm_alpha_beta", lambda a, b: torch.addmm(a, a, torch.outer(b, b), beta=1 - 1j, alpha=2j)),
    ("addmm_beta0", lambda a, b: torch.addmm(a / 0, a, torch.outer(b, b), beta=0, alpha=0.5j)),
    ("addmm_inplace", lambda a, b: a.clone().addmm_(a, torch.outer(b, b), alpha=-1j)),
    ("baddbmm_alpha_beta", lambda a, b: torch.baddbmm(a.expand(2, 4, 5), a.expand(2, 4, 5),
                                                      torch.outer(b, b).expand(2, 5, 5),
                                                      beta=2j, alpha=1 + 1j)),
    ("addmv_alpha_beta", lambda a, b: torch.addmv(a[0], torch.outer(b, b), b, beta=0.5j,
                                                  alpha=3j)),
]
NUMBER_DTYPES = CDTYPES + [torch.float32, torch.float64, torch.int64, torch.bool]


def _operand(dtype, seed):
    if dtype.is_complex:
        return _c((4, 5), dtype, seed)
    if dtype == torch.bool:
        return torch.arange(20).reshape(4, 5) % 3 == 0
    if dtype == torch.int64:
        return torch.arange(-10, 10).reshape(4, 5)
    return _c((4, 5), torch.complex128, seed).real.to(dtype)


def _tol_of(dtype):
    return _tol(torch.complex64 if dtype in (torch.complex64, torch.float32, torch.int64,
                                             torch.bool) else torch.complex128)


@pytest.mark.parametrize("dtype", NUMBER_DTYPES)
@pytest.mark.parametrize("name,fn", CX_NUMBER_CASES, ids=[c[0] for c in CX_NUMBER_CASES])
def test_complex_number_operands_match_cpu(name, fn, dtype):
    x = _operand(dtype, 20)
    try:
        want = fn(x)
    except Exception as e:  # noqa: BLE001  (bool - 1j: CPU refuses; so must tpu)
        with pytest.raises(type(e)):
            fn(x.to("tpu")).cpu()
        return
    with no_fallback():
        got = fn(x.to("tpu"))
        got_cpu = got.cpu()
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    torch.testing.assert_close(got_cpu, want, equal_nan=True, **_tol_of(dtype))


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("name,fn", CX_ALPHA_CASES, ids=[c[0] for c in CX_ALPHA_CASES])
def test_complex_alpha_and_value_match_cpu(name, fn, dtype):
    x, y = _c((4, 5), dtype, 21), _c((5,), dtype, 22)
    _check(fn, x, y, dtype=dtype)


def test_complex_numbers_refused_like_cpu():
    """What CPU refuses raises the same error type on tpu (through the
    fallback): a complex alpha with real tensors, ordering and clamping
    complex values."""
    from conftest import raised_type
    x = torch.randn(3)
    for fn in (lambda a: torch.add(a, a, alpha=2j),
               lambda a: torch.addmm(a.reshape(3, 1), a.reshape(3, 1), a.reshape(1, 3),
                                     alpha=2j),
               lambda a: torch.lt(a.to(torch.complex64), 1j),
               lambda a: torch.clamp(a.to(torch.complex64), min=1j)):
        want, _ = raised_type(lambda: fn(x))
        got, _ = raised_type(lambda: fn(x.to("tpu")))
        assert want is not None and got is want


@pytest.mark.parametrize("dtype", CDTYPES)
def test_complex_fill_forms_match_cpu(dtype):
    """fill_, full and masked_fill with complex numbers, native; a complex
    number into a real tensor raises as on the CPU."""
    from conftest import raised_type
    x = _c((3, 4), dtype, 23)
    for fn in (lambda a: a.clone().fill_(2 - 1j),
               lambda a: a[:, ::2].clone().fill_(3),
               lambda a: torch.full(a.shape, 0.5j, dtype=a.dtype, device=a.device),
               lambda a: a.masked_fill(a.real > 0, 1j)):
        want = fn(x)
        with no_fallback():
            got = fn(x.to("tpu")).cpu()
        torch.testing.assert_close(got, want)
    want, _ = raised_type(lambda: torch.zeros(3).fill_(1j))
    got, _ = raised_type(lambda: torch.zeros(3, device="tpu").fill_(1j))
    assert want is RuntimeError and got is want


def test_repeated_programs_read_each_complex_number():
    """The same program recorded with different complex numbers (a loop):
    each run reads its own number, both parts (DEFER_AND_FUSE's flush memo
    signs them)."""
    x = _c((8,), torch.complex64, 24)
    xt = x.to("tpu")
    with no_fallback():
        got = [torch.add(xt * v, xt, alpha=v).cpu() for v in (1j, 2j, 1 + 2j, 1 + 3j)]
    for g, v in zip(got, (1j, 2j, 1 + 2j, 1 + 3j)):
        torch.testing.assert_close(g, torch.add(x * v, x, alpha=v))
