/* internal.h — runtime-private structures shared by runtime.c (chips,
 * streams, events), allocator.c (device memory) and host_memory.c. */
#ifndef TPU_INTERNAL_H_
#define TPU_INTERNAL_H_

#include <pthread.h>

#include "tpu/hal.h"
#include "tpu/runtime.h"

typedef struct tpu_allocator tpu_allocator_t;

struct tpu_stream {
  tpu_chip_t* chip;
  int index;
  tpu_hal_queue_t* queue; /* created on first use, under chip->mu */
};

struct tpu_chip {
  int index;
  uint64_t capacity;
  tpu_hal_chip_t* hal;
  pthread_mutex_t mu;
  tpu_stream_t streams[TPU_STREAMS_PER_CHIP];
  tpu_allocator_t* allocator;
};

const tpu_hal_driver_t* tpu_hal(void);

/* The stream's queue, created on first use. */
tpu_status_t tpu_stream_queue(tpu_stream_t* stream, tpu_hal_queue_t** out_queue);

/* allocator.c */
tpu_status_t tpu_allocator_create(tpu_chip_t* chip, tpu_allocator_t** out_allocator);

#endif /* TPU_INTERNAL_H_ */
