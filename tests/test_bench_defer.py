"""bench/bench_defer.py: its --quick --smoke path end to end (the JSON it
writes, every column's first results checked against PyTorch CPU eager's),
and workloads 1 (GPT-2 forward) and 4 (elementwise chains) run in-process at
tiny sizes on tpu (strict eager and, once it exists, DEFER_AND_FUSE) against
CPU. No timing assertions."""
import json
import os
import subprocess
import sys

import pytest
import torch

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")
sys.path.insert(0, BENCH)
import bench_defer  # noqa: E402
import torch_tpu  # noqa: E402

HAS_DEFER = hasattr(torch_tpu.EagerMode, "DEFER_AND_FUSE")
HAS_METRICS = HAS_DEFER and hasattr(torch_tpu, "defer_metrics")
TPU_COLUMNS = ("strict", "defer") if HAS_DEFER else ("strict",)


def run_smoke(tmp_path, *args):
    """Runs the script (--quick --smoke) with this process's torch_tpu; returns (json, stdout)."""
    out = tmp_path / "defer.json"
    root = os.path.dirname(os.path.dirname(os.path.abspath(torch_tpu.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    p = subprocess.run([sys.executable, os.path.join(BENCH, "bench_defer.py"), "--quick", "--smoke",
                        "--out", str(out), *args], env=env, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    with open(out) as f:
        return json.load(f), p.stdout


def check_structure(d, stdout, columns_run, workloads):
    assert d["size"] == "smoke" and d["min_rounds"] == 1
    assert d["defer_mode"] == ("DEFER_AND_FUSE" if HAS_DEFER else None)
    assert d["defer_metrics_api"] == HAS_METRICS
    assert d["columns"] == list(bench_defer.COLUMNS)
    assert d["columns_run"] == [c for c in bench_defer.COLUMNS if c in columns_run]
    assert set(d["sizes"]) == set(bench_defer.SIZES["smoke"])
    assert sorted({r["workload_num"] for r in d["rows"]}) == workloads
    assert set(d["geomean"]) == {"defer_over_strict", "defer_over_inductor", "strict_over_cpu",
                                 "inductor_over_cpu"}
    assert (d["geomean"]["defer_over_strict"] is not None) == HAS_DEFER
    assert "| # | workload |" in stdout and "geometric mean" in stdout
    for r in d["rows"]:
        assert r["rounds"] >= 1 and r["amount"] > 0 and r["unit"]
        assert set(r["columns"]) == set(bench_defer.COLUMNS)
        for c in bench_defer.COLUMNS:
            col = r["columns"][c]
            assert (col is not None) == (c in d["columns_run"]), (r["workload"], c)
            if col is None:
                continue
            assert col["best_s"] > 0 and col["throughput"] > 0 and col["first_call_s"] > 0
            if c in ("strict", "defer"):
                assert col["peak_bytes"] > 0 and 0 <= col["peak_above_start_bytes"] <= col["peak_bytes"]
            else:
                assert "peak_bytes" not in col and col["fallbacks"] == {}
        assert set(r["check_vs_cpu"]) == set(d["columns_run"]) - {"cpu"}
        assert (r["defer_over_strict"] is not None) == ("defer" in d["columns_run"])
        assert (r["inductor_compile_s"] is not None) == ("inductor" in d["columns_run"])
        if r["defer_over_strict"] is not None:
            assert r["defer_over_strict"] == pytest.approx(
                r["columns"]["defer"]["throughput"] / r["columns"]["strict"]["throughput"])
        assert (r["defer_metrics"] is not None) == HAS_METRICS
        if HAS_METRICS:
            assert set(r["defer_metrics"]) == {"warmup", "timed"}
        if r["workload_num"] in (1, 4):  # the outputs of every column match CPU eager's
            for c, res in r["check_vs_cpu"].items():
                assert res["allclose"], (r["workload"], c, res)
            assert r["columns"]["strict"]["fallbacks"] == {}, r["workload"]


def test_smoke_all_workloads(tmp_path):
    """All five workloads, the tpu columns and CPU eager (Inductor's compiles
    take minutes on this machine: see test_smoke_inductor)."""
    cols = ("strict", "defer", "cpu")
    d, stdout = run_smoke(tmp_path, "--columns", ",".join(cols))
    check_structure(d, stdout, [c for c in cols if c != "defer" or HAS_DEFER], [1, 2, 3, 4, 5])
    # each workload group ran in a process of its own, its rows gathered in order
    assert d["groups_isolated"] and stdout.count("in a process of its own") == 6
    assert [r["workload_num"] for r in d["rows"]].count(1) == 2  # batch 1 and 2
    assert [r["workload_num"] for r in d["rows"]].count(4) == 3  # three chains
    assert [r["workload_num"] for r in d["rows"]].count(5) == 3  # bf16: GPT-2 b1, b2, Llama
    if not HAS_DEFER:
        assert "| n/a |" in stdout


def test_smoke_inductor(tmp_path):
    """The elementwise chains with every column, Inductor included."""
    d, stdout = run_smoke(tmp_path, "--only", "4")
    check_structure(d, stdout, [c for c in bench_defer.COLUMNS if c != "defer" or HAS_DEFER], [4])
    for r in d["rows"]:
        assert r["inductor_compile_s"] >= 0


WORKLOADS = (bench_defer.gpt2_workloads([1, 3], 11, 2, 64, 4, 256)
             + bench_defer.chain_workloads(5, 40))


@pytest.mark.parametrize("col", TPU_COLUMNS)
@pytest.mark.parametrize("w", WORKLOADS, ids=[w.name for w in WORKLOADS])
def test_tpu_matches_cpu(w, col):
    want = w.make("cpu")()
    fallbacks = {}
    _, got = bench_defer.call(col, w.make(col), fallbacks)
    assert fallbacks == {}, "the tpu side ran ops on the CPU fallback"
    assert len(got) == len(want) == 1
    assert got[0].device.type == "tpu" and want[0].device.type == "cpu"
    assert torch.isfinite(want[0]).all() and want[0].abs().max() > 0
    rtol, atol = w.check
    torch.testing.assert_close(got[0].cpu(), want[0], rtol=rtol, atol=atol)
    assert bench_defer.compare(got, want, rtol, atol)["allclose"]
    assert not bench_defer.compare(got, (want[0] + 1,), rtol, atol)["allclose"]


def test_delta_of_metrics_snapshots():
    a = {"compiles": 3, "cache": {"hits": 1, "misses": 2}, "flushes": {"sync": 4}, "name": "x"}
    b = {"compiles": 5, "cache": {"hits": 7, "misses": 2}, "flushes": {"sync": 6, "host_read": 1}, "name": "y"}
    assert bench_defer.delta(a, b) == {"compiles": 2, "cache": {"hits": 6, "misses": 0},
                                       "flushes": {"sync": 2, "host_read": 1}, "name": "y"}
    assert bench_defer.delta({"by_reason": [1, 2]}, {"by_reason": [4, 2], "new": [1]}) == \
        {"by_reason": [3, 0], "new": [1]}


def test_defer_column_with_a_stand_in_mode(tmp_path, monkeypatch, capsys):
    """The DEFER_AND_FUSE column's code path before the mode exists: another
    mode stands in for it, and a counter for torch_tpu.defer_metrics()."""
    calls = []

    def fake_metrics():
        calls.append(1)
        return {"compiles": len(calls), "cache": {"hits": 2 * len(calls)}, "flushes": {"sync": 0}}
    monkeypatch.setattr(bench_defer, "DEFER", torch_tpu.EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING)
    monkeypatch.setattr(torch_tpu, "defer_metrics", fake_metrics, raising=False)
    out = tmp_path / "defer.json"
    monkeypatch.setattr(sys, "argv", ["bench_defer.py", "--quick", "--smoke", "--only", "1,4",
                                      "--columns", "strict,defer,cpu", "--out", str(out),
                                      "--same-process"])  # the stand-ins live in this process
    bench_defer.main()
    stdout = capsys.readouterr().out
    with open(out) as f:
        d = json.load(f)
    assert d["defer_mode"] == "DEFER_NEVER_AND_LAUNCH_BLOCKING" and d["defer_metrics_api"]
    assert d["columns_run"] == ["strict", "defer", "cpu"]
    assert d["geomean"]["defer_over_strict"] > 0 and d["geomean"]["defer_over_inductor"] is None
    for r in d["rows"]:
        defer = r["columns"]["defer"]
        assert defer["throughput"] > 0 and defer["peak_bytes"] > 0 and defer["fallbacks"] == {}
        assert r["check_vs_cpu"]["defer"]["allclose"], r["workload"]
        assert r["defer_over_strict_peak_bytes"] > 0
        # three snapshots per workload: before and after the warm-up, after the timed rounds
        assert r["defer_metrics"]["warmup"] == {"compiles": 1, "cache": {"hits": 2}, "flushes": {"sync": 0}}
    assert "| workload | defer_metrics() change" in stdout and "compiles=1, cache.hits=2" in stdout


def test_bench_defer_overhead_smoke():
    """The per-op host-cost benchmark runs its three programs in both modes, and
    its own check (both modes compute the same values) holds."""
    from conftest import child_env
    p = subprocess.run([sys.executable, os.path.join(BENCH, "bench_defer_overhead.py"),
                        "--rounds", "1", "--ops", "200"],
                       capture_output=True, text=True, env=child_env(), timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rows = [line.split() for line in p.stdout.splitlines()]
    assert {(r[0], r[1]) for r in rows if len(r) == 4 and r[1] in ("strict", "defer")} == {
        (prog, mode) for prog in ("chain", "reads", "item") for mode in ("strict", "defer")}, p.stdout
