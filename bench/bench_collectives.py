"""Collectives benchmark: tpu_dist (tpu tensors) vs Gloo (CPU tensors), side
by side in one "cpu:gloo,tpu:tpu_dist" process group.

Figures: all_reduce (sum, float32) and all_gather bus bandwidth for 1 KiB to
256 MiB messages, 2 and 4 processes on this host. Bus bandwidth follows
nccl-tests: all_reduce S/t * 2(n-1)/n with S the tensor's bytes, all_gather
S/t * (n-1)/n with S the gathered output's bytes. Best of N alternating
rounds (tpu_dist, then Gloo, each round; both see the same machine load).
Prints a table, writes bench/results/collectives.json.

Chips of one process: the same collectives between `world` chips driven by
one process (torch.tpu.comm.all_reduce / all_gather over one tensor per chip,
TORCH_TPU_NUM_CHIPS=world), bus bandwidth in the "chips GB/s" column.

DDP: tokens/s of DistributedDataParallel training of a small language-model
MLP (embedding 128, hidden 512, vocab 2048; 8 x 64 tokens per rank and step)
with 1 and 2 processes (weak scaling: the per-rank batch is fixed), tpu
(tpu_dist) and CPU (Gloo) side by side in alternating rounds of 5 steps, in
one "cpu:gloo,tpu:tpu_dist" group. Scaling = tokens/s(2) / tokens/s(1).

Usage: python bench/bench_collectives.py [--quick] [--min-kib 1] [--max-mib 256] [--worlds 2,4]
                                         [--ops all_reduce,all_gather] [--what collectives,ddp]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta


def worker(rank, world, store_file, out_file, sizes, rounds, ops):
    import torch
    import torch.distributed as dist

    import torch_tpu  # noqa: F401

    store = dist.FileStore(store_file, world)
    dist.init_process_group("cpu:gloo,tpu:tpu_dist", store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=600))
    rows = []
    for op in ops:
        for size in sizes:
            n = max(1, size // 4)
            if op == "all_gather":
                n = max(1, n // world)  # size = gathered output
            bufs = {}
            for dev in ("tpu", "cpu"):
                x = torch.ones(n, dtype=torch.float32, device=dev)
                out = torch.empty(n * world if op == "all_gather" else 0, dtype=torch.float32, device=dev)
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
            for _ in range(rounds):
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


def chips_worker(world, out_file, sizes, rounds, ops):
    """One process driving `world` chips: torch.tpu.comm.all_reduce /
    all_gather over one tensor per chip (chip to chip, no processes)."""
    import torch

    import torch_tpu  # noqa: F401
    import torch.tpu.comm as comm

    rows = []
    devs = [torch.device("tpu", i) for i in range(world)]
    for op in ops:
        for size in sizes:
            n = max(1, size // 4)
            if op == "all_gather":
                n = max(1, n // world)
            xs = [torch.ones(n, dtype=torch.float32, device=d) for d in devs]
            outs = [torch.empty(n * world if op == "all_gather" else 0, dtype=torch.float32, device=d) for d in devs]
            iters = max(1, min(200, (4 << 20) // max(size, 1)))

            def run():
                for _ in range(iters):
                    if op == "all_reduce":
                        comm.all_reduce(xs)
                    else:
                        comm.all_gather(xs, outs)
                for d in devs:
                    torch.tpu.synchronize(d)

            run()
            best = None
            for _ in range(rounds):
                t0 = time.perf_counter()
                run()
                t = (time.perf_counter() - t0) / iters
                best = t if best is None else min(best, t)
            nbytes = n * 4 * (world if op == "all_gather" else 1)
            factor = 2 * (world - 1) / world if op == "all_reduce" else (world - 1) / world
            rows.append({"op": op, "world": world, "bytes": nbytes, "chips_us": best * 1e6,
                         "chips_busbw_GBps": nbytes / best * factor / 1e9})
            del xs, outs
    with open(out_file, "w") as f:
        json.dump(rows, f)


def ddp_worker(rank, world, store_file, out_file, rounds):
    import torch
    import torch.distributed as dist

    import torch_tpu  # noqa: F401

    torch.set_num_threads(1)
    store = dist.FileStore(store_file, world)
    dist.init_process_group("cpu:gloo,tpu:tpu_dist", store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=600))
    vocab, dim, hidden, batch, seq, steps = 2048, 128, 512, 8, 64, 5

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Embedding(vocab, dim), torch.nn.Linear(dim, hidden),
                                   torch.nn.GELU(), torch.nn.Linear(hidden, dim), torch.nn.GELU(),
                                   torch.nn.Linear(dim, vocab))

    g = torch.Generator().manual_seed(rank)
    tokens = torch.randint(0, vocab, (steps, batch, seq + 1), generator=g)
    setups = {}
    for dev in ("tpu", "cpu"):
        m = torch.nn.parallel.DistributedDataParallel(model().to(dev))
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        setups[dev] = (m, opt, tokens.to(dev))

    def run(dev):
        m, opt, toks = setups[dev]
        for s in range(steps):
            opt.zero_grad()
            logits = m(toks[s, :, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), toks[s, :, 1:].reshape(-1))
            loss.backward()
            opt.step()
        loss.item()  # waits for the device

    best = {}
    for dev in ("tpu", "cpu"):
        run(dev)  # warm-up
    for _ in range(rounds):
        for dev in ("tpu", "cpu"):
            dist.barrier()
            t0 = time.perf_counter()
            run(dev)
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            best[dev] = min(best.get(dev, t.item()), t.item())
    if rank == 0:
        toks = world * batch * seq * steps
        with open(out_file, "w") as f:
            json.dump({"world": world, "tokens_per_step": world * batch * seq,
                       "tpu_dist_tokens_per_s": toks / best["tpu"],
                       "gloo_cpu_tokens_per_s": toks / best["cpu"]}, f)
    dist.destroy_process_group()


def launch(args, world):
    """Runs `world` worker processes of this script; returns rank 0's JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        store, out = os.path.join(tmp, "store"), os.path.join(tmp, "out.json")
        env = dict(os.environ, TORCH_TPU_NUM_THREADS="1")
        procs = [subprocess.Popen([sys.executable, __file__] + [a.format(rank=r, store=store, out=out)
                                                                for a in args], env=env)
                 for r in range(world)]
        for p in procs:
            p.wait(timeout=3600)
        with open(out) as f:
            return json.load(f)


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
    ap.add_argument("--min-kib", type=int, default=1)
    ap.add_argument("--ops", default="all_reduce,all_gather")
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--what", default="collectives,ddp")
    ap.add_argument("--worker", nargs=7, help=argparse.SUPPRESS)
    ap.add_argument("--ddp-worker", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--chips-worker", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        rank, world, store, out, sizes, rounds, ops = args.worker
        worker(int(rank), int(world), store, out, [int(s) for s in sizes.split(",")], int(rounds),
               ops.split(","))
        return
    if args.chips_worker:
        world, out, sizes, rounds, ops = args.chips_worker
        chips_worker(int(world), out, [int(x) for x in sizes.split(",")], int(rounds), ops.split(","))
        return
    if args.ddp_worker:
        rank, world, store, out, rounds = args.ddp_worker
        ddp_worker(int(rank), int(world), store, out, int(rounds))
        return
    what = args.what.split(",")
    path = os.path.join(os.path.dirname(__file__), "results", "collectives.json")
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        saved = {}
    saved["machine_cores"] = os.cpu_count()
    if "collectives" in what:
        saved["results"] = collectives(args)
    if "ddp" in what:
        saved["ddp"] = ddp(args)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(saved, f, indent=1)


def ddp(args):
    rounds = 2 if args.quick else 4
    rows = [launch(["--ddp-worker", "{rank}", str(w), "{store}", "{out}", str(rounds)], w) for w in (1, 2)]
    print(f"{'DDP':<6}{'ranks':>6}{'tokens/step':>13}{'tpu_dist tok/s':>16}{'gloo cpu tok/s':>16}{'speedup':>9}")
    for r in rows:
        print(f"{'':<6}{r['world']:>6}{r['tokens_per_step']:>13}{r['tpu_dist_tokens_per_s']:>16.0f}"
              f"{r['gloo_cpu_tokens_per_s']:>16.0f}{r['tpu_dist_tokens_per_s'] / r['gloo_cpu_tokens_per_s']:>8.2f}x")
    scaling = {"tpu_dist": rows[1]["tpu_dist_tokens_per_s"] / rows[0]["tpu_dist_tokens_per_s"],
               "gloo_cpu": rows[1]["gloo_cpu_tokens_per_s"] / rows[0]["gloo_cpu_tokens_per_s"]}
    print(f"scaling 1 -> 2 processes: tpu_dist {scaling['tpu_dist']:.2f}x, gloo cpu {scaling['gloo_cpu']:.2f}x"
          f" (machine: {os.cpu_count()} cores)")
    return {"rows": rows, "scaling_1_to_2": scaling}


def collectives(args):
    max_bytes = (16 if args.quick else args.max_mib) << 20
    sizes, s = [], 1024
    while s < args.min_kib * 1024:
        s *= 4
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
                                       out, ",".join(map(str, sizes)), str(rounds), args.ops], env=env)
                     for r in range(world)]
            for p in procs:
                p.wait(timeout=3600)
            with open(out) as f:
                results.extend(json.load(f))
            # the same collectives between `world` chips of one process (torch.tpu.comm)
            env = dict(env, TORCH_TPU_NUM_CHIPS=str(world))
            subprocess.run([sys.executable, __file__, "--chips-worker", str(world), out,
                            ",".join(map(str, sizes)), str(rounds), args.ops], env=env, check=True,
                           timeout=3600)
            with open(out) as f:
                chips = {(r["op"], r["bytes"]): r for r in json.load(f)}
            for r in results:
                if r["world"] == world and (r["op"], r["bytes"]) in chips:
                    c = chips[(r["op"], r["bytes"])]
                    r["chips_us"], r["chips_busbw_GBps"] = c["chips_us"], c["chips_busbw_GBps"]
    print(f"{'op':<11}{'ranks':>6}{'size':>11}{'tpu_dist us':>13}{'gloo us':>11}"
          f"{'tpu_dist GB/s':>15}{'gloo GB/s':>11}{'speedup':>9}{'chips GB/s':>12}")
    for r in results:
        print(f"{r['op']:<11}{r['world']:>6}{human(r['bytes']):>11}{r['tpu_dist_us']:>13.1f}"
              f"{r['gloo_us']:>11.1f}{r['tpu_dist_busbw_GBps']:>15.3f}{r['gloo_busbw_GBps']:>11.3f}"
              f"{r['gloo_us'] / r['tpu_dist_us']:>8.2f}x{r.get('chips_busbw_GBps', float('nan')):>12.3f}")
    return results


if __name__ == "__main__":
    main()
