/* test_reduce.c — the reduction family against its reference kernel.
 *
 * reduce_cases: a table of (op, dtype, shape, layout, dims, keepdim, dtype
 * argument, correction) run through infer, the optimised kernel and the
 * reference, outputs compared element-wise. The shapes cover row and column
 * accumulation, split (chunked) reductions, broadcast, transposed and
 * sliced inputs, strided outputs, empty and 0-dim tensors.
 * The other tests pin PyTorch's semantics with hand-computed values (wrap-
 * around, NaN, ties, output dtypes) and the fallback/error behaviour.
 */
#include "kernels/reduce/reduce.h"

#include "kernel_test_util.h"

enum { DIM_NONE = 0, DIM_INT, DIM_INTS };

typedef struct reduce_case {
  const char* op;
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t sizes[4];
  tt_layout_t layout;
  int dim_kind;
  int32_t ndims;
  int64_t dims[4];
  bool keepdim;
  tpu_dtype_t dtype_arg; /* TPU_DTYPE_INVALID: None */
  double correction;     /* NAN: None */
  double nan_rate;
  bool strided_out;
} reduce_case_t;

#define F32 TPU_DTYPE_F32
#define F64 TPU_DTYPE_F64
#define F16 TPU_DTYPE_F16
#define BF16 TPU_DTYPE_BF16
#define I64 TPU_DTYPE_I64
#define I32 TPU_DTYPE_I32
#define NONE_DT TPU_DTYPE_INVALID
#define BOOL TPU_DTYPE_BOOL
#define U8 TPU_DTYPE_U8
#define I8 TPU_DTYPE_I8
#define I16 TPU_DTYPE_I16

static const reduce_case_t k_cases[] = {
    /* op, dtype, ndim, sizes, layout, dim kind, ndims, dims, keepdim, dtype, corr, nan, strided */
    {"sum", F32, 3, {3, 4, 5}, TT_CONTIG, DIM_INTS, 1, {1}, false, NONE_DT, NAN, 0, false},
    {"sum", F32, 3, {3, 4, 5}, TT_CONTIG, DIM_INTS, 2, {0, 2}, true, NONE_DT, NAN, 0, false},
    {"sum", F32, 3, {3, 4, 5}, TT_CONTIG, DIM_INTS, 0, {0}, false, NONE_DT, NAN, 0, false},
    {"sum", F32, 3, {3, 4, 5}, TT_REVERSED, DIM_INTS, 1, {-1}, false, NONE_DT, NAN, 0, true},
    {"sum", F64, 3, {6, 5, 40}, TT_GAPS, DIM_INTS, 2, {2, 0}, false, NONE_DT, NAN, 0, false},
    {"sum", F32, 2, {7, 33}, TT_BROADCAST, DIM_INTS, 1, {0}, false, NONE_DT, NAN, 0, false},
    {"sum", F32, 2, {7, 33}, TT_BROADCAST, DIM_INTS, 1, {1}, true, NONE_DT, NAN, 0, false},
    {"sum", I32, 2, {9, 31}, TT_CONTIG, DIM_INTS, 1, {1}, false, NONE_DT, NAN, 0, false},
    {"sum", BOOL, 2, {9, 31}, TT_REVERSED, DIM_INTS, 1, {0}, false, NONE_DT, NAN, 0, false},
    {"sum", U8, 2, {9, 31}, TT_CONTIG, DIM_INTS, 1, {1}, false, F16, NAN, 0, false},
    {"sum", F16, 2, {64, 33}, TT_CONTIG, DIM_INTS, 1, {0}, false, NONE_DT, NAN, 0, true},
    {"sum", BF16, 2, {64, 33}, TT_CONTIG, DIM_INTS, 1, {1}, false, F32, NAN, 0, false},
    {"sum", F32, 2, {300, 700}, TT_CONTIG, DIM_INTS, 1, {0}, false, NONE_DT, NAN, 0, false},
    {"sum", F32, 2, {4, 70000}, TT_CONTIG, DIM_INTS, 1, {1}, false, NONE_DT, NAN, 0, false},
    {"sum", F32, 2, {70000, 20}, TT_CONTIG, DIM_INTS, 1, {0}, true, NONE_DT, NAN, 0, true},
    /* the column-sum fast path (reduce_cols.c): bias-gradient shapes, column
     * tails, a reduced block of two dims, a middle block, size-1 dims inside
     * the block, row chunks, several column tiles, half types, mean */
    {"sum", F32, 2, {512, 128}, TT_CONTIG, DIM_INTS, 1, {0}, false, NONE_DT, NAN, 0, false},
    {"sum", F32, 3, {3, 70, 131}, TT_CONTIG, DIM_INTS, 2, {0, 1}, true, NONE_DT, NAN, 0, false},
    {"sum", F32, 3, {5, 200, 40}, TT_CONTIG, DIM_INTS, 1, {1}, false, NONE_DT, NAN, 0, false},
    {"sum", F32, 4, {3, 1, 90, 21}, TT_CONTIG, DIM_INTS, 2, {0, 2}, false, NONE_DT, NAN, 0, false},
    {"sum", F32, 2, {9001, 17}, TT_CONTIG, DIM_INTS, 1, {0}, false, NONE_DT, NAN, 0.01, false},
    {"sum", F32, 2, {67, 2500}, TT_CONTIG, DIM_INTS, 1, {-2}, false, NONE_DT, NAN, 0, false},
    {"sum", BF16, 2, {130, 50}, TT_CONTIG, DIM_INTS, 1, {0}, false, NONE_DT, NAN, 0, false},
    {"sum", F16, 3, {6, 33, 19}, TT_CONTIG, DIM_INTS, 2, {0, 1}, true, NONE_DT, NAN, 0, false},
    {"mean", F32, 2, {257, 100}, TT_CONTIG, DIM_INTS, 1, {0}, false, NONE_DT, NAN, 0, false},
    {"mean", BF16, 3, {4, 300, 24}, TT_CONTIG, DIM_INTS, 1, {1}, true, NONE_DT, NAN, 0, false},
    {"sum", I64, 3, {50, 40, 70}, TT_REVERSED, DIM_INTS, 2, {0, 1}, false, NONE_DT, NAN, 0, false},
    {"sum", F32, 2, {0, 3}, TT_CONTIG, DIM_INTS, 1, {0}, false, NONE_DT, NAN, 0, false},
    {"sum", F32, 2, {3, 0}, TT_CONTIG, DIM_INTS, 1, {0}, false, NONE_DT, NAN, 0, false},
    {"sum", F32, 0, {0}, TT_CONTIG, DIM_INTS, 1, {0}, true, NONE_DT, NAN, 0, false},
    {"sum_all", F32, 2, {5, 6}, TT_CONTIG, DIM_NONE, 0, {0}, false, NONE_DT, NAN, 0, false},
    {"sum_all", I8, 2, {5, 6}, TT_GAPS, DIM_NONE, 0, {0}, false, F64, NAN, 0, false},
    {"sum_all", F64, 1, {200001}, TT_CONTIG, DIM_NONE, 0, {0}, false, NONE_DT, NAN, 0, false},
    {"mean", F32, 3, {3, 4, 5}, TT_CONTIG, DIM_INTS, 1, {1}, false, NONE_DT, NAN, 0, false},
    {"mean", F16, 3, {3, 4, 5}, TT_REVERSED, DIM_INTS, 2, {0, 2}, true, NONE_DT, NAN, 0, false},
    {"mean", I32, 2, {8, 9}, TT_CONTIG, DIM_INTS, 1, {0}, false, F32, NAN, 0, false},
    {"mean", F32, 2, {0, 4}, TT_CONTIG, DIM_INTS, 1, {0}, false, NONE_DT, NAN, 0, false},
    {"mean_all", F64, 1, {131072}, TT_GAPS, DIM_NONE, 0, {0}, false, NONE_DT, NAN, 0, false},
    {"mean_all", BF16, 2, {17, 19}, TT_CONTIG, DIM_NONE, 0, {0}, false, F32, NAN, 0, false},
    {"prod", F32, 2, {4, 5}, TT_CONTIG, DIM_INT, 1, {1}, false, NONE_DT, NAN, 0, false},
    {"prod", I64, 2, {30, 3}, TT_CONTIG, DIM_INT, 1, {0}, true, NONE_DT, NAN, 0, false},
    {"prod", I16, 2, {30, 3}, TT_REVERSED, DIM_INT, 1, {0}, false, NONE_DT, NAN, 0, false},
    {"prod_all", F64, 1, {6}, TT_CONTIG, DIM_NONE, 0, {0}, false, NONE_DT, NAN, 0, false},
    {"amax", F32, 3, {8, 9, 10}, TT_CONTIG, DIM_INTS, 2, {0, 1}, false, NONE_DT, NAN, 0.02, false},
    {"amax", I16, 3, {8, 9, 10}, TT_REVERSED, DIM_INTS, 1, {2}, true, NONE_DT, NAN, 0, false},
    {"amax", BOOL, 2, {8, 9}, TT_CONTIG, DIM_INTS, 0, {0}, false, NONE_DT, NAN, 0, false},
    {"amin", F64, 3, {8, 9, 10}, TT_REVERSED, DIM_INTS, 1, {1}, false, NONE_DT, NAN, 0.01, false},
    {"max_dim", F32, 2, {17, 300}, TT_CONTIG, DIM_INT, 1, {1}, false, NONE_DT, NAN, 0.005, false},
    {"max_dim", F32, 2, {300, 17}, TT_CONTIG, DIM_INT, 1, {0}, true, NONE_DT, NAN, 0.005, true},
    {"max_dim", I32, 3, {5, 6, 7}, TT_GAPS, DIM_INT, 1, {-2}, false, NONE_DT, NAN, 0, false},
    {"max_dim", BF16, 2, {33, 12}, TT_REVERSED, DIM_INT, 1, {1}, false, NONE_DT, NAN, 0, false},
    {"max_dim", F32, 0, {0}, TT_CONTIG, DIM_INT, 1, {0}, false, NONE_DT, NAN, 0, false},
    {"min_dim", F64, 2, {40, 70}, TT_CONTIG, DIM_INT, 1, {0}, false, NONE_DT, NAN, 0.01, false},
    {"min_dim", U8, 2, {40, 70}, TT_CONTIG, DIM_INT, 1, {1}, true, NONE_DT, NAN, 0, false},
    {"max", F32, 1, {140000}, TT_CONTIG, DIM_NONE, 0, {0}, false, NONE_DT, NAN, 0.0001, false},
    {"max", I64, 2, {12, 13}, TT_REVERSED, DIM_NONE, 0, {0}, false, NONE_DT, NAN, 0, false},
    {"min", F16, 2, {12, 13}, TT_CONTIG, DIM_NONE, 0, {0}, false, NONE_DT, NAN, 0, false},
    {"argmax", F32, 3, {3, 4, 5}, TT_REVERSED, DIM_NONE, 0, {0}, false, NONE_DT, NAN, 0, false},
    {"argmax", F32, 3, {3, 4, 5}, TT_CONTIG, DIM_NONE, 0, {0}, true, NONE_DT, NAN, 0, false},
    {"argmax", I32, 2, {50, 60}, TT_CONTIG, DIM_INT, 1, {1}, false, NONE_DT, NAN, 0, false},
    {"argmax", F32, 2, {70000, 3}, TT_CONTIG, DIM_INT, 1, {0}, false, NONE_DT, NAN, 0.00001, true},
    {"argmin", F16, 2, {50, 60}, TT_REVERSED, DIM_INT, 1, {0}, true, NONE_DT, NAN, 0, false},
    {"argmin", F64, 1, {150000}, TT_CONTIG, DIM_NONE, 0, {0}, false, NONE_DT, NAN, 0, false},
    {"all", I32, 2, {20, 30}, TT_CONTIG, DIM_INT, 1, {1}, false, NONE_DT, NAN, 0, false},
    {"all", U8, 2, {20, 30}, TT_REVERSED, DIM_INTS, 0, {0}, false, NONE_DT, NAN, 0, false},
    {"all", F32, 3, {4, 5, 6}, TT_CONTIG, DIM_NONE, 0, {0}, true, NONE_DT, NAN, 0, false},
    {"any", I32, 2, {20, 30}, TT_GAPS, DIM_INTS, 2, {0, 1}, false, NONE_DT, NAN, 0, false},
    {"any", BOOL, 2, {20, 30}, TT_CONTIG, DIM_INT, 1, {0}, true, NONE_DT, NAN, 0, true},
    {"all_all", BOOL, 1, {131072}, TT_CONTIG, DIM_NONE, 0, {0}, false, NONE_DT, NAN, 0, false},
    {"any_all", F32, 2, {30, 40}, TT_CONTIG, DIM_NONE, 0, {0}, false, NONE_DT, NAN, 0.001, false},
    {"var", F32, 2, {9, 40}, TT_CONTIG, DIM_INTS, 1, {1}, false, NONE_DT, NAN, 0, false},
    {"var", F32, 2, {9, 40}, TT_REVERSED, DIM_INTS, 1, {0}, true, NONE_DT, 0.0, 0, false},
    {"var", F64, 1, {100000}, TT_CONTIG, DIM_NONE, 0, {0}, false, NONE_DT, NAN, 0, false},
    {"var", BF16, 3, {4, 5, 6}, TT_CONTIG, DIM_INTS, 2, {0, 2}, false, NONE_DT, 2.0, 0, false},
    {"var", F32, 2, {9, 1}, TT_CONTIG, DIM_INTS, 1, {1}, false, NONE_DT, NAN, 0, false},
    {"std", F32, 2, {9, 40}, TT_GAPS, DIM_INTS, 1, {1}, true, NONE_DT, 2.0, 0, false},
    {"std", F16, 2, {9, 40}, TT_CONTIG, DIM_INTS, 0, {0}, false, NONE_DT, NAN, 0, false},
    {"var_mean", F32, 3, {4, 5, 6}, TT_CONTIG, DIM_INTS, 2, {0, 2}, false, NONE_DT, NAN, 0, true},
    {"std_mean", F64, 2, {70000, 2}, TT_CONTIG, DIM_INTS, 1, {0}, false, NONE_DT, 0.0, 0, false},
    {"hash_tensor", F32, 3, {3, 4, 5}, TT_REVERSED, DIM_INTS, 1, {1}, false, NONE_DT, NAN, 0, true},
    {"hash_tensor", F64, 2, {4, 70000}, TT_CONTIG, DIM_INTS, 1, {1}, true, NONE_DT, NAN, 0, false},
    {"hash_tensor", I32, 2, {9, 31}, TT_GAPS, DIM_INTS, 0, {0}, false, NONE_DT, NAN, 0, false},
    {"hash_tensor", BF16, 2, {64, 33}, TT_CONTIG, DIM_INTS, 1, {0}, false, NONE_DT, NAN, 0, false},
};

/* Attributes in the row's order, from a case. */
static int32_t case_attrs(const tpu_op_def_t* def, const reduce_case_t* c, tpu_attr_t* attrs) {
  int32_t n = tpu_spec_count(def->attrs), i;
  for (int32_t k = 0; k < n; ++k) attrs[k] = tt_none();
  if ((i = tpu_spec_index(def->attrs, "dim")) >= 0)
    attrs[i] = c->dim_kind == DIM_INT    ? tt_int(c->dims[0])
               : c->dim_kind == DIM_INTS ? tt_ints(c->ndims, c->dims)
                                         : tt_none();
  if ((i = tpu_spec_index(def->attrs, "keepdim")) >= 0) attrs[i] = tt_bool(c->keepdim);
  if ((i = tpu_spec_index(def->attrs, "dtype")) >= 0 && c->dtype_arg != TPU_DTYPE_INVALID)
    attrs[i] = tt_dtype(c->dtype_arg);
  if ((i = tpu_spec_index(def->attrs, "correction")) >= 0 && !isnan(c->correction))
    attrs[i] = tt_float(c->correction);
  return n;
}

static void run_case(int index, const reduce_case_t* c) {
  const tpu_op_def_t* def = tt_def(c->op);
  if (!def) return;
  char what[96];
  snprintf(what, sizeof(what), "case %d (%s %s)", index, c->op, tpu_dtype_name(c->dtype));
  tt_t in = tt_make(c->dtype, c->ndim, c->sizes, c->layout);
  bool small_range = def->impl && ((const reduce_impl_t*)def->impl)->acc == RACC_PROD;
  if (c->dtype == TPU_DTYPE_U8)
    tt_fill(&in.view, 0, small_range ? 3 : 40, 0);
  else if (c->ndim > 0 && !strcmp(c->op, "all"))
    tt_fill(&in.view, 0, 1.05, 0); /* mostly zeros, so rows differ */
  else
    tt_fill(&in.view, small_range ? -2 : -20, small_range ? 2 : 20, c->nan_rate);
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
    tt_compare(what, &got_v[o], &want_v[o], tt_tol(shapes[o].dtype));
    tt_free(&got[o]);
    tt_free(&want[o]);
  }
  tt_free(&in);
}

TEST(reduce_cases) {
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) run_case((int)i, &k_cases[i]);
}

/* Runs row `op` on a contiguous input holding `values`, with `dim` and
 * `keepdim` (other attrs None), returning output o's first 8 elements. */
static void run_simple(const char* op, tpu_dtype_t dtype, int32_t ndim, const int64_t* sizes,
                       const double* values, const tpu_attr_t* dim, bool keepdim, int32_t o,
                       double* out) {
  const tpu_op_def_t* def = tt_def(op);
  if (!def) return;
  tt_t in = tt_make(dtype, ndim, sizes, TT_CONTIG);
  for (int64_t k = 0; k < tpu_view_numel(&in.view); ++k) tt_set(&in.view, k, values[k]);
  tpu_value_t inputs[1] = {tt_value(&in.view)};
  tpu_attr_t attrs[TPU_MAX_ATTRS];
  int32_t na = tpu_spec_count(def->attrs);
  for (int32_t k = 0; k < na; ++k) attrs[k] = tt_none();
  if (tpu_spec_index(def->attrs, "dim") >= 0) attrs[tpu_spec_index(def->attrs, "dim")] = *dim;
  if (tpu_spec_index(def->attrs, "keepdim") >= 0)
    attrs[tpu_spec_index(def->attrs, "keepdim")] = tt_bool(keepdim);
  tpu_view_t shapes[2], views[2];
  tt_t outs[2];
  tpu_node_t node = tt_node(inputs, 1, NULL, 0, attrs, na);
  CHECK_OK(def->infer(def, &node, shapes));
  int32_t nout = tpu_spec_count(def->outputs);
  for (int32_t i = 0; i < nout; ++i) {
    outs[i] = tt_like(&shapes[i], TT_CONTIG);
    views[i] = outs[i].view;
  }
  node.outputs = views;
  node.num_outputs = nout;
  CHECK_OK(tt_run(def->kernel, def, &node));
  for (int64_t k = 0; k < tpu_view_numel(&views[o]) && k < 8; ++k) out[k] = tt_get(&views[o], k);
  for (int32_t i = 0; i < nout; ++i) tt_free(&outs[i]);
  tt_free(&in);
}

TEST(reduce_semantics) {
  double r[8];
  int64_t s22[2] = {2, 2}, s4[1] = {4}, s2[1] = {2}, s1[1] = {1}, s0[1] = {0};
  int64_t d1 = 1;
  tpu_attr_t dim1 = tt_ints(1, &d1), none = tt_none(), int0 = tt_int(0);
  const double m1234[] = {1, 2, 3, 4};
  run_simple("sum", I32, 2, s22, m1234, &dim1, false, 0, r);
  CHECK(r[0] == 3 && r[1] == 7);
  /* int64 sums wrap like PyTorch's. */
  const tpu_op_def_t* sum = tt_def("sum_all");
  tt_t big = tt_make(I64, 1, s2, TT_CONTIG), res = tt_make(I64, 0, s2, TT_CONTIG);
  ((int64_t*)big.mem)[0] = INT64_MAX;
  ((int64_t*)big.mem)[1] = 1;
  tpu_value_t in = tt_value(&big.view);
  tpu_node_t node = tt_node(&in, 1, &res.view, 1, NULL, 0);
  CHECK_OK(tt_run(sum->kernel, sum, &node));
  CHECK(((int64_t*)res.mem)[0] == INT64_MIN);
  tt_free(&big);
  tt_free(&res);
  /* Ties: the first index; NaN: the first NaN wins everywhere. */
  const double ties[] = {1, 3, 3, 2}, nans[] = {1, NAN, 3, NAN};
  run_simple("argmax", F32, 1, s4, ties, &none, false, 0, r);
  CHECK(r[0] == 1);
  run_simple("argmin", F32, 1, s4, ties, &none, false, 0, r);
  CHECK(r[0] == 0);
  run_simple("argmax", F32, 1, s4, nans, &none, false, 0, r);
  CHECK(r[0] == 1);
  run_simple("argmin", F32, 1, s4, nans, &none, false, 0, r);
  CHECK(r[0] == 1);
  run_simple("max_dim", F64, 1, s4, nans, &int0, false, 0, r);
  CHECK(isnan(r[0]));
  run_simple("max_dim", F64, 1, s4, nans, &int0, false, 1, r);
  CHECK(r[0] == 1);
  run_simple("amin", F32, 1, s4, nans, &none, false, 0, r);
  CHECK(isnan(r[0]));
  /* all/any keep uint8; all.dims with [] reduces nothing. */
  const double u[] = {1, 2, 0, 3};
  run_simple("all", TPU_DTYPE_U8, 2, s22, u, &dim1, false, 0, r);
  CHECK(r[0] == 1 && r[1] == 0);
  run_simple("any", TPU_DTYPE_U8, 2, s22, u, &dim1, false, 0, r);
  CHECK(r[0] == 1 && r[1] == 1);
  tpu_attr_t empty = tt_ints(0, NULL);
  run_simple("all", F32, 2, s22, u, &empty, false, 0, r);
  CHECK(r[0] == 1 && r[1] == 1 && r[2] == 0 && r[3] == 1);
  /* Empty and degenerate reductions. */
  run_simple("mean", F32, 1, s0, u, &none, false, 0, r);
  CHECK(isnan(r[0]));
  run_simple("prod", F32, 1, s0, u, &int0, false, 0, r);
  CHECK(r[0] == 1);
  run_simple("var", F32, 1, s1, u, &none, false, 0, r);
  CHECK(isnan(r[0]));
  run_simple("var", F64, 1, s2, m1234, &none, false, 0, r);
  CHECK(r[0] == 0.5);
  run_simple("std_mean", F64, 1, s2, m1234, &none, false, 1, r);
  CHECK(r[0] == 1.5);
  const double bools[] = {1, 0, 1, 1};
  run_simple("sum", TPU_DTYPE_BOOL, 1, s4, bools, &none, false, 0, r);
  CHECK(r[0] == 3);
}

/* Output metadata and argument errors. */
TEST(reduce_infer_and_check) {
  int64_t sizes[3] = {2, 3, 4}, d1 = 1, dup[2] = {0, -3}, far = 5;
  tt_t x = tt_make(F32, 3, sizes, TT_CONTIG), xi = tt_make(I32, 3, sizes, TT_CONTIG);
  tt_t xb = tt_make(TPU_DTYPE_BOOL, 3, sizes, TT_CONTIG);
  tt_t e = tt_make(F32, 3, (int64_t[3]){0, 3, 4}, TT_CONTIG);
  tpu_value_t vx = tt_value(&x.view), vi = tt_value(&xi.view), vb = tt_value(&xb.view);
  tpu_value_t ve = tt_value(&e.view);
  tpu_view_t out[2];
  const tpu_op_def_t* sum = tt_def("sum");
  tpu_attr_t a[3] = {tt_ints(1, &d1), tt_bool(true), tt_none()};
  tpu_node_t n = tt_node(&vx, 1, NULL, 0, a, 3);
  CHECK_OK(sum->infer(sum, &n, out));
  CHECK(out[0].ndim == 3 && out[0].sizes[1] == 1 && out[0].sizes[2] == 4 && out[0].dtype == F32);
  CHECK(out[0].strides[0] == 4 && out[0].strides[2] == 1);
  n.inputs = &vi;
  CHECK_OK(sum->infer(sum, &n, out));
  CHECK(out[0].dtype == I64);
  n.attrs[2] = tt_dtype(F16);
  CHECK_OK(sum->infer(sum, &n, out));
  CHECK(out[0].dtype == F16);

  const tpu_op_def_t* mx = tt_def("max_dim");
  tpu_attr_t am[2] = {tt_int(-1), tt_bool(false)};
  n = tt_node(&vx, 1, NULL, 0, am, 2);
  CHECK_OK(mx->infer(mx, &n, out));
  CHECK(out[0].ndim == 2 && out[0].sizes[1] == 3 && out[0].dtype == F32 && out[1].dtype == I64);
  n.inputs = &ve;
  n.attrs[0] = tt_int(0);
  CHECK_CODE(mx->check(mx, &n), TPU_CODE_UNIMPLEMENTED);
  CHECK_CODE(mx->infer(mx, &n, out), TPU_CODE_UNIMPLEMENTED);
  reduce_args_t args;
  CHECK_CODE(tpu_reduce_parse(mx, &n, &args), TPU_CODE_INDEX_ERROR);

  const tpu_op_def_t* am_ = tt_def("argmax");
  tpu_attr_t aa[2] = {tt_none(), tt_bool(true)};
  n = tt_node(&vx, 1, NULL, 0, aa, 2);
  CHECK_OK(am_->infer(am_, &n, out));
  CHECK(out[0].ndim == 3 && out[0].sizes[0] == 1 && out[0].sizes[2] == 1 && out[0].dtype == I64);
  n.inputs = &vb;
  CHECK_CODE(am_->check(am_, &n), TPU_CODE_UNIMPLEMENTED);

  const tpu_op_def_t* all = tt_def("all_all");
  n = tt_node(&vi, 1, NULL, 0, NULL, 0);
  CHECK_OK(all->infer(all, &n, out));
  CHECK(out[0].ndim == 0 && out[0].dtype == TPU_DTYPE_BOOL);

  const tpu_op_def_t* mean = tt_def("mean_all");
  tpu_attr_t md[1] = {tt_none()};
  n = tt_node(&vi, 1, NULL, 0, md, 1);
  CHECK_CODE(mean->check(mean, &n), TPU_CODE_UNIMPLEMENTED);
  n.attrs[0] = tt_dtype(F64);
  CHECK_OK(mean->check(mean, &n));
  const tpu_op_def_t* var = tt_def("var");
  tpu_attr_t av[3] = {tt_none(), tt_none(), tt_bool(false)};
  n = tt_node(&vi, 1, NULL, 0, av, 3);
  CHECK_CODE(var->check(var, &n), TPU_CODE_UNIMPLEMENTED);

  a[0] = tt_ints(2, dup);
  a[2] = tt_none();
  n = tt_node(&vx, 1, NULL, 0, a, 3);
  CHECK_CODE(tpu_reduce_parse(sum, &n, &args), TPU_CODE_INVALID_ARGUMENT);
  CHECK_CODE(sum->check(sum, &n), TPU_CODE_UNIMPLEMENTED);
  n.attrs[0] = tt_ints(1, &far);
  CHECK_CODE(tpu_reduce_parse(sum, &n, &args), TPU_CODE_INDEX_ERROR);
  CHECK_CODE(sum->infer(sum, &n, out), TPU_CODE_UNIMPLEMENTED);

  /* A wrongly shaped output is an error, not a write out of bounds. */
  n.attrs[0] = tt_ints(1, &d1);
  tt_t wrong = tt_make(F32, 1, (int64_t[1]){3}, TT_CONTIG);
  n.outputs = &wrong.view;
  n.num_outputs = 1;
  CHECK_CODE(tt_run(sum->kernel, sum, &n), TPU_CODE_INVALID_ARGUMENT);
  tt_free(&wrong);
  tt_free(&x);
  tt_free(&xi);
  tt_free(&xb);
  tt_free(&e);
}

/* hash_tensor's exact bits (tt_compare reads through double): the xor of
 * the elements' float64 or int64 patterns, values from PyTorch CPU. */
TEST(reduce_hash_tensor_bits) {
  static const struct {
    tpu_dtype_t dtype;
    int64_t n;
    double values[3];
    uint64_t want;
  } cases[] = {
      {F32, 3, {1.0, 2.0, -0.5}, 13839561654909534208ull},
      {I8, 3, {1, -2, 3}, 18446744073709551612ull},
      {BF16, 2, {1, 2}, 9218868437227405312ull},
      {BOOL, 3, {1, 0, 1}, 0},
  };
  const tpu_op_def_t* def = tt_def("hash_tensor");
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    tt_t in = tt_make(cases[c].dtype, 1, &cases[c].n, TT_CONTIG);
    for (int64_t k = 0; k < cases[c].n; ++k) tt_set(&in.view, k, cases[c].values[k]);
    tpu_value_t inputs[1] = {tt_value(&in.view)};
    tpu_attr_t attrs[3] = {tt_none(), tt_none(), tt_none()};
    tpu_node_t node = tt_node(inputs, 1, NULL, 0, attrs, 3);
    node.op = tpu_op_lookup("hash_tensor");
    node.num_outputs = 1;
    tpu_view_t shape;
    CHECK_OK(tpu_op_infer(&node, &shape));
    CHECK(shape.dtype == TPU_DTYPE_U64 && shape.ndim == 0);
    tt_t o = tt_like(&shape, TT_CONTIG);
    node.outputs = &o.view;
    CHECK_OK(tpu_op_check(&node));
    CHECK_OK(tt_run(def->kernel, def, &node));
    uint64_t got;
    memcpy(&got, tpu_view_ptr(&o.view), sizeof(got));
    if (got != cases[c].want)
      tpu_test_fail(__FILE__, __LINE__, "case %zu: %llu, want %llu", c, (unsigned long long)got,
                    (unsigned long long)cases[c].want);
    tt_free(&o);
    tt_free(&in);
  }
  /* mode 1 does not exist: PyTorch raises (the fallback) */
  int64_t n = 2;
  tt_t in = tt_make(F32, 1, &n, TT_CONTIG);
  tpu_value_t inputs[1] = {tt_value(&in.view)};
  tpu_attr_t attrs[3] = {tt_none(), tt_none(), tt_int(1)};
  tpu_node_t node = tt_node(inputs, 1, NULL, 0, attrs, 3);
  node.op = tpu_op_lookup("hash_tensor");
  node.num_outputs = 1;
  tpu_view_t shape;
  CHECK(tt_code(tpu_op_infer(&node, &shape)) == TPU_CODE_UNIMPLEMENTED);
  tt_free(&in);
}
