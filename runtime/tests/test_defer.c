/* test_defer.c — deferred execution and the fusion compiler: fused results
 * equal strict eager's, intermediates freed before the flush are elided and
 * never counted, programs are cached by structure (not sizes), and flushes
 * happen at the documented points only. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/fusion.h"
#include "test.h"
#include "tpu/defer.h"
#include "tpu/ops.h"
#include "tpu/runtime.h"


static tpu_view_t fview(uint64_t addr, int32_t ndim, const int64_t* sizes) {
  tpu_view_t v = {.addr = addr, .dtype = TPU_DTYPE_F32, .ndim = ndim};
  memcpy(v.sizes, sizes, sizeof(int64_t) * (size_t)ndim);
  tpu_view_set_contiguous(&v);
  return v;
}

/* A device block holding n floats copied from `host` (queued on st). */
static tpu_block_t* upload(tpu_stream_t* st, const float* host, int64_t n) {
  tpu_block_t* blk = NULL;
  CHECK_OK(tpu_block_alloc(st, (size_t)n * 4, &blk));
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_H2D, tpu_block_addr(blk), (uint64_t)(uintptr_t)host,
                           (size_t)n * 4));
  return blk;
}

/* Submits out = op(a, b) (b may be a scalar when b_view is NULL). */
static void binary(tpu_stream_t* st, const char* op, const tpu_view_t* a, const tpu_view_t* b_view,
                   double b_scalar, const tpu_view_t* out) {
  tpu_value_t in[2] = {{.kind = TPU_VALUE_VIEW, .u.view = *a}};
  if (b_view) {
    in[1].kind = TPU_VALUE_VIEW;
    in[1].u.view = *b_view;
  } else {
    in[1].kind = TPU_VALUE_SCALAR;
    in[1].u.scalar = (tpu_scalar_t){.dtype = TPU_DTYPE_F64, .v.f = b_scalar};
  }
  tpu_op_id_t id = tpu_op_lookup(op);
  tpu_attr_t attrs[TPU_MAX_ATTRS] = {{0}};
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(&g));
  CHECK_OK(tpu_graph_add_node(g, id, in, 2, out, 1, attrs, tpu_op_num_attrs(id)));
  CHECK_OK(tpu_stream_submit(st, g));
}

/* Submits out = op(a) as a node, not a graph (the bridge's way). */
static void unary(tpu_stream_t* st, const char* op, const tpu_view_t* a, const tpu_view_t* out) {
  tpu_value_t in[1] = {{.kind = TPU_VALUE_VIEW, .u.view = *a}};
  tpu_node_t node = {.op = tpu_op_lookup(op), .num_inputs = 1, .num_outputs = 1};
  node.inputs = in;
  node.outputs = (tpu_view_t*)out;
  CHECK_OK(tpu_stream_submit_node(st, &node));
}

/* Whether chain() passes b as a contiguous [1, cols] view (row stride cols,
 * as PyTorch's b.view(1, -1) gives) rather than as [cols]. */
static bool g_chain_b_row;

/* y = relu(x * 2 + b) - x, with x [rows, cols] and b [cols] broadcast; the
 * two intermediates are freed before the flush. Returns y on the host. */
static float* chain(tpu_stream_t* st, int64_t rows, int64_t cols, const float* hx,
                    const float* hb) {
  int64_t n = rows * cols, sz[2] = {rows, cols}, row_sz[2] = {1, cols};
  tpu_block_t *x, *b, *t1, *t2, *t3, *y;
  x = upload(st, hx, n);
  b = upload(st, hb, cols);
  tpu_view_t vx = fview(tpu_block_addr(x), 2, sz);
  tpu_view_t vb = g_chain_b_row ? fview(tpu_block_addr(b), 2, row_sz)
                                : fview(tpu_block_addr(b), 1, &cols);
  CHECK_OK(tpu_block_alloc(st, (size_t)n * 4, &t1));
  tpu_view_t v1 = fview(tpu_block_addr(t1), 2, sz);
  binary(st, "mul", &vx, NULL, 2.0, &v1);
  CHECK_OK(tpu_block_alloc(st, (size_t)n * 4, &t2));
  tpu_view_t v2 = fview(tpu_block_addr(t2), 2, sz);
  binary(st, "add", &v1, &vb, 0, &v2);
  tpu_block_free(t1);
  CHECK_OK(tpu_block_alloc(st, (size_t)n * 4, &t3));
  tpu_view_t v3 = fview(tpu_block_addr(t3), 2, sz);
  unary(st, "relu", &v2, &v3);
  tpu_block_free(t2);
  CHECK_OK(tpu_block_alloc(st, (size_t)n * 4, &y));
  tpu_view_t vy = fview(tpu_block_addr(y), 2, sz);
  binary(st, "sub", &v3, &vx, 0, &vy);
  tpu_block_free(t3);
  float* out = calloc((size_t)n, 4);
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)out, tpu_block_addr(y),
                           (size_t)n * 4));
  CHECK_OK(tpu_stream_synchronize(st));
  tpu_block_free(x);
  tpu_block_free(b);
  tpu_block_free(y);
  return out;
}

static void fill(float* p, int64_t n, int seed) {
  for (int64_t i = 0; i < n; ++i) p[i] = (float)(((i * 7919 + seed * 104729) % 2001) - 1000) / 250.f;
}

/* A program over x [rows, cols] and b [cols], run on the host values. */
typedef float* (*program_fn)(tpu_stream_t* st, int64_t rows, int64_t cols, const float* hx,
                             const float* hb);

/* Runs `program` in strict eager (*out_strict) and then deferred (*out_fused,
 * with fresh metrics), on inputs filled from `seed`; the caller frees all
 * four arrays. */
static void strict_then_deferred(program_fn program, int64_t rows, int64_t cols, int seed,
                                 float** out_hx, float** out_hb, float** out_strict,
                                 float** out_fused) {
  tpu_stream_t* st = test_stream0();
  *out_hx = malloc((size_t)(rows * cols) * 4);
  *out_hb = malloc((size_t)cols * 4);
  fill(*out_hx, rows * cols, seed);
  fill(*out_hb, cols, seed + 1);
  tpu_defer_set_thread(0);
  *out_strict = program(st, rows, cols, *out_hx, *out_hb);
  tpu_defer_reset_metrics();
  tpu_defer_set_thread(1);
  *out_fused = program(st, rows, cols, *out_hx, *out_hb);
  tpu_defer_set_thread(-1);
}

/* Shapes of the chain: several tiles with a ragged last one; rows longer
 * than a block of the direct path (exec.c), with a ragged last block; rows
 * too short for it (the node-by-node path); one long row split into tiles. */
static const int64_t k_chain_shapes[][2] = {{67, 301}, {5, 1300}, {3000, 7}, {1, 70001}};

/* stream: with streaming stores for every direct group (exec.c), which the
 * chains' sizes are far too small to get otherwise. b_row: b as a [1, cols]
 * view whose size-1 dim has a nonzero stride, which every row must still
 * read as row 0 (a regression: the tiled direct path once stepped by it). */
TEST(defer_fused_chain_matches_strict_and_elides) {
  const size_t nshapes = sizeof(k_chain_shapes) / sizeof(k_chain_shapes[0]);
  for (size_t c = 0; c < 3 * nshapes; ++c) {
    const int64_t rows = k_chain_shapes[c % nshapes][0], cols = k_chain_shapes[c % nshapes][1];
    const bool stream = c >= nshapes && c < 2 * nshapes;
    g_chain_b_row = c >= 2 * nshapes;
    tpu_fusion_set_stream_min_bytes(stream ? 0 : -1);
    float *hx, *hb, *strict, *fused;
    tpu_fusion_path_counts_t before, after;
    tpu_fusion_get_path_counts(&before);
    strict_then_deferred(chain, rows, cols, 1, &hx, &hb, &strict, &fused);
    tpu_fusion_get_path_counts(&after);
    /* mul, add, relu and sub all on the direct path where the rows are long enough */
    bool direct = cols >= 64;
    CHECK(after.direct_tiled - before.direct_tiled == (direct ? 1 : 0));
    CHECK(after.node_by_node - before.node_by_node == (direct ? 0 : 1));
    CHECK(after.streamed - before.streamed == (direct && stream ? 1 : 0));
    tpu_fusion_set_stream_min_bytes(-1);
    g_chain_b_row = false;
    for (int64_t i = 0; i < rows * cols; ++i) {
      float want = hx[i] * 2 + hb[i % cols];
      want = (want < 0 ? 0 : want) - hx[i];
      CHECK_NEAR(strict[i], want, 1e-6);
      CHECK(fused[i] == strict[i]);
    }
    tpu_defer_metrics_t m;
    tpu_defer_get_metrics(&m);
    CHECK(m.flushes == 1);
    CHECK(m.flushes_by_reason[TPU_FLUSH_COPY_TO_HOST] == 1);
    CHECK(m.nodes_recorded == 4);
    CHECK(m.fused_kernels == 1 && m.fused_nodes == 4);
    CHECK(m.elided_buffers == 3);
    CHECK(m.elided_bytes == 3 * rows * cols * 4);
    free(hx);
    free(hb);
    free(strict);
    free(fused);
  }
}

/* h = x + b; (y, mean, rstd) = layer_norm(h, weight b, bias b) (rms: (y,
 * rstd) = rms_norm(h, weight b)); out = y * 2. h and y are freed before
 * the flush, mean and rstd stay live. Returns out then the statistics
 * (mean, rstd; rms: rstd) on the host. A row group on the fusion
 * interpreter's row-by-row direct path. */
static bool g_rms;
static float* norm_rows(tpu_stream_t* st, int64_t rows, int64_t cols, const float* hx,
                        const float* hb) {
  int64_t n = rows * cols, sz[2] = {rows, cols}, ssz[2] = {rows, 1};
  int32_t nstat = g_rms ? 1 : 2;
  tpu_block_t *x = upload(st, hx, n), *b = upload(st, hb, cols), *h, *y, *out, *stat[2];
  tpu_view_t vx = fview(tpu_block_addr(x), 2, sz), vb = fview(tpu_block_addr(b), 1, &cols);
  CHECK_OK(tpu_block_alloc(st, (size_t)n * 4, &h));
  tpu_view_t vh = fview(tpu_block_addr(h), 2, sz);
  binary(st, "add", &vx, &vb, 0, &vh);
  CHECK_OK(tpu_block_alloc(st, (size_t)n * 4, &y));
  tpu_view_t outs[3] = {fview(tpu_block_addr(y), 2, sz)};
  for (int32_t k = 0; k < nstat; ++k) {
    CHECK_OK(tpu_block_alloc(st, (size_t)rows * 4, &stat[k]));
    outs[1 + k] = fview(tpu_block_addr(stat[k]), 2, ssz);
  }
  tpu_value_t in[3] = {{.kind = TPU_VALUE_VIEW, .u.view = vh},
                       {.kind = TPU_VALUE_VIEW, .u.view = vb},
                       {.kind = TPU_VALUE_VIEW, .u.view = vb}};
  tpu_attr_t attrs[TPU_MAX_ATTRS] = {{.kind = TPU_ATTR_INTS, .count = 1, .u.ints = {cols}},
                                     {.kind = TPU_ATTR_FLOAT, .u.f = 1e-5}};
  tpu_op_id_t id = tpu_op_lookup(g_rms ? "rms_norm" : "layer_norm");
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(&g));
  CHECK_OK(tpu_graph_add_node(g, id, in, g_rms ? 2 : 3, outs, 1 + nstat, attrs,
                              tpu_op_num_attrs(id)));
  CHECK_OK(tpu_stream_submit(st, g));
  tpu_block_free(h);
  CHECK_OK(tpu_block_alloc(st, (size_t)n * 4, &out));
  tpu_view_t vo = fview(tpu_block_addr(out), 2, sz);
  binary(st, "mul", &outs[0], NULL, 2.0, &vo);
  tpu_block_free(y);
  float* host = calloc((size_t)(n + nstat * rows), 4);
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)host, tpu_block_addr(out),
                           (size_t)n * 4));
  for (int32_t k = 0; k < nstat; ++k)
    CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)(host + n + k * rows),
                             tpu_block_addr(stat[k]), (size_t)rows * 4));
  CHECK_OK(tpu_stream_synchronize(st));
  tpu_block_free(x);
  tpu_block_free(b);
  tpu_block_free(out);
  for (int32_t k = 0; k < nstat; ++k) tpu_block_free(stat[k]);
  return host;
}

/* Rows of 64 (the shortest the row path takes), of more than one 512-wide
 * elementwise block with a ragged last one, and one long row. */
static const int64_t k_norm_shapes[][2] = {{33, 64}, {7, 1300}, {1, 9000}};

TEST(defer_fused_norm_rows_match_strict) {
  for (int variant = 0; variant < 4; ++variant) /* 2, 3: with streaming stores */
    for (size_t c = 0; c < sizeof(k_norm_shapes) / sizeof(k_norm_shapes[0]); ++c) {
      const int64_t rows = k_norm_shapes[c][0], cols = k_norm_shapes[c][1];
      const int rms = variant & 1;
      const bool stream = variant >= 2;
      g_rms = rms != 0;
      tpu_fusion_set_stream_min_bytes(stream ? 0 : -1);
      float *hx, *hb, *strict, *fused;
      tpu_fusion_path_counts_t before, after;
      tpu_fusion_get_path_counts(&before);
      strict_then_deferred(norm_rows, rows, cols, 2, &hx, &hb, &strict, &fused);
      tpu_fusion_get_path_counts(&after);
      tpu_fusion_set_stream_min_bytes(-1);
      /* the norm and the mul after it, row by row */
      CHECK(after.direct_rows - before.direct_rows == 1);
      CHECK(after.node_by_node == before.node_by_node);
      CHECK(after.streamed - before.streamed == (stream ? 1 : 0));
      for (int64_t r = 0; r < rows; ++r) { /* the reference, in double */
        double mean = 0, var = 0;
        for (int64_t k = 0; k < cols; ++k) mean += (double)hx[r * cols + k] + hb[k];
        mean = rms ? 0 : mean / (double)cols;
        for (int64_t k = 0; k < cols; ++k) {
          double d = (double)hx[r * cols + k] + hb[k] - mean;
          var += d * d;
        }
        double rstd = 1 / sqrt(var / (double)cols + 1e-5);
        for (int64_t k = 0; k < cols; ++k) {
          double yv = ((double)hx[r * cols + k] + hb[k] - mean) * rstd * hb[k] + (rms ? 0 : hb[k]);
          CHECK_NEAR(strict[r * cols + k], 2 * yv, 1e-4);
        }
        CHECK_NEAR(strict[rows * cols + r], rms ? rstd : mean, 1e-4 * (rms ? rstd : 1));
        if (!rms) CHECK_NEAR(strict[rows * cols + rows + r], rstd, 1e-4 * rstd);
      }
      int64_t total = rows * cols + (rms ? 1 : 2) * rows;
      for (int64_t i = 0; i < total; ++i) CHECK(fused[i] == strict[i]);
      tpu_defer_metrics_t m;
      tpu_defer_get_metrics(&m);
      CHECK(m.fused_kernels == 1 && m.fused_nodes == 3);
      CHECK(m.elided_buffers == 2);
      free(hx);
      free(hb);
      free(strict);
      free(fused);
    }
}

TEST(defer_programs_are_cached_by_structure_not_size) {
  tpu_stream_t* st = test_stream0();
  tpu_defer_reset_metrics();
  tpu_defer_set_thread(1);
  for (int64_t rows = 3; rows < 40; rows += 9) {
    float* hx = malloc((size_t)rows * 50 * 4);
    float hb[50];
    fill(hx, rows * 50, 3);
    fill(hb, 50, 4);
    float* y = chain(st, rows, 50, hx, hb);
    for (int64_t i = 0; i < rows * 50; ++i) {
      float want = hx[i] * 2 + hb[i % 50];
      CHECK_NEAR(y[i], (want < 0 ? 0 : want) - hx[i], 1e-6);
    }
    free(hx);
    free(y);
  }
  tpu_defer_set_thread(-1);
  tpu_defer_metrics_t m;
  tpu_defer_get_metrics(&m);
  CHECK(m.flushes == 5);
  CHECK(m.programs_compiled + m.cache_hits == 5);
  CHECK(m.programs_compiled <= 1); /* the first test may have compiled it */
  tpu_defer_cut_t cuts[8];
  int32_t n = tpu_defer_get_cuts(cuts, 8);
  CHECK(n == 5);
  for (int32_t i = 1; i < n; ++i) CHECK(cuts[i].structure == cuts[0].structure);
}

TEST(defer_elided_intermediates_are_never_counted) {
  tpu_stream_t* st = test_stream0();
  tpu_chip_t* chip = tpu_stream_chip(st);
  enum { ROWS = 256, COLS = 1024 }; /* 1 MiB per tensor: the large pool */
  float* hx = malloc(ROWS * COLS * 4);
  float* hb = malloc(COLS * 4);
  fill(hx, ROWS * COLS, 5);
  fill(hb, COLS, 6);
  int64_t peak[2];
  for (int mode = 0; mode < 2; ++mode) {
    CHECK_OK(tpu_chip_synchronize(chip));
    tpu_memory_reset_peak(chip);
    tpu_memory_stats_t s0;
    tpu_memory_get_stats(chip, &s0);
    tpu_defer_set_thread(mode);
    free(chain(st, ROWS, COLS, hx, hb));
    tpu_defer_set_thread(-1);
    tpu_memory_stats_t s1;
    tpu_memory_get_stats(chip, &s1);
    peak[mode] = s1.allocated_bytes[TPU_POOL_ALL].peak - s0.allocated_bytes[TPU_POOL_ALL].current;
    CHECK(s1.allocated_bytes[TPU_POOL_ALL].current == s0.allocated_bytes[TPU_POOL_ALL].current);
  }
  /* Strict: x, b, and two of t1..t3/y alive at once; deferred: x, b, y. */
  CHECK(peak[1] < peak[0]);
  CHECK(peak[1] <= (int64_t)(2 * ROWS * COLS * 4 + 512 + COLS * 4));
  free(hx);
  free(hb);
}

TEST(defer_size_limit_and_explicit_flush) {
  tpu_stream_t* st = test_stream0();
  int64_t n = 1000;
  tpu_block_t* x;
  CHECK_OK(tpu_block_alloc(st, (size_t)n * 4, &x));
  tpu_view_t vx = fview(tpu_block_addr(x), 1, &n);
  float* host = calloc((size_t)n, 4);
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_H2D, vx.addr, (uint64_t)(uintptr_t)host, (size_t)n * 4));
  tpu_defer_reset_metrics();
  tpu_defer_set_max_nodes(4);
  tpu_defer_set_thread(1);
  for (int i = 0; i < 10; ++i) binary(st, "add", &vx, NULL, 1.0, &vx); /* in place */
  CHECK_OK(tpu_stream_flush(st, TPU_FLUSH_EXPLICIT, "test"));
  tpu_defer_set_thread(-1);
  tpu_defer_set_max_nodes(1024);
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)host, vx.addr, (size_t)n * 4));
  CHECK_OK(tpu_stream_synchronize(st));
  for (int64_t i = 0; i < n; ++i) CHECK(host[i] == 10.f);
  tpu_defer_metrics_t m;
  tpu_defer_get_metrics(&m);
  CHECK(m.flushes == 3);
  CHECK(m.flushes_by_reason[TPU_FLUSH_SIZE_LIMIT] == 2);
  CHECK(m.flushes_by_reason[TPU_FLUSH_EXPLICIT] == 1);
  CHECK(m.elided_buffers == 0); /* x is alive */
  tpu_block_free(x);
  free(host);
}

TEST(defer_cuts_groups_at_conflicting_views) {
  /* x (8x8) += x^T (a transposed read of what the node writes) cannot run
   * tile by tile; the compiler must keep strict eager's result. */
  tpu_stream_t* st = test_stream0();
  int64_t sz[2] = {8, 8};
  float host[64], want[64], got[64];
  for (int i = 0; i < 64; ++i) host[i] = (float)i;
  for (int i = 0; i < 64; ++i) want[i] = host[i] * 3 + host[(i % 8) * 8 + i / 8] * 3;
  tpu_block_t* x;
  CHECK_OK(tpu_block_alloc(st, sizeof(host), &x));
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_H2D, tpu_block_addr(x), (uint64_t)(uintptr_t)host,
                           sizeof(host)));
  tpu_view_t vx = fview(tpu_block_addr(x), 2, sz), vt = vx;
  vt.strides[0] = 1;
  vt.strides[1] = 8;
  tpu_block_t* y;
  CHECK_OK(tpu_block_alloc(st, sizeof(host), &y));
  tpu_view_t vy = fview(tpu_block_addr(y), 2, sz);
  tpu_defer_set_thread(1);
  binary(st, "mul", &vx, NULL, 3.0, &vx);   /* x *= 3 */
  binary(st, "mul", &vt, NULL, 1.0, &vy);   /* y = x^T (reads what the last wrote, transposed) */
  binary(st, "add", &vx, &vy, 0, &vx);      /* x += y */
  tpu_defer_set_thread(-1);
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)got, vx.addr, sizeof(got)));
  CHECK_OK(tpu_stream_synchronize(st));
  for (int i = 0; i < 64; ++i) CHECK(got[i] == want[i]);
  tpu_block_free(x);
  tpu_block_free(y);
}

/* Submits out = op(a) for a row-local op with a `dim` list (mean: dim,
 * keepdim; softmax: dim, half_to_float). */
static void along(tpu_stream_t* st, const char* op, const tpu_view_t* a, int64_t dim,
                  const tpu_view_t* out) {
  tpu_value_t in[1] = {{.kind = TPU_VALUE_VIEW, .u.view = *a}};
  tpu_op_id_t id = tpu_op_lookup(op);
  tpu_attr_t attrs[TPU_MAX_ATTRS] = {{0}};
  if (strcmp(op, "mean") == 0) {
    attrs[0] = (tpu_attr_t){.kind = TPU_ATTR_INTS, .count = 1, .u.ints = {dim}};
    attrs[1] = (tpu_attr_t){.kind = TPU_ATTR_BOOL, .u.i = 1};
  } else {
    attrs[0] = (tpu_attr_t){.kind = TPU_ATTR_INT, .u.i = dim};
    attrs[1] = (tpu_attr_t){.kind = TPU_ATTR_BOOL, .u.i = 0};
  }
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(&g));
  CHECK_OK(tpu_graph_add_node(g, id, in, 1, out, 1, attrs, tpu_op_num_attrs(id)));
  CHECK_OK(tpu_stream_submit(st, g));
}

/* y = softmax(h - mean(h, -1), -1) * 2 with h = x + b: a row-tiled group.
 * Each intermediate is freed after its last use, so the allocator hands
 * the next node a block of a dead one (a [rows, 1] value in the block of a
 * [rows, cols] one): those are scratch values, never written. */
static float* row_chain(tpu_stream_t* st, int64_t rows, int64_t cols, const float* hx,
                        const float* hb) {
  int64_t n = rows * cols, sz[2] = {rows, cols}, sz1[2] = {rows, 1};
  tpu_block_t *x, *b, *h, *m, *c, *s, *y;
  x = upload(st, hx, n);
  b = upload(st, hb, cols);
  tpu_view_t vx = fview(tpu_block_addr(x), 2, sz), vb = fview(tpu_block_addr(b), 1, &cols);
  CHECK_OK(tpu_block_alloc(st, (size_t)n * 4, &h));
  tpu_view_t vh = fview(tpu_block_addr(h), 2, sz);
  binary(st, "add", &vx, &vb, 0, &vh);
  CHECK_OK(tpu_block_alloc(st, (size_t)rows * 4, &m));
  tpu_view_t vm = fview(tpu_block_addr(m), 2, sz1);
  along(st, "mean", &vh, -1, &vm);
  CHECK_OK(tpu_block_alloc(st, (size_t)n * 4, &c));
  tpu_view_t vc = fview(tpu_block_addr(c), 2, sz);
  binary(st, "sub", &vh, &vm, 0, &vc);
  tpu_block_free(h);
  tpu_block_free(m);
  CHECK_OK(tpu_block_alloc(st, (size_t)n * 4, &s));
  tpu_view_t vs = fview(tpu_block_addr(s), 2, sz);
  along(st, "softmax", &vc, 1, &vs);
  tpu_block_free(c);
  CHECK_OK(tpu_block_alloc(st, (size_t)n * 4, &y));
  tpu_view_t vy = fview(tpu_block_addr(y), 2, sz);
  binary(st, "mul", &vs, NULL, 2.0, &vy);
  tpu_block_free(s);
  float* out = calloc((size_t)n, 4);
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)out, tpu_block_addr(y),
                           (size_t)n * 4));
  CHECK_OK(tpu_stream_synchronize(st));
  tpu_block_free(x);
  tpu_block_free(b);
  tpu_block_free(y);
  return out;
}

TEST(defer_row_tiled_group_matches_strict) {
  enum { ROWS = 53, COLS = 700 }; /* several row tiles, a ragged last one */
  float *hx, *hb, *strict, *fused;
  strict_then_deferred(row_chain, ROWS, COLS, 3, &hx, &hb, &strict, &fused);
  for (int64_t r = 0; r < ROWS; ++r) {
    double mean = 0, mx = -1e30, sum = 0;
    for (int64_t k = 0; k < COLS; ++k) mean += hx[r * COLS + k] + hb[k];
    mean /= COLS;
    for (int64_t k = 0; k < COLS; ++k) {
      double c = hx[r * COLS + k] + hb[k] - mean;
      mx = c > mx ? c : mx;
    }
    for (int64_t k = 0; k < COLS; ++k) sum += exp(hx[r * COLS + k] + hb[k] - mean - mx);
    for (int64_t k = 0; k < COLS; ++k) {
      double want = 2 * exp(hx[r * COLS + k] + hb[k] - mean - mx) / sum;
      CHECK_NEAR(strict[r * COLS + k], want, 1e-6);
      CHECK_NEAR(fused[r * COLS + k], strict[r * COLS + k], 1e-7);
    }
  }
  tpu_defer_metrics_t m;
  tpu_defer_get_metrics(&m);
  CHECK(m.flushes == 1);
  CHECK(m.fused_kernels == 1 && m.fused_nodes == 5); /* one row-tiled kernel */
  CHECK(m.elided_buffers == 4);                      /* h, the mean, c and s */
  free(hx);
  free(hb);
  free(strict);
  free(fused);
}

TEST(defer_row_group_cut_at_transposed_read) {
  /* mean over rows of x, then a pointwise read of x's transpose: the read
   * is not by rows, so the compiler must not put it in the row group. */
  tpu_stream_t* st = test_stream0();
  int64_t sz[2] = {16, 16}, sz1[2] = {16, 1};
  float host[256], got[256];
  for (int i = 0; i < 256; ++i) host[i] = (float)(i % 23) - 11.0f;
  tpu_block_t *x, *y, *m, *z;
  CHECK_OK(tpu_block_alloc(st, sizeof(host), &x));
  CHECK_OK(tpu_block_alloc(st, sizeof(host), &y));
  CHECK_OK(tpu_block_alloc(st, 16 * 4, &m));
  CHECK_OK(tpu_block_alloc(st, sizeof(host), &z));
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_H2D, tpu_block_addr(x), (uint64_t)(uintptr_t)host,
                           sizeof(host)));
  tpu_view_t vx = fview(tpu_block_addr(x), 2, sz), vy = fview(tpu_block_addr(y), 2, sz);
  tpu_view_t vm = fview(tpu_block_addr(m), 2, sz1), vz = fview(tpu_block_addr(z), 2, sz);
  tpu_view_t vyt = vy;
  vyt.strides[0] = 1;
  vyt.strides[1] = 16;
  tpu_defer_reset_metrics();
  tpu_defer_set_thread(1);
  binary(st, "mul", &vx, NULL, 2.0, &vy); /* y = 2x */
  along(st, "mean", &vy, -1, &vm);        /* m = mean(y, -1) */
  binary(st, "add", &vyt, &vm, 0, &vz);   /* z = y^T + m */
  tpu_defer_set_thread(-1);
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)got, tpu_block_addr(z),
                           sizeof(got)));
  CHECK_OK(tpu_stream_synchronize(st));
  for (int r = 0; r < 16; ++r) {
    double mean = 0;
    for (int k = 0; k < 16; ++k) mean += 2.0 * host[r * 16 + k];
    mean /= 16;
    for (int k = 0; k < 16; ++k) CHECK_NEAR(got[r * 16 + k], 2.0 * host[k * 16 + r] + mean, 1e-5);
  }
  tpu_defer_metrics_t met;
  tpu_defer_get_metrics(&met);
  CHECK(met.fused_kernels == 1 && met.fused_nodes == 2); /* mul + mean; the add is cut */
  tpu_block_free(x);
  tpu_block_free(y);
  tpu_block_free(m);
  tpu_block_free(z);
}

/* A foreach-style program over `rows` tensors x_i of different lengths
 * (cols - 7 i, from row i of hx): each op runs over the whole list before
 * the next one, as torch._foreach_* ops record,
 *     t_i = x_i * x_i;   x_0 *= 3;   t_i *= 0.5;   y_i = t_i + x_i;   free t_i
 * so no two nodes over one tensor are adjacent as recorded. Returns the y_i,
 * row i holding y_i (the rest zero). */
static float* foreach_chain(tpu_stream_t* st, int64_t rows, int64_t cols, const float* hx,
                            const float* hb) {
  (void)hb;
  enum { MAXK = 8 };
  tpu_block_t *x[MAXK], *t[MAXK], *y[MAXK];
  tpu_view_t vx[MAXK], vt[MAXK], vy[MAXK];
  int64_t len[MAXK];
  CHECK(rows <= MAXK && cols > 7 * rows);
  for (int64_t i = 0; i < rows; ++i) {
    len[i] = cols - 7 * i;
    x[i] = upload(st, hx + i * cols, len[i]);
    vx[i] = fview(tpu_block_addr(x[i]), 1, &len[i]);
  }
  for (int64_t i = 0; i < rows; ++i) {
    CHECK_OK(tpu_block_alloc(st, (size_t)len[i] * 4, &t[i]));
    vt[i] = fview(tpu_block_addr(t[i]), 1, &len[i]);
    binary(st, "mul", &vx[i], &vx[i], 0, &vt[i]);
  }
  binary(st, "mul", &vx[0], NULL, 3.0, &vx[0]); /* y_0's add must stay after this */
  for (int64_t i = 0; i < rows; ++i) binary(st, "mul", &vt[i], NULL, 0.5, &vt[i]);
  for (int64_t i = 0; i < rows; ++i) {
    CHECK_OK(tpu_block_alloc(st, (size_t)len[i] * 4, &y[i]));
    vy[i] = fview(tpu_block_addr(y[i]), 1, &len[i]);
    binary(st, "add", &vt[i], &vx[i], 0, &vy[i]);
  }
  for (int64_t i = 0; i < rows; ++i) tpu_block_free(t[i]);
  float* out = calloc((size_t)(rows * cols), 4);
  for (int64_t i = 0; i < rows; ++i)
    CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)(out + i * cols), vy[i].addr,
                             (size_t)len[i] * 4));
  CHECK_OK(tpu_stream_synchronize(st));
  for (int64_t i = 0; i < rows; ++i) {
    tpu_block_free(x[i]);
    tpu_block_free(y[i]);
  }
  return out;
}

TEST(defer_schedule_fuses_foreach_chains_and_keeps_conflicts) {
  enum { K = 5, COLS = 300 };
  float *hx, *hb, *strict, *fused;
  strict_then_deferred(foreach_chain, K, COLS, 7, &hx, &hb, &strict, &fused);
  for (int64_t i = 0; i < K; ++i)
    for (int64_t e = 0; e < COLS - 7 * i; ++e) {
      float x = hx[i * COLS + e];
      float want = x * x * 0.5f + (i == 0 ? x * 3.0f : x);
      CHECK(strict[i * COLS + e] == want);
      CHECK(fused[i * COLS + e] == strict[i * COLS + e]);
    }
  tpu_defer_metrics_t m;
  tpu_defer_get_metrics(&m);
  /* Each t_i with i > 0 (two values: the product and its in-place scaling)
   * lives in scratch of its chain's kernel; t_0 does not: y_0's add may not
   * move above x_0 *= 3, so t_0 is read outside its group. */
  CHECK(m.elided_buffers == 2 * (K - 1));
  free(hx);
  free(hb);
  free(strict);
  free(fused);
}

/* A foreach step whose heads come first over the whole list, as an
 * optimizer's decay and moment updates do, and whose per-tensor consumer
 * comes last:
 *     x_i *= 0.5 (every i);   m_i *= 0.9 (every i);   y_i = x_i + m_i (every i)
 * with x_i row i of hx and m_i row i of hx reversed, lengths cols - 7 i.
 * Returns the y_i, row i holding y_i. */
static float* foreach_heads(tpu_stream_t* st, int64_t rows, int64_t cols, const float* hx,
                            const float* hb) {
  (void)hb;
  enum { MAXK = 8 };
  tpu_block_t *x[MAXK], *m[MAXK], *y[MAXK];
  tpu_view_t vx[MAXK], vm[MAXK], vy[MAXK];
  int64_t len[MAXK];
  CHECK(rows <= MAXK && cols > 7 * rows);
  float* rev = malloc((size_t)(rows * cols) * 4);
  for (int64_t e = 0; e < rows * cols; ++e) rev[e] = hx[rows * cols - 1 - e];
  for (int64_t i = 0; i < rows; ++i) {
    len[i] = cols - 7 * i;
    x[i] = upload(st, hx + i * cols, len[i]);
    m[i] = upload(st, rev + i * cols, len[i]);
    vx[i] = fview(tpu_block_addr(x[i]), 1, &len[i]);
    vm[i] = fview(tpu_block_addr(m[i]), 1, &len[i]);
  }
  for (int64_t i = 0; i < rows; ++i) binary(st, "mul", &vx[i], NULL, 0.5, &vx[i]);
  for (int64_t i = 0; i < rows; ++i) binary(st, "mul", &vm[i], NULL, 0.9, &vm[i]);
  for (int64_t i = 0; i < rows; ++i) {
    CHECK_OK(tpu_block_alloc(st, (size_t)len[i] * 4, &y[i]));
    vy[i] = fview(tpu_block_addr(y[i]), 1, &len[i]);
    binary(st, "add", &vx[i], &vm[i], 0, &vy[i]);
  }
  float* out = calloc((size_t)(rows * cols), 4);
  for (int64_t i = 0; i < rows; ++i)
    CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)(out + i * cols), vy[i].addr,
                             (size_t)len[i] * 4));
  CHECK_OK(tpu_stream_synchronize(st));
  for (int64_t i = 0; i < rows; ++i) {
    tpu_block_free(x[i]);
    tpu_block_free(m[i]);
    tpu_block_free(y[i]);
  }
  free(rev);
  return out;
}

/* The heads sink to their tensor's consumer (schedule.c, sink_nodes): one
 * fused kernel of three nodes per tensor, results equal to strict's. */
TEST(defer_schedule_sinks_foreach_heads_into_their_chain) {
  enum { K = 4, COLS = 300 };
  float *hx, *hb, *strict, *fused;
  strict_then_deferred(foreach_heads, K, COLS, 9, &hx, &hb, &strict, &fused);
  for (int64_t i = 0; i < K; ++i)
    for (int64_t e = 0; e < COLS - 7 * i; ++e) {
      float want = hx[i * COLS + e] * 0.5f + hx[K * COLS - 1 - (i * COLS + e)] * 0.9f;
      CHECK(strict[i * COLS + e] == want);
      CHECK(fused[i * COLS + e] == strict[i * COLS + e]);
    }
  tpu_defer_metrics_t m;
  tpu_defer_get_metrics(&m);
  CHECK(m.fused_kernels == K && m.fused_nodes == 3 * K);
  free(hx);
  free(hb);
  free(strict);
  free(fused);
}

/* Inputs written in place ('!' in the row) are known to the fusion passes:
 * such a node is never fused or moved, and its writes order the schedule. */
TEST(defer_mutated_inputs_are_known) {
  CHECK(tpu_op_mutated_inputs(tpu_op_lookup("batch_norm_legit")) == (1u << 3 | 1u << 4));
  CHECK(tpu_op_mutated_inputs(tpu_op_lookup("rrelu_with_noise")) == 1u << 1);
  CHECK(tpu_op_mutated_inputs(tpu_op_lookup("add")) == 0);
  CHECK(tpu_op_mutated_inputs(-1) == 0);
}

/* The schedule never moves a node above the free of memory it touches. Here
 * o = x * 2 (16 floats), p = x + 1, s = o[8:16] + 1, o is freed, and
 * k = p * 3 is allocated where o began: k may not move up to p (nothing
 * between them touches k's bytes), else o's free record would end k's
 * lifetime and k would never be written. Returns k then s on the host. */
static float* tenant_after_free(tpu_stream_t* st, int64_t rows, int64_t cols, const float* hx,
                                const float* hb) {
  (void)rows, (void)cols, (void)hb;
  int64_t n16 = 16, n8 = 8;
  tpu_block_t *x = upload(st, hx, 16), *o, *p, *sb, *k;
  tpu_view_t vx = fview(tpu_block_addr(x), 1, &n16), vx8 = fview(tpu_block_addr(x), 1, &n8);
  CHECK_OK(tpu_block_alloc(st, 16 * 4, &o));
  tpu_view_t vo = fview(tpu_block_addr(o), 1, &n16);
  binary(st, "mul", &vx, NULL, 2.0, &vo);
  CHECK_OK(tpu_block_alloc(st, 8 * 4, &p));
  tpu_view_t vp = fview(tpu_block_addr(p), 1, &n8);
  binary(st, "add", &vx8, NULL, 1.0, &vp);
  CHECK_OK(tpu_block_alloc(st, 8 * 4, &sb));
  tpu_view_t vs = fview(tpu_block_addr(sb), 1, &n8), vo_hi = fview(tpu_block_addr(o) + 32, 1, &n8);
  binary(st, "add", &vo_hi, NULL, 1.0, &vs);
  uint64_t o_addr = tpu_block_addr(o);
  tpu_block_free(o);
  CHECK_OK(tpu_block_alloc(st, 8 * 4, &k));
  CHECK(tpu_block_addr(k) == o_addr); /* the case under test: k is o's new tenant */
  tpu_view_t vk = fview(tpu_block_addr(k), 1, &n8);
  binary(st, "mul", &vp, NULL, 3.0, &vk);
  tpu_block_free(p);
  float* out = calloc(16, 4);
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)out, tpu_block_addr(k), 32));
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)(out + 8), tpu_block_addr(sb), 32));
  CHECK_OK(tpu_stream_synchronize(st));
  tpu_block_free(x);
  tpu_block_free(sb);
  tpu_block_free(k);
  return out;
}

TEST(defer_schedule_keeps_a_new_tenant_after_the_free) {
  float *hx, *hb, *strict, *fused;
  strict_then_deferred(tenant_after_free, 1, 16, 3, &hx, &hb, &strict, &fused);
  for (int e = 0; e < 8; ++e) {
    CHECK(strict[e] == (hx[e] + 1.0f) * 3.0f);
    CHECK(strict[8 + e] == hx[8 + e] * 2.0f + 1.0f);
  }
  for (int e = 0; e < 16; ++e) CHECK(fused[e] == strict[e]);
  free(hx);
  free(hb);
  free(strict);
  free(fused);
}

/* ---- strict eager's error contract ---------------------------------------------------- */

static tpu_view_t i64_view(uint64_t addr, int64_t n) {
  tpu_view_t v = {.addr = addr, .dtype = TPU_DTYPE_I64, .ndim = 1, .sizes = {n}};
  tpu_view_set_contiguous(&v);
  return v;
}

static tpu_value_t view_value(tpu_view_t v) {
  return (tpu_value_t){.kind = TPU_VALUE_VIEW, .u.view = v};
}

static tpu_value_t int_value(int64_t i) {
  return (tpu_value_t){.kind = TPU_VALUE_SCALAR,
                       .u.scalar = (tpu_scalar_t){.dtype = TPU_DTYPE_I64, .v.i = i}};
}

/* Submits out = op(a, b) as a node. */
static void node2(tpu_stream_t* st, const char* op, tpu_value_t a, tpu_value_t b,
                  tpu_view_t out) {
  tpu_value_t in[2] = {a, b};
  tpu_op_id_t id = tpu_op_lookup(op);
  tpu_node_t node = {.op = id, .num_inputs = 2, .num_outputs = 1,
                     .num_attrs = tpu_op_num_attrs(id)}; /* attributes left at their defaults */
  node.inputs = in;
  node.outputs = &out;
  CHECK_OK(tpu_stream_submit_node(st, &node));
}

enum { DIV_N = 40000, DIV_OUT = 5 }; /* several tiles of a fused group */

/* Over x = 0..n-1, z = 1 (z[bad] = 0 when bad >= 0) and acc = 7:
 *   p = x * 2; q = p // z; w = x * 3; acc += w; r = w - p
 * one fused group (q fails on the tile holding z[bad]). Returns p, q, w,
 * acc, r on the host and the synchronisation's status in *out_error. */
static int64_t* division_program(tpu_stream_t* st, int64_t bad, tpu_status_t* out_error) {
  const int64_t n = DIV_N;
  int64_t* host = malloc(sizeof(int64_t) * (size_t)(n * DIV_OUT));
  int64_t* hz = malloc(sizeof(int64_t) * (size_t)n);
  for (int64_t i = 0; i < n; ++i) {
    host[i] = i;             /* x */
    host[n + i] = 7;         /* acc */
    hz[i] = i == bad ? 0 : 1;
  }
  tpu_block_t *x, *z, *acc, *out[DIV_OUT];
  size_t bytes = sizeof(int64_t) * (size_t)n;
  CHECK_OK(tpu_block_alloc(st, bytes, &x));
  CHECK_OK(tpu_block_alloc(st, bytes, &z));
  CHECK_OK(tpu_block_alloc(st, bytes, &acc));
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_H2D, tpu_block_addr(x), (uint64_t)(uintptr_t)host, bytes));
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_H2D, tpu_block_addr(z), (uint64_t)(uintptr_t)hz, bytes));
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_H2D, tpu_block_addr(acc), (uint64_t)(uintptr_t)(host + n),
                           bytes));
  CHECK_OK(tpu_stream_synchronize(st));
  tpu_view_t vx = i64_view(tpu_block_addr(x), n), vz = i64_view(tpu_block_addr(z), n);
  tpu_view_t vacc = i64_view(tpu_block_addr(acc), n), v[DIV_OUT];
  for (int k = 0; k < DIV_OUT; ++k) {
    if (k == 3) {
      v[k] = vacc;
      continue;
    }
    CHECK_OK(tpu_block_alloc(st, bytes, &out[k]));
    v[k] = i64_view(tpu_block_addr(out[k]), n);
  }
  node2(st, "mul", view_value(vx), int_value(2), v[0]);
  node2(st, "floor_divide", view_value(v[0]), view_value(vz), v[1]);
  node2(st, "mul", view_value(vx), int_value(3), v[2]);
  node2(st, "add", view_value(vacc), view_value(v[2]), vacc);
  node2(st, "sub", view_value(v[2]), view_value(v[0]), v[4]);
  for (int k = 0; k < DIV_OUT; ++k)
    CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)(host + k * n), v[k].addr,
                             bytes));
  *out_error = tpu_stream_synchronize(st);
  tpu_block_free(x);
  tpu_block_free(z);
  tpu_block_free(acc);
  for (int k = 0; k < DIV_OUT; ++k)
    if (k != 3) tpu_block_free(out[k]);
  free(hz);
  return host;
}

/* As in strict eager, a node failing in the middle of a fused group records
 * its error (naming the op), every other node still runs on every tile (the
 * in-place add once), the error is returned once by the next
 * synchronisation, and the cached program then runs good inputs exactly. */
TEST(defer_error_in_fused_group_runs_every_other_node) {
  tpu_stream_t* st = test_stream0();
  const int64_t n = DIV_N, bad = DIV_N / 2 + 5;
  int64_t* result[2];
  for (int mode = 0; mode < 2; ++mode) {
    tpu_defer_reset_metrics();
    tpu_defer_set_thread(mode);
    tpu_status_t err = TPU_OK;
    result[mode] = division_program(st, bad, &err);
    tpu_defer_set_thread(-1);
    CHECK(err != TPU_OK && tpu_status_code(err) == TPU_CODE_INVALID_ARGUMENT);
    CHECK(strstr(tpu_status_message(err), "floor_divide") != NULL);
    CHECK(strstr(tpu_status_message(err), "ZeroDivisionError") != NULL);
    tpu_status_free(err);
    CHECK_OK(tpu_stream_synchronize(st)); /* reported once */
    if (mode == 1) {
      tpu_defer_metrics_t m;
      tpu_defer_get_metrics(&m);
      CHECK(m.fused_kernels == 1 && m.fused_nodes == 5);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t* s = result[0];
    const int64_t* d = result[1];
    CHECK(s[i] == 2 * i && s[2 * n + i] == 3 * i && s[3 * n + i] == 7 + 3 * i &&
          s[4 * n + i] == i);
    for (int k = 0; k < DIV_OUT; ++k)
      if (k != 1) CHECK(d[k * n + i] == s[k * n + i]); /* q: the failing node's */
  }
  free(result[0]);
  free(result[1]);

  tpu_defer_reset_metrics();
  tpu_defer_set_thread(1);
  tpu_status_t err = TPU_OK;
  int64_t* good = division_program(st, -1, &err);
  tpu_defer_set_thread(-1);
  CHECK_OK(err);
  tpu_defer_metrics_t m;
  tpu_defer_get_metrics(&m);
  CHECK(m.programs_compiled == 0 && m.cache_hits == 1);
  for (int64_t i = 0; i < n; ++i)
    CHECK(good[i] == 2 * i && good[n + i] == 2 * i && good[2 * n + i] == 3 * i &&
          good[3 * n + i] == 7 + 3 * i && good[4 * n + i] == i);
  free(good);
}

/* The flush's memory estimate sees every live deferred block, however many:
 * p (4 MiB, first written by the graph's only node) is the oldest of more
 * than 4,096 live provisional blocks, and x (4 MiB, counted before the
 * flush) is freed after that node, so both are held at once. */
TEST(defer_peak_counts_every_live_block) {
  tpu_stream_t* st = test_stream0();
  tpu_chip_t* chip = tpu_stream_chip(st);
  enum { N = 1 << 20, SMALL = 4200 }; /* N floats: 4 MiB */
  CHECK_OK(tpu_chip_synchronize(chip));
  tpu_memory_reset_peak(chip);
  tpu_memory_stats_t s0, s1;
  tpu_memory_get_stats(chip, &s0);
  tpu_block_t *x = NULL, *p = NULL;
  CHECK_OK(tpu_block_alloc(st, (size_t)N * 4, &x));
  tpu_defer_set_thread(1);
  CHECK_OK(tpu_block_alloc(st, (size_t)N * 4, &p));
  tpu_block_t** small = calloc(SMALL, sizeof(*small));
  for (int i = 0; i < SMALL; ++i) CHECK_OK(tpu_block_alloc(st, 512, &small[i]));
  int64_t sizes[1] = {N};
  tpu_view_t vx = fview(tpu_block_addr(x), 1, sizes), vp = fview(tpu_block_addr(p), 1, sizes);
  binary(st, "mul", &vx, NULL, 3.0, &vp);
  tpu_block_free(x);
  CHECK_OK(tpu_stream_flush(st, TPU_FLUSH_EXPLICIT, NULL));
  tpu_defer_set_thread(-1);
  CHECK_OK(tpu_stream_synchronize(st));
  tpu_memory_get_stats(chip, &s1);
  int64_t peak = s1.allocated_bytes[TPU_POOL_ALL].peak - s0.allocated_bytes[TPU_POOL_ALL].current;
  CHECK(peak >= (int64_t)2 * N * 4); /* x and p while the node runs */
  for (int i = 0; i < SMALL; ++i) tpu_block_free(small[i]);
  free(small);
  tpu_block_free(p);
}
