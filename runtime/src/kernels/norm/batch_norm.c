/* batch_norm.c — native_batch_norm (training and eval, running statistics
 * updated in place as PyTorch CPU does) and native_batch_norm_backward.
 *
 * Each op is one reduction phase, a few per-channel coefficients computed in
 * double, and one elementwise write phase:
 *   forward (training): S1 = sum(x - k), S2 = sum((x - k)^2) per channel,
 *     k the channel's first element (a shift that keeps the variance exact);
 *     mean = k + S1/n, var = S2/n - (S1/n)^2, invstd = 1/sqrt(var + eps);
 *     running_mean = m*mean + (1-m)*running_mean,
 *     running_var = m*var*n/(n-1) + (1-m)*running_var;
 *   forward (eval): mean/invstd from the running statistics;
 *   out = a[c] * x + d[c] with a = invstd*w, d = b - mean*a;
 *   backward: S1 = sum(g), S2 = sum(g * (x - mean)) per channel;
 *     grad_weight = S2*invstd, grad_bias = S1, and grad_input =
 *     a[c]*x + e[c]*g + d[c] (training: e = w*invstd, k = S2*invstd^2/n,
 *     a = -e*k, d = e*(mean*k - S1/n); eval: e = w*invstd, a = d = 0).
 * Two layouts: when the channel dim is the innermost one (channels_last,
 * [N, C] inputs) the positions (every dim but the channel one) are split into
 * blocks over tpu_parallel_for, each block gathering whole channel vectors
 * and keeping its own per-channel partial sums, added up afterwards ("rows");
 * otherwise every channel is one task that streams its elements through
 * CHUNK-sized double buffers ("channels").
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/norm/batch_norm.h"
#include "kernels/norm/norm_sums.h"

#define CHUNK 1024

/* ---- parsing ------------------------------------------------------------------ */

static bool is_half(tpu_dtype_t d) { return d == TPU_DTYPE_F16 || d == TPU_DTYPE_BF16; }

/* The dtype of statistics and parameter gradients: float32 when a half input
 * comes with float32 parameters (PyTorch's mixed type), else the input's.
 * UNIMPLEMENTED for other mixtures. */
static tpu_status_t param_dtype(const tpu_view_t* x, const tpu_view_t* const* params, int n,
                                int64_t c, tpu_dtype_t* out) {
  bool mixed = false, same = true;
  for (int i = 0; i < n; ++i) {
    if (!params[i]) continue;
    if (!tpu_dtype_is_floating(params[i]->dtype) || params[i]->ndim != 1 ||
        params[i]->sizes[0] != c)
      TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "norm: unexpected parameter shape or dtype");
    mixed = mixed || params[i]->dtype != x->dtype;
    same = same && (params[i]->dtype == x->dtype || params[i]->dtype == TPU_DTYPE_F32);
  }
  if (mixed && (!is_half(x->dtype) || !same))
    TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "norm: mixed parameter dtypes");
  *out = mixed ? TPU_DTYPE_F32 : x->dtype;
  return TPU_OK;
}

tpu_status_t tpu_bn_parse(const tpu_op_def_t* def, const tpu_node_t* node, bn_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->impl = (const bn_impl_t*)def->impl;
  bool bwd = a->impl->backward;
  a->x = ku_input(def, node, "input");
  if (!a->x) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "expected a tensor for 'input'");
  const tpu_view_t* x = a->x;
  if (x->ndim < 2 || !tpu_dtype_is_floating(x->dtype))
    TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "batch_norm: no native kernel for this input");
  a->w = ku_input(def, node, "weight");
  a->b = bwd ? NULL : ku_input(def, node, "bias");
  a->rm = ku_input(def, node, "running_mean");
  a->rv = ku_input(def, node, "running_var");
  if (a->impl->training == -2) { /* _batch_norm_no_update: batch statistics without running ones */
    a->training = !a->rm || !a->rv;
  } else if (a->impl->training >= 0) {
    a->training = a->impl->training != 0;
  } else {
    const tpu_attr_t* t = ku_attr(def, node, bwd ? "train" : "training");
    if (!t) t = ku_attr(def, node, "update"); /* batch_norm_backward's name for it */
    a->training = tpu_attr_bool(t, false);
  }
  a->momentum = tpu_attr_float(ku_attr(def, node, "momentum"), 0.1);
  a->eps = tpu_attr_float(ku_attr(def, node, "eps"), 1e-5);
  a->n = x->sizes[0];
  a->c = x->sizes[1];
  a->s = 1;
  for (int32_t d = 2; d < x->ndim; ++d) a->s *= x->sizes[d];
  a->count = a->n * a->s;
  if (a->count == 0 || a->c == 0)
    TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "batch_norm: empty input");
  tpu_dtype_t pd = x->dtype;
  if (bwd) {
    a->g = ku_input(def, node, "grad_out");
    a->sm = ku_input(def, node, "save_mean");
    a->si = ku_input(def, node, "save_invstd");
    if (!a->si) a->si = ku_input(def, node, "save_var"); /* batch_norm_backward: it is invstd */
    if (!a->training) a->sm = a->si = NULL; /* eval: the running statistics are used */
    if (!a->g || !views_same_shape(a->g, x) || !tpu_dtype_is_floating(a->g->dtype))
      TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "batch_norm_backward: unexpected grad_out");
    const tpu_view_t* ps[5] = {a->w, a->rm, a->rv, a->sm, a->si};
    TPU_RETURN_IF_ERROR(param_dtype(x, ps, 5, a->c, &pd));
    if (a->training ? (!a->sm || !a->si) : (!a->rm || !a->rv))
      TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "batch_norm_backward: missing statistics");
    const tpu_attr_t* mask = ku_attr(def, node, "output_mask");
    for (int i = 0; i < 3; ++i)
      a->mask[i] = !(mask && mask->kind == TPU_ATTR_INTS && i < mask->count) || mask->u.ints[i];
  } else {
    const tpu_view_t* ps[4] = {a->w, a->b, a->rm, a->rv};
    TPU_RETURN_IF_ERROR(param_dtype(x, ps, 4, a->c, &pd));
    if (!a->training && (!a->rm || !a->rv))
      TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "batch_norm: eval without running statistics");
    if ((a->rm && (a->rm->ndim != 1 || a->rm->strides[0] == 0)) ||
        (a->rv && (a->rv->ndim != 1 || a->rv->strides[0] == 0)))
      TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "batch_norm: running statistics not writable");
    a->mask[0] = a->mask[1] = a->mask[2] = true;
  }
  tpu_view_t* s = a->shape;
  s[0] = *x;
  s[0].addr = 0;
  ku_layout_like(&s[0], x);
  for (int i = 1; i < 3; ++i) {
    s[i].dtype = pd;
    s[i].ndim = 1;
    s[i].sizes[0] = (bwd || a->training) ? a->c : 0;
    tpu_view_set_contiguous(&s[i]);
  }
  for (int i = 0; i < 3; ++i)
    if (!a->mask[i]) s[i].dtype = TPU_DTYPE_INVALID;
  return TPU_OK;
}

static tpu_status_t bn_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* out) {
  bn_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_bn_parse(def, node, &a)));
  for (int i = 0; i < 3; ++i) out[i] = a.shape[i];
  if (tpu_spec_count(def->outputs) == 4) { /* the reserve: an empty uint8 tensor */
    memset(&out[3], 0, sizeof(out[3]));
    out[3].dtype = TPU_DTYPE_U8;
    out[3].ndim = 1;
    tpu_view_set_contiguous(&out[3]);
  }
  return TPU_OK;
}

static tpu_status_t bn_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  bn_args_t a;
  return ku_unimplemented(tpu_bn_parse(def, node, &a));
}

/* ---- the kernels ------------------------------------------------------------------- */

typedef struct plan {
  const bn_args_t* a;
  const tpu_view_t* out;   /* output 0 (or NULL) */
  bool bwd, reduce, write;
  bool rows;               /* the channel dim is innermost */
  walk_t xw, gw, ow;       /* channels: one view's dims but the channel one */
  walk_t pos;              /* rows: dims but the channel one; views x, g, out */
  int64_t block, nblocks;  /* rows: positions per block */
  double* shift;           /* forward: per channel */
  double* mean;            /* backward: per channel */
  double *p1, *p2;         /* partial sums [nblocks][c] (channels: [c]) */
  double *ca, *ce, *cd;    /* out = ca*x + ce*g + cd */
} plan_t;

static void walk_but_channel(walk_t* w, const tpu_view_t* v) {
  walk_start(w, 1);
  for (int32_t d = 0; d < v->ndim; ++d)
    if (d != 1) walk_push(w, v->sizes[d], &v->strides[d]);
}

/* Channels layout: one channel per task. */
static void channels_reduce(void* arg, int64_t begin, int64_t end) {
  const plan_t* p = (const plan_t*)arg;
  const bn_args_t* a = p->a;
  double x[CHUNK], g[CHUNK];
  for (int64_t c = begin; c < end; ++c) {
    const char* xb = view_at(a->x, c * a->x->strides[1]);
    const char* gb = p->bwd ? view_at(a->g, c * a->g->strides[1]) : NULL;
    double s1 = 0.0, s2 = 0.0, k = p->bwd ? p->mean[c] : p->shift[c];
    for (int64_t e = 0; e < a->count; e += CHUNK) {
      int64_t n = a->count - e < CHUNK ? a->count - e : CHUNK;
      walk_gather(x, TPU_DTYPE_F64, xb, a->x->dtype, &p->xw, e, n);
      if (p->bwd) {
        walk_gather(g, TPU_DTYPE_F64, gb, a->g->dtype, &p->gw, e, n);
        s1 += ns_sum(g, n);
        s2 += ns_dotdev(g, x, n, k);
      } else {
        s1 += ns_sumdev(x, n, k);
        s2 += ns_sqdev(x, n, k);
      }
    }
    p->p1[c] = s1;
    p->p2[c] = s2;
  }
}

static void channels_write(void* arg, int64_t begin, int64_t end) {
  const plan_t* p = (const plan_t*)arg;
  const bn_args_t* a = p->a;
  double x[CHUNK], g[CHUNK];
  for (int64_t c = begin; c < end; ++c) {
    const char* xb = view_at(a->x, c * a->x->strides[1]);
    const char* gb = p->bwd ? view_at(a->g, c * a->g->strides[1]) : NULL;
    char* ob = view_at(p->out, c * p->out->strides[1]);
    double ca = p->ca[c], ce = p->ce[c], cd = p->cd[c];
    for (int64_t e = 0; e < a->count; e += CHUNK) {
      int64_t n = a->count - e < CHUNK ? a->count - e : CHUNK;
      if (ca != 0.0 || !p->bwd) walk_gather(x, TPU_DTYPE_F64, xb, a->x->dtype, &p->xw, e, n);
      if (p->bwd) {
        walk_gather(g, TPU_DTYPE_F64, gb, a->g->dtype, &p->gw, e, n);
        if (ca != 0.0)
          for (int64_t i = 0; i < n; ++i) x[i] = ca * x[i] + ce * g[i] + cd;
        else
          for (int64_t i = 0; i < n; ++i) x[i] = ce * g[i] + cd;
      } else {
        for (int64_t i = 0; i < n; ++i) x[i] = ca * x[i] + cd;
      }
      walk_scatter(ob, p->out->dtype, &p->ow, e, x, TPU_DTYPE_F64, n);
    }
  }
}

/* Rows layout: a run of positions, each with its channel vector. */
typedef struct rows_job {
  const plan_t* p;
  double* s1;
  double* s2;
  bool write;
} rows_job_t;

static void rows_run(void* arg, const int64_t* offs, const int64_t* steps, int64_t n,
                     int64_t first) {
  (void)first;
  const rows_job_t* j = (const rows_job_t*)arg;
  const plan_t* p = j->p;
  const bn_args_t* a = p->a;
  const tpu_view_t* x = a->x;
  double xb[CHUNK], gb[CHUNK];
  for (int64_t r = 0; r < n; ++r) {
    int64_t xo = offs[0] + r * steps[0], go = offs[1] + r * steps[1], oo = offs[2] + r * steps[2];
    for (int64_t c0 = 0; c0 < a->c; c0 += CHUNK) {
      int64_t m = a->c - c0 < CHUNK ? a->c - c0 : CHUNK;
      tpu_convert(xb, TPU_DTYPE_F64, 1, view_at(x, xo + c0 * x->strides[1]), x->dtype,
                  x->strides[1], m);
      if (p->bwd)
        tpu_convert(gb, TPU_DTYPE_F64, 1, view_at(a->g, go + c0 * a->g->strides[1]), a->g->dtype,
                    a->g->strides[1], m);
      if (j->write) {
        const double *ca = p->ca + c0, *ce = p->ce + c0, *cd = p->cd + c0;
        if (p->bwd)
          for (int64_t i = 0; i < m; ++i) xb[i] = ca[i] * xb[i] + ce[i] * gb[i] + cd[i];
        else
          for (int64_t i = 0; i < m; ++i) xb[i] = ca[i] * xb[i] + cd[i];
        tpu_convert(view_at(p->out, oo + c0 * p->out->strides[1]), p->out->dtype,
                    p->out->strides[1], xb, TPU_DTYPE_F64, 1, m);
      } else if (p->bwd) {
        double *s1 = j->s1 + c0, *s2 = j->s2 + c0;
        const double* k = p->mean + c0;
        for (int64_t i = 0; i < m; ++i) {
          s1[i] += gb[i];
          s2[i] += gb[i] * (xb[i] - k[i]);
        }
      } else {
        double *s1 = j->s1 + c0, *s2 = j->s2 + c0;
        const double* k = p->shift + c0;
        for (int64_t i = 0; i < m; ++i) {
          double d = xb[i] - k[i];
          s1[i] += d;
          s2[i] += d * d;
        }
      }
    }
  }
}

static void rows_blocks(void* arg, int64_t begin, int64_t end, bool write) {
  const plan_t* p = (const plan_t*)arg;
  for (int64_t b = begin; b < end; ++b) {
    rows_job_t j = {p, p->p1 + b * p->a->c, p->p2 + b * p->a->c, write};
    int64_t lo = b * p->block, hi = lo + p->block < p->a->count ? lo + p->block : p->a->count;
    walk_range(&p->pos, lo, hi, rows_run, &j);
  }
}

static void rows_reduce(void* arg, int64_t begin, int64_t end) {
  rows_blocks(arg, begin, end, false);
}
static void rows_write(void* arg, int64_t begin, int64_t end) {
  rows_blocks(arg, begin, end, true);
}

/* x rounded to dtype (half parameter types: PyTorch CPU keeps its per-channel
 * terms in the parameter dtype). */
static double round_to(tpu_dtype_t dt, double x) {
  if (!is_half(dt)) return x;
  uint16_t h;
  tpu_convert(&h, dt, 1, &x, TPU_DTYPE_F64, 1, 1);
  tpu_convert(&x, TPU_DTYPE_F64, 1, &h, dt, 1, 1);
  return x;
}

static double param(const tpu_view_t* v, int64_t c, double dflt) {
  return v ? view_get_f64(v, c * v->strides[0]) : dflt;
}

/* Coefficients (and statistics outputs) from the reduced sums. */
static void coefficients(plan_t* p, const tpu_node_t* node) {
  const bn_args_t* a = p->a;
  double n = (double)a->count;
  for (int64_t c = 0; c < a->c; ++c) {
    double s1 = 0.0, s2 = 0.0;
    if (p->reduce) {
      int64_t nb = p->rows ? p->nblocks : 1;
      for (int64_t b = 0; b < nb; ++b) {
        s1 += p->p1[b * a->c + c];
        s2 += p->p2[b * a->c + c];
      }
    }
    double w = param(a->w, c, 1.0);
    if (!p->bwd) {
      double mean, invstd;
      if (a->training) {
        double m1 = s1 / n, var = s2 / n - m1 * m1;
        if (var < 0) var = 0;
        mean = p->shift[c] + m1;
        /* bfloat16 parameters: the CPU keeps the variance sum in bfloat16 and
         * divides it there (batch_norm_cpu_update_stats_template). */
        tpu_dtype_t sd = a->shape[1].dtype;
        if (sd == TPU_DTYPE_BF16)
          var = round_to(sd, round_to(sd, var * n) / round_to(sd, n));
        invstd = 1.0 / sqrt(var + a->eps);
        view_set_f64(&node->outputs[1], c * node->outputs[1].strides[0], mean);
        view_set_f64(&node->outputs[2], c * node->outputs[2].strides[0], invstd);
        if (a->rm)
          view_set_f64(a->rm, c * a->rm->strides[0],
                       a->momentum * mean + (1.0 - a->momentum) * param(a->rm, c, 0));
        if (a->rv)
          view_set_f64(a->rv, c * a->rv->strides[0],
                       a->momentum * (var * n / (n - 1.0)) +
                           (1.0 - a->momentum) * param(a->rv, c, 0));
      } else {
        mean = param(a->rm, c, 0);
        invstd = 1.0 / sqrt(param(a->rv, c, 1) + a->eps);
      }
      /* Half parameters: the CPU normalises with the saved (rounded) statistics. */
      tpu_dtype_t pd = a->shape[1].dtype;
      if (a->training) {
        mean = round_to(pd, mean);
        invstd = round_to(pd, invstd);
      }
      p->ca[c] = invstd * w;
      p->cd[c] = param(a->b, c, 0.0) - mean * p->ca[c];
      continue;
    }
    double mean = p->mean[c];
    double invstd = a->training ? param(a->si, c, 1) : 1.0 / sqrt(param(a->rv, c, 1) + a->eps);
    if (a->mask[1]) view_set_f64(&node->outputs[1], c * node->outputs[1].strides[0], s2 * invstd);
    if (a->mask[2]) view_set_f64(&node->outputs[2], c * node->outputs[2].strides[0], s1);
    double e = w * invstd;
    p->ce[c] = e;
    if (a->training) {
      double k = s2 * invstd * invstd / n;
      p->ca[c] = -e * k;
      p->cd[c] = e * (mean * k - s1 / n);
    } else {
      p->ca[c] = p->cd[c] = 0.0;
    }
  }
}

static tpu_status_t bn_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  bn_args_t a;
  TPU_RETURN_IF_ERROR(tpu_bn_parse(def, node, &a));
  if (node->num_outputs < 3) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "expected 3 outputs");
  for (int i = 0; i < 3; ++i)
    if (a.mask[i] && !views_same_shape(&node->outputs[i], &a.shape[i]))
      TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output %d has the wrong shape", i);
  plan_t p;
  memset(&p, 0, sizeof(p));
  p.a = &a;
  p.bwd = a.impl->backward;
  p.reduce = p.bwd ? (a.training && a.mask[0]) || a.mask[1] || a.mask[2] : a.training;
  p.write = a.mask[0];
  p.out = a.mask[0] ? &node->outputs[0] : NULL;
  const tpu_view_t* x = a.x;
  /* Rows when the channel dim is the innermost of the input. */
  p.rows = a.c > 1 && x->strides[1] == 1;
  for (int32_t d = 0; p.rows && d < x->ndim; ++d)
    if (d != 1 && x->sizes[d] > 1 && x->strides[d] < a.c) p.rows = false;
  int64_t c = a.c;
  int threads = tpu_parallel_threads();
  if (p.rows) {
    int64_t min_block = (16384 + c - 1) / c;
    p.block = (a.count + 4 * threads - 1) / (4 * threads);
    if (p.block < min_block) p.block = min_block;
    p.nblocks = (a.count + p.block - 1) / p.block;
    walk_start(&p.pos, 3);
    for (int32_t d = 0; d < x->ndim; ++d) {
      if (d == 1) continue;
      int64_t st[3] = {x->strides[d], p.bwd ? a.g->strides[d] : 0,
                       p.out ? p.out->strides[d] : 0};
      walk_push(&p.pos, x->sizes[d], st);
    }
  } else {
    p.nblocks = 1;
    walk_but_channel(&p.xw, x);
    if (p.bwd) walk_but_channel(&p.gw, a.g);
    if (p.out) walk_but_channel(&p.ow, p.out);
  }
  size_t nd = (size_t)c * (6 + 2 * (size_t)p.nblocks);
  double* mem = (double*)calloc(nd, sizeof(double));
  if (!mem) TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for batch_norm");
  p.shift = mem;
  p.mean = mem + c;
  p.ca = mem + 2 * c;
  p.ce = mem + 3 * c;
  p.cd = mem + 4 * c;
  p.p1 = mem + 6 * c;
  p.p2 = p.p1 + c * p.nblocks;
  for (int64_t k = 0; k < c; ++k) {
    if (p.bwd) p.mean[k] = a.training ? param(a.sm, k, 0) : param(a.rm, k, 0);
    else if (a.training) p.shift[k] = view_get_f64(x, k * x->strides[1]);
  }
  if (p.reduce) {
    if (p.rows) tpu_parallel_for(p.nblocks, 1, rows_reduce, &p);
    else tpu_parallel_for(c, a.count >= 16384 ? 1 : 16384 / a.count, channels_reduce, &p);
  }
  coefficients(&p, node);
  if (p.write) {
    if (p.rows) tpu_parallel_for(p.nblocks, 1, rows_write, &p);
    else tpu_parallel_for(c, a.count >= 16384 ? 1 : 16384 / a.count, channels_write, &p);
  }
  free(mem);
  return TPU_OK;
}

/* ---- the op table ----------------------------------------------------------------- */

static const bn_impl_t k_fwd = {false, -1, false};
static const bn_impl_t k_fwd_eval = {false, 0, false};
static const bn_impl_t k_bwd = {true, -1, false};
static const bn_impl_t k_fwd_no_update = {false, -2, false};
static const bn_impl_t k_fwd_train = {false, 1, false};

static const tpu_op_def_t k_rows[] = {
    {.name = "batch_norm", .inputs = "input,weight?,bias?,running_mean?,running_var?",
     .attrs = "training,momentum,eps", .outputs = "out0,out1,out2",
     .aten = "native_batch_norm.default native_batch_norm.out", .kernel = bn_kernel,
     .infer = bn_infer, .check = bn_check, .impl = &k_fwd},
    /* The forms whose schema marks the running statistics written ("!": mutated inputs). */
    {.name = "batch_norm_legit", .inputs = "input,weight?,bias?,running_mean!,running_var!",
     .attrs = "training,momentum,eps", .outputs = "out0,out1,out2",
     .aten = "_native_batch_norm_legit.default _native_batch_norm_legit.out", .kernel = bn_kernel,
     .infer = bn_infer, .check = bn_check, .impl = &k_fwd},
    {.name = "batch_norm_with_update", .inputs = "input,weight?,bias?,running_mean!,running_var!",
     .attrs = "momentum,eps", .outputs = "out0,out1,out2,out3",
     .aten = "_batch_norm_with_update.default _batch_norm_with_update.out", .kernel = bn_kernel,
     .infer = bn_infer, .check = bn_check, .impl = &k_fwd_train},
    {.name = "batch_norm_no_stats", .inputs = "input,weight?,bias?",
     .attrs = "training,momentum,eps", .outputs = "out0,out1,out2",
     .aten = "_native_batch_norm_legit.no_stats _native_batch_norm_legit.no_stats_out",
     .kernel = bn_kernel, .infer = bn_infer, .check = bn_check, .impl = &k_fwd},
    {.name = "batch_norm_eval", .inputs = "input,weight?,bias?,running_mean,running_var",
     .attrs = "momentum,eps", .outputs = "out0,out1,out2",
     .aten = "_native_batch_norm_legit_no_training.default _native_batch_norm_legit_no_training.out",
     .kernel = bn_kernel, .infer = bn_infer, .check = bn_check, .impl = &k_fwd_eval},
    {.name = "batch_norm_backward",
     .inputs = "grad_out,input,weight?,running_mean?,running_var?,save_mean?,save_invstd?",
     .attrs = "train,eps,output_mask", .outputs = "out0,out1,out2",
     .aten = "native_batch_norm_backward.default native_batch_norm_backward.out",
     .kernel = bn_kernel, .infer = bn_infer, .check = bn_check, .impl = &k_bwd},
    {.name = "batch_norm_no_update", .inputs = "input,weight?,bias?,running_mean?,running_var?",
     .attrs = "momentum,eps", .outputs = "out0,out1,out2,out3",
     .aten = "_batch_norm_no_update.default _batch_norm_no_update.out", .kernel = bn_kernel,
     .infer = bn_infer, .check = bn_check, .impl = &k_fwd_no_update},
    {.name = "batch_norm_backward_reserve",
     .inputs = "grad_out,input,weight,running_mean?,running_var?,save_mean?,save_var?,reserve",
     .attrs = "update,eps,output_mask", .outputs = "out0,out1,out2",
     .aten = "batch_norm_backward.default", .kernel = bn_kernel, .infer = bn_infer,
     .check = bn_check, .impl = &k_bwd},
};

const tpu_op_family_t tpu_family_batch_norm = {"batch_norm", k_rows,
                                               (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
