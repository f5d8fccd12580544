/* matmul_gemv.c — half-type matrix-vector products (see matmul.h).
 *
 * A GEMM with one row of C (m == 1: a decode step's token times a weight)
 * or one column (n == 1: mv) reads its matrix exactly once, so its speed is
 * the memory's: a GEMM library first packs the whole matrix into its
 * blocked form (measured: oneDNN's 1x768 @ 768x50257 bfloat16 LM head at
 * 8.3 GB/s where this loop streams at the memory's 13 GB/s on the same
 * 2 cores), and the float32 path first widens it to a float32 copy. Here
 * the matrix is read in place, widened in registers and multiplied in
 * float32 (products of half types are exact in float32), accumulating in
 * float32 and rounding once at the store, as every half-type kernel does.
 *
 * Normalised form, per batch b:   y[j] = alpha * sum_i x[i] * M[i, j]
 *                                        + beta * bias[j]      (j < n)
 * m == 1:  x = A[b, 0, :], M = B[b], y = C[b, 0, :];
 * n == 1:  x = B[b, :, 0], M = A[b]^T, y = C[b, :, 0].
 * M needs one dense dimension: dense along i (a linear layer's weight,
 * K^T in attention), each y[j] is a dot product ("dot" form); dense along j
 * (a row-major weight, V in attention), rows of M are added into float32
 * accumulators ("axpy" form). Any other M is not taken.
 *
 * The units are blocks of GEMV_BLOCK outputs of one batch, split over the
 * compute pool; each output is computed by one thread in a fixed order, so
 * results do not depend on the thread count. Kernels: AVX-512 (AVX512F +
 * AVX512BW), AVX2 + F16C, and a portable loop, chosen at run time.
 *
 * The same dot products over an int8 matrix (tpu_mm_dot_i8) serve
 * aten._weight_int8pack_mm (matmul_int8.c): int8 widens exactly to float32.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul/matmul.h"
#include "kernels/common/view_walk.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GEMV_X86 1
#endif

#define GEMV_BLOCK 512 /* outputs per unit: 2 KiB of float32 accumulators */
#define GEMV_ROWS 4    /* rows of M (axpy) or columns (dot) per step */

/* dot:  acc[c] = sum_i x[i] * col_c[i] for `cols` (<= GEMV_ROWS) columns of
 *       M, column c at m + c * sj (elements), dense along i.
 * axpy: acc[j] += sum_i x[i] * M[i, j] for j < nb, row i at m + i * si. */
typedef void (*gemv_dot_fn)(bool bf16, const float* x, int64_t k, const uint16_t* m,
                            int64_t sj, int cols, float* acc);
typedef void (*gemv_axpy_fn)(bool bf16, const float* x, int64_t k, const uint16_t* m,
                             int64_t si, int64_t nb, float* acc);

static int gemv_level(void); /* the kernels' level, below */

static float half_to_f32(bool bf16, uint16_t h) {
  return bf16 ? tpu_bf16_to_f32(h) : tpu_f16_to_f32(h);
}

/* ---- portable kernels (and the reference the vector ones must match) --------- */

static void dot_plain(bool bf16, const float* x, int64_t k, const uint16_t* m, int64_t sj,
                      int cols, float* acc) {
  for (int c = 0; c < cols; ++c) {
    const uint16_t* col = m + c * sj;
    float s = 0.0f;
    for (int64_t i = 0; i < k; ++i) s += x[i] * half_to_f32(bf16, col[i]);
    acc[c] = s;
  }
}

static void axpy_plain(bool bf16, const float* x, int64_t k, const uint16_t* m, int64_t si,
                       int64_t nb, float* acc) {
  for (int64_t i = 0; i < k; ++i) {
    const uint16_t* row = m + i * si;
    for (int64_t j = 0; j < nb; ++j) acc[j] += x[i] * half_to_f32(bf16, row[j]);
  }
}

#ifdef GEMV_X86
/* ---- AVX-512 ------------------------------------------------------------------ */

#define GEMV_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

/* Lanes [0, left) of 16, for the last vector of a row. */
static inline __mmask16 tail16(int64_t left) {
  return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

GEMV_AVX512 static inline __m512 widen16(bool bf16, __m256i h) {
  return bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
              : _mm512_cvtph_ps(h);
}

/* Four columns at a time, their sums in registers; then one at a time. */
GEMV_AVX512 static void dot_avx512(bool bf16, const float* x, int64_t k, const uint16_t* m,
                                   int64_t sj, int cols, float* acc) {
  int c = 0;
  if (cols == 4) {
    const uint16_t *m0 = m, *m1 = m + sj, *m2 = m + 2 * sj, *m3 = m + 3 * sj;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t i = 0; i < k; i += 16) {
      __mmask16 mask = tail16(k - i);
      __m512 xv = _mm512_maskz_loadu_ps(mask, x + i);
      _mm_prefetch((const char*)(m0 + 4 * sj + i), _MM_HINT_T0);
      _mm_prefetch((const char*)(m1 + 4 * sj + i), _MM_HINT_T0);
      _mm_prefetch((const char*)(m2 + 4 * sj + i), _MM_HINT_T0);
      _mm_prefetch((const char*)(m3 + 4 * sj + i), _MM_HINT_T0);
      s0 = _mm512_fmadd_ps(xv, widen16(bf16, _mm256_maskz_loadu_epi16(mask, m0 + i)), s0);
      s1 = _mm512_fmadd_ps(xv, widen16(bf16, _mm256_maskz_loadu_epi16(mask, m1 + i)), s1);
      s2 = _mm512_fmadd_ps(xv, widen16(bf16, _mm256_maskz_loadu_epi16(mask, m2 + i)), s2);
      s3 = _mm512_fmadd_ps(xv, widen16(bf16, _mm256_maskz_loadu_epi16(mask, m3 + i)), s3);
    }
    acc[0] = _mm512_reduce_add_ps(s0), acc[1] = _mm512_reduce_add_ps(s1);
    acc[2] = _mm512_reduce_add_ps(s2), acc[3] = _mm512_reduce_add_ps(s3);
    c = 4;
  }
  for (; c < cols; ++c) {
    const uint16_t* col = m + c * sj;
    __m512 s0 = _mm512_setzero_ps();
    for (int64_t i = 0; i < k; i += 16) {
      __mmask16 mask = tail16(k - i);
      __m512 xv = _mm512_maskz_loadu_ps(mask, x + i);
      s0 = _mm512_fmadd_ps(xv, widen16(bf16, _mm256_maskz_loadu_epi16(mask, col + i)), s0);
    }
    acc[c] = _mm512_reduce_add_ps(s0);
  }
}

GEMV_AVX512 static void axpy_avx512(bool bf16, const float* x, int64_t k, const uint16_t* m,
                                    int64_t si, int64_t nb, float* acc) {
  int64_t i = 0;
  for (; i + GEMV_ROWS <= k; i += GEMV_ROWS) {
    const uint16_t* r = m + i * si;
    __m512 x0 = _mm512_set1_ps(x[i]), x1 = _mm512_set1_ps(x[i + 1]);
    __m512 x2 = _mm512_set1_ps(x[i + 2]), x3 = _mm512_set1_ps(x[i + 3]);
    for (int64_t j = 0; j < nb; j += 16) {
      __mmask16 mask = tail16(nb - j);
      __m512 a = _mm512_maskz_loadu_ps(mask, acc + j);
      _mm_prefetch((const char*)(r + 4 * si + j), _MM_HINT_T0);
      _mm_prefetch((const char*)(r + 5 * si + j), _MM_HINT_T0);
      _mm_prefetch((const char*)(r + 6 * si + j), _MM_HINT_T0);
      _mm_prefetch((const char*)(r + 7 * si + j), _MM_HINT_T0);
      a = _mm512_fmadd_ps(x0, widen16(bf16, _mm256_maskz_loadu_epi16(mask, r + j)), a);
      a = _mm512_fmadd_ps(x1, widen16(bf16, _mm256_maskz_loadu_epi16(mask, r + si + j)), a);
      a = _mm512_fmadd_ps(x2, widen16(bf16, _mm256_maskz_loadu_epi16(mask, r + 2 * si + j)), a);
      a = _mm512_fmadd_ps(x3, widen16(bf16, _mm256_maskz_loadu_epi16(mask, r + 3 * si + j)), a);
      _mm512_mask_storeu_ps(acc + j, mask, a);
    }
  }
  for (; i < k; ++i) {
    const uint16_t* r = m + i * si;
    __m512 xv = _mm512_set1_ps(x[i]);
    for (int64_t j = 0; j < nb; j += 16) {
      __mmask16 mask = tail16(nb - j);
      __m512 a = _mm512_maskz_loadu_ps(mask, acc + j);
      a = _mm512_fmadd_ps(xv, widen16(bf16, _mm256_maskz_loadu_epi16(mask, r + j)), a);
      _mm512_mask_storeu_ps(acc + j, mask, a);
    }
  }
}

/* ---- AVX2 + F16C ---------------------------------------------------------------- */

#define GEMV_AVX2 __attribute__((target("avx2,fma,f16c")))

GEMV_AVX2 static inline __m256 widen8(bool bf16, const uint16_t* p) {
  __m128i h = _mm_loadu_si128((const __m128i*)p);
  return bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
              : _mm256_cvtph_ps(h);
}

GEMV_AVX2 static float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

GEMV_AVX2 static float dot1_avx2(bool bf16, const float* x, int64_t k, const uint16_t* col,
                                 __m256 s0) {
  int64_t i = k / 8 * 8;
  float t = hsum8(s0);
  for (; i < k; ++i) t += x[i] * half_to_f32(bf16, col[i]);
  return t;
}

/* Four columns at a time, their sums in registers; then one at a time. */
GEMV_AVX2 static void dot_avx2(bool bf16, const float* x, int64_t k, const uint16_t* m,
                               int64_t sj, int cols, float* acc) {
  int64_t full = k / 8 * 8;
  int c = 0;
  if (cols == 4) {
    const uint16_t *m0 = m, *m1 = m + sj, *m2 = m + 2 * sj, *m3 = m + 3 * sj;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t i = 0; i < full; i += 8) {
      __m256 xv = _mm256_loadu_ps(x + i);
      s0 = _mm256_fmadd_ps(xv, widen8(bf16, m0 + i), s0);
      s1 = _mm256_fmadd_ps(xv, widen8(bf16, m1 + i), s1);
      s2 = _mm256_fmadd_ps(xv, widen8(bf16, m2 + i), s2);
      s3 = _mm256_fmadd_ps(xv, widen8(bf16, m3 + i), s3);
    }
    acc[0] = dot1_avx2(bf16, x, k, m0, s0), acc[1] = dot1_avx2(bf16, x, k, m1, s1);
    acc[2] = dot1_avx2(bf16, x, k, m2, s2), acc[3] = dot1_avx2(bf16, x, k, m3, s3);
    c = 4;
  }
  for (; c < cols; ++c) {
    const uint16_t* col = m + c * sj;
    __m256 s0 = _mm256_setzero_ps();
    for (int64_t i = 0; i < full; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), widen8(bf16, col + i), s0);
    acc[c] = dot1_avx2(bf16, x, k, col, s0);
  }
}

GEMV_AVX2 static void axpy_avx2(bool bf16, const float* x, int64_t k, const uint16_t* m,
                                int64_t si, int64_t nb, float* acc) {
  int64_t i = 0, full = nb / 8 * 8;
  for (; i + GEMV_ROWS <= k; i += GEMV_ROWS) {
    const uint16_t* r = m + i * si;
    __m256 x0 = _mm256_set1_ps(x[i]), x1 = _mm256_set1_ps(x[i + 1]);
    __m256 x2 = _mm256_set1_ps(x[i + 2]), x3 = _mm256_set1_ps(x[i + 3]);
    for (int64_t j = 0; j < full; j += 8) {
      __m256 a = _mm256_loadu_ps(acc + j);
      a = _mm256_fmadd_ps(x0, widen8(bf16, r + j), a);
      a = _mm256_fmadd_ps(x1, widen8(bf16, r + si + j), a);
      a = _mm256_fmadd_ps(x2, widen8(bf16, r + 2 * si + j), a);
      a = _mm256_fmadd_ps(x3, widen8(bf16, r + 3 * si + j), a);
      _mm256_storeu_ps(acc + j, a);
    }
  }
  for (; i < k; ++i) {
    const uint16_t* r = m + i * si;
    __m256 xv = _mm256_set1_ps(x[i]);
    for (int64_t j = 0; j < full; j += 8)
      _mm256_storeu_ps(acc + j, _mm256_fmadd_ps(xv, widen8(bf16, r + j), _mm256_loadu_ps(acc + j)));
  }
  if (full < nb) axpy_plain(bf16, x, k, m + full, si, nb - full, acc + full);
}
/* ---- int8 matrices (aten._weight_int8pack_mm) --------------------------------- */

GEMV_AVX512 static inline __m512 widen16_i8(__mmask16 mask, const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, p)));
}

GEMV_AVX512 static void dot_i8_avx512(const float* x, int64_t k, const int8_t* m, int64_t sj,
                                      int cols, float* acc) {
  int c = 0;
  if (cols == 4) {
    const int8_t *m0 = m, *m1 = m + sj, *m2 = m + 2 * sj, *m3 = m + 3 * sj;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t i = 0; i < k; i += 16) {
      __mmask16 mask = tail16(k - i);
      __m512 xv = _mm512_maskz_loadu_ps(mask, x + i);
      s0 = _mm512_fmadd_ps(xv, widen16_i8(mask, m0 + i), s0);
      s1 = _mm512_fmadd_ps(xv, widen16_i8(mask, m1 + i), s1);
      s2 = _mm512_fmadd_ps(xv, widen16_i8(mask, m2 + i), s2);
      s3 = _mm512_fmadd_ps(xv, widen16_i8(mask, m3 + i), s3);
    }
    acc[0] = _mm512_reduce_add_ps(s0), acc[1] = _mm512_reduce_add_ps(s1);
    acc[2] = _mm512_reduce_add_ps(s2), acc[3] = _mm512_reduce_add_ps(s3);
    c = 4;
  }
  for (; c < cols; ++c) {
    __m512 s0 = _mm512_setzero_ps();
    for (int64_t i = 0; i < k; i += 16) {
      __mmask16 mask = tail16(k - i);
      s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, x + i), widen16_i8(mask, m + c * sj + i),
                           s0);
    }
    acc[c] = _mm512_reduce_add_ps(s0);
  }
}

/* Eight columns at once (the decode path's inner loop): each x vector is
 * loaded once for eight weight rows, eight independent sums hide the FMA
 * latency, and each column's stream is prefetched I8_PREFETCH bytes ahead
 * (measured on one Zen 4 core streaming a [25128, 768] int8 weight from
 * memory: 3.3 ms with the four-column kernel, 3.0 ms here). Each column's
 * sum is computed exactly as dot_i8_avx512 computes it (the same lanes, the
 * same order, the k tail masked), so the results are the same bits. */
#define I8_PREFETCH 512
GEMV_AVX512 static void dot8_i8_avx512(const float* x, int64_t k, const int8_t* m, int64_t sj,
                                       float* acc) {
  __m512 s[8];
  for (int c = 0; c < 8; ++c) s[c] = _mm512_setzero_ps();
  int64_t full = k / 16 * 16, i = 0;
  for (; i < full; i += 16) {
    __m512 xv = _mm512_loadu_ps(x + i);
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const int8_t* p = m + c * sj + i;
      _mm_prefetch((const char*)p + I8_PREFETCH, _MM_HINT_T0);
      __m512 w = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)p)));
      s[c] = _mm512_fmadd_ps(xv, w, s[c]);
    }
  }
  if (i < k) {
    __mmask16 mask = tail16(k - i);
    __m512 xv = _mm512_maskz_loadu_ps(mask, x + i);
    for (int c = 0; c < 8; ++c) s[c] = _mm512_fmadd_ps(xv, widen16_i8(mask, m + c * sj + i), s[c]);
  }
  for (int c = 0; c < 8; ++c) acc[c] = _mm512_reduce_add_ps(s[c]);
}

GEMV_AVX2 static inline __m256 widen8_i8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)p)));
}

GEMV_AVX2 static float dot1_i8_avx2(const float* x, int64_t k, const int8_t* col, __m256 s0) {
  float t = hsum8(s0);
  for (int64_t i = k / 8 * 8; i < k; ++i) t += x[i] * (float)col[i];
  return t;
}

GEMV_AVX2 static void dot_i8_avx2(const float* x, int64_t k, const int8_t* m, int64_t sj,
                                  int cols, float* acc) {
  int64_t full = k / 8 * 8;
  int c = 0;
  if (cols == 4) {
    const int8_t *m0 = m, *m1 = m + sj, *m2 = m + 2 * sj, *m3 = m + 3 * sj;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t i = 0; i < full; i += 8) {
      __m256 xv = _mm256_loadu_ps(x + i);
      s0 = _mm256_fmadd_ps(xv, widen8_i8(m0 + i), s0);
      s1 = _mm256_fmadd_ps(xv, widen8_i8(m1 + i), s1);
      s2 = _mm256_fmadd_ps(xv, widen8_i8(m2 + i), s2);
      s3 = _mm256_fmadd_ps(xv, widen8_i8(m3 + i), s3);
    }
    acc[0] = dot1_i8_avx2(x, k, m0, s0), acc[1] = dot1_i8_avx2(x, k, m1, s1);
    acc[2] = dot1_i8_avx2(x, k, m2, s2), acc[3] = dot1_i8_avx2(x, k, m3, s3);
    c = 4;
  }
  for (; c < cols; ++c) {
    const int8_t* col = m + c * sj;
    __m256 s0 = _mm256_setzero_ps();
    for (int64_t i = 0; i < full; i += 8)
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), widen8_i8(col + i), s0);
    acc[c] = dot1_i8_avx2(x, k, col, s0);
  }
}
#endif /* GEMV_X86 */

static void dot_i8_plain(const float* x, int64_t k, const int8_t* m, int64_t sj, int cols,
                         float* acc) {
  for (int c = 0; c < cols; ++c) {
    float s = 0.0f;
    for (int64_t i = 0; i < k; ++i) s += x[i] * (float)m[c * sj + i];
    acc[c] = s;
  }
}

void tpu_mm_dot_i8(const float* x, int64_t k, const int8_t* m, int64_t sj, int64_t cols,
                   float* acc) {
  void (*fn)(const float*, int64_t, const int8_t*, int64_t, int, float*) = dot_i8_plain;
#ifdef GEMV_X86
  int level = gemv_level();
  if (level == 2) {
    int64_t eights = cols / 8 * 8;
    for (int64_t c = 0; c < eights; c += 8) dot8_i8_avx512(x, k, m + c * sj, sj, acc + c);
    m += eights * sj, acc += eights, cols -= eights;
    fn = dot_i8_avx512;
  }
  if (level == 1) fn = dot_i8_avx2;
#endif
  for (int64_t c = 0; c < cols; c += GEMV_ROWS)
    fn(x, k, m + c * sj, sj, cols - c < GEMV_ROWS ? (int)(cols - c) : GEMV_ROWS, acc + c);
}

/* ---- dispatch --------------------------------------------------------------------- */

/* The best kernel level this CPU runs: 2 AVX-512, 1 AVX2, 0 portable. */
static int cpu_level(void) {
#ifdef GEMV_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    return 2;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return 1; /* F16C comes with every AVX2 CPU */
#endif
  return 0;
}

static atomic_int g_level_cap = -1; /* tpu_mm_gemv_set_level; -1: none */

int tpu_mm_gemv_set_level(int level) {
  int best = cpu_level();
  int got = level < 0 || level > best ? best : level;
  atomic_store(&g_level_cap, level < 0 ? -1 : got);
  return got;
}

/* The level the kernels run at: the CPU's best, or the tests' cap. */
static int gemv_level(void) {
  static atomic_int best = -1;
  int level = atomic_load(&g_level_cap);
  if (level < 0) {
    level = atomic_load_explicit(&best, memory_order_relaxed);
    if (level < 0) atomic_store_explicit(&best, level = cpu_level(), memory_order_relaxed);
  }
  return level;
}

static void gemv_pick(gemv_dot_fn* out_dot, gemv_axpy_fn* out_axpy) {
  int level = gemv_level();
  *out_dot = dot_plain, *out_axpy = axpy_plain;
#ifdef GEMV_X86
  if (level == 2) *out_dot = dot_avx512, *out_axpy = axpy_avx512;
  if (level == 1) *out_dot = dot_avx2, *out_axpy = axpy_avx2;
#endif
}

/* ---- the problem --------------------------------------------------------------- */

typedef struct gemv_job {
  bool bf16, dot;
  int64_t k, n, blocks;        /* blocks of GEMV_BLOCK outputs per batch */
  const float* x;              /* [batch, k], widened */
  const uint16_t* m;           /* M's element (0, 0) of batch 0 */
  int64_t m_batch, si, sj;     /* M's strides (elements) */
  tpu_view_t y, bias;          /* [batch, n] as 2-D views */
  bool has_bias;
  float alpha, beta;
  gemv_dot_fn dot_fn;
  gemv_axpy_fn axpy_fn;
} gemv_job_t;

static void gemv_units(void* arg, int64_t begin, int64_t end) {
  const gemv_job_t* g = (const gemv_job_t*)arg;
  float acc[GEMV_BLOCK], bias[GEMV_BLOCK];
  for (int64_t u = begin; u < end; ++u) {
    int64_t b = u / g->blocks, j0 = u % g->blocks * GEMV_BLOCK;
    int64_t nb = g->n - j0 < GEMV_BLOCK ? g->n - j0 : GEMV_BLOCK;
    const float* x = g->x + b * g->k;
    const uint16_t* m = g->m + b * g->m_batch + j0 * g->sj;
    if (g->dot) {
      for (int64_t j = 0; j < nb; j += GEMV_ROWS) {
        int cols = nb - j < GEMV_ROWS ? (int)(nb - j) : GEMV_ROWS;
        g->dot_fn(g->bf16, x, g->k, m + j * g->sj, g->sj, cols, acc + j);
      }
    } else {
      memset(acc, 0, (size_t)nb * sizeof(float));
      g->axpy_fn(g->bf16, x, g->k, m, g->si, nb, acc);
    }
    if (g->has_bias)
      tpu_convert(bias, TPU_DTYPE_F32, 1,
                  view_at(&g->bias, b * g->bias.strides[0] + j0 * g->bias.strides[1]),
                  g->bias.dtype, g->bias.strides[1], nb);
    for (int64_t j = 0; j < nb; ++j)
      acc[j] = g->alpha * acc[j] + (g->has_bias ? g->beta * bias[j] : 0.0f);
    tpu_convert(view_at(&g->y, b * g->y.strides[0] + j0 * g->y.strides[1]), g->y.dtype,
                g->y.strides[1], acc, TPU_DTYPE_F32, 1, nb);
  }
}

/* Element (bi, i, j) of a 3-D view as a 2-D [batch, len] view along dim
 * `dim` (1 or 2), the other fixed at 0. */
static tpu_view_t line_of(const tpu_view_t* v, int dim) {
  tpu_view_t r = *v;
  r.ndim = 2;
  r.sizes[0] = v->sizes[0], r.sizes[1] = v->sizes[dim];
  r.strides[0] = v->strides[0], r.strides[1] = v->strides[dim];
  return r;
}

tpu_status_t tpu_mm_half_gemv(const mm_problem_t* p, bool* out_done) {
  *out_done = false;
  if ((p->dtype != TPU_DTYPE_BF16 && p->dtype != TPU_DTYPE_F16) || p->k == 0 ||
      !(p->m == 1 || p->n == 1) || p->c.dtype != p->dtype)
    return TPU_OK;
  bool row = p->m == 1; /* else one column */
  /* x and M as [batch, k] and [batch, k, n] in elements */
  tpu_view_t xv = row ? line_of(&p->a, 2) : line_of(&p->b, 1);
  const tpu_view_t* mv = row ? &p->b : &p->a;
  int64_t si = row ? mv->strides[1] : mv->strides[2], sj = row ? mv->strides[2] : mv->strides[1];
  int64_t n = row ? p->n : p->m;
  /* dot where M is dense along i, else axpy where it is dense along j; a
   * length-1 dimension's stride is never read */
  bool dot = p->k > 1 ? si == 1 : !(n == 1 || sj == 1);
  if (!dot && !(n == 1 || sj == 1)) return TPU_OK;
  if (!tpu_mm_c_writable(p)) return TPU_OK;

  int64_t batch = p->batch;
  float* x = malloc((size_t)(batch * p->k) * sizeof(float));
  if (!x)
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matmul: no %lld bytes for a gemv's vector",
                           (long long)(batch * p->k * (int64_t)sizeof(float)));
  for (int64_t b = 0; b < batch; ++b)
    tpu_convert(x + b * p->k, TPU_DTYPE_F32, 1, view_at(&xv, b * xv.strides[0]), xv.dtype,
                xv.strides[1], p->k);
  gemv_job_t g = {
      .bf16 = p->dtype == TPU_DTYPE_BF16, .dot = dot, .k = p->k, .n = n,
      .blocks = (n + GEMV_BLOCK - 1) / GEMV_BLOCK, .x = x,
      .m = (const uint16_t*)(const void*)view_at(mv, 0), .m_batch = mv->strides[0],
      .si = si, .sj = sj, .y = line_of(&p->c, row ? 2 : 1), .has_bias = p->has_bias,
      .alpha = (float)p->alpha, .beta = (float)p->beta};
  if (p->has_bias) g.bias = line_of(&p->bias, row ? 2 : 1);
  gemv_pick(&g.dot_fn, &g.axpy_fn);
  /* a unit of one block reads GEMV_BLOCK * k elements of M: worth a thread */
  tpu_parallel_for(batch * g.blocks, 1, gemv_units, &g);
  free(x);
  *out_done = true;
  return TPU_OK;
}
