/* pool.c — the compute pool kernels split work over (tpu_parallel_for).
 *
 * One pool for the whole process, shared by every chip and stream, with
 * (threads - 1) workers plus the calling thread. One job runs at a time: a
 * call that finds the pool busy (another stream's kernel, or a nested call)
 * runs serially in its caller, so the pool never oversubscribes the cores. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "kernel.h"

typedef struct job {
  void (*fn)(void* arg, int64_t begin, int64_t end);
  void* arg;
  int64_t n, chunk;
  atomic_llong next;   /* next chunk start */
  atomic_int running;  /* workers still inside this job */
} job_t;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  pthread_mutex_t busy; /* held by the caller owning the pool */
  job_t* job;
  uint64_t generation;
  int threads;
  int started;
} g_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
            PTHREAD_MUTEX_INITIALIZER, NULL, 0, 1, 0};

static void run_chunks(job_t* job) {
  for (;;) {
    int64_t begin = atomic_fetch_add(&job->next, job->chunk);
    if (begin >= job->n) return;
    int64_t end = begin + job->chunk < job->n ? begin + job->chunk : job->n;
    job->fn(job->arg, begin, end);
  }
}

static void* worker_main(void* unused) {
  (void)unused;
  pthread_setname_np(pthread_self(), "tpu-pool");
  uint64_t seen = 0;
  pthread_mutex_lock(&g_pool.mu);
  for (;;) {
    while (g_pool.generation == seen) pthread_cond_wait(&g_pool.wake, &g_pool.mu);
    seen = g_pool.generation;
    job_t* job = g_pool.job;
    if (!job) continue;
    atomic_fetch_add(&job->running, 1);
    pthread_mutex_unlock(&g_pool.mu);
    run_chunks(job);
    pthread_mutex_lock(&g_pool.mu);
    if (atomic_fetch_sub(&job->running, 1) == 1) pthread_cond_broadcast(&g_pool.done);
  }
  return NULL;
}

static void start_pool(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int threads = cores > 0 ? (int)cores : 1;
  const char* env = getenv("TORCH_TPU_NUM_THREADS");
  if (env && atoi(env) > 0) threads = atoi(env);
  if (threads > 64) threads = 64;
  g_pool.threads = threads;
  for (int i = 1; i < threads; ++i) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, worker_main, NULL) != 0) g_pool.threads = i;
    pthread_attr_destroy(&attr);
    if (g_pool.threads == i) break;
  }
}

int tpu_parallel_threads(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, start_pool);
  return g_pool.threads;
}

void tpu_parallel_for(int64_t n, int64_t grain, void (*fn)(void* arg, int64_t begin, int64_t end),
                      void* arg) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int threads = tpu_parallel_threads();
  if (threads <= 1 || n <= grain || pthread_mutex_trylock(&g_pool.busy) != 0) {
    fn(arg, 0, n);
    return;
  }
  int64_t chunks = (n + grain - 1) / grain;
  if (chunks > (int64_t)threads * 4) chunks = (int64_t)threads * 4;
  job_t job = {.fn = fn, .arg = arg, .n = n, .chunk = (n + chunks - 1) / chunks};
  atomic_init(&job.next, 0);
  atomic_init(&job.running, 0);
  pthread_mutex_lock(&g_pool.mu);
  g_pool.job = &job;
  g_pool.generation++;
  pthread_cond_broadcast(&g_pool.wake);
  pthread_mutex_unlock(&g_pool.mu);
  run_chunks(&job);
  pthread_mutex_lock(&g_pool.mu);
  g_pool.job = NULL; /* late wakers see no job */
  while (atomic_load(&job.running) > 0) pthread_cond_wait(&g_pool.done, &g_pool.mu);
  pthread_mutex_unlock(&g_pool.mu);
  pthread_mutex_unlock(&g_pool.busy);
}

void tpu_parallel_exclusive(void (*fn)(void* arg, int threads), void* arg) {
  int threads = tpu_parallel_threads();
  if (threads <= 1 || pthread_mutex_trylock(&g_pool.busy) != 0) {
    fn(arg, 1);
    return;
  }
  fn(arg, threads);
  pthread_mutex_unlock(&g_pool.busy);
}
