/* tpu/hal.h — the hardware abstraction layer: what a driver provides.
 *
 * A driver is a const table of function pointers (tpu_hal_driver_t). It owns
 * chips (device memory ranges), queues (in-order command streams executed
 * asynchronously), events (completion markers on queues) and executables
 * (its own compiled form of a graph). Everything above the HAL — the caching
 * allocator, streams, the bridge — is written against this table and the
 * graph IR (tpu/ir.h) only: this header names nothing of the runtime above
 * it, nor of any driver's compiler or kernels.
 *
 * Commands are plain descriptors (tpu_hal_command_t). A driver checks every
 * descriptor it is given (tpu_hal_command_check): a malformed one is
 * refused by queue_submit with INVALID_ARGUMENT, never run. An error while a
 * command runs is recorded on its queue and returned by the next
 * queue_wait_idle (or queue_take_error): submission is asynchronous, so a
 * failure surfaces at synchronisation, and the commands after it still run.
 *
 * Executables are opaque, driver-owned and reference counted. The runtime
 * hands a driver a recording (a graph and the buffers freed while it was
 * recorded: tpu_hal_recording_t) through executable_prepare and gets back
 * the driver's executable for it, with what the runtime's allocator and
 * metrics need to know of it (tpu_hal_prepared_t); it never sees how the
 * executable was made. An EXEC command carries a graph and, optionally, the
 * driver's executable for it; without one the driver runs the graph's nodes
 * one by one. Only the driver that made an executable may be given it.
 *
 * Drivers (tpu_hal_drivers lists them; the conformance suite,
 * runtime/tests/test_hal_conformance.c, runs against each):
 *  - host (src/hal/host_driver.c): a software TPU computing on the host's
 *    cores. Its kernels (src/kernels/) and its compiler and executor
 *    (src/fusion/) are its private implementation; executable_prepare
 *    compiles with the fusion compiler (src/hal/host_compile.c, with the
 *    program cache and a per-queue memo of repeated recordings) and its
 *    executable is a fusion program.
 *  - null (src/hal/null_driver.c): chips whose device memory is host
 *    memory; copies, events and host functions work, running on the
 *    submitting thread; it runs no graphs (every EXEC records UNIMPLEMENTED
 *    on its queue) and has no executables: executable_prepare leaves the
 *    recording as it is and returns none. It keeps the interface honest: a
 *    driver with no compiler and no kernels.
 */
#ifndef TPU_HAL_H_
#define TPU_HAL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/ir.h"
#include "tpu/recording.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_hal_chip tpu_hal_chip_t;   /* driver-owned */
typedef struct tpu_hal_queue tpu_hal_queue_t; /* driver-owned */
typedef struct tpu_hal_event tpu_hal_event_t; /* owned by whoever created it */
/* A driver's compiled form of a graph: opaque, reference counted
 * (executable_retain/release), usable only with the driver that made it. */
typedef struct tpu_hal_executable tpu_hal_executable_t;

typedef enum tpu_hal_command_kind {
  TPU_HAL_CMD_EXEC = 0, /* run a graph's nodes in order */
  TPU_HAL_CMD_COPY,
  TPU_HAL_CMD_RECORD,   /* mark an event reached */
  TPU_HAL_CMD_WAIT,     /* block the queue until an event's record completes */
  TPU_HAL_CMD_HOST_FN,  /* call a host function */
  TPU_HAL_CMD_KIND_COUNT
} tpu_hal_command_kind_t;

/* Which side of a copy is device memory (the profiler names copies by it). */
typedef enum tpu_hal_copy_kind {
  TPU_HAL_COPY_H2D = 0, /* src a host pointer, dst a device address */
  TPU_HAL_COPY_D2H,     /* src a device address, dst a host pointer */
  TPU_HAL_COPY_D2D,
  TPU_HAL_COPY_KIND_COUNT
} tpu_hal_copy_kind_t;

/* How a queue has run its commands since it was created (see the host
 * driver's queue notes; a driver without a worker thread counts only
 * inline_commands and syncs). */
typedef struct tpu_hal_queue_stats {
  uint64_t inline_commands; /* run by the submitting thread */
  uint64_t queued_commands; /* handed to the queue's worker */
  uint64_t worker_wakeups;  /* hand-offs that had to wake a sleeping worker */
  uint64_t syncs;           /* queue_wait_idle calls */
  uint64_t sync_sleeps;     /* ... that slept (the work outlasted the poll) */
} tpu_hal_queue_stats_t;

/* What another process of this host needs to map a chip's shareable device
 * memory (memory_export / memory_import). */
typedef struct tpu_hal_memory_export {
  int32_t pid;       /* the owning process */
  int32_t handle;    /* driver-defined (host driver: a memfd in that process) */
  uint64_t base;     /* device address of the shareable range's start */
  uint64_t capacity; /* its size */
} tpu_hal_memory_export_t;

typedef struct tpu_hal_command {
  tpu_hal_command_kind_t kind;
  /* The submitter waits for this command as soon as it is queued (a host
   * read): a driver may run it on the submitting thread when nothing is
   * queued or running ahead of it, whatever its size. */
  bool host_waits;
  /* For the profiler (tpu/profiler.h): the stream index it was queued on
   * and the submitter's correlation id (set by tpu_stream_enqueue). */
  int16_t stream;
  uint64_t correlation;
  union {
    /* Both owned by the command (one reference each). graph: non-NULL;
     * executable: the driver's compiled form of it, or NULL to run its
     * nodes one by one. */
    struct { tpu_graph_t* graph; tpu_hal_executable_t* executable; } exec;
    /* dst and src non-zero unless bytes is 0; neither range may wrap. */
    struct { tpu_hal_copy_kind_t kind; uint64_t dst, src; size_t bytes; } copy;
    /* RECORD, WAIT: event owned (retained); seq from event_next_seq
     * (RECORD) or event_last_seq (WAIT), at least 1. */
    struct { tpu_hal_event_t* event; uint64_t seq; } event;
    /* fn: non-NULL, called with arg on the queue's timeline. name: static,
     * what the profiler calls it (NULL: "host_fn"); collective: it is a
     * collective (the profiler's own event kind). */
    struct { void (*fn)(void*); void* arg; const char* name; bool collective; } host;
  } u;
} tpu_hal_command_t;

/* INVALID_ARGUMENT naming what is wrong when the descriptor breaks the rules
 * above (unknown kind, NULL graph, event or function, a zero or wrapping
 * copy address, an unknown copy kind, seq 0), else TPU_OK. Borrows; every
 * driver's queue_submit calls it first. */
tpu_status_t tpu_hal_command_check(const tpu_hal_command_t* command);

/* What the runtime hands executable_prepare: a recording of the deferred
 * mode (tpu/defer.h) to compile. */
typedef struct tpu_hal_recording {
  /* The recorded nodes (non-NULL, the caller's). The driver may replace it
   * by a graph of the same nodes in another order, releasing this one: the
   * caller then submits (and releases) the graph it finds here. */
  tpu_graph_t* graph;
  /* Buffers freed while recording (free_count of them, the caller's); the
   * driver may rewrite their points to match its reordering. */
  tpu_free_record_t* frees;
  int32_t free_count;
  /* The recording's provisional blocks still alive (allocated while
   * recording, never counted by the allocator): live of them, borrowed. */
  const uint64_t* live_addr;
  const uint64_t* live_size;
  int32_t live;
  /* The driver may reuse what it made for an equal recording earlier on the
   * same queue, and keep this one for later (false: compile it afresh and
   * keep nothing, as a capture needs). */
  bool reuse;
} tpu_hal_recording_t;

/* What executable_prepare gives back. The counts feed tpu_defer_metrics_t;
 * a driver without a compiler leaves them 0 (kernels: one per node). */
typedef struct tpu_hal_prepared {
  tpu_hal_executable_t* executable; /* one reference, the caller's; NULL: run node by node */
  /* The most device memory running it holds on top of what the allocator
   * counted before it (outputs written to memory, the provisional blocks
   * and frees of the recording): the allocator raises its peak by this. */
  int64_t extra_bytes;
  uint64_t hash;   /* the executable's structure (0: none) */
  int32_t kernels; /* what it launches */
  bool cached;     /* taken from the driver's cache, not compiled */
  bool repeat;     /* the same as an earlier recording on this queue (reuse) */
  bool repeat_raw; /* ... found by the recording's raw addresses */
  int64_t fused_kernels, fused_nodes;     /* kernels running several nodes, and their nodes */
  int64_t gemm_epilogues, epilogue_nodes; /* GEMMs with an epilogue, and its nodes */
  int64_t elided_buffers, elided_bytes;   /* intermediates never written to memory */
} tpu_hal_prepared_t;

typedef struct tpu_hal_driver {
  const char* name;
  int (*chip_count)(void);
  /* index in [0, chip_count()), capacity > 0; otherwise INVALID_ARGUMENT. */
  tpu_status_t (*chip_open)(int index, uint64_t capacity, tpu_hal_chip_t** out_chip);
  void (*chip_close)(tpu_hal_chip_t* chip); /* NULL is ignored */

  /* Device memory: backs [*out_addr, *out_addr + bytes) inside the chip's
   * range (bytes > 0, else INVALID_ARGUMENT), or OUT_OF_MEMORY when no free
   * range holds it. Unmap returns what one map gave (same addr and bytes). */
  tpu_status_t (*memory_map)(tpu_hal_chip_t* chip, uint64_t bytes, uint64_t* out_addr);
  void (*memory_unmap)(tpu_hal_chip_t* chip, uint64_t addr, uint64_t bytes);
  bool (*owns_address)(const tpu_hal_chip_t* chip, uint64_t addr);

  /* Sharing device memory with other processes of the host (collectives read
   * their peers' buffers in place). Optional: NULL when the driver cannot.
   * memory_share: from now on memory_map backs new segments with memory that
   * other processes can map (idempotent). memory_is_shared: whether all of
   * [addr, addr + bytes) is such memory. memory_export: describes the chip's
   * shareable memory for another process, whose memory_import maps it
   * (readable and writable: a collective writes its results into the
   * peers' buffers) and returns the host address at which the exporter's `base`
   * appears (the exporter's own process gets its own addresses back);
   * memory_unimport undoes that. */
  tpu_status_t (*memory_share)(tpu_hal_chip_t* chip);
  bool (*memory_is_shared)(tpu_hal_chip_t* chip, uint64_t addr, uint64_t bytes);
  tpu_status_t (*memory_export)(tpu_hal_chip_t* chip, tpu_hal_memory_export_t* out);
  tpu_status_t (*memory_import)(const tpu_hal_memory_export_t* exp, const uint8_t** out_base);
  void (*memory_unimport)(const tpu_hal_memory_export_t* exp, const uint8_t* base);
  /* Optional (NULL: the driver keeps nothing derived from the contents of
   * device memory). memory_released: the runtime holds nothing in [addr,
   * addr + bytes) any more (a tensor's block died; the range stays mapped),
   * so the driver drops what it derived from those bytes (the host driver:
   * the matrix unit's blocked copies of weights). caches_trim: drop every
   * such copy (the runtime's empty_cache). */
  void (*memory_released)(tpu_hal_chip_t* chip, uint64_t addr, uint64_t bytes);
  void (*caches_trim)(tpu_hal_chip_t* chip);

  tpu_status_t (*queue_create)(tpu_hal_chip_t* chip, tpu_hal_queue_t** out_queue);
  /* Runs what is queued, then destroys the queue (NULL is ignored). */
  void (*queue_destroy)(tpu_hal_queue_t* queue);
  /* Takes ownership of what the command owns, also on failure. Returns
   * INVALID_ARGUMENT for a descriptor tpu_hal_command_check refuses, or a
   * WAIT for a record not yet reserved (it could never complete), and runs
   * nothing; an error while the command runs is the queue's (below). */
  tpu_status_t (*queue_submit)(tpu_hal_queue_t* queue, tpu_hal_command_t* command);
  /* Waits for the queue to drain; returns and clears its recorded error
   * (the first since the last call). */
  tpu_status_t (*queue_wait_idle)(tpu_hal_queue_t* queue);
  bool (*queue_is_idle)(tpu_hal_queue_t* queue);
  /* Returns and clears the queue's recorded error without waiting. */
  tpu_status_t (*queue_take_error)(tpu_hal_queue_t* queue);
  /* Adds the queue's counters since it was created to *out_stats. */
  void (*queue_add_stats)(tpu_hal_queue_t* queue, tpu_hal_queue_stats_t* out_stats);

  tpu_status_t (*event_create)(bool timing, tpu_hal_event_t** out_event);
  void (*event_retain)(tpu_hal_event_t* event);
  void (*event_release)(tpu_hal_event_t* event); /* NULL is ignored */
  /* Reserves the next record sequence number (the RECORD command carries it). */
  uint64_t (*event_next_seq)(tpu_hal_event_t* event);
  /* The last number reserved (0: never recorded). */
  uint64_t (*event_last_seq)(tpu_hal_event_t* event);
  /* Whether record `seq` has completed; event_wait blocks until it has. */
  bool (*event_reached)(tpu_hal_event_t* event, uint64_t seq);
  void (*event_wait)(tpu_hal_event_t* event, uint64_t seq);
  /* Timestamp (ns, CLOCK_MONOTONIC) at which the event's last reserved
   * record completed; -1 while it has not, when it was never recorded, or
   * when the event was created without timing. */
  int64_t (*event_time_ns)(tpu_hal_event_t* event);

  /* Executables. executable_prepare is required: it makes the driver's
   * executable for a recording to be run on `queue` (*out filled; on
   * failure out->executable is NULL and the recording's graph is still the
   * caller's to release). Calls for one queue must not overlap (the stream
   * makes them under its lock); they may overlap submissions to it and
   * calls for other queues. A driver without a compiler returns no
   * executable. retain/release are optional: NULL for a driver that never
   * returns an executable, which is then only ever given EXEC commands
   * without one. */
  tpu_status_t (*executable_prepare)(tpu_hal_queue_t* queue, tpu_hal_recording_t* recording,
                                     tpu_hal_prepared_t* out);
  /* Required: what executable_prepare would make of the recording, as text
   * for a person (tpu_stream_pending_text), into *out_text (malloc'd, the
   * caller's). Borrows the recording and changes nothing: no cache, no
   * memo, the graph and free records left as they are. */
  tpu_status_t (*recording_text)(const tpu_hal_recording_t* recording, char** out_text);
  /* Optional (NULL: never): whether executable_prepare now folds the
   * pointwise nodes that follow a node of a TPU_OP_EPILOGUE op into it, so
   * the stream keeps recording for a few nodes after such a node before it
   * cuts the recording there (tpu/defer.h's pipeline cut). */
  bool (*fuses_epilogues)(void);
  void (*executable_retain)(tpu_hal_executable_t* executable);
  void (*executable_release)(tpu_hal_executable_t* executable); /* NULL is ignored */
} tpu_hal_driver_t;

extern const tpu_hal_driver_t tpu_host_driver;
extern const tpu_hal_driver_t tpu_null_driver;

/* Every driver built in, the default (host) first; *out_count receives how
 * many. The table is static. */
const tpu_hal_driver_t* const* tpu_hal_drivers(int* out_count);

/* The driver the runtime uses: TORCH_TPU_DRIVER names one of
 * tpu_hal_drivers (default and unknown names: host). */
const tpu_hal_driver_t* tpu_hal_driver(void);

#ifdef __cplusplus
}
#endif
#endif /* TPU_HAL_H_ */
