/* test_grid_sample.c — grid_sampler_2d on exact cases: an identity grid
 * (align_corners) reproduces the input in every mode and padding and over
 * layouts; its backward passes grad_output through to grad_input; a grid
 * point outside the input reads zero (zeros padding) or the edge (border);
 * bicubic backward and 3-d inputs to the 2-d op fall back; the 3-d op's
 * identity grid reproduces its input. */
#include "kernel_test_util.h"

static void identity_grid(const tpu_view_t* g, int64_t n, int64_t h, int64_t w) {
  for (int64_t b = 0; b < n; ++b)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        int64_t k = ((b * h + y) * w + x) * 2;
        tt_set(g, k, w > 1 ? -1.0 + 2.0 * (double)x / (double)(w - 1) : 0.0);
        tt_set(g, k + 1, h > 1 ? -1.0 + 2.0 * (double)y / (double)(h - 1) : 0.0);
      }
}

TEST(grid_sample_identity) {
  const tpu_op_def_t* fwd = tt_def("grid_sampler_2d");
  const tpu_op_def_t* bwd = tt_def("grid_sampler_2d_backward");
  if (!fwd || !bwd) return;
  int64_t xs[4] = {2, 3, 4, 5}, gs[4] = {2, 4, 5, 2};
  tt_layout_t layouts[3] = {TT_CONTIG, TT_REVERSED, TT_GAPS};
  for (int l = 0; l < 3; ++l)
    for (int mode = 0; mode < 3; ++mode)
      for (int pad = 0; pad < 3; ++pad) {
        tpu_dtype_t dt = l == 1 ? TPU_DTYPE_F32 : TPU_DTYPE_F64;
        tt_t x = tt_make(dt, 4, xs, layouts[l]);
        tt_t g = tt_make(dt, 4, gs, TT_CONTIG);
        tt_fill(&x.view, -2, 2, 0);
        identity_grid(&g.view, 2, 4, 5);
        tpu_value_t in[2] = {tt_value(&x.view), tt_value(&g.view)};
        tpu_attr_t attrs[3] = {tt_int(mode), tt_int(pad), tt_bool(true)};
        tpu_node_t node = tt_node(in, 2, NULL, 0, attrs, 3);
        tpu_view_t shape;
        CHECK_OK(fwd->check(fwd, &node));
        CHECK_OK(fwd->infer(fwd, &node, &shape));
        tt_t y = tt_like(&shape, TT_GAPS);
        node.outputs = &y.view;
        node.num_outputs = 1;
        CHECK_OK(tt_run(fwd->kernel, fwd, &node));
        tt_compare("identity grid", &y.view, &x.view, 1e-5);
        if (mode != 2) { /* backward: grad_input = grad_output */
          tpu_value_t bin[3] = {tt_value(&x.view), tt_value(&x.view), tt_value(&g.view)};
          int64_t mask[2] = {1, 0};
          tpu_attr_t battrs[4] = {tt_int(mode), tt_int(pad), tt_bool(true), tt_ints(2, mask)};
          tpu_node_t bn = tt_node(bin, 3, NULL, 0, battrs, 4);
          tpu_view_t bs[2];
          CHECK_OK(bwd->infer(bwd, &bn, bs));
          CHECK(tpu_view_is_absent(&bs[1]));
          tt_t gi = tt_like(&bs[0], TT_CONTIG);
          tpu_view_t outs[2] = {gi.view, bs[1]};
          bn.outputs = outs;
          bn.num_outputs = 2;
          CHECK_OK(tt_run(bwd->kernel, bwd, &bn));
          tt_compare("identity grid backward", &gi.view, &x.view, 1e-5);
          tt_free(&gi);
        } else {
          tpu_value_t bin[3] = {tt_value(&x.view), tt_value(&x.view), tt_value(&g.view)};
          int64_t mask[2] = {1, 1};
          tpu_attr_t battrs[4] = {tt_int(mode), tt_int(pad), tt_bool(true), tt_ints(2, mask)};
          tpu_node_t bn = tt_node(bin, 3, NULL, 0, battrs, 4);
          CHECK_CODE(bwd->check(bwd, &bn), TPU_CODE_UNIMPLEMENTED);
        }
        tt_free(&x);
        tt_free(&g);
        tt_free(&y);
      }
}

TEST(grid_sample_padding) {
  const tpu_op_def_t* fwd = tt_def("grid_sampler_2d");
  if (!fwd) return;
  int64_t xs[4] = {1, 1, 2, 2}, gs[4] = {1, 1, 1, 2};
  tt_t x = tt_make(TPU_DTYPE_F64, 4, xs, TT_CONTIG);
  for (int i = 0; i < 4; ++i) tt_set(&x.view, i, i + 1);
  tt_t g = tt_make(TPU_DTYPE_F64, 4, gs, TT_CONTIG);
  tt_set(&g.view, 0, 3.0); /* far right of the top row */
  tt_set(&g.view, 1, -1.0);
  double want[3] = {0.0, 2.0, 1.0}; /* zeros, border, reflection (x = 2 reflects to 0) */
  for (int pad = 0; pad < 3; ++pad) {
    tpu_value_t in[2] = {tt_value(&x.view), tt_value(&g.view)};
    tpu_attr_t attrs[3] = {tt_int(0), tt_int(pad), tt_bool(true)};
    tpu_node_t node = tt_node(in, 2, NULL, 0, attrs, 3);
    tpu_view_t shape;
    CHECK_OK(fwd->infer(fwd, &node, &shape));
    tt_t y = tt_like(&shape, TT_CONTIG);
    node.outputs = &y.view;
    node.num_outputs = 1;
    CHECK_OK(tt_run(fwd->kernel, fwd, &node));
    CHECK_NEAR(tt_get(&y.view, 0), want[pad], 1e-12);
    tt_free(&y);
  }
  int64_t x5[5] = {1, 1, 2, 2, 2};
  tt_t x3 = tt_make(TPU_DTYPE_F64, 5, x5, TT_CONTIG);
  tpu_value_t in[2] = {tt_value(&x3.view), tt_value(&g.view)};
  tpu_attr_t attrs[3] = {tt_int(0), tt_int(0), tt_bool(true)};
  tpu_node_t node = tt_node(in, 2, NULL, 0, attrs, 3);
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&x3);
  tt_free(&x);
  tt_free(&g);
}

TEST(grid_sample_3d_identity) {
  const tpu_op_def_t* fwd = tt_def("grid_sampler_3d");
  if (!fwd) return;
  int64_t xs[5] = {1, 2, 3, 4, 5}, gs[5] = {1, 3, 4, 5, 3};
  tt_t x = tt_make(TPU_DTYPE_F64, 5, xs, TT_REVERSED);
  tt_t g = tt_make(TPU_DTYPE_F64, 5, gs, TT_CONTIG);
  tt_fill(&x.view, -2, 2, 0);
  for (int64_t z = 0; z < 3; ++z)
    for (int64_t y = 0; y < 4; ++y)
      for (int64_t w = 0; w < 5; ++w) {
        int64_t k = ((z * 4 + y) * 5 + w) * 3;
        tt_set(&g.view, k, -1.0 + 2.0 * (double)w / 4.0);
        tt_set(&g.view, k + 1, -1.0 + 2.0 * (double)y / 3.0);
        tt_set(&g.view, k + 2, -1.0 + 2.0 * (double)z / 2.0);
      }
  for (int mode = 0; mode < 2; ++mode) {
    tpu_value_t in[2] = {tt_value(&x.view), tt_value(&g.view)};
    tpu_attr_t attrs[3] = {tt_int(mode), tt_int(0), tt_bool(true)};
    tpu_node_t node = tt_node(in, 2, NULL, 0, attrs, 3);
    tpu_view_t shape;
    CHECK_OK(fwd->check(fwd, &node));
    CHECK_OK(fwd->infer(fwd, &node, &shape));
    tt_t y = tt_like(&shape, TT_CONTIG);
    node.outputs = &y.view;
    node.num_outputs = 1;
    CHECK_OK(tt_run(fwd->kernel, fwd, &node));
    tt_compare("3-d identity grid", &y.view, &x.view, 1e-9);
    tt_free(&y);
  }
  tpu_value_t in[2] = {tt_value(&x.view), tt_value(&g.view)};
  tpu_attr_t attrs[3] = {tt_int(2), tt_int(0), tt_bool(true)}; /* no bicubic in 3-d */
  tpu_node_t node = tt_node(in, 2, NULL, 0, attrs, 3);
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&x);
  tt_free(&g);
}
