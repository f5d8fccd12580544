/* test_gemm_epilogue.c — GEMM groups of the fusion compiler: a GEMM and the
 * pointwise nodes after it over C's elements run as its epilogue
 * (fusion/epilogue.c). Deferred results equal strict eager's bit for bit
 * (the same kernels on the same elements) and a double reference; the
 * metrics count the epilogues and the intermediates kept in scratch; a node that writes what the GEMM reads, or
 * reads C other than element for element, stays out; an error inside an
 * epilogue is reported, naming its op, while every other node runs once on
 * every element. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "tpu/defer.h"
#include "tpu/dtype.h"
#include "tpu/ops.h"
#include "tpu/runtime.h"

static tpu_view_t view_nd(uint64_t addr, tpu_dtype_t dtype, int32_t ndim, const int64_t* sizes) {
  tpu_view_t v = {.addr = addr, .dtype = dtype, .ndim = ndim};
  memcpy(v.sizes, sizes, sizeof(int64_t) * (size_t)ndim);
  tpu_view_set_contiguous(&v);
  return v;
}

static tpu_value_t as_value(tpu_view_t v) { return (tpu_value_t){.kind = TPU_VALUE_VIEW, .u.view = v}; }

static tpu_value_t number(double f) {
  return (tpu_value_t){.kind = TPU_VALUE_SCALAR,
                       .u.scalar = (tpu_scalar_t){.dtype = TPU_DTYPE_F64, .v.f = f}};
}

/* Submits one node of `op` (its attrs absent: their defaults). */
static void submit(tpu_stream_t* st, const char* op, tpu_value_t* in, int32_t nin, tpu_view_t out) {
  tpu_op_id_t id = tpu_op_lookup(op);
  tpu_node_t node = {.op = id, .num_inputs = nin, .num_outputs = 1,
                     .num_attrs = tpu_op_num_attrs(id)};
  node.inputs = in;
  node.outputs = &out;
  CHECK_OK(tpu_stream_submit_node(st, &node));
}

static tpu_block_t* upload(tpu_stream_t* st, const void* host, size_t bytes) {
  tpu_block_t* blk = NULL;
  CHECK_OK(tpu_block_alloc(st, bytes, &blk));
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_H2D, tpu_block_addr(blk), (uint64_t)(uintptr_t)host, bytes));
  return blk;
}

static float value_at(int64_t i, int seed) {
  return (float)(((i * 7919 + seed * 104729) % 2001) - 1000) / 1000.f;
}

/* Host data of n elements of dtype (float32 or bfloat16) from `seed`. */
static void* host_data(tpu_dtype_t dtype, int64_t n, int seed) {
  void* p = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; ++i) {
    float f = value_at(i, seed);
    if (dtype == TPU_DTYPE_BF16) ((uint16_t*)p)[i] = tpu_f32_to_bf16(f);
    else ((float*)p)[i] = f;
  }
  return p;
}

static double host_get(tpu_dtype_t dtype, const void* p, int64_t i) {
  return dtype == TPU_DTYPE_BF16 ? tpu_bf16_to_f32(((const uint16_t*)p)[i]) : ((const float*)p)[i];
}

/* With x [m,k], w [k,n], b [n], r [m,n]: C = addmm(b, x, w); then, over C
 * seen as [2, m/2, n] when m is even (a linear layer's 3-D view): t =
 * relu(C); y = t * 2; z = y + r, written to `into_x` (x, when k == n: a
 * node that writes the GEMM's input) or a fresh buffer. C, t and y are freed
 * before the flush. Returns z on the host (the caller frees it). */
typedef struct epi_case {
  int64_t m, k, n;
  tpu_dtype_t dtype;
  bool relu_into_x; /* t is written over x (k == n) */
} epi_case_t;

static void* epilogue_program(tpu_stream_t* st, const epi_case_t* c) {
  int64_t m = c->m, k = c->k, n = c->n;
  size_t es = tpu_dtype_size(c->dtype);
  void *hx = host_data(c->dtype, m * k, 1), *hw = host_data(c->dtype, k * n, 2);
  void *hb = host_data(c->dtype, n, 3), *hr = host_data(c->dtype, m * n, 4);
  tpu_block_t* x = upload(st, hx, (size_t)(m * k) * es);
  tpu_block_t* w = upload(st, hw, (size_t)(k * n) * es);
  tpu_block_t* b = upload(st, hb, (size_t)n * es);
  tpu_block_t* r = upload(st, hr, (size_t)(m * n) * es);
  tpu_block_t *cb, *tb = NULL, *yb, *zb;
  int64_t sx[2] = {m, k}, sw[2] = {k, n}, sc[2] = {m, n};
  int64_t s3[3] = {2, m / 2, n};
  bool three = m % 2 == 0;
  CHECK_OK(tpu_block_alloc(st, (size_t)(m * n) * es, &cb));
  tpu_value_t mm_in[3] = {as_value(view_nd(tpu_block_addr(b), c->dtype, 1, &n)),
                          as_value(view_nd(tpu_block_addr(x), c->dtype, 2, sx)),
                          as_value(view_nd(tpu_block_addr(w), c->dtype, 2, sw))};
  submit(st, "addmm", mm_in, 3, view_nd(tpu_block_addr(cb), c->dtype, 2, sc));
#define EPI_VIEW(blk) view_nd(tpu_block_addr(blk), c->dtype, three ? 3 : 2, three ? s3 : sc)
  tpu_view_t vt;
  if (c->relu_into_x) {
    vt = EPI_VIEW(x);
  } else {
    CHECK_OK(tpu_block_alloc(st, (size_t)(m * n) * es, &tb));
    vt = EPI_VIEW(tb);
  }
  tpu_value_t relu_in[1] = {as_value(EPI_VIEW(cb))};
  submit(st, "relu", relu_in, 1, vt);
  tpu_block_free(cb);
  CHECK_OK(tpu_block_alloc(st, (size_t)(m * n) * es, &yb));
  tpu_value_t mul_in[2] = {as_value(vt), number(2.0)};
  submit(st, "mul", mul_in, 2, EPI_VIEW(yb));
  if (tb) tpu_block_free(tb);
  CHECK_OK(tpu_block_alloc(st, (size_t)(m * n) * es, &zb));
  tpu_value_t add_in[2] = {as_value(EPI_VIEW(yb)), as_value(EPI_VIEW(r))};
  submit(st, "add", add_in, 2, EPI_VIEW(zb));
#undef EPI_VIEW
  tpu_block_free(yb);
  void* out = calloc((size_t)(m * n), es);
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)out, tpu_block_addr(zb),
                           (size_t)(m * n) * es));
  CHECK_OK(tpu_stream_synchronize(st));
  /* the double reference */
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = host_get(c->dtype, hb, j);
      for (int64_t q = 0; q < k; ++q)
        acc += host_get(c->dtype, hx, i * k + q) * host_get(c->dtype, hw, q * n + j);
      double want = (acc > 0 ? acc : 0) * 2 + host_get(c->dtype, hr, i * n + j);
      double tol = c->dtype == TPU_DTYPE_BF16 ? 0.02 * (1 + fabs(want)) : 1e-4 * (1 + fabs(want));
      CHECK_NEAR(host_get(c->dtype, out, i * n + j), want, tol);
    }
  tpu_block_free(x);
  tpu_block_free(w);
  tpu_block_free(b);
  tpu_block_free(r);
  tpu_block_free(zb);
  free(hx);
  free(hw);
  free(hb);
  free(hr);
  return out;
}

/* Deferred (with fresh metrics, which it returns), then strict eager.
 * Deferred first: its buffers then cannot hold strict eager's results from
 * before, so an element the epilogue missed cannot pass. */
static tpu_defer_metrics_t strict_vs_deferred(const epi_case_t* c) {
  tpu_stream_t* st = test_stream0();
  tpu_defer_reset_metrics();
  tpu_defer_set_thread(1);
  void* fused = epilogue_program(st, c);
  tpu_defer_metrics_t mt;
  tpu_defer_get_metrics(&mt);
  tpu_defer_set_thread(0);
  void* strict = epilogue_program(st, c);
  tpu_defer_set_thread(-1);
  CHECK(memcmp(strict, fused, (size_t)(c->m * c->n) * tpu_dtype_size(c->dtype)) == 0);
  free(strict);
  free(fused);
  return mt;
}

/* Shapes: several GEMM units with ragged edges, over a 3-D view of C; an
 * odd row count (C's own 2-D view); one row (column blocks; in bfloat16 the
 * gemv computes C whole and the epilogue follows in row blocks); a narrow
 * C; bfloat16 over many rows (the matrix unit where the CPU has one). */
static const epi_case_t k_cases[] = {
    {130, 70, 301, TPU_DTYPE_F32, false}, {67, 33, 520, TPU_DTYPE_F32, false},
    {1, 64, 2000, TPU_DTYPE_F32, false},  {1, 64, 2000, TPU_DTYPE_BF16, false},
    {300, 16, 5, TPU_DTYPE_F32, false},   {96, 64, 384, TPU_DTYPE_BF16, false},
};

TEST(gemm_epilogue_matches_strict_and_is_counted) {
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) {
    tpu_defer_metrics_t mt = strict_vs_deferred(&k_cases[i]);
    CHECK(mt.flushes == 1);
    CHECK(mt.fused_kernels == 1 && mt.fused_nodes == 4);
    CHECK(mt.gemm_epilogues == 1 && mt.epilogue_nodes == 3);
    CHECK(mt.elided_buffers == 2); /* t and y stay in scratch; C reaches memory */
  }
}

TEST(gemm_epilogue_can_be_turned_off) {
  CHECK(tpu_defer_gemm_epilogues());
  tpu_defer_set_gemm_epilogues(false);
  tpu_defer_metrics_t mt = strict_vs_deferred(&k_cases[0]);
  tpu_defer_set_gemm_epilogues(true);
  CHECK(mt.gemm_epilogues == 0 && mt.epilogue_nodes == 0);
  CHECK(mt.fused_kernels == 1 && mt.fused_nodes == 3); /* the pointwise run, tiled */
}

/* relu(C) written over x, which the GEMM reads: it may not run while other
 * blocks of C still read x, so the GEMM runs alone. */
TEST(gemm_epilogue_stops_at_a_write_to_the_gemm_input) {
  epi_case_t c = {64, 48, 48, TPU_DTYPE_F32, true};
  tpu_defer_metrics_t mt = strict_vs_deferred(&c);
  CHECK(mt.gemm_epilogues == 0);
}

/* A read of C that is not element for element (C transposed) stays out. */
TEST(gemm_epilogue_stops_at_a_transposed_read) {
  tpu_stream_t* st = test_stream0();
  enum { N = 40 };
  float hx[N * N], out[2][N * N];
  for (int i = 0; i < N * N; ++i) hx[i] = value_at(i, 5);
  for (int mode = 0; mode < 2; ++mode) {
    tpu_defer_reset_metrics();
    tpu_defer_set_thread(mode);
    tpu_block_t *x = upload(st, hx, sizeof(hx)), *cb, *yb;
    int64_t s[2] = {N, N};
    CHECK_OK(tpu_block_alloc(st, sizeof(hx), &cb));
    CHECK_OK(tpu_block_alloc(st, sizeof(hx), &yb));
    tpu_view_t vx = view_nd(tpu_block_addr(x), TPU_DTYPE_F32, 2, s);
    tpu_view_t vc = view_nd(tpu_block_addr(cb), TPU_DTYPE_F32, 2, s), ct = vc;
    ct.strides[0] = 1, ct.strides[1] = N;
    tpu_value_t mm_in[2] = {as_value(vx), as_value(vx)};
    submit(st, "mm", mm_in, 2, vc);
    tpu_value_t add_in[2] = {as_value(vc), as_value(ct)}; /* C + C^T */
    submit(st, "add", add_in, 2, view_nd(tpu_block_addr(yb), TPU_DTYPE_F32, 2, s));
    CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)out[mode], tpu_block_addr(yb),
                             sizeof(hx)));
    CHECK_OK(tpu_stream_synchronize(st));
    tpu_defer_set_thread(-1);
    tpu_block_free(x);
    tpu_block_free(cb);
    tpu_block_free(yb);
    tpu_defer_metrics_t mt;
    tpu_defer_get_metrics(&mt);
    CHECK(mt.gemm_epilogues == 0);
  }
  CHECK(memcmp(out[0], out[1], sizeof(out[0])) == 0);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < N; ++j) CHECK(out[0][i * N + j] == out[0][j * N + i]);
}

/* int64: C = x @ w; q = C // z (z holds a 0); acc += C in place. The
 * floor_divide fails on one block: the error names it, and every other node
 * -- the GEMM, and the in-place add on every block, once -- still runs. */
TEST(gemm_epilogue_error_runs_every_other_node) {
  tpu_stream_t* st = test_stream0();
  enum { M = 90, K = 7, N = 260 };
  const int64_t bad = 61 * N + 17;
  static int64_t hx[M * K], hw[K * N], hz[M * N], hacc[M * N], res[2][2][M * N];
  for (int i = 0; i < M * K; ++i) hx[i] = i % 5 - 2;
  for (int i = 0; i < K * N; ++i) hw[i] = i % 7 - 3;
  for (int i = 0; i < M * N; ++i) hz[i] = i == bad ? 0 : 1;
  for (int mode = 0; mode < 2; ++mode) {
    for (int i = 0; i < M * N; ++i) hacc[i] = 7;
    tpu_defer_reset_metrics();
    tpu_defer_set_thread(mode);
    tpu_block_t *x = upload(st, hx, sizeof(hx)), *w = upload(st, hw, sizeof(hw));
    tpu_block_t *z = upload(st, hz, sizeof(hz)), *acc = upload(st, hacc, sizeof(hacc)), *cb, *qb;
    int64_t sx[2] = {M, K}, sw[2] = {K, N}, sc[2] = {M, N};
    CHECK_OK(tpu_block_alloc(st, sizeof(hz), &cb));
    CHECK_OK(tpu_block_alloc(st, sizeof(hz), &qb));
    tpu_view_t vc = view_nd(tpu_block_addr(cb), TPU_DTYPE_I64, 2, sc);
    tpu_view_t vacc = view_nd(tpu_block_addr(acc), TPU_DTYPE_I64, 2, sc);
    tpu_value_t mm_in[2] = {as_value(view_nd(tpu_block_addr(x), TPU_DTYPE_I64, 2, sx)),
                            as_value(view_nd(tpu_block_addr(w), TPU_DTYPE_I64, 2, sw))};
    submit(st, "mm", mm_in, 2, vc);
    tpu_value_t div_in[2] = {as_value(vc),
                             as_value(view_nd(tpu_block_addr(z), TPU_DTYPE_I64, 2, sc))};
    submit(st, "floor_divide", div_in, 2, view_nd(tpu_block_addr(qb), TPU_DTYPE_I64, 2, sc));
    tpu_value_t add_in[2] = {as_value(vacc), as_value(vc)};
    submit(st, "add", add_in, 2, vacc);
    CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)res[mode][0],
                             tpu_block_addr(cb), sizeof(hz)));
    CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)res[mode][1],
                             tpu_block_addr(acc), sizeof(hz)));
    tpu_status_t err = tpu_stream_synchronize(st);
    tpu_defer_set_thread(-1);
    CHECK(err != TPU_OK && tpu_status_code(err) == TPU_CODE_INVALID_ARGUMENT);
    CHECK(strstr(tpu_status_message(err), "floor_divide") != NULL);
    tpu_status_free(err);
    CHECK_OK(tpu_stream_synchronize(st)); /* reported once */
    tpu_block_free(x);
    tpu_block_free(w);
    tpu_block_free(z);
    tpu_block_free(acc);
    tpu_block_free(cb);
    tpu_block_free(qb);
    if (mode == 1) {
      tpu_defer_metrics_t mt;
      tpu_defer_get_metrics(&mt);
      CHECK(mt.gemm_epilogues == 1 && mt.epilogue_nodes == 2);
    }
  }
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      int64_t want = 0;
      for (int q = 0; q < K; ++q) want += hx[i * K + q] * hw[q * N + j];
      for (int mode = 0; mode < 2; ++mode) {
        CHECK(res[mode][0][i * N + j] == want);
        CHECK(res[mode][1][i * N + j] == 7 + want);
      }
    }
}
