/* exec.c — the fusion interpreter: runs a compiled program over a graph on
 * the host driver. A single group runs its node's kernel as strict eager
 * would; a GEMM group runs as epilogue.c says; a tiled group cuts its iteration shape into tiles of about
 * TILE_ELEMENTS (a row-tiled group: blocks of whole rows of about as many
 * elements) and runs every node of the group on one tile before moving
 * to the next, so a tile's intermediates are still in cache when the next
 * node reads them, and those held in scratch slots never reach device
 * memory. Tiles are spread over the compute pool; the kernels' own
 * parallel loops then run serially inside each tile.
 *
 * The direct path: a tiled group of float32 elementwise ops whose memory
 * operands run with unit stride along the last dim calls the ops' tile
 * functions itself, in blocks of DIRECT_BLOCK elements along each tile row,
 * its intermediates in block-sized slots. Every value then stays in L1, and
 * the loads and stores of memory operands interleave with the arithmetic,
 * so the hardware streams memory while the group computes (run node by
 * node over a whole tile, a memory-bound node and a compute-bound one take
 * turns). A row-tiled group of such ops and float32 layer/rms norms over
 * the last dim runs the same way row by row (rows_plan): each node over the
 * whole row, the norms through their family's row function, intermediates
 * in row-sized slots. The node-by-node path stays for every other group,
 * and for groups whose plans fail (it reports their errors).
 *
 * Streaming stores: when a direct group's memory operands together exceed
 * the last-level cache (stream_min_bytes), its outputs would leave the
 * cache before anything reads them, so each block (row) of a memory output
 * is computed into a staging slot in L1 and written with non-temporal
 * stores: the cache lines are not read first (no write-allocate traffic,
 * a quarter to a third of such a group's DRAM traffic). The values are the
 * same bits either way.
 *
 * A repeat of a flushed recording (a flush memo hit) carries the plans
 * kept for its nodes (node_plans.c): its single nodes, the nodes of its
 * row tiles and the direct path then skip tpu_ew_plan.
 *
 * Errors follow strict eager's contract (a failing op's error is recorded,
 * every later op still runs): a node that fails on a tile or a row records
 * its error and the tile goes on with the group's next node, every tile
 * runs, and every later group runs; tpu_program_run returns the first
 * error. Only the failing node's outputs (and what reads them) are then
 * unspecified, as in strict eager: every other node ran on every element
 * exactly once, so in-place updates are applied once and values that do not
 * depend on the failure are exact. Of a group's errors the one of its
 * earliest node, on its earliest tile or row, is kept, so the error reported
 * does not depend on how tiles were spread over threads. (A block of tiles
 * whose host scratch cannot be allocated does not run: that error is
 * reported instead.) */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#if defined(__x86_64__) || defined(__SSE__)
#include <xmmintrin.h>
#define EXEC_HAVE_STREAM 1
#endif

#include "tpu/config.h"
#include "fusion/analysis.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/norm/norm.h"
#include "tpu/ops.h"
#include "tpu/profiler.h"

#define TILE_ELEMENTS 8192
#define MAX_NODE_INPUTS 16
#define MAX_NODE_OUTPUTS 4
#define DIRECT_BLOCK 512
/* Scratch slots lie SLOT_PAD floats more than a block (a row) apart: slots
 * a multiple of 4 KiB apart make a node's loads from one and stores to
 * another alias in the core's store-to-load check (4K aliasing), which cost
 * the row path's mul of two 1024-float slots about as much as silu. */
#define SLOT_PAD 16
#define DIRECT_STRIDE (DIRECT_BLOCK + SLOT_PAD)
#define DIRECT_MIN_ROW 64 /* shorter tile rows take the node-by-node path */
#define ROWS_DIRECT_MAX 16384 /* longer rows take the node-by-node path */
#define SCRATCH_ALIGN 64

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

/* A node of a group on the direct path, everything its blocks need (the
 * block loop reads no graph or program data): its tile function and
 * parameters, and per input where a block's array comes from. */
enum { DIRECT_ABSENT = 0, DIRECT_MEMORY, DIRECT_SLOT, DIRECT_NUMBER };
typedef struct direct_node {
  tpu_ew_tile_fn fn;
  tpu_ew_params_t params;
  int32_t nin;
  int32_t out_slot;                    /* scratch slot of the output, or -1 */
  int32_t src[TPU_EW_MAX_INPUTS];      /* DIRECT_* */
  int32_t slot[TPU_EW_MAX_INPUTS];     /* DIRECT_SLOT: scratch slot; DIRECT_NUMBER: number slot */
  float scalar[TPU_EW_MAX_INPUTS];     /* DIRECT_NUMBER: the value */
} direct_node_t;

/* The direct path: on unless TORCH_TPU_FUSION_DIRECT=0 (for comparisons). */
static bool direct_enabled(void) { return tpu_config_bool(TPU_CONFIG_FUSION_DIRECT); }

/* The row-by-row direct path of a row group: per node, where each operand
 * of a row lives (a memory operand: its first row's address and its byte
 * strides over the row dims, 0 where broadcast). */
typedef struct row_operand {
  char* base;
  int64_t strides[TPU_MAX_DIMS];
} row_operand_t;

typedef struct rows_node {
  bool norm;               /* a norm through its row function, else elementwise */
  tpu_norm_row_t nr;
  direct_node_t d;         /* sources of the inputs (a norm: input 0 only), output slot */
  row_operand_t in[TPU_EW_MAX_INPUTS], out;
  row_operand_t stat[2];   /* a norm's mean and rstd in memory (base NULL: not written) */
} rows_node_t;

typedef struct rows_plan {
  int32_t ndim;            /* row dims */
  int64_t sizes[TPU_MAX_DIMS];
  int64_t n;               /* elements per row */
  rows_node_t nodes[TPU_FUSION_MAX_GROUP];
} rows_plan_t;

/* tpu_fusion_get_path_counts's counters. */
static _Atomic int64_t g_direct_tiled, g_direct_rows, g_node_by_node, g_streamed;

/* The bytes of memory operands above which a direct group streams its
 * outputs (see the top): the size of the level-3 cache cpu0 shares, as
 * Linux's sysfs gives it (32 MiB where it does not). Not glibc's
 * sysconf(_SC_LEVEL3_CACHE_SIZE): in this project's VMs on AMD EPYC it
 * says 320 MiB for a 32 MiB cache. */
static _Atomic int64_t g_stream_min_bytes, g_stream_override = -1;
static void stream_init(void) {
  int64_t bytes = (int64_t)32 << 20;
  FILE* f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
  if (f) {
    long kib = 0;
    char unit = 0;
    if (fscanf(f, "%ld%c", &kib, &unit) == 2 && kib > 0 && unit == 'K') bytes = (int64_t)kib << 10;
    fclose(f);
  }
  g_stream_min_bytes = bytes;
}
static int64_t stream_min_bytes(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, stream_init);
  int64_t o = atomic_load_explicit(&g_stream_override, memory_order_relaxed);
  return o >= 0 ? o : g_stream_min_bytes;
}

void tpu_fusion_set_stream_min_bytes(int64_t bytes) {
  atomic_store_explicit(&g_stream_override, bytes < 0 ? -1 : bytes, memory_order_relaxed);
}

/* dst[0, n) = src[0, n) with non-temporal stores where dst is 16-byte
 * aligned (plain stores for the unaligned head and the tail). */
static void stream_floats(float* dst, const float* src, int64_t n) {
  int64_t i = 0;
#ifdef EXEC_HAVE_STREAM
  for (; i < n && ((uintptr_t)(dst + i) & 15u) != 0; ++i) dst[i] = src[i];
  for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
#endif
  for (; i < n; ++i) dst[i] = src[i];
}

/* Orders a thread's streaming stores before whatever it publishes next
 * (the pool's end of a chunk). */
static void stream_fence(void) {
#ifdef EXEC_HAVE_STREAM
  _mm_sfence();
#endif
}

typedef struct tiled_run {
  const tpu_program_t* program;
  const tpu_program_group_t* group;
  const tpu_graph_t* graph;
  const tpu_node_plans_t* plans; /* kept with a flush memo entry, or NULL */
  tpu_exec_ctx_t* ctx;
  tiling_t tiling;
  int64_t slot_bytes; /* per scratch slot */
  uint32_t row_inputs[TPU_FUSION_MAX_GROUP]; /* row groups: per node, its `rows` mask */
  bool direct;                                /* the direct path (see the top) */
  bool stream;                                /* direct: streaming stores (see the top) */
  rows_plan_t* rows;                          /* a row group's direct path, or NULL */
  int32_t scalars;                            /* number slots of the direct path */
  direct_node_t dn[TPU_FUSION_MAX_GROUP];
  tpu_group_error_t err;                      /* the group's first error (see the top) */
} tiled_run_t;

void tpu_group_error_init(tpu_group_error_t* e) {
  pthread_mutex_init(&e->mu, NULL);
  e->error = TPU_OK;
  e->node = -1;
  e->at = 0;
}

void tpu_group_error_note(tpu_group_error_t* e, int32_t node, int64_t at, tpu_status_t s) {
  pthread_mutex_lock(&e->mu);
  if (e->error == TPU_OK || node < e->node || (node == e->node && at < e->at)) {
    tpu_status_free(e->error);
    e->error = s;
    e->node = node;
    e->at = at;
    s = TPU_OK;
  }
  pthread_mutex_unlock(&e->mu);
  tpu_status_free(s);
}

tpu_status_t tpu_group_error_finish(tpu_group_error_t* e) {
  pthread_mutex_destroy(&e->mu);
  return e->error;
}

static void set_error(tiled_run_t* r, int32_t node, int64_t at, tpu_status_t s) {
  tpu_group_error_note(&r->err, node, at, s);
}

/* A direct-path tile function's failure in node i, named as the node's
 * kernel names it (tpu_node_execute). */
static tpu_status_t direct_error(const tiled_run_t* r, int32_t i) {
  return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "in op '%s' on tpu:%d: ZeroDivisionError",
                         tpu_op_def(tpu_graph_node(r->graph, i)->op)->name, r->ctx->chip_index);
}

/* Runs a node as tpu_node_execute does, with its elementwise plan when
 * one was kept for it (`plan`: NULL, else made for a node equal to this
 * one but for addresses and, in row tiles, sizes: node_plans.c). */
static tpu_status_t run_node(const tpu_node_t* node, const tpu_ew_plan_t* plan,
                             tpu_exec_ctx_t* ctx) {
  if (!plan) return tpu_node_execute(node, ctx);
  const tpu_op_def_t* def = tpu_op_def(node->op);
  tpu_status_t s = tpu_ew_kernel_planned(def, node, plan);
  if (s != TPU_OK)
    return tpu_status_annotate(s, "in op '%s' on tpu:%d", def->name, ctx->chip_index);
  return TPU_OK;
}

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

/* Runs every node of the group on tile `index`; a node that fails records
 * its error and the next node runs (see the top). */
static void run_tile(tiled_run_t* r, int64_t index, const tile_t* tile, uint8_t* scratch) {
  const tpu_program_t* p = r->program;
  const tiling_t* t = &r->tiling;
  tpu_value_t inputs[MAX_NODE_INPUTS];
  tpu_view_t outputs[MAX_NODE_OUTPUTS];
  for (int32_t i = r->group->first; i < r->group->first + r->group->count; ++i) {
    const tpu_node_t* node = tpu_graph_node(r->graph, i);
    /* The node on the tile's views: its attributes copied, the unused ones
     * of the node's ~800 bytes not (a decode step's small groups run one
     * tile, and the copy was a good part of it). */
    tpu_node_t tn;
    tn.op = node->op;
    tn.num_inputs = node->num_inputs;
    tn.num_outputs = node->num_outputs;
    tn.num_attrs = node->num_attrs;
    memcpy(tn.attrs, node->attrs, sizeof(tpu_attr_t) * (size_t)node->num_attrs);
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
    /* A row tile keeps every operand's dims and dtype, so the node's plan
     * holds; a pointwise tile may give a 0-dim operand dims (slice_view),
     * which changes type promotion: its nodes plan for themselves. */
    const tpu_ew_plan_t* plan =
        r->group->kind == TPU_GROUP_ROWS ? tpu_node_plans_ew(r->plans, i) : NULL;
    tpu_status_t s = run_node(&tn, plan, r->ctx);
    if (s != TPU_OK) set_error(r, i, index, s);
  }
}

/* ---- the direct path ------------------------------------------------------------ */

/* Whether a memory operand is read (or written) in place by the direct
 * path: float32, at most `ndim` dims, unit stride along the last, whose
 * `n` elements it spans. */
static bool direct_view(int32_t ndim, int64_t n, const tpu_view_t* v) {
  return v->dtype == TPU_DTYPE_F32 && v->ndim >= 1 && v->ndim <= ndim &&
         v->sizes[v->ndim - 1] == n && v->strides[v->ndim - 1] == 1;
}

/* Fills d for node i (of any op) if the direct path can run it: a float32
 * elementwise op with one output, its memory operands (direct_view over
 * `ndim` dims and rows of `n`) read and written in place. Number inputs take
 * the number slots from *scalars on. */
static bool direct_node(const tpu_program_t* p, const tpu_graph_t* graph, int32_t i, int32_t ndim,
                        int64_t n, int32_t* scalars, direct_node_t* d) {
  const tpu_node_t* node = tpu_graph_node(graph, i);
  const tpu_op_def_t* def = tpu_op_def(node->op);
  if (def->kernel != tpu_ew_kernel || node->num_outputs != 1 ||
      node->num_inputs > TPU_EW_MAX_INPUTS)
    return false;
  tpu_ew_plan_t plan;
  const tpu_ew_plan_t* kept = tpu_node_plans_ew(tpu_node_plans_of(graph), i);
  tpu_status_t s = kept ? TPU_OK : tpu_ew_plan(def, node, &plan);
  if (s != TPU_OK) {
    tpu_status_free(s);
    return false;
  }
  if (kept) plan = *kept;
  if (plan.ct != TPU_COMPUTE_F32 || plan.common != TPU_DTYPE_F32 ||
      plan.result != TPU_DTYPE_F32 || plan.impl->bool_in ||
      (plan.impl->flags & TPU_EW_VALUE_0DIM) || !plan.fn)
    return false;
  if (p->out_slot[p->out_base[i]] < 0 && !direct_view(ndim, n, &node->outputs[0])) return false;
  d->fn = plan.fn;
  d->params = plan.params;
  d->nin = node->num_inputs;
  d->out_slot = p->out_slot[p->out_base[i]];
  for (int32_t k = 0; k < node->num_inputs; ++k) {
    const tpu_value_t* v = &node->inputs[k];
    d->src[k] = DIRECT_ABSENT;
    if (v->kind == TPU_VALUE_SCALAR) {
      uint64_t storage = 0;
      tpu_view_t one;
      tpu_value_to_view(v, TPU_DTYPE_F32, &storage, &one);
      memcpy(&d->scalar[k], tpu_view_ptr(&one), sizeof(float));
      d->src[k] = DIRECT_NUMBER;
      d->slot[k] = (*scalars)++;
    } else if (v->kind == TPU_VALUE_VIEW) {
      d->slot[k] = p->in_slot[p->in_base[i] + k];
      d->src[k] = d->slot[k] >= 0 ? DIRECT_SLOT : DIRECT_MEMORY;
      if (d->slot[k] < 0 && !direct_view(ndim, n, &v->u.view)) return false;
      /* Partial overlap with the output is an error the kernel reports. */
      if (tpu_views_may_overlap(&v->u.view, &node->outputs[0]) &&
          !tpu_fusion_same_view(&v->u.view, &node->outputs[0]))
        return false;
    } else if (v->kind != TPU_VALUE_NONE) {
      return false;
    }
  }
  return true;
}

/* Decides whether a tiled group takes the direct path, filling r->dn. */
static bool direct_plan(tiled_run_t* r) {
  const tiling_t* t = &r->tiling;
  if (t->ndim < 1 || t->sizes[t->ndim - 1] < DIRECT_MIN_ROW) return false;
  r->scalars = 0;
  for (int32_t i = r->group->first; i < r->group->first + r->group->count; ++i)
    if (!direct_node(r->program, r->graph, i, t->ndim, t->sizes[t->ndim - 1], &r->scalars,
                     &r->dn[i - r->group->first]))
      return false;
  return true;
}

/* Runs tile `index` on the direct path. `slots` holds the group's scratch
 * slots and then its number slots, DIRECT_STRIDE floats apart, then (when
 * streaming) a staging block. A node that fails on a block records its
 * error and the next node runs. */
static void run_tile_direct(tiled_run_t* r, int64_t index, const tile_t* tile, float* slots) {
  const tiling_t* t = &r->tiling;
  const int32_t first = r->group->first, count = r->group->count, last = t->ndim - 1;
  float* numbers = slots + (size_t)r->group->slots * DIRECT_STRIDE;
  float* stage = numbers + (size_t)r->scalars * DIRECT_STRIDE; /* r->stream: one block */
  /* Per node, the tile's part of each memory operand: its first element and
   * its strides over the tile's leading dims (the last dim has stride 1; a
   * broadcast dim, of size 1 in the operand, steps by 0 whatever stride the
   * view gives it: a [1, n] view of a vector keeps its row stride n). */
  typedef struct {
    char* base;
    int64_t strides[TPU_MAX_DIMS];
  } operand_t;
  operand_t in_m[TPU_FUSION_MAX_GROUP][TPU_EW_MAX_INPUTS], out_m[TPU_FUSION_MAX_GROUP];
  int64_t sizes[TPU_MAX_DIMS];
  for (int32_t i = 0; i < count; ++i) {
    const tpu_node_t* node = tpu_graph_node(r->graph, first + i);
    const direct_node_t* d = &r->dn[i];
    tpu_view_t v;
    slice_view(t, tile, &node->outputs[0], &v);
    if (i == 0) memcpy(sizes, v.sizes, sizeof(int64_t) * (size_t)t->ndim);
    out_m[i].base = tpu_view_ptr(&v);
    memcpy(out_m[i].strides, v.strides, sizeof(int64_t) * (size_t)t->ndim);
    for (int32_t k = 0; k < d->nin; ++k)
      if (d->src[k] == DIRECT_MEMORY) {
        slice_view(t, tile, &node->inputs[k].u.view, &v);
        in_m[i][k].base = tpu_view_ptr(&v);
        for (int32_t dd = 0; dd < t->ndim; ++dd)
          in_m[i][k].strides[dd] = v.sizes[dd] == 1 ? 0 : v.strides[dd];
      }
  }
  int64_t rows = 1, cols = sizes[last];
  for (int32_t d = 0; d < last; ++d) rows *= sizes[d];
  int64_t idx[TPU_MAX_DIMS] = {0};
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t c0 = 0; c0 < cols; c0 += DIRECT_BLOCK) {
      int64_t n = cols - c0 < DIRECT_BLOCK ? cols - c0 : DIRECT_BLOCK;
      for (int32_t i = 0; i < count; ++i) {
        const direct_node_t* d = &r->dn[i];
        const void* in[TPU_EW_MAX_INPUTS] = {0};
        for (int32_t k = 0; k < d->nin; ++k) {
          if (d->src[k] == DIRECT_SLOT || d->src[k] == DIRECT_NUMBER) {
            float* base = d->src[k] == DIRECT_SLOT ? slots : numbers;
            in[k] = base + (size_t)d->slot[k] * DIRECT_STRIDE;
          } else if (d->src[k] == DIRECT_MEMORY) {
            int64_t off = c0;
            for (int32_t dd = 0; dd < last; ++dd) off += idx[dd] * in_m[i][k].strides[dd];
            in[k] = (const float*)in_m[i][k].base + off;
          }
        }
        float *out, *mem = NULL;
        if (d->out_slot >= 0) {
          out = slots + (size_t)d->out_slot * DIRECT_STRIDE;
        } else {
          int64_t off = c0;
          for (int32_t dd = 0; dd < last; ++dd) off += idx[dd] * out_m[i].strides[dd];
          out = (float*)out_m[i].base + off;
          if (r->stream) {
            mem = out;
            out = stage;
          }
        }
        if (d->fn(out, in, n, &d->params)) /* recorded; the tile goes on */
          set_error(r, first + i, index, direct_error(r, first + i));
        if (mem) stream_floats(mem, stage, n);
      }
    }
    for (int32_t dd = last - 1; dd >= 0; --dd) { /* the next row of the tile */
      if (++idx[dd] < sizes[dd]) break;
      idx[dd] = 0;
    }
  }
}

/* ---- the direct path of row groups --------------------------------------------- */

/* Where v's rows start and how they step over the group's row dims (v
 * right-aligned to the group's shape; missing and size-1 dims broadcast). */
static void row_operand_init(const rows_plan_t* rp, const tpu_view_t* v, row_operand_t* out) {
  int32_t shift = rp->ndim + 1 - v->ndim;
  int64_t es = (int64_t)tpu_dtype_size(v->dtype);
  out->base = tpu_view_ptr(v);
  for (int32_t d = 0; d < rp->ndim; ++d) {
    int32_t j = d - shift;
    out->strides[d] = (j < 0 || v->sizes[j] == 1) ? 0 : v->strides[j] * es;
  }
}

static inline char* row_at(const row_operand_t* o, const int64_t* idx, int32_t ndim) {
  char* at = o->base;
  for (int32_t d = 0; d < ndim; ++d) at += idx[d] * o->strides[d];
  return at;
}

/* Whether a node of the group other than `self` writes memory v may share. */
static bool written_in_group(const tiled_run_t* r, int32_t self, const tpu_view_t* v) {
  for (int32_t j = r->group->first; j < r->group->first + r->group->count; ++j) {
    const tpu_node_t* node = tpu_graph_node(r->graph, j);
    for (int32_t o = 0; j != self && o < node->num_outputs; ++o)
      if (tpu_views_may_overlap(&node->outputs[o], v)) return true;
  }
  return false;
}

/* Whether a node of the group after `self` reads memory v may share. */
static bool read_later(const tiled_run_t* r, int32_t self, const tpu_view_t* v) {
  for (int32_t j = self + 1; j < r->group->first + r->group->count; ++j) {
    const tpu_node_t* node = tpu_graph_node(r->graph, j);
    for (int32_t k = 0; k < node->num_inputs; ++k)
      if (node->inputs[k].kind == TPU_VALUE_VIEW && tpu_views_may_overlap(&node->inputs[k].u.view, v))
        return true;
  }
  return false;
}

/* Whether a node of the group after `self` reads v (an output of self's
 * kept in scratch slot `slot`) from that slot. (Its memory may have been
 * handed to a later tensor already: addresses do not tell.) */
static bool slot_read_later(const tiled_run_t* r, int32_t self, int32_t slot, const tpu_view_t* v) {
  const tpu_program_t* p = r->program;
  for (int32_t j = self + 1; j < r->group->first + r->group->count; ++j) {
    const tpu_node_t* node = tpu_graph_node(r->graph, j);
    for (int32_t k = 0; k < node->num_inputs; ++k)
      if (node->inputs[k].kind == TPU_VALUE_VIEW && p->in_slot[p->in_base[j] + k] == slot &&
          tpu_fusion_same_view(&node->inputs[k].u.view, v))
        return true;
  }
  return false;
}

/* Plans norm node i of a row group (tpu_norm_row_plan matched it). */
static bool rows_norm(tiled_run_t* r, rows_plan_t* rp, int32_t i, rows_node_t* rn) {
  const tpu_program_t* p = r->program;
  const tpu_node_t* node = tpu_graph_node(r->graph, i);
  const tpu_view_t* y = &node->outputs[0];
  int32_t ndim = rp->ndim + 1;
  if (rn->nr.n != rp->n || node->num_inputs < 1 || node->inputs[0].kind != TPU_VALUE_VIEW)
    return false;
  const tpu_view_t* x = &node->inputs[0].u.view;
  rn->norm = true;
  rn->d.nin = 1;
  rn->d.slot[0] = p->in_slot[p->in_base[i]];
  rn->d.src[0] = rn->d.slot[0] >= 0 ? DIRECT_SLOT : DIRECT_MEMORY;
  if (rn->d.src[0] == DIRECT_MEMORY) {
    if (!direct_view(ndim, rp->n, x)) return false;
    row_operand_init(rp, x, &rn->in[0]);
  }
  /* Weight and bias: read whole by every row, so nothing in the group writes them. */
  for (int32_t k = 1; k < node->num_inputs; ++k)
    if (node->inputs[k].kind == TPU_VALUE_VIEW &&
        (p->in_slot[p->in_base[i] + k] >= 0 || written_in_group(r, -1, &node->inputs[k].u.view)))
      return false;
  rn->d.out_slot = p->out_slot[p->out_base[i]];
  if (rn->d.out_slot < 0) {
    if (!direct_view(ndim, rp->n, y)) return false;
    if (rn->d.src[0] == DIRECT_MEMORY && tpu_views_may_overlap(x, y) && !tpu_fusion_same_view(x, y))
      return false;
    row_operand_init(rp, y, &rn->out);
  }
  /* Mean (layer_norm) and rstd: written where they live in memory; never
   * read inside the group (the row function keeps them in registers). */
  for (int32_t o = 1; o < node->num_outputs; ++o) {
    const tpu_view_t* st = &node->outputs[o];
    if (tpu_view_is_absent(st)) continue;
    int32_t slot = p->out_slot[p->out_base[i] + o];
    if (slot >= 0) { /* dead: not written, unless a later node reads it from its slot */
      if (slot_read_later(r, i, slot, st)) return false;
      continue;
    }
    if (read_later(r, i, st)) return false;
    if (st->dtype != TPU_DTYPE_F32 || st->ndim != ndim || st->sizes[ndim - 1] != 1) return false;
    for (int32_t d = 0; d < rp->ndim; ++d)
      if (st->sizes[d] != rp->sizes[d]) return false;
    row_operand_init(rp, st, &rn->stat[rn->nr.rms || o == 2 ? 1 : 0]);
  }
  return true;
}

/* Decides whether a row group takes the direct path, filling *rp: rows of
 * its last dim only, every node a float32 norm (tpu_norm_row_plan) or a
 * direct elementwise op whose output has the group's shape. */
/* Whether a row group's shape allows the direct path (rows of its last dim
 * only, of DIRECT_MIN_ROW to ROWS_DIRECT_MAX elements): checked before a
 * plan is allocated, since a decode step's short rows never take it. */
static bool rows_direct_shape(const tiled_run_t* r) {
  const tpu_program_group_t* g = r->group;
  const tpu_view_t* lead = &tpu_graph_node(r->graph, g->first)->outputs[0];
  if (lead->ndim != g->rows + 1) return false;
  int64_t n = lead->sizes[lead->ndim - 1];
  return n >= DIRECT_MIN_ROW && n <= ROWS_DIRECT_MAX;
}

static bool rows_plan(tiled_run_t* r, rows_plan_t* rp) {
  const tpu_program_group_t* g = r->group;
  const tpu_view_t* lead = &tpu_graph_node(r->graph, g->first)->outputs[0];
  if (!rows_direct_shape(r)) return false;
  rp->ndim = g->rows;
  memcpy(rp->sizes, lead->sizes, sizeof(int64_t) * (size_t)lead->ndim);
  rp->n = lead->sizes[lead->ndim - 1];
  r->scalars = 0;
  for (int32_t i = g->first; i < g->first + g->count; ++i) {
    const tpu_node_t* node = tpu_graph_node(r->graph, i);
    rows_node_t* rn = &rp->nodes[i - g->first];
    memset(rn, 0, sizeof(*rn));
    const tpu_view_t* out = &node->outputs[0];
    if (out->ndim != lead->ndim ||
        memcmp(out->sizes, lead->sizes, sizeof(int64_t) * (size_t)lead->ndim) != 0)
      return false;
    if (tpu_norm_row_plan(tpu_op_def(node->op), node, &rn->nr)) {
      if (!rows_norm(r, rp, i, rn)) return false;
      continue;
    }
    if (!direct_node(r->program, r->graph, i, lead->ndim, rp->n, &r->scalars, &rn->d))
      return false;
    for (int32_t k = 0; k < rn->d.nin; ++k)
      if (rn->d.src[k] == DIRECT_MEMORY) row_operand_init(rp, &node->inputs[k].u.view, &rn->in[k]);
    if (rn->d.out_slot < 0) row_operand_init(rp, out, &rn->out);
  }
  return true;
}

/* Rows [begin, end) of a row group on the direct path: per row, each node
 * over the whole row; row-sized scratch slots (SLOT_PAD floats apart), then
 * number slots DIRECT_STRIDE floats apart, then (streaming) a staging row. */
static void run_rows_direct(void* arg, int64_t begin, int64_t end) {
  tiled_run_t* r = arg;
  const rows_plan_t* rp = r->rows;
  const int64_t n = rp->n;
  const int32_t count = r->group->count;
  const size_t stride = ((size_t)n + 15u) / 16u * 16u + SLOT_PAD; /* floats per slot */
  size_t slot_floats = (size_t)r->group->slots * stride;
  size_t stage_floats = r->stream ? (size_t)n : 0; /* one row, for streaming stores */
  size_t bytes =
      (slot_floats + (size_t)r->scalars * DIRECT_STRIDE + stage_floats) * sizeof(float);
  float* scratch = NULL;
  if (bytes) {
    scratch = aligned_alloc(SCRATCH_ALIGN, (bytes + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN);
    if (!scratch) {
      set_error(r, -1, begin,
                tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "fusion scratch allocation failed"));
      return;
    }
  }
  float* numbers = scratch ? scratch + slot_floats : NULL; /* no slots, no numbers: none */
  float* stage = r->stream ? scratch + slot_floats + (size_t)r->scalars * DIRECT_STRIDE : NULL;
  for (int32_t i = 0; i < count; ++i)
    for (int32_t k = 0; k < rp->nodes[i].d.nin; ++k)
      if (rp->nodes[i].d.src[k] == DIRECT_NUMBER)
        for (int32_t e = 0; e < DIRECT_BLOCK; ++e)
          numbers[(size_t)rp->nodes[i].d.slot[k] * DIRECT_STRIDE + e] = rp->nodes[i].d.scalar[k];
  int64_t idx[TPU_MAX_DIMS] = {0};
  for (int64_t rest = begin, d = rp->ndim - 1; d >= 0; --d) {
    idx[d] = rest % rp->sizes[d];
    rest /= rp->sizes[d];
  }
  for (int64_t row = begin; row < end; ++row) {
    for (int32_t i = 0; i < count; ++i) {
      const rows_node_t* rn = &rp->nodes[i];
      const direct_node_t* d = &rn->d;
      float* out = d->out_slot >= 0 ? scratch + (size_t)d->out_slot * stride
                                    : (float*)row_at(&rn->out, idx, rp->ndim);
      float* mem = NULL; /* streaming: the row's memory output, computed in stage */
      if (stage && d->out_slot < 0) {
        mem = out;
        out = stage;
      }
      const float* in[TPU_EW_MAX_INPUTS] = {0};
      for (int32_t k = 0; k < d->nin; ++k) {
        if (d->src[k] == DIRECT_SLOT) in[k] = scratch + (size_t)d->slot[k] * stride;
        else if (d->src[k] == DIRECT_NUMBER) in[k] = numbers + (size_t)d->slot[k] * DIRECT_STRIDE;
        else if (d->src[k] == DIRECT_MEMORY) in[k] = (const float*)row_at(&rn->in[k], idx, rp->ndim);
      }
      if (rn->norm) {
        double mean, rstd;
        tpu_norm_row_f32(&rn->nr, in[0], out, &mean, &rstd);
        if (rn->stat[0].base) *(float*)row_at(&rn->stat[0], idx, rp->ndim) = (float)mean;
        if (rn->stat[1].base) *(float*)row_at(&rn->stat[1], idx, rp->ndim) = (float)rstd;
        if (mem) stream_floats(mem, stage, n);
        continue;
      }
      for (int64_t c0 = 0; c0 < n; c0 += DIRECT_BLOCK) {
        int64_t len = n - c0 < DIRECT_BLOCK ? n - c0 : DIRECT_BLOCK;
        const void* block[TPU_EW_MAX_INPUTS];
        for (int32_t k = 0; k < d->nin; ++k)
          block[k] = !in[k] || d->src[k] == DIRECT_NUMBER ? (const void*)in[k] : in[k] + c0;
        if (d->fn(out + c0, block, len, &d->params)) /* recorded; the row goes on */
          set_error(r, r->group->first + i, row, direct_error(r, r->group->first + i));
      }
      if (mem) stream_floats(mem, stage, n);
    }
    for (int32_t d = rp->ndim - 1; d >= 0; --d) { /* the next row */
      if (++idx[d] < rp->sizes[d]) break;
      idx[d] = 0;
    }
  }
  if (stage) stream_fence();
  free(scratch);
}

/* Scratch up to this size lives on the stack of the thread running the
 * tiles: a decode step's small groups need about a kilobyte, just above
 * what malloc serves from its per-thread cache, and a malloc and free of
 * it cost more than the group's arithmetic. */
#define STACK_SCRATCH 8192

static void run_tiles(void* arg, int64_t begin, int64_t end) {
  tiled_run_t* r = arg;
  _Alignas(SCRATCH_ALIGN) uint8_t local[STACK_SCRATCH];
  uint8_t* scratch = NULL;
  size_t bytes = r->direct ? (size_t)(r->group->slots + r->scalars + (r->stream ? 1 : 0)) *
                                 DIRECT_STRIDE * sizeof(float)
                           : (size_t)r->group->slots * (size_t)r->slot_bytes;
  if (bytes) {
    scratch = bytes <= sizeof(local) ? local : malloc(bytes);
    if (!scratch) {
      set_error(r, -1, begin,
                tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "fusion scratch allocation failed"));
      return;
    }
  }
  if (r->direct) { /* the number slots, filled once */
    float* numbers = (float*)scratch + (size_t)r->group->slots * DIRECT_STRIDE;
    for (int32_t i = 0; i < r->group->count; ++i)
      for (int32_t k = 0; k < r->dn[i].nin; ++k)
        if (r->dn[i].src[k] == DIRECT_NUMBER)
          for (int32_t e = 0; e < DIRECT_BLOCK; ++e)
            numbers[(size_t)r->dn[i].slot[k] * DIRECT_STRIDE + e] = r->dn[i].scalar[k];
  }
  for (int64_t i = begin; i < end; ++i) { /* every tile, failing or not */
    tile_t tile;
    tile_at(&r->tiling, i, &tile);
    if (r->direct) run_tile_direct(r, i, &tile, (float*)scratch);
    else run_tile(r, i, &tile, scratch);
  }
  if (r->stream) stream_fence();
  if (scratch != local) free(scratch);
}

/* The bytes of the group's operands in memory (not in scratch slots), each
 * operand counted once per node that reads or writes it. */
static int64_t group_memory_bytes(const tiled_run_t* r) {
  const tpu_program_t* p = r->program;
  int64_t bytes = 0;
  for (int32_t i = r->group->first; i < r->group->first + r->group->count; ++i) {
    const tpu_node_t* node = tpu_graph_node(r->graph, i);
    for (int32_t o = 0; o < node->num_outputs; ++o)
      if (p->out_slot[p->out_base[i] + o] < 0 && !tpu_view_is_absent(&node->outputs[o]))
        bytes += tpu_view_numel(&node->outputs[o]) * (int64_t)tpu_dtype_size(node->outputs[o].dtype);
    for (int32_t k = 0; k < node->num_inputs; ++k)
      if (node->inputs[k].kind == TPU_VALUE_VIEW && p->in_slot[p->in_base[i] + k] < 0)
        bytes += tpu_view_numel(&node->inputs[k].u.view) *
                 (int64_t)tpu_dtype_size(node->inputs[k].u.view.dtype);
  }
  return bytes;
}

/* Runs a tiled or row-tiled group over every tile (or row): r holds the
 * program, the group, the graph and the context, its error fields are
 * and r->err is initialised. The group's error stays in r->err. */
static void run_fused(tiled_run_t* r) {
  const tpu_program_group_t* grp = r->group;
  const tpu_graph_t* graph = r->graph;
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
      uint32_t* mask = &r->row_inputs[i - grp->first];
      *mask = 0;
      if (!(def->flags & TPU_OP_POINTWISE) && !tpu_node_plans_rows(r->plans, i, mask))
        def->rows(def, node, mask);
    }
    /* Without memory for a row plan the group takes the node-by-node path. */
    rows_plan_t* rp =
        direct_enabled() && nrows > 0 && rows_direct_shape(r) ? malloc(sizeof(*rp)) : NULL;
    bool direct = rp && rows_plan(r, rp);
    if (direct) {
      r->rows = rp;
      r->stream = group_memory_bytes(r) > stream_min_bytes();
      if (r->stream) atomic_fetch_add_explicit(&g_streamed, 1, memory_order_relaxed);
      tpu_parallel_for(nrows, TILE_ELEMENTS / rp->n > 0 ? TILE_ELEMENTS / rp->n : 1,
                       run_rows_direct, r);
      r->rows = NULL;
    }
    free(rp);
    if (direct) {
      atomic_fetch_add_explicit(&g_direct_rows, 1, memory_order_relaxed);
      return;
    }
    tiling_init(lead->outputs[0].sizes, grp->rows, widest, &r->tiling);
    int64_t rows_per_tile = r->tiling.split < 0 ? nrows : r->tiling.chunk;
    for (int32_t d = r->tiling.split + 1; d < grp->rows && r->tiling.split >= 0; ++d)
      rows_per_tile *= lead->outputs[0].sizes[d];
    r->slot_bytes = rows_per_tile * widest * 8;
  } else {
    tiling_init(lead->outputs[0].sizes, lead->outputs[0].ndim, 1, &r->tiling);
    r->slot_bytes = TILE_ELEMENTS * 8;
    r->direct = direct_enabled() && direct_plan(r);
    r->stream = r->direct && group_memory_bytes(r) > stream_min_bytes();
    if (r->stream) atomic_fetch_add_explicit(&g_streamed, 1, memory_order_relaxed);
  }
  atomic_fetch_add_explicit(r->direct ? &g_direct_tiled : &g_node_by_node, 1,
                            memory_order_relaxed);
  tpu_parallel_for(r->tiling.tiles, 1, run_tiles, r);
}


void tpu_fusion_get_path_counts(tpu_fusion_path_counts_t* out_counts) {
  out_counts->direct_tiled = atomic_load_explicit(&g_direct_tiled, memory_order_relaxed);
  out_counts->direct_rows = atomic_load_explicit(&g_direct_rows, memory_order_relaxed);
  out_counts->node_by_node = atomic_load_explicit(&g_node_by_node, memory_order_relaxed);
  out_counts->streamed = atomic_load_explicit(&g_streamed, memory_order_relaxed);
}

/* Keeps the first error of a run in *first and frees the later ones. */
static void keep_first(tpu_status_t* first, tpu_status_t s) {
  if (*first == TPU_OK) *first = s;
  else tpu_status_free(s);
}

tpu_status_t tpu_program_run(const tpu_program_t* p, const tpu_graph_t* graph,
                             tpu_exec_ctx_t* ctx) {
  tpu_status_t first = TPU_OK;
  if (!p) { /* strict eager's graphs: node by node */
    int32_t n = tpu_graph_node_count(graph);
    for (int32_t i = 0; i < n; ++i) {
      int64_t t0 = ctx->profile ? tpu_profiler_now_ns() : 0;
      keep_first(&first, tpu_node_execute(tpu_graph_node(graph, i), ctx));
      if (ctx->profile) tpu_prof_record_nodes(ctx, graph, i, 1, false, t0, tpu_profiler_now_ns());
    }
    return first;
  }
  const tpu_node_plans_t* plans = tpu_node_plans_of(graph); /* a memo hit's */
  for (int32_t g = 0; g < p->group_count; ++g) {
    const tpu_program_group_t* grp = &p->groups[g];
    int64_t t0 = ctx->profile ? tpu_profiler_now_ns() : 0;
    if (grp->kind == TPU_GROUP_SINGLE) {
      for (int32_t i = grp->first; i < grp->first + grp->count; ++i) {
        keep_first(&first, run_node(tpu_graph_node(graph, i), tpu_node_plans_ew(plans, i), ctx));
        if (ctx->profile) {
          int64_t t1 = tpu_profiler_now_ns();
          tpu_prof_record_nodes(ctx, graph, i, 1, false, t0, t1);
          t0 = t1;
        }
      }
      continue;
    }
    if (grp->kind == TPU_GROUP_GEMM) {
      keep_first(&first, tpu_fusion_run_gemm_group(p, grp, graph, ctx));
      if (ctx->profile)
        tpu_prof_record_nodes(ctx, graph, grp->first, grp->count, true, t0, tpu_profiler_now_ns());
      continue;
    }
    bool fits = true; /* the compiler never groups such nodes */
    for (int32_t i = grp->first; i < grp->first + grp->count && fits; ++i) {
      const tpu_node_t* node = tpu_graph_node(graph, i);
      if (node->num_inputs > MAX_NODE_INPUTS || node->num_outputs > MAX_NODE_OUTPUTS) {
        keep_first(&first, tpu_status_make(TPU_CODE_INTERNAL,
                                           "fusion: node %d has too many operands", i));
        fits = false;
      }
    }
    if (!fits) continue;
    /* Not zero-initialised as a whole: dn[] and row_inputs[] (about 9 KB)
     * are written for the group's nodes before they are read, and clearing
     * them cost more than a decode step's small group runs. */
    tiled_run_t r;
    r.program = p;
    r.group = grp;
    r.graph = graph;
    r.plans = plans;
    r.ctx = ctx;
    memset(&r.tiling, 0, sizeof(r.tiling));
    r.slot_bytes = 0;
    r.direct = false;
    r.stream = false;
    r.rows = NULL;
    r.scalars = 0;
    tpu_group_error_init(&r.err);
    run_fused(&r);
    keep_first(&first, tpu_group_error_finish(&r.err));
    if (ctx->profile)
      tpu_prof_record_nodes(ctx, graph, grp->first, grp->count, true, t0, tpu_profiler_now_ns());
  }
  return first;
}
