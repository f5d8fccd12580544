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

#endif /* TPU_FUSION_ANALYSIS_H_ */
