/* norm_ref.c — the normalisation family's reference kernel.
 *
 * Rows in logical order, each element read and written on its own through
 * tpu_convert, the formulas of norm.c evaluated directly in double (two-pass
 * variance; grad_weight/grad_bias summed row by row). Used by tests only.
 */
#include <math.h>

#include "kernels/norm/norm.h"

/* Element (r, i) of a view whose dims split at `axis` into M rows of N;
 * views shaped like mean/rstd (trailing 1s) use i = 0, weight-shaped views
 * (only the trailing dims) use r = 0. */
static int64_t offset(const tpu_view_t* v, int32_t axis, int64_t r, int64_t i) {
  int64_t off = 0;
  for (int32_t d = v->ndim - 1; d >= 0; --d) {
    int64_t* k = d >= axis ? &i : &r;
    off += (*k % v->sizes[d]) * v->strides[d];
    *k /= v->sizes[d];
  }
  return off;
}

static double load(const tpu_view_t* v, int32_t axis, int64_t r, int64_t i) {
  return view_get_f64(v, offset(v, axis, r, i));
}

static void store(const tpu_view_t* v, int32_t axis, int64_t r, int64_t i, double x) {
  view_set_f64(v, offset(v, axis, r, i), x);
}

tpu_status_t tpu_norm_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  norm_args_t a;
  TPU_RETURN_IF_ERROR(tpu_norm_parse(def, node, &a));
  const tpu_view_t* outs[3];
  for (int i = 0; i < 3; ++i) {
    int j = norm_slot(a.impl, i);
    outs[i] = j >= 0 ? &node->outputs[j] : NULL;
  }
  bool rms = a.impl->rms;
  int32_t ax = a.axis, wax = 0; /* weight-shaped views have only the row dims */
  int64_t m = a.m, n = a.n;
  if (!a.impl->backward) {
    for (int64_t r = 0; r < m; ++r) {
      double mean = 0.0, var = 0.0;
      for (int64_t i = 0; !rms && i < n; ++i) mean += load(a.x, ax, r, i);
      mean /= (double)n;
      for (int64_t i = 0; i < n; ++i) var += pow(load(a.x, ax, r, i) - mean, 2.0);
      double rstd = 1.0 / sqrt(var / (double)n + a.eps);
      for (int64_t i = 0; i < n; ++i) {
        double y = (load(a.x, ax, r, i) - mean) * rstd;
        if (a.w) y = y * load(a.w, wax, 0, i);
        if (a.b) y = y + load(a.b, wax, 0, i);
        store(outs[0], ax, r, i, y);
      }
      if (outs[1]) store(outs[1], ax, r, 0, mean);
      store(outs[2], ax, r, 0, rstd);
    }
    return TPU_OK;
  }
  for (int64_t r = 0; a.mask[0] && r < m; ++r) {
    double mean = rms ? 0.0 : load(a.mean, ax, r, 0), rstd = load(a.rstd, ax, r, 0), sg = 0, sgx = 0;
    for (int64_t i = 0; i < n; ++i) {
      double gw = load(a.g, ax, r, i) * (a.w ? load(a.w, wax, 0, i) : 1.0);
      sg += gw;
      sgx += gw * (load(a.x, ax, r, i) - mean) * rstd;
    }
    for (int64_t i = 0; i < n; ++i) {
      double gw = load(a.g, ax, r, i) * (a.w ? load(a.w, wax, 0, i) : 1.0);
      double xhat = (load(a.x, ax, r, i) - mean) * rstd;
      store(outs[0], ax, r, i, rstd * (gw - (rms ? 0.0 : sg / (double)n) - xhat * sgx / (double)n));
    }
  }
  for (int64_t i = 0; (a.mask[1] || a.mask[2]) && i < n; ++i) {
    double dw = 0.0, db = 0.0;
    for (int64_t r = 0; r < m; ++r) {
      double g = load(a.g, ax, r, i);
      dw += g * (load(a.x, ax, r, i) - (rms ? 0.0 : load(a.mean, ax, r, 0))) *
            load(a.rstd, ax, r, 0);
      db += g;
    }
    if (a.mask[1]) store(outs[1], wax, 0, i, dw);
    if (a.mask[2]) store(outs[2], wax, 0, i, db);
  }
  return TPU_OK;
}
