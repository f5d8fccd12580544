/* algorithms.c — the collectives over the shared segment (see comm.h for the
 * round protocol): every round-based collective publishes what it is, then
 * runs rounds of "write own slot half, barrier, read slots"; its first
 * barrier also checks that every rank runs the same collective. send/recv use
 * the per-pair mailboxes instead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "tpu/config.h"
#include "base/spin.h"
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
  info->direct = x->direct;
  info->mem = x->direct_mem;
  info->send = a->send;
  info->recv = a->recv;
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

static tpu_status_t round_barrier(coll_exec_t* x) {
  TPU_RETURN_IF_ERROR(comm_barrier(x));
  if (!x->checked) {
    x->checked = true;
    return check_match(x);
  }
  return TPU_OK;
}

/* The upcoming round's half of my slot. */
static inline uint8_t* my_next(tpu_comm_t* c) { return comm_slot(c, c->rank, c->round + 1); }

/* ---- the tensors of a collective --------------------------------------------------------
 * A collective moves the elements of its segments as if they were one
 * concatenated buffer (a plain collective has one segment). Part p of a
 * segment's buffer is its p-th block of `count` elements (all_gather's recv,
 * reduce_scatter's send). seg_io copies elements [off, off + m) of that
 * virtual buffer between the segments and a contiguous buffer. */
static void seg_io(const coll_exec_t* x, bool recv_side, int part, size_t off, size_t m, uint8_t* buf,
                   bool to_buf) {
  size_t es = tpu_dtype_size(x->args->dtype), base = 0;
  for (size_t i = 0; i < x->nsegs && m; ++i) {
    size_t c = x->segs[i].count;
    if (off >= base + c) {
      base += c;
      continue;
    }
    size_t t = off - base, len = min_size(c - t, m);
    uint8_t* at = ptr(recv_side ? x->segs[i].recv : x->segs[i].send) + ((size_t)part * c + t) * es;
    if (to_buf) memmove(buf, at, len * es); /* memmove: recv's own part may be send itself */
    else memmove(at, buf, len * es);
    buf += len * es;
    off += len;
    m -= len;
    base += c;
  }
}

/* ---- reductions ----------------------------------------------------------------- */

static tpu_status_t run_reduce(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  size_t es = tpu_dtype_size(a->dtype), n = a->count, chunk = c->hdr->half_bytes / es;
  int N = c->nranks, r = c->rank;
  bool all = a->kind == TPU_COLL_ALL_REDUCE, one = x->nsegs == 1;
  const void* srcs[TPU_COMM_MAX_RANKS];
  size_t off = 0;
  do {
    size_t m = min_size(n - off, chunk);
    /* large all_reduce of one tensor: this rank's own slice is read from
     * send, not copied */
    bool split = all && m * es > SMALL_REDUCE_BYTES && N > 1;
    size_t mlo = split && one ? m * (size_t)r / (size_t)N : 0, mhi = split && one ? m * (size_t)(r + 1) / (size_t)N : 0;
    uint8_t* slot = my_next(c);
    const uint8_t* src = ptr(a->send) + off * es;
    if (one) {
      memcpy(slot, src, mlo * es);
      memcpy(slot + mhi * es, src + mhi * es, (m - mhi) * es);
    } else {
      seg_io(x, false, 0, off, m, slot, true);
    }
    TPU_RETURN_IF_ERROR(round_barrier(x));
    uint32_t k = c->round;
    if (!all) { /* reduce to root: the root does the work */
      if (r == a->root) {
        for (int p = 0; p < N; ++p) srcs[p] = comm_slot(c, p, k);
        coll_reduce(ptr(a->recv) + off * es, srcs, N, m, a->dtype, a->op, N);
      }
    } else if (!split) {
      for (int p = 0; p < N; ++p) srcs[p] = comm_slot(c, p, k);
      if (one) {
        coll_reduce(ptr(a->recv) + off * es, srcs, N, m, a->dtype, a->op, N);
      } else { /* through the next round's half of my slot (free: every rank passed barrier k) */
        coll_reduce(comm_slot(c, r, k + 1), srcs, N, m, a->dtype, a->op, N);
        seg_io(x, true, 0, off, m, comm_slot(c, r, k + 1), false);
      }
    } else {
      size_t lo = m * (size_t)r / (size_t)N, hi = m * (size_t)(r + 1) / (size_t)N;
      for (int p = 0; p < N; ++p) srcs[p] = p == r && one ? src + lo * es : comm_slot(c, p, k) + lo * es;
      coll_reduce(comm_slot(c, r, k + 1) + lo * es, srcs, N, hi - lo, a->dtype, a->op, N);
      TPU_RETURN_IF_ERROR(round_barrier(x));
      for (int p = 0; p < N; ++p) {
        size_t plo = m * (size_t)p / (size_t)N, phi = m * (size_t)(p + 1) / (size_t)N;
        seg_io(x, true, 0, off + plo, phi - plo, comm_slot(c, p, k + 1) + plo * es, false);
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
  size_t off = 0;
  do {
    size_t m = min_size(n - off, chunk);
    uint8_t* mine = my_next(c);
    for (int p = 0; p < N; ++p) seg_io(x, false, p, off, m, mine + (size_t)p * m * es, true);
    TPU_RETURN_IF_ERROR(round_barrier(x));
    uint32_t k = c->round;
    for (int p = 0; p < N; ++p) srcs[p] = comm_slot(c, p, k) + (size_t)r * m * es;
    if (x->nsegs == 1) {
      coll_reduce(ptr(a->recv) + off * es, srcs, N, m, a->dtype, a->op, N);
    } else {
      coll_reduce(comm_slot(c, r, k + 1), srcs, N, m, a->dtype, a->op, N);
      seg_io(x, true, 0, off, m, comm_slot(c, r, k + 1), false);
    }
    off += m;
  } while (off < n);
  return TPU_OK;
}

/* ---- data movement ---------------------------------------------------------------- */

static tpu_status_t run_broadcast(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  size_t es = tpu_dtype_size(a->dtype), n = a->count, chunk = c->hdr->half_bytes / es;
  bool root = c->rank == a->root;
  size_t off = 0;
  do {
    size_t m = min_size(n - off, chunk);
    if (root) memcpy(my_next(c), ptr(a->send) + off * es, m * es);
    TPU_RETURN_IF_ERROR(round_barrier(x));
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
  bool reads = a->kind == TPU_COLL_ALL_GATHER || c->rank == a->root;
  size_t off = 0;
  do {
    size_t m = min_size(n - off, chunk);
    seg_io(x, false, 0, off, m, my_next(c), true);
    TPU_RETURN_IF_ERROR(round_barrier(x));
    if (reads)
      for (int p = 0; p < c->nranks; ++p) seg_io(x, true, p, off, m, comm_slot(c, p, c->round), false);
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
  bool root = c->rank == a->root;
  size_t off = 0;
  do {
    size_t m = min_size(n - off, chunk);
    if (root) {
      uint8_t* mine = my_next(c);
      for (int p = 0; p < N; ++p)
        memcpy(mine + (size_t)p * m * es, ptr(a->send) + ((size_t)p * n + off) * es, m * es);
    }
    TPU_RETURN_IF_ERROR(round_barrier(x));
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
  TPU_RETURN_IF_ERROR(round_barrier(x));
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
    TPU_RETURN_IF_ERROR(round_barrier(x));
    for (int p = 0; p < N; ++p) {
      size_t total = rc[p] * es, len = total > base ? min_size(sub, total - base) : 0;
      if (len) memcpy(ptr(a->recv) + rd[p] * es + base, comm_slot(c, p, c->round) + (size_t)r * sub, len);
    }
  }
  return TPU_OK;
}

static tpu_status_t run_barrier(coll_exec_t* x) {
  return round_barrier(x);
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


/* ---- the direct path ---------------------------------------------------------------
 * When every rank's buffers lie in device memory its peers can map (the
 * driver's memory_share / export / import), large collectives read the
 * peers' buffers in place instead of staging through the slots: all_reduce
 * reduces its slice from every rank's send buffer into its own recv buffer,
 * then copies the other slices from their owners' recv buffers; all_gather
 * and broadcast copy straight from the peers' send buffers; reduce_scatter
 * reduces its part from every rank's send buffer. No chunking, so 1-3
 * barriers in all; the last one keeps a rank's buffers untouched until every
 * peer finished reading them. Reductions still run over the ranks in order:
 * the results are bit-identical to the staged path's. */

static bool direct_kind(tpu_coll_kind_t k) {
  return k == TPU_COLL_ALL_REDUCE || k == TPU_COLL_ALL_GATHER || k == TPU_COLL_REDUCE_SCATTER ||
         k == TPU_COLL_BROADCAST || k == TPU_COLL_REDUCE || k == TPU_COLL_GATHER || k == TPU_COLL_SCATTER;
}

static bool kind_parts(tpu_coll_kind_t k) { /* one buffer holds nranks parts of count */
  return k == TPU_COLL_ALL_GATHER || k == TPU_COLL_REDUCE_SCATTER || k == TPU_COLL_GATHER ||
         k == TPU_COLL_SCATTER;
}

/* Bytes of this rank's send and recv buffers (0: not used by this rank). */
static void extents(const tpu_coll_args_t* a, int N, int rank, size_t* sb, size_t* rb) {
  size_t bytes = a->count * tpu_dtype_size(a->dtype), all = bytes * (size_t)N;
  bool root = rank == a->root;
  switch (a->kind) {
    case TPU_COLL_ALL_GATHER: *sb = bytes, *rb = all; break;
    case TPU_COLL_REDUCE_SCATTER: *sb = all, *rb = bytes; break;
    case TPU_COLL_GATHER: *sb = bytes, *rb = root ? all : 0; break;
    case TPU_COLL_SCATTER: *sb = root ? all : 0, *rb = bytes; break;
    case TPU_COLL_REDUCE: *sb = bytes, *rb = root ? bytes : 0; break;
    case TPU_COLL_BROADCAST: *sb = root ? bytes : 0, *rb = bytes; break;
    default: *sb = *rb = bytes;
  }
}

static bool disjoint(uint64_t a, size_t na, uint64_t b, size_t nb) { return a + na <= b || b + nb <= a; }

/* Sets x->try_direct (same verdict on every rank that calls the same
 * collective) and x->direct (this rank's buffers qualify). */
static void direct_prepare(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  size_t sb, rb;
  if (!direct_kind(a->kind) || x->nsegs != 1 || !c->hdr->direct_min_bytes || c->nranks < 2) return;
  /* the same on every rank that calls the same collective */
  size_t moved = a->count * tpu_dtype_size(a->dtype) * (kind_parts(a->kind) ? (size_t)c->nranks : 1);
  if (moved < c->hdr->direct_min_bytes) return;
  x->try_direct = true;
  extents(a, c->nranks, c->rank, &sb, &rb);
  if (!c->local) { /* between processes: the buffers must lie in memory the peers can map */
    const coll_mem_t* m = x->mem;
    if (!m) return;
    tpu_status_t es = m->driver->memory_export(m->chip, &x->direct_mem);
    if (es != TPU_OK) { /* not shareable: the staged path */
      tpu_status_free(es);
      return;
    }
    if (!m->driver->memory_is_shared(m->chip, a->send, sb) || !m->driver->memory_is_shared(m->chip, a->recv, rb))
      return;
  }
  if (!sb || !rb) { /* a rooted collective's unused buffer */
    x->direct = true;
    return;
  }
  size_t part = a->count * tpu_dtype_size(a->dtype);
  bool layout_ok;
  switch (a->kind) {
    case TPU_COLL_ALL_GATHER: /* in place: send is this rank's part of recv */
    case TPU_COLL_GATHER:
      layout_ok = disjoint(a->send, sb, a->recv, rb) || a->send == a->recv + (uint64_t)c->rank * part;
      break;
    case TPU_COLL_REDUCE_SCATTER: /* in place: recv is this rank's part of send */
    case TPU_COLL_SCATTER:
      layout_ok = disjoint(a->send, sb, a->recv, rb) || a->recv == a->send + (uint64_t)c->rank * part;
      break;
    default:
      layout_ok = a->send == a->recv || disjoint(a->send, sb, a->recv, rb);
  }
  x->direct = layout_ok;
}

/* After the first barrier: whether every rank goes direct. Every rank sees
 * the same published descriptions, so all reach the same verdict. A set of
 * memories not seen before is mapped first, and the ranks agree in one more
 * round that every one of them could (the verdict is kept for that set). */
static tpu_status_t direct_agree(coll_exec_t* x, bool* use) {
  tpu_comm_t* c = x->comm;
  int N = c->nranks, r = c->rank;
  uint32_t parity = c->round & 1;
  tpu_hal_memory_export_t mems[TPU_COMM_MAX_RANKS];
  *use = false;
  for (int p = 0; p < N; ++p) {
    const coll_info_t* i = &c->ctl[p].info[parity];
    if (!i->direct) return TPU_OK;
    mems[p] = i->mem;
    x->peer_send[p] = i->send;
    x->peer_recv[p] = i->recv;
  }
  if (c->local) { /* chips of this process: their addresses are readable as they are */
    *use = true;
    return TPU_OK;
  }
  if (c->agreed_state != 0 && memcmp(mems, c->agreed, sizeof(mems[0]) * (size_t)N) == 0) {
    *use = c->agreed_state > 0;
    return TPU_OK;
  }
  const tpu_hal_driver_t* d = x->mem->driver;
  bool ok = true;
  for (int p = 0; p < N; ++p) {
    if (p == r || (c->peer_base[p] && memcmp(&c->peer_mem[p], &mems[p], sizeof(mems[p])) == 0)) continue;
    if (c->peer_base[p]) c->driver->memory_unimport(&c->peer_mem[p], c->peer_base[p]);
    c->peer_base[p] = NULL;
    c->driver = d;
    const uint8_t* base = NULL;
    tpu_status_t s = d->memory_import(&mems[p], &base);
    if (s != TPU_OK) {
      tpu_status_free(s);
      ok = false;
      continue;
    }
    c->peer_base[p] = base;
    c->peer_mem[p] = mems[p];
  }
  *my_next(c) = ok;
  TPU_RETURN_IF_ERROR(round_barrier(x));
  bool all = true;
  for (int p = 0; p < N; ++p) all = all && *comm_slot(c, p, c->round) != 0;
  memcpy(c->agreed, mems, sizeof(mems[0]) * (size_t)N);
  c->agreed_state = all ? 1 : -1;
  *use = all;
  return TPU_OK;
}

/* Rank p's device address `addr` as readable here. */
static inline uint8_t* at_peer(const tpu_comm_t* c, int p, uint64_t addr) {
  if (p == c->rank || c->local) return ptr(addr);
  return (uint8_t*)c->peer_base[p] + (addr - c->peer_mem[p].base);
}

/* Copies with streaming stores where the destination allows (x86) when
 * `stream`: a block written to several ranks' buffers is not read back here,
 * and plain stores would first read every destination line (write-allocate).
 * Only for messages larger than the cache (STREAM_MIN_BYTES): smaller ones
 * are better left in cache for whoever reads them next. */
static size_t stream_min_bytes(void) {
  return (size_t)tpu_config_int(TPU_CONFIG_DIST_STREAM_MIN_KB) * 1024;
}
#define STREAM_MIN_BYTES stream_min_bytes()
static void copy_stream(uint8_t* dst, const uint8_t* src, size_t bytes, bool stream) {
#if defined(__SSE2__)
  if (!stream) {
    memcpy(dst, src, bytes);
    return;
  }
  size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
  if (bytes < 64 + head) {
    memcpy(dst, src, bytes);
    return;
  }
  memcpy(dst, src, head);
  dst += head, src += head, bytes -= head;
  size_t body = bytes & ~(size_t)63;
  for (size_t i = 0; i < body; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i*)(src + i));
    __m128i b = _mm_loadu_si128((const __m128i*)(src + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i*)(src + i + 32));
    __m128i d = _mm_loadu_si128((const __m128i*)(src + i + 48));
    _mm_stream_si128((__m128i*)(dst + i), a);
    _mm_stream_si128((__m128i*)(dst + i + 16), b);
    _mm_stream_si128((__m128i*)(dst + i + 32), c);
    _mm_stream_si128((__m128i*)(dst + i + 48), d);
  }
  memcpy(dst + body, src + body, bytes - body);
#else
  memcpy(dst, src, bytes);
#endif
}

static void stream_fence(void) {
#if defined(__SSE2__)
  _mm_sfence(); /* streaming stores are visible before the barrier that follows */
#endif
}

/* coll_reduce for a dst that may alias any source: through a small buffer,
 * a block at a time (it stays in cache). */
static void reduce_any_alias(uint8_t* dst, const void* const* srcs, int N, size_t n, tpu_dtype_t dt,
                             tpu_reduce_op_t op) {
  enum { BLOCK_BYTES = 16384 };
  uint64_t tmp[BLOCK_BYTES / 8];
  size_t es = tpu_dtype_size(dt), block = BLOCK_BYTES / es;
  const void* s[TPU_COMM_MAX_RANKS];
  for (size_t off = 0; off < n; off += block) {
    size_t m = min_size(block, n - off);
    for (int p = 0; p < N; ++p) s[p] = (const uint8_t*)srcs[p] + off * es;
    coll_reduce(tmp, s, N, m, dt, op, N);
    memcpy(dst + off * es, tmp, m * es);
  }
}

/* all_reduce in one pass: rank r reduces slice r of every rank's send,
 * a block at a time, and writes the block into slice r of every rank's recv.
 * Only rank r touches slice r of any buffer, so in place (send == recv) is
 * safe; the final barrier tells every rank its recv is complete. A block is
 * written only while the communicator is not aborted (a peer that gave up
 * may reuse its buffer). */
static tpu_status_t direct_all_reduce(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  int N = c->nranks, r = c->rank;
  size_t es = tpu_dtype_size(a->dtype), n = a->count;
  enum { BLOCK_BYTES = 16384 };
  uint64_t tmp[BLOCK_BYTES / 8];
  size_t block = BLOCK_BYTES / es;
  const void* srcs[TPU_COMM_MAX_RANKS];
  uint8_t* dsts[TPU_COMM_MAX_RANKS];
  size_t lo = n * (size_t)r / (size_t)N, hi = n * (size_t)(r + 1) / (size_t)N;
  bool stream = n * es >= STREAM_MIN_BYTES;
  for (size_t off = lo; off < hi; off += block) {
    if (atomic_load_explicit(&c->hdr->abort, memory_order_relaxed)) break;
    size_t m = min_size(block, hi - off);
    for (int p = 0; p < N; ++p) {
      srcs[p] = at_peer(c, p, x->peer_send[p]) + off * es;
      dsts[p] = at_peer(c, p, x->peer_recv[p]) + off * es;
    }
    coll_reduce(tmp, srcs, N, m, a->dtype, a->op, N);
    for (int p = 0; p < N; ++p) copy_stream(dsts[p], (const uint8_t*)tmp, m * es, stream);
  }
  stream_fence();
  return round_barrier(x);
}

/* all_gather: rank r writes its send, a block at a time (read once), into
 * part r of every rank's recv (skipped where that is its send: in place). */
static tpu_status_t direct_all_gather(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  int N = c->nranks, r = c->rank;
  size_t bytes = a->count * tpu_dtype_size(a->dtype);
  enum { BLOCK_BYTES = 65536 };
  const uint8_t* src = ptr(a->send);
  for (size_t off = 0; off < bytes; off += BLOCK_BYTES) {
    if (atomic_load_explicit(&c->hdr->abort, memory_order_relaxed)) break;
    size_t m = min_size(BLOCK_BYTES, bytes - off);
    for (int p = 0; p < N; ++p) {
      uint8_t* dst = at_peer(c, p, x->peer_recv[p]) + (size_t)r * bytes + off;
      if (dst != src + off) copy_stream(dst, src + off, m, bytes * (size_t)N >= STREAM_MIN_BYTES);
    }
  }
  stream_fence();
  return round_barrier(x);
}

static tpu_status_t direct_reduce_scatter(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  size_t part = a->count * tpu_dtype_size(a->dtype);
  const void* srcs[TPU_COMM_MAX_RANKS];
  for (int p = 0; p < c->nranks; ++p) srcs[p] = at_peer(c, p, x->peer_send[p]) + (size_t)c->rank * part;
  reduce_any_alias(ptr(a->recv), srcs, c->nranks, a->count, a->dtype, a->op);
  return round_barrier(x);
}

static tpu_status_t direct_reduce(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  if (c->rank == a->root) {
    const void* srcs[TPU_COMM_MAX_RANKS];
    for (int p = 0; p < c->nranks; ++p) srcs[p] = at_peer(c, p, x->peer_send[p]);
    reduce_any_alias(ptr(a->recv), srcs, c->nranks, a->count, a->dtype, a->op);
  }
  return round_barrier(x);
}

static tpu_status_t direct_gather(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  size_t bytes = a->count * tpu_dtype_size(a->dtype);
  if (c->rank == a->root)
    for (int p = 0; p < c->nranks; ++p)
      memmove(ptr(a->recv) + (size_t)p * bytes, at_peer(c, p, x->peer_send[p]), bytes);
  return round_barrier(x);
}

static tpu_status_t direct_scatter(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  size_t bytes = a->count * tpu_dtype_size(a->dtype);
  memmove(ptr(a->recv), at_peer(c, a->root, x->peer_send[a->root]) + (size_t)c->rank * bytes, bytes);
  return round_barrier(x);
}

static tpu_status_t direct_broadcast(coll_exec_t* x) {
  tpu_comm_t* c = x->comm;
  const tpu_coll_args_t* a = x->args;
  size_t bytes = a->count * tpu_dtype_size(a->dtype);
  if (c->rank != a->root || a->recv != a->send)
    memmove(ptr(a->recv), at_peer(c, a->root, x->peer_send[a->root]), bytes);
  return round_barrier(x);
}

typedef tpu_status_t (*run_fn)(coll_exec_t* x);

static const run_fn g_direct[TPU_COLL_KIND_COUNT] = {
    [TPU_COLL_ALL_REDUCE] = direct_all_reduce, [TPU_COLL_ALL_GATHER] = direct_all_gather,
    [TPU_COLL_REDUCE_SCATTER] = direct_reduce_scatter, [TPU_COLL_BROADCAST] = direct_broadcast,
    [TPU_COLL_REDUCE] = direct_reduce, [TPU_COLL_GATHER] = direct_gather,
    [TPU_COLL_SCATTER] = direct_scatter,
};

static const run_fn g_run[TPU_COLL_KIND_COUNT] = {
    [TPU_COLL_ALL_REDUCE] = run_reduce,      [TPU_COLL_BROADCAST] = run_broadcast,
    [TPU_COLL_REDUCE] = run_reduce,          [TPU_COLL_ALL_GATHER] = run_gather,
    [TPU_COLL_REDUCE_SCATTER] = run_reduce_scatter, [TPU_COLL_ALL_TO_ALL] = run_all_to_all,
    [TPU_COLL_GATHER] = run_gather,          [TPU_COLL_SCATTER] = run_scatter,
    [TPU_COLL_SEND] = run_send,              [TPU_COLL_RECV] = run_recv,
    [TPU_COLL_BARRIER] = run_barrier,
};

tpu_status_t tpu_comm_run(tpu_comm_t* c, const tpu_coll_args_t* a) { return comm_run_mem(c, a, NULL); }

/* The direct path when every rank qualifies, else the staged one (after the
 * handshake round, whose barrier did the mismatch check). */
static tpu_status_t run_large(coll_exec_t* x) {
  TPU_RETURN_IF_ERROR(round_barrier(x));
  bool use = false;
  TPU_RETURN_IF_ERROR(direct_agree(x, &use));
  return use ? g_direct[x->args->kind](x) : g_run[x->args->kind](x);
}

tpu_status_t comm_run_mem(tpu_comm_t* c, const tpu_coll_args_t* a, const coll_mem_t* mem) {
  TPU_RETURN_IF_ERROR(comm_check_args(c, a));
  pthread_mutex_lock(&c->mu);
  tpu_status_t s;
  if (atomic_load(&c->hdr->abort)) {
    s = comm_aborted_status(c);
  } else {
    /* one tensor, or the coalesced ones (count: their total) */
    tpu_coll_segment_t one = {a->send, a->recv, a->count};
    tpu_coll_args_t total = *a;
    coll_exec_t x = {.comm = c, .args = a, .mem = mem, .segs = &one, .nsegs = 1};
    if (a->nsegments) {
      total.count = 0;
      for (size_t i = 0; i < a->nsegments; ++i) total.count += a->segments[i].count;
      total.send = a->segments[0].send; /* one tensor: the plain paths read these */
      total.recv = a->segments[0].recv;
      x.args = &total;
      x.segs = a->segments;
      x.nsegs = a->nsegments;
    }
    x.timeout_ms = a->timeout_ms > 0 ? a->timeout_ms : atomic_load(&c->timeout_ms);
    x.deadline_ns = tpu_monotonic_ns() + x.timeout_ms * 1000000;
    bool rounds = !kind_p2p(a->kind);
    if (rounds) {
      x.seq = ++c->seq;
      direct_prepare(&x);
      publish(&x);
    }
    s = x.try_direct ? run_large(&x) : g_run[a->kind](&x);
    if (rounds) atomic_store(&c->ctl[c->rank].at_done, 1);
  }
  pthread_mutex_unlock(&c->mu);
  return s;
}
