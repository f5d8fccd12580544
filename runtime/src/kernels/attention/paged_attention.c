/* paged_attention.c — the paged KV-cache family (paged_attention.h says what
 * the rows compute and what they assume): parsing, the data checks, the
 * optimised kernels and the rows.
 *
 * paged_kv_write: the slots are checked first (nothing is written when one
 * is out of range), then tokens are spread over tpu_parallel_for, each
 * token's [Hkv, D] rows moved with tpu_convert (a copy: same dtype).
 *
 * paged_attention: lengths and table entries are read and checked first.
 * Work units are (sequence, cache head, chunk of PA_QC new tokens): a unit
 * holds the chunk's queries of every query head that shares the cache head
 * (R = tokens x Hq/Hkv rows, scaled, in float32), so each cache block it
 * reads serves all of them. It walks the blocks its rows can see (causal
 * and the window bound the range), converts the block's keys to a
 * transposed float32 tile Kᵀ [D, bs] and its values to V [bs, Dv], forms
 * scores S = Q Kᵀ [R, bs] and updates a running row maximum m, sum l and
 * accumulator acc = Σ p V (rescaled by exp(m_old - m_new) when the maximum
 * grows: online softmax). Both products run as rank-1 updates along the
 * tile's contiguous dim (no reductions), which the compiler vectorises
 * (tpu_paged_attn_block: AVX-512, AVX2 and baseline clones).
 * The unit writes out = acc / l, rounded once to the query's dtype. Scratch
 * per chunk of units: O(R (D + Dv + bs) + bs (2 D + Dv)) floats.
 */
#include "kernels/attention/paged_attention.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/vmath.h"

#define PA_QC 16                 /* new tokens per work unit */
#define PA_SMALL_WORK (1 << 16)  /* multiply-adds below which one thread runs */
#define PA_MAX_HEAD_DIM 512

/* ---- parsing ------------------------------------------------------------------ */

static tpu_status_t bad(const char* op, const char* what) {
  return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: %s", op, what);
}

static bool is_index_dtype(tpu_dtype_t d) { return d == TPU_DTYPE_I32 || d == TPU_DTYPE_I64; }

static bool is_paged_dtype(tpu_dtype_t d) {
  return d == TPU_DTYPE_F32 || d == TPU_DTYPE_BF16 || d == TPU_DTYPE_F16;
}

tpu_status_t tpu_paged_write_parse(const tpu_op_def_t* def, const tpu_node_t* node,
                                   paged_write_args_t* a) {
  static const char* op = "paged_kv_write";
  memset(a, 0, sizeof(*a));
  const tpu_view_t* k = ku_input(def, node, "key");
  const tpu_view_t* v = ku_input(def, node, "value");
  const tpu_view_t* kc = ku_input(def, node, "key_cache");
  const tpu_view_t* vc = ku_input(def, node, "value_cache");
  const tpu_view_t* s = ku_input(def, node, "slot_mapping");
  if (!k || !v || !kc || !vc || !s) return bad(op, "every operand must be a tensor");
  if (k->ndim != 3 || v->ndim != 3)
    return bad(op, "key and value must be 3-D [num_tokens, num_kv_heads, head_size]");
  if (kc->ndim != 4 || vc->ndim != 4)
    return bad(op, "key_cache and value_cache must be 4-D "
                   "[num_blocks, block_size, num_kv_heads, head_size]");
  if (s->ndim != 1) return bad(op, "slot_mapping must be 1-D [num_tokens]");
  if (!is_index_dtype(s->dtype)) return bad(op, "slot_mapping must be int64 or int32");
  if (k->dtype != kc->dtype || v->dtype != vc->dtype)
    return bad(op, "key and value must have their cache's dtype");
  if (!tpu_dtype_is_floating(kc->dtype) || !tpu_dtype_is_floating(vc->dtype))
    return bad(op, "the caches must be floating point");
  for (int d = 0; d < 3; ++d)
    if (kc->sizes[d] != vc->sizes[d])
      return bad(op, "key_cache and value_cache must have the same blocks, block size and heads");
  a->T = k->sizes[0], a->Hkv = kc->sizes[2], a->D = kc->sizes[3], a->Dv = vc->sizes[3];
  a->N = kc->sizes[0], a->bs = kc->sizes[1];
  if (v->sizes[0] != a->T || s->sizes[0] != a->T)
    return bad(op, "key, value and slot_mapping must have the same number of tokens");
  if (k->sizes[1] != a->Hkv || k->sizes[2] != a->D || v->sizes[1] != a->Hkv ||
      v->sizes[2] != a->Dv)
    return bad(op, "key and value rows must match their cache's [num_kv_heads, head_size]");
  if (a->bs <= 0) return bad(op, "block_size must be positive");
  a->key = *k, a->value = *v, a->key_cache = *kc, a->value_cache = *vc, a->slots = *s;
  return TPU_OK;
}

tpu_status_t tpu_paged_attn_parse(const tpu_op_def_t* def, const tpu_node_t* node,
                                  paged_attn_args_t* a) {
  static const char* op = "paged_attention";
  memset(a, 0, sizeof(*a));
  const tpu_view_t* q = ku_input(def, node, "query");
  const tpu_view_t* kc = ku_input(def, node, "key_cache");
  const tpu_view_t* vc = ku_input(def, node, "value_cache");
  const tpu_view_t* qsl = ku_input(def, node, "query_start_loc");
  const tpu_view_t* sl = ku_input(def, node, "seq_lens");
  const tpu_view_t* bt = ku_input(def, node, "block_table");
  if (!q || !kc || !vc || !qsl || !sl || !bt) return bad(op, "every operand must be a tensor");
  if (q->ndim != 3) return bad(op, "query must be 3-D [num_tokens, num_heads, head_size]");
  if (kc->ndim != 4 || vc->ndim != 4)
    return bad(op, "key_cache and value_cache must be 4-D "
                   "[num_blocks, block_size, num_kv_heads, head_size]");
  if (qsl->ndim != 1 || sl->ndim != 1 || bt->ndim != 2)
    return bad(op, "query_start_loc and seq_lens must be 1-D, block_table 2-D");
  if (!is_index_dtype(qsl->dtype) || !is_index_dtype(sl->dtype) || !is_index_dtype(bt->dtype))
    return bad(op, "query_start_loc, seq_lens and block_table must be int32 or int64");
  if (kc->dtype != q->dtype || vc->dtype != q->dtype)
    return bad(op, "query, key_cache and value_cache must have the same dtype");
  if (!is_paged_dtype(q->dtype))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED,
                           "paged_attention: dtype must be float32, bfloat16 or float16");
  for (int d = 0; d < 3; ++d)
    if (kc->sizes[d] != vc->sizes[d])
      return bad(op, "key_cache and value_cache must have the same blocks, block size and heads");
  a->dtype = q->dtype;
  a->T = q->sizes[0], a->Hq = q->sizes[1], a->D = q->sizes[2];
  a->N = kc->sizes[0], a->bs = kc->sizes[1], a->Hkv = kc->sizes[2], a->Dv = vc->sizes[3];
  a->B = sl->sizes[0], a->M = bt->sizes[1];
  if (kc->sizes[3] != a->D) return bad(op, "query and key_cache must have the same head_size");
  if (a->Hkv <= 0 || a->Hq % a->Hkv != 0)
    return bad(op, "the query's heads must be a multiple of the cache's heads");
  if (a->bs <= 0) return bad(op, "block_size must be positive");
  if (a->D > PA_MAX_HEAD_DIM || a->Dv > PA_MAX_HEAD_DIM)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "paged_attention: head_size above %d",
                           PA_MAX_HEAD_DIM);
  if (qsl->sizes[0] != a->B + 1 || bt->sizes[0] != a->B)
    return bad(op, "query_start_loc must be [B + 1] and block_table [B, max_blocks] "
                   "for seq_lens [B]");
  a->scale = tpu_attr_float(ku_attr(def, node, "scale"), 1.0);
  a->causal = tpu_attr_bool(ku_attr(def, node, "causal"), true);
  a->window = tpu_attr_int(ku_attr(def, node, "sliding_window"), -1);
  a->softcap = tpu_attr_float(ku_attr(def, node, "softcap"), 0.0);
  if (a->window == 0 || a->window < -1) return bad(op, "sliding_window must be positive or -1");
  if (a->window > 0 && !a->causal) return bad(op, "sliding_window needs causal attention");
  if (!(a->softcap >= 0) || isinf(a->softcap))
    return bad(op, "softcap must be a finite number >= 0");
  if (!isfinite(a->scale)) return bad(op, "scale must be finite");
  a->q = *q, a->kc = *kc, a->vc = *vc, a->qsl = *qsl, a->seq_lens = *sl, a->table = *bt;
  return TPU_OK;
}

/* ---- data checks ---------------------------------------------------------------- */

tpu_status_t tpu_paged_write_check_slots(const paged_write_args_t* a) {
  int64_t capacity = a->N * a->bs;
  for (int64_t t = 0; t < a->T; ++t) {
    int64_t s = paged_int1(&a->slots, t);
    if (s >= capacity)
      return tpu_status_make(TPU_CODE_INDEX_ERROR,
                             "paged_kv_write: slot_mapping[%lld] = %lld is out of bounds for a "
                             "cache of %lld slots",
                             (long long)t, (long long)s, (long long)capacity);
  }
  return TPU_OK;
}

tpu_status_t tpu_paged_attn_read_lengths(const paged_attn_args_t* a, int64_t* qsl,
                                         int64_t* lens) {
  for (int64_t b = 0; b <= a->B; ++b) qsl[b] = paged_int1(&a->qsl, b);
  for (int64_t b = 0; b < a->B; ++b) lens[b] = paged_int1(&a->seq_lens, b);
  if (qsl[0] != 0)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "paged_attention: query_start_loc[0] must be 0, got %lld",
                           (long long)qsl[0]);
  for (int64_t b = 0; b < a->B; ++b) {
    int64_t q_len = qsl[b + 1] - qsl[b];
    if (q_len < 0 || qsl[b + 1] > a->T)
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "paged_attention: query_start_loc must be non-decreasing and at most "
                             "num_tokens (%lld); got %lld at index %lld",
                             (long long)a->T, (long long)qsl[b + 1], (long long)(b + 1));
    if (lens[b] < q_len || lens[b] > a->M * a->bs)
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "paged_attention: seq_lens[%lld] = %lld must lie in [%lld, %lld] "
                             "(its new tokens, the block table's capacity)",
                             (long long)b, (long long)lens[b], (long long)q_len,
                             (long long)(a->M * a->bs));
    int64_t nblocks = (lens[b] + a->bs - 1) / a->bs;
    for (int64_t j = 0; j < nblocks; ++j) {
      int64_t e = paged_int2(&a->table, b, j);
      if (e < 0 || e >= a->N)
        return tpu_status_make(TPU_CODE_INDEX_ERROR,
                               "paged_attention: block_table[%lld, %lld] = %lld is out of bounds "
                               "for a cache of %lld blocks",
                               (long long)b, (long long)j, (long long)e, (long long)a->N);
    }
  }
  return TPU_OK;
}

/* ---- paged_kv_write ------------------------------------------------------------- */

static void write_rows(const tpu_view_t* src, const tpu_view_t* cache, int64_t t, int64_t blk,
                       int64_t off) {
  size_t es = tpu_dtype_size(src->dtype);
  for (int64_t h = 0; h < src->sizes[1]; ++h) {
    const char* from = (const char*)tpu_view_ptr(src) +
                       (t * src->strides[0] + h * src->strides[1]) * (int64_t)es;
    char* to = (char*)tpu_view_ptr(cache) +
               (blk * cache->strides[0] + off * cache->strides[1] + h * cache->strides[2]) *
                   (int64_t)es;
    tpu_convert(to, cache->dtype, cache->strides[3], from, src->dtype, src->strides[2],
                src->sizes[2]);
  }
}

static void write_tokens(void* arg, int64_t begin, int64_t end) {
  const paged_write_args_t* a = (const paged_write_args_t*)arg;
  for (int64_t t = begin; t < end; ++t) {
    int64_t s = paged_int1(&a->slots, t);
    if (s < 0) continue; /* padding */
    write_rows(&a->key, &a->key_cache, t, s / a->bs, s % a->bs);
    write_rows(&a->value, &a->value_cache, t, s / a->bs, s % a->bs);
  }
}

static tpu_status_t write_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_exec_ctx_t* ctx) {
  (void)ctx;
  paged_write_args_t a;
  TPU_RETURN_IF_ERROR(tpu_paged_write_parse(def, node, &a));
  TPU_RETURN_IF_ERROR(tpu_paged_write_check_slots(&a));
  int64_t row = a.Hkv * (a.D + a.Dv);
  int64_t grain = row > 0 ? (1 << 14) / row + 1 : a.T + 1;
  tpu_parallel_for(a.T, grain, write_tokens, &a);
  return TPU_OK;
}

static tpu_status_t write_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_view_t* outs) {
  (void)outs;
  paged_write_args_t a;
  return tpu_paged_write_parse(def, node, &a);
}

static tpu_status_t write_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  paged_write_args_t a;
  return tpu_paged_write_parse(def, node, &a);
}

/* ---- paged_attention -------------------------------------------------------------- */

typedef struct pa_job {
  paged_attn_args_t a;
  const tpu_view_t* out;
  const int64_t *qsl, *lens;
  int64_t* chunk_start; /* [B + 1]: first chunk of each sequence */
  int64_t G;            /* query heads per cache head */
  atomic_int failed;
} pa_job_t;

typedef struct pa_scratch {
  float *q, *acc, *s, *kt, *kraw, *v, *m, *l;
} pa_scratch_t;

/* Row `r` of the unit's queries is token i0 + r / G, head hk * G + r % G. */
static void load_queries(const pa_job_t* j, float* qf, int64_t t0, int64_t rows_tok, int64_t hk) {
  const paged_attn_args_t* a = &j->a;
  size_t es = tpu_dtype_size(a->dtype);
  for (int64_t ti = 0; ti < rows_tok; ++ti)
    for (int64_t g = 0; g < j->G; ++g) {
      float* dst = qf + (ti * j->G + g) * a->D;
      const char* src = (const char*)tpu_view_ptr(&a->q) +
                        ((t0 + ti) * a->q.strides[0] + (hk * j->G + g) * a->q.strides[1]) *
                            (int64_t)es;
      tpu_convert(dst, TPU_DTYPE_F32, 1, src, a->dtype, a->q.strides[2], a->D);
      float sc = (float)a->scale;
      for (int64_t d = 0; d < a->D; ++d) dst[d] *= sc;
    }
}

/* Keys [j0, j0 + n) of cache block `blk`, head hk: Kᵀ [D, bs] and V [n, Dv]. */
static void load_block(const paged_attn_args_t* a, pa_scratch_t* w, int64_t blk, int64_t hk,
                       int64_t n) {
  size_t es = tpu_dtype_size(a->dtype);
  for (int64_t jj = 0; jj < n; ++jj) {
    const char* k = (const char*)tpu_view_ptr(&a->kc) +
                    (blk * a->kc.strides[0] + jj * a->kc.strides[1] + hk * a->kc.strides[2]) *
                        (int64_t)es;
    const char* v = (const char*)tpu_view_ptr(&a->vc) +
                    (blk * a->vc.strides[0] + jj * a->vc.strides[1] + hk * a->vc.strides[2]) *
                        (int64_t)es;
    /* rows convert densely (tpu_convert's fast paths); the transpose below
     * then moves float32 within L1 */
    tpu_convert(w->kraw + jj * a->D, TPU_DTYPE_F32, 1, k, a->dtype, a->kc.strides[3], a->D);
    tpu_convert(w->v + jj * a->Dv, TPU_DTYPE_F32, 1, v, a->dtype, a->vc.strides[3], a->Dv);
  }
  for (int64_t jj = 0; jj < n; ++jj)
    for (int64_t d = 0; d < a->D; ++d) w->kt[d * a->bs + jj] = w->kraw[jj * a->D + d];
}

/* The online-softmax step of R query rows (row r at position p0 + r / G)
 * over keys [j0, j0 + n) of one block, whose tiles load_block filled.
 * Compiled for AVX-512, AVX2 and the baseline (vmath.h). */
VM_SIMD_CLONES void tpu_paged_attn_block(const paged_attn_args_t* a, pa_scratch_t* w, int64_t R,
                                         int64_t G, int64_t p0, int64_t j0, int64_t n);
VM_SIMD_CLONES void tpu_paged_attn_block(const paged_attn_args_t* a, pa_scratch_t* w, int64_t R,
                                         int64_t G, int64_t p0, int64_t j0, int64_t n) {
  const int64_t D = a->D, Dv = a->Dv, bs = a->bs;
  const float cap = (float)a->softcap;
  for (int64_t r = 0; r < R; ++r) {
    const float* q = w->q + r * D;
    float* s = w->s + r * bs;
    for (int64_t jj = 0; jj < n; ++jj) s[jj] = 0.0f;
    for (int64_t d = 0; d < D; ++d) {
      const float qd = q[d];
      const float* kt = w->kt + d * bs;
      for (int64_t jj = 0; jj < n; ++jj) s[jj] += qd * kt[jj];
    }
    const int64_t p = p0 + r / G;
    float mx = -INFINITY;
    for (int64_t jj = 0; jj < n; ++jj) {
      if (cap > 0) s[jj] = cap * tanhf(s[jj] / cap);
      if (!paged_visible(a, p, j0 + jj)) s[jj] = -INFINITY;
      mx = s[jj] > mx ? s[jj] : mx;
    }
    if (mx == -INFINITY) continue; /* nothing visible in this block */
    float m_new = mx > w->m[r] ? mx : w->m[r];
    float* acc = w->acc + r * Dv;
    if (m_new > w->m[r]) {
      float corr = expf(w->m[r] - m_new); /* 0 for the first visible block */
      w->l[r] *= corr;
      for (int64_t d = 0; d < Dv; ++d) acc[d] *= corr;
      w->m[r] = m_new;
    }
    float sum = 0.0f;
    for (int64_t jj = 0; jj < n; ++jj) {
      float pj = expf(s[jj] - m_new); /* 0 for masked keys */
      sum += pj;
      if (pj == 0.0f) continue;
      const float* v = w->v + jj * Dv;
      for (int64_t d = 0; d < Dv; ++d) acc[d] += pj * v[d];
    }
    w->l[r] += sum;
  }
}

/* One work unit: sequence b, cache head hk, new tokens [i0, i1). */
static void run_unit(const pa_job_t* j, pa_scratch_t* w, int64_t b, int64_t hk, int64_t i0,
                     int64_t i1) {
  const paged_attn_args_t* a = &j->a;
  const int64_t G = j->G, Dv = a->Dv, bs = a->bs;
  const int64_t q_len = j->qsl[b + 1] - j->qsl[b], len = j->lens[b], ctx0 = len - q_len;
  const int64_t R = (i1 - i0) * G;
  load_queries(j, w->q, j->qsl[b] + i0, i1 - i0, hk);
  for (int64_t r = 0; r < R; ++r) w->m[r] = -INFINITY, w->l[r] = 0.0f;
  memset(w->acc, 0, sizeof(float) * (size_t)(R * Dv));
  /* keys any row sees: [lo, hi] */
  int64_t hi = a->causal ? ctx0 + i1 - 1 : len - 1;
  int64_t lo = a->window > 0 ? ctx0 + i0 - a->window + 1 : 0;
  if (lo < 0) lo = 0;
  for (int64_t kb = lo / bs; kb * bs <= hi; ++kb) {
    int64_t j0 = kb * bs, n = hi + 1 - j0 < bs ? hi + 1 - j0 : bs;
    load_block(a, w, paged_int2(&a->table, b, kb), hk, n);
    tpu_paged_attn_block(a, w, R, G, ctx0 + i0, j0, n);
  }
  size_t es = tpu_dtype_size(a->dtype);
  for (int64_t r = 0; r < R; ++r) {
    float* acc = w->acc + r * Dv;
    float inv = w->l[r] > 0 ? 1.0f / w->l[r] : 0.0f;
    for (int64_t d = 0; d < Dv; ++d) acc[d] *= inv;
    int64_t t = j->qsl[b] + i0 + r / G, h = hk * G + r % G;
    char* dst = (char*)tpu_view_ptr(j->out) +
                (t * j->out->strides[0] + h * j->out->strides[1]) * (int64_t)es;
    tpu_convert(dst, a->dtype, j->out->strides[2], acc, TPU_DTYPE_F32, 1, Dv);
  }
}

static void pa_chunk(void* arg, int64_t begin, int64_t end) {
  pa_job_t* j = (pa_job_t*)arg;
  const paged_attn_args_t* a = &j->a;
  int64_t R = PA_QC * j->G;
  size_t nq = (size_t)(R * a->D), nacc = (size_t)(R * a->Dv), ns = (size_t)(R * a->bs);
  size_t nkt = (size_t)(a->D * a->bs), nv = (size_t)(a->bs * a->Dv);
  size_t total = nq + nacc + ns + 2 * nkt + nv + 2 * (size_t)R;
  float* buf = tpu_scratch_alloc(sizeof(float) * (total > 0 ? total : 1));
  if (!buf) {
    atomic_store(&j->failed, 1);
    return;
  }
  pa_scratch_t w = {.q = buf};
  w.acc = w.q + nq, w.s = w.acc + nacc, w.kt = w.s + ns, w.kraw = w.kt + nkt;
  w.v = w.kraw + nkt;
  w.m = w.v + nv, w.l = w.m + R;
  for (int64_t u = begin; u < end; ++u) {
    int64_t hk = u % a->Hkv, c = u / a->Hkv;
    int64_t lo = 0, hi = a->B; /* the sequence whose chunks hold c */
    while (hi - lo > 1) {
      int64_t mid = (lo + hi) / 2;
      if (j->chunk_start[mid] <= c) lo = mid;
      else hi = mid;
    }
    int64_t b = lo, q_len = j->qsl[b + 1] - j->qsl[b];
    int64_t i0 = (c - j->chunk_start[b]) * PA_QC, i1 = i0 + PA_QC < q_len ? i0 + PA_QC : q_len;
    run_unit(j, &w, b, hk, i0, i1);
  }
  tpu_scratch_free(buf);
}

/* Zeros rows [t0, T) of the output: padding tokens past query_start_loc[B]. */
static void zero_rows(const tpu_view_t* out, int64_t t0) {
  double zero = 0.0;
  for (int64_t t = t0; t < out->sizes[0]; ++t)
    for (int64_t h = 0; h < out->sizes[1]; ++h)
      tpu_convert(view_at(out, t * out->strides[0] + h * out->strides[1]), out->dtype,
                  out->strides[2], &zero, TPU_DTYPE_F64, 0, out->sizes[2]);
}

static tpu_status_t pa_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  (void)ctx;
  pa_job_t* j = calloc(1, sizeof(*j));
  if (!j) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "paged_attention job");
  tpu_status_t s = tpu_paged_attn_parse(def, node, &j->a);
  const paged_attn_args_t* a = &j->a;
  int64_t* ints = s == TPU_OK ? malloc(sizeof(int64_t) * (size_t)(3 * a->B + 3)) : NULL;
  if (s == TPU_OK && !ints) s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "paged_attention lengths");
  if (s == TPU_OK) s = tpu_paged_attn_read_lengths(a, ints, ints + a->B + 1);
  if (s != TPU_OK) {
    free(ints);
    free(j);
    return s;
  }
  j->qsl = ints, j->lens = ints + a->B + 1, j->chunk_start = ints + 2 * a->B + 1;
  j->out = &node->outputs[0];
  j->G = a->Hq / a->Hkv;
  atomic_init(&j->failed, 0);
  double work = 0;
  j->chunk_start[0] = 0;
  for (int64_t b = 0; b < a->B; ++b) {
    int64_t q_len = j->qsl[b + 1] - j->qsl[b];
    j->chunk_start[b + 1] = j->chunk_start[b] + (q_len + PA_QC - 1) / PA_QC;
    work += (double)q_len * (double)j->lens[b];
  }
  work *= (double)a->Hq * (double)(a->D + a->Dv);
  int64_t units = j->chunk_start[a->B] * a->Hkv;
  if (units > 0)
    tpu_parallel_for(units, work < PA_SMALL_WORK ? units : 1, pa_chunk, j);
  zero_rows(j->out, j->qsl[a->B]);
  int failed = atomic_load(&j->failed);
  free(ints);
  free(j);
  if (failed) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "paged_attention scratch");
  return TPU_OK;
}

static tpu_status_t pa_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* outs) {
  paged_attn_args_t a;
  TPU_RETURN_IF_ERROR(tpu_paged_attn_parse(def, node, &a));
  int64_t sizes[3] = {a.T, a.Hq, a.Dv};
  outs[0] = view_of(NULL, a.dtype, 3, sizes);
  return TPU_OK;
}

static tpu_status_t pa_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  paged_attn_args_t a;
  return tpu_paged_attn_parse(def, node, &a);
}

/* ---- rows ----------------------------------------------------------------------- */

static const tpu_op_def_t k_ops[] = {
    {.name = "paged_kv_write", .inputs = "key,value,key_cache!,value_cache!,slot_mapping",
     .attrs = "", .outputs = "", .aten = NULL, .kernel = write_kernel, .infer = write_infer,
     .check = write_check, .impl = NULL, .flags = 0},
    {.name = "paged_attention",
     .inputs = "query,key_cache,value_cache,query_start_loc,seq_lens,block_table",
     .attrs = "scale,causal,sliding_window,softcap", .outputs = "output", .aten = NULL,
     .kernel = pa_kernel, .infer = pa_infer, .check = pa_check, .impl = NULL,
     .flags = TPU_OP_HEAVY},
};

const tpu_op_family_t tpu_family_paged_attention = {
    "paged_attention", k_ops, (int32_t)(sizeof(k_ops) / sizeof(k_ops[0]))};
