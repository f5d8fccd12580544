/* test_flush_memo.c — the flush memo's signature (src/hal/flush_memo.c): the
 * same recording at other addresses signs the same; another alias pattern,
 * scalar, shape or free record signs differently; a near miss (one stride,
 * dtype, size, scalar or attribute changed, nothing else) is never found; a
 * stored entry is found and the least recently used one is replaced; a raw
 * signature (addresses as they are) finds an entry only where the full
 * path would, and never once the entry was replaced or the cache cleared;
 * the nodes' plans an entry keeps are a repeat's and no other's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/fusion.h"
#include "hal/flush_memo.h"
#include "test.h"
#include "tpu/ops.h"
#include "tpu/program_cache.h"

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
  /* at addresses above 2^48 (sorted another way): still the same */
  const uint64_t H = 0x7000000000000000ull;
  sig_t high = sign(&m, two_nodes(H + 2 * K, H, H + 5 * K, 2.0), NULL, 0);
  CHECK(same(base, high));
  sig_t high_alias = sign(&m, two_nodes(H, H, H + 5 * K, 2.0), NULL, 0);
  CHECK(!same(base, high_alias));
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
  sig_t* all[] = {&base, &moved, &high, &high_alias, &alias, &overlap, &touching, &scalar, &freed1, &freed2,
                  &freed1_moved};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) free(all[i]->words);
  tpu_flush_memo_free(&m);
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
    tpu_flush_memo_store(&m, NULL, 2, p, NULL, 100 + k);
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
  tpu_flush_memo_free(&m);
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
  tpu_flush_memo_free(&m);
}

/* out = add(x, y, alpha) with x and y each a view described by `x` / `y`
 * (their addresses replaced) and a scalar-free attribute list. */
typedef struct near {
  tpu_view_t x, y, out;
  double alpha;
} near_t;

static tpu_graph_t* near_graph(const near_t* c, uint64_t base) {
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(&g));
  tpu_op_id_t add = tpu_op_lookup("add");
  tpu_value_t in[2] = {{.kind = TPU_VALUE_VIEW, .u.view = c->x},
                       {.kind = TPU_VALUE_VIEW, .u.view = c->y}};
  in[0].u.view.addr += base;
  in[1].u.view.addr += base;
  tpu_view_t out = c->out;
  out.addr += base;
  tpu_attr_t attrs[TPU_MAX_ATTRS] = {{0}};
  int32_t nattrs = tpu_op_num_attrs(add);
  for (int32_t a = 0; a < nattrs; ++a) {
    attrs[a].kind = TPU_ATTR_FLOAT;
    attrs[a].u.f = c->alpha;
  }
  CHECK_OK(tpu_graph_add_node(g, add, in, 2, &out, 1, attrs, nattrs));
  /* and a second node reading the first's output with a scalar */
  tpu_value_t in2[2] = {{.kind = TPU_VALUE_VIEW, .u.view = out},
                        {.kind = TPU_VALUE_SCALAR, .u.scalar = {.dtype = TPU_DTYPE_F64, .v.f = 2}}};
  tpu_view_t out2 = vec(base + 0x40000, 64);
  CHECK_OK(tpu_graph_add_node(g, tpu_op_lookup("mul"), in2, 2, &out2, 1, NULL, 0));
  return g;
}

/* A memo hit is never taken for a recording that differs from a stored one
 * in a single stride, dtype, size, attribute value or aliasing, while the
 * same recording elsewhere in memory is found. */
TEST(flush_memo_never_reuses_a_near_miss) {
  const near_t base = {vec(0x0, 64), vec(0x10000, 64), vec(0x20000, 64), 1.0};
  near_t variants[8];
  for (int k = 0; k < 8; ++k) variants[k] = base;
  variants[0].x.strides[0] = 2;           /* x read every other float */
  variants[1].y.dtype = TPU_DTYPE_F16;    /* y half */
  variants[2].out.sizes[0] = 63;          /* one element fewer out */
  variants[2].x.sizes[0] = 63;
  variants[2].y.sizes[0] = 63;
  variants[3].alpha = 1.0000000000000002; /* the attribute, one ulp off */
  variants[4].y.addr = 0x0;               /* y is x: an alias */
  variants[5].out.addr = 0x10000;         /* written in place of y */
  variants[6].out.addr = 0x80;            /* written over half of x */
  variants[7].x.strides[0] = 0;           /* x broadcast */
  tpu_flush_memo_t m = {0};
  tpu_graph_t* g = near_graph(&base, 0x100000);
  tpu_fusion_analysis_t* a = NULL;
  tpu_program_t* p = NULL;
  bool hit = false;
  CHECK_OK(tpu_fusion_analyse(g, NULL, 0, &a));
  CHECK_OK(tpu_program_cache_get(g, a, &p, &hit));
  tpu_fusion_analysis_free(a);
  CHECK(tpu_flush_memo_sign(&m, g, NULL, 0, NULL, NULL, 0, 0));
  tpu_flush_memo_store(&m, NULL, 2, p, NULL, 7);
  tpu_graph_release(g);
  for (int k = 0; k < 8; ++k) {
    tpu_graph_t* gk = near_graph(&variants[k], 0x100000);
    CHECK(tpu_flush_memo_sign(&m, gk, NULL, 0, NULL, NULL, 0, 0));
    CHECK(tpu_flush_memo_find(&m) == NULL);
    tpu_graph_release(gk);
  }
  /* a live provisional block that meets x's buffer: another pattern */
  uint64_t live_addr = 0x100000 + 128, live_size = 64;
  tpu_graph_t* gl = near_graph(&base, 0x100000);
  CHECK(tpu_flush_memo_sign(&m, gl, NULL, 0, &live_addr, &live_size, 1, 0));
  CHECK(tpu_flush_memo_find(&m) == NULL);
  tpu_graph_release(gl);
  /* the same recording 16 MiB away: found, with what was stored */
  tpu_graph_t* moved = near_graph(&base, 0x1100000);
  CHECK(tpu_flush_memo_sign(&m, moved, NULL, 0, NULL, NULL, 0, 0));
  const tpu_flush_memo_entry_t* e = tpu_flush_memo_find(&m);
  CHECK(e && e->program == p && e->extra == 7);
  tpu_graph_release(moved);
  /* another compiler setting: no */
  tpu_graph_t* other = near_graph(&base, 0x100000);
  CHECK(tpu_flush_memo_sign(&m, other, NULL, 0, NULL, NULL, 0, 1));
  CHECK(tpu_flush_memo_find(&m) == NULL);
  tpu_graph_release(other);
  tpu_flush_memo_free(&m);
  tpu_program_release(p);
}

/* tpu_flush_memo_lookup: the same words again are found by the raw
 * signature; the recording elsewhere through the full path (then raw too);
 * a near miss, another live block or setting not at all; an entry replaced
 * since, or of a cleared cache, is never reached through its raw slot. */
TEST(flush_memo_raw_signature_finds_only_what_the_full_path_would) {
  const near_t base = {vec(0x0, 64), vec(0x10000, 64), vec(0x20000, 64), 1.0};
  tpu_flush_memo_t m = {0};
  tpu_graph_t* g = near_graph(&base, 0x100000);
  tpu_fusion_analysis_t* a = NULL;
  tpu_program_t* p = NULL;
  bool hit = false, fast = true;
  CHECK_OK(tpu_fusion_analyse(g, NULL, 0, &a));
  CHECK_OK(tpu_program_cache_get(g, a, &p, &hit));
  tpu_fusion_analysis_free(a);
  CHECK(tpu_flush_memo_lookup(&m, g, NULL, 0, NULL, NULL, 0, 0, &fast) == NULL && !fast);
  tpu_flush_memo_store(&m, NULL, 2, p, NULL, 7);
  const tpu_flush_memo_entry_t* e = tpu_flush_memo_lookup(&m, g, NULL, 0, NULL, NULL, 0, 0, &fast);
  CHECK(e && fast && e->program == p && e->extra == 7);
  tpu_graph_release(g);
  tpu_graph_t* moved = near_graph(&base, 0x1100000);
  e = tpu_flush_memo_lookup(&m, moved, NULL, 0, NULL, NULL, 0, 0, &fast);
  CHECK(e && !fast && e->extra == 7);
  e = tpu_flush_memo_lookup(&m, moved, NULL, 0, NULL, NULL, 0, 0, &fast);
  CHECK(e && fast && e->extra == 7);
  tpu_graph_release(moved);
  near_t variants[4];
  for (int k = 0; k < 4; ++k) variants[k] = base;
  variants[0].x.strides[0] = 2;
  variants[1].alpha = 1.0000000000000002;
  variants[2].y.addr = 0x0;
  variants[3].out.sizes[0] = 63;
  /* each near miss right after finds of the base there: still no find */
  tpu_graph_t* again = near_graph(&base, 0x100000);
  for (int k = 0; k < 4; ++k) {
    for (int twice = 0; twice < 2; ++twice) {
      e = tpu_flush_memo_lookup(&m, again, NULL, 0, NULL, NULL, 0, 0, &fast);
      CHECK(e && fast && e->extra == 7);
    }
    tpu_graph_t* gk = near_graph(&variants[k], 0x100000);
    CHECK(tpu_flush_memo_lookup(&m, gk, NULL, 0, NULL, NULL, 0, 0, &fast) == NULL && !fast);
    tpu_graph_release(gk);
  }
  tpu_graph_release(again);
  uint64_t live_addr = 0x100000 + 128, live_size = 64;
  g = near_graph(&base, 0x100000);
  CHECK(tpu_flush_memo_lookup(&m, g, NULL, 0, &live_addr, &live_size, 1, 0, &fast) == NULL);
  CHECK(tpu_flush_memo_lookup(&m, g, NULL, 0, NULL, NULL, 0, 1, &fast) == NULL && !fast);
  /* every entry replaced by other recordings: the raw slots lead nowhere */
  for (int k = 0; k < TPU_MEMO_ENTRIES; ++k) {
    tpu_graph_t* gk = two_nodes(0x100000, 0x200000, 0x300000, 10.0 + k);
    CHECK(tpu_flush_memo_lookup(&m, gk, NULL, 0, NULL, NULL, 0, 0, &fast) == NULL);
    tpu_flush_memo_store(&m, NULL, 2, p, NULL, 100 + k);
    tpu_graph_release(gk);
  }
  CHECK(tpu_flush_memo_lookup(&m, g, NULL, 0, NULL, NULL, 0, 0, &fast) == NULL && !fast);
  tpu_flush_memo_store(&m, NULL, 2, p, NULL, 8);
  e = tpu_flush_memo_lookup(&m, g, NULL, 0, NULL, NULL, 0, 0, &fast);
  CHECK(e && fast && e->extra == 8);
  /* a cleared program cache retires the entry, raw slot and all */
  CHECK_OK(tpu_program_cache_clear());
  CHECK(tpu_flush_memo_lookup(&m, g, NULL, 0, NULL, NULL, 0, 0, &fast) == NULL && !fast);
  tpu_graph_release(g);
  tpu_flush_memo_free(&m);
  tpu_program_release(p);
}

/* out = x / y (float32, 8 elements) with rounding_mode `mode` (NULL: none). */
static tpu_graph_t* div_graph(const float* x, const float* y, float* out, const char* mode,
                              tpu_dtype_t dtype) {
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(&g));
  tpu_value_t in[2] = {{.kind = TPU_VALUE_VIEW, .u.view = vec((uint64_t)(uintptr_t)x, 8)},
                       {.kind = TPU_VALUE_VIEW, .u.view = vec((uint64_t)(uintptr_t)y, 8)}};
  in[0].u.view.dtype = in[1].u.view.dtype = dtype;
  tpu_view_t o = vec((uint64_t)(uintptr_t)out, 8);
  o.dtype = dtype;
  tpu_attr_t attr = {.kind = TPU_ATTR_NONE};
  if (mode) {
    attr.kind = TPU_ATTR_STR;
    snprintf(attr.u.str, sizeof(attr.u.str), "%s", mode);
  }
  CHECK_OK(tpu_graph_add_node(g, tpu_op_lookup("div"), in, 2, &o, 1, &attr, 1));
  return g;
}

/* The nodes' plans a memo entry keeps (fusion/node_plans.c): the same for
 * a recording at other addresses, another for another attribute or dtype
 * (tpu_node_plans_check finds the node), none for a complex node; and a
 * run of the program takes the attached plan instead of planning, so a
 * plan reused blindly would be wrong (a floor division's plan on a true
 * division gives floor's results): the memo must never hit such a pair. */
TEST(flush_memo_node_plans_are_kept_per_recording_and_used) {
  float x[8] = {7, -7, 5, -5, 9, 1, -1, 3}, y[8] = {2, 2, 3, 3, 4, 2, 2, 2};
  float out[8], x2[8], y2[8], out2[8];
  memcpy(x2, x, sizeof(x));
  memcpy(y2, y, sizeof(y));
  tpu_graph_t* plain = div_graph(x, y, out, NULL, TPU_DTYPE_F32);
  tpu_graph_t* moved = div_graph(x2, y2, out2, NULL, TPU_DTYPE_F32);
  tpu_graph_t* floored = div_graph(x, y, out, "floor", TPU_DTYPE_F32);
  tpu_graph_t* wide = div_graph(x, y, out, NULL, TPU_DTYPE_F64);
  tpu_node_plans_t* plans = tpu_node_plans_make(plain);
  tpu_node_plans_t* floor_plans = tpu_node_plans_make(floored);
  CHECK(plans && floor_plans);
  CHECK((tpu_node_plans_planned(plans)) == (1));
  CHECK(tpu_node_plans_ew(plans, 0) != NULL && tpu_node_plans_ew(plans, 1) == NULL);
  CHECK((tpu_node_plans_check(plans, plain)) == (-1));
  CHECK((tpu_node_plans_check(plans, moved)) == (-1));
  CHECK((tpu_node_plans_check(plans, floored)) == (0));
  CHECK((tpu_node_plans_check(plans, wide)) == (0));
  CHECK((tpu_node_plans_check(floor_plans, plain)) == (0));
  CHECK((tpu_node_plans_check(NULL, plain)) == (0)); /* a plannable node without a plan */
  tpu_graph_t* complex_g = div_graph(x, y, out, NULL, TPU_DTYPE_C64);
  CHECK(tpu_node_plans_make(complex_g) == NULL);
  CHECK((tpu_node_plans_check(NULL, complex_g)) == (-1));
  tpu_graph_release(complex_g);

  tpu_fusion_analysis_t* a = NULL;
  tpu_program_t* p = NULL;
  bool hit = false;
  CHECK_OK(tpu_fusion_analyse(moved, NULL, 0, &a));
  CHECK_OK(tpu_program_cache_get(moved, a, &p, &hit));
  tpu_fusion_analysis_free(a);
  tpu_exec_ctx_t ctx = {0};
  /* its own plans, attached (as a memo hit does): true division */
  tpu_node_plans_attach(moved, plans);
  CHECK(tpu_node_plans_of(moved) == plans);
  CHECK_OK(tpu_program_run(p, moved, &ctx));
  for (int i = 0; i < 8; ++i) CHECK((out2[i]) == (x[i] / y[i]));
  /* the floor division's plans on the same recording: the run takes them */
  tpu_node_plans_attach(moved, floor_plans);
  CHECK_OK(tpu_program_run(p, moved, &ctx));
  for (int i = 0; i < 8; ++i) CHECK((out2[i]) == (floorf(x[i] / y[i])));
  tpu_program_release(p);
  tpu_node_plans_release(plans); /* the graphs hold their own references */
  tpu_node_plans_release(floor_plans);
  tpu_graph_release(plain);
  tpu_graph_release(moved);
  tpu_graph_release(floored);
  tpu_graph_release(wide);
}
