"""Normalisation and resampling benchmark: tpu vs PyTorch CPU, side by side.

Figures: layer_norm and rms_norm bandwidth (GB/s of tensors read and written,
4096 rows x hidden 4096, float32, forward and forward+backward), batch_norm
training forward+backward (N=32, C=64, 56x56), bilinear 2x upsample forward
(N=8, C=64, 64x64). Best of N alternating rounds (both devices see the same
machine load). Prints a table, writes bench/results/norm.json.
Usage: python bench/bench_norm.py [--quick]
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
    rows, hidden = (1024, 4096) if args.quick else (4096, 4096)
    repeats = 3 if args.quick else 5
    results = []

    def add(name, t_tpu, t_cpu, nbytes=None):
        r = {"name": name, "tpu_ms": t_tpu * 1e3, "cpu_ms": t_cpu * 1e3}
        if nbytes:
            r["tpu_GBps"] = nbytes / t_tpu / 1e9
            r["cpu_GBps"] = nbytes / t_cpu / 1e9
        results.append(r)

    el = rows * hidden * 4

    def ln_make(d):
        x = torch.randn(rows, hidden, device=d)
        w, b = torch.randn(hidden, device=d), torch.randn(hidden, device=d)
        return x, w, b

    t = pair(ln_make, lambda x, w, b: F.layer_norm(x, (hidden,), w, b), repeats)
    add(f"layer_norm fwd {rows}x{hidden}", *t, nbytes=2 * el)

    def ln_bwd_make(d):
        x, w, b = ln_make(d)
        x.requires_grad_()
        w.requires_grad_()
        b.requires_grad_()
        return x, w, b, torch.randn(rows, hidden, device=d)

    t = pair(ln_bwd_make,
             lambda x, w, b, g: F.layer_norm(x, (hidden,), w, b).backward(g), repeats)
    add(f"layer_norm fwd+bwd {rows}x{hidden}", *t, nbytes=6 * el)

    t = pair(ln_make, lambda x, w, b: F.rms_norm(x, (hidden,), w), repeats)
    add(f"rms_norm fwd {rows}x{hidden}", *t, nbytes=2 * el)
    t = pair(ln_bwd_make, lambda x, w, b, g: F.rms_norm(x, (hidden,), w).backward(g), repeats)
    add(f"rms_norm fwd+bwd {rows}x{hidden}", *t, nbytes=5 * el)

    def bn_make(d, cl=False):
        x = torch.randn(32, 64, 56, 56, device=d)
        if cl:
            x = x.contiguous(memory_format=torch.channels_last)
        x.requires_grad_()
        w = torch.ones(64, device=d, requires_grad=True)
        b = torch.zeros(64, device=d, requires_grad=True)
        rm, rv = torch.zeros(64, device=d), torch.ones(64, device=d)
        return x, w, b, rm, rv, torch.randn_like(x)

    bn = lambda x, w, b, rm, rv, g: F.batch_norm(x, rm, rv, w, b, training=True).backward(g)
    t = pair(bn_make, bn, repeats)
    add("batch_norm train fwd+bwd 32x64x56x56", *t)
    t = pair(lambda d: bn_make(d, True), bn, repeats)
    add("batch_norm train fwd+bwd channels_last", *t)

    def up_make(d):
        return (torch.randn(8, 64, 64, 64, device=d),)

    t = pair(up_make, lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), repeats)
    add("upsample bilinear 2x 8x64x64x64", *t)
    t = pair(up_make, lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), repeats)
    add("upsample nearest 2x 8x64x64x64", *t)

    print(f"{'benchmark':42s} {'tpu ms':>9s} {'cpu ms':>9s} {'tpu/cpu':>8s} {'tpu GB/s':>9s} {'cpu GB/s':>9s}")
    for r in results:
        gb = (f"{r['tpu_GBps']:9.2f} {r['cpu_GBps']:9.2f}" if "tpu_GBps" in r else "")
        print(f"{r['name']:42s} {r['tpu_ms']:9.2f} {r['cpu_ms']:9.2f} "
              f"{r['cpu_ms'] / r['tpu_ms']:7.2f}x {gb}")
    out = os.path.join(os.path.dirname(__file__), "results", "norm.json")
    with open(out, "w") as f:
        json.dump({"threads": torch.get_num_threads(), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
