/* spin.h — the two primitives every polling loop in the runtime uses: the
 * monotonic clock in nanoseconds and the CPU's spin-wait hint. Header-only
 * (static inline): the pool, the stream workers, the collectives and the
 * profiler's recorder call them on hot paths. */
#ifndef TPU_SPIN_H_
#define TPU_SPIN_H_

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in ns. */
static inline int64_t tpu_monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One spin-wait hint (x86 pause, Arm yield; nothing elsewhere). */
static inline void tpu_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

#endif /* TPU_SPIN_H_ */
