/* test_margin_loss.c — multi_margin_loss (forward and backward) against its
 * reference: dtypes, p 1 and 2, weights, reductions, 1-D inputs, strided
 * views, many rows; a target out of range is a status, never a bad read. */
#include <string.h>

#include "kernel_test_util.h"

tpu_status_t tpu_margin_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx);

typedef struct ml_case {
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t sizes[2];
  tt_layout_t layout;
  int64_t p, reduction;
  bool weight;
} ml_case_t;

static const ml_case_t k_cases[] = {
    {TPU_DTYPE_F32, 2, {6, 5}, TT_CONTIG, 1, 1, false},
    {TPU_DTYPE_F64, 2, {9, 13}, TT_TRANSPOSED, 2, 0, true},
    {TPU_DTYPE_F32, 2, {3000, 7}, TT_GAPS, 1, 2, true},
    {TPU_DTYPE_BF16, 2, {4, 9}, TT_CONTIG, 2, 1, false},
    {TPU_DTYPE_F16, 1, {11}, TT_CONTIG, 1, 0, true},
    {TPU_DTYPE_F64, 2, {2, 5000}, TT_PADDED, 2, 1, true},
};

TEST(margin_loss_cases) {
  const tpu_op_def_t* fwd = tt_def("multi_margin_loss");
  const tpu_op_def_t* bwd = tt_def("multi_margin_loss_backward");
  if (!fwd || !bwd) return;
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) {
    const ml_case_t* c = &k_cases[i];
    char what[64];
    snprintf(what, sizeof(what), "margin case %d (%s)", (int)i, tpu_dtype_name(c->dtype));
    int64_t C = c->sizes[c->ndim - 1], N = c->ndim == 2 ? c->sizes[0] : 1;
    tt_t x = tt_make(c->dtype, c->ndim, c->sizes, c->layout);
    tt_t t = tt_make(TPU_DTYPE_I64, c->ndim - 1, &N, TT_CONTIG);
    tt_t w = tt_make(c->dtype, 1, &C, TT_CONTIG);
    tt_fill(&x.view, -2, 2, 0);
    tt_fill(&w.view, 0.5, 2, 0);
    tt_fill_ints(&t.view, 7 + i, 0, C - 1);
    tpu_value_t in[3] = {tt_value(&x.view), tt_value(&t.view), tt_value(c->weight ? &w.view : NULL)};
    tpu_attr_t attrs[3] = {tt_int(c->p), tt_float(0.8), tt_int(c->reduction)};
    tpu_view_t shape, gshape;
    tpu_node_t node = tt_node(in, 3, NULL, 0, attrs, 3);
    CHECK_OK(fwd->check(fwd, &node));
    CHECK_OK(fwd->infer(fwd, &node, &shape));
    tt_t got = tt_like(&shape, TT_GAPS), want = tt_like(&shape, TT_CONTIG);
    node.num_outputs = 1;
    node.outputs = &got.view;
    CHECK_OK(tt_run(fwd->kernel, fwd, &node));
    node.outputs = &want.view;
    CHECK_OK(tt_run(tpu_margin_reference, fwd, &node));
    tt_compare(what, &got.view, &want.view, tt_tol(c->dtype) + 1e-12);

    tt_t go = tt_like(&shape, TT_CONTIG);
    tt_fill(&go.view, -1, 1, 0);
    tpu_value_t bin[4] = {tt_value(&go.view), in[0], in[1], in[2]};
    node = tt_node(bin, 4, NULL, 0, attrs, 3);
    CHECK_OK(bwd->check(bwd, &node));
    CHECK_OK(bwd->infer(bwd, &node, &gshape));
    tt_t ggot = tt_like(&gshape, TT_REVERSED), gwant = tt_like(&gshape, TT_CONTIG);
    node.num_outputs = 1;
    node.outputs = &ggot.view;
    CHECK_OK(tt_run(bwd->kernel, bwd, &node));
    node.outputs = &gwant.view;
    CHECK_OK(tt_run(tpu_margin_reference, bwd, &node));
    snprintf(what, sizeof(what), "margin case %d backward (%s)", (int)i, tpu_dtype_name(c->dtype));
    tt_compare(what, &ggot.view, &gwant.view, tt_tol(c->dtype) + 1e-12);
    tt_free(&got), tt_free(&want), tt_free(&go), tt_free(&ggot), tt_free(&gwant);
    tt_free(&x), tt_free(&t), tt_free(&w);
  }
}

TEST(margin_loss_semantics) {
  const tpu_op_def_t* fwd = tt_def("multi_margin_loss");
  if (!fwd) return;
  int64_t xs[2] = {1, 3}, n = 1;
  tt_t x = tt_make(TPU_DTYPE_F64, 2, xs, TT_CONTIG), t = tt_make(TPU_DTYPE_I64, 1, &n, TT_CONTIG);
  tt_t o = tt_make(TPU_DTYPE_F64, 0, xs, TT_CONTIG);
  const double xv[3] = {0.5, 1.0, 0.2}; /* target 1: z = 1 - 1 + 0.5, 1 - 1 + 0.2 */
  for (int i = 0; i < 3; ++i) tt_set(&x.view, i, xv[i]);
  int64_t y = 1;
  memcpy(t.mem, &y, sizeof(y));
  tpu_value_t in[3] = {tt_value(&x.view), tt_value(&t.view), tt_value(NULL)};
  tpu_attr_t attrs[3] = {tt_int(1), tt_int(1), tt_int(2)};
  tpu_node_t node = tt_node(in, 3, &o.view, 1, attrs, 3);
  CHECK_OK(tt_run(fwd->kernel, fwd, &node));
  CHECK_NEAR(tt_get(&o.view, 0), (0.5 + 0.2) / 3, 1e-12);
  y = 3; /* out of range: a status */
  memcpy(t.mem, &y, sizeof(y));
  CHECK_CODE(tt_run(fwd->kernel, fwd, &node), TPU_CODE_INVALID_ARGUMENT);
  attrs[0] = tt_int(3); /* p = 3: PyTorch rejects it, fall back */
  node = tt_node(in, 3, NULL, 0, attrs, 3);
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&x), tt_free(&t), tt_free(&o);
}
