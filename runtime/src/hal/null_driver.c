/* null_driver.c — the smallest driver that keeps the HAL honest: it has no
 * compiler and no kernels, only what the HAL itself promises.
 *
 *  - Chips: one (TORCH_TPU_NUM_CHIPS is the host driver's); its device
 *    memory is a reserved range of host memory (backed on first touch),
 *    mapped first-fit from a sorted list of the mapped segments.
 *  - Queues: synchronous. A command runs on the submitting thread as it is
 *    submitted, so the queue is idle whenever no submit is under way;
 *    copies, events and host functions work.
 *  - EXEC: runs nothing. It records UNIMPLEMENTED on the queue, returned by
 *    the next queue_wait_idle like any asynchronous error.
 *  - Executables: none. executable_prepare leaves the recording as it is,
 *    returns no executable (the graph runs node by node) and a memory
 *    estimate that holds whatever the order (no retain/release entries).
 * Select it with TORCH_TPU_DRIVER=null: the runtime then starts, allocates,
 * copies and synchronises, and every op surfaces UNIMPLEMENTED at the
 * next synchronisation. The conformance suite runs against it. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "host_event.h"
#include "tpu/hal.h"

#define NULL_ALIGN 256u

/* ---- chips ---------------------------------------------------------------- */

typedef struct segment {
  uint64_t start, size;
} segment_t;

struct tpu_hal_chip {
  int index;
  uint64_t base, capacity;
  pthread_mutex_t mu;
  segment_t* used; /* mapped segments, sorted by start */
  int used_count, used_capacity;
};

static int null_chip_count(void) { return 1; }

static tpu_status_t null_chip_open(int index, uint64_t capacity, tpu_hal_chip_t** out_chip) {
  *out_chip = NULL;
  if (index != 0 || capacity == 0 || capacity > UINT64_MAX / 2)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "null driver: no chip %d of %llu bytes",
                           index, (unsigned long long)capacity);
  tpu_hal_chip_t* c = calloc(1, sizeof(*c));
  if (!c) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "chip allocation failed");
  void* p = mmap(NULL, capacity, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    free(c);
    return tpu_status_make(TPU_CODE_UNAVAILABLE, "cannot reserve %llu bytes for chip %d",
                           (unsigned long long)capacity, index);
  }
  c->index = index;
  c->base = (uint64_t)(uintptr_t)p;
  c->capacity = capacity;
  pthread_mutex_init(&c->mu, NULL);
  *out_chip = c;
  return TPU_OK;
}

static void null_chip_close(tpu_hal_chip_t* c) {
  if (!c) return;
  munmap((void*)(uintptr_t)c->base, c->capacity);
  free(c->used);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

static tpu_status_t null_memory_map(tpu_hal_chip_t* c, uint64_t bytes, uint64_t* out_addr) {
  *out_addr = 0;
  if (bytes == 0) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "null driver: map of 0 bytes");
  if (bytes > c->capacity)
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "chip %d has no free range of %llu bytes",
                           c->index, (unsigned long long)bytes);
  bytes = (bytes + NULL_ALIGN - 1) / NULL_ALIGN * NULL_ALIGN;
  pthread_mutex_lock(&c->mu);
  tpu_status_t s = TPU_OK;
  /* first fit: the gap before segment i (or after the last) */
  uint64_t at = c->base;
  int i = 0;
  for (; i < c->used_count; ++i) {
    if (c->used[i].start - at >= bytes) break;
    at = c->used[i].start + c->used[i].size;
  }
  if (i == c->used_count && c->base + c->capacity - at < bytes) {
    s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "chip %d has no free range of %llu bytes",
                        c->index, (unsigned long long)bytes);
  } else if (c->used_count == c->used_capacity) {
    int cap = c->used_capacity ? c->used_capacity * 2 : 16;
    segment_t* grown = realloc(c->used, sizeof(segment_t) * (size_t)cap);
    if (grown) {
      c->used = grown;
      c->used_capacity = cap;
    } else {
      s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "null driver: segment list growth failed");
    }
  }
  if (s == TPU_OK) {
    memmove(&c->used[i + 1], &c->used[i], sizeof(segment_t) * (size_t)(c->used_count - i));
    c->used[i] = (segment_t){at, bytes};
    c->used_count++;
    *out_addr = at;
  }
  pthread_mutex_unlock(&c->mu);
  return s;
}

/* Zeroes [addr, addr + bytes), so that a later map of the range reads zeros:
 * the whole pages inside it are dropped (MADV_DONTNEED), the partial pages at
 * its ends are cleared byte by byte. Segments are 256-byte aligned, so a
 * page may hold other live segments: dropping it whole would zero them. */
static void zero_range(uint64_t addr, uint64_t bytes) {
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), end = addr + bytes;
  uint64_t lo = (addr + page - 1) / page * page, hi = end / page * page;
  if (lo >= hi) {
    memset((void*)(uintptr_t)addr, 0, bytes);
    return;
  }
  memset((void*)(uintptr_t)addr, 0, lo - addr);
  madvise((void*)(uintptr_t)lo, hi - lo, MADV_DONTNEED);
  memset((void*)(uintptr_t)hi, 0, end - hi);
}

static void null_memory_unmap(tpu_hal_chip_t* c, uint64_t addr, uint64_t bytes) {
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->used_count; ++i) {
    if (c->used[i].start != addr) continue;
    zero_range(addr, c->used[i].size); /* a fresh map reads zeros */
    memmove(&c->used[i], &c->used[i + 1], sizeof(segment_t) * (size_t)(c->used_count - i - 1));
    c->used_count--;
    break;
  }
  pthread_mutex_unlock(&c->mu);
}

static bool null_owns_address(const tpu_hal_chip_t* c, uint64_t addr) {
  return addr >= c->base && addr < c->base + c->capacity;
}

/* ---- events --------------------------------------------------------------- */

/* ---- queues --------------------------------------------------------------- */

struct tpu_hal_queue {
  tpu_hal_chip_t* chip;
  pthread_mutex_t mu;       /* guards error and stats */
  tpu_status_t error;       /* first failure since the last wait_idle */
  atomic_int active;        /* submits running a command now */
  tpu_hal_queue_stats_t stats;
};

static tpu_status_t null_queue_create(tpu_hal_chip_t* chip, tpu_hal_queue_t** out_queue) {
  tpu_hal_queue_t* q = calloc(1, sizeof(*q));
  if (!q) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "queue allocation failed");
  q->chip = chip;
  pthread_mutex_init(&q->mu, NULL);
  *out_queue = q;
  return TPU_OK;
}

static void null_queue_destroy(tpu_hal_queue_t* q) {
  if (!q) return;
  tpu_status_free(q->error);
  pthread_mutex_destroy(&q->mu);
  free(q);
}

/* Runs a checked command; returns its error (the queue records it). */
static tpu_status_t run_command(const tpu_hal_command_t* cmd) {
  switch (cmd->kind) {
    case TPU_HAL_CMD_EXEC:
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED,
                             "the null driver runs no graphs (%d nodes submitted)",
                             (int)tpu_graph_node_count(cmd->u.exec.graph));
    case TPU_HAL_CMD_COPY:
      if (cmd->u.copy.bytes)
        memmove((void*)(uintptr_t)cmd->u.copy.dst, (const void*)(uintptr_t)cmd->u.copy.src,
                cmd->u.copy.bytes);
      return TPU_OK;
    case TPU_HAL_CMD_RECORD:
      tpu_host_event_complete(cmd->u.event.event, cmd->u.event.seq);
      return TPU_OK;
    case TPU_HAL_CMD_WAIT:
      tpu_host_event_wait(cmd->u.event.event, cmd->u.event.seq);
      return TPU_OK;
    case TPU_HAL_CMD_HOST_FN:
      cmd->u.host.fn(cmd->u.host.arg);
      return TPU_OK;
    case TPU_HAL_CMD_KIND_COUNT:
      break;
  }
  return tpu_status_make(TPU_CODE_INTERNAL, "unknown command %d", (int)cmd->kind);
}

static void command_dispose(tpu_hal_command_t* cmd) {
  if (cmd->kind == TPU_HAL_CMD_EXEC) tpu_graph_release(cmd->u.exec.graph);
  if (cmd->kind == TPU_HAL_CMD_RECORD || cmd->kind == TPU_HAL_CMD_WAIT)
    tpu_host_event_release(cmd->u.event.event);
}

static tpu_status_t null_queue_submit(tpu_hal_queue_t* q, tpu_hal_command_t* cmd) {
  tpu_status_t bad = tpu_hal_command_check(cmd);
  if (bad == TPU_OK && cmd->kind == TPU_HAL_CMD_EXEC && cmd->u.exec.executable)
    bad = tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                          "HAL command: the null driver has no executables");
  if (bad == TPU_OK && cmd->kind == TPU_HAL_CMD_WAIT &&
      cmd->u.event.seq > tpu_host_event_last_seq(cmd->u.event.event))
    bad = tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                          "HAL command: WAIT for a record not yet reserved");
  if (bad != TPU_OK) {
    if (cmd) command_dispose(cmd); /* an executable here is another driver's: not ours to free */
    return bad;
  }
  atomic_fetch_add(&q->active, 1);
  tpu_status_t s = run_command(cmd);
  command_dispose(cmd);
  pthread_mutex_lock(&q->mu);
  q->stats.inline_commands++;
  if (s != TPU_OK && q->error == TPU_OK) q->error = s;
  else tpu_status_free(s);
  pthread_mutex_unlock(&q->mu);
  atomic_fetch_sub(&q->active, 1);
  return TPU_OK;
}

static tpu_status_t null_queue_take_error(tpu_hal_queue_t* q) {
  pthread_mutex_lock(&q->mu);
  tpu_status_t s = q->error;
  q->error = TPU_OK;
  pthread_mutex_unlock(&q->mu);
  return s;
}

/* Commands run as they are submitted: nothing is left to wait for once the
 * submits under way (other threads') have returned. */
static tpu_status_t null_queue_wait_idle(tpu_hal_queue_t* q) {
  while (atomic_load(&q->active) > 0) sched_yield();
  pthread_mutex_lock(&q->mu);
  q->stats.syncs++;
  pthread_mutex_unlock(&q->mu);
  return null_queue_take_error(q);
}

static bool null_queue_is_idle(tpu_hal_queue_t* q) { return atomic_load(&q->active) == 0; }

static void null_queue_add_stats(tpu_hal_queue_t* q, tpu_hal_queue_stats_t* out_stats) {
  pthread_mutex_lock(&q->mu);
  out_stats->inline_commands += q->stats.inline_commands;
  out_stats->syncs += q->stats.syncs;
  pthread_mutex_unlock(&q->mu);
}

/* No compiler: the recording stays as it is and runs node by node (here:
 * not at all). The memory estimate is the bound that holds for any order of
 * running it: every provisional block, freed or alive, held at once. */
static tpu_status_t null_executable_prepare(tpu_hal_queue_t* q, tpu_hal_recording_t* rec,
                                            tpu_hal_prepared_t* out) {
  (void)q;
  *out = (tpu_hal_prepared_t){.kernels = tpu_graph_node_count(rec->graph)};
  for (int32_t f = 0; f < rec->free_count; ++f)
    if (rec->frees[f].provisional)
      out->extra_bytes += (int64_t)(rec->frees[f].hi - rec->frees[f].lo);
  for (int32_t b = 0; b < rec->live; ++b) out->extra_bytes += (int64_t)rec->live_size[b];
  return TPU_OK;
}

static tpu_status_t null_recording_text(const tpu_hal_recording_t* rec, char** out_text) {
  char* text = NULL;
  if (asprintf(&text, "null driver: no compiler; %d nodes, each its own kernel\n",
               (int)tpu_graph_node_count(rec->graph)) < 0)
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "recording text: no memory");
  *out_text = text;
  return TPU_OK;
}

const tpu_hal_driver_t tpu_null_driver = {
    .name = "null",
    .chip_count = null_chip_count,
    .chip_open = null_chip_open,
    .chip_close = null_chip_close,
    .memory_map = null_memory_map,
    .memory_unmap = null_memory_unmap,
    .owns_address = null_owns_address,
    .queue_create = null_queue_create,
    .queue_destroy = null_queue_destroy,
    .queue_submit = null_queue_submit,
    .queue_wait_idle = null_queue_wait_idle,
    .queue_is_idle = null_queue_is_idle,
    .queue_take_error = null_queue_take_error,
    .queue_add_stats = null_queue_add_stats,
    .event_create = tpu_host_event_create,
    .event_retain = tpu_host_event_retain,
    .event_release = tpu_host_event_release,
    .event_next_seq = tpu_host_event_next_seq,
    .event_last_seq = tpu_host_event_last_seq,
    .event_reached = tpu_host_event_reached,
    .event_wait = tpu_host_event_wait,
    .event_time_ns = tpu_host_event_time_ns,
    .executable_prepare = null_executable_prepare,
    .recording_text = null_recording_text,
};
