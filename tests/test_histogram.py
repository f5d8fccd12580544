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
