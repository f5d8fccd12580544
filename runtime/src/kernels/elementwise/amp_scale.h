/* amp_scale.h — the amp_scale family: the two ops of torch.amp.GradScaler,
 * float16 mixed precision's loss scaling.
 *
 *   amp_unscale  (_amp_foreach_non_finite_check_and_unscale_), TPU_OP_FOREACH:
 *     inputs  self*! (the scaled gradients, one per node), found_inf! and
 *             inv_scale (one-element float32 views, shared by every node)
 *     per element, in the compute type (float32; float64 for float64):
 *             found_inf = 1 where self is inf or nan; self = self * inv_scale
 *             (self is left as it is when inv_scale == 1)
 *   amp_update_scale  (_amp_update_scale_):
 *     inputs  self (the scale, one float32 element; also output 0),
 *             growth_tracker! (one int32 element), found_inf (one float32)
 *     attrs   scale_growth_factor, scale_backoff_factor, growth_interval
 *     found_inf != 0:  scale *= backoff, growth_tracker = 0; otherwise
 *     growth_tracker + 1 reaching growth_interval grows the scale (kept when
 *     the grown scale would not be finite) and resets the tracker, else the
 *     tracker counts on.
 *
 * The values match ATen's CPU kernels bit for bit. Gradients must be
 * contiguous and of a floating dtype, the scalars of the dtypes above;
 * anything else falls back to the CPU kernel, which raises PyTorch's own
 * errors ("found_inf must be a float tensor.").
 */
#ifndef TPU_KERNELS_AMP_SCALE_H_
#define TPU_KERNELS_AMP_SCALE_H_

#include "kernels/common/kernel_util.h"

/* The reference of the table test: amp_unscale's node run by one plain loop
 * in double (rounded to self's dtype on store). Same arguments and results
 * as the row's kernel. */
tpu_status_t tpu_amp_unscale_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                       tpu_exec_ctx_t* ctx);

#endif /* TPU_KERNELS_AMP_SCALE_H_ */
