/* fusion.h — the fusion compiler (internal): from a recorded graph to a
 * program the host driver runs.
 *
 * This is the host driver's compiler and executor, not part of the HAL: a
 * program is the host driver's executable, made by its executable_prepare
 * (hal/host_compile.c) from a recording the runtime hands it, and only the
 * host driver's queues run one (tpu_program_run). Nothing above the HAL
 * calls it: the GEMM-epilogue switch is tpu/defer.h's
 * tpu_defer_set_gemm_epilogues (implemented in hal/host_compile.c), and the
 * deferred mode's epilogue window asks the driver (fuses_epilogues).
 *
 * Passes, each a named phase followed by the verifier (fusion_verify):
 *   0. schedule  (schedule.c) the order the nodes run in: a pointwise
 *                consumer moves up to just after its producer when no node
 *                it passes touches its memory in a conflicting way, so the
 *                per-tensor chains of a foreach step become adjacent.
 *   1. analyse   per node: which earlier view each input reads (identical
 *                views get one id), the nearest earlier node it conflicts
 *                with (views that overlap without being identical), whether
 *                each output is dead (its buffer was freed before the flush).
 *                The result is the program's structural key; sizes, addresses
 *                and scalar values are not part of it.
 *   2. partition contiguous groups: runs of pointwise nodes (TPU_OP_POINTWISE)
 *                over one iteration shape with no conflict inside the run
 *                (tiled by elements), and runs of row-local ops (an op
 *                row's `rows` function: reductions over trailing dims,
 *                softmax, layer/rms norm, nll_loss_backward) with pointwise
 *                nodes over the same leading dims, in which every value the
 *                run writes and reads is read a row at a time (tiled by
 *                rows): residual add + LayerNorm, RMSNorm's
 *                pow/mean/rsqrt/mul, softmax epilogues, cross-entropy's
 *                backward; and GEMM groups: a GEMM (a TPU_OP_EPILOGUE
 *                row: mm, addmm, bmm, baddbmm) with the pointwise nodes
 *                after it over its result's elements (bias, activation,
 *                residual add, scaling), which run as its epilogue on each
 *                block of C the GEMM finishes (epilogue.c).
 *   3. scratch   a dead output of a fused group whose every reader is in
 *                the group and reads the identical view lives in a tile
 *                scratch slot: it is never written to device memory.
 * A program depends only on the key, so the program cache (compile.c, below
 * tpu_fusion_compile) maps keys to programs; the interpreter (exec.c) binds a program to a graph's views and
 * runs each group tile by tile, the tile's intermediates staying in cache.
 *
 * Ownership: programs are reference counted (tpu_program_retain/release);
 * the cache holds one reference, each queued command another.
 */
#ifndef TPU_FUSION_H_
#define TPU_FUSION_H_

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>

#include "kernel.h"
#include "tpu/ir.h"
#include "tpu/recording.h"
#include "tpu/status.h"

/* The freed-buffer records the passes read are tpu_free_record_t (tpu/recording.h). */

/* Group kinds: one node run as strict eager runs it; a pointwise run over
 * one shape, cut into tiles of elements; a run of row-local and pointwise
 * nodes over the same leading `rows` dims, cut into blocks of rows; a GEMM
 * and its epilogue, pointwise nodes over C's elements run on each block of
 * C the GEMM finishes. */
enum { TPU_GROUP_SINGLE = 0, TPU_GROUP_TILED = 1, TPU_GROUP_ROWS = 2, TPU_GROUP_GEMM = 3 };

/* Whether GEMM groups are formed (tpu_defer_set_gemm_epilogues; the
 * environment's TORCH_TPU_GEMM_EPILOGUE=0 turns them off at start). */
bool tpu_fusion_epilogues_enabled(void);
void tpu_fusion_set_epilogues(bool on);

typedef struct tpu_program_group {
  int32_t first, count; /* nodes [first, first + count) */
  int32_t kind;
  int32_t slots;        /* scratch slots a tile needs */
  int32_t rows;         /* TPU_GROUP_ROWS: the leading dims that are rows */
} tpu_program_group_t;

typedef struct tpu_program {
  int32_t refs; /* atomic */
  int32_t node_count;
  int32_t group_count;
  tpu_program_group_t* groups;
  /* Per node, per output: scratch slot or -1 (indexed by out_base[node]+k). */
  int32_t* out_slot;
  /* Per node, per input: scratch slot it reads, or -1 (in_base[node]+k). */
  int32_t* in_slot;
  int32_t* out_base;
  int32_t* in_base;
  int64_t elided_per_run; /* outputs kept in scratch */
  uint64_t hash;
} tpu_program_t;

void tpu_program_retain(tpu_program_t* program);
void tpu_program_release(tpu_program_t* program);

/* Phase 0. When it moves any node, *out_graph is the reordered graph (the
 * caller owns it), out_order (when not NULL: room for one entry per node)
 * receives the recorded index of each node in its new place, and the free
 * records' points are rewritten for it in place; otherwise *out_graph is
 * NULL and nothing changes. */
tpu_status_t tpu_fusion_schedule(const tpu_graph_t* graph, tpu_free_record_t* frees,
                                 int32_t free_count, tpu_graph_t** out_graph,
                                 int32_t* out_order);

/* Analysis of one graph: the structural key and what the passes read. */
typedef struct tpu_fusion_analysis tpu_fusion_analysis_t;

/* Phase 1. The caller owns *out_analysis (tpu_fusion_analysis_free). */
tpu_status_t tpu_fusion_analyse(const tpu_graph_t* graph, const tpu_free_record_t* frees,
                                int32_t free_count, tpu_fusion_analysis_t** out_analysis);
void tpu_fusion_analysis_free(tpu_fusion_analysis_t* analysis);
uint64_t tpu_fusion_analysis_hash(const tpu_fusion_analysis_t* analysis);
/* The key's bytes (borrowed). */
const uint8_t* tpu_fusion_analysis_key(const tpu_fusion_analysis_t* analysis, int64_t* out_len);

/* Phases 2 and 3 with the verifier; the caller owns *out_program. */
tpu_status_t tpu_fusion_compile(const tpu_graph_t* graph, const tpu_fusion_analysis_t* analysis,
                                tpu_program_t** out_program);
/* Checks a program's invariants against a graph (groups cover the nodes in
 * order, tiled groups are pointwise over one shape, row-tiled groups are
 * row-local over their rows and read what they wrote by rows, scratch reads
 * are of identical views written earlier in the same group). Between phases
 * 2 and 3 pass the analysis: an overlap with a value dead before the reader
 * is then accepted (phase 3 must keep it in scratch); with NULL it must be
 * in scratch. */
tpu_status_t tpu_fusion_verify(const tpu_graph_t* graph, const tpu_program_t* program,
                               const tpu_fusion_analysis_t* analysis);
/* The first error of a fused group's run, by node, then tile, row or block,
 * so the error reported does not depend on how the work was spread over
 * threads (exec.c's tiled and row groups, epilogue.c's GEMM groups). */
typedef struct tpu_group_error {
  pthread_mutex_t mu; /* guards the rest */
  tpu_status_t error; /* owned; TPU_OK: none yet */
  int32_t node;       /* its node; -1 a failure outside the nodes (scratch) */
  int64_t at;         /* its tile, row or block */
} tpu_group_error_t;

void tpu_group_error_init(tpu_group_error_t* e);
/* Keeps s (taking it) if it comes before the error kept, else frees it. */
void tpu_group_error_note(tpu_group_error_t* e, int32_t node, int64_t at, tpu_status_t s);
/* Ends e; returns the error kept (the caller owns it). */
tpu_status_t tpu_group_error_finish(tpu_group_error_t* e);

/* Runs a GEMM group (epilogue.c): the GEMM with its epilogue nodes on each
 * block of C; returns the group's first error (by node, then block). */
tpu_status_t tpu_fusion_run_gemm_group(const tpu_program_t* program,
                                       const tpu_program_group_t* group,
                                       const tpu_graph_t* graph, tpu_exec_ctx_t* ctx);
/* Writes the program, its kernels and their nodes as text to f (borrowed). */
void tpu_fusion_format(FILE* f, const tpu_graph_t* graph, const tpu_program_t* program);
/* Prints the program to stderr (TORCH_TPU_DEFER_LOG=2). */
void tpu_fusion_dump(const tpu_graph_t* graph, const tpu_program_t* program);

/* Program cache: returns a retained program for the analysis, compiling on a
 * miss; *out_hit tells which. Every call is a request of the cache's
 * statistics (tpu_program_cache_get_stats), a hit a read of its entry; a
 * miss times the compile. */
tpu_status_t tpu_program_cache_get(const tpu_graph_t* graph,
                                   const tpu_fusion_analysis_t* analysis,
                                   tpu_program_t** out_program, bool* out_hit);
/* Counts a reuse of `program` (borrowed; from an earlier
 * tpu_program_cache_get) that skipped the lookup, e.g. a stream's memo of
 * its last program: a request, a hit, and a read of its entry if the cache
 * still holds it. */
void tpu_program_cache_note_read(tpu_program_t* program);
/* Advanced by each tpu_program_cache_clear: a program reused without a
 * lookup (a flush memo's) must come from the current generation. */
uint64_t tpu_program_cache_generation(void);

/* The interpreter: runs the graph as the program says (host driver); a NULL
 * program runs the graph node by node, as strict eager queues it. Errors
 * follow strict eager's contract: a failing node records its error and
 * every later node (later groups, and the rest of a fused group on every
 * tile) still runs; the first error is returned. */
tpu_status_t tpu_program_run(const tpu_program_t* program, const tpu_graph_t* graph,
                             tpu_exec_ctx_t* ctx);

/* Per-node kernel plans (node_plans.c) that a flush memo entry keeps for
 * its recording and attaches to each repeat's graph (ir/attach.h), so
 * tpu_program_run skips the kernels' planning: for now the elementwise
 * plans (tpu_ew_plan) and row-local nodes' row inputs, which hold no
 * address and depend on nothing a memo hit may change. Counted by
 * references, read-only once made. */
typedef struct tpu_node_plans tpu_node_plans_t;
/* The plans of the graph's nodes, in its order; NULL when no node has one
 * (or out of memory: the kernels then plan as before). The caller owns
 * the reference. */
tpu_node_plans_t* tpu_node_plans_make(const tpu_graph_t* graph);
tpu_node_plans_t* tpu_node_plans_retain(tpu_node_plans_t* plans);
void tpu_node_plans_release(tpu_node_plans_t* plans); /* NULL is fine */
/* Attaches a reference of `plans` (NULL: nothing) to the graph. */
void tpu_node_plans_attach(tpu_graph_t* graph, tpu_node_plans_t* plans);
/* The plans attached to the graph (borrowed), or NULL. */
const tpu_node_plans_t* tpu_node_plans_of(const tpu_graph_t* graph);
/* Node i's elementwise plan, or NULL (none kept: the kernel plans). */
struct tpu_ew_plan;
const struct tpu_ew_plan* tpu_node_plans_ew(const tpu_node_plans_t* plans, int32_t node);
/* Node i's row inputs (what its row's `rows` function puts in
 * *out_mask) when kept: true; false, *out_mask untouched, when not. */
bool tpu_node_plans_rows(const tpu_node_plans_t* plans, int32_t node, uint32_t* out_mask);
/* How many nodes have something kept. */
int32_t tpu_node_plans_planned(const tpu_node_plans_t* plans);
/* The first node of `graph` whose plan made now differs from the one kept
 * in `plans` (or one that has a plan in only one of them), -1 when none:
 * the flush memo's check (TORCH_TPU_DEFER_MEMO_CHECK). */
int32_t tpu_node_plans_check(const tpu_node_plans_t* plans, const tpu_graph_t* graph);

/* How tpu_program_run has run tiled and row groups since the process
 * started (every thread, every chip): on the direct path (exec.c's top) or
 * node by node. A group whose nodes the direct path cannot take (an op
 * without a float32 tile function, a strided operand) counts as node by
 * node, so a test can tell which path a program took. */
typedef struct tpu_fusion_path_counts {
  int64_t direct_tiled; /* tiled groups run block by block */
  int64_t direct_rows;  /* row groups run row by row */
  int64_t node_by_node; /* tiled and row groups run node by node over tiles */
  int64_t streamed;     /* of the direct ones: outputs written with streaming stores */
} tpu_fusion_path_counts_t;

void tpu_fusion_get_path_counts(tpu_fusion_path_counts_t* out_counts);

/* The bytes of memory operands above which a direct group writes its
 * outputs with streaming (non-temporal) stores: the level-3 cache's size
 * unless set here (tests: 0 streams every direct group; < 0 restores the
 * default). */
void tpu_fusion_set_stream_min_bytes(int64_t bytes);

#endif /* TPU_FUSION_H_ */
