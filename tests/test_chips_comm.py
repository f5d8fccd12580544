"""torch.tpu.comm: collectives between the chips of one process, against CPU
results. The runtime's chip count is fixed when torch_tpu is imported, so each
test runs a child process with TORCH_TPU_NUM_CHIPS set (and a hard timeout)."""
import json
import os
import subprocess
import sys
import textwrap

PRELUDE = textwrap.dedent("""
    import json, sys, time
    import torch, torch_tpu
    import torch.tpu.comm as comm
    torch_tpu.set_fallback_mode("error")
    failures = []
    def expect(cond, what):
        if not cond:
            failures.append(what)
    def same(a, b):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.cpu(), b.cpu())
    def data(shape, dtype, salt):
        g = torch.Generator().manual_seed(salt)
        v = torch.randint(-3, 4, shape, generator=g)
        return (v > 0) if dtype == torch.bool else v.to(dtype)
""")


def run_child(body, chips, timeout=240):
    code = PRELUDE + textwrap.dedent(body) + "\nprint('RESULT' + json.dumps(failures))\n"
    env = dict(os.environ, TORCH_TPU_NUM_CHIPS=str(chips), TORCH_TPU_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")]
    assert p.returncode == 0 and lines, f"child failed (rc {p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT"):]), p.stdout


def test_every_chip_collective_matches_cpu():
    failures, _ = run_child("""
        N = 3
        devs = [torch.device("tpu", i) for i in range(N)]
        counts0 = torch_tpu.fallback_counts()
        for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.bool):
            name = str(dtype)
            for shape in ((7,), (6, 5), (3000,)):
                xs = [data(shape, dtype, 10 * i + len(shape)) for i in range(N)]
                # broadcast from chip 1 (the result on chip 1 is the input itself)
                src = xs[1].to(devs[1])
                out = comm.broadcast(src, devs)
                expect(all(same(o, xs[1]) and o.device == d for o, d in zip(out, devs)), f"broadcast {name} {shape}")
                expect(out[1] is src, "broadcast keeps the source")
                outs = [torch.empty(shape, dtype=dtype, device=d) for d in devs]
                comm.broadcast(xs[0].to(devs[0]), out=outs)
                expect(all(same(o, xs[0]) for o in outs), f"broadcast out= {name} {shape}")
                ts = [x.to(d) for x, d in zip(xs, devs)]
                if dtype != torch.bool:
                    want = xs[0] + xs[1] + xs[2]
                    for dest in (2, 0):
                        r = comm.reduce_add(ts, dest)
                        expect(same(r, want) and r.device == devs[dest], f"reduce_add {name} {shape} to {dest}")
                    for opname, ref in (("sum", want), ("max", torch.maximum(torch.maximum(xs[0], xs[1]), xs[2]))):
                        tt = [x.to(d) for x, d in zip(xs, devs)]
                        comm.all_reduce(tt, op=opname)
                        expect(all(same(t, ref) for t in tt), f"all_reduce {opname} {name} {shape}")
                # gather along dim 0 onto chip 1, and along the last dim onto the CPU
                g = comm.gather(ts, 0, destination=1)
                expect(same(g, torch.cat(xs, 0)) and g.device == devs[1], f"gather {name} {shape}")
                g = comm.gather(ts, -1, destination=-1)
                expect(same(g, torch.cat(xs, -1)) and g.device.type == "cpu", f"gather dim -1 {name} {shape}")
                # scatter: even split of dim 0 (one collective) and uneven chunk sizes
                big = torch.cat(xs, 0)
                parts = comm.scatter(big.to(devs[2]), devs)
                expect(all(same(p, x) and p.device == d for p, x, d in zip(parts, xs, devs)), f"scatter {name} {shape}")
                parts = comm.scatter(big.to(devs[0]), devs, chunk_sizes=[1, big.size(0) - 2, 1])
                want = big.split([1, big.size(0) - 2, 1])
                expect(all(same(p, w) for p, w in zip(parts, want)), f"scatter chunk_sizes {name} {shape}")
                # all_gather, reduce_scatter (nccl-style lists)
                outs = [torch.empty((N,) + shape, dtype=dtype, device=d) for d in devs]
                comm.all_gather(ts, outs)
                expect(all(same(o, torch.stack(xs)) for o in outs), f"all_gather {name} {shape}")
                if dtype != torch.bool:
                    full = [torch.cat([x] * N).to(d) for x, d in zip(xs, devs)]
                    outs = [torch.empty(shape, dtype=dtype, device=d) for d in devs]
                    comm.reduce_scatter(full, outs)
                    expect(all(same(o, xs[0] + xs[1] + xs[2]) for o in outs), f"reduce_scatter {name} {shape}")
        # broadcast_coalesced: mixed dtypes, the first result holds the inputs
        ins = [data((4, 3), torch.float32, 1).to(devs[0]), data((5,), torch.int64, 2).to(devs[0]),
               data((2,), torch.float32, 3).to(devs[0])]
        res = comm.broadcast_coalesced(ins, devs)
        expect(all(a is b for a, b in zip(res[0], ins)), "broadcast_coalesced keeps the inputs")
        for c in range(N):
            expect(all(same(r, i) and r.device == devs[c] for r, i in zip(res[c], ins)), f"broadcast_coalesced chip {c}")
        comm.synchronize()
        expect(torch_tpu.fallback_counts() == counts0, f"fallbacks {torch_tpu.fallback_counts()}")
    """, chips=3)
    assert not failures, failures[:20]


def test_chip_collectives_are_ordered_with_each_chips_stream():
    # Inputs made by queued work on each chip, consumed by queued work right
    # after the collective, with no synchronisation in between.
    failures, _ = run_child("""
        devs = [torch.device("tpu", i) for i in range(2)]
        for step in range(5):
            ts = [torch.full((200000,), float(i + 1), device=d).mul(step + 1) for i, d in enumerate(devs)]
            comm.all_reduce(ts)
            outs = [t.add(1) for t in ts]
            want = torch.full((200000,), 3.0 * (step + 1) + 1)
            expect(all(same(o, want) for o in outs), f"step {step}")
    """, chips=2)
    assert not failures, failures


def test_chip_that_never_arrives_times_out():
    # Chip 1's part is never queued (the binding's test hook): chip 0's part
    # times out naming chip 1; the failure is raised by synchronize(); the
    # next collective on those chips gets a fresh communicator.
    failures, out = run_child("""
        devs = [torch.device("tpu", i) for i in range(2)]
        ts = [torch.ones(10, device=d) for d in devs]
        t0 = time.time()
        torch_tpu._C._chips_collective("all_reduce", [0, 1], ts, ts, 10, 0, 0, 0.5, 1)
        try:
            comm.synchronize()
            expect(False, "no error")
        except Exception as e:
            msg = str(e)
            expect("timed out" in msg and "rank 1 did not arrive" in msg, msg)
            print("MESSAGE", msg)
        expect(time.time() - t0 < 30, "took too long")
        comm.all_reduce(ts)
        expect(all(same(t, torch.full((10,), 2.0)) for t in ts), "a new communicator after the failure")
    """, chips=2, timeout=120)
    assert not failures, failures
    assert "MESSAGE" in out
