/* upsample.c — upsample_nearest{1,2,3}d, _upsample_nearest_exact{1,2,3}d,
 * upsample_linear1d, upsample_bilinear2d, upsample_trilinear3d,
 * upsample_bicubic2d, _upsample_bilinear2d_aa, _upsample_bicubic2d_aa
 * (antialiased: PyTorch's normalised triangle / Keys a = -0.5 filters
 * widened by the scale when downsampling), and their backward ops.
 *
 * Every mode is separable: along each spatial dim, output index o reads K
 * input indices with weights ("taps": K = 1 nearest, 2 linear, 4 cubic),
 * computed once per op exactly as PyTorch CPU computes them (the source
 * index in float for float/half inputs and in double for double, nearest
 * always in float; linear and the cubic forward clamp index and weight with
 * guard_index_and_lambda, the cubic backward does not), so the same input
 * pixels are chosen. An output element is the sum over the product of its
 * dims' taps, computed row by row (each depth/height tap adds a weighted input
 * row interpolated along the width); backward scatters grad_output * weights
 * into a zeroed grad_input. Planes ([N, C] pairs) are tasks of tpu_parallel_for: a plane is
 * gathered into a double buffer (any strides), computed, and scattered back.
 *
 * uint8 bilinear / antialiased bilinear / antialiased bicubic (forward) give
 * CPU's uint8 results bit for bit. Found by probing CPU's outputs (no
 * float-then-round rule reproduces them; this one matches every probe):
 * the filter weights of each dim (computed in double, the out-of-range taps
 * dropped and the rest normalised to sum 1) are scaled by 2^p and rounded
 * to integers, p the largest (<= 22) with round(max weight * 2^p) < 2^15;
 * the image is filtered along the width first, then the height (a dim
 * whose size does not change is skipped), each pass summing pixel * weight
 * onto 2^(p-1) in integers, shifting right by p and clamping to [0, 255],
 * so the intermediate image is uint8 too. For plain (not antialiased)
 * bilinear the filter is the unwidened triangle around the source index
 * (align_corners moves the centre by half a pixel). Two argument classes
 * are left to CPU (UNIMPLEMENTED, the fallback runs CPU's kernel): more
 * than 4 channels with an output width of 1, where CPU's values do not
 * follow the rule, and 3 channels to a 1 x 1 output, which CPU rejects
 * with an internal assertion.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/kernel_util.h"
#include "kernels/common/vmath.h" /* VM_SIMD_CLONES */

enum { NEAREST = 0, NEAREST_EXACT, LINEAR, CUBIC, AA_LINEAR, AA_CUBIC };

typedef struct up_impl {
  int mode;
  int dims; /* spatial dims: 1, 2 or 3 */
  bool backward;
} up_impl_t;

typedef struct up_args {
  const up_impl_t* impl;
  const tpu_view_t* in; /* forward: self; backward: grad_output */
  bool align;
  int64_t isz[3], osz[3]; /* spatial sizes of the op's input and output */
  bool has_scale[3];
  double scale[3];
  tpu_view_t shape; /* output 0 */
} up_args_t;

static const char* const k_scale_names[3][3] = {
    {"scales", NULL, NULL}, {"scales_h", "scales_w", NULL}, {"scales_d", "scales_h", "scales_w"}};

static tpu_status_t up_parse(const tpu_op_def_t* def, const tpu_node_t* node, up_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->impl = (const up_impl_t*)def->impl;
  int k = a->impl->dims;
  a->in = ku_input(def, node, a->impl->backward ? "grad_output" : "self");
  if (!a->in) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "expected an input tensor");
  const tpu_view_t* x = a->in;
  int mode = a->impl->mode;
  bool u8_filter = mode == LINEAR ? k == 2 : (mode == AA_LINEAR || mode == AA_CUBIC);
  bool ok_dtype = tpu_dtype_is_floating(x->dtype) ||
                  (x->dtype == TPU_DTYPE_U8 && !a->impl->backward &&
                   (mode <= NEAREST_EXACT || u8_filter));
  if (!ok_dtype || x->ndim != k + 2)
    TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "upsample: no native kernel for this input");
  const tpu_attr_t* os = ku_attr(def, node, "output_size");
  if (!os || os->kind != TPU_ATTR_INTS || os->count != k)
    TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "upsample: output_size expected");
  a->align = tpu_attr_bool(ku_attr(def, node, "align_corners"), false);
  for (int d = 0; d < k; ++d) {
    a->osz[d] = os->u.ints[d];
    const tpu_attr_t* s = ku_attr(def, node, k_scale_names[k - 1][d]);
    a->has_scale[d] = s && (s->kind == TPU_ATTR_FLOAT || s->kind == TPU_ATTR_INT);
    a->scale[d] = tpu_attr_float(s, 0.0);
  }
  tpu_view_t* s = &a->shape;
  *s = *x;
  s->addr = 0;
  if (a->impl->backward) {
    const tpu_attr_t* is = ku_attr(def, node, "input_size");
    if (!is || is->kind != TPU_ATTR_INTS || is->count != k + 2)
      TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "upsample_backward: input_size expected");
    if (x->sizes[0] != is->u.ints[0] || x->sizes[1] != is->u.ints[1])
      TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "upsample_backward: grad_output shape");
    for (int d = 0; d < k; ++d) {
      a->isz[d] = is->u.ints[2 + d];
      if (x->sizes[2 + d] != a->osz[d])
        TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "upsample_backward: grad_output shape");
      s->sizes[2 + d] = a->isz[d];
    }
  } else {
    for (int d = 0; d < k; ++d) {
      a->isz[d] = x->sizes[2 + d];
      s->sizes[2 + d] = a->osz[d];
    }
  }
  for (int d = 0; d < k; ++d)
    if (a->isz[d] <= 0 || a->osz[d] <= 0)
      TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "upsample: empty spatial sizes");
  if (x->dtype == TPU_DTYPE_U8 && mode > NEAREST_EXACT) {
    int64_t c = x->sizes[1];
    if ((c > 4 && a->osz[1] == 1) || (c == 3 && a->osz[0] == 1 && a->osz[1] == 1))
      TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "upsample: CPU's own uint8 result for this shape");
  }
  ku_layout_like(s, x);
  return TPU_OK;
}

static tpu_status_t up_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* out) {
  up_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(up_parse(def, node, &a)));
  out[0] = a.shape;
  return TPU_OK;
}

static tpu_status_t up_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  up_args_t a;
  return ku_unimplemented(up_parse(def, node, &a));
}

/* ---- taps ------------------------------------------------------------------------ */

/* Rounds to float when PyTorch computes in float (emulates float arithmetic:
 * one double operation rounded to float is the float operation). */
#define R(x) (f32 ? (double)(float)(x) : (double)(x))

static double area_scale(int64_t in, int64_t out, bool align, bool has, double sc, bool f32) {
  if (align) return out > 1 ? R((double)(in - 1) / (double)(out - 1)) : 0.0;
  if (has && sc > 0) return R(1.0 / sc);
  return R((double)in / (double)out);
}

static double source_index(double scale, int64_t o, bool align, bool cubic, bool f32) {
  if (align) return R(scale * (double)o);
  double src = R(R(scale * R((double)o + 0.5)) - 0.5);
  return (!cubic && src < 0) ? 0.0 : src;
}

/* guard_index_and_lambda */
static void guard(double real, int64_t in, int64_t* idx, double* lambda, bool f32) {
  int64_t i = (int64_t)floor(real);
  if (i < 0) i = 0;
  if (i > in - 1) i = in - 1;
  double l = R(real - (double)i);
  *idx = i;
  *lambda = l < 0 ? 0 : (l > 1 ? 1 : l);
}

static double cubic1(double x, double A, bool f32) {
  return R(R(R(R(R((A + 2) * x) - (A + 3)) * x) * x) + 1);
}
static double cubic2(double x, double A, bool f32) {
  return R(R(R(R(R(R(A * x) - R(5 * A)) * x) + R(8 * A)) * x) - R(4 * A));
}

/* Antialiased modes (_upsample_*_aa): PyTorch's separable filters. */
static double aa_support(const up_args_t* a, int d, bool f32) {
  double scale = area_scale(a->isz[d], a->osz[d], a->align, a->has_scale[d], a->scale[d], f32);
  double interp = a->impl->mode == AA_LINEAR ? 2.0 : 4.0;
  return R(scale >= 1.0 ? (interp * 0.5) * scale : interp * 0.5);
}

static double aa_filter(int mode, double x) {
  if (x < 0.0) x = -x;
  if (mode == AA_LINEAR || mode == LINEAR) return x < 1.0 ? 1.0 - x : 0.0;
  const double A = -0.5;
  if (x < 1.0) return ((A + 2.0) * x - (A + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * A;
  return 0.0;
}

/* Taps per output element of the op (the most of any dim). */
static int taps_of(const up_args_t* a, bool f32) {
  int mode = a->impl->mode;
  if (mode <= NEAREST_EXACT) return 1;
  if (mode == LINEAR) return 2;
  if (mode == CUBIC) return 4;
  int k = 1;
  for (int d = 0; d < a->impl->dims; ++d) {
    int m = (int)ceil(aa_support(a, d, f32)) * 2 + 1;
    if (m > k) k = m;
  }
  return k;
}

/* Antialiased taps of output o along dim d (K slots, unused ones weight 0).
 * mode LINEAR (uint8 bilinear): the plain triangle, not widened when
 * downsampling, centred on the align_corners source index. */
static void aa_taps(const up_args_t* a, int d, bool f32, int K, int64_t o, int64_t* ix,
                    double* wt) {
  int64_t in = a->isz[d];
  bool plain = a->impl->mode == LINEAR;
  double delta = plain && a->align ? 0.5 : 0.0;
  double scale = area_scale(in, a->osz[d], a->align, a->has_scale[d], a->scale[d], f32);
  double support = plain ? 1.0 : aa_support(a, d, f32);
  double center = R(scale * ((double)o + 0.5 - delta));
  double invscale = !plain && scale >= 1.0 ? R(1.0 / scale) : 1.0;
  int64_t xmin = (int64_t)(R(center - support) + 0.5 + delta);
  if (xmin < 0) xmin = 0;
  int64_t xmax = (int64_t)(R(center + support) + 0.5 + delta);
  int64_t xsize = (xmax < in ? xmax : in) - xmin;
  if (xsize < 0) xsize = 0;
  if (xsize > K) xsize = K;
  double total = 0.0;
  for (int64_t j = 0; j < K; ++j) {
    ix[j] = j < xsize ? xmin + j : (xmin < in ? xmin : in - 1);
    wt[j] = j < xsize
                ? R(aa_filter(a->impl->mode,
                              R((R((double)(j + xmin) - center) + 0.5 - delta) * invscale)))
                : 0.0;
    total = R(total + wt[j]);
  }
  if (total != 0.0)
    for (int64_t j = 0; j < xsize; ++j) wt[j] = R(wt[j] / total);
}

/* Taps of one spatial dim: idx/w[o * K + j]. */
static void make_taps(const up_args_t* a, int d, bool f32_compute, int K, int64_t* idx,
                      double* w) {
  int mode = a->impl->mode;
  int64_t in = a->isz[d], out = a->osz[d];
  bool has = a->has_scale[d];
  double sc = a->scale[d];
  for (int64_t o = 0; o < out; ++o) {
    int64_t* ix = idx + o * K;
    double* wt = w + o * K;
    if (mode == AA_LINEAR || mode == AA_CUBIC || (mode == LINEAR && a->in->dtype == TPU_DTYPE_U8)) {
      aa_taps(a, d, f32_compute, K, o, ix, wt);
      continue;
    }
    if (mode == NEAREST || mode == NEAREST_EXACT) {
      bool f32 = true;
      double scale = (has && sc > 0) ? R(1.0 / sc) : R((double)in / (double)out);
      int64_t i;
      if (mode == NEAREST) {
        if (out == in) i = o;
        else if (out == 2 * in) i = o >> 1;
        else i = (int64_t)floor(R((double)o * scale));
      } else {
        i = (int64_t)floor(R(R((double)o + 0.5) * scale));
      }
      ix[0] = i < in - 1 ? i : in - 1;
      wt[0] = 1.0;
      continue;
    }
    bool f32 = f32_compute;
    double scale = area_scale(in, out, a->align, has, sc, f32);
    if (mode == LINEAR) {
      if (out == in) {
        ix[0] = ix[1] = o;
        wt[0] = 1.0;
        wt[1] = 0.0;
        continue;
      }
      double real = source_index(scale, o, a->align, false, f32), l1;
      int64_t i0;
      guard(real, in, &i0, &l1, f32);
      ix[0] = i0;
      ix[1] = i0 + (i0 < in - 1 ? 1 : 0);
      wt[0] = R(1.0 - l1);
      wt[1] = l1;
      continue;
    }
    /* Cubic (A = -0.75). */
    double real = source_index(scale, o, a->align, true, f32), t;
    int64_t i0;
    i0 = (int64_t)floor(real);
    t = R(real - (double)i0);
    const double A = -0.75;
    wt[0] = cubic2(R(t + 1.0), A, f32);
    wt[1] = cubic1(t, A, f32);
    wt[2] = cubic1(R(1.0 - t), A, f32);
    wt[3] = cubic2(R(R(1.0 - t) + 1.0), A, f32);
    for (int j = 0; j < 4; ++j) {
      int64_t i = i0 - 1 + j;
      ix[j] = i < 0 ? 0 : (i > in - 1 ? in - 1 : i);
    }
  }
}

/* ---- the kernel ------------------------------------------------------------------- */

typedef struct plan {
  const up_args_t* a;
  const tpu_view_t* out;
  int k, K;
  int64_t ip, op;        /* elements per input / output plane (of the op) */
  int64_t isz[3], osz[3]; /* padded to 3 dims (leading 1s) */
  int64_t* idx[3];
  double* w[3];
  walk_t iw, ow;         /* a plane of the op's input (x or grad_output) / output */
  const tpu_view_t* src; /* the view read (plane walk iw) */
  atomic_int failed;     /* a task found no host memory */
  bool u8;               /* uint8 filter modes: integer weights q, shift prec */
  int32_t* q[3];
  int prec[3];
} plan_t;

/* uint8 filter modes: the weights of a dim as integers (see the header). */
static int u8_quantize(const double* w, int64_t n, int32_t* q) {
  double wmax = 0.0;
  for (int64_t i = 0; i < n; ++i) wmax = w[i] > wmax ? w[i] : wmax;
  int prec = 0;
  while (prec < 22 && (int64_t)(0.5 + wmax * (double)(1 << (prec + 1))) < (1 << 15)) ++prec;
  for (int64_t i = 0; i < n; ++i) {
    double v = w[i] * (double)(1 << prec);
    q[i] = (int32_t)(v < 0 ? -floor(0.5 - v) : floor(0.5 + v));
  }
  return prec;
}

/* uint8 filter modes, in two parallel phases over rows: the width pass
 * (input rows -> rows of oW, into `mid` when a height pass follows, else
 * straight into the output), then the height pass (output rows, from `mid`
 * or straight from the input). Each output element is
 * clamp((2^(prec-1) + sum_j pixel_j q_j) >> prec, 0, 255). */
typedef struct u8_run {
  const plan_t* p;
  const uint8_t* in; /* element (n, c, h, w) at in + n is0 + c is1 + h is2 + w is3 */
  uint8_t* out;      /* likewise with os0..os3 */
  int64_t is[4], os[4];
  int64_t C, iH, iW, oH, oW;
  uint8_t* mid; /* N*C*iH rows of oW, or NULL */
  int32_t *ixw, *ixh;
  int32_t* q16; /* 2 < K <= 16: each output's width weights in 16 lanes (64-byte aligned) */
  atomic_int failed;
} u8_run_t;

static inline uint8_t u8_px(int32_t acc, int prec) {
  acc = acc < 0 ? 0 : acc >> prec;
  return (uint8_t)(acc > 255 ? 255 : acc);
}

/* The width pass. Each output's taps are consecutive input pixels from
 * its first index (the filter's support), so for 2 < K <= 16 one 16-byte
 * load from a zero-padded copy of the row times the output's 16 weights
 * (zero past K) gives the sum; small K uses the taps one by one. */
typedef int32_t u8_v16i __attribute__((vector_size(64)));
typedef int32_t u8_v8i __attribute__((vector_size(32)));
typedef int32_t u8_v4i __attribute__((vector_size(16)));
typedef uint8_t u8_v16b __attribute__((vector_size(16)));

VM_SIMD_CLONES static void u8_width_rows(void* arg, int64_t begin, int64_t end) {
  u8_run_t* r = (u8_run_t*)arg;
  const int K = r->p->K, prec = r->p->prec[2];
  const int32_t* ix = r->ixw;
  const int32_t* q = r->p->q[2];
  const int32_t bias = (int32_t)1 << (prec - 1);
  const int64_t s = r->is[3], iW = r->iW, oW = r->oW;
  const bool wide = K > 2 && K <= 16;
  uint8_t* rb = wide ? (uint8_t*)calloc((size_t)(iW + 16), 1) : NULL;
  if (wide && !rb) {
    atomic_store(&r->failed, 1);
    return;
  }
  for (int64_t row = begin; row < end; ++row) {
    int64_t h = row % r->iH, pl = row / r->iH, n = pl / r->C, c = pl % r->C;
    const uint8_t* irow = r->in + n * r->is[0] + c * r->is[1] + h * r->is[2];
    uint8_t* orow;
    int64_t os;
    if (r->mid) {
      orow = r->mid + row * oW;
      os = 1;
    } else {
      orow = r->out + n * r->os[0] + c * r->os[1] + h * r->os[2];
      os = r->os[3];
    }
    if (wide) {
      if (s == 1)
        memcpy(rb, irow, (size_t)iW);
      else
        for (int64_t x = 0; x < iW; ++x) rb[x] = irow[x * s];
      const u8_v16i* qv = (const u8_v16i*)r->q16;
      for (int64_t o = 0; o < oW; ++o) {
        u8_v16b px;
        memcpy(&px, rb + ix[o * K], sizeof(px));
        u8_v16i prod = __builtin_convertvector(px, u8_v16i) * qv[o];
        u8_v8i lo, hi;
        memcpy(&lo, &prod, sizeof(lo));
        memcpy(&hi, (const char*)&prod + sizeof(lo), sizeof(hi));
        lo += hi;
        u8_v4i a4, b4;
        memcpy(&a4, &lo, sizeof(a4));
        memcpy(&b4, (const char*)&lo + sizeof(a4), sizeof(b4));
        a4 += b4;
        orow[o * os] = u8_px(bias + a4[0] + a4[1] + a4[2] + a4[3], prec);
      }
      continue;
    }
    if (K == 2) {
      for (int64_t o = 0; o < oW; ++o) {
        int32_t acc = bias + (int32_t)irow[ix[2 * o] * s] * q[2 * o] +
                      (int32_t)irow[ix[2 * o + 1] * s] * q[2 * o + 1];
        orow[o * os] = u8_px(acc, prec);
      }
    } else {
      for (int64_t o = 0; o < oW; ++o) {
        int32_t acc = bias;
        for (int j = 0; j < K; ++j) acc += (int32_t)irow[ix[o * K + j] * s] * q[o * K + j];
        orow[o * os] = u8_px(acc, prec);
      }
    }
  }
  free(rb);
}

VM_SIMD_CLONES static void u8_height_rows(void* arg, int64_t begin, int64_t end) {
  u8_run_t* r = (u8_run_t*)arg;
  const int K = r->p->K, prec = r->p->prec[1];
  const int32_t* ix = r->ixh;
  const int32_t* q = r->p->q[1];
  const int32_t bias = (int32_t)1 << (prec - 1);
  const int64_t oW = r->oW;
  int32_t* acc = (int32_t*)malloc(sizeof(int32_t) * (size_t)oW);
  if (!acc) {
    atomic_store(&r->failed, 1);
    return;
  }
  for (int64_t row = begin; row < end; ++row) {
    int64_t oh = row % r->oH, pl = row / r->oH, n = pl / r->C, c = pl % r->C;
    uint8_t* orow = r->out + n * r->os[0] + c * r->os[1] + oh * r->os[2];
    if (K == 2 && r->mid && r->os[3] == 1) { /* bilinear from mid: two rows, one pass */
      const uint8_t* s0 = r->mid + (pl * r->iH + ix[2 * oh]) * oW;
      const uint8_t* s1 = r->mid + (pl * r->iH + ix[2 * oh + 1]) * oW;
      const int32_t q0 = q[2 * oh], q1 = q[2 * oh + 1];
      for (int64_t x = 0; x < oW; ++x)
        orow[x] = u8_px(bias + (int32_t)s0[x] * q0 + (int32_t)s1[x] * q1, prec);
      continue;
    }
    for (int64_t x = 0; x < oW; ++x) acc[x] = bias;
    for (int j = 0; j < K; ++j) {
      const int32_t qj = q[oh * K + j];
      if (qj == 0) continue;
      const int64_t h = ix[oh * K + j];
      if (r->mid) {
        const uint8_t* src = r->mid + (pl * r->iH + h) * oW;
        for (int64_t x = 0; x < oW; ++x) acc[x] += (int32_t)src[x] * qj;
      } else {
        const uint8_t* src = r->in + n * r->is[0] + c * r->is[1] + h * r->is[2];
        const int64_t s = r->is[3];
        if (s == 1)
          for (int64_t x = 0; x < oW; ++x) acc[x] += (int32_t)src[x] * qj;
        else
          for (int64_t x = 0; x < oW; ++x) acc[x] += (int32_t)src[x * s] * qj;
      }
    }
    const int64_t os = r->os[3];
    if (os == 1)
      for (int64_t x = 0; x < oW; ++x) orow[x] = u8_px(acc[x], prec);
    else
      for (int64_t x = 0; x < oW; ++x) orow[x * os] = u8_px(acc[x], prec);
  }
  free(acc);
}

static void u8_copy_rows(void* arg, int64_t begin, int64_t end) {
  const u8_run_t* r = (const u8_run_t*)arg;
  for (int64_t row = begin; row < end; ++row) {
    int64_t h = row % r->iH, pl = row / r->iH, n = pl / r->C, c = pl % r->C;
    const uint8_t* src = r->in + n * r->is[0] + c * r->is[1] + h * r->is[2];
    uint8_t* dst = r->out + n * r->os[0] + c * r->os[1] + h * r->os[2];
    for (int64_t x = 0; x < r->iW; ++x) dst[x * r->os[3]] = src[x * r->is[3]];
  }
}

static tpu_status_t u8_filter(const plan_t* p) {
  const tpu_view_t *in = p->src, *out = p->out;
  u8_run_t r;
  memset(&r, 0, sizeof(r));
  r.p = p;
  r.in = (const uint8_t*)view_at(in, 0);
  r.out = (uint8_t*)view_at(out, 0);
  for (int d = 0; d < 4; ++d) r.is[d] = in->strides[d], r.os[d] = out->strides[d];
  r.C = in->sizes[1];
  r.iH = p->isz[1], r.iW = p->isz[2], r.oH = p->osz[1], r.oW = p->osz[2];
  const int64_t planes = in->sizes[0] * in->sizes[1], K = p->K;
  const bool need_w = r.oW != r.iW, need_h = r.oH != r.iH;
  atomic_init(&r.failed, 0);
  r.ixw = (int32_t*)malloc(sizeof(int32_t) * (size_t)((r.oW + r.oH) * K));
  if (need_w && need_h) r.mid = (uint8_t*)malloc((size_t)(planes * r.iH * r.oW));
  if (!r.ixw || (need_w && need_h && !r.mid)) {
    free(r.ixw);
    free(r.mid);
    TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for upsample");
  }
  r.ixh = r.ixw + r.oW * K;
  void* q16 = NULL;
  if (need_w && K > 2 && K <= 16) {
    if (posix_memalign(&q16, 64, sizeof(int32_t) * 16 * (size_t)r.oW) != 0) q16 = NULL;
    if (!q16) {
      free(r.ixw);
      free(r.mid);
      TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for upsample");
    }
    r.q16 = (int32_t*)q16;
    memset(r.q16, 0, sizeof(int32_t) * 16 * (size_t)r.oW);
    /* the taps run from ix[o K] on; a slot past the row's end has weight 0 */
    for (int64_t o = 0; o < r.oW; ++o)
      for (int j = 0; j < K; ++j) r.q16[o * 16 + j] = p->q[2][o * K + j];
  }
  for (int64_t i = 0; i < r.oW * K; ++i) r.ixw[i] = (int32_t)p->idx[2][i];
  for (int64_t i = 0; i < r.oH * K; ++i) r.ixh[i] = (int32_t)p->idx[1][i];
  if (need_w) {
    int64_t work = r.oW * K + 1;
    tpu_parallel_for(planes * r.iH, work >= 16384 ? 1 : 16384 / work, u8_width_rows, &r);
  }
  if (need_h) {
    int64_t work = r.oW * K + 1;
    tpu_parallel_for(planes * r.oH, work >= 16384 ? 1 : 16384 / work, u8_height_rows, &r);
  }
  if (!need_w && !need_h)
    tpu_parallel_for(planes * r.iH, r.iW >= 16384 ? 1 : 16384 / (r.iW + 1), u8_copy_rows, &r);
  free(r.ixw);
  free(r.mid);
  free(q16);
  if (atomic_load(&r.failed))
    TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for upsample rows");
  return TPU_OK;
}

static void plane_walk(walk_t* w, const tpu_view_t* v) {
  walk_start(w, 1);
  for (int32_t d = 2; d < v->ndim; ++d) walk_push(w, v->sizes[d], &v->strides[d]);
}

static void planes(void* arg, int64_t begin, int64_t end) {
  plan_t* p = (plan_t*)arg;

  const up_args_t* a = p->a;
  bool bwd = a->impl->backward;
  /* Buffers: the "small" side is the op's input for forward, grad_input for backward. */
  int64_t n_src = bwd ? p->op : p->ip, n_dst = bwd ? p->ip : p->op;
  /* forward 2-d: K width-interpolated rows and their row numbers */
  int64_t n_cache = (int64_t)p->K * (p->osz[2] + 1);
  double* src = (double*)malloc(sizeof(double) * (size_t)(n_src + n_dst + n_cache));
  if (!src) {
    atomic_store(&p->failed, 1);
    return;
  }
  double* dst = src + n_src;
  int K = p->K;
  int Kd = p->k >= 3 ? K : 1, Kh = p->k >= 2 ? K : 1;
  for (int64_t pl = begin; pl < end; ++pl) {
    int64_t n = pl / a->in->sizes[1], c = pl % a->in->sizes[1];
    const tpu_view_t* sv = p->src;
    walk_gather(src, TPU_DTYPE_F64, view_at(sv, n * sv->strides[0] + c * sv->strides[1]),
                sv->dtype, &p->iw, 0, n_src);
    if (bwd) memset(dst, 0, sizeof(double) * (size_t)n_dst);
    int64_t oD = p->osz[0], oH = p->osz[1], oW = p->osz[2];
    int64_t iH = p->isz[1], iW = p->isz[2];
    const int64_t *xd = p->idx[0], *xh = p->idx[1], *xw = p->idx[2];
    const double *wd = p->w[0], *wh = p->w[1], *ww = p->w[2];
    if (!bwd && p->k == 2 && K > 1) {
      /* 2-d: an input row interpolated along the width serves every output row
       * that taps it; such rows are kept in K slots (slot iy % K: the taps of
       * one output row are consecutive rows), so each is computed once. */
      double* cache = dst + n_dst;
      double* tag = cache + (int64_t)K * oW;
      for (int j = 0; j < K; ++j) tag[j] = -1.0;
      for (int64_t oh = 0; oh < oH; ++oh) {
        double* orow = dst + oh * oW;
        const double* rows[2] = {NULL, NULL};
        if (K != 2) memset(orow, 0, sizeof(double) * (size_t)oW);
        for (int a2 = 0; a2 < K; ++a2) {
          double wt = wh[oh * K + a2];
          if (wt == 0.0 && K != 2) continue;
          int64_t iy = xh[oh * K + a2];
          double* hrow = cache + (iy % K) * oW;
          if (tag[iy % K] != (double)iy) {
            const double* irow = src + iy * iW;
            for (int64_t ow = 0; ow < oW; ++ow) {
              double t = 0.0;
              for (int a3 = 0; a3 < K; ++a3) t += irow[xw[ow * K + a3]] * ww[ow * K + a3];
              hrow[ow] = t;
            }
            tag[iy % K] = (double)iy;
          }
          if (K == 2) { /* linear: both rows, combined below in one pass */
            rows[a2] = hrow;
            continue;
          }
          for (int64_t ow = 0; ow < oW; ++ow) orow[ow] += wt * hrow[ow];
        }
        if (K == 2) {
          double w0 = wh[oh * 2], w1 = wh[oh * 2 + 1];
          const double *h0 = rows[0], *h1 = rows[1];
          for (int64_t ow = 0; ow < oW; ++ow) orow[ow] = w0 * h0[ow] + w1 * h1[ow];
        }
      }
      walk_scatter(view_at(p->out, n * p->out->strides[0] + c * p->out->strides[1]),
                   p->out->dtype, &p->ow, 0, dst, TPU_DTYPE_F64, n_dst);
      continue;
    }
    if (!bwd && K == 1) { /* nearest: every output row is one input row, gathered */
      for (int64_t od = 0; od < oD; ++od)
        for (int64_t oh = 0; oh < oH; ++oh) {
          double* orow = dst + (od * oH + oh) * oW;
          const double* irow =
              src + ((p->k >= 3 ? xd[od] * iH : 0) + (p->k >= 2 ? xh[oh] : 0)) * iW;
          for (int64_t ow = 0; ow < oW; ++ow) orow[ow] = irow[xw[ow]];
        }
      walk_scatter(view_at(p->out, n * p->out->strides[0] + c * p->out->strides[1]),
                   p->out->dtype, &p->ow, 0, dst, TPU_DTYPE_F64, n_dst);
      continue;
    }
    /* Row by row: each (depth, height) tap of an output row adds a weighted
     * input row, interpolated along the width (nearest: copied). */
    for (int64_t od = 0; od < oD; ++od)
      for (int64_t oh = 0; oh < oH; ++oh) {
        double* orow = (bwd ? src : dst) + (od * oH + oh) * oW;
        if (!bwd) memset(orow, 0, sizeof(double) * (size_t)oW);
        for (int a1 = 0; a1 < Kd; ++a1) {
          double w1 = p->k >= 3 ? wd[od * K + a1] : 1.0;
          int64_t b1 = p->k >= 3 ? xd[od * K + a1] * iH : 0;
          for (int a2 = 0; a2 < Kh; ++a2) {
            double wt = w1 * (p->k >= 2 ? wh[oh * K + a2] : 1.0);
            double* irow = (bwd ? dst : src) + (b1 + (p->k >= 2 ? xh[oh * K + a2] : 0)) * iW;
            if (wt == 0.0) continue;
            if (K == 1 && !bwd && wt == 1.0) {
              for (int64_t ow = 0; ow < oW; ++ow) orow[ow] += irow[xw[ow]];
            } else if (K == 1 && !bwd) {
              for (int64_t ow = 0; ow < oW; ++ow) orow[ow] += wt * irow[xw[ow]];
            } else if (K == 1) {
              for (int64_t ow = 0; ow < oW; ++ow) irow[xw[ow]] += wt * orow[ow];
            } else if (K == 2 && !bwd) {
              for (int64_t ow = 0; ow < oW; ++ow)
                orow[ow] += wt * (irow[xw[2 * ow]] * ww[2 * ow] +
                                  irow[xw[2 * ow + 1]] * ww[2 * ow + 1]);
            } else if (!bwd) {
              for (int64_t ow = 0; ow < oW; ++ow) {
                double t = 0.0;
                for (int a3 = 0; a3 < K; ++a3) t += irow[xw[ow * K + a3]] * ww[ow * K + a3];
                orow[ow] += wt * t;
              }
            } else {
              for (int64_t ow = 0; ow < oW; ++ow) {
                double go = wt * orow[ow];
                for (int a3 = 0; a3 < K; ++a3) irow[xw[ow * K + a3]] += go * ww[ow * K + a3];
              }
            }
          }
        }
      }
    walk_scatter(view_at(p->out, n * p->out->strides[0] + c * p->out->strides[1]), p->out->dtype,
                 &p->ow, 0, dst, TPU_DTYPE_F64, n_dst);
  }
  free(src);
}

static tpu_status_t up_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  up_args_t a;
  TPU_RETURN_IF_ERROR(up_parse(def, node, &a));
  if (node->num_outputs < 1 || !views_same_shape(&node->outputs[0], &a.shape))
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output has the wrong shape");
  /* Nothing to write: no tap tables either (an empty batch may still name
   * spatial sizes whose tables no host could hold). With both tensors
   * non-empty, each table is at most K entries per element of a tensor
   * that already exists. */
  if (tpu_view_numel(&node->outputs[0]) == 0) return TPU_OK;
  plan_t p;
  memset(&p, 0, sizeof(p));
  p.a = &a;
  p.out = &node->outputs[0];
  p.src = a.in;
  p.k = a.impl->dims;
  /* uint8: nearest indices in float (make_taps), filter weights in double */
  bool f32 = a.in->dtype != TPU_DTYPE_F64 && a.in->dtype != TPU_DTYPE_U8;
  p.u8 = a.in->dtype == TPU_DTYPE_U8 && a.impl->mode > NEAREST_EXACT;
  p.K = taps_of(&a, f32);
  p.ip = p.op = 1;
  for (int d = 0; d < 3; ++d) {
    int s = d - (3 - p.k);
    p.isz[d] = s >= 0 ? a.isz[s] : 1;
    p.osz[d] = s >= 0 ? a.osz[s] : 1;
    p.ip *= p.isz[d];
    p.op *= p.osz[d];
  }
  /* Tap tables: one entry per output position and tap, per dim; a size no
   * host could hold (or that overflows) is refused before malloc. */
  int64_t ntaps = 0;
  bool too_many = false;
  for (int d = 0; d < p.k; ++d) {
    int64_t t;
    too_many |= __builtin_mul_overflow(a.osz[d], (int64_t)p.K, &t) ||
                __builtin_add_overflow(ntaps, t, &ntaps);
  }
  if (too_many || ntaps > ((int64_t)1 << 32))
    TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "upsample: tap tables of %lld entries do not fit",
                    (long long)ntaps);
  int64_t* idx = (int64_t*)malloc(sizeof(int64_t) * (size_t)ntaps);
  double* w = (double*)malloc(sizeof(double) * (size_t)ntaps);
  int32_t* q = p.u8 ? (int32_t*)malloc(sizeof(int32_t) * (size_t)ntaps) : NULL;
  if (!idx || !w || (p.u8 && !q)) {
    free(idx);
    free(w);
    free(q);
    TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for upsample");
  }
  atomic_init(&p.failed, 0);
  int64_t off = 0;
  for (int d = 0; d < 3; ++d) {
    int s = d - (3 - p.k);
    if (s < 0) continue;
    p.idx[d] = idx + off;
    p.w[d] = w + off;
    make_taps(&a, s, f32, p.K, p.idx[d], p.w[d]);
    if (p.u8) {
      p.q[d] = q + off;
      p.prec[d] = u8_quantize(p.w[d], a.osz[s] * p.K, p.q[d]);
    }
    off += a.osz[s] * p.K;
  }
  /* Half types: PyTorch CPU keeps the cubic weights in the input dtype. */
  if (a.impl->mode == CUBIC && (a.in->dtype == TPU_DTYPE_F16 || a.in->dtype == TPU_DTYPE_BF16)) {
    uint16_t h;
    for (int64_t i = 0; i < ntaps; ++i) {
      tpu_convert(&h, a.in->dtype, 1, &w[i], TPU_DTYPE_F64, 1, 1);
      tpu_convert(&w[i], TPU_DTYPE_F64, 1, &h, a.in->dtype, 1, 1);
    }
  }
  if (p.u8) {
    tpu_status_t st = u8_filter(&p);
    free(idx);
    free(w);
    free(q);
    return st;
  }
  plane_walk(&p.iw, a.in);
  plane_walk(&p.ow, p.out);
  int64_t nplanes = a.in->sizes[0] * a.in->sizes[1];
  int64_t work = (p.ip + p.op) * p.K;
  tpu_parallel_for(nplanes, work >= 16384 ? 1 : 16384 / (work > 0 ? work : 1), planes, &p);
  free(idx);
  free(w);
  free(q);
  if (atomic_load(&p.failed))
    TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for upsample planes");
  return TPU_OK;
}

/* ---- the op table ----------------------------------------------------------------- */

#define IMPL(name, mode, dims)                           \
  static const up_impl_t name##_f = {mode, dims, false}; \
  static const up_impl_t name##_b = {mode, dims, true};
IMPL(n1, NEAREST, 1)
IMPL(n2, NEAREST, 2)
IMPL(n3, NEAREST, 3)
IMPL(e1, NEAREST_EXACT, 1)
IMPL(e2, NEAREST_EXACT, 2)
IMPL(e3, NEAREST_EXACT, 3)
IMPL(l1, LINEAR, 1)
IMPL(l2, LINEAR, 2)
IMPL(l3, LINEAR, 3)
IMPL(c2, CUBIC, 2)
IMPL(a2, AA_LINEAR, 2)
IMPL(b2, AA_CUBIC, 2)

#define ATTRS "output_size,input_size,align_corners,scales,scales_d,scales_h,scales_w"
#define ROWS(name_, aten_, impl_)                                                          \
  {.name = name_, .inputs = "self", .attrs = ATTRS, .outputs = "out",                     \
   .aten = aten_ ".default " aten_ ".out", .kernel = up_kernel, .infer = up_infer,         \
   .check = up_check, .impl = &impl_##_f},                                                \
      {.name = name_ "_backward", .inputs = "grad_output", .attrs = ATTRS,                 \
       .outputs = "grad_input", .aten = aten_ "_backward.default " aten_ "_backward.grad_input", \
       .kernel = up_kernel, .infer = up_infer, .check = up_check, .impl = &impl_##_b}

static const tpu_op_def_t k_rows[] = {
    ROWS("upsample_nearest1d", "upsample_nearest1d", n1),
    ROWS("upsample_nearest2d", "upsample_nearest2d", n2),
    ROWS("upsample_nearest3d", "upsample_nearest3d", n3),
    ROWS("upsample_nearest_exact1d", "_upsample_nearest_exact1d", e1),
    ROWS("upsample_nearest_exact2d", "_upsample_nearest_exact2d", e2),
    ROWS("upsample_nearest_exact3d", "_upsample_nearest_exact3d", e3),
    ROWS("upsample_linear1d", "upsample_linear1d", l1),
    ROWS("upsample_bilinear2d", "upsample_bilinear2d", l2),
    ROWS("upsample_trilinear3d", "upsample_trilinear3d", l3),
    ROWS("upsample_bicubic2d", "upsample_bicubic2d", c2),
    ROWS("upsample_bilinear2d_aa", "_upsample_bilinear2d_aa", a2),
    ROWS("upsample_bicubic2d_aa", "_upsample_bicubic2d_aa", b2),
};

const tpu_op_family_t tpu_family_upsample = {"upsample", k_rows,
                                             (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
