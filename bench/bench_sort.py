"""Sort/search and scan benchmark: tpu vs PyTorch CPU, side by side in one run.

Cases: sort of 1M float32 (one row) and of 4096x1024 along the last dim,
topk k=50 over a 64 x 50k vocabulary, cumsum of 4096x4096 float32 along
each dim. Each round times tpu then CPU (alternating, so both see the same
machine load); the table shows the best round of each.

Prints a table and writes bench/results/sort.json.
Usage: python bench/bench_sort.py [--rounds N]
"""
import argparse
import json
import os
import time

import torch

import torch_tpu  # noqa: F401

CASES = {
    "sort 1M f32": ((1 << 20,), lambda x: torch.sort(x)),
    "sort 4096x1024 f32 dim=-1": ((4096, 1024), lambda x: torch.sort(x, -1)),
    "sort stable 4096x1024 f32": ((4096, 1024), lambda x: torch.sort(x, dim=-1, stable=True)),
    "topk k=50, 64x50k f32": ((64, 50000), lambda x: torch.topk(x, 50)),
    "cumsum 4096x4096 f32 dim=0": ((4096, 4096), lambda x: torch.cumsum(x, 0)),
    "cumsum 4096x4096 f32 dim=1": ((4096, 4096), lambda x: torch.cumsum(x, 1)),
}


def sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


def time_once(fn, x, device):
    sync(device)
    t0 = time.perf_counter()
    fn(x)
    sync(device)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    for name, (shape, fn) in CASES.items():
        x = {"cpu": torch.randn(shape)}
        x["tpu"] = x["cpu"].to("tpu")
        for d in ("tpu", "cpu"):  # warm up (allocator, pool)
            fn(x[d])
            sync(d)
        best = {}
        for _ in range(args.rounds):
            for d in ("tpu", "cpu"):
                t = time_once(fn, x[d], d)
                best[d] = min(best.get(d, t), t)
        rows.append({"case": name, "tpu_ms": best["tpu"] * 1e3, "cpu_ms": best["cpu"] * 1e3,
                     "ratio": best["tpu"] / best["cpu"]})
    print(f"{'case':32} {'tpu ms':>10} {'cpu ms':>10} {'tpu/cpu':>8}")
    for r in rows:
        print(f"{r['case']:32} {r['tpu_ms']:10.2f} {r['cpu_ms']:10.2f} {r['ratio']:8.2f}")
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "sort.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"threads": torch.get_num_threads(), "rounds": args.rounds, "cases": rows}, f,
                  indent=1)
    print("wrote", out)


if __name__ == "__main__":
    main()
