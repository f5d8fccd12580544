/* test_histogramdd.c — histogramdd's rows (runtime/src/kernels/reduce/histogram.c)
 * against a plain reference.
 *
 * Random samples (M, 3) in several layouts, with and without range, weights and
 * density: the per-dim edges rows give linspace(lo, hi, bins + 1) of the column's
 * min and max (or the range; an empty one widened by 0.5), the counting row's hist
 * equals a linear scan of each sample over those edges (the last edge inclusive,
 * samples outside any dim's edges or NaN skipped), weighted sums and density to
 * rounding, and the bins-tensors row given those edges gives the same hist. Then
 * PyTorch's errors (INVALID_ARGUMENT with its message) and the check's refusals.
 */
#include <math.h>
#include <string.h>

#include "kernel_test_util.h"

enum { DD_N = 3, DD_M = 41 };

/* The reference hist (row-major cells) of x's samples over edges e[d][0..nb[d]]. */
static void reference(const tpu_view_t* x, const tpu_view_t* w, const int64_t* nb,
                      double e[DD_N][8], bool density, double* hist) {
  int64_t cells = nb[0] * nb[1] * nb[2];
  for (int64_t c = 0; c < cells; ++c) hist[c] = 0.0;
  for (int64_t i = 0; i < DD_M; ++i) {
    int64_t cell = 0;
    bool in = true;
    for (int64_t d = 0; d < DD_N && in; ++d) {
      double v = tt_get(x, i * DD_N + d);
      int64_t bin = -1;
      for (int64_t j = 0; j < nb[d]; ++j)
        if (v >= e[d][j] && (v < e[d][j + 1] || (j == nb[d] - 1 && v == e[d][j + 1]))) bin = j;
      in = bin >= 0;
      cell = cell * nb[d] + bin;
    }
    if (in) hist[cell] += w ? tt_get(w, i) : 1.0;
  }
  if (!density) return;
  double total = 0.0;
  for (int64_t c = 0; c < cells; ++c) total += hist[c];
  for (int64_t c = 0; c < cells; ++c) {
    double vol = 1.0;
    for (int64_t d = DD_N - 1, k = c; d >= 0; k /= nb[d], --d)
      vol *= e[d][k % nb[d] + 1] - e[d][k % nb[d]];
    hist[c] = hist[c] / total / vol;
  }
}

static void run(tpu_dtype_t dt, tt_layout_t lay, bool ranged, bool weighted, bool density) {
  const int64_t nb[DD_N] = {4, 1, 5}, xs[2] = {DD_M, DD_N}, ws[1] = {DD_M}, hs[DD_N] = {4, 1, 5};
  const double range[2 * DD_N] = {-1.0, 1.0, 0.25, 0.25, -3.0, 0.5};
  tt_t x = tt_make(dt, 2, xs, lay), w = tt_make(dt, 1, ws, lay);
  tt_t h = tt_make(dt, DD_N, hs, lay), h2 = tt_make(dt, DD_N, hs, TT_CONTIG);
  tt_fill(&x.view, -2.0, 2.0, ranged ? 0.05 : 0.0);
  if (ranged) tt_set(&x.view, 4, INFINITY), tt_set(&x.view, 5, -INFINITY);
  tt_set(&x.view, 7, 0.25); /* on dim 1's empty range, widened */
  tt_fill(&w.view, 0.0, 3.0, 0.0);
  double e[DD_N][8], want[20];
  tt_t et[DD_N];
  /* the edges rows, one node per dim */
  const tpu_op_def_t* edef = tt_def("histogramdd_bin_edges");
  for (int64_t d = 0; d < DD_N; ++d) {
    int64_t es[1] = {nb[d] + 1};
    et[d] = tt_make(dt, 1, es, lay);
    tpu_value_t in[1] = {tt_value(&x.view)};
    tpu_attr_t r = {.kind = TPU_ATTR_FLOATS, .count = 2, .u.floats = {range[2 * d], range[2 * d + 1]}};
    tpu_attr_t at[3] = {tt_int(nb[d]), tt_int(d), ranged ? r : tt_none()};
    tpu_view_t out[1] = {et[d].view};
    tpu_node_t node = tt_node(in, 1, out, 1, at, 3);
    node.op = tpu_op_lookup("histogramdd_bin_edges");
    CHECK_OK(tpu_op_check(&node));
    CHECK_OK(tt_run(edef->kernel, edef, &node));
    double lo = ranged ? range[2 * d] : INFINITY, hi = ranged ? range[2 * d + 1] : -INFINITY;
    for (int64_t i = 0; i < DD_M && !ranged; ++i) {
      double v = tt_get(&x.view, i * DD_N + d);
      lo = v < lo ? v : lo, hi = v > hi ? v : hi;
    }
    if (lo == hi) lo -= 0.5, hi += 0.5;
    for (int64_t j = 0; j <= nb[d]; ++j) {
      e[d][j] = tt_get(&et[d].view, j);
      double ref = (double)(dt == TPU_DTYPE_F32 ? (float)(lo + (hi - lo) * (double)j / (double)nb[d])
                                               : lo + (hi - lo) * (double)j / (double)nb[d]);
      if (fabs(e[d][j] - ref) > 4 * tt_tol(dt) * (fabs(ref) + 1.0))
        tpu_test_fail(__FILE__, __LINE__, "dim %lld edge %lld: %g, want %g", (long long)d,
                      (long long)j, e[d][j], ref);
    }
    CHECK(e[d][0] == (double)(dt == TPU_DTYPE_F32 ? (float)lo : lo));
    CHECK(e[d][nb[d]] == (double)(dt == TPU_DTYPE_F32 ? (float)hi : hi));
  }
  reference(&x.view, weighted ? &w.view : NULL, nb, e, density, want);
  /* the counting row from bin counts */
  const tpu_op_def_t* def = tt_def("histogramdd");
  tpu_value_t none = {.kind = TPU_VALUE_NONE};
  tpu_value_t in[2] = {tt_value(&x.view), weighted ? tt_value(&w.view) : none};
  tpu_attr_t fr = {.kind = TPU_ATTR_FLOATS, .count = 2 * DD_N};
  memcpy(fr.u.floats, range, sizeof(range));
  tpu_attr_t at[3] = {tt_ints(DD_N, nb), ranged ? fr : tt_none(), tt_bool(density)};
  tpu_view_t out[1] = {h.view};
  tpu_node_t node = tt_node(in, 2, out, 1, at, 3);
  node.op = tpu_op_lookup("histogramdd");
  CHECK_OK(tpu_node_validate(&node, true));
  CHECK_OK(tpu_op_check(&node));
  CHECK_OK(tt_run(def->kernel, def, &node));
  double tol = weighted || density ? 8 * tt_tol(dt) : 0.0;
  for (int64_t c = 0; c < 20; ++c)
    if (fabs(tt_get(&h.view, c) - want[c]) > tol * (fabs(want[c]) + 1e-30))
      tpu_test_fail(__FILE__, __LINE__, "dtype %d layout %d ranged %d weighted %d density %d: "
                    "cell %lld %g, want %g", dt, lay, ranged, weighted, density, (long long)c,
                    tt_get(&h.view, c), want[c]);
  /* the bins-tensors row, given those edges: the same hist */
  const tpu_op_def_t* tdef = tt_def("histogramdd_bin_tensors");
  tpu_value_t tin[DD_N + 2] = {tt_value(&x.view), tt_value(&et[0].view), tt_value(&et[1].view),
                               tt_value(&et[2].view), weighted ? tt_value(&w.view) : none};
  tpu_attr_t tat[1] = {tt_bool(density)};
  tpu_view_t tout[1] = {h2.view};
  tpu_node_t tnode = tt_node(tin, DD_N + 2, tout, 1, tat, 1);
  tnode.op = tpu_op_lookup("histogramdd_bin_tensors");
  CHECK_OK(tpu_node_validate(&tnode, true));
  CHECK_OK(tpu_op_check(&tnode));
  CHECK_OK(tt_run(tdef->kernel, tdef, &tnode));
  for (int64_t c = 0; c < 20; ++c) CHECK(tt_get(&h2.view, c) == tt_get(&h.view, c));
  for (int64_t d = 0; d < DD_N; ++d) tt_free(&et[d]);
  tt_free(&x), tt_free(&w), tt_free(&h), tt_free(&h2);
}

TEST(histogramdd_matches_reference) {
  const tpu_dtype_t dts[] = {TPU_DTYPE_F32, TPU_DTYPE_F64};
  const tt_layout_t lays[] = {TT_CONTIG, TT_TRANSPOSED, TT_PADDED};
  for (int t = 0; t < 2; ++t)
    for (int l = 0; l < 3; ++l)
      for (int flags = 0; flags < 8; ++flags)
        run(dts[t], lays[l], flags & 1, flags & 2, flags & 4);
}

/* An empty input: edges [0, 1], zero counts (a density of 0 / 0: NaN, as the CPU). */
TEST(histogramdd_empty_input) {
  int64_t xs[2] = {0, 2}, hs[2] = {2, 3}, nb[2] = {2, 3};
  tt_t x = tt_make(TPU_DTYPE_F32, 2, xs, TT_CONTIG), h = tt_make(TPU_DTYPE_F32, 2, hs, TT_CONTIG);
  tpu_value_t in[2] = {tt_value(&x.view), {.kind = TPU_VALUE_NONE}};
  for (int density = 0; density < 2; ++density) {
    tpu_attr_t at[3] = {tt_ints(2, nb), tt_none(), tt_bool(density)};
    tpu_view_t out[1] = {h.view};
    tpu_node_t node = tt_node(in, 2, out, 1, at, 3);
    node.op = tpu_op_lookup("histogramdd");
    const tpu_op_def_t* def = tt_def("histogramdd");
    CHECK_OK(tt_run(def->kernel, def, &node));
    for (int64_t c = 0; c < 6; ++c)
      CHECK(density ? isnan(tt_get(&h.view, c)) : tt_get(&h.view, c) == 0.0);
  }
  int64_t es[1] = {4};
  tt_t e = tt_make(TPU_DTYPE_F32, 1, es, TT_CONTIG);
  tpu_attr_t at[3] = {tt_int(3), tt_int(1), tt_none()};
  tpu_view_t out[1] = {e.view};
  tpu_node_t node = tt_node(in, 1, out, 1, at, 3);
  node.op = tpu_op_lookup("histogramdd_bin_edges");
  const tpu_op_def_t* def = tt_def("histogramdd_bin_edges");
  CHECK_OK(tt_run(def->kernel, def, &node));
  CHECK(tt_get(&e.view, 0) == 0.0 && tt_get(&e.view, 3) == 1.0);
  tt_free(&x), tt_free(&h), tt_free(&e);
}

static void expect_error(tpu_status_t s, tpu_status_code_t code, const char* msg) {
  if (tpu_status_code(s) != code || (msg && !strstr(tpu_status_message(s), msg)))
    tpu_test_fail(__FILE__, __LINE__, "got %s (%s), want %s (%s)",
                  tpu_status_code_name(tpu_status_code(s)), s ? tpu_status_message(s) : "ok",
                  tpu_status_code_name(code), msg ? msg : "");
  tpu_status_free(s);
}

TEST(histogramdd_errors_and_refusals) {
  int64_t xs[2] = {3, 2}, hs[2] = {2, 2}, nb[2] = {2, 2}, zero[2] = {2, 0}, x1s[1] = {3};
  tt_t x = tt_make(TPU_DTYPE_F64, 2, xs, TT_CONTIG), h = tt_make(TPU_DTYPE_F64, 2, hs, TT_CONTIG);
  tt_t xh = tt_make(TPU_DTYPE_F16, 2, xs, TT_CONTIG), x1 = tt_make(TPU_DTYPE_F64, 1, x1s, TT_CONTIG);
  tt_t w = tt_make(TPU_DTYPE_F64, 2, xs, TT_CONTIG), wf = tt_make(TPU_DTYPE_F32, 1, xs, TT_CONTIG);
  tt_set(&x.view, 3, NAN);
  const tpu_op_def_t* def = tt_def("histogramdd");
  tpu_value_t none = {.kind = TPU_VALUE_NONE};
  tpu_value_t in[2] = {tt_value(&x.view), none};
  tpu_view_t out[1] = {h.view};
  tpu_attr_t at[3] = {tt_ints(2, nb), tt_none(), tt_bool(false)};
  tpu_node_t node = tt_node(in, 2, out, 1, at, 3);
  node.op = tpu_op_lookup("histogramdd");
  CHECK_OK(def->check(def, &node));
  expect_error(tt_run(def->kernel, def, &node), TPU_CODE_INVALID_ARGUMENT,
               "torch.histogramdd: dimension 1's range [nan, nan] is not finite");
  node.attrs[0] = tt_ints(2, zero);
  expect_error(def->check(def, &node), TPU_CODE_INVALID_ARGUMENT,
               "torch.histogram(): bins must be > 0, but got 0 for dimension 1");
  node.attrs[0] = tt_ints(1, nb);
  expect_error(def->check(def, &node), TPU_CODE_INVALID_ARGUMENT,
               "histogramdd: The size of bins must be equal to the innermost dimension");
  node.attrs[0] = tt_ints(2, nb);
  tpu_attr_t r2 = {.kind = TPU_ATTR_FLOATS, .count = 2, .u.floats = {0, 1}};
  node.attrs[1] = r2;
  expect_error(def->check(def, &node), TPU_CODE_INVALID_ARGUMENT,
               "for a 2-dimensional histogram range should have 4 elements, but got 2");
  tpu_attr_t r4 = {.kind = TPU_ATTR_FLOATS, .count = 4, .u.floats = {0, 1, 2, 1}};
  node.attrs[1] = r4;
  expect_error(def->check(def, &node), TPU_CODE_INVALID_ARGUMENT,
               "min should not exceed max, but got min 2 max 1 for dimension 1");
  r4.u.floats[3] = INFINITY;
  node.attrs[1] = r4;
  expect_error(def->check(def, &node), TPU_CODE_INVALID_ARGUMENT,
               "dimension 1's range [2, inf] is not finite");
  node.attrs[1] = tt_none();
  in[1] = tt_value(&w.view); /* weight of self's shape, not its shape less the last dim */
  expect_error(def->check(def, &node), TPU_CODE_INVALID_ARGUMENT,
               "should have the same shape as the input tensor excluding its innermost "
               "dimension, but got input with shape [3, 2] and weight with shape [3, 2]");
  in[1] = tt_value(&wf.view);
  expect_error(def->check(def, &node), TPU_CODE_INVALID_ARGUMENT,
               "should have the same dtype, but got input(double), and weight(float)");
  in[1] = none;
  in[0] = tt_value(&xh.view);
  expect_error(def->check(def, &node), TPU_CODE_UNIMPLEMENTED, NULL);
  in[0] = tt_value(&x1.view);
  expect_error(def->check(def, &node), TPU_CODE_INVALID_ARGUMENT,
               "input tensor should have at least 2 dimensions");
  /* bins tensors: one fewer than the coordinates; one of a single edge */
  const tpu_op_def_t* tdef = tt_def("histogramdd_bin_tensors");
  int64_t bs[1] = {1};
  tt_t b1 = tt_make(TPU_DTYPE_F64, 1, bs, TT_CONTIG);
  tpu_value_t tin[4] = {tt_value(&x.view), tt_value(&b1.view), none, none};
  tpu_attr_t tat[1] = {tt_bool(false)};
  tpu_node_t tnode = tt_node(tin, 3, out, 1, tat, 1);
  tnode.op = tpu_op_lookup("histogramdd_bin_tensors");
  expect_error(tdef->check(tdef, &tnode), TPU_CODE_INVALID_ARGUMENT,
               "expected 2 sequences of bin edges for a 2-dimensional histogram but got 1");
  tin[2] = tt_value(&b1.view);
  tnode.num_inputs = 4;
  expect_error(tdef->check(tdef, &tnode), TPU_CODE_INVALID_ARGUMENT,
               "bins must be > 0, but got 0 for dimension 0");
  /* the edges row: a dim outside the coordinates, bins below -1 */
  const tpu_op_def_t* edef = tt_def("histogramdd_bin_edges");
  tpu_value_t ein[1] = {tt_value(&x.view)};
  tpu_attr_t eat[3] = {tt_int(2), tt_int(2), tt_none()};
  tpu_node_t enode = tt_node(ein, 1, out, 1, eat, 3);
  enode.op = tpu_op_lookup("histogramdd_bin_edges");
  expect_error(edef->check(edef, &enode), TPU_CODE_UNIMPLEMENTED, NULL);
  enode.attrs[1] = tt_int(0), enode.attrs[0] = tt_int(-2);
  expect_error(edef->check(edef, &enode), TPU_CODE_UNIMPLEMENTED, NULL);
  tt_t bf = tt_make(TPU_DTYPE_F32, 1, nb, TT_CONTIG), b2 = tt_make(TPU_DTYPE_F64, 2, nb, TT_CONTIG);
  tin[2] = tt_value(&bf.view);
  expect_error(tdef->check(tdef, &tnode), TPU_CODE_INVALID_ARGUMENT,
               "got input with dtype double and bins for dimension 1 with dtype float");
  tin[2] = tt_value(&b2.view);
  expect_error(tdef->check(tdef, &tnode), TPU_CODE_INVALID_ARGUMENT,
               "bins tensor should have one dimension, but got 2 dimensions in the bins tensor "
               "for dimension 1");
  tt_free(&bf), tt_free(&b2), tt_free(&wf);
  tt_free(&x), tt_free(&h), tt_free(&xh), tt_free(&x1), tt_free(&w), tt_free(&b1);
}
