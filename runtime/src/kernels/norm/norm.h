/* norm.h — the normalisation family's private interface, shared by norm.c
 * (rows, parsing, inference, the optimised kernels), norm_ref.c (the
 * reference kernels) and tests/test_norm.c.
 *
 * Layer norm sees its input as M rows of N elements: the trailing dims named
 * by normalized_shape form a row. Forward writes (out, mean, rstd) with mean
 * and rstd shaped input.shape[:axis] + [1] * len(normalized_shape), in the
 * input's dtype (PyTorch CPU). Backward writes (grad_input, grad_weight,
 * grad_bias) for the outputs its output_mask selects; the others are absent
 * (undefined results, see tpu_view_is_absent).
 *
 * RMS norm (_fused_rms_norm, _fused_rms_norm_backward) is the same with the
 * mean fixed at 0 and no bias: rstd = 1 / sqrt(mean(x^2) + eps) (eps None:
 * the compute type's machine epsilon), out = x * rstd * weight; backward
 * grad_input = rstd * (gw - xhat * mean(gw * xhat)), grad_weight = sum of
 * grad_out * xhat. Its nodes have two outputs: (out, rstd) and (grad_input,
 * grad_weight); internally they take the slots (0, 2) and (0, 1) of the
 * three above (norm_slot), the missing one absent. rstd is float32 for half
 * inputs, as on CUDA.
 */
#ifndef TPU_KERNELS_NORM_H_
#define TPU_KERNELS_NORM_H_

#include <stdbool.h>

#include "kernels/common/kernel_util.h"

typedef struct norm_impl {
  bool backward;
  bool rms; /* _fused_rms_norm: no mean, no bias; two outputs (see below) */
} norm_impl_t;

typedef struct norm_args {
  const norm_impl_t* impl;
  const tpu_view_t* x;    /* input */
  const tpu_view_t* w;    /* weight, or NULL */
  const tpu_view_t* b;    /* bias, or NULL */
  const tpu_view_t* g;    /* backward: grad_out */
  const tpu_view_t* mean; /* backward */
  const tpu_view_t* rstd; /* backward */
  int32_t axis;           /* first normalised dim */
  int64_t m, n;           /* rows, elements per row */
  double eps;
  bool mask[3];           /* backward: which outputs to compute */
  tpu_view_t shape[3];    /* the outputs: dtype, ndim, sizes, contiguous strides */
} norm_args_t;

/* The node output holding internal slot i (0..2), or -1. */
static inline int norm_slot(const norm_impl_t* impl, int i) {
  if (!impl->rms) return i;
  if (impl->backward) return i < 2 ? i : -1;
  return i == 0 ? 0 : (i == 2 ? 1 : -1);
}

/* Parses and validates a node; what the family does not run (mixed dtypes,
 * empty rows) gives UNIMPLEMENTED. */
tpu_status_t tpu_norm_parse(const tpu_op_def_t* def, const tpu_node_t* node, norm_args_t* args);

/* A float32 forward node over rows of its last dim, reduced to what one
 * row needs (the fusion interpreter's row function). Borrows the weight and
 * bias memory of the node it was planned from. */
typedef struct tpu_norm_row {
  bool rms;
  int64_t n;          /* elements per row */
  double eps;
  const float *w, *b; /* or NULL */
} tpu_norm_row_t;

/* Whether `node` (of any op) is a layer_norm / rms_norm forward that the row
 * function runs: float32, normalised over its last dim, input rows, weight
 * and bias contiguous; fills *out if so. */
bool tpu_norm_row_plan(const tpu_op_def_t* def, const tpu_node_t* node, tpu_norm_row_t* out);

/* y[0..n) = the normalised row x[0..n) (y may be x), with its mean (0 for
 * rms) and rstd: the arithmetic of the family's own float32 kernel. */
void tpu_norm_row_f32(const tpu_norm_row_t* p, const float* x, float* y, double* out_mean,
                      double* out_rstd);

/* The reference kernel: plain loops per row in logical order, in double. */
tpu_status_t tpu_norm_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx);

extern const tpu_op_family_t tpu_family_norm;

#endif /* TPU_KERNELS_NORM_H_ */
