/* runtime.c — chips, streams, events and submission (see tpu/runtime.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tpu/config.h"
#include "stream/internal.h"
#include "kernel.h"
#include "tpu/defer.h"
#include "tpu/ops.h"
#include "tpu/profiler.h"

static struct {
  const tpu_hal_driver_t* driver;
  tpu_chip_t* chips[TPU_MAX_CHIPS];
  int chip_count;
  tpu_status_t init_status;
  atomic_bool launch_blocking;
} g_rt;

const tpu_hal_driver_t* tpu_hal(void) { return g_rt.driver; }

static uint64_t capacity_from_env(void) {
  return (uint64_t)(tpu_config_float(TPU_CONFIG_MEMORY_GB) * (double)(1ull << 30));
}

static void init_once(void) {
  g_rt.driver = tpu_hal_driver();
  atomic_store(&g_rt.launch_blocking, tpu_config_bool(TPU_CONFIG_LAUNCH_BLOCKING));
  /* Build the op table before any worker runs; without it no op is known. */
  g_rt.init_status = tpu_op_table_status();
  if (g_rt.init_status != TPU_OK) return;
  (void)tpu_parallel_threads();
  int n = g_rt.driver->chip_count();
  if (n > TPU_MAX_CHIPS) n = TPU_MAX_CHIPS;
  uint64_t capacity = capacity_from_env();
  for (int i = 0; i < n; ++i) {
    tpu_chip_t* c = calloc(1, sizeof(*c));
    if (!c) {
      g_rt.init_status = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "chip allocation failed");
      return;
    }
    c->index = i;
    c->capacity = capacity;
    pthread_mutex_init(&c->mu, NULL);
    for (int s = 0; s < TPU_STREAMS_PER_CHIP; ++s) {
      c->streams[s].chip = c;
      c->streams[s].index = s;
      tpu_pending_init(&c->streams[s].pending);
    }
    tpu_status_t s = g_rt.driver->chip_open(i, capacity, &c->hal);
    if (s == TPU_OK) s = tpu_allocator_create(c, &tpu_defer_allocator_hooks, &c->allocator);
    if (s != TPU_OK) {
      g_rt.init_status = tpu_status_annotate(s, "opening tpu:%d", i);
      free(c);
      return;
    }
    g_rt.chips[i] = c;
    g_rt.chip_count = i + 1;
  }
}

tpu_status_t tpu_runtime_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, init_once);
  if (g_rt.init_status == TPU_OK) return TPU_OK;
  return tpu_status_make(tpu_status_code(g_rt.init_status), "%s",
                         tpu_status_message(g_rt.init_status));
}

int tpu_chip_count(void) {
  tpu_status_free(tpu_runtime_init());
  return g_rt.chip_count;
}

const char* tpu_driver_name(void) {
  tpu_status_free(tpu_runtime_init());
  return g_rt.driver->name;
}

int tpu_compute_threads(void) { return tpu_parallel_threads(); }

void tpu_set_launch_blocking(bool blocking) { atomic_store(&g_rt.launch_blocking, blocking); }
bool tpu_launch_blocking(void) { return atomic_load(&g_rt.launch_blocking); }

/* ---- chips ------------------------------------------------------------------ */

tpu_status_t tpu_chip_get(int index, tpu_chip_t** out_chip) {
  TPU_RETURN_IF_ERROR(tpu_runtime_init());
  if (index < 0 || index >= g_rt.chip_count)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "invalid device ordinal tpu:%d (this process has %d chips)", index,
                           g_rt.chip_count);
  *out_chip = g_rt.chips[index];
  return TPU_OK;
}

int tpu_chip_index(const tpu_chip_t* chip) { return chip->index; }
uint64_t tpu_chip_capacity(const tpu_chip_t* chip) { return chip->capacity; }

int tpu_chip_of_address(uint64_t addr) {
  for (int i = 0; i < g_rt.chip_count; ++i)
    if (g_rt.driver->owns_address(g_rt.chips[i]->hal, addr)) return i;
  return -1;
}

tpu_status_t tpu_chip_synchronize(tpu_chip_t* chip) {
  tpu_status_t first = TPU_OK;
  for (int s = 0; s < TPU_STREAMS_PER_CHIP; ++s) {
    first = tpu_stream_flush_for_host(&chip->streams[s], TPU_FLUSH_SYNCHRONIZE);
    if (first != TPU_OK) return first;
  }
  for (int s = 0; s < TPU_STREAMS_PER_CHIP; ++s) {
    pthread_mutex_lock(&chip->mu);
    tpu_hal_queue_t* q = chip->streams[s].queue;
    pthread_mutex_unlock(&chip->mu);
    if (!q) continue;
    tpu_status_t st = g_rt.driver->queue_wait_idle(q);
    if (first == TPU_OK) first = st;
    else tpu_status_free(st);
  }
  return first;
}

void tpu_chip_queue_stats(tpu_chip_t* chip, tpu_queue_stats_t* out_stats) {
  tpu_hal_queue_stats_t sum = {0};
  for (int s = 0; s < TPU_STREAMS_PER_CHIP; ++s) {
    pthread_mutex_lock(&chip->mu);
    tpu_hal_queue_t* q = chip->streams[s].queue;
    pthread_mutex_unlock(&chip->mu);
    if (q) g_rt.driver->queue_add_stats(q, &sum);
  }
  *out_stats = (tpu_queue_stats_t){.inline_commands = sum.inline_commands,
                                   .queued_commands = sum.queued_commands,
                                   .worker_wakeups = sum.worker_wakeups,
                                   .syncs = sum.syncs,
                                   .sync_sleeps = sum.sync_sleeps};
}

/* ---- streams ------------------------------------------------------------------ */

tpu_status_t tpu_stream_get(tpu_chip_t* chip, int index, tpu_stream_t** out_stream) {
  if (index < 0 || index >= TPU_STREAMS_PER_CHIP)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "invalid stream index %d", index);
  *out_stream = &chip->streams[index];
  return TPU_OK;
}

int tpu_stream_index(const tpu_stream_t* stream) { return stream->index; }
tpu_chip_t* tpu_stream_chip(const tpu_stream_t* stream) { return stream->chip; }

tpu_status_t tpu_stream_queue(tpu_stream_t* stream, tpu_hal_queue_t** out_queue) {
  tpu_chip_t* chip = stream->chip;
  pthread_mutex_lock(&chip->mu);
  tpu_status_t s = TPU_OK;
  if (!stream->queue) s = g_rt.driver->queue_create(chip->hal, &stream->queue);
  *out_queue = stream->queue;
  pthread_mutex_unlock(&chip->mu);
  return s;
}

/* Queues a command; in launch-blocking mode waits for it and returns its
 * error at once. */
tpu_status_t tpu_stream_enqueue(tpu_stream_t* stream, tpu_hal_command_t* cmd) {
  if (tpu_pending_capturing(stream) && !tpu_defer_in_flush())
    tpu_pending_poison(stream, "a command queued outside the deferred graph (copy, event, strict op)");
  tpu_hal_queue_t* q;
  tpu_status_t s = tpu_stream_queue(stream, &q);
  if (s != TPU_OK) {
    if (cmd->kind == TPU_HAL_CMD_EXEC) {
      tpu_graph_release(cmd->u.exec.graph);
      if (cmd->u.exec.executable) g_rt.driver->executable_release(cmd->u.exec.executable);
    }
    if (cmd->kind == TPU_HAL_CMD_RECORD || cmd->kind == TPU_HAL_CMD_WAIT)
      g_rt.driver->event_release(cmd->u.event.event);
    return s;
  }
  cmd->stream = (int16_t)stream->index;
  cmd->correlation = tpu_profiler_enabled() ? tpu_profiler_correlation() : 0;
  TPU_RETURN_IF_ERROR(g_rt.driver->queue_submit(q, cmd));
  if (atomic_load(&g_rt.launch_blocking)) return g_rt.driver->queue_wait_idle(q);
  return TPU_OK;
}

/* Flushes the stream's deferred work ahead of a command that must follow it,
 * then queues the command. */
static tpu_status_t submit(tpu_stream_t* stream, tpu_hal_command_t* cmd,
                           tpu_flush_reason_t reason) {
  TPU_RETURN_IF_ERROR(tpu_stream_flush(stream, reason, NULL));
  return tpu_stream_enqueue(stream, cmd);
}

/* Queues a verified graph (or records it, deferred); takes ownership. */
static tpu_status_t submit_verified(tpu_stream_t* stream, tpu_graph_t* graph) {
  if (tpu_defer_active()) return tpu_defer_record(stream, graph);
  tpu_status_t s = tpu_stream_flush(stream, TPU_FLUSH_STRICT_SUBMIT, NULL);
  if (s != TPU_OK) {
    tpu_graph_release(graph);
    return s;
  }
  tpu_hal_command_t cmd = {.kind = TPU_HAL_CMD_EXEC, .u.exec.graph = graph};
  return tpu_stream_enqueue(stream, &cmd);
}

tpu_status_t tpu_stream_submit(tpu_stream_t* stream, tpu_graph_t* graph) {
  tpu_status_t s = tpu_graph_verify(graph);
  if (s != TPU_OK) {
    tpu_graph_release(graph);
    return s;
  }
  return submit_verified(stream, graph);
}

tpu_status_t tpu_stream_submit_node(tpu_stream_t* stream, const tpu_node_t* node) {
  TPU_RETURN_IF_ERROR(tpu_node_verify(node, 0)); /* before anything reads it */
  /* Deferred, the node goes straight into the pending graph. */
  if (tpu_defer_active()) return tpu_defer_record_node(stream, node);
  tpu_graph_t* graph = NULL;
  TPU_RETURN_IF_ERROR(tpu_graph_from_node(node, &graph));
  return submit_verified(stream, graph);
}

tpu_status_t tpu_stream_copy_queued(tpu_stream_t* stream, tpu_copy_kind_t kind, uint64_t dst,
                                    uint64_t src, size_t bytes, bool host_waits) {
  _Static_assert(TPU_COPY_H2D == (int)TPU_HAL_COPY_H2D && TPU_COPY_D2H == (int)TPU_HAL_COPY_D2H &&
                     TPU_COPY_D2D == (int)TPU_HAL_COPY_D2D,
                 "the runtime's copy kinds are the HAL's");
  tpu_hal_command_t cmd = {.kind = TPU_HAL_CMD_COPY, .host_waits = host_waits};
  cmd.u.copy.kind = (tpu_hal_copy_kind_t)kind;
  cmd.u.copy.dst = dst;
  cmd.u.copy.src = src;
  cmd.u.copy.bytes = bytes;
  tpu_flush_reason_t reason = kind == TPU_COPY_D2H ? TPU_FLUSH_COPY_TO_HOST : TPU_FLUSH_COPY;
  TPU_RETURN_IF_ERROR(host_waits ? tpu_stream_flush_for_host(stream, reason)
                                 : tpu_stream_flush(stream, reason, NULL));
  return tpu_stream_enqueue(stream, &cmd);
}

/* A pageable device-to-host copy is waited for at once (its host memory
 * must outlive it); the work it reads is then flushed for the host too. */
tpu_status_t tpu_stream_copy(tpu_stream_t* stream, tpu_copy_kind_t kind, uint64_t dst,
                             uint64_t src, size_t bytes) {
  return tpu_stream_copy_queued(stream, kind, dst, src, bytes, kind == TPU_COPY_D2H);
}

tpu_status_t tpu_stream_host_fn(tpu_stream_t* stream, void (*fn)(void* arg), void* arg) {
  return tpu_stream_host_fn_named(stream, NULL, false, fn, arg);
}

tpu_status_t tpu_stream_host_fn_named(tpu_stream_t* stream, const char* name, bool collective,
                                      void (*fn)(void* arg), void* arg) {
  tpu_hal_command_t cmd = {.kind = TPU_HAL_CMD_HOST_FN};
  cmd.u.host.fn = fn;
  cmd.u.host.arg = arg;
  cmd.u.host.name = name;
  cmd.u.host.collective = collective;
  return submit(stream, &cmd, TPU_FLUSH_HOST_FN);
}

tpu_status_t tpu_stream_synchronize(tpu_stream_t* stream) {
  TPU_RETURN_IF_ERROR(tpu_stream_flush_for_host(stream, TPU_FLUSH_SYNCHRONIZE));
  pthread_mutex_lock(&stream->chip->mu);
  tpu_hal_queue_t* q = stream->queue;
  pthread_mutex_unlock(&stream->chip->mu);
  return q ? g_rt.driver->queue_wait_idle(q) : TPU_OK;
}

bool tpu_stream_query(tpu_stream_t* stream) {
  /* Deferred work is not done: queue it (its errors surface at the next
   * synchronisation, like any queued work's). */
  if (tpu_defer_pending(stream)) {
    tpu_status_t s = tpu_stream_flush(stream, TPU_FLUSH_SYNCHRONIZE, NULL);
    if (s != TPU_OK) {
      tpu_status_free(s);
      return false;
    }
  }
  pthread_mutex_lock(&stream->chip->mu);
  tpu_hal_queue_t* q = stream->queue;
  pthread_mutex_unlock(&stream->chip->mu);
  return q ? g_rt.driver->queue_is_idle(q) : true;
}

/* ---- events --------------------------------------------------------------------- */

struct tpu_event {
  tpu_hal_event_t* hal;
  _Atomic(tpu_stream_t*) last_stream; /* where it was last recorded */
};

tpu_status_t tpu_event_create(bool timing, tpu_event_t** out_event) {
  TPU_RETURN_IF_ERROR(tpu_runtime_init());
  tpu_event_t* e = calloc(1, sizeof(*e));
  if (!e) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "event allocation failed");
  tpu_status_t s = g_rt.driver->event_create(timing, &e->hal);
  if (s != TPU_OK) {
    free(e);
    return s;
  }
  *out_event = e;
  return TPU_OK;
}

void tpu_event_release(tpu_event_t* event) {
  if (!event) return;
  g_rt.driver->event_release(event->hal);
  free(event);
}

static tpu_status_t event_record(tpu_event_t* event, tpu_stream_t* stream, bool flush) {
  if (flush) TPU_RETURN_IF_ERROR(tpu_stream_flush(stream, TPU_FLUSH_EVENT, NULL));
  tpu_hal_command_t cmd = {.kind = TPU_HAL_CMD_RECORD};
  g_rt.driver->event_retain(event->hal);
  cmd.u.event.event = event->hal;
  cmd.u.event.seq = g_rt.driver->event_next_seq(event->hal);
  atomic_store(&event->last_stream, stream);
  return tpu_stream_enqueue(stream, &cmd);
}

tpu_status_t tpu_event_record(tpu_event_t* event, tpu_stream_t* stream) {
  return event_record(event, stream, true);
}

tpu_status_t tpu_event_record_queued(tpu_event_t* event, tpu_stream_t* stream) {
  return event_record(event, stream, false);
}

tpu_status_t tpu_stream_wait_event(tpu_stream_t* stream, tpu_event_t* event) {
  /* Flushed even when the wait is a no-op, so cuts never depend on timing. */
  TPU_RETURN_IF_ERROR(tpu_stream_flush(stream, TPU_FLUSH_EVENT, NULL));
  uint64_t seq = g_rt.driver->event_last_seq(event->hal);
  if (seq == 0 || g_rt.driver->event_reached(event->hal, seq)) return TPU_OK;
  tpu_hal_command_t cmd = {.kind = TPU_HAL_CMD_WAIT};
  g_rt.driver->event_retain(event->hal);
  cmd.u.event.event = event->hal;
  cmd.u.event.seq = seq;
  return tpu_stream_enqueue(stream, &cmd);
}

bool tpu_event_query(tpu_event_t* event) {
  return g_rt.driver->event_reached(event->hal, g_rt.driver->event_last_seq(event->hal));
}

tpu_status_t tpu_event_synchronize(tpu_event_t* event) {
  g_rt.driver->event_wait(event->hal, g_rt.driver->event_last_seq(event->hal));
  /* Work before the record has run: report what failed in it. */
  tpu_stream_t* stream = atomic_load(&event->last_stream);
  if (!stream) return TPU_OK;
  pthread_mutex_lock(&stream->chip->mu);
  tpu_hal_queue_t* q = stream->queue;
  pthread_mutex_unlock(&stream->chip->mu);
  return q ? g_rt.driver->queue_take_error(q) : TPU_OK;
}

tpu_status_t tpu_event_elapsed_ms(tpu_event_t* start, tpu_event_t* end, double* out_ms) {
  int64_t a = g_rt.driver->event_time_ns(start->hal), b = g_rt.driver->event_time_ns(end->hal);
  if (a < 0 || b < 0)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "elapsed_time needs two completed records of events created with "
                           "enable_timing=True");
  *out_ms = (double)(b - a) / 1e6;
  return TPU_OK;
}
