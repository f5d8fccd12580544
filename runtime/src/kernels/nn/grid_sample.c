/* grid_sample.c — grid_sampler_2d (bilinear, nearest, bicubic; padding
 * zeros, border, reflection; align_corners), grid_sampler_3d (trilinear,
 * nearest) and their backward ops (bilinear/trilinear and nearest).
 *
 * Input [N, C, H, W], grid [N, Ho, Wo, 2] (x, y in [-1, 1]), output
 * [N, C, Ho, Wo]; in 3-d [N, C, D, H, W], grid [N, Do, Ho, Wo, 3] (x, y, z).
 * A 2-d op is handled as a 3-d one with D = Do = 1 and no z. A grid point becomes source coordinates as PyTorch computes
 * them (GridSampler.h: unnormalise, then clip or reflect for the padding
 * mode; float arithmetic for float inputs, emulated by rounding each
 * operation), and then a list of taps: flat input indices with weights
 * (in-bounds ones only, which is zero padding). Forward: out = sum w * x.
 * Backward: grad_input[tap] += w * grad_out (a task per (n, c) plane, so no
 * two tasks write one element); grad_grid per point from the bilinear
 * corner values (sum over channels) times d(source)/d(grid) (the
 * unnormalise factor, 0 where clipped, -1 where reflected backwards).
 * Planes are gathered to double buffers, so any strides work.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/kernel_util.h"

enum { BILINEAR = 0, NEAREST = 1, BICUBIC = 2 };
enum { PAD_ZEROS = 0, PAD_BORDER = 1, PAD_REFLECTION = 2 };

typedef struct gs_impl {
  bool backward;
  int dims; /* 2 or 3 */
} gs_impl_t;

typedef struct gs_args {
  const gs_impl_t* impl;
  const tpu_view_t *x, *grid, *g;
  int mode, pad;
  bool align;
  tpu_dtype_t f32; /* the dtype coordinates round to */
  bool mask[2];
  int dims;
  int64_t n, c, d, h, w, dout, ho, wo;
  tpu_view_t shape[2];
} gs_args_t;

static tpu_status_t gs_parse(const tpu_op_def_t* def, const tpu_node_t* node, gs_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->impl = (const gs_impl_t*)def->impl;
  a->x = ku_input(def, node, "input");
  a->grid = ku_input(def, node, "grid");
  if (!a->x || !a->grid) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "expected input and grid");
  const tpu_view_t *x = a->x, *gr = a->grid;
  a->mode = (int)tpu_attr_int(ku_attr(def, node, "interpolation_mode"), -1);
  a->pad = (int)tpu_attr_int(ku_attr(def, node, "padding_mode"), -1);
  a->align = tpu_attr_bool(ku_attr(def, node, "align_corners"), false);
  int k = a->impl->dims;
  a->dims = k;
  if (x->ndim != k + 2 || gr->ndim != k + 2 || gr->sizes[k + 1] != k ||
      gr->sizes[0] != x->sizes[0] || !tpu_dtype_is_floating(x->dtype) || gr->dtype != x->dtype ||
      a->mode < 0 || a->mode > 2 || a->pad < 0 || a->pad > 2 ||
      (a->mode == BICUBIC && (a->impl->backward || k == 3)))
    TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "grid_sampler: no native kernel for these arguments");
  a->n = x->sizes[0];
  a->c = x->sizes[1];
  a->d = k == 3 ? x->sizes[2] : 1;
  a->h = x->sizes[k];
  a->w = x->sizes[k + 1];
  a->dout = k == 3 ? gr->sizes[1] : 1;
  a->ho = gr->sizes[k - 1];
  a->wo = gr->sizes[k];
  if (a->d <= 0 || a->h <= 0 || a->w <= 0)
    TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "grid_sampler: empty input");
  a->f32 = x->dtype;
  tpu_view_t* s = a->shape;
  if (a->impl->backward) {
    a->g = ku_input(def, node, "grad_output");
    bool ok = a->g && a->g->ndim == k + 2 && a->g->dtype == x->dtype;
    for (int i = 0; ok && i < k + 2; ++i)
      ok = a->g->sizes[i] == (i == 0 ? a->n : i == 1 ? a->c : gr->sizes[i - 1]);
    if (!ok) TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "grid_sampler_backward: grad_output shape");
    const tpu_attr_t* m = ku_attr(def, node, "output_mask");
    for (int i = 0; i < 2; ++i)
      a->mask[i] = !(m && m->kind == TPU_ATTR_INTS && i < m->count) || m->u.ints[i];
    s[0] = *x;
    s[1] = *gr;
    for (int i = 0; i < 2; ++i) {
      s[i].addr = 0;
      tpu_view_set_contiguous(&s[i]);
      if (!a->mask[i]) memset(&s[i], 0, sizeof(s[i])), s[i].dtype = TPU_DTYPE_INVALID;
    }
  } else {
    a->mask[0] = true;
    s[0] = *x;
    s[0].addr = 0;
    for (int i = 0; i < k; ++i) s[0].sizes[2 + i] = gr->sizes[1 + i];
    tpu_view_set_contiguous(&s[0]);
  }
  return TPU_OK;
}

static tpu_status_t gs_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* out) {
  gs_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(gs_parse(def, node, &a)));
  out[0] = a.shape[0];
  if (a.impl->backward) out[1] = a.shape[1];
  return TPU_OK;
}

static tpu_status_t gs_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  gs_args_t a;
  return ku_unimplemented(gs_parse(def, node, &a));
}

/* ---- coordinates (GridSampler.h) ----------------------------------------------------- */

/* v rounded to the input dtype: PyTorch CPU computes coordinates and weights
 * in the input's type (one rounding per operation; float64: none). */
static double rnd(tpu_dtype_t dt, double v) {
  if (dt == TPU_DTYPE_F64) return v;
  if (dt == TPU_DTYPE_F32) return (double)(float)v;
  uint16_t h;
  tpu_convert(&h, dt, 1, &v, TPU_DTYPE_F64, 1, 1);
  tpu_convert(&v, TPU_DTYPE_F64, 1, &h, dt, 1, 1);
  return v;
}
#define R(v) rnd(f32, (v))

/* Source coordinate and d(source)/d(grid) of a normalised coordinate. */
static double unnormalize(double c, int64_t size, bool align, tpu_dtype_t f32, double* d) {
  if (align) {
    *d = R((double)(size - 1) / 2);
    return R(R(R(c + 1) / 2) * (double)(size - 1));
  }
  *d = R((double)size / 2);
  return R(R(R(R(c + 1) * (double)size) - 1) / 2);
}

static double clip(double c, int64_t size, double* d) {
  if (c <= 0) {
    *d = 0;
    return 0;
  }
  if (c >= (double)(size - 1)) {
    *d = 0;
    return (double)(size - 1);
  }
  *d = 1;
  return c;
}

static double reflect(double c, int64_t lo2, int64_t hi2, tpu_dtype_t f32, double* d) {
  if (lo2 == hi2) {
    *d = 0;
    return 0;
  }
  double mn = R((double)lo2 / 2), span = R((double)(hi2 - lo2) / 2);
  double in = R(c - mn);
  double sign = 1;
  if (in < 0) {
    sign = -1;
    in = -in;
  }
  double extra = R(fmod(in, span));
  double flips = floor(R(in / span)); /* a double: it may exceed any integer type */
  if (fmod(flips, 2.0) == 0) {
    *d = sign;
    return R(extra + mn);
  }
  *d = -sign;
  return R(R(span - extra) + mn);
}

static double compute_coord(double c, int64_t size, int pad, bool align, tpu_dtype_t f32, double* d) {
  *d = 1;
  double e;
  if (pad == PAD_BORDER) return clip(c, size, d);
  if (pad == PAD_REFLECTION) {
    c = align ? reflect(c, 0, 2 * (size - 1), f32, d) : reflect(c, -1, 2 * size - 1, f32, d);
    double r = clip(c, size, &e);
    *d *= e;
    return r;
  }
  return c;
}

static double source(double c, int64_t size, int pad, bool align, tpu_dtype_t f32, double* d) {
  double du, dc;
  double s = unnormalize(c, size, align, f32, &du);
  s = compute_coord(s, size, pad, align, f32, &dc);
  *d = du * dc;
  return s;
}

static double cubic1(double x, double A, tpu_dtype_t f32) {
  return R(R(R(R(R((A + 2) * x) - (A + 3)) * x) * x) + 1);
}
static double cubic2(double x, double A, tpu_dtype_t f32) {
  return R(R(R(R(R(R(A * x) - R(5 * A)) * x) + R(8 * A)) * x) - R(4 * A));
}

/* Taps of a grid point: up to 16 flat input indices ((z * H + y) * W + x)
 * and weights; also the source coordinates and their d/d(grid). */
typedef struct point {
  int n;
  int64_t idx[16];
  double w[16];
  double ix, iy, iz, dx, dy, dz;
} point_t;

/* A source coordinate as an index: NaN and values far beyond any tensor
 * (where a C cast is undefined) become an index far below 0, which stays
 * out of bounds after the +1 of a neighbouring tap. */
static inline int64_t to_index(double v) {
  return v == v && fabs(v) < 4.6e18 ? (int64_t)v : -((int64_t)1 << 62);
}

static bool in_bounds(int64_t x, int64_t y, int64_t z, const gs_args_t* a) {
  return x >= 0 && x < a->w && y >= 0 && y < a->h && z >= 0 && z < a->d;
}

static void point_taps(const gs_args_t* a, const double* gc, point_t* p) {
  tpu_dtype_t f32 = a->f32;
  int64_t H = a->h, W = a->w;
  double gx = gc[0], gy = gc[1];
  p->n = 0;
  if (a->mode == BICUBIC) { /* 2-d only */
    double du;
    double ix = unnormalize(gx, W, a->align, f32, &du);
    double iy = unnormalize(gy, H, a->align, f32, &du);
    double fx = floor(ix), fy = floor(iy);
    double tx = R(ix - fx), ty = R(iy - fy);
    const double A = -0.75;
    double cx[4] = {cubic2(R(tx + 1), A, f32), cubic1(tx, A, f32), cubic1(R(1 - tx), A, f32),
                    cubic2(R(R(1 - tx) + 1), A, f32)};
    double cy[4] = {cubic2(R(ty + 1), A, f32), cubic1(ty, A, f32), cubic1(R(1 - ty), A, f32),
                    cubic2(R(R(1 - ty) + 1), A, f32)};
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i) {
        double d;
        double sx = compute_coord(fx - 1 + i, W, a->pad, a->align, f32, &d);
        double sy = compute_coord(fy - 1 + j, H, a->pad, a->align, f32, &d);
        int64_t xi = to_index(sx), yi = to_index(sy);
        if (!in_bounds(xi, yi, 0, a)) continue;
        p->idx[p->n] = yi * W + xi;
        p->w[p->n++] = cx[i] * cy[j];
      }
    return;
  }
  bool three = a->dims == 3;
  p->ix = source(gx, W, a->pad, a->align, f32, &p->dx);
  p->iy = source(gy, H, a->pad, a->align, f32, &p->dy);
  p->iz = three ? source(gc[2], a->d, a->pad, a->align, f32, &p->dz) : 0.0;
  if (!three) p->dz = 0.0;
  if (a->mode == NEAREST) {
    int64_t xi = to_index(nearbyint(p->ix)), yi = to_index(nearbyint(p->iy));
    int64_t zi = three ? to_index(nearbyint(p->iz)) : 0;
    if (in_bounds(xi, yi, zi, a)) {
      p->idx[0] = (zi * H + yi) * W + xi;
      p->w[0] = 1;
      p->n = 1;
    }
    return;
  }
  double x0 = floor(p->ix), y0 = floor(p->iy), z0 = floor(p->iz);
  double wx[2] = {R(R(x0 + 1) - p->ix), R(p->ix - x0)};
  double wy[2] = {R(R(y0 + 1) - p->iy), R(p->iy - y0)};
  double wz[2] = {R(R(z0 + 1) - p->iz), R(p->iz - z0)};
  int nz = three ? 2 : 1;
  for (int l = 0; l < nz; ++l)
    for (int j = 0; j < 2; ++j)
      for (int i = 0; i < 2; ++i) {
        int64_t xi = to_index(x0) + i, yi = to_index(y0) + j, zi = three ? to_index(z0) + l : 0;
        if (!in_bounds(xi, yi, zi, a)) continue;
        p->idx[p->n] = (zi * H + yi) * W + xi;
        p->w[p->n++] = three ? R(R(wx[i] * wy[j]) * wz[l]) : R(wx[i] * wy[j]);
      }
}

/* ---- kernels --------------------------------------------------------------------- */

typedef struct plan {
  const gs_args_t* a;
  const tpu_node_t* node;
  walk_t xw, gw, ow;  /* a plane of input, grad_output, output 0 */
  atomic_int failed;
} plan_t;

static void plane_walk(walk_t* w, const tpu_view_t* v) {
  walk_start(w, 1);
  for (int32_t d = 2; d < v->ndim; ++d) walk_push(w, v->sizes[d], &v->strides[d]);
}

/* Grid point o (flat over the output's spatial dims) of batch n: gc[0..dims). */
static void grid_at(const gs_args_t* a, int64_t n, int64_t o, double* gc) {
  const tpu_view_t* g = a->grid;
  int k = a->dims;
  int64_t off = n * g->strides[0];
  for (int i = k; i >= 1; --i) {
    off += (o % g->sizes[i]) * g->strides[i];
    o /= g->sizes[i];
  }
  for (int i = 0; i < k; ++i) gc[i] = view_get_f64(g, off + i * g->strides[k + 1]);
}

/* Forward (out = taps . x) or grad_input (scatter), one (n, c) plane per task. */
static void planes(void* arg, int64_t begin, int64_t end) {
  plan_t* p = (plan_t*)arg;
  const gs_args_t* a = p->a;
  bool bwd = a->impl->backward;
  int64_t ip = a->d * a->h * a->w, op = a->dout * a->ho * a->wo;
  double* buf = (double*)malloc(sizeof(double) * (size_t)(ip + op));
  if (!buf) {
    atomic_store(&p->failed, 1);
    return;
  }
  double *xin = buf, *yo = buf + ip;
  const tpu_view_t* out = &p->node->outputs[0];
  for (int64_t pl = begin; pl < end; ++pl) {
    int64_t n = pl / a->c, c = pl % a->c;
    if (bwd) {
      walk_gather(yo, TPU_DTYPE_F64, view_at(a->g, n * a->g->strides[0] + c * a->g->strides[1]),
                  a->g->dtype, &p->gw, 0, op);
      memset(xin, 0, sizeof(double) * (size_t)ip);
    } else {
      walk_gather(xin, TPU_DTYPE_F64, view_at(a->x, n * a->x->strides[0] + c * a->x->strides[1]),
                  a->x->dtype, &p->xw, 0, ip);
    }
    for (int64_t o = 0; o < op; ++o) {
        double gc[3];
        grid_at(a, n, o, gc);
        point_t pt;
        point_taps(a, gc, &pt);
        if (bwd) {
          for (int k = 0; k < pt.n; ++k) xin[pt.idx[k]] += pt.w[k] * yo[o];
        } else {
          /* in double, rounded once when stored (the CPU rounds each half-type
           * product and partial sum: tests judge that against float64) */
          double s = 0;
          for (int k = 0; k < pt.n; ++k) s += pt.w[k] * xin[pt.idx[k]];
          yo[o] = s;
        }
      }
    if (bwd)
      walk_scatter(view_at(out, n * out->strides[0] + c * out->strides[1]), out->dtype, &p->ow, 0,
                   xin, TPU_DTYPE_F64, ip);
    else
      walk_scatter(view_at(out, n * out->strides[0] + c * out->strides[1]), out->dtype, &p->ow, 0,
                   yo, TPU_DTYPE_F64, op);
  }
  free(buf);
}

/* grad_grid, one grid point per element (bilinear/trilinear; nearest gives 0). */
static void grid_points(void* arg, int64_t begin, int64_t end) {
  plan_t* p = (plan_t*)arg;
  const gs_args_t* a = p->a;
  const tpu_view_t* gg = &p->node->outputs[1];
  const tpu_view_t *x = a->x, *g = a->g;
  int k = a->dims;
  bool three = k == 3;
  int64_t op = a->dout * a->ho * a->wo;
  for (int64_t e = begin; e < end; ++e) {
    int64_t n = e / op, o = e % op;
    double gi[3] = {0, 0, 0};
    if (a->mode == BILINEAR) {
      double gc[3];
      grid_at(a, n, o, gc);
      point_t pt;
      point_taps(a, gc, &pt);
      double x0 = floor(pt.ix), y0 = floor(pt.iy), z0 = floor(pt.iz);
      double wx[2] = {x0 + 1 - pt.ix, pt.ix - x0}, wy[2] = {y0 + 1 - pt.iy, pt.iy - y0};
      double wz[2] = {three ? z0 + 1 - pt.iz : 1.0, three ? pt.iz - z0 : 0.0};
      const double sg[2] = {-1, 1};
      /* grad_output's and the input's offsets of this point / batch */
      int64_t go_off = n * g->strides[0], r = o;
      for (int i = k + 1; i >= 2; --i) {
        go_off += (r % g->sizes[i]) * g->strides[i];
        r /= g->sizes[i];
      }
      int nz = three ? 2 : 1;
      for (int64_t c = 0; c < a->c; ++c) {
        double go = view_get_f64(g, go_off + c * g->strides[1]);
        if (go == 0) continue;
        for (int l = 0; l < nz; ++l)
          for (int j = 0; j < 2; ++j)
            for (int i = 0; i < 2; ++i) {
              int64_t xi = to_index(x0) + i, yi = to_index(y0) + j, zi = three ? to_index(z0) + l : 0;
              if (!in_bounds(xi, yi, zi, a)) continue;
              int64_t off = n * x->strides[0] + c * x->strides[1] + yi * x->strides[k] +
                            xi * x->strides[k + 1] + (three ? zi * x->strides[2] : 0);
              double v = view_get_f64(x, off) * go;
              gi[0] += v * sg[i] * wy[j] * wz[l];
              gi[1] += v * wx[i] * sg[j] * wz[l];
              if (three) gi[2] += v * wx[i] * wy[j] * sg[l];
            }
      }
      gi[0] *= pt.dx;
      gi[1] *= pt.dy;
      gi[2] *= pt.dz;
    }
    int64_t off = n * gg->strides[0], r = o;
    for (int i = k; i >= 1; --i) {
      off += (r % gg->sizes[i]) * gg->strides[i];
      r /= gg->sizes[i];
    }
    for (int i = 0; i < k; ++i) view_set_f64(gg, off + i * gg->strides[k + 1], gi[i]);
  }
}

static tpu_status_t gs_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  gs_args_t a;
  TPU_RETURN_IF_ERROR(gs_parse(def, node, &a));
  bool bwd = a.impl->backward;
  for (int i = 0; i < (bwd ? 2 : 1); ++i)
    if (a.mask[i] && !views_same_shape(&node->outputs[i], &a.shape[i]))
      TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output %d has the wrong shape", i);
  plan_t p;
  memset(&p, 0, sizeof(p));
  p.a = &a;
  p.node = node;
  atomic_init(&p.failed, 0);
  plane_walk(&p.xw, a.x);
  if (bwd) plane_walk(&p.gw, a.g);
  if (a.mask[0]) plane_walk(&p.ow, &node->outputs[0]);
  int64_t work = a.dout * a.ho * a.wo * 8 + a.d * a.h * a.w;
  if (a.mask[0] && a.n * a.c > 0)
    tpu_parallel_for(a.n * a.c, work >= 16384 ? 1 : 16384 / work, planes, &p);
  if (bwd && a.mask[1]) {
    int64_t pts = a.n * a.dout * a.ho * a.wo, per = 8 * (a.c > 0 ? a.c : 1);
    tpu_parallel_for(pts, per >= 16384 ? 1 : 16384 / per, grid_points, &p);
  }
  if (atomic_load(&p.failed))
    TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for grid_sampler_2d");
  return TPU_OK;
}

static const gs_impl_t k_fwd = {false, 2};
static const gs_impl_t k_bwd = {true, 2};
static const gs_impl_t k_fwd3 = {false, 3};
static const gs_impl_t k_bwd3 = {true, 3};

static const tpu_op_def_t k_rows[] = {
    {.name = "grid_sampler_2d", .inputs = "input,grid",
     .attrs = "interpolation_mode,padding_mode,align_corners", .outputs = "out",
     .aten = "grid_sampler_2d.default grid_sampler_2d.out", .kernel = gs_kernel, .infer = gs_infer,
     .check = gs_check, .impl = &k_fwd},
    {.name = "grid_sampler_2d_backward", .inputs = "grad_output,input,grid",
     .attrs = "interpolation_mode,padding_mode,align_corners,output_mask", .outputs = "out0,out1",
     .aten = "grid_sampler_2d_backward.default grid_sampler_2d_backward.out", .kernel = gs_kernel,
     .infer = gs_infer, .check = gs_check, .impl = &k_bwd},
    {.name = "grid_sampler_3d", .inputs = "input,grid",
     .attrs = "interpolation_mode,padding_mode,align_corners", .outputs = "out",
     .aten = "grid_sampler_3d.default grid_sampler_3d.out", .kernel = gs_kernel, .infer = gs_infer,
     .check = gs_check, .impl = &k_fwd3},
    {.name = "grid_sampler_3d_backward", .inputs = "grad_output,input,grid",
     .attrs = "interpolation_mode,padding_mode,align_corners,output_mask", .outputs = "out0,out1",
     .aten = "grid_sampler_3d_backward.default grid_sampler_3d_backward.out", .kernel = gs_kernel,
     .infer = gs_infer, .check = gs_check, .impl = &k_bwd3},
};

const tpu_op_family_t tpu_family_grid_sample = {"grid_sample", k_rows,
                                                (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
