/* advanced.c — the advanced-indexing family (index_adv): index.Tensor,
 * _index_put_impl_/index_put, take, put_, index_fill, index_copy,
 * masked_select, masked_scatter, nonzero, nonzero_static and
 * the count rows that size data-dependent outputs.
 *
 * Argument parsing lives in advanced_args.c, the reference in
 * advanced_ref.c. One row engine moves every element (see advanced.h): rows (o, b) each
 * move an inner block I between a destination and a source, each side
 * addressed by an outer walk O, a per-b offset table and an inner walk I.
 * Index values are first copied to int64 and checked as a whole (negative
 * values wrap where PyTorch wraps them), so an out-of-range index fails with
 * PyTorch's message and exception type (IndexError) before anything is
 * written. Gathers run in parallel over rows. Scatters (put, accumulate) are
 * deterministic: the destination offsets are split into ranges, one task per
 * range, each task visiting its rows in increasing b, so duplicates resolve
 * the same way every run (last write wins, sums add in index order) and no
 * two threads touch one element. Sums run in the compute type (half types
 * in float32, integers and bool in wrapping int64) on converted copies.
 *
 * Data-dependent sizes (index with a bool mask, nonzero, masked_select):
 * each such row has a `sync_size` attr and a companion "<name>_count" row
 * with the same inputs; the bridge runs the count row first, reads its
 * 0-dim int64 result after a sync and fills `sync_size` (docs/kernel-guide.md).
 */
#include "kernels/index/advanced.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/common/kernel_util.h"

/* ---- helpers: offsets, index loading, counting --------------------------------- */

/* Offset of the element with row-major number `lin` in v. */
static int64_t lin_offset(const tpu_view_t* v, int64_t lin) {
  int64_t off = 0;
  for (int32_t d = v->ndim - 1; d >= 0; --d) {
    off += (lin % v->sizes[d]) * v->strides[d];
    lin /= v->sizes[d];
  }
  return off;
}

typedef struct lin_job {
  const tpu_view_t* v;
  const int64_t* lin; /* NULL: identity */
  int64_t* out;
} lin_job_t;

static void lin_chunk(void* arg, int64_t b, int64_t e) {
  const lin_job_t* j = (const lin_job_t*)arg;
  if (tpu_view_is_contiguous(j->v)) { /* offsets are the numbers themselves */
    for (int64_t i = b; i < e; ++i) j->out[i] = j->lin ? j->lin[i] : i;
    return;
  }
  for (int64_t i = b; i < e; ++i) j->out[i] = lin_offset(j->v, j->lin ? j->lin[i] : i);
}

/* out[i] = offset in v of row-major element lin[i] (or i). */
static void lin_offsets(const tpu_view_t* v, const int64_t* lin, int64_t n, int64_t* out) {
  lin_job_t j = {v, lin, out};
  tpu_parallel_for(n, WALK_GRAIN, lin_chunk, &j);
}

static void* xmalloc(int64_t n, size_t es) { return malloc((size_t)(n > 0 ? n : 1) * es); }

static tpu_status_t oom(void) {
  return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "indexing scratch allocation failed");
}

/* Row-major numbers of v's nonzero elements (ascending): *pos (malloc'd), *n. */
typedef struct nz_job {
  walk_t w;
  const char* base;
  tpu_dtype_t dt;
  int64_t chunk, nchunks;
  int64_t* counts;
  int64_t* pos; /* NULL: count only */
} nz_job_t;

static void nz_chunk(void* arg, int64_t cb, int64_t ce) {
  nz_job_t* j = (nz_job_t*)arg;
  uint8_t buf[4096];
  for (int64_t c = cb; c < ce; ++c) {
    int64_t b = c * j->chunk, e = b + j->chunk < j->w.numel ? b + j->chunk : j->w.numel;
    int64_t cnt = 0, at = j->pos ? j->counts[c] : 0;
    for (int64_t k = b; k < e; k += (int64_t)sizeof buf) {
      int64_t m = e - k < (int64_t)sizeof buf ? e - k : (int64_t)sizeof buf;
      walk_gather(buf, TPU_DTYPE_BOOL, j->base, j->dt, &j->w, k, m);
      if (j->pos) {
        for (int64_t i = 0; i < m; ++i)
          if (buf[i]) j->pos[at++] = k + i;
      } else {
        for (int64_t i = 0; i < m; ++i) cnt += buf[i] != 0;
      }
    }
    if (!j->pos) j->counts[c] = cnt;
  }
}

static void nz_init(nz_job_t* j, const tpu_view_t* v) {
  const tpu_view_t* views[1] = {v};
  walk_init_views(&j->w, 1, views);
  j->base = tpu_view_ptr(v);
  j->dt = v->dtype;
  j->chunk = WALK_GRAIN;
  j->nchunks = (j->w.numel + j->chunk - 1) / j->chunk;
}

static tpu_status_t count_nonzero_view(const tpu_view_t* v, int64_t* count) {
  nz_job_t j = {0};
  nz_init(&j, v);
  *count = 0;
  if (tpu_view_numel(v) == 0) return TPU_OK;
  j.counts = xmalloc(j.nchunks, sizeof(int64_t));
  if (!j.counts) return oom();
  tpu_parallel_for(j.nchunks, 1, nz_chunk, &j);
  for (int64_t c = 0; c < j.nchunks; ++c) *count += j.counts[c];
  free(j.counts);
  return TPU_OK;
}

static tpu_status_t nonzero_positions(const tpu_view_t* v, int64_t** pos, int64_t* n) {
  nz_job_t j = {0};
  nz_init(&j, v);
  *n = 0, *pos = NULL;
  j.counts = xmalloc(j.nchunks, sizeof(int64_t));
  if (!j.counts) return oom();
  if (tpu_view_numel(v)) tpu_parallel_for(j.nchunks, 1, nz_chunk, &j);
  for (int64_t c = 0; c < j.nchunks; ++c) {
    int64_t k = j.counts[c];
    j.counts[c] = *n;
    *n += k;
  }
  j.pos = xmalloc(*n, sizeof(int64_t));
  if (!j.pos) {
    free(j.counts);
    return oom();
  }
  if (*n) tpu_parallel_for(j.nchunks, 1, nz_chunk, &j);
  free(j.counts);
  *pos = j.pos;
  return TPU_OK;
}

/* v (any index dtype), broadcast to nd/sizes, as int64 in row-major order,
 * wrapped (negatives + bound when `wrap`) and checked against [0, bound). */
static tpu_status_t load_index(const tpu_view_t* v, int32_t nd, const int64_t* sizes,
                               int64_t bound, bool wrap, int32_t msg_dim, bool take_msg,
                               int64_t** out) {
  tpu_view_t e;
  if (!view_expand(v, nd, sizes, &e))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "index shape does not broadcast");
  int64_t n = tpu_view_numel(&e);
  int64_t* buf = xmalloc(n, sizeof(int64_t));
  if (!buf) return oom();
  tpu_view_t dst = view_of(buf, TPU_DTYPE_I64, nd, sizes);
  view_copy(&dst, &e);
  for (int64_t i = 0; i < n; ++i) {
    int64_t x = buf[i];
    if (wrap && x < 0) x += bound;
    if (x < 0 || x >= bound) {
      tpu_status_t s =
          take_msg ? tpu_status_make(TPU_CODE_INDEX_ERROR,
                                     "out of range: tried to access index %lld on a tensor of "
                                     "%lld elements.",
                                     (long long)buf[i], (long long)bound)
                   : tpu_status_make(TPU_CODE_INDEX_ERROR,
                                     "index %lld is out of bounds for dimension %d with size %lld",
                                     (long long)buf[i], msg_dim, (long long)bound);
      free(buf);
      return s;
    }
    buf[i] = x;
  }
  *out = buf;
  return TPU_OK;
}

/* ---- the row engine ------------------------------------------------------------- */

typedef enum { ROW_COPY, ROW_PUT, ROW_ADD } row_mode_t;

typedef struct row_job row_job_t;
typedef void (*row_add_fn)(char* dst, int64_t ds, const char* src, int64_t ss, int64_t n);

struct row_job {
  walk_t outer, inner; /* views 0 = dst, 1 = src */
  int64_t NO, NB, NI;
  int64_t* out_offs; /* [NO][2] */
  const int64_t *dst_b, *src_b;
  char* dst;
  const char* src;
  tpu_dtype_t dt;
  int64_t es;
  row_mode_t mode;
  row_add_fn add;
  int64_t key_lo, key_span, nparts;
};

#define AX_ADD(C, T, W)                                                                  \
  static void add_##C(char* dst, int64_t ds, const char* src, int64_t ss, int64_t n) {   \
    T* d = (T*)dst;                                                                      \
    const T* s = (const T*)src;                                                          \
    for (int64_t e = 0; e < n; ++e) d[e * ds] = (T)((W)d[e * ds] + (W)s[e * ss]);        \
  }
AX_ADD(I64, int64_t, uint64_t)
AX_ADD(F32, float, float)
AX_ADD(F64, double, double)
#undef AX_ADD

static const row_add_fn k_add[TPU_COMPUTE_COUNT] = {
    [TPU_COMPUTE_I64] = add_I64, [TPU_COMPUTE_F32] = add_F32, [TPU_COMPUTE_F64] = add_F64};

/* Single elements (no inner dims): typed moves over a range of b. */
#define AX_MOVE1(E, name, T, C, K)                                                       \
  static void move1_##E(const row_job_t* j, int64_t od, int64_t os, int64_t b0,          \
                        int64_t b1, int64_t p) {                                         \
    T* d = (T*)j->dst + od;                                                              \
    const T* s = (const T*)j->src + os;                                                  \
    for (int64_t b = b0; b < b1; ++b) {                                                  \
      int64_t k = j->dst_b[b];                                                           \
      if (p >= 0 && (k - j->key_lo) / j->key_span != p) continue;                        \
      d[k] = s[j->src_b[b]];                                                             \
    }                                                                                    \
  }
TPU_DTYPE_LIST(AX_MOVE1)
#undef AX_MOVE1

typedef void (*row_move1_fn)(const row_job_t* j, int64_t od, int64_t os, int64_t b0,
                             int64_t b1, int64_t p);
static const row_move1_fn k_move1[TPU_DTYPE_COUNT] = {
#define AX_ENTRY(E, name, T, C, K) move1_##E,
    TPU_DTYPE_LIST(AX_ENTRY)
#undef AX_ENTRY
};

typedef struct row_at {
  const row_job_t* j;
  int64_t d0, s0;
} row_at_t;

static void inner_run(void* arg, const int64_t* offs, const int64_t* steps, int64_t n,
                      int64_t first) {
  (void)first;
  const row_at_t* r = (const row_at_t*)arg;
  const row_job_t* j = r->j;
  char* d = j->dst + (r->d0 + offs[0]) * j->es;
  const char* s = j->src + (r->s0 + offs[1]) * j->es;
  if (j->mode == ROW_ADD)
    j->add(d, steps[0], s, steps[1], n);
  else
    tpu_convert(d, j->dt, steps[0], s, j->dt, steps[1], n);
}

static void run_row(const row_job_t* j, int64_t o, int64_t b) {
  row_at_t r = {j, j->out_offs[2 * o] + j->dst_b[b], j->out_offs[2 * o + 1] + j->src_b[b]};
  walk_range(&j->inner, 0, j->NI, inner_run, &r);
}

static bool single(const row_job_t* j) { return j->NI == 1 && j->mode != ROW_ADD; }

static void rows_gather(void* arg, int64_t begin, int64_t end) {
  const row_job_t* j = (const row_job_t*)arg;
  if (single(j)) {
    for (int64_t o = begin / j->NB; o * j->NB < end; ++o) {
      int64_t b0 = begin > o * j->NB ? begin - o * j->NB : 0;
      int64_t b1 = end < (o + 1) * j->NB ? end - o * j->NB : j->NB;
      k_move1[j->dt](j, j->out_offs[2 * o], j->out_offs[2 * o + 1], b0, b1, -1);
    }
    return;
  }
  for (int64_t r = begin; r < end; ++r) run_row(j, r / j->NB, r % j->NB);
}

static void rows_scatter(void* arg, int64_t begin, int64_t end) {
  const row_job_t* j = (const row_job_t*)arg;
  for (int64_t p = begin; p < end; ++p) {
    int64_t part = j->nparts > 1 ? p : -1;
    if (single(j)) {
      for (int64_t o = 0; o < j->NO; ++o)
        k_move1[j->dt](j, j->out_offs[2 * o], j->out_offs[2 * o + 1], 0, j->NB, part);
      continue;
    }
    for (int64_t b = 0; b < j->NB; ++b) {
      if (part >= 0 && (j->dst_b[b] - j->key_lo) / j->key_span != part) continue;
      for (int64_t o = 0; o < j->NO; ++o) run_row(j, o, b);
    }
  }
}

/* Lays out a job: dst/src views with outer dims (dst dims od[], src dims
 * os[]) and inner dims (id[], is[]); NULL src: a scalar (all strides 0). */
static tpu_status_t job_init(row_job_t* j, const tpu_view_t* dst, const tpu_view_t* src,
                             int32_t nO, const int32_t* od, const int32_t* os, int32_t nI,
                             const int32_t* id, const int32_t* is, int64_t NB,
                             const int64_t* dst_b, const int64_t* src_b, row_mode_t mode) {
  memset(j, 0, sizeof(*j));
  walk_start(&j->outer, 2);
  walk_start(&j->inner, 2);
  for (int32_t k = 0; k < nO; ++k) {
    int64_t st[2] = {dst->strides[od[k]], src ? src->strides[os[k]] : 0};
    walk_add(&j->outer, dst->sizes[od[k]], st);
  }
  for (int32_t k = 0; k < nI; ++k) {
    int64_t st[2] = {dst->strides[id[k]], src ? src->strides[is[k]] : 0};
    walk_push(&j->inner, dst->sizes[id[k]], st);
  }
  j->NO = j->outer.numel, j->NI = j->inner.numel, j->NB = NB;
  j->dst_b = dst_b, j->src_b = src_b;
  j->dst = tpu_view_ptr(dst);
  j->src = src ? tpu_view_ptr(src) : NULL;
  j->dt = dst->dtype;
  j->es = (int64_t)tpu_dtype_size(dst->dtype);
  j->mode = mode;
  j->out_offs = xmalloc(j->NO * 2, sizeof(int64_t));
  if (!j->out_offs) return oom();
  for (int64_t o = 0; o < j->NO; ++o) walk_offsets(&j->outer, j->outer.ndim, o, j->out_offs + 2 * o);
  return TPU_OK;
}

static void job_execute(row_job_t* j) {
  int64_t rows = j->NO * j->NB, work = rows * j->NI;
  if (rows == 0 || j->NI == 0) return;
  if (j->mode == ROW_COPY) {
    tpu_parallel_for(rows, j->NI >= WALK_GRAIN ? 1 : WALK_GRAIN / j->NI, rows_gather, j);
  } else {
    int64_t lo = j->dst_b[0], hi = lo;
    for (int64_t b = 1; b < j->NB; ++b) {
      if (j->dst_b[b] < lo) lo = j->dst_b[b];
      if (j->dst_b[b] > hi) hi = j->dst_b[b];
    }
    int64_t parts = work >= 2 * WALK_GRAIN ? 4 * (int64_t)tpu_parallel_threads() : 1;
    if (parts > hi - lo + 1) parts = hi - lo + 1;
    j->nparts = parts;
    j->key_lo = lo;
    j->key_span = (hi - lo + parts) / parts;
    tpu_parallel_for(parts, 1, rows_scatter, j);
  }
}

/* ---- index.Tensor / _index_put_impl_ ------------------------------------------- */

/* off[b]: the indexed offset in `v` (self's shape) of each position of B. */
static tpu_status_t term_offsets(const ax_args_t* a, const tpu_view_t* v, int64_t NB,
                                 int64_t* off) {
  memset(off, 0, (size_t)(NB > 0 ? NB : 1) * sizeof(int64_t));
  for (int32_t k = 0; k < a->nterms && NB; ++k) {
    const ax_term_t* t = &a->terms[k];
    int64_t* vals = NULL;
    if (t->mask) {
      int64_t *pos = NULL, n = 0;
      TPU_RETURN_IF_ERROR(nonzero_positions(t->idx, &pos, &n));
      if (a->bnd >= 0 && n != a->sync && a->sync >= 0) {
        free(pos);
        return tpu_status_make(TPU_CODE_INTERNAL, "mask count changed since it was read");
      }
      /* positions (in the mask's shape) -> offsets of v's dims [dim, dim + ndims) */
      tpu_view_t sub = *v;
      sub.ndim = t->ndims;
      for (int32_t m = 0; m < t->ndims; ++m)
        sub.sizes[m] = v->sizes[t->dim + m], sub.strides[m] = v->strides[t->dim + m];
      lin_offsets(&sub, pos, n, pos);
      tpu_view_t pv = view_of(pos, TPU_DTYPE_I64, 1, &n);
      tpu_status_t s = load_index(&pv, a->bnd, a->bsizes, INT64_MAX, false, 0, false, &vals);
      free(pos);
      TPU_RETURN_IF_ERROR(s);
      for (int64_t b = 0; b < NB; ++b) off[b] += vals[b];
    } else {
      TPU_RETURN_IF_ERROR(load_index(t->idx, a->bnd, a->bsizes, v->sizes[t->dim], true, t->dim,
                                     false, &vals));
      for (int64_t b = 0; b < NB; ++b) off[b] += vals[b] * v->strides[t->dim];
    }
    free(vals);
  }
  return TPU_OK;
}

/* B-position offsets of a view laid out [O..., B..., I...] (dims from nO). */
static void b_offsets(const tpu_view_t* v, int32_t nO, int32_t bnd, const int64_t* bsizes,
                      int64_t NB, int64_t* out) {
  tpu_view_t sub = *v;
  sub.ndim = bnd;
  for (int32_t d = 0; d < bnd; ++d) sub.sizes[d] = bsizes[d], sub.strides[d] = v->strides[nO + d];
  lin_offsets(&sub, NULL, NB, out);
}

static tpu_status_t run_index(ax_args_t* a, const tpu_view_t* out) {
  int64_t NB = 1;
  for (int32_t d = 0; d < a->bnd; ++d) NB *= a->bsizes[d];
  if (tpu_view_numel(out) == 0) return TPU_OK;
  int64_t* off = xmalloc(NB, sizeof(int64_t));
  int64_t* ob = xmalloc(NB, sizeof(int64_t));
  if (!off || !ob) {
    free(off), free(ob);
    return oom();
  }
  tpu_status_t s = term_offsets(a, a->self, NB, off);
  row_job_t j;
  if (s == TPU_OK) {
    b_offsets(out, a->nO, a->bnd, a->bsizes, NB, ob);
    int32_t od[TPU_MAX_DIMS], id[TPU_MAX_DIMS];
    for (int32_t k = 0; k < a->nO; ++k) od[k] = k;
    for (int32_t k = 0; k < a->nI; ++k) id[k] = a->nO + a->bnd + k;
    s = job_init(&j, out, a->self, a->nO, od, a->odims, a->nI, id, a->idims, NB, ob, off,
                 ROW_COPY);
    if (s == TPU_OK) job_execute(&j);
    free(j.out_offs);
  }
  free(off), free(ob);
  return s;
}

/* Scatters src into dst (dst's shape = self's), converting to the compute
 * type for sums. `prep` fills the offset tables for the chosen dst/src views. */
typedef tpu_status_t (*scatter_prep_fn)(const ax_args_t* a, const tpu_view_t* dst,
                                        const tpu_view_t* src, row_job_t* j, void* ctx);

static tpu_status_t scatter_into(const ax_args_t* a, const tpu_view_t* out, const tpu_view_t* src,
                                 bool add, scatter_prep_fn prep, void* ctx) {
  tpu_view_t dst = *out, s2 = src ? *src : (tpu_view_t){0};
  void *acc = NULL, *sbuf = NULL;
  if (add) {
    tpu_compute_type_t ct = tpu_dtype_compute(a->dtype);
    tpu_dtype_t cdt = tpu_compute_storage_dtype(ct);
    if (ct == TPU_COMPUTE_B8) cdt = TPU_DTYPE_I64;
    if (cdt != a->dtype) {
      acc = xmalloc(tpu_view_numel(out), tpu_dtype_size(cdt));
      sbuf = xmalloc(tpu_view_numel(src), tpu_dtype_size(cdt));
      if (!acc || !sbuf) {
        free(acc), free(sbuf);
        return oom();
      }
      dst = view_of(acc, cdt, out->ndim, out->sizes);
      view_copy(&dst, out);
      s2 = view_of(sbuf, cdt, src->ndim, src->sizes);
      view_copy(&s2, src);
    }
  }
  row_job_t j;
  memset(&j, 0, sizeof j);
  tpu_status_t s = prep(a, &dst, src ? &s2 : NULL, &j, ctx);
  if (s == TPU_OK) {
    if (add) {
      j.mode = ROW_ADD;
      j.add = k_add[tpu_dtype_compute(dst.dtype)];
    }
    job_execute(&j);
    if (acc) view_copy(out, &dst);
  }
  free(j.out_offs);
  free((void*)j.dst_b), free((void*)j.src_b);
  free(acc), free(sbuf);
  return s;
}

static tpu_status_t prep_index_put(const ax_args_t* a, const tpu_view_t* dst,
                                   const tpu_view_t* src, row_job_t* j, void* ctx) {
  const tpu_view_t* vals = (const tpu_view_t*)ctx; /* values expanded to [O, B, I] */
  (void)src;
  int64_t NB = 1;
  for (int32_t d = 0; d < a->bnd; ++d) NB *= a->bsizes[d];
  int64_t* off = xmalloc(NB, sizeof(int64_t));
  int64_t* vb = xmalloc(NB, sizeof(int64_t));
  if (!off || !vb) {
    free(off), free(vb);
    return oom();
  }
  tpu_status_t s = term_offsets(a, dst, NB, off);
  if (s != TPU_OK) {
    free(off), free(vb);
    return s;
  }
  const tpu_view_t* v = src; /* vals, or its converted copy (same shape) */
  (void)vals;
  b_offsets(v, a->nO, a->bnd, a->bsizes, NB, vb);
  int32_t vo[TPU_MAX_DIMS], vi[TPU_MAX_DIMS];
  for (int32_t k = 0; k < a->nO; ++k) vo[k] = k;
  for (int32_t k = 0; k < a->nI; ++k) vi[k] = a->nO + a->bnd + k;
  s = job_init(j, dst, v, a->nO, a->odims, vo, a->nI, a->idims, vi, NB, off, vb, ROW_PUT);
  if (s != TPU_OK) free(off), free(vb), j->dst_b = j->src_b = NULL;
  return s;
}

static tpu_status_t run_index_put(ax_args_t* a, const tpu_view_t* out) {
  if (!views_same(out, a->self)) view_copy(out, a->self);
  if (a->mask_term >= 0) {
    int64_t n;
    TPU_RETURN_IF_ERROR(count_nonzero_view(a->terms[a->mask_term].idx, &n));
    ax_args_t b = *a;
    b.self = a->self;
    /* recompute B with the count */
    b.bnd = 0;
    for (int32_t k = 0; k < b.nterms; ++k) {
      int64_t c[1] = {n};
      if (!(b.terms[k].mask ? tpu_ax_bcast(&b.bnd, b.bsizes, 1, c)
                            : tpu_ax_bcast(&b.bnd, b.bsizes, b.terms[k].idx->ndim,
                                         b.terms[k].idx->sizes)))
        return tpu_status_make(TPU_CODE_INDEX_ERROR,
                               "shape mismatch: indexing tensors could not be broadcast "
                               "together");
    }
    b.sync = n;
    *a = b;
  }
  ax_args_t r = *a;
  tpu_ax_result_of_terms(&r);
  tpu_view_t vals, v0 = *a->src;
  uint64_t storage = 0; /* a 0-dim value of another dtype, converted (as index_put_ does) */
  if (v0.dtype != a->dtype) {
    tpu_convert(&storage, a->dtype, 1, tpu_view_ptr(&v0), v0.dtype, 1, 1);
    v0 = view_of(&storage, a->dtype, 0, NULL);
  }
  if (!view_expand(&v0, r.ndim, r.sizes, &vals))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "shape mismatch: value tensor cannot be broadcast to indexing result");
  if (tpu_view_numel(&vals) == 0) return TPU_OK;
  /* sums convert values to a contiguous copy; prep reads the converted one */
  return scatter_into(a, out, &vals, a->accumulate, prep_index_put, &vals);
}

/* ---- take / put ---------------------------------------------------------------- */

static tpu_status_t run_take(ax_args_t* a, const tpu_view_t* out) {
  int64_t n = tpu_view_numel(a->index), bound = tpu_view_numel(a->self);
  if (n == 0) return TPU_OK;
  int64_t *idx = NULL, *ob = xmalloc(n, sizeof(int64_t));
  if (!ob) return oom();
  tpu_status_t s = load_index(a->index, a->index->ndim, a->index->sizes, bound, true, 0, true, &idx);
  if (s == TPU_OK) {
    lin_offsets(a->self, idx, n, idx);
    lin_offsets(out, NULL, n, ob);
    row_job_t j;
    s = job_init(&j, out, a->self, 0, NULL, NULL, 0, NULL, NULL, n, ob, idx, ROW_COPY);
    if (s == TPU_OK) job_execute(&j);
    free(j.out_offs);
  }
  free(idx), free(ob);
  return s;
}

static tpu_status_t prep_put(const ax_args_t* a, const tpu_view_t* dst, const tpu_view_t* src,
                             row_job_t* j, void* ctx) {
  (void)ctx;
  int64_t n = tpu_view_numel(a->index);
  int64_t *idx = NULL, *sb = xmalloc(n, sizeof(int64_t));
  if (!sb) return oom();
  tpu_status_t s =
      load_index(a->index, a->index->ndim, a->index->sizes, tpu_view_numel(dst), true, 0, true, &idx);
  if (s != TPU_OK) {
    free(sb);
    return s;
  }
  lin_offsets(dst, idx, n, idx);
  lin_offsets(src, NULL, n, sb);
  s = job_init(j, dst, src, 0, NULL, NULL, 0, NULL, NULL, n, idx, sb, ROW_PUT);
  if (s != TPU_OK) free(idx), free(sb), j->dst_b = j->src_b = NULL;
  return s;
}

static tpu_status_t run_put(ax_args_t* a, const tpu_view_t* out) {
  if (!views_same(out, a->self)) view_copy(out, a->self);
  if (tpu_view_numel(a->index) == 0) return TPU_OK;
  if (tpu_view_numel(out) == 0)
    return tpu_status_make(TPU_CODE_INDEX_ERROR, "cannot do a non-empty take from an empty axes.");
  return scatter_into(a, out, a->src, a->accumulate, prep_put, NULL);
}

/* ---- index_fill / index_copy ---------------------------------------------------- */

static tpu_status_t prep_dim(const ax_args_t* a, const tpu_view_t* dst, const tpu_view_t* src,
                             row_job_t* j, void* ctx) {
  tpu_view_t d1 = *dst, s1 = src ? *src : (tpu_view_t){0};
  if (d1.ndim == 0) d1.ndim = 1, d1.sizes[0] = 1, d1.strides[0] = 1;
  if (src && s1.ndim == 0) s1.ndim = 1, s1.sizes[0] = 1, s1.strides[0] = 1;
  int64_t n = tpu_view_numel(a->index);
  int64_t* idx = NULL;
  int64_t* sb = xmalloc(n, sizeof(int64_t));
  if (!sb) return oom();
  bool fill = a->kind == AX_INDEX_FILL;
  tpu_status_t s = load_index(a->index, 1, &n, d1.sizes[a->dim], fill, a->dim, false, &idx);
  if (s != TPU_OK) {
    free(sb);
    if (!fill && tpu_status_code(s) == TPU_CODE_INDEX_ERROR) {
      tpu_status_t m = tpu_status_make(TPU_CODE_INDEX_ERROR, "index_copy_(): %s",
                                       tpu_status_message(s));
      tpu_status_free(s);
      return m;
    }
    return s;
  }
  for (int64_t b = 0; b < n; ++b) idx[b] *= d1.strides[a->dim], sb[b] = src ? b * s1.strides[a->dim] : 0;
  int32_t od[TPU_MAX_DIMS], id[TPU_MAX_DIMS], nO = 0, nI = 0;
  for (int32_t d = 0; d < d1.ndim; ++d) {
    if (d < a->dim) od[nO++] = d;
    if (d > a->dim) id[nI++] = d;
  }
  (void)ctx;
  s = job_init(j, &d1, src ? &s1 : NULL, nO, od, od, nI, id, id, n, idx, sb, ROW_PUT);
  if (s != TPU_OK) free(idx), free(sb), j->dst_b = j->src_b = NULL;
  return s;
}

static tpu_status_t run_index_dim(ax_args_t* a, const tpu_view_t* out) {
  if (!views_same(out, a->self)) view_copy(out, a->self);
  if (tpu_view_numel(a->index) == 0) return TPU_OK;
  if (a->kind == AX_INDEX_COPY) return scatter_into(a, out, a->src, false, prep_dim, NULL);
  uint64_t storage = 0;
  tpu_view_t v;
  tpu_value_to_view(a->value, a->dtype, &storage, &v);
  if (a->value->kind == TPU_VALUE_VIEW) { /* a 0-dim device tensor */
    v = a->value->u.view;
  }
  /* the value as a 0-dim source broadcast with stride 0 */
  tpu_view_t sv = v;
  sv.ndim = out->ndim ? out->ndim : 1;
  for (int32_t d = 0; d < sv.ndim; ++d) sv.sizes[d] = d == a->dim ? tpu_view_numel(a->index) : (out->ndim ? out->sizes[d] : 1), sv.strides[d] = 0;
  return scatter_into(a, out, &sv, false, prep_dim, NULL);
}

/* ---- masks --------------------------------------------------------------------- */

static tpu_status_t run_masked_select(ax_args_t* a, const tpu_view_t* out) {
  tpu_view_t mask, self;
  view_expand(a->mask, a->bnd, a->bsizes, &mask);
  view_expand(a->self, a->bnd, a->bsizes, &self);
  int64_t *pos = NULL, n = 0;
  TPU_RETURN_IF_ERROR(nonzero_positions(&mask, &pos, &n));
  if (n != out->sizes[0]) {
    free(pos);
    return tpu_status_make(TPU_CODE_INTERNAL, "mask count changed since it was read");
  }
  int64_t* ob = xmalloc(n, sizeof(int64_t));
  if (!ob) {
    free(pos);
    return oom();
  }
  lin_offsets(&self, pos, n, pos);
  lin_offsets(out, NULL, n, ob);
  row_job_t j;
  tpu_status_t s = job_init(&j, out, &self, 0, NULL, NULL, 0, NULL, NULL, n, ob, pos, ROW_COPY);
  if (s == TPU_OK) job_execute(&j);
  free(j.out_offs), free(pos), free(ob);
  return s;
}

static tpu_status_t run_masked_scatter(ax_args_t* a, const tpu_view_t* out) {
  tpu_view_t self;
  view_expand(a->self, out->ndim, out->sizes, &self);
  if (!views_same(out, a->self)) view_copy(out, &self);
  tpu_view_t mask;
  view_expand(a->mask, out->ndim, out->sizes, &mask);
  int64_t *pos = NULL, n = 0;
  TPU_RETURN_IF_ERROR(nonzero_positions(&mask, &pos, &n));
  if (n > tpu_view_numel(a->src)) {
    free(pos);
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "Number of elements of source < number of ones in mask");
  }
  int64_t* sb = xmalloc(n, sizeof(int64_t));
  if (!sb) {
    free(pos);
    return oom();
  }
  lin_offsets(out, pos, n, pos);
  lin_offsets(a->src, NULL, n, sb);
  row_job_t j;
  tpu_status_t s = job_init(&j, out, a->src, 0, NULL, NULL, 0, NULL, NULL, n, pos, sb, ROW_COPY);
  if (s == TPU_OK) job_execute(&j);
  free(j.out_offs), free(pos), free(sb);
  return s;
}

static tpu_status_t run_nonzero(ax_args_t* a, const tpu_view_t* out) {
  int64_t *pos = NULL, n = 0;
  TPU_RETURN_IF_ERROR(nonzero_positions(a->self, &pos, &n));
  int64_t rows = out->sizes[0], nd = a->self->ndim;
  if (a->kind == AX_NONZERO && n != rows) {
    free(pos);
    return tpu_status_make(TPU_CODE_INTERNAL, "nonzero count changed since it was read");
  }
  if (rows == 0 || nd == 0) { /* no elements to write (nonzero_static of a 0-dim self may ask
                               * for 2^40 rows of nothing: no loop over them) */
    free(pos);
    return TPU_OK;
  }
  int64_t* buf = xmalloc(rows * nd, sizeof(int64_t));
  if (!buf) {
    free(pos);
    return oom();
  }
  for (int64_t r = 0; r < rows; ++r) {
    int64_t lin = r < n ? pos[r] : 0;
    for (int64_t d = nd - 1; d >= 0; --d) {
      buf[r * nd + d] = r < n ? lin % a->self->sizes[d] : a->fill;
      if (r < n) lin /= a->self->sizes[d];
    }
  }
  tpu_view_t src = view_of(buf, TPU_DTYPE_I64, 2, out->sizes);
  view_copy(out, &src);
  free(pos), free(buf);
  return TPU_OK;
}

/* repeats as int64, checked; *total their sum. */
static tpu_status_t load_repeats(const tpu_view_t* r, int64_t** out, int64_t* total) {
  int64_t n = tpu_view_numel(r);
  int64_t* buf = xmalloc(n, sizeof(int64_t));
  if (!buf) return oom();
  tpu_view_t d = view_of(buf, TPU_DTYPE_I64, 1, &n);
  if (n) view_copy(&d, r);
  *total = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (buf[i] < 0) {
      free(buf);
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "repeats can not be negative");
    }
    if (__builtin_add_overflow(*total, buf[i], total)) {
      free(buf);
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "repeat_interleave: repeats sum past int64");
    }
  }
  *out = buf;
  return TPU_OK;
}

typedef struct rep_job {
  const int64_t *start, *rep;
  int64_t* out;
} rep_job_t;

static void rep_chunk(void* arg, int64_t b, int64_t e) {
  const rep_job_t* j = (const rep_job_t*)arg;
  for (int64_t i = b; i < e; ++i)
    for (int64_t k = 0; k < j->rep[i]; ++k) j->out[j->start[i] + k] = i;
}

static tpu_status_t run_repeat(ax_args_t* a, const tpu_view_t* out) {
  int64_t *rep = NULL, total = 0, n = tpu_view_numel(a->self);
  TPU_RETURN_IF_ERROR(load_repeats(a->self, &rep, &total));
  if (total != out->sizes[0]) {
    free(rep);
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "allocated size does not match required size");
  }
  int64_t* start = xmalloc(n, sizeof(int64_t));
  int64_t* res = xmalloc(total, sizeof(int64_t));
  if (!start || !res) {
    free(rep), free(start), free(res);
    return oom();
  }
  for (int64_t i = 0, s = 0; i < n; ++i) start[i] = s, s += rep[i];
  rep_job_t j = {start, rep, res};
  tpu_parallel_for(n, total >= WALK_GRAIN ? 1 : (n ? n : 1), rep_chunk, &j);
  tpu_view_t src = view_of(res, TPU_DTYPE_I64, 1, &total);
  if (total) view_copy(out, &src);
  free(rep), free(start), free(res);
  return TPU_OK;
}

static tpu_status_t run_count(ax_args_t* a, const tpu_view_t* out) {
  int64_t n = 0;
  if (a->counted == AX_REPEAT) {
    int64_t* rep = NULL;
    TPU_RETURN_IF_ERROR(load_repeats(a->self, &rep, &n));
    free(rep);
  } else if (a->kind == AX_COUNT && a->mask_term >= 0) {
    TPU_RETURN_IF_ERROR(count_nonzero_view(a->terms[a->mask_term].idx, &n));
  } else if (a->mask) { /* masked_select: the mask broadcast with self */
    int32_t nd = a->self->ndim;
    int64_t s[TPU_MAX_DIMS];
    memcpy(s, a->self->sizes, sizeof(int64_t) * (size_t)nd);
    tpu_ax_bcast(&nd, s, a->mask->ndim, a->mask->sizes);
    tpu_view_t e;
    view_expand(a->mask, nd, s, &e);
    TPU_RETURN_IF_ERROR(count_nonzero_view(&e, &n));
  } else {
    TPU_RETURN_IF_ERROR(count_nonzero_view(a->self, &n));
  }
  view_set_i64(out, 0, n);
  return TPU_OK;
}

/* ---- rows ------------------------------------------------------------------------ */

typedef tpu_status_t (*ax_runner_fn)(ax_args_t* a, const tpu_view_t* out);

static ax_runner_fn runner_of(ax_kind_t k) {
  switch (k) {
    case AX_INDEX: return run_index;
    case AX_INDEX_PUT: return run_index_put;
    case AX_TAKE: return run_take;
    case AX_PUT: return run_put;
    case AX_INDEX_FILL:
    case AX_INDEX_COPY: return run_index_dim;
    case AX_MASKED_SELECT: return run_masked_select;
    case AX_MASKED_SCATTER: return run_masked_scatter;
    case AX_NONZERO:
    case AX_NONZERO_STATIC: return run_nonzero;
    case AX_REPEAT: return run_repeat;
    case AX_COUNT: return run_count;
  }
  return NULL;
}

static tpu_status_t ax_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  (void)ctx;
  ax_args_t a;
  TPU_RETURN_IF_ERROR(tpu_ax_parse(def, node, -1, &a));
  if (node->num_outputs < 1) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "missing output");
  const tpu_view_t* out = &node->outputs[0];
  bool same = out->ndim == a.ndim && out->dtype == a.dtype;
  for (int32_t d = 0; same && d < a.ndim; ++d) same = out->sizes[d] == a.sizes[d];
  if (!same) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "out has the wrong shape or dtype");
  return runner_of(a.kind)(&a, out);
}

static tpu_status_t ax_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* outs) {
  ax_args_t a;
  TPU_RETURN_IF_ERROR(tpu_ax_parse(def, node, -1, &a));
  memset(&outs[0], 0, sizeof(outs[0]));
  outs[0].dtype = a.dtype;
  outs[0].ndim = a.ndim;
  memcpy(outs[0].sizes, a.sizes, sizeof(a.sizes));
  tpu_view_set_contiguous(&outs[0]);
  return TPU_OK;
}

static tpu_status_t ax_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  ax_args_t a;
  TPU_RETURN_IF_ERROR(tpu_ax_parse(def, node, -1, &a));
  /* gathers into an out= that overlaps an input: PyTorch refuses them */
  bool gather = a.kind == AX_INDEX || a.kind == AX_TAKE || a.kind == AX_MASKED_SELECT;
  const tpu_view_t* out = node->num_outputs > 0 && node->outputs ? &node->outputs[0] : NULL;
  for (int32_t i = 0; gather && out && out->addr > 1 && i < node->num_inputs; ++i)
    if (node->inputs[i].kind == TPU_VALUE_VIEW && views_overlap(out, &node->inputs[i].u.view))
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "unsupported operation: some elements of the input tensor and the "
                             "written-to tensor refer to a single memory location. Please "
                             "clone() the tensor before performing the operation.");
  return TPU_OK;
}


static const ax_spec_t k_index = {AX_INDEX, 0}, k_index_put = {AX_INDEX_PUT, 0},
                       k_take = {AX_TAKE, 0}, k_put = {AX_PUT, 0},
                       k_index_fill = {AX_INDEX_FILL, 0}, k_index_copy = {AX_INDEX_COPY, 0},
                       k_masked_select = {AX_MASKED_SELECT, 0},
                       k_masked_scatter = {AX_MASKED_SCATTER, 0}, k_nonzero = {AX_NONZERO, 0},
                       k_nonzero_static = {AX_NONZERO_STATIC, 0},
                       k_index_count = {AX_COUNT, AX_INDEX},
                       k_nonzero_count = {AX_COUNT, AX_NONZERO},
                       k_masked_select_count = {AX_COUNT, AX_MASKED_SELECT},
                       k_repeat = {AX_REPEAT, 0}, k_repeat_count = {AX_COUNT, AX_REPEAT};

#define AX_ROW_F(name_, inputs_, attrs_, aten_, spec, flags_) \
  {.name = name_, .inputs = inputs_, .attrs = attrs_, .outputs = "out", .aten = aten_, \
   .kernel = ax_kernel, .infer = ax_infer, .check = ax_check, .impl = &spec, .flags = flags_}
#define AX_ROW(name, inputs, attrs, aten, spec) AX_ROW_F(name, inputs, attrs, aten, spec, 0)

static const tpu_op_def_t k_ops[] = {
    AX_ROW_F("index", "self,indices*", "sync_size", "index.Tensor index.Tensor_out", k_index,
             TPU_OP_COMPLEX_AS_BITS),
    AX_ROW("index_count", "self,indices*", "sync_size", "", k_index_count),
    AX_ROW("index_put", "self,indices*,values", "accumulate,unsafe",
           "_index_put_impl_ index_put index_put_ index_put.out _index_put_impl.out", k_index_put),
    AX_ROW_F("take", "self,index", "", "take take.out", k_take, TPU_OP_OUT_NO_OVERLAP),
    AX_ROW("put", "self,index,source", "accumulate", "put_ put put.out", k_put),
    AX_ROW("index_fill", "self,index,value#", "dim",
           "index_fill.int_Scalar index_fill_.int_Scalar index_fill.int_Tensor "
           "index_fill_.int_Tensor index_fill.int_Scalar_out index_fill.int_Tensor_out",
           k_index_fill),
    AX_ROW("index_copy", "self,index,source", "dim", "index_copy index_copy_ index_copy.out",
           k_index_copy),
    AX_ROW_F("masked_select", "self,mask", "sync_size", "masked_select masked_select.out",
           k_masked_select, TPU_OP_OUT_NO_OVERLAP),
    AX_ROW("masked_select_count", "self,mask", "sync_size", "", k_masked_select_count),
    AX_ROW("masked_scatter", "self,mask,source", "",
           "masked_scatter masked_scatter_ masked_scatter.out", k_masked_scatter),
    AX_ROW("nonzero", "self", "sync_size", "nonzero nonzero.out", k_nonzero),
    AX_ROW("nonzero_count", "self", "sync_size", "", k_nonzero_count),
    AX_ROW("nonzero_static", "self", "size,fill_value", "nonzero_static nonzero_static.out",
           k_nonzero_static),
    AX_ROW("repeat_interleave", "repeats", "output_size,sync_size",
           "repeat_interleave.Tensor repeat_interleave.Tensor_out", k_repeat),
    AX_ROW("repeat_interleave_count", "repeats", "output_size,sync_size", "", k_repeat_count),
};

const tpu_op_family_t tpu_family_index_adv = {"index_adv", k_ops,
                                              (int32_t)(sizeof(k_ops) / sizeof(k_ops[0]))};
