"""Elementwise special/activation benchmark: tpu vs PyTorch CPU side by side.

Each op runs on 4M float32 elements on tpu (strict eager, synchronised) and
on the CPU in alternating rounds (so both see the same machine load); the
best round of each is reported. Both use all the cores they are given
(TORCH_TPU_NUM_THREADS and torch.get_num_threads()).

Prints a table and writes bench/results/elementwise.json.
Usage: python bench/bench_elementwise.py [--quick] [--n N] [--ops acos,atan2,...]
"""
import argparse
import json
import os
import time

import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401


def mish_backward(x, g):
    x = x.detach().requires_grad_()
    y = F.mish(x)
    return lambda: torch.autograd.grad(y, x, g, retain_graph=True)


# name -> (make inputs from a generator on the CPU, op over the inputs)
OPS = {
    "acos": (lambda n, g: [torch.rand(n, generator=g) * 2 - 1], lambda x: torch.acos(x)),
    "atan2": (lambda n, g: [torch.randn(n, generator=g), torch.randn(n, generator=g)],
              lambda x, y: torch.atan2(x, y)),
    "lgamma": (lambda n, g: [torch.rand(n, generator=g) * 10 + 0.1], lambda x: torch.lgamma(x)),
    "softplus": (lambda n, g: [torch.randn(n, generator=g) * 5], lambda x: F.softplus(x)),
    "hardswish": (lambda n, g: [torch.randn(n, generator=g) * 5], lambda x: F.hardswish(x)),
    "mish_backward": (lambda n, g: [torch.randn(n, generator=g) * 3, torch.randn(n, generator=g)],
                      None),
    "digamma": (lambda n, g: [torch.rand(n, generator=g) * 10 + 0.1], lambda x: torch.digamma(x)),
    "erfinv": (lambda n, g: [torch.rand(n, generator=g) * 2 - 1], lambda x: torch.erfinv(x)),
    "logsigmoid": (lambda n, g: [torch.randn(n, generator=g) * 5], lambda x: F.logsigmoid(x)),
}


def sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


def bench_op(name, n, repeats, inner):
    make, op = OPS[name]
    g = torch.Generator().manual_seed(0)
    cpu_args = make(n, g)
    runs = {}
    for d in ("tpu", "cpu"):
        args = [a.to(d) for a in cpu_args]
        if name == "mish_backward":
            runs[d] = mish_backward(*args)
        else:
            runs[d] = (lambda a: (lambda: op(*a)))(args)
    # correctness guard: the two devices agree
    got = runs["tpu"]()
    want = runs["cpu"]()
    if isinstance(got, tuple):
        got, want = got[0], want[0]
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4, equal_nan=True)
    best = {}
    for d in ("tpu", "cpu"):
        for _ in range(2):
            runs[d]()
        sync(d)
    for _ in range(repeats):
        for d in ("tpu", "cpu"):
            t0 = time.perf_counter()
            for _ in range(inner):
                runs[d]()
            sync(d)
            t = (time.perf_counter() - t0) / inner * 1e3
            best[d] = min(best.get(d, t), t)
    return best["tpu"], best["cpu"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--n", type=int, default=4 * 1024 * 1024)
    ap.add_argument("--ops", default="acos,atan2,lgamma,softplus,hardswish,mish_backward")
    a = ap.parse_args()
    repeats, inner = (3, 2) if a.quick else (7, 5)
    names = a.ops.split(",")
    rows = []
    print(f"{a.n} float32 elements, best of {repeats} alternating rounds of {inner}; "
          f"cpu threads {torch.get_num_threads()}, "
          f"TORCH_TPU_NUM_THREADS={os.environ.get('TORCH_TPU_NUM_THREADS', 'default')}")
    print(f"{'op':<16}{'tpu ms':>10}{'cpu ms':>10}{'cpu/tpu':>10}")
    for name in names:
        t, c = bench_op(name, a.n, repeats, inner)
        rows.append({"op": name, "n": a.n, "dtype": "float32", "tpu_ms": round(t, 3),
                     "cpu_ms": round(c, 3), "speedup": round(c / t, 3)})
        print(f"{name:<16}{t:>10.3f}{c:>10.3f}{c / t:>10.2f}")
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "elementwise.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"torch": torch.__version__, "cpu_threads": torch.get_num_threads(),
                   "results": rows}, f, indent=2)
    print("wrote", out)


if __name__ == "__main__":
    main()
