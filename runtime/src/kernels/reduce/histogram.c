/* histogram.c — the histogram family: torch.histogram (1-D) and torch.histogramdd.
 *
 *   histogram.bin_ct(self, bins, range=None, weight=None, density)   -> (hist, bin_edges)
 *   histogram.bins_tensor(self, bins, weight=None, density)          -> (hist, bin_edges)
 *   histogramdd_bin_edges(self, bins, dim, range)                    -> bin_edges
 *   _histogramdd_from_bin_cts(self, bins, range, weight, density)    -> hist
 *   _histogramdd_from_bin_tensors(self, bins[], weight, density)     -> hist
 *
 * histogramdd views self as (M, N): M samples of N coordinates (N = its last size);
 * weight has self's sizes but the last. Its first step, ATen's _histogramdd_bin_edges,
 * returns one edges tensor per dim, which a row's fixed outputs cannot express: the
 * bridge (bridge/histogram.cpp) submits one histogramdd_bin_edges node per dim, with
 * `bins` that dim's count and `range` that dim's two outer edges (none: the column's
 * min and max). The counting rows recompute the edges as ATen does and count each
 * sample into the bin of every coordinate (a sample any coordinate of which is
 * outside its edges, or NaN, is skipped); hist has N dims, one per coordinate.
 * Arguments PyTorch rejects with a RuntimeError (bins < 1, a range of the wrong
 * length, min > max, non-finite, too few dims, weights or bins tensors of another
 * dtype or shape) fail INVALID_ARGUMENT with its message; a self of another dtype
 * (PyTorch: NotImplementedError), more than TPU_MAX_DIMS dims (a `range` for more
 * than TPU_MAX_INTS / 2 dims) take the CPU fallback, which raises or computes.
 *
 * As ATen's histogramdd CPU kernel (every element of self is one sample):
 * - bin_ct: the outer edges are `range` when given (a FLOATS attr), else self's min and max
 *   (0 and 1 for an empty self); a non-finite range fails with PyTorch's message,
 *   an empty one widens to [x - 0.5, x + 0.5]. bin_edges = linspace(lo, hi, bins + 1)
 *   computed in self's dtype as ATen's linspace does (fma(step, i, start) below the
 *   middle, fma(-step, n - 1 - i, end) from it). Bin of x: the linear estimate
 *   (x - lo) * bins / (hi - lo) in self's dtype, corrected against bin_edges by an
 *   upper bound over the neighbouring edges (ATen's local search), so hist and
 *   bin_edges agree exactly.
 * - bins_tensor: bin_edges is a copy of bins; bin of x: upper bound over all edges
 *   (libstdc++'s std::upper_bound steps, so even unsorted edges give CPU's bins).
 * Samples outside [edges[0], edges[last]] and NaN are skipped; the last bin includes
 * its right edge. hist counts (or sums weight) in double, stored once in self's dtype;
 * density divides by the total and by each bin's width. float32 and float64; other
 * dtypes, a `range` PyTorch rejects and out= tensors of another dtype take the
 * CPU fallback (which raises or casts as PyTorch does).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/kernel_util.h"

#define BAD(...) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, __VA_ARGS__)
#define UNIMPL(...) return tpu_status_make(TPU_CODE_UNIMPLEMENTED, __VA_ARGS__)

/* Per-dtype arithmetic (self's dtype), edges and values carried as doubles. */
typedef struct hist_arith {
  tpu_dtype_t dtype;
  void (*linspace)(double lo, double hi, int64_t steps, double* out);
  int64_t (*estimate)(double x, double lo, double hi, int64_t bins);
} hist_arith_t;

/* PyTorch's CPU build contracts linspace's start + step * i into a fused multiply-add
 * (see kernels/shape/shape.c, which reproduces linspace bit for bit). */
#define FMA_float fmaf
#define FMA_double fma
#define HIST_ARITH(T)                                                                     \
  static void linspace_##T(double lo, double hi, int64_t steps, double* out) {            \
    T s = (T)lo, e = (T)hi;                                                               \
    if (steps == 1) {                                                                     \
      out[0] = s;                                                                         \
      return;                                                                             \
    }                                                                                     \
    T step = (e - s) / (T)(steps - 1);                                                    \
    int64_t half = steps / 2;                                                             \
    for (int64_t i = 0; i < steps; ++i)                                                   \
      out[i] = i < half ? FMA_##T(step, (T)i, s) : FMA_##T(-step, (T)(steps - i - 1), e); \
  }                                                                                       \
  static int64_t estimate_##T(double x, double lo, double hi, int64_t bins) {             \
    return (int64_t)(((T)x - (T)lo) * (T)bins / ((T)hi - (T)lo));                          \
  }
HIST_ARITH(float)
HIST_ARITH(double)

static const hist_arith_t k_arith[] = {
    {TPU_DTYPE_F32, linspace_float, estimate_float},
    {TPU_DTYPE_F64, linspace_double, estimate_double},
};

static const hist_arith_t* arith_for(tpu_dtype_t dt) {
  for (size_t i = 0; i < sizeof(k_arith) / sizeof(k_arith[0]); ++i)
    if (k_arith[i].dtype == dt) return &k_arith[i];
  return NULL;
}

/* std::upper_bound over e[first, last): the first index whose edge is > x. */
static int64_t upper_bound(const double* e, int64_t first, int64_t last, double x) {
  int64_t len = last - first;
  while (len > 0) {
    int64_t half = len >> 1, mid = first + half;
    if (x < e[mid]) {
      len = half;
    } else {
      first = mid + 1;
      len = len - half - 1;
    }
  }
  return first;
}

/* The element offset of the k-th element (row-major order) of v. */
static int64_t elem_off(const tpu_view_t* v, int64_t k) {
  int64_t off = 0;
  for (int32_t d = v->ndim - 1; d >= 0; --d) {
    off += (k % v->sizes[d]) * v->strides[d];
    k /= v->sizes[d];
  }
  return off;
}

static bool is_bin_ct(const tpu_op_def_t* def) { return strcmp(def->name, "histogram") == 0; }

static const tpu_view_t* out_at(const tpu_node_t* node, int32_t i) {
  if (i >= node->num_outputs || tpu_view_is_absent(&node->outputs[i]))
    return NULL;
  return &node->outputs[i];
}

/* The number of bins: the bins attr, or the bins tensor's length - 1. */
static int64_t num_bins(const tpu_op_def_t* def, const tpu_node_t* node) {
  if (is_bin_ct(def)) return tpu_attr_int(ku_attr(def, node, "bins"), 100);
  const tpu_view_t* b = ku_input(def, node, "bins");
  return b && b->ndim == 1 ? b->sizes[0] - 1 : -1;
}

/* The inputs and attrs (infer must not read node->outputs). */
static tpu_status_t hist_check_inputs(const tpu_op_def_t* def, const tpu_node_t* node) {
  const tpu_view_t* x = ku_input(def, node, "self");
  if (!x || !arith_for(x->dtype)) UNIMPL("%s: self of this dtype", def->name);
  const tpu_view_t* w = ku_input(def, node, "weight");
  /* a weight of self's dtype and numel (the CPU reshapes both to one dim) */
  if (w && (w->dtype != x->dtype || tpu_view_numel(w) != tpu_view_numel(x)))
    UNIMPL("%s: weight unlike self", def->name);
  if (is_bin_ct(def)) {
    /* a range PyTorch rejects (not two finite floats, min > max): the CPU raises */
    const tpu_attr_t* r = ku_attr(def, node, "range");
    if (r && r->kind != TPU_ATTR_NONE &&
        !(r->kind == TPU_ATTR_FLOATS && r->count == 2 && isfinite(r->u.floats[0]) &&
          isfinite(r->u.floats[1]) && r->u.floats[0] <= r->u.floats[1]))
      UNIMPL("%s: this range", def->name);
    if (num_bins(def, node) < 1) UNIMPL("%s: bins must be > 0", def->name);
  } else {
    const tpu_view_t* b = ku_input(def, node, "bins");
    if (!b || b->dtype != x->dtype || b->ndim != 1 || b->sizes[0] < 2)
      UNIMPL("%s: bins tensor", def->name);
  }
  return TPU_OK;
}

/* Every row here writes its outputs in self's dtype: an out= of another
 * dtype is the CPU fallback's (which casts or raises as PyTorch does). */
static tpu_status_t outputs_in_self_dtype(const tpu_op_def_t* def, const tpu_node_t* node,
                                          int32_t count) {
  const tpu_view_t* x = ku_input(def, node, "self");
  for (int32_t i = 0; i < count; ++i) {
    const tpu_view_t* o = out_at(node, i);
    if (o && o->dtype != x->dtype) UNIMPL("%s: output of another dtype", def->name);
  }
  return TPU_OK;
}

static tpu_status_t hist_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  TPU_RETURN_IF_ERROR(hist_check_inputs(def, node));
  return outputs_in_self_dtype(def, node, 2);
}

static tpu_status_t hist_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_view_t* outs) {
  TPU_RETURN_IF_ERROR(hist_check_inputs(def, node));
  const tpu_view_t* x = ku_input(def, node, "self");
  int64_t bins = num_bins(def, node);
  for (int32_t i = 0; i < 2; ++i) {
    memset(&outs[i], 0, sizeof(outs[i]));
    outs[i].dtype = x->dtype;
    outs[i].ndim = 1;
    outs[i].sizes[0] = bins + i;
    tpu_view_set_contiguous(&outs[i]);
  }
  return TPU_OK;
}

static tpu_status_t hist_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  (void)ctx;
  const tpu_view_t* x = ku_input(def, node, "self");
  const tpu_view_t* w = ku_input(def, node, "weight");
  const tpu_view_t* hv = out_at(node, 0);
  const tpu_view_t* ev = out_at(node, 1);
  const hist_arith_t* ar = arith_for(x->dtype);
  int64_t bins = num_bins(def, node), n = tpu_view_numel(x);
  if (!hv || !ev || hv->ndim != 1 || ev->ndim != 1 || hv->sizes[0] != bins ||
      ev->sizes[0] != bins + 1)
    BAD("%s: outputs of unexpected shapes", def->name);
  bool linear = is_bin_ct(def);
  double* buf = malloc(sizeof(double) * (size_t)(2 * (bins + 1) + (n > 0 ? n : 1)));
  if (!buf) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "%s: scratch", def->name);
  double *edges = buf, *hist = buf + bins + 1, *xs = buf + 2 * (bins + 1);
  for (int64_t k = 0; k < n; ++k) xs[k] = view_get_f64(x, elem_off(x, k));
  tpu_status_t st = TPU_OK;
  if (linear) {
    double lo = 0.0, hi = 1.0; /* an empty self: [0, 1], as the CPU */
    const tpu_attr_t* r = ku_attr(def, node, "range");
    bool ranged = r && r->kind == TPU_ATTR_FLOATS;
    if (ranged) lo = r->u.floats[0], hi = r->u.floats[1];
    if (n > 0 && !ranged) lo = hi = xs[0];
    for (int64_t k = 1; k < n && !ranged; ++k) { /* aminmax: NaN propagates */
      if (isnan(xs[k]) || isnan(lo)) {
        lo = hi = NAN;
        break;
      }
      lo = xs[k] < lo ? xs[k] : lo;
      hi = xs[k] > hi ? xs[k] : hi;
    }
    if (n > 0 && !ranged && isnan(xs[0])) lo = hi = NAN;
    if (!isfinite(lo) || !isfinite(hi)) {
      st = tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "torch.histogramdd: dimension 0's range [%g, %g] is not finite", lo,
                           hi);
      goto done;
    }
    if (lo == hi) lo -= 0.5, hi += 0.5;
    ar->linspace(lo, hi, bins + 1, edges);
  } else {
    const tpu_view_t* b = ku_input(def, node, "bins");
    for (int64_t i = 0; i <= bins; ++i) edges[i] = view_get_f64(b, i * b->strides[0]);
  }
  for (int64_t i = 0; i < bins; ++i) hist[i] = 0.0;
  double left = edges[0], right = edges[bins];
  for (int64_t k = 0; k < n; ++k) {
    double e = xs[k];
    if (!(e >= left && e <= right)) continue;
    int64_t pos;
    if (linear) {
      pos = ar->estimate(e, left, right, bins);
      int64_t pmin = pos - 1 > 0 ? pos - 1 : 0, pmax = pos + 2 < bins + 1 ? pos + 2 : bins + 1;
      pos = upper_bound(edges, pmin, pmax, e) - 1;
    } else {
      pos = upper_bound(edges, 0, bins + 1, e) - 1;
    }
    if (pos == bins) pos -= 1;
    if (pos < 0 || pos >= bins) continue; /* unsorted bins tensors: as the CPU, no bin */
    hist[pos] += w ? view_get_f64(w, elem_off(w, k)) : 1.0;
  }
  if (bins > 0 && tpu_attr_bool(ku_attr(def, node, "density"), false)) {
    double total = 0.0;
    for (int64_t i = 0; i < bins; ++i) total += hist[i];
    for (int64_t i = 0; i < bins; ++i) hist[i] = hist[i] / total / (edges[i + 1] - edges[i]);
  }
  for (int64_t i = 0; i < bins; ++i) view_set_f64(hv, i * hv->strides[0], hist[i]);
  for (int64_t i = 0; i <= bins; ++i) view_set_f64(ev, i * ev->strides[0], edges[i]);
done:
  free(buf);
  return st;
}

/* ---- histogramdd ---------------------------------------------------------------- */

/* The coordinates per sample (N) and the samples (M) of self viewed as (M, N). */
static int64_t dd_dims(const tpu_view_t* x) { return x->sizes[x->ndim - 1]; }
static int64_t dd_samples(const tpu_view_t* x) {
  int64_t m = 1;
  for (int32_t d = 0; d + 1 < x->ndim; ++d) m *= x->sizes[d];
  return m;
}

static bool dd_tensors(const tpu_op_def_t* def) {
  return strcmp(def->name, "histogramdd_bin_tensors") == 0;
}

/* The counting rows' weight and bins tensors (the bins list sits between self and
 * weight); NULL when absent. */
static const tpu_view_t* dd_weight(const tpu_op_def_t* def, const tpu_node_t* node) {
  if (!dd_tensors(def)) return ku_input(def, node, "weight");
  const tpu_value_t* v = &node->inputs[node->num_inputs - 1];
  return node->num_inputs >= 3 && v->kind == TPU_VALUE_VIEW ? &v->u.view : NULL;
}
static const tpu_view_t* dd_bins_tensor(const tpu_node_t* node, int64_t d) {
  const tpu_value_t* v = &node->inputs[1 + d];
  return v->kind == TPU_VALUE_VIEW ? &v->u.view : NULL;
}

/* The outer edges of column d: [r[0], r[1]] when r is two floats, else the column's
 * min and max (NaN propagates; [0, 1] without samples); PyTorch's checks, then an
 * empty range widens by 0.5 each way. */
static tpu_status_t dd_outer(const tpu_view_t* x, int64_t d, const double* r, double* lo,
                             double* hi) {
  int64_t n = dd_dims(x), m = dd_samples(x);
  *lo = 0.0, *hi = 1.0;
  if (r) {
    *lo = r[0], *hi = r[1];
  } else if (m > 0) {
    *lo = *hi = view_get_f64(x, elem_off(x, d));
    for (int64_t i = 0; i < m && !isnan(*lo); ++i) {
      double e = view_get_f64(x, elem_off(x, i * n + d));
      if (isnan(e)) *lo = *hi = NAN;
      else if (e < *lo) *lo = e;
      else if (e > *hi) *hi = e;
    }
  }
  if (!isfinite(*lo) || !isfinite(*hi))
    BAD("torch.histogramdd: dimension %lld's range [%g, %g] is not finite", (long long)d, *lo,
        *hi);
  if (*lo > *hi)
    BAD("torch.histogramdd: min should not exceed max, but got min %g max %g for dimension %lld",
        *lo, *hi, (long long)d);
  if (*lo == *hi) *lo -= 0.5, *hi += 0.5;
  return TPU_OK;
}

/* histogramdd_bin_edges: self of a dtype the arithmetic knows, 2+ dims, dim a
 * coordinate, bins >= -1 (linspace of bins + 1 >= 0 steps), range none or two floats. */
static tpu_status_t dd_edges_check_inputs(const tpu_op_def_t* def, const tpu_node_t* node) {
  const tpu_view_t* x = ku_input(def, node, "self");
  if (!x || !arith_for(x->dtype) || x->ndim < 2) UNIMPL("%s: self", def->name);
  int64_t dim = tpu_attr_int(ku_attr(def, node, "dim"), -1);
  if (dim < 0 || dim >= dd_dims(x)) UNIMPL("%s: dim %lld", def->name, (long long)dim);
  if (tpu_attr_int(ku_attr(def, node, "bins"), -2) < -1) UNIMPL("%s: bins < -1", def->name);
  const tpu_attr_t* r = ku_attr(def, node, "range");
  if (r && r->kind != TPU_ATTR_NONE && !(r->kind == TPU_ATTR_FLOATS && r->count == 2))
    UNIMPL("%s: range of another form", def->name);
  return TPU_OK;
}

static tpu_status_t dd_edges_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  TPU_RETURN_IF_ERROR(dd_edges_check_inputs(def, node));
  return outputs_in_self_dtype(def, node, 1);
}

static tpu_status_t dd_edges_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                   tpu_view_t* outs) {
  TPU_RETURN_IF_ERROR(dd_edges_check_inputs(def, node));
  memset(&outs[0], 0, sizeof(outs[0]));
  outs[0].dtype = ku_input(def, node, "self")->dtype;
  outs[0].ndim = 1;
  outs[0].sizes[0] = tpu_attr_int(ku_attr(def, node, "bins"), 0) + 1;
  tpu_view_set_contiguous(&outs[0]);
  return TPU_OK;
}

static tpu_status_t dd_edges_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                    tpu_exec_ctx_t* ctx) {
  (void)ctx;
  const tpu_view_t* x = ku_input(def, node, "self");
  const tpu_view_t* ev = out_at(node, 0);
  int64_t steps = tpu_attr_int(ku_attr(def, node, "bins"), 0) + 1;
  if (!ev || ev->ndim != 1 || ev->sizes[0] != steps)
    BAD("%s: output of an unexpected shape", def->name);
  const tpu_attr_t* r = ku_attr(def, node, "range");
  double lo, hi;
  TPU_RETURN_IF_ERROR(dd_outer(x, tpu_attr_int(ku_attr(def, node, "dim"), 0),
                               r && r->kind == TPU_ATTR_FLOATS ? r->u.floats : NULL, &lo, &hi));
  if (steps == 0) return TPU_OK;
  double* edges = malloc(sizeof(double) * (size_t)steps);
  if (!edges) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "%s: scratch", def->name);
  arith_for(x->dtype)->linspace(lo, hi, steps, edges);
  for (int64_t i = 0; i < steps; ++i) view_set_f64(ev, i * ev->strides[0], edges[i]);
  free(edges);
  return TPU_OK;
}

/* The counting rows' number of bins in dim d (-1: not known from the node). */
static int64_t dd_bins(const tpu_op_def_t* def, const tpu_node_t* node, int64_t d) {
  if (!dd_tensors(def)) {
    const tpu_attr_t* b = ku_attr(def, node, "bins");
    return b && b->kind == TPU_ATTR_INTS && d < b->count ? b->u.ints[d] : -1;
  }
  const tpu_view_t* b = dd_bins_tensor(node, d);
  return b && b->ndim == 1 ? b->sizes[0] - 1 : -1;
}

/* A view's sizes as PyTorch prints them: "[10, 2]". */
static void dd_shape_str(const tpu_view_t* v, char* buf, size_t cap) {
  size_t len = (size_t)snprintf(buf, cap, "[");
  for (int32_t d = 0; d < v->ndim && len < cap; ++d)
    len += (size_t)snprintf(buf + len, cap - len, d ? ", %lld" : "%lld", (long long)v->sizes[d]);
  if (len < cap) snprintf(buf + len, cap - len, "]");
}

static tpu_status_t dd_check_inputs(const tpu_op_def_t* def, const tpu_node_t* node) {
  const tpu_view_t* x = ku_input(def, node, "self");
  if (!x) UNIMPL("%s: self", def->name);
  if (x->ndim < 2) BAD("torch.histogramdd: input tensor should have at least 2 dimensions");
  if (!arith_for(x->dtype)) UNIMPL("%s: self of this dtype", def->name);
  int64_t n = dd_dims(x);
  if (n < 1 || n > TPU_MAX_DIMS) UNIMPL("%s: %lld coordinates", def->name, (long long)n);
  int64_t given = 0;
  if (dd_tensors(def)) {
    given = node->num_inputs - 2;
    if (given != n)
      BAD("torch.histogramdd: expected %lld sequences of bin edges for a %lld-dimensional "
          "histogram but got %lld", (long long)n, (long long)n, (long long)given);
    for (int64_t d = 0; d < n; ++d) {
      const tpu_view_t* b = dd_bins_tensor(node, d);
      if (!b) UNIMPL("%s: bins tensor %lld", def->name, (long long)d);
      if (b->dtype != x->dtype)
        BAD("torch.histogramdd: input tensor and bins tensors should have the same dtype, but "
            "got input with dtype %s and bins for dimension %lld with dtype %s",
            tpu_dtype_cpp_name(x->dtype), (long long)d, tpu_dtype_cpp_name(b->dtype));
      if (b->ndim != 1)
        BAD("torch.histogramdd: bins tensor should have one dimension, but got %d dimensions "
            "in the bins tensor for dimension %lld", b->ndim, (long long)d);
      if (b->sizes[0] < 1)
        BAD("torch.histogramdd: bins tensor should have at least 1 element, but got 0 "
            "elements in the bins tensor for dimension %lld", (long long)d);
    }
  } else {
    const tpu_attr_t* b = ku_attr(def, node, "bins");
    if (!b || b->kind != TPU_ATTR_INTS) UNIMPL("%s: bins", def->name);
    given = b->count;
    const tpu_attr_t* r = ku_attr(def, node, "range");
    if (r && r->kind != TPU_ATTR_NONE) {
      if (r->kind != TPU_ATTR_FLOATS || r->count > TPU_MAX_INTS) UNIMPL("%s: range", def->name);
      if (r->count != 2 * n)
        BAD("torch.histogramdd: for a %lld-dimensional histogram range should have %lld "
            "elements, but got %d", (long long)n, (long long)(2 * n), r->count);
      for (int64_t d = 0; d < n; ++d) {
        double lo, hi;
        TPU_RETURN_IF_ERROR(dd_outer(x, d, &r->u.floats[2 * d], &lo, &hi));
      }
    }
    if (given != n)
      BAD("histogramdd: The size of bins must be equal to the innermost dimension of the "
          "input.");
  }
  const tpu_view_t* w = dd_weight(def, node);
  if (w) { /* of self's dtype and sizes but the last */
    if (w->dtype != x->dtype)
      BAD("torch.histogramdd: if weight tensor is provided, input tensor and weight tensor "
          "should have the same dtype, but got input(%s), and weight(%s)",
          tpu_dtype_cpp_name(x->dtype), tpu_dtype_cpp_name(w->dtype));
    bool same = w->ndim == x->ndim - 1;
    for (int32_t d = 0; same && d < w->ndim; ++d) same = w->sizes[d] == x->sizes[d];
    if (!same) {
      char xs[TPU_MAX_DIMS * 22 + 3], ws[TPU_MAX_DIMS * 22 + 3];
      dd_shape_str(x, xs, sizeof(xs));
      dd_shape_str(w, ws, sizeof(ws));
      BAD("torch.histogramdd: if weight tensor is provided it should have the same shape as "
          "the input tensor excluding its innermost dimension, but got input with shape %s and "
          "weight with shape %s", xs, ws);
    }
  }
  for (int64_t d = 0; d < n; ++d)
    if (dd_bins(def, node, d) < 1)
      BAD("torch.histogram(): bins must be > 0, but got %lld for dimension %lld",
          (long long)dd_bins(def, node, d), (long long)d);
  return TPU_OK;
}

static tpu_status_t dd_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  TPU_RETURN_IF_ERROR(dd_check_inputs(def, node));
  return outputs_in_self_dtype(def, node, 1);
}

static tpu_status_t dd_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* outs) {
  TPU_RETURN_IF_ERROR(dd_check_inputs(def, node));
  const tpu_view_t* x = ku_input(def, node, "self");
  memset(&outs[0], 0, sizeof(outs[0]));
  outs[0].dtype = x->dtype;
  outs[0].ndim = (int32_t)dd_dims(x);
  for (int32_t d = 0; d < outs[0].ndim; ++d) outs[0].sizes[d] = dd_bins(def, node, d);
  tpu_view_set_contiguous(&outs[0]);
  return TPU_OK;
}

static tpu_status_t dd_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  (void)ctx;
  const tpu_view_t* x = ku_input(def, node, "self");
  const tpu_view_t* w = dd_weight(def, node);
  const tpu_view_t* hv = out_at(node, 0);
  const hist_arith_t* ar = arith_for(x->dtype);
  int64_t n = dd_dims(x), m = dd_samples(x), cells = 1, nedges = 0;
  int64_t nb[TPU_MAX_DIMS], first[TPU_MAX_DIMS], stride[TPU_MAX_DIMS];
  if (!hv || hv->ndim != n) BAD("%s: output of an unexpected shape", def->name);
  for (int64_t d = 0; d < n; ++d) {
    nb[d] = dd_bins(def, node, d);
    if (hv->sizes[d] != nb[d]) BAD("%s: output of an unexpected shape", def->name);
    first[d] = nedges, nedges += nb[d] + 1, cells *= nb[d];
  }
  for (int64_t d = n - 1, s = 1; d >= 0; s *= nb[d], --d) stride[d] = s;
  double* buf = malloc(sizeof(double) * (size_t)(nedges + cells));
  if (!buf) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "%s: scratch", def->name);
  double *edges = buf, *hist = buf + nedges;
  const tpu_attr_t* r = ku_attr(def, node, "range");
  for (int64_t d = 0; d < n; ++d) {
    double* e = edges + first[d];
    if (dd_tensors(def)) {
      const tpu_view_t* b = dd_bins_tensor(node, d);
      for (int64_t i = 0; i <= nb[d]; ++i) e[i] = view_get_f64(b, i * b->strides[0]);
      continue;
    }
    double lo, hi;
    tpu_status_t st = dd_outer(x, d, r && r->kind == TPU_ATTR_FLOATS ? &r->u.floats[2 * d] : NULL,
                               &lo, &hi);
    if (st != TPU_OK) {
      free(buf);
      return st;
    }
    ar->linspace(lo, hi, nb[d] + 1, e);
  }
  for (int64_t c = 0; c < cells; ++c) hist[c] = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    int64_t cell = 0;
    bool skip = false;
    for (int64_t d = 0; d < n && !skip; ++d) {
      const double* e = edges + first[d];
      double v = view_get_f64(x, elem_off(x, i * n + d));
      if (!(v >= e[0] && v <= e[nb[d]])) { /* outside, or NaN */
        skip = true;
        break;
      }
      int64_t pos;
      if (!dd_tensors(def)) { /* ATen's linear estimate and local search */
        pos = ar->estimate(v, e[0], e[nb[d]], nb[d]);
        int64_t pmin = pos - 1 > 0 ? pos - 1 : 0, pmax = pos + 2 < nb[d] + 1 ? pos + 2 : nb[d] + 1;
        pos = upper_bound(e, pmin, pmax, v) - 1;
      } else {
        pos = upper_bound(e, 0, nb[d] + 1, v) - 1;
      }
      if (pos == nb[d]) pos -= 1;
      if (pos < 0 || pos >= nb[d]) skip = true; /* unsorted bins tensors: no bin */
      cell += stride[d] * pos;
    }
    if (!skip) hist[cell] += w ? view_get_f64(w, elem_off(w, i)) : 1.0;
  }
  if (tpu_attr_bool(ku_attr(def, node, "density"), false) && cells > 0) {
    double total = 0.0; /* as ATen: hist / its sum, then / each dim's bin widths */
    for (int64_t c = 0; c < cells; ++c) total += hist[c];
    for (int64_t c = 0; c < cells; ++c) {
      hist[c] /= total;
      for (int64_t d = 0; d < n; ++d) {
        int64_t k = c / stride[d] % nb[d];
        hist[c] /= edges[first[d] + k + 1] - edges[first[d] + k];
      }
    }
  }
  for (int64_t c = 0; c < cells; ++c) view_set_f64(hv, elem_off(hv, c), hist[c]);
  free(buf);
  return TPU_OK;
}

static const tpu_op_def_t k_rows[] = {
    {.name = "histogram", .inputs = "self,weight?", .attrs = "bins,range,density",
     .outputs = "hist,bin_edges", .aten = "histogram.bin_ct histogram.bin_ct_out",
     .kernel = hist_kernel, .infer = hist_infer, .check = hist_check},
    {.name = "histogram_bins_tensor", .inputs = "self,bins,weight?", .attrs = "density",
     .outputs = "hist,bin_edges", .aten = "histogram.bins_tensor histogram.bins_tensor_out",
     .kernel = hist_kernel, .infer = hist_infer, .check = hist_check},
    {.name = "histogramdd_bin_edges", .inputs = "self", .attrs = "bins,dim,range",
     .outputs = "bin_edges", .aten = NULL, .kernel = dd_edges_kernel, .infer = dd_edges_infer,
     .check = dd_edges_check},
    {.name = "histogramdd", .inputs = "self,weight?", .attrs = "bins,range,density",
     .outputs = "hist", .aten = "_histogramdd_from_bin_cts", .kernel = dd_kernel,
     .infer = dd_infer, .check = dd_check},
    {.name = "histogramdd_bin_tensors", .inputs = "self,bins*,weight?", .attrs = "density",
     .outputs = "hist", .aten = "_histogramdd_from_bin_tensors", .kernel = dd_kernel,
     .infer = dd_infer, .check = dd_check},
};

const tpu_op_family_t tpu_family_histogram = {"histogram", k_rows,
                                              (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
