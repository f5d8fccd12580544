/* paged_attention.h — the paged KV-cache family's private interface
 * (paged_attention.c, paged_attention_ref.c, tests/test_paged_attention.c):
 * argument parsing and the data checks shared by the optimised kernels, the
 * references and the tests. A serving engine (vLLM) keeps every sequence's
 * keys and values in fixed-size blocks of one cache tensor and names them
 * through a per-sequence block table; these rows write new tokens into the
 * cache and attend over it.
 *
 * Rows (bound by bridge/paged_attention.cpp to torch.ops.tpu.*):
 *   paged_kv_write   key,value,key_cache!,value_cache!,slot_mapping
 *   paged_attention  query,key_cache,value_cache,query_start_loc,seq_lens,
 *                    block_table -> output
 *
 * Cache layout: key_cache [N, bs, Hkv, D] and value_cache [N, bs, Hkv, Dv]
 * (N blocks of bs tokens), any strides. Token position p of sequence b lives
 * in block block_table[b, p / bs] at offset p % bs; a slot is
 * block * bs + offset.
 *
 * paged_kv_write: key [T, Hkv, D] and value [T, Hkv, Dv] (the caches' dtypes)
 * go to slot slot_mapping[t] (int64 or int32, [T]); a negative slot is a
 * padding token and is skipped; a slot >= N * bs is INDEX_ERROR, found
 * before anything is written. Duplicate slots: one of the tokens wins, which
 * one is unspecified (as index_put_ without accumulate).
 *
 * paged_attention: query [T, Hq, D] holds the new tokens of B sequences,
 * sequence b's at rows [query_start_loc[b], query_start_loc[b + 1]) (int32 or
 * int64, [B + 1], starting at 0, non-decreasing, ending <= T: rows past the
 * end are padding and get zeros). seq_lens [B] is each sequence's context
 * length with the new tokens included (already in the cache), so new token
 * i of a sequence with q_len new tokens sits at position
 * seq_len - q_len + i. block_table [B, M] (int32 or int64): only the entries
 * of blocks below ceil(seq_len / bs) are read, and must lie in [0, N).
 * Scores are s = scale * q·k, then softcap * tanh(s / softcap) when
 * softcap > 0. causal: a query at position p sees keys j <= p;
 * sliding_window w > 0 (causal only) also drops keys j <= p - w, so a query
 * sees at most w keys, itself included. Grouped-query attention: query head
 * h reads cache head h / (Hq / Hkv). Output [T, Hq, Dv] in the query's
 * dtype. Decode (q_len 1), prefill (q_len = seq_len) and prefill after a
 * cached prefix (q_len < seq_len) are the same computation.
 *
 * Dtypes: float32, bfloat16, float16 (query and both caches alike); half
 * types compute in float32 and round once at the store. Bad metadata (ranks,
 * shapes, dtypes, a window without causal) is INVALID_ARGUMENT from the
 * check (or UNIMPLEMENTED for a dtype the kernels lack); bad data (a
 * sequence longer than its table, q_len > seq_len, query_start_loc out of
 * order, a table entry out of range) is found by the kernel before it
 * writes anything: INDEX_ERROR for a table entry or slot out of range,
 * INVALID_ARGUMENT otherwise.
 */
#ifndef TPU_KERNELS_PAGED_ATTENTION_H_
#define TPU_KERNELS_PAGED_ATTENTION_H_

#include <stdbool.h>
#include <stdint.h>

#include "kernels/common/kernel_util.h"

typedef struct paged_write_args {
  int64_t T, N, bs, Hkv, D, Dv;
  tpu_view_t key, value, key_cache, value_cache, slots;
} paged_write_args_t;

typedef struct paged_attn_args {
  tpu_dtype_t dtype;
  int64_t T, Hq, Hkv, D, Dv, N, bs, B, M;
  tpu_view_t q, kc, vc, qsl, seq_lens, table;
  double scale, softcap;
  bool causal;
  int64_t window; /* <= 0: none */
} paged_attn_args_t;

tpu_status_t tpu_paged_write_parse(const tpu_op_def_t* def, const tpu_node_t* node,
                                   paged_write_args_t* a);
tpu_status_t tpu_paged_attn_parse(const tpu_op_def_t* def, const tpu_node_t* node,
                                  paged_attn_args_t* a);

/* The data checks: every slot below N * bs. */
tpu_status_t tpu_paged_write_check_slots(const paged_write_args_t* a);
/* query_start_loc and seq_lens read into qsl[B + 1] and lens[B], checked
 * with the block table entries they reach (see above). */
tpu_status_t tpu_paged_attn_read_lengths(const paged_attn_args_t* a, int64_t* qsl, int64_t* lens);

/* Plain references: element by element, in double, whole score rows. */
tpu_status_t tpu_paged_write_reference(const tpu_op_def_t* def, const tpu_node_t* node);
tpu_status_t tpu_paged_attention_reference(const tpu_op_def_t* def, const tpu_node_t* node);

/* Element i of a 1-D integer view, (i, j) of a 2-D one. */
static inline int64_t paged_int1(const tpu_view_t* v, int64_t i) {
  return view_get_i64(v, i * v->strides[0]);
}
static inline int64_t paged_int2(const tpu_view_t* v, int64_t i, int64_t j) {
  return view_get_i64(v, i * v->strides[0] + j * v->strides[1]);
}

/* Whether the key at position j is visible to a query at position p. */
static inline bool paged_visible(const paged_attn_args_t* a, int64_t p, int64_t j) {
  if (a->causal && j > p) return false;
  if (a->window > 0 && j <= p - a->window) return false;
  return true;
}

#endif /* TPU_KERNELS_PAGED_ATTENTION_H_ */
