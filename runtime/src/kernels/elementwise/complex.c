/* complex.c — elementwise ops whose math is complex: the complex
 * product (mul's complex path) and polar form. RoPE, as Llama-style models
 * write it, is view_as_complex, polar, a complex mul and view_as_real; the
 * views are metadata, so these two kernels make it native.
 *
 * mul's row (op_table.c) takes complex operands two ways. A complex
 * input 0 times real operands is real-linear and runs on real views
 * (TPU_OP_COMPLEX_AS_REAL, in the registry); every other complex mul — a
 * complex other, or a real self times a complex other — reaches the row's
 * functions here, which hand real nodes on to the elementwise executor and
 * run complex ones themselves.
 *
 * Values follow PyTorch CPU: operands are promoted to the result dtype
 * (complex64 or complex128)
 * and the product is (ac - bd) + (ad + bc)i in that dtype's part type. A real
 * operand is a complex one with a zero imaginary part. Inputs broadcast
 * right-aligned to the output's shape; the output must not partly overlap an
 * input (exactly one of them is fine: in-place mul_).
 */
#include <math.h>
#include <string.h>

#include "kernels/elementwise/elementwise.h"
#include "kernels/common/kernel_util.h"

/* ---- operands ----------------------------------------------------------------- */

/* An operand of a complex kernel: a view broadcast to the output's shape, or
 * a real number. */
typedef struct cx_operand {
  bool is_view;
  tpu_view_t view; /* broadcast to the output's shape */
  double value;    /* a number's value (real) */
} cx_operand_t;

/* A complex product's result dtype: complex64 or complex128 (the runtime has
 * no complex32; such tensors never reach it). */
static bool cx_result_ok(tpu_dtype_t d) { return d == TPU_DTYPE_C64 || d == TPU_DTYPE_C128; }

static bool node_has_complex_view(const tpu_node_t* node) {
  for (int32_t i = 0; i < node->num_inputs; ++i)
    if (node->inputs[i].kind == TPU_VALUE_VIEW && tpu_dtype_is_complex(node->inputs[i].u.view.dtype))
      return true;
  for (int32_t o = 0; node->outputs && o < node->num_outputs; ++o)
    if (tpu_dtype_is_complex(node->outputs[o].dtype)) return true;
  return false;
}

/* Reads element `off` (in elements of v's dtype) of a complex or real view. */
static inline void cx_load(const tpu_view_t* v, const char* base, int64_t off, double* re,
                           double* im) {
  switch (v->dtype) {
    case TPU_DTYPE_C64: {
      const float* p = (const float*)base + 2 * off;
      *re = p[0];
      *im = p[1];
      return;
    }
    case TPU_DTYPE_C128: {
      const double* p = (const double*)base + 2 * off;
      *re = p[0];
      *im = p[1];
      return;
    }
    default: {
      double x;
      tpu_convert(&x, TPU_DTYPE_F64, 1, base + off * (int64_t)tpu_dtype_size(v->dtype), v->dtype,
                  1, 1);
      *re = x;
      *im = 0;
      return;
    }
  }
}

/* ---- the product ------------------------------------------------------------ */

typedef struct cx_mul_job {
  walk_t walk; /* view 0: the output; views 1, 2: self and other when they are views */
  const tpu_view_t* out;
  const cx_operand_t* a;
  const cx_operand_t* b;
  const char *abase, *bbase;
  char* obase;
} cx_mul_job_t;

/* Both complex64 tensors, the common case (RoPE): float math, as PyTorch's
 * complex<float> product. */
static void cx_mul_run_c64(const cx_mul_job_t* j, const int64_t* offs, const int64_t* steps,
                           int64_t n) {
  float* o = (float*)j->obase + 2 * offs[0];
  const float* a = (const float*)j->abase + 2 * offs[1];
  const float* b = (const float*)j->bbase + 2 * offs[2];
  const int64_t so = 2 * steps[0], sa = 2 * steps[1], sb = 2 * steps[2];
  for (int64_t e = 0; e < n; ++e) {
    float ar = a[e * sa], ai = a[e * sa + 1], br = b[e * sb], bi = b[e * sb + 1];
    o[e * so] = ar * br - ai * bi;
    o[e * so + 1] = ar * bi + ai * br;
  }
}

static void cx_mul_run(void* arg, const int64_t* offs, const int64_t* steps, int64_t n,
                       int64_t first) {
  (void)first;
  const cx_mul_job_t* j = (const cx_mul_job_t*)arg;
  if (j->out->dtype == TPU_DTYPE_C64 && j->a->is_view && j->b->is_view &&
      j->a->view.dtype == TPU_DTYPE_C64 && j->b->view.dtype == TPU_DTYPE_C64) {
    cx_mul_run_c64(j, offs, steps, n);
    return;
  }
  const bool single = j->out->dtype == TPU_DTYPE_C64;
  for (int64_t e = 0; e < n; ++e) {
    double ar = j->a->value, ai = 0, br = j->b->value, bi = 0;
    if (j->a->is_view) cx_load(&j->a->view, j->abase, offs[1] + e * steps[1], &ar, &ai);
    if (j->b->is_view) cx_load(&j->b->view, j->bbase, offs[2] + e * steps[2], &br, &bi);
    int64_t oo = offs[0] + e * steps[0];
    if (single) { /* operands rounded to complex64 first, float math */
      float fr = (float)ar, fi = (float)ai, gr = (float)br, gi = (float)bi;
      float* o = (float*)j->obase + 2 * oo;
      o[0] = fr * gr - fi * gi;
      o[1] = fr * gi + fi * gr;
    } else {
      double* o = (double*)j->obase + 2 * oo;
      o[0] = ar * br - ai * bi;
      o[1] = ar * bi + ai * br;
    }
  }
}

static void cx_mul_chunk(void* arg, int64_t begin, int64_t end) {
  cx_mul_job_t* j = (cx_mul_job_t*)arg;
  walk_range(&j->walk, begin, end, cx_mul_run, j);
}

/* Operand i of a complex node: a view broadcast to `shape`, or a number. */
static tpu_status_t cx_operand(const tpu_op_def_t* def, const tpu_node_t* node, int32_t i,
                               const tpu_view_t* shape, cx_operand_t* out) {
  memset(out, 0, sizeof(*out));
  const tpu_value_t* v = &node->inputs[i];
  if (v->kind == TPU_VALUE_SCALAR) {
    out->value = tpu_dtype_is_floating(v->u.scalar.dtype) ? v->u.scalar.v.f
                                                          : (double)v->u.scalar.v.i;
    return TPU_OK;
  }
  if (v->kind != TPU_VALUE_VIEW)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: operand %d is absent", def->name, i);
  out->is_view = true;
  if (!view_expand(&v->u.view, shape->ndim, shape->sizes, &out->view))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: operand %d does not broadcast",
                           def->name, i);
  return TPU_OK;
}

/* The complex node's output metadata: broadcast shape, result dtype. */
static tpu_status_t cx_mul_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_view_t* out) {
  memset(out, 0, sizeof(*out));
  TPU_RETURN_IF_ERROR(tpu_broadcast_shapes(node->inputs, node->num_inputs, out->sizes, &out->ndim));
  out->dtype = tpu_result_type(node->inputs, node->num_inputs);
  if (!cx_result_ok(out->dtype))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: %s result", def->name,
                           tpu_dtype_name(out->dtype));
  tpu_view_set_contiguous(out);
  return TPU_OK;
}

static tpu_status_t cx_mul_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  tpu_view_t want;
  TPU_RETURN_IF_ERROR(cx_mul_infer(def, node, &want));
  const tpu_view_t* out = &node->outputs[0];
  /* out= / in-place: PyTorch casts the complex result to out's dtype; only
   * a complex out of the result dtype runs here (a real out= is an error
   * there, a wider one rare: both fall back). */
  if (out->dtype != want.dtype)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: %s output of a %s product", def->name,
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

static tpu_status_t cx_mul_kernel(const tpu_op_def_t* def, const tpu_node_t* node) {
  TPU_RETURN_IF_ERROR(cx_mul_check(def, node));
  const tpu_view_t* out = &node->outputs[0];
  cx_operand_t a, b;
  TPU_RETURN_IF_ERROR(cx_operand(def, node, 0, out, &a));
  TPU_RETURN_IF_ERROR(cx_operand(def, node, 1, out, &b));
  cx_mul_job_t j;
  memset(&j, 0, sizeof(j));
  tpu_view_t zero = *out; /* a number's stand-in in the walk: stride 0 */
  for (int32_t d = 0; d < zero.ndim; ++d) zero.strides[d] = 0;
  const tpu_view_t* views[3] = {out, a.is_view ? &a.view : &zero, b.is_view ? &b.view : &zero};
  walk_init_views(&j.walk, 3, views);
  j.out = out;
  j.a = &a;
  j.b = &b;
  j.obase = (char*)tpu_view_ptr(out);
  j.abase = a.is_view ? (const char*)tpu_view_ptr(&a.view) : NULL;
  j.bbase = b.is_view ? (const char*)tpu_view_ptr(&b.view) : NULL;
  tpu_parallel_for(j.walk.numel, WALK_GRAIN / 4, cx_mul_chunk, &j);
  return TPU_OK;
}

/* ---- mul's row functions ------------------------------------------------------ */

tpu_status_t tpu_ew_mul_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_exec_ctx_t* ctx) {
  if (node_has_complex_view(node)) return cx_mul_kernel(def, node);
  return tpu_ew_kernel(def, node, ctx);
}

tpu_status_t tpu_ew_mul_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_view_t* out_views) {
  if (node_has_complex_view(node)) return cx_mul_infer(def, node, &out_views[0]);
  return tpu_ew_infer(def, node, out_views);
}

tpu_status_t tpu_ew_mul_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  if (node_has_complex_view(node)) return cx_mul_check(def, node);
  return tpu_ew_check(def, node);
}

/* ---- polar ------------------------------------------------------------------ */

/* polar(abs, angle) = abs * (cos(angle) + i sin(angle)): abs and angle are
 * float or double tensors of one dtype (PyTorch's rule), broadcast; the
 * output is the matching complex dtype. */
static tpu_status_t polar_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_view_t* out) {
  const tpu_view_t* a = ku_input(def, node, "abs");
  const tpu_view_t* t = ku_input(def, node, "angle");
  if (!a || !t) return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "polar: number operands");
  /* PyTorch: "Expected object of scalar type Float but got scalar type
   * Double": mismatched or non-float dtypes raise there (fallback). */
  if (a->dtype != t->dtype || (a->dtype != TPU_DTYPE_F32 && a->dtype != TPU_DTYPE_F64))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "polar: %s and %s operands",
                           tpu_dtype_name(a->dtype), tpu_dtype_name(t->dtype));
  memset(out, 0, sizeof(*out));
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_broadcast_shapes(node->inputs, 2, out->sizes, &out->ndim)));
  out->dtype = tpu_dtype_to_complex(a->dtype);
  tpu_view_set_contiguous(out);
  return TPU_OK;
}

static tpu_status_t polar_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  tpu_view_t want;
  TPU_RETURN_IF_ERROR(polar_infer(def, node, &want));
  const tpu_view_t* out = &node->outputs[0];
  if (out->dtype != want.dtype)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "polar: %s output", tpu_dtype_name(out->dtype));
  if (!views_same_shape(out, &want))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "polar: output shape does not match");
  for (int32_t i = 0; i < 2; ++i)
    if (views_overlap(out, &node->inputs[i].u.view))
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "polar: output overlaps an input");
  for (int32_t d = 0; d < out->ndim; ++d)
    if (out->strides[d] == 0 && out->sizes[d] > 1)
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "polar: broadcast output");
  return TPU_OK;
}

typedef struct polar_job {
  walk_t walk; /* views: out, abs, angle */
  tpu_dtype_t part;
  char *out;
  const char *abs, *angle;
} polar_job_t;

static void polar_run(void* arg, const int64_t* offs, const int64_t* steps, int64_t n,
                      int64_t first) {
  (void)first;
  const polar_job_t* j = (const polar_job_t*)arg;
  if (j->part == TPU_DTYPE_F32) {
    float* o = (float*)j->out + 2 * offs[0];
    const float* r = (const float*)j->abs + offs[1];
    const float* t = (const float*)j->angle + offs[2];
    for (int64_t e = 0; e < n; ++e) {
      float x = r[e * steps[1]], a = t[e * steps[2]];
      o[2 * e * steps[0]] = x * cosf(a);
      o[2 * e * steps[0] + 1] = x * sinf(a);
    }
  } else {
    double* o = (double*)j->out + 2 * offs[0];
    const double* r = (const double*)j->abs + offs[1];
    const double* t = (const double*)j->angle + offs[2];
    for (int64_t e = 0; e < n; ++e) {
      double x = r[e * steps[1]], a = t[e * steps[2]];
      o[2 * e * steps[0]] = x * cos(a);
      o[2 * e * steps[0] + 1] = x * sin(a);
    }
  }
}

static void polar_chunk(void* arg, int64_t begin, int64_t end) {
  polar_job_t* j = (polar_job_t*)arg;
  walk_range(&j->walk, begin, end, polar_run, j);
}

static tpu_status_t polar_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_exec_ctx_t* ctx) {
  (void)ctx;
  TPU_RETURN_IF_ERROR(polar_check(def, node));
  const tpu_view_t* out = &node->outputs[0];
  tpu_view_t a, t;
  view_expand(ku_input(def, node, "abs"), out->ndim, out->sizes, &a);
  view_expand(ku_input(def, node, "angle"), out->ndim, out->sizes, &t);
  polar_job_t j;
  const tpu_view_t* views[3] = {out, &a, &t};
  walk_init_views(&j.walk, 3, views);
  j.part = a.dtype;
  j.out = (char*)tpu_view_ptr(out);
  j.abs = (const char*)tpu_view_ptr(&a);
  j.angle = (const char*)tpu_view_ptr(&t);
  tpu_parallel_for(j.walk.numel, WALK_GRAIN / 8, polar_chunk, &j);
  return TPU_OK;
}

static const tpu_op_def_t g_rows[] = {
    {"polar", "abs,angle", "", "out", "polar polar.out", polar_kernel, polar_infer, polar_check,
     NULL, TPU_OP_COMPLEX},
};

const tpu_op_family_t tpu_family_elementwise_complex = {
    "elementwise_complex", g_rows, (int32_t)(sizeof(g_rows) / sizeof(g_rows[0]))};
