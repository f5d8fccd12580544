"""Device memory: allocation statistics, peaks, the caching allocator's
reserved memory and empty_cache, memory_stats keys, mem_get_info, and
out-of-memory behaviour (in a child process with a 1 GiB chip)."""
import gc

import pytest
import torch
import torch_tpu

from conftest import assert_same, check_result, make, run_checks

MiB = 1 << 20


def settle():
    gc.collect()
    torch.tpu.synchronize()


def test_memory_allocated_returns_to_baseline_after_del():
    settle()
    base = torch.tpu.memory_allocated()
    x = torch.empty(MiB, device="tpu")  # 4 MiB
    assert torch.tpu.memory_allocated() - base == 4 * MiB
    y = x.fill_(2.0) * 3
    assert torch.tpu.memory_allocated() - base == 8 * MiB
    assert_same(y, torch.full((MiB,), 6.0), exact=True)
    del x, y
    assert torch.tpu.memory_allocated() == base
    # intermediates of a chain of ops are freed too
    a, b = make((64, 32), seed=1), make((32, 48), seed=2)
    out = torch.softmax(a.to("tpu") @ b.to("tpu") + 1, -1).sum(0)
    assert_same(out, torch.softmax(a @ b + 1, -1).sum(0), atol=1e-5, rtol=1e-5)
    del out
    settle()
    assert torch.tpu.memory_allocated() == base


def test_allocation_sizes_round_to_512_bytes():
    settle()
    base = torch.tpu.memory_allocated()
    t = torch.empty(1, dtype=torch.uint8, device="tpu")
    assert torch.tpu.memory_allocated() - base == 512
    u = torch.empty(513, dtype=torch.uint8, device="tpu")
    assert torch.tpu.memory_allocated() - base == 512 + 1024
    e = torch.empty(0, device="tpu")
    assert torch.tpu.memory_allocated() - base == 512 + 1024
    del t, u, e
    assert torch.tpu.memory_allocated() == base


def test_peak_and_reset_peak():
    settle()
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    assert torch.tpu.max_memory_allocated() == base
    big = torch.ones(2 * MiB, device="tpu")  # 8 MiB
    small = big[:10].sum()
    assert small.item() == 10.0
    del big, small
    assert torch.tpu.memory_allocated() == base
    assert torch.tpu.max_memory_allocated() >= base + 8 * MiB
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated() == base
    assert torch.tpu.max_memory_reserved() == torch.tpu.memory_reserved()


def test_reserved_cache_reuse_and_empty_cache():
    settle()
    torch.tpu.empty_cache()
    r0 = torch.tpu.memory_reserved()
    assert r0 >= torch.tpu.memory_allocated()
    x = torch.empty(30 * MiB // 4, device="tpu")  # 30 MiB: a large-pool segment
    r1 = torch.tpu.memory_reserved()
    assert r1 >= r0 + 30 * MiB
    del x
    assert torch.tpu.memory_reserved() == r1  # cached, not returned
    y = torch.empty(30 * MiB // 4, device="tpu")  # served from the cache
    assert torch.tpu.memory_reserved() == r1
    del y
    free_before, total = torch.tpu.mem_get_info()
    torch.tpu.empty_cache()
    r2 = torch.tpu.memory_reserved()
    assert r2 <= r1 - 30 * MiB
    assert r2 >= torch.tpu.memory_allocated()
    free_after, total2 = torch.tpu.mem_get_info()
    assert total2 == total
    assert free_after == total - r2
    assert free_after >= free_before + 30 * MiB
    torch.accelerator.empty_cache()


def test_memory_stats_keys_and_consistency():
    settle()
    keep = torch.empty(3 * MiB, device="tpu")
    keep_small = torch.empty(100, device="tpu")
    stats = torch.tpu.memory_stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak",
                "allocated_bytes.all.allocated", "allocated_bytes.all.freed",
                "allocated_bytes.small_pool.current", "allocated_bytes.large_pool.current",
                "reserved_bytes.all.current", "active_bytes.all.current",
                "allocation.all.current", "segment.all.current", "num_ooms",
                "num_alloc_retries", "requested_bytes.all.current",
                "inactive_split_bytes.all.current"):
        assert key in stats, key
    assert stats["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    assert stats["reserved_bytes.all.current"] == torch.tpu.memory_reserved()
    assert stats["allocated_bytes.all.peak"] == torch.tpu.max_memory_allocated()
    assert stats["allocated_bytes.all.current"] == (stats["allocated_bytes.small_pool.current"]
                                                    + stats["allocated_bytes.large_pool.current"])
    assert stats["allocated_bytes.large_pool.current"] >= 12 * MiB
    assert stats["allocated_bytes.small_pool.current"] >= 512
    assert stats["active_bytes.all.current"] >= stats["allocated_bytes.all.current"]
    assert stats["requested_bytes.all.current"] <= stats["allocated_bytes.all.current"]
    assert stats["allocation.all.current"] >= 2
    # torch.accelerator's are the allocator's statistics; torch.tpu's add the
    # matrix unit's weight cache (host memory, shared by every chip).
    cache = {k: v for k, v in stats.items() if k.startswith("weight_cache.")}
    assert {k[len("weight_cache."):] for k in cache} == set(torch_tpu.weight_cache_stats())
    allocator = {k: v for k, v in stats.items() if k not in cache}
    assert allocator == dict(torch.accelerator.memory_stats(0))
    del keep, keep_small


def test_reset_accumulated_memory_stats():
    settle()
    torch.tpu.reset_accumulated_memory_stats()
    stats = torch.tpu.memory_stats()
    assert stats["allocation.all.allocated"] == 0 and stats["allocation.all.freed"] == 0
    # Strict eager counts an allocation at once (DEFER_AND_FUSE counts one
    # freed before anything wrote it never: see test_defer.py).
    with torch_tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_NEVER):
        t = torch.empty(1000, device="tpu")
        del t
    stats = torch.tpu.memory_stats()
    assert stats["allocation.all.allocated"] == 1
    assert stats["allocation.all.freed"] == 1
    assert stats["allocated_bytes.all.allocated"] == 4096


def test_device_arguments_agree():
    settle()
    t = torch.empty(MiB, device="tpu")
    a = torch.tpu.memory_allocated()
    assert a == torch.tpu.memory_allocated(0) == torch.tpu.memory_allocated("tpu:0") \
        == torch.tpu.memory_allocated(torch.device("tpu:0")) == torch.accelerator.memory_allocated()
    assert torch.tpu.memory_reserved(0) == torch.accelerator.memory_reserved(0)
    assert torch.tpu.mem_get_info(0) == torch.accelerator.get_memory_info(0)
    del t


def test_allocation_churn_keeps_data_correct():
    """Many allocations and frees of mixed sizes (block splitting, merging,
    reuse) never corrupt live tensors."""
    settle()
    base = torch.tpu.memory_allocated()
    live, ref = [], []
    for i in range(60):
        n = [7, 300, 5000, 70000, 300000, 600000][i % 6] + i
        x = make((n,), seed=i)
        live.append(x.to("tpu") * 2)
        ref.append(x * 2)
        if i % 3 == 2:
            live.pop(i % len(live))
            ref.pop(i % len(ref))
    for t, r in zip(live, ref):
        assert_same(t, r, exact=True)
    del live, t
    settle()
    assert torch.tpu.memory_allocated() == base


def test_total_memory_is_the_configured_capacity():
    import os
    gb = float(os.environ.get("TORCH_TPU_MEMORY_GB", "16"))
    free, total = torch.tpu.mem_get_info()
    assert total == int(gb * (1 << 30))
    assert free == total - torch.tpu.memory_reserved()


# ---- out of memory (child process, 1 GiB chip) -------------------------------------------

OOM = r'''
MiB = 1 << 20
keep = torch.arange(MiB, dtype=torch.float32, device="tpu")  # 4 MiB that must survive

@check
def capacity_is_1gib():
    free, total = torch.tpu.mem_get_info()
    assert total == 1 << 30, total

@check
def allocation_over_capacity_raises_oom():
    try:
        torch.empty(2 << 30, dtype=torch.uint8, device="tpu")
    except torch.OutOfMemoryError as e:
        msg = str(e)
        assert isinstance(e, RuntimeError)
        assert "out of memory" in msg.lower(), msg
        assert "2048.00 MiB" in msg, msg          # what was asked for
        assert "tpu:0" in msg, msg                # where
        assert "1.00 GiB" in msg, msg             # the capacity
        assert "TORCH_TPU_MEMORY_GB" in msg, msg  # how to change it
    else:
        raise AssertionError("no OutOfMemoryError")
    assert torch.tpu.memory_stats()["num_ooms"] >= 1

@check
def op_output_over_capacity_raises_oom():
    a = torch.ones(150 * MiB, dtype=torch.float32, device="tpu")  # 600 MiB
    try:
        b = a + 1                                                # another 600 MiB
        torch.tpu.synchronize()
    except torch.OutOfMemoryError:
        pass
    else:
        raise AssertionError("no OutOfMemoryError for an op output")
    del a

@check
def tpu_keeps_working_after_oom():
    torch.tpu.empty_cache()
    big = torch.empty(900 * MiB, dtype=torch.uint8, device="tpu")  # fits once freed
    big.fill_(7)
    assert big[-1].item() == 7 and big[0].item() == 7
    del big
    x = torch.randn(64, 64)
    assert_close((x.tpu() @ x.tpu()).cpu(), x @ x, atol=1e-4, rtol=1e-4)

@check
def earlier_tensor_intact():
    assert_close(keep.cpu(), torch.arange(MiB, dtype=torch.float32), rtol=0, atol=0)

@check
def allocated_back_to_baseline():
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() == 4 * MiB, torch.tpu.memory_allocated()
'''

OOM_CHECKS = ["capacity_is_1gib", "allocation_over_capacity_raises_oom",
              "op_output_over_capacity_raises_oom", "tpu_keeps_working_after_oom",
              "earlier_tensor_intact", "allocated_back_to_baseline"]


@pytest.fixture(scope="module")
def oom_results():
    return run_checks(OOM, TORCH_TPU_MEMORY_GB="1")


@pytest.mark.parametrize("name", OOM_CHECKS)
def test_out_of_memory(oom_results, name):
    check_result(oom_results, name)
