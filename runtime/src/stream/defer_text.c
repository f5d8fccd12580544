/* defer_text.c — the text of what a stream's pending graph would run
 * (tpu_stream_pending_text, see tpu/program_cache.h): the driver's
 * recording_text for it (tpu/hal.h), taken under the pending lock. */
#include <stdlib.h>

#include "stream/internal.h"
#include "tpu/program_cache.h"

tpu_status_t tpu_stream_pending_text(tpu_stream_t* stream, char** out_text) {
  *out_text = NULL;
  tpu_pending_t* pd = &stream->pending;
  char* text = NULL;
  pthread_mutex_lock(&pd->mu);
  tpu_hal_recording_t rec = {.graph = pd->graph, .frees = pd->frees,
                             .free_count = pd->free_count};
  tpu_status_t s = pd->graph && tpu_graph_node_count(pd->graph) > 0
                       ? tpu_hal()->recording_text(&rec, &text)
                       : TPU_OK;
  pthread_mutex_unlock(&pd->mu);
  if (s != TPU_OK)
    return tpu_status_annotate(s, "formatting tpu:%d stream %d's pending graph",
                               tpu_chip_index(stream->chip), stream->index);
  if (!text) text = calloc(1, 1);
  if (!text) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "pending graph text: no memory");
  *out_text = text;
  return TPU_OK;
}
