/* test_upsample.c — the upsample family on exact cases, over layouts and dtypes:
 *   - linear modes (align_corners) reproduce a linear ramp exactly;
 *   - nearest 2x copies input[o / 2]; nearest-exact 3x reads input[o / 3];
 *   - backward conserves the sum of grad_output (weights sum to one);
 *   - bad arguments fall back.
 */
#include "kernel_test_util.h"

typedef struct up_case {
  const char* op;
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t in[5];
  int64_t out[3];
  tt_layout_t layout;
} up_case_t;

static const up_case_t k_cases[] = {
    {"upsample_bilinear2d", TPU_DTYPE_F32, 4, {2, 3, 4, 5}, {7, 9}, TT_CONTIG},
    {"upsample_bilinear2d", TPU_DTYPE_F64, 4, {2, 3, 4, 5}, {3, 2}, TT_REVERSED},
    {"upsample_linear1d", TPU_DTYPE_F64, 3, {2, 3, 6}, {11}, TT_GAPS},
    {"upsample_trilinear3d", TPU_DTYPE_F64, 5, {1, 2, 3, 4, 5}, {5, 3, 8}, TT_PADDED},
};

/* value of a linear ramp at spatial coordinates (last k dims) */
static double ramp(const double* c, int k) {
  double v = 0.0;
  for (int d = 0; d < k; ++d) v = v * 10.0 + c[d];
  return v;
}

static void run_case(int index, const up_case_t* c) {
  const tpu_op_def_t* def = tt_def(c->op);
  if (!def) return;
  int k = c->ndim - 2;
  tt_t x = tt_make(c->dtype, c->ndim, c->in, c->layout);
  int64_t n = tpu_view_numel(&x.view);
  for (int64_t i = 0; i < n; ++i) {
    double co[3];
    int64_t r = i;
    for (int d = k - 1; d >= 0; --d) {
      co[d] = (double)(r % c->in[2 + d]);
      r /= c->in[2 + d];
    }
    tt_set(&x.view, i, ramp(co, k));
  }
  tpu_value_t in[1] = {tt_value(&x.view)};
  tpu_attr_t attrs[7] = {tt_ints(k, c->out), tt_none(), tt_bool(true), tt_none(),
                         tt_none(), tt_none(), tt_none()};
  tpu_node_t node = tt_node(in, 1, NULL, 0, attrs, 7);
  tpu_view_t shape;
  CHECK_OK(def->check(def, &node));
  CHECK_OK(def->infer(def, &node, &shape));
  tt_t y = tt_like(&shape, TT_GAPS);
  node.outputs = &y.view;
  node.num_outputs = 1;
  CHECK_OK(tt_run(def->kernel, def, &node));
  int bad = 0;
  for (int64_t i = 0; i < tpu_view_numel(&y.view); ++i) {
    double co[3];
    int64_t r = i;
    for (int d = k - 1; d >= 0; --d) {
      int64_t o = r % c->out[d], isz = c->in[2 + d], osz = c->out[d];
      co[d] = osz > 1 ? (double)o * (double)(isz - 1) / (double)(osz - 1) : 0.0;
      r /= c->out[d];
    }
    double want = ramp(co, k), got = tt_get(&y.view, i);
    if (!(fabs(got - want) <= 1e-4 * (1 + fabs(want))) && bad++ < 3)
      tpu_test_fail(__FILE__, __LINE__, "case %d element %lld: got %g want %g", index,
                    (long long)i, got, want);
  }
  /* Backward conserves the sum of grad_output. */
  char bname[64];
  snprintf(bname, sizeof(bname), "%s_backward", c->op);
  const tpu_op_def_t* bwd = tt_def(bname);
  if (bwd) {
    tt_fill(&y.view, -1, 1, 0);
    double total = 0.0;
    for (int64_t i = 0; i < tpu_view_numel(&y.view); ++i) total += tt_get(&y.view, i);
    tpu_value_t bin[1] = {tt_value(&y.view)};
    tpu_attr_t battrs[7] = {tt_ints(k, c->out), tt_ints(c->ndim, c->in), tt_bool(true),
                            tt_none(), tt_none(), tt_none(), tt_none()};
    tpu_node_t bnode = tt_node(bin, 1, NULL, 0, battrs, 7);
    tpu_view_t bshape;
    CHECK_OK(bwd->infer(bwd, &bnode, &bshape));
    tt_t gi = tt_like(&bshape, c->layout == TT_PADDED ? TT_PADDED : TT_CONTIG);
    bnode.outputs = &gi.view;
    bnode.num_outputs = 1;
    CHECK_OK(tt_run(bwd->kernel, bwd, &bnode));
    double sum = 0.0;
    for (int64_t i = 0; i < tpu_view_numel(&gi.view); ++i) sum += tt_get(&gi.view, i);
    CHECK_NEAR(sum, total, 1e-3 * (1 + fabs(total)));
    tt_free(&gi);
  }
  tt_free(&x);
  tt_free(&y);
}

TEST(upsample_cases) {
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) run_case((int)i, &k_cases[i]);
}

TEST(upsample_nearest) {
  const tpu_op_def_t* def = tt_def("upsample_nearest2d");
  const tpu_op_def_t* ex = tt_def("upsample_nearest_exact1d");
  if (!def || !ex) return;
  int64_t s[4] = {1, 2, 3, 4}, o[2] = {6, 8};
  tt_t x = tt_make(TPU_DTYPE_U8, 4, s, TT_TRANSPOSED);
  for (int64_t i = 0; i < 24; ++i) tt_set(&x.view, i, (double)i);
  tpu_value_t in[1] = {tt_value(&x.view)};
  tpu_attr_t attrs[7] = {tt_ints(2, o), tt_none(), tt_none(), tt_none(),
                         tt_none(), tt_none(), tt_none()};
  tpu_node_t node = tt_node(in, 1, NULL, 0, attrs, 7);
  tpu_view_t shape;
  CHECK_OK(def->infer(def, &node, &shape));
  tt_t y = tt_like(&shape, TT_CONTIG);
  node.outputs = &y.view;
  node.num_outputs = 1;
  CHECK_OK(tt_run(def->kernel, def, &node));
  for (int64_t i = 0; i < 96; ++i) {
    int64_t c = i / 48, h = (i / 8) % 6, w = i % 8;
    CHECK_NEAR(tt_get(&y.view, i), (double)(c * 12 + (h / 2) * 4 + w / 2), 0);
  }
  tt_free(&y);
  /* nearest-exact 1d, 3x: floor((o + 0.5) / 3). */
  int64_t s1[3] = {1, 1, 4}, o1[1] = {12};
  tt_t x1 = tt_make(TPU_DTYPE_F32, 3, s1, TT_CONTIG);
  for (int64_t i = 0; i < 4; ++i) tt_set(&x1.view, i, (double)i);
  in[0] = tt_value(&x1.view);
  attrs[0] = tt_ints(1, o1);
  node = tt_node(in, 1, NULL, 0, attrs, 7);
  CHECK_OK(ex->infer(ex, &node, &shape));
  tt_t y1 = tt_like(&shape, TT_CONTIG);
  node.outputs = &y1.view;
  node.num_outputs = 1;
  CHECK_OK(tt_run(ex->kernel, ex, &node));
  for (int64_t i = 0; i < 12; ++i) CHECK_NEAR(tt_get(&y1.view, i), (double)(i / 3), 0);
  /* Wrong ranks, integer linear inputs and empty sizes fall back. */
  const tpu_op_def_t* bil = tt_def("upsample_bilinear2d");
  tt_t xi = tt_make(TPU_DTYPE_I32, 4, s, TT_CONTIG);
  in[0] = tt_value(&xi.view);
  attrs[0] = tt_ints(2, o);
  node = tt_node(in, 1, NULL, 0, attrs, 7);
  CHECK_CODE(bil->check(bil, &node), TPU_CODE_UNIMPLEMENTED);
  in[0] = tt_value(&x1.view);
  CHECK_CODE(bil->check(bil, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&xi);
  tt_free(&x1);
  tt_free(&y1);
  tt_free(&x);
}

TEST(upsample_antialias_identity) {
  /* Same input and output size: the antialiasing filters reduce to the identity. */
  const char* names[2] = {"upsample_bilinear2d_aa", "upsample_bicubic2d_aa"};
  int64_t s[4] = {2, 3, 5, 6}, o[2] = {5, 6};
  for (int k = 0; k < 2; ++k) {
    const tpu_op_def_t* def = tt_def(names[k]);
    if (!def) return;
    tt_t x = tt_make(TPU_DTYPE_F64, 4, s, k ? TT_REVERSED : TT_GAPS);
    tt_fill(&x.view, -1, 1, 0);
    tpu_value_t in[1] = {tt_value(&x.view)};
    tpu_attr_t attrs[7] = {tt_ints(2, o), tt_none(), tt_bool(false), tt_none(),
                           tt_none(), tt_none(), tt_none()};
    tpu_node_t node = tt_node(in, 1, NULL, 0, attrs, 7);
    tpu_view_t shape;
    CHECK_OK(def->check(def, &node));
    CHECK_OK(def->infer(def, &node, &shape));
    tt_t y = tt_like(&shape, TT_CONTIG);
    node.outputs = &y.view;
    node.num_outputs = 1;
    CHECK_OK(tt_run(def->kernel, def, &node));
    tt_compare(names[k], &y.view, &x.view, 1e-12);
    tt_free(&x);
    tt_free(&y);
  }
}
