/* defer.c — deferred execution (see tpu/defer.h): the mode, metrics and the
 * cut log, and each stream's pending state (tpu_pending_t, internal.h),
 * which this file alone writes, under its lock, each time taken and
 * released in one function here: recording and cuts, frees and
 * allocations the allocator reports (tpu_defer_allocator_hooks), the
 * capture's state, flushes (the driver's executable_prepare, then the
 * allocator's commit with the driver's memory estimate) and the pending
 * text (the driver's recording_text). */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu/config.h"
#include "stream/internal.h"
#include "tpu/defer.h"
#include "tpu/profiler.h"
#include "tpu/ops.h"
#include "tpu/program_cache.h"

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

static int32_t max_nodes(void) {
  int32_t m = atomic_load(&g_max_nodes);
  return m > 0 ? m : (int32_t)tpu_config_int(TPU_CONFIG_DEFER_MAX_NODES);
}

/* Pipeline cuts after heavy nodes: on unless TORCH_TPU_DEFER_PIPELINE=0. */
static bool pipeline(void) { return tpu_config_bool(TPU_CONFIG_DEFER_PIPELINE); }

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

/* ---- the pending state ----------------------------------------------------------- */

void tpu_pending_init(tpu_pending_t* pd) {
  memset(pd, 0, sizeof(*pd));
  pthread_mutex_init(&pd->mu, NULL);
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
    if ((flags & TPU_OP_EPILOGUE) && tpu_hal()->fuses_epilogues && tpu_hal()->fuses_epilogues()) {
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
  if (s == TPU_OK && pd->capture) tpu_capture_note_record(pd->capture, graph);
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
  if (s == TPU_OK && pd->capture) { /* a capture notes graphs: this one's */
    tpu_graph_t* one = NULL;
    s = tpu_graph_from_node(node, &one);
    if (s == TPU_OK) tpu_capture_note_record(pd->capture, one);
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

/* A freed block (recorded when the stream has pending nodes); the caller
 * holds pd->mu. `provisional` when its bytes were never counted. */
static void note_free_locked(tpu_pending_t* pd, uint64_t addr, uint64_t size, bool provisional) {
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

/* ---- what the allocator reports ------------------------------------------------ */

static void allocated(tpu_stream_t* stream, const tpu_block_t* block, uint64_t bytes) {
  tpu_pending_t* pd = &stream->pending;
  if (!atomic_load(&pd->capturing)) return;
  pthread_mutex_lock(&pd->mu);
  if (pd->capture) tpu_capture_note_alloc(pd->capture, block, bytes);
  pthread_mutex_unlock(&pd->mu);
}

/* The pending lock is held from before the block can be reused (retire)
 * until the free is recorded: no node writing a new tenant of the range
 * can be recorded ahead of that record. */
static void freeing(tpu_stream_t* stream, tpu_block_t* block,
                    void (*retire)(tpu_block_t* block, tpu_freed_t* out)) {
  tpu_pending_t* pd = &stream->pending;
  pthread_mutex_lock(&pd->mu);
  if (pd->capture) tpu_capture_note_free(pd->capture, block);
  tpu_freed_t f;
  retire(block, &f);
  note_free_locked(pd, f.addr, f.size, f.provisional);
  pthread_mutex_unlock(&pd->mu);
}

static tpu_status_t flush_for_free(tpu_stream_t* stream) {
  return tpu_stream_flush(stream, TPU_FLUSH_EVENT, NULL);
}

const tpu_allocator_hooks_t tpu_defer_allocator_hooks = {
    .deferring = tpu_defer_active,
    .allocated = allocated,
    .flush = flush_for_free,
    .freeing = freeing,
};

/* ---- the capture's state ------------------------------------------------------------ */

bool tpu_pending_capturing(tpu_stream_t* stream) {
  return atomic_load(&stream->pending.capturing) != 0;
}

void tpu_pending_poison(tpu_stream_t* stream, const char* reason) {
  const char* none = NULL;
  atomic_compare_exchange_strong(&stream->pending.capture_poison, &none, reason);
}

bool tpu_pending_capture_attach(tpu_stream_t* stream, struct tpu_capture* capture) {
  tpu_pending_t* pd = &stream->pending;
  pthread_mutex_lock(&pd->mu);
  bool free_now = pd->capture == NULL;
  if (free_now) {
    pd->capture = capture;
    atomic_store(&pd->capture_poison, NULL);
    atomic_store(&pd->capturing, 1);
  }
  pthread_mutex_unlock(&pd->mu);
  return free_now;
}

struct tpu_capture* tpu_pending_capture_detach(tpu_stream_t* stream, const char** out_poison) {
  tpu_pending_t* pd = &stream->pending;
  pthread_mutex_lock(&pd->mu);
  struct tpu_capture* c = pd->capture;
  pd->capture = NULL;
  atomic_store(&pd->capturing, 0);
  *out_poison = atomic_exchange(&pd->capture_poison, NULL);
  pthread_mutex_unlock(&pd->mu);
  return c;
}

void tpu_pending_with_capture(tpu_stream_t* stream, void (*fn)(struct tpu_capture*, void*),
                              void* arg) {
  tpu_pending_t* pd = &stream->pending;
  pthread_mutex_lock(&pd->mu);
  if (pd->capture) fn(pd->capture, arg);
  pthread_mutex_unlock(&pd->mu);
}

/* ---- flushing ------------------------------------------------------------------------- */

static _Thread_local bool t_in_flush;

bool tpu_defer_in_flush(void) { return t_in_flush; }

/* Reads the stream's live provisional blocks, all of them, into its pending
 * arrays (grown as needed); *out_live: how many. The caller holds pd->mu. */
static tpu_status_t read_live_blocks_locked(tpu_stream_t* stream, int32_t* out_live) {
  tpu_pending_t* pd = &stream->pending;
  for (;;) {
    int32_t live = tpu_allocator_provisional(stream->chip->allocator, stream->index,
                                             pd->live_addr, pd->live_size, pd->live_cap);
    if (live <= pd->live_cap) {
      *out_live = live;
      return TPU_OK;
    }
    int32_t cap = pd->live_cap ? pd->live_cap : 256;
    while (cap < live) cap = cap > INT32_MAX / 2 ? INT32_MAX : cap * 2;
    uint64_t* addr = realloc(pd->live_addr, sizeof(uint64_t) * (size_t)cap);
    if (addr) pd->live_addr = addr;
    uint64_t* size = addr ? realloc(pd->live_size, sizeof(uint64_t) * (size_t)cap) : NULL;
    if (size) pd->live_size = size;
    if (!addr || !size)
      return tpu_status_make(TPU_CODE_OUT_OF_MEMORY,
                             "flush: no room to list the %d live deferred blocks", live);
    pd->live_cap = cap;
  }
}

/* The driver's executable for the recording (tpu/hal.h executable_prepare):
 * *graph may come back reordered. */
static tpu_status_t prepare_locked(tpu_stream_t* stream, tpu_graph_t** graph,
                                   int32_t free_count, tpu_hal_prepared_t* out) {
  tpu_pending_t* pd = &stream->pending;
  *out = (tpu_hal_prepared_t){0};
  tpu_hal_queue_t* queue = NULL;
  int32_t live = 0;
  TPU_RETURN_IF_ERROR(tpu_stream_queue(stream, &queue));
  TPU_RETURN_IF_ERROR(read_live_blocks_locked(stream, &live));
  tpu_hal_recording_t rec = {.graph = *graph, .frees = pd->frees, .free_count = free_count,
                             .live_addr = pd->live_addr, .live_size = pd->live_size,
                             .live = live,
                             /* a capture notes its own graphs */
                             .reuse = !atomic_load(&pd->capturing)};
  tpu_status_t s = tpu_hal()->executable_prepare(queue, &rec, out);
  *graph = rec.graph;
  return s;
}

static tpu_status_t flush_locked(tpu_stream_t* stream, tpu_flush_reason_t reason,
                                 const char* detail, bool host_waits) {
  tpu_pending_t* pd = &stream->pending;
  tpu_graph_t* graph = pd->graph;
  /* A capture replays the cuts the node sequence makes, not the others. */
  if (graph && atomic_load(&pd->capturing) && reason != TPU_FLUSH_PIPELINE &&
      reason != TPU_FLUSH_SIZE_LIMIT)
    tpu_pending_poison(stream, "a flush other than the pipeline and size-limit cuts");
  if (!graph) return TPU_OK; /* provisional blocks wait for the next graph */
  int64_t flush_start = tpu_profiler_enabled() ? tpu_profiler_now_ns() : 0;
  pd->graph = NULL;
  pd->heavy_elements = 0;
  pd->epilogue_window = 0;
  pd->last_nodes = tpu_graph_node_count(graph);
  tpu_graph_operand_counts(graph, &pd->last_inputs, &pd->last_outputs);
  int32_t free_count = pd->free_count;
  pd->free_count = 0;

  tpu_hal_prepared_t prep;
  tpu_status_t s = prepare_locked(stream, &graph, free_count, &prep);
  tpu_allocator_commit(stream->chip->allocator, stream->index, prep.extra_bytes);
  if (s != TPU_OK) {
    tpu_graph_release(graph);
    return s;
  }
  int32_t nodes = tpu_graph_node_count(graph);
  pthread_mutex_lock(&g_stats.mu);
  tpu_defer_metrics_t* m = &g_stats.m;
  m->flushes++;
  m->flushes_by_reason[reason]++;
  if (prep.cached) m->cache_hits++;
  else m->programs_compiled++;
  if (prep.repeat) m->flush_repeats++;
  if (prep.repeat_raw) m->flush_repeats_raw++;
  m->fused_kernels += prep.fused_kernels;
  m->fused_nodes += prep.fused_nodes;
  m->gemm_epilogues += prep.gemm_epilogues;
  m->epilogue_nodes += prep.epilogue_nodes;
  m->elided_buffers += prep.elided_buffers;
  m->elided_bytes += prep.elided_bytes;
  g_stats.cuts[g_stats.cut_count++ % TPU_DEFER_CUT_LOG] =
      (tpu_defer_cut_t){reason, nodes, prep.kernels, prep.hash};
  pthread_mutex_unlock(&g_stats.mu);
  if (log_level() >= 1)
    fprintf(stderr,
            "[tpu defer] flush tpu:%d stream %d: %s%s%s, %d nodes -> %d kernels (%" PRId64
            " fused), %" PRId64 " intermediates elided, program %016" PRIx64 " %s\n",
            tpu_chip_index(stream->chip), stream->index, tpu_flush_reason_name(reason),
            detail ? " " : "", detail ? detail : "", nodes, prep.kernels, prep.fused_kernels,
            prep.elided_buffers, prep.hash, prep.cached ? "(cached)" : "(compiled)");
  if (tpu_profiler_enabled()) {
    /* The flush's host side (the driver's prepare), as a marker on the
     * stream it flushes: its reason and whether the program was cached. */
    tpu_prof_event_t ev = {.kind = TPU_PROF_FLUSH, .chip = (int16_t)tpu_chip_index(stream->chip),
                           .stream = (int16_t)stream->index, .start_ns = flush_start,
                           .end_ns = tpu_profiler_now_ns(),
                           .correlation = tpu_profiler_correlation(), .bytes = -1, .flops = -1,
                           .flush_reason = (int32_t)reason, .cache_hit = prep.cached,
                           .nodes = nodes};
    snprintf(ev.name, sizeof(ev.name), "flush %s (%s)", tpu_flush_reason_name(reason),
             prep.cached ? "cache hit" : "compiled");
    tpu_profiler_record(&ev);
  }

  /* The driver's executable for the recording (or none: node by node). */
  tpu_hal_command_t cmd = {.kind = TPU_HAL_CMD_EXEC, .host_waits = host_waits};
  cmd.u.exec.graph = graph;
  cmd.u.exec.executable = prep.executable;
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

/* ---- the pending text ------------------------------------------------------------- */

tpu_status_t tpu_stream_pending_text(tpu_stream_t* stream, char** out_text) {
  *out_text = NULL;
  tpu_pending_t* pd = &stream->pending;
  char* text = NULL;
  pthread_mutex_lock(&pd->mu);
  tpu_hal_recording_t rec = {.graph = pd->graph, .frees = pd->frees,
                             .free_count = pd->free_count};
  tpu_status_t s = pd->graph && tpu_graph_node_count(pd->graph) > 0
                       ? tpu_hal()->recording_text(&rec, &text)
                       : TPU_OK;
  pthread_mutex_unlock(&pd->mu);
  if (s != TPU_OK)
    return tpu_status_annotate(s, "formatting tpu:%d stream %d's pending graph",
                               tpu_chip_index(stream->chip), stream->index);
  if (!text) text = calloc(1, 1);
  if (!text) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "pending graph text: no memory");
  *out_text = text;
  return TPU_OK;
}
