/* analysis.h — what phase 1 (analyse.c) hands to the later phases of the
 * fusion compiler (internal to src/fusion/). */
#ifndef TPU_FUSION_ANALYSIS_H_
#define TPU_FUSION_ANALYSIS_H_

#include <stdbool.h>

#include "fusion/fusion.h"

/* Longest run of nodes one tiled group holds, and its scratch slots. */
#define TPU_FUSION_MAX_GROUP 64
#define TPU_FUSION_MAX_SLOTS 16

/* The value id of a view the graph reads before (or without) writing it. */
#define TPU_VALUE_EXTERNAL (-2)

/* Per-node flags. */
enum {
  TPU_NODE_TILEABLE = 1,   /* pointwise, may join a tiled group */
  TPU_NODE_CUT_BEFORE = 2, /* starts a new group */
  TPU_NODE_DEAD_OUT = 4,   /* its output's buffer is freed before the flush */
};

struct tpu_fusion_analysis {
  int32_t n;
  int32_t *in_base, *out_base; /* per node: index of its first input/output */
  uint8_t* flags;              /* per node */
  int32_t *in_vid, *out_vid;   /* value ids of view inputs (-1: not a view), outputs */
  int32_t* out_free;           /* per output: node count when freed (n + 1: alive) */
  uint8_t* key;
  int64_t key_len, key_cap;
  uint64_t hash;
};

/* Identical views: same address, dtype, sizes and strides. */
bool tpu_fusion_same_view(const tpu_view_t* a, const tpu_view_t* b);

#endif /* TPU_FUSION_ANALYSIS_H_ */
