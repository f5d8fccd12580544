/* test_extent.c — the flush's range helpers (fusion/extent.h) against plain
 * loops over the same records: the free index's search (records in order and
 * out of order) and the range-max tree's marks and queries over random,
 * partly overlapping ranges. */
#include <stdlib.h>

#include "fusion/extent.h"
#include "test.h"

static uint32_t next_rand(uint32_t* state) {
  *state = *state * 1664525u + 1013904223u;
  return *state >> 8;
}

TEST(free_index_finds_the_first_record_after_a_point) {
  uint32_t seed = 7;
  for (int trial = 0; trial < 2; ++trial) {
    enum { N = 200 };
    tpu_free_record_t frees[N];
    int32_t point = 0;
    for (int32_t f = 0; f < N; ++f) {
      point += (int32_t)(next_rand(&seed) % 3); /* ties included */
      frees[f] = (tpu_free_record_t){f, f + 1, point, false};
    }
    if (trial == 1) /* as the schedule leaves them: out of order */
      for (int32_t f = 0; f < N; ++f) frees[f].point = (int32_t)(next_rand(&seed) % 50);
    tpu_free_index_t ix;
    CHECK_OK(tpu_free_index_init(&ix, frees, N));
    CHECK((ix.order == NULL) == (trial == 0));
    for (int32_t k = 1; k < N; ++k) { /* by point, ties in record order */
      const tpu_free_record_t *a = tpu_free_index_at(&ix, k - 1), *b = tpu_free_index_at(&ix, k);
      CHECK(a->point < b->point || (a->point == b->point && a->lo < b->lo));
    }
    for (int32_t p = -1; p <= point + 1; ++p) {
      int32_t expect = 0;
      for (int32_t f = 0; f < N; ++f) expect += frees[f].point <= p;
      CHECK(tpu_free_index_after(&ix, p) == expect);
    }
    tpu_free_index_release(&ix);
  }
}

TEST(range_max_tree_matches_a_scan_of_the_marks) {
  enum { N = 300 };
  uint32_t seed = 11;
  tpu_extent_t ranges[N];
  for (int32_t k = 0; k < N; ++k) {
    uint64_t lo = 4096 + 16 * (next_rand(&seed) % 200);
    uint64_t len = 16 * (next_rand(&seed) % 8); /* empty ranges too */
    ranges[k] = (tpu_extent_t){lo, lo + len};
  }
  tpu_range_max_t r;
  CHECK_OK(tpu_range_max_init(&r, ranges, N, -1));
  int32_t marks[N];
  for (int32_t k = 0; k < N; ++k) {
    /* Query before marking, as the flush does: the largest earlier mark on
     * a byte of the range. */
    int32_t expect = -1;
    for (int32_t j = 0; j < k; ++j)
      if (tpu_extents_meet(ranges[j], ranges[k]) && marks[j] > expect) expect = marks[j];
    CHECK(tpu_range_max_query(&r, ranges[k]) == expect);
    marks[k] = (int32_t)(next_rand(&seed) % 1000);
    tpu_range_max_mark(&r, ranges[k], marks[k]);
  }
  tpu_range_max_release(&r);
  CHECK_OK(tpu_range_max_init(&r, ranges, 0, -1)); /* no ranges: nothing marked */
  CHECK(tpu_range_max_query(&r, ranges[0]) == -1);
  tpu_range_max_release(&r);
}
