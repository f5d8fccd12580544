"""The sort/search and scan families: native on tpu and equal to CPU.

(The OpInfo entries: test_opinfo_native.py.) (b) gradients against CPU autograd with no
fallback; (c) what OpInfo samples do not reach: tie orders of the unstable
algorithms, CPU's radix-sort path, bitwise-equal scans, out= and in-place
forms, searchsorted's sorter.
"""
import pytest
import torch

import torch_tpu


GRADS = {
    "sort": lambda x: torch.sort(x, -1)[0],
    "sort_desc_dim0": lambda x: torch.sort(x, 0, descending=True)[0],
    "msort": lambda x: torch.msort(x),
    "topk": lambda x: torch.topk(x, 3)[0],
    "kthvalue": lambda x: torch.kthvalue(x, 2, 0)[0],
    "median": lambda x: torch.median(x),
    "median_dim": lambda x: torch.median(x, -1)[0],
    "nanmedian": lambda x: torch.nanmedian(x),
    "nanmedian_dim": lambda x: torch.nanmedian(x, 0, True)[0],
    "mode": lambda x: torch.mode(x, -1)[0],
    "cumsum": lambda x: torch.cumsum(x, -1),
    "cumsum_dim0": lambda x: torch.cumsum(x, 0),
    "cumprod": lambda x: torch.cumprod(x, -1),
    "cumprod_with_zero": lambda x: torch.cumprod(x * (torch.arange(9, device=x.device) != 3), 1),
    "cummax": lambda x: torch.cummax(x, -1)[0],
    "cummin": lambda x: torch.cummin(x, 0)[0],
    "logcumsumexp": lambda x: torch.logcumsumexp(x, -1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradients_native(name, dtype):
    f = GRADS[name]
    torch.manual_seed(0)
    x = torch.randn(6, 9, dtype=dtype)
    xc = x.clone().requires_grad_()
    out = f(xc)
    g = torch.randn_like(out)
    out.backward(g)
    xt = x.to("tpu").requires_grad_()
    torch_tpu.reset_counts()
    f(xt).backward(g.to("tpu"))
    assert torch_tpu.fallback_counts() == {}
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)


def _same(a, b):
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    for u, v in zip(a, b):
        v = v.cpu()
        assert u.dtype == v.dtype and u.shape == v.shape
        torch.testing.assert_close(v, u, rtol=0, atol=0, equal_nan=True)


TIES = {
    "sort": lambda x: torch.sort(x, -1),
    "sort_desc_dim0": lambda x: torch.sort(x, 0, descending=True),
    "argsort": lambda x: torch.argsort(x, -1),
    "topk_nth_element": lambda x: torch.topk(x, 7),
    "topk_partial_sort": lambda x: torch.topk(x, 2, largest=False),
    "topk_unsorted": lambda x: torch.topk(x, 9, sorted=False),
    "kthvalue": lambda x: torch.kthvalue(x, 40),
    "median_dim": lambda x: torch.median(x, -1),
    "nanmedian_dim": lambda x: torch.nanmedian(x, -1),
    "mode": lambda x: torch.mode(x, -1),
    "cummax": lambda x: torch.cummax(x, 1),
    "cummin": lambda x: torch.cummin(x, 0),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int8], ids=str)
@pytest.mark.parametrize("name", sorted(TIES))
def test_tie_order_equals_cpu(name, dtype):
    """Many equal values (and NaNs): indices must equal CPU's, not just values."""
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 6, (9, 300), generator=g).to(dtype)
    if dtype.is_floating_point:
        x[::4, ::9] = float("nan")
    torch_tpu.reset_counts()
    _same(TIES[name](x), TIES[name](x.to("tpu")))
    assert torch_tpu.fallback_counts() == {}


def test_radix_path_and_large_sorts():
    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, 50, (40000,), generator=g)  # CPU: stable radix sort
    _same(torch.sort(x), torch.sort(x.to("tpu")))
    _same(torch.sort(x, descending=True), torch.sort(x.to("tpu"), descending=True))
    y = torch.rand(100000, generator=g)
    _same(torch.sort(y), torch.sort(y.to("tpu")))
    _same(torch.topk(y, 50), torch.topk(y.to("tpu"), 50))
    e = torch.randint(0, 3, (4, 1))  # a stride-0 sort dim keeps the identity order
    _same(torch.sort(e.expand(4, 50), 1), torch.sort(e.to("tpu").expand(4, 50), 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64,
                                   torch.int32, torch.uint8], ids=str)
def test_scans_bitwise(dtype):
    g = torch.Generator().manual_seed(3)
    x = (torch.rand(300, 257, generator=g) * 4 - 1).to(dtype)
    for f in (lambda t: torch.cumsum(t, 0), lambda t: torch.cumsum(t, 1),
              lambda t: torch.cumprod(t[:, :20] if t.is_floating_point() else t[:, :20] % 3, 1),
              lambda t: torch.cumsum(t.t(), 1, dtype=torch.float64)):
        _same(f(x), f(x.to("tpu")))
    if dtype.is_floating_point:
        _same(torch.logcumsumexp(x, 0), torch.logcumsumexp(x.to("tpu"), 0))


def test_out_and_inplace_forms():
    x = torch.randn(5, 7)
    t = x.to("tpu")
    v, i = torch.empty(0, device="tpu"), torch.empty(0, dtype=torch.long, device="tpu")
    torch_tpu.reset_counts()
    torch.sort(t, 1, out=(v, i))
    _same(torch.sort(x, 1), (v, i))
    torch.topk(t, 2, out=(v, i))
    _same(torch.topk(x, 2), (v, i))
    o = torch.empty(0, device="tpu")
    torch.cumsum(t, 0, out=o)
    _same(torch.cumsum(x, 0), o)
    y, yt = x.clone(), t.clone()
    y[1:4].cumsum_(1)
    yt[1:4].cumsum_(1)
    _same(y, yt)
    assert torch_tpu.fallback_counts() == {}


def test_searchsorted_forms():
    g = torch.Generator().manual_seed(4)
    bd = torch.sort(torch.randint(0, 20, (3, 30), generator=g).float(), 1).values
    v = torch.randint(-2, 22, (3, 11), generator=g).float()
    torch_tpu.reset_counts()
    for kw in ({}, {"right": True}, {"side": "right"}, {"out_int32": True}):
        _same(torch.searchsorted(bd, v, **kw), torch.searchsorted(bd.to("tpu"), v.to("tpu"), **kw))
        _same(torch.searchsorted(bd[1], v, **kw),
              torch.searchsorted(bd[1].to("tpu"), v.to("tpu"), **kw))
    _same(torch.searchsorted(bd[0], 7.5), torch.searchsorted(bd[0].to("tpu"), 7.5))
    _same(torch.bucketize(v, bd[2], right=True), torch.bucketize(v.to("tpu"), bd[2].to("tpu"), right=True))
    perm = torch.stack([torch.randperm(30, generator=g) for _ in range(3)])
    unsorted = torch.gather(bd, 1, perm)
    sorter = torch.argsort(unsorted, dim=1, stable=True)
    _same(torch.searchsorted(unsorted, v, sorter=sorter),
          torch.searchsorted(unsorted.to("tpu"), v.to("tpu"), sorter=sorter.to("tpu")))
    assert torch_tpu.fallback_counts() == {}
    with pytest.raises(RuntimeError):
        torch.searchsorted(bd.to("tpu"), v.to("tpu"), side="left", right=True)


def test_multinomial_draws():
    torch_tpu.reset_counts()
    p = torch.tensor([[0.0, 1.0, 2.0, 0.0, 3.0, 4.0], [5.0, 0.0, 0.0, 1.0, 1.0, 1.0]], device="tpu")
    s = torch.multinomial(p, 4).cpu()
    for row, probs in zip(s, p.cpu()):
        assert len(set(row.tolist())) == 4 and all(probs[i] > 0 for i in row)
    torch.manual_seed(5)
    a = torch.multinomial(p, 20000, replacement=True).cpu()
    torch.manual_seed(5)
    b = torch.multinomial(p, 20000, replacement=True).cpu()
    assert torch.equal(a, b)
    freq = torch.stack([torch.bincount(r, minlength=6) for r in a]).double() / 20000
    torch.testing.assert_close(freq, (p / p.sum(1, keepdim=True)).cpu().double(), atol=0.02, rtol=0)
    assert torch_tpu.fallback_counts() == {}
    with pytest.raises(RuntimeError):
        torch.multinomial(torch.tensor([1.0, -1.0], device="tpu"), 1).cpu()


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32, torch.float16], ids=str)
def test_randperm(dtype):
    torch_tpu.reset_counts()
    for n in (0, 1, 17, 1000):
        g = torch.Generator(device="tpu").manual_seed(11)
        a = torch.randperm(n, dtype=dtype, device="tpu", generator=g).cpu()
        assert a.dtype == dtype
        assert torch.equal(a.sort().values, torch.arange(n, dtype=dtype))
        g.manual_seed(11)
        assert torch.equal(a, torch.randperm(n, dtype=dtype, device="tpu", generator=g).cpu())
    torch.manual_seed(3)
    x = torch.randperm(1000, device="tpu").cpu()
    y = torch.randperm(1000, device="tpu").cpu()
    assert not torch.equal(x, y)  # the generator moved on
    assert torch_tpu.fallback_counts() == {}
