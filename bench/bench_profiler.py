"""What profiling costs per op (docs/profiler.md, "Cost").

The small-op loop: `x = x + y` on 32x32 float32 tensors, strict eager (each
op one command, run inline by the submitting thread) and DEFER_AND_FUSE (one
flush per --ops ops), in one process, the columns alternated over the rounds:
  - off: no profiler;
  - recorder: the runtime's device-event recorder only (torch_tpu._C's
    _profiler_start), drained after each round;
  - torch.profiler: profile(activities=[CPU, PrivateUse1]) around the round,
    its trace processed at exit (not timed: only the loop is);
  - for reference, the same loop on PyTorch CPU (default threads), without
    and with profile(activities=[CPU]): what host-op recording costs anyway.
Prints the min and median per-op wall time over the rounds, and the load
average. Without the recorder in the build (an older torch_tpu), only the
"off" column runs: run the script under both builds and compare "off".

Usage: python bench/bench_profiler.py [--rounds 15] [--ops 2000]
"""
import argparse
import os
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

import torch_tpu
from torch_tpu import _C


def loop(x, y, n):
    t0 = time.perf_counter()
    for _ in range(n):
        x = x + y
    if x.device.type == "tpu":
        torch.tpu.synchronize()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--ops", type=int, default=2000)
    a = ap.parse_args()
    x = torch.randn(32, 32, device="tpu")
    y = torch.randn(32, 32, device="tpu")
    has_recorder = hasattr(_C, "_profiler_start")

    def off(n):
        return loop(x, y, n)

    def recorder(n):
        _C._profiler_start(4 * n, False)
        try:
            return loop(x, y, n)
        finally:
            _C._profiler_stop()
            _C._profiler_drain()

    def torch_profiler(n):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]):
            dt = loop(x, y, n)
        return dt

    xc, yc = x.cpu(), y.cpu()

    def cpu_off(n):
        return loop(xc, yc, n)

    def cpu_profiler(n):
        with profile(activities=[ProfilerActivity.CPU]):
            dt = loop(xc, yc, n)
        return dt

    columns = {"off": off}
    if has_recorder:
        columns["recorder"] = recorder
        columns["torch.profiler"] = torch_profiler
    columns["cpu off"] = cpu_off
    columns["cpu profiler"] = cpu_profiler
    for mode in (torch_tpu.EagerMode.DEFER_NEVER, torch_tpu.EagerMode.DEFER_AND_FUSE):
        times = {k: [] for k in columns}
        with torch_tpu.set_eager_mode(mode):
            for fn in columns.values():
                fn(200)  # warm-up
            for r in range(a.rounds):
                names = list(columns) if r % 2 == 0 else list(reversed(columns))
                for k in names:
                    times[k].append(columns[k](a.ops) / a.ops * 1e6)
        print(f"{mode.name}: us per op (min / median over {a.rounds} rounds of {a.ops} ops)")
        for k, v in times.items():
            print(f"  {k:<15} {min(v):7.2f} / {statistics.median(v):7.2f}")
    print(f"load average: {os.getloadavg()}; torch {torch.__version__}, "
          f"torch_tpu from {os.path.dirname(torch_tpu.__file__)}")


if __name__ == "__main__":
    main()
