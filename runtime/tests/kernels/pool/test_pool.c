/* test_pool.c — the pooling family against its reference kernel.
 *
 * pool_cases: (op, dtype, input shape and layout, window arguments) run
 * forward through the optimised and the reference kernels (values and
 * indices compared), then backward on a random grad_output and the
 * reference forward's indices; 2-d and 3-d, batched and batch-less,
 * channels_last-like (TT_REVERSED), strided (TT_GAPS, TT_PADDED), NaNs,
 * integer dtypes, strided outputs. pool_semantics pins values and fallbacks.
 */
#include "kernels/pool/pool.h"

#include "kernel_test_util.h"

typedef struct pool_case {
  const char* op; /* forward row; its backward is op + "_backward" */
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t sizes[5];
  tt_layout_t layout;
  int64_t k, s, p, d; /* window (all spatial dims); adaptive: k is the output size */
  bool ceil, include_pad;
  int64_t divisor; /* 0: none */
  double nan_rate;
  bool strided_out;
} pool_case_t;

#define F32 TPU_DTYPE_F32
#define F64 TPU_DTYPE_F64
#define F16 TPU_DTYPE_F16
#define BF16 TPU_DTYPE_BF16
#define I64 TPU_DTYPE_I64
#define I8 TPU_DTYPE_I8

static const pool_case_t k_cases[] = {
    {"max_pool2d", F32, 4, {2, 3, 11, 12}, TT_CONTIG, 3, 2, 1, 1, false, true, 0, 0, false},
    {"max_pool2d", F32, 4, {2, 5, 9, 8}, TT_REVERSED, 3, 1, 1, 2, true, true, 0, 0.05, true},
    {"max_pool2d", F64, 3, {3, 10, 7}, TT_GAPS, 2, 2, 0, 1, true, true, 0, 0.1, false},
    {"max_pool2d", BF16, 4, {1, 4, 13, 9}, TT_PADDED, 3, 2, 1, 1, false, true, 0, 0, false},
    {"max_pool2d", F16, 4, {2, 2, 6, 30}, TT_CONTIG, 4, 3, 2, 1, true, true, 0, 0, true},
    {"max_pool2d", I64, 4, {2, 3, 8, 8}, TT_CONTIG, 3, 2, 1, 1, false, true, 0, 0, false},
    {"max_pool2d", I8, 3, {3, 9, 9}, TT_REVERSED, 2, 1, 1, 1, false, true, 0, 0, false},
    {"max_pool3d", F32, 5, {2, 3, 5, 6, 7}, TT_CONTIG, 2, 2, 1, 1, true, true, 0, 0.02, false},
    {"max_pool3d", F64, 4, {2, 6, 5, 8}, TT_REVERSED, 3, 2, 1, 2, false, true, 0, 0, true},
    {"max_pool3d", F16, 5, {1, 2, 4, 5, 6}, TT_GAPS, 2, 1, 0, 1, false, true, 0, 0, false},
    {"avg_pool2d", F32, 4, {2, 3, 11, 12}, TT_CONTIG, 3, 2, 1, 1, false, true, 0, 0, false},
    {"avg_pool2d", F32, 4, {2, 3, 11, 12}, TT_REVERSED, 3, 2, 1, 1, true, false, 0, 0, true},
    {"avg_pool2d", F64, 3, {3, 7, 9}, TT_GAPS, 2, 3, 1, 1, true, true, 5, 0, false},
    {"avg_pool2d", BF16, 4, {2, 2, 8, 8}, TT_CONTIG, 3, 1, 1, 1, false, false, 0, 0, false},
    {"avg_pool2d", F16, 4, {2, 2, 8, 10}, TT_PADDED, 2, 2, 0, 1, false, true, 0, 0, false},
    {"avg_pool2d", I64, 4, {2, 3, 8, 8}, TT_CONTIG, 3, 2, 1, 1, true, false, 0, 0, false},
    {"avg_pool3d", F32, 5, {2, 3, 5, 6, 7}, TT_CONTIG, 3, 2, 1, 1, true, false, 0, 0, false},
    {"avg_pool3d", F64, 4, {3, 6, 5, 4}, TT_REVERSED, 2, 1, 1, 1, false, true, 7, 0, true},
    {"avg_pool3d", I64, 5, {1, 2, 4, 4, 4}, TT_CONTIG, 2, 2, 0, 1, false, true, 0, 0, false},
    {"adaptive_avg_pool2d", F32, 4, {2, 3, 11, 12}, TT_CONTIG, 5, 0, 0, 0, false, true, 0, 0, false},
    {"adaptive_avg_pool2d", F64, 3, {3, 7, 5}, TT_REVERSED, 3, 0, 0, 0, false, true, 0, 0, true},
    {"adaptive_avg_pool2d", BF16, 4, {2, 2, 9, 9}, TT_GAPS, 4, 0, 0, 0, false, true, 0, 0, false},
    {"adaptive_avg_pool3d", F32, 5, {2, 3, 5, 6, 7}, TT_CONTIG, 3, 0, 0, 0, false, true, 0, 0, false},
    {"adaptive_avg_pool3d", F16, 4, {2, 5, 6, 7}, TT_REVERSED, 2, 0, 0, 0, false, true, 0, 0, false},
    {"adaptive_max_pool2d", F32, 4, {2, 3, 11, 12}, TT_CONTIG, 5, 0, 0, 0, false, true, 0, 0.05, false},
    {"adaptive_max_pool2d", F64, 3, {3, 6, 13}, TT_PADDED, 4, 0, 0, 0, false, true, 0, 0, true},
    {"adaptive_max_pool3d", F32, 5, {2, 3, 5, 6, 7}, TT_REVERSED, 3, 0, 0, 0, false, true, 0, 0, false},
    {"adaptive_max_pool3d", BF16, 4, {2, 4, 4, 9}, TT_CONTIG, 2, 0, 0, 0, false, true, 0, 0, false},
    {"max_pool2d", F32, 4, {0, 3, 8, 8}, TT_CONTIG, 2, 2, 0, 1, false, true, 0, 0, false},
};

/* PyTorch's pooling_output_shape. */
static int64_t pooled(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
  int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
  int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil && (o - 1) * s >= in + p) --o;
  return o;
}

static void run_case(int index, const pool_case_t* c) {
  const tpu_op_def_t* fwd = tt_def(c->op);
  char bname[64];
  snprintf(bname, sizeof(bname), "%s_backward", c->op);
  const tpu_op_def_t* bwd = tt_def(bname);
  if (!fwd || !bwd) return;
  const pool_impl_t* im = (const pool_impl_t*)fwd->impl;
  int32_t nsp = im->nsp, lead = c->ndim - nsp;
  bool adaptive = im->kind == POOL_ADAPTIVE_AVG || im->kind == POOL_ADAPTIVE_MAX;
  bool mx = im->kind == POOL_MAX || im->kind == POOL_ADAPTIVE_MAX;
  char what[96];
  snprintf(what, sizeof(what), "case %d %s (%s)", index, c->op, tpu_dtype_name(c->dtype));

  tt_t x = tt_make(c->dtype, c->ndim, c->sizes, c->layout);
  tt_fill(&x.view, -8, 8, c->nan_rate);
  /* Attrs in the row's order. */
  int64_t k[3] = {c->k, c->k, c->k}, s[3] = {c->s, c->s, c->s}, p[3] = {c->p, c->p, c->p};
  int64_t d[3] = {c->d, c->d, c->d};
  tpu_attr_t attrs[6];
  int32_t na;
  if (adaptive) {
    attrs[0] = tt_ints(nsp, k);
    na = 1;
  } else if (im->kind == POOL_MAX) {
    attrs[0] = tt_ints(nsp, k), attrs[1] = tt_ints(nsp, s), attrs[2] = tt_ints(nsp, p);
    attrs[3] = tt_ints(nsp, d), attrs[4] = tt_bool(c->ceil);
    na = 5;
  } else {
    attrs[0] = tt_ints(nsp, k), attrs[1] = tt_ints(nsp, s), attrs[2] = tt_ints(nsp, p);
    attrs[3] = tt_bool(c->ceil), attrs[4] = tt_bool(c->include_pad);
    attrs[5] = c->divisor ? tt_int(c->divisor) : tt_none();
    na = 6;
  }
  tpu_view_t oshape = x.view;
  for (int32_t t = 0; t < nsp; ++t)
    oshape.sizes[lead + t] =
        adaptive ? c->k : pooled(c->sizes[lead + t], c->k, c->s, c->p, im->kind == POOL_MAX ? c->d : 1, c->ceil);
  tt_t got = tt_like(&oshape, c->strided_out ? TT_GAPS : TT_CONTIG);
  tt_t want = tt_like(&oshape, TT_CONTIG);
  oshape.dtype = I64;
  tt_t gi_idx = tt_like(&oshape, c->strided_out ? TT_REVERSED : TT_CONTIG);
  tt_t wi_idx = tt_like(&oshape, TT_CONTIG);
  tpu_value_t in[3] = {tt_value(&x.view)};
  tpu_view_t gv[2] = {got.view, gi_idx.view}, wv[2] = {want.view, wi_idx.view};
  tpu_node_t node = tt_node(in, 1, gv, mx ? 2 : 1, attrs, na);
  CHECK_OK(fwd->check(fwd, &node));
  CHECK_OK(tt_run(fwd->kernel, fwd, &node));
  node.outputs = wv;
  CHECK_OK(tt_run(tpu_pool_reference, fwd, &node));
  tt_compare(what, &got.view, &want.view, tt_tol(c->dtype) + 1e-12);
  if (mx) tt_compare(what, &gi_idx.view, &wi_idx.view, 0.0);

  /* max_unpool of the pooled values back to the input's size. */
  if (im->kind == POOL_MAX && tpu_dtype_is_floating(c->dtype)) {
    const tpu_op_def_t* up = tt_def(nsp == 2 ? "max_unpool2d" : "max_unpool3d");
    snprintf(what, sizeof(what), "case %d max_unpool (%s)", index, tpu_dtype_name(c->dtype));
    tt_t ugot = tt_like(&x.view, c->strided_out ? TT_REVERSED : TT_CONTIG);
    tt_t uwant = tt_like(&x.view, TT_CONTIG);
    tt_fill_value(&ugot.view, 5); /* every element must be written */
    tpu_value_t uin[2] = {tt_value(&want.view), tt_value(&wi_idx.view)};
    tpu_attr_t uat[3] = {tt_ints(nsp, c->sizes + lead), tt_ints(nsp, s), tt_ints(nsp, p)};
    tpu_node_t un = tt_node(uin, 2, &ugot.view, 1, uat, nsp == 2 ? 1 : 3);
    if (up) {
      CHECK_OK(up->check(up, &un));
      CHECK_OK(tt_run(up->kernel, up, &un));
      un.outputs = &uwant.view;
      CHECK_OK(tt_run(tpu_pool_reference, up, &un));
      tt_compare(what, &ugot.view, &uwant.view, 0.0);
    }
    tt_free(&ugot), tt_free(&uwant);
  }

  /* Backward (floating dtypes; integer average pooling too). */
  if (tpu_dtype_is_floating(c->dtype) || im->kind == POOL_AVG) {
    snprintf(what, sizeof(what), "case %d %s backward (%s)", index, c->op,
             tpu_dtype_name(c->dtype));
    oshape.dtype = c->dtype;
    tt_t g = tt_like(&oshape, c->layout == TT_REVERSED ? TT_REVERSED : TT_CONTIG);
    tt_fill(&g.view, -2, 2, 0);
    tt_t bgot = tt_like(&x.view, c->strided_out ? TT_PADDED : TT_CONTIG);
    tt_t bwant = tt_like(&x.view, TT_CONTIG);
    tpu_value_t bin[3] = {tt_value(&g.view), tt_value(&x.view), tt_value(&wi_idx.view)};
    tpu_node_t bn = tt_node(bin, mx ? 3 : 2, &bgot.view, 1, adaptive ? NULL : attrs,
                            adaptive ? 0 : na);
    CHECK_OK(bwd->check(bwd, &bn));
    CHECK_OK(tt_run(bwd->kernel, bwd, &bn));
    bn.outputs = &bwant.view;
    CHECK_OK(tt_run(tpu_pool_reference, bwd, &bn));
    /* Half types add in their own precision, in order: a few roundings apart. */
    tt_compare(what, &bgot.view, &bwant.view, 8 * tt_tol(c->dtype) + 1e-12);
    tt_free(&g), tt_free(&bgot), tt_free(&bwant);
  }
  tt_free(&x), tt_free(&got), tt_free(&want), tt_free(&gi_idx), tt_free(&wi_idx);
}

TEST(pool_cases) {
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) run_case((int)i, &k_cases[i]);
}

TEST(pool_semantics) {
  const tpu_op_def_t* mp = tt_def("max_pool2d");
  const tpu_op_def_t* mpb = tt_def("max_pool2d_backward");
  const tpu_op_def_t* ap = tt_def("avg_pool2d");
  if (!mp || !mpb || !ap) return;
  /* 1x1x2x3 input, 2x2 windows, stride 1: [[1, NaN, 2], [5, 0, 3]]. */
  int64_t xs[4] = {1, 1, 2, 3}, os[4] = {1, 1, 1, 2}, two[2] = {2, 2}, one[2] = {1, 1},
          zero[2] = {0, 0};
  tt_t x = tt_make(F32, 4, xs, TT_CONTIG);
  double vals[6] = {1, NAN, 2, 5, 0, 3};
  for (int i = 0; i < 6; ++i) tt_set(&x.view, i, vals[i]);
  tt_t o = tt_make(F32, 4, os, TT_CONTIG), ix = tt_make(I64, 4, os, TT_CONTIG);
  tpu_value_t in[3] = {tt_value(&x.view)};
  tpu_attr_t attrs[6] = {tt_ints(2, two), tt_ints(2, one), tt_ints(2, zero), tt_ints(2, one),
                         tt_bool(false)};
  tpu_view_t outs[2] = {o.view, ix.view};
  tpu_node_t node = tt_node(in, 1, outs, 2, attrs, 5);
  CHECK_OK(tt_run(mp->kernel, mp, &node));
  CHECK(isnan(tt_get(&o.view, 0)) && tt_get(&ix.view, 0) == 1); /* NaN wins */
  CHECK(isnan(tt_get(&o.view, 1)) && tt_get(&ix.view, 1) == 1);
  /* An index outside the plane is an error, not a write. */
  tt_set(&ix.view, 1, 6);
  tt_t g = tt_make(F32, 4, os, TT_CONTIG), gi = tt_make(F32, 4, xs, TT_CONTIG);
  tt_fill_value(&g.view, 1.0);
  tpu_value_t bin[3] = {tt_value(&g.view), tt_value(&x.view), tt_value(&ix.view)};
  tpu_node_t bn = tt_node(bin, 3, &gi.view, 1, attrs, 5);
  CHECK_CODE(tt_run(mpb->kernel, mpb, &bn), TPU_CODE_INVALID_ARGUMENT);
  /* Fallbacks: bool input, padding over half the kernel, integer backward, bad rank. */
  tt_t b = tt_make(TPU_DTYPE_BOOL, 4, xs, TT_CONTIG);
  in[0] = tt_value(&b.view);
  CHECK_CODE(mp->check(mp, &node), TPU_CODE_UNIMPLEMENTED);
  in[0] = tt_value(&x.view);
  node.attrs[2] = tt_ints(2, two);
  CHECK_CODE(mp->check(mp, &node), TPU_CODE_UNIMPLEMENTED);
  node.attrs[2] = tt_ints(2, zero);
  CHECK_OK(mp->check(mp, &node));
  tt_t xi = tt_make(I64, 4, xs, TT_CONTIG);
  bin[0] = tt_value(&xi.view), bin[1] = tt_value(&xi.view);
  CHECK_CODE(mpb->check(mpb, &bn), TPU_CODE_UNIMPLEMENTED);
  tt_t x2 = tt_make(F32, 2, xs + 2, TT_CONTIG);
  in[0] = tt_value(&x2.view);
  CHECK_CODE(mp->check(mp, &node), TPU_CODE_UNIMPLEMENTED);
  /* avg_pool2d: divisor_override 0 and int32 inputs fall back. */
  tpu_attr_t aattrs[6] = {tt_ints(2, two), tt_ints(2, one), tt_ints(2, zero), tt_bool(false),
                          tt_bool(true), tt_int(0)};
  in[0] = tt_value(&x.view);
  tpu_node_t an = tt_node(in, 1, &o.view, 1, aattrs, 6);
  CHECK_CODE(ap->check(ap, &an), TPU_CODE_UNIMPLEMENTED);
  an.attrs[5] = tt_none();
  CHECK_OK(ap->check(ap, &an));
  tt_t x32 = tt_make(TPU_DTYPE_I32, 4, xs, TT_CONTIG);
  in[0] = tt_value(&x32.view);
  CHECK_CODE(ap->check(ap, &an), TPU_CODE_UNIMPLEMENTED);
  in[0] = tt_value(&x.view);
  CHECK_OK(tt_run(ap->kernel, ap, &an));
  CHECK(isnan(tt_get(&o.view, 0)));
  tt_free(&x), tt_free(&o), tt_free(&ix), tt_free(&g), tt_free(&gi), tt_free(&b), tt_free(&xi);
  tt_free(&x2), tt_free(&x32);
}

TEST(pool_unpool_bad_index) {
  const tpu_op_def_t* up = tt_def("max_unpool2d");
  if (!up) return;
  int64_t xs[3] = {1, 2, 2}, os[3] = {1, 4, 4}, osz[2] = {4, 4};
  tt_t x = tt_make(F32, 3, xs, TT_CONTIG), ix = tt_make(I64, 3, xs, TT_CONTIG);
  tt_t o = tt_make(F32, 3, os, TT_CONTIG);
  tt_fill_value(&x.view, 1);
  tt_set(&ix.view, 3, 16); /* one past the plane */
  tpu_value_t in[2] = {tt_value(&x.view), tt_value(&ix.view)};
  tpu_attr_t at[1] = {tt_ints(2, osz)};
  tpu_node_t n = tt_node(in, 2, &o.view, 1, at, 1);
  CHECK_CODE(tt_run(up->kernel, up, &n), TPU_CODE_INVALID_ARGUMENT);
  tt_set(&ix.view, 3, 15);
  CHECK_OK(tt_run(up->kernel, up, &n));
  CHECK(tt_get(&o.view, 15) == 1 && tt_get(&o.view, 0) == 1 && tt_get(&o.view, 1) == 0);
  tt_t xi = tt_make(I64, 3, xs, TT_CONTIG); /* integer values fall back (as on the CPU) */
  in[0] = tt_value(&xi.view);
  CHECK_CODE(up->check(up, &n), TPU_CODE_UNIMPLEMENTED);
  tt_free(&x), tt_free(&ix), tt_free(&o), tt_free(&xi);
}

/* max_pool2d's argument errors come from its shape function (PyTorch's
 * messages, INVALID_ARGUMENT); valid arguments leave the shapes to the meta
 * kernel (UNIMPLEMENTED). */
typedef struct mp_err_case {
  int32_t ndim;
  int64_t sizes[4];
  int32_t nk, ns, np, nd;
  int64_t k[3], s[3], p[3], d[3];
  tpu_status_code_t want;
} mp_err_case_t;

static const mp_err_case_t k_mp_errors[] = {
    {4, {2, 3, 8, 8}, 2, 0, 1, 1, {2, 2}, {0}, {0}, {1}, TPU_CODE_UNIMPLEMENTED},
    {4, {2, 3, 8, 8}, 2, 2, 1, 1, {0, 0}, {0, 0}, {0}, {1}, TPU_CODE_INVALID_ARGUMENT},
    {4, {2, 3, 8, 8}, 2, 0, 1, 1, {2, -1}, {0}, {0}, {1}, TPU_CODE_INVALID_ARGUMENT},
    {4, {2, 3, 8, 8}, 2, 2, 1, 1, {2, 2}, {-1, 1}, {0}, {1}, TPU_CODE_INVALID_ARGUMENT},
    {4, {2, 3, 8, 8}, 2, 0, 1, 1, {2, 2}, {0}, {2}, {1}, TPU_CODE_INVALID_ARGUMENT},
    {4, {2, 3, 8, 8}, 2, 0, 1, 1, {3, 3}, {0}, {2}, {2}, TPU_CODE_INVALID_ARGUMENT},
    {4, {2, 3, 8, 8}, 2, 0, 1, 1, {2, 2}, {0}, {-1}, {1}, TPU_CODE_INVALID_ARGUMENT},
    {4, {2, 3, 8, 8}, 2, 0, 1, 1, {2, 2}, {0}, {0}, {0}, TPU_CODE_INVALID_ARGUMENT},
    {4, {2, 3, 2, 2}, 2, 0, 1, 1, {3, 3}, {0}, {0}, {1}, TPU_CODE_INVALID_ARGUMENT},
    {2, {8, 8}, 2, 0, 1, 1, {2, 2}, {0}, {0}, {1}, TPU_CODE_INVALID_ARGUMENT},
    {4, {2, 0, 8, 8}, 2, 0, 1, 1, {2, 2}, {0}, {0}, {1}, TPU_CODE_INVALID_ARGUMENT},
    {4, {0, 3, 8, 8}, 2, 0, 1, 1, {2, 2}, {0}, {0}, {1}, TPU_CODE_UNIMPLEMENTED},
    {4, {2, 3, 8, 8}, 3, 0, 1, 1, {2, 2, 2}, {0}, {0}, {1}, TPU_CODE_INVALID_ARGUMENT},
    {4, {2, 3, 8, 8}, 2, 3, 1, 1, {2, 2}, {1, 1, 1}, {0}, {1}, TPU_CODE_INVALID_ARGUMENT},
    {4, {2, 3, 8, 8}, 2, 0, 0, 1, {2, 2}, {0}, {0}, {1}, TPU_CODE_INVALID_ARGUMENT},
    {3, {3, 9, 9}, 1, 1, 2, 2, {3}, {2}, {1, 1}, {2, 1}, TPU_CODE_UNIMPLEMENTED},
};

TEST(max_pool2d_argument_errors) {
  const tpu_op_def_t* def = tt_def("max_pool2d");
  if (!def) return;
  for (size_t i = 0; i < sizeof(k_mp_errors) / sizeof(k_mp_errors[0]); ++i) {
    const mp_err_case_t* c = &k_mp_errors[i];
    tt_t x = tt_make(TPU_DTYPE_F32, c->ndim, c->sizes, TT_CONTIG);
    tpu_value_t in[1] = {tt_value(&x.view)};
    tpu_attr_t attrs[5] = {tt_ints(c->nk, c->k), tt_ints(c->ns, c->s), tt_ints(c->np, c->p),
                           tt_ints(c->nd, c->d), tt_bool(false)};
    tpu_node_t node = tt_node(in, 1, NULL, 0, attrs, 5);
    tpu_view_t out[2];
    if (tt_code(def->infer(def, &node, out)) != c->want)
      tpu_test_fail(__FILE__, __LINE__, "max_pool2d error case %d", (int)i);
    tt_free(&x);
  }
}
