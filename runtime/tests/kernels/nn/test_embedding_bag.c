/* test_embedding_bag.c — the embedding_bag family (embedding_bag.c) against
 * its reference: the forward for every mode and dtype (empty bags,
 * include_last_offset, per_sample_weights, padding_idx, strided operands and
 * outputs), its errors, and the dense backward from the forward's own aux
 * outputs. */
#include "kernel_test_util.h"

#define F32 TPU_DTYPE_F32
#define I64 TPU_DTYPE_I64

tpu_status_t embedding_bag_reference(const tpu_op_def_t* def, const tpu_node_t* node);

TEST(embedding_bag_forward_matches_reference) {
  const tpu_op_def_t* def = tt_def("embedding_bag");
  if (!def) return;
  tpu_dtype_t dts[3] = {F32, TPU_DTYPE_F64, TPU_DTYPE_BF16};
  for (int k = 0; k < 3; ++k)
    for (int mode = 0; mode < 3; ++mode)
      for (int v = 0; v < 2; ++v) {
        int64_t ws[2] = {40, 9}, n[1] = {60}, nb[1] = {v ? 8 : 7};
        tt_t w = tt_make(dts[k], 2, ws, v ? TT_TRANSPOSED : TT_CONTIG);
        tt_t idx = tt_make(I64, 1, n, v ? TT_GAPS : TT_CONTIG);
        tt_t off = tt_make(TPU_DTYPE_I32, 1, nb, TT_CONTIG), psw = tt_make(dts[k], 1, n, TT_PADDED);
        tt_fill_ints(&w.view, 1 + k, -5, 5), tt_fill_ints(&idx.view, 2 + mode, 0, 39);
        tt_fill_ints(&psw.view, 3, -2, 2);
        int64_t starts[8] = {0, 3, 3, 10, 25, 26, 40, 60}; /* an empty bag; last = N with v */
        for (int b = 0; b < nb[0]; ++b) tt_set(&off.view, b, (double)starts[b]);
        tpu_value_t in[4] = {tt_value(&w.view), tt_value(&idx.view), tt_value(&off.view),
                             tt_value(mode == 0 && v ? &psw.view : NULL)};
        tpu_node_t node = {.op = tpu_op_lookup("embedding_bag"), .num_inputs = 4,
                           .num_outputs = 4, .num_attrs = 5, .inputs = in};
        node.attrs[0] = tt_bool(false), node.attrs[1] = tt_int(mode);
        node.attrs[2] = tt_bool(false), node.attrs[3] = tt_bool(v);
        node.attrs[4] = tt_int(v ? 7 : -1);
        tpu_view_t shapes[4];
        CHECK_OK(def->infer(def, &node, shapes));
        tt_t outs[4], want = tt_make(dts[k], 2, shapes[0].sizes, TT_CONTIG);
        tpu_view_t ov[4];
        for (int o = 0; o < 4; ++o)
          outs[o] = tt_make(shapes[o].dtype, shapes[o].ndim, shapes[o].sizes,
                            o == 0 && v ? TT_TRANSPOSED : TT_CONTIG),
          ov[o] = outs[o].view;
        node.outputs = ov;
        tpu_exec_ctx_t ctx = {0};
        CHECK_OK(def->kernel(def, &node, &ctx));
        node.outputs = &want.view;
        CHECK_OK(embedding_bag_reference(def, &node));
        double tol = dts[k] == TPU_DTYPE_BF16 ? 1e-2 : 1e-9;
        double d = tt_max_rel_diff(&outs[0].view, &want.view);
        if (!(d <= tol))
          tpu_test_fail(__FILE__, __LINE__, "embedding_bag %s mode %d v %d: diff %g",
                        tpu_dtype_name(dts[k]), mode, v, d);
        /* offset2bag: bag of each position */
        CHECK(tt_get(&outs[1].view, 4) == 2 && tt_get(&outs[1].view, 0) == 0);
        for (int o = 0; o < 4; ++o) tt_free(&outs[o]);
        tt_free(&want), tt_free(&w), tt_free(&idx), tt_free(&off), tt_free(&psw);
      }
  /* errors: an index out of range, offsets[0] != 0 */
  int64_t ws[2] = {5, 3}, n[1] = {2}, nb[1] = {1};
  tt_t w = tt_make(F32, 2, ws, TT_CONTIG), idx = tt_make(I64, 1, n, TT_CONTIG);
  tt_t off = tt_make(I64, 1, nb, TT_CONTIG);
  tt_set(&idx.view, 1, 7);
  tpu_value_t in[4] = {tt_value(&w.view), tt_value(&idx.view), tt_value(&off.view), tt_value(NULL)};
  tpu_node_t node = {.op = tpu_op_lookup("embedding_bag"), .num_inputs = 4, .num_outputs = 4,
                     .num_attrs = 5, .inputs = in};
  node.attrs[1] = tt_int(0), node.attrs[4] = tt_int(-1);
  tpu_view_t shapes[4];
  CHECK_OK(def->infer(def, &node, shapes));
  tt_t outs[4];
  tpu_view_t ov[4];
  for (int o = 0; o < 4; ++o)
    outs[o] = tt_make(shapes[o].dtype, shapes[o].ndim, shapes[o].sizes, TT_CONTIG), ov[o] = outs[o].view;
  node.outputs = ov;
  tpu_exec_ctx_t ctx = {0};
  tpu_status_t s = def->kernel(def, &node, &ctx);
  CHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT &&
        strstr(tpu_status_message(s), "Index 1 of input takes value 7 which is not in the valid range [0, 5)"));
  tpu_status_free(s);
  tt_set(&idx.view, 1, 2), tt_set(&off.view, 0, 1);
  s = def->kernel(def, &node, &ctx);
  CHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT && strstr(tpu_status_message(s), "offsets[0] has to be 0"));
  tpu_status_free(s);
  for (int o = 0; o < 4; ++o) tt_free(&outs[o]);
  tt_free(&w), tt_free(&idx), tt_free(&off);
}

/* The weight gradient of every mode from the forward's own aux outputs. */
TEST(embedding_bag_backward_matches_reference) {
  const tpu_op_def_t* fwd = tt_def("embedding_bag");
  const tpu_op_def_t* bwd = tt_def("embedding_bag_dense_backward");
  if (!fwd || !bwd) return;
  tpu_dtype_t dts[3] = {F32, TPU_DTYPE_F64, TPU_DTYPE_F16};
  for (int k = 0; k < 3; ++k)
    for (int mode = 0; mode < 3; ++mode)
      for (int v = 0; v < 2; ++v) {
        int64_t V = v ? 3000 : 30, ws[2] = {V, 7}, n[1] = {90}, nb[1] = {6};
        tt_t w = tt_make(dts[k], 2, ws, TT_CONTIG), idx = tt_make(I64, 1, n, TT_CONTIG);
        tt_t off = tt_make(I64, 1, nb, TT_CONTIG), psw = tt_make(dts[k], 1, n, TT_GAPS);
        tt_fill_ints(&w.view, 11 + k, -6, 6), tt_fill_ints(&idx.view, 12 + mode, 0, v ? 2999 : 29);
        tt_fill_ints(&psw.view, 13, -2, 2);
        int64_t starts[6] = {0, 10, 10, 40, 41, 70};
        for (int b = 0; b < 6; ++b) tt_set(&off.view, b, (double)starts[b]);
        bool use_psw = mode == 0 && v;
        tpu_value_t in[4] = {tt_value(&w.view), tt_value(&idx.view), tt_value(&off.view),
                             tt_value(use_psw ? &psw.view : NULL)};
        tpu_node_t node = {.op = tpu_op_lookup("embedding_bag"), .num_inputs = 4,
                           .num_outputs = 4, .num_attrs = 5, .inputs = in};
        node.attrs[1] = tt_int(mode), node.attrs[4] = tt_int(v ? 5 : -1);
        tpu_view_t shapes[4], ov[4];
        CHECK_OK(fwd->infer(fwd, &node, shapes));
        tt_t outs[4];
        for (int o = 0; o < 4; ++o)
          outs[o] = tt_make(shapes[o].dtype, shapes[o].ndim, shapes[o].sizes, TT_CONTIG),
          ov[o] = outs[o].view;
        node.outputs = ov;
        tpu_exec_ctx_t ctx = {0};
        CHECK_OK(fwd->kernel(fwd, &node, &ctx));
        tt_t grad = tt_make(dts[k], 2, shapes[0].sizes, v ? TT_TRANSPOSED : TT_CONTIG);
        tt_fill_ints(&grad.view, 14, -3, 3);
        tpu_value_t bin[6] = {tt_value(&grad.view), tt_value(&idx.view), tt_value(&outs[1].view),
                              tt_value(&outs[2].view), tt_value(&outs[3].view),
                              tt_value(use_psw ? &psw.view : NULL)};
        tpu_attr_t at[4] = {tt_int(V), tt_bool(v && mode != 0), tt_int(mode), tt_int(v ? 5 : -1)};
        tpu_node_t bn = {.op = tpu_op_lookup("embedding_bag_dense_backward"), .num_inputs = 6,
                         .num_outputs = 1, .num_attrs = 4, .inputs = bin};
        memcpy(bn.attrs, at, sizeof at);
        tpu_view_t gs;
        CHECK_OK(bwd->infer(bwd, &bn, &gs));
        tt_t got = tt_make(gs.dtype, gs.ndim, gs.sizes, v ? TT_PADDED : TT_CONTIG);
        tt_t want = tt_make(gs.dtype, gs.ndim, gs.sizes, TT_CONTIG);
        bn.outputs = &got.view;
        CHECK_OK(bwd->kernel(bwd, &bn, &ctx));
        bn.outputs = &want.view;
        CHECK_OK(embedding_bag_reference(bwd, &bn));
        double d = tt_max_rel_diff(&got.view, &want.view);
        double tol = dts[k] == TPU_DTYPE_F16 ? 2e-3 : 1e-6;
        if (!(d <= tol))
          tpu_test_fail(__FILE__, __LINE__, "embedding_bag backward %s mode %d v %d: diff %g",
                        tpu_dtype_name(dts[k]), mode, v, d);
        for (int o = 0; o < 4; ++o) tt_free(&outs[o]);
        tt_free(&w), tt_free(&idx), tt_free(&off), tt_free(&psw), tt_free(&grad), tt_free(&got),
            tt_free(&want);
      }
}
