/* comm.h — internals of the collectives (runtime/src/collectives): the
 * shared-memory segment of a communicator, its synchronisation, and the
 * reduction kernels. See tpu/collectives.h for the model.
 *
 * Segment layout (one per communicator, mapped by every rank):
 *   header (4 KiB)           magic, sizes, attach counter, abort state
 *   rank_ctl[nranks]         per rank: round counter (futex word), joined,
 *                            what it runs (for timeout messages), and the
 *                            description of its current collective for each
 *                            round parity (mismatch checks)
 *   p2p_ctl[nranks*nranks]   per ordered pair (src, dst): sent/acked counters
 *   slots[nranks][2]         per rank, two halves of `half_bytes`: the data of
 *                            round k lives in half k & 1
 *   p2p data[nranks*nranks]  one mailbox of `p2p_bytes` per ordered pair
 *
 * Rounds. Every round-based collective is a sequence of rounds: write into
 * one's own slot half, barrier (post round k, wait for every peer's round
 * counter to reach k), read any slot's half. Peers are never more than one
 * round apart, and the data of round k+2 is written only after every rank
 * passed barrier k+1 — after it finished reading round k — so two halves
 * suffice and each round needs one barrier.
 */
#ifndef TPU_COLLECTIVES_COMM_H_
#define TPU_COLLECTIVES_COMM_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/collectives.h"
#include "tpu/hal.h"

#define COMM_MAGIC 0x7470755f64697374ull /* "tpu_dist" */
#define COMM_HEADER_BYTES 4096
#define COMM_ABORT_MSG 768

typedef struct comm_header {
  _Atomic uint64_t magic; /* stored last by rank 0, once the rest is set */
  uint64_t total_bytes, half_bytes, p2p_bytes;
  uint64_t ctl_off, p2p_ctl_off, slots_off, p2p_off;
  uint64_t direct_min_bytes; /* direct path from this size on (0: never) */
  int32_t nranks;
  _Atomic uint32_t attached; /* futex word: ranks that joined */
  _Atomic uint32_t waiters;  /* ranks sleeping on a futex: posters wake only then */
  _Atomic uint32_t abort_claim;
  _Atomic uint32_t abort;    /* set (after the message) when aborted */
  int32_t abort_rank;
  char abort_msg[COMM_ABORT_MSG];
} comm_header_t;

/* What a rank runs: compared across ranks at a collective's first barrier. */
typedef struct coll_info {
  uint64_t seq;
  int32_t kind, dtype, op, root;
  uint64_t count;
  /* Direct path: whether this rank's buffers lie in device memory its peers
   * can map, that memory, and the buffers' device addresses. */
  int32_t direct;
  tpu_hal_memory_export_t mem;
  uint64_t send, recv;
} coll_info_t;

typedef struct rank_ctl {
  _Atomic uint32_t round;  /* futex word: last round posted */
  _Atomic uint32_t joined;
  _Atomic uint64_t at_seq; /* the collective it runs or last ran */
  _Atomic int32_t at_kind;
  _Atomic uint32_t at_done; /* 1 once at_seq finished */
  int32_t pid;              /* the rank's process, for the liveness check: */
  uint64_t pid_start;       /* its start time (/proc/PID/stat field 22), and */
  uint64_t pid_ns;          /* its pid namespace inode (checked only when ours) */
  coll_info_t info[2];      /* by round parity */
} __attribute__((aligned(128))) rank_ctl_t;

typedef struct p2p_ctl {
  _Atomic uint32_t sent;  /* futex word: chunks written by src */
  _Atomic uint32_t acked; /* futex word: chunks consumed by dst */
  uint64_t msg_bytes, chunk_bytes;
} __attribute__((aligned(64))) p2p_ctl_t;

struct tpu_comm {
  _Atomic int refs;
  int rank, nranks;
  _Atomic int64_t timeout_ms;
  uint8_t* base;
  size_t bytes;
  comm_header_t* hdr;
  rank_ctl_t* ctl;
  p2p_ctl_t* p2p;
  uint32_t round;   /* my last posted round */
  uint64_t seq;     /* round-based collectives run so far */
  uint32_t p2p_sent[TPU_COMM_MAX_RANKS], p2p_recvd[TPU_COMM_MAX_RANKS];
  /* Direct path: the peers' device memory as mapped here (imported through
   * `driver`), and the set of memories every rank agreed it could map. */
  const tpu_hal_driver_t* driver;
  tpu_hal_memory_export_t peer_mem[TPU_COMM_MAX_RANKS];
  const uint8_t* peer_base[TPU_COMM_MAX_RANKS];
  tpu_hal_memory_export_t agreed[TPU_COMM_MAX_RANKS];
  int agreed_state; /* 0: none yet, 1: all ranks mapped `agreed`, -1: some could not */
  pthread_mutex_t mu; /* one collective at a time */
  /* tpu_comm_create_local: every rank is a chip of this process, so peers'
   * device addresses are readable as they are; ranks other than 0 hold a
   * reference to rank 0's communicator, which owns the control block. */
  bool local;
  tpu_comm_t* owner;
};

static inline uint8_t* comm_slot(const tpu_comm_t* c, int rank, uint32_t round) {
  return c->base + c->hdr->slots_off + ((size_t)rank * 2 + (round & 1)) * c->hdr->half_bytes;
}

static inline uint8_t* comm_mailbox(const tpu_comm_t* c, int src, int dst) {
  return c->base + c->hdr->p2p_off + ((size_t)src * (size_t)c->nranks + (size_t)dst) * c->hdr->p2p_bytes;
}

static inline p2p_ctl_t* comm_p2p_ctl(const tpu_comm_t* c, int src, int dst) {
  return &c->p2p[(size_t)src * (size_t)c->nranks + (size_t)dst];
}

/* The device memory a rank's buffers live in (the stream path): lets the
 * direct path ask the driver whether they can be read in place by peers. */
typedef struct coll_mem {
  const tpu_hal_driver_t* driver;
  tpu_hal_chip_t* chip;
} coll_mem_t;

/* One running collective. */
typedef struct coll_exec {
  tpu_comm_t* comm;
  const tpu_coll_args_t* args;
  const coll_mem_t* mem; /* NULL: host memory, staged */
  const tpu_coll_segment_t* segs; /* the tensors (one: send, recv, count) */
  size_t nsegs;
  bool checked;          /* the first barrier's mismatch check ran */
  bool try_direct;       /* large enough for the direct path (same on every rank) */
  int direct;            /* this rank's buffers can be read in place by peers */
  tpu_hal_memory_export_t direct_mem; /* where they live */
  uint64_t peer_send[TPU_COMM_MAX_RANKS], peer_recv[TPU_COMM_MAX_RANKS]; /* every rank's buffers */
  uint64_t seq;
  int64_t timeout_ms;
  int64_t deadline_ns;
} coll_exec_t;

/* Runs a collective whose buffers lie in `mem` (NULL: plain host memory). */
tpu_status_t comm_run_mem(tpu_comm_t* comm, const tpu_coll_args_t* args, const coll_mem_t* mem);
/* Checks a collective's arguments against the communicator (no waiting). */
tpu_status_t comm_check_args(const tpu_comm_t* c, const tpu_coll_args_t* a);

/* Barrier ending round comm->round + 1 (after this rank wrote its data for
 * it). On timeout: DEADLINE_EXCEEDED naming the ranks that did not arrive,
 * and the communicator is aborted. */
tpu_status_t comm_barrier(coll_exec_t* x);
/* Waits until *word reaches target (wrapping compare), posted by rank `peer`
 * (-1: any). 0: reached, 1: deadline passed, 2: communicator aborted, 3: the
 * peer's process exited (checked once per sleep slice, from /proc). */
int comm_wait_word(tpu_comm_t* c, _Atomic uint32_t* word, uint32_t target, int peer,
                   int64_t deadline_ns);
/* A peer's process exited while this rank waited for it: aborts the
 * communicator and returns ABORTED naming the rank and what it last ran. */
tpu_status_t comm_peer_exited(tpu_comm_t* c, const char* what, int peer);
void comm_post(tpu_comm_t* c, _Atomic uint32_t* word, uint32_t value);
/* The ABORTED status carrying the abort message. */
tpu_status_t comm_aborted_status(tpu_comm_t* c);
/* A timeout: aborts the communicator with the message and returns it as
 * DEADLINE_EXCEEDED. */
tpu_status_t comm_timeout(tpu_comm_t* c, const char* msg);

/* reduce.c: dst[i] = op over srcs[0..nsrc)[i], in source order; AVG divides
 * the sum by `divisor`. dst may alias srcs[0]. Bool: sum is or, product and
 * min are and, max is or. */
void coll_reduce(void* dst, const void* const* srcs, int nsrc, size_t n, tpu_dtype_t dtype,
                 tpu_reduce_op_t op, int divisor);
/* reduce_ref.c: the plain reference (element by element, through double or
 * int64), for tests. */
void coll_reduce_ref(void* dst, const void* const* srcs, int nsrc, size_t n, tpu_dtype_t dtype,
                     tpu_reduce_op_t op, int divisor);

#endif /* TPU_COLLECTIVES_COMM_H_ */
