"""torch.profiler sees the tpu: the runtime's device events through PyTorch's
PrivateUse1 Kineto profiler (key_averages, chrome trace), DEFER_AND_FUSE's
flush markers, device memory events, and the memory-snapshot API.

Strict tests pin strict eager globally (the suite may run under
TORCH_TPU_DEFER_AND_FUSE=1); deferred ones enter DEFER_AND_FUSE themselves.
"""
import json
import time

import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import torch_tpu
from torch_tpu import EagerMode, _C

from conftest import TPU, run_python

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
DEFER = EagerMode.DEFER_AND_FUSE


@pytest.fixture(autouse=True)
def _strict():
    previous = torch_tpu._internal.execution_mode._global_mode
    torch_tpu.set_global_eager_mode(EagerMode.DEFER_NEVER)
    torch.tpu.synchronize()
    yield
    torch.tpu.synchronize()
    torch_tpu.set_global_eager_mode(previous)


def _inputs():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, 64, generator=g)
    b = torch.randn(64, 64, generator=g)
    return a.to(TPU), b.to(TPU)


def _program(a, b):
    c = a + b
    d = c * 2
    e = torch.mm(d, b)
    return e.relu().cpu()


def _device_events(prof):
    return sorted((e for e in prof.events() if e.device_type == DeviceType.PrivateUse1),
                  key=lambda e: e.time_range.start)


def _process_names(events):
    return {e["pid"]: e["args"]["name"] for e in events
            if e.get("ph") == "M" and e.get("name") == "process_name"}


def _trace(prof, tmp_path):
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())["traceEvents"]


def test_strict_ops_give_one_device_event_each_linked_to_their_op(tmp_path):
    a, b = _inputs()
    torch.tpu.synchronize()
    t0 = time.perf_counter()
    with profile(activities=ACTIVITIES) as prof:
        _program(a, b)
    wall_us = (time.perf_counter() - t0) * 1e6
    names = [e.name for e in _device_events(prof)]
    assert names == ["add", "mul", "mm", "relu", "memcpy D2H"]
    # Each host op carries its kernel's device time (the correlation).
    host = {e.name: e for e in prof.events() if e.device_type == DeviceType.CPU}
    for op, kernel in [("aten::add", "add"), ("aten::mul", "mul"), ("aten::mm", "mm"),
                       ("aten::relu", "relu")]:
        assert [k.name for k in host[op].kernels] == [kernel]
        assert host[op].device_time_total > 0
    # One stream, in submission order, never overlapping; all within the wall time.
    dev = _device_events(prof)
    for x, y in zip(dev, dev[1:]):
        assert x.time_range.end <= y.time_range.start
    assert sum(e.time_range.elapsed_us() for e in dev) <= wall_us
    table = prof.key_averages().table(sort_by="device_time_total")
    assert "aten::mm" in table and "TPU total" in table

    events = _trace(prof, tmp_path)
    rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
            if e.get("ph") == "M" and e.get("name") == "thread_name"}
    assert rows[(0, 0)] == "stream 0"
    assert _process_names(events)[0] == "TPU 0"
    mm = [e for e in events if e.get("cat") == "kernel" and e["name"] == "mm"]
    assert len(mm) == 1 and (mm[0]["pid"], mm[0]["tid"]) == (0, 0)
    assert mm[0]["args"]["flops"] == 2 * 64 * 64 * 64
    assert mm[0]["args"]["bytes"] == 3 * 64 * 64 * 4


def test_profiling_changes_no_result():
    a, b = _inputs()
    plain = _program(a, b)
    with profile(activities=ACTIVITIES, profile_memory=True):
        profiled = _program(a, b)
    with torch_tpu.set_eager_mode(DEFER):
        deferred = _program(a, b)
        with profile(activities=ACTIVITIES):
            deferred_profiled = _program(a, b)
    assert torch.equal(plain, profiled)
    assert torch.equal(deferred, deferred_profiled)


def test_deferred_flushes_are_markers_with_reason_and_cache_hit(tmp_path):
    a, b = _inputs()
    torch.tpu._clear_cache()  # the program cache: this recording compiles afresh
    with torch_tpu.set_eager_mode(DEFER):
        with profile(activities=ACTIVITIES) as prof:
            for _ in range(3):
                _program(a, b)
    dev = _device_events(prof)
    flushes = [e.name for e in dev if e.name.startswith("flush")]
    # The same recording three times: compiled once, then the program cache.
    assert flushes[0] == "flush copy_to_host (compiled)"
    assert flushes[-1] == "flush copy_to_host (cache hit)"
    kernels = [e.name for e in dev if not e.name.startswith("flush")]
    assert any(n.startswith("fused[") for n in kernels)
    assert all(e.time_range.elapsed_us() == 0 for e in dev if e.name.startswith("flush"))
    # Each kernel hangs on the op that recorded it (a fused group on its
    # earliest-recorded op), not on the host read that flushed the program.
    reads = [e for e in prof.events() if e.name == "aten::_copy_from"]
    assert reads and not any(k.name.startswith("fused[") for r in reads for k in r.kernels)
    charged = {k.name for e in prof.events() if e.name in ("aten::add", "aten::mul", "aten::mm")
               for k in e.kernels}
    assert any(n.startswith("fused[") for n in charged), charged
    events = _trace(prof, tmp_path)
    markers = [e for e in events if e.get("cat") == "gpu_user_annotation"]
    assert markers and markers[-1]["args"]["reason"] == "copy_to_host"
    assert markers[-1]["args"]["program"] == "cache hit"
    rows = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert "stream 0 flushes" in rows


def test_side_stream_events_run_on_their_own_row(tmp_path):
    a, b = _inputs()
    side = torch.tpu.Stream()
    torch.tpu.synchronize()
    with profile(activities=ACTIVITIES) as prof:
        x = a + b
        with torch.tpu.stream(side):
            y = a * b
        torch.tpu.synchronize()
    assert _C._profiler_drain() == []  # the session drained the recorder
    events = _trace(prof, tmp_path)
    rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
            if e.get("ph") == "M" and e.get("name") == "thread_name"}
    kernels = {e["name"]: (e["pid"], e["tid"]) for e in events if e.get("cat") == "kernel"}
    assert rows[kernels["add"]] == "stream 0"
    assert kernels["mul"][1] == side.stream_id and kernels["mul"][1] != 0
    assert rows[kernels["mul"]] == f"stream {side.stream_id}"
    assert torch.equal(x.cpu(), a.cpu() + b.cpu()) and torch.equal(y.cpu(), a.cpu() * b.cpu())


def test_recorder_counts_overflow_and_records_memory():
    a, b = _inputs()
    torch.tpu.synchronize()
    _C._profiler_start(4, True)
    try:
        for _ in range(5):
            a = a + b
        torch.tpu.synchronize()
    finally:
        _C._profiler_stop()
    stats = _C._profiler_stats()
    events = _C._profiler_drain()
    assert stats["recorded"] == 4 == len(events)
    assert stats["dropped"] > 0
    assert events[0]["kind"] == "alloc" and events[0]["bytes"] >= 64 * 64 * 4
    assert events[1]["kind"] == "kernel" and events[1]["name"] == "add"
    # Off: nothing more is recorded.
    a = a + b
    torch.tpu.synchronize()
    assert _C._profiler_drain() == []


def test_profile_memory_reports_device_allocations():
    a, b = _inputs()
    torch.tpu.synchronize()
    with profile(activities=ACTIVITIES, profile_memory=True) as prof:
        c = a + b
        del c
    add = [e for e in prof.key_averages() if e.key == "aten::add"]
    assert add and add[0].device_memory_usage == 64 * 64 * 4
    mem = [e for e in prof.events() if e.name == "[memory]"]
    assert any(e.device_memory_usage == -64 * 64 * 4 for e in mem)  # the free


def test_memory_snapshot_is_readable_by_memory_viz():
    from torch.cuda import _memory_viz

    torch.tpu.memory._record_memory_history(max_entries=1000)
    try:
        x = torch.empty(1000, device=TPU)
        y = torch.empty(300000, device=TPU)
        addr_y = y.data_ptr()
        del y
        snap = torch.tpu.memory._snapshot()
    finally:
        torch.tpu.memory._record_memory_history(None)
    trace = [e for e in snap["device_traces"][0] if not e["action"].startswith("segment")]
    assert [e["action"] for e in trace] == ["alloc", "alloc", "free_completed"]
    assert trace[0]["addr"] == x.data_ptr() and trace[0]["size"] >= 4000
    assert trace[2]["addr"] == addr_y and trace[2]["size"] == trace[1]["size"] >= 1200000
    blocks = {b["address"]: b for s in snap["segments"] for b in s["blocks"]}
    assert blocks[x.data_ptr()]["state"] == "active_allocated"
    assert blocks[x.data_ptr()]["requested_size"] == 4000
    assert blocks[addr_y]["state"] == "inactive"  # cached for reuse
    assert "total_allocated" in _memory_viz.segsum(snap)
    assert "free completed" in _memory_viz.trace(snap)
    assert "<html" in _memory_viz.trace_plot(snap).lower()
    assert "<html" in _memory_viz.segment_plot(snap).lower()
    with pytest.raises(ValueError):
        torch.tpu.memory._record_memory_history("sometimes")
    with pytest.raises(ValueError):
        torch.tpu.memory._record_memory_history(stacks="cpp")


def _layout(snap, device):
    segments = {s["address"]: s["total_size"] for s in snap["segments"] if s["device"] == device}
    blocks = {b["address"]: b["size"] for s in snap["segments"] if s["device"] == device
              for b in s["blocks"] if b["state"] == "active_allocated"}
    return segments, blocks


def _replay(snap, device=0):
    """What memory_viz does with a snapshot: start from its segments, walk the
    device trace backwards to the state when recording began, then forwards
    again. At every step the live blocks must be ones the trace or the
    segments know, each inside a live segment, and no total negative;
    forwards must end where the snapshot is. Returns the starting state."""
    segments, blocks = _layout(snap, device)
    final = (dict(segments), dict(blocks))
    trace = snap["device_traces"][device] if device < len(snap["device_traces"]) else []

    def consistent():
        assert sum(blocks.values()) >= 0 and sum(segments.values()) >= 0
        for addr, size in blocks.items():
            assert any(a <= addr and addr + size <= a + n for a, n in segments.items()), \
                f"block {addr:#x}+{size} outside every live segment"

    consistent()
    for e in reversed(trace):
        addr, size, action = e["addr"], e["size"], e["action"]
        if action == "alloc":
            assert blocks.pop(addr) == size  # KeyError: an alloc the segments never saw
        elif action == "free_completed":
            assert addr not in blocks
            blocks[addr] = size
        elif action == "segment_alloc":
            assert segments.pop(addr) == size
        elif action == "segment_free":
            assert addr not in segments
            segments[addr] = size
        consistent()
    start = (dict(segments), dict(blocks))
    for e in trace:
        addr, size, action = e["addr"], e["size"], e["action"]
        if action == "alloc":
            assert addr not in blocks
            blocks[addr] = size
        elif action == "free_completed":
            assert blocks.pop(addr) == size
        elif action == "segment_alloc":
            segments[addr] = size
        elif action == "segment_free":
            assert segments.pop(addr) == size
        consistent()
    assert (segments, blocks) == final
    return start


def test_snapshot_segments_are_the_allocator_layout_and_replay_stays_positive():
    torch.tpu.synchronize()
    torch.tpu.empty_cache()
    before = torch.empty(5000, device=TPU)        # live before recording: must appear
    dies = torch.empty(70000, device=TPU)         # allocated before, freed while recording
    addr_dies = dies.data_ptr()
    torch.tpu.memory._record_memory_history(max_entries=1000)
    try:
        big = torch.empty(6 << 20, device=TPU)    # 24 MiB: a large segment of its own
        small = [torch.empty(1000 + 100 * i, device=TPU) for i in range(4)]
        del dies, small[1]
        del big
        torch.tpu.empty_cache()                   # the 24 MiB segment goes back: segment_free
        keep = torch.empty(3 << 20, device=TPU)
        snap = torch.tpu.memory._snapshot()
        allocated = torch.tpu.memory_allocated()
        reserved = torch.tpu.memory_reserved()
    finally:
        torch.tpu.memory._record_memory_history(None)
    segs = [s for s in snap["segments"] if s["device"] == 0]
    active = [b for s in segs for b in s["blocks"] if b["state"] == "active_allocated"]
    assert sum(b["size"] for b in active) == allocated
    assert sum(s["total_size"] for s in segs) == reserved
    for s in segs:
        assert s["total_size"] == sum(b["size"] for b in s["blocks"])
        assert s["allocated_size"] == sum(b["size"] for b in s["blocks"]
                                          if b["state"] == "active_allocated")
        assert s["active_size"] >= s["allocated_size"] and s["segment_type"] in ("small", "large")
    by_addr = {b["address"]: b for b in active}
    assert by_addr[before.data_ptr()]["requested_size"] == 5000 * 4  # from before recording
    for t in [keep, *small[:1], *small[2:]]:
        assert t.data_ptr() in by_addr
    actions = [e["action"] for e in snap["device_traces"][0]]
    assert "segment_alloc" in actions and "segment_free" in actions
    start_segments, start_blocks = _replay(snap)
    # The replay reaches back to blocks allocated before recording, from the
    # segments alone: the one freed meanwhile and the one still live.
    assert addr_dies in start_blocks and before.data_ptr() in start_blocks
    from torch.cuda import _memory_viz
    assert "<html" in _memory_viz.segment_plot(snap).lower()


def _allocate_in_a_named_function():
    return torch.empty(4096, device=TPU)


def _free_in_a_named_function(t):
    del t[0]


def test_snapshot_frames_name_the_allocating_and_freeing_code():
    import os
    torch.tpu.memory._record_memory_history(stacks="python")
    try:
        held = [_allocate_in_a_named_function()]
        addr = held[0].data_ptr()
        kept = _allocate_in_a_named_function()
        _free_in_a_named_function(held)
        snap = torch.tpu.memory._snapshot()
    finally:
        torch.tpu.memory._record_memory_history(None)
    here = os.path.basename(__file__)

    def named(frames, name):
        return any(f["name"] == name and os.path.basename(f["filename"]) == here
                   and f["line"] > 0 for f in frames)

    trace = snap["device_traces"][0]
    alloc = [e for e in trace if e["action"] == "alloc" and e["addr"] == addr][0]
    free = [e for e in trace if e["action"] == "free_completed" and e["addr"] == addr][0]
    assert named(alloc["frames"], "_allocate_in_a_named_function")
    assert named(alloc["frames"], "test_snapshot_frames_name_the_allocating_and_freeing_code")
    assert named(free["frames"], "_free_in_a_named_function")
    block = [b for s in snap["segments"] for b in s["blocks"] if b["address"] == kept.data_ptr()]
    assert named(block[0]["frames"], "_allocate_in_a_named_function")
    # context=None: the history without frames.
    torch.tpu.memory._record_memory_history(context=None)
    try:
        t = _allocate_in_a_named_function()
        trace = torch.tpu.memory._snapshot()["device_traces"][0]
    finally:
        torch.tpu.memory._record_memory_history(None)
    assert [e["frames"] for e in trace if e["addr"] == t.data_ptr()] == [[]]


def test_each_chip_is_a_trace_process_with_stream_rows(tmp_path):
    path = tmp_path / "two_chips.json"
    code = f"""
import torch, torch_tpu
from torch.profiler import profile, ProfilerActivity
a0 = torch.ones(64, 64, device="tpu:0"); a1 = torch.ones(64, 64, device="tpu:1")
torch.tpu.synchronize(0); torch.tpu.synchronize(1)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
    b0 = a0 + a0
    b1 = a1 * a1
    side = torch.tpu.Stream(device="tpu:1")
    with torch.tpu.stream(side):
        c1 = a1 - a1
    torch.tpu.synchronize(0); torch.tpu.synchronize(1)
prof.export_chrome_trace({str(path)!r})
print("SIDE", side.stream_id)
"""
    run = run_python(code, timeout=300, TORCH_TPU_NUM_CHIPS="2", TORCH_TPU_MEMORY_GB="2")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    side = int(run.stdout.split("SIDE")[1].split()[0])
    events = json.loads(path.read_text())["traceEvents"]
    procs = _process_names(events)
    assert procs[0] == "TPU 0" and procs[1] == "TPU 1"
    rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
            if e.get("ph") == "M" and e.get("name") == "thread_name"}
    kernels = {e["name"]: (e["pid"], e["tid"]) for e in events if e.get("cat") == "kernel"}
    assert kernels["add"] == (0, 0) and rows[(0, 0)] == "stream 0"
    assert kernels["mul"] == (1, 0) and rows[(1, 0)] == "stream 0"
    assert kernels["sub"] == (1, side) and rows[(1, side)] == f"stream {side}"


def test_deferred_kernels_are_charged_to_the_ops_that_recorded_them(tmp_path):
    a, b = _inputs()
    with torch_tpu.set_eager_mode(DEFER):
        torch.tpu.synchronize()
        with profile(activities=ACTIVITIES) as prof:
            e = torch.mm(a, b)
            s = (e + 1).relu().sum()
            value = s.item()  # the host read flushes the program
    expected = float((torch.mm(a.cpu(), b.cpu()) + 1).relu().sum())
    assert value == pytest.approx(expected, rel=1e-4)
    mm = [x for x in prof.key_averages() if x.key == "aten::mm"]
    assert mm and mm[0].device_time_total > 0
    ops = {e.name: e for e in prof.events() if e.device_type == DeviceType.CPU}
    assert any("mm" in k.name for k in ops["aten::mm"].kernels)
    for flushing in ("aten::item", "aten::_local_scalar_dense"):
        if flushing in ops:
            assert not any("mm" in k.name for k in ops[flushing].kernels), flushing
    # A fused group is charged to its earliest-recorded op and lists the
    # other ops that recorded its nodes (their ids are host ops' ids).
    events = _trace(prof, tmp_path)
    host_ops = {e["args"]["External id"]: e["name"] for e in events
                if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    fused = [e for e in events if e.get("cat") == "kernel" and e["name"].startswith("fused[")]
    assert fused and any(e["args"]["other_ops"] for e in fused), fused
    for e in fused:
        own = e["args"]["External id"]
        assert own in host_ops and all(o in host_ops and o > own for o in e["args"]["other_ops"])
        names = [host_ops[own]] + [host_ops[o] for o in e["args"]["other_ops"]]
        assert len(set(e["args"]["other_ops"])) == len(e["args"]["other_ops"]), names


def test_profile_gpt_example_shows_both_modes(tmp_path):
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run(
        [sys.executable, os.path.join(root, "examples", "profile_gpt.py"), "--steps", "1",
         "--warmup", "1", "--layers", "1", "--dim", "32", "--seq", "16", "--batch", "2",
         "--trace-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=root)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    assert "==== DEFER_NEVER" in out and "==== DEFER_AND_FUSE" in out, out
    assert out.count("TPU total") == 2 and "fused[" in out and "flush copy_to_host (" in out, out
    assert (tmp_path / "gpt_defer_never.json").stat().st_size > 0
    assert (tmp_path / "gpt_defer_and_fuse.json").stat().st_size > 0


def test_published_profiler_names_record_the_device():
    from torch_tpu._internal import profiler as published

    assert published.ProfilerActivity.TPU == ProfilerActivity.PrivateUse1
    a, b = _inputs()
    with published.profile() as prof:
        (a + b).cpu()
    assert [e.name for e in _device_events(prof)] == ["add", "memcpy D2H"]


def test_xprof_trace_handler_writes_a_trace_with_device_rows(tmp_path):
    a, b = _inputs()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                                on_trace_ready=torch.profiler.xprof_trace_handler(str(tmp_path))):
        (a + b).cpu()
    traces = list(tmp_path.glob("*.pt.trace.json"))
    assert len(traces) == 1
    text = traces[0].read_text()
    assert '"TPU 0"' in text and '"stream 0"' in text and '"add"' in text


def test_trace_svg_draws_host_and_device_rows():
    from torch_tpu.tools import trace_svg
    trace = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "host"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "stream 0"}},
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "TPU 0"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 0.0, "dur": 10.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0},
        {"ph": "X", "cat": "kernel", "name": "add", "pid": 0, "tid": 0, "ts": 5.0, "dur": 20.0},
    ]
    svg = trace_svg.render(trace, "t")
    assert svg.count("<rect") == 4  # background + 2 host ops + 1 kernel
    assert ">host<" in svg and ">TPU 0 stream 0<" in svg and "<title>add 20.0 us</title>" in svg
    # the nested op is drawn inside its parent (inset), the kernel on the device row below
    assert 'y="35"' in svg and 'y="58"' in svg
