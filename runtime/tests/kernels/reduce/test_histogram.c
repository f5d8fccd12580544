/* test_histogram.c — the histogram family (runtime/src/kernels/reduce/histogram.c).
 *
 * Cases with known results: counts, edges (linspace, widened empty range, [0, 1]
 * for an empty input), samples on edges (the last bin keeps its right edge),
 * NaN and out-of-range samples skipped, weights and density, a bins tensor
 * (unsorted too: libstdc++'s upper_bound steps), strided operands; then the
 * non-finite range error and the check's refusals.
 */
#include <math.h>
#include <string.h>

#include "kernel_test_util.h"

typedef struct hist_case {
  const char* what;
  tpu_dtype_t dtype;
  int64_t n;
  double x[8];
  bool weighted;
  double w[8];
  int64_t bins;          /* bin_ct; 0: a bins tensor of nedges edges */
  int64_t nedges;
  double edges_in[6];
  bool density;
  double hist[6], edges[7];
} hist_case_t;

static const hist_case_t k_cases[] = {
    {"counts", TPU_DTYPE_F32, 6, {0, 1, 2, 3, 4, 2.5}, false, {0}, 4, 0, {0}, false,
     {1, 1, 2, 2}, {0, 1, 2, 3, 4}},
    {"f64 edges inclusive", TPU_DTYPE_F64, 5, {-1, 1, 0, 0.5, 1}, false, {0}, 2, 0, {0}, false,
     {1, 4}, {-1, 0, 1}},
    {"constant widens", TPU_DTYPE_F64, 3, {2, 2, 2}, false, {0}, 2, 0, {0}, false, {0, 3},
     {1.5, 2, 2.5}},
    {"empty", TPU_DTYPE_F32, 0, {0}, false, {0}, 2, 0, {0}, false, {0, 0}, {0, 0.5, 1}},
    {"weights density", TPU_DTYPE_F64, 4, {0, 1, 3, 4}, true, {1, 1, 2, 4}, 2, 0, {0}, true,
     {0.125, 0.375}, {0, 2, 4}},
    {"bins tensor", TPU_DTYPE_F32, 7, {-5, 0, 0.5, 1, 2, 3, NAN}, false, {0}, 0, 4, {0, 1, 2, 3},
     false, {2, 1, 2}, {0, 1, 2, 3}},
    {"bins tensor unsorted", TPU_DTYPE_F64, 4, {0.1, 0.6, 1.5, 2}, false, {0}, 0, 4,
     {0, 1, 0.5, 2}, false, {1, 0, 3}, {0, 1, 0.5, 2}},
};

static void run_case(const hist_case_t* c, tt_layout_t lay) {
  int64_t xs[1] = {c->n}, nb = c->bins ? c->bins : c->nedges - 1, hs[1] = {nb}, es[1] = {nb + 1};
  int64_t bs[1] = {c->nedges};
  tt_t x = tt_make(c->dtype, 1, xs, lay), w = tt_make(c->dtype, 1, xs, lay);
  tt_t b = tt_make(c->dtype, 1, bs, lay);
  tt_t h = tt_make(c->dtype, 1, hs, lay), e = tt_make(c->dtype, 1, es, TT_CONTIG);
  for (int64_t i = 0; i < c->n; ++i) tt_set(&x.view, i, c->x[i]), tt_set(&w.view, i, c->w[i]);
  for (int64_t i = 0; i < c->nedges; ++i) tt_set(&b.view, i, c->edges_in[i]);
  tpu_value_t wv = c->weighted ? tt_value(&w.view) : (tpu_value_t){.kind = TPU_VALUE_NONE};
  tpu_view_t out[2] = {h.view, e.view};
  const char* op = c->bins ? "histogram" : "histogram_bins_tensor";
  const tpu_op_def_t* def = tt_def(op);
  tpu_value_t in[3] = {tt_value(&x.view), c->bins ? wv : tt_value(&b.view), wv};
  tpu_attr_t at[3] = {tt_int(c->bins), tt_none(), tt_bool(c->density)};
  tpu_attr_t at1[1] = {tt_bool(c->density)};
  tpu_node_t node = c->bins ? tt_node(in, 2, out, 2, at, 3) : tt_node(in, 3, out, 2, at1, 1);
  node.op = tpu_op_lookup(op);
  CHECK_OK(tpu_op_check(&node));
  CHECK_OK(tt_run(def->kernel, def, &node));
  for (int64_t i = 0; i < nb; ++i)
    if (fabs(tt_get(&h.view, i) - c->hist[i]) > 1e-6)
      tpu_test_fail(__FILE__, __LINE__, "%s layout %d: hist[%lld] %g, want %g", c->what, lay,
                    (long long)i, tt_get(&h.view, i), c->hist[i]);
  for (int64_t i = 0; i <= nb; ++i)
    if (fabs(tt_get(&e.view, i) - c->edges[i]) > 1e-6)
      tpu_test_fail(__FILE__, __LINE__, "%s layout %d: edge[%lld] %g, want %g", c->what, lay,
                    (long long)i, tt_get(&e.view, i), c->edges[i]);
  tt_free(&x), tt_free(&w), tt_free(&b), tt_free(&h), tt_free(&e);
}

TEST(histogram_cases) {
  const tt_layout_t lays[] = {TT_CONTIG, TT_PADDED};
  for (size_t c = 0; c < sizeof(k_cases) / sizeof(k_cases[0]); ++c)
    for (size_t l = 0; l < 2; ++l) run_case(&k_cases[c], lays[l]);
}

/* Linear bins agree with the edges they return (ATen's local search): every sample
 * equal to an edge lands in the bin that edge opens (the last edge: the last bin). */
TEST(histogram_samples_on_linspace_edges) {
  int64_t nb = 7, xs[1] = {8}, hs[1] = {7}, es[1] = {8};
  tt_t x = tt_make(TPU_DTYPE_F32, 1, xs, TT_CONTIG), h = tt_make(TPU_DTYPE_F32, 1, hs, TT_CONTIG);
  tt_t e = tt_make(TPU_DTYPE_F32, 1, es, TT_CONTIG), e2 = tt_make(TPU_DTYPE_F32, 1, es, TT_CONTIG);
  tt_set(&x.view, 0, -0.3), tt_set(&x.view, 1, 1.9);
  tpu_value_t in[2] = {tt_value(&x.view), {.kind = TPU_VALUE_NONE}};
  tpu_attr_t at[3] = {tt_int(nb), tt_none(), tt_bool(false)};
  tpu_view_t out[2] = {h.view, e.view};
  tpu_node_t node = tt_node(in, 2, out, 2, at, 3);
  node.op = tpu_op_lookup("histogram");
  const tpu_op_def_t* def = tt_def("histogram");
  CHECK_OK(tt_run(def->kernel, def, &node)); /* edges of [-0.3, 1.9] */
  for (int64_t i = 0; i < 8; ++i) tt_set(&x.view, i, tt_get(&e.view, i));
  tpu_view_t out2[2] = {h.view, e2.view};
  node.outputs = out2;
  CHECK_OK(tt_run(def->kernel, def, &node));
  for (int64_t i = 0; i < nb; ++i) CHECK(tt_get(&h.view, i) == (i == nb - 1 ? 2.0 : 1.0));
  tt_free(&x), tt_free(&h), tt_free(&e), tt_free(&e2);
}

/* range as a FLOATS attr: the edges span it, samples outside (inf, NaN too) skipped;
 * the node validates (count within TPU_MAX_INTS). */
TEST(histogram_range) {
  int64_t xs[1] = {6}, hs[1] = {4}, es[1] = {5};
  tt_t x = tt_make(TPU_DTYPE_F64, 1, xs, TT_CONTIG), h = tt_make(TPU_DTYPE_F64, 1, hs, TT_CONTIG);
  tt_t e = tt_make(TPU_DTYPE_F64, 1, es, TT_CONTIG);
  const double v[6] = {-1, 0, 1.5, 2, INFINITY, NAN}, want[4] = {1, 0, 0, 2};
  for (int64_t i = 0; i < 6; ++i) tt_set(&x.view, i, v[i]);
  tpu_value_t in[2] = {tt_value(&x.view), {.kind = TPU_VALUE_NONE}};
  tpu_attr_t fr = {.kind = TPU_ATTR_FLOATS, .count = 2, .u.floats = {0.0, 2.0}};
  tpu_attr_t at[3] = {tt_int(4), fr, tt_bool(false)};
  tpu_view_t out[2] = {h.view, e.view};
  tpu_node_t node = tt_node(in, 2, out, 2, at, 3);
  node.op = tpu_op_lookup("histogram");
  CHECK_OK(tpu_node_validate(&node, false));
  CHECK_OK(tpu_op_check(&node));
  const tpu_op_def_t* def = tt_def("histogram");
  CHECK_OK(tt_run(def->kernel, def, &node));
  for (int64_t i = 0; i < 4; ++i) CHECK(tt_get(&h.view, i) == want[i]);
  for (int64_t i = 0; i < 5; ++i) CHECK(tt_get(&e.view, i) == 0.5 * (double)i);
  node.attrs[1].count = TPU_MAX_INTS + 1;
  CHECK(tt_code(tpu_node_validate(&node, false)) == TPU_CODE_INVALID_ARGUMENT);
  tt_free(&x), tt_free(&h), tt_free(&e);
}

TEST(histogram_errors_and_refusals) {
  int64_t xs[1] = {3}, hs[1] = {2}, es[1] = {3};
  tt_t x = tt_make(TPU_DTYPE_F64, 1, xs, TT_CONTIG), h = tt_make(TPU_DTYPE_F64, 1, hs, TT_CONTIG);
  tt_t e = tt_make(TPU_DTYPE_F64, 1, es, TT_CONTIG), xh = tt_make(TPU_DTYPE_F16, 1, xs, TT_CONTIG);
  tt_set(&x.view, 0, 1.0), tt_set(&x.view, 1, INFINITY);
  tpu_value_t in[2] = {tt_value(&x.view), {.kind = TPU_VALUE_NONE}};
  tpu_attr_t at[3] = {tt_int(2), tt_none(), tt_bool(false)};
  tpu_view_t out[2] = {h.view, e.view};
  tpu_node_t node = tt_node(in, 2, out, 2, at, 3);
  node.op = tpu_op_lookup("histogram");
  const tpu_op_def_t* def = tt_def("histogram");
  tpu_status_t s = tt_run(def->kernel, def, &node);
  CHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT);
  CHECK(strstr(tpu_status_message(s), "range [0, inf] is not finite") ||
        strstr(tpu_status_message(s), "range [1, inf] is not finite"));
  tpu_status_free(s);
  tpu_attr_t bad_bins[3] = {tt_int(0), tt_none(), tt_bool(false)};
  tpu_node_t n0 = tt_node(in, 2, out, 2, bad_bins, 3);
  n0.op = node.op;
  CHECK(tt_code(def->check(def, &n0)) == TPU_CODE_UNIMPLEMENTED);
  int64_t r2[2] = {1, 2};
  tpu_attr_t ranged[3] = {tt_int(2), tt_ints(2, r2), tt_bool(false)};
  tpu_node_t nr = tt_node(in, 2, out, 2, ranged, 3);
  nr.op = node.op;
  CHECK(tt_code(def->check(def, &nr)) == TPU_CODE_UNIMPLEMENTED); /* an int list */
  tpu_attr_t fr = {.kind = TPU_ATTR_FLOATS, .count = 2, .u.floats = {1.0, 0.5}};
  tpu_attr_t backwards[3] = {tt_int(2), fr, tt_bool(false)};
  tpu_node_t nb = tt_node(in, 2, out, 2, backwards, 3);
  nb.op = node.op;
  CHECK(tt_code(def->check(def, &nb)) == TPU_CODE_UNIMPLEMENTED); /* min > max */
  tpu_value_t inh[2] = {tt_value(&xh.view), {.kind = TPU_VALUE_NONE}};
  tpu_node_t nh = tt_node(inh, 2, out, 2, at, 3);
  nh.op = node.op;
  CHECK(tt_code(def->check(def, &nh)) == TPU_CODE_UNIMPLEMENTED);
  tt_free(&x), tt_free(&h), tt_free(&e), tt_free(&xh);
}
