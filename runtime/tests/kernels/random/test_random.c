/* test_random.c — the random family: Philox known answers, kernels equal to
 * the element-by-element reference bit for bit (dtypes, strided outputs,
 * sizes spanning tiles and parallel chunks), counter arithmetic (offset
 * shifts the stream), reproducibility, ranges, moments, dropout, and
 * argument errors. */
#include "kernels/random/random.h"
#include "kernel_test_util.h"

TEST(random_philox_known_answers) {
  /* Random123's kat_vectors for philox4x32_10. */
  static const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                     {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                     {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
  static const uint32_t key[3][2] = {{0, 0}, {0xffffffffu, 0xffffffffu},
                                     {0xa4093822u, 0x299f31d0u}};
  static const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                      {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                      {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
  for (int i = 0; i < 3; ++i) {
    uint32_t out[4];
    tpu_philox4x32_10(ctr[i], key[i], out);
    CHECK(memcmp(out, want[i], sizeof(out)) == 0);
  }
}

/* A node of `op` over `in` (nin tensors) with attrs; outputs set by caller. */
static tpu_node_t rng_node(const char* op, tpu_value_t* in, int32_t nin, const tpu_attr_t* attrs,
                           int32_t nattrs, tpu_view_t* outs, int32_t nout) {
  tpu_node_t node = {.op = tpu_op_lookup(op), .num_inputs = nin, .num_outputs = nout,
                     .num_attrs = nattrs, .inputs = in, .outputs = outs};
  memcpy(node.attrs, attrs, sizeof(tpu_attr_t) * (size_t)nattrs);
  return node;
}

static tpu_status_t run_kernel(const char* op, tpu_node_t* node) {
  const tpu_op_def_t* def = tt_def(op);
  if (!def) return tpu_status_make(TPU_CODE_INTERNAL, "no op %s", op);
  tpu_exec_ctx_t ctx = {0};
  TPU_RETURN_IF_ERROR(def->check(def, node));
  return def->kernel(def, node, &ctx);
}

typedef struct rng_case {
  const char* op;
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t sizes[2];
  int layout;
  double a, b; /* the op's leading attrs (from/to, mean/std, p, ...) */
  int32_t nlead; /* how many of a, b the row takes before seed, offset */
} rng_case_t;

static const rng_case_t k_cases[] = {
    {"uniform", TPU_DTYPE_F32, 2, {300, 257}, TT_CONTIG, -1, 3, 2},
    {"uniform", TPU_DTYPE_F64, 2, {33, 17}, TT_TRANSPOSED, 0, 1, 2},
    {"uniform", TPU_DTYPE_BF16, 2, {40, 50}, TT_PADDED, 1, 2, 2},
    {"uniform", TPU_DTYPE_F16, 1, {1000}, TT_CONTIG, -2, 2, 2},
    {"normal", TPU_DTYPE_F32, 2, {300, 257}, TT_TRANSPOSED, 1, 2, 2},
    {"normal", TPU_DTYPE_F64, 2, {64, 65}, TT_PADDED, 0, 1, 2},
    {"normal", TPU_DTYPE_BF16, 1, {777}, TT_CONTIG, 0, 3, 2},
    {"bernoulli", TPU_DTYPE_F32, 2, {300, 257}, TT_PADDED, 0.3, 0, 1},
    {"bernoulli", TPU_DTYPE_BOOL, 2, {20, 30}, TT_TRANSPOSED, 0.5, 0, 1},
    {"bernoulli", TPU_DTYPE_I64, 1, {99}, TT_CONTIG, 1, 0, 1},
    {"random", TPU_DTYPE_U8, 2, {100, 70}, TT_CONTIG, 0, 0, 0},
    {"random", TPU_DTYPE_F16, 2, {10, 70}, TT_TRANSPOSED, 0, 0, 0},
    {"random", TPU_DTYPE_I64, 1, {500}, TT_PADDED, 0, 0, 0},
    {"random_to", TPU_DTYPE_I32, 2, {300, 257}, TT_CONTIG, 10, 0, 1},
    {"random_from", TPU_DTYPE_I8, 2, {30, 20}, TT_PADDED, -5, NAN, 2},
    {"random_from", TPU_DTYPE_F32, 2, {30, 20}, TT_CONTIG, -100, 100, 2},
    {"random_from", TPU_DTYPE_I64, 1, {200}, TT_CONTIG, -(double)(1ll << 40), 1ll << 40, 2},
};

/* Attrs of a case: its leading values (NaN: None), then seed and offset. */
static int32_t case_attrs(const rng_case_t* c, uint64_t seed, uint64_t offset, tpu_attr_t* out) {
  const double lead[2] = {c->a, c->b};
  bool ints = strncmp(c->op, "random", 6) == 0;
  for (int32_t i = 0; i < c->nlead; ++i) {
    if (lead[i] != lead[i])
      out[i] = (tpu_attr_t){.kind = TPU_ATTR_NONE};
    else
      out[i] = ints ? tt_int((int64_t)lead[i]) : tt_float(lead[i]);
  }
  out[c->nlead] = tt_int((int64_t)seed);
  out[c->nlead + 1] = tt_int((int64_t)offset);
  return c->nlead + 2;
}

TEST(random_matches_reference_bit_for_bit) {
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) {
    const rng_case_t* c = &k_cases[i];
    const tpu_op_def_t* def = tt_def(c->op);
    if (!def) continue;
    tt_t out = tt_make(c->dtype, c->ndim, c->sizes, c->layout);
    tt_t want = tt_make(c->dtype, c->ndim, c->sizes, TT_CONTIG);
    tpu_value_t in[1] = {tt_value(&out.view)}; /* in place: self is output 0 */
    tpu_attr_t attrs[4];
    int32_t na = case_attrs(c, 0x1234567890abcdefull + i, 1000 * i, attrs);
    tpu_node_t node = rng_node(c->op, in, 1, attrs, na, &out.view, 1);
    CHECK_OK(run_kernel(c->op, &node));
    node.outputs = &want.view;
    CHECK_OK(tpu_random_reference(def, &node));
    bool same = true;
    for (int64_t k = 0; k < tpu_view_numel(&want.view) && same; ++k)
      same = memcmp(tt_elem(&out.view, k), tt_elem(&want.view, k), tpu_dtype_size(c->dtype)) == 0;
    if (!same) tpu_test_fail(__FILE__, __LINE__, "case %zu (%s %s) differs", i, c->op,
                             tpu_dtype_name(c->dtype));
    tt_free(&out);
    tt_free(&want);
  }
}

/* uniform float64 values of n elements at (seed, offset). */
static double* draw(uint64_t seed, uint64_t offset, int64_t n, double lo, double hi) {
  int64_t sizes[1] = {n};
  tt_t t = tt_make(TPU_DTYPE_F64, 1, sizes, TT_CONTIG);
  tpu_value_t in[1] = {tt_value(&t.view)};
  tpu_attr_t attrs[4] = {tt_float(lo), tt_float(hi), tt_int((int64_t)seed),
                         tt_int((int64_t)offset)};
  tpu_node_t node = rng_node("uniform", in, 1, attrs, 4, &t.view, 1);
  CHECK_OK(run_kernel("uniform", &node));
  return (double*)t.mem;
}

TEST(random_streams_are_counter_based) {
  double* a = draw(7, 0, 50000, 0, 1);
  double* b = draw(7, 0, 50000, 0, 1);
  double* c = draw(7, 123, 50000 - 123, 0, 1); /* offset k starts at element k */
  double* d = draw(8, 0, 50000, 0, 1);
  CHECK(memcmp(a, b, 50000 * sizeof(double)) == 0);
  CHECK(memcmp(a + 123, c, (50000 - 123) * sizeof(double)) == 0);
  int64_t equal = 0;
  for (int64_t i = 0; i < 50000; ++i) equal += a[i] == d[i];
  CHECK(equal < 5);
  free(a), free(b), free(c), free(d);
}

/* Mean and variance of a tensor. */
static void moments(const tpu_view_t* t, double* mean, double* var, double* lo, double* hi) {
  double s = 0, s2 = 0;
  *lo = INFINITY, *hi = -INFINITY;
  int64_t n = tpu_view_numel(t);
  for (int64_t i = 0; i < n; ++i) {
    double x = tt_get(t, i);
    s += x, s2 += x * x;
    if (x < *lo) *lo = x;
    if (x > *hi) *hi = x;
  }
  *mean = s / (double)n;
  *var = s2 / (double)n - *mean * *mean;
}

TEST(random_distributions_have_their_moments) {
  static const struct {
    const char* op;
    tpu_dtype_t dtype;
    double a, b;
    int32_t nlead;
    double mean, var, lo, hi; /* expected; values must lie in [lo, hi] */
  } cases[] = {
      {"uniform", TPU_DTYPE_F32, 2, 5, 2, 3.5, 0.75, 2, 4.9999999},
      {"uniform", TPU_DTYPE_F64, -1, 1, 2, 0, 1.0 / 3, -1, 1 - 1e-12},
      /* bfloat16 [1, 2): the 128 values 1 + k/128, equally likely */
      {"uniform", TPU_DTYPE_BF16, 1, 2, 2, 1 + 127.0 / 256, (128.0 * 128 - 1) / (12 * 128 * 128), 1, 1.9921875},
      {"normal", TPU_DTYPE_F32, 1, 2, 2, 1, 4, -20, 20},
      {"normal", TPU_DTYPE_F64, -3, 0.5, 2, -3, 0.25, -10, 10},
      {"bernoulli", TPU_DTYPE_F32, 0.3, 0, 1, 0.3, 0.21, 0, 1},
      {"random_to", TPU_DTYPE_I32, 10, 0, 1, 4.5, 8.25, 0, 9},
      {"random", TPU_DTYPE_U8, 0, 0, 0, 127.5, (256.0 * 256 - 1) / 12, 0, 255},
      {"random", TPU_DTYPE_F16, 0, 0, 0, 1024, (2049.0 * 2049 - 1) / 12, 0, 2048},
  };
  int64_t sizes[1] = {400000};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    tt_t t = tt_make(cases[i].dtype, 1, sizes, TT_CONTIG);
    tpu_value_t in[1] = {tt_value(&t.view)};
    rng_case_t c = {cases[i].op, cases[i].dtype, 1, {sizes[0]}, TT_CONTIG, cases[i].a,
                    cases[i].b, cases[i].nlead};
    tpu_attr_t attrs[4];
    int32_t na = case_attrs(&c, 99 + i, 0, attrs);
    tpu_node_t node = rng_node(c.op, in, 1, attrs, na, &t.view, 1);
    CHECK_OK(run_kernel(c.op, &node));
    double mean, var, lo, hi, sd = sqrt(cases[i].var);
    moments(&t.view, &mean, &var, &lo, &hi);
    /* 5 standard errors of the mean; variance within 2%. */
    if (!(fabs(mean - cases[i].mean) <= 5 * sd / sqrt((double)sizes[0]) + 1e-12) ||
        !(fabs(var - cases[i].var) <= 0.02 * cases[i].var) || lo < cases[i].lo ||
        hi > cases[i].hi)
      tpu_test_fail(__FILE__, __LINE__, "%s %s: mean %g var %g range [%g, %g]", c.op,
                    tpu_dtype_name(c.dtype), mean, var, lo, hi);
    tt_free(&t);
  }
}

TEST(random_dropout_and_backward) {
  const tpu_op_def_t* fwd = tt_def("native_dropout");
  const tpu_op_def_t* bwd = tt_def("native_dropout_backward");
  if (!fwd || !bwd) return;
  int64_t sizes[2] = {200, 301};
  tt_t x = tt_make(TPU_DTYPE_F32, 2, sizes, TT_TRANSPOSED);
  tt_fill_ints(&x.view, 5, 1, 9); /* nonzero, so kept elements are visible */
  tt_t out[2] = {tt_make(TPU_DTYPE_F32, 2, sizes, TT_PADDED),
                 tt_make(TPU_DTYPE_BOOL, 2, sizes, TT_TRANSPOSED)};
  tt_t want[2] = {tt_make(TPU_DTYPE_F32, 2, sizes, TT_CONTIG),
                  tt_make(TPU_DTYPE_BOOL, 2, sizes, TT_CONTIG)};
  tpu_view_t ov[2] = {out[0].view, out[1].view}, wv[2] = {want[0].view, want[1].view};
  tpu_value_t in[2] = {tt_value(&x.view)};
  tpu_attr_t attrs[4] = {tt_float(0.25), tt_bool(true), tt_int(42),
                         tt_int(7)};
  tpu_node_t node = rng_node("native_dropout", in, 1, attrs, 4, ov, 2);
  tpu_view_t shapes[2];
  CHECK_OK(fwd->infer(fwd, &node, shapes));
  CHECK(shapes[0].dtype == TPU_DTYPE_F32 && shapes[1].dtype == TPU_DTYPE_BOOL);
  CHECK_OK(run_kernel("native_dropout", &node));
  node.outputs = wv;
  CHECK_OK(tpu_random_reference(fwd, &node));
  CHECK(tt_max_rel_diff(&out[0].view, &want[0].view) == 0);
  CHECK(tt_max_rel_diff(&out[1].view, &want[1].view) == 0);
  int64_t kept = 0, n = tpu_view_numel(&x.view);
  for (int64_t i = 0; i < n; ++i) {
    bool m = tt_get(&out[1].view, i) != 0;
    kept += m;
    CHECK_NEAR(tt_get(&out[0].view, i), m ? tt_get(&x.view, i) / 0.75 : 0.0, 1e-6);
  }
  CHECK(fabs((double)kept / (double)n - 0.75) < 0.01);
  /* backward: grad * mask * scale, against the reference */
  tt_t g = tt_make(TPU_DTYPE_F32, 2, sizes, TT_PADDED), gi = tt_make(TPU_DTYPE_F32, 2, sizes, 0);
  tt_fill_ints(&g.view, 6, -4, 4);
  tpu_value_t bin[2] = {tt_value(&g.view), tt_value(&out[1].view)};
  tpu_attr_t scale = tt_float(1.0 / 0.75);
  node = rng_node("native_dropout_backward", bin, 2, &scale, 1, &gi.view, 1);
  CHECK_OK(run_kernel("native_dropout_backward", &node));
  node.outputs = &want[0].view;
  CHECK_OK(tpu_random_reference(bwd, &node));
  CHECK(tt_max_rel_diff(&gi.view, &want[0].view) == 0);
  /* eval mode: a copy and an all-true mask */
  attrs[1] = tt_bool(false);
  node = rng_node("native_dropout", in, 1, attrs, 4, ov, 2);
  CHECK_OK(run_kernel("native_dropout", &node));
  CHECK(tt_max_rel_diff(&out[0].view, &x.view) == 0);
  for (int64_t i = 0; i < n; ++i) CHECK(tt_get(&out[1].view, i) == 1);
  tt_free(&x), tt_free(&out[0]), tt_free(&out[1]), tt_free(&want[0]), tt_free(&want[1]);
  tt_free(&g), tt_free(&gi);
}

TEST(random_argument_errors) {
  int64_t sizes[1] = {4};
  tt_t f = tt_make(TPU_DTYPE_F32, 1, sizes, TT_CONTIG), l = tt_make(TPU_DTYPE_I64, 1, sizes, 0);
  tpu_value_t in[1] = {tt_value(&f.view)};
  tpu_attr_t a[4] = {tt_float(2), tt_float(1), tt_int(0), tt_int(0)};
  tpu_node_t node = rng_node("uniform", in, 1, a, 4, &f.view, 1);
  tpu_status_t st = run_kernel("uniform", &node);
  CHECK(tpu_status_code(st) == TPU_CODE_INVALID_ARGUMENT &&
        strstr(tpu_status_message(st), "[from, to) range, but found from=2 > to=1"));
  tpu_status_free(st);
  a[1] = tt_float(-1);
  node = rng_node("normal", in, 1, a, 4, &f.view, 1);
  CHECK_CODE(run_kernel("normal", &node), TPU_CODE_INVALID_ARGUMENT);
  node = rng_node("bernoulli", in, 1, a, 3, &f.view, 1); /* p = 2 */
  CHECK_CODE(run_kernel("bernoulli", &node), TPU_CODE_INVALID_ARGUMENT);
  tpu_attr_t r[4] = {tt_int(5), tt_int(2), tt_int(0), tt_int(0)};
  node = rng_node("random_from", in, 1, r, 4, &f.view, 1);
  CHECK_CODE(run_kernel("random_from", &node), TPU_CODE_INVALID_ARGUMENT);
  in[0] = tt_value(&l.view); /* uniform_ of int64: not native (PyTorch rejects it) */
  a[1] = tt_float(3);
  node = rng_node("uniform", in, 1, a, 4, &l.view, 1);
  CHECK_CODE(run_kernel("uniform", &node), TPU_CODE_UNIMPLEMENTED);
  r[0] = tt_int(-1), r[1] = tt_int(1ll << 62); /* fine for int64 */
  node = rng_node("random_from", in, 1, r, 4, &l.view, 1);
  CHECK_OK(run_kernel("random_from", &node));
  in[0] = tt_value(&f.view); /* but outside float32's exact integers: PyTorch decides */
  node = rng_node("random_from", in, 1, r, 4, &f.view, 1);
  CHECK_CODE(run_kernel("random_from", &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&f), tt_free(&l);
}
