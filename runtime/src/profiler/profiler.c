/* profiler.c — the device-side event recorder (see tpu/profiler.h).
 *
 * One bounded buffer per chip, each behind its own lock: the threads that
 * run one chip's commands (its streams' workers, inline submitters) share
 * it, and other chips never touch it. The on/off switch is one atomic flag,
 * read relaxed by every command: a command that misses a start or a stop by
 * a few nanoseconds records, or does not, one event more or less. */
#include "tpu/profiler.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernel.h"
#include "base/spin.h"
#include "tpu/dtype.h"
#include "tpu/ops.h"
#include "tpu/runtime.h"

#define DEFAULT_EVENTS (1 << 16)

typedef struct chip_buffer {
  pthread_mutex_t mu;
  tpu_prof_event_t* events; /* ring of `capacity`, NULL until the first start */
  int64_t capacity, head, count;
} chip_buffer_t;

static struct {
  atomic_bool on, memory;
  atomic_llong recorded, dropped;
  chip_buffer_t chips[TPU_MAX_CHIPS];
} g_prof;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_locks(void) {
  for (int i = 0; i < TPU_MAX_CHIPS; ++i) pthread_mutex_init(&g_prof.chips[i].mu, NULL);
}

int64_t tpu_profiler_now_ns(void) { return tpu_monotonic_ns(); }

bool tpu_profiler_enabled(void) { return atomic_load_explicit(&g_prof.on, memory_order_relaxed); }

bool tpu_profiler_memory_enabled(void) {
  return atomic_load_explicit(&g_prof.memory, memory_order_relaxed);
}

/* Replaces chip i's buffer with `fresh` (capacity `cap`, may be NULL). */
static void swap_buffer(int i, tpu_prof_event_t* fresh, int64_t cap) {
  chip_buffer_t* b = &g_prof.chips[i];
  pthread_mutex_lock(&b->mu);
  tpu_prof_event_t* old = b->events;
  b->events = fresh;
  b->capacity = fresh ? cap : 0;
  b->head = b->count = 0;
  pthread_mutex_unlock(&b->mu);
  free(old);
}

tpu_status_t tpu_profiler_start(const tpu_profiler_config_t* config) {
  pthread_once(&g_once, init_locks);
  int64_t cap = config && config->events_per_chip > 0 ? config->events_per_chip : DEFAULT_EVENTS;
  tpu_prof_event_t* fresh[TPU_MAX_CHIPS] = {0};
  for (int i = 0; i < TPU_MAX_CHIPS; ++i) {
    fresh[i] = malloc(sizeof(tpu_prof_event_t) * (size_t)cap);
    if (!fresh[i]) {
      for (int j = 0; j < i; ++j) free(fresh[j]);
      return tpu_status_make(TPU_CODE_OUT_OF_MEMORY,
                             "profiler: cannot allocate %lld events per chip", (long long)cap);
    }
  }
  atomic_store(&g_prof.on, false);
  for (int i = 0; i < TPU_MAX_CHIPS; ++i) swap_buffer(i, fresh[i], cap);
  atomic_store(&g_prof.recorded, 0);
  atomic_store(&g_prof.dropped, 0);
  atomic_store(&g_prof.memory, config && config->memory);
  atomic_store(&g_prof.on, true);
  return TPU_OK;
}

void tpu_profiler_stop(void) {
  atomic_store(&g_prof.on, false);
  atomic_store(&g_prof.memory, false);
}

/* Runs only after a start (the flag is set last), so the locks exist. */
void tpu_profiler_record(const tpu_prof_event_t* event) {
  if (!tpu_profiler_enabled()) return;
  if (event->chip < 0 || event->chip >= TPU_MAX_CHIPS) return;
  chip_buffer_t* b = &g_prof.chips[event->chip];
  pthread_mutex_lock(&b->mu);
  bool kept = b->events && b->count < b->capacity;
  if (kept) {
    b->events[(b->head + b->count) % b->capacity] = *event;
    b->count++;
  }
  pthread_mutex_unlock(&b->mu);
  atomic_fetch_add_explicit(kept ? &g_prof.recorded : &g_prof.dropped, 1, memory_order_relaxed);
}

tpu_status_t tpu_profiler_drain(int chip, tpu_prof_event_t* out, size_t capacity,
                                size_t* out_count) {
  if (chip < 0 || chip >= TPU_MAX_CHIPS)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "profiler: no chip %d", chip);
  pthread_once(&g_once, init_locks);
  chip_buffer_t* b = &g_prof.chips[chip];
  pthread_mutex_lock(&b->mu);
  size_t n = 0;
  while (n < capacity && b->count > 0) {
    out[n++] = b->events[b->head];
    b->head = (b->head + 1) % b->capacity;
    b->count--;
  }
  pthread_mutex_unlock(&b->mu);
  *out_count = n;
  return TPU_OK;
}

void tpu_profiler_get_stats(tpu_profiler_stats_t* out_stats) {
  out_stats->recorded = atomic_load(&g_prof.recorded);
  out_stats->dropped = atomic_load(&g_prof.dropped);
}

/* ---- the runtime's recorders ------------------------------------------------- */

static int64_t view_bytes(const tpu_view_t* v) {
  return tpu_view_numel(v) * (int64_t)tpu_dtype_size(v->dtype);
}

/* 2*M*N*K for the matrix products (their K read from the operand that holds
 * it), 2*elements for the vector ones; -1 for everything else. */
static int64_t node_flops(const tpu_node_t* node, const char* name) {
  int k_input = -1;
  if (!strcmp(name, "mm") || !strcmp(name, "bmm")) k_input = 0;
  else if (!strcmp(name, "addmm") || !strcmp(name, "baddbmm")) k_input = 1;
  if (k_input >= 0 && node->num_inputs > k_input && node->num_outputs > 0 &&
      node->inputs[k_input].kind == TPU_VALUE_VIEW) {
    const tpu_view_t* a = &node->inputs[k_input].u.view;
    if (a->ndim < 1) return -1;
    return 2 * tpu_view_numel(&node->outputs[0]) * a->sizes[a->ndim - 1];
  }
  int m_input = !strcmp(name, "mv") || !strcmp(name, "dot") || !strcmp(name, "vdot") ? 0
                : !strcmp(name, "addmv")                                            ? 1
                                                                                    : -1;
  if (m_input >= 0 && node->num_inputs > m_input && node->inputs[m_input].kind == TPU_VALUE_VIEW)
    return 2 * tpu_view_numel(&node->inputs[m_input].u.view);
  return -1;
}

void tpu_prof_record_nodes(const tpu_exec_ctx_t* ctx, const tpu_graph_t* graph, int32_t first,
                           int32_t count, bool fused, int64_t start_ns, int64_t end_ns) {
  tpu_prof_event_t ev = {.kind = fused ? TPU_PROF_FUSED : TPU_PROF_KERNEL,
                         .chip = (int16_t)ctx->chip_index, .stream = (int16_t)ctx->stream_index,
                         .start_ns = start_ns, .end_ns = end_ns,
                         .correlation = ctx->correlation, .nodes = count};
  /* Charged to the op that recorded the node(s): a deferred program runs
   * during a later op (the flush's), which is not the one that asked. */
  uint64_t first_id = 0;
  for (int32_t i = first; i < first + count; ++i) {
    uint64_t c = tpu_graph_node_correlation(graph, i);
    if (c && (!first_id || c < first_id)) first_id = c;
  }
  if (first_id) ev.correlation = first_id;
  for (int32_t i = first; fused && first_id && i < first + count; ++i) {
    uint64_t c = tpu_graph_node_correlation(graph, i);
    bool seen = !c || c == first_id;
    for (int32_t k = 0; k < ev.num_others && !seen; ++k) seen = ev.others[k] == c;
    if (seen) continue;
    if (ev.num_others < TPU_PROF_MAX_OTHERS) ev.others[ev.num_others++] = c;
    else ev.others_truncated = 1;
  }
  int64_t bytes = 0, flops = -1; /* FLOPs: the sum of those known, -1 if none is */
  size_t len = 0;
  if (fused) len = (size_t)snprintf(ev.name, sizeof(ev.name), "fused[");
  for (int32_t i = first; i < first + count; ++i) {
    const tpu_node_t* node = tpu_graph_node(graph, i);
    const tpu_op_def_t* def = tpu_op_def(node->op);
    const char* name = def ? def->name : "?";
    for (int32_t k = 0; k < node->num_inputs; ++k)
      if (node->inputs[k].kind == TPU_VALUE_VIEW) bytes += view_bytes(&node->inputs[k].u.view);
    for (int32_t k = 0; k < node->num_outputs; ++k) bytes += view_bytes(&node->outputs[k]);
    int64_t f = node_flops(node, name);
    if (f >= 0) flops = (flops < 0 ? 0 : flops) + f;
    if (len < sizeof(ev.name))
      len += (size_t)snprintf(ev.name + len, sizeof(ev.name) - len, "%s%s",
                              fused && i > first ? "," : "", name);
  }
  if (fused && len < sizeof(ev.name)) snprintf(ev.name + len, sizeof(ev.name) - len, "]");
  /* A truncated list ends in "...]" so it never reads as complete. */
  if (fused && len >= sizeof(ev.name)) memcpy(ev.name + sizeof(ev.name) - 5, "...]", 5);
  ev.bytes = bytes;
  ev.flops = flops;
  tpu_profiler_record(&ev);
}
