/* host_driver.c — the software TPU: a HAL driver that computes on the host's
 * cores but behaves as an accelerator.
 *
 *  - Chips: each reserves its own address range of `capacity` bytes (virtual
 *    memory, backed on first touch); device memory is carved from that range
 *    in segments, and returned pages are given back to the OS on unmap.
 *    Once sharing is enabled (memory_share, asked for by the collectives), new
 *    segments are mapped MAP_SHARED from one memfd per chip (sized to the
 *    capacity, sparse, at the segment's offset in the range) so processes of
 *    a communicator can map each other's device memory
 *    (memory_import opens the memfd through /proc/PID/fd); unmapping such a
 *    segment punches its pages out of the memfd and puts a private mapping
 *    back. Shared segments are not inherited by fork (MADV_DONTFORK).
 *  - Queues: one worker thread per queue runs commands in order; kernels
 *    split work over the shared compute pool (kernel.h).
 *  - Events: sequence counters with a timestamp of the last completion.
 *  - Executables: fusion programs (fusion.h), made by executable_prepare
 *    with the fusion compiler (host_compile.c; each queue keeps a memo of
 *    its repeated recordings for it); the handle is the program's address.
 *    An EXEC without one runs its graph node by node. The fusion compiler
 *    and executor and the kernels are this driver's implementation: no
 *    other layer compiles or runs a graph.
 * An error in a command is recorded on its queue (first one wins, named after
 * the op) and returned by the next queue_wait_idle, which clears it; the
 * commands after it, and the nodes after a failing one in the same graph or
 * program, still run (tpu_program_run). */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fusion/fusion.h"
#include "kernel.h"
#include "base/pool_spin.h"
#include "base/spin.h"
#include "hal/host_driver.h"
#include "host_event.h"
#include "tpu/config.h"
#include "tpu/hal.h"
#include "tpu/ops.h"
#include "tpu/profiler.h"
#include "tpu/runtime.h"

#define SEGMENT_ALIGN ((uint64_t)2 << 20)

/* ---- chips and their address ranges ------------------------------------- */

typedef struct range {
  uint64_t start, size;
} range_t;

struct tpu_hal_chip {
  int index;
  uint64_t base, capacity;
  pthread_mutex_t mu;
  range_t* free_ranges; /* sorted by start, coalesced */
  int free_count, free_capacity;
  int share_fd;          /* memfd of shareable segments, -1 until memory_share */
  uint8_t* shared_units; /* per SEGMENT_ALIGN unit of the range: 1 when mapped from share_fd */
};

static int host_chip_count(void) { return (int)tpu_config_int(TPU_CONFIG_NUM_CHIPS); }

static tpu_status_t host_chip_open(int index, uint64_t capacity, tpu_hal_chip_t** out_chip) {
  *out_chip = NULL;
  if (index < 0 || index >= host_chip_count() || capacity == 0 ||
      capacity > UINT64_MAX / 2)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "host driver: no chip %d of %llu bytes",
                           index, (unsigned long long)capacity);
  capacity = (capacity + SEGMENT_ALIGN - 1) / SEGMENT_ALIGN * SEGMENT_ALIGN;
  tpu_hal_chip_t* c = calloc(1, sizeof(*c));
  if (!c) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "chip allocation failed");
  /* Over-reserve by one alignment unit so segments are 2 MiB aligned. */
  void* p = mmap(NULL, capacity + SEGMENT_ALIGN, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    free(c);
    return tpu_status_make(TPU_CODE_UNAVAILABLE, "cannot reserve %llu bytes for chip %d",
                           (unsigned long long)capacity, index);
  }
  uint64_t base = ((uint64_t)(uintptr_t)p + SEGMENT_ALIGN - 1) / SEGMENT_ALIGN * SEGMENT_ALIGN;
  c->index = index;
  c->share_fd = -1;
  c->base = base;
  c->capacity = capacity;
  pthread_mutex_init(&c->mu, NULL);
  c->free_ranges = malloc(sizeof(range_t) * 16);
  if (!c->free_ranges) {
    munmap(p, capacity + SEGMENT_ALIGN);
    free(c);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "chip allocation failed");
  }
  c->free_capacity = 16;
  c->free_count = 1;
  c->free_ranges[0] = (range_t){base, capacity};
  *out_chip = c;
  return TPU_OK;
}

static void host_chip_close(tpu_hal_chip_t* c) {
  if (!c) return;
  /* The mapping is process-lifetime: chips close at exit, when queued work
   * of other threads may still be unwinding. Only bookkeeping is freed. */
  free(c->free_ranges);
  free(c->shared_units);
  if (c->share_fd >= 0) close(c->share_fd);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

/* Maps [addr, addr + bytes) from the chip's memfd when sharing is on (on
 * failure the segment stays private: it is just not shareable). */
static void map_shared(tpu_hal_chip_t* c, uint64_t addr, uint64_t bytes) {
  if (c->share_fd < 0) return;
  void* p = mmap((void*)(uintptr_t)addr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                 c->share_fd, (off_t)(addr - c->base));
  if (p == MAP_FAILED) { /* a failed MAP_FIXED may have dropped the old mapping: restore it */
    mmap((void*)(uintptr_t)addr, bytes, PROT_READ | PROT_WRITE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return;
  }
  madvise(p, bytes, MADV_DONTFORK);
  pthread_mutex_lock(&c->mu);
  memset(c->shared_units + (addr - c->base) / SEGMENT_ALIGN, 1, bytes / SEGMENT_ALIGN);
  pthread_mutex_unlock(&c->mu);
}

/* Gives the pages of [addr, addr + bytes) back: shared units are punched out
 * of the memfd and replaced by a private mapping, private ones dropped. */
static void release_pages(tpu_hal_chip_t* c, uint64_t addr, uint64_t bytes) {
  uint64_t end = addr + bytes;
  while (addr < end) {
    pthread_mutex_lock(&c->mu);
    bool shared = c->shared_units && c->shared_units[(addr - c->base) / SEGMENT_ALIGN];
    uint64_t run = addr;
    while (run < end && (c->shared_units && c->shared_units[(run - c->base) / SEGMENT_ALIGN]) == shared)
      run += SEGMENT_ALIGN;
    if (shared) memset(c->shared_units + (addr - c->base) / SEGMENT_ALIGN, 0, (run - addr) / SEGMENT_ALIGN);
    pthread_mutex_unlock(&c->mu);
    if (shared) {
      fallocate(c->share_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(addr - c->base),
                (off_t)(run - addr));
      mmap((void*)(uintptr_t)addr, run - addr, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    } else {
      madvise((void*)(uintptr_t)addr, run - addr, MADV_DONTNEED);
    }
    addr = run;
  }
}

static tpu_status_t host_memory_share(tpu_hal_chip_t* c) {
  pthread_mutex_lock(&c->mu);
  tpu_status_t s = TPU_OK;
  if (c->share_fd < 0) {
    uint8_t* units = calloc(c->capacity / SEGMENT_ALIGN, 1);
    int fd = units ? memfd_create("tpu_chip", MFD_CLOEXEC) : -1;
    if (fd < 0 || ftruncate(fd, (off_t)c->capacity) != 0) {
      s = tpu_status_make(TPU_CODE_UNAVAILABLE, "chip %d: cannot make shareable device memory", c->index);
      if (fd >= 0) close(fd);
      free(units);
    } else {
      c->shared_units = units;
      c->share_fd = fd;
    }
  }
  pthread_mutex_unlock(&c->mu);
  return s;
}

static bool host_memory_is_shared(tpu_hal_chip_t* c, uint64_t addr, uint64_t bytes) {
  if (bytes == 0) return true;
  if (addr < c->base || addr + bytes > c->base + c->capacity || addr + bytes < addr) return false;
  pthread_mutex_lock(&c->mu);
  bool ok = c->shared_units != NULL;
  for (uint64_t u = (addr - c->base) / SEGMENT_ALIGN; ok && u <= (addr + bytes - 1 - c->base) / SEGMENT_ALIGN; ++u)
    ok = c->shared_units[u] != 0;
  pthread_mutex_unlock(&c->mu);
  return ok;
}

static tpu_status_t host_memory_export(tpu_hal_chip_t* c, tpu_hal_memory_export_t* out) {
  if (c->share_fd < 0)
    return tpu_status_make(TPU_CODE_UNAVAILABLE, "chip %d: device memory is not shared", c->index);
  out->pid = (int32_t)getpid();
  out->handle = c->share_fd;
  out->base = c->base;
  out->capacity = c->capacity;
  return TPU_OK;
}

static tpu_status_t host_memory_import(const tpu_hal_memory_export_t* e, const uint8_t** out_base) {
  if (e->pid == (int32_t)getpid()) {
    *out_base = (const uint8_t*)(uintptr_t)e->base;
    return TPU_OK;
  }
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)e->pid, (int)e->handle);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return tpu_status_make(TPU_CODE_UNAVAILABLE, "cannot open process %d's device memory", (int)e->pid);
  void* p = mmap(NULL, e->capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED)
    return tpu_status_make(TPU_CODE_UNAVAILABLE, "cannot map process %d's device memory", (int)e->pid);
  madvise(p, e->capacity, MADV_DONTFORK);
  *out_base = p;
  return TPU_OK;
}

static void host_memory_unimport(const tpu_hal_memory_export_t* e, const uint8_t* base) {
  if (e->pid != (int32_t)getpid() && base) munmap((void*)(uintptr_t)base, e->capacity);
}

static tpu_status_t host_memory_map(tpu_hal_chip_t* c, uint64_t bytes, uint64_t* out_addr) {
  *out_addr = 0;
  if (bytes == 0 || bytes > c->capacity)
    return tpu_status_make(bytes ? TPU_CODE_OUT_OF_MEMORY : TPU_CODE_INVALID_ARGUMENT,
                           "chip %d cannot map %llu bytes", c->index, (unsigned long long)bytes);
  bytes = (bytes + SEGMENT_ALIGN - 1) / SEGMENT_ALIGN * SEGMENT_ALIGN;
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->free_count; ++i) {
    range_t* r = &c->free_ranges[i];
    if (r->size < bytes) continue;
    *out_addr = r->start;
    r->start += bytes;
    r->size -= bytes;
    if (r->size == 0) {
      memmove(r, r + 1, sizeof(range_t) * (size_t)(c->free_count - i - 1));
      c->free_count--;
    }
    pthread_mutex_unlock(&c->mu);
    map_shared(c, *out_addr, bytes);
    return TPU_OK;
  }
  pthread_mutex_unlock(&c->mu);
  return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "chip %d has no free range of %llu bytes",
                         c->index, (unsigned long long)bytes);
}

static void host_memory_unmap(tpu_hal_chip_t* c, uint64_t addr, uint64_t bytes) {
  bytes = (bytes + SEGMENT_ALIGN - 1) / SEGMENT_ALIGN * SEGMENT_ALIGN;
  release_pages(c, addr, bytes); /* give the pages back */
  pthread_mutex_lock(&c->mu);
  int i = 0;
  while (i < c->free_count && c->free_ranges[i].start < addr) i++;
  int merged_prev = i > 0 && c->free_ranges[i - 1].start + c->free_ranges[i - 1].size == addr;
  int merged_next = i < c->free_count && addr + bytes == c->free_ranges[i].start;
  if (merged_prev && merged_next) {
    c->free_ranges[i - 1].size += bytes + c->free_ranges[i].size;
    memmove(&c->free_ranges[i], &c->free_ranges[i + 1],
            sizeof(range_t) * (size_t)(c->free_count - i - 1));
    c->free_count--;
  } else if (merged_prev) {
    c->free_ranges[i - 1].size += bytes;
  } else if (merged_next) {
    c->free_ranges[i].start = addr;
    c->free_ranges[i].size += bytes;
  } else {
    if (c->free_count == c->free_capacity) {
      range_t* grown = realloc(c->free_ranges, sizeof(range_t) * (size_t)c->free_capacity * 2);
      if (!grown) { /* cannot record it: the range is lost, never reused twice */
        pthread_mutex_unlock(&c->mu);
        return;
      }
      c->free_ranges = grown;
      c->free_capacity *= 2;
    }
    memmove(&c->free_ranges[i + 1], &c->free_ranges[i],
            sizeof(range_t) * (size_t)(c->free_count - i));
    c->free_ranges[i] = (range_t){addr, bytes};
    c->free_count++;
  }
  pthread_mutex_unlock(&c->mu);
}

static bool host_owns_address(const tpu_hal_chip_t* c, uint64_t addr) {
  return addr >= c->base && addr < c->base + c->capacity;
}

/* ---- events ------------------------------------------------------------- */

/* ---- executables ----------------------------------------------------------- */

/* The handle is the program's address: no allocation per flush. */
tpu_hal_executable_t* tpu_host_executable(tpu_program_t* program) {
  return (tpu_hal_executable_t*)(void*)program;
}

static tpu_program_t* program_of(tpu_hal_executable_t* executable) {
  return (tpu_program_t*)(void*)executable;
}

static void host_executable_retain(tpu_hal_executable_t* e) { tpu_program_retain(program_of(e)); }
static void host_executable_release(tpu_hal_executable_t* e) { tpu_program_release(program_of(e)); }

/* The memo is the queue's; the compiler side is host_compile.c. */
static tpu_status_t host_executable_prepare(tpu_hal_queue_t* q, tpu_hal_recording_t* rec,
                                            tpu_hal_prepared_t* out);

/* ---- queues --------------------------------------------------------------- */

struct tpu_hal_queue {
  tpu_hal_chip_t* chip;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t has_work, idle;
  tpu_hal_command_t* ring;
  size_t head, count, capacity;
  bool running;  /* a command is executing */
  bool sleeping; /* the worker waits on has_work: submitters must signal */
  bool inline_active; /* a submitter is running a small command itself */
  bool stop;
  int64_t poll_ns; /* how long the idle worker polls now (wait_for_work) */
  tpu_status_t error; /* first failure since the last wait_idle */
  tpu_hal_queue_stats_t stats; /* under mu */
  /* The queue's repeated recordings: used only by executable_prepare,
   * whose calls for one queue never overlap (tpu/hal.h); not under mu. */
  tpu_flush_memo_t memo;
};

static void command_dispose(tpu_hal_command_t* cmd) {
  if (cmd->kind == TPU_HAL_CMD_EXEC) {
    tpu_graph_release(cmd->u.exec.graph);
    host_executable_release(cmd->u.exec.executable);
  }
  if (cmd->kind == TPU_HAL_CMD_RECORD || cmd->kind == TPU_HAL_CMD_WAIT)
    tpu_host_event_release(cmd->u.event.event);
}

/* Keeps the first error since the last wait_idle; caller holds q->mu. */
static void record_error(tpu_hal_queue_t* q, tpu_status_t s) {
  if (s == TPU_OK) return;
  if (q->error == TPU_OK) q->error = s;
  else tpu_status_free(s);
}

/* Each command reports what it wrote when it ends, so that the kernels'
 * weight cache drops copies of overwritten bytes (kernel.h). */
/* The profiler's event for a copy or host function that ran from t0 on. */
static void profile_command(const tpu_hal_queue_t* q, const tpu_hal_command_t* cmd, int64_t t0) {
  static const char* const copy_names[TPU_HAL_COPY_KIND_COUNT] = {"memcpy H2D", "memcpy D2H",
                                                                 "memcpy D2D"};
  tpu_prof_event_t ev = {.chip = (int16_t)q->chip->index, .stream = cmd->stream,
                         .start_ns = t0, .end_ns = tpu_profiler_now_ns(),
                         .correlation = cmd->correlation, .bytes = -1, .flops = -1};
  const char* name;
  if (cmd->kind == TPU_HAL_CMD_COPY) {
    ev.kind = TPU_PROF_COPY;
    ev.bytes = (int64_t)cmd->u.copy.bytes;
    name = copy_names[cmd->u.copy.kind]; /* checked on submission */
  } else {
    ev.kind = cmd->u.host.collective ? TPU_PROF_COLLECTIVE : TPU_PROF_HOST_FN;
    name = cmd->u.host.name ? cmd->u.host.name : "host_fn";
  }
  snprintf(ev.name, sizeof(ev.name), "%s", name);
  tpu_profiler_record(&ev);
}

static tpu_status_t run_command(tpu_hal_queue_t* q, tpu_hal_command_t* cmd) {
  bool profile = tpu_profiler_enabled();
  switch (cmd->kind) {
    case TPU_HAL_CMD_EXEC: {
      /* A strict graph (no executable) or a deferred program: every node
       * runs, the first error is returned (tpu_program_run). */
      tpu_exec_ctx_t ctx = {.chip_index = q->chip->index, .graph = cmd->u.exec.graph,
                            .profile = profile, .stream_index = cmd->stream,
                            .correlation = cmd->correlation};
      tpu_status_t s =
          tpu_program_run(program_of(cmd->u.exec.executable), cmd->u.exec.graph, &ctx);
      tpu_weight_cache_note_graph(cmd->u.exec.graph);
      return s;
    }
    case TPU_HAL_CMD_COPY: {
      int64_t t0 = profile ? tpu_profiler_now_ns() : 0;
      if (cmd->u.copy.bytes) {
        memmove((void*)(uintptr_t)cmd->u.copy.dst, (const void*)(uintptr_t)cmd->u.copy.src,
                cmd->u.copy.bytes);
        tpu_weight_cache_note_write(cmd->u.copy.dst, cmd->u.copy.dst + cmd->u.copy.bytes);
      }
      if (profile) profile_command(q, cmd, t0);
      return TPU_OK;
    }
    case TPU_HAL_CMD_RECORD:
      tpu_host_event_complete(cmd->u.event.event, cmd->u.event.seq);
      return TPU_OK;
    case TPU_HAL_CMD_WAIT:
      tpu_host_event_wait(cmd->u.event.event, cmd->u.event.seq);
      return TPU_OK;
    case TPU_HAL_CMD_HOST_FN: { /* collectives: may write anything */
      int64_t t0 = profile ? tpu_profiler_now_ns() : 0;
      cmd->u.host.fn(cmd->u.host.arg);
      tpu_weight_cache_note_write_all();
      if (profile) profile_command(q, cmd, t0);
      return TPU_OK;
    }
    case TPU_HAL_CMD_KIND_COUNT: /* refused on submission */
      break;
  }
  return tpu_status_make(TPU_CODE_INTERNAL, "unknown command %d", (int)cmd->kind);
}

/* How long an idle worker polls for new work before it sleeps. Polling
 * spares a submission the wake-up of a sleeping worker, but on a machine
 * with few cores a polling worker also takes cycles from the thread that
 * submits. So the poll adapts per queue, by the compute pool's rule
 * (pool_spin.h): it starts at START_SPIN_US; a worker woken soon after it
 * fell asleep (the host came back just after the poll gave up) doubles it,
 * up to TORCH_TPU_QUEUE_SPIN_US (tpu/config.h, default 200; 0: never
 * poll); a poll that runs out halves it; a poll that saw itself descheduled
 * (an oversubscribed core) drops to the minimum. */
#define START_SPIN_US 20

static int64_t spin_max_from_env(void) { return tpu_config_int(TPU_CONFIG_QUEUE_SPIN_US) * 1000; }

/* Read once, lazily, by every queue's worker: workers that ask at the same
 * time each compute the same value and store it, so relaxed atomics are
 * enough (the value is all that is shared). */
static int64_t spin_max_ns(void) {
  static _Atomic int64_t cached = -1;
  int64_t ns = atomic_load_explicit(&cached, memory_order_relaxed);
  if (ns < 0) {
    ns = spin_max_from_env();
    atomic_store_explicit(&cached, ns, memory_order_relaxed);
  }
  return ns;
}


/* Caller holds q->mu; returns holding it, with work queued (and no inline
 * command running) or the queue stopping. Adapts q->poll_ns. */
static void wait_for_work(tpu_hal_queue_t* q) {
  int64_t max = spin_max_ns();
  if (q->count == 0 && !q->stop && q->poll_ns > 0 && max > 0) {
    int64_t start = tpu_monotonic_ns(), last = start, until = start + q->poll_ns;
    bool found = false, descheduled = false;
    pthread_mutex_unlock(&q->mu);
    for (;;) {
      if (__atomic_load_n(&q->count, __ATOMIC_ACQUIRE) != 0) {
        found = true;
        break;
      }
      int64_t t = tpu_monotonic_ns();
      if (t - last >= POOL_SPIN_GAP_NS) descheduled = true;
      if (t >= until) break;
      last = t;
      for (int i = 0; i < 64; ++i) tpu_cpu_relax();
    }
    pthread_mutex_lock(&q->mu);
    q->poll_ns = tpu_pool_spin_next(q->poll_ns, max,
                                    descheduled ? POOL_SPIN_DESCHEDULED
                                    : found     ? POOL_SPIN_FOUND
                                                : POOL_SPIN_EXPIRED,
                                    0);
  }
  int64_t asleep = -1;
  while ((q->count == 0 || q->inline_active) && !q->stop) {
    if (asleep < 0) asleep = tpu_monotonic_ns();
    q->sleeping = true;
    pthread_cond_wait(&q->has_work, &q->mu);
    q->sleeping = false;
  }
  if (asleep >= 0 && q->count > 0 && max > 0)
    q->poll_ns = tpu_pool_spin_next(q->poll_ns, max,
                                    tpu_monotonic_ns() - asleep < max ? POOL_SPIN_WOKEN_SOON
                                                            : POOL_SPIN_WOKEN_LATE,
                                    0); /* the queue keeps plain doubling: issue 30's drift runs */
}

static void* queue_main(void* arg) {
  tpu_hal_queue_t* q = arg;
  char name[16];
  snprintf(name, sizeof(name), "tpu%d-queue", q->chip->index);
  pthread_setname_np(pthread_self(), name);
  tpu_parallel_device_thread();
  /* Other chips' workers stay free: pinned to one core they would queue
   * behind each other whenever two chips run at once. */
  if (q->chip->index == 0) tpu_parallel_pin_caller();
  pthread_mutex_lock(&q->mu);
  /* Commands are taken in batches: one lock round trip per batch keeps the
   * queue's cache lines from bouncing between the submitting core and this
   * one on every op. */
  enum { BATCH = 32 };
  tpu_hal_command_t batch[BATCH];
  for (;;) {
    wait_for_work(q);
    if (q->count == 0 && q->stop) break;
    size_t n = q->count < BATCH ? q->count : BATCH;
    for (size_t i = 0; i < n; ++i) {
      batch[i] = q->ring[q->head];
      q->head = (q->head + 1) % q->capacity;
    }
    /* running before count: a polling waiter must never see neither. */
    __atomic_store_n(&q->running, true, __ATOMIC_RELEASE);
    __atomic_store_n(&q->count, q->count - n, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&q->mu);
    tpu_status_t first = TPU_OK;
    for (size_t i = 0; i < n; ++i) {
      tpu_status_t s = run_command(q, &batch[i]);
      command_dispose(&batch[i]);
      if (first == TPU_OK) first = s;
      else tpu_status_free(s);
    }
    pthread_mutex_lock(&q->mu);
    record_error(q, first);
    __atomic_store_n(&q->running, false, __ATOMIC_RELEASE);
    if (q->count == 0) pthread_cond_broadcast(&q->idle);
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

static tpu_status_t host_executable_prepare(tpu_hal_queue_t* q, tpu_hal_recording_t* rec,
                                            tpu_hal_prepared_t* out) {
  return tpu_host_compile(&q->memo, rec, out);
}

static tpu_status_t host_queue_create(tpu_hal_chip_t* chip, tpu_hal_queue_t** out_queue) {
  tpu_hal_queue_t* q = calloc(1, sizeof(*q));
  if (!q) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "queue allocation failed");
  q->chip = chip;
  q->capacity = 256;
  q->poll_ns = START_SPIN_US * 1000 < spin_max_ns() ? START_SPIN_US * 1000 : spin_max_ns();
  q->ring = malloc(sizeof(tpu_hal_command_t) * q->capacity);
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->has_work, NULL);
  pthread_cond_init(&q->idle, NULL);
  if (!q->ring || pthread_create(&q->thread, NULL, queue_main, q) != 0) {
    free(q->ring);
    free(q);
    return tpu_status_make(TPU_CODE_UNAVAILABLE, "cannot start a queue worker");
  }
  *out_queue = q;
  return TPU_OK;
}

static void host_queue_destroy(tpu_hal_queue_t* q) {
  if (!q) return;
  pthread_mutex_lock(&q->mu);
  q->stop = true;
  pthread_cond_signal(&q->has_work);
  pthread_mutex_unlock(&q->mu);
  pthread_join(q->thread, NULL);
  tpu_status_free(q->error);
  tpu_flush_memo_free(&q->memo);
  free(q->ring);
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->has_work);
  pthread_cond_destroy(&q->idle);
  free(q);
}

/* Which thread runs a command. The queue's worker runs it, in order, while
 * the submitting thread goes on (strict eager's asynchrony) — but when the
 * queue is idle, handing a command over costs more than running it for:
 *  - small work (SMALL_ELEMENTS elements touched, or a small copy): the
 *    cross-core hand-off alone costs more than the work;
 *  - work up to ASLEEP_ELEMENTS when the worker sleeps: waking it costs
 *    tens of microseconds on a virtual machine's idle core, and the host,
 *    having been away from the device for longer than the worker polls
 *    (wait_for_work), has nothing in flight to overlap it with;
 *  - work the submitter waits for at once (cmd->host_waits: a host read's
 *    program and copy), whatever its size: the submitter would only sleep
 *    while another thread ran it.
 * Without these the regime a loop settles in would hang on a race between
 * the host's think time and the worker's poll, and could flip after any
 * number of steps. Order is kept: nothing is queued or running ahead of an
 * inline command, and later submissions queue behind it; its error is
 * recorded on the queue like any other, for the next synchronisation. A
 * graph of several nodes runs here only as a compiled program. */
#define SMALL_ELEMENTS 4096
#define ASLEEP_ELEMENTS 65536
#define SMALL_COPY_BYTES 16384

/* Elements the command touches (capped past ASLEEP_ELEMENTS), or INT64_MAX
 * when it never runs inline unless the host waits for it. */
static int64_t inline_weight(const tpu_hal_command_t* cmd) {
  if (cmd->kind == TPU_HAL_CMD_COPY)
    return cmd->u.copy.bytes <= SMALL_COPY_BYTES ? 0 : INT64_MAX;
  if (cmd->kind != TPU_HAL_CMD_EXEC) return INT64_MAX;
  const tpu_graph_t* graph = cmd->u.exec.graph;
  int32_t n = tpu_graph_node_count(graph);
  if (n != 1 && !cmd->u.exec.executable) return INT64_MAX;
  int64_t total = 0;
  for (int32_t k = 0; k < n && total <= ASLEEP_ELEMENTS; ++k) {
    const tpu_node_t* node = tpu_graph_node(graph, k);
    for (int32_t i = 0; i < node->num_outputs; ++i) total += tpu_view_numel(&node->outputs[i]);
    for (int32_t i = 0; i < node->num_inputs; ++i)
      if (node->inputs[i].kind == TPU_VALUE_VIEW) total += tpu_view_numel(&node->inputs[i].u.view);
  }
  return total;
}

/* Under q->mu. */
static bool runs_inline(const tpu_hal_queue_t* q, const tpu_hal_command_t* cmd, int64_t weight) {
  if (q->count != 0 || q->running || q->inline_active) return false;
  if (cmd->host_waits && (cmd->kind == TPU_HAL_CMD_EXEC || cmd->kind == TPU_HAL_CMD_COPY))
    return true;
  return weight <= (q->sleeping ? ASLEEP_ELEMENTS : SMALL_ELEMENTS);
}

/* tpu_hal_command_check, and a WAIT must be for a reserved record. */
static tpu_status_t check_command(const tpu_hal_command_t* cmd) {
  TPU_RETURN_IF_ERROR(tpu_hal_command_check(cmd));
  if (cmd->kind == TPU_HAL_CMD_WAIT && cmd->u.event.seq > tpu_host_event_last_seq(cmd->u.event.event))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "HAL command: WAIT for record %llu of an event recorded %llu times",
                           (unsigned long long)cmd->u.event.seq,
                           (unsigned long long)tpu_host_event_last_seq(cmd->u.event.event));
  return TPU_OK;
}

static tpu_status_t host_queue_submit(tpu_hal_queue_t* q, tpu_hal_command_t* cmd) {
  tpu_status_t bad = check_command(cmd);
  if (bad != TPU_OK) {
    if (cmd) command_dispose(cmd);
    return bad;
  }
  int64_t weight = inline_weight(cmd);
  pthread_mutex_lock(&q->mu);
  if (runs_inline(q, cmd, weight)) {
    __atomic_store_n(&q->inline_active, true, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&q->mu);
    tpu_status_t s = run_command(q, cmd);
    command_dispose(cmd);
    pthread_mutex_lock(&q->mu);
    record_error(q, s);
    __atomic_store_n(&q->inline_active, false, __ATOMIC_RELEASE);
    q->stats.inline_commands++;
    bool wake = q->count > 0 && q->sleeping;
    if (wake) q->stats.worker_wakeups++;
    if (q->count == 0) pthread_cond_broadcast(&q->idle);
    pthread_mutex_unlock(&q->mu);
    if (wake) pthread_cond_signal(&q->has_work);
    return TPU_OK;
  }
  if (q->count == q->capacity) {
    size_t cap = q->capacity * 2;
    tpu_hal_command_t* ring = malloc(sizeof(*ring) * cap);
    if (!ring) {
      pthread_mutex_unlock(&q->mu);
      command_dispose(cmd);
      return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "queue growth failed");
    }
    for (size_t i = 0; i < q->count; ++i) ring[i] = q->ring[(q->head + i) % q->capacity];
    free(q->ring);
    q->ring = ring;
    q->head = 0;
    q->capacity = cap;
  }
  q->ring[(q->head + q->count) % q->capacity] = *cmd;
  __atomic_store_n(&q->count, q->count + 1, __ATOMIC_RELEASE);
  q->stats.queued_commands++;
  bool wake = q->sleeping;
  if (wake) q->stats.worker_wakeups++;
  pthread_mutex_unlock(&q->mu);
  if (wake) pthread_cond_signal(&q->has_work);
  return TPU_OK;
}

/* How long a synchronising caller polls before it sleeps: short eager work
 * (an .item() after a few small ops) finishes within it, sparing a wake-up. */
#define SYNC_SPIN_NS 20000

static tpu_status_t host_queue_wait_idle(tpu_hal_queue_t* q) {
  int64_t until = tpu_monotonic_ns() + SYNC_SPIN_NS;
  while ((__atomic_load_n(&q->count, __ATOMIC_ACQUIRE) > 0 ||
          __atomic_load_n(&q->running, __ATOMIC_ACQUIRE) ||
          __atomic_load_n(&q->inline_active, __ATOMIC_ACQUIRE)) &&
         tpu_monotonic_ns() < until) {
    for (int i = 0; i < 16; ++i) tpu_cpu_relax();
  }
  pthread_mutex_lock(&q->mu);
  q->stats.syncs++;
  if (q->count > 0 || q->running || q->inline_active) q->stats.sync_sleeps++;
  while (q->count > 0 || q->running || q->inline_active) pthread_cond_wait(&q->idle, &q->mu);
  tpu_status_t s = q->error;
  q->error = TPU_OK;
  pthread_mutex_unlock(&q->mu);
  return s;
}

static bool host_queue_is_idle(tpu_hal_queue_t* q) {
  pthread_mutex_lock(&q->mu);
  bool idle = q->count == 0 && !q->running && !q->inline_active;
  pthread_mutex_unlock(&q->mu);
  return idle;
}

static tpu_status_t host_queue_take_error(tpu_hal_queue_t* q) {
  pthread_mutex_lock(&q->mu);
  tpu_status_t s = q->error;
  q->error = TPU_OK;
  pthread_mutex_unlock(&q->mu);
  return s;
}

static void host_queue_add_stats(tpu_hal_queue_t* q, tpu_hal_queue_stats_t* out_stats) {
  pthread_mutex_lock(&q->mu);
  out_stats->inline_commands += q->stats.inline_commands;
  out_stats->queued_commands += q->stats.queued_commands;
  out_stats->worker_wakeups += q->stats.worker_wakeups;
  out_stats->syncs += q->stats.syncs;
  out_stats->sync_sleeps += q->stats.sync_sleeps;
  pthread_mutex_unlock(&q->mu);
}

/* The matrix unit's blocked weight copies are derived from device memory:
 * a dead tensor's go, and empty_cache drops them all (mxu_pack.h). */
static void host_memory_released(tpu_hal_chip_t* chip, uint64_t addr, uint64_t bytes) {
  (void)chip;
  tpu_weight_cache_note_write(addr, addr + bytes);
}

static void host_caches_trim(tpu_hal_chip_t* chip) {
  (void)chip;
  tpu_weight_cache_clear();
}

const tpu_hal_driver_t tpu_host_driver = {
    .name = "host",
    .chip_count = host_chip_count,
    .chip_open = host_chip_open,
    .chip_close = host_chip_close,
    .memory_map = host_memory_map,
    .memory_unmap = host_memory_unmap,
    .owns_address = host_owns_address,
    .memory_share = host_memory_share,
    .memory_is_shared = host_memory_is_shared,
    .memory_export = host_memory_export,
    .memory_import = host_memory_import,
    .memory_unimport = host_memory_unimport,
    .queue_create = host_queue_create,
    .queue_destroy = host_queue_destroy,
    .queue_submit = host_queue_submit,
    .queue_wait_idle = host_queue_wait_idle,
    .queue_is_idle = host_queue_is_idle,
    .queue_take_error = host_queue_take_error,
    .queue_add_stats = host_queue_add_stats,
    .event_create = tpu_host_event_create,
    .event_retain = tpu_host_event_retain,
    .event_release = tpu_host_event_release,
    .event_next_seq = tpu_host_event_next_seq,
    .event_last_seq = tpu_host_event_last_seq,
    .event_reached = tpu_host_event_reached,
    .event_wait = tpu_host_event_wait,
    .event_time_ns = tpu_host_event_time_ns,
    .executable_prepare = host_executable_prepare,
    .recording_text = tpu_host_recording_text,
    .fuses_epilogues = tpu_fusion_epilogues_enabled,
    .memory_released = host_memory_released,
    .caches_trim = host_caches_trim,
    .executable_retain = host_executable_retain,
    .executable_release = host_executable_release,
};
