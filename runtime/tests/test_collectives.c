/* test_collectives.c — the collectives (runtime/src/collectives):
 *   - the reduction kernels against their plain reference, every dtype and
 *     op, odd lengths, 1..4 sources;
 *   - every collective across 2 and 4 forked processes (tpu_comm_run on host
 *     memory: children do not use the runtime, whose threads fork does not
 *     copy), every dtype, sizes spanning several rounds (small slots), each
 *     rank checking its result against the reference built from every rank's
 *     (deterministic) input;
 *   - failures: a rank that never arrives (DEADLINE_EXCEEDED naming the
 *     collective and the rank, the others then see ABORTED), ranks calling
 *     different collectives, a rank that never joins;
 *   - the stream path: a collective enqueued on a chip's stream over device
 *     memory, with its request.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "collectives/comm.h"
#include "base/spin.h"
#include "test.h"
#include "tpu/collectives.h"
#include "tpu/config.h"
#include "tpu/hal.h"
#include "tpu/runtime.h"

/* ---- deterministic inputs ------------------------------------------------------------- */

/* Element i of rank r's input, as a double small enough for every dtype;
 * `salt` varies it per use. Values are exact in half types. */
static double input_value(tpu_dtype_t dt, int r, size_t i, int salt) {
  uint32_t h = ((uint32_t)r * 7919u + (uint32_t)i * 104729u + (uint32_t)salt * 31u) * 2654435761u;
  if (dt == TPU_DTYPE_BOOL) return (h >> 7) & 1;
  if (dt == TPU_DTYPE_U8) return (double)((h >> 8) % 4);
  int v = (int)((h >> 8) % 7) - 3; /* -3..3: products of 4 stay small */
  if (v == 0) v = 1;
  if (tpu_dtype_is_floating(dt)) return v * 0.5;
  return v;
}

static void* make_input(tpu_dtype_t dt, int r, size_t n, int salt) {
  size_t es = tpu_dtype_size(dt);
  uint8_t* p = malloc(n * es + 8);
  for (size_t i = 0; i < n; ++i) {
    double v = input_value(dt, r, i, salt);
    tpu_convert(p + i * es, dt, 1, &v, TPU_DTYPE_F64, 1, 1);
  }
  return p;
}

/* ---- reduction kernels against the reference ------------------------------------------ */

TEST(collectives_reduce_kernels_match_reference) {
  const size_t lengths[] = {0, 1, 7, 512, 513, 1500};
  for (int dt = 0; dt < TPU_DTYPE_COUNT; ++dt) {
    for (int op = 0; op < TPU_REDUCE_OP_COUNT; ++op) {
      if (op == TPU_REDUCE_AVG && dt == TPU_DTYPE_BOOL) continue;
      for (size_t li = 0; li < sizeof(lengths) / sizeof(lengths[0]); ++li) {
        for (int nsrc = 1; nsrc <= 4; ++nsrc) {
          size_t n = lengths[li], es = tpu_dtype_size((tpu_dtype_t)dt);
          void* srcs[4];
          for (int s = 0; s < nsrc; ++s) srcs[s] = make_input((tpu_dtype_t)dt, s, n, op + 3 * (int)li);
          uint8_t* got = calloc(n + 1, es);
          uint8_t* want = calloc(n + 1, es);
          coll_reduce(got, (const void* const*)srcs, nsrc, n, (tpu_dtype_t)dt, (tpu_reduce_op_t)op, nsrc);
          coll_reduce_ref(want, (const void* const*)srcs, nsrc, n, (tpu_dtype_t)dt, (tpu_reduce_op_t)op, nsrc);
          if (memcmp(got, want, n * es) != 0)
            tpu_test_fail(__FILE__, __LINE__, "%s op %d n=%zu nsrc=%d differs from the reference",
                          tpu_dtype_name((tpu_dtype_t)dt), op, n, nsrc);
          /* dst aliasing the first source (in place) */
          if (nsrc > 1) {
            memcpy(got, srcs[0], n * es);
            const void* in_place[4] = {got, srcs[1], nsrc > 2 ? srcs[2] : NULL, nsrc > 3 ? srcs[3] : NULL};
            coll_reduce(got, in_place, nsrc, n, (tpu_dtype_t)dt, (tpu_reduce_op_t)op, nsrc);
            CHECK(memcmp(got, want, n * es) == 0);
          }
          for (int s = 0; s < nsrc; ++s) free(srcs[s]);
          free(got);
          free(want);
        }
      }
    }
  }
}

/* ---- forked ranks ------------------------------------------------------------------------ */

static int g_child_failed;

#define CCHECK(cond)                                                                   \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      fprintf(stderr, "  rank child %d: %s:%d: CHECK(%s)\n", (int)getpid(), __FILE__,  \
              __LINE__, #cond);                                                        \
      g_child_failed = 1;                                                              \
    }                                                                                  \
  } while (0)

#define CCHECK_OK(expr)                                                                \
  do {                                                                                 \
    tpu_status_t s_ = (expr);                                                          \
    if (s_ != TPU_OK) {                                                                \
      fprintf(stderr, "  rank child %d: %s:%d: %s: %s\n", (int)getpid(), __FILE__,     \
              __LINE__, #expr, tpu_status_message(s_));                                \
      tpu_status_free(s_);                                                             \
      g_child_failed = 1;                                                              \
    }                                                                                  \
  } while (0)

typedef void (*rank_fn)(tpu_comm_t* comm, int rank, int nranks);

/* Forks `nranks` processes that join one communicator and run fn; returns
 * the number of children that failed (or were killed after 120 s). */
static int run_ranks(int nranks, int64_t timeout_ms, rank_fn fn) {
  tpu_comm_id_t id;
  CHECK_OK(tpu_comm_unique_id(&id));
  fflush(stdout);
  fflush(stderr);
  pid_t pids[TPU_COMM_MAX_RANKS];
  for (int r = 0; r < nranks; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      g_child_failed = 0;
      tpu_comm_t* comm = NULL;
      tpu_status_t s = tpu_comm_create(&id, nranks, r, timeout_ms, &comm);
      if (s != TPU_OK) {
        fprintf(stderr, "  rank %d: create: %s\n", r, tpu_status_message(s));
        _exit(2);
      }
      fn(comm, r, nranks);
      tpu_comm_release(comm);
      _exit(g_child_failed ? 1 : 0);
    }
  }
  int failed = 0;
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (int r = 0; r < nranks; ++r) {
    for (;;) {
      int st = 0;
      pid_t w = waitpid(pids[r], &st, WNOHANG);
      if (w == pids[r]) {
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) failed++;
        break;
      }
      struct timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      if (now.tv_sec - start.tv_sec > 120) {
        for (int q = r; q < nranks; ++q) kill(pids[q], SIGKILL);
        for (int q = r; q < nranks; ++q) waitpid(pids[q], NULL, 0);
        return failed + nranks - r;
      }
      struct timespec ts = {0, 2000000};
      nanosleep(&ts, NULL);
    }
  }
  return failed;
}

static tpu_coll_args_t args_of(tpu_coll_kind_t kind, const void* send, void* recv, size_t count,
                               tpu_dtype_t dt) {
  tpu_coll_args_t a;
  memset(&a, 0, sizeof(a));
  a.kind = kind;
  a.send = (uint64_t)(uintptr_t)send;
  a.recv = (uint64_t)(uintptr_t)recv;
  a.count = count;
  a.dtype = dt;
  return a;
}

static bool same_bytes(const void* a, const void* b, size_t n) { return n == 0 || memcmp(a, b, n) == 0; }

/* Every collective, every dtype; sizes span several rounds (the slots are
 * small: TPU_DIST_CHUNK_KB=16 in run_all). */
static void all_collectives(tpu_comm_t* comm, int r, int N) {
  const size_t sizes[] = {0, 3, 5000};
  for (int dti = 0; dti < TPU_DTYPE_COUNT; ++dti) {
    tpu_dtype_t dt = (tpu_dtype_t)dti;
    size_t es = tpu_dtype_size(dt);
    for (size_t si = 0; si < 3; ++si) {
      size_t n = sizes[si];
      void* in[TPU_COMM_MAX_RANKS];
      for (int p = 0; p < N; ++p) in[p] = make_input(dt, p, n * N, (int)si);
      uint8_t* out = calloc(n * N + 1, es);
      uint8_t* want = calloc(n * N + 1, es);
      /* all_reduce and reduce, every op; in place too */
      for (int op = 0; op < TPU_REDUCE_OP_COUNT; ++op) {
        if (op == TPU_REDUCE_AVG && dt == TPU_DTYPE_BOOL) continue;
        tpu_coll_args_t a = args_of(TPU_COLL_ALL_REDUCE, in[r], out, n, dt);
        a.op = (tpu_reduce_op_t)op;
        CCHECK_OK(tpu_comm_run(comm, &a));
        coll_reduce_ref(want, (const void* const*)in, N, n, dt, a.op, N);
        CCHECK(same_bytes(out, want, n * es));
        memcpy(out, in[r], n * es);
        a.send = a.recv;
        CCHECK_OK(tpu_comm_run(comm, &a));
        CCHECK(same_bytes(out, want, n * es));
        a = args_of(TPU_COLL_REDUCE, in[r], out, n, dt);
        a.op = (tpu_reduce_op_t)op;
        a.root = N - 1;
        memset(out, 0, n * es);
        CCHECK_OK(tpu_comm_run(comm, &a));
        if (r == N - 1) CCHECK(same_bytes(out, want, n * es));
      }
      /* reduce_scatter (sum): input n*N per rank */
      {
        tpu_coll_args_t a = args_of(TPU_COLL_REDUCE_SCATTER, in[r], out, n, dt);
        a.op = TPU_REDUCE_SUM;
        CCHECK_OK(tpu_comm_run(comm, &a));
        const void* parts[TPU_COMM_MAX_RANKS];
        for (int p = 0; p < N; ++p) parts[p] = (const uint8_t*)in[p] + (size_t)r * n * es;
        coll_reduce_ref(want, parts, N, n, dt, TPU_REDUCE_SUM, N);
        CCHECK(same_bytes(out, want, n * es));
      }
      /* broadcast from the last rank */
      {
        memset(out, 0, n * es);
        tpu_coll_args_t a = args_of(TPU_COLL_BROADCAST, in[r], out, n, dt);
        a.root = N - 1;
        CCHECK_OK(tpu_comm_run(comm, &a));
        CCHECK(same_bytes(out, in[N - 1], n * es));
      }
      /* all_gather and gather */
      for (int g = 0; g < 2; ++g) {
        memset(out, 0, n * N * es);
        tpu_coll_args_t a = args_of(g ? TPU_COLL_GATHER : TPU_COLL_ALL_GATHER, in[r], out, n, dt);
        a.root = g ? 1 % N : 0;
        CCHECK_OK(tpu_comm_run(comm, &a));
        if (!g || r == a.root)
          for (int p = 0; p < N; ++p) CCHECK(same_bytes(out + (size_t)p * n * es, in[p], n * es));
      }
      /* scatter from rank 0 */
      {
        memset(out, 0, n * es);
        tpu_coll_args_t a = args_of(TPU_COLL_SCATTER, in[r], out, n, dt);
        CCHECK_OK(tpu_comm_run(comm, &a));
        CCHECK(same_bytes(out, (const uint8_t*)in[0] + (size_t)r * n * es, n * es));
      }
      /* all_to_all, uneven: rank i sends (i + 2j) % 3 * n / 2 + j elements to j */
      {
        size_t sc[TPU_COMM_MAX_RANKS], rc[TPU_COMM_MAX_RANKS], rd[TPU_COMM_MAX_RANKS];
        size_t sdisp[TPU_COMM_MAX_RANKS], so = 0, ro = 0;
        for (int p = 0; p < N; ++p) {
          sc[p] = (size_t)((r + 2 * p) % 3) * n / 2 + (size_t)p;
          rc[p] = (size_t)((p + 2 * r) % 3) * n / 2 + (size_t)r;
          sdisp[p] = so;
          rd[p] = ro;
          so += sc[p];
          ro += rc[p];
        }
        void* src = make_input(dt, r, so, 77);
        uint8_t* dst = calloc(ro + 1, es);
        tpu_coll_args_t a = args_of(TPU_COLL_ALL_TO_ALL, src, dst, 0, dt);
        a.send_counts = sc;
        a.recv_counts = rc;
        CCHECK_OK(tpu_comm_run(comm, &a));
        for (int p = 0; p < N; ++p) {
          /* what p sent to r: its elements at p's displacement for r */
          size_t pso = 0;
          for (int q = 0; q < r; ++q) pso += (size_t)((p + 2 * q) % 3) * n / 2 + (size_t)q;
          uint8_t* psrc = make_input(dt, p, pso + rc[p], 77);
          CCHECK(same_bytes(dst + rd[p] * es, psrc + pso * es, rc[p] * es));
          free(psrc);
        }
        free(src);
        free(dst);
        (void)sdisp;
      }
      /* send/recv around the ring */
      if (N > 1) {
        int to = (r + 1) % N, from = (r + N - 1) % N;
        tpu_coll_args_t a = args_of(TPU_COLL_SEND, in[r], NULL, n, dt);
        a.root = to;
        tpu_coll_args_t b = args_of(TPU_COLL_RECV, NULL, out, n, dt);
        b.root = from;
        memset(out, 0, n * es);
        if (r % 2 == 0) {
          CCHECK_OK(tpu_comm_run(comm, &a));
          CCHECK_OK(tpu_comm_run(comm, &b));
        } else {
          CCHECK_OK(tpu_comm_run(comm, &b));
          CCHECK_OK(tpu_comm_run(comm, &a));
        }
        CCHECK(same_bytes(out, in[from], n * es));
      }
      tpu_coll_args_t bar = args_of(TPU_COLL_BARRIER, NULL, NULL, 0, dt);
      CCHECK_OK(tpu_comm_run(comm, &bar));
      for (int p = 0; p < N; ++p) free(in[p]);
      free(out);
      free(want);
    }
  }
  /* A message larger than a mailbox (1 MiB): several chunks. */
  if (N > 1) {
    size_t n = (3u << 20) / 4 + 11;
    void* big = make_input(TPU_DTYPE_F32, 0, n, 5);
    float* got = calloc(n, 4);
    if (r == 0) {
      tpu_coll_args_t a = args_of(TPU_COLL_SEND, big, NULL, n, TPU_DTYPE_F32);
      a.root = N - 1;
      CCHECK_OK(tpu_comm_run(comm, &a));
    } else if (r == N - 1) {
      tpu_coll_args_t a = args_of(TPU_COLL_RECV, NULL, got, n, TPU_DTYPE_F32);
      a.root = 0;
      CCHECK_OK(tpu_comm_run(comm, &a));
      CCHECK(same_bytes(got, big, n * 4));
    }
    free(big);
    free(got);
  }
}

static void run_all(int nranks) {
  CHECK_OK(tpu_config_set(TPU_CONFIG_DIST_CHUNK_KB, "16"));
  int failed = run_ranks(nranks, 20000, all_collectives);
  CHECK_OK(tpu_config_set(TPU_CONFIG_DIST_CHUNK_KB, NULL));
  CHECK(failed == 0);
}

TEST(collectives_every_collective_2_ranks) { run_all(2); }
TEST(collectives_every_collective_4_ranks) { run_all(4); }

/* Large all_reduce with the default slots: the two-barrier path. */
static void big_all_reduce(tpu_comm_t* comm, int r, int N) {
  size_t n = (5u << 20) / 4 + 3;
  void* in[TPU_COMM_MAX_RANKS];
  for (int p = 0; p < N; ++p) in[p] = make_input(TPU_DTYPE_F32, p, n, 9);
  float* out = calloc(n, 4);
  float* want = calloc(n, 4);
  tpu_coll_args_t a = args_of(TPU_COLL_ALL_REDUCE, in[r], out, n, TPU_DTYPE_F32);
  CCHECK_OK(tpu_comm_run(comm, &a));
  coll_reduce_ref(want, (const void* const*)in, N, n, TPU_DTYPE_F32, TPU_REDUCE_SUM, N);
  CCHECK(same_bytes(out, want, n * 4));
  for (int p = 0; p < N; ++p) free(in[p]);
  free(out);
  free(want);
}

/* In place (each rank reads its own slice from its input), odd sizes over
 * several chunks, every op, a half and an integer type: bit for bit the
 * reference. */
static void big_all_reduce_in_place(tpu_comm_t* comm, int r, int N) {
  const tpu_dtype_t dts[] = {TPU_DTYPE_BF16, TPU_DTYPE_I32};
  for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); ++d) {
    for (int op = 0; op < TPU_REDUCE_OP_COUNT; ++op) {
      size_t es = tpu_dtype_size(dts[d]), n = ((size_t)5 << 19) / es + 7 * (size_t)op + 1;
      void* in[TPU_COMM_MAX_RANKS];
      for (int p = 0; p < N; ++p) in[p] = make_input(dts[d], p, n, 11 + op);
      void* want = calloc(n, es);
      coll_reduce_ref(want, (const void* const*)in, N, n, dts[d], (tpu_reduce_op_t)op, N);
      tpu_coll_args_t a = args_of(TPU_COLL_ALL_REDUCE, in[r], in[r], n, dts[d]);
      a.op = (tpu_reduce_op_t)op;
      CCHECK_OK(tpu_comm_run(comm, &a));
      CCHECK(same_bytes(in[r], want, n * es));
      for (int p = 0; p < N; ++p) free(in[p]);
      free(want);
    }
  }
}

TEST(collectives_large_all_reduce_2_and_4_ranks) {
  CHECK(run_ranks(2, 20000, big_all_reduce) == 0);
  CHECK(run_ranks(4, 20000, big_all_reduce) == 0);
  CHECK(run_ranks(3, 60000, big_all_reduce_in_place) == 0);
}

/* ---- coalesced collectives ------------------------------------------------------------------ */

/* Several tensors of odd sizes (one empty) as one collective, against the
 * reference per tensor; small slots, so chunks straddle tensors. */
static void coalesced_collectives(tpu_comm_t* comm, int r, int N) {
  const size_t counts[] = {3, 0, 5000, 1, 777};
  enum { NS = 5 };
  const tpu_dtype_t dts[] = {TPU_DTYPE_F32, TPU_DTYPE_BF16, TPU_DTYPE_I64};
  for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); ++d) {
    tpu_dtype_t dt = dts[d];
    size_t es = tpu_dtype_size(dt);
    void* in[NS][TPU_COMM_MAX_RANKS];
    uint8_t *send[NS], *recv[NS], *want[NS];
    tpu_coll_segment_t segs[NS];
    for (int i = 0; i < NS; ++i) {
      for (int p = 0; p < N; ++p) in[i][p] = make_input(dt, p, counts[i] * (size_t)N, i + 7 * (int)d);
      send[i] = calloc(counts[i] * (size_t)N + 1, es);
      recv[i] = calloc(counts[i] * (size_t)N + 1, es);
      want[i] = calloc(counts[i] * (size_t)N + 1, es);
    }
    tpu_coll_args_t a;
    for (int op = 0; op < TPU_REDUCE_OP_COUNT; ++op) {
      for (int kind = 0; kind < 2; ++kind) { /* all_reduce, reduce_scatter */
        for (int i = 0; i < NS; ++i) {
          memcpy(send[i], in[i][r], counts[i] * (size_t)N * es);
          segs[i] = (tpu_coll_segment_t){(uint64_t)(uintptr_t)send[i], (uint64_t)(uintptr_t)recv[i], counts[i]};
          const void* parts[TPU_COMM_MAX_RANKS];
          for (int p = 0; p < N; ++p) parts[p] = (const uint8_t*)in[i][p] + (kind ? (size_t)r * counts[i] * es : 0);
          coll_reduce_ref(want[i], parts, N, counts[i], dt, (tpu_reduce_op_t)op, N);
        }
        a = args_of(kind ? TPU_COLL_REDUCE_SCATTER : TPU_COLL_ALL_REDUCE, NULL, NULL, 0, dt);
        a.op = (tpu_reduce_op_t)op;
        a.segments = segs;
        a.nsegments = NS;
        CCHECK_OK(tpu_comm_run(comm, &a));
        for (int i = 0; i < NS; ++i) CCHECK(same_bytes(recv[i], want[i], counts[i] * es));
      }
    }
    /* all_gather */
    for (int i = 0; i < NS; ++i)
      segs[i] = (tpu_coll_segment_t){(uint64_t)(uintptr_t)in[i][r], (uint64_t)(uintptr_t)recv[i], counts[i]};
    a = args_of(TPU_COLL_ALL_GATHER, NULL, NULL, 0, dt);
    a.segments = segs;
    a.nsegments = NS;
    CCHECK_OK(tpu_comm_run(comm, &a));
    for (int i = 0; i < NS; ++i)
      for (int p = 0; p < N; ++p) CCHECK(same_bytes(recv[i] + (size_t)p * counts[i] * es, in[i][p], counts[i] * es));
    for (int i = 0; i < NS; ++i) {
      for (int p = 0; p < N; ++p) free(in[i][p]);
      free(send[i]);
      free(recv[i]);
      free(want[i]);
    }
  }
  /* a rank whose tensors add up to a different total: every rank fails */
  float one = 1, out = 0;
  tpu_coll_segment_t seg = {(uint64_t)(uintptr_t)&one, (uint64_t)(uintptr_t)&out, r == 0 ? 1 : 0};
  tpu_coll_args_t a = args_of(TPU_COLL_ALL_REDUCE, NULL, NULL, 0, TPU_DTYPE_F32);
  a.segments = &seg;
  a.nsegments = 1;
  tpu_status_t s = tpu_comm_run(comm, &a);
  CCHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT);
  tpu_status_free(s);
}

TEST(collectives_coalesced_run_as_one) {
  CHECK_OK(tpu_config_set(TPU_CONFIG_DIST_CHUNK_KB, "16"));
  CHECK(run_ranks(2, 20000, coalesced_collectives) == 0);
  CHECK(run_ranks(3, 20000, coalesced_collectives) == 0);
  CHECK_OK(tpu_config_set(TPU_CONFIG_DIST_CHUNK_KB, NULL));
}

/* ---- chips of one process (tpu_comm_create_local) --------------------------------------------- */

typedef struct local_rank {
  tpu_comm_t* comm;
  int r, N;
  int failed;
} local_rank_t;

#define LCHECK(cond)                                                                   \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      fprintf(stderr, "  local rank %d: %s:%d: CHECK(%s)\n", L->r, __FILE__, __LINE__, #cond); \
      L->failed = 1;                                                                   \
    }                                                                                  \
  } while (0)

#define LCHECK_OK(expr)                                                                \
  do {                                                                                 \
    tpu_status_t s_ = (expr);                                                          \
    if (s_ != TPU_OK) {                                                                \
      fprintf(stderr, "  local rank %d: %s:%d: %s\n", L->r, __FILE__, __LINE__, tpu_status_message(s_)); \
      tpu_status_free(s_);                                                             \
      L->failed = 1;                                                                   \
    }                                                                                  \
  } while (0)

/* Each thread is one chip's worker: every direct collective, in and out of
 * place, against the reference; plus all_to_all and barrier (staged). */
static void* local_rank_main(void* arg) {
  local_rank_t* L = arg;
  int r = L->r, N = L->N;
  const tpu_dtype_t dts[] = {TPU_DTYPE_F32, TPU_DTYPE_F16, TPU_DTYPE_I32, TPU_DTYPE_BOOL};
  for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); ++d) {
    for (size_t n = 1; n < 40000; n *= 37) {
      tpu_dtype_t dt = dts[d];
      size_t es = tpu_dtype_size(dt);
      void* in[TPU_COMM_MAX_RANKS];
      for (int p = 0; p < N; ++p) in[p] = make_input(dt, p, n * (size_t)N, (int)(n + d));
      uint8_t* send = malloc(n * (size_t)N * es + 1);
      uint8_t* recv = calloc(n * (size_t)N + 1, es);
      uint8_t* want = calloc(n * (size_t)N + 1, es);
      for (int op = 0; op < TPU_REDUCE_OP_COUNT; ++op) {
        if (op == TPU_REDUCE_AVG && dt == TPU_DTYPE_BOOL) continue;
        coll_reduce_ref(want, (const void* const*)in, N, n, dt, (tpu_reduce_op_t)op, N);
        memcpy(send, in[r], n * es);
        tpu_coll_args_t a = args_of(TPU_COLL_ALL_REDUCE, send, send, n, dt);
        a.op = (tpu_reduce_op_t)op;
        LCHECK_OK(tpu_comm_run(L->comm, &a));
        LCHECK(same_bytes(send, want, n * es));
        memcpy(send, in[r], n * es);
        a = args_of(TPU_COLL_REDUCE, send, recv, n, dt);
        a.op = (tpu_reduce_op_t)op;
        a.root = N - 1;
        LCHECK_OK(tpu_comm_run(L->comm, &a));
        if (r == N - 1) LCHECK(same_bytes(recv, want, n * es));
      }
      memcpy(send, in[r], n * es);
      tpu_coll_args_t a = args_of(TPU_COLL_ALL_GATHER, send, recv, n, dt);
      LCHECK_OK(tpu_comm_run(L->comm, &a));
      for (int p = 0; p < N; ++p) LCHECK(same_bytes(recv + (size_t)p * n * es, in[p], n * es));
      memset(recv, 0, n * (size_t)N * es);
      a = args_of(TPU_COLL_GATHER, send, r == 1 ? recv : NULL, n, dt);
      a.root = 1;
      LCHECK_OK(tpu_comm_run(L->comm, &a));
      if (r == 1)
        for (int p = 0; p < N; ++p) LCHECK(same_bytes(recv + (size_t)p * n * es, in[p], n * es));
      memcpy(send, in[r], n * (size_t)N * es);
      a = args_of(TPU_COLL_SCATTER, r == 0 ? send : NULL, recv, n, dt);
      LCHECK_OK(tpu_comm_run(L->comm, &a));
      LCHECK(same_bytes(recv, (uint8_t*)in[0] + (size_t)r * n * es, n * es));
      memcpy(recv, in[r], n * es);
      a = args_of(TPU_COLL_BROADCAST, recv, recv, n, dt);
      a.root = N - 1;
      LCHECK_OK(tpu_comm_run(L->comm, &a));
      LCHECK(same_bytes(recv, in[N - 1], n * es));
      a = args_of(TPU_COLL_ALL_TO_ALL, send, recv, n, dt);
      LCHECK_OK(tpu_comm_run(L->comm, &a));
      for (int p = 0; p < N; ++p) LCHECK(same_bytes(recv + (size_t)p * n * es, (uint8_t*)in[p] + (size_t)r * n * es, n * es));
      for (int p = 0; p < N; ++p) free(in[p]);
      free(send);
      free(recv);
      free(want);
    }
  }
  /* a mismatch fails on every chip and leaves the communicator usable */
  float x[3] = {1, 2, 3};
  tpu_coll_args_t a = args_of(TPU_COLL_ALL_REDUCE, x, x, r == 0 ? 2 : 3, TPU_DTYPE_F32);
  tpu_status_t s = tpu_comm_run(L->comm, &a);
  LCHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT);
  tpu_status_free(s);
  a = args_of(TPU_COLL_BARRIER, NULL, NULL, 0, TPU_DTYPE_F32);
  LCHECK_OK(tpu_comm_run(L->comm, &a));
  return NULL;
}

TEST(collectives_local_chips_read_each_other_directly) {
  for (int N = 2; N <= 4; N += 2) {
    tpu_comm_t* comms[TPU_COMM_MAX_RANKS];
    CHECK_OK(tpu_comm_create_local(N, 20000, comms));
    pthread_t th[TPU_COMM_MAX_RANKS];
    local_rank_t ranks[TPU_COMM_MAX_RANKS];
    for (int r = 0; r < N; ++r) {
      ranks[r] = (local_rank_t){comms[r], r, N, 0};
      pthread_create(&th[r], NULL, local_rank_main, &ranks[r]);
    }
    for (int r = 0; r < N; ++r) {
      pthread_join(th[r], NULL);
      CHECK(!ranks[r].failed);
    }
    for (int r = N - 1; r >= 0; --r) tpu_comm_release(comms[r]);
  }
  /* a chip that never arrives: the others time out naming it */
  tpu_comm_t* comms[2];
  CHECK_OK(tpu_comm_create_local(2, 300, comms));
  float x[2] = {1, 2};
  tpu_coll_args_t a = args_of(TPU_COLL_ALL_REDUCE, x, x, 2, TPU_DTYPE_F32);
  tpu_status_t s = tpu_comm_run(comms[0], &a);
  CHECK(tpu_status_code(s) == TPU_CODE_DEADLINE_EXCEEDED);
  CHECK(s && strstr(tpu_status_message(s), "rank 1 did not arrive") != NULL);
  tpu_status_free(s);
  tpu_comm_release(comms[1]);
  tpu_comm_release(comms[0]);
}

/* ---- the direct path: buffers in shared device memory ------------------------------------ */

/* Each forked rank opens a host-driver chip of its own, shares its memory and
 * places its buffers there, so peers read them in place (comm_run_mem);
 * g_direct_mixed: rank 1 keeps its buffers in plain host memory, so every
 * rank must agree to stage instead. Results are compared bit for bit with
 * the reference (the reductions run in rank order on both paths). */
static int g_direct_mixed;

static uint8_t* chip_alloc(tpu_hal_chip_t* chip, bool shared, size_t bytes) {
  if (!shared) return calloc(bytes + 1, 1);
  uint64_t addr = 0;
  tpu_status_t s = tpu_host_driver.memory_map(chip, bytes ? bytes : 1, &addr);
  if (s != TPU_OK) {
    tpu_status_free(s);
    return NULL;
  }
  return (uint8_t*)(uintptr_t)addr;
}

static void direct_collectives(tpu_comm_t* comm, int r, int N) {
  tpu_hal_chip_t* chip = NULL;
  CCHECK_OK(tpu_host_driver.chip_open(0, (uint64_t)256 << 20, &chip));
  if (!chip) return;
  CCHECK_OK(tpu_host_driver.memory_share(chip));
  bool shared = !(g_direct_mixed && r == 1);
  coll_mem_t mem = {.driver = &tpu_host_driver, .chip = chip};
  const tpu_dtype_t dts[] = {TPU_DTYPE_F32, TPU_DTYPE_BF16, TPU_DTYPE_I32, TPU_DTYPE_F64};
  const size_t sizes[] = {1000, 12345, 70001};
  for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); ++d) {
    for (size_t si = 0; si < 3; ++si) {
      tpu_dtype_t dt = dts[d];
      size_t es = tpu_dtype_size(dt), n = sizes[si];
      void* in[TPU_COMM_MAX_RANKS];
      for (int p = 0; p < N; ++p) in[p] = make_input(dt, p, n * (size_t)N, (int)(si + 5 * d));
      uint8_t* send = chip_alloc(chip, shared, n * (size_t)N * es);
      uint8_t* recv = chip_alloc(chip, shared, n * (size_t)N * es);
      uint8_t* want = calloc(n * (size_t)N + 1, es);
      CCHECK(send && recv);
      if (!send || !recv) break;
      for (int op = 0; op < TPU_REDUCE_OP_COUNT; ++op) {
        /* all_reduce, out of place and in place */
        coll_reduce_ref(want, (const void* const*)in, N, n, dt, (tpu_reduce_op_t)op, N);
        memcpy(send, in[r], n * es);
        tpu_coll_args_t a = args_of(TPU_COLL_ALL_REDUCE, send, recv, n, dt);
        a.op = (tpu_reduce_op_t)op;
        CCHECK_OK(comm_run_mem(comm, &a, &mem));
        CCHECK(same_bytes(recv, want, n * es));
        a.recv = a.send;
        CCHECK_OK(comm_run_mem(comm, &a, &mem));
        CCHECK(same_bytes(send, want, n * es));
        /* reduce_scatter: this rank's part of the sum of every rank's n*N */
        const void* parts[TPU_COMM_MAX_RANKS];
        for (int p = 0; p < N; ++p) parts[p] = (const uint8_t*)in[p] + (size_t)r * n * es;
        coll_reduce_ref(want, parts, N, n, dt, (tpu_reduce_op_t)op, N);
        memcpy(send, in[r], n * (size_t)N * es);
        a = args_of(TPU_COLL_REDUCE_SCATTER, send, recv, n, dt);
        a.op = (tpu_reduce_op_t)op;
        CCHECK_OK(comm_run_mem(comm, &a, &mem));
        CCHECK(same_bytes(recv, want, n * es));
      }
      /* all_gather, out of place and in place (send is this rank's part of recv) */
      memcpy(send, in[r], n * es);
      tpu_coll_args_t a = args_of(TPU_COLL_ALL_GATHER, send, recv, n, dt);
      CCHECK_OK(comm_run_mem(comm, &a, &mem));
      for (int p = 0; p < N; ++p) CCHECK(same_bytes(recv + (size_t)p * n * es, in[p], n * es));
      memset(recv, 0, n * (size_t)N * es);
      memcpy(recv + (size_t)r * n * es, in[r], n * es);
      a.send = (uint64_t)(uintptr_t)(recv + (size_t)r * n * es);
      CCHECK_OK(comm_run_mem(comm, &a, &mem));
      for (int p = 0; p < N; ++p) CCHECK(same_bytes(recv + (size_t)p * n * es, in[p], n * es));
      /* broadcast from the last rank, in place */
      memcpy(recv, in[r], n * es);
      a = args_of(TPU_COLL_BROADCAST, recv, recv, n, dt);
      a.root = N - 1;
      CCHECK_OK(comm_run_mem(comm, &a, &mem));
      CCHECK(same_bytes(recv, in[N - 1], n * es));
      for (int p = 0; p < N; ++p) free(in[p]);
      free(want);
      if (!shared) {
        free(send);
        free(recv);
      } else { /* unmapped and mapped again: the peers see the new pages */
        tpu_host_driver.memory_unmap(chip, (uint64_t)(uintptr_t)send, n * (size_t)N * es);
        tpu_host_driver.memory_unmap(chip, (uint64_t)(uintptr_t)recv, n * (size_t)N * es);
      }
    }
  }
  CCHECK(comm->agreed_state == (g_direct_mixed ? 0 : 1)); /* mixed: never tried */
  tpu_host_driver.chip_close(chip);
}

TEST(collectives_direct_path_reads_peers_in_place) {
  CHECK_OK(tpu_config_set(TPU_CONFIG_DIST_DIRECT_MIN_KB, "1"));
  g_direct_mixed = 0;
  CHECK(run_ranks(2, 20000, direct_collectives) == 0);
  CHECK(run_ranks(4, 20000, direct_collectives) == 0);
  g_direct_mixed = 1;
  CHECK(run_ranks(3, 20000, direct_collectives) == 0);
  g_direct_mixed = 0;
  CHECK_OK(tpu_config_set(TPU_CONFIG_DIST_DIRECT_MIN_KB, NULL));
}

/* ---- failures ---------------------------------------------------------------------------- */

static void rank1_never_arrives(tpu_comm_t* comm, int r, int N) {
  float x[4] = {1, 2, 3, 4};
  tpu_coll_args_t bar = args_of(TPU_COLL_BARRIER, NULL, NULL, 0, TPU_DTYPE_F32);
  CCHECK_OK(tpu_comm_run(comm, &bar));
  if (r == 0) {
    tpu_coll_args_t a = args_of(TPU_COLL_ALL_REDUCE, x, x, 4, TPU_DTYPE_F32);
    a.timeout_ms = 300;
    tpu_status_t s = tpu_comm_run(comm, &a);
    CCHECK(tpu_status_code(s) == TPU_CODE_DEADLINE_EXCEEDED);
    const char* m = tpu_status_message(s);
    CCHECK(strstr(m, "all_reduce") != NULL);
    CCHECK(strstr(m, "rank 1 did not arrive") != NULL);
    CCHECK(strstr(m, "rank 1 last ran barrier #1") != NULL);
    tpu_status_free(s);
    /* the communicator is now aborted: later collectives fail at once */
    s = tpu_comm_run(comm, &bar);
    CCHECK(tpu_status_code(s) == TPU_CODE_ABORTED);
    tpu_status_free(s);
  } else {
    struct timespec ts = {0, 600000000};
    nanosleep(&ts, NULL);
    tpu_status_t s = tpu_comm_run(comm, &bar);
    CCHECK(tpu_status_code(s) == TPU_CODE_ABORTED);
    CCHECK(strstr(tpu_status_message(s), "all_reduce") != NULL);
    tpu_status_free(s);
  }
}

TEST(collectives_timeout_names_collective_and_missing_rank) {
  CHECK(run_ranks(2, 20000, rank1_never_arrives) == 0);
}

/* Rank 1 exits (unreaped: a zombie until run_ranks waits for it): rank 0's
 * waits notice its process is gone long before the timeout. */
static void rank1_exits(tpu_comm_t* comm, int r, int N) {
  float x[4] = {1, 2, 3, 4};
  tpu_coll_args_t bar = args_of(TPU_COLL_BARRIER, NULL, NULL, 0, TPU_DTYPE_F32);
  CCHECK_OK(tpu_comm_run(comm, &bar));
  if (r == 1) _exit(0);
  tpu_coll_args_t a = args_of(TPU_COLL_ALL_REDUCE, x, x, 4, TPU_DTYPE_F32);
  a.timeout_ms = 60000;
  int64_t t0 = tpu_monotonic_ns();
  tpu_status_t s = tpu_comm_run(comm, &a);
  CCHECK(tpu_monotonic_ns() - t0 < (int64_t)10000 * 1000000);
  CCHECK(tpu_status_code(s) == TPU_CODE_ABORTED);
  const char* m = tpu_status_message(s);
  CCHECK(strstr(m, "all_reduce") != NULL);
  CCHECK(strstr(m, "rank 1 did not arrive: its process") != NULL);
  CCHECK(strstr(m, "exited; it last ran barrier #1") != NULL);
  tpu_status_free(s);
}

/* The same for a recv from a rank that exited. */
static void sender_exits(tpu_comm_t* comm, int r, int N) {
  float x[4] = {0};
  if (r == 1) _exit(0);
  tpu_coll_args_t a = args_of(TPU_COLL_RECV, NULL, x, 4, TPU_DTYPE_F32);
  a.root = 1;
  a.timeout_ms = 60000;
  tpu_status_t s = tpu_comm_run(comm, &a);
  CCHECK(tpu_status_code(s) == TPU_CODE_ABORTED);
  CCHECK(strstr(tpu_status_message(s), "recv from rank 1 failed on rank 0 of 2: rank 1 did not arrive") != NULL);
  tpu_status_free(s);
}

TEST(collectives_exited_rank_fails_its_peers_at_once) {
  CHECK(run_ranks(2, 60000, rank1_exits) == 0);
  CHECK(run_ranks(2, 60000, sender_exits) == 0);
}

static void mismatched(tpu_comm_t* comm, int r, int N) {
  float x[8] = {0};
  tpu_coll_args_t a = args_of(r == 0 ? TPU_COLL_ALL_REDUCE : TPU_COLL_BROADCAST, x, x, r == 2 ? 8 : 4,
                              TPU_DTYPE_F32);
  tpu_status_t s = tpu_comm_run(comm, &a);
  CCHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT);
  CCHECK(strstr(tpu_status_message(s), "different collectives") != NULL);
  tpu_status_free(s);
  /* still usable afterwards */
  a = args_of(TPU_COLL_ALL_REDUCE, x, x, 8, TPU_DTYPE_F32);
  CCHECK_OK(tpu_comm_run(comm, &a));
  /* mismatched all_to_all splits: every rank reports it */
  size_t sc[4] = {1, 1, 1, 1}, rc[4] = {1, 1, 1, 1};
  if (r == 1) sc[0] = 2;
  a = args_of(TPU_COLL_ALL_TO_ALL, x, x + 4, 0, TPU_DTYPE_F32);
  a.send_counts = sc;
  a.recv_counts = rc;
  s = tpu_comm_run(comm, &a);
  CCHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT);
  tpu_status_free(s);
}

TEST(collectives_mismatch_fails_on_every_rank) { CHECK(run_ranks(3, 20000, mismatched) == 0); }

TEST(collectives_create_times_out_naming_missing_ranks) {
  tpu_comm_id_t id;
  CHECK_OK(tpu_comm_unique_id(&id));
  tpu_comm_t* comm = NULL;
  tpu_status_t s = tpu_comm_create(&id, 3, 0, 200, &comm);
  CHECK(tpu_status_code(s) == TPU_CODE_DEADLINE_EXCEEDED);
  CHECK(strstr(tpu_status_message(s), "ranks 1, 2 did not join") != NULL);
  tpu_status_free(s);
  CHECK(comm == NULL);
  /* bad arguments */
  s = tpu_comm_create(&id, 2, 2, 200, &comm);
  CHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT);
  tpu_status_free(s);
}

/* ---- the stream path ------------------------------------------------------------------------ */

TEST(collectives_stream_path_single_rank) {
  tpu_comm_id_t id;
  CHECK_OK(tpu_comm_unique_id(&id));
  tpu_comm_t* comm = NULL;
  CHECK_OK(tpu_comm_create(&id, 1, 0, 5000, &comm));
  if (!comm) return;
  tpu_chip_t* chip;
  tpu_stream_t* st;
  CHECK_OK(tpu_chip_get(0, &chip));
  CHECK_OK(tpu_stream_get(chip, 0, &st));
  enum { N = 1000 };
  float host[N], back[N];
  for (int i = 0; i < N; ++i) host[i] = (float)i * 0.25f;
  tpu_block_t *a, *b;
  CHECK_OK(tpu_block_alloc(st, sizeof(host), &a));
  CHECK_OK(tpu_block_alloc(st, sizeof(host), &b));
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_H2D, tpu_block_addr(a), (uint64_t)(uintptr_t)host, sizeof(host)));
  tpu_coll_args_t args = args_of(TPU_COLL_ALL_REDUCE, NULL, NULL, N, TPU_DTYPE_F32);
  args.send = tpu_block_addr(a);
  args.recv = tpu_block_addr(b);
  args.op = TPU_REDUCE_MAX;
  tpu_coll_request_t* req = NULL;
  CHECK_OK(tpu_comm_enqueue(comm, st, &args, &req));
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)back, tpu_block_addr(b), sizeof(back)));
  CHECK_OK(tpu_stream_synchronize(st));
  CHECK(req && tpu_coll_request_done(req));
  CHECK_OK(tpu_coll_request_wait(req));
  CHECK_OK(tpu_coll_request_wait(req)); /* waits any number of times */
  CHECK(memcmp(host, back, sizeof(host)) == 0);
  tpu_coll_request_release(req);
  /* arguments refused synchronously */
  args.kind = TPU_COLL_SEND;
  args.root = 0;
  tpu_status_t s = tpu_comm_enqueue(comm, st, &args, NULL);
  CHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT);
  tpu_status_free(s);
  args.kind = TPU_COLL_ALL_REDUCE;
  args.dtype = TPU_DTYPE_BOOL;
  args.op = TPU_REDUCE_AVG;
  s = tpu_comm_enqueue(comm, st, &args, NULL);
  CHECK(tpu_status_code(s) == TPU_CODE_TYPE_ERROR);
  tpu_status_free(s);
  tpu_block_free(a);
  tpu_block_free(b);
  tpu_comm_release(comm);
}

TEST(collectives_external_request_completes_once) {
  tpu_coll_request_t* req = NULL;
  CHECK_OK(tpu_coll_request_create(&req));
  if (!req) return;
  CHECK(!tpu_coll_request_done(req));
  tpu_coll_request_complete(req, tpu_status_make(TPU_CODE_DEADLINE_EXCEEDED, "first"));
  tpu_coll_request_retain(req);
  tpu_coll_request_complete(req, TPU_OK); /* dropped: the first outcome stands */
  CHECK(tpu_coll_request_done(req));
  tpu_coll_request_release(req);
  tpu_status_t s = tpu_coll_request_wait(req);
  CHECK(tpu_status_code(s) == TPU_CODE_DEADLINE_EXCEEDED && strcmp(tpu_status_message(s), "first") == 0);
  tpu_status_free(s);
  tpu_coll_request_release(req);
}
