/* kernels/elementwise_activation.c — the activation family: softplus,
 * hardsigmoid, hardswish, mish, softshrink, hardshrink, log_sigmoid, glu,
 * prelu (_prelu_kernel) and rrelu_with_noise in evaluation mode, with the
 * backward ops autograd calls for them.
 *
 * One-output ops are plain elementwise rows. glu (two halves of one input),
 * log_sigmoid_forward (output and buffer) and _prelu_kernel_backward (two
 * gradients) are several elementwise passes over sub-views, through
 * tpu_ew_run_impl. Semantics follow PyTorch's CPU kernels.
 */
#include <string.h>
#include <tgmath.h>

#include "kernels/elementwise.h"
#include "kernels/elementwise_tile.h"
#include "kernels/kernel_util.h"
#include "kernels/vmath.h"

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

/* rrelu_with_noise: training (attr 2) draws the slopes: not native. */
static tpu_status_t prep_rrelu(const tpu_node_t* node, tpu_dtype_t common, tpu_ew_params_t* p) {
  (void)common;
  if (node->num_attrs > 2 && tpu_attr_int(&node->attrs[2], 0))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED,
                           "rrelu_with_noise: training mode not supported natively");
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
    {"log_sigmoid_forward", "self", "", "output,buffer",
     "log_sigmoid_forward log_sigmoid_forward.output", ac_log_sigmoid_kernel,
     ac_log_sigmoid_infer, ac_log_sigmoid_check, &k_log_sigmoid},
    EW_BACKWARD_ROW(log_sigmoid_backward, "grad_output,self,buffer", ""),
    {"glu", "self", "dim", "out", "glu glu.out", ac_glu_kernel, ac_glu_infer, ac_glu_check,
     &k_glu},
    {"glu_backward", "grad_output,self", "dim", "grad_input",
     "glu_backward glu_backward.grad_input", ac_glu_bw_kernel, ac_glu_bw_infer, ac_glu_bw_check,
     &k_glu_grad_a},
    EW_ROW("_prelu_kernel", "self,weight", "", "out", "_prelu_kernel", k_prelu),
    EW_ROW("rrelu_with_noise", "self,noise!", "lower,upper,training", "out",
           "rrelu_with_noise rrelu_with_noise.out", k_rrelu_eval),
    {"_prelu_kernel_backward", "grad_output,self,weight", "", "grad_input,grad_weight",
     "_prelu_kernel_backward", ac_prelu_bw_kernel, ac_prelu_bw_infer, ac_prelu_bw_check,
     &k_prelu_grad_input},
};

const tpu_op_family_t tpu_family_activation = {
    "activation", g_rows, (int32_t)(sizeof(g_rows) / sizeof(g_rows[0]))};
