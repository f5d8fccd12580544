/* test_multilabel_margin_loss.c — multilabel_margin_loss forward and backward
 * against the reference: float32/float64, reductions, 2-D, 1-D and 0-dim
 * inputs, strided views, -1-terminated target lists, an empty batch; a target
 * or is_target out of range and PyTorch's shape errors are statuses. */
#include <string.h>

#include "kernel_test_util.h"

tpu_status_t tpu_multilabel_margin_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                             tpu_exec_ctx_t* ctx);

typedef struct mlm_case {
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t sizes[2];
  tt_layout_t layout;
  int64_t reduction;
} mlm_case_t;

static const mlm_case_t k_cases[] = {
    {TPU_DTYPE_F32, 2, {6, 5}, TT_CONTIG, 1},      {TPU_DTYPE_F64, 2, {9, 13}, TT_TRANSPOSED, 0},
    {TPU_DTYPE_F32, 2, {700, 7}, TT_GAPS, 2},      {TPU_DTYPE_F64, 1, {11}, TT_PADDED, 0},
    {TPU_DTYPE_F32, 1, {8}, TT_CONTIG, 1},         {TPU_DTYPE_F64, 0, {1}, TT_CONTIG, 0},
    {TPU_DTYPE_F64, 2, {3, 300}, TT_REVERSED, 1},  {TPU_DTYPE_F32, 2, {0, 4}, TT_CONTIG, 0},
    {TPU_DTYPE_F64, 2, {0, 4}, TT_CONTIG, 2},
};

/* Row i's targets: a few distinct classes (sometimes none, sometimes all)
 * then -1, then junk the kernel must not read. */
static void fill_targets(const tpu_view_t* t, int64_t n, int64_t c, uint64_t seed) {
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = tt_rand_int(&seed, 0, c);
    for (int64_t j = 0; j < c; ++j) {
      int64_t v = j < k ? (j * 7 + i) % c : j == k ? -1 : tt_rand_int(&seed, -1, c - 1);
      int64_t off = tt_offset(t, i * c + j);
      memcpy(view_at(t, off), &v, sizeof(v));
    }
  }
}

TEST(multilabel_margin_cases) {
  const tpu_op_def_t* fwd = tt_def("multilabel_margin_loss_forward");
  const tpu_op_def_t* bwd = tt_def("multilabel_margin_loss_backward");
  CHECK(fwd && bwd);
  if (!fwd || !bwd) return;
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) {
    const mlm_case_t* c = &k_cases[i];
    char what[80];
    int64_t C = c->ndim ? c->sizes[c->ndim - 1] : 1, N = c->ndim == 2 ? c->sizes[0] : 1;
    tt_t x = tt_make(c->dtype, c->ndim, c->sizes, c->layout);
    tt_t t = tt_make(TPU_DTYPE_I64, c->ndim, c->sizes, c->layout);
    tt_fill(&x.view, -1.5, 1.5, 0);
    fill_targets(&t.view, N, C, 11 + i);
    tpu_value_t in[2] = {tt_value(&x.view), tt_value(&t.view)};
    tpu_attr_t attrs[1] = {tt_int(c->reduction)};
    tpu_view_t shape[2], gshape;
    tpu_node_t node = tt_node(in, 2, NULL, 0, attrs, 1);
    CHECK_OK(fwd->check(fwd, &node));
    CHECK_OK(fwd->infer(fwd, &node, shape));
    CHECK(shape[0].ndim == (c->reduction == 0 && c->ndim == 2 ? 1 : 0));
    tt_t got[2] = {tt_like(&shape[0], TT_GAPS), tt_like(&shape[1], TT_TRANSPOSED)};
    tt_t want[2] = {tt_like(&shape[0], TT_CONTIG), tt_like(&shape[1], TT_CONTIG)};
    tpu_view_t gv[2] = {got[0].view, got[1].view}, wv[2] = {want[0].view, want[1].view};
    node.num_outputs = 2;
    node.outputs = gv;
    CHECK_OK(tt_run(fwd->kernel, fwd, &node));
    node.outputs = wv;
    CHECK_OK(tt_run(tpu_multilabel_margin_reference, fwd, &node));
    snprintf(what, sizeof(what), "multilabel case %d (%s)", (int)i, tpu_dtype_name(c->dtype));
    if (tpu_view_numel(&shape[0]) && N > 0)
      tt_compare(what, &gv[0], &wv[0], tt_tol(c->dtype) + 1e-12);
    tt_compare(what, &gv[1], &wv[1], 0);

    tt_t go = tt_like(&shape[0], TT_CONTIG);
    tt_fill(&go.view, -1, 1, 0);
    tpu_value_t bin[4] = {tt_value(&go.view), in[0], in[1], tt_value(&want[1].view)};
    node = tt_node(bin, 4, NULL, 0, attrs, 1);
    CHECK_OK(bwd->check(bwd, &node));
    CHECK_OK(bwd->infer(bwd, &node, &gshape));
    tt_t ggot = tt_like(&gshape, TT_REVERSED), gwant = tt_like(&gshape, TT_CONTIG);
    node.num_outputs = 1;
    node.outputs = &ggot.view;
    CHECK_OK(tt_run(bwd->kernel, bwd, &node));
    node.outputs = &gwant.view;
    CHECK_OK(tt_run(tpu_multilabel_margin_reference, bwd, &node));
    snprintf(what, sizeof(what), "multilabel case %d backward", (int)i);
    tt_compare(what, &ggot.view, &gwant.view, tt_tol(c->dtype) + 1e-12);
    tt_free(&got[0]), tt_free(&got[1]), tt_free(&want[0]), tt_free(&want[1]);
    tt_free(&go), tt_free(&ggot), tt_free(&gwant), tt_free(&x), tt_free(&t);
  }
}

TEST(multilabel_margin_semantics) {
  const tpu_op_def_t* fwd = tt_def("multilabel_margin_loss_forward");
  const tpu_op_def_t* bwd = tt_def("multilabel_margin_loss_backward");
  if (!fwd || !bwd) return;
  int64_t xs[1] = {4};
  tt_t x = tt_make(TPU_DTYPE_F64, 1, xs, TT_CONTIG), t = tt_make(TPU_DTYPE_I64, 1, xs, TT_CONTIG);
  tt_t o = tt_make(TPU_DTYPE_F64, 0, xs, TT_CONTIG), ist = tt_make(TPU_DTYPE_F64, 1, xs, TT_CONTIG);
  const double xv[4] = {0.1, 0.2, 0.4, 0.8};
  const int64_t tv[4] = {3, 0, -1, 1}; /* targets {3, 0}; the 1 after -1 is ignored */
  for (int k = 0; k < 4; ++k) tt_set(&x.view, k, xv[k]);
  memcpy(t.mem, tv, sizeof(tv));
  tpu_value_t in[2] = {tt_value(&x.view), tt_value(&t.view)};
  tpu_attr_t attrs[1] = {tt_int(0)};
  tpu_view_t outs[2] = {o.view, ist.view};
  tpu_node_t node = tt_node(in, 2, outs, 2, attrs, 1);
  CHECK_OK(tt_run(fwd->kernel, fwd, &node));
  /* y = 3: 1 - .8 + .2, 1 - .8 + .4; y = 0: 1 - .1 + .2, 1 - .1 + .4; over C = 4 */
  CHECK_NEAR(tt_get(&o.view, 0), (0.4 + 0.6 + 1.1 + 1.3) / 4, 1e-12);
  CHECK(tt_get(&ist.view, 0) == 1 && tt_get(&ist.view, 1) == 0 && tt_get(&ist.view, 3) == 1);
  int64_t bad = 4; /* out of range: a status, found by the kernel */
  memcpy((char*)t.mem + sizeof(int64_t), &bad, sizeof(bad));
  CHECK_CODE(tt_run(fwd->kernel, fwd, &node), TPU_CODE_INVALID_ARGUMENT);
  bad = -2;
  memcpy((char*)t.mem + sizeof(int64_t), &bad, sizeof(bad));
  CHECK_CODE(tt_run(fwd->kernel, fwd, &node), TPU_CODE_INVALID_ARGUMENT);
  memcpy(t.mem, tv, sizeof(tv));
  /* is_target outside [0, 1]: the backward's status */
  tt_set(&ist.view, 2, 2.0);
  tpu_value_t bin[4] = {tt_value(&o.view), in[0], in[1], tt_value(&ist.view)};
  tt_t gi = tt_make(TPU_DTYPE_F64, 1, xs, TT_CONTIG);
  node = tt_node(bin, 4, &gi.view, 1, attrs, 1);
  CHECK_CODE(tt_run(bwd->kernel, bwd, &node), TPU_CODE_INVALID_ARGUMENT);
  /* a target of another size, an empty class dim, rank 3, int32 targets */
  int64_t s3[1] = {3};
  tt_t t3 = tt_make(TPU_DTYPE_I64, 1, s3, TT_CONTIG);
  in[1] = tt_value(&t3.view);
  node = tt_node(in, 2, NULL, 0, attrs, 1);
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_INVALID_ARGUMENT);
  int64_t e2[2] = {3, 0}, r3[3] = {2, 2, 2};
  tt_t xe = tt_make(TPU_DTYPE_F32, 2, e2, TT_CONTIG), x3 = tt_make(TPU_DTYPE_F32, 3, r3, TT_CONTIG);
  tt_t t32 = tt_make(TPU_DTYPE_I32, 1, xs, TT_CONTIG);
  tt_t xh = tt_make(TPU_DTYPE_F16, 1, xs, TT_CONTIG);
  in[0] = tt_value(&xe.view);
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_INVALID_ARGUMENT);
  in[0] = tt_value(&x3.view);
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_INVALID_ARGUMENT);
  in[0] = tt_value(&x.view), in[1] = tt_value(&t32.view);
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_INVALID_ARGUMENT);
  in[0] = tt_value(&xh.view), in[1] = tt_value(&t.view); /* the CPU has no half kernel */
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&x), tt_free(&t), tt_free(&o), tt_free(&ist), tt_free(&gi), tt_free(&t3);
  tt_free(&xe), tt_free(&x3), tt_free(&t32), tt_free(&xh);
}
