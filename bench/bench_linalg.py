"""Linear algebra benchmark: tpu vs PyTorch CPU, side by side.

Figures: linalg.solve (A X = B with 16 right-hand sides), linalg.cholesky and
linalg.svd (full_matrices=False), each on one 256x256 float32 matrix and on a
batch of 64 32x32 float32 matrices; also linalg.inv, eigh and qr on the same
shapes. Best of N alternating rounds (both devices see the same machine
load). Prints a table, writes bench/results/linalg.json.
Usage: python bench/bench_linalg.py [--quick] [--cpu-threads N]
(--cpu-threads sets torch.set_num_threads for the CPU side: on a loaded machine
MKL's OpenMP threads can stall, which the default thread count makes visible)
"""
import argparse
import json
import os
import sys

import torch

import torch_tpu  # noqa: F401


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from side_by_side import pair  # noqa: E402


def spd(shape, d):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(*shape, generator=g)
    n = shape[-1]
    return (a @ a.mT / n + torch.eye(n)).to(d)


def well(shape, d):
    g = torch.Generator().manual_seed(1)
    n = shape[-1]
    return (torch.randn(*shape, generator=g) + n ** 0.5 * torch.eye(n)).to(d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cpu-threads", type=int, default=0)
    args = ap.parse_args()
    if args.cpu_threads:
        torch.set_num_threads(args.cpu_threads)
    repeats = 3 if args.quick else 7
    results = []

    for shape in ((256, 256), (64, 32, 32)):
        tag = "x".join(map(str, shape))
        rhs = shape[:-1] + (16,)
        cases = [
            ("solve", lambda d: (well(shape, d), torch.randn(rhs).to(d)),
             lambda a, b: torch.linalg.solve(a, b)),
            ("cholesky", lambda d: (spd(shape, d),), lambda a: torch.linalg.cholesky(a)),
            ("svd", lambda d: (well(shape, d),),
             lambda a: torch.linalg.svd(a, full_matrices=False)),
            ("inv", lambda d: (well(shape, d),), lambda a: torch.linalg.inv(a)),
            ("eigh", lambda d: (spd(shape, d),), lambda a: torch.linalg.eigh(a)),
            ("qr", lambda d: (well(shape, d),), lambda a: torch.linalg.qr(a)),
            ("det", lambda d: (well(shape, d),), lambda a: torch.linalg.det(a)),
        ]
        for name, make, run in cases:
            t_tpu, t_cpu = pair(make, run, repeats)
            results.append({"name": f"{name} {tag} float32", "tpu_ms": t_tpu * 1e3,
                            "cpu_ms": t_cpu * 1e3})

    print(f"{'benchmark':34s} {'tpu ms':>9s} {'cpu ms':>9s} {'cpu/tpu':>8s}")
    for r in results:
        print(f"{r['name']:34s} {r['tpu_ms']:9.3f} {r['cpu_ms']:9.3f} "
              f"{r['cpu_ms'] / r['tpu_ms']:7.2f}x")
    out = os.path.join(os.path.dirname(__file__), "results", "linalg.json")
    with open(out, "w") as f:
        json.dump({"threads": torch.get_num_threads(), "tpu_threads":
                   os.environ.get("TORCH_TPU_NUM_THREADS", "cores"), "results": results},
                  f, indent=1)


if __name__ == "__main__":
    main()
