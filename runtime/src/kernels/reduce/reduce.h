/* reduce.h — the reduction family's private interface, shared by reduce.c
 * (rows, argument parsing, shape inference, the optimised kernel),
 * reduce_ref.c (the reference kernel), tests/test_reduce.c and
 * tests/test_reduce_norms.c.
 *
 * Every row's `impl` is a reduce_impl_t: what is accumulated (acc) and what
 * is written from it (out). Argument parsing is shared so the optimised and
 * reference kernels see the same semantics (dims, keepdim, dtypes).
 */
#ifndef TPU_KERNELS_REDUCE_H_
#define TPU_KERNELS_REDUCE_H_

#include <stdbool.h>

#include "kernels/common/kernel_util.h"

typedef enum reduce_acc {
  RACC_SUM = 0, /* also mean */
  RACC_PROD,
  RACC_MAX,     /* NaN wins; first index among equals */
  RACC_MIN,
  RACC_ALL,
  RACC_ANY,
  RACC_MOMENTS, /* count, mean, M2 (var/std) */
  RACC_NANSUM,  /* sum skipping NaN */
  RACC_NONZERO, /* count of nonzero (NaN too) elements */
  RACC_NORM,    /* vector p-norm: the order is reduce_args_t.ord */
  RACC_LSE,     /* logsumexp: running shift and sum of exp(x - shift) */
  RACC_MINMAX,  /* aminmax: min and max */
  RACC_XOR,     /* hash_tensor: xor of the elements' 64-bit patterns (as float64 or int64) */
  RACC_COUNT,
} reduce_acc_t;

typedef enum reduce_out {
  ROUT_VALUE = 0,   /* the accumulated value */
  ROUT_VALUE_INDEX, /* values, indices (max.dim) */
  ROUT_INDEX,       /* indices only (argmax) */
  ROUT_MEAN,        /* sum / n */
  ROUT_VAR,
  ROUT_STD,
  ROUT_VAR_MEAN,    /* var, mean */
  ROUT_STD_MEAN,    /* std, mean */
  ROUT_NORM,        /* sum of |x|^p to the power 1/p (by order) */
  ROUT_LSE,         /* shift + log(sum) */
  ROUT_MINMAX,      /* min, max */
  ROUT_BITS,        /* the state's 64 bits, as uint64 (hash_tensor) */
} reduce_out_t;

typedef struct reduce_impl {
  reduce_acc_t acc;
  reduce_out_t out;
  bool empty_dims_reduce_all; /* dim=[] means all dims (sum) or none (all.dims) */
  const char* what;           /* name in PyTorch's messages ("max", "argmax") */
} reduce_impl_t;

/* A parsed reduction node. */
typedef struct reduce_args {
  const reduce_impl_t* impl;
  const tpu_view_t* in;
  bool reduced[TPU_MAX_DIMS];
  bool keepdim;
  double correction;       /* var/std: divisor is max(0, n - correction) */
  double ord;              /* norms: the order (attr "ord" or "p"; None is 2) */
  int64_t n;               /* elements reduced into each output */
  int32_t num_outputs;
  tpu_view_t shape[2];     /* expected outputs: dtype, ndim, sizes, contiguous strides */
} reduce_args_t;

/* Parses and validates a node (dims, dtypes, empty reductions). The errors
 * match PyTorch's (INDEX_ERROR for dims out of range, ...). */
tpu_status_t tpu_reduce_parse(const tpu_op_def_t* def, const tpu_node_t* node,
                              reduce_args_t* args);

/* The compute type values are accumulated in for this node, given the dtype
 * of its first output: F64 for floating work, I64 for integer/bool sums and
 * extrema (exact, wrapping like PyTorch), B8 for all/any. */
tpu_compute_type_t tpu_reduce_domain(const reduce_args_t* args, tpu_dtype_t out_dtype);

/* Checks the node's output views against the parsed shapes. */
tpu_status_t tpu_reduce_check_outputs(const reduce_args_t* args, const tpu_node_t* node);

/* The column-sum fast path (reduce_cols.c): whether it runs this node
 * (sum or mean of a contiguous float32/bfloat16/float16 input over one
 * block of dims followed by kept dims, into a contiguous output of the same
 * dtype), and running it. Float blocks of rows added in double: PyTorch
 * CPU's float32 accuracy or better, independent of the thread count. */
bool tpu_reduce_cols_applies(const reduce_args_t* args, const tpu_view_t* out);
tpu_status_t tpu_reduce_cols(const reduce_args_t* args, const tpu_view_t* out);

/* The reference kernel: plain loops in logical order, two-pass variance. */
tpu_status_t tpu_reduce_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx);

extern const tpu_op_family_t tpu_family_reduce;

/* Complex reductions (reduce_complex.c): the rows that take complex input
 * hand such nodes to these; sum and mean run the real row on the input's
 * (..., 2) real view, prod and the vector norms plain loops in double
 * complex (norms written in the part dtype). */
bool tpu_reduce_is_complex(const tpu_node_t* node);
tpu_status_t tpu_reduce_cx_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_view_t* out_views);
tpu_status_t tpu_reduce_cx_check(const tpu_op_def_t* def, const tpu_node_t* node);
tpu_status_t tpu_reduce_cx_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx);

#endif /* TPU_KERNELS_REDUCE_H_ */
