/* reduce.c — the collectives' reduction kernels: dst = op(srcs...) in source
 * order, computed in the dtype's compute type (half types in float32, integers
 * in int64, bool as 0/1 bytes), generated from the compute-type table. A dtype
 * that is its own compute type (bool, int64, float32, float64) is combined in
 * place; the others go through tpu_convert a stack chunk at a time.
 *
 * Single-threaded on purpose: every rank reduces its own share at the same
 * time on a host whose cores the ranks share, and the loops are bound by
 * memory bandwidth. */
#include <string.h>

#include "comm.h"

/* X(compute type, C type) */
#define COLL_COMPUTE_TYPES(X) X(B8, uint8_t) X(I64, int64_t) X(F32, float) X(F64, double)

/* Sums and products: bool is or / and; int64 wraps (computed unsigned). */
#define COLL_SUM_B8(a, b) ((uint8_t)((a) | (b)))
#define COLL_SUM_I64(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))
#define COLL_SUM_F32(a, b) ((a) + (b))
#define COLL_SUM_F64(a, b) ((a) + (b))
#define COLL_PROD_B8(a, b) ((uint8_t)((a) & (b)))
#define COLL_PROD_I64(a, b) ((int64_t)((uint64_t)(a) * (uint64_t)(b)))
#define COLL_PROD_F32(a, b) ((a) * (b))
#define COLL_PROD_F64(a, b) ((a) * (b))
/* min/max propagate NaN (as torch.minimum/maximum do). */
#define COLL_MIN(a, b) (((a) < (b) || (a) != (a)) ? (a) : (b))
#define COLL_MAX(a, b) (((a) > (b) || (a) != (a)) ? (a) : (b))

typedef void (*combine_fn)(void* acc, const void* b, size_t n);
typedef void (*divide_fn)(void* acc, size_t n, int divisor);

enum { COMBINE_SUM = 0, COMBINE_MIN, COMBINE_MAX, COMBINE_PROD, COMBINE_COUNT };

#define COLL_DEFINE(CT, T)                                                                   \
  static void sum_##CT(void* acc, const void* b, size_t n) {                                 \
    T* a = acc;                                                                              \
    const T* s = b;                                                                          \
    for (size_t i = 0; i < n; ++i) a[i] = COLL_SUM_##CT(a[i], s[i]);                         \
  }                                                                                          \
  static void prod_##CT(void* acc, const void* b, size_t n) {                                \
    T* a = acc;                                                                              \
    const T* s = b;                                                                          \
    for (size_t i = 0; i < n; ++i) a[i] = COLL_PROD_##CT(a[i], s[i]);                        \
  }                                                                                          \
  static void min_##CT(void* acc, const void* b, size_t n) {                                 \
    T* a = acc;                                                                              \
    const T* s = b;                                                                          \
    for (size_t i = 0; i < n; ++i) a[i] = COLL_MIN(a[i], s[i]);                              \
  }                                                                                          \
  static void max_##CT(void* acc, const void* b, size_t n) {                                 \
    T* a = acc;                                                                              \
    const T* s = b;                                                                          \
    for (size_t i = 0; i < n; ++i) a[i] = COLL_MAX(a[i], s[i]);                              \
  }                                                                                          \
  static void div_##CT(void* acc, size_t n, int divisor) {                                   \
    T* a = acc;                                                                              \
    for (size_t i = 0; i < n; ++i) a[i] = (T)(a[i] / (T)divisor);                            \
  }
COLL_COMPUTE_TYPES(COLL_DEFINE)
#undef COLL_DEFINE

static const combine_fn g_combine[TPU_COMPUTE_COUNT][COMBINE_COUNT] = {
#define COLL_ROW(CT, T) [TPU_COMPUTE_##CT] = {sum_##CT, min_##CT, max_##CT, prod_##CT},
    COLL_COMPUTE_TYPES(COLL_ROW)
#undef COLL_ROW
};

static const divide_fn g_divide[TPU_COMPUTE_COUNT] = {
#define COLL_ROW(CT, T) [TPU_COMPUTE_##CT] = div_##CT,
    COLL_COMPUTE_TYPES(COLL_ROW)
#undef COLL_ROW
};

static int combine_index(tpu_reduce_op_t op) {
  static const int index[TPU_REDUCE_OP_COUNT] = {
      [TPU_REDUCE_SUM] = COMBINE_SUM, [TPU_REDUCE_AVG] = COMBINE_SUM,
      [TPU_REDUCE_MIN] = COMBINE_MIN, [TPU_REDUCE_MAX] = COMBINE_MAX,
      [TPU_REDUCE_PRODUCT] = COMBINE_PROD};
  return index[op];
}

void coll_reduce(void* dst, const void* const* srcs, int nsrc, size_t n, tpu_dtype_t dtype,
                 tpu_reduce_op_t op, int divisor) {
  tpu_compute_type_t ct = tpu_dtype_compute(dtype);
  tpu_dtype_t cs = tpu_compute_storage_dtype(ct);
  size_t esize = tpu_dtype_size(dtype);
  combine_fn combine = g_combine[ct][combine_index(op)];
  bool avg = op == TPU_REDUCE_AVG && ct != TPU_COMPUTE_B8;
  if (dtype == cs) {
    if (n && dst != srcs[0]) memmove(dst, srcs[0], n * esize);
    for (int s = 1; s < nsrc; ++s) combine(dst, srcs[s], n);
    if (avg) g_divide[ct](dst, n, divisor);
    return;
  }
  enum { CHUNK = 512 };
  uint64_t acc[CHUNK], tmp[CHUNK]; /* 8 bytes: the widest compute type */
  for (size_t off = 0; off < n; off += CHUNK) {
    size_t m = n - off < CHUNK ? n - off : CHUNK;
    tpu_convert(acc, cs, 1, (const uint8_t*)srcs[0] + off * esize, dtype, 1, (int64_t)m);
    for (int s = 1; s < nsrc; ++s) {
      tpu_convert(tmp, cs, 1, (const uint8_t*)srcs[s] + off * esize, dtype, 1, (int64_t)m);
      combine(acc, tmp, m);
    }
    if (avg) g_divide[ct](acc, m, divisor);
    tpu_convert((uint8_t*)dst + off * esize, dtype, 1, acc, cs, 1, (int64_t)m);
  }
}
