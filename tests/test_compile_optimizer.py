"""Compiled optimizer steps: ``torch.compile(opt.step, backend="tpu")``.

AOTAutograd hands the lowering a functionalised graph: each foreach op over
every parameter in turn, then one ``copy_`` of each new value into its input.
The lowering (torch_tpu/_lowering.py: split_foreach, chain_by_parameter,
write_into_inputs) splits the foreach ops per tensor, orders them parameter
by parameter and writes each final value straight into its input, so the
fusion compiler runs each parameter's update as one fused kernel, as
DEFER_AND_FUSE does for the eager step. These tests check the values against
strict eager and PyTorch CPU, that every node of the step fused, and that
the graph rewrites keep what the traced graph computes where reordering or
writing in place would not.
"""
import operator

import pytest
import torch
import torch.nn as nn

import torch._dynamo
import torch_tpu
from torch_tpu import _lowering

from conftest import TPU, assert_same


torch._dynamo.config.cache_size_limit = 64
aten = torch.ops.aten

SHAPES = [(64, 48), (48,), (48, 48), (7, 5), (5,), (256, 16)]


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()
    torch.tpu.synchronize()
    torch_tpu.reset_counts()
    mode = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("error")
    yield
    torch_tpu.set_fallback_mode(mode)
    torch._dynamo.reset()


def _params(device, seed=0):
    g = torch.Generator().manual_seed(seed)
    ps = [nn.Parameter(torch.randn(s, generator=g).to(device)) for s in SHAPES]
    return ps


def _set_grads(ps, step, device):
    g = torch.Generator().manual_seed(100 + step)
    for p in ps:
        p.grad = (torch.randn(p.shape, generator=g) * 0.1).to(device)


def _state(opt):
    return [t for st in opt.state.values() for k, t in sorted(st.items()) if torch.is_tensor(t)]


OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2),
    "adam_amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True),
    "adamw_capturable": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, capturable=True),
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, nesterov=True),
}


def _run(name, device, compiled, steps=3):
    ps = _params(device)
    if device == "cpu" and name.endswith("_capturable"):  # CPU steps are never capturable
        name = name[:-len("_capturable")]
    opt = OPTIMIZERS[name](ps)
    backend = torch_tpu.TpuBackend()
    step = torch.compile(opt.step, backend=backend) if compiled else opt.step
    for s in range(steps):
        _set_grads(ps, s, device)
        step()
    return ps, _state(opt), backend


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_compiled_step_matches_strict_eager_and_cpu(name):
    ps, state, backend = _run(name, TPU, compiled=True)
    ps_e, state_e, _ = _run(name, TPU, compiled=False)
    ps_c, state_c, _ = _run(name, "cpu", compiled=False)
    assert backend.stats["inference"] >= 1, backend.stats
    for got, eager, cpu in zip(ps + state, ps_e + state_e, ps_c + state_c):
        # the traced step's formulas differ from eager's in rounding (e.g. the
        # step size folded into the denominator), as Inductor's do
        assert_same(got, eager.detach().cpu(), atol=1e-6, rtol=1e-5)
        assert_same(got, cpu, atol=1e-6, rtol=1e-5)
    torch.tpu.synchronize()
    assert torch_tpu.fallback_counts() == {}


def test_compiled_adamw_fuses_each_parameter():
    """Every runtime node of the compiled step runs in a fused kernel, and
    no kernel is a lone copy into a parameter or a moment (without the
    rewrites: 684 nodes of the 15.7M Llama's step in 348 kernels, 477 of
    them fused)."""
    ps = _params(TPU)
    opt = torch.optim.AdamW(ps, lr=1e-2)
    step = torch.compile(opt.step, backend=torch_tpu.TpuBackend(replay=False))
    for s in range(2):  # the first step also creates the state
        _set_grads(ps, s, TPU)
        step()
    torch.tpu.synchronize()
    _set_grads(ps, 2, TPU)
    torch.tpu.synchronize()
    before = torch_tpu.defer_metrics()
    step()
    torch.tpu.synchronize()
    after = torch_tpu.defer_metrics()
    nodes = after["nodes_recorded"] - before["nodes_recorded"]
    fused_nodes = after["fused_nodes"] - before["fused_nodes"]
    kernels = after["fused_kernels"] - before["fused_kernels"]
    assert after["flushes"] - before["flushes"] == 1
    assert nodes > 0 and fused_nodes == nodes, (fused_nodes, nodes)
    assert 1 <= kernels <= len(ps), kernels


def test_compiled_model_and_optimizer_train_like_strict_eager():
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 8))
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(8, 16, generator=g), torch.randn(8, 8, generator=g)) for _ in range(5)]

    def run(compiled):
        import copy
        m = copy.deepcopy(base).to(TPU)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        f = torch.compile(m, backend="tpu") if compiled else m
        step = torch.compile(opt.step, backend="tpu") if compiled else opt.step
        losses = []
        for x, y in data:
            loss = nn.functional.mse_loss(f(x.to(TPU)), y.to(TPU))
            loss.backward()
            step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
        return losses, [p.detach().cpu() for p in m.parameters()]

    (l_c, p_c), (l_e, p_e) = run(True), run(False)
    assert l_c == pytest.approx(l_e, rel=1e-5, abs=1e-6)
    for a, b in zip(p_c, p_e):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


# ---- the graph rewrites on hand-built graphs ----------------------------------------------------


def _graph(build, example):
    """A GraphModule from build(graph, placeholders) with each node's meta
    "val" the value an eager run of the graph gives (what AOTAutograd
    records)."""
    g = torch.fx.Graph()
    phs = [g.placeholder(f"arg{i}") for i in range(len(example))]
    build(g, phs)
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    env = dict(zip(phs, [t.clone() for t in example]))
    for n in g.nodes:
        if n.op == "call_function":
            args = torch.fx.node.map_arg(n.args, env.__getitem__)
            kwargs = torch.fx.node.map_arg(n.kwargs, env.__getitem__)
            env[n] = n.target(*args, **kwargs)
        if n in env:
            n.meta["val"] = env[n]
    return gm


def _run_gm(gm, example):
    ins = [t.clone() for t in example]
    out = gm(*ins)
    return ins, out


def _rewrite(gm):
    split = _lowering.split_foreach(gm)
    chained = _lowering.chain_by_parameter(gm)
    written = _lowering.write_into_inputs(gm) if chained else 0
    return split, chained, written


def test_rewrites_keep_an_old_value_read_after_the_new_one_exists():
    """b's update reads a's old value after a's new value is computed: a's
    copy must wait for that read and a's add must not write a in place."""
    def build(g, phs):
        a, b = phs
        na = g.call_function(aten.add.Tensor, (a, 1.0))
        nb = g.call_function(aten.mul.Tensor, (a, b))
        g.call_function(aten.copy_.default, (a, na))
        g.call_function(aten.copy_.default, (b, nb))
        g.output(())
    example = [torch.randn(4, 3), torch.randn(4, 3)]
    ref = _run_gm(_graph(build, example), example)
    gm = _graph(build, example)
    split, chained, written = _rewrite(gm)
    assert chained and written == 1, (chained, written)  # b's mul writes b; a's add stays
    got = _run_gm(gm, example)
    for x, y in zip(got[0], ref[0]):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert aten.copy_.default in targets and aten.mul.out in targets


def test_split_foreach_chains_and_writes_each_tensor():
    def build(g, phs):
        p0, p1, g0, g1 = phs
        d = g.call_function(aten._foreach_mul.Scalar, ([p0, p1], 0.5))
        u = g.call_function(aten._foreach_add.List, ([g.call_function(operator.getitem, (d, 0)),
                                                      g.call_function(operator.getitem, (d, 1))],
                                                     [g0, g1]), {"alpha": -0.1})
        for i, p in enumerate((p0, p1)):
            g.call_function(aten.copy_.default, (p, g.call_function(operator.getitem, (u, i))))
        g.output(())
    example = [torch.randn(5, 2), torch.randn(3), torch.randn(5, 2), torch.randn(3)]
    ref = _run_gm(_graph(build, example), example)
    gm = _graph(build, example)
    split, chained, written = _rewrite(gm)
    assert (split, chained, written) == (2, True, 2)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    # parameter by parameter: p0's mul and add, then p1's
    assert targets == [aten.mul.Scalar, aten.add.out, aten.mul.Scalar, aten.add.out], targets
    got = _run_gm(gm, example)
    for x, y in zip(got[0], ref[0]):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_no_reorder_with_random_ops_other_mutations_or_returned_inputs():
    def with_random(g, phs):
        (a,) = phs
        r = g.call_function(aten.rand_like.default, (a,))
        g.call_function(aten.copy_.default, (a, g.call_function(aten.add.Tensor, (a, r))))
        g.output(())

    def with_inplace(g, phs):
        a, b = phs
        g.call_function(aten.add_.Tensor, (b, 1.0))
        g.call_function(aten.copy_.default, (a, g.call_function(aten.mul.Tensor, (a, b))))
        g.output(())
    def returns_input(g, phs):
        (a,) = phs
        g.call_function(aten.copy_.default, (a, g.call_function(aten.mul.Scalar, (a, 2.0))))
        g.output((a,))
    for build, example in ((with_random, [torch.randn(3)]), (with_inplace, [torch.randn(3), torch.randn(3)]),
                           (returns_input, [torch.randn(3)])):
        gm = _graph(build, example)
        before = [n.target for n in gm.graph.nodes]
        assert _rewrite(gm) == (0, False, 0)
        assert [n.target for n in gm.graph.nodes] == before


def test_no_write_into_an_input_for_returned_values_or_non_pointwise_ops():
    """A value the graph returns stays its own tensor; an op that is not
    pointwise (mm) never writes an input it reads."""
    def returned(g, phs):
        (a,) = phs
        na = g.call_function(aten.mul.Scalar, (a, 2.0))
        g.call_function(aten.copy_.default, (a, na))
        g.output((na,))

    def matmul(g, phs):
        a, b = phs
        na = g.call_function(aten.mm.default, (a, b))
        g.call_function(aten.copy_.default, (a, na))
        g.output(())
    for build, example in ((returned, [torch.randn(3, 3)]), (matmul, [torch.randn(3, 3), torch.randn(3, 3)])):
        ref = _run_gm(_graph(build, example), example)
        gm = _graph(build, example)
        assert _lowering.chain_by_parameter(gm) and _lowering.write_into_inputs(gm) == 0
        got = _run_gm(gm, example)
        for x, y in zip(got[0], ref[0]):
            torch.testing.assert_close(x, y, rtol=0, atol=0)
        if got[1]:
            assert got[1][0].data_ptr() != got[0][0].data_ptr()
