/* random.c — the random family: uniform_, normal_ (and normal with tensor
 * mean/std), bernoulli_(p) and bernoulli with tensor p, random_ (default,
 * from/to, to), exponential_, geometric_, cauchy_, log_normal_, poisson,
 * _standard_gamma, native_dropout and native_dropout_backward.
 *
 * Values come from the counter-based Philox4x32-10 stream of random.h:
 * element i of output 0 (row-major, whatever its strides) uses counter
 * offset + i under key seed, so results are reproducible and independent of
 * the thread count. Work is split over the compute pool in chunks, each
 * processed in tiles: the tile's values are drawn in the compute type
 * (float32 for half types, float64, int64 for random_, bool for masks), then
 * converted into the strided outputs one run at a time.
 *
 * uniform_ maps a draw back to `from` when rounding to the output dtype gives
 * `to`, so results stay in [from, to). native_dropout keeps an element with
 * probability 1 - p, writes the bool mask to output 1 and scales kept values
 * by 1 / (1 - p) (0 when p == 1); with train=False it copies the input and
 * sets the mask to true.
 */
#include "kernels/random/random.h"

#include <string.h>

#include "kernels/common/kernel_util.h"

#define RNG_TILE 256
#define RNG_GRAIN 16384

/* ---- dtype limits (from TPU_DTYPE_LIST) -------------------------------------- */

#define RNG_SIGNED(T) ((T)-1 < (T)0)
#define RNG_IMAX(T) \
  (RNG_SIGNED(T) ? (int64_t)(((uint64_t)1 << (8 * sizeof(T) - 1)) - 1) : (int64_t)(uint64_t)(T)-1)
/* Largest and smallest value of integer dtypes and bool (unused for floats). */
static const int64_t k_int_max[TPU_DTYPE_COUNT] = {
#define RNG_X(E, n, T, C, K) K == 0 ? 1 : K == 2 ? 0 : RNG_IMAX(T),
    TPU_DTYPE_LIST(RNG_X)
#undef RNG_X
};
static const int64_t k_int_min[TPU_DTYPE_COUNT] = {
#define RNG_X(E, n, T, C, K) K == 1 && RNG_SIGNED(T) ? -RNG_IMAX(T) - 1 : 0,
    TPU_DTYPE_LIST(RNG_X)
#undef RNG_X
};

/* x as stored in `dtype`, read back. */
static double round_trip(double x, tpu_dtype_t dtype) {
  uint64_t storage;
  double y;
  tpu_convert(&storage, dtype, 1, &x, TPU_DTYPE_F64, 1, 1);
  tpu_convert(&y, TPU_DTYPE_F64, 1, &storage, dtype, 1, 1);
  return y;
}

/* Significand bits of a floating dtype: the first d where 1 + 2^-d rounds to 1. */
static int float_digits(tpu_dtype_t dtype) {
  for (int d = 1; d < 64; ++d)
    if (round_trip(1.0 + ldexp(1.0, -d), dtype) == 1.0) return d;
  return 64;
}

/* ---- argument parsing ------------------------------------------------------- */

static tpu_status_t parse_random(const tpu_op_def_t* def, const tpu_node_t* node,
                                 const rng_spec_t* spec, rng_args_t* a) {
  tpu_dtype_t dt = a->dtype;
  bool fl = tpu_dtype_is_floating(dt);
  int64_t max = fl ? (int64_t)1 << float_digits(dt) : k_int_max[dt];
  int64_t min = fl ? -max : k_int_min[dt];
  const tpu_attr_t* to_attr = ku_attr(def, node, "to");
  bool has_to = spec->range == RANGE_TO || (to_attr && to_attr->kind != TPU_ATTR_NONE);
  int64_t from = spec->range == RANGE_FROM ? tpu_attr_int(ku_attr(def, node, "from"), 0) : 0;
  int64_t to = tpu_attr_int(to_attr, 0);
  if (spec->range == RANGE_DEFAULT) {
    a->from = 0;
    a->range = (uint64_t)max + 1;
    return TPU_OK;
  }
  if (has_to && from >= to)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "random_ expects 'from' to be less than 'to', but got from=%lld >= "
                           "to=%lld",
                           (long long)from, (long long)to);
  if (!has_to && from > max)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "random_ expects 'from' casted to dtype to be less than or equal to "
                           "'to_inc' casted to dtype, but got from=%lld > to_inc=%lld",
                           (long long)from, (long long)max);
  /* Bounds outside the dtype: PyTorch's own checks and warnings apply. */
  if (from < min || (has_to && to - 1 > max))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "random_ bounds outside %s",
                           tpu_dtype_name(dt));
  a->from = from;
  a->range = has_to ? (uint64_t)to - (uint64_t)from : (uint64_t)max - (uint64_t)from + 1;
  return TPU_OK;
}

static tpu_status_t set_shape(rng_args_t* a, const tpu_view_t* like, tpu_dtype_t dtype) {
  a->ndim = like->ndim;
  memcpy(a->sizes, like->sizes, sizeof(a->sizes));
  a->dtype = dtype;
  return TPU_OK;
}

/* normal.Tensor_float / float_Tensor / Tensor_Tensor: inputs "mean,std", each
 * a tensor or a number; the output takes the first tensor's dtype and the
 * broadcast shape. */
static tpu_status_t parse_normal_t(const tpu_op_def_t* def, const tpu_node_t* node,
                                   rng_args_t* a) {
  if (node->num_inputs < 2) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "mean, std");
  const tpu_value_t* in = node->inputs;
  a->mean_t = in[0].kind == TPU_VALUE_VIEW ? &in[0].u.view : NULL;
  a->std_t = in[1].kind == TPU_VALUE_VIEW ? &in[1].u.view : NULL;
  a->input = a->mean_t ? a->mean_t : a->std_t;
  if (!a->input) return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "normal without a tensor");
  a->dtype = a->input->dtype;
  if (!tpu_dtype_is_floating(a->dtype) || (a->mean_t && a->std_t && a->std_t->dtype != a->dtype))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "normal of %s", tpu_dtype_name(a->dtype));
  if (!a->mean_t) a->lo = in[0].kind == TPU_VALUE_SCALAR ? in[0].u.scalar.v.f : 0.0;
  if (!a->std_t) {
    a->hi = in[1].kind == TPU_VALUE_SCALAR ? in[1].u.scalar.v.f : 1.0;
    if (in[1].kind == TPU_VALUE_SCALAR && in[1].u.scalar.dtype != TPU_DTYPE_F64)
      a->hi = (double)in[1].u.scalar.v.i;
    if (!(a->hi >= 0.0))
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "normal expects std >= 0.0");
  }
  if (!a->mean_t && in[0].kind == TPU_VALUE_SCALAR && in[0].u.scalar.dtype != TPU_DTYPE_F64)
    a->lo = (double)in[0].u.scalar.v.i;
  return tpu_broadcast_shapes(node->inputs, 2, a->sizes, &a->ndim);
}

tpu_status_t tpu_rng_parse(const tpu_op_def_t* def, const tpu_node_t* node, rng_args_t* a) {
  const rng_spec_t* spec = (const rng_spec_t*)def->impl;
  memset(a, 0, sizeof(*a));
  a->kind = spec->kind;
  a->seed = (uint64_t)tpu_attr_int(ku_attr(def, node, "seed"), 0);
  a->offset = (uint64_t)tpu_attr_int(ku_attr(def, node, "offset"), 0);
  if (a->kind == RNG_NORMAL_T) return parse_normal_t(def, node, a);
  a->input = node->num_inputs > 0 && node->inputs[0].kind == TPU_VALUE_VIEW
                 ? &node->inputs[0].u.view
                 : NULL;
  if (!a->input) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "input 0 must be a tensor");
  tpu_dtype_t dt = a->input->dtype;
  /* Dropout backward of an integer or bool gradient: grad * mask * scale with
   * a Python float scale promotes to float32 (PyTorch CPU). */
  if (a->kind == RNG_DROPOUT_BACKWARD && !tpu_dtype_is_floating(dt)) dt = TPU_DTYPE_F32;
  set_shape(a, a->input, dt);
  bool floating = tpu_dtype_is_floating(dt);
  if (!floating && a->kind != RNG_BERNOULLI && a->kind != RNG_RANDOM &&
      a->kind != RNG_GEOMETRIC && a->kind != RNG_BERNOULLI_T && a->kind != RNG_POISSON &&
      a->kind != RNG_GAMMA)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s of %s", def->name, tpu_dtype_name(dt));
  /* Arguments PyTorch rejects fall back, so it raises its own error. */
  switch (a->kind) {
    case RNG_EXPONENTIAL:
      a->lo = tpu_attr_float(ku_attr(def, node, "lambd"), 1.0);
      return a->lo > 0.0 ? TPU_OK
                         : tpu_status_make(TPU_CODE_UNIMPLEMENTED, "exponential_ lambda <= 0");
    case RNG_GEOMETRIC:
      a->lo = tpu_attr_float(ku_attr(def, node, "p"), 0.5);
      return a->lo > 0.0 && a->lo < 1.0
                 ? TPU_OK
                 : tpu_status_make(TPU_CODE_UNIMPLEMENTED, "geometric_ p outside (0, 1)");
    case RNG_CAUCHY:
      a->lo = tpu_attr_float(ku_attr(def, node, "median"), 0.0);
      a->hi = tpu_attr_float(ku_attr(def, node, "sigma"), 1.0);
      return a->hi > 0.0 ? TPU_OK : tpu_status_make(TPU_CODE_UNIMPLEMENTED, "cauchy_ sigma <= 0");
    case RNG_LOG_NORMAL:
      a->lo = tpu_attr_float(ku_attr(def, node, "mean"), 1.0);
      a->hi = tpu_attr_float(ku_attr(def, node, "std"), 2.0);
      return a->hi > 0.0 ? TPU_OK
                         : tpu_status_make(TPU_CODE_UNIMPLEMENTED, "log_normal_ std <= 0");
    case RNG_POISSON:
    case RNG_GAMMA:
      a->p_t = a->input; /* rates / concentrations, read into aux[0] */
      return floating ? TPU_OK
                      : tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s of %s", def->name,
                                        tpu_dtype_name(dt));
    case RNG_BERNOULLI_T: {
      const tpu_view_t* p = ku_input(def, node, "p");
      a->p_t = p ? p : a->input;
      if (!tpu_dtype_is_floating(a->p_t->dtype))
        return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "bernoulli with %s probabilities",
                               tpu_dtype_name(a->p_t->dtype));
      tpu_view_t e;
      if (!view_expand(a->p_t, a->ndim, a->sizes, &e))
        return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "p does not broadcast to self");
      return TPU_OK;
    }
    default:
      break;
  }
  switch (a->kind) {
    case RNG_UNIFORM: {
      a->lo = tpu_attr_float(ku_attr(def, node, "from"), 0.0);
      a->hi = tpu_attr_float(ku_attr(def, node, "to"), 1.0);
      if (!(a->lo <= a->hi))
        return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                               "uniform_ expects to return a [from, to) range, but found "
                               "from=%g > to=%g",
                               a->lo, a->hi);
      if (!isfinite(round_trip(a->lo, dt)) || !isfinite(round_trip(a->hi, dt)) ||
          !isfinite(round_trip(a->hi - a->lo, dt)))
        return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "uniform_ bounds outside %s",
                               tpu_dtype_name(dt));
      return TPU_OK;
    }
    case RNG_NORMAL:
      a->lo = tpu_attr_float(ku_attr(def, node, "mean"), 0.0);
      a->hi = tpu_attr_float(ku_attr(def, node, "std"), 1.0);
      if (!(a->hi >= 0.0))
        return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                               "normal expects std >= 0.0, but found std %g", a->hi);
      return TPU_OK;
    case RNG_BERNOULLI:
      a->lo = tpu_attr_float(ku_attr(def, node, "p"), 0.5);
      if (!(a->lo >= 0.0 && a->lo <= 1.0))
        return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                               "bernoulli_ expects p to be in [0, 1], but got p=%g", a->lo);
      return TPU_OK;
    case RNG_RANDOM:
      return parse_random(def, node, spec, a);
    case RNG_DROPOUT: {
      double p = tpu_attr_float(ku_attr(def, node, "p"), 0.5);
      a->train = tpu_attr_bool(ku_attr(def, node, "train"), true);
      a->keep = 1.0 - p;
      a->scale = a->keep == 0.0 ? 0.0 : 1.0 / a->keep;
      return TPU_OK;
    }
    default: { /* RNG_DROPOUT_BACKWARD */
      a->mask = node->num_inputs > 1 && node->inputs[1].kind == TPU_VALUE_VIEW
                    ? &node->inputs[1].u.view
                    : NULL;
      if (!a->mask || a->mask->dtype != TPU_DTYPE_BOOL)
        return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "dropout backward needs a bool mask");
      a->scale = tpu_attr_float(ku_attr(def, node, "scale"), 1.0);
      return tpu_broadcast_shapes(node->inputs, 2, a->sizes, &a->ndim);
    }
  }
}

double tpu_rng_gamma_tiny(tpu_dtype_t dtype) {
  return dtype == TPU_DTYPE_F64 ? 2.2250738585072014e-308 : 1.17549435e-38;
}

/* ---- tiles ------------------------------------------------------------------ */

typedef struct rng_tile {
  union {
    float F32[RNG_TILE];
    double F64[RNG_TILE];
    int64_t I64[RNG_TILE];
  } v;
  uint8_t mask[RNG_TILE];
  double aux[2][RNG_TILE]; /* loaded from views 1 and 2 (normal / bernoulli tensors) */
} rng_tile_t;

typedef struct rng_job rng_job_t;
/* Computes tile elements [0, n), which are elements first .. first + n - 1. */
typedef void (*rng_fill_fn)(const rng_job_t* j, int64_t first, int64_t n, rng_tile_t* t);

struct rng_job {
  rng_args_t a;
  walk_t walk; /* 0: output 0; 1: input (dropout, backward); 2: mask (out or in) */
  char* base[3];
  tpu_dtype_t dtype[3];
  int64_t esize[3];
  tpu_dtype_t tile_dtype; /* F32, F64, I64, or BOOL (values in `mask`) */
  int64_t tile_esize;
  bool load_input, load_mask, store_mask;
  bool load_aux[2]; /* views 1, 2 into aux[0], aux[1] as float64 */
  rng_fill_fn fill;
};

/* The draws of a tile first (Philox, scalar), then the transform in a loop
 * of its own: float32's is branch-free (random.h) and runs as SIMD. */
#define NORMAL_FILL_F32                                                                  \
  uint32_t w[4][RNG_TILE];                                                               \
  rng_blocks(j->a.seed, j->a.offset, first, n, w[0], w[1], w[2], w[3]);                  \
  for (int64_t e = 0; e < n; ++e) {                                                      \
    const uint32_t we[4] = {w[0][e], w[1][e], w[2][e], w[3][e]};                         \
    t->v.F32[e] = mean + std * rng_box_muller_F32(rng_u1_F32(we), rng_u2_F32(we));       \
  }
#define NORMAL_FILL_F64                              \
  uint32_t w[4];                                     \
  for (int64_t e = 0; e < n; ++e) {                  \
    rng_block(j->a.seed, j->a.offset, first + e, w); \
    t->v.F64[e] = mean + std * rng_normal_F64(w);    \
  }

#define RNG_FLOAT_FILLS(C, T)                                                           \
  static void uniform_##C(const rng_job_t* j, int64_t first, int64_t n, rng_tile_t* t) { \
    T lo = (T)j->a.lo, hi = (T)j->a.hi, span = (T)(j->a.hi - j->a.lo);                  \
    uint32_t w[4][RNG_TILE];                                                            \
    rng_blocks(j->a.seed, j->a.offset, first, n, w[0], w[1], w[2], w[3]);               \
    for (int64_t e = 0; e < n; ++e) {                                                   \
      const uint32_t we[4] = {w[0][e], w[1][e], w[2][e], w[3][e]};                      \
      t->v.C[e] = lo + span * rng_unit_##C(we);                                         \
    }                                                                                   \
    if (j->a.dtype != TPU_DTYPE_##C) { /* round as stored, then compare */              \
      double stored[RNG_TILE];                                                          \
      tpu_convert(stored, j->a.dtype, 1, t->v.C, TPU_DTYPE_##C, 1, n);                  \
      tpu_convert(t->v.C, TPU_DTYPE_##C, 1, stored, j->a.dtype, 1, n);                  \
    }                                                                                   \
    for (int64_t e = 0; e < n; ++e)                                                     \
      if (t->v.C[e] >= hi) t->v.C[e] = lo;                                              \
  }                                                                                     \
  static void normal_##C(const rng_job_t* j, int64_t first, int64_t n, rng_tile_t* t) {  \
    T mean = (T)j->a.lo, std = (T)j->a.hi;                                              \
    NORMAL_FILL_##C                                                                     \
  }                                                                                     \
  static void exponential_##C(const rng_job_t* j, int64_t first, int64_t n,             \
                              rng_tile_t* t) {                                          \
    uint32_t w[4];                                                                      \
    for (int64_t e = 0; e < n; ++e) {                                                   \
      rng_block(j->a.seed, j->a.offset, first + e, w);                                  \
      t->v.C[e] = rng_exponential_##C(w, (T)j->a.lo);                                   \
    }                                                                                   \
  }                                                                                     \
  static void cauchy_##C(const rng_job_t* j, int64_t first, int64_t n, rng_tile_t* t) {  \
    uint32_t w[4];                                                                      \
    for (int64_t e = 0; e < n; ++e) {                                                   \
      rng_block(j->a.seed, j->a.offset, first + e, w);                                  \
      t->v.C[e] = rng_cauchy_##C(w, (T)j->a.lo, (T)j->a.hi);                            \
    }                                                                                   \
  }                                                                                     \
  static void log_normal_##C(const rng_job_t* j, int64_t first, int64_t n,              \
                             rng_tile_t* t) {                                           \
    uint32_t w[4];                                                                      \
    for (int64_t e = 0; e < n; ++e) {                                                   \
      rng_block(j->a.seed, j->a.offset, first + e, w);                                  \
      t->v.C[e] = rng_log_normal_##C(w, (T)j->a.lo, (T)j->a.hi);                        \
    }                                                                                   \
  }                                                                                     \
  static void normal_t_##C(const rng_job_t* j, int64_t first, int64_t n, rng_tile_t* t) { \
    uint32_t w[4];                                                                      \
    for (int64_t e = 0; e < n; ++e) {                                                   \
      rng_block(j->a.seed, j->a.offset, first + e, w);                                  \
      T mean = (T)(j->load_aux[0] ? t->aux[0][e] : j->a.lo);                            \
      T std = (T)(j->load_aux[1] ? t->aux[1][e] : j->a.hi);                             \
      t->v.C[e] = mean + std * rng_normal_##C(w);                                       \
    }                                                                                   \
  }                                                                                     \
  static void dropout_##C(const rng_job_t* j, int64_t first, int64_t n, rng_tile_t* t) { \
    T scale = (T)j->a.scale;                                                            \
    uint32_t w[4];                                                                      \
    for (int64_t e = 0; e < n; ++e) {                                                   \
      rng_block(j->a.seed, j->a.offset, first + e, w);                                  \
      t->mask[e] = rng_bernoulli(w, j->a.keep);                                         \
      t->v.C[e] = t->v.C[e] * (T)t->mask[e] * scale;                                    \
    }                                                                                   \
  }                                                                                     \
  static void dropout_backward_##C(const rng_job_t* j, int64_t first, int64_t n,        \
                                   rng_tile_t* t) {                                     \
    T scale = (T)j->a.scale;                                                            \
    for (int64_t e = 0; e < n; ++e) t->v.C[e] = t->v.C[e] * (T)t->mask[e] * scale;      \
  }
RNG_FLOAT_FILLS(F32, float)
RNG_FLOAT_FILLS(F64, double)
#undef RNG_FLOAT_FILLS

static void bernoulli_fill(const rng_job_t* j, int64_t first, int64_t n, rng_tile_t* t) {
  uint32_t w[4];
  for (int64_t e = 0; e < n; ++e) {
    rng_block(j->a.seed, j->a.offset, first + e, w);
    t->mask[e] = rng_bernoulli(w, j->a.lo);
  }
}

static void bernoulli_t_fill(const rng_job_t* j, int64_t first, int64_t n, rng_tile_t* t) {
  uint32_t w[4];
  for (int64_t e = 0; e < n; ++e) {
    rng_block(j->a.seed, j->a.offset, first + e, w);
    t->mask[e] = rng_bernoulli(w, t->aux[0][e]);
  }
}

static void geometric_fill(const rng_job_t* j, int64_t first, int64_t n, rng_tile_t* t) {
  uint32_t w[4];
  for (int64_t e = 0; e < n; ++e) {
    rng_block(j->a.seed, j->a.offset, first + e, w);
    t->v.F64[e] = rng_geometric(w, j->a.lo);
  }
}

static void poisson_fill(const rng_job_t* j, int64_t first, int64_t n, rng_tile_t* t) {
  for (int64_t e = 0; e < n; ++e)
    t->v.F64[e] = rng_poisson(j->a.seed, j->a.offset, first + e, t->aux[0][e]);
}

static void gamma_fill(const rng_job_t* j, int64_t first, int64_t n, rng_tile_t* t) {
  double tiny = tpu_rng_gamma_tiny(j->a.dtype);
  for (int64_t e = 0; e < n; ++e)
    t->v.F64[e] = rng_gamma(j->a.seed, j->a.offset, first + e, t->aux[0][e], tiny);
}

static void random_fill(const rng_job_t* j, int64_t first, int64_t n, rng_tile_t* t) {
  uint32_t w[4];
  for (int64_t e = 0; e < n; ++e) {
    rng_block(j->a.seed, j->a.offset, first + e, w);
    t->v.I64[e] = rng_integer(w, j->a.from, j->a.range);
  }
}

/* Fills by kind: per compute type for floating kinds, one for any dtype else. */
static const rng_fill_fn k_fill_float[RNG_KIND_COUNT][TPU_COMPUTE_COUNT] = {
    [RNG_UNIFORM] = {[TPU_COMPUTE_F32] = uniform_F32, [TPU_COMPUTE_F64] = uniform_F64},
    [RNG_NORMAL] = {[TPU_COMPUTE_F32] = normal_F32, [TPU_COMPUTE_F64] = normal_F64},
    [RNG_DROPOUT] = {[TPU_COMPUTE_F32] = dropout_F32, [TPU_COMPUTE_F64] = dropout_F64},
    [RNG_DROPOUT_BACKWARD] = {[TPU_COMPUTE_F32] = dropout_backward_F32,
                              [TPU_COMPUTE_F64] = dropout_backward_F64},
    [RNG_EXPONENTIAL] = {[TPU_COMPUTE_F32] = exponential_F32, [TPU_COMPUTE_F64] = exponential_F64},
    [RNG_CAUCHY] = {[TPU_COMPUTE_F32] = cauchy_F32, [TPU_COMPUTE_F64] = cauchy_F64},
    [RNG_LOG_NORMAL] = {[TPU_COMPUTE_F32] = log_normal_F32, [TPU_COMPUTE_F64] = log_normal_F64},
    [RNG_NORMAL_T] = {[TPU_COMPUTE_F32] = normal_t_F32, [TPU_COMPUTE_F64] = normal_t_F64},
};
static const rng_fill_fn k_fill_any[RNG_KIND_COUNT] = {[RNG_BERNOULLI] = bernoulli_fill,
                                                       [RNG_RANDOM] = random_fill,
                                                       [RNG_GEOMETRIC] = geometric_fill,
                                                       [RNG_BERNOULLI_T] = bernoulli_t_fill,
                                                       [RNG_POISSON] = poisson_fill,
                                                       [RNG_GAMMA] = gamma_fill};

typedef struct rng_io {
  const rng_job_t* j;
  rng_tile_t* t;
  int64_t first; /* logical index of tile element 0 */
} rng_io_t;

static char* tile_values(const rng_job_t* j, rng_tile_t* t, int64_t k) {
  return j->tile_dtype == TPU_DTYPE_BOOL ? (char*)&t->mask[k] : (char*)&t->v + k * j->tile_esize;
}

static void load_run(void* arg, const int64_t* offs, const int64_t* steps, int64_t n,
                     int64_t logical) {
  const rng_io_t* io = (const rng_io_t*)arg;
  const rng_job_t* j = io->j;
  int64_t k = logical - io->first;
  if (j->load_input)
    tpu_convert(tile_values(j, io->t, k), j->tile_dtype, 1, j->base[1] + offs[1] * j->esize[1],
                j->dtype[1], steps[1], n);
  if (j->load_mask)
    tpu_convert(&io->t->mask[k], TPU_DTYPE_BOOL, 1, j->base[2] + offs[2] * j->esize[2],
                j->dtype[2], steps[2], n);
  for (int q = 0; q < 2; ++q)
    if (j->load_aux[q])
      tpu_convert(&io->t->aux[q][k], TPU_DTYPE_F64, 1, j->base[1 + q] + offs[1 + q] * j->esize[1 + q],
                  j->dtype[1 + q], steps[1 + q], n);
}

static void store_run(void* arg, const int64_t* offs, const int64_t* steps, int64_t n,
                      int64_t logical) {
  const rng_io_t* io = (const rng_io_t*)arg;
  const rng_job_t* j = io->j;
  int64_t k = logical - io->first;
  tpu_convert(j->base[0] + offs[0] * j->esize[0], j->dtype[0], steps[0], tile_values(j, io->t, k),
              j->tile_dtype, 1, n);
  if (j->store_mask)
    tpu_convert(j->base[2] + offs[2] * j->esize[2], TPU_DTYPE_BOOL, steps[2], &io->t->mask[k],
                TPU_DTYPE_BOOL, 1, n);
}

static void rng_chunk(void* arg, int64_t begin, int64_t end) {
  const rng_job_t* j = (const rng_job_t*)arg;
  rng_tile_t t;
  for (int64_t first = begin; first < end; first += RNG_TILE) {
    int64_t last = first + RNG_TILE < end ? first + RNG_TILE : end;
    rng_io_t io = {j, &t, first};
    if (j->load_input || j->load_mask || j->load_aux[0] || j->load_aux[1])
      walk_range(&j->walk, first, last, load_run, &io);
    j->fill(j, first, last - first, &t);
    walk_range(&j->walk, first, last, store_run, &io);
  }
}

/* native_dropout with train=False: out = input, mask = true. */
static void dropout_eval(const tpu_view_t* in, const tpu_view_t* out, const tpu_view_t* mask) {
  static const uint8_t one = 1;
  tpu_view_t scalar = {.addr = (uint64_t)(uintptr_t)&one, .dtype = TPU_DTYPE_BOOL}, ones;
  view_copy(out, in);
  view_expand(&scalar, mask->ndim, mask->sizes, &ones);
  view_copy(mask, &ones);
}

static bool same_shape(const tpu_view_t* v, const rng_args_t* a) {
  if (v->ndim != a->ndim) return false;
  for (int32_t d = 0; d < a->ndim; ++d)
    if (v->sizes[d] != a->sizes[d]) return false;
  return true;
}

static tpu_status_t random_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx) {
  (void)ctx;
  rng_job_t j;
  memset(&j, 0, sizeof(j));
  TPU_RETURN_IF_ERROR(tpu_rng_parse(def, node, &j.a));
  int32_t nout = tpu_spec_count(def->outputs);
  if (node->num_outputs < nout) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "missing outputs");
  for (int32_t i = 0; i < nout; ++i)
    if (!same_shape(&node->outputs[i], &j.a) ||
        node->outputs[i].dtype != (i ? TPU_DTYPE_BOOL : j.a.dtype))
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "output %d has the wrong shape or dtype",
                             i);
  const tpu_view_t* out = &node->outputs[0];
  if (tpu_view_numel(out) == 0) return TPU_OK;
  if (j.a.kind == RNG_DROPOUT && !j.a.train) {
    dropout_eval(j.a.input, out, &node->outputs[1]);
    return TPU_OK;
  }
  tpu_view_t views[3] = {*out};
  int32_t nviews = 1;
  if (j.a.kind == RNG_DROPOUT || j.a.kind == RNG_DROPOUT_BACKWARD) {
    view_expand(j.a.input, out->ndim, out->sizes, &views[1]);
    if (j.a.kind == RNG_DROPOUT)
      views[2] = node->outputs[1];
    else
      view_expand(j.a.mask, out->ndim, out->sizes, &views[2]);
    nviews = 3;
    j.load_input = true;
    j.load_mask = j.a.kind == RNG_DROPOUT_BACKWARD;
    j.store_mask = j.a.kind == RNG_DROPOUT;
  } else if (j.a.kind == RNG_NORMAL_T || j.a.kind == RNG_BERNOULLI_T ||
             j.a.kind == RNG_POISSON || j.a.kind == RNG_GAMMA) {
    /* Views 1 and 2: the mean / p and std tensors, broadcast to the output
     * (a missing one repeats the output with stride 0 and is not loaded). */
    const tpu_view_t* src[2] = {j.a.kind == RNG_NORMAL_T ? j.a.mean_t : j.a.p_t, j.a.std_t};
    for (int q = 0; q < 2; ++q) {
      j.load_aux[q] = src[q] != NULL;
      if (!src[q] || !view_expand(src[q], out->ndim, out->sizes, &views[1 + q]))
        view_expand(out, out->ndim, out->sizes, &views[1 + q]);
    }
    nviews = 3;
  }
  const tpu_view_t* vp[3] = {&views[0], &views[1], &views[2]};
  walk_init_views(&j.walk, nviews, vp);
  for (int32_t v = 0; v < nviews; ++v) {
    j.base[v] = (char*)tpu_view_ptr(&views[v]);
    j.dtype[v] = views[v].dtype;
    j.esize[v] = (int64_t)tpu_dtype_size(views[v].dtype);
  }
  tpu_compute_type_t ct = tpu_dtype_compute(j.a.dtype);
  j.fill = k_fill_any[j.a.kind] ? k_fill_any[j.a.kind] : k_fill_float[j.a.kind][ct];
  j.tile_dtype = (j.a.kind == RNG_BERNOULLI || j.a.kind == RNG_BERNOULLI_T) ? TPU_DTYPE_BOOL
                 : j.a.kind == RNG_RANDOM                                    ? TPU_DTYPE_I64
                 : (j.a.kind == RNG_GEOMETRIC || j.a.kind == RNG_POISSON ||
                    j.a.kind == RNG_GAMMA)                                   ? TPU_DTYPE_F64
                                             : tpu_compute_storage_dtype(ct);
  j.tile_esize = (int64_t)tpu_dtype_size(j.tile_dtype);
  tpu_parallel_for(j.walk.numel, RNG_GRAIN, rng_chunk, &j);
  return TPU_OK;
}

static tpu_status_t random_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_view_t* outs) {
  rng_args_t a;
  TPU_RETURN_IF_ERROR(tpu_rng_parse(def, node, &a));
  for (int32_t i = 0; i < tpu_spec_count(def->outputs); ++i) {
    memset(&outs[i], 0, sizeof(outs[i]));
    outs[i].dtype = i ? TPU_DTYPE_BOOL : a.dtype;
    outs[i].ndim = a.ndim;
    memcpy(outs[i].sizes, a.sizes, sizeof(a.sizes));
    tpu_view_set_contiguous(&outs[i]);
  }
  return TPU_OK;
}

static tpu_status_t random_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  rng_args_t a;
  return tpu_rng_parse(def, node, &a);
}

static const rng_spec_t k_uniform = {RNG_UNIFORM, RANGE_DEFAULT},
                        k_normal = {RNG_NORMAL, RANGE_DEFAULT},
                        k_bernoulli = {RNG_BERNOULLI, RANGE_DEFAULT},
                        k_random = {RNG_RANDOM, RANGE_DEFAULT},
                        k_random_from = {RNG_RANDOM, RANGE_FROM},
                        k_random_to = {RNG_RANDOM, RANGE_TO},
                        k_dropout = {RNG_DROPOUT, RANGE_DEFAULT},
                        k_dropout_backward = {RNG_DROPOUT_BACKWARD, RANGE_DEFAULT},
                        k_exponential = {RNG_EXPONENTIAL, RANGE_DEFAULT},
                        k_geometric = {RNG_GEOMETRIC, RANGE_DEFAULT},
                        k_cauchy = {RNG_CAUCHY, RANGE_DEFAULT},
                        k_log_normal = {RNG_LOG_NORMAL, RANGE_DEFAULT},
                        k_normal_t = {RNG_NORMAL_T, RANGE_DEFAULT},
                        k_bernoulli_t = {RNG_BERNOULLI_T, RANGE_DEFAULT},
                        k_poisson = {RNG_POISSON, RANGE_DEFAULT},
                        k_gamma = {RNG_GAMMA, RANGE_DEFAULT};

#define RNG_ROW(name_, inputs_, attrs_, outputs_, aten_, spec) \
  {.name = name_, .inputs = inputs_, .attrs = attrs_, .outputs = outputs_, .aten = aten_, \
   .kernel = random_kernel, .infer = random_infer, .check = random_check, .impl = &spec}

static const tpu_op_def_t k_ops[] = {
    RNG_ROW("uniform", "self", "from,to,seed,offset", "out", "uniform_ uniform uniform.out",
            k_uniform),
    RNG_ROW("normal", "self", "mean,std,seed,offset", "out",
            "normal_ normal_functional normal.out", k_normal),
    RNG_ROW("bernoulli", "self", "p,seed,offset", "out",
            "bernoulli_.float bernoulli.p bernoulli.float_out", k_bernoulli),
    RNG_ROW("random", "self", "seed,offset", "out", "random_ random random.out", k_random),
    RNG_ROW("random_from", "self", "from,to,seed,offset", "out",
            "random_.from random.from random.from_out", k_random_from),
    RNG_ROW("random_to", "self", "to,seed,offset", "out", "random_.to random.to random.to_out",
            k_random_to),
    RNG_ROW("native_dropout", "input", "p,train,seed,offset", "out0,out1",
            "native_dropout native_dropout.out", k_dropout),
    RNG_ROW("native_dropout_backward", "grad_output,mask", "scale", "out",
            "native_dropout_backward native_dropout_backward.out", k_dropout_backward),
    RNG_ROW("exponential", "self", "lambd,seed,offset", "out",
            "exponential_ exponential exponential.out", k_exponential),
    RNG_ROW("geometric", "self", "p,seed,offset", "out", "geometric_ geometric geometric.out",
            k_geometric),
    RNG_ROW("cauchy", "self", "median,sigma,seed,offset", "out", "cauchy_ cauchy cauchy.out",
            k_cauchy),
    RNG_ROW("log_normal", "self", "mean,std,seed,offset", "out",
            "log_normal_ log_normal log_normal.out", k_log_normal),
    RNG_ROW("normal_tensor", "mean#,std#", "seed,offset", "out",
            "normal.Tensor_float normal.Tensor_float_out normal.float_Tensor "
            "normal.float_Tensor_out normal.Tensor_Tensor normal.Tensor_Tensor_out",
            k_normal_t),
    RNG_ROW("bernoulli_self", "self", "seed,offset", "out", "bernoulli bernoulli.out",
            k_bernoulli_t),
    RNG_ROW("bernoulli_tensor", "self,p", "seed,offset", "out",
            "bernoulli_.Tensor bernoulli.Tensor bernoulli.Tensor_out", k_bernoulli_t),
    RNG_ROW("poisson", "self", "seed,offset", "out", "poisson poisson.out", k_poisson),
    RNG_ROW("standard_gamma", "self", "seed,offset", "out",
            "_standard_gamma _standard_gamma.out", k_gamma),
};

const tpu_op_family_t tpu_family_random = {"random", k_ops,
                                           (int32_t)(sizeof(k_ops) / sizeof(k_ops[0]))};
