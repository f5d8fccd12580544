"""torch.ops.tpu.paged_kv_write_ and torch.ops.tpu.paged_attention: the paged
KV-cache ops a serving engine's attention backend (vLLM's, issue 26) calls.

The schemas and their tpu kernels are registered by the bridge
(bridge/paged_attention.cpp, runtime/src/kernels/attention/paged_attention.h
says what they compute and assume). This module adds, for the same schemas,

- the CPU implementation: plain PyTorch ops (gather the blocks, mask,
  softmax, matmul in float32), raising what the tpu kernels raise for the
  same bad arguments (RuntimeError, IndexError for a slot or block table
  entry out of range, NotImplementedError for a dtype the kernels lack), so
  a caller can run the same op on CPU tensors and compare;
- fake (meta) kernels, so the ops trace under torch.compile.

Layout: key_cache / value_cache [num_blocks, block_size, num_kv_heads,
head_size]; slot = block * block_size + offset; query [num_tokens,
num_heads, head_size] with sequence b's new tokens at rows
[query_start_loc[b], query_start_loc[b + 1]); seq_lens[b] counts the
sequence's whole context, new tokens included.
"""

import torch

__all__ = ["paged_kv_write_", "paged_attention"]

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)
_INDEX = (torch.int32, torch.int64)


def paged_kv_write_(key, value, key_cache, value_cache, slot_mapping):
    """Writes key/value [T, Hkv, D] into the caches at slot_mapping[T]; negative slots skip."""
    torch.ops.tpu.paged_kv_write_(key, value, key_cache, value_cache, slot_mapping)


def paged_attention(query, key_cache, value_cache, query_start_loc, seq_lens, block_table,
                    scale, causal=True, sliding_window=-1, softcap=0.0):
    """Varlen attention of query [T, Hq, D] over the paged caches; returns [T, Hq, Dv]."""
    return torch.ops.tpu.paged_attention(query, key_cache, value_cache, query_start_loc,
                                         seq_lens, block_table, scale, causal, sliding_window,
                                         softcap)


# ---- argument checks (the runtime's, paged_attention.c) -----------------------------


def _fail(op, what):
    raise RuntimeError(f"{op}: {what}")


def _check_write(key, value, key_cache, value_cache, slot_mapping):
    op = "paged_kv_write"
    if key.dim() != 3 or value.dim() != 3:
        _fail(op, "key and value must be 3-D [num_tokens, num_kv_heads, head_size]")
    if key_cache.dim() != 4 or value_cache.dim() != 4:
        _fail(op, "key_cache and value_cache must be 4-D "
                  "[num_blocks, block_size, num_kv_heads, head_size]")
    if slot_mapping.dim() != 1:
        _fail(op, "slot_mapping must be 1-D [num_tokens]")
    if slot_mapping.dtype not in _INDEX:
        _fail(op, "slot_mapping must be int64 or int32")
    if key.dtype != key_cache.dtype or value.dtype != value_cache.dtype:
        _fail(op, "key and value must have their cache's dtype")
    if not key_cache.dtype.is_floating_point or not value_cache.dtype.is_floating_point:
        _fail(op, "the caches must be floating point")
    if key_cache.shape[:3] != value_cache.shape[:3]:
        _fail(op, "key_cache and value_cache must have the same blocks, block size and heads")
    T = key.shape[0]
    if value.shape[0] != T or slot_mapping.shape[0] != T:
        _fail(op, "key, value and slot_mapping must have the same number of tokens")
    if key.shape[1:] != key_cache.shape[2:] or value.shape[1:] != value_cache.shape[2:]:
        _fail(op, "key and value rows must match their cache's [num_kv_heads, head_size]")
    if key_cache.shape[1] <= 0:
        _fail(op, "block_size must be positive")


def _check_attention(query, key_cache, value_cache, query_start_loc, seq_lens, block_table,
                     scale, causal, sliding_window, softcap):
    op = "paged_attention"
    if query.dim() != 3:
        _fail(op, "query must be 3-D [num_tokens, num_heads, head_size]")
    if key_cache.dim() != 4 or value_cache.dim() != 4:
        _fail(op, "key_cache and value_cache must be 4-D "
                  "[num_blocks, block_size, num_kv_heads, head_size]")
    if query_start_loc.dim() != 1 or seq_lens.dim() != 1 or block_table.dim() != 2:
        _fail(op, "query_start_loc and seq_lens must be 1-D, block_table 2-D")
    if any(t.dtype not in _INDEX for t in (query_start_loc, seq_lens, block_table)):
        _fail(op, "query_start_loc, seq_lens and block_table must be int32 or int64")
    if key_cache.dtype != query.dtype or value_cache.dtype != query.dtype:
        _fail(op, "query, key_cache and value_cache must have the same dtype")
    if query.dtype not in _FLOATS:
        raise NotImplementedError("paged_attention: dtype must be float32, bfloat16 or float16")
    if key_cache.shape[:3] != value_cache.shape[:3]:
        _fail(op, "key_cache and value_cache must have the same blocks, block size and heads")
    Hq, D = query.shape[1], query.shape[2]
    bs, Hkv = key_cache.shape[1], key_cache.shape[2]
    if key_cache.shape[3] != D:
        _fail(op, "query and key_cache must have the same head_size")
    if Hkv <= 0 or Hq % Hkv != 0:
        _fail(op, "the query's heads must be a multiple of the cache's heads")
    if bs <= 0:
        _fail(op, "block_size must be positive")
    if D > 512 or value_cache.shape[3] > 512:
        raise NotImplementedError("paged_attention: head_size above 512")
    B = seq_lens.shape[0]
    if query_start_loc.shape[0] != B + 1 or block_table.shape[0] != B:
        _fail(op, "query_start_loc must be [B + 1] and block_table [B, max_blocks] "
                  "for seq_lens [B]")
    if sliding_window == 0 or sliding_window < -1:
        _fail(op, "sliding_window must be positive or -1")
    if sliding_window > 0 and not causal:
        _fail(op, "sliding_window needs causal attention")
    if not (softcap >= 0) or softcap == float("inf"):
        _fail(op, "softcap must be a finite number >= 0")
    if scale != scale or abs(scale) == float("inf"):
        _fail(op, "scale must be finite")


def _read_lengths(query, key_cache, query_start_loc, seq_lens, block_table):
    op = "paged_attention"
    T, (N, bs), M = query.shape[0], key_cache.shape[:2], block_table.shape[1]
    qsl, lens = query_start_loc.tolist(), seq_lens.tolist()
    if qsl[0] != 0:
        _fail(op, f"query_start_loc[0] must be 0, got {qsl[0]}")
    table = block_table.tolist()
    for b, n in enumerate(lens):
        q_len = qsl[b + 1] - qsl[b]
        if q_len < 0 or qsl[b + 1] > T:
            _fail(op, "query_start_loc must be non-decreasing and at most num_tokens "
                      f"({T}); got {qsl[b + 1]} at index {b + 1}")
        if n < q_len or n > M * bs:
            _fail(op, f"seq_lens[{b}] = {n} must lie in [{q_len}, {M * bs}] "
                      "(its new tokens, the block table's capacity)")
        for j in range(-(-n // bs)):
            e = table[b][j]
            if e < 0 or e >= N:
                raise IndexError(f"paged_attention: block_table[{b}, {j}] = {e} is out of "
                                 f"bounds for a cache of {N} blocks")
    return qsl, lens


# ---- CPU implementations -------------------------------------------------------------


def _paged_kv_write_cpu(key, value, key_cache, value_cache, slot_mapping):
    _check_write(key, value, key_cache, value_cache, slot_mapping)
    N, bs = key_cache.shape[:2]
    slots = slot_mapping.long()
    over = (slots >= N * bs).nonzero()
    if over.numel():
        t = int(over[0, 0])
        raise IndexError(f"paged_kv_write: slot_mapping[{t}] = {int(slots[t])} is out of "
                         f"bounds for a cache of {N * bs} slots")
    keep = slots >= 0
    s = slots[keep]
    key_cache[s // bs, s % bs] = key[keep]
    value_cache[s // bs, s % bs] = value[keep]


def _paged_attention_cpu(query, key_cache, value_cache, query_start_loc, seq_lens, block_table,
                         scale, causal=True, sliding_window=-1, softcap=0.0):
    _check_attention(query, key_cache, value_cache, query_start_loc, seq_lens, block_table,
                     scale, causal, sliding_window, softcap)
    qsl, lens = _read_lengths(query, key_cache, query_start_loc, seq_lens, block_table)
    T, Hq, _ = query.shape
    bs, Hkv, Dv = key_cache.shape[1], key_cache.shape[2], value_cache.shape[3]
    G = Hq // Hkv
    out = torch.zeros(T, Hq, Dv, dtype=query.dtype)
    for b, n in enumerate(lens):
        q_len = qsl[b + 1] - qsl[b]
        if q_len == 0:
            continue
        blocks = block_table[b, :-(-n // bs)].long()
        k = key_cache[blocks].flatten(0, 1)[:n].float().repeat_interleave(G, dim=1)
        v = value_cache[blocks].flatten(0, 1)[:n].float().repeat_interleave(G, dim=1)
        q = query[qsl[b]:qsl[b + 1]].float()
        s = torch.einsum("qhd,khd->hqk", q, k) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        pos = torch.arange(n - q_len, n).unsqueeze(1)
        j = torch.arange(n).unsqueeze(0)
        visible = torch.ones(q_len, n, dtype=torch.bool)
        if causal:
            visible &= j <= pos
        if sliding_window > 0:
            visible &= j > pos - sliding_window
        p = torch.softmax(s.masked_fill(~visible, float("-inf")), dim=-1)
        out[qsl[b]:qsl[b + 1]] = torch.einsum("hqk,khd->qhd", p, v).to(query.dtype)
    return out


torch.library.impl("tpu::paged_kv_write_", "cpu")(_paged_kv_write_cpu)
torch.library.impl("tpu::paged_attention", "cpu")(_paged_attention_cpu)


@torch.library.register_fake("tpu::paged_kv_write_")
def _paged_kv_write_fake(key, value, key_cache, value_cache, slot_mapping):
    return None


@torch.library.register_fake("tpu::paged_attention")
def _paged_attention_fake(query, key_cache, value_cache, query_start_loc, seq_lens, block_table,
                          scale, causal=True, sliding_window=-1, softcap=0.0):
    return query.new_empty(query.shape[0], query.shape[1], value_cache.shape[3])
