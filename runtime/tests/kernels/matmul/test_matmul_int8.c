/* Tests of the int8 products (kernels/matmul/matmul_int8.c): torch._int_mm and
 * aten._weight_int8pack_mm against plain loops over every layout, size tail
 * and dtype the kernels split on, at each gemv kernel level this CPU has;
 * and the argument checks. */
#include <dirent.h>
#include <pthread.h>

#include "kernels/matmul/matmul.h"
#include "kernels/matmul/mxu.h"
#include "kernel.h"
#include "kernel_test_util.h"
#include "tpu/runtime.h"

typedef struct int_mm_case {
  tpu_dtype_t a_dtype;
  int64_t m, k, n;
  tt_layout_t a_layout, b_layout, c_layout;
} int_mm_case_t;

static const int_mm_case_t k_int_mm[] = {
    {TPU_DTYPE_I8, 5, 7, 3, TT_CONTIG, TT_CONTIG, TT_CONTIG},
    {TPU_DTYPE_I8, 33, 64, 48, TT_CONTIG, TT_TRANSPOSED, TT_CONTIG},
    {TPU_DTYPE_U8, 17, 40, 24, TT_CONTIG, TT_CONTIG, TT_CONTIG},
    {TPU_DTYPE_U8, 9, 30, 11, TT_TRANSPOSED, TT_PADDED, TT_TRANSPOSED},
    {TPU_DTYPE_I8, 1, 300, 70, TT_CONTIG, TT_CONTIG, TT_PADDED},
    {TPU_DTYPE_I8, 70, 129, 65, TT_PADDED, TT_TRANSPOSED, TT_CONTIG},
    {TPU_DTYPE_I8, 4, 0, 3, TT_CONTIG, TT_CONTIG, TT_CONTIG},
};

static void check_int_mm(const int_mm_case_t* c, size_t index) {
  const tpu_op_def_t* def = tt_def("int_mm");
  if (!def) return;
  int64_t as[2] = {c->m, c->k}, bs[2] = {c->k, c->n}, cs[2] = {c->m, c->n};
  tt_t a = tt_make(c->a_dtype, 2, as, c->a_layout), b = tt_make(TPU_DTYPE_I8, 2, bs, c->b_layout);
  tt_t out = tt_make(TPU_DTYPE_I32, 2, cs, c->c_layout);
  tt_fill_ints(&a.view, 11 + index, c->a_dtype == TPU_DTYPE_U8 ? 0 : -128,
               c->a_dtype == TPU_DTYPE_U8 ? 255 : 127);
  tt_fill_ints(&b.view, 13 + index, -128, 127);
  tt_fill_value(&out.view, 12345);
  tpu_value_t in[2] = {tt_value(&a.view), tt_value(&b.view)};
  tpu_node_t node = tt_node(in, 2, &out.view, 1, NULL, 0);
  node.op = tpu_op_lookup("int_mm");
  CHECK_CODE(def->check(def, &node), TPU_CODE_OK);
  CHECK_CODE(tt_run(def->kernel, def, &node), TPU_CODE_OK);
  int64_t worst = 0;
  for (int64_t i = 0; i < c->m; ++i)
    for (int64_t j = 0; j < c->n; ++j) {
      int64_t want = 0;
      for (int64_t kk = 0; kk < c->k; ++kk)
        want += (int64_t)tt_get(&a.view, i * c->k + kk) * (int64_t)tt_get(&b.view, kk * c->n + j);
      int64_t got = (int64_t)tt_get(&out.view, i * c->n + j);
      if (got != want) worst = got - want;
    }
  if (worst != 0)
    tpu_test_fail(__FILE__, __LINE__, "_int_mm case %zu (%lldx%lldx%lld): off by %lld", index,
                  (long long)c->m, (long long)c->k, (long long)c->n, (long long)worst);
  tt_free(&a);
  tt_free(&b);
  tt_free(&out);
}

/* Where the CPU has VNNI or AMX-INT8 the unit runs the contiguous cases (and
 * declines none of them); every case matches the plain sums either way. */
TEST(int_mm_matches_plain_sums) {
  tpu_mxu_info_t before, after;
  tpu_mxu_get_info(&before);
  for (size_t i = 0; i < sizeof(k_int_mm) / sizeof(k_int_mm[0]); ++i)
    check_int_mm(&k_int_mm[i], i);
  tpu_mxu_get_info(&after);
  if (after.int8) CHECK(after.gemms > before.gemms);
  else CHECK(after.gemms == before.gemms);
}

/* _int_mm run in a graph, as the host driver runs it: mat2 read again is
 * laid out blocked once (with the s8 x s8 compensation for an int8 self)
 * and then read from the weight cache. Each product is exact: int8 and
 * uint8 selves over one cached mat2 (their blocked layouts differ), int8
 * extremes, odd k, n not a multiple of the kernel's 16/64-column blocks. */
typedef struct int_mm_cached_case {
  int64_t m, k, n;
  bool extremes; /* self and mat2 from {-128, 127} (self uint8: {0, 255}) */
} int_mm_cached_case_t;

static const int_mm_cached_case_t k_int_mm_cached[] = {
    {64, 96, 80, false}, {5, 131, 67, true}, {128, 768, 200, false}, {1, 17, 3, true},
};

static void fill_extremes(const tpu_view_t* v, uint64_t seed, int64_t lo, int64_t hi) {
  tt_fill_ints(v, seed, 0, 1);
  for (int64_t i = 0; i < tpu_view_numel(v); ++i) tt_set(v, i, tt_get(v, i) ? hi : lo);
}

/* The last nonzero got - want over C (0: exact). */
static int64_t int_mm_error(const tt_t* a, const tt_t* b, const tt_t* out, int64_t m, int64_t k,
                            int64_t n) {
  int64_t worst = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t want = 0;
      for (int64_t kk = 0; kk < k; ++kk)
        want += (int64_t)tt_get(&a->view, i * k + kk) * (int64_t)tt_get(&b->view, kk * n + j);
      int64_t d = (int64_t)tt_get(&out->view, i * n + j) - want;
      if (d != 0) worst = d;
    }
  return worst;
}

TEST(int_mm_reads_a_cached_mat2_exactly) {
  const tpu_op_def_t* def = tt_def("int_mm");
  if (!def) return;
  tpu_mxu_info_t info;
  tpu_mxu_get_info(&info);
  for (size_t ci = 0; ci < sizeof(k_int_mm_cached) / sizeof(k_int_mm_cached[0]); ++ci) {
    const int_mm_cached_case_t* c = &k_int_mm_cached[ci];
    tpu_weight_cache_clear();
    int64_t as[2] = {c->m, c->k}, bs[2] = {c->k, c->n}, cs[2] = {c->m, c->n};
    tt_t b = tt_make(TPU_DTYPE_I8, 2, bs, TT_CONTIG);
    if (c->extremes) fill_extremes(&b.view, 40 + ci, -128, 127);
    else tt_fill_ints(&b.view, 40 + ci, -128, 127);
    for (int u = 0; u < 2; ++u) { /* int8 self, then uint8 self over the same mat2 */
      tpu_dtype_t ad = u ? TPU_DTYPE_U8 : TPU_DTYPE_I8;
      int64_t lo = u ? 0 : -128, hi = u ? 255 : 127;
      tt_t a = tt_make(ad, 2, as, TT_CONTIG), out = tt_make(TPU_DTYPE_I32, 2, cs, TT_CONTIG);
      if (c->extremes) fill_extremes(&a.view, 50 + ci, lo, hi);
      else tt_fill_ints(&a.view, 50 + ci, lo, hi);
      tpu_value_t in[2] = {tt_value(&a.view), tt_value(&b.view)};
      tpu_node_t node = tt_node(in, 2, &out.view, 1, NULL, 0);
      node.op = tpu_op_lookup("int_mm");
      tpu_graph_t* graph = NULL;
      CHECK_OK(tpu_graph_from_node(&node, &graph));
      tpu_exec_ctx_t ctx = {.graph = graph};
      tpu_weight_cache_stats_t s0, s1;
      tpu_weight_cache_get_stats(&s0);
      for (int run = 0; run < 3; ++run) { /* plain, laid out and kept, from the cache */
        tt_fill_value(&out.view, 12345);
        CHECK_OK(def->kernel(def, &node, &ctx));
        int64_t err = int_mm_error(&a, &b, &out, c->m, c->k, c->n);
        if (err != 0)
          tpu_test_fail(__FILE__, __LINE__, "cached _int_mm case %zu (%s self, run %d): off by %lld",
                        ci, tpu_dtype_name(ad), run, (long long)err);
      }
      tpu_weight_cache_get_stats(&s1);
      /* where the unit takes int8, the third run read the cache; the int8
       * self laid mat2 out (the cache was cleared), the uint8 self laid it
       * out again where its layout differs (AVX512-VNNI: the s8 x s8
       * compensation) or read the int8 self's copy (AMX-INT8: one layout) */
      if (info.int8)
        CHECK(s1.hits >= s0.hits + 1 && s1.packs <= s0.packs + 1 &&
              (u == 1 || s1.packs == s0.packs + 1));
      else CHECK(s1.hits == s0.hits && s1.packs == s0.packs);
      tpu_graph_release(graph);
      tt_free(&a);
      tt_free(&out);
    }
    tt_free(&b);
  }
  tpu_weight_cache_clear();
}

/* A GEMM on the unit starts no OpenMP team: it runs as single-threaded
 * parts over the compute pool (mxu.c), whose workers exist before the
 * count. Counted on a fresh thread, which would lead a team of its own.
 * Exact sums: int8 extremes, odd k, n off the kernel's blocks. */

static int process_threads(void) {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  for (struct dirent* e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

typedef struct thread_probe {
  int before, after;
  int64_t err;
  tpu_status_code_t code;
} thread_probe_t;

static void pool_noop(void* arg, int64_t begin, int64_t end) { (void)arg, (void)begin, (void)end; }

static void* thread_probe_run(void* arg) {
  thread_probe_t* t = (thread_probe_t*)arg;
  const tpu_op_def_t* def = tt_def("int_mm");
  int64_t m = 96, k = 257, n = 200, as[2] = {m, k}, bs[2] = {k, n}, cs[2] = {m, n};
  tt_t a = tt_make(TPU_DTYPE_I8, 2, as, TT_CONTIG), b = tt_make(TPU_DTYPE_I8, 2, bs, TT_CONTIG);
  tt_t out = tt_make(TPU_DTYPE_I32, 2, cs, TT_CONTIG);
  tt_fill_ints(&a.view, 21, 0, 1);
  tt_fill_ints(&b.view, 22, 0, 1);
  for (int64_t i = 0; i < m * k; ++i) tt_set(&a.view, i, tt_get(&a.view, i) ? 127 : -128);
  for (int64_t i = 0; i < k * n; ++i) tt_set(&b.view, i, tt_get(&b.view, i) ? 127 : -128);
  tpu_value_t in[2] = {tt_value(&a.view), tt_value(&b.view)};
  tpu_node_t node = tt_node(in, 2, &out.view, 1, NULL, 0);
  node.op = tpu_op_lookup("int_mm");
  tpu_parallel_for(4, 1, pool_noop, NULL); /* the pool's workers exist before the count */
  t->before = process_threads();
  tpu_status_t st = tt_run(def->kernel, def, &node);
  t->after = process_threads();
  t->code = tpu_status_code(st);
  tpu_status_free(st);
  t->err = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t want = 0;
      for (int64_t kk = 0; kk < k; ++kk)
        want += (int64_t)tt_get(&a.view, i * k + kk) * (int64_t)tt_get(&b.view, kk * n + j);
      if ((int64_t)tt_get(&out.view, i * n + j) != want) t->err = 1;
    }
  tt_free(&a), tt_free(&b), tt_free(&out);
  return NULL;
}

TEST(int_mm_starts_no_openmp_team) {
  if (!tt_def("int_mm")) return;
  tpu_mxu_info_t info;
  tpu_mxu_get_info(&info);
  thread_probe_t t = {0};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, thread_probe_run, &t) == 0);
  pthread_join(th, NULL);
  CHECK(t.code == TPU_CODE_OK);
  CHECK(t.err == 0);
  if (info.int8 && t.before > 0) CHECK(t.after == t.before);
}

typedef struct w8_case {
  tpu_dtype_t dtype;
  int64_t m, k, n;
  int64_t a_pad;      /* extra elements per row of self */
  int64_t s_stride;   /* of scales */
} w8_case_t;

static const w8_case_t k_w8[] = {
    {TPU_DTYPE_F32, 1, 64, 48, 0, 1},
    {TPU_DTYPE_BF16, 1, 768, 1037, 0, 1},   /* a decode step: column blocks, tails */
    {TPU_DTYPE_F16, 3, 37, 300, 5, 2},      /* k tail, padded rows, strided scales */
    {TPU_DTYPE_BF16, 70, 45, 130, 0, 1},    /* GEMM units, n tail */
    {TPU_DTYPE_BF16, 300, 20, 140, 3, 1},   /* more rows than a unit's block */
    {TPU_DTYPE_F32, 7, 33, 27, 0, 1},       /* the most rows of the dot path */
    {TPU_DTYPE_F32, 130, 16, 129, 1, 3},
    {TPU_DTYPE_F16, 2, 1, 5, 0, 1},
};

static void check_w8(const w8_case_t* c, size_t index, int level) {
  const tpu_op_def_t* def = tt_def("weight_int8pack_mm");
  if (!def) return;
  int64_t as[2] = {c->m, c->k + c->a_pad}, bs[2] = {c->n, c->k}, cs[2] = {c->m, c->n};
  int64_t ss[1] = {c->n * c->s_stride};
  tt_t a = tt_make(c->dtype, 2, as, TT_CONTIG), b = tt_make(TPU_DTYPE_I8, 2, bs, TT_CONTIG);
  tt_t s = tt_make(c->dtype, 1, ss, TT_CONTIG), out = tt_make(c->dtype, 2, cs, TT_CONTIG);
  tt_fill_ints(&a.view, 3 + index, -4, 4);
  tt_fill_ints(&b.view, 5 + index, -128, 127);
  for (int64_t e = 0; e < c->n * c->k; e += 5) tt_set(&b.view, e, e % 2 ? 127 : -128); /* extremes */
  tt_fill_ints(&s.view, 7 + index, -3, 3);
  tt_fill_value(&out.view, NAN);
  tpu_view_t av = a.view, sv = s.view;
  av.sizes[1] = c->k;
  sv.sizes[0] = c->n, sv.strides[0] = c->s_stride;
  tpu_value_t in[3] = {tt_value(&av), tt_value(&b.view), tt_value(&sv)};
  tpu_node_t node = tt_node(in, 3, &out.view, 1, NULL, 0);
  node.op = tpu_op_lookup("weight_int8pack_mm");
  CHECK_CODE(def->check(def, &node), TPU_CODE_OK);
  CHECK_CODE(tt_run(def->kernel, def, &node), TPU_CODE_OK);
  double worst = 0;
  for (int64_t i = 0; i < c->m; ++i)
    for (int64_t j = 0; j < c->n; ++j) {
      double sum = 0;
      for (int64_t kk = 0; kk < c->k; ++kk)
        sum += tt_get(&a.view, i * (c->k + c->a_pad) + kk) * tt_get(&b.view, j * c->k + kk);
      double want = sum * tt_get(&s.view, j * c->s_stride);
      double got = tt_get(&out.view, i * c->n + j);
      double d = tt_rel_diff(got, want);
      if (!(d <= worst)) worst = d;
    }
  if (!(worst <= tt_tol(c->dtype)))
    tpu_test_fail(__FILE__, __LINE__, "_weight_int8pack_mm case %zu (%s %lldx%lldx%lld, level %d): diff %g",
                  index, tpu_dtype_name(c->dtype), (long long)c->m, (long long)c->k,
                  (long long)c->n, level, worst);
  tt_free(&a);
  tt_free(&b);
  tt_free(&s);
  tt_free(&out);
}

TEST(weight_int8pack_mm_matches_plain_sums) {
  int best = tpu_mm_gemv_set_level(-1);
  for (int level = best; level >= 0; --level) {
    int got = tpu_mm_gemv_set_level(level);
    for (size_t i = 0; i < sizeof(k_w8) / sizeof(k_w8[0]); ++i) check_w8(&k_w8[i], i, got);
  }
  tpu_mm_gemv_set_level(-1);
}

/* What PyTorch's CPU kernels refuse, check refuses (UNIMPLEMENTED: the bridge
 * then raises PyTorch's own error) and the kernel refuses (INVALID_ARGUMENT). */
TEST(int8_products_refuse_bad_arguments) {
  const tpu_op_def_t* im = tt_def("int_mm");
  const tpu_op_def_t* w8 = tt_def("weight_int8pack_mm");
  if (!im || !w8) return;
  int64_t s44[2] = {4, 4}, s34[2] = {3, 4}, s4[1] = {4}, s3[1] = {3};
  tt_t i8 = tt_make(TPU_DTYPE_I8, 2, s44, TT_CONTIG), i8t = tt_make(TPU_DTYPE_I8, 2, s44, TT_TRANSPOSED);
  tt_t f32 = tt_make(TPU_DTYPE_F32, 2, s44, TT_CONTIG), f32t = tt_make(TPU_DTYPE_F32, 2, s44, TT_TRANSPOSED);
  tt_t i8_34 = tt_make(TPU_DTYPE_I8, 2, s34, TT_CONTIG), i32 = tt_make(TPU_DTYPE_I32, 2, s44, TT_CONTIG);
  tt_t sc = tt_make(TPU_DTYPE_F32, 1, s4, TT_CONTIG), sc3 = tt_make(TPU_DTYPE_F32, 1, s3, TT_CONTIG);
  tt_t sc16 = tt_make(TPU_DTYPE_BF16, 1, s4, TT_CONTIG), o = tt_make(TPU_DTYPE_F32, 2, s44, TT_CONTIG);
  struct {
    const tpu_op_def_t* def;
    tpu_view_t in[3];
    int n;
    tpu_view_t* out;
  } bad[] = {
      {im, {f32.view, i8.view}, 2, &i32.view},     /* self not int8 */
      {im, {i8.view, f32.view}, 2, &i32.view},     /* mat2 not int8 */
      {im, {i8.view, i8_34.view}, 2, &i32.view},   /* self.size(1) != mat2.size(0) */
      {w8, {i8.view, i8.view, sc.view}, 3, &o.view},        /* A not float */
      {w8, {f32t.view, i8.view, sc.view}, 3, &o.view},      /* A's rows not contiguous */
      {w8, {f32.view, i8t.view, sc.view}, 3, &o.view},      /* B not contiguous */
      {w8, {f32.view, f32.view, sc.view}, 3, &o.view},      /* B not int8 */
      {w8, {f32.view, i8.view, sc3.view}, 3, &o.view},      /* scales' size */
      {w8, {f32.view, i8.view, sc16.view}, 3, &o.view},     /* scales' dtype */
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    tpu_value_t in[3];
    for (int k = 0; k < bad[i].n; ++k) in[k] = tt_value(&bad[i].in[k]);
    tpu_node_t node = tt_node(in, bad[i].n, bad[i].out, 1, NULL, 0);
    tpu_status_t s = bad[i].def->check(bad[i].def, &node);
    if (tpu_status_code(s) != TPU_CODE_UNIMPLEMENTED)
      tpu_test_fail(__FILE__, __LINE__, "bad case %zu: check gave %s", i,
                    tpu_status_code_name(tpu_status_code(s)));
    tpu_status_free(s);
    CHECK_CODE(tt_run(bad[i].def->kernel, bad[i].def, &node), TPU_CODE_INVALID_ARGUMENT);
  }
  tt_free(&i8), tt_free(&i8t), tt_free(&f32), tt_free(&f32t), tt_free(&i8_34), tt_free(&i32);
  tt_free(&sc), tt_free(&sc3), tt_free(&sc16), tt_free(&o);
}
