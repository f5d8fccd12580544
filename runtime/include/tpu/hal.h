/* tpu/hal.h — the hardware abstraction layer: what a driver provides.
 *
 * A driver is a const table of function pointers (tpu_hal_driver_t). It owns
 * chips (device memory ranges), queues (in-order command streams executed
 * asynchronously) and events (completion markers on queues). Everything
 * above the HAL — the caching allocator, streams, the op registry, the
 * bridge — is written against this table only.
 *
 * Drivers: the host driver (src/hal/host_driver.c) is a software TPU that
 * computes on the host's cores; the null driver (src/hal/null_driver.c) has
 * no chips and exists so the interface keeps compiling without hardware.
 */
#ifndef TPU_HAL_H_
#define TPU_HAL_H_

#include <stdbool.h>
#include <stdint.h>

#include "tpu/ir.h"
#include "tpu/runtime.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_hal_chip tpu_hal_chip_t;   /* driver-owned */
typedef struct tpu_hal_queue tpu_hal_queue_t; /* driver-owned */
typedef struct tpu_hal_event tpu_hal_event_t; /* owned by whoever created it */

typedef enum tpu_hal_command_kind {
  TPU_HAL_CMD_EXEC = 0, /* run a graph's nodes in order */
  TPU_HAL_CMD_COPY,
  TPU_HAL_CMD_RECORD,   /* mark an event reached */
  TPU_HAL_CMD_WAIT,     /* block the queue until an event's record completes */
  TPU_HAL_CMD_HOST_FN,  /* call a host function */
} tpu_hal_command_kind_t;

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
    /* Owned by the command. program: how to run the graph (a fusion
     * program, retained), or NULL to run its nodes one by one. */
    struct { tpu_graph_t* graph; struct tpu_program* program; } exec;
    struct { tpu_copy_kind_t kind; uint64_t dst, src; size_t bytes; } copy;
    struct { tpu_hal_event_t* event; uint64_t seq; } event; /* RECORD, WAIT (retained) */
    /* name: static, what the profiler calls it (NULL: "host_fn");
     * collective: it is a collective (the profiler's own event kind). */
    struct { void (*fn)(void*); void* arg; const char* name; bool collective; } host;
  } u;
} tpu_hal_command_t;

typedef struct tpu_hal_driver {
  const char* name;
  int (*chip_count)(void);
  tpu_status_t (*chip_open)(int index, uint64_t capacity, tpu_hal_chip_t** out_chip);
  void (*chip_close)(tpu_hal_chip_t* chip);

  /* Device memory: backs [*out_addr, *out_addr + bytes) inside the chip's
   * range, or OUT_OF_MEMORY. Unmap returns it. */
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

  tpu_status_t (*queue_create)(tpu_hal_chip_t* chip, tpu_hal_queue_t** out_queue);
  void (*queue_destroy)(tpu_hal_queue_t* queue);
  /* Takes ownership of what the command owns, also on failure. */
  tpu_status_t (*queue_submit)(tpu_hal_queue_t* queue, tpu_hal_command_t* command);
  /* Waits for the queue to drain; returns and clears its recorded error. */
  tpu_status_t (*queue_wait_idle)(tpu_hal_queue_t* queue);
  bool (*queue_is_idle)(tpu_hal_queue_t* queue);
  /* Returns and clears the queue's recorded error without waiting. */
  tpu_status_t (*queue_take_error)(tpu_hal_queue_t* queue);
  /* Adds the queue's counters since it was created to *out_stats. */
  void (*queue_add_stats)(tpu_hal_queue_t* queue, tpu_queue_stats_t* out_stats);

  tpu_status_t (*event_create)(bool timing, tpu_hal_event_t** out_event);
  void (*event_retain)(tpu_hal_event_t* event);
  void (*event_release)(tpu_hal_event_t* event);
  /* Reserves the next record sequence number (the RECORD command carries it). */
  uint64_t (*event_next_seq)(tpu_hal_event_t* event);
  /* The last number reserved (0: never recorded). */
  uint64_t (*event_last_seq)(tpu_hal_event_t* event);
  /* Whether record `seq` has completed; event_wait blocks until it has. */
  bool (*event_reached)(tpu_hal_event_t* event, uint64_t seq);
  void (*event_wait)(tpu_hal_event_t* event, uint64_t seq);
  /* Timestamp (ns, CLOCK_MONOTONIC on the host driver) at which the event's
   * last reserved record completed; -1 while it has not, when it was never
   * recorded, or when the event was created without timing. */
  int64_t (*event_time_ns)(tpu_hal_event_t* event);
} tpu_hal_driver_t;

extern const tpu_hal_driver_t tpu_host_driver;
extern const tpu_hal_driver_t tpu_null_driver;

/* The driver in use (chosen by TORCH_TPU_DRIVER=host|null, default host). */
const tpu_hal_driver_t* tpu_hal_driver(void);

#ifdef __cplusplus
}
#endif
#endif /* TPU_HAL_H_ */
