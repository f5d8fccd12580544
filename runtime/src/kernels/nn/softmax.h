/* softmax.h — the softmax family's private interface, shared by softmax.c
 * (rows, parsing, inference, the optimised kernel), softmax_ref.c (the
 * reference kernel) and tests/test_softmax.c.
 *
 * A node works on "rows": the elements along `dim`, for every index of the
 * other dims. Forward ops read self and write out; backward ops read
 * grad_output and output (the forward result) and write grad_input.
 */
#ifndef TPU_KERNELS_SOFTMAX_H_
#define TPU_KERNELS_SOFTMAX_H_

#include <stdbool.h>

#include "kernels/common/kernel_util.h"

typedef struct softmax_impl {
  bool log;      /* log_softmax */
  bool backward;
} softmax_impl_t;

typedef struct softmax_args {
  const softmax_impl_t* impl;
  const tpu_view_t* x; /* forward: self; backward: output */
  const tpu_view_t* g; /* backward: grad_output; forward: NULL */
  int32_t dim;         /* wrapped; for 0-dim tensors rows have one element */
  tpu_view_t shape;    /* the output: dtype, ndim, sizes, contiguous strides */
} softmax_args_t;

/* Parses and validates a node; dtype combinations the family does not run
 * give UNIMPLEMENTED (the fallback then raises PyTorch's own error). */
tpu_status_t tpu_softmax_parse(const tpu_op_def_t* def, const tpu_node_t* node,
                               softmax_args_t* args);

/* The reference kernel: one row at a time, element reads in double. */
tpu_status_t tpu_softmax_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                   tpu_exec_ctx_t* ctx);

/* softmax_rows512.c: forward (log_)softmax of rows [begin, end) of `len`
 * contiguous elements, x (dtype xd) into y (dtype yd), each of float32,
 * float16 or bfloat16, not overlapping; AVX-512 code, to be called only
 * when tpu_softmax_rows512_ok() (the CPU has AVX-512 F/BW/VL and FMA, and
 * the path is enabled). Borrows x and y. */
bool tpu_softmax_rows512_ok(void);
void tpu_softmax_rows512(const void* x, tpu_dtype_t xd, void* y, tpu_dtype_t yd, int64_t len,
                         bool log_, int64_t begin, int64_t end);
/* Tests: off makes tpu_softmax_rows512_ok() false, so the portable float32
 * loops run (on by default). */
void tpu_softmax_rows512_set_enabled(bool on);

extern const tpu_op_family_t tpu_family_softmax;

#endif /* TPU_KERNELS_SOFTMAX_H_ */
