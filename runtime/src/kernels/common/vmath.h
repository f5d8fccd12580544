/* vmath.h — vectorisable float32 math for kernels (internal).
 *
 * libm's expf is a call per element; loops written with these inline
 * functions compile to SIMD (no calls, no branches in the fast range).
 *
 *   vm_expf(x): Cephes-style expf: x = n ln2 + r with |r| <= ln2/2 (ln2 split
 *   in two for exactness), a degree-6 minimax polynomial for e^r, and 2^n
 *   built in the exponent bits. Relative error below 2 ulp for x in
 *   [VM_EXP_LO, VM_EXP_HI]; outside it the caller must use expf (vm_exp_ok
 *   tells), which keeps overflow, underflow to subnormals and NaN exact.
 */
#ifndef TPU_KERNELS_VMATH_H_
#define TPU_KERNELS_VMATH_H_

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* TPU_TARGET_CLONES(targets...) before a function: GCC compiles it for each
 * target and picks one at load time (an ifunc resolver). Empty off GCC on
 * x86-64 and under TPU_NO_CLONES, which the sanitizer builds define: the
 * resolvers are instrumented and run during relocation, before the
 * sanitizer's runtime has started (a TSan build crashes before main). The
 * kernels with clones (vmath users, attention.c, conv_winograd.c) all use
 * this one condition. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(TPU_NO_CLONES) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define TPU_TARGET_CLONES(...) __attribute__((target_clones(__VA_ARGS__)))
#else
#define TPU_TARGET_CLONES(...)
#endif

/* VM_SIMD_CLONES before a function built from these: AVX-512, AVX2 and the
 * baseline. */
#define VM_SIMD_CLONES TPU_TARGET_CLONES("arch=x86-64-v4", "avx2", "default")

#define VM_EXP_HI 88.0f
#define VM_EXP_LO -87.0f

static inline int vm_exp_ok(float x) { return (x >= VM_EXP_LO) & (x <= VM_EXP_HI); }

static inline float vm_expf(float x) {
  const float log2e = 1.44269504088896341f;
  const float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
  /* Round x log2e to the nearest integer with the 1.5 * 2^23 trick (no
   * libm call, so the loop vectorises on any x86-64). */
  const float magic = 12582912.0f;
  float n = (x * log2e + magic) - magic;
  float r = x - n * ln2_hi - n * ln2_lo;
  float z = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * z + r + 1.0f;
  /* Out-of-range (and NaN) inputs are recomputed by the caller; clamp n so
   * building 2^n stays defined for them. */
  n = n >= -127.0f ? n : -127.0f; /* also maps NaN to -127 */
  n = n <= 128.0f ? n : 128.0f;
  uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

/* out[i] = exp(in[i] - shift) for n elements; exact libm for the rare
 * out-of-range element. Returns the sum of the results (in double). */
/* Lanes of the explicit-order reductions below: a fixed association, so
 * results do not depend on the compiler, and wide enough for SIMD. */
#define VM_LANES 8

/* Sum of n floats in double. */
static inline double vm_sum(const float* x, int64_t n) {
  double acc[VM_LANES] = {0};
  int64_t i = 0;
  for (; i + VM_LANES <= n; i += VM_LANES)
    for (int j = 0; j < VM_LANES; ++j) acc[j] += x[i + j];
  double s = 0.0;
  for (int j = 0; j < VM_LANES; ++j) s += acc[j];
  for (; i < n; ++i) s += x[i];
  return s;
}

/* Maximum of n floats (n >= 1); NaN when any element is NaN. */
static inline float vm_max(const float* x, int64_t n) {
  float acc[VM_LANES];
  int nan = 0;
  for (int j = 0; j < VM_LANES; ++j) acc[j] = -INFINITY;
  int64_t i = 0;
  for (; i + VM_LANES <= n; i += VM_LANES)
    for (int j = 0; j < VM_LANES; ++j) {
      float v = x[i + j];
      nan |= v != v;
      acc[j] = v > acc[j] ? v : acc[j];
    }
  float m = -INFINITY;
  for (int j = 0; j < VM_LANES; ++j) m = acc[j] > m ? acc[j] : m;
  for (; i < n; ++i) {
    nan |= x[i] != x[i];
    m = x[i] > m ? x[i] : m;
  }
  return nan ? NAN : m;
}

static inline double vm_exp_shifted(float* out, const float* in, float shift, int64_t n) {
  int all_ok = 1;
  for (int64_t i = 0; i < n; ++i) {
    float x = in[i] - shift;
    all_ok &= vm_exp_ok(x);
    out[i] = vm_expf(x);
  }
  if (!all_ok)
    for (int64_t i = 0; i < n; ++i) {
      float x = in[i] - shift;
      if (!vm_exp_ok(x)) out[i] = expf(x);
    }
  return vm_sum(out, n);
}

/* ---- more float32 functions (Cephes single-precision algorithms) -----------
 *
 * Each is branch-free so loops over arrays vectorise; each states the range
 * where it is exact to ~2 ulp. Outside it (zeros, infinities, NaN where
 * noted) the caller uses libm for the tile.
 */

static inline float vm_bits_to_float(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof(f));
  return f;
}
static inline uint32_t vm_float_to_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof(b));
  return b;
}

/* log(x) for normal positive finite x (vm_log_ok). */
static inline int vm_log_ok(float x) { return (x >= 1.17549435e-38f) & (x <= 3.40282347e38f); }
static inline float vm_logf(float x) {
  uint32_t b = vm_float_to_bits(x);
  float e = (float)((int32_t)(b >> 23) - 127);
  float m = vm_bits_to_float((b & 0x007fffffu) | 0x3f800000u); /* [1, 2) */
  int big = m > 1.41421356f;
  m = big ? 0.5f * m : m;
  e = big ? e + 1.0f : e;
  float f = m - 1.0f, z = f * f;
  float y = 7.0376836292E-2f;
  y = y * f - 1.1514610310E-1f;
  y = y * f + 1.1676998740E-1f;
  y = y * f - 1.2420140846E-1f;
  y = y * f + 1.4249322787E-1f;
  y = y * f - 1.6668057665E-1f;
  y = y * f + 2.0000714765E-1f;
  y = y * f - 2.4999993993E-1f;
  y = y * f + 3.3333331174E-1f;
  y = f * z * y;
  y += -2.12194440e-4f * e;
  y += -0.5f * z;
  return f + y + 0.693359375f * e;
}

/* log1p(x) for x > -1 with 1 + x finite (vm_log1p_ok): log(u) x / (u - 1),
 * u = 1 + x, which cancels the rounding of u. */
static inline int vm_log1p_ok(float x) { return (x > -0.99999994f) & (x <= 3.0e38f); }
static inline float vm_log1pf(float x) {
  float u = 1.0f + x;
  float q = x / (u - 1.0f);
  float l = vm_logf(u) * q;
  return u == 1.0f ? x : l;
}

/* Every branch below is computed and selected: GCC does not if-convert
 * (so does not vectorise) a division or sqrt under a condition. */

/* atan(x): exact for every x, infinities and NaN included. */
static inline float vm_atanf(float x) {
  float a = fabsf(x);
  int hi = a > 2.414213562373095f, mid = a > 0.4142135623730950f;
  float t_hi = -1.0f / a;
  float t_mid = (a - 1.0f) / (a + 1.0f);
  float t = hi ? t_hi : mid ? t_mid : a;
  float y0 = hi ? 1.5707963267948966f : mid ? 0.7853981633974483f : 0.0f;
  float z = t * t;
  float y = ((8.05374449538e-2f * z - 1.38776856032E-1f) * z + 1.99777106478E-1f) * z -
            3.33329491539E-1f;
  y = y * z * t + t + y0;
  return copysignf(y, x);
}

/* atan2(y, x) for finite nonzero x and y (vm_atan2_ok). */
static inline int vm_atan2_ok(float y, float x) {
  return (fabsf(x) <= 3.40282347e38f) & (fabsf(y) <= 3.40282347e38f) & (x != 0.0f) &
         (y != 0.0f);
}
static inline float vm_atan2f(float y, float x) {
  float z = vm_atanf(y / x);
  float w = x < 0.0f ? copysignf(3.14159265358979f, y) : 0.0f;
  return z + w;
}

/* asin core on |t| <= 0.5: t + t z P(z), z = t^2. */
static inline float vm_asin_core(float t) {
  float z = t * t;
  float p = (((4.2163199048E-2f * z + 2.4181311049E-2f) * z + 4.5470025998E-2f) * z +
             7.4953002686E-2f) * z + 1.6666752422E-1f;
  return p * z * t + t;
}

/* asin(x), acos(x): exact for every x (NaN outside [-1, 1]). Needs
 * -fno-math-errno to vectorise (sqrt). */
static inline float vm_asinf(float x) {
  float a = fabsf(x);
  int big = a > 0.5f;
  float sq = sqrtf(0.5f * (1.0f - a));
  float t = big ? sq : a;
  float c = vm_asin_core(t);
  float r = big ? 1.5707963267948966f - (c + c) : c;
  return copysignf(r, x);
}
static inline float vm_acosf(float x) {
  int hi = x > 0.5f, lo = x < -0.5f;
  float sq = sqrtf(0.5f * (1.0f - fabsf(x)));
  float t = (hi | lo) ? sq : x;
  float c = vm_asin_core(t);
  return hi ? c + c : lo ? 3.14159265358979f - (c + c) : 1.5707963267948966f - c;
}

/* tanh(x): exact for every x, NaN included. */
static inline float vm_tanhf(float x) {
  float a = fabsf(x);
  float a2 = a + a;
  float s = vm_expf(a2 < 88.0f ? a2 : 88.0f);
  float big = 1.0f - 2.0f / (s + 1.0f);
  float z = x * x;
  float p = (((-5.70498872745E-3f * z + 2.06390887954E-2f) * z - 5.37397155531E-2f) * z +
             1.33314422036E-1f) * z - 3.33332819422E-1f;
  float small = p * z * x + x;
  float bs = copysignf(big, x);
  return a >= 0.625f ? bs : small;
}

/* lgamma(x) for 2^-126 <= x <= 1e36 (vm_lgamma_ok): x is shifted to
 * z = x + k >= 8 (k <= 8, p = x (x+1) ... (x+k-1)) and Stirling's series
 * is summed there: lgamma(x) = (z - 1/2) log z - z + log(2 pi)/2 + 1/(12 z)
 * - 1/(360 z^3) + 1/(1260 z^5) - log p. The absolute error is a few 1e-6
 * (float rounding of terms of size ~20), the relative error ~2e-7 away
 * from the zeros at 1 and 2. */
static inline int vm_lgamma_ok(float x) { return (x >= 1.17549435e-38f) & (x <= 1e36f); }
static inline float vm_lgammaf(float x) {
  float z = x, p = 1.0f;
  for (int k = 0; k < 8; ++k) {
    int c = z < 8.0f;
    float pz = p * z, z1 = z + 1.0f;
    p = c ? pz : p;
    z = c ? z1 : z;
  }
  float iz = 1.0f / z, iz2 = iz * iz;
  float series = iz * (0.0833333333f - iz2 * (0.00277777778f - iz2 * 0.000793650794f));
  return (z - 0.5f) * vm_logf(z) - z + 0.918938533f + series - vm_logf(p);
}

/* erf(x) to an absolute error below 1.5e-7, for every float (NaN gives NaN),
 * branch-free: Abramowitz and Stegun 7.1.26, 1 - t (a1 + t (a2 + ... a5 t))
 * e^(-x^2) with t = 1 / (1 + 0.3275911 |x|); |x| > 4 gives +-1, which erf(4)
 * rounds to in float. Not relatively accurate near 0 (vm_erff is); enough
 * where 1 + erf(x) carries the result, as in GELU: a few 1e-7 of it. */
static inline float vm_erff_abs(float x) {
  float a = fabsf(x);
  float ac = a < 4.0f ? a : 4.0f;
  float t = 1.0f / (1.0f + 0.3275911f * ac);
  float poly = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t +
                0.254829592f) * t;
  float tail = 1.0f - poly * vm_expf(-ac * ac);
  tail = a > 4.0f ? 1.0f : tail;
  tail = copysignf(tail, x);
  return a == a ? tail : x;
}

/* erf(x) for every float, relatively accurate: for |x| < 0.5 the odd Taylor
 * series to x^13 (truncation below 5e-10), else vm_erff_abs (relative error
 * below 3e-7 there, erf(0.5) = 0.52). */
static inline float vm_erff(float x) {
  float z = x * x;
  float taylor = ((((((1.0f / 9360.0f) * z - 1.0f / 1320.0f) * z + 1.0f / 216.0f) * z -
                    1.0f / 42.0f) * z + 0.1f) * z - 1.0f / 3.0f) * z + 1.0f;
  taylor *= 1.12837916709551257390f * x; /* 2 / sqrt(pi) */
  return fabsf(x) < 0.5f ? taylor : vm_erff_abs(x);
}

/* erfinv(x) for |x| < 1 with (1 - x)(1 + x) normal (vm_erfinv_ok): M. Giles,
 * "Approximating the erfinv function" (GPU Computing Gems, 2011), the
 * single-precision polynomials in w = -log((1 - x)(1 + x)); relative error
 * a few 1e-7. */
static inline int vm_erfinv_ok(float x) {
  float t = (1.0f - x) * (1.0f + x);
  return (t >= 1.17549435e-38f) & (t <= 1.0f);
}
static inline float vm_erfinvf(float x) {
  float w = -vm_logf((1.0f - x) * (1.0f + x));
  float a = w - 2.5f;
  float p = 2.81022636e-08f;
  p = 3.43273939e-07f + p * a;
  p = -3.5233877e-06f + p * a;
  p = -4.39150654e-06f + p * a;
  p = 0.00021858087f + p * a;
  p = -0.00125372503f + p * a;
  p = -0.00417768164f + p * a;
  p = 0.246640727f + p * a;
  p = 1.50140941f + p * a;
  float b = sqrtf(w) - 3.0f;
  float q = -0.000200214257f;
  q = 0.000100950558f + q * b;
  q = 0.00134934322f + q * b;
  q = -0.00367342844f + q * b;
  q = 0.00573950773f + q * b;
  q = -0.0076224613f + q * b;
  q = 0.00943887047f + q * b;
  q = 1.00167406f + q * b;
  q = 2.83297682f + q * b;
  return (w < 5.0f ? p : q) * x;
}

#endif /* TPU_KERNELS_VMATH_H_ */
