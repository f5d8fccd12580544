/* pool_spin.h — how long an idle compute-pool worker polls for the next job
 * before it sleeps (pool.c), as a pure function so its rule can be tested.
 *
 * Kernels come in runs of small jobs a few microseconds apart; a worker that
 * sleeps on a condition variable between them is woken tens of microseconds
 * late and finds the job done, so the second core buys nothing. A worker
 * therefore polls for a while, but a poll takes a core from whoever else
 * wants it (the stream's submitting thread, PyTorch's OpenMP team), so its
 * length adapts per worker:
 *  - a poll that found a job keeps its length;
 *  - a poll that ran out halves it (not below POOL_SPIN_MIN_NS);
 *  - a worker woken for a job published soon after it fell asleep (within
 *    the longest poll) lengthens it to cover that gap with half again to
 *    spare, at least doubling it (not above the maximum): a longer poll would
 *    have caught the job. Covering the gap matters: kernels a steady 30 µs
 *    apart (a host loop that synchronises every call) would otherwise leave
 *    the poll cycling between halving on the expiry and doubling on the
 *    wake-up, every job a wake-up that arrives after the job is done;
 *  - a poll that saw itself descheduled (a gap of POOL_SPIN_GAP_NS between
 *    two of its clock reads), or a wake-up that took longer than the longest
 *    poll, says the cores are oversubscribed (other processes, or threads
 *    beyond the cores): the poll drops to the minimum.
 * An idle process thus polls a few times, ever shorter, then sleeps. */
#ifndef TPU_POOL_SPIN_H_
#define TPU_POOL_SPIN_H_

#include <stdint.h>

#define POOL_SPIN_MIN_NS 2000
#define POOL_SPIN_GAP_NS 20000

typedef enum pool_spin_event {
  POOL_SPIN_FOUND,       /* the poll found a job */
  POOL_SPIN_EXPIRED,     /* the poll ran out; the worker sleeps */
  POOL_SPIN_WOKEN_SOON,  /* woken for a job published within the longest poll of
                            falling asleep */
  POOL_SPIN_WOKEN_LATE,  /* woken after that */
  POOL_SPIN_DESCHEDULED, /* the poll lost its core for POOL_SPIN_GAP_NS or more, or
                            a wake-up took longer than the longest poll */
} pool_spin_event_t;

/* The next poll length (ns) after `event`, from the current one and the
 * longest allowed (max_ns; 0 turns polling off). gap_ns: for
 * POOL_SPIN_WOKEN_SOON, how long after the poll ran out the job was
 * published (ignored for the other events). */
int64_t tpu_pool_spin_next(int64_t spin_ns, int64_t max_ns, pool_spin_event_t event,
                           int64_t gap_ns);

/* The longest poll (ns): TORCH_TPU_POOL_SPIN_US (default 100 µs), read
 * when the pool starts. */
int64_t tpu_pool_spin_max_ns(void);

#endif /* TPU_POOL_SPIN_H_ */
