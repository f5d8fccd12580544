/* optim_ref.c — the reference of the optim family: the formula of optim.h
 * one element at a time in double, each result rounded once to the
 * operands' dtype as it is stored. */
#include <math.h>

#include "kernels/optim/optim.h"

static double load(const adam_args_t* a, const void* base, int64_t i) {
  double x;
  tpu_convert(&x, TPU_DTYPE_F64, 1, (const char*)base + (size_t)i * tpu_dtype_size(a->dtype),
              a->dtype, 1, 1);
  return x;
}

/* Stores x and returns the stored value, read back. */
static double store(const adam_args_t* a, void* base, int64_t i, double x) {
  void* at = (char*)base + (size_t)i * tpu_dtype_size(a->dtype);
  tpu_convert(at, a->dtype, 1, &x, TPU_DTYPE_F64, 1, 1);
  return load(a, base, i);
}

tpu_status_t tpu_adam_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  (void)ctx;
  adam_args_t a;
  TPU_RETURN_IF_ERROR(tpu_adam_parse(def, node, &a));
  if (a.skip) return TPU_OK;
  for (int64_t i = 0; i < a.numel; ++i) {
    double g = load(&a, a.grad, i), p = load(&a, a.param, i);
    if (a.scaled) g = store(&a, a.grad, i, g / a.grad_scale);
    if (a.maximize) g = -g;
    if (a.weight_decay != 0) {
      if (a.adamw) p *= 1 - a.lr * a.weight_decay;
      else g += a.weight_decay * p;
    }
    double m = load(&a, a.exp_avg, i), v = load(&a, a.exp_avg_sq, i);
    m = store(&a, a.exp_avg, i, m + (1 - a.beta1) * (g - m));
    v = store(&a, a.exp_avg_sq, i, a.beta2 * v + (1 - a.beta2) * g * g);
    if (a.amsgrad) v = store(&a, a.max_exp_avg_sq, i, fmax(load(&a, a.max_exp_avg_sq, i), v));
    store(&a, a.param, i, p - a.step_size * m / (sqrt(v) / a.bc2_sqrt + a.eps));
  }
  return TPU_OK;
}
