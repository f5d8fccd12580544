"""uint16, uint32 and uint64 on tpu, against PyTorch CPU.

PyTorch keeps these dtypes "barebones": storage, casts, bit operations,
equality, indexing, a few reductions; arithmetic and ordering raise on CPU.
On tpu the copies, fills, casts, bit operations, equality, products and
element moves run natively; what CPU cannot do raises the same error type
(through the counted CPU fallback)."""
import pytest
import torch

import torch_tpu

WIDE = [torch.uint16, torch.uint32, torch.uint64]
TOP = {torch.uint16: 2**16 - 1, torch.uint32: 2**32 - 1, torch.uint64: 2**63 + 5}
SIGNED = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}


def values(dt):
    # The top half of the range reads negative as the signed twin.
    return torch.tensor([1, 2, 3, TOP[dt], TOP[dt] // 2 + 1, 0, 7, 12], dtype=dt)


@pytest.fixture
def native_only():
    """Fails the test if anything in it runs on the CPU fallback."""
    torch_tpu.set_fallback_mode("error")
    try:
        yield
    finally:
        torch_tpu.set_fallback_mode("warn")


@pytest.mark.parametrize("dt", WIDE)
def test_copies_and_factories(dt, native_only):
    c = values(dt)
    t = c.to("tpu")
    assert t.dtype == dt and torch.equal(t.cpu(), c)
    assert torch.equal(t.clone().cpu(), c)
    assert torch.equal(torch.zeros(5, dtype=dt, device="tpu").cpu(), torch.zeros(5, dtype=dt))
    full = torch.full((3,), TOP[dt] if dt != torch.uint64 else 2**40, dtype=dt, device="tpu")
    assert torch.equal(full.cpu(), torch.full((3,), TOP[dt] if dt != torch.uint64 else 2**40, dtype=dt))
    s = torch.empty(8, dtype=dt, device="tpu")
    s.copy_(t)
    assert torch.equal(s.cpu(), c)
    # a strided device-to-device copy
    assert torch.equal(t[::2].contiguous().cpu(), c[::2])


@pytest.mark.parametrize("dt", WIDE)
@pytest.mark.parametrize("other", [torch.float32, torch.float64, torch.int64, torch.bool,
                                   torch.bfloat16, torch.int32])
def test_casts_both_ways(dt, other, native_only):
    c = values(dt)
    t = c.to("tpu")
    got = t.to(other)
    want = c.to(other)
    assert got.dtype == want.dtype
    assert torch.equal(got.cpu(), want), (got.cpu(), want)
    # into the unsigned dtype, from in-range values (out of range is undefined in C and PyTorch)
    src = torch.tensor([0, 1, 5, 100, 127], dtype=other if other != torch.bool else torch.int64)
    if other == torch.bool:
        src = src.bool()
    assert torch.equal(src.to("tpu").to(dt).cpu(), src.to(dt))


def test_casts_from_negative_integers_wrap():
    c = torch.tensor([-1, -2, 3], dtype=torch.int64)
    for dt in WIDE:
        assert torch.equal(c.to("tpu").to(dt).cpu(), c.to(dt))


@pytest.mark.parametrize("dt", WIDE)
@pytest.mark.parametrize("name", ["and", "or", "xor", "eq", "ne", "mul", "eq_scalar", "ne_top",
                                  "and_scalar"])
def test_bit_level_ops(dt, name, native_only):
    ops = {
        "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
        "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "mul": lambda a, b: a * b,
        "eq_scalar": lambda a, b: a == 3, "ne_top": lambda a, b: a != TOP[dt],
        "and_scalar": lambda a, b: a & 6,
    }
    a, b = values(dt), values(dt).flip(0)
    if dt == torch.uint64 and name == "ne_top":
        pytest.skip("a Python int above int64 is not a tpu scalar (it runs on CPU)")
    want = ops[name](a, b)
    got = ops[name](a.to("tpu"), b.to("tpu"))
    assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
    # in place keeps the dtype
    if name in ("and", "or", "xor", "mul"):
        x = a.to("tpu")
        {"and": x.__iand__, "or": x.__ior__, "xor": x.__ixor__, "mul": x.__imul__}[name](b.to("tpu"))
        assert x.dtype == dt and torch.equal(x.cpu(), want)


@pytest.mark.parametrize("dt", WIDE)
def test_bitwise_not_where_cpu_has_none(dt):
    # CPU raises NotImplementedError for ~ on these dtypes; tpu computes it.
    a = values(dt)
    got = (~a.to("tpu")).cpu()
    want = (~a.to(SIGNED[dt])).view(dt)
    assert got.dtype == dt and torch.equal(got, want)


@pytest.mark.parametrize("dt", WIDE)
def test_element_moves(dt, native_only):
    c = values(dt)
    t = c.to("tpu")
    idx = torch.tensor([4, 0, 3])
    assert torch.equal(t.index_select(0, idx.to("tpu")).cpu(), c.index_select(0, idx))
    assert torch.equal(t[idx.to("tpu")].cpu(), c[idx])
    assert torch.equal(t.flip(0).cpu(), c.flip(0))
    assert torch.equal(t.gather(0, idx.to("tpu")).cpu(), c.gather(0, idx))
    assert torch.equal(t.view(SIGNED[dt]).cpu(), c.view(SIGNED[dt]))
    assert torch.equal(t.reshape(2, 4).t().contiguous().cpu(), c.reshape(2, 4).t().contiguous())


@pytest.mark.parametrize("dt", WIDE)
def test_what_cpu_refuses_raises_the_same(dt):
    a = values(dt)
    t = a.to("tpu")
    for op in (lambda x: x + x, lambda x: x < x, lambda x: torch.maximum(x, x), lambda x: -x):
        with pytest.raises(Exception) as cpu_err:
            op(a)
        with pytest.raises(type(cpu_err.value)):
            op(t)


@pytest.mark.parametrize("dt", WIDE)
def test_cpu_capable_ops_match_through_the_fallback(dt):
    # sum (to int64), cat and sort run on the counted CPU fallback
    a = values(dt)
    t = a.to("tpu")
    assert torch.equal(t.sum().cpu(), a.sum())
    assert torch.equal(torch.cat([t, t]).cpu(), torch.cat([a, a]))


@pytest.mark.parametrize("mode", ["strict", "defer"])
def test_under_defer_and_fuse(mode):
    prev = torch_tpu.get_eager_mode()
    torch_tpu.set_eager_mode("DEFER_AND_FUSE" if mode == "defer" else "STRICT")
    try:
        a = values(torch.uint32)
        t = a.to("tpu")
        got = ((t & 0xFFFF0000) ^ t) == (t & 0xFFFF)
        assert torch.equal(got.cpu(), ((a & 0xFFFF0000) ^ a) == (a & 0xFFFF))
    finally:
        torch_tpu.set_eager_mode(prev)


def test_compiled_int4_packing_into_uint32():
    # The published quantization tutorial packs eight 4-bit values per uint32
    # inside a compiled graph.
    def pack(q):
        shifts = torch.arange(0, 32, 4, dtype=torch.int64, device=q.device)
        return (q.to(torch.int64) << shifts).sum(-1).to(torch.uint32)

    q = torch.randint(0, 16, (16, 8), dtype=torch.int32)
    want = pack(q)
    got = torch.compile(pack, backend="tpu")(q.to("tpu"))
    assert got.dtype == torch.uint32 and torch.equal(got.cpu(), want)
