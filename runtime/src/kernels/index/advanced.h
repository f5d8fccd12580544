/* advanced.h — the advanced-indexing family's private interface
 * (advanced.c, advanced_ref.c, tests/kernels/index/test_index_advanced.c).
 *
 * Every op of the family is a row move: for each "row" (o, b) it moves the
 * inner block I between a destination and a source, where o walks outer dims
 * O (laid out alike in both), b numbers the indexed positions (an offset
 * table per side) and I walks the inner dims:
 *   index.Tensor   dst = out,  src = self[o, off(b), i]  (gather)
 *   index_put      dst = self[o, off(b), i] (= or +=) values[o, b, i]
 *   take / put     O, I empty; b numbers index's elements
 *   index_fill/index_copy   O = dims before dim, I = dims after, b = index
 *   masked_select / masked_scatter / nonzero   b numbers the mask's ones
 */
#ifndef TPU_KERNELS_INDEX_PUT_H_
#define TPU_KERNELS_INDEX_PUT_H_

#include <stdbool.h>
#include <stdint.h>

#include "kernel.h"
#include "tpu/ops.h"

typedef enum ax_kind {
  AX_INDEX = 0,      /* index.Tensor */
  AX_INDEX_PUT,      /* _index_put_impl_ / index_put */
  AX_TAKE,
  AX_PUT,
  AX_INDEX_FILL,
  AX_INDEX_COPY,
  AX_MASKED_SELECT,
  AX_MASKED_SCATTER,
  AX_NONZERO,
  AX_NONZERO_STATIC,
  AX_REPEAT,         /* repeat_interleave.Tensor */
  AX_COUNT, /* the sync-size companion of a data-dependent row */
} ax_kind_t;

typedef struct ax_spec {
  ax_kind_t kind;
  ax_kind_t counts; /* AX_COUNT rows: which op's output size they count */
} ax_spec_t;

typedef struct ax_term {
  const tpu_view_t* idx; /* int64/int32 index, or bool mask */
  int32_t dim, ndims;    /* the self dims it consumes */
  bool mask;
} ax_term_t;

typedef struct ax_args {
  ax_kind_t kind, counted; /* counted: for AX_COUNT, the op whose size it counts */
  const tpu_view_t* self;
  const tpu_view_t* src;   /* values (index_put), source (put, index_copy, masked_scatter) */
  const tpu_view_t* mask;  /* masked ops */
  const tpu_view_t* index; /* take, put, index_fill, index_copy */
  const tpu_value_t* value; /* index_fill's scalar */
  bool accumulate;
  int32_t dim;
  int64_t sync; /* sync_size (-1: not given) */
  int64_t fill; /* nonzero_static */
  int32_t nterms, mask_term;
  ax_term_t terms[TPU_MAX_DIMS];
  bool adjacent;
  int32_t nO, nI, odims[TPU_MAX_DIMS], idims[TPU_MAX_DIMS];
  int32_t bnd;
  int64_t bsizes[TPU_MAX_DIMS];
  int32_t ndim;
  int64_t sizes[TPU_MAX_DIMS];
  tpu_dtype_t dtype;
} ax_args_t;

/* Parses and validates a node (count: the mask's ones when known, else -1
 * and the sync_size attr is used). UNIMPLEMENTED for what falls back. */
tpu_status_t tpu_ax_parse(const tpu_op_def_t* def, const tpu_node_t* node, int64_t count,
                          ax_args_t* a);

/* Right-aligned broadcast of sizes[n] into the running shape *nd/out. */
bool tpu_ax_bcast(int32_t* nd, int64_t* out, int32_t n, const int64_t* sizes);
/* a->ndim/sizes: the indexing result [O..., B..., I...] of a parsed index list. */
void tpu_ax_result_of_terms(ax_args_t* a);

/* Plain reference of every row (per-element loops over logical indices). */
tpu_status_t tpu_ax_reference(const tpu_op_def_t* def, const tpu_node_t* node);

#endif /* TPU_KERNELS_INDEX_PUT_H_ */
