/* test_index_advanced.c — the index_adv family (kernels/index/advanced.c) against its reference
 * (kernels/index/advanced_ref.c): a table of cases over dtypes, layouts (strided,
 * transposed, padded, broadcast), index lists with None gaps, negative and
 * duplicate indices and bool masks; then the out-of-range errors (IndexError,
 * nothing written), the count rows that size data-dependent outputs and
 * repeat_interleave. */
#include "kernels/index/advanced.h"
#include "kernel_test_util.h"

enum { MAXIN = 6 };

/* Runs def's kernel and the reference on the same node (outputs shaped by
 * infer, the kernel's in `layout`); returns the worst relative difference. */
static double run_both(const char* op, tpu_value_t* in, int32_t nin, const tpu_attr_t* attrs,
                       int32_t nattrs, int layout) {
  const tpu_op_def_t* def = tt_def(op);
  if (!def) return INFINITY;
  tpu_node_t node = {.op = tpu_op_lookup(op), .num_inputs = nin, .num_outputs = 1,
                     .num_attrs = nattrs, .inputs = in};
  if (nattrs) memcpy(node.attrs, attrs, sizeof(tpu_attr_t) * (size_t)nattrs);
  tpu_view_t shape;
  CHECK_OK(def->check(def, &node));
  CHECK_OK(def->infer(def, &node, &shape));
  tt_t out = tt_make(shape.dtype, shape.ndim, shape.sizes, layout);
  tt_t want = tt_make(shape.dtype, shape.ndim, shape.sizes, TT_CONTIG);
  tt_fill_value(&out.view, 77), tt_fill_value(&want.view, 77);
  tpu_exec_ctx_t ctx = {0};
  node.outputs = &out.view;
  double worst = INFINITY;
  tpu_status_t s = def->kernel(def, &node, &ctx);
  if (s == TPU_OK) {
    node.outputs = &want.view;
    s = tpu_ax_reference(def, &node);
  }
  if (s == TPU_OK) worst = tt_max_rel_diff(&out.view, &want.view);
  else tpu_test_fail(__FILE__, __LINE__, "%s: %s", op, tpu_status_message(s));
  tpu_status_free(s);
  tt_free(&out), tt_free(&want);
  return worst;
}

/* The 0-dim int64 result of a count row. */
static int64_t run_count(const char* op, tpu_value_t* in, int32_t nin) {
  const tpu_op_def_t* def = tt_def(op);
  if (!def) return -1;
  tpu_node_t node = {.op = tpu_op_lookup(op), .num_inputs = nin, .num_outputs = 1,
                     .num_attrs = 1, .inputs = in};
  node.attrs[0] = tt_none();
  tpu_view_t shape;
  CHECK_OK(def->infer(def, &node, &shape));
  CHECK(shape.ndim == 0 && shape.dtype == TPU_DTYPE_I64);
  int64_t n = -1;
  tpu_view_t out = view_of(&n, TPU_DTYPE_I64, 0, NULL);
  node.outputs = &out;
  tpu_exec_ctx_t ctx = {0};
  CHECK_OK(def->kernel(def, &node, &ctx));
  return n;
}

#define F32 TPU_DTYPE_F32
#define I64 TPU_DTYPE_I64
#define NONE_T {-1, {0, 0}, TPU_DTYPE_I64, 0}

typedef struct term_case {
  int32_t nd; /* -1: None */
  int64_t sizes[2];
  tpu_dtype_t dtype; /* I64, I32 or BOOL */
  int layout;
} term_case_t;

typedef struct adv_case {
  const char* op; /* "index" or "index_put" */
  tpu_dtype_t dtype;
  int32_t self_nd;
  int64_t self_sizes[4];
  int self_layout;
  int32_t nterms;
  term_case_t terms[3];
  bool accumulate;
  int values_layout;
  bool scalar_values; /* values broadcast from 0-dim */
} adv_case_t;

static const adv_case_t k_adv[] = {
    {"index", F32, 2, {50, 7}, TT_CONTIG, 1, {{1, {30}, I64, TT_CONTIG}}, false, 0, false},
    {"index", TPU_DTYPE_F16, 3, {4, 5, 6}, TT_PADDED, 2,
     {NONE_T, {2, {3, 1}, TPU_DTYPE_I32, TT_CONTIG}}, false, 0, false},
    {"index", TPU_DTYPE_I16, 3, {4, 5, 6}, TT_TRANSPOSED, 3,
     {{1, {3}, I64, TT_CONTIG}, NONE_T, {2, {2, 3}, I64, TT_PADDED}}, false, 0, false},
    {"index", TPU_DTYPE_BOOL, 3, {4, 5, 6}, TT_CONTIG, 2,
     {{1, {7}, I64, TT_CONTIG}, {1, {1}, I64, TT_CONTIG}}, false, 0, false},
    {"index", TPU_DTYPE_F64, 3, {4, 5, 6}, TT_REVERSED, 2,
     {NONE_T, {2, {5, 6}, TPU_DTYPE_BOOL, TT_CONTIG}}, false, 0, false},
    {"index", TPU_DTYPE_BF16, 2, {300, 130}, TT_CONTIG, 1, {{1, {4000}, I64, TT_CONTIG}}, false, 0,
     false},
    {"index", I64, 1, {9}, TT_GAPS, 1, {{1, {9}, TPU_DTYPE_BOOL, TT_PADDED}}, false, 0, false},
    {"index_put", F32, 2, {50, 7}, TT_CONTIG, 1, {{1, {80}, I64, TT_CONTIG}}, true, TT_CONTIG,
     false},
    {"index_put", F32, 2, {50, 7}, TT_TRANSPOSED, 1, {{1, {80}, I64, TT_CONTIG}}, false, TT_PADDED,
     false},
    {"index_put", TPU_DTYPE_BF16, 3, {4, 5, 6}, TT_CONTIG, 2,
     {NONE_T, {2, {3, 1}, I64, TT_CONTIG}}, true, TT_CONTIG, false},
    {"index_put", TPU_DTYPE_I32, 3, {4, 5, 6}, TT_PADDED, 3,
     {{1, {3}, I64, TT_CONTIG}, NONE_T, {2, {2, 3}, I64, TT_CONTIG}}, true, TT_CONTIG, false},
    {"index_put", TPU_DTYPE_BOOL, 2, {6, 5}, TT_CONTIG, 1, {{1, {9}, I64, TT_CONTIG}}, true,
     TT_CONTIG, false},
    {"index_put", F32, 2, {6, 5}, TT_CONTIG, 1, {{2, {6, 5}, TPU_DTYPE_BOOL, TT_CONTIG}}, false,
     0, true},
    {"index_put", TPU_DTYPE_F64, 3, {4, 5, 6}, TT_CONTIG, 2,
     {NONE_T, {1, {5}, TPU_DTYPE_BOOL, TT_CONTIG}}, true, 0, true},
    {"index_put", F32, 2, {200, 300}, TT_CONTIG, 1, {{1, {5000}, I64, TT_CONTIG}}, true,
     TT_CONTIG, false},
    {"index_put", TPU_DTYPE_F16, 1, {100}, TT_CONTIG, 1, {{1, {100000}, I64, TT_CONTIG}}, true,
     TT_CONTIG, false},
};

TEST(index_adv_matches_reference) {
  for (size_t i = 0; i < sizeof(k_adv) / sizeof(k_adv[0]); ++i) {
    const adv_case_t* c = &k_adv[i];
    tt_t self = tt_make(c->dtype, c->self_nd, c->self_sizes, c->self_layout);
    tt_fill_ints(&self.view, 100 + i, -9, 9);
    tt_t terms[3], vals = {0};
    memset(terms, 0, sizeof terms);
    tpu_value_t in[MAXIN];
    int32_t nin = 0, d = 0;
    in[nin++] = tt_value(&self.view);
    int64_t count = -1;
    for (int32_t k = 0; k < c->nterms; ++k) {
      const term_case_t* t = &c->terms[k];
      if (t->nd < 0) {
        in[nin++] = tt_value(NULL);
        d++;
        continue;
      }
      terms[k] = tt_make(t->dtype, t->nd, t->sizes, t->layout);
      if (t->dtype == TPU_DTYPE_BOOL) {
        tt_fill_ints(&terms[k].view, 200 + i, 0, 1);
        count = 0;
        for (int64_t e = 0; e < tpu_view_numel(&terms[k].view); ++e) count += tt_get(&terms[k].view, e) != 0;
        d += t->nd;
      } else {
        int64_t n = c->self_sizes[d++];
        tt_fill_ints(&terms[k].view, 300 + i, -n, n - 1); /* negatives wrap */
      }
      in[nin++] = tt_value(&terms[k].view);
    }
    tpu_attr_t attrs[2] = {count >= 0 ? tt_int(count) : tt_none(), tt_none()};
    if (strcmp(c->op, "index_put") == 0) {
      /* values: the indexing result's shape (from the index row), or 0-dim */
      const tpu_op_def_t* idef = tt_def("index");
      tpu_node_t inode = {.op = tpu_op_lookup("index"), .num_inputs = nin, .num_attrs = 1,
                          .inputs = in};
      inode.attrs[0] = attrs[0];
      tpu_view_t shape = {0};
      if (idef && !c->scalar_values) CHECK_OK(idef->infer(idef, &inode, &shape));
      vals = tt_make(c->dtype, c->scalar_values ? 0 : shape.ndim, shape.sizes, c->values_layout);
      tt_fill_ints(&vals.view, 400 + i, -4, 4);
      in[nin++] = tt_value(&vals.view);
      attrs[0] = tt_bool(c->accumulate);
      attrs[1] = tt_bool(false);
    }
    double tol = c->dtype == TPU_DTYPE_BF16 ? 1e-2 : c->dtype == TPU_DTYPE_F16 ? 1e-3 : 0;
    double worst = run_both(c->op, in, nin, attrs, strcmp(c->op, "index") == 0 ? 1 : 2,
                            (int)(i % 3 == 1 ? TT_PADDED : TT_CONTIG));
    if (!(worst <= tol))
      tpu_test_fail(__FILE__, __LINE__, "case %zu (%s %s): diff %g", i, c->op,
                    tpu_dtype_name(c->dtype), worst);
    tt_free(&self), tt_free(&vals);
    for (int k = 0; k < 3; ++k) tt_free(&terms[k]);
  }
}

TEST(index_adv_flat_and_dim_ops_match_reference) {
  int64_t s34[2] = {3, 4}, s6[1] = {6}, s25[2] = {2, 5}, s4[1] = {4}, s35[2] = {3, 5};
  int64_t s200k[1] = {200000}, s1k[2] = {1000, 300}, s4x[1] = {40};
  tpu_dtype_t dts[4] = {F32, TPU_DTYPE_BF16, TPU_DTYPE_I8, TPU_DTYPE_F64};
  for (int k = 0; k < 4; ++k) {
    tpu_dtype_t dt = dts[k];
    double tol = dt == TPU_DTYPE_BF16 ? 1e-2 : 0;
    tt_t self = tt_make(dt, 2, s34, k % 2 ? TT_TRANSPOSED : TT_CONTIG);
    tt_t idx = tt_make(I64, 2, s25, TT_PADDED), src = tt_make(dt, 1, s6, TT_CONTIG);
    tt_t src2 = tt_make(dt, 2, s25, TT_CONTIG), i4 = tt_make(I64, 1, s4, TT_GAPS);
    tt_t src35 = tt_make(dt, 2, s35, TT_PADDED), big = tt_make(dt, 1, s200k, TT_CONTIG);
    tt_t bigi = tt_make(I64, 2, s1k, TT_CONTIG), mask = tt_make(TPU_DTYPE_BOOL, 1, s4, 0);
    tt_t src40 = tt_make(dt, 1, s4x, TT_CONTIG);
    tt_fill_ints(&self.view, k, -9, 9), tt_fill_ints(&idx.view, 10 + k, -12, 11);
    tt_fill_ints(&src.view, 20 + k, -9, 9), tt_fill_ints(&src2.view, 30 + k, -9, 9);
    tt_fill_ints(&i4.view, 40 + k, 0, 2), tt_fill_ints(&src35.view, 50 + k, -5, 5);
    tt_fill_ints(&big.view, 60 + k, -3, 3), tt_fill_ints(&bigi.view, 70 + k, -200000, 199999);
    tt_fill_ints(&mask.view, 80 + k, 0, 1), tt_fill_ints(&src40.view, 90 + k, -3, 3);
    tpu_value_t in[3] = {tt_value(&self.view), tt_value(&idx.view), tt_value(&src2.view)};
    tpu_attr_t acc[1] = {tt_bool(true)}, put[1] = {tt_bool(false)}, dim1[1] = {tt_int(-1)};
    tpu_attr_t dim0[1] = {tt_int(0)};
    double w = run_both("take", in, 2, NULL, 0, TT_PADDED);
    w = fmax(w, run_both("put", in, 3, acc, 1, TT_CONTIG));
    w = fmax(w, run_both("put", in, 3, put, 1, TT_TRANSPOSED));
    in[0] = tt_value(&big.view), in[1] = tt_value(&bigi.view);
    w = fmax(w, run_both("take", in, 2, NULL, 0, TT_CONTIG));
    /* index_fill along dim 1 with a negative index, index_copy along dim 0 */
    in[0] = tt_value(&self.view), in[1] = tt_value(&i4.view);
    in[2].kind = TPU_VALUE_SCALAR, in[2].u.scalar.dtype = I64, in[2].u.scalar.v.i = 5;
    w = fmax(w, run_both("index_fill", in, 3, dim1, 1, TT_PADDED));
    tt_t i3 = tt_make(I64, 1, (int64_t[1]){3}, TT_CONTIG);
    tt_set(&i3.view, 0, 2), tt_set(&i3.view, 1, 0), tt_set(&i3.view, 2, 2);
    tt_t src3 = tt_make(dt, 2, (int64_t[2]){3, 4}, TT_TRANSPOSED);
    tt_fill_ints(&src3.view, 99, -9, 9);
    in[1] = tt_value(&i3.view), in[2] = tt_value(&src3.view);
    w = fmax(w, run_both("index_copy", in, 3, dim0, 1, TT_CONTIG));
    /* masks: masked_select (mask broadcast over rows), masked_scatter */
    in[1] = tt_value(&mask.view);
    int64_t n = run_count("masked_select_count", in, 2);
    tpu_attr_t sync[1] = {tt_int(n)};
    w = fmax(w, run_both("masked_select", in, 2, sync, 1, TT_PADDED));
    in[2] = tt_value(&src40.view);
    w = fmax(w, run_both("masked_scatter", in, 3, NULL, 0, TT_TRANSPOSED));
    in[0] = tt_value(&src35.view);
    sync[0] = tt_int(run_count("nonzero_count", in, 1));
    w = fmax(w, run_both("nonzero", in, 1, sync, 1, TT_PADDED));
    tpu_attr_t st[2] = {tt_int(20), tt_int(-7)};
    w = fmax(w, run_both("nonzero_static", in, 1, st, 2, TT_CONTIG));
    if (!(w <= tol))
      tpu_test_fail(__FILE__, __LINE__, "flat/dim ops %s: diff %g", tpu_dtype_name(dt), w);
    tt_free(&self), tt_free(&idx), tt_free(&src), tt_free(&src2), tt_free(&i4), tt_free(&src35);
    tt_free(&big), tt_free(&bigi), tt_free(&mask), tt_free(&src40), tt_free(&i3), tt_free(&src3);
  }
}

TEST(index_adv_out_of_range_is_index_error_and_writes_nothing) {
  int64_t s5[1] = {5}, s2[1] = {2};
  tt_t self = tt_make(F32, 1, s5, TT_CONTIG), out = tt_make(F32, 1, s5, TT_CONTIG);
  tt_t idx = tt_make(I64, 1, s2, TT_CONTIG), vals = tt_make(F32, 1, s2, TT_CONTIG);
  tt_set(&idx.view, 0, 1), tt_set(&idx.view, 1, 7);
  tt_fill_value(&self.view, 1), tt_fill_value(&vals.view, 3);
  tpu_value_t in[3] = {tt_value(&self.view), tt_value(&idx.view), tt_value(&vals.view)};
  tpu_exec_ctx_t ctx = {0};
  const char* ops[4] = {"index", "index_put", "take", "put"};
  const char* msgs[4] = {"index 7 is out of bounds for dimension 0 with size 5",
                         "index 7 is out of bounds for dimension 0 with size 5",
                         "out of range: tried to access index 7 on a tensor of 5 elements.",
                         "out of range: tried to access index 7 on a tensor of 5 elements."};
  int32_t nins[4] = {2, 3, 2, 3};
  for (int k = 0; k < 4; ++k) {
    const tpu_op_def_t* def = tt_def(ops[k]);
    if (!def) continue;
    tt_fill_value(&out.view, 0);
    tt_t o2 = tt_make(F32, 1, s2, TT_CONTIG);
    bool small = k == 0 || k == 2;
    tpu_node_t node = {.op = tpu_op_lookup(ops[k]), .num_inputs = nins[k], .num_outputs = 1,
                       .num_attrs = 1, .inputs = in, .outputs = small ? &o2.view : &out.view};
    node.attrs[0] = k == 0 ? tt_none() : tt_bool(true);
    tpu_status_t s = def->kernel(def, &node, &ctx);
    if (tpu_status_code(s) != TPU_CODE_INDEX_ERROR || !strstr(tpu_status_message(s), msgs[k]))
      tpu_test_fail(__FILE__, __LINE__, "%s: got \"%s\"", ops[k], tpu_status_message(s));
    tpu_status_free(s);
    if (!small) CHECK(tt_get(&out.view, 1) == 1 && tt_get(&out.view, 4) == 1);
    tt_free(&o2);
  }
  /* index_copy names itself; index_fill wraps negatives but not beyond -size */
  tt_set(&idx.view, 1, -6);
  tt_t src = tt_make(F32, 1, s2, TT_CONTIG);
  in[2] = tt_value(&src.view);
  tpu_node_t node = {.op = tpu_op_lookup("index_copy"), .num_inputs = 3, .num_outputs = 1,
                     .num_attrs = 1, .inputs = in, .outputs = &out.view};
  node.attrs[0] = tt_int(0);
  const tpu_op_def_t* def = tt_def("index_copy");
  if (def) {
    tpu_status_t s = def->kernel(def, &node, &ctx);
    CHECK(tpu_status_code(s) == TPU_CODE_INDEX_ERROR &&
          strstr(tpu_status_message(s), "index_copy_(): index -6 is out of bounds"));
    tpu_status_free(s);
  }
  /* a bool mask without its count: infer defers (the bridge runs index_count) */
  tt_t mask = tt_make(TPU_DTYPE_BOOL, 1, s5, TT_CONTIG);
  tt_set(&mask.view, 1, 1), tt_set(&mask.view, 3, 1);
  in[1] = tt_value(&mask.view);
  def = tt_def("index");
  if (def) {
    tpu_node_t n2 = {.op = tpu_op_lookup("index"), .num_inputs = 2, .num_attrs = 1, .inputs = in};
    n2.attrs[0] = tt_none();
    tpu_view_t shape;
    CHECK_CODE(def->infer(def, &n2, &shape), TPU_CODE_UNIMPLEMENTED);
    CHECK(run_count("index_count", in, 2) == 2);
    n2.attrs[0] = tt_int(2);
    CHECK_OK(def->infer(def, &n2, &shape));
    CHECK(shape.ndim == 1 && shape.sizes[0] == 2);
  }
  /* unsupported index dtypes fall back (PyTorch raises its own error) */
  tt_t fidx = tt_make(F32, 1, s2, TT_CONTIG);
  in[1] = tt_value(&fidx.view);
  def = tt_def("index");
  if (def) {
    tpu_node_t n3 = {.op = tpu_op_lookup("index"), .num_inputs = 2, .num_attrs = 1, .inputs = in};
    n3.attrs[0] = tt_none();
    CHECK_CODE(def->check(def, &n3), TPU_CODE_UNIMPLEMENTED);
  }
  tt_free(&self), tt_free(&out), tt_free(&idx), tt_free(&vals), tt_free(&src), tt_free(&mask);
  tt_free(&fidx);
}

TEST(index_adv_repeat_interleave_matches_reference) {
  int64_t n[1] = {9};
  tt_t rep = tt_make(TPU_DTYPE_I32, 1, n, TT_GAPS);
  tt_fill_ints(&rep.view, 5, 0, 4);
  tpu_value_t in[1] = {tt_value(&rep.view)};
  int64_t total = run_count("repeat_interleave_count", in, 1), want = 0;
  for (int i = 0; i < 9; ++i) want += (int64_t)tt_get(&rep.view, i);
  CHECK(total == want);
  tpu_attr_t at[2] = {tt_none(), tt_int(total)};
  CHECK(run_both("repeat_interleave", in, 1, at, 2, TT_PADDED) == 0);
  tt_set(&rep.view, 3, -1); /* negative repeats: RuntimeError from the count */
  const tpu_op_def_t* def = tt_def("repeat_interleave_count");
  if (def) {
    int64_t r = 0;
    tpu_view_t out = view_of(&r, I64, 0, NULL);
    tpu_node_t node = {.op = tpu_op_lookup("repeat_interleave_count"), .num_inputs = 1,
                       .num_outputs = 1, .num_attrs = 2, .inputs = in, .outputs = &out};
    tpu_exec_ctx_t ctx = {0};
    tpu_status_t s = def->kernel(def, &node, &ctx);
    CHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT &&
          strstr(tpu_status_message(s), "repeats can not be negative"));
    tpu_status_free(s);
  }
  tt_free(&rep);
}
