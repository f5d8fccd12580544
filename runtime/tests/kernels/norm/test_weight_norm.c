/* test_weight_norm.c — the weight_norm family (weight_norm.c) against its
 * reference (tpu_weight_norm_reference): forward and backward over dtypes,
 * dim 0 / last dim, shapes and layouts of every operand, a known value, and
 * the fallbacks (Half, other dims, mismatched g). */
#include "kernel_test_util.h"

tpu_status_t tpu_weight_norm_reference(const tpu_op_def_t* def, const tpu_node_t* node);

typedef struct wn_case {
  int32_t nd;
  int64_t sizes[4];
  int64_t dim;
} wn_case_t;

static void g_shape(const wn_case_t* c, int32_t dim, int64_t* gs) {
  for (int32_t d = 0; d < c->nd; ++d) gs[d] = d == dim ? c->sizes[d] : 1;
}

TEST(weight_norm_table) {
  static const wn_case_t cases[] = {
      {2, {5, 7}, 0},       {2, {5, 7}, 1},       {2, {5, 7}, -1},     {4, {6, 3, 2, 5}, 0},
      {3, {4, 9, 3}, 2},    {1, {11}, 0},         {3, {64, 16, 33}, 0}, {2, {300, 129}, 1},
      {3, {2, 1, 3}, 0},
  };
  static const tpu_dtype_t dts[] = {TPU_DTYPE_F32, TPU_DTYPE_F64, TPU_DTYPE_BF16};
  static const tt_layout_t layouts[] = {TT_CONTIG, TT_TRANSPOSED, TT_PADDED};
  const tpu_op_def_t *fw = tt_def("weight_norm"), *bw = tt_def("weight_norm_backward");
  if (!fw || !bw) return;
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    const wn_case_t* wc = &cases[c];
    int32_t dim = wc->dim < 0 ? wc->nd - 1 : (int32_t)wc->dim;
    int64_t gs[4];
    g_shape(wc, dim, gs);
    for (size_t t = 0; t < 3; ++t) {
      tpu_dtype_t dt = dts[t], nt = dt == TPU_DTYPE_BF16 ? TPU_DTYPE_F32 : dt;
      double tol = dt == TPU_DTYPE_BF16 ? 1e-2 : dt == TPU_DTYPE_F32 ? 1e-5 : 1e-12;
      for (int l = 0; l < 3; ++l) {
        char what[80];
        snprintf(what, sizeof(what), "weight_norm case %zu %s layout %d", c, tpu_dtype_name(dt),
                 l);
        tt_t v = tt_make(dt, wc->nd, wc->sizes, layouts[l]), g = tt_make(dt, wc->nd, gs, layouts[l]);
        tt_fill(&v.view, -2, 2, 0), tt_fill(&g.view, 0.5, 3, 0);
        tpu_attr_t attr = tt_int(wc->dim);
        tpu_value_t in[4] = {tt_value(&v.view), tt_value(&g.view)};
        tpu_view_t shapes[2];
        tpu_node_t node = tt_node(in, 2, NULL, 0, &attr, 1);
        CHECK_OK(fw->infer(fw, &node, shapes));
        CHECK(shapes[1].dtype == nt);
        tt_t w = tt_like(&shapes[0], layouts[2 - l]), n = tt_like(&shapes[1], TT_CONTIG);
        tt_t rw = tt_like(&shapes[0], TT_CONTIG), rn = tt_like(&shapes[1], TT_CONTIG);
        tpu_view_t outs[2] = {w.view, n.view}, routs[2] = {rw.view, rn.view};
        node = tt_node(in, 2, outs, 2, &attr, 1);
        CHECK_OK(fw->check(fw, &node));
        CHECK_OK(tt_run(fw->kernel, fw, &node));
        node.outputs = routs;
        CHECK_OK(tpu_weight_norm_reference(fw, &node));
        tt_compare(what, &w.view, &rw.view, tol);
        tt_compare(what, &n.view, &rn.view, tol);
        /* backward from the forward's norms */
        tt_t gw = tt_make(dt, wc->nd, wc->sizes, layouts[(l + 1) % 3]);
        tt_fill(&gw.view, -1, 1, 0);
        tpu_value_t bin[4] = {tt_value(&gw.view), tt_value(&v.view), tt_value(&g.view),
                              tt_value(&rn.view)};
        node = tt_node(bin, 4, NULL, 0, &attr, 1);
        CHECK_OK(bw->infer(bw, &node, shapes));
        tt_t gv = tt_like(&shapes[0], layouts[l]), gg = tt_like(&shapes[1], TT_GAPS);
        tt_t rgv = tt_like(&shapes[0], TT_CONTIG), rgg = tt_like(&shapes[1], TT_CONTIG);
        tpu_view_t bouts[2] = {gv.view, gg.view}, rbouts[2] = {rgv.view, rgg.view};
        node = tt_node(bin, 4, bouts, 2, &attr, 1);
        CHECK_OK(bw->check(bw, &node));
        CHECK_OK(tt_run(bw->kernel, bw, &node));
        node.outputs = rbouts;
        CHECK_OK(tpu_weight_norm_reference(bw, &node));
        tt_compare(what, &gv.view, &rgv.view, tol);
        tt_compare(what, &gg.view, &rgg.view, tol);
        tt_free(&v), tt_free(&g), tt_free(&w), tt_free(&n), tt_free(&rw), tt_free(&rn);
        tt_free(&gw), tt_free(&gv), tt_free(&gg), tt_free(&rgv), tt_free(&rgg);
      }
    }
  }
}

TEST(weight_norm_known_and_fallbacks) {
  const tpu_op_def_t* fw = tt_def("weight_norm");
  if (!fw) return;
  int64_t vs[2] = {2, 2}, gs[2] = {2, 1}, bad[2] = {3, 1};
  tt_t v = tt_make(TPU_DTYPE_F64, 2, vs, TT_CONTIG), g = tt_make(TPU_DTYPE_F64, 2, gs, TT_CONTIG);
  tt_t w = tt_make(TPU_DTYPE_F64, 2, vs, TT_CONTIG), n = tt_make(TPU_DTYPE_F64, 2, gs, TT_CONTIG);
  tt_set(&v.view, 0, 3), tt_set(&v.view, 1, 4), tt_set(&v.view, 2, 0), tt_set(&v.view, 3, 2);
  tt_set(&g.view, 0, 10), tt_set(&g.view, 1, 1);
  tpu_attr_t attr = tt_int(0);
  tpu_value_t in[2] = {tt_value(&v.view), tt_value(&g.view)};
  tpu_view_t outs[2] = {w.view, n.view};
  tpu_node_t node = tt_node(in, 2, outs, 2, &attr, 1);
  CHECK_OK(tt_run(fw->kernel, fw, &node));
  CHECK_NEAR(tt_get(&n.view, 0), 5.0, 1e-12);
  CHECK_NEAR(tt_get(&w.view, 1), 8.0, 1e-12);
  CHECK_NEAR(tt_get(&w.view, 3), 1.0, 1e-12);
  int64_t s3[3] = {2, 2, 2}, g3[3] = {1, 2, 1};
  tt_t v3 = tt_make(TPU_DTYPE_F32, 3, s3, TT_CONTIG), gg3 = tt_make(TPU_DTYPE_F32, 3, g3, 0);
  tpu_value_t in3[2] = {tt_value(&v3.view), tt_value(&gg3.view)};
  tpu_attr_t a1 = tt_int(1);
  tpu_view_t shapes[2];
  node = tt_node(in3, 2, NULL, 0, &a1, 1);
  CHECK_CODE(fw->infer(fw, &node, shapes), TPU_CODE_UNIMPLEMENTED); /* middle dim */
  tt_t h = tt_make(TPU_DTYPE_F16, 2, vs, 0), hg = tt_make(TPU_DTYPE_F16, 2, gs, 0);
  tpu_value_t hin[2] = {tt_value(&h.view), tt_value(&hg.view)};
  node = tt_node(hin, 2, NULL, 0, &attr, 1);
  CHECK_CODE(fw->infer(fw, &node, shapes), TPU_CODE_UNIMPLEMENTED); /* Half */
  tt_t b = tt_make(TPU_DTYPE_F64, 2, bad, 0);
  in[1] = tt_value(&b.view);
  node = tt_node(in, 2, NULL, 0, &attr, 1);
  CHECK_CODE(fw->infer(fw, &node, shapes), TPU_CODE_UNIMPLEMENTED); /* g size */
  tt_free(&v), tt_free(&g), tt_free(&w), tt_free(&n), tt_free(&v3), tt_free(&gg3);
  tt_free(&h), tt_free(&hg), tt_free(&b);
}
