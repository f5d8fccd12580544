"""Collectives benchmark: tpu_dist (tpu tensors) vs Gloo (CPU tensors), side
by side in one "cpu:gloo,tpu:tpu_dist" process group.

Figures: all_reduce (sum, float32) and all_gather bus bandwidth for 1 KiB to
256 MiB messages, 2 and 4 processes on this host. Bus bandwidth follows
nccl-tests: all_reduce S/t * 2(n-1)/n with S the tensor's bytes, all_gather
S/t * (n-1)/n with S the gathered output's bytes. Best of N alternating
rounds (tpu_dist, then Gloo, each round; both see the same machine load).
Prints a table, writes bench/results/collectives.json.

Usage: python bench/bench_collectives.py [--quick] [--max-mib 256] [--worlds 2,4]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta


def worker(rank, world, store_file, out_file, sizes, rounds):
    import torch
    import torch.distributed as dist

    import torch_tpu  # noqa: F401

    store = dist.FileStore(store_file, world)
    dist.init_process_group("cpu:gloo,tpu:tpu_dist", store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=600))
    rows = []
    for op in ("all_reduce", "all_gather"):
        for size in sizes:
            n = max(1, size // 4)
            if op == "all_gather":
                n = max(1, n // world)  # size = gathered output
            bufs = {}
            for dev in ("tpu", "cpu"):
                x = torch.ones(n, dtype=torch.float32, device=dev)
                out = torch.empty(n * world, dtype=torch.float32, device=dev)
                bufs[dev] = (x, out)
            # small messages: several calls per timing
            iters = max(1, min(200, (4 << 20) // max(size, 1)))

            def run(dev):
                x, out = bufs[dev]
                for _ in range(iters):
                    if op == "all_reduce":
                        dist.all_reduce(x)
                    else:
                        dist.all_gather_into_tensor(out, x)
                if dev == "tpu":
                    torch.tpu.synchronize()

            best = {}
            for dev in ("tpu", "cpu"):
                run(dev)  # warm-up
            for _ in range(rounds if size < (64 << 20) else max(2, rounds // 2)):
                for dev in ("tpu", "cpu"):
                    t0 = time.perf_counter()
                    run(dev)
                    t = (time.perf_counter() - t0) / iters
                    # the slowest rank's time is the collective's
                    tt = torch.tensor([t], dtype=torch.float64)
                    dist.all_reduce(tt, op=dist.ReduceOp.MAX)
                    best[dev] = min(best.get(dev, tt.item()), tt.item())
            nbytes = n * 4 * (world if op == "all_gather" else 1)
            factor = 2 * (world - 1) / world if op == "all_reduce" else (world - 1) / world
            rows.append({
                "op": op, "world": world, "bytes": nbytes,
                "tpu_dist_us": best["tpu"] * 1e6, "gloo_us": best["cpu"] * 1e6,
                "tpu_dist_busbw_GBps": nbytes / best["tpu"] * factor / 1e9,
                "gloo_busbw_GBps": nbytes / best["cpu"] * factor / 1e9,
            })
            del bufs
    if rank == 0:
        with open(out_file, "w") as f:
            json.dump(rows, f)
    dist.destroy_process_group()


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:g} {unit}"
        n /= 1024
    return f"{n:g} TiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--max-mib", type=int, default=256)
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        rank, world, store, out, sizes, rounds = args.worker
        worker(int(rank), int(world), store, out, [int(s) for s in sizes.split(",")], int(rounds))
        return
    max_bytes = (16 if args.quick else args.max_mib) << 20
    sizes, s = [], 1024
    while s <= max_bytes:
        sizes.append(s)
        s *= 4
    rounds = 2 if args.quick else 4
    results = []
    for world in [int(w) for w in args.worlds.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            store, out = os.path.join(tmp, "store"), os.path.join(tmp, "out.json")
            env = dict(os.environ, TORCH_TPU_NUM_THREADS="1")
            procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(r), str(world), store,
                                       out, ",".join(map(str, sizes)), str(rounds)], env=env)
                     for r in range(world)]
            for p in procs:
                p.wait(timeout=3600)
            with open(out) as f:
                results.extend(json.load(f))
    print(f"{'op':<11}{'ranks':>6}{'size':>11}{'tpu_dist us':>13}{'gloo us':>11}"
          f"{'tpu_dist GB/s':>15}{'gloo GB/s':>11}{'speedup':>9}")
    for r in results:
        print(f"{r['op']:<11}{r['world']:>6}{human(r['bytes']):>11}{r['tpu_dist_us']:>13.1f}"
              f"{r['gloo_us']:>11.1f}{r['tpu_dist_busbw_GBps']:>15.3f}{r['gloo_busbw_GBps']:>11.3f}"
              f"{r['gloo_us'] / r['tpu_dist_us']:>8.2f}x")
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    with open(os.path.join(os.path.dirname(__file__), "results", "collectives.json"), "w") as f:
        json.dump({"machine_cores": os.cpu_count(), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
