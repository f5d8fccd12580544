/* pointwise_loss_ref.c — the pointwise-loss family's reference kernel: every
 * element of the elementwise shape in logical order, read one at a time,
 * summed in double in that order. */
#include "kernels/loss/pointwise_loss.h"

/* Offset of logical element k in a view of the elementwise shape. */
static int64_t ref_offset(const tpu_view_t* v, int64_t k) {
  int64_t off = 0;
  for (int32_t d = v->ndim - 1; d >= 0; --d) {
    off += (k % v->sizes[d]) * v->strides[d];
    k /= v->sizes[d];
  }
  return off;
}

tpu_status_t tpu_pl_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  (void)ctx;
  pl_args_t a;
  TPU_RETURN_IF_ERROR(tpu_pl_parse(def, node, &a));
  const tpu_view_t* out = &node->outputs[0];
  const int kind = a.impl->kind;
  double sum = 0.0;
  for (int64_t k = 0; k < a.numel; ++k) {
    double x = view_get_f64(&a.x, ref_offset(&a.x, k));
    double t = view_get_f64(&a.t, ref_offset(&a.t, k));
    double w = a.has_w ? view_get_f64(&a.w, ref_offset(&a.w, k)) : 1.0;
    if (kind == PL_BCE && !(x >= 0.0 && x <= 1.0))
      TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT,
                      "all elements of input should be between 0 and 1");
    tpu_dtype_t dt = a.x.dtype;
    bool half = dt == TPU_DTYPE_F16 || dt == TPU_DTYPE_BF16;
    if (a.impl->backward) {
      double g = view_get_f64(&a.g, ref_offset(&a.g, k));
      double v = half ? pl_backward_half(kind, dt, a.param, x, t, w, g, a.norm, a.numel)
                      : pl_backward(kind, a.param, x, t, w, g) * a.norm;
      view_set_f64(out, ref_offset(out, k), v);
    } else {
      double v = half ? pl_forward_half(kind, dt, a.param, x, t, w)
                      : pl_forward(kind, a.param, x, t, w);
      if (a.reduction == PL_NONE) view_set_f64(out, ref_offset(out, k), v);
      else sum += v;
    }
  }
  if (!a.impl->backward && a.reduction != PL_NONE)
    view_set_f64(out, 0, a.reduction == PL_MEAN ? sum / (double)a.numel : sum);
  return TPU_OK;
}
