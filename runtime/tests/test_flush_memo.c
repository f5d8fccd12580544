/* test_flush_memo.c — the flush memo's signature (src/flush_memo.c): the
 * same recording at other addresses signs the same; another alias pattern,
 * scalar, shape or free record signs differently; a stored entry is found
 * and the least recently used one is replaced. */
#include <stdlib.h>
#include <string.h>

#include "fusion/fusion.h"
#include "stream/internal.h"
#include "test.h"
#include "tpu/ops.h"

static tpu_view_t vec(uint64_t addr, int64_t n) {
  tpu_view_t v = {.addr = addr, .dtype = TPU_DTYPE_F32, .ndim = 1};
  v.sizes[0] = n;
  v.strides[0] = 1;
  return v;
}

/* y = x * s; z = y + x (x at a, y at b, z at c; 64 floats each). */
static tpu_graph_t* two_nodes(uint64_t a, uint64_t b, uint64_t c, double s) {
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(&g));
  tpu_value_t in[2] = {{.kind = TPU_VALUE_VIEW, .u.view = vec(a, 64)},
                       {.kind = TPU_VALUE_SCALAR, .u.scalar = {.dtype = TPU_DTYPE_F64, .v.f = s}}};
  tpu_view_t out = vec(b, 64);
  CHECK_OK(tpu_graph_add_node(g, tpu_op_lookup("mul"), in, 2, &out, 1, NULL, 0));
  tpu_value_t in2[2] = {{.kind = TPU_VALUE_VIEW, .u.view = vec(b, 64)},
                        {.kind = TPU_VALUE_VIEW, .u.view = vec(a, 64)}};
  tpu_view_t out2 = vec(c, 64);
  CHECK_OK(tpu_graph_add_node(g, tpu_op_lookup("add"), in2, 2, &out2, 1, NULL, 0));
  return g;
}

typedef struct sig {
  uint64_t* words;
  int64_t len;
} sig_t;

static sig_t sign(tpu_flush_memo_t* m, tpu_graph_t* g, const tpu_free_record_t* frees,
                  int32_t free_count) {
  CHECK(tpu_flush_memo_sign(m, g, frees, free_count, NULL, NULL, 0, 0));
  sig_t s = {malloc(sizeof(uint64_t) * (size_t)m->next_len), m->next_len};
  memcpy(s.words, m->next, sizeof(uint64_t) * (size_t)m->next_len);
  tpu_graph_release(g);
  return s;
}

static bool same(sig_t a, sig_t b) {
  return a.len == b.len && memcmp(a.words, b.words, sizeof(uint64_t) * (size_t)a.len) == 0;
}

TEST(flush_memo_signs_placement_free) {
  tpu_flush_memo_t m = {0};
  const uint64_t K = 4096; /* bytes apart: disjoint buffers */
  sig_t base = sign(&m, two_nodes(0x100000, 0x100000 + K, 0x100000 + 2 * K, 2.0), NULL, 0);
  /* elsewhere, and in another order in memory: the same recording */
  sig_t moved = sign(&m, two_nodes(0x900000 + 2 * K, 0x500000, 0x700000, 2.0), NULL, 0);
  CHECK(same(base, moved));
  /* y written into x's buffer: another alias pattern */
  sig_t alias = sign(&m, two_nodes(0x100000, 0x100000, 0x100000 + 2 * K, 2.0), NULL, 0);
  CHECK(!same(base, alias));
  /* y overlapping x by one float: the ranges meet */
  sig_t overlap = sign(&m, two_nodes(0x100000, 0x100000 + 252, 0x100000 + 2 * K, 2.0), NULL, 0);
  CHECK(!same(base, overlap));
  /* y right after x (touching, not meeting): as disjoint as before */
  sig_t touching = sign(&m, two_nodes(0x100000, 0x100000 + 256, 0x100000 + 2 * K, 2.0), NULL, 0);
  CHECK(same(base, touching));
  /* another scalar */
  sig_t scalar = sign(&m, two_nodes(0x100000, 0x100000 + K, 0x100000 + 2 * K, 3.0), NULL, 0);
  CHECK(!same(base, scalar));
  /* a free record: x freed after node 1, then at another point */
  tpu_free_record_t f1 = {0x100000, 0x100000 + 256, 1, true};
  tpu_free_record_t f2 = {0x100000, 0x100000 + 256, 2, true};
  sig_t freed1 = sign(&m, two_nodes(0x100000, 0x100000 + K, 0x100000 + 2 * K, 2.0), &f1, 1);
  sig_t freed2 = sign(&m, two_nodes(0x100000, 0x100000 + K, 0x100000 + 2 * K, 2.0), &f2, 1);
  tpu_free_record_t f1_moved = {0x300000, 0x300000 + 256, 1, true};
  sig_t freed1_moved = sign(&m, two_nodes(0x300000, 0x600000, 0x800000, 2.0), &f1_moved, 1);
  CHECK(!same(base, freed1) && !same(freed1, freed2) && same(freed1, freed1_moved));
  sig_t* all[] = {&base, &moved, &alias, &overlap, &touching, &scalar, &freed1, &freed2,
                  &freed1_moved};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) free(all[i]->words);
  free(m.next);
  free(m.spans);
  free(m.span_ids);
}

TEST(flush_memo_finds_and_replaces_the_least_recent) {
  tpu_flush_memo_t m = {0};
  /* Programs are only held and compared by pointer here: compile one real
   * program to have something to retain. */
  tpu_graph_t* g = two_nodes(0x100000, 0x200000, 0x300000, 2.0);
  tpu_fusion_analysis_t* a = NULL;
  tpu_program_t* p = NULL;
  bool hit = false;
  CHECK_OK(tpu_fusion_analyse(g, NULL, 0, &a));
  CHECK_OK(tpu_program_cache_get(g, a, &p, &hit));
  tpu_fusion_analysis_free(a);
  /* entry k: k nodes' worth of distinct scalars */
  for (int k = 0; k < TPU_MEMO_ENTRIES + 1; ++k) {
    tpu_graph_t* gk = two_nodes(0x100000, 0x200000, 0x300000, 10.0 + k);
    CHECK(tpu_flush_memo_sign(&m, gk, NULL, 0, NULL, NULL, 0, 0));
    CHECK(tpu_flush_memo_find(&m) == NULL);
    tpu_flush_memo_store(&m, NULL, 2, p, 100 + k);
    tpu_graph_release(gk);
    if (k == 2) { /* touch entry 0 so that entry 1 is the least recent */
      tpu_graph_t* g0 = two_nodes(0x400000, 0x500000, 0x600000, 10.0);
      CHECK(tpu_flush_memo_sign(&m, g0, NULL, 0, NULL, NULL, 0, 0));
      const tpu_flush_memo_entry_t* e = tpu_flush_memo_find(&m);
      CHECK(e && e->extra == 100);
      tpu_graph_release(g0);
    }
  }
  /* the ninth store replaced entry 1 (scalar 11), kept entry 0 (scalar 10) */
  tpu_graph_t* g0 = two_nodes(0x100000, 0x200000, 0x300000, 10.0);
  CHECK(tpu_flush_memo_sign(&m, g0, NULL, 0, NULL, NULL, 0, 0));
  CHECK(tpu_flush_memo_find(&m) != NULL);
  tpu_graph_release(g0);
  tpu_graph_t* g1 = two_nodes(0x100000, 0x200000, 0x300000, 11.0);
  CHECK(tpu_flush_memo_sign(&m, g1, NULL, 0, NULL, NULL, 0, 0));
  CHECK(tpu_flush_memo_find(&m) == NULL);
  tpu_graph_release(g1);
  for (int i = 0; i < TPU_MEMO_ENTRIES; ++i) {
    tpu_program_release(m.entries[i].program);
    free(m.entries[i].key);
    free(m.entries[i].order);
  }
  free(m.next);
  free(m.spans);
  free(m.span_ids);
  tpu_program_release(p);
  tpu_graph_release(g);
}

/* x_{i+1} = x_i * 2 for 40 nodes: more spans than the insertion sort takes. */
static tpu_graph_t* chain(const uint64_t* addr, int n) {
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(&g));
  for (int i = 0; i < n; ++i) {
    tpu_value_t in[2] = {{.kind = TPU_VALUE_VIEW, .u.view = vec(addr[i], 64)},
                         {.kind = TPU_VALUE_SCALAR, .u.scalar = {.dtype = TPU_DTYPE_F64, .v.f = 2}}};
    tpu_view_t out = vec(addr[i + 1], 64);
    CHECK_OK(tpu_graph_add_node(g, tpu_op_lookup("mul"), in, 2, &out, 1, NULL, 0));
  }
  return g;
}

TEST(flush_memo_signs_long_graphs_placement_free) {
  enum { N = 40 };
  uint64_t a[N + 1], b[N + 1];
  for (int i = 0; i <= N; ++i) {
    a[i] = 0x100000 + (uint64_t)i * 4096;                   /* in order */
    b[i] = 0x900000 + (uint64_t)((i * 17) % (N + 1)) * 8192; /* scattered */
  }
  tpu_flush_memo_t m = {0};
  sig_t sa = sign(&m, chain(a, N), NULL, 0);
  sig_t sb = sign(&m, chain(b, N), NULL, 0);
  CHECK(same(sa, sb));
  b[N] = b[3]; /* the last output lands on an earlier value's buffer */
  sig_t sc = sign(&m, chain(b, N), NULL, 0);
  CHECK(!same(sa, sc));
  free(sa.words);
  free(sb.words);
  free(sc.words);
  free(m.next);
  free(m.spans);
  free(m.span_ids);
}
