/* renorm_histc.h — the renorm_histc family's private interface
 * (renorm_histc.c and tests/test_distance.c). */
#ifndef TPU_KERNELS_RENORM_HISTC_H_
#define TPU_KERNELS_RENORM_HISTC_H_

#include "kernels/common/kernel_util.h"

typedef struct renorm_args {
  const tpu_view_t* in;
  double p, maxnorm;
  int32_t dim;
} renorm_args_t;

typedef struct histc_args {
  const tpu_view_t* in;
  int64_t bins;
  double min, max;
  tpu_view_t shape; /* [bins], self's dtype */
} histc_args_t;

tpu_status_t tpu_renorm_parse(const tpu_op_def_t* def, const tpu_node_t* node, renorm_args_t* a);
/* The scale of a slice of this norm, rounded to self's dtype. */
double tpu_renorm_factor(const renorm_args_t* a, double norm);

tpu_status_t tpu_histc_parse(const tpu_op_def_t* def, const tpu_node_t* node, histc_args_t* a);
/* The edges: min/max or the data's extrema (an error when not finite). */
tpu_status_t tpu_histc_edges(const histc_args_t* a, double* lo, double* hi);
/* The bin of x, -1 when outside [lo, hi] or NaN. */
int64_t tpu_histc_bin(const histc_args_t* a, double x, double lo, double hi);

/* Plain reference of both ops (tests). */
tpu_status_t tpu_renorm_histc_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                        tpu_exec_ctx_t* ctx);

extern const tpu_op_family_t tpu_family_renorm_histc;

#endif /* TPU_KERNELS_RENORM_HISTC_H_ */
