/* norm.c — layer norm and RMS norm, forward and backward: the rows
 * layer_norm (native_layer_norm), layer_norm_backward, rms_norm
 * (_fused_rms_norm) and rms_norm_backward, one kernel for the four.
 *
 * Forward, per row of N elements (in double):
 *   mean = sum(x) / N, var = sum((x - mean)^2) / N, rstd = 1 / sqrt(var + eps)
 *   out  = (x - mean) * rstd * weight + bias
 * Backward, with xhat = (x - mean) * rstd and gw = grad_out * weight:
 *   grad_input  = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
 *   grad_weight = sum over rows of grad_out * xhat,  grad_bias = sum of grad_out
 * (mean and rstd are read from the inputs, as PyTorch does).
 * RMS norm is the same with mean = 0 and no bias: rstd = 1 / sqrt(sum(x^2) /
 * N + eps) (eps None: the compute type's machine epsilon), out = x * rstd *
 * weight, outputs out and rstd (float32 for half inputs); its backward
 * drops the mean(gw) term and gives grad_input and grad_weight.
 *
 * Layout: the leading (row) dims of every view are collapsed into one
 * iterator, so rows of any strides are indexed by a flat position; a row's
 * own elements (the trailing dims) are gathered into double buffers CHUNK at
 * a time with walk_gather, so rows of any length and strides stream through
 * fixed stack buffers: the statistics pass merges per-chunk moments (Chan),
 * then the write pass converts back into the output. Weight and bias are
 * gathered once into double arrays. Rows are spread over tpu_parallel_for.
 * float32 rows that are contiguous (with contiguous float32 weight and bias)
 * take a fast path: the statistics in double straight from the row, the
 * normalisation in float, as PyTorch's CPU kernel computes it. float16 and
 * bfloat16 rows of up to HALF_ROW elements take the same path on a float32
 * copy of each row (widening is exact), rounded once into the output, as
 * PyTorch CPU computes half types in float32; so does the backward
 * (backward_blocks_f32), never through double.
 * grad_weight/grad_bias are column sums: with enough rows, blocks of rows
 * compute grad_input and their own partial column sums in one pass (added up
 * afterwards); with few rows, columns are spread over blocks of COLS columns
 * (each block walks every row) after a row pass for grad_input.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/half_bits.h"
#include "kernels/norm/norm.h"
#include "kernels/common/vmath.h"
#include "kernels/norm/norm_sums.h"

#define CHUNK 1024 /* row elements per gathered chunk */
#define COLS 256   /* columns per grad_weight/grad_bias block */
#define HALF_ROW 4096 /* longest half-type row of the float32 path (stack buffers) */

/* ---- parsing ------------------------------------------------------------------ */

tpu_status_t tpu_norm_parse(const tpu_op_def_t* def, const tpu_node_t* node, norm_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->impl = (const norm_impl_t*)def->impl;
  a->x = ku_input(def, node, "input");
  a->w = ku_input(def, node, "weight");
  a->b = a->impl->rms ? NULL : ku_input(def, node, "bias");
  if (!a->x) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "expected a tensor for 'input'");
  const tpu_view_t* x = a->x;
  const tpu_attr_t* ns = ku_attr(def, node, "normalized_shape");
  int32_t k = (ns && ns->kind == TPU_ATTR_INTS) ? ns->count : 0;
  if (k < 1)
    TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED,
                    "Expected normalized_shape to be at least 1-dimensional");
  bool match = x->ndim >= k;
  for (int32_t i = 0; match && i < k; ++i) match = x->sizes[x->ndim - k + i] == ns->u.ints[i];
  if (!match) TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "input does not end in normalized_shape");
  a->axis = x->ndim - k;
  a->m = 1;
  a->n = 1;
  for (int32_t d = 0; d < x->ndim; ++d) *(d < a->axis ? &a->m : &a->n) *= x->sizes[d];
  if (!tpu_dtype_is_floating(x->dtype))
    TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "layer_norm: no native kernel for %s",
                    tpu_dtype_name(x->dtype));
  if (a->n == 0 && a->m > 0)
    TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "layer_norm: empty normalized_shape");
  const tpu_view_t* params[2] = {a->w, a->b};
  for (int i = 0; i < 2; ++i) {
    if (!params[i]) continue;
    if (params[i]->dtype != x->dtype)
      TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "layer_norm: mixed dtypes");
    if (tpu_view_numel(params[i]) != a->n)
      TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "layer_norm: %s is not of normalized_shape",
                      i ? "bias" : "weight");
  }

  /* Output shapes. */
  tpu_view_t* s = a->shape;
  s[0] = *x;
  s[0].addr = 0;
  s[1].dtype = s[2].dtype = x->dtype;
  s[1].ndim = x->ndim;
  for (int32_t d = 0; d < x->ndim; ++d) s[1].sizes[d] = d < a->axis ? x->sizes[d] : 1;
  s[2].ndim = k;
  for (int32_t i = 0; i < k; ++i) s[2].sizes[i] = ns->u.ints[i];
  if (a->impl->backward) {
    a->g = ku_input(def, node, "grad_out");
    a->mean = ku_input(def, node, "mean");
    a->rstd = ku_input(def, node, "rstd");
    const tpu_view_t* mean = a->impl->rms ? a->rstd : a->mean;
    if (!a->g || !mean || !a->rstd)
      TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "expected grad_out, mean and rstd tensors");
    if (!views_same_shape(a->g, x) || a->g->dtype != x->dtype ||
        !views_same_shape(mean, &s[1]) || !views_same_shape(a->rstd, &s[1]) ||
        !tpu_dtype_is_floating(mean->dtype) || !tpu_dtype_is_floating(a->rstd->dtype))
      TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "layer_norm_backward: unexpected input shapes");
    const tpu_attr_t* mask = ku_attr(def, node, "output_mask");
    for (int i = 0; i < 3; ++i) {
      int j = norm_slot(a->impl, i);
      bool given = mask && mask->kind == TPU_ATTR_INTS && j >= 0 && j < mask->count;
      a->mask[i] = j < 0 ? false : given ? mask->u.ints[j] != 0 : true;
    }
    if (a->impl->rms && (!views_same_shape(a->rstd, &s[1]) || a->mean))
      TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "rms_norm_backward: unexpected rstd");
    s[1] = s[2];
    if (a->w) s[1].dtype = a->w->dtype;
    if (a->b) s[2].dtype = a->b->dtype;
  } else {
    /* rms_norm's eps None: the machine epsilon of the compute type. */
    double eps_none = x->dtype == TPU_DTYPE_F64 ? 2.220446049250313e-16 : 1.1920928955078125e-07;
    a->eps = tpu_attr_float(ku_attr(def, node, "eps"), a->impl->rms ? eps_none : 1e-5);
    s[2] = s[1];
    for (int i = 0; i < 3; ++i) a->mask[i] = true;
    if (a->impl->rms) {
      if (x->dtype == TPU_DTYPE_F16 || x->dtype == TPU_DTYPE_BF16) s[2].dtype = TPU_DTYPE_F32;
      memset(&s[1], 0, sizeof(s[1]));
      s[1].dtype = TPU_DTYPE_INVALID;
      for (int i = 0; i < 3; ++i) a->mask[i] = i != 1;
    }
  }
  for (int i = 0; i < 3; ++i) tpu_view_set_contiguous(&s[i]);
  /* Masked-off gradients are undefined results, as on the CPU. */
  for (int i = 0; (a->impl->backward || a->impl->rms) && i < 3; ++i)
    if (!a->mask[i]) memset(&s[i], 0, sizeof(s[i])), s[i].dtype = TPU_DTYPE_INVALID;
  return TPU_OK;
}

static tpu_status_t norm_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_view_t* out_views) {
  norm_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_norm_parse(def, node, &a)));
  for (int i = 0; i < 3; ++i)
    if (norm_slot(a.impl, i) >= 0) out_views[norm_slot(a.impl, i)] = a.shape[i];
  return TPU_OK;
}

static tpu_status_t norm_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  norm_args_t a;
  return ku_unimplemented(tpu_norm_parse(def, node, &a));
}

/* Row-local (fusion): the forward ops' rows are the dims before the
 * normalized shape, in the input and every output. */
static int32_t norm_rows(const tpu_op_def_t* def, const tpu_node_t* node, uint32_t* out_mask) {
  norm_args_t a;
  *out_mask = 1u;
  if (!ku_ok(tpu_norm_parse(def, node, &a))) return 0;
  return a.impl->backward ? 0 : a.axis;
}

/* ---- the optimised kernels ------------------------------------------------------- */

/* Views of the row iterator. Mean and rstd are outputs forward, inputs backward. */
enum { V_X = 0, V_G, V_OUT, V_MEAN, V_RSTD, NUM_V };

typedef struct plan {
  const norm_args_t* a;
  const tpu_view_t* out[3];
  walk_t rows;          /* leading dims, views as in the enum */
  walk_t xd, gd, od;    /* a row's elements in input, grad_out, output 0 */
  walk_t wd, bd;        /* backward: grad_weight, grad_bias */
  double* w;            /* weight (or NULL) */
  double* b;            /* bias (or NULL) */
  double* mean;         /* backward: per row, in iterator order */
  double* rstd;
  double* part;         /* backward by row blocks: partial column sums */
  int64_t block, nblocks;
  /* Forward fast path: float32 input and output with contiguous rows, and
   * float32 contiguous weight and bias (each may be NULL). */
  bool f32, half; /* half: the same on float32 copies of half-type rows */
  const float *wf, *bf;
  float *wtmp, *btmp; /* float32 copies of half-type weight and bias (owned) */
  float* partf;         /* backward_blocks_f32: partial column sums (or NULL) */
} plan_t;

/* Offsets of row r in the row iterator's views (one merged dim: no division). */
static inline void row_offsets(const plan_t* p, int64_t r, int64_t* offs) {
  if (p->rows.ndim == 1)
    for (int v = 0; v < NUM_V; ++v) offs[v] = r * p->rows.strides[v][0];
  else
    walk_offsets(&p->rows, p->rows.ndim, r, offs);
}

/* Stores a row's mean or rstd: float32 and the half types directly (as
 * tpu_convert rounds a double into them: to float, then to the half type),
 * other dtypes through tpu_convert. */
static inline void set_stat(const tpu_view_t* v, int64_t off, double value) {
  if (v->dtype == TPU_DTYPE_F32)
    *(float*)view_at(v, off) = (float)value;
  else if (v->dtype == TPU_DTYPE_BF16)
    *(uint16_t*)view_at(v, off) = f2bf((float)value);
  else if (v->dtype == TPU_DTYPE_F16)
    *(uint16_t*)view_at(v, off) = f2h((float)value);
  else
    view_set_f64(v, off, value);
}

static inline double get_stat(const tpu_view_t* v, int64_t off) {
  if (v->dtype == TPU_DTYPE_F32) return (double)*(const float*)view_at(v, off);
  if (v->dtype == TPU_DTYPE_BF16) return (double)bf2f(*(const uint16_t*)view_at(v, off), false);
  if (v->dtype == TPU_DTYPE_F16) return (double)h2f(*(const uint16_t*)view_at(v, off), false);
  return view_get_f64(v, off);
}

/* Gathers n elements of row r's block `d` of view v, starting at k. */
static void row_gather(const tpu_view_t* v, int64_t off, const walk_t* d, int64_t k,
                       int64_t n, double* buf) {
  walk_gather(buf, TPU_DTYPE_F64, view_at(v, off), v->dtype, d, k, n);
}

static void forward_rows(void* arg, int64_t begin, int64_t end) {
  const plan_t* p = (const plan_t*)arg;
  const norm_args_t* a = p->a;
  double x[CHUNK];
  int64_t offs[NUM_V], n = a->n;
  for (int64_t r = begin; r < end; ++r) {
    walk_offsets(&p->rows, p->rows.ndim, r, offs);
    double mean = 0.0, m2 = 0.0;
    for (int64_t k = 0; a->impl->rms && k < n; k += CHUNK) {
      int64_t c = n - k < CHUNK ? n - k : CHUNK;
      row_gather(a->x, offs[V_X], &p->xd, k, c, x);
      m2 += ns_sqdev(x, c, 0.0);
    }
    for (int64_t k = 0; !a->impl->rms && k < n; k += CHUNK) {
      int64_t c = n - k < CHUNK ? n - k : CHUNK;
      row_gather(a->x, offs[V_X], &p->xd, k, c, x);
      double s = ns_sum(x, c);
      double cm = s / (double)c;
      double q = ns_sqdev(x, c, cm);
      double delta = cm - mean, tot = (double)(k + c);
      mean += delta * (double)c / tot;
      m2 += q + delta * delta * (double)k * (double)c / tot;
    }
    double rstd = 1.0 / sqrt(m2 / (double)n + a->eps);
    for (int64_t k = 0; k < n; k += CHUNK) {
      int64_t c = n - k < CHUNK ? n - k : CHUNK;
      row_gather(a->x, offs[V_X], &p->xd, k, c, x);
      for (int64_t i = 0; i < c; ++i) {
        double y = (x[i] - mean) * rstd;
        if (p->w) y *= p->w[k + i];
        if (p->b) y += p->b[k + i];
        x[i] = y;
      }
      walk_scatter(view_at(p->out[0], offs[V_OUT]), p->out[0]->dtype, &p->od, k, x,
                   TPU_DTYPE_F64, c);
    }
    if (p->out[1]) view_set_f64(p->out[1], offs[V_MEAN], mean);
    view_set_f64(p->out[2], offs[V_RSTD], rstd);
  }
}

/* The sum of x[0..n) (squares: of (x - shift)^2) in two 16-lane float vectors
 * (GNU vector extension: registers, not a stack array that each iteration
 * stores and reloads), each lane holding n / 32 terms, the lanes (as a tree,
 * ns_lanes32) and the tail added in double. Float lanes keep the error far below the tolerance of
 * PyTorch CPU's own float32 moments. Inlined into forward_rows_f32's clones
 * (two zmm, four ymm or eight xmm registers). */
typedef float norm_f32x16 __attribute__((vector_size(64)));
static inline double lane_sum_f32(const float* x, int64_t n, float shift, bool squares) {
  const int64_t w = 16;
  norm_f32x16 acc0 = {0}, acc1 = {0}, v0, v1;
  int64_t i = 0;
  for (; i + 2 * w <= n; i += 2 * w) {
    memcpy(&v0, x + i, sizeof v0);
    memcpy(&v1, x + i + w, sizeof v1);
    if (squares) {
      v0 -= shift;
      v1 -= shift;
      v0 *= v0;
      v1 *= v1;
    }
    acc0 += v0;
    acc1 += v1;
  }
  float lanes[32];
  memcpy(lanes, &acc0, sizeof acc0);
  memcpy(lanes + w, &acc1, sizeof acc1);
  double s = ns_lanes32(lanes);
  for (; i < n; ++i) {
    double d = (double)x[i] - (squares ? shift : 0.0f);
    s += squares ? d * d : d;
  }
  return s;
}

/* One float32 row: the statistics straight from the row (two passes of
 * lane_sum_f32: the mean, then the squared deviations from it), the
 * normalisation in float. Shared by forward_rows_f32 and the fusion
 * interpreter's row function (tpu_norm_row_f32), so a fused layer norm gives
 * the bits strict eager gives. */
static inline void norm_row_f32(bool rms, int64_t n, double eps, const float* w, const float* b,
                                const float* x, float* y, double* out_mean, double* out_rstd) {
  double mean = 0.0;
  if (!rms) mean = lane_sum_f32(x, n, 0.0f, false) / (double)n;
  double rstd = 1.0 / sqrt(lane_sum_f32(x, n, (float)mean, true) / (double)n + eps);
  const float fm = (float)mean, fr = (float)rstd;
  if (w && b)
    for (int64_t k = 0; k < n; ++k) y[k] = (x[k] - fm) * fr * w[k] + b[k];
  else if (w)
    for (int64_t k = 0; k < n; ++k) y[k] = (x[k] - fm) * fr * w[k];
  else if (b)
    for (int64_t k = 0; k < n; ++k) y[k] = (x[k] - fm) * fr + b[k];
  else
    for (int64_t k = 0; k < n; ++k) y[k] = (x[k] - fm) * fr;
  *out_mean = mean;
  *out_rstd = rstd;
}

/* The float32 fast path of forward_rows, built for AVX-512 and AVX2 as well
 * (VM_SIMD_CLONES): the same arithmetic in the same order, on wider
 * vectors. */
VM_SIMD_CLONES static void forward_rows_f32(void* arg, int64_t begin, int64_t end) {
  const plan_t* p = (const plan_t*)arg;
  const norm_args_t* a = p->a;
  int64_t offs[NUM_V], n = a->n;
  for (int64_t r = begin; r < end; ++r) {
    row_offsets(p, r, offs);
    const float* x = (const float*)view_at(a->x, offs[V_X]);
    float* y = (float*)view_at(p->out[0], offs[V_OUT]);
    double mean, rstd;
    norm_row_f32(a->impl->rms, n, a->eps, p->wf, p->bf, x, y, &mean, &rstd);
    if (p->out[1]) set_stat(p->out[1], offs[V_MEAN], mean);
    set_stat(p->out[2], offs[V_RSTD], rstd);
  }
}

/* A half-type row widened into float32 (exact), and a float32 row rounded
 * once into a half-type one, bit for bit as tpu_convert: bfloat16 inline
 * (half_bits.h), so the loops vectorise in the clones; float16 with F16C
 * instructions in AVX-512 registers when the CPU has them (a NaN fixed up
 * to half_bits.h's quiet NaN, as convert.c does), else by tpu_convert. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define NORM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
NORM_AVX512 static void widen_f16_avx512(float* dst, const uint16_t* h, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
    /* vcvtph2ps keeps a NaN's payload and sets its quiet bit: h2f(h, true) */
    _mm512_mask_storeu_ps(dst + i, k, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, h + i)));
  }
}
NORM_AVX512 static void narrow_f16_avx512(uint16_t* h, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
    __m512 v = _mm512_maskz_loadu_ps(k, src + i);
    __m256i r = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    if (nan) { /* f2h: sign | 0x7e00, no payload */
      __m512i top = _mm512_srli_epi32(_mm512_castps_si512(v), 16);
      __m512i q = _mm512_or_si512(_mm512_and_si512(top, _mm512_set1_epi32(0x8000)),
                                  _mm512_set1_epi32(0x7e00));
      r = _mm256_mask_mov_epi16(r, nan, _mm512_cvtepi32_epi16(q));
    }
    _mm256_mask_storeu_epi16(h + i, k, r);
  }
}
static bool f16_avx512(void) {
  static atomic_int have = -1;
  int v = atomic_load(&have);
  if (v < 0) {
    __builtin_cpu_init();
    v = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl");
    atomic_store(&have, v);
  }
  return v;
}
#else
static bool f16_avx512(void) { return false; }
#endif

static inline void widen_row(float* restrict dst, const void* src, tpu_dtype_t d, int64_t n) {
  if (d != TPU_DTYPE_BF16) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (f16_avx512()) {
      widen_f16_avx512(dst, (const uint16_t*)src, n);
      return;
    }
#endif
    tpu_convert(dst, TPU_DTYPE_F32, 1, src, d, 1, n);
    return;
  }
  const uint16_t* restrict h = (const uint16_t*)src;
  for (int64_t i = 0; i < n; ++i) dst[i] = bf2f(h[i], true);
}

static inline void narrow_row(void* dst, tpu_dtype_t d, const float* restrict src, int64_t n) {
  if (d != TPU_DTYPE_BF16) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (f16_avx512()) {
      narrow_f16_avx512((uint16_t*)dst, src, n);
      return;
    }
#endif
    tpu_convert(dst, d, 1, src, TPU_DTYPE_F32, 1, n);
    return;
  }
  uint16_t* restrict h = (uint16_t*)dst;
  for (int64_t i = 0; i < n; ++i) h[i] = f2bf(src[i]);
}

/* forward_rows_f32 on half-type rows: each row widened into a float32
 * buffer, normalised there, rounded once into the output. */
VM_SIMD_CLONES static void forward_rows_half(void* arg, int64_t begin, int64_t end) {
  const plan_t* p = (const plan_t*)arg;
  const norm_args_t* a = p->a;
  int64_t offs[NUM_V], n = a->n;
  float x[HALF_ROW], y[HALF_ROW];
  for (int64_t r = begin; r < end; ++r) {
    row_offsets(p, r, offs);
    widen_row(x, view_at(a->x, offs[V_X]), a->x->dtype, n);
    double mean, rstd;
    norm_row_f32(a->impl->rms, n, a->eps, p->wf, p->bf, x, y, &mean, &rstd);
    narrow_row(view_at(p->out[0], offs[V_OUT]), p->out[0]->dtype, y, n);
    if (p->out[1]) set_stat(p->out[1], offs[V_MEAN], mean);
    set_stat(p->out[2], offs[V_RSTD], rstd);
  }
}

/* Whether v has dtype `dtype` with its trailing dims from `axis` on contiguous. */
static bool rows_of(const tpu_view_t* v, int32_t axis, tpu_dtype_t dtype) {
  if (!v || v->dtype != dtype) return false;
  int64_t stride = 1;
  for (int32_t d = v->ndim - 1; d >= axis; --d) {
    if (v->sizes[d] != 1 && v->strides[d] != stride) return false;
    stride *= v->sizes[d];
  }
  return true;
}

static bool f32_rows(const tpu_view_t* v, int32_t axis) {
  return rows_of(v, axis, TPU_DTYPE_F32);
}

/* A float32 copy of a half-type parameter (weight or bias) for the half
 * path; NULL in *out when there is no parameter or it is float32 already. */
static tpu_status_t param_f32(const tpu_view_t* v, int64_t n, float** out) {
  *out = NULL;
  if (!v || v->dtype == TPU_DTYPE_F32) return TPU_OK;
  *out = (float*)malloc((size_t)n * sizeof(float));
  if (!*out) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "no host memory for layer_norm");
  tpu_convert(*out, TPU_DTYPE_F32, 1, tpu_view_ptr(v), v->dtype, 1, n);
  return TPU_OK;
}

static tpu_status_t norm_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx);

bool tpu_norm_row_plan(const tpu_op_def_t* def, const tpu_node_t* node, tpu_norm_row_t* out) {
  norm_args_t a;
  if (def->kernel != norm_kernel) return false;
  tpu_status_t s = tpu_norm_parse(def, node, &a);
  if (s != TPU_OK) {
    tpu_status_free(s);
    return false;
  }
  if (a.impl->backward || a.x->dtype != TPU_DTYPE_F32 || a.axis != a.x->ndim - 1 ||
      !f32_rows(a.x, a.axis) || (a.w && !f32_rows(a.w, 0)) || (a.b && !f32_rows(a.b, 0)))
    return false;
  *out = (tpu_norm_row_t){.rms = a.impl->rms,
                          .n = a.n,
                          .eps = a.eps,
                          .w = a.w ? (const float*)tpu_view_ptr(a.w) : NULL,
                          .b = a.b ? (const float*)tpu_view_ptr(a.b) : NULL};
  return true;
}

VM_SIMD_CLONES void tpu_norm_row_f32(const tpu_norm_row_t* p, const float* x, float* y,
                                     double* out_mean, double* out_rstd) {
  norm_row_f32(p->rms, p->n, p->eps, p->w, p->b, x, y, out_mean, out_rstd);
}

static void grad_input_rows(void* arg, int64_t begin, int64_t end) {
  const plan_t* p = (const plan_t*)arg;
  const norm_args_t* a = p->a;
  double x[CHUNK], g[CHUNK];
  int64_t offs[NUM_V], n = a->n;
  for (int64_t r = begin; r < end; ++r) {
    walk_offsets(&p->rows, p->rows.ndim, r, offs);
    double mean = p->mean[r], rstd = p->rstd[r], sg = 0.0, sgx = 0.0;
    for (int64_t k = 0; k < n; k += CHUNK) {
      int64_t c = n - k < CHUNK ? n - k : CHUNK;
      row_gather(a->x, offs[V_X], &p->xd, k, c, x);
      row_gather(a->g, offs[V_G], &p->gd, k, c, g);
      if (p->w)
        for (int64_t i = 0; i < c; ++i) g[i] *= p->w[k + i];
      sg += ns_sum(g, c);
      sgx += ns_dotdev(g, x, c, mean) * rstd;
    }
    sg = a->impl->rms ? 0.0 : sg / (double)n;
    sgx /= (double)n;
    for (int64_t k = 0; k < n; k += CHUNK) {
      int64_t c = n - k < CHUNK ? n - k : CHUNK;
      row_gather(a->x, offs[V_X], &p->xd, k, c, x);
      row_gather(a->g, offs[V_G], &p->gd, k, c, g);
      for (int64_t i = 0; i < c; ++i) {
        double gw = p->w ? g[i] * p->w[k + i] : g[i];
        x[i] = rstd * (gw - sg - (x[i] - mean) * rstd * sgx);
      }
      walk_scatter(view_at(p->out[0], offs[V_OUT]), p->out[0]->dtype, &p->od, k, x,
                   TPU_DTYPE_F64, c);
    }
  }
}

/* Backward over blocks of rows: grad_input (when asked) and, in the same
 * pass, each block's partial column sums for grad_weight/grad_bias
 * (p->part[block] holds n of each), added up afterwards. */
static void backward_blocks(void* arg, int64_t begin, int64_t end) {
  const plan_t* p = (const plan_t*)arg;
  const norm_args_t* a = p->a;
  double x[CHUNK], g[CHUNK];
  int64_t offs[NUM_V], n = a->n;
  for (int64_t blk = begin; blk < end; ++blk) {
    double* dw = p->part + blk * 2 * n;
    double* db = dw + n;
    int64_t r1 = (blk + 1) * p->block < a->m ? (blk + 1) * p->block : a->m;
    for (int64_t r = blk * p->block; r < r1; ++r) {
      walk_offsets(&p->rows, p->rows.ndim, r, offs);
      double mean = p->mean[r], rstd = p->rstd[r], sg = 0.0, sgx = 0.0;
      for (int64_t k = 0; a->mask[0] && k < n; k += CHUNK) {
        int64_t c = n - k < CHUNK ? n - k : CHUNK;
        row_gather(a->x, offs[V_X], &p->xd, k, c, x);
        row_gather(a->g, offs[V_G], &p->gd, k, c, g);
        if (p->w)
          for (int64_t i = 0; i < c; ++i) g[i] *= p->w[k + i];
        sg += ns_sum(g, c);
        sgx += ns_dotdev(g, x, c, mean) * rstd;
      }
      sg = a->impl->rms ? 0.0 : sg / (double)n;
      sgx /= (double)n;
      for (int64_t k = 0; k < n; k += CHUNK) {
        int64_t c = n - k < CHUNK ? n - k : CHUNK;
        row_gather(a->x, offs[V_X], &p->xd, k, c, x);
        row_gather(a->g, offs[V_G], &p->gd, k, c, g);
        double *cw = dw + k, *cb = db + k;
        for (int64_t i = 0; i < c; ++i) {
          double xhat = (x[i] - mean) * rstd;
          cw[i] += g[i] * xhat;
          cb[i] += g[i];
          double gw = p->w ? g[i] * p->w[k + i] : g[i];
          x[i] = rstd * (gw - sg - xhat * sgx);
        }
        if (a->mask[0])
          walk_scatter(view_at(p->out[0], offs[V_OUT]), p->out[0]->dtype, &p->od, k, x,
                       TPU_DTYPE_F64, c);
      }
    }
  }
}

/* One row of backward_blocks_f32: grad_input (gi, unless NULL) and the
 * column sums (dw, db, unless NULL); restrict pointers so the loops
 * vectorise (inlined into the clones). */
static inline void bwd_row_f32(const float* restrict x, const float* restrict g,
                               const float* restrict w, float* restrict gi, float* restrict dw,
                               float* restrict db, int64_t n, float fm, float fr, float fsg,
                               float fsgx) {
  if (gi && w && dw)
    for (int64_t k = 0; k < n; ++k) {
      float xhat = (x[k] - fm) * fr;
      dw[k] += g[k] * xhat;
      db[k] += g[k];
      gi[k] = fr * (g[k] * w[k] - fsg - xhat * fsgx);
    }
  else if (gi && w)
    for (int64_t k = 0; k < n; ++k) gi[k] = fr * (g[k] * w[k] - fsg - (x[k] - fm) * fr * fsgx);
  else if (gi && dw)
    for (int64_t k = 0; k < n; ++k) {
      float xhat = (x[k] - fm) * fr;
      dw[k] += g[k] * xhat;
      db[k] += g[k];
      gi[k] = fr * (g[k] - fsg - xhat * fsgx);
    }
  else if (gi)
    for (int64_t k = 0; k < n; ++k) gi[k] = fr * (g[k] - fsg - (x[k] - fm) * fr * fsgx);
  else
    for (int64_t k = 0; k < n; ++k) {
      dw[k] += g[k] * ((x[k] - fm) * fr);
      db[k] += g[k];
    }
}

/* The float32 fast path of backward_blocks (p->partf: float partial column
 * sums per block, or NULL when only grad_input is asked): x, grad_out and
 * grad_input rows contiguous float32, weight contiguous float32 (p->wf) or
 * absent. Per row, sum(gw) and sum(gw * (x - mean)) in BWD_LANES float
 * lanes added in double; grad_input and the column sums in float (PyTorch
 * CPU's float32 backward also sums in float). Built for AVX-512 and AVX2 as
 * well (VM_SIMD_CLONES). With p->half, x, grad_out and grad_input are rows
 * of one half type of up to HALF_ROW elements (weight float32 or a float32
 * copy in p->wf): each row is widened into a float32 buffer and grad_input
 * rounded once into the output, as PyTorch CPU computes half types in
 * float32 (no double buffers). */
enum { BWD_LANES = 32 }; /* ns_lanes32 adds them */


VM_SIMD_CLONES static void backward_blocks_f32(void* arg, int64_t begin, int64_t end) {
  const plan_t* p = (const plan_t*)arg;
  const norm_args_t* a = p->a;
  const float* w = p->wf;
  int64_t offs[NUM_V], n = a->n;
  float xh[HALF_ROW], gh[HALF_ROW], ih[HALF_ROW]; /* p->half: row copies */
  for (int64_t blk = begin; blk < end; ++blk) {
    float* dw = p->partf ? p->partf + blk * 2 * n : NULL;
    float* db = dw ? dw + n : NULL;
    int64_t r1 = (blk + 1) * p->block < a->m ? (blk + 1) * p->block : a->m;
    for (int64_t r = blk * p->block; r < r1; ++r) {
      row_offsets(p, r, offs);
      const float* x = (const float*)view_at(a->x, offs[V_X]);
      const float* g = (const float*)view_at(a->g, offs[V_G]);
      if (p->half) { /* half-type rows: work on float32 copies */
        widen_row(xh, x, a->x->dtype, n);
        widen_row(gh, g, a->g->dtype, n);
        x = xh;
        g = gh;
      }
      const float fm = (float)p->mean[r], fr = (float)p->rstd[r];
      if (a->mask[0]) {
        float* gi = p->half ? ih : (float*)view_at(p->out[0], offs[V_OUT]);
        /* lanes [0, 16) in the *a vectors, [16, 32) in the *b ones */
        norm_f32x16 s1a = {0}, s1b = {0}, s2a = {0}, s2b = {0}, ga, gb, xa, xb, wa, wb;
        double sg = 0.0, sgx = 0.0;
        int64_t i = 0;
        for (; i + BWD_LANES <= n; i += BWD_LANES) {
          memcpy(&ga, g + i, sizeof ga);
          memcpy(&gb, g + i + 16, sizeof gb);
          memcpy(&xa, x + i, sizeof xa);
          memcpy(&xb, x + i + 16, sizeof xb);
          if (w) {
            memcpy(&wa, w + i, sizeof wa);
            memcpy(&wb, w + i + 16, sizeof wb);
            ga *= wa;
            gb *= wb;
          }
          s1a += ga;
          s1b += gb;
          s2a += ga * (xa - fm);
          s2b += gb * (xb - fm);
        }
        float s1[BWD_LANES], s2[BWD_LANES];
        memcpy(s1, &s1a, sizeof s1a);
        memcpy(s1 + 16, &s1b, sizeof s1b);
        memcpy(s2, &s2a, sizeof s2a);
        memcpy(s2 + 16, &s2b, sizeof s2b);
        for (; i < n; ++i) {
          float gw = w ? g[i] * w[i] : g[i];
          sg += gw;
          sgx += (double)gw * (double)(x[i] - fm);
        }
        sg += ns_lanes32(s1);
        sgx += ns_lanes32(s2);
        const float fsg = a->impl->rms ? 0.0f : (float)(sg / (double)n);
        const float fsgx = (float)(sgx * p->rstd[r] / (double)n);
        bwd_row_f32(x, g, w, gi, dw, db, n, fm, fr, fsg, fsgx);
        if (p->half)
          narrow_row(view_at(p->out[0], offs[V_OUT]), p->out[0]->dtype, gi, n);
      } else if (dw) {
        bwd_row_f32(x, g, NULL, NULL, dw, db, n, fm, fr, 0.0f, 0.0f);
      }
    }
  }
}

/* Whether backward can take backward_blocks_f32 (see there). */
static bool f32_backward(const plan_t* p) {
  const norm_args_t* a = p->a;
  return f32_rows(a->x, a->axis) && f32_rows(a->g, a->axis) &&
         (!a->mask[0] || f32_rows(p->out[0], a->axis)) && (!a->w || f32_rows(a->w, 0));
}

/* Whether backward can take backward_blocks_f32 on float32 copies of
 * half-type rows (p->half). */
static bool half_backward(const plan_t* p) {
  const norm_args_t* a = p->a;
  tpu_dtype_t t = a->x->dtype;
  return (t == TPU_DTYPE_F16 || t == TPU_DTYPE_BF16) && a->n <= HALF_ROW &&
         rows_of(a->x, a->axis, t) && rows_of(a->g, a->axis, t) &&
         (!a->mask[0] || rows_of(p->out[0], a->axis, t)) &&
         (!a->w || f32_rows(a->w, 0) || rows_of(a->w, 0, t));
}

/* grad_weight / grad_bias for column blocks [begin, end) (of COLS columns). */
static void grad_param_cols(void* arg, int64_t begin, int64_t end) {
  const plan_t* p = (const plan_t*)arg;
  const norm_args_t* a = p->a;
  double x[COLS], g[COLS], dw[COLS], db[COLS];
  int64_t offs[NUM_V];
  for (int64_t blk = begin; blk < end; ++blk) {
    int64_t k = blk * COLS, c = a->n - k < COLS ? a->n - k : COLS;
    for (int64_t i = 0; i < c; ++i) dw[i] = db[i] = 0.0;
    for (int64_t r = 0; r < a->m; ++r) {
      walk_offsets(&p->rows, p->rows.ndim, r, offs);
      row_gather(a->g, offs[V_G], &p->gd, k, c, g);
      if (a->mask[1]) row_gather(a->x, offs[V_X], &p->xd, k, c, x);
      for (int64_t i = 0; i < c; ++i) {
        if (a->mask[1]) dw[i] += g[i] * (x[i] - p->mean[r]) * p->rstd[r];
        db[i] += g[i];
      }
    }
    if (a->mask[1])
      walk_scatter(tpu_view_ptr(p->out[1]), p->out[1]->dtype, &p->wd, k, dw, TPU_DTYPE_F64, c);
    if (a->mask[2])
      walk_scatter(tpu_view_ptr(p->out[2]), p->out[2]->dtype, &p->bd, k, db, TPU_DTYPE_F64, c);
  }
}

static tpu_status_t alloc_doubles(int64_t n, double** out) {
  *out = (double*)malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  if (!*out)
    TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for %lld values", (long long)n);
  return TPU_OK;
}

/* Gathers a weight-shaped view's n elements into a new double array (*out;
 * a NULL view gives NULL). */
static tpu_status_t gather_param(const tpu_view_t* v, int64_t n, double** out) {
  *out = NULL;
  if (!v) return TPU_OK;
  TPU_RETURN_IF_ERROR(alloc_doubles(n, out));
  walk_t d;
  walk_init_tail(&d, v, 0);
  walk_gather(*out, TPU_DTYPE_F64, tpu_view_ptr(v), v->dtype, &d, 0, n);
  return TPU_OK;
}

/* Reads mean and rstd of every row, in the row iterator's order. */
static tpu_status_t gather_stats(plan_t* p) {
  TPU_RETURN_IF_ERROR(alloc_doubles(p->a->m, &p->mean));
  TPU_RETURN_IF_ERROR(alloc_doubles(p->a->m, &p->rstd));
  int64_t offs[NUM_V];
  for (int64_t r = 0; r < p->a->m; ++r) {
    row_offsets(p, r, offs);
    p->mean[r] = p->a->impl->rms ? 0.0 : get_stat(p->a->mean, offs[V_MEAN]);
    p->rstd[r] = get_stat(p->a->rstd, offs[V_RSTD]);
  }
  return TPU_OK;
}

/* Backward by backward_blocks_f32: with the column sums, blocks of rows
 * (4 per thread) with their float partial sums, added up in double
 * afterwards; grad_input alone, blocks of `grain` rows. */
static tpu_status_t backward_f32(plan_t* p, bool params, int threads, int64_t grain) {
  const norm_args_t* a = p->a;
  p->wf = a->w ? (const float*)tpu_view_ptr(a->w) : NULL;
  if (p->wtmp) p->wf = p->wtmp; /* a half-type weight's float32 copy */
  if (!params) {
    p->block = grain;
    p->nblocks = (a->m + grain - 1) / grain;
    tpu_parallel_for(p->nblocks, 1, backward_blocks_f32, p);
    return TPU_OK;
  }
  p->nblocks = 4 * threads < a->m ? 4 * threads : a->m;
  p->block = (a->m + p->nblocks - 1) / p->nblocks;
  p->nblocks = (a->m + p->block - 1) / p->block;
  p->partf = (float*)calloc((size_t)(p->nblocks * 2 * a->n), sizeof(float));
  double* sum = (double*)calloc((size_t)(2 * a->n), sizeof(double));
  tpu_status_t s = TPU_OK;
  if (!p->partf || !sum) {
    s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "no host memory for layer_norm");
  } else {
    tpu_parallel_for(p->nblocks, 1, backward_blocks_f32, p);
    for (int64_t b = 0; b < p->nblocks; ++b)
      for (int64_t i = 0; i < 2 * a->n; ++i) sum[i] += p->partf[b * 2 * a->n + i];
    if (a->mask[1])
      walk_scatter(tpu_view_ptr(p->out[1]), p->out[1]->dtype, &p->wd, 0, sum, TPU_DTYPE_F64, a->n);
    if (a->mask[2])
      walk_scatter(tpu_view_ptr(p->out[2]), p->out[2]->dtype, &p->bd, 0, sum + a->n, TPU_DTYPE_F64,
                   a->n);
  }
  free(p->partf);
  free(sum);
  p->partf = NULL;
  return s;
}

static tpu_status_t norm_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  norm_args_t a;
  TPU_RETURN_IF_ERROR(tpu_norm_parse(def, node, &a));
  if (node->num_outputs < (a.impl->rms ? 2 : 3))
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "too few outputs");
  bool backward = a.impl->backward;
  plan_t p;
  memset(&p, 0, sizeof(p));
  p.a = &a;
  for (int i = 0; i < 3; ++i) {
    int j = norm_slot(a.impl, i);
    p.out[i] = j >= 0 && a.mask[i] ? &node->outputs[j] : NULL;
    if (p.out[i] && !views_same_shape(p.out[i], &a.shape[i]))
      TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output %d has the wrong shape", j);
  }
  /* Row dims of every view (a masked-out grad_input contributes stride 0;
   * mean and rstd have the input's rank: checked by parse or the shapes). */
  const tpu_view_t* mean = backward ? (a.impl->rms ? a.rstd : a.mean)
                                    : (a.impl->rms ? p.out[2] : p.out[1]);
  const tpu_view_t* rstd = backward ? a.rstd : p.out[2];
  walk_start(&p.rows, NUM_V);
  for (int32_t d = 0; d < a.axis; ++d) {
    int64_t st[NUM_V] = {a.x->strides[d], backward ? a.g->strides[d] : 0,
                         (!backward || a.mask[0]) ? p.out[0]->strides[d] : 0, mean->strides[d],
                         rstd->strides[d]};
    walk_add(&p.rows, a.x->sizes[d], st);
  }
  walk_order(&p.rows);
  walk_init_tail(&p.xd, a.x, a.axis);
  if (backward) walk_init_tail(&p.gd, a.g, a.axis);
  if (!backward || a.mask[0]) walk_init_tail(&p.od, p.out[0], a.axis);
  int64_t grain = a.n >= 16384 ? 1 : 16384 / (a.n > 0 ? a.n : 1);

  if (!backward) {
    p.f32 = f32_rows(a.x, a.axis) && f32_rows(p.out[0], a.axis) &&
            (!a.w || f32_rows(a.w, 0)) && (!a.b || f32_rows(a.b, 0));
    tpu_dtype_t xt = a.x->dtype;
    p.half = (xt == TPU_DTYPE_F16 || xt == TPU_DTYPE_BF16) && a.n <= HALF_ROW &&
             rows_of(a.x, a.axis, xt) && rows_of(p.out[0], a.axis, xt) &&
             (!a.w || f32_rows(a.w, 0) || rows_of(a.w, 0, xt)) &&
             (!a.b || f32_rows(a.b, 0) || rows_of(a.b, 0, xt));
    p.wf = (p.f32 || p.half) && a.w && a.w->dtype == TPU_DTYPE_F32
               ? (const float*)tpu_view_ptr(a.w) : NULL;
    p.bf = (p.f32 || p.half) && a.b && a.b->dtype == TPU_DTYPE_F32
               ? (const float*)tpu_view_ptr(a.b) : NULL;
  }
  bool params = backward && (a.mask[1] || a.mask[2]);
  if (params) {
    if (a.mask[1]) walk_init_tail(&p.wd, p.out[1], 0);
    if (a.mask[2]) walk_init_tail(&p.bd, p.out[2], 0);
  }
  /* Enough rows: one pass over blocks of rows with partial column sums;
   * else grad_input by rows and the column sums by column blocks. */
  int threads = tpu_parallel_threads();
  bool by_blocks = params && a.m >= 2 * threads && a.m * a.n >= 65536;
  bool bwd_f32 = backward && (by_blocks || (!params && a.mask[0])) &&
                 (f32_backward(&p) || (p.half = half_backward(&p)));
  /* double copies of weight and bias: for the general (double) rows only */
  tpu_status_t s = p.f32 || p.half || bwd_f32 ? TPU_OK : gather_param(a.w, a.n, &p.w);
  if (s == TPU_OK && !backward && !p.f32 && !p.half) s = gather_param(a.b, a.n, &p.b);
  if (s == TPU_OK && p.half) s = param_f32(a.w, a.n, &p.wtmp);
  if (s == TPU_OK && p.half && !backward) s = param_f32(a.b, a.n, &p.btmp);
  if (p.wtmp) p.wf = p.wtmp;
  if (p.btmp) p.bf = p.btmp;
  if (s == TPU_OK && backward) s = gather_stats(&p);
  if (s == TPU_OK && !backward)
    tpu_parallel_for(a.m, grain,
                     p.f32 ? forward_rows_f32 : p.half ? forward_rows_half : forward_rows, &p);
  if (s == TPU_OK && bwd_f32) {
    s = backward_f32(&p, params, threads, grain);
  } else if (s == TPU_OK && by_blocks) {
    p.nblocks = 4 * threads < a.m ? 4 * threads : a.m;
    p.block = (a.m + p.nblocks - 1) / p.nblocks;
    p.nblocks = (a.m + p.block - 1) / p.block;
    p.part = (double*)calloc((size_t)(p.nblocks * 2 * a.n), sizeof(double));
    if (!p.part) s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "no host memory for layer_norm");
    if (s == TPU_OK) {
      tpu_parallel_for(p.nblocks, 1, backward_blocks, &p);
      double* sum = p.part; /* block 0 accumulates the others */
      for (int64_t b = 1; b < p.nblocks; ++b)
        for (int64_t i = 0; i < 2 * a.n; ++i) sum[i] += p.part[b * 2 * a.n + i];
      if (a.mask[1])
        walk_scatter(tpu_view_ptr(p.out[1]), p.out[1]->dtype, &p.wd, 0, sum, TPU_DTYPE_F64, a.n);
      if (a.mask[2])
        walk_scatter(tpu_view_ptr(p.out[2]), p.out[2]->dtype, &p.bd, 0, sum + a.n, TPU_DTYPE_F64,
                     a.n);
    }
    free(p.part);
  } else {
    if (s == TPU_OK && backward && a.mask[0])
      tpu_parallel_for(a.m, grain, grad_input_rows, &p);
    if (s == TPU_OK && params) tpu_parallel_for((a.n + COLS - 1) / COLS, 1, grad_param_cols, &p);
  }
  free(p.w);
  free(p.b);
  free(p.wtmp);
  free(p.btmp);
  free(p.mean);
  free(p.rstd);
  return s;
}

/* ---- the op table ----------------------------------------------------------------- */

static const norm_impl_t k_forward = {false, false};
static const norm_impl_t k_backward = {true, false};
static const norm_impl_t k_rms_forward = {false, true};
static const norm_impl_t k_rms_backward = {true, true};

static const tpu_op_def_t k_rows[] = {
    {.name = "layer_norm", .inputs = "input,weight?,bias?", .attrs = "normalized_shape,eps",
     .outputs = "out0,out1,out2", .aten = "native_layer_norm.default native_layer_norm.out",
     .kernel = norm_kernel, .infer = norm_infer, .check = norm_check, .impl = &k_forward,
     .flags = 0, .rows = norm_rows},
    {.name = "layer_norm_backward", .inputs = "grad_out,input,mean,rstd,weight?,bias?",
     .attrs = "normalized_shape,output_mask", .outputs = "out0,out1,out2",
     .aten = "native_layer_norm_backward.default native_layer_norm_backward.out",
     .kernel = norm_kernel, .infer = norm_infer, .check = norm_check, .impl = &k_backward},
    {.name = "rms_norm", .inputs = "input,weight?", .attrs = "normalized_shape,eps",
     .outputs = "out0,out1", .aten = "_fused_rms_norm.default", .kernel = norm_kernel,
     .infer = norm_infer, .check = norm_check, .impl = &k_rms_forward, .flags = 0,
     .rows = norm_rows},
    {.name = "rms_norm_backward", .inputs = "grad_out,input,rstd,weight?",
     .attrs = "normalized_shape,output_mask", .outputs = "out0,out1",
     .aten = "_fused_rms_norm_backward.default", .kernel = norm_kernel, .infer = norm_infer,
     .check = norm_check, .impl = &k_rms_backward},
};

const tpu_op_family_t tpu_family_norm = {"norm", k_rows,
                                         (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
