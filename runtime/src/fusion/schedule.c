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
 * identical programs are scheduled, keyed and cut identically.
 */
#include <stdlib.h>

#include "fusion/analysis.h"
#include "tpu/ops.h"

/* How far ahead a consumer is looked for, in nodes: bounds the phase's cost
 * on very long graphs (the default node limit is 1024). */
#define SCHEDULE_WINDOW 1024

typedef struct extent {
  uint64_t lo, hi;
} extent_t;

/* Per node: the byte ranges it reads, then those it writes. */
typedef struct access {
  int32_t reads, writes; /* counts; ranges at base[i] .. */
} access_t;

static extent_t extent_of(const tpu_view_t* v) {
  uint64_t span = 1;
  for (int32_t d = 0; d < v->ndim; ++d) {
    if (v->sizes[d] == 0) return (extent_t){v->addr, v->addr};
    span += (uint64_t)((v->sizes[d] - 1) * v->strides[d]);
  }
  return (extent_t){v->addr, v->addr + span * tpu_dtype_size(v->dtype)};
}

static bool meet(extent_t a, extent_t b) {
  return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi;
}

typedef struct sched {
  const tpu_graph_t* graph;
  access_t* acc;
  int32_t* base; /* per node: first range in ext */
  extent_t* ext;
} sched_t;

/* Whether nodes a and b must keep their relative order: one writes memory
 * the other reads or writes. */
static bool conflict(const sched_t* s, int32_t a, int32_t b) {
  const extent_t* ea = s->ext + s->base[a];
  const extent_t* eb = s->ext + s->base[b];
  int32_t na = s->acc[a].reads + s->acc[a].writes, nb = s->acc[b].reads + s->acc[b].writes;
  for (int32_t x = 0; x < na; ++x)
    for (int32_t y = 0; y < nb; ++y) {
      bool a_writes = x >= s->acc[a].reads, b_writes = y >= s->acc[b].reads;
      if ((a_writes || b_writes) && meet(ea[x], eb[y])) return true;
    }
  return false;
}

/* A node that may be pulled up to its producer: pointwise, one output of
 * the producer's shape. */
static bool movable(const tpu_node_t* node, const tpu_view_t* produced) {
  if (!(tpu_op_def(node->op)->flags & TPU_OP_POINTWISE) || node->num_outputs != 1) return false;
  const tpu_view_t* out = &node->outputs[0];
  if (out->ndim != produced->ndim) return false;
  for (int32_t d = 0; d < out->ndim; ++d)
    if (out->sizes[d] != produced->sizes[d]) return false;
  return true;
}

/* The first node after `cur` not yet placed that reads the identical view of
 * cur's first output, or -1. */
static int32_t next_reader(const sched_t* s, const bool* placed, int32_t cur, int32_t n) {
  const tpu_node_t* node = tpu_graph_node(s->graph, cur);
  if (node->num_outputs < 1 || tpu_view_is_absent(&node->outputs[0])) return -1;
  const tpu_view_t* v = &node->outputs[0];
  int32_t stop = cur + SCHEDULE_WINDOW < n ? cur + SCHEDULE_WINDOW : n;
  for (int32_t k = cur + 1; k < stop; ++k) {
    if (placed[k]) continue;
    const tpu_node_t* r = tpu_graph_node(s->graph, k);
    for (int32_t j = 0; j < r->num_inputs; ++j)
      if (r->inputs[j].kind == TPU_VALUE_VIEW && tpu_fusion_same_view(&r->inputs[j].u.view, v))
        return k;
  }
  return -1;
}

static tpu_status_t build_access(sched_t* s, int32_t n) {
  int32_t total = 0;
  for (int32_t i = 0; i < n; ++i) {
    const tpu_node_t* node = tpu_graph_node(s->graph, i);
    total += node->num_inputs + node->num_outputs;
  }
  s->acc = malloc(sizeof(access_t) * (size_t)(n + 1));
  s->base = malloc(sizeof(int32_t) * (size_t)(n + 1));
  s->ext = malloc(sizeof(extent_t) * (size_t)(total + 1));
  if (!s->acc || !s->base || !s->ext)
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "fusion schedule allocation failed");
  int32_t at = 0;
  for (int32_t i = 0; i < n; ++i) {
    const tpu_node_t* node = tpu_graph_node(s->graph, i);
    s->base[i] = at;
    s->acc[i] = (access_t){0, 0};
    for (int32_t j = 0; j < node->num_inputs; ++j)
      if (node->inputs[j].kind == TPU_VALUE_VIEW) {
        s->ext[at++] = extent_of(&node->inputs[j].u.view);
        s->acc[i].reads++;
      }
    for (int32_t o = 0; o < node->num_outputs; ++o)
      if (!tpu_view_is_absent(&node->outputs[o])) {
        s->ext[at++] = extent_of(&node->outputs[o]);
        s->acc[i].writes++;
      }
  }
  return TPU_OK;
}

/* The new order: recorded order, except that from each node placed, the
 * chain of its pointwise consumers follows while each may move up. */
static void order_nodes(const sched_t* s, int32_t n, bool* placed, int32_t* order) {
  int32_t count = 0;
  for (int32_t j = 0; j < n; ++j) {
    if (placed[j]) continue;
    placed[j] = true;
    order[count++] = j;
    for (int32_t cur = j;;) {
      int32_t k = next_reader(s, placed, cur, n);
      if (k < 0) break;
      const tpu_node_t* prod = tpu_graph_node(s->graph, cur);
      if (!movable(tpu_graph_node(s->graph, k), &prod->outputs[0])) break;
      /* Every node before k not placed yet would now run after it. */
      bool ok = true;
      for (int32_t i = j + 1; i < k && ok; ++i)
        if (!placed[i] && conflict(s, i, k)) ok = false;
      if (!ok) break;
      placed[k] = true;
      order[count++] = k;
      cur = k;
    }
  }
}

/* A free record said: freed after the first `point` recorded nodes. In the
 * new order it follows every node recorded before it that touches its range
 * (later tenants of the range conflict with those, so they stay after). */
static void remap_frees(const sched_t* s, const int32_t* pos, int32_t n, tpu_free_record_t* frees,
                        int32_t free_count) {
  for (int32_t f = 0; f < free_count; ++f) {
    extent_t r = {frees[f].lo, frees[f].hi};
    int32_t end = frees[f].point < n ? frees[f].point : n, point = 0;
    for (int32_t i = 0; i < end; ++i) {
      const extent_t* e = s->ext + s->base[i];
      for (int32_t x = 0; x < s->acc[i].reads + s->acc[i].writes; ++x)
        if (meet(e[x], r) && pos[i] + 1 > point) point = pos[i] + 1;
    }
    frees[f].point = point;
  }
}

tpu_status_t tpu_fusion_schedule(const tpu_graph_t* graph, tpu_free_record_t* frees,
                                 int32_t free_count, tpu_graph_t** out_graph) {
  *out_graph = NULL;
  int32_t n = tpu_graph_node_count(graph);
  if (n < 3) return TPU_OK;
  sched_t s = {graph, NULL, NULL, NULL};
  bool* placed = calloc((size_t)n, sizeof(bool));
  int32_t* order = malloc(sizeof(int32_t) * (size_t)n);
  int32_t* pos = malloc(sizeof(int32_t) * (size_t)n);
  tpu_status_t st = placed && order && pos
                        ? build_access(&s, n)
                        : tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "fusion schedule allocation failed");
  bool moved = false;
  if (st == TPU_OK) {
    order_nodes(&s, n, placed, order);
    for (int32_t i = 0; i < n; ++i) {
      pos[order[i]] = i;
      moved |= order[i] != i;
    }
  }
  tpu_graph_t* out = NULL;
  if (st == TPU_OK && moved) st = tpu_graph_create(&out);
  for (int32_t i = 0; st == TPU_OK && moved && i < n; ++i) {
    const tpu_node_t* node = tpu_graph_node(graph, order[i]);
    st = tpu_graph_add_node(out, node->op, node->inputs, node->num_inputs, node->outputs,
                            node->num_outputs, node->attrs, node->num_attrs);
  }
  if (st == TPU_OK && moved) {
    remap_frees(&s, pos, n, frees, free_count);
    *out_graph = out;
    out = NULL;
  }
  tpu_graph_release(out);
  free(s.acc);
  free(s.base);
  free(s.ext);
  free(placed);
  free(order);
  free(pos);
  return st;
}
