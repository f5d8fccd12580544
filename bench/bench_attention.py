"""Attention benchmark: tpu scaled_dot_product_attention (the runtime's tiled
flash-style kernels) vs PyTorch CPU's F.scaled_dot_product_attention, side by
side in one run.

For batch 1, head_dim 64, float32, sequence lengths 512 / 2048 / 8192, causal
and not: forward and forward+backward tokens/s (query tokens per second),
best of N rounds alternating tpu and cpu so both see the same machine load;
and the tpu's peak device memory of one forward+backward
(torch.tpu.max_memory_allocated after reset_peak_memory_stats, minus the
inputs), which grows linearly with the sequence length (an L x S float32
score matrix per head would be the quadratic alternative, shown alongside).

Prints a table and writes bench/results/attention.json.
Usage: python bench/bench_attention.py [--quick] [--heads 8] [--rounds 3]
"""
import argparse
import json
import os
import time

import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401


def sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


def inputs(device, L, H, D, grad):
    g = torch.Generator().manual_seed(L)
    return [torch.randn(1, H, L, D, generator=g).to(device).requires_grad_(grad) for _ in range(3)]


def run(device, q, k, v, causal, backward):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    if backward:
        out.backward(torch.ones_like(out))
    sync(device)


def timed(device, args, causal, backward, rounds_of_one):
    t0 = time.perf_counter()
    for _ in range(rounds_of_one):
        run(device, *args, causal, backward)
    return (time.perf_counter() - t0) / rounds_of_one


def peak_memory(L, H, D, causal):
    q, k, v = inputs("tpu", L, H, D, True)
    sync("tpu")
    base = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    run("tpu", q, k, v, causal, True)
    return torch.tpu.max_memory_allocated() - base


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="seq 512 and 2048 only, 2 rounds")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seqs", type=str, default="512,2048,8192")
    a = ap.parse_args()
    seqs = [int(s) for s in a.seqs.split(",")]
    rounds = a.rounds
    if a.quick:
        seqs, rounds = [s for s in seqs if s <= 2048], 2
    H, D = a.heads, 64
    rows = []
    print(f"threads: torch {torch.get_num_threads()}, batch 1, heads {H}, head_dim {D}, float32")
    print(f"{'seq':>6} {'causal':>6} {'pass':>8} {'tpu tok/s':>12} {'cpu tok/s':>12} "
          f"{'speedup':>8} {'tpu peak MiB':>13} {'LxS MiB':>9}")
    for L in seqs:
        for causal in (False, True):
            mem = peak_memory(L, H, D, causal)
            quad = H * L * L * 4
            for backward in (False, True):
                args = {d: inputs(d, L, H, D, backward) for d in ("tpu", "cpu")}
                for d in ("tpu", "cpu"):  # warm up
                    run(d, *args[d], causal, backward)
                best = {}
                for _ in range(rounds):
                    for d in ("tpu", "cpu"):
                        t = timed(d, args[d], causal, backward, 1)
                        best[d] = min(best.get(d, t), t)
                tok = {d: L / best[d] for d in best}
                row = {"seq": L, "heads": H, "head_dim": D, "causal": causal,
                       "pass": "fwd+bwd" if backward else "fwd",
                       "tpu_tokens_per_s": tok["tpu"], "cpu_tokens_per_s": tok["cpu"],
                       "tpu_seconds": best["tpu"], "cpu_seconds": best["cpu"],
                       "speedup": tok["tpu"] / tok["cpu"],
                       "tpu_peak_bytes_fwd_bwd": mem, "score_matrix_bytes": quad}
                rows.append(row)
                print(f"{L:>6} {str(causal):>6} {row['pass']:>8} {tok['tpu']:>12.0f} "
                      f"{tok['cpu']:>12.0f} {row['speedup']:>7.2f}x {mem / 2**20:>13.1f} "
                      f"{quad / 2**20:>9.1f}", flush=True)
                del args
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    path = os.path.join(os.path.dirname(__file__), "results", "attention.json")
    with open(path, "w") as f:
        json.dump({"torch_threads": torch.get_num_threads(), "rows": rows}, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
