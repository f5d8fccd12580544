/* algorithms.c — the collectives over the shared segment (see comm.h for the
 * round protocol): every round-based collective publishes what it is, then
 * runs rounds of "write own slot half, barrier, read slots"; its first
 * barrier also checks that every rank runs the same collective. send/recv use
 * the per-pair mailboxes instead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"

/* all_reduce chunks up to this size: every rank reduces the whole chunk (one
 * barrier); larger ones: each rank reduces 1/nranks of it, then all gather
 * the parts (two barriers, 1/nranks of the reduction work each). */
#define SMALL_REDUCE_BYTES (64u << 10)

static inline uint8_t* ptr(uint64_t addr) { return (uint8_t*)(uintptr_t)addr; }
static inline size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static bool kind_reduces(tpu_coll_kind_t k) {
  return k == TPU_COLL_ALL_REDUCE || k == TPU_COLL_REDUCE || k == TPU_COLL_REDUCE_SCATTER;
}
static bool kind_rooted(tpu_coll_kind_t k) {
  return k == TPU_COLL_BROADCAST || k == TPU_COLL_REDUCE || k == TPU_COLL_GATHER ||
         k == TPU_COLL_SCATTER;
}
static bool kind_p2p(tpu_coll_kind_t k) { return k == TPU_COLL_SEND || k == TPU_COLL_RECV; }

/* Describes this rank's collective for its first round (mismatch check), and
 * what it runs (timeout messages). */
static void publish(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  rank_ctl_t* me = &c->ctl[c->rank];
  coll_info_t* info = &me->info[(c->round + 1) & 1];
  info->seq = x->seq;
  info->kind = (int32_t)a->kind;
  info->dtype = a->kind == TPU_COLL_BARRIER ? -1 : (int32_t)a->dtype;
  info->op = kind_reduces(a->kind) ? (int32_t)a->op : -1;
  info->root = kind_rooted(a->kind) ? a->root : -1;
  info->count = (a->kind == TPU_COLL_ALL_TO_ALL || a->kind == TPU_COLL_BARRIER) ? 0 : a->count;
  atomic_store(&me->at_done, 0);
  atomic_store(&me->at_kind, (int32_t)a->kind);
  atomic_store(&me->at_seq, x->seq);
}

static void describe(const coll_info_t* i, char* buf, size_t cap) {
  int n = snprintf(buf, cap, "%s", tpu_coll_name((tpu_coll_kind_t)i->kind));
  if (i->kind == TPU_COLL_BARRIER || n < 0 || (size_t)n >= cap) return;
  n += snprintf(buf + n, cap - (size_t)n, "(%s", tpu_dtype_name((tpu_dtype_t)i->dtype));
  if (i->kind != TPU_COLL_ALL_TO_ALL && (size_t)n < cap)
    n += snprintf(buf + n, cap - (size_t)n, ", count=%llu", (unsigned long long)i->count);
  if (i->op >= 0 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, ", op=%d", i->op);
  if (i->root >= 0 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, ", root=%d", i->root);
  if ((size_t)n < cap) snprintf(buf + n, cap - (size_t)n, ")");
}

/* After the first barrier: every rank compares every rank's description, so
 * all reach the same verdict. */
static tpu_status_t check_match(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  uint32_t parity = c->round & 1;
  const coll_info_t* first = &c->ctl[0].info[parity];
  bool same = true;
  for (int p = 1; p < c->nranks && same; ++p) {
    const coll_info_t* i = &c->ctl[p].info[parity];
    same = i->kind == first->kind && i->dtype == first->dtype && i->op == first->op &&
           i->root == first->root && i->count == first->count;
  }
  if (same) return TPU_OK;
  char msg[1024], one[160];
  snprintf(msg, sizeof(msg), "tpu_dist: ranks called different collectives (collective #%llu):",
           (unsigned long long)x->seq);
  for (int p = 0; p < c->nranks; ++p) {
    describe(&c->ctl[p].info[parity], one, sizeof(one));
    size_t len = strlen(msg);
    snprintf(msg + len, sizeof(msg) - len, "%s rank %d: %s", p ? ";" : "", p, one);
  }
  return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s", msg);
}

static tpu_status_t round_barrier(coll_exec_t* x, bool* first) {
  TPU_RETURN_IF_ERROR(comm_barrier(x));
  if (*first) {
    *first = false;
    return check_match(x);
  }
  return TPU_OK;
}

/* The upcoming round's half of my slot. */
static inline uint8_t* my_next(tpu_comm_t* c) { return comm_slot(c, c->rank, c->round + 1); }

/* ---- reductions ----------------------------------------------------------------- */

static tpu_status_t run_reduce(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  size_t es = tpu_dtype_size(a->dtype), n = a->count, chunk = c->hdr->half_bytes / es;
  int N = c->nranks, r = c->rank;
  bool all = a->kind == TPU_COLL_ALL_REDUCE, first = true;
  const void* srcs[TPU_COMM_MAX_RANKS];
  size_t off = 0;
  do {
    size_t m = min_size(n - off, chunk);
    /* large all_reduce: this rank's own slice is read from send, not copied */
    bool split = all && m * es > SMALL_REDUCE_BYTES && N > 1;
    size_t mlo = split ? m * (size_t)r / (size_t)N : 0, mhi = split ? m * (size_t)(r + 1) / (size_t)N : 0;
    uint8_t* slot = my_next(c);
    const uint8_t* src = ptr(a->send) + off * es;
    memcpy(slot, src, mlo * es);
    memcpy(slot + mhi * es, src + mhi * es, (m - mhi) * es);
    TPU_RETURN_IF_ERROR(round_barrier(x, &first));
    uint32_t k = c->round;
    if (!all) { /* reduce to root: the root does the work */
      if (r == a->root) {
        for (int p = 0; p < N; ++p) srcs[p] = comm_slot(c, p, k);
        coll_reduce(ptr(a->recv) + off * es, srcs, N, m, a->dtype, a->op, N);
      }
    } else if (m * es <= SMALL_REDUCE_BYTES || N == 1) {
      for (int p = 0; p < N; ++p) srcs[p] = comm_slot(c, p, k);
      coll_reduce(ptr(a->recv) + off * es, srcs, N, m, a->dtype, a->op, N);
    } else {
      size_t lo = mlo, hi = mhi;
      for (int p = 0; p < N; ++p) srcs[p] = p == r ? src + lo * es : comm_slot(c, p, k) + lo * es;
      coll_reduce(comm_slot(c, r, k + 1) + lo * es, srcs, N, hi - lo, a->dtype, a->op, N);
      TPU_RETURN_IF_ERROR(round_barrier(x, &first));
      for (int p = 0; p < N; ++p) {
        size_t plo = m * (size_t)p / (size_t)N, phi = m * (size_t)(p + 1) / (size_t)N;
        memcpy(ptr(a->recv) + (off + plo) * es, comm_slot(c, p, k + 1) + plo * es, (phi - plo) * es);
      }
    }
    off += m;
  } while (off < n);
  return TPU_OK;
}

static tpu_status_t run_reduce_scatter(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  int N = c->nranks, r = c->rank;
  size_t es = tpu_dtype_size(a->dtype), n = a->count;
  size_t chunk = c->hdr->half_bytes / ((size_t)N * es);
  const void* srcs[TPU_COMM_MAX_RANKS];
  bool first = true;
  size_t off = 0;
  do {
    size_t m = min_size(n - off, chunk);
    uint8_t* mine = my_next(c);
    for (int p = 0; p < N; ++p)
      memcpy(mine + (size_t)p * m * es, ptr(a->send) + ((size_t)p * n + off) * es, m * es);
    TPU_RETURN_IF_ERROR(round_barrier(x, &first));
    for (int p = 0; p < N; ++p) srcs[p] = comm_slot(c, p, c->round) + (size_t)r * m * es;
    coll_reduce(ptr(a->recv) + off * es, srcs, N, m, a->dtype, a->op, N);
    off += m;
  } while (off < n);
  return TPU_OK;
}

/* ---- data movement ---------------------------------------------------------------- */

static tpu_status_t run_broadcast(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  size_t es = tpu_dtype_size(a->dtype), n = a->count, chunk = c->hdr->half_bytes / es;
  bool root = c->rank == a->root, first = true;
  size_t off = 0;
  do {
    size_t m = min_size(n - off, chunk);
    if (root) memcpy(my_next(c), ptr(a->send) + off * es, m * es);
    TPU_RETURN_IF_ERROR(round_barrier(x, &first));
    if (!root) memcpy(ptr(a->recv) + off * es, comm_slot(c, a->root, c->round), m * es);
    off += m;
  } while (off < n);
  if (root && a->recv != a->send && n) memmove(ptr(a->recv), ptr(a->send), n * es);
  return TPU_OK;
}

/* all_gather, and gather (only the root reads). */
static tpu_status_t run_gather(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  size_t es = tpu_dtype_size(a->dtype), n = a->count, chunk = c->hdr->half_bytes / es;
  bool reads = a->kind == TPU_COLL_ALL_GATHER || c->rank == a->root, first = true;
  size_t off = 0;
  do {
    size_t m = min_size(n - off, chunk);
    memcpy(my_next(c), ptr(a->send) + off * es, m * es);
    TPU_RETURN_IF_ERROR(round_barrier(x, &first));
    if (reads)
      for (int p = 0; p < c->nranks; ++p) /* memmove: recv's own part may be send itself */
        memmove(ptr(a->recv) + ((size_t)p * n + off) * es, comm_slot(c, p, c->round), m * es);
    off += m;
  } while (off < n);
  return TPU_OK;
}

static tpu_status_t run_scatter(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  int N = c->nranks;
  size_t es = tpu_dtype_size(a->dtype), n = a->count;
  size_t chunk = c->hdr->half_bytes / ((size_t)N * es);
  bool root = c->rank == a->root, first = true;
  size_t off = 0;
  do {
    size_t m = min_size(n - off, chunk);
    if (root) {
      uint8_t* mine = my_next(c);
      for (int p = 0; p < N; ++p)
        memcpy(mine + (size_t)p * m * es, ptr(a->send) + ((size_t)p * n + off) * es, m * es);
    }
    TPU_RETURN_IF_ERROR(round_barrier(x, &first));
    memmove(ptr(a->recv) + off * es, comm_slot(c, a->root, c->round) + (size_t)c->rank * m * es,
            m * es);
    off += m;
  } while (off < n);
  return TPU_OK;
}

static tpu_status_t run_all_to_all(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  int N = c->nranks, r = c->rank;
  size_t es = tpu_dtype_size(a->dtype);
  size_t sc[TPU_COMM_MAX_RANKS], sd[TPU_COMM_MAX_RANKS], rc[TPU_COMM_MAX_RANKS], rd[TPU_COMM_MAX_RANKS];
  size_t soff = 0, roff = 0;
  for (int p = 0; p < N; ++p) {
    sc[p] = a->send_counts ? a->send_counts[p] : a->count;
    rc[p] = a->recv_counts ? a->recv_counts[p] : a->count;
    sd[p] = a->send_displs ? a->send_displs[p] : soff;
    rd[p] = a->recv_displs ? a->recv_displs[p] : roff;
    soff += sc[p];
    roff += rc[p];
  }
  /* Round 0: every rank's send and receive counts, so that all ranks check
   * the whole matrix (and agree on the verdict) and the number of rounds. */
  uint64_t* mine = (uint64_t*)my_next(c);
  for (int p = 0; p < N; ++p) {
    mine[p] = sc[p];
    mine[N + p] = rc[p];
  }
  bool first = true;
  TPU_RETURN_IF_ERROR(round_barrier(x, &first));
  size_t sub = c->hdr->half_bytes / (size_t)N / 64 * 64, max_bytes = 0;
  for (int i = 0; i < N; ++i) {
    const uint64_t* mi = (const uint64_t*)comm_slot(c, i, c->round);
    for (int j = 0; j < N; ++j) {
      const uint64_t* mj = (const uint64_t*)comm_slot(c, j, c->round);
      if (mi[j] != mj[N + i])
        return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                               "tpu_dist all_to_all: rank %d sends %llu elements to rank %d, which "
                               "expects %llu",
                               i, (unsigned long long)mi[j], j, (unsigned long long)mj[N + i]);
      if (mi[j] * es > max_bytes) max_bytes = mi[j] * es;
    }
  }
  size_t rounds = (max_bytes + sub - 1) / sub;
  for (size_t t = 0; t < rounds; ++t) {
    size_t base = t * sub;
    uint8_t* out = my_next(c);
    for (int p = 0; p < N; ++p) {
      size_t total = sc[p] * es, len = total > base ? min_size(sub, total - base) : 0;
      if (len) memcpy(out + (size_t)p * sub, ptr(a->send) + sd[p] * es + base, len);
    }
    TPU_RETURN_IF_ERROR(round_barrier(x, &first));
    for (int p = 0; p < N; ++p) {
      size_t total = rc[p] * es, len = total > base ? min_size(sub, total - base) : 0;
      if (len) memcpy(ptr(a->recv) + rd[p] * es + base, comm_slot(c, p, c->round) + (size_t)r * sub, len);
    }
  }
  return TPU_OK;
}

static tpu_status_t run_barrier(coll_exec_t* x) {
  bool first = true;
  return round_barrier(x, &first);
}

/* ---- send / recv ------------------------------------------------------------------- */

static tpu_status_t p2p_failure(coll_exec_t* x, int w, bool sending) {
  tpu_comm_t* c = x->comm;
  if (w == 2) return comm_aborted_status(c);
  char msg[COMM_ABORT_MSG];
  int peer = x->args->root;
  if (w == 3) {
    snprintf(msg, sizeof(msg), "%s %s rank %d", sending ? "send" : "recv", sending ? "to" : "from", peer);
    return comm_peer_exited(c, msg, peer);
  }
  snprintf(msg, sizeof(msg), "%s %s rank %d timed out after %lld ms on rank %d: rank %d did not %s",
           sending ? "send" : "recv", sending ? "to" : "from", peer, (long long)x->timeout_ms,
           c->rank, peer, sending ? "receive" : "send");
  return comm_timeout(c, msg);
}

static tpu_status_t run_send(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  int peer = a->root;
  p2p_ctl_t* box = comm_p2p_ctl(c, c->rank, peer);
  uint8_t* data = comm_mailbox(c, c->rank, peer);
  size_t total = a->count * tpu_dtype_size(a->dtype), cap = c->hdr->p2p_bytes, off = 0;
  do {
    size_t n = min_size(total - off, cap);
    int w = comm_wait_word(c, &box->acked, c->p2p_sent[peer], peer, x->deadline_ns);
    if (w) return p2p_failure(x, w, true);
    memcpy(data, ptr(a->send) + off, n);
    box->msg_bytes = total;
    box->chunk_bytes = n;
    comm_post(c, &box->sent, ++c->p2p_sent[peer]);
    off += n;
  } while (off < total);
  return TPU_OK;
}

static tpu_status_t run_recv(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  int peer = a->root;
  p2p_ctl_t* box = comm_p2p_ctl(c, peer, c->rank);
  const uint8_t* data = comm_mailbox(c, peer, c->rank);
  size_t total = a->count * tpu_dtype_size(a->dtype), off = 0;
  do {
    int w = comm_wait_word(c, &box->sent, c->p2p_recvd[peer] + 1, peer, x->deadline_ns);
    if (w) return p2p_failure(x, w, false);
    if (box->msg_bytes != total) {
      char msg[COMM_ABORT_MSG];
      snprintf(msg, sizeof(msg),
               "recv from rank %d on rank %d: expected %zu bytes, rank %d sent %llu", peer, c->rank,
               total, peer, (unsigned long long)box->msg_bytes);
      tpu_comm_abort(c, msg);
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "tpu_dist: %s", msg);
    }
    size_t n = box->chunk_bytes;
    memcpy(ptr(a->recv) + off, data, n);
    comm_post(c, &box->acked, ++c->p2p_recvd[peer]);
    off += n;
  } while (off < total);
  return TPU_OK;
}

typedef tpu_status_t (*run_fn)(coll_exec_t* x);

static const run_fn g_run[TPU_COLL_KIND_COUNT] = {
    [TPU_COLL_ALL_REDUCE] = run_reduce,      [TPU_COLL_BROADCAST] = run_broadcast,
    [TPU_COLL_REDUCE] = run_reduce,          [TPU_COLL_ALL_GATHER] = run_gather,
    [TPU_COLL_REDUCE_SCATTER] = run_reduce_scatter, [TPU_COLL_ALL_TO_ALL] = run_all_to_all,
    [TPU_COLL_GATHER] = run_gather,          [TPU_COLL_SCATTER] = run_scatter,
    [TPU_COLL_SEND] = run_send,              [TPU_COLL_RECV] = run_recv,
    [TPU_COLL_BARRIER] = run_barrier,
};

tpu_status_t tpu_comm_run(tpu_comm_t* c, const tpu_coll_args_t* a) {
  TPU_RETURN_IF_ERROR(comm_check_args(c, a));
  pthread_mutex_lock(&c->mu);
  tpu_status_t s;
  if (atomic_load(&c->hdr->abort)) {
    s = comm_aborted_status(c);
  } else {
    coll_exec_t x = {.comm = c, .args = a};
    x.timeout_ms = a->timeout_ms > 0 ? a->timeout_ms : atomic_load(&c->timeout_ms);
    x.deadline_ns = comm_now_ns() + x.timeout_ms * 1000000;
    bool rounds = !kind_p2p(a->kind);
    if (rounds) {
      x.seq = ++c->seq;
      publish(&x);
    }
    s = g_run[a->kind](&x);
    if (rounds) atomic_store(&c->ctl[c->rank].at_done, 1);
  }
  pthread_mutex_unlock(&c->mu);
  return s;
}
