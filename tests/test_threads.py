"""Ops issued from several Python threads at once (each with its own
tensors) give the CPU's results; per-thread state (current stream, device)
stays per thread; counters and memory accounting stay consistent."""
import gc

import torch
import torch.nn.functional as F

import torch_tpu
from conftest import assert_same, make, run_threads

THREADS = 4


def workload(x, w, b, idx):
    """A mix of native and fallback-prone ops."""
    h = F.gelu(x @ w + b)
    h = F.layer_norm(h, h.shape[-1:])
    s = torch.softmax(h, -1)
    e = F.embedding(idx, w.t().contiguous())
    return {
        "s": s,
        "sum": s.sum(0),
        "max": h.max(1),
        "cat": torch.cat([h[:, :3], e.reshape(h.shape[0], -1)[:, :5]], 1),
        "sel": h.index_select(0, idx),
        "inplace": h.clone().mul_(2).add_(b).clamp_(-1, 1),
        "ce": F.cross_entropy(h, idx % h.shape[1]),
    }


def inputs(i):
    return (make((16, 24), seed=10 * i), make((24, 12), seed=10 * i + 1),
            make((12,), seed=10 * i + 2),
            torch.randint(0, 12, (16,), generator=torch.Generator().manual_seed(i)))


def test_four_threads_compute_like_cpu():
    expected = [workload(*inputs(i)) for i in range(THREADS)]

    def body(i):
        x, w, b, idx = (t.to("tpu") for t in inputs(i))
        results = []
        for _ in range(10):
            r = workload(x, w, b, idx)
            results.append({k: (tuple(t.cpu() for t in v) if isinstance(v, tuple)
                                else v.cpu()) for k, v in r.items()})
        return results

    got = run_threads(body, THREADS)
    for i in range(THREADS):
        for r in got[i]:
            for k in expected[i]:
                assert_same(r[k], expected[i][k], atol=1e-5, rtol=1e-5, msg=f"thread {i} {k}")


def test_threads_each_on_own_stream():
    def body(i):
        s = torch.tpu.Stream()
        x = make((64, 64), seed=i).to("tpu") / 8
        with torch.tpu.stream(s):
            assert torch.tpu.current_stream() == s
            torch.tpu.current_stream().wait_stream(torch.tpu.default_stream())
            y = x
            for _ in range(10):
                y = torch.tanh(y @ x)
        s.synchronize()
        assert torch.tpu.current_stream() == torch.tpu.default_stream()
        return y.cpu()

    main_stream = torch.tpu.current_stream()
    got = run_threads(body, THREADS)
    assert torch.tpu.current_stream() == main_stream
    for i in range(THREADS):
        x = make((64, 64), seed=i) / 8
        y = x
        for _ in range(10):
            y = torch.tanh(y @ x)
        torch.testing.assert_close(got[i], y, atol=1e-5, rtol=1e-5)


def test_current_stream_is_per_thread():
    s = torch.tpu.Stream()
    with torch.tpu.stream(s):
        seen = run_threads(lambda i: torch.tpu.current_stream(), 2)
        assert torch.tpu.current_stream() == s
    assert all(st == torch.tpu.default_stream() for st in seen)


def test_fallback_counter_is_thread_safe():
    calls = 25
    x = make((8, 8), seed=5, low=0.1, high=2)
    key = "tpu_fb::affine"  # a test op without a tpu kernel (conftest)
    before = sum(v for k, v in torch_tpu.fallback_counts().items() if key in k)

    def body(i):
        xt = x.to("tpu")
        out = None
        for _ in range(calls):
            out = torch.ops.tpu_fb.affine(xt)
        return out.cpu()

    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = run_threads(body, THREADS)
    for g in got:
        torch.testing.assert_close(g, x * 1.5 + 0.25)
    after = sum(v for k, v in torch_tpu.fallback_counts().items() if key in k)
    assert after - before == THREADS * calls


def test_memory_accounting_with_threads():
    gc.collect()
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()

    def body(i):
        keep = []
        for j in range(50):
            t = torch.full((1000 + 37 * j,), float(i), device="tpu")
            keep.append(t * 2)
            if j % 2:
                keep.pop(0)
        return [k.cpu() for k in keep]

    got = run_threads(body, THREADS)
    for i, ks in enumerate(got):
        for k in ks:
            torch.testing.assert_close(k, torch.full_like(k, 2.0 * i))
    gc.collect()
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() == base


def test_rng_in_threads_gives_valid_samples():
    def body(i):
        g = torch.Generator(device="tpu")
        g.manual_seed(i)
        a = torch.rand(1000, device="tpu", generator=g).cpu()
        g.manual_seed(i)
        b = torch.rand(1000, device="tpu", generator=g).cpu()
        return a, b

    got = run_threads(body, THREADS)
    for a, b in got:
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        assert 0 <= a.min() and a.max() < 1
    assert not torch.equal(got[0][0], got[1][0])


_PIN_PROBE = r"""
import os, json, torch, torch_tpu
x = torch.ones(256, 1024, device="tpu")
x.sum(0).cpu()  # starts the pool and chip 0's queue worker
torch.ones(2, 2).sum(0)  # and PyTorch CPU's own OpenMP team
threads_before = len(os.listdir("/proc/self/task"))
# GEMMs on the matrix unit, split by rows, columns and batch over the pool:
# no OpenMP team of their own (mxu.c)
a = torch.randn(512, 512, device="tpu")
for dt in (torch.float32, torch.bfloat16):
    w = torch.randn(512, 768, device="tpu", dtype=dt)
    (a.to(dt) @ w).cpu(), (a[:8].to(dt) @ w).cpu()
    (torch.randn(4, 64, 512, device="tpu", dtype=dt) @ w).cpu()
q = torch.randint(-128, 127, (96, 256), dtype=torch.int8)
torch._int_mm(q.to("tpu"), q.t().contiguous().to("tpu")).cpu()
threads_gemm = len(os.listdir("/proc/self/task"))
# a convolution on the queue worker: oneDNN's convolution primitives run on
# an OpenMP team (where the unit takes bfloat16 convolutions)
c = torch.randn(1, 64, 28, 28, device="tpu", dtype=torch.bfloat16)
k = torch.randn(64, 64, 3, 3, device="tpu", dtype=torch.bfloat16)
torch.nn.functional.conv2d(c, k, padding=1).cpu()
aff, single, policy = {}, [], {}
for tid in os.listdir("/proc/self/task"):
    # (threads a tpu thread starts, such as the OpenMP team, inherit its name)
    name = open(f"/proc/self/task/{tid}/comm").read().strip()
    mask = sorted(os.sched_getaffinity(int(tid)))
    aff.setdefault(name, []).append(mask)
    policy.setdefault(name, []).append(os.sched_getscheduler(int(tid)))
    if len(mask) == 1:
        single.append(mask[0])
print(json.dumps({"stats": torch_tpu.pool_stats(), "aff": aff, "single": sorted(single),
                  "threads_before": threads_before, "threads_gemm": threads_gemm,
                  "mxu": torch_tpu.matrix_unit(), "policy": policy,
                  "main_policy": os.sched_getscheduler(0)}))
"""


def _pin_probe(**env):
    import json
    import os
    import subprocess
    import sys
    full = {k: v for k, v in os.environ.items()
            if k not in ("TORCH_TPU_PIN_THREADS", "TORCH_TPU_NUM_THREADS", "LOCAL_WORLD_SIZE")}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", _PIN_PROBE], env=full, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_pool_pins_a_thread_per_core_only_when_it_owns_the_cores():
    import os
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        import pytest
        pytest.skip("one core: nothing to pin")
    # auto, the pool spanning every allowed core: each worker and chip 0's
    # queue worker on a core of its own, all different
    r = _pin_probe()
    assert r["stats"]["threads"] == cores and r["stats"]["pinned"] == cores
    assert all(len(a) == 1 for a in r["aff"]["tpu-pool"])
    assert [1 for a in r["aff"]["tpu0-queue"] if len(a) == 1] == [1]
    # exactly those threads are pinned, each to a core of its own: no other
    # thread inherited a pin (libgomp starts a convolution's team with its
    # creator's affinity: the pinned caller unpins while the team runs)
    assert r["single"] == sorted(os.sched_getaffinity(0))
    # off; fewer threads than cores (auto); several ranks on the host (auto): none pinned
    for env in ({"TORCH_TPU_PIN_THREADS": "off"}, {"TORCH_TPU_NUM_THREADS": str(cores - 1)},
                {"LOCAL_WORLD_SIZE": "2", "TORCH_TPU_NUM_CHIPS": "1"}):
        r = _pin_probe(**env)
        assert r["stats"]["pinned"] == 0, env
        assert r["single"] == [], env


def test_device_threads_are_batch_scheduled_and_the_host_thread_is_not():
    # Waking a SCHED_BATCH thread never preempts the running one: the host
    # thread that queues work keeps its core (pool.c). The host's own
    # threads keep their policy.
    import os
    r = _pin_probe()
    assert r["main_policy"] == os.SCHED_OTHER
    device = r["policy"]["tpu-pool"] + r["policy"]["tpu0-queue"]
    # (a convolution's OpenMP team, started by the queue worker, inherits
    # its name and policy)
    assert device and all(p == os.SCHED_BATCH for p in device), r["policy"]
    assert r["stats"]["batch_threads"] >= r["stats"]["threads"]  # pool workers + a queue worker
    r = _pin_probe(TORCH_TPU_DEVICE_SCHED="normal")
    assert all(p == os.SCHED_OTHER for ps in r["policy"].values() for p in ps), r["policy"]
    assert r["stats"]["batch_threads"] == 0


def test_matrix_unit_gemms_start_no_openmp_team():
    # A team started from a tpu thread is a second libgomp team in the
    # process: libgomp then throttles every team's spinning, PyTorch CPU's
    # too (mxu.c). The unit's GEMMs run as parts over the compute pool.
    r = _pin_probe()
    if r["mxu"]["gemms"] == 0:
        import pytest
        pytest.skip("no matrix unit on this CPU: " + r["mxu"]["isa"])
    assert r["mxu"]["gemms"] >= 7
    assert r["threads_gemm"] == r["threads_before"]
