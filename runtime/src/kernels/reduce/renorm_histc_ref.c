/* renorm_histc_ref.c — the renorm_histc family's reference: element by
 * element in logical order, double accumulation. Used by tests only. */
#include <math.h>

#include "kernels/reduce/renorm_histc.h"

static int64_t ref_offset(const tpu_view_t* v, int64_t k, int64_t* coord) {
  int64_t off = 0;
  for (int32_t d = v->ndim - 1; d >= 0; --d) {
    coord[d] = k % v->sizes[d];
    off += coord[d] * v->strides[d];
    k /= v->sizes[d];
  }
  return off;
}

tpu_status_t tpu_renorm_histc_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                        tpu_exec_ctx_t* ctx) {
  (void)ctx;
  const tpu_view_t* out = &node->outputs[0];
  int64_t coord[TPU_MAX_DIMS], oc[TPU_MAX_DIMS];
  if (def->kernel && tpu_spec_index(def->attrs, "maxnorm") >= 0) {
    renorm_args_t a;
    TPU_RETURN_IF_ERROR(tpu_renorm_parse(def, node, &a));
    int64_t n = tpu_view_numel(a.in);
    for (int64_t i = 0; i < a.in->sizes[a.dim]; ++i) {
      double acc = 0.0;
      bool nan = false;
      for (int64_t k = 0; k < n; ++k) {
        int64_t off = ref_offset(a.in, k, coord);
        if (coord[a.dim] != i) continue;
        double x = fabs(view_get_f64(a.in, off));
        nan |= isnan(x);
        acc = isinf(a.p) ? (x > acc ? x : acc) : acc + pow(x, a.p);
      }
      double norm = nan ? NAN : isinf(a.p) ? acc : pow(acc, 1.0 / a.p);
      double f = tpu_renorm_factor(&a, norm);
      for (int64_t k = 0; k < n; ++k) {
        int64_t off = ref_offset(a.in, k, coord);
        if (coord[a.dim] != i) continue;
        view_set_f64(out, ref_offset(out, k, oc), view_get_f64(a.in, off) * f);
      }
    }
    return TPU_OK;
  }
  histc_args_t a;
  TPU_RETURN_IF_ERROR(tpu_histc_parse(def, node, &a));
  double lo, hi;
  TPU_RETURN_IF_ERROR(tpu_histc_edges(&a, &lo, &hi));
  for (int64_t b = 0; b < a.bins; ++b) view_set_f64(out, b * out->strides[0], 0.0);
  for (int64_t k = 0; k < tpu_view_numel(a.in); ++k) {
    int64_t b = tpu_histc_bin(&a, view_get_f64(a.in, ref_offset(a.in, k, coord)), lo, hi);
    if (b >= 0)
      view_set_f64(out, b * out->strides[0], view_get_f64(out, b * out->strides[0]) + 1.0);
  }
  return TPU_OK;
}
