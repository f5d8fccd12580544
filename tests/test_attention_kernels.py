"""scaled_dot_product_attention on tpu: the overrideable SDPA route into the
runtime's tiled attention kernels (forward and backward), against CPU's
F.scaled_dot_product_attention, with zero fallbacks.

Dropout cannot be compared with the CPU element for element, so its tests
recover the tpu's own dropout mask (value = identity makes the output the
dropped attention matrix itself), check its keep rate, and compare forward
and gradients of a second run under the same seed with a CPU math reference
that uses that mask.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu.tools import coverage

TPU = torch.device("tpu")
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
OP = "nn.functional.scaled_dot_product_attention"
FWD = "_scaled_dot_product_fused_attention_overrideable"
BWD = "_scaled_dot_product_fused_attention_overrideable_backward"


def tol(dtype):
    return {torch.float64: (1e-10, 1e-10), torch.float32: (2e-5, 2e-5),
            torch.float16: (4e-3, 4e-3), torch.bfloat16: (3e-2, 3e-2)}[dtype]


@pytest.fixture(autouse=True)
def no_fallback():
    mode = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("error")
    torch_tpu.reset_counts()
    yield
    torch_tpu.set_fallback_mode(mode)


# ---- OpInfo ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def opinfo():
    ops = coverage.select_ops(coverage.load_op_db(), [OP])
    assert ops, f"{OP} is not in op_db"
    return ops[0]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opinfo_check_pair(opinfo, dtype):
    torch_tpu.set_fallback_mode("silent")
    rec = coverage.check_pair(opinfo, dtype)
    assert rec["cpu_ran"] > 0, rec["message"]
    # op_db marks the op non-deterministic (dropout), so check_pair runs every
    # sample without comparing values: "unchecked" is its best verdict here;
    # test_opinfo_samples_match_cpu compares the deterministic samples.
    assert rec["status"] in ("pass", "unchecked"), rec
    assert not rec["fallbacks"], rec["fallbacks"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opinfo_samples_match_cpu(opinfo, dtype):
    ran = 0
    for s in opinfo.sample_inputs("cpu", dtype, requires_grad=True):
        if s.kwargs.get("dropout_p", 0.0) != 0.0:
            continue
        # The CPU reference runs in float64 on the same (rounded) inputs.
        args = [a.detach().double().requires_grad_(a.requires_grad) for a in [s.input, *s.args]]
        kw = {k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
              for k, v in s.kwargs.items()}
        want = opinfo(*args, **kw)
        g = torch.randn_like(want)
        want.backward(g)
        dev = [a.detach().to(dtype).to(TPU).requires_grad_(a.requires_grad) for a in args]
        kw = {k: (v.to(TPU) if isinstance(v, torch.Tensor) else v) for k, v in s.kwargs.items()}
        got = opinfo(*dev, **kw)
        got.backward(g.to(dtype).to(TPU))
        atol, rtol = tol(dtype)
        torch.testing.assert_close(got.cpu().double(), want, atol=atol, rtol=rtol)
        # Half types: op_db's inputs reach +-9, so softmax is peaked and the
        # backward's D = rowsum(dO * O), read from the stored half output (as
        # flash kernels do), cancels against dP; allow that rounding.
        gf = 4 if dtype in (torch.float32, torch.float64) else 16
        for a, d in zip(args, dev):
            if a.requires_grad:
                torch.testing.assert_close(d.grad.cpu().double(), a.grad, atol=atol * gf,
                                           rtol=rtol * gf)
        ran += 1
    assert ran > 0
    assert torch_tpu.fallback_counts() == {}
    assert torch_tpu.native_counts().get(FWD, 0) == ran
    assert torch_tpu.native_counts().get(BWD, 0) == ran


# ---- forward and gradients against the CPU ------------------------------------------------

# name: (B, H, Hkv, L, S, D, Dv, mask, causal, transposed)
CASES = {
    "plain": (2, 3, 3, 37, 50, 16, 16, None, False, False),
    "causal": (1, 4, 4, 130, 130, 32, 32, None, True, False),
    "causal_long_q": (1, 2, 2, 150, 70, 8, 8, None, True, False),
    "bool_mask": (2, 2, 2, 33, 65, 16, 16, "bool_ls", False, False),
    "bool_key_padding": (2, 4, 4, 20, 140, 8, 8, "bool_keys", False, True),
    "float_mask_grad": (2, 3, 3, 40, 45, 16, 8, "float_full", False, False),
    "float_mask_bcast_grad": (2, 4, 4, 70, 33, 8, 8, "float_bcast", False, False),
    "gqa": (2, 8, 2, 40, 60, 16, 16, None, False, False),
    "gqa_causal_mask": (1, 6, 3, 64, 64, 32, 32, "float_bcast", False, True),
    "head_dim_256": (1, 2, 2, 20, 30, 256, 256, None, False, False),
    "head_dim_128_causal": (1, 2, 2, 70, 90, 128, 64, None, True, False),
}


def make_mask(kind, B, H, L, S, dtype):
    g = torch.Generator().manual_seed(7)
    if kind == "bool_ls":
        m = torch.rand(L, S, generator=g) > 0.3
        m[3] = False  # a fully masked row: output and gradients 0
        return m
    if kind == "bool_keys":
        m = torch.ones(B, 1, 1, S, dtype=torch.bool)
        m[0, ..., S // 2:] = False
        return m
    shape = (B, H, L, S) if kind == "float_full" else (1, H, L, S)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype).requires_grad_()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_and_gradients(name, dtype):
    B, H, Hkv, L, S, D, Dv, mask, causal, transposed = CASES[name]
    g = torch.Generator().manual_seed(hash(name) % 1000)

    def rnd(*shape):
        if transposed:  # [B, L, H, D] memory viewed as [B, H, L, D]
            t = torch.randn(shape[0], shape[2], shape[1], shape[3], generator=g,
                            dtype=torch.float64).transpose(1, 2)
        else:
            t = torch.randn(*shape, generator=g, dtype=torch.float64)
        return t.to(dtype).requires_grad_()

    q, k, v = rnd(B, H, L, D), rnd(B, Hkv, S, D), rnd(B, Hkv, S, Dv)
    m = make_mask(mask, B, H, L, S, dtype) if mask else None
    gqa = H != Hkv
    # CPU reference in float64 (half types: the same inputs, rounded once).
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref_m = None if m is None else (m if m.dtype == torch.bool else
                                    m.detach().double().requires_grad_())
    want = F.scaled_dot_product_attention(*ref_in, attn_mask=ref_m, is_causal=causal,
                                          enable_gqa=gqa)
    go = torch.randn(want.shape, generator=g, dtype=torch.float64)
    want.backward(go)

    dev = [t.detach().to(TPU).requires_grad_() for t in (q, k, v)]
    if transposed:
        assert not dev[0].is_contiguous()
    dm = None if m is None else (m.to(TPU) if m.dtype == torch.bool else
                                 m.detach().to(TPU).requires_grad_())
    got = F.scaled_dot_product_attention(*dev, attn_mask=dm, is_causal=causal, enable_gqa=gqa)
    assert got.dtype == dtype and got.shape == want.shape
    got.backward(go.to(dtype).to(TPU))
    assert torch_tpu.fallback_counts() == {}
    assert torch_tpu.native_counts().get(FWD) == 1 and torch_tpu.native_counts().get(BWD) == 1
    atol, rtol = tol(dtype)
    scale = 1 if dtype in (torch.float32, torch.float64) else 2
    torch.testing.assert_close(got.cpu().double(), want, atol=atol, rtol=rtol)
    for d, r in zip(dev, ref_in):
        torch.testing.assert_close(d.grad.cpu().double(), r.grad, atol=atol * 4 * scale,
                                   rtol=rtol * 4 * scale)
    if dm is not None and dm.requires_grad:
        assert dm.grad.shape == m.shape
        torch.testing.assert_close(dm.grad.cpu().double(), ref_m.grad, atol=atol * 4 * scale,
                                   rtol=rtol * 4 * scale)


def test_mask_without_grad_gets_none():
    q, k, v = (torch.randn(1, 2, 8, 4, device=TPU, requires_grad=True) for _ in range(3))
    m = torch.randn(8, 8, device=TPU)
    F.scaled_dot_product_attention(q, k, v, attn_mask=m).sum().backward()
    assert m.grad is None and q.grad is not None
    assert torch_tpu.fallback_counts() == {}


def test_scale_and_rank3():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(3, n, 16, generator=g) for n in (9, 14, 14))
    want = F.scaled_dot_product_attention(q, k, v, scale=0.7)
    got = F.scaled_dot_product_attention(q.to(TPU), k.to(TPU), v.to(TPU), scale=0.7)
    torch.testing.assert_close(got.cpu(), want, atol=2e-5, rtol=2e-5)
    assert torch_tpu.native_counts().get(FWD) == 1


def test_unsupported_arguments_take_the_math_route():
    # head dim 300 is beyond the kernel: the math backend (native ops) runs it.
    torch_tpu.set_fallback_mode("silent")
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 6, 300, generator=g) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v)
    got = F.scaled_dot_product_attention(q.to(TPU), k.to(TPU), v.to(TPU))
    torch.testing.assert_close(got.cpu(), want, atol=2e-5, rtol=2e-5)
    assert FWD not in torch_tpu.native_counts()
    # PyTorch's own errors still surface (heads mismatch without enable_gqa).
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(torch.randn(1, 4, 5, 8, device=TPU),
                                       torch.randn(1, 2, 5, 8, device=TPU),
                                       torch.randn(1, 2, 5, 8, device=TPU))


# ---- dropout ---------------------------------------------------------------------------------

def dropout_run(seed, q, k, v, p, **kw):
    torch.manual_seed(seed)
    return F.scaled_dot_product_attention(q, k, v, dropout_p=p, **kw)


def test_dropout_reproducible():
    q, k, v = (torch.randn(2, 3, 40, 16, device=TPU) for _ in range(3))
    a = dropout_run(11, q, k, v, 0.3)
    b = dropout_run(11, q, k, v, 0.3)
    c = dropout_run(12, q, k, v, 0.3)
    assert torch.equal(a.cpu(), b.cpu())
    assert not torch.equal(a.cpu(), c.cpu())
    assert torch_tpu.fallback_counts() == {}


def recovered_matrix(seed, B, H, L, S, p, q, k, dtype=torch.float64, **kw):
    """The dropped attention matrix P∘Z/(1-p) of a run: value = identity."""
    eye = torch.eye(S, dtype=dtype).expand(B, k.shape[1], S, S).to(TPU)
    return dropout_run(seed, q, k, eye, p, **kw).cpu()


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_keep_rate(p):
    B, H, L, S = 2, 4, 64, 96
    zeros = torch.zeros(B, H, L, 8, dtype=torch.float64, device=TPU)
    keys = torch.zeros(B, H, S, 8, dtype=torch.float64, device=TPU)
    a = recovered_matrix(5, B, H, L, S, p, zeros, keys)  # uniform P = 1/S
    kept = a != 0
    n = kept.numel()
    rate = kept.double().mean().item()
    assert abs(rate - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n), rate
    torch.testing.assert_close(a[kept], torch.full_like(a[kept], 1 / ((1 - p) * S)))
    # rows differ (not one mask repeated)
    assert not torch.equal(kept[0, 0, 0], kept[0, 0, 1])
    assert not torch.equal(kept[0, 0], kept[0, 1])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("causal,gqa", [(False, False), (True, False), (False, True)])
def test_dropout_forward_and_gradients_follow_the_mask(dtype, causal, gqa):
    B, H, L, S, D, p = 2, 4, 24, 32, 8, 0.4
    Hkv = 2 if gqa else H
    g = torch.Generator().manual_seed(9)
    q = torch.randn(B, H, L, D, generator=g, dtype=dtype)
    k = torch.randn(B, Hkv, S, D, generator=g, dtype=dtype)
    v = torch.randn(B, Hkv, S, D, generator=g, dtype=dtype)
    kw = dict(is_causal=causal, enable_gqa=gqa)
    a = recovered_matrix(21, B, H, L, S, p, q.to(TPU), k.to(TPU), dtype=dtype, **kw)
    mask = a != 0
    allowed = torch.ones(L, S, dtype=torch.bool).tril() if causal else torch.ones(L, S).bool()
    rate = mask[..., allowed].double().mean().item()
    assert 0.45 < rate < 0.75, rate  # about 1 - p kept

    # CPU math reference with that mask.
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    rep = H // Hkv
    kk, vv = (t.repeat_interleave(rep, dim=1) for t in ref[1:])
    s = ref[0] @ kk.transpose(-1, -2) / math.sqrt(D)
    if causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    want = (torch.softmax(s, -1) * mask / (1 - p)) @ vv
    go = torch.randn(want.shape, generator=g, dtype=torch.float64)
    want.backward(go)

    dev = [t.to(TPU).requires_grad_() for t in (q, k, v)]
    got = dropout_run(21, *dev, p, **kw)
    got.backward(go.to(dtype).to(TPU))
    assert torch_tpu.fallback_counts() == {}
    atol = 1e-9 if dtype == torch.float64 else 1e-4
    torch.testing.assert_close(got.cpu().double(), want, atol=atol, rtol=atol)
    for d, r in zip(dev, ref):
        torch.testing.assert_close(d.grad.cpu().double(), r.grad, atol=atol * 4, rtol=atol * 4)
    # and a different mask would not match
    other = recovered_matrix(22, B, H, L, S, p, q.to(TPU), k.to(TPU), dtype=dtype, **kw) != 0
    assert not torch.equal(other, mask)


# ---- memory ---------------------------------------------------------------------------------

def test_memory_linear_in_sequence_length():
    """Forward and backward at L = S = 2048 allocate far less than one L x S matrix."""
    L, H, D = 2048, 2, 32
    q, k, v = (torch.randn(1, H, L, D, device=TPU, requires_grad=True) for _ in range(3))
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.sum().backward()
    torch.tpu.synchronize()
    peak = torch.tpu.max_memory_allocated() - base
    assert peak < H * L * L * 4 / 4, peak  # a quarter of the score matrices
    assert torch_tpu.fallback_counts() == {}
