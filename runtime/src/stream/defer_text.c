/* defer_text.c — the text of what a stream's pending graph would run
 * (tpu_stream_pending_text, see tpu/defer.h): the flush's passes on a copy
 * of its inputs, printed as TORCH_TPU_DEFER_LOG=2 prints a program. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu/config.h"
#include "fusion/fusion.h"
#include "stream/internal.h"
#include "tpu/program_cache.h"

/* Phase 0 as the flush runs it: on unless TORCH_TPU_DEFER_SCHEDULE=0. */
static bool schedule_on(void) { return tpu_config_bool(TPU_CONFIG_DEFER_SCHEDULE); }

static tpu_status_t format_locked(const tpu_pending_t* pd, FILE* f) {
  /* The scheduler rewrites the free records' points: it gets a copy. */
  tpu_free_record_t* frees = NULL;
  if (pd->free_count > 0) {
    frees = malloc(sizeof(*frees) * (size_t)pd->free_count);
    if (!frees) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "pending graph text: no memory");
    memcpy(frees, pd->frees, sizeof(*frees) * (size_t)pd->free_count);
  }
  const tpu_graph_t* graph = pd->graph;
  tpu_graph_t* scheduled = NULL;
  tpu_fusion_analysis_t* analysis = NULL;
  tpu_program_t* program = NULL;
  tpu_status_t s =
      schedule_on() ? tpu_fusion_schedule(graph, frees, pd->free_count, &scheduled, NULL)
                    : TPU_OK;
  if (scheduled) graph = scheduled;
  if (s == TPU_OK) s = tpu_fusion_analyse(graph, frees, pd->free_count, &analysis);
  if (s == TPU_OK) s = tpu_fusion_compile(graph, analysis, &program);
  if (s == TPU_OK) tpu_fusion_format(f, graph, program);
  tpu_program_release(program);
  tpu_fusion_analysis_free(analysis);
  tpu_graph_release(scheduled);
  free(frees);
  return s;
}

tpu_status_t tpu_stream_pending_text(tpu_stream_t* stream, char** out_text) {
  *out_text = NULL;
  char* text = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (!f) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "pending graph text: no memory");
  tpu_pending_t* pd = &stream->pending;
  pthread_mutex_lock(&pd->mu);
  tpu_status_t s = pd->graph && tpu_graph_node_count(pd->graph) > 0 ? format_locked(pd, f) : TPU_OK;
  pthread_mutex_unlock(&pd->mu);
  if (fclose(f) != 0 && s == TPU_OK)
    s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "pending graph text: no memory");
  if (s != TPU_OK) {
    free(text);
    return tpu_status_annotate(s, "formatting tpu:%d stream %d's pending graph",
                               tpu_chip_index(stream->chip), stream->index);
  }
  *out_text = text;
  return TPU_OK;
}
