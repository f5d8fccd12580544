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

struct tpu_program;
struct tpu_free_record;

/* A stream's last flushes: each recording's signature and what the fusion
 * compiler made of it (flush_memo.c). Under the stream's pending.mu. */
#define TPU_MEMO_ENTRIES 8
typedef struct tpu_flush_memo_entry {
  uint64_t* key;                 /* the recording's signature */
  int64_t key_len, key_cap;
  uint64_t hash;                 /* of the key */
  int32_t* order;                /* the scheduled order, or NULL when unmoved */
  int32_t order_len;
  struct tpu_program* program;   /* retained, or NULL: an empty entry */
  struct tpu_node_plans* plans;  /* the nodes' kernel plans (fusion.h), owned; NULL: none */
  int64_t extra;                 /* the memory estimate (defer.c's peak_extra) */
  uint64_t used;                 /* when last matched or stored (LRU) */
  uint64_t generation;           /* the program cache's when stored: a clear drops it */
  uint64_t stamp;                /* which store filled it (a raw slot names it so) */
} tpu_flush_memo_entry_t;

/* A way to an entry by a recording's raw signature (its addresses as they
 * are, not made canonical), kept when that recording was found or stored:
 * the placements a loop cycles through each get one. Valid while the entry
 * holds what it held then (the same stamp and cache generation). */
#define TPU_MEMO_RAW 16
typedef struct tpu_flush_memo_raw {
  uint64_t* key; /* the raw signature, or NULL: an empty slot */
  int64_t key_len, key_cap;
  uint64_t hash;
  int32_t entry;  /* index into entries */
  uint64_t stamp; /* the entry's when filed */
  uint64_t used;  /* when last matched or filed (LRU) */
} tpu_flush_memo_raw_t;

typedef struct tpu_flush_memo {
  tpu_flush_memo_entry_t entries[TPU_MEMO_ENTRIES];
  uint64_t* next;                /* the signature being compared */
  int64_t next_len, next_cap;
  uint64_t next_hash;
  bool next_valid;               /* built completely (no allocation failed) */
  uint64_t clock;
  uint64_t stores;               /* entries filled so far (their stamps) */
  tpu_flush_memo_raw_t raw_slots[TPU_MEMO_RAW];
  uint64_t* raw;                 /* the last lookup's raw signature, kept */
  int64_t raw_len, raw_cap;      /* (raw_valid) until its entry is known */
  uint64_t raw_hash;
  bool raw_valid;
  struct tpu_memo_span* spans;   /* canonical addresses (flush_memo.c): each */
  struct tpu_memo_span* sorted;  /* address's byte range and word, the ranges */
  struct tpu_memo_region* regions; /* sorted and merged into regions, each */
  int64_t span_cap;              /* region's id by first use (grown as needed) */
  uint64_t* live_addr;           /* the stream's live provisional blocks, */
  uint64_t* live_size;           /* read at each flush (room for live_cap, */
  int32_t live_cap;              /* grown to hold them all) */
} tpu_flush_memo_t;

/* Frees what the memo holds (entries, programs, arrays); *m is then empty. */
void tpu_flush_memo_free(tpu_flush_memo_t* m);

/* Builds the signature of a recording (its nodes, free records, live
 * provisional blocks and the compiler's switches, with addresses made
 * relative to the memory regions they fall in) into m->next; false when
 * out of memory (then nothing matches). */
bool tpu_flush_memo_sign(tpu_flush_memo_t* m, const tpu_graph_t* graph,
                         const struct tpu_free_record* frees, int32_t free_count,
                         const uint64_t* live_addr, const uint64_t* live_size, int32_t live,
                         uint64_t settings);
/* The entry whose signature is the one just built, or NULL. */
const tpu_flush_memo_entry_t* tpu_flush_memo_find(tpu_flush_memo_t* m);
/* The entry for a recording, or NULL: first by its raw signature (a slot
 * filed for the same words, addresses as they are: *out_fast set, nothing
 * made canonical), else as tpu_flush_memo_sign and tpu_flush_memo_find
 * (the raw signature is then filed for the entry found, or for the one
 * tpu_flush_memo_store fills next). */
const tpu_flush_memo_entry_t* tpu_flush_memo_lookup(tpu_flush_memo_t* m,
                                                    const tpu_graph_t* graph,
                                                    const struct tpu_free_record* frees,
                                                    int32_t free_count, const uint64_t* live_addr,
                                                    const uint64_t* live_size, int32_t live,
                                                    uint64_t settings, bool* out_fast);
/* Keeps the signature just built with what was compiled for it (the
 * scheduled order: n entries, or NULL when unmoved; the program, retained;
 * the nodes' plans, taken: released if nothing is kept; the estimate) in
 * place of the least recently used entry, and files the last lookup's raw
 * signature for it. Without a complete signature, or out of memory,
 * nothing is kept. */
void tpu_flush_memo_store(tpu_flush_memo_t* m, const int32_t* order, int32_t n,
                          struct tpu_program* program, struct tpu_node_plans* plans,
                          int64_t extra);

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
  tpu_flush_memo_t memo;       /* the last flush, for a loop that repeats it */
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
