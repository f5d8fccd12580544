/* correlation.c — the calling thread's profiler correlation id
 * (tpu/profiler.h: tpu_profiler_set_correlation). It lives in the base
 * layer, not with the profiler's event buffers, because the graph IR stamps
 * it on every node it records (ir/ir.c) and the IR sits below the profiler. */
#include <stdint.h>

#include "tpu/profiler.h"

static _Thread_local uint64_t t_correlation;

uint64_t tpu_profiler_set_correlation(uint64_t id) {
  uint64_t prev = t_correlation;
  t_correlation = id;
  return prev;
}

uint64_t tpu_profiler_correlation(void) { return t_correlation; }
