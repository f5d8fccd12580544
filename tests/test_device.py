"""Device semantics: the `tpu` device, tensor creation, Tensor.tpu() / is_tpu,
Module.tpu(), torch.accelerator, device count and selection (several chips
in a child process)."""
import os

import pytest
import torch
import torch.nn as nn

from conftest import ALL_DTYPES, TPU0, assert_same, check_result, dtype_id, make, run_checks

EXPECTED_CHIPS = int(os.environ.get("TORCH_TPU_NUM_CHIPS", "1"))


def test_device_object():
    d = torch.device("tpu")
    assert d.type == "tpu" and d.index is None
    assert torch.device("tpu:0") == torch.device("tpu", 0) == TPU0
    assert str(torch.device("tpu", 0)) == "tpu:0"
    assert torch._C._get_privateuse1_backend_name() == "tpu"


def test_accelerator_is_tpu():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("tpu")
    assert torch.accelerator.device_count() == torch.tpu.device_count() == EXPECTED_CHIPS
    assert torch.tpu.is_available()
    assert torch.accelerator.current_device_index() == torch.tpu.current_device() == 0


def test_device_properties():
    props = torch.tpu.get_device_properties(0)
    free, total = torch.tpu.mem_get_info(0)
    assert props.total_memory == total > 0
    assert 0 <= free <= total
    assert isinstance(torch.tpu.get_device_name(0), str) and torch.tpu.get_device_name(0)
    assert torch.tpu.get_device_properties("tpu:0").total_memory == total


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_zeros_ones_full(dtype):
    value = True if dtype == torch.bool else (7 if not dtype.is_floating_point else -2.5)
    for fn in (lambda dev: torch.zeros(2, 3, dtype=dtype, device=dev),
               lambda dev: torch.ones(4, dtype=dtype, device=dev),
               lambda dev: torch.full((3, 2), value, dtype=dtype, device=dev),
               lambda dev: torch.zeros((), dtype=dtype, device=dev),
               lambda dev: torch.ones(0, 3, dtype=dtype, device=dev)):
        t = fn("tpu")
        assert t.device == TPU0 and t.is_tpu
        assert_same(t, fn("cpu"), exact=True)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_tensor_constructor(dtype):
    data = [[1, 0, 3], [4, 5, 0]]
    t = torch.tensor(data, dtype=dtype, device="tpu")
    assert t.device == TPU0
    assert_same(t, torch.tensor(data, dtype=dtype), exact=True)
    # dtype inference from Python data is the CPU's
    for data in ([1, 2], [1.5, 2.0], [True, False], 3, 2.5):
        assert_same(torch.tensor(data, device="tpu"), torch.tensor(data), exact=True)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_empty_and_empty_strided(dtype):
    e = torch.empty(3, 4, dtype=dtype, device="tpu")
    assert e.shape == (3, 4) and e.dtype == dtype and e.device == TPU0 and e.is_contiguous()
    s = torch.empty_strided((3, 4), (1, 3), dtype=dtype, device="tpu")
    ref = torch.empty_strided((3, 4), (1, 3), dtype=dtype)
    assert s.stride() == ref.stride() == (1, 3) and s.device == TPU0
    src = make((3, 4), dtype)
    s.copy_(src.to("tpu"))
    ref.copy_(src)
    assert_same(s, ref, exact=True)
    assert s.stride() == (1, 3)


def test_like_factories_keep_device_and_dtype():
    x = make((2, 5), torch.bfloat16)
    xt = x.to("tpu")
    for fn in (torch.zeros_like, torch.ones_like, lambda t: torch.full_like(t, 3.0)):
        assert_same(fn(xt), fn(x), exact=True)
    e = torch.empty_like(xt)
    assert e.device == TPU0 and e.dtype == torch.bfloat16 and e.shape == x.shape
    assert_same(xt.new_zeros(3), x.new_zeros(3), exact=True)
    assert_same(xt.new_ones((2, 2)), x.new_ones((2, 2)), exact=True)
    assert_same(xt.new_tensor([1, 2]), x.new_tensor([1, 2]), exact=True)


def test_arange_linspace():
    assert_same(torch.arange(10, device="tpu"), torch.arange(10), exact=True)
    assert_same(torch.arange(1.0, 4.0, 0.5, device="tpu"), torch.arange(1.0, 4.0, 0.5),
                exact=True)
    assert_same(torch.linspace(0, 1, 7, device="tpu"), torch.linspace(0, 1, 7))


def test_tensor_tpu_method_and_is_tpu():
    x = make((3, 4))
    assert not x.is_tpu
    y = x.tpu()
    assert y.is_tpu and y.device == TPU0
    assert_same(y, x, exact=True)
    assert_same(x.tpu(0), x, exact=True)
    assert_same(x.to("tpu"), x, exact=True)
    z = x.to(device="tpu", dtype=torch.float64)
    assert z.is_tpu
    assert_same(z, x.double(), exact=True)
    # .tpu() of a tpu tensor is the tensor itself (like .cuda())
    assert y.tpu() is y
    back = y.cpu()
    assert not back.is_tpu and back.device.type == "cpu"
    assert_same(y.to(torch.device("tpu:0")), x, exact=True)


def test_module_tpu():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    x = make((4, 6), seed=1)
    expected = m(x)
    mt = m.tpu()
    assert mt is m
    for p in m.parameters():
        assert p.device == TPU0 and isinstance(p, nn.Parameter)
    assert_same(m(x.tpu()), expected, atol=1e-5, rtol=1e-5)
    m.to("cpu")
    assert_same(m(x), expected, exact=True)


def test_current_device_and_context():
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(0)
    torch.tpu.set_device("tpu:0")
    torch.tpu.set_device(torch.device("tpu", 0))
    with torch.tpu.device(0):
        assert torch.tpu.current_device() == 0
        t = torch.ones(2, device="tpu")
    assert t.device == TPU0
    assert_same(t, torch.ones(2), exact=True)
    with pytest.raises(ValueError):
        torch.tpu.set_device(torch.device("cpu"))


def test_synchronize_apis():
    x = make((64, 64))
    y = x.tpu() @ x.tpu()
    torch.tpu.synchronize()
    torch.tpu.synchronize(0)
    torch.tpu.synchronize("tpu:0")
    torch.accelerator.synchronize()
    assert_same(y, x @ x, atol=1e-4, rtol=1e-4)


# ---- several chips (child process with TORCH_TPU_NUM_CHIPS=2) ---------------------------

MULTI_CHIP = r'''
import torch.nn as nn
T0, T1 = torch.device("tpu:0"), torch.device("tpu:1")

def data(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)

@check
def two_chips():
    assert torch.tpu.device_count() == 2
    assert torch.accelerator.device_count() == 2
    assert torch.tpu.current_device() == 0

@check
def create_on_each_chip():
    a = torch.ones(3, device="tpu:1")
    assert a.device == T1
    b = torch.arange(5, device=T1) * 2
    assert b.device == T1
    assert_close(b.cpu(), torch.arange(5) * 2)
    assert torch.zeros(2, device="tpu").device == T0

@check
def set_device_changes_default():
    torch.tpu.set_device(1)
    try:
        assert torch.tpu.current_device() == 1
        assert torch.accelerator.current_device_index() == 1
        t = torch.full((4,), 3.0, device="tpu")
        assert t.device == T1, t.device
        assert torch.tensor([1, 2], device="tpu").device == T1
        assert torch.randn(2, 2).tpu().device == T1
        assert_close(t.cpu(), torch.full((4,), 3.0))
    finally:
        torch.tpu.set_device(0)
    assert torch.zeros(1, device="tpu").device == T0

@check
def device_context_restores():
    with torch.tpu.device(1):
        assert torch.tpu.current_device() == 1
        t = torch.zeros(2, device="tpu")
        with torch.tpu.device(0):
            assert torch.tpu.current_device() == 0
        assert torch.tpu.current_device() == 1
    assert torch.tpu.current_device() == 0
    assert t.device == T1
    with torch.tpu.device("tpu:1"):
        assert torch.tpu.current_device() == 1
    assert torch.tpu.current_device() == 0

@check
def ops_on_chip1_match_cpu():
    x, w = data(8, 16, seed=1), data(16, 4, seed=2)
    xt, wt = x.to(T1), w.to(T1)
    y = torch.softmax(xt @ wt + 1.0, dim=-1)
    assert y.device == T1
    assert_close(y.cpu(), torch.softmax(x @ w + 1.0, dim=-1), atol=1e-5, rtol=1e-5)
    s = xt.sum(0)
    assert s.device == T1
    assert_close(s.cpu(), x.sum(0), atol=1e-5, rtol=1e-5)

@check
def copy_chip0_to_chip1():
    x = data(5, 7, seed=3)
    a = x.to(T0)
    b = a.to(T1)
    assert b.device == T1
    assert_close(b.cpu(), x, rtol=0, atol=0)
    c = b.to(T0)
    assert_close(c.cpu(), x, rtol=0, atol=0)
    d = torch.empty(5, 7, device=T1)
    d.copy_(a)
    assert_close(d.cpu(), x, rtol=0, atol=0)

@check
def copy_chip0_to_chip1_with_dtype_conversion():
    x = data(4, 6, seed=4) * 10
    a = x.to(T0)
    for dt in (torch.float64, torch.bfloat16, torch.int32, torch.float16):
        b = a.to(T1, dtype=dt)
        assert b.device == T1 and b.dtype == dt
        assert_close(b.cpu(), x.to(dt), rtol=0, atol=0)
    d = torch.zeros(4, 6, dtype=torch.int64, device=T1)
    d.copy_(a)
    assert_close(d.cpu(), x.to(torch.int64), rtol=0, atol=0)

@check
def copy_chip0_to_chip1_noncontiguous():
    x = data(6, 8, seed=5)
    a = x.to(T0)
    src = a.t()[::2]          # non-contiguous source on chip 0
    b = src.to(T1)
    assert_close(b.cpu(), x.t()[::2], rtol=0, atol=0)
    base = torch.zeros(8, 12, device=T1)
    dst = base[:, ::2]        # non-contiguous destination on chip 1
    dst.copy_(a.t())
    ref = torch.zeros(8, 12)
    ref[:, ::2].copy_(x.t())
    assert_close(base.cpu(), ref, rtol=0, atol=0)
    # broadcasting copy across chips
    row = data(8, seed=6).to(T0)
    m = torch.empty(3, 8, device=T1)
    m.copy_(row)
    assert_close(m.cpu(), row.cpu().expand(3, 8), rtol=0, atol=0)

@check
def cross_chip_op_is_rejected():
    a = torch.ones(3, device=T0)
    b = torch.ones(3, device=T1)
    try:
        a + b
        torch.tpu.synchronize(0); torch.tpu.synchronize(1)
    except RuntimeError as e:
        assert "device" in str(e), e
    else:
        raise AssertionError("tpu:0 + tpu:1 did not raise")

@check
def module_to_chip1():
    torch.manual_seed(0)
    m = nn.Linear(5, 3)
    x = data(2, 5, seed=7)
    ref = m(x)
    m.to("tpu:1")
    assert all(p.device == T1 for p in m.parameters())
    assert_close(m(x.to(T1)).cpu(), ref, atol=1e-5, rtol=1e-5)
    m.tpu(1)
    assert all(p.device == T1 for p in m.parameters())

@check
def memory_is_per_chip():
    torch.tpu.synchronize(0); torch.tpu.synchronize(1)
    base0, base1 = torch.tpu.memory_allocated(0), torch.tpu.memory_allocated(1)
    t = torch.empty(1 << 20, device=T1)
    assert torch.tpu.memory_allocated(1) - base1 >= 4 << 20
    assert torch.tpu.memory_allocated(0) == base0
    del t
    assert torch.tpu.memory_allocated(1) == base1

@check
def streams_and_sync_on_chip1():
    s = torch.tpu.Stream(device=1)
    assert s.device == T1
    x = data(32, 32, seed=8)
    xt = x.to(T1)
    with torch.tpu.stream(s):
        y = xt @ xt
    torch.tpu.current_stream(1).wait_stream(s)
    torch.tpu.synchronize(1)
    assert_close(y.cpu(), x @ x, atol=1e-4, rtol=1e-4)
    assert torch.tpu.current_stream(1) == torch.tpu.default_stream(1)

@check
def rng_per_chip():
    torch.manual_seed(5)
    a0 = torch.rand(100, device=T0)
    a1 = torch.rand(100, device=T1)
    torch.manual_seed(5)
    b0 = torch.rand(100, device=T0)
    b1 = torch.rand(100, device=T1)
    assert a1.device == T1
    assert_close(a0.cpu(), b0.cpu(), rtol=0, atol=0)
    assert_close(a1.cpu(), b1.cpu(), rtol=0, atol=0)
    st = torch.tpu.get_rng_state(1)
    c = torch.rand(10, device=T1)
    torch.tpu.set_rng_state(st, 1)
    assert_close(torch.rand(10, device=T1).cpu(), c.cpu(), rtol=0, atol=0)

@check
def fallback_result_stays_on_chip1():
    import warnings
    x = data(6, seed=9).abs() + 0.1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = torch.special.bessel_y0(x.to(T1))
        d = torch.linalg.det(data(3, 3, seed=10, dtype=torch.float64).to(T1))
    assert y.device == T1, y.device
    assert d.device == T1, d.device
    assert_close(y.cpu(), torch.special.bessel_y0(x))
    assert_close(d.cpu(), torch.linalg.det(data(3, 3, seed=10, dtype=torch.float64)))

@check
def invalid_chip_index():
    for bad in (lambda: torch.empty(1, device="tpu:2"), lambda: torch.tpu.set_device(2)):
        try:
            bad()
        except RuntimeError:
            pass
        else:
            raise AssertionError("tpu:2 accepted with 2 chips")
'''

MULTI_CHIP_CHECKS = [
    "two_chips", "create_on_each_chip", "set_device_changes_default", "device_context_restores",
    "ops_on_chip1_match_cpu", "copy_chip0_to_chip1", "copy_chip0_to_chip1_with_dtype_conversion",
    "copy_chip0_to_chip1_noncontiguous", "cross_chip_op_is_rejected", "module_to_chip1",
    "memory_is_per_chip", "streams_and_sync_on_chip1", "rng_per_chip",
    "fallback_result_stays_on_chip1", "invalid_chip_index",
]


@pytest.fixture(scope="module")
def multi_chip_results():
    return run_checks(MULTI_CHIP, TORCH_TPU_NUM_CHIPS="2", TORCH_TPU_MEMORY_GB="2")


@pytest.mark.parametrize("name", MULTI_CHIP_CHECKS)
def test_multi_chip(multi_chip_results, name):
    check_result(multi_chip_results, name)
