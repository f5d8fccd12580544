/* random.h — the random family's private interface (random.c, random_ref.c,
 * tests/test_random.c, tests/test_random_distributions.c): the Philox4x32-10
 * generator, the per-element transforms every RNG op uses, and the argument
 * parsing shared by the kernels and the reference.
 *
 * Counter-based: element i (row-major over output 0) of an op draws one
 * Philox block, counter = offset + i (low word first, upper two words 0),
 * key = seed. So values depend only on (seed, offset, i): not on threads,
 * tiling or output strides. The bridge fills the attrs `seed` and `offset`
 * from the Generator and advances it by numel(output 0). The rejection
 * samplers (poisson, _standard_gamma) draw further blocks of element i with
 * counter word 2 = the iteration (rng_block_iter): sub-streams no other
 * element or op touches.
 */
#ifndef TPU_KERNELS_RANDOM_H_
#define TPU_KERNELS_RANDOM_H_

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernel.h"
#include "tpu/ops.h"

typedef enum rng_kind {
  RNG_UNIFORM = 0,  /* [from, to) */
  RNG_NORMAL,       /* mean + std * N(0, 1) */
  RNG_BERNOULLI,    /* 1 with probability p */
  RNG_RANDOM,       /* random_(), random_.from, random_.to: from + bits % range */
  RNG_DROPOUT,      /* native_dropout: mask = bernoulli(1 - p), out = in * mask * scale */
  RNG_DROPOUT_BACKWARD, /* grad * mask * scale (no randomness) */
  RNG_EXPONENTIAL,  /* -log(1 - u) / lambd */
  RNG_GEOMETRIC,    /* ceil(log(1 - u) / log1p(-p)), at least 1; any dtype */
  RNG_CAUCHY,       /* median + sigma * tan(pi (u - 1/2)) */
  RNG_LOG_NORMAL,   /* exp(mean + std * N(0, 1)) */
  RNG_NORMAL_T,     /* normal.Tensor_*: mean and std each a tensor or a number */
  RNG_BERNOULLI_T,  /* bernoulli(self) / bernoulli(self, p): p a tensor */
  RNG_POISSON,      /* poisson(rates): per-element rejection sampling (sub-streams) */
  RNG_GAMMA,        /* _standard_gamma(alpha): Marsaglia-Tsang (sub-streams) */
  RNG_KIND_COUNT,
} rng_kind_t;

/* How a RNG_RANDOM row reads its range: random_(), random_.from, random_.to. */
typedef enum rng_range { RANGE_DEFAULT = 0, RANGE_FROM, RANGE_TO } rng_range_t;

typedef struct rng_spec {
  rng_kind_t kind;
  rng_range_t range;
} rng_spec_t;

typedef struct rng_args {
  rng_kind_t kind;
  const tpu_view_t* input; /* self (its shape), input (dropout), grad_output */
  const tpu_view_t* mask;  /* dropout backward */
  double lo, hi;           /* uniform from/to; normal, log_normal mean/std; bernoulli and
                              geometric p, exponential lambd in lo; cauchy median/sigma */
  const tpu_view_t* mean_t; /* RNG_NORMAL_T: the mean tensor (NULL: lo) */
  const tpu_view_t* std_t;  /* RNG_NORMAL_T: the std tensor (NULL: hi) */
  const tpu_view_t* p_t;    /* RNG_BERNOULLI_T: the probabilities */
  int64_t from;            /* random: first value */
  uint64_t range;          /* random: number of values (0: all 2^64) */
  bool train;              /* dropout */
  double keep, scale;      /* dropout: keep probability 1 - p, 1 / (1 - p) (or 0) */
  uint64_t seed, offset;
  int32_t ndim;            /* output 0 (output 1 of dropout: same shape, bool) */
  int64_t sizes[TPU_MAX_DIMS];
  tpu_dtype_t dtype;
} rng_args_t;

tpu_status_t tpu_rng_parse(const tpu_op_def_t* def, const tpu_node_t* node, rng_args_t* a);
/* The smallest value _standard_gamma returns in `dtype` (ATen's clamp). */
double tpu_rng_gamma_tiny(tpu_dtype_t dtype);

/* Plain reference: one element at a time, in logical order. */
tpu_status_t tpu_random_reference(const tpu_op_def_t* def, const tpu_node_t* node);

/* ---- Philox4x32-10 (Salmon et al., SC'11; Random123's constants) ---------- */

static inline void tpu_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                                     uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1, c3 = (uint32_t)p0, c0 = n0, c2 = n2;
    k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* The four words of element `index` of a stream. */
static inline void rng_block(uint64_t seed, uint64_t offset, int64_t index, uint32_t w[4]) {
  uint64_t c = offset + (uint64_t)index;
  const uint32_t ctr[4] = {(uint32_t)c, (uint32_t)(c >> 32), 0, 0};
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  tpu_philox4x32_10(ctr, key, w);
}

/* The blocks of elements first .. first + n - 1, word j of element e in
 * w[j][e]: the same values as rng_block, written so the loop runs as SIMD
 * (widening 32x32 multiplies across elements). */
static inline void rng_blocks(uint64_t seed, uint64_t offset, int64_t first, int64_t n,
                              uint32_t* restrict w0, uint32_t* restrict w1, uint32_t* restrict w2,
                              uint32_t* restrict w3) {
  for (int64_t e = 0; e < n; ++e) {
    uint64_t c = offset + (uint64_t)(first + e);
    uint32_t c0 = (uint32_t)c, c1 = (uint32_t)(c >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; ++r) {
      uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
      uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
      c1 = (uint32_t)p1, c3 = (uint32_t)p0, c0 = n0, c2 = n2;
      k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    }
    w0[e] = c0, w1[e] = c1, w2[e] = c2, w3[e] = c3;
  }
}

/* ---- per-element transforms ------------------------------------------------ */

/* Uniform on [0, 1) from 24 / 53 random bits. */
static inline float rng_unit_F32(const uint32_t w[4]) { return (float)(w[0] >> 8) * 0x1p-24f; }
static inline double rng_unit_F64(const uint32_t w[4]) {
  return (double)((((uint64_t)w[0] << 32) | w[1]) >> 11) * 0x1p-53;
}

/* float32 log, sqrt and cos(2 pi u) for the Box-Muller transform, written
 * with integer and arithmetic operations only (no libm calls, no compare-
 * and-select, which the baseline x86-64 target does not vectorise), so a
 * loop over a tile compiles to SIMD. Kernel and reference use the same
 * functions, so they agree bit for bit; each is within a few float32 ulp.
 * rng_logf(x), x in (0, 1] normal: x = 2^k (1 + f), f in [sqrt(1/2) - 1,
 * sqrt(2) - 1), by integer adjustment of the bits; Cephes' logf polynomial. */
static inline float rng_logf(float x) {
  union {
    float f;
    uint32_t i;
  } u = {x};
  uint32_t ix = u.i + (0x3f800000u - 0x3f3504f3u);
  float k = (float)((int32_t)(ix >> 23) - 0x7f);
  u.i = (ix & 0x007fffffu) + 0x3f3504f3u;
  float m = u.f - 1.0f, z = m * m;
  float y = 7.0376836292E-2f;
  y = y * m - 1.1514610310E-1f;
  y = y * m + 1.1676998740E-1f;
  y = y * m - 1.2420140846E-1f;
  y = y * m + 1.4249322787E-1f;
  y = y * m - 1.6668057665E-1f;
  y = y * m + 2.0000714765E-1f;
  y = y * m - 2.4999993993E-1f;
  y = y * m + 3.3333331174E-1f;
  y = y * m * z;
  y += -2.12194440e-4f * k;
  y += -0.5f * z;
  return m + y + 0.693359375f * k;
}
/* sqrt of v >= 0: a bit-pattern first guess and three Newton steps (v = 0
 * gives about 1e-20). */
static inline float rng_sqrtf(float v) {
  union {
    float f;
    uint32_t i;
  } u = {v};
  u.i = (u.i >> 1) + 0x1fbd1df5u;
  float y = u.f;
  y = 0.5f * (y + v / y);
  y = 0.5f * (y + v / y);
  return 0.5f * (y + v / y);
}
/* cos(2 pi u) for u in [0, 1) as sin(2 pi s), s = 1/4 - |u - round(u)| in
 * [-1/4, 1/4]: the odd Taylor polynomial of sin through x^13 (error below
 * 1e-9 on [-pi/2, pi/2]). */
static inline float rng_cos2pif(float u) {
  float r = (u + 12582912.0f) - 12582912.0f; /* round to nearest: 0 or 1 */
  float x = 6.2831853071795864769f * (0.25f - fabsf(u - r)), z = x * x;
  float p = 1.6059043836821614e-10f;
  p = p * z - 2.5052108385441720e-8f;
  p = p * z + 2.7557319223985893e-6f;
  p = p * z - 1.9841269841269841e-4f;
  p = p * z + 8.3333333333333333e-3f;
  p = p * z - 1.6666666666666667e-1f;
  return x + x * z * p;
}

/* The two uniforms of a float32 normal draw: u1 in (0, 1], u2 in [0, 1). */
static inline float rng_u1_F32(const uint32_t w[4]) { return 1.0f - (float)(w[0] >> 8) * 0x1p-24f; }
static inline float rng_u2_F32(const uint32_t w[4]) { return (float)(w[1] >> 8) * 0x1p-24f; }
static inline float rng_box_muller_F32(float u1, float u2) {
  return rng_sqrtf(fabsf(-2.0f * rng_logf(u1))) * rng_cos2pif(u2);
}
/* Standard normal by Box-Muller (one of the pair), log argument in (0, 1]. */
static inline float rng_normal_F32(const uint32_t w[4]) {
  return rng_box_muller_F32(rng_u1_F32(w), rng_u2_F32(w));
}
static inline double rng_normal_F64(const uint32_t w[4]) {
  double u1 = 1.0 - (double)((((uint64_t)w[0] << 32) | w[1]) >> 11) * 0x1p-53;
  double u2 = (double)((((uint64_t)w[2] << 32) | w[3]) >> 11) * 0x1p-53;
  return sqrt(-2.0 * log(u1)) * cos(6.2831853071795864769 * u2);
}

/* Exponential, Cauchy and log-normal draws in float32 / float64, and the
 * geometric draw (in double, for any output dtype). */
static inline float rng_exponential_F32(const uint32_t w[4], float lambd) {
  return -logf(1.0f - rng_unit_F32(w)) / lambd;
}
static inline double rng_exponential_F64(const uint32_t w[4], double lambd) {
  return -log(1.0 - rng_unit_F64(w)) / lambd;
}
static inline float rng_cauchy_F32(const uint32_t w[4], float median, float sigma) {
  return median + sigma * tanf(3.14159265358979323846f * (rng_unit_F32(w) - 0.5f));
}
static inline double rng_cauchy_F64(const uint32_t w[4], double median, double sigma) {
  return median + sigma * tan(3.14159265358979323846 * (rng_unit_F64(w) - 0.5));
}
static inline float rng_log_normal_F32(const uint32_t w[4], float mean, float std) {
  return expf(mean + std * rng_normal_F32(w));
}
static inline double rng_log_normal_F64(const uint32_t w[4], double mean, double std) {
  return exp(mean + std * rng_normal_F64(w));
}
static inline double rng_geometric(const uint32_t w[4], double p) {
  double v = ceil(log(1.0 - rng_unit_F64(w)) / log1p(-p));
  return v < 1.0 ? 1.0 : v;
}

/* Rejection samplers draw more than one block per element: iteration k of
 * element `index` uses counter word 2 = k (word 2 is 0 for every other draw
 * of the family, so iteration 0 is the element's own block). */
static inline void rng_block_iter(uint64_t seed, uint64_t offset, int64_t index, uint32_t iter,
                                  uint32_t w[4]) {
  uint64_t c = offset + (uint64_t)index;
  const uint32_t ctr[4] = {(uint32_t)c, (uint32_t)(c >> 32), iter, 0};
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  tpu_philox4x32_10(ctr, key, w);
}
static inline double rng_unit_hi(const uint32_t w[4]) { /* from words 2 and 3 */
  return (double)((((uint64_t)w[2] << 32) | w[3]) >> 11) * 0x1p-53;
}
#define RNG_MAX_ITERS 4096u

/* Poisson(lam): Knuth's product of uniforms below 10, Hormann's PTRS
 * (transformed rejection with squeeze, as ATen's sampler) from 10 on. */
static inline double rng_poisson(uint64_t seed, uint64_t offset, int64_t index, double lam) {
  if (!(lam > 0.0)) return lam == 0.0 ? 0.0 : NAN;
  uint32_t w[4];
  if (lam < 10.0) {
    double enlam = exp(-lam), prod = 1.0, x = 0.0;
    for (uint32_t k = 0; k < RNG_MAX_ITERS; ++k) {
      rng_block_iter(seed, offset, index, k, w);
      const double u[2] = {rng_unit_F64(w), rng_unit_hi(w)};
      for (int q = 0; q < 2; ++q) {
        prod *= u[q];
        if (prod <= enlam) return x;
        x += 1.0;
      }
    }
    return x;
  }
  double slam = sqrt(lam), loglam = log(lam), b = 0.931 + 2.53 * slam;
  double a = -0.059 + 0.02483 * b, invalpha = 1.1239 + 1.1328 / (b - 3.4);
  double vr = 0.9277 - 3.6224 / (b - 2.0);
  for (uint32_t k = 0; k < RNG_MAX_ITERS; ++k) {
    rng_block_iter(seed, offset, index, k, w);
    double U = rng_unit_F64(w) - 0.5, V = rng_unit_hi(w);
    double us = 0.5 - fabs(U);
    double x = floor((2.0 * a / us + b) * U + lam + 0.43);
    if (us >= 0.07 && V <= vr) return x;
    if (x < 0.0 || (us < 0.013 && V > us)) continue;
    int sign;
    if (log(V) + log(invalpha) - log(a / (us * us) + b) <= -lam + x * loglam - lgamma_r(x + 1.0, &sign))
      return x;
  }
  return floor(lam);
}

/* Gamma(alpha, 1): Marsaglia and Tsang's squeeze (alpha < 1 boosted by
 * U^(1/alpha)); iteration k draws a normal from block k and a uniform from
 * block k | 2^31, the boost uniform is block RNG_MAX_ITERS. Results are at
 * least `tiny` (the output type's smallest normal, as ATen clamps). */
static inline double rng_gamma(uint64_t seed, uint64_t offset, int64_t index, double alpha,
                               double tiny) {
  if (alpha != alpha) return NAN;
  if (!(alpha > 0.0)) return 0.0;
  uint32_t w[4];
  double boost = 1.0, al = alpha;
  if (alpha < 1.0) {
    rng_block_iter(seed, offset, index, RNG_MAX_ITERS, w);
    boost = pow(1.0 - rng_unit_F64(w), 1.0 / alpha);
    al = alpha + 1.0;
  }
  double d = al - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d), r = d;
  for (uint32_t k = 0; k < RNG_MAX_ITERS; ++k) {
    rng_block_iter(seed, offset, index, k, w);
    double u1 = 1.0 - (double)((((uint64_t)w[0] << 32) | w[1]) >> 11) * 0x1p-53;
    double x = sqrt(-2.0 * log(u1)) * cos(6.2831853071795864769 * rng_unit_hi(w));
    double v = 1.0 + c * x;
    if (v <= 0.0) continue;
    v = v * v * v;
    uint32_t wu[4];
    rng_block_iter(seed, offset, index, k | 0x80000000u, wu); /* an independent uniform */
    double u = 1.0 - rng_unit_F64(wu);
    if (u < 1.0 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) {
      r = d * v;
      break;
    }
  }
  r *= boost;
  return r < tiny ? tiny : r;
}

/* True with probability p (53-bit resolution). */
static inline bool rng_bernoulli(const uint32_t w[4], double p) { return rng_unit_F64(w) < p; }

/* from + (bits % range), 32 bits when the range allows (as PyTorch does). */
static inline int64_t rng_integer(const uint32_t w[4], int64_t from, uint64_t range) {
  uint64_t bits = range != 0 && range <= ((uint64_t)1 << 32)
                      ? w[0]
                      : ((uint64_t)w[0] << 32) | w[1];
  return (int64_t)((uint64_t)from + (range ? bits % range : bits));
}

#endif /* TPU_KERNELS_RANDOM_H_ */
