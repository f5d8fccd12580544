"""Replay of compiled graphs (TpuBackend(replay=...), runtime capture.h):
after a graph's first call for a layout of its inputs, later calls replay the
runtime work that call recorded instead of running the graph's code op by op.

Every test compares replayed calls with eager on fresh inputs (a replay that
ignored its new inputs, or reused a result's memory, gives the first call's
values), and checks that replays happened (or, where a replay cannot be
exact, that none did).
"""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu
from torch_tpu import TpuBackend

from conftest import TPU, assert_same


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", str(tmp_path / "cache"))
    torch._dynamo.reset()
    torch.tpu.synchronize()
    torch_tpu.reset_counts()
    yield
    torch.tpu.synchronize()
    assert torch_tpu.fallback_counts() == {}, torch_tpu.fallback_counts()
    torch._dynamo.reset()


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 8))


def test_inference_replays_on_new_inputs_and_matches_eager():
    m = _mlp().to(TPU)
    be = TpuBackend(replay=True)
    cm = torch.compile(m, backend=be)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(5, 16, generator=g).to(TPU)
            assert_same(cm(x), m(x).cpu(), atol=0, rtol=0)
    assert be.stats["inference"] == 1 and be.stats["calls"] == 5, be.stats
    assert be.stats["replays"] == 4, be.stats


def test_replay_records_what_the_graph_records(strict_global):
    """The replayed call reaches the runtime as the same nodes, cut at the
    same points, with the same fused programs (all cache hits)."""
    def f(x, w, b):
        return F.gelu(x @ w + b) * 0.5 + x

    args = [torch.randn(512, 512, device=TPU), torch.randn(512, 512, device=TPU),
            torch.randn(512, device=TPU)]
    metrics = {}
    for replay in (False, True):
        torch._dynamo.reset()
        be = TpuBackend(replay=replay)
        cf = torch.compile(f, backend=be, fullgraph=True)
        for _ in range(2):
            cf(*args)
            torch.tpu.synchronize()
        torch_tpu.reset_defer_metrics()
        out = cf(*args)
        torch.tpu.synchronize()
        metrics[replay] = torch_tpu.defer_metrics()
        assert be.stats["replays"] == 2 * int(replay), be.stats
        assert_same(out, f(*[a.cpu() for a in args]), atol=1e-4, rtol=1e-4)
    assert metrics[True] == metrics[False]
    assert metrics[True]["cache_hits"] == 1 and metrics[True]["programs_compiled"] == 0
    assert metrics[True]["gemm_epilogues"] == 1  # the GEMM and its epilogue


def test_training_steps_replay_forward_and_backward():
    m_eager = _mlp().to(TPU)
    m = copy.deepcopy(m_eager)
    be = TpuBackend(replay=True)
    cm = torch.compile(m, backend=be)
    opts = [torch.optim.SGD(mm.parameters(), lr=0.05) for mm in (m, m_eager)]
    g = torch.Generator().manual_seed(2)
    for _ in range(6):
        x = torch.randn(8, 16, generator=g).to(TPU).requires_grad_()
        xe = x.detach().clone().requires_grad_()
        losses = []
        for model, inp in ((cm, x), (m_eager, xe)):
            loss = model(inp).square().mean()
            loss.backward()
            losses.append(loss.item())
        assert losses[0] == losses[1]
        assert torch.equal(x.grad.cpu(), xe.grad.cpu())
        for p, pe in zip(m.parameters(), m_eager.parameters()):
            assert torch.equal(p.grad.cpu(), pe.grad.cpu())
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=True)
    assert be.stats["forward"] == 1 and be.stats["backward"] == 1, be.stats
    assert be.stats["replays"] == 10, be.stats  # 5 forward + 5 backward


def test_input_mutation_and_views_of_inputs_replay():
    def f(x, y):
        x.mul_(2)                      # a graph input updated in place
        return x.t(), x + y, (x * y).view(-1)[:3]

    be = TpuBackend(replay=True)
    cf = torch.compile(f, backend=be)
    x0 = torch.randn(4, 6)
    xs, xe = x0.to(TPU), x0.clone()
    for i in range(4):
        y = torch.full((4, 6), float(i))
        got = cf(xs, y.to(TPU))
        want = f(xe, y)
        for a, b in zip(got, want):
            assert_same(a, b, atol=0, rtol=0)
        assert_same(xs, xe, atol=0, rtol=0)
        assert got[0]._base is xs or got[0].data_ptr() == xs.data_ptr()
    assert be.stats["replays"] >= 2, be.stats


def test_layouts_get_their_own_capture():
    def f(x):
        return torch.sin(x) * 2

    be = TpuBackend(replay=True)
    cf = torch.compile(f, backend=be, dynamic=False)
    base = torch.randn(6, 8)
    for i in range(3):
        for x in (base + i, (base + i).t()):   # contiguous, then transposed
            assert_same(cf(x.to(TPU)), f(x), atol=1e-6, rtol=1e-6)
    assert be.stats["replays"] == 4, be.stats


def test_random_graphs_replay_with_fresh_counters():
    """Dropout draws new numbers each call: a replay takes fresh Philox
    counters in the order op-by-op calls take them, so the same seed gives
    eager's numbers call after call."""
    def f(x):
        return F.dropout(x, 0.5, training=True) + torch.rand_like(x)

    be = TpuBackend(replay=True)
    cf = torch.compile(f, backend=be)
    x = torch.randn(64, 33, device=TPU)
    torch.manual_seed(7)
    eager = [f(x).cpu() for _ in range(4)]
    torch.manual_seed(7)
    compiled = [cf(x).cpu() for _ in range(4)]
    for e, c in zip(eager, compiled):
        assert torch.equal(e, c)
    assert not torch.equal(compiled[2], compiled[3])
    assert be.stats["replays"] == 3, be.stats


def test_training_with_dropout_replays_and_matches_eager():
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.3), nn.GELU(), nn.Linear(32, 8)).to(TPU)

    m_eager, m = make(), make()
    be = TpuBackend(replay=True)
    cm = torch.compile(m, backend=be)
    g = torch.Generator().manual_seed(2)
    for step in range(4):
        x = torch.randn(8, 16, generator=g).to(TPU)
        losses = []
        for model in (cm, m_eager):
            torch.manual_seed(100 + step)
            loss = model(x).square().mean()
            loss.backward()
            losses.append(loss.item())
        assert losses[0] == losses[1], step
        for p, pe in zip(m.parameters(), m_eager.parameters()):
            assert torch.equal(p.grad.cpu(), pe.grad.cpu())
            p.grad = pe.grad = None
    assert be.stats["replays"] == 6, be.stats  # 3 forward + 3 backward


def test_host_reads_and_cpu_inputs_are_not_replayed():
    def reads(x):
        y = x * 2
        return y, y.sum().item()        # .item() reads a value on the host

    def scalar_tensor(x, s):
        return x * s                     # s: a CPU scalar tensor, a value baked into the node

    torch._dynamo.config.capture_scalar_outputs = True
    try:
        for fn, make in ((reads, lambda x, i: (x,)),
                         (scalar_tensor, lambda x, i: (x, torch.tensor(float(i) + 0.5)))):
            torch._dynamo.reset()
            be = TpuBackend(replay=True)
            cf = torch.compile(fn, backend=be, fullgraph=True)
            for i in range(3):
                args = make(torch.randn(5, 7) + i, i)
                got, want = cf(*[a.to(TPU) if a.dim() else a for a in args]), fn(*args)
                for a, b in zip(got if isinstance(got, tuple) else (got,),
                                want if isinstance(want, tuple) else (want,)):
                    if isinstance(b, torch.Tensor):
                        assert_same(a, b, atol=1e-6, rtol=1e-6)
                    else:
                        assert a == pytest.approx(b, rel=1e-4)
            assert be.stats["calls"] == 3 and be.stats["replays"] == 0, (fn.__name__, be.stats)
    finally:
        torch._dynamo.config.capture_scalar_outputs = False


def test_replay_off():
    m = _mlp().to(TPU)
    be = TpuBackend(replay=False)
    cm = torch.compile(m, backend=be)
    with torch.no_grad():
        for _ in range(3):
            cm(torch.randn(5, 16, device=TPU))
    assert be.stats["replays"] == 0 and be.stats["calls"] == 3, be.stats


def test_bench_call_overhead_smoke():
    """The per-call benchmark runs and its three columns agree with eager."""
    import subprocess
    import sys
    from conftest import child_env
    out = subprocess.run([sys.executable, "bench/bench_call_overhead.py", "--rounds", "1", "--calls", "2"],
                         capture_output=True, text=True, env=child_env(), timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("| eager") or
            line.startswith("| compiled")]
    assert len(rows) == 3 and all("| True |" in r for r in rows), out.stdout
    # replay on: every call but the first (3 warm-up, 2 timed, 1 checked)
    assert rows[2].rstrip(" |").endswith("| 5") and rows[1].rstrip(" |").endswith("| 0"), rows
