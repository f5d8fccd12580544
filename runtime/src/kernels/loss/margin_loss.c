/* margin_loss.c — multi_margin_loss and multi_margin_loss_backward.
 *
 * self is [N, C] (or [C]: one sample), target [N] int64 class indices.
 * Per sample i with target y, over classes d != y:
 *   z = margin - x[i, y] + x[i, d];  h = z (p = 1) or z^2 (p = 2) when z > 0,
 *   times weight[y]; loss_i = sum h / C.
 * Reduction none (with a batch): loss_i per sample; mean: sum_i loss_i / N;
 * sum: sum_i loss_i. Backward: grad[i, d] = g_i * (p = 1 ? 1 : 2z) * w[y] / C
 * for d != y with z > 0, grad[i, y] = minus their sum, with g_i grad_output[i]
 * (none) or grad_output (/ N for mean), as PyTorch's CPU kernel.
 * Samples run in parallel (tpu_parallel_for over blocks of rows, each row
 * gathered into a double buffer); reduced sums are kept per sample and added
 * in order, so results do not depend on the thread count. A target outside
 * [0, C) is PyTorch's RuntimeError ("target out of range"): INVALID_ARGUMENT.
 * p other than 1 or 2, bad shapes and dtypes fall back (the CPU raises).
 * tpu_margin_reference is the plain per-element version the C test compares.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/kernel_util.h"

enum { ML_NONE = 0, ML_MEAN = 1, ML_SUM = 2 };

typedef struct ml_args {
  bool backward;
  const tpu_view_t *x, *t, *w, *g;
  int64_t n, c, reduction;
  int p;
  double margin;
  bool batched, per_sample;
  tpu_view_t shape;
} ml_args_t;

static tpu_status_t unimpl(const char* what) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "multi_margin_loss: %s", what);
}

static tpu_status_t ml_parse(const tpu_op_def_t* def, const tpu_node_t* node, ml_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->backward = def->impl != NULL;
  a->x = ku_input(def, node, "self");
  a->t = ku_input(def, node, "target");
  a->w = ku_input(def, node, "weight");
  a->g = a->backward ? ku_input(def, node, "grad_output") : NULL;
  if (!a->x || !a->t || (a->backward && !a->g)) return unimpl("missing tensors");
  const tpu_attr_t* pa = ku_attr(def, node, "p");
  double p = pa && pa->kind == TPU_ATTR_FLOAT ? pa->u.f : (double)tpu_attr_int(pa, 1);
  if (p != 1.0 && p != 2.0) return unimpl("only p == 1 and p == 2 supported");
  a->p = (int)p;
  const tpu_attr_t* ma = ku_attr(def, node, "margin");
  a->margin = ma && ma->kind == TPU_ATTR_INT ? (double)ma->u.i : tpu_attr_float(ma, 1.0);
  a->reduction = tpu_attr_int(ku_attr(def, node, "reduction"), ML_MEAN);
  const tpu_view_t *x = a->x, *t = a->t;
  /* multi_margin_loss_shape_check: PyTorch's messages (RuntimeError). */
  char xs[128], ts[128];
  if (!((x->ndim == 2 && x->sizes[1] != 0) || (x->ndim == 1 && x->sizes[0] != 0) ||
        x->ndim == 0))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "Expected non-empty vector or matrix with optional 0-dim batch size, "
                           "but got: %s", ku_format_sizes(x, xs, sizeof(xs)));
  int64_t nframe = x->ndim <= 1 ? 1 : x->sizes[0];
  int64_t dim = x->ndim == 0 ? 1 : x->sizes[x->ndim - 1];
  if (t->ndim > 1 || tpu_view_numel(t) != nframe)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "multi_margin_loss: target tensor should be 1-D with size equal to the "
                           "number of input samples (batch size). Expected target size [%lld], "
                           "but got %s. Input has shape %s.", (long long)nframe,
                           ku_format_sizes(t, ts, sizeof(ts)), ku_format_sizes(x, xs, sizeof(xs)));
  if (a->w && (a->w->ndim > 1 || tpu_view_numel(a->w) != dim))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "inconsistent weight size, expected %lld but got %s",
                           (long long)dim, ku_format_sizes(a->w, ts, sizeof(ts)));
  if (!tpu_dtype_is_floating(x->dtype) || t->dtype != TPU_DTYPE_I64 ||
      (a->w && a->w->dtype != x->dtype) || (a->g && !tpu_dtype_is_floating(a->g->dtype)) ||
      a->reduction < ML_NONE || a->reduction > ML_SUM)
    return unimpl("dtypes or reduction");
  if (x->ndim == 2 && x->sizes[0] > 0 && x->sizes[1] > 0 && t->ndim == 1 &&
      t->sizes[0] == x->sizes[0]) {
    a->n = x->sizes[0];
    a->c = x->sizes[1];
    a->batched = true;
  } else if (x->ndim <= 1 && tpu_view_numel(x) > 0 && tpu_view_numel(t) == 1 && t->ndim <= 1) {
    a->n = 1;
    a->c = tpu_view_numel(x);
  } else {
    return unimpl("shapes");
  }
  if (a->w && a->w->ndim != 1) return unimpl("weight shape"); /* 0-dim: one class */
  a->per_sample = a->reduction == ML_NONE && t->ndim > 0;
  if (a->backward) {
    if (a->per_sample ? tpu_view_numel(a->g) != a->n : tpu_view_numel(a->g) != 1)
      return unimpl("grad_output shape");
    a->shape = *x;
    a->shape.addr = 0;
  } else {
    memset(&a->shape, 0, sizeof(a->shape));
    a->shape.dtype = x->dtype;
    if (a->per_sample) {
      a->shape.ndim = 1;
      a->shape.sizes[0] = a->n;
    }
  }
  tpu_view_set_contiguous(&a->shape);
  return TPU_OK;
}

static tpu_status_t ml_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* out) {
  ml_args_t a;
  TPU_RETURN_IF_ERROR(ml_parse(def, node, &a));
  out[0] = a.shape;
  return TPU_OK;
}

static tpu_status_t ml_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  ml_args_t a;
  TPU_RETURN_IF_ERROR(ml_parse(def, node, &a));
  if (node->num_outputs > 0 && node->outputs[0].addr > 1 &&
      !views_same_shape(&node->outputs[0], &a.shape))
    return unimpl("output of another shape");
  return TPU_OK;
}

/* Element (i, d) of an [N, C] view, or d of a 1-D/0-dim one. */
static int64_t ml_off(const ml_args_t* a, const tpu_view_t* v, int64_t i, int64_t d) {
  if (a->batched) return i * v->strides[0] + d * v->strides[1];
  return v->ndim ? d * v->strides[0] : 0;
}

typedef struct ml_plan {
  const ml_args_t* a;
  const tpu_view_t* out;
  double* loss;   /* forward: per sample */
  double* w;      /* weight in double, or NULL */
  int64_t* bad;   /* per sample: 1 when the target is out of range */
  double gscale;  /* backward, reduced: grad_output (/ N for mean) */
} ml_plan_t;

static void ml_rows(void* arg, int64_t begin, int64_t end) {
  const ml_plan_t* pl = (const ml_plan_t*)arg;
  const ml_args_t* a = pl->a;
  int64_t C = a->c;
  double* row = (double*)malloc(sizeof(double) * (size_t)C * 2);
  if (!row) {
    for (int64_t i = begin; i < end; ++i) pl->bad[i] = 2;
    return;
  }
  double* gr = row + C;
  walk_t wr, wo;
  tpu_view_t xr = *a->x, orow = *pl->out;
  for (int64_t i = begin; i < end; ++i) {
    int64_t y = view_get_i64(a->t, a->t->ndim ? i * a->t->strides[0] : 0);
    pl->bad[i] = y < 0 || y >= C;
    if (pl->bad[i]) continue;
    /* Row i as a 1-D view. */
    xr.ndim = 1;
    xr.sizes[0] = C;
    xr.strides[0] = a->batched ? a->x->strides[1] : (a->x->ndim ? a->x->strides[0] : 0);
    xr.addr = a->x->addr + (uint64_t)(ml_off(a, a->x, i, 0) * (int64_t)tpu_dtype_size(a->x->dtype));
    walk_init_tail(&wr, &xr, 0);
    walk_gather(row, TPU_DTYPE_F64, tpu_view_ptr(&xr), xr.dtype, &wr, 0, C);
    double xt = row[y], wy = pl->w ? pl->w[y] : 1.0;
    if (!a->backward) {
      double sum = 0.0;
      for (int64_t d = 0; d < C; ++d) {
        if (d == y) continue;
        double z = a->margin - xt + row[d];
        if (z > 0) sum += (a->p == 1 ? z : z * z) * wy;
      }
      pl->loss[i] = sum / (double)C;
      continue;
    }
    double g = a->per_sample ? view_get_f64(a->g, i * (a->g->ndim ? a->g->strides[0] : 0))
                             : pl->gscale;
    double gc = g / (double)C, gsum = 0.0;
    for (int64_t d = 0; d < C; ++d) {
      double z = a->margin - xt + row[d];
      double h = (d != y && z > 0) ? (a->p == 1 ? gc : 2.0 * gc * z) * wy : 0.0;
      gr[d] = h;
      gsum += h;
    }
    gr[y] = -gsum;
    orow = *pl->out;
    orow.ndim = 1;
    orow.sizes[0] = C;
    orow.strides[0] = a->batched ? pl->out->strides[1] : (pl->out->ndim ? pl->out->strides[0] : 0);
    orow.addr = pl->out->addr +
                (uint64_t)(ml_off(a, pl->out, i, 0) * (int64_t)tpu_dtype_size(pl->out->dtype));
    walk_init_tail(&wo, &orow, 0);
    walk_scatter(tpu_view_ptr(&orow), orow.dtype, &wo, 0, gr, TPU_DTYPE_F64, C);
  }
  free(row);
}

static tpu_status_t ml_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  (void)ctx;
  ml_args_t a;
  TPU_RETURN_IF_ERROR(ml_parse(def, node, &a));
  if (node->num_outputs < 1 || !views_same_shape(&node->outputs[0], &a.shape))
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output has the wrong shape");
  ml_plan_t pl = {&a, &node->outputs[0], NULL, NULL, NULL, 0.0};
  pl.loss = (double*)malloc(sizeof(double) * (size_t)a.n);
  pl.bad = (int64_t*)calloc((size_t)a.n, sizeof(int64_t));
  pl.w = a.w ? (double*)malloc(sizeof(double) * (size_t)a.c) : NULL;
  if (!pl.loss || !pl.bad || (a.w && !pl.w)) {
    free(pl.loss), free(pl.bad), free(pl.w);
    TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for multi_margin_loss");
  }
  if (a.w) {
    walk_t ww;
    walk_init_tail(&ww, a.w, 0);
    walk_gather(pl.w, TPU_DTYPE_F64, tpu_view_ptr(a.w), a.w->dtype, &ww, 0, a.c);
  }
  if (a.backward && !a.per_sample)
    pl.gscale = view_get_f64(a.g, 0) / (a.reduction == ML_MEAN ? (double)a.n : 1.0);
  int64_t grain = a.c >= 4096 ? 1 : 4096 / a.c;
  tpu_parallel_for(a.n, grain, ml_rows, &pl);
  tpu_status_t s = TPU_OK;
  double total = 0.0;
  for (int64_t i = 0; i < a.n && s == TPU_OK; ++i) {
    if (pl.bad[i] == 2) s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "no host memory");
    else if (pl.bad[i]) s = tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "target out of range");
    else if (!a.backward) total += pl.loss[i];
  }
  if (s == TPU_OK && !a.backward) {
    if (a.per_sample) {
      walk_t wo;
      walk_init_tail(&wo, pl.out, 0);
      walk_scatter(tpu_view_ptr(pl.out), pl.out->dtype, &wo, 0, pl.loss, TPU_DTYPE_F64, a.n);
    } else {
      view_set_f64(pl.out, 0, a.reduction == ML_MEAN ? total / (double)a.n : total);
    }
  }
  free(pl.loss), free(pl.bad), free(pl.w);
  return s;
}

/* The reference: element by element, in double. */
tpu_status_t tpu_margin_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx);
tpu_status_t tpu_margin_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx) {
  (void)ctx;
  ml_args_t a;
  TPU_RETURN_IF_ERROR(ml_parse(def, node, &a));
  const tpu_view_t* out = &node->outputs[0];
  double total = 0.0;
  for (int64_t i = 0; i < a.n; ++i) {
    int64_t y = view_get_i64(a.t, a.t->ndim ? i * a.t->strides[0] : 0);
    if (y < 0 || y >= a.c) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "target out of range");
    double xt = view_get_f64(a.x, ml_off(&a, a.x, i, y));
    double wy = a.w ? view_get_f64(a.w, y * a.w->strides[0]) : 1.0;
    double g = 0.0, sum = 0.0, gsum = 0.0;
    if (a.backward)
      g = a.per_sample ? view_get_f64(a.g, i * (a.g->ndim ? a.g->strides[0] : 0))
                       : view_get_f64(a.g, 0) / (a.reduction == ML_MEAN ? (double)a.n : 1.0);
    for (int64_t d = 0; d < a.c; ++d) {
      double z = a.margin - xt + view_get_f64(a.x, ml_off(&a, a.x, i, d));
      bool on = d != y && z > 0;
      if (!a.backward) {
        if (on) sum += (a.p == 1 ? z : z * z) * wy;
        continue;
      }
      double h = on ? (a.p == 1 ? 1.0 : 2.0 * z) * wy * g / (double)a.c : 0.0;
      gsum += h;
      view_set_f64(out, ml_off(&a, out, i, d), h);
    }
    if (a.backward) view_set_f64(out, ml_off(&a, out, i, y), -gsum);
    else if (a.per_sample) view_set_f64(out, i * out->strides[0], sum / (double)a.c);
    else total += sum / (double)a.c;
  }
  if (!a.backward && !a.per_sample)
    view_set_f64(out, 0, a.reduction == ML_MEAN ? total / (double)a.n : total);
  return TPU_OK;
}

static const int k_bwd = 1;

static const tpu_op_def_t k_rows[] = {
    {.name = "multi_margin_loss", .inputs = "self,target,weight?", .attrs = "p,margin,reduction",
     .outputs = "out", .aten = "multi_margin_loss multi_margin_loss.out", .kernel = ml_kernel,
     .infer = ml_infer, .check = ml_check, .impl = NULL},
    {.name = "multi_margin_loss_backward", .inputs = "grad_output,self,target,weight?",
     .attrs = "p,margin,reduction", .outputs = "grad_input",
     .aten = "multi_margin_loss_backward multi_margin_loss_backward.grad_input",
     .kernel = ml_kernel, .infer = ml_infer, .check = ml_check, .impl = &k_bwd},
};

const tpu_op_family_t tpu_family_margin_loss = {"margin_loss", k_rows,
                                                (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
