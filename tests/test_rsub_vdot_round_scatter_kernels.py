"""rsub, vdot, round(decimals), gather/scatter with empty or int32
indices and legacy scatter reduce on bool run natively on tpu (zero
fallbacks) and equal CPU, forward (every OpInfo entry, every dtype CPU
supports) and backward (gradients against CPU autograd)."""
import pytest
import torch

import torch_tpu
from conftest import assert_opinfo_native, opinfo_pairs
from torch_tpu.tools import coverage

OPINFO_NAMES = ["rsub", "__rsub__", "vdot", "linalg.vecdot", "round.decimals_3", "round.decimals_neg_3",
                "round.decimals_0", "gather", "scatter"]
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
          torch.int16, torch.int8, torch.uint8, torch.bool]


def _pairs():
    return opinfo_pairs(OPINFO_NAMES, DTYPES, variants=False)


@pytest.fixture
def fallback_error():
    mode = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("error")
    yield
    torch_tpu.set_fallback_mode(mode)


@pytest.mark.parametrize("op,dtype", _pairs())
def test_opinfo_native_and_equal(op, dtype):
    assert_opinfo_native(op, dtype)


def test_opinfo_names_exist():
    from torch.testing._internal.common_methods_invocations import op_db
    keys = {coverage.op_key(op) for op in op_db}
    assert set(OPINFO_NAMES) <= keys


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
