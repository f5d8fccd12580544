/* dtype.c — dtype facts, promotion and conversion, all generated from
 * TPU_DTYPE_LIST. */
#include "tpu/dtype.h"

#include <math.h>
#include <string.h>

typedef struct dtype_info {
  const char* name;
  size_t size;
  tpu_compute_type_t compute;
  int category;
} dtype_info_t;

static const dtype_info_t g_info[TPU_DTYPE_COUNT] = {
#define TPU_X_(E, n, T, C, K) {n, sizeof(T), TPU_COMPUTE_##C, K},
    TPU_DTYPE_LIST(TPU_X_)
#undef TPU_X_
};

static int valid(tpu_dtype_t d) { return d >= 0 && d < TPU_DTYPE_COUNT; }

size_t tpu_dtype_size(tpu_dtype_t d) { return valid(d) ? g_info[d].size : 0; }
const char* tpu_dtype_name(tpu_dtype_t d) { return valid(d) ? g_info[d].name : "invalid"; }
tpu_compute_type_t tpu_dtype_compute(tpu_dtype_t d) {
  return valid(d) ? g_info[d].compute : TPU_COMPUTE_F32;
}
bool tpu_dtype_is_floating(tpu_dtype_t d) { return valid(d) && g_info[d].category == 2; }
bool tpu_dtype_is_integral(tpu_dtype_t d) { return valid(d) && g_info[d].category == 1; }

tpu_dtype_t tpu_compute_storage_dtype(tpu_compute_type_t ct) {
  static const tpu_dtype_t map[TPU_COMPUTE_COUNT] = {TPU_DTYPE_BOOL, TPU_DTYPE_I64,
                                                     TPU_DTYPE_F32, TPU_DTYPE_F64};
  return (unsigned)ct < TPU_COMPUTE_COUNT ? map[ct] : TPU_DTYPE_INVALID;
}

size_t tpu_compute_size(tpu_compute_type_t ct) {
  return tpu_dtype_size(tpu_compute_storage_dtype(ct));
}

/* PyTorch's promoteTypes for these dtypes (c10/core/ScalarType.cpp):
 * u8 with a signed int goes to the next wider signed type; f16 with bf16 is f32. */
tpu_dtype_t tpu_dtype_promote(tpu_dtype_t a, tpu_dtype_t b) {
  enum { b1 = TPU_DTYPE_BOOL, u1 = TPU_DTYPE_U8, i1 = TPU_DTYPE_I8, i2 = TPU_DTYPE_I16,
         i4 = TPU_DTYPE_I32, i8 = TPU_DTYPE_I64, f2 = TPU_DTYPE_F16, bf = TPU_DTYPE_BF16,
         f4 = TPU_DTYPE_F32, f8 = TPU_DTYPE_F64 };
  static const signed char table[TPU_DTYPE_COUNT][TPU_DTYPE_COUNT] = {
      /*        b1  u1  i1  i2  i4  i8  f2  bf  f4  f8 */
      /* b1 */ {b1, u1, i1, i2, i4, i8, f2, bf, f4, f8},
      /* u1 */ {u1, u1, i2, i2, i4, i8, f2, bf, f4, f8},
      /* i1 */ {i1, i2, i1, i2, i4, i8, f2, bf, f4, f8},
      /* i2 */ {i2, i2, i2, i2, i4, i8, f2, bf, f4, f8},
      /* i4 */ {i4, i4, i4, i4, i4, i8, f2, bf, f4, f8},
      /* i8 */ {i8, i8, i8, i8, i8, i8, f2, bf, f4, f8},
      /* f2 */ {f2, f2, f2, f2, f2, f2, f2, f4, f4, f8},
      /* bf */ {bf, bf, bf, bf, bf, bf, f4, bf, f4, f8},
      /* f4 */ {f4, f4, f4, f4, f4, f4, f4, f4, f4, f8},
      /* f8 */ {f8, f8, f8, f8, f8, f8, f8, f8, f8, f8},
  };
  if (!valid(a) || !valid(b)) return TPU_DTYPE_INVALID;
  return (tpu_dtype_t)table[a][b];
}

/* ---- half types --------------------------------------------------------- */

float tpu_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else { /* subnormal: renormalise */
      int e = -1;
      do {
        e++;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t tpu_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) /* inf or nan */
    return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow to inf */
  if (absx < 0x38800000u) {                                     /* subnormal or zero */
    float a;
    memcpy(&a, &absx, sizeof(a));
    /* 2^-24 is the smallest subnormal; round to nearest even by adding. */
    float scaled = a * 16777216.0f;
    uint32_t m = (uint32_t)lrintf(scaled);
    return (uint16_t)(sign | m);
  }
  uint32_t mant = absx & 0x7fffffu;
  uint32_t exp = (absx >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
  return (uint16_t)(sign | h);
}

float tpu_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t tpu_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
  uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return (uint16_t)(x >> 16);
}

/* ---- conversion ---------------------------------------------------------- */
/* Every dtype is read into a double or int64 "wide" value and written back.
 * Loads and stores are generated per dtype from the table. */

#define LOAD_AS_DOUBLE_BOOL(p) ((double)(*(const uint8_t*)(p) != 0))
#define LOAD_AS_DOUBLE_U8(p) ((double)*(const uint8_t*)(p))
#define LOAD_AS_DOUBLE_I8(p) ((double)*(const int8_t*)(p))
#define LOAD_AS_DOUBLE_I16(p) ((double)*(const int16_t*)(p))
#define LOAD_AS_DOUBLE_I32(p) ((double)*(const int32_t*)(p))
#define LOAD_AS_DOUBLE_I64(p) ((double)*(const int64_t*)(p))
#define LOAD_AS_DOUBLE_F16(p) ((double)tpu_f16_to_f32(*(const uint16_t*)(p)))
#define LOAD_AS_DOUBLE_BF16(p) ((double)tpu_bf16_to_f32(*(const uint16_t*)(p)))
#define LOAD_AS_DOUBLE_F32(p) ((double)*(const float*)(p))
#define LOAD_AS_DOUBLE_F64(p) (*(const double*)(p))

static inline double load_f(const void* p, tpu_dtype_t d) {
  switch (d) {
#define TPU_X_(E, n, T, C, K) \
  case TPU_DTYPE_##E:         \
    return LOAD_AS_DOUBLE_##E(p);
    TPU_DTYPE_LIST(TPU_X_)
#undef TPU_X_
    default:
      return 0.0;
  }
}

static inline int64_t load_i(const void* p, tpu_dtype_t d) {
  switch (d) {
#define TPU_X_(E, n, T, C, K) \
  case TPU_DTYPE_##E:         \
    return K == 2 ? (int64_t)LOAD_AS_DOUBLE_##E(p) : (int64_t) * (const T*)(p);
    TPU_DTYPE_LIST(TPU_X_)
#undef TPU_X_
    default:
      return 0;
  }
}

/* Float -> integer casts of out-of-range values are undefined in C; PyTorch's
 * are unspecified. Clamp into int64 range first so the result is defined. */
static inline int64_t f2i(double v) {
  if (v != v) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return (int64_t)v;
}

/* Per-dtype stores of a wide value (fv when the source is floating, else iv). */
#define STORE_AS_BOOL(p) (*(uint8_t*)(p) = isf ? (fv != 0.0) : (iv != 0))
#define STORE_AS_U8(p) (*(uint8_t*)(p) = (uint8_t)(uint64_t)(isf ? f2i(fv) : iv))
#define STORE_AS_I8(p) (*(int8_t*)(p) = (int8_t)(uint64_t)(isf ? f2i(fv) : iv))
#define STORE_AS_I16(p) (*(int16_t*)(p) = (int16_t)(uint64_t)(isf ? f2i(fv) : iv))
#define STORE_AS_I32(p) (*(int32_t*)(p) = (int32_t)(uint64_t)(isf ? f2i(fv) : iv))
#define STORE_AS_I64(p) (*(int64_t*)(p) = isf ? f2i(fv) : iv)
#define STORE_AS_F16(p) (*(uint16_t*)(p) = tpu_f32_to_f16((float)(isf ? fv : (double)iv)))
#define STORE_AS_BF16(p) (*(uint16_t*)(p) = tpu_f32_to_bf16((float)(isf ? fv : (double)iv)))
#define STORE_AS_F32(p) (*(float*)(p) = isf ? (float)fv : (float)iv)
#define STORE_AS_F64(p) (*(double*)(p) = isf ? fv : (double)iv)

static inline void store(void* p, tpu_dtype_t d, const void* src, tpu_dtype_t s) {
  int isf = tpu_dtype_is_floating(s);
  double fv = isf ? load_f(src, s) : 0.0;
  int64_t iv = isf ? 0 : load_i(src, s);
  switch (d) {
#define TPU_X_(E, n, T, C, K) \
  case TPU_DTYPE_##E:         \
    STORE_AS_##E(p);          \
    return;
    TPU_DTYPE_LIST(TPU_X_)
#undef TPU_X_
    default:
      return;
  }
}

void tpu_convert(void* dst, tpu_dtype_t dst_dtype, int64_t dst_stride, const void* src,
                 tpu_dtype_t src_dtype, int64_t src_stride, int64_t n) {
  size_t ds = tpu_dtype_size(dst_dtype), ss = tpu_dtype_size(src_dtype);
  char* d = (char*)dst;
  const char* s = (const char*)src;
  if (dst_dtype == src_dtype && dst_stride == 1 && src_stride == 1) {
    memmove(d, s, (size_t)n * ds);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    store(d + i * dst_stride * (int64_t)ds, dst_dtype, s + i * src_stride * (int64_t)ss,
          src_dtype);
}
