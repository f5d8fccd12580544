/* test_rnn_cell.c — the rnn_cell family against its reference kernel.
 *
 * rc_cases: (cell, dtype, batch, hidden, bias, input layout, output layout,
 * which LSTM gradients) run the forward through the optimised and reference
 * kernels, then the backward on the reference forward's results: every
 * floating dtype, hidden sizes below, at and past the column chunk, a batch
 * big enough to split over threads, transposed, padded and sliced operands
 * and outputs, no rows. rc_semantics pins values, undefined results and the
 * arguments that fall back.
 */
#include <string.h>

#include "kernels/nn/rnn_cell.h"

#include "kernel_test_util.h"

typedef struct rc_case {
  int kind;
  tpu_dtype_t dtype;
  int64_t batch, hidden;
  bool bias;
  tt_layout_t in_layout, out_layout;
  bool ghy, gcy; /* LSTM backward: which gradients are defined */
} rc_case_t;

#define F32 TPU_DTYPE_F32
#define F64 TPU_DTYPE_F64
#define F16 TPU_DTYPE_F16
#define BF16 TPU_DTYPE_BF16

static const rc_case_t k_cases[] = {
    {RC_LSTM, F32, 3, 5, true, TT_CONTIG, TT_CONTIG, true, true},
    {RC_LSTM, F64, 4, 7, false, TT_TRANSPOSED, TT_GAPS, true, true},
    {RC_LSTM, F16, 2, 9, true, TT_CONTIG, TT_CONTIG, true, false},
    {RC_LSTM, BF16, 3, 6, true, TT_PADDED, TT_CONTIG, false, true},
    {RC_LSTM, F32, 37, 300, true, TT_GAPS, TT_PADDED, true, true},
    {RC_LSTM, F64, 200, 129, true, TT_CONTIG, TT_CONTIG, true, true},
    {RC_LSTM, F32, 0, 8, true, TT_CONTIG, TT_CONTIG, true, true},
    {RC_LSTM, F32, 1, 128, false, TT_REVERSED, TT_TRANSPOSED, true, true},
    {RC_GRU, F32, 3, 5, true, TT_CONTIG, TT_CONTIG, true, true},
    {RC_GRU, F64, 4, 7, false, TT_TRANSPOSED, TT_GAPS, true, true},
    {RC_GRU, F16, 5, 11, true, TT_CONTIG, TT_CONTIG, true, true},
    {RC_GRU, BF16, 2, 6, false, TT_PADDED, TT_CONTIG, true, true},
    {RC_GRU, F32, 41, 257, true, TT_GAPS, TT_PADDED, true, true},
    {RC_GRU, F64, 300, 60, true, TT_CONTIG, TT_CONTIG, true, true},
    {RC_GRU, F32, 0, 4, true, TT_CONTIG, TT_CONTIG, true, true},
};

/* Outputs for `shapes`: absent ones stay absent. */
static void alloc_outputs(const tpu_view_t* shapes, int n, tt_layout_t layout, tt_t* t,
                          tpu_view_t* v) {
  for (int i = 0; i < n; ++i) {
    memset(&t[i], 0, sizeof(t[i]));
    v[i] = shapes[i];
    if (tpu_view_is_absent(&shapes[i])) continue;
    t[i] = tt_like(&shapes[i], shapes[i].ndim == 2 ? layout : TT_GAPS);
    v[i] = t[i].view;
  }
}

static void free_n(tt_t* t, int n) {
  for (int i = 0; i < n; ++i) tt_free(&t[i]);
}

/* Runs `def` on node through the kernel and the reference and compares. */
static void run_both(const char* what, const tpu_op_def_t* def, tpu_node_t* node,
                     tt_layout_t layout, tt_t* want, tpu_view_t* wantv) {
  tpu_view_t shapes[RC_MAX_OUT];
  CHECK_OK(def->check(def, node));
  CHECK_OK(def->infer(def, node, shapes));
  int n = tpu_op_num_outputs(tpu_op_lookup(def->name));
  tt_t got[RC_MAX_OUT];
  tpu_view_t gotv[RC_MAX_OUT];
  alloc_outputs(shapes, n, layout, got, gotv);
  alloc_outputs(shapes, n, TT_CONTIG, want, wantv);
  node->num_outputs = n;
  node->outputs = gotv;
  CHECK_OK(def->check(def, node));
  CHECK_OK(tt_run(def->kernel, def, node));
  node->outputs = wantv;
  CHECK_OK(tt_run(tpu_rc_reference, def, node));
  for (int i = 0; i < n; ++i) {
    if (tpu_view_is_absent(&shapes[i])) continue;
    char w[128];
    snprintf(w, sizeof(w), "%s output %d", what, i);
    tt_compare(w, &gotv[i], &wantv[i], 2 * tt_tol(shapes[i].dtype) + 1e-12);
  }
  free_n(got, n);
}

static void run_case(int index, const rc_case_t* c) {
  const bool lstm = c->kind == RC_LSTM;
  const tpu_op_def_t* fwd = tt_def(lstm ? "_thnn_fused_lstm_cell" : "_thnn_fused_gru_cell");
  const tpu_op_def_t* bwd =
      tt_def(lstm ? "_thnn_fused_lstm_cell_backward_impl" : "_thnn_fused_gru_cell_backward");
  if (!fwd || !bwd) return;
  char what[96];
  snprintf(what, sizeof(what), "case %d %s (%s)", index, lstm ? "lstm" : "gru",
           tpu_dtype_name(c->dtype));
  const int64_t G = lstm ? 4 : 3;
  int64_t gsz[2] = {c->batch, G * c->hidden}, hsz[2] = {c->batch, c->hidden};
  int64_t bsz = G * c->hidden;
  tt_t ig = tt_make(c->dtype, 2, gsz, c->in_layout), hg = tt_make(c->dtype, 2, gsz, TT_CONTIG);
  tt_t prev = tt_make(c->dtype, 2, hsz, c->in_layout);
  tt_t ib = tt_make(c->dtype, 1, &bsz, TT_GAPS), hb = tt_make(c->dtype, 1, &bsz, TT_CONTIG);
  tt_fill(&ig.view, -3, 3, 0);
  tt_fill(&hg.view, -3, 3, 0);
  tt_fill(&prev.view, -2, 2, 0);
  tt_fill(&ib.view, -1, 1, 0);
  tt_fill(&hb.view, -1, 1, 0);
  tpu_value_t in[5] = {tt_value(&ig.view), tt_value(&hg.view), tt_value(&prev.view),
                       tt_value(c->bias ? &ib.view : NULL), tt_value(c->bias ? &hb.view : NULL)};
  tpu_node_t node = tt_node(in, 5, NULL, 0, NULL, 0);
  tt_t fo[RC_MAX_OUT];
  tpu_view_t fov[RC_MAX_OUT];
  run_both(what, fwd, &node, c->out_layout, fo, fov);

  /* Backward on the reference forward's results. */
  tt_t ghy = tt_make(c->dtype, 2, hsz, TT_TRANSPOSED), gcy = tt_make(c->dtype, 2, hsz, TT_GAPS);
  tt_fill(&ghy.view, -1, 1, 0);
  tt_fill(&gcy.view, -1, 1, 0);
  tpu_attr_t attrs[1] = {tt_bool(c->bias)};
  tpu_value_t bin[5];
  int nin;
  if (lstm) {
    bin[0] = tt_value(c->ghy ? &ghy.view : NULL);
    bin[1] = tt_value(c->gcy ? &gcy.view : NULL);
    bin[2] = tt_value(&prev.view);
    bin[3] = tt_value(&fov[1]);
    bin[4] = tt_value(&fov[2]);
    nin = 5;
  } else {
    bin[0] = tt_value(&ghy.view);
    bin[1] = tt_value(&fov[1]);
    nin = 2;
  }
  node = tt_node(bin, nin, NULL, 0, attrs, 1);
  tt_t bo[RC_MAX_OUT];
  tpu_view_t bov[RC_MAX_OUT];
  snprintf(what, sizeof(what), "case %d %s backward (%s)", index, lstm ? "lstm" : "gru",
           tpu_dtype_name(c->dtype));
  run_both(what, bwd, &node, c->out_layout, bo, bov);
  free_n(bo, lstm ? 3 : 5);
  free_n(fo, lstm ? 3 : 2);
  tt_free(&ghy);
  tt_free(&gcy);
  tt_free(&ig);
  tt_free(&hg);
  tt_free(&prev);
  tt_free(&ib);
  tt_free(&hb);
}

TEST(rc_cases) {
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) run_case((int)i, &k_cases[i]);
}

TEST(rc_semantics) {
  const tpu_op_def_t* lstm = tt_def("_thnn_fused_lstm_cell");
  const tpu_op_def_t* lstm_b = tt_def("_thnn_fused_lstm_cell_backward_impl");
  const tpu_op_def_t* gru = tt_def("_thnn_fused_gru_cell");
  if (!lstm || !lstm_b || !gru) return;
  /* Zero gates: i = f = o = 1/2, g = 0, so cy = cx/2 and hy = tanh(cy)/2. */
  int64_t gsz[2] = {1, 8}, hsz[2] = {1, 2}, b7 = 7;
  tt_t ig = tt_make(F64, 2, gsz, TT_CONTIG), hg = tt_make(F64, 2, gsz, TT_CONTIG);
  tt_t cx = tt_make(F64, 2, hsz, TT_CONTIG), hy = tt_make(F64, 2, hsz, TT_CONTIG);
  tt_t cy = tt_make(F64, 2, hsz, TT_CONTIG), ws = tt_make(F64, 2, gsz, TT_CONTIG);
  tt_set(&cx.view, 0, 1.0);
  tt_set(&cx.view, 1, -4.0);
  tpu_value_t in[5] = {tt_value(&ig.view), tt_value(&hg.view), tt_value(&cx.view),
                       tt_value(NULL), tt_value(NULL)};
  tpu_view_t out[3] = {hy.view, cy.view, ws.view};
  tpu_node_t node = tt_node(in, 5, out, 3, NULL, 0);
  CHECK_OK(tt_run(lstm->kernel, lstm, &node));
  CHECK_NEAR(tt_get(&cy.view, 0), 0.5, 1e-15);
  CHECK_NEAR(tt_get(&cy.view, 1), -2.0, 1e-15);
  CHECK_NEAR(tt_get(&hy.view, 1), 0.5 * tanh(-2.0), 1e-15);
  CHECK_NEAR(tt_get(&ws.view, 0), 0.5, 1e-15);
  CHECK_NEAR(tt_get(&ws.view, 2 * 2), 0.0, 1e-15);
  /* Arguments the fused cells reject fall back (PyTorch raises there). */
  tt_t bad_bias = tt_make(F64, 1, &b7, TT_CONTIG);
  in[3] = tt_value(&bad_bias.view);
  in[4] = tt_value(&bad_bias.view);
  node.num_outputs = 0;
  CHECK_CODE(lstm->check(lstm, &node), TPU_CODE_UNIMPLEMENTED);
  in[3] = tt_value(NULL);
  CHECK_CODE(lstm->check(lstm, &node), TPU_CODE_UNIMPLEMENTED); /* one bias only */
  in[4] = tt_value(NULL);
  CHECK_CODE(gru->check(gru, &node), TPU_CODE_UNIMPLEMENTED);  /* 8 columns are not 3H */
  tt_t ints = tt_make(TPU_DTYPE_I64, 2, gsz, TT_CONTIG), f32cx = tt_make(F32, 2, hsz, TT_CONTIG);
  in[0] = tt_value(&ints.view);
  CHECK_CODE(lstm->check(lstm, &node), TPU_CODE_UNIMPLEMENTED);
  in[0] = tt_value(&ig.view);
  in[2] = tt_value(&f32cx.view);
  CHECK_CODE(lstm->check(lstm, &node), TPU_CODE_UNIMPLEMENTED); /* mixed dtypes */
  in[2] = tt_value(&cx.view);
  CHECK_OK(lstm->check(lstm, &node));
  /* Backward without any gradient: every result undefined. */
  tpu_value_t bin[5] = {tt_value(NULL), tt_value(NULL), tt_value(&cx.view), tt_value(&cy.view),
                        tt_value(&ws.view)};
  tpu_attr_t attrs[1] = {tt_bool(true)};
  tpu_node_t bnode = tt_node(bin, 5, NULL, 0, attrs, 1);
  tpu_view_t shapes[3];
  CHECK_OK(lstm_b->infer(lstm_b, &bnode, shapes));
  for (int i = 0; i < 3; ++i) CHECK(tpu_view_is_absent(&shapes[i]));
  /* Without has_bias the bias gradient is undefined. */
  bin[0] = tt_value(&hy.view);
  attrs[0] = tt_bool(false);
  bnode = tt_node(bin, 5, NULL, 0, attrs, 1);
  CHECK_OK(lstm_b->infer(lstm_b, &bnode, shapes));
  CHECK(!tpu_view_is_absent(&shapes[0]) && !tpu_view_is_absent(&shapes[1]));
  CHECK(tpu_view_is_absent(&shapes[2]));
  CHECK(shapes[0].ndim == 2 && shapes[0].sizes[1] == 8);
  tt_free(&ints);
  tt_free(&f32cx);
  tt_free(&bad_bias);
  tt_free(&ig);
  tt_free(&hg);
  tt_free(&cx);
  tt_free(&hy);
  tt_free(&cy);
  tt_free(&ws);
}
