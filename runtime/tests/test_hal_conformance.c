/* test_hal_conformance.c — the HAL conformance suite: one table of cases
 * (chips, memory, copies, submission order, events, host functions, bad
 * descriptors, asynchronous errors, graphs, executables) run against every registered
 * driver (tpu_hal_drivers), straight through the driver table with no
 * runtime above it. Device memory is only ever read back through D2H copies,
 * as it would have to be on hardware.
 *
 * What a driver may legitimately differ in is listed once, in g_traits;
 * a registered driver without an entry there fails the suite, so a new
 * driver cannot go untested. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "tpu/hal.h"
#include "tpu/ops.h"

typedef struct traits {
  const char* name;
  /* EXEC runs graphs (else it records UNIMPLEMENTED on the queue). */
  bool runs_graphs;
  /* executable_prepare returns an executable (else none: node by node). */
  bool compiles;
} traits_t;

static const traits_t g_traits[] = {
    {"host", .runs_graphs = true, .compiles = true},
    {"null", .runs_graphs = false, .compiles = false},
};

#define CHIP_CAPACITY ((uint64_t)64 << 20)

/* The case running now, for failure messages. */
static const char* g_driver_name = "?";
static const char* g_case_name = "?";

#define HCHECK(cond)                                                                     \
  do {                                                                                   \
    if (!(cond))                                                                         \
      tpu_test_fail(__FILE__, __LINE__, "[%s driver, %s] CHECK(%s)", g_driver_name,     \
                    g_case_name, #cond);                                                 \
  } while (0)

#define HCHECK_OK(expr)                                                                  \
  do {                                                                                   \
    tpu_status_t s_ = (expr);                                                            \
    if (s_ != TPU_OK) {                                                                  \
      tpu_test_fail(__FILE__, __LINE__, "[%s driver, %s] %s: %s", g_driver_name,        \
                    g_case_name, #expr, tpu_status_message(s_));                         \
      tpu_status_free(s_);                                                               \
    }                                                                                    \
  } while (0)

/* Checks (and frees) a status of the given code. */
#define HCHECK_CODE(expr, code)                                                          \
  do {                                                                                   \
    tpu_status_t s_ = (expr);                                                            \
    if (tpu_status_code(s_) != (code))                                                   \
      tpu_test_fail(__FILE__, __LINE__, "[%s driver, %s] %s: got %s (%s), want %s",     \
                    g_driver_name, g_case_name, #expr,                                   \
                    tpu_status_code_name(tpu_status_code(s_)), tpu_status_message(s_),   \
                    tpu_status_code_name(code));                                         \
    tpu_status_free(s_);                                                                 \
  } while (0)

/* ---- helpers ------------------------------------------------------------- */

typedef struct rig {
  const tpu_hal_driver_t* d;
  tpu_hal_chip_t* chip;
  tpu_hal_queue_t* q;
} rig_t;

static bool rig_open(const tpu_hal_driver_t* d, rig_t* r) {
  *r = (rig_t){.d = d};
  HCHECK_OK(d->chip_open(0, CHIP_CAPACITY, &r->chip));
  if (!r->chip) return false;
  HCHECK_OK(d->queue_create(r->chip, &r->q));
  return r->q != NULL;
}

static void rig_close(rig_t* r) {
  if (r->q) HCHECK_OK(r->d->queue_wait_idle(r->q));
  r->d->queue_destroy(r->q);
  r->d->chip_close(r->chip);
}

static tpu_status_t copy(rig_t* r, tpu_hal_copy_kind_t kind, uint64_t dst, uint64_t src,
                         size_t bytes) {
  tpu_hal_command_t c = {.kind = TPU_HAL_CMD_COPY};
  c.u.copy.kind = kind;
  c.u.copy.dst = dst;
  c.u.copy.src = src;
  c.u.copy.bytes = bytes;
  return r->d->queue_submit(r->q, &c);
}

static tpu_status_t host_fn(rig_t* r, void (*fn)(void*), void* arg) {
  tpu_hal_command_t c = {.kind = TPU_HAL_CMD_HOST_FN};
  c.u.host.fn = fn;
  c.u.host.arg = arg;
  return r->d->queue_submit(r->q, &c);
}

static tpu_status_t record(rig_t* r, tpu_hal_event_t* e, uint64_t* out_seq) {
  tpu_hal_command_t c = {.kind = TPU_HAL_CMD_RECORD};
  r->d->event_retain(e);
  c.u.event.event = e;
  c.u.event.seq = *out_seq = r->d->event_next_seq(e);
  return r->d->queue_submit(r->q, &c);
}

static tpu_status_t wait_for(rig_t* r, tpu_hal_event_t* e, uint64_t seq) {
  tpu_hal_command_t c = {.kind = TPU_HAL_CMD_WAIT};
  r->d->event_retain(e);
  c.u.event.event = e;
  c.u.event.seq = seq;
  return r->d->queue_submit(r->q, &c);
}

static uint64_t hp(const void* p) { return (uint64_t)(uintptr_t)p; }

/* ---- cases ---------------------------------------------------------------- */

static void chips_enumerate_open_close(const tpu_hal_driver_t* d, const traits_t* t) {
  int n = d->chip_count();
  HCHECK(n >= 1);
  for (int i = 0; i < n; ++i) {
    tpu_hal_chip_t* chip = NULL;
    HCHECK_OK(d->chip_open(i, CHIP_CAPACITY, &chip));
    HCHECK(chip != NULL);
    d->chip_close(chip);
  }
  tpu_hal_chip_t* chip = (tpu_hal_chip_t*)&n; /* must be cleared on failure */
  HCHECK_CODE(d->chip_open(n, CHIP_CAPACITY, &chip), TPU_CODE_INVALID_ARGUMENT);
  HCHECK(chip == NULL);
  HCHECK_CODE(d->chip_open(-1, CHIP_CAPACITY, &chip), TPU_CODE_INVALID_ARGUMENT);
  HCHECK_CODE(d->chip_open(0, 0, &chip), TPU_CODE_INVALID_ARGUMENT);
  HCHECK(chip == NULL);
  d->chip_close(NULL);
  d->queue_destroy(NULL);
  d->event_release(NULL);
  if (d->executable_release) d->executable_release(NULL);
}

static void memory_map_unmap_and_capacity(const tpu_hal_driver_t* d, const traits_t* t) {
  rig_t r;
  if (!rig_open(d, &r)) {
    rig_close(&r);
    return;
  }
  uint64_t a = 0, b = 0;
  HCHECK_OK(d->memory_map(r.chip, 1 << 20, &a));
  HCHECK_OK(d->memory_map(r.chip, 3 << 20, &b));
  HCHECK(a != 0 && b != 0 && a != b);
  HCHECK(d->owns_address(r.chip, a) && d->owns_address(r.chip, b + (3 << 20) - 1));
  HCHECK(!d->owns_address(r.chip, 0));
  HCHECK(a + (1 << 20) <= b || b + (3 << 20) <= a); /* disjoint */
  uint64_t z = 7;
  HCHECK_CODE(d->memory_map(r.chip, 0, &z), TPU_CODE_INVALID_ARGUMENT);
  HCHECK_CODE(d->memory_map(r.chip, CHIP_CAPACITY + 1, &z), TPU_CODE_OUT_OF_MEMORY);
  HCHECK_CODE(d->memory_map(r.chip, UINT64_MAX - 4096, &z), TPU_CODE_OUT_OF_MEMORY);
  d->memory_unmap(r.chip, a, 1 << 20);
  d->memory_unmap(r.chip, b, 3 << 20);
  /* Fill the chip in 8 MiB segments: the capacity holds exactly 8; the next
   * map is OUT_OF_MEMORY; unmapping one makes room again. */
  uint64_t seg[9] = {0};
  int mapped = 0;
  for (int i = 0; i < 8; ++i) {
    tpu_status_t s = d->memory_map(r.chip, 8 << 20, &seg[i]);
    HCHECK_OK(s);
    mapped += seg[i] != 0;
  }
  HCHECK(mapped == 8);
  HCHECK_CODE(d->memory_map(r.chip, 8 << 20, &seg[8]), TPU_CODE_OUT_OF_MEMORY);
  d->memory_unmap(r.chip, seg[3], 8 << 20);
  HCHECK_OK(d->memory_map(r.chip, 8 << 20, &seg[8]));
  HCHECK(seg[8] == seg[3]); /* the only room left */
  seg[3] = seg[8];
  for (int i = 0; i < 8; ++i) d->memory_unmap(r.chip, seg[i], 8 << 20);
  rig_close(&r);
}

/* Small segments side by side (several may share a host page): unmapping one
 * leaves its neighbours' bytes as they were, and mapping its range again
 * reads zeros. */
static void unmap_keeps_neighbours_and_remap_reads_zeros(const tpu_hal_driver_t* d,
                                                         const traits_t* t) {
  rig_t r;
  if (!rig_open(d, &r)) {
    rig_close(&r);
    return;
  }
  enum { K = 8, B = 1000 };
  uint64_t seg[K] = {0};
  uint8_t src[B], back[B];
  for (int i = 0; i < K; ++i) {
    HCHECK_OK(d->memory_map(r.chip, B, &seg[i]));
    memset(src, 0x40 + i, B);
    if (seg[i]) HCHECK_OK(copy(&r, TPU_HAL_COPY_H2D, seg[i], hp(src), B));
  }
  HCHECK_OK(d->queue_wait_idle(r.q));
  for (int i = 1; i < K; i += 2) d->memory_unmap(r.chip, seg[i], B);
  for (int i = 0; i < K; i += 2) {
    memset(back, 0, B);
    if (seg[i]) HCHECK_OK(copy(&r, TPU_HAL_COPY_D2H, hp(back), seg[i], B));
    HCHECK_OK(d->queue_wait_idle(r.q));
    int wrong = 0;
    for (int j = 0; j < B; ++j) wrong += back[j] != 0x40 + i;
    HCHECK(wrong == 0);
  }
  for (int i = 1; i < K; i += 2) {
    HCHECK_OK(d->memory_map(r.chip, B, &seg[i]));
    memset(back, 0xff, B);
    if (seg[i]) HCHECK_OK(copy(&r, TPU_HAL_COPY_D2H, hp(back), seg[i], B));
    HCHECK_OK(d->queue_wait_idle(r.q));
    int nonzero = 0;
    for (int j = 0; j < B; ++j) nonzero += back[j] != 0;
    HCHECK(nonzero == 0);
  }
  for (int i = 0; i < K; ++i)
    if (seg[i]) d->memory_unmap(r.chip, seg[i], B);
  rig_close(&r);
}

/* memory_released and caches_trim (optional) drop only what a driver
 * derived from memory: the bytes stay, and the range stays mapped and
 * usable. fuses_epilogues (optional) answers without side effects. */
static void released_memory_keeps_its_bytes(const tpu_hal_driver_t* d, const traits_t* t) {
  rig_t r;
  if (!rig_open(d, &r)) {
    rig_close(&r);
    return;
  }
  enum { B = 4096 };
  uint64_t seg = 0;
  uint8_t src[B], back[B];
  HCHECK_OK(d->memory_map(r.chip, B, &seg));
  for (int j = 0; j < B; ++j) src[j] = (uint8_t)(j * 7 + 1);
  if (seg) HCHECK_OK(copy(&r, TPU_HAL_COPY_H2D, seg, hp(src), B));
  HCHECK_OK(d->queue_wait_idle(r.q));
  if (seg && d->memory_released) d->memory_released(r.chip, seg + 256, B / 2);
  if (d->caches_trim) d->caches_trim(r.chip);
  if (d->fuses_epilogues) (void)d->fuses_epilogues();
  memset(back, 0, B);
  if (seg) HCHECK_OK(copy(&r, TPU_HAL_COPY_D2H, hp(back), seg, B));
  HCHECK_OK(d->queue_wait_idle(r.q));
  HCHECK(memcmp(back, src, B) == 0);
  if (seg) d->memory_unmap(r.chip, seg, B);
  rig_close(&r);
}

static void copies_round_trip(const tpu_hal_driver_t* d, const traits_t* t) {
  rig_t r;
  if (!rig_open(d, &r)) {
    rig_close(&r);
    return;
  }
  enum { N = 100000 };
  uint8_t* src = malloc(N);
  uint8_t* dst = calloc(N, 1);
  uint64_t a = 0, b = 0;
  HCHECK_OK(d->memory_map(r.chip, N, &a));
  HCHECK_OK(d->memory_map(r.chip, N, &b));
  for (int i = 0; i < N; ++i) src[i] = (uint8_t)(i * 7 + 3);
  HCHECK_OK(copy(&r, TPU_HAL_COPY_H2D, a, hp(src), N));
  HCHECK_OK(copy(&r, TPU_HAL_COPY_D2D, b + 10, a, N - 10));
  HCHECK_OK(copy(&r, TPU_HAL_COPY_H2D, b, hp(src + 1), 10));
  HCHECK_OK(copy(&r, TPU_HAL_COPY_D2H, hp(dst), b, N));
  HCHECK_OK(copy(&r, TPU_HAL_COPY_D2H, hp(dst), 0, 0)); /* empty: nothing to touch */
  HCHECK_OK(d->queue_wait_idle(r.q));
  int wrong = 0;
  for (int i = 0; i < N; ++i) wrong += dst[i] != (i < 10 ? src[i + 1] : src[i - 10]);
  HCHECK(wrong == 0);
  d->memory_unmap(r.chip, a, N);
  d->memory_unmap(r.chip, b, N);
  free(src);
  free(dst);
  rig_close(&r);
}

typedef struct order_log {
  int seen[256];
  atomic_int count;
  const uint8_t* watch; /* host buffer a copy wrote before the function ran */
  uint8_t watched[256];
} order_log_t;

typedef struct order_arg {
  order_log_t* log;
  int id;
} order_arg_t;

static void log_call(void* p) {
  order_arg_t* a = p;
  int k = atomic_fetch_add(&a->log->count, 1);
  if (k < 256) a->log->seen[k] = a->id;
  if (a->log->watch) a->log->watched[a->id & 255] = a->log->watch[a->id];
}

/* Commands run in submission order: host functions see each other and the
 * copies queued before them. */
static void queue_runs_in_submission_order(const tpu_hal_driver_t* d, const traits_t* t) {
  rig_t r;
  if (!rig_open(d, &r)) {
    rig_close(&r);
    return;
  }
  enum { N = 200 };
  static order_log_t log;
  memset(&log, 0, sizeof(log));
  order_arg_t args[N];
  uint8_t src[N], back[N];
  memset(back, 0, sizeof(back));
  for (int i = 0; i < N; ++i) src[i] = (uint8_t)(i + 1);
  uint64_t dev = 0;
  HCHECK_OK(d->memory_map(r.chip, N, &dev));
  log.watch = back;
  for (int i = 0; i < N; ++i) {
    args[i] = (order_arg_t){&log, i};
    /* byte i reaches `back` through the device, then the function reads it */
    HCHECK_OK(copy(&r, TPU_HAL_COPY_H2D, dev + (uint64_t)i, hp(&src[i]), 1));
    HCHECK_OK(copy(&r, TPU_HAL_COPY_D2H, hp(&back[i]), dev + (uint64_t)i, 1));
    HCHECK_OK(host_fn(&r, log_call, &args[i]));
  }
  HCHECK_OK(d->queue_wait_idle(r.q));
  HCHECK(d->queue_is_idle(r.q));
  HCHECK(atomic_load(&log.count) == N);
  int out_of_order = 0, unseen = 0;
  for (int i = 0; i < N; ++i) {
    out_of_order += log.seen[i] != i;
    unseen += log.watched[i] != (uint8_t)(i + 1);
  }
  HCHECK(out_of_order == 0);
  HCHECK(unseen == 0);
  tpu_hal_queue_stats_t st = {0};
  d->queue_add_stats(r.q, &st);
  HCHECK(st.inline_commands + st.queued_commands == 3 * N);
  HCHECK(st.syncs >= 1);
  d->memory_unmap(r.chip, dev, N);
  rig_close(&r);
}

static void set_flag(void* p) { atomic_store((atomic_int*)p, 1); }
static void read_flag(void* p) {
  atomic_int* f = p;
  atomic_store(&f[1], atomic_load(&f[0]) + 1); /* 2: the flag was set first */
}

/* RECORD, WAIT, reached/wait/time, across two queues of one chip. */
static void events_record_wait_query(const tpu_hal_driver_t* d, const traits_t* t) {
  rig_t r;
  if (!rig_open(d, &r)) {
    rig_close(&r);
    return;
  }
  rig_t r2 = r;
  HCHECK_OK(d->queue_create(r.chip, &r2.q));
  tpu_hal_event_t* e = NULL;
  HCHECK_OK(d->event_create(true, &e));
  if (!e || !r2.q) {
    d->event_release(e);
    d->queue_destroy(r2.q);
    rig_close(&r);
    return;
  }
  HCHECK(d->event_last_seq(e) == 0);
  HCHECK(d->event_time_ns(e) == -1);
  atomic_int flag[2] = {0, 0};
  uint64_t seq = 0;
  HCHECK_OK(host_fn(&r, set_flag, &flag[0]));
  HCHECK_OK(record(&r, e, &seq));
  HCHECK(seq == 1 && d->event_last_seq(e) == 1);
  HCHECK_OK(wait_for(&r2, e, seq)); /* r2 runs read_flag only after the record */
  HCHECK_OK(host_fn(&r2, read_flag, flag));
  HCHECK_OK(d->queue_wait_idle(r2.q));
  HCHECK(atomic_load(&flag[1]) == 2);
  d->event_wait(e, seq);
  HCHECK(d->event_reached(e, seq));
  HCHECK_OK(d->queue_wait_idle(r.q));
  HCHECK(d->event_time_ns(e) >= 0);
  /* a second record: the timestamp belongs to the last reserved one */
  uint64_t seq2 = d->event_next_seq(e);
  HCHECK(seq2 == 2 && d->event_time_ns(e) == -1 && !d->event_reached(e, seq2));
  tpu_hal_command_t c = {.kind = TPU_HAL_CMD_RECORD};
  d->event_retain(e);
  c.u.event.event = e;
  c.u.event.seq = seq2;
  HCHECK_OK(d->queue_submit(r.q, &c));
  HCHECK_OK(d->queue_wait_idle(r.q));
  HCHECK(d->event_reached(e, seq2) && d->event_time_ns(e) >= 0);
  /* an event made without timing never has a time */
  tpu_hal_event_t* plain = NULL;
  HCHECK_OK(d->event_create(false, &plain));
  if (plain) {
    HCHECK_OK(record(&r, plain, &seq));
    HCHECK_OK(d->queue_wait_idle(r.q));
    HCHECK(d->event_reached(plain, seq) && d->event_time_ns(plain) == -1);
    d->event_release(plain);
  }
  /* the queues hold their own references: release ours while work is queued */
  uint64_t seq3 = 0;
  HCHECK_OK(record(&r, e, &seq3));
  HCHECK_OK(wait_for(&r2, e, seq3));
  d->event_release(e);
  HCHECK_OK(d->queue_wait_idle(r2.q));
  d->queue_destroy(r2.q);
  rig_close(&r);
}

/* Every malformed descriptor is refused with INVALID_ARGUMENT at submission,
 * runs nothing, is not the queue's error, and leaves the queue working. */
static void bad_descriptors_return_a_status(const tpu_hal_driver_t* d, const traits_t* t) {
  rig_t r;
  if (!rig_open(d, &r)) {
    rig_close(&r);
    return;
  }
  tpu_hal_event_t* e = NULL;
  HCHECK_OK(d->event_create(false, &e));
  uint8_t byte = 1;
  uint64_t dev = 0;
  HCHECK_OK(d->memory_map(r.chip, 4096, &dev));
  atomic_int ran = 0;
  HCHECK_CODE(d->queue_submit(r.q, NULL), TPU_CODE_INVALID_ARGUMENT);
  for (int k = 0;; ++k) {
    tpu_hal_command_t c = {.kind = TPU_HAL_CMD_COPY};
    c.u.copy.kind = TPU_HAL_COPY_H2D;
    c.u.copy.dst = dev;
    c.u.copy.src = hp(&byte);
    c.u.copy.bytes = 1;
    switch (k) {
      case 0: c.kind = (tpu_hal_command_kind_t)99; break;
      case 1: c.kind = TPU_HAL_CMD_KIND_COUNT; break;
      case 2: c.kind = TPU_HAL_CMD_EXEC, c.u.exec.graph = NULL, c.u.exec.executable = NULL; break;
      case 3: c.u.copy.kind = (tpu_hal_copy_kind_t)7; break;
      case 4: c.u.copy.dst = 0; break;
      case 5: c.u.copy.src = 0; break;
      case 6: c.u.copy.dst = UINT64_MAX - 2, c.u.copy.bytes = 16; break;
      case 7: c.u.copy.src = UINT64_MAX, c.u.copy.bytes = 2; break;
      case 8: c.kind = TPU_HAL_CMD_RECORD, c.u.event.event = NULL, c.u.event.seq = 1; break;
      case 9: /* sequence 0 is never reserved; the event reference is still taken */
        c.kind = TPU_HAL_CMD_RECORD, d->event_retain(e), c.u.event.event = e, c.u.event.seq = 0;
        break;
      case 10: c.kind = TPU_HAL_CMD_WAIT, c.u.event.event = NULL, c.u.event.seq = 1; break;
      case 11: /* a wait that could never end */
        c.kind = TPU_HAL_CMD_WAIT, d->event_retain(e), c.u.event.event = e, c.u.event.seq = 5;
        break;
      case 12: c.kind = TPU_HAL_CMD_HOST_FN, c.u.host.fn = NULL, c.u.host.arg = &ran; break;
      default: k = -1; break;
    }
    if (k < 0) break;
    tpu_status_t s = d->queue_submit(r.q, &c);
    if (tpu_status_code(s) != TPU_CODE_INVALID_ARGUMENT)
      tpu_test_fail(__FILE__, __LINE__, "[%s driver, %s] descriptor %d: got %s", g_driver_name,
                    g_case_name, k, tpu_status_code_name(tpu_status_code(s)));
    tpu_status_free(s);
  }
  HCHECK_OK(d->queue_wait_idle(r.q)); /* refused commands are not the queue's errors */
  uint8_t back = 0;
  HCHECK_OK(copy(&r, TPU_HAL_COPY_H2D, dev, hp(&byte), 1));
  HCHECK_OK(copy(&r, TPU_HAL_COPY_D2H, hp(&back), dev, 1));
  HCHECK_OK(d->queue_wait_idle(r.q));
  HCHECK(back == 1);
  HCHECK(d->event_last_seq(e) == 0);
  d->event_release(e);
  d->memory_unmap(r.chip, dev, 4096);
  rig_close(&r);
}

/* A one-node graph over device memory (borrowed views), owned by the caller. */
static tpu_graph_t* one_node(const char* op, const tpu_value_t* in, int32_t nin,
                             const tpu_view_t* out, const tpu_attr_t* attrs, int32_t nattrs) {
  tpu_graph_t* g = NULL;
  HCHECK_OK(tpu_graph_create(&g));
  if (g) HCHECK_OK(tpu_graph_add_node(g, tpu_op_lookup(op), in, nin, out, 1, attrs, nattrs));
  return g;
}

static tpu_view_t vec(uint64_t addr, tpu_dtype_t dtype, int64_t n) {
  tpu_view_t v = {.addr = addr, .dtype = dtype, .ndim = 1};
  v.sizes[0] = n;
  v.strides[0] = 1;
  return v;
}

static tpu_status_t exec(rig_t* r, tpu_graph_t* g) {
  tpu_hal_command_t c = {.kind = TPU_HAL_CMD_EXEC};
  c.u.exec.graph = g;
  return r->d->queue_submit(r->q, &c);
}

/* y = x + 2 as one "add" node's operands over N floats: x[i] = i * step and
 * y[i] = -1 uploaded to fresh mappings (*dx, *dy; 0 when a map failed). */
static void add_two_operands(rig_t* r, int64_t n, float step, float* x, float* y, uint64_t* dx,
                             uint64_t* dy, tpu_value_t in[2], tpu_view_t* out) {
  size_t bytes = (size_t)n * sizeof(float);
  for (int64_t i = 0; i < n; ++i) x[i] = (float)i * step, y[i] = -1.0f;
  *dx = *dy = 0;
  HCHECK_OK(r->d->memory_map(r->chip, bytes, dx));
  HCHECK_OK(r->d->memory_map(r->chip, bytes, dy));
  HCHECK_OK(copy(r, TPU_HAL_COPY_H2D, *dx, hp(x), bytes));
  HCHECK_OK(copy(r, TPU_HAL_COPY_H2D, *dy, hp(y), bytes));
  in[0] = (tpu_value_t){.kind = TPU_VALUE_VIEW, .u.view = vec(*dx, TPU_DTYPE_F32, n)};
  in[1] = (tpu_value_t){.kind = TPU_VALUE_SCALAR,
                        .u.scalar = {.dtype = TPU_DTYPE_F64, .v.f = 2.0}};
  *out = vec(*dy, TPU_DTYPE_F32, n);
}

/* EXEC runs the graph (y = x + 2), or, on a driver that runs no graphs,
 * records UNIMPLEMENTED for the next synchronisation. */
static void exec_runs_a_graph(const tpu_hal_driver_t* d, const traits_t* t) {
  rig_t r;
  if (!rig_open(d, &r)) {
    rig_close(&r);
    return;
  }
  enum { N = 1000 };
  float x[N], y[N];
  uint64_t dx, dy;
  tpu_value_t in[2];
  tpu_view_t out;
  add_two_operands(&r, N, 0.5f, x, y, &dx, &dy, in, &out);
  tpu_attr_t attrs[TPU_MAX_ATTRS] = {{0}};
  tpu_op_id_t add = tpu_op_lookup("add");
  tpu_graph_t* g = one_node("add", in, 2, &out, attrs, tpu_op_num_attrs(add));
  if (g) HCHECK_OK(exec(&r, g));
  HCHECK_OK(copy(&r, TPU_HAL_COPY_D2H, hp(y), dy, sizeof(y)));
  tpu_status_t s = d->queue_wait_idle(r.q);
  int wrong = 0;
  if (t->runs_graphs) {
    HCHECK_OK(s);
    for (int i = 0; i < N; ++i) wrong += y[i] != x[i] + 2.0f;
  } else {
    HCHECK_CODE(s, TPU_CODE_UNIMPLEMENTED);
    for (int i = 0; i < N; ++i) wrong += y[i] != -1.0f; /* nothing ran; the copy after did */
  }
  HCHECK(wrong == 0);
  d->memory_unmap(r.chip, dx, sizeof(x));
  d->memory_unmap(r.chip, dy, sizeof(y));
  rig_close(&r);
}

/* An error while a command runs is not the submitter's: submission succeeds,
 * the commands after it still run, the next wait_idle returns the first
 * error and clears it (take_error likewise, without waiting). */
static void async_error_surfaces_at_sync(const tpu_hal_driver_t* d, const traits_t* t) {
  rig_t r;
  if (!rig_open(d, &r)) {
    rig_close(&r);
    return;
  }
  float self[5] = {1, 2, 3, 4, 5}, got = 0;
  int64_t index = 7; /* out of range: IndexError on a driver that runs it */
  uint64_t ds = 0, di = 0, dout = 0;
  HCHECK_OK(d->memory_map(r.chip, sizeof(self), &ds));
  HCHECK_OK(d->memory_map(r.chip, sizeof(index), &di));
  HCHECK_OK(d->memory_map(r.chip, sizeof(float), &dout));
  HCHECK_OK(copy(&r, TPU_HAL_COPY_H2D, ds, hp(self), sizeof(self)));
  HCHECK_OK(copy(&r, TPU_HAL_COPY_H2D, di, hp(&index), sizeof(index)));
  tpu_value_t in[2] = {{.kind = TPU_VALUE_VIEW, .u.view = vec(ds, TPU_DTYPE_F32, 5)},
                       {.kind = TPU_VALUE_VIEW, .u.view = vec(di, TPU_DTYPE_I64, 1)}};
  tpu_view_t out = vec(dout, TPU_DTYPE_F32, 1);
  tpu_attr_t attrs[1] = {{.kind = TPU_ATTR_INT, .u.i = 0}};
  tpu_status_code_t want = t->runs_graphs ? TPU_CODE_INDEX_ERROR : TPU_CODE_UNIMPLEMENTED;
  for (int round = 0; round < 2; ++round) {
    atomic_int after = 0;
    tpu_graph_t* g = one_node("index_select", in, 2, &out, attrs, 1);
    if (g) HCHECK_OK(exec(&r, g)); /* the error is not the submitter's */
    g = one_node("index_select", in, 2, &out, attrs, 1); /* a second failure: the first wins */
    if (g) HCHECK_OK(exec(&r, g));
    HCHECK_OK(host_fn(&r, set_flag, &after));
    HCHECK_OK(copy(&r, TPU_HAL_COPY_D2H, hp(&got), ds + 4 * sizeof(float), sizeof(float)));
    if (round == 0) {
      HCHECK_CODE(d->queue_wait_idle(r.q), want);
    } else {
      while (!d->queue_is_idle(r.q)) {
      }
      HCHECK_CODE(d->queue_take_error(r.q), want);
    }
    HCHECK(atomic_load(&after) == 1 && got == 5.0f);
    HCHECK_OK(d->queue_wait_idle(r.q)); /* cleared */
  }
  d->memory_unmap(r.chip, ds, sizeof(self));
  d->memory_unmap(r.chip, di, sizeof(index));
  d->memory_unmap(r.chip, dout, sizeof(float));
  rig_close(&r);
}

typedef struct worker_arg {
  const tpu_hal_driver_t* d;
  tpu_hal_chip_t* chip;
  int id, wrong;
} worker_arg_t;

static void bump(void* p) { (*(int*)p)++; }

static void* submit_worker(void* p) {
  worker_arg_t* w = p;
  rig_t r = {.d = w->d, .chip = w->chip};
  tpu_status_t s = w->d->queue_create(w->chip, &r.q);
  if (s != TPU_OK) {
    tpu_status_free(s);
    w->wrong = -1;
    return NULL;
  }
  enum { N = 300 };
  uint64_t dev = 0;
  s = w->d->memory_map(w->chip, N * sizeof(int), &dev);
  if (s != TPU_OK) tpu_status_free(s), w->wrong = -1;
  int src[N], back[N], calls = 0;
  for (int i = 0; w->wrong == 0 && i < N; ++i) {
    src[i] = w->id * 100000 + i;
    back[i] = -1;
    tpu_status_t a = copy(&r, TPU_HAL_COPY_H2D, dev + sizeof(int) * (uint64_t)i, hp(&src[i]),
                          sizeof(int));
    tpu_status_t b = copy(&r, TPU_HAL_COPY_D2H, hp(&back[i]), dev + sizeof(int) * (uint64_t)i,
                          sizeof(int));
    tpu_status_t c = host_fn(&r, bump, &calls);
    w->wrong += (a != TPU_OK) + (b != TPU_OK) + (c != TPU_OK);
    tpu_status_free(a), tpu_status_free(b), tpu_status_free(c);
  }
  s = w->d->queue_wait_idle(r.q);
  w->wrong += s != TPU_OK;
  tpu_status_free(s);
  for (int i = 0; w->wrong == 0 && i < N; ++i) w->wrong += back[i] != src[i];
  w->wrong += w->wrong == 0 && calls != N;
  if (dev) w->d->memory_unmap(w->chip, dev, N * sizeof(int));
  w->d->queue_destroy(r.q);
  return NULL;
}

/* Threads with a queue each, mapping and copying on one chip at once. */
static void queues_of_one_chip_run_concurrently(const tpu_hal_driver_t* d, const traits_t* t) {
  tpu_hal_chip_t* chip = NULL;
  HCHECK_OK(d->chip_open(0, CHIP_CAPACITY, &chip));
  if (!chip) return;
  enum { T = 4 };
  pthread_t th[T];
  worker_arg_t args[T];
  for (int i = 0; i < T; ++i) {
    args[i] = (worker_arg_t){.d = d, .chip = chip, .id = i};
    pthread_create(&th[i], NULL, submit_worker, &args[i]);
  }
  for (int i = 0; i < T; ++i) pthread_join(th[i], NULL);
  for (int i = 0; i < T; ++i) HCHECK(args[i].wrong == 0);
  d->chip_close(chip);
}

/* executable_prepare hands back what the driver makes of a recording (y = x
 * + 2, y a live provisional block): the same node, an executable or none as
 * the driver's traits say, retainable; a memory estimate that counts the
 * block the graph writes (all of it, whatever the driver keeps in scratch:
 * y is alive after the graph); the text of it; and EXEC with that
 * executable runs the graph as EXEC without one does. Preparing the same
 * recording again with reuse gives an executable of the same structure. */
static void prepare_gives_an_executable_exec_runs(const tpu_hal_driver_t* d, const traits_t* t) {
  rig_t r;
  if (!rig_open(d, &r)) {
    rig_close(&r);
    return;
  }
  HCHECK(d->executable_prepare != NULL && d->recording_text != NULL);
  enum { N = 1000 };
  float x[N], y[N];
  uint64_t dx, dy;
  tpu_value_t in[2];
  tpu_view_t out;
  add_two_operands(&r, N, 0.25f, x, y, &dx, &dy, in, &out);
  tpu_attr_t attrs[TPU_MAX_ATTRS] = {{0}};
  uint64_t live_addr = dy, live_size = sizeof(y);
  uint64_t hash = 0;
  for (int round = 0; round < 2; ++round) {
    tpu_graph_t* g = one_node("add", in, 2, &out, attrs, tpu_op_num_attrs(tpu_op_lookup("add")));
    if (!g) break;
    tpu_hal_recording_t rec = {.graph = g, .live_addr = &live_addr, .live_size = &live_size,
                               .live = 1, .reuse = true};
    char* text = NULL;
    HCHECK_OK(d->recording_text(&rec, &text));
    HCHECK(text != NULL && text[0] != '\0');
    free(text);
    HCHECK(rec.graph == g); /* recording_text changes nothing */
    tpu_hal_prepared_t prep;
    memset(&prep, 0x5a, sizeof(prep));
    HCHECK_OK(d->executable_prepare(r.q, &rec, &prep));
    HCHECK(rec.graph != NULL && tpu_graph_node_count(rec.graph) == 1);
    HCHECK(prep.extra_bytes == (int64_t)sizeof(y));
    HCHECK(prep.kernels == 1);
    HCHECK((prep.executable != NULL) == t->compiles);
    if (round == 0) hash = prep.hash;
    else HCHECK(prep.hash == hash);
    if (prep.executable) {
      HCHECK(d->executable_retain && d->executable_release);
      d->executable_retain(prep.executable); /* the extra reference goes again */
      d->executable_release(prep.executable);
    }
    tpu_hal_command_t c = {.kind = TPU_HAL_CMD_EXEC};
    c.u.exec.graph = rec.graph;
    c.u.exec.executable = prep.executable;
    HCHECK_OK(d->queue_submit(r.q, &c));
    HCHECK_OK(copy(&r, TPU_HAL_COPY_D2H, hp(y), dy, sizeof(y)));
    tpu_status_t s = d->queue_wait_idle(r.q);
    int wrong = 0;
    if (t->runs_graphs) {
      HCHECK_OK(s);
      for (int i = 0; i < N; ++i) wrong += y[i] != x[i] + 2.0f;
    } else {
      HCHECK_CODE(s, TPU_CODE_UNIMPLEMENTED);
      for (int i = 0; i < N; ++i) wrong += y[i] != -1.0f;
    }
    HCHECK(wrong == 0);
  }
  d->memory_unmap(r.chip, dx, sizeof(x));
  d->memory_unmap(r.chip, dy, sizeof(y));
  rig_close(&r);
}

/* ---- the table ------------------------------------------------------------ */

typedef void (*case_fn)(const tpu_hal_driver_t* d, const traits_t* t);

static const struct {
  const char* name;
  case_fn fn;
} g_cases[] = {
    {"chips_enumerate_open_close", chips_enumerate_open_close},
    {"memory_map_unmap_and_capacity", memory_map_unmap_and_capacity},
    {"copies_round_trip", copies_round_trip},
    {"released_memory_keeps_its_bytes", released_memory_keeps_its_bytes},
    {"unmap_keeps_neighbours_and_remap_reads_zeros", unmap_keeps_neighbours_and_remap_reads_zeros},
    {"queue_runs_in_submission_order", queue_runs_in_submission_order},
    {"events_record_wait_query", events_record_wait_query},
    {"bad_descriptors_return_a_status", bad_descriptors_return_a_status},
    {"exec_runs_a_graph", exec_runs_a_graph},
    {"prepare_gives_an_executable_exec_runs", prepare_gives_an_executable_exec_runs},
    {"async_error_surfaces_at_sync", async_error_surfaces_at_sync},
    {"queues_of_one_chip_run_concurrently", queues_of_one_chip_run_concurrently},
};

static const traits_t* traits_of(const tpu_hal_driver_t* d) {
  for (size_t i = 0; i < sizeof(g_traits) / sizeof(g_traits[0]); ++i)
    if (strcmp(g_traits[i].name, d->name) == 0) return &g_traits[i];
  return NULL;
}

/* Every case against every registered driver; each failure names both. */
TEST(hal_conformance_every_driver) {
  int n = 0;
  const tpu_hal_driver_t* const* all = tpu_hal_drivers(&n);
  CHECK(n >= 2 && all[0] == &tpu_host_driver); /* host (the default) and null at least */
  for (int i = 0; i < n; ++i) {
    const tpu_hal_driver_t* d = all[i];
    const traits_t* t = traits_of(d);
    if (!t) {
      tpu_test_fail(__FILE__, __LINE__, "driver %s has no conformance traits", d->name);
      continue;
    }
    g_driver_name = d->name;
    for (size_t c = 0; c < sizeof(g_cases) / sizeof(g_cases[0]); ++c) {
      g_case_name = g_cases[c].name;
      g_cases[c].fn(d, t);
    }
  }
  g_driver_name = g_case_name = "?";
}
