"""Recurrent layers: tpu vs PyTorch CPU side by side, in one run.

nn.LSTM and nn.GRU (float32), forward and forward+backward (gradients of the
input and every parameter), and one cell step alone (the fused op on tpu, the
pointwise ops of a step on the CPU). On tpu each time step is two GEMMs and the fused
cell (_thnn_fused_lstm_cell / _thnn_fused_gru_cell, the rnn_cell family); the
CPU runs its own LSTM/GRU kernels (oneDNN where PyTorch uses it). Alternating
rounds (both sides see the same machine load), best round each; both sides use
the same number of threads.

Prints a table and writes bench/results/rnn.json.
Usage: TORCH_TPU_NUM_THREADS=T python bench/bench_rnn.py [--quick] [--rounds N] [--threads T]
"""
import argparse
import json
import os
import sys
import time

import torch

import torch_tpu  # noqa: F401

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_conv import best_times  # noqa: E402  (alternating best-of rounds)

# name: (module, input size, hidden, layers, bidirectional, batch, seq)
SHAPES = {
    "LSTM 256 x2 b16 s64": ("LSTM", 256, 256, 2, False, 16, 64),
    "LSTM 128 bi b32 s32": ("LSTM", 128, 128, 1, True, 32, 32),
    "GRU 256 x2 b16 s64": ("GRU", 256, 256, 2, False, 16, 64),
}
# The cell alone: tpu's fused op vs the pointwise ops PyTorch CPU runs for one
# LSTM/GRU step (gates summed, chunked, activated, combined).
CELLS = {"LSTM cell b64 h1024": ("LSTM", 64, 1024), "GRU cell b64 h1024": ("GRU", 64, 1024)}
QUICK_CELLS = {"LSTM cell b8 h128": ("LSTM", 8, 128), "GRU cell b8 h128": ("GRU", 8, 128)}
QUICK = {"LSTM 64 b8 s16": ("LSTM", 64, 64, 1, False, 8, 16),
         "GRU 64 b8 s16": ("GRU", 64, 64, 1, False, 8, 16)}


def make(shape, device, backward):
    kind, i, h, layers, bi, b, s = shape
    torch.manual_seed(0)
    mod = getattr(torch.nn, kind)(i, h, num_layers=layers, bidirectional=bi).to(device)
    x = torch.randn(s, b, i).to(device).requires_grad_(backward)
    params = [x] + list(mod.parameters())

    def run():
        y, _ = mod(x)
        if backward:
            return torch.autograd.grad(y, params, torch.ones_like(y))
        return y
    if not backward:
        return lambda: torch.no_grad()(run)()
    return run


def make_cell(shape, device, backward):
    kind, b, h = shape
    g = 4 if kind == "LSTM" else 3
    gen = torch.Generator().manual_seed(0)
    ig, hg = torch.randn(b, g * h, generator=gen), torch.randn(b, g * h, generator=gen)
    prev = torch.randn(b, h, generator=gen)
    bi, bh = torch.randn(g * h, generator=gen), torch.randn(g * h, generator=gen)
    ig, hg, prev, bi, bh = (t.to(device) for t in (ig, hg, prev, bi, bh))
    if device == "tpu":
        op = torch.ops.aten._thnn_fused_lstm_cell if kind == "LSTM" else torch.ops.aten._thnn_fused_gru_cell
        return lambda: op(ig, hg, prev, bi, bh)
    if kind == "LSTM":
        def cpu_lstm():
            i, f, c, o = (ig + hg + bi + bh).chunk(4, 1)
            cy = f.sigmoid() * prev + i.sigmoid() * c.tanh()
            return o.sigmoid() * cy.tanh(), cy
        return cpu_lstm

    def cpu_gru():
        xr, xz, xn = (ig + bi).chunk(3, 1)
        hr, hz, hn = (hg + bh).chunk(3, 1)
        r, z = (xr + hr).sigmoid(), (xz + hz).sigmoid()
        n = (xn + r * hn).tanh()
        return n + z * (prev - n)
    return cpu_gru


def measure(shape, backward, rounds, iters, clock, maker=make):
    return best_times({d: maker(shape, d, backward) for d in ("tpu", "cpu")}, rounds, iters,
                      clock)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch's CPU threads (set TORCH_TPU_NUM_THREADS to match)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by process CPU time (with --threads 1 on a loaded machine)")
    args = ap.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter
    if args.threads:
        torch.set_num_threads(args.threads)
    shapes = QUICK if args.quick else SHAPES
    rows = []
    print(f"threads: torch {torch.get_num_threads()}, tpu pool "
          f"{os.environ.get('TORCH_TPU_NUM_THREADS', 'cores')}; clock: "
          f"{'process CPU time' if args.cpu_time else 'wall'}")
    print(f"{'shape':24s} {'mode':8s} {'tpu ms':>9s} {'cpu ms':>9s} {'tpu/cpu':>8s}")
    for name, shape in shapes.items():
        for backward in (False, True):
            mode = "fwd+bwd" if backward else "fwd"
            best = measure(shape, backward, args.rounds, args.iters, clock)
            ratio = best["cpu"] / best["tpu"]
            print(f"{name:24s} {mode:8s} {best['tpu'] * 1e3:9.2f} {best['cpu'] * 1e3:9.2f} "
                  f"{ratio:8.2f}")
            rows.append({"shape": name, "mode": mode, "tpu_ms": best["tpu"] * 1e3,
                         "cpu_ms": best["cpu"] * 1e3, "speedup": ratio})
    for name, shape in (QUICK_CELLS if args.quick else CELLS).items():
        best = measure(shape, False, args.rounds, 20 * args.iters, clock, make_cell)
        ratio = best["cpu"] / best["tpu"]
        print(f"{name:24s} {'fwd':8s} {best['tpu'] * 1e3:9.3f} {best['cpu'] * 1e3:9.3f} {ratio:8.2f}")
        rows.append({"shape": name, "mode": "fwd", "tpu_ms": best["tpu"] * 1e3,
                     "cpu_ms": best["cpu"] * 1e3, "speedup": ratio})
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    path = os.path.join(os.path.dirname(__file__), "results", "rnn.json")
    with open(path, "w") as f:
        json.dump({"threads": torch.get_num_threads(),
                   "clock": "process_time" if args.cpu_time else "perf_counter",
                   "rows": rows}, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
