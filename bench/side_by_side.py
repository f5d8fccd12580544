"""Shared timing for the per-family benchmarks: one case runs on tpu and on
the CPU in alternating rounds (best of N, the device synchronised inside the
timed region), and the table and JSON are written the same way for each."""
import json
import os
import time

import torch


def sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


def _time_once(call, device):
    sync(device)
    t0 = time.perf_counter()
    call()
    sync(device)
    return time.perf_counter() - t0


def compare(name, calls, rounds):
    """calls: {"tpu": f, "cpu": g} taking no arguments. One warm-up call each,
    then `rounds` alternating rounds; returns the case's row."""
    for d in ("tpu", "cpu"):  # warm up (allocator, pool)
        calls[d]()
        sync(d)
    best = {}
    for _ in range(rounds):
        for d in ("tpu", "cpu"):
            t = _time_once(calls[d], d)
            best[d] = min(best.get(d, t), t)
    return {"case": name, "tpu_ms": best["tpu"] * 1e3, "cpu_ms": best["cpu"] * 1e3,
            "ratio": best["tpu"] / best["cpu"]}


def pair(make, run, rounds):
    """make(device) -> arguments for run(*arguments); the best seconds per call
    on tpu and on the CPU (compare's warm-up and alternating rounds)."""
    state = {d: make(d) for d in ("tpu", "cpu")}
    row = compare("", {d: (lambda d=d: run(*state[d])) for d in state}, rounds)
    return row["tpu_ms"] / 1e3, row["cpu_ms"] / 1e3


def report(rows, family, rounds, width=32):
    """Prints the table and writes bench/results/<family>.json."""
    print(f"{'case':{width}} {'tpu ms':>10} {'cpu ms':>10} {'tpu/cpu':>8}")
    for r in rows:
        print(f"{r['case']:{width}} {r['tpu_ms']:10.3f} {r['cpu_ms']:10.3f} {r['ratio']:8.2f}")
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", f"{family}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"threads": torch.get_num_threads(), "rounds": rounds, "cases": rows}, f,
                  indent=1)
    print("wrote", out)
