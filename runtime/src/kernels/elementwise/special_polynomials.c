/* kernels/elementwise/special_polynomials.c — the special_functions family: the
 * torch.special orthogonal polynomials (Chebyshev T/U/V/W and their
 * shifted forms, Hermite H/He, Laguerre L, Legendre P) of x and a degree
 * n. Everything runs on the elementwise executor (executor.c).
 *
 * Semantics follow PyTorch's CPU kernels (aten/src/ATen/native/Math.h):
 * the polynomial is evaluated by its three-term recurrence in the compute
 * type (float for float32 and integer inputs, which promote to float32;
 * double for float64), with the same special cases at the interval ends
 * and the same trigonometric forms for large n inside the interval. n is
 * truncated to an integer; negative n gives 0. Half types are rejected,
 * as CPU does (UNIMPLEMENTED: the fallback raises PyTorch's error).
 */
#include <math.h>
#include <stdint.h>

#include "kernels/elementwise/elementwise.h"
#include "kernels/elementwise/tile.h"
#include "kernels/elementwise/specfun_t.h"

/* The degree as int64: NaN, infinite or out-of-range n is negative (the
 * x86 conversion PyTorch relies on gives INT64_MIN), so the result is 0. */
static inline int64_t sfp_deg(double n) {
  return (n == n && fabs(n) < 9.2e18) ? (int64_t)n : -1;
}

/* The polynomials in type T with libm suffix S (f for float, none for
 * double); HL is the Hermite degree limit past which the result is NaN. */
#define SFP_DEFINE(T, SUF, S, HL)                                                        \
  static inline T sfp_cheb_t##SUF(T x, int64_t n) {                                      \
    if (n < 0) return 0;                                                                 \
    if (fabs##S(x) == 1) return (x > 0 || n % 2 == 0) ? (T)1 : (T)-1;                   \
    if (n > 6 && fabs##S(x) < 1) return cos##S((T)n * acos##S(x));                      \
    if (n == 0) return 1;                                                                \
    if (n == 1) return x;                                                                \
    T p = 1, q = x, r = x;                                                               \
    for (int64_t k = 2; k <= n && !isnan(q); k++) {                                      \
      r = (x + x) * q - p;                                                               \
      p = q;                                                                             \
      q = r;                                                                             \
    }                                                                                    \
    return r;                                                                            \
  }                                                                                      \
  static inline T sfp_cheb_u##SUF(T x, int64_t n) {                                      \
    if (n < 0) return 0;                                                                 \
    if (fabs##S(x) == 1) return (x > 0 || n % 2 == 0) ? (T)(n + 1) : (T)(-(n + 1));     \
    if (n > 8 && fabs##S(x) < 1) {                                                       \
      const T t = acos##S(x);                                                            \
      if (sin##S(t) != 0) return sin##S((T)(n + 1) * t) / sin##S(t);                     \
      return (T)(n + 1) * cos##S((T)(n + 1) * t) / x;                                    \
    }                                                                                    \
    if (n == 0) return 1;                                                                \
    if (n == 1) return x + x;                                                            \
    T p = 1, q = x + x, r = q;                                                           \
    for (int64_t k = 2; k <= n && !isnan(q); k++) {                                      \
      r = (x + x) * q - p;                                                               \
      p = q;                                                                             \
      q = r;                                                                             \
    }                                                                                    \
    return r;                                                                            \
  }                                                                                      \
  static inline T sfp_cheb_v##SUF(T x, int64_t n) {                                      \
    if (n < 0) return 0;                                                                 \
    if (fabs##S(x) == 1) {                                                               \
      if (x > 0) return 1;                                                               \
      return n % 2 == 0 ? (T)(n + n + 1) : (T)(-(n + n + 1));                            \
    }                                                                                    \
    if (n > 8 && fabs##S(x) < 1) {                                                       \
      const T t = acos##S(x);                                                            \
      if (sin##S(t / 2) != 1) return cos##S(((T)n + (T)0.5) * t) / cos##S(t / 2);        \
      return n % 2 == 0 ? (T)(n + n + 1) : (T)(-(n + n + 1));                            \
    }                                                                                    \
    if (n == 0) return 1;                                                                \
    if (n == 1) return x + x - 1;                                                        \
    T p = 1, q = x + x - 1, r = q;                                                       \
    for (int64_t k = 2; k <= n && !isnan(q); k++) {                                      \
      r = (x + x) * q - p;                                                               \
      p = q;                                                                             \
      q = r;                                                                             \
    }                                                                                    \
    return r;                                                                            \
  }                                                                                      \
  static inline T sfp_cheb_w##SUF(T x, int64_t n) {                                      \
    if (n < 0) return 0;                                                                 \
    if (fabs##S(x) == 1) {                                                               \
      if (x > 0) return (T)(n + n + 1);                                                  \
      return n % 2 == 0 ? (T)1 : (T)-1;                                                  \
    }                                                                                    \
    if (n > 8 && fabs##S(x) < 1) {                                                       \
      const T t = acos##S(x);                                                            \
      if (cos##S(t / 2) != 1) return sin##S(((T)n + (T)0.5) * t) / sin##S(t / 2);        \
      if (x > 0) return (T)(n + n + 1);                                                  \
      return n % 2 == 0 ? (T)1 : (T)-1;                                                  \
    }                                                                                    \
    if (n == 0) return 1;                                                                \
    if (n == 1) return x + x + 1;                                                        \
    T p = 1, q = x + x + 1, r = q;                                                       \
    for (int64_t k = 2; k <= n && !isnan(q); k++) {                                      \
      r = (x + x) * q - p;                                                               \
      p = q;                                                                             \
      q = r;                                                                             \
    }                                                                                    \
    return r;                                                                            \
  }                                                                                      \
  /* Shifted forms: the polynomial of y = 2x - 1, with their own end cases. */           \
  static inline T sfp_scheb_t##SUF(T x, int64_t n) {                                     \
    const T y = x + x - 1;                                                               \
    if (n < 0) return 0;                                                                 \
    if (x == 1) return 1;                                                                \
    if (x == 0) return n % 2 == 0 ? (T)1 : (T)-1;                                        \
    if (n > 6 && fabs##S(y) < 1) return cos##S((T)n * acos##S(y));                      \
    if (n == 0) return 1;                                                                \
    if (n == 1) return y;                                                                \
    T p = 1, q = y, r = q;                                                               \
    for (int64_t k = 2; k <= n && !isnan(q); k++) {                                      \
      r = (y + y) * q - p;                                                               \
      p = q;                                                                             \
      q = r;                                                                             \
    }                                                                                    \
    return r;                                                                            \
  }                                                                                      \
  static inline T sfp_scheb_u##SUF(T x, int64_t n) {                                     \
    const T y = x + x - 1;                                                               \
    if (n < 0) return 0;                                                                 \
    if (x == 1) return (T)(n + 1);                                                       \
    if (x == 0) return n % 2 == 0 ? (T)(n + 1) : (T)(-(n + 1));                          \
    if (n > 6 && fabs##S(y) < 1) {                                                       \
      const T t = acos##S(y);                                                            \
      if (sin##S(t) != 0) return sin##S((T)(n + 1) * t) / sin##S(t);                     \
      return (T)(n + 1) * cos##S((T)(n + 1) * t) / y;                                    \
    }                                                                                    \
    if (n == 0) return 1;                                                                \
    if (n == 1) return y + y;                                                            \
    T p = 1, q = y + y, r = q;                                                           \
    for (int64_t k = 2; k <= n && !isnan(q); k++) {                                      \
      r = (y + y) * q - p;                                                               \
      p = q;                                                                             \
      q = r;                                                                             \
    }                                                                                    \
    return r;                                                                            \
  }                                                                                      \
  static inline T sfp_scheb_v##SUF(T x, int64_t n) {                                     \
    const T y = x + x - 1;                                                               \
    if (n < 0) return 0;                                                                 \
    if (x == 1) return 1;                                                                \
    if (x == 0) return n % 2 == 0 ? (T)(n + n + 1) : (T)(-(n + n + 1));                  \
    if (n > 6 && fabs##S(y) < 1) {                                                       \
      const T t = acos##S(y);                                                            \
      if (sin##S(t / 2) != 1) return cos##S(((T)n + (T)0.5) * t) / cos##S(t / 2);        \
      return n % 2 == 0 ? (T)(n + n + 1) : (T)(-(n + n + 1));                            \
    }                                                                                    \
    if (n == 0) return 1;                                                                \
    if (n == 1) return y + y - 1;                                                        \
    T p = 1, q = y + y - 1, r = q;                                                       \
    for (int64_t k = 2; k <= n && !isnan(q); k++) {                                      \
      r = (y + y) * q - p;                                                               \
      p = q;                                                                             \
      q = r;                                                                             \
    }                                                                                    \
    return r;                                                                            \
  }                                                                                      \
  static inline T sfp_scheb_w##SUF(T x, int64_t n) {                                     \
    const T y = x + x - 1;                                                               \
    if (n < 0) return 0;                                                                 \
    if (x == 1) return (T)(n + n + 1);                                                   \
    if (x == 0) return n % 2 == 0 ? (T)1 : (T)-1;                                        \
    if (n > 4 && fabs##S(y) < 1) {                                                       \
      const T t = acos##S(y);                                                            \
      if (cos##S(t / 2) != 1) return sin##S(((T)n + (T)0.5) * t) / sin##S(t / 2);        \
      return n % 2 == 0 ? (T)1 : (T)-1;                                                  \
    }                                                                                    \
    if (n == 0) return 1;                                                                \
    if (n == 1) return y + y + 1;                                                        \
    T p = 1, q = y + y + 1, r = q;                                                       \
    for (int64_t k = 2; k <= n && !isnan(q); k++) {                                      \
      r = (y + y) * q - p;                                                               \
      p = q;                                                                             \
      q = r;                                                                             \
    }                                                                                    \
    return r;                                                                            \
  }                                                                                      \
  static inline T sfp_herm_h##SUF(T x, int64_t n) {                                      \
    if (n < 0) return 0;                                                                 \
    if (n == 0) return 1;                                                                \
    if (n == 1) return x + x;                                                            \
    if (n > HL) return (T)NAN;                                                           \
    T p = 1, q = x + x, r = 0;                                                           \
    for (int64_t k = 2; k < n + n; k += 2) {                                             \
      r = (x + x) * q - (T)k * p;                                                        \
      p = q;                                                                             \
      q = r;                                                                             \
    }                                                                                    \
    return r;                                                                            \
  }                                                                                      \
  static inline T sfp_herm_he##SUF(T x, int64_t n) {                                     \
    if (n < 0) return 0;                                                                 \
    if (n == 0) return 1;                                                                \
    if (n == 1) return x;                                                                \
    if (n > HL) return (T)NAN;                                                           \
    T p = 1, q = x, r = q;                                                               \
    for (int64_t k = 1; k < n; k++) {                                                    \
      r = x * q - (T)k * p;                                                              \
      p = q;                                                                             \
      q = r;                                                                             \
    }                                                                                    \
    return r;                                                                            \
  }                                                                                      \
  static inline T sfp_laguerre##SUF(T x, int64_t n) {                                    \
    if (n < 0) return 0;                                                                 \
    if (fabs##S(x) == 0) return 1;                                                       \
    if (n == 0) return 1;                                                                \
    if (n == 1) return 1 - x;                                                            \
    T p = 1, q = 1 - x, r = q;                                                           \
    for (int64_t k = 1; k < n && !isnan(q); k++) {                                       \
      r = (((T)(k + k) + (1 - x)) * q - (T)k * p) / (T)(k + 1);                          \
      p = q;                                                                             \
      q = r;                                                                             \
    }                                                                                    \
    return r;                                                                            \
  }                                                                                      \
  static inline T sfp_legendre##SUF(T x, int64_t n) {                                    \
    if (n < 0) return 0;                                                                 \
    if (fabs##S(x) == 1) return (x > 0 || n % 2 == 0) ? (T)1 : (T)-1;                   \
    if (n == 0) return 1;                                                                \
    if (n == 1) return x;                                                                \
    T p = 1, q = x, r = q;                                                               \
    for (int64_t k = 1; k < n && !isnan(q); k++) {                                       \
      r = ((T)(k + k + 1) * x * q - (T)k * p) / (T)(k + 1);                              \
      p = q;                                                                             \
      q = r;                                                                             \
    }                                                                                    \
    return r;                                                                            \
  }
SFP_DEFINE(float, _f, f, 128)
SFP_DEFINE(double, , , 512)

/* Tile functions: x = input 0, n = input 1 (in the compute type). */
#define SFP_TILES(op)                                                      \
  EW_B(sfp_##op, F32, float, float, r = sfp_##op##_f(x, sfp_deg(y)))       \
  EW_B(sfp_##op, F64, double, double, r = sfp_##op(x, sfp_deg(y)))
SFP_TILES(cheb_t)
SFP_TILES(cheb_u)
SFP_TILES(cheb_v)
SFP_TILES(cheb_w)
SFP_TILES(scheb_t)
SFP_TILES(scheb_u)
SFP_TILES(scheb_v)
SFP_TILES(scheb_w)
SFP_TILES(herm_h)
SFP_TILES(herm_he)
SFP_TILES(laguerre)
SFP_TILES(legendre)

/* CPU dispatches these over float32/float64 only: half types raise. */
static tpu_status_t prep_no_half(const tpu_node_t* node, tpu_dtype_t common,
                                 tpu_ew_params_t* p) {
  (void)node, (void)p;
  if (common == TPU_DTYPE_F16 || common == TPU_DTYPE_BF16)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "not implemented for half types");
  return TPU_OK;
}

#define SFP_IMPL(op) EW_IMPL(k_##op, FLOAT, EW_F(sfp_##op), .prepare = prep_no_half)
SFP_IMPL(cheb_t)
SFP_IMPL(cheb_u)
SFP_IMPL(cheb_v)
SFP_IMPL(cheb_w)
SFP_IMPL(scheb_t)
SFP_IMPL(scheb_u)
SFP_IMPL(scheb_v)
SFP_IMPL(scheb_w)
SFP_IMPL(herm_h)
SFP_IMPL(herm_he)
SFP_IMPL(laguerre)
SFP_IMPL(legendre)

/* ---- Bessel and Airy functions of one argument, igamma/igammac ------------------- */

/* float32 (and half, if a caller allowed it) in float, float64 in double,
 * as PyTorch's CPU kernels (specfun_t.h). */
#define SFB_TILES(op)                                             \
  EW_U(sfb_##op, F32, float, float, r = sft_##op##_f(x))          \
  EW_U(sfb_##op, F64, double, double, r = sft_##op(x))
SFB_TILES(bessel_y0)
SFB_TILES(bessel_y1)
SFB_TILES(modified_bessel_i0)
SFB_TILES(modified_bessel_i1)
SFB_TILES(modified_bessel_k0)
SFB_TILES(modified_bessel_k1)
SFB_TILES(scaled_modified_bessel_k0)
SFB_TILES(scaled_modified_bessel_k1)
SFB_TILES(spherical_bessel_j0)
SFB_TILES(airy_ai)

#define SFB_IMPL(op) EW_IMPL(k_##op, FLOAT, EW_F(sfb_##op), .prepare = prep_no_half)
SFB_IMPL(bessel_y0)
SFB_IMPL(bessel_y1)
SFB_IMPL(modified_bessel_i0)
SFB_IMPL(modified_bessel_i1)
SFB_IMPL(modified_bessel_k0)
SFB_IMPL(modified_bessel_k1)
SFB_IMPL(scaled_modified_bessel_k0)
SFB_IMPL(scaled_modified_bessel_k1)
SFB_IMPL(spherical_bessel_j0)
SFB_IMPL(airy_ai)

/* igamma(a, x) / igammac(a, x): floating dtypes only (integers raise, as CPU);
 * half types compute in float. */
EW_B(sfb_igamma, F32, float, float, r = sft_calc_igamma_f(x, y))
EW_B(sfb_igamma, F64, double, double, r = sft_calc_igamma(x, y))
EW_B(sfb_igammac, F32, float, float, r = sft_calc_igammac_f(x, y))
EW_B(sfb_igammac, F64, double, double, r = sft_calc_igammac(x, y))
EW_IMPL(k_igamma, PROMOTE, EW_F(sfb_igamma))
EW_IMPL(k_igammac, PROMOTE, EW_F(sfb_igammac))

#define SFB_ROW(op, arg) \
  EW_ROW("special_" #op, arg, "", "out", "special_" #op " special_" #op ".out", k_##op)

/* special_<op>(x, n) with its Scalar x / Scalar n forms and out= forms. */
#define SFP_ROW(op, impl)                                                               \
  EW_ROW("special_" #op, "x,n", "", "out",                                              \
         "special_" #op " special_" #op ".x_scalar special_" #op ".n_scalar special_" #op \
         ".out special_" #op ".x_scalar_out special_" #op ".n_scalar_out",              \
         impl)

static const tpu_op_def_t g_rows[] = {
    SFP_ROW(chebyshev_polynomial_t, k_cheb_t),
    SFP_ROW(chebyshev_polynomial_u, k_cheb_u),
    SFP_ROW(chebyshev_polynomial_v, k_cheb_v),
    SFP_ROW(chebyshev_polynomial_w, k_cheb_w),
    SFP_ROW(shifted_chebyshev_polynomial_t, k_scheb_t),
    SFP_ROW(shifted_chebyshev_polynomial_u, k_scheb_u),
    SFP_ROW(shifted_chebyshev_polynomial_v, k_scheb_v),
    SFP_ROW(shifted_chebyshev_polynomial_w, k_scheb_w),
    SFP_ROW(hermite_polynomial_h, k_herm_h),
    SFP_ROW(hermite_polynomial_he, k_herm_he),
    SFP_ROW(laguerre_polynomial_l, k_laguerre),
    SFP_ROW(legendre_polynomial_p, k_legendre),
    SFB_ROW(bessel_y0, "self"),
    SFB_ROW(bessel_y1, "self"),
    SFB_ROW(modified_bessel_i0, "self"),
    SFB_ROW(modified_bessel_i1, "self"),
    SFB_ROW(modified_bessel_k0, "self"),
    SFB_ROW(modified_bessel_k1, "self"),
    SFB_ROW(scaled_modified_bessel_k0, "x"),
    SFB_ROW(scaled_modified_bessel_k1, "x"),
    SFB_ROW(spherical_bessel_j0, "x"),
    SFB_ROW(airy_ai, "x"),
    EW_ROW("igamma", "self,other", "", "out", "igamma igamma.out igamma_", k_igamma),
    EW_ROW("igammac", "self,other", "", "out", "igammac igammac.out igammac_", k_igammac),
};

const tpu_op_family_t tpu_family_special_functions = {
    "special_functions", g_rows, (int32_t)(sizeof(g_rows) / sizeof(g_rows[0]))};
