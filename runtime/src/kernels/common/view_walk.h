/* view_walk.h — walking strided views, for every kernel family but the
 * elementwise one (internal; kernel_util.h includes it).
 *
 * A walk_t lays up to WALK_MAX_VIEWS views over one shape: a list of dims,
 * each with a size and one stride per view (strides in elements). Dims are
 * pushed outermost first; walk_push drops size-1 dims and merges a dim into
 * the previous one where every view is contiguous across the two, so a
 * contiguous tensor becomes a single dim. A walk with no dims left has one
 * element. Its elements are numbered in the order of its dims, row-major:
 *   - walk_range calls a function once per innermost run of the elements
 *     [begin, end), with each view's offset and step, so kernels convert or
 *     compute a whole run at a time. Built on it: walk_gather/walk_scatter
 *     (a range of view 0 to or from a contiguous buffer, converting) and
 *     view_copy (a parallel converting copy between two views);
 *   - walk_offsets gives the views' offsets of one element from its number,
 *     counting over the first `ndims` dims only: the families that keep an
 *     inner dim for themselves (a tile or block axis) index the rest so.
 * In pushed (logical) order, element i of a walk is element i of the shape
 * in row-major order whatever the strides: random numbers are drawn by that
 * index and reductions report it. When the order does not matter, walk_add
 * and walk_order instead sort the dims so view 0 is read forwards before
 * merging (the row-wise families do this with the dims they do not reduce).
 *
 * Also here: element addresses and single-element reads and writes,
 * right-aligned broadcasting of a view to a shape, shape comparison and
 * memory-overlap tests. Everything is static
 * inline; nothing here allocates.
 */
#ifndef TPU_KERNELS_VIEW_WALK_H_
#define TPU_KERNELS_VIEW_WALK_H_

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernel.h"
#include "tpu/dtype.h"
#include "tpu/ir.h"

#define WALK_MAX_VIEWS 6
/* Elements per parallel chunk for memory-bound loops. */
#define WALK_GRAIN 32768

typedef struct walk {
  int32_t ndim;   /* dims left after dropping and merging (0: one element) */
  int32_t nviews;
  int64_t numel;  /* elements, the product of every size pushed or added */
  int64_t sizes[TPU_MAX_DIMS];
  int64_t strides[WALK_MAX_VIEWS][TPU_MAX_DIMS]; /* [view][dim] */
} walk_t;

/* ---- building a walk ------------------------------------------------------ */

/* An empty walk over `nviews` views: no dims, one element. */
static inline void walk_start(walk_t* w, int32_t nviews) {
  w->ndim = 0;
  w->nviews = nviews;
  w->numel = 1;
}

/* Appends an inner dim; strides[v] is view v's stride along it. Size-1 dims
 * are dropped and a dim contiguous with the previous one in every view is
 * merged into it. */
static inline void walk_push(walk_t* w, int64_t size, const int64_t* strides) {
  w->numel *= size;
  if (size == 1) return;
  int32_t p = w->ndim - 1;
  bool merge = p >= 0;
  for (int32_t v = 0; merge && v < w->nviews; ++v)
    merge = w->strides[v][p] == strides[v] * size;
  if (merge) {
    w->sizes[p] *= size;
    for (int32_t v = 0; v < w->nviews; ++v) w->strides[v][p] = strides[v];
    return;
  }
  w->sizes[w->ndim] = size;
  for (int32_t v = 0; v < w->nviews; ++v) w->strides[v][w->ndim] = strides[v];
  w->ndim++;
}

/* Appends a dim as it is (no dropping or merging): for walk_order. */
static inline void walk_add(walk_t* w, int64_t size, const int64_t* strides) {
  w->numel *= size;
  w->sizes[w->ndim] = size;
  for (int32_t v = 0; v < w->nviews; ++v) w->strides[v][w->ndim] = strides[v];
  w->ndim++;
}

/* Orders the dims by view 0's stride, largest (outermost) first, keeping
 * the order of equal strides, then pushes them again: size-1 dims go, and
 * dims contiguous in every view merge. */
static inline void walk_order(walk_t* w) {
  walk_t s = *w;
  int32_t order[TPU_MAX_DIMS], m = 0;
  for (int32_t i = 0; i < s.ndim; ++i) {
    if (s.sizes[i] == 1) continue;
    int32_t j = m++;
    for (; j > 0 && s.strides[0][order[j - 1]] < s.strides[0][i]; --j) order[j] = order[j - 1];
    order[j] = i;
  }
  walk_start(w, s.nviews);
  for (int32_t i = 0; i < m; ++i) {
    int64_t strides[WALK_MAX_VIEWS];
    for (int32_t v = 0; v < s.nviews; ++v) strides[v] = s.strides[v][order[i]];
    walk_push(w, s.sizes[order[i]], strides);
  }
}

/* Lays `nviews` stride arrays (each of `ndim` entries) over `sizes`. */
static inline void walk_init(walk_t* w, int32_t ndim, const int64_t* sizes, int32_t nviews,
                             const int64_t* const* strides) {
  walk_start(w, nviews);
  for (int32_t d = 0; d < ndim; ++d) {
    int64_t st[WALK_MAX_VIEWS];
    for (int32_t v = 0; v < nviews; ++v) st[v] = strides[v][d];
    walk_push(w, sizes[d], st);
  }
}

/* Lays views that all have the shape of views[0] (sizes of the others are not read). */
static inline void walk_init_views(walk_t* w, int32_t nviews, const tpu_view_t* const* views) {
  const int64_t* strides[WALK_MAX_VIEWS];
  for (int32_t v = 0; v < nviews; ++v) strides[v] = views[v]->strides;
  walk_init(w, views[0]->ndim, views[0]->sizes, nviews, strides);
}

/* One view's trailing dims [first, ndim). */
static inline void walk_init_tail(walk_t* w, const tpu_view_t* v, int32_t first) {
  const int64_t* strides[1] = {v->strides + first};
  walk_init(w, v->ndim - first, v->sizes + first, 1, strides);
}

/* ---- walking ---------------------------------------------------------------- */

/* Elements of the first `ndims` dims. */
static inline int64_t walk_outer_numel(const walk_t* w, int32_t ndims) {
  int64_t n = 1;
  for (int32_t d = 0; d < ndims; ++d) n *= w->sizes[d];
  return n;
}

/* offs[v]: view v's offset of element k, numbering over the first `ndims` dims. */
static inline void walk_offsets(const walk_t* w, int32_t ndims, int64_t k, int64_t* offs) {
  for (int32_t v = 0; v < w->nviews; ++v) offs[v] = 0;
  for (int32_t d = ndims - 1; d >= 0; --d) {
    int64_t i = k % w->sizes[d];
    k /= w->sizes[d];
    for (int32_t v = 0; v < w->nviews; ++v) offs[v] += i * w->strides[v][d];
  }
}

/* offsets[v]: offset in view v of the run's first element; steps[v]: view
 * v's step along the run; first: the number of that element. */
typedef void (*walk_run_fn)(void* arg, const int64_t* offsets, const int64_t* steps, int64_t n,
                            int64_t first);

/* Calls fn once per innermost run of elements [begin, end), in order. */
static inline void walk_range(const walk_t* w, int64_t begin, int64_t end, walk_run_fn fn,
                              void* arg) {
  if (begin >= end) return;
  int64_t idx[TPU_MAX_DIMS], offs[WALK_MAX_VIEWS] = {0}, steps[WALK_MAX_VIEWS] = {0};
  if (w->ndim == 0) { /* a single element */
    fn(arg, offs, steps, end - begin, begin);
    return;
  }
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

/* A contiguous buffer and the elements of view 0 it moves to or from. */
typedef struct walk_move {
  char* buf;
  tpu_dtype_t buf_dtype;
  int64_t buf_size;
  char* base; /* view 0's origin */
  tpu_dtype_t dtype;
  int64_t size;
  int64_t first; /* element held by buf[0] */
  bool load;     /* view -> buffer, else buffer -> view */
} walk_move_t;

static inline void walk_move_run(void* arg, const int64_t* offs, const int64_t* steps, int64_t n,
                                 int64_t first) {
  const walk_move_t* m = (const walk_move_t*)arg;
  char* b = m->buf + (first - m->first) * m->buf_size;
  char* e = m->base + offs[0] * m->size;
  if (m->load)
    tpu_convert(b, m->buf_dtype, 1, e, m->dtype, steps[0], n);
  else
    tpu_convert(e, m->dtype, steps[0], b, m->buf_dtype, 1, n);
}

/* Gathers elements [k, k + n) of view 0 (at `base`, dtype `dt`) into the
 * contiguous buffer `buf` of dtype `bt`, converting. */
static inline void walk_gather(void* buf, tpu_dtype_t bt, const void* base, tpu_dtype_t dt,
                               const walk_t* w, int64_t k, int64_t n) {
  walk_move_t m = {(char*)buf, bt, (int64_t)tpu_dtype_size(bt), (char*)base, dt,
                   (int64_t)tpu_dtype_size(dt), k, true};
  walk_range(w, k, k + n, walk_move_run, &m);
}

/* The inverse of walk_gather: writes buf's n elements to [k, k + n). */
static inline void walk_scatter(void* base, tpu_dtype_t dt, const walk_t* w, int64_t k,
                                const void* buf, tpu_dtype_t bt, int64_t n) {
  walk_move_t m = {(char*)buf, bt, (int64_t)tpu_dtype_size(bt), (char*)base, dt,
                   (int64_t)tpu_dtype_size(dt), k, false};
  walk_range(w, k, k + n, walk_move_run, &m);
}

/* A whole view in a new contiguous buffer of dtype `bt`, converting; the
 * caller owns it (free). NULL when out of memory; an empty view gets a
 * one-element buffer, so NULL always means failure. */
static inline void* walk_gather_view(const tpu_view_t* v, tpu_dtype_t bt) {
  int64_t n = tpu_view_numel(v);
  void* buf = malloc((size_t)(n > 0 ? n : 1) * tpu_dtype_size(bt));
  if (buf && n > 0) {
    walk_t w;
    walk_init_tail(&w, v, 0);
    walk_gather(buf, bt, tpu_view_ptr(v), v->dtype, &w, 0, n);
  }
  return buf;
}

/* The inverse: writes a contiguous buffer of dtype `bt` (borrowed) to the
 * whole view, converting. */
static inline void walk_scatter_view(const tpu_view_t* v, const void* buf, tpu_dtype_t bt) {
  int64_t n = tpu_view_numel(v);
  if (n <= 0) return;
  walk_t w;
  walk_init_tail(&w, v, 0);
  walk_scatter(tpu_view_ptr(v), v->dtype, &w, 0, buf, bt, n);
}

/* ---- views ---------------------------------------------------------------- */

/* Address of the element at `offset` (in elements) from the view's origin. */
static inline char* view_at(const tpu_view_t* v, int64_t offset) {
  return (char*)tpu_view_ptr(v) + offset * (int64_t)tpu_dtype_size(v->dtype);
}

/* One element, at `offset` (in elements), as float64 or int64 and back,
 * with tpu_convert's casts: for per-element code (the reference kernels,
 * per-row statistics, 0-dim scalars). */
static inline double view_get_f64(const tpu_view_t* v, int64_t offset) {
  double x;
  tpu_convert(&x, TPU_DTYPE_F64, 1, view_at(v, offset), v->dtype, 1, 1);
  return x;
}
static inline int64_t view_get_i64(const tpu_view_t* v, int64_t offset) {
  int64_t x;
  tpu_convert(&x, TPU_DTYPE_I64, 1, view_at(v, offset), v->dtype, 1, 1);
  return x;
}
static inline void view_set_f64(const tpu_view_t* v, int64_t offset, double x) {
  tpu_convert(view_at(v, offset), v->dtype, 1, &x, TPU_DTYPE_F64, 1, 1);
}
static inline void view_set_i64(const tpu_view_t* v, int64_t offset, int64_t x) {
  tpu_convert(view_at(v, offset), v->dtype, 1, &x, TPU_DTYPE_I64, 1, 1);
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

static inline bool views_same_shape(const tpu_view_t* a, const tpu_view_t* b) {
  if (a->ndim != b->ndim) return false;
  for (int32_t d = 0; d < a->ndim; ++d)
    if (a->sizes[d] != b->sizes[d]) return false;
  return true;
}

/* The same elements in the same layout (strides of size-1 dims aside). */
static inline bool views_same(const tpu_view_t* a, const tpu_view_t* b) {
  if (a->addr != b->addr || a->dtype != b->dtype || a->ndim != b->ndim) return false;
  for (int32_t d = 0; d < a->ndim; ++d)
    if (a->sizes[d] != b->sizes[d] || (a->sizes[d] > 1 && a->strides[d] != b->strides[d]))
      return false;
  return true;
}

/* True when the bytes two views can touch intersect (conservative). */
static inline bool views_overlap(const tpu_view_t* a, const tpu_view_t* b) {
  return tpu_views_may_overlap(a, b);
}

/* ---- converting copy ---------------------------------------------------- */

typedef struct walk_copy_job {
  walk_t walk; /* view 0: dst, 1: src */
  char *dst, *src;
  tpu_dtype_t dst_dtype, src_dtype;
  int64_t dst_size, src_size;
} walk_copy_job_t;

static inline void walk_copy_run(void* arg, const int64_t* offs, const int64_t* steps, int64_t n,
                                 int64_t first) {
  (void)first;
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

#endif /* TPU_KERNELS_VIEW_WALK_H_ */
