/* loss_ref.c — the loss family's reference kernel.
 *
 * Samples in order, one element at a time through tpu_convert, the formulas
 * of loss.c evaluated directly in double; targets are validated before
 * anything is written. Used by tests only.
 */
#include "kernels/loss.h"

static double load(const tpu_view_t* v, int64_t off) {
  double x;
  tpu_convert(&x, TPU_DTYPE_F64, 1, ku_at(v, off), v->dtype, 1, 1);
  return x;
}

static void store(const tpu_view_t* v, int64_t off, double x) {
  tpu_convert(ku_at(v, off), v->dtype, 1, &x, TPU_DTYPE_F64, 1, 1);
}

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
    int64_t t;
    tpu_convert(&t, TPU_DTYPE_I64, 1, ku_at(a.t, flat(a.t, q)), a.t->dtype, 1, 1);
    if (t != a.ignore_index && (t < 0 || t >= a.classes))
      TPU_KERNEL_FAIL(TPU_CODE_INDEX_ERROR, "Target %lld is out of bounds.", (long long)t);
  }
  if (a.impl->backward)
    for (int64_t k = 0; k < tpu_view_numel(out); ++k) store(out, flat(out, k), 0.0);
  double loss = 0.0, weight = 0.0;
  for (int64_t q = 0; q < a.samples; ++q) {
    int64_t t;
    tpu_convert(&t, TPU_DTYPE_I64, 1, ku_at(a.t, flat(a.t, q)), a.t->dtype, 1, 1);
    bool ignored = t == a.ignore_index;
    double wt = ignored ? 0.0 : (a.w ? load(a.w, t * a.w->strides[0]) : 1.0);
    if (a.impl->backward) {
      if (ignored) continue;
      double g = a.per_sample ? load(a.go, flat(a.go, q)) : load(a.go, 0);
      if (a.reduction == LOSS_MEAN) g /= load(a.tw, 0);
      store(out, tpu_loss_offset(&a, out, q, t), -g * wt);
      continue;
    }
    double l = ignored ? 0.0 : -wt * load(a.x, tpu_loss_offset(&a, a.x, q, t));
    if (a.per_sample) store(out, flat(out, q), l);
    loss += l;
    weight += wt;
  }
  if (a.impl->backward) return TPU_OK;
  if (!a.per_sample) store(out, 0, a.reduction == LOSS_MEAN ? loss / weight : loss);
  store(&node->outputs[1], 0, a.per_sample ? 0.0 : weight);
  return TPU_OK;
}
