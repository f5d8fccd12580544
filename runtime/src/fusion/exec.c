/* exec.c — the fusion interpreter: runs a compiled program over a graph on
 * the host driver. A single group runs its node's kernel as strict eager
 * would; a tiled group cuts its iteration shape into tiles of about
 * TILE_ELEMENTS (a row-tiled group: blocks of whole rows of about as many
 * elements) and runs every node of the group on one tile before moving
 * to the next, so a tile's intermediates are still in cache when the next
 * node reads them, and those held in scratch slots never reach device
 * memory. Tiles are spread over the compute pool; the kernels' own
 * parallel loops then run serially inside each tile. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/analysis.h"
#include "tpu/ops.h"

#define TILE_ELEMENTS 8192
#define MAX_NODE_INPUTS 16
#define MAX_NODE_OUTPUTS 4

typedef struct tiling {
  int32_t ndim;
  int64_t sizes[TPU_MAX_DIMS];
  int32_t split;  /* dims before it take one index per tile; -1: one tile */
  int64_t chunk;  /* extent of the split dim per tile */
  int64_t chunks; /* tiles along the split dim */
  int64_t tiles;
} tiling_t;

/* Tiles over `ndim` dims of `sizes`, each index standing for `inner`
 * elements (1 for pointwise tiles, a row's elements for row tiles), about
 * TILE_ELEMENTS elements per tile (at least one index). */
static void tiling_init(const int64_t* sizes, int32_t ndim, int64_t inner, tiling_t* t) {
  t->ndim = ndim;
  memcpy(t->sizes, sizes, sizeof(int64_t) * (size_t)ndim);
  int32_t d = ndim - 1;
  while (d >= 0 && inner * sizes[d] <= TILE_ELEMENTS) inner *= sizes[d--];
  t->split = d;
  if (d < 0) {
    t->chunk = t->chunks = t->tiles = 1;
    return;
  }
  t->chunk = TILE_ELEMENTS / inner > 0 ? TILE_ELEMENTS / inner : 1;
  t->chunks = (sizes[d] + t->chunk - 1) / t->chunk;
  t->tiles = t->chunks;
  for (int32_t k = 0; k < d; ++k) t->tiles *= sizes[k];
}

/* The tile's position: one index per dim before the split, a range on it. */
typedef struct tile {
  int64_t index[TPU_MAX_DIMS];
  int64_t begin, len;
} tile_t;

static void tile_at(const tiling_t* t, int64_t tile_index, tile_t* out) {
  if (t->split < 0) {
    out->begin = 0;
    out->len = 0;
    return;
  }
  int64_t c = tile_index % t->chunks, rest = tile_index / t->chunks;
  for (int32_t k = t->split - 1; k >= 0; --k) {
    out->index[k] = rest % t->sizes[k];
    rest /= t->sizes[k];
  }
  out->begin = c * t->chunk;
  int64_t left = t->sizes[t->split] - out->begin;
  out->len = left < t->chunk ? left : t->chunk;
}

/* The part of `v` (broadcast to the tiling's shape, right-aligned) that the
 * tile covers. Broadcast dims (size 1) stay size 1. */
static void slice_view(const tiling_t* t, const tile_t* tile, const tpu_view_t* v,
                       tpu_view_t* out) {
  int32_t shift = t->ndim - v->ndim;
  uint64_t es = tpu_dtype_size(v->dtype);
  *out = (tpu_view_t){.addr = v->addr, .dtype = v->dtype, .ndim = t->ndim};
  for (int32_t k = 0; k < t->ndim; ++k) {
    int64_t size = k < shift ? 1 : v->sizes[k - shift];
    int64_t stride = k < shift ? 0 : v->strides[k - shift];
    out->strides[k] = stride;
    out->sizes[k] = size;
    if (size == 1 || t->split < 0 || k > t->split) continue;
    int64_t first = k < t->split ? tile->index[k] : tile->begin;
    out->addr += (uint64_t)(first * stride) * es;
    out->sizes[k] = k < t->split ? 1 : tile->len;
  }
}

/* A contiguous scratch view with the tile's shape. */
static void scratch_view(const tiling_t* t, const tile_t* tile, tpu_dtype_t dtype, void* base,
                         tpu_view_t* out) {
  *out = (tpu_view_t){.addr = (uint64_t)(uintptr_t)base, .dtype = dtype, .ndim = t->ndim};
  int64_t stride = 1;
  for (int32_t k = t->ndim - 1; k >= 0; --k) {
    int64_t size = t->sizes[k];
    if (t->split >= 0 && k < t->split) size = 1;
    if (t->split >= 0 && k == t->split) size = tile->len;
    out->sizes[k] = size;
    out->strides[k] = stride;
    stride *= size;
  }
}

/* Row tiles: the part of `v` a tile covers when v's dim j is the group's
 * row dim j + shift (row dims are those before the tiling's ndim); dims of
 * size 1 are broadcast and stay whole. */
static void slice_rows(const tiling_t* t, const tile_t* tile, const tpu_view_t* v, int32_t shift,
                       tpu_view_t* out) {
  *out = *v;
  if (t->split < 0) return;
  uint64_t es = tpu_dtype_size(v->dtype);
  for (int32_t j = 0; j < v->ndim; ++j) {
    int32_t d = j + shift;
    if (d < 0 || d > t->split || v->sizes[j] == 1) continue;
    int64_t first = d < t->split ? tile->index[d] : tile->begin;
    out->addr += (uint64_t)(first * v->strides[j]) * es;
    out->sizes[j] = d < t->split ? 1 : tile->len;
  }
}

/* A contiguous scratch view of `shape`'s sizes. */
static void scratch_like(const tpu_view_t* shape, void* base, tpu_view_t* out) {
  *out = *shape;
  out->addr = (uint64_t)(uintptr_t)base;
  tpu_view_set_contiguous(out);
}

typedef struct tiled_run {
  const tpu_program_t* program;
  const tpu_program_group_t* group;
  const tpu_graph_t* graph;
  tpu_exec_ctx_t* ctx;
  tiling_t tiling;
  int64_t slot_bytes; /* per scratch slot */
  uint32_t row_inputs[TPU_FUSION_MAX_GROUP]; /* row groups: per node, its `rows` mask */
  _Atomic(tpu_status_t) error;
} tiled_run_t;

/* Node i's views for one tile of a row-tiled group. */
static void rows_views(tiled_run_t* r, const tile_t* tile, uint8_t* scratch, int32_t i,
                       tpu_value_t* inputs, tpu_view_t* outputs) {
  const tpu_program_t* p = r->program;
  const tiling_t* t = &r->tiling;
  const tpu_node_t* node = tpu_graph_node(r->graph, i);
  const tpu_op_def_t* def = tpu_op_def(node->op);
  uint32_t mask = r->row_inputs[i - r->group->first];
  bool pointwise = (def->flags & TPU_OP_POINTWISE) != 0;
  for (int32_t o = 0; o < node->num_outputs; ++o) {
    tpu_view_t sliced;
    slice_rows(t, tile, &node->outputs[o], 0, &sliced);
    int32_t s = p->out_slot[p->out_base[i] + o];
    if (s >= 0) scratch_like(&sliced, scratch + (size_t)s * (size_t)r->slot_bytes, &outputs[o]);
    else outputs[o] = sliced;
  }
  for (int32_t k = 0; k < node->num_inputs; ++k) {
    inputs[k] = node->inputs[k];
    if (node->inputs[k].kind != TPU_VALUE_VIEW) continue;
    const tpu_view_t* v = &node->inputs[k].u.view;
    tpu_view_t sliced = *v;
    if (pointwise) slice_rows(t, tile, v, node->outputs[0].ndim - v->ndim, &sliced);
    else if ((mask >> k) & 1u) slice_rows(t, tile, v, 0, &sliced);
    int32_t s = p->in_slot[p->in_base[i] + k];
    if (s >= 0)
      scratch_like(&sliced, scratch + (size_t)s * (size_t)r->slot_bytes, &inputs[k].u.view);
    else
      inputs[k].u.view = sliced;
  }
}

static tpu_status_t run_tile(tiled_run_t* r, const tile_t* tile, uint8_t* scratch) {
  const tpu_program_t* p = r->program;
  const tiling_t* t = &r->tiling;
  tpu_value_t inputs[MAX_NODE_INPUTS];
  tpu_view_t outputs[MAX_NODE_OUTPUTS];
  for (int32_t i = r->group->first; i < r->group->first + r->group->count; ++i) {
    const tpu_node_t* node = tpu_graph_node(r->graph, i);
    tpu_node_t tn = *node;
    if (r->group->kind == TPU_GROUP_ROWS) {
      rows_views(r, tile, scratch, i, inputs, outputs);
    } else {
      for (int32_t k = 0; k < node->num_inputs; ++k) {
        inputs[k] = node->inputs[k];
        if (node->inputs[k].kind != TPU_VALUE_VIEW) continue;
        int32_t s = p->in_slot[p->in_base[i] + k];
        if (s >= 0)
          scratch_view(t, tile, node->inputs[k].u.view.dtype,
                       scratch + (size_t)s * (size_t)r->slot_bytes, &inputs[k].u.view);
        else
          slice_view(t, tile, &node->inputs[k].u.view, &inputs[k].u.view);
      }
      for (int32_t o = 0; o < node->num_outputs; ++o) {
        int32_t s = p->out_slot[p->out_base[i] + o];
        if (s >= 0)
          scratch_view(t, tile, node->outputs[o].dtype,
                       scratch + (size_t)s * (size_t)r->slot_bytes, &outputs[o]);
        else
          slice_view(t, tile, &node->outputs[o], &outputs[o]);
      }
    }
    tn.inputs = inputs;
    tn.outputs = outputs;
    TPU_RETURN_IF_ERROR(tpu_node_execute(&tn, r->ctx));
  }
  return TPU_OK;
}

static void run_tiles(void* arg, int64_t begin, int64_t end) {
  tiled_run_t* r = arg;
  uint8_t* scratch = NULL;
  if (r->group->slots) {
    scratch = malloc((size_t)r->group->slots * (size_t)r->slot_bytes);
    if (!scratch) {
      tpu_status_t none = TPU_OK;
      tpu_status_t s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "fusion scratch allocation failed");
      if (!atomic_compare_exchange_strong(&r->error, &none, s)) tpu_status_free(s);
      return;
    }
  }
  for (int64_t i = begin; i < end && atomic_load(&r->error) == TPU_OK; ++i) {
    tile_t tile;
    tile_at(&r->tiling, i, &tile);
    tpu_status_t s = run_tile(r, &tile, scratch);
    if (s != TPU_OK) {
      tpu_status_t none = TPU_OK;
      if (!atomic_compare_exchange_strong(&r->error, &none, s)) tpu_status_free(s);
      break;
    }
  }
  free(scratch);
}

tpu_status_t tpu_program_run(const tpu_program_t* p, const tpu_graph_t* graph,
                             tpu_exec_ctx_t* ctx) {
  for (int32_t g = 0; g < p->group_count; ++g) {
    const tpu_program_group_t* grp = &p->groups[g];
    if (grp->kind == TPU_GROUP_SINGLE) {
      for (int32_t i = grp->first; i < grp->first + grp->count; ++i)
        TPU_RETURN_IF_ERROR(tpu_node_execute(tpu_graph_node(graph, i), ctx));
      continue;
    }
    for (int32_t i = grp->first; i < grp->first + grp->count; ++i) {
      const tpu_node_t* node = tpu_graph_node(graph, i);
      if (node->num_inputs > MAX_NODE_INPUTS || node->num_outputs > MAX_NODE_OUTPUTS)
        return tpu_status_make(TPU_CODE_INTERNAL, "fusion: node %d has too many operands", i);
    }
    tiled_run_t r = {.program = p, .group = grp, .graph = graph, .ctx = ctx};
    atomic_init(&r.error, TPU_OK);
    const tpu_node_t* lead = tpu_graph_node(graph, grp->first);
    if (grp->kind == TPU_GROUP_ROWS) {
      /* Rows: the lead's output's leading dims; a tile holds whole rows of
       * every view, sized by the widest. */
      int64_t nrows = 1, widest = 1;
      for (int32_t d = 0; d < grp->rows; ++d) nrows *= lead->outputs[0].sizes[d];
      for (int32_t i = grp->first; i < grp->first + grp->count && nrows > 0; ++i) {
        const tpu_node_t* node = tpu_graph_node(graph, i);
        for (int32_t o = 0; o < node->num_outputs; ++o)
          if (tpu_view_numel(&node->outputs[o]) / nrows > widest)
            widest = tpu_view_numel(&node->outputs[o]) / nrows;
        for (int32_t k = 0; k < node->num_inputs; ++k)
          if (node->inputs[k].kind == TPU_VALUE_VIEW &&
              tpu_view_numel(&node->inputs[k].u.view) / nrows > widest)
            widest = tpu_view_numel(&node->inputs[k].u.view) / nrows;
      }
      for (int32_t i = grp->first; i < grp->first + grp->count; ++i) {
        const tpu_node_t* node = tpu_graph_node(graph, i);
        const tpu_op_def_t* def = tpu_op_def(node->op);
        uint32_t* mask = &r.row_inputs[i - grp->first];
        *mask = 0;
        if (!(def->flags & TPU_OP_POINTWISE)) def->rows(def, node, mask);
      }
      tiling_init(lead->outputs[0].sizes, grp->rows, widest, &r.tiling);
      int64_t rows_per_tile = r.tiling.split < 0 ? nrows : r.tiling.chunk;
      for (int32_t d = r.tiling.split + 1; d < grp->rows && r.tiling.split >= 0; ++d)
        rows_per_tile *= lead->outputs[0].sizes[d];
      r.slot_bytes = rows_per_tile * widest * 8;
    } else {
      tiling_init(lead->outputs[0].sizes, lead->outputs[0].ndim, 1, &r.tiling);
      r.slot_bytes = TILE_ELEMENTS * 8;
    }
    tpu_parallel_for(r.tiling.tiles, 1, run_tiles, &r);
    tpu_status_t s = atomic_load(&r.error);
    if (s != TPU_OK) return s;
  }
  return TPU_OK;
}
