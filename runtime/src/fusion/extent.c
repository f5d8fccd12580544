/* extent.c — the free-record index and the range-max tree (see extent.h). */
#include "fusion/extent.h"

#include <stdlib.h>

/* ---- free records by point ---------------------------------------------------------- */

static int cmp_u64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return (x > y) - (x < y);
}

tpu_status_t tpu_free_index_init(tpu_free_index_t* ix, const tpu_free_record_t* frees,
                                 int32_t count) {
  *ix = (tpu_free_index_t){frees, count, NULL};
  bool sorted = true;
  for (int32_t f = 1; f < count && sorted; ++f) sorted = frees[f - 1].point <= frees[f].point;
  if (sorted) return TPU_OK; /* as recorded: points never decrease */
  /* Reordered by the schedule: sort (point, record) pairs packed in one key. */
  uint64_t* keys = malloc(sizeof(uint64_t) * (size_t)count);
  ix->order = malloc(sizeof(int32_t) * (size_t)count);
  if (!keys || !ix->order) {
    free(keys);
    tpu_free_index_release(ix);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "free-record index allocation failed");
  }
  for (int32_t f = 0; f < count; ++f)
    keys[f] = (uint64_t)(uint32_t)frees[f].point << 32 | (uint32_t)f;
  qsort(keys, (size_t)count, sizeof(uint64_t), cmp_u64);
  for (int32_t f = 0; f < count; ++f) ix->order[f] = (int32_t)(keys[f] & 0xffffffffu);
  free(keys);
  return TPU_OK;
}

void tpu_free_index_release(tpu_free_index_t* ix) {
  free(ix->order);
  ix->order = NULL;
}

int32_t tpu_free_index_after(const tpu_free_index_t* ix, int32_t point) {
  int32_t lo = 0, hi = ix->count;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (tpu_free_index_at(ix, mid)->point > point)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/* ---- the range-max tree --------------------------------------------------------------- */

tpu_status_t tpu_range_max_init(tpu_range_max_t* r, const tpu_extent_t* ranges, int32_t count,
                                int32_t none) {
  *r = (tpu_range_max_t){NULL, 0, NULL, NULL, 0, none};
  r->cuts = malloc(sizeof(uint64_t) * (size_t)(2 * count + 1));
  if (!r->cuts) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "range tree allocation failed");
  int32_t n = 0;
  for (int32_t k = 0; k < count; ++k) {
    r->cuts[n++] = ranges[k].lo;
    r->cuts[n++] = ranges[k].hi;
  }
  qsort(r->cuts, (size_t)n, sizeof(uint64_t), cmp_u64);
  int32_t distinct = 0;
  for (int32_t k = 0; k < n; ++k)
    if (distinct == 0 || r->cuts[distinct - 1] != r->cuts[k]) r->cuts[distinct++] = r->cuts[k];
  r->ncuts = distinct;
  r->leaves = distinct > 1 ? distinct - 1 : 0;
  if (r->leaves == 0) return TPU_OK;
  r->tree = malloc(sizeof(int32_t) * 4 * (size_t)r->leaves);
  r->best = malloc(sizeof(int32_t) * 4 * (size_t)r->leaves);
  if (!r->tree || !r->best) {
    tpu_range_max_release(r);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "range tree allocation failed");
  }
  for (int64_t k = 0; k < 4 * (int64_t)r->leaves; ++k) r->tree[k] = r->best[k] = none;
  return TPU_OK;
}

void tpu_range_max_release(tpu_range_max_t* r) {
  free(r->cuts);
  free(r->tree);
  free(r->best);
  *r = (tpu_range_max_t){NULL, 0, NULL, NULL, 0, r->none};
}

/* The elementary ranges [*l, *r) covering e: from the last cut at or below
 * e.lo to the first cut at or above e.hi (exactly e's for ranges given to
 * init). Empty when e is empty or outside every range. */
static void leaves_of(const tpu_range_max_t* r, tpu_extent_t e, int32_t* out_l, int32_t* out_r) {
  *out_l = *out_r = 0;
  if (r->leaves == 0 || e.lo >= e.hi || e.hi <= r->cuts[0] || e.lo >= r->cuts[r->ncuts - 1]) return;
  int32_t lo = 0, hi = r->ncuts; /* first cut above e.lo */
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (r->cuts[mid] > e.lo) hi = mid; else lo = mid + 1;
  }
  *out_l = lo > 0 ? lo - 1 : 0;
  lo = 0, hi = r->ncuts; /* first cut at or above e.hi */
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (r->cuts[mid] >= e.hi) hi = mid; else lo = mid + 1;
  }
  *out_r = lo < r->leaves ? lo : r->leaves;
}

static inline int32_t max32(int32_t a, int32_t b) { return a > b ? a : b; }

static void mark_node(tpu_range_max_t* r, int32_t node, int32_t nl, int32_t nr, int32_t l,
                      int32_t rr, int32_t v) {
  if (rr <= nl || nr <= l) return;
  if (l <= nl && nr <= rr) {
    r->tree[node] = max32(r->tree[node], v);
    r->best[node] = max32(r->best[node], v);
    return;
  }
  int32_t mid = nl + (nr - nl) / 2;
  mark_node(r, 2 * node, nl, mid, l, rr, v);
  mark_node(r, 2 * node + 1, mid, nr, l, rr, v);
  r->best[node] = max32(r->best[node], max32(r->best[2 * node], r->best[2 * node + 1]));
}

static int32_t query_node(const tpu_range_max_t* r, int32_t node, int32_t nl, int32_t nr,
                          int32_t l, int32_t rr) {
  if (rr <= nl || nr <= l) return r->none;
  if (l <= nl && nr <= rr) return r->best[node];
  int32_t mid = nl + (nr - nl) / 2;
  return max32(r->tree[node], max32(query_node(r, 2 * node, nl, mid, l, rr),
                                    query_node(r, 2 * node + 1, mid, nr, l, rr)));
}

void tpu_range_max_mark(tpu_range_max_t* r, tpu_extent_t e, int32_t value) {
  int32_t l, rr;
  leaves_of(r, e, &l, &rr);
  if (l < rr) mark_node(r, 1, 0, r->leaves, l, rr, value);
}

int32_t tpu_range_max_query(const tpu_range_max_t* r, tpu_extent_t e) {
  int32_t l, rr;
  leaves_of(r, e, &l, &rr);
  return l < rr ? query_node(r, 1, 0, r->leaves, l, rr) : r->none;
}
