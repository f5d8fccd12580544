/* tpu/profiler.h — the device-side event recorder behind torch.profiler.
 *
 * While the recorder runs, whoever runs a command on a chip (the stream's
 * worker, or the submitting thread when the host driver runs a small
 * command inline) appends one event per kernel it ran: an op node run on
 * its own is one event named after the op, a fused group of a deferred
 * program is one event named after the ops it fuses ("fused[add,mul]"),
 * copies, collectives and other host functions queued on a stream are one
 * event each. The deferred runtime adds a marker per flush (its reason and
 * whether the program came from the program cache), and with memory events
 * on the caching allocator adds one per block handed out or taken back.
 *
 * Each event carries the chip and stream it ran on, start and end on the
 * runtime's clock (CLOCK_MONOTONIC, ns: tpu_profiler_now_ns), the bytes it
 * touched, its FLOPs when known (matrix products), and a correlation id
 * (tpu_profiler_set_correlation) — for PyTorch, the host op it is charged
 * to: the one that queued the command, or for the nodes of a deferred
 * program the one that recorded each node (graphs stamp their nodes when
 * they are added: tpu/ir.h), so a program run during a later op's flush is
 * still charged op by op. A fused group is charged to the earliest id of
 * its nodes and lists the others (tpu_prof_event_t.others).
 *
 * Events of one stream are appended in the order they ran, which is the
 * order they were submitted (streams are in-order queues). Each chip has a
 * bounded buffer: when it is full, further events are not kept and are
 * counted (tpu_profiler_stats_t.dropped): nothing is lost silently.
 *
 * Cost: with the recorder stopped, running a command costs one relaxed
 * atomic load more. Running, each event costs two clock reads and one
 * uncontended lock of its chip's buffer.
 *
 * Thread safety: every function may be called from any thread. Starting
 * while running, or draining while running, is allowed (drain takes the
 * events recorded so far).
 */
#ifndef TPU_PROFILER_H_
#define TPU_PROFILER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_prof_kind {
  TPU_PROF_KERNEL = 0,  /* one op node run on its own */
  TPU_PROF_FUSED,       /* a fused group of a deferred program */
  TPU_PROF_COPY,        /* a byte copy (name: "memcpy H2D" / "D2H" / "D2D") */
  TPU_PROF_COLLECTIVE,  /* a collective run on the stream */
  TPU_PROF_HOST_FN,     /* another host function queued on the stream */
  TPU_PROF_FLUSH,       /* a deferred flush (instant: start == end) */
  TPU_PROF_ALLOC,       /* a device block handed out (instant) */
  TPU_PROF_FREE,        /* a device block taken back (instant) */
  TPU_PROF_KIND_COUNT
} tpu_prof_kind_t;

#define TPU_PROF_NAME_MAX 96
#define TPU_PROF_MAX_OTHERS 8

typedef struct tpu_prof_event {
  int32_t kind;          /* tpu_prof_kind_t */
  int16_t chip, stream;  /* stream -1: not tied to a stream (memory events) */
  int64_t start_ns, end_ns;
  /* The host op charged with the event, 0: none. A command's own work: the
   * id its submitter had set when queuing it. Nodes of a graph: the id the
   * node was stamped with when recorded (tpu_graph_append), else the
   * command's; a fused group: the smallest (earliest-recorded) id of its
   * nodes, the group's other ids in others[] (see below). */
  uint64_t correlation;
  int64_t bytes;         /* operand bytes touched, copy or block size; -1: unknown */
  int64_t flops;         /* -1: unknown */
  /* Flushes: the reason (tpu_flush_reason_t), whether the program was a
   * cache hit, and the nodes recorded (kernels: the nodes run). Memory
   * events: addr is the block's device address, bytes its size. */
  int32_t flush_reason;
  int32_t cache_hit;
  int64_t nodes;
  uint64_t addr;
  char name[TPU_PROF_NAME_MAX]; /* NUL-terminated, truncated if longer */
  /* Fused groups: the distinct ids, other than `correlation`, of the ops
   * that recorded the group's nodes, in node order (num_others of them;
   * others_truncated when more did not fit). */
  int32_t num_others, others_truncated;
  uint64_t others[TPU_PROF_MAX_OTHERS];
} tpu_prof_event_t;

typedef struct tpu_profiler_config {
  int64_t events_per_chip; /* buffer bound per chip; <= 0: 1 << 16 */
  bool memory;             /* also record allocator events */
} tpu_profiler_config_t;

typedef struct tpu_profiler_stats {
  int64_t recorded; /* events kept since the last start */
  int64_t dropped;  /* events not kept because a chip's buffer was full */
} tpu_profiler_stats_t;

/* Starts recording (config may be NULL: defaults). Events still buffered
 * from an earlier run are discarded and the counters reset. OUT_OF_MEMORY
 * when the buffers cannot be allocated (then nothing records). */
tpu_status_t tpu_profiler_start(const tpu_profiler_config_t* config);
/* Stops recording; what was buffered stays until drained or restarted.
 * Commands already queued record nothing more once they see it stopped. */
void tpu_profiler_stop(void);
/* Whether the recorder runs (a relaxed load: the check on every command). */
bool tpu_profiler_enabled(void);
bool tpu_profiler_memory_enabled(void);

/* Moves up to `capacity` of chip `chip`'s buffered events, oldest first,
 * into out[] (caller-owned) and sets *out_count; the events moved are
 * removed. INVALID_ARGUMENT for a chip index out of range. */
tpu_status_t tpu_profiler_drain(int chip, tpu_prof_event_t* out, size_t capacity,
                                size_t* out_count);
void tpu_profiler_get_stats(tpu_profiler_stats_t* out_stats);

/* The calling thread's correlation id, stamped on the commands it queues
 * from now on (0: none). Returns the previous one, to restore. */
uint64_t tpu_profiler_set_correlation(uint64_t id);
uint64_t tpu_profiler_correlation(void);

/* The recorder's clock: CLOCK_MONOTONIC in ns. */
int64_t tpu_profiler_now_ns(void);

/* Appends an event to its chip's buffer (no-op while stopped; counted as
 * dropped when the buffer is full). The event is copied. For the runtime's
 * own recorders and for tests. */
void tpu_profiler_record(const tpu_prof_event_t* event);

#ifdef __cplusplus
}
#endif
#endif /* TPU_PROFILER_H_ */
