/* scratch.c — host scratch for kernels (kernel.h: tpu_scratch_alloc).
 *
 * A kernel that needs megabytes of temporaries on every call (converted
 * operand copies, transposed panels) would, through malloc, get fresh pages
 * from the OS each time: glibc serves such sizes with mmap, or trims them
 * off the heap on free, so every call page-faults and zeroes them again
 * (bfloat16 attention at 8 x 12 x 128 x 64 ran at half the speed of
 * float32 for this alone). Blocks of at least SCRATCH_MIN bytes are rounded
 * up to a power of two and, once freed, kept in a small cache for the next
 * request of that class. The cache is bounded (SCRATCH_SLOTS blocks,
 * SCRATCH_MAX_HELD bytes); a block freed into a full cache goes back to the
 * system and is counted as an eviction.
 *
 * Every block carries a header of SCRATCH_HEADER bytes before the pointer
 * handed out (its class; 0 for small blocks, which are not cached), so the
 * pointer is 64-byte aligned and free needs no size.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernel.h"

#define SCRATCH_MIN ((size_t)256 << 10)
#define SCRATCH_SLOTS 32
#define SCRATCH_MAX_HELD ((size_t)256 << 20)
#define SCRATCH_HEADER 64

static struct {
  pthread_mutex_t mu;
  void* blocks[SCRATCH_SLOTS]; /* raw pointers (header first) */
  size_t caps[SCRATCH_SLOTS];
  int32_t count;
  size_t held;
  tpu_scratch_stats_t stats;
} g_scratch = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void* raw_alloc(size_t cap) {
  size_t total = (cap + SCRATCH_HEADER + 63) / 64 * 64;
  if (total < cap) return NULL; /* overflow */
  char* raw = aligned_alloc(64, total);
  if (!raw) return NULL;
  *(size_t*)raw = cap >= SCRATCH_MIN ? cap : 0;
  return raw;
}

void* tpu_scratch_alloc(size_t bytes) {
  if (bytes < SCRATCH_MIN) {
    char* raw = raw_alloc(bytes ? bytes : 1);
    return raw ? raw + SCRATCH_HEADER : NULL;
  }
  if (bytes > SIZE_MAX / 4) return NULL;
  size_t cap = SCRATCH_MIN;
  while (cap < bytes) cap *= 2;
  char* raw = NULL;
  pthread_mutex_lock(&g_scratch.mu);
  for (int32_t i = 0; i < g_scratch.count; ++i)
    if (g_scratch.caps[i] == cap) {
      raw = g_scratch.blocks[i];
      g_scratch.count--;
      g_scratch.blocks[i] = g_scratch.blocks[g_scratch.count];
      g_scratch.caps[i] = g_scratch.caps[g_scratch.count];
      g_scratch.held -= cap;
      break;
    }
  if (raw) g_scratch.stats.hits++;
  else g_scratch.stats.misses++;
  g_scratch.stats.held_bytes = (int64_t)g_scratch.held;
  pthread_mutex_unlock(&g_scratch.mu);
  if (!raw) raw = raw_alloc(cap);
  return raw ? raw + SCRATCH_HEADER : NULL;
}

void tpu_scratch_free(void* p) {
  if (!p) return;
  char* raw = (char*)p - SCRATCH_HEADER;
  size_t cap = *(size_t*)raw;
  bool kept = false;
  if (cap > 0) {
    pthread_mutex_lock(&g_scratch.mu);
    if (g_scratch.count < SCRATCH_SLOTS && g_scratch.held + cap <= SCRATCH_MAX_HELD) {
      g_scratch.blocks[g_scratch.count] = raw;
      g_scratch.caps[g_scratch.count++] = cap;
      g_scratch.held += cap;
      kept = true;
    } else {
      g_scratch.stats.evictions++;
    }
    g_scratch.stats.held_bytes = (int64_t)g_scratch.held;
    pthread_mutex_unlock(&g_scratch.mu);
  }
  if (!kept) free(raw);
}

void tpu_scratch_get_stats(tpu_scratch_stats_t* out_stats) {
  pthread_mutex_lock(&g_scratch.mu);
  *out_stats = g_scratch.stats;
  pthread_mutex_unlock(&g_scratch.mu);
}
