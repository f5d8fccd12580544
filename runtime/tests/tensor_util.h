/* tensor_util.h — host tensors for kernel tests (test_matmul.c,
 * test_index.c, test_random.c).
 *
 * A tt_t is a malloc'd buffer plus a view of it (valid on the host driver,
 * whose device addresses are host pointers). Layouts make the view
 * non-contiguous in the ways kernels must handle: last two dims transposed in
 * memory, or every dim stepping over padding. Values are small integers so
 * that every dtype and every GEMM path holds them exactly. Everything is
 * static: each test file gets its own copy.
 */
#ifndef TPU_TESTS_TENSOR_UTIL_H_
#define TPU_TESTS_TENSOR_UTIL_H_

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernel.h"
#include "test.h"
#include "tpu/ops.h"

enum { TT_CONTIG = 0, TT_TRANSPOSED, TT_PADDED };

typedef struct tt {
  void* data;
  size_t bytes;
  tpu_view_t view;
} tt_t;

/* A tensor of `sizes` in `layout`, zero-filled. */
static inline tt_t tt_make(tpu_dtype_t dtype, int32_t ndim, const int64_t* sizes, int layout) {
  tt_t t = {0};
  t.view.dtype = dtype;
  t.view.ndim = ndim;
  int32_t order[TPU_MAX_DIMS] = {0}; /* memory order, outermost first */
  for (int32_t d = 0; d < ndim; ++d) order[d] = d;
  if (layout == TT_TRANSPOSED && ndim >= 2) order[ndim - 2] = ndim - 1, order[ndim - 1] = ndim - 2;
  int64_t step = layout == TT_PADDED ? 2 : 1, stride = step, span = 1;
  for (int32_t i = ndim - 1; i >= 0; --i) {
    int32_t d = order[i];
    t.view.sizes[d] = sizes[d];
    t.view.strides[d] = stride;
    stride *= (sizes[d] > 1 ? sizes[d] : 1) + (layout == TT_PADDED ? 1 : 0);
  }
  for (int32_t d = 0; d < ndim; ++d) span += (sizes[d] > 0 ? sizes[d] - 1 : 0) * t.view.strides[d];
  t.bytes = (size_t)span * tpu_dtype_size(dtype) + 16;
  t.data = calloc(1, t.bytes);
  t.view.addr = (uint64_t)(uintptr_t)t.data;
  return t;
}

static inline void tt_free(tt_t* t) {
  free(t->data);
  t->data = NULL;
}

static inline int64_t tt_numel(const tt_t* t) { return tpu_view_numel(&t->view); }

/* Byte address of logical element i (row-major). */
static inline char* tt_elem(const tt_t* t, int64_t i) {
  int64_t off = 0;
  for (int32_t d = t->view.ndim - 1; d >= 0; --d) {
    off += (i % t->view.sizes[d]) * t->view.strides[d];
    i /= t->view.sizes[d];
  }
  return (char*)tpu_view_ptr(&t->view) + off * (int64_t)tpu_dtype_size(t->view.dtype);
}

static inline double tt_get(const tt_t* t, int64_t i) {
  double x;
  tpu_convert(&x, TPU_DTYPE_F64, 1, tt_elem(t, i), t->view.dtype, 1, 1);
  return x;
}

static inline void tt_set(const tt_t* t, int64_t i, double x) {
  tpu_convert(tt_elem(t, i), t->view.dtype, 1, &x, TPU_DTYPE_F64, 1, 1);
}

/* Fills with integers in [lo, hi] from a fixed LCG stream. */
static inline void tt_fill(const tt_t* t, uint64_t seed, int lo, int hi) {
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t i = 0; i < tt_numel(t); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    tt_set(t, i, lo + (int)((s >> 33) % (uint64_t)(hi - lo + 1)));
  }
}

static inline void tt_fill_value(const tt_t* t, double x) {
  for (int64_t i = 0; i < tt_numel(t); ++i) tt_set(t, i, x);
}

/* Largest |a - b| / (1 + |b|) over all elements (NaN counts as infinite). */
static inline double tt_max_rel_diff(const tt_t* a, const tt_t* b) {
  double worst = 0.0;
  for (int64_t i = 0; i < tt_numel(b); ++i) {
    double x = tt_get(a, i), y = tt_get(b, i);
    double d = fabs(x - y) / (1.0 + fabs(y));
    if (!(d <= worst)) worst = (d == d) ? d : INFINITY;
  }
  return worst;
}

static inline tpu_value_t tt_value(const tt_t* t) {
  tpu_value_t v = {.kind = TPU_VALUE_VIEW};
  v.u.view = t->view;
  return v;
}

static inline tpu_attr_t tt_attr_int(int64_t x) {
  tpu_attr_t a = {.kind = TPU_ATTR_INT};
  a.u.i = x;
  return a;
}

static inline tpu_attr_t tt_attr_float(double x) {
  tpu_attr_t a = {.kind = TPU_ATTR_FLOAT};
  a.u.f = x;
  return a;
}

static inline tpu_attr_t tt_attr_bool(bool x) {
  tpu_attr_t a = {.kind = TPU_ATTR_BOOL};
  a.u.i = x;
  return a;
}

/* The registered row called `name` (a failed CHECK and NULL when missing). */
static inline const tpu_op_def_t* tt_def(const char* name) {
  const tpu_op_def_t* def = tpu_op_def(tpu_op_lookup(name));
  if (!def) tpu_test_fail(__FILE__, __LINE__, "op %s is not registered", name);
  return def;
}

/* Expects `s` to carry `code`; frees it. */
#define CHECK_CODE(expr, code)                                                      \
  do {                                                                              \
    tpu_status_t s2_ = (expr);                                                      \
    if (tpu_status_code(s2_) != (code))                                             \
      tpu_test_fail(__FILE__, __LINE__, "%s: got %s (%s)", #expr,                   \
                    tpu_status_code_name(tpu_status_code(s2_)),                     \
                    s2_ ? tpu_status_message(s2_) : "ok");                          \
    tpu_status_free(s2_);                                                           \
  } while (0)

#endif /* TPU_TESTS_TENSOR_UTIL_H_ */
