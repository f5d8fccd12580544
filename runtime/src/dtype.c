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
/* A conversion reads a chunk of source elements into a "wide" buffer (double
 * for floating sources, int64 otherwise) and writes the chunk out as the
 * destination dtype. One load and one store loop per dtype, generated from
 * the table; each loop is branch-free over its chunk. */

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

/* Integer loads (bool normalised to 0/1); unused for floating dtypes. */
#define LOAD_AS_INT(E, T, p) \
  (TPU_DTYPE_##E == TPU_DTYPE_BOOL ? (int64_t)(*(const uint8_t*)(p) != 0) : (int64_t) * (const T*)(p))

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

typedef void (*load_fn)(void* wide, const char* src, int64_t stride, int64_t n);
typedef void (*store_fn)(char* dst, int64_t stride, const void* wide, int wide_float, int64_t n);

#define TPU_X_(E, n, T, C, K)                                                    \
  static void load_##E(void* wide, const char* s, int64_t st, int64_t cnt) {     \
    if (K == 2) {                                                                \
      double* w = (double*)wide;                                                 \
      for (int64_t i = 0; i < cnt; ++i) w[i] = LOAD_AS_DOUBLE_##E(s + i * st);  \
    } else {                                                                     \
      int64_t* w = (int64_t*)wide;                                               \
      for (int64_t i = 0; i < cnt; ++i) w[i] = LOAD_AS_INT(E, T, s + i * st);    \
    }                                                                            \
  }                                                                              \
  static void store_##E(char* d, int64_t st, const void* wide, int wide_float,  \
                        int64_t cnt) {                                           \
    if (wide_float) {                                                            \
      const int isf = 1;                                                         \
      const double* w = (const double*)wide;                                     \
      for (int64_t i = 0; i < cnt; ++i) {                                        \
        double fv = w[i];                                                        \
        int64_t iv = 0;                                                          \
        (void)iv;                                                                \
        STORE_AS_##E(d + i * st);                                                \
      }                                                                          \
    } else {                                                                     \
      const int isf = 0;                                                         \
      const int64_t* w = (const int64_t*)wide;                                   \
      for (int64_t i = 0; i < cnt; ++i) {                                        \
        int64_t iv = w[i];                                                       \
        double fv = 0.0;                                                         \
        (void)fv;                                                                \
        STORE_AS_##E(d + i * st);                                                \
      }                                                                          \
    }                                                                            \
  }
TPU_DTYPE_LIST(TPU_X_)
#undef TPU_X_

static const load_fn g_load[TPU_DTYPE_COUNT] = {
#define TPU_X_(E, n, T, C, K) load_##E,
    TPU_DTYPE_LIST(TPU_X_)
#undef TPU_X_
};
static const store_fn g_store[TPU_DTYPE_COUNT] = {
#define TPU_X_(E, n, T, C, K) store_##E,
    TPU_DTYPE_LIST(TPU_X_)
#undef TPU_X_
};

/* Same-dtype strided copy by element size. */
#define COPY_STRIDED(T)                                                          \
  do {                                                                           \
    T* d_ = (T*)dst;                                                             \
    const T* s_ = (const T*)src;                                                 \
    for (int64_t i = 0; i < n; ++i) d_[i * dst_stride] = s_[i * src_stride];     \
  } while (0)

void tpu_convert(void* dst, tpu_dtype_t dst_dtype, int64_t dst_stride, const void* src,
                 tpu_dtype_t src_dtype, int64_t src_stride, int64_t n) {
  if (!valid(dst_dtype) || !valid(src_dtype) || n <= 0) return;
  size_t ds = g_info[dst_dtype].size, ss = g_info[src_dtype].size;
  if (dst_dtype == src_dtype) {
    if (dst_stride == 1 && src_stride == 1) {
      memmove(dst, src, (size_t)n * ds);
    } else if (ds == 1) {
      COPY_STRIDED(uint8_t);
    } else if (ds == 2) {
      COPY_STRIDED(uint16_t);
    } else if (ds == 4) {
      COPY_STRIDED(uint32_t);
    } else {
      COPY_STRIDED(uint64_t);
    }
    return;
  }
  enum { CHUNK = 256 };
  union {
    double f[CHUNK];
    int64_t i[CHUNK];
  } wide;
  int wide_float = g_info[src_dtype].category == 2;
  char* d = (char*)dst;
  const char* s = (const char*)src;
  int64_t dst_step = dst_stride * (int64_t)ds, src_step = src_stride * (int64_t)ss;
  for (int64_t off = 0; off < n; off += CHUNK) {
    int64_t cnt = n - off < CHUNK ? n - off : CHUNK;
    g_load[src_dtype](&wide, s + off * src_step, src_step, cnt);
    g_store[dst_dtype](d + off * dst_step, dst_step, &wide, wide_float, cnt);
  }
}
