/* conv_loops.h — the convolution family's typed loops (included by conv.c
 * only): im2col/col2im over runs of grid positions, the depthwise loops
 * (row and zero-padded plane forms), bias fills and sums, written once as
 * CONV_TYPED(T, SFX, ACC, ATTR) and instantiated per compute type
 * (and per instruction set) in conv.c, which gathers them in conv_ops_t
 * tables indexed by compute type.
 */
#ifndef TPU_KERNELS_CONV_LOOPS_H_
#define TPU_KERNELS_CONV_LOOPS_H_

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/conv/conv.h"
#include "kernels/common/kernel_util.h"

#define CONV_KW_CACHE 16           /* window widths whose valid column ranges are kept */

static inline int64_t prod3(const int64_t* v) { return v[0] * v[1] * v[2]; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Grid positions ow in [*lo, *hi) whose image column ow*s + off lies in [0, S). */
static inline void valid_range(int64_t S, int64_t s, int64_t off, int64_t G, int64_t* lo,
                               int64_t* hi) {
  int64_t l = off >= 0 ? 0 : (-off + s - 1) / s;
  int64_t h = S - off <= 0 ? 0 : (S - off + s - 1) / s;
  *lo = min64(l, G);
  *hi = max64(*lo, min64(h, G));
}

/* ---- typed loops ---------------------------------------------------------------- */

typedef void (*gemm_fn)(bool ta, bool tb, int m, int n, int k, const void* a, int lda,
                        const void* b, int ldb, int beta, void* c, int ldc);

typedef struct conv_ops {
  gemm_fn gemm;
  /* rows (c - c0) * pK + k of cols (jn columns) from channels [c0, c1) of x */
  void (*im2col)(const conv_geom_t* g, const void* x, int64_t c0, int64_t c1, int64_t j0,
                 int64_t jn, void* cols);
  /* the transpose: adds cols into channels [c0, c1) of x */
  void (*col2im)(const conv_geom_t* g, void* x, int64_t c0, int64_t c1, int64_t j0, int64_t jn,
                 const void* cols);
  /* dst[r * ld + j] += bias[r] */
  void (*add_rows)(void* dst, int64_t rows, int64_t cols, int64_t ld, const void* bias);
  /* dst[r * ld + j] = bias ? bias[r] : 0, for r < rows, j < cols */
  void (*fill)(void* dst, int64_t rows, int64_t cols, int64_t ld, const void* bias);
  /* depthwise, one channel: y += w * x (taps), x += w^T y, dw += y x */
  void (*dw_y)(const conv_geom_t* g, const void* x, const void* w, void* y);
  void (*dw_x)(const conv_geom_t* g, void* x, const void* w, const void* y);
  void (*dw_w)(const conv_geom_t* g, const void* x, double* acc, const void* y, void* rows);
  /* depthwise, stride 1, 2-D, on zero-padded planes (plane_scratch sizes) */
  void (*dwp_y)(const conv_geom_t* g, const void* x, const void* w, void* y, void* scratch);
  void (*dwp_x)(const conv_geom_t* g, void* x, const void* w, const void* y, void* scratch);
  void (*dwp_w)(const conv_geom_t* g, const void* x, const void* y, void* rows, void* scratch);
  /* dst[i] = sum over the `count` source rows (stride `step`) of src[i] */
  void (*sum_rows)(void* dst, const void* src, int64_t count, int64_t step, int64_t n);
  /* sum of n elements, in double (grad_bias) */
  double (*sum)(const void* src, int64_t n);
  /* sum of n elements by halving passes (vectorised; overwrites a) */
  double (*fold)(void* a, int64_t n);
  void (*from_double)(void* dst, const double* src, int64_t n);
} conv_ops_t;

/* Walks the grid positions [j0, j0 + jn) as runs along the last grid dim:
 * BODY sees od, oh, ow (the run's start), run (its length) and t0 (its
 * offset from j0). */
#define CONV_RUNS(g, j0, jn, ...)                                                                  \
  do {                                                                                             \
    int64_t od_ = (j0) / ((g)->G[1] * (g)->G[2]);                                                  \
    int64_t oh_ = ((j0) / (g)->G[2]) % (g)->G[1], ow_ = (j0) % (g)->G[2];                          \
    for (int64_t j_ = (j0); j_ < (j0) + (jn);) {                                                   \
      int64_t run = min64((g)->G[2] - ow_, (j0) + (jn) - j_);                                      \
      int64_t od = od_, oh = oh_, ow = ow_, t0 = j_ - (j0);                                        \
      __VA_ARGS__;                                                                                 \
      j_ += run;                                                                                   \
      ow_ += run;                                                                                  \
      if (ow_ == (g)->G[2]) {                                                                      \
        ow_ = 0;                                                                                   \
        if (++oh_ == (g)->G[1]) oh_ = 0, ++od_;                                                    \
      }                                                                                            \
    }                                                                                              \
  } while (0)

#define CONV_TYPED(T, SFX, ACC, ATTR)                                                              \
  ATTR static void im2col_##SFX(const conv_geom_t* g, const void* xv, int64_t c0, int64_t c1,      \
                           int64_t j0, int64_t jn, void* colsv) {                                  \
    const T* x = (const T*)xv;                                                                     \
    T* cols = (T*)colsv;                                                                           \
    const int64_t pS = prod3(g->S), s2 = g->stride[2];                                             \
    int64_t row = 0;                                                                               \
    for (int64_t c = c0; c < c1; ++c)                                                              \
      for (int64_t kd = 0; kd < g->K[0]; ++kd)                                                     \
        for (int64_t kh = 0; kh < g->K[1]; ++kh)                                                   \
          for (int64_t kw = 0; kw < g->K[2]; ++kw, ++row) {                                        \
            T* dst = cols + row * jn;                                                              \
            const int64_t off = kw * g->dil[2] - g->pad[2];                                        \
            int64_t lo, hi;                                                                        \
            valid_range(g->S[2], s2, off, g->G[2], &lo, &hi);                                      \
            CONV_RUNS(g, j0, jn, {                                                                 \
              T* d = dst + t0 - ow;                                                                \
              int64_t id = od * g->stride[0] - g->pad[0] + kd * g->dil[0];                         \
              int64_t ih = oh * g->stride[1] - g->pad[1] + kh * g->dil[1];                         \
              int64_t a = max64(ow, lo), b = min64(ow + run, hi);                                  \
              if (id < 0 || id >= g->S[0] || ih < 0 || ih >= g->S[1] || a >= b) {                  \
                memset(d + ow, 0, sizeof(T) * (size_t)run);                                        \
              } else {                                                                             \
                const T* xr = x + c * pS + (id * g->S[1] + ih) * g->S[2];                          \
                for (int64_t t = ow; t < a; ++t) d[t] = 0;                                         \
                if (s2 == 1)                                                                       \
                  memcpy(d + a, xr + a + off, sizeof(T) * (size_t)(b - a));                        \
                else                                                                               \
                  for (int64_t t = a; t < b; ++t) d[t] = xr[t * s2 + off];                         \
                for (int64_t t = b; t < ow + run; ++t) d[t] = 0;                                   \
              }                                                                                    \
            });                                                                                    \
          }                                                                                        \
  }                                                                                                \
  ATTR static void col2im_##SFX(const conv_geom_t* g, void* xv, int64_t c0, int64_t c1,            \
                                int64_t j0, int64_t jn, const void* colsv) {                       \
    T* x = (T*)xv;                                                                                 \
    const T* cols = (const T*)colsv;                                                               \
    const int64_t pS = prod3(g->S), s2 = g->stride[2];                                             \
    int64_t row = 0;                                                                               \
    for (int64_t c = c0; c < c1; ++c)                                                              \
      for (int64_t kd = 0; kd < g->K[0]; ++kd)                                                     \
        for (int64_t kh = 0; kh < g->K[1]; ++kh)                                                   \
          for (int64_t kw = 0; kw < g->K[2]; ++kw, ++row) {                                        \
            const T* src = cols + row * jn;                                                        \
            const int64_t off = kw * g->dil[2] - g->pad[2];                                        \
            int64_t lo, hi;                                                                        \
            valid_range(g->S[2], s2, off, g->G[2], &lo, &hi);                                      \
            CONV_RUNS(g, j0, jn, {                                                                 \
              const T* s = src + t0 - ow;                                                          \
              int64_t id = od * g->stride[0] - g->pad[0] + kd * g->dil[0];                         \
              int64_t ih = oh * g->stride[1] - g->pad[1] + kh * g->dil[1];                         \
              int64_t a = max64(ow, lo), b = min64(ow + run, hi);                                  \
              if (id >= 0 && id < g->S[0] && ih >= 0 && ih < g->S[1]) {                            \
                T* xr = x + c * pS + (id * g->S[1] + ih) * g->S[2];                                \
                if (s2 == 1)                                                                       \
                  for (int64_t t = a; t < b; ++t) xr[t + off] += s[t];                             \
                else                                                                               \
                  for (int64_t t = a; t < b; ++t) xr[t * s2 + off] += s[t];                        \
              }                                                                                    \
            });                                                                                    \
          }                                                                                        \
  }                                                                                                \
  ATTR static void add_rows_##SFX(void* dstv, int64_t rows, int64_t cols, int64_t ld,              \
                             const void* biasv) {                                                  \
    T* dst = (T*)dstv;                                                                             \
    const T* bias = (const T*)biasv;                                                               \
    for (int64_t r = 0; r < rows; ++r)                                                             \
      for (int64_t j = 0; j < cols; ++j) dst[r * ld + j] += bias[r];                               \
  }                                                                                                \
  ATTR static void fill_##SFX(void* dstv, int64_t rows, int64_t cols, int64_t ld,                  \
                              const void* biasv) {                                                 \
    T* dst = (T*)dstv;                                                                             \
    const T* bias = (const T*)biasv;                                                               \
    for (int64_t r = 0; r < rows; ++r) {                                                           \
      T v = bias ? bias[r] : (T)0;                                                                 \
      for (int64_t j = 0; j < cols; ++j) dst[r * ld + j] = v;                                      \
    }                                                                                              \
  }                                                                                                \
  /* Depthwise: for every grid row and tap, the run of valid columns. */                           \
  ATTR static void dw_y_##SFX(const conv_geom_t* g, const void* xv, const void* wv, void* yv) {    \
    const T* x = (const T*)xv;                                                                     \
    const T* w = (const T*)wv;                                                                     \
    T* y = (T*)yv;                                                                                 \
    int64_t los[CONV_KW_CACHE], his[CONV_KW_CACHE];                                                \
    for (int64_t kw = 0; kw < g->K[2] && kw < CONV_KW_CACHE; ++kw)                                 \
      valid_range(g->S[2], g->stride[2], kw * g->dil[2] - g->pad[2], g->G[2], &los[kw], &his[kw]); \
    const int64_t s2 = g->stride[2];                                                               \
    for (int64_t od = 0; od < g->G[0]; ++od)                                                       \
      for (int64_t oh = 0; oh < g->G[1]; ++oh) {                                                   \
        T* yr = y + (od * g->G[1] + oh) * g->G[2];                                                 \
        for (int64_t kd = 0; kd < g->K[0]; ++kd) {                                                 \
          int64_t id = od * g->stride[0] - g->pad[0] + kd * g->dil[0];                             \
          if (id < 0 || id >= g->S[0]) continue;                                                   \
          for (int64_t kh = 0; kh < g->K[1]; ++kh) {                                               \
            int64_t ih = oh * g->stride[1] - g->pad[1] + kh * g->dil[1];                           \
            if (ih < 0 || ih >= g->S[1]) continue;                                                 \
            const T* xr = x + (id * g->S[1] + ih) * g->S[2];                                       \
            for (int64_t kw = 0; kw < g->K[2]; ++kw) {                                             \
              const T wt = w[(kd * g->K[1] + kh) * g->K[2] + kw];                                  \
              const int64_t off = kw * g->dil[2] - g->pad[2];                                      \
              const bool cached = kw < CONV_KW_CACHE;                                              \
              int64_t lo = cached ? los[kw] : 0, hi = cached ? his[kw] : 0;                        \
              if (!cached) valid_range(g->S[2], s2, off, g->G[2], &lo, &hi);           \
              if (s2 == 1) {                                                                       \
                const T* xs = xr + off;                                                            \
                for (int64_t t = lo; t < hi; ++t) yr[t] += wt * xs[t];                             \
              } else {                                                                             \
                for (int64_t t = lo; t < hi; ++t) yr[t] += wt * xr[t * s2 + off];                  \
              }                                                                                    \
            }                                                                                      \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
  }                                                                                                \
  ATTR static void dw_x_##SFX(const conv_geom_t* g, void* xv, const void* wv, const void* yv) {    \
    T* x = (T*)xv;                                                                                 \
    const T* w = (const T*)wv;                                                                     \
    const T* y = (const T*)yv;                                                                     \
    int64_t los[CONV_KW_CACHE], his[CONV_KW_CACHE];                                                \
    for (int64_t kw = 0; kw < g->K[2] && kw < CONV_KW_CACHE; ++kw)                                 \
      valid_range(g->S[2], g->stride[2], kw * g->dil[2] - g->pad[2], g->G[2], &los[kw], &his[kw]); \
    const int64_t s2 = g->stride[2];                                                               \
    for (int64_t od = 0; od < g->G[0]; ++od)                                                       \
      for (int64_t oh = 0; oh < g->G[1]; ++oh) {                                                   \
        const T* yr = y + (od * g->G[1] + oh) * g->G[2];                                           \
        for (int64_t kd = 0; kd < g->K[0]; ++kd) {                                                 \
          int64_t id = od * g->stride[0] - g->pad[0] + kd * g->dil[0];                             \
          if (id < 0 || id >= g->S[0]) continue;                                                   \
          for (int64_t kh = 0; kh < g->K[1]; ++kh) {                                               \
            int64_t ih = oh * g->stride[1] - g->pad[1] + kh * g->dil[1];                           \
            if (ih < 0 || ih >= g->S[1]) continue;                                                 \
            T* xr = x + (id * g->S[1] + ih) * g->S[2];                                             \
            for (int64_t kw = 0; kw < g->K[2]; ++kw) {                                             \
              const T wt = w[(kd * g->K[1] + kh) * g->K[2] + kw];                                  \
              const int64_t off = kw * g->dil[2] - g->pad[2];                                      \
              const bool cached = kw < CONV_KW_CACHE;                                              \
              int64_t lo = cached ? los[kw] : 0, hi = cached ? his[kw] : 0;                        \
              if (!cached) valid_range(g->S[2], s2, off, g->G[2], &lo, &hi);           \
              if (s2 == 1) {                                                                       \
                T* xs = xr + off;                                                                  \
                for (int64_t t = lo; t < hi; ++t) xs[t] += wt * yr[t];                             \
              } else {                                                                             \
                for (int64_t t = lo; t < hi; ++t) xr[t * s2 + off] += wt * yr[t];                  \
              }                                                                                    \
            }                                                                                      \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
  }                                                                                                \
  /* per tap, a row of lane sums (rows: K * G2 scratch) added up at the end */                     \
  ATTR static void dw_w_##SFX(const conv_geom_t* g, const void* xv, double* acc, const void* yv,   \
                         void* rowsv) {                                                            \
    const T* x = (const T*)xv;                                                                     \
    const T* y = (const T*)yv;                                                                     \
    T* rows = (T*)rowsv;                                                                           \
    int64_t los[CONV_KW_CACHE], his[CONV_KW_CACHE];                                                \
    for (int64_t kw = 0; kw < g->K[2] && kw < CONV_KW_CACHE; ++kw)                                 \
      valid_range(g->S[2], g->stride[2], kw * g->dil[2] - g->pad[2], g->G[2], &los[kw], &his[kw]); \
    const int64_t s2 = g->stride[2], pK = prod3(g->K);                                             \
    memset(rows, 0, sizeof(T) * (size_t)(pK * g->G[2]));                                           \
    for (int64_t od = 0; od < g->G[0]; ++od)                                                       \
      for (int64_t oh = 0; oh < g->G[1]; ++oh) {                                                   \
        const T* yr = y + (od * g->G[1] + oh) * g->G[2];                                           \
        for (int64_t kd = 0; kd < g->K[0]; ++kd) {                                                 \
          int64_t id = od * g->stride[0] - g->pad[0] + kd * g->dil[0];                             \
          if (id < 0 || id >= g->S[0]) continue;                                                   \
          for (int64_t kh = 0; kh < g->K[1]; ++kh) {                                               \
            int64_t ih = oh * g->stride[1] - g->pad[1] + kh * g->dil[1];                           \
            if (ih < 0 || ih >= g->S[1]) continue;                                                 \
            const T* xr = x + (id * g->S[1] + ih) * g->S[2];                                       \
            for (int64_t kw = 0; kw < g->K[2]; ++kw) {                                             \
              const int64_t off = kw * g->dil[2] - g->pad[2];                                      \
              const bool cached = kw < CONV_KW_CACHE;                                              \
              int64_t lo = cached ? los[kw] : 0, hi = cached ? his[kw] : 0;                        \
              if (!cached) valid_range(g->S[2], s2, off, g->G[2], &lo, &hi);           \
              T* ra = rows + ((kd * g->K[1] + kh) * g->K[2] + kw) * g->G[2];                       \
              if (s2 == 1) {                                                                       \
                const T* xs = xr + off;                                                            \
                for (int64_t t = lo; t < hi; ++t) ra[t] += yr[t] * xs[t];                          \
              } else {                                                                             \
                for (int64_t t = lo; t < hi; ++t) ra[t] += yr[t] * xr[t * s2 + off];               \
              }                                                                                    \
            }                                                                                      \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
    for (int64_t k = 0; k < pK; ++k) {                                                             \
      ACC s = 0;                                                                                   \
      for (int64_t t = 0; t < g->G[2]; ++t) s += rows[k * g->G[2] + t];                            \
      acc[k] += (double)s;                                                                         \
    }                                                                                              \
  }                                                                                                \
  /* Plane forms: the image zero-padded into rows of Wp columns (xp), the                          \
   * grid in rows of the same width (yp, junk past G2 columns); each tap is                        \
   * then one flat loop over G1 * Wp elements. */                                                  \
  ATTR static void pad_x_##SFX(const conv_geom_t* g, const T* x, T* xp) {                          \
    const int64_t Wp = g->S[2] + 2 * g->pad[2], Hp = g->S[1] + 2 * g->pad[1];                      \
    memset(xp, 0, sizeof(T) * (size_t)(Hp * Wp + (g->K[2] - 1) * g->dil[2]));                      \
    for (int64_t ih = 0; ih < g->S[1]; ++ih)                                                       \
      memcpy(xp + (ih + g->pad[1]) * Wp + g->pad[2], x + ih * g->S[2],                             \
             sizeof(T) * (size_t)g->S[2]);                                                         \
  }                                                                                                \
  ATTR static void pad_y_##SFX(const conv_geom_t* g, const T* y, T* yp) {                          \
    const int64_t Wp = g->S[2] + 2 * g->pad[2];                                                    \
    for (int64_t oh = 0; oh < g->G[1]; ++oh) {                                                     \
      memcpy(yp + oh * Wp, y + oh * g->G[2], sizeof(T) * (size_t)g->G[2]);                         \
      for (int64_t ow = g->G[2]; ow < Wp; ++ow) yp[oh * Wp + ow] = 0;                              \
    }                                                                                              \
  }                                                                                                \
  ATTR static void dwp_y_##SFX(const conv_geom_t* g, const void* xv, const void* wv, void* yv,     \
                               void* scratch) {                                                    \
    const T* w = (const T*)wv;                                                                     \
    T* y = (T*)yv;                                                                                 \
    const int64_t Wp = g->S[2] + 2 * g->pad[2], Hp = g->S[1] + 2 * g->pad[1];                      \
    const int64_t n = g->G[1] * Wp;                                                                \
    T* xp = (T*)scratch;                                                                           \
    T* yp = xp + Hp * Wp + (g->K[2] - 1) * g->dil[2];                                              \
    pad_x_##SFX(g, (const T*)xv, xp);                                                              \
    memset(yp, 0, sizeof(T) * (size_t)n);                                                          \
    for (int64_t kh = 0; kh < g->K[1]; ++kh)                                                       \
      for (int64_t kw = 0; kw < g->K[2]; ++kw) {                                                   \
        const T wt = w[kh * g->K[2] + kw];                                                         \
        const T* xs = xp + kh * g->dil[1] * Wp + kw * g->dil[2];                                   \
        for (int64_t i = 0; i < n; ++i) yp[i] += wt * xs[i];                                       \
      }                                                                                            \
    for (int64_t oh = 0; oh < g->G[1]; ++oh)                                                       \
      for (int64_t ow = 0; ow < g->G[2]; ++ow) y[oh * g->G[2] + ow] += yp[oh * Wp + ow];           \
  }                                                                                                \
  ATTR static void dwp_x_##SFX(const conv_geom_t* g, void* xv, const void* wv, const void* yv,     \
                               void* scratch) {                                                    \
    const T* w = (const T*)wv;                                                                     \
    T* x = (T*)xv;                                                                                 \
    const int64_t Wp = g->S[2] + 2 * g->pad[2], Hp = g->S[1] + 2 * g->pad[1];                      \
    const int64_t n = g->G[1] * Wp;                                                                \
    T* xp = (T*)scratch;                                                                           \
    T* yp = xp + Hp * Wp + (g->K[2] - 1) * g->dil[2];                                              \
    memset(xp, 0, sizeof(T) * (size_t)(Hp * Wp + (g->K[2] - 1) * g->dil[2]));                      \
    pad_y_##SFX(g, (const T*)yv, yp);                                                              \
    for (int64_t kh = 0; kh < g->K[1]; ++kh)                                                       \
      for (int64_t kw = 0; kw < g->K[2]; ++kw) {                                                   \
        const T wt = w[kh * g->K[2] + kw];                                                         \
        T* xs = xp + kh * g->dil[1] * Wp + kw * g->dil[2];                                         \
        for (int64_t i = 0; i < n; ++i) xs[i] += wt * yp[i];                                       \
      }                                                                                            \
    for (int64_t ih = 0; ih < g->S[1]; ++ih)                                                       \
      for (int64_t iw = 0; iw < g->S[2]; ++iw)                                                     \
        x[ih * g->S[2] + iw] += xp[(ih + g->pad[1]) * Wp + iw + g->pad[2]];                        \
  }                                                                                                \
  ATTR static void dwp_w_##SFX(const conv_geom_t* g, const void* xv, const void* yv,               \
                               void* rowsv, void* scratch) {                                       \
    T* rows = (T*)rowsv;                                                                           \
    const int64_t Wp = g->S[2] + 2 * g->pad[2], Hp = g->S[1] + 2 * g->pad[1];                      \
    const int64_t n = g->G[1] * Wp;                                                                \
    T* xp = (T*)scratch;                                                                           \
    T* yp = xp + Hp * Wp + (g->K[2] - 1) * g->dil[2];                                              \
    pad_x_##SFX(g, (const T*)xv, xp);                                                              \
    pad_y_##SFX(g, (const T*)yv, yp);                                                              \
    for (int64_t kh = 0; kh < g->K[1]; ++kh)                                                       \
      for (int64_t kw = 0; kw < g->K[2]; ++kw) {                                                   \
        T* ra = rows + (kh * g->K[2] + kw) * n;                                                    \
        const T* xs = xp + kh * g->dil[1] * Wp + kw * g->dil[2];                                   \
        for (int64_t i = 0; i < n; ++i) ra[i] += yp[i] * xs[i];                                    \
      }                                                                                            \
  }                                                                                                \
  ATTR static void sum_rows_##SFX(void* dstv, const void* srcv, int64_t count, int64_t step,       \
                             int64_t n) {                                                          \
    T* dst = (T*)dstv;                                                                             \
    const T* src = (const T*)srcv;                                                                 \
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];                                               \
    for (int64_t r = 1; r < count; ++r)                                                            \
      for (int64_t i = 0; i < n; ++i) dst[i] += src[r * step + i];                                 \
  }                                                                                                \
  ATTR static double sum_##SFX(const void* srcv, int64_t n) {                                      \
    const T* src = (const T*)srcv;                                                                 \
    double s[4] = {0, 0, 0, 0};                                                                    \
    int64_t i = 0;                                                                                 \
    for (; i + 4 <= n; i += 4)                                                                     \
      for (int l = 0; l < 4; ++l) s[l] += (double)src[i + l];                                      \
    for (; i < n; ++i) s[0] += (double)src[i];                                                     \
    return (s[0] + s[1]) + (s[2] + s[3]);                                                          \
  }                                                                                                \
  ATTR static double fold_##SFX(void* av, int64_t n) {                                             \
    T* a = (T*)av;                                                                                 \
    while (n > 64) {                                                                               \
      int64_t h = n / 2;                                                                           \
      for (int64_t i = 0; i < h; ++i) a[i] += a[i + h];                                            \
      if (n & 1) a[0] += a[n - 1];                                                                 \
      n = h;                                                                                       \
    }                                                                                              \
    return sum_##SFX(a, n);                                                                        \
  }                                                                                                \
  ATTR static void from_double_##SFX(void* dstv, const double* src, int64_t n) {                   \
    T* dst = (T*)dstv;                                                                             \
    for (int64_t i = 0; i < n; ++i) dst[i] = (T)src[i];                                            \
  }

/* float32 rows of a weight sum: a float accumulator per run (as PyTorch's
 * GEMMs), then double across runs. */

#endif /* TPU_KERNELS_CONV_LOOPS_H_ */
