/* convert.c — the runtime's one implementation of element conversion:
 * tpu_convert and the half helpers of tpu/dtype.h. Every kernel family, the
 * op registry and the tests convert through it.
 *
 * Cast rules (PyTorch's, c10/util/TypeCast.h):
 *   - bool reads as 0 or 1 (any nonzero byte is true); anything nonzero,
 *     NaN included, writes as true;
 *   - floating -> integer truncates toward zero. NaN gives 0 and values
 *     beyond int64 saturate (PyTorch leaves both unspecified); narrower
 *     integers then wrap, two's complement, like every integer narrowing;
 *   - integer -> floating rounds once, to nearest even (int64 -> float32
 *     directly, not through float64, also on the way to a half type);
 *   - float16 and bfloat16 widen exactly to float32 (a NaN becomes quiet);
 *     float32 narrows to them rounding to nearest even (float16 overflows to
 *     inf; a NaN stays a quiet NaN of the same sign: float16 drops its
 *     payload, bfloat16 keeps the top bits). Values of other types reach a
 *     half type through float32, as c10::Half(double) does: float64 rounds
 *     twice.
 *
 * How it is fast. Every dtype computes in one of four compute types (B8,
 * I64, F32, F64; tpu/dtype.h), each stored as a dtype of its own (bool,
 * int64, float32, float64). From TPU_DTYPE_LIST this file generates a typed
 * "load" loop for every (dtype -> compute type) pair and a "store" loop for
 * every (compute type -> dtype) pair. A conversion with a compute storage
 * dtype on either side is then one typed loop; between two other dtypes
 * (int32 -> float16, float16 -> bfloat16, ...) values pass through the
 * source's compute type, which holds them exactly, a stack chunk at a time.
 * Each loop has cases for the strides kernels use (contiguous, broadcast,
 * gathering into a buffer, scattering out of one), and the half
 * conversions are branch-free, so the compiler vectorises them. On x86,
 * contiguous conversions between a half type and float32, float64 or the
 * other half type also have SIMD paths (F16C for float16, AVX2 for
 * bfloat16), chosen at run time; a SIMD block that holds a NaN takes the
 * portable code instead (the instructions quiet NaNs differently), so
 * results are bit-identical on every CPU. Dispatch is a few table lookups,
 * so one-element calls are cheap too.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "tpu/dtype.h"

#include "base/half_bits.h"

float tpu_f16_to_f32(uint16_t h) { return h2f(h, false); }
uint16_t tpu_f32_to_f16(float f) { return f2h(f); }
float tpu_bf16_to_f32(uint16_t h) { return bf2f(h, false); }
uint16_t tpu_f32_to_bf16(float f) { return f2bf(f); }

/* Floating -> int64: NaN -> 0, saturating (a C cast of an out-of-range
 * value is undefined). Integers pass through; _Generic picks by type. */
static inline int64_t f2i(double v) {
  if (v != v) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return (int64_t)v;
}
static inline int64_t i2i(int64_t v) { return v; }
#define AS_I64(c) _Generic((c), float: f2i, double: f2i, default: i2i)(c)

/* READ_E: a stored element of dtype E as its natural C value (uint8_t 0/1,
 * an integer, float or double). WRITE_E: such a value as an element of E.
 * NaNs read from a half type are made quiet (payload kept), as widening
 * them through float64 does, so a signalling float16 NaN converts to the
 * same float32 as it does to float64 and back. */
#define READ_BOOL(v) ((uint8_t)((v) != 0))
#define READ_U8(v) (v)
#define READ_I8(v) (v)
#define READ_I16(v) (v)
#define READ_I32(v) (v)
#define READ_I64(v) (v)
#define READ_F16(v) h2f(v, true)
#define READ_BF16(v) bf2f(v, true)
#define READ_F32(v) (v)
#define READ_F64(v) (v)

#define WRITE_BOOL(c) ((uint8_t)((c) != 0))
#define WRITE_U8(c) ((uint8_t)(uint64_t)AS_I64(c))
#define WRITE_I8(c) ((int8_t)(uint64_t)AS_I64(c))
#define WRITE_I16(c) ((int16_t)(uint64_t)AS_I64(c))
#define WRITE_I32(c) ((int32_t)(uint64_t)AS_I64(c))
#define WRITE_I64(c) ((int64_t)AS_I64(c))
#define WRITE_F16(c) f2h((float)(c))
#define WRITE_BF16(c) f2bf((float)(c))
#define WRITE_F32(c) ((float)(c))
#define WRITE_F64(c) ((double)(c))

/* ---- typed loops ----------------------------------------------------------------- */

/* The compute types as (name, C type, storage dtype), for pairing with a dtype. */
#define COMPUTE_LIST(X, E, T)                                                    \
  X(E, T, B8, uint8_t, BOOL) X(E, T, I64, int64_t, I64) X(E, T, F32, float, F32) \
  X(E, T, F64, double, F64)

/* dst[i * ds] = convert(src[i * ss]) for i < n (strides in elements). */
typedef void (*cvt_fn)(void* dst, int64_t ds, const void* src, int64_t ss, int64_t n);

/* The strides kernels use get loops of their own, which the compiler
 * vectorises: contiguous, broadcast (source stride 0), gathering into a
 * contiguous buffer (ds == 1) and scattering out of one (ss == 1). */
#define LOOP_BODY(DT, ST, CONV)                                    \
  DT* d = (DT*)dst;                                                \
  const ST* s = (const ST*)src;                                    \
  if (ds == 1 && ss == 1) {                                        \
    for (int64_t i = 0; i < n; ++i) d[i] = CONV(s[i]);             \
  } else if (ss == 0) {                                            \
    const DT v = CONV(s[0]);                                       \
    for (int64_t i = 0; i < n; ++i) d[i * ds] = v;                 \
  } else if (ds == 1) {                                            \
    for (int64_t i = 0; i < n; ++i) d[i] = CONV(s[i * ss]);        \
  } else if (ss == 1) {                                            \
    for (int64_t i = 0; i < n; ++i) d[i * ds] = CONV(s[i]);        \
  } else {                                                         \
    for (int64_t i = 0; i < n; ++i) d[i * ds] = CONV(s[i * ss]);   \
  }

/* load_E_CT: dtype E -> compute type CT; store_CT_E: compute type CT -> E. */
#define DEFINE_PAIR(E, T, CT, CTT, CTE)                                                     \
  static inline CTT to_##CT##_##E(T v) { return WRITE_##CTE(READ_##E(v)); }                \
  static inline T from_##CT##_##E(CTT v) { return WRITE_##E(READ_##CTE(v)); }               \
  static void load_##E##_##CT(void* dst, int64_t ds, const void* src, int64_t ss,           \
                              int64_t n) {                                                  \
    LOOP_BODY(CTT, T, to_##CT##_##E)                                                        \
  }                                                                                         \
  static void store_##CT##_##E(void* dst, int64_t ds, const void* src, int64_t ss,          \
                               int64_t n) {                                                 \
    LOOP_BODY(T, CTT, from_##CT##_##E)                                                      \
  }
#define DEFINE_PAIRS(E, n, T, C, K) COMPUTE_LIST(DEFINE_PAIR, E, T)
TPU_DTYPE_LIST(DEFINE_PAIRS)
#undef DEFINE_PAIRS
#undef DEFINE_PAIR

#define LOAD_ENTRY(E, T, CT, CTT, CTE) [TPU_DTYPE_##E][TPU_COMPUTE_##CT] = load_##E##_##CT,
#define STORE_ENTRY(E, T, CT, CTT, CTE) [TPU_COMPUTE_##CT][TPU_DTYPE_##E] = store_##CT##_##E,
#define X_(E, n, T, C, K) COMPUTE_LIST(LOAD_ENTRY, E, T)
static const cvt_fn g_load[TPU_DTYPE_COUNT][TPU_COMPUTE_COUNT] = {TPU_DTYPE_LIST(X_)};
#undef X_
#define X_(E, n, T, C, K) COMPUTE_LIST(STORE_ENTRY, E, T)
static const cvt_fn g_store[TPU_COMPUTE_COUNT][TPU_DTYPE_COUNT] = {TPU_DTYPE_LIST(X_)};
#undef X_
#undef LOAD_ENTRY
#undef STORE_ENTRY

/* Per dtype: element size, compute type, and whether it is that compute
 * type's storage dtype (bool, int64, float32, float64). */
typedef struct cvt_dtype {
  uint8_t size;
  uint8_t compute;
  bool is_storage;
} cvt_dtype_t;

#define IS_STORAGE_TERM(E, T, CT, CTT, CTE) TPU_DTYPE_##E == TPU_DTYPE_##CTE ||
#define X_(E, n, T, C, K) \
  [TPU_DTYPE_##E] = {sizeof(T), TPU_COMPUTE_##C, COMPUTE_LIST(IS_STORAGE_TERM, E, T) false},
static const cvt_dtype_t g_dtype[TPU_DTYPE_COUNT] = {TPU_DTYPE_LIST(X_)};
#undef X_
#undef IS_STORAGE_TERM

/* Same-dtype copy of n elements of `size` bytes: bits move unchanged. */
#define RAW_LOOP(T) \
  for (int64_t i = 0; i < n; ++i) ((T*)dst)[i * ds] = ((const T*)src)[i * ss];
static void raw_copy(void* dst, int64_t ds, const void* src, int64_t ss, int64_t n, size_t size) {
  if (ds == 1 && ss == 1) {
    memmove(dst, src, (size_t)n * size);
  } else if (size == 1) {
    RAW_LOOP(uint8_t)
  } else if (size == 2) {
    RAW_LOOP(uint16_t)
  } else if (size == 4) {
    RAW_LOOP(uint32_t)
  } else {
    RAW_LOOP(uint64_t)
  }
}
#undef RAW_LOOP

/* ---- x86 SIMD paths ------------------------------------------------------------------ */
/* Every SIMD path converts blocks of 8 contiguous elements through float32:
 * load8_S reads 8 elements of dtype S as 8 floats (exactly, or for float64
 * rounded once, as (float)x), store8_D writes 8 floats as dtype D (rounded
 * as the portable code rounds). Converting to float32 keeps NaNs NaN, so
 * the loop stops at the first block that holds one and leaves the rest to
 * the portable loops, whose NaN results it would not match. */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <cpuid.h>
#define CVT_X86 1

#define AVX __attribute__((target("avx")))
#define F16C __attribute__((target("avx,f16c")))
#define AVX2 __attribute__((target("avx2")))

static AVX inline bool has_nan_ps(__m256 x) {
  return _mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0;
}

static F16C inline __m256 load8_F16(const void* s, int64_t i) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)((const uint16_t*)s + i)));
}
static AVX2 inline __m256 load8_BF16(const void* s, int64_t i) { /* a shift into the high half */
  __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)((const uint16_t*)s + i)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
}
static AVX inline __m256 load8_F32(const void* s, int64_t i) {
  return _mm256_loadu_ps((const float*)s + i);
}
static AVX inline __m256 load8_F64(const void* s, int64_t i) {
  const double* d = (const double*)s + i;
  return _mm256_set_m128(_mm256_cvtpd_ps(_mm256_loadu_pd(d + 4)),
                         _mm256_cvtpd_ps(_mm256_loadu_pd(d)));
}

static F16C inline void store8_F16(void* d, int64_t i, __m256 f) {
  _mm_storeu_si128((__m128i*)((uint16_t*)d + i), _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT));
}
static AVX2 inline void store8_BF16(void* d, int64_t i, __m256 f) { /* as f2bf */
  __m256i x = _mm256_castps_si256(f);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  x = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
  _mm_storeu_si128((__m128i*)((uint16_t*)d + i), h);
}
static AVX inline void store8_F32(void* d, int64_t i, __m256 f) {
  _mm256_storeu_ps((float*)d + i, f);
}
static AVX inline void store8_F64(void* d, int64_t i, __m256 f) {
  _mm256_storeu_pd((double*)d + i, _mm256_cvtps_pd(_mm256_castps256_ps128(f)));
  _mm256_storeu_pd((double*)d + i + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)));
}

static void convert_loops(void* dst, tpu_dtype_t dst_dtype, int64_t dst_stride, const void* src,
                          tpu_dtype_t src_dtype, int64_t src_stride, int64_t n);

/* simd_S_D: dtype S -> dtype D, contiguous; the elements after the first
 * NaN block go to the portable loops. */
#define SIMD_PAIR(TARGET, S, D)                                                   \
  static TARGET void simd_##S##_##D(void* dst, const void* src, int64_t n) {      \
    int64_t i = 0;                                                                \
    for (; i + 8 <= n; i += 8) {                                                  \
      __m256 f = load8_##S(src, i);                                               \
      if (has_nan_ps(f)) break;                                                   \
      store8_##D(dst, i, f);                                                      \
    }                                                                             \
    convert_loops((char*)dst + i * g_dtype[TPU_DTYPE_##D].size, TPU_DTYPE_##D, 1, \
                  (const char*)src + i * g_dtype[TPU_DTYPE_##S].size, TPU_DTYPE_##S, 1, n - i); \
  }
#define F16C_AVX2 __attribute__((target("avx2,f16c")))
SIMD_PAIR(F16C, F16, F32)
SIMD_PAIR(F16C, F16, F64)
SIMD_PAIR(F16C, F32, F16)
SIMD_PAIR(F16C, F64, F16)
SIMD_PAIR(AVX2, BF16, F32)
SIMD_PAIR(AVX2, BF16, F64)
SIMD_PAIR(AVX2, F32, BF16)
SIMD_PAIR(AVX2, F64, BF16)
SIMD_PAIR(F16C_AVX2, F16, BF16)
SIMD_PAIR(F16C_AVX2, BF16, F16)
#undef SIMD_PAIR

/* The SIMD path of each (source, destination) pair that has one, with the
 * CPU features it needs. */
enum { NEED_F16C = 1, NEED_AVX2 = 2 };
typedef struct simd_path {
  int needs;
  void (*fn)(void* dst, const void* src, int64_t n);
} simd_path_t;

#define PATH(S, D, NEEDS) [TPU_DTYPE_##S][TPU_DTYPE_##D] = {NEEDS, simd_##S##_##D}
static const simd_path_t g_simd[TPU_DTYPE_COUNT][TPU_DTYPE_COUNT] = {
    PATH(F16, F32, NEED_F16C),  PATH(F16, F64, NEED_F16C),
    PATH(F32, F16, NEED_F16C),  PATH(F64, F16, NEED_F16C),
    PATH(BF16, F32, NEED_AVX2), PATH(BF16, F64, NEED_AVX2),
    PATH(F32, BF16, NEED_AVX2), PATH(F64, BF16, NEED_AVX2),
    PATH(F16, BF16, NEED_F16C | NEED_AVX2), PATH(BF16, F16, NEED_F16C | NEED_AVX2),
};
#undef PATH

/* The NEED_* features this CPU has (probed once). */
static int cpu_features(void) {
  static atomic_int features = -1;
  int f = atomic_load_explicit(&features, memory_order_relaxed);
  if (f < 0) {
    /* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports
     * does not know "f16c". */
    unsigned eax, ebx, ecx = 0, edx;
    bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
    f = (__builtin_cpu_supports("avx") && f16c ? NEED_F16C : 0) |
        (__builtin_cpu_supports("avx2") ? NEED_AVX2 : 0);
    atomic_store_explicit(&features, f, memory_order_relaxed);
  }
  return f;
}
#endif

/* ---- tpu_convert -------------------------------------------------------------------- */

/* A conversion between two different dtypes with the typed loops. */
static void convert_loops(void* dst, tpu_dtype_t dst_dtype, int64_t dst_stride, const void* src,
                          tpu_dtype_t src_dtype, int64_t src_stride, int64_t n) {
  const cvt_dtype_t *sd = &g_dtype[src_dtype], *dd = &g_dtype[dst_dtype];
  if (sd->is_storage) {
    g_store[sd->compute][dst_dtype](dst, dst_stride, src, src_stride, n);
  } else if (dd->is_storage) {
    g_load[src_dtype][dd->compute](dst, dst_stride, src, src_stride, n);
  } else { /* through the source's compute type, which holds its values exactly */
    enum { CHUNK = 256 };
    uint64_t buf[CHUNK];
    const char* s = (const char*)src;
    char* d = (char*)dst;
    for (int64_t i = 0; i < n; i += CHUNK) {
      int64_t m = n - i < CHUNK ? n - i : CHUNK;
      g_load[src_dtype][sd->compute](buf, 1, s + i * src_stride * sd->size, src_stride, m);
      g_store[sd->compute][dst_dtype](d + i * dst_stride * dd->size, dst_stride, buf, 1, m);
    }
  }
}

/* Complex dtypes (storage only, outside the typed tables): each part is
 * converted as a real dtype with doubled strides. complex -> complex converts
 * both parts, real -> complex writes the real part and a zero imaginary part,
 * complex -> real keeps the real part, complex -> bool is true when either
 * part is nonzero (PyTorch's casts). */
static void convert_complex(void* dst, tpu_dtype_t dst_dtype, int64_t dst_stride,
                            const void* src, tpu_dtype_t src_dtype, int64_t src_stride,
                            int64_t n) {
  bool dc = tpu_dtype_is_complex(dst_dtype), sc = tpu_dtype_is_complex(src_dtype);
  tpu_dtype_t dp = tpu_dtype_part(dst_dtype), sp = tpu_dtype_part(src_dtype);
  int64_t dps = (int64_t)tpu_dtype_size(dp), sps = (int64_t)tpu_dtype_size(sp);
  if (dst_dtype == src_dtype && dst_stride == 1 && src_stride == 1) {
    memmove(dst, src, (size_t)n * tpu_dtype_size(dst_dtype));
    return;
  }
  if (sc && dst_dtype == TPU_DTYPE_BOOL) { /* nonzero in either part (NaN too) */
    for (int64_t i = 0; i < n; ++i) {
      double p[2];
      tpu_convert(p, TPU_DTYPE_F64, 1, (const char*)src + i * src_stride * 2 * sps, sp, 1, 2);
      ((uint8_t*)dst)[i * dst_stride] = p[0] != 0 || p[1] != 0;
    }
    return;
  }
  int64_t ds = dc ? 2 * dst_stride : dst_stride, ss = sc ? 2 * src_stride : src_stride;
  tpu_convert(dst, dp, ds, src, sp, ss, n);
  if (!dc) return;
  char* dst_im = (char*)dst + dps;
  if (sc) {
    tpu_convert(dst_im, dp, ds, (const char*)src + sps, sp, ss, n);
  } else {
    static const double zero = 0.0;
    tpu_convert(dst_im, dp, ds, &zero, TPU_DTYPE_F64, 0, n);
  }
}

/* Wide unsigned dtypes (storage only, outside the typed tables) go through
 * int64 in blocks: a uint16/uint32 value is exact there, a uint64 one bit for
 * bit. Into one, the int64 conversion's low bits are kept (PyTorch's casts of
 * in-range values; -1 becomes the largest value, as through int64 there).
 * uint64 <-> floating converts as unsigned, which int64 cannot. */
static int64_t load_unsigned(const void* src, tpu_dtype_t dtype, int64_t i) {
  switch (dtype) {
    case TPU_DTYPE_U16: return ((const uint16_t*)src)[i];
    case TPU_DTYPE_U32: return ((const uint32_t*)src)[i];
    default: return (int64_t)((const uint64_t*)src)[i];
  }
}

static void store_unsigned(void* dst, tpu_dtype_t dtype, int64_t i, int64_t v) {
  switch (dtype) {
    case TPU_DTYPE_U16: ((uint16_t*)dst)[i] = (uint16_t)(uint64_t)v; break;
    case TPU_DTYPE_U32: ((uint32_t*)dst)[i] = (uint32_t)(uint64_t)v; break;
    default: ((uint64_t*)dst)[i] = (uint64_t)v; break;
  }
}

#define UNSIGNED_BLOCK 256

static void convert_unsigned(void* dst, tpu_dtype_t dst_dtype, int64_t dst_stride,
                             const void* src, tpu_dtype_t src_dtype, int64_t src_stride,
                             int64_t n) {
  bool du = tpu_dtype_is_wide_unsigned(dst_dtype), su = tpu_dtype_is_wide_unsigned(src_dtype);
  size_t dsz = tpu_dtype_size(dst_dtype), ssz = tpu_dtype_size(src_dtype);
  if (dst_dtype == src_dtype) {
    raw_copy(dst, dst_stride, src, src_stride, n, ssz);
    return;
  }
  if (su && tpu_dtype_is_floating(dst_dtype) && src_dtype == TPU_DTYPE_U64) {
    double d[UNSIGNED_BLOCK]; /* exact below 2^53; one rounding to float32 else */
    float f[UNSIGNED_BLOCK];
    for (int64_t b = 0; b < n; b += UNSIGNED_BLOCK) {
      int64_t m = n - b < UNSIGNED_BLOCK ? n - b : UNSIGNED_BLOCK;
      const uint64_t* s = (const uint64_t*)src;
      char* out = (char*)dst + b * dst_stride * (int64_t)dsz;
      if (dst_dtype == TPU_DTYPE_F64) {
        for (int64_t i = 0; i < m; ++i) d[i] = (double)s[(b + i) * src_stride];
        tpu_convert(out, dst_dtype, dst_stride, d, TPU_DTYPE_F64, 1, m);
      } else {
        for (int64_t i = 0; i < m; ++i) f[i] = (float)s[(b + i) * src_stride];
        tpu_convert(out, dst_dtype, dst_stride, f, TPU_DTYPE_F32, 1, m);
      }
    }
    return;
  }
  int64_t v[UNSIGNED_BLOCK];
  double fv[UNSIGNED_BLOCK];
  for (int64_t b = 0; b < n; b += UNSIGNED_BLOCK) {
    int64_t m = n - b < UNSIGNED_BLOCK ? n - b : UNSIGNED_BLOCK;
    const char* in = (const char*)src + b * src_stride * (int64_t)ssz;
    char* out = (char*)dst + b * dst_stride * (int64_t)dsz;
    if (su) {
      for (int64_t i = 0; i < m; ++i) v[i] = load_unsigned(in, src_dtype, i * src_stride);
    } else if (dst_dtype == TPU_DTYPE_U64 && tpu_dtype_is_floating(src_dtype)) {
      tpu_convert(v, TPU_DTYPE_I64, 1, in, src_dtype, src_stride, m);
      tpu_convert(fv, TPU_DTYPE_F64, 1, in, src_dtype, src_stride, m);
      for (int64_t i = 0; i < m; ++i) /* [2^63, 2^64): exact, beyond int64 */
        if (fv[i] >= 9.2233720368547758e18 && fv[i] < 1.8446744073709552e19)
          v[i] = (int64_t)(uint64_t)fv[i];
    } else {
      tpu_convert(v, TPU_DTYPE_I64, 1, in, src_dtype, src_stride, m);
    }
    if (du) {
      for (int64_t i = 0; i < m; ++i) store_unsigned(out, dst_dtype, i * dst_stride, v[i]);
    } else {
      tpu_convert(out, dst_dtype, dst_stride, v, TPU_DTYPE_I64, 1, m);
    }
  }
}

void tpu_convert(void* dst, tpu_dtype_t dst_dtype, int64_t dst_stride, const void* src,
                 tpu_dtype_t src_dtype, int64_t src_stride, int64_t n) {
  if ((unsigned)dst_dtype >= TPU_DTYPE_COUNT || (unsigned)src_dtype >= TPU_DTYPE_COUNT || n <= 0)
    return;
  if (tpu_dtype_is_complex(dst_dtype) || tpu_dtype_is_complex(src_dtype)) {
    convert_complex(dst, dst_dtype, dst_stride, src, src_dtype, src_stride, n);
    return;
  }
  if (tpu_dtype_is_wide_unsigned(dst_dtype) || tpu_dtype_is_wide_unsigned(src_dtype)) {
    convert_unsigned(dst, dst_dtype, dst_stride, src, src_dtype, src_stride, n);
    return;
  }
  if (dst_dtype == src_dtype) {
    raw_copy(dst, dst_stride, src, src_stride, n, g_dtype[src_dtype].size);
    return;
  }
#ifdef CVT_X86
  const simd_path_t* simd = &g_simd[src_dtype][dst_dtype];
  if (simd->fn && dst_stride == 1 && src_stride == 1 && n >= 8 &&
      (cpu_features() & simd->needs) == simd->needs) {
    simd->fn(dst, src, n);
    return;
  }
#endif
  convert_loops(dst, dst_dtype, dst_stride, src, src_dtype, src_stride, n);
}
