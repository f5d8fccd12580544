"""One rank of a tests/test_distributed.py scenario (run as a script).

    python dist_worker.py SCENARIO RANK WORLD STORE_FILE RESULT_FILE

Joins a process group through a FileStore, runs the scenario, and writes
{"failures": [...], ...} to RESULT_FILE. Never waits forever: every
collective has a timeout, and the parent kills it after its own.
"""
import json
import os
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

import torch_tpu  # noqa: F401  (registers tpu_dist)

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int8, torch.uint8,
          torch.int16, torch.int32, torch.int64, torch.bool]

failures = []
notes = {}


def expect(cond, what):
    notes["checks"] = notes.get("checks", 0) + 1
    if not cond:
        failures.append(what)


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.cpu(), b.cpu())


def inputs(rank, n, dtype, salt=0):
    """Rank `rank`'s deterministic input: small values exact in every dtype
    (sums and products of 4 stay exact)."""
    g = torch.Generator().manual_seed(1000 * rank + 17 * salt + n)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype == torch.uint8:
        return torch.randint(0, 3, (n,), generator=g).to(dtype)
    v = torch.randint(-2, 3, (n,), generator=g)
    v[v == 0] = 1
    return v.to(dtype)


def gloo_or(fn_cpu, what):
    """Runs the collective under Gloo on CPU; None when Gloo refuses the dtype
    (the caller then compares with the reference computed from every rank's
    input)."""
    try:
        return fn_cpu()
    except (RuntimeError, ValueError, TypeError) as e:
        notes.setdefault("gloo_unsupported", []).append(f"{what}: {str(e).splitlines()[0][:120]}")
        return None


def reference_reduce(xs, op):
    acc = xs[0].clone()
    for x in xs[1:]:
        if op == "sum":
            acc = (acc | x) if acc.dtype == torch.bool else acc + x
        elif op == "product":
            acc = (acc & x) if acc.dtype == torch.bool else acc * x
        elif op == "min":
            acc = torch.minimum(acc, x)
        elif op == "max":
            acc = torch.maximum(acc, x)
    return acc


OPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX}


def scenario_collectives(rank, world):
    """Every collective and dtype on tpu (tpu_dist) against Gloo on CPU, in one
    "cpu:gloo,tpu:tpu_dist" group, with zero CPU fallbacks on tpu."""
    torch_tpu.set_fallback_mode("error")
    tpu = torch.device("tpu", 0)
    for dtype in DTYPES:
        name = str(dtype).replace("torch.", "")
        for n in (1, 7, 3000):
            xs = [inputs(r, n, dtype) for r in range(world)]
            x = xs[rank]
            for opname, op in OPS.items():
                t = x.to(tpu)
                dist.all_reduce(t, op=op)
                c = x.clone()
                g = gloo_or(lambda: (dist.all_reduce(c, op=op), c)[1], f"all_reduce {opname} {name}")
                if g is not None:
                    expect(same(t, g), f"all_reduce {opname} {name} n={n} vs gloo")
                expect(same(t, reference_reduce(xs, opname)), f"all_reduce {opname} {name} n={n}")
                # reduce to the last rank
                t = x.to(tpu)
                dist.reduce(t, dst=world - 1, op=op)
                if rank == world - 1:
                    expect(same(t, reference_reduce(xs, opname)), f"reduce {opname} {name} n={n}")
            if dtype.is_floating_point or dtype in (torch.int32, torch.int64):
                t = x.to(tpu)
                dist.all_reduce(t, op=dist.ReduceOp.AVG)
                ref = reference_reduce(xs, "sum")
                ref = (ref.double() / world).to(dtype) if dtype.is_floating_point else \
                    torch.div(ref, world, rounding_mode="trunc")
                expect(same(t, ref), f"all_reduce avg {name} n={n}")
            if dtype.is_floating_point:
                # PREMUL_SUM (FSDP2 with a gradient divide factor): sum of
                # factor * x, the factor a number or a one-element tensor;
                # reduce_scatter leaves its input as it was
                for factor in (0.25, torch.tensor([0.5], device=tpu)):
                    f = float(factor) if isinstance(factor, float) else 0.5
                    op = dist._make_nccl_premul_sum(factor)
                    t = x.to(tpu)
                    dist.all_reduce(t, op=op)
                    ref = reference_reduce([(v * f).to(dtype) for v in xs], "sum")
                    expect(same(t, ref), f"all_reduce premul_sum {f} {name} n={n}")
                    big = [inputs(r, n * world, dtype, salt=3) for r in range(world)]
                    src = big[rank].to(tpu)
                    out = torch.empty(n, dtype=dtype, device=tpu)
                    dist.reduce_scatter_tensor(out, src, op=op)
                    ref = reference_reduce([(b[rank * n:(rank + 1) * n] * f).to(dtype) for b in big], "sum")
                    expect(same(out, ref), f"reduce_scatter premul_sum {f} {name} n={n}")
                    expect(same(src, big[rank]), f"reduce_scatter premul_sum {name}: input kept")
            # broadcast
            t = x.to(tpu)
            dist.broadcast(t, src=world - 1)
            c = x.clone()
            g = gloo_or(lambda: (dist.broadcast(c, src=world - 1), c)[1], f"broadcast {name}")
            if g is not None:
                expect(same(t, g), f"broadcast {name} n={n} vs gloo")
            expect(same(t, xs[world - 1]), f"broadcast {name} n={n}")
            # all_gather (list) and all_gather_into_tensor
            outs = [torch.empty_like(x, device=tpu) for _ in range(world)]
            dist.all_gather(outs, x.to(tpu))
            couts = [torch.empty_like(x) for _ in range(world)]
            g = gloo_or(lambda: (dist.all_gather(couts, x), couts)[1], f"all_gather {name}")
            for r in range(world):
                expect(same(outs[r], xs[r]), f"all_gather {name} n={n} part {r}")
                if g is not None:
                    expect(same(outs[r], g[r]), f"all_gather {name} n={n} part {r} vs gloo")
            flat = torch.empty(world * n, dtype=dtype, device=tpu)
            dist.all_gather_into_tensor(flat, x.to(tpu))
            expect(same(flat, torch.cat(xs)), f"all_gather_into_tensor {name} n={n}")
            # reduce_scatter (list and tensor), sum
            big = [inputs(r, n * world, dtype, salt=1) for r in range(world)]
            out = torch.empty(n, dtype=dtype, device=tpu)
            dist.reduce_scatter_tensor(out, big[rank].to(tpu))
            want = reference_reduce([b[rank * n:(rank + 1) * n] for b in big], "sum")
            expect(same(out, want), f"reduce_scatter_tensor {name} n={n}")
            out = torch.empty(n, dtype=dtype, device=tpu)
            dist.reduce_scatter(out, list(big[rank].to(tpu).chunk(world)))
            expect(same(out, want), f"reduce_scatter {name} n={n}")
            cout = torch.empty(n, dtype=dtype)
            g = gloo_or(lambda: (dist.reduce_scatter_tensor(cout, big[rank]), cout)[1],
                        f"reduce_scatter {name}")
            if g is not None:
                expect(same(out, g), f"reduce_scatter {name} n={n} vs gloo")
            # all_to_all_single, uneven: rank i sends (i + j) % 3 + 1 rows of 2 to rank j
            def split(i, j):
                return (i + j) % 3 + 1
            in_splits = [split(rank, j) for j in range(world)]
            out_splits = [split(j, rank) for j in range(world)]
            src = inputs(rank, 2 * sum(in_splits), dtype, salt=2).view(-1, 2)
            dst = torch.empty(sum(out_splits), 2, dtype=dtype, device=tpu)
            dist.all_to_all_single(dst, src.to(tpu), out_splits, in_splits)
            cdst = torch.empty(sum(out_splits), 2, dtype=dtype)
            g = gloo_or(lambda: (dist.all_to_all_single(cdst, src, out_splits, in_splits), cdst)[1],
                        f"all_to_all_single {name}")
            parts = []
            for j in range(world):
                sj = [split(j, k) for k in range(world)]
                srcj = inputs(j, 2 * sum(sj), dtype, salt=2).view(-1, 2)
                off = sum(sj[:rank])
                parts.append(srcj[off:off + sj[rank]])
            expect(same(dst, torch.cat(parts)), f"all_to_all_single {name}")
            if g is not None:
                expect(same(dst, g), f"all_to_all_single {name} vs gloo")
            # all_to_all (lists)
            ins = [inputs(rank, 3 + j, dtype, salt=3 + j).to(tpu) for j in range(world)]
            outs = [torch.empty(3 + rank, dtype=dtype, device=tpu) for _ in range(world)]
            dist.all_to_all(outs, ins)
            for j in range(world):
                expect(same(outs[j], inputs(j, 3 + rank, dtype, salt=3 + rank)), f"all_to_all {name} from {j}")
            # gather / scatter
            root = 1 % world
            gl = [torch.empty_like(x, device=tpu) for _ in range(world)] if rank == root else None
            dist.gather(x.to(tpu), gl, dst=root)
            if rank == root:
                for r in range(world):
                    expect(same(gl[r], xs[r]), f"gather {name} part {r}")
            sl = [inputs(r, n, dtype, salt=4).to(tpu) for r in range(world)] if rank == 0 else None
            so = torch.empty(n, dtype=dtype, device=tpu)
            dist.scatter(so, sl, src=0)
            expect(same(so, inputs(rank, n, dtype, salt=4)), f"scatter {name}")
            # send / recv around the ring
            to, frm = (rank + 1) % world, (rank - 1) % world
            r_buf = torch.empty_like(x, device=tpu)
            if rank % 2 == 0:
                dist.send(x.to(tpu), to)
                dist.recv(r_buf, frm)
            else:
                dist.recv(r_buf, frm)
                dist.send(x.to(tpu), to)
            expect(same(r_buf, xs[frm]), f"send/recv {name}")
            # non-contiguous tensor, async work and its future
            m = inputs(rank, 2 * n, dtype, salt=5).view(2, n).t().to(tpu)
            work = dist.all_reduce(m, op=dist.ReduceOp.MAX, async_op=True)
            fut = work.get_future()
            work.wait()
            fut.wait()
            want = reference_reduce([inputs(r, 2 * n, dtype, salt=5).view(2, n).t() for r in range(world)], "max")
            expect(same(m, want), f"all_reduce non-contiguous {name}")
            expect(same(fut.value()[0], want), f"future value {name}")
    dist.barrier()
    notes["fallbacks"] = torch_tpu.fallback_counts()
    expect(not notes["fallbacks"], f"fallbacks: {notes['fallbacks']}")


def scenario_ddp(rank, world):
    """DDP on tpu, 20 steps: the global loss and the parameters equal those of
    single-process training on the whole batch."""
    torch_tpu.set_fallback_mode("error")
    tpu = torch.device("tpu", 0)

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))

    torch.manual_seed(1)
    data = torch.randn(20, 4 * world, 8)
    target = torch.randn(20, 4 * world, 4)
    # single process, whole batch (on tpu, no DDP)
    ref = model().to(tpu)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    ref_losses = []
    for s in range(20):
        opt.zero_grad()
        loss = ((ref(data[s].to(tpu)) - target[s].to(tpu)) ** 2).mean()
        loss.backward()
        opt.step()
        ref_losses.append(loss.item())
    # DDP: this rank's quarter of every batch
    ddp = torch.nn.parallel.DistributedDataParallel(model().to(tpu))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    losses = []
    lo, hi = 4 * rank, 4 * (rank + 1)
    for s in range(20):
        opt.zero_grad()
        loss = ((ddp(data[s, lo:hi].to(tpu)) - target[s, lo:hi].to(tpu)) ** 2).mean()
        loss.backward()
        opt.step()
        g = loss.detach().clone()
        dist.all_reduce(g, op=dist.ReduceOp.AVG)
        losses.append(g.item())
    notes["losses"] = losses
    notes["ref_losses"] = ref_losses
    for s in range(20):
        expect(abs(losses[s] - ref_losses[s]) <= 1e-5 * (1 + abs(ref_losses[s])),
               f"step {s}: loss {losses[s]} vs single-process {ref_losses[s]}")
    for p, q in zip(ddp.module.parameters(), ref.parameters()):
        expect(torch.allclose(p.cpu(), q.cpu(), atol=1e-5, rtol=1e-5), "parameters differ")
    notes["fallbacks"] = torch_tpu.fallback_counts()
    expect(not notes["fallbacks"], f"fallbacks: {notes['fallbacks']}")


def scenario_timeout(rank, world):
    """Rank 1 never calls the all_reduce: rank 0's fails naming it, then the
    communicator is aborted and rank 1's next collective fails at once."""
    tpu = torch.device("tpu", 0)
    dist.barrier()
    if rank == 0:
        t = torch.ones(4, device=tpu)
        t0 = time.time()
        try:
            dist.all_reduce(t)
            expect(False, "all_reduce did not time out")
        except dist.DistBackendError as e:
            msg = str(e)
            notes["message"] = msg.splitlines()[0]
            expect("all_reduce" in msg, "message names the collective")
            if os.environ.get("TPU_DIST_HOST_KEY"):  # Gloo between hosts: its timeout
                expect("Gloo between hosts) on rank 0 of 2 timed out" in msg, "Gloo's timeout")
            else:
                expect("rank 1 did not arrive" in msg, "message names the missing rank")
        except Exception as e:  # noqa
            expect(False, f"wrong exception {type(e).__name__}: {e}")
        notes["seconds"] = time.time() - t0
    else:
        time.sleep(4)
        try:
            dist.barrier()
            expect(False, "barrier after abort succeeded")
        except dist.DistBackendError as e:
            # (between hosts: rank 0 has left, Gloo fails the barrier)
            expect("aborted" in str(e) or os.environ.get("TPU_DIST_HOST_KEY"), f"rank 1 sees the abort: {e}")


def scenario_dies(rank, world):
    """Rank 1 dies after a barrier: rank 0's next all_reduce fails (naming it
    on one host, where its exit is noticed at once)."""
    tpu = torch.device("tpu", 0)
    dist.barrier()
    if rank == 1:
        os._exit(0)
    t0 = time.time()
    try:
        dist.all_reduce(torch.ones(4, device=tpu))
        expect(False, "all_reduce did not fail")
    except dist.DistBackendError as e:
        notes["message"] = str(e).splitlines()[0]
        expect("all_reduce" in str(e), "names the collective")
    notes["seconds"] = time.time() - t0


def scenario_fsdp2(rank, world):
    """FSDP2 fully_shard on DeviceMesh("tpu", ...): 5 steps equal to
    single-process training."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    tpu = torch.device("tpu", 0)

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))

    torch.manual_seed(1)
    data = torch.randn(5, 4 * world, 8)
    target = torch.randn(5, 4 * world, 4)
    ref = model().to(tpu)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    ref_losses = []
    for s in range(5):
        opt.zero_grad()
        loss = ((ref(data[s].to(tpu)) - target[s].to(tpu)) ** 2).mean()
        loss.backward()
        opt.step()
        ref_losses.append(loss.item())
    mesh = init_device_mesh("tpu", (world,))
    m = model().to(tpu)
    for layer in m:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    lo, hi = 4 * rank, 4 * (rank + 1)
    losses = []
    for s in range(5):
        opt.zero_grad()
        loss = ((m(data[s, lo:hi].to(tpu)) - target[s, lo:hi].to(tpu)) ** 2).mean()
        loss.backward()
        opt.step()
        g = loss.detach().clone()
        dist.all_reduce(g, op=dist.ReduceOp.AVG)
        losses.append(g.item())
    notes["losses"] = losses
    for s in range(5):
        expect(abs(losses[s] - ref_losses[s]) <= 1e-5 * (1 + abs(ref_losses[s])),
               f"step {s}: loss {losses[s]} vs single-process {ref_losses[s]}")


def scenario_dtensor(rank, world):
    """DTensor on DeviceMesh("tpu", ...): a column-then-row tensor-parallel
    MLP equals the plain one."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    tpu = torch.device("tpu", 0)
    mesh = init_device_mesh("tpu", (world,))

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))

    torch.manual_seed(1)
    x = torch.randn(6, 8)
    ref = model()
    want = ref(x)
    want.sum().backward()
    tp = parallelize_module(model().to(tpu), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    got = tp(x.to(tpu))
    expect(torch.allclose(got.cpu(), want.detach(), atol=1e-5, rtol=1e-5), "tensor-parallel output")
    got.sum().backward()
    g = tp[0].weight.grad.full_tensor().cpu()
    expect(torch.allclose(g, ref[0].weight.grad, atol=1e-5, rtol=1e-5), "tensor-parallel gradient")


def scenario_hosts(rank, world):
    """A group across hosts (network namespaces, or TPU_DIST_HOST_KEY): the
    backend runs through Gloo; all_reduce, all_gather, broadcast, send/recv
    and a barrier give the expected values."""
    torch_tpu.set_fallback_mode("error")
    tpu = torch.device("tpu", 0)
    created = torch_tpu.distributed.created
    expect(created and created[-1][2] > 1 and created[-1][3] == os.environ.get("DIST_TEST_TRANSPORT", "gloo"),
           f"several hosts and the expected transport: {created}")
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int16, torch.int64, torch.bool):
        n = 1000
        xs = [inputs(r, n, dtype) for r in range(world)]
        for opname in OPS:
            t = xs[rank].to(tpu)
            dist.all_reduce(t, op=OPS[opname])
            expect(same(t, reference_reduce(xs, opname)), f"all_reduce {opname} {dtype}")
        if dtype == torch.bool:
            continue
        t = xs[rank].to(tpu)
        work = dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)
        fut = work.get_future()
        work.wait()
        ref = reference_reduce(xs, "sum")
        ref = (ref.double() / world).to(dtype) if dtype.is_floating_point else \
            torch.div(ref, world, rounding_mode="trunc")
        expect(same(t, ref) and same(fut.wait()[0], ref), f"all_reduce avg {dtype}")
        flat = torch.empty(world * n, dtype=dtype, device=tpu)
        dist.all_gather_into_tensor(flat, xs[rank].to(tpu))
        expect(same(flat, torch.cat(xs)), f"all_gather_into_tensor {dtype}")
        t = xs[rank].to(tpu)
        dist.broadcast(t, src=world - 1)
        expect(same(t, xs[world - 1]), f"broadcast {dtype}")
        t = xs[rank].to(tpu) * 2  # a pending result on the stream feeds the collective
        dist.all_reduce(t)
        expect(same(t, reference_reduce([x * 2 for x in xs], "sum")), f"queued input {dtype}")
    buf = torch.empty(5, device=tpu)
    if rank == 0:
        dist.send(torch.arange(5.0, device=tpu), world - 1)
    elif rank == world - 1:
        dist.recv(buf, 0)
        expect(same(buf, torch.arange(5.0)), "send/recv")
    dist.barrier()
    notes["fallbacks"] = torch_tpu.fallback_counts()
    expect(not notes["fallbacks"], f"fallbacks: {notes['fallbacks']}")


def _dcp_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 6))


def _dcp_step(m, opt, rank, world):
    torch.manual_seed(3)
    data, target = torch.randn(4 * world, 8), torch.randn(4 * world, 6)
    lo, hi = 4 * rank, 4 * (rank + 1)
    tpu = torch.device("tpu", 0)
    opt.zero_grad()
    ((m(data[lo:hi].to(tpu)) - target[lo:hi].to(tpu)) ** 2).mean().backward()
    opt.step()


def scenario_dcp_save(rank, world):
    """FSDP2-sharded model and Adam state (DTensors on tpu) saved with
    torch.distributed.checkpoint; rank 0 also writes the full values
    (torch.save) for the reload to compare with."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    ckpt = os.environ["DIST_TEST_CKPT"]
    mesh = init_device_mesh("tpu", (world,))
    m = _dcp_model().to("tpu")
    for layer in m:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    for _ in range(2):
        _dcp_step(m, opt, rank, world)
    msd, osd = get_state_dict(m, opt)
    expect(any(type(v).__name__ == "DTensor" for v in msd.values()), "model state is sharded")
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=ckpt)
    full_m, full_o = get_state_dict(m, opt, options=StateDictOptions(full_state_dict=True,
                                                                    cpu_offload=True))
    if rank == 0:
        torch.save({"model": full_m, "optim": full_o}, os.path.join(ckpt, "..", "full.pt"))
    dist.barrier()
    notes["keys"] = sorted(msd)


def scenario_dcp_load(rank, world):
    """Reloads scenario_dcp_save's checkpoint with a different world size
    (plain or sharded model) and compares with the full values."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_state_dict,
                                                         set_state_dict)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    ckpt = os.environ["DIST_TEST_CKPT"]
    m = _dcp_model().to("tpu")
    if world > 1:
        mesh = init_device_mesh("tpu", (world,))
        for layer in m:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(m, mesh=mesh)
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    msd, osd = get_state_dict(m, opt)  # (creates the optimizer state to load into)
    sd = {"model": msd, "optim": osd}
    dcp.load(sd, checkpoint_id=ckpt)
    set_state_dict(m, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
    full = torch.load(os.path.join(ckpt, "..", "full.pt"), weights_only=False)
    got_m, got_o = get_state_dict(m, opt, options=StateDictOptions(full_state_dict=True,
                                                                  cpu_offload=True))
    if rank != 0:  # (a full state dict with cpu_offload is on rank 0 only)
        full = {"model": {}, "optim": {"state": {}}}
    for k, v in full["model"].items():
        expect(k in got_m and torch.equal(got_m[k].cpu(), v.cpu()), f"model {k} after reload")
    for pk, st in full["optim"]["state"].items():
        for name, v in st.items():
            g = got_o["state"].get(pk, {}).get(name)
            expect(g is not None and torch.equal(torch.as_tensor(g).cpu(), torch.as_tensor(v).cpu()),
                   f"optimizer {pk}.{name} after reload")
    # still trains on the new world size
    _dcp_step(m, opt, rank, world)
    notes["fallbacks"] = torch_tpu.fallback_counts()


def scenario_coalesced(rank, world):
    """Coalesced collectives (dist._coalescing_manager: all_reduce,
    all_gather_into_tensor, reduce_scatter_tensor; batch_isend_irecv) on tpu
    against Gloo on CPU (or the reference where Gloo has no coalesced form);
    each coalesced group runs as one collective of the communicator."""
    torch_tpu.set_fallback_mode("error")
    tpu = torch.device("tpu", 0)
    backend = dist.group.WORLD._get_backend(tpu)
    expect(backend.supports_coalescing, "supports_coalescing")
    sizes = (5, 1, 3000, 0)
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        name = str(dtype).replace("torch.", "")
        for opname, op in (("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX)):
            xs = [[inputs(r, n, dtype, salt=i) for i, n in enumerate(sizes)] for r in range(world)]
            ts = [x.to(tpu) for x in xs[rank]]
            ts[2] = ts[2].view(60, 50).t()  # non-contiguous
            torch.tpu.synchronize()
            before = torch_tpu._C._dist_collectives_run(backend)
            with dist._coalescing_manager(device=tpu):
                for t in ts:
                    dist.all_reduce(t, op=op)
            torch.tpu.synchronize()
            expect(torch_tpu._C._dist_collectives_run(backend) == before + 1,
                   f"coalesced all_reduce {name} ran as {torch_tpu._C._dist_collectives_run(backend) - before} collectives")
            cs = [x.clone() for x in xs[rank]]
            with dist._coalescing_manager():
                for c in cs:
                    dist.all_reduce(c, op=op)
            for i, n in enumerate(sizes):
                got = ts[i].t().reshape(-1) if i == 2 else ts[i]
                expect(same(got, cs[i]), f"coalesced all_reduce {opname} {name} n={n} vs gloo")
                expect(same(got, reference_reduce([xs[r][i] for r in range(world)], opname)),
                       f"coalesced all_reduce {opname} {name} n={n}")
        # all_gather_into_tensor and reduce_scatter_tensor, coalesced
        xs = [[inputs(r, n * world, dtype, salt=10 + i) for i, n in enumerate(sizes)] for r in range(world)]
        outs = [torch.empty(n * world, dtype=dtype, device=tpu) for n in sizes]
        parts = [x[:n].to(tpu) for x, n in zip(xs[rank], sizes)]
        before = torch_tpu._C._dist_collectives_run(backend)
        with dist._coalescing_manager(device=tpu, async_ops=True) as cm:
            for o, p in zip(outs, parts):
                dist.all_gather_into_tensor(o, p)
        cm.wait()
        expect(torch_tpu._C._dist_collectives_run(backend) == before + 1, "coalesced all_gather: one collective")
        for i, n in enumerate(sizes):
            want = torch.cat([xs[r][i][:n] for r in range(world)])
            expect(same(outs[i], want), f"coalesced all_gather {name} n={n}")
        rs_out = [torch.empty(n, dtype=dtype, device=tpu) for n in sizes]
        with dist._coalescing_manager(device=tpu):
            for o, x in zip(rs_out, xs[rank]):
                dist.reduce_scatter_tensor(o, x.to(tpu))
        for i, n in enumerate(sizes):
            want = reference_reduce([xs[r][i][rank * n:(rank + 1) * n] for r in range(world)], "sum")
            expect(same(rs_out[i], want), f"coalesced reduce_scatter {name} n={n}")
    # large messages (>= 1 MiB) take the direct path: buffers allocated after
    # init_process_group lie in shared device memory, peers read and write in place
    n = 300001
    xs = [inputs(r, n * world, torch.float32, salt=99) for r in range(world)]
    t = xs[rank][:n].to(tpu)
    dist.all_reduce(t)
    expect(same(t, reference_reduce([x[:n] for x in xs], "sum")), "large all_reduce")
    out = torch.empty(n * world, device=tpu)
    dist.all_gather_into_tensor(out, xs[rank][:n].to(tpu))
    expect(same(out, torch.cat([x[:n] for x in xs])), "large all_gather")
    rs = torch.empty(n, device=tpu)
    dist.reduce_scatter_tensor(rs, xs[rank].to(tpu))
    expect(same(rs, reference_reduce([x[rank * n:(rank + 1) * n] for x in xs], "sum")), "large reduce_scatter")
    b = xs[rank].to(tpu)
    dist.broadcast(b, src=world - 1)
    expect(same(b, xs[world - 1]), "large broadcast")
    # batch_isend_irecv goes through startCoalescing/endCoalescing now
    send = torch.full((1000,), float(rank), device=tpu)
    recv = torch.empty(1000, device=tpu)
    ops = [dist.P2POp(dist.isend, send, (rank + 1) % world), dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    expect(same(recv, torch.full((1000,), float((rank - 1) % world))), "batch_isend_irecv ring")


def scenario_init_styles(rank, world):
    """init_process_group(device_id=tpu:r) binds rank r to chip r."""
    tpu = torch.device("tpu", rank)
    expect(torch.tpu.current_device() == rank, f"current device {torch.tpu.current_device()}")
    t = torch.full((5,), float(rank + 1), device=tpu)
    dist.all_reduce(t)
    expect(same(t, torch.full((5,), float(sum(range(1, world + 1))))), "all_reduce on tpu:rank")
    expect(t.device == tpu, "result stays on the rank's chip")


def main():
    scenario, rank, world, store_file, result_file = sys.argv[1:6]
    rank, world = int(rank), int(world)
    timeout = timedelta(seconds=float(os.environ.get("DIST_TEST_TIMEOUT", "60")))
    tcp = os.environ.get("DIST_TEST_TCP_STORE")  # "HOST:PORT": a TCPStore that rank 0 serves
    if tcp:
        host, port = tcp.rsplit(":", 1)
        store = dist.TCPStore(host, int(port), world, is_master=rank == 0,
                              timeout=timedelta(seconds=60))
    else:
        store = dist.FileStore(store_file, world)
    backend = os.environ.get("DIST_TEST_BACKEND", "cpu:gloo,tpu:tpu_dist")
    kwargs = {}
    if scenario == "init_styles":
        kwargs["device_id"] = torch.device("tpu", rank)
        backend = None
    dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world,
                            timeout=timeout, **kwargs)
    notes["created"] = torch_tpu.distributed.created
    try:
        globals()["scenario_" + scenario](rank, world)
    except Exception:  # noqa
        failures.append(traceback.format_exc()[-3000:])
    with open(result_file, "w") as f:
        json.dump({"failures": failures, "notes": notes}, f, default=str)
    try:
        dist.destroy_process_group()
    except Exception:  # noqa
        pass
    os._exit(0)


if __name__ == "__main__":
    main()
