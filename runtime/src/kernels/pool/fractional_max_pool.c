/* fractional_max_pool.c — fractional_max_pool2d/3d and their backwards.
 *
 * self is [N, C, (T,) H, W] or unbatched [C, (T,) H, W]; random_samples is
 * [>= N, C, sd] of self's dtype (sd = 2 or 3 spatial dims). Per plane (n, c)
 * and spatial dim s (2d: sample 0 is W, sample 1 is H; 3d: 0 T, 1 H, 2 W, as
 * PyTorch's CPU kernels read them), output position i starts its window of
 * kernel_size[s] input positions at
 *   i < out - 1:  (int)((i + u) * alpha) - (int)(u * alpha),
 *   i = out - 1:  in - k,     alpha = (in - k) / (out - 1),
 * computed in self's dtype step by step (float for float32 and the half
 * types, rounded to the half type after each operation as c10::Half does),
 * so the windows, and therefore the outputs and indices, equal the CPU's
 * exactly. Each output is the window's maximum (a NaN wins; the last NaN in
 * window order), its index the flat position in the plane (t*H*W + h*W + w).
 * The backward adds grad_output into grad_input at the saved indices, in
 * output order, with additions rounded to self's dtype as the CPU does.
 * Planes run in parallel (tpu_parallel_for); each plane is written by one
 * thread, so results do not depend on the thread count.
 *
 * PyTorch's argument errors are raised here with its messages and order
 * (INVALID_ARGUMENT: RuntimeError): kernel sizes <= 0, a rank other than
 * sd + 1 or sd + 2, an empty non-batch dim, a window too large for the input,
 * a negative output size, random_samples of another dtype or shape, a
 * grad_output of another shape, a saved index outside the plane. Non-float
 * dtypes fall back (UNIMPLEMENTED: the CPU has no kernel for them either).
 * tpu_fractional_max_pool_reference is the plain version the C test uses.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/kernel_util.h"

typedef struct fmp_impl {
  int32_t sd; /* spatial dims: 2 or 3 */
  bool backward;
} fmp_impl_t;

typedef struct fmp_args {
  const fmp_impl_t* impl;
  const tpu_view_t *x, *rs, *g, *idx;
  int64_t k[3], osz[3], isz[3]; /* per spatial dim, outermost first */
  int64_t n, c, planes, in_plane, out_plane;
  bool batched;
  tpu_view_t shape[2];
} fmp_args_t;

#define FMP_FAIL(...) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, __VA_ARGS__)

static tpu_status_t fmp_parse(const tpu_op_def_t* def, const tpu_node_t* node, fmp_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->impl = (const fmp_impl_t*)def->impl;
  const int32_t sd = a->impl->sd;
  const bool bwd = a->impl->backward;
  const char* fwd_name = sd == 2 ? "fractional_max_pool2d()" : "fractional_max_pool3d_out()";
  a->x = ku_input(def, node, "self");
  a->rs = bwd ? NULL : ku_input(def, node, "random_samples");
  a->g = bwd ? ku_input(def, node, "grad_output") : NULL;
  a->idx = bwd ? ku_input(def, node, "indices") : NULL;
  const tpu_attr_t* ka = ku_attr(def, node, "kernel_size");
  const tpu_attr_t* oa = ku_attr(def, node, "output_size");
  if (!a->x || (!bwd && !a->rs) || (bwd && (!a->g || !a->idx)) || !ka || !oa ||
      ka->kind != TPU_ATTR_INTS || oa->kind != TPU_ATTR_INTS)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "fractional_max_pool: arguments");
  if (ka->count != sd)
    FMP_FAIL("fractional_max_pool%dd: kernel_size must either be a single Int or tuple of Ints",
             sd);
  if (oa->count != sd)
    FMP_FAIL("fractional_max_pool%dd: output_size must either be a single Int or tuple of Ints",
             sd);
  bool kpos = true;
  for (int32_t s = 0; s < sd; ++s) {
    a->k[s] = ka->u.ints[s];
    a->osz[s] = oa->u.ints[s];
    kpos = kpos && a->k[s] > 0;
  }
  const tpu_view_t* x = a->x;
  char xs[200];
  ku_format_sizes(x, xs, sizeof(xs));
  if (!bwd && !kpos) {
    if (sd == 2)
      FMP_FAIL("fractional_max_pool2d(): kernel size should be greater than zero, but got "
               "%lldx%lld", (long long)a->k[0], (long long)a->k[1]);
    FMP_FAIL("fractional_max_pool3d(): kernel size should be greater than zero, but got "
             "%lldx%lldx%lld", (long long)a->k[0], (long long)a->k[1], (long long)a->k[2]);
  }
  if (x->ndim != sd + 1 && x->ndim != sd + 2)
    FMP_FAIL("%s: Expected %dD or %dD tensor, but got: %s", fwd_name, sd + 1, sd + 2, xs);
  a->batched = x->ndim == sd + 2;
  for (int32_t d = a->batched ? 1 : 0; d < x->ndim; ++d)
    if (x->sizes[d] == 0)
      FMP_FAIL("%s: Expected input to have non-zero size for non-batch dimensions, but got%s "
               "with dimension %d being empty.", fwd_name, xs, (int)d);
  a->n = a->batched ? x->sizes[0] : 1;
  a->c = x->sizes[a->batched ? 1 : 0];
  a->planes = a->n * a->c;
  a->in_plane = a->out_plane = 1;
  static const char* const k_names[2][3] = {{"height", "width", ""}, {"time", "height", "width"}};
  for (int32_t s = 0; s < sd; ++s) {
    a->isz[s] = x->sizes[x->ndim - sd + s];
    a->in_plane *= a->isz[s];
    /* output_size is an attribute, not a validated view: its product (and
     * the output's element count) must stay within what a view may index */
    int64_t os = a->osz[s] > 0 ? a->osz[s] : 0;
    if (__builtin_mul_overflow(a->out_plane, os, &a->out_plane) ||
        a->out_plane > TPU_MAX_VIEW_ELEMENTS / (a->planes > 0 ? a->planes : 1))
      FMP_FAIL("%s: output_size too large", fwd_name);
  }
  /* 2d allows the windows to reach the last input position; PyTorch's 3d
   * check is strict (out + k - 1 < in) */
  for (int32_t s = 0; s < sd && !bwd; ++s)
    if (a->osz[s] + a->k[s] - 1 > a->isz[s] - (sd == 3 ? 1 : 0))
      FMP_FAIL("%s: pool %s %lld too large relative to input %s %lld", fwd_name,
               k_names[sd - 2][s], (long long)a->k[s], k_names[sd - 2][s], (long long)a->isz[s]);
  /* the output: self's leading dims, then output_size */
  tpu_view_t* o = &a->shape[0];
  o->dtype = x->dtype;
  o->ndim = x->ndim;
  for (int32_t d = 0; d < x->ndim - sd; ++d) o->sizes[d] = x->sizes[d];
  for (int32_t s = 0; s < sd; ++s) o->sizes[x->ndim - sd + s] = a->osz[s];
  for (int32_t s = 0; s < sd; ++s)
    if (a->osz[s] < 0) {
      char os[200];
      ku_format_sizes(o, os, sizeof(os));
      FMP_FAIL("Trying to create tensor with negative dimension %lld: %s", (long long)a->osz[s],
               os);
    }
  tpu_view_set_contiguous(o);
  if (!tpu_dtype_is_floating(x->dtype))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "fractional_max_pool of %s",
                           tpu_dtype_name(x->dtype));
  if (!bwd) {
    const tpu_view_t* rs = a->rs;
    if (rs->dtype != x->dtype) FMP_FAIL("Expect _random_samples to have the same dtype as input");
    if (rs->ndim != 3) FMP_FAIL("Expect _random_samples to have 3 dimensions, got %d", rs->ndim);
    if (rs->sizes[0] < a->n)
      FMP_FAIL("Expect _random_samples.size(0) no less then input batch size.");
    if (rs->sizes[1] != a->c)
      FMP_FAIL("Expect _random_samples.size(1) equals to input channel size.");
    if (rs->sizes[2] != sd)
      FMP_FAIL("Expect _random_samples.size(2) equals to %d; got %lld.", sd,
               (long long)rs->sizes[2]);
    a->shape[1] = *o;
    a->shape[1].dtype = TPU_DTYPE_I64;
    return TPU_OK;
  }
  if (!views_same_shape(a->g, o)) {
    if (sd == 2) FMP_FAIL("fractional_max_pool2d_backward(): gradOutput sizes unexpected");
    FMP_FAIL("fractional_max_pool3d_backward_out(): gradOutput sizes unexpected");
  }
  if (!views_same_shape(a->idx, o) || a->idx->dtype != TPU_DTYPE_I64 || a->g->dtype != x->dtype)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "fractional_max_pool backward: indices");
  a->shape[0] = *x;
  a->shape[0].addr = 0;
  tpu_view_set_contiguous(&a->shape[0]);
  return TPU_OK;
}

static tpu_status_t fmp_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* out) {
  fmp_args_t a;
  TPU_RETURN_IF_ERROR(fmp_parse(def, node, &a));
  out[0] = a.shape[0];
  if (!a.impl->backward) out[1] = a.shape[1];
  return TPU_OK;
}

static tpu_status_t fmp_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  fmp_args_t a;
  TPU_RETURN_IF_ERROR(fmp_parse(def, node, &a));
  for (int32_t k = 0; k < node->num_outputs && k < (a.impl->backward ? 1 : 2); ++k)
    if (node->outputs[k].addr > 1 && !views_same_shape(&node->outputs[k], &a.shape[k]))
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "fractional_max_pool: output shape");
  return TPU_OK;
}

/* ---- arithmetic in self's dtype ------------------------------------------------------ */

/* A float result rounded to dt (float32: itself; the half types: their rounding). */
static double fmp_round(tpu_dtype_t dt, float v) {
  if (dt == TPU_DTYPE_F32) return v;
  char b[8];
  double r;
  tpu_convert(b, dt, 1, &v, TPU_DTYPE_F32, 1, 1);
  tpu_convert(&r, TPU_DTYPE_F64, 1, b, dt, 1, 1);
  return r;
}
static double fmp_add(tpu_dtype_t dt, double a, double b) {
  return dt == TPU_DTYPE_F64 ? a + b : fmp_round(dt, (float)a + (float)b);
}
static double fmp_mul(tpu_dtype_t dt, double a, double b) {
  return dt == TPU_DTYPE_F64 ? a * b : fmp_round(dt, (float)a * (float)b);
}
static double fmp_div(tpu_dtype_t dt, double a, double b) {
  return dt == TPU_DTYPE_F64 ? a / b : fmp_round(dt, (float)a / (float)b);
}
static double fmp_int(tpu_dtype_t dt, int64_t i) {
  return dt == TPU_DTYPE_F64 ? (double)i : fmp_round(dt, (float)i);
}

/* Window starts of one spatial dim for sample u, into seq[out]. */
static void fmp_intervals(tpu_dtype_t dt, double u, int64_t in, int64_t out, int64_t k,
                          int64_t* seq) {
  if (out <= 0) return;
  if (out > 1) {
    double alpha = fmp_div(dt, fmp_int(dt, in - k), fmp_int(dt, out - 1));
    int64_t base = (int64_t)fmp_mul(dt, u, alpha);
    for (int64_t i = 0; i < out - 1; ++i)
      seq[i] = (int64_t)fmp_mul(dt, fmp_add(dt, fmp_int(dt, i), u), alpha) - base;
  }
  seq[out - 1] = in - k;
}

/* ---- the kernels --------------------------------------------------------------------- */

typedef struct fmp_plan {
  const fmp_args_t* a;
  const double* x;   /* forward: self; backward: grad_output */
  const double* rs;  /* [>= N, C, sd] */
  const int64_t* ix; /* backward: the saved indices */
  double* out;       /* forward: [planes, out_plane]; backward: [planes, in_plane] */
  int64_t* oidx;
  int64_t* seq;      /* per thread chunk: allocated in the chunk */
  int64_t* bad;      /* per plane */
} fmp_plan_t;

static void fmp_forward_planes(void* arg, int64_t begin, int64_t end) {
  const fmp_plan_t* pl = (const fmp_plan_t*)arg;
  const fmp_args_t* a = pl->a;
  const int32_t sd = a->impl->sd;
  int64_t o3[3] = {1, 1, 1}, i3[3] = {1, 1, 1}, k3[3] = {1, 1, 1};
  for (int32_t s = 0; s < sd; ++s) {
    o3[3 - sd + s] = a->osz[s];
    i3[3 - sd + s] = a->isz[s];
    k3[3 - sd + s] = a->k[s];
  }
  int64_t* seq = (int64_t*)malloc(sizeof(int64_t) * (size_t)(o3[0] + o3[1] + o3[2]));
  if (!seq) {
    for (int64_t p = begin; p < end; ++p) pl->bad[p] = 1;
    return;
  }
  int64_t* sq[3] = {seq, seq + o3[0], seq + o3[0] + o3[1]};
  for (int64_t p = begin; p < end; ++p) {
    int64_t n = p / a->c, c = p % a->c;
    const double* u = pl->rs + (n * a->c + c) * sd;
    /* 2d samples are (W, H); 3d (T, H, W) */
    if (sd == 2) {
      sq[0][0] = 0;
      fmp_intervals(a->x->dtype, u[1], i3[1], o3[1], k3[1], sq[1]);
      fmp_intervals(a->x->dtype, u[0], i3[2], o3[2], k3[2], sq[2]);
    } else {
      for (int32_t s = 0; s < 3; ++s)
        fmp_intervals(a->x->dtype, u[s], i3[s], o3[s], k3[s], sq[s]);
    }
    const double* xp = pl->x + p * a->in_plane;
    double* op = pl->out + p * a->out_plane;
    int64_t* ip = pl->oidx + p * a->out_plane;
    int64_t q = 0;
    for (int64_t ot = 0; ot < o3[0]; ++ot)
      for (int64_t oh = 0; oh < o3[1]; ++oh)
        for (int64_t ow = 0; ow < o3[2]; ++ow, ++q) {
          int64_t t0 = sq[0][ot], h0 = sq[1][oh], w0 = sq[2][ow];
          double best = -INFINITY;
          int64_t bi = (t0 * i3[1] + h0) * i3[2] + w0;
          for (int64_t t = t0; t < t0 + k3[0]; ++t)
            for (int64_t h = h0; h < h0 + k3[1]; ++h)
              for (int64_t w = w0; w < w0 + k3[2]; ++w) {
                int64_t at = (t * i3[1] + h) * i3[2] + w;
                double v = xp[at];
                if (v > best || isnan(v)) best = v, bi = at;
              }
          op[q] = best;
          ip[q] = bi;
        }
  }
  free(seq);
}

static void fmp_backward_planes(void* arg, int64_t begin, int64_t end) {
  const fmp_plan_t* pl = (const fmp_plan_t*)arg;
  const fmp_args_t* a = pl->a;
  for (int64_t p = begin; p < end; ++p) {
    double* gi = pl->out + p * a->in_plane;
    const double* go = pl->x + p * a->out_plane;
    const int64_t* ix = pl->ix + p * a->out_plane;
    for (int64_t e = 0; e < a->in_plane; ++e) gi[e] = 0.0;
    for (int64_t q = 0; q < a->out_plane; ++q) {
      int64_t i = ix[q];
      if (i < 0 || i >= a->in_plane) {
        pl->bad[p] = 2;
        break;
      }
      gi[i] = fmp_add(a->x->dtype, gi[i], go[q]);
    }
  }
}

static tpu_status_t fmp_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_exec_ctx_t* ctx) {
  (void)ctx;
  fmp_args_t a;
  TPU_RETURN_IF_ERROR(fmp_parse(def, node, &a));
  const bool bwd = a.impl->backward;
  int32_t nout = bwd ? 1 : 2;
  if (node->num_outputs < nout) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "missing outputs");
  for (int32_t k = 0; k < nout; ++k)
    if (!views_same_shape(&node->outputs[k], &a.shape[k]))
      TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output has the wrong shape");
  fmp_plan_t pl;
  memset(&pl, 0, sizeof(pl));
  pl.a = &a;
  int64_t outn = a.planes * (bwd ? a.in_plane : a.out_plane);
  pl.x = (const double*)walk_gather_view(bwd ? a.g : a.x, TPU_DTYPE_F64);
  pl.rs = bwd ? NULL : (const double*)walk_gather_view(a.rs, TPU_DTYPE_F64);
  pl.ix = bwd ? (const int64_t*)walk_gather_view(a.idx, TPU_DTYPE_I64) : NULL;
  pl.out = (double*)malloc(sizeof(double) * (size_t)(outn > 0 ? outn : 1));
  pl.oidx = bwd ? NULL : (int64_t*)malloc(sizeof(int64_t) * (size_t)(outn > 0 ? outn : 1));
  pl.bad = (int64_t*)calloc((size_t)(a.planes > 0 ? a.planes : 1), sizeof(int64_t));
  tpu_status_t s = TPU_OK;
  if (!pl.x || !pl.out || !pl.bad || (bwd ? !pl.ix : (!pl.rs || !pl.oidx))) {
    s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "no host memory for fractional_max_pool");
    goto done;
  }
  if (outn > 0) {
    int64_t win = a.k[0] * a.k[1] * (a.impl->sd == 3 ? a.k[2] : 1);
    int64_t work = (bwd ? a.out_plane : a.out_plane * win) + 1;
    int64_t grain = work >= 16384 ? 1 : 16384 / work;
    tpu_parallel_for(a.planes, grain, bwd ? fmp_backward_planes : fmp_forward_planes, &pl);
  }
  for (int64_t p = 0; p < a.planes && s == TPU_OK; ++p) {
    if (pl.bad[p] == 1) s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "no host memory");
    if (pl.bad[p] == 2)
      s = tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                          "fractional_max_pool%dd_backward(): index out of range of the input "
                          "plane", a.impl->sd);
  }
  if (s != TPU_OK) goto done;
  walk_scatter_view(&node->outputs[0], pl.out, TPU_DTYPE_F64);
  if (!bwd) walk_scatter_view(&node->outputs[1], pl.oidx, TPU_DTYPE_I64);
done:
  free((void*)pl.x), free((void*)pl.rs), free((void*)pl.ix), free(pl.out), free(pl.oidx);
  free(pl.bad);
  return s;
}

/* ---- the reference: one element at a time from the views ----------------------------- */

/* Offset of element (plane p, spatial position pos[sd]) in a view of self's layout. */
static int64_t fmp_off(const fmp_args_t* a, const tpu_view_t* v, int64_t p, const int64_t* pos) {
  int32_t sd = a->impl->sd, lead = v->ndim - sd;
  int64_t off = 0;
  if (lead == 2) off += (p / a->c) * v->strides[0] + (p % a->c) * v->strides[1];
  else off += p * v->strides[0];
  for (int32_t s = 0; s < sd; ++s) off += pos[s] * v->strides[lead + s];
  return off;
}

/* Row-major position of flat index q over sizes[sd]. */
static void fmp_unflat(int64_t q, const int64_t* sizes, int32_t sd, int64_t* pos) {
  for (int32_t s = sd - 1; s >= 0; --s) {
    pos[s] = q % sizes[s];
    q /= sizes[s];
  }
}

tpu_status_t tpu_fractional_max_pool_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                               tpu_exec_ctx_t* ctx);
tpu_status_t tpu_fractional_max_pool_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                               tpu_exec_ctx_t* ctx) {
  (void)ctx;
  fmp_args_t a;
  TPU_RETURN_IF_ERROR(fmp_parse(def, node, &a));
  const int32_t sd = a.impl->sd;
  const tpu_dtype_t dt = a.x->dtype;
  const tpu_view_t* out = &node->outputs[0];
  int64_t pos[3], win[3], start[3][64];
  if (a.impl->backward) {
    for (int64_t p = 0; p < a.planes; ++p) {
      for (int64_t e = 0; e < a.in_plane; ++e) {
        fmp_unflat(e, a.isz, sd, pos);
        view_set_f64(out, fmp_off(&a, out, p, pos), 0.0);
      }
      for (int64_t q = 0; q < a.out_plane; ++q) {
        fmp_unflat(q, a.osz, sd, pos);
        int64_t i = view_get_i64(a.idx, fmp_off(&a, a.idx, p, pos));
        double gv = view_get_f64(a.g, fmp_off(&a, a.g, p, pos));
        if (i < 0 || i >= a.in_plane) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "bad index");
        fmp_unflat(i, a.isz, sd, win);
        int64_t o = fmp_off(&a, out, p, win);
        view_set_f64(out, o, fmp_add(dt, view_get_f64(out, o), gv));
      }
    }
    return TPU_OK;
  }
  for (int32_t s = 0; s < sd; ++s)
    if (a.osz[s] > 64) TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "reference: output over 64");
  for (int64_t p = 0; p < a.planes; ++p) {
    int64_t n = p / a.c, c = p % a.c;
    for (int32_t s = 0; s < sd; ++s) {
      int32_t j = sd == 2 ? 1 - s : s; /* the sample of spatial dim s */
      double u = view_get_f64(a.rs, n * a.rs->strides[0] + c * a.rs->strides[1] +
                                        j * a.rs->strides[2]);
      fmp_intervals(dt, u, a.isz[s], a.osz[s], a.k[s], start[s]);
    }
    for (int64_t q = 0; q < a.out_plane; ++q) {
      fmp_unflat(q, a.osz, sd, pos);
      double best = -INFINITY;
      int64_t bi = -1, wn = 1;
      for (int32_t s = 0; s < sd; ++s) wn *= a.k[s];
      for (int64_t e = 0; e < wn; ++e) {
        int64_t flat = 0;
        fmp_unflat(e, a.k, sd, win);
        for (int32_t s = 0; s < sd; ++s) win[s] += start[s][pos[s]];
        for (int32_t s = 0; s < sd; ++s) flat = flat * a.isz[s] + win[s];
        double v = view_get_f64(a.x, fmp_off(&a, a.x, p, win));
        if (bi < 0 || v > best || isnan(v)) best = v, bi = flat;
      }
      view_set_f64(out, fmp_off(&a, out, p, pos), best);
      view_set_i64(&node->outputs[1], fmp_off(&a, &node->outputs[1], p, pos), bi);
    }
  }
  return TPU_OK;
}

static const fmp_impl_t k_f2 = {2, false}, k_b2 = {2, true}, k_f3 = {3, false}, k_b3 = {3, true};

static const tpu_op_def_t k_rows[] = {
    {.name = "fractional_max_pool2d", .inputs = "self,random_samples",
     .attrs = "kernel_size,output_size", .outputs = "output,indices",
     .aten = "fractional_max_pool2d fractional_max_pool2d.output", .kernel = fmp_kernel,
     .infer = fmp_infer, .check = fmp_check, .impl = &k_f2},
    {.name = "fractional_max_pool2d_backward", .inputs = "grad_output,self,indices",
     .attrs = "kernel_size,output_size", .outputs = "grad_input",
     .aten = "fractional_max_pool2d_backward fractional_max_pool2d_backward.grad_input",
     .kernel = fmp_kernel, .infer = fmp_infer, .check = fmp_check, .impl = &k_b2},
    {.name = "fractional_max_pool3d", .inputs = "self,random_samples",
     .attrs = "kernel_size,output_size", .outputs = "output,indices",
     .aten = "fractional_max_pool3d fractional_max_pool3d.output", .kernel = fmp_kernel,
     .infer = fmp_infer, .check = fmp_check, .impl = &k_f3},
    {.name = "fractional_max_pool3d_backward", .inputs = "grad_output,self,indices",
     .attrs = "kernel_size,output_size", .outputs = "grad_input",
     .aten = "fractional_max_pool3d_backward fractional_max_pool3d_backward.grad_input",
     .kernel = fmp_kernel, .infer = fmp_infer, .check = fmp_check, .impl = &k_b3},
};

const tpu_op_family_t tpu_family_fractional_max_pool = {
    "fractional_max_pool", k_rows, (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
