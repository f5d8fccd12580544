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
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_util.h"

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

#define SR_ROW(name, inputs, attrs, aten, spec) \
  {name, inputs, attrs, "out", aten, sr_kernel, sr_infer, sr_check, &spec}

static const tpu_op_def_t k_ops[] = {
    SR_ROW("scatter_reduce", "self,index,src", "dim,reduce,include_self",
           "scatter_reduce.two scatter_reduce_.two scatter_reduce.two_out", k_two),
    SR_ROW("scatter_reduce_legacy", "self,index,src", "dim,reduce",
           "scatter.reduce scatter_.reduce scatter.reduce_out", k_legacy),
    SR_ROW("scatter_value_reduce", "self,index,value", "dim,reduce",
           "scatter.value_reduce scatter_.value_reduce scatter.value_reduce_out", k_value),
    SR_ROW("index_reduce", "self,index,source", "dim,reduce,include_self",
           "index_reduce index_reduce_ index_reduce.out", k_index_reduce),
};

const tpu_op_family_t tpu_family_scatter_reduce = {"scatter_reduce", k_ops,
                                                   (int32_t)(sizeof(k_ops) / sizeof(k_ops[0]))};
