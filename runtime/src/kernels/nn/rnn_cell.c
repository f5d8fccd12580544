/* rnn_cell.c — PyTorch's fused LSTM and GRU cells, forward and backward
 * (see rnn_cell.h for the ops and their formulas).
 *
 * Every op is pointwise over the [B, H] hidden state: element (b, j) reads
 * column j of each gate block of row b. The rows are split over
 * tpu_parallel_for; a row is walked RC_CHUNK columns at a time: each gate
 * block's slice of every operand is converted into a compute-type buffer
 * (float32 for float32 and the half types, float64 for float64) with
 * tpu_convert at the view's column stride, the formula runs over the
 * buffers, and the results are converted back at the outputs' strides, so
 * any 2-D layout (transposed, sliced, an out= view) takes the same path.
 * The backward ops' bias gradients are column sums of the gate gradients
 * just written (read back as stored, as PyTorch's grad_gates.sum(0) reads
 * them), accumulated in double over the rows in order.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/nn/rnn_cell.h"
#include "kernels/common/vmath.h"

#define RC_CHUNK 128
#define RC_GRAIN 16384 /* elements per task at least */

/* ---- parsing -------------------------------------------------------------------- */

static tpu_status_t unimpl(const char* what) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "rnn cell: %s", what);
}

static bool is_2d(const tpu_view_t* v, int64_t rows, int64_t cols) {
  return v->ndim == 2 && v->sizes[0] == rows && v->sizes[1] == cols;
}

static tpu_view_t shape2(tpu_dtype_t dt, int64_t rows, int64_t cols) {
  tpu_view_t v;
  memset(&v, 0, sizeof(v));
  v.dtype = dt;
  v.ndim = 2;
  v.sizes[0] = rows;
  v.sizes[1] = cols;
  tpu_view_set_contiguous(&v);
  return v;
}

static tpu_view_t shape1(tpu_dtype_t dt, int64_t n, bool present) {
  tpu_view_t v;
  memset(&v, 0, sizeof(v));
  v.dtype = TPU_DTYPE_INVALID;
  if (!present) return v;
  v.dtype = dt;
  v.ndim = 1;
  v.sizes[0] = n;
  tpu_view_set_contiguous(&v);
  return v;
}

static tpu_status_t parse_forward(const tpu_op_def_t* def, const tpu_node_t* node, rc_args_t* a) {
  const bool lstm = a->impl->kind == RC_LSTM;
  a->ig = ku_input(def, node, "input_gates");
  a->hg = ku_input(def, node, "hidden_gates");
  a->prev = ku_input(def, node, lstm ? "cx" : "hx");
  a->ib = ku_input(def, node, "input_bias");
  a->hb = ku_input(def, node, "hidden_bias");
  if (!a->ig || !a->hg || !a->prev) return unimpl("missing tensors");
  if ((a->ib == NULL) != (a->hb == NULL)) return unimpl("one bias without the other");
  a->dtype = a->ig->dtype;
  if (a->ig->ndim != 2 || a->ig->sizes[1] % a->gates != 0) return unimpl("gates of another shape");
  a->batch = a->ig->sizes[0];
  a->hidden = a->ig->sizes[1] / a->gates;
  const int64_t gh = a->gates * a->hidden;
  if (!is_2d(a->hg, a->batch, gh) || !is_2d(a->prev, a->batch, a->hidden))
    return unimpl("operands of other shapes");
  if (a->ib && (a->ib->ndim != 1 || a->ib->sizes[0] != gh || a->hb->ndim != 1 ||
                a->hb->sizes[0] != gh))
    return unimpl("biases of another shape");
  if (a->hg->dtype != a->dtype || a->prev->dtype != a->dtype ||
      (a->ib && (a->ib->dtype != a->dtype || a->hb->dtype != a->dtype)))
    return unimpl("operands of different dtypes");
  a->shape[0] = shape2(a->dtype, a->batch, a->hidden);
  if (lstm) {
    a->shape[1] = shape2(a->dtype, a->batch, a->hidden);
    a->shape[2] = shape2(a->dtype, a->batch, 4 * a->hidden);
    a->nout = 3;
  } else {
    a->shape[1] = shape2(a->dtype, a->batch, 5 * a->hidden);
    a->nout = 2;
  }
  return TPU_OK;
}

static tpu_status_t parse_backward(const tpu_op_def_t* def, const tpu_node_t* node,
                                   rc_args_t* a) {
  const bool lstm = a->impl->kind == RC_LSTM;
  a->ghy = ku_input(def, node, "grad_hy");
  a->ws = ku_input(def, node, "workspace");
  a->has_bias = tpu_attr_bool(ku_attr(def, node, "has_bias"), false);
  if (!a->ws) return unimpl("missing workspace");
  a->dtype = a->ws->dtype;
  if (lstm) {
    a->gcy = ku_input(def, node, "grad_cy");
    a->cx = ku_input(def, node, "cx");
    a->cy = ku_input(def, node, "cy");
    if (!a->cx || !a->cy) return unimpl("missing tensors");
    a->nout = 3;
    if (!a->ghy && !a->gcy) { /* nothing to propagate: every result undefined */
      a->none = true;
      for (int i = 0; i < 3; ++i) a->shape[i] = shape1(a->dtype, 0, false);
      return TPU_OK;
    }
    const tpu_view_t* g = a->ghy ? a->ghy : a->gcy;
    if (g->ndim != 2) return unimpl("gradient of another rank");
    a->batch = g->sizes[0];
    a->hidden = g->sizes[1];
    if ((a->ghy && !is_2d(a->ghy, a->batch, a->hidden)) ||
        (a->gcy && !is_2d(a->gcy, a->batch, a->hidden)) ||
        !is_2d(a->cx, a->batch, a->hidden) || !is_2d(a->cy, a->batch, a->hidden) ||
        !is_2d(a->ws, a->batch, 4 * a->hidden))
      return unimpl("operands of other shapes");
    if ((a->ghy && a->ghy->dtype != a->dtype) || (a->gcy && a->gcy->dtype != a->dtype) ||
        a->cx->dtype != a->dtype || a->cy->dtype != a->dtype)
      return unimpl("operands of different dtypes");
    a->shape[0] = shape2(a->dtype, a->batch, 4 * a->hidden);
    a->shape[1] = shape2(a->dtype, a->batch, a->hidden);
    a->shape[2] = shape1(a->dtype, 4 * a->hidden, a->has_bias);
  } else {
    if (!a->ghy || a->ghy->ndim != 2) return unimpl("missing gradient");
    a->batch = a->ghy->sizes[0];
    a->hidden = a->ghy->sizes[1];
    if (!is_2d(a->ws, a->batch, 5 * a->hidden)) return unimpl("workspace of another shape");
    if (a->ghy->dtype != a->dtype) return unimpl("operands of different dtypes");
    a->shape[0] = shape2(a->dtype, a->batch, 3 * a->hidden);
    a->shape[1] = shape2(a->dtype, a->batch, 3 * a->hidden);
    a->shape[2] = shape2(a->dtype, a->batch, a->hidden);
    a->shape[3] = shape1(a->dtype, 3 * a->hidden, a->has_bias);
    a->shape[4] = shape1(a->dtype, 3 * a->hidden, a->has_bias);
    a->nout = 5;
  }
  return TPU_OK;
}

tpu_status_t tpu_rc_parse(const tpu_op_def_t* def, const tpu_node_t* node, rc_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->impl = (const rc_impl_t*)def->impl;
  a->gates = a->impl->kind == RC_LSTM ? 4 : 3;
  TPU_RETURN_IF_ERROR(a->impl->backward ? parse_backward(def, node, a)
                                        : parse_forward(def, node, a));
  if (!a->none && !tpu_dtype_is_floating(a->dtype))
    return unimpl("no native kernel for this dtype");
  return TPU_OK;
}

static tpu_status_t rc_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* out) {
  rc_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_rc_parse(def, node, &a)));
  for (int32_t i = 0; i < a.nout; ++i) out[i] = a.shape[i];
  return TPU_OK;
}

/* The outputs the kernel writes: of the parsed shapes and dtype, not
 * overlapping an input or each other (else the bridge's copies run it). */
static tpu_status_t check_outputs(const tpu_node_t* node, const rc_args_t* a) {
  if (node->num_outputs == 0) return TPU_OK;
  if (node->num_outputs < a->nout) return unimpl("missing outputs");
  for (int32_t i = 0; i < a->nout; ++i) {
    const tpu_view_t* o = &node->outputs[i];
    if (tpu_view_is_absent(&a->shape[i]) || o->addr <= 1) continue;
    if (!views_same_shape(o, &a->shape[i]) || o->dtype != a->dtype)
      return unimpl("output of another shape or dtype");
    for (int32_t k = 0; k < node->num_inputs; ++k)
      if (node->inputs[k].kind == TPU_VALUE_VIEW && views_overlap(o, &node->inputs[k].u.view))
        return unimpl("output overlaps an input");
    for (int32_t j = 0; j < i; ++j)
      if (!tpu_view_is_absent(&a->shape[j]) && node->outputs[j].addr > 1 &&
          views_overlap(o, &node->outputs[j]))
        return unimpl("outputs overlap");
  }
  return TPU_OK;
}

static tpu_status_t rc_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  rc_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_rc_parse(def, node, &a)));
  return check_outputs(node, &a);
}

/* ---- moving slices ------------------------------------------------------------------- */

/* n elements of row r of a 2-D view (of a 1-D view when r < 0) from column
 * c, converted to dtype ct in buf, and back. */
static inline const char* slice_at(const tpu_view_t* v, int64_t r, int64_t c, int64_t* step) {
  int64_t off = v->ndim == 2 ? r * v->strides[0] + c * v->strides[1] : c * v->strides[0];
  *step = v->strides[v->ndim - 1];
  return (const char*)tpu_view_ptr(v) + off * (int64_t)tpu_dtype_size(v->dtype);
}

static inline void load(void* buf, tpu_dtype_t ct, const tpu_view_t* v, int64_t r, int64_t c,
                        int64_t n) {
  int64_t step;
  const char* p = slice_at(v, r, c, &step);
  tpu_convert(buf, ct, 1, p, v->dtype, step, n);
}

static inline void store(const tpu_view_t* v, int64_t r, int64_t c, const void* buf,
                         tpu_dtype_t ct, int64_t n) {
  int64_t step;
  char* p = (char*)slice_at(v, r, c, &step);
  tpu_convert(p, v->dtype, step, buf, ct, 1, n);
}

/* ---- the kernels, once per compute type ------------------------------------------------ */

typedef struct rc_plan {
  const rc_args_t* a;
  const tpu_view_t* out[RC_MAX_OUT]; /* NULL: absent */
} rc_plan_t;

#define RC_KERNELS(T, SFX, CT, SIG, TANH, ATTR)                                               \
  /* The biases' slices (zeros without bias). */                                              \
  static void bias_##SFX(const rc_args_t* a, int64_t g, int64_t j0, int64_t n, T* b1,         \
                         T* b2) {                                                             \
    if (a->ib) {                                                                              \
      load(b1, CT, a->ib, -1, g * a->hidden + j0, n);                                         \
      load(b2, CT, a->hb, -1, g * a->hidden + j0, n);                                         \
    } else {                                                                                  \
      for (int64_t k = 0; k < n; ++k) b1[k] = b2[k] = 0;                                      \
    }                                                                                         \
  }                                                                                           \
                                                                                              \
  ATTR static void lstm_fwd_##SFX(void* arg, int64_t r0, int64_t r1) {                             \
    const rc_plan_t* p = (const rc_plan_t*)arg;                                               \
    const rc_args_t* a = p->a;                                                                \
    const int64_t H = a->hidden;                                                              \
    T x[4][RC_CHUNK], h[4][RC_CHUNK], b1[4][RC_CHUNK], b2[4][RC_CHUNK];                       \
    T c[RC_CHUNK], hy[RC_CHUNK], cy[RC_CHUNK];                                                \
    for (int64_t j0 = 0; j0 < H; j0 += RC_CHUNK) {                                            \
      int64_t n = H - j0 < RC_CHUNK ? H - j0 : RC_CHUNK;                                      \
      for (int g = 0; g < 4; ++g) bias_##SFX(a, g, j0, n, b1[g], b2[g]);                      \
      for (int64_t r = r0; r < r1; ++r) {                                                     \
        for (int g = 0; g < 4; ++g) {                                                         \
          load(x[g], CT, a->ig, r, g * H + j0, n);                                            \
          load(h[g], CT, a->hg, r, g * H + j0, n);                                            \
        }                                                                                     \
        load(c, CT, a->prev, r, j0, n);                                                       \
        for (int64_t k = 0; k < n; ++k) {                                                     \
          T i = SIG(x[0][k] + h[0][k] + b1[0][k] + b2[0][k]);                           \
          T f = SIG(x[1][k] + h[1][k] + b1[1][k] + b2[1][k]);                           \
          T gg = TANH(x[2][k] + h[2][k] + b1[2][k] + b2[2][k]);                               \
          T o = SIG(x[3][k] + h[3][k] + b1[3][k] + b2[3][k]);                           \
          cy[k] = f * c[k] + i * gg;                                                          \
          hy[k] = o * TANH(cy[k]);                                                            \
          x[0][k] = i, x[1][k] = f, x[2][k] = gg, x[3][k] = o;                                \
        }                                                                                     \
        store(p->out[0], r, j0, hy, CT, n);                                                   \
        store(p->out[1], r, j0, cy, CT, n);                                                   \
        for (int g = 0; g < 4; ++g) store(p->out[2], r, g * H + j0, x[g], CT, n);             \
      }                                                                                       \
    }                                                                                         \
  }                                                                                           \
                                                                                              \
  ATTR static void lstm_bwd_##SFX(void* arg, int64_t r0, int64_t r1) {                             \
    const rc_plan_t* p = (const rc_plan_t*)arg;                                               \
    const rc_args_t* a = p->a;                                                                \
    const int64_t H = a->hidden;                                                              \
    T w[4][RC_CHUNK], cx[RC_CHUNK], cy[RC_CHUNK], go[RC_CHUNK], gc[RC_CHUNK];                 \
    for (int64_t r = r0; r < r1; ++r)                                                         \
      for (int64_t j0 = 0; j0 < H; j0 += RC_CHUNK) {                                          \
        int64_t n = H - j0 < RC_CHUNK ? H - j0 : RC_CHUNK;                                    \
        for (int g = 0; g < 4; ++g) load(w[g], CT, a->ws, r, g * H + j0, n);                  \
        load(cx, CT, a->cx, r, j0, n);                                                        \
        load(cy, CT, a->cy, r, j0, n);                                                        \
        if (a->ghy) load(go, CT, a->ghy, r, j0, n);                                           \
        else for (int64_t k = 0; k < n; ++k) go[k] = 0;                                       \
        if (a->gcy) load(gc, CT, a->gcy, r, j0, n);                                           \
        else for (int64_t k = 0; k < n; ++k) gc[k] = 0;                                       \
        for (int64_t k = 0; k < n; ++k) {                                                     \
          T i = w[0][k], f = w[1][k], gg = w[2][k], o = w[3][k];                              \
          T t = TANH(cy[k]);                                                                  \
          T gog = go[k] * t;                                                                  \
          T gcx = go[k] * o * (1 - t * t) + gc[k];                                            \
          T gig = gcx * gg, gfg = gcx * cx[k], gcg = gcx * i;                                 \
          cx[k] = gcx * f;                                                                    \
          w[0][k] = gig * (1 - i) * i;                                                        \
          w[1][k] = gfg * (1 - f) * f;                                                        \
          w[2][k] = gcg * (1 - gg * gg);                                                      \
          w[3][k] = gog * (1 - o) * o;                                                        \
        }                                                                                     \
        for (int g = 0; g < 4; ++g) store(p->out[0], r, g * H + j0, w[g], CT, n);             \
        store(p->out[1], r, j0, cx, CT, n);                                                   \
      }                                                                                       \
  }                                                                                           \
                                                                                              \
  ATTR static void gru_fwd_##SFX(void* arg, int64_t r0, int64_t r1) {                              \
    const rc_plan_t* p = (const rc_plan_t*)arg;                                               \
    const rc_args_t* a = p->a;                                                                \
    const int64_t H = a->hidden;                                                              \
    T x[3][RC_CHUNK], h[3][RC_CHUNK], b1[3][RC_CHUNK], b2[3][RC_CHUNK];                       \
    T hx[RC_CHUNK], hy[RC_CHUNK], hn[RC_CHUNK];                                               \
    for (int64_t j0 = 0; j0 < H; j0 += RC_CHUNK) {                                            \
      int64_t n = H - j0 < RC_CHUNK ? H - j0 : RC_CHUNK;                                      \
      for (int g = 0; g < 3; ++g) bias_##SFX(a, g, j0, n, b1[g], b2[g]);                      \
      for (int64_t r = r0; r < r1; ++r) {                                                     \
        for (int g = 0; g < 3; ++g) {                                                         \
          load(x[g], CT, a->ig, r, g * H + j0, n);                                            \
          load(h[g], CT, a->hg, r, g * H + j0, n);                                            \
        }                                                                                     \
        load(hx, CT, a->prev, r, j0, n);                                                      \
        for (int64_t k = 0; k < n; ++k) {                                                     \
          T rg = SIG(x[0][k] + h[0][k] + b1[0][k] + b2[0][k]);                          \
          T zg = SIG(x[1][k] + h[1][k] + b1[1][k] + b2[1][k]);                          \
          hn[k] = h[2][k] + b2[2][k];                                                         \
          T ng = TANH(x[2][k] + b1[2][k] + rg * hn[k]);                                       \
          hy[k] = ng + zg * (hx[k] - ng);                                                     \
          x[0][k] = rg, x[1][k] = zg, x[2][k] = ng;                                           \
        }                                                                                     \
        store(p->out[0], r, j0, hy, CT, n);                                                   \
        for (int g = 0; g < 3; ++g) store(p->out[1], r, g * H + j0, x[g], CT, n);             \
        store(p->out[1], r, 3 * H + j0, hx, CT, n);                                           \
        store(p->out[1], r, 4 * H + j0, hn, CT, n);                                           \
      }                                                                                       \
    }                                                                                         \
  }                                                                                           \
                                                                                              \
  ATTR static void gru_bwd_##SFX(void* arg, int64_t r0, int64_t r1) {                              \
    const rc_plan_t* p = (const rc_plan_t*)arg;                                               \
    const rc_args_t* a = p->a;                                                                \
    const int64_t H = a->hidden;                                                              \
    T w[5][RC_CHUNK], go[RC_CHUNK], ghn[RC_CHUNK];                                            \
    for (int64_t r = r0; r < r1; ++r)                                                         \
      for (int64_t j0 = 0; j0 < H; j0 += RC_CHUNK) {                                          \
        int64_t n = H - j0 < RC_CHUNK ? H - j0 : RC_CHUNK;                                    \
        for (int g = 0; g < 5; ++g) load(w[g], CT, a->ws, r, g * H + j0, n);                  \
        load(go, CT, a->ghy, r, j0, n);                                                       \
        for (int64_t k = 0; k < n; ++k) {                                                     \
          T rg = w[0][k], zg = w[1][k], ng = w[2][k], hx = w[3][k], hn = w[4][k];             \
          T gz = go[k] * (hx - ng) * (1 - zg) * zg;                                           \
          T ghx = go[k] * zg;                                                                 \
          T gn = go[k] * (1 - zg) * (1 - ng * ng);                                            \
          ghn[k] = gn * rg;                                                                   \
          w[0][k] = gn * hn * (1 - rg) * rg;                                                  \
          w[1][k] = gz;                                                                       \
          w[2][k] = gn;                                                                       \
          w[3][k] = ghx;                                                                      \
        }                                                                                     \
        for (int g = 0; g < 3; ++g) store(p->out[0], r, g * H + j0, w[g], CT, n);             \
        for (int g = 0; g < 2; ++g) store(p->out[1], r, g * H + j0, w[g], CT, n);             \
        store(p->out[1], r, 2 * H + j0, ghn, CT, n);                                          \
        store(p->out[2], r, j0, w[3], CT, n);                                                 \
      }                                                                                       \
  }

/* float32: vmath.h's branch-free exp and tanh (the loops vectorise); the
 * sigmoid's exponent is clamped to +-88 (NaN passes), where 1/(1+e) is
 * already 0 or 1 in float. float64: libm. */
static inline float sig_f32(float x) {
  float a = -x;
  a = a > 88.0f ? 88.0f : a;
  a = a < -88.0f ? -88.0f : a;
  return 1.0f / (1.0f + vm_expf(a));
}
static inline double sig_f64(double x) { return 1.0 / (1.0 + exp(-x)); }

RC_KERNELS(float, f32, TPU_DTYPE_F32, sig_f32, vm_tanhf, VM_SIMD_CLONES)
RC_KERNELS(double, f64, TPU_DTYPE_F64, sig_f64, tanh, )

typedef void (*rc_rows_fn)(void* arg, int64_t r0, int64_t r1);

/* [kind][backward][compute type is float64] */
static const rc_rows_fn k_rows_fn[2][2][2] = {
    {{lstm_fwd_f32, lstm_fwd_f64}, {lstm_bwd_f32, lstm_bwd_f64}},
    {{gru_fwd_f32, gru_fwd_f64}, {gru_bwd_f32, gru_bwd_f64}},
};

/* ---- bias gradients: column sums ------------------------------------------------------ */

typedef struct colsum_job {
  const tpu_view_t* src; /* [B, C] */
  const tpu_view_t* dst; /* [C] */
} colsum_job_t;

static void colsum_blocks(void* arg, int64_t begin, int64_t end) {
  const colsum_job_t* j = (const colsum_job_t*)arg;
  double acc[RC_CHUNK], row[RC_CHUNK];
  const int64_t rows = j->src->sizes[0], cols = j->src->sizes[1];
  for (int64_t blk = begin; blk < end; ++blk) {
    int64_t c0 = blk * RC_CHUNK, n = cols - c0 < RC_CHUNK ? cols - c0 : RC_CHUNK;
    for (int64_t k = 0; k < n; ++k) acc[k] = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      load(row, TPU_DTYPE_F64, j->src, r, c0, n);
      for (int64_t k = 0; k < n; ++k) acc[k] += row[k];
    }
    store(j->dst, -1, c0, acc, TPU_DTYPE_F64, n);
  }
}

static void column_sums(const tpu_view_t* src, const tpu_view_t* dst) {
  colsum_job_t j = {src, dst};
  int64_t blocks = (src->sizes[1] + RC_CHUNK - 1) / RC_CHUNK;
  int64_t per = src->sizes[0] * RC_CHUNK;
  int64_t grain = per >= RC_GRAIN ? 1 : RC_GRAIN / (per > 0 ? per : 1);
  tpu_parallel_for(blocks, grain, colsum_blocks, &j);
}

/* ---- the kernel --------------------------------------------------------------------- */

static tpu_status_t rc_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  (void)ctx;
  rc_args_t a;
  TPU_RETURN_IF_ERROR(tpu_rc_parse(def, node, &a));
  if (node->num_outputs < a.nout) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "too few outputs");
  rc_plan_t p;
  memset(&p, 0, sizeof(p));
  p.a = &a;
  for (int32_t i = 0; i < a.nout; ++i) {
    if (tpu_view_is_absent(&a.shape[i])) continue;
    p.out[i] = &node->outputs[i];
    if (!views_same_shape(p.out[i], &a.shape[i]) || p.out[i]->dtype != a.dtype)
      TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output %d has the wrong shape or dtype", i);
  }
  if (a.none) return TPU_OK;
  const bool f64 = tpu_dtype_compute(a.dtype) == TPU_COMPUTE_F64;
  rc_rows_fn fn = k_rows_fn[a.impl->kind][a.impl->backward][f64];
  int64_t per_row = a.hidden * a.gates;
  int64_t grain = per_row >= RC_GRAIN ? 1 : RC_GRAIN / (per_row > 0 ? per_row : 1);
  if (a.hidden > 0) tpu_parallel_for(a.batch, grain, fn, &p);
  if (a.impl->backward && a.has_bias) {
    if (a.impl->kind == RC_LSTM) {
      column_sums(p.out[0], p.out[2]);
    } else {
      column_sums(p.out[0], p.out[3]);
      column_sums(p.out[1], p.out[4]);
    }
  }
  return TPU_OK;
}

/* ---- the op table ------------------------------------------------------------------- */

static const rc_impl_t k_lstm = {RC_LSTM, false}, k_lstm_b = {RC_LSTM, true};
static const rc_impl_t k_gru = {RC_GRU, false}, k_gru_b = {RC_GRU, true};

static const tpu_op_def_t k_rows[] = {
    {.name = "_thnn_fused_lstm_cell",
     .inputs = "input_gates,hidden_gates,cx,input_bias?,hidden_bias?", .attrs = "",
     .outputs = "out0,out1,out2", .aten = "_thnn_fused_lstm_cell _thnn_fused_lstm_cell.out",
     .kernel = rc_kernel, .infer = rc_infer, .check = rc_check, .impl = &k_lstm, .flags = 0,
     .rows = NULL},
    {.name = "_thnn_fused_lstm_cell_backward_impl", .inputs = "grad_hy?,grad_cy?,cx,cy,workspace",
     .attrs = "has_bias", .outputs = "out0,out1,out2",
     .aten = "_thnn_fused_lstm_cell_backward_impl _thnn_fused_lstm_cell_backward_impl.out",
     .kernel = rc_kernel, .infer = rc_infer, .check = rc_check, .impl = &k_lstm_b, .flags = 0,
     .rows = NULL},
    {.name = "_thnn_fused_gru_cell",
     .inputs = "input_gates,hidden_gates,hx,input_bias?,hidden_bias?", .attrs = "",
     .outputs = "out0,out1", .aten = "_thnn_fused_gru_cell _thnn_fused_gru_cell.out",
     .kernel = rc_kernel, .infer = rc_infer, .check = rc_check, .impl = &k_gru, .flags = 0,
     .rows = NULL},
    {.name = "_thnn_fused_gru_cell_backward", .inputs = "grad_hy,workspace", .attrs = "has_bias",
     .outputs = "out0,out1,out2,out3,out4",
     .aten = "_thnn_fused_gru_cell_backward _thnn_fused_gru_cell_backward.out",
     .kernel = rc_kernel, .infer = rc_infer, .check = rc_check, .impl = &k_gru_b, .flags = 0,
     .rows = NULL},
};

const tpu_op_family_t tpu_family_rnn_cell = {"rnn_cell", k_rows,
                                             (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
