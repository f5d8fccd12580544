/* simple.c — the linalg_simple family: trace, linalg_cross, addbmm.
 *
 *   trace(self)                 the sum of a matrix's diagonal: floating dtypes
 *                               accumulate in double, integers and bool in
 *                               wrapping int64 (the result is int64, as PyTorch's)
 *   linalg_cross(self, other, dim)  3-vectors along `dim`, broadcast; floats in
 *                               double with each product rounded to the dtype (as
 *                               PyTorch computes in it), integers in wrapping int64
 *   addbmm(self, b1, b2, beta, alpha)  beta*self + alpha*sum_b b1[b] @ b2[b]: the
 *                               batches are one GEMM [b1_0 .. b1_B] @ [b2_0; ..; b2_B]
 *                               (float32 work for the half types, f64 for f64,
 *                               OpenBLAS), split over column blocks of the result
 *                               (half types: one GEMM per batch, rounding the
 *                               result to the dtype after each, as PyTorch's addmm_ loop);
 *                               integers in a wrapping int64 loop over rows.
 * Every kernel has a plain reference (linalg_simple_reference) for the tests.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/linalg/linalg.h"

#define BAD(...) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, __VA_ARGS__)

static bool is_int_like(tpu_dtype_t d) { return !tpu_dtype_is_floating(d); }

/* ---- trace ------------------------------------------------------------------------- */

static tpu_status_t trace_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_exec_ctx_t* ctx) {
  const tpu_view_t* a = ku_input(def, node, "self");
  const tpu_view_t* o = node->num_outputs > 0 ? &node->outputs[0] : NULL;
  if (!a || a->ndim != 2 || !o || tpu_view_numel(o) != 1) BAD("trace: expected a matrix");
  int64_t n = a->sizes[0] < a->sizes[1] ? a->sizes[0] : a->sizes[1];
  int64_t step = a->strides[0] + a->strides[1];
  if (is_int_like(o->dtype)) {
    uint64_t s = 0;
    for (int64_t i = 0; i < n; ++i) s += (uint64_t)view_get_i64(a, i * step);
    view_set_i64(o, 0, (int64_t)s);
  } else {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += view_get_f64(a, i * step);
    view_set_f64(o, 0, s);
  }
  return TPU_OK;
}

static tpu_status_t trace_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  const tpu_view_t* a = ku_input(def, node, "self");
  if (!a || a->ndim != 2) return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "trace of a matrix");
  return TPU_OK;
}

/* ---- cross ------------------------------------------------------------------------- */

typedef struct cross_job {
  walk_t w; /* over the result's dims but `dim`: views out, a, b */
  const tpu_view_t *o, *a, *b;
  int64_t so, sa, sb; /* strides along dim */
  bool ints;
} cross_job_t;

static void cross_chunk(void* arg, int64_t begin, int64_t end) {
  const cross_job_t* j = (const cross_job_t*)arg;
  int64_t offs[WALK_MAX_VIEWS];
  for (int64_t e = begin; e < end; ++e) {
    walk_offsets(&j->w, j->w.ndim, e, offs);
    if (j->ints) {
      uint64_t x[3], y[3];
      for (int k = 0; k < 3; ++k) {
        x[k] = (uint64_t)view_get_i64(j->a, offs[1] + k * j->sa);
        y[k] = (uint64_t)view_get_i64(j->b, offs[2] + k * j->sb);
      }
      uint64_t r[3] = {x[1] * y[2] - x[2] * y[1], x[2] * y[0] - x[0] * y[2],
                       x[0] * y[1] - x[1] * y[0]};
      for (int k = 0; k < 3; ++k) view_set_i64(j->o, offs[0] + k * j->so, (int64_t)r[k]);
    } else {
      double x[3], y[3];
      tpu_convert(x, TPU_DTYPE_F64, 1, view_at(j->a, offs[1]), j->a->dtype, j->sa, 3);
      tpu_convert(y, TPU_DTYPE_F64, 1, view_at(j->b, offs[2]), j->b->dtype, j->sb, 3);
      /* PyTorch computes in the dtype: each product is rounded to it, then the difference */
      double p[6] = {x[1] * y[2], x[2] * y[1], x[2] * y[0], x[0] * y[2], x[0] * y[1], x[1] * y[0]};
      if (j->o->dtype != TPU_DTYPE_F64) {
        uint64_t tmp[6];
        tpu_convert(tmp, j->o->dtype, 1, p, TPU_DTYPE_F64, 1, 6);
        tpu_convert(p, TPU_DTYPE_F64, 1, tmp, j->o->dtype, 1, 6);
      }
      double r[3] = {p[0] - p[1], p[2] - p[3], p[4] - p[5]};
      tpu_convert(view_at(j->o, offs[0]), j->o->dtype, j->so, r, TPU_DTYPE_F64, 1, 3);
    }
  }
}

static tpu_status_t cross_parse(const tpu_op_def_t* def, const tpu_node_t* node,
                                const tpu_view_t* o, cross_job_t* j) {
  const tpu_view_t* a = ku_input(def, node, "self");
  const tpu_view_t* b = ku_input(def, node, "other");
  if (!a || !b || !o) BAD("linalg.cross: expected tensors");
  int32_t dim = 0;
  TPU_RETURN_IF_ERROR(ku_wrap_dim(tpu_attr_int(ku_attr(def, node, "dim"), -1), o->ndim, &dim));
  if (o->ndim < 1 || o->sizes[dim] != 3) BAD("linalg.cross: dim must have size 3");
  tpu_view_t xa, xb;
  if (!view_expand(a, o->ndim, o->sizes, &xa) || !view_expand(b, o->ndim, o->sizes, &xb))
    BAD("linalg.cross: shapes do not broadcast");
  if (xa.strides[dim] == 0 && a->ndim > 0 && tpu_view_numel(o) > 0) {
    /* a broadcast size-1 dim along `dim` is not a 3-vector */
    int32_t s = dim - (o->ndim - a->ndim);
    if (s < 0 || a->sizes[s] != 3) BAD("linalg.cross: inputs must have size 3 along dim");
  }
  if (xb.strides[dim] == 0 && tpu_view_numel(o) > 0) {
    int32_t s = dim - (o->ndim - b->ndim);
    if (s < 0 || b->sizes[s] != 3) BAD("linalg.cross: inputs must have size 3 along dim");
  }
  j->o = o;
  j->so = o->strides[dim], j->sa = xa.strides[dim], j->sb = xb.strides[dim];
  walk_start(&j->w, 3);
  for (int32_t d = 0; d < o->ndim; ++d) {
    if (d == dim) continue;
    int64_t st[3] = {o->strides[d], xa.strides[d], xb.strides[d]};
    walk_push(&j->w, o->sizes[d], st);
  }
  j->ints = is_int_like(o->dtype);
  return TPU_OK;
}

static tpu_status_t cross_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_exec_ctx_t* ctx) {
  if (node->num_outputs < 1) BAD("missing output");
  cross_job_t j;
  TPU_RETURN_IF_ERROR(cross_parse(def, node, &node->outputs[0], &j));
  j.a = ku_input(def, node, "self");
  j.b = ku_input(def, node, "other");
  /* offsets from the walk are relative to the expanded views, same origin */
  if (tpu_view_numel(j.o) == 0) return TPU_OK;
  tpu_parallel_for(j.w.numel, 4096, cross_chunk, &j);
  return TPU_OK;
}

static tpu_status_t cross_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  const tpu_view_t* a = ku_input(def, node, "self");
  const tpu_view_t* b = ku_input(def, node, "other");
  if (!a || !b || a->dtype != b->dtype || a->dtype == TPU_DTYPE_BOOL)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "linalg.cross of these dtypes");
  if (a->ndim != b->ndim)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "linalg.cross: inputs of different ranks");
  return TPU_OK;
}

/* ---- addbmm ------------------------------------------------------------------------ */

typedef struct addbmm_job {
  const la_impl_t* im; /* NULL: integers */
  int64_t n, p, kk, k; /* C is n x p, the inner dim kk = batch * k */
  tpu_dtype_t half;     /* a half dtype to round to after each batch, else INVALID */
  char *a, *b, *c;     /* column-major n x kk, kk x p, n x p (work dtype, or int64) */
  double alpha, beta;
  int64_t ialpha, ibeta;
  bool bias;
} addbmm_job_t;

/* Rounds n work-dtype values through the half dtype `dt` and back. */
static void round_through(char* buf, tpu_dtype_t w, tpu_dtype_t dt, int64_t n) {
  uint16_t tmp[256];
  for (int64_t i = 0; i < n; i += 256) {
    int64_t m = n - i < 256 ? n - i : 256;
    char* p = buf + (size_t)i * tpu_dtype_size(w);
    tpu_convert(tmp, dt, 1, p, w, 1, m);
    tpu_convert(p, w, 1, tmp, dt, 1, m);
  }
}

static void addbmm_cols(void* arg, int64_t c0, int64_t c1) {
  const addbmm_job_t* j = (const addbmm_job_t*)arg;
  if (j->im) {
    size_t es = tpu_dtype_size(j->im->w);
    if (!j->n || c1 <= c0) return;
    char* c = j->c + (size_t)(c0 * j->n) * es;
    if (j->half == TPU_DTYPE_INVALID) { /* one GEMM over every batch */
      j->im->gemm('N', 'N', (int)j->n, (int)(c1 - c0), (int)j->kk, j->alpha, j->a, la_ld(j->n),
                  j->b + (size_t)(c0 * j->kk) * es, la_ld(j->kk), j->bias ? j->beta : 0.0, c,
                  la_ld(j->n));
      return;
    }
    /* half types: PyTorch adds one batch at a time (addmm_), rounding C each time */
    for (int64_t bi = 0; bi * j->k < j->kk; ++bi) {
      double beta = bi == 0 ? (j->bias ? j->beta : 0.0) : 1.0;
      j->im->gemm('N', 'N', (int)j->n, (int)(c1 - c0), (int)j->k, j->alpha,
                  j->a + (size_t)(bi * j->k * j->n) * es, la_ld(j->n),
                  j->b + (size_t)(c0 * j->kk + bi * j->k) * es, la_ld(j->kk), beta, c,
                  la_ld(j->n));
      round_through(c, j->im->w, j->half, j->n * (c1 - c0));
    }
    return;
  }
  const int64_t* a = (const int64_t*)j->a;
  const int64_t* b = (const int64_t*)j->b;
  int64_t* c = (int64_t*)j->c;
  for (int64_t col = c0; col < c1; ++col) {
    int64_t* cc = c + col * j->n;
    for (int64_t r = 0; r < j->n; ++r)
      cc[r] = j->bias ? (int64_t)((uint64_t)cc[r] * (uint64_t)j->ibeta) : 0;
    for (int64_t t = 0; t < j->kk; ++t) {
      uint64_t bt = (uint64_t)b[col * j->kk + t] * (uint64_t)j->ialpha;
      const int64_t* ac = a + t * j->n;
      for (int64_t r = 0; r < j->n; ++r) cc[r] = (int64_t)((uint64_t)cc[r] + (uint64_t)ac[r] * bt);
    }
  }
}

static tpu_status_t addbmm_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx) {
  const tpu_view_t* self = ku_input(def, node, "self");
  const tpu_view_t* b1 = ku_input(def, node, "batch1");
  const tpu_view_t* b2 = ku_input(def, node, "batch2");
  const tpu_view_t* o = node->num_outputs > 0 ? &node->outputs[0] : NULL;
  if (!self || !b1 || !b2 || !o || b1->ndim != 3 || b2->ndim != 3 || o->ndim != 2)
    BAD("addbmm: expected 3-D batches and a matrix result");
  int64_t nb = b1->sizes[0], n = b1->sizes[1], k = b1->sizes[2], p = b2->sizes[2];
  if (b2->sizes[0] != nb || b2->sizes[1] != k || o->sizes[0] != n || o->sizes[1] != p)
    BAD("addbmm: incompatible shapes");
  tpu_view_t bias;
  if (!view_expand(self, 2, o->sizes, &bias)) BAD("addbmm: self does not broadcast");
  addbmm_job_t j = {0};
  bool ints = is_int_like(o->dtype);
  j.im = ints ? NULL : la_impl_for(tpu_compute_storage_dtype(tpu_dtype_compute(o->dtype)));
  if (!ints && !j.im) return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "addbmm without BLAS");
  tpu_dtype_t w = ints ? TPU_DTYPE_I64 : j.im->w;
  size_t es = tpu_dtype_size(w);
  j.n = n, j.p = p, j.kk = nb * k, j.k = k;
  j.half = (!ints && o->dtype != w) ? o->dtype : TPU_DTYPE_INVALID;
  const tpu_attr_t* beta = ku_attr(def, node, "beta");
  const tpu_attr_t* alpha = ku_attr(def, node, "alpha");
  j.beta = tpu_attr_float(beta, 1.0), j.alpha = tpu_attr_float(alpha, 1.0);
  j.ibeta = tpu_attr_int(beta, 1), j.ialpha = tpu_attr_int(alpha, 1);
  j.bias = ints ? j.ibeta != 0 : j.beta != 0.0;
  char* mem = malloc(la_bytes(n * j.kk, es) + la_bytes(j.kk * p, es) + la_bytes(n * p, es));
  if (!mem) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "addbmm scratch allocation failed");
  char* at = mem;
  j.a = la_take(&at, n * j.kk, es);
  j.b = la_take(&at, j.kk * p, es);
  j.c = la_take(&at, n * p, es);
  for (int64_t bi = 0; bi < nb; ++bi) {
    la_mat_t ma = {b1, 0, n, k, b1->strides[1], b1->strides[2]};
    la_mat_t mb = {b2, 0, k, p, b2->strides[1], b2->strides[2]};
    la_load(&ma, bi * b1->strides[0], j.a + (size_t)(bi * k * n) * es, w, la_ld(n));
    la_load(&mb, bi * b2->strides[0], j.b + (size_t)(bi * k) * es, w, la_ld(j.kk));
  }
  la_mat_t mc = la_mat(o), mbias = la_mat(&bias);
  if (j.bias) la_load(&mbias, 0, j.c, w, la_ld(n));
  if (!j.bias && (j.kk == 0 || n == 0)) memset(j.c, 0, la_bytes(n * p, es));
  if (j.kk == 0 && j.bias && !ints) /* no products: C = beta * self */
    for (int64_t e = 0; e < n * p; ++e) j.im->set(j.c, e, j.beta * j.im->get(j.c, e));
  if (j.kk > 0 || ints) {
    int64_t per_col = (n > 0 ? n : 1) * (j.kk > 0 ? j.kk : 1);
    int64_t grain = per_col >= (1 << 16) ? 1 : (1 << 16) / per_col;
    tpu_parallel_for(p, grain, addbmm_cols, &j);
  }
  la_store(&mc, 0, j.c, w, la_ld(n));
  free(mem);
  return TPU_OK;
}

static tpu_status_t addbmm_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  const tpu_view_t* self = ku_input(def, node, "self");
  const tpu_view_t* b1 = ku_input(def, node, "batch1");
  const tpu_view_t* b2 = ku_input(def, node, "batch2");
  if (!self || !b1 || !b2 || b1->dtype != b2->dtype || self->dtype != b1->dtype ||
      b1->dtype == TPU_DTYPE_BOOL || b1->ndim != 3 || b2->ndim != 3 || self->ndim > 2)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "addbmm of these operands");
  if (b1->sizes[1] > 0x3fffffff || b1->sizes[2] * b1->sizes[0] > 0x3fffffff ||
      b2->sizes[2] > 0x3fffffff)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "addbmm: dims too large for BLAS");
  return TPU_OK;
}

static const tpu_op_def_t k_rows[] = {
    {.name = "trace", .inputs = "self", .attrs = "", .outputs = "out", .aten = "trace trace.out",
     .kernel = trace_kernel, .infer = NULL, .check = trace_check},
    {.name = "linalg_cross", .inputs = "self,other", .attrs = "dim", .outputs = "out",
     .aten = "linalg_cross linalg_cross.out", .kernel = cross_kernel, .infer = NULL,
     .check = cross_check},
    {.name = "addbmm", .inputs = "self,batch1,batch2", .attrs = "beta,alpha", .outputs = "out",
     .aten = "addbmm addbmm_ addbmm.out", .kernel = addbmm_kernel, .infer = NULL,
     .check = addbmm_check},
};

const tpu_op_family_t tpu_family_linalg_simple = {"linalg_simple", k_rows,
                                                  (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
