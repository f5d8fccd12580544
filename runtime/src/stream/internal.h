/* internal.h — the stream layer's modules and what they offer each other.
 *
 *  runtime.c    chips, streams, events, submission (tpu/runtime.h); makes
 *               each chip's allocator with the pending state's hooks.
 *  defer.c      the pending state of each stream (tpu_pending_t) and its
 *               lock: recording, cuts, flushes (the driver's
 *               executable_prepare), the pending text; the only writer of
 *               tpu_pending_t. Capture's state lives there too, set and
 *               taken through its functions.
 *  allocator.c  device memory and its statistics, the peak included (the
 *               flush hands it the driver's estimate: tpu_allocator_commit).
 *               It reports allocations and frees through hooks
 *               (tpu_allocator_hooks_t) and names no other module's state.
 *  capture.c    a captured region (tpu/capture.h): told of allocations,
 *               frees and recordings by defer.c, under the pending lock.
 *  host_memory.c pinned host memory.
 *
 * Locks: each is taken and released in one function of the module that
 * owns it (chip->mu: runtime.c; pending.mu: defer.c; the allocator's:
 * allocator.c). Order: pending, then allocator (a flush commits to the
 * allocator under pending.mu; a free's hook holds pending.mu while the
 * allocator retires the block). */
#ifndef TPU_INTERNAL_H_
#define TPU_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "tpu/defer.h"
#include "tpu/hal.h"
#include "tpu/runtime.h"

typedef struct tpu_allocator tpu_allocator_t;

/* Deferred work of a stream: written by defer.c alone, under `mu` (the
 * atomics are also read without it). */
typedef struct tpu_pending {
  pthread_mutex_t mu;
  tpu_graph_t* graph;          /* recorded nodes, or NULL */
  struct tpu_free_record* frees; /* buffers freed while recording */
  int32_t free_count, free_capacity;
  int64_t heavy_elements;  /* elements heavy nodes touched since the last cut */
  int32_t epilogue_window; /* pointwise nodes a due pipeline cut still waits for */
  int32_t last_nodes;      /* the last flushed graph's nodes and operands: */
  int64_t last_inputs, last_outputs; /* the next graph's reserved room */
  struct tpu_capture* capture; /* the region being captured (capture.c), or NULL */
  _Atomic int capturing;       /* capture != NULL, read without the lock */
  _Atomic(const char*) capture_poison; /* why the capture cannot replay, or NULL */
  uint64_t* live_addr;         /* the live provisional blocks, read at each */
  uint64_t* live_size;         /* flush (room for live_cap, grown to hold */
  int32_t live_cap;            /* them all) */
} tpu_pending_t;

struct tpu_stream {
  tpu_chip_t* chip;
  int index;
  tpu_hal_queue_t* queue; /* created on first use, under chip->mu */
  tpu_pending_t pending;
};

struct tpu_chip {
  int index;
  uint64_t capacity;
  tpu_hal_chip_t* hal;
  pthread_mutex_t mu;
  tpu_stream_t streams[TPU_STREAMS_PER_CHIP];
  tpu_allocator_t* allocator;
};

const tpu_hal_driver_t* tpu_hal(void);

/* The stream's queue, created on first use. */
tpu_status_t tpu_stream_queue(tpu_stream_t* stream, tpu_hal_queue_t** out_queue);

/* Queues a command on the stream (flushes nothing; see runtime.c). */
tpu_status_t tpu_stream_enqueue(tpu_stream_t* stream, tpu_hal_command_t* cmd);

/* tpu_stream_host_fn with what the profiler calls it: `name` (static, or
 * NULL) and whether it is a collective (tpu/profiler.h). */
tpu_status_t tpu_stream_host_fn_named(tpu_stream_t* stream, const char* name, bool collective,
                                      void (*fn)(void* arg), void* arg);

/* tpu_stream_copy, saying whether the caller waits for the copy at once
 * (a pageable device-to-host copy does; a pinned one does not). */
tpu_status_t tpu_stream_copy_queued(tpu_stream_t* stream, tpu_copy_kind_t kind, uint64_t dst,
                                    uint64_t src, size_t bytes, bool host_waits);

/* Records an event without flushing the stream's deferred work (the
 * allocator flushes before it takes its lock). */
tpu_status_t tpu_event_record_queued(tpu_event_t* event, tpu_stream_t* stream);

/* allocator.c */

/* What a block's retirement tells the pending state (tpu_allocator_hooks_t). */
typedef struct tpu_freed {
  uint64_t addr, size;
  bool provisional; /* its bytes were never counted */
} tpu_freed_t;

/* What the allocator tells the layer that owns the streams' pending state
 * (defer.c's tpu_defer_allocator_hooks). Each is called with no allocator
 * lock held and returns holding none. */
typedef struct tpu_allocator_hooks {
  /* Whether a block allocated now is provisional (deferring: counted when
   * the graph that writes it is flushed). */
  bool (*deferring)(void);
  /* A block was allocated on `stream` (`bytes` asked for). */
  void (*allocated)(tpu_stream_t* stream, const tpu_block_t* block, uint64_t bytes);
  /* Another stream that used a block about to be freed: its deferred work
   * goes to its queue first. */
  tpu_status_t (*flush)(tpu_stream_t* stream);
  /* A block of `stream` is freed: the hook calls retire(block, &freed),
   * which gives the block back to the allocator (it may be reused at once),
   * with whatever keeps a new tenant's nodes from being recorded before the
   * free is noted, and then notes it. */
  void (*freeing)(tpu_stream_t* stream, tpu_block_t* block,
                  void (*retire)(tpu_block_t* block, tpu_freed_t* out));
} tpu_allocator_hooks_t;

tpu_status_t tpu_allocator_create(tpu_chip_t* chip, const tpu_allocator_hooks_t* hooks,
                                  tpu_allocator_t** out_allocator);
/* Returns every segment to the chip and frees the allocator, whose blocks
 * must all have been freed (and none be awaiting another stream). Chips
 * keep theirs for the process's life; tests make their own. */
void tpu_allocator_destroy(tpu_allocator_t* allocator);
/* Copies up to `capacity` of the stream's live provisional blocks (allocated
 * while deferring, not yet counted); returns how many there are, which may
 * exceed `capacity` (then the caller grows its arrays and asks again). */
int32_t tpu_allocator_provisional(tpu_allocator_t* allocator, int stream, uint64_t* out_addr,
                                  uint64_t* out_size, int32_t capacity);
/* Raises the peak to at least current + `extra` (the most the flushed
 * program holds on top of what was counted before it), then counts the
 * stream's live provisional blocks in the statistics. */
void tpu_allocator_commit(tpu_allocator_t* allocator, int stream, int64_t extra);

/* defer.c: the pending state's owner */
/* Sets up a stream's pending state (empty, its lock made). */
void tpu_pending_init(tpu_pending_t* pending);
/* The allocator's hooks (above): a block's allocation and free go to the
 * stream's pending state and capture. */
extern const tpu_allocator_hooks_t tpu_defer_allocator_hooks;
/* Appends a verified graph to the stream's pending graph (takes ownership). */
tpu_status_t tpu_defer_record(tpu_stream_t* stream, tpu_graph_t* graph);
/* Appends one verified node (copied; the caller keeps it). */
tpu_status_t tpu_defer_record_node(tpu_stream_t* stream, const tpu_node_t* node);
/* Whether the stream has recorded nodes. */
bool tpu_defer_pending(tpu_stream_t* stream);
/* Whether the stream captures (lock-free). */
bool tpu_pending_capturing(tpu_stream_t* stream);
/* Something the replay could not reproduce happened on the stream; lock-free
 * (`reason` static; the first one is kept). */
void tpu_pending_poison(tpu_stream_t* stream, const char* reason);
/* Makes `capture` the stream's (false, and nothing changes, when it already
 * captures). */
bool tpu_pending_capture_attach(tpu_stream_t* stream, struct tpu_capture* capture);
/* Takes the stream's capture (NULL when none) and the first poison reason. */
struct tpu_capture* tpu_pending_capture_detach(tpu_stream_t* stream, const char** out_poison);
/* Calls fn(capture, arg) under the pending lock when the stream captures. */
void tpu_pending_with_capture(tpu_stream_t* stream, void (*fn)(struct tpu_capture*, void*),
                              void* arg);

/* tpu_stream_flush for a caller that waits for the flushed work at once
 * (a host read, a synchronisation): the program is queued host_waits. */
tpu_status_t tpu_stream_flush_for_host(tpu_stream_t* stream, tpu_flush_reason_t reason);

/* Whether this thread is queueing a flushed program (defer.c): the one
 * command a capture allows. */
bool tpu_defer_in_flush(void);

/* capture.c: what a capture is told, by defer.c under the stream's pending
 * lock (each on the stream's capture, non-NULL). */
/* A block was allocated on the stream. */
void tpu_capture_note_alloc(struct tpu_capture* capture, const tpu_block_t* block,
                            uint64_t bytes);
/* A block is being freed. */
void tpu_capture_note_free(struct tpu_capture* capture, const tpu_block_t* block);
/* A graph is being recorded. */
void tpu_capture_note_record(struct tpu_capture* capture, const tpu_graph_t* graph);

#endif /* TPU_INTERNAL_H_ */
