"""Reductions, distances and RNG (the reduce2 work): tpu vs PyTorch CPU,
side by side in one run.

Figures: linalg.vector_norm and logsumexp over the last dim of 4096x4096
float32, cdist of 2048x64 against 2048x64 (float32; PyTorch's default mode,
which takes the matmul route for p=2, and the direct kernel: p=2 without mm
and p=1), randn of 16M float32. Each figure is the best of N rounds, the two
devices alternating within a round so both see the same machine load.
Prints a table and writes bench/results/reduce.json.
Usage: python bench/bench_reduce.py [--quick]
"""
import argparse
import json
import os
import time

import torch

import torch_tpu  # noqa: F401


def sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


CASES = {
    "vector_norm 4096x4096 dim=-1": (
        lambda d: (torch.randn(4096, 4096).to(d),),
        lambda x: torch.linalg.vector_norm(x, dim=-1)),
    "logsumexp 4096x4096 dim=-1": (
        lambda d: (torch.randn(4096, 4096).to(d),),
        lambda x: torch.logsumexp(x, dim=-1)),
    "cdist p=2 2048x2048x64 (default mode)": (
        lambda d: (torch.randn(2048, 64).to(d), torch.randn(2048, 64).to(d)),
        lambda a, b: torch.cdist(a, b)),
    "cdist p=2 2048x2048x64 (no mm)": (
        lambda d: (torch.randn(2048, 64).to(d), torch.randn(2048, 64).to(d)),
        lambda a, b: torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist")),
    "cdist p=1 2048x2048x64": (
        lambda d: (torch.randn(2048, 64).to(d), torch.randn(2048, 64).to(d)),
        lambda a, b: torch.cdist(a, b, p=1)),
    "randn 16M float32": (
        lambda d: (d,),
        lambda d: torch.randn(1 << 24, device=d)),
}


def measure(make, fn, rounds):
    """Best wall-clock ms per device, and best process CPU ms (all threads:
    a steadier figure on a shared, loaded machine)."""
    args = {d: make(d) for d in ("tpu", "cpu")}
    for d in args:  # warm up
        fn(*args[d])
        sync(d)
    best, best_cpu = {}, {}
    for _ in range(rounds):
        for d in ("tpu", "cpu"):
            t0, c0 = time.perf_counter(), time.process_time()
            fn(*args[d])
            sync(d)
            t = (time.perf_counter() - t0) * 1e3
            c = (time.process_time() - c0) * 1e3
            best[d] = min(best.get(d, t), t)
            best_cpu[d] = min(best_cpu.get(d, c), c)
    return best, best_cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rounds = 3 if args.quick else 7
    results = {"threads_cpu": torch.get_num_threads(), "rounds": rounds, "cases": {}}
    print(f"{'case':42s} {'tpu ms':>9s} {'cpu ms':>9s} {'cpu/tpu':>8s}"
          f" {'tpu cpu-ms':>11s} {'cpu cpu-ms':>11s}")
    for name, (make, fn) in CASES.items():
        b, c = measure(make, fn, rounds)
        results["cases"][name] = {"tpu_ms": round(b["tpu"], 3), "cpu_ms": round(b["cpu"], 3),
                                  "tpu_process_ms": round(c["tpu"], 3),
                                  "cpu_process_ms": round(c["cpu"], 3)}
        print(f"{name:42s} {b['tpu']:9.2f} {b['cpu']:9.2f} {b['cpu'] / b['tpu']:8.2f}"
              f" {c['tpu']:11.2f} {c['cpu']:11.2f}")
    out = os.path.join(os.path.dirname(__file__), "results", "reduce.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=2)
    print("wrote", out)


if __name__ == "__main__":
    main()
