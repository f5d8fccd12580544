/* test_scan.c — the scan family against its reference kernel.
 *
 * scan_cases: (op, dtype, result dtype, shape, dim, layout) run through the
 * optimised kernel (both its lane and row paths: scans over outer and inner
 * dims) and the reference; integer results and cummax/cummin must be equal,
 * floating ones within the dtype's tolerance (the reference sums in long
 * double). scan_pinned checks values of CPU's rounding order; scan_semantics
 * pins dtypes and fallbacks; scan_logcumsumexp_complex checks complex
 * logcumsumexp against a plain running sum of exponentials (exp of each
 * result, as its imaginary part is only defined modulo 2 pi) and CPU's
 * special values.
 */
#include <complex.h>

#include "kernels/reduce/scan.h"

#include "kernel_test_util.h"

#define F32 TPU_DTYPE_F32
#define F64 TPU_DTYPE_F64
#define F16 TPU_DTYPE_F16
#define BF16 TPU_DTYPE_BF16
#define I64 TPU_DTYPE_I64
#define I32 TPU_DTYPE_I32
#define I8 TPU_DTYPE_I8
#define U8 TPU_DTYPE_U8
#define BOOL TPU_DTYPE_BOOL
#define NONE TPU_DTYPE_INVALID

typedef struct scan_case {
  const char* op;
  tpu_dtype_t dtype, out; /* out: the dtype= argument (NONE: absent) */
  int32_t ndim;
  int64_t sizes[3];
  int64_t dim;
  tt_layout_t layout;
  bool strided_out;
  double nan_rate;
} scan_case_t;

static const scan_case_t k_cases[] = {
    {"cumsum", F32, NONE, 2, {7, 50}, 1, TT_CONTIG, false, 0},
    {"cumsum", F32, NONE, 2, {70, 600}, 0, TT_CONTIG, true, 0},
    {"cumsum", F64, NONE, 3, {3, 40, 5}, 1, TT_REVERSED, false, 0},
    {"cumsum", I32, NONE, 2, {9, 2000}, 1, TT_TRANSPOSED, false, 0},
    {"cumsum", I8, I8, 2, {30, 9}, 0, TT_CONTIG, false, 0},
    {"cumsum", BOOL, NONE, 1, {33}, 0, TT_CONTIG, false, 0},
    {"cumsum", F16, NONE, 2, {5, 60}, 1, TT_PADDED, true, 0},
    {"cumsum", BF16, F32, 2, {40, 6}, 0, TT_GAPS, false, 0},
    {"cumsum", F32, NONE, 0, {0}, 0, TT_CONTIG, false, 0},
    {"cumsum", F32, NONE, 2, {0, 5}, 1, TT_CONTIG, false, 0},
    {"cumprod", F32, NONE, 2, {6, 30}, 1, TT_CONTIG, false, 0},
    {"cumprod", F64, NONE, 2, {30, 6}, 0, TT_TRANSPOSED, false, 0},
    {"cumprod", I64, NONE, 2, {4, 20}, 1, TT_CONTIG, true, 0},
    {"cumprod", U8, NONE, 2, {20, 4}, 0, TT_BROADCAST, false, 0},
    {"cummax_helper", F32, NONE, 2, {6, 40}, 1, TT_CONTIG, false, 0.05},
    {"cummax_helper", TPU_DTYPE_I16, NONE, 2, {40, 6}, 0, TT_TRANSPOSED, true, 0},
    {"cummin_helper", BF16, NONE, 3, {2, 30, 3}, 1, TT_REVERSED, false, 0.05},
    {"cummin_helper", BOOL, NONE, 1, {20}, 0, TT_CONTIG, false, 0},
    {"cummax_helper", F64, NONE, 2, {700, 3}, 0, TT_CONTIG, false, 0.01},
    {"logcumsumexp", F32, NONE, 2, {5, 70}, 1, TT_CONTIG, false, 0},
    {"logcumsumexp", F64, NONE, 2, {70, 5}, 0, TT_CONTIG, true, 0.02},
    {"logcumsumexp", F16, NONE, 2, {9, 20}, 1, TT_TRANSPOSED, false, 0},
};

TEST(scan_cases) {
  for (size_t ci = 0; ci < sizeof(k_cases) / sizeof(k_cases[0]); ++ci) {
    const scan_case_t* c = &k_cases[ci];
    const tpu_op_def_t* def = tt_def(c->op);
    if (!def) continue;
    char what[96];
    snprintf(what, sizeof(what), "case %zu (%s %s)", ci, c->op, tpu_dtype_name(c->dtype));
    tt_t x = tt_make(c->dtype, c->ndim, c->sizes, c->layout);
    bool prod = strcmp(c->op, "cumprod") == 0;
    if (tpu_dtype_is_floating(c->dtype)) tt_fill(&x.view, prod ? 0.5 : -3, prod ? 1.5 : 3, c->nan_rate);
    else tt_fill_ints(&x.view, 5 + ci, c->dtype == BOOL ? 0 : (prod ? 1 : -4), c->dtype == BOOL ? 1 : 4);
    tpu_value_t in[1] = {tt_value(&x.view)};
    tpu_attr_t at[2] = {tt_int(c->dim), c->out == NONE ? tt_none() : tt_dtype(c->out)};
    int32_t nat = tpu_spec_count(def->attrs);
    tpu_node_t node = tt_node(in, 1, NULL, 0, at, nat);
    tpu_view_t shapes[2];
    CHECK_OK(def->infer(def, &node, shapes));
    int nout = tpu_spec_count(def->outputs);
    tt_t got[2], want[2];
    tpu_view_t gv[2], wv[2];
    for (int i = 0; i < nout; ++i) {
      got[i] = tt_like(&shapes[i], c->strided_out ? TT_GAPS : TT_CONTIG);
      want[i] = tt_like(&shapes[i], TT_CONTIG);
      gv[i] = got[i].view;
      wv[i] = want[i].view;
    }
    node = tt_node(in, 1, gv, nout, at, nat);
    CHECK_OK(def->check(def, &node));
    CHECK_OK(tt_run(def->kernel, def, &node));
    node = tt_node(in, 1, wv, nout, at, nat);
    CHECK_OK(tt_run(tpu_scan_reference, def, &node));
    double tol = tt_tol(shapes[0].dtype);
    if (tpu_dtype_size(shapes[0].dtype) == 2) tol *= 4; /* per-step rounding of half results */
    tt_compare(what, &gv[0], &wv[0], nout == 2 ? 0.0 : tol);
    if (nout == 2) tt_compare(what, &gv[1], &wv[1], 0.0);
    for (int i = 0; i < nout; ++i) {
      tt_free(&got[i]);
      tt_free(&want[i]);
    }
    tt_free(&x);
  }
}

/* float32 cumsum accumulates in float64 (CPU's acc_type): 1 + 1e-8 * k stays
 * exact in the sum and rounds once per output. float16 accumulates in float32. */
TEST(scan_pinned) {
  const tpu_op_def_t* def = tt_def("cumsum");
  if (!def) return;
  int64_t n = 4;
  tt_t x = tt_make(F32, 1, &n, TT_CONTIG), y = tt_make(F32, 1, &n, TT_CONTIG);
  float xs[4] = {1.0f, 3e-8f, 3e-8f, 3e-8f};
  memcpy(x.mem, xs, sizeof(xs));
  tpu_value_t in[1] = {tt_value(&x.view)};
  tpu_attr_t at[2] = {tt_int(0), tt_none()};
  tpu_node_t node = tt_node(in, 1, &y.view, 1, at, 2);
  CHECK_OK(tt_run(def->kernel, def, &node));
  /* In float32 each 3e-8 would vanish; in float64 the third reaches 9e-8 >
   * half an ulp of 1 (5.96e-8), so the last output rounds up. */
  CHECK(((float*)y.mem)[1] == 1.0f);
  CHECK(((float*)y.mem)[3] == 1.0f + 1.1920929e-7f);
  tt_free(&x);
  tt_free(&y);
}

TEST(scan_semantics) {
  const tpu_op_def_t* cs = tt_def("cumsum");
  const tpu_op_def_t* lc = tt_def("logcumsumexp");
  const tpu_op_def_t* cm = tt_def("cummax_helper");
  if (!cs || !lc || !cm) return;
  int64_t s[2] = {3, 5};
  tt_t xi = tt_make(I32, 2, s, TT_CONTIG), xh = tt_make(F16, 2, s, TT_CONTIG);
  tpu_value_t in[1] = {tt_value(&xi.view)};
  tpu_attr_t at[2] = {tt_int(-1), tt_none()};
  tpu_node_t node = tt_node(in, 1, NULL, 0, at, 2);
  tpu_view_t shapes[2];
  CHECK_OK(cs->infer(cs, &node, shapes));
  CHECK(shapes[0].dtype == I64); /* integer cumsum gives int64 */
  node.attrs[1] = tt_dtype(F16);
  CHECK_OK(cs->infer(cs, &node, shapes));
  CHECK(shapes[0].dtype == F16);
  node.attrs[0] = tt_int(2);
  CHECK_CODE(cs->check(cs, &node), TPU_CODE_UNIMPLEMENTED);
  node = tt_node(in, 1, NULL, 0, at, 1);
  CHECK_CODE(lc->check(lc, &node), TPU_CODE_UNIMPLEMENTED); /* integers: not on CPU */
  in[0] = tt_value(&xh.view);
  CHECK_OK(cm->infer(cm, &node, shapes));
  CHECK(shapes[0].dtype == F16 && shapes[1].dtype == I64);
  tt_free(&xi);
  tt_free(&xh);
}

TEST(scan_logcumsumexp_complex) {
  const tpu_op_def_t* lc = tt_def("logcumsumexp");
  const tpu_dtype_t dts[2] = {TPU_DTYPE_C64, TPU_DTYPE_C128};
  for (int t = 0; t < 2; ++t)
    for (int64_t dim = 0; dim < 2; ++dim) {
      int64_t s[2] = {6, 7};
      tt_t x = tt_make(dts[t], 2, s, TT_PADDED), y = tt_make(dts[t], 2, s, TT_CONTIG);
      double* xr = malloc(sizeof(double) * 2 * 42);
      for (int64_t k = 0; k < 42; ++k) {
        xr[2 * k] = 4.0 * tt_rand() - 2.0, xr[2 * k + 1] = 8.0 * tt_rand() - 4.0;
        tpu_convert(view_at(&x.view, tt_offset(&x.view, k)), dts[t], 1, &xr[2 * k],
                    TPU_DTYPE_C128, 1, 1);
        /* the reference reads the values as stored (complex64: rounded) */
        tpu_convert(&xr[2 * k], TPU_DTYPE_C128, 1, view_at(&x.view, tt_offset(&x.view, k)),
                    dts[t], 1, 1);
      }
      tpu_value_t in[1] = {tt_value(&x.view)};
      tpu_attr_t at[1] = {tt_int(dim)};
      tpu_node_t node = tt_node(in, 1, &y.view, 1, at, 1);
      node.op = tpu_op_lookup("logcumsumexp");
      CHECK_OK(tpu_op_check(&node));
      CHECK_OK(tt_run(lc->kernel, lc, &node));
      double tol = t == 0 ? 1e-5 : 1e-12;
      for (int64_t k = 0; k < 42; ++k) {
        int64_t i = k / 7, j = k % 7, n = dim == 0 ? i : j;
        double complex want = 0;
        for (int64_t m = 0; m <= n; ++m) {
          int64_t e = dim == 0 ? m * 7 + j : i * 7 + m;
          want += cexp(CMPLX(xr[2 * e], xr[2 * e + 1]));
        }
        double g[2];
        tpu_convert(g, TPU_DTYPE_C128, 1, view_at(&y.view, tt_offset(&y.view, k)), dts[t], 1, 1);
        double complex got = cexp(CMPLX(g[0], g[1]));
        if (cabs(got - want) > tol * 10 * (1.0 + cabs(want)))
          tpu_test_fail(__FILE__, __LINE__, "dtype %d dim %lld elem %lld: exp %g%+gi, want %g%+gi",
                        dts[t], (long long)dim, (long long)k, creal(got), cimag(got),
                        creal(want), cimag(want));
      }
      free(xr);
      tt_free(&x), tt_free(&y);
    }
  /* CPU's special values: equal -inf real parts keep the first (an imaginary part
   * that does not matter), equal +inf ones log(exp + exp), NaN in either part is
   * infectious. */
  const double v[5][2] = {{-INFINITY, 1.0}, {-INFINITY, 2.0}, {1.0, NAN}, {3.0, 0.0}, {0.0, 0.0}};
  int64_t s1[1] = {5};
  tt_t x = tt_make(TPU_DTYPE_C128, 1, s1, TT_CONTIG), y = tt_make(TPU_DTYPE_C128, 1, s1, TT_CONTIG);
  memcpy(x.mem, v, sizeof(v));
  tpu_value_t in[1] = {tt_value(&x.view)};
  tpu_attr_t at[1] = {tt_int(0)};
  tpu_node_t node = tt_node(in, 1, &y.view, 1, at, 1);
  CHECK_OK(tt_run(lc->kernel, lc, &node));
  const double* o = (const double*)y.mem;
  CHECK(o[0] == -INFINITY && o[1] == 0.0); /* min of (-inf, 1) and the start (-inf, 0) */
  CHECK(o[2] == -INFINITY && o[3] == 0.0);
  for (int k = 2; k < 5; ++k) CHECK(isnan(o[2 * k]) && isnan(o[2 * k + 1]));
  tt_free(&x), tt_free(&y);
}
