/* test_softmax.c — the softmax family against its reference kernel.
 *
 * softmax_cases: (op, dtype, shape, layout, dim, ...) through infer, the
 * optimised kernel and the reference; the shapes cover rows along the
 * innermost dim, blocked rows (dim slower than the others), long rows
 * streamed in chunks, transposed/sliced/broadcast inputs, strided outputs,
 * 0-dim and empty tensors. softmax_semantics pins values, NaN/-inf
 * behaviour, output dtypes and fallbacks.
 */
#include "kernels/nn/softmax.h"

#include "kernel_test_util.h"

typedef struct softmax_case {
  const char* op;
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t sizes[4];
  tt_layout_t layout;
  int64_t dim;
  bool half_to_float;      /* forward */
  tpu_dtype_t input_dtype; /* backward; INVALID: same as grad */
  bool strided_out;
  double nan_rate;
} softmax_case_t;

#define F32 TPU_DTYPE_F32
#define F64 TPU_DTYPE_F64
#define F16 TPU_DTYPE_F16
#define BF16 TPU_DTYPE_BF16
#define SAME TPU_DTYPE_INVALID

static const softmax_case_t k_cases[] = {
    {"softmax", F32, 2, {5, 7}, TT_CONTIG, 1, false, SAME, false, 0},
    {"softmax", F32, 2, {5, 7}, TT_CONTIG, 0, false, SAME, true, 0},
    {"softmax", F64, 3, {3, 4, 5}, TT_REVERSED, 1, false, SAME, false, 0},
    {"softmax", F16, 4, {2, 3, 6, 7}, TT_CONTIG, 1, false, SAME, false, 0},
    {"softmax", F16, 2, {6, 9}, TT_CONTIG, -1, true, SAME, false, 0},
    {"softmax", BF16, 3, {4, 70, 3}, TT_GAPS, -2, false, SAME, false, 0},
    {"softmax", F32, 2, {3, 5000}, TT_CONTIG, 1, false, SAME, false, 0.0002},
    {"softmax", F32, 3, {2, 3000, 70}, TT_CONTIG, 1, false, SAME, true, 0},
    {"softmax", F32, 2, {4, 9}, TT_BROADCAST, 1, false, SAME, false, 0},
    {"softmax", F32, 2, {4, 9}, TT_BROADCAST, 0, false, SAME, false, 0},
    {"softmax", F32, 0, {0}, TT_CONTIG, 0, false, SAME, false, 0},
    {"softmax", F32, 2, {0, 4}, TT_CONTIG, 1, false, SAME, false, 0},
    {"softmax", F32, 3, {64, 64, 8}, TT_CONTIG, 2, false, SAME, false, 0.01},
    {"log_softmax", F32, 2, {5, 7}, TT_CONTIG, 1, false, SAME, false, 0},
    {"log_softmax", F64, 3, {3, 4, 5}, TT_REVERSED, 0, false, SAME, true, 0},
    {"log_softmax", F16, 2, {6, 300}, TT_CONTIG, 0, true, SAME, false, 0},
    {"log_softmax", BF16, 2, {33, 2500}, TT_GAPS, 1, false, SAME, false, 0},
    {"log_softmax", F32, 3, {2, 3000, 70}, TT_REVERSED, 1, false, SAME, false, 0},
    {"log_softmax", F32, 0, {0}, TT_CONTIG, -1, false, SAME, false, 0},
    {"softmax_backward", F32, 2, {5, 7}, TT_CONTIG, 1, false, SAME, false, 0},
    {"softmax_backward", F64, 3, {3, 4, 5}, TT_REVERSED, 1, false, SAME, true, 0},
    {"softmax_backward", F32, 2, {6, 9}, TT_CONTIG, 0, false, F16, false, 0},
    {"softmax_backward", BF16, 3, {2, 3000, 70}, TT_CONTIG, 1, false, SAME, false, 0},
    {"softmax_backward", F32, 2, {3, 5000}, TT_GAPS, -1, false, SAME, false, 0},
    {"log_softmax_backward", F32, 2, {5, 7}, TT_CONTIG, 1, false, SAME, false, 0},
    {"log_softmax_backward", F16, 4, {2, 3, 6, 7}, TT_REVERSED, 2, false, SAME, true, 0},
    {"log_softmax_backward", F32, 3, {2, 3000, 70}, TT_CONTIG, 1, false, SAME, false, 0},
    {"log_softmax_backward", F64, 2, {3, 5000}, TT_CONTIG, 1, false, SAME, false, 0},
    /* float32 last-dim rows (the SIMD fast paths), odd lengths */
    {"softmax", F32, 2, {9, 4099}, TT_CONTIG, 1, false, SAME, false, 0},
    {"log_softmax", F32, 3, {2, 5, 1001}, TT_CONTIG, -1, false, SAME, false, 0.001},
    {"softmax_backward", F32, 3, {4, 3, 1001}, TT_CONTIG, 2, false, SAME, false, 0},
    {"softmax_backward", F32, 2, {3, 1}, TT_CONTIG, 1, false, SAME, false, 0},
    {"log_softmax_backward", F32, 2, {7, 4099}, TT_CONTIG, -1, false, SAME, false, 0},
    {"log_softmax_backward", F32, 2, {7, 33}, TT_CONTIG, -1, false, SAME, true, 0},
    /* half-type last-dim rows on float32 copies (half_rows): on the stack,
     * and past HALF_ROW in per-task buffers */
    {"softmax", BF16, 2, {64, 300}, TT_CONTIG, 1, false, SAME, false, 0},
    {"log_softmax", F16, 3, {3, 4, 129}, TT_CONTIG, -1, false, SAME, false, 0.01},
    {"softmax_backward", BF16, 2, {17, 257}, TT_CONTIG, 1, false, SAME, false, 0},
    {"log_softmax_backward", F16, 2, {5, 1001}, TT_CONTIG, -1, false, SAME, false, 0},
    {"softmax", BF16, 2, {2, 5000}, TT_CONTIG, 1, false, SAME, false, 0},
    {"log_softmax_backward", BF16, 2, {3, 9000}, TT_CONTIG, 1, false, SAME, false, 0},
    /* forward rows in AVX-512 (softmax_rows512.c) and the portable loops:
     * whole vectors, tails, 1-element rows, NaNs, each dtype pair, half
     * rows past BUF (exp computed again) */
    {"softmax", F32, 4, {2, 4, 8, 64}, TT_CONTIG, -1, false, SAME, false, 0},
    {"softmax", F32, 2, {6, 1}, TT_CONTIG, 1, false, SAME, false, 0},
    {"log_softmax", F32, 2, {5, 1}, TT_CONTIG, 1, false, SAME, false, 0},
    {"softmax", F32, 2, {7, 17}, TT_CONTIG, 1, false, SAME, false, 0.02},
    {"softmax", F32, 2, {3, 33}, TT_CONTIG, 1, false, SAME, false, 0},
    {"log_softmax", F32, 2, {9, 256}, TT_CONTIG, 1, false, SAME, false, 0},
    {"log_softmax", F32, 2, {2, 4111}, TT_CONTIG, 1, false, SAME, false, 0},
    {"softmax", BF16, 4, {1, 4, 16, 64}, TT_CONTIG, -1, false, SAME, false, 0},
    {"softmax", BF16, 2, {5, 15}, TT_CONTIG, 1, false, SAME, false, 0.02},
    {"log_softmax", BF16, 2, {4, 1}, TT_CONTIG, 1, false, SAME, false, 0},
    {"log_softmax", BF16, 2, {3, 50257}, TT_CONTIG, 1, false, SAME, false, 0},
    {"softmax", BF16, 2, {2, 4113}, TT_CONTIG, 1, false, SAME, false, 0},
    {"softmax", F16, 3, {2, 3, 128}, TT_CONTIG, 2, false, SAME, false, 0},
    {"softmax", F16, 2, {3, 4099}, TT_CONTIG, 1, false, SAME, false, 0},
    {"log_softmax", F16, 2, {6, 31}, TT_CONTIG, 1, false, SAME, false, 0.02},
    {"softmax", F16, 2, {5, 70}, TT_CONTIG, 1, true, SAME, false, 0},
    {"log_softmax", F16, 2, {5, 19}, TT_CONTIG, 1, true, SAME, false, 0.02},
};

static void run_case(int index, const softmax_case_t* c) {
  const tpu_op_def_t* def = tt_def(c->op);
  if (!def) return;
  const softmax_impl_t* impl = (const softmax_impl_t*)def->impl;
  char what[96];
  snprintf(what, sizeof(what), "case %d (%s %s)", index, c->op, tpu_dtype_name(c->dtype));
  tt_t a = tt_make(c->dtype, c->ndim, c->sizes, c->layout);
  tt_t b = tt_make(c->dtype, c->ndim, c->sizes, TT_CONTIG);
  tpu_value_t inputs[2];
  tpu_attr_t attrs[2] = {tt_int(c->dim), tt_bool(c->half_to_float)};
  if (impl->backward) {
    /* grad_output (a) and the forward result (b): probabilities or their logs. */
    tt_fill(&a.view, -1, 1, 0);
    if (impl->log)
      tt_fill(&b.view, -6, 0, 0);
    else
      tt_fill(&b.view, 0, 1, 0);
    inputs[0] = tt_value(&a.view);
    inputs[1] = tt_value(&b.view);
    attrs[1] = c->input_dtype == SAME ? tt_dtype(c->dtype) : tt_dtype(c->input_dtype);
  } else {
    tt_fill(&a.view, -8, 8, c->nan_rate);
    inputs[0] = tt_value(&a.view);
  }
  tpu_view_t shape;
  tpu_node_t node = tt_node(inputs, impl->backward ? 2 : 1, NULL, 0, attrs, 2);
  CHECK_OK(def->check(def, &node));
  CHECK_OK(def->infer(def, &node, &shape));
  tt_t got = tt_like(&shape, c->strided_out ? TT_GAPS : TT_CONTIG);
  tt_t want = tt_like(&shape, TT_CONTIG);
  node.num_outputs = 1;
  node.outputs = &got.view;
  CHECK_OK(tt_run(def->kernel, def, &node));
  node.outputs = &want.view;
  CHECK_OK(tt_run(tpu_softmax_reference, def, &node));
  /* Half outputs may round either way of a tie between two double results. */
  tt_compare(what, &got.view, &want.view, tt_tol(shape.dtype) + 1e-12);
  tt_free(&got);
  tt_free(&want);
  tt_free(&a);
  tt_free(&b);
}

TEST(softmax_cases) {
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) run_case((int)i, &k_cases[i]);
}

/* The same cases with the AVX-512 forward rows off: the portable loops. */
TEST(softmax_cases_portable) {
  tpu_softmax_rows512_set_enabled(false);
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) run_case((int)i, &k_cases[i]);
  tpu_softmax_rows512_set_enabled(true);
}

/* Runs a forward op over a 1-D F32 row, returning up to 4 outputs. */
static void run_row(const char* op, int64_t n, const double* x, double* y) {
  const tpu_op_def_t* def = tt_def(op);
  if (!def) return;
  tt_t in = tt_make(F32, 1, &n, TT_CONTIG), out = tt_make(F32, 1, &n, TT_CONTIG);
  for (int64_t i = 0; i < n; ++i) tt_set(&in.view, i, x[i]);
  tpu_value_t v = tt_value(&in.view);
  tpu_attr_t attrs[2] = {tt_int(0), tt_bool(false)};
  tpu_node_t node = tt_node(&v, 1, &out.view, 1, attrs, 2);
  CHECK_OK(tt_run(def->kernel, def, &node));
  for (int64_t i = 0; i < n; ++i) y[i] = tt_get(&out.view, i);
  tt_free(&in);
  tt_free(&out);
}

/* Runs a backward op over one F32 row (grad g, forward output y) into gx. */
static void run_row_backward(const char* op, int64_t n, const double* g, const double* y,
                             double* gx) {
  const tpu_op_def_t* def = tt_def(op);
  if (!def) return;
  tt_t tg = tt_make(F32, 1, &n, TT_CONTIG), ty = tt_make(F32, 1, &n, TT_CONTIG);
  tt_t out = tt_make(F32, 1, &n, TT_CONTIG);
  for (int64_t i = 0; i < n; ++i) tt_set(&tg.view, i, g[i]), tt_set(&ty.view, i, y[i]);
  tpu_value_t v[2] = {tt_value(&tg.view), tt_value(&ty.view)};
  tpu_attr_t attrs[2] = {tt_int(0), tt_dtype(F32)};
  tpu_node_t node = tt_node(v, 2, &out.view, 1, attrs, 2);
  CHECK_OK(tt_run(def->kernel, def, &node));
  for (int64_t i = 0; i < n; ++i) gx[i] = tt_get(&out.view, i);
  tt_free(&tg);
  tt_free(&ty);
  tt_free(&out);
}

TEST(softmax_backward_rows) {
  /* log_softmax backward: gx = g - exp(y) sum(g), y outside the SIMD exp's
   * range (underflow, -inf) and NaN included; 20 elements so SIMD lanes run. */
  double g[20], y[20], gx[20];
  double s = 0;
  for (int i = 0; i < 20; ++i) g[i] = 0.25 * (i % 7) - 0.5, y[i] = -0.1 * i, s += g[i];
  y[3] = -100.0, y[5] = -INFINITY, y[17] = -88.5;
  run_row_backward("log_softmax_backward", 20, g, y, gx);
  for (int i = 0; i < 20; ++i) CHECK_NEAR(gx[i], g[i] - exp(y[i]) * s, 1e-5);
  y[9] = NAN;
  run_row_backward("log_softmax_backward", 20, g, y, gx);
  CHECK(isnan(gx[9]) && !isnan(gx[8]));
  /* softmax backward: gx = y (g - g.y); a NaN in g makes the row NaN */
  double d = 0;
  for (int i = 0; i < 20; ++i) y[i] = 0.05 * (i % 3), d += g[i] * y[i];
  run_row_backward("softmax_backward", 20, g, y, gx);
  for (int i = 0; i < 20; ++i) CHECK_NEAR(gx[i], y[i] * (g[i] - d), 1e-6);
  g[4] = NAN;
  run_row_backward("softmax_backward", 20, g, y, gx);
  CHECK(isnan(gx[1]) && isnan(gx[19]));
}

/* exp in the subnormal range: softmax of a row with a 0 (the maximum) keeps
 * exp(x) for x down to ~-103.9 as a subnormal float (PyTorch CPU does not
 * flush them), 0 below; log_softmax keeps x - log(sum). 21 elements: one
 * vector and a tail. Both the AVX-512 rows and the portable loops. */
TEST(softmax_subnormal_rows) {
  const double xs[21] = {0,   -1,  -20, -80, -86.5, -87.5, -88,       -90,  -95, -100, -102,
                         -103, -103.5, -103.9, -104.5, -110, -150, -1e30, -INFINITY, -60, -5};
  double want[21], s = 0, y[21];
  for (int i = 0; i < 21; ++i) s += exp(xs[i]);
  for (int i = 0; i < 21; ++i) want[i] = exp(xs[i]) / s;
  for (int pass = 0; pass < 2; ++pass) {
    tpu_softmax_rows512_set_enabled(pass == 0);
    run_row("softmax", 21, xs, y);
    for (int i = 0; i < 21; ++i) {
      /* normal results to ~2 ulp, subnormal ones to one subnormal step */
      double tol = want[i] >= 1.17549435e-38 ? 3e-7 * want[i] : 1.5 * 1.40129846e-45;
      if (!(fabs(y[i] - want[i]) <= tol))
        tpu_test_fail(__FILE__, __LINE__, "pass %d element %d (x %g): got %.9g, want %.9g", pass,
                      i, xs[i], y[i], want[i]);
    }
    CHECK(y[13] > 0 && y[14] == 0 && y[15] == 0 && y[17] == 0 && y[18] == 0);
    run_row("log_softmax", 21, xs, y);
    for (int i = 0; i < 21; ++i)
      if (i != 18) CHECK_NEAR(y[i], xs[i] - log(s), 1e-5 * (1 + fabs(xs[i])));
    CHECK(isinf(y[18]) && y[18] < 0);
  }
  tpu_softmax_rows512_set_enabled(true);
}

TEST(softmax_semantics) {
  double y[4];
  const double x[3] = {1, 2, 3}, big[2] = {1000, 1000}, ninf[2] = {-INFINITY, 0};
  const double all_ninf[2] = {-INFINITY, -INFINITY};
  run_row("softmax", 3, x, y);
  CHECK_NEAR(y[0], 0.09003057317, 1e-6);
  CHECK_NEAR(y[2], 0.66524095694, 1e-6);
  run_row("log_softmax", 3, x, y);
  CHECK_NEAR(y[0], -2.40760596444, 1e-6);
  run_row("softmax", 2, big, y);
  CHECK(y[0] == 0.5f && y[1] == 0.5f);
  run_row("log_softmax", 2, ninf, y);
  CHECK(isinf(y[0]) && y[0] < 0 && y[1] == 0);
  run_row("softmax", 2, all_ninf, y);
  CHECK(isnan(y[0]) && isnan(y[1]));

  /* Output dtypes and fallbacks. */
  int64_t sizes[2] = {2, 3};
  tt_t h = tt_make(F16, 2, sizes, TT_CONTIG), f = tt_make(F32, 2, sizes, TT_CONTIG);
  tt_t i = tt_make(TPU_DTYPE_I32, 2, sizes, TT_CONTIG);
  tpu_value_t vh = tt_value(&h.view), vf = tt_value(&f.view), vi = tt_value(&i.view);
  tpu_view_t shape;
  const tpu_op_def_t* sm = tt_def("softmax");
  tpu_attr_t attrs[2] = {tt_int(1), tt_bool(true)};
  tpu_node_t node = tt_node(&vh, 1, NULL, 0, attrs, 2);
  CHECK_OK(sm->infer(sm, &node, &shape));
  CHECK(shape.dtype == F32 && shape.ndim == 2 && shape.strides[0] == 3);
  node.inputs = &vf;
  CHECK_CODE(sm->check(sm, &node), TPU_CODE_UNIMPLEMENTED);
  node.attrs[1] = tt_bool(false);
  CHECK_OK(sm->check(sm, &node));
  node.inputs = &vi;
  CHECK_CODE(sm->check(sm, &node), TPU_CODE_UNIMPLEMENTED);
  node.inputs = &vf;
  node.attrs[0] = tt_int(2);
  softmax_args_t args;
  CHECK_CODE(tpu_softmax_parse(sm, &node, &args), TPU_CODE_INDEX_ERROR);
  CHECK_CODE(sm->infer(sm, &node, &shape), TPU_CODE_UNIMPLEMENTED);

  const tpu_op_def_t* bw = tt_def("softmax_backward");
  tpu_value_t gy[2] = {vf, vf};
  tpu_attr_t battrs[2] = {tt_int(0), tt_dtype(F16)};
  node = tt_node(gy, 2, NULL, 0, battrs, 2);
  CHECK_OK(bw->infer(bw, &node, &shape));
  CHECK(shape.dtype == F16);
  node.attrs[1] = tt_dtype(F64);
  CHECK_CODE(bw->check(bw, &node), TPU_CODE_UNIMPLEMENTED);
  gy[1] = vh;
  node.attrs[1] = tt_dtype(F32);
  CHECK_CODE(bw->check(bw, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&h);
  tt_free(&f);
  tt_free(&i);
}
