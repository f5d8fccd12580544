/* optim.c — the fused Adam / AdamW step (see optim.h for the ops and their
 * formula).
 *
 * One node is one parameter's step: a single pass that reads param, grad,
 * exp_avg and exp_avg_sq (and max_exp_avg_sq) and writes them back, where
 * the unfused optimizer makes a pass per foreach op. The elements are split
 * over tpu_parallel_for. Float32 and float64 operands are updated in place;
 * half types go through float32 buffers of OPT_CHUNK elements (tpu_convert
 * in, the float32 step, tpu_convert out), so one compute loop per compute
 * type serves every dtype.
 */
#include <math.h>
#include <string.h>

#include "kernels/optim/optim.h"

#define OPT_CHUNK 512
#define OPT_GRAIN 16384 /* elements per task at least */

/* ---- parsing ---------------------------------------------------------------------- */

static tpu_status_t unimpl(const char* what) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "fused adam: %s", what);
}

/* The value of a one-element operand (a number, or a one-element view of a
 * real dtype). False when absent or of another kind. */
static bool read_value(const tpu_op_def_t* def, const tpu_node_t* node, const char* name,
                       double* out) {
  int32_t i = tpu_spec_index(def->inputs, name);
  if (i < 0 || i >= node->num_inputs) return false;
  const tpu_value_t* v = &node->inputs[i];
  if (v->kind == TPU_VALUE_SCALAR) {
    *out = tpu_dtype_is_floating(v->u.scalar.dtype) ? v->u.scalar.v.f : (double)v->u.scalar.v.i;
    return true;
  }
  if (v->kind != TPU_VALUE_VIEW || tpu_view_numel(&v->u.view) != 1 ||
      tpu_dtype_is_complex(v->u.view.dtype) || v->u.view.addr <= 1)
    return false;
  tpu_convert(out, TPU_DTYPE_F64, 1, tpu_view_ptr(&v->u.view), v->u.view.dtype, 1, 1);
  return true;
}

/* Whether input `name` is present at all (a view, or a number). */
static bool present(const tpu_op_def_t* def, const tpu_node_t* node, const char* name) {
  int32_t i = tpu_spec_index(def->inputs, name);
  return i >= 0 && i < node->num_inputs && node->inputs[i].kind != TPU_VALUE_NONE;
}

tpu_status_t tpu_adam_parse(const tpu_op_def_t* def, const tpu_node_t* node, adam_args_t* a) {
  memset(a, 0, sizeof(*a));
  static const char* const k_state[] = {"self", "grads", "exp_avgs", "exp_avg_sqs",
                                        "max_exp_avg_sqs"};
  a->amsgrad = tpu_attr_bool(ku_attr(def, node, "amsgrad"), false);
  a->maximize = tpu_attr_bool(ku_attr(def, node, "maximize"), false);
  a->adamw = def->impl != NULL;
  a->beta1 = tpu_attr_float(ku_attr(def, node, "beta1"), 0.9);
  a->beta2 = tpu_attr_float(ku_attr(def, node, "beta2"), 0.999);
  a->weight_decay = tpu_attr_float(ku_attr(def, node, "weight_decay"), 0.0);
  a->eps = tpu_attr_float(ku_attr(def, node, "eps"), 1e-8);
  const tpu_view_t* v[5];
  for (int k = 0; k < 5; ++k) v[k] = ku_input(def, node, k_state[k]);
  if (!v[0] || !v[1] || !v[2] || !v[3]) return unimpl("missing operand");
  if ((v[4] != NULL) != a->amsgrad) return unimpl("max_exp_avg_sqs present without amsgrad");
  a->dtype = v[0]->dtype;
  tpu_compute_type_t ct = tpu_dtype_compute(a->dtype);
  if (ct != TPU_COMPUTE_F32 && ct != TPU_COMPUTE_F64) return unimpl("not a floating dtype");
  a->numel = tpu_view_numel(v[0]);
  for (int k = 0; k < 5; ++k) {
    if (!v[k]) continue;
    if (v[k]->dtype != a->dtype || !views_same_shape(v[k], v[0]))
      return unimpl("operands of different dtypes or shapes");
    if (!tpu_view_is_contiguous(v[k])) return unimpl("a non-contiguous operand");
    for (int j = 0; j < k; ++j)
      if (v[j] && a->numel > 0 && views_overlap(v[j], v[k]))
        return unimpl("operands share memory");
  }
  double step = 0, found_inf = 0;
  if (!read_value(def, node, "state_steps", &step)) return unimpl("no step count");
  if (!read_value(def, node, "lr", &a->lr)) return unimpl("no learning rate");
  a->scaled = present(def, node, "grad_scale");
  if (a->scaled && !read_value(def, node, "grad_scale", &a->grad_scale))
    return unimpl("grad_scale is not one number");
  if (present(def, node, "found_inf") && !read_value(def, node, "found_inf", &found_inf))
    return unimpl("found_inf is not one number");
  a->skip = found_inf == 1.0;
  a->step_size = a->lr / (1 - pow(a->beta1, step));
  a->bc2_sqrt = sqrt(1 - pow(a->beta2, step));
  if (a->numel > 0) {
    a->param = tpu_view_ptr(v[0]);
    a->grad = tpu_view_ptr(v[1]);
    a->exp_avg = tpu_view_ptr(v[2]);
    a->exp_avg_sq = tpu_view_ptr(v[3]);
    a->max_exp_avg_sq = v[4] ? tpu_view_ptr(v[4]) : NULL;
  }
  return TPU_OK;
}

/* ---- the step ----------------------------------------------------------------------- */

/* n elements of one parameter, in compute type T: the formula of optim.h.
 * The loop body is inlined with its three structural flags as constants
 * (grad scaled, amsgrad, Adam's weight decay), so each of the 8 variants is
 * a branch-free loop the compiler vectorises; maximize and AdamW's decay are
 * exact factors (-1 or 1, and 1 without decay). Operands are restrict:
 * disjoint, as tpu_adam_parse checks. */
#define OPT_STEP(T, SQRT, SUF)                                                                 \
  static inline __attribute__((always_inline)) void adam_body_##SUF(                        \
      const adam_args_t* a, int64_t n, T* restrict p, T* restrict g, T* restrict m,          \
      T* restrict v, T* restrict vmax, const bool scaled, const bool amsgrad,                \
      const bool decays) {                                                                   \
    const T b2 = (T)a->beta2, w1 = (T)(1 - a->beta1), w2 = (T)(1 - a->beta2);                \
    const T wd = (T)a->weight_decay, sign = a->maximize ? (T)-1 : (T)1;                      \
    const T decay = a->adamw && a->weight_decay != 0 ? (T)(1 - a->lr * a->weight_decay) : 1; \
    const T step = (T)a->step_size, bc2 = (T)a->bc2_sqrt, eps = (T)a->eps;                   \
    const T scale = (T)a->grad_scale;                                                        \
    for (int64_t i = 0; i < n; ++i) {                                                        \
      T gi = g[i], pi = p[i];                                                                \
      if (scaled) g[i] = gi = gi / scale;                                                    \
      gi = gi * sign;                                                                        \
      if (decays) gi = gi + pi * wd;                                                         \
      pi = pi * decay;                                                                       \
      T mi = m[i] + w1 * (gi - m[i]);                                                        \
      T vi = v[i] * b2 + gi * gi * w2;                                                       \
      m[i] = mi;                                                                             \
      v[i] = vi;                                                                             \
      if (amsgrad) {                                                                         \
        vi = vmax[i] > vi ? vmax[i] : vi;                                                    \
        vmax[i] = vi;                                                                        \
      }                                                                                      \
      p[i] = pi - step * mi / (SQRT(vi) / bc2 + eps);                                        \
    }                                                                                        \
  }                                                                                          \
  static void adam_step_##SUF(const adam_args_t* a, int64_t n, T* p, T* g, T* m, T* v,       \
                              T* vmax) {                                                     \
    const bool d = a->weight_decay != 0 && !a->adamw;                                        \
    switch ((a->scaled ? 4 : 0) | (vmax ? 2 : 0) | (d ? 1 : 0)) {                            \
      case 0: adam_body_##SUF(a, n, p, g, m, v, vmax, 0, 0, 0); break;                        \
      case 1: adam_body_##SUF(a, n, p, g, m, v, vmax, 0, 0, 1); break;                        \
      case 2: adam_body_##SUF(a, n, p, g, m, v, vmax, 0, 1, 0); break;                        \
      case 3: adam_body_##SUF(a, n, p, g, m, v, vmax, 0, 1, 1); break;                        \
      case 4: adam_body_##SUF(a, n, p, g, m, v, vmax, 1, 0, 0); break;                        \
      case 5: adam_body_##SUF(a, n, p, g, m, v, vmax, 1, 0, 1); break;                        \
      case 6: adam_body_##SUF(a, n, p, g, m, v, vmax, 1, 1, 0); break;                        \
      default: adam_body_##SUF(a, n, p, g, m, v, vmax, 1, 1, 1); break;                       \
    }                                                                                        \
  }
OPT_STEP(float, sqrtf, f32)
OPT_STEP(double, sqrt, f64)
#undef OPT_STEP

static void run_range(void* arg, int64_t begin, int64_t end) {
  const adam_args_t* a = (const adam_args_t*)arg;
  const size_t es = tpu_dtype_size(a->dtype);
#define AT(ptr, T) ((T*)((char*)(ptr) + (size_t)begin * es))
  if (a->dtype == TPU_DTYPE_F64) {
    adam_step_f64(a, end - begin, AT(a->param, double), AT(a->grad, double),
                  AT(a->exp_avg, double), AT(a->exp_avg_sq, double),
                  a->max_exp_avg_sq ? AT(a->max_exp_avg_sq, double) : NULL);
    return;
  }
  if (a->dtype == TPU_DTYPE_F32) {
    adam_step_f32(a, end - begin, AT(a->param, float), AT(a->grad, float),
                  AT(a->exp_avg, float), AT(a->exp_avg_sq, float),
                  a->max_exp_avg_sq ? AT(a->max_exp_avg_sq, float) : NULL);
    return;
  }
#undef AT
  /* A half type: OPT_CHUNK elements at a time through float32 buffers. */
  void* ops[5] = {a->param, a->grad, a->exp_avg, a->exp_avg_sq, a->max_exp_avg_sq};
  float buf[5][OPT_CHUNK];
  const int nops = a->max_exp_avg_sq ? 5 : 4;
  for (int64_t c = begin; c < end; c += OPT_CHUNK) {
    int64_t n = end - c < OPT_CHUNK ? end - c : OPT_CHUNK;
    for (int k = 0; k < nops; ++k)
      tpu_convert(buf[k], TPU_DTYPE_F32, 1, (char*)ops[k] + (size_t)c * es, a->dtype, 1, n);
    adam_step_f32(a, n, buf[0], buf[1], buf[2], buf[3], a->max_exp_avg_sq ? buf[4] : NULL);
    for (int k = 0; k < nops; ++k) {
      if (k == 1 && !a->scaled) continue; /* the grad is written only when unscaled */
      tpu_convert((char*)ops[k] + (size_t)c * es, a->dtype, 1, buf[k], TPU_DTYPE_F32, 1, n);
    }
  }
}

static tpu_status_t adam_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  (void)ctx;
  adam_args_t a;
  TPU_RETURN_IF_ERROR(tpu_adam_parse(def, node, &a));
  if (a.skip || a.numel == 0) return TPU_OK;
  tpu_parallel_for(a.numel, OPT_GRAIN, run_range, &a);
  return TPU_OK;
}

static tpu_status_t adam_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  /* Values (step, lr, found_inf) are read when the node runs; here only
   * what decides native or fallback: dtypes, shapes, layouts. */
  tpu_node_t probe = *node;
  tpu_value_t inputs[16];
  int32_t n = node->num_inputs < 16 ? node->num_inputs : 16;
  memcpy(inputs, node->inputs, sizeof(tpu_value_t) * (size_t)n);
  probe.inputs = inputs;
  adam_args_t a;
  const char* values[] = {"state_steps", "lr", "grad_scale", "found_inf"};
  for (int k = 0; k < 4; ++k) {
    int32_t i = tpu_spec_index(def->inputs, values[k]);
    if (i < 0 || i >= n || inputs[i].kind != TPU_VALUE_VIEW) continue;
    const tpu_view_t* v = &inputs[i].u.view;
    if (tpu_view_numel(v) != 1 || tpu_dtype_is_complex(v->dtype))
      return unimpl("a step, lr or scale that is not one number");
    /* a stand-in number: the view's value is not read before the node runs */
    inputs[i].kind = TPU_VALUE_SCALAR;
    memset(&inputs[i].u.scalar, 0, sizeof(inputs[i].u.scalar));
    inputs[i].u.scalar.dtype = TPU_DTYPE_F64;
    inputs[i].u.scalar.v.f = k == 2 ? 1.0 : 0.5;
  }
  return tpu_adam_parse(def, &probe, &a);
}

/* ---- the op table ------------------------------------------------------------------- */

#define OPT_INPUTS \
  "self*!,grads*!,exp_avgs*!,exp_avg_sqs*!,max_exp_avg_sqs*!,state_steps*,lr#,grad_scale?,found_inf?"
#define OPT_ATTRS "beta1,beta2,weight_decay,eps,amsgrad,maximize"

static const int k_adamw = 1; /* impl: non-NULL for the AdamW row */

static const tpu_op_def_t k_rows[] = {
    {.name = "fused_adam", .inputs = OPT_INPUTS, .attrs = OPT_ATTRS, .outputs = "",
     .aten = "_fused_adam_ _fused_adam_.tensor_lr", .kernel = adam_kernel, .infer = NULL,
     .check = adam_check, .impl = NULL, .flags = TPU_OP_FOREACH, .rows = NULL},
    {.name = "fused_adamw", .inputs = OPT_INPUTS, .attrs = OPT_ATTRS, .outputs = "",
     .aten = "_fused_adamw_ _fused_adamw_.tensor_lr", .kernel = adam_kernel, .infer = NULL,
     .check = adam_check, .impl = &k_adamw, .flags = TPU_OP_FOREACH, .rows = NULL},
};

const tpu_op_family_t tpu_family_optim = {"optim", k_rows,
                                          (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
