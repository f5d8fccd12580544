/* kernels/elementwise/tile.h — generators of elementwise tile functions, op
 * impls and rows, shared by the files that define elementwise ops
 * (op_table.c, special.c, activation.c).
 *
 * Tile functions are generated from one body per op and class of compute
 * types. A body reads x, y, z (the inputs' elements), s0..s2 (the number
 * attrs as the element type) and p (the params), and assigns r. C(v) is a
 * constant of the element type, so float32 work stays in float32. <tgmath.h>
 * picks the float or double libm function from the argument's type.
 * Include this header after <tgmath.h>.
 */
#ifndef TPU_KERNELS_ELEMENTWISE_TILE_H_
#define TPU_KERNELS_ELEMENTWISE_TILE_H_

#include "kernels/elementwise/elementwise.h"

/* ---- helpers ----------------------------------------------------------------- */

#define EW_SQRT1_2 0.70710678118654752440
#define EW_SQRT2 1.41421356237309504880
#define EW_2_SQRTPI 1.12837916709551257390
#define EW_GELU_KAPPA 0.044715

static inline int64_t ew_wadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static inline int64_t ew_wsub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static inline int64_t ew_wmul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
static inline int64_t ew_wneg(int64_t a) { return (int64_t)(0 - (uint64_t)a); }

/* Integer division family; b != 0 (checked by the caller), b == -1 spelled
 * out because INT64_MIN / -1 overflows. */
static inline int64_t ew_idiv_trunc(int64_t a, int64_t b) { return b == -1 ? ew_wneg(a) : a / b; }
static inline int64_t ew_irem(int64_t a, int64_t b) { return b == -1 ? 0 : a % b; }
static inline int64_t ew_idiv_floor(int64_t a, int64_t b) {
  int64_t q = ew_idiv_trunc(a, b), r = ew_irem(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t ew_imod(int64_t a, int64_t b) { /* Python's %, like torch.remainder */
  int64_t r = ew_irem(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

/* PyTorch's integer pow (negative exponents give 0 except for bases +-1). */
static inline int64_t ew_powi(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
  uint64_t r = 1, x = (uint64_t)a;
  for (; b; b >>= 1, x *= x)
    if (b & 1) r *= x;
  return (int64_t)r;
}

/* Floating helpers, defined for float and double. */
#define EW_FLOAT_HELPERS(T, SUF)                                              \
  static inline T ew_pymod_##SUF(T a, T b) {                                  \
    T m = fmod(a, b);                                                         \
    return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;                      \
  }                                                                           \
  static inline T ew_floordiv_##SUF(T a, T b) { /* PyTorch's div_floor */     \
    if (b == 0) return a / b;                                                 \
    T mod = fmod(a, b);                                                       \
    T div = (a - mod) / b;                                                    \
    if (mod != 0 && (b < 0) != (mod < 0)) div -= (T)1;                        \
    if (div == 0) return copysign((T)0, a / b);                               \
    T fl = floor(div);                                                        \
    return div - fl > (T)0.5 ? fl + (T)1 : fl;                                \
  }
EW_FLOAT_HELPERS(float, f)
EW_FLOAT_HELPERS(double, d)
#define EW_PYMOD(a, b) _Generic((a), float: ew_pymod_f, double: ew_pymod_d)(a, b)
#define EW_FLOORDIV(a, b) _Generic((a), float: ew_floordiv_f, double: ew_floordiv_d)(a, b)

/* NaN-propagating max/min (exact for integers and bools too). */
#define EW_MAX(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) < (b) ? (b) : (a))
#define EW_MIN(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (b) < (a) ? (b) : (a))

/* ---- tile function generators ----------------------------------------------- */

#define EW_P_B8(p, k) ((uint8_t)((p)->i[k] != 0))
#define EW_P_I64(p, k) ((p)->i[k])
#define EW_P_F32(p, k) ((float)(p)->f[k])
#define EW_P_F64(p, k) ((p)->f[k])
#define C(v) ((ew_t)(v))

#define EW_HEAD(name, CT, T, OT)                                                         \
  static int name##_##CT(void* out, const void* const* in, int64_t n,                   \
                         const tpu_ew_params_t* p) {                                     \
    typedef T ew_t;                                                                      \
    OT* o = (OT*)out;                                                                    \
    const ew_t s0 = EW_P_##CT(p, 0), s1 = EW_P_##CT(p, 1), s2 = EW_P_##CT(p, 2);         \
    (void)sizeof(ew_t), (void)s0, (void)s1, (void)s2;

#define EW_U(name, CT, T, OT, BODY)                                \
  EW_HEAD(name, CT, T, OT)                                         \
  const T* a = (const T*)in[0];                                    \
  for (int64_t i = 0; i < n; ++i) {                                \
    const T x = a[i];                                              \
    OT r;                                                          \
    (void)x;                                                       \
    BODY;                                                          \
    o[i] = r;                                                      \
  }                                                                \
  return 0;                                                        \
  }

#define EW_B(name, CT, T, OT, BODY)                                \
  EW_HEAD(name, CT, T, OT)                                         \
  const T* a = (const T*)in[0];                                    \
  const T* b = (const T*)in[1];                                    \
  for (int64_t i = 0; i < n; ++i) {                                \
    const T x = a[i];                                              \
    const T y = b[i];                                              \
    OT r;                                                          \
    (void)x, (void)y;                                              \
    BODY;                                                          \
    o[i] = r;                                                      \
  }                                                                \
  return 0;                                                        \
  }

#define EW_T(name, CT, T, OT, BODY)                                \
  EW_HEAD(name, CT, T, OT)                                         \
  const T* a = (const T*)in[0];                                    \
  const T* b = (const T*)in[1];                                    \
  const T* c = (const T*)in[2];                                    \
  for (int64_t i = 0; i < n; ++i) {                                \
    const T x = a[i];                                              \
    const T y = b[i];                                              \
    const T z = c[i];                                              \
    OT r;                                                          \
    (void)x, (void)y, (void)z;                                     \
    BODY;                                                          \
    o[i] = r;                                                      \
  }                                                                \
  return 0;                                                        \
  }

/* Classes of compute types. PRED: bool-valued, over every type. */
#define EW_FLOATS(M, name, BODY) M(name, F32, float, float, BODY) M(name, F64, double, double, BODY)
#define EW_INTS(M, name, BODY) M(name, I64, int64_t, int64_t, BODY)
#define EW_BOOLS(M, name, BODY) M(name, B8, uint8_t, uint8_t, BODY)
#define EW_NUMS(M, name, BODY) EW_INTS(M, name, BODY) EW_FLOATS(M, name, BODY)
#define EW_ALLS(M, name, BODY) EW_BOOLS(M, name, BODY) EW_NUMS(M, name, BODY)
#define EW_PREDS(M, name, BODY)                                                      \
  M(name, B8, uint8_t, uint8_t, BODY) M(name, I64, int64_t, uint8_t, BODY)           \
  M(name, F32, float, uint8_t, BODY) M(name, F64, double, uint8_t, BODY)

/* fn tables of an impl. */
#define EW_FNS(b8, i64, f32, f64) \
  {[TPU_COMPUTE_B8] = b8, [TPU_COMPUTE_I64] = i64, [TPU_COMPUTE_F32] = f32, [TPU_COMPUTE_F64] = f64}
#define EW_F(name) EW_FNS(NULL, NULL, name##_F32, name##_F64)
#define EW_N(name) EW_FNS(NULL, name##_I64, name##_F32, name##_F64)
#define EW_A(name) EW_FNS(name##_B8, name##_I64, name##_F32, name##_F64)
#define EW_BI(name) EW_FNS(name##_B8, name##_I64, NULL, NULL)

/* ---- impls and rows ------------------------------------------------------------ */

/* EW_IMPL(var, RULE, fns[, more designated fields]) */
#define EW_IMPL(var, RULE, ...) \
  static const tpu_ew_impl_t var = {.rule = TPU_EW_##RULE, .fn = __VA_ARGS__};

/* Every elementwise row takes complex operands and complex Python numbers
 * (TPU_OP_COMPLEX, TPU_OP_COMPLEX_NUMBERS): the row
 * functions run them through the impl's cx function, or refuse them when
 * it has none (elementwise.h). */
#define EW_ROW(name_, inputs_, attrs_, outputs_, aten_, impl_) \
  {.name = name_, .inputs = inputs_, .attrs = attrs_, .outputs = outputs_, .aten = aten_, \
   .kernel = tpu_ew_kernel, .infer = tpu_ew_infer, .check = tpu_ew_check, .impl = &impl_, \
   .flags = TPU_OP_OWN_OVERLAP_CHECK | TPU_OP_POINTWISE | TPU_OP_COMPLEX | TPU_OP_COMPLEX_NUMBERS}
/* A row whose result bits do not depend on signedness: it takes uint16/32/64
 * as their signed twins (TPU_OP_UNSIGNED_AS_SIGNED, tpu/ops.h). */
#define EW_ROW_BITS(name_, inputs_, attrs_, outputs_, aten_, impl_)                             \
  {.name = name_, .inputs = inputs_, .attrs = attrs_, .outputs = outputs_, .aten = aten_, \
   .kernel = tpu_ew_kernel, .infer = tpu_ew_infer, .check = tpu_ew_check, .impl = &impl_, \
   .flags = TPU_OP_OWN_OVERLAP_CHECK | TPU_OP_POINTWISE | TPU_OP_COMPLEX | TPU_OP_COMPLEX_NUMBERS | \
            TPU_OP_UNSIGNED_AS_SIGNED}
/* name(self): functional, out= and in-place forms. */
#define EW_UNARY_ROW(op) EW_ROW(#op, "self", "", "out", #op " " #op ".out " #op "_", k_##op)
/* name.Tensor / name.Scalar (other a Python number), with out= and in-place. */
#define EW_TS_ATEN(op) \
  #op ".Tensor " #op ".Scalar " #op ".Tensor_out " #op ".Scalar_out " #op "_.Tensor " #op "_.Scalar"
#define EW_BACKWARD_ROW(op, inputs, attrs) \
  EW_ROW(#op, inputs, attrs, "grad_input", #op " " #op ".grad_input", k_##op)

#endif /* TPU_KERNELS_ELEMENTWISE_TILE_H_ */
