/* test_index.c — the index family against its reference (index_ref.c): a
 * table of gather/scatter-like cases (dtypes, dims, index dtypes, strided and
 * transposed operands and outputs, in-place forms, duplicates), then
 * embedding_dense_backward, cat, and the errors: out-of-range indices, bad
 * dims and shapes. */
#include "kernels/index/index.h"
#include "kernel_test_util.h"

/* Runs `def` on inputs `in` (output from infer, in `out_layout`, or input 0
 * itself when `inplace`) and the reference on copies; returns the worst
 * relative difference. */
static double run_node(const tpu_op_def_t* def, tpu_value_t* in, int32_t nin,
                       const tpu_attr_t* attrs, int32_t nattrs, int out_layout, bool inplace) {
  tpu_node_t node = {.op = tpu_op_lookup(def->name), .num_inputs = nin, .num_outputs = 1,
                     .num_attrs = nattrs, .inputs = in};
  memcpy(node.attrs, attrs, sizeof(tpu_attr_t) * (size_t)nattrs);
  tpu_view_t shape;
  CHECK_OK(def->check(def, &node));
  CHECK_OK(def->infer(def, &node, &shape));
  tt_t out = {0}, self_copy = {0};
  tpu_value_t saved = in[0];
  if (inplace) {
    out.view = in[0].u.view;
    self_copy = tt_make(shape.dtype, shape.ndim, shape.sizes, TT_CONTIG);
    const tpu_view_t* self = &in[0].u.view;
    for (int64_t i = 0; i < tpu_view_numel(self); ++i) tt_set(&self_copy.view, i, tt_get(self, i));
  } else {
    out = tt_make(shape.dtype, shape.ndim, shape.sizes, out_layout);
    tt_fill_value(&out.view, 99);
  }
  tt_t want = tt_make(shape.dtype, shape.ndim, shape.sizes, TT_CONTIG);
  node.outputs = &out.view;
  tpu_exec_ctx_t ctx = {0};
  double worst = INFINITY;
  tpu_status_t st = def->kernel(def, &node, &ctx);
  if (inplace) in[0] = tt_value(&self_copy.view);
  node.outputs = &want.view;
  if (st == TPU_OK) st = tpu_index_reference(def, &node);
  in[0] = saved;
  if (st == TPU_OK) {
    worst = tt_max_rel_diff(&out.view, &want.view);
  } else {
    tpu_test_fail(__FILE__, __LINE__, "%s: %s", def->name, tpu_status_message(st));
    tpu_status_free(st);
  }
  if (!inplace) tt_free(&out);
  tt_free(&self_copy);
  tt_free(&want);
  return worst;
}

typedef struct ix_case {
  const char* op;
  tpu_dtype_t dtype, index_dtype;
  int32_t self_nd;
  int64_t self_sizes[3];
  int self_layout;
  int32_t index_nd;
  int64_t index_sizes[3];
  int index_layout;
  int32_t src_nd; /* -1: no src (a scalar value for scatter_value) */
  int64_t src_sizes[3];
  int src_layout;
  int64_t dim;
  double scalar; /* scatter_value's value, index_add's alpha */
  int out_layout;
  bool inplace;
} ix_case_t;

#define F32 TPU_DTYPE_F32
#define I64 TPU_DTYPE_I64
#define I32 TPU_DTYPE_I32
#define C TT_CONTIG
#define T TT_TRANSPOSED
#define P TT_PADDED

static const ix_case_t k_cases[] = {
    {"index_select", F32, I64, 2, {5, 4}, C, 1, {7}, C, -1, {0}, C, 0, 0, C, false},
    {"index_select", F32, I32, 2, {5, 4}, T, 1, {6}, P, -1, {0}, C, 1, 0, P, false},
    {"index_select", TPU_DTYPE_F16, I64, 3, {3, 4, 5}, P, 1, {9}, C, -1, {0}, C, -2, 0, T, false},
    {"index_select", TPU_DTYPE_BOOL, I64, 2, {4, 3}, C, 0, {1}, C, -1, {0}, C, 1, 0, C, false},
    {"index_select", I64, I64, 0, {0}, C, 1, {1}, C, -1, {0}, C, 0, 0, C, false},
    {"index_select", TPU_DTYPE_F64, I64, 2, {5, 4}, C, 1, {0}, C, -1, {0}, C, 0, 0, C, false},
    {"index_select", F32, I64, 2, {300, 200}, C, 1, {400}, C, -1, {0}, C, 0, 0, C, false},
    /* embedding's rows (one index per run: a copy per row), and a transposed result */
    {"index_select", F32, I64, 2, {256, 128}, C, 1, {512}, C, -1, {0}, C, 0, 0, C, false},
    {"index_select", TPU_DTYPE_BF16, I32, 2, {50, 33}, C, 1, {70}, C, -1, {0}, C, 0, 0, T, false},
    {"gather", F32, I64, 2, {5, 4}, C, 2, {5, 6}, C, -1, {0}, C, 1, 0, C, false},
    {"gather", TPU_DTYPE_I16, I64, 3, {4, 5, 6}, T, 3, {3, 7, 2}, P, -1, {0}, C, 1, 0, P, false},
    {"gather", TPU_DTYPE_BF16, I32, 2, {6, 3}, P, 2, {9, 2}, T, -1, {0}, C, 0, 0, C, false},
    {"gather", F32, I64, 2, {200, 300}, C, 2, {200, 300}, T, -1, {0}, C, 1, 0, C, false},
    /* an empty index of another dtype and rank (PyTorch checks neither then) */
    {"gather", F32, TPU_DTYPE_U8, 1, {5}, C, 2, {2, 0}, C, -1, {0}, C, 0, 0, C, false},
    {"scatter", F32, I64, 2, {5, 4}, C, 2, {3, 4}, C, 2, {3, 5}, C, 0, 0, C, false},
    {"scatter", TPU_DTYPE_U8, I64, 3, {4, 5, 6}, P, 3, {4, 3, 6}, T, 3, {4, 4, 6}, P, 1, 0, T,
     false},
    {"scatter", F32, I64, 2, {5, 4}, T, 2, {5, 4}, C, 2, {5, 4}, C, -1, 0, C, true},
    {"scatter_value", F32, I64, 2, {5, 4}, C, 2, {2, 3}, P, -1, {0}, C, 1, 2.5, C, false},
    {"scatter_value", I32, I64, 2, {5, 4}, P, 2, {5, 2}, C, -1, {0}, C, 0, 7, C, true},
    {"scatter_add", F32, I64, 2, {5, 4}, C, 2, {8, 4}, C, 2, {8, 4}, P, 0, 0, C, false},
    {"scatter_add", TPU_DTYPE_F16, I64, 2, {5, 4}, T, 2, {5, 9}, T, 2, {6, 9}, C, 1, 0, P, false},
    {"scatter_add", I64, I32, 3, {3, 4, 5}, C, 3, {3, 6, 5}, C, 3, {3, 6, 5}, T, 1, 0, C, true},
    {"scatter_add", TPU_DTYPE_I8, I64, 1, {6}, C, 1, {20}, P, 1, {20}, C, 0, 0, C, false},
    {"scatter_add", F32, I64, 2, {5, 40000}, C, 2, {3, 40000}, C, 2, {3, 40000}, C, 0, 0, C,
     false},
    {"index_add", F32, I64, 2, {5, 4}, C, 1, {7}, C, 2, {7, 4}, P, 0, 2, C, false},
    {"index_add", TPU_DTYPE_BF16, I32, 3, {3, 4, 5}, T, 1, {6}, P, 3, {3, 6, 5}, C, 1, -1, P,
     false},
    {"index_add", I32, I64, 2, {4, 6}, P, 1, {9}, C, 2, {4, 9}, T, -1, 3, C, true},
    {"index_add", TPU_DTYPE_F64, I64, 2, {4, 6}, C, 1, {0}, C, 2, {0, 6}, C, 0, 1, C, false},
};

#undef F32
#undef I64
#undef I32
#undef C
#undef T
#undef P

TEST(index_matches_reference) {
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) {
    const ix_case_t* c = &k_cases[i];
    const tpu_op_def_t* def = tt_def(c->op);
    if (!def) continue;
    tt_t self = tt_make(c->dtype, c->self_nd, c->self_sizes, c->self_layout);
    tt_t index = tt_make(c->index_dtype, c->index_nd, c->index_sizes, c->index_layout);
    tt_t src = {0};
    tt_fill_ints(&self.view, 10 + i, -5, 5);
    int64_t dim = c->dim < 0 ? c->dim + (c->self_nd ? c->self_nd : 1) : c->dim;
    int64_t bound = c->self_nd ? c->self_sizes[dim] : 1;
    tt_fill_ints(&index.view, 20 + i, 0, (int)bound - 1);
    tpu_value_t in[3] = {tt_value(&self.view), tt_value(&index.view)};
    int32_t nin = 2;
    if (c->src_nd >= 0) {
      src = tt_make(c->dtype, c->src_nd, c->src_sizes, c->src_layout);
      tt_fill_ints(&src.view, 30 + i, -5, 5);
      in[nin++] = tt_value(&src.view);
    } else if (strcmp(c->op, "scatter_value") == 0) {
      in[nin].kind = TPU_VALUE_SCALAR;
      in[nin].u.scalar.dtype = TPU_DTYPE_F64;
      in[nin++].u.scalar.v.f = c->scalar;
    }
    tpu_attr_t attrs[2] = {tt_int(c->dim), tt_float(c->scalar)};
    if (!tpu_dtype_is_floating(c->dtype)) attrs[1] = tt_int((int64_t)c->scalar);
    int32_t nattrs = strcmp(c->op, "index_add") == 0 ? 2 : 1;
    double tol = c->dtype == TPU_DTYPE_BF16 ? 1e-2 : c->dtype == TPU_DTYPE_F16 ? 1e-3 : 0;
    double worst = run_node(def, in, nin, attrs, nattrs, c->out_layout, c->inplace);
    if (!(worst <= tol))
      tpu_test_fail(__FILE__, __LINE__, "case %zu (%s %s): diff %g", i, c->op,
                    tpu_dtype_name(c->dtype), worst);
    tt_free(&self);
    tt_free(&index);
    tt_free(&src);
  }
}

TEST(index_embedding_backward_matches_reference) {
  const tpu_op_def_t* def = tt_def("embedding_dense_backward");
  if (!def) return;
  static const struct {
    tpu_dtype_t dtype, index_dtype;
    int32_t index_nd;
    int64_t index_sizes[2];
    int64_t dim, num_weights, padding_idx;
    bool scale;
    int grad_layout, out_layout;
  } cases[] = {
      {TPU_DTYPE_F32, TPU_DTYPE_I64, 2, {3, 4}, 5, 6, -1, false, TT_CONTIG, TT_CONTIG},
      {TPU_DTYPE_F32, TPU_DTYPE_I64, 2, {3, 4}, 5, 6, 2, true, TT_PADDED, TT_TRANSPOSED},
      {TPU_DTYPE_F16, TPU_DTYPE_I32, 1, {9}, 3, 4, 0, true, TT_CONTIG, TT_CONTIG},
      {TPU_DTYPE_F64, TPU_DTYPE_I64, 1, {50}, 40000, 3, -1, false, TT_CONTIG, TT_CONTIG},
      {TPU_DTYPE_BF16, TPU_DTYPE_I64, 0, {0}, 7, 3, -1, true, TT_CONTIG, TT_PADDED},
      {TPU_DTYPE_F32, TPU_DTYPE_I64, 1, {0}, 4, 3, -1, false, TT_CONTIG, TT_CONTIG},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    int64_t gsizes[3];
    int32_t nd = cases[i].index_nd;
    memcpy(gsizes, cases[i].index_sizes, sizeof(int64_t) * (size_t)nd);
    gsizes[nd] = cases[i].dim;
    tt_t grad = tt_make(cases[i].dtype, nd + 1, gsizes, cases[i].grad_layout);
    tt_t idx = tt_make(cases[i].index_dtype, nd, cases[i].index_sizes, TT_CONTIG);
    tt_fill_ints(&grad.view, 40 + i, -3, 3);
    tt_fill_ints(&idx.view, 50 + i, 0, (int)cases[i].num_weights - 1);
    tpu_value_t in[2] = {tt_value(&grad.view), tt_value(&idx.view)};
    tpu_attr_t attrs[3] = {tt_int(cases[i].num_weights), tt_int(cases[i].padding_idx),
                           tt_bool(cases[i].scale)};
    double tol = cases[i].dtype == TPU_DTYPE_BF16 ? 1e-2 : cases[i].dtype == TPU_DTYPE_F16 ? 1e-3 : 1e-6;
    double worst = run_node(def, in, 2, attrs, 3, cases[i].out_layout, false);
    if (!(worst <= tol)) tpu_test_fail(__FILE__, __LINE__, "embedding case %zu: diff %g", i, worst);
    tt_free(&grad);
    tt_free(&idx);
  }
}

TEST(index_cat_matches_reference) {
  const tpu_op_def_t* def = tt_def("cat");
  if (!def) return;
  int64_t s23[2] = {2, 3}, s43[2] = {4, 3}, s0[1] = {0}, s25[2] = {2, 5};
  tt_t a = tt_make(TPU_DTYPE_I32, 2, s23, TT_CONTIG);
  tt_t b = tt_make(TPU_DTYPE_F16, 2, s43, TT_TRANSPOSED);
  tt_t e = tt_make(TPU_DTYPE_F32, 1, s0, TT_CONTIG);
  tt_t c = tt_make(TPU_DTYPE_I64, 2, s25, TT_PADDED);
  tt_fill_ints(&a.view, 1, -9, 9), tt_fill_ints(&b.view, 2, -9, 9), tt_fill_ints(&c.view, 3, -9, 9);
  /* int32 + float16 + a skipped float32 legacy empty: float32, as in PyTorch */
  tpu_value_t in[3] = {tt_value(&a.view), tt_value(&e.view), tt_value(&b.view)};
  tpu_attr_t dim0 = tt_int(0), dim1 = tt_int(-1);
  tpu_node_t node = {.op = tpu_op_lookup("cat"), .num_inputs = 3, .num_attrs = 1, .inputs = in};
  node.attrs[0] = dim0;
  tpu_view_t shape;
  CHECK_OK(def->infer(def, &node, &shape));
  CHECK(shape.dtype == TPU_DTYPE_F32 && shape.ndim == 2 && shape.sizes[0] == 6 &&
        shape.sizes[1] == 3);
  CHECK(run_node(def, in, 3, &dim0, 1, TT_PADDED, false) == 0);
  in[1] = tt_value(&c.view); /* along the last dim, with a non-contiguous output */
  in[2] = tt_value(&a.view);
  CHECK(run_node(def, in, 3, &dim1, 1, TT_TRANSPOSED, false) == 0);
  node.num_inputs = 2;
  in[0] = tt_value(&a.view), in[1] = tt_value(&b.view);
  node.attrs[0] = dim1;
  tpu_status_t st = def->check(def, &node);
  CHECK(tpu_status_code(st) == TPU_CODE_INVALID_ARGUMENT);
  CHECK(st && strstr(tpu_status_message(st), "Sizes of tensors must match except in dimension 1"));
  tpu_status_free(st);
  in[0] = tt_value(&e.view), in[1] = tt_value(&e.view); /* only legacy empties: [0] */
  CHECK_OK(def->infer(def, &node, &shape));
  CHECK(shape.ndim == 1 && shape.sizes[0] == 0);
  node.num_inputs = 0;
  CHECK_CODE(def->check(def, &node), TPU_CODE_INVALID_ARGUMENT);
  tt_free(&a), tt_free(&b), tt_free(&c), tt_free(&e);
}

/* Runs a kernel expected to fail with `code` and a message containing `text`. */
static void expect_kernel_error(const char* op, tpu_value_t* in, int32_t nin, tpu_attr_t* attrs,
                                int32_t nattrs, tt_t* out, tpu_status_code_t code,
                                const char* text) {
  const tpu_op_def_t* def = tt_def(op);
  if (!def) return;
  tpu_node_t node = {.op = tpu_op_lookup(op), .num_inputs = nin, .num_outputs = 1,
                     .num_attrs = nattrs, .inputs = in, .outputs = &out->view};
  memcpy(node.attrs, attrs, sizeof(tpu_attr_t) * (size_t)nattrs);
  tpu_exec_ctx_t ctx = {0};
  tpu_status_t st = def->kernel(def, &node, &ctx);
  if (tpu_status_code(st) != code || !strstr(tpu_status_message(st), text))
    tpu_test_fail(__FILE__, __LINE__, "%s: got %s \"%s\", want \"%s\"", op,
                  tpu_status_code_name(tpu_status_code(st)), tpu_status_message(st), text);
  tpu_status_free(st);
}

/* PyTorch raises IndexError for index_select/index_add/embedding and
 * RuntimeError (INVALID_ARGUMENT) for gather/scatter. */
TEST(index_out_of_range_errors) {
  int64_t s5[1] = {5}, s1[1] = {1}, s2[1] = {2}, s54[2] = {5, 4}, s14[2] = {1, 4};
  tt_t self = tt_make(TPU_DTYPE_F32, 1, s5, TT_CONTIG), out = tt_make(TPU_DTYPE_F32, 1, s1, 0);
  tt_t out5 = tt_make(TPU_DTYPE_F32, 1, s5, TT_CONTIG), idx = tt_make(TPU_DTYPE_I64, 1, s1, 0);
  tt_t src = tt_make(TPU_DTYPE_F32, 1, s1, TT_CONTIG), idx2 = tt_make(TPU_DTYPE_I64, 1, s2, 0);
  tt_t m = tt_make(TPU_DTYPE_F32, 2, s54, TT_CONTIG), g = tt_make(TPU_DTYPE_F32, 2, s14, 0);
  tt_t w = tt_make(TPU_DTYPE_F32, 2, s54, TT_CONTIG);
  tt_set(&idx.view, 0, 7);
  tt_set(&idx2.view, 0, 1), tt_set(&idx2.view, 1, -1);
  tt_fill_value(&out5.view, 3);
  tpu_value_t in[3] = {tt_value(&self.view), tt_value(&idx.view), tt_value(&src.view)};
  tpu_attr_t a[3] = {tt_int(0), tt_int(5), tt_int(-1)};
  const char* msg = "index 7 is out of bounds for dimension 0 with size 5";
  expect_kernel_error("index_select", in, 2, a, 1, &out, TPU_CODE_INDEX_ERROR, msg);
  expect_kernel_error("gather", in, 2, a, 1, &out, TPU_CODE_INVALID_ARGUMENT, msg);
  expect_kernel_error("scatter", in, 3, a, 1, &out5, TPU_CODE_INVALID_ARGUMENT, msg);
  expect_kernel_error("scatter_add", in, 3, a, 1, &out5, TPU_CODE_INVALID_ARGUMENT, msg);
  expect_kernel_error("index_add", in, 3, a, 1, &out5, TPU_CODE_INDEX_ERROR, msg);
  /* out = self, then nothing written */
  CHECK(tt_get(&out5.view, 0) == 0 && tt_get(&out5.view, 4) == 0);
  in[1] = tt_value(&idx2.view);
  expect_kernel_error("index_select", in, 2, a, 1, &out, TPU_CODE_INVALID_ARGUMENT, "wrong shape");
  tt_t out2 = tt_make(TPU_DTYPE_F32, 1, s2, TT_CONTIG);
  expect_kernel_error("index_select", in, 2, a, 1, &out2, TPU_CODE_INDEX_ERROR,
                      "index -1 is out of bounds for dimension 0 with size 5");
  in[0] = tt_value(&g.view), in[1] = tt_value(&idx.view); /* embedding: index 7 of 5 weights */
  expect_kernel_error("embedding_dense_backward", in, 2, &a[1], 2, &w, TPU_CODE_INVALID_ARGUMENT,
                      "attrs");
  tpu_attr_t ea[3] = {tt_int(5), tt_int(-1), tt_bool(false)};
  expect_kernel_error("embedding_dense_backward", in, 2, ea, 3, &w, TPU_CODE_INDEX_ERROR, msg);
  in[0] = tt_value(&m.view);
  tpu_attr_t bad_dim = tt_int(2);
  expect_kernel_error("gather", in, 2, &bad_dim, 1, &out, TPU_CODE_INDEX_ERROR,
                      "Dimension out of range (expected to be in range of [-2, 1], but got 2)");
  tt_free(&self), tt_free(&out), tt_free(&out5), tt_free(&idx), tt_free(&src), tt_free(&idx2);
  tt_free(&m), tt_free(&g), tt_free(&w), tt_free(&out2);
}

TEST(index_shape_errors_and_checks) {
  const tpu_op_def_t* gather = tt_def("gather");
  const tpu_op_def_t* scatter = tt_def("scatter");
  if (!gather || !scatter) return;
  int64_t s34[2] = {3, 4}, s42[2] = {4, 2}, s22[2] = {2, 2}, s32[2] = {3, 2};
  tt_t self = tt_make(TPU_DTYPE_F32, 2, s34, TT_CONTIG), big = tt_make(TPU_DTYPE_I64, 2, s42, 0);
  tt_t src = tt_make(TPU_DTYPE_F32, 2, s22, TT_CONTIG), idx = tt_make(TPU_DTYPE_I64, 2, s32, 0);
  tt_t fidx = tt_make(TPU_DTYPE_F32, 2, s32, TT_CONTIG), dsrc = tt_make(TPU_DTYPE_F64, 2, s32, 0);
  tpu_value_t in[3] = {tt_value(&self.view), tt_value(&big.view), tt_value(&src.view)};
  tpu_node_t node = {.op = tpu_op_lookup("gather"), .num_inputs = 2, .num_attrs = 1, .inputs = in};
  node.attrs[0] = tt_int(1);
  tpu_status_t st = gather->check(gather, &node);
  CHECK(st && strstr(tpu_status_message(st),
                     "expected index [4, 2] to be no larger than self [3, 4] apart from "
                     "dimension 1"));
  tpu_status_free(st);
  node.num_inputs = 3;
  in[1] = tt_value(&idx.view);
  st = scatter->check(scatter, &node);
  CHECK(st && strstr(tpu_status_message(st), "to be no larger size than src [2, 2]"));
  tpu_status_free(st);
  in[2] = tt_value(&dsrc.view); /* dtype mismatch: PyTorch's CPU kernel reports it */
  CHECK_CODE(scatter->check(scatter, &node), TPU_CODE_UNIMPLEMENTED);
  in[1] = tt_value(&fidx.view);
  node.num_inputs = 2;
  CHECK_CODE(gather->check(gather, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&self), tt_free(&big), tt_free(&src), tt_free(&idx), tt_free(&fidx), tt_free(&dsrc);
}
