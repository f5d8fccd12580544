/* complex.c — elementwise ops on complex operands: the executor of the
 * elementwise rows' complex math (tpu_ew_cx_*), and the ops whose math is
 * complex by definition, polar and complex. RoPE, as Llama-style models
 * write it, is view_as_complex, polar, a complex mul and view_as_real; the
 * views are metadata, so these make it native.
 *
 * An elementwise row takes complex operands when its impl has a `cx`
 * function (elementwise.h; the functions are in complex_math.c): the row
 * functions of executor.c hand any node with a complex operand to the ones
 * here. mul's row also runs a complex input 0 times real operands on real
 * views (TPU_OP_COMPLEX_AS_REAL, in the registry), which never reach here.
 *
 * Values follow PyTorch CPU: the result dtype is the promotion of the
 * operands (complex64 or complex128; real and bool operands have imaginary
 * part 0), abs and angle give its part dtype, eq
 * and ne bool. Python numbers may be complex (x * 1j; alpha=2j on add, sub,
 * rsub; value= on addcmul, addcdiv), and make a real tensor's result complex
 * as on the CPU (float32 * 1j is complex64, float64 * 1j complex128; half
 * types would give complex32, which tpu lacks: refused). The math runs in double complex and is rounded once at the
 * store. Inputs broadcast right-aligned to the output's shape; the output
 * must not partly overlap an input (exactly one of them is fine: in place),
 * nor be broadcast. An out= of another dtype than the result (PyTorch casts
 * or raises) is left to the CPU fallback.
 */
#include <math.h>
#include <string.h>

#include "kernels/elementwise/elementwise.h"
#include "kernels/common/kernel_util.h"

/* ---- the executor ----------------------------------------------------------- */


/* Elements a run computes at a time: operands in stack arrays. */
#define CX_RUN 128

static bool cx_result_ok(tpu_dtype_t d) { return d == TPU_DTYPE_C64 || d == TPU_DTYPE_C128; }

bool tpu_ew_node_is_complex(const tpu_node_t* node) {
  for (int32_t i = 0; i < node->num_inputs; ++i) {
    const tpu_value_t* v = &node->inputs[i];
    if ((v->kind == TPU_VALUE_VIEW && tpu_dtype_is_complex(v->u.view.dtype)) ||
        (v->kind == TPU_VALUE_SCALAR && tpu_dtype_is_complex(v->u.scalar.dtype)))
      return true;
  }
  for (int32_t a = 0; a < node->num_attrs && a < TPU_MAX_ATTRS; ++a)
    if (node->attrs[a].kind == TPU_ATTR_COMPLEX) return true;
  for (int32_t o = 0; node->outputs && o < node->num_outputs; ++o)
    if (tpu_dtype_is_complex(node->outputs[o].dtype)) return true;
  return false;
}

static tpu_status_t cx_refuse(const tpu_op_def_t* def, const char* why) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: %s on complex operands", def->name, why);
}

/* The complex node's dtypes and parameters: plan->common is the complex
 * dtype the math rounds to, plan->result the output's. */
static tpu_status_t cx_plan(const tpu_op_def_t* def, const tpu_node_t* node, tpu_ew_plan_t* plan) {
  const tpu_ew_impl_t* impl = (const tpu_ew_impl_t*)def->impl;
  if (!impl || !impl->cx) return cx_refuse(def, "no complex kernel");
  int32_t nin = node->num_inputs;
  memset(plan, 0, sizeof(*plan));
  plan->impl = impl;
  tpu_dtype_t rt;
  TPU_RETURN_IF_ERROR(tpu_ew_promote(def, node, &rt));
  for (int32_t k = 0; k < nin; ++k) {
    const tpu_value_t* v = &node->inputs[k];
    if ((impl->bool_in >> k & 1) &&
        (v->kind != TPU_VALUE_VIEW || v->u.view.dtype != TPU_DTYPE_BOOL))
      return cx_refuse(def, "a non-bool condition");
  }
  if (!cx_result_ok(rt)) return cx_refuse(def, tpu_dtype_name(rt));
  for (int32_t k = 0; k < nin; ++k) {
    const tpu_value_t* v = &node->inputs[k];
    if ((impl->flags & TPU_EW_SAME_DTYPE) && v->kind == TPU_VALUE_VIEW && v->u.view.dtype != rt)
      return cx_refuse(def, "inputs of different dtypes");
    if ((impl->flags & TPU_EW_VALUE_0DIM) && k == nin - 1 && v->kind == TPU_VALUE_VIEW &&
        v->u.view.ndim != 0)
      return cx_refuse(def, "a value tensor with dims");
    if ((impl->flags & TPU_EW_NO_BOOL) && v->kind != TPU_VALUE_NONE &&
        (v->kind == TPU_VALUE_VIEW ? v->u.view.dtype : v->u.scalar.dtype) == TPU_DTYPE_BOOL)
      return cx_refuse(def, "a bool operand");
  }
  switch (impl->rule) {
    case TPU_EW_PROMOTE:
    case TPU_EW_FLOAT:
      plan->result = rt;
      break;
    case TPU_EW_DIV: {
      /* a rounding mode: PyTorch refuses it for complex ("div_trunc_cpu"
       * not implemented): the fallback raises that */
      if (node->num_attrs >= 1 && node->attrs[0].kind != TPU_ATTR_NONE)
        return cx_refuse(def, "a rounding mode");
      plan->result = rt;
      break;
    }
    case TPU_EW_BOOL_OUT:
      plan->result = TPU_DTYPE_BOOL;
      break;
    case TPU_EW_FIRST: /* masked_fill: self's dtype */
      if (node->inputs[0].kind != TPU_VALUE_VIEW || node->inputs[0].u.view.dtype != rt)
        return cx_refuse(def, "a self of another dtype");
      plan->result = rt;
      break;
  }
  if (impl->flags & TPU_EW_CX_PART) plan->result = tpu_dtype_part(rt);
  /* number attrs (alpha, value) are read against the part dtype: a real
   * number scales both parts; a complex one (alpha=2j) has its imaginary
   * part in params.fi. Both rounded as the part dtype holds them. */
  plan->common = tpu_dtype_part(rt);
  TPU_RETURN_IF_ERROR(tpu_ew_parse_params(def, node, plan));
  if (rt == TPU_DTYPE_C64)
    for (int32_t j = 0; j < impl->num_params; ++j) {
      plan->params.f[j] = (float)plan->params.f[j];
      plan->params.fi[j] = (float)plan->params.fi[j];
    }
  plan->common = rt;
  plan->params.mode = rt == TPU_DTYPE_C64 ? TPU_EW_CX_SINGLE : TPU_EW_CX_DOUBLE;
  return TPU_OK;
}

tpu_status_t tpu_ew_cx_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                             tpu_view_t* out_views) {
  tpu_ew_plan_t plan;
  TPU_RETURN_IF_ERROR(cx_plan(def, node, &plan));
  tpu_view_t* out = &out_views[0];
  memset(out, 0, sizeof(*out));
  TPU_RETURN_IF_ERROR(tpu_broadcast_shapes(node->inputs, node->num_inputs, out->sizes, &out->ndim));
  out->dtype = plan.result;
  tpu_view_set_contiguous(out);
  return TPU_OK;
}

tpu_status_t tpu_ew_cx_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  tpu_view_t want;
  TPU_RETURN_IF_ERROR(tpu_ew_cx_infer(def, node, &want));
  if (node->num_outputs != 1)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: expected 1 output", def->name);
  const tpu_view_t* out = &node->outputs[0];
  if (out->dtype != want.dtype)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: %s output of a %s result", def->name,
                           tpu_dtype_name(out->dtype), tpu_dtype_name(want.dtype));
  if (!views_same_shape(out, &want))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: output shape does not match",
                           def->name);
  for (int32_t d = 0; d < out->ndim; ++d)
    if (out->strides[d] == 0 && out->sizes[d] > 1)
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "unsupported operation: more than one element of the written-to "
                             "tensor refers to a single memory location. Please clone() the "
                             "tensor before performing the operation.");
  for (int32_t i = 0; i < node->num_inputs; ++i) {
    if (node->inputs[i].kind != TPU_VALUE_VIEW) continue;
    const tpu_view_t* in = &node->inputs[i].u.view;
    if (views_overlap(out, in) && !views_same(out, in))
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "unsupported operation: some elements of the input tensor and the "
                             "written-to tensor refer to a single memory location. Please "
                             "clone() the tensor before performing the operation.");
  }
  return TPU_OK;
}

typedef struct cx_job {
  walk_t walk; /* view 0: the output; view k + 1: input k (a number or absent: stride 0) */
  int32_t nin;
  tpu_ew_cx_fn fn;
  tpu_ew_params_t params;
  char* out;
  tpu_dtype_t out_dtype;
  const char* base[TPU_EW_MAX_INPUTS]; /* NULL: a number (value) or absent (kind) */
  tpu_dtype_t dtype[TPU_EW_MAX_INPUTS];
  tpu_value_kind_t kind[TPU_EW_MAX_INPUTS];
  tpu_ew_cx_t value[TPU_EW_MAX_INPUTS];
} cx_job_t;

static void cx_run(void* arg, const int64_t* offs, const int64_t* steps, int64_t n,
                   int64_t first) {
  (void)first;
  const cx_job_t* j = (const cx_job_t*)arg;
  tpu_ew_cx_t in[TPU_EW_MAX_INPUTS][CX_RUN], res[CX_RUN];
  const tpu_ew_cx_t* ins[TPU_EW_MAX_INPUTS];
  for (int32_t k = 0; k < j->nin; ++k) {
    ins[k] = j->kind[k] == TPU_VALUE_NONE ? NULL : in[k];
    if (j->kind[k] == TPU_VALUE_SCALAR)
      for (int64_t e = 0; e < CX_RUN; ++e) in[k][e] = j->value[k];
  }
  const int64_t osize = (int64_t)tpu_dtype_size(j->out_dtype);
  for (int64_t done = 0; done < n; done += CX_RUN) {
    int64_t m = n - done < CX_RUN ? n - done : CX_RUN;
    for (int32_t k = 0; k < j->nin; ++k) {
      if (j->kind[k] != TPU_VALUE_VIEW) continue;
      int64_t esize = (int64_t)tpu_dtype_size(j->dtype[k]);
      tpu_convert(in[k], TPU_DTYPE_C128, 1,
                  j->base[k] + (offs[k + 1] + done * steps[k + 1]) * esize, j->dtype[k],
                  steps[k + 1], m);
    }
    j->fn(res, ins, m, &j->params);
    tpu_convert(j->out + (offs[0] + done * steps[0]) * osize, j->out_dtype, steps[0], res,
                TPU_DTYPE_C128, 1, m);
  }
}

static void cx_chunk(void* arg, int64_t begin, int64_t end) {
  cx_job_t* j = (cx_job_t*)arg;
  walk_range(&j->walk, begin, end, cx_run, j);
}

tpu_status_t tpu_ew_cx_kernel(const tpu_op_def_t* def, const tpu_node_t* node) {
  TPU_RETURN_IF_ERROR(tpu_ew_cx_check(def, node));
  tpu_ew_plan_t plan;
  TPU_RETURN_IF_ERROR(cx_plan(def, node, &plan));
  const tpu_view_t* out = &node->outputs[0];
  cx_job_t j;
  memset(&j, 0, sizeof(j));
  j.nin = node->num_inputs;
  j.fn = plan.impl->cx;
  j.params = plan.params;
  j.out = (char*)tpu_view_ptr(out);
  j.out_dtype = out->dtype;
  tpu_view_t expanded[TPU_EW_MAX_INPUTS];
  tpu_view_t zero = *out; /* a number's or an absent input's stand-in in the walk */
  for (int32_t d = 0; d < zero.ndim; ++d) zero.strides[d] = 0;
  const tpu_view_t* views[1 + TPU_EW_MAX_INPUTS] = {out};
  for (int32_t k = 0; k < j.nin; ++k) {
    const tpu_value_t* v = &node->inputs[k];
    j.kind[k] = v->kind;
    views[k + 1] = &zero;
    if (v->kind == TPU_VALUE_SCALAR) {
      const tpu_scalar_t* s = &v->u.scalar;
      bool cx = tpu_dtype_is_complex(s->dtype);
      double re = cx ? s->v.c[0] : tpu_dtype_is_floating(s->dtype) ? s->v.f : (double)s->v.i;
      double im = cx ? s->v.c[1] : 0.0;
      /* rounded as the common dtype's parts would hold it */
      if (plan.common == TPU_DTYPE_C64) {
        re = (float)re;
        im = (float)im;
      }
      j.value[k] = tpu_ew_cx_make(re, im);
    } else if (v->kind == TPU_VALUE_VIEW) {
      if (!view_expand(&v->u.view, out->ndim, out->sizes, &expanded[k]))
        return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: operand %d does not broadcast",
                               def->name, k);
      views[k + 1] = &expanded[k];
      j.base[k] = (const char*)tpu_view_ptr(&expanded[k]);
      j.dtype[k] = expanded[k].dtype;
    }
  }
  walk_init_views(&j.walk, 1 + j.nin, views);
  tpu_parallel_for(j.walk.numel, WALK_GRAIN / 16, cx_chunk, &j);
  return TPU_OK;
}

/* ---- polar and complex -------------------------------------------------------- */

/* Two real tensors make one complex tensor:
 *   polar(abs, angle) = abs * (cos(angle) + i sin(angle)),
 *   complex(real, imag) = real + i imag.
 * Both operands are float or double tensors of one dtype (PyTorch's rule:
 * others raise there, through the fallback), broadcast; the output is the
 * matching complex dtype. The row's impl says which. */
typedef struct pair_spec {
  bool polar;
} pair_spec_t;

static const pair_spec_t k_polar = {.polar = true};
static const pair_spec_t k_complex = {.polar = false};

static tpu_status_t pair_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_view_t* out) {
  if (node->num_inputs != 2 || node->inputs[0].kind != TPU_VALUE_VIEW ||
      node->inputs[1].kind != TPU_VALUE_VIEW)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: number operands", def->name);
  const tpu_view_t* a = &node->inputs[0].u.view;
  const tpu_view_t* b = &node->inputs[1].u.view;
  /* PyTorch: "Expected object of scalar type Float but got scalar type
   * Double": mismatched or non-float dtypes raise there (fallback). */
  if (a->dtype != b->dtype || (a->dtype != TPU_DTYPE_F32 && a->dtype != TPU_DTYPE_F64))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: %s and %s operands", def->name,
                           tpu_dtype_name(a->dtype), tpu_dtype_name(b->dtype));
  memset(out, 0, sizeof(*out));
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_broadcast_shapes(node->inputs, 2, out->sizes, &out->ndim)));
  out->dtype = tpu_dtype_to_complex(a->dtype);
  tpu_view_set_contiguous(out);
  return TPU_OK;
}

static tpu_status_t pair_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  tpu_view_t want;
  TPU_RETURN_IF_ERROR(pair_infer(def, node, &want));
  const tpu_view_t* out = &node->outputs[0];
  if (out->dtype != want.dtype)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: %s output", def->name,
                           tpu_dtype_name(out->dtype));
  if (!views_same_shape(out, &want))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: output shape does not match",
                           def->name);
  for (int32_t i = 0; i < 2; ++i)
    if (views_overlap(out, &node->inputs[i].u.view))
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: output overlaps an input", def->name);
  for (int32_t d = 0; d < out->ndim; ++d)
    if (out->strides[d] == 0 && out->sizes[d] > 1)
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: broadcast output", def->name);
  return TPU_OK;
}

typedef struct pair_job {
  walk_t walk; /* views: out, a, b */
  bool polar;
  tpu_dtype_t part;
  char* out;
  const char *a, *b;
} pair_job_t;

#define PAIR_RUN(T, COS, SIN)                                                   \
  do {                                                                          \
    T* o = (T*)j->out + 2 * offs[0];                                            \
    const T* x = (const T*)j->a + offs[1];                                      \
    const T* y = (const T*)j->b + offs[2];                                      \
    for (int64_t e = 0; e < n; ++e) {                                           \
      T u = x[e * steps[1]], v = y[e * steps[2]];                               \
      o[2 * e * steps[0]] = j->polar ? u * COS(v) : u;                          \
      o[2 * e * steps[0] + 1] = j->polar ? u * SIN(v) : v;                      \
    }                                                                           \
  } while (0)

static void pair_run(void* arg, const int64_t* offs, const int64_t* steps, int64_t n,
                     int64_t first) {
  (void)first;
  const pair_job_t* j = (const pair_job_t*)arg;
  if (j->part == TPU_DTYPE_F32)
    PAIR_RUN(float, cosf, sinf);
  else
    PAIR_RUN(double, cos, sin);
}

static void pair_chunk(void* arg, int64_t begin, int64_t end) {
  pair_job_t* j = (pair_job_t*)arg;
  walk_range(&j->walk, begin, end, pair_run, j);
}

static tpu_status_t pair_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  (void)ctx;
  TPU_RETURN_IF_ERROR(pair_check(def, node));
  const tpu_view_t* out = &node->outputs[0];
  tpu_view_t a, b;
  view_expand(&node->inputs[0].u.view, out->ndim, out->sizes, &a);
  view_expand(&node->inputs[1].u.view, out->ndim, out->sizes, &b);
  pair_job_t j;
  const tpu_view_t* views[3] = {out, &a, &b};
  walk_init_views(&j.walk, 3, views);
  j.polar = ((const pair_spec_t*)def->impl)->polar;
  j.part = a.dtype;
  j.out = (char*)tpu_view_ptr(out);
  j.a = (const char*)tpu_view_ptr(&a);
  j.b = (const char*)tpu_view_ptr(&b);
  tpu_parallel_for(j.walk.numel, WALK_GRAIN / 8, pair_chunk, &j);
  return TPU_OK;
}

static const tpu_op_def_t g_rows[] = {
    {.name = "polar", .inputs = "abs,angle", .attrs = "", .outputs = "out",
     .aten = "polar polar.out", .kernel = pair_kernel, .infer = pair_infer, .check = pair_check,
     .impl = &k_polar, .flags = TPU_OP_COMPLEX},
    {.name = "complex", .inputs = "real,imag", .attrs = "", .outputs = "out",
     .aten = "complex complex.out", .kernel = pair_kernel, .infer = pair_infer,
     .check = pair_check, .impl = &k_complex, .flags = TPU_OP_COMPLEX},
};

const tpu_op_family_t tpu_family_elementwise_complex = {
    "elementwise_complex", g_rows, (int32_t)(sizeof(g_rows) / sizeof(g_rows[0]))};
