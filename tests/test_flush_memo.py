"""DEFER_AND_FUSE's flush memo (runtime/src/hal/flush_memo.c): a stream that
flushes the same recording again (same ops, attributes, scalars, shapes and
aliasing, wherever the allocator put the tensors) reuses the node order,
program and memory estimate of the last time instead of running the fusion
compiler's front end; anything else is compiled as before. Counted by
defer_metrics()["flush_repeats"] (those found by the raw signature, the
addresses as they are, by "flush_repeats_raw"). The test command's DEFER_AND_FUSE pass also
checks every repeat against the full front end (TORCH_TPU_DEFER_MEMO_CHECK=1)."""
import pytest
import torch

import torch_tpu

DEFER = torch_tpu.EagerMode.DEFER_AND_FUSE


def _metrics():
    return torch_tpu.defer_metrics()


def _decode_step(q, kc, vc):
    kc2 = torch.cat([kc, q], 2)
    vc2 = torch.cat([vc, q], 2)
    a = torch.softmax(q @ kc2.transpose(-1, -2) / 8.0, -1) @ vc2
    return (torch.tanh(a) * 0.9).sum()


def test_a_repeated_step_skips_the_front_end_and_computes_the_same():
    g = torch.Generator().manual_seed(0)
    q, kc = torch.randn(1, 8, 1, 64, generator=g), torch.randn(1, 8, 16, 64, generator=g)
    want = _decode_step(q, kc, kc.clone()).item()
    args = (q.to("tpu"), kc.to("tpu"), kc.clone().to("tpu"))
    with torch_tpu.eager_mode(DEFER):
        before = _metrics()
        got = [_decode_step(*args).item() for _ in range(60)]
        after = _metrics()
    flushes = after["flushes"] - before["flushes"]
    repeats = after["flush_repeats"] - before["flush_repeats"]
    # The allocator places the step's tensors in a few patterns in turn (six
    # here); each pattern is compiled once, every later step repeats.
    assert flushes == 60 and repeats >= 60 - 8, (flushes, repeats)
    assert after["programs_compiled"] - before["programs_compiled"] <= 1
    assert got == pytest.approx([want] * 60, rel=1e-5, abs=1e-5)


def test_the_decode_loop_settles_on_raw_repeats():
    """Issue 30's loop comes back to the same few placements: once each was
    seen, every flush is found by its raw signature (defer_metrics()
    ["flush_repeats_raw"]), the addresses not made canonical, and the
    results stay strict eager's."""
    g = torch.Generator().manual_seed(1)
    q, kc = torch.randn(1, 8, 1, 64, generator=g), torch.randn(1, 8, 16, 64, generator=g)
    want = _decode_step(q, kc, kc.clone()).item()
    args = (q.to("tpu"), kc.to("tpu"), kc.clone().to("tpu"))
    with torch_tpu.eager_mode(DEFER):
        for _ in range(40):
            _decode_step(*args).item()
        before = _metrics()
        got = [_decode_step(*args).item() for _ in range(100)]
        after = _metrics()
    flushes = after["flushes"] - before["flushes"]
    raw = after["flush_repeats_raw"] - before["flush_repeats_raw"]
    assert flushes == 100 and raw == 100, (flushes, raw)
    assert after["flush_repeats"] - before["flush_repeats"] == 100
    assert got == pytest.approx([want] * 100, rel=1e-5, abs=1e-5)


def test_a_new_scalar_is_no_repeat_and_is_used():
    x = torch.randn(256)
    xt = x.to("tpu")
    with torch_tpu.eager_mode(DEFER):
        before = _metrics()
        got = [(xt * s + 1.0).sum().item() for s in (0.5, 1.5, 2.5, 3.5)]
        after = _metrics()
    assert after["flush_repeats"] == before["flush_repeats"]
    for s, g in zip((0.5, 1.5, 2.5, 3.5), got):
        assert g == pytest.approx((x * s + 1.0).sum().item(), rel=1e-5)


def test_an_alias_the_last_recording_lacked_is_no_repeat():
    """The same ops writing into a separate tensor, then into their own
    input: the second is another program (the write aliases a read), and
    each result is strict eager's."""
    base = torch.randn(1024)
    a = base.to("tpu")
    out = torch.empty(1024, device="tpu")
    with torch_tpu.eager_mode(DEFER):
        for _ in range(3):  # the separate-output form becomes a repeat
            torch.mul(a, 2.0, out=out).add_(1.0)
            out.sum().item()
        before = _metrics()
        torch.mul(a, 2.0, out=a).add_(1.0)  # now in place: another alias pattern
        got = a.sum().item()
        after = _metrics()
    assert after["flush_repeats"] == before["flush_repeats"]
    torch.testing.assert_close(a.cpu(), base * 2.0 + 1.0)
    assert got == pytest.approx((base * 2.0 + 1.0).sum().item(), rel=1e-5)
    torch.testing.assert_close(out.cpu(), base * 2.0 + 1.0)


def test_a_repeat_keeps_the_recorded_memory_accounting():
    """The memory estimate of a repeat is the compiled one: peaks agree with
    a flush that ran the front end."""
    x = torch.randn(64, 1024, device="tpu")
    torch.tpu.synchronize()

    def step():
        y = torch.relu(x * 2.0) + 1.0
        return (y * y).sum().item()

    with torch_tpu.eager_mode(DEFER):
        step()
        torch.tpu.reset_peak_memory_stats()
        first = step()
        peak_first = torch.tpu.max_memory_allocated()
        torch.tpu.reset_peak_memory_stats()
        before = _metrics()
        again = step()
        peak_again = torch.tpu.max_memory_allocated()
        after = _metrics()
    assert after["flush_repeats"] - before["flush_repeats"] == 1
    assert again == first
    assert peak_again == peak_first


def test_a_near_miss_is_no_repeat_and_is_used():
    """The same ops on a view that differs from the repeated one only in its
    strides (a transpose of a square matrix), then only in its dtype: each
    is compiled (no repeat) and computes its own result."""
    base = torch.randn(16, 16)
    m = base.to("tpu")
    m64 = base.double().to("tpu")

    def step(v):
        return (v * 2.0 + 1.0).sum(0)

    with torch_tpu.eager_mode(DEFER):
        for _ in range(8):  # the plain form becomes a repeat
            step(m).cpu()
        before = _metrics()
        plain = [step(m).cpu() for _ in range(4)][-1]
        middle = _metrics()
        transposed = step(m.t()).cpu()
        wide = step(m64.t()).cpu()
        after = _metrics()
    assert middle["flush_repeats"] - before["flush_repeats"] >= 1  # the memo is at work
    assert after["flush_repeats"] == middle["flush_repeats"]
    torch.testing.assert_close(plain, (base * 2.0 + 1.0).sum(0))
    torch.testing.assert_close(transposed, (base.t() * 2.0 + 1.0).sum(0))
    torch.testing.assert_close(wide, (base.double().t() * 2.0 + 1.0).sum(0))


def test_kept_node_plans_serve_only_their_own_recording():
    """A memo entry keeps its elementwise nodes' plans (the kernel's dtypes,
    tile function and parameters: runtime/src/fusion/node_plans.c) and a
    repeat runs with them. Steps that differ only in div's rounding mode,
    in the operands' dtype or in a 0-dim operand are other recordings: each
    computes its own result, however often they alternate (a floor plan
    reused for a true division would floor). With
    TORCH_TPU_DEFER_MEMO_CHECK=1 every repeat's plans are also checked
    against plans made afresh."""
    x = torch.tensor([7.0, -7.0, 5.0, -5.0, 9.0, 1.0, -1.0, 3.0] * 32)
    y = torch.tensor([2.0, 2.0, 3.0, 3.0, 4.0, 2.0, 2.0, 2.0] * 32)
    pairs = {"f32": (x, y), "i32": (x.int(), y.int()), "f64": (x.double(), y.double())}
    dev = {k: (a.to("tpu"), b.to("tpu")) for k, (a, b) in pairs.items()}
    zero_dim = torch.tensor(2.0, dtype=torch.float64)
    zero_dim_t = zero_dim.to("tpu")

    def step(a, b, mode, z):
        return ((torch.div(a, b, rounding_mode=mode) * z) + 1).cpu()

    # Per dtype, six recordings in turn, three rounds: fewer than the memo's
    # entries, so from the second round on each step repeats one stored
    # before the other five (its plans must be its own, not the last made).
    cases = [(k, mode, z) for k in pairs for _ in range(3) for mode in (None, "floor", "trunc")
             for z in (3, "0d")]
    with torch_tpu.eager_mode(DEFER):
        before = _metrics()
        for k, mode, z in cases:
            for _ in range(2):
                a, b = dev[k]
                got = step(a, b, mode, zero_dim_t if z == "0d" else z)
                want = step(*pairs[k], mode, zero_dim if z == "0d" else z)
                assert got.dtype == want.dtype, (k, mode, z)
                torch.testing.assert_close(got, want, rtol=0, atol=0, msg=str((k, mode, z)))
        after = _metrics()
    repeats = after["flush_repeats"] - before["flush_repeats"]
    assert repeats >= len(cases) * 2 - 3 * 6 * 2, repeats  # all but each dtype's first round
