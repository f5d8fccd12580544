/* histogram.c — the histogram family: torch.histogram (1-D).
 *
 *   histogram.bin_ct(self, bins, range=None, weight=None, density)   -> (hist, bin_edges)
 *   histogram.bins_tensor(self, bins, weight=None, density)          -> (hist, bin_edges)
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

static tpu_status_t hist_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  TPU_RETURN_IF_ERROR(hist_check_inputs(def, node));
  const tpu_view_t* x = ku_input(def, node, "self");
  for (int32_t i = 0; i < 2; ++i) {
    const tpu_view_t* o = out_at(node, i);
    if (o && o->dtype != x->dtype) UNIMPL("%s: output of another dtype", def->name);
  }
  return TPU_OK;
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

static const tpu_op_def_t k_rows[] = {
    {.name = "histogram", .inputs = "self,weight?", .attrs = "bins,range,density",
     .outputs = "hist,bin_edges", .aten = "histogram.bin_ct histogram.bin_ct_out",
     .kernel = hist_kernel, .infer = hist_infer, .check = hist_check},
    {.name = "histogram_bins_tensor", .inputs = "self,bins,weight?", .attrs = "density",
     .outputs = "hist,bin_edges", .aten = "histogram.bins_tensor histogram.bins_tensor_out",
     .kernel = hist_kernel, .infer = hist_infer, .check = hist_check},
};

const tpu_op_family_t tpu_family_histogram = {"histogram", k_rows,
                                              (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
