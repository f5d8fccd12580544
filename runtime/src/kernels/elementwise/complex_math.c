/* complex_math.c — the complex arithmetic of the elementwise ops: one
 * function per op over runs of double complex values (tpu_ew_cx_fn,
 * elementwise.h), which complex.c's executor calls for nodes with complex
 * operands.
 *
 * Every op computes in double complex whatever the result dtype, and the
 * executor rounds once when it stores (complex64 results are therefore at
 * least as accurate as PyTorch's complex<float> math; results within the
 * OpInfo tolerances), except pow, which follows the CPU's float math for
 * complex64 (see there). Formulas follow c10's complex functions where C99's
 * would differ in value, not only in rounding: the plain product (no NaN
 * recovery), pow's special exponents, expm1 and log1p written for small
 * arguments, sgn(0) = 0, lerp's two-sided form. Ops whose result is real
 * (abs, angle) or bool (eq, ne) write it as the real part; the executor's
 * store keeps only that.
 */
#include <complex.h>
#include <math.h>

#include "kernels/elementwise/elementwise.h"

typedef tpu_ew_cx_t cx;


#define CX_UNARY(op, EXPR)                                                                 \
  void tpu_ew_cx_##op(cx* out, const cx* const* in, int64_t n, const tpu_ew_params_t* p) { \
    (void)p;                                                                               \
    const cx* a = in[0];                                                                   \
    for (int64_t i = 0; i < n; ++i) {                                                      \
      const cx z = a[i];                                                                   \
      out[i] = (EXPR);                                                                     \
    }                                                                                      \
  }

#define CX_BINARY(op, EXPR)                                                                \
  void tpu_ew_cx_##op(cx* out, const cx* const* in, int64_t n, const tpu_ew_params_t* p) { \
    (void)p;                                                                               \
    const cx *a = in[0], *b = in[1];                                                       \
    for (int64_t i = 0; i < n; ++i) {                                                      \
      const cx x = a[i], y = b[i];                                                         \
      out[i] = (EXPR);                                                                     \
    }                                                                                      \
  }

/* The schoolbook product, as c10::complex's operator* (C99's `*` also
 * recovers infinities from NaN parts; PyTorch's does not). */
static inline cx cx_mul(cx x, cx y) {
  double a = creal(x), b = cimag(x), c = creal(y), d = cimag(y);
  return tpu_ew_cx_make(a * c - b * d, a * d + b * c);
}

static inline cx cx_real(double r) { return tpu_ew_cx_make(r, 0.0); }

/* ---- arithmetic ------------------------------------------------------------ */

/* A number attr: real part f, imaginary part fi (0 for a real number). A
 * real one scales both parts as it is; a complex one by the product. */
static inline cx cx_scale(const tpu_ew_params_t* p, int j, cx z) {
  return p->fi[j] == 0.0 ? p->f[j] * z : cx_mul(tpu_ew_cx_make(p->f[j], p->fi[j]), z);
}

/* add/sub/rsub: alpha is the number attr 0. */
CX_BINARY(add, x + cx_scale(p, 0, y))
CX_BINARY(sub, x - cx_scale(p, 0, y))
CX_BINARY(rsub, y - cx_scale(p, 0, x))
CX_BINARY(mul, cx_mul(x, y))
CX_BINARY(div, x / y)
CX_UNARY(neg, -z)
CX_UNARY(reciprocal, 1.0 / z)

/* pow: c10 squares, cubes and roots the special real exponents exactly
 * rather than through exp(y log x); x^0 is 1 and 0^y (y != 0) is 0. Other
 * powers of a complex64 result go through float math (cpowf), as PyTorch's
 * complex<float> pow does: its error grows with the result's magnitude,
 * and double math would differ from the CPU's by more than its tolerance. */
static cx cx_pow1(cx x, cx y, bool single) {
  if (cimag(y) == 0.0) {
    double e = creal(y);
    if (e == 0.0) return cx_real(1.0);
    if (e == 1.0) return x;
    if (e == 2.0) return cx_mul(x, x);
    if (e == 3.0) return cx_mul(cx_mul(x, x), x);
    if (e == 0.5) return csqrt(x);
    if (e == -0.5) return 1.0 / csqrt(x);
    if (e == -1.0) return 1.0 / x;
    if (e == -2.0) return 1.0 / cx_mul(x, x);
  }
  if (creal(x) == 0.0 && cimag(x) == 0.0) return cx_real(0.0);
  if (single) return cpowf((float _Complex)x, (float _Complex)y);
  return cexp(cx_mul(y, clog(x)));
}
CX_BINARY(pow, cx_pow1(x, y, p->mode == TPU_EW_CX_SINGLE))

/* ---- magnitude and phase ------------------------------------------------------ */

CX_UNARY(abs, cx_real(cabs(z)))
CX_UNARY(angle, cx_real(carg(z)))
static cx cx_sgn1(cx z) {
  double m = cabs(z);
  return m == 0.0 ? cx_real(0.0) : z / m;
}
CX_UNARY(sgn, cx_sgn1(z))

/* ---- exponentials and logarithms ------------------------------------------------ */

CX_UNARY(exp, cexp(z))
CX_UNARY(exp2, cexp(z * M_LN2))
/* expm1(x + iy) = (expm1(x) cos y - 2 sin^2(y/2)) + i e^x sin y: no
 * cancellation near 0. */
static cx cx_expm1_1(cx z) {
  double x = creal(z), y = cimag(z), s = sin(0.5 * y);
  return tpu_ew_cx_make(expm1(x) * cos(y) - 2.0 * s * s, exp(x) * sin(y));
}
CX_UNARY(expm1, cx_expm1_1(z))
CX_UNARY(log, clog(z))
CX_UNARY(log2, clog(z) / M_LN2)
CX_UNARY(log10, clog(z) / M_LN10)
/* log1p(z) = log|1 + z| + i arg(1 + z), the modulus through log1p when z is
 * small: |1 + z|^2 - 1 = 2x + x^2 + y^2. */
static cx cx_log1p_1(cx z) {
  double x = creal(z), y = cimag(z);
  if (cabs(z) < 0.5) return tpu_ew_cx_make(0.5 * log1p(x * (2.0 + x) + y * y), atan2(y, 1.0 + x));
  return clog(1.0 + z);
}
CX_UNARY(log1p, cx_log1p_1(z))
CX_UNARY(sqrt, csqrt(z))
CX_UNARY(rsqrt, 1.0 / csqrt(z))
CX_UNARY(sigmoid, 1.0 / (1.0 + cexp(-z)))

/* ---- trigonometric and hyperbolic ------------------------------------------------- */

CX_UNARY(sin, csin(z))
CX_UNARY(cos, ccos(z))
CX_UNARY(tan, ctan(z))
CX_UNARY(asin, casin(z))
CX_UNARY(acos, cacos(z))
CX_UNARY(atan, catan(z))
CX_UNARY(sinh, csinh(z))
CX_UNARY(cosh, ccosh(z))
CX_UNARY(tanh, ctanh(z))
CX_UNARY(asinh, casinh(z))
CX_UNARY(acosh, cacosh(z))
CX_UNARY(atanh, catanh(z))

/* ---- comparisons and selection ------------------------------------------------------ */

CX_BINARY(eq, cx_real(creal(x) == creal(y) && cimag(x) == cimag(y)))
CX_BINARY(ne, cx_real(!(creal(x) == creal(y) && cimag(x) == cimag(y))))

/* where(condition, self, other): the condition arrives as 1 or 0. */
void tpu_ew_cx_where(cx* out, const cx* const* in, int64_t n, const tpu_ew_params_t* p) {
  (void)p;
  for (int64_t i = 0; i < n; ++i) out[i] = creal(in[0][i]) != 0.0 ? in[1][i] : in[2][i];
}

/* masked_fill(self, mask, value): the mask arrives as 1 or 0. */
void tpu_ew_cx_masked_fill(cx* out, const cx* const* in, int64_t n, const tpu_ew_params_t* p) {
  (void)p;
  for (int64_t i = 0; i < n; ++i) out[i] = creal(in[1][i]) != 0.0 ? in[2][i] : in[0][i];
}

/* lerp(self, end, weight), as c10's: from self when |weight| < 0.5, from end
 * otherwise. */
void tpu_ew_cx_lerp(cx* out, const cx* const* in, int64_t n, const tpu_ew_params_t* p) {
  (void)p;
  for (int64_t i = 0; i < n; ++i) {
    cx s = in[0][i], e = in[1][i], w = in[2][i], d = e - s;
    out[i] = cabs(w) < 0.5 ? s + cx_mul(w, d) : e - cx_mul(d, 1.0 - w);
  }
}

/* addcmul/addcdiv(self, tensor1, tensor2, value): value is attr 0. */
void tpu_ew_cx_addcmul(cx* out, const cx* const* in, int64_t n, const tpu_ew_params_t* p) {
  for (int64_t i = 0; i < n; ++i) out[i] = in[0][i] + cx_scale(p, 0, cx_mul(in[1][i], in[2][i]));
}

void tpu_ew_cx_addcdiv(cx* out, const cx* const* in, int64_t n, const tpu_ew_params_t* p) {
  for (int64_t i = 0; i < n; ++i) out[i] = in[0][i] + cx_scale(p, 0, in[1][i] / in[2][i]);
}
