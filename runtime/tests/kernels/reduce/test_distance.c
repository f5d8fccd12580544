/* test_distance.c — the distance family (cdist / pdist forward and
 * backward) against its reference: orders 0, 1, 2, inf, p < 2 and p > 2,
 * float32 and float64, broadcast batch dims, transposed and strided inputs,
 * strided outputs, empty shapes; and the fallback for what PyTorch rejects.
 */
#include "kernels/reduce/distance.h"

#include "kernel_test_util.h"

typedef struct dist_case {
  const char* op;
  tpu_dtype_t dtype;
  int32_t nd1, nd2;
  int64_t s1[4], s2[4];
  tt_layout_t layout;
  double p;
  bool strided_out;
} dist_case_t;

#define F32 TPU_DTYPE_F32
#define F64 TPU_DTYPE_F64

static const dist_case_t k_cases[] = {
    {"cdist_forward", F32, 2, 2, {7, 5}, {9, 5}, TT_CONTIG, 2, false},
    {"cdist_forward", F64, 2, 2, {70, 33}, {130, 33}, TT_TRANSPOSED, 1, true},
    {"cdist_forward", F32, 3, 2, {3, 6, 4}, {8, 4}, TT_CONTIG, 0, false},
    {"cdist_forward", F64, 3, 3, {1, 6, 4}, {3, 8, 4}, TT_GAPS, INFINITY, false},
    {"cdist_forward", F64, 2, 2, {10, 6}, {11, 6}, TT_REVERSED, 1.5, false},
    {"cdist_forward", F32, 2, 2, {10, 6}, {11, 6}, TT_CONTIG, 3, false},
    {"cdist_forward", F32, 2, 2, {0, 6}, {11, 6}, TT_CONTIG, 2, false},
    {"cdist_backward", F64, 2, 2, {7, 5}, {9, 5}, TT_CONTIG, 2, false},
    {"cdist_backward", F32, 3, 3, {2, 7, 5}, {2, 9, 5}, TT_TRANSPOSED, 1, true},
    {"cdist_backward", F64, 3, 2, {2, 7, 5}, {9, 5}, TT_CONTIG, INFINITY, false},
    {"cdist_backward", F64, 2, 2, {7, 5}, {9, 5}, TT_GAPS, 0.5, false},
    {"cdist_backward", F64, 2, 2, {7, 5}, {9, 5}, TT_CONTIG, 1.5, false},
    {"cdist_backward", F32, 2, 2, {7, 5}, {9, 5}, TT_CONTIG, 3, false},
    {"cdist_backward", F64, 2, 2, {7, 5}, {9, 5}, TT_CONTIG, 0, false},
    {"pdist_forward", F32, 2, 0, {9, 5}, {0}, TT_CONTIG, 2, false},
    {"pdist_forward", F64, 2, 0, {20, 3}, {0}, TT_TRANSPOSED, 1, true},
    {"pdist_forward", F64, 2, 0, {6, 3}, {0}, TT_CONTIG, INFINITY, false},
    {"pdist_forward", F64, 2, 0, {1, 3}, {0}, TT_CONTIG, 2, false},
    {"pdist_backward", F64, 2, 0, {9, 5}, {0}, TT_CONTIG, 2, false},
    {"pdist_backward", F32, 2, 0, {9, 5}, {0}, TT_GAPS, 1, true},
    {"pdist_backward", F64, 2, 0, {9, 5}, {0}, TT_CONTIG, 2.5, false},
};

static void run_case(int index, const dist_case_t* c) {
  const tpu_op_def_t* def = tt_def(c->op);
  if (!def) return;
  char what[96];
  snprintf(what, sizeof(what), "case %d (%s %s p=%g)", index, c->op, tpu_dtype_name(c->dtype),
           c->p);
  bool pd = c->nd2 == 0, bwd = strstr(c->op, "backward") != NULL;
  tt_t x1 = tt_make(c->dtype, c->nd1, c->s1, c->layout);
  tt_t x2 = pd ? x1 : tt_make(c->dtype, c->nd2, c->s2, TT_CONTIG);
  /* Values on a coarse grid: equal coordinates and zero distances occur. */
  tt_fill_ints(&x1.view, 1, -3, 3);
  if (!pd) tt_fill_ints(&x2.view, 2, -3, 3);
  tt_t g = {0}, d = {0};
  tpu_value_t inputs[4];
  int32_t ni = 0;
  tpu_attr_t attrs[2] = {tt_float(c->p), tt_none()};
  if (bwd) {
    /* The forward's shape and values first. */
    const tpu_op_def_t* fdef = tt_def(pd ? "pdist_forward" : "cdist_forward");
    tpu_value_t fin[2] = {tt_value(&x1.view), tt_value(&x2.view)};
    tpu_view_t fshape;
    tpu_node_t fn = tt_node(fin, pd ? 1 : 2, NULL, 0, attrs, pd ? 1 : 2);
    CHECK_OK(fdef->infer(fdef, &fn, &fshape));
    d = tt_like(&fshape, TT_CONTIG);
    g = tt_like(&fshape, TT_GAPS);
    tt_fill(&g.view, -2, 2, 0);
    fn.outputs = &d.view;
    fn.num_outputs = 1;
    CHECK_OK(tt_run(fdef->kernel, fdef, &fn));
    inputs[ni++] = tt_value(&g.view);
  }
  inputs[ni++] = tt_value(&x1.view);
  if (!pd) inputs[ni++] = tt_value(&x2.view);
  if (bwd) inputs[ni++] = tt_value(&d.view);
  int32_t na = tpu_spec_count(def->attrs);
  tpu_view_t shape;
  tpu_node_t node = tt_node(inputs, ni, NULL, 0, attrs, na);
  CHECK_OK(def->check(def, &node));
  CHECK_OK(def->infer(def, &node, &shape));
  tt_t got = tt_like(&shape, c->strided_out ? TT_GAPS : TT_CONTIG), want = tt_like(&shape, TT_CONTIG);
  node.outputs = &got.view;
  node.num_outputs = 1;
  CHECK_OK(tt_run(def->kernel, def, &node));
  node.outputs = &want.view;
  CHECK_OK(tt_run(tpu_distance_reference, def, &node));
  tt_compare(what, &got.view, &want.view, c->dtype == F32 ? 1e-4 : 1e-10);
  tt_free(&got);
  tt_free(&want);
  if (bwd) tt_free(&g), tt_free(&d);
  tt_free(&x1);
  if (!pd) tt_free(&x2);
}

TEST(distance_cases) {
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) run_case((int)i, &k_cases[i]);
}

TEST(distance_values_and_fallbacks) {
  /* cdist([[0,0]], [[3,4]]) = 5 (p=2), 7 (p=1), 4 (inf), 2 (p=0). */
  const tpu_op_def_t* def = tt_def("cdist_forward");
  int64_t s[2] = {1, 2};
  tt_t a = tt_make(F64, 2, s, TT_CONTIG), b = tt_make(F64, 2, s, TT_CONTIG), o = tt_make(F64, 2, (int64_t[]){1, 1}, TT_CONTIG);
  tt_set(&a.view, 0, 0), tt_set(&a.view, 1, 0), tt_set(&b.view, 0, 3), tt_set(&b.view, 1, 4);
  tpu_value_t in[2] = {tt_value(&a.view), tt_value(&b.view)};
  const double ps[4] = {2, 1, INFINITY, 0}, want[4] = {5, 7, 4, 2};
  for (int i = 0; i < 4; ++i) {
    tpu_attr_t attrs[2] = {tt_float(ps[i]), tt_none()};
    tpu_node_t node = tt_node(in, 2, &o.view, 1, attrs, 2);
    CHECK_OK(tt_run(def->kernel, def, &node));
    CHECK(tt_get(&o.view, 0) == want[i]);
  }
  /* Negative p, integer or mismatched dtypes, mismatched columns: fall back. */
  tpu_attr_t neg[2] = {tt_float(-1), tt_none()};
  tpu_node_t node = tt_node(in, 2, NULL, 0, neg, 2);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  tt_t ia = tt_make(TPU_DTYPE_I64, 2, s, TT_CONTIG), c3 = tt_make(F64, 2, (int64_t[]){1, 3}, TT_CONTIG);
  tpu_attr_t two[2] = {tt_float(2), tt_none()};
  tpu_value_t bad[2] = {tt_value(&ia.view), tt_value(&ia.view)};
  node = tt_node(bad, 2, NULL, 0, two, 2);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  tpu_value_t cols[2] = {tt_value(&a.view), tt_value(&c3.view)};
  node = tt_node(cols, 2, NULL, 0, two, 2);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&a), tt_free(&b), tt_free(&o), tt_free(&ia), tt_free(&c3);
}

/* ---- renorm and histc (the renorm_histc family) ------------------------------- */
#include "kernels/reduce/renorm_histc.h"

typedef struct rh_case {
  const char* op;
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t sizes[3];
  tt_layout_t layout;
  double a, b, c; /* renorm: p, dim, maxnorm; histc: bins, min, max */
  bool strided_out;
} rh_case_t;

static const rh_case_t k_rh_cases[] = {
    {"renorm", F32, 2, {6, 7}, TT_CONTIG, 2, 0, 5, false},
    {"renorm", F64, 3, {4, 5, 6}, TT_TRANSPOSED, 1, 1, 10, true},
    {"renorm", TPU_DTYPE_BF16, 3, {4, 5, 6}, TT_GAPS, INFINITY, -1, 2, false},
    {"renorm", TPU_DTYPE_F16, 2, {3, 300}, TT_REVERSED, 3, 0, 8, false},
    {"renorm", F32, 2, {50, 3000}, TT_CONTIG, 2, 0, 30, false},
    {"histc", F32, 2, {30, 40}, TT_CONTIG, 10, -2, 2, false},
    {"histc", F64, 2, {300, 400}, TT_TRANSPOSED, 37, 0, 0, true},
    {"histc", TPU_DTYPE_BF16, 1, {1000}, TT_CONTIG, 7, -1, 3, false},
    {"histc", TPU_DTYPE_F16, 2, {30, 41}, TT_GAPS, 100, 0, 0, false},
};

TEST(renorm_histc_cases) {
  for (size_t i = 0; i < sizeof(k_rh_cases) / sizeof(k_rh_cases[0]); ++i) {
    const rh_case_t* c = &k_rh_cases[i];
    const tpu_op_def_t* def = tt_def(c->op);
    if (!def) continue;
    char what[64];
    snprintf(what, sizeof(what), "case %zu (%s %s)", i, c->op, tpu_dtype_name(c->dtype));
    tt_t in = tt_make(c->dtype, c->ndim, c->sizes, c->layout);
    tt_fill(&in.view, -3, 3, 0);
    bool rn = !strcmp(c->op, "renorm");
    tpu_attr_t attrs[3] = {rn ? tt_float(c->a) : tt_int((int64_t)c->a),
                           rn ? tt_int((int64_t)c->b) : tt_float(c->b), tt_float(c->c)};
    tpu_value_t v = tt_value(&in.view);
    tpu_node_t node = tt_node(&v, 1, NULL, 0, attrs, 3);
    tpu_view_t shape;
    CHECK_OK(def->check(def, &node));
    CHECK_OK(def->infer(def, &node, &shape));
    tt_t got = tt_like(&shape, c->strided_out ? TT_GAPS : TT_CONTIG), want = tt_like(&shape, TT_CONTIG);
    node.outputs = &got.view;
    node.num_outputs = 1;
    CHECK_OK(tt_run(def->kernel, def, &node));
    node.outputs = &want.view;
    CHECK_OK(tt_run(tpu_renorm_histc_reference, def, &node));
    tt_compare(what, &got.view, &want.view, rn ? tt_tol(c->dtype) : 0);
    if (!rn) { /* every element lands in a bin when the range is the data's */
      double total = 0;
      for (int64_t b = 0; b < shape.sizes[0]; ++b) total += tt_get(&got.view, b);
      if (c->b == c->c) CHECK(total == (double)tpu_view_numel(&in.view));
    }
    tt_free(&got), tt_free(&want), tt_free(&in);
  }
}

TEST(renorm_histc_values_and_fallbacks) {
  /* histc([0, 1, 2, 3, 4, NaN, 9], bins=4, 0, 4) = [1, 1, 1, 2]. */
  const tpu_op_def_t* def = tt_def("histc");
  int64_t n = 7, four = 4;
  tt_t in = tt_make(F32, 1, &n, TT_CONTIG), out = tt_make(F32, 1, &four, TT_CONTIG);
  const double xs[7] = {0, 1, 2, 3, 4, NAN, 9};
  for (int64_t k = 0; k < n; ++k) tt_set(&in.view, k, xs[k]);
  tpu_value_t v = tt_value(&in.view);
  tpu_attr_t attrs[3] = {tt_int(4), tt_float(0), tt_float(4)};
  tpu_node_t node = tt_node(&v, 1, &out.view, 1, attrs, 3);
  CHECK_OK(tt_run(def->kernel, def, &node));
  CHECK(tt_get(&out.view, 0) == 1 && tt_get(&out.view, 1) == 1 && tt_get(&out.view, 2) == 1 &&
        tt_get(&out.view, 3) == 2);
  /* min > max, bins <= 0, integer input: PyTorch raises (fall back). */
  tpu_attr_t bad[3] = {tt_int(4), tt_float(5), tt_float(4)};
  node = tt_node(&v, 1, NULL, 0, bad, 3);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  bad[0] = tt_int(0), bad[1] = tt_float(0);
  node = tt_node(&v, 1, NULL, 0, bad, 3);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  /* renorm: p <= 0 or maxnorm < 0 fall back. */
  def = tt_def("renorm");
  tpu_attr_t rb[3] = {tt_float(0), tt_int(0), tt_float(1)};
  node = tt_node(&v, 1, NULL, 0, rb, 3);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  rb[0] = tt_float(2), rb[2] = tt_float(-1);
  node = tt_node(&v, 1, NULL, 0, rb, 3);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&in), tt_free(&out);
}
