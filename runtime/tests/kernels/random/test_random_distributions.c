/* test_random_distributions.c — the random family's distributions beyond uniform/normal:
 * exponential, geometric, cauchy, log_normal (in place on self), normal with
 * tensor mean and/or std, bernoulli with tensor probabilities. Kernels equal
 * the element-by-element reference bit for bit (strided outputs, broadcast
 * parameters, several tiles); the distributions have their moments; the
 * same seed gives the same values; PyTorch's argument errors fall back. */
#include "kernels/random/random.h"
#include "kernel_test_util.h"

static tpu_status_t run2(const char* op, tpu_value_t* in, int32_t nin, const tpu_attr_t* attrs,
                         int32_t na, tpu_view_t* out, bool reference) {
  const tpu_op_def_t* def = tt_def(op);
  if (!def) return tpu_status_make(TPU_CODE_INTERNAL, "no op %s", op);
  tpu_node_t node = tt_node(in, nin, out, 1, attrs, na);
  TPU_RETURN_IF_ERROR(def->check(def, &node));
  if (reference) return tpu_random_reference(def, &node);
  tpu_exec_ctx_t ctx = {0};
  return def->kernel(def, &node, &ctx);
}

/* Kernel vs reference on one in-place distribution row: attrs (a, b) lead. */
static void same_as_reference(const char* op, tpu_dtype_t dt, int32_t nlead, double a, double b,
                              tt_layout_t layout, uint64_t seed) {
  int64_t sizes[2] = {37, 301};
  tt_t got = tt_make(dt, 2, sizes, layout), want = tt_make(dt, 2, sizes, TT_CONTIG);
  tpu_attr_t attrs[4];
  const double lead[2] = {a, b};
  for (int32_t i = 0; i < nlead; ++i) attrs[i] = tt_float(lead[i]);
  attrs[nlead] = tt_int((int64_t)seed);
  attrs[nlead + 1] = tt_int(77);
  tpu_value_t in = tt_value(&got.view);
  CHECK_OK(run2(op, &in, 1, attrs, nlead + 2, &got.view, false));
  tpu_value_t in2 = tt_value(&want.view);
  CHECK_OK(run2(op, &in2, 1, attrs, nlead + 2, &want.view, true));
  bool same = true;
  for (int64_t k = 0; k < tpu_view_numel(&want.view) && same; ++k)
    same = memcmp(tt_elem(&got.view, k), tt_elem(&want.view, k), tpu_dtype_size(dt)) == 0;
  if (!same) tpu_test_fail(__FILE__, __LINE__, "%s %s differs", op, tpu_dtype_name(dt));
  tt_free(&got);
  tt_free(&want);
}

TEST(random_dists_match_reference_bit_for_bit) {
  same_as_reference("exponential", TPU_DTYPE_F32, 1, 2.0, 0, TT_TRANSPOSED, 1);
  same_as_reference("exponential", TPU_DTYPE_BF16, 1, 0.5, 0, TT_CONTIG, 2);
  same_as_reference("geometric", TPU_DTYPE_I64, 1, 0.3, 0, TT_PADDED, 3);
  same_as_reference("geometric", TPU_DTYPE_F16, 1, 0.7, 0, TT_CONTIG, 4);
  same_as_reference("cauchy", TPU_DTYPE_F64, 2, 1.0, 3.0, TT_CONTIG, 5);
  same_as_reference("log_normal", TPU_DTYPE_F32, 2, 0.0, 0.5, TT_GAPS, 6);
  /* normal with tensors: mean [37, 301] with a std tensor broadcast [301],
   * and a number mean with a std tensor. */
  int64_t s2[2] = {37, 301}, s1[1] = {301};
  tt_t mean = tt_make(TPU_DTYPE_F32, 2, s2, TT_TRANSPOSED), std = tt_make(TPU_DTYPE_F32, 1, s1, TT_CONTIG);
  tt_fill(&mean.view, -5, 5, 0);
  tt_fill(&std.view, 0, 3, 0);
  tpu_value_t both[2] = {tt_value(&mean.view), tt_value(&std.view)};
  tpu_value_t num_std[2] = {{.kind = TPU_VALUE_SCALAR, .u.scalar = {.dtype = TPU_DTYPE_F64, .v.f = 2.0}},
                            tt_value(&std.view)};
  tpu_attr_t so[2] = {tt_int(11), tt_int(5)};
  for (int v = 0; v < 2; ++v) {
    tpu_value_t* in = v ? num_std : both;
    int64_t* sz = v ? s1 : s2;
    int32_t nd = v ? 1 : 2;
    tt_t got = tt_make(TPU_DTYPE_F32, nd, sz, TT_GAPS), want = tt_make(TPU_DTYPE_F32, nd, sz, TT_CONTIG);
    CHECK_OK(run2("normal_tensor", in, 2, so, 2, &got.view, false));
    CHECK_OK(run2("normal_tensor", in, 2, so, 2, &want.view, true));
    CHECK(tt_max_rel_diff(&got.view, &want.view) == 0);
    tt_free(&got), tt_free(&want);
  }
  /* bernoulli(self) and bernoulli_(self, p) with p broadcast. */
  tt_t p = tt_make(TPU_DTYPE_F64, 2, s2, TT_CONTIG);
  tt_fill(&p.view, 0, 1, 0);
  for (int v = 0; v < 2; ++v) {
    tt_t got = tt_make(v ? TPU_DTYPE_BOOL : TPU_DTYPE_F64, 2, s2, TT_PADDED);
    tt_t want = tt_make(got.view.dtype, 2, s2, TT_CONTIG);
    tpu_value_t in[2] = {tt_value(v ? &got.view : &p.view), tt_value(v ? &std.view : &p.view)};
    if (v) tt_fill(&std.view, 0, 1, 0);
    const char* op = v ? "bernoulli_tensor" : "bernoulli_self";
    CHECK_OK(run2(op, in, v ? 2 : 1, so, 2, &got.view, false));
    in[0] = tt_value(v ? &want.view : &p.view);
    CHECK_OK(run2(op, in, v ? 2 : 1, so, 2, &want.view, true));
    CHECK(tt_max_rel_diff(&got.view, &want.view) == 0);
    tt_free(&got), tt_free(&want);
  }
  tt_free(&p), tt_free(&mean), tt_free(&std);
}

/* Moments of n draws of an in-place row with leading attrs (a, b). */
static void draw_moments(const char* op, tpu_dtype_t dt, int32_t nlead, double a, double b,
                         double* mean, double* var, double* lo, double* frac_below, double at) {
  int64_t n = 400000;
  tt_t t = tt_make(dt, 1, &n, TT_CONTIG);
  tpu_attr_t attrs[4] = {tt_float(a), tt_float(b)};
  attrs[nlead] = tt_int(4242);
  attrs[nlead + 1] = tt_int(0);
  tpu_value_t in = tt_value(&t.view);
  CHECK_OK(run2(op, &in, 1, attrs, nlead + 2, &t.view, false));
  double s = 0, s2 = 0;
  int64_t below = 0;
  *lo = INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    double x = tt_get(&t.view, i);
    s += x, s2 += x * x;
    below += x < at;
    if (x < *lo) *lo = x;
  }
  *mean = s / (double)n;
  *var = s2 / (double)n - *mean * *mean;
  *frac_below = (double)below / (double)n;
  tt_free(&t);
}

TEST(random_dists_have_their_moments) {
  double mean, var, lo, fb;
  draw_moments("exponential", TPU_DTYPE_F32, 1, 2.0, 0, &mean, &var, &lo, &fb, log(2.0) / 2);
  CHECK(fabs(mean - 0.5) < 0.005 && fabs(var - 0.25) < 0.01 && lo >= 0 && fabs(fb - 0.5) < 0.005);
  draw_moments("geometric", TPU_DTYPE_I64, 1, 0.3, 0, &mean, &var, &lo, &fb, 1.5);
  CHECK(fabs(mean - 1 / 0.3) < 0.02 && fabs(var - 0.7 / 0.09) < 0.2 && lo == 1 &&
        fabs(fb - 0.3) < 0.005);
  draw_moments("log_normal", TPU_DTYPE_F64, 2, 0.0, 0.5, &mean, &var, &lo, &fb, 1.0);
  CHECK(fabs(mean - exp(0.125)) < 0.005 && fabs(var - (exp(0.25) - 1) * exp(0.25)) < 0.01 &&
        lo > 0 && fabs(fb - 0.5) < 0.005);
  /* Cauchy has no moments: its median and quartiles. */
  draw_moments("cauchy", TPU_DTYPE_F64, 2, 1.0, 2.0, &mean, &var, &lo, &fb, 1.0);
  CHECK(fabs(fb - 0.5) < 0.005);
  draw_moments("cauchy", TPU_DTYPE_F64, 2, 1.0, 2.0, &mean, &var, &lo, &fb, 3.0);
  CHECK(fabs(fb - 0.75) < 0.005);
  /* normal(mean tensor, std number) and bernoulli(p tensor): per-element
   * parameters, so the first and second half differ as they should. */
  int64_t n = 400000;
  tt_t m = tt_make(TPU_DTYPE_F32, 1, &n, TT_CONTIG), o = tt_make(TPU_DTYPE_F32, 1, &n, TT_CONTIG);
  for (int64_t i = 0; i < n; ++i) tt_set(&m.view, i, i < n / 2 ? -3.0 : 0.2);
  tpu_value_t in[2] = {tt_value(&m.view),
                       {.kind = TPU_VALUE_SCALAR, .u.scalar = {.dtype = TPU_DTYPE_F64, .v.f = 0.5}}};
  tpu_attr_t so[2] = {tt_int(9), tt_int(0)};
  CHECK_OK(run2("normal_tensor", in, 2, so, 2, &o.view, false));
  double s[2] = {0, 0}, s2[2] = {0, 0};
  for (int64_t i = 0; i < n; ++i) {
    double x = tt_get(&o.view, i);
    s[i >= n / 2] += x, s2[i >= n / 2] += x * x;
  }
  double h = (double)(n / 2), m0 = s[0] / h, m1 = s[1] / h;
  CHECK(fabs(m0 + 3.0) < 0.006 && fabs(m1 - 0.2) < 0.006);
  CHECK(fabs(s2[0] / h - m0 * m0 - 0.25) < 0.006 && fabs(s2[1] / h - m1 * m1 - 0.25) < 0.006);
  tpu_value_t pin[1] = {tt_value(&m.view)};
  for (int64_t i = 0; i < n; ++i) tt_set(&m.view, i, i < n / 2 ? 0.1 : 0.8);
  CHECK_OK(run2("bernoulli_self", pin, 1, so, 2, &o.view, false));
  s[0] = s[1] = 0;
  for (int64_t i = 0; i < n; ++i) s[i >= n / 2] += tt_get(&o.view, i);
  CHECK(fabs(s[0] / h - 0.1) < 0.005 && fabs(s[1] / h - 0.8) < 0.005);
  tt_free(&m), tt_free(&o);
}

TEST(random_dists_reproducible_and_argument_errors) {
  int64_t n = 1000;
  tt_t a = tt_make(TPU_DTYPE_F32, 1, &n, TT_CONTIG), b = tt_make(TPU_DTYPE_F32, 1, &n, TT_CONTIG);
  tpu_attr_t attrs[3] = {tt_float(1.5), tt_int(31), tt_int(0)};
  tpu_value_t ia = tt_value(&a.view), ib = tt_value(&b.view);
  CHECK_OK(run2("exponential", &ia, 1, attrs, 3, &a.view, false));
  CHECK_OK(run2("exponential", &ib, 1, attrs, 3, &b.view, false));
  CHECK(memcmp(a.mem, b.mem, sizeof(float) * (size_t)n) == 0);
  attrs[1] = tt_int(32);
  CHECK_OK(run2("exponential", &ib, 1, attrs, 3, &b.view, false));
  CHECK(memcmp(a.mem, b.mem, sizeof(float) * (size_t)n) != 0);
  /* lambda <= 0, p outside (0, 1), sigma <= 0, std <= 0: PyTorch raises. */
  attrs[0] = tt_float(0);
  CHECK_CODE(run2("exponential", &ia, 1, attrs, 3, &a.view, false), TPU_CODE_UNIMPLEMENTED);
  attrs[0] = tt_float(1);
  CHECK_CODE(run2("geometric", &ia, 1, attrs, 3, &a.view, false), TPU_CODE_UNIMPLEMENTED);
  tpu_attr_t two[4] = {tt_float(0), tt_float(-1), tt_int(1), tt_int(0)};
  CHECK_CODE(run2("cauchy", &ia, 1, two, 4, &a.view, false), TPU_CODE_UNIMPLEMENTED);
  CHECK_CODE(run2("log_normal", &ia, 1, two, 4, &a.view, false), TPU_CODE_UNIMPLEMENTED);
  tt_t ints = tt_make(TPU_DTYPE_I32, 1, &n, TT_CONTIG);
  tpu_value_t ii = tt_value(&ints.view);
  CHECK_CODE(run2("exponential", &ii, 1, attrs, 3, &ints.view, false), TPU_CODE_UNIMPLEMENTED);
  CHECK_CODE(run2("bernoulli_self", &ii, 1, attrs + 1, 2, &ints.view, false),
             TPU_CODE_UNIMPLEMENTED);
  tt_free(&a), tt_free(&b), tt_free(&ints);
}

/* poisson and _standard_gamma: per-element parameters from self. */
static void draw_param(const char* op, tpu_dtype_t dt, tt_t* params, tt_t* out, bool reference) {
  tpu_value_t in = tt_value(&params->view);
  tpu_attr_t so[2] = {tt_int(1234), tt_int(99)};
  CHECK_OK(run2(op, &in, 1, so, 2, &out->view, reference));
}

TEST(random_dists_poisson_and_gamma) {
  int64_t s2[2] = {33, 61};
  const char* ops[2] = {"poisson", "standard_gamma"};
  for (int o = 0; o < 2; ++o) {
    /* bit for bit with the reference, parameters spanning every branch */
    tt_t par = tt_make(TPU_DTYPE_F32, 2, s2, TT_TRANSPOSED);
    tt_fill(&par.view, 0, o ? 12 : 40, 0);
    tt_set(&par.view, 0, 0.0);
    tt_set(&par.view, 1, o ? 0.05 : 9.99);
    tt_t got = tt_make(TPU_DTYPE_F32, 2, s2, TT_GAPS), want = tt_make(TPU_DTYPE_F32, 2, s2, TT_CONTIG);
    draw_param(ops[o], TPU_DTYPE_F32, &par, &got, false);
    draw_param(ops[o], TPU_DTYPE_F32, &par, &want, true);
    CHECK(tt_max_rel_diff(&got.view, &want.view) == 0);
    tt_free(&par), tt_free(&got), tt_free(&want);
  }
  /* moments: Poisson(l) and Gamma(a) have mean = variance = the parameter */
  const double params[2][4] = {{0.5, 4.0, 9.5, 30.0}, {0.3, 1.0, 2.5, 20.0}};
  int64_t n = 200000;
  for (int o = 0; o < 2; ++o)
    for (int k = 0; k < 4; ++k) {
      double lam = params[o][k];
      tt_t par = tt_make(TPU_DTYPE_F64, 1, &n, TT_CONTIG), out = tt_make(TPU_DTYPE_F64, 1, &n, TT_CONTIG);
      tt_fill_value(&par.view, lam);
      draw_param(ops[o], TPU_DTYPE_F64, &par, &out, false);
      double s = 0, s2v = 0, lo = INFINITY;
      for (int64_t i = 0; i < n; ++i) {
        double x = tt_get(&out.view, i);
        s += x, s2v += x * x;
        lo = x < lo ? x : lo;
      }
      double mean = s / (double)n, var = s2v / (double)n - mean * mean;
      if (!(fabs(mean - lam) < 5 * sqrt(lam / (double)n) + 1e-3 && fabs(var - lam) < 0.03 * lam &&
            lo >= 0))
        tpu_test_fail(__FILE__, __LINE__, "%s(%g): mean %g var %g min %g", ops[o], lam, mean, var, lo);
      if (o == 0) /* integers */
        for (int64_t i = 0; i < 100; ++i) CHECK(tt_get(&out.view, i) == floor(tt_get(&out.view, i)));
      tt_free(&par), tt_free(&out);
    }
}
