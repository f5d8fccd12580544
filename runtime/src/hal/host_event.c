/* host_event.c — the HAL event shared by the host and null drivers
 * (host_event.h). */
#include "host_event.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/spin.h"

struct tpu_hal_event {
  atomic_int refs;
  bool timing;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t next_seq;      /* last sequence handed to a RECORD */
  uint64_t completed_seq; /* last sequence a queue reached */
  int64_t time_ns;
};

tpu_status_t tpu_host_event_create(bool timing, tpu_hal_event_t** out_event) {
  tpu_hal_event_t* e = calloc(1, sizeof(*e));
  if (!e) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "event allocation failed");
  atomic_init(&e->refs, 1);
  e->timing = timing;
  e->time_ns = -1;
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  *out_event = e;
  return TPU_OK;
}

void tpu_host_event_retain(tpu_hal_event_t* e) { atomic_fetch_add(&e->refs, 1); }

void tpu_host_event_release(tpu_hal_event_t* e) {
  if (!e || atomic_fetch_sub(&e->refs, 1) != 1) return;
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e);
}

uint64_t tpu_host_event_next_seq(tpu_hal_event_t* e) {
  pthread_mutex_lock(&e->mu);
  uint64_t s = ++e->next_seq;
  pthread_mutex_unlock(&e->mu);
  return s;
}

uint64_t tpu_host_event_last_seq(tpu_hal_event_t* e) {
  pthread_mutex_lock(&e->mu);
  uint64_t s = e->next_seq;
  pthread_mutex_unlock(&e->mu);
  return s;
}

bool tpu_host_event_reached(tpu_hal_event_t* e, uint64_t seq) {
  pthread_mutex_lock(&e->mu);
  bool r = e->completed_seq >= seq;
  pthread_mutex_unlock(&e->mu);
  return r;
}

void tpu_host_event_wait(tpu_hal_event_t* e, uint64_t seq) {
  pthread_mutex_lock(&e->mu);
  while (e->completed_seq < seq) pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
}

int64_t tpu_host_event_time_ns(tpu_hal_event_t* e) {
  pthread_mutex_lock(&e->mu);
  int64_t t = (e->timing && e->completed_seq == e->next_seq && e->next_seq) ? e->time_ns : -1;
  pthread_mutex_unlock(&e->mu);
  return t;
}

void tpu_host_event_complete(tpu_hal_event_t* e, uint64_t seq) {
  int64_t t = e->timing ? tpu_monotonic_ns() : -1;
  pthread_mutex_lock(&e->mu);
  if (seq > e->completed_seq) {
    e->completed_seq = seq;
    e->time_ns = t;
  }
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}
