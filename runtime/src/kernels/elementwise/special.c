/* kernels/elementwise/special.c — the elementwise_special family: inverse
 * trigonometric and hyperbolic functions, special functions (gamma family,
 * error functions, Bessel I, normal distribution, zeta), predicates
 * (isnan, isinf, signbit, ...), and binary math (atan2, hypot, copysign,
 * nextafter, logaddexp, xlogy, heaviside, fmax/fmin, gcd/lcm, shifts,
 * floor_divide). Everything runs on the elementwise executor
 * (executor.c); tile functions come from tile.h.
 *
 * Semantics follow PyTorch's CPU kernels. Special functions are evaluated
 * in double (specfun.h) for every floating dtype; libm functions run in
 * the compute type (float for float32/half types, as PyTorch).
 */
#include <float.h>
#include <string.h>
#include <tgmath.h>

#include "kernels/elementwise/elementwise.h"
#include "kernels/elementwise/tile.h"
#include "kernels/common/kernel_util.h"
#include "kernels/elementwise/specfun.h"
#include "kernels/common/vmath.h"

#define SP_PI 3.14159265358979323846
#define SP_LN2 0.69314718055994530942

/* A special function of one double, as the element type. */
#define SF(f, v) ((ew_t)f((double)(v)))

/* ---- unary ------------------------------------------------------------------- */

/* float32 acos/asin/atan/atan2 use the SIMD functions of vmath.h (~2 ulp,
 * like PyTorch's vectorised CPU kernels); float64 uses libm. */
VM_SIMD_CLONES EW_U(sp_acos, F32, float, float, r = vm_acosf(x))
EW_U(sp_acos, F64, double, double, r = acos(x))
VM_SIMD_CLONES EW_U(sp_asin, F32, float, float, r = vm_asinf(x))
EW_U(sp_asin, F64, double, double, r = asin(x))
VM_SIMD_CLONES EW_U(sp_atan, F32, float, float, r = vm_atanf(x))
EW_U(sp_atan, F64, double, double, r = atan(x))
EW_FLOATS(EW_U, sp_acosh, r = acosh(x))
EW_FLOATS(EW_U, sp_asinh, r = asinh(x))
EW_FLOATS(EW_U, sp_atanh, r = atanh(x))
EW_FLOATS(EW_U, sp_sinh, r = sinh(x))
EW_FLOATS(EW_U, sp_cosh, r = cosh(x))
EW_FLOATS(EW_U, sp_erfc, r = erfc(x))
/* lgamma_r: glibc's lgamma writes the global signgam, which threads would
 * share a cache line for. */
static inline float sp_lgammaf(float x) {
  int sign;
  return lgammaf_r(x, &sign);
}
static inline double sp_lgamma(double x) {
  int sign;
  return lgamma_r(x, &sign);
}
/* float32: SIMD (vmath.h, abs error < 4e-6) when the whole tile is in
 * (0, 1e36], as PyTorch's vectorised kernel; else lgammaf. */
VM_SIMD_CLONES static int sp_lgamma_F32(void* out, const void* const* in, int64_t n,
                                        const tpu_ew_params_t* p) {
  float* o = (float*)out;
  const float* a = (const float*)in[0];
  (void)p;
  int ok = 1;
  for (int64_t i = 0; i < n; ++i) ok &= vm_lgamma_ok(a[i]);
  if (ok)
    for (int64_t i = 0; i < n; ++i) o[i] = vm_lgammaf(a[i]);
  else
    for (int64_t i = 0; i < n; ++i) o[i] = sp_lgammaf(a[i]);
  return 0;
}
EW_U(sp_lgamma, F64, double, double, r = sp_lgamma(x))
/* float32: SIMD (vmath.h) when the whole tile is inside (-1, 1). */
VM_SIMD_CLONES static int sp_erfinv_F32(void* out, const void* const* in, int64_t n,
                                        const tpu_ew_params_t* p) {
  float* o = (float*)out;
  const float* a = (const float*)in[0];
  (void)p;
  int ok = 1;
  for (int64_t i = 0; i < n; ++i) ok &= vm_erfinv_ok(a[i]);
  if (ok)
    for (int64_t i = 0; i < n; ++i) o[i] = vm_erfinvf(a[i]);
  else
    for (int64_t i = 0; i < n; ++i) o[i] = (float)sf_erfinv((double)a[i]);
  return 0;
}
EW_U(sp_erfinv, F64, double, double, r = sf_erfinv(x))
EW_U(sp_digamma, F32, float, float, r = sf_digamma_f(x))
EW_U(sp_digamma, F64, double, double, r = sf_digamma(x))
EW_U(sp_polygamma, F32, float, float, r = sf_polygamma_f(p->i[0], x))
EW_U(sp_polygamma, F64, double, double, r = sf_polygamma(p->i[0], x))
EW_FLOATS(EW_U, sp_i0, r = SF(sf_i0, x))
EW_FLOATS(EW_U, sp_i0e, r = SF(sf_i0e, x))
EW_FLOATS(EW_U, sp_i1, r = SF(sf_i1, x))
EW_FLOATS(EW_U, sp_i1e, r = SF(sf_i1e, x))
EW_FLOATS(EW_U, sp_ndtri, r = SF(sf_ndtri, x))
EW_FLOATS(EW_U, sp_log_ndtr, r = SF(sf_log_ndtr, x))
EW_FLOATS(EW_U, sp_erfcx, r = SF(sf_erfcx, x))
EW_FLOATS(EW_U, sp_entr, r = SF(sf_entr, x))
EW_U(sp_bessel_j0, F32, float, float, r = sf_bessel_j0_f(x))
EW_U(sp_bessel_j0, F64, double, double, r = sf_bessel_j0(x))
EW_U(sp_bessel_j1, F32, float, float, r = sf_bessel_j1_f(x))
EW_U(sp_bessel_j1, F64, double, double, r = sf_bessel_j1(x))
EW_FLOATS(EW_U, sp_sinc, if (x == C(0)) r = C(1); else {
  const ew_t px = C(SP_PI) * x;
  r = sin(px) / px;
})
EW_FLOATS(EW_U, sp_deg2rad, r = x * C(SP_PI / 180.0))
EW_FLOATS(EW_U, sp_rad2deg, r = x * C(180.0 / SP_PI))
EW_FLOATS(EW_U, sp_frac, r = x - trunc(x))
EW_NUMS(EW_U, sp_sgn, r = (ew_t)((C(0) < x) - (x < C(0))))
EW_BOOLS(EW_U, sp_sgn, r = x)
/* logit: s0 = eps, negative when None (no clamping). For half types
 * (p->mode 1: float16, 2: bfloat16) CPU rounds eps, 1 - eps, 1 - z and
 * z / (1 - z) to the half type: so does this. */
EW_U(sp_logit, F64, double, double,
     const double z = s0 < 0 ? x : (x < s0 ? s0 : x > 1 - s0 ? 1 - s0 : x);
     r = log(z / (1 - z)))

/* logit_backward(grad x, input y; eps s0, negative when None). */
EW_FLOATS(EW_B, sp_logit_backward,
          const ew_t lo = s0 < C(0) ? C(0) : s0; const ew_t hi = s0 < C(0) ? C(1) : C(1) - s0;
          r = (y < lo || y > hi) ? (s0 < C(0) ? (ew_t)NAN : C(0))
              : (y == C(0) || y == C(1)) ? x * (ew_t)INFINITY
                                         : x / (y * (C(1) - y)))

static float sp_round_to(float v, tpu_dtype_t dt) {
  uint16_t h = 0;
  tpu_convert(&h, dt, 1, &v, TPU_DTYPE_F32, 1, 1);
  tpu_convert(&v, TPU_DTYPE_F32, 1, &h, dt, 1, 1);
  return v;
}

static int sp_logit_F32(void* out, const void* const* in, int64_t n, const tpu_ew_params_t* p) {
  float* o = (float*)out;
  const float* a = (const float*)in[0];
  const float eps = (float)p->f[0];
  if (p->mode == 0) {
    for (int64_t i = 0; i < n; ++i) {
      const float x = a[i], z = eps < 0 ? x : (x < eps ? eps : x > 1 - eps ? 1 - eps : x);
      o[i] = logf(z / (1 - z));
    }
    return 0;
  }
  const tpu_dtype_t dt = p->mode == 1 ? TPU_DTYPE_F16 : TPU_DTYPE_BF16;
  const float lo = sp_round_to(eps, dt), hi = sp_round_to(1 - lo, dt);
  for (int64_t i = 0; i < n; ++i) {
    const float x = a[i], z = eps < 0 ? x : (x < lo ? lo : x > hi ? hi : x);
    o[i] = logf(sp_round_to(z / sp_round_to(1 - z, dt), dt));
  }
  return 0;
}
/* nan_to_num: s0 nan, s1 posinf, s2 neginf (prepare fills the defaults). */
EW_FLOATS(EW_U, sp_nan_to_num, r = x != x ? s0 : x == (ew_t)INFINITY ? s1 : x == -(ew_t)INFINITY ? s2 : x)
EW_INTS(EW_U, sp_ident, r = x)
EW_BOOLS(EW_U, sp_ident, r = x)

/* angle of a real number: 0, pi for negatives, NaN kept. */
EW_FLOATS(EW_U, sp_angle, r = x != x ? x : x < C(0) ? (ew_t)SP_PI : C(0))
/* frexp's mantissa (the exponent: sp_frexp_exponents). */
EW_FLOATS(EW_U, sp_frexp_m, int e; r = frexp(x, &e))

/* Predicates: integers and bools are finite and never NaN. */
EW_U(sp_isnan, F32, float, uint8_t, r = x != x)
EW_U(sp_isnan, F64, double, uint8_t, r = x != x)
EW_U(sp_isinf, F32, float, uint8_t, r = fabs(x) == INFINITY)
EW_U(sp_isinf, F64, double, uint8_t, r = fabs(x) == INFINITY)
EW_U(sp_isposinf, F32, float, uint8_t, r = x == INFINITY)
EW_U(sp_isposinf, F64, double, uint8_t, r = x == INFINITY)
EW_U(sp_isneginf, F32, float, uint8_t, r = x == -INFINITY)
EW_U(sp_isneginf, F64, double, uint8_t, r = x == -INFINITY)
EW_U(sp_signbit, F32, float, uint8_t, r = signbit(x) != 0)
EW_U(sp_signbit, F64, double, uint8_t, r = signbit(x) != 0)
EW_U(sp_signbit, I64, int64_t, uint8_t, r = x < 0)
EW_U(sp_false, I64, int64_t, uint8_t, r = 0)
EW_U(sp_false, B8, uint8_t, uint8_t, r = 0)

/* ---- binary ------------------------------------------------------------------ */

static inline uint64_t sp_uabs(int64_t a) { return a < 0 ? 0 - (uint64_t)a : (uint64_t)a; }
static inline int64_t sp_gcd(int64_t a, int64_t b) {
  uint64_t ua = sp_uabs(a), ub = sp_uabs(b);
  while (ua != 0) {
    uint64_t c = ua;
    ua = ub % ua;
    ub = c;
  }
  return (int64_t)ub;
}
static inline int64_t sp_lcm(int64_t a, int64_t b) {
  int64_t g = sp_gcd(a, b);
  if (g == 0) return 0;
  int64_t q = (g == -1) ? (int64_t)(0 - (uint64_t)a) : a / g; /* g is never -1, kept safe */
  return (int64_t)sp_uabs((int64_t)((uint64_t)q * (uint64_t)b));
}

VM_SIMD_CLONES static int sp_atan2_F32(void* out, const void* const* in, int64_t n, const tpu_ew_params_t* p) {
  float* o = (float*)out;
  const float *a = (const float*)in[0], *b = (const float*)in[1];
  (void)p;
  int ok = 1;
  for (int64_t i = 0; i < n; ++i) ok &= vm_atan2_ok(a[i], b[i]);
  if (ok)
    for (int64_t i = 0; i < n; ++i) o[i] = vm_atan2f(a[i], b[i]);
  else
    for (int64_t i = 0; i < n; ++i) o[i] = atan2f(a[i], b[i]);
  return 0;
}
EW_B(sp_atan2, F64, double, double, r = atan2(x, y))
EW_FLOATS(EW_B, sp_hypot, r = hypot(x, y))
EW_FLOATS(EW_B, sp_copysign, r = copysign(x, y))
EW_FLOATS(EW_B, sp_logaddexp, if (isinf(x) && x == y) r = x; else {
  const ew_t m = x < y ? y : x;
  r = m + log1p(exp(-fabs(x - y)));
})
EW_FLOATS(EW_B, sp_logaddexp2, if (isinf(x) && x == y) r = x; else {
  const ew_t m = x < y ? y : x;
  r = m + log1p(exp2(-fabs(x - y))) * C(1.0 / SP_LN2);
})
EW_FLOATS(EW_B, sp_xlogy, r = y != y ? y : x == C(0) ? C(0) : x * log(y))
EW_FLOATS(EW_B, sp_xlog1py, r = y != y ? y : x == C(0) ? C(0) : x * log1p(y))
EW_FLOATS(EW_B, sp_zeta, r = (ew_t)sf_zeta((double)x, (double)y))
EW_ALLS(EW_B, sp_heaviside, r = x == C(0) ? y : (ew_t)(x > C(0)))
EW_FLOATS(EW_B, sp_fmax, r = fmax(x, y))
EW_FLOATS(EW_B, sp_fmin, r = fmin(x, y))
EW_INTS(EW_B, sp_fmax, r = x < y ? y : x)
EW_INTS(EW_B, sp_fmin, r = y < x ? y : x)
EW_BOOLS(EW_B, sp_fmax, r = x | y)
EW_BOOLS(EW_B, sp_fmin, r = x & y)
EW_INTS(EW_B, sp_gcd, r = sp_gcd(x, y))
EW_INTS(EW_B, sp_lcm, r = sp_lcm(x, y))
/* Shifts as PyTorch: a shift count outside [0, bits) gives 0 (left) or the
 * sign fill (right); on int64 values this also holds for narrower types. */
EW_INTS(EW_B, sp_lshift, r = (y < 0 || y >= 64) ? 0 : (int64_t)((uint64_t)x << y))
EW_INTS(EW_B, sp_rshift, r = (y < 0 || y >= 64) ? (x < 0 ? -1 : 0) : x >> y)
EW_FLOATS(EW_B, sp_floor_divide, r = EW_FLOORDIV(x, y))

static int sp_floor_divide_I64(void* out, const void* const* in, int64_t n,
                               const tpu_ew_params_t* p) {
  int64_t* o = (int64_t*)out;
  const int64_t *a = (const int64_t*)in[0], *b = (const int64_t*)in[1];
  (void)p;
  for (int64_t i = 0; i < n; ++i)
    if (b[i] == 0) return TPU_EW_ERR_ZERO_DIV;
  for (int64_t i = 0; i < n; ++i) o[i] = ew_idiv_floor(a[i], b[i]);
  return 0;
}

/* nextafter: p->mode names the dtype the result is stepped in (0: the
 * compute type; 1/2: float16/bfloat16, whose values the float32 compute
 * type holds exactly; both are 16-bit sign-magnitude encodings). */
enum { SP_NEXT_NATIVE = 0, SP_NEXT_F16, SP_NEXT_BF16 };

static float sp_nextafter_half(float x, float y, tpu_dtype_t dt) {
  if (x != x || y != y) return NAN;
  if (x == y) return y;
  uint16_t h = 0;
  tpu_convert(&h, dt, 1, &x, TPU_DTYPE_F32, 1, 1);
  if (x == 0)
    h = y > 0 ? 0x0001 : 0x8001;
  else if ((x < y) == (x > 0))
    h++;
  else
    h--;
  float r = 0;
  tpu_convert(&r, TPU_DTYPE_F32, 1, &h, dt, 1, 1);
  return r;
}

static int sp_nextafter_F32(void* out, const void* const* in, int64_t n,
                            const tpu_ew_params_t* p) {
  float* o = (float*)out;
  const float *a = (const float*)in[0], *b = (const float*)in[1];
  if (p->mode == SP_NEXT_NATIVE) {
    for (int64_t i = 0; i < n; ++i) o[i] = nextafterf(a[i], b[i]);
  } else {
    tpu_dtype_t dt = p->mode == SP_NEXT_F16 ? TPU_DTYPE_F16 : TPU_DTYPE_BF16;
    for (int64_t i = 0; i < n; ++i) o[i] = sp_nextafter_half(a[i], b[i], dt);
  }
  return 0;
}
EW_B(sp_nextafter, F64, double, double, r = nextafter(x, y))

/* addr(self, vec1, vec2; beta s0, alpha s1) over self[M,N], vec1 as [M,1],
 * vec2 [N]: beta self + alpha vec1 vec2, self ignored when beta == 0. CPU
 * computes half types in the half type, rounding after every operation
 * (p->mode 1: float16, 2: bfloat16); so does this. */
EW_T(sp_addr, F64, double, double, r = s0 == 0 ? s1 * y * z : s0 * x + s1 * y * z)
EW_T(sp_addr, I64, int64_t, int64_t,
     const uint64_t t = (uint64_t)s1 * (uint64_t)y * (uint64_t)z;
     r = (int64_t)(s0 == 0 ? t : (uint64_t)s0 * (uint64_t)x + t))
EW_T(sp_addr, B8, uint8_t, uint8_t, r = (s0 && x) || (s1 && y && z))

static int sp_addr_F32(void* out, const void* const* in, int64_t n, const tpu_ew_params_t* p) {
  float* o = (float*)out;
  const float *a = (const float*)in[0], *b = (const float*)in[1], *c = (const float*)in[2];
  const float beta = (float)p->f[0], alpha = (float)p->f[1];
  if (p->mode == 0) {
    if (beta == 0)
      for (int64_t i = 0; i < n; ++i) o[i] = alpha * b[i] * c[i];
    else
      for (int64_t i = 0; i < n; ++i) o[i] = beta * a[i] + alpha * b[i] * c[i];
    return 0;
  }
  const tpu_dtype_t dt = p->mode == 1 ? TPU_DTYPE_F16 : TPU_DTYPE_BF16;
  const float hb = sp_round_to(beta, dt), ha = sp_round_to(alpha, dt);
  for (int64_t i = 0; i < n; ++i) {
    const float t = sp_round_to(sp_round_to(ha * b[i], dt) * c[i], dt);
    o[i] = beta == 0 ? t : sp_round_to(hb * a[i], dt) + t;
  }
  return 0;
}

/* ---- prepare hooks ------------------------------------------------------------- */

static tpu_status_t prep_nextafter(const tpu_node_t* node, tpu_dtype_t common,
                                   tpu_ew_params_t* p) {
  (void)node;
  p->mode = common == TPU_DTYPE_F16    ? SP_NEXT_F16
            : common == TPU_DTYPE_BF16 ? SP_NEXT_BF16
                                       : SP_NEXT_NATIVE;
  return TPU_OK;
}

/* logit: mode 1/2 for float16/bfloat16. */
static tpu_status_t prep_logit(const tpu_node_t* node, tpu_dtype_t common, tpu_ew_params_t* p) {
  (void)node;
  p->mode = common == TPU_DTYPE_F16 ? 1 : common == TPU_DTYPE_BF16 ? 2 : 0;
  return TPU_OK;
}

/* addr: float16/bfloat16 compute in the half type (mode 1/2). */
static tpu_status_t prep_addr(const tpu_node_t* node, tpu_dtype_t common, tpu_ew_params_t* p) {
  for (int j = 0; j < 2 && j < node->num_attrs; ++j) {
    tpu_attr_kind_t k = node->attrs[j].kind;
    if (!tpu_dtype_is_floating(common) && k == TPU_ATTR_FLOAT)
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED,
                             "For integral input tensors, argument beta/alpha must not be a "
                             "floating point number.");
    if (common != TPU_DTYPE_BOOL && k == TPU_ATTR_BOOL)
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED,
                             "Boolean beta/alpha only supported for Boolean results.");
  }
  p->mode = common == TPU_DTYPE_F16 ? 1 : common == TPU_DTYPE_BF16 ? 2 : 0;
  return TPU_OK;
}

/* polygamma: n (attr 0) >= 0. */
static tpu_status_t prep_polygamma(const tpu_node_t* node, tpu_dtype_t common,
                                   tpu_ew_params_t* p) {
  (void)node, (void)common;
  if (p->i[0] < 0)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED,
                           "polygamma(n, x) does not support negative n.");
  return TPU_OK;
}

/* nan_to_num: absent posinf/neginf are the result dtype's extremes. */
static tpu_status_t prep_nan_to_num(const tpu_node_t* node, tpu_dtype_t common,
                                    tpu_ew_params_t* p) {
  double big = tpu_ew_dtype_max(common);
  for (int j = 1; j <= 2; ++j)
    if (node->num_attrs <= j || node->attrs[j].kind == TPU_ATTR_NONE)
      p->f[j] = j == 1 ? big : -big;
  return TPU_OK;
}

/* ---- impls ----------------------------------------------------------------------- */

#define SP_FLOAT_UNARY(op) EW_IMPL(k_##op, FLOAT, EW_F(sp_##op))
/* ... with complex math (complex_math.c). */
#define SP_FLOAT_UNARY_CX(op) EW_IMPL(k_##op, FLOAT, EW_F(sp_##op), .cx = tpu_ew_cx_##op)
SP_FLOAT_UNARY_CX(acos)
SP_FLOAT_UNARY_CX(asin)
SP_FLOAT_UNARY_CX(atan)
SP_FLOAT_UNARY_CX(acosh)
SP_FLOAT_UNARY_CX(asinh)
SP_FLOAT_UNARY_CX(atanh)
SP_FLOAT_UNARY_CX(sinh)
SP_FLOAT_UNARY_CX(cosh)
SP_FLOAT_UNARY(erfc)
SP_FLOAT_UNARY(erfinv)
SP_FLOAT_UNARY(lgamma)
SP_FLOAT_UNARY(digamma)
SP_FLOAT_UNARY(i0)
SP_FLOAT_UNARY(i0e)
SP_FLOAT_UNARY(i1)
SP_FLOAT_UNARY(i1e)
SP_FLOAT_UNARY(ndtri)
SP_FLOAT_UNARY(log_ndtr)
SP_FLOAT_UNARY(erfcx)
SP_FLOAT_UNARY(entr)
SP_FLOAT_UNARY(sinc)
SP_FLOAT_UNARY(bessel_j0)
SP_FLOAT_UNARY(bessel_j1)
SP_FLOAT_UNARY(deg2rad)
SP_FLOAT_UNARY(rad2deg)
EW_IMPL(k_angle, FLOAT, EW_F(sp_angle), .cx = tpu_ew_cx_angle, .flags = TPU_EW_CX_PART)
EW_IMPL(k_frexp_m, PROMOTE, EW_F(sp_frexp_m))
EW_IMPL(k_polygamma, FLOAT, EW_F(sp_polygamma), .num_params = 1, .prepare = prep_polygamma)
EW_IMPL(k_logit, FLOAT, EW_F(sp_logit), .num_params = 1, .dflt = {-1}, .prepare = prep_logit)
EW_IMPL(k_logit_backward, PROMOTE, EW_F(sp_logit_backward), .num_params = 1, .dflt = {-1})
EW_IMPL(k_frac, PROMOTE, EW_F(sp_frac))
EW_IMPL(k_sgn, PROMOTE, EW_A(sp_sgn), .cx = tpu_ew_cx_sgn)
EW_IMPL(k_nan_to_num, PROMOTE, EW_FNS(sp_ident_B8, sp_ident_I64, sp_nan_to_num_F32,
                                      sp_nan_to_num_F64),
        .num_params = 3, .prepare = prep_nan_to_num)
EW_IMPL(k_isnan, BOOL_OUT, EW_FNS(sp_false_B8, sp_false_I64, sp_isnan_F32, sp_isnan_F64))
EW_IMPL(k_isinf, BOOL_OUT, EW_FNS(sp_false_B8, sp_false_I64, sp_isinf_F32, sp_isinf_F64))
EW_IMPL(k_isposinf, BOOL_OUT,
        EW_FNS(sp_false_B8, sp_false_I64, sp_isposinf_F32, sp_isposinf_F64))
EW_IMPL(k_isneginf, BOOL_OUT,
        EW_FNS(sp_false_B8, sp_false_I64, sp_isneginf_F32, sp_isneginf_F64))
EW_IMPL(k_signbit, BOOL_OUT,
        EW_FNS(sp_false_B8, sp_signbit_I64, sp_signbit_F32, sp_signbit_F64))

EW_IMPL(k_atan2, FLOAT, EW_F(sp_atan2))
EW_IMPL(k_hypot, PROMOTE, EW_F(sp_hypot))
EW_IMPL(k_copysign, FLOAT, EW_F(sp_copysign))
EW_IMPL(k_nextafter, PROMOTE, EW_F(sp_nextafter), .prepare = prep_nextafter)
EW_IMPL(k_logaddexp, PROMOTE, EW_F(sp_logaddexp))
EW_IMPL(k_logaddexp2, PROMOTE, EW_F(sp_logaddexp2))
EW_IMPL(k_xlogy, FLOAT, EW_F(sp_xlogy))
EW_IMPL(k_xlog1py, FLOAT, EW_F(sp_xlog1py))
EW_IMPL(k_zeta, FLOAT, EW_F(sp_zeta))
EW_IMPL(k_heaviside, PROMOTE, EW_A(sp_heaviside), .flags = TPU_EW_SAME_DTYPE)
EW_IMPL(k_fmax, PROMOTE, EW_A(sp_fmax))
EW_IMPL(k_fmin, PROMOTE, EW_A(sp_fmin))
EW_IMPL(k_gcd, PROMOTE, EW_FNS(NULL, sp_gcd_I64, NULL, NULL))
EW_IMPL(k_lcm, PROMOTE, EW_FNS(NULL, sp_lcm_I64, NULL, NULL))
EW_IMPL(k_lshift, PROMOTE, EW_FNS(NULL, sp_lshift_I64, NULL, NULL))
EW_IMPL(k_rshift, PROMOTE, EW_FNS(NULL, sp_rshift_I64, NULL, NULL))
EW_IMPL(k_floor_divide, PROMOTE, EW_N(sp_floor_divide))

EW_IMPL(k_addr, PROMOTE, EW_A(sp_addr), .flags = TPU_EW_SAME_DTYPE, .num_params = 2,
        .dflt = {1, 1}, .prepare = prep_addr)

/* ---- addr: the outer product as an elementwise op over [M,1] x [N] -------------- */

/* The three operands of addr: self, vec1 as a column [M,1], vec2 [N]. */
static tpu_status_t sp_addr_inputs(const tpu_op_def_t* def, const tpu_node_t* node,
                                   tpu_value_t* in) {
  if (node->num_inputs != 3)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: expected 3 inputs", def->name);
  for (int k = 0; k < 3; ++k)
    if (node->inputs[k].kind != TPU_VALUE_VIEW)
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "addr: non-tensor operand");
  const tpu_view_t *s = &node->inputs[0].u.view, *v1 = &node->inputs[1].u.view,
                   *v2 = &node->inputs[2].u.view;
  if (v1->ndim != 1 || v2->ndim != 1 || s->ndim > 2)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "addr: 1-D vectors and a 2-D input expected");
  int64_t want[2] = {v1->sizes[0], v2->sizes[0]};
  for (int32_t d = 0; d < s->ndim; ++d) {
    int64_t w = want[2 - s->ndim + d];
    if (s->sizes[d] != w && s->sizes[d] != 1)
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "addr: input not broadcastable");
  }
  in[0] = node->inputs[0];
  in[1] = node->inputs[1];
  in[1].u.view.ndim = 2;
  in[1].u.view.sizes[1] = 1;
  in[1].u.view.strides[1] = 1;
  in[2] = node->inputs[2];
  return TPU_OK;
}

static tpu_status_t sp_addr_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  tpu_value_t in[3];
  tpu_dtype_t dt;
  TPU_RETURN_IF_ERROR(sp_addr_inputs(def, node, in));
  return tpu_ew_result_dtype(&k_addr, def->name, in, 3, node->attrs, node->num_attrs, &dt);
}

static tpu_status_t sp_addr_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_view_t* out) {
  tpu_value_t in[3];
  tpu_dtype_t dt;
  TPU_RETURN_IF_ERROR(sp_addr_inputs(def, node, in));
  TPU_RETURN_IF_ERROR(
      tpu_ew_result_dtype(&k_addr, def->name, in, 3, node->attrs, node->num_attrs, &dt));
  memset(out, 0, sizeof(*out));
  out->ndim = 2;
  out->sizes[0] = in[1].u.view.sizes[0];
  out->sizes[1] = in[2].u.view.sizes[0];
  out->dtype = dt;
  tpu_view_set_contiguous(out);
  return TPU_OK;
}

static tpu_status_t sp_addr_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                   tpu_exec_ctx_t* ctx) {
  (void)ctx;
  tpu_value_t in[3];
  TPU_RETURN_IF_ERROR(sp_addr_inputs(def, node, in));
  if (node->num_outputs != 1 || node->outputs[0].ndim != 2)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: expected one 2-D output", def->name);
  return tpu_ew_run_impl(&k_addr, def->name, in, 3, node->attrs, node->num_attrs,
                         &node->outputs[0]);
}

/* ---- frexp(self) -> (mantissa of self's dtype, exponent int32) --------------------- */

/* `outs`: the outputs when known (check, kernel); NULL for shape inference. */
static tpu_status_t sp_frexp_args(const tpu_op_def_t* def, const tpu_node_t* node,
                                  const tpu_view_t* outs) {
  tpu_dtype_t dt;
  if (node->num_inputs != 1 || node->inputs[0].kind != TPU_VALUE_VIEW)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "frexp: expected one tensor");
  const tpu_view_t* x = &node->inputs[0].u.view;
  if (!tpu_dtype_is_floating(x->dtype))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED,
                           "torch.frexp() only supports floating-point dtypes");
  if (outs && (outs[0].dtype != x->dtype || outs[1].dtype != TPU_DTYPE_I32))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "frexp: output dtypes");
  return tpu_ew_result_dtype(&k_frexp_m, def->name, node->inputs, 1, NULL, 0, &dt);
}

static tpu_status_t sp_frexp_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  return sp_frexp_args(def, node, node->num_outputs == 2 ? node->outputs : NULL);
}

static tpu_status_t sp_frexp_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                   tpu_view_t* out) {
  TPU_RETURN_IF_ERROR(sp_frexp_args(def, node, NULL));
  for (int k = 0; k < 2; ++k) {
    out[k] = node->inputs[0].u.view;
    out[k].addr = 0;
    out[k].dtype = k == 0 ? node->inputs[0].u.view.dtype : TPU_DTYPE_I32;
    tpu_view_set_contiguous(&out[k]);
  }
  return TPU_OK;
}

/* The int32 exponents: self read as float64 (exact for every floating dtype,
 * so the exponent is the one of the stored value) a run at a time. */
typedef struct sp_frexp_job {
  walk_t in, out;
  const tpu_view_t *x, *e;
} sp_frexp_job_t;

static void sp_frexp_exponents(void* arg, int64_t begin, int64_t end) {
  const sp_frexp_job_t* j = (const sp_frexp_job_t*)arg;
  double v[256];
  int32_t e[256];
  for (int64_t k = begin; k < end; k += 256) {
    int64_t n = end - k < 256 ? end - k : 256;
    walk_gather(v, TPU_DTYPE_F64, tpu_view_ptr(j->x), j->x->dtype, &j->in, k, n);
    for (int64_t i = 0; i < n; ++i) {
      int ex = 0;
      (void)frexp(v[i], &ex);
      e[i] = ex;
    }
    walk_scatter(tpu_view_ptr(j->e), TPU_DTYPE_I32, &j->out, k, e, TPU_DTYPE_I32, n);
  }
}

static tpu_status_t sp_frexp_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                    tpu_exec_ctx_t* ctx) {
  (void)ctx;
  TPU_RETURN_IF_ERROR(sp_frexp_check(def, node));
  if (node->num_outputs != 2)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: expected 2 outputs", def->name);
  sp_frexp_job_t j;
  j.x = &node->inputs[0].u.view, j.e = &node->outputs[1];
  if (!views_same_shape(j.x, j.e))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: exponent of another shape", def->name);
  walk_init_tail(&j.in, j.x, 0);
  walk_init_tail(&j.out, j.e, 0);
  tpu_parallel_for(tpu_view_numel(j.x), WALK_GRAIN, sp_frexp_exponents, &j);
  return tpu_ew_run_impl(&k_frexp_m, def->name, node->inputs, 1, NULL, 0, &node->outputs[0]);
}

/* ---- rows ------------------------------------------------------------------------ */

/* A unary op with special.* spellings that have their own kernels. */
#define SP_UNARY_ROW(name, aten, impl) EW_ROW(name, "self", "", "out", aten, impl)
#define SP_ATEN3(op) #op " " #op ".out " #op "_"
#define SP_BINARY_ATEN(op) #op " " #op ".out " #op "_"
/* special_<op> with scalar forms. */
#define SP_SPECIAL_BINARY_ATEN(op)                                                      \
  "special_" #op " special_" #op ".other_scalar special_" #op ".self_scalar special_" #op \
  ".out special_" #op ".self_scalar_out special_" #op ".other_scalar_out"
#define SP_SHIFT_ATEN(op, dunder, idunder)                                               \
  #op ".Tensor " #op ".Tensor_Scalar " #op ".Scalar_Tensor " #op ".Tensor_out " #op     \
  ".Tensor_Scalar_out " #op ".Scalar_Tensor_out " #op "_.Tensor " #op "_.Tensor_Scalar " \
  #dunder ".Tensor " #dunder ".Scalar " #dunder ".Tensor_out " #dunder ".Scalar_out "    \
  #idunder ".Tensor " #idunder ".Scalar"

static const tpu_op_def_t g_rows[] = {
    {.name = "addr", .inputs = "self,vec1,vec2", .attrs = "beta,alpha", .outputs = "out",
     .aten = "addr addr.out addr_", .kernel = sp_addr_kernel, .infer = sp_addr_infer,
     .check = sp_addr_check, .impl = &k_addr},
    SP_UNARY_ROW("acos", SP_ATEN3(acos), k_acos),
    SP_UNARY_ROW("asin", SP_ATEN3(asin), k_asin),
    SP_UNARY_ROW("atan", SP_ATEN3(atan), k_atan),
    SP_UNARY_ROW("acosh", SP_ATEN3(acosh), k_acosh),
    SP_UNARY_ROW("asinh", SP_ATEN3(asinh), k_asinh),
    SP_UNARY_ROW("atanh", SP_ATEN3(atanh), k_atanh),
    SP_UNARY_ROW("sinh", SP_ATEN3(sinh), k_sinh),
    SP_UNARY_ROW("cosh", SP_ATEN3(cosh), k_cosh),
    SP_UNARY_ROW("erfc", SP_ATEN3(erfc), k_erfc),
    SP_UNARY_ROW("erfinv", SP_ATEN3(erfinv), k_erfinv),
    SP_UNARY_ROW("lgamma", SP_ATEN3(lgamma), k_lgamma),
    SP_UNARY_ROW("digamma", SP_ATEN3(digamma), k_digamma),
    SP_UNARY_ROW("i0", SP_ATEN3(i0), k_i0),
    SP_UNARY_ROW("special_i0e", "special_i0e special_i0e.out", k_i0e),
    SP_UNARY_ROW("special_i1", "special_i1 special_i1.out", k_i1),
    SP_UNARY_ROW("special_i1e", "special_i1e special_i1e.out", k_i1e),
    SP_UNARY_ROW("special_ndtri", "special_ndtri special_ndtri.out", k_ndtri),
    SP_UNARY_ROW("special_log_ndtr", "special_log_ndtr special_log_ndtr.out", k_log_ndtr),
    SP_UNARY_ROW("special_erfcx", "special_erfcx special_erfcx.out", k_erfcx),
    SP_UNARY_ROW("special_entr", "special_entr special_entr.out", k_entr),
    SP_UNARY_ROW("special_bessel_j0", "special_bessel_j0 special_bessel_j0.out", k_bessel_j0),
    SP_UNARY_ROW("special_bessel_j1", "special_bessel_j1 special_bessel_j1.out", k_bessel_j1),
    SP_UNARY_ROW("sinc", SP_ATEN3(sinc), k_sinc),
    SP_UNARY_ROW("deg2rad", SP_ATEN3(deg2rad), k_deg2rad),
    SP_UNARY_ROW("rad2deg", SP_ATEN3(rad2deg), k_rad2deg),
    SP_UNARY_ROW("frac", SP_ATEN3(frac), k_frac),
    SP_UNARY_ROW("sgn", SP_ATEN3(sgn), k_sgn),
    SP_UNARY_ROW("angle", "angle angle.out", k_angle),
    {.name = "frexp", .inputs = "self", .attrs = "", .outputs = "mantissa,exponent",
     .aten = "frexp.Tensor frexp.Tensor_out", .kernel = sp_frexp_kernel, .infer = sp_frexp_infer,
     .check = sp_frexp_check, .impl = NULL},
    EW_ROW("polygamma", "self", "n", "out", "polygamma polygamma.out", k_polygamma),
    EW_ROW("logit", "self", "eps", "out", "logit logit.out logit_", k_logit),
    EW_BACKWARD_ROW(logit_backward, "grad_output,self", "eps"),
    EW_ROW("nan_to_num", "self", "nan,posinf,neginf", "out",
           "nan_to_num nan_to_num.out nan_to_num_", k_nan_to_num),
    SP_UNARY_ROW("isnan", "isnan isnan.out", k_isnan),
    SP_UNARY_ROW("isinf", "isinf isinf.out", k_isinf),
    SP_UNARY_ROW("isposinf", "isposinf isposinf.out", k_isposinf),
    SP_UNARY_ROW("isneginf", "isneginf isneginf.out", k_isneginf),
    SP_UNARY_ROW("signbit", "signbit signbit.out", k_signbit),
    EW_ROW("atan2", "self,other", "", "out", SP_BINARY_ATEN(atan2),
           k_atan2),
    EW_ROW("hypot", "self,other", "", "out", SP_BINARY_ATEN(hypot), k_hypot),
    EW_ROW("copysign", "self,other", "", "out",
           "copysign.Tensor copysign.Scalar copysign.out copysign.Scalar_out copysign_.Tensor "
           "copysign_.Scalar",
           k_copysign),
    EW_ROW("nextafter", "self,other", "", "out", SP_BINARY_ATEN(nextafter), k_nextafter),
    EW_ROW("logaddexp", "self,other", "", "out", "logaddexp logaddexp.out", k_logaddexp),
    EW_ROW("logaddexp2", "self,other", "", "out", "logaddexp2 logaddexp2.out", k_logaddexp2),
    EW_ROW("xlogy", "self,other", "", "out",
           "xlogy.Tensor xlogy.Scalar_Other xlogy.Scalar_Self xlogy.OutTensor "
           "xlogy.OutScalar_Self xlogy.OutScalar_Other xlogy_.Tensor xlogy_.Scalar_Other",
           k_xlogy),
    EW_ROW("special_xlog1py", "self,other", "", "out", SP_SPECIAL_BINARY_ATEN(xlog1py),
           k_xlog1py),
    EW_ROW("special_zeta", "self,other", "", "out", SP_SPECIAL_BINARY_ATEN(zeta), k_zeta),
    EW_ROW("heaviside", "self,values", "", "out", SP_BINARY_ATEN(heaviside), k_heaviside),
    EW_ROW("fmax", "self,other", "", "out", "fmax fmax.out", k_fmax),
    EW_ROW("fmin", "self,other", "", "out", "fmin fmin.out", k_fmin),
    EW_ROW("gcd", "self,other", "", "out", SP_BINARY_ATEN(gcd), k_gcd),
    EW_ROW("lcm", "self,other", "", "out", SP_BINARY_ATEN(lcm), k_lcm),
    EW_ROW("bitwise_left_shift", "self,other", "", "out",
           SP_SHIFT_ATEN(bitwise_left_shift, __lshift__, __ilshift__), k_lshift),
    EW_ROW("bitwise_right_shift", "self,other", "", "out",
           SP_SHIFT_ATEN(bitwise_right_shift, __rshift__, __irshift__), k_rshift),
    EW_ROW("floor_divide", "self,other", "", "out",
           "floor_divide floor_divide.Scalar floor_divide.out floor_divide.Scalar_out "
           "floor_divide_.Tensor floor_divide_.Scalar",
           k_floor_divide),
};

const tpu_op_family_t tpu_family_elementwise_special = {
    "elementwise_special", g_rows, (int32_t)(sizeof(g_rows) / sizeof(g_rows[0]))};
