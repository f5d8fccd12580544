/* group_norm.c — native_group_norm and native_group_norm_backward.
 *
 * The input [N, C, *] (HxW elements per channel) splits into N * G groups of
 * M = C/G * HxW elements: group (n, g) holds channels [g*D, (g+1)*D), D = C/G.
 * Forward per group (in double): mean and rstd from per-chunk moments merged
 * as in layer_norm (Chan), then out = (x - mean) * rstd * w[c] + b[c].
 * Backward per group, with gw = grad_out * w[c] and xhat = (x - mean) * rstd:
 *   grad_input = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)),
 * and per (n, c) the sums of grad_out * xhat and grad_out, added over n
 * afterwards for grad_weight and grad_bias.
 * Groups are tasks of tpu_parallel_for; a group's elements (its channels and
 * the trailing dims, any strides) are one walk, streamed through CHUNK-sized
 * double buffers.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/norm/batch_norm.h"
#include "kernels/norm/norm_sums.h"

#define CHUNK 1024

static bool is_half(tpu_dtype_t d) { return d == TPU_DTYPE_F16 || d == TPU_DTYPE_BF16; }

tpu_status_t tpu_gn_parse(const tpu_op_def_t* def, const tpu_node_t* node, bn_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->impl = (const bn_impl_t*)def->impl;
  bool bwd = a->impl->backward;
  a->x = ku_input(def, node, "input");
  if (!a->x) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "expected a tensor for 'input'");
  const tpu_view_t* x = a->x;
  a->w = ku_input(def, node, "weight");
  a->b = bwd ? NULL : ku_input(def, node, "bias");
  a->n = tpu_attr_int(ku_attr(def, node, "N"), -1);
  a->c = tpu_attr_int(ku_attr(def, node, "C"), -1);
  a->s = tpu_attr_int(ku_attr(def, node, "HxW"), -1);
  a->groups = tpu_attr_int(ku_attr(def, node, "group"), -1);
  a->eps = tpu_attr_float(ku_attr(def, node, "eps"), 1e-5);
  if (x->ndim < 2 || !tpu_dtype_is_floating(x->dtype) || x->sizes[0] != a->n ||
      x->sizes[1] != a->c || a->groups <= 0 || a->c % a->groups != 0 || a->n < 0 ||
      a->c <= 0 || a->s <= 0 || tpu_view_numel(x) != a->n * a->c * a->s)
    TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "group_norm: no native kernel for these arguments");
  const tpu_view_t* ps[2] = {a->w, a->b};
  bool mixed = false;
  for (int i = 0; i < 2; ++i) {
    if (!ps[i]) continue;
    if (!tpu_dtype_is_floating(ps[i]->dtype) || tpu_view_numel(ps[i]) != a->c ||
        ps[i]->ndim != 1)
      TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "group_norm: unexpected parameter");
    if (ps[i]->dtype != x->dtype) {
      if (!is_half(x->dtype) || ps[i]->dtype != TPU_DTYPE_F32)
        TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "group_norm: mixed dtypes");
      mixed = true;
    }
  }
  tpu_dtype_t pd = mixed ? TPU_DTYPE_F32 : x->dtype;
  tpu_view_t* s = a->shape;
  s[0] = *x;
  s[0].addr = 0;
  ku_layout_like(&s[0], x);
  if (bwd) {
    a->g = ku_input(def, node, "grad_out");
    a->sm = ku_input(def, node, "mean");
    a->si = ku_input(def, node, "rstd");
    if (!a->g || !views_same_shape(a->g, x) || !tpu_dtype_is_floating(a->g->dtype) || !a->sm ||
        !a->si || tpu_view_numel(a->sm) != a->n * a->groups ||
        tpu_view_numel(a->si) != a->n * a->groups)
      TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "group_norm_backward: unexpected inputs");
    const tpu_attr_t* mask = ku_attr(def, node, "output_mask");
    for (int i = 0; i < 3; ++i)
      a->mask[i] = !(mask && mask->kind == TPU_ATTR_INTS && i < mask->count) || mask->u.ints[i];
    for (int i = 1; i < 3; ++i) {
      s[i].dtype = pd;
      s[i].ndim = 1;
      s[i].sizes[0] = a->c;
      tpu_view_set_contiguous(&s[i]);
    }
    for (int i = 0; i < 3; ++i)
      if (!a->mask[i]) s[i].dtype = TPU_DTYPE_INVALID;
  } else {
    a->mask[0] = a->mask[1] = a->mask[2] = true;
    for (int i = 1; i < 3; ++i) {
      s[i].dtype = pd;
      s[i].ndim = 2;
      s[i].sizes[0] = a->n;
      s[i].sizes[1] = a->groups;
      tpu_view_set_contiguous(&s[i]);
    }
  }
  return TPU_OK;
}

static tpu_status_t gn_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* out) {
  bn_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_gn_parse(def, node, &a)));
  for (int i = 0; i < 3; ++i) out[i] = a.shape[i];
  return TPU_OK;
}

static tpu_status_t gn_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  bn_args_t a;
  return ku_unimplemented(tpu_gn_parse(def, node, &a));
}

/* ---- the kernels ------------------------------------------------------------------- */

typedef struct plan {
  const bn_args_t* a;
  const tpu_node_t* node;
  int64_t d;          /* channels per group */
  walk_t xw, gw, ow;  /* a group's elements in x, grad_out, output 0 */
  double *w, *b;      /* per channel (NULL: absent) */
  double *dsx, *db;   /* backward: per (n, c) sums of g*xhat and g */
} plan_t;

/* Offset of flat element k of a view. */
static int64_t flat_offset(const tpu_view_t* v, int64_t k) {
  int64_t off = 0;
  for (int32_t d = v->ndim - 1; d >= 0; --d) {
    off += (k % v->sizes[d]) * v->strides[d];
    k /= v->sizes[d];
  }
  return off;
}

static void group_walk(walk_t* w, const tpu_view_t* v, int64_t d) {
  walk_start(w, 1);
  walk_push(w, d, &v->strides[1]);
  for (int32_t k = 2; k < v->ndim; ++k) walk_push(w, v->sizes[k], &v->strides[k]);
}

static void forward_groups(void* arg, int64_t begin, int64_t end) {
  const plan_t* p = (const plan_t*)arg;
  const bn_args_t* a = p->a;
  const tpu_view_t* out = &p->node->outputs[0];
  double x[CHUNK];
  int64_t m = p->d * a->s;
  for (int64_t grp = begin; grp < end; ++grp) {
    int64_t n = grp / a->groups, c0 = (grp % a->groups) * p->d;
    const char* xb = view_at(a->x, n * a->x->strides[0] + c0 * a->x->strides[1]);
    double mean = 0.0, m2 = 0.0;
    for (int64_t k = 0; k < m; k += CHUNK) {
      int64_t c = m - k < CHUNK ? m - k : CHUNK;
      walk_gather(x, TPU_DTYPE_F64, xb, a->x->dtype, &p->xw, k, c);
      double s = ns_sum(x, c);
      double cm = s / (double)c;
      double q = ns_sqdev(x, c, cm);
      double delta = cm - mean, tot = (double)(k + c);
      mean += delta * (double)c / tot;
      m2 += q + delta * delta * (double)k * (double)c / tot;
    }
    double rstd = 1.0 / sqrt(m2 / (double)m + a->eps);
    char* ob = view_at(out, n * out->strides[0] + c0 * out->strides[1]);
    for (int64_t k = 0; k < m; k += CHUNK) {
      int64_t c = m - k < CHUNK ? m - k : CHUNK;
      walk_gather(x, TPU_DTYPE_F64, xb, a->x->dtype, &p->xw, k, c);
      int64_t ch = c0 + k / a->s, r = k % a->s;
      for (int64_t i = 0; i < c; ++i) {
        double sc = rstd * (p->w ? p->w[ch] : 1.0);
        x[i] = (x[i] - mean) * sc + (p->b ? p->b[ch] : 0.0);
        if (++r == a->s) r = 0, ++ch;
      }
      walk_scatter(ob, out->dtype, &p->ow, k, x, TPU_DTYPE_F64, c);
    }
    const tpu_view_t* mv = &p->node->outputs[1];
    const tpu_view_t* rv = &p->node->outputs[2];
    view_set_f64(mv, flat_offset(mv, grp), mean);
    view_set_f64(rv, flat_offset(rv, grp), rstd);
  }
}

static void backward_groups(void* arg, int64_t begin, int64_t end) {
  const plan_t* p = (const plan_t*)arg;
  const bn_args_t* a = p->a;
  const tpu_view_t* out = &p->node->outputs[0];
  double x[CHUNK], g[CHUNK];
  int64_t m = p->d * a->s;
  for (int64_t grp = begin; grp < end; ++grp) {
    int64_t n = grp / a->groups, c0 = (grp % a->groups) * p->d;
    const char* xb = view_at(a->x, n * a->x->strides[0] + c0 * a->x->strides[1]);
    const char* gb = view_at(a->g, n * a->g->strides[0] + c0 * a->g->strides[1]);
    double mean = view_get_f64(a->sm, flat_offset(a->sm, grp));
    double rstd = view_get_f64(a->si, flat_offset(a->si, grp));
    double sg = 0.0, sgx = 0.0;
    double* dsx = p->dsx + n * a->c;
    double* db = p->db + n * a->c;
    for (int64_t k = 0; k < m; k += CHUNK) {
      int64_t c = m - k < CHUNK ? m - k : CHUNK;
      walk_gather(x, TPU_DTYPE_F64, xb, a->x->dtype, &p->xw, k, c);
      walk_gather(g, TPU_DTYPE_F64, gb, a->g->dtype, &p->gw, k, c);
      int64_t ch = c0 + k / a->s, r = k % a->s;
      for (int64_t i = 0; i < c; ++i) {
        double xhat = (x[i] - mean) * rstd, gw = g[i] * (p->w ? p->w[ch] : 1.0);
        sg += gw;
        sgx += gw * xhat;
        dsx[ch] += g[i] * xhat;
        db[ch] += g[i];
        if (++r == a->s) r = 0, ++ch;
      }
    }
    if (!a->mask[0]) continue;
    sg /= (double)m;
    sgx /= (double)m;
    char* ob = view_at(out, n * out->strides[0] + c0 * out->strides[1]);
    for (int64_t k = 0; k < m; k += CHUNK) {
      int64_t c = m - k < CHUNK ? m - k : CHUNK;
      walk_gather(x, TPU_DTYPE_F64, xb, a->x->dtype, &p->xw, k, c);
      walk_gather(g, TPU_DTYPE_F64, gb, a->g->dtype, &p->gw, k, c);
      int64_t ch = c0 + k / a->s, r = k % a->s;
      for (int64_t i = 0; i < c; ++i) {
        double xhat = (x[i] - mean) * rstd, gw = g[i] * (p->w ? p->w[ch] : 1.0);
        x[i] = rstd * (gw - sg - xhat * sgx);
        if (++r == a->s) r = 0, ++ch;
      }
      walk_scatter(ob, out->dtype, &p->ow, k, x, TPU_DTYPE_F64, c);
    }
  }
}

static tpu_status_t gn_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  bn_args_t a;
  TPU_RETURN_IF_ERROR(tpu_gn_parse(def, node, &a));
  if (node->num_outputs < 3) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "expected 3 outputs");
  for (int i = 0; i < 3; ++i)
    if (a.mask[i] && !views_same_shape(&node->outputs[i], &a.shape[i]))
      TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output %d has the wrong shape", i);
  bool bwd = a.impl->backward;
  if (a.n == 0) { /* an empty batch: nothing to compute (grad_weight/bias are zero) */
    for (int i = 1; bwd && i < 3; ++i)
      for (int64_t c = 0; a.mask[i] && c < a.c; ++c)
        view_set_f64(&node->outputs[i], c * node->outputs[i].strides[0], 0.0);
    return TPU_OK;
  }
  plan_t p;
  memset(&p, 0, sizeof(p));
  p.a = &a;
  p.node = node;
  p.d = a.c / a.groups;
  group_walk(&p.xw, a.x, p.d);
  if (bwd) group_walk(&p.gw, a.g, p.d);
  if (a.mask[0]) group_walk(&p.ow, &node->outputs[0], p.d);
  size_t nd = 2 * (size_t)a.c + (bwd ? 2 * (size_t)(a.n * a.c) : 0);
  double* mem = (double*)calloc(nd, sizeof(double));
  if (!mem) TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for group_norm");
  for (int64_t c = 0; c < a.c; ++c) {
    if (a.w) mem[c] = view_get_f64(a.w, c * a.w->strides[0]);
    if (a.b) mem[a.c + c] = view_get_f64(a.b, c * a.b->strides[0]);
  }
  p.w = a.w ? mem : NULL;
  p.b = a.b ? mem + a.c : NULL;
  int64_t m = p.d * a.s, grain = m >= 16384 ? 1 : 16384 / m;
  if (!bwd) {
    tpu_parallel_for(a.n * a.groups, grain, forward_groups, &p);
  } else {
    p.dsx = mem + 2 * a.c;
    p.db = p.dsx + a.n * a.c;
    tpu_parallel_for(a.n * a.groups, grain, backward_groups, &p);
    for (int64_t c = 0; c < a.c; ++c) {
      double sw = 0.0, sb = 0.0;
      for (int64_t n = 0; n < a.n; ++n) {
        sw += p.dsx[n * a.c + c];
        sb += p.db[n * a.c + c];
      }
      if (a.mask[1]) view_set_f64(&node->outputs[1], c * node->outputs[1].strides[0], sw);
      if (a.mask[2]) view_set_f64(&node->outputs[2], c * node->outputs[2].strides[0], sb);
    }
  }
  free(mem);
  return TPU_OK;
}

static const bn_impl_t k_fwd = {false, 1, true};
static const bn_impl_t k_bwd = {true, 1, true};

static const tpu_op_def_t k_rows[] = {
    {.name = "group_norm", .inputs = "input,weight?,bias?", .attrs = "N,C,HxW,group,eps",
     .outputs = "out0,out1,out2", .aten = "native_group_norm.default native_group_norm.out",
     .kernel = gn_kernel, .infer = gn_infer, .check = gn_check, .impl = &k_fwd},
    {.name = "group_norm_backward", .inputs = "grad_out,input,mean,rstd,weight?",
     .attrs = "N,C,HxW,group,output_mask", .outputs = "out0,out1,out2",
     .aten = "native_group_norm_backward.default native_group_norm_backward.out",
     .kernel = gn_kernel, .infer = gn_infer, .check = gn_check, .impl = &k_bwd},
};

const tpu_op_family_t tpu_family_group_norm = {"group_norm", k_rows,
                                               (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
