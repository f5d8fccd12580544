/* softmax.c — _softmax, _log_softmax (with half_to_float) and their
 * backward ops (_softmax_backward_data, _log_softmax_backward_data), over
 * any dim of tensors with any strides.
 *
 * Numerics (all in double, whatever the storage dtype):
 *   softmax      y = exp(x - m) / s,      m = max(x), s = sum exp(x - m)
 *   log_softmax  y = x - m - log(s)
 *   backward     gx = y * (g - sum(g * y))         (softmax)
 *                gx = g - exp(y) * sum(g)          (log_softmax; y is the log output)
 * A NaN anywhere in a row makes the whole row NaN (through s), and a row of
 * all -inf gives NaN, as PyTorch's CPU kernels do.
 *
 * Layout: the dims other than `dim` are collapsed into an iterator over the
 * views (input(s) and output). When the innermost of them is faster in
 * memory than `dim` (softmax over dim 1 of NCHW, say), rows are processed in
 * blocks of up to BLOCK neighbours: each step along `dim` gathers BLOCK
 * contiguous elements. Otherwise rows are processed one at a time with a
 * strided gather. Long rows are streamed in chunks of CHUNK elements (one
 * pass for the statistics, one to write), so no temporary memory is needed;
 * rows that fit in one chunk are read once. Blocks of rows are spread over
 * tpu_parallel_for.
 *
 * Fast path: float32 softmax/log_softmax and their backward over the last
 * dim of contiguous tensors run in float with the SIMD exp of vmath.h (sums
 * in double), built for AVX-512 / AVX2 too. float16/bfloat16 rows take it on
 * float32 copies (widening is exact; on the stack up to HALF_ROW elements,
 * else in a buffer per task), rounded once into the output, as PyTorch CPU
 * computes half types in float32. On CPUs with AVX-512 the forward rows
 * of all three dtypes run softmax_rows512.c instead (half types widened in
 * registers, exp correct into the subnormal range).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/nn/softmax.h"
#include "kernels/common/vmath.h"

#define BLOCK 64   /* rows per block */
#define CHUNK 4096 /* elements per gathered chunk (rows x positions) */
#define HALF_ROW 4096 /* longest half-type row copied on the stack */

/* ---- parsing ---------------------------------------------------------------- */

static bool is_float(tpu_dtype_t d) { return tpu_dtype_is_floating(d); }

tpu_status_t tpu_softmax_parse(const tpu_op_def_t* def, const tpu_node_t* node,
                               softmax_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->impl = (const softmax_impl_t*)def->impl;
  const char* fn = a->impl->log ? "log_softmax" : "softmax";
  if (a->impl->backward) {
    a->g = ku_input(def, node, "grad_output");
    a->x = ku_input(def, node, "output");
    if (!a->g || !a->x)
      TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "expected tensors grad_output and output");
    if (!views_same_shape(a->g, a->x))
      TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT,
                      "%s_backward: grad and output must have the same size", fn);
  } else {
    a->x = ku_input(def, node, "self");
    if (!a->x) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "expected a tensor for 'self'");
  }
  TPU_RETURN_IF_ERROR(
      ku_wrap_dim(tpu_attr_int(ku_attr(def, node, "dim"), 0), a->x->ndim, &a->dim));
  const tpu_view_t* src = a->impl->backward ? a->g : a->x;
  if (!is_float(src->dtype) || src->dtype != a->x->dtype)
    TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "%s: no native kernel for %s", fn,
                    tpu_dtype_name(src->dtype));
  tpu_dtype_t out = src->dtype;
  if (a->impl->backward) {
    /* PyTorch's meta: grad's dtype, except float grads of a half input. */
    const tpu_attr_t* in = ku_attr(def, node, "input_dtype");
    tpu_dtype_t input_dtype = (in && in->kind == TPU_ATTR_DTYPE) ? in->u.dtype : src->dtype;
    if (input_dtype != src->dtype && !(src->dtype == TPU_DTYPE_F32 && input_dtype == TPU_DTYPE_F16))
      TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "%s_backward: grad %s with input dtype %s", fn,
                      tpu_dtype_name(src->dtype), tpu_dtype_name(input_dtype));
    out = input_dtype;
  } else if (tpu_attr_bool(ku_attr(def, node, "half_to_float"), false)) {
    if (src->dtype != TPU_DTYPE_F16)
      TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "%s: conversion is supported for Half type only",
                      fn);
    out = TPU_DTYPE_F32;
  }
  a->shape = *src;
  a->shape.addr = 0;
  a->shape.dtype = out;
  tpu_view_set_contiguous(&a->shape);
  return TPU_OK;
}

static tpu_status_t softmax_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_view_t* out_views) {
  softmax_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_softmax_parse(def, node, &a)));
  out_views[0] = a.shape;
  return TPU_OK;
}

static tpu_status_t softmax_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  softmax_args_t a;
  return ku_unimplemented(tpu_softmax_parse(def, node, &a));
}

/* Row-local (fusion): rows are the dims before `dim`, in every input. */
static int32_t softmax_rows(const tpu_op_def_t* def, const tpu_node_t* node, uint32_t* out_mask) {
  softmax_args_t a;
  *out_mask = 3u;
  if (!ku_ok(tpu_softmax_parse(def, node, &a))) return 0;
  return a.dim;
}

/* ---- the optimised kernel ------------------------------------------------------ */

typedef struct plan {
  const softmax_impl_t* impl;
  int32_t nviews;          /* forward: x, out; backward: g, y, out */
  const tpu_view_t* views[3];
  int64_t len;             /* row length (size of dim) */
  int64_t along[3];        /* strides along dim, per view */
  walk_t rows;             /* the other dims */
  int32_t outer_dims;      /* row dims above the block axis */
  int64_t inner;           /* size of the block axis (1: no blocking) */
  int64_t axis[3];         /* strides along the block axis, per view */
  int64_t block, blocks_per_row, blocks;
  int64_t chunk;           /* positions along dim per gathered chunk */
} plan_t;

/* Gathers positions [l0, l0 + nl) of `cnt` rows of view v at offset off into
 * buf[l * cnt + j] (doubles). */
static void gather(const plan_t* p, int v, int64_t off, int64_t l0, int64_t nl, int64_t cnt,
                   double* buf) {
  const tpu_view_t* w = p->views[v];
  int64_t esz = (int64_t)tpu_dtype_size(w->dtype);
  const char* base = view_at(w, off);
  if (cnt == 1) {
    tpu_convert(buf, TPU_DTYPE_F64, 1, base + l0 * p->along[v] * esz, w->dtype, p->along[v], nl);
    return;
  }
  for (int64_t l = 0; l < nl; ++l)
    tpu_convert(buf + l * cnt, TPU_DTYPE_F64, 1, base + (l0 + l) * p->along[v] * esz, w->dtype,
                p->axis[v], cnt);
}

/* The inverse of gather, into the output view. */
static void scatter(const plan_t* p, int64_t off, int64_t l0, int64_t nl, int64_t cnt,
                    const double* buf) {
  int v = p->nviews - 1;
  const tpu_view_t* w = p->views[v];
  int64_t esz = (int64_t)tpu_dtype_size(w->dtype);
  char* base = view_at(w, off);
  if (cnt == 1) {
    tpu_convert(base + l0 * p->along[v] * esz, w->dtype, p->along[v], buf, TPU_DTYPE_F64, 1, nl);
    return;
  }
  for (int64_t l = 0; l < nl; ++l)
    tpu_convert(base + (l0 + l) * p->along[v] * esz, w->dtype, p->axis[v], buf + l * cnt,
                TPU_DTYPE_F64, 1, cnt);
}

/* Forward over one block of cnt rows at offsets offs; buffers hold
 * position l of row j at [l * cnt + j]. */
static void forward_block(const plan_t* p, const int64_t* offs, int64_t cnt) {
  double x[CHUNK], mx[BLOCK], sum[BLOCK], scale[BLOCK];
  bool cached = p->len <= p->chunk, log_ = p->impl->log;
  for (int64_t j = 0; j < cnt; ++j) {
    mx[j] = -INFINITY;
    sum[j] = 0.0;
  }
  for (int64_t l0 = 0; l0 < p->len; l0 += p->chunk) {
    int64_t nl = p->len - l0 < p->chunk ? p->len - l0 : p->chunk;
    gather(p, 0, offs[0], l0, nl, cnt, x);
    for (int64_t l = 0; l < nl; ++l)
      for (int64_t j = 0; j < cnt; ++j) {
        double v = x[l * cnt + j];
        if (v > mx[j]) mx[j] = v;
      }
  }
  /* When cached, softmax keeps exp(x - m) in the buffer for the last pass. */
  for (int64_t l0 = 0; l0 < p->len; l0 += p->chunk) {
    int64_t nl = p->len - l0 < p->chunk ? p->len - l0 : p->chunk;
    if (!cached) gather(p, 0, offs[0], l0, nl, cnt, x);
    for (int64_t l = 0; l < nl; ++l)
      for (int64_t j = 0; j < cnt; ++j) {
        double e = exp(x[l * cnt + j] - mx[j]);
        sum[j] += e;
        if (cached && !log_) x[l * cnt + j] = e;
      }
  }
  for (int64_t j = 0; j < cnt; ++j) scale[j] = log_ ? mx[j] + log(sum[j]) : 1.0 / sum[j];
  for (int64_t l0 = 0; l0 < p->len; l0 += p->chunk) {
    int64_t nl = p->len - l0 < p->chunk ? p->len - l0 : p->chunk;
    if (!cached) gather(p, 0, offs[0], l0, nl, cnt, x);
    for (int64_t l = 0; l < nl; ++l)
      for (int64_t j = 0; j < cnt; ++j) {
        double* v = &x[l * cnt + j];
        *v = log_ ? *v - scale[j] : (cached ? *v : exp(*v - mx[j])) * scale[j];
      }
    scatter(p, offs[p->nviews - 1], l0, nl, cnt, x);
  }
}

/* Backward over one block: views are g (0), y (1), grad_input (2). */
static void backward_block(const plan_t* p, const int64_t* offs, int64_t cnt) {
  double g[CHUNK], y[CHUNK], acc[BLOCK];
  bool cached = p->len <= p->chunk, log_ = p->impl->log;
  for (int64_t j = 0; j < cnt; ++j) acc[j] = 0.0;
  for (int64_t l0 = 0; l0 < p->len; l0 += p->chunk) {
    int64_t nl = p->len - l0 < p->chunk ? p->len - l0 : p->chunk;
    gather(p, 0, offs[0], l0, nl, cnt, g);
    if (!log_) gather(p, 1, offs[1], l0, nl, cnt, y);
    for (int64_t l = 0; l < nl; ++l)
      for (int64_t j = 0; j < cnt; ++j)
        acc[j] += log_ ? g[l * cnt + j] : g[l * cnt + j] * y[l * cnt + j];
  }
  for (int64_t l0 = 0; l0 < p->len; l0 += p->chunk) {
    int64_t nl = p->len - l0 < p->chunk ? p->len - l0 : p->chunk;
    if (!cached) gather(p, 0, offs[0], l0, nl, cnt, g);
    if (!cached || log_) gather(p, 1, offs[1], l0, nl, cnt, y);
    for (int64_t l = 0; l < nl; ++l)
      for (int64_t j = 0; j < cnt; ++j) {
        int64_t i = l * cnt + j;
        g[i] = log_ ? g[i] - exp(y[i]) * acc[j] : y[i] * (g[i] - acc[j]);
      }
    scatter(p, offs[2], l0, nl, cnt, g);
  }
}

static void softmax_work(void* arg, int64_t begin, int64_t end) {
  const plan_t* p = (const plan_t*)arg;
  int64_t offs[WALK_MAX_VIEWS];
  for (int64_t b = begin; b < end; ++b) {
    int64_t row = b / p->blocks_per_row, j0 = (b % p->blocks_per_row) * p->block;
    walk_offsets(&p->rows, p->outer_dims, row, offs);
    for (int v = 0; v < p->nviews; ++v) offs[v] += j0 * p->axis[v];
    int64_t cnt = p->inner - j0 < p->block ? p->inner - j0 : p->block;
    if (p->impl->backward)
      backward_block(p, offs, cnt);
    else
      forward_block(p, offs, cnt);
  }
}

/* ---- float32 rows, contiguous along dim: the common case, in SIMD ---------- */

/* The row loops are built for AVX-512 and AVX2 as well as the baseline
 * (VM_SIMD_CLONES: GCC picks one at load time). A row of up to a few
 * thousand floats stays in L1 across its passes, so each row is read from
 * memory once and written once:
 *   forward   m = max(x); y = exp(x - m) with s = sum y (one pass, SIMD exp);
 *             y *= 1 / s  (log_softmax: y = x - (m + log s))
 *   backward  one pass for the row sum (g . y, or sum g for log_softmax),
 *             one pass writing gx.
 * Sums are kept in double. */

typedef struct fast_plan {
  const float* x; /* forward: self; backward: output (y) */
  const float* g; /* backward: grad_output */
  float* y;       /* the result */
  int64_t len;
  bool log_;
  /* Half-type rows (half_rows): the views themselves, any of them half. */
  const tpu_view_t *hx, *hg, *hy;
  atomic_int no_memory; /* half_rows: a task could not get its row buffers */
} fast_plan_t;

/* Maximum of n floats (n >= 1), NaNs skipped: a maxps-shaped loop that
 * vectorises (vm_max's NaN flag keeps GCC from it). A NaN in the row still
 * makes the whole row NaN through the sum of exp(x - m). */
static inline float fast_max(const float* x, int64_t n) {
  float acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = -INFINITY;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  float m = -INFINITY;
  for (int j = 0; j < 16; ++j) m = acc[j] > m ? acc[j] : m;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

/* One row of the forward fast path (y may not alias x). */
static inline void fast_row(const float* x, float* y, int64_t len, bool log_) {
  float m = fast_max(x, len);
  double sum = vm_exp_shifted(y, x, m, len);
  if (log_) {
    float shift = m + (float)log(sum);
    for (int64_t i = 0; i < len; ++i) y[i] = x[i] - shift;
  } else {
    float scale = (float)(1.0 / sum);
    for (int64_t i = 0; i < len; ++i) y[i] *= scale;
  }
}

VM_SIMD_CLONES static void fast_rows(void* arg, int64_t begin, int64_t end) {
  const fast_plan_t* p = (const fast_plan_t*)arg;
  const int64_t len = p->len;
  for (int64_t r = begin; r < end; ++r) fast_row(p->x + r * len, p->y + r * len, len, p->log_);
}

/* Sum of a[i] * b[i] in double (fixed association, as vm_sum). */
static inline double fast_dot(const float* a, const float* b, int64_t n) {
  double acc[VM_LANES] = {0};
  int64_t i = 0;
  for (; i + VM_LANES <= n; i += VM_LANES)
    for (int j = 0; j < VM_LANES; ++j) acc[j] += (double)a[i + j] * (double)b[i + j];
  double s = 0.0;
  for (int j = 0; j < VM_LANES; ++j) s += acc[j];
  for (; i < n; ++i) s += (double)a[i] * (double)b[i];
  return s;
}

/* One row of the backward fast path: gx from the output y and grad g. */
static inline void fast_row_backward(const float* y, const float* g, float* gx, int64_t len,
                                     bool log_) {
  if (log_) {
    /* gx = g - exp(y) sum(g); y <= 0, so exp(y) is out of vm_expf's range
     * only below VM_EXP_LO (or for NaN / +inf): those use expf. */
    float s = (float)vm_sum(g, len);
    int all_ok = 1;
    for (int64_t i = 0; i < len; ++i) {
      all_ok &= vm_exp_ok(y[i]);
      gx[i] = g[i] - vm_expf(y[i]) * s;
    }
    if (!all_ok)
      for (int64_t i = 0; i < len; ++i)
        if (!vm_exp_ok(y[i])) gx[i] = g[i] - expf(y[i]) * s;
  } else {
    float d = (float)fast_dot(g, y, len);
    for (int64_t i = 0; i < len; ++i) gx[i] = y[i] * (g[i] - d);
  }
}

VM_SIMD_CLONES static void fast_rows_backward(void* arg, int64_t begin, int64_t end) {
  const fast_plan_t* p = (const fast_plan_t*)arg;
  const int64_t len = p->len;
  for (int64_t r = begin; r < end; ++r)
    fast_row_backward(p->x + r * len, p->g + r * len, p->y + r * len, len, p->log_);
}

/* The fast path on float32 copies of rows whose views are half types. */
VM_SIMD_CLONES static void half_rows(void* arg, int64_t begin, int64_t end) {
  fast_plan_t* p = (fast_plan_t*)arg;
  const int64_t len = p->len;
  float stack[3 * HALF_ROW];
  float* heap = NULL;
  if (len > HALF_ROW && !(heap = (float*)malloc((size_t)(3 * len) * sizeof(float)))) {
    atomic_store(&p->no_memory, 1);
    return;
  }
  float *x = heap ? heap : stack, *g = x + len, *y = g + len;
  const char* xs = (const char*)tpu_view_ptr(p->hx);
  const char* gs = p->hg ? (const char*)tpu_view_ptr(p->hg) : NULL;
  char* ys = (char*)tpu_view_ptr(p->hy);
  size_t xz = tpu_dtype_size(p->hx->dtype), yz = tpu_dtype_size(p->hy->dtype);
  size_t gz = p->hg ? tpu_dtype_size(p->hg->dtype) : 0;
  for (int64_t r = begin; r < end; ++r) {
    tpu_convert(x, TPU_DTYPE_F32, 1, xs + (size_t)(r * len) * xz, p->hx->dtype, 1, len);
    if (gs) {
      tpu_convert(g, TPU_DTYPE_F32, 1, gs + (size_t)(r * len) * gz, p->hg->dtype, 1, len);
      fast_row_backward(x, g, y, len, p->log_);
    } else {
      fast_row(x, y, len, p->log_);
    }
    tpu_convert(ys + (size_t)(r * len) * yz, p->hy->dtype, 1, y, TPU_DTYPE_F32, 1, len);
  }
  free(heap);
}

/* The forward rows in AVX-512, any of the dtypes (softmax_rows512.c). */
static void rows512(void* arg, int64_t begin, int64_t end) {
  const fast_plan_t* p = (const fast_plan_t*)arg;
  tpu_softmax_rows512(tpu_view_ptr(p->hx), p->hx->dtype, tpu_view_ptr(p->hy), p->hy->dtype,
                      p->len, p->log_, begin, end);
}

static bool fast_view(const tpu_view_t* v) {
  return v->dtype == TPU_DTYPE_F32 && tpu_view_is_contiguous(v);
}

static bool is_half(tpu_dtype_t d) { return d == TPU_DTYPE_F16 || d == TPU_DTYPE_BF16; }

/* A contiguous float32 or half-type view, with at least one half among them. */
static bool half_view(const tpu_view_t* v) {
  return (v->dtype == TPU_DTYPE_F32 || is_half(v->dtype)) && tpu_view_is_contiguous(v);
}

/* float32 or half-type (log_)softmax or its backward over the last dim of
 * contiguous tensors into a contiguous output that overlaps no input;
 * *out_done false when the call does not have that shape. */
static tpu_status_t try_fast_rows(const softmax_args_t* a, const tpu_view_t* out,
                                  bool* out_done) {
  *out_done = false;
  const tpu_view_t* x = a->x;
  const tpu_view_t* g = a->impl->backward ? a->g : NULL;
  if (x->ndim == 0 || a->dim != x->ndim - 1 || x->sizes[a->dim] == 0) return TPU_OK;
  bool half = is_half(x->dtype) || is_half(out->dtype) || (g && is_half(g->dtype));
  bool f32 = fast_view(x) && fast_view(out) && (!g || fast_view(g));
  bool halves = half && half_view(x) && half_view(out) && (!g || half_view(g));
  if (!f32 && !halves) return TPU_OK;
  if (views_overlap(out, x) || (g && views_overlap(out, g))) return TPU_OK;
  fast_plan_t p = {.x = (const float*)tpu_view_ptr(x),
                   .g = g ? (const float*)tpu_view_ptr(g) : NULL,
                   .y = (float*)tpu_view_ptr(out), .len = x->sizes[a->dim], .log_ = a->impl->log,
                   .hx = x, .hg = g, .hy = out};
  atomic_init(&p.no_memory, 0);
  int64_t rows = tpu_view_numel(x) / p.len;
  if (!g && tpu_softmax_rows512_ok()) {
    tpu_parallel_for(rows, p.len >= 16384 ? 1 : 16384 / p.len, rows512, &p);
    *out_done = true;
    return TPU_OK;
  }
  tpu_parallel_for(rows, p.len >= 16384 ? 1 : 16384 / p.len,
                   halves ? half_rows : a->impl->backward ? fast_rows_backward : fast_rows, &p);
  if (atomic_load(&p.no_memory))
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "no host memory for softmax's row buffers");
  *out_done = true;
  return TPU_OK;
}

static tpu_status_t softmax_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                   tpu_exec_ctx_t* ctx) {
  softmax_args_t a;
  TPU_RETURN_IF_ERROR(tpu_softmax_parse(def, node, &a));
  if (node->num_outputs < 1 || !views_same_shape(&node->outputs[0], &a.shape))
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output has the wrong shape");
  if (tpu_view_numel(&a.shape) == 0) return TPU_OK;
  bool done;
  TPU_RETURN_IF_ERROR(try_fast_rows(&a, &node->outputs[0], &done));
  if (done) return TPU_OK;

  plan_t p;
  memset(&p, 0, sizeof(p));
  p.impl = a.impl;
  p.nviews = 0;
  if (a.g) p.views[p.nviews++] = a.g;
  p.views[p.nviews++] = a.x;
  p.views[p.nviews++] = &node->outputs[0];
  p.len = a.x->ndim > 0 ? a.x->sizes[a.dim] : 1;
  walk_start(&p.rows, p.nviews);
  for (int32_t d = 0; d < a.x->ndim; ++d) {
    int64_t strides[3] = {0, 0, 0};
    for (int v = 0; v < p.nviews; ++v) strides[v] = p.views[v]->strides[d];
    if (d == a.dim) {
      memcpy(p.along, strides, sizeof(strides));
      continue;
    }
    walk_add(&p.rows, a.x->sizes[d], strides);
  }
  walk_order(&p.rows);
  p.outer_dims = p.rows.ndim;
  p.inner = 1;
  if (p.rows.ndim > 0 && p.len > 1 && p.rows.sizes[p.rows.ndim - 1] >= 4 &&
      p.rows.strides[0][p.rows.ndim - 1] < p.along[0]) {
    p.outer_dims = p.rows.ndim - 1;
    p.inner = p.rows.sizes[p.outer_dims];
    for (int v = 0; v < p.nviews; ++v) p.axis[v] = p.rows.strides[v][p.outer_dims];
  }
  p.block = p.inner < BLOCK ? p.inner : BLOCK;
  p.blocks_per_row = (p.inner + p.block - 1) / p.block;
  p.blocks = walk_outer_numel(&p.rows, p.outer_dims) * p.blocks_per_row;
  p.chunk = CHUNK / p.block;
  int64_t work = p.block * p.len;
  tpu_parallel_for(p.blocks, work >= 16384 ? 1 : 16384 / work, softmax_work, &p);
  return TPU_OK;
}

/* ---- the op table ----------------------------------------------------------------- */

static const softmax_impl_t k_softmax = {false, false};
static const softmax_impl_t k_log_softmax = {true, false};
static const softmax_impl_t k_softmax_bwd = {false, true};
static const softmax_impl_t k_log_softmax_bwd = {true, true};

static const tpu_op_def_t k_rows[] = {
    {.name = "softmax", .inputs = "self", .attrs = "dim,half_to_float", .outputs = "out",
     .aten = "_softmax.default _softmax.out", .kernel = softmax_kernel, .infer = softmax_infer,
     .check = softmax_check, .impl = &k_softmax, .flags = 0, .rows = softmax_rows},
    {.name = "log_softmax", .inputs = "self", .attrs = "dim,half_to_float", .outputs = "out",
     .aten = "_log_softmax.default _log_softmax.out", .kernel = softmax_kernel,
     .infer = softmax_infer, .check = softmax_check, .impl = &k_log_softmax, .flags = 0,
     .rows = softmax_rows},
    {.name = "softmax_backward", .inputs = "grad_output,output", .attrs = "dim,input_dtype",
     .outputs = "grad_input", .aten = "_softmax_backward_data.default _softmax_backward_data.out",
     .kernel = softmax_kernel, .infer = softmax_infer, .check = softmax_check,
     .impl = &k_softmax_bwd, .flags = 0, .rows = softmax_rows},
    {.name = "log_softmax_backward", .inputs = "grad_output,output", .attrs = "dim,input_dtype",
     .outputs = "out", .aten = "_log_softmax_backward_data.default _log_softmax_backward_data.out",
     .kernel = softmax_kernel, .infer = softmax_infer, .check = softmax_check,
     .impl = &k_log_softmax_bwd, .flags = 0, .rows = softmax_rows},
};

const tpu_op_family_t tpu_family_softmax = {"softmax", k_rows,
                                            (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
