/* tpu/capture.h — capture a deferred region once, replay it without its host.
 *
 * A compiled graph's code records the same nodes on every call; only the
 * addresses of its inputs and of the memory it allocates change. A capture
 * watches one region of deferred work on a stream (what a compiled graph's
 * call records) and keeps, in order:
 *   - each device allocation made on the stream (its size),
 *   - each recorded node, with every operand address rewritten as
 *     (input i or allocation k, byte offset),
 *   - each free of an allocation made inside the region.
 * Replaying it allocates fresh blocks where the region allocated, records the
 * same nodes (relocated to the new inputs and blocks) into the stream's
 * pending graph and frees where the region freed: the fusion compiler, the
 * program cache, the flush points and the memory statistics see exactly what
 * the region produced, without the framework that produced it. The blocks
 * the region left allocated (its results) are handed to the caller.
 *
 * Nodes that draw random numbers are marked as they are recorded
 * (tpu_capture_mark_random); a replay gives them fresh Philox counters.
 *
 * A region is capturable only if nothing but recording and allocation
 * happened on the stream: a flush other than the pipeline and size-limit cuts
 * (a host read, a copy, an event, a CPU fallback's flush), a strict-mode
 * submission, or an operand outside the inputs and the region's own
 * allocations makes tpu_capture_end give no capture and a reason. The caller
 * checks what the runtime cannot see (random numbers drawn, CPU fallbacks,
 * inputs that must not be baked in) and replays only for inputs laid out as
 * at capture, none aliasing another.
 *
 * Threading: one capture per stream at a time; the region's work must come
 * from the capturing thread (other threads' allocations on the stream would
 * be captured too, which the caller's check of the results then rejects).
 */
#ifndef TPU_CAPTURE_H_
#define TPU_CAPTURE_H_

#include <stdint.h>

#include "tpu/runtime.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_capture tpu_capture_t;

/* Starts capturing on `stream`. Inputs are the byte ranges [addr, addr +
 * bytes) the region may read or write besides its own allocations (copied).
 * INVALID_ARGUMENT if the stream is already capturing. */
tpu_status_t tpu_capture_begin(tpu_stream_t* stream, const uint64_t* input_addr,
                               const uint64_t* input_bytes, int32_t num_inputs);

/* Ends the stream's capture. On success *out_capture is the caller's (release
 * with tpu_capture_release), or NULL when the region cannot be replayed, with
 * *out_reason a static description. Never fails the region's work itself. */
tpu_status_t tpu_capture_end(tpu_stream_t* stream, tpu_capture_t** out_capture,
                             const char** out_reason);

void tpu_capture_release(tpu_capture_t* capture);

/* The region's results: the blocks allocated in it and still allocated at its
 * end, in allocation order. */
int32_t tpu_capture_live_count(const tpu_capture_t* capture);
/* The bytes asked for by live block i. */
uint64_t tpu_capture_live_bytes(const tpu_capture_t* capture, int32_t i);
/* Which live block `block` was during the capture, or -1. Only meaningful
 * right after tpu_capture_end, while the region's blocks are still held
 * (the capture compares pointers it does not own). */
int32_t tpu_capture_live_index(const tpu_capture_t* capture, const tpu_block_t* block);
/* Nodes the region recorded. */
int32_t tpu_capture_node_count(const tpu_capture_t* capture);

/* Random numbers: the next graph recorded on `stream` draws them, its last
 * node holding the Philox seed and offset in attrs seed_attr and offset_attr
 * (a no-op when the stream does not capture). A replay gives each such node
 * fresh counters, in the order recorded. */
tpu_status_t tpu_capture_mark_random(tpu_stream_t* stream, int32_t seed_attr,
                                     int32_t offset_attr);
/* How many recorded graphs draw random numbers (the counters a replay needs). */
int32_t tpu_capture_random_count(const tpu_capture_t* capture);

/* Replays the region on `stream` (in deferred mode: the nodes join the
 * stream's pending graph) with input i at input_addr[i] and the k-th node
 * that draws random numbers given Philox counters (seed[k], offset[k])
 * (tpu_capture_random_count of each; NULL when none). out_live receives
 * tpu_capture_live_count blocks, the caller's to free (tpu_block_free). On
 * an error (out of memory) every block the replay allocated is freed. */
tpu_status_t tpu_capture_replay(const tpu_capture_t* capture, tpu_stream_t* stream,
                                const uint64_t* input_addr, const uint64_t* seed,
                                const uint64_t* offset, tpu_block_t** out_live);

#ifdef __cplusplus
}
#endif
#endif /* TPU_CAPTURE_H_ */
