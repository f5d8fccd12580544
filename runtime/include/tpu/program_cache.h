/* tpu/program_cache.h — the deferred mode's program cache and pending
 * graphs, seen from outside: cache statistics, clearing, and the text of
 * what a stream's pending graph would run (see tpu/defer.h for the mode).
 *
 * Ownership: statistics are copied into caller-owned structs; the pending
 * graph's text is a malloc'd string the caller frees. */
#ifndef TPU_PROGRAM_CACHE_H_
#define TPU_PROGRAM_CACHE_H_

#include <stdint.h>

#include "tpu/runtime.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- program cache ------------------------------------------------------------ */
/* The fusion compiler's program cache (src/fusion/compile.c): every flush
 * asks it for the program of its graph's structure. When full, a compiled
 * program evicts the entry with the oldest last_read_ns. Totals count from the
 * process start; tpu_program_cache_clear does not reset them. */
typedef struct tpu_program_cache_stats {
  int64_t requests;   /* programs asked for (flushes, and reuses noted by defer.c) */
  int64_t hits;       /* of them, served without compiling */
  int64_t compiles;   /* fusion compiles run (the misses) */
  int64_t uncached;   /* compiled programs not kept: copying their key failed */
  int64_t evictions;  /* programs dropped to make room: the cache holds at most
                         3,072; a new one evicts the least recently read */
  int64_t entries;    /* programs held now */
  int64_t host_bytes; /* host memory the held programs and their keys take */
} tpu_program_cache_stats_t;

typedef struct tpu_program_cache_entry {
  uint64_t structure;   /* hash of the structural key (tpu_defer_cut_t's) */
  int32_t nodes;        /* nodes of the graph it runs */
  int32_t kernels;      /* kernels (fused groups and single nodes) */
  int64_t read_count;   /* times served from the cache after its compile */
  int64_t compile_ns;   /* wall time of the compile that made it */
  int64_t last_read_ns; /* CLOCK_REALTIME (ns since the epoch) of its last use;
                           the compile is its first */
} tpu_program_cache_entry_t;

/* Copies the totals into *out_stats and up to `capacity` entries into
 * out_entries (caller-owned, may be NULL when capacity is 0); *out_count is
 * the number copied (out_stats->entries says how many there are).
 * INVALID_ARGUMENT for a NULL out-param or a negative capacity. */
tpu_status_t tpu_program_cache_get_stats(int32_t capacity, tpu_program_cache_stats_t* out_stats,
                                         tpu_program_cache_entry_t* out_entries,
                                         int32_t* out_count);
/* Drops every cached program: the next flush of each structure compiles
 * again. Programs that queued work still runs keep their own references. */
tpu_status_t tpu_program_cache_clear(void);

/* The program the stream's pending graph would run if flushed now, as text
 * (the TORCH_TPU_DEFER_LOG=2 dump: kernels, nodes, views, scratch slots),
 * compiled by the same passes as a flush but without flushing, running or
 * touching the cache. "" when nothing is pending. *out_text is the
 * caller's: release it with free(). */
tpu_status_t tpu_stream_pending_text(tpu_stream_t* stream, char** out_text);

#ifdef __cplusplus
}
#endif
#endif /* TPU_PROGRAM_CACHE_H_ */
