/* tpu/collectives.h — collectives between processes, on device memory.
 *
 * A communicator joins `nranks` processes (one rank each). It is created on
 * every rank from the same unique id (made by one rank with
 * tpu_comm_unique_id and handed to the others out of band: the c10d Store in
 * the bridge). Transport for processes on one host: one POSIX shared-memory
 * segment per communicator (shm_open + mmap), holding per-rank slot buffers
 * (double-buffered rounds separated by a barrier on per-rank counters, waited
 * on with futexes) and per-pair mailboxes for send/recv. The segment's name
 * is unlinked once every rank has attached, so nothing outlives the
 * processes.
 *
 * A collective is enqueued on a stream (tpu_comm_enqueue) and runs there in
 * order with the stream's other work: it reads and writes device memory when
 * the stream reaches it. Its result is reported through a request object
 * (not the stream's error): tpu_coll_request_wait blocks until it ran and
 * returns its status.
 *
 * Never hangs: every wait has a deadline (the collective's timeout). A
 * collective whose peers do not arrive in time fails with
 * DEADLINE_EXCEEDED, naming the collective and the ranks that did not arrive
 * (and the collective each of them is at); the communicator is then aborted
 * on every rank (later and pending collectives fail at once with ABORTED).
 * Ranks calling different collectives (kind, count, dtype, op or root) fail
 * with INVALID_ARGUMENT on every rank instead of exchanging garbage.
 *
 * Ownership: communicators are reference counted (create gives one
 * reference); requests are owned by the caller (release).
 */
#ifndef TPU_COLLECTIVES_H_
#define TPU_COLLECTIVES_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/dtype.h"
#include "tpu/runtime.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_COMM_ID_BYTES 64
#define TPU_COMM_MAX_RANKS 64

typedef struct tpu_comm tpu_comm_t;
typedef struct tpu_coll_request tpu_coll_request_t;

typedef struct tpu_comm_id {
  char bytes[TPU_COMM_ID_BYTES];
} tpu_comm_id_t;

typedef enum tpu_reduce_op {
  TPU_REDUCE_SUM = 0,
  TPU_REDUCE_AVG, /* sum / nranks (integers: truncating division); not for bool */
  TPU_REDUCE_MIN,
  TPU_REDUCE_MAX,
  TPU_REDUCE_PRODUCT,
  TPU_REDUCE_OP_COUNT,
} tpu_reduce_op_t;

/* X(ENUM, name) — every collective. */
#define TPU_COLL_LIST(X)                 \
  X(ALL_REDUCE, "all_reduce")            \
  X(BROADCAST, "broadcast")              \
  X(REDUCE, "reduce")                    \
  X(ALL_GATHER, "all_gather")            \
  X(REDUCE_SCATTER, "reduce_scatter")    \
  X(ALL_TO_ALL, "all_to_all")            \
  X(GATHER, "gather")                    \
  X(SCATTER, "scatter")                  \
  X(SEND, "send")                        \
  X(RECV, "recv")                        \
  X(BARRIER, "barrier")

typedef enum tpu_coll_kind {
#define TPU_X_(E, n) TPU_COLL_##E,
  TPU_COLL_LIST(TPU_X_)
#undef TPU_X_
  TPU_COLL_KIND_COUNT,
} tpu_coll_kind_t;

const char* tpu_coll_name(tpu_coll_kind_t kind);

/* One collective. Buffers are contiguous, of `dtype`; `count` is in elements:
 *   ALL_REDUCE     send[count] -> recv[count] (send == recv: in place)
 *   BROADCAST      root's send[count] -> recv[count] on every rank
 *   REDUCE         send[count] -> recv[count] on root (others: recv unused)
 *   ALL_GATHER     send[count] -> recv[nranks * count], in rank order
 *   REDUCE_SCATTER send[nranks * count] -> recv[count] (this rank's part)
 *   ALL_TO_ALL     send_counts[p] elements at send + send_displs[p] go to
 *                  rank p, recv_counts[p] from p land at recv + recv_displs[p];
 *                  NULL counts: `count` elements to and from every rank,
 *                  packed in rank order; NULL displs: packed
 *   GATHER         send[count] -> recv[nranks * count] on root
 *   SCATTER        root's send[nranks * count] -> recv[count]
 *   SEND / RECV    send[count] to / recv[count] from rank `root` (the peer);
 *                  messages between two ranks arrive in order
 *   BARRIER        no data
 * Addresses are device addresses (host pointers in tpu_comm_run). */
/* One tensor of a coalesced collective (tpu_coll_args_t.segments): `count`
 * elements, with the addresses and part layout of the collective's send and
 * recv buffers (ALL_GATHER: recv holds nranks * count; REDUCE_SCATTER: send
 * holds nranks * count). */
typedef struct tpu_coll_segment {
  uint64_t send, recv;
  size_t count;
} tpu_coll_segment_t;

typedef struct tpu_coll_args {
  tpu_coll_kind_t kind;
  uint64_t send, recv;
  size_t count;
  tpu_dtype_t dtype;
  tpu_reduce_op_t op;
  int root;
  const size_t* send_counts; /* ALL_TO_ALL: nranks entries each, copied at enqueue */
  const size_t* send_displs;
  const size_t* recv_counts;
  const size_t* recv_displs;
  int64_t timeout_ms; /* <= 0: the communicator's timeout */
  /* Coalesced (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER): nsegments > 0 tensors
   * of one dtype run as one collective (one rendezvous, one pass over their
   * data, as if they were concatenated); send, recv and count are then
   * ignored. Copied at enqueue. */
  const tpu_coll_segment_t* segments;
  size_t nsegments;
} tpu_coll_args_t;

/* A fresh unique id (a random shared-memory name). */
tpu_status_t tpu_comm_unique_id(tpu_comm_id_t* out_id);

/* Joins the communicator `id` as `rank` of `nranks`; waits (up to timeout_ms)
 * until every rank has joined, else DEADLINE_EXCEEDED naming the missing
 * ranks. timeout_ms is also the default timeout of its collectives. */
tpu_status_t tpu_comm_create(const tpu_comm_id_t* id, int nranks, int rank, int64_t timeout_ms,
                             tpu_comm_t** out_comm);
/* Communicators between `nranks` chips driven by this process (rank i is
 * out_comms[i]; the caller releases each). Collectives on them are enqueued
 * with tpu_comm_enqueue on each chip's stream like any other, rendezvous
 * when every chip's queue reaches them, and move data chip to chip
 * directly: each chip's worker reads the other chips' buffers in place
 * (all_reduce, reduce, broadcast, all_gather, gather, scatter,
 * reduce_scatter: no staging copy; all_to_all and send/recv still go
 * through the control block's slots). Same checks, timeouts and abort as
 * between processes. */
tpu_status_t tpu_comm_create_local(int nranks, int64_t timeout_ms, tpu_comm_t** out_comms);
void tpu_comm_retain(tpu_comm_t* comm);
void tpu_comm_release(tpu_comm_t* comm);
int tpu_comm_rank(const tpu_comm_t* comm);
int tpu_comm_size(const tpu_comm_t* comm);
void tpu_comm_set_timeout(tpu_comm_t* comm, int64_t timeout_ms);
/* How many collectives other than send/recv this rank has run (diagnostics:
 * a coalesced group counts once). */
uint64_t tpu_comm_sequence(tpu_comm_t* comm);
/* Aborts the communicator on every rank: waiting and later collectives fail
 * with ABORTED and `reason`. */
void tpu_comm_abort(tpu_comm_t* comm, const char* reason);
/* The communicator's abort status (a copy, caller-owned), TPU_OK if healthy. */
tpu_status_t tpu_comm_error(tpu_comm_t* comm);

/* Checks the arguments (synchronously) and enqueues the collective on
 * `stream`. out_request (optional) receives a request to wait on. */
tpu_status_t tpu_comm_enqueue(tpu_comm_t* comm, tpu_stream_t* stream,
                              const tpu_coll_args_t* args, tpu_coll_request_t** out_request);

/* Asks the chip's driver to place its later device allocations where the
 * other processes of a communicator can read them in place: large
 * collectives on such buffers then skip the shared-memory staging (the
 * direct path, see docs/distributed.md). tpu_comm_enqueue does it for the
 * stream's chip; the bridge does it when a process group is created, before
 * the program allocates its buffers. Idempotent; UNIMPLEMENTED when the
 * driver cannot (collectives then stage as before). */
tpu_status_t tpu_comm_share_chip_memory(tpu_chip_t* chip);

/* Runs a collective at once on the calling thread, on host memory. Used by
 * the stream path, and by tests (no runtime needed). */
tpu_status_t tpu_comm_run(tpu_comm_t* comm, const tpu_coll_args_t* args);

/* True once the collective has run (or failed). */
bool tpu_coll_request_done(tpu_coll_request_t* request);
/* Waits until it has run; returns a copy of its status (caller-owned). May
 * be called any number of times, from any thread. */
tpu_status_t tpu_coll_request_wait(tpu_coll_request_t* request);
void tpu_coll_request_release(tpu_coll_request_t* request);

/* Requests for collectives run by a transport outside the runtime (the
 * bridge's Gloo path between hosts): create gives one reference; complete
 * takes ownership of `status` (TPU_OK for success) and wakes the waiters; a
 * request is completed once (later completions are dropped). */
tpu_status_t tpu_coll_request_create(tpu_coll_request_t** out_request);
void tpu_coll_request_retain(tpu_coll_request_t* request);
void tpu_coll_request_complete(tpu_coll_request_t* request, tpu_status_t status);

#ifdef __cplusplus
}
#endif
#endif /* TPU_COLLECTIVES_H_ */
