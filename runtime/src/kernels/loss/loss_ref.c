/* loss_ref.c — the loss family's reference kernel.
 *
 * Samples in order, one element at a time through tpu_convert, the formulas
 * of loss.c evaluated directly in double; targets are validated before
 * anything is written. Used by tests only.
 */
#include "kernels/loss/loss.h"

/* Offset of logical element k of a view. */
static int64_t flat(const tpu_view_t* v, int64_t k) {
  int64_t off = 0;
  for (int32_t d = v->ndim - 1; d >= 0; --d) {
    off += (k % v->sizes[d]) * v->strides[d];
    k /= v->sizes[d];
  }
  return off;
}

tpu_status_t tpu_loss_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  loss_args_t a;
  TPU_RETURN_IF_ERROR(tpu_loss_parse(def, node, &a));
  const tpu_view_t* out = &node->outputs[0];
  for (int64_t q = 0; q < a.samples; ++q) {
    int64_t t = view_get_i64(a.t, flat(a.t, q));
    if (t != a.ignore_index && (t < 0 || t >= a.classes))
      TPU_KERNEL_FAIL(TPU_CODE_INDEX_ERROR, "Target %lld is out of bounds.", (long long)t);
  }
  if (a.impl->backward)
    for (int64_t k = 0; k < tpu_view_numel(out); ++k) view_set_f64(out, flat(out, k), 0.0);
  double loss = 0.0, weight = 0.0;
  for (int64_t q = 0; q < a.samples; ++q) {
    int64_t t = view_get_i64(a.t, flat(a.t, q));
    bool ignored = t == a.ignore_index;
    double wt = ignored ? 0.0 : (a.w ? view_get_f64(a.w, t * a.w->strides[0]) : 1.0);
    if (a.impl->backward) {
      if (ignored) continue;
      double g = a.per_sample ? view_get_f64(a.go, flat(a.go, q)) : view_get_f64(a.go, 0);
      if (a.reduction == LOSS_MEAN) g /= view_get_f64(a.tw, 0);
      view_set_f64(out, tpu_loss_offset(&a, out, q, t), -g * wt);
      continue;
    }
    double l = ignored ? 0.0 : -wt * view_get_f64(a.x, tpu_loss_offset(&a, a.x, q, t));
    if (a.per_sample) view_set_f64(out, flat(out, q), l);
    loss += l;
    weight += wt;
  }
  if (a.impl->backward) return TPU_OK;
  if (!a.per_sample) view_set_f64(out, 0, a.reduction == LOSS_MEAN ? loss / weight : loss);
  view_set_f64(&node->outputs[1], 0, a.per_sample ? 0.0 : weight);
  return TPU_OK;
}
