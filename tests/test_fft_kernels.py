"""The fft family: torch.fft and stft native on tpu and equal to CPU.

(The OpInfo entries of fft.* and stft: test_opinfo_native.py.)
(b) gradients of fft.rfft/irfft/fftn/fft/fft2/
rfftn/irfftn against CPU autograd with no fallback; (c) what OpInfo samples
do not reach: long and prime lengths (Bluestein), out= forms, non-contiguous
inputs, complex tensors that must still fall back.
"""
import pytest
import torch

import torch_tpu


GRADS = {
    "rfft": (lambda x: torch.fft.rfft(x), False),
    "rfft_ortho_dim0": (lambda x: torch.fft.rfft(x, dim=0, norm="ortho"), False),
    "irfft": (lambda x: torch.fft.irfft(x), True),
    "irfft_n": (lambda x: torch.fft.irfft(x, n=11, norm="forward"), True),
    "fftn": (lambda x: torch.fft.fftn(x), False),
    "fftn_complex": (lambda x: torch.fft.fftn(x, norm="ortho"), True),
    "fft_complex": (lambda x: torch.fft.fft(x, dim=0), True),
    "ifft2_complex": (lambda x: torch.fft.ifft2(x), True),
    "rfftn": (lambda x: torch.fft.rfftn(x), False),
    "irfftn": (lambda x: torch.fft.irfftn(x, s=(6, 10)), True),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradients_native(name, dtype):
    f, complex_in = GRADS[name]
    torch.manual_seed(0)
    x = torch.randn(6, 9, dtype=dtype)
    if complex_in:
        x = torch.complex(x, torch.randn(6, 9, dtype=dtype))
    def loss(out, g):  # a real loss; complex outputs through their real view
        return ((torch.view_as_real(out) if out.is_complex() else out) * g).sum()

    xc = x.clone().requires_grad_()
    out = f(xc)
    g = torch.randn_like(torch.view_as_real(out) if out.is_complex() else out)
    loss(out, g).backward()
    xt = x.to("tpu").requires_grad_()
    torch_tpu.reset_counts()
    loss(f(xt), g.to("tpu")).backward()
    assert torch_tpu.fallback_counts() == {}
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else {}
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, **tol)


@pytest.mark.parametrize("n", [4096, 1 << 14, 1009, 4099, 1000, 2 * 3 * 5 * 7 * 11])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_lengths(n, dtype):
    torch.manual_seed(n)
    x = torch.randn(3, n, dtype=dtype)
    xt = x.to("tpu")
    torch_tpu.reset_counts()
    tol = dict(rtol=1e-4, atol=1e-3) if dtype == torch.float32 else dict(rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(torch.fft.rfft(xt).cpu(), torch.fft.rfft(x), **tol)
    torch.testing.assert_close(torch.fft.fft(xt).cpu(), torch.fft.fft(x), **tol)
    y = torch.fft.rfft(x)
    torch.testing.assert_close(torch.fft.irfft(y.to("tpu"), n=n).cpu(), torch.fft.irfft(y, n=n),
                               **tol)
    assert torch_tpu.fallback_counts() == {}


def test_out_and_strides():
    torch.manual_seed(1)
    x = torch.randn(8, 12, 10, dtype=torch.float64)
    xt = x.to("tpu")
    torch_tpu.reset_counts()
    # non-contiguous input, several dims in an unusual order
    got = torch.fft.fftn(xt.transpose(0, 2), dim=(2, 0)).cpu()
    torch.testing.assert_close(got, torch.fft.fftn(x.transpose(0, 2), dim=(2, 0)))
    got = torch.fft.rfft(xt[:, ::2, 1:], dim=1, norm="forward").cpu()
    torch.testing.assert_close(got, torch.fft.rfft(x[:, ::2, 1:], dim=1, norm="forward"))
    # out= forms
    out = torch.empty(0, dtype=torch.complex128, device="tpu")
    torch.fft.rfft2(xt, out=out)
    torch.testing.assert_close(out.cpu(), torch.fft.rfft2(x))
    outc = torch.empty(12, 8, 10, dtype=torch.complex128, device="tpu").transpose(0, 1)
    torch.fft.fft(xt.to(torch.complex128), out=outc)
    torch.testing.assert_close(outc.cpu(), torch.fft.fft(x.to(torch.complex128)))
    assert not outc.is_contiguous()
    assert torch_tpu.fallback_counts() == {}


def test_complex_math_still_falls_back():
    """Rows without complex support refuse complex operands (counted
    fallback): the complex SVD behind matrix norms (the README's list of
    what still falls back); logcumsumexp, var/var_mean and matrix_exp of
    complex input are native."""
    x = torch.randn(5, dtype=torch.complex64)
    xt = x.to("tpu")
    torch_tpu.reset_counts()
    torch.testing.assert_close(torch.logcumsumexp(xt, 0).cpu(), torch.logcumsumexp(x, 0))
    torch.testing.assert_close(torch.var(xt, 0).cpu(), torch.var(x, 0))
    torch.testing.assert_close(torch.var_mean(xt, 0)[1].cpu(), torch.var_mean(x, 0)[1])
    assert torch_tpu.fallback_counts() == {}
    m = x.reshape(1, 5) * x.reshape(5, 1)
    got = torch.linalg.matrix_norm(m.to("tpu"), "nuc")
    torch.testing.assert_close(got.cpu(), torch.linalg.matrix_norm(m, "nuc"))
    assert torch_tpu.fallback_counts().get("aten::_linalg_svd", 0) >= 1
    with pytest.raises(NotImplementedError):
        torch_tpu.set_fallback_mode("error")
        try:
            torch.linalg.svdvals(m.to("tpu"))
        finally:
            torch_tpu.set_fallback_mode("warn")


def test_complex_real_linear_ops():
    """mul by a real factor, zero_, conj_physical and constant padding of
    complex tensors run natively (the ops fft functions and their gradients
    use); the rest of complex arithmetic: tests/test_complex_math.py."""
    torch.manual_seed(2)
    x = torch.randn(4, 6, dtype=torch.complex64)
    r = torch.randn(6, dtype=torch.float64)
    xt, rt = x.to("tpu"), r.to("tpu")
    torch_tpu.reset_counts()
    torch.testing.assert_close((xt.mT * 2.5).cpu(), x.mT * 2.5)
    torch.testing.assert_close((xt * rt).cpu(), x * r)  # complex128, as on the CPU
    assert (xt * rt).dtype == torch.complex128
    y = xt.clone()
    y[:, ::2].mul_(-3)
    yc = x.clone()
    yc[:, ::2].mul_(-3)
    torch.testing.assert_close(y.cpu(), yc)
    y[1:, 1::2].zero_()
    yc[1:, 1::2].zero_()
    torch.testing.assert_close(y.cpu(), yc)
    torch.testing.assert_close(torch.conj_physical(xt.T).cpu(), torch.conj_physical(x.T))
    z = xt.clone()
    z.conj_physical_()
    torch.testing.assert_close(z.cpu(), x.conj())
    p = torch.nn.functional.pad(xt.to(torch.complex128), (1, 2, 0, 1))
    torch.testing.assert_close(p.cpu(), torch.nn.functional.pad(x.to(torch.complex128), (1, 2, 0, 1)))
    torch.testing.assert_close(torch.zeros(3, dtype=torch.complex64, device="tpu").cpu(),
                               torch.zeros(3, dtype=torch.complex64))
    assert torch_tpu.fallback_counts() == {}
    torch.testing.assert_close((xt / xt).cpu(), x / x)
    assert torch_tpu.fallback_counts() == {}
