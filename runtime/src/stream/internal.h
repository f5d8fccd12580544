/* internal.h — runtime-private structures shared by runtime.c (chips,
 * streams, events), allocator.c (device memory) and host_memory.c. */
#ifndef TPU_INTERNAL_H_
#define TPU_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "tpu/defer.h"
#include "tpu/hal.h"
#include "tpu/runtime.h"

typedef struct tpu_allocator tpu_allocator_t;

/* Deferred work of a stream (defer.c), under `mu`. */
typedef struct tpu_pending {
  pthread_mutex_t mu;
  tpu_graph_t* graph;          /* recorded nodes, or NULL */
  struct tpu_free_record* frees; /* buffers freed while recording */
  int32_t free_count, free_capacity;
  _Atomic int provisional; /* live provisional blocks of the stream (allocator) */
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
tpu_status_t tpu_allocator_create(tpu_chip_t* chip, tpu_allocator_t** out_allocator);
/* Copies up to `capacity` of the stream's live provisional blocks (allocated
 * while deferring, not yet counted); returns how many there are, which may
 * exceed `capacity` (then the caller grows its arrays and asks again). */
int32_t tpu_allocator_provisional(tpu_allocator_t* allocator, int stream, uint64_t* out_addr,
                                  uint64_t* out_size, int32_t capacity);
/* Raises the peak to at least current + `extra` (the most the flushed
 * program holds on top of what was counted before it), then counts the
 * stream's live provisional blocks in the statistics. */
void tpu_allocator_commit(tpu_allocator_t* allocator, int stream, int64_t extra);

/* defer.c */
/* Appends a verified graph to the stream's pending graph (takes ownership). */
tpu_status_t tpu_defer_record(tpu_stream_t* stream, tpu_graph_t* graph);
/* Appends one verified node (copied; the caller keeps it). */
tpu_status_t tpu_defer_record_node(tpu_stream_t* stream, const tpu_node_t* node);
/* Whether the stream has recorded nodes. */
bool tpu_defer_pending(tpu_stream_t* stream);
/* The allocator reports a freed block to its stream (recorded when the
 * stream has pending nodes); the caller holds stream->pending.mu.
 * `provisional` when its bytes were never counted. */
void tpu_defer_note_free_locked(tpu_stream_t* stream, uint64_t addr, uint64_t size,
                                bool provisional);

/* tpu_stream_flush for a caller that waits for the flushed work at once
 * (a host read, a synchronisation): the program is queued host_waits. */
tpu_status_t tpu_stream_flush_for_host(tpu_stream_t* stream, tpu_flush_reason_t reason);

/* Whether this thread is queueing a flushed program (defer.c): the one
 * command a capture allows. */
bool tpu_defer_in_flush(void);

/* capture.c: what a capturing stream is told (each a no-op when the stream
 * does not capture). */
/* Something the replay could not reproduce happened on the stream; lock-free
 * (`reason` static). */
void tpu_capture_poison(tpu_stream_t* stream, const char* reason);
/* A block was allocated on the stream (takes pending.mu). */
void tpu_capture_note_alloc(tpu_stream_t* stream, const tpu_block_t* block, uint64_t bytes);
/* A block is being freed; the caller holds stream->pending.mu. */
void tpu_capture_note_free_locked(tpu_stream_t* stream, const tpu_block_t* block);
/* A graph is being recorded; the caller holds stream->pending.mu. */
void tpu_capture_note_record_locked(tpu_stream_t* stream, const tpu_graph_t* graph);

#endif /* TPU_INTERNAL_H_ */
