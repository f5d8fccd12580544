/* schedule.c — phase 0 of the fusion compiler: the order the recorded nodes
 * run in (see fusion.h).
 *
 * Partitioning (phase 2) fuses runs of adjacent nodes, but programs do not
 * always record a value's consumers next to its producer. A foreach
 * optimizer step records each op over the whole list of parameters before
 * the next op:
 *     sqrt(v0) sqrt(v1) ... div_(t0) div_(t1) ... addcdiv_(p0, m0, t0) ...
 * so no two nodes over the same tensor are adjacent, nothing fuses, and every
 * temporary t_i is materialised at once (a parameter-sized list: the step's
 * peak memory). This phase moves a pointwise consumer up to just after its
 * producer, chain by chain,
 *     sqrt(v0) div_(t0) add_(t0) addcdiv_(p0, m0, t0) sqrt(v1) ...
 * when no node it jumps over touches memory it touches in a conflicting way
 * (one writes what the other reads or writes): the reordered graph computes
 * what the recorded one does. Then each chain is one fused group and t_i,
 * dead at the flush, lives in tile scratch.
 *
 * The order is a function of the recorded graph alone (never of timing), so
 * identical programs are scheduled, keyed and cut identically. The graph
 * includes where each buffer lives: when the caching allocator hands a
 * temporary memory that an earlier node of the same graph freed, the
 * conflict test sees the overlap and keeps the order, so the same Python
 * code can record two graphs (and compile two programs) under two
 * allocator states. Both compute what was recorded.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/analysis.h"
#include "fusion/extent.h"
#include "tpu/ops.h"

/* Bounds on the phase's cost, which every flush pays (cache hits too): a
 * consumer further ahead than SCHEDULE_WINDOW nodes is not moved, and the
 * conflict checks of one graph stop after SCHEDULE_BUDGET per node. Both
 * depend on the graph alone, so the order stays deterministic. */
#define SCHEDULE_WINDOW 512
#define SCHEDULE_BUDGET 256

/* Per node: the byte ranges it reads, then those it writes. */
typedef struct access {
  int32_t reads, writes; /* counts; ranges at base[i] .. */
  tpu_extent_t all;          /* the hull of every range: a quick first test */
} access_t;

typedef struct sched {
  const tpu_graph_t* graph;
  access_t* acc;
  int32_t* base; /* per node: first range in ext */
  tpu_extent_t* ext;
  int32_t* reader; /* per node: the first later node reading its first output, or -1 */
  int64_t budget;  /* conflict checks left */
  tpu_free_index_t frees; /* the graph's frees, by point */
} sched_t;

/* Whether nodes a and b must keep their relative order: one writes memory
 * the other reads or writes. */
static bool conflict(const sched_t* s, int32_t a, int32_t b) {
  if (!tpu_extents_meet(s->acc[a].all, s->acc[b].all)) return false;
  const tpu_extent_t* ea = s->ext + s->base[a];
  const tpu_extent_t* eb = s->ext + s->base[b];
  int32_t na = s->acc[a].reads + s->acc[a].writes, nb = s->acc[b].reads + s->acc[b].writes;
  for (int32_t x = 0; x < na; ++x)
    for (int32_t y = 0; y < nb; ++y) {
      bool a_writes = x >= s->acc[a].reads, b_writes = y >= s->acc[b].reads;
      if ((a_writes || b_writes) && tpu_extents_meet(ea[x], eb[y])) return true;
    }
  return false;
}

/* Whether node k touches a range whose free point lies in (lo, hi] (freed
 * after the first `point` recorded nodes). Moving k across such a free
 * would give the free record (and the analysis, which reads value
 * lifetimes from the records) the wrong tenant: pulled up above it, k's
 * buffer may be a new tenant of that memory; sunk below it, k would touch
 * memory the free handed on. */
static bool touches_freed(sched_t* s, int32_t k, int32_t lo, int32_t hi) {
  const tpu_extent_t* e = s->ext + s->base[k];
  int32_t count = s->acc[k].reads + s->acc[k].writes;
  int32_t end = tpu_free_index_after(&s->frees, hi);
  for (int32_t f = tpu_free_index_after(&s->frees, lo); f < end; ++f) {
    const tpu_free_record_t* r = tpu_free_index_at(&s->frees, f);
    if (--s->budget < 0) return true;
    tpu_extent_t range = {r->lo, r->hi};
    for (int32_t x = 0; x < count; ++x)
      if (tpu_extents_meet(e[x], range)) return true;
  }
  return false;
}

/* A node that may be pulled up to its producer: pointwise, one output of
 * the producer's shape. */
static bool movable(const tpu_node_t* node, const tpu_view_t* produced) {
  if (!(tpu_op_def(node->op)->flags & TPU_OP_POINTWISE) || node->num_outputs != 1) return false;
  if (tpu_op_mutated_inputs(node->op)) return false;
  const tpu_view_t* out = &node->outputs[0];
  if (out->ndim != produced->ndim) return false;
  for (int32_t d = 0; d < out->ndim; ++d)
    if (out->sizes[d] != produced->sizes[d]) return false;
  return true;
}

/* reader[i]: the first node after i that reads the identical view of i's
 * first output, from one backward pass over a map view -> the earliest
 * reader seen so far (open addressing, keyed by view content). */
static tpu_status_t find_readers(sched_t* s, int32_t n) {
  int64_t cap = 16;
  for (int32_t i = 0; i < n; ++i) cap += tpu_graph_node(s->graph, i)->num_inputs;
  int64_t size = 16;
  while (size < 2 * cap) size *= 2;
  const tpu_view_t** keys = calloc((size_t)size, sizeof(*keys));
  int32_t* at = malloc(sizeof(int32_t) * (size_t)size);
  s->reader = malloc(sizeof(int32_t) * (size_t)n);
  if (!keys || !at || !s->reader) {
    free(keys);
    free(at);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "fusion schedule allocation failed");
  }
  uint64_t mask = (uint64_t)size - 1;
  for (int32_t i = n - 1; i >= 0; --i) {
    const tpu_node_t* node = tpu_graph_node(s->graph, i);
    s->reader[i] = -1;
    if (node->num_outputs > 0 && !tpu_view_is_absent(&node->outputs[0])) {
      const tpu_view_t* v = &node->outputs[0];
      for (uint64_t h = tpu_fusion_view_hash(v) & mask; keys[h]; h = (h + 1) & mask)
        if (tpu_fusion_same_view(keys[h], v)) {
          s->reader[i] = at[h];
          break;
        }
    }
    for (int32_t j = 0; j < node->num_inputs; ++j) {
      if (node->inputs[j].kind != TPU_VALUE_VIEW) continue;
      const tpu_view_t* v = &node->inputs[j].u.view;
      uint64_t h = tpu_fusion_view_hash(v) & mask;
      while (keys[h] && !tpu_fusion_same_view(keys[h], v)) h = (h + 1) & mask;
      keys[h] = v;
      at[h] = i;
    }
  }
  free(keys);
  free(at);
  return TPU_OK;
}

static tpu_status_t build_access(sched_t* s, int32_t n) {
  int32_t total = 0;
  for (int32_t i = 0; i < n; ++i) {
    const tpu_node_t* node = tpu_graph_node(s->graph, i);
    total += node->num_inputs + node->num_outputs;
  }
  s->acc = malloc(sizeof(access_t) * (size_t)(n + 1));
  s->base = malloc(sizeof(int32_t) * (size_t)(n + 1));
  s->ext = malloc(sizeof(tpu_extent_t) * (size_t)(total + 1));
  if (!s->acc || !s->base || !s->ext)
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "fusion schedule allocation failed");
  int32_t at = 0;
  for (int32_t i = 0; i < n; ++i) {
    const tpu_node_t* node = tpu_graph_node(s->graph, i);
    s->base[i] = at;
    s->acc[i] = (access_t){0, 0, {UINT64_MAX, 0}};
    /* Inputs written in place ('!') are writes, listed after the reads. */
    uint32_t mutated = tpu_op_mutated_inputs(node->op);
    for (int32_t j = 0; j < node->num_inputs; ++j)
      if (node->inputs[j].kind == TPU_VALUE_VIEW && !(j < 32 && (mutated >> j & 1u))) {
        s->ext[at++] = tpu_extent_of(&node->inputs[j].u.view);
        s->acc[i].reads++;
      }
    for (int32_t j = 0; j < node->num_inputs && j < 32; ++j)
      if (node->inputs[j].kind == TPU_VALUE_VIEW && (mutated >> j & 1u)) {
        s->ext[at++] = tpu_extent_of(&node->inputs[j].u.view);
        s->acc[i].writes++;
      }
    for (int32_t o = 0; o < node->num_outputs; ++o)
      if (!tpu_view_is_absent(&node->outputs[o])) {
        s->ext[at++] = tpu_extent_of(&node->outputs[o]);
        s->acc[i].writes++;
      }
    for (int32_t x = s->base[i]; x < at; ++x) {
      if (s->ext[x].lo >= s->ext[x].hi) continue;
      if (s->ext[x].lo < s->acc[i].all.lo) s->acc[i].all.lo = s->ext[x].lo;
      if (s->ext[x].hi > s->acc[i].all.hi) s->acc[i].all.hi = s->ext[x].hi;
    }
  }
  s->base[n] = at;
  return TPU_OK;
}

/* The new order: recorded order, except that from each node placed, the
 * chain of its pointwise consumers follows while each may move up. */
static void order_nodes(sched_t* s, int32_t n, bool* placed, int32_t* order) {
  int32_t count = 0;
  for (int32_t j = 0; j < n; ++j) {
    if (placed[j]) continue;
    placed[j] = true;
    order[count++] = j;
    for (int32_t cur = j;;) {
      int32_t k = s->reader[cur];
      if (k < 0 || placed[k] || k - cur > SCHEDULE_WINDOW) break;
      const tpu_node_t* prod = tpu_graph_node(s->graph, cur);
      if (!movable(tpu_graph_node(s->graph, k), &prod->outputs[0])) break;
      /* Every node before k not placed yet would now run after it. */
      bool ok = !touches_freed(s, k, cur, k);
      for (int32_t i = j + 1; i < k && ok; ++i)
        if (!placed[i] && (--s->budget < 0 || conflict(s, i, k))) ok = false;
      if (!ok) break;
      placed[k] = true;
      order[count++] = k;
      cur = k;
    }
  }
}

/* Whether `node` reads the identical view `v`. */
static bool reads_view(const tpu_node_t* node, const tpu_view_t* v) {
  for (int32_t j = 0; j < node->num_inputs; ++j)
    if (node->inputs[j].kind == TPU_VALUE_VIEW && tpu_fusion_same_view(&node->inputs[j].u.view, v))
      return true;
  return false;
}

/* The other direction, after order_nodes: a pointwise node sinks to just
 * before the first node that must stay after it, when that node is a
 * pointwise consumer of its output of the same shape. Walked last to first,
 * so the heads of a foreach step (each op over every parameter, a consumer
 * chain per parameter at the end) join their parameter's chain:
 *     mul_(p0) mul_(p1) lerp_(m0) lerp_(m1) [... addcdiv_(p0, m0, t0)] [...]
 * becomes [... lerp_(m0) mul_(p0) addcdiv_(p0, m0, t0)] [... p1 ...], one
 * group and one pass over each parameter's state. */
static void sink_nodes(sched_t* s, int32_t n, int32_t* order) {
  for (int32_t p = n - 2; p >= 0; --p) {
    int32_t x = order[p];
    const tpu_node_t* node = tpu_graph_node(s->graph, x);
    if (!movable(node, &node->outputs[0])) continue;
    int32_t q = p + 1, last = -1;
    for (; q < n && q - p <= SCHEDULE_WINDOW; ++q) {
      if (--s->budget < 0) return;
      if (conflict(s, x, order[q])) break;
      if (order[q] > last) last = order[q];
    }
    if (q == p + 1 || q >= n || q - p > SCHEDULE_WINDOW) continue;
    const tpu_node_t* consumer = tpu_graph_node(s->graph, order[q]);
    if (!movable(consumer, &node->outputs[0]) || !reads_view(consumer, &node->outputs[0]) ||
        touches_freed(s, x, x, last + 1))
      continue;
    memmove(&order[p], &order[p + 1], sizeof(int32_t) * (size_t)(q - 1 - p));
    order[q - 1] = x;
  }
}

/* A free record said: freed after the first `point` recorded nodes. In the
 * new order it follows every node recorded before it that touches its range
 * (later tenants of the range conflict with those, so they stay after): one
 * sweep over the recorded nodes marks each range a node touches with the
 * node's new position, and each free, reached in order of its point, takes
 * the largest mark over its range. False, with nothing rewritten, when out
 * of memory. */
static bool remap_frees(const sched_t* s, const int32_t* pos, int32_t n, tpu_free_record_t* frees,
                        int32_t free_count) {
  int32_t total = s->base[n];
  tpu_extent_t* ranges = malloc(sizeof(tpu_extent_t) * ((size_t)total + (size_t)free_count + 1));
  tpu_range_max_t touched = {0};
  if (!ranges) return false;
  memcpy(ranges, s->ext, sizeof(tpu_extent_t) * (size_t)total);
  for (int32_t f = 0; f < free_count; ++f) ranges[total + f] = (tpu_extent_t){frees[f].lo, frees[f].hi};
  tpu_status_t rs = tpu_range_max_init(&touched, ranges, total + free_count, 0);
  bool ok = rs == TPU_OK;
  tpu_status_free(rs);
  for (int32_t k = 0, i = 0; ok && k < free_count; ++k) {
    int32_t f = s->frees.order ? s->frees.order[k] : k;
    int32_t end = frees[f].point < n ? frees[f].point : n;
    for (; i < end; ++i)
      for (int32_t x = s->base[i]; x < s->base[i + 1]; ++x)
        tpu_range_max_mark(&touched, s->ext[x], pos[i] + 1);
    frees[f].point = tpu_range_max_query(&touched, ranges[total + f]);
  }
  tpu_range_max_release(&touched);
  free(ranges);
  return ok;
}

tpu_status_t tpu_fusion_schedule(const tpu_graph_t* graph, tpu_free_record_t* frees,
                                 int32_t free_count, tpu_graph_t** out_graph,
                                 int32_t* out_order) {
  *out_graph = NULL;
  int32_t n = tpu_graph_node_count(graph);
  if (n < 3) return TPU_OK;
  sched_t s = {graph, NULL, NULL, NULL, NULL, (int64_t)SCHEDULE_BUDGET * n, {0}};
  bool* placed = calloc((size_t)n, sizeof(bool));
  int32_t* order = malloc(sizeof(int32_t) * (size_t)n);
  int32_t* pos = malloc(sizeof(int32_t) * (size_t)n);
  tpu_status_t st = placed && order && pos
                        ? build_access(&s, n)
                        : tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "fusion schedule allocation failed");
  if (st == TPU_OK) st = find_readers(&s, n);
  if (st == TPU_OK) st = tpu_free_index_init(&s.frees, frees, free_count);
  bool moved = false;
  if (st == TPU_OK) {
    order_nodes(&s, n, placed, order);
    sink_nodes(&s, n, order);
    for (int32_t i = 0; i < n; ++i) {
      pos[order[i]] = i;
      moved |= order[i] != i;
    }
  }
  tpu_graph_t* out = NULL;
  if (st == TPU_OK && moved) st = tpu_graph_create(&out);
  for (int32_t i = 0; st == TPU_OK && moved && i < n; ++i)
    st = tpu_graph_append_from(out, graph, order[i]);
  if (st == TPU_OK && moved && remap_frees(&s, pos, n, frees, free_count)) {
    *out_graph = out;
    out = NULL;
    if (out_order) memcpy(out_order, order, sizeof(int32_t) * (size_t)n);
  }
  tpu_free_index_release(&s.frees);
  tpu_graph_release(out);
  free(s.acc);
  free(s.base);
  free(s.ext);
  free(s.reader);
  free(placed);
  free(order);
  free(pos);
  return st;
}
