"""Complex math native on tpu, against CPU, with no CPU fallback: the ops
Llama-style RoPE uses (view_as_complex, polar, complex mul, view_as_real,
complex gather/index of the cache), torch._assert_async (TorchTitan's
position check), and flex_attention, eager and compiled, forward and
backward (torch 2.14's device allowlist is widened by
torch_tpu/integrations/torch_internals.py)."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from conftest import no_fallback


def _freqs(dim, end, device):
    freqs = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, device=device)[: dim // 2].float() / dim))
    t = torch.arange(end, device=device, dtype=torch.float32)
    freqs = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(freqs), freqs)


def _rope(xq, xk, fc):
    """TorchTitan 0.3's ComplexRoPE.apply_rotary_emb, verbatim in behaviour."""
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    fc = fc[: xq.shape[1]].view(1, xq.shape[1], 1, xq_.shape[-1])
    return (torch.view_as_real(xq_ * fc).flatten(3).type_as(xq),
            torch.view_as_real(xk_ * fc).flatten(3).type_as(xk))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("compiled", [False, True])
def test_rope_forward_backward(dtype, compiled):
    torch.manual_seed(0)
    xq = torch.randn(2, 16, 4, 32, dtype=dtype)
    xk = torch.randn(2, 16, 2, 32, dtype=dtype)

    def step(q, k, device):
        a, b = _rope(q, k, _freqs(32, 64, device))
        return a, b, (a.float().square().sum() + (b.float() * 3).sum())

    qc, kc = xq.clone().requires_grad_(), xk.clone().requires_grad_()
    a, b, loss = step(qc, kc, "cpu")
    loss.backward()
    fn = torch.compile(step, backend="tpu") if compiled else step
    with no_fallback():
        qt, kt = xq.to("tpu").requires_grad_(), xk.to("tpu").requires_grad_()
        at, bt, losst = fn(qt, kt, "tpu")
        losst.backward()
    for got, want in [(at, a), (bt, b), (qt.grad, qc.grad), (kt.grad, kc.grad)]:
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want)


def test_polar_and_complex_products():
    torch.manual_seed(1)
    r, th = torch.rand(6, 5), torch.randn(5) * 4
    x = torch.randn(6, 5, dtype=torch.complex64)
    y = torch.randn(5, dtype=torch.complex64)
    w = torch.randn(6, 5, dtype=torch.complex128)
    real = torch.randn(6, 5)
    dev = {n: t.to("tpu") for n, t in dict(r=r, th=th, x=x, y=y, w=w, real=real).items()}
    cases = [
        lambda t: torch.polar(t["r"], t["th"]),
        lambda t: torch.polar(t["r"].double(), t["th"].double()),
        lambda t: t["x"] * t["y"],                 # broadcast
        lambda t: t["x"].mT * t["y"][:, None].expand(5, 6),  # strided operands
        lambda t: t["x"] * t["w"],                 # complex64 * complex128 -> complex128
        lambda t: t["real"] * t["x"],              # real self, complex other
        lambda t: 2.5 * t["x"],
        lambda t: t["x"].clone().mul_(t["y"]),     # in place
        lambda t: torch.mul(t["x"], t["y"], out=torch.empty_like(t["x"])),
    ]
    with no_fallback():
        got = [f(dev) for f in cases]
    for g, f in zip(got, cases):
        want = f(dict(r=r, th=th, x=x, y=y, w=w, real=real))
        assert g.dtype == want.dtype
        torch.testing.assert_close(g.cpu(), want)


def test_complex_cache_gather_and_index():
    """RoPE caches indexed by per-batch positions (TorchTitan's gather path)."""
    torch.manual_seed(2)
    c = torch.polar(torch.rand(16, 4), torch.randn(16, 4))
    pos = torch.randint(0, 16, (3, 7))
    ops = [lambda c, p: c[p],
           lambda c, p: torch.gather(c[None, :, None, :].expand(3, -1, -1, -1), 1,
                                     p.view(3, 7, 1, 1).expand(3, 7, 1, 4)),
           lambda c, p: c.index_select(0, p.flatten())]
    ct, pt = c.to("tpu"), pos.to("tpu")
    with no_fallback():
        got = [f(ct, pt) for f in ops]
    for g, f in zip(got, ops):
        assert g.dtype == torch.complex64
        torch.testing.assert_close(g.cpu(), f(c, pos), rtol=0, atol=0)


def test_complex_forms_without_kernels_fall_back_counted():
    x = torch.randn(4, dtype=torch.complex128)
    xt = x.to("tpu")
    torch_tpu.reset_counts()
    torch.testing.assert_close(xt[torch.tensor([0, 2], device="tpu")].cpu(), x[[0, 2]])
    torch.testing.assert_close(torch.mul(xt, xt, out=torch.empty(4, dtype=torch.complex64,
                                                                device="tpu")).cpu(),
                               (x * x).to(torch.complex64))
    counts = torch_tpu.fallback_counts()
    assert counts.get("aten::index.Tensor", 0) == 1 and counts.get("aten::mul.out", 0) == 1


def test_assert_async_surfaces_at_the_next_sync():
    x = torch.arange(10, device="tpu")
    with no_fallback():
        torch._assert_async(torch.all(x <= 9), "position_ids exceed max_valid_pos=9")
        torch._assert_async(torch.tensor(float("nan"), device="tpu"))  # NaN is nonzero
    torch._assert_async(torch.all(x <= 5), "position_ids exceed max_valid_pos=5")
    with pytest.raises(RuntimeError, match="assert_async.*position_ids exceed max_valid_pos=5"):
        torch.tpu.synchronize()
    torch._assert_async(torch.tensor(0, device="tpu"))
    with pytest.raises(RuntimeError, match="single nonzero value"):
        x.sum().item()
    for bad in (torch.ones(2, device="tpu"), torch.ones(0, device="tpu")):  # as on the CPU
        with pytest.raises(RuntimeError, match="ambiguous"):
            torch._assert_async(bad)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("gqa", [False, True])
def test_flex_attention_forward_backward(compiled, gqa):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch.manual_seed(3)
    B, H, S, D = 2, 4, 64, 16
    Hkv = 2 if gqa else H
    q = torch.randn(B, H, S, D)
    k, v = torch.randn(B, Hkv, S, D), torch.randn(B, Hkv, S, D)
    qc, kc, vc = (t.clone().requires_grad_() for t in (q, k, v))
    # CPU flex_attention has no backward: the reference is causal SDPA
    out = F.scaled_dot_product_attention(qc, kc, vc, is_causal=True, enable_gqa=gqa)
    out.square().sum().backward()
    fn = torch.compile(flex_attention, backend="tpu") if compiled else flex_attention
    with no_fallback():
        qt, kt, vt = (t.to("tpu").requires_grad_() for t in (q, k, v))
        mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, B=None, H=None, Q_LEN=S,
                                 KV_LEN=S, device="tpu")
        ot = fn(qt, kt, vt, block_mask=mask, enable_gqa=gqa)
        ot.square().sum().backward()
    torch.testing.assert_close(ot.cpu(), out.detach())
    for a, b in ((qt, qc), (kt, kc), (vt, vc)):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-4, atol=1e-5)
    assert torch_tpu.integrations.status()["torch"].startswith("applied")


# Complex scans, products and norms, table-driven against CPU: (name, fn)
# rows run on complex64 and complex128; norms return the part dtype.
def _cx(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    re = torch.empty(shape, dtype=torch.float64).uniform_(-1.2, 1.2, generator=g)
    im = torch.empty(shape, dtype=torch.float64).uniform_(-1.2, 1.2, generator=g)
    return torch.complex(re, im).to(dtype)


CX_REDUCTIONS = [
    ("cumsum0", lambda a: torch.cumsum(a, 0)),
    ("cumsum_last", lambda a: a.cumsum(-1)),
    ("cumsum_strided", lambda a: a.transpose(0, 2).cumsum(1)),
    ("cumsum_inplace", lambda a: a.clone().cumsum_(1)),
    ("cumsum_dtype", lambda a: torch.cumsum(a, 1, dtype=torch.complex128)),
    ("cumsum_real_to_complex", lambda a: torch.cumsum(a.real, 1, dtype=torch.complex64)),
    ("cumprod", lambda a: torch.cumprod(a, 1)),
    ("cumprod_last", lambda a: a.cumprod(-1)),
    ("prod_all", lambda a: a.prod()),
    ("prod_dim", lambda a: a.prod(1)),
    ("prod_keepdim", lambda a: a.prod(-1, keepdim=True)),
    ("prod_dtype", lambda a: a.prod(0, dtype=torch.complex128)),
    ("vector_norm", lambda a: torch.linalg.vector_norm(a)),
    ("vector_norm_dims", lambda a: torch.linalg.vector_norm(a, dim=(0, 2))),
    ("vector_norm_ord1", lambda a: torch.linalg.vector_norm(a, 1, dim=-1)),
    ("vector_norm_inf", lambda a: torch.linalg.vector_norm(a, float("inf"), dim=1)),
    ("vector_norm_ninf", lambda a: torch.linalg.vector_norm(a, -float("inf"), dim=1)),
    ("vector_norm_ord0", lambda a: torch.linalg.vector_norm(a, 0, dim=1)),
    ("vector_norm_ord3", lambda a: torch.linalg.vector_norm(a, 3.5, dim=0, keepdim=True)),
    ("norm", lambda a: a.norm()),
    ("norm_p_dim", lambda a: torch.norm(a, p=1, dim=1)),
    ("linalg_norm_vector", lambda a: torch.linalg.norm(a[0, 0])),
    ("linalg_norm_fro", lambda a: torch.linalg.norm(a[0], "fro")),
    ("linalg_norm_default", lambda a: torch.linalg.norm(a[0])),
    ("abs_norm", lambda a: a.abs().pow(2).sum(-1).sqrt()),
    # var/std: var(real parts) + var(imag parts), a real result
    ("var_all", lambda a: a.var()),
    ("var_dim", lambda a: torch.var(a, 1)),
    ("var_dims_keepdim", lambda a: a.var((0, 2), keepdim=True)),
    ("var_correction0", lambda a: torch.var(a, -1, correction=0)),
    ("var_correction_big", lambda a: torch.var(a, 0, correction=5)),  # n - c < 0: inf
    ("var_strided", lambda a: a.transpose(0, 2).var(1)),
    ("var_unbiased_false", lambda a: a.var(1, unbiased=False)),
    ("std_all", lambda a: a.std()),
    ("std_dim", lambda a: torch.std(a, 2)),
    ("std_correction2", lambda a: a.std((1, 2), correction=2, keepdim=True)),
    ("var_offset", lambda a: (a + (1e3 - 2e3j)).var(1)),  # a large mean: a two-pass sum
    # logcumsumexp: CPU's complex _log_add_exp_helper, accumulated in complex128
    ("logcumsumexp0", lambda a: torch.logcumsumexp(a * 3, 0)),
    ("logcumsumexp_last", lambda a: (a * 5).logcumsumexp(-1)),
    ("logcumsumexp_strided", lambda a: torch.logcumsumexp(a.transpose(0, 2), 1)),
]


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("name,fn", CX_REDUCTIONS, ids=[c[0] for c in CX_REDUCTIONS])
def test_complex_scans_products_norms_match_cpu(name, fn, dtype):
    x = _cx((3, 4, 5), dtype, 30)
    want = fn(x)
    with no_fallback():
        got = fn(x.to("tpu"))
        got_cpu = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = dict(rtol=1e-5, atol=1e-5) if want.dtype in (torch.complex64, torch.float32) \
        else dict(rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(got_cpu, want, **tol)


def test_complex_scans_and_norms_out_and_empty():
    x = _cx((4, 3), torch.complex64, 31)
    with no_fallback():
        out = torch.empty(4, 3, dtype=torch.complex64, device="tpu")
        torch.cumsum(x.to("tpu"), 0, out=out)
        n_out = torch.empty(3, device="tpu")
        torch.linalg.vector_norm(x.to("tpu"), dim=0, out=n_out)
        got = (out.cpu(), n_out.cpu(), torch.empty(0, 3, dtype=torch.complex128,
                                                  device="tpu").prod(0).cpu())
    torch.testing.assert_close(got[0], torch.cumsum(x, 0))
    torch.testing.assert_close(got[1], torch.linalg.vector_norm(x, dim=0))
    torch.testing.assert_close(got[2], torch.ones(3, dtype=torch.complex128))


def test_complex_var_std_out_empty_and_nan():
    x = _cx((4, 3), torch.complex64, 32)
    x[1, 2] = complex(float("nan"), 0.0)
    with no_fallback():
        v_out = torch.empty(3, device="tpu")
        torch.var(x.to("tpu"), 0, out=v_out)
        s_out = torch.empty(4, device="tpu")
        torch.std(x.to("tpu"), 1, out=s_out)
        empty = torch.empty(0, 3, dtype=torch.complex128, device="tpu")
        got = (v_out.cpu(), s_out.cpu(), empty.var(0).cpu(), empty.std().cpu())
    want = (torch.var(x, 0), torch.std(x, 1), torch.empty(0, 3, dtype=torch.complex128).var(0),
            torch.empty(0, 3, dtype=torch.complex128).std())
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, equal_nan=True)



def test_complex_logcumsumexp_special_values_and_out():
    inf, nan = float("inf"), float("nan")
    rows = [[complex(-inf, 1), complex(-inf, 2), 0j, complex(2, 1)],
            [complex(inf, 0.5), complex(inf, 0.5), complex(1, 2), 0j],
            [complex(1, 1), complex(1, nan), complex(3, 0), 0j],
            [complex(-inf, 0), complex(inf, 1), complex(-inf, 3), complex(5, -7)]]
    for dtype in (torch.complex64, torch.complex128):
        x = torch.tensor(rows, dtype=dtype)
        with no_fallback():
            got = torch.logcumsumexp(x.to("tpu"), 1).cpu()
            out = torch.empty(4, 4, dtype=dtype, device="tpu")
            torch.logcumsumexp(x.to("tpu"), 0, out=out)
            got0 = out.cpu()
            empty = torch.logcumsumexp(torch.empty(0, 3, dtype=dtype, device="tpu"), 0).cpu()
        torch.testing.assert_close(got, torch.logcumsumexp(x, 1), equal_nan=True)
        torch.testing.assert_close(got0, torch.logcumsumexp(x, 0), equal_nan=True)
        assert empty.shape == (0, 3) and empty.dtype == dtype


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("fn,kw", [
    (torch.var_mean, {}), (torch.std_mean, {}), (torch.var_mean, {"dim": 1}),
    (torch.std_mean, {"dim": (0, 2), "keepdim": True}), (torch.var_mean, {"dim": -1, "correction": 0}),
    (torch.std_mean, {"dim": 0, "correction": 4}),
], ids=["var_mean", "std_mean", "var_mean_dim", "std_mean_dims_keepdim", "var_mean_corr0",
        "std_mean_corr_big"])
def test_complex_var_mean_std_mean_match_cpu(fn, kw, dtype):
    x = _cx((3, 4, 5), dtype, 33) + (2 - 1j)
    want = fn(x, **kw)
    with no_fallback():
        got = [t.cpu() for t in fn(x.to("tpu"), **kw)]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w)