"""Which thread runs a stream's commands (the host driver's queue policy,
runtime/src/hal/host_driver.c): a loop with a host read every step stays in
one regime from its first steps (issue 30: it used to flip between running
its work on the submitting thread and waking the sleeping worker for each
command, after hundreds of steps, on a race between the host's think time
and the worker's poll). torch_tpu.queue_stats() counts each path."""
import pytest
import torch

import torch_tpu

WARM, STEPS = 20, 300


def _decode_step(q, kc, vc):
    kc2 = torch.cat([kc, q], 2)
    vc2 = torch.cat([vc, q], 2)
    a = torch.softmax(q @ kc2.transpose(-1, -2) / 8.0, -1) @ vc2
    return (torch.tanh(a) * 0.9).sum()


def _inputs(device):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 8, 1, 64, generator=g)
    kc = torch.randn(1, 8, 16, 64, generator=g)
    return q.to(device), kc.to(device), kc.clone().to(device)


def _delta(before, after):
    return {k: after[k] - before[k] for k in after}


def _run(steps, *args):
    return [_decode_step(*args).item() for _ in range(steps)]


@pytest.mark.parametrize("mode", ["strict", "defer"])
def test_a_host_read_loop_never_wakes_the_worker(mode):
    want = _run(1, *_inputs("cpu"))[0]
    mode_ = (torch_tpu.EagerMode.DEFER_AND_FUSE if mode == "defer"
             else torch_tpu.EagerMode.DEFER_NEVER)
    args = _inputs("tpu")
    with torch_tpu.eager_mode(mode_):
        _run(WARM, *args)
        torch.tpu.synchronize()
        before = torch_tpu.queue_stats()
        got = _run(STEPS, *args)
        after = torch_tpu.queue_stats()
    d = _delta(before, after)
    assert got[0] == pytest.approx(want, rel=1e-4, abs=1e-4)
    assert len(set(got)) == 1  # the same step every time
    # Every command ran on this thread: no hand-off, no wake-up, no sleep.
    assert d["queued_commands"] == 0, d
    assert d["worker_wakeups"] == 0, d
    assert d["sync_sleeps"] == 0, d
    assert d["syncs"] == STEPS, d
    if mode == "defer":  # one program and the scalar's copy per step
        assert d["inline_commands"] == 2 * STEPS, d
    else:                # nine kernels (sum included) and the copy
        assert d["inline_commands"] >= 9 * STEPS, d


STRICT = torch_tpu.EagerMode.DEFER_NEVER


def test_large_work_is_handed_to_the_worker():
    """Strict eager stays asynchronous for work worth a hand-off."""
    x = torch.randn(1 << 20, device="tpu")
    torch.tpu.synchronize()
    with torch_tpu.eager_mode(STRICT):
        before = torch_tpu.queue_stats()
        for _ in range(4):
            x = x * 1.0001
        y = x.sum()
        after = torch_tpu.queue_stats()
    torch.tpu.synchronize()
    d = _delta(before, after)
    assert d["queued_commands"] >= 4, d
    torch.testing.assert_close(y.cpu(), x.cpu().sum(), rtol=1e-5, atol=1e-3)


def test_a_host_read_runs_its_deferred_program_inline_whatever_its_size():
    """A flush the host waits for at once runs on the host thread (the
    queue is idle); the same program flushed without a host read is queued."""
    x = torch.randn(1 << 20, device="tpu")
    torch.tpu.synchronize()
    with torch_tpu.eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        before = torch_tpu.queue_stats()
        s = (torch.tanh(x * 1.5) + 0.25).sum().item()
        read = _delta(before, torch_tpu.queue_stats())
        before = torch_tpu.queue_stats()
        y = torch.tanh(x * 1.5) + 0.25
        torch_tpu.flush()
        queued = _delta(before, torch_tpu.queue_stats())
    torch.tpu.synchronize()
    assert read["queued_commands"] == 0 and read["inline_commands"] == 2, read
    assert queued["queued_commands"] == 1, queued
    want = (torch.tanh(x.cpu() * 1.5) + 0.25)
    assert s == pytest.approx(want.sum().item(), rel=1e-4)
    torch.testing.assert_close(y.cpu(), want)


def test_an_inline_error_surfaces_at_the_next_synchronisation_and_names_the_op():
    """A command run by the submitting thread reports its error like a
    queued one: at the next synchronisation, naming the op."""
    table = torch.randn(10, 4, device="tpu")
    bad = torch.tensor([3, 12], device="tpu")
    torch.tpu.synchronize()
    with torch_tpu.eager_mode(STRICT):
        before = torch_tpu.queue_stats()
        out = torch.index_select(table, 0, bad)  # small: runs inline, fails
        assert _delta(before, torch_tpu.queue_stats())["inline_commands"] >= 1
    with pytest.raises(IndexError, match="index_select"):
        torch.tpu.synchronize()
    del out
    torch.tpu.synchronize()  # the queue recovered


def test_queue_stats_takes_a_device():
    a = torch_tpu.queue_stats()
    assert set(a) == {"inline_commands", "queued_commands", "worker_wakeups", "syncs",
                      "sync_sleeps"}
    assert torch_tpu.queue_stats("tpu:0").keys() == a.keys()
    assert torch_tpu.queue_stats(torch.device("tpu", 0)).keys() == a.keys()
    with pytest.raises(ValueError):
        torch_tpu.queue_stats("cpu")
