/* softmax_rows512.c — the forward (log_)softmax of contiguous last-dim rows
 * written for AVX-512 (chosen at run time; softmax.c keeps the portable
 * loops for other CPUs and for the backward ops).
 *
 * Rows of float32, bfloat16 or float16 are read and written in their own
 * dtype: half types widen to float32 in registers (exact) and round once
 * into the output, as PyTorch CPU computes them in float32 — no row copies,
 * no double. Per row, with m = max(x) (NaNs skipped; a NaN still reaches
 * every output through the sum):
 *   softmax      e = exp(x - m), s = sum e;  y = e * (1 / s)
 *   log_softmax  s = sum exp(x - m);         y = x - (m + log s)
 * exp is the Cephes-style float exp of vmath.h (x = n ln2 + r, degree-6
 * polynomial, here with fused multiply-adds) with 2^n applied by vscalefps,
 * which rounds results in the subnormal range once, correctly: exp keeps
 * its value down to exp(-103.9) (~1.4e-45) as PyTorch CPU does, instead of
 * flushing below exp(-87). Arguments below -150 (and -inf) give 0; NaN
 * stays NaN. The sum is kept in float lanes for up to 256 elements at a
 * time and in double across them.
 *
 * The softmax exps are kept for the last pass: in the output itself when it
 * is float32, else in a stack buffer for rows up to BUF elements; longer
 * half-type rows compute exp again in the last pass.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/nn/softmax.h"

#define BUF 4096 /* longest half-output softmax row whose exps are kept */

static atomic_int g_enabled = 1;

void tpu_softmax_rows512_set_enabled(bool on) { atomic_store(&g_enabled, on ? 1 : 0); }

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "kernels/common/vmath512.h"

#define SR_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma"), always_inline))
#define SR_AVX512_FN __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

bool tpu_softmax_rows512_ok(void) {
  static atomic_int have = -1;
  int v = atomic_load(&have);
  if (v < 0) {
    __builtin_cpu_init();
    v = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma")
            ? 1
            : 0;
    atomic_store(&have, v);
  }
  return v && atomic_load(&g_enabled);
}

/* 16 elements (the lanes in `k`; others 0) of a row of dtype d, widened. */
SR_AVX512 static inline __m512 load16(tpu_dtype_t d, const void* p, __mmask16 k) {
  if (d == TPU_DTYPE_F32) return _mm512_maskz_loadu_ps(k, p);
  __m256i h = _mm256_maskz_loadu_epi16(k, p);
  if (d == TPU_DTYPE_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Stores the lanes in `k` of v into a row of dtype d, rounding to nearest
 * even, bit for bit as tpu_convert (a NaN becomes the quiet NaN convert.c
 * makes: bfloat16 keeps the top payload bits, float16 only the sign). */
SR_AVX512 static inline void store16(tpu_dtype_t d, void* p, __m512 v, __mmask16 k) {
  if (d == TPU_DTYPE_F32) {
    _mm512_mask_storeu_ps(p, k, v);
    return;
  }
  __m512i b = _mm512_castps_si512(v);
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  __m512i top = _mm512_srli_epi32(b, 16);
  __m256i h;
  if (d == TPU_DTYPE_F16) {
    h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (nan) {
      __m512i q = _mm512_or_si512(_mm512_and_si512(top, _mm512_set1_epi32(0x8000)),
                                  _mm512_set1_epi32(0x7e00));
      h = _mm256_mask_mov_epi16(h, nan, _mm512_cvtepi32_epi16(q));
    }
  } else {
    __m512i lsb = _mm512_and_si512(top, _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), lsb);
    r = _mm512_srli_epi32(r, 16);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(top, _mm512_set1_epi32(0x40)));
    h = _mm512_cvtepi32_epi16(r);
  }
  _mm256_mask_storeu_epi16(p, k, h);
}

/* exp(x) for x <= 0 (or NaN), subnormal results included (see the top). */
#define exp16(x) vm_exp512((x), -150.0f)

/* Element offset of vector v's first element, in bytes, for dtype d. */
static inline size_t at(tpu_dtype_t d, int64_t v) {
  return (size_t)v * 16u * (d == TPU_DTYPE_F32 ? 4u : 2u);
}

/* One row of len >= 1 elements; x and y of dtypes xd and yd do not overlap. */
SR_AVX512 static inline void row(tpu_dtype_t xd, const char* x, tpu_dtype_t yd, char* y,
                                 int64_t len, bool log_, float* buf) {
  const int64_t nv = len / 16;
  const __mmask16 tail = (__mmask16)((1u << (len % 16)) - 1u);
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  __m512 m0 = ninf, m1 = ninf;
  int64_t v = 0;
  for (; v + 2 <= nv; v += 2) { /* max(x, m) keeps m for a NaN x */
    m0 = _mm512_max_ps(load16(xd, x + at(xd, v), 0xffff), m0);
    m1 = _mm512_max_ps(load16(xd, x + at(xd, v + 1), 0xffff), m1);
  }
  if (v < nv) m0 = _mm512_max_ps(load16(xd, x + at(xd, v), 0xffff), m0);
  if (tail) m1 = _mm512_mask_max_ps(m1, tail, load16(xd, x + at(xd, nv), tail), m1);
  const float m = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
  const __m512 mv = _mm512_set1_ps(m);

  /* exp(x - m) and its sum; softmax keeps the exps (in y or buf). */
  float* keep = log_ ? NULL : yd == TPU_DTYPE_F32 ? (float*)y : len <= BUF ? buf : NULL;
  __m512d d0 = _mm512_setzero_pd(), d1 = _mm512_setzero_pd();
  for (int64_t v0 = 0; v0 <= nv; v0 += 16) {
    int64_t v1 = v0 + 16 < nv ? v0 + 16 : nv;
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    for (v = v0; v < v1; ++v) {
      __m512 e = exp16(_mm512_sub_ps(load16(xd, x + at(xd, v), 0xffff), mv));
      if (keep) _mm512_storeu_ps(keep + 16 * v, e);
      if (v & 1)
        s1 = _mm512_add_ps(s1, e);
      else
        s0 = _mm512_add_ps(s0, e);
    }
    if (v0 + 16 > nv && tail) { /* the last block */
      __m512 e = _mm512_maskz_mov_ps(tail, exp16(_mm512_sub_ps(load16(xd, x + at(xd, nv), tail), mv)));
      if (keep) _mm512_mask_storeu_ps(keep + 16 * nv, tail, e);
      s0 = _mm512_add_ps(s0, e);
    }
    s0 = _mm512_add_ps(s0, s1);
    d0 = _mm512_add_pd(d0, _mm512_cvtps_pd(_mm512_castps512_ps256(s0)));
    d1 = _mm512_add_pd(d1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(
                               _mm512_castps_pd(s0), 1))));
  }
  const double sum = _mm512_reduce_add_pd(_mm512_add_pd(d0, d1));

  if (log_) {
    const __m512 sh = _mm512_set1_ps(m + (float)log(sum));
    for (v = 0; v < nv; ++v)
      store16(yd, y + at(yd, v), _mm512_sub_ps(load16(xd, x + at(xd, v), 0xffff), sh), 0xffff);
    if (tail)
      store16(yd, y + at(yd, nv), _mm512_sub_ps(load16(xd, x + at(xd, nv), tail), sh), tail);
    return;
  }
  const __m512 sc = _mm512_set1_ps((float)(1.0 / sum));
  for (v = 0; v < nv; ++v) {
    __m512 e = keep ? _mm512_loadu_ps(keep + 16 * v)
                    : exp16(_mm512_sub_ps(load16(xd, x + at(xd, v), 0xffff), mv));
    store16(yd, y + at(yd, v), _mm512_mul_ps(e, sc), 0xffff);
  }
  if (tail) {
    __m512 e = keep ? _mm512_maskz_loadu_ps(tail, keep + 16 * nv)
                    : exp16(_mm512_sub_ps(load16(xd, x + at(xd, nv), tail), mv));
    store16(yd, y + at(yd, nv), _mm512_mul_ps(e, sc), tail);
  }
}

/* The rows with the dtypes as constants, so each pair compiles on its own. */
#define ROWS(XD, YD)                                                                     \
  for (int64_t r = begin; r < end; ++r)                                                  \
    row(XD, x + (size_t)(r * len) * xs, YD, y + (size_t)(r * len) * ys, len, log_, buf); \
  return

SR_AVX512_FN void tpu_softmax_rows512(const void* xp, tpu_dtype_t xd, void* yp, tpu_dtype_t yd,
                                      int64_t len, bool log_, int64_t begin, int64_t end) {
  float buf[BUF];
  const char* x = (const char*)xp;
  char* y = (char*)yp;
  const size_t xs = tpu_dtype_size(xd), ys = tpu_dtype_size(yd);
  if (xd == TPU_DTYPE_F32 && yd == TPU_DTYPE_F32) {
    ROWS(TPU_DTYPE_F32, TPU_DTYPE_F32);
  }
  if (xd == TPU_DTYPE_BF16 && yd == TPU_DTYPE_BF16) {
    ROWS(TPU_DTYPE_BF16, TPU_DTYPE_BF16);
  }
  if (xd == TPU_DTYPE_F16 && yd == TPU_DTYPE_F16) {
    ROWS(TPU_DTYPE_F16, TPU_DTYPE_F16);
  }
  ROWS(xd, yd); /* half_to_float and other mixes */
}

#else

bool tpu_softmax_rows512_ok(void) { return false; }

void tpu_softmax_rows512(const void* xp, tpu_dtype_t xd, void* yp, tpu_dtype_t yd, int64_t len,
                         bool log_, int64_t begin, int64_t end) {
  (void)xp, (void)xd, (void)yp, (void)yd, (void)len, (void)log_, (void)begin, (void)end;
}

#endif
