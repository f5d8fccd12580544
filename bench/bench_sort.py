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

import torch

import torch_tpu  # noqa: F401
from side_by_side import compare, report

CASES = {
    "sort 1M f32": ((1 << 20,), lambda x: torch.sort(x)),
    "sort 4096x1024 f32 dim=-1": ((4096, 1024), lambda x: torch.sort(x, -1)),
    "sort stable 4096x1024 f32": ((4096, 1024), lambda x: torch.sort(x, dim=-1, stable=True)),
    "topk k=50, 64x50k f32": ((64, 50000), lambda x: torch.topk(x, 50)),
    "cumsum 4096x4096 f32 dim=0": ((4096, 4096), lambda x: torch.cumsum(x, 0)),
    "cumsum 4096x4096 f32 dim=1": ((4096, 4096), lambda x: torch.cumsum(x, 1)),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    for name, (shape, fn) in CASES.items():
        x = {"cpu": torch.randn(shape)}
        x["tpu"] = x["cpu"].to("tpu")
        rows.append(compare(name, {d: (lambda d=d: fn(x[d])) for d in x}, args.rounds))
    report(rows, "sort", args.rounds, width=32)


if __name__ == "__main__":
    main()
