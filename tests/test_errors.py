"""Bad input raises on tpu what it raises on the CPU (same exception type),
device errors raise RuntimeError (as on CUDA), and asynchronous errors
surface at the next synchronisation, naming the op, after which the device
keeps working."""
import contextlib

import pytest
import torch
import torch.nn.functional as F

from conftest import TPU0, assert_same, assert_same_error, check, make, sync, sync_clean


def on_both(fn, *args):
    """(cpu thunk, tpu thunk) of fn over args (tpu: copies of the tensors)."""
    from conftest import to_tpu
    t_args = to_tpu(args)
    return (lambda: fn(*args)), (lambda: fn(*t_args))


SAME_ERROR_CASES = {
    "add_shape_mismatch": (lambda a, b: a + b, (make((2, 3)), make((4,)))),
    "mul_shape_mismatch": (torch.mul, (make((2, 3)), make((3, 2)))),
    "mm_shape_mismatch": (torch.mm, (make((2, 3)), make((4, 5)))),
    "mm_dtype_mismatch": (torch.mm, (make((2, 3)), make((3, 2), torch.float64))),
    "mm_1d": (torch.mm, (make((3,)), make((3, 2)))),
    "bmm_batch_mismatch": (torch.bmm, (make((2, 3, 4)), make((3, 4, 5)))),
    "matmul_vec_mismatch": (torch.matmul, (make((3,)), make((4,)))),
    "linear_mismatch": (F.linear, (make((2, 3)), make((4, 5)))),
    "cat_shape_mismatch": (lambda a, b: torch.cat([a, b]), (make((2, 3)), make((2, 4)))),
    "cat_dim_out_of_range": (lambda a: torch.cat([a, a], 3), (make((2, 3)),)),
    "index_select_float_index": (lambda a, i: a.index_select(0, i),
                                 (make((3,)), torch.tensor([0.0]))),
    "index_select_bad_dim": (lambda a, i: a.index_select(1, i),
                             (make((3,)), torch.tensor([0]))),
    "embedding_float_indices": (F.embedding, (torch.tensor([1.0, 2.0]), make((10, 4)))),
    "inplace_result_type": (lambda a, b: a.add_(b),
                            (torch.ones(3, dtype=torch.int32), make((3,)))),
    "inplace_int_true_div": (lambda a: a.div_(2), (torch.ones(3, dtype=torch.int64),)),
    "inplace_broadcast_shape": (lambda a, b: a.add_(b), (make((3,)), make((2, 3)))),
    "inplace_on_expanded": (lambda a: a.expand(2, 3).add_(1), (make((3,)),)),
    "inplace_partial_overlap": (lambda a: a.mul_(a.t()), (make((3, 3)),)),
    "inplace_row_of_self": (lambda a: a.add_(a[0]), (make((3, 4)),)),
    "inplace_shifted_self": (lambda a: a[1:].add_(a[:-1]), (make((3, 4)),)),
    "out_overlaps_input": (lambda a: torch.add(a[:-1], 1, out=a[1:]), (make((3, 4)),)),
    # ops that refuse out= sharing memory with an input (TPU_OP_OUT_NO_OVERLAP)
    "cat_out_is_input": (lambda a: torch.cat([a, a], out=a), (make((3, 4)),)),
    "gather_out_is_input": (lambda a, i: torch.gather(a, 0, i, out=a),
                            (make((3, 4)), torch.zeros(3, 4, dtype=torch.long))),
    "index_select_out_in_input": (lambda a, i: torch.index_select(a, 0, i, out=a[:2]),
                                  (make((3, 4)), torch.tensor([0, 1]))),
    "take_out_is_input": (lambda a, i: torch.take(a, i, out=a.view(-1)[:2]),
                          (make((3, 4)), torch.tensor([0, 5]))),
    "copy_from_transposed_self": (lambda a: a.copy_(a.t()), (make((3, 3)),)),
    "copy_from_shifted_self": (lambda a: a[1:].copy_(a[:-1]), (make((6,)),)),
    "float_alpha_on_ints": (lambda a: torch.add(a, a, alpha=0.5),
                            (torch.ones(3, dtype=torch.int32),)),
    "bool_sub": (lambda a: a - a, (torch.ones(3, dtype=torch.bool),)),
    "bool_neg": (torch.neg, (torch.ones(3, dtype=torch.bool),)),
    "int_negative_pow": (lambda a: a ** -1, (torch.ones(3, dtype=torch.int32),)),
    "mean_of_ints": (torch.mean, (torch.ones(3, dtype=torch.int32),)),
    "sum_bad_dim": (lambda a: a.sum(2), (make((3,)),)),
    "softmax_bad_dim": (lambda a: a.softmax(2), (make((3,)),)),
    "max_of_empty": (torch.max, (torch.empty(0),)),
    "where_float_condition": (torch.where, (make((2,)), make((2,)), make((2,)))),
    "masked_fill_float_mask": (lambda a, m: a.masked_fill(m, 1.0), (make((2,)), make((2,)))),
    "masked_fill_1d_value": (lambda a, m, v: a.masked_fill(m, v),
                             (make((2,)), torch.ones(2, dtype=torch.bool), make((2,)))),
    "fill_with_1d_tensor": (lambda a, v: a.fill_(v), (make((3, 3)), make((2,)))),
    "full_uint8_overflow": (lambda a: a.fill_(300), (torch.zeros(2, dtype=torch.uint8),)),
    "layer_norm_shape": (lambda a: F.layer_norm(a, (5,)), (make((3, 4)),)),
    "cross_entropy_target_oob": (F.cross_entropy, (make((2, 3)), torch.tensor([0, 5]))),
    "cross_entropy_float_target_shape": (F.cross_entropy, (make((2, 3)), make((3,)))),
    "item_of_many": (lambda a: a.item(), (make((2,)),)),
    "view_bad_size": (lambda a: a.view(4, 2), (make((6,)),)),
    "view_bad_strides": (lambda a: a.t().view(6), (make((2, 3)),)),
    "reshape_two_inferred": (lambda a: a.view(-1, -1), (make((2, 3)),)),
    "expand_bad": (lambda a: a.expand(3), (make((2,)),)),
    "gather_oob": (lambda a, i: a.gather(0, i), (make((3,)), torch.tensor([5]))),
    "index_select_oob": (lambda a, i: a.index_select(0, i), (make((3, 2)), torch.tensor([0, 3]))),
    "index_select_negative": (lambda a, i: a.index_select(0, i),
                              (make((3, 2)), torch.tensor([-1]))),
    "embedding_negative": (F.embedding, (torch.tensor([1, -2]), make((10, 4)))),
    "cross_entropy_target_negative": (F.cross_entropy, (make((2, 3)), torch.tensor([0, -5]))),
    "advanced_index_oob": (lambda a, i: a[i], (make((4,)), torch.tensor([1, 4]))),
    "bitwise_not_half": (torch.bitwise_not, (make((3,), torch.float16),)),
    "stack_mismatch": (lambda a, b: torch.stack([a, b]), (make((2,)), make((3,)))),
}


@pytest.mark.parametrize("name", list(SAME_ERROR_CASES))
def test_same_exception_type_as_cpu(name):
    fn, args = SAME_ERROR_CASES[name]
    cpu, tpu = on_both(fn, *[a.clone() for a in args])
    assert_same_error(cpu, tpu)
    # the device works normally afterwards
    x = make((4,), seed=1)
    assert_same(x.to("tpu") * 2, x * 2, exact=True)


# Raised by the native kernel itself, not by the CPU fallback: the same type and
# message with fallbacks turned into errors.
NATIVE_ERROR_CASES = {
    "nll_loss_weight_size": (lambda x, t, w: F.nll_loss(x, t, weight=w),
                             (make((3, 5)), torch.tensor([0, 1, 2]), make((4,)))),
    "nll_loss2d_weight_size": (lambda x, t, w: F.nll_loss(x, t, weight=w),
                               (make((3, 5, 2, 2)), torch.zeros(3, 2, 2, dtype=torch.long),
                                make((4,)))),
    "multi_margin_weight_size": (lambda x, t, w: F.multi_margin_loss(x, t, weight=w),
                                 (make((3, 5)), torch.tensor([0, 1, 1]), make((4,)))),
}


@pytest.mark.parametrize("name", list(NATIVE_ERROR_CASES))
def test_native_kernels_raise_cpus_error(name):
    import torch_tpu
    fn, args = NATIVE_ERROR_CASES[name]
    cpu, tpu = on_both(fn, *[a.clone() for a in args])
    with pytest.raises(Exception) as want:
        cpu()
    torch_tpu.set_fallback_mode("error")
    try:
        with pytest.raises(type(want.value)) as got:
            tpu()
    finally:
        torch_tpu.set_fallback_mode("warn")
    assert str(want.value).splitlines()[0] in str(got.value)


# ---- devices --------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["add", "mul", "mm", "cat", "where", "index_select",
                                "copy_out"])
def test_tpu_with_cpu_tensor_raises_runtime_error(op):
    a = make((2, 2)).to("tpu")
    c = make((2, 2))
    fns = {
        "add": lambda: a + c,
        "mul": lambda: torch.mul(c, a),
        "mm": lambda: torch.mm(a, c),
        "cat": lambda: torch.cat([a, c]),
        "where": lambda: torch.where(a > 0, a, c),
        "index_select": lambda: a.index_select(0, torch.tensor([0, 1]).to("tpu")).add_(c),
        "copy_out": lambda: torch.add(a, a, out=c),
    }
    with pytest.raises(RuntimeError, match="device"):
        fns[op]()
        sync()


def test_cpu_scalars_mix_with_tpu_tensors():
    """0-dim CPU tensors and Python numbers are allowed, as with CUDA."""
    a = make((2, 3))
    got = a.to("tpu") + torch.tensor(2.0) * 3
    assert got.device == TPU0
    assert_same(got, a + torch.tensor(2.0) * 3, exact=True)
    got = torch.where(a.to("tpu") > 0, a.to("tpu"), torch.tensor(0.0))
    assert_same(got, torch.where(a > 0, a, torch.tensor(0.0)), exact=True)


@pytest.mark.parametrize("bad", ["empty", "to", "set_device", "device_ctx", "tensor",
                                 "synchronize", "stream"])
def test_invalid_device_index_raises_runtime_error(bad):
    n = torch.tpu.device_count()
    fns = {
        "empty": lambda: torch.empty(2, device=f"tpu:{n}"),
        "to": lambda: torch.ones(2).to(f"tpu:{n + 3}"),
        "set_device": lambda: torch.tpu.set_device(n),
        "device_ctx": lambda: torch.tpu.device(n).__enter__(),
        "tensor": lambda: torch.tensor([1.0], device=f"tpu:{n}"),
        "synchronize": lambda: torch.tpu.synchronize(n),
        "stream": lambda: torch.tpu.Stream(device=n),
    }
    with pytest.raises(RuntimeError):
        fns[bad]()
    assert torch.tpu.current_device() == 0
    assert_same(torch.ones(2, device="tpu"), torch.ones(2), exact=True)


def test_malformed_device_string():
    with pytest.raises(RuntimeError):
        torch.device("tpu:-1")
    with pytest.raises(RuntimeError):
        torch.device("tpu:x")


# ---- asynchronous errors ---------------------------------------------------------------------


def embedding_with_bad_index():
    w = make((10, 4), seed=2).to("tpu")
    idx = torch.tensor([1, 12, 3]).to("tpu")
    return F.embedding(idx, w)


def cpu_embedding_error_type():
    try:
        F.embedding(torch.tensor([1, 12, 3]), make((10, 4), seed=2))
    except Exception as e:  # noqa: BLE001
        return type(e)
    raise AssertionError("the CPU accepts the index")


@contextlib.contextmanager
def cleared_afterwards():
    """Reports a failure once: the error, if still pending, is cleared."""
    try:
        yield
    finally:
        sync_clean()


def names_the_op(msg):
    return "embedding" in msg or "index_select" in msg


def device_still_works():
    a, b = make((8, 8), seed=3), make((8,), seed=4)
    assert_same(torch.softmax(a.to("tpu") @ a.to("tpu") + b.to("tpu"), -1),
                torch.softmax(a @ a + b, -1), atol=1e-5, rtol=1e-5)
    sync()  # no stale error left


@pytest.mark.parametrize("surface", ["cpu", "synchronize", "item", "unrelated_cpu",
                                     "event_synchronize"])
def test_async_embedding_error_surfaces_at_next_sync(surface):
    expected = cpu_embedding_error_type()
    with pytest.raises(expected) as info, cleared_afterwards():
        out = embedding_with_bad_index()
        if surface == "cpu":
            out.cpu()
        elif surface == "synchronize":
            torch.tpu.synchronize()
        elif surface == "item":
            out.sum().item()
        elif surface == "unrelated_cpu":
            torch.ones(3, device="tpu").cpu()
        else:
            ev = torch.tpu.Event()
            ev.record()
            ev.synchronize()
    assert names_the_op(str(info.value)), str(info.value)
    device_still_works()


def test_async_error_is_reported_once():
    with pytest.raises(Exception):
        embedding_with_bad_index()
        sync()
    sync()  # cleared: the next synchronisation succeeds
    device_still_works()


def test_async_error_on_side_stream_surfaces_at_device_sync():
    s = torch.tpu.Stream()
    with pytest.raises(cpu_embedding_error_type()) as info:
        with torch.tpu.stream(s):
            embedding_with_bad_index()
        torch.tpu.synchronize()
    assert names_the_op(str(info.value))
    device_still_works()


def test_async_integer_division_by_zero():
    a = torch.tensor([1, 2, 3], dtype=torch.int32)
    z = torch.tensor([1, 0, 1], dtype=torch.int32)
    for fn in (lambda x, y: x // y, lambda x, y: torch.div(x, y, rounding_mode="trunc"),
               lambda x, y: x % y):
        err = assert_same_error(lambda: fn(a, z), lambda: fn(a.to("tpu"), z.to("tpu")))
        assert "ZeroDivisionError" in str(err), str(err)
    device_still_works()


def test_later_ops_after_failed_op_compute_correctly():
    """Work queued after a failing op still runs correctly once the error
    is reported (the stream is not poisoned)."""
    x = make((16, 16), seed=5)
    with pytest.raises(Exception):
        embedding_with_bad_index()
        y = x.to("tpu") @ x.to("tpu")
        sync()
    y = x.to("tpu") @ x.to("tpu")
    assert_same(y, x @ x, atol=1e-5, rtol=1e-5)
    check(lambda t: t.relu().sum(0), x, atol=1e-6, rtol=1e-6)


def _row0_sum(a):
    r = a.clone()
    r[0] = a.sum(0)
    return r


@pytest.mark.parametrize("name, fn, expect", [
    ("mm", lambda a: torch.mm(a, a, out=a), lambda a: a @ a),
    ("cumsum", lambda a: torch.cumsum(a, 0, out=a), lambda a: a.cumsum(0)),
    ("sum_into_row", lambda a: torch.sum(a, 0, out=a[0]), _row0_sum),
])
def test_out_overlapping_input_computes_from_copies(name, fn, expect):
    # Where PyTorch accepts an out= that shares memory with an input, tpu
    # computes as if from copies of the inputs (the CPU's own kernels may read
    # what they already wrote: its mm and sum give other values here).
    a = make((4, 4))
    t = a.to("tpu")
    fn(t)
    torch.testing.assert_close(t.cpu(), expect(a))
