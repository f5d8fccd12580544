/* kernel_test_util.h — what the kernel families' table-driven tests share:
 *   - host tensors: a tt_t is a calloc'd buffer and a view of it (valid on
 *     the host driver, whose device addresses are host pointers), laid out
 *     in the ways kernels must handle (tt_layout_t);
 *   - elements by logical (row-major) index, as doubles (view_walk.h's
 *     single-element accessors, so through tpu_convert);
 *   - deterministic fills from one LCG: integers from a seed (exact in every
 *     dtype, so GEMM paths and sums agree bit for bit) or reals from a shared
 *     stream, optionally with NaNs;
 *   - comparisons with per-dtype tolerances;
 *   - attribute, value and node builders, and status checks.
 * Every helper is static inline: each test file gets its own copy (and its
 * own random stream).
 */
#ifndef TPU_TESTS_KERNEL_TEST_UTIL_H_
#define TPU_TESTS_KERNEL_TEST_UTIL_H_

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernel.h"
#include "kernels/common/view_walk.h"
#include "test.h"
#include "tpu/ops.h"

/* ---- host tensors ----------------------------------------------------------------- */

/* How a test tensor's elements are laid out in memory. */
typedef enum tt_layout {
  TT_CONTIG = 0,
  TT_TRANSPOSED, /* the last two dims swapped (a .mT view) */
  TT_REVERSED,   /* every dim in reverse order (a .permute(n-1, ..., 0) view) */
  TT_GAPS,       /* every stride doubled (a [..., ::2] slice): dims still merge */
  TT_PADDED,     /* innermost stride 2 and each dim padded by one: no dims merge */
  TT_BROADCAST,  /* dim 0 expanded (stride 0) when it has more than one element */
  TT_CHANNELS_LAST, /* dim 1 innermost, then the last dims, dim 0 outermost
                     * (PyTorch's channels_last / channels_last_3d) */
} tt_layout_t;

typedef struct tt {
  tpu_view_t view;
  void* mem;
} tt_t;

/* A tensor of `sizes` in `layout`, zero-filled. */
static inline tt_t tt_make(tpu_dtype_t dtype, int32_t ndim, const int64_t* sizes,
                           tt_layout_t layout) {
  tt_t t;
  memset(&t, 0, sizeof(t));
  t.view.dtype = dtype;
  t.view.ndim = ndim;
  int32_t order[TPU_MAX_DIMS]; /* memory order, innermost first */
  for (int32_t k = 0; k < ndim; ++k) order[k] = layout == TT_REVERSED ? k : ndim - 1 - k;
  if (layout == TT_TRANSPOSED && ndim >= 2) order[0] = ndim - 2, order[1] = ndim - 1;
  if (layout == TT_CHANNELS_LAST && ndim >= 3) {
    order[0] = 1;
    for (int32_t k = 1; k < ndim - 1; ++k) order[k] = ndim - k;
    order[ndim - 1] = 0;
  }
  int64_t stride = layout == TT_PADDED ? 2 : 1, span = 1;
  for (int32_t k = 0; k < ndim; ++k) {
    int32_t d = order[k];
    t.view.sizes[d] = sizes[d];
    t.view.strides[d] = layout == TT_GAPS ? 2 * stride : stride;
    stride *= (sizes[d] > 1 ? sizes[d] : 1) + (layout == TT_PADDED ? 1 : 0);
  }
  if (layout == TT_BROADCAST && ndim > 0 && sizes[0] > 1) t.view.strides[0] = 0;
  /* Elements the view reaches (one for an empty tensor, so mem is valid). */
  for (int32_t d = 0; d < ndim && span > 0; ++d)
    span = sizes[d] == 0 ? 0 : span + (sizes[d] - 1) * t.view.strides[d];
  t.mem = calloc((size_t)(span > 0 ? span : 1), tpu_dtype_size(dtype));
  t.view.addr = (uint64_t)(uintptr_t)t.mem;
  return t;
}

/* A tensor shaped like `shape` (only its dtype, ndim, sizes are used). */
static inline tt_t tt_like(const tpu_view_t* shape, tt_layout_t layout) {
  return tt_make(shape->dtype, shape->ndim, shape->sizes, layout);
}

static inline void tt_free(tt_t* t) {
  free(t->mem);
  t->mem = NULL;
}

/* ---- elements ------------------------------------------------------------------------ */

/* Offset (in elements) of logical index k. */
static inline int64_t tt_offset(const tpu_view_t* v, int64_t k) {
  int64_t off = 0;
  for (int32_t d = v->ndim - 1; d >= 0; --d) {
    off += (k % v->sizes[d]) * v->strides[d];
    k /= v->sizes[d];
  }
  return off;
}

static inline char* tt_elem(const tpu_view_t* v, int64_t k) { return view_at(v, tt_offset(v, k)); }
static inline double tt_get(const tpu_view_t* v, int64_t k) {
  return view_get_f64(v, tt_offset(v, k));
}
static inline void tt_set(const tpu_view_t* v, int64_t k, double x) {
  view_set_f64(v, tt_offset(v, k), x);
}

/* ---- fills ------------------------------------------------------------------------- */

/* The next state of a 64-bit LCG (Knuth's MMIX constants). */
static inline uint64_t tt_lcg(uint64_t* state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return *state;
}

/* An integer in [lo, hi] from the LCG at `state`. */
static inline int64_t tt_rand_int(uint64_t* state, int64_t lo, int64_t hi) {
  return lo + (int64_t)((tt_lcg(state) >> 33) % (uint64_t)(hi - lo + 1));
}

/* The file's shared stream: doubles in [0, 1). */
static uint64_t tt_rng_state = 0x9e3779b97f4a7c15ull;
static inline double tt_rand(void) {
  return (double)(tt_lcg(&tt_rng_state) >> 11) / 9007199254740992.0;
}

/* Integers in [lo, hi] from their own stream, fixed by `seed`. */
static inline void tt_fill_ints(const tpu_view_t* v, uint64_t seed, int64_t lo, int64_t hi) {
  uint64_t s = seed;
  tt_lcg(&s);
  for (int64_t k = 0; k < tpu_view_numel(v); ++k) tt_set(v, k, (double)tt_rand_int(&s, lo, hi));
}

/* Values in [lo, hi) from the shared stream (integers: whole numbers; bool:
 * 0/1); each floating element is NaN with probability nan_rate. */
static inline void tt_fill(const tpu_view_t* v, double lo, double hi, double nan_rate) {
  for (int64_t k = 0; k < tpu_view_numel(v); ++k) {
    double x = lo + (hi - lo) * tt_rand();
    if (!tpu_dtype_is_floating(v->dtype)) x = floor(x);
    if (v->dtype == TPU_DTYPE_BOOL) x = tt_rand() < 0.5 ? 0.0 : 1.0;
    if (nan_rate > 0 && tt_rand() < nan_rate) x = NAN;
    tt_set(v, k, x);
  }
}

static inline void tt_fill_value(const tpu_view_t* v, double x) {
  for (int64_t k = 0; k < tpu_view_numel(v); ++k) tt_set(v, k, x);
}

/* ---- comparisons --------------------------------------------------------------------- */

/* Tolerance of a result stored in dtype (relative, see tt_rel_diff). */
static inline double tt_tol(tpu_dtype_t dtype) {
  switch (dtype) {
    case TPU_DTYPE_F64: return 1e-9;
    case TPU_DTYPE_F32: return 2e-5;
    case TPU_DTYPE_F16: return 2e-3;
    case TPU_DTYPE_BF16: return 1.6e-2;
    default: return 0.0;
  }
}

/* |got - want| / (1 + |want|): 0 when equal (NaN equals NaN, inf equals
 * inf), infinite when only one is NaN. */
static inline double tt_rel_diff(double got, double want) {
  if (got == want || (isnan(got) && isnan(want))) return 0.0;
  double d = fabs(got - want) / (1.0 + fabs(want));
  return d == d ? d : INFINITY;
}

/* The largest tt_rel_diff over the elements of two views of one shape. */
static inline double tt_max_rel_diff(const tpu_view_t* got, const tpu_view_t* want) {
  double worst = 0.0;
  for (int64_t k = 0; k < tpu_view_numel(want); ++k) {
    double d = tt_rel_diff(tt_get(got, k), tt_get(want, k));
    if (d > worst) worst = d;
  }
  return worst;
}

/* Compares every element of got with want (same shape) within tol; returns
 * the number of mismatches and reports the first few. */
static inline int tt_compare(const char* what, const tpu_view_t* got, const tpu_view_t* want,
                             double tol) {
  if (got->ndim != want->ndim) {
    tpu_test_fail(__FILE__, __LINE__, "%s: ndim %d vs %d", what, got->ndim, want->ndim);
    return 1;
  }
  int bad = 0;
  for (int64_t k = 0; k < tpu_view_numel(want); ++k) {
    double g = tt_get(got, k), w = tt_get(want, k);
    if (!(tt_rel_diff(g, w) <= tol) && bad++ < 3)
      tpu_test_fail(__FILE__, __LINE__, "%s: element %lld: got %.17g, want %.17g", what,
                    (long long)k, g, w);
  }
  return bad;
}

/* ---- attributes, values and nodes ------------------------------------------------------ */

/* Attributes (unnamed fields zero). */
static inline tpu_attr_t tt_none(void) { return (tpu_attr_t){.kind = TPU_ATTR_NONE}; }
static inline tpu_attr_t tt_int(int64_t v) { return (tpu_attr_t){.kind = TPU_ATTR_INT, .u.i = v}; }
static inline tpu_attr_t tt_bool(bool v) { return (tpu_attr_t){.kind = TPU_ATTR_BOOL, .u.i = v}; }
static inline tpu_attr_t tt_float(double v) {
  return (tpu_attr_t){.kind = TPU_ATTR_FLOAT, .u.f = v};
}
static inline tpu_attr_t tt_dtype(tpu_dtype_t d) {
  return (tpu_attr_t){.kind = TPU_ATTR_DTYPE, .u.dtype = d};
}
/* An int list of count (<= TPU_MAX_INTS) values. */
static inline tpu_attr_t tt_ints(int32_t count, const int64_t* v) {
  tpu_attr_t a = {.kind = TPU_ATTR_INTS, .count = count};
  for (int32_t i = 0; i < count; ++i) a.u.ints[i] = v[i];
  return a;
}

/* A view as an input value (NULL: None). */
static inline tpu_value_t tt_value(const tpu_view_t* v) {
  tpu_value_t x;
  memset(&x, 0, sizeof(x));
  if (v) {
    x.kind = TPU_VALUE_VIEW;
    x.u.view = *v;
  }
  return x;
}

/* The registered row called `name` (a failed check and NULL when missing). */
static inline const tpu_op_def_t* tt_def(const char* name) {
  const tpu_op_def_t* def = tpu_op_def(tpu_op_lookup(name));
  if (!def) tpu_test_fail(__FILE__, __LINE__, "op %s is not registered", name);
  return def;
}

static inline tpu_node_t tt_node(tpu_value_t* inputs, int32_t num_inputs, tpu_view_t* outputs,
                                 int32_t num_outputs, const tpu_attr_t* attrs, int32_t num_attrs) {
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

/* Runs a kernel (or reference) on a node. */
static inline tpu_status_t tt_run(tpu_kernel_fn fn, const tpu_op_def_t* def,
                                  const tpu_node_t* node) {
  tpu_exec_ctx_t ctx = {0};
  return fn(def, node, &ctx);
}

/* ---- statuses ------------------------------------------------------------------------ */

/* The code of a status, which it frees. */
static inline tpu_status_code_t tt_code(tpu_status_t s) {
  tpu_status_code_t code = tpu_status_code(s);
  tpu_status_free(s);
  return code;
}

/* Expects the status `expr` to carry `code` (reporting its message if not); frees it. */
#define CHECK_CODE(expr, code)                                                      \
  do {                                                                              \
    tpu_status_t s2_ = (expr);                                                      \
    if (tpu_status_code(s2_) != (code))                                             \
      tpu_test_fail(__FILE__, __LINE__, "%s: got %s (%s)", #expr,                   \
                    tpu_status_code_name(tpu_status_code(s2_)),                     \
                    s2_ ? tpu_status_message(s2_) : "ok");                          \
    tpu_status_free(s2_);                                                           \
  } while (0)

#endif /* TPU_TESTS_KERNEL_TEST_UTIL_H_ */
