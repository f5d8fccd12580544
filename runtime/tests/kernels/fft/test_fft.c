/* test_fft.c — the fft family against its O(n^2) reference.
 *
 * fft_lengths: 1-D c2c (both directions), r2c (onesided and two-sided) and
 * c2r for every length 1..64, primes, 1000 and 4096 (radix 2/3/4/5 stages,
 * odd and even real lengths, Bluestein), in float32 and float64, strided.
 * fft_cases: (op, dtype, shape, dims, normalization, layout) tables:
 * several dims in any order, every normalization, transposed, padded and
 * broadcast inputs, strided outputs. fft_semantics: what falls back.
 */
#include "kernels/fft/fft.h"

#include <stdio.h>

#include "kernel_test_util.h"

#define F32 TPU_DTYPE_F32
#define F64 TPU_DTYPE_F64
#define C64 TPU_DTYPE_C64
#define C128 TPU_DTYPE_C128

/* Fills both parts of a (complex or real) view. */
static void fill_parts(const tpu_view_t* v) {
  tpu_view_t re = fft_part_view(v, 0);
  tt_fill(&re, -2, 2, 0);
  if (tpu_dtype_is_complex(v->dtype)) {
    tpu_view_t im = fft_part_view(v, 1);
    tt_fill(&im, -2, 2, 0);
  }
}

/* max |got - want| over both parts, relative to the largest |want| (at least 1). */
static double max_err(const tpu_view_t* got, const tpu_view_t* want) {
  double worst = 0, scale = 1;
  int parts = tpu_dtype_is_complex(want->dtype) ? 2 : 1;
  for (int p = 0; p < parts; ++p) {
    tpu_view_t g = fft_part_view(got, p), w = fft_part_view(want, p);
    for (int64_t k = 0; k < tpu_view_numel(&w); ++k) {
      double a = tt_get(&g, k), b = tt_get(&w, k);
      double d = fabs(a - b);
      if (!(d <= worst)) worst = d; /* NaN wins */
      if (fabs(b) > scale) scale = fabs(b);
    }
  }
  return worst / scale;
}

/* Runs kernel and reference on one node; returns the relative error. */
static double run_case(const char* op, tpu_dtype_t dt, int32_t ndim, const int64_t* sizes,
                       int32_t ndims, const int64_t* dims, int64_t norm, int64_t flag,
                       tt_layout_t layout, bool strided_out) {
  const tpu_op_def_t* def = tt_def(op);
  if (!def) return INFINITY;
  tt_t x = tt_make(dt, ndim, sizes, layout);
  fill_parts(&x.view);
  tpu_value_t in[1] = {tt_value(&x.view)};
  tpu_attr_t at[3] = {tt_ints(ndims, dims), tt_int(norm),
                      strcmp(op, "fft_c2r") == 0 ? tt_int(flag) : tt_bool(flag != 0)};
  tpu_node_t node = tt_node(in, 1, NULL, 0, at, 3);
  tpu_view_t shape;
  tpu_status_t s = def->infer(def, &node, &shape);
  if (s != TPU_OK) {
    tpu_test_fail(__FILE__, __LINE__, "%s: infer: %s", op, tpu_status_message(s));
    tpu_status_free(s);
    tt_free(&x);
    return INFINITY;
  }
  tt_t got = tt_like(&shape, strided_out ? TT_PADDED : TT_CONTIG);
  tt_t want = tt_like(&shape, TT_CONTIG);
  node = tt_node(in, 1, &got.view, 1, at, 3);
  CHECK_OK(def->check(def, &node));
  CHECK_OK(tt_run(def->kernel, def, &node));
  node = tt_node(in, 1, &want.view, 1, at, 3);
  CHECK_OK(tt_run(tpu_fft_reference, def, &node));
  double e = max_err(&got.view, &want.view);
  tt_free(&x);
  tt_free(&got);
  tt_free(&want);
  return e;
}

static double tol_for(tpu_dtype_t dt, int64_t n) {
  double lg = log2((double)(n > 2 ? n : 2));
  return tpu_dtype_part(dt) == F64 ? 1e-12 * lg : 3e-6 * lg;
}

TEST(fft_lengths) {
  static const int64_t extra[] = {97, 101, 127, 210, 257, 1000, 1009, 4096};
  int64_t lens[64 + 8];
  int nl = 0;
  for (int64_t n = 1; n <= 64; ++n) lens[nl++] = n;
  for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); ++i) lens[nl++] = extra[i];
  for (int li = 0; li < nl; ++li) {
    int64_t n = lens[li];
    for (int prec = 0; prec < 2; ++prec) {
      if (n == 4096 && prec == 0) continue; /* the reference is O(n^2): once is enough */
      tpu_dtype_t rd = prec ? F64 : F32, cd = prec ? C128 : C64;
      int64_t d0 = 1;
      int64_t sz[2] = {2, n};
      tt_layout_t lay = (n % 3 == 0) ? TT_PADDED : (n % 3 == 1 ? TT_CONTIG : TT_TRANSPOSED);
      double tol = tol_for(rd, n);
      char what[64];
      double e;
      e = run_case("fft_c2c", cd, 2, sz, 1, &d0, 0, 1, lay, n % 2 == 0);
      snprintf(what, sizeof(what), "c2c fwd n=%lld %s", (long long)n, tpu_dtype_name(cd));
      if (!(e <= tol)) tpu_test_fail(__FILE__, __LINE__, "%s: error %g", what, e);
      e = run_case("fft_c2c", cd, 2, sz, 1, &d0, 2, 0, lay, false);
      if (!(e <= tol)) tpu_test_fail(__FILE__, __LINE__, "c2c bwd n=%lld: error %g", (long long)n, e);
      e = run_case("fft_r2c", rd, 2, sz, 1, &d0, 1, 1, lay, n % 2 == 1);
      if (!(e <= tol)) tpu_test_fail(__FILE__, __LINE__, "r2c n=%lld %s: error %g", (long long)n, tpu_dtype_name(rd), e);
      e = run_case("fft_r2c", rd, 2, sz, 1, &d0, 0, 0, lay, false);
      if (!(e <= tol)) tpu_test_fail(__FILE__, __LINE__, "r2c two-sided n=%lld: error %g", (long long)n, e);
      int64_t hs[2] = {2, n / 2 + 1 + (n % 4 == 0 ? 2 : 0)}; /* extra inputs are ignored */
      e = run_case("fft_c2r", cd, 2, hs, 1, &d0, 2, n, lay, n % 2 == 0);
      if (!(e <= tol)) tpu_test_fail(__FILE__, __LINE__, "c2r n=%lld %s: error %g", (long long)n, tpu_dtype_name(cd), e);
    }
  }
}

typedef struct fft_case {
  const char* op;
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t sizes[4];
  int32_t ndims;
  int64_t dims[4];
  int64_t norm, flag; /* onesided / forward / last_dim_size */
  tt_layout_t layout;
  bool strided_out;
} fft_case_t;

static const fft_case_t k_cases[] = {
    {"fft_c2c", C64, 2, {12, 10}, 2, {0, 1}, 0, 1, TT_CONTIG, false},
    {"fft_c2c", C128, 3, {3, 7, 8}, 2, {-1, 1}, 1, 0, TT_TRANSPOSED, true},
    {"fft_c2c", C128, 3, {4, 5, 6}, 3, {2, 0, 1}, 2, 1, TT_REVERSED, false},
    {"fft_c2c", C64, 3, {3, 9, 1}, 1, {1}, 0, 1, TT_BROADCAST, true},
    {"fft_c2c", C64, 2, {0, 8}, 1, {1}, 0, 1, TT_CONTIG, false},
    {"fft_r2c", F32, 2, {16, 18}, 2, {0, 1}, 0, 1, TT_CONTIG, false},
    {"fft_r2c", F64, 3, {5, 6, 11}, 2, {2, 0}, 1, 1, TT_PADDED, true},
    {"fft_r2c", F64, 3, {5, 6, 7}, 3, {0, 1, 2}, 2, 0, TT_GAPS, false},
    {"fft_r2c", F32, 2, {4, 33}, 1, {1}, 0, 1, TT_BROADCAST, false},
    {"fft_r2c", F64, 2, {9, 4}, 2, {1, 0}, 0, 1, TT_TRANSPOSED, true},
    {"fft_c2r", C64, 2, {10, 9}, 2, {0, 1}, 0, 16, TT_CONTIG, false},
    {"fft_c2r", C128, 3, {3, 5, 6}, 2, {2, 1}, 2, 9, TT_TRANSPOSED, true},
    {"fft_c2r", C128, 3, {4, 6, 5}, 3, {1, 2, 0}, 1, 7, TT_PADDED, false},
    {"fft_c2r", C64, 2, {6, 3}, 1, {-1}, 0, 4, TT_BROADCAST, true},
};

TEST(fft_cases) {
  for (size_t ci = 0; ci < sizeof(k_cases) / sizeof(k_cases[0]); ++ci) {
    const fft_case_t* c = &k_cases[ci];
    int64_t n = 1;
    for (int32_t d = 0; d < c->ndim; ++d) n *= c->sizes[d] > 0 ? c->sizes[d] : 1;
    double e = run_case(c->op, c->dtype, c->ndim, c->sizes, c->ndims, c->dims, c->norm, c->flag,
                        c->layout, c->strided_out);
    if (!(e <= tol_for(c->dtype, n)))
      tpu_test_fail(__FILE__, __LINE__, "case %zu (%s %s): error %g", ci, c->op,
                    tpu_dtype_name(c->dtype), e);
  }
}

/* Arguments PyTorch's CPU kernels reject, half types and overlapping
 * outputs are refused (UNIMPLEMENTED: the CPU fallback raises or runs them);
 * rows without TPU_OP_COMPLEX never see complex operands. */
TEST(fft_semantics) {
  const tpu_op_def_t* r2c = tt_def("fft_r2c");
  const tpu_op_def_t* c2r = tt_def("fft_c2r");
  if (!r2c || !c2r) return;
  int64_t s[2] = {4, 6}, d1 = 1, dd[2] = {1, 1};
  tt_t xh = tt_make(TPU_DTYPE_F16, 2, s, TT_CONTIG), xc = tt_make(C64, 2, s, TT_CONTIG);
  tt_t xf = tt_make(F32, 2, s, TT_CONTIG);
  tpu_view_t shape;
  tpu_value_t in[1] = {tt_value(&xh.view)};
  tpu_attr_t at[3] = {tt_ints(1, &d1), tt_int(0), tt_bool(true)};
  tpu_node_t node = tt_node(in, 1, NULL, 0, at, 3);
  CHECK(tt_code(r2c->infer(r2c, &node, &shape)) == TPU_CODE_UNIMPLEMENTED); /* half */
  in[0] = tt_value(&xc.view);
  CHECK(tt_code(r2c->infer(r2c, &node, &shape)) == TPU_CODE_UNIMPLEMENTED); /* complex into r2c */
  in[0] = tt_value(&xf.view);
  node.attrs[0] = tt_ints(2, dd);
  CHECK(tt_code(r2c->infer(r2c, &node, &shape)) == TPU_CODE_UNIMPLEMENTED); /* repeated dim */
  node.attrs[0] = tt_ints(1, &d1);
  node.attrs[1] = tt_int(3);
  CHECK(tt_code(r2c->infer(r2c, &node, &shape)) == TPU_CODE_UNIMPLEMENTED); /* normalization */
  node.attrs[1] = tt_int(0);
  CHECK_OK(r2c->infer(r2c, &node, &shape));
  CHECK(shape.dtype == C64 && shape.sizes[1] == 4);
  in[0] = tt_value(&xc.view);
  node.attrs[2] = tt_int(20); /* needs 11 inputs along dim 1, has 6 */
  CHECK(tt_code(c2r->infer(c2r, &node, &shape)) == TPU_CODE_UNIMPLEMENTED);
  node.attrs[2] = tt_int(10);
  CHECK_OK(c2r->infer(c2r, &node, &shape));
  CHECK(shape.dtype == F32 && shape.sizes[1] == 10);
  /* An output overlapping the input is refused. */
  tpu_view_t out = shape;
  out.addr = xc.view.addr;
  tpu_attr_t at2[3] = {tt_ints(1, &d1), tt_int(0), tt_int(10)};
  node = tt_node(in, 1, &out, 1, at2, 3);
  CHECK(tt_code(c2r->check(c2r, &node)) == TPU_CODE_UNIMPLEMENTED);
  /* Complex views reach no kernel without complex math: erf has none. */
  tpu_op_id_t erf = tpu_op_lookup("erf");
  if (erf >= 0) {
    tpu_view_t o = xc.view;
    node = tt_node(in, 1, &o, 1, NULL, 0);
    node.op = erf;
    CHECK(tt_code(tpu_op_check(&node)) == TPU_CODE_UNIMPLEMENTED);
  }
  tt_free(&xh);
  tt_free(&xc);
  tt_free(&xf);
}

/* Long lengths (stages split over the pool): a few bins against direct
 * sums, and forward then backward gives n x. */
TEST(fft_long) {
  const tpu_op_def_t* def = tt_def("fft_c2c");
  if (!def) return;
  static const int64_t lens[] = {1 << 16, 3 * 5 * (1 << 12), 40009};
  for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); ++li) {
    int64_t n = lens[li], d0 = 0;
    tt_t x = tt_make(C128, 1, &n, TT_CONTIG), y = tt_make(C128, 1, &n, TT_CONTIG);
    tt_t z = tt_make(C128, 1, &n, TT_CONTIG);
    fill_parts(&x.view);
    tpu_value_t in[1] = {tt_value(&x.view)};
    tpu_attr_t at[3] = {tt_ints(1, &d0), tt_int(0), tt_bool(true)};
    tpu_node_t node = tt_node(in, 1, &y.view, 1, at, 3);
    CHECK_OK(tt_run(def->kernel, def, &node));
    const double* xs = (const double*)x.mem;
    const double* ys = (const double*)y.mem;
    static const int64_t bins[] = {0, 1, 7, 12345, 40008};
    for (size_t b = 0; b < sizeof(bins) / sizeof(bins[0]); ++b) {
      int64_t k = bins[b] % n;
      double re = 0, im = 0;
      for (int64_t t = 0; t < n; ++t) {
        double ang = -2.0 * M_PI * (double)((k * t) % n) / (double)n;
        re += xs[2 * t] * cos(ang) - xs[2 * t + 1] * sin(ang);
        im += xs[2 * t] * sin(ang) + xs[2 * t + 1] * cos(ang);
      }
      if (!(fabs(ys[2 * k] - re) + fabs(ys[2 * k + 1] - im) < 1e-8 * sqrt((double)n)))
        tpu_test_fail(__FILE__, __LINE__, "n=%lld bin %lld: (%g, %g) vs (%g, %g)", (long long)n,
                      (long long)k, ys[2 * k], ys[2 * k + 1], re, im);
    }
    in[0] = tt_value(&y.view);
    at[2] = tt_bool(false);
    node = tt_node(in, 1, &z.view, 1, at, 3);
    CHECK_OK(tt_run(def->kernel, def, &node));
    const double* zs = (const double*)z.mem;
    double worst = 0;
    for (int64_t t = 0; t < 2 * n; ++t) worst = fmax(worst, fabs(zs[t] / (double)n - xs[t]));
    if (!(worst < 1e-12)) tpu_test_fail(__FILE__, __LINE__, "n=%lld round trip: %g", (long long)n, worst);
    tt_free(&x);
    tt_free(&y);
    tt_free(&z);
  }
}

/* TPU_OP_COMPLEX_AS_REAL rows (mul, zero): complex * real runs on the real
 * views, shapes come back complex; complex * complex is not of that form
 * (test_elementwise_complex.c checks it). */
TEST(fft_complex_as_real_rows) {
  tpu_op_id_t mul = tpu_op_lookup("mul"), zero = tpu_op_lookup("zero");
  if (mul < 0 || zero < 0) return;
  int64_t s[2] = {3, 5}, s1 = 5;
  tt_t x = tt_make(C64, 2, s, TT_TRANSPOSED), y = tt_make(C64, 2, s, TT_CONTIG);
  tt_t r = tt_make(F32, 1, &s1, TT_GAPS);
  fill_parts(&x.view);
  tt_fill(&r.view, -2, 2, 0);
  tpu_value_t in[2] = {tt_value(&x.view), tt_value(&r.view)};
  tpu_node_t node = tt_node(in, 2, NULL, 0, NULL, 0);
  node.op = mul;
  node.num_outputs = 1;
  tpu_view_t shape;
  CHECK_OK(tpu_op_infer(&node, &shape));
  CHECK(shape.dtype == C64 && shape.ndim == 2 && shape.sizes[1] == 5 && shape.strides[0] == 5);
  node = tt_node(in, 2, &y.view, 1, NULL, 0);
  node.op = mul;
  CHECK_OK(tpu_op_check(&node));
  tpu_node_t rn;
  tpu_value_t rin[2];
  tpu_view_t rout[1];
  CHECK(tpu_node_complex_as_real(&node, &rn, rin, rout));
  const tpu_op_def_t* def = tpu_op_def(mul);
  CHECK_OK(tt_run(def->kernel, def, &rn));
  tpu_view_t xr = fft_part_view(&x.view, 0), xi = fft_part_view(&x.view, 1);
  tpu_view_t yr = fft_part_view(&y.view, 0), yi = fft_part_view(&y.view, 1);
  for (int64_t k = 0; k < 15; ++k) {
    double f = tt_get(&r.view, k % 5);
    CHECK(tt_get(&yr, k) == (double)(float)(tt_get(&xr, k) * f));
    CHECK(tt_get(&yi, k) == (double)(float)(tt_get(&xi, k) * f));
  }
  in[1] = tt_value(&y.view); /* complex * complex is not real-linear: mul's own path */
  CHECK(!tpu_node_complex_as_real(&node, &rn, rin, rout));
  CHECK_OK(tpu_op_check(&node));
  node = tt_node(in, 1, &x.view, 1, NULL, 0);
  node.op = zero;
  CHECK_OK(tpu_op_check(&node));
  CHECK(tpu_node_complex_as_real(&node, &rn, rin, rout));
  def = tpu_op_def(zero);
  CHECK_OK(tt_run(def->kernel, def, &rn));
  for (int64_t k = 0; k < 15; ++k) CHECK(tt_get(&xr, k) == 0 && tt_get(&xi, k) == 0);
  tt_free(&x);
  tt_free(&y);
  tt_free(&r);
}
