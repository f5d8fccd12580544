/* test_weight_cache.c — the matrix unit's weight cache (kernels/matmul/mxu_pack.h):
 * a B read again is laid out once and then reused; results are the same
 * bits whether or not the cache holds it; a write to B's bytes drops the
 * copy (the next GEMM sees the new values); a graph that writes B neither
 * uses nor fills the cache; the bound evicts, and counts it. On a CPU
 * without the unit nothing is cached. */
#include <math.h>
#include <string.h>

#include "kernel_test_util.h"
#include "kernels/matmul/mxu.h"
#include "test.h"
#include "tpu/runtime.h"

enum { M = 64, K = 256, N = 384 };

typedef struct mm_case {
  tt_t a, b, c;
  tpu_value_t in[2];
  tpu_node_t node;
  const tpu_op_def_t* def;
  tpu_graph_t* graph; /* holding the node: the GEMM's context */
} mm_case_t;

/* mm(A [M,K], B [K,N]) with B a transposed view (a Linear weight's W^T). */
static void case_make(mm_case_t* t, tpu_dtype_t dtype, uint64_t seed) {
  int64_t as[2] = {M, K}, bs[2] = {K, N}, cs[2] = {M, N};
  t->a = tt_make(dtype, 2, as, TT_CONTIG);
  t->b = tt_make(dtype, 2, bs, TT_TRANSPOSED);
  t->c = tt_make(dtype, 2, cs, TT_CONTIG);
  /* -1, 0, 1: every sum (at most K = 256) is exact even in bfloat16 */
  tt_fill_ints(&t->a.view, seed, -1, 2);
  tt_fill_ints(&t->b.view, seed + 1, -1, 2);
  t->in[0] = tt_value(&t->a.view), t->in[1] = tt_value(&t->b.view);
  tpu_attr_t precision = tt_int(0);
  t->node = tt_node(t->in, 2, &t->c.view, 1, &precision, 1);
  t->node.op = tpu_op_lookup("mm");
  t->def = tt_def("mm");
  t->graph = NULL;
  tpu_status_t s = tpu_graph_from_node(&t->node, &t->graph);
  if (s != TPU_OK) tpu_status_free(s);
}

static void case_free(mm_case_t* t) {
  tpu_graph_release(t->graph);
  tt_free(&t->a), tt_free(&t->b), tt_free(&t->c);
}

static tpu_status_t case_run(mm_case_t* t, const tpu_graph_t* graph) {
  tpu_exec_ctx_t ctx = {.graph = graph};
  return t->def->kernel(t->def, &t->node, &ctx);
}

/* Largest |C - A@B| (exact for these operands). */
static double case_error(const mm_case_t* t) {
  double worst = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double want = 0;
      for (int64_t k = 0; k < K; ++k)
        want += tt_get(&t->a.view, i * K + k) * tt_get(&t->b.view, k * N + j);
      double got = tt_get(&t->c.view, i * N + j);
      if (fabs(got - want) > worst) worst = fabs(got - want);
    }
  return worst;
}

static size_t c_bytes(const mm_case_t* t) { return (size_t)M * N * tpu_dtype_size(t->c.view.dtype); }

TEST(weight_cache_lays_out_a_reread_weight_once) {
  const tpu_dtype_t dtypes[2] = {TPU_DTYPE_BF16, TPU_DTYPE_F32};
  for (int d = 0; d < 2; ++d) {
    tpu_weight_cache_clear();
    mm_case_t t;
    case_make(&t, dtypes[d], 7 + d);
    CHECK(t.graph != NULL);
    bool unit = tpu_mxu_supports(dtypes[d]);
    tpu_weight_cache_stats_t s0, s1, s2, s3;
    tpu_weight_cache_get_stats(&s0);
    /* first sighting: this B is transposed (a Linear's W.t()), which both
     * dtypes read plain (mxu_pack.h) */
    CHECK_OK(case_run(&t, t.graph));
    CHECK(case_error(&t) == 0);
    char first[M * N * 4];
    memcpy(first, t.c.mem, c_bytes(&t));
    tpu_weight_cache_get_stats(&s1);
    CHECK(s1.entries == s0.entries && s1.packs == s0.packs);
    memset(t.c.mem, 0, c_bytes(&t));
    CHECK_OK(case_run(&t, t.graph)); /* second: kept */
    tpu_weight_cache_get_stats(&s2);
    CHECK(s2.entries == s1.entries + (unit ? 1 : 0) && s2.packs == s1.packs + (unit ? 1 : 0));
    CHECK(s2.bytes > s1.bytes || !unit);
    memset(t.c.mem, 0, c_bytes(&t));
    CHECK_OK(case_run(&t, t.graph)); /* third: from the cache, the same bits */
    tpu_weight_cache_get_stats(&s3);
    CHECK(s3.hits == s2.hits + (unit ? 1 : 0) && s3.packs == s2.packs);
    CHECK(case_error(&t) == 0);
    /* the same bits as the first product, plain then blocked (float32's
     * kernels agree; these exact integer sums agree in bfloat16 too) */
    CHECK(memcmp(first, t.c.mem, c_bytes(&t)) == 0);

    /* B changes; its writer reports it: the next GEMM reads the new B. */
    for (int64_t k = 0; k < K; ++k) tt_set(&t.b.view, k * N + 5, (double)(k % 3) - 1);
    uint64_t lo, hi;
    tpu_view_bytes(&t.b.view, &lo, &hi);
    tpu_weight_cache_note_write(lo, lo + 1);
    tpu_weight_cache_get_stats(&s1);
    CHECK(s1.drops == s3.drops + (unit ? 1 : 0) && s1.entries == s3.entries - (unit ? 1 : 0));
    CHECK_OK(case_run(&t, t.graph));
    CHECK(case_error(&t) == 0);

    /* Without a graph (context unknown) nothing is looked up or kept. */
    CHECK_OK(case_run(&t, t.graph)); /* seen again: kept */
    tpu_weight_cache_get_stats(&s2);
    CHECK_OK(case_run(&t, NULL));
    tpu_weight_cache_get_stats(&s3);
    CHECK(s3.hits == s2.hits && s3.entries == s2.entries);
    CHECK(case_error(&t) == 0);
    case_free(&t);
  }
  tpu_weight_cache_clear();
}

/* A graph whose other node writes B: the GEMM in it neither uses the copy
 * made before nor keeps one; so a B written earlier in the same graph is
 * read as it is then. */
TEST(weight_cache_skips_a_b_its_graph_writes) {
  tpu_weight_cache_clear();
  mm_case_t t;
  case_make(&t, TPU_DTYPE_BF16, 21);
  bool unit = tpu_mxu_supports(TPU_DTYPE_BF16);
  CHECK_OK(case_run(&t, t.graph));
  CHECK_OK(case_run(&t, t.graph)); /* kept */
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(&g));
  /* a node writing B as its output (not run here: only the graph's writes
   * matter), and one writing it in place as a '!' input */
  tpu_value_t zin[1] = {tt_value(&t.b.view)};
  tpu_node_t writer = tt_node(zin, 1, &t.b.view, 1, NULL, 0);
  writer.op = tpu_op_lookup("zero");
  CHECK(writer.op >= 0);
  CHECK_OK(tpu_graph_append(g, &writer));
  CHECK_OK(tpu_graph_append(g, &t.node));
  CHECK(tpu_weight_cache_graph_writes(g, &t.b.view));
  CHECK(!tpu_weight_cache_graph_writes(t.graph, &t.b.view));
  tpu_graph_t* g2 = NULL;
  CHECK_OK(tpu_graph_create(&g2));
  int64_t one_s[1] = {1};
  tt_t scalar = tt_make(TPU_DTYPE_F32, 1, one_s, TT_CONTIG);
  tpu_value_t uin[3] = {tt_value(&scalar.view), tt_value(&t.b.view), tt_value(&scalar.view)};
  tpu_node_t updater = tt_node(uin, 3, NULL, 0, NULL, 0);
  updater.op = tpu_op_lookup("amp_update_scale"); /* growth_tracker! is input 1 */
  CHECK(updater.op >= 0 && (tpu_op_mutated_inputs(updater.op) & 2u));
  CHECK_OK(tpu_graph_append(g2, &updater));
  CHECK(tpu_weight_cache_graph_writes(g2, &t.b.view));
  tpu_graph_release(g2);
  tt_free(&scalar);
  tpu_weight_cache_stats_t s0, s1;
  tpu_weight_cache_get_stats(&s0);
  CHECK_OK(case_run(&t, g));
  tpu_weight_cache_get_stats(&s1);
  CHECK(s1.hits == s0.hits && s1.packs == s0.packs); /* bfloat16, not cacheable: plain */
  CHECK(case_error(&t) == 0);
  /* after the graph ran, the host driver reports its writes: B's copy goes */
  tpu_weight_cache_note_graph(g);
  tpu_weight_cache_get_stats(&s1);
  CHECK(s1.entries == s0.entries - (unit ? 1 : 0));
  tpu_graph_release(g);
  case_free(&t);
  tpu_weight_cache_clear();
}

/* Two weights under a bound that holds one: each new copy evicts the
 * other, counted; results stay right. */
TEST(weight_cache_bound_evicts_and_counts) {
  tpu_weight_cache_clear();
  mm_case_t t[2];
  case_make(&t[0], TPU_DTYPE_BF16, 31);
  case_make(&t[1], TPU_DTYPE_BF16, 41);
  bool unit = tpu_mxu_supports(TPU_DTYPE_BF16);
  tpu_weight_cache_stats_t s0, s1;
  tpu_weight_cache_get_stats(&s0);
  int64_t limit = s0.limit_bytes;
  for (int r = 0; r < 2; ++r) CHECK_OK(case_run(&t[0], t[0].graph));
  tpu_weight_cache_get_stats(&s1);
  int64_t one = s1.bytes; /* one weight's blocked copy */
  CHECK(one > 0 || !unit);
  tpu_weight_cache_set_limit(one + one / 2);
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 2; ++i) {
      for (int rep = 0; rep < 2; ++rep) CHECK_OK(case_run(&t[i], t[i].graph));
      CHECK(case_error(&t[i]) == 0);
    }
  tpu_weight_cache_get_stats(&s1);
  CHECK(s1.bytes <= one + one / 2);
  CHECK(s1.evictions >= s0.evictions + (unit ? 4 : 0));
  tpu_weight_cache_set_limit(0); /* off: nothing kept */
  tpu_weight_cache_get_stats(&s1);
  CHECK(s1.entries == 0 && s1.bytes == 0);
  CHECK_OK(case_run(&t[0], t[0].graph));
  CHECK_OK(case_run(&t[0], t[0].graph));
  tpu_weight_cache_get_stats(&s1);
  CHECK(s1.entries == 0);
  CHECK(case_error(&t[0]) == 0);
  tpu_weight_cache_set_limit(limit);
  case_free(&t[0]), case_free(&t[1]);
  tpu_weight_cache_clear();
}
