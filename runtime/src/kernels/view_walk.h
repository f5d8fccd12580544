/* view_walk.h — walking strided views in row-major logical order (internal,
 * shared by the matmul, index and random families).
 *
 * A walk lays up to WALK_MAX_VIEWS views over one shape. Size-1 dims are
 * dropped and adjacent dims that are contiguous for every view are merged, so
 * a contiguous tensor is walked as a single run. walk_range() calls a
 * function once per innermost run of the logical elements [begin, end), with
 * each view's element offset and inner step; kernels then convert or compute
 * a whole run at a time. Element i of the walk is element i of the shape in
 * row-major order, whatever the strides: this is what makes the counter-based
 * RNG independent of layout and threading.
 *
 * Also here: right-aligned broadcasting of a view to a shape, a parallel
 * converting copy between two views, and a memory-overlap test.
 */
#ifndef TPU_KERNELS_VIEW_WALK_H_
#define TPU_KERNELS_VIEW_WALK_H_

#include <stdbool.h>
#include <stdint.h>

#include "../kernel.h"
#include "tpu/dtype.h"
#include "tpu/ir.h"

#define WALK_MAX_VIEWS 4
/* Elements per parallel chunk for memory-bound loops. */
#define WALK_GRAIN 32768

typedef struct walk {
  int32_t ndim; /* >= 1 */
  int32_t nviews;
  int64_t numel;
  int64_t sizes[TPU_MAX_DIMS];
  int64_t strides[WALK_MAX_VIEWS][TPU_MAX_DIMS];
} walk_t;

/* offsets[v]: element offset of the run's first element in view v;
 * steps[v]: element step along the run; logical: index of that element. */
typedef void (*walk_run_fn)(void* arg, const int64_t* offsets, const int64_t* steps, int64_t n,
                            int64_t logical);

/* Lays `nviews` stride arrays (each of `ndim` entries) over `sizes`. */
static inline void walk_init(walk_t* w, int32_t ndim, const int64_t* sizes, int32_t nviews,
                             const int64_t* const* strides) {
  w->nviews = nviews;
  w->ndim = 0;
  w->numel = 1;
  for (int32_t d = 0; d < ndim; ++d) w->numel *= sizes[d];
  for (int32_t d = 0; d < ndim; ++d) {
    if (sizes[d] == 1) continue;
    int32_t p = w->ndim - 1;
    bool merge = p >= 0;
    for (int32_t v = 0; merge && v < nviews; ++v)
      merge = w->strides[v][p] == strides[v][d] * sizes[d];
    if (merge) {
      w->sizes[p] *= sizes[d];
      for (int32_t v = 0; v < nviews; ++v) w->strides[v][p] = strides[v][d];
      continue;
    }
    w->sizes[w->ndim] = sizes[d];
    for (int32_t v = 0; v < nviews; ++v) w->strides[v][w->ndim] = strides[v][d];
    w->ndim++;
  }
  if (w->ndim == 0) {
    w->ndim = 1;
    w->sizes[0] = w->numel;
    for (int32_t v = 0; v < nviews; ++v) w->strides[v][0] = 1;
  }
}

/* Lays views that all have the shape of views[0] (sizes of the others are not read). */
static inline void walk_init_views(walk_t* w, int32_t nviews, const tpu_view_t* const* views) {
  const int64_t* strides[WALK_MAX_VIEWS];
  for (int32_t v = 0; v < nviews; ++v) strides[v] = views[v]->strides;
  walk_init(w, views[0]->ndim, views[0]->sizes, nviews, strides);
}

static inline void walk_range(const walk_t* w, int64_t begin, int64_t end, walk_run_fn fn,
                              void* arg) {
  if (begin >= end) return;
  int64_t idx[TPU_MAX_DIMS], offs[WALK_MAX_VIEWS] = {0}, steps[WALK_MAX_VIEWS];
  const int32_t last = w->ndim - 1;
  int64_t rem = begin;
  for (int32_t d = last; d >= 0; --d) {
    idx[d] = rem % w->sizes[d];
    rem /= w->sizes[d];
    for (int32_t v = 0; v < w->nviews; ++v) offs[v] += idx[d] * w->strides[v][d];
  }
  for (int32_t v = 0; v < w->nviews; ++v) steps[v] = w->strides[v][last];
  for (int64_t pos = begin; pos < end;) {
    int64_t n = w->sizes[last] - idx[last];
    if (n > end - pos) n = end - pos;
    fn(arg, offs, steps, n, pos);
    pos += n;
    idx[last] += n;
    for (int32_t v = 0; v < w->nviews; ++v) offs[v] += n * steps[v];
    for (int32_t d = last; d > 0 && idx[d] == w->sizes[d]; --d) {
      idx[d] = 0;
      idx[d - 1]++;
      for (int32_t v = 0; v < w->nviews; ++v)
        offs[v] += w->strides[v][d - 1] - w->sizes[d] * w->strides[v][d];
    }
  }
}

/* Right-aligned broadcast of `v` to `ndim`/`sizes` (stride 0 where v has size 1
 * or lacks the dim). False when the shapes do not broadcast. */
static inline bool view_expand(const tpu_view_t* v, int32_t ndim, const int64_t* sizes,
                               tpu_view_t* out) {
  if (v->ndim > ndim) return false;
  tpu_view_t r = *v;
  r.ndim = ndim;
  for (int32_t d = 0; d < ndim; ++d) {
    int32_t s = d - (ndim - v->ndim);
    int64_t size = s >= 0 ? v->sizes[s] : 1;
    if (size != sizes[d] && size != 1) return false;
    r.sizes[d] = sizes[d];
    r.strides[d] = (s >= 0 && size == sizes[d]) ? v->strides[s] : 0;
  }
  *out = r;
  return true;
}

static inline char* view_at(const tpu_view_t* v, int64_t offset) {
  return (char*)tpu_view_ptr(v) + offset * (int64_t)tpu_dtype_size(v->dtype);
}

/* True when the bytes two views can touch intersect (conservative). */
static inline bool views_overlap(const tpu_view_t* a, const tpu_view_t* b) {
  const tpu_view_t* v[2] = {a, b};
  uint64_t lo[2], hi[2];
  for (int i = 0; i < 2; ++i) {
    int64_t last = 0;
    for (int32_t d = 0; d < v[i]->ndim; ++d) {
      if (v[i]->sizes[d] == 0) return false;
      last += (v[i]->sizes[d] - 1) * v[i]->strides[d];
    }
    lo[i] = v[i]->addr;
    hi[i] = v[i]->addr + (uint64_t)(last + 1) * tpu_dtype_size(v[i]->dtype);
  }
  return lo[0] < hi[1] && lo[1] < hi[0];
}

static inline bool views_same(const tpu_view_t* a, const tpu_view_t* b) {
  if (a->addr != b->addr || a->dtype != b->dtype || a->ndim != b->ndim) return false;
  for (int32_t d = 0; d < a->ndim; ++d)
    if (a->sizes[d] != b->sizes[d] || (a->sizes[d] > 1 && a->strides[d] != b->strides[d]))
      return false;
  return true;
}

/* ---- converting copy ---------------------------------------------------- */

typedef struct walk_copy_job {
  walk_t walk;
  char *dst, *src;
  tpu_dtype_t dst_dtype, src_dtype;
  int64_t dst_size, src_size;
} walk_copy_job_t;

static inline void walk_copy_run(void* arg, const int64_t* offs, const int64_t* steps, int64_t n,
                                 int64_t logical) {
  (void)logical;
  const walk_copy_job_t* j = (const walk_copy_job_t*)arg;
  tpu_convert(j->dst + offs[0] * j->dst_size, j->dst_dtype, steps[0],
              j->src + offs[1] * j->src_size, j->src_dtype, steps[1], n);
}

static inline void walk_copy_chunk(void* arg, int64_t begin, int64_t end) {
  walk_copy_job_t* j = (walk_copy_job_t*)arg;
  walk_range(&j->walk, begin, end, walk_copy_run, j);
}

/* dst[...] = (dst dtype) src[...], over dst's shape; src must already have it
 * (see view_expand). Parallel over large tensors. */
static inline void view_copy(const tpu_view_t* dst, const tpu_view_t* src) {
  walk_copy_job_t j;
  const tpu_view_t* views[2] = {dst, src};
  walk_init_views(&j.walk, 2, views);
  j.dst = (char*)tpu_view_ptr(dst);
  j.src = (char*)tpu_view_ptr(src);
  j.dst_dtype = dst->dtype;
  j.src_dtype = src->dtype;
  j.dst_size = (int64_t)tpu_dtype_size(dst->dtype);
  j.src_size = (int64_t)tpu_dtype_size(src->dtype);
  tpu_parallel_for(j.walk.numel, WALK_GRAIN, walk_copy_chunk, &j);
}

/* A contiguous view of `ndim`/`sizes` at host pointer `ptr`. */
static inline tpu_view_t view_of(void* ptr, tpu_dtype_t dtype, int32_t ndim,
                                 const int64_t* sizes) {
  tpu_view_t v = {0};
  v.addr = (uint64_t)(uintptr_t)ptr;
  v.dtype = dtype;
  v.ndim = ndim;
  for (int32_t d = 0; d < ndim; ++d) v.sizes[d] = sizes[d];
  tpu_view_set_contiguous(&v);
  return v;
}

/* Wraps dim into [0, ndim) (0-dim tensors accept -1 and 0); false if out of range. */
static inline bool wrap_dim(int64_t dim, int32_t ndim, int64_t* out) {
  int64_t n = ndim > 0 ? ndim : 1;
  if (dim < -n || dim >= n) return false;
  *out = dim < 0 ? dim + n : dim;
  return true;
}

#endif /* TPU_KERNELS_VIEW_WALK_H_ */
