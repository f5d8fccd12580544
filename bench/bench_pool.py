"""Pooling and padding benchmark: tpu vs PyTorch CPU, side by side in one run.

ResNet-like float32 shapes, forward and backward (each op alone, on inputs
made beforehand; backward ops as autograd calls them): max_pool2d 3x3/s2/p1, avg_pool2d
3x3/s2/p1, adaptive_avg_pool2d to 7x7 and to 1x1, reflection_pad2d.
Each case is timed in alternating rounds (tpu, cpu, tpu, ...; so both see
the same machine load) and reduced to the best round of each.

--cpu-time measures process CPU time instead of wall time, with one thread
on each side (TORCH_TPU_NUM_THREADS=1, torch.set_num_threads(1)): on a
loaded, shared machine this compares the work each side does, which wall
time cannot.

Prints a table and writes bench/results/pool.json (pool_cputime.json with
--cpu-time).
Usage: python bench/bench_pool.py [--quick] [--rounds N] [--iters N] [--cpu-time]
"""
import argparse
import json
import os
import sys
import time

if "--cpu-time" in sys.argv:  # before torch_tpu starts its compute pool
    os.environ["TORCH_TPU_NUM_THREADS"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_tpu  # noqa: E402,F401

aten = torch.ops.aten


def case_list(quick):
    """(name, input shape, setup(x) -> saved tensors, timed(saved)): only the
    op itself is timed; its inputs (gradients, indices, layouts) are made in
    setup."""
    n = 2 if quick else 8
    big = (n, 64, 112, 112)
    late = (n, 512, 14, 14)
    head = (n, 2048, 7, 7)
    pad = (n, 64, 56, 56)
    k3, s2, p1 = [3, 3], [2, 2], [1, 1]

    def pooled(x):
        out, idx = aten.max_pool2d_with_indices(x, k3, s2, p1)
        return (x, torch.ones_like(out), idx)

    def avg(x):
        return (x, torch.ones_like(aten.avg_pool2d(x, k3, s2, p1)))

    def aavg(x):
        return (x, torch.ones_like(aten._adaptive_avg_pool2d(x, [7, 7])))

    def refl(x):
        return (x, torch.ones_like(aten.reflection_pad2d(x, [3, 3, 3, 3])))

    def cl(x):
        return (x.contiguous(memory_format=torch.channels_last),)

    ident = lambda x: (x,)  # noqa: E731
    return [
        ("max_pool2d 3x3/s2 fwd", big, ident,
         lambda s: aten.max_pool2d_with_indices(s[0], k3, s2, p1)),
        ("max_pool2d 3x3/s2 bwd", big, pooled,
         lambda s: aten.max_pool2d_with_indices_backward(s[1], s[0], k3, s2, p1, [1, 1], False,
                                                         s[2])),
        ("avg_pool2d 3x3/s2 fwd", big, ident, lambda s: aten.avg_pool2d(s[0], k3, s2, p1)),
        ("avg_pool2d 3x3/s2 bwd", big, avg,
         lambda s: aten.avg_pool2d_backward(s[1], s[0], k3, s2, p1, False, True, None)),
        ("adaptive_avg_pool2d ->7x7 fwd", late, ident,
         lambda s: aten._adaptive_avg_pool2d(s[0], [7, 7])),
        ("adaptive_avg_pool2d ->7x7 bwd", late, aavg,
         lambda s: aten._adaptive_avg_pool2d_backward(s[1], s[0])),
        ("adaptive_avg_pool2d 14->7 ch_last fwd", late, cl,
         lambda s: aten._adaptive_avg_pool2d(s[0], [7, 7])),
        ("adaptive_avg_pool2d ->1x1 fwd (mean)", head, ident,
         lambda s: F.adaptive_avg_pool2d(s[0], 1)),
        ("reflection_pad2d 3 fwd", pad, ident,
         lambda s: aten.reflection_pad2d(s[0], [3, 3, 3, 3])),
        ("reflection_pad2d 3 bwd", pad, refl,
         lambda s: aten.reflection_pad2d_backward(s[1], s[0], [3, 3, 3, 3])),
        ("constant_pad_nd 1 fwd", pad, ident,
         lambda s: aten.constant_pad_nd(s[0], [1, 1, 1, 1], 0.0)),
    ]


def sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


CLOCK = time.perf_counter


def time_pair(shape, setup, timed, rounds, iters):
    torch.manual_seed(0)
    base = torch.randn(*shape)
    state = {}
    for d in ("tpu", "cpu"):
        saved = setup(base.to(d))
        state[d] = (lambda saved=saved: timed(saved))
        state[d]()  # warm up
        sync(d)
    best = {}
    for _ in range(rounds):
        for d in ("tpu", "cpu"):
            t0 = CLOCK()
            for _ in range(iters):
                state[d]()
            sync(d)
            t = (CLOCK() - t0) / iters * 1e3
            best[d] = min(best.get(d, t), t)
    return best["tpu"], best["cpu"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--cpu-time", action="store_true",
                   help="process CPU time, one thread each side")
    args = p.parse_args()
    global CLOCK
    if args.cpu_time:
        torch.set_num_threads(1)
        CLOCK = time.process_time
    rows = []
    print(f"torch threads: {torch.get_num_threads()}, rounds: {args.rounds}, iters: {args.iters}, "
          f"clock: {'process CPU time' if args.cpu_time else 'wall'}")
    print(f"{'case':40s} {'shape':>20s} {'tpu ms':>9s} {'cpu ms':>9s} {'cpu/tpu':>8s}")
    for name, shape, setup, timed in case_list(args.quick):
        t, c = time_pair(shape, setup, timed, args.rounds, args.iters)
        rows.append({"case": name, "shape": list(shape), "tpu_ms": t, "cpu_ms": c,
                     "speedup": c / t})
        print(f"{name:40s} {str(tuple(shape)):>20s} {t:9.3f} {c:9.3f} {c / t:8.2f}x", flush=True)
    name = "pool_cputime.json" if args.cpu_time else "pool.json"
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", name)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"torch_threads": torch.get_num_threads(), "cpu_time": args.cpu_time,
                   "rounds": args.rounds,
                   "iters": args.iters, "quick": args.quick, "results": rows}, f, indent=2)
    print("wrote", out)


if __name__ == "__main__":
    main()
