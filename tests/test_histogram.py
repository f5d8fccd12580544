"""torch.histogram natively on tpu (runtime/src/kernels/reduce/histogram.c):
bin counts and bin_edges equal PyTorch CPU's exactly (the linspace edges and the
bin of every sample, samples on edges included), weighted sums and densities to
rounding; errors as the CPU's. Run under TORCH_TPU_DEFER_AND_FUSE=1 too."""
import pytest
import torch

import torch_tpu
from conftest import no_fallback


def _x(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dtype)


CASES = {  # name: (make args and kwargs on the CPU from a dtype)
    "bins_100": lambda dt: ((_x((1000,), dt),), {"bins": 100}),
    "bins_1": lambda dt: ((_x((50,), dt),), {"bins": 1}),
    "bins_17_2d": lambda dt: ((_x((7, 13), dt),), {"bins": 17}),
    "single": lambda dt: ((_x((1,), dt),), {"bins": 5}),
    "empty": lambda dt: ((_x((0,), dt),), {"bins": 4}),
    "constant": lambda dt: ((torch.full((5,), 2.0, dtype=dt),), {"bins": 4}),
    "on_edges": lambda dt: ((torch.randint(0, 5, (60,), generator=torch.Generator().manual_seed(1)).to(dt),),
                            {"bins": 13}),
    # every sample equal to a linspace edge: the bin must agree with bin_edges
    "samples_on_edges": lambda dt: ((torch.histogram(_x((50,), dt, 6), bins=23)[1].repeat(2),),
                                    {"bins": 23}),
    "weighted": lambda dt: ((_x((200,), dt),), {"bins": 9, "weight": _x((200,), dt, 2).abs()}),
    "density": lambda dt: ((_x((300,), dt),), {"bins": 6, "density": True}),
    "weighted_density": lambda dt: ((_x((30, 4), dt),),
                                    {"bins": 5, "weight": _x((30, 4), dt, 3).abs(), "density": True}),
    "strided": lambda dt: ((_x((6, 8), dt)[:, ::3].mT,), {"bins": 5,
                                                         "weight": _x((8, 6), dt, 4)[::3].mT}),
    "edges_tensor": lambda dt: ((_x((500,), dt), torch.tensor([-1, -0.3, 0, 0.1, 2.0], dtype=dt)), {}),
    "edges_tensor_nan": lambda dt: ((torch.tensor([1.0, float("nan"), 2.0, -4.0], dtype=dt),
                                     torch.tensor([0.0, 1.5, 3.0], dtype=dt)), {}),
    "edges_unsorted": lambda dt: ((_x((200,), dt), torch.tensor([-1, 0.5, -0.3, 0.1, 2.0], dtype=dt)), {}),
    "edges_weighted_density": lambda dt: ((_x((200,), dt), torch.linspace(-2, 2, 8, dtype=dt)),
                                          {"weight": _x((200,), dt, 5).abs(), "density": True}),
}


def _to(v):
    """v on tpu: a tensor, or each tensor of a list or tuple (histogramdd's bins)."""
    if isinstance(v, (list, tuple)):
        return type(v)(_to(e) for e in v)
    return v.to("tpu") if isinstance(v, torch.Tensor) else v


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_histogram_matches_cpu(name, dtype):
    args, kw = CASES[name](dtype)
    hist, edges = torch.histogram(*args, **kw)
    with no_fallback():
        th, te = torch.histogram(*[_to(a) for a in args], **{k: _to(v) for k, v in kw.items()})
        th, te = th.cpu(), te.cpu()
    assert th.dtype == hist.dtype and te.dtype == edges.dtype
    assert torch.equal(te, edges)
    if "weight" in kw or kw.get("density"):
        torch.testing.assert_close(th, hist, equal_nan=True)
    else:
        assert torch.equal(th, hist)


def test_histogram_out_variants():
    x = _x((100,), torch.float64)
    h = torch.empty(0, dtype=torch.float64, device="tpu")
    e = torch.empty(0, dtype=torch.float64, device="tpu")
    with no_fallback():
        torch.histogram(x.to("tpu"), bins=7, out=(h, e))
    ch, ce = torch.histogram(x, bins=7)
    assert torch.equal(h.cpu(), ch) and torch.equal(e.cpu(), ce)
    bins = torch.tensor([-1.0, 0.0, 2.0], dtype=torch.float64)
    with no_fallback():
        torch.histogram(x.to("tpu"), bins.to("tpu"), out=(h, e))
    ch, ce = torch.histogram(x, bins)
    assert torch.equal(h.cpu(), ch) and torch.equal(e.cpu(), ce)


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_histogram_nonfinite_range_raises_like_cpu(bad):
    x = torch.tensor([1.0, bad, 2.0])
    with pytest.raises(RuntimeError) as cpu_err:
        torch.histogram(x, bins=3)
    with pytest.raises(RuntimeError) as tpu_err:
        torch.histogram(x.to("tpu"), bins=3)[0].cpu()
    assert str(cpu_err.value) in str(tpu_err.value)


@pytest.mark.parametrize("call", [
    lambda d: torch.histogram(torch.randn(9).to(d), bins=0),
    lambda d: torch.histogram(torch.randn(9).to(d), torch.tensor([0.5]).to(d)),
    lambda d: torch.histogram(torch.randn(9).to(d), torch.zeros(2, 2).to(d)),
    lambda d: torch.histogram(torch.randn(9).to(d), torch.zeros(3, dtype=torch.float64).to(d)),
    lambda d: torch.histogram(torch.randn(9).half().to(d), bins=3),
], ids=["zero_bins", "one_edge", "edges_2d", "mixed_dtypes", "float16"])
def test_histogram_bad_arguments_raise_like_cpu(call):
    with pytest.raises(Exception) as cpu_err:
        call("cpu")
    with pytest.raises(Exception) as tpu_err:
        call("tpu")
    assert type(tpu_err.value) is type(cpu_err.value)
    assert str(cpu_err.value).split("\n")[0] in str(tpu_err.value)


@pytest.mark.parametrize("rng", [(-1.0, 1.0), (0.0, 0.0), (-0.3, 2.7), (5.0, 9.0)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_histogram_range_native(rng, dtype):
    """`range` (a float[] argument, bound as a FLOATS attr): samples outside it are
    skipped, an empty range widens by 0.5, and non-finite samples need no range check."""
    x = torch.cat([_x((200,), dtype), torch.tensor([float("inf"), float("nan")], dtype=dtype)])
    for kw in ({}, {"weight": _x((202,), dtype, 7).abs(), "density": True}):
        h, e = torch.histogram(x, bins=6, range=rng, **kw)
        with no_fallback():
            th, te = torch.histogram(x.to("tpu"), bins=6, range=rng,
                                     **{k: _to(v) for k, v in kw.items()})
            th, te = th.cpu(), te.cpu()
        assert torch.equal(te, e)
        torch.testing.assert_close(th, h, equal_nan=True, rtol=0 if not kw else None,
                                   atol=0 if not kw else None)


@pytest.mark.parametrize("rng", [(1.0, 0.0), (0.0, float("inf")), (0.0, 1.0, 2.0)], ids=str)
def test_histogram_bad_range_raises_like_cpu(rng):
    x = torch.randn(20)
    with pytest.raises(Exception) as cpu_err:
        torch.histogram(x, bins=3, range=rng)
    with pytest.raises(Exception) as tpu_err:
        torch.histogram(x.to("tpu"), bins=3, range=rng)
    assert type(tpu_err.value) is type(cpu_err.value)
    assert str(cpu_err.value).split("\n")[0] in str(tpu_err.value)


# ---- torch.histogramdd: _histogramdd_bin_edges (bridge/histogram.cpp, one runtime node per
# coordinate), then _histogramdd_from_bin_cts or _from_bin_tensors (runtime rows) ----------

DD_CASES = {  # name: (make args and kwargs on the CPU from a dtype)
    "bins_int": lambda dt: ((_x((200, 2), dt),), {"bins": 5}),
    "bins_list": lambda dt: ((_x((300, 3), dt),), {"bins": [4, 1, 7]}),
    "one_dim": lambda dt: ((_x((50, 1), dt),), {"bins": 6}),
    "batched_3d": lambda dt: ((_x((4, 25, 2), dt),), {"bins": [3, 5],
                                                      "weight": _x((4, 25), dt, 3).abs()}),
    "range": lambda dt: ((torch.cat([_x((100, 2), dt), torch.tensor(
        [[float("inf"), 0.0], [0.0, float("nan")], [-float("inf"), 1.0]], dtype=dt)]),),
        {"bins": [4, 3], "range": [-1.0, 1.0, -0.5, 2.0]}),
    "range_empty_widens": lambda dt: ((_x((60, 2), dt),), {"bins": 3, "range": [0.0, 0.0, -1.0, 1.0]}),
    "constant_column": lambda dt: ((torch.stack([_x((40,), dt), torch.full((40,), 3.0, dtype=dt)], 1),),
                                   {"bins": [5, 4]}),
    "empty": lambda dt: ((_x((0, 2), dt),), {"bins": [2, 3]}),
    "empty_density": lambda dt: ((_x((0, 2), dt),), {"bins": [2, 3], "density": True}),
    # every sample on a grid point of linspace edges: bins must agree with bin_edges
    "samples_on_edges": lambda dt: ((torch.cartesian_prod(
        *torch.histogramdd(_x((30, 2), dt, 6), bins=[9, 4])[1]),), {"bins": [9, 4]}),
    "weighted": lambda dt: ((_x((150, 2), dt),), {"bins": [6, 2], "weight": _x((150,), dt, 2).abs()}),
    "density": lambda dt: ((_x((250, 2), dt),), {"bins": [5, 3], "density": True}),
    "weighted_density": lambda dt: ((_x((120, 3), dt),), {"bins": [3, 2, 4], "density": True,
                                                          "weight": _x((120,), dt, 4).abs()}),
    "strided": lambda dt: ((_x((3, 90), dt)[:, ::3].mT,), {"bins": [4, 2, 5],
                                                            "weight": _x((60,), dt, 5)[::2]}),
    "edges_tensors": lambda dt: ((_x((200, 2), dt),), {"bins": [
        torch.tensor([-1, -0.3, 0, 0.1, 2.0], dtype=dt), torch.linspace(-2, 2, 7, dtype=dt)]}),
    "edges_tensors_nan": lambda dt: ((torch.tensor([[1.0, 0.5], [float("nan"), 0.5], [2.0, 1.0],
                                                    [-4.0, 0.0]], dtype=dt),),
                                     {"bins": [torch.tensor([0.0, 1.5, 3.0], dtype=dt),
                                               torch.tensor([0.0, 1.0], dtype=dt)]}),
    "edges_tensors_weighted_density": lambda dt: ((_x((200, 2), dt),), {
        "bins": [torch.linspace(-2, 2, 8, dtype=dt), torch.tensor([-1.0, 0.0, 3.0], dtype=dt)],
        "weight": _x((200,), dt, 5).abs(), "density": True}),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", sorted(DD_CASES))
def test_histogramdd_matches_cpu(name, dtype):
    args, kw = DD_CASES[name](dtype)
    hist, edges = torch.histogramdd(*args, **kw)
    with no_fallback():
        th, te = torch.histogramdd(*_to(args), **{k: _to(v) for k, v in kw.items()})
        th, te = th.cpu(), [e.cpu() for e in te]
    assert th.dtype == hist.dtype and th.shape == hist.shape
    assert len(te) == len(edges)
    for a, b in zip(te, edges):
        assert a.dtype == b.dtype and torch.equal(a, b)
    if "weight" in kw or kw.get("density"):
        torch.testing.assert_close(th, hist, equal_nan=True)
    else:
        assert torch.equal(th, hist)


def test_histogramdd_counts_zero_fallbacks_and_natives():
    x = _x((100, 3), torch.float32).to("tpu")
    torch_tpu.reset_counts()
    torch.histogramdd(x, bins=[2, 3, 4], range=[-1.0, 1.0, -2.0, 2.0, 0.0, 1.0])
    torch.histogramdd(x, bins=[torch.linspace(-1, 1, 3, device="tpu")] * 3)
    torch.tpu.synchronize()
    assert torch_tpu.fallback_counts() == {}
    native = torch_tpu.native_counts()
    for op in ("_histogramdd_bin_edges", "_histogramdd_from_bin_cts",
               "_histogramdd_from_bin_tensors"):
        assert any(k.startswith(op) for k in native), (op, native)


_DD_BAD = {
    "one_dim_input": lambda d: torch.histogramdd(torch.randn(9).to(d), bins=[3]),
    "bins_count": lambda d: torch.histogramdd(torch.randn(9, 2).to(d), bins=[3, 3, 3]),
    "zero_bins": lambda d: torch.histogramdd(torch.randn(9, 2).to(d), bins=[3, 0]),
    "range_length": lambda d: torch.histogramdd(torch.randn(9, 2).to(d), bins=3, range=[0.0, 1.0]),
    "range_backwards": lambda d: torch.histogramdd(torch.randn(9, 2).to(d), bins=3,
                                                   range=[0.0, 1.0, 2.0, 1.0]),
    "range_inf": lambda d: torch.histogramdd(torch.randn(9, 2).to(d), bins=3,
                                             range=[0.0, 1.0, 0.0, float("inf")]),
    "edges_count": lambda d: torch.histogramdd(torch.randn(9, 2).to(d),
                                               bins=[torch.tensor([0.0, 1.0]).to(d)]),
    "one_edge": lambda d: torch.histogramdd(torch.randn(9, 2).to(d), bins=[
        torch.tensor([0.0, 1.0]).to(d), torch.tensor([1.0]).to(d)]),
    "edges_dtype": lambda d: torch.histogramdd(torch.randn(9, 2).to(d), bins=[
        torch.tensor([0.0, 1.0]).to(d), torch.tensor([0.0, 1.0], dtype=torch.float64).to(d)]),
    "edges_2d": lambda d: torch.histogramdd(torch.randn(9, 2).to(d), bins=[
        torch.tensor([0.0, 1.0]).to(d), torch.zeros(2, 2).to(d)]),
    "edges_empty": lambda d: torch.histogramdd(torch.randn(9, 2).to(d), bins=[
        torch.tensor([0.0, 1.0]).to(d), torch.tensor([]).to(d)]),
    "weight_dtype": lambda d: torch.histogramdd(torch.randn(9, 2).to(d), bins=3,
                                                weight=torch.rand(9, dtype=torch.float64).to(d)),
    "weight_shape": lambda d: torch.histogramdd(torch.randn(9, 2).to(d), bins=3,
                                                weight=torch.rand(9, 1).to(d)),
    "edges_weight_shape": lambda d: torch.histogramdd(
        torch.randn(9, 2).to(d), bins=[torch.tensor([0.0, 1.0]).to(d)] * 2,
        weight=torch.rand(8).to(d)),
    "float16": lambda d: torch.histogramdd(torch.randn(9, 2).half().to(d), bins=3),
}


@pytest.mark.parametrize("name", sorted(_DD_BAD))
def test_histogramdd_bad_arguments_raise_like_cpu(name):
    call = _DD_BAD[name]
    with pytest.raises(Exception) as cpu_err:
        call("cpu")
    with pytest.raises(Exception) as tpu_err:
        call("tpu")
        torch.tpu.synchronize()
    assert type(tpu_err.value) is type(cpu_err.value)
    assert str(cpu_err.value).split("\n")[0] in str(tpu_err.value)


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_histogramdd_nonfinite_data_raises_like_cpu(bad):
    x = torch.tensor([[1.0, 0.0], [2.0, bad], [0.5, 3.0]])
    with pytest.raises(RuntimeError) as cpu_err:
        torch.histogramdd(x, bins=3)
    with pytest.raises(RuntimeError) as tpu_err:
        torch.histogramdd(x.to("tpu"), bins=3)[0].cpu()
    assert str(cpu_err.value).split("\n")[0] in str(tpu_err.value)


def test_histogramdd_native_with_fallback_errors():
    """Errors raised natively: the same with TORCH_TPU_FALLBACK=error (no CPU involved)."""
    prev = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("error")
    try:
        for name in sorted(set(_DD_BAD) - {"float16"}):
            with pytest.raises(RuntimeError) as err:
                _DD_BAD[name]("tpu")
                torch.tpu.synchronize()
            assert not isinstance(err.value, NotImplementedError), (name, err.value)
    finally:
        torch_tpu.set_fallback_mode(prev)
