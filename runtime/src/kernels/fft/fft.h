/* fft.h — the fft family's private interface, shared by fft.c (rows,
 * parsing, the passes), fft_ref.c (the reference kernel) and
 * tests/test_fft.c.
 *
 * _fft_r2c (real float32/float64 -> complex), _fft_c2c and _fft_c2r (complex
 * -> real) over any list of dims, PyTorch's semantics: r2c transforms the
 * last listed dim real-to-complex (onesided: n/2+1 outputs) and then the
 * other dims complex-to-complex; c2r transforms the other dims backward
 * first, then the last listed dim complex-to-real to `last_dim_size` points,
 * reading its first last_dim_size/2+1 inputs (the imaginary parts of the
 * zero and Nyquist terms are ignored). normalization: 0 none, 1 by
 * 1/sqrt(n), 2 by 1/n, n the product of the signal sizes. Both float32 and
 * float64 compute in float64 (float32 results are rounded once; see fft.c).
 */
#ifndef TPU_KERNELS_FFT_H_
#define TPU_KERNELS_FFT_H_

#include <stdbool.h>

#include "kernels/common/kernel_util.h"

typedef enum fft_kind { FFT_R2C = 0, FFT_C2C, FFT_C2R } fft_kind_t;

typedef struct fft_impl {
  fft_kind_t kind;
} fft_impl_t;

typedef struct fft_args {
  fft_kind_t kind;
  const tpu_view_t* in;
  int32_t ndims;
  int32_t dims[TPU_MAX_DIMS]; /* wrapped, in the order given */
  int sign;                   /* -1 forward, +1 backward */
  bool onesided;              /* r2c */
  int64_t last_size;          /* c2r: signal size along the last dim */
  double scale;               /* normalization factor */
  tpu_dtype_t part;           /* F32 or F64: the dtype computed in */
  tpu_view_t shape;           /* the output (contiguous) */
} fft_args_t;

tpu_status_t tpu_fft_parse(const tpu_op_def_t* def, const tpu_node_t* node, fft_args_t* a);

/* The reference kernel: plain O(n^2) DFTs in float64, one dim at a time. */
tpu_status_t tpu_fft_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_exec_ctx_t* ctx);

/* One real part of a view: a complex view's real (which = 0) or imaginary
 * (1) parts as a real view; a real view itself for which = 0. */
static inline tpu_view_t fft_part_view(const tpu_view_t* v, int which) {
  tpu_view_t r = *v;
  if (!tpu_dtype_is_complex(v->dtype)) return r;
  r.dtype = tpu_dtype_part(v->dtype);
  for (int32_t d = 0; d < r.ndim; ++d) r.strides[d] *= 2;
  r.addr += (uint64_t)which * tpu_dtype_size(r.dtype);
  return r;
}

extern const tpu_op_family_t tpu_family_fft;

#endif /* TPU_KERNELS_FFT_H_ */
