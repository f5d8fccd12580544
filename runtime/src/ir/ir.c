/* ir.c — graphs of nodes (see tpu/ir.h). A graph owns flat arrays of input
 * values and output views; each node points at its slice of them (the
 * pointers redone whenever an array moves), so appending never invalidates
 * what a node describes. */
#include "tpu/ir.h"
#include "ir/attach.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tpu/ops.h"
#include "tpu/profiler.h"

/* A node and where its operands start in the graph's arrays (to redo its
 * operand pointers when an array moves). */
typedef struct node_slot {
  int64_t input_offset;
  int64_t output_offset;
  uint64_t correlation; /* the host op that recorded it (tpu/profiler.h), 0: none */
  tpu_node_t node;
} node_slot_t;

/* Room for a one-node graph inside the graph itself: strict eager submits
 * one such graph per op, with a single allocation. */
enum { INLINE_NODES = 1, INLINE_INPUTS = 4, INLINE_OUTPUTS = 3 };

struct tpu_graph {
  node_slot_t* nodes;
  int32_t node_count, node_capacity;
  tpu_value_t* inputs;
  int64_t input_count, input_capacity;
  tpu_view_t* outputs;
  int64_t output_count, output_capacity;
  const void* attached; /* tpu_graph_attach: owned, released by attached_release */
  void (*attached_release)(const void*);
  node_slot_t inline_nodes[INLINE_NODES];
  tpu_value_t inline_inputs[INLINE_INPUTS];
  tpu_view_t inline_outputs[INLINE_OUTPUTS];
};

int64_t tpu_view_numel(const tpu_view_t* view) {
  int64_t n = 1;
  for (int32_t i = 0; i < view->ndim; ++i) n *= view->sizes[i];
  return n;
}

bool tpu_views_may_overlap(const tpu_view_t* a, const tpu_view_t* b) {
  uint64_t alo, ahi, blo, bhi;
  tpu_view_bytes(a, &alo, &ahi);
  tpu_view_bytes(b, &blo, &bhi);
  return alo < ahi && blo < bhi && alo < bhi && blo < ahi;
}

bool tpu_view_is_contiguous(const tpu_view_t* view) {
  int64_t expected = 1;
  for (int32_t i = view->ndim - 1; i >= 0; --i) {
    if (view->sizes[i] == 1) continue;
    if (view->strides[i] != expected) return false;
    expected *= view->sizes[i];
  }
  return true;
}

int64_t tpu_attr_int(const tpu_attr_t* a, int64_t dflt) {
  if (!a) return dflt;
  if (a->kind == TPU_ATTR_INT || a->kind == TPU_ATTR_BOOL) return a->u.i;
  if (a->kind == TPU_ATTR_FLOAT) { /* saturated: a float outside int64 converts defined */
    if (a->u.f != a->u.f) return 0;
    if (a->u.f >= 9.2233720368547758e18) return INT64_MAX;
    if (a->u.f <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)a->u.f;
  }
  return dflt;
}

double tpu_attr_float(const tpu_attr_t* a, double dflt) {
  if (!a) return dflt;
  if (a->kind == TPU_ATTR_FLOAT) return a->u.f;
  if (a->kind == TPU_ATTR_INT || a->kind == TPU_ATTR_BOOL) return (double)a->u.i;
  return dflt;
}

bool tpu_attr_bool(const tpu_attr_t* a, bool dflt) {
  if (!a) return dflt;
  if (a->kind == TPU_ATTR_BOOL || a->kind == TPU_ATTR_INT) return a->u.i != 0;
  if (a->kind == TPU_ATTR_FLOAT) return a->u.f != 0.0;
  return dflt;
}

/* Released graphs are kept for reuse. Those that never outgrew their inline
 * storage: eager mode creates one per op on the caller's thread and
 * releases it on a queue worker, and recycling spares both sides the
 * allocator. Those whose arrays grew, up to GROWN_MAX of at most
 * GROWN_BYTES each (so at most 2 MiB is kept): DEFER_AND_FUSE's pending
 * graph (tpu_graph_create_reserved), whose arrays a loop then reuses flush
 * after flush instead of allocating and freeing them each time. */
enum { RECYCLE_MAX = 64, GROWN_MAX = 4, GROWN_BYTES = 512 * 1024 };
static struct {
  pthread_mutex_t mu;
  tpu_graph_t* items[RECYCLE_MAX];
  int count;
  tpu_graph_t* grown[GROWN_MAX];
  int grown_count;
} g_recycle = {PTHREAD_MUTEX_INITIALIZER, {NULL}, 0, {NULL}, 0};

static void set_inline(tpu_graph_t* g) {
  g->nodes = g->inline_nodes;
  g->node_capacity = INLINE_NODES;
  g->inputs = g->inline_inputs;
  g->input_capacity = INLINE_INPUTS;
  g->outputs = g->inline_outputs;
  g->output_capacity = INLINE_OUTPUTS;
}

static void set_empty(tpu_graph_t* g) {
  g->attached = NULL;
  g->attached_release = NULL;
  g->node_count = 0;
  g->input_count = 0;
  g->output_count = 0;
}

tpu_status_t tpu_graph_create(tpu_graph_t** out_graph) {
  tpu_graph_t* g = NULL;
  pthread_mutex_lock(&g_recycle.mu);
  if (g_recycle.count) g = g_recycle.items[--g_recycle.count];
  pthread_mutex_unlock(&g_recycle.mu);
  if (!g) g = malloc(sizeof(tpu_graph_t));
  if (!g) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "graph allocation failed");
  set_inline(g);
  set_empty(g);
  *out_graph = g;
  return TPU_OK;
}

static size_t array_bytes(const tpu_graph_t* g) {
  return sizeof(node_slot_t) * (size_t)g->node_capacity +
         sizeof(tpu_value_t) * (size_t)g->input_capacity +
         sizeof(tpu_view_t) * (size_t)g->output_capacity;
}

tpu_status_t tpu_graph_create_reserved(int32_t nodes, int64_t inputs, int64_t outputs,
                                       tpu_graph_t** out_graph) {
  tpu_graph_t* g = NULL;
  pthread_mutex_lock(&g_recycle.mu);
  int pick = -1; /* one with room for all, else the most recently kept */
  for (int i = g_recycle.grown_count - 1; i >= 0 && pick < 0; --i) {
    const tpu_graph_t* c = g_recycle.grown[i];
    if (c->node_capacity >= nodes && c->input_capacity >= inputs && c->output_capacity >= outputs)
      pick = i;
  }
  if (pick < 0 && g_recycle.grown_count) pick = g_recycle.grown_count - 1;
  if (pick >= 0) {
    g = g_recycle.grown[pick];
    g_recycle.grown[pick] = g_recycle.grown[--g_recycle.grown_count];
  }
  pthread_mutex_unlock(&g_recycle.mu);
  if (g) {
    set_empty(g); /* its arrays stay: the nodes are appended into them */
  } else {
    TPU_RETURN_IF_ERROR(tpu_graph_create(&g));
  }
  tpu_status_t s = tpu_graph_reserve(g, nodes, inputs, outputs);
  tpu_status_free(s); /* a hint: without the room, appending grows the graph */
  *out_graph = g;
  return TPU_OK;
}

void tpu_graph_release(tpu_graph_t* graph) {
  if (!graph) return;
  tpu_graph_attach(graph, NULL, NULL);
  bool all_inline = graph->nodes == graph->inline_nodes && graph->inputs == graph->inline_inputs &&
                    graph->outputs == graph->inline_outputs;
  if (!all_inline && array_bytes(graph) <= GROWN_BYTES) {
    pthread_mutex_lock(&g_recycle.mu);
    if (g_recycle.grown_count < GROWN_MAX) {
      g_recycle.grown[g_recycle.grown_count++] = graph;
      graph = NULL;
    }
    pthread_mutex_unlock(&g_recycle.mu);
    if (!graph) return;
  }
  if (graph->nodes != graph->inline_nodes) free(graph->nodes);
  if (graph->inputs != graph->inline_inputs) free(graph->inputs);
  if (graph->outputs != graph->inline_outputs) free(graph->outputs);
  set_inline(graph);
  pthread_mutex_lock(&g_recycle.mu);
  if (g_recycle.count < RECYCLE_MAX) {
    g_recycle.items[g_recycle.count++] = graph;
    graph = NULL;
  }
  pthread_mutex_unlock(&g_recycle.mu);
  free(graph);
}

/* Grows an array that may still live in the graph's inline storage. */
static int grow(void** data, const void* inline_data, int64_t count, int64_t* capacity,
                int64_t needed, size_t elem) {
  if (needed <= *capacity) return 1;
  int64_t cap = *capacity * 2;
  while (cap < needed) cap *= 2;
  void* p;
  if (*data == inline_data) {
    p = malloc((size_t)cap * elem);
    if (p && count) memcpy(p, *data, (size_t)count * elem);
  } else {
    p = realloc(*data, (size_t)cap * elem);
  }
  if (!p) return 0;
  *data = p;
  *capacity = cap;
  return 1;
}

/* Room for `nodes` nodes, `inputs` values and `outputs` views in all. Each
 * node keeps direct pointers to its operands (so that tpu_graph_node is a
 * plain read), redone here when an operand array moves. */
static int grow_arrays(tpu_graph_t* g, int64_t nodes, int64_t inputs, int64_t outputs) {
  const tpu_value_t* old_inputs = g->inputs;
  const tpu_view_t* old_outputs = g->outputs;
  int64_t cap = g->node_capacity;
  int ok = grow((void**)&g->nodes, g->inline_nodes, g->node_count, &cap, nodes,
                sizeof(node_slot_t)) &&
           grow((void**)&g->inputs, g->inline_inputs, g->input_count, &g->input_capacity, inputs,
                sizeof(tpu_value_t)) &&
           grow((void**)&g->outputs, g->inline_outputs, g->output_count, &g->output_capacity,
                outputs, sizeof(tpu_view_t));
  g->node_capacity = (int32_t)cap;
  if (g->inputs != old_inputs || g->outputs != old_outputs)
    for (int32_t i = 0; i < g->node_count; ++i) {
      node_slot_t* slot = &g->nodes[i];
      slot->node.inputs = g->inputs + slot->input_offset;
      slot->node.outputs = g->outputs + slot->output_offset;
    }
  return ok;
}

tpu_status_t tpu_graph_reserve(tpu_graph_t* g, int32_t nodes, int64_t inputs, int64_t outputs) {
  return grow_arrays(g, nodes, inputs, outputs)
             ? TPU_OK
             : tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "graph reservation failed");
}

void tpu_graph_operand_counts(const tpu_graph_t* g, int64_t* out_inputs, int64_t* out_outputs) {
  *out_inputs = g->input_count;
  *out_outputs = g->output_count;
}

/* Copies the used part of a view only: the graph is written by the thread
 * that submits and read by a queue worker on another core, so every byte
 * written here crosses between caches. */
static void copy_view(tpu_view_t* dst, const tpu_view_t* src) {
  int32_t n = src->ndim >= 0 && src->ndim <= TPU_MAX_DIMS ? src->ndim : 0;
  dst->addr = src->addr;
  dst->dtype = src->dtype;
  dst->ndim = src->ndim;
  memcpy(dst->sizes, src->sizes, sizeof(int64_t) * (size_t)n);
  memcpy(dst->strides, src->strides, sizeof(int64_t) * (size_t)n);
}

tpu_status_t tpu_graph_add_node(tpu_graph_t* g, tpu_op_id_t op, const tpu_value_t* inputs,
                                int32_t num_inputs, const tpu_view_t* outputs,
                                int32_t num_outputs, const tpu_attr_t* attrs, int32_t num_attrs) {
  if (num_inputs < 0 || num_outputs < 0 || num_attrs < 0 || num_attrs > TPU_MAX_ATTRS)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "bad node arity");
  if (!grow_arrays(g, g->node_count + 1, g->input_count + num_inputs,
                   g->output_count + num_outputs))
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "graph growth failed");
  node_slot_t* slot = &g->nodes[g->node_count++];
  slot->node.op = op;
  slot->node.num_inputs = num_inputs;
  slot->node.num_outputs = num_outputs;
  slot->node.num_attrs = num_attrs;
  slot->node.inputs = g->inputs + g->input_count;
  slot->node.outputs = g->outputs + g->output_count;
  if (num_attrs) memcpy(slot->node.attrs, attrs, sizeof(tpu_attr_t) * (size_t)num_attrs);
  /* Attrs past num_attrs are not the node's: only their kind is set. */
  for (int32_t k = num_attrs; k < TPU_MAX_ATTRS; ++k) slot->node.attrs[k].kind = TPU_ATTR_NONE;
  slot->input_offset = g->input_count;
  slot->output_offset = g->output_count;
  slot->correlation = tpu_profiler_correlation(); /* a thread-local read: 0 unless profiling */
  for (int32_t i = 0; i < num_inputs; ++i) {
    tpu_value_t* dst = &g->inputs[g->input_count + i];
    dst->kind = inputs[i].kind;
    if (inputs[i].kind == TPU_VALUE_VIEW) copy_view(&dst->u.view, &inputs[i].u.view);
    else dst->u.scalar = inputs[i].u.scalar;
  }
  for (int32_t i = 0; i < num_outputs; ++i) copy_view(&g->outputs[g->output_count + i], &outputs[i]);
  g->input_count += num_inputs;
  g->output_count += num_outputs;
  return TPU_OK;
}

tpu_status_t tpu_graph_append(tpu_graph_t* g, const tpu_node_t* node) {
  return tpu_graph_add_node(g, node->op, node->inputs, node->num_inputs, node->outputs,
                            node->num_outputs, node->attrs, node->num_attrs);
}

tpu_status_t tpu_graph_append_from(tpu_graph_t* g, const tpu_graph_t* src, int32_t index) {
  const tpu_node_t* node = tpu_graph_node(src, index);
  if (!node) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "graph: no node %d", index);
  TPU_RETURN_IF_ERROR(tpu_graph_append(g, node));
  g->nodes[g->node_count - 1].correlation = src->nodes[index].correlation;
  return TPU_OK;
}

uint64_t tpu_graph_node_correlation(const tpu_graph_t* graph, int32_t index) {
  if (index < 0 || index >= graph->node_count) return 0;
  return graph->nodes[index].correlation;
}

tpu_status_t tpu_graph_from_node(const tpu_node_t* node, tpu_graph_t** out_graph) {
  *out_graph = NULL;
  tpu_graph_t* g = NULL;
  TPU_RETURN_IF_ERROR(tpu_graph_create(&g));
  tpu_status_t s = tpu_graph_append(g, node);
  if (s != TPU_OK) {
    tpu_graph_release(g);
    return s;
  }
  *out_graph = g;
  return TPU_OK;
}

tpu_status_t tpu_graph_permute(tpu_graph_t* graph, const int32_t* order) {
  enum { SMALL = 16 }; /* a decode step's graph: no allocation */
  int32_t n = graph->node_count;
  node_slot_t small_slots[SMALL];
  bool small_seen[SMALL] = {false};
  node_slot_t* slots = n <= SMALL ? small_slots : malloc(sizeof(node_slot_t) * (size_t)n);
  bool* seen = n <= SMALL ? small_seen : calloc((size_t)n, sizeof(bool));
  tpu_status_t s = slots && seen ? TPU_OK
                                 : tpu_status_make(TPU_CODE_OUT_OF_MEMORY,
                                                   "graph permutation allocation failed");
  for (int32_t i = 0; s == TPU_OK && i < n; ++i) {
    if (order[i] < 0 || order[i] >= n || seen[order[i]])
      s = tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                          "graph permutation: entry %d (%d) is not a new node index", i,
                          order[i]);
    else
      seen[order[i]] = true;
  }
  if (s == TPU_OK) {
    memcpy(slots, graph->nodes, sizeof(node_slot_t) * (size_t)n);
    for (int32_t i = 0; i < n; ++i) graph->nodes[i] = slots[order[i]];
  }
  if (n > SMALL) {
    free(slots);
    free(seen);
  }
  return s;
}

void tpu_graph_attach(tpu_graph_t* graph, const void* data, void (*release)(const void*)) {
  if (graph->attached_release) graph->attached_release(graph->attached);
  graph->attached = release ? data : NULL;
  graph->attached_release = release;
}

const void* tpu_graph_attachment(const tpu_graph_t* graph, void (*release)(const void*)) {
  return release && graph->attached_release == release ? graph->attached : NULL;
}

int32_t tpu_graph_node_count(const tpu_graph_t* graph) { return graph->node_count; }

const tpu_node_t* tpu_graph_node(const tpu_graph_t* graph, int32_t index) {
  if (index < 0 || index >= graph->node_count) return NULL;
  return &graph->nodes[index].node;
}

tpu_status_t tpu_graph_verify(const tpu_graph_t* graph) {
  for (int32_t i = 0; i < graph->node_count; ++i)
    TPU_RETURN_IF_ERROR(tpu_node_verify(tpu_graph_node(graph, i), i));
  return TPU_OK;
}
