/* multilabel_margin_loss.c — multilabel_margin_loss_forward and _backward.
 *
 * self is [N, C] (N may be 0), [C] or 0-dim (one sample of one class);
 * target has self's size, int64 class indices, each row's list ending at its
 * first negative entry (-1). Per sample i, with T_i its targets:
 *   is_target[i, d] = 1 when d is in T_i (0 elsewhere; self's dtype),
 *   loss_i = sum over y in T_i, d not in T_i of max(0, 1 - x[i, y] + x[i, d]) / C.
 * Output: reduction none with a 2-D target gives [N] per-sample losses;
 * otherwise one 0-dim value (mean: sum_i loss_i / N; sum; none of a 1-D
 * target: loss_0). The backward adds g per hinge term that is positive to
 * grad[i, d] and subtracts it from grad[i, y], g = grad_output[i] / C (none)
 * or grad_output / C (/ N for mean), reading the forward's is_target as
 * PyTorch's CPU kernel does. The hinge z is evaluated in self's dtype (as
 * the CPU does, so the z > 0 decisions agree), sums in double.
 *
 * Samples run in parallel; per-sample sums are added in order, so results
 * do not depend on the thread count. PyTorch's argument errors are raised
 * here with its messages (INVALID_ARGUMENT: RuntimeError): an empty class
 * dim or a rank above 2, a target of another size or dtype, a target entry
 * outside [-1, C) ("argument #2 'target' is out of range", found while the
 * kernel runs), an is_target entry outside [0, 1]. Half types are not
 * accepted by the CPU either (UNIMPLEMENTED: its NotImplementedError).
 * tpu_multilabel_margin_reference is the element-by-element version the C
 * test compares against.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/kernel_util.h"

enum { MLM_NONE = 0, MLM_MEAN = 1, MLM_SUM = 2 };

typedef struct mlm_args {
  bool backward;
  const tpu_view_t *x, *t, *g, *ist;
  int64_t n, c, reduction;
  bool per_sample; /* the loss (and grad_output) is [N] */
  tpu_view_t shape[2];
} mlm_args_t;

/* PyTorch's ScalarType names, for its "expected scalar type" message. */
static const char* mlm_type_name(tpu_dtype_t d) {
  switch (d) {
    case TPU_DTYPE_F32: return "Float";
    case TPU_DTYPE_F64: return "Double";
    case TPU_DTYPE_F16: return "Half";
    case TPU_DTYPE_BF16: return "BFloat16";
    case TPU_DTYPE_I32: return "Int";
    case TPU_DTYPE_I16: return "Short";
    case TPU_DTYPE_I8: return "Char";
    case TPU_DTYPE_U8: return "Byte";
    case TPU_DTYPE_BOOL: return "Bool";
    default: return tpu_dtype_name(d);
  }
}

static tpu_status_t mlm_parse(const tpu_op_def_t* def, const tpu_node_t* node, mlm_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->backward = def->impl != NULL;
  a->x = ku_input(def, node, "self");
  a->t = ku_input(def, node, "target");
  a->g = a->backward ? ku_input(def, node, "grad_output") : NULL;
  a->ist = a->backward ? ku_input(def, node, "is_target") : NULL;
  if (!a->x || !a->t || (a->backward && (!a->g || !a->ist)))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "multilabel_margin_loss: missing tensors");
  a->reduction = tpu_attr_int(ku_attr(def, node, "reduction"), MLM_MEAN);
  const tpu_view_t *x = a->x, *t = a->t;
  char xs[160], ts[160];
  ku_format_sizes(x, xs, sizeof(xs));
  ku_format_sizes(t, ts, sizeof(ts));
  if (!((x->ndim == 2 && x->sizes[1] != 0) || (x->ndim == 1 && x->sizes[0] != 0) || x->ndim == 0))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "Expected non-empty vector or matrix with optional 0-dim batch size, "
                           "but got: %s", xs);
  if (x->ndim <= 1) {
    a->n = 1;
    a->c = x->ndim == 0 ? 1 : x->sizes[0];
    if (!(t->ndim <= 1 && tpu_view_numel(t) == a->c))
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "inconsistent target size: %s for input of size: %s", ts, xs);
  } else {
    a->n = x->sizes[0];
    a->c = x->sizes[1];
    if (!(t->ndim == 2 && t->sizes[0] == a->n && t->sizes[1] == a->c))
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "inconsistent target size: %s for input of size: %s", ts, xs);
  }
  if (x->dtype != TPU_DTYPE_F32 && x->dtype != TPU_DTYPE_F64)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED,
                           "\"multilabel_margin_loss_forward_out_frame\" not implemented for '%s'",
                           mlm_type_name(x->dtype));
  if (t->dtype != TPU_DTYPE_I64)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "expected scalar type Long but found %s",
                           mlm_type_name(t->dtype));
  if (a->reduction < MLM_NONE || a->reduction > MLM_SUM)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "multilabel_margin_loss: reduction");
  a->per_sample = a->reduction == MLM_NONE && t->ndim > 1;
  if (a->backward) {
    if (!views_same_shape(a->ist, t)) {
      char is[160];
      ku_format_sizes(a->ist, is, sizeof(is));
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "Expected tensor for argument #3 'target' to have the same size as "
                             "tensor for argument #5 'is_target'; but %s does not equal %s "
                             "(while checking arguments for "
                             "multilabel_margin_loss_backward_cpu_template)", ts, is);
    }
    if (a->ist->dtype != x->dtype || a->g->dtype != x->dtype ||
        (a->per_sample ? !(a->g->ndim == 1 && a->g->sizes[0] == a->n)
                       : tpu_view_numel(a->g) != 1))
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "multilabel_margin_loss: grad/is_target");
    a->shape[0] = *x;
    a->shape[0].addr = 0;
    tpu_view_set_contiguous(&a->shape[0]);
  } else {
    a->shape[0].dtype = x->dtype;
    a->shape[0].ndim = a->per_sample ? 1 : 0;
    a->shape[0].sizes[0] = a->n;
    tpu_view_set_contiguous(&a->shape[0]);
    a->shape[1] = *t;
    a->shape[1].addr = 0;
    a->shape[1].dtype = x->dtype;
    tpu_view_set_contiguous(&a->shape[1]);
  }
  return TPU_OK;
}

static tpu_status_t mlm_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* out) {
  mlm_args_t a;
  TPU_RETURN_IF_ERROR(mlm_parse(def, node, &a));
  out[0] = a.shape[0];
  if (!a.backward) out[1] = a.shape[1];
  return TPU_OK;
}

static tpu_status_t mlm_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  mlm_args_t a;
  TPU_RETURN_IF_ERROR(mlm_parse(def, node, &a));
  for (int32_t k = 0; k < node->num_outputs && k < (a.backward ? 1 : 2); ++k)
    if (node->outputs[k].addr > 1 && !views_same_shape(&node->outputs[k], &a.shape[k]))
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "multilabel_margin_loss: output shape");
  return TPU_OK;
}

/* The hinge 1 - xy + xd in self's dtype, as the CPU computes it. */
static inline double mlm_z(bool f32, double xy, double xd) {
  return f32 ? (double)((1.0f - (float)xy) + (float)xd) : (1.0 - xy) + xd;
}

typedef struct mlm_plan {
  const mlm_args_t* a;
  const double* x;
  const int64_t* t;
  double* ist;  /* forward: written; backward: the forward's, read */
  double* loss; /* forward: per sample */
  double* grad; /* backward: [N, C] */
  double gscale;
  int64_t* bad; /* per sample: 1 target out of range, 2 is_target out of range */
} mlm_plan_t;

static void mlm_rows(void* arg, int64_t begin, int64_t end) {
  const mlm_plan_t* pl = (const mlm_plan_t*)arg;
  const mlm_args_t* a = pl->a;
  const int64_t C = a->c;
  const bool f32 = a->x->dtype == TPU_DTYPE_F32;
  for (int64_t i = begin; i < end; ++i) {
    const double* x = pl->x + i * C;
    const int64_t* t = pl->t + i * C;
    double* ist = pl->ist + i * C;
    pl->bad[i] = 0;
    for (int64_t j = 0; j < C; ++j)
      if (t[j] < -1 || t[j] >= C) pl->bad[i] = 1;
    if (pl->bad[i]) continue;
    if (!a->backward) {
      for (int64_t d = 0; d < C; ++d) ist[d] = 0.0;
      for (int64_t j = 0; j < C && t[j] >= 0; ++j) ist[t[j]] = 1.0;
      double sum = 0.0;
      for (int64_t j = 0; j < C && t[j] >= 0; ++j) {
        double xy = x[t[j]];
        for (int64_t d = 0; d < C; ++d) {
          if (ist[d] != 0.0) continue;
          double z = mlm_z(f32, xy, x[d]);
          if (z > 0) sum += z;
        }
      }
      pl->loss[i] = sum / (double)C;
      continue;
    }
    for (int64_t d = 0; d < C; ++d)
      if (!(ist[d] >= 0.0 && ist[d] <= 1.0)) pl->bad[i] = 2;
    if (pl->bad[i]) continue;
    double g = a->per_sample ? view_get_f64(a->g, i * a->g->strides[0]) / (double)C : pl->gscale;
    double* gr = pl->grad + i * C;
    for (int64_t d = 0; d < C; ++d) gr[d] = 0.0;
    for (int64_t j = 0; j < C && t[j] >= 0; ++j) {
      double xy = x[t[j]];
      int64_t hits = 0;
      for (int64_t d = 0; d < C; ++d) {
        if (ist[d] != 0.0) continue;
        if (mlm_z(f32, xy, x[d]) > 0) {
          gr[d] += g;
          ++hits;
        }
      }
      gr[t[j]] -= (double)hits * g;
    }
  }
}

static tpu_status_t mlm_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_exec_ctx_t* ctx) {
  (void)ctx;
  mlm_args_t a;
  TPU_RETURN_IF_ERROR(mlm_parse(def, node, &a));
  int32_t nout = a.backward ? 1 : 2;
  if (node->num_outputs < nout) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "missing outputs");
  for (int32_t k = 0; k < nout; ++k)
    if (!views_same_shape(&node->outputs[k], &a.shape[k]))
      TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output has the wrong shape");
  int64_t nc = a.n * a.c;
  mlm_plan_t pl;
  memset(&pl, 0, sizeof(pl));
  pl.a = &a;
  pl.x = (const double*)walk_gather_view(a.x, TPU_DTYPE_F64);
  pl.t = (const int64_t*)walk_gather_view(a.t, TPU_DTYPE_I64);
  pl.ist = a.backward ? (double*)walk_gather_view(a.ist, TPU_DTYPE_F64)
                      : (double*)malloc(sizeof(double) * (size_t)(nc > 0 ? nc : 1));
  pl.loss = (double*)malloc(sizeof(double) * (size_t)(a.n > 0 ? a.n : 1));
  pl.grad = a.backward ? (double*)malloc(sizeof(double) * (size_t)(nc > 0 ? nc : 1)) : NULL;
  pl.bad = (int64_t*)calloc((size_t)(a.n > 0 ? a.n : 1), sizeof(int64_t));
  tpu_status_t s = TPU_OK;
  if (!pl.x || !pl.t || !pl.ist || !pl.loss || !pl.bad || (a.backward && !pl.grad)) {
    s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "no host memory for multilabel_margin_loss");
    goto done;
  }
  if (a.backward && !a.per_sample)
    pl.gscale = view_get_f64(a.g, 0) /
                ((double)a.c * (a.reduction == MLM_MEAN ? (double)a.n : 1.0));
  int64_t grain = a.c >= 1024 ? 1 : 1024 / a.c;
  tpu_parallel_for(a.n, grain, mlm_rows, &pl);
  double total = 0.0;
  for (int64_t i = 0; i < a.n && s == TPU_OK; ++i) {
    if (pl.bad[i] == 1)
      s = tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "argument #%d 'target' is out of range",
                          a.backward ? 3 : 2);
    else if (pl.bad[i] == 2)
      s = tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "argument #5 'is_target' is out of range");
    else if (!a.backward)
      total += pl.loss[i];
  }
  if (s != TPU_OK) goto done;
  if (a.backward) {
    walk_scatter_view(&node->outputs[0], pl.grad, TPU_DTYPE_F64);
  } else {
    walk_scatter_view(&node->outputs[1], pl.ist, TPU_DTYPE_F64);
    if (a.per_sample) {
      walk_scatter_view(&node->outputs[0], pl.loss, TPU_DTYPE_F64);
    } else {
      /* An empty batch: the sum is 0, the mean 0 / 0 (the CPU leaves it unset). */
      double v = a.reduction == MLM_MEAN ? total / (double)a.n : total;
      view_set_f64(&node->outputs[0], 0, v);
    }
  }
done:
  free((void*)pl.x), free((void*)pl.t), free(pl.ist), free(pl.loss), free(pl.grad), free(pl.bad);
  return s;
}

/* ---- the reference: element by element, in double --------------------------------- */

static int64_t mlm_off(const mlm_args_t* a, const tpu_view_t* v, int64_t i, int64_t d) {
  if (v->ndim == 2) return i * v->strides[0] + d * v->strides[1];
  (void)a;
  return v->ndim ? d * v->strides[0] : 0;
}

tpu_status_t tpu_multilabel_margin_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                             tpu_exec_ctx_t* ctx);
tpu_status_t tpu_multilabel_margin_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                             tpu_exec_ctx_t* ctx) {
  (void)ctx;
  mlm_args_t a;
  TPU_RETURN_IF_ERROR(mlm_parse(def, node, &a));
  const bool f32 = a.x->dtype == TPU_DTYPE_F32;
  const tpu_view_t* out = &node->outputs[0];
  double total = 0.0;
  for (int64_t i = 0; i < a.n; ++i) {
    double sum = 0.0, g = 0.0;
    if (a.backward) {
      g = a.per_sample ? view_get_f64(a.g, i * a.g->strides[0]) : view_get_f64(a.g, 0);
      g /= (double)a.c * (a.reduction == MLM_MEAN && !a.per_sample ? (double)a.n : 1.0);
      for (int64_t d = 0; d < a.c; ++d) view_set_f64(out, mlm_off(&a, out, i, d), 0.0);
    }
    for (int64_t j = 0; j < a.c; ++j) {
      int64_t y = view_get_i64(a.t, mlm_off(&a, a.t, i, j));
      if (y < -1 || y >= a.c)
        TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "target is out of range");
    }
    for (int64_t d = 0; d < a.c && !a.backward; ++d)
      view_set_f64(&node->outputs[1], mlm_off(&a, &node->outputs[1], i, d), 0.0);
    for (int64_t j = 0; j < a.c; ++j) {
      int64_t y = view_get_i64(a.t, mlm_off(&a, a.t, i, j));
      if (y < 0) break;
      if (!a.backward) view_set_f64(&node->outputs[1], mlm_off(&a, &node->outputs[1], i, y), 1.0);
    }
    const tpu_view_t* ist = a.backward ? a.ist : &node->outputs[1];
    for (int64_t j = 0; j < a.c; ++j) {
      int64_t y = view_get_i64(a.t, mlm_off(&a, a.t, i, j));
      if (y < 0) break;
      double xy = view_get_f64(a.x, mlm_off(&a, a.x, i, y));
      for (int64_t d = 0; d < a.c; ++d) {
        if (view_get_f64(ist, mlm_off(&a, ist, i, d)) != 0.0) continue;
        double z = mlm_z(f32, xy, view_get_f64(a.x, mlm_off(&a, a.x, i, d)));
        if (z <= 0) continue;
        if (!a.backward) {
          sum += z;
          continue;
        }
        int64_t od = mlm_off(&a, out, i, d), oy = mlm_off(&a, out, i, y);
        view_set_f64(out, od, view_get_f64(out, od) + g);
        view_set_f64(out, oy, view_get_f64(out, oy) - g);
      }
    }
    if (a.backward) continue;
    if (a.per_sample) view_set_f64(out, i * out->strides[0], sum / (double)a.c);
    else total += sum / (double)a.c;
  }
  if (!a.backward && !a.per_sample)
    view_set_f64(out, 0, a.reduction == MLM_MEAN ? total / (double)a.n : total);
  return TPU_OK;
}

static const int k_bwd = 1;

static const tpu_op_def_t k_rows[] = {
    {.name = "multilabel_margin_loss_forward", .inputs = "self,target", .attrs = "reduction",
     .outputs = "output,is_target",
     .aten = "multilabel_margin_loss_forward multilabel_margin_loss_forward.output",
     .kernel = mlm_kernel, .infer = mlm_infer, .check = mlm_check, .impl = NULL},
    {.name = "multilabel_margin_loss_backward", .inputs = "grad_output,self,target,is_target",
     .attrs = "reduction", .outputs = "grad_input",
     .aten = "multilabel_margin_loss_backward multilabel_margin_loss_backward.grad_input",
     .kernel = mlm_kernel, .infer = mlm_infer, .check = mlm_check, .impl = &k_bwd},
};

const tpu_op_family_t tpu_family_multilabel_margin_loss = {
    "multilabel_margin_loss", k_rows, (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
