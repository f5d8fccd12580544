/* batch_norm_ref.c — reference kernels of batch norm and group norm: every
 * element read and written on its own, in logical order, the textbook
 * formulas in double with two-pass statistics. Used by tests only.
 */
#include <math.h>

#include "kernels/norm/batch_norm.h"

static double get(const tpu_view_t* v, int64_t n, int64_t c, int64_t i) {
  return view_get_f64(v, bn_offset(v, n, c, i));
}
static double vec(const tpu_view_t* v, int64_t c, double dflt) {
  return v ? view_get_f64(v, c * v->strides[0]) : dflt;
}
static void set_vec(const tpu_view_t* v, int64_t c, double x) {
  view_set_f64(v, c * v->strides[0], x);
}

tpu_status_t tpu_bn_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  bn_args_t a;
  TPU_RETURN_IF_ERROR(tpu_bn_parse(def, node, &a));
  const tpu_view_t* out = node->outputs;
  double cnt = (double)a.count;
  for (int64_t c = 0; c < a.c; ++c) {
    double mean = 0.0, var = 0.0, invstd;
    if (a.impl->backward) {
      mean = a.training ? vec(a.sm, c, 0) : vec(a.rm, c, 0);
      invstd = a.training ? vec(a.si, c, 0) : 1.0 / sqrt(vec(a.rv, c, 0) + a.eps);
      double w = vec(a.w, c, 1.0), sg = 0.0, dot = 0.0;
      for (int64_t n = 0; n < a.n; ++n)
        for (int64_t i = 0; i < a.s; ++i) {
          double g = get(a.g, n, c, i);
          sg += g;
          dot += g * (get(a.x, n, c, i) - mean);
        }
      if (a.mask[1]) set_vec(&out[1], c, dot * invstd);
      if (a.mask[2]) set_vec(&out[2], c, sg);
      for (int64_t n = 0; a.mask[0] && n < a.n; ++n)
        for (int64_t i = 0; i < a.s; ++i) {
          double g = get(a.g, n, c, i), gi;
          if (a.training) {
            double xm = get(a.x, n, c, i) - mean;
            gi = (g - sg / cnt - xm * invstd * invstd * dot / cnt) * invstd * w;
          } else {
            gi = g * invstd * w;
          }
          view_set_f64(&out[0], bn_offset(&out[0], n, c, i), gi);
        }
      continue;
    }
    if (a.training) {
      for (int64_t n = 0; n < a.n; ++n)
        for (int64_t i = 0; i < a.s; ++i) mean += get(a.x, n, c, i);
      mean /= cnt;
      for (int64_t n = 0; n < a.n; ++n)
        for (int64_t i = 0; i < a.s; ++i) var += pow(get(a.x, n, c, i) - mean, 2.0);
      invstd = 1.0 / sqrt(var / cnt + a.eps);
      set_vec(&out[1], c, mean);
      set_vec(&out[2], c, invstd);
      if (a.rm) set_vec(a.rm, c, a.momentum * mean + (1 - a.momentum) * vec(a.rm, c, 0));
      if (a.rv)
        set_vec(a.rv, c, a.momentum * var / (cnt - 1) + (1 - a.momentum) * vec(a.rv, c, 0));
    } else {
      mean = vec(a.rm, c, 0);
      invstd = 1.0 / sqrt(vec(a.rv, c, 0) + a.eps);
    }
    for (int64_t n = 0; n < a.n; ++n)
      for (int64_t i = 0; i < a.s; ++i) {
        double y = (get(a.x, n, c, i) - mean) * invstd * vec(a.w, c, 1.0) + vec(a.b, c, 0.0);
        view_set_f64(&out[0], bn_offset(&out[0], n, c, i), y);
      }
  }
  return TPU_OK;
}

/* Flat element k of a view. */
static int64_t flat(const tpu_view_t* v, int64_t k) {
  int64_t off = 0;
  for (int32_t d = v->ndim - 1; d >= 0; --d) {
    off += (k % v->sizes[d]) * v->strides[d];
    k /= v->sizes[d];
  }
  return off;
}

tpu_status_t tpu_gn_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  bn_args_t a;
  TPU_RETURN_IF_ERROR(tpu_gn_parse(def, node, &a));
  const tpu_view_t* out = node->outputs;
  int64_t d = a.c / a.groups;
  double m = (double)(d * a.s);
  for (int64_t c = 0; a.impl->backward && c < a.c; ++c) {
    if (a.mask[1]) set_vec(&out[1], c, 0.0);
    if (a.mask[2]) set_vec(&out[2], c, 0.0);
  }
  for (int64_t n = 0; n < a.n; ++n)
    for (int64_t grp = 0; grp < a.groups; ++grp) {
      int64_t k = n * a.groups + grp;
      if (!a.impl->backward) {
        double mean = 0.0, var = 0.0;
        for (int64_t c = grp * d; c < (grp + 1) * d; ++c)
          for (int64_t i = 0; i < a.s; ++i) mean += get(a.x, n, c, i);
        mean /= m;
        for (int64_t c = grp * d; c < (grp + 1) * d; ++c)
          for (int64_t i = 0; i < a.s; ++i) var += pow(get(a.x, n, c, i) - mean, 2.0);
        double rstd = 1.0 / sqrt(var / m + a.eps);
        for (int64_t c = grp * d; c < (grp + 1) * d; ++c)
          for (int64_t i = 0; i < a.s; ++i) {
            double y = (get(a.x, n, c, i) - mean) * rstd * vec(a.w, c, 1.0) + vec(a.b, c, 0.0);
            view_set_f64(&out[0], bn_offset(&out[0], n, c, i), y);
          }
        view_set_f64(&out[1], flat(&out[1], k), mean);
        view_set_f64(&out[2], flat(&out[2], k), rstd);
        continue;
      }
      double mean = view_get_f64(a.sm, flat(a.sm, k)), rstd = view_get_f64(a.si, flat(a.si, k));
      double sg = 0.0, sgx = 0.0;
      for (int64_t c = grp * d; c < (grp + 1) * d; ++c)
        for (int64_t i = 0; i < a.s; ++i) {
          double g = get(a.g, n, c, i), xhat = (get(a.x, n, c, i) - mean) * rstd;
          sg += g * vec(a.w, c, 1.0);
          sgx += g * vec(a.w, c, 1.0) * xhat;
          if (a.mask[1]) set_vec(&out[1], c, vec(&out[1], c, 0) + g * xhat);
          if (a.mask[2]) set_vec(&out[2], c, vec(&out[2], c, 0) + g);
        }
      for (int64_t c = grp * d; a.mask[0] && c < (grp + 1) * d; ++c)
        for (int64_t i = 0; i < a.s; ++i) {
          double gw = get(a.g, n, c, i) * vec(a.w, c, 1.0);
          double xhat = (get(a.x, n, c, i) - mean) * rstd;
          view_set_f64(&out[0], bn_offset(&out[0], n, c, i),
                       rstd * (gw - sg / m - xhat * sgx / m));
        }
    }
  return TPU_OK;
}
