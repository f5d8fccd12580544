/* reduce_ref.c — the plain reference of coll_reduce: one element at a time,
 * each value read into its compute type with tpu_convert, combined in source
 * order, written back. Tests compare the kernels (and every rank's result)
 * with it. */
#include <string.h>

#include "comm.h"

typedef union {
  uint8_t b8;
  int64_t i64;
  float f32;
  double f64;
} ref_value_t;

static ref_value_t ref_combine(tpu_compute_type_t ct, tpu_reduce_op_t op, ref_value_t a,
                               ref_value_t b) {
  ref_value_t r = a;
  bool sum = op == TPU_REDUCE_SUM || op == TPU_REDUCE_AVG;
  if (ct == TPU_COMPUTE_B8) {
    bool x = a.b8, y = b.b8;
    r.b8 = (sum || op == TPU_REDUCE_MAX) ? (x || y) : (x && y);
  } else if (ct == TPU_COMPUTE_I64) {
    int64_t x = a.i64, y = b.i64;
    if (sum) r.i64 = (int64_t)((uint64_t)x + (uint64_t)y);
    else if (op == TPU_REDUCE_PRODUCT) r.i64 = (int64_t)((uint64_t)x * (uint64_t)y);
    else if (op == TPU_REDUCE_MIN) r.i64 = x < y ? x : y;
    else r.i64 = x > y ? x : y;
  } else if (ct == TPU_COMPUTE_F32) {
    float x = a.f32, y = b.f32;
    if (sum) r.f32 = x + y;
    else if (op == TPU_REDUCE_PRODUCT) r.f32 = x * y;
    else if (x != x || y != y) r.f32 = x != x ? x : y;
    else if (op == TPU_REDUCE_MIN) r.f32 = x < y ? x : y;
    else r.f32 = x > y ? x : y;
  } else {
    double x = a.f64, y = b.f64;
    if (sum) r.f64 = x + y;
    else if (op == TPU_REDUCE_PRODUCT) r.f64 = x * y;
    else if (x != x || y != y) r.f64 = x != x ? x : y;
    else if (op == TPU_REDUCE_MIN) r.f64 = x < y ? x : y;
    else r.f64 = x > y ? x : y;
  }
  return r;
}

void coll_reduce_ref(void* dst, const void* const* srcs, int nsrc, size_t n, tpu_dtype_t dtype,
                     tpu_reduce_op_t op, int divisor) {
  tpu_compute_type_t ct = tpu_dtype_compute(dtype);
  tpu_dtype_t cs = tpu_compute_storage_dtype(ct);
  size_t esize = tpu_dtype_size(dtype);
  for (size_t i = 0; i < n; ++i) {
    ref_value_t acc, v;
    memset(&acc, 0, sizeof(acc));
    tpu_convert(&acc, cs, 1, (const uint8_t*)srcs[0] + i * esize, dtype, 1, 1);
    for (int s = 1; s < nsrc; ++s) {
      memset(&v, 0, sizeof(v));
      tpu_convert(&v, cs, 1, (const uint8_t*)srcs[s] + i * esize, dtype, 1, 1);
      acc = ref_combine(ct, op, acc, v);
    }
    if (op == TPU_REDUCE_AVG) {
      if (ct == TPU_COMPUTE_I64) acc.i64 /= divisor;
      else if (ct == TPU_COMPUTE_F32) acc.f32 /= (float)divisor;
      else if (ct == TPU_COMPUTE_F64) acc.f64 /= (double)divisor;
    }
    tpu_convert((uint8_t*)dst + i * esize, dtype, 1, &acc, cs, 1, 1);
  }
}
