/* ctc_loss.c — _ctc_loss and _ctc_loss_backward (nn.CTCLoss's native part).
 *
 * log_probs is [T, B, C] (float32/float64 log-softmax outputs), targets int64
 * or int32, either [B, S] padded (row b's first target_lengths[b] entries) or
 * the 1-D concatenation of every row's targets. input_lengths and
 * target_lengths (B integers each) are inputs marked '^': the bridge binds an
 * int list or a host tensor as a device int64 copy, a device tensor as it
 * is. log_alpha's last dim depends on max(target_lengths), so the forward row
 * has a `sync_size` attr and a companion "_ctc_loss_count" row that checks
 * the lengths (raising PyTorch's errors) and returns that maximum
 * (docs/kernel-guide.md, "Data-dependent output sizes"). Per batch item b, with the extended
 * target l' = (blank, l1, blank, l2, ..., blank) of 2L + 1 states, the
 * forward computes Graves et al.'s log alpha
 *   alpha[0][0] = lp[0][blank], alpha[0][1] = lp[0][l1], others -inf;
 *   alpha[t][s] = logsumexp(alpha[t-1][s], alpha[t-1][s-1], alpha[t-1][s-2]
 *                 when l'[s] != l'[s-2]) + lp[t][l'[s]]
 * and nll[b] = -logsumexp(alpha[I-1][2L], alpha[I-1][2L-1]) (-alpha[I-1][0]
 * for L = 0; 0 or +inf for an empty input). Outputs: nll [B] and log_alpha
 * [B, T, 2 max(L) + 1], -inf outside each item's computed region (PyTorch's
 * CPU leaves that region unset; its backward never reads it). The backward
 * runs beta the same way from the end, collects log(sum_s alpha*beta) per
 * (t, label) and returns grad[t][b][c] = (exp(lp) - exp(coll + nll - lp)) *
 * grad[b] for t < I (0 beyond, and 0 for the whole item when zero_infinity
 * and nll is +inf), exactly PyTorch's recursion and order. The recursions
 * run in double; reductions (mean/sum, zero_infinity's where) are separate
 * ops in PyTorch's composite ctc_loss.
 *
 * Batch items run in parallel (tpu_parallel_for), each written by one
 * thread. PyTorch's argument errors are raised with its messages
 * (INVALID_ARGUMENT: RuntimeError); a target label outside [0, C), which the
 * CPU reads out of bounds, is INVALID_ARGUMENT when the kernel runs. Half
 * types fall back (the CPU has no kernel for them either).
 * tpu_ctc_loss_reference is the plain version the C test compares against.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/kernel_util.h"

#define CTC_CHECKED "(while checking arguments for ctc_loss_allocate_outputs)"

enum { CTC_FORWARD = 0, CTC_BACKWARD = 1, CTC_COUNT = 2 };

typedef struct ctc_args {
  int kind;
  bool backward;
  const tpu_view_t *lp, *tg, *ilv, *tlv, *grad, *nll, *alpha;
  int64_t T, B, C, blank, max_len, S; /* S = 2 max_len + 1 (-1: not known yet) */
  int64_t *il, *tl;                   /* the lengths, once read (ctc_read_lengths) */
  bool zero_infinity;
  tpu_view_t shape[2];
} ctc_args_t;

/* PyTorch's ScalarType names (its legacy "torch.FloatTensor" type strings). */
static const char* ctc_type_name(tpu_dtype_t d) {
  switch (d) {
    case TPU_DTYPE_F32: return "Float";
    case TPU_DTYPE_F64: return "Double";
    case TPU_DTYPE_F16: return "Half";
    case TPU_DTYPE_BF16: return "BFloat16";
    case TPU_DTYPE_I16: return "Short";
    case TPU_DTYPE_I8: return "Char";
    case TPU_DTYPE_U8: return "Byte";
    case TPU_DTYPE_BOOL: return "Bool";
    default: return tpu_dtype_name(d);
  }
}

/* The checks that need no tensor data, in PyTorch's order, and the shapes
 * when the maximum target length is known (sync_size, or the backward's). */
static tpu_status_t ctc_parse(const tpu_op_def_t* def, const tpu_node_t* node, ctc_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->kind = def->impl ? *(const int*)def->impl : CTC_FORWARD;
  a->backward = a->kind == CTC_BACKWARD;
  a->lp = ku_input(def, node, "log_probs");
  a->tg = ku_input(def, node, "targets");
  a->ilv = ku_input(def, node, "input_lengths");
  a->tlv = ku_input(def, node, "target_lengths");
  if (a->backward) {
    a->grad = ku_input(def, node, "grad");
    a->nll = ku_input(def, node, "neg_log_likelihood");
    a->alpha = ku_input(def, node, "log_alpha");
  }
  if (!a->lp || !a->tg || !a->ilv || !a->tlv ||
      (a->backward && (!a->grad || !a->nll || !a->alpha)) ||
      !tpu_dtype_is_integral(a->ilv->dtype) || !tpu_dtype_is_integral(a->tlv->dtype) ||
      a->ilv->ndim > 1 || a->tlv->ndim > 1)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "ctc_loss: arguments");
  a->blank = tpu_attr_int(ku_attr(def, node, "blank"), 0);
  a->zero_infinity = tpu_attr_int(ku_attr(def, node, "zero_infinity"), 0) != 0;
  const tpu_view_t *lp = a->lp, *tg = a->tg;
  if (lp->dtype != TPU_DTYPE_F32 && lp->dtype != TPU_DTYPE_F64)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "ctc_loss of %s", tpu_dtype_name(lp->dtype));
  if (tg->dtype != TPU_DTYPE_I64 && tg->dtype != TPU_DTYPE_I32)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "Expected tensor for argument #2 'targets' to have scalar type Int; "
                           "but got torch.%sTensor instead " CTC_CHECKED,
                           ctc_type_name(tg->dtype));
  if (lp->ndim != 3)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "Expected %d-dimensional tensor, but got %d-dimensional tensor for "
                           "argument #1 'log_probs' " CTC_CHECKED, 3, (int)lp->ndim);
  if (tg->ndim < 1 || tg->ndim > 2)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "Expected 1 to 2 dimensions, but got %d-dimensional tensor for "
                           "argument #2 'targets' " CTC_CHECKED, (int)tg->ndim);
  a->T = lp->sizes[0];
  a->B = lp->sizes[1];
  a->C = lp->sizes[2];
  if (!(a->blank >= 0 && a->blank < a->C))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "blank must be in label range");
  if (tpu_view_numel(a->ilv) != a->B)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "input_lengths must be of size batch_size");
  if (tpu_view_numel(a->tlv) != a->B)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "target_lengths must be of size batch_size");
  a->S = -1;
  if (a->kind == CTC_COUNT) {
    a->shape[0].dtype = TPU_DTYPE_I64; /* 0-dim: max(target_lengths) */
    return TPU_OK;
  }
  if (a->backward) {
    if (a->grad->ndim != 1 || a->grad->sizes[0] != a->B || a->nll->ndim != 1 ||
        a->nll->sizes[0] != a->B || a->alpha->ndim != 3 || a->alpha->sizes[0] != a->B ||
        a->alpha->sizes[1] != a->T || a->alpha->sizes[2] < 1 || a->grad->dtype != lp->dtype ||
        a->nll->dtype != lp->dtype || a->alpha->dtype != lp->dtype)
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "ctc_loss_backward: shapes");
    a->shape[0] = *lp;
    a->shape[0].addr = 0;
    tpu_view_set_contiguous(&a->shape[0]);
    return TPU_OK;
  }
  const tpu_attr_t* ss = ku_attr(def, node, "sync_size");
  if (!ss || ss->kind != TPU_ATTR_INT)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "_ctc_loss: needs max(target_lengths)");
  a->max_len = ss->u.i;
  a->S = 2 * a->max_len + 1;
  a->shape[0].dtype = a->shape[1].dtype = lp->dtype;
  a->shape[0].ndim = 1;
  a->shape[0].sizes[0] = a->B;
  a->shape[1].ndim = 3;
  a->shape[1].sizes[0] = a->B;
  a->shape[1].sizes[1] = a->T;
  a->shape[1].sizes[2] = a->S;
  tpu_view_set_contiguous(&a->shape[0]);
  tpu_view_set_contiguous(&a->shape[1]);
  return TPU_OK;
}

/* Reads the lengths (a->il, a->tl: the caller frees them) and checks them as
 * PyTorch does, with its messages; sets max_len (and S for the backward). */
static tpu_status_t ctc_read_lengths(ctc_args_t* a) {
  size_t B = (size_t)(a->B > 0 ? a->B : 1);
  a->il = (int64_t*)malloc(sizeof(int64_t) * B);
  a->tl = (int64_t*)malloc(sizeof(int64_t) * B);
  if (!a->il || !a->tl) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "ctc_loss lengths");
  for (int64_t b = 0; b < a->B; ++b) {
    a->il[b] = view_get_i64(a->ilv, a->ilv->ndim ? b * a->ilv->strides[0] : 0);
    a->tl[b] = view_get_i64(a->tlv, a->tlv->ndim ? b * a->tlv->strides[0] : 0);
  }
  const tpu_view_t* tg = a->tg;
  int64_t pos = 0, max_len = 0;
  for (int64_t b = 0; b < a->B; ++b) {
    if (a->tl[b] < 0)
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "Expected target_lengths to have value at least 0, but got value "
                             "%lld " CTC_CHECKED, (long long)a->tl[b]);
    pos += a->tl[b];
    if (a->tl[b] > max_len) max_len = a->tl[b];
  }
  int64_t want0 = tg->ndim == 1 ? pos : a->B;
  if (tg->sizes[0] != want0)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "Expected tensor to have size %lld at dimension 0, but got size %lld "
                           "for argument #2 'targets' " CTC_CHECKED,
                           (long long)want0, (long long)tg->sizes[0]);
  if (tg->ndim == 2 && tg->sizes[1] < max_len)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "Expected tensor to have size at least %lld at dimension 1, but got "
                           "size %lld for argument #2 'targets' " CTC_CHECKED,
                           (long long)max_len, (long long)tg->sizes[1]);
  for (int64_t b = 0; b < a->B; ++b) {
    if (a->il[b] < 0)
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "Expected input_lengths to have value at least 0, but got value "
                             "%lld " CTC_CHECKED, (long long)a->il[b]);
    if (a->il[b] > a->T)
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "Expected input_lengths to have value at most %lld, but got value "
                             "%lld " CTC_CHECKED, (long long)a->T, (long long)a->il[b]);
  }
  if (a->backward) {
    a->max_len = max_len;
    a->S = 2 * max_len + 1;
    if (a->alpha->sizes[2] < a->S)
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "ctc_loss_backward: log_alpha has %lld states, the targets need %lld",
                             (long long)a->alpha->sizes[2], (long long)a->S);
  } else if (a->kind == CTC_FORWARD && max_len != a->max_len) {
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "_ctc_loss: max(target_lengths) is %lld, the node was sized for %lld",
                           (long long)max_len, (long long)a->max_len);
  } else {
    a->max_len = max_len;
  }
  return TPU_OK;
}

static tpu_status_t ctc_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* out) {
  ctc_args_t a;
  TPU_RETURN_IF_ERROR(ctc_parse(def, node, &a));
  out[0] = a.shape[0];
  if (a.kind == CTC_FORWARD) out[1] = a.shape[1];
  return TPU_OK;
}

static tpu_status_t ctc_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  ctc_args_t a;
  TPU_RETURN_IF_ERROR(ctc_parse(def, node, &a));
  for (int32_t k = 0; k < node->num_outputs && k < (a.kind == CTC_FORWARD ? 2 : 1); ++k)
    if (node->outputs[k].addr > 1 && (!views_same_shape(&node->outputs[k], &a.shape[k]) ||
                                      node->outputs[k].dtype != a.shape[k].dtype))
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "ctc_loss: output shape");
  return TPU_OK;
}

/* ---- the kernels --------------------------------------------------------------------- */

typedef struct ctc_plan {
  const ctc_args_t* a;
  const double* lp;     /* [T, B, C] */
  const int64_t* tg;    /* contiguous targets */
  const int64_t* off;   /* per item: offset of its first target */
  double* alpha;        /* [B, T, S]: forward output; backward: the forward's */
  double* nll;          /* [B] */
  const double* grad;   /* backward: [B] */
  double* out;          /* backward: [T, B, C] */
  double* beta;         /* backward: [B, T, S] scratch */
  int64_t* bad;         /* per item: a target label out of range */
} ctc_plan_t;

/* l'[s] of item b. */
static inline int64_t ctc_prime(const ctc_plan_t* pl, int64_t b, int64_t s) {
  return (s & 1) ? pl->tg[pl->off[b] + s / 2] : pl->a->blank;
}

static inline double ctc_lse3(double x1, double x2, double x3) {
  double m = x1;
  if (x2 > m) m = x2;
  if (x3 > m) m = x3;
  if (m == -INFINITY) m = 0;
  return log(exp(x1 - m) + exp(x2 - m) + exp(x3 - m)) + m;
}

static void ctc_forward_items(void* arg, int64_t begin, int64_t end) {
  const ctc_plan_t* pl = (const ctc_plan_t*)arg;
  const ctc_args_t* a = pl->a;
  const int64_t T = a->T, B = a->B, C = a->C, S = a->S;
  for (int64_t b = begin; b < end; ++b) {
    double* al = pl->alpha + b * T * S;
    for (int64_t e = 0; e < T * S; ++e) al[e] = -INFINITY;
    int64_t il = a->il[b], tl = a->tl[b];
    for (int64_t j = 0; j < tl; ++j) {
      int64_t l = pl->tg[pl->off[b] + j];
      if (l < 0 || l >= C) pl->bad[b] = 1;
    }
    if (pl->bad[b]) continue;
    if (il == 0) {
      pl->nll[b] = tl == 0 ? 0.0 : INFINITY;
      continue;
    }
    const double* lp = pl->lp + b * C; /* row t at lp + t * B * C */
    al[0] = lp[a->blank];
    if (tl > 0) al[1] = lp[ctc_prime(pl, b, 1)];
    for (int64_t t = 1; t < il; ++t) {
      const double* prev = al + (t - 1) * S;
      const double* lpt = lp + t * B * C;
      double* cur = al + t * S;
      for (int64_t s = 0; s < 2 * tl + 1; ++s) {
        int64_t l = ctc_prime(pl, b, s);
        double x2 = s > 0 ? prev[s - 1] : -INFINITY;
        double x3 = (s > 1 && ctc_prime(pl, b, s - 2) != l) ? prev[s - 2] : -INFINITY;
        cur[s] = ctc_lse3(prev[s], x2, x3) + lpt[l];
      }
    }
    const double* last = al + (il - 1) * S;
    if (tl == 0) {
      pl->nll[b] = -last[0];
    } else {
      double l1 = last[2 * tl], l2 = last[2 * tl - 1];
      double m = l1 > l2 ? l1 : l2;
      if (m == -INFINITY) m = 0;
      pl->nll[b] = -(log(exp(l1 - m) + exp(l2 - m)) + m);
    }
  }
}

static void ctc_backward_items(void* arg, int64_t begin, int64_t end) {
  const ctc_plan_t* pl = (const ctc_plan_t*)arg;
  const ctc_args_t* a = pl->a;
  const int64_t T = a->T, B = a->B, C = a->C, S = a->S;
  for (int64_t b = begin; b < end; ++b) {
    double nll = pl->nll[b];
    int64_t il = a->il[b], tl = a->tl[b];
    /* grad[t][b][c], collected in log space first */
#define G(t, c) pl->out[((t) * B + b) * C + (c)]
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) G(t, c) = -INFINITY;
    for (int64_t j = 0; j < tl; ++j) {
      int64_t l = pl->tg[pl->off[b] + j];
      if (l < 0 || l >= C) pl->bad[b] = 1;
    }
    if (pl->bad[b]) continue;
    if (a->zero_infinity && nll == INFINITY) {
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) G(t, c) = 0.0;
      continue;
    }
    const double* al = pl->alpha + b * T * S;
    double* be = pl->beta + b * T * S;
    const double* lp = pl->lp + b * C;
#define LP(t, c) lp[(t) * B * C + (c)]
    if (il > 0) {
      double* bl = be + (il - 1) * S;
      for (int64_t s = 0; s < S; ++s) bl[s] = -INFINITY;
      bl[2 * tl] = LP(il - 1, a->blank);
      G(il - 1, a->blank) = al[(il - 1) * S + 2 * tl] + bl[2 * tl];
      if (tl > 0) {
        int64_t l = ctc_prime(pl, b, 2 * tl - 1);
        bl[2 * tl - 1] = LP(il - 1, l);
        G(il - 1, l) = al[(il - 1) * S + 2 * tl - 1] + bl[2 * tl - 1];
      }
    }
    for (int64_t t = il - 2; t >= 0; --t) {
      const double* nx = be + (t + 1) * S;
      double* cur = be + t * S;
      for (int64_t s = 2 * tl; s >= 0; --s) {
        int64_t l = ctc_prime(pl, b, s);
        double x2 = s < 2 * tl ? nx[s + 1] : -INFINITY;
        double x3 = (s < 2 * tl - 1 && ctc_prime(pl, b, s + 2) != l) ? nx[s + 2] : -INFINITY;
        cur[s] = ctc_lse3(nx[s], x2, x3) + LP(t, l);
        double ab = al[t * S + s] + cur[s];
        double* g = &G(t, l);
        if (*g == -INFINITY) {
          *g = ab;
        } else {
          double m = *g > ab ? *g : ab;
          *g = log(exp(*g - m) + exp(ab - m)) + m;
        }
      }
    }
    double gr = pl->grad[b];
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double lpv = LP(t, c);
        G(t, c) = t < il ? (exp(lpv) - exp(G(t, c) + nll - lpv)) * gr : 0.0;
      }
#undef G
#undef LP
  }
}

/* The log_alpha input [B, T, S'] (S' >= S) as a contiguous [B, T, S] buffer. */
static double* ctc_gather_alpha(const ctc_args_t* a) {
  tpu_view_t v = *a->alpha;
  v.sizes[2] = a->S;
  return (double*)walk_gather_view(&v, TPU_DTYPE_F64);
}

static tpu_status_t ctc_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_exec_ctx_t* ctx) {
  (void)ctx;
  ctc_args_t a;
  TPU_RETURN_IF_ERROR(ctc_parse(def, node, &a));
  int32_t nout = a.kind == CTC_FORWARD ? 2 : 1;
  if (node->num_outputs < nout) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "missing outputs");
  for (int32_t k = 0; k < nout; ++k)
    if (!views_same_shape(&node->outputs[k], &a.shape[k]))
      TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output has the wrong shape");
  ctc_plan_t pl;
  memset(&pl, 0, sizeof(pl));
  pl.a = &a;
  tpu_status_t ls = ctc_read_lengths(&a);
  if (ls != TPU_OK || a.kind == CTC_COUNT) {
    if (ls == TPU_OK) view_set_i64(&node->outputs[0], 0, a.max_len);
    free(a.il), free(a.tl);
    return ls;
  }
  size_t B = (size_t)(a.B > 0 ? a.B : 1), TBS = B * (size_t)(a.T > 0 ? a.T : 1) * (size_t)a.S;
  int64_t* off = (int64_t*)malloc(sizeof(int64_t) * B);
  pl.off = off;
  pl.lp = (const double*)walk_gather_view(a.lp, TPU_DTYPE_F64);
  pl.tg = (const int64_t*)walk_gather_view(a.tg, TPU_DTYPE_I64);
  pl.bad = (int64_t*)calloc(B, sizeof(int64_t));
  if (a.backward) {
    pl.alpha = ctc_gather_alpha(&a);
    pl.nll = (double*)walk_gather_view(a.nll, TPU_DTYPE_F64);
    pl.grad = (const double*)walk_gather_view(a.grad, TPU_DTYPE_F64);
    pl.beta = (double*)malloc(sizeof(double) * TBS);
    pl.out = (double*)malloc(sizeof(double) * (size_t)(tpu_view_numel(a.lp) > 0
                                                           ? tpu_view_numel(a.lp) : 1));
  } else {
    pl.alpha = (double*)malloc(sizeof(double) * TBS);
    pl.nll = (double*)malloc(sizeof(double) * B);
  }
  tpu_status_t s = TPU_OK;
  if (!off || !pl.lp || !pl.tg || !pl.bad || !pl.alpha || !pl.nll ||
      (a.backward && (!pl.grad || !pl.beta || !pl.out))) {
    s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "no host memory for ctc_loss");
    goto done;
  }
  for (int64_t b = 0, pos = 0; b < a.B; ++b) {
    off[b] = a.tg->ndim == 1 ? pos : b * a.tg->sizes[1];
    pos += a.tl[b];
  }
  if (a.B > 0) {
    int64_t work = a.T * a.S * (a.backward ? 2 : 1) + a.T * a.C;
    int64_t grain = work >= 8192 ? 1 : 8192 / (work + 1);
    tpu_parallel_for(a.B, grain, a.backward ? ctc_backward_items : ctc_forward_items, &pl);
  }
  for (int64_t b = 0; b < a.B && s == TPU_OK; ++b)
    if (pl.bad[b])
      s = tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                          "ctc_loss: a target label is outside [0, %lld)", (long long)a.C);
  if (s != TPU_OK) goto done;
  if (a.backward) {
    walk_scatter_view(&node->outputs[0], pl.out, TPU_DTYPE_F64);
  } else {
    walk_scatter_view(&node->outputs[0], pl.nll, TPU_DTYPE_F64);
    walk_scatter_view(&node->outputs[1], pl.alpha, TPU_DTYPE_F64);
  }
done:
  free(a.il), free(a.tl);
  free(off), free((void*)pl.lp), free((void*)pl.tg), free(pl.bad), free(pl.alpha);
  free(pl.nll), free((void*)pl.grad), free(pl.beta), free(pl.out);
  return s;
}

/* ---- the reference: the same recursions, one element at a time from the views ------- */

static double ref_lse(double x, double y) {
  if (x == -INFINITY) return y;
  if (y == -INFINITY) return x;
  double m = x > y ? x : y;
  return m + log(exp(x - m) + exp(y - m));
}

tpu_status_t tpu_ctc_loss_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                    tpu_exec_ctx_t* ctx);
tpu_status_t tpu_ctc_loss_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                    tpu_exec_ctx_t* ctx) {
  (void)ctx;
  ctc_args_t a;
  TPU_RETURN_IF_ERROR(ctc_parse(def, node, &a));
  tpu_status_t ls = ctc_read_lengths(&a);
  if (ls != TPU_OK || a.kind == CTC_COUNT) {
    if (ls == TPU_OK) view_set_i64(&node->outputs[0], 0, a.max_len);
    free(a.il), free(a.tl);
    return ls;
  }
  const tpu_view_t *lpv = a.lp, *tg = a.tg;
  int64_t S = a.S, pos = 0;
  double* al = (double*)malloc(sizeof(double) * (size_t)((a.T + 1) * S));
  double* be = (double*)malloc(sizeof(double) * (size_t)((a.T + 1) * S));
  int64_t* lab = (int64_t*)malloc(sizeof(int64_t) * (size_t)S);
  if (!al || !be || !lab) {
    free(al), free(be), free(lab), free(a.il), free(a.tl);
    TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "reference");
  }
#define RLP(t, c) view_get_f64(lpv, (t) * lpv->strides[0] + b * lpv->strides[1] + \
                                        (c) * lpv->strides[2])
  for (int64_t b = 0; b < a.B; ++b) {
    int64_t il = a.il[b], tl = a.tl[b], n = 2 * tl + 1;
    for (int64_t s = 0; s < n; ++s) {
      int64_t j = s / 2;
      lab[s] = (s & 1) ? view_get_i64(tg, tg->ndim == 1 ? (pos + j) * tg->strides[0]
                                                         : b * tg->strides[0] + j * tg->strides[1])
                       : a.blank;
      if (lab[s] < 0 || lab[s] >= a.C) {
        free(al), free(be), free(lab), free(a.il), free(a.tl);
        TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "label out of range");
      }
    }
    pos += tl;
    for (int64_t e = 0; e < a.T * S; ++e) al[e] = be[e] = -INFINITY;
    if (il > 0) {
      al[0] = RLP(0, lab[0]);
      if (n > 1) al[1] = RLP(0, lab[1]);
    }
    for (int64_t t = 1; t < il; ++t)
      for (int64_t s = 0; s < n; ++s) {
        double v = al[(t - 1) * S + s];
        if (s >= 1) v = ref_lse(v, al[(t - 1) * S + s - 1]);
        if (s >= 2 && lab[s] != lab[s - 2]) v = ref_lse(v, al[(t - 1) * S + s - 2]);
        al[t * S + s] = v + RLP(t, lab[s]);
      }
    double ll = il == 0 ? (tl == 0 ? 0.0 : -INFINITY)
                        : (tl == 0 ? al[(il - 1) * S]
                                   : ref_lse(al[(il - 1) * S + n - 1], al[(il - 1) * S + n - 2]));
    if (!a.backward) {
      view_set_f64(&node->outputs[0], b * node->outputs[0].strides[0], -ll);
      const tpu_view_t* ov = &node->outputs[1];
      for (int64_t t = 0; t < a.T; ++t)
        for (int64_t s = 0; s < S; ++s)
          view_set_f64(ov, b * ov->strides[0] + t * ov->strides[1] + s * ov->strides[2],
                       s < n ? al[t * S + s] : -INFINITY);
      continue;
    }
    const tpu_view_t* ov = &node->outputs[0];
    double nll = view_get_f64(a.nll, b * a.nll->strides[0]);
    double gr = view_get_f64(a.grad, b * a.grad->strides[0]);
    if (il > 0) {
      be[(il - 1) * S + n - 1] = RLP(il - 1, lab[n - 1]);
      if (n > 1) be[(il - 1) * S + n - 2] = RLP(il - 1, lab[n - 2]);
    }
    for (int64_t t = il - 2; t >= 0; --t)
      for (int64_t s = 0; s < n; ++s) {
        double v = be[(t + 1) * S + s];
        if (s + 1 < n) v = ref_lse(v, be[(t + 1) * S + s + 1]);
        if (s + 2 < n && lab[s] != lab[s + 2]) v = ref_lse(v, be[(t + 1) * S + s + 2]);
        be[t * S + s] = v + RLP(t, lab[s]);
      }
    for (int64_t t = 0; t < a.T; ++t)
      for (int64_t c = 0; c < a.C; ++c) {
        double g = 0.0;
        if (t < il && !(a.zero_infinity && nll == INFINITY)) {
          double coll = -INFINITY;
          for (int64_t s = 0; s < n; ++s)
            if (lab[s] == c) coll = ref_lse(coll, al[t * S + s] + be[t * S + s]);
          double lp = RLP(t, c);
          g = (exp(lp) - exp(coll + nll - lp)) * gr;
        }
        view_set_f64(ov, t * ov->strides[0] + b * ov->strides[1] + c * ov->strides[2], g);
      }
  }
#undef RLP
  free(al), free(be), free(lab), free(a.il), free(a.tl);
  return TPU_OK;
}

static const int k_fwd = CTC_FORWARD, k_bwd = CTC_BACKWARD, k_count = CTC_COUNT;

static const tpu_op_def_t k_rows[] = {
    {.name = "_ctc_loss", .inputs = "log_probs,targets,input_lengths^,target_lengths^",
     .attrs = "blank,zero_infinity,sync_size", .outputs = "out0,out1",
     .aten = "_ctc_loss _ctc_loss.out _ctc_loss.Tensor _ctc_loss.Tensor_out", .kernel = ctc_kernel,
     .infer = ctc_infer, .check = ctc_check, .impl = &k_fwd},
    {.name = "_ctc_loss_count", .inputs = "log_probs,targets,input_lengths^,target_lengths^",
     .attrs = "blank,zero_infinity,sync_size", .outputs = "out", .aten = "", .kernel = ctc_kernel,
     .infer = ctc_infer, .check = ctc_check, .impl = &k_count},
    {.name = "_ctc_loss_backward",
     .inputs = "grad,log_probs,targets,input_lengths^,target_lengths^,neg_log_likelihood,log_alpha",
     .attrs = "blank,zero_infinity", .outputs = "out",
     .aten = "_ctc_loss_backward _ctc_loss_backward.out _ctc_loss_backward.Tensor",
     .kernel = ctc_kernel, .infer = ctc_infer, .check = ctc_check, .impl = &k_bwd},
};

const tpu_op_family_t tpu_family_ctc_loss = {"ctc_loss", k_rows,
                                             (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
