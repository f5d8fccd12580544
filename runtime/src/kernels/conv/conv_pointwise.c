/* conv_pointwise.c — the float32 1x1 convolution forward without BLAS: for one
 * (sample, group) and a block of n grid positions,
 *     Y[co, j] = sum_c W[co, c] X[c, j]  (+ bias[co], added last)
 * with X and Y the image's rows (leading dims ldx, ldy) used in place.
 *
 * OpenBLAS's sgemm copies every element of the image into its packed panel
 * before the (at most C_out-wide) products: for the few output channels of a
 * ResNet bottleneck (64 of 256) the copy costs about as much as the
 * arithmetic. Here the image is read where it lies: a panel of 48 positions
 * (three AVX-512 vectors of each of the C_in rows, contiguous in the row)
 * stays in L1/L2 while blocks of 8 output channels sweep it, 24 accumulators
 * in registers, the weight broadcast from its transpose Wt[c][co] (packed
 * once per call by the caller). The next panel's rows are prefetched during
 * the first channel block, into L2 (_MM_HINT_T1: the 48 KiB panel does not
 * fit L1, and T0 prefetches evicted the panel being read: ~15% slower).
 * Sums run over c in order, one fused multiply-add each; the bias is added
 * after the sum, as the GEMM path does.
 *
 * Built for AVX-512F with a target attribute and used only where the CPU
 * has it (tpu_conv_pw_f32_available); elsewhere the BLAS path runs.
 */
#include "kernels/conv/conv.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define PW_TARGET __attribute__((target("avx512f")))
#define PW_INLINE static inline __attribute__((always_inline))
#define PW_COLS 48 /* positions per panel: 3 vectors of 16 */
#define PW_ROWS 8  /* output channels per register tile */

bool tpu_conv_pw_f32_available(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

/* One R x (16 V) tile of Y (the last vector masked by `last`). */
PW_INLINE PW_TARGET void pw_tile(const float* wt, int64_t ldw, const float* x, int64_t ldx,
                                 float* y, int64_t ldy, int64_t k, const float* bias,
                                 const int R, const int V, __mmask16 last, const float* pf) {
  __m512 acc[PW_ROWS][3];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t c = 0; c < k; ++c) {
    const float* xr = x + c * ldx;
    __m512 xv[3];
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v)
      xv[v] = v == V - 1 ? _mm512_maskz_loadu_ps(last, xr + 16 * v) : _mm512_loadu_ps(xr + 16 * v);
    if (pf) {
      const char* q = (const char*)(pf + c * ldx);
      _mm_prefetch(q, _MM_HINT_T1);
      _mm_prefetch(q + 64, _MM_HINT_T1);
      _mm_prefetch(q + 128, _MM_HINT_T1);
    }
    const float* wr = wt + c * ldw;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m512 wb = _mm512_set1_ps(wr[r]);
#pragma GCC unroll 3
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(wb, xv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    __m512 b = _mm512_set1_ps(bias ? bias[r] : 0.0f);
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) {
      __m512 o = bias ? _mm512_add_ps(acc[r][v], b) : acc[r][v];
      if (v == V - 1) _mm512_mask_storeu_ps(y + r * ldy + 16 * v, last, o);
      else _mm512_storeu_ps(y + r * ldy + 16 * v, o);
    }
  }
}

/* pw_tile with R and V as constants (1..8, 1..3). */
#define PW_CASE(R, V) \
  case (R) * 4 + (V): pw_tile(wt, ldw, x, ldx, y, ldy, k, bias, R, V, last, pf); break;
#define PW_CASES(R) PW_CASE(R, 1) PW_CASE(R, 2) PW_CASE(R, 3)

static PW_TARGET void pw_dispatch(int R, int V, const float* wt, int64_t ldw, const float* x,
                                  int64_t ldx, float* y, int64_t ldy, int64_t k,
                                  const float* bias, __mmask16 last, const float* pf) {
  switch (R * 4 + V) {
    PW_CASES(1) PW_CASES(2) PW_CASES(3) PW_CASES(4)
    PW_CASES(5) PW_CASES(6) PW_CASES(7) PW_CASES(8)
    default: break;
  }
}

PW_TARGET void tpu_conv_pw_f32(const float* wt, const float* x, int64_t ldx, float* y,
                               int64_t ldy, int64_t cy, int64_t k, int64_t n,
                               const float* bias) {
  for (int64_t j = 0; j < n; j += PW_COLS) {
    int64_t w = n - j < PW_COLS ? n - j : PW_COLS;
    int V = (int)((w + 15) / 16);
    int tail = (int)(w - 16 * (V - 1));
    __mmask16 last = (__mmask16)(tail == 16 ? 0xFFFF : (1u << tail) - 1u);
    for (int64_t co = 0; co < cy; co += PW_ROWS) {
      int R = (int)(cy - co < PW_ROWS ? cy - co : PW_ROWS);
      const float* pf = co == 0 && j + PW_COLS < n ? x + j + PW_COLS : NULL;
      pw_dispatch(R, V, wt + co, cy, x + j, ldx, y + co * ldy + j, ldy, k,
                  bias ? bias + co : NULL, last, pf);
    }
  }
}

#else /* no AVX-512 build: the BLAS path runs */

bool tpu_conv_pw_f32_available(void) { return false; }

void tpu_conv_pw_f32(const float* wt, const float* x, int64_t ldx, float* y, int64_t ldy,
                     int64_t cy, int64_t k, int64_t n, const float* bias) {
  (void)wt, (void)x, (void)ldx, (void)y, (void)ldy, (void)cy, (void)k, (void)n, (void)bias;
}

#endif
