/* test_pointwise_loss.c — the pointwise-loss family against its reference.
 *
 * pl_cases: (op, dtype, self shape, target shape, layout, reduction, weight,
 * parameter) run forward and backward (grad_output shaped like the forward's
 * result) through the optimised and reference kernels: every dtype, odd and
 * many-block sizes, broadcast targets, strided views, strided outputs.
 * pl_semantics pins values, binary_cross_entropy's range error, empty inputs
 * and the arguments that fall back.
 */
#include <string.h>

#include "kernels/loss/pointwise_loss.h"

#include "kernel_test_util.h"

typedef struct pl_case {
  const char* op;
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t sizes[3];
  int32_t tndim;
  int64_t tsizes[3];
  tt_layout_t layout;
  int64_t reduction;
  bool weight;
  double param;
} pl_case_t;

#define F32 TPU_DTYPE_F32
#define F64 TPU_DTYPE_F64
#define F16 TPU_DTYPE_F16
#define BF16 TPU_DTYPE_BF16

static const pl_case_t k_cases[] = {
    {"mse_loss", F32, 2, {6, 5}, 2, {6, 5}, TT_CONTIG, PL_MEAN, false, 0},
    {"mse_loss", F64, 3, {7, 300, 41}, 3, {7, 300, 41}, TT_TRANSPOSED, PL_SUM, false, 0},
    {"mse_loss", F16, 2, {6, 5}, 1, {5}, TT_CONTIG, PL_NONE, false, 0},
    {"mse_loss", BF16, 2, {33, 17}, 2, {33, 17}, TT_GAPS, PL_MEAN, false, 0},
    {"smooth_l1_loss", F32, 2, {6, 5}, 2, {6, 5}, TT_REVERSED, PL_MEAN, false, 1.0},
    {"smooth_l1_loss", F64, 3, {4, 90, 100}, 3, {4, 90, 100}, TT_CONTIG, PL_NONE, false, 0.5},
    {"smooth_l1_loss", F32, 1, {17}, 1, {17}, TT_CONTIG, PL_SUM, false, 0.0},
    {"smooth_l1_loss", BF16, 2, {6, 5}, 2, {1, 5}, TT_CONTIG, PL_NONE, false, 2.0},
    {"huber_loss", F32, 2, {6, 5}, 2, {6, 5}, TT_PADDED, PL_MEAN, false, 1.0},
    {"huber_loss", F16, 3, {3, 4, 5}, 3, {3, 4, 5}, TT_CONTIG, PL_SUM, false, 0.3},
    {"huber_loss", F64, 2, {200, 300}, 2, {200, 300}, TT_CONTIG, PL_NONE, false, 2.5},
    {"binary_cross_entropy", F32, 2, {6, 5}, 2, {6, 5}, TT_CONTIG, PL_MEAN, true, 0},
    {"binary_cross_entropy", F64, 2, {300, 111}, 2, {300, 111}, TT_TRANSPOSED, PL_SUM, false, 0},
    {"binary_cross_entropy", BF16, 1, {19}, 1, {19}, TT_CONTIG, PL_NONE, true, 0},
    {"binary_cross_entropy", F16, 3, {2, 3, 4}, 3, {2, 3, 4}, TT_GAPS, PL_MEAN, true, 0},
    {"mse_loss", F32, 1, {0}, 1, {0}, TT_CONTIG, PL_MEAN, false, 0},
};

static tpu_attr_t param_attr(const char* op, double p) {
  return strcmp(op, "smooth_l1_loss") == 0 || strcmp(op, "huber_loss") == 0 ? tt_float(p)
                                                                            : tt_none();
}

static void run_case(int index, const pl_case_t* c) {
  char bname[64];
  snprintf(bname, sizeof(bname), "%s_backward", c->op);
  const tpu_op_def_t* fwd = tt_def(c->op);
  const tpu_op_def_t* bwd = tt_def(bname);
  if (!fwd || !bwd) return;
  bool bce = strcmp(c->op, "binary_cross_entropy") == 0;
  char what[96];
  snprintf(what, sizeof(what), "case %d %s (%s)", index, c->op, tpu_dtype_name(c->dtype));
  tt_t x = tt_make(c->dtype, c->ndim, c->sizes, c->layout);
  tt_t t = tt_make(c->dtype, c->tndim, c->tsizes, TT_CONTIG);
  tt_t w = tt_make(c->dtype, c->ndim, c->sizes, TT_BROADCAST);
  tt_fill(&x.view, bce ? 0.01 : -3, bce ? 0.99 : 3, 0);
  tt_fill(&t.view, bce ? 0 : -3, bce ? 1 : 3, 0);
  tt_fill(&w.view, 0.5, 2, 0);
  tpu_value_t in[3] = {tt_value(&x.view), tt_value(&t.view), tt_value(c->weight ? &w.view : NULL)};
  int32_t nin = bce ? 3 : 2;
  tpu_attr_t attrs[2] = {tt_int(c->reduction), param_attr(c->op, c->param)};
  int32_t nattr = bce || strcmp(c->op, "mse_loss") == 0 ? 1 : 2;
  tpu_view_t shape;
  tpu_node_t node = tt_node(in, nin, NULL, 0, attrs, nattr);
  CHECK_OK(fwd->check(fwd, &node));
  CHECK_OK(fwd->infer(fwd, &node, &shape));
  tt_t got = tt_like(&shape, TT_GAPS), want = tt_like(&shape, TT_CONTIG);
  node.num_outputs = 1;
  node.outputs = &got.view;
  CHECK_OK(tt_run(fwd->kernel, fwd, &node));
  node.outputs = &want.view;
  CHECK_OK(tt_run(tpu_pl_reference, fwd, &node));
  tt_compare(what, &got.view, &want.view, tt_tol(c->dtype) + 1e-12);

  tt_t go = tt_like(&shape, TT_REVERSED);
  tt_fill(&go.view, -1, 1, 0);
  tpu_value_t bin[4] = {tt_value(&go.view), in[0], in[1], in[2]};
  tpu_view_t gshape;
  node = tt_node(bin, nin + 1, NULL, 0, attrs, nattr);
  /* Backward of a broadcast target is PyTorch's business (it reduces the
   * gradient afterwards): only self-shaped targets run natively. */
  if (c->tndim != c->ndim || memcmp(c->tsizes, c->sizes, sizeof(c->sizes)) != 0) {
    tpu_status_t s = bwd->check(bwd, &node);
    if (s == TPU_OK) s = bwd->infer(bwd, &node, &gshape);
    tpu_status_free(s);
  } else {
    CHECK_OK(bwd->check(bwd, &node));
    CHECK_OK(bwd->infer(bwd, &node, &gshape));
    tt_t ggot = tt_like(&gshape, TT_TRANSPOSED), gwant = tt_like(&gshape, TT_CONTIG);
    node.num_outputs = 1;
    node.outputs = &ggot.view;
    CHECK_OK(tt_run(bwd->kernel, bwd, &node));
    node.outputs = &gwant.view;
    CHECK_OK(tt_run(tpu_pl_reference, bwd, &node));
    snprintf(what, sizeof(what), "case %d %s backward (%s)", index, c->op,
             tpu_dtype_name(c->dtype));
    tt_compare(what, &ggot.view, &gwant.view, tt_tol(c->dtype) + 1e-12);
    tt_free(&ggot);
    tt_free(&gwant);
  }
  tt_free(&go);
  tt_free(&got);
  tt_free(&want);
  tt_free(&x);
  tt_free(&t);
  tt_free(&w);
}

TEST(pl_cases) {
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) run_case((int)i, &k_cases[i]);
}

/* One forward on [x0, x1] vs [t0, t1]: the status code and the result. */
static tpu_status_code_t fwd2(const char* op, const double* xs, const double* ts,
                              int64_t reduction, tpu_attr_t param, double* out) {
  const tpu_op_def_t* def = tt_def(op);
  int64_t two = 2;
  tt_t x = tt_make(F64, 1, &two, TT_CONTIG), t = tt_make(F64, 1, &two, TT_CONTIG);
  for (int i = 0; i < 2; ++i) tt_set(&x.view, i, xs[i]), tt_set(&t.view, i, ts[i]);
  tpu_value_t in[3] = {tt_value(&x.view), tt_value(&t.view), tt_value(NULL)};
  tpu_attr_t attrs[2] = {tt_int(reduction), param};
  int32_t nin = strcmp(op, "binary_cross_entropy") == 0 ? 3 : 2;
  tpu_node_t node = tt_node(in, nin, NULL, 0, attrs, param.kind == TPU_ATTR_NONE ? 1 : 2);
  tpu_status_code_t code = tt_code(def->check(def, &node));
  if (code == TPU_CODE_OK) {
    tpu_view_t shape;
    CHECK_OK(def->infer(def, &node, &shape));
    tt_t o = tt_like(&shape, TT_CONTIG);
    node.outputs = &o.view;
    node.num_outputs = 1;
    code = tt_code(tt_run(def->kernel, def, &node));
    *out = tt_get(&o.view, 0);
    tt_free(&o);
  }
  tt_free(&x);
  tt_free(&t);
  return code;
}

TEST(pl_semantics) {
  double out;
  const double x[2] = {1.0, 4.0}, t[2] = {0.0, 1.0};
  CHECK(fwd2("mse_loss", x, t, PL_MEAN, tt_none(), &out) == TPU_CODE_OK);
  CHECK_NEAR(out, (1.0 + 9.0) / 2, 1e-12);
  CHECK(fwd2("mse_loss", x, t, PL_SUM, tt_none(), &out) == TPU_CODE_OK);
  CHECK_NEAR(out, 10.0, 1e-12);
  CHECK(fwd2("smooth_l1_loss", x, t, PL_SUM, tt_float(2.0), &out) == TPU_CODE_OK);
  CHECK_NEAR(out, 0.25 + 2.0, 1e-12);
  CHECK(fwd2("smooth_l1_loss", x, t, PL_SUM, tt_float(0.0), &out) == TPU_CODE_OK);
  CHECK_NEAR(out, 4.0, 1e-12);
  CHECK(fwd2("huber_loss", x, t, PL_SUM, tt_float(2.0), &out) == TPU_CODE_OK);
  CHECK_NEAR(out, 0.5 + 2.0 * (3.0 - 1.0), 1e-12);
  const double p[2] = {0.25, 0.5}, y[2] = {1.0, 0.0};
  CHECK(fwd2("binary_cross_entropy", p, y, PL_SUM, tt_none(), &out) == TPU_CODE_OK);
  CHECK_NEAR(out, -log(0.25) - log(0.5), 1e-12);
  const double zero_one[2] = {0.0, 1.0};
  CHECK(fwd2("binary_cross_entropy", zero_one, zero_one, PL_SUM, tt_none(), &out) ==
        TPU_CODE_OK);
  CHECK_NEAR(out, 0.0, 1e-12);
  CHECK(fwd2("binary_cross_entropy", zero_one, y, PL_SUM, tt_none(), &out) == TPU_CODE_OK);
  CHECK_NEAR(out, 200.0, 1e-12); /* log clamped at -100 */
  /* Inputs outside [0, 1]: PyTorch's RuntimeError, as a status. */
  CHECK(fwd2("binary_cross_entropy", x, t, PL_MEAN, tt_none(), &out) ==
        TPU_CODE_INVALID_ARGUMENT);
  /* Arguments PyTorch rejects fall back (and raise there). */
  CHECK(fwd2("smooth_l1_loss", x, t, PL_MEAN, tt_float(-1.0), &out) == TPU_CODE_UNIMPLEMENTED);
  CHECK(fwd2("huber_loss", x, t, PL_MEAN, tt_float(0.0), &out) == TPU_CODE_UNIMPLEMENTED);
  CHECK(fwd2("mse_loss", x, t, 3, tt_none(), &out) == TPU_CODE_UNIMPLEMENTED);
}
