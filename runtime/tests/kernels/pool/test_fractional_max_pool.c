/* test_fractional_max_pool.c — fractional_max_pool2d/3d and their backwards
 * against the reference, exactly (outputs, indices, gradients): float32,
 * float64 and the half types, batched and unbatched, strided views, windows
 * that overlap, output sizes of one and zero, NaNs; PyTorch's argument errors
 * are statuses, a saved index outside the plane too. */
#include <string.h>

#include "kernel_test_util.h"

tpu_status_t tpu_fractional_max_pool_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                               tpu_exec_ctx_t* ctx);

typedef struct fmp_case {
  tpu_dtype_t dtype;
  int32_t sd, ndim;
  int64_t sizes[5];
  int64_t k[3], o[3];
  tt_layout_t layout;
  double nan_rate;
} fmp_case_t;

static const fmp_case_t k_cases[] = {
    {TPU_DTYPE_F32, 2, 4, {2, 3, 9, 11}, {2, 3}, {5, 6}, TT_CONTIG, 0},
    {TPU_DTYPE_F64, 2, 3, {4, 13, 7}, {3, 2}, {9, 4}, TT_TRANSPOSED, 0},
    {TPU_DTYPE_F32, 2, 4, {3, 2, 31, 17}, {3, 3}, {20, 1}, TT_GAPS, 0.05},
    {TPU_DTYPE_BF16, 2, 4, {1, 5, 10, 10}, {2, 2}, {7, 6}, TT_CONTIG, 0},
    {TPU_DTYPE_F16, 2, 3, {2, 8, 8}, {1, 2}, {8, 3}, TT_PADDED, 0},
    {TPU_DTYPE_F32, 2, 4, {0, 3, 5, 5}, {2, 2}, {3, 3}, TT_CONTIG, 0},
    {TPU_DTYPE_F32, 2, 4, {2, 2, 5, 5}, {2, 2}, {0, 3}, TT_CONTIG, 0},
    {TPU_DTYPE_F32, 3, 5, {2, 2, 7, 6, 9}, {2, 3, 2}, {4, 3, 5}, TT_CONTIG, 0},
    {TPU_DTYPE_F64, 3, 4, {3, 5, 8, 6}, {2, 2, 3}, {3, 5, 2}, TT_REVERSED, 0.05},
    {TPU_DTYPE_BF16, 3, 5, {1, 2, 6, 6, 6}, {2, 2, 2}, {3, 3, 3}, TT_GAPS, 0},
};

TEST(fractional_max_pool_cases) {
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) {
    const fmp_case_t* c = &k_cases[i];
    const tpu_op_def_t* fwd =
        tt_def(c->sd == 2 ? "fractional_max_pool2d" : "fractional_max_pool3d");
    const tpu_op_def_t* bwd =
        tt_def(c->sd == 2 ? "fractional_max_pool2d_backward" : "fractional_max_pool3d_backward");
    CHECK(fwd && bwd);
    if (!fwd || !bwd) return;
    char what[80];
    snprintf(what, sizeof(what), "fractional case %d (%s)", (int)i, tpu_dtype_name(c->dtype));
    tt_t x = tt_make(c->dtype, c->ndim, c->sizes, c->layout);
    tt_fill(&x.view, -3, 3, c->nan_rate);
    int64_t rsz[3] = {c->ndim == c->sd + 2 ? c->sizes[0] + 1 : 1,
                      c->sizes[c->ndim - c->sd - 1], c->sd};
    tt_t rs = tt_make(c->dtype, 3, rsz, TT_TRANSPOSED);
    tt_fill(&rs.view, 0, 0.999, 0);
    tpu_value_t in[2] = {tt_value(&x.view), tt_value(&rs.view)};
    tpu_attr_t attrs[2] = {tt_ints(c->sd, c->k), tt_ints(c->sd, c->o)};
    tpu_view_t shape[2], gshape;
    tpu_node_t node = tt_node(in, 2, NULL, 0, attrs, 2);
    CHECK_OK(fwd->check(fwd, &node));
    CHECK_OK(fwd->infer(fwd, &node, shape));
    tt_t got[2] = {tt_like(&shape[0], TT_GAPS), tt_like(&shape[1], TT_REVERSED)};
    tt_t want[2] = {tt_like(&shape[0], TT_CONTIG), tt_like(&shape[1], TT_CONTIG)};
    tpu_view_t gv[2] = {got[0].view, got[1].view}, wv[2] = {want[0].view, want[1].view};
    node.num_outputs = 2;
    node.outputs = gv;
    CHECK_OK(tt_run(fwd->kernel, fwd, &node));
    node.outputs = wv;
    CHECK_OK(tt_run(tpu_fractional_max_pool_reference, fwd, &node));
    tt_compare(what, &gv[0], &wv[0], 0);
    tt_compare(what, &gv[1], &wv[1], 0);

    tt_t go = tt_like(&shape[0], TT_TRANSPOSED);
    tt_fill(&go.view, -1, 1, 0);
    tpu_value_t bin[3] = {tt_value(&go.view), in[0], tt_value(&want[1].view)};
    node = tt_node(bin, 3, NULL, 0, attrs, 2);
    CHECK_OK(bwd->check(bwd, &node));
    CHECK_OK(bwd->infer(bwd, &node, &gshape));
    tt_t ggot = tt_like(&gshape, TT_PADDED), gwant = tt_like(&gshape, TT_CONTIG);
    node.num_outputs = 1;
    node.outputs = &ggot.view;
    CHECK_OK(tt_run(bwd->kernel, bwd, &node));
    node.outputs = &gwant.view;
    CHECK_OK(tt_run(tpu_fractional_max_pool_reference, bwd, &node));
    snprintf(what, sizeof(what), "fractional case %d backward", (int)i);
    tt_compare(what, &ggot.view, &gwant.view, 0);
    if (tpu_view_numel(&gshape) > 0 && tpu_view_numel(&shape[0]) > 0) {
      /* a saved index outside the plane is a status */
      int64_t big = 1 << 30;
      memcpy(tt_elem(&want[1].view, 0), &big, sizeof(big));
      node.outputs = &ggot.view;
      CHECK_CODE(tt_run(bwd->kernel, bwd, &node), TPU_CODE_INVALID_ARGUMENT);
    }
    tt_free(&got[0]), tt_free(&got[1]), tt_free(&want[0]), tt_free(&want[1]);
    tt_free(&go), tt_free(&ggot), tt_free(&gwant), tt_free(&x), tt_free(&rs);
  }
}

/* Window starts by hand: in 10, out 4, k 3, u 0.5: alpha = 7/3,
 * starts (int)(0.5a)=1 -> 0, (int)(1.5a)=3 -> 2, (int)(2.5a)=5 -> 4, last 7. */
TEST(fractional_max_pool_windows) {
  const tpu_op_def_t* fwd = tt_def("fractional_max_pool2d");
  if (!fwd) return;
  int64_t xs[3] = {1, 1, 10}, rsz[3] = {1, 1, 2}, k[2] = {1, 3}, o[2] = {1, 4};
  tt_t x = tt_make(TPU_DTYPE_F64, 3, xs, TT_CONTIG), rs = tt_make(TPU_DTYPE_F64, 3, rsz, TT_CONTIG);
  for (int e = 0; e < 10; ++e) tt_set(&x.view, e, e == 3 ? 100 : -e);
  tt_set(&rs.view, 0, 0.5); /* W */
  tt_set(&rs.view, 1, 0.9); /* H: one output row */
  int64_t os[3] = {1, 1, 4};
  tt_t out = tt_make(TPU_DTYPE_F64, 3, os, TT_CONTIG);
  tt_t idx = tt_make(TPU_DTYPE_I64, 3, os, TT_CONTIG);
  tpu_value_t in[2] = {tt_value(&x.view), tt_value(&rs.view)};
  tpu_attr_t attrs[2] = {tt_ints(2, k), tt_ints(2, o)};
  tpu_view_t outs[2] = {out.view, idx.view};
  tpu_node_t node = tt_node(in, 2, outs, 2, attrs, 2);
  CHECK_OK(tt_run(fwd->kernel, fwd, &node));
  const double want[4] = {-0.0, 100, 100, -7}; /* windows [0,3), [2,5), [4,7)... */
  const int64_t wi[4] = {0, 3, 4, 7};
  CHECK(tt_get(&out.view, 0) == want[0] && tt_get(&out.view, 1) == want[1]);
  CHECK(tt_get(&out.view, 3) == want[3]);
  CHECK(view_get_i64(&idx.view, 0) == wi[0] && view_get_i64(&idx.view, 1) == wi[1]);
  CHECK(view_get_i64(&idx.view, 2) == 4 && view_get_i64(&idx.view, 3) == wi[3]);
  /* argument errors */
  int64_t kz[2] = {0, 3}, obig[2] = {1, 9}, rbad[3] = {1, 2, 2};
  tt_t rs2 = tt_make(TPU_DTYPE_F64, 3, rbad, TT_CONTIG);
  tt_t rs32 = tt_make(TPU_DTYPE_F32, 3, rsz, TT_CONTIG);
  tpu_attr_t bad_k[2] = {tt_ints(2, kz), tt_ints(2, o)};
  tpu_attr_t bad_o[2] = {tt_ints(2, k), tt_ints(2, obig)};
  node = tt_node(in, 2, NULL, 0, bad_k, 2);
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_INVALID_ARGUMENT);
  node = tt_node(in, 2, NULL, 0, bad_o, 2);
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_INVALID_ARGUMENT);
  node = tt_node(in, 2, NULL, 0, attrs, 2);
  CHECK_OK(fwd->check(fwd, &node));
  in[1] = tt_value(&rs2.view); /* channels differ */
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_INVALID_ARGUMENT);
  in[1] = tt_value(&rs32.view); /* dtype differs */
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_INVALID_ARGUMENT);
  tt_free(&x), tt_free(&rs), tt_free(&out), tt_free(&idx), tt_free(&rs2), tt_free(&rs32);
}
