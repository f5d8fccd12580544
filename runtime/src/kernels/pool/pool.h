/* pool.h — the pooling family's private interface, shared by pool.c (rows,
 * parsing, the optimised kernels), pool_ref.c (the reference kernels) and
 * tests/test_pool.c.
 *
 * Every pooling op sees its input as P planes (the leading batch/channel
 * dims, one or two of them) of up to three spatial dims; 1-d and 2-d ops are
 * run as 3-d ones with leading spatial dims of size 1. Windows follow
 * PyTorch's CPU kernels exactly:
 *   max:      start = o * stride - pad, elements start + j * dilation inside
 *             [0, I), j < kernel; the first element is the initial index,
 *             a larger value or a NaN replaces the running maximum;
 *   avg:      [o * stride - pad, min(that + kernel, I + pad)) clipped to
 *             [0, I); divisor: divisor_override, else the unclipped window
 *             (count_include_pad) or the clipped one;
 *   adaptive: [floor(o * I / O), ceil((o + 1) * I / O)).
 * Indices are flat positions within an input plane. Backward ops scatter
 * grad_output into a zeroed grad_input plane in output order, rounding to
 * the storage dtype after every addition and division (a half type divided
 * by an integer divides by the integer rounded to that type) as the CPU
 * kernels do; adaptive_avg_pool3d on half types also sums in the storage
 * type, as the CPU does.
 */
#ifndef TPU_KERNELS_POOL_H_
#define TPU_KERNELS_POOL_H_

#include <stdbool.h>
#include <stdint.h>

#include "kernels/common/kernel_util.h"

typedef enum pool_kind {
  POOL_MAX = 0,   /* max_pool{2,3}d_with_indices */
  POOL_AVG,       /* avg_pool{2,3}d */
  POOL_ADAPTIVE_AVG,
  POOL_ADAPTIVE_MAX,
} pool_kind_t;

typedef struct pool_impl {
  pool_kind_t kind;
  int32_t nsp; /* spatial dims: 2 or 3 */
  bool backward;
} pool_impl_t;

typedef struct pool_args {
  const pool_impl_t* impl;
  const tpu_view_t* x;   /* self */
  const tpu_view_t* g;   /* backward: grad_output */
  const tpu_view_t* idx; /* max backward: indices */
  int32_t lead;          /* plane dims before the spatial ones (1 or 2) */
  int64_t planes;
  /* Per spatial dim, padded to 3 (dim 0 unused by 2-d ops: size 1). */
  int64_t in[3], k[3], s[3], p[3], d[3];
  bool count_include_pad, has_divisor;
  int64_t divisor;
  int64_t out_attr[3]; /* adaptive forward: output_size */
} pool_args_t;

/* Parses and validates a node (what the family does not run natively, or
 * what PyTorch rejects, gives UNIMPLEMENTED). */
tpu_status_t tpu_pool_parse(const tpu_op_def_t* def, const tpu_node_t* node, pool_args_t* a);

/* Output spatial sizes of a node whose outputs are set (forward: output 0;
 * backward: grad_output), padded to 3. */
void tpu_pool_out_sizes(const pool_args_t* a, const tpu_node_t* node, int64_t* out);

/* max_unpool: self, indices and output_size (UNIMPLEMENTED when not native). */
tpu_status_t tpu_unpool_parse(const tpu_op_def_t* def, const tpu_node_t* node,
                              const tpu_view_t** x, const tpu_view_t** idx, int64_t* osz);

/* The reference kernel: per element in double, with view_get/set. */
tpu_status_t tpu_pool_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx);

/* The padding family's reference (pad.c). */
tpu_status_t tpu_pad_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_exec_ctx_t* ctx);

#endif /* TPU_KERNELS_POOL_H_ */
