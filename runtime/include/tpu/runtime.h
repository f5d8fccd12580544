/* tpu/runtime.h — the device runtime's public API: chips, streams, events,
 * device memory, and submission of graphs.
 *
 * Model (CUDA-like): a process sees N chips. Each chip has fixed-capacity
 * device memory served by a caching allocator, and streams: in-order queues
 * whose work runs asynchronously to the caller. Stream 0 of a chip is its
 * default stream; streams 1..TPU_STREAMS_PER_CHIP-1 form a pool.
 *
 * Errors in asynchronous work are recorded on the stream that ran it (the
 * message names the op) and returned by the next synchronising call on it
 * (tpu_stream_synchronize, tpu_chip_synchronize, tpu_event_synchronize, a
 * device-to-host copy), which clears it: the stream then works again.
 *
 * Ownership: chips and streams are owned by the runtime and live until
 * process exit; handles to them are borrowed. Events, blocks, graphs and
 * statuses returned to the caller are owned by the caller.
 */
#ifndef TPU_RUNTIME_H_
#define TPU_RUNTIME_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/ir.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_MAX_CHIPS 8
#define TPU_STREAMS_PER_CHIP 32

typedef struct tpu_chip tpu_chip_t;
typedef struct tpu_stream tpu_stream_t;
typedef struct tpu_event tpu_event_t;
typedef struct tpu_block tpu_block_t;

/* ---- Runtime ------------------------------------------------------------ */

/* Starts the runtime once (later calls return the first result). Reads
 * TORCH_TPU_NUM_CHIPS (1..8, default 1), TORCH_TPU_MEMORY_GB (per chip,
 * default 16), TORCH_TPU_NUM_THREADS (compute pool, default: cores),
 * TPU_LAUNCH_BLOCKING (1: every submission waits). */
tpu_status_t tpu_runtime_init(void);
int tpu_chip_count(void);
const char* tpu_driver_name(void);
int tpu_compute_threads(void);

/* The host driver's matrix unit: bfloat16 GEMMs with float32 accumulation
 * (and int8 GEMMs with int32 accumulation) on the CPU's matrix engine (AMX
 * tiles, or AVX512-BF16 and VNNI), through oneDNN.
 * TORCH_TPU_MXU=0 turns it off (read once). The strings are static. */
typedef struct tpu_mxu_info {
  const char* library; /* "oneDNN 3.2.0" */
  const char* isa;     /* "amx_bf16", "avx512_bf16", or "off (why)" */
  bool bfloat16;       /* bfloat16 GEMMs run on the unit */
  bool float32;        /* float32 GEMMs of one B matrix do (AVX-512, "highest") */
  bool int8;           /* int8 GEMMs (torch._int_mm) run on it */
  bool float16;        /* float16 GEMMs do (AVX512-FP16 brgemm, float32 sums) */
  uint64_t gemms;      /* GEMMs it ran since the process started */
  uint64_t declined;   /* GEMMs offered to it that ran on the float32 path */
  uint64_t convs;      /* convolution products (forward, input or weight gradient) it ran */
  uint64_t conv_declined; /* bfloat16 ones offered to it that ran on the float32 path */
  uint64_t conv_split; /* of `convs`, those split over the compute pool's threads
                        * (images, channels or groups), one primitive each */
  uint64_t conv_gemm;  /* of `convs`, 1x1 ones run as GEMMs (no padding, one
                        * group), not on the primitives: per image on NCHW
                        * tensors where they lie, or one GEMM with the
                        * positions as rows (their GEMMs count in `gemms`) */
} tpu_mxu_info_t;
void tpu_mxu_get_info(tpu_mxu_info_t* out_info);

/* The matrix unit's weight cache: blocked copies of GEMM operands read
 * again unchanged (weights), so that a loop lays each out once. Bounded by
 * TORCH_TPU_WEIGHT_CACHE_MB (default 1024; 0 turns it off); an entry is
 * dropped when its bytes are written or freed. Host memory, not the chip's. */
typedef struct tpu_weight_cache_stats {
  int64_t entries;     /* blocked copies held */
  int64_t bytes;       /* their size */
  int64_t limit_bytes; /* the bound */
  int64_t hits;        /* GEMMs that used a held copy */
  int64_t packs;       /* blocked copies made (held, or for one GEMM only) */
  int64_t evictions;   /* entries evicted (or copies not kept) to stay within the bounds */
  int64_t drops;       /* entries dropped because their bytes were written or freed */
} tpu_weight_cache_stats_t;
void tpu_weight_cache_get_stats(tpu_weight_cache_stats_t* out_stats);
/* Sets the bound (bytes; 0 turns the cache off), evicting down to it. */
void tpu_weight_cache_set_limit(int64_t bytes);
/* Drops every entry (tpu_memory_empty_cache does too). */
void tpu_weight_cache_clear(void);

/* Synchronous mode: every submission waits for completion. */
void tpu_set_launch_blocking(bool blocking);
bool tpu_launch_blocking(void);

/* ---- Chips --------------------------------------------------------------- */

/* Borrowed handle to chip `index`; INVALID_ARGUMENT if out of range. */
tpu_status_t tpu_chip_get(int index, tpu_chip_t** out_chip);
int tpu_chip_index(const tpu_chip_t* chip);
uint64_t tpu_chip_capacity(const tpu_chip_t* chip);
/* Waits for every stream of the chip; returns (and clears) the first error. */
tpu_status_t tpu_chip_synchronize(tpu_chip_t* chip);

/* How a chip's queues have been running their commands, summed over its
 * streams since the process started: which thread ran each command, and
 * whether hand-offs and synchronisations had to sleep. They say which
 * regime a loop is in (see the host driver's queue notes). */
typedef struct tpu_queue_stats {
  uint64_t inline_commands; /* small commands run by the submitting thread (queue idle) */
  uint64_t queued_commands; /* commands handed to the queue's worker */
  uint64_t worker_wakeups;  /* hand-offs that had to wake a sleeping worker */
  uint64_t syncs;           /* waits for the queue to drain */
  uint64_t sync_sleeps;     /* ... that slept (the work outlasted the poll) */
} tpu_queue_stats_t;
void tpu_chip_queue_stats(tpu_chip_t* chip, tpu_queue_stats_t* out_stats);

/* How the process's compute pool (the cores kernels split work over) has
 * run since it started. A job is one kernel's parallel loop; its workers
 * poll for the next job a while (adaptively) before they sleep. */
typedef struct tpu_pool_stats {
  int32_t threads;          /* the pool's size, the calling thread included */
  uint64_t jobs;            /* loops split over the pool */
  uint64_t serial_busy;     /* loops run serially: the pool ran another job */
  uint64_t exclusive;       /* claims of every core for a library's own threads */
  uint64_t spin_hits;       /* worker polls that found a job */
  uint64_t spin_misses;     /* worker polls that ran out (the worker then slept) */
  uint64_t spin_backoffs;   /* polls cut to the minimum: the cores were oversubscribed
                               (a poll descheduled, or a wake-up slower than the longest poll) */
  uint64_t sleeps;          /* worker sleeps */
  uint64_t wakeups;         /* jobs that signalled sleeping workers */
  uint64_t empty_takes;     /* a worker reached a job that had already ended */
  uint64_t caller_sleeps;   /* callers that slept waiting for a worker to finish its chunk */
  int64_t spin_ns;          /* the workers' current poll length, the longest of them */
  int32_t pinned;           /* threads pinned to a core of their own (TORCH_TPU_PIN_THREADS) */
  int32_t batch_threads;    /* device threads (pool workers, queue workers) scheduled
                               SCHED_BATCH (TORCH_TPU_DEVICE_SCHED) */
} tpu_pool_stats_t;
void tpu_pool_stats(tpu_pool_stats_t* out_stats);

/* ---- Streams ------------------------------------------------------------- */

/* Borrowed handle to stream `index` (0 = default) of a chip. */
tpu_status_t tpu_stream_get(tpu_chip_t* chip, int index, tpu_stream_t** out_stream);
int tpu_stream_index(const tpu_stream_t* stream);
tpu_chip_t* tpu_stream_chip(const tpu_stream_t* stream);

/* Enqueues a graph; the stream takes ownership of it (also on failure).
 * The graph is verified before it is queued. */
tpu_status_t tpu_stream_submit(tpu_stream_t* stream, tpu_graph_t* graph);
/* Enqueues one node, as a one-node graph would be; the node and what it
 * points to are borrowed (copied before the call returns). Deferred, it is
 * appended to the pending graph directly. */
tpu_status_t tpu_stream_submit_node(tpu_stream_t* stream, const tpu_node_t* node);

typedef enum tpu_copy_kind {
  TPU_COPY_H2D = 0, /* src is a host pointer, dst a device address */
  TPU_COPY_D2H,     /* src is a device address, dst a host pointer */
  TPU_COPY_D2D,
} tpu_copy_kind_t;

/* Enqueues a byte copy. The host side must stay valid until the copy has
 * run (synchronise, or use pinned memory: see tpu_host_alloc). */
tpu_status_t tpu_stream_copy(tpu_stream_t* stream, tpu_copy_kind_t kind, uint64_t dst,
                             uint64_t src, size_t bytes);

/* Enqueues fn(arg) to run on the stream's worker, in order. */
tpu_status_t tpu_stream_host_fn(tpu_stream_t* stream, void (*fn)(void* arg), void* arg);

/* Waits for all queued work; returns (and clears) the stream's error. */
tpu_status_t tpu_stream_synchronize(tpu_stream_t* stream);
/* True when no work is queued or running. */
bool tpu_stream_query(tpu_stream_t* stream);

/* ---- Events --------------------------------------------------------------- */

/* Creates an event (owned by the caller). With timing, records take a
 * timestamp when the stream reaches them. */
tpu_status_t tpu_event_create(bool timing, tpu_event_t** out_event);
void tpu_event_release(tpu_event_t* event);
/* Captures the stream's current position. */
tpu_status_t tpu_event_record(tpu_event_t* event, tpu_stream_t* stream);
/* Makes all later work on `stream` wait for the event's last record. */
tpu_status_t tpu_stream_wait_event(tpu_stream_t* stream, tpu_event_t* event);
/* True when the last record has completed (or was never made). */
bool tpu_event_query(tpu_event_t* event);
/* Waits for the last record; returns (and clears) the error recorded on the
 * stream it was recorded on, if any. */
tpu_status_t tpu_event_synchronize(tpu_event_t* event);
/* Milliseconds between two completed, timed records. */
tpu_status_t tpu_event_elapsed_ms(tpu_event_t* start, tpu_event_t* end, double* out_ms);

/* ---- Device memory ------------------------------------------------------- */

/* Allocates `bytes` of device memory for use on `stream` (caching allocator,
 * CUDA semantics: a freed block is reused at once by work on the same
 * stream; cross-stream use must be declared with tpu_block_record_stream).
 * OUT_OF_MEMORY when the chip's capacity would be exceeded, with a message
 * that states capacity, free, allocated and reserved bytes. The caller owns
 * the block and frees it with tpu_block_free. bytes == 0 gives a NULL block
 * and address 0. */
tpu_status_t tpu_block_alloc(tpu_stream_t* stream, size_t bytes, tpu_block_t** out_block);
void tpu_block_free(tpu_block_t* block);
uint64_t tpu_block_addr(const tpu_block_t* block);
size_t tpu_block_size(const tpu_block_t* block);
/* Declares that work on `stream` uses the block. */
void tpu_block_record_stream(tpu_block_t* block, tpu_stream_t* stream);
/* Index of the chip whose address range holds `addr`, or -1. */
int tpu_chip_of_address(uint64_t addr);

typedef struct tpu_stat {
  int64_t current, peak, allocated, freed;
} tpu_stat_t;

enum { TPU_POOL_ALL = 0, TPU_POOL_SMALL, TPU_POOL_LARGE, TPU_POOL_COUNT };

typedef struct tpu_memory_stats {
  tpu_stat_t allocation[TPU_POOL_COUNT];       /* live blocks handed out */
  tpu_stat_t segment[TPU_POOL_COUNT];          /* segments reserved from the chip */
  tpu_stat_t active[TPU_POOL_COUNT];           /* blocks allocated or awaiting reuse */
  tpu_stat_t inactive_split[TPU_POOL_COUNT];   /* free pieces of split segments */
  tpu_stat_t allocated_bytes[TPU_POOL_COUNT];
  tpu_stat_t reserved_bytes[TPU_POOL_COUNT];
  tpu_stat_t active_bytes[TPU_POOL_COUNT];
  tpu_stat_t inactive_split_bytes[TPU_POOL_COUNT];
  tpu_stat_t requested_bytes[TPU_POOL_COUNT];
  int64_t num_alloc_retries;
  int64_t num_ooms;
  int64_t num_sync_all_streams;
  int64_t max_split_size;
} tpu_memory_stats_t;

void tpu_memory_get_stats(tpu_chip_t* chip, tpu_memory_stats_t* out_stats);
void tpu_memory_reset_peak(tpu_chip_t* chip);
void tpu_memory_reset_accumulated(tpu_chip_t* chip);
/* Returns cached, unused segments to the chip. */
void tpu_memory_empty_cache(tpu_chip_t* chip);
/* Free and total device memory, in bytes (free = capacity - reserved). */
void tpu_memory_info(tpu_chip_t* chip, uint64_t* out_free, uint64_t* out_total);

/* The caching allocator's layout, for memory snapshots (PyTorch's
 * torch.cuda.memory._snapshot format): every segment mapped from the chip,
 * and the blocks that tile it, in address order. */
typedef enum tpu_block_state {
  TPU_BLOCK_INACTIVE = 0,        /* free, cached for reuse */
  TPU_BLOCK_ACTIVE_ALLOCATED,    /* handed out (tpu_block_alloc), not freed */
  TPU_BLOCK_ACTIVE_PENDING_FREE, /* freed, awaiting other streams' uses */
} tpu_block_state_t;

typedef struct tpu_block_info {
  uint64_t addr, size;
  uint64_t requested; /* bytes asked for (allocated blocks; 0 otherwise) */
  int32_t state;      /* tpu_block_state_t */
} tpu_block_info_t;

typedef struct tpu_segment_info {
  uint64_t addr, total_size;
  uint64_t allocated_size; /* bytes of its allocated blocks */
  uint64_t active_size;    /* allocated plus pending-free */
  uint64_t requested_size; /* bytes asked for by its allocated blocks */
  int32_t stream;          /* the stream it serves */
  int32_t pool;            /* TPU_POOL_SMALL or TPU_POOL_LARGE */
  size_t first_block, num_blocks; /* its blocks in the blocks array */
} tpu_segment_info_t;

/* Copies the chip's layout into caller-owned arrays: segments (newest
 * first) into segments[0 .. segment_capacity), all their blocks, segment by
 * segment, into blocks[0 .. block_capacity). Sets *out_segments and
 * *out_blocks to how many there are in all; like snprintf, what does not
 * fit is not written, so a caller whose count exceeded its capacity calls
 * again with more room (the layout may have grown meanwhile). Taken under
 * the allocator's lock, so it is one consistent state; deferred blocks not
 * yet counted are counted first (as tpu_memory_get_stats does).
 * INVALID_ARGUMENT when an output is NULL (arrays may be NULL with
 * capacity 0, to count). Nothing here is owned by the runtime. */
tpu_status_t tpu_memory_snapshot(tpu_chip_t* chip, tpu_segment_info_t* segments,
                                 size_t segment_capacity, tpu_block_info_t* blocks,
                                 size_t block_capacity, size_t* out_segments, size_t* out_blocks);

/* Called when any chip's allocator maps a segment (mapped true; before the
 * segment's first block is handed out) or returns one to the chip (mapped
 * false; empty_cache, or the retry before OUT_OF_MEMORY). It runs with that
 * allocator's lock held: it must be quick and must not call device-memory
 * functions. */
typedef void (*tpu_segment_observer_fn)(void* arg, int chip, int stream, uint64_t addr,
                                        uint64_t size, bool mapped);
/* Installs the process's one segment observer (NULL: none); `arg` is
 * borrowed and must outlive the observer's installation. */
void tpu_memory_set_segment_observer(tpu_segment_observer_fn fn, void* arg);

/* ---- Pinned host memory -------------------------------------------------- */

/* Page-locked-like host memory usable for asynchronous copies. The memory
 * is freed only after every queued copy that uses it has run. */
tpu_status_t tpu_host_alloc(size_t bytes, void** out_ptr);
void tpu_host_free(void* ptr);
bool tpu_host_is_pinned(const void* ptr);
/* Asynchronous copy between pinned memory and the device: the pinned block
 * stays alive until the copy has run. */
tpu_status_t tpu_stream_copy_pinned(tpu_stream_t* stream, tpu_copy_kind_t kind, uint64_t dst,
                                    uint64_t src, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif /* TPU_RUNTIME_H_ */
