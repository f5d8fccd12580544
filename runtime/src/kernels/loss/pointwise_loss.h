/* pointwise_loss.h — the pointwise-loss family's private interface, shared by
 * pointwise_loss.c (rows, parsing, the optimised kernel), pointwise_loss_ref.c
 * (the reference kernel) and tests/test_pointwise_loss.c.
 *
 * mse_loss, smooth_l1_loss, huber_loss and binary_cross_entropy, forward and
 * backward: one value per element of the broadcast shape of self and target
 * (binary_cross_entropy: equal shapes; weight broadcasts to self), then
 * reduction none (the values), mean or sum (a 0-dim result). Backward writes
 * grad_input shaped like self; grad_output broadcasts to it (a 0-dim one
 * when the forward reduced), scaled by 1/numel for mean.
 */
#ifndef TPU_KERNELS_POINTWISE_LOSS_H_
#define TPU_KERNELS_POINTWISE_LOSS_H_

#include <math.h>
#include <stdbool.h>

#include "kernels/common/kernel_util.h"

enum { PL_NONE = 0, PL_MEAN = 1, PL_SUM = 2 }; /* at::Reduction */
enum { PL_MSE, PL_SMOOTH_L1, PL_HUBER, PL_BCE };

typedef struct pl_impl {
  int kind;
  bool backward;
} pl_impl_t;

typedef struct pl_args {
  const pl_impl_t* impl;
  tpu_view_t x, t, w, g; /* self, target, weight, grad_output expanded to `shape` */
  bool has_w;
  int64_t reduction;
  double param;          /* smooth_l1: beta; huber: delta */
  double norm;           /* backward: 1/numel for mean, else 1 */
  int64_t numel;
  tpu_view_t shape;      /* output metadata (0-dim when the forward reduces) */
  tpu_view_t full;       /* the elementwise shape */
} pl_args_t;

tpu_status_t tpu_pl_parse(const tpu_op_def_t* def, const tpu_node_t* node, pl_args_t* a);

/* std::max: NaN in a stays. */
static inline double pl_max(double a, double b) { return a < b ? b : a; }

/* The loss of one element, and its gradient times g (norm included by callers). */
static inline double pl_forward(int kind, double p, double x, double t, double w) {
  switch (kind) {
    case PL_MSE: return (x - t) * (x - t);
    case PL_SMOOTH_L1: {
      double z = fabs(x - t);
      if (p == 0.0) return z;
      return z < p ? 0.5 * z * z / p : z - 0.5 * p;
    }
    case PL_HUBER: {
      double z = fabs(x - t);
      return z < p ? 0.5 * z * z : p * (z - 0.5 * p);
    }
    default: /* PL_BCE */
      return w * ((t - 1.0) * pl_max(log1p(-x), -100.0) - t * pl_max(log(x), -100.0));
  }
}

static inline double pl_backward(int kind, double p, double x, double t, double w, double g) {
  double d = x - t;
  switch (kind) {
    case PL_MSE: return 2.0 * d * g;
    case PL_SMOOTH_L1: return d <= -p ? -g : d >= p ? g : d * g / p;
    case PL_HUBER: return d <= -p ? -g * p : d >= p ? g * p : d * g;
    default: { /* PL_BCE */
      double den = (1.0 - x) * x;
      return w * g * d / (den > 1e-12 ? den : 1e-12);
    }
  }
}

/* Half dtypes: PyTorch CPU's mse and binary_cross_entropy kernels round every
 * intermediate to the dtype (c10::Half / BFloat16 arithmetic), so the half
 * path does too, op by op in the order of PyTorch's scalar kernels; its
 * smooth_l1 and huber kernels compute in float (huber backward rounds the
 * difference and delta first). Measured against PyTorch CPU element by
 * element; `norm` is included here. */
static inline double pl_round(tpu_dtype_t dt, double x) {
  uint16_t h;
  tpu_convert(&h, dt, 1, &x, TPU_DTYPE_F64, 1, 1);
  tpu_convert(&x, TPU_DTYPE_F64, 1, &h, dt, 1, 1);
  return x;
}

static inline double pl_forward_half(int kind, tpu_dtype_t dt, double p, double x, double t,
                                     double w) {
#define R(v) pl_round(dt, (v))
  switch (kind) {
    case PL_MSE: {
      double d = R(x - t);
      return R(d * d);
    }
    case PL_BCE: {
      double a = R(R(t - 1.0) * pl_max(R(log1p(-x)), -100.0));
      double l = R(a - R(t * pl_max(R(log(x)), -100.0)));
      return w == 1.0 ? l : R(l * w);
    }
    default: /* smooth_l1, huber: computed in float (opmath) */
      return pl_forward(kind, p, x, t, w);
  }
}

static inline double pl_backward_half(int kind, tpu_dtype_t dt, double p, double x, double t,
                                      double w, double g, double norm, int64_t numel) {
  double d = R(x - t);
  switch (kind) {
    case PL_MSE: return R(R(R(2.0 * norm) * d) * g);
    case PL_HUBER: { /* the difference and delta in the dtype, the rest in float */
      double e = R(p);
      return d <= -e ? -norm * g * e : d >= e ? norm * g * e : norm * d * g;
    }
    case PL_BCE: { /* kernel, then mul_(weight), then div_(numel) for mean */
      double den = R(R(1.0 - x) * x), eps = R(1e-12);
      double q = R(R(g * d) / pl_max(den, eps));
      if (w != 1.0) q = R(q * w);
      return norm != 1.0 ? R(q / (double)numel) : q;
    }
    default: /* smooth_l1: in float */
      return pl_backward(kind, p, x, t, w, g) * norm;
  }
#undef R
}

/* The reference kernel: element by element in logical order, in double. */
tpu_status_t tpu_pl_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx);

extern const tpu_op_family_t tpu_family_pointwise_loss;

#endif /* TPU_KERNELS_POINTWISE_LOSS_H_ */
