"""The rnn_cell family: PyTorch's fused LSTM/GRU cells, which nn.LSTM, nn.LSTMCell,
nn.GRU and nn.GRUCell call on a non-CPU device (ATen has no CPU kernel for them, so
the CPU fallback cannot run them). No OpInfo entry covers them: (a) the four ops
match their formulas (evaluated on the CPU in float64) for every floating dtype,
with and without biases, on strided operands; (b) the modules' forward and backward
match CPU autograd with zero fallbacks (fallbacks raise)."""
import copy

import pytest
import torch
import torch.utils._pytree as pytree

import torch_tpu
from conftest import no_fallback

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
TOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}
aten = torch.ops.aten


def _close(got, want, dtype):
    tol = TOL[dtype]
    torch.testing.assert_close(got.cpu().double(), want.double(), atol=tol, rtol=tol)


def _strided(t, how):
    """t's values in a non-contiguous tpu tensor (how: contig, transposed, sliced)."""
    t = t.to("tpu")
    if how == "transposed":
        return t.t().contiguous().t()
    if how == "sliced":
        big = torch.zeros(t.shape[0], 2 * t.shape[1], dtype=t.dtype, device="tpu")
        big[:, ::2] = t
        return big[:, ::2]
    return t


# ---- (a) the ops against their formulas ------------------------------------------------


def _lstm_ref(ig, hg, cx, ib, hb):
    s = ig.double() + hg.double()
    if ib is not None:
        s = s + ib.double() + hb.double()
    i, f, g, o = s.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx.double() + i * g
    return o * cy.tanh(), cy, torch.cat([i, f, g, o], 1)


def _gru_ref(ig, hg, hx, ib, hb):
    H = hx.shape[1]
    zeros = torch.zeros(3 * H, dtype=torch.float64)
    xr, xz, xn = ig.double().chunk(3, 1)
    hr, hz, hn = hg.double().chunk(3, 1)
    ir, iz, in_ = (ib.double() if ib is not None else zeros).chunk(3)
    br, bz, bn = (hb.double() if hb is not None else zeros).chunk(3)
    r = (xr + hr + ir + br).sigmoid()
    z = (xz + hz + iz + bz).sigmoid()
    hnb = hn + bn
    n = (xn + in_ + r * hnb).tanh()
    return n + z * (hx.double() - n), torch.cat([r, z, n, hx.double(), hnb], 1)


@pytest.mark.parametrize("how", ["contig", "transposed", "sliced"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_fused_lstm_cell_op(dtype, bias, how):
    torch.manual_seed(0)
    B, H = 5, 37
    ig, hg = torch.randn(B, 4 * H, dtype=dtype) * 2, torch.randn(B, 4 * H, dtype=dtype) * 2
    cx = torch.randn(B, H, dtype=dtype)
    ib, hb = (torch.randn(4 * H, dtype=dtype), torch.randn(4 * H, dtype=dtype)) if bias else (None, None)
    with no_fallback():
        hy, cy, ws = aten._thnn_fused_lstm_cell(
            _strided(ig, how), _strided(hg, how), _strided(cx, how),
            ib.to("tpu") if bias else None, hb.to("tpu") if bias else None)
    rhy, rcy, rws = _lstm_ref(ig, hg, cx, ib, hb)
    assert hy.shape == (B, H) and cy.shape == (B, H) and ws.shape == (B, 4 * H)
    assert hy.dtype == cy.dtype == ws.dtype == dtype
    _close(hy, rhy, dtype)
    _close(cy, rcy, dtype)
    _close(ws, rws, dtype)

    # Backward on the tpu's own workspace, against the formulas on the same values.
    ghy, gcy = torch.randn(B, H, dtype=dtype), torch.randn(B, H, dtype=dtype)
    for has_hy, has_cy in [(True, True), (True, False), (False, True)]:
        with no_fallback():
            gg, gcx, gb = aten._thnn_fused_lstm_cell_backward_impl(
                _strided(ghy, how) if has_hy else None, _strided(gcy, how) if has_cy else None,
                cx.to("tpu"), cy, ws, bias)
        w = ws.cpu().double()
        i, f, g, o = w.chunk(4, 1)
        t = cy.cpu().double().tanh()
        go = ghy.double() if has_hy else torch.zeros(B, H, dtype=torch.float64)
        gc = gcy.double() if has_cy else torch.zeros(B, H, dtype=torch.float64)
        dc = go * o * (1 - t * t) + gc
        want = torch.cat([dc * g * i * (1 - i), dc * cx.double() * f * (1 - f),
                          dc * i * (1 - g * g), go * t * o * (1 - o)], 1)
        _close(gg, want, dtype)
        _close(gcx, dc * f, dtype)
        if bias:
            _close(gb, gg.cpu().double().sum(0), dtype)
        else:
            assert gb is None


def test_fused_lstm_cell_backward_without_gradients():
    cx = torch.randn(2, 3, device="tpu")
    with no_fallback():
        hy, cy, ws = aten._thnn_fused_lstm_cell(torch.randn(2, 12, device="tpu"),
                                                torch.randn(2, 12, device="tpu"), cx)
        res = aten._thnn_fused_lstm_cell_backward_impl(None, None, cx, cy, ws, True)
    assert all(r is None for r in res)


@pytest.mark.parametrize("how", ["contig", "transposed", "sliced"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_fused_gru_cell_op(dtype, bias, how):
    torch.manual_seed(1)
    B, H = 4, 29
    ig, hg = torch.randn(B, 3 * H, dtype=dtype) * 2, torch.randn(B, 3 * H, dtype=dtype) * 2
    hx = torch.randn(B, H, dtype=dtype)
    ib, hb = (torch.randn(3 * H, dtype=dtype), torch.randn(3 * H, dtype=dtype)) if bias else (None, None)
    with no_fallback():
        hy, ws = aten._thnn_fused_gru_cell(
            _strided(ig, how), _strided(hg, how), _strided(hx, how),
            ib.to("tpu") if bias else None, hb.to("tpu") if bias else None)
    rhy, rws = _gru_ref(ig, hg, hx, ib, hb)
    assert hy.shape == (B, H) and ws.shape == (B, 5 * H) and hy.dtype == ws.dtype == dtype
    _close(hy, rhy, dtype)
    _close(ws, rws, dtype)

    ghy = torch.randn(B, H, dtype=dtype)
    with no_fallback():
        gi, gh, ghx, gib, ghb = aten._thnn_fused_gru_cell_backward(_strided(ghy, how), ws, bias)
    r, z, n, hxw, hn = ws.cpu().double().chunk(5, 1)
    go = ghy.double()
    dn = go * (1 - z) * (1 - n * n)
    dr = dn * hn * r * (1 - r)
    dz = go * (hxw - n) * z * (1 - z)
    _close(gi, torch.cat([dr, dz, dn], 1), dtype)
    _close(gh, torch.cat([dr, dz, dn * r], 1), dtype)
    _close(ghx, go * z, dtype)
    if bias:
        _close(gib, gi.cpu().double().sum(0), dtype)
        _close(ghb, gh.cpu().double().sum(0), dtype)
    else:
        assert gib is None and ghb is None


def test_fused_cell_bad_arguments_raise():
    # Shapes the fused cells reject: the row falls back and PyTorch's error is raised
    # (there is no CPU kernel, so the error is PyTorch's NotImplementedError or its
    # size check), never a crash or a wrong result.
    ig = torch.randn(2, 12, device="tpu")
    with pytest.raises((RuntimeError, NotImplementedError)):
        aten._thnn_fused_lstm_cell(ig, torch.randn(2, 8, device="tpu"),
                                   torch.randn(2, 3, device="tpu"))
    with pytest.raises((RuntimeError, NotImplementedError)):
        aten._thnn_fused_gru_cell(torch.randn(2, 12, device="tpu"),
                                  torch.randn(2, 12, device="tpu"), torch.randn(2, 3, device="tpu"))


# ---- (b) the modules against CPU autograd ----------------------------------------------


def _module_check(mod, x, h0=None, use_state=True, dtype=torch.float32, tol=None):
    mod = mod.to(dtype)
    x = x.detach().clone().to(dtype).requires_grad_()
    if h0 is not None:
        h0 = tuple(h.to(dtype) for h in h0) if isinstance(h0, tuple) else h0.to(dtype)
    args = (x,) if h0 is None else (x, h0)
    out = mod(*args)
    tmod = copy.deepcopy(mod).to("tpu")
    xt = x.detach().to("tpu").requires_grad_()
    if h0 is None:
        targs = (xt,)
    elif isinstance(h0, tuple):
        targs = (xt, tuple(h.detach().to("tpu") for h in h0))
    else:
        targs = (xt, h0.detach().to("tpu"))
    with no_fallback():
        tout = tmod(*targs)
        touts = [tout] if torch.is_tensor(tout) else list(pytree.tree_leaves(tout))
        if not use_state:
            touts = touts[:1]
        tloss = sum((t * (k + 1)).sum() for k, t in enumerate(touts))
        tloss.backward()
    outs = [out] if torch.is_tensor(out) else list(pytree.tree_leaves(out))
    if not use_state:
        outs = outs[:1]
    loss = sum((t * (k + 1)).sum() for k, t in enumerate(outs))
    loss.backward()
    tol = tol or (1e-10 if dtype == torch.float64 else 2e-5)
    for a, b in zip(touts, outs):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), atol=tol, rtol=tol)
    torch.testing.assert_close(xt.grad.cpu(), x.grad, atol=tol, rtol=tol)
    for (name, p), q in zip(tmod.named_parameters(), mod.parameters()):
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad.cpu(), q.grad, atol=tol, rtol=tol, msg=name)


LSTM_CONFIGS = [
    # (input, hidden, layers, bidirectional, batch_first, bias, batch, seq)
    (10, 20, 1, False, False, True, 3, 5),
    (10, 20, 2, True, True, True, 4, 6),
    (7, 33, 2, False, True, False, 2, 9),
    (16, 130, 1, True, False, True, 5, 3),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("cfg", LSTM_CONFIGS, ids=str)
@pytest.mark.parametrize("use_state", [True, False])
def test_nn_lstm(cfg, dtype, use_state):
    I, H, L, bi, bf, bias, B, T = cfg
    torch.manual_seed(0)
    mod = torch.nn.LSTM(I, H, num_layers=L, bidirectional=bi, batch_first=bf, bias=bias)
    x = torch.randn((B, T, I) if bf else (T, B, I))
    _module_check(mod, x, dtype=dtype, use_state=use_state)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("cfg", LSTM_CONFIGS, ids=str)
def test_nn_gru(cfg, dtype):
    I, H, L, bi, bf, bias, B, T = cfg
    torch.manual_seed(0)
    mod = torch.nn.GRU(I, H, num_layers=L, bidirectional=bi, batch_first=bf, bias=bias)
    x = torch.randn((B, T, I) if bf else (T, B, I))
    _module_check(mod, x, dtype=dtype)


def test_nn_lstm_initial_state_and_proj():
    torch.manual_seed(0)
    mod = torch.nn.LSTM(6, 12, num_layers=2, proj_size=5)
    x = torch.randn(4, 3, 6)
    h0 = (torch.randn(2, 3, 5), torch.randn(2, 3, 12))
    _module_check(mod, x, h0)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_nn_cells(dtype, bias):
    torch.manual_seed(0)
    x = torch.randn(6, 11)
    _module_check(torch.nn.LSTMCell(11, 17, bias=bias), x,
                  (torch.randn(6, 17), torch.randn(6, 17)), dtype=dtype)
    _module_check(torch.nn.GRUCell(11, 17, bias=bias), x, torch.randn(6, 17), dtype=dtype)
    _module_check(torch.nn.LSTMCell(11, 17, bias=bias), x, dtype=dtype)  # zero state


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell"])
def test_cell_double_backward(kind):
    # create_graph: autograd differentiates through the cell with ordinary ops
    # (_thnn_differentiable_{lstm,gru}_cell_backward), so second derivatives match too.
    torch.manual_seed(0)
    cell = getattr(torch.nn, kind)(3, 4).double()
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    tcell = copy.deepcopy(cell).to("tpu")
    xt = x.detach().to("tpu").requires_grad_()

    def loss(out):
        h, c = out if isinstance(out, tuple) else (out, out)
        return (h * h).sum() + c.sum()
    with no_fallback():
        (g,) = torch.autograd.grad(loss(tcell(xt)), xt, create_graph=True)
        g.sum().backward()
    (g0,) = torch.autograd.grad(loss(cell(x)), x, create_graph=True)
    g0.sum().backward()
    torch.testing.assert_close(g.detach().cpu(), g0.detach())
    torch.testing.assert_close(xt.grad.cpu(), x.grad)


def test_fused_cells_out_variants():
    torch.manual_seed(2)
    B, H = 3, 5
    ig, hg = torch.randn(B, 4 * H, device="tpu"), torch.randn(B, 4 * H, device="tpu")
    cx = torch.randn(B, H, device="tpu")
    want = aten._thnn_fused_lstm_cell(ig, hg, cx)
    outs = (torch.empty(H, B, device="tpu").t(), torch.empty(B, H, device="tpu"),
            torch.empty(B, 4 * H, device="tpu"))
    with no_fallback():
        aten._thnn_fused_lstm_cell.out(ig, hg, cx, out0=outs[0], out1=outs[1], out2=outs[2])
    for a, b in zip(outs, want):
        assert torch.equal(a.cpu(), b.cpu())
    gig, ghg = ig[:, :3 * H], hg[:, :3 * H]
    want = aten._thnn_fused_gru_cell(gig, ghg, cx)
    outs = (torch.empty(B, H, device="tpu"), torch.empty(B, 5 * H, device="tpu"))
    with no_fallback():
        aten._thnn_fused_gru_cell.out(gig, ghg, cx, out0=outs[0], out1=outs[1])
    for a, b in zip(outs, want):
        assert torch.equal(a.cpu(), b.cpu())
