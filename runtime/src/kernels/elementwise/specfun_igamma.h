/* kernels/elementwise/specfun_igamma.h — the regularized incomplete gamma functions
 * P(a, x) = gamma(a, x) / Gamma(a) (torch.igamma) and Q = 1 - P
 * (torch.igammac), in double (internal; included by specfun_t.h).
 *
 * Methods (DLMF chapter 8):
 *  - the prefactor x^a e^-x / Gamma(a) in a form without cancellation for
 *    large a: sqrt(a / 2pi) exp(a (log1p(s) - s)) / G*(a), s = (x - a)/a,
 *    with G*(a) = Gamma(a) / (sqrt(2pi) a^(a-1/2) e^-a) from Stirling's
 *    series (sfg_prefix);
 *  - the power series P = x^a e^-x / Gamma(a+1) sum_n x^n / ((a+1)...(a+n))
 *    (DLMF 8.7.1 / 8.5.1) where x < a + 1;
 *  - for small x (x <= 1.5 and a <= x), Q from
 *    Q = -expm1(a log x - log Gamma(a+1)) - x^a / Gamma(a) sum_{n>=1} (-x)^n / (n! (a+n))
 *    (DLMF 8.7.3), which keeps Q's relative accuracy when P is near 1;
 *  - the continued fraction of Gamma(a, x) (DLMF 8.9.2, in its even form),
 *    evaluated by the modified Lentz algorithm, where x >= a + 1;
 *  - Temme's uniform asymptotic expansion (DLMF 8.12.3-8.12.4)
 *    Q = erfc(eta sqrt(a/2)) / 2 + exp(-a eta^2 / 2) / sqrt(2 pi a) sum_k C_k(eta) a^-k
 *    for a >= 20 and |x - a| <= 0.3 a (where the other two need O(sqrt a)
 *    terms), C_k from their Taylor coefficients (sfc_temme).
 * Whichever of P and Q is below about 1/2 is computed; the other is 1
 * minus it.
 *
 * Edge values follow PyTorch (as SciPy's gammainc): NaN for a < 0 or
 * x < 0; a = 0: P = 1, Q = 0 for x > 0 (NaN at x = 0);
 * x = 0: P = 0, Q = 1; a = inf: P = 0, Q = 1 (NaN if x = inf too);
 * x = inf: P = 1, Q = 0; otherwise a NaN argument gives NaN.
 *
 * float tensors are evaluated in double and rounded (the results are at
 * least as accurate as CPU's float evaluation, within OpInfo tolerance of
 * it).
 */
#ifndef TPU_KERNELS_SPECFUN_IGAMMA_H_
#define TPU_KERNELS_SPECFUN_IGAMMA_H_

#include <float.h>
#include <math.h>

#include "kernels/elementwise/specfun_coef.h"

#define SFG_EPS 1.1102230246251565e-16 /* 2^-53 */

static inline double sfg_lgamma(double x) {
  int sign;
  return lgamma_r(x, &sign); /* not lgamma: its global signgam races between threads */
}

/* log Gamma(1 + a) for small a: 1 + a is rounded to u first, so the
 * rounding r = a - (u - 1) (exact) is put back to first order through
 * d/du log Gamma(u) = psi(u) ~ -0.5772 near u = 1 (a = 1e-10 would
 * otherwise lose six digits). */
static inline double sfg_lgamma1p(double a) {
  const double u = 1 + a, r = a - (u - 1);
  return sfg_lgamma(u) - 0.57721566490153286061 * r;
}

/* log(1 + s) - s, by its series -s^2/2 + s^3/3 - ... for small |s|
 * (terms (-1)^(k+1) s^k / k, with 1/k from a table). */
static inline double sfg_log1pmx(double s) {
  static const double inv[40] = {
      0,        1,        1. / 2,  1. / 3,  1. / 4,  1. / 5,  1. / 6,  1. / 7,
      1. / 8,   1. / 9,   1. / 10, 1. / 11, 1. / 12, 1. / 13, 1. / 14, 1. / 15,
      1. / 16,  1. / 17,  1. / 18, 1. / 19, 1. / 20, 1. / 21, 1. / 22, 1. / 23,
      1. / 24,  1. / 25,  1. / 26, 1. / 27, 1. / 28, 1. / 29, 1. / 30, 1. / 31,
      1. / 32,  1. / 33,  1. / 34, 1. / 35, 1. / 36, 1. / 37, 1. / 38, 1. / 39};
  if (fabs(s) > 0.25) return log1p(s) - s;
  double pw = -s * s, sum = 0; /* pw = (-1)^(k+1) s^k */
  for (int k = 2; k < 40; ++k) {
    const double t = pw * inv[k];
    sum += t;
    if (fabs(t) <= SFG_EPS * fabs(sum)) break;
    pw *= -s;
  }
  return sum;
}

/* log G*(a) for a >= 10 by Stirling's series sum_j B_2j / (2j (2j-1) a^(2j-1)). */
static inline double sfg_log_gstar(double a) {
  static const double b[8] = {8.33333333333333333333e-2,  -2.77777777777777777778e-3,
                              7.93650793650793650794e-4,  -5.95238095238095238095e-4,
                              8.41750841750841750842e-4,  -1.91752691752691752692e-3,
                              6.41025641025641025641e-3,  -2.95506535947712418301e-2};
  const double w = 1 / (a * a);
  double acc = b[7];
  for (int j = 6; j >= 0; --j) acc = acc * w + b[j];
  return acc / a;
}

/* x^a e^-x / Gamma(a) for a > 0, x > 0: the plain logarithms for small
 * a or x far below a (where s -> -1 would lose log1p(s)'s argument). */
static inline double sfg_prefix(double a, double x) {
  const double s = (x - a) / a;
  if (a < 10 || s < -0.5) return exp(a * log(x) - x - sfg_lgamma(a));
  return sqrt(a / (2 * 3.14159265358979323846)) * exp(a * sfg_log1pmx(s) - sfg_log_gstar(a));
}

/* P by the power series (x < a + 1). */
static inline double sfg_p_series(double a, double x) {
  const double pre = sfg_prefix(a, x) / a;
  if (pre == 0) return 0;
  double term = 1, sum = 1;
  for (int n = 1; n < 10000; ++n) {
    term *= x / (a + n);
    sum += term;
    if (term <= SFG_EPS * sum) break;
  }
  return pre * sum;
}

/* Q by the small-x series (DLMF 8.7.3), x <= 1.5. */
static inline double sfg_q_small_x(double a, double x) {
  double t = 1, sum = 0;
  for (int n = 1; n < 200; ++n) {
    t *= -x / n;
    const double term = t / (a + n);
    sum += term;
    if (fabs(term) <= SFG_EPS * fabs(sum)) break;
  }
  const double e = a * log(x) - sfg_lgamma1p(a); /* log(x^a / Gamma(a+1)) */
  return -expm1(e) - a * exp(e) * sum;
}

/* Q by the continued fraction Gamma(a,x) = x^a e^-x / f,
 * f = b_0 + a_1 / (b_1 + a_2 / (b_2 + ...)), b_n = x + 1 - a + 2n,
 * a_n = -n (n - a) (x >= a + 1), its convergents A_n / B_n from the
 * three-term recurrences X_n = b_n X_(n-1) + a_n X_(n-2), rescaled by
 * 2^-512 whenever they grow past 2^512 (one division per term). */
static inline double sfg_q_fraction(double a, double x) {
  const double pre = sfg_prefix(a, x);
  if (pre == 0) return 0;
  double b = x + 1 - a;
  double A0 = 1, A1 = b, B0 = 0, B1 = 1, r = A1 / B1;
  for (int n = 1; n < 10000; ++n) {
    const double an = -n * (n - a);
    b += 2;
    const double A2 = b * A1 + an * A0, B2 = b * B1 + an * B0;
    A0 = A1, A1 = A2, B0 = B1, B1 = B2;
    if (fabs(A1) > 0x1p512 || fabs(B1) > 0x1p512) {
      A0 *= 0x1p-512, A1 *= 0x1p-512, B0 *= 0x1p-512, B1 *= 0x1p-512;
    }
    if (B1 == 0) continue;
    const double rn = A1 / B1;
    const bool done = fabs(rn - r) <= SFG_EPS * fabs(rn);
    r = rn;
    if (done) break;
  }
  return pre / r;
}

/* Temme's expansion: Q (upper = 1) or P (upper = 0), a >= 20. */
static inline double sfg_temme(double a, double x, int upper) {
  const double s = (x - a) / a;
  /* eta = sign(x - a) sqrt(2 (lambda - 1 - log(lambda))), lambda = x / a */
  const double eta2 = -2 * sfg_log1pmx(s);
  const double eta = s < 0 ? -sqrt(eta2) : sqrt(eta2);
  /* sum_k C_k(eta) a^-k by Horner in 1/a over the rows that matter:
   * |C_k| < 0.04 for 1 <= k <= 15 and |eta| <= 0.45, so the rows left out
   * (a^-k < 2^-56) add below 2^-60 (a >= 20 needs at most 13 rows). */
  int rows = 25;
  const double need = 56 / log2(a);
  if (need + 1 < rows) rows = (int)need + 1;
  const double inv_a = 1 / a;
  double sum = 0;
  for (int k = rows - 1; k >= 0; --k) {
    const double* dk = sfc_temme[k];
    double ck = dk[24];
    for (int n = 23; n >= 0; --n) ck = ck * eta + dk[n];
    sum = sum * inv_a + ck;
  }
  const double r = exp(-0.5 * a * eta2) / sqrt(2 * 3.14159265358979323846 * a) * sum;
  const double e = eta * sqrt(a / 2);
  return upper ? 0.5 * erfc(e) + r : 0.5 * erfc(-e) - r;
}

/* P (upper = 0) or Q (upper = 1). */
static inline double sfg_igamma(double a, double x, int upper) {
  /* the edge values, tested in PyTorch's order (a = inf decides before a
   * NaN x does) */
  if (a < 0 || x < 0) return NAN;
  if (a == 0) return x > 0 ? (upper ? 0 : 1) : NAN;
  if (x == 0) return upper ? 1 : 0;
  if (isinf(a)) return isinf(x) ? NAN : (upper ? 1 : 0);
  if (isinf(x)) return upper ? 0 : 1;
  if (a != a || x != x) return NAN;
  if (a >= 20 && fabs(x - a) <= 0.3 * a) return sfg_temme(a, x, upper);
  if (x <= 1.5 && a <= x) {
    const double q = sfg_q_small_x(a, x);
    return upper ? q : 1 - q;
  }
  if (x < a + 1) {
    const double p = sfg_p_series(a, x);
    return upper ? 1 - p : p;
  }
  const double q = sfg_q_fraction(a, x);
  return upper ? q : 1 - q;
}

static inline double sft_calc_igamma(double a, double x) { return sfg_igamma(a, x, 0); }
static inline double sft_calc_igammac(double a, double x) { return sfg_igamma(a, x, 1); }
static inline float sft_calc_igamma_f(float a, float x) {
  return (float)sfg_igamma((double)a, (double)x, 0);
}
static inline float sft_calc_igammac_f(float a, float x) {
  return (float)sfg_igamma((double)a, (double)x, 1);
}

#endif /* TPU_KERNELS_SPECFUN_IGAMMA_H_ */
