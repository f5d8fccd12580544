/* tpu/recording.h — what a recording of the deferred mode carries besides
 * its graph (tpu/ir.h): the buffers freed while it was recorded. The HAL's
 * executable_prepare takes them (tpu/hal.h), and a compiler reads them to
 * know which outputs are dead (the host driver's: src/fusion/fusion.h). */
#ifndef TPU_RECORDING_H_
#define TPU_RECORDING_H_

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The byte range [lo, hi) was freed after the first `point` nodes of the
 * graph had been recorded. */
typedef struct tpu_free_record {
  uint64_t lo, hi;
  int32_t point;
  bool provisional; /* allocated while deferring: its bytes were never counted */
} tpu_free_record_t;

#ifdef __cplusplus
}
#endif
#endif /* TPU_RECORDING_H_ */
