"""Host cost per op of DEFER_AND_FUSE against strict eager (docs/architecture.md).

Ops on 16-element tensors cost the device next to nothing, so the time is
what the host spends per op: the dispatcher and the bridge in both modes,
plus, deferred, recording the node and its share of the flush (schedule,
analysis, program lookup, memory estimate). Two programs, each alternated
between the modes in one process over the rounds:
  - chain:  `a = a * y + x` 2,000 times, then synchronize (graphs cut by the
            node limit, ~1,000 nodes each);
  - reads:  the same with a host read (`.item()`) every 32 ops (small graphs,
            a flush each);
  - item:   a host read after every step (2 ops): what a value read back
            right after it is computed costs (per op: half a step).
Reports, per program and mode, the best over the rounds of the calling
thread's CPU time and of the wall time per op, and checks that both modes
compute the same values.

Usage: python bench/bench_defer_overhead.py [--rounds 7] [--ops 4000]
"""
import argparse
import time

import torch

import torch_tpu

MODES = {"strict": torch_tpu.EagerMode.DEFER_NEVER, "defer": torch_tpu.EagerMode.DEFER_AND_FUSE}


def chain(x, y, steps, read_every):
    a = x
    for i in range(steps):
        a = a * y + x
        if read_every and i % read_every == read_every - 1:
            a[0].item()
    return a


def run(mode, x, y, steps, read_every):
    with torch_tpu.set_eager_mode(mode):
        host, wall = time.thread_time(), time.perf_counter()
        out = chain(x, y, steps, read_every)
        torch.tpu.synchronize()
        return time.thread_time() - host, time.perf_counter() - wall, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--ops", type=int, default=4000, help="ops per round (two per step)")
    a = ap.parse_args()
    torch.manual_seed(0)
    x = torch.rand(16, device="tpu") * 0.5
    y = torch.rand(16, device="tpu") * 0.5
    steps = a.ops // 2
    print(f"{'program':8s} {'mode':7s} {'host us/op':>11s} {'wall us/op':>11s}")
    for name, read_every in (("chain", 0), ("reads", 16), ("item", 1)):
        best = {m: [float("inf"), float("inf")] for m in MODES}
        outs = {}
        for m, mode in MODES.items():  # warm-up: programs compiled, caches filled
            outs[m] = run(mode, x, y, steps, read_every)[2].cpu()
        assert torch.equal(outs["strict"], outs["defer"]), "modes disagree"
        for _ in range(a.rounds):
            for m, mode in MODES.items():
                host, wall, _ = run(mode, x, y, steps, read_every)
                best[m] = [min(best[m][0], host), min(best[m][1], wall)]
        for m in MODES:
            print(f"{name:8s} {m:7s} {best[m][0] / a.ops * 1e6:11.2f} {best[m][1] / a.ops * 1e6:11.2f}")
        print(f"{name:8s} defer/strict host {best['defer'][0] / best['strict'][0]:.2f}")


if __name__ == "__main__":
    main()
