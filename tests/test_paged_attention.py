"""torch.ops.tpu.paged_kv_write_ / torch.ops.tpu.paged_attention (issue 26):
the paged KV-cache ops of a serving engine's attention backend, on tpu and
through their CPU implementation, against a reference built here from plain
ops in float64 (gather each sequence's blocks, mask, softmax, matmul).

Each case writes the sequences' new tokens into the caches through
paged_kv_write_ (with padding slots) on tpu and on CPU, compares the caches
bit for bit, then attends: decode batches of mixed lengths, prefill,
prefill after a cached prefix, grouped-query heads, block sizes 16 and 32,
shuffled (non-contiguous) block tables with garbage past each sequence,
padding query rows, sliding window, softcap, in float32, bfloat16 and
float16; bad descriptors raise what the CPU implementation raises. No op
may take the CPU fallback. The file runs in both eager modes (run it again
with TORCH_TPU_DEFER_AND_FUSE=1); test_decode_loop_deferred also runs a
write/attend loop under DEFER_AND_FUSE explicitly.
"""
import math

import pytest
import torch

import torch_tpu
from conftest import TPU, assert_same_error, no_fallback

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def tol(dtype):
    return {torch.float32: dict(atol=2e-5, rtol=2e-4), torch.bfloat16: dict(atol=2e-2, rtol=2e-2),
            torch.float16: dict(atol=3e-3, rtol=3e-3)}[dtype]


def make_case(dtype, bs, Hq, Hkv, D, seqs, pad_rows=0, seed=0, spare_blocks=3):
    """CPU tensors of a batch: seqs is [(q_len, seq_len)]. The prefix of each
    sequence (seq_len - q_len tokens) is already in the caches; its q_len new
    tokens come as new_key/new_value with slot_mapping (padding slots mixed
    in). Blocks are handed out in a shuffled order; table entries past a
    sequence's blocks hold garbage."""
    g = torch.Generator().manual_seed(seed)
    B = len(seqs)
    nblocks = [-(-n // bs) for _, n in seqs]
    M = max(nblocks + [1]) + 1
    N = sum(nblocks) + spare_blocks
    perm = torch.randperm(N, generator=g)
    table = torch.full((B, M), 10**6, dtype=torch.int32)
    k = 0
    for b, nb in enumerate(nblocks):
        table[b, :nb] = perm[k:k + nb].to(torch.int32)
        k += nb
    key_cache = torch.randn(N, bs, Hkv, D, generator=g).to(dtype)
    value_cache = torch.randn(N, bs, Hkv, D, generator=g).to(dtype)
    T = sum(q for q, _ in seqs) + pad_rows
    query = torch.randn(T, Hq, D, generator=g).to(dtype)
    qsl = torch.zeros(B + 1, dtype=torch.int32)
    qsl[1:] = torch.tensor([q for q, _ in seqs], dtype=torch.int32).cumsum(0)
    seq_lens = torch.tensor([n for _, n in seqs], dtype=torch.int32)
    slots = []
    for b, (q_len, n) in enumerate(seqs):
        for p in range(n - q_len, n):
            slots.append(int(table[b, p // bs]) * bs + p % bs)
    # new tokens with a padding slot after every third one
    rows, slot_list = [], []
    for i, s in enumerate(slots):
        rows.append(i)
        slot_list.append(s)
        if i % 3 == 1:
            rows.append(-1)
            slot_list.append(-1)
    W = len(slot_list)
    new_key = torch.randn(W, Hkv, D, generator=g).to(dtype)
    new_value = torch.randn(W, Hkv, D, generator=g).to(dtype)
    return dict(query=query, key_cache=key_cache, value_cache=value_cache, qsl=qsl,
                seq_lens=seq_lens, table=table, new_key=new_key, new_value=new_value,
                slots=torch.tensor(slot_list, dtype=torch.int64))


def reference(query, key_cache, value_cache, qsl, seq_lens, table, scale, causal=True,
              window=-1, softcap=0.0):
    """Plain ops in float64: gather, mask, softmax, matmul."""
    T, Hq, _ = query.shape
    bs, Hkv, Dv = key_cache.shape[1], key_cache.shape[2], value_cache.shape[3]
    out = torch.zeros(T, Hq, Dv, dtype=torch.float64)
    for b in range(seq_lens.shape[0]):
        s, e, n = int(qsl[b]), int(qsl[b + 1]), int(seq_lens[b])
        if e == s:
            continue
        pos = torch.arange(n)
        blocks = table[b].long()[pos // bs]
        k = key_cache[blocks, pos % bs].double()    # [n, Hkv, D]
        v = value_cache[blocks, pos % bs].double()
        q = query[s:e].double()                     # [q, Hq, D]
        k = k.repeat_interleave(Hq // Hkv, dim=1)
        v = v.repeat_interleave(Hq // Hkv, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale
        if softcap > 0:
            scores = softcap * torch.tanh(scores / softcap)
        qpos = torch.arange(n - (e - s), n)[:, None]
        mask = torch.ones(e - s, n, dtype=torch.bool)
        if causal:
            mask &= pos[None, :] <= qpos
        if window > 0:
            mask &= pos[None, :] > qpos - window
        p = torch.softmax(scores.masked_fill(~mask, -math.inf), dim=-1)
        out[s:e] = torch.einsum("hqk,khd->qhd", p, v)
    return out


def run_both(c, scale, **kw):
    """Writes the new tokens and attends, on tpu and on CPU (the op's CPU
    implementation); returns (tpu out, CPU out, float64 reference, tpu caches,
    CPU caches)."""
    t = {k: v.to(TPU) for k, v in c.items()}
    with no_fallback():
        torch.ops.tpu.paged_kv_write_(t["new_key"], t["new_value"], t["key_cache"],
                                      t["value_cache"], t["slots"])
        out = torch.ops.tpu.paged_attention(t["query"], t["key_cache"], t["value_cache"],
                                            t["qsl"], t["seq_lens"], t["table"], scale, **kw)
        out = out.cpu()
        caches = (t["key_cache"].cpu(), t["value_cache"].cpu())
    torch.ops.tpu.paged_kv_write_(c["new_key"], c["new_value"], c["key_cache"],
                                  c["value_cache"], c["slots"])
    cpu_out = torch.ops.tpu.paged_attention(c["query"], c["key_cache"], c["value_cache"],
                                            c["qsl"], c["seq_lens"], c["table"], scale, **kw)
    ref = reference(c["query"], c["key_cache"], c["value_cache"], c["qsl"], c["seq_lens"],
                    c["table"], scale, causal=kw.get("causal", True),
                    window=kw.get("sliding_window", -1), softcap=kw.get("softcap", 0.0))
    return out, cpu_out, ref, caches, (c["key_cache"], c["value_cache"])


def check_case(c, dtype, scale, **kw):
    out, cpu_out, ref, caches, cpu_caches = run_both(c, scale, **kw)
    assert out.dtype == dtype and out.shape == cpu_out.shape
    torch.testing.assert_close(caches[0], cpu_caches[0], atol=0, rtol=0)
    torch.testing.assert_close(caches[1], cpu_caches[1], atol=0, rtol=0)
    torch.testing.assert_close(out.double(), ref, **tol(dtype))
    torch.testing.assert_close(cpu_out.double(), ref, **tol(dtype))


SCENARIOS = {
    "decode": [(1, 1), (1, 17), (1, 100), (1, 33), (1, 64)],
    "prefill": [(40, 40), (7, 7)],
    "prefix": [(20, 50), (5, 37)],
    "mixed": [(1, 90), (24, 24), (9, 41), (1, 16)],
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bs", [16, 32])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_paged_attention_matches_reference(scenario, bs, dtype):
    c = make_case(dtype, bs, Hq=8, Hkv=2, D=64, seqs=SCENARIOS[scenario], pad_rows=2,
                  seed=list(SCENARIOS).index(scenario) * 100 + bs)
    check_case(c, dtype, 1 / 8)


@pytest.mark.parametrize("Hq,Hkv", [(4, 4), (8, 1), (6, 3)])
def test_gqa_ratios(Hq, Hkv):
    c = make_case(torch.float32, 16, Hq, Hkv, 32, SCENARIOS["mixed"], seed=Hq * 10 + Hkv)
    check_case(c, torch.float32, 0.2)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("window,softcap", [(8, 0.0), (-1, 5.0), (20, 2.0)])
def test_window_and_softcap(window, softcap, dtype):
    c = make_case(dtype, 16, 4, 2, 32, SCENARIOS["mixed"], seed=window + 7)
    check_case(c, dtype, 0.25, sliding_window=window, softcap=softcap)


def test_non_causal_and_head_sizes():
    c = make_case(torch.float32, 32, 4, 2, 128, [(12, 12), (3, 45)], seed=3)
    check_case(c, torch.float32, 1 / math.sqrt(128), causal=False)
    c = make_case(torch.bfloat16, 16, 2, 1, 80, [(1, 70), (5, 5)], seed=4)
    check_case(c, torch.bfloat16, 0.1)


def test_padding_rows_are_zero_and_empty_batch():
    c = make_case(torch.float32, 16, 2, 2, 16, [(2, 10)], pad_rows=3, seed=5)
    out, _, _, _, _ = run_both(c, 0.3)
    assert (out[2:] == 0).all()
    # no sequences, no tokens
    q = torch.empty(0, 2, 16, device=TPU)
    kc = torch.zeros(2, 16, 2, 16, device=TPU)
    with no_fallback():
        out = torch.ops.tpu.paged_attention(
            q, kc, kc, torch.zeros(1, dtype=torch.int32, device=TPU),
            torch.zeros(0, dtype=torch.int32, device=TPU),
            torch.zeros(0, 1, dtype=torch.int32, device=TPU), 1.0)
        assert out.shape == (0, 2, 16)


def test_strided_caches():
    """Caches viewed from a [N, Hkv, bs, D] buffer and a strided query."""
    c = make_case(torch.float32, 16, 4, 2, 32, SCENARIOS["prefix"], seed=6)
    t = {k: v.to(TPU) for k, v in c.items()}
    kc = t["key_cache"].transpose(1, 2).contiguous().transpose(1, 2)
    vc = t["value_cache"].transpose(1, 2).contiguous().transpose(1, 2)
    q = torch.cat([t["query"], t["query"]], dim=2)[:, :, ::2]
    with no_fallback():
        torch.ops.tpu.paged_kv_write_(t["new_key"], t["new_value"], kc, vc, t["slots"])
        out = torch.ops.tpu.paged_attention(q, kc, vc, t["qsl"], t["seq_lens"], t["table"], 0.3)
        out = out.cpu()
    torch.ops.tpu.paged_kv_write_(c["new_key"], c["new_value"], c["key_cache"],
                                  c["value_cache"], c["slots"])
    q_cpu = torch.cat([c["query"], c["query"]], dim=2)[:, :, ::2]
    ref = reference(q_cpu, c["key_cache"], c["value_cache"], c["qsl"], c["seq_lens"],
                    c["table"], 0.3)
    torch.testing.assert_close(kc.cpu(), c["key_cache"], atol=0, rtol=0)
    torch.testing.assert_close(out.double(), ref, **tol(torch.float32))


def test_decode_loop_deferred():
    """Write-then-attend steps with no synchronisation in between, under
    DEFER_AND_FUSE: each attention must see the tokens written before it."""
    prev = torch_tpu._internal.execution_mode._global_mode
    torch_tpu.set_global_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE)
    try:
        bs, Hq, Hkv, D, steps = 16, 4, 2, 32, 6
        c = make_case(torch.float32, bs, Hq, Hkv, D, [(1, 20 + steps), (1, 3 + steps)], seed=8)
        lens0 = [20, 3]
        g = torch.Generator().manual_seed(9)
        kc, vc = c["key_cache"].clone(), c["value_cache"].clone()
        kt, vt, table_t = kc.to(TPU), vc.to(TPU), c["table"].to(TPU)
        outs, refs = [], []
        with no_fallback():
            for step in range(steps):
                lens = torch.tensor([n + step + 1 for n in lens0], dtype=torch.int32)
                slots = torch.tensor([int(c["table"][b, (n - 1) // bs]) * bs + (n - 1) % bs
                                      for b, n in enumerate(lens.tolist())])
                k, v = torch.randn(2, Hkv, D, generator=g), torch.randn(2, Hkv, D, generator=g)
                q = torch.randn(2, Hq, D, generator=g)
                qsl = torch.tensor([0, 1, 2], dtype=torch.int32)
                torch.ops.tpu.paged_kv_write_(k.to(TPU), v.to(TPU), kt, vt, slots.to(TPU))
                outs.append(torch.ops.tpu.paged_attention(q.to(TPU), kt, vt, qsl.to(TPU),
                                                          lens.to(TPU), table_t, 0.2) * 2)
                torch.ops.tpu.paged_kv_write_(k, v, kc, vc, slots)
                refs.append(reference(q, kc, vc, qsl, lens, c["table"], 0.2) * 2)
            outs = [o.cpu() for o in outs]
        for o, r in zip(outs, refs):
            torch.testing.assert_close(o.double(), r, **tol(torch.float32))
    finally:
        torch.tpu.synchronize()
        torch_tpu.set_global_eager_mode(prev)


def test_recorded_as_graph_nodes_when_deferred():
    """Under DEFER_AND_FUSE both ops join the pending graph (no flush of
    their own); the first host read runs it."""
    c = make_case(torch.float32, 16, 4, 2, 16, [(1, 20), (3, 9)], seed=15)
    t = {k: v.to(TPU) for k, v in c.items()}
    torch.tpu.synchronize()
    with torch_tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE), no_fallback():
        torch_tpu.reset_defer_metrics()
        torch.ops.tpu.paged_kv_write_(t["new_key"], t["new_value"], t["key_cache"],
                                      t["value_cache"], t["slots"])
        out = torch.ops.tpu.paged_attention(t["query"], t["key_cache"], t["value_cache"],
                                            t["qsl"], t["seq_lens"], t["table"], 0.5) + 1
        m = torch_tpu.defer_metrics()
        assert m["nodes_recorded"] == 3 and m["flushes"] == 0, m
        out = out.cpu()
    torch.ops.tpu.paged_kv_write_(c["new_key"], c["new_value"], c["key_cache"],
                                  c["value_cache"], c["slots"])
    ref = reference(c["query"], c["key_cache"], c["value_cache"], c["qsl"], c["seq_lens"],
                    c["table"], 0.5) + 1
    torch.testing.assert_close(out.double(), ref, **tol(torch.float32))


def test_native_counts():
    c = make_case(torch.float32, 16, 2, 2, 16, [(1, 5)], seed=10)
    torch_tpu.reset_counts()
    run_both(c, 0.5)
    counts = torch_tpu.native_counts()
    assert counts.get("tpu::paged_attention") == 1
    assert counts.get("tpu::paged_kv_write_") == 1


@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_opcheck(device):
    """Schemas, mutation annotations and fake kernels agree with the kernels
    (torch.library.opcheck: schema, autograd registration, fake tensors,
    AOT dispatch with dynamic shapes)."""
    c = make_case(torch.float32, 16, 4, 2, 16, [(1, 20), (3, 9)], seed=14)
    t = {k: v.to(device) for k, v in c.items()}
    torch.library.opcheck(torch.ops.tpu.paged_kv_write_.default,
                          (t["new_key"], t["new_value"], t["key_cache"], t["value_cache"],
                           t["slots"]))
    torch.library.opcheck(torch.ops.tpu.paged_attention.default,
                          (t["query"], t["key_cache"], t["value_cache"], t["qsl"],
                           t["seq_lens"], t["table"], 0.5))


# ---- errors ---------------------------------------------------------------------------


def _attn_args(c):
    return [c["query"], c["key_cache"], c["value_cache"], c["qsl"], c["seq_lens"], c["table"],
            0.5]


def _break(c, fn):
    c = {k: v.clone() for k, v in c.items()}
    fn(c)
    return c


ATTN_ERRORS = {
    "table_entry_past_cache": lambda c: c["table"].__setitem__((0, 0), 1000),
    "table_entry_negative": lambda c: c["table"].__setitem__((1, 0), -1),
    "seq_len_beyond_table": lambda c: c["seq_lens"].__setitem__(0, 10**4),
    "q_len_beyond_seq_len": lambda c: c["seq_lens"].__setitem__(1, 0),
    "qsl_past_tokens": lambda c: c["qsl"].__setitem__(2, 100),
    "qsl_not_from_zero": lambda c: c["qsl"].__setitem__(0, 1),
    "gqa_ratio": lambda c: c.__setitem__("query", c["query"][:, :3]),
    "head_size": lambda c: c.__setitem__("query", c["query"][:, :, :8]),
    "cache_dtype": lambda c: c.__setitem__("value_cache", c["value_cache"].double()),
    "float64": lambda c: [c.__setitem__(k, c[k].double())
                          for k in ("query", "key_cache", "value_cache")],
    "table_dtype": lambda c: c.__setitem__("table", c["table"].float()),
    "table_rank": lambda c: c.__setitem__("table", c["table"][0]),
    "batch_mismatch": lambda c: c.__setitem__("seq_lens", c["seq_lens"][:1]),
    "query_rank": lambda c: c.__setitem__("query", c["query"][0]),
    "cache_blocks": lambda c: c.__setitem__("value_cache", c["value_cache"][:-1]),
}


@pytest.mark.parametrize("name", list(ATTN_ERRORS))
def test_attention_errors_match_cpu(name):
    c = _break(make_case(torch.float32, 16, 4, 2, 16, [(1, 20), (3, 9)], seed=11),
               ATTN_ERRORS[name])
    t = {k: v.to(TPU) for k, v in c.items()}
    torch_tpu.set_fallback_mode("error")
    assert_same_error(lambda: torch.ops.tpu.paged_attention(*_attn_args(c)),
                      lambda: torch.ops.tpu.paged_attention(*_attn_args(t)))
    assert torch_tpu.fallback_counts() == {}


@pytest.mark.parametrize("kw", [dict(sliding_window=0), dict(causal=False, sliding_window=4),
                                dict(softcap=-1.0), dict(softcap=math.inf)], ids=str)
def test_attention_attr_errors_match_cpu(kw):
    c = make_case(torch.float32, 16, 4, 2, 16, [(1, 20)], seed=12)
    t = {k: v.to(TPU) for k, v in c.items()}
    assert_same_error(lambda: torch.ops.tpu.paged_attention(*_attn_args(c), **kw),
                      lambda: torch.ops.tpu.paged_attention(*_attn_args(t), **kw))


WRITE_ERRORS = {
    "slot_past_cache": lambda c: c["slots"].__setitem__(0, 10**6),
    "slot_dtype": lambda c: c.__setitem__("slots", c["slots"].float()),
    "slot_count": lambda c: c.__setitem__("slots", c["slots"][1:]),
    "key_dtype": lambda c: c.__setitem__("new_key", c["new_key"].double()),
    "key_heads": lambda c: c.__setitem__("new_key", c["new_key"][:, :1]),
    "cache_rank": lambda c: c.__setitem__("key_cache", c["key_cache"][0]),
}


@pytest.mark.parametrize("name", list(WRITE_ERRORS))
def test_write_errors_match_cpu(name):
    c = _break(make_case(torch.float32, 16, 4, 2, 16, [(3, 20)], seed=13), WRITE_ERRORS[name])
    t = {k: v.to(TPU) for k, v in c.items()}
    before = t["key_cache"].cpu()

    def args(d):
        return d["new_key"], d["new_value"], d["key_cache"], d["value_cache"], d["slots"]
    torch_tpu.set_fallback_mode("error")
    err = assert_same_error(lambda: torch.ops.tpu.paged_kv_write_(*args(c)),
                            lambda: torch.ops.tpu.paged_kv_write_(*args(t)))
    assert "paged_kv_write" in str(err)
    # a refused write leaves the cache as it was
    torch.testing.assert_close(t["key_cache"].cpu(), before, atol=0, rtol=0)
    assert torch_tpu.fallback_counts() == {}
