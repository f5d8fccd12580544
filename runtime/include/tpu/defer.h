/* tpu/defer.h — deferred execution (DeferAndFuse): record ops, flush fused.
 *
 * In deferred mode a submitted graph is not queued: its nodes are appended
 * to the stream's pending graph. The pending graph is flushed — compiled by
 * the driver (tpu/hal.h executable_prepare; the host driver's compiler is
 * the fusion compiler, src/fusion/) and queued as one command — when a value
 * must exist or order must be kept:
 *   - any other work on the stream: copies (host reads such as .item(),
 *     .cpu(), printing, and host writes), host functions, event records and
 *     waits, collectives, a strict-mode submission from another thread;
 *   - synchronisation and queries (stream, chip, event);
 *   - the pending graph reaching its node limit (tpu_defer_set_max_nodes);
 *   - a pipeline cut just after a heavy node (TPU_OP_HEAVY: GEMM,
 *     convolution, attention) once the heavy nodes since the last cut
 *     touched 256 Ki elements, so they run while the program records on;
 *     after a GEMM that takes an epilogue the cut waits for up to 16
 *     pointwise nodes to fold into it (tpu/ops.h); TORCH_TPU_DEFER_PIPELINE=0
 *     turns these cuts off;
 *   - leaving deferred mode (the bridge flushes every stream,
 *     tpu_defer_flush_all);
 *   - an explicit tpu_stream_flush (the bridge flushes before a CPU
 *     fallback, naming the op).
 * Every trigger is a call in the program's op sequence (and its shapes),
 * never a timer or a queue state, so identical programs cut identically
 * (on every rank).
 *
 * Device memory allocated while deferring is provisional: it enters the
 * allocator's statistics when the graph that writes it is flushed (or when
 * the statistics are read), and a buffer freed before that whose value the
 * fused program keeps in tile scratch is never counted and never written
 * (an elided intermediate).
 *
 * Fused programs are cached by structure (ops, dtypes, ranks, aliasing,
 * which intermediates are dead), never by sizes or scalar values, so a
 * decode loop whose shapes grow reuses its programs; past 3,072 programs the
 * least recently read one is evicted (tpu/program_cache.h counts evictions).
 * Metrics count flushes by
 * reason, compiles and cache hits; TORCH_TPU_DEFER_LOG=1 prints one line per
 * flush to stderr, =2 also dumps each compiled program.
 *
 * Modes are global (tpu_defer_set_global) or per thread
 * (tpu_defer_set_thread, which wins while set). TORCH_TPU_DEFER_AND_FUSE=1
 * makes deferred mode the initial global mode.
 */
#ifndef TPU_DEFER_H_
#define TPU_DEFER_H_

#include <stdbool.h>
#include <stdint.h>

#include "tpu/runtime.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Why a pending graph was flushed. */
#define TPU_FLUSH_REASONS(X)                                       \
  X(EXPLICIT, "explicit")       /* tpu_stream_flush / torch_tpu.flush() */ \
  X(FALLBACK, "fallback")       /* a CPU fallback reads device values */  \
  X(COPY_TO_HOST, "copy_to_host") /* .item(), .cpu(), printing */        \
  X(COPY, "copy")               /* host-to-device or device-to-device */ \
  X(SYNCHRONIZE, "synchronize") /* stream/chip synchronize, query */     \
  X(EVENT, "event")             /* event record or wait */               \
  X(HOST_FN, "host_fn")         /* a host function (collectives, ...) */  \
  X(STRICT_SUBMIT, "strict_submit") /* a strict-mode op on the stream */  \
  X(SIZE_LIMIT, "size_limit")   /* the pending graph reached its limit */ \
  X(PIPELINE, "pipeline")       /* after heavy nodes (TPU_OP_HEAVY) */   \
  X(MODE_SWITCH, "mode_switch") /* the thread left deferred mode */

typedef enum tpu_flush_reason {
#define TPU_FLUSH_ENUM(e, s) TPU_FLUSH_##e,
  TPU_FLUSH_REASONS(TPU_FLUSH_ENUM)
#undef TPU_FLUSH_ENUM
  TPU_FLUSH_REASON_COUNT
} tpu_flush_reason_t;

const char* tpu_flush_reason_name(tpu_flush_reason_t reason);

/* ---- mode ------------------------------------------------------------------- */
void tpu_defer_set_global(bool on);
/* mode: 1 defer, 0 strict, -1 follow the global mode. */
void tpu_defer_set_thread(int mode);
/* Whether submissions from this thread are deferred now. */
bool tpu_defer_active(void);
/* Node limit of a pending graph (default 1024; TORCH_TPU_DEFER_MAX_NODES). */
void tpu_defer_set_max_nodes(int32_t max_nodes);
/* Whether the host driver's fusion compiler folds the pointwise consumers
 * of a GEMM into it (GEMM epilogues; default on, TORCH_TPU_GEMM_EPILOGUE=0
 * turns them off). Programs compiled either way are cached apart. Other
 * drivers ignore it. */
void tpu_defer_set_gemm_epilogues(bool on);
bool tpu_defer_gemm_epilogues(void);

/* ---- flushing --------------------------------------------------------------- */
/* Compiles and queues the stream's pending graph, if any. `detail` (may be
 * NULL; copied) names the cause in the log, e.g. the fallback's op. */
tpu_status_t tpu_stream_flush(tpu_stream_t* stream, tpu_flush_reason_t reason,
                              const char* detail);
/* Flushes every stream of every chip. */
tpu_status_t tpu_defer_flush_all(tpu_flush_reason_t reason, const char* detail);

/* ---- metrics ---------------------------------------------------------------- */
typedef struct tpu_defer_metrics {
  int64_t nodes_recorded;    /* nodes appended to pending graphs */
  int64_t flushes;           /* pending graphs flushed */
  int64_t flushes_by_reason[TPU_FLUSH_REASON_COUNT];
  int64_t programs_compiled; /* cache misses: the fusion passes ran */
  int64_t cache_hits;        /* flushes that reused a cached program */
  int64_t flush_repeats;     /* of those: the stream's last recording again, so the
                                compiler's front end did not run (flush_memo.c) */
  int64_t flush_repeats_raw; /* of those: the very words (addresses as they are) of a
                                recording seen before, not made canonical */
  int64_t fused_kernels;     /* groups of >= 2 nodes run tile by tile */
  int64_t fused_nodes;       /* nodes inside those groups */
  int64_t elided_buffers;    /* intermediates never written to memory */
  int64_t elided_bytes;
  int64_t gemm_epilogues;    /* of the fused kernels: GEMMs run with an epilogue */
  int64_t epilogue_nodes;    /* pointwise nodes run inside those GEMMs */
} tpu_defer_metrics_t;

void tpu_defer_get_metrics(tpu_defer_metrics_t* out_metrics);
void tpu_defer_reset_metrics(void);

/* The last flushes, oldest first (a ring of TPU_DEFER_CUT_LOG entries):
 * what was cut where. Two runs of the same program give the same records. */
#define TPU_DEFER_CUT_LOG 256
typedef struct tpu_defer_cut {
  tpu_flush_reason_t reason;
  int32_t nodes;       /* nodes in the flushed graph */
  int32_t groups;      /* kernels the program runs */
  uint64_t structure;  /* hash of the program's structural key */
} tpu_defer_cut_t;

/* Copies up to `capacity` records into out_cuts; returns how many. */
int32_t tpu_defer_get_cuts(tpu_defer_cut_t* out_cuts, int32_t capacity);

#ifdef __cplusplus
}
#endif
#endif /* TPU_DEFER_H_ */
