/* softmax_ref.c — the softmax family's reference kernel.
 *
 * One row at a time in logical order, every element read and written through
 * tpu_convert, straight from the formulas (max-shifted, in double). Used by
 * tests only.
 */
#include <math.h>

#include "kernels/nn/softmax.h"

/* Offset in view v of element l along dim of row r (r indexes the other dims). */
static int64_t offset(const tpu_view_t* v, int32_t dim, int64_t r, int64_t l) {
  int64_t off = 0;
  for (int32_t d = v->ndim - 1; d >= 0; --d) {
    if (d == dim) {
      off += l * v->strides[d];
      continue;
    }
    off += (r % v->sizes[d]) * v->strides[d];
    r /= v->sizes[d];
  }
  return off;
}

tpu_status_t tpu_softmax_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                   tpu_exec_ctx_t* ctx) {
  softmax_args_t a;
  TPU_RETURN_IF_ERROR(tpu_softmax_parse(def, node, &a));
  const tpu_view_t* out = &node->outputs[0];
  if (node->num_outputs < 1 || !views_same_shape(out, &a.shape))
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output has the wrong shape");
  int64_t numel = tpu_view_numel(a.x);
  int64_t len = a.x->ndim > 0 ? a.x->sizes[a.dim] : 1;
  if (numel == 0) return TPU_OK;
  for (int64_t r = 0; r < numel / len; ++r) {
    double m = -INFINITY, s = 0.0;
    for (int64_t l = 0; l < len; ++l) {
      double v = a.impl->backward
                     ? view_get_f64(a.g, offset(a.g, a.dim, r, l)) *
                           (a.impl->log ? 1.0 : view_get_f64(a.x, offset(a.x, a.dim, r, l)))
                     : view_get_f64(a.x, offset(a.x, a.dim, r, l));
      if (a.impl->backward) {
        s += v;
      } else if (isnan(v) || isnan(m) || v > m) {
        m = isnan(m) ? m : v;
      }
    }
    if (!a.impl->backward)
      for (int64_t l = 0; l < len; ++l) s += exp(view_get_f64(a.x, offset(a.x, a.dim, r, l)) - m);
    for (int64_t l = 0; l < len; ++l) {
      double x = view_get_f64(a.x, offset(a.x, a.dim, r, l)), y;
      if (a.impl->backward) {
        double g = view_get_f64(a.g, offset(a.g, a.dim, r, l));
        y = a.impl->log ? g - exp(x) * s : x * (g - s);
      } else {
        y = a.impl->log ? x - m - log(s) : exp(x - m) / s;
      }
      view_set_f64(out, offset(out, a.dim, r, l), y);
    }
  }
  return TPU_OK;
}
