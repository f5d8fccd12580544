/* scatter_reduce.c — the scatter_reduce family: scatter_reduce.two
 * (sum/prod/mean/amax/amin, include_self), the legacy scatter.reduce /
 * scatter.value_reduce (add/multiply) and index_reduce (prod/mean/amax/amin).
 *
 * Each op walks an iteration shape S (the index's; for index_reduce the
 * source's) split into the reduced-into dim (J positions, walked in order)
 * and the rest (R positions, split over threads): element (r, j) reads index
 * value p and reduces src(r, j) into self(r with dim -> p). One task owns a
 * set of rest positions, hence every destination it touches, and visits j in
 * increasing order: results do not depend on the thread count. Values are
 * reduced in the compute type (half types in float32, integers in int64) on
 * contiguous converted copies; amax/amin propagate NaN as PyTorch's CPU
 * kernel does; mean divides by the number of values reduced (self included
 * when include_self), flooring for integers. Out-of-range indices fail
 * before anything is written: RuntimeError for scatter, IndexError for
 * index_reduce (PyTorch's messages). `scatter_reduce_reference` is the plain
 * per-element reference the C tests compare against.
 *
 * segment_reduce (lengths or offsets, forward and _segment_reduce_backward)
 * is at the end of the file: see there.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/kernel_util.h"

typedef enum sr_op { SR_SUM = 0, SR_PROD, SR_MEAN, SR_AMAX, SR_AMIN } sr_op_t;
typedef enum sr_kind { SR_SCATTER_REDUCE = 0, SR_SCATTER_LEGACY, SR_SCATTER_VALUE, SR_INDEX_REDUCE } sr_kind_t;

typedef struct sr_spec {
  sr_kind_t kind;
} sr_spec_t;

typedef struct sr_args {
  sr_kind_t kind;
  const tpu_view_t *self, *index, *src;
  const tpu_value_t* value;
  int32_t dim;
  sr_op_t op;
  bool include_self;
  tpu_view_t shape; /* the iteration shape S (sizes only) */
} sr_args_t;

static tpu_status_t unimpl(const char* what) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s", what);
}

static int64_t size_at(const tpu_view_t* v, int32_t d) { return v->ndim ? v->sizes[d] : 1; }
static int32_t rank1(const tpu_view_t* v) { return v->ndim ? v->ndim : 1; }

static tpu_status_t sr_parse(const tpu_op_def_t* def, const tpu_node_t* node, sr_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->kind = ((const sr_spec_t*)def->impl)->kind;
  a->self = ku_input(def, node, "self");
  a->index = ku_input(def, node, "index");
  a->src = a->kind == SR_INDEX_REDUCE ? ku_input(def, node, "source") : ku_input(def, node, "src");
  if (a->kind == SR_SCATTER_VALUE) {
    int32_t i = tpu_spec_index(def->inputs, "value");
    a->value = i < node->num_inputs && node->inputs[i].kind == TPU_VALUE_SCALAR ? &node->inputs[i] : NULL;
    if (!a->value) return unimpl("value");
  } else if (!a->src) {
    return unimpl("src");
  }
  if (!a->self || !a->index) return unimpl("self/index");
  tpu_dtype_t dt = a->self->dtype;
  if (dt == TPU_DTYPE_BOOL && a->kind == SR_INDEX_REDUCE) return unimpl("bool");
  if ((a->src && a->src->dtype != dt) ||
      !(a->index->dtype == TPU_DTYPE_I64 || a->index->dtype == TPU_DTYPE_I32))
    return unimpl("dtypes");
  TPU_RETURN_IF_ERROR(ku_unimplemented(
      ku_wrap_dim(tpu_attr_int(ku_attr(def, node, "dim"), 0), a->self->ndim, &a->dim)));
  const tpu_attr_t* r = ku_attr(def, node, "reduce");
  if (!r || r->kind != TPU_ATTR_STR) return unimpl("reduce");
  const char* s = r->u.str;
  a->include_self = tpu_attr_bool(ku_attr(def, node, "include_self"), true);
  if (a->kind == SR_SCATTER_LEGACY || a->kind == SR_SCATTER_VALUE) {
    if (strcmp(s, "add") == 0) a->op = SR_SUM;
    else if (strcmp(s, "multiply") == 0) a->op = SR_PROD;
    else return unimpl("reduce");
  } else if (strcmp(s, "sum") == 0 && a->kind == SR_SCATTER_REDUCE) a->op = SR_SUM;
  else if (strcmp(s, "prod") == 0) a->op = SR_PROD;
  else if (strcmp(s, "mean") == 0) a->op = SR_MEAN;
  else if (strcmp(s, "amax") == 0) a->op = SR_AMAX;
  else if (strcmp(s, "amin") == 0) a->op = SR_AMIN;
  else return unimpl("reduce");
  if (dt == TPU_DTYPE_BOOL && a->op == SR_MEAN) return unimpl("bool mean");
  const tpu_view_t *self = a->self, *index = a->index, *src = a->src;
  if (a->kind == SR_INDEX_REDUCE) {
    int64_t n = tpu_view_numel(index);
    if (index->ndim > 1 || rank1(src) != rank1(self) || size_at(src, a->dim) != n)
      return unimpl("index_reduce shapes");
    for (int32_t d = 0; d < rank1(self); ++d)
      if (d != a->dim && size_at(src, d) != size_at(self, d)) return unimpl("index_reduce shapes");
    a->shape = *src;
  } else {
    if (tpu_view_numel(index) && rank1(index) != rank1(self)) return unimpl("index rank");
    if (tpu_view_numel(index) && src && rank1(src) != rank1(index)) return unimpl("src rank");
    for (int32_t d = 0; tpu_view_numel(index) && d < rank1(index); ++d)
      if ((d != a->dim && size_at(index, d) > size_at(self, d)) ||
          (src && size_at(index, d) > size_at(src, d)))
        return unimpl("index larger than self/src");
    a->shape = *index;
  }
  if (a->shape.ndim == 0) a->shape.ndim = 1, a->shape.sizes[0] = 1;
  return TPU_OK;
}

/* ---- the engine ------------------------------------------------------------------ */

typedef struct sr_job {
  const sr_args_t* a;
  int32_t nd;
  int64_t sizes[TPU_MAX_DIMS];                     /* S */
  int64_t acc_st[TPU_MAX_DIMS], src_st[TPU_MAX_DIMS], idx_st[TPU_MAX_DIMS]; /* per dim of S */
  int64_t acc_p;                                    /* acc stride along dim (for p) */
  int64_t J;
  char* acc;
  const char* src;
  const int64_t* idx;
  int64_t* count; /* mean: values reduced into each acc element (acc's layout) */
  float (*round)(float); /* index_reduce of half types: round each step, as the CPU does */
} sr_job_t;

static float round_f16(float x) { return tpu_f16_to_f32(tpu_f32_to_f16(x)); }
static float round_bf16(float x) { return tpu_bf16_to_f32(tpu_f32_to_bf16(x)); }

/* base offsets of rest position r (dims of S other than dim). */
static void rest_offsets(const sr_job_t* j, int64_t r, int64_t* oa, int64_t* os, int64_t* oi) {
  *oa = *os = *oi = 0;
  for (int32_t d = j->nd - 1; d >= 0; --d) {
    if (d == j->a->dim) continue;
    int64_t c = r % j->sizes[d];
    r /= j->sizes[d];
    *oa += c * j->acc_st[d], *os += c * j->src_st[d], *oi += c * j->idx_st[d];
  }
}

#define SR_LOOP(C, T, LOWEST, HIGHEST, ISNAN)                                              \
  static void sr_chunk_##C(void* arg, int64_t r0, int64_t r1) {                            \
    const sr_job_t* jb = (const sr_job_t*)arg;                                             \
    const sr_args_t* a = jb->a;                                                            \
    T* acc = (T*)jb->acc;                                                                  \
    const T* src = (const T*)jb->src;                                                      \
    int32_t dim = a->dim;                                                                  \
    int64_t ss = jb->src_st[dim], is = jb->idx_st[dim];                                    \
    for (int64_t r = r0; r < r1; ++r) {                                                    \
      int64_t oa, os, oi;                                                                  \
      rest_offsets(jb, r, &oa, &os, &oi);                                                  \
      if (!a->include_self) {                                                              \
        T init = a->op == SR_PROD ? (T)1 : a->op == SR_AMAX ? LOWEST                       \
                 : a->op == SR_AMIN ? HIGHEST : (T)0;                                      \
        for (int64_t j = 0; j < jb->J; ++j) acc[oa + jb->idx[oi + j * is] * jb->acc_p] = init; \
      }                                                                                    \
      for (int64_t j = 0; j < jb->J; ++j) {                                                \
        int64_t at = oa + jb->idx[oi + j * is] * jb->acc_p;                                \
        T x = src[os + j * ss], y = acc[at];                                               \
        switch (a->op) {                                                                   \
          case SR_SUM:                                                                     \
          case SR_MEAN: acc[at] = SR_ADD_##C(y, x); break;                                 \
          case SR_PROD: acc[at] = SR_MUL_##C(y, x); break;                                 \
          case SR_AMAX: acc[at] = ISNAN(x) ? x : (y < x ? x : y); break;                   \
          case SR_AMIN: acc[at] = ISNAN(x) ? x : (x < y ? x : y); break;                   \
        }                                                                                  \
        SR_ROUND_##C(jb, acc[at]);                                                         \
        if (jb->count) jb->count[at]++;                                                    \
      }                                                                                    \
    }                                                                                      \
  }
#define SR_ADD_I64(y, x) (int64_t)((uint64_t)(y) + (uint64_t)(x))
#define SR_MUL_I64(y, x) (int64_t)((uint64_t)(y) * (uint64_t)(x))
#define SR_ADD_F32(y, x) ((y) + (x))
#define SR_MUL_F32(y, x) ((y) * (x))
#define SR_ADD_F64(y, x) ((y) + (x))
#define SR_MUL_F64(y, x) ((y) * (x))
#define SR_NONAN(x) false
#define SR_ROUND_I64(jb, v)
#define SR_ROUND_F64(jb, v)
#define SR_ROUND_F32(jb, v) \
  if ((jb)->round) (v) = (jb)->round(v)
SR_LOOP(I64, int64_t, INT64_MIN, INT64_MAX, SR_NONAN)
SR_LOOP(F32, float, -INFINITY, INFINITY, isnan)
SR_LOOP(F64, double, -INFINITY, INFINITY, isnan)
#undef SR_LOOP

static void (*const k_chunk[TPU_COMPUTE_COUNT])(void*, int64_t, int64_t) = {
    [TPU_COMPUTE_I64] = sr_chunk_I64, [TPU_COMPUTE_F32] = sr_chunk_F32,
    [TPU_COMPUTE_F64] = sr_chunk_F64};

/* mean: acc /= max(count + include_self, 1), flooring integers. */
#define SR_DIV(C, T, FLOOR)                                                                \
  static void sr_div_##C(void* acc, const int64_t* count, int64_t n, bool self) {          \
    T* v = (T*)acc;                                                                        \
    for (int64_t i = 0; i < n; ++i) {                                                      \
      int64_t c = count[i] + (self ? 1 : 0);                                               \
      if (c == 0) c = 1;                                                                   \
      v[i] = FLOOR(v[i], (T)c);                                                            \
    }                                                                                      \
  }
static inline int64_t sr_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
#define SR_FDIV(a, b) ((a) / (b))
SR_DIV(I64, int64_t, sr_floordiv)
SR_DIV(F32, float, SR_FDIV)
SR_DIV(F64, double, SR_FDIV)
static void (*const k_div[TPU_COMPUTE_COUNT])(void*, const int64_t*, int64_t, bool) = {
    [TPU_COMPUTE_I64] = sr_div_I64, [TPU_COMPUTE_F32] = sr_div_F32, [TPU_COMPUTE_F64] = sr_div_F64};

static tpu_status_t oom(void) {
  return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "scatter_reduce scratch allocation failed");
}

static tpu_status_t sr_run(const sr_args_t* a, const tpu_view_t* out) {
  if (!views_same(out, a->self)) view_copy(out, a->self);
  const tpu_view_t* S = &a->shape;
  int64_t n = tpu_view_numel(S);
  if (n == 0 || tpu_view_numel(out) == 0) return TPU_OK;
  tpu_view_t dst = *out;
  if (dst.ndim == 0) dst.ndim = 1, dst.sizes[0] = 1, dst.strides[0] = 1;
  tpu_compute_type_t ct = tpu_dtype_compute(a->self->dtype);
  if (ct == TPU_COMPUTE_B8) ct = TPU_COMPUTE_I64;
  tpu_dtype_t cdt = tpu_compute_storage_dtype(ct);
  size_t es = tpu_dtype_size(cdt);
  int64_t numel = tpu_view_numel(&dst);
  /* the index as int64 over S, checked */
  int64_t* idx = malloc((size_t)n * sizeof(int64_t));
  void* acc = malloc((size_t)numel * es);
  void* src = malloc((size_t)n * es);
  int64_t* count = a->op == SR_MEAN ? calloc((size_t)numel, sizeof(int64_t)) : NULL;
  if (!idx || !acc || !src || (a->op == SR_MEAN && !count)) {
    free(idx), free(acc), free(src), free(count);
    return oom();
  }
  tpu_view_t iv = *a->index, sv;
  if (a->kind == SR_INDEX_REDUCE) { /* index[j] along dim, broadcast over the rest */
    int64_t st = a->index->ndim ? a->index->strides[0] : 0;
    iv.ndim = S->ndim;
    for (int32_t d = 0; d < S->ndim; ++d)
      iv.sizes[d] = S->sizes[d], iv.strides[d] = d == a->dim ? st : 0;
  } else if (iv.ndim == 0) {
    iv.ndim = 1, iv.sizes[0] = 1, iv.strides[0] = 1;
  }
  tpu_view_t ib = view_of(idx, TPU_DTYPE_I64, S->ndim, S->sizes);
  view_copy(&ib, &iv);
  int64_t bound = dst.sizes[a->dim];
  for (int64_t i = 0; i < n; ++i)
    if (idx[i] < 0 || idx[i] >= bound) {
      int64_t bad = idx[i];
      free(idx), free(acc), free(src), free(count);
      if (a->kind == SR_INDEX_REDUCE)
        return tpu_status_make(TPU_CODE_INDEX_ERROR, "index out of range in self");
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "index %lld is out of bounds for dimension %d with size %lld",
                             (long long)bad, a->dim, (long long)bound);
    }
  /* src over S (a window of src), converted */
  sr_job_t jb;
  memset(&jb, 0, sizeof jb);
  if (a->value) {
    uint64_t storage = 0;
    tpu_value_to_view(a->value, cdt, &storage, &sv);
    memcpy(src, &storage, es);
    for (int32_t d = 0; d < S->ndim; ++d) jb.src_st[d] = 0;
  } else {
    sv = *a->src;
    if (sv.ndim == 0) sv.ndim = 1, sv.sizes[0] = 1, sv.strides[0] = 1;
    for (int32_t d = 0; d < S->ndim; ++d) sv.sizes[d] = S->sizes[d];
    tpu_view_t sb = view_of(src, cdt, S->ndim, S->sizes);
    view_copy(&sb, &sv);
    for (int32_t d = 0; d < S->ndim; ++d) jb.src_st[d] = sb.strides[d];
  }
  tpu_view_t ab = view_of(acc, cdt, dst.ndim, dst.sizes);
  view_copy(&ab, &dst);
  jb.a = a;
  jb.nd = S->ndim;
  memcpy(jb.sizes, S->sizes, sizeof(jb.sizes));
  for (int32_t d = 0; d < S->ndim; ++d) jb.acc_st[d] = ab.strides[d], jb.idx_st[d] = ib.strides[d];
  jb.acc_st[a->dim] = 0; /* the dim is addressed by p */
  jb.acc_p = ab.strides[a->dim];
  jb.J = S->sizes[a->dim];
  jb.acc = acc, jb.src = src, jb.idx = idx, jb.count = count;
  if (a->kind == SR_INDEX_REDUCE)
    jb.round = a->self->dtype == TPU_DTYPE_F16 ? round_f16
               : a->self->dtype == TPU_DTYPE_BF16 ? round_bf16 : NULL;
  int64_t R = n / (jb.J ? jb.J : 1);
  tpu_parallel_for(R, jb.J >= WALK_GRAIN ? 1 : WALK_GRAIN / (jb.J ? jb.J : 1), k_chunk[ct], &jb);
  if (count) k_div[ct](acc, count, numel, a->include_self);
  view_copy(&dst, &ab);
  free(idx), free(acc), free(src), free(count);
  return TPU_OK;
}

/* ---- reference ----------------------------------------------------------------------- */

/* Plain per-element reference in double / int64 (exported for the C tests). */
tpu_status_t scatter_reduce_reference(const tpu_op_def_t* def, const tpu_node_t* node);
tpu_status_t scatter_reduce_reference(const tpu_op_def_t* def, const tpu_node_t* node) {
  sr_args_t a;
  TPU_RETURN_IF_ERROR(sr_parse(def, node, &a));
  const tpu_view_t* out = &node->outputs[0];
  view_copy(out, a.self);
  int64_t n = tpu_view_numel(&a.shape), total = tpu_view_numel(out);
  bool fl = tpu_dtype_is_floating(a.self->dtype);
  double* v = calloc((size_t)(total ? total : 1), sizeof(double));
  int64_t* cnt = calloc((size_t)(total ? total : 1), sizeof(int64_t));
  bool* touched = calloc((size_t)(total ? total : 1), 1);
  int64_t c[TPU_MAX_DIMS], o[TPU_MAX_DIMS];
  tpu_view_t o1 = *out;
  if (o1.ndim == 0) o1.ndim = 1, o1.sizes[0] = 1, o1.strides[0] = 1;
  for (int64_t e = 0; e < total; ++e) {
    int64_t k = e, off = 0;
    for (int32_t d = o1.ndim - 1; d >= 0; --d) off += (k % o1.sizes[d]) * o1.strides[d], k /= o1.sizes[d];
    v[e] = fl ? view_get_f64(out, off) : (double)view_get_i64(out, off);
  }
  tpu_status_t st = TPU_OK;
  for (int64_t e = 0; e < n && st == TPU_OK; ++e) {
    int64_t k = e;
    for (int32_t d = a.shape.ndim - 1; d >= 0; --d) c[d] = k % a.shape.sizes[d], k /= a.shape.sizes[d];
    int64_t ioff = 0, soff = 0;
    if (a.kind == SR_INDEX_REDUCE) ioff = c[a.dim] * (a.index->ndim ? a.index->strides[0] : 0);
    else for (int32_t d = 0; d < a.index->ndim; ++d) ioff += c[d] * a.index->strides[d];
    int64_t p = view_get_i64(a.index, ioff);
    if (p < 0 || p >= o1.sizes[a.dim]) {
      st = tpu_status_make(TPU_CODE_INDEX_ERROR, "index out of range");
      break;
    }
    double x;
    if (a.value) {
      x = a.value->u.scalar.dtype == TPU_DTYPE_F64 ? a.value->u.scalar.v.f : (double)a.value->u.scalar.v.i;
    } else {
      for (int32_t d = 0; d < a.src->ndim; ++d) soff += c[d] * a.src->strides[d];
      x = fl ? view_get_f64(a.src, soff) : (double)view_get_i64(a.src, soff);
    }
    memcpy(o, c, sizeof(o));
    o[a.dim] = p;
    int64_t lin = 0;
    for (int32_t d = 0; d < o1.ndim; ++d) lin = lin * o1.sizes[d] + o[d];
    if (!a.include_self && !touched[lin])
      v[lin] = a.op == SR_PROD ? 1 : a.op == SR_AMAX ? -INFINITY : a.op == SR_AMIN ? INFINITY : 0;
    touched[lin] = true;
    cnt[lin]++;
    double y = v[lin];
    if (a.op == SR_SUM || a.op == SR_MEAN) v[lin] = y + x;
    else if (a.op == SR_PROD) v[lin] = y * x;
    else if (a.op == SR_AMAX) v[lin] = isnan(x) ? x : (y < x ? x : y);
    else v[lin] = isnan(x) ? x : (x < y ? x : y);
  }
  for (int64_t e = 0; e < total && st == TPU_OK; ++e) {
    if (a.op == SR_MEAN) {
      int64_t k = cnt[e] + (a.include_self ? 1 : 0);
      if (k == 0) k = 1;
      v[e] = fl ? v[e] / (double)k : floor(v[e] / (double)k);
    }
    int64_t k = e, off = 0;
    for (int32_t d = o1.ndim - 1; d >= 0; --d) off += (k % o1.sizes[d]) * o1.strides[d], k /= o1.sizes[d];
    if (fl) view_set_f64(out, off, v[e]);
    else view_set_i64(out, off, (int64_t)v[e]);
  }
  free(v), free(cnt), free(touched);
  return st;
}

/* ---- rows ----------------------------------------------------------------------------- */

static tpu_status_t sr_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  (void)ctx;
  sr_args_t a;
  TPU_RETURN_IF_ERROR(sr_parse(def, node, &a));
  const tpu_view_t* out = &node->outputs[0];
  if (!views_same_shape(out, a.self) || out->dtype != a.self->dtype)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "out has the wrong shape or dtype");
  return sr_run(&a, out);
}

static tpu_status_t sr_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* outs) {
  sr_args_t a;
  TPU_RETURN_IF_ERROR(sr_parse(def, node, &a));
  memset(&outs[0], 0, sizeof(outs[0]));
  outs[0].dtype = a.self->dtype;
  outs[0].ndim = a.self->ndim;
  memcpy(outs[0].sizes, a.self->sizes, sizeof(outs[0].sizes));
  tpu_view_set_contiguous(&outs[0]);
  return TPU_OK;
}

static tpu_status_t sr_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  sr_args_t a;
  return sr_parse(def, node, &a);
}

static const sr_spec_t k_two = {SR_SCATTER_REDUCE}, k_legacy = {SR_SCATTER_LEGACY},
                       k_value = {SR_SCATTER_VALUE}, k_index_reduce = {SR_INDEX_REDUCE};

/* ---- segment_reduce ---------------------------------------------------------------
 * segment_reduce(data, reduce; lengths | offsets, axis, unsafe, initial) and
 * _segment_reduce_backward(grad, output, data, reduce; lengths | offsets,
 * axis, initial), as ATen's CPU kernels: data viewed as [outer, size, inner]
 * around `axis`, lengths/offsets as [outer, segments(+1)]. Every operation
 * rounds to the data's dtype as the CPU's scalar_t arithmetic does (half
 * types through float32), on float64 copies; segments are split over
 * threads (each writes its own outputs). Lengths and offsets are validated
 * before anything is written (negative lengths, rows not summing to the
 * axis size unless unsafe, offsets out of order or range: RuntimeError). */

typedef enum { SG_MAX, SG_MEAN, SG_MIN, SG_SUM, SG_PROD } sg_red_t;

typedef struct sg_args {
  bool backward, offsets, unsafe, has_initial;
  const tpu_view_t *data, *lens, *grad, *output;
  sg_red_t red;
  double initial;
  int64_t outer, size, inner, nseg;
  tpu_dtype_t dt;
} sg_args_t;

static tpu_status_t sg_parse(const tpu_op_def_t* def, const tpu_node_t* node, sg_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->backward = strcmp(def->name, "segment_reduce_backward") == 0;
  a->data = ku_input(def, node, "data");
  const tpu_view_t *len = ku_input(def, node, "lengths"), *off = ku_input(def, node, "offsets");
  if (!a->data) return unimpl("segment_reduce: data");
  a->offsets = off != NULL;
  a->lens = off ? off : len;
  if (!a->lens) return unimpl("segment_reduce(): Either lengths or offsets must be defined.");
  a->dt = a->data->dtype;
  if (!tpu_dtype_is_floating(a->dt)) return unimpl("segment_reduce: floating data only");
  if (a->lens->dtype != TPU_DTYPE_I64 && a->lens->dtype != TPU_DTYPE_I32)
    return unimpl("segment_reduce: int32/int64 lengths only");
  const tpu_attr_t* r = ku_attr(def, node, "reduce");
  if (!r || r->kind != TPU_ATTR_STR) return unimpl("segment_reduce: reduce");
  static const char* names[] = {"max", "mean", "min", "sum", "prod"};
  int k = 0;
  while (k < 5 && strcmp(r->u.str, names[k]) != 0) ++k;
  if (k == 5) return unimpl("segment_reduce: unknown reduction");
  a->red = (sg_red_t)k;
  int32_t axis = 0;
  TPU_RETURN_IF_ERROR(ku_unimplemented(
      ku_wrap_dim(tpu_attr_int(ku_attr(def, node, "axis"), 0), a->data->ndim, &axis)));
  if (a->data->ndim < 1 || a->lens->ndim != axis + 1 || a->data->ndim < a->lens->ndim)
    return unimpl("segment_reduce(): Expected axis to be the last dimension of lengths");
  for (int32_t d = 0; d < axis; ++d)
    if (a->lens->sizes[d] != a->data->sizes[d]) return unimpl("segment_reduce: lengths shape");
  a->nseg = a->lens->sizes[axis] - (a->offsets ? 1 : 0);
  if (a->nseg < 0) return unimpl("segment_reduce: empty offsets");
  a->outer = 1, a->inner = 1, a->size = a->data->sizes[axis];
  for (int32_t d = 0; d < axis; ++d) a->outer *= a->data->sizes[d];
  for (int32_t d = axis + 1; d < a->data->ndim; ++d) a->inner *= a->data->sizes[d];
  a->unsafe = tpu_attr_bool(ku_attr(def, node, "unsafe"), false);
  const tpu_attr_t* init = ku_attr(def, node, "initial");
  if (init && init->kind != TPU_ATTR_NONE) {
    if (init->kind != TPU_ATTR_INT && init->kind != TPU_ATTR_FLOAT && init->kind != TPU_ATTR_BOOL)
      return unimpl("segment_reduce: initial");
    a->has_initial = true;
    a->initial = init->kind == TPU_ATTR_FLOAT ? init->u.f : (double)init->u.i;
  }
  if (a->backward) {
    a->grad = ku_input(def, node, "grad");
    a->output = ku_input(def, node, "output");
    if (!a->grad || !a->output || a->grad->dtype != a->dt || a->output->dtype != a->dt ||
        !views_same_shape(a->grad, a->output) || a->grad->ndim != a->data->ndim)
      return unimpl("_segment_reduce_backward: grad/output");
    for (int32_t d = 0; d < a->data->ndim; ++d)
      if (a->grad->sizes[d] != (d == axis ? a->nseg : a->data->sizes[d]))
        return unimpl("_segment_reduce_backward: grad shape");
  }
  return TPU_OK;
}

static tpu_status_t sg_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  sg_args_t a;
  TPU_RETURN_IF_ERROR(sg_parse(def, node, &a));
  if (node->num_outputs == 1 && node->outputs && node->outputs[0].addr > 1) {
    const tpu_view_t* o = &node->outputs[0];
    if (o->dtype != a.dt) return unimpl("segment_reduce: out dtype");
    for (int32_t i = 0; i < node->num_inputs; ++i)
      if (node->inputs[i].kind == TPU_VALUE_VIEW && views_overlap(o, &node->inputs[i].u.view))
        return unimpl("segment_reduce: output overlaps an input");
  }
  return TPU_OK;
}

static tpu_status_t sg_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* out) {
  sg_args_t a;
  TPU_RETURN_IF_ERROR(sg_parse(def, node, &a));
  memset(out, 0, sizeof(*out));
  out->dtype = a.dt;
  out->ndim = a.data->ndim;
  memcpy(out->sizes, a.data->sizes, sizeof(out->sizes));
  if (!a.backward) out->sizes[a.lens->ndim - 1] = a.nseg;
  tpu_view_set_contiguous(out);
  return TPU_OK;
}

/* x rounded to dtype dt, as scalar_t arithmetic leaves it. */
static inline double sg_rnd(double x, tpu_dtype_t dt) {
  if (dt == TPU_DTYPE_F64) return x;
  float f = (float)x;
  if (dt == TPU_DTYPE_F16) return (double)tpu_f16_to_f32(tpu_f32_to_f16(f));
  if (dt == TPU_DTYPE_BF16) return (double)tpu_bf16_to_f32(tpu_f32_to_bf16(f));
  return (double)f;
}

typedef struct sg_job {
  const sg_args_t* a;
  const int64_t* lens; /* offsets [outer, nseg + 1] */
  const double *data, *grad, *out;
  double* res;
} sg_job_t;

/* Segment s of row o: j->lens holds offsets [outer, nseg + 1] (lengths are
 * turned into offsets when loaded). */
static void sg_segment(const sg_job_t* j, int64_t o, int64_t s, int64_t* start, int64_t* len) {
  const int64_t* row = j->lens + o * (j->a->nseg + 1);
  *start = row[s], *len = row[s + 1] - row[s];
}

/* A segment's rows are walked in order, each row's inner elements
 * contiguously (acc holds one accumulator per inner position). */
static void sg_forward_chunk(void* arg, int64_t begin, int64_t end) {
  const sg_job_t* j = (const sg_job_t*)arg;
  const sg_args_t* a = j->a;
  const tpu_dtype_t dt = a->dt;
  const int64_t inner = a->inner;
  const double init = a->has_initial ? sg_rnd(a->initial, dt)
                      : a->red == SG_MAX  ? -INFINITY
                      : a->red == SG_MIN  ? INFINITY
                      : a->red == SG_PROD ? 1.0
                                          : 0.0;
  for (int64_t t = begin; t < end; ++t) {
    int64_t o = t / a->nseg, s = t % a->nseg, start, len;
    sg_segment(j, o, s, &start, &len);
    double* acc = j->res + (o * a->nseg + s) * inner;
    for (int64_t i = 0; i < inner; ++i) acc[i] = init;
    for (int64_t k = 0; k < len; ++k) {
      const double* x = j->data + (o * a->size + start + k) * inner;
      switch (a->red) {
        case SG_MAX:
          for (int64_t i = 0; i < inner; ++i) acc[i] = isnan(x[i]) || acc[i] < x[i] ? x[i] : acc[i];
          break;
        case SG_MIN:
          for (int64_t i = 0; i < inner; ++i) acc[i] = isnan(x[i]) || x[i] < acc[i] ? x[i] : acc[i];
          break;
        case SG_PROD:
          for (int64_t i = 0; i < inner; ++i) acc[i] = sg_rnd(acc[i] * x[i], dt);
          break;
        default:
          if (dt == TPU_DTYPE_F64)
            for (int64_t i = 0; i < inner; ++i) acc[i] += x[i];
          else if (dt == TPU_DTYPE_F32)
            for (int64_t i = 0; i < inner; ++i) acc[i] = (double)(float)(acc[i] + x[i]);
          else
            for (int64_t i = 0; i < inner; ++i) acc[i] = sg_rnd(acc[i] + x[i], dt);
      }
    }
    if (a->red == SG_MEAN)
      for (int64_t i = 0; i < inner; ++i) {
        if (len == 0 && !a->has_initial) acc[i] = NAN;
        else if (len > 0 && !isnan(acc[i])) acc[i] = sg_rnd(acc[i] / sg_rnd((double)len, dt), dt);
      }
  }
}

static void sg_backward_chunk(void* arg, int64_t begin, int64_t end) {
  const sg_job_t* j = (const sg_job_t*)arg;
  const sg_args_t* a = j->a;
  const tpu_dtype_t dt = a->dt;
  for (int64_t t = begin; t < end; ++t) {
    int64_t o = t / a->nseg, s = t % a->nseg, start, len;
    sg_segment(j, o, s, &start, &len);
    if (len == 0) continue;
    if (a->red == SG_MEAN || a->red == SG_SUM) {
      const double* g = j->grad + (o * a->nseg + s) * a->inner;
      for (int64_t k = 0; k < len; ++k) {
        double* gi = j->res + (o * a->size + start + k) * a->inner;
        if (a->red == SG_SUM)
          memcpy(gi, g, sizeof(double) * (size_t)a->inner);
        else
          for (int64_t i = 0; i < a->inner; ++i)
            gi[i] = sg_rnd(g[i] / sg_rnd((double)len, dt), dt);
      }
      continue;
    }
    for (int64_t i = 0; i < a->inner; ++i) {
      const int64_t oi = (o * a->nseg + s) * a->inner + i, base = (o * a->size + start) * a->inner + i;
      const double g = j->grad[oi], y = j->out[oi];
      const double* x = j->data + base;
      double* gi = j->res + base;
      const int64_t st = a->inner;
      if (a->red == SG_MAX || a->red == SG_MIN) {
        int64_t count = 0;
        for (int64_t k = 0; k < len; ++k)
          if (isnan(x[k * st]) || x[k * st] == y) gi[k * st] = g, ++count;
        if (count < 2) continue;
        /* ATen averages only the positive gradients of the tied elements. */
        for (int64_t k = 0; k < len; ++k)
          if (gi[k * st] > 0) gi[k * st] = sg_rnd(gi[k * st] / sg_rnd((double)count, dt), dt);
      } else if (a->red == SG_MEAN || a->red == SG_SUM) {
        continue; /* filled row by row below */
      } else {
        const double gy = sg_rnd(g * y, dt);
        for (int64_t k = 0; k < len; ++k) {
          const double v = x[k * st];
          if (isnan(v) || v == 0) {
            double excl = a->has_initial ? sg_rnd(a->initial, dt) : 1.0;
            for (int64_t q = 0; q < len; ++q)
              if (q != k) excl = sg_rnd(excl * x[q * st], dt);
            gi[k * st] = sg_rnd(g * excl, dt);
          } else {
            gi[k * st] = sg_rnd(gy / v, dt);
          }
        }
      }
    }
  }
}

/* Lengths/offsets into int64, validated (see the section comment), then
 * as offsets [outer, nseg + 1] in `offs`. */
static tpu_status_t sg_load_lengths(const sg_args_t* a, int64_t* lens, int64_t* offs) {
  tpu_view_t lv = view_of(lens, TPU_DTYPE_I64, a->lens->ndim, a->lens->sizes);
  view_copy(&lv, a->lens);
  const int64_t w = a->nseg + (a->offsets ? 1 : 0);
  for (int64_t o = 0; o < a->outer; ++o) {
    const int64_t* row = lens + o * w;
    if (a->offsets) {
      for (int64_t k = 0; k < w; ++k)
        if (row[k] < 0 || row[k] > a->size || (k > 0 && row[k] < row[k - 1]))
          return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                                 "segment_reduce(): offsets must be non-decreasing and within "
                                 "data.size(axis)");
    } else {
      int64_t sum = 0;
      for (int64_t k = 0; k < w; ++k) {
        if (row[k] < 0)
          return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "lengths contains negative value!");
        sum += row[k];
      }
      if (sum > a->size || (!a->unsafe && !a->backward && sum != a->size))
        return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                               "segment_reduce(): Expected all rows of lengths along axis to sum "
                               "to data.size(lengths.dim()-1) when !unsafe.");
    }
    int64_t* orow = offs + o * (a->nseg + 1);
    if (a->offsets) {
      memcpy(orow, row, sizeof(int64_t) * (size_t)w);
    } else {
      orow[0] = 0;
      for (int64_t k = 0; k < w; ++k) orow[k + 1] = orow[k] + row[k];
    }
  }
  return TPU_OK;
}

static tpu_status_t sg_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  (void)ctx;
  sg_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(sg_parse(def, node, &a)));
  if (node->num_outputs != 1) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "one output");
  const tpu_view_t* out = &node->outputs[0];
  const int64_t nd = a.outer * a.size * a.inner, nr = a.outer * a.nseg * a.inner;
  const int64_t nl = tpu_view_numel(a.lens);
  const int64_t nres = a.backward ? nd : nr;
  int64_t* lens = malloc(sizeof(int64_t) * (size_t)(nl > 0 ? nl : 1));
  int64_t* offs = malloc(sizeof(int64_t) * (size_t)(a.outer * (a.nseg + 1) + 1));
  double* data = malloc(sizeof(double) * (size_t)(nd > 0 ? nd : 1));
  double* res = calloc((size_t)(nres > 0 ? nres : 1), sizeof(double));
  double *grad = NULL, *y = NULL;
  if (a.backward) {
    grad = malloc(sizeof(double) * (size_t)(nr > 0 ? nr : 1));
    y = malloc(sizeof(double) * (size_t)(nr > 0 ? nr : 1));
  }
  tpu_status_t st = TPU_OK;
  if (!lens || !offs || !data || !res || (a.backward && (!grad || !y)))
    st = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "segment_reduce buffers");
  if (st == TPU_OK) st = sg_load_lengths(&a, lens, offs);
  if (st == TPU_OK) {
    tpu_view_t dv = view_of(data, TPU_DTYPE_F64, a.data->ndim, a.data->sizes);
    view_copy(&dv, a.data);
    if (a.backward) {
      tpu_view_t gv = view_of(grad, TPU_DTYPE_F64, a.grad->ndim, a.grad->sizes);
      tpu_view_t yv = view_of(y, TPU_DTYPE_F64, a.output->ndim, a.output->sizes);
      view_copy(&gv, a.grad);
      view_copy(&yv, a.output);
    }
    sg_job_t j = {&a, offs, data, grad, y, res};
    int64_t per = a.inner * (a.size / (a.nseg > 0 ? a.nseg : 1) + 1);
    int64_t grain = 32768 / (per > 0 ? per : 1);
    tpu_parallel_for(a.outer * a.nseg, grain > 0 ? grain : 1,
                     a.backward ? sg_backward_chunk : sg_forward_chunk, &j);
    tpu_view_t rv = view_of(res, TPU_DTYPE_F64, out->ndim, out->sizes);
    view_copy(out, &rv);
  }
  free(lens), free(offs), free(data), free(res), free(grad), free(y);
  return st;
}

#define SR_ROW(name_, inputs_, attrs_, aten_, spec) \
  {.name = name_, .inputs = inputs_, .attrs = attrs_, .outputs = "out", .aten = aten_, \
   .kernel = sr_kernel, .infer = sr_infer, .check = sr_check, .impl = &spec}

static const tpu_op_def_t k_ops[] = {
    SR_ROW("scatter_reduce", "self,index,src", "dim,reduce,include_self",
           "scatter_reduce.two scatter_reduce_.two scatter_reduce.two_out", k_two),
    SR_ROW("scatter_reduce_legacy", "self,index,src", "dim,reduce",
           "scatter.reduce scatter_.reduce scatter.reduce_out", k_legacy),
    SR_ROW("scatter_value_reduce", "self,index,value#", "dim,reduce",
           "scatter.value_reduce scatter_.value_reduce scatter.value_reduce_out", k_value),
    SR_ROW("index_reduce", "self,index,source", "dim,reduce,include_self",
           "index_reduce index_reduce_ index_reduce.out", k_index_reduce),
    {.name = "segment_reduce", .inputs = "data,lengths?,offsets?",
     .attrs = "reduce,axis,unsafe,initial", .outputs = "out",
     .aten = "segment_reduce segment_reduce.out", .kernel = sg_kernel, .infer = sg_infer,
     .check = sg_check, .impl = NULL},
    {.name = "segment_reduce_backward", .inputs = "grad,output,data,lengths?,offsets?",
     .attrs = "reduce,axis,initial", .outputs = "out",
     .aten = "_segment_reduce_backward _segment_reduce_backward.out", .kernel = sg_kernel,
     .infer = sg_infer, .check = sg_check, .impl = NULL},
};

const tpu_op_family_t tpu_family_scatter_reduce = {"scatter_reduce", k_ops,
                                                   (int32_t)(sizeof(k_ops) / sizeof(k_ops[0]))};
