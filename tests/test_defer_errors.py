"""DEFER_AND_FUSE after a failing op: strict eager's error contract.

In strict eager a failing op records its error on the stream (first one wins,
naming the op), every later op still runs, and the next synchronisation raises
the error once. A deferred program must do the same: every node strict eager
would run still runs, whether it sits after the failing node in the same
program, in the same fused group (tiled or row group), in a later program
(a pipeline cut) or in a replayed compiled graph.

Each test runs one program in strict eager and in DEFER_AND_FUSE, reads every
tensor, and compares value for value all those that do not depend on the
failing op's output (strict eager leaves that output unspecified too), checks
the exception type and that it is raised exactly once, and then runs the same
program with good inputs (the program cache must not be poisoned): every
tensor then matches exactly.
"""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu import EagerMode, TpuBackend

from conftest import TPU

DEFER = EagerMode.DEFER_AND_FUSE
STRICT = EagerMode.DEFER_NEVER


@pytest.fixture(autouse=True)
def _strict_global():
    previous = torch_tpu._internal.execution_mode._global_mode
    torch_tpu.set_global_eager_mode(STRICT)
    torch.tpu.synchronize()
    yield
    torch.tpu.synchronize()
    torch_tpu.set_global_eager_mode(previous)


def _run(mode, program, bad):
    """Runs program(bad) in mode and reads back every tensor it returns, the
    first one first. Returns ({name: cpu tensor}, [exceptions raised])."""
    errors = []
    values = {}
    torch.tpu.synchronize()
    torch.tpu.empty_cache()  # every run starts from the same allocator state
    with torch_tpu.set_eager_mode(mode):
        tensors = program(bad)
        for name, t in tensors.items():
            try:
                values[name] = t.cpu()
            except Exception as e:  # noqa: BLE001
                errors.append(e.with_traceback(None))  # see below
                values[name] = t.cpu()  # reported once: the read now succeeds
    try:
        torch.tpu.synchronize()
    except Exception as e:  # noqa: BLE001
        errors.append(e.with_traceback(None))
    # A kept traceback would keep this frame, and so this run's device
    # tensors, alive into the next run. A program is keyed by its graph, and
    # the graph includes which temporaries share memory, so a different
    # allocator state can record a different graph and compile a new program
    # for reasons that have nothing to do with the error under test.
    return values, errors


def _compare(program, tainted, error_type, op_name):
    """Bad inputs: every tensor not in `tainted` equal in both modes, one
    error of error_type naming op_name in each. Good inputs: every tensor
    equal, no error; DEFER_AND_FUSE reuses the programs of the bad run."""
    strict, strict_errors = _run(STRICT, program, bad=True)
    deferred, deferred_errors = _run(DEFER, program, bad=True)
    for errors in (strict_errors, deferred_errors):
        assert len(errors) == 1, errors
        assert isinstance(errors[0], error_type), repr(errors[0])
        assert op_name in str(errors[0]), str(errors[0])
    assert set(strict) == set(deferred)
    for name in strict:
        if name not in tainted:
            torch.testing.assert_close(deferred[name], strict[name], atol=0, rtol=0,
                                       equal_nan=True, msg=lambda m: f"{name}: {m}")

    strict, strict_errors = _run(STRICT, program, bad=False)
    torch_tpu.reset_defer_metrics()
    deferred, deferred_errors = _run(DEFER, program, bad=False)
    assert strict_errors == [] and deferred_errors == []
    metrics = torch_tpu.defer_metrics()
    assert metrics["programs_compiled"] == 0 and metrics["cache_hits"] > 0, metrics
    for name in strict:
        torch.testing.assert_close(deferred[name], strict[name], atol=0, rtol=0,
                                   equal_nan=True, msg=lambda m: f"{name} (good run): {m}")


# ---- the issue's sequence ----------------------------------------------------------------


def _issue_sequence(bad):
    base = torch.arange(8.0, device=TPU)
    torch.tpu.synchronize()
    u = base * 3 + 1
    a = base.exp()
    b = base.index_select(0, torch.tensor([1, 20 if bad else 5], device=TPU))
    c = b * 2 + a[:2]
    d = torch.tanh(u) - a / 7
    base.add_(100)
    fresh = torch.full((4,), 5.0, device=TPU)
    return {"d": d, "u": u, "a": a, "b": b, "c": c, "base": base, "fresh": fresh}


def test_issue_sequence_runs_every_op_after_the_failing_one():
    _compare(_issue_sequence, {"b", "c"}, IndexError, "index_select")


def _one_graph_sequence(bad):
    """The issue's sequence with the index tensor made first, so nothing
    cuts the graph between the first op and the read."""
    base = torch.arange(8.0, device=TPU)
    idx = torch.tensor([1, 20 if bad else 5], device=TPU)
    torch.tpu.synchronize()
    u = base * 3 + 1
    a = base.exp()
    b = base.index_select(0, idx)
    c = b * 2 + a[:2]
    d = torch.tanh(u) - a / 7
    base.add_(100)
    e = base.index_select(0, idx[:1]) + d[:1]  # after the failure, in range
    fresh = torch.full((4,), 5.0, device=TPU)
    big = torch.linspace(0, 1, 10000, device=TPU).sin() * 2 + 1  # runs on the worker
    return {"d": d, "u": u, "a": a, "b": b, "c": c, "base": base, "e": e, "fresh": fresh,
            "big": big}


def test_one_graph_error_then_every_later_node_runs():
    torch_tpu.reset_defer_metrics()
    _compare(_one_graph_sequence, {"b", "c"}, IndexError, "index_select")


# ---- inside a fused group ----------------------------------------------------------------

N = 40000  # several tiles of a fused group


def _fused_group_middle(bad):
    x = torch.arange(N, device=TPU, dtype=torch.int64)
    z = torch.ones(N, device=TPU, dtype=torch.int64)
    acc = torch.full((N,), 7, device=TPU, dtype=torch.int64)
    z[N // 2] = 0 if bad else 3  # a middle tile fails
    torch.tpu.synchronize()
    p = x * 2 + 1
    q = p // z          # fails, in the middle of the group
    w = x * 3 - 1       # independent of the failure
    acc.add_(w)         # in place, after the failing node
    y = q + w           # depends on the failure
    r = w * w - p
    return {"r": r, "p": p, "q": q, "w": w, "acc": acc, "y": y}


def test_error_in_fused_group_middle():
    with torch_tpu.set_eager_mode(DEFER):
        torch_tpu.reset_defer_metrics()
        _fused_group_middle(False)["r"].cpu()
        m = torch_tpu.defer_metrics()
    assert m["fused_kernels"] >= 1 and m["fused_nodes"] >= 6, m  # one group
    _compare(_fused_group_middle, {"q", "y"}, RuntimeError, "floor_divide")


def _row_group(bad):
    torch.manual_seed(0)
    x = torch.randn(64, 300, device=TPU)
    xi = torch.arange(64 * 300, device=TPU, dtype=torch.int64).view(64, 300)
    z = torch.ones(64, 300, device=TPU, dtype=torch.int64)
    weight = torch.randn(300, device=TPU)
    bias = torch.randn(300, device=TPU)
    z[40, 7] = 0 if bad else 2
    torch.tpu.synchronize()
    h = x * 2 + 1
    q = xi // z                       # fails, joins the row group
    s = torch.softmax(h, -1) * 3 + x  # row-local, fused with pointwise ops
    n = F.layer_norm(s + h, (300,), weight, bias) * 0.5
    t = q + 1
    x.mul_(2)
    return {"n": n, "h": h, "s": s, "q": q, "t": t, "x": x}


def test_error_in_row_group():
    _compare(_row_group, {"q", "t"}, RuntimeError, "floor_divide")


def _cross_entropy_backward(bad):
    torch.manual_seed(1)
    logits = torch.randn(32, 50, device=TPU)
    target = torch.randint(0, 50, (32,), device=TPU)
    target[3] = 50 if bad else 7
    grad = torch.randn(32, device=TPU)
    total_weight = torch.ones((), device=TPU)
    torch.tpu.synchronize()
    logp = F.log_softmax(logits, -1)
    # cross-entropy's backward (reduction none): one row group
    g_logp = torch.ops.aten.nll_loss_backward(grad, logp, target, None, 0, -100, total_weight)
    g = torch.ops.aten._log_softmax_backward_data(g_logp, logp, -1, torch.float32) * 0.5
    other = torch.softmax(logits * 2, -1) - 1
    return {"other": other, "g": g, "g_logp": g_logp, "logp": logp}


def test_error_in_cross_entropy_backward_row_group():
    _compare(_cross_entropy_backward, {"g", "g_logp"}, IndexError, "nll_loss")


# ---- a pipeline cut ------------------------------------------------------------------------


def _pipeline(bad):
    torch.manual_seed(2)
    w = torch.randn(512, 512, device=TPU)
    x = torch.randn(512, 512, device=TPU)
    base = torch.arange(16.0, device=TPU)
    idx = torch.tensor([2, 99 if bad else 9], device=TPU)
    torch.tpu.synchronize()
    b = base.index_select(0, idx)   # fails in the first program
    y = x @ w                       # heavy: the graph is cut after it
    h = torch.relu(y) * 2 + 1       # the next program
    z = h @ w
    base.mul_(3)
    c = b + 1
    return {"z": z, "y": y, "h": h, "base": base, "b": b, "c": c}


def test_error_in_graph_cut_by_the_pipeline_rule():
    torch_tpu.reset_defer_metrics()
    with torch_tpu.set_eager_mode(DEFER):
        _pipeline(False)["z"].cpu()
    assert torch_tpu.defer_metrics()["flushes_by_reason"]["pipeline"] >= 1
    _compare(_pipeline, {"b", "c"}, IndexError, "index_select")


# ---- a replayed compiled graph ---------------------------------------------------------


def _compiled_body(x, idx, acc):
    u = x * 3 + 1
    a = x.exp()
    b = x.index_select(0, idx)
    d = torch.tanh(u) - a / 7
    acc.add_(d)
    return u, b, d * 2


def test_error_in_replayed_compiled_graph():
    be = TpuBackend(replay=True)
    compiled = torch.compile(_compiled_body, backend=be, fullgraph=True)
    x = torch.arange(8.0, device=TPU)
    good = torch.tensor([1, 5], device=TPU)
    bad = torch.tensor([1, 20], device=TPU)
    for _ in range(3):
        acc = torch.zeros(8, device=TPU)
        compiled(x, good, acc)
        torch.tpu.synchronize()
    assert be.stats["replays"] >= 2, be.stats
    replays = be.stats["replays"]

    def run(fn, idx):
        acc = torch.zeros(8, device=TPU)
        errors = []
        u, b, d2 = fn(x, idx, acc)
        values = {}
        for name, t in {"d2": d2, "u": u, "acc": acc, "b": b}.items():
            try:
                values[name] = t.cpu()
            except Exception as e:  # noqa: BLE001
                errors.append(e)
                values[name] = t.cpu()
        torch.tpu.synchronize()
        return values, errors

    eager, eager_errors = run(_compiled_body, bad)
    replayed, replay_errors = run(compiled, bad)
    assert be.stats["replays"] == replays + 1, be.stats
    for errors in (eager_errors, replay_errors):
        assert len(errors) == 1 and isinstance(errors[0], IndexError), errors
        assert "index_select" in str(errors[0])
    for name in ("d2", "u", "acc"):
        torch.testing.assert_close(replayed[name], eager[name], atol=0, rtol=0,
                                   msg=lambda m: f"{name}: {m}")
    eager, _ = run(_compiled_body, good)
    replayed, replay_errors = run(compiled, good)
    assert replay_errors == []
    for name in eager:
        torch.testing.assert_close(replayed[name], eager[name], atol=0, rtol=0,
                                   msg=lambda m: f"{name} (good run): {m}")
