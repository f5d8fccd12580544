/* comm.c — communicators over POSIX shared memory: creation and joining,
 * the futex-based waits and barrier, abort, and the stream path (requests,
 * tpu_comm_enqueue). The collectives themselves are in algorithms.c. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "tpu/config.h"
#include "stream/internal.h"
#include "base/spin.h"
#include "comm.h"

const char* tpu_coll_name(tpu_coll_kind_t kind) {
  static const char* const names[TPU_COLL_KIND_COUNT] = {
#define TPU_X_(E, n) [TPU_COLL_##E] = n,
      TPU_COLL_LIST(TPU_X_)
#undef TPU_X_
  };
  return (unsigned)kind < TPU_COLL_KIND_COUNT ? names[kind] : "unknown collective";
}

/* Shared (not process-private) futexes: the words live in the segment. */
static void futex_wait(_Atomic uint32_t* word, uint32_t value, int64_t ns) {
  struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
  syscall(SYS_futex, (uint32_t*)word, FUTEX_WAIT, value, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t* word) {
  syscall(SYS_futex, (uint32_t*)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static inline bool reached(uint32_t value, uint32_t target) {
  return (int32_t)(value - target) >= 0;
}

void comm_post(tpu_comm_t* c, _Atomic uint32_t* word, uint32_t value) {
  atomic_store(word, value);
  if (atomic_load(&c->hdr->waiters)) futex_wake(word);
}

/* Spin briefly, then yield, then sleep on the futex in slices short enough
 * to notice an abort and the deadline. The ranks share the host's cores, so
 * the spin is short. */
#define WAIT_SPINS 256
#define WAIT_YIELDS 16
#define WAIT_SLICE_NS 20000000 /* 20 ms */

/* Reads a process's state and start time from /proc/PID/stat: 1 read,
 * 0 no such process, -1 unknown (no /proc, unexpected format). */
static int proc_stat(int pid, char* state, uint64_t* start) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ESRCH ? 0 : -1;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return n == 0 || errno == ESRCH ? 0 : -1;
  buf[n] = 0;
  const char* p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
  if (!p) return -1;
  unsigned long long v = 0;
  /* after ')': state is field 3, starttime field 22 */
  if (sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
             state, &v) != 2)
    return -1;
  *start = v;
  return 1;
}

static uint64_t pid_ns_inode(void) {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* False once rank `peer`'s process has exited (or is a zombie, or its pid
 * was reused); true when unknown (another pid namespace, no /proc). */
static bool peer_alive(tpu_comm_t* c, int peer) {
  if (peer < 0 || peer == c->rank) return true;
  const rank_ctl_t* ctl = &c->ctl[peer];
  if (ctl->pid <= 0 || !ctl->pid_ns || ctl->pid_ns != pid_ns_inode()) return true;
  char state = 0;
  uint64_t start = 0;
  int r = proc_stat(ctl->pid, &state, &start);
  if (r < 0) return true;
  return r == 1 && state != 'Z' && state != 'X' && start == ctl->pid_start;
}

tpu_status_t comm_peer_exited(tpu_comm_t* c, const char* what, int peer) {
  char msg[COMM_ABORT_MSG], last[160] = "";
  const rank_ctl_t* q = &c->ctl[peer];
  uint64_t at = atomic_load(&q->at_seq);
  if (at)
    snprintf(last, sizeof(last), "; it last ran %s #%llu",
             tpu_coll_name((tpu_coll_kind_t)atomic_load(&q->at_kind)), (unsigned long long)at);
  snprintf(msg, sizeof(msg), "%s failed on rank %d of %d: rank %d did not arrive: its process (pid %d) exited%s",
           what, c->rank, c->nranks, peer, (int)q->pid, last);
  tpu_comm_abort(c, msg);
  return tpu_status_make(TPU_CODE_ABORTED, "%s", msg);
}

int comm_wait_word(tpu_comm_t* c, _Atomic uint32_t* word, uint32_t target, int peer,
                   int64_t deadline_ns) {
  for (int i = 0; i < WAIT_SPINS; ++i) {
    if (reached(atomic_load_explicit(word, memory_order_acquire), target)) return 0;
    tpu_cpu_relax();
  }
  for (int i = 0; i < WAIT_YIELDS; ++i) {
    if (reached(atomic_load_explicit(word, memory_order_acquire), target)) return 0;
    sched_yield();
  }
  for (;;) {
    if (reached(atomic_load(word), target)) return 0;
    if (atomic_load(&c->hdr->abort)) return 2;
    if (!peer_alive(c, peer)) return reached(atomic_load(word), target) ? 0 : 3;
    int64_t now = tpu_monotonic_ns();
    if (now >= deadline_ns) return 1;
    int64_t slice = deadline_ns - now < WAIT_SLICE_NS ? deadline_ns - now : WAIT_SLICE_NS;
    atomic_fetch_add(&c->hdr->waiters, 1);
    uint32_t v = atomic_load(word);
    if (!reached(v, target) && !atomic_load(&c->hdr->abort)) futex_wait(word, v, slice);
    atomic_fetch_sub(&c->hdr->waiters, 1);
  }
}

tpu_status_t comm_aborted_status(tpu_comm_t* c) {
  return tpu_status_make(TPU_CODE_ABORTED, "tpu_dist communicator aborted by rank %d: %s",
                         c->hdr->abort_rank, c->hdr->abort_msg);
}

static void wake_all(tpu_comm_t* c) {
  futex_wake(&c->hdr->attached);
  for (int r = 0; r < c->nranks; ++r) futex_wake(&c->ctl[r].round);
  for (int i = 0; i < c->nranks * c->nranks; ++i) {
    futex_wake(&c->p2p[i].sent);
    futex_wake(&c->p2p[i].acked);
  }
}

void tpu_comm_abort(tpu_comm_t* c, const char* reason) {
  uint32_t expected = 0;
  if (atomic_compare_exchange_strong(&c->hdr->abort_claim, &expected, 1)) {
    snprintf(c->hdr->abort_msg, sizeof(c->hdr->abort_msg), "%s", reason ? reason : "aborted");
    c->hdr->abort_rank = c->rank;
    atomic_store(&c->hdr->abort, 1);
  }
  wake_all(c);
}

tpu_status_t tpu_comm_error(tpu_comm_t* c) {
  return atomic_load(&c->hdr->abort) ? comm_aborted_status(c) : TPU_OK;
}

tpu_status_t comm_timeout(tpu_comm_t* c, const char* msg) {
  tpu_comm_abort(c, msg);
  return tpu_status_make(TPU_CODE_DEADLINE_EXCEEDED, "%s", msg);
}

/* Appends to a fixed buffer, truncating. */
static void appendf(char* buf, size_t cap, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void appendf(char* buf, size_t cap, const char* fmt, ...) {
  size_t len = strlen(buf);
  if (len + 1 >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + len, cap - len, fmt, ap);
  va_end(ap);
}

tpu_status_t comm_barrier(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  uint32_t k = ++c->round;
  comm_post(c, &c->ctl[c->rank].round, k);
  for (int p = 0; p < c->nranks; ++p) {
    if (p == c->rank) continue;
    int r = comm_wait_word(c, &c->ctl[p].round, k, p, x->deadline_ns);
    if (r == 0) continue;
    if (r == 2) return comm_aborted_status(c);
    if (r == 3) {
      char what[128];
      snprintf(what, sizeof(what), "%s (collective #%llu)", tpu_coll_name(x->args->kind),
               (unsigned long long)x->seq);
      return comm_peer_exited(c, what, p);
    }
    /* Timed out: name every rank that has not reached this round, and what
     * each of them runs. */
    char msg[COMM_ABORT_MSG] = "";
    appendf(msg, sizeof(msg), "%s (collective #%llu) timed out after %lld ms on rank %d of %d: ",
            tpu_coll_name(x->args->kind), (unsigned long long)x->seq, (long long)x->timeout_ms,
            c->rank, c->nranks);
    char ranks[256] = "", detail[COMM_ABORT_MSG] = "";
    int missing = 0;
    for (int q = 0; q < c->nranks; ++q) {
      if (q == c->rank || reached(atomic_load(&c->ctl[q].round), k)) continue;
      appendf(ranks, sizeof(ranks), "%s%d", missing ? ", " : "", q);
      missing++;
      uint64_t at = atomic_load(&c->ctl[q].at_seq);
      int kind = atomic_load(&c->ctl[q].at_kind);
      if (at == 0)
        appendf(detail, sizeof(detail), "; rank %d has not started any collective", q);
      else if (at == x->seq && !atomic_load(&c->ctl[q].at_done))
        appendf(detail, sizeof(detail), "; rank %d is inside %s #%llu", q,
                tpu_coll_name((tpu_coll_kind_t)kind), (unsigned long long)at);
      else
        appendf(detail, sizeof(detail), "; rank %d last ran %s #%llu", q,
                tpu_coll_name((tpu_coll_kind_t)kind), (unsigned long long)at);
    }
    appendf(msg, sizeof(msg), "rank%s %s did not arrive%s", missing > 1 ? "s" : "", ranks, detail);
    return comm_timeout(c, msg);
  }
  return TPU_OK;
}

/* ---- creation ----------------------------------------------------------------- */

tpu_status_t tpu_comm_unique_id(tpu_comm_id_t* out_id) {
  uint64_t r[2] = {0, 0};
  if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
    r[0] = (uint64_t)tpu_monotonic_ns();
    r[1] = (uint64_t)(uintptr_t)out_id ^ ((uint64_t)getpid() << 32);
  }
  memset(out_id, 0, sizeof(*out_id));
  snprintf(out_id->bytes, sizeof(out_id->bytes), "/tpu_dist_%d_%016llx%016llx", (int)getpid(),
           (unsigned long long)r[0], (unsigned long long)r[1]);
  return TPU_OK;
}

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static size_t config_kib(tpu_config_id_t id) { return (size_t)tpu_config_int(id) * 1024; }

/* Rank 0's layout; the others read it from the header. */
static void layout(comm_header_t* h, int nranks) {
  size_t n = (size_t)nranks;
  size_t half = round_up(config_kib(TPU_CONFIG_DIST_CHUNK_KB), 4096);
  size_t p2p = ((size_t)64 << 20) / (n * n);
  if (p2p > ((size_t)1 << 20)) p2p = (size_t)1 << 20;
  if (p2p < ((size_t)64 << 10)) p2p = (size_t)64 << 10;
  h->nranks = nranks;
  h->direct_min_bytes =
      tpu_config_bool(TPU_CONFIG_DIST_DIRECT) ? config_kib(TPU_CONFIG_DIST_DIRECT_MIN_KB) : 0;
  h->half_bytes = half;
  h->p2p_bytes = p2p;
  h->ctl_off = COMM_HEADER_BYTES;
  h->p2p_ctl_off = round_up(h->ctl_off + n * sizeof(rank_ctl_t), 4096);
  h->slots_off = round_up(h->p2p_ctl_off + n * n * sizeof(p2p_ctl_t), 4096);
  h->p2p_off = h->slots_off + n * 2 * half;
  h->total_bytes = h->p2p_off + n * n * p2p;
}

static tpu_status_t sys_error(const char* what, const char* name) {
  return tpu_status_make(TPU_CODE_UNAVAILABLE, "tpu_dist: %s %s failed: %s", what, name,
                         strerror(errno));
}

static tpu_status_t map_segment(const tpu_comm_id_t* id, int nranks, int rank, int64_t deadline,
                                int64_t timeout_ms, uint8_t** out_base, size_t* out_bytes) {
  const char* name = id->bytes;
  if (rank == 0) {
    comm_header_t h;
    memset(&h, 0, sizeof(h));
    layout(&h, nranks);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return sys_error("shm_open", name);
    if (ftruncate(fd, (off_t)h.total_bytes) != 0) {
      tpu_status_t s = sys_error("ftruncate", name);
      close(fd);
      shm_unlink(name);
      return s;
    }
    void* p = mmap(NULL, h.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
      tpu_status_t s = sys_error("mmap", name);
      shm_unlink(name);
      return s;
    }
    comm_header_t* hdr = p;
    memcpy((uint8_t*)hdr + sizeof(hdr->magic), (uint8_t*)&h + sizeof(h.magic),
           sizeof(h) - sizeof(h.magic));
    atomic_store(&hdr->magic, COMM_MAGIC);
    *out_base = p;
    *out_bytes = h.total_bytes;
    return TPU_OK;
  }
  /* Other ranks: wait for rank 0's segment and its header. */
  for (;;) {
    int fd = shm_open(name, O_RDWR, 0600);
    if (fd >= 0) {
      struct stat st;
      if (fstat(fd, &st) == 0 && st.st_size >= COMM_HEADER_BYTES) {
        comm_header_t* hdr = mmap(NULL, COMM_HEADER_BYTES, PROT_READ, MAP_SHARED, fd, 0);
        if (hdr != MAP_FAILED) {
          if (atomic_load(&hdr->magic) == COMM_MAGIC) {
            size_t total = hdr->total_bytes;
            int n = hdr->nranks;
            munmap(hdr, COMM_HEADER_BYTES);
            if (n != nranks) {
              close(fd);
              return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                                     "tpu_dist: rank %d joins a communicator of %d ranks, rank 0 "
                                     "created one of %d",
                                     rank, nranks, n);
            }
            void* p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            if (p == MAP_FAILED) return sys_error("mmap", name);
            *out_base = p;
            *out_bytes = total;
            return TPU_OK;
          }
          munmap(hdr, COMM_HEADER_BYTES);
        }
      }
      close(fd);
    } else if (errno != ENOENT) {
      return sys_error("shm_open", name);
    }
    if (tpu_monotonic_ns() >= deadline)
      return tpu_status_make(TPU_CODE_DEADLINE_EXCEEDED,
                             "tpu_dist: rank %d timed out after %lld ms waiting for rank 0 to "
                             "create the communicator",
                             rank, (long long)timeout_ms);
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

tpu_status_t tpu_comm_create(const tpu_comm_id_t* id, int nranks, int rank, int64_t timeout_ms,
                             tpu_comm_t** out_comm) {
  if (nranks < 1 || nranks > TPU_COMM_MAX_RANKS || rank < 0 || rank >= nranks)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "tpu_dist: invalid rank %d of %d (1..%d ranks)", rank, nranks,
                           TPU_COMM_MAX_RANKS);
  if (id->bytes[0] != '/' || memchr(id->bytes, 0, sizeof(id->bytes)) == NULL)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "tpu_dist: malformed communicator id");
  if (timeout_ms <= 0) timeout_ms = 30 * 60 * 1000;
  int64_t deadline = tpu_monotonic_ns() + timeout_ms * 1000000;
  tpu_comm_t* c = calloc(1, sizeof(*c));
  if (!c) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "communicator allocation failed");
  tpu_status_t s = map_segment(id, nranks, rank, deadline, timeout_ms, &c->base, &c->bytes);
  if (s != TPU_OK) {
    free(c);
    return s;
  }
  atomic_init(&c->refs, 1);
  c->rank = rank;
  c->nranks = nranks;
  atomic_init(&c->timeout_ms, timeout_ms);
  c->hdr = (comm_header_t*)c->base;
  c->ctl = (rank_ctl_t*)(c->base + c->hdr->ctl_off);
  c->p2p = (p2p_ctl_t*)(c->base + c->hdr->p2p_ctl_off);
  pthread_mutex_init(&c->mu, NULL);
  /* Join, and wait until every rank has. */
  {
    char state;
    uint64_t start = 0;
    rank_ctl_t* me = &c->ctl[rank];
    me->pid = (int32_t)getpid();
    me->pid_start = proc_stat((int)getpid(), &state, &start) == 1 ? start : 0;
    me->pid_ns = me->pid_start ? pid_ns_inode() : 0;
  }
  atomic_store(&c->ctl[rank].joined, 1);
  atomic_fetch_add(&c->hdr->attached, 1);
  futex_wake(&c->hdr->attached);
  int r = comm_wait_word(c, &c->hdr->attached, (uint32_t)nranks, -1, deadline);
  if (rank == 0) shm_unlink(id->bytes); /* every rank has it mapped, or never will */
  if (r != 0) {
    char missing[256] = "";
    int m = 0;
    for (int q = 0; q < nranks; ++q)
      if (!atomic_load(&c->ctl[q].joined)) appendf(missing, sizeof(missing), "%s%d", m++ ? ", " : "", q);
    s = r == 2 ? comm_aborted_status(c)
               : tpu_status_make(TPU_CODE_DEADLINE_EXCEEDED,
                                 "tpu_dist: creating the communicator timed out after %lld ms on "
                                 "rank %d of %d: rank%s %s did not join",
                                 (long long)timeout_ms, rank, nranks, m > 1 ? "s" : "", missing);
    tpu_comm_release(c);
    return s;
  }
  *out_comm = c;
  return TPU_OK;
}

tpu_status_t tpu_comm_create_local(int nranks, int64_t timeout_ms, tpu_comm_t** out_comms) {
  if (nranks < 1 || nranks > TPU_COMM_MAX_RANKS)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "tpu_dist: invalid number of chips %d (1..%d)",
                           nranks, TPU_COMM_MAX_RANKS);
  if (timeout_ms <= 0) timeout_ms = 30 * 60 * 1000;
  comm_header_t h;
  memset(&h, 0, sizeof(h));
  layout(&h, nranks);
  h.direct_min_bytes = 1; /* every collective that has a direct form takes it */
  /* The control block: anonymous memory (pages only where touched); the
   * staged collectives (all_to_all, send/recv) still use its slots. */
  void* p = mmap(NULL, h.total_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return sys_error("mmap", "(chips of this process)");
  comm_header_t* hdr = p;
  memcpy((uint8_t*)hdr + sizeof(hdr->magic), (uint8_t*)&h + sizeof(h.magic), sizeof(h) - sizeof(h.magic));
  atomic_store(&hdr->magic, COMM_MAGIC);
  char state;
  uint64_t start = 0;
  uint64_t pid_start = proc_stat((int)getpid(), &state, &start) == 1 ? start : 0;
  for (int r = 0; r < nranks; ++r) {
    tpu_comm_t* c = calloc(1, sizeof(*c));
    if (!c) {
      for (int q = r - 1; q >= 1; --q) tpu_comm_release(out_comms[q]);
      if (r > 0) tpu_comm_release(out_comms[0]);
      else munmap(p, h.total_bytes);
      return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "communicator allocation failed");
    }
    atomic_init(&c->refs, 1);
    c->rank = r;
    c->nranks = nranks;
    atomic_init(&c->timeout_ms, timeout_ms);
    c->base = p;
    c->bytes = h.total_bytes;
    c->hdr = hdr;
    c->ctl = (rank_ctl_t*)(c->base + hdr->ctl_off);
    c->p2p = (p2p_ctl_t*)(c->base + hdr->p2p_ctl_off);
    pthread_mutex_init(&c->mu, NULL);
    c->local = true;
    if (r > 0) {
      c->owner = out_comms[0];
      tpu_comm_retain(c->owner);
    }
    c->ctl[r].pid = (int32_t)getpid();
    c->ctl[r].pid_start = pid_start;
    c->ctl[r].pid_ns = pid_start ? pid_ns_inode() : 0;
    atomic_store(&c->ctl[r].joined, 1);
    atomic_fetch_add(&hdr->attached, 1);
    out_comms[r] = c;
  }
  return TPU_OK;
}

void tpu_comm_retain(tpu_comm_t* c) { atomic_fetch_add(&c->refs, 1); }

void tpu_comm_release(tpu_comm_t* c) {
  if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
  for (int p = 0; p < c->nranks; ++p)
    if (c->peer_base[p]) c->driver->memory_unimport(&c->peer_mem[p], c->peer_base[p]);
  if (c->owner) tpu_comm_release(c->owner);
  else munmap(c->base, c->bytes);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

uint64_t tpu_comm_sequence(tpu_comm_t* c) {
  pthread_mutex_lock(&c->mu);
  uint64_t s = c->seq;
  pthread_mutex_unlock(&c->mu);
  return s;
}

int tpu_comm_rank(const tpu_comm_t* c) { return c->rank; }
int tpu_comm_size(const tpu_comm_t* c) { return c->nranks; }
void tpu_comm_set_timeout(tpu_comm_t* c, int64_t timeout_ms) {
  if (timeout_ms > 0) atomic_store(&c->timeout_ms, timeout_ms);
}

/* ---- requests and the stream path --------------------------------------------- */

struct tpu_coll_request {
  _Atomic int refs;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  tpu_status_t status;
};

static tpu_coll_request_t* request_create(void) {
  tpu_coll_request_t* r = calloc(1, sizeof(*r));
  if (!r) return NULL;
  atomic_init(&r->refs, 1);
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  return r;
}

static void request_complete(tpu_coll_request_t* r, tpu_status_t status) {
  pthread_mutex_lock(&r->mu);
  if (r->done) { /* completed already: the first outcome stands */
    pthread_mutex_unlock(&r->mu);
    tpu_status_free(status);
    return;
  }
  r->status = status;
  r->done = true;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

tpu_status_t tpu_coll_request_create(tpu_coll_request_t** out_request) {
  *out_request = request_create();
  return *out_request ? TPU_OK
                      : tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "collective request allocation failed");
}

void tpu_coll_request_retain(tpu_coll_request_t* r) { atomic_fetch_add(&r->refs, 1); }

void tpu_coll_request_complete(tpu_coll_request_t* r, tpu_status_t status) {
  request_complete(r, status);
}

bool tpu_coll_request_done(tpu_coll_request_t* r) {
  pthread_mutex_lock(&r->mu);
  bool d = r->done;
  pthread_mutex_unlock(&r->mu);
  return d;
}

tpu_status_t tpu_coll_request_wait(tpu_coll_request_t* r) {
  pthread_mutex_lock(&r->mu);
  while (!r->done) pthread_cond_wait(&r->cv, &r->mu);
  tpu_status_t s = r->status == TPU_OK ? TPU_OK
                                       : tpu_status_make(tpu_status_code(r->status), "%s",
                                                         tpu_status_message(r->status));
  pthread_mutex_unlock(&r->mu);
  return s;
}

void tpu_coll_request_release(tpu_coll_request_t* r) {
  if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
  tpu_status_free(r->status);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  free(r);
}

typedef struct coll_op {
  tpu_comm_t* comm;
  tpu_chip_t* chip;
  tpu_coll_request_t* request;
  tpu_coll_args_t args;
  size_t counts[4 * TPU_COMM_MAX_RANKS]; /* send/recv counts and displs (ALL_TO_ALL) */
  tpu_coll_segment_t* segments;          /* coalesced: a copy */
} coll_op_t;

static void coll_op_free(coll_op_t* op) {
  free(op->segments);
  tpu_comm_release(op->comm);
  tpu_coll_request_release(op->request);
  free(op);
}

/* Runs on the stream's worker when the stream reaches the collective. */
static void coll_op_run(void* arg) {
  coll_op_t* op = arg;
  const tpu_hal_driver_t* d = tpu_hal();
  coll_mem_t mem = {.driver = d, .chip = op->chip->hal};
  bool direct = d->memory_export && d->memory_is_shared && d->memory_import && d->memory_unimport;
  request_complete(op->request, comm_run_mem(op->comm, &op->args, direct ? &mem : NULL));
  coll_op_free(op);
}

tpu_status_t tpu_comm_share_chip_memory(tpu_chip_t* chip) {
  const tpu_hal_driver_t* d = tpu_hal();
  if (!chip || !d->memory_share)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "tpu_dist: the %s driver cannot share device memory",
                           d->name);
  return d->memory_share(chip->hal);
}

tpu_status_t comm_check_args(const tpu_comm_t* c, const tpu_coll_args_t* a) {
  if ((unsigned)a->kind >= TPU_COLL_KIND_COUNT)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "tpu_dist: unknown collective %d", (int)a->kind);
  const char* name = tpu_coll_name(a->kind);
  if (a->kind != TPU_COLL_BARRIER && (a->dtype < 0 || a->dtype >= TPU_DTYPE_COUNT))
    return tpu_status_make(TPU_CODE_TYPE_ERROR, "tpu_dist %s: unsupported dtype", name);
  bool reduces = a->kind == TPU_COLL_ALL_REDUCE || a->kind == TPU_COLL_REDUCE ||
                 a->kind == TPU_COLL_REDUCE_SCATTER;
  if (reduces) {
    if ((unsigned)a->op >= TPU_REDUCE_OP_COUNT)
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "tpu_dist %s: unknown reduce op %d", name,
                             (int)a->op);
    if (a->op == TPU_REDUCE_AVG && a->dtype == TPU_DTYPE_BOOL)
      return tpu_status_make(TPU_CODE_TYPE_ERROR, "tpu_dist %s: AVG is not defined for bool", name);
  }
  bool rooted = a->kind == TPU_COLL_BROADCAST || a->kind == TPU_COLL_REDUCE ||
                a->kind == TPU_COLL_GATHER || a->kind == TPU_COLL_SCATTER ||
                a->kind == TPU_COLL_SEND || a->kind == TPU_COLL_RECV;
  if (rooted && (a->root < 0 || a->root >= c->nranks))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "tpu_dist %s: invalid %s rank %d (of %d)",
                           name, (a->kind == TPU_COLL_SEND || a->kind == TPU_COLL_RECV) ? "peer" : "root",
                           a->root, c->nranks);
  if (a->nsegments && !a->segments)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "tpu_dist %s: no segments", name);
  if (a->nsegments && a->kind != TPU_COLL_ALL_REDUCE && a->kind != TPU_COLL_ALL_GATHER &&
      a->kind != TPU_COLL_REDUCE_SCATTER)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "tpu_dist %s: no coalesced form", name);
  if ((a->kind == TPU_COLL_SEND || a->kind == TPU_COLL_RECV) && a->root == c->rank)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "tpu_dist %s: a rank cannot %s itself", name,
                           a->kind == TPU_COLL_SEND ? "send to" : "receive from");
  return TPU_OK;
}

tpu_status_t tpu_comm_enqueue(tpu_comm_t* c, tpu_stream_t* stream, const tpu_coll_args_t* args,
                              tpu_coll_request_t** out_request) {
  TPU_RETURN_IF_ERROR(comm_check_args(c, args));
  coll_op_t* op = calloc(1, sizeof(*op));
  tpu_coll_request_t* req = request_create();
  if (!op || !req) {
    free(op);
    tpu_coll_request_release(req);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "collective allocation failed");
  }
  op->args = *args;
  const size_t* arrays[4] = {args->send_counts, args->send_displs, args->recv_counts,
                             args->recv_displs};
  const size_t** fields[4] = {&op->args.send_counts, &op->args.send_displs,
                              &op->args.recv_counts, &op->args.recv_displs};
  for (int i = 0; i < 4; ++i) {
    if (!arrays[i]) continue;
    size_t* copy = op->counts + (size_t)i * TPU_COMM_MAX_RANKS;
    memcpy(copy, arrays[i], sizeof(size_t) * (size_t)c->nranks);
    *fields[i] = copy;
  }
  if (args->nsegments) {
    op->segments = malloc(sizeof(tpu_coll_segment_t) * args->nsegments);
    if (!op->segments) {
      free(op);
      tpu_coll_request_release(req);
      return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "collective allocation failed");
    }
    memcpy(op->segments, args->segments, sizeof(tpu_coll_segment_t) * args->nsegments);
    op->args.segments = op->segments;
  }
  tpu_comm_retain(c);
  op->comm = c;
  op->chip = tpu_stream_chip(stream);
  op->request = req;
  tpu_status_free(tpu_comm_share_chip_memory(op->chip));
  if (out_request) {
    atomic_fetch_add(&req->refs, 1);
    *out_request = req;
  }
  tpu_status_t s =
      tpu_stream_host_fn_named(stream, tpu_coll_name(op->args.kind), true, coll_op_run, op);
  if (s != TPU_OK) {
    /* Not queued: complete the request with the failure. */
    request_complete(req, tpu_status_make(tpu_status_code(s), "%s", tpu_status_message(s)));
    coll_op_free(op);
    if (out_request) {
      tpu_coll_request_release(*out_request);
      *out_request = NULL;
    }
  }
  return s;
}
