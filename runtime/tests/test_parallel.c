/* test_parallel.c — the compute pool (pool.c): tpu_parallel_for covers
 * every index exactly once under runs of small jobs and concurrent callers,
 * jobs are split over the workers (and counted) in static shares, a worker
 * polling between back-to-back jobs finds the next one, an idle pool stops
 * polling, and the poll-length rule of pool_spin.h step by step. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernel.h"
#include "tpu/config.h"
#include "base/pool_spin.h"
#include "test.h"

typedef struct cover {
  int64_t n;
  unsigned char* hits; /* per index: how often a chunk covered it */
  atomic_int bad;      /* chunks outside [0, n) or empty */
} cover_t;

static void cover_chunk(void* arg, int64_t begin, int64_t end) {
  cover_t* c = arg;
  if (begin < 0 || end > c->n || begin >= end) atomic_fetch_add(&c->bad, 1);
  for (int64_t i = begin; i < end && i < c->n; ++i) c->hits[i]++;
}

/* Runs tpu_parallel_for(n, grain) once; true when every index was covered once. */
static bool covers_once(int64_t n, int64_t grain) {
  cover_t c = {.n = n, .hits = calloc((size_t)(n > 0 ? n : 1), 1)};
  atomic_init(&c.bad, 0);
  tpu_parallel_for(n, grain, cover_chunk, &c);
  bool ok = atomic_load(&c.bad) == 0;
  for (int64_t i = 0; i < n; ++i) ok = ok && c.hits[i] == 1;
  free(c.hits);
  return ok;
}

TEST(parallel_for_small_jobs_cover_once) {
  static const int64_t sizes[][2] = {{0, 1},   {1, 1},      {2, 1},     {7, 2},   {64, 1},
                                     {65, 8},  {1000, 3},   {4096, 64}, {4097, 4096},
                                     {5, 0},   {100, -3},   {12345, 1000}};
  for (int rep = 0; rep < 400; ++rep)
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k)
      if (!covers_once(sizes[k][0], sizes[k][1])) {
        CHECK(!"an index covered other than once");
        return;
      }
}

typedef struct caller_arg {
  int id;
  atomic_int failures;
} caller_arg_t;

static void* caller_main(void* arg) {
  caller_arg_t* a = arg;
  for (int rep = 0; rep < 300; ++rep)
    if (!covers_once(257 + 31 * a->id + rep % 17, 4 + a->id)) atomic_fetch_add(&a->failures, 1);
  return NULL;
}

TEST(parallel_for_concurrent_callers) {
  enum { CALLERS = 4 };
  tpu_pool_stats_t before, after;
  tpu_pool_stats(&before);
  pthread_t t[CALLERS];
  caller_arg_t args[CALLERS];
  for (int i = 0; i < CALLERS; ++i) {
    args[i].id = i;
    atomic_init(&args[i].failures, 0);
    CHECK(pthread_create(&t[i], NULL, caller_main, &args[i]) == 0);
  }
  for (int i = 0; i < CALLERS; ++i) {
    pthread_join(t[i], NULL);
    CHECK(atomic_load(&args[i].failures) == 0);
  }
  tpu_pool_stats(&after);
  /* Every call (each above one grain) was either split over the pool or
   * run serially because another caller held it; none was lost. */
  if (after.threads > 1)
    CHECK(after.jobs - before.jobs + after.serial_busy - before.serial_busy >= CALLERS * 300);
}

/* A chunk that waits (up to a second) until two threads have each run one,
 * so that the job is known to have been split over a worker. */
typedef struct meet {
  atomic_int arrived;
  atomic_int met;
} meet_t;

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void meet_chunk(void* arg, int64_t begin, int64_t end) {
  (void)begin, (void)end;
  meet_t* m = arg;
  atomic_fetch_add(&m->arrived, 1);
  int64_t until = mono_ns() + 1000000000;
  while (atomic_load(&m->arrived) < 2 && mono_ns() < until) {
  }
  if (atomic_load(&m->arrived) >= 2) atomic_store(&m->met, 1);
}

static bool split_over_two(void) {
  meet_t m;
  atomic_init(&m.arrived, 0);
  atomic_init(&m.met, 0);
  tpu_parallel_for(2, 1, meet_chunk, &m);
  return atomic_load(&m.met) == 1;
}

/* The pool's workers are device threads: SCHED_BATCH (TORCH_TPU_DEVICE_SCHED
 * batch, the default), so that waking one never preempts the caller. */
TEST(parallel_workers_are_batch_scheduled) {
  if (tpu_parallel_threads() < 2) return; /* no workers */
  if (strcmp(tpu_config_string(TPU_CONFIG_DEVICE_SCHED), "batch") != 0) return;
  tpu_pool_stats_t s;
  tpu_pool_stats(&s);
  CHECK(s.batch_threads >= s.threads - 1);
  CHECK(sched_getscheduler(0) != SCHED_BATCH); /* the caller keeps its own policy */
}

TEST(parallel_for_workers_poll_between_jobs) {
  if (tpu_parallel_threads() < 2 || tpu_pool_spin_max_ns() == 0) return; /* nothing to poll */
  tpu_pool_stats_t before, after;
  tpu_pool_stats(&before);
  /* Back to back: the worker leaves each job and polls; the next one is
   * published while it polls (or before it starts: found at once). */
  int met = 0;
  for (int rep = 0; rep < 50; ++rep) met += split_over_two();
  tpu_pool_stats(&after);
  CHECK(met == 50);
  CHECK(after.jobs - before.jobs >= 50);
  CHECK(after.spin_hits + after.spin_backoffs > before.spin_hits + before.spin_backoffs);
}

/* Static shares: with two threads and 8 chunks, the caller owns chunks 0-3
 * and the worker 4-7, each run from its front, leftovers taken from the
 * back. Chunk 0 (the caller's first) waits until another chunk has started,
 * so the worker arrives while the caller is busy: its first chunk must be
 * the front of its own share, 4, not the next free one (1). */
typedef struct shares {
  pthread_t caller;
  atomic_int started;
  atomic_int worker_first; /* the first chunk a worker ran, or -1 */
  atomic_int runs[8];
} shares_t;

static void share_chunk(void* arg, int64_t begin, int64_t end) {
  shares_t* s = arg;
  for (int64_t c = begin; c < end; ++c) {
    atomic_fetch_add(&s->runs[c], 1);
    if (!pthread_equal(pthread_self(), s->caller)) {
      int none = -1;
      atomic_compare_exchange_strong(&s->worker_first, &none, (int)c);
    }
    if (c == 0) {
      int64_t until = mono_ns() + 1000000000;
      while (atomic_load(&s->started) == 0 && mono_ns() < until) {
      }
    } else {
      atomic_fetch_add(&s->started, 1);
    }
  }
}

TEST(parallel_for_static_shares) {
  if (tpu_parallel_threads() != 2) return; /* the shares below assume two threads */
  int split = 0;
  for (int rep = 0; rep < 20; ++rep) {
    shares_t s = {.caller = pthread_self()};
    atomic_init(&s.started, 0);
    atomic_init(&s.worker_first, -1);
    for (int c = 0; c < 8; ++c) atomic_init(&s.runs[c], 0);
    tpu_parallel_for(8, 1, share_chunk, &s);
    for (int c = 0; c < 8; ++c) CHECK(atomic_load(&s.runs[c]) == 1);
    int first = atomic_load(&s.worker_first);
    CHECK(first == 4 || first == -1); /* -1: the worker never came (a loaded machine) */
    if (first != 4 && first != -1) return;
    split += first == 4;
  }
  CHECK(split > 0); /* the worker took part at least once in 20 tries of a second */
}

TEST(parallel_for_idle_pool_sleeps) {
  if (tpu_parallel_threads() < 2 || tpu_pool_spin_max_ns() == 0) return;
  tpu_pool_stats_t before, after;
  /* A job, then idle far longer than the longest poll: the worker's poll
   * runs out (or is cut as descheduled) and it sleeps, its poll shorter. */
  CHECK(split_over_two());
  tpu_pool_stats(&before);
  for (int rep = 0; rep < 6; ++rep) {
    CHECK(split_over_two());
    struct timespec idle = {0, 20 * 1000 * 1000};
    nanosleep(&idle, NULL);
  }
  tpu_pool_stats(&after);
  CHECK(after.sleeps - before.sleeps >= 6);
  CHECK(after.spin_misses + after.spin_backoffs >= before.spin_misses + before.spin_backoffs + 6);
  CHECK(after.spin_ns < tpu_pool_spin_max_ns());
  CHECK(after.spin_ns >= POOL_SPIN_MIN_NS);
}

TEST(pool_spin_rule) {
  const int64_t max = 100000, lo = POOL_SPIN_MIN_NS;
  static const struct {
    int64_t spin;
    pool_spin_event_t event;
    int64_t next;
    int64_t gap;
  } rows[] = {
      {100000, POOL_SPIN_FOUND, 100000, 0},
      {40000, POOL_SPIN_FOUND, 40000, 0},
      {100000, POOL_SPIN_EXPIRED, 50000, 0},
      {3000, POOL_SPIN_EXPIRED, POOL_SPIN_MIN_NS, 0},
      {POOL_SPIN_MIN_NS, POOL_SPIN_EXPIRED, POOL_SPIN_MIN_NS, 0},
      {POOL_SPIN_MIN_NS, POOL_SPIN_WOKEN_SOON, 2 * POOL_SPIN_MIN_NS, 0},
      {80000, POOL_SPIN_WOKEN_SOON, 100000, 0},
      {30000, POOL_SPIN_WOKEN_LATE, 30000, 90000},
      /* woken 30 us after a 2 us poll ran out: the next poll covers 1.5x the gap */
      {POOL_SPIN_MIN_NS, POOL_SPIN_WOKEN_SOON, (POOL_SPIN_MIN_NS + 30000) / 2 * 3, 30000},
      {40000, POOL_SPIN_WOKEN_SOON, 80000, 1000},             /* a short gap still doubles */
      {POOL_SPIN_MIN_NS, POOL_SPIN_WOKEN_SOON, 100000, 90000}, /* capped */
      {50000, POOL_SPIN_EXPIRED, 25000, 90000}, /* the gap only counts when woken soon */
      {100000, POOL_SPIN_DESCHEDULED, POOL_SPIN_MIN_NS, 0},
  };
  for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); ++k) {
    int64_t got = tpu_pool_spin_next(rows[k].spin, max, rows[k].event, rows[k].gap);
    if (got != rows[k].next)
      tpu_test_fail(__FILE__, __LINE__, "row %zu: %lld -> %lld, want %lld", k,
                    (long long)rows[k].spin, (long long)got, (long long)rows[k].next);
  }
  /* Polling off stays off; a maximum below the minimum caps it. */
  CHECK(tpu_pool_spin_next(5000, 0, POOL_SPIN_WOKEN_SOON, 0) == 0);
  CHECK(tpu_pool_spin_next(500, 1000, POOL_SPIN_WOKEN_SOON, 0) == 1000);
  CHECK(tpu_pool_spin_next(1000, 1000, POOL_SPIN_EXPIRED, 0) == 1000);
  /* Halving from the maximum reaches the minimum; doubling climbs back. */
  int64_t s = max;
  for (int i = 0; i < 20; ++i) s = tpu_pool_spin_next(s, max, POOL_SPIN_EXPIRED, 0);
  CHECK(s == lo);
  for (int i = 0; i < 20; ++i) s = tpu_pool_spin_next(s, max, POOL_SPIN_WOKEN_SOON, 0);
  CHECK(s == max);
}
