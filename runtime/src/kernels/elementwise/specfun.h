/* kernels/elementwise/specfun.h — special functions in double precision (internal):
 * Hurwitz zeta, digamma, trigamma, polygamma, erfinv, the normal quantile
 * ndtri, erfcx, log_ndtr, entr, and the double (and float) names of the
 * Bessel functions I0/I1 (plain and scaled) and J0/J1 of specfun_t.h.
 * The elementwise kernels evaluate these in double for every floating
 * dtype and round, except where CPU's float evaluation itself decides the
 * value (the float versions below say why).
 *
 * The methods are the textbook ones (DLMF chapters 5, 7, 25), with
 * Bernoulli-number coefficients computed for this file; ndtri uses the
 * Cephes rational approximations (tables in specfun_coef.h, 3-clause BSD).
 */
#ifndef TPU_KERNELS_SPECFUN_H_
#define TPU_KERNELS_SPECFUN_H_

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/elementwise/specfun_t.h"

#define SF_PI 3.14159265358979323846
#define SF_SQRT1_2 0.70710678118654752440
#define SF_1_SQRTPI 0.56418958354775628695

/* B_2j / (2j)! for j = 1..12 (Euler-Maclaurin corrections). */
static const double sf_bern_over_fact[12] = {
    8.33333333333333333333e-2,   -1.38888888888888888889e-3,  3.30687830687830687831e-5,
    -8.26719576719576719577e-7,  2.08767569878680989792e-8,   -5.28419013868749318485e-10,
    1.33825365306846788328e-11,  -3.38968029632258286683e-13, 8.58606205627784456414e-15,
    -2.17486869855806187304e-16, 5.50900282836022951520e-18,  -1.39544646858125233407e-19};

/* B_2j / (2j) for j = 1..8 (the asymptotic series of digamma). */
static const double sf_bern_over_2j[8] = {
    8.33333333333333333333e-2, -8.33333333333333333333e-3, 3.96825396825396825397e-3,
    -4.16666666666666666667e-3, 7.57575757575757575758e-3, -2.10927960927960927961e-2,
    8.33333333333333333333e-2,  -4.43259803921568627451e-1};

/* Hurwitz zeta(s, q) = sum_{k>=0} (q + k)^-s, s > 1. The terms are summed
 * directly until q + k >= 10 (returning early if they become negligible);
 * the tail from w = q + N is the Euler-Maclaurin formula
 * w^(1-s)/(s-1) + w^-s/2 + sum_j B_2j/(2j)! s(s+1)...(s+2j-2) w^(-s-2j+1).
 * Edge values as PyTorch: s = 1 gives inf, s < 1 NaN; q <= 0 an integer
 * gives inf, q < 0 with s not an integer NaN. */
#define ZETA_WALK_MAX 65536.0 /* further below 0, sf_zeta shifts q instead of walking */
static inline double sf_zeta(double s, double q) {
  if (s == 1) return INFINITY;
  if (s < 1) return NAN;
  if (q <= 0) {
    if (q == floor(q)) return INFINITY;
    if (s != floor(s)) return NAN;
  }
  if (q < -ZETA_WALK_MAX) {
    /* Far below 0 (s is an integer here): walking up term by term, as CPU
     * does, takes -q steps (seconds per element at -1e8). With q = -(N + f),
     * the terms of negative base are (-1)^s (f + j)^-s for j = 0..N, so
     * zeta(s, q) = (-1)^s [zeta(s, f) - zeta(s, f + N + 1)] + zeta(s, 1 - f),
     * each a short walk. */
    const double m = ceil(-q), f = -(q + m - 1);
    const double sign = fmod(s, 2) == 0 ? 1.0 : -1.0;
    return sign * (sf_zeta(s, f) - sf_zeta(s, f + m)) + sf_zeta(s, q + m);
  }
  double sum = 0, w = q;
  /* (a q below 0 walks up to 10 term by term, as CPU; bounded) */
  for (int64_t k = 0; k < ((int64_t)1 << 26) && (k < 9 || w < 10); ++k, w += 1) {
    const double t = pow(w, -s);
    sum += t;
    if (k >= 9 && fabs(t) <= 0x1p-54 * fabs(sum)) return sum;
  }
  const double ws = pow(w, -s);
  sum += w * ws / (s - 1) + 0.5 * ws;
  double poch = s, pw = ws / w; /* s(s+1)..(s+2j-2), w^(-s-2j+1) */
  for (int j = 0; j < 12; ++j) {
    const double t = sf_bern_over_fact[j] * poch * pw;
    sum += t;
    if (fabs(t) <= 0x1p-54 * fabs(sum)) break;
    poch *= (s + 2 * j + 1) * (s + 2 * j + 2);
    pw /= w * w;
  }
  return sum;
}

/* digamma: psi(x) = psi(1 - x) - pi cot(pi x) for x < 0 (the cotangent of
 * the fractional part, exact in double); psi(x) = psi(x + 1) - 1/x up to
 * x >= 10; then log x - 1/(2x) - sum_j B_2j / (2j x^2j). psi(+-0) is -+inf
 * and psi of a negative integer NaN, as PyTorch. */
static inline double sf_digamma(double x) {
  if (x == 0) return copysign(INFINITY, -x);
  double acc = 0;
  if (x < 0) {
    if (x == trunc(x)) return NAN;
    const double frac = x - trunc(x);
    acc = -SF_PI / tan(SF_PI * frac);
    x = 1 - x;
  }
  for (; x < 10; x += 1) acc -= 1 / x;
  const double w = 1 / (x * x);
  double s = sf_bern_over_2j[7];
  for (int j = 6; j >= 0; --j) s = s * w + sf_bern_over_2j[j];
  return acc + log(x) - 0.5 / x - s * w;
}

/* float tensors: the double value rounded (within a float ulp or two of
 * CPU's float evaluation, which also takes the cotangent in double). */
static inline float sf_digamma_f(float x) { return (float)sf_digamma((double)x); }

/* trigamma in type T (libm suffix S): psi'(x) = pi^2 / sin^2(pi x) -
 * psi'(1 - x) for x < 1/2; psi'(x) = psi'(x + 1) + 1/x^2 up to x >= 8
 * (the first omitted term, B_16 / x^17, is then below 3e-14 of the sum);
 * then 1/x + 1/(2x^2) + sum_j B_2j / x^(2j+1). The float version takes
 * sin(pi x) in float like CPU: next to the poles that rounding decides
 * the value. */
#define SF_TRIGAMMA(T, SUF, S)                                                      \
  static inline T sf_trigamma##SUF(T x) {                                           \
    T acc = 0, sign = 1;                                                            \
    if (x < (T)0.5) {                                                               \
      const T pi = (T)SF_PI, sn = sin##S(pi * x);                                   \
      acc = -(pi * pi) / (sn * sn);                                                 \
      sign = -1;                                                                    \
      x = 1 - x;                                                                    \
    }                                                                               \
    for (; x < 8; x += 1) acc += 1 / (x * x);                                       \
    const T w = 1 / (x * x);                                                        \
    T s = (T)(2 * 7) * (T)sf_bern_over_2j[6];                                       \
    for (int j = 5; j >= 0; --j) s = s * w + (T)(2 * (j + 1)) * (T)sf_bern_over_2j[j]; \
    acc += (1 + 1 / (2 * x) + s * w) / x;                                           \
    return sign * acc;                                                              \
  }
SF_TRIGAMMA(double, , )
SF_TRIGAMMA(float, _f, f)

/* polygamma(n, x) = (-1)^(n+1) n! zeta(n + 1, x) for n >= 2. */
static inline double sf_polygamma(int64_t n, double x) {
  if (n == 0) return sf_digamma(x);
  if (n == 1) return sf_trigamma(x);
  int sign;
  const double fact = exp(lgamma_r((double)n + 1, &sign));
  return ((n % 2) ? 1.0 : -1.0) * fact * sf_zeta((double)n + 1, x);
}

/* float: n! as expf(lgammaf(n + 1)) in float, as CPU (its rounding is
 * several float ulps for n >= 20 and shows in the result). */
static inline float sf_polygamma_f(int64_t n, float x) {
  if (n == 0) return sf_digamma_f(x);
  if (n == 1) return sf_trigamma_f(x);
  int sign;
  const float fact = expf(lgammaf_r((float)n + 1, &sign));
  return ((n % 2) ? 1.0f : -1.0f) * fact * (float)sf_zeta((double)((float)n + 1), (double)x);
}

/* erfinv(y): a first guess refined by two Halley steps on erf(x) = y
 * (cubic convergence). The guess: for |y| < 1e-3 the series
 * sqrt(pi)/2 (y + pi y^3 / 12); else Winitzki's closed form (relative
 * error ~2e-3). For |y| >= 1/2 the residual is taken as (1 - |y|) -
 * erfc(|x|), exact in its first term, so values near +-1 keep their
 * digits. */
static inline double sf_erfinv(double y) {
  const double ay = fabs(y);
  if (!(ay <= 1.0)) return NAN;
  if (ay == 1.0) return copysign(INFINITY, y);
  double x;
  if (ay < 1e-3) {
    x = 0.88622692545275801365 * ay * (1 + SF_PI / 12 * ay * ay);
  } else {
    const double a = 0.147, l = log((1 - ay) * (1 + ay));
    const double u = 2 / (SF_PI * a) + l / 2;
    x = sqrt(sqrt(u * u - l / a) - u);
  }
  for (int i = 0; i < 2 && x > 0; ++i) {
    const double f = ay < 0.5 ? erf(x) - ay : (1 - ay) - erfc(x);
    const double u = f / (2 * SF_1_SQRTPI * exp(-x * x)); /* f / f' */
    x -= u / (1 + x * u);                                 /* f''/f' = -2x */
  }
  return copysign(x, y);
}

/* The x with Phi(x) = p (the standard normal quantile). Central range
 * e^-2 < p <= 1 - e^-2: x = sqrt(2 pi) (s + s^3 R(s^2)), s = p - 1/2.
 * Tails: with q = min(p, 1 - p) and z = sqrt(-2 log q),
 * |x| = z - log(z)/z - R(1/z)/z, one table for z < 8 and one beyond. */
static inline double sf_ndtri(double p) {
  const double e2 = 0.13533528323661269189; /* exp(-2) */
  if (p == 0) return -INFINITY;
  if (p == 1) return INFINITY;
  if (!(p > 0 && p < 1)) return NAN;
  if (p > e2 && p <= 1 - e2) {
    const double s = p - 0.5, s2 = s * s;
    const double r = sfe_ratio(s2, sfc_ndtri_mid_num, SFC_LEN(sfc_ndtri_mid_num),
                               sfc_ndtri_mid_den, SFC_LEN(sfc_ndtri_mid_den));
    return 2.50662827463100050242 * (s + s * (s2 * r));
  }
  const bool upper = p > 1 - e2;
  const double q = upper ? 1 - p : p;
  const double z = sqrt(-2 * log(q)), iz = 1 / z;
  const double r = z < 8 ? sfe_ratio(iz, sfc_ndtri_tail_num, SFC_LEN(sfc_ndtri_tail_num),
                                     sfc_ndtri_tail_den, SFC_LEN(sfc_ndtri_tail_den))
                         : sfe_ratio(iz, sfc_ndtri_far_num, SFC_LEN(sfc_ndtri_far_num),
                                     sfc_ndtri_far_den, SFC_LEN(sfc_ndtri_far_den));
  const double x = (z - log(z) / z) - iz * r;
  return upper ? x : -x;
}

/* The double (and float) names the elementwise kernels use. */
static inline double sf_i0(double x) { return sft_modified_bessel_i0(x); }
static inline double sf_i0e(double x) { return sfb_i0e(x); }
static inline double sf_i1(double x) { return sft_modified_bessel_i1(x); }
static inline double sf_i1e(double x) { return sfb_i1e(x); }
static inline double sf_bessel_j0(double x) { return sft_bessel_j0(x); }
static inline double sf_bessel_j1(double x) { return sft_bessel_j1(x); }
static inline float sf_bessel_j0_f(float x) { return sft_bessel_j0_f(x); }
static inline float sf_bessel_j1_f(float x) { return sft_bessel_j1_f(x); }

/* erfcx(x) = exp(x^2) erfc(x). For |x| <= 26 the product is accurate to a
 * few 1e-14 (the relative error of exp(x^2) is x^2 ulp); beyond, erfc
 * underflows and the asymptotic series 1/(x sqrt(pi)) sum (-1)^k
 * (2k-1)!! / (2x^2)^k converges to double precision in a few terms. */
static inline double sf_erfcx(double x) {
  if (x != x) return x;
  if (x < 0) {
    if (x < -26.7) return INFINITY;
    if (x < -6.1) return 2 * exp(x * x);
    return 2 * exp(x * x) - sf_erfcx(-x);
  }
  if (x <= 26.0) return exp(x * x) * erfc(x);
  if (x > 5e7) return SF_1_SQRTPI / x;
  double t = 1 / (2 * x * x), term = 1, sum = 1;
  for (int k = 1; k < 12; ++k) {
    term *= -(2 * k - 1) * t;
    sum += term;
  }
  return SF_1_SQRTPI / x * sum;
}

/* log of the standard normal CDF. */
static inline double sf_log_ndtr(double x) {
  double t = x * SF_SQRT1_2;
  if (x < -1.0) return log(sf_erfcx(-t) / 2) - t * t;
  return log1p(-erfc(t) / 2);
}

/* -x log(x), -inf for x < 0... as torch.special.entr: NaN stays NaN,
 * x > 0: -x log x, x == 0: 0, x < 0: -inf. */
static inline double sf_entr(double x) {
  if (x != x) return x;
  if (x > 0) return -x * log(x);
  if (x == 0) return 0;
  return -INFINITY;
}

#endif /* TPU_KERNELS_SPECFUN_H_ */
