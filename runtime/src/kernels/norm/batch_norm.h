/* batch_norm.h — the batch-norm and group-norm families' private interface,
 * shared by batch_norm.c, group_norm.c, their reference kernels
 * (batch_norm_ref.c) and tests/test_norm_channel.c.
 *
 * Batch norm sees its input [N, C, *] as C channels of `count` = N * prod(*)
 * elements. Forward (native_batch_norm) writes (out, save_mean, save_invstd);
 * training also updates running_mean/running_var in place (they are inputs),
 * as PyTorch CPU does. Backward (native_batch_norm_backward) writes
 * (grad_input, grad_weight, grad_bias) for the outputs output_mask selects.
 *
 * Group norm sees [N, C, HxW] as N * group groups of C / group * HxW
 * elements (native_group_norm, native_group_norm_backward).
 */
#ifndef TPU_KERNELS_BATCH_NORM_H_
#define TPU_KERNELS_BATCH_NORM_H_

#include <stdbool.h>

#include "kernels/common/kernel_util.h"

typedef struct bn_impl {
  bool backward;
  int training; /* -1: from the "training"/"train" attr; 0/1: fixed by the overload */
  bool group;   /* group norm */
} bn_impl_t;

typedef struct bn_args {
  const bn_impl_t* impl;
  const tpu_view_t* x;  /* input [N, C, *] */
  const tpu_view_t* w;  /* weight [C] or NULL */
  const tpu_view_t* b;  /* bias [C] or NULL (forward) */
  const tpu_view_t* rm; /* running_mean or NULL */
  const tpu_view_t* rv; /* running_var or NULL */
  const tpu_view_t* g;  /* backward: grad_out */
  const tpu_view_t* sm; /* backward: save_mean (group: mean [N, G]) */
  const tpu_view_t* si; /* backward: save_invstd (group: rstd [N, G]) */
  bool training;
  double momentum, eps;
  bool mask[3];
  int64_t n, c, s;    /* batch, channels, elements per (n, c) plane */
  int64_t groups;     /* group norm */
  int64_t count;      /* batch norm: elements per channel (n * s) */
  tpu_view_t shape[3]; /* output metadata; dtype INVALID: an undefined output */
} bn_args_t;

tpu_status_t tpu_bn_parse(const tpu_op_def_t* def, const tpu_node_t* node, bn_args_t* a);
tpu_status_t tpu_gn_parse(const tpu_op_def_t* def, const tpu_node_t* node, bn_args_t* a);

/* Reference kernels: plain loops in logical order, in double. */
tpu_status_t tpu_bn_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx);
tpu_status_t tpu_gn_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx);

/* Element (n, c, i) of an [N, C, *] view, i the flat index over the trailing dims. */
static inline int64_t bn_offset(const tpu_view_t* v, int64_t n, int64_t c, int64_t i) {
  int64_t off = n * v->strides[0] + c * v->strides[1];
  for (int32_t d = v->ndim - 1; d >= 2; --d) {
    off += (i % v->sizes[d]) * v->strides[d];
    i /= v->sizes[d];
  }
  return off;
}

extern const tpu_op_family_t tpu_family_batch_norm;
extern const tpu_op_family_t tpu_family_group_norm;

#endif /* TPU_KERNELS_BATCH_NORM_H_ */
