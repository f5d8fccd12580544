/* distance_ref.c — the distance family's reference kernel: every output
 * element on its own, read through the views' strides, double accumulation,
 * the gradient summed term by term. Used by tests only. */
#include <math.h>
#include <string.h>

#include "kernels/reduce/distance.h"

/* Offset of element (b, row, col) of a [..., rows, cols] view whose batch dims
 * broadcast to a->bsizes. */
static int64_t ref_off(const dist_args_t* a, const tpu_view_t* v, int64_t b, int64_t row,
                       int64_t col) {
  int64_t off = row * v->strides[v->ndim - 2] + col * v->strides[v->ndim - 1];
  for (int32_t d = a->nbatch - 1; d >= 0; --d) {
    int64_t i = b % a->bsizes[d];
    b /= a->bsizes[d];
    int32_t vd = d - (a->nbatch - (v->ndim - 2));
    if (vd >= 0 && v->sizes[vd] > 1) off += i * v->strides[vd];
  }
  return off;
}

static double ref_dist(const dist_args_t* a, int64_t b, int64_t i, int64_t j) {
  double p = a->p, s = 0.0;
  for (int64_t k = 0; k < a->m; ++k) {
    double v = fabs(view_get_f64(a->x1, ref_off(a, a->x1, b, i, k)) -
                    view_get_f64(a->x2, ref_off(a, a->x2, b, j, k)));
    if (p == 0.0) s += v != 0.0;
    else if (isinf(p)) s = v > s ? v : s;
    else s += pow(v, p);
  }
  return (p == 0.0 || isinf(p)) ? s : pow(s, 1.0 / p);
}

/* d(dist)/d(x1) term of one coordinate difference v, times the gradient g. */
static double ref_term(double p, double v, double g, double dist) {
  double sg = (v > 0) - (v < 0);
  if (p == 0.0) return 0.0;
  if (p == 1.0) return g * sg;
  if (isinf(p)) return g * sg * (fabs(v) == dist);
  if (dist == 0.0) return 0.0;
  if (p < 2.0 && v == 0.0 && p < 1.0) return 0.0;
  return sg * pow(fabs(v), p - 1.0) * g / pow(dist, p - 1.0);
}

/* Element k of a view in logical order. */
static double ref_flat(const tpu_view_t* v, int64_t k) {
  int64_t off = 0;
  for (int32_t d = v->ndim - 1; d >= 0; --d) {
    off += (k % v->sizes[d]) * v->strides[d];
    k /= v->sizes[d];
  }
  return view_get_f64(v, off);
}

tpu_status_t tpu_distance_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                    tpu_exec_ctx_t* ctx) {
  (void)ctx;
  dist_args_t a;
  TPU_RETURN_IF_ERROR(tpu_dist_parse(def, node, &a));
  const tpu_view_t* out = &node->outputs[0];
  int64_t n = a.r1;
  switch (a.kind) {
    case DIST_CDIST:
      for (int64_t b = 0; b < a.batch; ++b)
        for (int64_t i = 0; i < a.r1; ++i)
          for (int64_t j = 0; j < a.r2; ++j)
            view_set_f64(out, ref_off(&a, out, b, i, j), ref_dist(&a, b, i, j));
      break;
    case DIST_PDIST:
      for (int64_t i = 0, k = 0; i < n; ++i)
        for (int64_t j = i + 1; j < n; ++j, ++k)
          view_set_f64(out, k * out->strides[0], ref_dist(&a, 0, i, j));
      break;
    case DIST_CDIST_BACKWARD:
      for (int64_t b = 0; b < a.batch; ++b)
        for (int64_t i = 0; i < a.r1; ++i)
          for (int64_t k = 0; k < a.m; ++k) {
            double s = 0.0, x = view_get_f64(a.x1, ref_off(&a, a.x1, b, i, k));
            for (int64_t j = 0; j < a.r2; ++j) {
              int64_t e = (b * a.r1 + i) * a.r2 + j;
              double v = x - view_get_f64(a.x2, ref_off(&a, a.x2, b, j, k));
              s += ref_term(a.p, v, ref_flat(a.grad, e), ref_flat(a.dist, e));
            }
            view_set_f64(out, ref_off(&a, out, b, i, k), s);
          }
      break;
    case DIST_PDIST_BACKWARD:
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < a.m; ++k) {
          double s = 0.0, x = view_get_f64(a.x1, ref_off(&a, a.x1, 0, i, k));
          for (int64_t j = 0; j < n; ++j) {
            if (j == i) continue;
            int64_t lo = i < j ? i : j, hi = i < j ? j : i;
            int64_t e = lo * n - lo * (lo + 1) / 2 + (hi - lo - 1);
            double v = x - view_get_f64(a.x1, ref_off(&a, a.x1, 0, j, k));
            s += ref_term(a.p, v, ref_flat(a.grad, e), ref_flat(a.dist, e));
          }
          view_set_f64(out, ref_off(&a, out, 0, i, k), s);
        }
      break;
  }
  return TPU_OK;
}
