/* optim.h — the optim family: PyTorch's fused Adam and AdamW steps
 * (torch.optim.Adam / AdamW with fused=True, the default optimizer of
 * Hugging Face's Trainer).
 *
 * ATen's _fused_adam_ / _fused_adamw_ take parallel lists (params, grads,
 * exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps); the rows are
 * TPU_OP_FOREACH, so each node is one parameter's step:
 *
 *   inputs  self!, grads!, exp_avgs!, exp_avg_sqs!, max_exp_avg_sqs! (absent
 *           unless amsgrad), state_steps (the step count, already advanced),
 *           lr (a number or a one-element tensor), grad_scale, found_inf
 *           (optional one-element tensors, from GradScaler)
 *   attrs   beta1, beta2, weight_decay, eps, amsgrad, maximize
 *
 * With found_inf == 1 nothing is written. Otherwise, per element, in the
 * compute type (float32 for float32 and the half types, float64 for float64):
 *
 *   g = grad / grad_scale            (stored back into grad when scaled)
 *   g = -g                           (maximize)
 *   Adam:  g = g + weight_decay * p  AdamW: p = p * (1 - lr * weight_decay)
 *   m = m + (1 - beta1) * (g - m)    (exp_avg.lerp_(g, 1 - beta1))
 *   v = beta2 * v + (1 - beta2) * g * g
 *   vmax = max(vmax, v)              (amsgrad; the denominator then reads vmax)
 *   p = p - lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
 *
 * with the bias corrections in double, as PyTorch computes them. Operands
 * must share one floating dtype and be contiguous and disjoint; anything
 * else falls back to the CPU kernel, which raises PyTorch's own errors.
 */
#ifndef TPU_KERNELS_OPTIM_H_
#define TPU_KERNELS_OPTIM_H_

#include "kernels/common/kernel_util.h"

/* Runs the step of a node of either row with a plain double-precision loop
 * (rounded to the operands' dtype on store): the reference of the table
 * test. Same arguments and results as the row's kernel. */
tpu_status_t tpu_adam_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx);

/* What a node asks for, parsed (shared by the kernel and the reference).
 * Pointers are borrowed from the node's views. */
typedef struct adam_args {
  tpu_dtype_t dtype;
  int64_t numel;
  void *param, *grad, *exp_avg, *exp_avg_sq, *max_exp_avg_sq; /* max: NULL unless amsgrad */
  double lr, beta1, beta2, weight_decay, eps;
  double step_size;   /* lr / (1 - beta1^step) */
  double bc2_sqrt;    /* sqrt(1 - beta2^step) */
  double grad_scale;  /* meaningful when scaled */
  bool scaled, skip;  /* skip: found_inf == 1, nothing to write */
  bool amsgrad, maximize, adamw;
} adam_args_t;

/* Parses and checks a node (UNIMPLEMENTED for what the kernel does not run);
 * reads the step, lr, grad_scale and found_inf values from their views. */
tpu_status_t tpu_adam_parse(const tpu_op_def_t* def, const tpu_node_t* node, adam_args_t* out);

#endif /* TPU_KERNELS_OPTIM_H_ */
