/* kernels/specfun_t.h — special functions written once over an element type
 * (internal): the incomplete gamma functions (specfun_igamma.inc) and the
 * Bessel/Airy functions of torch.special (specfun_bessel.inc), ported from
 * ATen's native/Math.h templates. Each .inc is included twice, with SF_T
 * float (functions named <name>_f) and SF_T double (<name>): ATen evaluates
 * float (and half) tensors in float and double tensors in double, and
 * following it keeps results equal to CPU's to rounding, also where the
 * float evaluation itself loses digits.
 *
 * <tgmath.h> makes the libm calls generic, so `exp(x)` is expf for a float
 * x and exp for a double, and mixed expressions promote as in C++.
 */
#ifndef TPU_KERNELS_SPECFUN_T_H_
#define TPU_KERNELS_SPECFUN_T_H_

#include <float.h>
#include <stdbool.h>
#include <stdint.h>
#include <tgmath.h>

#include "kernels/specfun.h"

/* lgamma without glibc's global signgam (threads would race on it). */
static inline float sft_lgammaf(float x) {
  int sign;
  return lgammaf_r(x, &sign);
}
static inline double sft_lgamma(double x) {
  int sign;
  return lgamma_r(x, &sign);
}

#define SF_CAT_(a, b) a##b
#define SF_CAT(a, b) SF_CAT_(a, b)
#define SF_FN(n) SF_CAT(n, SF_SUF)

#define SF_T float
#define SF_SUF _f
#define SF_IS_DOUBLE 0
#define SF_EPS FLT_EPSILON
#define SF_LGAMMA sft_lgammaf
#include "kernels/specfun_igamma.inc"
#include "kernels/specfun_bessel.inc"
#undef SF_T
#undef SF_SUF
#undef SF_IS_DOUBLE
#undef SF_EPS
#undef SF_LGAMMA

#define SF_T double
#define SF_SUF
#define SF_IS_DOUBLE 1
#define SF_EPS DBL_EPSILON
#define SF_LGAMMA sft_lgamma
#include "kernels/specfun_igamma.inc"
#include "kernels/specfun_bessel.inc"
#undef SF_T
#undef SF_SUF
#undef SF_IS_DOUBLE
#undef SF_EPS
#undef SF_LGAMMA

#endif /* TPU_KERNELS_SPECFUN_T_H_ */
