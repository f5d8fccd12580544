"""rsub, vdot, round(decimals), gather/scatter with empty or int32
indices and legacy scatter reduce on bool run natively on tpu (zero
fallbacks) and equal CPU, backward (gradients against CPU autograd;
the OpInfo entries: test_opinfo_native.py)."""
import pytest
import torch

import torch_tpu


@pytest.fixture
def fallback_error():
    mode = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("error")
    yield
    torch_tpu.set_fallback_mode(mode)


GRAD_CASES = {
    "vdot": lambda x, d: torch.vdot(x[0], x[1] * 2) * x[2],
    "rsub_tensor": lambda x, d: torch.rsub(x, x.flip(0) * 2, alpha=3),
    "rsub_scalar": lambda x, d: torch.rsub(x, 2.5, alpha=0.5),
    "round_decimals": lambda x, d: torch.round(x * 3, decimals=2) * x,
    "gather": lambda x, d: torch.gather(x, 1, torch.tensor([[0, 2, 2], [1, 0, 3], [3, 3, 0]],
                                                           device=d)),
    "scatter_src": lambda x, d: torch.scatter(x, 1, torch.tensor([[0, 2], [1, 3], [3, 0]], device=d),
                                              x[:, :2] * 2),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradients_match_cpu(name, fallback_error):
    fn = GRAD_CASES[name]
    torch.manual_seed(0)
    base = torch.randn(3, 4, dtype=torch.float64)
    xc = base.clone().requires_grad_(True)
    xt = base.to("tpu").requires_grad_(True)
    yc, yt = fn(xc, "cpu"), fn(xt, "tpu")
    g = torch.randn_like(yc)
    yc.backward(g)
    yt.backward(g.to("tpu"))
    torch.testing.assert_close(yt.detach().cpu(), yc.detach())
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)


def test_round_decimals_values():
    x = torch.tensor([1.2345, -2.5, 0.125, 1234.5678, float("nan"), float("inf")])
    for d in (3, -2, 1, 0):
        torch.testing.assert_close(torch.round(x.to("tpu"), decimals=d).cpu(),
                                   torch.round(x, decimals=d), equal_nan=True)
