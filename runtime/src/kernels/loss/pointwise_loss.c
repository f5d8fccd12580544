/* pointwise_loss.c — mse_loss, smooth_l1_loss, huber_loss,
 * binary_cross_entropy and their backward ops (see pointwise_loss.h).
 *
 * The elements of the (broadcast) shape are split into blocks of BLOCK over
 * tpu_parallel_for; a block walks them CHUNK at a time: self, target, weight
 * and grad_output are gathered into double buffers (broadcast by stride 0),
 * the per-element formula runs over the buffers, and the values are either
 * scattered to the output (reduction none, backward) or summed into the
 * block's partial sum. Partial sums are added in block order afterwards, so
 * a reduced result does not depend on the thread count.
 * binary_cross_entropy checks that every input lies in [0, 1] (PyTorch's
 * RuntimeError, INVALID_ARGUMENT here).
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/loss/pointwise_loss.h"

#define CHUNK 1024
#define BLOCK 16384

/* ---- parsing -------------------------------------------------------------------- */

static tpu_status_t unimpl(const char* what) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "pointwise loss: %s", what);
}

tpu_status_t tpu_pl_parse(const tpu_op_def_t* def, const tpu_node_t* node, pl_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->impl = (const pl_impl_t*)def->impl;
  const pl_impl_t* im = a->impl;
  const tpu_view_t* x = ku_input(def, node, "self");
  const tpu_view_t* t = ku_input(def, node, "target");
  const tpu_view_t* w = ku_input(def, node, "weight");
  const tpu_view_t* g = im->backward ? ku_input(def, node, "grad_output") : NULL;
  if (!x || !t || (im->backward && !g)) return unimpl("missing tensors");
  if (!tpu_dtype_is_floating(x->dtype) || t->dtype != x->dtype ||
      (w && w->dtype != x->dtype) || (g && !tpu_dtype_is_floating(g->dtype)))
    return unimpl("no native kernel for these dtypes");
  a->reduction = tpu_attr_int(ku_attr(def, node, "reduction"), PL_MEAN);
  if (a->reduction < PL_NONE || a->reduction > PL_SUM) return unimpl("unknown reduction");
  if (im->kind == PL_SMOOTH_L1) {
    a->param = tpu_attr_float(ku_attr(def, node, "beta"), 1.0);
    if (!(a->param >= 0.0)) return unimpl("negative beta");
  } else if (im->kind == PL_HUBER) {
    a->param = tpu_attr_float(ku_attr(def, node, "delta"), 1.0);
    if (!(a->param > 0.0)) return unimpl("non-positive delta");
  }
  /* The elementwise shape: broadcast of self and target (backward and
   * binary_cross_entropy: self's own shape). */
  tpu_view_t* f = &a->full;
  *f = *x;
  f->addr = 0;
  if (!im->backward && im->kind != PL_BCE) {
    const tpu_value_t vals[2] = {node->inputs[tpu_spec_index(def->inputs, "self")],
                                 node->inputs[tpu_spec_index(def->inputs, "target")]};
    tpu_status_t s = tpu_broadcast_shapes(vals, 2, f->sizes, &f->ndim);
    if (s != TPU_OK) {
      tpu_status_free(s);
      return unimpl("self and target do not broadcast");
    }
  }
  if (im->kind == PL_BCE && !views_same_shape(x, t)) return unimpl("target shape differs");
  tpu_view_set_contiguous(f);
  if (!view_expand(x, f->ndim, f->sizes, &a->x) || !view_expand(t, f->ndim, f->sizes, &a->t))
    return unimpl("self and target do not broadcast");
  a->has_w = w != NULL;
  if (w && !view_expand(w, f->ndim, f->sizes, &a->w)) return unimpl("weight does not broadcast");
  if (g && !view_expand(g, f->ndim, f->sizes, &a->g))
    return unimpl("grad_output does not broadcast");
  a->numel = tpu_view_numel(f);
  a->norm = (im->backward && a->reduction == PL_MEAN) ? 1.0 / (double)a->numel : 1.0;
  a->shape = *f;
  if (!im->backward && a->reduction != PL_NONE) a->shape.ndim = 0;
  tpu_view_set_contiguous(&a->shape);
  return TPU_OK;
}

static tpu_status_t pl_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* out) {
  pl_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_pl_parse(def, node, &a)));
  out[0] = a.shape;
  return TPU_OK;
}

static tpu_status_t pl_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  pl_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_pl_parse(def, node, &a)));
  if (node->num_outputs > 0 && node->outputs[0].addr > 1 &&
      !views_same_shape(&node->outputs[0], &a.shape))
    return unimpl("output of another shape");
  return TPU_OK;
}

/* ---- the optimised kernel ------------------------------------------------------------ */

typedef struct plan {
  const pl_args_t* a;
  const tpu_view_t* out;
  walk_t wx, wt, ww, wg, wo;
  bool reduce;
  double* part;  /* per block: sum of the values */
  int64_t* bad;  /* per block: binary_cross_entropy inputs outside [0, 1] */
} plan_t;

static void block_work(void* arg, int64_t begin, int64_t end) {
  const plan_t* p = (const plan_t*)arg;
  const pl_args_t* a = p->a;
  const int kind = a->impl->kind;
  const bool bwd = a->impl->backward;
  const double prm = a->param, norm = a->norm;
  const tpu_dtype_t dt = a->x.dtype;
  const bool half = dt == TPU_DTYPE_F16 || dt == TPU_DTYPE_BF16;
  double x[CHUNK], t[CHUNK], w[CHUNK], g[CHUNK];
  for (int64_t b = begin; b < end; ++b) {
    int64_t k0 = b * BLOCK, k1 = k0 + BLOCK < a->numel ? k0 + BLOCK : a->numel;
    double sum = 0.0;
    int64_t bad = 0;
    for (int64_t k = k0; k < k1; k += CHUNK) {
      int64_t n = k1 - k < CHUNK ? k1 - k : CHUNK;
      walk_gather(x, TPU_DTYPE_F64, tpu_view_ptr(&a->x), a->x.dtype, &p->wx, k, n);
      walk_gather(t, TPU_DTYPE_F64, tpu_view_ptr(&a->t), a->t.dtype, &p->wt, k, n);
      if (a->has_w) walk_gather(w, TPU_DTYPE_F64, tpu_view_ptr(&a->w), a->w.dtype, &p->ww, k, n);
      if (bwd) walk_gather(g, TPU_DTYPE_F64, tpu_view_ptr(&a->g), a->g.dtype, &p->wg, k, n);
      if (half) {
        for (int64_t j = 0; j < n; ++j) {
          double wj = a->has_w ? w[j] : 1.0;
          if (kind == PL_BCE) bad += !(x[j] >= 0.0 && x[j] <= 1.0);
          x[j] = bwd ? pl_backward_half(kind, dt, prm, x[j], t[j], wj, g[j], norm, a->numel)
                     : pl_forward_half(kind, dt, prm, x[j], t[j], wj);
        }
      } else {
        /* One loop per kind, the kind a constant: the formula's switch folds away. */
#define PL_LOOP(K)                                                                        \
  do {                                                                                    \
    if (bwd)                                                                              \
      for (int64_t j = 0; j < n; ++j)                                                     \
        x[j] = pl_backward(K, prm, x[j], t[j], a->has_w ? w[j] : 1.0, g[j]) * norm;       \
    else                                                                                  \
      for (int64_t j = 0; j < n; ++j)                                                     \
        x[j] = pl_forward(K, prm, x[j], t[j], a->has_w ? w[j] : 1.0);                     \
  } while (0)
        switch (kind) {
          case PL_MSE: PL_LOOP(PL_MSE); break;
          case PL_SMOOTH_L1: PL_LOOP(PL_SMOOTH_L1); break;
          case PL_HUBER: PL_LOOP(PL_HUBER); break;
          default:
            for (int64_t j = 0; j < n; ++j) bad += !(x[j] >= 0.0 && x[j] <= 1.0);
            PL_LOOP(PL_BCE);
        }
#undef PL_LOOP
      }
      if (p->reduce)
        for (int64_t j = 0; j < n; ++j) sum += x[j];
      else
        walk_scatter(tpu_view_ptr(p->out), p->out->dtype, &p->wo, k, x, TPU_DTYPE_F64, n);
    }
    p->part[b] = sum;
    p->bad[b] = bad;
  }
}

static tpu_status_t pl_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  (void)ctx;
  pl_args_t a;
  TPU_RETURN_IF_ERROR(tpu_pl_parse(def, node, &a));
  if (node->num_outputs < 1 || !views_same_shape(&node->outputs[0], &a.shape))
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output has the wrong shape");
  plan_t p;
  memset(&p, 0, sizeof(p));
  p.a = &a;
  p.out = &node->outputs[0];
  p.reduce = !a.impl->backward && a.reduction != PL_NONE;
  walk_init_tail(&p.wx, &a.x, 0);
  walk_init_tail(&p.wt, &a.t, 0);
  if (a.has_w) walk_init_tail(&p.ww, &a.w, 0);
  if (a.impl->backward) walk_init_tail(&p.wg, &a.g, 0);
  if (!p.reduce) walk_init_tail(&p.wo, p.out, 0);
  int64_t blocks = (a.numel + BLOCK - 1) / BLOCK;
  size_t slots = (size_t)(blocks > 0 ? blocks : 1);
  p.part = (double*)calloc(slots, sizeof(double));
  p.bad = (int64_t*)calloc(slots, sizeof(int64_t));
  if (!p.part || !p.bad) {
    free(p.part);
    free(p.bad);
    TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for a loss");
  }
  tpu_parallel_for(blocks, 1, block_work, &p);
  double sum = 0.0;
  int64_t bad = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    sum += p.part[b];
    bad += p.bad[b];
  }
  free(p.part);
  free(p.bad);
  if (bad)
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "all elements of input should be between 0 and 1");
  if (p.reduce)
    view_set_f64(p.out, 0, a.reduction == PL_MEAN ? sum / (double)a.numel : sum);
  return TPU_OK;
}

/* ---- the op table ------------------------------------------------------------------- */

static const pl_impl_t k_mse = {PL_MSE, false}, k_mse_b = {PL_MSE, true};
static const pl_impl_t k_sl1 = {PL_SMOOTH_L1, false}, k_sl1_b = {PL_SMOOTH_L1, true};
static const pl_impl_t k_hub = {PL_HUBER, false}, k_hub_b = {PL_HUBER, true};
static const pl_impl_t k_bce = {PL_BCE, false}, k_bce_b = {PL_BCE, true};

#define PL_ROW(name_, in, attrs_, out, aten_, impl_) \
  {.name = name_, .inputs = in, .attrs = attrs_, .outputs = out, .aten = aten_, .kernel = pl_kernel, \
   .infer = pl_infer, .check = pl_check, .impl = &impl_}

static const tpu_op_def_t k_rows[] = {
    PL_ROW("mse_loss", "self,target", "reduction", "out", "mse_loss mse_loss.out", k_mse),
    PL_ROW("mse_loss_backward", "grad_output,self,target", "reduction", "grad_input",
           "mse_loss_backward mse_loss_backward.grad_input", k_mse_b),
    PL_ROW("smooth_l1_loss", "self,target", "reduction,beta", "out",
           "smooth_l1_loss smooth_l1_loss.out", k_sl1),
    PL_ROW("smooth_l1_loss_backward", "grad_output,self,target", "reduction,beta", "grad_input",
           "smooth_l1_loss_backward smooth_l1_loss_backward.grad_input", k_sl1_b),
    PL_ROW("huber_loss", "self,target", "reduction,delta", "out", "huber_loss huber_loss.out",
           k_hub),
    PL_ROW("huber_loss_backward", "grad_output,self,target", "reduction,delta", "grad_input",
           "huber_loss_backward huber_loss_backward.out", k_hub_b),
    PL_ROW("binary_cross_entropy", "self,target,weight?", "reduction", "out",
           "binary_cross_entropy binary_cross_entropy.out", k_bce),
    PL_ROW("binary_cross_entropy_backward", "grad_output,self,target,weight?", "reduction",
           "grad_input", "binary_cross_entropy_backward binary_cross_entropy_backward.grad_input",
           k_bce_b),
};

const tpu_op_family_t tpu_family_pointwise_loss = {
    "pointwise_loss", k_rows, (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
