/* kernel_test_util.h — helpers for the kernel families' table-driven tests:
 * host tensors behind views (malloc'd, valid as device addresses on the host
 * driver) in several layouts, deterministic fills, attribute builders, a
 * node builder, and an element-wise comparison with per-dtype tolerances.
 * Every helper is static inline; each test file includes this once.
 */
#ifndef TPU_KERNEL_TEST_UTIL_H_
#define TPU_KERNEL_TEST_UTIL_H_

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernel.h"
#include "test.h"

/* How a test tensor's elements are laid out. */
typedef enum tt_layout {
  TT_CONTIG = 0,
  TT_TRANSPOSED, /* dims stored in reverse order (a permuted view) */
  TT_GAPS,       /* every dim's stride doubled (a sliced view) */
  TT_BROADCAST,  /* dim 0 expanded (stride 0) when it has more than one element */
} tt_layout_t;

typedef struct tt_tensor {
  tpu_view_t view;
  void* mem;
} tt_tensor_t;

/* Deterministic pseudo-random numbers in [0, 1). */
static uint64_t tt_rng_state = 0x9e3779b97f4a7c15ull;
static inline double tt_rand(void) {
  tt_rng_state = tt_rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(tt_rng_state >> 11) / 9007199254740992.0;
}

/* A tensor of the given shape and layout; its memory is zeroed. */
static inline tt_tensor_t tt_make(tpu_dtype_t dtype, int32_t ndim, const int64_t* sizes,
                                  tt_layout_t layout) {
  tt_tensor_t t;
  memset(&t, 0, sizeof(t));
  t.view.dtype = dtype;
  t.view.ndim = ndim;
  int64_t stride = 1, span = 1;
  for (int32_t k = 0; k < ndim; ++k) {
    int32_t d = layout == TT_TRANSPOSED ? k : ndim - 1 - k;
    t.view.sizes[d] = sizes[d];
    t.view.strides[d] = layout == TT_GAPS ? 2 * stride : stride;
    stride *= sizes[d] > 1 ? sizes[d] : 1;
  }
  if (layout == TT_BROADCAST && ndim > 0 && sizes[0] > 1) t.view.strides[0] = 0;
  for (int32_t d = 0; d < ndim; ++d)
    if (sizes[d] == 0) span = 0;
  for (int32_t d = 0; span && d < ndim; ++d) span += (sizes[d] - 1) * t.view.strides[d];
  t.mem = calloc((size_t)(span > 0 ? span : 1), tpu_dtype_size(dtype));
  t.view.addr = (uint64_t)(uintptr_t)t.mem;
  return t;
}

/* A tensor shaped like `shape` (only its dtype, ndim, sizes are used). */
static inline tt_tensor_t tt_like(const tpu_view_t* shape, tt_layout_t layout) {
  return tt_make(shape->dtype, shape->ndim, shape->sizes, layout);
}

static inline void tt_free(tt_tensor_t* t) {
  free(t->mem);
  t->mem = NULL;
}

/* Offset of flat (logical row-major) index k. */
static inline int64_t tt_offset(const tpu_view_t* v, int64_t k) {
  int64_t off = 0;
  for (int32_t d = v->ndim - 1; d >= 0; --d) {
    off += (k % v->sizes[d]) * v->strides[d];
    k /= v->sizes[d];
  }
  return off;
}

static inline double tt_get(const tpu_view_t* v, int64_t k) {
  double x;
  tpu_convert(&x, TPU_DTYPE_F64, 1,
              (char*)tpu_view_ptr(v) + tt_offset(v, k) * (int64_t)tpu_dtype_size(v->dtype),
              v->dtype, 1, 1);
  return x;
}

static inline void tt_set(const tpu_view_t* v, int64_t k, double x) {
  tpu_convert((char*)tpu_view_ptr(v) + tt_offset(v, k) * (int64_t)tpu_dtype_size(v->dtype),
              v->dtype, 1, &x, TPU_DTYPE_F64, 1, 1);
}

/* Fills with values in [lo, hi) (integers: whole numbers; bool: 0/1); each
 * floating element is NaN with probability nan_rate. */
static inline void tt_fill(const tpu_view_t* v, double lo, double hi, double nan_rate) {
  int64_t n = tpu_view_numel(v);
  for (int64_t k = 0; k < n; ++k) {
    double x = lo + (hi - lo) * tt_rand();
    if (!tpu_dtype_is_floating(v->dtype)) x = floor(x);
    if (v->dtype == TPU_DTYPE_BOOL) x = tt_rand() < 0.5 ? 0.0 : 1.0;
    if (nan_rate > 0 && tt_rand() < nan_rate) x = NAN;
    tt_set(v, k, x);
  }
}

/* Tolerance of a result stored in dtype (relative, see CHECK_NEAR). */
static inline double tt_tol(tpu_dtype_t dtype) {
  switch (dtype) {
    case TPU_DTYPE_F64: return 1e-9;
    case TPU_DTYPE_F32: return 2e-5;
    case TPU_DTYPE_F16: return 2e-3;
    case TPU_DTYPE_BF16: return 1.6e-2;
    default: return 0.0;
  }
}

/* Compares every element of got with want (same shape); NaN equals NaN.
 * Returns the number of mismatches and reports the first few. */
static inline int tt_compare(const char* what, const tpu_view_t* got, const tpu_view_t* want,
                             double tol) {
  if (got->ndim != want->ndim) {
    tpu_test_fail(__FILE__, __LINE__, "%s: ndim %d vs %d", what, got->ndim, want->ndim);
    return 1;
  }
  int64_t n = tpu_view_numel(want);
  int bad = 0;
  for (int64_t k = 0; k < n; ++k) {
    double g = tt_get(got, k), w = tt_get(want, k);
    bool ok = (isnan(g) && isnan(w)) || g == w || fabs(g - w) <= tol * (1.0 + fabs(w));
    if (!ok && bad++ < 3)
      tpu_test_fail(__FILE__, __LINE__, "%s: element %lld: got %.17g, want %.17g", what,
                    (long long)k, g, w);
  }
  return bad;
}

/* ---- attributes and nodes --------------------------------------------------- */

static inline tpu_attr_t tt_none(void) {
  tpu_attr_t a;
  memset(&a, 0, sizeof(a));
  return a;
}
static inline tpu_attr_t tt_int(int64_t v) {
  tpu_attr_t a = tt_none();
  a.kind = TPU_ATTR_INT;
  a.u.i = v;
  return a;
}
static inline tpu_attr_t tt_bool(bool v) {
  tpu_attr_t a = tt_int(v);
  a.kind = TPU_ATTR_BOOL;
  return a;
}
static inline tpu_attr_t tt_float(double v) {
  tpu_attr_t a = tt_none();
  a.kind = TPU_ATTR_FLOAT;
  a.u.f = v;
  return a;
}
static inline tpu_attr_t tt_dtype(tpu_dtype_t d) {
  tpu_attr_t a = tt_none();
  a.kind = TPU_ATTR_DTYPE;
  a.u.dtype = d;
  return a;
}
/* An int list of count (<= TPU_MAX_INTS) values. */
static inline tpu_attr_t tt_ints(int32_t count, const int64_t* v) {
  tpu_attr_t a = tt_none();
  a.kind = TPU_ATTR_INTS;
  a.count = count;
  for (int32_t i = 0; i < count; ++i) a.u.ints[i] = v[i];
  return a;
}

static inline tpu_value_t tt_value(const tpu_view_t* v) {
  tpu_value_t x;
  memset(&x, 0, sizeof(x));
  if (v) {
    x.kind = TPU_VALUE_VIEW;
    x.u.view = *v;
  }
  return x;
}

static inline const tpu_op_def_t* tt_find(const tpu_op_family_t* family, const char* name) {
  for (int32_t i = 0; i < family->count; ++i)
    if (strcmp(family->ops[i].name, name) == 0) return &family->ops[i];
  tpu_test_fail(__FILE__, __LINE__, "no op %s in family %s", name, family->name);
  return NULL;
}

static inline tpu_node_t tt_node(tpu_value_t* inputs, int32_t num_inputs,
                                 tpu_view_t* outputs, int32_t num_outputs,
                                 const tpu_attr_t* attrs, int32_t num_attrs) {
  tpu_node_t n;
  memset(&n, 0, sizeof(n));
  n.inputs = inputs;
  n.num_inputs = num_inputs;
  n.outputs = outputs;
  n.num_outputs = num_outputs;
  n.num_attrs = num_attrs;
  for (int32_t i = 0; i < num_attrs; ++i) n.attrs[i] = attrs[i];
  return n;
}

/* The code of a status, which it frees. */
static inline tpu_status_code_t tt_code(tpu_status_t s) {
  tpu_status_code_t code = tpu_status_code(s);
  tpu_status_free(s);
  return code;
}

/* Runs a kernel and returns its status code (freeing the status). */
static inline tpu_status_code_t tt_run(tpu_kernel_fn fn, const tpu_op_def_t* def,
                                        const tpu_node_t* node) {
  tpu_exec_ctx_t ctx = {0};
  tpu_status_t s = fn(def, node, &ctx);
  tpu_status_code_t code = tpu_status_code(s);
  tpu_status_free(s);
  return code;
}

#endif /* TPU_KERNEL_TEST_UTIL_H_ */
