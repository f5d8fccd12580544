/* epilogue.c — GEMM groups (fusion.h): a GEMM and the pointwise nodes after
 * it over C's elements (bias, activation, residual add, scaling, a cast),
 * run as the GEMM's epilogue.
 *
 * The GEMM (tpu_mm_run, matmul.c) calls back for each block of C it
 * finishes; every epilogue node then runs on that block, in order: each of
 * its operands is laid over C's elements (tpu_fusion_gemm_form, once per
 * run) and sliced to the block. The block is still in cache when the
 * epilogue reads it, where a separate pointwise pass would read all of C
 * back from memory. Where one call computes C (the matrix unit's library,
 * the gemv), the epilogue follows over C by blocks of rows on the pool.
 *
 * Intermediates that phase 3 put in scratch slots (dead, read only by later
 * epilogue nodes) live in a chunk-sized buffer and never reach memory; C
 * itself always does.
 *
 * Errors follow strict eager's contract (exec.c): a failing node records
 * its error and the rest still runs -- a GEMM that fails on a block still
 * hands the block to its epilogue, and a GEMM refused outright is still
 * followed by its epilogue over all of C. Of the group's errors the one of the
 * earliest node, on its earliest block, is returned.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tpu/config.h"
#include "fusion/analysis.h"
#include "kernels/matmul/matmul.h"
#include "tpu/ops.h"

static atomic_int g_epilogues = -1; /* -1: not read from the environment yet */

bool tpu_fusion_epilogues_enabled(void) {
  int on = atomic_load_explicit(&g_epilogues, memory_order_relaxed);
  if (on < 0) {
    int from_env = tpu_config_bool(TPU_CONFIG_GEMM_EPILOGUE);
    /* a setting made meanwhile wins over the environment */
    atomic_compare_exchange_strong(&g_epilogues, &on, from_env);
    on = atomic_load_explicit(&g_epilogues, memory_order_relaxed);
  }
  return on != 0;
}

void tpu_fusion_set_epilogues(bool on) { atomic_store(&g_epilogues, on ? 1 : 0); }

typedef struct gemm_run {
  const tpu_program_t* program;
  const tpu_program_group_t* group;
  const tpu_graph_t* graph;
  tpu_exec_ctx_t* ctx;
  /* Per epilogue node e (node group->first + 1 + e): the forms of its
   * inputs (non-views unused), then of its output, from forms[base[e]]. */
  tpu_view_t* forms;
  int32_t base[TPU_FUSION_MAX_GROUP];
  tpu_group_error_t err; /* the group's first error (see the top) */
} gemm_run_t;

static void note_error(gemm_run_t* r, int32_t node, int64_t at, tpu_status_t s) {
  tpu_group_error_note(&r->err, node, at, s);
}

/* Form f's part over block [i0, i0 + m) x [j0, j0 + n) of batch bi, as a
 * 2-D [m, n] view. */
static tpu_view_t block_of(const tpu_view_t* f, int64_t bi, int64_t i0, int64_t m, int64_t j0,
                           int64_t n) {
  tpu_view_t v = *f;
  int64_t offset = bi * f->strides[0] + i0 * f->strides[1] + j0 * f->strides[2];
  v.addr += (uint64_t)offset * tpu_dtype_size(f->dtype);
  v.ndim = 2;
  v.sizes[0] = m, v.sizes[1] = n;
  v.strides[0] = f->strides[1], v.strides[1] = f->strides[2];
  return v;
}

/* A dense [m, n] view of `dtype` in scratch slot s. */
static tpu_view_t slot_view(uint8_t* scratch, int32_t s, int64_t slot_bytes, tpu_dtype_t dtype,
                            int64_t m, int64_t n) {
  tpu_view_t v = {.addr = (uint64_t)(uintptr_t)(scratch + (size_t)s * (size_t)slot_bytes),
                  .dtype = dtype, .ndim = 2, .sizes = {m, n}};
  tpu_view_set_contiguous(&v);
  return v;
}

/* Every epilogue node on rows [i0, i0 + m) x columns [j0, j0 + n) of batch
 * bi of C; values in scratch slots live in `scratch` (slot_bytes each). */
static void run_rows(gemm_run_t* r, int64_t block, int64_t bi, int64_t i0, int64_t m, int64_t j0,
                     int64_t n, uint8_t* scratch, int64_t slot_bytes) {
  const tpu_program_t* p = r->program;
  int32_t first = r->group->first;
  tpu_value_t inputs[TPU_FUSION_EPILOGUE_MAX_INPUTS];
  tpu_view_t output;
  for (int32_t i = first + 1; i < first + r->group->count; ++i) {
    const tpu_node_t* node = tpu_graph_node(r->graph, i);
    const tpu_view_t* f = r->forms + r->base[i - first - 1];
    tpu_node_t tn = *node;
    for (int32_t k = 0; k < node->num_inputs; ++k) {
      inputs[k] = node->inputs[k];
      if (inputs[k].kind != TPU_VALUE_VIEW) continue;
      int32_t s = p->in_slot[p->in_base[i] + k];
      inputs[k].u.view = s >= 0 ? slot_view(scratch, s, slot_bytes, f[k].dtype, m, n)
                                : block_of(&f[k], bi, i0, m, j0, n);
    }
    int32_t so = p->out_slot[p->out_base[i]];
    const tpu_view_t* fo = &f[node->num_inputs];
    output = so >= 0 ? slot_view(scratch, so, slot_bytes, fo->dtype, m, n)
                    : block_of(fo, bi, i0, m, j0, n);
    tn.inputs = inputs;
    tn.outputs = &output;
    tpu_status_t s = tpu_node_execute(&tn, r->ctx);
    if (s != TPU_OK) note_error(r, i, block, s);
  }
}

/* mm_epilogue_t.run: the block a few rows at a time (about EPILOGUE_CHUNK
 * elements), so that one node's output is still in the core's nearest
 * cache when the next node reads it; the intermediates phase 3 put in
 * scratch slots never leave it. A block whose scratch cannot be allocated
 * does not run, and that error is reported (as exec.c does). */
#define EPILOGUE_CHUNK 8192

static void run_block(void* arg, int64_t block, int64_t bi, int64_t i0, int64_t m, int64_t j0,
                      int64_t n) {
  gemm_run_t* r = (gemm_run_t*)arg;
  int64_t rows = EPILOGUE_CHUNK / n > 0 ? EPILOGUE_CHUNK / n : 1;
  int64_t slot_bytes = (rows * n * 8 + 63) / 64 * 64; /* the widest dtype's chunk */
  uint8_t* scratch = NULL;
  if (r->group->slots > 0) {
    scratch = malloc((size_t)slot_bytes * (size_t)r->group->slots);
    if (!scratch) {
      note_error(r, -1, block,
                 tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "GEMM epilogue: no %lld bytes of scratch",
                                 (long long)(slot_bytes * r->group->slots)));
      return;
    }
  }
  for (int64_t r0 = 0; r0 < m; r0 += rows)
    run_rows(r, block, bi, i0 + r0, m - r0 < rows ? m - r0 : rows, j0, n, scratch, slot_bytes);
  free(scratch);
}

/* Every operand's form; false (nothing allocated) when one has none or
 * memory is short (see tpu_fusion_run_gemm_group for what runs then). */
static bool forms_init(gemm_run_t* r) {
  int32_t first = r->group->first, members = r->group->count - 1, total = 0;
  const tpu_view_t* c = &tpu_graph_node(r->graph, first)->outputs[0];
  for (int32_t e = 0; e < members; ++e) {
    const tpu_node_t* node = tpu_graph_node(r->graph, first + 1 + e);
    if (node->num_inputs > TPU_FUSION_EPILOGUE_MAX_INPUTS || node->num_outputs != 1) return false;
    r->base[e] = total;
    total += node->num_inputs + 1;
  }
  r->forms = malloc(sizeof(tpu_view_t) * (size_t)total);
  bool ok = r->forms != NULL;
  for (int32_t e = 0; e < members && ok; ++e) {
    const tpu_node_t* node = tpu_graph_node(r->graph, first + 1 + e);
    const tpu_view_t* out = &node->outputs[0];
    tpu_view_t* f = r->forms + r->base[e];
    for (int32_t k = 0; k < node->num_inputs && ok; ++k)
      ok = node->inputs[k].kind != TPU_VALUE_VIEW ||
           tpu_fusion_gemm_form(&node->inputs[k].u.view, out, c, &f[k]);
    ok = ok && tpu_fusion_gemm_form(out, out, c, &f[node->num_inputs]);
  }
  if (!ok) {
    free(r->forms);
    r->forms = NULL;
  }
  return ok;
}

/* The epilogue over all of C by blocks of rows, when tpu_mm_run did not run
 * it (*out_ran false): after a GEMM computed in one call, or refused (its
 * nodes still run once on every element). */
static void whole_blocks(void* arg, int64_t begin, int64_t end) {
  gemm_run_t* r = (gemm_run_t*)arg;
  const tpu_view_t* c = &tpu_graph_node(r->graph, r->group->first)->outputs[0];
  int64_t m = c->sizes[c->ndim - 2], n = c->sizes[c->ndim - 1];
  int64_t rows = EPILOGUE_CHUNK / n > 0 ? EPILOGUE_CHUNK / n : 1, per = (m + rows - 1) / rows;
  for (int64_t u = begin; u < end; ++u) {
    int64_t i0 = u % per * rows;
    run_block(r, u, u / per, i0, m - i0 < rows ? m - i0 : rows, 0, n);
  }
}

static void run_whole(gemm_run_t* r) {
  const tpu_view_t* c = &tpu_graph_node(r->graph, r->group->first)->outputs[0];
  int64_t b = c->ndim == 3 ? c->sizes[0] : 1, m = c->sizes[c->ndim - 2], n = c->sizes[c->ndim - 1];
  int64_t rows = EPILOGUE_CHUNK / n > 0 ? EPILOGUE_CHUNK / n : 1;
  tpu_parallel_for(b * ((m + rows - 1) / rows), 1, whole_blocks, r);
}

tpu_status_t tpu_fusion_run_gemm_group(const tpu_program_t* program,
                                       const tpu_program_group_t* group,
                                       const tpu_graph_t* graph, tpu_exec_ctx_t* ctx) {
  gemm_run_t r = {.program = program, .group = group, .graph = graph, .ctx = ctx};
  tpu_group_error_init(&r.err);
  int32_t first = group->first;
  const tpu_node_t* lead = tpu_graph_node(graph, first);
  if (group->count > TPU_FUSION_MAX_GROUP || !forms_init(&r)) {
    /* Short of memory for the forms. Without scratch values the nodes run
     * one by one; with them (their buffers may hold later tenants by now)
     * the group does not run, as a tile without scratch does not (exec.c). */
    if (group->slots > 0) {
      note_error(&r, -1, 0,
                 tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "GEMM epilogue: no memory for its plan"));
    } else {
      for (int32_t i = first; i < first + group->count; ++i) {
        tpu_status_t e = tpu_node_execute(tpu_graph_node(graph, i), ctx);
        if (e != TPU_OK) note_error(&r, i, 0, e);
      }
    }
    return tpu_group_error_finish(&r.err);
  }
  bool ran = false;
  mm_epilogue_t ep = {run_block, &r};
  tpu_status_t s = tpu_mm_run(lead, &ep, ctx, &ran);
  if (s != TPU_OK)
    note_error(&r, first, 0,
               tpu_status_annotate(s, "in op '%s' on tpu:%d", tpu_op_def(lead->op)->name,
                                   ctx->chip_index));
  if (!ran) run_whole(&r);
  free(r.forms);
  return tpu_group_error_finish(&r.err);
}
