/* kernel_util.h — helpers shared by the row-wise kernel families (reduce,
 * softmax, norm, loss). Private to src/kernels (and their tests).
 *
 *   - node access by name: a row's attrs/inputs are looked up through its
 *     spec strings, so one kernel can serve rows whose ATen schemas carry
 *     different argument subsets (sum.dim_IntList vs sum.default);
 *   - PyTorch's dim wrapping;
 *   - ku_dims_t: a list of (size, stride) dims walked in row-major order,
 *     with gather/scatter of a flat range of its elements to and from a
 *     contiguous compute buffer. Every dtype conversion goes through
 *     ku_convert (tpu_convert, with typed loops generated from
 *     TPU_DTYPE_LIST for the to/from-double cases), so no family writes
 *     per-dtype loads or stores;
 *   - ku_iter_t: the "outer" dims shared by several views (input and
 *     outputs), reordered so view 0 walks memory forwards and merged where
 *     every view is contiguous, then indexed by a flat position.
 * Everything is static inline; nothing here allocates.
 */
#ifndef TPU_KERNELS_KERNEL_UTIL_H_
#define TPU_KERNELS_KERNEL_UTIL_H_

#include <stdbool.h>
#include <stdint.h>

#include "../kernel.h"

#define KU_MAX_VIEWS 6

/* ---- node access ---------------------------------------------------------- */

/* The node's attribute called `name` in the row's attrs spec; NULL when the
 * row has no such attribute (the tpu_attr_* readers then give the default). */
static inline const tpu_attr_t* ku_attr(const tpu_op_def_t* def, const tpu_node_t* node,
                                        const char* name) {
  int32_t i = tpu_spec_index(def->attrs, name);
  return (i >= 0 && i < node->num_attrs) ? &node->attrs[i] : NULL;
}

/* The input called `name` as a view; NULL when absent, None or a scalar. */
static inline const tpu_view_t* ku_input(const tpu_op_def_t* def, const tpu_node_t* node,
                                         const char* name) {
  int32_t i = tpu_spec_index(def->inputs, name);
  if (i < 0 || i >= node->num_inputs || node->inputs[i].kind != TPU_VALUE_VIEW) return NULL;
  return &node->inputs[i].u.view;
}

/* Turns a failed argument check into UNIMPLEMENTED (keeping its message),
 * for infer and check functions: the bridge then asks PyTorch's meta kernel
 * (which raises PyTorch's own error for bad arguments) or falls back. */
static inline tpu_status_t ku_unimplemented(tpu_status_t s) {
  if (s == TPU_OK || tpu_status_code(s) == TPU_CODE_UNIMPLEMENTED) return s;
  tpu_status_t u = tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s", tpu_status_message(s));
  tpu_status_free(s);
  return u;
}

/* PyTorch's maybe_wrap_dim: [-ndim, ndim) with a 0-dim tensor taking -1 and 0. */
static inline tpu_status_t ku_wrap_dim(int64_t dim, int32_t ndim, int32_t* out) {
  int32_t n = ndim > 0 ? ndim : 1;
  if (dim < -n || dim >= n)
    return tpu_status_make(TPU_CODE_INDEX_ERROR,
                           "Dimension out of range (expected to be in range of [%d, %d], but "
                           "got %lld)",
                           -n, n - 1, (long long)dim);
  *out = (int32_t)(dim < 0 ? dim + n : dim);
  return TPU_OK;
}

/* Address of the element at `off` (in elements) from the view's origin. */
static inline char* ku_at(const tpu_view_t* v, int64_t off) {
  return (char*)tpu_view_ptr(v) + off * (int64_t)tpu_dtype_size(v->dtype);
}

static inline bool ku_same_shape(const tpu_view_t* a, const tpu_view_t* b) {
  if (a->ndim != b->ndim) return false;
  for (int32_t d = 0; d < a->ndim; ++d)
    if (a->sizes[d] != b->sizes[d]) return false;
  return true;
}

/* ---- conversion to and from double ---------------------------------------- */
/* tpu_convert handles every dtype pair through an intermediate buffer, with
 * a cost per call; the row-wise families move almost everything between a
 * view and a double buffer, often in short runs, so those two directions get
 * direct typed loops, generated from TPU_DTYPE_LIST with tpu_convert's
 * semantics (bool reads as 0/1, halves via float32). Stores into integer
 * and bool dtypes keep going through tpu_convert. */

/* Element at p of dtype E (category K, storage T) as a double. */
#define KU_ELEM_F64_(E, K, T, p)                                                 \
  ((K) == 0 ? (double)(*(const uint8_t*)(p) != 0)                                \
   : TPU_DTYPE_##E == TPU_DTYPE_F16                                             \
       ? (double)tpu_f16_to_f32(*(const uint16_t*)(p))                          \
   : TPU_DTYPE_##E == TPU_DTYPE_BF16                                            \
       ? (double)tpu_bf16_to_f32(*(const uint16_t*)(p))                         \
       : (double)*(const T*)(p))

/* Stores double x at p as floating dtype E (storage T). */
#define KU_STORE_F64_(E, T, p, x)                                                \
  (TPU_DTYPE_##E == TPU_DTYPE_F16                                               \
       ? (void)(*(uint16_t*)(p) = tpu_f32_to_f16((float)(x)))                   \
   : TPU_DTYPE_##E == TPU_DTYPE_BF16                                            \
       ? (void)(*(uint16_t*)(p) = tpu_f32_to_bf16((float)(x)))                  \
       : (void)(*(T*)(p) = (T)(x)))

#define KU_CONVERT_FNS_(E, name, T, C, K)                                         \
  static inline void ku_to_f64_##E(double* dst, const void* src, int64_t stride, \
                                   int64_t n) {                                  \
    const T* s = (const T*)src;                                                  \
    for (int64_t i = 0; i < n; ++i) dst[i] = KU_ELEM_F64_(E, K, T, s + i * stride); \
  }                                                                              \
  static inline void ku_from_f64_##E(void* dst, int64_t stride, const double* src, \
                                     int64_t n) {                                \
    if ((K) != 2) {                                                              \
      tpu_convert(dst, TPU_DTYPE_##E, stride, src, TPU_DTYPE_F64, 1, n);         \
      return;                                                                    \
    }                                                                            \
    T* d = (T*)dst;                                                              \
    for (int64_t i = 0; i < n; ++i) KU_STORE_F64_(E, T, d + i * stride, src[i]); \
  }
TPU_DTYPE_LIST(KU_CONVERT_FNS_)
#undef KU_CONVERT_FNS_

typedef void (*ku_to_f64_fn)(double* dst, const void* src, int64_t stride, int64_t n);
typedef void (*ku_from_f64_fn)(void* dst, int64_t stride, const double* src, int64_t n);

/* tpu_convert with typed loops for (any -> contiguous double) and
 * (contiguous double -> any). */
static inline void ku_convert(void* dst, tpu_dtype_t dt, int64_t dstride, const void* src,
                              tpu_dtype_t st, int64_t sstride, int64_t n) {
  static const ku_to_f64_fn to_f64[TPU_DTYPE_COUNT] = {
#define KU_X_(E, name, T, C, K) ku_to_f64_##E,
      TPU_DTYPE_LIST(KU_X_)
#undef KU_X_
  };
  static const ku_from_f64_fn from_f64[TPU_DTYPE_COUNT] = {
#define KU_X_(E, name, T, C, K) ku_from_f64_##E,
      TPU_DTYPE_LIST(KU_X_)
#undef KU_X_
  };
  bool valid = (unsigned)dt < TPU_DTYPE_COUNT && (unsigned)st < TPU_DTYPE_COUNT;
  if (valid && dt == TPU_DTYPE_F64 && dstride == 1)
    to_f64[st]((double*)dst, src, sstride, n);
  else if (valid && st == TPU_DTYPE_F64 && sstride == 1)
    from_f64[dt](dst, dstride, (const double*)src, n);
  else
    tpu_convert(dst, dt, dstride, src, st, sstride, n);
}

/* ---- strided blocks ------------------------------------------------------- */

typedef struct ku_dims {
  int32_t n;
  int64_t size[TPU_MAX_DIMS];
  int64_t stride[TPU_MAX_DIMS];
} ku_dims_t;

/* Appends an inner dim; size-1 dims are dropped and a dim contiguous with the
 * previous one is merged into it (row-major order is kept). */
static inline void ku_dims_push(ku_dims_t* d, int64_t size, int64_t stride) {
  if (size == 1) return;
  if (d->n > 0 && d->stride[d->n - 1] == size * stride) {
    d->size[d->n - 1] *= size;
    d->stride[d->n - 1] = stride;
    return;
  }
  d->size[d->n] = size;
  d->stride[d->n] = stride;
  d->n++;
}

/* The trailing dims [first, ndim) of a view, collapsed. */
static inline void ku_dims_of_view(ku_dims_t* d, const tpu_view_t* v, int32_t first) {
  d->n = 0;
  for (int32_t i = first; i < v->ndim; ++i) ku_dims_push(d, v->sizes[i], v->strides[i]);
}

/* Gathers elements [k, k + n) of the block at `base` (dtype dt) into the
 * contiguous buffer `buf` (dtype bt), converting; the block must have at
 * least k + n elements. */
static inline void ku_gather(void* buf, tpu_dtype_t bt, const char* base, tpu_dtype_t dt,
                             const ku_dims_t* d, int64_t k, int64_t n) {
  int64_t bsz = (int64_t)tpu_dtype_size(bt), dsz = (int64_t)tpu_dtype_size(dt);
  char* out = (char*)buf;
  if (d->n == 0) {
    ku_convert(out, bt, 1, base, dt, 0, n);
    return;
  }
  int64_t idx[TPU_MAX_DIMS], off = 0, rem = k;
  for (int32_t j = d->n - 1; j >= 0; --j) {
    idx[j] = rem % d->size[j];
    rem /= d->size[j];
    off += idx[j] * d->stride[j];
  }
  int32_t last = d->n - 1;
  while (n > 0) {
    int64_t run = d->size[last] - idx[last];
    if (run > n) run = n;
    ku_convert(out, bt, 1, base + off * dsz, dt, d->stride[last], run);
    out += run * bsz;
    n -= run;
    idx[last] += run;
    off += run * d->stride[last];
    for (int32_t j = last; j > 0 && idx[j] == d->size[j]; --j) {
      off += d->stride[j - 1] - idx[j] * d->stride[j];
      idx[j] = 0;
      idx[j - 1]++;
    }
  }
}

/* The inverse of ku_gather: writes buf's n elements to [k, k + n). */
static inline void ku_scatter(char* base, tpu_dtype_t dt, const ku_dims_t* d, int64_t k,
                              const void* buf, tpu_dtype_t bt, int64_t n) {
  int64_t bsz = (int64_t)tpu_dtype_size(bt), dsz = (int64_t)tpu_dtype_size(dt);
  const char* in = (const char*)buf;
  if (d->n == 0) {
    ku_convert(base, dt, 0, in, bt, 1, n);
    return;
  }
  int64_t idx[TPU_MAX_DIMS], off = 0, rem = k;
  for (int32_t j = d->n - 1; j >= 0; --j) {
    idx[j] = rem % d->size[j];
    rem /= d->size[j];
    off += idx[j] * d->stride[j];
  }
  int32_t last = d->n - 1;
  while (n > 0) {
    int64_t run = d->size[last] - idx[last];
    if (run > n) run = n;
    ku_convert(base + off * dsz, dt, d->stride[last], in, bt, 1, run);
    in += run * bsz;
    n -= run;
    idx[last] += run;
    off += run * d->stride[last];
    for (int32_t j = last; j > 0 && idx[j] == d->size[j]; --j) {
      off += d->stride[j - 1] - idx[j] * d->stride[j];
      idx[j] = 0;
      idx[j - 1]++;
    }
  }
}

/* ---- outer dims of several views ------------------------------------------ */

typedef struct ku_iter {
  int32_t n, nviews;
  int64_t size[TPU_MAX_DIMS];
  int64_t stride[KU_MAX_VIEWS][TPU_MAX_DIMS];
} ku_iter_t;

/* Starts an iterator over `nviews` views with no dims (one position). */
static inline void ku_iter_init(ku_iter_t* it, int32_t nviews) {
  it->n = 0;
  it->nviews = nviews;
}

/* Adds a dim (any order); strides[v] is view v's stride along it. */
static inline void ku_iter_add(ku_iter_t* it, int64_t size, const int64_t* strides) {
  it->size[it->n] = size;
  for (int32_t v = 0; v < it->nviews; ++v) it->stride[v][it->n] = strides[v];
  it->n++;
}

/* Drops size-1 dims, orders dims by view 0's stride (largest first, stable)
 * and merges neighbours contiguous in every view. */
static inline void ku_iter_finish(ku_iter_t* it) {
  ku_iter_t s = *it;
  int32_t m = 0;
  for (int32_t i = 0; i < s.n; ++i) {
    if (s.size[i] == 1) continue;
    int32_t j = m++;
    for (; j > 0 && it->stride[0][j - 1] < s.stride[0][i]; --j) {
      it->size[j] = it->size[j - 1];
      for (int32_t v = 0; v < s.nviews; ++v) it->stride[v][j] = it->stride[v][j - 1];
    }
    it->size[j] = s.size[i];
    for (int32_t v = 0; v < s.nviews; ++v) it->stride[v][j] = s.stride[v][i];
  }
  it->n = 0;
  for (int32_t i = 0; i < m; ++i) {
    bool merge = it->n > 0;
    for (int32_t v = 0; merge && v < it->nviews; ++v)
      merge = it->stride[v][it->n - 1] == it->size[i] * it->stride[v][i];
    if (merge) {
      it->size[it->n - 1] *= it->size[i];
      for (int32_t v = 0; v < it->nviews; ++v) it->stride[v][it->n - 1] = it->stride[v][i];
    } else {
      it->size[it->n] = it->size[i];
      for (int32_t v = 0; v < it->nviews; ++v) it->stride[v][it->n] = it->stride[v][i];
      it->n++;
    }
  }
}

static inline int64_t ku_iter_numel(const ku_iter_t* it, int32_t ndims) {
  int64_t n = 1;
  for (int32_t i = 0; i < ndims; ++i) n *= it->size[i];
  return n;
}

/* Offsets (per view) of flat position k over the first `ndims` dims. */
static inline void ku_iter_offsets(const ku_iter_t* it, int32_t ndims, int64_t k, int64_t* offs) {
  for (int32_t v = 0; v < it->nviews; ++v) offs[v] = 0;
  for (int32_t j = ndims - 1; j >= 0; --j) {
    int64_t i = k % it->size[j];
    k /= it->size[j];
    for (int32_t v = 0; v < it->nviews; ++v) offs[v] += i * it->stride[v][j];
  }
}

#endif /* TPU_KERNELS_KERNEL_UTIL_H_ */
