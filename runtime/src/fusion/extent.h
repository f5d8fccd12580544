/* extent.h — byte ranges for the fusion passes and the deferral's memory
 * accounting (internal to src/).
 *
 * A flush looks at every node's views and at the graph's free records
 * (fusion.h) several times over: which writes conflict, which value a free
 * ends, when a provisional buffer is first written. Done view by view and
 * record by record those questions cost a product of the graph's size and its
 * frees on every flush. These helpers answer them from ranges computed once:
 *
 *   tpu_extent_t       the bytes [lo, hi) a view can touch (empty: lo == hi),
 *                      the same ranges tpu_views_may_overlap compares;
 *   tpu_free_index_t   the free records in order of their points, with a
 *                      binary search for the first record after a point;
 *   tpu_range_max_t    byte ranges marked with values, and the largest value
 *                      marked over any byte of a range (a segment tree over
 *                      the ranges' end points, O(log n) per mark or query).
 */
#ifndef TPU_FUSION_EXTENT_H_
#define TPU_FUSION_EXTENT_H_

#include <stdbool.h>
#include <stdint.h>

#include "fusion/fusion.h"
#include "tpu/ir.h"

typedef struct tpu_extent {
  uint64_t lo, hi;
} tpu_extent_t;

/* The bytes a view can touch (tpu_view_bytes). */
static inline tpu_extent_t tpu_extent_of(const tpu_view_t* v) {
  tpu_extent_t e;
  tpu_view_bytes(v, &e.lo, &e.hi);
  return e;
}

/* Whether two ranges share a byte (empty ranges share none). */
static inline bool tpu_extents_meet(tpu_extent_t a, tpu_extent_t b) {
  return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi;
}

/* Free records by point, ties in record order. Borrows the records, which
 * must not change while the index is used; owns its order array. */
typedef struct tpu_free_index {
  const tpu_free_record_t* frees;
  int32_t count;
  int32_t* order; /* NULL when the records are already in order of point */
} tpu_free_index_t;

tpu_status_t tpu_free_index_init(tpu_free_index_t* ix, const tpu_free_record_t* frees,
                                 int32_t count);
void tpu_free_index_release(tpu_free_index_t* ix);

/* The k-th record by point (borrowed). */
static inline const tpu_free_record_t* tpu_free_index_at(const tpu_free_index_t* ix, int32_t k) {
  return &ix->frees[ix->order ? ix->order[k] : k];
}

/* The position of the first record whose point is above `point` (count when
 * none is). */
int32_t tpu_free_index_after(const tpu_free_index_t* ix, int32_t point);

/* Byte ranges marked with values: tpu_range_max_mark(r, e, v) raises every
 * byte of e to at least v; tpu_range_max_query(r, e) is the largest value on
 * any byte of e (`none` where nothing was marked). Only the ranges given to
 * init (their end points) can be marked or queried. Owns its arrays. */
typedef struct tpu_range_max {
  uint64_t* cuts;   /* sorted distinct end points */
  int32_t ncuts;
  int32_t* tree;    /* per node: the largest value marked over its whole span */
  int32_t* best;    /* per node: the largest value marked anywhere inside it */
  int32_t leaves;   /* ncuts - 1 elementary ranges */
  int32_t none;
} tpu_range_max_t;

tpu_status_t tpu_range_max_init(tpu_range_max_t* r, const tpu_extent_t* ranges, int32_t count,
                                int32_t none);
void tpu_range_max_release(tpu_range_max_t* r);
void tpu_range_max_mark(tpu_range_max_t* r, tpu_extent_t e, int32_t value);
int32_t tpu_range_max_query(const tpu_range_max_t* r, tpu_extent_t e);

#endif /* TPU_FUSION_EXTENT_H_ */
