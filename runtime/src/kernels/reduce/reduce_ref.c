/* reduce_ref.c — the reduction family's reference kernel.
 *
 * Plain loops, independent of reduce.c's normalisation: every output index
 * is walked in logical order, and for each, every reduced element in logical
 * order, reading and writing one element at a time through tpu_convert.
 * Floating work accumulates in double, integer sums and extrema in int64;
 * variance is computed in two passes (mean, then squared deviations), unlike
 * the optimised kernel's Welford updates. Used by tests only.
 */
#include <math.h>
#include <string.h>

#include "kernels/reduce/reduce.h"

/* An element as a bool: nonzero (NaN too) is true. */
static bool load_b(const tpu_view_t* v, int64_t off) { return view_get_f64(v, off) != 0; }

/* The result of one output: a float or integer value and an index. */
typedef struct ref_result {
  double f, mean, hi;
  int64_t i, idx, ihi;
} ref_result_t;

/* Input offsets of the reduced elements of one output, in logical order. */
typedef struct ref_walk {
  const reduce_args_t* a;
  int64_t base;
} ref_walk_t;

static int64_t walk_offset(const ref_walk_t* w, int64_t r) {
  const tpu_view_t* in = w->a->in;
  int64_t off = w->base;
  for (int32_t d = in->ndim - 1; d >= 0; --d) {
    if (!w->a->reduced[d]) continue;
    off += (r % in->sizes[d]) * in->strides[d];
    r /= in->sizes[d];
  }
  return off;
}

static ref_result_t reduce_one(const ref_walk_t* w, tpu_compute_type_t dom) {
  const reduce_args_t* a = w->a;
  const tpu_view_t* in = a->in;
  ref_result_t r = {0.0, 0.0, 0.0, 0, -1, 0};
  int64_t n = a->n;
  switch (a->impl->acc) {
    case RACC_SUM:
    case RACC_PROD: {
      bool sum = a->impl->acc == RACC_SUM;
      double f = sum ? 0.0 : 1.0;
      uint64_t u = sum ? 0u : 1u;
      for (int64_t k = 0; k < n; ++k) {
        int64_t off = walk_offset(w, k);
        if (dom == TPU_COMPUTE_F64)
          f = sum ? f + view_get_f64(in, off) : f * view_get_f64(in, off);
        else
          u = sum ? u + (uint64_t)view_get_i64(in, off) : u * (uint64_t)view_get_i64(in, off);
      }
      r.f = f;
      r.i = (int64_t)u;
      break;
    }
    case RACC_MAX:
    case RACC_MIN: {
      int sign = a->impl->acc == RACC_MAX ? 1 : -1;
      for (int64_t k = 0; k < n; ++k) {
        int64_t off = walk_offset(w, k);
        if (dom == TPU_COMPUTE_F64) {
          double x = view_get_f64(in, off);
          if (r.idx >= 0 && isnan(r.f)) break; /* the first NaN is the result */
          if (r.idx < 0 || isnan(x) || sign * (x - r.f) > 0) r.f = x, r.idx = k;
        } else {
          int64_t x = view_get_i64(in, off);
          if (r.idx < 0 || (sign > 0 ? x > r.i : x < r.i)) r.i = x, r.idx = k;
        }
      }
      break;
    }
    case RACC_ALL:
    case RACC_ANY: {
      bool all = a->impl->acc == RACC_ALL, v = all;
      for (int64_t k = 0; k < n; ++k) v = all ? (v && load_b(in, walk_offset(w, k)))
                                             : (v || load_b(in, walk_offset(w, k)));
      r.i = v;
      break;
    }
    case RACC_NANSUM:
      for (int64_t k = 0; k < n; ++k) {
        int64_t off = walk_offset(w, k);
        if (dom == TPU_COMPUTE_F64) {
          double x = view_get_f64(in, off);
          if (!isnan(x)) r.f += x;
        } else {
          r.i = (int64_t)((uint64_t)r.i + (uint64_t)view_get_i64(in, off));
        }
      }
      break;
    case RACC_NONZERO:
      for (int64_t k = 0; k < n; ++k) r.i += load_b(in, walk_offset(w, k));
      break;
    case RACC_NORM: {
      double p = a->ord, acc = p == -INFINITY ? INFINITY : 0.0;
      bool nan = false;
      for (int64_t k = 0; k < n; ++k) {
        double x = fabs(view_get_f64(in, walk_offset(w, k)));
        nan |= isnan(x);
        if (p == 0.0) acc += x != 0.0;
        else if (p == INFINITY) acc = x > acc ? x : acc;
        else if (p == -INFINITY) acc = x < acc ? x : acc;
        else acc += pow(x, p);
      }
      if (nan) acc = NAN;
      r.f = (p == 0.0 || isinf(p)) ? acc : pow(acc, 1.0 / p);
      break;
    }
    case RACC_LSE: {
      double m = -INFINITY, sum = 0.0;
      for (int64_t k = 0; k < n; ++k) {
        double x = view_get_f64(in, walk_offset(w, k));
        if (x > m) m = x;
      }
      if (!isfinite(m)) m = 0.0;
      for (int64_t k = 0; k < n; ++k) sum += exp(view_get_f64(in, walk_offset(w, k)) - m);
      r.f = log(sum) + m;
      break;
    }
    case RACC_XOR:
      for (int64_t k = 0; k < n; ++k) {
        int64_t off = walk_offset(w, k);
        uint64_t bits;
        if (dom == TPU_COMPUTE_F64) {
          double x = view_get_f64(in, off);
          memcpy(&bits, &x, sizeof(bits));
        } else {
          bits = (uint64_t)view_get_i64(in, off);
        }
        r.i = (int64_t)((uint64_t)r.i ^ bits);
      }
      break;
    case RACC_MINMAX:
      for (int64_t k = 0; k < n; ++k) {
        int64_t off = walk_offset(w, k);
        if (dom == TPU_COMPUTE_F64) {
          double x = view_get_f64(in, off);
          if (k == 0 || isnan(x) || (!isnan(r.f) && x < r.f)) r.f = x;
          if (k == 0 || isnan(x) || (!isnan(r.hi) && x > r.hi)) r.hi = x;
        } else {
          int64_t x = view_get_i64(in, off);
          if (k == 0 || x < r.i) r.i = x;
          if (k == 0 || x > r.ihi) r.ihi = x;
        }
      }
      break;
    default: {
      double sum = 0.0, m2 = 0.0;
      for (int64_t k = 0; k < n; ++k) sum += view_get_f64(in, walk_offset(w, k));
      double mean = sum / (double)n;
      for (int64_t k = 0; k < n; ++k) {
        double d = view_get_f64(in, walk_offset(w, k)) - mean;
        m2 += d * d;
      }
      double div = (double)n - a->correction;
      r.f = m2 / (div > 0.0 ? div : 0.0);
      r.mean = mean;
      break;
    }
  }
  return r;
}

tpu_status_t tpu_reduce_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx) {
  reduce_args_t a;
  TPU_RETURN_IF_ERROR(tpu_reduce_parse(def, node, &a));
  TPU_RETURN_IF_ERROR(tpu_reduce_check_outputs(&a, node));
  const tpu_view_t* in = a.in;
  const tpu_view_t* out0 = &node->outputs[0];
  const tpu_view_t* out1 = a.num_outputs > 1 ? &node->outputs[1] : NULL;
  tpu_compute_type_t dom = tpu_reduce_domain(&a, out0->dtype);
  int64_t m = tpu_view_numel(&a.shape[0]);
  for (int64_t o = 0; o < m; ++o) {
    /* Unravel o over the output shape; map its dims back to the input's. */
    ref_walk_t w = {&a, 0};
    int64_t off0 = 0, off1 = 0, rem = o;
    int32_t od = a.shape[0].ndim - 1;
    for (int32_t d = in->ndim - 1; d >= 0; --d) {
      if (a.reduced[d] && !a.keepdim) continue;
      int64_t i = rem % a.shape[0].sizes[od];
      rem /= a.shape[0].sizes[od];
      if (!a.reduced[d]) w.base += i * in->strides[d];
      off0 += i * out0->strides[od];
      if (out1) off1 += i * out1->strides[od];
      od--;
    }
    ref_result_t r = reduce_one(&w, dom);
    switch (a.impl->out) {
      case ROUT_VALUE:
      case ROUT_VALUE_INDEX:
        if (dom == TPU_COMPUTE_F64)
          view_set_f64(out0, off0, r.f);
        else
          view_set_i64(out0, off0, r.i);
        if (out1) view_set_i64(out1, off1, r.idx);
        break;
      case ROUT_INDEX:
        view_set_i64(out0, off0, r.idx);
        break;
      case ROUT_BITS: {
        int64_t bits = r.i; /* int64 -> uint64 keeps the bits */
        tpu_convert(view_at(out0, off0), out0->dtype, 1, &bits, TPU_DTYPE_I64, 1, 1);
        break;
      }
      case ROUT_MEAN:
        view_set_f64(out0, off0, r.f / (double)a.n);
        break;
      case ROUT_VAR:
      case ROUT_VAR_MEAN:
        view_set_f64(out0, off0, r.f);
        if (out1) view_set_f64(out1, off1, r.mean);
        break;
      case ROUT_STD:
      case ROUT_STD_MEAN:
        view_set_f64(out0, off0, sqrt(r.f));
        if (out1) view_set_f64(out1, off1, r.mean);
        break;
      case ROUT_NORM:
      case ROUT_LSE:
        view_set_f64(out0, off0, r.f);
        break;
      case ROUT_MINMAX:
        if (dom == TPU_COMPUTE_F64) {
          view_set_f64(out0, off0, r.f);
          view_set_f64(out1, off1, r.hi);
        } else {
          view_set_i64(out0, off0, r.i);
          view_set_i64(out1, off1, r.ihi);
        }
        break;
    }
  }
  return TPU_OK;
}
