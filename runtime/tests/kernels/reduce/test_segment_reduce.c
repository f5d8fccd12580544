/* test_segment_reduce.c — segment_reduce and _segment_reduce_backward (the
 * scatter_reduce family) against plain loops in double: every reduction,
 * lengths and offsets (int32/int64), axis 0/1 of 3-D data, empty segments,
 * an initial value, strided data and output, float32/float64 (float16 and
 * bfloat16 within their rounding); then the validation errors and
 * fallbacks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_test_util.h"

static tpu_attr_t tt_str(const char* v) {
  tpu_attr_t a = {.kind = TPU_ATTR_STR};
  strncpy(a.u.str, v, TPU_MAX_STR - 1);
  return a;
}

static const char* k_reds[5] = {"max", "mean", "min", "sum", "prod"};

/* Plain reference of element (o, s, i) (forward), lengths of row o in len. */
static double ref_forward(int red, const double* x, int64_t size, int64_t inner, int64_t o,
                          int64_t start, int64_t n, int64_t i, bool has_init, double init) {
  double acc = has_init ? init : red == 0 ? -INFINITY : red == 2 ? INFINITY : red == 4 ? 1 : 0;
  for (int64_t k = start; k < start + n; ++k) {
    double v = x[(o * size + k) * inner + i];
    if (red == 0) acc = isnan(v) || v > acc ? v : acc;
    else if (red == 2) acc = isnan(v) || v < acc ? v : acc;
    else if (red == 4) acc *= v;
    else acc += v;
  }
  if (red == 1) acc = n == 0 ? (has_init ? acc : NAN) : acc / (double)n;
  return acc;
}

TEST(segment_reduce_table) {
  const tpu_op_def_t *fw = tt_def("segment_reduce"), *bw = tt_def("segment_reduce_backward");
  if (!fw || !bw) return;
  const int64_t lens_row[2][5] = {{2, 0, 5, 3, 1}, {0, 6, 1, 4, 0}};
  const tpu_dtype_t dts[4] = {TPU_DTYPE_F64, TPU_DTYPE_F32, TPU_DTYPE_F16, TPU_DTYPE_BF16};
  for (int red = 0; red < 5; ++red)
    for (int d = 0; d < 4; ++d)
      for (int axis = 0; axis < 2; ++axis)
        for (int use_off = 0; use_off < 2; ++use_off)
          for (int init = 0; init < 2; ++init) {
            tpu_dtype_t dt = dts[d];
            /* data [2, 11, 3] (axis 1) or [11, 3] (axis 0, row 0's lengths). */
            int64_t ds3[3] = {2, 11, 3}, ds2[2] = {11, 3};
            int32_t nd = axis ? 3 : 2;
            int64_t outer = axis ? 2 : 1, size = 11, inner = 3, nseg = 5;
            tt_t x = tt_make(dt, nd, axis ? ds3 : ds2, d % 2 ? TT_GAPS : TT_TRANSPOSED);
            tt_fill(&x.view, -2, 2, 0);
            tt_set(&x.view, 4, 0.0);
            int64_t ls[2] = {outer, nseg + use_off};
            tt_t l = tt_make(init ? TPU_DTYPE_I32 : TPU_DTYPE_I64, axis ? 2 : 1, axis ? ls : ls + 1,
                             TT_CONTIG);
            for (int64_t o = 0; o < outer; ++o) {
              int64_t acc = 0;
              for (int64_t s = 0; s < nseg + use_off; ++s) {
                int64_t v = use_off ? acc : lens_row[o][s];
                if (use_off && s < nseg) acc += lens_row[o][s];
                tt_set(&l.view, o * (nseg + use_off) + s, (double)v);
              }
            }
            int64_t os3[3] = {2, 5, 3}, os2[2] = {5, 3};
            tt_t y = tt_make(dt, nd, axis ? os3 : os2, TT_GAPS);
            tpu_value_t in[3] = {tt_value(&x.view), tt_value(use_off ? NULL : &l.view),
                                 tt_value(use_off ? &l.view : NULL)};
            tpu_attr_t attrs[4] = {tt_str(k_reds[red]), tt_int(axis), tt_bool(false),
                                   init ? tt_float(0.5) : tt_none()};
            tpu_node_t node = tt_node(in, 3, &y.view, 1, attrs, 4);
            tpu_view_t inferred;
            CHECK_OK(fw->infer(fw, &node, &inferred));
            CHECK(views_same_shape(&inferred, &y.view) && inferred.dtype == dt);
            CHECK_OK(fw->check(fw, &node));
            CHECK_OK(tt_run(fw->kernel, fw, &node));
            /* Reference over the data as stored. */
            int64_t nx = outer * size * inner;
            double* xv = malloc(sizeof(double) * (size_t)nx);
            for (int64_t k = 0; k < nx; ++k) xv[k] = tt_get(&x.view, k);
            double tol = dt == TPU_DTYPE_F64 ? 1e-12 : dt == TPU_DTYPE_F32 ? 1e-5
                         : dt == TPU_DTYPE_F16 ? 1e-2 : 8e-2;
            int bad = 0;
            for (int64_t o = 0; o < outer; ++o) {
              int64_t start = 0;
              for (int64_t s = 0; s < nseg; ++s) {
                int64_t n = lens_row[o][s];
                for (int64_t i = 0; i < inner; ++i) {
                  double want = ref_forward(red, xv, size, inner, o, start, n, i, init, 0.5);
                  double got = tt_get(&y.view, (o * nseg + s) * inner + i);
                  if (tt_rel_diff(got, want) > tol && bad++ < 3)
                    tpu_test_fail(__FILE__, __LINE__, "%s %s axis %d off %d init %d: (%lld %lld "
                                  "%lld) got %g want %g", k_reds[red], tpu_dtype_name(dt), axis,
                                  use_off, init, (long long)o, (long long)s, (long long)i, got,
                                  want);
                }
                start += n;
              }
            }
            /* Backward with grad = 1 everywhere: sum -> 1, mean -> 1/n, prod ->
             * prod of the others, max/min -> 1 on the extremum (ties split). */
            tt_t g = tt_make(dt, nd, axis ? os3 : os2, TT_CONTIG);
            tt_fill_value(&g.view, 1);
            tt_t gi = tt_make(dt, nd, axis ? ds3 : ds2, TT_CONTIG);
            tpu_value_t bin[5] = {tt_value(&g.view), tt_value(&y.view), tt_value(&x.view),
                                  in[1], in[2]};
            tpu_attr_t battrs[3] = {tt_str(k_reds[red]), tt_int(axis), attrs[3]};
            tpu_node_t bn = tt_node(bin, 5, &gi.view, 1, battrs, 3);
            CHECK_OK(bw->check(bw, &bn));
            CHECK_OK(tt_run(bw->kernel, bw, &bn));
            for (int64_t o = 0; o < outer && dt == TPU_DTYPE_F64; ++o) {
              int64_t start = 0;
              for (int64_t s = 0; s < nseg; ++s) {
                int64_t n = lens_row[o][s];
                for (int64_t i = 0; i < inner; ++i) {
                  double yv = tt_get(&y.view, (o * nseg + s) * inner + i);
                  int64_t ties = 0;
                  for (int64_t k = start; k < start + n; ++k)
                    ties += xv[(o * size + k) * inner + i] == yv;
                  for (int64_t k = start; k < start + n; ++k) {
                    int64_t e = (o * size + k) * inner + i;
                    double want;
                    if (red == 3) want = 1;
                    else if (red == 1) want = 1.0 / (double)n;
                    else if (red == 4) {
                      want = init ? 0.5 : 1.0;
                      for (int64_t q = start; q < start + n; ++q)
                        if (q != k) want *= xv[(o * size + q) * inner + i];
                    } else {
                      want = xv[e] == yv ? 1.0 / (double)ties : 0.0;
                    }
                    double got = tt_get(&gi.view, e);
                    if (tt_rel_diff(got, want) > 1e-12 && bad++ < 3)
                      tpu_test_fail(__FILE__, __LINE__, "backward %s axis %d off %d: elem %lld "
                                    "got %g want %g", k_reds[red], axis, use_off, (long long)e,
                                    got, want);
                  }
                }
                start += n;
              }
            }
            free(xv);
            tt_free(&x), tt_free(&l), tt_free(&y), tt_free(&g), tt_free(&gi);
          }
}

TEST(segment_reduce_errors) {
  const tpu_op_def_t* fw = tt_def("segment_reduce");
  if (!fw) return;
  int64_t n6 = 6, n2 = 2;
  tt_t x = tt_make(TPU_DTYPE_F32, 1, &n6, TT_CONTIG), y = tt_make(TPU_DTYPE_F32, 1, &n2, TT_CONTIG);
  tt_t l = tt_make(TPU_DTYPE_I64, 1, &n2, TT_CONTIG), xi = tt_make(TPU_DTYPE_I32, 1, &n6, TT_CONTIG);
  tt_fill(&x.view, 0, 1, 0);
  tpu_value_t in[3] = {tt_value(&x.view), tt_value(&l.view), tt_value(NULL)};
  tpu_attr_t attrs[4] = {tt_str("sum"), tt_int(0), tt_bool(false), tt_none()};
  tpu_node_t node = tt_node(in, 3, &y.view, 1, attrs, 4);
  /* rows not summing to the axis size; a negative length. */
  tt_set(&l.view, 0, 2), tt_set(&l.view, 1, 2);
  CHECK_CODE(tt_run(fw->kernel, fw, &node), TPU_CODE_INVALID_ARGUMENT);
  tt_set(&l.view, 0, 7), tt_set(&l.view, 1, -1);
  CHECK_CODE(tt_run(fw->kernel, fw, &node), TPU_CODE_INVALID_ARGUMENT);
  /* unsafe: a short sum is allowed, a long one never. */
  attrs[2] = tt_bool(true);
  node = tt_node(in, 3, &y.view, 1, attrs, 4);
  tt_set(&l.view, 0, 2), tt_set(&l.view, 1, 2);
  CHECK_OK(tt_run(fw->kernel, fw, &node));
  tt_set(&l.view, 0, 5), tt_set(&l.view, 1, 5);
  CHECK_CODE(tt_run(fw->kernel, fw, &node), TPU_CODE_INVALID_ARGUMENT);
  /* integer data, an unknown reduction, neither lengths nor offsets: fall back. */
  in[0] = tt_value(&xi.view);
  CHECK_CODE(fw->check(fw, &node), TPU_CODE_UNIMPLEMENTED);
  in[0] = tt_value(&x.view);
  attrs[0] = tt_str("median");
  node = tt_node(in, 3, &y.view, 1, attrs, 4);
  CHECK_CODE(fw->check(fw, &node), TPU_CODE_UNIMPLEMENTED);
  attrs[0] = tt_str("sum");
  in[1] = tt_value(NULL);
  node = tt_node(in, 3, &y.view, 1, attrs, 4);
  CHECK_CODE(fw->check(fw, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&x), tt_free(&y), tt_free(&l), tt_free(&xi);
}
