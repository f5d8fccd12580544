/* host_compile.c — the host driver's executable_prepare (tpu/hal.h): a
 * recording through the fusion compiler's front end (phase 0 schedule,
 * phase 1 analysis, the program cache: fusion.h), or, when the queue's memo
 * holds an equal recording, what it gave then (flush_memo.c); and the memory
 * estimate the allocator's peak takes (peak_extra). The program is the
 * executable: host_driver.c runs it on the queue (tpu_program_run). Also
 * recording_text: the program a recording would compile to, as text. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/extent.h"
#include "fusion/fusion.h"
#include "hal/flush_memo.h"
#include "hal/host_driver.h"
#include "tpu/config.h"
#include "tpu/defer.h"
#include "tpu/program_cache.h"

/* Phase 0 of the fusion compiler: on unless TORCH_TPU_DEFER_SCHEDULE=0. */
static bool schedule(void) { return tpu_config_bool(TPU_CONFIG_DEFER_SCHEDULE); }

/* Memo hits checked against the full front end: TORCH_TPU_DEFER_MEMO_CHECK set
 * and not "0" (the test command's DEFER_AND_FUSE pass sets it to 1). */
static bool memo_check(void) { return tpu_config_bool(TPU_CONFIG_DEFER_MEMO_CHECK); }

/* ---- the memory estimate ------------------------------------------------------ */

/* The program's writes to memory (outputs whose value does not live in
 * scratch), by address and then node: the first node in [start, end) that
 * writes into a range is found among that range's writes alone. */
typedef struct mem_write {
  uint64_t addr;
  int32_t node;
} mem_write_t;

static int cmp_write(const void* a, const void* b) {
  const mem_write_t *x = a, *y = b;
  if (x->addr != y->addr) return x->addr < y->addr ? -1 : 1;
  return (x->node > y->node) - (x->node < y->node);
}

static int32_t first_write(const mem_write_t* w, int32_t count, uint64_t lo, uint64_t hi,
                           int32_t start, int32_t end) {
  int32_t a = 0, b = count;
  while (a < b) {
    int32_t mid = a + (b - a) / 2;
    if (w[mid].addr >= lo) b = mid; else a = mid + 1;
  }
  int32_t first = -1;
  for (int32_t k = a; k < count && w[k].addr < hi; ++k)
    if (w[k].node >= start && w[k].node < end && (first < 0 || w[k].node < first))
      first = w[k].node;
  return first;
}

/* The most device memory the program holds, while it runs, on top of what
 * was counted before the flush: buffers counted earlier but freed before the
 * flush stay until their free point; provisional ones occupy memory from the
 * first node that writes them (never, if their value lives in scratch) to
 * their free point, or to the end when they stay alive. A tenant of a range
 * was allocated after the earlier tenants of that range were freed, so its
 * first write is looked for only after their free points: the range-max tree
 * keeps, per byte, the latest free point seen so far (for a buffer still
 * alive at the end, every free of the graph has been seen). */
static tpu_status_t peak_extra(const tpu_graph_t* graph, const tpu_program_t* p,
                               const tpu_free_record_t* frees, int32_t free_count,
                               const uint64_t* live_addr, const uint64_t* live_size,
                               int32_t live, int64_t* out_peak) {
  int32_t n = tpu_graph_node_count(graph);
  int64_t* diff = calloc((size_t)n + 2, sizeof(int64_t));
  mem_write_t* writes = malloc(sizeof(mem_write_t) * ((size_t)p->out_base[n] + 1));
  tpu_extent_t* ranges = NULL; /* the frees' ranges, then the live buffers' */
  tpu_range_max_t freed = {0};
  int64_t peak = 0;
  tpu_status_t rs = TPU_OK;
  ranges = malloc(sizeof(tpu_extent_t) * ((size_t)free_count + (size_t)live + 1));
  if (!diff || !writes || !ranges) {
    rs = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "flush: the memory estimate's allocation failed");
    goto done;
  }
  int32_t nw = 0;
  for (int32_t i = 0; i < n; ++i) {
    const tpu_node_t* node = tpu_graph_node(graph, i);
    for (int32_t o = 0; o < node->num_outputs; ++o)
      if (p->out_slot[p->out_base[i] + o] < 0)
        writes[nw++] = (mem_write_t){node->outputs[o].addr, i};
  }
  qsort(writes, (size_t)nw, sizeof(mem_write_t), cmp_write);
  for (int32_t f = 0; f < free_count; ++f) ranges[f] = (tpu_extent_t){frees[f].lo, frees[f].hi};
  for (int32_t b = 0; b < live; ++b)
    ranges[free_count + b] = (tpu_extent_t){live_addr[b], live_addr[b] + live_size[b]};
  rs = tpu_range_max_init(&freed, ranges, free_count + live, 0);
  if (rs != TPU_OK) goto done;
  for (int32_t f = 0; f < free_count; ++f) {
    int32_t end = frees[f].point < n ? frees[f].point : n;
    int32_t start = tpu_range_max_query(&freed, ranges[f]);
    tpu_range_max_mark(&freed, ranges[f], frees[f].point);
    int32_t first = frees[f].provisional
                        ? first_write(writes, nw, frees[f].lo, frees[f].hi, start, end)
                        : 0;
    if (first < 0) continue;
    diff[first] += (int64_t)(frees[f].hi - frees[f].lo);
    diff[end] -= (int64_t)(frees[f].hi - frees[f].lo);
  }
  for (int32_t b = 0; b < live; ++b) {
    int32_t start = tpu_range_max_query(&freed, ranges[free_count + b]);
    int32_t first = first_write(writes, nw, live_addr[b], live_addr[b] + live_size[b], start, n);
    diff[first < 0 ? n : first] += (int64_t)live_size[b];
  }
  int64_t level = 0;
  for (int32_t i = 0; i <= n; ++i) {
    level += diff[i];
    if (level > peak) peak = level;
  }
done:
  tpu_range_max_release(&freed);
  free(diff);
  free(writes);
  free(ranges);
  *out_peak = peak;
  return rs;
}

/* ---- the front end --------------------------------------------------------------- */

/* Phases 0 and 1, the program cache and the memory estimate for a recording
 * (*graph; its free records and live provisional blocks are rec's). Phase 0
 * may replace *graph by the reordered graph; then *out_moved is set and
 * `order` (room for one entry per node, or NULL) receives the order. */
static tpu_status_t compile_recording(const tpu_hal_recording_t* rec, tpu_graph_t** graph,
                                      int32_t* order, bool* out_moved,
                                      tpu_program_t** out_program, bool* out_hit,
                                      int64_t* out_extra) {
  tpu_graph_t* scheduled = NULL;
  tpu_status_t s = schedule() ? tpu_fusion_schedule(*graph, rec->frees, rec->free_count,
                                                    &scheduled, order)
                              : TPU_OK;
  *out_moved = scheduled != NULL;
  if (scheduled) {
    tpu_graph_release(*graph);
    *graph = scheduled;
  }
  tpu_fusion_analysis_t* analysis = NULL;
  if (s == TPU_OK) s = tpu_fusion_analyse(*graph, rec->frees, rec->free_count, &analysis);
  if (s == TPU_OK) s = tpu_program_cache_get(*graph, analysis, out_program, out_hit);
  tpu_fusion_analysis_free(analysis);
  if (s == TPU_OK)
    s = peak_extra(*graph, *out_program, rec->frees, rec->free_count, rec->live_addr,
                   rec->live_size, rec->live, out_extra);
  if (s != TPU_OK) {
    tpu_program_release(*out_program); /* NULL when the cache failed */
    *out_program = NULL;
  }
  return s;
}

/* A memo hit against the front end run in full on a copy of the recording
 * (memo_check): the same order, program structure, estimate and node
 * plans (those of the copy, in the program's order), or an
 * INTERNAL error naming what differs. The hit is then used as without the
 * check, so the check runs the reuse path too. */
static tpu_status_t check_repeat(const tpu_hal_recording_t* rec,
                                 const tpu_flush_memo_entry_t* seen) {
  const tpu_graph_t* graph = rec->graph;
  int32_t n = tpu_graph_node_count(graph);
  int32_t* order = malloc(sizeof(int32_t) * ((size_t)n + 1));
  tpu_graph_t* copy = NULL;
  tpu_status_t s = order ? tpu_graph_create(&copy)
                         : tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "flush allocation failed");
  for (int32_t i = 0; s == TPU_OK && i < n; ++i) s = tpu_graph_append_from(copy, graph, i);
  bool moved = false, hit = false;
  int64_t extra = 0;
  tpu_program_t* program = NULL;
  if (s == TPU_OK) s = compile_recording(rec, &copy, order, &moved, &program, &hit, &extra);
  if (s == TPU_OK) {
    const char* differs =
        moved != (seen->order != NULL) ||
                (moved && memcmp(order, seen->order, sizeof(int32_t) * (size_t)n) != 0)
            ? "node order"
        : program->hash != seen->program->hash ? "program"
        : extra != seen->extra                 ? "memory estimate"
        : tpu_node_plans_check(seen->plans, copy) >= 0 ? "node plan"
                                               : NULL;
    if (differs)
      s = tpu_status_make(TPU_CODE_INTERNAL,
                          "flush memo: a repeated recording (%d nodes) compiled to another %s",
                          n, differs);
  }
  tpu_program_release(program);
  tpu_graph_release(copy);
  free(order);
  return s;
}

/* compile_recording, or, when the memo holds the same recording (rec->reuse),
 * what it gave then (out->repeat; out->repeat_raw when found by the raw
 * signature: flush_memo.c). */
static tpu_status_t front_end(tpu_flush_memo_t* memo, tpu_hal_recording_t* rec,
                              tpu_program_t** out_program, tpu_hal_prepared_t* out) {
  int32_t n = tpu_graph_node_count(rec->graph);
  uint64_t settings = (uint64_t)schedule() | (uint64_t)tpu_fusion_epilogues_enabled() << 1;
  const tpu_flush_memo_entry_t* seen =
      rec->reuse ? tpu_flush_memo_lookup(memo, rec->graph, rec->frees, rec->free_count,
                                         rec->live_addr, rec->live_size, rec->live, settings,
                                         &out->repeat_raw)
                 : NULL;
  if (seen) {
    out->repeat = true;
    if (memo_check()) TPU_RETURN_IF_ERROR(check_repeat(rec, seen));
    if (seen->order) TPU_RETURN_IF_ERROR(tpu_graph_permute(rec->graph, seen->order));
    /* Made for a recording equal to this one but for addresses, in the
     * program's order: the repeat's run skips the kernels' planning. */
    tpu_node_plans_attach(rec->graph, seen->plans);
    tpu_program_retain(seen->program);
    tpu_program_cache_note_read(seen->program);
    *out_program = seen->program;
    out->cached = true;
    out->extra_bytes = seen->extra;
    return TPU_OK;
  }
  int32_t* order = schedule() ? malloc(sizeof(int32_t) * ((size_t)n + 1)) : NULL;
  bool moved = false;
  tpu_status_t s = compile_recording(rec, &rec->graph, order, &moved, out_program, &out->cached,
                                     &out->extra_bytes);
  /* without the order (out of memory) a repeat could not be replayed */
  if (s == TPU_OK && rec->reuse && (!schedule() || order))
    tpu_flush_memo_store(memo, moved ? order : NULL, n, *out_program,
                         tpu_node_plans_make(rec->graph), out->extra_bytes);
  free(order);
  return s;
}

tpu_status_t tpu_host_compile(tpu_flush_memo_t* memo, tpu_hal_recording_t* rec,
                              tpu_hal_prepared_t* out) {
  *out = (tpu_hal_prepared_t){0};
  tpu_program_t* program = NULL;
  TPU_RETURN_IF_ERROR(front_end(memo, rec, &program, out));
  const tpu_graph_t* graph = rec->graph;
  int32_t nodes = tpu_graph_node_count(graph);
  for (int32_t g = 0; g < program->group_count; ++g)
    if (program->groups[g].kind != TPU_GROUP_SINGLE) {
      out->fused_kernels++;
      out->fused_nodes += program->groups[g].count;
      if (program->groups[g].kind == TPU_GROUP_GEMM) {
        out->gemm_epilogues++;
        out->epilogue_nodes += program->groups[g].count - 1;
      }
    }
  for (int32_t i = 0; i < nodes; ++i) {
    const tpu_node_t* node = tpu_graph_node(graph, i);
    for (int32_t o = 0; o < node->num_outputs; ++o)
      if (program->out_slot[program->out_base[i] + o] >= 0)
        out->elided_bytes +=
            tpu_view_numel(&node->outputs[o]) * (int64_t)tpu_dtype_size(node->outputs[o].dtype);
  }
  out->elided_buffers = program->elided_per_run;
  out->kernels = program->group_count;
  out->hash = program->hash;
  /* TORCH_TPU_DEFER_LOG=2: each newly compiled program, as it is made. */
  if (!out->cached && tpu_config_int(TPU_CONFIG_DEFER_LOG) >= 2) tpu_fusion_dump(graph, program);
  out->executable = tpu_host_executable(program);
  return TPU_OK;
}

/* ---- the text of a recording ------------------------------------------------------ */

tpu_status_t tpu_host_recording_text(const tpu_hal_recording_t* rec, char** out_text) {
  *out_text = NULL;
  char* text = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (!f) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "recording text: no memory");
  /* The scheduler rewrites the free records' points: it gets a copy. */
  tpu_free_record_t* frees = NULL;
  tpu_status_t s = TPU_OK;
  if (rec->free_count > 0) {
    frees = malloc(sizeof(*frees) * (size_t)rec->free_count);
    if (frees) memcpy(frees, rec->frees, sizeof(*frees) * (size_t)rec->free_count);
    else s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "recording text: no memory");
  }
  const tpu_graph_t* graph = rec->graph;
  tpu_graph_t* scheduled = NULL;
  tpu_fusion_analysis_t* analysis = NULL;
  tpu_program_t* program = NULL;
  if (s == TPU_OK && schedule())
    s = tpu_fusion_schedule(graph, frees, rec->free_count, &scheduled, NULL);
  if (scheduled) graph = scheduled;
  if (s == TPU_OK) s = tpu_fusion_analyse(graph, frees, rec->free_count, &analysis);
  if (s == TPU_OK) s = tpu_fusion_compile(graph, analysis, &program);
  if (s == TPU_OK) tpu_fusion_format(f, graph, program);
  tpu_program_release(program);
  tpu_fusion_analysis_free(analysis);
  tpu_graph_release(scheduled);
  free(frees);
  if (fclose(f) != 0 && s == TPU_OK)
    s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "recording text: no memory");
  if (s != TPU_OK) {
    free(text);
    return s;
  }
  *out_text = text;
  return TPU_OK;
}

/* tpu/defer.h's switch of the host compiler's GEMM epilogues (fusion.h). */
void tpu_defer_set_gemm_epilogues(bool on) { tpu_fusion_set_epilogues(on); }
bool tpu_defer_gemm_epilogues(void) { return tpu_fusion_epilogues_enabled(); }
