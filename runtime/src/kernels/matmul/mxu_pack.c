/* mxu_pack.c — the matrix unit's weight cache (see mxu_pack.h). */
#include "tpu/config.h"
#include "kernels/matmul/mxu_pack.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernel.h"
#include "tpu/ops.h"
#include "tpu/runtime.h"

#define PACK_MAX_ENTRIES 4096

typedef struct pack_key {
  uint64_t addr;
  tpu_dtype_t dtype;
  int64_t rows, cols, row_stride, col_stride;
} pack_key_t;

typedef struct entry {
  pack_key_t key;
  uint64_t lo, hi;      /* the bytes the view covers */
  uint64_t used;        /* the clock at its last use (least recently used goes first) */
  uint64_t id;          /* unique: a packer re-finds the entry it saw */
  mxu_packed_t* packed; /* NULL: seen once, not packed yet */
} entry_t;

static struct {
  pthread_mutex_t mu;
  entry_t items[PACK_MAX_ENTRIES];
  atomic_int count; /* read without the lock by the write notes' empty check */
  uint64_t clock, next_id;
  size_t bytes, budget;
  int64_t hits, packs, evictions, drops;
} g_pack = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void budget_init(void) {
  g_pack.budget = (size_t)tpu_config_int(TPU_CONFIG_WEIGHT_CACHE_MB) << 20;
}

static size_t budget(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, budget_init);
  return g_pack.budget;
}

void mxu_packed_release(mxu_packed_t* p) {
  if (!p || atomic_fetch_sub(&p->refs, 1) != 1) return;
  tpu_scratch_free(p->data);
  dnnl_memory_desc_destroy(p->md);
  free(p);
}

mxu_packed_t* mxu_packed_retain(mxu_packed_t* p) {
  atomic_fetch_add(&p->refs, 1);
  return p;
}

/* ---- the table (g_pack.mu held) ------------------------------------------------ */

static pack_key_t key_of(const tpu_view_t* b) {
  pack_key_t k = {b->addr, b->dtype, b->sizes[1], b->sizes[2], b->strides[1], b->strides[2]};
  return k;
}

static bool key_eq(const pack_key_t* a, const pack_key_t* b) {
  return a->addr == b->addr && a->dtype == b->dtype && a->rows == b->rows && a->cols == b->cols &&
         a->row_stride == b->row_stride && a->col_stride == b->col_stride;
}

static int find_locked(const pack_key_t* k) {
  int n = atomic_load(&g_pack.count);
  for (int i = 0; i < n; ++i)
    if (key_eq(&g_pack.items[i].key, k)) return i;
  return -1;
}

/* Drops entry i (its packed copy lives on while a GEMM holds it). */
static void remove_locked(int i) {
  entry_t* e = &g_pack.items[i];
  if (e->packed) {
    g_pack.bytes -= dnnl_memory_desc_get_size(e->packed->md);
    mxu_packed_release(e->packed);
  }
  int n = atomic_load(&g_pack.count) - 1;
  g_pack.items[i] = g_pack.items[n];
  atomic_store(&g_pack.count, n);
}

static int lru_locked(bool packed_only) {
  int best = -1, n = atomic_load(&g_pack.count);
  for (int i = 0; i < n; ++i)
    if ((!packed_only || g_pack.items[i].packed) &&
        (best < 0 || g_pack.items[i].used < g_pack.items[best].used))
      best = i;
  return best;
}

/* Room for `bytes` more packed data and one more entry, evicting the least
 * recently used; false when `bytes` exceeds the whole budget. */
static bool make_room_locked(size_t bytes) {
  if (bytes > budget()) return false;
  while (g_pack.bytes + bytes > budget()) {
    int i = lru_locked(true);
    if (i < 0) return false;
    remove_locked(i);
    ++g_pack.evictions;
  }
  if (atomic_load(&g_pack.count) == PACK_MAX_ENTRIES) {
    remove_locked(lru_locked(false));
    ++g_pack.evictions;
  }
  return true;
}

/* ---- lookups ---------------------------------------------------------------------- */

/* Lists `k` as seen once (nothing packed yet), when the cache is on. */
static void insert_seen_locked(const pack_key_t* k, const tpu_view_t* b) {
  if (budget() == 0 || !make_room_locked(0)) return;
  entry_t* e = &g_pack.items[atomic_load(&g_pack.count)];
  memset(e, 0, sizeof *e);
  e->key = *k;
  tpu_view_bytes(b, &e->lo, &e->hi);
  e->used = ++g_pack.clock;
  e->id = ++g_pack.next_id;
  atomic_fetch_add(&g_pack.count, 1);
}

/* A cached copy of `k` in layout `want` (a new reference), or NULL; then
 * *out_id names the entry to fill (0: none, the view is new and now seen). */
static mxu_packed_t* lookup(const pack_key_t* k, const tpu_view_t* b,
                            const_dnnl_memory_desc_t want, uint64_t* out_id) {
  *out_id = 0;
  mxu_packed_t* hit = NULL;
  pthread_mutex_lock(&g_pack.mu);
  int i = find_locked(k);
  if (i >= 0) {
    entry_t* e = &g_pack.items[i];
    e->used = ++g_pack.clock;
    if (e->packed && dnnl_memory_desc_equal(e->packed->md, want)) {
      hit = mxu_packed_retain(e->packed);
      ++g_pack.hits;
    } else {
      *out_id = e->id;
    }
  } else {
    insert_seen_locked(k, b);
  }
  pthread_mutex_unlock(&g_pack.mu);
  return hit;
}

/* Stores `p` in entry `id` if it is still listed (no write dropped it while
 * `p` was being laid out) and the budget has room. */
static void store(uint64_t id, const pack_key_t* k, mxu_packed_t* p) {
  size_t bytes = dnnl_memory_desc_get_size(p->md);
  pthread_mutex_lock(&g_pack.mu);
  int i = find_locked(k);
  if (i >= 0 && g_pack.items[i].id == id) {
    entry_t* e = &g_pack.items[i];
    if (e->packed) { /* another layout of the same view: replaced */
      g_pack.bytes -= dnnl_memory_desc_get_size(e->packed->md);
      mxu_packed_release(e->packed);
      e->packed = NULL;
    }
    e->used = ++g_pack.clock; /* not the eviction victim itself */
    if (make_room_locked(bytes)) {
      i = find_locked(k); /* eviction moves entries */
      g_pack.items[i].packed = mxu_packed_retain(p);
      g_pack.bytes += bytes;
    } else {
      ++g_pack.evictions; /* larger than the whole bound: not kept, counted */
    }
  }
  pthread_mutex_unlock(&g_pack.mu);
}

bool mxu_pack_peek(const tpu_view_t* b) {
  pack_key_t k = key_of(b);
  pthread_mutex_lock(&g_pack.mu);
  bool seen = find_locked(&k) >= 0;
  pthread_mutex_unlock(&g_pack.mu);
  return seen;
}

bool mxu_pack_seen(const tpu_view_t* b) {
  pack_key_t k = key_of(b);
  pthread_mutex_lock(&g_pack.mu);
  int i = find_locked(&k);
  bool seen = i >= 0;
  if (seen) g_pack.items[i].used = ++g_pack.clock;
  else insert_seen_locked(&k, b);
  pthread_mutex_unlock(&g_pack.mu);
  return seen;
}

/* Lays out all of `b` (plain layout, ctx: a reorder_ctx_t) by one reorder. */
typedef struct reorder_ctx {
  const_dnnl_memory_desc_t plain;
  dnnl_engine_t engine;
  dnnl_stream_t stream;
} reorder_ctx_t;

static tpu_status_t reorder_whole(void* ctx, const tpu_view_t* b, const_dnnl_memory_desc_t want,
                                  void* data) {
  const reorder_ctx_t* c = (const reorder_ctx_t*)ctx;
  return mxu_pack_reorder(c->plain, (void*)(uintptr_t)b->addr, want, data, c->engine, c->stream);
}

tpu_status_t mxu_pack_reorder(const_dnnl_memory_desc_t from_md, void* from_data,
                              const_dnnl_memory_desc_t to_md, void* to_data, dnnl_engine_t engine,
                              dnnl_stream_t stream) {
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t reorder = NULL;
  dnnl_memory_t from = NULL, to = NULL;
  dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, from_md, engine, to_md, engine, NULL);
  if (s == dnnl_success) s = dnnl_primitive_create(&reorder, pd);
  if (s == dnnl_success) s = dnnl_memory_create(&from, from_md, engine, from_data);
  if (s == dnnl_success) s = dnnl_memory_create(&to, to_md, engine, to_data);
  if (s == dnnl_success) {
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    s = dnnl_primitive_execute(reorder, stream, 2, args);
    if (s == dnnl_success) s = dnnl_stream_wait(stream);
  }
  if (to) dnnl_memory_destroy(to);
  if (from) dnnl_memory_destroy(from);
  if (reorder) dnnl_primitive_destroy(reorder);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (s == dnnl_success) return TPU_OK;
  return tpu_status_make(s == dnnl_out_of_memory ? TPU_CODE_OUT_OF_MEMORY : TPU_CODE_INTERNAL,
                         "matrix unit: laying out a weight failed (oneDNN status %d)", (int)s);
}

tpu_status_t mxu_pack_get(const tpu_view_t* b, const_dnnl_memory_desc_t plain,
                          const_dnnl_memory_desc_t want, bool cacheable, dnnl_engine_t engine,
                          dnnl_stream_t stream, mxu_packed_t** out_packed) {
  reorder_ctx_t ctx = {plain, engine, stream};
  return mxu_pack_get_with(b, want, cacheable, reorder_whole, &ctx, out_packed);
}

tpu_status_t mxu_pack_get_with(const tpu_view_t* b, const_dnnl_memory_desc_t want, bool cacheable,
                               mxu_layout_fn layout, void* ctx, mxu_packed_t** out_packed) {
  pack_key_t k = key_of(b);
  uint64_t id = 0;
  *out_packed = cacheable ? lookup(&k, b, want, &id) : NULL;
  if (*out_packed) return TPU_OK;

  size_t bytes = dnnl_memory_desc_get_size(want);
  mxu_packed_t* p = calloc(1, sizeof *p);
  void* data = p ? tpu_scratch_alloc(bytes ? bytes : 1) : NULL;
  if (!data || dnnl_memory_desc_clone(&p->md, want) != dnnl_success) {
    if (data) tpu_scratch_free(data);
    free(p);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY,
                           "matrix unit: no %zu bytes for a blocked weight", bytes);
  }
  p->data = data;
  atomic_init(&p->refs, 1);
  tpu_status_t st = layout(ctx, b, want, data);
  if (st != TPU_OK) {
    mxu_packed_release(p);
    return st;
  }
  pthread_mutex_lock(&g_pack.mu);
  ++g_pack.packs;
  pthread_mutex_unlock(&g_pack.mu);
  if (id) store(id, &k, p);
  *out_packed = p;
  return TPU_OK;
}

/* ---- writes ----------------------------------------------------------------------- */

static void drop_overlapping_locked(uint64_t lo, uint64_t hi) {
  for (int i = atomic_load(&g_pack.count) - 1; i >= 0; --i) /* removal moves the last to i */
    if (g_pack.items[i].lo < hi && lo < g_pack.items[i].hi) {
      remove_locked(i);
      ++g_pack.drops;
    }
}

void tpu_weight_cache_note_write(uint64_t lo, uint64_t hi) {
  if (lo >= hi || atomic_load(&g_pack.count) == 0) return;
  pthread_mutex_lock(&g_pack.mu);
  drop_overlapping_locked(lo, hi);
  pthread_mutex_unlock(&g_pack.mu);
}

void tpu_weight_cache_note_write_all(void) {
  if (atomic_load(&g_pack.count) == 0) return;
  pthread_mutex_lock(&g_pack.mu);
  drop_overlapping_locked(0, UINT64_MAX);
  pthread_mutex_unlock(&g_pack.mu);
}

/* The i-th view a node writes: its outputs, then its inputs marked '!'
 * (written in place: batch norm's running stats, the fused optimizers'
 * parameters); false past the last. */
static bool node_write(const tpu_node_t* node, uint32_t mutated, int32_t i, uint64_t* lo,
                       uint64_t* hi) {
  int32_t outs = node->outputs ? node->num_outputs : 0;
  if (i < outs) {
    tpu_view_bytes(&node->outputs[i], lo, hi);
    return true;
  }
  for (int32_t in = 0; in < node->num_inputs && in < 32; ++in) {
    if (!(mutated & (1u << in)) || node->inputs[in].kind != TPU_VALUE_VIEW) continue;
    if (i-- == outs) {
      tpu_view_bytes(&node->inputs[in].u.view, lo, hi);
      return true;
    }
  }
  return false;
}

void tpu_weight_cache_note_graph(const tpu_graph_t* graph) {
  if (!graph || atomic_load(&g_pack.count) == 0) return;
  pthread_mutex_lock(&g_pack.mu);
  int32_t nodes = tpu_graph_node_count(graph);
  for (int32_t n = 0; n < nodes && atomic_load(&g_pack.count) > 0; ++n) {
    const tpu_node_t* node = tpu_graph_node(graph, n);
    uint32_t mutated = tpu_op_mutated_inputs(node->op);
    uint64_t lo, hi;
    for (int32_t w = 0; node_write(node, mutated, w, &lo, &hi); ++w)
      if (lo < hi) drop_overlapping_locked(lo, hi);
  }
  pthread_mutex_unlock(&g_pack.mu);
}

bool tpu_weight_cache_graph_writes(const tpu_graph_t* graph, const tpu_view_t* view) {
  uint64_t lo, hi;
  tpu_view_bytes(view, &lo, &hi);
  int32_t nodes = tpu_graph_node_count(graph);
  for (int32_t n = 0; n < nodes; ++n) {
    const tpu_node_t* node = tpu_graph_node(graph, n);
    uint32_t mutated = tpu_op_mutated_inputs(node->op);
    uint64_t wlo, whi;
    for (int32_t w = 0; node_write(node, mutated, w, &wlo, &whi); ++w)
      if (wlo < whi && wlo < hi && lo < whi) return true;
  }
  return false;
}

void tpu_weight_cache_get_stats(tpu_weight_cache_stats_t* out) {
  pthread_mutex_lock(&g_pack.mu);
  int n = atomic_load(&g_pack.count), packed = 0;
  for (int i = 0; i < n; ++i) packed += g_pack.items[i].packed != NULL;
  out->entries = packed;
  out->bytes = (int64_t)g_pack.bytes;
  out->limit_bytes = (int64_t)budget();
  out->hits = g_pack.hits;
  out->packs = g_pack.packs;
  out->evictions = g_pack.evictions;
  out->drops = g_pack.drops;
  pthread_mutex_unlock(&g_pack.mu);
}

void tpu_weight_cache_set_limit(int64_t bytes) {
  (void)budget(); /* the environment's value is read first, then overridden */
  pthread_mutex_lock(&g_pack.mu);
  g_pack.budget = bytes > 0 ? (size_t)bytes : 0;
  while (g_pack.bytes > g_pack.budget) {
    remove_locked(lru_locked(true));
    ++g_pack.evictions;
  }
  if (g_pack.budget == 0)
    while (atomic_load(&g_pack.count) > 0) remove_locked(0);
  pthread_mutex_unlock(&g_pack.mu);
}

void tpu_weight_cache_clear(void) {
  pthread_mutex_lock(&g_pack.mu);
  while (atomic_load(&g_pack.count) > 0) remove_locked(0);
  pthread_mutex_unlock(&g_pack.mu);
}
