/* fft_ref.c — the fft family's reference kernel: the definitions written
 * out. Values are read element by element into a contiguous float64
 * complex array, each transformed dim gets a plain O(n^2) DFT (angles from
 * exact index products), c2r sums its Hermitian series directly, and the
 * result is written element by element. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fft/fft.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* Offset (in elements) of row-major element k of `sizes` in a view with `strides`. */
static int64_t ref_offset(int32_t ndim, const int64_t* sizes, const int64_t* strides, int64_t k) {
  int64_t off = 0;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    off += (k % sizes[d]) * strides[d];
    k /= sizes[d];
  }
  return off;
}

/* DFT along dim of a contiguous complex array w of `sizes`. */
static int ref_dft(double* w, int32_t ndim, const int64_t* sizes, int32_t dim, int sign) {
  int64_t n = sizes[dim], inner = 1, outer = 1;
  for (int32_t d = dim + 1; d < ndim; ++d) inner *= sizes[d];
  for (int32_t d = 0; d < dim; ++d) outer *= sizes[d];
  double* line = malloc(sizeof(double) * 2 * (size_t)n);
  if (!line) return 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double* base = w + 2 * (o * n * inner + i);
      for (int64_t k = 0; k < n; ++k) {
        double re = 0, im = 0;
        for (int64_t t = 0; t < n; ++t) {
          double ang = sign * 2.0 * M_PI * (double)((k * t) % n) / (double)n;
          double xr = base[2 * t * inner], xi = base[2 * t * inner + 1];
          re += xr * cos(ang) - xi * sin(ang);
          im += xr * sin(ang) + xi * cos(ang);
        }
        line[2 * k] = re, line[2 * k + 1] = im;
      }
      for (int64_t k = 0; k < n; ++k)
        base[2 * k * inner] = line[2 * k], base[2 * k * inner + 1] = line[2 * k + 1];
    }
  free(line);
  return 1;
}

tpu_status_t tpu_fft_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_exec_ctx_t* ctx) {
  (void)ctx;
  fft_args_t a;
  TPU_RETURN_IF_ERROR(tpu_fft_parse(def, node, &a));
  const tpu_view_t* out = &node->outputs[0];
  if (tpu_view_numel(out) == 0) return TPU_OK;
  const tpu_view_t* in = a.in;
  const int32_t nd = a.ndims, last = a.dims[nd - 1], ndim = in->ndim;
  int64_t wsizes[TPU_MAX_DIMS];
  for (int32_t d = 0; d < ndim; ++d) wsizes[d] = in->sizes[d];
  if (a.kind == FFT_C2R) wsizes[last] = a.last_size / 2 + 1;
  int64_t wn = 1;
  for (int32_t d = 0; d < ndim; ++d) wn *= wsizes[d];
  double* w = malloc(sizeof(double) * 2 * (size_t)wn);
  if (!w) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "fft reference: out of memory");
  tpu_view_t ir = fft_part_view(in, 0), ii = fft_part_view(in, 1);
  bool cin = tpu_dtype_is_complex(in->dtype);
  for (int64_t k = 0; k < wn; ++k) {
    int64_t off = ref_offset(ndim, wsizes, ir.strides, k);
    w[2 * k] = view_get_f64(&ir, off);
    w[2 * k + 1] = cin ? view_get_f64(&ii, off) : 0.0;
  }
  int ok = 1;
  for (int32_t i = 0; i < nd && ok; ++i)
    if (a.kind != FFT_C2R || i + 1 < nd) ok = ref_dft(w, ndim, wsizes, a.dims[i], a.sign);
  if (!ok) {
    free(w);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "fft reference: out of memory");
  }
  tpu_view_t orv = fft_part_view(out, 0), oiv = fft_part_view(out, 1);
  int64_t on = tpu_view_numel(out);
  for (int64_t k = 0; k < on; ++k) {
    int64_t ooff = ref_offset(ndim, out->sizes, orv.strides, k);
    if (a.kind != FFT_C2R) {
      /* the same multi-index in w (out's last dim may be shorter: onesided) */
      int64_t idx[TPU_MAX_DIMS] = {0}, r = k, wk = 0;
      for (int32_t d = ndim - 1; d >= 0; --d) idx[d] = r % out->sizes[d], r /= out->sizes[d];
      for (int32_t d = 0; d < ndim; ++d) wk = wk * wsizes[d] + idx[d];
      view_set_f64(&orv, ooff, w[2 * wk] * a.scale);
      view_set_f64(&oiv, ooff, w[2 * wk + 1] * a.scale);
      continue;
    }
    /* c2r: y[t] = Re X0 + sum_{0<k<n/2} 2 Re(X[k] e^{2 pi i k t/n}) + Re X[n/2] (-1)^t (n even) */
    int64_t idx[TPU_MAX_DIMS] = {0}, r = k;
    for (int32_t d = ndim - 1; d >= 0; --d) idx[d] = r % out->sizes[d], r /= out->sizes[d];
    const int64_t n = a.last_size, t = idx[last];
    int64_t inner = 1;
    for (int32_t d = last + 1; d < ndim; ++d) inner *= wsizes[d];
    idx[last] = 0;
    int64_t w0 = 0;
    for (int32_t d = 0; d < ndim; ++d) w0 = w0 * wsizes[d] + idx[d];
    double y = w[2 * w0];
    for (int64_t f = 1; 2 * f < n; ++f) {
      double ang = 2.0 * M_PI * (double)((f * t) % n) / (double)n;
      const double* x = w + 2 * (w0 + f * inner);
      y += 2.0 * (x[0] * cos(ang) - x[1] * sin(ang));
    }
    if (n % 2 == 0) y += w[2 * (w0 + (n / 2) * inner)] * (t % 2 ? -1.0 : 1.0);
    view_set_f64(&orv, ooff, y * a.scale);
  }
  free(w);
  return TPU_OK;
}
