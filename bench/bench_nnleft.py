"""nn.functional leftovers benchmark: tpu vs PyTorch CPU, side by side.

Figures: BatchNorm2d training step (forward + backward, running statistics
updated in place; N=32, C=64, 56x56, float32), the pointwise losses forward
and forward+backward on 4M float32 elements (mse, smooth_l1, huber mean;
binary_cross_entropy), channel_shuffle (N=32, C=128, 56x56, groups 4) and
multi_margin_loss forward+backward (N=4096, C=1000). Best of N alternating
rounds (both devices see the same machine load). Prints a table, writes
bench/results/nnleft.json.
Usage: python bench/bench_nnleft.py [--quick]
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from side_by_side import pair  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    repeats = 3 if args.quick else 7
    scale = 4 if args.quick else 1
    results = []

    def add(name, t_tpu, t_cpu):
        results.append({"name": name, "tpu_ms": t_tpu * 1e3, "cpu_ms": t_cpu * 1e3})

    torch.manual_seed(0)
    n = 32 // scale

    # BatchNorm2d training step: _batch_norm_with_update / _native_batch_norm_legit + backward.
    def bn_make(d):
        m = torch.nn.BatchNorm2d(64).to(d)
        x = torch.randn(n, 64, 56, 56, device=d, requires_grad=True)
        return m, x, torch.randn(n, 64, 56, 56, device=d)

    def bn_run(m, x, g):
        m(x).backward(g)
    add(f"BatchNorm2d train fwd+bwd [{n},64,56,56]", *pair(bn_make, bn_run, repeats))

    numel = (4 << 20) // scale
    losses = {
        "mse_loss": lambda x, t: F.mse_loss(x, t),
        "smooth_l1_loss": lambda x, t: F.smooth_l1_loss(x, t, beta=0.5),
        "huber_loss": lambda x, t: F.huber_loss(x, t, delta=0.5),
        "binary_cross_entropy": lambda x, t: F.binary_cross_entropy(x, t),
    }
    for name, fn in losses.items():
        def lmake(d, name=name):
            x = torch.rand(numel, device=d) * 0.98 + 0.01
            return x, torch.rand(numel, device=d)
        add(f"{name} fwd (mean) [{numel}]", *pair(lmake, lambda x, t, fn=fn: fn(x, t), repeats))

        def lgmake(d, name=name):
            x = (torch.rand(numel, device=d) * 0.98 + 0.01).requires_grad_()
            return x, torch.rand(numel, device=d)
        add(f"{name} fwd+bwd (mean) [{numel}]",
            *pair(lgmake, lambda x, t, fn=fn: fn(x, t).backward(), repeats))

    def cs_make(d):
        return (torch.randn(n, 128, 56, 56, device=d),)
    add(f"channel_shuffle g=4 [{n},128,56,56]",
        *pair(cs_make, lambda x: F.channel_shuffle(x, 4), repeats))

    rows = 4096 // scale

    def mm_make(d):
        x = torch.randn(rows, 1000, device=d, requires_grad=True)
        return x, torch.randint(0, 1000, (rows,), device=d)
    add(f"multi_margin_loss fwd+bwd [{rows},1000]",
        *pair(mm_make, lambda x, t: F.multi_margin_loss(x, t).backward(), repeats))

    print(f"{'benchmark':48s} {'tpu ms':>9s} {'cpu ms':>9s} {'cpu/tpu':>8s}")
    for r in results:
        print(f"{r['name']:48s} {r['tpu_ms']:9.2f} {r['cpu_ms']:9.2f} "
              f"{r['cpu_ms'] / r['tpu_ms']:8.2f}")
    out = os.path.join(os.path.dirname(__file__), "results", "nnleft.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"threads": torch.get_num_threads(), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
