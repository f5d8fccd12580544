/* test_loss.c — the loss family against its reference kernel.
 *
 * loss_cases: (op, dtype, self shape, layout, reduction, weight, ignore_index,
 * target dtype) run forward, then backward on the forward's total_weight,
 * through the optimised and reference kernels; 1-D and batched inputs, 2d
 * (spatial) inputs, ignored samples, many chunks, strided views.
 * loss_semantics pins values, out-of-range targets (an INDEX_ERROR status,
 * never a crash), output metadata and fallbacks.
 */
#include <string.h>

#include "kernels/loss/loss.h"

#include "kernel_test_util.h"

typedef struct loss_case {
  bool spatial;
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t sizes[4];
  tt_layout_t layout;
  int64_t reduction;
  bool weight;
  int64_t ignore_index;
  tpu_dtype_t target_dtype;
  bool strided_out;
} loss_case_t;

#define F32 TPU_DTYPE_F32
#define F64 TPU_DTYPE_F64
#define F16 TPU_DTYPE_F16
#define BF16 TPU_DTYPE_BF16
#define I64 TPU_DTYPE_I64
#define U8 TPU_DTYPE_U8

static const loss_case_t k_cases[] = {
    {false, F32, 2, {6, 5}, TT_CONTIG, LOSS_MEAN, false, -100, I64, false},
    {false, F32, 2, {6, 5}, TT_CONTIG, LOSS_SUM, true, 2, I64, false},
    {false, F32, 2, {6, 5}, TT_REVERSED, LOSS_NONE, true, 1, I64, true},
    {false, F64, 2, {9000, 7}, TT_GAPS, LOSS_MEAN, true, 3, I64, false},
    {false, F64, 2, {9000, 7}, TT_CONTIG, LOSS_NONE, false, -100, U8, false},
    {false, F16, 2, {40, 10}, TT_CONTIG, LOSS_MEAN, true, 0, I64, false},
    {false, BF16, 2, {40, 10}, TT_CONTIG, LOSS_SUM, false, 4, U8, false},
    {false, F32, 1, {5}, TT_CONTIG, LOSS_NONE, true, -100, I64, false},
    {false, F32, 1, {5}, TT_CONTIG, LOSS_MEAN, true, -100, I64, false},
    {false, F32, 2, {0, 5}, TT_CONTIG, LOSS_MEAN, false, -100, I64, false},
    {false, F32, 2, {0, 5}, TT_CONTIG, LOSS_NONE, false, -100, I64, false},
    {true, F32, 4, {2, 3, 4, 5}, TT_CONTIG, LOSS_MEAN, true, 1, I64, false},
    {true, F32, 4, {2, 3, 4, 5}, TT_REVERSED, LOSS_NONE, false, -100, I64, true},
    {true, F64, 4, {3, 4, 60, 70}, TT_GAPS, LOSS_SUM, true, 2, I64, false},
    {true, F16, 4, {2, 3, 8, 9}, TT_CONTIG, LOSS_NONE, true, 0, U8, false},
};

static const char* op_name(bool spatial, bool backward) {
  return spatial ? (backward ? "nll_loss2d_backward" : "nll_loss2d_forward")
                 : (backward ? "nll_loss_backward" : "nll_loss_forward");
}

static void run_case(int index, const loss_case_t* c) {
  const tpu_op_def_t* fwd = tt_def(op_name(c->spatial, false));
  const tpu_op_def_t* bwd = tt_def(op_name(c->spatial, true));
  if (!fwd || !bwd) return;
  char what[64];
  snprintf(what, sizeof(what), "case %d (%s)", index, tpu_dtype_name(c->dtype));
  int32_t class_dim = c->spatial ? 1 : c->ndim - 1;
  int64_t classes = c->sizes[class_dim], tsizes[3];
  int32_t tndim = 0;
  for (int32_t d = 0; d < c->ndim; ++d)
    if (d != class_dim) tsizes[tndim++] = c->sizes[d];
  tt_t x = tt_make(c->dtype, c->ndim, c->sizes, c->layout);
  tt_t t = tt_make(c->target_dtype, tndim, tsizes, c->layout);
  tt_t w = tt_make(c->dtype, 1, &classes, c->layout == TT_GAPS ? TT_GAPS : TT_CONTIG);
  tt_fill(&x.view, -4, 1, 0);
  tt_fill(&w.view, 0.1, 2, 0);
  for (int64_t q = 0; q < tpu_view_numel(&t.view); ++q)
    tt_set(&t.view, q, floor(tt_rand() * (double)classes));

  tpu_value_t in[5] = {tt_value(&x.view), tt_value(&t.view), tt_value(c->weight ? &w.view : NULL)};
  tpu_attr_t attrs[2] = {tt_int(c->reduction), tt_int(c->ignore_index)};
  tpu_view_t shapes[2], got_v[2], want_v[2];
  tt_t got[2], want[2];
  tpu_node_t node = tt_node(in, 3, NULL, 0, attrs, 2);
  CHECK_OK(fwd->check(fwd, &node));
  CHECK_OK(fwd->infer(fwd, &node, shapes));
  for (int i = 0; i < 2; ++i) {
    got[i] = tt_like(&shapes[i], c->strided_out ? TT_GAPS : TT_CONTIG);
    want[i] = tt_like(&shapes[i], TT_CONTIG);
    got_v[i] = got[i].view;
    want_v[i] = want[i].view;
  }
  node.num_outputs = 2;
  node.outputs = got_v;
  CHECK_OK(tt_run(fwd->kernel, fwd, &node));
  node.outputs = want_v;
  CHECK_OK(tt_run(tpu_loss_reference, fwd, &node));
  for (int i = 0; i < 2; ++i) tt_compare(what, &got_v[i], &want_v[i], tt_tol(c->dtype) + 1e-12);

  /* Backward with the forward's total_weight. */
  tt_t go = tt_like(&shapes[0], c->layout == TT_REVERSED ? TT_REVERSED : TT_CONTIG);
  tt_fill(&go.view, -1, 1, 0);
  tpu_value_t bin[5] = {tt_value(&go.view), in[0], in[1], in[2], tt_value(&want_v[1])};
  tpu_view_t gshape;
  node = tt_node(bin, 5, NULL, 0, attrs, 2);
  CHECK_OK(bwd->check(bwd, &node));
  CHECK_OK(bwd->infer(bwd, &node, &gshape));
  tt_t ggot = tt_like(&gshape, c->strided_out ? TT_GAPS : TT_CONTIG);
  tt_t gwant = tt_like(&gshape, TT_CONTIG);
  tt_fill(&ggot.view, 5, 6, 0); /* must be zeroed by the kernel */
  node.num_outputs = 1;
  node.outputs = &ggot.view;
  CHECK_OK(tt_run(bwd->kernel, bwd, &node));
  node.outputs = &gwant.view;
  CHECK_OK(tt_run(tpu_loss_reference, bwd, &node));
  snprintf(what, sizeof(what), "case %d backward (%s)", index, tpu_dtype_name(c->dtype));
  tt_compare(what, &ggot.view, &gwant.view, tt_tol(c->dtype) + 1e-12);

  for (int i = 0; i < 2; ++i) {
    tt_free(&got[i]);
    tt_free(&want[i]);
  }
  tt_free(&ggot);
  tt_free(&gwant);
  tt_free(&go);
  tt_free(&x);
  tt_free(&t);
  tt_free(&w);
}

TEST(loss_cases) {
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) run_case((int)i, &k_cases[i]);
}

/* Runs nll_loss_forward on self [3, 4] = -(row + col / 10) with `targets`;
 * returns the status code and, on success, output and total_weight. */
static tpu_status_code_t forward3(const int64_t* targets, int64_t reduction, tpu_dtype_t tdtype,
                                  double* out, double* tw, char* msg) {
  const tpu_op_def_t* fwd = tt_def("nll_loss_forward");
  int64_t xs[2] = {3, 4}, ts[1] = {3};
  tt_t x = tt_make(F32, 2, xs, TT_CONTIG), t = tt_make(tdtype, 1, ts, TT_CONTIG);
  for (int i = 0; i < 12; ++i) tt_set(&x.view, i, -(i / 4 + (i % 4) / 10.0));
  for (int i = 0; i < 3; ++i) tt_set(&t.view, i, (double)targets[i]);
  if (tdtype == I64) memcpy(t.mem, targets, 3 * sizeof(int64_t));
  tpu_value_t in[3] = {tt_value(&x.view), tt_value(&t.view), tt_value(NULL)};
  tpu_attr_t attrs[2] = {tt_int(reduction), tt_int(-100)};
  tpu_view_t shapes[2];
  tpu_node_t node = tt_node(in, 3, NULL, 0, attrs, 2);
  tpu_status_code_t code = tt_code(fwd->check(fwd, &node));
  if (code == TPU_CODE_OK) {
    CHECK_OK(fwd->infer(fwd, &node, shapes));
    tt_t o = tt_like(&shapes[0], TT_CONTIG), w = tt_like(&shapes[1], TT_CONTIG);
    tpu_view_t outs[2] = {o.view, w.view};
    node.outputs = outs;
    node.num_outputs = 2;
    tpu_exec_ctx_t ctx = {0};
    tpu_status_t s = fwd->kernel(fwd, &node, &ctx);
    code = tpu_status_code(s);
    if (msg) snprintf(msg, 64, "%s", s ? tpu_status_message(s) : "");
    tpu_status_free(s);
    *out = tt_get(&outs[0], 0);
    *tw = tt_get(&outs[1], 0);
    tt_free(&o);
    tt_free(&w);
  }
  tt_free(&x);
  tt_free(&t);
  return code;
}

TEST(loss_semantics) {
  double out, tw;
  char msg[64];
  const int64_t t1[3] = {1, 2, -100}, bad[3] = {1, 7, 0}, neg[3] = {-3, 0, 0};
  const int64_t huge[3] = {0, (int64_t)1 << 40, 0}, none[3] = {-100, -100, -100};
  CHECK(forward3(t1, LOSS_SUM, I64, &out, &tw, NULL) == TPU_CODE_OK);
  CHECK_NEAR(out, 0.1 + 1.2, 1e-6);
  CHECK(tw == 2);
  CHECK(forward3(t1, LOSS_MEAN, I64, &out, &tw, NULL) == TPU_CODE_OK);
  CHECK_NEAR(out, 1.3 / 2, 1e-6);
  CHECK(forward3(none, LOSS_MEAN, I64, &out, &tw, NULL) == TPU_CODE_OK);
  CHECK(isnan(out) && tw == 0);
  CHECK(forward3(t1, LOSS_NONE, I64, &out, &tw, NULL) == TPU_CODE_OK);
  CHECK_NEAR(out, 0.1, 1e-6);
  CHECK(tw == 0);
  CHECK(forward3(t1, LOSS_MEAN, U8, &out, &tw, NULL) == TPU_CODE_INDEX_ERROR); /* -100 as u8 */
  CHECK(forward3(bad, LOSS_MEAN, I64, &out, &tw, msg) == TPU_CODE_INDEX_ERROR);
  CHECK(strcmp(msg, "Target 7 is out of bounds.") == 0);
  CHECK(forward3(neg, LOSS_NONE, I64, &out, &tw, msg) == TPU_CODE_INDEX_ERROR);
  CHECK(strcmp(msg, "Target -3 is out of bounds.") == 0);
  CHECK(forward3(huge, LOSS_SUM, I64, &out, &tw, NULL) == TPU_CODE_INDEX_ERROR);
  CHECK(forward3(t1, LOSS_SUM, TPU_DTYPE_I32, &out, &tw, NULL) == TPU_CODE_UNIMPLEMENTED);
  CHECK(forward3(t1, 3, I64, &out, &tw, NULL) == TPU_CODE_UNIMPLEMENTED);

  /* Backward reports bad targets too, and 1-D inputs reduce even with none. */
  const tpu_op_def_t* bwd = tt_def("nll_loss_backward");
  const tpu_op_def_t* fwd = tt_def("nll_loss_forward");
  int64_t c5 = 5, tval = 9;
  tt_t x = tt_make(F32, 1, &c5, TT_CONTIG), t = tt_make(I64, 0, &c5, TT_CONTIG);
  tt_t s0 = tt_make(F32, 0, &c5, TT_CONTIG), gi = tt_make(F32, 1, &c5, TT_CONTIG);
  memcpy(t.mem, &tval, sizeof(tval));
  tt_set(&s0.view, 0, 1.0);
  tpu_value_t bin[5] = {tt_value(&s0.view), tt_value(&x.view), tt_value(&t.view), tt_value(NULL),
                        tt_value(&s0.view)};
  tpu_attr_t attrs[2] = {tt_int(LOSS_NONE), tt_int(-100)};
  tpu_node_t node = tt_node(bin, 5, &gi.view, 1, attrs, 2);
  CHECK_CODE(tt_run(bwd->kernel, bwd, &node), TPU_CODE_INDEX_ERROR);
  tpu_view_t shapes[2];
  node = tt_node(bin + 1, 3, NULL, 0, attrs, 2);
  CHECK_OK(fwd->infer(fwd, &node, shapes));
  CHECK(shapes[0].ndim == 0 && shapes[1].ndim == 0 && shapes[1].dtype == F32);
  tt_t x3 = tt_make(F32, 3, (int64_t[3]){2, 3, 4}, TT_CONTIG);
  bin[1] = tt_value(&x3.view);
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&x3);
  tt_free(&x);
  tt_free(&t);
  tt_free(&s0);
  tt_free(&gi);
}
