/* test_scratch.c — kernel host scratch (scratch.c): aligned blocks; a large
 * block freed and asked for again comes from the cache; the cache is
 * bounded, and what it cannot keep is returned and counted. */
#include <stdint.h>
#include <string.h>

#include "kernel.h"
#include "test.h"

TEST(scratch_reuses_large_blocks_and_bounds_the_cache) {
  void* small = tpu_scratch_alloc(100);
  CHECK(small && (uintptr_t)small % 64 == 0);
  memset(small, 1, 100);
  tpu_scratch_free(small);
  tpu_scratch_free(NULL);

  tpu_scratch_stats_t s0, s1, s2;
  tpu_scratch_get_stats(&s0);
  void* a = tpu_scratch_alloc((size_t)3 << 20); /* a 4 MiB class */
  CHECK(a && (uintptr_t)a % 64 == 0);
  memset(a, 2, (size_t)3 << 20);
  tpu_scratch_free(a);
  tpu_scratch_get_stats(&s0);
  void* b = tpu_scratch_alloc((size_t)4 << 20); /* the same class: a cached block */
  tpu_scratch_get_stats(&s1);
  CHECK(b != NULL && s1.hits == s0.hits + 1 && s1.misses == s0.misses);
  memset(b, 3, (size_t)4 << 20);
  tpu_scratch_free(b);

  /* 40 blocks of 8 MiB at once: more than the cache keeps (32 blocks,
   * 256 MiB); the rest are returned to the system and counted. */
  enum { N = 40 };
  void* many[N];
  for (int i = 0; i < N; ++i) {
    many[i] = tpu_scratch_alloc((size_t)8 << 20);
    CHECK(many[i] != NULL);
  }
  for (int i = 0; i < N; ++i) tpu_scratch_free(many[i]);
  tpu_scratch_get_stats(&s2);
  CHECK(s2.evictions > s1.evictions);
  CHECK(s2.held_bytes <= (int64_t)256 << 20);
  CHECK(tpu_scratch_alloc(SIZE_MAX) == NULL); /* too large: NULL, no crash */
}
