/* loss.c — nll_loss_forward/backward and nll_loss2d_forward/backward.
 *
 * Forward, per sample q with target t (skipped when t == ignore_index):
 *   loss_q = -weight[t] * self[q, t]
 *   reduction none (batched): output[q] = loss_q (0 for ignored samples),
 *     total_weight = 0
 *   otherwise: total = sum loss_q, total_weight = sum weight[t];
 *     output = total / total_weight (mean; NaN when nothing counts) or total.
 *   A [C] input with a 0-dim target is one sample and always reduces.
 * Backward: grad_input is zeroed, then grad_input[q, t] = -weight[t] * g with
 *   g = grad_output[q] (none, batched), grad_output / total_weight (mean) or
 *   grad_output (sum).
 * A target outside [0, C) that is not ignore_index gives INDEX_ERROR
 * ("Target 7 is out of bounds.", as PyTorch's IndexError), never a read out
 * of bounds.
 *
 * Samples are processed in fixed chunks of CHUNK on tpu_parallel_for: targets
 * and per-sample values are gathered/scattered a chunk at a time, sums are
 * kept per chunk (in double) and added in chunk order afterwards, so results
 * do not depend on the thread count. Each chunk records its first bad target;
 * the earliest one is reported.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/half_bits.h"
#include "kernels/loss/loss.h"

#define CHUNK 4096 /* samples per work item */

/* ---- parsing ------------------------------------------------------------------ */

tpu_status_t tpu_loss_parse(const tpu_op_def_t* def, const tpu_node_t* node, loss_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->impl = (const loss_impl_t*)def->impl;
  a->x = ku_input(def, node, "self");
  a->t = ku_input(def, node, "target");
  a->w = ku_input(def, node, "weight");
  if (!a->x || !a->t) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "expected self and target");
  a->reduction = tpu_attr_int(ku_attr(def, node, "reduction"), LOSS_MEAN);
  a->ignore_index = tpu_attr_int(ku_attr(def, node, "ignore_index"), -100);
  const tpu_view_t *x = a->x, *t = a->t;
  if (a->reduction < LOSS_NONE || a->reduction > LOSS_SUM)
    TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "unknown reduction %lld", (long long)a->reduction);
  if (!tpu_dtype_is_floating(x->dtype))
    TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "nll_loss: no native kernel for %s",
                    tpu_dtype_name(x->dtype));
  if (t->dtype != TPU_DTYPE_I64 && t->dtype != TPU_DTYPE_U8)
    TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED,
                    "expected target dtype to be Long or Byte, but got %s",
                    tpu_dtype_name(t->dtype));

  /* Sample dims: self's dims but the class dim, matching the target's. */
  bool ok;
  if (a->impl->spatial) {
    ok = x->ndim == 4 && t->ndim == 3;
    a->class_dim = 1;
  } else {
    ok = (x->ndim == 1 && t->ndim == 0) || (x->ndim == 2 && t->ndim == 1);
    a->class_dim = x->ndim - 1;
  }
  for (int32_t d = 0; ok && d < x->ndim; ++d) {
    if (d == a->class_dim) continue;
    ok = x->sizes[d] == t->sizes[a->sample_ndim];
    a->sample_dims[a->sample_ndim++] = d;
  }
  if (!ok) TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "nll_loss: unsupported input/target shapes");
  a->classes = x->sizes[a->class_dim];
  a->samples = tpu_view_numel(t);
  if (a->w && a->w->ndim == 1 && a->w->sizes[0] != a->classes && a->impl->spatial)
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT,
                    "weight tensor should be defined either for all or no classes");
  if (a->w && a->w->ndim == 1 && a->w->sizes[0] != a->classes) /* PyTorch's messages */
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT,
                    "weight tensor should be defined either for all %lld classes or no classes "
                    "but got weight tensor of shape: [%lld]",
                    (long long)a->classes, (long long)a->w->sizes[0]);
  if (a->w && (a->w->dtype != x->dtype || a->w->ndim != 1))
    TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "nll_loss: weight must be [C] of self's dtype");
  a->per_sample = a->reduction == LOSS_NONE && a->sample_ndim > 0;

  tpu_view_t* s = a->shape;
  if (a->impl->backward) {
    a->go = ku_input(def, node, "grad_output");
    a->tw = ku_input(def, node, "total_weight");
    if (!a->go || !a->tw || tpu_view_numel(a->tw) != 1 ||
        !(a->per_sample ? views_same_shape(a->go, t) : tpu_view_numel(a->go) == 1) ||
        !tpu_dtype_is_floating(a->go->dtype) || !tpu_dtype_is_floating(a->tw->dtype))
      TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "nll_loss_backward: unexpected grad_output");
    s[0] = *x;
    s[0].addr = 0;
  } else {
    s[0].dtype = s[1].dtype = x->dtype;
    if (a->per_sample) {
      s[0].ndim = t->ndim;
      memcpy(s[0].sizes, t->sizes, sizeof(t->sizes));
    }
  }
  tpu_view_set_contiguous(&s[0]);
  return TPU_OK;
}

int64_t tpu_loss_offset(const loss_args_t* a, const tpu_view_t* v, int64_t q, int64_t c) {
  int64_t off = c * v->strides[a->class_dim];
  if (a->sample_ndim == 1) /* [N, C]: no divisions (q < N) */
    return off + q * v->strides[a->sample_dims[0]];
  for (int32_t j = a->sample_ndim - 1; j >= 0; --j) {
    int32_t d = a->sample_dims[j];
    off += (q % v->sizes[d]) * v->strides[d];
    q /= v->sizes[d];
  }
  return off;
}

static tpu_status_t loss_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_view_t* out_views) {
  loss_args_t a;
  TPU_RETURN_IF_ERROR(tpu_loss_parse(def, node, &a));
  out_views[0] = a.shape[0];
  if (!a.impl->backward) out_views[1] = a.shape[1];
  return TPU_OK;
}

static tpu_status_t loss_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  loss_args_t a;
  return tpu_loss_parse(def, node, &a);
}

/* ---- the optimised kernels -------------------------------------------------------- */

typedef struct plan {
  const loss_args_t* a;
  const tpu_view_t* out;  /* forward: output; backward: grad_input */
  walk_t td;              /* target */
  walk_t sd;              /* per-sample values: output (forward), grad_output (backward) */
  walk_t gd;              /* backward: grad_input, all dims */
  double* w;              /* weight, or NULL */
  double grad;            /* backward, reduced: -grad_output (/ total_weight) */
  double* loss;           /* per chunk: loss sum, weight sum */
  double* weight;
  int64_t* bad_at;        /* per chunk: first sample with a bad target, or -1 */
  int64_t* bad_value;     /* ... and that target */
} plan_t;

/* self's element at `off`, read in place for float32 and the half types
 * (the values tpu_convert gives: exact, a half-type NaN quietened). */
static inline double x_at(const tpu_view_t* x, int64_t off) {
  const void* p = view_at(x, off);
  switch (x->dtype) {
    case TPU_DTYPE_F32: return *(const float*)p;
    case TPU_DTYPE_BF16: return bf2f(*(const uint16_t*)p, true);
    case TPU_DTYPE_F16: return h2f(*(const uint16_t*)p, true);
    default: return view_get_f64(x, off);
  }
}

static void chunk_work(void* arg, int64_t begin, int64_t end) {
  const plan_t* p = (const plan_t*)arg;
  const loss_args_t* a = p->a;
  bool backward = a->impl->backward;
  int64_t tgt[CHUNK];
  double v[CHUNK];
  for (int64_t c = begin; c < end; ++c) {
    int64_t q0 = c * CHUNK, n = a->samples - q0 < CHUNK ? a->samples - q0 : CHUNK;
    double loss = 0.0, weight = 0.0;
    p->bad_at[c] = -1;
    walk_gather(tgt, TPU_DTYPE_I64, tpu_view_ptr(a->t), a->t->dtype, &p->td, q0, n);
    if (backward && a->per_sample)
      walk_gather(v, TPU_DTYPE_F64, tpu_view_ptr(a->go), a->go->dtype, &p->sd, q0, n);
    for (int64_t j = 0; j < n; ++j) {
      int64_t t = tgt[j];
      if (t == a->ignore_index) {
        v[j] = 0.0;
        continue;
      }
      if (t < 0 || t >= a->classes) {
        p->bad_at[c] = q0 + j;
        p->bad_value[c] = t;
        break;
      }
      double wt = p->w ? p->w[t] : 1.0;
      if (backward) {
        double g = (a->per_sample ? -v[j] : p->grad) * wt;
        view_set_f64(p->out, tpu_loss_offset(a, p->out, q0 + j, t), g);
        continue;
      }
      v[j] = -wt * x_at(a->x, tpu_loss_offset(a, a->x, q0 + j, t));
      loss += v[j];
      weight += wt;
    }
    if (!backward && a->per_sample && p->bad_at[c] < 0)
      walk_scatter(tpu_view_ptr(p->out), p->out->dtype, &p->sd, q0, v, TPU_DTYPE_F64, n);
    p->loss[c] = loss;
    p->weight[c] = weight;
  }
}

/* Zeroes elements [begin, end) of grad_input. */
static void zero_work(void* arg, int64_t begin, int64_t end) {
  const plan_t* p = (const plan_t*)arg;
  static const double zeros[CHUNK];
  for (int64_t k = begin; k < end; k += CHUNK) {
    int64_t n = end - k < CHUNK ? end - k : CHUNK;
    walk_scatter(tpu_view_ptr(p->out), p->out->dtype, &p->gd, k, zeros, TPU_DTYPE_F64, n);
  }
}

/* Runs a planned node with `chunks` sample chunks; outputs are node->outputs. */
static tpu_status_t run(plan_t* p, int64_t chunks, const tpu_view_t* outputs) {
  const loss_args_t* a = p->a;
  if (a->w) {
    walk_t wd;
    walk_init_tail(&wd, a->w, 0);
    walk_gather(p->w, TPU_DTYPE_F64, tpu_view_ptr(a->w), a->w->dtype, &wd, 0, a->classes);
  }
  walk_init_tail(&p->td, a->t, 0);
  if (a->per_sample) walk_init_tail(&p->sd, a->impl->backward ? a->go : p->out, 0);
  if (a->impl->backward) {
    walk_init_tail(&p->gd, p->out, 0);
    tpu_parallel_for(tpu_view_numel(p->out), 65536, zero_work, p);
    if (!a->per_sample) {
      double g = view_get_f64(a->go, 0);
      p->grad = -(a->reduction == LOSS_MEAN ? g / view_get_f64(a->tw, 0) : g);
    }
  }
  tpu_parallel_for(chunks, 1, chunk_work, p);
  double loss = 0.0, weight = 0.0;
  for (int64_t c = 0; c < chunks; ++c) {
    if (p->bad_at[c] >= 0)
      TPU_KERNEL_FAIL(TPU_CODE_INDEX_ERROR, "Target %lld is out of bounds.",
                      (long long)p->bad_value[c]);
    loss += p->loss[c];
    weight += p->weight[c];
  }
  if (a->impl->backward) return TPU_OK;
  if (!a->per_sample)
    view_set_f64(&outputs[0], 0, a->reduction == LOSS_MEAN ? loss / weight : loss);
  view_set_f64(&outputs[1], 0, a->per_sample ? 0.0 : weight);
  return TPU_OK;
}

static tpu_status_t loss_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  loss_args_t a;
  TPU_RETURN_IF_ERROR(tpu_loss_parse(def, node, &a));
  int32_t nout = a.impl->backward ? 1 : 2;
  if (node->num_outputs < nout)
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "expected %d outputs", nout);
  for (int32_t i = 0; i < nout; ++i)
    if (!views_same_shape(&node->outputs[i], &a.shape[i]))
      TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output %d has the wrong shape", i);

  plan_t p;
  memset(&p, 0, sizeof(p));
  p.a = &a;
  p.out = &node->outputs[0];
  int64_t chunks = (a.samples + CHUNK - 1) / CHUNK;
  size_t slots = (size_t)(chunks > 0 ? chunks : 1);
  p.w = a.w ? (double*)malloc(sizeof(double) * (size_t)a.classes) : NULL;
  p.loss = (double*)malloc(sizeof(double) * slots);
  p.weight = (double*)malloc(sizeof(double) * slots);
  p.bad_at = (int64_t*)malloc(sizeof(int64_t) * slots);
  p.bad_value = (int64_t*)malloc(sizeof(int64_t) * slots);
  tpu_status_t s;
  if ((a.w && !p.w) || !p.loss || !p.weight || !p.bad_at || !p.bad_value)
    s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "no host memory for nll_loss");
  else
    s = run(&p, chunks, node->outputs);
  free(p.w);
  free(p.loss);
  free(p.weight);
  free(p.bad_at);
  free(p.bad_value);
  return s;
}

/* Row-local (fusion), the backward ops: grad_input at a sample index (the
 * dims before the class dim) depends only on the same sample of self, target
 * and, unreduced, grad_output; weight and total_weight are read whole. So
 * `log_softmax_backward(nll_loss_backward(...))` runs a block of rows at a
 * time and the one-hot gradient between them stays in scratch. */
static int32_t loss_rows(const tpu_op_def_t* def, const tpu_node_t* node, uint32_t* out_mask) {
  loss_args_t a;
  *out_mask = 0;
  if (!ku_ok(tpu_loss_parse(def, node, &a)) || a.class_dim == 0) return 0;
  *out_mask = (1u << tpu_spec_index(def->inputs, "self")) |
              (1u << tpu_spec_index(def->inputs, "target")) |
              (a.per_sample ? 1u << tpu_spec_index(def->inputs, "grad_output") : 0u);
  return a.class_dim;
}

/* ---- the op table ----------------------------------------------------------------- */

static const loss_impl_t k_fwd = {false, false};
static const loss_impl_t k_bwd = {true, false};
static const loss_impl_t k_fwd2d = {false, true};
static const loss_impl_t k_bwd2d = {true, true};

#define FWD_ROW(name_, aten_, impl_)                                                          \
  {.name = name_, .inputs = "self,target,weight?", .attrs = "reduction,ignore_index", \
   .outputs = "output,total_weight", .aten = aten_, .kernel = loss_kernel, .infer = loss_infer, \
   .check = loss_check, .impl = &impl_}
#define BWD_ROW(name_, aten_, impl_)                                                          \
  {.name = name_, .inputs = "grad_output,self,target,weight?,total_weight", \
   .attrs = "reduction,ignore_index", .outputs = "grad_input", .aten = aten_, \
   .kernel = loss_kernel, .infer = loss_infer, .check = loss_check, .impl = &impl_, .flags = 0, \
   .rows = loss_rows}

static const tpu_op_def_t k_rows[] = {
    FWD_ROW("nll_loss_forward", "nll_loss_forward.default nll_loss_forward.output", k_fwd),
    BWD_ROW("nll_loss_backward", "nll_loss_backward.default nll_loss_backward.grad_input",
            k_bwd),
    FWD_ROW("nll_loss2d_forward", "nll_loss2d_forward.default nll_loss2d_forward.output",
            k_fwd2d),
    BWD_ROW("nll_loss2d_backward", "nll_loss2d_backward.default nll_loss2d_backward.grad_input",
            k_bwd2d),
};

const tpu_op_family_t tpu_family_loss = {"loss", k_rows,
                                         (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
