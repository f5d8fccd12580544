/* amp_scale.c — GradScaler's unscale-and-check and scale update (see
 * amp_scale.h for the ops and their semantics).
 *
 * amp_unscale is one pass over a gradient, split over tpu_parallel_for: each
 * task multiplies its range and notes whether it saw a non-finite value; the
 * node writes found_inf once, after every task has finished, so tasks never
 * race on it. Half types go through float32 buffers of AMP_CHUNK elements.
 * amp_update_scale is a handful of scalar operations on one thread.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/elementwise/amp_scale.h"

#define AMP_CHUNK 512
#define AMP_GRAIN 32768 /* elements per task at least */

static tpu_status_t unimpl(const char* op, const char* what) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: %s", op, what);
}

/* A one-element view of `dtype`, or NULL. */
static const tpu_view_t* one_element(const tpu_op_def_t* def, const tpu_node_t* node,
                                     const char* name, tpu_dtype_t dtype) {
  const tpu_view_t* v = ku_input(def, node, name);
  return v && v->dtype == dtype && tpu_view_numel(v) == 1 ? v : NULL;
}

/* ---- amp_unscale ------------------------------------------------------------------- */

typedef struct unscale_args {
  tpu_dtype_t dtype;
  int64_t numel;
  void* grad;              /* NULL when numel == 0 */
  float* found_inf;
  float inv_scale;
  atomic_bool saw_nonfinite; /* set by any task */
} unscale_args_t;

static tpu_status_t unscale_parse(const tpu_op_def_t* def, const tpu_node_t* node,
                                  unscale_args_t* a) {
  static const char* k_op = "_amp_foreach_non_finite_check_and_unscale_";
  memset(a, 0, sizeof(*a));
  const tpu_view_t* g = ku_input(def, node, "self");
  const tpu_view_t* found = one_element(def, node, "found_inf", TPU_DTYPE_F32);
  const tpu_view_t* inv = one_element(def, node, "inv_scale", TPU_DTYPE_F32);
  if (!g || !found || !inv) return unimpl(k_op, "found_inf or inv_scale is not one float32");
  a->dtype = g->dtype;
  const tpu_compute_type_t ct = tpu_dtype_compute(a->dtype);
  if (ct != TPU_COMPUTE_F32 && ct != TPU_COMPUTE_F64) return unimpl(k_op, "not a floating dtype");
  if (!tpu_view_is_contiguous(g)) return unimpl(k_op, "a non-contiguous gradient");
  a->numel = tpu_view_numel(g);
  if (a->numel > 0 && (views_overlap(g, found) || views_overlap(g, inv)))
    return unimpl(k_op, "a gradient shares memory with found_inf or inv_scale");
  if (found->addr > 1 && inv->addr > 1) { /* values are read only when the node runs */
    a->found_inf = (float*)tpu_view_ptr(found);
    a->inv_scale = *(const float*)tpu_view_ptr(inv);
  }
  if (a->numel > 0) a->grad = tpu_view_ptr(g);
  atomic_init(&a->saw_nonfinite, false);
  return TPU_OK;
}

/* n elements in compute type T; true when one of them is not finite. The
 * test is written as |x| <= max so the loop vectorises (nan compares false). */
#define UNSCALE_LOOP(T, FABS, MAX, SUF)                                           \
  static bool unscale_##SUF(T* restrict p, int64_t n, T inv, bool scale) {        \
    bool bad = false;                                                              \
    for (int64_t i = 0; i < n; ++i) {                                              \
      T v = p[i];                                                                  \
      bad |= !(FABS(v) <= MAX);                                                    \
      if (scale) p[i] = v * inv;                                                   \
    }                                                                              \
    return bad;                                                                    \
  }
UNSCALE_LOOP(float, fabsf, 3.40282347e+38f, f32)
UNSCALE_LOOP(double, fabs, 1.7976931348623157e+308, f64)
#undef UNSCALE_LOOP

static void unscale_range(void* arg, int64_t begin, int64_t end) {
  unscale_args_t* a = (unscale_args_t*)arg;
  const size_t es = tpu_dtype_size(a->dtype);
  const bool scale = a->inv_scale != 1.0f;
  char* base = (char*)a->grad + (size_t)begin * es;
  bool bad = false;
  if (a->dtype == TPU_DTYPE_F64) {
    bad = unscale_f64((double*)base, end - begin, (double)a->inv_scale, scale);
  } else if (a->dtype == TPU_DTYPE_F32) {
    bad = unscale_f32((float*)base, end - begin, a->inv_scale, scale);
  } else {
    float buf[AMP_CHUNK];
    for (int64_t c = 0; c < end - begin; c += AMP_CHUNK) {
      const int64_t n = end - begin - c < AMP_CHUNK ? end - begin - c : AMP_CHUNK;
      char* at = base + (size_t)c * es;
      tpu_convert(buf, TPU_DTYPE_F32, 1, at, a->dtype, 1, n);
      bad |= unscale_f32(buf, n, a->inv_scale, scale);
      if (scale) tpu_convert(at, a->dtype, 1, buf, TPU_DTYPE_F32, 1, n);
    }
  }
  if (bad) atomic_store_explicit(&a->saw_nonfinite, true, memory_order_relaxed);
}

static tpu_status_t unscale_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                   tpu_exec_ctx_t* ctx) {
  (void)ctx;
  unscale_args_t a;
  TPU_RETURN_IF_ERROR(unscale_parse(def, node, &a));
  if (a.numel == 0) return TPU_OK;
  if (!a.found_inf) /* a placeholder address: only a check's node has one */ return unimpl("_amp_foreach_non_finite_check_and_unscale_", "no found_inf");
  tpu_parallel_for(a.numel, AMP_GRAIN, unscale_range, &a);
  if (atomic_load(&a.saw_nonfinite)) *a.found_inf = 1.0f;
  return TPU_OK;
}

tpu_status_t tpu_amp_unscale_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                       tpu_exec_ctx_t* ctx) {
  (void)ctx;
  unscale_args_t a;
  TPU_RETURN_IF_ERROR(unscale_parse(def, node, &a));
  if (a.numel > 0 && !a.found_inf)
    return unimpl("_amp_foreach_non_finite_check_and_unscale_", "no found_inf");
  const size_t es = tpu_dtype_size(a.dtype);
  for (int64_t i = 0; i < a.numel; ++i) {
    char* at = (char*)a.grad + (size_t)i * es;
    double v;
    tpu_convert(&v, TPU_DTYPE_F64, 1, at, a.dtype, 1, 1);
    if (!isfinite(v)) *a.found_inf = 1.0f;
    if (a.inv_scale != 1.0f) {
      v *= (double)a.inv_scale;
      tpu_convert(at, a.dtype, 1, &v, TPU_DTYPE_F64, 1, 1);
    }
  }
  return TPU_OK;
}

static tpu_status_t unscale_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  unscale_args_t a;
  return unscale_parse(def, node, &a);
}

/* ---- amp_update_scale -------------------------------------------------------------- */

static tpu_status_t update_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  if (!one_element(def, node, "self", TPU_DTYPE_F32) ||
      !one_element(def, node, "growth_tracker", TPU_DTYPE_I32) ||
      !one_element(def, node, "found_inf", TPU_DTYPE_F32))
    return unimpl("_amp_update_scale_", "operands are not one float32 / int32 element");
  if (node->num_outputs != 1 || !views_same(&node->outputs[0], ku_input(def, node, "self")))
    return unimpl("_amp_update_scale_", "only the in-place form runs natively");
  return TPU_OK;
}

static tpu_status_t update_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx) {
  (void)ctx;
  TPU_RETURN_IF_ERROR(update_check(def, node));
  float* scale = (float*)tpu_view_ptr(&node->outputs[0]);
  int32_t* tracker = (int32_t*)tpu_view_ptr(ku_input(def, node, "growth_tracker"));
  const float found_inf = *(const float*)tpu_view_ptr(ku_input(def, node, "found_inf"));
  const double growth = tpu_attr_float(ku_attr(def, node, "scale_growth_factor"), 2.0);
  const double backoff = tpu_attr_float(ku_attr(def, node, "scale_backoff_factor"), 0.5);
  const int64_t interval = tpu_attr_int(ku_attr(def, node, "growth_interval"), 2000);
  if (found_inf != 0.0f) {
    *scale = (float)(*scale * backoff);
    *tracker = 0;
    return TPU_OK;
  }
  const int64_t successful = (int64_t)*tracker + 1;
  if (successful == interval) {
    const float grown = (float)(*scale * growth);
    if (isfinite(grown)) *scale = grown;
    *tracker = 0;
  } else {
    *tracker = (int32_t)successful;
  }
  return TPU_OK;
}

/* ---- the op table ------------------------------------------------------------------- */

static const tpu_op_def_t k_rows[] = {
    {.name = "amp_unscale", .inputs = "self*!,found_inf!,inv_scale", .attrs = "", .outputs = "",
     .aten = "_amp_foreach_non_finite_check_and_unscale_", .kernel = unscale_kernel, .infer = NULL,
     .check = unscale_check, .impl = NULL, .flags = TPU_OP_FOREACH, .rows = NULL},
    {.name = "amp_update_scale", .inputs = "self,growth_tracker!,found_inf",
     .attrs = "scale_growth_factor,scale_backoff_factor,growth_interval", .outputs = "out",
     .aten = "_amp_update_scale_", .kernel = update_kernel, .infer = NULL, .check = update_check,
     .impl = NULL, .flags = 0, .rows = NULL},
};

const tpu_op_family_t tpu_family_amp_scale = {"amp_scale", k_rows,
                                              (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
