/* index.h — the index family's private interface (index.c, index_ref.c,
 * tests/test_index.c): which op a row is, and the argument parsing and
 * validation the kernels and the reference share, so both see the same
 * semantics (dim wrapping, PyTorch's shape rules, result shape and dtype).
 */
#ifndef TPU_KERNELS_INDEX_H_
#define TPU_KERNELS_INDEX_H_

#include <stdbool.h>
#include <stdint.h>

#include "kernel.h"
#include "tpu/ops.h"

typedef enum ix_kind {
  IX_INDEX_SELECT = 0, /* out[.., j, ..] = self[.., index[j], ..] */
  IX_GATHER,           /* out[i] = self[i with dim -> index[i]] */
  IX_SCATTER,          /* out = self; out[i with dim -> index[i]] = src[i] */
  IX_SCATTER_VALUE,    /* ... = value */
  IX_SCATTER_ADD,      /* ... += src[i] */
  IX_INDEX_ADD,        /* out = self; out[.., index[j], ..] += alpha * source[.., j, ..] */
  IX_EMBEDDING_BACKWARD,
  IX_CAT,
} ix_kind_t;

typedef struct ix_spec {
  ix_kind_t kind;
} ix_spec_t;

/* A node's arguments, validated. */
typedef struct ix_args {
  ix_kind_t kind;
  const tpu_view_t* self;   /* self; grad_output (embedding); NULL for cat */
  const tpu_view_t* index;  /* index; indices (embedding) */
  const tpu_view_t* src;    /* src / source; NULL otherwise */
  const tpu_value_t* value; /* scatter_value's scalar */
  int32_t dim;              /* wrapped (0 when the indexed tensor is 0-dim) */
  double alpha;             /* index_add, floating dtypes */
  int64_t ialpha;           /* index_add, integer dtypes */
  int64_t num_weights, padding_idx;
  bool scale_grad_by_freq;
  int32_t ndim; /* the result */
  int64_t sizes[TPU_MAX_DIMS];
  tpu_dtype_t dtype;
} ix_args_t;

/* Parses and validates: INVALID_ARGUMENT / INDEX_ERROR for what PyTorch
 * rejects, UNIMPLEMENTED for dtypes the family does not run natively. */
tpu_status_t tpu_ix_parse(const tpu_op_def_t* def, const tpu_node_t* node, ix_args_t* a);

/* Checks that `out` has the result's shape (and dtype, except for cat). */
tpu_status_t tpu_ix_check_out(const ix_args_t* a, const tpu_view_t* out);

/* The message every out-of-range index produces. */
tpu_status_t tpu_ix_out_of_bounds(tpu_status_code_t code, int64_t index, int32_t dim, int64_t size);

/* Plain reference: per-element loops, double (or int64) arithmetic. */
tpu_status_t tpu_index_reference(const tpu_op_def_t* def, const tpu_node_t* node);

#endif /* TPU_KERNELS_INDEX_H_ */
