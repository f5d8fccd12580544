"""Advanced indexing, index_put, take/put, index_fill/copy, masked ops,
nonzero, scatter_reduce/index_reduce, embedding_bag, repeat_interleave and
count_nonzero: native on tpu (zero fallbacks) and equal to CPU, backward
(gradients against CPU autograd; the OpInfo entries: test_opinfo_native.py), plus the error semantics of out-of-range indices."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu


@pytest.fixture
def fallback_error():
    mode = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("error")
    yield
    torch_tpu.set_fallback_mode(mode)


# ---- gradients against CPU autograd ---------------------------------------------------

def _idx(device, *vals):
    return torch.tensor(vals, device=device)


GRAD_CASES = {
    "index_rows": lambda x, d: x[_idx(d, 3, 0, 3, -1)],
    "index_2d_broadcast": lambda x, d: x[_idx(d, [1], [4]), _idx(d, 0, 2, 2)],
    "index_none_gap": lambda x, d: x.unsqueeze(1).expand(5, 2, 3)[_idx(d, 4, 0), :, _idx(d, 2, 1)],
    "index_mask": lambda x, d: x[x > 0.2],
    "index_mask_cols": lambda x, d: x[:, _idx(d, True, False, True)],
    "index_put_accumulate": lambda x, d: x.index_put((_idx(d, 1, 1, 4),), x[:3] * 2, accumulate=True),
    "index_put_mask": lambda x, d: x.masked_fill(x > 0, 0).index_put((x < -0.5,), torch.tensor(3.0, device=d)),
    "take": lambda x, d: torch.take(x, _idx(d, [14, 0], [-1, 7])),
    "put_accumulate": lambda x, d: x.put(_idx(d, 3, 3, 9), x[0] * 3, accumulate=True),
    "index_fill": lambda x, d: x.index_fill(1, _idx(d, 2, 0), -1.5),
    "index_copy": lambda x, d: x.index_copy(0, _idx(d, 4, 1), x[:2].flip(0) * 2),
    "masked_select": lambda x, d: torch.masked_select(x, x > 0),
    "masked_scatter": lambda x, d: x.masked_scatter(x < 0, x.flatten() * 3),
    "scatter_reduce_sum": lambda x, d: x.scatter_reduce(0, _idx(d, [0, 1, 0], [4, 4, 2]), x[:2] * 2, "sum"),
    "scatter_reduce_mean": lambda x, d: x.scatter_reduce(0, _idx(d, [0, 1, 0], [4, 4, 2]), x[:2], "mean", include_self=False),
    "scatter_reduce_amax": lambda x, d: x.scatter_reduce(1, _idx(d, [0, 0], [2, 1]), x[:2, :2] * 3, "amax"),
    "scatter_reduce_prod": lambda x, d: x.scatter_reduce(0, _idx(d, [0, 1, 0], [4, 4, 2]), x[:2] + 2, "prod"),
    "index_reduce_mean": lambda x, d: x.index_reduce(0, _idx(d, 1, 3, 1), x[:3] * 2, "mean"),
    "repeat_interleave": lambda x, d: x.repeat_interleave(_idx(d, 2, 0, 1, 3, 1), dim=0),
    "repeat_interleave_int": lambda x, d: x.repeat_interleave(2, dim=1),
    "select_scatter": lambda x, d: torch.select_scatter(x, x[1] * 3, 0, 2),
    "slice_scatter": lambda x, d: torch.slice_scatter(x, x[:, :2] * 2, 1, 1, 3),
    "diagonal_scatter": lambda x, d: torch.diagonal_scatter(x, x[0] * 2, -1),
    "as_strided_scatter": lambda x, d: torch.as_strided_scatter(x, x[:2, :2] * 2, (2, 2), (3, 1), 1),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradients_native_and_equal(name, fallback_error):
    fn = GRAD_CASES[name]
    torch.manual_seed(0)
    base = torch.randn(5, 3, dtype=torch.float64)
    x_cpu = base.clone().requires_grad_()
    want = fn(x_cpu, "cpu")
    g = torch.randn(want.shape, dtype=torch.float64)
    want.backward(g)
    torch_tpu.reset_counts()
    x = base.to("tpu").requires_grad_()
    got = fn(x, "tpu")
    got.backward(g.to("tpu"))
    assert torch_tpu.fallback_counts() == {}
    torch.testing.assert_close(got.detach().cpu(), want.detach())
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("psw", [False, True])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_embedding_bag_gradients(mode, psw, include_last_offset, fallback_error):
    if psw and mode != "sum":
        pytest.skip("per_sample_weights is only defined for mode='sum'")
    torch.manual_seed(1)
    w0 = torch.randn(20, 6, dtype=torch.float64)
    idx = torch.tensor([3, 7, 7, 0, 19, 3, 5, 2, 2, 2, 11])
    offs = torch.tensor([0, 3, 3, 8, 11] if include_last_offset else [0, 3, 3, 8])
    pw0 = torch.randn(idx.numel(), dtype=torch.float64)
    res = {}
    for dev in ["cpu", "tpu"]:
        w = w0.to(dev).detach().requires_grad_()
        pw = pw0.to(dev).detach().requires_grad_() if psw else None
        out = F.embedding_bag(idx.to(dev), w, offs.to(dev), mode=mode, per_sample_weights=pw,
                              include_last_offset=include_last_offset, padding_idx=2)
        g = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).reshape(out.shape)
        torch_tpu.reset_counts()
        out.backward(g.to(dev))
        if dev == "tpu":
            assert torch_tpu.fallback_counts() == {}
        res[dev] = (out.detach().cpu(), w.grad.cpu(), pw.grad.cpu() if psw else None)
    for a, b in zip(res["tpu"], res["cpu"]):
        if a is not None:
            torch.testing.assert_close(a, b)


def test_embedding_bag_2d_input_and_max_norm(fallback_error):
    w_cpu = torch.randn(10, 4) * 3
    w = w_cpu.to("tpu")
    idx = torch.tensor([[1, 2, 4], [4, 3, 9]])
    want = F.embedding_bag(idx, w_cpu, mode="mean", max_norm=1.0)
    got = F.embedding_bag(idx.to("tpu"), w, mode="mean", max_norm=1.0)
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(w.cpu(), w_cpu)  # renormed in place alike


# ---- data-dependent sizes, determinism, errors -----------------------------------------

def test_data_dependent_sizes_native(fallback_error):
    x_cpu = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    x = x_cpu.to("tpu")
    torch.testing.assert_close(torch.nonzero(x).cpu(), torch.nonzero(x_cpu))
    torch.testing.assert_close(torch.argwhere(x).cpu(), torch.argwhere(x_cpu))
    torch.testing.assert_close(x[x != 0].cpu(), x_cpu[x_cpu != 0])
    torch.testing.assert_close(torch.masked_select(x, x > 0).cpu(), torch.masked_select(x_cpu, x_cpu > 0))
    r = torch.tensor([2, 0, 3])
    torch.testing.assert_close(torch.repeat_interleave(r.to("tpu")).cpu(), torch.repeat_interleave(r))
    torch.testing.assert_close(torch.nonzero_static(x, size=5, fill_value=-3).cpu(),
                               torch.nonzero_static(x_cpu, size=5, fill_value=-3))
    assert torch.count_nonzero(x, dim=1).cpu().tolist() == [1, 2]
    assert torch.nonzero(torch.zeros(3, 0, device="tpu")).shape == (0, 2)


def test_index_put_accumulate_is_deterministic():
    torch.manual_seed(3)
    idx = torch.randint(0, 50, (200000,), device="tpu")
    vals = torch.randn(200000, 16, device="tpu")
    first = torch.zeros(50, 16, device="tpu").index_put_((idx,), vals, accumulate=True)
    for _ in range(3):
        again = torch.zeros(50, 16, device="tpu").index_put_((idx,), vals, accumulate=True)
        assert torch.equal(again.cpu(), first.cpu())
    want = torch.zeros(50, 16, dtype=torch.float64).index_put_(
        (idx.cpu(),), vals.cpu().double(), accumulate=True)
    torch.testing.assert_close(first.cpu().double(), want, rtol=1e-4, atol=1e-3)


def test_index_put_duplicates_last_write_wins():
    x = torch.zeros(4, device="tpu")
    x[torch.tensor([1, 1, 1], device="tpu")] = torch.tensor([1.0, 2.0, 3.0], device="tpu")
    assert x.cpu().tolist() == [0.0, 3.0, 0.0, 0.0]


ERRORS = {
    "getitem": (IndexError, "index 7 is out of bounds for dimension 0 with size 5",
                lambda x, i: x[i]),
    "getitem_negative": (IndexError, "index -6 is out of bounds for dimension 0 with size 5",
                         lambda x, i: x[i - 13]),
    "index_put": (IndexError, "index 7 is out of bounds for dimension 0 with size 5",
                  lambda x, i: x.index_put_((i,), torch.tensor(1.0, device=x.device))),
    "take": (IndexError, "out of range: tried to access index 7 on a tensor of 5 elements.",
             lambda x, i: torch.take(x[:, 0].contiguous(), i)),
    "put_accumulate": (IndexError, "out of range: tried to access index 7",
                       lambda x, i: x[:, 0].contiguous().put_(i, torch.ones(1, device=x.device), accumulate=True)),
    "index_fill": (IndexError, "index 7 is out of bounds for dimension 0 with size 5",
                   lambda x, i: x.index_fill(0, i, 2.0)),
    "index_copy": (IndexError, "index_copy_(): index 7 is out of bounds",
                   lambda x, i: x.index_copy(0, i, torch.ones(1, 3, device=x.device))),
    "scatter_reduce": (RuntimeError, "index 7 is out of bounds for dimension 0 with size 5",
                       lambda x, i: x.scatter_reduce(0, i.reshape(1, 1), torch.ones(1, 1, device=x.device), "amax")),
    "index_reduce": (IndexError, "index out of range in self",
                     lambda x, i: x.index_reduce(0, i, torch.ones(1, 3, device=x.device), "prod")),
    "embedding_bag": (RuntimeError, "Index 0 of input takes value 7 which is not in the valid range [0, 5)",
                      lambda x, i: F.embedding_bag(i, x, torch.zeros(1, dtype=torch.long, device=x.device))),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_out_of_range_raises_like_cpu(name):
    exc, msg, fn = ERRORS[name]
    with pytest.raises(exc, match=None):
        fn(torch.ones(5, 3), torch.tensor([7]))
    x = torch.ones(5, 3, device="tpu")
    before = x.cpu().clone()
    torch_tpu.reset_counts()
    with pytest.raises(exc) as info:
        r = fn(x, torch.tensor([7], device="tpu"))
        torch.tpu.synchronize()
        r.cpu()
    assert msg in str(info.value)
    assert torch_tpu.fallback_counts() == {}
    torch.testing.assert_close(x.cpu(), before)  # nothing written
    torch.testing.assert_close((x + 1).cpu(), before + 1)  # the stream is usable again


def test_cpu_index_tensor_falls_back_not_raises():
    x = torch.arange(10.0).to("tpu")
    torch.testing.assert_close(x[torch.tensor([3, 1])].cpu(), torch.tensor([3.0, 1.0]))


def test_out_variants_native(fallback_error):
    x_cpu = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    x = x_cpu.to("tpu")
    o = torch.empty(0, dtype=torch.long, device="tpu")
    torch.nonzero(x, out=o)
    torch.testing.assert_close(o.cpu(), torch.nonzero(x_cpu))
    o = torch.empty(7, device="tpu")
    torch.masked_select(x, x > 0, out=o)
    torch.testing.assert_close(o.cpu(), torch.masked_select(x_cpu, x_cpu > 0))
    o = torch.empty(3, device="tpu")
    torch.take(x, torch.tensor([5, 0, 1], device="tpu"), out=o)
    torch.testing.assert_close(o.cpu(), torch.take(x_cpu, torch.tensor([5, 0, 1])))
    r = torch.empty(0, dtype=torch.long, device="tpu")
    torch.ops.aten.repeat_interleave.Tensor_out(torch.tensor([1, 0, 2], device="tpu"), out=r)
    assert r.cpu().tolist() == [0, 2, 2]


# ---- embedding_dense_backward in half types ---------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("padding_idx,scale", [(-1, False), (3, False), (-1, True)])
@pytest.mark.parametrize("dim", [96, 1300])  # 1300: rows summed over several column blocks
def test_embedding_dense_backward_half(dtype, padding_idx, scale, dim, fallback_error):
    """Each weight row is summed in float32 and rounded once: tpu's float32
    backward rounded to the dtype, bit for bit, and CPU's own half-type
    result within one rounding per accumulated position."""
    g = torch.Generator().manual_seed(7)
    num_weights = 50
    idx = torch.randint(0, num_weights, (6, 37), generator=g)
    idx[0, :9] = 3  # a row with many positions, the padding row when padding_idx == 3
    grad = torch.randn(6, 37, dim, generator=g).to(dtype)
    got = torch.ops.aten.embedding_dense_backward(grad.to("tpu"), idx.to("tpu"), num_weights,
                                                  padding_idx, scale)
    assert got.dtype == dtype and got.shape == (num_weights, dim)
    got32 = torch.ops.aten.embedding_dense_backward(grad.float().to("tpu"), idx.to("tpu"), num_weights,
                                                    padding_idx, scale)
    torch.testing.assert_close(got.cpu(), got32.cpu().to(dtype), rtol=0, atol=0)
    want = torch.ops.aten.embedding_dense_backward(grad, idx, num_weights, padding_idx, scale)
    torch.testing.assert_close(got.cpu().float(), want.float(), rtol=3e-2, atol=3e-2)
    if padding_idx >= 0:
        assert bool((got[padding_idx] == 0).all())
