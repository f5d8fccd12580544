/* capture.c — capture a deferred region, replay it relocated (tpu/capture.h).
 *
 * While a stream captures, its pending state (defer.c) reports to it, under
 * the pending lock (internal.h): allocations, frees of the region's own
 * blocks, and every recorded graph, whose operand addresses are rewritten on the spot as
 * (space, offset) with space an input or one of the region's blocks. A block
 * is looked up among the live ones, newest first, so a range freed and
 * handed out again inside the region resolves to its current tenant.
 */
#include <stdlib.h>
#include <string.h>

#include "stream/internal.h"
#include "tpu/capture.h"
#include "tpu/ops.h"

typedef enum { EV_ALLOC, EV_FREE, EV_NODES } event_kind_t;

typedef struct {
  event_kind_t kind;
  int32_t block;       /* EV_ALLOC, EV_FREE */
  tpu_graph_t* graph;  /* EV_NODES: addresses hold offsets */
  int32_t* spaces;     /* EV_NODES: one per view operand, in node order */
  int32_t seed_attr, offset_attr; /* EV_NODES: the last node's Philox attrs, or -1 */
} event_t;

typedef struct {
  const tpu_block_t* block; /* capture-time identity (not owned) */
  uint64_t addr, bytes;
  bool live;
} block_rec_t;

/* A view operand with no bytes (or absent) is never relocated. */
#define SPACE_FIXED (-1)

struct tpu_capture {
  int32_t num_inputs;
  uint64_t* input_addr;
  uint64_t* input_bytes;
  block_rec_t* blocks;
  int32_t block_count, block_capacity;
  event_t* events;
  int32_t event_count, event_capacity;
  int32_t* live;     /* after tpu_capture_end: the blocks still allocated */
  int32_t live_count;
  int32_t nodes;
  int32_t random;                 /* EV_NODES events that draw random numbers */
  int32_t next_seed, next_offset; /* tpu_capture_mark_random for the next record, or -1 */
  const char* failed; /* first reason the region cannot be replayed */
};

static void fail(tpu_capture_t* c, const char* reason) {
  if (!c->failed) c->failed = reason;
}

static event_t* push_event(tpu_capture_t* c) {
  if (c->event_count == c->event_capacity) {
    int32_t cap = c->event_capacity ? c->event_capacity * 2 : 64;
    event_t* e = realloc(c->events, sizeof(*e) * (size_t)cap);
    if (!e) return NULL;
    c->events = e;
    c->event_capacity = cap;
  }
  event_t* e = &c->events[c->event_count++];
  memset(e, 0, sizeof(*e));
  return e;
}

void tpu_capture_release(tpu_capture_t* c) {
  if (!c) return;
  for (int32_t i = 0; i < c->event_count; ++i) {
    tpu_graph_release(c->events[i].graph);
    free(c->events[i].spaces);
  }
  free(c->events);
  free(c->live);
  free(c->blocks);
  free(c->input_addr);
  free(c->input_bytes);
  free(c);
}

tpu_status_t tpu_capture_begin(tpu_stream_t* stream, const uint64_t* input_addr,
                               const uint64_t* input_bytes, int32_t num_inputs) {
  tpu_capture_t* c = calloc(1, sizeof(*c));
  size_t n = num_inputs > 0 ? (size_t)num_inputs : 1;
  if (c) {
    c->input_addr = malloc(sizeof(uint64_t) * n);
    c->input_bytes = malloc(sizeof(uint64_t) * n);
  }
  if (!c || !c->input_addr || !c->input_bytes) {
    tpu_capture_release(c);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "capture: no host memory");
  }
  c->num_inputs = num_inputs > 0 ? num_inputs : 0;
  c->next_seed = c->next_offset = -1;
  for (int32_t i = 0; i < c->num_inputs; ++i) {
    c->input_addr[i] = input_addr[i];
    c->input_bytes[i] = input_bytes[i];
  }
  if (!tpu_pending_capture_attach(stream, c)) {
    tpu_capture_release(c);
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "capture: the stream is already capturing");
  }
  return TPU_OK;
}

tpu_status_t tpu_capture_end(tpu_stream_t* stream, tpu_capture_t** out_capture,
                             const char** out_reason) {
  *out_capture = NULL;
  *out_reason = NULL;
  const char* poison = NULL;
  tpu_capture_t* c = tpu_pending_capture_detach(stream, &poison);
  if (!c) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "capture: the stream is not capturing");
  if (poison) fail(c, poison);
  c->live = malloc(sizeof(int32_t) * (size_t)(c->block_count + 1));
  if (!c->live) fail(c, "no host memory to end the capture");
  for (int32_t k = 0; c->live && k < c->block_count; ++k)
    if (c->blocks[k].live) c->live[c->live_count++] = k;
  if (c->failed) {
    *out_reason = c->failed;
    tpu_capture_release(c);
    return TPU_OK;
  }
  *out_capture = c;
  return TPU_OK;
}

/* ---- what the pending state reports -------------------------------------------- */

void tpu_capture_note_alloc(tpu_capture_t* c, const tpu_block_t* block, uint64_t bytes) {
  if (!c->failed) {
    if (c->block_count == c->block_capacity) {
      int32_t cap = c->block_capacity ? c->block_capacity * 2 : 64;
      block_rec_t* b = realloc(c->blocks, sizeof(*b) * (size_t)cap);
      if (b) {
        c->blocks = b;
        c->block_capacity = cap;
      }
    }
    event_t* e = c->block_count < c->block_capacity ? push_event(c) : NULL;
    if (!e) {
      fail(c, "no host memory to capture an allocation");
    } else {
      e->kind = EV_ALLOC;
      e->block = c->block_count;
      c->blocks[c->block_count++] =
          (block_rec_t){.block = block, .addr = tpu_block_addr(block), .bytes = bytes, .live = true};
    }
  }
}

void tpu_capture_note_free(tpu_capture_t* c, const tpu_block_t* block) {
  if (c->failed) return;
  /* Blocks from before the region (an input dying early) are not replayed:
   * the replay's caller holds its inputs. */
  for (int32_t k = c->block_count - 1; k >= 0; --k)
    if (c->blocks[k].live && c->blocks[k].block == block) {
      event_t* e = push_event(c);
      if (!e) {
        fail(c, "no host memory to capture a free");
        return;
      }
      e->kind = EV_FREE;
      e->block = k;
      c->blocks[k].live = false;
      return;
    }
}

/* The space holding [addr, addr + bytes): a live block of the region (newest
 * first), else an input; -2 when neither. */
static int32_t space_of(const tpu_capture_t* c, uint64_t addr, uint64_t bytes) {
  for (int32_t k = c->block_count - 1; k >= 0; --k) {
    const block_rec_t* b = &c->blocks[k];
    if (b->live && addr >= b->addr && addr + bytes <= b->addr + b->bytes)
      return c->num_inputs + k;
  }
  for (int32_t i = 0; i < c->num_inputs; ++i)
    if (addr >= c->input_addr[i] && addr + bytes <= c->input_addr[i] + c->input_bytes[i])
      return i;
  return -2;
}

static uint64_t space_base(const tpu_capture_t* c, int32_t space) {
  return space < c->num_inputs ? c->input_addr[space]
                               : c->blocks[space - c->num_inputs].addr;
}

/* Rewrites v's address as an offset into its space; false if it has none. */
static bool encode(const tpu_capture_t* c, tpu_view_t* v, int32_t* out_space) {
  if (tpu_view_is_absent(v) || tpu_view_numel(v) == 0) {
    *out_space = SPACE_FIXED;
    return true;
  }
  uint64_t lo, hi;
  tpu_view_bytes(v, &lo, &hi);
  int32_t s = space_of(c, v->addr, hi - lo);
  if (s < 0) return false;
  v->addr -= space_base(c, s);
  *out_space = s;
  return true;
}

static int32_t view_operands(const tpu_graph_t* g) {
  int32_t n = 0;
  for (int32_t i = 0; i < tpu_graph_node_count(g); ++i) {
    const tpu_node_t* node = tpu_graph_node(g, i);
    n += node->num_outputs;
    for (int32_t k = 0; k < node->num_inputs; ++k) n += node->inputs[k].kind == TPU_VALUE_VIEW;
  }
  return n;
}

/* Copies `graph`'s nodes with their operands encoded (base == NULL), or
 * with encoded operands moved to the bases of `base` and, for an event that
 * draws random numbers, its last node's Philox attrs set to `counters`
 * (seed, offset) (replay). */
static tpu_status_t copy_graph(const tpu_capture_t* c, const tpu_graph_t* graph,
                               int32_t* spaces, const uint64_t* base, const event_t* e,
                               const int64_t* counters, tpu_graph_t** out) {
  tpu_graph_t* g = NULL;
  TPU_RETURN_IF_ERROR(tpu_graph_create(&g));
  tpu_status_t s = TPU_OK;
  int32_t at = 0;
  for (int32_t i = 0; i < tpu_graph_node_count(graph) && s == TPU_OK; ++i) {
    const tpu_node_t* node = tpu_graph_node(graph, i);
    tpu_value_t in[64];
    tpu_view_t outs[16];
    if (node->num_inputs > 64 || node->num_outputs > 16) {
      s = tpu_status_make(TPU_CODE_INTERNAL, "capture: a node with too many operands");
      break;
    }
    memcpy(in, node->inputs, sizeof(tpu_value_t) * (size_t)node->num_inputs);
    memcpy(outs, node->outputs, sizeof(tpu_view_t) * (size_t)node->num_outputs);
    for (int32_t k = 0; k < node->num_inputs + node->num_outputs && s == TPU_OK; ++k) {
      tpu_view_t* v = k < node->num_inputs ? (in[k].kind == TPU_VALUE_VIEW ? &in[k].u.view : NULL)
                                           : &outs[k - node->num_inputs];
      if (!v) continue;
      if (!base) {
        if (!encode(c, v, &spaces[at])) s = tpu_status_make(TPU_CODE_UNIMPLEMENTED, "outside");
      } else if (spaces[at] != SPACE_FIXED) {
        v->addr += base[spaces[at]];
      }
      at++;
    }
    tpu_attr_t attrs[TPU_MAX_ATTRS];
    memcpy(attrs, node->attrs, sizeof(tpu_attr_t) * (size_t)node->num_attrs);
    if (e && e->seed_attr >= 0 && i == tpu_graph_node_count(graph) - 1) {
      attrs[e->seed_attr] = (tpu_attr_t){.kind = TPU_ATTR_INT, .u.i = counters[0]};
      attrs[e->offset_attr] = (tpu_attr_t){.kind = TPU_ATTR_INT, .u.i = counters[1]};
    }
    if (s == TPU_OK)
      s = tpu_graph_add_node(g, node->op, in, node->num_inputs, outs, node->num_outputs, attrs,
                             node->num_attrs);
  }
  if (s != TPU_OK) {
    tpu_graph_release(g);
    return s;
  }
  *out = g;
  return TPU_OK;
}

static tpu_status_t copy_nodes(const tpu_capture_t* c, const event_t* e, const uint64_t* base,
                               const int64_t* counters, tpu_graph_t** out) {
  return copy_graph(c, e->graph, e->spaces, base, e, counters, out);
}

void tpu_capture_note_record(tpu_capture_t* c, const tpu_graph_t* graph) {
  if (c->failed) return;
  int32_t* spaces = malloc(sizeof(int32_t) * (size_t)(view_operands(graph) + 1));
  event_t* e = spaces ? push_event(c) : NULL;
  if (!e) {
    free(spaces);
    fail(c, "no host memory to capture a node");
    return;
  }
  tpu_status_t s = copy_graph(c, graph, spaces, NULL, NULL, NULL, &e->graph);
  if (s != TPU_OK) {
    bool outside = tpu_status_code(s) == TPU_CODE_UNIMPLEMENTED;
    tpu_status_free(s);
    free(spaces);
    c->event_count--;
    fail(c, outside ? "an operand outside the inputs and the region's allocations"
                    : "no host memory to capture a node");
    return;
  }
  e->kind = EV_NODES;
  e->spaces = spaces;
  e->seed_attr = c->next_seed;
  e->offset_attr = c->next_offset;
  c->random += c->next_seed >= 0;
  c->next_seed = c->next_offset = -1;
  c->nodes += tpu_graph_node_count(graph);
}

static void mark_random(tpu_capture_t* c, void* arg) {
  const int32_t* attrs = arg;
  c->next_seed = attrs[0];
  c->next_offset = attrs[1];
}

tpu_status_t tpu_capture_mark_random(tpu_stream_t* stream, int32_t seed_attr,
                                     int32_t offset_attr) {
  if (seed_attr < 0 || seed_attr >= TPU_MAX_ATTRS || offset_attr < 0 ||
      offset_attr >= TPU_MAX_ATTRS)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "capture: attribute index out of range");
  if (!tpu_pending_capturing(stream)) return TPU_OK;
  int32_t attrs[2] = {seed_attr, offset_attr};
  tpu_pending_with_capture(stream, mark_random, attrs);
  return TPU_OK;
}

/* ---- queries and replay --------------------------------------------------------------- */

int32_t tpu_capture_live_count(const tpu_capture_t* c) { return c->live_count; }

uint64_t tpu_capture_live_bytes(const tpu_capture_t* c, int32_t i) {
  return i >= 0 && i < c->live_count ? c->blocks[c->live[i]].bytes : 0;
}

int32_t tpu_capture_live_index(const tpu_capture_t* c, const tpu_block_t* block) {
  for (int32_t i = 0; i < c->live_count; ++i)
    if (c->blocks[c->live[i]].block == block) return i;
  return -1;
}

int32_t tpu_capture_node_count(const tpu_capture_t* c) { return c->nodes; }
int32_t tpu_capture_random_count(const tpu_capture_t* c) { return c->random; }

tpu_status_t tpu_capture_replay(const tpu_capture_t* c, tpu_stream_t* stream,
                                const uint64_t* input_addr, const uint64_t* seed,
                                const uint64_t* offset, tpu_block_t** out_live) {
  int32_t draw = 0;
  int32_t spaces = c->num_inputs + c->block_count;
  tpu_block_t** blocks = calloc((size_t)(c->block_count + 1), sizeof(*blocks));
  uint64_t* base = malloc(sizeof(uint64_t) * (size_t)(spaces + 1));
  tpu_status_t s = TPU_OK;
  if (!blocks || !base) s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "capture: no host memory");
  for (int32_t i = 0; i < c->num_inputs && s == TPU_OK; ++i) base[i] = input_addr[i];
  for (int32_t i = 0; i < c->event_count && s == TPU_OK; ++i) {
    const event_t* e = &c->events[i];
    if (e->kind == EV_ALLOC) {
      s = tpu_block_alloc(stream, c->blocks[e->block].bytes, &blocks[e->block]);
      if (s == TPU_OK) base[c->num_inputs + e->block] = tpu_block_addr(blocks[e->block]);
    } else if (e->kind == EV_FREE) {
      tpu_block_free(blocks[e->block]);
      blocks[e->block] = NULL;
    } else {
      tpu_graph_t* g = NULL;
      int64_t counters[2] = {0, 0};
      if (e->seed_attr >= 0) {
        counters[0] = (int64_t)seed[draw];
        counters[1] = (int64_t)offset[draw++];
      }
      s = copy_nodes(c, e, base, counters, &g);
      if (s == TPU_OK) s = tpu_defer_record(stream, g);
    }
  }
  if (s != TPU_OK) {
    for (int32_t k = 0; blocks && k < c->block_count; ++k) tpu_block_free(blocks[k]);
  } else {
    for (int32_t i = 0; i < c->live_count; ++i) out_live[i] = blocks[c->live[i]];
  }
  free(blocks);
  free(base);
  return s;
}
