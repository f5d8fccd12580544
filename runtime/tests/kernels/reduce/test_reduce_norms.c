/* test_reduce_norms.c — the reduce family's norm-like and NaN-aware rows
 * (vector norms of every order, nansum, count_nonzero, logsumexp, aminmax) against
 * the reference kernel, over dtypes, orders, row/column/split accumulation,
 * strided and broadcast inputs and strided outputs; plus hand-computed
 * values for NaN, infinities and the empty-reduction errors.
 */
#include "kernels/reduce/reduce.h"

#include "kernel_test_util.h"

enum { DIM_NONE = 0, DIM_INT, DIM_INTS };

typedef struct r2_case {
  const char* op;
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t sizes[3];
  tt_layout_t layout;
  int dim_kind;
  int32_t ndims;
  int64_t dims[3];
  bool keepdim;
  double ord; /* NAN: None */
  tpu_dtype_t dtype_arg;
  double nan_rate;
  bool strided_out;
} r2_case_t;

#define F32 TPU_DTYPE_F32
#define F64 TPU_DTYPE_F64
#define F16 TPU_DTYPE_F16
#define BF16 TPU_DTYPE_BF16
#define I64 TPU_DTYPE_I64
#define I32 TPU_DTYPE_I32
#define U8 TPU_DTYPE_U8
#define BOOL TPU_DTYPE_BOOL
#define NODT TPU_DTYPE_INVALID

static const r2_case_t k_cases[] = {
    {"nansum", F32, 3, {3, 4, 5}, TT_CONTIG, DIM_INTS, 1, {1}, false, NAN, NODT, 0.1, false},
    {"nansum", F64, 2, {300, 70}, TT_TRANSPOSED, DIM_INTS, 1, {0}, true, NAN, NODT, 0.05, true},
    {"nansum", BF16, 1, {100000}, TT_CONTIG, DIM_NONE, 0, {0}, false, NAN, F32, 0.01, false},
    {"nansum", I32, 2, {9, 31}, TT_REVERSED, DIM_INTS, 1, {1}, false, NAN, NODT, 0, false},
    {"nansum", BOOL, 2, {9, 31}, TT_CONTIG, DIM_INTS, 0, {0}, false, NAN, NODT, 0, false},
    {"count_nonzero", F32, 2, {20, 30}, TT_CONTIG, DIM_INTS, 1, {1}, false, NAN, NODT, 0.1, false},
    {"count_nonzero", I64, 3, {4, 5, 6}, TT_GAPS, DIM_INTS, 2, {0, 2}, false, NAN, NODT, 0, true},
    {"count_nonzero", BOOL, 2, {70000, 2}, TT_CONTIG, DIM_INT, 1, {0}, false, NAN, NODT, 0, false},
    {"count_nonzero", F16, 2, {7, 9}, TT_BROADCAST, DIM_NONE, 0, {0}, false, NAN, NODT, 0, false},
    {"linalg_vector_norm", F32, 2, {17, 300}, TT_CONTIG, DIM_INTS, 1, {1}, false, NAN, NODT, 0, false},
    {"linalg_vector_norm", F32, 2, {300, 17}, TT_CONTIG, DIM_INTS, 1, {0}, true, 1, NODT, 0, true},
    {"linalg_vector_norm", F64, 3, {4, 5, 6}, TT_REVERSED, DIM_INTS, 2, {0, 2}, false, 0, NODT, 0, false},
    {"linalg_vector_norm", F64, 2, {9, 40}, TT_GAPS, DIM_INTS, 1, {1}, false, INFINITY, NODT, 0.02, false},
    {"linalg_vector_norm", F32, 2, {9, 40}, TT_TRANSPOSED, DIM_INTS, 1, {0}, false, -INFINITY, NODT, 0, false},
    {"linalg_vector_norm", F64, 2, {9, 40}, TT_CONTIG, DIM_NONE, 0, {0}, false, 3.5, NODT, 0, false},
    {"linalg_vector_norm", F32, 2, {9, 40}, TT_CONTIG, DIM_INTS, 1, {1}, false, -1.5, NODT, 0, false},
    {"linalg_vector_norm", BF16, 2, {33, 12}, TT_CONTIG, DIM_INTS, 1, {1}, true, 2, F32, 0, false},
    {"linalg_vector_norm", F16, 1, {200001}, TT_CONTIG, DIM_NONE, 0, {0}, false, 2, F64, 0, false},
    {"linalg_vector_norm", F32, 2, {7, 33}, TT_BROADCAST, DIM_INTS, 1, {0}, false, 2, NODT, 0.01, false},
    {"norm", F32, 3, {3, 4, 5}, TT_CONTIG, DIM_INTS, 1, {-1}, false, 3, NODT, 0, false},
    {"norm", F64, 3, {3, 4, 5}, TT_CONTIG, DIM_INTS, 1, {1}, true, NAN, NODT, 0, false},
    {"norm_all", F32, 2, {30, 40}, TT_REVERSED, DIM_NONE, 0, {0}, false, 1, NODT, 0, false},
    {"logsumexp", F32, 2, {17, 3000}, TT_CONTIG, DIM_INTS, 1, {1}, false, NAN, NODT, 0, false},
    {"logsumexp", F32, 2, {300, 17}, TT_CONTIG, DIM_INTS, 1, {0}, true, NAN, NODT, 0, true},
    {"logsumexp", F64, 3, {4, 5, 6}, TT_REVERSED, DIM_INTS, 2, {0, 2}, false, NAN, NODT, 0.02, false},
    {"logsumexp", F64, 1, {150000}, TT_CONTIG, DIM_INTS, 1, {0}, false, NAN, NODT, 0, false},
    {"logsumexp", BF16, 2, {33, 12}, TT_GAPS, DIM_INTS, 1, {1}, false, NAN, NODT, 0.02, false},
    {"logsumexp", I32, 2, {8, 9}, TT_CONTIG, DIM_INTS, 1, {1}, false, NAN, NODT, 0, false},
    {"aminmax", F32, 2, {17, 300}, TT_CONTIG, DIM_INT, 1, {1}, false, NAN, NODT, 0.005, false},
    {"aminmax", F64, 2, {300, 17}, TT_TRANSPOSED, DIM_INT, 1, {0}, true, NAN, NODT, 0.005, true},
    {"aminmax", I32, 3, {5, 6, 7}, TT_GAPS, DIM_NONE, 0, {0}, false, NAN, NODT, 0, false},
    {"aminmax", BOOL, 2, {5, 6}, TT_CONTIG, DIM_INT, 1, {0}, false, NAN, NODT, 0, false},
    {"aminmax", F16, 1, {140000}, TT_CONTIG, DIM_NONE, 0, {0}, false, NAN, NODT, 0, false},
    {"aminmax", U8, 2, {40, 70}, TT_CONTIG, DIM_INT, 1, {1}, true, NAN, NODT, 0, false},
};

static int32_t case_attrs(const tpu_op_def_t* def, const r2_case_t* c, tpu_attr_t* attrs) {
  int32_t n = tpu_spec_count(def->attrs), i;
  for (int32_t k = 0; k < n; ++k) attrs[k] = tt_none();
  if ((i = tpu_spec_index(def->attrs, "dim")) >= 0)
    attrs[i] = c->dim_kind == DIM_INT    ? tt_int(c->dims[0])
               : c->dim_kind == DIM_INTS ? tt_ints(c->ndims, c->dims)
                                         : tt_none();
  if ((i = tpu_spec_index(def->attrs, "keepdim")) >= 0) attrs[i] = tt_bool(c->keepdim);
  if ((i = tpu_spec_index(def->attrs, "dtype")) >= 0 && c->dtype_arg != NODT)
    attrs[i] = tt_dtype(c->dtype_arg);
  i = tpu_spec_index(def->attrs, "ord");
  if (i < 0) i = tpu_spec_index(def->attrs, "p");
  if (i >= 0 && !isnan(c->ord)) attrs[i] = tt_float(c->ord);
  return n;
}

static void run_case(int index, const r2_case_t* c) {
  const tpu_op_def_t* def = tt_def(c->op);
  if (!def) return;
  char what[96];
  snprintf(what, sizeof(what), "case %d (%s %s)", index, c->op, tpu_dtype_name(c->dtype));
  tt_t in = tt_make(c->dtype, c->ndim, c->sizes, c->layout);
  if (c->dtype == U8 || c->dtype == BOOL)
    tt_fill(&in.view, 0, c->dtype == BOOL ? 1.6 : 40, 0);
  else if (!strcmp(c->op, "count_nonzero") || (!isnan(c->ord) && c->ord == 0))
    tt_fill(&in.view, -1.2, 1.2, c->nan_rate); /* many zeros for integers */
  else
    tt_fill(&in.view, -5, 5, c->nan_rate);
  if (!strcmp(c->op, "count_nonzero") && tpu_dtype_is_floating(c->dtype))
    for (int64_t k = 0; k < tpu_view_numel(&in.view); k += 3) tt_set(&in.view, k, 0.0);
  tpu_value_t inputs[1] = {tt_value(&in.view)};
  tpu_attr_t attrs[TPU_MAX_ATTRS];
  int32_t na = case_attrs(def, c, attrs);
  int32_t nout = tpu_spec_count(def->outputs);
  tpu_view_t shapes[2];
  tpu_node_t node = tt_node(inputs, 1, NULL, 0, attrs, na);
  CHECK_OK(def->check(def, &node));
  CHECK_OK(def->infer(def, &node, shapes));
  tt_t got[2], want[2];
  tpu_view_t got_v[2], want_v[2];
  for (int32_t o = 0; o < nout; ++o) {
    got[o] = tt_like(&shapes[o], c->strided_out ? TT_GAPS : TT_CONTIG);
    want[o] = tt_like(&shapes[o], TT_CONTIG);
    got_v[o] = got[o].view;
    want_v[o] = want[o].view;
  }
  node.outputs = got_v;
  node.num_outputs = nout;
  CHECK_OK(tt_run(def->kernel, def, &node));
  node.outputs = want_v;
  CHECK_OK(tt_run(tpu_reduce_reference, def, &node));
  for (int32_t o = 0; o < nout; ++o) {
    /* logsumexp in float32 takes exp in float32 (vm_expf). */
    double tol = tt_tol(shapes[o].dtype);
    if (!strcmp(c->op, "logsumexp") && shapes[o].dtype == F32) tol = 1e-5;
    tt_compare(what, &got_v[o], &want_v[o], tol);
    tt_free(&got[o]);
    tt_free(&want[o]);
  }
  tt_free(&in);
}

TEST(reduce_norms_cases) {
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) run_case((int)i, &k_cases[i]);
}

/* One output value of `op` over a 1-d float64 input of n values, with the
 * given order (NAN: None), reducing everything. */
static double run_1d(const char* op, const double* values, int64_t n, double ord, int o) {
  const tpu_op_def_t* def = tt_def(op);
  if (!def) return NAN;
  tt_t in = tt_make(F64, 1, &n, TT_CONTIG);
  for (int64_t k = 0; k < n; ++k) tt_set(&in.view, k, values[k]);
  tpu_value_t inputs[1] = {tt_value(&in.view)};
  r2_case_t c = {op, F64, 1, {n}, TT_CONTIG, DIM_NONE, 0, {0}, false, ord, NODT, 0, false};
  if (!strcmp(op, "logsumexp")) c.dim_kind = DIM_INTS, c.ndims = 1;
  tpu_attr_t attrs[TPU_MAX_ATTRS];
  int32_t na = case_attrs(def, &c, attrs);
  tpu_view_t shapes[2], views[2];
  tt_t outs[2];
  tpu_node_t node = tt_node(inputs, 1, NULL, 0, attrs, na);
  CHECK_OK(def->infer(def, &node, shapes));
  int32_t nout = tpu_spec_count(def->outputs);
  for (int32_t i = 0; i < nout; ++i) outs[i] = tt_like(&shapes[i], TT_CONTIG), views[i] = outs[i].view;
  node.outputs = views;
  node.num_outputs = nout;
  CHECK_OK(tt_run(def->kernel, def, &node));
  double r = tt_get(&views[o], 0);
  for (int32_t i = 0; i < nout; ++i) tt_free(&outs[i]);
  tt_free(&in);
  return r;
}

TEST(reduce_norms_semantics) {
  const double v[] = {3, -4, 0, NAN}, w[] = {3, -4, 0, 12};
  CHECK(run_1d("nansum", v, 4, NAN, 0) == -1);
  CHECK(run_1d("count_nonzero", v, 4, NAN, 0) == 3); /* NaN counts */
  CHECK(run_1d("linalg_vector_norm", w, 4, 2, 0) == 13);
  CHECK(run_1d("linalg_vector_norm", w, 4, 1, 0) == 19);
  CHECK(run_1d("linalg_vector_norm", w, 4, 0, 0) == 3);
  CHECK(run_1d("linalg_vector_norm", w, 4, INFINITY, 0) == 12);
  CHECK(run_1d("linalg_vector_norm", w, 4, -INFINITY, 0) == 0);
  CHECK(run_1d("linalg_vector_norm", w, 4, -1, 0) == 0); /* 1/inf */
  CHECK(isnan(run_1d("linalg_vector_norm", v, 4, INFINITY, 0)));
  CHECK(isnan(run_1d("linalg_vector_norm", v, 4, 2, 0)));
  CHECK(run_1d("aminmax", w, 4, NAN, 0) == -4 && run_1d("aminmax", w, 4, NAN, 1) == 12);
  CHECK(isnan(run_1d("aminmax", v, 4, NAN, 0)) && isnan(run_1d("aminmax", v, 4, NAN, 1)));
  const double big[] = {1000, 1000}, infs[] = {-INFINITY, -INFINITY}, pinf[] = {1, INFINITY};
  CHECK(fabs(run_1d("logsumexp", big, 2, NAN, 0) - (1000 + log(2.0))) < 1e-12);
  CHECK(run_1d("logsumexp", infs, 2, NAN, 0) == -INFINITY);
  CHECK(run_1d("logsumexp", pinf, 2, NAN, 0) == INFINITY);
  CHECK(isnan(run_1d("logsumexp", v, 4, NAN, 0)));
  /* Empty reductions without an identity fall back (PyTorch raises). */
  const tpu_op_def_t* def = tt_def("linalg_vector_norm");
  int64_t zero = 0;
  tt_t e = tt_make(F32, 1, &zero, TT_CONTIG);
  tpu_value_t in = tt_value(&e.view);
  tpu_attr_t attrs[4] = {tt_float(INFINITY), tt_none(), tt_bool(false), tt_none()};
  tpu_node_t node = tt_node(&in, 1, NULL, 0, attrs, 4);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  attrs[0] = tt_float(2);
  node = tt_node(&in, 1, NULL, 0, attrs, 4);
  CHECK_OK(def->check(def, &node));
  def = tt_def("aminmax");
  tpu_attr_t mm[2] = {tt_none(), tt_bool(false)};
  node = tt_node(&in, 1, NULL, 0, mm, 2);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  /* Integer inputs to norms fall back (PyTorch raises). */
  int64_t three = 3;
  tt_t ints = tt_make(I64, 1, &three, TT_CONTIG);
  tpu_value_t iv = tt_value(&ints.view);
  def = tt_def("linalg_vector_norm");
  node = tt_node(&iv, 1, NULL, 0, attrs, 4);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&ints);
  tt_free(&e);
}
