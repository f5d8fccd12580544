/* distance.h — the distance family's private interface (distance.c,
 * distance_ref.c, tests/test_distance.c). */
#ifndef TPU_KERNELS_DISTANCE_H_
#define TPU_KERNELS_DISTANCE_H_

#include "kernels/common/kernel_util.h"

typedef enum dist_kind {
  DIST_CDIST = 0,      /* _cdist_forward(x1, x2, p, compute_mode) */
  DIST_CDIST_BACKWARD, /* _cdist_backward(grad, x1, x2, p, cdist): grad of x1 */
  DIST_PDIST,          /* _pdist_forward(self, p): condensed i < j distances */
  DIST_PDIST_BACKWARD, /* _pdist_backward(grad, self, p, pdist) */
} dist_kind_t;

typedef struct dist_spec {
  dist_kind_t kind;
} dist_spec_t;

/* How p is applied: counts, |d|, d^2, max |d|, p < 2 and other p. */
typedef enum dist_mode { DMODE_P0 = 0, DMODE_P1, DMODE_P2, DMODE_INF, DMODE_LT2, DMODE_GEN } dist_mode_t;

typedef struct dist_args {
  dist_kind_t kind;
  double p;
  const tpu_view_t *x1, *x2, *grad, *dist; /* pdist: x1 == x2 == self */
  int64_t r1, r2, m;                       /* rows of x1, of x2, coordinates */
  int32_t nbatch;                          /* broadcast batch dims */
  int64_t bsizes[TPU_MAX_DIMS];
  int64_t batch;                           /* their product */
  tpu_view_t shape;                        /* output 0: dtype, sizes, contiguous strides */
} dist_args_t;

tpu_status_t tpu_dist_parse(const tpu_op_def_t* def, const tpu_node_t* node, dist_args_t* a);
dist_mode_t tpu_dist_mode(double p);

/* Plain reference: per output element, double accumulation. */
tpu_status_t tpu_distance_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                    tpu_exec_ctx_t* ctx);

extern const tpu_op_family_t tpu_family_distance;

#endif /* TPU_KERNELS_DISTANCE_H_ */
