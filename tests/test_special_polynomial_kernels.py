"""The special_functions family's orthogonal polynomials: the Tensor/Scalar
and out= forms and the edge cases the OpInfo samples (test_opinfo_native.py)
do not reach. PyTorch defines no derivatives for these ops, so there is no
gradient check."""
import pytest
import torch

import torch_tpu

POLYS = """
special.chebyshev_polynomial_t special.chebyshev_polynomial_u special.chebyshev_polynomial_v
special.chebyshev_polynomial_w special.shifted_chebyshev_polynomial_t
special.shifted_chebyshev_polynomial_u special.shifted_chebyshev_polynomial_v
special.shifted_chebyshev_polynomial_w special.hermite_polynomial_h special.hermite_polynomial_he
special.laguerre_polynomial_l special.legendre_polynomial_p
""".split()


@pytest.mark.parametrize("name", [n.split(".")[1] for n in POLYS])
def test_poly_forms_and_edges(name):
    """Tensor/Tensor, Scalar x, Scalar n and out= forms, with the edge
    cases (x = +-1, 0, negative and large n; not NaN x: for n > 1
    CPU returns an uninitialised value) match CPU natively."""
    fn = getattr(torch.special, name)
    x = torch.tensor([-1.0, -0.5, 0.0, 0.3, 1.0, 1.7, 0.6, -2.5, 0.999],
                     dtype=torch.float64)
    n = torch.tensor([3.0, 11.0, 7.0, -2.0, 5.0, 9.0, 1.0, 40.0, 25.0], dtype=torch.float64)
    torch_tpu.reset_counts()
    for dt in (torch.float32, torch.float64):
        xc, nc = x.to(dt), n.to(dt)
        xt, nt = xc.to("tpu"), nc.to("tpu")
        torch.testing.assert_close(fn(xt, nt).cpu(), fn(xc, nc), equal_nan=True)
        torch.testing.assert_close(fn(xt, 6).cpu(), fn(xc, 6), equal_nan=True)
        torch.testing.assert_close(fn(0.25, nt).cpu(), fn(0.25, nc), equal_nan=True)
        out = torch.empty_like(xt)
        fn(xt, nt, out=out)
        torch.testing.assert_close(out.cpu(), fn(xc, nc), equal_nan=True)
    xi, ni = torch.arange(-3, 4), torch.arange(0, 7)
    torch.testing.assert_close(fn(xi.to("tpu"), ni.to("tpu")).cpu(), fn(xi, ni))
    assert torch_tpu.fallback_counts() == {}
