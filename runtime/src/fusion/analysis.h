/* analysis.h — what phase 1 (analyse.c) hands to the later phases of the
 * fusion compiler (internal to src/fusion/). */
#ifndef TPU_FUSION_ANALYSIS_H_
#define TPU_FUSION_ANALYSIS_H_

#include <stdbool.h>

#include "fusion/extent.h"
#include "fusion/fusion.h"

/* Longest run of nodes one tiled group holds, and its scratch slots. */
#define TPU_FUSION_MAX_GROUP 64
#define TPU_FUSION_MAX_SLOTS (4 * TPU_FUSION_MAX_GROUP) /* every output of a full group */

/* The value id of a view the graph reads before (or without) writing it. */
#define TPU_VALUE_EXTERNAL (-2)

/* Per-node flags. */
enum {
  TPU_NODE_TILEABLE = 1,   /* pointwise, may join a tiled group */
  TPU_NODE_CUT_BEFORE = 2, /* starts a new group */
  TPU_NODE_ROWS = 4,       /* a member of a row-tiled group */
  TPU_NODE_GEMM = 8,       /* a GEMM group's GEMM or epilogue node */
};

struct tpu_fusion_analysis {
  int32_t n;
  int32_t *in_base, *out_base; /* per node: index of its first input/output */
  uint8_t* flags;              /* per node */
  int8_t* group_k;             /* per node in a row-tiled group: the group's row dims */
  int8_t* row_k;               /* per node: its own row dims as a row-local op (0: not) */
  uint32_t* row_mask;          /* per row-local node: the inputs it reads by rows */
  int32_t *in_vid, *out_vid;   /* value ids of view inputs (-1: not a view), outputs */
  int32_t* out_free;           /* per output: node count when freed (n + 1: alive) */
  tpu_extent_t *in_ext, *out_ext; /* bytes each view input (empty: not a view), output touches */
  uint8_t* key;
  int64_t key_len, key_cap;
  uint64_t hash;
};

/* Identical views: same address, dtype, sizes and strides. */
bool tpu_fusion_same_view(const tpu_view_t* a, const tpu_view_t* b);
/* A hash of what tpu_fusion_same_view compares. */
uint64_t tpu_fusion_view_hash(const tpu_view_t* v);

/* Whether v has at least k dims and its leading k equal rows'. */
bool tpu_fusion_has_rows(const tpu_view_t* v, const tpu_view_t* rows, int32_t k);

/* Whether input j of a node in a row-tiled group with row dims k (rows: a
 * view whose leading k dims are the group's) is read a row at a time exactly
 * as an output with those rows is written: a row input of a row-local op, or
 * a pointwise input of its output's rank with the group's rows. */
bool tpu_fusion_reads_by_rows(const tpu_node_t* node, int32_t j, uint32_t row_mask,
                              const tpu_view_t* rows, int32_t k);

/* A GEMM group's view of an operand: `v`, an input or the output of a
 * pointwise node whose output is `out`, broadcast to out's shape and laid
 * over the elements of C (the group's GEMM result, [m, n] or [b, m, n]) as
 * the 3-D [b, m, n] view *out_form (b 1 for a 2-D C; strides of size-1 dims
 * 0). Possible when out has C's elements in C's order: its last dim is n,
 * its leading dims merge to m (to [b, m] for a 3-D C: then out has C's
 * shape), and v's strides merge alike. Two operands that are the same
 * elements of C have identical forms. False when not possible. */
bool tpu_fusion_gemm_form(const tpu_view_t* v, const tpu_view_t* out, const tpu_view_t* c,
                          tpu_view_t* out_form);

/* Whether a node can lead a GEMM group: a TPU_OP_EPILOGUE row with one
 * real, non-empty 2-D or 3-D output that writes none of its inputs. */
bool tpu_fusion_gemm_lead(const tpu_node_t* node);

/* Whether node i may follow nodes [first, i) in the GEMM group that node
 * `first` leads, as an epilogue node: it is pointwise with one output, every
 * operand has a form over C, what it reads that the group wrote it reads
 * through the identical form (the same elements of C, in step), what it
 * writes the GEMM does not read, and the epilogue nodes read or wrote it
 * only in step. Running it on each block of C right after the block's
 * earlier nodes then computes what running the nodes in order does. */
bool tpu_fusion_gemm_joins(const tpu_graph_t* graph, int32_t first, int32_t i);
/* The most inputs an epilogue node may have (tpu_fusion_gemm_joins). */
#define TPU_FUSION_EPILOGUE_MAX_INPUTS 16

#endif /* TPU_FUSION_ANALYSIS_H_ */
