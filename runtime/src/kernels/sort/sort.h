/* sort.h — the sort/search family's private interface, shared by sort.c
 * (rows, parsing, the kernels), sort_ref.c (the reference kernels) and
 * tests/test_sort.c.
 *
 * Every dim op sees its input as rows along `dim`: sort and topk write m
 * (n or k) values and indices per row, kthvalue/median/nanmedian/mode one
 * (keepdim or not); median/nanmedian without dim write the value over the
 * whole tensor. searchsorted/bucketize are separate (search_*).
 */
#ifndef TPU_KERNELS_SORT_H_
#define TPU_KERNELS_SORT_H_

#include <stdbool.h>

#include "kernels/common/kernel_util.h"

typedef enum sort_kind {
  SK_SORT = 0,
  SK_TOPK,
  SK_KTH,
  SK_MEDIAN,
  SK_NANMEDIAN,
  SK_MODE,
  SK_MEDIAN_ALL,
  SK_NANMEDIAN_ALL,
  SK_SEARCH,   /* searchsorted(sorted_sequence, self) */
  SK_BUCKETIZE /* bucketize(self, boundaries) */
} sort_kind_t;

typedef struct sort_impl {
  sort_kind_t kind;
} sort_impl_t;

typedef struct sort_args {
  sort_kind_t kind;
  const tpu_view_t* in;
  int32_t dim; /* wrapped; 0 for a 0-dim input */
  int64_t n;   /* row length */
  int64_t k;   /* topk, kthvalue */
  int64_t m;   /* results per row */
  bool descending, stable, largest, sorted;
  int32_t num_outputs;
  tpu_view_t shape[2]; /* expected outputs: dtype, ndim, sizes, contiguous strides */
} sort_args_t;

/* Parses a dim op node (not searchsorted/bucketize). */
tpu_status_t tpu_sort_parse(const tpu_op_def_t* def, const tpu_node_t* node, sort_args_t* a);

/* The reference kernels: plain loops in double/int64 (insertion sorts,
 * counting selections). For sort/topk with ties the reference checks only
 * what the order does not decide: the test compares values exactly and that
 * each index points at its value (stable sort: indices exactly). */
tpu_status_t tpu_sort_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx);

extern const tpu_op_family_t tpu_family_sort;

#endif /* TPU_KERNELS_SORT_H_ */
