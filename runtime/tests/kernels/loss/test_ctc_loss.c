/* test_ctc_loss.c — _ctc_loss (with its _ctc_loss_count row, which sizes
 * log_alpha) and _ctc_loss_backward against the reference:
 * float32/float64, padded 2-D and concatenated 1-D targets (int64, int32),
 * repeated labels, empty targets, empty and partial inputs, impossible
 * alignments (nll +inf) with zero_infinity off and on, strided views; a label
 * out of range and PyTorch's argument errors are statuses. */
#include <string.h>

#include "kernel_test_util.h"

tpu_status_t tpu_ctc_loss_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                    tpu_exec_ctx_t* ctx);

typedef struct ctc_case {
  tpu_dtype_t dtype, tdtype;
  int64_t T, B, C, blank;
  bool concat, zero_infinity;
  tt_layout_t layout;
  int64_t il[4], tl[4];
} ctc_case_t;

/* An int64 vector of n values. */
static tt_t make_ints(int64_t n, const int64_t* v) {
  tt_t t = tt_make(TPU_DTYPE_I64, 1, &n, TT_CONTIG);
  memcpy(t.mem, v, sizeof(int64_t) * (size_t)n);
  return t;
}

/* Runs the count row on a forward node and stores its result in sync_size
 * (attr 2), as the bridge does. */
static tpu_status_t ctc_sync(tpu_node_t* node) {
  const tpu_op_def_t* cnt = tt_def("_ctc_loss_count");
  int64_t one = 1;
  tt_t o = tt_make(TPU_DTYPE_I64, 0, &one, TT_CONTIG);
  tpu_node_t c = *node;
  c.outputs = &o.view;
  c.num_outputs = 1;
  tpu_status_t s = cnt->check(cnt, &c);
  if (s == TPU_OK) s = tt_run(cnt->kernel, cnt, &c);
  if (s == TPU_OK) node->attrs[2] = tt_int((int64_t)tt_get(&o.view, 0));
  tt_free(&o);
  return s;
}

static const ctc_case_t k_cases[] = {
    {TPU_DTYPE_F32, TPU_DTYPE_I64, 12, 3, 5, 0, false, false, TT_CONTIG, {12, 9, 5}, {4, 2, 0}},
    {TPU_DTYPE_F64, TPU_DTYPE_I64, 20, 4, 7, 3, true, false, TT_REVERSED, {20, 20, 1, 0},
     {5, 9, 0, 0}},
    {TPU_DTYPE_F64, TPU_DTYPE_I32, 6, 2, 4, 1, false, true, TT_GAPS, {3, 6}, {3, 2}},
    {TPU_DTYPE_F32, TPU_DTYPE_I32, 9, 4, 3, 2, true, true, TT_PADDED, {9, 2, 0, 7}, {3, 3, 1, 1}},
    {TPU_DTYPE_F64, TPU_DTYPE_I64, 50, 2, 30, 0, false, false, TT_TRANSPOSED, {50, 41}, {20, 12}},
};

TEST(ctc_loss_cases) {
  const tpu_op_def_t* fwd = tt_def("_ctc_loss");
  const tpu_op_def_t* bwd = tt_def("_ctc_loss_backward");
  CHECK(fwd && bwd);
  if (!fwd || !bwd) return;
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) {
    const ctc_case_t* c = &k_cases[i];
    char what[80];
    int64_t lps[3] = {c->T, c->B, c->C}, maxl = 0, sum = 0;
    for (int64_t b = 0; b < c->B; ++b) {
      sum += c->tl[b];
      if (c->tl[b] > maxl) maxl = c->tl[b];
    }
    tt_t lp = tt_make(c->dtype, 3, lps, c->layout);
    tt_fill(&lp.view, -4, 0, 0);
    int64_t ts[2] = {c->concat ? sum : c->B, maxl + 1};
    tt_t tg = tt_make(c->tdtype, c->concat ? 1 : 2, ts, c->concat ? TT_CONTIG : TT_TRANSPOSED);
    /* labels other than blank, with repeats (the l'[s] == l'[s-2] case) */
    int64_t n = tpu_view_numel(&tg.view);
    for (int64_t e = 0; e < n; ++e) {
      int64_t l = (e * 7 / 3) % (c->C - 1);
      tt_set(&tg.view, e, (double)(l >= c->blank ? l + 1 : l));
    }
    tt_t il = make_ints(c->B, c->il), tl = make_ints(c->B, c->tl);
    tpu_value_t in[4] = {tt_value(&lp.view), tt_value(&tg.view), tt_value(&il.view),
                         tt_value(&tl.view)};
    tpu_attr_t attrs[3] = {tt_int(c->blank), tt_bool(c->zero_infinity), tt_none()};
    tpu_view_t shape[2], gshape;
    tpu_node_t node = tt_node(in, 4, NULL, 0, attrs, 3);
    CHECK_CODE(fwd->infer(fwd, &node, shape), TPU_CODE_UNIMPLEMENTED); /* needs the count */
    CHECK_OK(ctc_sync(&node));
    CHECK(node.attrs[2].u.i == maxl);
    CHECK_OK(fwd->check(fwd, &node));
    CHECK_OK(fwd->infer(fwd, &node, shape));
    CHECK(shape[1].sizes[2] == 2 * maxl + 1);
    tt_t got[2] = {tt_like(&shape[0], TT_GAPS), tt_like(&shape[1], TT_REVERSED)};
    tt_t want[2] = {tt_like(&shape[0], TT_CONTIG), tt_like(&shape[1], TT_CONTIG)};
    tpu_view_t gv[2] = {got[0].view, got[1].view}, wv[2] = {want[0].view, want[1].view};
    node.num_outputs = 2;
    node.outputs = gv;
    CHECK_OK(tt_run(fwd->kernel, fwd, &node));
    node.outputs = wv;
    CHECK_OK(tt_run(tpu_ctc_loss_reference, fwd, &node));
    snprintf(what, sizeof(what), "ctc case %d (%s)", (int)i, tpu_dtype_name(c->dtype));
    tt_compare(what, &gv[0], &wv[0], tt_tol(c->dtype) + 1e-10);
    tt_compare(what, &gv[1], &wv[1], tt_tol(c->dtype) + 1e-10);

    tt_t go = tt_like(&shape[0], TT_GAPS);
    tt_fill(&go.view, 0.5, 2, 0);
    tpu_value_t bin[7] = {tt_value(&go.view),      in[0], in[1], in[2], in[3],
                          tt_value(&want[0].view), tt_value(&want[1].view)};
    node = tt_node(bin, 7, NULL, 0, attrs, 2);
    CHECK_OK(bwd->check(bwd, &node));
    CHECK_OK(bwd->infer(bwd, &node, &gshape));
    tt_t ggot = tt_like(&gshape, TT_TRANSPOSED), gwant = tt_like(&gshape, TT_CONTIG);
    node.num_outputs = 1;
    node.outputs = &ggot.view;
    CHECK_OK(tt_run(bwd->kernel, bwd, &node));
    node.outputs = &gwant.view;
    CHECK_OK(tt_run(tpu_ctc_loss_reference, bwd, &node));
    snprintf(what, sizeof(what), "ctc case %d backward", (int)i);
    tt_compare(what, &ggot.view, &gwant.view, tt_tol(c->dtype) + 1e-9);
    tt_free(&got[0]), tt_free(&got[1]), tt_free(&want[0]), tt_free(&want[1]);
    tt_free(&go), tt_free(&ggot), tt_free(&gwant), tt_free(&lp), tt_free(&tg);
    tt_free(&il), tt_free(&tl);
  }
}

/* One step, one label: nll = -log p(label); an impossible alignment (two
 * labels in one step) is +inf; argument errors from check and count. */
TEST(ctc_loss_semantics) {
  const tpu_op_def_t* fwd = tt_def("_ctc_loss");
  if (!fwd) return;
  int64_t lps[3] = {1, 1, 3}, ts[2] = {1, 2}, one[1] = {1}, two[1] = {2}, pair[2] = {1, 1};
  tt_t lp = tt_make(TPU_DTYPE_F64, 3, lps, TT_CONTIG);
  tt_t tg = tt_make(TPU_DTYPE_I64, 2, ts, TT_CONTIG);
  tt_set(&lp.view, 0, log(0.2)), tt_set(&lp.view, 1, log(0.5)), tt_set(&lp.view, 2, log(0.3));
  tt_set(&tg.view, 0, 2), tt_set(&tg.view, 1, 1);
  tt_t il = make_ints(1, one), tl = make_ints(1, one), tl2 = make_ints(1, two);
  tt_t il2 = make_ints(1, two), ilp = make_ints(2, pair);
  int64_t s1[1] = {1}, s3[3] = {1, 1, 3}, s5[3] = {1, 1, 5};
  tt_t nll = tt_make(TPU_DTYPE_F64, 1, s1, TT_CONTIG);
  tt_t al = tt_make(TPU_DTYPE_F64, 3, s3, TT_CONTIG);
  tt_t al5 = tt_make(TPU_DTYPE_F64, 3, s5, TT_CONTIG);
  tpu_value_t in[4] = {tt_value(&lp.view), tt_value(&tg.view), tt_value(&il.view),
                       tt_value(&tl.view)};
  tpu_attr_t attrs[3] = {tt_int(0), tt_bool(false), tt_int(1)};
  tpu_view_t outs[2] = {nll.view, al.view};
  tpu_node_t node = tt_node(in, 4, outs, 2, attrs, 3);
  CHECK_OK(tt_run(fwd->kernel, fwd, &node));
  CHECK_NEAR(tt_get(&nll.view, 0), -log(0.3), 1e-12);
  in[3] = tt_value(&tl2.view); /* two labels in one step: +inf */
  tpu_view_t outs2[2] = {nll.view, al5.view};
  attrs[2] = tt_int(2);
  node = tt_node(in, 4, outs2, 2, attrs, 3);
  CHECK_OK(tt_run(fwd->kernel, fwd, &node));
  CHECK(isinf(tt_get(&nll.view, 0)) && tt_get(&nll.view, 0) > 0);
  attrs[2] = tt_int(1); /* sync_size that does not match the data */
  node = tt_node(in, 4, outs, 2, attrs, 3);
  CHECK_CODE(tt_run(fwd->kernel, fwd, &node), TPU_CODE_INVALID_ARGUMENT);
  in[3] = tt_value(&tl.view);
  tt_set(&tg.view, 0, 3); /* a label outside [0, C) */
  CHECK_CODE(tt_run(fwd->kernel, fwd, &node), TPU_CODE_INVALID_ARGUMENT);
  /* a blank outside the labels (check), lengths of another count (check), a too
   * long input (count) */
  tpu_attr_t bad_blank[3] = {tt_int(3), tt_bool(false), tt_none()};
  node = tt_node(in, 4, NULL, 0, bad_blank, 3);
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_INVALID_ARGUMENT);
  attrs[2] = tt_none();
  in[2] = tt_value(&ilp.view);
  node = tt_node(in, 4, NULL, 0, attrs, 3);
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_INVALID_ARGUMENT);
  in[2] = tt_value(&il2.view);
  node = tt_node(in, 4, NULL, 0, attrs, 3);
  CHECK_CODE(ctc_sync(&node), TPU_CODE_INVALID_ARGUMENT);
  tt_free(&lp), tt_free(&tg), tt_free(&nll), tt_free(&al), tt_free(&al5);
  tt_free(&il), tt_free(&tl), tt_free(&tl2), tt_free(&il2), tt_free(&ilp);
}
