/* kernels/elementwise/op_table.c — the elementwise ops: tile functions per compute
 * type, each op's tpu_ew_impl_t (dtype rule, parameters, checks) and the
 * family's rows with their ATen bindings.
 *
 * Tile functions come from the generators of tile.h.
 * Semantics follow PyTorch's CPU kernels; integer arithmetic wraps like
 * PyTorch's (done on uint64 to keep C's signed-overflow rules out of it).
 */
#include <string.h>
#include <tgmath.h>

#include "kernels/elementwise/elementwise.h"
#include "kernels/elementwise/tile.h"
#include "kernels/common/vmath.h"

/* The hot arithmetic (what fused programs run on cache-resident tiles, the
 * optimizers' update ops): float32 also built for AVX-512 and AVX2 (the
 * default SSE2 build is 4 lanes wide). */
#define EW_FLOATS_SIMD(M, name, BODY) \
  VM_SIMD_CLONES M(name, F32, float, float, BODY) M(name, F64, double, double, BODY)

/* ---- unary ------------------------------------------------------------------- */

/* float32 exp, sigmoid and silu use the SIMD exp of vmath.h (<= 1 ulp, like
 * PyTorch's vectorised CPU kernels); float64 uses libm. A tile with an
 * element outside the SIMD range takes the exact per-element path. Every
 * element reads its input before writing, so out may alias in. */
static bool ew_exp_range_ok(const float* a, int64_t n, float sign) {
  int ok = 1;
  for (int64_t i = 0; i < n; ++i) ok &= vm_exp_ok(sign * a[i]);
  return ok;
}

#define EW_VEXP_F32(name, sign, EXPR)                                                  \
  VM_SIMD_CLONES static int name##_F32(void* out, const void* const* in, int64_t n,    \
                        const tpu_ew_params_t* p) {                                    \
    (void)p;                                                                           \
    const float* a = (const float*)in[0];                                              \
    float* o = (float*)out;                                                            \
    if (ew_exp_range_ok(a, n, sign)) {                                                 \
      for (int64_t i = 0; i < n; ++i) {                                                \
        const float x = a[i], e = vm_expf(sign * x);                                   \
        o[i] = EXPR;                                                                   \
      }                                                                                \
    } else {                                                                           \
      for (int64_t i = 0; i < n; ++i) {                                                \
        const float x = a[i], e = expf(sign * x);                                      \
        o[i] = EXPR;                                                                   \
      }                                                                                \
    }                                                                                  \
    return 0;                                                                          \
  }

EW_VEXP_F32(ew_exp, 1.0f, e)
EW_U(ew_exp, F64, double, double, r = exp(x))
EW_FLOATS(EW_U, ew_exp2, r = exp2(x))
EW_FLOATS(EW_U, ew_expm1, r = expm1(x))
/* float32 log: vmath.h's SIMD log where every element of the tile is a
 * normal positive number (Cephes, ~1 ulp); libm's otherwise (zero, negative,
 * subnormal, inf and NaN keep libm's exact special values). */
VM_SIMD_CLONES static int ew_log_F32(void* out, const void* const* in, int64_t n,
                                     const tpu_ew_params_t* p) {
  (void)p;
  const float* a = (const float*)in[0];
  float* o = (float*)out;
  int ok = 1;
  for (int64_t i = 0; i < n; ++i) ok &= vm_log_ok(a[i]);
  if (ok)
    for (int64_t i = 0; i < n; ++i) o[i] = vm_logf(a[i]);
  else
    for (int64_t i = 0; i < n; ++i) o[i] = logf(a[i]);
  return 0;
}
EW_U(ew_log, F64, double, double, r = log(x))
EW_FLOATS(EW_U, ew_log2, r = log2(x))
EW_FLOATS(EW_U, ew_log10, r = log10(x))
EW_FLOATS(EW_U, ew_log1p, r = log1p(x))
EW_FLOATS_SIMD(EW_U, ew_sqrt, r = sqrt(x))
EW_FLOATS_SIMD(EW_U, ew_rsqrt, r = C(1) / sqrt(x))
EW_FLOATS_SIMD(EW_U, ew_reciprocal, r = C(1) / x)
EW_FLOATS(EW_U, ew_sin, r = sin(x))
EW_FLOATS(EW_U, ew_cos, r = cos(x))
EW_FLOATS(EW_U, ew_tan, r = tan(x))
VM_SIMD_CLONES EW_U(ew_tanh, F32, float, float, r = vm_tanhf(x)) /* SIMD, ~2 ulp */
EW_U(ew_tanh, F64, double, double, r = tanh(x))
EW_VEXP_F32(ew_sigmoid, -1.0f, 1.0f / (1.0f + e))
EW_U(ew_sigmoid, F64, double, double, r = 1.0 / (1.0 + exp(-x)))
VM_SIMD_CLONES EW_U(ew_erf, F32, float, float, r = vm_erff(x)) /* SIMD, ~3e-7 relative */
EW_U(ew_erf, F64, double, double, r = erf(x))
EW_VEXP_F32(ew_silu, -1.0f, x / (1.0f + e))
EW_U(ew_silu, F64, double, double, r = x / (1.0 + exp(-x)))
/* gelu: float32 through the SIMD erf (vm_erff_abs: 1 + erf carries the result)
 * and tanh of vmath.h, float64 libm. */
VM_SIMD_CLONES static int ew_gelu_F32(void* out, const void* const* in, int64_t n,
                                      const tpu_ew_params_t* p) {
  const float* a = (const float*)in[0];
  float* o = (float*)out;
  const float kb = (float)(EW_SQRT2 * EW_2_SQRTPI * 0.5), kappa = (float)EW_GELU_KAPPA;
  if (p->mode)
    for (int64_t i = 0; i < n; ++i) {
      const float x = a[i];
      o[i] = 0.5f * x * (1.0f + vm_tanhf(kb * (x + kappa * x * x * x)));
    }
  else
    for (int64_t i = 0; i < n; ++i) {
      const float x = a[i];
      o[i] = x * 0.5f * (1.0f + vm_erff_abs(x * (float)EW_SQRT1_2));
    }
  return 0;
}
EW_U(ew_gelu, F64, double, double,
     r = p->mode ? 0.5 * x * (1.0 + tanh(EW_SQRT2 * EW_2_SQRTPI * 0.5 *
                                         (x + EW_GELU_KAPPA * x * x * x)))
                 : x * 0.5 * (1.0 + erf(x * EW_SQRT1_2)))
EW_FLOATS(EW_U, ew_leaky_relu, r = x > C(0) ? x : x * s0)
EW_FLOATS(EW_U, ew_elu, r = x <= C(0) ? expm1(x * s2) * (s0 * s1) : x * s1)
EW_FLOATS_SIMD(EW_U, ew_neg, r = -x)
EW_INTS(EW_U, ew_neg, r = ew_wneg(x))
EW_FLOATS(EW_U, ew_abs, r = fabs(x))
EW_INTS(EW_U, ew_abs, r = x < 0 ? ew_wneg(x) : x)
EW_NUMS(EW_U, ew_sign, r = (ew_t)((C(0) < x) - (x < C(0))))
EW_BOOLS(EW_U, ew_sign, r = x)
EW_FLOATS(EW_U, ew_floor, r = floor(x))
EW_FLOATS(EW_U, ew_ceil, r = ceil(x))
/* round(decimals): mode 1 scales up by s0 = 10^decimals, mode 2 down by
 * s0 = 10^-decimals (PyTorch's round_decimals_kernel, in the compute type). */
EW_FLOATS(EW_U, ew_round,
          r = p->mode == 1   ? (ew_t)nearbyint(x * s0) / s0
              : p->mode == 2 ? (ew_t)nearbyint(x / s0) * s0
                             : nearbyint(x))
EW_FLOATS(EW_U, ew_trunc, r = trunc(x))
EW_INTS(EW_U, ew_ident, r = x) /* floor, ceil, round, trunc of integers */
EW_INTS(EW_U, ew_relu, r = x < C(0) ? C(0) : x)
EW_FLOATS_SIMD(EW_U, ew_relu, r = x < C(0) ? C(0) : x)
EW_NUMS(EW_U, ew_hardtanh, r = EW_MIN(EW_MAX(x, s0), s1))
EW_NUMS(EW_U, ew_threshold, r = x <= s0 ? s1 : x)
EW_PREDS(EW_U, ew_logical_not, r = x == C(0))
EW_INTS(EW_U, ew_bitwise_not, r = ~x)
EW_BOOLS(EW_U, ew_bitwise_not, r = (uint8_t)!x)

/* ---- binary ------------------------------------------------------------------ */


EW_FLOATS_SIMD(EW_B, ew_add, r = x + s0 * y)
EW_INTS(EW_B, ew_add, r = ew_wadd(x, ew_wmul(s0, y)))
EW_BOOLS(EW_B, ew_add, r = (uint8_t)(x | (s0 & y)))
EW_FLOATS_SIMD(EW_B, ew_sub, r = x - s0 * y)
EW_INTS(EW_B, ew_sub, r = ew_wsub(x, ew_wmul(s0, y)))
/* rsub(self, other, alpha) = other - alpha * self */
EW_FLOATS_SIMD(EW_B, ew_rsub, r = y - s0 * x)
EW_INTS(EW_B, ew_rsub, r = ew_wsub(y, ew_wmul(s0, x)))
EW_FLOATS_SIMD(EW_B, ew_mul, r = x * y)
EW_INTS(EW_B, ew_mul, r = ew_wmul(x, y))
EW_BOOLS(EW_B, ew_mul, r = x & y)
EW_FLOATS(EW_B, ew_remainder, r = EW_PYMOD(x, y))
EW_FLOATS(EW_B, ew_fmod, r = fmod(x, y))
EW_ALLS(EW_B, ew_maximum, r = EW_MAX(x, y))
EW_ALLS(EW_B, ew_minimum, r = EW_MIN(x, y))
EW_PREDS(EW_B, ew_eq, r = x == y)
EW_PREDS(EW_B, ew_ne, r = x != y)
EW_PREDS(EW_B, ew_lt, r = x < y)
EW_PREDS(EW_B, ew_le, r = x <= y)
EW_PREDS(EW_B, ew_gt, r = x > y)
EW_PREDS(EW_B, ew_ge, r = x >= y)
EW_PREDS(EW_B, ew_logical_and, r = (x != C(0)) & (y != C(0)))
EW_PREDS(EW_B, ew_logical_or, r = (x != C(0)) | (y != C(0)))
EW_PREDS(EW_B, ew_logical_xor, r = (x != C(0)) != (y != C(0)))
EW_INTS(EW_B, ew_bitwise_and, r = x & y)
EW_BOOLS(EW_B, ew_bitwise_and, r = x & y)
EW_INTS(EW_B, ew_bitwise_or, r = x | y)
EW_BOOLS(EW_B, ew_bitwise_or, r = x | y)
EW_INTS(EW_B, ew_bitwise_xor, r = x ^ y)
EW_BOOLS(EW_B, ew_bitwise_xor, r = x ^ y)

/* Backward ops: x is grad_output, y the forward input or output. */
EW_FLOATS_SIMD(EW_B, ew_sigmoid_backward, r = x * (C(1) - y) * y)
EW_FLOATS_SIMD(EW_B, ew_tanh_backward, r = x * (C(1) - y * y))
/* float32: vm_expf saturates to 0 / inf outside its range, which gives the
 * limits sg = 1 / sg = 0 exactly; NaN stays NaN. */
VM_SIMD_CLONES EW_B(ew_silu_backward, F32, float, float, const float sg = 1.0f / (1.0f + vm_expf(-y));
                    r = x * sg * (1.0f + y * (1.0f - sg)))
EW_B(ew_silu_backward, F64, double, double, const double sg = 1.0 / (1.0 + exp(-y));
     r = x * sg * (1.0 + y * (1.0 - sg)))
EW_NUMS(EW_B, ew_threshold_backward, r = y <= s0 ? C(0) : x)
EW_FLOATS(EW_B, ew_hardtanh_backward, r = (y <= s0 || y >= s1) ? C(0) : x)
EW_FLOATS(EW_B, ew_leaky_relu_backward, r = y > C(0) ? x : x * s0)
EW_FLOATS(EW_B, ew_elu_backward,
          r = !(y <= C(0)) ? x * s1
              : p->i[3]    ? x * s2 * (y + s0 * s1)
                           : x * s2 * (s0 * s1) * exp(y * s2))
/* gelu_backward: x is grad_output, y the input; float32 as gelu. */
#define EW_GELU_GRAD(T, TANH, ERF, EXP)                                                  \
  {                                                                                      \
    T d;                                                                                 \
    if (p->mode) {                                                                       \
      const T kb = (T)(EW_SQRT2 * EW_2_SQRTPI * 0.5);                                    \
      const T th = TANH(kb * (y + (T)EW_GELU_KAPPA * y * y * y));                        \
      const T inner_d = kb * ((T)1 + (T)(3.0 * EW_GELU_KAPPA) * y * y);                  \
      d = (T)0.5 * ((T)1 + th) + (T)0.5 * y * ((T)1 - th * th) * inner_d;                \
    } else {                                                                             \
      const T cdf = (T)0.5 * ((T)1 + ERF(y * (T)EW_SQRT1_2));                            \
      d = cdf + y * (T)(EW_2_SQRTPI * EW_SQRT1_2 * 0.5) * EXP(y * y * (T)(-0.5));        \
    }                                                                                    \
    r = x * d;                                                                           \
  }
/* e^(-y^2/2) for the float32 gelu gradient: 0 once it underflows. */
static inline float ew_gauss_f32(float v) { return v > -87.0f ? vm_expf(v) : 0.0f; }
VM_SIMD_CLONES EW_B(ew_gelu_backward, F32, float, float,
                    EW_GELU_GRAD(float, vm_tanhf, vm_erff_abs, ew_gauss_f32))
EW_B(ew_gelu_backward, F64, double, double, EW_GELU_GRAD(double, tanh, erf, exp))

/* ---- ternary ----------------------------------------------------------------- */

EW_FLOATS_SIMD(EW_T, ew_lerp,
          r = fabs(z) < C(0.5) ? x + z * (y - x) : y - (y - x) * (C(1) - z))
EW_FLOATS_SIMD(EW_T, ew_addcmul, r = x + s0 * y * z)
EW_INTS(EW_T, ew_addcmul, r = ew_wadd(x, ew_wmul(ew_wmul(s0, y), z)))
EW_FLOATS_SIMD(EW_T, ew_addcdiv, r = x + s0 * y / z)

/* ---- ops with modes, masks or checks ------------------------------------------ */

/* where(condition, self, other) and masked_fill(self, mask, value): the
 * condition/mask is B8 whatever the element type. */
#define EW_SELECT(CT, T)                                                               \
  static int ew_where_##CT(void* out, const void* const* in, int64_t n,               \
                           const tpu_ew_params_t* p) {                                 \
    T* o = (T*)out;                                                                    \
    const uint8_t* m = (const uint8_t*)in[0];                                          \
    const T *a = (const T*)in[1], *b = (const T*)in[2];                                \
    (void)p;                                                                           \
    for (int64_t i = 0; i < n; ++i) o[i] = m[i] ? a[i] : b[i];                         \
    return 0;                                                                          \
  }                                                                                    \
  static int ew_masked_fill_##CT(void* out, const void* const* in, int64_t n,         \
                                 const tpu_ew_params_t* p) {                           \
    T* o = (T*)out;                                                                    \
    const T *a = (const T*)in[0], *v = (const T*)in[2];                                \
    const uint8_t* m = (const uint8_t*)in[1];                                          \
    (void)p;                                                                           \
    for (int64_t i = 0; i < n; ++i) o[i] = m[i] ? v[i] : a[i];                         \
    return 0;                                                                          \
  }
EW_SELECT(B8, uint8_t)
EW_SELECT(I64, int64_t)
EW_SELECT(F32, float)
EW_SELECT(F64, double)

/* clamp(self, min?, max?): absent bounds are NULL; any NaN gives NaN. */
#define EW_CLAMP(CT, T)                                                                \
  static int ew_clamp_##CT(void* out, const void* const* in, int64_t n,               \
                           const tpu_ew_params_t* p) {                                 \
    T* o = (T*)out;                                                                    \
    const T *a = (const T*)in[0], *lo = (const T*)in[1], *hi = (const T*)in[2];        \
    (void)p;                                                                           \
    if (lo && hi) {                                                                    \
      for (int64_t i = 0; i < n; ++i) {                                                \
        const T x = a[i], l = lo[i], h = hi[i];                                        \
        const T m = EW_MAX(x, l);                                                      \
        o[i] = EW_MIN(m, h);                                                           \
      }                                                                                \
    } else if (lo) {                                                                   \
      for (int64_t i = 0; i < n; ++i) {                                                \
        const T x = a[i], l = lo[i];                                                   \
        o[i] = EW_MAX(x, l);                                                           \
      }                                                                                \
    } else {                                                                           \
      for (int64_t i = 0; i < n; ++i) {                                                \
        const T x = a[i], h = hi[i];                                                   \
        o[i] = EW_MIN(x, h);                                                           \
      }                                                                                \
    }                                                                                  \
    return 0;                                                                          \
  }
EW_CLAMP(I64, int64_t)
EW_CLAMP(F32, float)
EW_CLAMP(F64, double)

/* div: p->mode 0 true division, 1 trunc, 2 floor; 3/4 trunc for float16 /
 * bfloat16, whose CPU kernel rounds the quotient to the half type before
 * truncating (the float compute type would truncate the exact quotient). */
enum { DIV_TRUE = 0, DIV_TRUNC, DIV_FLOOR, DIV_TRUNC_F16, DIV_TRUNC_BF16 };
#define EW_DIV_FLOAT(CT, T)                                                            \
  VM_SIMD_CLONES static int ew_div_##CT(void* out, const void* const* in, int64_t n,                 \
                         const tpu_ew_params_t* p) {                                   \
    T* o = (T*)out;                                                                    \
    const T *a = (const T*)in[0], *b = (const T*)in[1];                                \
    if (p->mode == DIV_TRUE) {                                                         \
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] / b[i];                              \
    } else if (p->mode == DIV_TRUNC) {                                                 \
      for (int64_t i = 0; i < n; ++i) o[i] = trunc(a[i] / b[i]);                       \
    } else if (p->mode == DIV_FLOOR) {                                                 \
      for (int64_t i = 0; i < n; ++i) o[i] = EW_FLOORDIV(a[i], b[i]);                  \
    } else {                                                                           \
      tpu_dtype_t half = p->mode == DIV_TRUNC_F16 ? TPU_DTYPE_F16 : TPU_DTYPE_BF16;    \
      tpu_dtype_t self = tpu_compute_storage_dtype(TPU_COMPUTE_##CT);                  \
      uint16_t q[TPU_EW_TILE];                                                         \
      for (int64_t i0 = 0; i0 < n; i0 += TPU_EW_TILE) {                                \
        int64_t m = n - i0 < TPU_EW_TILE ? n - i0 : TPU_EW_TILE;                       \
        for (int64_t i = i0; i < i0 + m; ++i) o[i] = a[i] / b[i];                      \
        tpu_convert(q, half, 1, o + i0, self, 1, m);                                   \
        tpu_convert(o + i0, self, 1, q, half, 1, m);                                   \
        for (int64_t i = i0; i < i0 + m; ++i) o[i] = trunc(o[i]);                      \
      }                                                                                \
    }                                                                                  \
    return 0;                                                                          \
  }
EW_DIV_FLOAT(F32, float)
EW_DIV_FLOAT(F64, double)

/* Integer div (trunc/floor), remainder and fmod: a zero divisor stops the
 * node with ZeroDivisionError, as PyTorch raises. */
#define EW_INT_DIVISION(name, EXPR)                                                    \
  static int name##_I64(void* out, const void* const* in, int64_t n,                  \
                        const tpu_ew_params_t* p) {                                    \
    int64_t* o = (int64_t*)out;                                                        \
    const int64_t *a = (const int64_t*)in[0], *b = (const int64_t*)in[1];              \
    (void)p;                                                                           \
    for (int64_t i = 0; i < n; ++i)                                                    \
      if (b[i] == 0) return TPU_EW_ERR_ZERO_DIV;                                       \
    for (int64_t i = 0; i < n; ++i) o[i] = EXPR;                                       \
    return 0;                                                                          \
  }
EW_INT_DIVISION(ew_div, p->mode == 1 ? ew_idiv_trunc(a[i], b[i]) : ew_idiv_floor(a[i], b[i]))
EW_INT_DIVISION(ew_remainder, ew_imod(a[i], b[i]))
EW_INT_DIVISION(ew_fmod, ew_irem(a[i], b[i]))

/* pow: p->mode picks PyTorch's special cases of a Python-number exponent. */
enum { POW_ANY = 0, POW_SQUARE, POW_CUBE, POW_SQRT, POW_RSQRT, POW_RECIP, POW_RECIP_SQUARE, POW_ONE,
       POW_ZERO };
/* One loop per special case, so each vectorises. */
#define EW_POW_FLOAT(CT, T)                                                            \
  VM_SIMD_CLONES static int ew_pow_##CT(void* out, const void* const* in, int64_t n,                  \
                         const tpu_ew_params_t* p) {                                   \
    const T* a = (const T*)in[0];                                                      \
    const T* b = (const T*)in[1];                                                      \
    T* o = (T*)out;                                                                    \
    switch (p->mode) {                                                                 \
      case POW_SQUARE: for (int64_t i = 0; i < n; ++i) o[i] = a[i] * a[i]; break;       \
      case POW_CUBE: for (int64_t i = 0; i < n; ++i) o[i] = a[i] * a[i] * a[i]; break;  \
      case POW_SQRT: for (int64_t i = 0; i < n; ++i) o[i] = sqrt(a[i]); break;          \
      case POW_RSQRT: for (int64_t i = 0; i < n; ++i) o[i] = (T)1 / sqrt(a[i]); break;  \
      case POW_RECIP: for (int64_t i = 0; i < n; ++i) o[i] = (T)1 / a[i]; break;        \
      case POW_RECIP_SQUARE:                                                           \
        for (int64_t i = 0; i < n; ++i) o[i] = (T)1 / (a[i] * a[i]);                   \
        break;                                                                         \
      case POW_ONE: memmove(o, a, (size_t)n * sizeof(T)); break;                       \
      case POW_ZERO: for (int64_t i = 0; i < n; ++i) o[i] = (T)1; break;               \
      default: for (int64_t i = 0; i < n; ++i) o[i] = pow(a[i], b[i]); break;           \
    }                                                                                  \
    return 0;                                                                          \
  }
EW_POW_FLOAT(F32, float)
EW_POW_FLOAT(F64, double)
EW_INTS(EW_B, ew_pow, r = ew_powi(x, y))

/* ---- prepare hooks ------------------------------------------------------------- */

static bool ew_attr_is(const tpu_attr_t* a, const char* s) {
  return a->kind == TPU_ATTR_STR && strcmp(a->u.str, s) == 0;
}

/* gelu, gelu_backward: approximate (attr 0) "none" or "tanh". */
static tpu_status_t prep_gelu(const tpu_node_t* node, tpu_dtype_t common, tpu_ew_params_t* p) {
  (void)common;
  const tpu_attr_t* a = node->num_attrs > 0 ? &node->attrs[0] : NULL;
  if (!a || a->kind == TPU_ATTR_NONE || ew_attr_is(a, "none")) {
    p->mode = 0;
  } else if (ew_attr_is(a, "tanh")) {
    p->mode = 1;
  } else {
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "approximate argument must be either none or tanh.");
  }
  return TPU_OK;
}

/* round: decimals != 0 (floating types only, as on CPU) scales by a power of ten. */
static tpu_status_t prep_round(const tpu_node_t* node, tpu_dtype_t common, tpu_ew_params_t* p) {
  int64_t d = node->num_attrs > 0 ? tpu_attr_int(&node->attrs[0], 0) : 0;
  if (d == 0) return TPU_OK;
  if (!tpu_dtype_is_floating(common))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "round: decimals on an integer tensor");
  p->mode = d > 0 ? 1 : 2;
  p->f[0] = pow(10.0, fabs((double)d)); /* d may be INT64_MIN */
  return TPU_OK;
}

/* pow with a Python-number exponent: PyTorch's special cases, and its error
 * for negative integer powers of integers. */
static tpu_status_t prep_pow(const tpu_node_t* node, tpu_dtype_t common, tpu_ew_params_t* p) {
  const tpu_value_t* e = &node->inputs[1];
  if (e->kind != TPU_VALUE_SCALAR || e->u.scalar.is_tensor) return TPU_OK;
  bool float_exp = tpu_dtype_is_floating(e->u.scalar.dtype);
  double v = float_exp ? e->u.scalar.v.f : (double)e->u.scalar.v.i;
  if (!tpu_dtype_is_floating(common)) {
    if (!float_exp && v < 0)
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED,
                             "Integers to negative integer powers are not allowed.");
    return TPU_OK;
  }
  p->mode = v == 2.0    ? POW_SQUARE
            : v == 3.0  ? POW_CUBE
            : v == 0.5  ? POW_SQRT
            : v == -0.5 ? POW_RSQRT
            : v == -1.0 ? POW_RECIP
            : v == -2.0 ? POW_RECIP_SQUARE
            : v == 1.0  ? POW_ONE  /* pow_backward of x^2 asks for x^1 */
            : v == 0.0  ? POW_ZERO /* 1 for every x, NaN included, as pow gives */
                        : POW_ANY;
  return TPU_OK;
}

/* clamp: at least one bound. */
static tpu_status_t prep_clamp(const tpu_node_t* node, tpu_dtype_t common, tpu_ew_params_t* p) {
  (void)common, (void)p;
  if (node->inputs[1].kind == TPU_VALUE_NONE && node->inputs[2].kind == TPU_VALUE_NONE)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED,
                           "torch.clamp: At least one of 'min' or 'max' must not be None");
  return TPU_OK;
}

/* clamp_min/clamp_max: bool runs with a tensor bound (maximum/minimum), not
 * with a Python number (CPU's scalar kernel has no bool). */
static tpu_status_t prep_clamp_bound(const tpu_node_t* node, tpu_dtype_t common,
                                     tpu_ew_params_t* p) {
  (void)p;
  if (common == TPU_DTYPE_BOOL && node->inputs[1].kind != TPU_VALUE_VIEW)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "clamp with a scalar bound: not for Bool");
  return TPU_OK;
}

/* addcdiv: PyTorch rejects integer tensor1/tensor2. */
static tpu_status_t prep_addcdiv(const tpu_node_t* node, tpu_dtype_t common, tpu_ew_params_t* p) {
  (void)common, (void)p;
  for (int k = 1; k <= 2; ++k)
    if (node->inputs[k].kind == TPU_VALUE_VIEW &&
        !tpu_dtype_is_floating(node->inputs[k].u.view.dtype))
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED,
                             "Integer division with addcdiv is no longer supported");
  return TPU_OK;
}

/* div: trunc of half types (see ew_div). */
static tpu_status_t prep_div(const tpu_node_t* node, tpu_dtype_t common, tpu_ew_params_t* p) {
  (void)node;
  if (p->mode == DIV_TRUNC && common == TPU_DTYPE_F16) p->mode = DIV_TRUNC_F16;
  if (p->mode == DIV_TRUNC && common == TPU_DTYPE_BF16) p->mode = DIV_TRUNC_BF16;
  return TPU_OK;
}

/* leaky_relu_backward: self_is_result with a negative slope is an error. */
static tpu_status_t prep_leaky_bw(const tpu_node_t* node, tpu_dtype_t common, tpu_ew_params_t* p) {
  (void)node, (void)common;
  if (p->i[1] && p->f[0] < 0)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED,
                           "In-place leakyReLu backward calculation is triggered with a "
                           "negative slope which is not supported.");
  return TPU_OK;
}

/* ---- impls ----------------------------------------------------------------------- */

#define EW_ALPHA .flags = TPU_EW_OPMATH_SCALAR | TPU_EW_ALPHA, .num_params = 1, \
                 .checked_params = 1, .dflt = {1}

EW_IMPL(k_add, PROMOTE, EW_A(ew_add), EW_ALPHA, .cx = tpu_ew_cx_add)
EW_IMPL(k_sub, PROMOTE, EW_N(ew_sub), .flags = TPU_EW_OPMATH_SCALAR | TPU_EW_ALPHA | TPU_EW_NO_BOOL,
        .num_params = 1, .checked_params = 1, .dflt = {1}, .cx = tpu_ew_cx_sub)
EW_IMPL(k_rsub, PROMOTE, EW_N(ew_rsub), .flags = TPU_EW_OPMATH_SCALAR | TPU_EW_ALPHA | TPU_EW_NO_BOOL,
        .num_params = 1, .checked_params = 1, .dflt = {1}, .cx = tpu_ew_cx_rsub)
EW_IMPL(k_mul, PROMOTE, EW_A(ew_mul), .flags = TPU_EW_OPMATH_SCALAR, .cx = tpu_ew_cx_mul)
EW_IMPL(k_div, DIV, EW_N(ew_div), .flags = TPU_EW_OPMATH_SCALAR, .prepare = prep_div,
        .cx = tpu_ew_cx_div)
EW_IMPL(k_remainder, PROMOTE, EW_N(ew_remainder))
EW_IMPL(k_fmod, PROMOTE, EW_N(ew_fmod))
EW_IMPL(k_pow, PROMOTE, EW_N(ew_pow), .checked = 2, .prepare = prep_pow, .cx = tpu_ew_cx_pow)
EW_IMPL(k_maximum, PROMOTE, EW_A(ew_maximum))
EW_IMPL(k_minimum, PROMOTE, EW_A(ew_minimum))
EW_IMPL(k_clamp, PROMOTE, EW_N(ew_clamp), .checked = 6, .prepare = prep_clamp)
EW_IMPL(k_clamp_min, PROMOTE, EW_A(ew_maximum), .checked = 2, .prepare = prep_clamp_bound)
EW_IMPL(k_clamp_max, PROMOTE, EW_A(ew_minimum), .checked = 2, .prepare = prep_clamp_bound)
EW_IMPL(k_neg, PROMOTE, EW_N(ew_neg), .cx = tpu_ew_cx_neg)
EW_IMPL(k_abs, PROMOTE, EW_N(ew_abs), .cx = tpu_ew_cx_abs, .flags = TPU_EW_CX_PART)
EW_IMPL(k_sign, PROMOTE, EW_A(ew_sign))
EW_IMPL(k_floor, PROMOTE, EW_FNS(NULL, ew_ident_I64, ew_floor_F32, ew_floor_F64))
EW_IMPL(k_ceil, PROMOTE, EW_FNS(NULL, ew_ident_I64, ew_ceil_F32, ew_ceil_F64))
EW_IMPL(k_trunc, PROMOTE, EW_FNS(NULL, ew_ident_I64, ew_trunc_F32, ew_trunc_F64))
EW_IMPL(k_round, PROMOTE, EW_FNS(NULL, ew_ident_I64, ew_round_F32, ew_round_F64),
        .prepare = prep_round)
EW_IMPL(k_relu, PROMOTE, EW_N(ew_relu))
EW_IMPL(k_hardtanh, PROMOTE, EW_N(ew_hardtanh), .num_params = 2, .checked_params = 3,
        .dflt = {-1, 1})
EW_IMPL(k_threshold, PROMOTE, EW_N(ew_threshold), .num_params = 2, .checked_params = 3)
EW_IMPL(k_gelu, PROMOTE, EW_F(ew_gelu), .prepare = prep_gelu)
EW_IMPL(k_silu, PROMOTE, EW_F(ew_silu))
EW_IMPL(k_leaky_relu, PROMOTE, EW_F(ew_leaky_relu), .num_params = 1, .dflt = {0.01})
EW_IMPL(k_elu, PROMOTE, EW_F(ew_elu), .num_params = 3, .dflt = {1, 1, 1})
EW_IMPL(k_logical_not, BOOL_OUT, EW_A(ew_logical_not))
EW_IMPL(k_bitwise_not, PROMOTE, EW_BI(ew_bitwise_not))
#define EW_FLOAT_UNARY(op) EW_IMPL(k_##op, FLOAT, EW_F(ew_##op), .cx = tpu_ew_cx_##op)
EW_FLOAT_UNARY(exp)
EW_FLOAT_UNARY(exp2)
EW_FLOAT_UNARY(expm1)
EW_FLOAT_UNARY(log)
EW_FLOAT_UNARY(log2)
EW_FLOAT_UNARY(log10)
EW_FLOAT_UNARY(log1p)
EW_FLOAT_UNARY(sqrt)
EW_FLOAT_UNARY(rsqrt)
EW_FLOAT_UNARY(reciprocal)
EW_FLOAT_UNARY(sin)
EW_FLOAT_UNARY(cos)
EW_FLOAT_UNARY(tan)
EW_FLOAT_UNARY(tanh)
EW_FLOAT_UNARY(sigmoid)
EW_IMPL(k_erf, FLOAT, EW_F(ew_erf)) /* no complex erf (PyTorch has none) */
#define EW_PRED_IMPL(op) EW_IMPL(k_##op, BOOL_OUT, EW_A(ew_##op))
EW_IMPL(k_eq, BOOL_OUT, EW_A(ew_eq), .cx = tpu_ew_cx_eq)
EW_IMPL(k_ne, BOOL_OUT, EW_A(ew_ne), .cx = tpu_ew_cx_ne)
EW_PRED_IMPL(lt)
EW_PRED_IMPL(le)
EW_PRED_IMPL(gt)
EW_PRED_IMPL(ge)
EW_PRED_IMPL(logical_and)
EW_PRED_IMPL(logical_or)
EW_PRED_IMPL(logical_xor)
EW_IMPL(k_bitwise_and, PROMOTE, EW_BI(ew_bitwise_and))
EW_IMPL(k_bitwise_or, PROMOTE, EW_BI(ew_bitwise_or))
EW_IMPL(k_bitwise_xor, PROMOTE, EW_BI(ew_bitwise_xor))
EW_IMPL(k_where, PROMOTE, EW_A(ew_where), .promote = 6, .bool_in = 1, .checked = 6,
        .cx = tpu_ew_cx_where)
EW_IMPL(k_masked_fill, FIRST, EW_A(ew_masked_fill), .bool_in = 2, .checked = 4,
        .flags = TPU_EW_VALUE_0DIM, .cx = tpu_ew_cx_masked_fill)
EW_IMPL(k_lerp, PROMOTE, EW_F(ew_lerp), .flags = TPU_EW_SAME_DTYPE | TPU_EW_OPMATH_SCALAR,
        .cx = tpu_ew_cx_lerp)
EW_IMPL(k_addcmul, PROMOTE, EW_N(ew_addcmul), .num_params = 1, .checked_params = 1, .dflt = {1},
        .cx = tpu_ew_cx_addcmul)
EW_IMPL(k_addcdiv, PROMOTE, EW_F(ew_addcdiv), .num_params = 1, .checked_params = 1,
        .dflt = {1}, .prepare = prep_addcdiv, .cx = tpu_ew_cx_addcdiv)
EW_IMPL(k_gelu_backward, PROMOTE, EW_F(ew_gelu_backward), .prepare = prep_gelu)
EW_IMPL(k_silu_backward, PROMOTE, EW_F(ew_silu_backward))
EW_IMPL(k_sigmoid_backward, PROMOTE, EW_F(ew_sigmoid_backward))
EW_IMPL(k_tanh_backward, PROMOTE, EW_F(ew_tanh_backward))
EW_IMPL(k_threshold_backward, PROMOTE, EW_N(ew_threshold_backward), .num_params = 1,
        .checked_params = 1)
EW_IMPL(k_hardtanh_backward, PROMOTE, EW_F(ew_hardtanh_backward), .num_params = 2,
        .dflt = {-1, 1})
EW_IMPL(k_leaky_relu_backward, PROMOTE, EW_F(ew_leaky_relu_backward), .num_params = 2,
        .dflt = {0.01, 0}, .prepare = prep_leaky_bw)
EW_IMPL(k_elu_backward, PROMOTE, EW_F(ew_elu_backward), .num_params = 4, .dflt = {1, 1, 1, 0})

/* ---- rows ------------------------------------------------------------------------ */

static const tpu_op_def_t g_rows[] = {
    EW_ROW("add", "self,other", "alpha", "out",
           "add.Tensor add.Scalar add.out add.Scalar_out add_.Tensor add_.Scalar", k_add),
    EW_ROW("sub", "self,other", "alpha", "out",
           "sub.Tensor sub.Scalar sub.out sub.Scalar_out sub_.Tensor sub_.Scalar", k_sub),
    EW_ROW("rsub", "self,other", "alpha", "out",
           "rsub.Tensor rsub.Scalar rsub.Tensor_out rsub.Scalar_out", k_rsub),
    /* complex * real runs on the complex operand's real view; other complex
     * products in complex.c; uint16/32/64 products wrap as their
     * signed twins' do, bit for bit */
    {.name = "mul", .inputs = "self,other", .attrs = "", .outputs = "out",
     .aten = "mul.Tensor mul.Scalar mul.out mul.Scalar_out mul_.Tensor mul_.Scalar",
     .kernel = tpu_ew_kernel, .infer = tpu_ew_infer, .check = tpu_ew_check, .impl = &k_mul,
     .flags = TPU_OP_OWN_OVERLAP_CHECK | TPU_OP_POINTWISE | TPU_OP_COMPLEX_AS_REAL | TPU_OP_COMPLEX |
              TPU_OP_COMPLEX_NUMBERS | TPU_OP_UNSIGNED_AS_SIGNED},
    EW_ROW("div", "self,other", "rounding_mode", "out",
           "div.Tensor div.Scalar div.Tensor_mode div.Scalar_mode div.out div.out_mode "
           "div.Scalar_out div.Scalar_mode_out div_.Tensor div_.Scalar div_.Tensor_mode "
           "div_.Scalar_mode",
           k_div),
    EW_ROW("remainder", "self,other", "", "out",
           "remainder.Tensor remainder.Scalar remainder.Scalar_Tensor remainder.Tensor_out "
           "remainder.Scalar_out remainder.Scalar_Tensor_out remainder_.Tensor remainder_.Scalar",
           k_remainder),
    EW_ROW("fmod", "self,other", "", "out", EW_TS_ATEN(fmod), k_fmod),
    EW_ROW("pow", "self,exponent", "", "out",
           "pow.Tensor_Tensor pow.Tensor_Scalar pow.Scalar pow.Tensor_Tensor_out "
           "pow.Tensor_Scalar_out pow.Scalar_out pow_.Tensor pow_.Scalar",
           k_pow),
    EW_ROW("maximum", "self,other", "", "out", "maximum maximum.out", k_maximum),
    EW_ROW("minimum", "self,other", "", "out", "minimum minimum.out", k_minimum),
    EW_ROW("clamp", "self,min?,max?", "", "out",
           "clamp clamp.Tensor clamp.out clamp.Tensor_out clamp_ clamp_.Tensor", k_clamp),
    EW_ROW("clamp_min", "self,min", "", "out",
           "clamp_min clamp_min.Tensor clamp_min.out clamp_min.Tensor_out clamp_min_ "
           "clamp_min_.Tensor",
           k_clamp_min),
    EW_ROW("clamp_max", "self,max", "", "out",
           "clamp_max clamp_max.Tensor clamp_max.out clamp_max.Tensor_out clamp_max_ "
           "clamp_max_.Tensor",
           k_clamp_max),
    EW_UNARY_ROW(neg),
    EW_UNARY_ROW(abs),
    EW_UNARY_ROW(sign),
    EW_UNARY_ROW(exp),
    EW_UNARY_ROW(exp2),
    EW_UNARY_ROW(expm1),
    EW_UNARY_ROW(log),
    EW_UNARY_ROW(log2),
    EW_UNARY_ROW(log10),
    EW_UNARY_ROW(log1p),
    EW_UNARY_ROW(sqrt),
    EW_UNARY_ROW(rsqrt),
    EW_UNARY_ROW(reciprocal),
    EW_UNARY_ROW(sin),
    EW_UNARY_ROW(cos),
    EW_UNARY_ROW(tan),
    EW_UNARY_ROW(tanh),
    EW_UNARY_ROW(sigmoid),
    EW_UNARY_ROW(erf),
    EW_UNARY_ROW(floor),
    EW_UNARY_ROW(ceil),
    EW_UNARY_ROW(trunc),
    EW_ROW("round", "self", "decimals", "out",
           "round round.decimals round.out round.decimals_out round_ round_.decimals", k_round),
    EW_UNARY_ROW(relu),
    EW_ROW("gelu", "self", "approximate", "out", "gelu gelu.out gelu_", k_gelu),
    EW_UNARY_ROW(silu),
    EW_ROW("hardtanh", "self", "min_val,max_val", "out", "hardtanh hardtanh.out hardtanh_",
           k_hardtanh),
    EW_ROW("leaky_relu", "self", "negative_slope", "out",
           "leaky_relu leaky_relu.out leaky_relu_", k_leaky_relu),
    EW_ROW("elu", "self", "alpha,scale,input_scale", "out", "elu elu.out elu_", k_elu),
    EW_ROW("threshold", "self", "threshold,value", "out", "threshold threshold.out threshold_",
           k_threshold),
    EW_ROW_BITS("eq", "self,other", "", "out", EW_TS_ATEN(eq), k_eq),
    EW_ROW_BITS("ne", "self,other", "", "out", EW_TS_ATEN(ne), k_ne),
    EW_ROW("lt", "self,other", "", "out", EW_TS_ATEN(lt), k_lt),
    EW_ROW("le", "self,other", "", "out", EW_TS_ATEN(le), k_le),
    EW_ROW("gt", "self,other", "", "out", EW_TS_ATEN(gt), k_gt),
    EW_ROW("ge", "self,other", "", "out", EW_TS_ATEN(ge), k_ge),
    EW_UNARY_ROW(logical_not),
    EW_ROW("logical_and", "self,other", "", "out",
           "logical_and logical_and.out logical_and_", k_logical_and),
    EW_ROW("logical_or", "self,other", "", "out", "logical_or logical_or.out logical_or_",
           k_logical_or),
    EW_ROW("logical_xor", "self,other", "", "out",
           "logical_xor logical_xor.out logical_xor_", k_logical_xor),
    EW_ROW_BITS("bitwise_and", "self,other", "", "out",
                EW_TS_ATEN(bitwise_and) " bitwise_and.Scalar_Tensor bitwise_and.Scalar_Tensor_out",
           k_bitwise_and),
    EW_ROW_BITS("bitwise_or", "self,other", "", "out",
                EW_TS_ATEN(bitwise_or) " bitwise_or.Scalar_Tensor bitwise_or.Scalar_Tensor_out",
           k_bitwise_or),
    EW_ROW_BITS("bitwise_xor", "self,other", "", "out",
                EW_TS_ATEN(bitwise_xor) " bitwise_xor.Scalar_Tensor bitwise_xor.Scalar_Tensor_out",
           k_bitwise_xor),
    EW_ROW_BITS("bitwise_not", "self", "", "out", "bitwise_not bitwise_not.out bitwise_not_",
                k_bitwise_not),
    EW_ROW("where", "condition,self,other", "", "out",
           "where.self where.self_out", k_where),
    EW_ROW("masked_fill", "self,mask,value", "", "out",
           "masked_fill.Scalar masked_fill.Tensor masked_fill.Scalar_out masked_fill.Tensor_out "
           "masked_fill_.Scalar masked_fill_.Tensor",
           k_masked_fill),
    EW_ROW("lerp", "self,end,weight", "", "out",
           "lerp.Scalar lerp.Tensor lerp.Scalar_out lerp.Tensor_out lerp_.Scalar lerp_.Tensor",
           k_lerp),
    EW_ROW("addcmul", "self,tensor1,tensor2", "value", "out", "addcmul addcmul.out addcmul_",
           k_addcmul),
    EW_ROW("addcdiv", "self,tensor1,tensor2", "value", "out", "addcdiv addcdiv.out addcdiv_",
           k_addcdiv),
    EW_BACKWARD_ROW(gelu_backward, "grad_output,self", "approximate"),
    EW_BACKWARD_ROW(silu_backward, "grad_output,self", ""),
    EW_BACKWARD_ROW(sigmoid_backward, "grad_output,output", ""),
    EW_BACKWARD_ROW(tanh_backward, "grad_output,output", ""),
    EW_BACKWARD_ROW(threshold_backward, "grad_output,self", "threshold"),
    EW_BACKWARD_ROW(hardtanh_backward, "grad_output,self", "min_val,max_val"),
    EW_BACKWARD_ROW(leaky_relu_backward, "grad_output,self", "negative_slope,self_is_result"),
    EW_BACKWARD_ROW(elu_backward, "grad_output,self_or_result",
                    "alpha,scale,input_scale,is_result"),
};

const tpu_op_family_t tpu_family_elementwise = {
    "elementwise", g_rows, (int32_t)(sizeof(g_rows) / sizeof(g_rows[0]))};
