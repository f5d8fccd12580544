/* loss.h — the loss family's private interface, shared by loss.c (rows,
 * parsing, inference, the optimised kernels), loss_ref.c (the reference
 * kernel) and tests/test_loss.c.
 *
 * nll_loss and nll_loss2d see self as samples x classes: the sample dims are
 * self's dims without the class dim (N for [N, C]; N, H, W for [N, C, H, W];
 * none for a [C] input with a 0-dim target) and match the target's dims, so
 * sample q is element q of the target in logical order.
 */
#ifndef TPU_KERNELS_LOSS_H_
#define TPU_KERNELS_LOSS_H_

#include <stdbool.h>

#include "kernels/common/kernel_util.h"

enum { LOSS_NONE = 0, LOSS_MEAN = 1, LOSS_SUM = 2 }; /* at::Reduction */

typedef struct loss_impl {
  bool backward;
  bool spatial; /* nll_loss2d: self [N, C, H, W], target [N, H, W] */
} loss_impl_t;

typedef struct loss_args {
  const loss_impl_t* impl;
  const tpu_view_t* x;  /* self */
  const tpu_view_t* t;  /* target (int64 or uint8) */
  const tpu_view_t* w;  /* weight [C], or NULL */
  const tpu_view_t* go; /* backward: grad_output */
  const tpu_view_t* tw; /* backward: total_weight */
  int64_t reduction, ignore_index;
  int64_t classes, samples;
  bool per_sample;      /* reduction none with a batch: one loss per sample */
  int32_t sample_ndim;  /* sample dims of self (and dims of the target) */
  int32_t sample_dims[3]; /* their indices in self */
  int32_t class_dim;
  tpu_view_t shape[2];  /* forward: output, total_weight; backward: grad_input */
} loss_args_t;

/* Parses and validates a node; unsupported dtypes and shapes give
 * UNIMPLEMENTED (targets are checked by the kernels: they read memory). */
tpu_status_t tpu_loss_parse(const tpu_op_def_t* def, const tpu_node_t* node, loss_args_t* args);

/* Offset of element (sample q, class c) in a view shaped like self. */
int64_t tpu_loss_offset(const loss_args_t* args, const tpu_view_t* v, int64_t q, int64_t c);

/* The reference kernel: samples in order, element by element, in double. */
tpu_status_t tpu_loss_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx);

extern const tpu_op_family_t tpu_family_loss;

#endif /* TPU_KERNELS_LOSS_H_ */
