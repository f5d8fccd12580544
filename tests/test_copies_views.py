"""Copies in every direction (with dtype conversion, strides, broadcasting,
pinned memory and non_blocking) and views (metadata, writes through views,
ops on non-contiguous views, resize_, set_)."""
import pytest
import torch

from conftest import ALL_DTYPES, TPU0, assert_same, check, dtype_id, make

VALUES = [0.0, 1.0, 2.5, 3.75, 17.0, 99.5, 127.0, 0.25, -1.0, -2.5, -100.0, 64.0]


def source(src_dtype, dst_dtype, shape=(3, 4)):
    """CPU values every (src, dst) conversion holds without undefined
    behaviour: non-negative when either side is uint8."""
    base = torch.tensor(VALUES, dtype=torch.float64).reshape(shape)
    if torch.uint8 in (src_dtype, dst_dtype):
        base = base.abs()
    return base.to(src_dtype)


# ---- conversion matrix ----------------------------------------------------------------


@pytest.mark.parametrize("dst_dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("src_dtype", ALL_DTYPES, ids=dtype_id)
def test_copy_matrix_cpu_to_tpu(src_dtype, dst_dtype):
    src = source(src_dtype, dst_dtype)
    dst = torch.zeros(3, 4, dtype=dst_dtype, device="tpu")
    dst.copy_(src)
    assert_same(dst, torch.zeros(3, 4, dtype=dst_dtype).copy_(src), exact=True)


@pytest.mark.parametrize("dst_dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("src_dtype", ALL_DTYPES, ids=dtype_id)
def test_copy_matrix_tpu_to_cpu(src_dtype, dst_dtype):
    src = source(src_dtype, dst_dtype)
    dst = torch.zeros(3, 4, dtype=dst_dtype)
    dst.copy_(src.to("tpu"))
    torch.testing.assert_close(dst, torch.zeros(3, 4, dtype=dst_dtype).copy_(src), rtol=0,
                               atol=0, equal_nan=True)


@pytest.mark.parametrize("dst_dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("src_dtype", ALL_DTYPES, ids=dtype_id)
def test_conversion_matrix_on_tpu(src_dtype, dst_dtype):
    """tpu -> tpu conversion: Tensor.to(dtype) and copy_ between tpu tensors."""
    src = source(src_dtype, dst_dtype)
    check(lambda t: t.to(dst_dtype), src, exact=True)
    dst = torch.zeros(3, 4, dtype=dst_dtype, device="tpu")
    dst.copy_(src.to("tpu"))
    assert_same(dst, src.to(dst_dtype), exact=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64],
                         ids=dtype_id)
def test_special_float_values_roundtrip(dtype):
    x = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0, 1e-3, 65504.0],
                     dtype=torch.float32).to(dtype)
    assert_same(x.to("tpu"), x, exact=True)
    assert_same(x.to("tpu").float(), x.float(), exact=True)
    assert_same(x.to("tpu").to(torch.bool), x.to(torch.bool), exact=True)
    # -0.0 keeps its sign bit
    assert torch.signbit(x.to("tpu").cpu()[3])


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_item_and_tolist(dtype):
    x = source(dtype, dtype, shape=(12,))
    t = x.to("tpu")
    for i in (0, 2, 7, 11):
        assert t[i].item() == x[i].item()
    assert t.tolist() == x.tolist()
    assert t.any().item() == x.any().item()


# ---- directions, strides, broadcasting ---------------------------------------------------


def test_tpu_to_tpu_clone_is_a_copy():
    x = make((4, 5))
    t = x.to("tpu")
    c = t.clone()
    assert c.data_ptr() != t.data_ptr()
    c.add_(1)
    assert_same(t, x, exact=True)
    assert_same(c, x + 1, exact=True)


@pytest.mark.parametrize("direction", ["cpu->tpu", "tpu->cpu", "tpu->tpu"])
def test_noncontiguous_source(direction):
    x = make((6, 8), torch.float32, seed=1)
    views = [lambda a: a.t(), lambda a: a[::2, 1::3], lambda a: a.permute(1, 0)[2:5],
             lambda a: a.unsqueeze(0).expand(2, 6, 8), lambda a: a[:, 3]]
    for v in views:
        expected = v(x).contiguous()
        if direction == "cpu->tpu":
            out = v(x).to("tpu")
            assert_same(out, expected, exact=True)
        elif direction == "tpu->cpu":
            out = v(x.to("tpu")).cpu()
            torch.testing.assert_close(out, expected, rtol=0, atol=0)
        else:
            dst = torch.empty(expected.shape, device="tpu")
            dst.copy_(v(x.to("tpu")))
            assert_same(dst, expected, exact=True)
            assert_same(v(x.to("tpu")).contiguous(), expected, exact=True)
            assert_same(v(x.to("tpu")).clone(), expected, exact=True)


@pytest.mark.parametrize("direction", ["cpu->tpu", "tpu->cpu", "tpu->tpu"])
@pytest.mark.parametrize("dst_dtype", [torch.float64, torch.int16, torch.float16, torch.bool],
                         ids=dtype_id)
def test_noncontiguous_source_with_conversion(direction, dst_dtype):
    x = make((6, 8), torch.float32, seed=21) * 20
    src = x.t()[1::2]
    expected = src.to(dst_dtype)
    if direction == "cpu->tpu":
        got = src.to("tpu", dtype=dst_dtype)
    elif direction == "tpu->cpu":
        got = x.to("tpu").t()[1::2].to("cpu", dtype=dst_dtype)
        assert got.device.type == "cpu"
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        return
    else:
        got = x.to("tpu").t()[1::2].to(dst_dtype)
    assert_same(got, expected, exact=True)


@pytest.mark.parametrize("direction", ["cpu->tpu", "tpu->cpu", "tpu->tpu"])
@pytest.mark.parametrize("dst_dtype", [torch.float32, torch.int32, torch.bfloat16],
                         ids=dtype_id)
def test_noncontiguous_destination(direction, dst_dtype):
    """Copies into strided destinations write exactly the viewed elements."""
    x = make((5, 6), torch.float32, seed=2) * 10
    ref = torch.full((6, 10), -7, dtype=dst_dtype)
    ref[:, ::2][:, :5].copy_(x.t())
    if direction == "tpu->cpu":
        base = torch.full((6, 10), -7, dtype=dst_dtype)
        base[:, ::2][:, :5].copy_(x.to("tpu").t())
        torch.testing.assert_close(base, ref, rtol=0, atol=0)
        return
    base = torch.full((6, 10), -7, dtype=dst_dtype, device="tpu")
    src = x.t() if direction == "cpu->tpu" else x.to("tpu").t()
    base[:, ::2][:, :5].copy_(src)
    assert_same(base, ref, exact=True)


@pytest.mark.parametrize("direction", ["cpu->tpu", "tpu->cpu", "tpu->tpu"])
@pytest.mark.parametrize("src_shape", [(4,), (1, 4), (3, 1), ()], ids=str)
def test_broadcasting_copy(direction, src_shape):
    src = make(src_shape, torch.float64, seed=3)
    ref = torch.zeros(3, 4).copy_(src)
    if direction == "tpu->cpu":
        dst = torch.zeros(3, 4)
        dst.copy_(src.to("tpu"))
        torch.testing.assert_close(dst, ref, rtol=0, atol=0)
        return
    dst = torch.zeros(3, 4, device="tpu")
    dst.copy_(src if direction == "cpu->tpu" else src.to("tpu"))
    assert_same(dst, ref, exact=True)


def test_bad_broadcast_copy_raises_like_cpu():
    from conftest import assert_same_error
    assert_same_error(lambda: torch.zeros(3, 4).copy_(torch.ones(5)),
                      lambda: torch.zeros(3, 4, device="tpu").copy_(torch.ones(5, device="tpu")))
    assert_same_error(lambda: torch.zeros(3, 4).copy_(torch.ones(5)),
                      lambda: torch.zeros(3, 4, device="tpu").copy_(torch.ones(5)))


@pytest.mark.parametrize("numel", [0, 1, 1000, 1 << 20])
def test_sizes_roundtrip(numel):
    x = make((numel,), torch.float32, seed=4)
    t = x.to("tpu")
    assert_same(t, x, exact=True)
    assert_same(t * 2, x * 2, exact=True)


def test_large_strided_roundtrip():
    x = make((512, 1024), torch.float32, seed=5)
    assert_same(x.to("tpu").t().contiguous(), x.t().contiguous(), exact=True)
    assert_same(x.t().to("tpu"), x.t().contiguous(), exact=True)


# ---- pinned memory and non_blocking --------------------------------------------------------


def test_pin_memory():
    x = make((128, 64))
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned()
    torch.testing.assert_close(p, x, rtol=0, atol=0)
    e = torch.empty(10, pin_memory=True)
    assert e.is_pinned()


def test_non_blocking_pinned_h2d_d2h():
    x = make((256, 128), seed=6)
    p = x.pin_memory()
    t = p.to("tpu", non_blocking=True)
    y = t * 3 + 1
    out = torch.empty(y.shape, pin_memory=True)
    out.copy_(y, non_blocking=True)
    torch.tpu.synchronize()
    torch.testing.assert_close(out, x * 3 + 1)
    # an event orders the host read just as well as a full synchronize
    out2 = torch.empty(y.shape, pin_memory=True)
    out2.copy_(y - 1, non_blocking=True)
    ev = torch.tpu.Event()
    ev.record()
    ev.synchronize()
    torch.testing.assert_close(out2, x * 3)


def test_non_blocking_pageable_is_still_correct():
    x = make((300, 70), seed=7)
    t = x.to("tpu", non_blocking=True)
    back = (t + 0.5).to("cpu", non_blocking=True)
    torch.tpu.synchronize()
    torch.testing.assert_close(back, x + 0.5)


def test_non_blocking_pinned_source_reused_after_sync():
    """Several queued pinned uploads, each from its own buffer, all land."""
    xs = [make((64, 64), seed=s) for s in range(4)]
    pinned = [x.pin_memory() for x in xs]
    dev = [p.to("tpu", non_blocking=True) for p in pinned]
    torch.tpu.synchronize()
    for d, x in zip(dev, xs):
        assert_same(d, x, exact=True)


# ---- views ----------------------------------------------------------------------------------

VIEW_OPS = {
    "view": lambda t: t.view(4, 6),
    "view_-1": lambda t: t.view(-1),
    "reshape": lambda t: t.reshape(2, 12),
    "reshape_noncontig": lambda t: t.t().reshape(-1),
    "transpose": lambda t: t.transpose(0, 1),
    "t": lambda t: t.t(),
    "permute": lambda t: t.view(2, 3, 4).permute(2, 0, 1),
    "slice": lambda t: t[1:4, ::3],
    "slice_columns": lambda t: t[:, 1:3],
    "select": lambda t: t.select(1, 2),
    "index_int": lambda t: t[3],
    "expand": lambda t: t[:, :1].expand(6, 5),
    "expand_new_dim": lambda t: t[0].expand(3, 4),
    "as_strided": lambda t: t.as_strided((3, 3), (2, 5), 1),
    "unsqueeze": lambda t: t.unsqueeze(1),
    "squeeze": lambda t: t[:1].squeeze(0),
    "squeeze_all": lambda t: t.view(1, 6, 1, 4).squeeze(),
    "narrow": lambda t: t.narrow(1, 1, 2),
    "diagonal": lambda t: t.diagonal(),
    "unflatten": lambda t: t.unflatten(0, (2, 3)),
    "flatten": lambda t: t.t().flatten(),
    "unbind": lambda t: t.unbind(1)[2],
    "split": lambda t: t.split(2, dim=0)[1],
    "chunk": lambda t: t.chunk(2, dim=1)[1],
    "movedim": lambda t: t.view(2, 3, 4).movedim(0, -1),
    "unfold": lambda t: t.unfold(1, 2, 1),
    "view_dtype": lambda t: t.view(torch.int32),
    "swapaxes": lambda t: t.swapaxes(0, 1),
    "T": lambda t: t.T,
    "mT": lambda t: t.view(2, 3, 4).mT,
}


@pytest.mark.parametrize("name", list(VIEW_OPS))
def test_view_values_and_metadata(name):
    fn = VIEW_OPS[name]
    x = make((6, 4), torch.float32, seed=8)
    xt = x.to("tpu")
    v, ref = fn(xt), fn(x)
    assert v.shape == ref.shape
    assert v.stride() == ref.stride(), f"strides {v.stride()} != CPU {ref.stride()}"
    assert v.storage_offset() == ref.storage_offset()
    if ref._base is not None or ref.data_ptr() == x.data_ptr():
        # a view shares the tpu storage of its base
        assert v.untyped_storage().data_ptr() == xt.untyped_storage().data_ptr()
    assert_same(v, ref, exact=True)
    # ops on the (non-contiguous) view
    assert_same(v * 2 + 1, ref * 2 + 1, exact=True)
    assert_same(v.exp(), ref.exp())
    if v.dim():
        assert_same(v.sum(-1), ref.sum(-1), atol=1e-6, rtol=1e-6)


def test_view_of_incompatible_strides_raises_like_cpu():
    from conftest import assert_same_error
    x = make((2, 3))
    assert_same_error(lambda: x.t().view(6), lambda: x.to("tpu").t().view(6))
    assert_same_error(lambda: x.view(4, 2), lambda: x.to("tpu").view(4, 2))


NONCONTIG_OPS = {
    "add_transposed": lambda a, b: a.t() + b[::2].t(),
    "mul_broadcast_slice": lambda a, b: a[:, ::2] * b[0, ::2],
    "exp_strided": lambda a, b: a[1::2].exp(),
    "where_views": lambda a, b: torch.where(a.t() > 0, a.t(), b.t()[:, :a.shape[0]]),
    "mm_transposed": lambda a, b: a.t() @ b[:a.shape[0]],
    "sum_dim_permuted": lambda a, b: a.t().sum(0),
    "softmax_transposed": lambda a, b: torch.softmax(a.t(), dim=-1),
    "max_dim_strided": lambda a, b: a[:, ::2].max(dim=1),
    "cat_views": lambda a, b: torch.cat([a.t(), b[::2].t()], dim=1),
    "index_select_view": lambda a, b: a.t().index_select(0, torch.tensor([3, 0, 1]).to(a.device)),
    "clamp_expand": lambda a, b: a[:1].expand(4, 6).clamp(-0.5, 0.5),
    "masked_fill_view": lambda a, b: a.t().masked_fill(b[::2].t() > 0, -1.0),
    "layer_norm_view": lambda a, b: torch.nn.functional.layer_norm(a.t(), (4,)),
}


@pytest.mark.parametrize("name", list(NONCONTIG_OPS))
def test_ops_on_noncontiguous_views(name):
    a = make((4, 6), seed=9)
    b = make((8, 6), seed=10)
    check(NONCONTIG_OPS[name], a, b, atol=1e-5, rtol=1e-5)


# ---- writes through views -------------------------------------------------------------------

WRITES = {
    "slice_add_": lambda t: t[1:3].add_(1.5),
    "slice_mul_": lambda t: t[:, ::2].mul_(-2),
    "transpose_sub_": lambda t: t.t().sub_(torch.arange(6.0, device=t.device)),
    "select_zero_": lambda t: t.select(1, 2).zero_(),
    "column_fill_": lambda t: t[:, 0].fill_(7),
    "setitem_scalar": lambda t: t.__setitem__((slice(None, None, 2),), 3.0),
    "setitem_tensor": lambda t: t.__setitem__((1,), torch.arange(4.0, device=t.device)),
    "setitem_cpu_tensor": lambda t: t.__setitem__((slice(2, 4), 1), torch.tensor([5.0, 6.0])),
    "diagonal_copy_": lambda t: t.diagonal().copy_(torch.full((4,), 9.0, device=t.device)),
    "view_clamp_": lambda t: t.view(24).clamp_(-0.1, 0.1),
    "as_strided_add_": lambda t: t.as_strided((2, 2), (5, 1), 2).add_(100),
    "narrow_copy_cpu": lambda t: t.narrow(0, 4, 2).copy_(torch.ones(2, 4)),
    "masked_fill_view": lambda t: t[2:].masked_fill_(t[2:] > 0, 0.0),
    "unsqueeze_div_": lambda t: t.unsqueeze(0)[:, 3].div_(4),
    "bool_mask_setitem": lambda t: t.__setitem__(t < 0, 0.0),
    "index_setitem": lambda t: t.__setitem__(torch.tensor([0, 5]).to(t.device), -1.0),
    "unfold_mul_": lambda t: t.unfold(0, 2, 2).mul_(3),
    "view_dtype_zero_": lambda t: t.view(torch.int32)[1].zero_(),
}


@pytest.mark.parametrize("name", list(WRITES))
def test_write_through_view_updates_base(name):
    x = make((6, 4), seed=11)
    xt = x.to("tpu")
    ptr = xt.data_ptr()
    WRITES[name](x)
    WRITES[name](xt)
    assert xt.data_ptr() == ptr
    assert_same(xt, x, exact=True)


def test_view_sees_later_writes_to_base():
    x = make((4, 4), seed=12)
    xt = x.to("tpu")
    v, vr = xt.t()[1:], x.t()[1:]
    xt.mul_(3)
    x.mul_(3)
    assert_same(v, vr, exact=True)
    xt.copy_(torch.zeros(4, 4))
    assert_same(v, torch.zeros(3, 4), exact=True)


# ---- resize_ and set_ -------------------------------------------------------------------------


def test_resize_grow_keeps_prefix():
    x = make((2, 3), seed=13)
    t = x.to("tpu")
    t.resize_(4, 5)
    assert t.shape == (4, 5) and t.is_contiguous() and t.device == TPU0
    assert_same(t.view(-1)[:6], x.view(-1), exact=True)
    t.fill_(2.0)
    assert_same(t, torch.full((4, 5), 2.0), exact=True)


def test_resize_shrink_and_zero():
    x = make((4, 5), seed=14)
    t = x.to("tpu")
    t.resize_(3)
    assert_same(t, x.view(-1)[:3], exact=True)
    t.resize_(0)
    assert t.numel() == 0 and t.device == TPU0
    t.resize_(2, 2)
    t.copy_(torch.ones(2, 2))
    assert_same(t, torch.ones(2, 2), exact=True)


def test_resize_empty_tensor_and_resize_as():
    t = torch.empty(0, device="tpu")
    t.resize_(3, 7)
    assert t.shape == (3, 7)
    t.copy_(make((3, 7), seed=15))
    assert_same(t, make((3, 7), seed=15), exact=True)
    o = torch.empty(0, dtype=torch.int32, device="tpu")
    o.resize_as_(t)
    assert o.shape == t.shape and o.dtype == torch.int32


def test_resize_negative_raises_like_cpu():
    from conftest import assert_same_error
    assert_same_error(lambda: torch.empty(2).resize_(-1, 2),
                      lambda: torch.empty(2, device="tpu").resize_(-1, 2))


def test_set_source_tensor_shares_storage():
    x = make((3, 4), seed=16)
    src = x.to("tpu")
    t = torch.empty(0, device="tpu")
    t.set_(src)
    assert t.data_ptr() == src.data_ptr() and t.shape == src.shape
    t.add_(1)
    assert_same(src, x + 1, exact=True)


def test_set_storage_offset_size_stride():
    x = make((12,), seed=17)
    src = x.to("tpu")
    t = torch.empty(0, device="tpu")
    t.set_(src.untyped_storage(), 2, (3, 2), (3, 1))
    ref = torch.empty(0).set_(x.untyped_storage(), 2, (3, 2), (3, 1))
    assert t.stride() == ref.stride() and t.storage_offset() == 2
    assert_same(t, ref, exact=True)
    t.mul_(10)
    ref.mul_(10)
    assert_same(src, x, exact=True)


def test_set_storage_only_and_empty():
    x = make((5,), seed=18)
    src = x.to("tpu")
    t = torch.empty(0, device="tpu")
    t.set_(src.untyped_storage())
    assert_same(t, x, exact=True)
    t.set_()
    assert t.numel() == 0 and t.device == TPU0


def test_set_grows_storage_like_cpu():
    """set_ with a size past the end of the storage grows it (as on CPU)."""
    t = torch.empty(0, device="tpu")
    s = torch.empty(0, device="tpu").untyped_storage()
    t.set_(s, 0, (2, 3), (3, 1))
    assert t.untyped_storage().nbytes() >= 24
    t.copy_(torch.arange(6.0).view(2, 3))
    assert_same(t, torch.arange(6.0).view(2, 3), exact=True)


def test_storage_of_tpu_tensor():
    x = make((4,), seed=19)
    t = x.to("tpu")
    st = t.untyped_storage()
    assert st.device.type == "tpu" and st.nbytes() == 16
    cpu_st = st.cpu()
    assert cpu_st.device.type == "cpu"
    back = torch.empty(0, dtype=torch.float32).set_(cpu_st)
    torch.testing.assert_close(back, x, rtol=0, atol=0)


# ---- rounding of conversions, tile boundaries -----------------------------------------------


@pytest.mark.parametrize("dst_dtype", [torch.float16, torch.bfloat16, torch.float32,
                                       torch.int32, torch.int8, torch.bool], ids=dtype_id)
@pytest.mark.parametrize("src_dtype", [torch.float32, torch.float64], ids=dtype_id)
def test_conversion_rounding_of_random_values(src_dtype, dst_dtype):
    """Full-mantissa values (and exact ties) round like the CPU: nearest-even
    for floats, truncation toward zero for integers."""
    g = torch.Generator().manual_seed(22)
    x = (torch.randn(4096, generator=g, dtype=torch.float64) * 50)
    ties = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 0.5, 1.5,
                         2.5, -2.5, 65520.0, 1e-8, -1e-8, 3.4e38], dtype=torch.float64)
    x = torch.cat([x, ties])
    if not dst_dtype.is_floating_point and dst_dtype != torch.bool:
        info = torch.iinfo(dst_dtype)  # out-of-range float -> int is undefined behaviour
        x = x.clamp(info.min // 2, info.max // 2)
    x = x.to(src_dtype)
    assert_same(x.to("tpu").to(dst_dtype), x.to(dst_dtype), exact=True)
    assert_same(x.to("tpu", dtype=dst_dtype), x.to(dst_dtype), exact=True)
    torch.testing.assert_close(x.to("tpu").to("cpu", dtype=dst_dtype), x.to(dst_dtype),
                               rtol=0, atol=0)


def test_int64_values_beyond_float_precision():
    x = torch.tensor([2 ** 62 + 1, -(2 ** 62) - 3, 2 ** 53 + 1, -1, 0], dtype=torch.int64)
    assert_same(x.to("tpu"), x, exact=True)
    check(lambda t: t + 1, x, exact=True)
    check(lambda t: t * 2, x, exact=True)
    check(lambda t: t.sum(), x, exact=True)
    check(lambda t: t.max(), x, exact=True)
    check(lambda t: t.to(torch.int32), x, exact=True)


@pytest.mark.parametrize("inner", [1, 2047, 2048, 2049, 4097])
def test_tile_boundaries(inner):
    """Sizes around the elementwise tile (2048 elements), broadcast and
    strided."""
    a = make((3, inner), seed=23)
    b = make((inner,), seed=24)
    check(lambda x, y: x * y + 1, a, b, exact=True)
    check(lambda x, y: x.t() - y.unsqueeze(1), a, b, exact=True)
    check(lambda x: x[:, ::2].exp(), a, atol=1e-5, rtol=1e-5)
    check(lambda x: x.t().contiguous(), a, exact=True)
    check(lambda x: x.sum(1), a, atol=1e-3, rtol=1e-5)
    check(lambda x: x.t().sum(0), a, atol=1e-3, rtol=1e-5)
    check(lambda x: x.max(1), a, exact=True)
    check(lambda x: torch.softmax(x, 1), a, atol=1e-6, rtol=1e-5)
    dst = torch.zeros(inner, 3, device="tpu")
    dst.copy_(a.t())
    assert_same(dst, a.t().contiguous(), exact=True)


@pytest.mark.parametrize("shape", [(), (1,), (1, 1), (1, 1, 1)])
def test_item_of_any_one_element_shape(shape):
    t = torch.full(shape, 2.5)
    assert t.to("tpu").item() == t.item()


@pytest.mark.parametrize("dtype", [torch.complex32, torch.complex64, torch.complex128])
def test_complex_tensors_round_trip(dtype):
    # Complex tensors are storage on tpu: copies in every direction, dtype
    # changes, conjugate/negative views and real<->complex casts match CPU.
    torch.manual_seed(0)
    c = torch.randn(3, 5, dtype=torch.complex64).to(dtype)
    t = c.to("tpu")
    assert t.device.type == "tpu" and t.dtype == dtype
    same = lambda a, b: torch.equal(torch.view_as_real(a.cpu()), torch.view_as_real(b))
    assert same(t, c)
    assert same(t.t().contiguous(), c.t().contiguous())
    if dtype != torch.complex32:  # CPU has no ComplexHalf conj kernels
        assert same(t.conj(), c.conj().resolve_conj())
        assert same(c.conj().to("tpu"), c.conj().resolve_conj())
        assert torch.equal(t.conj().imag.cpu(), c.conj().imag.resolve_neg())
        assert same(t.to(torch.complex128), c.to(torch.complex128))
        assert torch.equal(t.real.cpu(), c.real) and torch.equal(t.imag.cpu(), c.imag)
        assert t[1, 2].item() == c[1, 2].item()
    r = torch.randn(4)
    assert same(r.to("tpu").to(dtype), r.to(dtype))


def test_negative_view_copies():
    x = torch.randn(6)
    n = x.to("tpu")._neg_view()
    assert n.is_neg()
    assert torch.equal(n.cpu(), -x)
    assert torch.equal(n.clone().cpu(), -x)
