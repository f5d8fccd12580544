/* kernels/elementwise/activation.c — the activation family: softplus,
 * hardsigmoid, hardswish, mish, softshrink, hardshrink, log_sigmoid, glu,
 * prelu (_prelu_kernel) and rrelu_with_noise, with the backward ops autograd
 * calls for them.
 *
 * One-output ops are plain elementwise rows. glu (two halves of one input),
 * log_sigmoid_forward (output and buffer) and _prelu_kernel_backward (two
 * gradients) are several elementwise passes over sub-views, through
 * tpu_ew_run_impl. rrelu_with_noise in training draws its slopes (rrelu_train):
 * element i (row-major) takes Philox block offset + i of the node's seed (the
 * bridge fills `seed`/`offset` from the tpu generator, as for the random family);
 * a negative or zero x gets noise = lower + u (upper - lower), u uniform in [0, 1),
 * output x * noise, anything else noise 1, output x. Autograd's backward
 * (rrelu_with_noise_backward) is a composite of mul by that noise. Semantics
 * follow PyTorch's CPU kernels; the drawn values are tpu's own.
 */
#include <string.h>
#include <tgmath.h>

#include "kernels/elementwise/elementwise.h"
#include "kernels/elementwise/tile.h"
#include "kernels/common/kernel_util.h"
#include "kernels/random/random.h"
#include "kernels/common/view_walk.h"
#include "kernels/common/vmath.h"

/* ---- tile functions ------------------------------------------------------------- */

/* float32 tiles with a SIMD path (vmath.h) when every element of the tile
 * is in its range (OK), else the libm path: the same formula with libm. */
#define AC_VEC_U(name, OK, FAST, SLOW)                                                 \
  VM_SIMD_CLONES static int name##_F32(void* out, const void* const* in, int64_t n,                  \
                        const tpu_ew_params_t* p) {                                    \
    float* o = (float*)out;                                                            \
    const float* a = (const float*)in[0];                                              \
    const float s0 = (float)p->f[0], s1 = (float)p->f[1];                              \
    int ok = 1;                                                                        \
    (void)s0, (void)s1;                                                                \
    for (int64_t i = 0; i < n; ++i) {                                                  \
      const float x = a[i];                                                            \
      ok &= (OK);                                                                      \
    }                                                                                  \
    if (ok) {                                                                          \
      for (int64_t i = 0; i < n; ++i) {                                                \
        const float x = a[i];                                                          \
        float r;                                                                       \
        FAST;                                                                          \
        o[i] = r;                                                                      \
      }                                                                                \
    } else {                                                                           \
      for (int64_t i = 0; i < n; ++i) {                                                \
        const float x = a[i];                                                          \
        float r;                                                                       \
        SLOW;                                                                          \
        o[i] = r;                                                                      \
      }                                                                                \
    }                                                                                  \
    return 0;                                                                          \
  }
/* Binary: x is input 0 (grad), y input 1; OK reads y. */
#define AC_VEC_B(name, OK, FAST, SLOW)                                                 \
  VM_SIMD_CLONES static int name##_F32(void* out, const void* const* in, int64_t n,                  \
                        const tpu_ew_params_t* p) {                                    \
    float* o = (float*)out;                                                            \
    const float *a = (const float*)in[0], *b = (const float*)in[1];                    \
    const float s0 = (float)p->f[0], s1 = (float)p->f[1];                              \
    int ok = 1;                                                                        \
    (void)s0, (void)s1;                                                                \
    for (int64_t i = 0; i < n; ++i) {                                                  \
      const float y = b[i];                                                            \
      ok &= (OK);                                                                      \
    }                                                                                  \
    if (ok) {                                                                          \
      for (int64_t i = 0; i < n; ++i) {                                                \
        const float x = a[i], y = b[i];                                                \
        float r;                                                                       \
        FAST;                                                                          \
        o[i] = r;                                                                      \
      }                                                                                \
    } else {                                                                           \
      for (int64_t i = 0; i < n; ++i) {                                                \
        const float x = a[i], y = b[i];                                                \
        float r;                                                                       \
        SLOW;                                                                          \
        o[i] = r;                                                                      \
      }                                                                                \
    }                                                                                  \
    return 0;                                                                          \
  }

/* softplus(x; beta s0, threshold s1) and its backward (x: grad, y: input). */
AC_VEC_U(ac_softplus, x * s0 >= VM_EXP_LO,
         const float xb = x * s0; r = xb > s1 ? x : vm_log1pf(vm_expf((xb < 88.0f ? xb : 88.0f))) / s0,
         const float xb = x * s0; r = xb > s1 ? x : log1pf(expf(xb)) / s0)
EW_U(ac_softplus, F64, double, double, const double xb = x * s0;
     r = xb > s1 ? x : log1p(exp(xb)) / s0)
AC_VEC_B(ac_softplus_backward, y * s0 >= VM_EXP_LO,
         const float yb = y * s0; const float z = vm_expf((yb < 88.0f ? yb : 88.0f));
         r = yb > s1 ? x : x * z / (z + 1.0f),
         const float yb = y * s0; const float z = expf(yb); r = yb > s1 ? x : x * z / (z + 1.0f))
EW_B(ac_softplus_backward, F64, double, double, const double yb = y * s0; const double z = exp(yb);
     r = yb > s1 ? x : x * z / (z + 1.0))
EW_FLOATS(EW_U, ac_hardsigmoid, r = EW_MIN(EW_MAX(x + C(3), C(0)), C(6)) / C(6))
EW_FLOATS(EW_B, ac_hardsigmoid_backward,
          r = (y > C(-3) && y < C(3)) ? x * C(1.0 / 6.0) : C(0))
EW_FLOATS(EW_U, ac_hardswish, r = x * EW_MIN(EW_MAX(x + C(3), C(0)), C(6)) / C(6))
EW_FLOATS(EW_B, ac_hardswish_backward,
          r = y < C(-3) ? C(0) : y <= C(3) ? x * (y / C(3) + C(0.5)) : x)
/* mish and mish_backward (x grad, y input); exp(x) is clamped at 88, past
 * which tanh(softplus(x)) is 1 in float. */
AC_VEC_U(ac_mish, x >= VM_EXP_LO, r = x * vm_tanhf(vm_log1pf(vm_expf((x < 88.0f ? x : 88.0f)))),
         r = x * tanhf(log1pf(expf(x))))
EW_U(ac_mish, F64, double, double, r = x * tanh(log1p(exp(x))))
AC_VEC_B(ac_mish_backward, (y >= VM_EXP_LO) & (y <= VM_EXP_HI),
         const float sg = 1.0f / (1.0f + vm_expf(-y));
         const float t = vm_tanhf(vm_log1pf(vm_expf((y < 88.0f ? y : 88.0f))));
         r = x * (t + y * sg * (1.0f - t * t)),
         const float sg = 1.0f / (1.0f + expf(-y)); const float t = tanhf(log1pf(expf(y)));
         r = x * (t + y * sg * (1.0f - t * t)))
EW_B(ac_mish_backward, F64, double, double, const double sg = 1.0 / (1.0 + exp(-y));
     const double t = tanh(log1p(exp(y))); r = x * (t + y * sg * (1.0 - t * t)))
EW_FLOATS(EW_U, ac_softshrink,
          r = x != x ? x : x > s0 ? x - s0 : x < -s0 ? x + s0 : x * C(0))
EW_FLOATS(EW_U, ac_hardshrink, r = (x >= -s0 && x <= s0) ? C(0) : x)
/* softshrink_backward and hardshrink_backward are the same function. */
EW_FLOATS(EW_B, ac_shrink_backward, r = (y >= -s0 && y <= s0) ? C(0) : x)
/* log_sigmoid: output, buffer (exp(-|x|), as CPU fills it) and backward
 * (inputs grad, input; the buffer input is not read). */
AC_VEC_U(ac_log_sigmoid, fabsf(x) <= -VM_EXP_LO,
         r = (x < 0.0f ? x : 0.0f) - vm_log1pf(vm_expf(-fabsf(x))),
         r = (x < 0.0f ? x : 0.0f) - log1pf(expf(-fabsf(x))))
EW_U(ac_log_sigmoid, F64, double, double, r = (x < 0 ? x : 0) - log1p(exp(-fabs(x))))
AC_VEC_U(ac_log_sigmoid_buffer, fabsf(x) <= -VM_EXP_LO, r = vm_expf(-fabsf(x)),
         r = expf(-fabsf(x)))
EW_U(ac_log_sigmoid_buffer, F64, double, double, r = exp(-fabs(x)))
EW_FLOATS(EW_T, ac_log_sigmoid_backward, const ew_t neg = y < C(0) ? C(1) : C(0);
          const ew_t sgn = y < C(0) ? C(1) : C(-1); const ew_t e = exp(-fabs(y));
          r = (neg - sgn * (e / (C(1) + e))) * x)
/* glu: x first half, y second half; backward: x grad, y first, z second. */
EW_FLOATS(EW_B, ac_glu, r = x * (C(1) / (C(1) + exp(-y))))
EW_FLOATS(EW_T, ac_glu_grad_a, r = x * (C(1) / (C(1) + exp(-z))))
EW_FLOATS(EW_T, ac_glu_grad_b, const ew_t sg = C(1) / (C(1) + exp(-z));
          r = x * y * sg * (C(1) - sg))
/* prelu: x input, y weight; backward: x grad, y input, z weight. */
EW_FLOATS(EW_B, ac_prelu, r = x > C(0) ? x : y * x)
/* rrelu_with_noise, evaluation: leaky_relu with slope (lower + upper) / 2
 * (prepare puts it in s0); x input, y noise (not read, not written). */
EW_FLOATS(EW_B, ac_rrelu_eval, r = x > C(0) ? x : x * s0)
EW_FLOATS(EW_T, ac_prelu_grad_input, r = y > C(0) ? x : z * x)
EW_FLOATS(EW_T, ac_prelu_grad_weight, r = y > C(0) ? C(0) : y * x)

/* ---- prepare hooks ------------------------------------------------------------- */

/* rrelu_with_noise in evaluation: the mean slope. (Training runs rrelu_train.) */
static tpu_status_t prep_rrelu(const tpu_node_t* node, tpu_dtype_t common, tpu_ew_params_t* p) {
  (void)node;
  (void)common;
  p->f[0] = (p->f[0] + p->f[1]) / 2;
  return TPU_OK;
}

/* softshrink: lambda < 0 is PyTorch's error (the CPU fallback raises it). */
static tpu_status_t prep_softshrink(const tpu_node_t* node, tpu_dtype_t common,
                                    tpu_ew_params_t* p) {
  (void)node;
  (void)common;
  if (!(p->f[0] >= 0))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "softshrink: lambda must be >= 0");
  return TPU_OK;
}

/* ---- impls ----------------------------------------------------------------------- */

EW_IMPL(k_softplus, PROMOTE, EW_F(ac_softplus), .num_params = 2, .dflt = {1, 20})
EW_IMPL(k_softplus_backward, PROMOTE, EW_F(ac_softplus_backward), .num_params = 2,
        .dflt = {1, 20})
EW_IMPL(k_hardsigmoid, PROMOTE, EW_F(ac_hardsigmoid))
EW_IMPL(k_hardsigmoid_backward, PROMOTE, EW_F(ac_hardsigmoid_backward))
EW_IMPL(k_hardswish, PROMOTE, EW_F(ac_hardswish))
EW_IMPL(k_hardswish_backward, PROMOTE, EW_F(ac_hardswish_backward))
EW_IMPL(k_mish, PROMOTE, EW_F(ac_mish))
EW_IMPL(k_mish_backward, PROMOTE, EW_F(ac_mish_backward))
EW_IMPL(k_softshrink, PROMOTE, EW_F(ac_softshrink), .num_params = 1, .dflt = {0.5},
        .prepare = prep_softshrink)
EW_IMPL(k_hardshrink, PROMOTE, EW_F(ac_hardshrink), .num_params = 1, .dflt = {0.5})
EW_IMPL(k_shrink_backward, PROMOTE, EW_F(ac_shrink_backward), .num_params = 1, .dflt = {0.5})
EW_IMPL(k_log_sigmoid, PROMOTE, EW_F(ac_log_sigmoid))
EW_IMPL(k_log_sigmoid_buffer, PROMOTE, EW_F(ac_log_sigmoid_buffer))
EW_IMPL(k_log_sigmoid_backward, PROMOTE, EW_F(ac_log_sigmoid_backward), .promote = 3)
EW_IMPL(k_glu, PROMOTE, EW_F(ac_glu))
EW_IMPL(k_glu_grad_a, PROMOTE, EW_F(ac_glu_grad_a))
EW_IMPL(k_glu_grad_b, PROMOTE, EW_F(ac_glu_grad_b))
EW_IMPL(k_prelu, PROMOTE, EW_F(ac_prelu))
EW_IMPL(k_rrelu_eval, PROMOTE, EW_F(ac_rrelu_eval), .promote = 1, .num_params = 2,
        .dflt = {0.125, 1.0 / 3.0}, .prepare = prep_rrelu)
EW_IMPL(k_prelu_grad_input, PROMOTE, EW_F(ac_prelu_grad_input))
EW_IMPL(k_prelu_grad_weight, PROMOTE, EW_F(ac_prelu_grad_weight))

/* ---- multi-pass ops -------------------------------------------------------------- */

/* rrelu_with_noise(self, noise!, lower, upper, training, seed, offset) -> out.
 * Evaluation is the elementwise row (k_rrelu_eval); training (rrelu_train) takes
 * a floating self, and noise and out of its shape and dtype (the CPU runs
 * anything else, and raises for lower > upper). */
static bool rrelu_training(const tpu_op_def_t* def, const tpu_node_t* node) {
  const tpu_attr_t* t = ku_attr(def, node, "training");
  return t && tpu_attr_int(t, 0) != 0;
}

static tpu_status_t rrelu_train_check(const tpu_op_def_t* def, const tpu_node_t* node,
                                      double* lo, double* hi) {
  const tpu_view_t* x = ku_input(def, node, "self");
  const tpu_view_t* nz = ku_input(def, node, "noise");
  const tpu_view_t* o = node->num_outputs > 0 ? &node->outputs[0] : NULL;
  if (!x || !nz || !o || !tpu_dtype_is_floating(x->dtype) || tpu_dtype_is_storage_only(x->dtype))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "rrelu_with_noise: training operands");
  if (nz->dtype != x->dtype || o->dtype != x->dtype || !views_same_shape(nz, x) ||
      !views_same_shape(o, x))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "rrelu_with_noise: noise or out shape/dtype");
  bool same_xo = x->addr == o->addr && !memcmp(x->strides, o->strides, sizeof(x->strides));
  if (tpu_views_may_overlap(nz, x) || tpu_views_may_overlap(nz, o) ||
      (tpu_views_may_overlap(x, o) && !same_xo)) /* element-wise in place only */
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "rrelu_with_noise: overlapping operands");
  const tpu_attr_t *l = ku_attr(def, node, "lower"), *u = ku_attr(def, node, "upper");
  *lo = l ? tpu_attr_float(l, 0.125) : 0.125;
  *hi = u ? tpu_attr_float(u, 1.0 / 3.0) : 1.0 / 3.0;
  if (!(*lo <= *hi)) /* PyTorch's error: the CPU raises it */
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "rrelu_with_noise: lower > upper");
  return TPU_OK;
}

static tpu_status_t ac_rrelu_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  double lo, hi;
  return rrelu_training(def, node) ? rrelu_train_check(def, node, &lo, &hi)
                                   : tpu_ew_check(def, node);
}

/* Contiguous operands: chunks of RRELU_CHUNK elements through float64 buffers,
 * the Philox blocks of a chunk drawn in one SIMD-friendly call. */
#define RRELU_CHUNK 512
static void rrelu_train_contig(const tpu_view_t* x, const tpu_view_t* nz, const tpu_view_t* o,
                               double lo, double hi, uint64_t seed, uint64_t offset) {
  const bool f64 = x->dtype == TPU_DTYPE_F64;
  const int64_t n = tpu_view_numel(x);
  double xv[RRELU_CHUNK], rv[RRELU_CHUNK];
  uint32_t w0[RRELU_CHUNK], w1[RRELU_CHUNK], w2[RRELU_CHUNK], w3[RRELU_CHUNK];
  for (int64_t first = 0; first < n; first += RRELU_CHUNK) {
    int64_t m = n - first < RRELU_CHUNK ? n - first : RRELU_CHUNK;
    tpu_convert(xv, TPU_DTYPE_F64, 1, view_at(x, first), x->dtype, 1, m);
    rng_blocks(seed, offset, first, m, w0, w1, w2, w3);
    for (int64_t e = 0; e < m; ++e) {
      const uint32_t w[4] = {w0[e], w1[e], w2[e], w3[e]};
      double u = f64 ? rng_unit_F64(w) : (double)rng_unit_F32(w);
      rv[e] = xv[e] <= 0 ? lo + u * (hi - lo) : 1.0;
    }
    tpu_convert(view_at(nz, first), nz->dtype, 1, rv, TPU_DTYPE_F64, 1, m);
    tpu_convert(rv, TPU_DTYPE_F64, 1, view_at(nz, first), nz->dtype, 1, m); /* as stored */
    for (int64_t e = 0; e < m; ++e) xv[e] = xv[e] <= 0 ? xv[e] * rv[e] : xv[e];
    tpu_convert(view_at(o, first), o->dtype, 1, xv, TPU_DTYPE_F64, 1, m);
  }
}

/* Row-major element order fixes the draws: element i takes block offset + i. */
static tpu_status_t rrelu_train(const tpu_op_def_t* def, const tpu_node_t* node) {
  double lo, hi;
  TPU_RETURN_IF_ERROR(rrelu_train_check(def, node, &lo, &hi));
  const tpu_attr_t *sa = ku_attr(def, node, "seed"), *oa = ku_attr(def, node, "offset");
  if (!sa || !oa || sa->kind != TPU_ATTR_INT || oa->kind != TPU_ATTR_INT)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "rrelu_with_noise: no seed/offset");
  const uint64_t seed = (uint64_t)sa->u.i, offset = (uint64_t)oa->u.i;
  const tpu_view_t* x = ku_input(def, node, "self");
  const tpu_view_t* nz = ku_input(def, node, "noise");
  const tpu_view_t* o = &node->outputs[0];
  if (tpu_view_is_contiguous(x) && tpu_view_is_contiguous(nz) && tpu_view_is_contiguous(o)) {
    rrelu_train_contig(x, nz, o, lo, hi, seed, offset);
    return TPU_OK;
  }
  const bool f64 = x->dtype == TPU_DTYPE_F64; /* strided: one element at a time */
  int64_t coord[TPU_MAX_DIMS] = {0}, n = tpu_view_numel(x);
  int64_t ox = 0, on = 0, oo = 0; /* element offsets of coord in x, noise, out */
  for (int64_t i = 0; i < n; ++i) {
    double v = view_get_f64(x, ox), r = 1.0;
    if (v <= 0) {
      uint32_t w[4];
      rng_block(seed, offset, i, w);
      r = lo + (f64 ? rng_unit_F64(w) : (double)rng_unit_F32(w)) * (hi - lo);
    }
    view_set_f64(nz, on, r);
    r = view_get_f64(nz, on); /* the stored (rounded) slope, so out == x * noise */
    view_set_f64(o, oo, v <= 0 ? v * r : v);
    for (int32_t d = x->ndim - 1; d >= 0; --d) {
      if (++coord[d] < x->sizes[d]) {
        ox += x->strides[d], on += nz->strides[d], oo += o->strides[d];
        break;
      }
      ox -= (x->sizes[d] - 1) * x->strides[d], on -= (x->sizes[d] - 1) * nz->strides[d];
      oo -= (x->sizes[d] - 1) * o->strides[d];
      coord[d] = 0;
    }
  }
  return TPU_OK;
}

static tpu_status_t ac_rrelu_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                    tpu_exec_ctx_t* ctx) {
  return rrelu_training(def, node) ? rrelu_train(def, node) : tpu_ew_kernel(def, node, ctx);
}

/* log_sigmoid_forward(self) -> (output, buffer). */
static tpu_status_t ac_log_sigmoid_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  tpu_dtype_t dt;
  if (node->num_inputs != 1)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: expected 1 input", def->name);
  return tpu_ew_result_dtype(&k_log_sigmoid, def->name, node->inputs, 1, NULL, 0, &dt);
}

static tpu_status_t ac_log_sigmoid_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                         tpu_view_t* out) {
  tpu_dtype_t dt;
  TPU_RETURN_IF_ERROR(ac_log_sigmoid_check(def, node));
  TPU_RETURN_IF_ERROR(tpu_ew_result_dtype(&k_log_sigmoid, def->name, node->inputs, 1, NULL, 0, &dt));
  for (int k = 0; k < 2; ++k) {
    memset(&out[k], 0, sizeof(out[k]));
    TPU_RETURN_IF_ERROR(tpu_broadcast_shapes(node->inputs, 1, out[k].sizes, &out[k].ndim));
    out[k].dtype = dt;
    tpu_view_set_contiguous(&out[k]);
  }
  return TPU_OK;
}

static tpu_status_t ac_log_sigmoid_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                          tpu_exec_ctx_t* ctx) {
  (void)ctx;
  TPU_RETURN_IF_ERROR(ac_log_sigmoid_check(def, node));
  if (node->num_outputs != 2)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: expected 2 outputs", def->name);
  TPU_RETURN_IF_ERROR(
      tpu_ew_run_impl(&k_log_sigmoid_buffer, def->name, node->inputs, 1, NULL, 0, &node->outputs[1]));
  return tpu_ew_run_impl(&k_log_sigmoid, def->name, node->inputs, 1, NULL, 0, &node->outputs[0]);
}

/* _prelu_kernel_backward(grad_output, self, weight) -> (grad_input, grad_weight),
 * both of the broadcast shape. */
static tpu_status_t ac_prelu_bw_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  tpu_dtype_t dt;
  if (node->num_inputs != 3)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: expected 3 inputs", def->name);
  return tpu_ew_result_dtype(&k_prelu_grad_input, def->name, node->inputs, 3, NULL, 0, &dt);
}

static tpu_status_t ac_prelu_bw_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                      tpu_view_t* out) {
  tpu_dtype_t dt;
  TPU_RETURN_IF_ERROR(ac_prelu_bw_check(def, node));
  TPU_RETURN_IF_ERROR(
      tpu_ew_result_dtype(&k_prelu_grad_input, def->name, node->inputs, 3, NULL, 0, &dt));
  for (int k = 0; k < 2; ++k) {
    memset(&out[k], 0, sizeof(out[k]));
    TPU_RETURN_IF_ERROR(tpu_broadcast_shapes(node->inputs, 3, out[k].sizes, &out[k].ndim));
    out[k].dtype = dt;
    tpu_view_set_contiguous(&out[k]);
  }
  return TPU_OK;
}

static tpu_status_t ac_prelu_bw_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                       tpu_exec_ctx_t* ctx) {
  (void)ctx;
  TPU_RETURN_IF_ERROR(ac_prelu_bw_check(def, node));
  if (node->num_outputs != 2)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: expected 2 outputs", def->name);
  TPU_RETURN_IF_ERROR(tpu_ew_run_impl(&k_prelu_grad_input, def->name, node->inputs, 3, NULL, 0,
                                      &node->outputs[0]));
  return tpu_ew_run_impl(&k_prelu_grad_weight, def->name, node->inputs, 3, NULL, 0,
                         &node->outputs[1]);
}

/* glu(self, dim) and glu_backward(grad_output, self, dim): `self` split in
 * two halves along dim. */
static tpu_status_t ac_glu_halves(const tpu_op_def_t* def, const tpu_node_t* node, int32_t self_k,
                                  int32_t* dim, tpu_view_t* a, tpu_view_t* b) {
  const tpu_value_t* s = &node->inputs[self_k];
  if (node->num_inputs != self_k + 1 || s->kind != TPU_VALUE_VIEW)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: bad inputs", def->name);
  const tpu_view_t* v = &s->u.view;
  if (v->ndim == 0)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "glu does not support scalars because halving size must be even");
  int64_t d = node->num_attrs > 0 ? tpu_attr_int(&node->attrs[0], -1) : -1;
  if (d < -v->ndim || d >= v->ndim) return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "glu: dim out of range");
  if (d < 0) d += v->ndim;
  if (v->sizes[d] % 2 != 0)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "Halving dimension must be even");
  *dim = (int32_t)d;
  *a = *v;
  *b = *v;
  a->sizes[d] = b->sizes[d] = v->sizes[d] / 2;
  b->addr += (uint64_t)(a->sizes[d] * v->strides[d]) * tpu_dtype_size(v->dtype);
  return TPU_OK;
}

static tpu_status_t ac_glu_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  int32_t dim = 0;
  tpu_view_t a = {0}, b = {0};
  TPU_RETURN_IF_ERROR(ac_glu_halves(def, node, 0, &dim, &a, &b));
  tpu_value_t in[2] = {{.kind = TPU_VALUE_VIEW, .u.view = a}, {.kind = TPU_VALUE_VIEW, .u.view = b}};
  tpu_dtype_t dt;
  return tpu_ew_result_dtype(&k_glu, def->name, in, 2, NULL, 0, &dt);
}

static tpu_status_t ac_glu_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_view_t* out) {
  int32_t dim = 0;
  tpu_view_t a = {0}, b = {0};
  TPU_RETURN_IF_ERROR(ac_glu_halves(def, node, 0, &dim, &a, &b));
  memset(out, 0, sizeof(*out));
  out->ndim = a.ndim;
  for (int32_t d = 0; d < a.ndim; ++d) out->sizes[d] = a.sizes[d];
  out->dtype = a.dtype;
  tpu_view_set_contiguous(out);
  return ac_glu_check(def, node);
}

static tpu_status_t ac_glu_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx) {
  (void)ctx;
  int32_t dim = 0;
  tpu_view_t a = {0}, b = {0};
  TPU_RETURN_IF_ERROR(ac_glu_halves(def, node, 0, &dim, &a, &b));
  if (node->num_outputs != 1)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: expected 1 output", def->name);
  tpu_value_t in[2] = {{.kind = TPU_VALUE_VIEW, .u.view = a}, {.kind = TPU_VALUE_VIEW, .u.view = b}};
  return tpu_ew_run_impl(&k_glu, def->name, in, 2, NULL, 0, &node->outputs[0]);
}

static tpu_status_t ac_glu_bw_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  int32_t dim = 0;
  tpu_view_t a = {0}, b = {0};
  TPU_RETURN_IF_ERROR(ac_glu_halves(def, node, 1, &dim, &a, &b));
  const tpu_value_t* g = &node->inputs[0];
  if (g->kind != TPU_VALUE_VIEW || g->u.view.ndim != a.ndim)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "glu_backward: grad_output shape");
  for (int32_t d = 0; d < a.ndim; ++d)
    if (g->u.view.sizes[d] != a.sizes[d]) return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "glu_backward: grad_output shape");
  tpu_value_t in[3] = {*g, {.kind = TPU_VALUE_VIEW, .u.view = a},
                       {.kind = TPU_VALUE_VIEW, .u.view = b}};
  tpu_dtype_t dt;
  return tpu_ew_result_dtype(&k_glu_grad_a, def->name, in, 3, NULL, 0, &dt);
}

static tpu_status_t ac_glu_bw_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                    tpu_view_t* out) {
  TPU_RETURN_IF_ERROR(ac_glu_bw_check(def, node));
  const tpu_view_t* v = &node->inputs[1].u.view;
  memset(out, 0, sizeof(*out));
  out->ndim = v->ndim;
  for (int32_t d = 0; d < v->ndim; ++d) out->sizes[d] = v->sizes[d];
  out->dtype = v->dtype;
  tpu_view_set_contiguous(out);
  return TPU_OK;
}

static tpu_status_t ac_glu_bw_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                     tpu_exec_ctx_t* ctx) {
  (void)ctx;
  TPU_RETURN_IF_ERROR(ac_glu_bw_check(def, node));
  int32_t dim = 0;
  tpu_view_t a = {0}, b = {0};
  TPU_RETURN_IF_ERROR(ac_glu_halves(def, node, 1, &dim, &a, &b));
  if (node->num_outputs != 1)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: expected 1 output", def->name);
  const tpu_view_t* gi = &node->outputs[0];
  if (gi->ndim != a.ndim || gi->sizes[dim] != 2 * a.sizes[dim])
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: grad_input shape", def->name);
  tpu_view_t ga = *gi, gb = *gi;
  ga.sizes[dim] = gb.sizes[dim] = a.sizes[dim];
  gb.addr += (uint64_t)(a.sizes[dim] * gi->strides[dim]) * tpu_dtype_size(gi->dtype);
  tpu_value_t in[3] = {node->inputs[0], {.kind = TPU_VALUE_VIEW, .u.view = a},
                       {.kind = TPU_VALUE_VIEW, .u.view = b}};
  TPU_RETURN_IF_ERROR(tpu_ew_run_impl(&k_glu_grad_a, def->name, in, 3, NULL, 0, &ga));
  return tpu_ew_run_impl(&k_glu_grad_b, def->name, in, 3, NULL, 0, &gb);
}

/* ---- rows ------------------------------------------------------------------------ */

static const tpu_op_def_t g_rows[] = {
    EW_ROW("softplus", "self", "beta,threshold", "out", "softplus softplus.out", k_softplus),
    EW_BACKWARD_ROW(softplus_backward, "grad_output,self", "beta,threshold"),
    EW_ROW("hardsigmoid", "self", "", "out", "hardsigmoid hardsigmoid.out hardsigmoid_",
           k_hardsigmoid),
    EW_BACKWARD_ROW(hardsigmoid_backward, "grad_output,self", ""),
    EW_ROW("hardswish", "self", "", "out", "hardswish hardswish.out hardswish_", k_hardswish),
    EW_ROW("hardswish_backward", "grad_output,self", "", "out",
           "hardswish_backward hardswish_backward.out", k_hardswish_backward),
    EW_ROW("mish", "self", "", "out", "mish mish.out mish_", k_mish),
    EW_ROW("mish_backward", "grad_output,self", "", "out", "mish_backward", k_mish_backward),
    EW_ROW("softshrink", "self", "lambd", "out", "softshrink softshrink.out", k_softshrink),
    EW_ROW("hardshrink", "self", "lambd", "out", "hardshrink hardshrink.out", k_hardshrink),
    EW_ROW("softshrink_backward", "grad_output,self", "lambd", "grad_input",
           "softshrink_backward softshrink_backward.grad_input", k_shrink_backward),
    EW_ROW("hardshrink_backward", "grad_out,self", "lambd", "grad_input",
           "hardshrink_backward hardshrink_backward.grad_input", k_shrink_backward),
    {.name = "log_sigmoid_forward", .inputs = "self", .attrs = "", .outputs = "output,buffer",
     .aten = "log_sigmoid_forward log_sigmoid_forward.output", .kernel = ac_log_sigmoid_kernel,
     .infer = ac_log_sigmoid_infer, .check = ac_log_sigmoid_check, .impl = &k_log_sigmoid},
    EW_BACKWARD_ROW(log_sigmoid_backward, "grad_output,self,buffer", ""),
    {.name = "glu", .inputs = "self", .attrs = "dim", .outputs = "out", .aten = "glu glu.out",
     .kernel = ac_glu_kernel, .infer = ac_glu_infer, .check = ac_glu_check, .impl = &k_glu},
    {.name = "glu_backward", .inputs = "grad_output,self", .attrs = "dim", .outputs = "grad_input",
     .aten = "glu_backward glu_backward.grad_input", .kernel = ac_glu_bw_kernel,
     .infer = ac_glu_bw_infer, .check = ac_glu_bw_check, .impl = &k_glu_grad_a},
    EW_ROW("_prelu_kernel", "self,weight", "", "out", "_prelu_kernel", k_prelu),
    {.name = "rrelu_with_noise", .inputs = "self,noise!",
     .attrs = "lower,upper,training,seed,offset", .outputs = "out",
     .aten = "rrelu_with_noise rrelu_with_noise.out", .kernel = ac_rrelu_kernel,
     .infer = tpu_ew_infer, .check = ac_rrelu_check, .impl = &k_rrelu_eval,
     .flags = TPU_OP_OWN_OVERLAP_CHECK | TPU_OP_POINTWISE, .rows = NULL, .draws = rrelu_training},
    {.name = "_prelu_kernel_backward", .inputs = "grad_output,self,weight", .attrs = "",
     .outputs = "grad_input,grad_weight", .aten = "_prelu_kernel_backward",
     .kernel = ac_prelu_bw_kernel, .infer = ac_prelu_bw_infer, .check = ac_prelu_bw_check,
     .impl = &k_prelu_grad_input},
};

const tpu_op_family_t tpu_family_activation = {
    "activation", g_rows, (int32_t)(sizeof(g_rows) / sizeof(g_rows[0]))};
