/* pool.c — the compute pool kernels split work over (tpu_parallel_for).
 *
 * One pool for the whole process, shared by every chip and stream, with
 * (threads - 1) workers plus the calling thread. One job runs at a time: a
 * call that finds the pool busy (another stream's kernel, or a nested call)
 * runs serially in its caller, so the pool never oversubscribes the cores.
 *
 * Between jobs a worker polls for the next one before it sleeps on `wake`,
 * for an adaptive time (pool_spin.h): kernels arrive microseconds apart, and
 * a sleeping worker is woken too late to take part. A caller publishes a job
 * under `mu` (generation + 1) and signals only when some worker sleeps and
 * no signal is already on its way; it runs chunks itself, then polls
 * briefly for workers still inside a chunk before it sleeps on `done`. While a library's own threads hold the cores
 * (tpu_parallel_exclusive) workers do not poll; they are nudged awake when
 * the library is done, to poll for the kernels after it. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tpu/config.h"
#include "kernel.h"
#include "base/pool_spin.h"
#include "base/spin.h"
#include "tpu/runtime.h"

/* How long a caller polls for workers still inside a chunk. */
#define CALLER_SPIN_NS 50000

#define POOL_MAX_THREADS 64

/* A job's chunks are dealt out in equal contiguous shares, one per pool
 * thread (share 0: the caller; share i: worker i), as OpenMP's static
 * schedule does: a kernel run again on the same data (a benchmark's loop,
 * a layer applied step after step) finds each thread's share still in that
 * core's private cache. A thread runs its own share from the front, then
 * takes what is left of the others' from the back, so a late or descheduled
 * worker costs balance, not time. Each share is [lo, hi) of chunk indices,
 * packed into one word (lo in the low half) and taken by compare-and-swap;
 * shares sit on cache lines of their own. */
typedef struct share {
  _Alignas(64) atomic_ullong range;
} share_t;

typedef struct job {
  void (*fn)(void* arg, int64_t begin, int64_t end);
  void* arg;
  int64_t n, chunk;
  int shares;
  atomic_int running;  /* workers still inside this job */
  share_t share[POOL_MAX_THREADS];
} job_t;

typedef struct pool_counters {
  atomic_ullong jobs, serial_busy, exclusive, spin_hits, spin_misses, spin_backoffs, sleeps,
      wakeups, empty_takes, caller_sleeps;
} pool_counters_t;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  pthread_mutex_t busy;   /* held by the caller owning the pool */
  job_t* job;             /* under mu */
  atomic_ullong generation; /* written under mu; polled without it */
  atomic_bool exclusive;  /* a library's threads hold the cores: do not poll */
  int64_t first_job_ns;   /* when the first job since a worker fell asleep was
                             published (-1: none yet), under mu */
  uint64_t job_generation; /* the generation of the last job (not nudge), under mu */
  int sleepers;           /* workers waiting on `wake`, under mu */
  bool wake_sent;         /* `wake` signalled, no worker back from it yet, under mu */
  int threads;
  _Atomic int pinned;     /* threads pinned to cores */
  _Atomic int batch_threads; /* device threads scheduled SCHED_BATCH */
  bool pinning;           /* pool threads are pinned (set by start_pool) */
  int cpus[POOL_MAX_THREADS]; /* thread i's core when pinning (allowed_cores) */
  int64_t spin_max_ns;
  atomic_llong spin_ns[POOL_MAX_THREADS]; /* each worker's current poll length, for the stats */
  pool_counters_t c;
} g_pool = {.mu = PTHREAD_MUTEX_INITIALIZER,
            .wake = PTHREAD_COND_INITIALIZER,
            .done = PTHREAD_COND_INITIALIZER,
            .busy = PTHREAD_MUTEX_INITIALIZER,
            .first_job_ns = -1,
            .threads = 1};

static inline void count(atomic_ullong* counter) {
  atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}



int64_t tpu_pool_spin_next(int64_t spin_ns, int64_t max_ns, pool_spin_event_t event,
                           int64_t gap_ns) {
  if (max_ns <= 0) return 0;
  int64_t lo = max_ns < POOL_SPIN_MIN_NS ? max_ns : POOL_SPIN_MIN_NS;
  int64_t next = spin_ns;
  switch (event) {
    case POOL_SPIN_FOUND:
    case POOL_SPIN_WOKEN_LATE:
      break;
    case POOL_SPIN_EXPIRED:
      next = spin_ns / 2;
      break;
    case POOL_SPIN_WOKEN_SOON: {
      int64_t cover = gap_ns > 0 ? (spin_ns + gap_ns) / 2 * 3 : 0;
      next = spin_ns * 2 > cover ? spin_ns * 2 : cover;
      break;
    }
    case POOL_SPIN_DESCHEDULED:
      next = lo;
      break;
  }
  if (next < lo) next = lo;
  if (next > max_ns) next = max_ns;
  return next;
}

int64_t tpu_pool_spin_max_ns(void) {
  return tpu_config_int(TPU_CONFIG_POOL_SPIN_US) * 1000;
}

/* The next chunk index of share `sh`, from its front (its owner) or its
 * back (a thief); -1 when the share is used up. */
static int64_t take_chunk(share_t* sh, bool front) {
  unsigned long long r = atomic_load_explicit(&sh->range, memory_order_relaxed);
  for (;;) {
    unsigned long long lo = r & 0xffffffffu, hi = r >> 32;
    if (lo >= hi) return -1;
    unsigned long long next = front ? r + 1 : ((hi - 1) << 32) | lo;
    if (atomic_compare_exchange_weak_explicit(&sh->range, &r, next, memory_order_relaxed,
                                              memory_order_relaxed))
      return (int64_t)(front ? lo : hi - 1);
  }
}

static void run_chunk(const job_t* job, int64_t c) {
  int64_t begin = c * job->chunk;
  int64_t end = begin + job->chunk < job->n ? begin + job->chunk : job->n;
  job->fn(job->arg, begin, end);
}

/* Thread `self`'s share, then the others'. */
static void run_chunks(job_t* job, int self) {
  int64_t c;
  if (self < job->shares)
    while ((c = take_chunk(&job->share[self], true)) >= 0) run_chunk(job, c);
  for (int k = 1; k <= job->shares; ++k) {
    share_t* victim = &job->share[(self + k) % job->shares];
    while ((c = take_chunk(victim, false)) >= 0) run_chunk(job, c);
  }
}

static bool job_taken(job_t* job) {
  for (int i = 0; i < job->shares; ++i) {
    unsigned long long r = atomic_load_explicit(&job->share[i].range, memory_order_relaxed);
    if ((r & 0xffffffffu) < (r >> 32)) return false;
  }
  return true;
}

typedef enum poll_outcome { POLL_FOUND, POLL_EXPIRED, POLL_YIELDED } poll_outcome_t;

/* Polls up to *spin_ns for a generation other than `seen`, adapting *spin_ns
 * to what it saw; stops early (POLL_YIELDED, no adaptation) when a library
 * claims the cores. */
static poll_outcome_t poll_for_job(uint64_t seen, int64_t* spin_ns) {
  int64_t start = tpu_monotonic_ns(), last = start, until = start + *spin_ns;
  bool descheduled = false;
  poll_outcome_t outcome;
  for (;;) {
    if (atomic_load_explicit(&g_pool.generation, memory_order_acquire) != seen) {
      outcome = POLL_FOUND;
      break;
    }
    if (atomic_load_explicit(&g_pool.exclusive, memory_order_relaxed)) return POLL_YIELDED;
    int64_t t = tpu_monotonic_ns();
    if (t - last >= POOL_SPIN_GAP_NS) descheduled = true;
    if (t >= until) {
      outcome = POLL_EXPIRED;
      break;
    }
    last = t;
    for (int i = 0; i < 16; ++i) tpu_cpu_relax();
  }
  bool found = outcome == POLL_FOUND;
  count(descheduled ? &g_pool.c.spin_backoffs : found ? &g_pool.c.spin_hits : &g_pool.c.spin_misses);
  *spin_ns = tpu_pool_spin_next(
      *spin_ns, g_pool.spin_max_ns,
      descheduled ? POOL_SPIN_DESCHEDULED : found ? POOL_SPIN_FOUND : POOL_SPIN_EXPIRED, 0);
  return outcome;
}

static bool pin_to(int index); /* pinning, below */

static void* worker_main(void* arg) {
  int index = (int)(intptr_t)arg;
  pthread_setname_np(pthread_self(), "tpu-pool");
  tpu_parallel_device_thread();
  if (g_pool.pinning) pin_to(index);
  int64_t spin = g_pool.spin_max_ns;
  uint64_t seen = 0;
  for (;;) {
    poll_outcome_t polled = POLL_YIELDED;
    if (spin > 0 && !atomic_load_explicit(&g_pool.exclusive, memory_order_relaxed))
      polled = poll_for_job(seen, &spin);
    pthread_mutex_lock(&g_pool.mu);
    int64_t asleep = -1;
    if (atomic_load(&g_pool.generation) == seen) {
      asleep = tpu_monotonic_ns();
      count(&g_pool.c.sleeps);
      g_pool.sleepers++;
      g_pool.first_job_ns = -1;
      atomic_store_explicit(&g_pool.spin_ns[index], spin, memory_order_relaxed);
      while (atomic_load(&g_pool.generation) == seen) pthread_cond_wait(&g_pool.wake, &g_pool.mu);
      g_pool.sleepers--;
      g_pool.wake_sent = false;
    }
    seen = atomic_load(&g_pool.generation);
    job_t* job = g_pool.job;
    if (job) atomic_fetch_add(&job->running, 1);
    /* Woken for a job (a nudge says nothing about the gaps between jobs):
     *  - a wake-up slower than the longest poll says the cores are taken
     *    (other processes, or threads beyond the cores), and polling would
     *    take time from them;
     *  - else, after a poll that ran out: would a longer one have reached
     *    the job? Timed at the job's publication, not at the wake-up (the
     *    job may even be done by then: the case that most needs a longer
     *    poll). */
    if (asleep >= 0 && g_pool.first_job_ns >= 0 && g_pool.spin_max_ns > 0) {
      if (tpu_monotonic_ns() - g_pool.first_job_ns > g_pool.spin_max_ns) {
        count(&g_pool.c.spin_backoffs);
        spin = tpu_pool_spin_next(spin, g_pool.spin_max_ns, POOL_SPIN_DESCHEDULED, 0);
      } else if (polled == POLL_EXPIRED) {
        int64_t gap = g_pool.first_job_ns - asleep;
        spin = tpu_pool_spin_next(spin, g_pool.spin_max_ns,
                                  gap < g_pool.spin_max_ns ? POOL_SPIN_WOKEN_SOON
                                                           : POOL_SPIN_WOKEN_LATE,
                                  gap);
      }
    }
    if (!job && g_pool.job_generation == seen) count(&g_pool.c.empty_takes);
    atomic_store_explicit(&g_pool.spin_ns[index], spin, memory_order_relaxed);
    pthread_mutex_unlock(&g_pool.mu);
    if (!job) continue; /* a nudge, or a job that had already ended */
    if (job_taken(job)) count(&g_pool.c.empty_takes);
    run_chunks(job, index);
    pthread_mutex_lock(&g_pool.mu);
    if (atomic_fetch_sub(&job->running, 1) == 1) pthread_cond_broadcast(&g_pool.done);
    pthread_mutex_unlock(&g_pool.mu);
  }
  return NULL;
}

/* Pinning. Left to itself, the kernel's scheduler often wakes a worker on
 * the core of the thread that woke it (the caller, busy running its own
 * share), and the two then take turns on one core while the other idles:
 * measured on a 2-core VM after 50 ms idle, a 1024x768 column sum ran at
 * one core's speed (80-120 µs a call instead of 25-35) for 25 ms, the
 * worker and the chip-0 queue worker sharing a core the whole time. So, as
 * OpenMP runtimes do under OMP_PROC_BIND, worker i is pinned to the i-th
 * core the process may use and chip 0's queue worker (the caller of its
 * kernels: share 0) to the first (tpu_parallel_pin_caller). "auto" pins
 * only when that gives every thread a core of its own: the pool spans every
 * allowed core (no TORCH_TPU_NUM_THREADS below it) and the process is not
 * one of several ranks on the host (torch_tpu sets "off" when
 * LOCAL_WORLD_SIZE > 1). The process's other threads (Python's, PyTorch's
 * own OpenMP team) stay free. */
static int allowed_cores(int* out_cpus, int max) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  int n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < max; ++c)
    if (CPU_ISSET(c, &set)) out_cpus[n++] = c;
  return n;
}

/* Limits the calling thread to cores cpus[0..n). */
static bool set_cores(const int* cpus, int n) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int i = 0; i < n; ++i) CPU_SET(cpus[i], &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

/* Pins the calling thread to pool thread `index`'s core, and counts it. */
static bool pin_to(int index) {
  if (!set_cores(&g_pool.cpus[index], 1)) return false;
  atomic_fetch_add(&g_pool.pinned, 1);
  return true;
}

/* The calling thread was pinned by tpu_parallel_pin_caller. */
static _Thread_local bool tl_pinned_caller;

/* Every core of the pool, for a pinned caller handing the cores to a
 * library's OpenMP team: libgomp starts its team's threads with their
 * creator's affinity, so a team first started by a pinned caller would
 * run every thread on that one core (a 2048^3 float32 GEMM at half speed). */
static void unpin_for_team(void) { set_cores(g_pool.cpus, g_pool.threads); }

static void start_pool(void) {
  int cores = allowed_cores(g_pool.cpus, POOL_MAX_THREADS);
  if (cores <= 0) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    cores = online > 0 ? (int)(online < POOL_MAX_THREADS ? online : POOL_MAX_THREADS) : 1;
  }
  int threads = cores;
  if (tpu_config_int(TPU_CONFIG_NUM_THREADS) > 0) threads = (int)tpu_config_int(TPU_CONFIG_NUM_THREADS);
  if (threads > POOL_MAX_THREADS) threads = POOL_MAX_THREADS;
  const char* pin = tpu_config_string(TPU_CONFIG_PIN_THREADS);
  bool pinning = threads > 1 && threads <= cores &&
                 (strcmp(pin, "on") == 0 || (strcmp(pin, "auto") == 0 && threads == cores));
  g_pool.spin_max_ns = tpu_pool_spin_max_ns();
  g_pool.threads = threads;
  g_pool.pinning = pinning;
  for (int i = 1; i < threads; ++i) {
    atomic_store(&g_pool.spin_ns[i], g_pool.spin_max_ns);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, worker_main, (void*)(intptr_t)i) != 0) g_pool.threads = i;
    pthread_attr_destroy(&attr);
    if (g_pool.threads == i) break;
  }
}

void tpu_parallel_device_thread(void) {
  if (strcmp(tpu_config_string(TPU_CONFIG_DEVICE_SCHED), "batch") != 0) return;
  struct sched_param param = {.sched_priority = 0};
  if (pthread_setschedparam(pthread_self(), SCHED_BATCH, &param) == 0)
    atomic_fetch_add(&g_pool.batch_threads, 1);
}

void tpu_parallel_pin_caller(void) {
  tpu_parallel_threads();
  if (g_pool.pinning) tl_pinned_caller = pin_to(0);
}

int tpu_parallel_threads(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, start_pool);
  return g_pool.threads;
}

/* Makes `job` (NULL: a nudge) the current one; signals sleeping workers
 * unless a signal is already on its way. */
static void publish(job_t* job) {
  pthread_mutex_lock(&g_pool.mu);
  g_pool.job = job;
  uint64_t generation = atomic_fetch_add_explicit(&g_pool.generation, 1, memory_order_release) + 1;
  if (job) {
    if (g_pool.first_job_ns < 0) g_pool.first_job_ns = tpu_monotonic_ns();
    g_pool.job_generation = generation;
  }
  /* A wake-up already on its way (a loaded machine can take milliseconds
   * to run the woken thread) covers this job too. */
  bool wake = g_pool.sleepers > 0 && !g_pool.wake_sent;
  if (wake) g_pool.wake_sent = true;
  pthread_mutex_unlock(&g_pool.mu);
  if (wake) {
    if (job) count(&g_pool.c.wakeups);
    pthread_cond_broadcast(&g_pool.wake);
  }
}

void tpu_parallel_for(int64_t n, int64_t grain, void (*fn)(void* arg, int64_t begin, int64_t end),
                      void* arg) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int threads = tpu_parallel_threads();
  if (threads <= 1 || n <= grain) {
    fn(arg, 0, n);
    return;
  }
  if (pthread_mutex_trylock(&g_pool.busy) != 0) {
    count(&g_pool.c.serial_busy);
    fn(arg, 0, n);
    return;
  }
  count(&g_pool.c.jobs);
  int64_t chunks = (n + grain - 1) / grain;
  if (chunks > (int64_t)threads * 4) chunks = (int64_t)threads * 4;
  job_t job = {.fn = fn, .arg = arg, .n = n, .chunk = (n + chunks - 1) / chunks, .shares = threads};
  chunks = (n + job.chunk - 1) / job.chunk;
  for (int i = 0; i < threads; ++i) {
    unsigned long long lo = (unsigned long long)(chunks * i / threads);
    unsigned long long hi = (unsigned long long)(chunks * (i + 1) / threads);
    atomic_init(&job.share[i].range, (hi << 32) | lo);
  }
  atomic_init(&job.running, 0);
  publish(&job);
  run_chunks(&job, 0);
  pthread_mutex_lock(&g_pool.mu);
  g_pool.job = NULL; /* later arrivals see no job */
  pthread_mutex_unlock(&g_pool.mu);
  /* Workers still inside a chunk finish within about a chunk's time. */
  int64_t until = tpu_monotonic_ns() + CALLER_SPIN_NS;
  while (atomic_load_explicit(&job.running, memory_order_acquire) > 0 && tpu_monotonic_ns() < until)
    for (int i = 0; i < 16; ++i) tpu_cpu_relax();
  if (atomic_load_explicit(&job.running, memory_order_acquire) > 0) {
    pthread_mutex_lock(&g_pool.mu);
    count(&g_pool.c.caller_sleeps);
    while (atomic_load(&job.running) > 0) pthread_cond_wait(&g_pool.done, &g_pool.mu);
    pthread_mutex_unlock(&g_pool.mu);
  }
  pthread_mutex_unlock(&g_pool.busy);
}

void tpu_parallel_exclusive(void (*fn)(void* arg, int threads), void* arg) {
  int threads = tpu_parallel_threads();
  if (threads <= 1 || pthread_mutex_trylock(&g_pool.busy) != 0) {
    if (threads > 1) count(&g_pool.c.serial_busy);
    fn(arg, 1);
    return;
  }
  count(&g_pool.c.exclusive);
  atomic_store_explicit(&g_pool.exclusive, true, memory_order_relaxed);
  if (tl_pinned_caller) unpin_for_team();
  fn(arg, threads);
  if (tl_pinned_caller) set_cores(g_pool.cpus, 1);
  atomic_store_explicit(&g_pool.exclusive, false, memory_order_relaxed);
  publish(NULL); /* workers that slept through it poll for the next kernel */
  pthread_mutex_unlock(&g_pool.busy);
}

void tpu_pool_stats(tpu_pool_stats_t* out_stats) {
  tpu_pool_stats_t s = {.threads = tpu_parallel_threads()};
  const pool_counters_t* c = &g_pool.c;
  s.jobs = atomic_load(&c->jobs);
  s.serial_busy = atomic_load(&c->serial_busy);
  s.exclusive = atomic_load(&c->exclusive);
  s.spin_hits = atomic_load(&c->spin_hits);
  s.spin_misses = atomic_load(&c->spin_misses);
  s.spin_backoffs = atomic_load(&c->spin_backoffs);
  s.sleeps = atomic_load(&c->sleeps);
  s.wakeups = atomic_load(&c->wakeups);
  s.empty_takes = atomic_load(&c->empty_takes);
  s.caller_sleeps = atomic_load(&c->caller_sleeps);
  s.pinned = atomic_load(&g_pool.pinned);
  s.batch_threads = atomic_load(&g_pool.batch_threads);
  for (int i = 1; i < s.threads; ++i) {
    int64_t v = atomic_load_explicit(&g_pool.spin_ns[i], memory_order_relaxed);
    if (v > s.spin_ns) s.spin_ns = v;
  }
  *out_stats = s;
}
