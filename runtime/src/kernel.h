/* kernel.h — what a kernel on the host driver may use (internal header).
 *
 * Kernels are the host driver's implementation (tpu/hal.h): only the host
 * driver's queues run them, through its executor (fusion/exec.c). The op
 * table's rows name them, so the table can be checked without a driver, but
 * nothing above the HAL runs a kernel. One service is reached from above:
 * the compute pool's size (runtime.c; the pool is base/pool.c's). The
 * weight cache is reached only through the host driver's memory_released
 * and caches_trim (tpu/hal.h).
 *
 * A kernel is a tpu_kernel_fn (tpu/ops.h): it reads its node's inputs and
 * attrs and writes its outputs through tpu_view_ptr(). It runs on a stream's
 * worker thread and may split work over the shared compute pool with
 * tpu_parallel_for. It returns a status; it never aborts. Messages need not
 * name the op: the executor prefixes it.
 */
#ifndef TPU_KERNEL_H_
#define TPU_KERNEL_H_

#include <stddef.h>
#include <stdint.h>

#include "tpu/ir.h"
#include "tpu/ops.h"
#include "tpu/status.h"

/* Execution context handed to kernels. */
struct tpu_exec_ctx {
  int chip_index;
  /* The graph the node runs in (borrowed), or NULL when unknown: caches of
   * operands (the weight cache) are used only for what it does not write. */
  const tpu_graph_t* graph;
  /* The profiler (tpu/profiler.h): whether to record this command's
   * kernels, the stream it runs on and its correlation id. */
  bool profile;
  int stream_index;
  uint64_t correlation;
};

/* Host scratch for a kernel's temporaries (scratch.c): as malloc/free, the
 * pointer 64-byte aligned, but blocks of 256 KiB and more come from a
 * bounded cache of freed ones, so large per-call temporaries are not
 * page-faulted in again on every call. Thread-safe; the caller owns the
 * block until tpu_scratch_free (NULL: nothing). NULL when out of memory. */
void* tpu_scratch_alloc(size_t bytes);
void tpu_scratch_free(void* p);
typedef struct tpu_scratch_stats {
  int64_t hits, misses; /* cached-size requests served from the cache, or not */
  int64_t evictions;    /* blocks freed into a full cache, returned to the system */
  int64_t held_bytes;   /* what the cache holds now */
} tpu_scratch_stats_t;
void tpu_scratch_get_stats(tpu_scratch_stats_t* out_stats);

/* What may have written device bytes, for the matrix unit's weight cache
 * (kernels/matmul/mxu_pack.h), which drops the copies of what was written. The
 * host driver reports every command when it ends: [lo, hi), every output
 * view of a graph's nodes, or anything (after a host function); the
 * allocator reports frees. Cheap while the cache is empty. */
void tpu_weight_cache_note_write(uint64_t lo, uint64_t hi);
void tpu_weight_cache_note_graph(const tpu_graph_t* graph);
void tpu_weight_cache_note_write_all(void);
/* True when a node of `graph` writes bytes `view` covers. */
bool tpu_weight_cache_graph_writes(const tpu_graph_t* graph, const tpu_view_t* view);

/* Calls fn(arg, begin, end) over [0, n) in chunks of at least `grain`
 * elements, on the compute pool (the calling thread takes part). Nested or
 * concurrent calls run serially in the caller rather than oversubscribing. */
void tpu_parallel_for(int64_t n, int64_t grain, void (*fn)(void* arg, int64_t begin, int64_t end),
                      void* arg);
int tpu_parallel_threads(void);
/* Pins the calling thread to the core of the pool's share 0 when the pool
 * pins its workers (TORCH_TPU_PIN_THREADS, pool.c); else does nothing. For
 * the thread that runs one chip's kernels (the host driver's chip-0 queue
 * worker). */
void tpu_parallel_pin_caller(void);
/* Schedules the calling thread, one of the device's own (a pool worker, a
 * queue worker), as SCHED_BATCH unless TORCH_TPU_DEVICE_SCHED=normal, and
 * counts it in tpu_pool_stats. Linux then never lets waking it preempt the
 * running thread: the host thread that queues a kernel, or publishes a
 * job, keeps its core and goes on issuing (as with a real accelerator,
 * whose work never takes the host's core), instead of losing it to the
 * thread it woke until that one blocks (measured, one process alternating:
 * generate() of GPT-2 2L h128 on strict eager 9% more tokens/s, the demo
 * step 3-6% faster; kernel-bound rows within noise). The threads still
 * get their fair share of the cores. */
void tpu_parallel_device_thread(void);

/* Calls fn(arg, threads) on the calling thread with the pool's cores claimed
 * for a library that brings its own threads (the matrix unit's OpenMP team):
 * threads is the pool's size, or 1 when the pool is busy (another stream's
 * kernel, or a nested call). */
void tpu_parallel_exclusive(void (*fn)(void* arg, int threads), void* arg);

/* Reads an input value as a view: a scalar becomes a 0-dim view of
 * `*storage` (8 bytes, converted to `dtype` when dtype != INVALID, else kept
 * in the scalar's own dtype). */
void tpu_value_to_view(const tpu_value_t* value, tpu_dtype_t dtype, uint64_t* storage,
                       tpu_view_t* out_view);

/* Runs one node on the host driver: its kernel (on real views for a complex
 * node of a TPU_OP_COMPLEX_AS_REAL row), the error annotated with the op and
 * chip. The queue and the fusion interpreter both run nodes through it. */
tpu_status_t tpu_node_execute(const tpu_node_t* node, tpu_exec_ctx_t* ctx);
/* Whether tpu_node_execute hands the node to its row's kernel as it is:
 * true when no operand, output or dtype attr is complex or a wide unsigned
 * dtype (those a row flag may rewrite first). */
bool tpu_node_runs_as_is(const tpu_node_t* node);

/* Records (profiler.c, when ctx->profile) one device event for nodes
 * [first, first + count) of `graph`, run from start_ns to end_ns: an op's
 * own kernel (count 1, !fused) or one fused kernel of a program's group. */
void tpu_prof_record_nodes(const tpu_exec_ctx_t* ctx, const tpu_graph_t* graph, int32_t first,
                           int32_t count, bool fused, int64_t start_ns, int64_t end_ns);

/* Reports an error with a printf message (convenience for kernels). */
#define TPU_KERNEL_FAIL(code, ...) return tpu_status_make((code), __VA_ARGS__)

#endif /* TPU_KERNEL_H_ */
