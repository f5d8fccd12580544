"""Convolution benchmark: tpu vs PyTorch CPU side by side, in one run.

For a few ResNet-like conv2d shapes (float32), forward and forward+backward
(grad of input, weight and bias), GFLOP/s of the same call on tpu tensors
and on CPU tensors, measured in alternating rounds (both see the same
machine load) and reduced to the best round each. Both sides use the same
number of threads (torch.get_num_threads(); tpu's pool: TORCH_TPU_NUM_THREADS).

Prints a table and writes bench/results/conv.json.
Usage: TORCH_TPU_NUM_THREADS=T python bench/bench_conv.py [--quick] [--rounds N] [--threads T]
"""
import argparse
import json
import os
import time

import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401

# name: (N, C_in, H, W, C_out, kernel, stride, padding, groups)
SHAPES = {
    "3x3 C64 56x56": (8, 64, 56, 56, 64, 3, 1, 1, 1),
    "3x3 C128 28x28": (8, 128, 28, 28, 128, 3, 1, 1, 1),
    "1x1 256->64 56x56": (8, 256, 56, 56, 64, 1, 1, 0, 1),
    "3x3 s2 C64->128 56x56": (8, 64, 56, 56, 128, 3, 2, 1, 1),
    "depthwise 3x3 C256 28x28": (8, 256, 28, 28, 256, 3, 1, 1, 256),
}
QUICK = {"3x3 C64 56x56": (2, 64, 56, 56, 64, 3, 1, 1, 1),
         "1x1 256->64 56x56": (2, 256, 56, 56, 64, 1, 1, 0, 1),
         "depthwise 3x3 C256 28x28": (2, 256, 28, 28, 256, 3, 1, 1, 256)}


def flops(shape):
    n, cin, h, w, cout, k, s, p, g = shape
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    return 2.0 * n * cout * oh * ow * (cin // g) * k * k


def sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


def make(shape, device):
    n, cin, h, w, cout, k, s, p, g = shape
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, cin, h, w, generator=gen).to(device)
    wt = (torch.randn(cout, cin // g, k, k, generator=gen) * 0.1).to(device)
    b = torch.randn(cout, generator=gen).to(device)
    return x, wt, b, dict(stride=s, padding=p, groups=g)


def forward(args):
    x, w, b, kw = args
    return lambda: F.conv2d(x, w, b, **kw)


def forward_backward(args):
    x, w, b, kw = args
    leaves = [t.detach().requires_grad_() for t in (x, w, b)]

    def run():
        y = F.conv2d(*leaves, **kw)
        return torch.autograd.grad(y, leaves, torch.ones_like(y))
    return run


def best_times(fns, rounds, iters, clock=time.perf_counter):
    """{device: fn} -> {device: best seconds per call}: one warm-up call each,
    then `rounds` alternating rounds of `iters` calls (synchronised)."""
    for d, fn in fns.items():  # warm up
        fn()
        sync(d)
    best = {}
    for _ in range(rounds):
        for d, fn in fns.items():
            t0 = clock()
            for _ in range(iters):
                fn()
            sync(d)
            t = (clock() - t0) / iters
            best[d] = min(best.get(d, t), t)
    return best


def measure(shape, mode, rounds, iters, clock=time.perf_counter):
    fns = {d: (forward if mode == "fwd" else forward_backward)(make(shape, d))
           for d in ("tpu", "cpu")}
    best = best_times(fns, rounds, iters, clock)
    mult = 1 if mode == "fwd" else 3  # backward: grad input + grad weight
    gf = {d: mult * flops(shape) / t / 1e9 for d, t in best.items()}
    return best, gf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="conv.json", help="file name under bench/results")
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch's CPU threads (set TORCH_TPU_NUM_THREADS to match)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by process CPU time (for --threads 1 on a loaded machine: "
                         "time other processes take from this one is not counted)")
    args = ap.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter
    if args.threads:
        torch.set_num_threads(args.threads)
    shapes = QUICK if args.quick else SHAPES
    rows = []
    print(f"threads: torch {torch.get_num_threads()}, tpu pool "
          f"{os.environ.get('TORCH_TPU_NUM_THREADS', 'cores')}; clock: "
          f"{'process CPU time' if args.cpu_time else 'wall'}")
    print(f"{'shape':28s} {'mode':8s} {'tpu ms':>9s} {'cpu ms':>9s} {'tpu GF/s':>9s} "
          f"{'cpu GF/s':>9s} {'tpu/cpu':>8s}")
    for name, shape in shapes.items():
        for mode in ("fwd", "fwd+bwd"):
            best, gf = measure(shape, mode, args.rounds, args.iters, clock)
            ratio = best["cpu"] / best["tpu"]
            print(f"{name:28s} {mode:8s} {best['tpu'] * 1e3:9.2f} {best['cpu'] * 1e3:9.2f} "
                  f"{gf['tpu']:9.1f} {gf['cpu']:9.1f} {ratio:8.2f}")
            rows.append({"shape": name, "mode": mode, "tpu_ms": best["tpu"] * 1e3,
                         "cpu_ms": best["cpu"] * 1e3, "tpu_gflops": gf["tpu"],
                         "cpu_gflops": gf["cpu"], "speedup": ratio})
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    path = os.path.join(os.path.dirname(__file__), "results", args.out)
    with open(path, "w") as f:
        json.dump({"threads": torch.get_num_threads(),
                   "clock": "process_time" if args.cpu_time else "perf_counter",
                   "rows": rows}, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
