/* host_event.h — the HAL event of drivers whose queues run on host threads
 * (the host and null drivers): a sequence number under a mutex, and a
 * condition variable that wakes waiters when a queue reaches a RECORD.
 *
 * Each function has the signature of its tpu_hal_driver_t entry (tpu/hal.h)
 * and is put in the driver's table as is. tpu_host_event_complete is what a
 * queue calls when it runs RECORD `seq`: the event reaches it (never goes
 * back) and, for a timing event, takes the time. */
#ifndef TPU_HAL_HOST_EVENT_H_
#define TPU_HAL_HOST_EVENT_H_

#include <stdbool.h>
#include <stdint.h>

#include "tpu/hal.h"

/* Owned by whoever created it: created with one reference. */
tpu_status_t tpu_host_event_create(bool timing, tpu_hal_event_t** out_event);
void tpu_host_event_retain(tpu_hal_event_t* e);
void tpu_host_event_release(tpu_hal_event_t* e); /* NULL is fine */
uint64_t tpu_host_event_next_seq(tpu_hal_event_t* e);
uint64_t tpu_host_event_last_seq(tpu_hal_event_t* e);
bool tpu_host_event_reached(tpu_hal_event_t* e, uint64_t seq);
void tpu_host_event_wait(tpu_hal_event_t* e, uint64_t seq);
int64_t tpu_host_event_time_ns(tpu_hal_event_t* e);
void tpu_host_event_complete(tpu_hal_event_t* e, uint64_t seq);

#endif /* TPU_HAL_HOST_EVENT_H_ */
