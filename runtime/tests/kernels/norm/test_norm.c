/* test_norm.c — the normalisation family against its reference kernel.
 *
 * norm_cases: (dtype, shape, normalised dims, layout, weight/bias, mask) run
 * forward, then backward on the forward's mean/rstd, through the optimised
 * and reference kernels; rows short and long (streamed in chunks), strided
 * and transposed inputs, strided outputs, no rows. norm_semantics pins
 * values, output metadata and fallbacks.
 */
#include "kernels/norm/norm.h"

#include "kernel_test_util.h"

typedef struct norm_case {
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t sizes[4];
  int32_t k; /* trailing dims normalised */
  tt_layout_t layout;
  bool weight, bias;
  bool mask[3];
  bool strided_out;
  double eps;
} norm_case_t;

#define F32 TPU_DTYPE_F32
#define F64 TPU_DTYPE_F64
#define F16 TPU_DTYPE_F16
#define BF16 TPU_DTYPE_BF16
#define ALL3 {true, true, true}

static const norm_case_t k_cases[] = {
    {F32, 2, {4, 10}, 1, TT_CONTIG, true, true, ALL3, false, 1e-5},
    {F32, 3, {2, 3, 4}, 2, TT_CONTIG, false, false, ALL3, false, 1e-5},
    {F64, 3, {5, 6, 7}, 1, TT_REVERSED, true, false, ALL3, true, 1e-3},
    {F64, 3, {5, 6, 7}, 2, TT_GAPS, false, true, {true, false, true}, false, 1e-5},
    {F16, 2, {8, 64}, 1, TT_CONTIG, true, true, ALL3, false, 1e-5},
    {BF16, 3, {3, 4, 40}, 1, TT_REVERSED, true, true, {false, true, true}, true, 1e-5},
    {F32, 2, {3, 5000}, 1, TT_CONTIG, true, true, ALL3, false, 1e-5},
    {F32, 3, {3, 50, 70}, 2, TT_REVERSED, true, true, {true, true, false}, false, 1e-5},
    {F32, 2, {700, 300}, 1, TT_CONTIG, true, true, ALL3, true, 1e-5},
    {F64, 2, {500, 200}, 1, TT_TRANSPOSED, true, false, {false, true, true}, false, 1e-5},
    {F32, 3, {40, 30, 100}, 1, TT_REVERSED, false, true, {true, false, true}, true, 1e-5},
    {F32, 2, {0, 8}, 1, TT_CONTIG, true, true, ALL3, false, 1e-5},
    {F32, 1, {9}, 1, TT_CONTIG, true, true, ALL3, false, 0.5},
    {F64, 4, {2, 3, 4, 5}, 3, TT_BROADCAST, true, true, ALL3, false, 1e-5},
    /* float32 contiguous rows: the float backward path (blocks with column
     * sums, grad_input alone, column sums alone; row tails past the lanes) */
    {F32, 2, {600, 333}, 1, TT_CONTIG, true, true, ALL3, false, 1e-5},
    {F32, 2, {300, 257}, 1, TT_CONTIG, false, false, ALL3, true, 1e-5},
    {F32, 3, {20, 10, 301}, 1, TT_CONTIG, true, false, {true, false, false}, false, 1e-5},
    {F32, 2, {512, 96}, 1, TT_CONTIG, false, true, {true, false, false}, true, 1e-5},
    {F32, 2, {256, 300}, 1, TT_CONTIG, true, true, {false, true, true}, false, 1e-5},
    {F32, 3, {64, 4, 40}, 2, TT_CONTIG, true, true, ALL3, false, 1e-5},
    /* half-type contiguous rows: the forward's float32 row path (weight
     * only, bias only), and a row past HALF_ROW on the general path */
    {BF16, 2, {64, 300}, 1, TT_CONTIG, true, false, ALL3, false, 1e-5},
    {F16, 3, {5, 6, 129}, 2, TT_CONTIG, false, true, ALL3, false, 1e-5},
    {BF16, 2, {2, 5000}, 1, TT_CONTIG, true, true, ALL3, false, 1e-5},
    /* half-type contiguous rows backward: float32 copies on the float
     * backward path (blocks with column sums, grad_input alone, column sums
     * alone, no weight, 1-element rows, row tails past the lanes), and
     * strided grad_input on the general path */
    {BF16, 2, {512, 128}, 1, TT_CONTIG, true, true, ALL3, false, 1e-5},
    {F16, 2, {200, 333}, 1, TT_CONTIG, false, false, ALL3, false, 1e-5},
    {BF16, 3, {20, 10, 301}, 1, TT_CONTIG, true, false, {true, false, false}, false, 1e-5},
    {F16, 2, {256, 300}, 1, TT_CONTIG, true, true, {false, true, true}, false, 1e-5},
    {BF16, 2, {700, 1}, 1, TT_CONTIG, true, true, {true, false, false}, false, 1e-5},
    {F16, 2, {300, 257}, 1, TT_CONTIG, true, true, ALL3, true, 1e-5},
};

/* Allocates outputs for `shapes` (contiguous or with gaps) into t/v. */
static void alloc_outputs(const tpu_view_t* shapes, bool strided, tt_t* t, tpu_view_t* v) {
  for (int i = 0; i < 3; ++i) {
    if (tpu_view_is_absent(&shapes[i])) { /* a masked-off result: nothing to write */
      memset(&t[i], 0, sizeof(t[i]));
      v[i] = shapes[i];
      continue;
    }
    t[i] = tt_like(&shapes[i], strided ? TT_GAPS : TT_CONTIG);
    v[i] = t[i].view;
  }
}

static void free3(tt_t* t) {
  for (int i = 0; i < 3; ++i) tt_free(&t[i]);
}

static void compare3(const char* what, const tpu_view_t* got, const tpu_view_t* want,
                     const bool* mask) {
  for (int i = 0; i < 3; ++i)
    if (mask[i]) tt_compare(what, &got[i], &want[i], 4 * tt_tol(want[i].dtype) + 1e-12);
}

static void run_case(int index, const norm_case_t* c) {
  const tpu_op_def_t* fwd = tt_def("layer_norm");
  const tpu_op_def_t* bwd = tt_def("layer_norm_backward");
  if (!fwd || !bwd) return;
  char what[64];
  snprintf(what, sizeof(what), "case %d (%s)", index, tpu_dtype_name(c->dtype));
  const int64_t* wsizes = c->sizes + c->ndim - c->k;
  tt_t x = tt_make(c->dtype, c->ndim, c->sizes, c->layout);
  tt_t w = tt_make(c->dtype, c->k, wsizes, c->layout == TT_GAPS ? TT_GAPS : TT_CONTIG);
  tt_t b = tt_make(c->dtype, c->k, wsizes, TT_CONTIG);
  tt_t g = tt_make(c->dtype, c->ndim, c->sizes, TT_CONTIG);
  tt_fill(&x.view, -3, 5, 0);
  tt_fill(&w.view, 0.5, 1.5, 0);
  tt_fill(&b.view, -1, 1, 0);
  tt_fill(&g.view, -1, 1, 0);

  /* Forward. */
  tpu_value_t in[6] = {tt_value(&x.view), tt_value(c->weight ? &w.view : NULL),
                       tt_value(c->bias ? &b.view : NULL)};
  tpu_attr_t attrs[2] = {tt_ints(c->k, wsizes), tt_float(c->eps)};
  tpu_view_t shapes[3], got_v[3], want_v[3];
  tt_t got[3], want[3];
  tpu_node_t node = tt_node(in, 3, NULL, 0, attrs, 2);
  CHECK_OK(fwd->check(fwd, &node));
  CHECK_OK(fwd->infer(fwd, &node, shapes));
  alloc_outputs(shapes, c->strided_out, got, got_v);
  alloc_outputs(shapes, false, want, want_v);
  node.num_outputs = 3;
  node.outputs = got_v;
  CHECK_OK(tt_run(fwd->kernel, fwd, &node));
  node.outputs = want_v;
  CHECK_OK(tt_run(tpu_norm_reference, fwd, &node));
  bool all[3] = ALL3;
  compare3(what, got_v, want_v, all);

  /* Backward on the reference forward's mean and rstd. */
  tpu_value_t bin[6] = {tt_value(&g.view),      tt_value(&x.view),
                        tt_value(&want_v[1]),   tt_value(&want_v[2]),
                        tt_value(c->weight ? &w.view : NULL), tt_value(c->bias ? &b.view : NULL)};
  int64_t mask[3] = {c->mask[0], c->mask[1], c->mask[2]};
  tpu_attr_t battrs[2] = {tt_ints(c->k, wsizes), tt_ints(3, mask)};
  tpu_view_t bshapes[3], bgot_v[3], bwant_v[3];
  tt_t bgot[3], bwant[3];
  node = tt_node(bin, 6, NULL, 0, battrs, 2);
  CHECK_OK(bwd->check(bwd, &node));
  CHECK_OK(bwd->infer(bwd, &node, bshapes));
  alloc_outputs(bshapes, c->strided_out, bgot, bgot_v);
  alloc_outputs(bshapes, false, bwant, bwant_v);
  node.num_outputs = 3;
  node.outputs = bgot_v;
  CHECK_OK(tt_run(bwd->kernel, bwd, &node));
  node.outputs = bwant_v;
  CHECK_OK(tt_run(tpu_norm_reference, bwd, &node));
  snprintf(what, sizeof(what), "case %d backward (%s)", index, tpu_dtype_name(c->dtype));
  compare3(what, bgot_v, bwant_v, c->mask);

  free3(got);
  free3(want);
  free3(bgot);
  free3(bwant);
  tt_free(&x);
  tt_free(&w);
  tt_free(&b);
  tt_free(&g);
}

TEST(norm_cases) {
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) run_case((int)i, &k_cases[i]);
}

TEST(norm_semantics) {
  const tpu_op_def_t* fwd = tt_def("layer_norm");
  const tpu_op_def_t* bwd = tt_def("layer_norm_backward");
  if (!fwd || !bwd) return;
  int64_t s3[1] = {3}, s23[2] = {2, 3};
  tt_t x = tt_make(F32, 1, s3, TT_CONTIG);
  for (int i = 0; i < 3; ++i) tt_set(&x.view, i, i + 1);
  tpu_value_t in[3] = {tt_value(&x.view), tt_value(NULL), tt_value(NULL)};
  tpu_attr_t attrs[2] = {tt_ints(1, s3), tt_float(0.0)};
  tpu_view_t shapes[3], v[3];
  tt_t t[3];
  tpu_node_t node = tt_node(in, 3, NULL, 0, attrs, 2);
  CHECK_OK(fwd->infer(fwd, &node, shapes));
  CHECK(shapes[1].ndim == 1 && shapes[1].sizes[0] == 1 && shapes[2].dtype == F32);
  alloc_outputs(shapes, false, t, v);
  node.outputs = v;
  node.num_outputs = 3;
  CHECK_OK(tt_run(fwd->kernel, fwd, &node));
  CHECK_NEAR(tt_get(&v[0], 0), -1.224744871, 1e-6);
  CHECK_NEAR(tt_get(&v[0], 1), 0.0, 1e-6);
  CHECK_NEAR(tt_get(&v[1], 0), 2.0, 1e-6);
  CHECK_NEAR(tt_get(&v[2], 0), 1.224744871, 1e-6);
  free3(t);
  tt_free(&x);

  /* Metadata: mean/rstd keep the input dtype; gradients follow weight/bias. */
  tt_t h = tt_make(F16, 2, s23, TT_CONTIG), hw = tt_make(F16, 1, s3, TT_CONTIG);
  tt_t fw = tt_make(F32, 1, s3, TT_CONTIG);
  in[0] = tt_value(&h.view);
  node = tt_node(in, 3, NULL, 0, attrs, 2);
  CHECK_OK(fwd->infer(fwd, &node, shapes));
  CHECK(shapes[1].dtype == F16 && shapes[1].ndim == 2 && shapes[1].sizes[0] == 2 &&
        shapes[1].sizes[1] == 1);
  in[1] = tt_value(&fw.view); /* mixed dtypes fall back */
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_UNIMPLEMENTED);
  in[1] = tt_value(&hw.view);
  CHECK_OK(fwd->check(fwd, &node));
  node.attrs[0] = tt_ints(1, s23); /* normalized_shape [2] does not match */
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_UNIMPLEMENTED);
  node.attrs[0] = tt_ints(0, NULL);
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_UNIMPLEMENTED);
  tt_t empty_rows = tt_make(F32, 2, (int64_t[2]){3, 0}, TT_CONTIG);
  in[0] = tt_value(&empty_rows.view);
  in[1] = tt_value(NULL);
  node.attrs[0] = tt_ints(1, (int64_t[1]){0});
  CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&empty_rows);
  tt_free(&h);
  tt_free(&hw);
  tt_free(&fw);
}

/* RMS norm (_fused_rms_norm and backward): the same cases, weight only. */
static void run_rms_case(int index, const norm_case_t* c) {
  const tpu_op_def_t* fwd = tt_def("rms_norm");
  const tpu_op_def_t* bwd = tt_def("rms_norm_backward");
  if (!fwd || !bwd) return;
  char what[64];
  const int64_t* wsizes = c->sizes + c->ndim - c->k;
  tt_t x = tt_make(c->dtype, c->ndim, c->sizes, c->layout);
  tt_t w = tt_make(c->dtype, c->k, wsizes, TT_CONTIG);
  tt_t g = tt_make(c->dtype, c->ndim, c->sizes, TT_CONTIG);
  tt_fill(&x.view, -3, 5, 0);
  tt_fill(&w.view, 0.5, 1.5, 0);
  tt_fill(&g.view, -1, 1, 0);
  tpu_value_t in[2] = {tt_value(&x.view), tt_value(c->weight ? &w.view : NULL)};
  tpu_attr_t attrs[2] = {tt_ints(c->k, wsizes), index % 2 ? tt_none() : tt_float(c->eps)};
  tpu_view_t shapes[3], got_v[3], want_v[3];
  tt_t got[3], want[3];
  tpu_node_t node = tt_node(in, 2, NULL, 0, attrs, 2);
  CHECK_OK(fwd->check(fwd, &node));
  CHECK_OK(fwd->infer(fwd, &node, shapes));
  shapes[2] = shapes[1]; /* alloc_outputs allocates three */
  alloc_outputs(shapes, c->strided_out, got, got_v);
  alloc_outputs(shapes, false, want, want_v);
  node.num_outputs = 2;
  node.outputs = got_v;
  CHECK_OK(tt_run(fwd->kernel, fwd, &node));
  node.outputs = want_v;
  CHECK_OK(tt_run(tpu_norm_reference, fwd, &node));
  snprintf(what, sizeof(what), "rms case %d (%s)", index, tpu_dtype_name(c->dtype));
  bool two[3] = {true, true, false};
  compare3(what, got_v, want_v, two);
  tpu_value_t bin[4] = {tt_value(&g.view), tt_value(&x.view), tt_value(&want_v[1]),
                        tt_value(c->weight ? &w.view : NULL)};
  int64_t mask[2] = {c->mask[0], c->mask[1]};
  tpu_attr_t battrs[2] = {tt_ints(c->k, wsizes), tt_ints(2, mask)};
  tpu_view_t bshapes[3], bgot_v[3], bwant_v[3];
  tt_t bgot[3], bwant[3];
  node = tt_node(bin, 4, NULL, 0, battrs, 2);
  CHECK_OK(bwd->check(bwd, &node));
  CHECK_OK(bwd->infer(bwd, &node, bshapes));
  CHECK(tpu_view_is_absent(&bshapes[0]) == !c->mask[0]);
  CHECK(tpu_view_is_absent(&bshapes[1]) == !c->mask[1]);
  memset(&bshapes[2], 0, sizeof(bshapes[2]));
  bshapes[2].dtype = TPU_DTYPE_INVALID;
  alloc_outputs(bshapes, c->strided_out, bgot, bgot_v);
  alloc_outputs(bshapes, false, bwant, bwant_v);
  node.num_outputs = 2;
  node.outputs = bgot_v;
  CHECK_OK(tt_run(bwd->kernel, bwd, &node));
  node.outputs = bwant_v;
  CHECK_OK(tt_run(tpu_norm_reference, bwd, &node));
  snprintf(what, sizeof(what), "rms case %d backward (%s)", index, tpu_dtype_name(c->dtype));
  bool bm[3] = {c->mask[0], c->mask[1], false};
  compare3(what, bgot_v, bwant_v, bm);
  free3(got);
  free3(want);
  free3(bgot);
  free3(bwant);
  tt_free(&x);
  tt_free(&w);
  tt_free(&g);
}

TEST(rms_norm_cases) {
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i)
    run_rms_case((int)i, &k_cases[i]);
}
