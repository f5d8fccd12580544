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

#endif /* TPU_KERNELS_VMATH_H_ */
