/* defer.c — deferred execution: pending graphs per stream, flushes, metrics
 * and the cut log (see tpu/defer.h). */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu/config.h"
#include "fusion/extent.h"
#include "fusion/fusion.h"
#include "hal/host_driver.h"
#include "stream/internal.h"
#include "tpu/defer.h"
#include "tpu/profiler.h"
#include "tpu/ops.h"

static const char* const g_reason_names[] = {
#define TPU_FLUSH_NAME(e, s) s,
    TPU_FLUSH_REASONS(TPU_FLUSH_NAME)
#undef TPU_FLUSH_NAME
};

const char* tpu_flush_reason_name(tpu_flush_reason_t reason) {
  return (unsigned)reason < TPU_FLUSH_REASON_COUNT ? g_reason_names[reason] : "unknown";
}

/* ---- mode ---------------------------------------------------------------------- */

static atomic_int g_global = -1; /* -1: not read from the environment yet */
static atomic_int g_max_nodes = 0;
static _Thread_local int t_mode = -1;

static bool global_mode(void) {
  int g = atomic_load(&g_global);
  if (g < 0) {
    int want = tpu_config_bool(TPU_CONFIG_DEFER_AND_FUSE); /* a setting made meanwhile wins */
    atomic_compare_exchange_strong(&g_global, &g, want);
    g = atomic_load(&g_global);
  }
  return g == 1;
}

void tpu_defer_set_global(bool on) { atomic_store(&g_global, on ? 1 : 0); }
void tpu_defer_set_thread(int mode) { t_mode = mode < 0 ? -1 : mode ? 1 : 0; }
bool tpu_defer_active(void) { return t_mode >= 0 ? t_mode == 1 : global_mode(); }

void tpu_defer_set_max_nodes(int32_t max_nodes) { atomic_store(&g_max_nodes, max_nodes); }
void tpu_defer_set_gemm_epilogues(bool on) { tpu_fusion_set_epilogues(on); }
bool tpu_defer_gemm_epilogues(void) { return tpu_fusion_epilogues_enabled(); }

static int32_t max_nodes(void) {
  int32_t m = atomic_load(&g_max_nodes);
  return m > 0 ? m : (int32_t)tpu_config_int(TPU_CONFIG_DEFER_MAX_NODES);
}

/* Pipeline cuts after heavy nodes: on unless TORCH_TPU_DEFER_PIPELINE=0. */
static bool pipeline(void) { return tpu_config_bool(TPU_CONFIG_DEFER_PIPELINE); }

/* Phase 0 of the fusion compiler: on unless TORCH_TPU_DEFER_SCHEDULE=0. */
static bool schedule(void) { return tpu_config_bool(TPU_CONFIG_DEFER_SCHEDULE); }

static int log_level(void) { return (int)tpu_config_int(TPU_CONFIG_DEFER_LOG); }

/* ---- metrics and the cut log ---------------------------------------------------- */

static struct {
  pthread_mutex_t mu;
  tpu_defer_metrics_t m;
  tpu_defer_cut_t cuts[TPU_DEFER_CUT_LOG];
  int64_t cut_count;
} g_stats = {.mu = PTHREAD_MUTEX_INITIALIZER};
/* m.nodes_recorded lives here instead: it is bumped for every recorded
 * node, and a lock round trip per node was a tenth of recording one. */
static _Atomic int64_t g_nodes_recorded;

void tpu_defer_get_metrics(tpu_defer_metrics_t* out) {
  pthread_mutex_lock(&g_stats.mu);
  *out = g_stats.m;
  out->nodes_recorded = atomic_load_explicit(&g_nodes_recorded, memory_order_relaxed);
  pthread_mutex_unlock(&g_stats.mu);
}

void tpu_defer_reset_metrics(void) {
  pthread_mutex_lock(&g_stats.mu);
  memset(&g_stats.m, 0, sizeof(g_stats.m));
  atomic_store_explicit(&g_nodes_recorded, 0, memory_order_relaxed);
  g_stats.cut_count = 0;
  pthread_mutex_unlock(&g_stats.mu);
}

int32_t tpu_defer_get_cuts(tpu_defer_cut_t* out, int32_t capacity) {
  pthread_mutex_lock(&g_stats.mu);
  int64_t have = g_stats.cut_count < TPU_DEFER_CUT_LOG ? g_stats.cut_count : TPU_DEFER_CUT_LOG;
  int32_t n = have < capacity ? (int32_t)have : capacity;
  int64_t start = g_stats.cut_count - have;
  for (int32_t i = 0; i < n; ++i) out[i] = g_stats.cuts[(start + i) % TPU_DEFER_CUT_LOG];
  pthread_mutex_unlock(&g_stats.mu);
  return n;
}

/* ---- recording ------------------------------------------------------------------- */

/* How much memory heavy nodes touch before a pipeline cut follows one:
 * 256 Ki elements (1 MiB of float32), some tens of microseconds of device
 * work, against a flush's few microseconds of host and queue time. */
#define PIPELINE_MIN_ELEMENTS (INT64_C(1) << 18)

/* The elements a node reads and writes (its views' sizes). */
static int64_t node_elements(const tpu_node_t* node) {
  int64_t total = 0;
  for (int32_t o = 0; o < node->num_outputs; ++o) total += tpu_view_numel(&node->outputs[o]);
  for (int32_t k = 0; k < node->num_inputs; ++k)
    if (node->inputs[k].kind == TPU_VALUE_VIEW) total += tpu_view_numel(&node->inputs[k].u.view);
  return total;
}

static tpu_status_t flush_locked(tpu_stream_t* stream, tpu_flush_reason_t reason,
                                 const char* detail, bool host_waits);

/* A pipeline cut due after a GEMM that takes an epilogue (TPU_OP_EPILOGUE)
 * waits for up to this many pointwise nodes, so that its bias, activation
 * or residual add are in the GEMM's graph and the fusion compiler can fold
 * them into it; the first other node is cut before. */
#define EPILOGUE_WINDOW 16

static bool is_pointwise(const tpu_node_t* node) {
  return (tpu_op_def(node->op)->flags & TPU_OP_POINTWISE) != 0;
}

/* Before `first` (borrowed), the first of the nodes about to be recorded: a
 * waiting pipeline cut happens now unless it is pointwise. The caller holds
 * pd->mu. */
static tpu_status_t recording_locked(tpu_stream_t* stream, const tpu_node_t* first) {
  tpu_pending_t* pd = &stream->pending;
  if (pd->epilogue_window > 0 && first && !is_pointwise(first) && pd->graph &&
      tpu_graph_node_count(pd->graph) > 0)
    return flush_locked(stream, TPU_FLUSH_PIPELINE, NULL, false);
  return TPU_OK;
}

/* The cuts recording `n` nodes (the last one `last`, borrowed) makes; the
 * caller holds pd->mu. */
static tpu_status_t recorded_locked(tpu_stream_t* stream, int32_t n, const tpu_node_t* last) {
  tpu_pending_t* pd = &stream->pending;
  atomic_fetch_add_explicit(&g_nodes_recorded, n, memory_order_relaxed);
  /* Cut after a heavy node: it starts running, with what was recorded
   * before it, while the program records on; but only once the heavy
   * nodes since the last cut touched PIPELINE_MIN_ELEMENTS (a function of
   * the shapes, so every rank still cuts alike): a decode step's small
   * GEMMs would cost a flush each (schedule, key, submit) for a few
   * microseconds of device work. */
  uint32_t flags = last ? tpu_op_def(last->op)->flags : 0;
  bool heavy = (flags & TPU_OP_HEAVY) != 0;
  if (heavy) pd->heavy_elements += node_elements(last);
  if (pd->epilogue_window > 0 && --pd->epilogue_window == 0)
    return flush_locked(stream, TPU_FLUSH_PIPELINE, NULL, false);
  if (heavy && pipeline() && pd->heavy_elements >= PIPELINE_MIN_ELEMENTS) {
    if ((flags & TPU_OP_EPILOGUE) && tpu_fusion_epilogues_enabled()) {
      pd->epilogue_window = EPILOGUE_WINDOW;
      return TPU_OK;
    }
    return flush_locked(stream, TPU_FLUSH_PIPELINE, NULL, false);
  }
  if (tpu_graph_node_count(pd->graph) >= max_nodes())
    return flush_locked(stream, TPU_FLUSH_SIZE_LIMIT, NULL, false);
  return TPU_OK;
}

/* A pending graph for the stream, with the room the last one took: a
 * program records alike flush after flush, so its nodes are appended
 * without the arrays moving, into the arrays of a graph an earlier flush
 * ran and released (ir.c keeps them). The caller holds pd->mu. */
static tpu_status_t open_pending_locked(tpu_pending_t* pd) {
  if (pd->graph) return TPU_OK;
  return tpu_graph_create_reserved(pd->last_nodes, pd->last_inputs, pd->last_outputs, &pd->graph);
}

tpu_status_t tpu_defer_record(tpu_stream_t* stream, tpu_graph_t* graph) {
  tpu_pending_t* pd = &stream->pending;
  pthread_mutex_lock(&pd->mu);
  tpu_status_t s = TPU_OK;
  int32_t n = tpu_graph_node_count(graph);
  s = recording_locked(stream, n > 0 ? tpu_graph_node(graph, 0) : NULL);
  if (s == TPU_OK) s = open_pending_locked(pd);
  if (s == TPU_OK && atomic_load(&pd->capturing)) tpu_capture_note_record_locked(stream, graph);
  for (int32_t i = 0; i < n && s == TPU_OK; ++i)
    s = tpu_graph_append_from(pd->graph, graph, i);
  if (s == TPU_OK) s = recorded_locked(stream, n, n > 0 ? tpu_graph_node(graph, n - 1) : NULL);
  pthread_mutex_unlock(&pd->mu);
  tpu_graph_release(graph);
  return s;
}

tpu_status_t tpu_defer_record_node(tpu_stream_t* stream, const tpu_node_t* node) {
  tpu_pending_t* pd = &stream->pending;
  pthread_mutex_lock(&pd->mu);
  tpu_status_t s = recording_locked(stream, node);
  if (s == TPU_OK) s = open_pending_locked(pd);
  if (s == TPU_OK && atomic_load(&pd->capturing)) { /* a capture notes graphs: this one's */
    tpu_graph_t* one = NULL;
    s = tpu_graph_from_node(node, &one);
    if (s == TPU_OK) tpu_capture_note_record_locked(stream, one);
    tpu_graph_release(one);
  }
  if (s == TPU_OK) s = tpu_graph_append(pd->graph, node);
  if (s == TPU_OK) s = recorded_locked(stream, 1, node);
  pthread_mutex_unlock(&pd->mu);
  return s;
}

bool tpu_defer_pending(tpu_stream_t* stream) {
  pthread_mutex_lock(&stream->pending.mu);
  bool any = stream->pending.graph != NULL;
  pthread_mutex_unlock(&stream->pending.mu);
  return any;
}

void tpu_defer_note_free_locked(tpu_stream_t* stream, uint64_t addr, uint64_t size,
                                bool provisional) {
  tpu_pending_t* pd = &stream->pending;
  if (!pd->graph) return;
  if (pd->free_count == pd->free_capacity) {
    int32_t cap = pd->free_capacity ? pd->free_capacity * 2 : 64;
    tpu_free_record_t* f = realloc(pd->frees, sizeof(*f) * (size_t)cap);
    if (f) {
      pd->frees = f;
      pd->free_capacity = cap;
    }
  }
  /* Without room the buffer just stays "alive": it is then written, which
   * is always correct. */
  if (pd->free_count < pd->free_capacity)
    pd->frees[pd->free_count++] =
        (tpu_free_record_t){addr, addr + size, tpu_graph_node_count(pd->graph), provisional};
}

/* ---- flushing ------------------------------------------------------------------------- */

/* The program's writes to memory (outputs whose value does not live in
 * scratch), by address and then node: the first node in [start, end) that
 * writes into a range is found among that range's writes alone. */
typedef struct mem_write {
  uint64_t addr;
  int32_t node;
} mem_write_t;

static int cmp_write(const void* a, const void* b) {
  const mem_write_t *x = a, *y = b;
  if (x->addr != y->addr) return x->addr < y->addr ? -1 : 1;
  return (x->node > y->node) - (x->node < y->node);
}

static int32_t first_write(const mem_write_t* w, int32_t count, uint64_t lo, uint64_t hi,
                           int32_t start, int32_t end) {
  int32_t a = 0, b = count;
  while (a < b) {
    int32_t mid = a + (b - a) / 2;
    if (w[mid].addr >= lo) b = mid; else a = mid + 1;
  }
  int32_t first = -1;
  for (int32_t k = a; k < count && w[k].addr < hi; ++k)
    if (w[k].node >= start && w[k].node < end && (first < 0 || w[k].node < first))
      first = w[k].node;
  return first;
}

/* The most device memory the program holds, while it runs, on top of what
 * was counted before the flush: buffers counted earlier but freed before the
 * flush stay until their free point; provisional ones occupy memory from the
 * first node that writes them (never, if their value lives in scratch) to
 * their free point, or to the end when they stay alive. A tenant of a range
 * was allocated after the earlier tenants of that range were freed, so its
 * first write is looked for only after their free points: the range-max tree
 * keeps, per byte, the latest free point seen so far (for a buffer still
 * alive at the end, every free of the graph has been seen). */
static tpu_status_t peak_extra(const tpu_graph_t* graph, const tpu_program_t* p,
                               const tpu_free_record_t* frees, int32_t free_count,
                               const uint64_t* live_addr, const uint64_t* live_size,
                               int32_t live, int64_t* out_peak) {
  int32_t n = tpu_graph_node_count(graph);
  int64_t* diff = calloc((size_t)n + 2, sizeof(int64_t));
  mem_write_t* writes = malloc(sizeof(mem_write_t) * ((size_t)p->out_base[n] + 1));
  tpu_extent_t* ranges = NULL; /* the frees' ranges, then the live buffers' */
  tpu_range_max_t freed = {0};
  int64_t peak = 0;
  tpu_status_t rs = TPU_OK;
  ranges = malloc(sizeof(tpu_extent_t) * ((size_t)free_count + (size_t)live + 1));
  if (!diff || !writes || !ranges) {
    rs = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "flush: the memory estimate's allocation failed");
    goto done;
  }
  int32_t nw = 0;
  for (int32_t i = 0; i < n; ++i) {
    const tpu_node_t* node = tpu_graph_node(graph, i);
    for (int32_t o = 0; o < node->num_outputs; ++o)
      if (p->out_slot[p->out_base[i] + o] < 0)
        writes[nw++] = (mem_write_t){node->outputs[o].addr, i};
  }
  qsort(writes, (size_t)nw, sizeof(mem_write_t), cmp_write);
  for (int32_t f = 0; f < free_count; ++f) ranges[f] = (tpu_extent_t){frees[f].lo, frees[f].hi};
  for (int32_t b = 0; b < live; ++b)
    ranges[free_count + b] = (tpu_extent_t){live_addr[b], live_addr[b] + live_size[b]};
  rs = tpu_range_max_init(&freed, ranges, free_count + live, 0);
  if (rs != TPU_OK) goto done;
  for (int32_t f = 0; f < free_count; ++f) {
    int32_t end = frees[f].point < n ? frees[f].point : n;
    int32_t start = tpu_range_max_query(&freed, ranges[f]);
    tpu_range_max_mark(&freed, ranges[f], frees[f].point);
    int32_t first = frees[f].provisional
                        ? first_write(writes, nw, frees[f].lo, frees[f].hi, start, end)
                        : 0;
    if (first < 0) continue;
    diff[first] += (int64_t)(frees[f].hi - frees[f].lo);
    diff[end] -= (int64_t)(frees[f].hi - frees[f].lo);
  }
  for (int32_t b = 0; b < live; ++b) {
    int32_t start = tpu_range_max_query(&freed, ranges[free_count + b]);
    int32_t first = first_write(writes, nw, live_addr[b], live_addr[b] + live_size[b], start, n);
    diff[first < 0 ? n : first] += (int64_t)live_size[b];
  }
  int64_t level = 0;
  for (int32_t i = 0; i <= n; ++i) {
    level += diff[i];
    if (level > peak) peak = level;
  }
done:
  tpu_range_max_release(&freed);
  free(diff);
  free(writes);
  free(ranges);
  *out_peak = peak;
  return rs;
}

static _Thread_local bool t_in_flush;

bool tpu_defer_in_flush(void) { return t_in_flush; }

/* Memo hits checked against the full front end: TORCH_TPU_DEFER_MEMO_CHECK set
 * and not "0" (the test command's DEFER_AND_FUSE pass sets it to 1). */
static bool memo_check(void) { return tpu_config_bool(TPU_CONFIG_DEFER_MEMO_CHECK); }

/* Phases 0 and 1, the program cache and the memory estimate for a flushed
 * recording (*graph; its free records are the stream's pending ones, `live`
 * provisional blocks in the memo's arrays). Phase 0 may replace *graph by
 * the reordered graph; then *out_moved is set and `order` (room for one
 * entry per node, or NULL) receives the order. */
static tpu_status_t compile_recording(tpu_stream_t* stream, tpu_graph_t** graph,
                                      int32_t free_count, int32_t live, int32_t* order,
                                      bool* out_moved, tpu_program_t** out_program,
                                      bool* out_hit, int64_t* out_extra) {
  tpu_pending_t* pd = &stream->pending;
  tpu_graph_t* scheduled = NULL;
  tpu_status_t s = schedule() ? tpu_fusion_schedule(*graph, pd->frees, free_count, &scheduled,
                                                    order)
                              : TPU_OK;
  *out_moved = scheduled != NULL;
  if (scheduled) {
    tpu_graph_release(*graph);
    *graph = scheduled;
  }
  tpu_fusion_analysis_t* analysis = NULL;
  if (s == TPU_OK) s = tpu_fusion_analyse(*graph, pd->frees, free_count, &analysis);
  if (s == TPU_OK) s = tpu_program_cache_get(*graph, analysis, out_program, out_hit);
  tpu_fusion_analysis_free(analysis);
  if (s == TPU_OK)
    s = peak_extra(*graph, *out_program, pd->frees, free_count, pd->memo.live_addr,
                   pd->memo.live_size, live, out_extra);
  if (s != TPU_OK) {
    tpu_program_release(*out_program); /* NULL when the cache failed */
    *out_program = NULL;
  }
  return s;
}

/* A memo hit against the front end run in full on a copy of the recording
 * (memo_check): the same order, program structure, estimate and node
 * plans (those of the copy, in the program's order), or an
 * INTERNAL error naming what differs. The hit is then used as without the
 * check, so the check runs the reuse path too. */
static tpu_status_t check_repeat(tpu_stream_t* stream, const tpu_flush_memo_entry_t* seen,
                                 const tpu_graph_t* graph, int32_t free_count, int32_t live) {
  int32_t n = tpu_graph_node_count(graph);
  int32_t* order = malloc(sizeof(int32_t) * ((size_t)n + 1));
  tpu_graph_t* copy = NULL;
  tpu_status_t s = order ? tpu_graph_create(&copy)
                         : tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "flush allocation failed");
  for (int32_t i = 0; s == TPU_OK && i < n; ++i) s = tpu_graph_append_from(copy, graph, i);
  bool moved = false, hit = false;
  int64_t extra = 0;
  tpu_program_t* program = NULL;
  if (s == TPU_OK)
    s = compile_recording(stream, &copy, free_count, live, order, &moved, &program, &hit, &extra);
  if (s == TPU_OK) {
    const char* differs =
        moved != (seen->order != NULL) ||
                (moved && memcmp(order, seen->order, sizeof(int32_t) * (size_t)n) != 0)
            ? "node order"
        : program->hash != seen->program->hash ? "program"
        : extra != seen->extra                 ? "memory estimate"
        : tpu_node_plans_check(seen->plans, copy) >= 0 ? "node plan"
                                               : NULL;
    if (differs)
      s = tpu_status_make(TPU_CODE_INTERNAL,
                          "flush memo: a repeated recording (%d nodes) compiled to another %s",
                          n, differs);
  }
  tpu_program_release(program);
  tpu_graph_release(copy);
  free(order);
  return s;
}

/* Reads the stream's live provisional blocks, all of them, into its memo's
 * arrays (grown as needed); *out_live: how many. */
static tpu_status_t read_live_blocks(tpu_stream_t* stream, int32_t* out_live) {
  tpu_flush_memo_t* memo = &stream->pending.memo;
  for (;;) {
    int32_t live = tpu_allocator_provisional(stream->chip->allocator, stream->index,
                                             memo->live_addr, memo->live_size, memo->live_cap);
    if (live <= memo->live_cap) {
      *out_live = live;
      return TPU_OK;
    }
    int32_t cap = memo->live_cap ? memo->live_cap : 256;
    while (cap < live) cap = cap > INT32_MAX / 2 ? INT32_MAX : cap * 2;
    uint64_t* addr = realloc(memo->live_addr, sizeof(uint64_t) * (size_t)cap);
    if (addr) memo->live_addr = addr;
    uint64_t* size = addr ? realloc(memo->live_size, sizeof(uint64_t) * (size_t)cap) : NULL;
    if (size) memo->live_size = size;
    if (!addr || !size)
      return tpu_status_make(TPU_CODE_OUT_OF_MEMORY,
                             "flush: no room to list the %d live deferred blocks", live);
    memo->live_cap = cap;
  }
}

/* The compiler's front end for a flushed recording: compile_recording, or,
 * when the stream flushed the same recording before, what it gave then
 * (*out_repeat; *out_fast when found by the raw signature: flush_memo.c). */
static tpu_status_t front_end(tpu_stream_t* stream, tpu_graph_t** graph, int32_t free_count,
                              tpu_program_t** out_program, bool* out_hit, bool* out_repeat,
                              bool* out_fast, int64_t* out_extra) {
  tpu_pending_t* pd = &stream->pending;
  tpu_flush_memo_t* memo = &pd->memo;
  int32_t n = tpu_graph_node_count(*graph);
  int32_t live = 0;
  TPU_RETURN_IF_ERROR(read_live_blocks(stream, &live));
  bool memo_on = !atomic_load(&pd->capturing); /* a capture notes its own graphs */
  uint64_t settings = (uint64_t)schedule() | (uint64_t)tpu_fusion_epilogues_enabled() << 1;
  const tpu_flush_memo_entry_t* seen =
      memo_on ? tpu_flush_memo_lookup(memo, *graph, pd->frees, free_count, memo->live_addr,
                                      memo->live_size, live, settings, out_fast)
              : NULL;
  if (seen) {
    *out_repeat = true;
    if (memo_check()) TPU_RETURN_IF_ERROR(check_repeat(stream, seen, *graph, free_count, live));
    if (seen->order) TPU_RETURN_IF_ERROR(tpu_graph_permute(*graph, seen->order));
    /* Made for a recording equal to this one but for addresses, in the
     * program's order: the repeat's run skips the kernels' planning. */
    tpu_node_plans_attach(*graph, seen->plans);
    tpu_program_retain(seen->program);
    tpu_program_cache_note_read(seen->program);
    *out_program = seen->program;
    *out_hit = true;
    *out_extra = seen->extra;
    return TPU_OK;
  }
  int32_t* order = schedule() ? malloc(sizeof(int32_t) * ((size_t)n + 1)) : NULL;
  bool moved = false;
  tpu_status_t s = compile_recording(stream, graph, free_count, live, order, &moved,
                                     out_program, out_hit, out_extra);
  /* without the order (out of memory) a repeat could not be replayed */
  if (s == TPU_OK && memo_on && (!schedule() || order))
    tpu_flush_memo_store(memo, moved ? order : NULL, n, *out_program,
                         tpu_node_plans_make(*graph), *out_extra);
  free(order);
  return s;
}

static tpu_status_t flush_locked(tpu_stream_t* stream, tpu_flush_reason_t reason,
                                 const char* detail, bool host_waits) {
  tpu_pending_t* pd = &stream->pending;
  tpu_graph_t* graph = pd->graph;
  /* A capture replays the cuts the node sequence makes, not the others. */
  if (graph && atomic_load(&pd->capturing) && reason != TPU_FLUSH_PIPELINE &&
      reason != TPU_FLUSH_SIZE_LIMIT)
    tpu_capture_poison(stream, "a flush other than the pipeline and size-limit cuts");
  if (!graph) return TPU_OK; /* provisional blocks wait for the next graph */
  int64_t flush_start = tpu_profiler_enabled() ? tpu_profiler_now_ns() : 0;
  pd->graph = NULL;
  pd->heavy_elements = 0;
  pd->epilogue_window = 0;
  pd->last_nodes = tpu_graph_node_count(graph);
  tpu_graph_operand_counts(graph, &pd->last_inputs, &pd->last_outputs);
  int32_t free_count = pd->free_count;
  pd->free_count = 0;

  tpu_program_t* program = NULL;
  bool hit = false, repeat = false, fast = false;
  int64_t extra = 0;
  tpu_status_t s = front_end(stream, &graph, free_count, &program, &hit, &repeat, &fast, &extra);
  tpu_allocator_commit(stream->chip->allocator, stream->index, extra);
  if (s != TPU_OK) {
    tpu_graph_release(graph);
    return s;
  }
  int32_t nodes = tpu_graph_node_count(graph);
  int64_t fused_kernels = 0, fused_nodes = 0, gemm_epilogues = 0, epilogue_nodes = 0;
  for (int32_t g = 0; g < program->group_count; ++g)
    if (program->groups[g].kind != TPU_GROUP_SINGLE) {
      fused_kernels++;
      fused_nodes += program->groups[g].count;
      if (program->groups[g].kind == TPU_GROUP_GEMM) {
        gemm_epilogues++;
        epilogue_nodes += program->groups[g].count - 1;
      }
    }
  int64_t elided_bytes = 0;
  for (int32_t i = 0; i < nodes; ++i) {
    const tpu_node_t* node = tpu_graph_node(graph, i);
    for (int32_t o = 0; o < node->num_outputs; ++o)
      if (program->out_slot[program->out_base[i] + o] >= 0)
        elided_bytes +=
            tpu_view_numel(&node->outputs[o]) * (int64_t)tpu_dtype_size(node->outputs[o].dtype);
  }
  pthread_mutex_lock(&g_stats.mu);
  tpu_defer_metrics_t* m = &g_stats.m;
  m->flushes++;
  m->flushes_by_reason[reason]++;
  if (hit) m->cache_hits++;
  else m->programs_compiled++;
  if (repeat) m->flush_repeats++;
  if (fast) m->flush_repeats_raw++;
  m->fused_kernels += fused_kernels;
  m->fused_nodes += fused_nodes;
  m->gemm_epilogues += gemm_epilogues;
  m->epilogue_nodes += epilogue_nodes;
  m->elided_buffers += program->elided_per_run;
  m->elided_bytes += elided_bytes;
  g_stats.cuts[g_stats.cut_count++ % TPU_DEFER_CUT_LOG] =
      (tpu_defer_cut_t){reason, nodes, program->group_count, program->hash};
  pthread_mutex_unlock(&g_stats.mu);
  int level = log_level();
  if (level >= 1)
    fprintf(stderr,
            "[tpu defer] flush tpu:%d stream %d: %s%s%s, %d nodes -> %d kernels (%" PRId64
            " fused), %" PRId64 " intermediates elided, program %016" PRIx64 " %s\n",
            tpu_chip_index(stream->chip), stream->index, tpu_flush_reason_name(reason),
            detail ? " " : "", detail ? detail : "", nodes, program->group_count, fused_kernels,
            program->elided_per_run, program->hash, hit ? "(cached)" : "(compiled)");
  if (level >= 2 && !hit) tpu_fusion_dump(graph, program);
  if (tpu_profiler_enabled()) {
    /* The flush's host side (front end, program cache), as a marker on the
     * stream it flushes: its reason and whether the program was cached. */
    tpu_prof_event_t ev = {.kind = TPU_PROF_FLUSH, .chip = (int16_t)tpu_chip_index(stream->chip),
                           .stream = (int16_t)stream->index, .start_ns = flush_start,
                           .end_ns = tpu_profiler_now_ns(),
                           .correlation = tpu_profiler_correlation(), .bytes = -1, .flops = -1,
                           .flush_reason = (int32_t)reason, .cache_hit = hit, .nodes = nodes};
    snprintf(ev.name, sizeof(ev.name), "flush %s (%s)", tpu_flush_reason_name(reason),
             hit ? "cache hit" : "compiled");
    tpu_profiler_record(&ev);
  }

  /* The program is the host driver's executable; another driver runs the
   * recording node by node (host_driver.h). */
  tpu_hal_command_t cmd = {.kind = TPU_HAL_CMD_EXEC, .host_waits = host_waits};
  cmd.u.exec.graph = graph;
  if (tpu_hal() == &tpu_host_driver) {
    cmd.u.exec.executable = tpu_host_executable(program);
  } else {
    tpu_program_release(program);
  }
  t_in_flush = true;
  s = tpu_stream_enqueue(stream, &cmd);
  t_in_flush = false;
  return s;
}

tpu_status_t tpu_stream_flush(tpu_stream_t* stream, tpu_flush_reason_t reason,
                              const char* detail) {
  tpu_pending_t* pd = &stream->pending;
  pthread_mutex_lock(&pd->mu);
  tpu_status_t s = flush_locked(stream, reason, detail, false);
  pthread_mutex_unlock(&pd->mu);
  return s;
}

tpu_status_t tpu_stream_flush_for_host(tpu_stream_t* stream, tpu_flush_reason_t reason) {
  tpu_pending_t* pd = &stream->pending;
  pthread_mutex_lock(&pd->mu);
  tpu_status_t s = flush_locked(stream, reason, NULL, true);
  pthread_mutex_unlock(&pd->mu);
  return s;
}

tpu_status_t tpu_defer_flush_all(tpu_flush_reason_t reason, const char* detail) {
  tpu_status_t first = TPU_OK;
  for (int c = 0; c < tpu_chip_count(); ++c) {
    tpu_chip_t* chip;
    tpu_status_t cs = tpu_chip_get(c, &chip);
    if (cs != TPU_OK) {
      tpu_status_free(cs);
      continue;
    }
    for (int i = 0; i < TPU_STREAMS_PER_CHIP; ++i) {
      tpu_status_t s = tpu_stream_flush(&chip->streams[i], reason, detail);
      if (first == TPU_OK) first = s;
      else tpu_status_free(s);
    }
  }
  return first;
}
