/* scan_ref.c — the scan family's reference kernel: every output element is
 * recomputed from the start of its row with a plain loop, in long double
 * for floating sums/products (int64 wrapping for integers), so it checks
 * the kernel's traversal and accumulation, not its rounding order. */
#include <math.h>
#include <string.h>

#include "kernels/reduce/scan.h"

static int64_t off_of(const tpu_view_t* v, const int64_t* c) {
  int64_t o = 0;
  for (int32_t d = 0; d < v->ndim; ++d) o += c[d] * v->strides[d];
  return o;
}

tpu_status_t tpu_scan_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  (void)ctx;
  scan_args_t a;
  TPU_RETURN_IF_ERROR(tpu_scan_parse(def, node, &a));
  const tpu_view_t* in = a.in;
  const tpu_view_t* out = &node->outputs[0];
  bool integral = !tpu_dtype_is_floating(out->dtype);
  int64_t numel = tpu_view_numel(in), c[TPU_MAX_DIMS] = {0};
  for (int64_t q = 0; q < numel; ++q) {
    int64_t rem = q;
    for (int32_t d = in->ndim - 1; d >= 0; --d) c[d] = rem % in->sizes[d], rem /= in->sizes[d];
    int64_t pos = in->ndim ? c[a.dim] : 0;
    long double acc = a.kind == SC_CUMPROD ? 1.0L : (a.kind == SC_LOGCUMSUMEXP ? -INFINITY : 0.0L);
    int64_t iacc = a.kind == SC_CUMPROD ? 1 : 0, best = 0;
    double ext = 0.0;
    for (int64_t j = 0; j <= pos; ++j) {
      if (in->ndim) c[a.dim] = j;
      double x = view_get_f64(in, off_of(in, c));
      /* The input is cast to the result dtype first. */
      uint64_t tmp;
      tpu_convert(&tmp, out->dtype, 1, &x, TPU_DTYPE_F64, 1, 1);
      if (a.kind == SC_CUMSUM || a.kind == SC_CUMPROD) {
        tpu_convert(&x, TPU_DTYPE_F64, 1, &tmp, out->dtype, 1, 1);
      }
      if (integral && (a.kind == SC_CUMSUM || a.kind == SC_CUMPROD)) {
        int64_t xi = (int64_t)x;
        iacc = a.kind == SC_CUMSUM ? (int64_t)((uint64_t)iacc + (uint64_t)xi)
                                   : (int64_t)((uint64_t)iacc * (uint64_t)xi);
      }
      switch (a.kind) {
        case SC_CUMSUM: acc += x; break;
        case SC_CUMPROD: acc *= x; break;
        case SC_LOGCUMSUMEXP: {
          long double mx = acc > x ? acc : x, mn = acc > x ? x : acc;
          if (isnan(x) || isnan((double)acc)) acc = NAN;
          else if (mx == -INFINITY || (mn == mx && isinf((double)mx))) acc = x;
          else acc = mx + log1pl(expl(mn - mx));
          break;
        }
        case SC_CUMMAX:
        case SC_CUMMIN:
          if (j == 0 || isnan(x) ||
              (!isnan(ext) && (a.kind == SC_CUMMAX ? x >= ext : x <= ext)))
            ext = x, best = j;
          break;
      }
    }
    if (in->ndim) c[a.dim] = pos;
    if (a.kind == SC_CUMMAX || a.kind == SC_CUMMIN) {
      view_set_f64(out, off_of(out, c), ext);
      view_set_i64(&node->outputs[1], off_of(&node->outputs[1], c), best);
    } else if (integral) {
      view_set_i64(out, off_of(out, c), iacc);
    } else {
      view_set_f64(out, off_of(out, c), (double)acc);
    }
  }
  return TPU_OK;
}
