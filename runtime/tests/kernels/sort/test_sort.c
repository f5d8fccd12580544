/* test_sort.c — the sort family against its reference kernel.
 *
 * sort_cases: (op, dtype, shape, layout, attrs) run through the optimised
 * kernel and the reference. Values must be equal; indices must be equal where
 * the order is unique (stable sort, median/nanmedian with their index
 * tie-break), and elsewhere (unstable sort, topk, kthvalue, mode: CPU's
 * algorithms order ties their own way) must point at their value along dim.
 * sort_pinned holds tie orders taken from PyTorch CPU; search_cases checks
 * searchsorted/bucketize; sort_semantics pins shapes and fallbacks.
 */
#include "kernels/sort/sort.h"

#include "kernel_test_util.h"

#define F32 TPU_DTYPE_F32
#define F64 TPU_DTYPE_F64
#define F16 TPU_DTYPE_F16
#define BF16 TPU_DTYPE_BF16
#define I64 TPU_DTYPE_I64
#define I32 TPU_DTYPE_I32
#define I8 TPU_DTYPE_I8
#define U8 TPU_DTYPE_U8
#define BOOL TPU_DTYPE_BOOL

typedef struct sort_case {
  const char* op;
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t sizes[3];
  tt_layout_t layout;
  int32_t nattrs;
  tpu_attr_t attrs[4];
  double nan_rate;
  bool ties; /* small integer values */
  bool strided_out;
} sort_case_t;

#define A_INT(v) {.kind = TPU_ATTR_INT, .u.i = (v)}
#define A_BOOL(v) {.kind = TPU_ATTR_BOOL, .u.i = (v)}
#define A_NONE {.kind = TPU_ATTR_NONE}

static const sort_case_t k_cases[] = {
    /* sort: stable, dim, descending */
    {"sort", F32, 2, {5, 40}, TT_CONTIG, 3, {A_BOOL(0), A_INT(-1), A_BOOL(0)}, 0.1, false, false},
    {"sort", F32, 2, {5, 40}, TT_CONTIG, 3, {A_BOOL(1), A_INT(1), A_BOOL(1)}, 0.1, true, false},
    {"sort", F64, 3, {3, 50, 4}, TT_REVERSED, 3, {A_BOOL(1), A_INT(1), A_BOOL(0)}, 0.0, true, true},
    {"sort", I64, 2, {6, 300}, TT_TRANSPOSED, 3, {A_BOOL(0), A_INT(1), A_BOOL(1)}, 0.0, true, false},
    {"sort", BF16, 2, {7, 33}, TT_PADDED, 3, {A_BOOL(0), A_INT(0), A_BOOL(0)}, 0.05, true, true},
    {"sort", F16, 1, {1000}, TT_CONTIG, 3, {A_BOOL(1), A_INT(0), A_BOOL(1)}, 0.02, false, false},
    {"sort", I8, 1, {40000}, TT_CONTIG, 3, {A_BOOL(0), A_INT(0), A_BOOL(0)}, 0.0, true, false},
    {"sort", BOOL, 2, {4, 30}, TT_CONTIG, 3, {A_BOOL(1), A_INT(1), A_BOOL(1)}, 0.0, true, false},
    {"sort", F32, 2, {4, 0}, TT_CONTIG, 3, {A_BOOL(0), A_INT(1), A_BOOL(0)}, 0.0, false, false},
    /* topk: k, dim, largest, sorted */
    {"topk", F32, 2, {6, 100}, TT_CONTIG, 4, {A_INT(5), A_INT(1), A_BOOL(1), A_BOOL(1)}, 0.05, false, false},
    {"topk", F64, 2, {30, 7}, TT_TRANSPOSED, 4, {A_INT(3), A_INT(0), A_BOOL(0), A_BOOL(1)}, 0.0, true, true},
    {"topk", I32, 2, {4, 500}, TT_CONTIG, 4, {A_INT(60), A_INT(1), A_BOOL(1), A_BOOL(0)}, 0.0, true, false},
    {"topk", BF16, 3, {2, 3, 64}, TT_REVERSED, 4, {A_INT(2), A_INT(-1), A_BOOL(0), A_BOOL(1)}, 0.1, false, false},
    {"topk", F32, 2, {3, 700}, TT_TRANSPOSED, 4, {A_INT(4), A_INT(1), A_BOOL(1), A_BOOL(1)}, 0.01, true, false},
    {"topk", F64, 2, {3, 700}, TT_CONTIG, 4, {A_INT(5), A_INT(-1), A_BOOL(0), A_BOOL(1)}, 0.0, false, true},
    {"topk", F32, 1, {9}, TT_CONTIG, 4, {A_INT(0), A_INT(0), A_BOOL(1), A_BOOL(1)}, 0.0, false, false},
    /* kthvalue: k, dim, keepdim */
    {"kthvalue", F32, 2, {5, 31}, TT_CONTIG, 3, {A_INT(7), A_INT(1), A_BOOL(0)}, 0.1, false, false},
    {"kthvalue", I64, 3, {3, 20, 5}, TT_GAPS, 3, {A_INT(20), A_INT(1), A_BOOL(1)}, 0.0, true, true},
    {"kthvalue", F16, 1, {17}, TT_CONTIG, 3, {A_INT(1), A_INT(0), A_BOOL(0)}, 0.0, true, false},
    /* median.dim / nanmedian.dim: dim, keepdim */
    {"median_dim", F32, 2, {8, 21}, TT_CONTIG, 2, {A_INT(1), A_BOOL(0)}, 0.03, false, false},
    {"median_dim", F64, 2, {30, 6}, TT_TRANSPOSED, 2, {A_INT(0), A_BOOL(1)}, 0.0, true, true},
    {"median_dim", I8, 3, {2, 3, 40}, TT_REVERSED, 2, {A_INT(-1), A_BOOL(0)}, 0.0, true, false},
    {"nanmedian_dim", F32, 2, {8, 21}, TT_CONTIG, 2, {A_INT(1), A_BOOL(0)}, 0.2, false, false},
    {"nanmedian_dim", BF16, 2, {30, 6}, TT_PADDED, 2, {A_INT(0), A_BOOL(1)}, 0.2, true, false},
    /* mode: dim, keepdim */
    {"mode", F32, 2, {6, 50}, TT_CONTIG, 2, {A_INT(1), A_BOOL(0)}, 0.0, true, false},
    {"mode", TPU_DTYPE_I16, 2, {40, 3}, TT_TRANSPOSED, 2, {A_INT(0), A_BOOL(1)}, 0.0, true, true},
    {"mode", BOOL, 1, {25}, TT_CONTIG, 2, {A_INT(0), A_BOOL(0)}, 0.0, true, false},
    /* median / nanmedian of everything */
    {"median", F32, 2, {9, 13}, TT_TRANSPOSED, 0, {A_NONE}, 0.0, false, false},
    {"median", F32, 2, {9, 13}, TT_CONTIG, 0, {A_NONE}, 0.01, false, false},
    {"median", I32, 1, {10}, TT_CONTIG, 0, {A_NONE}, 0.0, true, false},
    {"nanmedian", F64, 2, {9, 13}, TT_REVERSED, 0, {A_NONE}, 0.3, false, false},
    {"nanmedian", F16, 1, {0}, TT_CONTIG, 0, {A_NONE}, 0.0, false, false},
};

/* Whether the case's indices are unique given the values. */
static bool exact_indices(const sort_case_t* c) {
  const char* op = c->op;
  if (strcmp(op, "sort") == 0) return c->attrs[0].u.i || (!c->ties && c->nan_rate == 0.0);
  if (strcmp(op, "median_dim") == 0 || strcmp(op, "nanmedian_dim") == 0) return true;
  return !c->ties && c->nan_rate == 0.0;
}

/* Checks that every index points, along dim, at its value. */
static void check_points(const char* what, const tpu_view_t* in, const tpu_view_t* val,
                         const tpu_view_t* idx, int32_t dim) {
  int32_t nd = in->ndim;
  int64_t c[TPU_MAX_DIMS], numel = tpu_view_numel(val);
  for (int64_t q = 0; q < numel; ++q) {
    int64_t rem = q, oc[TPU_MAX_DIMS];
    for (int32_t d = val->ndim - 1; d >= 0; --d) oc[d] = rem % val->sizes[d], rem /= val->sizes[d];
    int32_t k = 0;
    for (int32_t d = 0; d < nd; ++d) c[d] = (val->ndim == nd || d != dim) ? oc[k++] : 0;
    int64_t i = tt_get(idx, q);
    if (i < 0 || (nd && i >= in->sizes[dim])) {
      tpu_test_fail(__FILE__, __LINE__, "%s: index %lld out of range", what, (long long)i);
      return;
    }
    if (nd) c[dim] = i;
    int64_t off = 0;
    for (int32_t d = 0; d < nd; ++d) off += c[d] * in->strides[d];
    double want = view_get_f64(in, off), got = tt_get(val, q);
    if (!(got == want || (isnan(got) && isnan(want)))) {
      tpu_test_fail(__FILE__, __LINE__, "%s: element %lld: index %lld holds %g, value %g", what,
                    (long long)q, (long long)i, want, got);
      return;
    }
  }
}

TEST(sort_cases) {
  for (size_t ci = 0; ci < sizeof(k_cases) / sizeof(k_cases[0]); ++ci) {
    const sort_case_t* c = &k_cases[ci];
    const tpu_op_def_t* def = tt_def(c->op);
    if (!def) continue;
    char what[96];
    snprintf(what, sizeof(what), "case %zu (%s %s)", ci, c->op, tpu_dtype_name(c->dtype));
    tt_t x = tt_make(c->dtype, c->ndim, c->sizes, c->layout);
    if (c->ties) tt_fill_ints(&x.view, 7 + ci, -3, 3);
    else tt_fill(&x.view, -5, 5, c->nan_rate);
    if (c->ties && c->nan_rate > 0)
      for (int64_t k = 0; k < tpu_view_numel(&x.view); k += 5) tt_set(&x.view, k, NAN);
    if (c->dtype == BOOL) tt_fill(&x.view, 0, 2, 0);
    tpu_value_t in[1] = {tt_value(&x.view)};
    tpu_node_t node = tt_node(in, 1, NULL, 0, c->attrs, c->nattrs);
    tpu_view_t shapes[2];
    CHECK_OK(def->infer(def, &node, shapes));
    CHECK_OK(def->check(def, &node));
    int nout = tpu_spec_count(def->outputs);
    tt_t got[2], want[2];
    tpu_view_t gv[2], wv[2];
    for (int i = 0; i < nout; ++i) {
      got[i] = tt_like(&shapes[i], c->strided_out ? TT_GAPS : TT_CONTIG);
      want[i] = tt_like(&shapes[i], TT_CONTIG);
      gv[i] = got[i].view;
      wv[i] = want[i].view;
    }
    node = tt_node(in, 1, gv, nout, c->attrs, c->nattrs);
    CHECK_OK(def->check(def, &node));
    CHECK_OK(tt_run(def->kernel, def, &node));
    node = tt_node(in, 1, wv, nout, c->attrs, c->nattrs);
    CHECK_OK(tt_run(tpu_sort_reference, def, &node));
    tt_compare(what, &gv[0], &wv[0], 0.0);
    if (nout == 2) {
      if (exact_indices(c)) tt_compare(what, &gv[1], &wv[1], 0.0);
      sort_args_t a;
      CHECK_OK(tpu_sort_parse(def, &node, &a));
      check_points(what, &x.view, &gv[0], &gv[1], a.dim);
    }
    for (int i = 0; i < nout; ++i) {
      tt_free(&got[i]);
      tt_free(&want[i]);
    }
    tt_free(&x);
  }
}

/* Tie orders of PyTorch 2.13 CPU (libstdc++'s introsort/heap select/introselect). */
TEST(sort_pinned) {
  static const double xs[20] = {1, 0, 2, 2, 1, 2, 1, 1, 0, 2, 1, 0, 2, 0, 0, 1, 2, 0, 2, 1};
  static const int64_t asc[20] = {1, 17, 14, 13, 11, 8, 19, 0, 15, 10,
                                  7, 6,  4,  9,  12, 5, 16, 3, 18, 2};
  static const int64_t desc[20] = {2, 3, 18, 5, 16, 12, 9, 10, 19, 15,
                                   0, 7, 6,  4, 11, 8,  13, 14, 17, 1};
  static const int64_t top_large[5] = {5, 9, 12, 16, 3}, top_small[5] = {11, 14, 13, 1, 8};
  int64_t n20 = 20, n5 = 5, one = 1;
  tt_t x = tt_make(F32, 1, &n20, TT_CONTIG);
  for (int k = 0; k < 20; ++k) tt_set(&x.view, k, xs[k]);
  tt_t v = tt_make(F32, 1, &n20, TT_CONTIG), i = tt_make(I64, 1, &n20, TT_CONTIG);
  tpu_value_t in[1] = {tt_value(&x.view)};
  tpu_view_t outs[2] = {v.view, i.view};
  const tpu_op_def_t* sort = tt_def("sort");
  for (int d = 0; d < 2 && sort; ++d) {
    tpu_attr_t at[3] = {tt_bool(false), tt_int(0), tt_bool(d == 1)};
    tpu_node_t node = tt_node(in, 1, outs, 2, at, 3);
    CHECK_OK(tt_run(sort->kernel, sort, &node));
    for (int k = 0; k < 20; ++k) CHECK(tt_get(&i.view, k) == (d ? desc : asc)[k]);
  }
  const tpu_op_def_t* topk = tt_def("topk");
  outs[0].sizes[0] = outs[1].sizes[0] = n5;
  for (int l = 0; l < 2 && topk; ++l) {
    tpu_attr_t at[4] = {tt_int(5), tt_int(0), tt_bool(l == 0), tt_bool(true)};
    tpu_node_t node = tt_node(in, 1, outs, 2, at, 4);
    CHECK_OK(tt_run(topk->kernel, topk, &node));
    for (int k = 0; k < 5; ++k) CHECK(tt_get(&i.view, k) == (l ? top_small : top_large)[k]);
  }
  /* kthvalue(x, 10) -> (1, 0); mode -> (1, 4); median(x, 0) -> (1, 7). */
  const char* ops[3] = {"kthvalue", "mode", "median_dim"};
  const int64_t want_idx[3] = {0, 4, 7};
  outs[0].ndim = outs[1].ndim = 0;
  for (int o = 0; o < 3; ++o) {
    const tpu_op_def_t* def = tt_def(ops[o]);
    if (!def) continue;
    tpu_attr_t at[3] = {tt_int(10), tt_int(0), tt_bool(false)};
    tpu_node_t node = o == 0 ? tt_node(in, 1, outs, 2, at, 3) : tt_node(in, 1, outs, 2, at + 1, 2);
    CHECK_OK(tt_run(def->kernel, def, &node));
    CHECK(tt_get(&v.view, 0) == 1.0);
    CHECK(tt_get(&i.view, 0) == want_idx[o]);
  }
  (void)one;
  tt_free(&x);
  tt_free(&v);
  tt_free(&i);
}

TEST(search_cases) {
  const tpu_op_def_t* ss = tt_def("searchsorted");
  const tpu_op_def_t* bk = tt_def("bucketize");
  if (!ss || !bk) return;
  tpu_dtype_t dts[4] = {F32, I64, F16, F64};
  for (int di = 0; di < 4; ++di) {
    for (int right = 0; right < 2; ++right) {
      int64_t bsz[2] = {3, 17}, xsz[2] = {3, 40};
      tt_t b = tt_make(dts[di], 2, bsz, TT_CONTIG), x = tt_make(dts[di], 2, xsz, TT_TRANSPOSED);
      for (int r = 0; r < 3; ++r)
        for (int k = 0; k < 17; ++k) tt_set(&b.view, r * 17 + k, (double)(k / 2 + r));
      tt_fill_ints(&x.view, 11 + di, -2, 12);
      tpu_attr_t at[3] = {tt_bool(false), tt_bool(right), tt_none()};
      for (int one_d = 0; one_d < 2; ++one_d) {
        tpu_view_t bv = b.view;
        if (one_d) bv.ndim = 1, bv.sizes[0] = 17, bv.strides[0] = 1;
        tpu_value_t in[3] = {tt_value(&bv), tt_value(&x.view), tt_value(NULL)};
        tt_t got = tt_make(I64, 2, xsz, TT_GAPS), want = tt_make(I64, 2, xsz, TT_CONTIG);
        tpu_view_t gv = got.view, wv = want.view;
        tpu_node_t node = tt_node(in, 3, &gv, 1, at, 3);
        CHECK_OK(ss->check(ss, &node));
        CHECK_OK(tt_run(ss->kernel, ss, &node));
        node = tt_node(in, 3, &wv, 1, at, 3);
        CHECK_OK(tt_run(tpu_sort_reference, ss, &node));
        tt_compare("searchsorted", &gv, &wv, 0.0);
        if (one_d) { /* bucketize(x, boundaries) equals searchsorted(boundaries, x) */
          tpu_value_t bin[2] = {tt_value(&x.view), tt_value(&bv)};
          node = tt_node(bin, 2, &gv, 1, at, 2);
          CHECK_OK(tt_run(bk->kernel, bk, &node));
          tt_compare("bucketize", &gv, &wv, 0.0);
        }
        tt_free(&got);
        tt_free(&want);
      }
      tt_free(&b);
      tt_free(&x);
    }
  }
}

TEST(sort_semantics) {
  const tpu_op_def_t* topk = tt_def("topk");
  const tpu_op_def_t* kth = tt_def("kthvalue");
  const tpu_op_def_t* med = tt_def("median_dim");
  if (!topk || !kth || !med) return;
  int64_t s[2] = {3, 5};
  tt_t x = tt_make(F32, 2, s, TT_CONTIG), b = tt_make(BOOL, 2, s, TT_CONTIG);
  tpu_value_t in[1] = {tt_value(&x.view)};
  tpu_view_t shapes[2];
  tpu_attr_t at[4] = {tt_int(6), tt_int(1), tt_bool(true), tt_bool(true)};
  tpu_node_t node = tt_node(in, 1, NULL, 0, at, 4);
  CHECK_CODE(topk->check(topk, &node), TPU_CODE_UNIMPLEMENTED); /* k > n */
  node.attrs[0] = tt_int(2);
  CHECK_OK(topk->infer(topk, &node, shapes));
  CHECK(shapes[0].sizes[1] == 2 && shapes[1].dtype == I64);
  node.attrs[1] = tt_int(2);
  CHECK_CODE(topk->check(topk, &node), TPU_CODE_UNIMPLEMENTED); /* dim out of range */
  CHECK_CODE(tpu_sort_parse(topk, &node, &(sort_args_t){0}), TPU_CODE_INDEX_ERROR);
  tpu_attr_t kat[3] = {tt_int(0), tt_int(1), tt_bool(false)};
  node = tt_node(in, 1, NULL, 0, kat, 3);
  CHECK_CODE(kth->check(kth, &node), TPU_CODE_UNIMPLEMENTED); /* k < 1 */
  in[0] = tt_value(&b.view);
  tpu_attr_t mat[2] = {tt_int(0), tt_bool(true)};
  node = tt_node(in, 1, NULL, 0, mat, 2);
  CHECK_CODE(med->check(med, &node), TPU_CODE_UNIMPLEMENTED); /* bool: CPU has no kernel */
  in[0] = tt_value(&x.view);
  CHECK_OK(med->infer(med, &node, shapes));
  CHECK(shapes[0].ndim == 2 && shapes[0].sizes[0] == 1 && shapes[0].sizes[1] == 5);
  tt_free(&x);
  tt_free(&b);
}

/* randperm: a permutation, a function of (seed, offset) only. */
TEST(randperm_cases) {
  const tpu_op_def_t* def = tt_def("randperm");
  if (!def) return;
  int64_t sizes[4] = {0, 1, 100, 5000};
  for (int si = 0; si < 4; ++si) {
    int64_t n = sizes[si];
    tt_t a = tt_make(I64, 1, &n, TT_CONTIG), b = tt_make(I64, 1, &n, TT_GAPS);
    tt_t c = tt_make(F32, 1, &n, TT_CONTIG);
    tpu_attr_t at[3] = {tt_int(n), tt_int(42), tt_int(7)};
    tpu_node_t node = tt_node(NULL, 0, &a.view, 1, at, 3);
    CHECK_OK(def->check(def, &node));
    CHECK_OK(tt_run(def->kernel, def, &node));
    node = tt_node(NULL, 0, &b.view, 1, at, 3);
    CHECK_OK(tt_run(def->kernel, def, &node));
    at[1] = tt_int(43);
    node = tt_node(NULL, 0, &c.view, 1, at, 3);
    CHECK_OK(tt_run(def->kernel, def, &node));
    char* seen = calloc((size_t)(n + 1), 1);
    int64_t same_as_other_seed = 0;
    for (int64_t k = 0; k < n; ++k) {
      int64_t v = (int64_t)tt_get(&a.view, k);
      CHECK(v >= 0 && v < n && !seen[v]);
      if (v >= 0 && v < n) seen[v] = 1;
      CHECK(tt_get(&b.view, k) == v); /* reproducible, whatever the strides */
      same_as_other_seed += tt_get(&c.view, k) == v;
    }
    if (n >= 100) CHECK(same_as_other_seed < n / 10);
    free(seen);
    tt_free(&a);
    tt_free(&b);
    tt_free(&c);
  }
  int64_t n = 300;
  tt_t i8 = tt_make(I8, 1, &n, TT_CONTIG);
  tpu_attr_t at[3] = {tt_int(n), tt_int(1), tt_int(0)};
  tpu_node_t node = tt_node(NULL, 0, &i8.view, 1, at, 3);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED); /* 299 does not fit int8 */
  tt_free(&i8);
}

TEST(multinomial_cases) {
  const tpu_op_def_t* def = tt_def("multinomial");
  if (!def) return;
  int64_t ps[2] = {3, 8}, os[2] = {3, 5}, big[2] = {3, 4000};
  tt_t p = tt_make(F32, 2, ps, TT_CONTIG);
  for (int64_t k = 0; k < 24; ++k) tt_set(&p.view, k, (k % 8) % 3 == 0 ? 0.0 : (double)(k % 5 + 1));
  tpu_value_t in[1] = {tt_value(&p.view)};
  /* Without replacement: distinct, never a zero-probability category. */
  tt_t o = tt_make(I64, 2, os, TT_CONTIG);
  tpu_attr_t at[4] = {tt_int(5), tt_bool(false), tt_int(9), tt_int(0)};
  tpu_node_t node = tt_node(in, 1, &o.view, 1, at, 4);
  CHECK_OK(def->check(def, &node));
  CHECK_OK(tt_run(def->kernel, def, &node));
  for (int r = 0; r < 3; ++r)
    for (int q = 0; q < 5; ++q) {
      int64_t v = (int64_t)tt_get(&o.view, r * 5 + q);
      CHECK(v >= 0 && v < 8 && v % 3 != 0);
      for (int q2 = 0; q2 < q; ++q2) CHECK(tt_get(&o.view, r * 5 + q2) != v);
    }
  /* With replacement: frequencies follow the probabilities. */
  tt_t m = tt_make(I64, 2, big, TT_CONTIG);
  tpu_attr_t at2[4] = {tt_int(4000), tt_bool(true), tt_int(9), tt_int(0)};
  node = tt_node(in, 1, &m.view, 1, at2, 4);
  CHECK_OK(tt_run(def->kernel, def, &node));
  for (int r = 0; r < 3; ++r) {
    double count[8] = {0}, total = 0;
    for (int k = 0; k < 8; ++k) total += tt_get(&p.view, r * 8 + k);
    for (int q = 0; q < 4000; ++q) count[(int)tt_get(&m.view, r * 4000 + q) & 7] += 1;
    for (int k = 0; k < 8; ++k) CHECK_NEAR(count[k] / 4000.0, tt_get(&p.view, r * 8 + k) / total, 0.05);
  }
  /* More samples than categories without replacement: CPU's error. */
  tpu_attr_t at3[4] = {tt_int(9), tt_bool(false), tt_int(9), tt_int(0)};
  node = tt_node(in, 1, NULL, 0, at3, 4);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&p);
  tt_free(&o);
  tt_free(&m);
}
