/* test_pad.c — the padding family against its reference kernel.
 *
 * pad_cases: (op, dtype, input shape and layout, pad list) run forward
 * through the optimised and the reference kernels, then (reflect and
 * replicate, floating dtypes) backward on a random grad_output: 1-d to 3-d,
 * batched and batch-less, every dtype (bool for constant), negative pads,
 * strided and channels_last-like inputs, strided outputs, empty batches.
 * pad_semantics pins a few values and the fallbacks.
 */
#include "kernels/pool/pool.h"

#include "kernel_test_util.h"

typedef struct pad_case {
  const char* op;
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t sizes[5];
  tt_layout_t layout;
  int32_t npad;
  int64_t pad[6];
  double value; /* constant */
  bool strided_out;
} pad_case_t;

#define F32 TPU_DTYPE_F32
#define F64 TPU_DTYPE_F64
#define F16 TPU_DTYPE_F16
#define BF16 TPU_DTYPE_BF16
#define I64 TPU_DTYPE_I64
#define U8 TPU_DTYPE_U8
#define B TPU_DTYPE_BOOL

static const pad_case_t k_cases[] = {
    {"constant_pad_nd", F32, 4, {2, 3, 5, 6}, TT_CONTIG, 4, {1, 2, 3, 0}, 1.5, false},
    {"constant_pad_nd", F64, 3, {4, 5, 6}, TT_REVERSED, 6, {-1, 2, 0, -2, 1, 1}, -2, true},
    {"constant_pad_nd", I64, 2, {7, 3}, TT_GAPS, 2, {3, -1}, 7, false},
    {"constant_pad_nd", B, 3, {2, 3, 4}, TT_CONTIG, 4, {1, 1, 1, 1}, 1, false},
    {"constant_pad_nd", BF16, 4, {2, 3, 4, 5}, TT_PADDED, 2, {0, 0}, 0, true},
    {"constant_pad_nd", U8, 2, {3, 4}, TT_CONTIG, 4, {-4, 1, 0, 0}, 9, false},
    {"reflection_pad1d", F32, 3, {2, 3, 9}, TT_CONTIG, 2, {3, 4}, 0, false},
    {"reflection_pad1d", F16, 2, {3, 5}, TT_GAPS, 2, {-1, 4}, 0, true},
    {"reflection_pad2d", F32, 4, {2, 3, 7, 8}, TT_REVERSED, 4, {2, 3, 1, 6}, 0, false},
    {"reflection_pad2d", I64, 3, {3, 4, 5}, TT_CONTIG, 4, {1, 1, 2, 2}, 0, false},
    {"reflection_pad2d", BF16, 4, {1, 2, 6, 6}, TT_PADDED, 4, {5, 0, 0, 5}, 0, true},
    {"reflection_pad3d", F64, 5, {2, 2, 3, 4, 5}, TT_CONTIG, 6, {1, 2, 2, 1, 1, 2}, 0, false},
    {"reflection_pad3d", F32, 4, {3, 4, 5, 6}, TT_REVERSED, 6, {0, 3, 1, 1, 2, 0}, 0, false},
    {"replication_pad1d", F64, 3, {2, 3, 4}, TT_CONTIG, 2, {5, 6}, 0, true},
    {"replication_pad1d", U8, 2, {3, 5}, TT_CONTIG, 2, {2, -1}, 0, false},
    {"replication_pad2d", F32, 4, {2, 3, 5, 4}, TT_GAPS, 4, {3, 1, 0, 4}, 0, false},
    {"replication_pad2d", F16, 3, {2, 6, 7}, TT_REVERSED, 4, {-2, 3, 1, -1}, 0, false},
    {"replication_pad3d", F32, 5, {1, 3, 4, 3, 5}, TT_CONTIG, 6, {2, 2, 1, 0, 3, 1}, 0, true},
    {"replication_pad3d", BF16, 4, {2, 3, 3, 3}, TT_CONTIG, 6, {1, 1, 1, 1, 1, 1}, 0, false},
    {"reflection_pad2d", F32, 4, {0, 3, 5, 4}, TT_CONTIG, 4, {1, 1, 1, 1}, 0, false},
};

static void run_case(int index, const pad_case_t* c) {
  const tpu_op_def_t* fwd = tt_def(c->op);
  if (!fwd) return;
  bool constant = c->op[0] == 'c';
  char what[96];
  snprintf(what, sizeof(what), "case %d %s (%s)", index, c->op, tpu_dtype_name(c->dtype));
  tt_t x = tt_make(c->dtype, c->ndim, c->sizes, c->layout);
  tt_fill(&x.view, -20, 20, 0);
  tpu_view_t oshape = x.view;
  for (int32_t i = 0; i < c->npad / 2; ++i) {
    int32_t d = c->ndim - 1 - i;
    oshape.sizes[d] += c->pad[2 * i] + c->pad[2 * i + 1];
  }
  tpu_attr_t attrs[2] = {tt_ints(c->npad, c->pad),
                         c->dtype == B || tpu_dtype_is_integral(c->dtype) ? tt_int((int64_t)c->value)
                                                                          : tt_float(c->value)};
  tt_t got = tt_like(&oshape, c->strided_out ? TT_GAPS : TT_CONTIG);
  tt_t want = tt_like(&oshape, TT_CONTIG);
  tt_fill_value(&got.view, 3); /* every element must be written */
  tpu_value_t in[2] = {tt_value(&x.view)};
  tpu_node_t node = tt_node(in, 1, &got.view, 1, attrs, constant ? 2 : 1);
  CHECK_OK(fwd->check(fwd, &node));
  CHECK_OK(tt_run(fwd->kernel, fwd, &node));
  node.outputs = &want.view;
  CHECK_OK(tt_run(tpu_pad_reference, fwd, &node));
  tt_compare(what, &got.view, &want.view, 0.0);

  if (!constant && tpu_dtype_is_floating(c->dtype)) {
    char bname[64];
    snprintf(bname, sizeof(bname), "%s_backward", c->op);
    const tpu_op_def_t* bwd = tt_def(bname);
    if (!bwd) return;
    snprintf(what, sizeof(what), "case %d %s (%s)", index, bname, tpu_dtype_name(c->dtype));
    tt_t g = tt_like(&oshape, c->layout == TT_REVERSED ? TT_REVERSED : TT_CONTIG);
    tt_fill(&g.view, -2, 2, 0);
    tt_t bgot = tt_like(&x.view, c->strided_out ? TT_PADDED : TT_CONTIG);
    tt_t bwant = tt_like(&x.view, TT_CONTIG);
    tpu_value_t bin[2] = {tt_value(&g.view), tt_value(&x.view)};
    tpu_node_t bn = tt_node(bin, 2, &bgot.view, 1, attrs, 1);
    CHECK_OK(bwd->check(bwd, &bn));
    CHECK_OK(tt_run(bwd->kernel, bwd, &bn));
    bn.outputs = &bwant.view;
    CHECK_OK(tt_run(tpu_pad_reference, bwd, &bn));
    tt_compare(what, &bgot.view, &bwant.view, 8 * tt_tol(c->dtype) + 1e-12);
    tt_free(&g), tt_free(&bgot), tt_free(&bwant);
  }
  tt_free(&x), tt_free(&got), tt_free(&want);
}

TEST(pad_cases) {
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) run_case((int)i, &k_cases[i]);
}

TEST(pad_semantics) {
  const tpu_op_def_t* refl = tt_def("reflection_pad1d");
  const tpu_op_def_t* repl = tt_def("replication_pad1d");
  const tpu_op_def_t* cst = tt_def("constant_pad_nd");
  if (!refl || !repl || !cst) return;
  int64_t xs[2] = {1, 4}, os[2] = {1, 7}, pad[2] = {2, 1};
  tt_t x = tt_make(F32, 2, xs, TT_CONTIG), o = tt_make(F32, 2, os, TT_CONTIG);
  for (int i = 0; i < 4; ++i) tt_set(&x.view, i, i + 1); /* 1 2 3 4 */
  tpu_value_t in[1] = {tt_value(&x.view)};
  tpu_attr_t attrs[2] = {tt_ints(2, pad), tt_float(-1)};
  tpu_node_t node = tt_node(in, 1, &o.view, 1, attrs, 2);
  node.num_attrs = 1;
  CHECK_OK(tt_run(refl->kernel, refl, &node));
  double want_refl[7] = {3, 2, 1, 2, 3, 4, 3}, want_repl[7] = {1, 1, 1, 2, 3, 4, 4},
         want_cst[7] = {-1, -1, 1, 2, 3, 4, -1};
  for (int i = 0; i < 7; ++i) CHECK_NEAR(tt_get(&o.view, i), want_refl[i], 0);
  CHECK_OK(tt_run(repl->kernel, repl, &node));
  for (int i = 0; i < 7; ++i) CHECK_NEAR(tt_get(&o.view, i), want_repl[i], 0);
  node.num_attrs = 2;
  CHECK_OK(tt_run(cst->kernel, cst, &node));
  for (int i = 0; i < 7; ++i) CHECK_NEAR(tt_get(&o.view, i), want_cst[i], 0);
  /* Fallbacks: reflect pad not below the size, bool reflect, odd pad lists,
   * integer backward, a pad list longer than the rank. */
  int64_t big[2] = {4, 0}, odd[3] = {1, 1, 1}, six[6] = {0};
  node.num_attrs = 1;
  node.attrs[0] = tt_ints(2, big);
  CHECK_CODE(refl->check(refl, &node), TPU_CODE_UNIMPLEMENTED);
  CHECK_OK(repl->check(repl, &node));
  node.attrs[0] = tt_ints(3, odd);
  CHECK_CODE(repl->check(repl, &node), TPU_CODE_UNIMPLEMENTED);
  node.attrs[0] = tt_ints(6, six);
  node.num_attrs = 2;
  CHECK_CODE(cst->check(cst, &node), TPU_CODE_UNIMPLEMENTED);
  tt_t b = tt_make(B, 2, xs, TT_CONTIG);
  in[0] = tt_value(&b.view);
  node.attrs[0] = tt_ints(2, pad);
  node.num_attrs = 1;
  CHECK_CODE(refl->check(refl, &node), TPU_CODE_UNIMPLEMENTED);
  node.num_attrs = 2;
  CHECK_OK(cst->check(cst, &node));
  const tpu_op_def_t* rb = tt_def("reflection_pad1d_backward");
  tt_t xi = tt_make(I64, 2, xs, TT_CONTIG), gi = tt_make(I64, 2, os, TT_CONTIG);
  tpu_value_t bin[2] = {tt_value(&gi.view), tt_value(&xi.view)};
  tpu_node_t bn = tt_node(bin, 2, &xi.view, 1, attrs, 1);
  if (rb) CHECK_CODE(rb->check(rb, &bn), TPU_CODE_UNIMPLEMENTED);
  tt_free(&x), tt_free(&o), tt_free(&b), tt_free(&xi), tt_free(&gi);
}
