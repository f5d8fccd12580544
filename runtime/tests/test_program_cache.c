/* test_program_cache.c — the program cache's statistics (requests, hits,
 * per-entry reads, compile time, last read), clearing it, and the text of a
 * pending graph, which neither flushes nor touches the cache. */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "tpu/defer.h"
#include "tpu/ops.h"
#include "tpu/program_cache.h"
#include "tpu/runtime.h"

/* Records y = (x * 3) * x on st in deferred mode (x, y: n floats at the
 * blocks' addresses); the intermediate is freed before any flush. */
static void record_chain(tpu_stream_t* st, tpu_block_t* x, tpu_block_t* y, int64_t n) {
  tpu_view_t vx = {.addr = tpu_block_addr(x), .dtype = TPU_DTYPE_F32, .ndim = 1, .sizes = {n}};
  tpu_view_set_contiguous(&vx);
  tpu_view_t vy = vx, vt = vx;
  vy.addr = tpu_block_addr(y);
  tpu_block_t* t = NULL;
  CHECK_OK(tpu_block_alloc(st, (size_t)n * 4, &t));
  vt.addr = tpu_block_addr(t);
  tpu_value_t in[2] = {{.kind = TPU_VALUE_VIEW, .u.view = vx},
                       {.kind = TPU_VALUE_SCALAR,
                        .u.scalar = (tpu_scalar_t){.dtype = TPU_DTYPE_F64, .v.f = 3.0}}};
  tpu_node_t mul = {.op = tpu_op_lookup("mul"), .num_inputs = 2, .num_outputs = 1,
                    .inputs = in, .outputs = &vt};
  CHECK_OK(tpu_stream_submit_node(st, &mul));
  tpu_value_t in2[2] = {{.kind = TPU_VALUE_VIEW, .u.view = vt},
                        {.kind = TPU_VALUE_VIEW, .u.view = vx}};
  tpu_node_t mul2 = {.op = tpu_op_lookup("mul"), .num_inputs = 2, .num_outputs = 1,
                    .inputs = in2, .outputs = &vy};
  CHECK_OK(tpu_stream_submit_node(st, &mul2));
  tpu_block_free(t);
}

static void stats(tpu_program_cache_stats_t* st, tpu_program_cache_entry_t* e, int32_t cap,
                  int32_t* n) {
  CHECK_OK(tpu_program_cache_get_stats(cap, st, e, n));
}

TEST(program_cache_stats_reject_bad_arguments) {
  tpu_program_cache_stats_t st;
  int32_t n;
  tpu_status_t s = tpu_program_cache_get_stats(4, &st, NULL, &n);
  CHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT);
  tpu_status_free(s);
  s = tpu_program_cache_get_stats(-1, &st, NULL, &n);
  CHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT);
  tpu_status_free(s);
  s = tpu_program_cache_get_stats(0, NULL, NULL, &n);
  CHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT);
  tpu_status_free(s);
}

TEST(program_cache_counts_requests_hits_and_reads) {
  tpu_stream_t* stream = test_stream0();
  const int64_t n = 1000;
  tpu_block_t *x = NULL, *y = NULL;
  CHECK_OK(tpu_block_alloc(stream, (size_t)n * 4, &x));
  CHECK_OK(tpu_block_alloc(stream, (size_t)n * 4, &y));
  CHECK_OK(tpu_program_cache_clear());
  tpu_program_cache_stats_t s0, s1, s2;
  tpu_program_cache_entry_t e[4];
  int32_t count = 0;
  stats(&s0, e, 4, &count);
  CHECK(s0.entries == 0 && count == 0 && s0.host_bytes == 0);

  tpu_defer_set_thread(1);
  record_chain(stream, x, y, n);
  /* The pending graph's text: no flush, no request. */
  tpu_defer_metrics_t m0, m1;
  tpu_defer_get_metrics(&m0);
  char* text = NULL;
  CHECK_OK(tpu_stream_pending_text(stream, &text));
  CHECK(text && strstr(text, "%0 = mul(") && strstr(text, "%1 = mul(") && strstr(text, "slot0:"));
  free(text);
  tpu_defer_get_metrics(&m1);
  CHECK(m1.flushes == m0.flushes);
  stats(&s1, e, 4, &count);
  CHECK(s1.requests == s0.requests && s1.entries == 0);

  CHECK_OK(tpu_stream_flush(stream, TPU_FLUSH_EXPLICIT, NULL)); /* a miss: compiles */
  record_chain(stream, x, y, n / 2);                            /* same structure */
  CHECK_OK(tpu_stream_flush(stream, TPU_FLUSH_EXPLICIT, NULL)); /* a hit */
  CHECK_OK(tpu_stream_pending_text(stream, &text));
  CHECK(text && text[0] == '\0'); /* nothing pending */
  free(text);
  tpu_defer_set_thread(-1);
  CHECK_OK(tpu_stream_synchronize(stream));
  stats(&s1, e, 4, &count);
  CHECK(s1.requests == s0.requests + 2);
  CHECK(s1.hits == s0.hits + 1);
  CHECK(s1.compiles == s0.compiles + 1);
  CHECK(s1.entries == 1 && count == 1 && s1.host_bytes > 0);
  CHECK(e[0].nodes == 2 && e[0].kernels == 1);
  CHECK(e[0].read_count == 1);
  CHECK(e[0].compile_ns > 0);
  CHECK(e[0].last_read_ns > INT64_C(1600000000) * 1000000000);
  tpu_defer_cut_t cuts[TPU_DEFER_CUT_LOG];
  int32_t ncuts = tpu_defer_get_cuts(cuts, TPU_DEFER_CUT_LOG);
  CHECK(ncuts >= 1 && cuts[ncuts - 1].structure == e[0].structure);

  /* Cleared: the same structure compiles again; the totals go on. */
  CHECK_OK(tpu_program_cache_clear());
  stats(&s2, e, 4, &count);
  CHECK(s2.entries == 0 && count == 0 && s2.requests == s1.requests);
  tpu_defer_set_thread(1);
  record_chain(stream, x, y, n);
  CHECK_OK(tpu_stream_flush(stream, TPU_FLUSH_EXPLICIT, NULL));
  tpu_defer_set_thread(-1);
  CHECK_OK(tpu_stream_synchronize(stream));
  stats(&s2, e, 4, &count);
  CHECK(s2.compiles == s1.compiles + 1 && s2.hits == s1.hits && count == 1);
  CHECK(e[0].read_count == 0);
  tpu_block_free(x);
  tpu_block_free(y);
}

/* Past its limit the cache evicts the least recently read program and
 * counts it: 3,375 structures (chains of three unary ops) go through it;
 * the first one, read now and then, stays; the second, never read, goes. */
TEST(program_cache_evicts_least_recently_read_when_full) {
  static const char* const names[] = {"abs",  "neg",   "exp",  "sin",  "cos",
                                      "tanh", "sigmoid", "relu", "sqrt", "floor",
                                      "ceil", "trunc", "sign", "reciprocal", "expm1"};
  enum { K = sizeof(names) / sizeof(names[0]), STRUCTURES = K * K * K, N = 16 };
  tpu_op_id_t ops[K];
  for (int i = 0; i < K; ++i) {
    ops[i] = tpu_op_lookup(names[i]);
    CHECK(ops[i] >= 0 && tpu_op_num_attrs(ops[i]) == 0);
  }
  tpu_stream_t* stream = test_stream0();
  tpu_block_t* blk[4];
  tpu_view_t v[4];
  for (int i = 0; i < 4; ++i) {
    CHECK_OK(tpu_block_alloc(stream, N * 4, &blk[i]));
    v[i] = (tpu_view_t){.addr = tpu_block_addr(blk[i]), .dtype = TPU_DTYPE_F32, .ndim = 1,
                        .sizes = {N}};
    tpu_view_set_contiguous(&v[i]);
  }
  CHECK_OK(tpu_program_cache_clear());
  tpu_program_cache_stats_t s0, s1, s2;
  int32_t count = 0;
  stats(&s0, NULL, 0, &count);
  tpu_defer_set_thread(1);
  for (int s = 0; s <= STRUCTURES + 1; ++s) {
    /* structure s (the first again every 256, and at the end; then the second) */
    int k = s == STRUCTURES + 1 ? 1 : s == STRUCTURES || s % 256 == 255 ? 0 : s;
    if (s == STRUCTURES) stats(&s1, NULL, 0, &count);
    int op3[3] = {k % K, k / K % K, k / (K * K)};
    for (int j = 0; j < 3; ++j) {
      tpu_value_t in = {.kind = TPU_VALUE_VIEW, .u.view = v[j]};
      tpu_node_t node = {.op = ops[op3[j]], .num_inputs = 1, .num_outputs = 1, .inputs = &in,
                         .outputs = &v[j + 1]};
      CHECK_OK(tpu_stream_submit_node(stream, &node));
    }
    CHECK_OK(tpu_stream_flush(stream, TPU_FLUSH_EXPLICIT, NULL));
    if (s == STRUCTURES) stats(&s2, NULL, 0, &count);
  }
  tpu_defer_set_thread(-1);
  CHECK_OK(tpu_stream_synchronize(stream));
  /* every structure was compiled once (plus the evicted second one again) */
  CHECK(s1.compiles - s0.compiles == STRUCTURES - (STRUCTURES + 1) / 256);
  CHECK(s1.entries == 3072 && s1.uncached == s0.uncached);
  CHECK(s1.evictions - s0.evictions == s1.compiles - s0.compiles - 3072);
  CHECK(s2.compiles == s1.compiles && s2.hits == s1.hits + 1); /* the first: kept */
  tpu_program_cache_stats_t s3;
  stats(&s3, NULL, 0, &count);
  CHECK(s3.compiles == s2.compiles + 1 && s3.evictions == s2.evictions + 1); /* the second */
  CHECK(s3.entries == 3072);
  for (int i = 0; i < 4; ++i) tpu_block_free(blk[i]);
}
