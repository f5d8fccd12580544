"""Streams and events: torch.tpu.Stream, the stream context, current and
default streams, cross-stream ordering (wait_stream / wait_event), events
(query, synchronize, elapsed_time), record_stream, torch.accelerator.

Ordering tests queue a long chain of dependent work on one stream and read
its result on another: without the dependency the reader would see
unfinished data, so a broken wait makes them fail (not only in theory: the
chains are long enough that the reader overtakes them)."""
import pytest
import torch

from conftest import TPU0, assert_same, make


def long_chain(x, n=30):
    """n dependent ops on the current stream (a few ms of queued work)."""
    y = x
    for _ in range(n):
        y = torch.tanh(y @ x) * 0.5 + 0.25
    return y


def long_chain_cpu(x, n=30):
    return long_chain(x, n)


def test_stream_objects():
    s = torch.tpu.Stream()
    assert isinstance(s, torch.Stream)
    assert s.device == TPU0
    d = torch.tpu.default_stream()
    assert d.device.type == "tpu"
    assert s != d
    assert torch.tpu.current_stream() == d
    assert torch.accelerator.current_stream() == d
    s2 = torch.tpu.Stream()
    assert s2 != s  # streams from the pool are distinct
    assert torch.tpu.Stream(priority=-1).device.type == "tpu"
    g = torch.Stream(device="tpu:0")
    assert g.device == TPU0 and g != d


def test_generic_stream_without_index_uses_current_device():
    g = torch.Stream(device="tpu")
    assert g.device == TPU0 and g != torch.tpu.default_stream()
    x = make((8, 8), seed=20)
    with g:
        y = x.to("tpu") + 1
    g.synchronize()
    assert_same(y, x + 1, exact=True)


def test_stream_context_sets_and_restores():
    s = torch.tpu.Stream()
    d = torch.tpu.default_stream()
    with torch.tpu.stream(s):
        assert torch.tpu.current_stream() == s
        assert torch.accelerator.current_stream() == s
        s2 = torch.tpu.Stream()
        with torch.tpu.stream(s2):
            assert torch.tpu.current_stream() == s2
        assert torch.tpu.current_stream() == s
    assert torch.tpu.current_stream() == d
    with torch.tpu.stream(None):
        assert torch.tpu.current_stream() == d
    # the context restores on exceptions too
    with pytest.raises(KeyError):
        with torch.tpu.stream(s):
            raise KeyError("x")
    assert torch.tpu.current_stream() == d
    # torch.Stream is itself a context manager
    with s:
        assert torch.tpu.current_stream() == s
    assert torch.tpu.current_stream() == d


def test_set_stream():
    s = torch.tpu.Stream()
    torch.tpu.set_stream(s)
    try:
        assert torch.tpu.current_stream() == s
        x = make((16, 16), seed=1)
        y = x.to("tpu") * 2
        s.synchronize()
        assert_same(y, x * 2, exact=True)
    finally:
        torch.tpu.set_stream(torch.tpu.default_stream())
    torch.accelerator.set_stream(s)
    assert torch.tpu.current_stream() == s
    torch.accelerator.set_stream(torch.tpu.default_stream())


def test_work_on_side_stream_then_wait_stream():
    x = make((96, 96), seed=2) / 10
    expected = long_chain_cpu(x)
    xt = x.to("tpu")
    s = torch.tpu.Stream()
    s.wait_stream(torch.tpu.current_stream())  # xt is ready on s
    with torch.tpu.stream(s):
        y = long_chain(xt)
    torch.tpu.current_stream().wait_stream(s)
    z = y + 1  # queued on the default stream, after the side stream's work
    assert_same(z, expected + 1, atol=1e-5, rtol=1e-5)


def test_wait_event():
    x = make((96, 96), seed=3) / 10
    expected = long_chain_cpu(x)
    xt = x.to("tpu")
    s = torch.tpu.Stream()
    ev = torch.tpu.Event()
    with torch.tpu.stream(s):
        torch.tpu.current_stream().wait_stream(torch.tpu.default_stream())
        y = long_chain(xt)
        ev.record(s)
    torch.tpu.current_stream().wait_event(ev)
    out = torch.empty_like(xt)
    out.copy_(y)
    assert_same(out, expected, atol=1e-5, rtol=1e-5)
    # Stream.record_event / wait_event of the generic API
    with torch.tpu.stream(s):
        y2 = long_chain(xt, 10)
    e2 = s.record_event()
    torch.tpu.current_stream().wait_event(e2)
    assert_same(y2 * 1, long_chain_cpu(x, 10), atol=1e-5, rtol=1e-5)


def test_event_query_and_synchronize():
    x = make((96, 96), seed=4) / 10
    ev = torch.tpu.Event()
    assert ev.query()  # never recorded: complete
    xt = x.to("tpu")
    y = long_chain(xt)
    ev.record()
    ev.synchronize()
    assert ev.query()
    # y is computed by now: a device-to-host copy on another stream sees it
    s = torch.tpu.Stream()
    with torch.tpu.stream(s):
        got = y.cpu()
    torch.testing.assert_close(got, long_chain_cpu(x), atol=1e-5, rtol=1e-5)
    torch.tpu.synchronize()
    assert torch.tpu.current_stream().query()
    assert s.query()


@pytest.mark.parametrize("kind", ["torch.tpu.Event", "torch.Event"])
def test_event_elapsed_time(kind):
    if kind == "torch.tpu.Event":
        start = torch.tpu.Event(enable_timing=True)
        end = torch.tpu.Event(enable_timing=True)
    else:
        start = torch.Event(device="tpu", enable_timing=True)
        end = torch.Event(device="tpu", enable_timing=True)
    x = make((128, 128), seed=5) / 10
    xt = x.to("tpu")
    start.record()
    y = long_chain(xt, 10)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert isinstance(ms, float) and ms >= 0.0
    assert_same(y, long_chain_cpu(x, 10), atol=1e-5, rtol=1e-5)


def test_elapsed_time_requires_timing_events():
    """As for every torch.Event: ValueError for events without timing or
    never recorded."""
    a, b = torch.Event(device="tpu"), torch.Event(device="tpu")
    a.record()
    b.record()
    b.synchronize()
    with pytest.raises(ValueError, match="enable_timing"):
        a.elapsed_time(b)
    c = torch.Event(device="tpu", enable_timing=True)
    d = torch.Event(device="tpu", enable_timing=True)
    with pytest.raises(ValueError, match="recorded"):
        c.elapsed_time(d)


def test_record_stream_keeps_memory_until_side_work_is_done():
    """A tensor freed on the default stream while a side stream still reads
    it must not be handed out again before the side stream is done."""
    x = make((128, 128), seed=6) / 10
    expected = long_chain_cpu(x, 20)
    s = torch.tpu.Stream()
    src = x.to("tpu")
    torch.tpu.synchronize()
    with torch.tpu.stream(s):
        y = long_chain(src, 20)
    src.record_stream(s)
    del src
    # new allocations of the same size on the default stream, overwritten at once
    junk = [torch.full((128, 128), 1e6, device="tpu") for _ in range(4)]
    torch.tpu.current_stream().wait_stream(s)
    assert_same(y, expected, atol=1e-5, rtol=1e-5)
    del junk


def test_stream_synchronize_and_accelerator_synchronize():
    x = make((96, 96), seed=7) / 10
    s = torch.tpu.Stream()
    with torch.tpu.stream(s):
        torch.tpu.current_stream().wait_stream(torch.tpu.default_stream())
        xt = x.to("tpu")
        y = long_chain(xt, 10)
    s.synchronize()
    assert s.query()
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(0)
    torch.tpu.synchronize()
    assert_same(y, long_chain_cpu(x, 10), atol=1e-5, rtol=1e-5)


def test_independent_streams_compute_correctly():
    xs = [make((64, 64), seed=10 + i) / 10 for i in range(4)]
    streams = [torch.tpu.Stream() for _ in xs]
    outs = []
    for x, s in zip(xs, streams):
        with torch.tpu.stream(s):
            torch.tpu.current_stream().wait_stream(torch.tpu.default_stream())
            outs.append(long_chain(x.to("tpu"), 8))
    for s in streams:
        torch.tpu.current_stream().wait_stream(s)
    for o, x in zip(outs, xs):
        assert_same(o, long_chain_cpu(x, 8), atol=1e-5, rtol=1e-5)


def test_default_stream_per_device_argument():
    assert torch.tpu.default_stream(0) == torch.tpu.default_stream("tpu:0") \
        == torch.tpu.default_stream()
    assert torch.tpu.current_stream(0) == torch.tpu.current_stream()
