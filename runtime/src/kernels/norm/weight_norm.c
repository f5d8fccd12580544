/* kernels/norm/weight_norm.c — the weight_norm family: the fused weight
 * normalisation of nn.utils.weight_norm (torch._weight_norm routes here for
 * dim 0 and the last dim, as on the CPU):
 *   weight_norm          (_weight_norm_interface):          w = v * (g / norm), norm
 *   weight_norm_backward (_weight_norm_interface_backward): grad_v, grad_g
 * where norm[c] is the 2-norm of v over every dim but `dim`, per channel c.
 * Backward, with s = sum(grad_w * v) over the channel, a = g / norm and
 * b = a * s / norm^2:  grad_g = s / norm,  grad_v = a * grad_w - b * v.
 *
 * Like PyTorch's CPU kernels: float32/float64/bfloat16 (Half is not
 * dispatched there, so it is UNIMPLEMENTED and the CPU raises its error);
 * norms are float32 when g is bfloat16, else g's dtype; sums accumulate in
 * double and per-channel factors round through the compute type (float32 for
 * float32/bfloat16). Only dim 0 and the last dim run natively (the CPU
 * kernel's two layouts); g and the norms must hold one value per channel.
 *
 * Layout: v (and grad_w) are converted into contiguous double buffers
 * (view_copy) seen as [P, C, Q] (P elements before dim, C at it, Q after);
 * channels' sums are spread over tpu_parallel_for, the elementwise pass over
 * flat blocks, and results are converted back with view_copy into outputs of
 * any strides. tpu_weight_norm_reference is the plain per-element reference.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/kernel_util.h"

tpu_status_t tpu_weight_norm_reference(const tpu_op_def_t* def, const tpu_node_t* node);

static tpu_status_t unimpl(const char* what) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s", what);
}

typedef struct wn_args {
  bool backward, f64; /* f64: double compute, else float32 rounding */
  const tpu_view_t *v, *g, *gw, *norms;
  int32_t dim;
  int64_t P, C, Q;
} wn_args_t;

static bool wn_dtype_ok(tpu_dtype_t dt) {
  return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F64 || dt == TPU_DTYPE_BF16;
}

static tpu_dtype_t norm_dtype(tpu_dtype_t g) { return g == TPU_DTYPE_BF16 ? TPU_DTYPE_F32 : g; }

static tpu_status_t wn_parse(const tpu_op_def_t* def, const tpu_node_t* node, wn_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->backward = strcmp(def->name, "weight_norm_backward") == 0;
  a->v = ku_input(def, node, a->backward ? "saved_v" : "v");
  a->g = ku_input(def, node, a->backward ? "saved_g" : "g");
  if (a->backward) {
    a->gw = ku_input(def, node, "grad_w");
    a->norms = ku_input(def, node, "saved_norms");
    if (!a->gw || !a->norms) return unimpl("expected grad_w and saved_norms");
  }
  if (!a->v || !a->g) return unimpl("expected v and g");
  if (a->v->ndim < 1) return unimpl("v must have at least one dim");
  tpu_dtype_t dt = a->v->dtype;
  if (!wn_dtype_ok(dt) || a->g->dtype != dt) return unimpl("dtype not run natively");
  int64_t dim = tpu_attr_int(ku_attr(def, node, "dim"), 0);
  int32_t nd = a->v->ndim;
  if (dim == 0)
    a->dim = 0;
  else if (dim == nd - 1 || dim == -1)
    a->dim = nd - 1;
  else
    return unimpl("only dim 0 and the last dim are fused");
  a->C = a->v->sizes[a->dim];
  a->P = 1, a->Q = 1;
  for (int32_t d = 0; d < nd; ++d) {
    if (d < a->dim) a->P *= a->v->sizes[d];
    if (d > a->dim) a->Q *= a->v->sizes[d];
  }
  if (tpu_view_numel(a->g) != a->C) return unimpl("g must hold one value per channel");
  if (a->backward) {
    if (a->gw->dtype != dt || !views_same_shape(a->gw, a->v)) return unimpl("grad_w unlike v");
    if (a->norms->dtype != norm_dtype(dt) || tpu_view_numel(a->norms) != a->C)
      return unimpl("saved_norms unlike the forward's");
  }
  a->f64 = dt == TPU_DTYPE_F64;
  return TPU_OK;
}

/* Output 0 like v (contiguous), output 1 like g (forward: norms' dtype). */
static tpu_status_t wn_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                             tpu_view_t* outs) {
  wn_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(wn_parse(def, node, &a)));
  outs[0] = *a.v, outs[1] = *a.g;
  outs[0].addr = outs[1].addr = 0;
  if (!a.backward) outs[1].dtype = norm_dtype(a.g->dtype);
  tpu_view_set_contiguous(&outs[0]);
  tpu_view_set_contiguous(&outs[1]);
  return TPU_OK;
}

static tpu_status_t wn_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  wn_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(wn_parse(def, node, &a)));
  if (node->num_outputs != 2 || !node->outputs) return unimpl("expected two outputs");
  const tpu_view_t *o0 = &node->outputs[0], *o1 = &node->outputs[1];
  if (o0->dtype != a.v->dtype || !views_same_shape(o0, a.v)) return unimpl("output 0 unlike v");
  tpu_dtype_t d1 = a.backward ? a.g->dtype : norm_dtype(a.g->dtype);
  if (o1->dtype != d1 || !views_same_shape(o1, a.g)) return unimpl("output 1 unlike g");
  return TPU_OK;
}

/* ---- the optimised kernel ------------------------------------------------------ */

typedef struct wn_job {
  const wn_args_t* a;
  const double *v, *gw, *g, *norm;
  double *out, *s; /* out: w or grad_v; s: per-channel sums */
} wn_job_t;

/* Rounds through float32 unless computing in double. */
static inline double rnd(const wn_args_t* a, double x) { return a->f64 ? x : (double)(float)x; }

/* s[c] = sum over p, q of x[p, c, q] * y[p, c, q]. */
static void wn_sums(void* arg, int64_t begin, int64_t end) {
  const wn_job_t* j = (const wn_job_t*)arg;
  const wn_args_t* a = j->a;
  const double* y = j->gw ? j->gw : j->v;
  for (int64_t c = begin; c < end; ++c) {
    double acc = 0.0;
    for (int64_t p = 0; p < a->P; ++p) {
      const double *x = j->v + (p * a->C + c) * a->Q, *z = y + (p * a->C + c) * a->Q;
      for (int64_t q = 0; q < a->Q; ++q) acc += x[q] * z[q];
    }
    j->s[c] = acc;
  }
}

static void wn_elems(void* arg, int64_t begin, int64_t end) {
  const wn_job_t* j = (const wn_job_t*)arg;
  const wn_args_t* a = j->a;
  for (int64_t k = begin; k < end; ++k) {
    int64_t c = (k / a->Q) % a->C;
    double n = j->norm[c], sc = rnd(a, j->g[c] / n);
    if (!a->backward) {
      j->out[k] = rnd(a, j->v[k] * sc);
    } else {
      double b = rnd(a, rnd(a, sc * j->s[c]) / rnd(a, n * n));
      j->out[k] = rnd(a, rnd(a, sc * j->gw[k]) - rnd(a, b * j->v[k]));
    }
  }
}

/* A contiguous double copy of `v` (NULL when out of memory). */
static double* to_f64(const tpu_view_t* v) {
  int64_t n = tpu_view_numel(v);
  double* buf = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  if (!buf) return NULL;
  tpu_view_t b = view_of(buf, TPU_DTYPE_F64, v->ndim, v->sizes);
  view_copy(&b, v);
  return buf;
}

static tpu_status_t wn_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  (void)ctx;
  wn_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(wn_check(def, node)));
  TPU_RETURN_IF_ERROR(wn_parse(def, node, &a));
  int64_t n = tpu_view_numel(a.v);
  double *v = to_f64(a.v), *g = to_f64(a.g), *gw = a.backward ? to_f64(a.gw) : NULL;
  double* norm = a.backward ? to_f64(a.norms) : malloc(sizeof(double) * (size_t)(a.C + 1));
  double* s = malloc(sizeof(double) * (size_t)(a.C + 1));
  double* o1 = malloc(sizeof(double) * (size_t)(a.C + 1)); /* norms or grad_g */
  double* out = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  tpu_status_t st = TPU_OK;
  if (!v || !g || (a.backward && !gw) || !norm || !s || !o1 || !out) {
    st = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "weight_norm buffers");
    goto done;
  }
  wn_job_t j = {&a, v, gw, g, norm, out, s};
  int64_t grain = a.P * a.Q > 0 ? WALK_GRAIN / (a.P * a.Q) : a.C;
  tpu_parallel_for(a.C, grain > 0 ? grain : 1, wn_sums, &j);
  for (int64_t c = 0; c < a.C; ++c) {
    if (!a.backward)
      norm[c] = o1[c] = rnd(&a, sqrt(s[c]));
    else
      o1[c] = s[c] / norm[c];
  }
  tpu_parallel_for(n, WALK_GRAIN, wn_elems, &j);
  tpu_view_t ob = view_of(out, TPU_DTYPE_F64, a.v->ndim, a.v->sizes);
  view_copy(&node->outputs[0], &ob);
  tpu_view_t sb = view_of(o1, TPU_DTYPE_F64, node->outputs[1].ndim, node->outputs[1].sizes);
  view_copy(&node->outputs[1], &sb);
done:
  free(v), free(g), free(gw), free(norm), free(s), free(o1), free(out);
  return st;
}

/* ---- the reference: one element at a time ------------------------------------ */

/* Flat position k of v's shape as an offset into view x of the same shape. */
static int64_t ref_off(const tpu_view_t* x, int64_t k) {
  int64_t off = 0;
  for (int32_t d = x->ndim - 1; d >= 0; --d) {
    off += (k % x->sizes[d]) * x->strides[d];
    k /= x->sizes[d];
  }
  return off;
}

tpu_status_t tpu_weight_norm_reference(const tpu_op_def_t* def, const tpu_node_t* node) {
  wn_args_t a;
  TPU_RETURN_IF_ERROR(wn_check(def, node));
  TPU_RETURN_IF_ERROR(wn_parse(def, node, &a));
  const tpu_view_t *o0 = &node->outputs[0], *o1 = &node->outputs[1];
  int64_t n = tpu_view_numel(a.v);
  for (int64_t c = 0; c < a.C; ++c) {
    double acc = 0.0;
    for (int64_t k = 0; k < n; ++k) {
      if ((k / a.Q) % a.C != c) continue;
      double x = view_get_f64(a.v, ref_off(a.v, k));
      acc += x * (a.backward ? view_get_f64(a.gw, ref_off(a.gw, k)) : x);
    }
    double g = view_get_f64(a.g, ref_off(a.g, c));
    double nrm = a.backward ? view_get_f64(a.norms, ref_off(a.norms, c)) : rnd(&a, sqrt(acc));
    double sc = rnd(&a, g / nrm), b = rnd(&a, rnd(&a, sc * acc) / rnd(&a, nrm * nrm));
    view_set_f64(o1, ref_off(o1, c), a.backward ? acc / nrm : nrm);
    for (int64_t k = 0; k < n; ++k) {
      if ((k / a.Q) % a.C != c) continue;
      double x = view_get_f64(a.v, ref_off(a.v, k));
      double r = a.backward
                     ? rnd(&a, rnd(&a, sc * view_get_f64(a.gw, ref_off(a.gw, k))) - rnd(&a, b * x))
                     : rnd(&a, x * sc);
      view_set_f64(o0, ref_off(o0, k), r);
    }
  }
  return TPU_OK;
}

static const tpu_op_def_t k_rows[] = {
    {.name = "weight_norm", .inputs = "v,g", .attrs = "dim", .outputs = "w,norm",
     .aten = "_weight_norm_interface", .kernel = wn_kernel, .infer = wn_infer, .check = wn_check,
     .impl = NULL},
    {.name = "weight_norm_backward", .inputs = "grad_w,saved_v,saved_g,saved_norms",
     .attrs = "dim", .outputs = "grad_v,grad_g", .aten = "_weight_norm_interface_backward",
     .kernel = wn_kernel, .infer = wn_infer, .check = wn_check, .impl = NULL},
};

const tpu_op_family_t tpu_family_weight_norm = {"weight_norm", k_rows,
                                                (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
