"""Per-step cost over a long run: does a loop's cost change by itself?

A decode-like loop with a host read every step (issue 30):
    kc2 = cat([kc, q], 2); vc2 = cat([vc, q], 2)
    a = softmax(q @ kc2^T / 8, -1) @ vc2
    (tanh(a) * 0.9).sum().item()
run as is for --steps steps (default 10,000) in a fresh process per mode
(strict eager, DEFER_AND_FUSE), as a user runs it. Per block of --block
steps it prints the wall and host-thread microseconds per step and, per
step, how the stream ran its commands (torch_tpu.queue_stats: run by the
submitting thread, handed to the worker, worker wake-ups, synchronisations
that slept) — the counters name the regime a block ran in.

--repeats R runs each mode R times, alternating the order (strict, defer,
defer, strict, ...), and reports per block the median over the runs with
the spread (min-max).

--paired adds R processes that run both modes in one process, switching
mode every --chunk steps (50 by default; the order within each pair of
chunks alternates) after 300 uncounted steps of each, so that what varies
between processes (frequency, placement, the heap's layout: 20-35% here)
cancels out of the ratio: per block of --block steps of each mode it
reports the median over the processes of DEFER_AND_FUSE/strict measured
in the same process, with the spread. The separate processes above still
say whether each mode's cost drifts; the paired ones say which is
cheaper. The summary gives, per mode, the flatness (the
slowest block over the fastest, first block excluded: 1.0 is flat) and
DEFER_AND_FUSE/strict per block. Thread settings are the defaults (no
OMP_* or TORCH_TPU_* variables are set); the load average is printed
before and after.

Writes bench/results/drift.json (--out to change). A build without the
counters (an older checkout on PYTHONPATH, for a baseline) shows -1.0.

Usage: python bench/bench_drift.py [--steps 10000] [--block 500] [--repeats 3]
                                   [--paired [--chunk 50]]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def decode_inputs(torch):
    """The loop's query and key/value caches on tpu (seeded: every run the same)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 8, 1, 64, generator=g).to("tpu")
    kc = torch.randn(1, 8, 16, 64, generator=g).to("tpu")
    return q, kc, kc.clone()


def decode_step(torch, q, kc, vc):
    """One step of the loop: the result is read on the host, as generate() does."""
    kc2 = torch.cat([kc, q], 2)
    vc2 = torch.cat([vc, q], 2)
    a = torch.softmax(q @ kc2.transpose(-1, -2) / 8.0, -1) @ vc2
    return (torch.tanh(a) * 0.9).sum().item()


def worker(mode, steps, block):
    """One run in this process; prints one JSON line per block."""
    import torch
    import torch_tpu
    if mode == "defer":
        torch_tpu.set_global_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE)
    q, kc, vc = decode_inputs(torch)
    # (a build before the counters existed reports none: for baselines)
    queue_stats = getattr(torch_tpu, "queue_stats", lambda: {})
    stats0 = queue_stats()
    wall0, host0 = time.perf_counter(), time.thread_time()
    for step in range(steps):
        value = decode_step(torch, q, kc, vc)
        if (step + 1) % block == 0:
            wall1, host1 = time.perf_counter(), time.thread_time()
            stats1 = queue_stats()
            row = {"step": step + 1, "wall_us": 1e6 * (wall1 - wall0) / block,
                   "host_us": 1e6 * (host1 - host0) / block, "value": value}
            row.update({k: (stats1[k] - stats0[k]) / block for k in stats1})
            print(json.dumps(row), flush=True)
            stats0, wall0, host0 = stats1, wall1, host1


def paired_worker(steps, block, chunk):
    """Both modes in this process, alternating every `chunk` steps; prints
    one JSON line per mode per block of `block` steps of that mode."""
    import torch
    import torch_tpu
    modes = {"strict": torch_tpu.EagerMode.DEFER_NEVER,
             "defer": torch_tpu.EagerMode.DEFER_AND_FUSE}
    q, kc, vc = decode_inputs(torch)

    def loop(n):
        for _ in range(n):
            decode_step(torch, q, kc, vc)

    for mode in modes.values():
        torch_tpu.set_global_eager_mode(mode)
        loop(300)
    acc = {m: [0.0, 0.0, 0] for m in modes}  # wall s, host s, steps in this block
    done = {m: 0 for m in modes}
    pair = 0
    while min(done.values()) < steps:
        order = list(modes) if pair % 2 == 0 else list(modes)[::-1]
        pair += 1
        for m in order:
            torch_tpu.set_global_eager_mode(modes[m])   # timed from after the switch
            n = min(chunk, block - acc[m][2])
            wall0, host0 = time.perf_counter(), time.thread_time()
            loop(n)
            acc[m][0] += time.perf_counter() - wall0
            acc[m][1] += time.thread_time() - host0
            acc[m][2] += n
            if acc[m][2] == block:
                done[m] += block
                print(json.dumps({"mode": m, "step": done[m], "wall_us": 1e6 * acc[m][0] / block,
                                  "host_us": 1e6 * acc[m][1] / block}), flush=True)
                acc[m] = [0.0, 0.0, 0]


def paired_run(steps, block, chunk):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TORCH_TPU_DEFER_AND_FUSE", "TPU_LAUNCH_BLOCKING")}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--paired-worker",
                          "--steps", str(steps), "--block", str(block), "--chunk", str(chunk)],
                         env=env, check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {m: [r for r in rows if r["mode"] == m] for m in ("strict", "defer")}


def report_paired(paired, steps, block, chunk):
    """Per block: each process's DEFER/strict, median and spread."""
    print(f"\npaired: {len(paired)} processes, both modes in each, alternating every {chunk} "
          f"steps after 300 of warm-up each; per block of {block} steps of each mode: wall us "
          "median over processes, DEFER/strict per process (median, min-max)")
    print(f"{'step':>6s} | {'strict':>7s} {'defer':>7s} | {'defer/strict':>12s} {'(min-max)':>13s}"
          f" | {'host ratio':>10s}")
    blocks = len(paired[0]["strict"])
    worst = []
    for b in range(blocks):
        ratios = [p["defer"][b]["wall_us"] / p["strict"][b]["wall_us"] for p in paired]
        host = [p["defer"][b]["host_us"] / p["strict"][b]["host_us"] for p in paired]
        s = statistics.median(p["strict"][b]["wall_us"] for p in paired)
        d = statistics.median(p["defer"][b]["wall_us"] for p in paired)
        worst.append(statistics.median(ratios))
        print(f"{paired[0]['strict'][b]['step']:6d} | {s:7.1f} {d:7.1f} | "
              f"{statistics.median(ratios):12.3f} ({min(ratios):.3f}-{max(ratios):.3f}) | "
              f"{statistics.median(host):10.3f}")
    print(f"paired defer/strict per block: median {statistics.median(worst):.3f}, "
          f"worst block {max(worst):.3f}")
    return {"median": statistics.median(worst), "worst_block": max(worst)}


def run(mode, steps, block):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TORCH_TPU_DEFER_AND_FUSE", "TPU_LAUNCH_BLOCKING")}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", mode,
                          "--steps", str(steps), "--block", str(block)],
                         env=env, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--block", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "drift.json"))
    ap.add_argument("--paired", action="store_true",
                    help="also run both modes in each of --repeats processes (see the header)")
    ap.add_argument("--chunk", type=int, default=50)
    ap.add_argument("--worker", choices=["strict", "defer"], help=argparse.SUPPRESS)
    ap.add_argument("--paired-worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.steps, a.block)
    if a.paired_worker:
        return paired_worker(a.steps, a.block, a.chunk)

    import torch
    import torch_tpu
    print(f"torch_tpu from {os.path.dirname(torch_tpu.__file__)}")
    print(f"torch {torch.__version__}, cpu capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{os.cpu_count()} cores, matrix unit {torch_tpu.matrix_unit()['isa']}")
    load_start = os.getloadavg()
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    runs = {"strict": [], "defer": []}
    paired = []
    for r in range(a.repeats):
        order = ("strict", "defer") if r % 2 == 0 else ("defer", "strict")
        for mode in order:
            runs[mode].append(run(mode, a.steps, a.block))
        if a.paired:
            paired.append(paired_run(a.steps, a.block, a.chunk))
    load_end = os.getloadavg()

    blocks = len(runs["strict"][0])
    med = {m: [statistics.median(run_[b]["wall_us"] for run_ in runs[m]) for b in range(blocks)]
           for m in runs}
    print(f"\n{a.steps} steps, blocks of {a.block}, {a.repeats} runs per mode; per step: "
          "wall us median (min-max over runs), host us, commands inline/queued, "
          "worker wake-ups, sleeping syncs")
    print(f"{'step':>6s} | {'strict wall':>20s} {'host':>6s} {'in/qu/wk/sl':>19s} | "
          f"{'defer wall':>20s} {'host':>6s} {'in/qu/wk/sl':>19s} | defer/strict")
    for b in range(blocks):
        cells = []
        for m in ("strict", "defer"):
            rows = [run_[b] for run_ in runs[m]]
            walls = [row["wall_us"] for row in rows]
            host = statistics.median(row["host_us"] for row in rows)
            regime = "/".join(f"{statistics.median(row.get(k, -1) for row in rows):.1f}"
                              for k in ("inline_commands", "queued_commands",
                                        "worker_wakeups", "sync_sleeps"))
            cells.append(f"{med[m][b]:7.1f} ({min(walls):5.1f}-{max(walls):5.1f}) "
                         f"{host:6.1f} {regime:>19s}")
        print(f"{runs['strict'][0][b]['step']:6d} | {cells[0]} | {cells[1]} | "
              f"{med['defer'][b] / med['strict'][b]:.2f}")
    summary = {}
    for m in runs:
        steady = med[m][1:] or med[m]
        summary[m] = {"median_block_wall_us": statistics.median(steady),
                      "flatness": max(steady) / min(steady)}
    ratios = [d / s for d, s in zip(med["defer"], med["strict"])]
    summary["defer_over_strict_max"] = max(ratios)
    summary["defer_over_strict_median"] = statistics.median(ratios)
    print(f"\nflatness (slowest / fastest block after the first): strict "
          f"{summary['strict']['flatness']:.2f}, defer {summary['defer']['flatness']:.2f}; "
          f"defer/strict median {summary['defer_over_strict_median']:.2f}, "
          f"worst block {summary['defer_over_strict_max']:.2f}")
    if paired:
        summary["paired"] = report_paired(paired, a.steps, a.block, a.chunk)
    print(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"steps": a.steps, "block": a.block, "repeats": a.repeats,
                   "load_start": load_start, "load_end": load_end, "summary": summary,
                   "runs": runs, "paired": paired}, f, indent=1)


if __name__ == "__main__":
    main()
