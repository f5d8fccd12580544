/* reduce.c — reductions over dims: sum, mean, prod, amax/amin, max/min
 * (values, or values and indices), argmax/argmin, all/any, var/std and
 * var_mean/std_mean, nansum, count_nonzero, vector norms of any order
 * (linalg_vector_norm, norm), logsumexp, aminmax and hash_tensor (xor of
 * the elements' float64 or int64 bit patterns, a uint64 result), with PyTorch CPU
 * semantics (dtype argument, keepdim,
 * empty dim list, integer sums in int64 with wrap-around, NaN propagation,
 * first index among equal extrema).
 *
 * How a node runs:
 *   1. Parse (shared with the reference): which input dims are reduced, the
 *      output shapes and dtypes.
 *   2. Normalise: the reduced dims stay in logical order (their flat index is
 *      the index argmax reports) and are collapsed where contiguous; the
 *      kept dims are reordered so the input is walked forwards and merged
 *      where input and outputs are contiguous. The innermost kept dim is the
 *      "tile axis": outputs are produced in tiles of up to TILE along it.
 *   3. Accumulate each tile in one of two orders: "row" (each output walks
 *      its reduced elements, gathered BUF at a time into a contiguous
 *      compute buffer) or "column" (when the tile axis is the faster one in
 *      memory: for each reduced index, the tile's inputs are gathered at
 *      once and every output takes one step). Values are converted on the
 *      way in (tpu_convert) to the compute domain: double for floating
 *      work (so half and float inputs accumulate in double), int64 for
 *      integer/bool sums and extrema, uint8 for all/any. (Column sums and
 *      means of float32 and half tensors take reduce_cols.c instead.)
 *   4. Tiles run on tpu_parallel_for. When there are few tiles and long
 *      reductions (full reductions of large tensors), each tile's reduced
 *      range is also split into chunks whose partial states are combined
 *      in order afterwards; the split depends only on the shape, so results
 *      do not depend on the thread count.
 *   5. A tile's states are finished (mean = sum / n, var = M2 / (n - c), ...)
 *      into a buffer and converted into the output view(s) in one call.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reduce/reduce.h"
#include "kernels/common/vmath.h"

#define TILE 256           /* outputs per tile */
#define BUF 1024           /* elements gathered at a time in row order */
#define SPLIT_MAX_TILES 16 /* split reductions when there are fewer tiles... */
#define SPLIT_MIN_N 65536  /* ...and at least this many reduced elements */
#define SPLIT_CHUNK 32768  /* reduced elements per chunk (at least) */
#define SPLIT_MAX_CHUNKS 64

/* ---- argument parsing (shared with the reference) ---------------------------- */

tpu_status_t tpu_reduce_parse(const tpu_op_def_t* def, const tpu_node_t* node,
                              reduce_args_t* a) {
  memset(a, 0, sizeof(*a));
  const reduce_impl_t* impl = (const reduce_impl_t*)def->impl;
  a->impl = impl;
  a->in = ku_input(def, node, "self");
  if (!a->in) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "expected a tensor for 'self'");
  const tpu_view_t* in = a->in;

  const tpu_attr_t* dim = ku_attr(def, node, "dim");
  bool all = true;
  if (dim && dim->kind == TPU_ATTR_INT) {
    int32_t d = 0;
    TPU_RETURN_IF_ERROR(ku_wrap_dim(dim->u.i, in->ndim, &d));
    if (in->ndim > 0) a->reduced[d] = true;
    all = false;
  } else if (dim && dim->kind == TPU_ATTR_INTS &&
             (dim->count > 0 || !impl->empty_dims_reduce_all)) {
    for (int32_t i = 0; i < dim->count; ++i) {
      int32_t d = 0;
      TPU_RETURN_IF_ERROR(ku_wrap_dim(dim->u.ints[i], in->ndim, &d));
      if (in->ndim == 0) continue;
      if (a->reduced[d])
        TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT,
                        "dim %d appears multiple times in the list of dims", d);
      a->reduced[d] = true;
    }
    all = false;
  }
  for (int32_t d = 0; d < in->ndim; ++d) a->reduced[d] = a->reduced[d] || all;
  a->keepdim = tpu_attr_bool(ku_attr(def, node, "keepdim"), false);
  a->correction = tpu_attr_float(ku_attr(def, node, "correction"), 1.0);
  const tpu_attr_t* ord = ku_attr(def, node, "ord");
  if (!ord) ord = ku_attr(def, node, "p");
  a->ord = tpu_attr_float(ord, 2.0);

  a->n = 1;
  tpu_view_t* s0 = &a->shape[0];
  for (int32_t d = 0; d < in->ndim; ++d) {
    if (a->reduced[d]) a->n *= in->sizes[d];
    if (!a->reduced[d] || a->keepdim) s0->sizes[s0->ndim++] = a->reduced[d] ? 1 : in->sizes[d];
  }

  /* Output dtypes. */
  const tpu_attr_t* dt = ku_attr(def, node, "dtype");
  tpu_dtype_t want = (dt && dt->kind == TPU_ATTR_DTYPE) ? dt->u.dtype : TPU_DTYPE_INVALID;
  bool floating = tpu_dtype_is_floating(in->dtype);
  tpu_dtype_t value = in->dtype, second = in->dtype;
  a->num_outputs = 1;
  switch (impl->out) {
    case ROUT_VALUE:
      if (impl->acc == RACC_SUM || impl->acc == RACC_PROD || impl->acc == RACC_NANSUM)
        value = want != TPU_DTYPE_INVALID ? want : (floating ? in->dtype : TPU_DTYPE_I64);
      else if (impl->acc == RACC_ALL || impl->acc == RACC_ANY)
        value = in->dtype == TPU_DTYPE_U8 ? TPU_DTYPE_U8 : TPU_DTYPE_BOOL;
      else if (impl->acc == RACC_NONZERO)
        value = TPU_DTYPE_I64;
      break;
    case ROUT_NORM:
      value = want != TPU_DTYPE_INVALID ? want : in->dtype;
      if (!floating || !tpu_dtype_is_floating(value))
        TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT,
                        "linalg.vector_norm: Expected a floating point or complex tensor as "
                        "input. Got %s",
                        tpu_dtype_name(in->dtype));
      if (a->n == 0 && (a->ord < 0.0 || isinf(a->ord)))
        TPU_KERNEL_FAIL(TPU_CODE_INDEX_ERROR,
                        "linalg.vector_norm cannot compute the %g norm on an empty tensor "
                        "because the operation does not have an identity",
                        a->ord);
      break;
    case ROUT_LSE:
      value = floating ? in->dtype : TPU_DTYPE_F32;
      break;
    case ROUT_MINMAX:
      a->num_outputs = 2;
      break;
    case ROUT_BITS:
      /* mode 0 (xor) is the only one, and the CPU has no uint16/32/64
       * kernel; PyTorch raises for those (the fallback) */
      if (tpu_dtype_is_wide_unsigned(in->dtype))
        TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "hash_tensor of %s", tpu_dtype_name(in->dtype));
      if (tpu_attr_int(ku_attr(def, node, "mode"), 0) != 0)
        TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "hash_tensor: mode %lld",
                        (long long)tpu_attr_int(ku_attr(def, node, "mode"), 0));
      value = TPU_DTYPE_U64;
      break;
    case ROUT_VALUE_INDEX:
      second = TPU_DTYPE_I64;
      a->num_outputs = 2;
      break;
    case ROUT_INDEX:
      if (in->dtype == TPU_DTYPE_BOOL)
        TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "%s(): does not support bool input",
                        impl->what);
      value = TPU_DTYPE_I64;
      break;
    case ROUT_MEAN:
      value = want != TPU_DTYPE_INVALID ? want : in->dtype;
      if (!tpu_dtype_is_floating(value))
        TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT,
                        "mean(): could not infer output dtype. Input dtype must be either a "
                        "floating point or complex dtype. Got: %s",
                        tpu_dtype_name(value));
      break;
    case ROUT_VAR_MEAN:
    case ROUT_STD_MEAN:
      a->num_outputs = 2;
      /* fall through */
    case ROUT_VAR:
    case ROUT_STD:
      if (!floating)
        TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT,
                        "std and var only support floating point and complex dtypes");
      break;
  }
  if ((impl->acc == RACC_MAX || impl->acc == RACC_MIN || impl->acc == RACC_MINMAX) && a->n == 0) {
    if (all)
      TPU_KERNEL_FAIL(TPU_CODE_INDEX_ERROR,
                      "%s(): Expected reduction dim to be specified for input.numel() == 0.",
                      impl->what);
    int32_t d = 0;
    while (!(a->reduced[d] && in->sizes[d] == 0)) d++;
    TPU_KERNEL_FAIL(TPU_CODE_INDEX_ERROR, "%s(): Expected reduction dim %d to have non-zero size.",
                    impl->what, d);
  }
  s0->dtype = value;
  tpu_view_set_contiguous(s0);
  a->shape[1] = *s0;
  a->shape[1].dtype = second;
  return TPU_OK;
}

tpu_compute_type_t tpu_reduce_domain(const reduce_args_t* a, tpu_dtype_t out_dtype) {
  switch (a->impl->acc) {
    case RACC_SUM:
    case RACC_PROD:
    case RACC_NANSUM:
      return (a->impl->out == ROUT_MEAN || tpu_dtype_is_floating(out_dtype)) ? TPU_COMPUTE_F64
                                                                            : TPU_COMPUTE_I64;
    case RACC_MAX:
    case RACC_MIN:
    case RACC_MINMAX:
      return tpu_dtype_is_floating(a->in->dtype) ? TPU_COMPUTE_F64 : TPU_COMPUTE_I64;
    case RACC_ALL:
    case RACC_ANY:
    case RACC_NONZERO:
      return TPU_COMPUTE_B8;
    case RACC_XOR: /* floats upcast to float64, the rest to int64 */
      return tpu_dtype_is_floating(a->in->dtype) ? TPU_COMPUTE_F64 : TPU_COMPUTE_I64;
    default:
      return TPU_COMPUTE_F64;
  }
}

tpu_status_t tpu_reduce_check_outputs(const reduce_args_t* a, const tpu_node_t* node) {
  if (node->num_outputs < a->num_outputs)
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "expected %d outputs, got %d", a->num_outputs,
                    node->num_outputs);
  for (int32_t i = 0; i < a->num_outputs; ++i) {
    const tpu_view_t* o = &node->outputs[i];
    if (!views_same_shape(o, &a->shape[i]))
      TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output %d has the wrong shape", i);
    bool needs_float = a->impl->out >= ROUT_MEAN && a->impl->out != ROUT_MINMAX &&
                       a->impl->out != ROUT_BITS &&
                       !(i == 1 && a->impl->out == ROUT_VALUE_INDEX);
    if (needs_float && !tpu_dtype_is_floating(o->dtype))
      TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output %d must be floating, got %s", i,
                      tpu_dtype_name(o->dtype));
  }
  return TPU_OK;
}

static tpu_status_t reduce_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_view_t* out_views) {
  if (tpu_reduce_is_complex(node)) return tpu_reduce_cx_infer(def, node, out_views);
  reduce_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_reduce_parse(def, node, &a)));
  for (int32_t i = 0; i < a.num_outputs; ++i) out_views[i] = a.shape[i];
  return TPU_OK;
}

/* Argument errors fall back (see ku_unimplemented), so PyTorch raises its own. */
static tpu_status_t reduce_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  if (tpu_reduce_is_complex(node)) return tpu_reduce_cx_check(def, node);
  reduce_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_reduce_parse(def, node, &a)));
  /* aminmax's out= must have self's dtype (PyTorch raises; the CPU fallback does). */
  if (a.impl->out == ROUT_MINMAX)
    for (int32_t i = 0; i < node->num_outputs && i < 2; ++i)
      if (node->outputs[i].addr > 1 && node->outputs[i].dtype != a.in->dtype)
        return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "aminmax: out= of another dtype");
  return TPU_OK;
}

/* Row-local (fusion): a reduction over dims that all lie after its first k
 * dims keeps those k dims, keepdim or not. */
static int32_t reduce_rows(const tpu_op_def_t* def, const tpu_node_t* node, uint32_t* out_mask) {
  reduce_args_t a;
  *out_mask = 1u;
  if (!ku_ok(tpu_reduce_parse(def, node, &a))) return 0;
  int32_t k = 0;
  while (k < a.in->ndim && !a.reduced[k]) k++;
  return k < a.in->ndim ? k : 0;
}

/* ---- accumulators ------------------------------------------------------------- */

/* One output's running state. f: float sum/product/extremum/mean, i: integer
 * or bool sum/product/extremum, idx: index of the extremum (-1: none yet),
 * n and m2: count and sum of squared deviations (Welford). */
typedef struct rstate {
  double f, m2, hi;
  int64_t i, idx, n, ihi;
} rstate_t;

/* Steps take one value x at reduced index k. Integer sums and products wrap
 * (computed unsigned, as PyTorch's int64 arithmetic does). */
static inline void step_sum_f(rstate_t* s, double x, int64_t k) { s->f += x; }
static inline void step_sum_i(rstate_t* s, int64_t x, int64_t k) {
  s->i = (int64_t)((uint64_t)s->i + (uint64_t)x);
}
static inline void step_prod_f(rstate_t* s, double x, int64_t k) { s->f *= x; }
static inline void step_prod_i(rstate_t* s, int64_t x, int64_t k) {
  s->i = (int64_t)((uint64_t)s->i * (uint64_t)x);
}
/* A NaN extremum sticks; a later NaN or a strictly better value replaces. */
static inline void step_max_f(rstate_t* s, double x, int64_t k) {
  if (s->idx < 0 || (s->f == s->f && (x != x || x > s->f))) {
    s->f = x;
    s->idx = k;
  }
}
static inline void step_min_f(rstate_t* s, double x, int64_t k) {
  if (s->idx < 0 || (s->f == s->f && (x != x || x < s->f))) {
    s->f = x;
    s->idx = k;
  }
}
static inline void step_max_i(rstate_t* s, int64_t x, int64_t k) {
  if (s->idx < 0 || x > s->i) {
    s->i = x;
    s->idx = k;
  }
}
static inline void step_min_i(rstate_t* s, int64_t x, int64_t k) {
  if (s->idx < 0 || x < s->i) {
    s->i = x;
    s->idx = k;
  }
}
static inline void step_all_b(rstate_t* s, uint8_t x, int64_t k) { s->i &= x; }
static inline void step_any_b(rstate_t* s, uint8_t x, int64_t k) { s->i |= x; }
static inline void step_mom_f(rstate_t* s, double x, int64_t k) {
  s->n++;
  double d = x - s->f;
  s->f += d / (double)s->n;
  s->m2 += d * (x - s->f);
}

static inline void step_nansum_f(rstate_t* s, double x, int64_t k) {
  if (x == x) s->f += x;
}
static inline void step_nz_b(rstate_t* s, uint8_t x, int64_t k) { s->i += x; }
/* hash_tensor: the bits of the float64 or int64 value, xor-ed into i. */
static inline void step_xor_f(rstate_t* s, double x, int64_t k) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof(bits));
  s->i = (int64_t)((uint64_t)s->i ^ bits);
}
static inline void step_xor_i(rstate_t* s, int64_t x, int64_t k) {
  s->i = (int64_t)((uint64_t)s->i ^ (uint64_t)x);
}
/* Norms accumulate in f; normp's order sits in m2 (set by the kernel). */
static inline void step_norm0_f(rstate_t* s, double x, int64_t k) { s->f += x != 0.0; }
static inline void step_norm1_f(rstate_t* s, double x, int64_t k) { s->f += fabs(x); }
static inline void step_norm2_f(rstate_t* s, double x, int64_t k) { s->f += x * x; }
static inline void step_normp_f(rstate_t* s, double x, int64_t k) { s->f += pow(fabs(x), s->m2); }
/* Largest / smallest |x|; a NaN sticks. */
static inline void step_norminf_f(rstate_t* s, double x, int64_t k) {
  if (s->f == s->f && !(fabs(x) <= s->f)) s->f = fabs(x);
}
static inline void step_normninf_f(rstate_t* s, double x, int64_t k) {
  if (s->f == s->f && !(fabs(x) >= s->f)) s->f = fabs(x);
}
/* aminmax: min in f / i, max in hi / ihi, n counts (a NaN sticks in both). */
static inline void step_minmax_f(rstate_t* s, double x, int64_t k) {
  if (s->n++ == 0) {
    s->f = s->hi = x;
    return;
  }
  if (s->f == s->f && (x != x || x < s->f)) s->f = x;
  if (s->hi == s->hi && (x != x || x > s->hi)) s->hi = x;
}
static inline void step_minmax_i(rstate_t* s, int64_t x, int64_t k) {
  if (s->n++ == 0) {
    s->i = s->ihi = x;
    return;
  }
  if (x < s->i) s->i = x;
  if (x > s->ihi) s->ihi = x;
}
/* logsumexp: f is a finite shift (the maximum, 0 when that is infinite or
 * NaN), m2 the sum of exp(x - f), n the count. A zero, infinite or NaN sum
 * does not rescale. */
static inline double lse_scale(double v, double d) {
  return (v == 0.0 || !isfinite(v)) ? v : v * exp(d);
}
static inline void comb_lse_f(rstate_t* a, const rstate_t* b) {
  if (b->n == 0) return;
  if (a->n == 0) {
    *a = *b;
    return;
  }
  double nm = a->f > b->f ? a->f : b->f;
  a->m2 = lse_scale(a->m2, a->f - nm) + lse_scale(b->m2, b->f - nm);
  a->f = nm;
  a->n += b->n;
}
static inline void step_lse_f(rstate_t* s, double x, int64_t k) {
  double shift = isfinite(x) ? x : 0.0;
  rstate_t b = {.f = shift, .m2 = exp(x - shift), .n = 1};
  comb_lse_f(s, &b);
}
static inline void step_lse_fast(rstate_t* s, double x, int64_t k) { step_lse_f(s, x, k); }
static inline void comb_lse_fast(rstate_t* a, const rstate_t* b) { comb_lse_f(a, b); }

/* Combines take the state of a later chunk b into a. */
static inline void comb_sum_f(rstate_t* a, const rstate_t* b) { a->f += b->f; }
static inline void comb_xor_f(rstate_t* a, const rstate_t* b) { step_xor_i(a, b->i, 0); }
static inline void comb_xor_i(rstate_t* a, const rstate_t* b) { step_xor_i(a, b->i, 0); }
static inline void comb_sum_i(rstate_t* a, const rstate_t* b) { step_sum_i(a, b->i, 0); }
static inline void comb_prod_f(rstate_t* a, const rstate_t* b) { a->f *= b->f; }
static inline void comb_prod_i(rstate_t* a, const rstate_t* b) { step_prod_i(a, b->i, 0); }
static inline void comb_max_f(rstate_t* a, const rstate_t* b) {
  if (b->idx >= 0) step_max_f(a, b->f, b->idx);
}
static inline void comb_min_f(rstate_t* a, const rstate_t* b) {
  if (b->idx >= 0) step_min_f(a, b->f, b->idx);
}
static inline void comb_max_i(rstate_t* a, const rstate_t* b) {
  if (b->idx >= 0) step_max_i(a, b->i, b->idx);
}
static inline void comb_min_i(rstate_t* a, const rstate_t* b) {
  if (b->idx >= 0) step_min_i(a, b->i, b->idx);
}
static inline void comb_all_b(rstate_t* a, const rstate_t* b) { a->i &= b->i; }
static inline void comb_any_b(rstate_t* a, const rstate_t* b) { a->i |= b->i; }
static inline void comb_nansum_f(rstate_t* a, const rstate_t* b) { a->f += b->f; }
static inline void comb_nz_b(rstate_t* a, const rstate_t* b) { a->i += b->i; }
static inline void comb_norm0_f(rstate_t* a, const rstate_t* b) { a->f += b->f; }
static inline void comb_norm1_f(rstate_t* a, const rstate_t* b) { a->f += b->f; }
static inline void comb_norm2_f(rstate_t* a, const rstate_t* b) { a->f += b->f; }
static inline void comb_normp_f(rstate_t* a, const rstate_t* b) { a->f += b->f; }
static inline void comb_norminf_f(rstate_t* a, const rstate_t* b) { step_norminf_f(a, b->f, 0); }
static inline void comb_normninf_f(rstate_t* a, const rstate_t* b) {
  step_normninf_f(a, b->f, 0);
}
static inline void comb_minmax_f(rstate_t* a, const rstate_t* b) {
  if (b->n == 0) return;
  if (a->n == 0) {
    *a = *b;
    return;
  }
  step_minmax_f(a, b->f, 0);
  step_minmax_f(a, b->hi, 0);
}
static inline void comb_minmax_i(rstate_t* a, const rstate_t* b) {
  if (b->n == 0) return;
  if (a->n == 0) {
    *a = *b;
    return;
  }
  step_minmax_i(a, b->i, 0);
  step_minmax_i(a, b->ihi, 0);
}
static inline void comb_mom_f(rstate_t* a, const rstate_t* b) { /* Chan et al. */
  if (b->n == 0) return;
  if (a->n == 0) {
    *a = *b;
    return;
  }
  double na = (double)a->n, nb = (double)b->n, n = na + nb, d = b->f - a->f;
  a->f += d * nb / n;
  a->m2 += b->m2 + d * d * na * nb / n;
  a->n += b->n;
}

/* X(name, element type of the compute buffer, compute type, initial f, i,
 * idx, run loop: GENERIC (steps) or CUSTOM (written below)) */
#define REDUCE_ACCS(X)                          \
  X(sum_f, double, F64, 0.0, 0, 0, CUSTOM)      \
  X(sum_i, int64_t, I64, 0.0, 0, 0, GENERIC)    \
  X(prod_f, double, F64, 1.0, 1, 0, GENERIC)    \
  X(prod_i, int64_t, I64, 1.0, 1, 0, GENERIC)   \
  X(max_f, double, F64, 0.0, 0, -1, GENERIC)    \
  X(max_i, int64_t, I64, 0.0, 0, -1, GENERIC)   \
  X(min_f, double, F64, 0.0, 0, -1, GENERIC)    \
  X(min_i, int64_t, I64, 0.0, 0, -1, GENERIC)   \
  X(all_b, uint8_t, B8, 0.0, 1, 0, GENERIC)     \
  X(any_b, uint8_t, B8, 0.0, 0, 0, GENERIC)     \
  X(mom_f, double, F64, 0.0, 0, 0, CUSTOM)       \
  X(nansum_f, double, F64, 0.0, 0, 0, GENERIC)  \
  X(nz_b, uint8_t, B8, 0.0, 0, 0, GENERIC)      \
  X(norm0_f, double, F64, 0.0, 0, 0, GENERIC)   \
  X(norm1_f, double, F64, 0.0, 0, 0, CUSTOM)    \
  X(norm2_f, double, F64, 0.0, 0, 0, CUSTOM)    \
  X(normp_f, double, F64, 0.0, 0, 0, GENERIC)   \
  X(norminf_f, double, F64, 0.0, 0, 0, GENERIC) \
  X(normninf_f, double, F64, INFINITY, 0, 0, GENERIC) \
  X(minmax_f, double, F64, 0.0, 0, 0, GENERIC)  \
  X(minmax_i, int64_t, I64, 0.0, 0, 0, GENERIC) \
  X(lse_f, double, F64, 0.0, 0, 0, CUSTOM)      \
  X(lse_fast, double, F64, 0.0, 0, 0, CUSTOM)    \
  X(xor_f, double, F64, 0.0, 0, 0, GENERIC)     \
  X(xor_i, int64_t, I64, 0.0, 0, 0, GENERIC)

/* run: one state over n consecutive values (reduced indices k, k+1, ...);
 * col: n states, one value each, all at reduced index k. */
#define RUN_GENERIC(name, T)                                                     \
  static void run_##name(rstate_t* s, const void* xv, int64_t n, int64_t k) {    \
    const T* x = (const T*)xv;                                                   \
    rstate_t st = *s;                                                            \
    for (int64_t j = 0; j < n; ++j) step_##name(&st, x[j], k + j);               \
    *s = st;                                                                     \
  }
#define RUN_CUSTOM(name, T)
#define DEFINE_LOOPS(name, T, CT, F0, I0, IDX0, RUN)                             \
  RUN_##RUN(name, T)                                                             \
  static void col_##name(rstate_t* s, const void* xv, int64_t n, int64_t k) {    \
    const T* x = (const T*)xv;                                                   \
    for (int64_t j = 0; j < n; ++j) step_##name(&s[j], x[j], k);                 \
  }
REDUCE_ACCS(DEFINE_LOOPS)
#undef DEFINE_LOOPS
#undef RUN_GENERIC
#undef RUN_CUSTOM

/* A float sum of a run: four partial sums, so the adds do not wait on each
 * other (the order is fixed, so results stay deterministic). */
static void run_sum_f(rstate_t* s, const void* xv, int64_t n, int64_t k) {
  const double* x = (const double*)xv;
  double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    a0 += x[j];
    a1 += x[j + 1];
    a2 += x[j + 2];
    a3 += x[j + 3];
  }
  for (; j < n; ++j) a0 += x[j];
  s->f += (a0 + a1) + (a2 + a3);
}

/* |x| and x^2 sums of a run, four partial sums as run_sum_f. */
#define RUN_SUM4(name, E)                                                       \
  static void run_##name(rstate_t* s, const void* xv, int64_t n, int64_t k) {   \
    const double* x = (const double*)xv;                                        \
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;                              \
    int64_t j = 0;                                                              \
    for (; j + 4 <= n; j += 4) {                                                \
      a0 += E(x[j]);                                                            \
      a1 += E(x[j + 1]);                                                        \
      a2 += E(x[j + 2]);                                                        \
      a3 += E(x[j + 3]);                                                        \
    }                                                                           \
    for (; j < n; ++j) a0 += E(x[j]);                                           \
    s->f += (a0 + a1) + (a2 + a3);                                              \
  }
#define SQ_(v) ((v) * (v))
RUN_SUM4(norm1_f, fabs)
RUN_SUM4(norm2_f, SQ_)
#undef SQ_
#undef RUN_SUM4

/* logsumexp of a run: its maximum, then exp(x - max) summed, merged into the
 * state. lse_fast (float32 and half outputs) takes exp in float32 with
 * vm_expf (SIMD). */
static void lse_run(rstate_t* s, const double* x, int64_t n, bool fast) {
  if (n == 0) return;
  double mx[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                  -INFINITY, -INFINITY, -INFINITY, -INFINITY};
  int nan = 0;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int q = 0; q < 8; ++q) {
      nan |= x[j + q] != x[j + q];
      mx[q] = x[j + q] > mx[q] ? x[j + q] : mx[q];
    }
  double m = -INFINITY;
  for (int q = 0; q < 8; ++q) m = mx[q] > m ? mx[q] : m;
  for (; j < n; ++j) {
    nan |= x[j] != x[j];
    m = x[j] > m ? x[j] : m;
  }
  double shift = isfinite(m) ? m : 0.0, sum = 0.0;
  if (fast && !nan && isfinite(m)) {
    /* d <= 0; below VM_EXP_LO the term is clamped to e^VM_EXP_LO, which is
     * far below float32 resolution of the sum (>= 1). */
    float d[BUF];
    for (j = 0; j < n; ++j) {
      float v = (float)(x[j] - shift);
      d[j] = vm_expf(v > VM_EXP_LO ? v : VM_EXP_LO);
    }
    sum = vm_sum(d, n);
  } else {
    for (j = 0; j < n; ++j) sum += exp(x[j] - shift);
  }
  rstate_t b = {.f = shift, .m2 = sum, .n = n};
  comb_lse_f(s, &b);
}
static void run_lse_f(rstate_t* s, const void* xv, int64_t n, int64_t k) {
  lse_run(s, (const double*)xv, n, false);
}
static void run_lse_fast(rstate_t* s, const void* xv, int64_t n, int64_t k) {
  /* Runs are at most BUF long (row order); longer ones go in pieces. */
  for (int64_t j = 0; j < n; j += BUF)
    lse_run(s, (const double*)xv + j, n - j < BUF ? n - j : BUF, true);
}

/* Moments of a run: two passes over the buffer (no division per element),
 * then merged into the state. */
static void run_mom_f(rstate_t* s, const void* xv, int64_t n, int64_t k) {
  const double* x = (const double*)xv;
  if (n == 0) return;
  double sum = 0.0, m2 = 0.0;
  for (int64_t j = 0; j < n; ++j) sum += x[j];
  double mean = sum / (double)n;
  for (int64_t j = 0; j < n; ++j) m2 += (x[j] - mean) * (x[j] - mean);
  rstate_t b = {.f = mean, .m2 = m2, .n = n};
  comb_mom_f(s, &b);
}

typedef struct acc_ops {
  void (*run)(rstate_t* s, const void* x, int64_t n, int64_t k);
  void (*col)(rstate_t* s, const void* x, int64_t n, int64_t k);
  void (*comb)(rstate_t* a, const rstate_t* b);
  rstate_t init;
} acc_ops_t;

enum {
#define X_(name, T, CT, F0, I0, IDX0, RUN) ACC_##name,
  REDUCE_ACCS(X_)
#undef X_
};

static const acc_ops_t g_accs[] = {
#define X_(name, T, CT, F0, I0, IDX0, RUN) \
  {run_##name, col_##name, comb_##name, {.f = F0, .i = I0, .idx = IDX0}},
    REDUCE_ACCS(X_)
#undef X_
};

/* The accumulator for (acc kind, domain); domains are those tpu_reduce_domain
 * gives. Norms choose by order, logsumexp by output precision. */
static const acc_ops_t* acc_for(const reduce_args_t* a, tpu_compute_type_t dom,
                                tpu_dtype_t out_dtype) {
  reduce_acc_t acc = a->impl->acc;
  if (acc == RACC_NORM) {
    double o = a->ord;
    return &g_accs[o == 0.0        ? ACC_norm0_f
                   : o == 1.0      ? ACC_norm1_f
                   : o == 2.0      ? ACC_norm2_f
                   : o == INFINITY ? ACC_norminf_f
                   : o == -INFINITY ? ACC_normninf_f
                                   : ACC_normp_f];
  }
  if (acc == RACC_LSE)
    return &g_accs[out_dtype == TPU_DTYPE_F64 ? ACC_lse_f : ACC_lse_fast];
  static const signed char map[RACC_COUNT][TPU_COMPUTE_COUNT] = {
      [RACC_SUM] = {[TPU_COMPUTE_I64] = ACC_sum_i, [TPU_COMPUTE_F64] = ACC_sum_f},
      [RACC_PROD] = {[TPU_COMPUTE_I64] = ACC_prod_i, [TPU_COMPUTE_F64] = ACC_prod_f},
      [RACC_MAX] = {[TPU_COMPUTE_I64] = ACC_max_i, [TPU_COMPUTE_F64] = ACC_max_f},
      [RACC_MIN] = {[TPU_COMPUTE_I64] = ACC_min_i, [TPU_COMPUTE_F64] = ACC_min_f},
      [RACC_ALL] = {[TPU_COMPUTE_B8] = ACC_all_b},
      [RACC_ANY] = {[TPU_COMPUTE_B8] = ACC_any_b},
      [RACC_MOMENTS] = {[TPU_COMPUTE_F64] = ACC_mom_f},
      [RACC_NANSUM] = {[TPU_COMPUTE_I64] = ACC_sum_i, [TPU_COMPUTE_F64] = ACC_nansum_f},
      [RACC_NONZERO] = {[TPU_COMPUTE_B8] = ACC_nz_b},
      [RACC_MINMAX] = {[TPU_COMPUTE_I64] = ACC_minmax_i, [TPU_COMPUTE_F64] = ACC_minmax_f},
      [RACC_XOR] = {[TPU_COMPUTE_I64] = ACC_xor_i, [TPU_COMPUTE_F64] = ACC_xor_f},
  };
  return &g_accs[map[acc][dom]];
}

/* ---- the optimised kernel ----------------------------------------------------- */

typedef struct plan {
  const acc_ops_t* ops;
  reduce_out_t out;
  tpu_compute_type_t domain;
  tpu_dtype_t dom_dtype;   /* storage dtype of the compute buffer */
  const char* in;
  tpu_dtype_t in_dtype;
  char* outp[2];
  tpu_dtype_t out_dtype[2];
  int32_t num_outputs;
  walk_t kept;             /* kept dims; views: input, output 0, output 1 */
  int32_t outer_dims;      /* kept dims above the tile axis */
  int64_t axis_stride[3];  /* strides along the tile axis, per view */
  int64_t inner;           /* size of the tile axis */
  int64_t tile, tiles_per_row, tiles;
  walk_t red;              /* reduced dims of the input, logical order */
  int64_t n;               /* reduced elements per output */
  bool column;
  int64_t chunks, chunk_len;
  rstate_t* partial;       /* [tiles][chunks][tile] when chunks > 1 */
  double correction, ord;
} plan_t;

/* Offsets (input, output 0, output 1) of tile t's first output, and its size. */
static int64_t tile_at(const plan_t* p, int64_t t, int64_t* offs) {
  int64_t row = t / p->tiles_per_row, j0 = (t % p->tiles_per_row) * p->tile;
  walk_offsets(&p->kept, p->outer_dims, row, offs);
  for (int v = 0; v < 3; ++v) offs[v] += j0 * p->axis_stride[v];
  return p->inner - j0 < p->tile ? p->inner - j0 : p->tile;
}

/* Column order: one tile's inputs at each reduced element of a run. */
typedef struct column {
  const plan_t* p;
  const char* base; /* the tile's first input */
  int64_t cnt;
  rstate_t* st;
  void* buf;        /* TILE values of the compute domain */
} column_t;

static void column_run(void* arg, const int64_t* offs, const int64_t* steps, int64_t n,
                       int64_t first) {
  const column_t* c = (const column_t*)arg;
  const plan_t* p = c->p;
  int64_t isz = (int64_t)tpu_dtype_size(p->in_dtype);
  for (int64_t e = 0; e < n; ++e) {
    tpu_convert(c->buf, p->dom_dtype, 1, c->base + (offs[0] + e * steps[0]) * isz, p->in_dtype,
                p->axis_stride[0], c->cnt);
    p->ops->col(c->st, c->buf, c->cnt, first + e);
  }
}

/* Accumulates reduced indices [k0, k1) into the tile's cnt states. */
static void accumulate(const plan_t* p, const int64_t* offs, int64_t cnt, int64_t k0, int64_t k1,
                       rstate_t* st) {
  union {
    double f[BUF];
    int64_t i[BUF];
    uint8_t b[BUF];
  } buf;
  int64_t isz = (int64_t)tpu_dtype_size(p->in_dtype);
  const char* base = p->in + offs[0] * isz;
  if (p->column) {
    column_t c = {p, base, cnt, st, &buf};
    walk_range(&p->red, k0, k1, column_run, &c);
    return;
  }
  for (int64_t j = 0; j < cnt; ++j) {
    const char* b = base + j * p->axis_stride[0] * isz;
    for (int64_t k = k0; k < k1; k += BUF) {
      int64_t len = k1 - k < BUF ? k1 - k : BUF;
      walk_gather(&buf, p->dom_dtype, b, p->in_dtype, &p->red, k, len);
      p->ops->run(&st[j], &buf, len, k);
    }
  }
}

/* Finishes cnt states and writes them to the outputs at offs[1], offs[2]. */
static void finish(const plan_t* p, const int64_t* offs, int64_t cnt, const rstate_t* st) {
  union {
    double f[TILE];
    int64_t i[TILE];
  } v;
  union {
    double f[TILE];
    int64_t i[TILE];
  } second;
  int64_t idx[TILE];
  const void* src[2] = {&v, idx};
  tpu_dtype_t type[2] = {TPU_DTYPE_F64, TPU_DTYPE_I64};
  bool fdom = p->domain == TPU_COMPUTE_F64;
  double n = (double)p->n;
  for (int64_t j = 0; j < cnt; ++j) {
    idx[j] = st[j].idx;
    if (p->out <= ROUT_INDEX) {
      if (fdom)
        v.f[j] = st[j].f;
      else
        v.i[j] = st[j].i;
    } else if (p->out == ROUT_MEAN) {
      v.f[j] = st[j].f / n;
    } else if (p->out == ROUT_NORM) {
      double o = p->ord, f = st[j].f;
      v.f[j] = (o == 0.0 || o == 1.0 || isinf(o)) ? f : o == 2.0 ? sqrt(f) : pow(f, 1.0 / o);
    } else if (p->out == ROUT_LSE) {
      v.f[j] = st[j].n > 0 ? st[j].f + log(st[j].m2) : -INFINITY;
    } else if (p->out == ROUT_BITS) {
      v.i[j] = st[j].i;
    } else if (p->out == ROUT_MINMAX) {
      if (fdom)
        v.f[j] = st[j].f, second.f[j] = st[j].hi;
      else
        v.i[j] = st[j].i, second.i[j] = st[j].ihi;
    } else {
      double div = n - p->correction > 0.0 ? n - p->correction : 0.0;
      double var = st[j].m2 / div;
      v.f[j] = (p->out == ROUT_STD || p->out == ROUT_STD_MEAN) ? sqrt(var) : var;
      second.f[j] = st[j].n > 0 ? st[j].f : NAN;
    }
  }
  if (((p->out <= ROUT_INDEX || p->out == ROUT_MINMAX) && !fdom) || p->out == ROUT_BITS)
    type[0] = TPU_DTYPE_I64; /* ROUT_BITS: int64 -> uint64 keeps the bits */
  if (p->out == ROUT_INDEX) src[0] = idx, type[0] = TPU_DTYPE_I64;
  if (p->out == ROUT_VAR_MEAN || p->out == ROUT_STD_MEAN) src[1] = &second, type[1] = TPU_DTYPE_F64;
  if (p->out == ROUT_MINMAX) src[1] = &second, type[1] = type[0];
  for (int32_t o = 0; o < p->num_outputs; ++o) {
    int64_t osz = (int64_t)tpu_dtype_size(p->out_dtype[o]);
    tpu_convert(p->outp[o] + offs[1 + o] * osz, p->out_dtype[o], p->axis_stride[1 + o], src[o],
                type[o], 1, cnt);
  }
}

/* Work items are (tile, chunk) pairs, chunk fastest. */
static void reduce_work(void* arg, int64_t begin, int64_t end) {
  const plan_t* p = (const plan_t*)arg;
  rstate_t local[TILE];
  int64_t offs[3];
  for (int64_t item = begin; item < end; ++item) {
    int64_t t = item / p->chunks, c = item % p->chunks;
    int64_t cnt = tile_at(p, t, offs);
    int64_t k0 = c * p->chunk_len, k1 = k0 + p->chunk_len < p->n ? k0 + p->chunk_len : p->n;
    rstate_t* st = p->chunks > 1 ? p->partial + item * p->tile : local;
    for (int64_t j = 0; j < cnt; ++j) st[j] = p->ops->init;
    if (p->ops == &g_accs[ACC_normp_f])
      for (int64_t j = 0; j < cnt; ++j) st[j].m2 = p->ord;
    accumulate(p, offs, cnt, k0, k1, st);
    if (p->chunks == 1) finish(p, offs, cnt, st);
  }
}

/* Combines each tile's chunk states in chunk order, then finishes it. */
static void combine_work(void* arg, int64_t begin, int64_t end) {
  const plan_t* p = (const plan_t*)arg;
  int64_t offs[3];
  for (int64_t t = begin; t < end; ++t) {
    int64_t cnt = tile_at(p, t, offs);
    rstate_t* st = p->partial + t * p->chunks * p->tile;
    for (int64_t c = 1; c < p->chunks; ++c)
      for (int64_t j = 0; j < cnt; ++j) p->ops->comb(&st[j], &st[c * p->tile + j]);
    finish(p, offs, cnt, st);
  }
}

static tpu_status_t reduce_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx) {
  if (tpu_reduce_is_complex(node)) return tpu_reduce_cx_kernel(def, node, ctx);
  reduce_args_t a;
  TPU_RETURN_IF_ERROR(tpu_reduce_parse(def, node, &a));
  TPU_RETURN_IF_ERROR(tpu_reduce_check_outputs(&a, node));
  if (tpu_view_numel(&a.shape[0]) == 0) return TPU_OK;
  if (tpu_reduce_cols_applies(&a, &node->outputs[0])) return tpu_reduce_cols(&a, &node->outputs[0]);

  plan_t p;
  memset(&p, 0, sizeof(p));
  const tpu_view_t* in = a.in;
  p.out = a.impl->out;
  p.domain = tpu_reduce_domain(&a, node->outputs[0].dtype);
  p.dom_dtype = tpu_compute_storage_dtype(p.domain);
  p.ops = acc_for(&a, p.domain, node->outputs[0].dtype);
  p.in = (const char*)tpu_view_ptr(in);
  p.in_dtype = in->dtype;
  p.num_outputs = a.num_outputs;
  for (int32_t o = 0; o < a.num_outputs; ++o) {
    p.outp[o] = (char*)tpu_view_ptr(&node->outputs[o]);
    p.out_dtype[o] = node->outputs[o].dtype;
  }
  p.n = a.n;
  p.correction = a.correction;
  p.ord = a.ord;

  walk_start(&p.kept, 3);
  walk_start(&p.red, 1);
  for (int32_t d = 0, od = 0; d < in->ndim; ++d) {
    if (a.reduced[d]) {
      walk_push(&p.red, in->sizes[d], &in->strides[d]);
      od += a.keepdim;
      continue;
    }
    int64_t strides[3] = {in->strides[d], node->outputs[0].strides[od],
                          a.num_outputs > 1 ? node->outputs[1].strides[od] : 0};
    walk_add(&p.kept, in->sizes[d], strides);
    od++;
  }
  walk_order(&p.kept);
  p.inner = 1;
  if (p.kept.ndim > 0) {
    p.outer_dims = p.kept.ndim - 1;
    p.inner = p.kept.sizes[p.outer_dims];
    for (int v = 0; v < 3; ++v) p.axis_stride[v] = p.kept.strides[v][p.outer_dims];
  }
  p.column = p.kept.ndim > 0 && p.red.ndim > 0 && p.inner >= 8 &&
             p.axis_stride[0] < p.red.strides[0][p.red.ndim - 1];
  p.tile = p.inner < TILE ? p.inner : TILE;
  p.tiles_per_row = (p.inner + p.tile - 1) / p.tile;
  p.tiles = walk_outer_numel(&p.kept, p.outer_dims) * p.tiles_per_row;
  p.chunks = 1;
  if (p.tiles < SPLIT_MAX_TILES && p.n >= SPLIT_MIN_N) {
    p.chunks = p.n / SPLIT_CHUNK;
    if (p.chunks > SPLIT_MAX_CHUNKS) p.chunks = SPLIT_MAX_CHUNKS;
  }
  p.chunk_len = (p.n + p.chunks - 1) / p.chunks;

  int64_t items = p.tiles * p.chunks;
  int64_t work = p.tile * (p.chunk_len > 0 ? p.chunk_len : 1);
  int64_t grain = work >= 32768 ? 1 : 32768 / work;
  if (p.chunks == 1) {
    tpu_parallel_for(items, grain, reduce_work, &p);
    return TPU_OK;
  }
  p.partial = (rstate_t*)malloc(sizeof(rstate_t) * (size_t)(items * p.tile));
  if (!p.partial) TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for partial states");
  tpu_parallel_for(items, grain, reduce_work, &p);
  tpu_parallel_for(p.tiles, 1, combine_work, &p);
  free(p.partial);
  return TPU_OK;
}

/* ---- the op table --------------------------------------------------------------- */

static const reduce_impl_t k_sum = {RACC_SUM, ROUT_VALUE, true, "sum"};
static const reduce_impl_t k_mean = {RACC_SUM, ROUT_MEAN, true, "mean"};
static const reduce_impl_t k_prod = {RACC_PROD, ROUT_VALUE, true, "prod"};
static const reduce_impl_t k_amax = {RACC_MAX, ROUT_VALUE, true, "amax"};
static const reduce_impl_t k_amin = {RACC_MIN, ROUT_VALUE, true, "amin"};
static const reduce_impl_t k_max = {RACC_MAX, ROUT_VALUE, true, "max"};
static const reduce_impl_t k_min = {RACC_MIN, ROUT_VALUE, true, "min"};
static const reduce_impl_t k_max_dim = {RACC_MAX, ROUT_VALUE_INDEX, true, "max"};
static const reduce_impl_t k_min_dim = {RACC_MIN, ROUT_VALUE_INDEX, true, "min"};
static const reduce_impl_t k_argmax = {RACC_MAX, ROUT_INDEX, true, "argmax"};
static const reduce_impl_t k_argmin = {RACC_MIN, ROUT_INDEX, true, "argmin"};
static const reduce_impl_t k_all = {RACC_ALL, ROUT_VALUE, false, "all"};
static const reduce_impl_t k_any = {RACC_ANY, ROUT_VALUE, false, "any"};
static const reduce_impl_t k_var = {RACC_MOMENTS, ROUT_VAR, true, "var"};
static const reduce_impl_t k_std = {RACC_MOMENTS, ROUT_STD, true, "std"};
static const reduce_impl_t k_var_mean = {RACC_MOMENTS, ROUT_VAR_MEAN, true, "var_mean"};
static const reduce_impl_t k_std_mean = {RACC_MOMENTS, ROUT_STD_MEAN, true, "std_mean"};
static const reduce_impl_t k_nansum = {RACC_NANSUM, ROUT_VALUE, true, "nansum"};
static const reduce_impl_t k_count_nonzero = {RACC_NONZERO, ROUT_VALUE, true, "count_nonzero"};
static const reduce_impl_t k_norm = {RACC_NORM, ROUT_NORM, true, "norm"};
static const reduce_impl_t k_logsumexp = {RACC_LSE, ROUT_LSE, true, "logsumexp"};
static const reduce_impl_t k_aminmax = {RACC_MINMAX, ROUT_MINMAX, true, "aminmax"};
static const reduce_impl_t k_hash = {RACC_XOR, ROUT_BITS, true, "hash_tensor"};

#define ROW(name_, attrs_, outputs_, aten_, impl_)                                              \
  {.name = name_, .inputs = "self", .attrs = attrs_, .outputs = outputs_, .aten = aten_, \
   .kernel = reduce_kernel, .infer = reduce_infer, .check = reduce_check, .impl = &impl_, \
   .flags = 0, .rows = reduce_rows}
/* ... taking complex input too (sum, mean, prod, norms, var/std(_mean): reduce_complex.c). */
#define ROW_CX(name_, attrs_, outputs_, aten_, impl_)                                          \
  {.name = name_, .inputs = "self", .attrs = attrs_, .outputs = outputs_, .aten = aten_, \
   .kernel = reduce_kernel, .infer = reduce_infer, .check = reduce_check, .impl = &impl_, \
   .flags = TPU_OP_COMPLEX, .rows = reduce_rows}

/* Rows whose ATen schemas have different argument subsets are separate rows
 * (sum.dim_IntList has dim/keepdim, sum.default has not); one kernel serves
 * both, reading absent attrs as their defaults. */
static const tpu_op_def_t k_rows[] = {
    ROW_CX("sum", "dim,keepdim,dtype", "out", "sum.dim_IntList sum.IntList_out", k_sum),
    ROW_CX("sum_all", "dtype", "out", "sum.default sum.out", k_sum),
    ROW_CX("mean", "dim,keepdim,dtype", "out", "mean.dim mean.out", k_mean),
    ROW_CX("mean_all", "dtype", "out", "mean.default mean.dtype_out", k_mean),
    ROW_CX("prod", "dim,keepdim,dtype", "out", "prod.dim_int prod.int_out", k_prod),
    ROW_CX("prod_all", "dtype", "out", "prod.default prod.out", k_prod),
    ROW("amax", "dim,keepdim", "out", "amax.default amax.out", k_amax),
    ROW("amin", "dim,keepdim", "out", "amin.default amin.out", k_amin),
    ROW("max_dim", "dim,keepdim", "max,max_values", "max.dim max.dim_max", k_max_dim),
    ROW("min_dim", "dim,keepdim", "min,min_indices", "min.dim min.dim_min", k_min_dim),
    ROW("max", "", "out", "max.default max.unary_out", k_max),
    ROW("min", "", "out", "min.default min.unary_out", k_min),
    ROW("argmax", "dim,keepdim", "out", "argmax.default argmax.out", k_argmax),
    ROW("argmin", "dim,keepdim", "out", "argmin.default argmin.out", k_argmin),
    ROW("all", "dim,keepdim", "out", "all.dim all.out all.dims all.dims_out", k_all),
    ROW("all_all", "", "out", "all.default all.all_out", k_all),
    ROW("any", "dim,keepdim", "out", "any.dim any.out any.dims any.dims_out", k_any),
    ROW("any_all", "", "out", "any.default any.all_out", k_any),
    ROW_CX("var", "dim,correction,keepdim", "out", "var.correction var.correction_out", k_var),
    ROW_CX("std", "dim,correction,keepdim", "out", "std.correction std.correction_out", k_std),
    ROW_CX("var_mean", "dim,correction,keepdim", "out0,out1",
           "var_mean.correction var_mean.correction_out", k_var_mean),
    ROW_CX("std_mean", "dim,correction,keepdim", "out0,out1",
           "std_mean.correction std_mean.correction_out", k_std_mean),
    ROW("nansum", "dim,keepdim,dtype", "out", "nansum nansum.out", k_nansum),
    ROW("count_nonzero", "dim", "out",
        "count_nonzero count_nonzero.out count_nonzero.dim_IntList "
        "count_nonzero.dim_IntList_out",
        k_count_nonzero),
    ROW_CX("linalg_vector_norm", "ord,dim,keepdim,dtype", "out",
           "linalg_vector_norm linalg_vector_norm.out", k_norm),
    ROW_CX("norm", "p,dim,keepdim,dtype", "out",
           "norm.ScalarOpt_dim norm.out norm.ScalarOpt_dim_dtype norm.dtype_out", k_norm),
    ROW_CX("norm_all", "p,dtype", "out",
        "norm.Scalar norm.Scalar_out norm.ScalarOpt_dtype norm.ScalarOpt_dtype_out", k_norm),
    ROW("logsumexp", "dim,keepdim", "out", "logsumexp logsumexp.out", k_logsumexp),
    ROW("aminmax", "dim,keepdim", "min,max", "aminmax aminmax.out", k_aminmax),
    /* a uint64 result (TPU_OP_UNSIGNED: tpu_convert writes it) */
    {.name = "hash_tensor", .inputs = "self", .attrs = "dim,keepdim,mode", .outputs = "out",
     .aten = "hash_tensor hash_tensor.out", .kernel = reduce_kernel, .infer = reduce_infer,
     .check = reduce_check, .impl = &k_hash, .flags = TPU_OP_UNSIGNED, .rows = reduce_rows},
};

const tpu_op_family_t tpu_family_reduce = {"reduce", k_rows,
                                           (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
