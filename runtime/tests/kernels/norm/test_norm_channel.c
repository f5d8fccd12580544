/* test_norm_channel.c — batch norm and group norm against their reference
 * kernels.
 *
 * bn_cases: (dtype, shape, layout, params, training, mask) run forward
 * (running statistics updated in place, compared too) and backward on the
 * forward's statistics through the optimised and reference kernels; both
 * kernel layouts (channel-innermost "rows": channels_last and [N, C]; and
 * per-channel streams), strided and padded inputs, half types with float32
 * parameters. gn_cases likewise for group norm. channel_semantics pins
 * values, absent (masked) outputs and fallbacks.
 */
#include "kernels/norm/batch_norm.h"

#include "kernel_test_util.h"

#define F32 TPU_DTYPE_F32
#define F64 TPU_DTYPE_F64
#define F16 TPU_DTYPE_F16
#define BF16 TPU_DTYPE_BF16
#define CL 100 /* layout: channels_last */

/* A tensor in `layout`, or channels_last (channel dim innermost) for CL. */
static tt_t make(tpu_dtype_t dt, int32_t ndim, const int64_t* sizes, int layout) {
  if (layout != CL) return tt_make(dt, ndim, sizes, (tt_layout_t)layout);
  tt_t t = tt_make(dt, ndim, sizes, TT_CONTIG);
  int64_t acc = 1;
  t.view.strides[1] = acc;
  acc *= sizes[1];
  for (int32_t d = ndim - 1; d >= 2; --d) {
    t.view.strides[d] = acc;
    acc *= sizes[d];
  }
  t.view.strides[0] = acc;
  return t;
}

static void alloc3(const tpu_view_t* shapes, tt_t* t, tpu_view_t* v) {
  for (int i = 0; i < 3; ++i) {
    memset(&t[i], 0, sizeof(t[i]));
    if (tpu_view_is_absent(&shapes[i])) {
      v[i] = shapes[i];
      continue;
    }
    t[i] = tt_like(&shapes[i], TT_CONTIG);
    v[i] = t[i].view;
  }
}

static void free3(tt_t* t) {
  for (int i = 0; i < 3; ++i) tt_free(&t[i]);
}

static void compare3(const char* what, const tpu_view_t* got, const tpu_view_t* want) {
  for (int i = 0; i < 3; ++i)
    if (!tpu_view_is_absent(&want[i]))
      tt_compare(what, &got[i], &want[i], 8 * tt_tol(want[i].dtype) + 1e-12);
}

typedef struct bn_case {
  tpu_dtype_t dtype, pdtype;
  int32_t ndim;
  int64_t sizes[5];
  int layout;
  bool weight, bias, stats, training;
  bool mask[3];
} bn_case_t;

#define ALL3 {true, true, true}
static const bn_case_t k_bn[] = {
    {F32, F32, 4, {2, 3, 4, 5}, TT_CONTIG, true, true, true, true, ALL3},
    {F32, F32, 4, {2, 3, 4, 5}, TT_CONTIG, true, true, true, false, ALL3},
    {F64, F64, 4, {3, 5, 2, 7}, CL, true, true, true, true, ALL3},
    {F64, F64, 4, {3, 5, 2, 7}, CL, true, false, true, false, {true, false, true}},
    {F32, F32, 2, {40, 7}, TT_CONTIG, false, false, false, true, ALL3},
    {F32, F32, 3, {4, 6, 33}, TT_GAPS, true, true, true, true, {false, true, true}},
    {F64, F64, 3, {4, 6, 33}, TT_PADDED, true, false, false, true, {true, true, false}},
    {F32, F32, 3, {5, 4, 1000}, TT_CONTIG, true, true, true, true, ALL3},
    {F16, F32, 4, {2, 3, 4, 5}, TT_CONTIG, true, true, true, true, ALL3},
    {BF16, F32, 4, {2, 8, 3, 3}, CL, true, true, true, true, ALL3},
    {F64, F64, 5, {2, 3, 2, 3, 4}, CL, true, true, true, true, ALL3},
    {F32, F32, 2, {200, 300}, TT_CONTIG, true, true, true, true, ALL3},
    {F64, F64, 3, {1, 4, 1}, TT_CONTIG, true, true, true, false, ALL3},
};

static void bn_case(int index, const bn_case_t* c) {
  const tpu_op_def_t* fwd = tt_def("batch_norm");
  const tpu_op_def_t* bwd = tt_def("batch_norm_backward");
  if (!fwd || !bwd) return;
  char what[80];
  int64_t ch = c->sizes[1];
  tt_t x = make(c->dtype, c->ndim, c->sizes, c->layout);
  tt_t g = make(c->dtype, c->ndim, c->sizes, c->layout == CL ? CL : TT_CONTIG);
  tt_t w = tt_make(c->pdtype, 1, &ch, TT_CONTIG), b = tt_make(c->pdtype, 1, &ch, TT_GAPS);
  tt_t rm[2], rv[2];
  tt_fill(&x.view, 2, 6, 0);
  tt_fill(&g.view, -1, 1, 0);
  tt_fill(&w.view, 0.5, 1.5, 0);
  tt_fill(&b.view, -1, 1, 0);
  for (int k = 0; k < 2; ++k) {
    rm[k] = tt_make(c->pdtype, 1, &ch, TT_CONTIG);
    rv[k] = tt_make(c->pdtype, 1, &ch, TT_CONTIG);
  }
  tt_fill(&rm[0].view, 2, 4, 0);
  tt_fill(&rv[0].view, 1, 2, 0);
  for (int64_t i = 0; i < ch; ++i) {
    tt_set(&rm[1].view, i, tt_get(&rm[0].view, i));
    tt_set(&rv[1].view, i, tt_get(&rv[0].view, i));
  }
  tpu_attr_t attrs[3] = {tt_bool(c->training), tt_float(0.1), tt_float(1e-5)};
  tpu_view_t shapes[3], gv[3], wv[3];
  tt_t gt[3], wt[3];
  for (int k = 0; k < 2; ++k) { /* k = 0: optimised, 1: reference */
    tpu_value_t in[5] = {tt_value(&x.view), tt_value(c->weight ? &w.view : NULL),
                         tt_value(c->bias ? &b.view : NULL),
                         tt_value(c->stats ? &rm[k].view : NULL),
                         tt_value(c->stats ? &rv[k].view : NULL)};
    tpu_node_t node = tt_node(in, 5, NULL, 0, attrs, 3);
    CHECK_OK(fwd->check(fwd, &node));
    CHECK_OK(fwd->infer(fwd, &node, shapes));
    alloc3(shapes, k ? wt : gt, k ? wv : gv);
    node.outputs = k ? wv : gv;
    node.num_outputs = 3;
    CHECK_OK(tt_run(k ? tpu_bn_reference : fwd->kernel, fwd, &node));
  }
  snprintf(what, sizeof(what), "bn case %d forward (%s)", index, tpu_dtype_name(c->dtype));
  compare3(what, gv, wv);
  if (c->stats) {
    tt_compare(what, &rm[0].view, &rm[1].view, 4 * tt_tol(c->pdtype) + 1e-12);
    tt_compare(what, &rv[0].view, &rv[1].view, 4 * tt_tol(c->pdtype) + 1e-12);
  }
  /* Backward on the reference's statistics. */
  int64_t mask[3] = {c->mask[0], c->mask[1], c->mask[2]};
  tpu_attr_t battrs[3] = {tt_bool(c->training), tt_float(1e-5), tt_ints(3, mask)};
  tpu_view_t bshapes[3], bgv[3], bwv[3];
  tt_t bgt[3], bwt[3];
  for (int k = 0; k < 2; ++k) {
    tpu_value_t in[7] = {tt_value(&g.view),
                         tt_value(&x.view),
                         tt_value(c->weight ? &w.view : NULL),
                         tt_value(c->stats ? &rm[1].view : NULL),
                         tt_value(c->stats ? &rv[1].view : NULL),
                         tt_value(c->training ? &wv[1] : NULL),
                         tt_value(c->training ? &wv[2] : NULL)};
    tpu_node_t node = tt_node(in, 7, NULL, 0, battrs, 3);
    CHECK_OK(bwd->check(bwd, &node));
    CHECK_OK(bwd->infer(bwd, &node, bshapes));
    for (int i = 0; i < 3; ++i) CHECK(tpu_view_is_absent(&bshapes[i]) == !c->mask[i]);
    alloc3(bshapes, k ? bwt : bgt, k ? bwv : bgv);
    node.outputs = k ? bwv : bgv;
    node.num_outputs = 3;
    CHECK_OK(tt_run(k ? tpu_bn_reference : bwd->kernel, bwd, &node));
  }
  snprintf(what, sizeof(what), "bn case %d backward (%s)", index, tpu_dtype_name(c->dtype));
  compare3(what, bgv, bwv);
  free3(gt);
  free3(wt);
  free3(bgt);
  free3(bwt);
  for (int k = 0; k < 2; ++k) {
    tt_free(&rm[k]);
    tt_free(&rv[k]);
  }
  tt_free(&x);
  tt_free(&g);
  tt_free(&w);
  tt_free(&b);
}

TEST(bn_cases) {
  for (size_t i = 0; i < sizeof(k_bn) / sizeof(k_bn[0]); ++i) bn_case((int)i, &k_bn[i]);
}

typedef struct gn_case {
  tpu_dtype_t dtype, pdtype;
  int32_t ndim;
  int64_t sizes[5];
  int64_t groups;
  int layout;
  bool weight, bias;
  bool mask[3];
} gn_case_t;

static const gn_case_t k_gn[] = {
    {F32, F32, 4, {2, 6, 4, 5}, 3, TT_CONTIG, true, true, ALL3},
    {F64, F64, 4, {3, 4, 3, 3}, 2, CL, true, false, ALL3},
    {F64, F64, 3, {2, 6, 7}, 6, TT_GAPS, false, false, {true, false, false}},
    {F32, F32, 2, {5, 8}, 4, TT_CONTIG, true, true, {false, true, true}},
    {F32, F32, 3, {2, 4, 3000}, 2, TT_CONTIG, true, true, ALL3},
    {F16, F32, 4, {2, 6, 4, 5}, 3, TT_CONTIG, true, true, ALL3},
    {BF16, F32, 4, {2, 4, 3, 3}, 1, CL, true, true, ALL3},
    {F64, F64, 3, {2, 6, 7}, 3, TT_PADDED, true, true, ALL3},
};

static void gn_case(int index, const gn_case_t* c) {
  const tpu_op_def_t* fwd = tt_def("group_norm");
  const tpu_op_def_t* bwd = tt_def("group_norm_backward");
  if (!fwd || !bwd) return;
  char what[80];
  int64_t ch = c->sizes[1], hw = 1;
  for (int32_t d = 2; d < c->ndim; ++d) hw *= c->sizes[d];
  tt_t x = make(c->dtype, c->ndim, c->sizes, c->layout);
  tt_t g = make(c->dtype, c->ndim, c->sizes, TT_CONTIG);
  tt_t w = tt_make(c->pdtype, 1, &ch, TT_CONTIG), b = tt_make(c->pdtype, 1, &ch, TT_CONTIG);
  tt_fill(&x.view, -3, 5, 0);
  tt_fill(&g.view, -1, 1, 0);
  tt_fill(&w.view, 0.5, 1.5, 0);
  tt_fill(&b.view, -1, 1, 0);
  tpu_attr_t attrs[5] = {tt_int(c->sizes[0]), tt_int(ch), tt_int(hw), tt_int(c->groups),
                         tt_float(1e-5)};
  tpu_view_t shapes[3], gv[3], wv[3];
  tt_t gt[3], wt[3];
  for (int k = 0; k < 2; ++k) {
    tpu_value_t in[3] = {tt_value(&x.view), tt_value(c->weight ? &w.view : NULL),
                         tt_value(c->bias ? &b.view : NULL)};
    tpu_node_t node = tt_node(in, 3, NULL, 0, attrs, 5);
    CHECK_OK(fwd->check(fwd, &node));
    CHECK_OK(fwd->infer(fwd, &node, shapes));
    alloc3(shapes, k ? wt : gt, k ? wv : gv);
    node.outputs = k ? wv : gv;
    node.num_outputs = 3;
    CHECK_OK(tt_run(k ? tpu_gn_reference : fwd->kernel, fwd, &node));
  }
  snprintf(what, sizeof(what), "gn case %d forward (%s)", index, tpu_dtype_name(c->dtype));
  compare3(what, gv, wv);
  int64_t mask[3] = {c->mask[0], c->mask[1], c->mask[2]};
  tpu_attr_t battrs[5] = {tt_int(c->sizes[0]), tt_int(ch), tt_int(hw), tt_int(c->groups),
                          tt_ints(3, mask)};
  tpu_view_t bshapes[3], bgv[3], bwv[3];
  tt_t bgt[3], bwt[3];
  for (int k = 0; k < 2; ++k) {
    tpu_value_t in[5] = {tt_value(&g.view), tt_value(&x.view), tt_value(&wv[1]),
                         tt_value(&wv[2]), tt_value(c->weight ? &w.view : NULL)};
    tpu_node_t node = tt_node(in, 5, NULL, 0, battrs, 5);
    CHECK_OK(bwd->check(bwd, &node));
    CHECK_OK(bwd->infer(bwd, &node, bshapes));
    alloc3(bshapes, k ? bwt : bgt, k ? bwv : bgv);
    node.outputs = k ? bwv : bgv;
    node.num_outputs = 3;
    CHECK_OK(tt_run(k ? tpu_gn_reference : bwd->kernel, bwd, &node));
  }
  snprintf(what, sizeof(what), "gn case %d backward (%s)", index, tpu_dtype_name(c->dtype));
  compare3(what, bgv, bwv);
  free3(gt);
  free3(wt);
  free3(bgt);
  free3(bwt);
  tt_free(&x);
  tt_free(&g);
  tt_free(&w);
  tt_free(&b);
}

TEST(gn_cases) {
  for (size_t i = 0; i < sizeof(k_gn) / sizeof(k_gn[0]); ++i) gn_case((int)i, &k_gn[i]);
}

TEST(channel_semantics) {
  const tpu_op_def_t* fwd = tt_def("batch_norm");
  if (!fwd) return;
  /* x = [[1], [3]] as [N=2, C=1]: mean 2, var 1, unbiased 2. */
  int64_t s21[2] = {2, 1}, s1[1] = {1};
  tt_t x = tt_make(F32, 2, s21, TT_CONTIG), rm = tt_make(F32, 1, s1, TT_CONTIG);
  tt_t rv = tt_make(F32, 1, s1, TT_CONTIG);
  tt_set(&x.view, 0, 1);
  tt_set(&x.view, 1, 3);
  tt_set(&rv.view, 0, 1);
  tpu_value_t in[5] = {tt_value(&x.view), tt_value(NULL), tt_value(NULL), tt_value(&rm.view),
                       tt_value(&rv.view)};
  tpu_attr_t attrs[3] = {tt_bool(true), tt_float(0.5), tt_float(0.0)};
  tpu_node_t node = tt_node(in, 5, NULL, 0, attrs, 3);
  tpu_view_t shapes[3], v[3];
  tt_t t[3];
  CHECK_OK(fwd->infer(fwd, &node, shapes));
  CHECK(shapes[1].ndim == 1 && shapes[1].sizes[0] == 1);
  alloc3(shapes, t, v);
  node.outputs = v;
  node.num_outputs = 3;
  CHECK_OK(tt_run(fwd->kernel, fwd, &node));
  CHECK_NEAR(tt_get(&v[0], 0), -1.0, 1e-6);
  CHECK_NEAR(tt_get(&v[0], 1), 1.0, 1e-6);
  CHECK_NEAR(tt_get(&v[1], 0), 2.0, 1e-6);
  CHECK_NEAR(tt_get(&v[2], 0), 1.0, 1e-6);
  CHECK_NEAR(tt_get(&rm.view, 0), 1.0, 1e-6);  /* 0.5 * 2 + 0.5 * 0 */
  CHECK_NEAR(tt_get(&rv.view, 0), 1.5, 1e-6);  /* 0.5 * 2 + 0.5 * 1 */
  free3(t);
  /* Eval: statistics outputs are empty; eval without running stats falls back. */
  node.attrs[0] = tt_bool(false);
  CHECK_OK(fwd->infer(fwd, &node, shapes));
  CHECK(shapes[1].sizes[0] == 0 && shapes[2].sizes[0] == 0);
  node.inputs[3] = tt_value(NULL);
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_UNIMPLEMENTED);
  /* Integer inputs and empty batches fall back. */
  tt_t xi = tt_make(TPU_DTYPE_I64, 2, s21, TT_CONTIG);
  node.inputs[0] = tt_value(&xi.view);
  node.attrs[0] = tt_bool(true);
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_UNIMPLEMENTED);
  tt_t xe = tt_make(F32, 2, (int64_t[2]){0, 1}, TT_CONTIG);
  node.inputs[0] = tt_value(&xe.view);
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_UNIMPLEMENTED);
  /* Group norm: C not divisible by group falls back. */
  const tpu_op_def_t* gfwd = tt_def("group_norm");
  int64_t s234[3] = {2, 3, 4};
  tt_t gx = tt_make(F32, 3, s234, TT_CONTIG);
  tpu_value_t gin[3] = {tt_value(&gx.view), tt_value(NULL), tt_value(NULL)};
  tpu_attr_t gattrs[5] = {tt_int(2), tt_int(3), tt_int(4), tt_int(2), tt_float(1e-5)};
  node = tt_node(gin, 3, NULL, 0, gattrs, 5);
  CHECK_CODE(gfwd->check(gfwd, &node), TPU_CODE_UNIMPLEMENTED);
  node.attrs[3] = tt_int(3);
  CHECK_OK(gfwd->check(gfwd, &node));
  tt_free(&gx);
  tt_free(&xe);
  tt_free(&xi);
  tt_free(&x);
  tt_free(&rm);
  tt_free(&rv);
}
