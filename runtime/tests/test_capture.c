/* test_capture.c — capture and replay (tpu/capture.h): a replayed region
 * computes on its new inputs what the region computes there, reuses the
 * region's fused program, elides the same intermediates and hands back its
 * results; regions with a host read, a strict submission or an operand from
 * outside give no capture. */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "tpu/capture.h"
#include "tpu/defer.h"
#include "tpu/ops.h"
#include "tpu/runtime.h"


static tpu_view_t fview(uint64_t addr, int64_t n) {
  tpu_view_t v = {.addr = addr, .dtype = TPU_DTYPE_F32, .ndim = 1, .sizes = {n}};
  tpu_view_set_contiguous(&v);
  return v;
}

/* Binary nodes go in as one-node graphs, unary ones as nodes (the bridge's
 * way): a capture notes both. */
static void node(tpu_stream_t* st, const char* op, const tpu_view_t* a, const tpu_view_t* b,
                 const tpu_view_t* out) {
  tpu_value_t in[2] = {{.kind = TPU_VALUE_VIEW, .u.view = *a}};
  if (b) in[1] = (tpu_value_t){.kind = TPU_VALUE_VIEW, .u.view = *b};
  tpu_attr_t attrs[TPU_MAX_ATTRS] = {{0}};
  tpu_op_id_t id = tpu_op_lookup(op);
  if (!b) {
    tpu_node_t n = {.op = id, .num_inputs = 1, .num_outputs = 1, .inputs = in};
    n.outputs = (tpu_view_t*)out;
    n.num_attrs = tpu_op_num_attrs(id);
    CHECK_OK(tpu_stream_submit_node(st, &n));
    return;
  }
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(&g));
  CHECK_OK(tpu_graph_add_node(g, id, in, b ? 2 : 1, out, 1, attrs, tpu_op_num_attrs(id)));
  CHECK_OK(tpu_stream_submit(st, g));
}

static tpu_block_t* upload(tpu_stream_t* st, const float* host, int64_t n) {
  tpu_block_t* blk = NULL;
  CHECK_OK(tpu_block_alloc(st, (size_t)n * 4, &blk));
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_H2D, tpu_block_addr(blk), (uint64_t)(uintptr_t)host,
                           (size_t)n * 4));
  CHECK_OK(tpu_stream_synchronize(st));
  return blk;
}

/* The region: y = relu(x * b + x) with two intermediates freed on the way
 * (the second tenant of t1's range is y when the allocator reuses it). */
static tpu_block_t* region(tpu_stream_t* st, tpu_block_t* x, tpu_block_t* b, int64_t n) {
  tpu_block_t *t1, *t2, *y;
  tpu_view_t vx = fview(tpu_block_addr(x), n), vb = fview(tpu_block_addr(b), n);
  CHECK_OK(tpu_block_alloc(st, (size_t)n * 4, &t1));
  tpu_view_t v1 = fview(tpu_block_addr(t1), n);
  node(st, "mul", &vx, &vb, &v1);
  CHECK_OK(tpu_block_alloc(st, (size_t)n * 4, &t2));
  tpu_view_t v2 = fview(tpu_block_addr(t2), n);
  node(st, "add", &v1, &vx, &v2);
  tpu_block_free(t1);
  CHECK_OK(tpu_block_alloc(st, (size_t)n * 4, &y));
  tpu_view_t vy = fview(tpu_block_addr(y), n);
  node(st, "relu", &v2, NULL, &vy);
  tpu_block_free(t2);
  return y;
}

static void fill(float* p, int64_t n, int seed) {
  for (int64_t i = 0; i < n; ++i) p[i] = (float)(((i * 7919 + seed * 104729) % 2001) - 1000) / 250.f;
}

static void read_back(tpu_stream_t* st, tpu_block_t* blk, float* host, int64_t n) {
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)host, tpu_block_addr(blk),
                           (size_t)n * 4));
  CHECK_OK(tpu_stream_synchronize(st));
}

TEST(capture_replay_computes_on_new_inputs_with_the_cached_program) {
  tpu_stream_t* st = test_stream0();
  enum { N = 5000 };
  float hx[N], hb[N], got[N];
  fill(hx, N, 1);
  fill(hb, N, 2);
  tpu_block_t *x = upload(st, hx, N), *b = upload(st, hb, N);
  uint64_t addr[2] = {tpu_block_addr(x), tpu_block_addr(b)}, bytes[2] = {N * 4, N * 4};

  tpu_defer_set_thread(1);
  CHECK_OK(tpu_capture_begin(st, addr, bytes, 2));
  tpu_block_t* y = region(st, x, b, N);
  tpu_capture_t* cap = NULL;
  const char* why = NULL;
  CHECK_OK(tpu_capture_end(st, &cap, &why));
  CHECK(cap != NULL);
  if (!cap) {
    tpu_defer_set_thread(-1);
    return;
  }
  CHECK(tpu_capture_node_count(cap) == 3);
  CHECK(tpu_capture_live_count(cap) == 1);
  CHECK(tpu_capture_live_index(cap, y) == 0);
  CHECK(tpu_capture_live_bytes(cap, 0) == N * 4);
  CHECK_OK(tpu_stream_flush(st, TPU_FLUSH_EXPLICIT, NULL));

  /* New inputs: the replay reads them, not the captured ones. */
  float hx2[N], hb2[N], want[N];
  fill(hx2, N, 7);
  fill(hb2, N, 8);
  for (int i = 0; i < N; ++i) {
    float t = hx2[i] * hb2[i] + hx2[i];
    want[i] = t > 0 ? t : 0;
  }
  tpu_defer_set_thread(0);
  tpu_block_t *x2 = upload(st, hx2, N), *b2 = upload(st, hb2, N);
  tpu_defer_set_thread(1);
  uint64_t addr2[2] = {tpu_block_addr(x2), tpu_block_addr(b2)};
  tpu_defer_metrics_t m0, m1;
  tpu_defer_get_metrics(&m0);
  tpu_block_t* out = NULL;
  CHECK_OK(tpu_capture_replay(cap, st, addr2, NULL, NULL, &out));
  CHECK_OK(tpu_stream_flush(st, TPU_FLUSH_EXPLICIT, NULL));
  tpu_defer_get_metrics(&m1);
  tpu_defer_set_thread(-1);
  CHECK(out != NULL && out != x2 && out != b2);
  CHECK(m1.nodes_recorded - m0.nodes_recorded == 3);
  CHECK(m1.cache_hits - m0.cache_hits == 1);       /* the region's program */
  CHECK(m1.programs_compiled == m0.programs_compiled);
  CHECK(m1.elided_buffers - m0.elided_buffers == 2); /* t1, t2 never written */
  read_back(st, out, got, N);
  int bad = 0;
  for (int i = 0; i < N; ++i) bad += got[i] != want[i];
  CHECK(bad == 0);
  /* The captured run's own result is untouched by the replay. */
  read_back(st, y, got, N);
  for (int i = 0; i < N; ++i) {
    float t = hx[i] * hb[i] + hx[i];
    bad += got[i] != (t > 0 ? t : 0);
  }
  CHECK(bad == 0);
  tpu_capture_release(cap);
  tpu_block_free(out);
  tpu_block_free(y);
  tpu_block_free(x);
  tpu_block_free(b);
  tpu_block_free(x2);
  tpu_block_free(b2);
}

/* Each of these regions records what a replay could not reproduce. */
TEST(capture_refuses_host_reads_strict_ops_and_outside_operands) {
  tpu_stream_t* st = test_stream0();
  enum { N = 256 };
  float hx[N], host[N];
  fill(hx, N, 3);
  tpu_block_t *x = upload(st, hx, N), *other = upload(st, hx, N);
  uint64_t addr = tpu_block_addr(x), bytes = N * 4;
  for (int kind = 0; kind < 3; ++kind) {
    tpu_defer_set_thread(kind == 1 ? 0 : 1);
    CHECK_OK(tpu_capture_begin(st, &addr, &bytes, 1));
    /* A second capture on the same stream is refused. */
    tpu_status_t twice = tpu_capture_begin(st, &addr, &bytes, 1);
    CHECK(twice != TPU_OK);
    tpu_status_free(twice);
    tpu_block_t* y = NULL;
    CHECK_OK(tpu_block_alloc(st, N * 4, &y));
    tpu_view_t vx = fview(kind == 2 ? tpu_block_addr(other) : addr, N);
    tpu_view_t vy = fview(tpu_block_addr(y), N);
    node(st, "neg", &vx, NULL, &vy);
    if (kind == 0) read_back(st, y, host, N); /* a host read flushes */
    tpu_capture_t* cap = NULL;
    const char* why = NULL;
    CHECK_OK(tpu_capture_end(st, &cap, &why));
    CHECK(cap == NULL && why != NULL);
    tpu_capture_release(cap);
    tpu_defer_set_thread(-1);
    CHECK_OK(tpu_stream_synchronize(st));
    tpu_block_free(y);
  }
  tpu_capture_t* cap = NULL;
  const char* why = NULL;
  tpu_status_t s = tpu_capture_end(st, &cap, &why); /* not capturing */
  CHECK(s != TPU_OK);
  tpu_status_free(s);
  tpu_block_free(x);
  tpu_block_free(other);
}

/* A node that draws random numbers gets the counters the replay is given:
 * the captured counters give the captured values, others give others. */
TEST(capture_replay_gives_random_nodes_fresh_counters) {
  tpu_stream_t* st = test_stream0();
  enum { N = 1000 };
  float hx[N], first[N], again[N], other[N];
  fill(hx, N, 5);
  tpu_block_t* x = upload(st, hx, N);
  uint64_t addr = tpu_block_addr(x), bytes = N * 4;
  tpu_defer_set_thread(1);
  CHECK_OK(tpu_capture_begin(st, &addr, &bytes, 1));
  tpu_block_t* y = NULL;
  CHECK_OK(tpu_block_alloc(st, N * 4, &y));
  tpu_view_t vx = fview(addr, N), vy = fview(tpu_block_addr(y), N);
  tpu_value_t in[1] = {{.kind = TPU_VALUE_VIEW, .u.view = vx}};
  tpu_attr_t attrs[4] = {{.kind = TPU_ATTR_FLOAT, .u.f = -1.0}, {.kind = TPU_ATTR_FLOAT, .u.f = 1.0},
                         {.kind = TPU_ATTR_INT, .u.i = 7}, {.kind = TPU_ATTR_INT, .u.i = 0}};
  CHECK_OK(tpu_capture_mark_random(st, 2, 3));
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(&g));
  CHECK_OK(tpu_graph_add_node(g, tpu_op_lookup("uniform"), in, 1, &vy, 1, attrs, 4));
  CHECK_OK(tpu_stream_submit(st, g));
  tpu_capture_t* cap = NULL;
  const char* why = NULL;
  CHECK_OK(tpu_capture_end(st, &cap, &why));
  tpu_defer_set_thread(-1);
  CHECK(cap != NULL && tpu_capture_random_count(cap) == 1);
  read_back(st, y, first, N);
  if (cap) {
    for (int k = 0; k < 2; ++k) {
      uint64_t seed = k ? 9 : 7, offset = 0;
      tpu_block_t* out = NULL;
      tpu_defer_set_thread(1);
      CHECK_OK(tpu_capture_replay(cap, st, &addr, &seed, &offset, &out));
      tpu_defer_set_thread(-1);
      read_back(st, out, k ? other : again, N);
      tpu_block_free(out);
    }
    CHECK(memcmp(first, again, sizeof(first)) == 0);
    CHECK(memcmp(first, other, sizeof(first)) != 0);
  }
  tpu_capture_release(cap);
  tpu_block_free(y);
  tpu_block_free(x);
}
