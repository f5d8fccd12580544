/* distance.c — the distance family: _cdist_forward, _cdist_backward,
 * _pdist_forward and _pdist_backward (p-norm distances between rows), with
 * PyTorch CPU's semantics: batch dims broadcast, p = 0 counts differing
 * coordinates, p = inf takes the largest |difference|, the backward formulas
 * of ATen's Distance kernels (zero where the distance is zero).
 *
 * How a node runs: the operands are packed (view_copy, any strides, batch
 * broadcast) into contiguous buffers of the compute type (float32 or
 * float64, as PyTorch accumulates); the forward keeps x2 transposed
 * ([batch, M, R]) so that for one row of x1 a block of DIST_BLOCK distances
 * is accumulated over the coordinates in a loop that vectorises over the
 * block; the backward walks x2's rows ([batch, R, M]) adding each row's term
 * to the gradient row, vectorised over coordinates. Rows run on
 * tpu_parallel_for; results are converted into the (possibly strided)
 * output in one view_copy. pdist runs as cdist(self, self): its forward
 * takes the upper triangle, its backward spreads the condensed gradient
 * into a symmetric matrix with a zero diagonal.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reduce/distance.h"

#define DIST_BLOCK 64
#define DIST_GRAIN_WORK 32768 /* multiply-adds per parallel chunk, at least */

/* ---- argument parsing (shared with the reference) ------------------------------ */

static tpu_status_t dist_fail_unimpl(const char* what) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s", what);
}

tpu_status_t tpu_dist_parse(const tpu_op_def_t* def, const tpu_node_t* node, dist_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->kind = ((const dist_spec_t*)def->impl)->kind;
  a->p = tpu_attr_float(ku_attr(def, node, "p"), 2.0);
  if (!(a->p >= 0.0)) return dist_fail_unimpl("cdist only supports non-negative p values");
  bool pd = a->kind == DIST_PDIST || a->kind == DIST_PDIST_BACKWARD;
  a->x1 = ku_input(def, node, pd ? "self" : "x1");
  a->x2 = pd ? a->x1 : ku_input(def, node, "x2");
  if (!a->x1 || !a->x2) return dist_fail_unimpl("expected tensors");
  tpu_dtype_t dt = a->x1->dtype;
  if ((dt != TPU_DTYPE_F32 && dt != TPU_DTYPE_F64) || a->x2->dtype != dt)
    return dist_fail_unimpl("cdist only supports float32/float64 inputs of one dtype");
  if (pd ? a->x1->ndim != 2 : (a->x1->ndim < 2 || a->x2->ndim < 2))
    return dist_fail_unimpl("pdist needs a 2-D input, cdist at least 2-D inputs");
  const tpu_view_t *x1 = a->x1, *x2 = a->x2;
  a->m = x1->sizes[x1->ndim - 1];
  if (x2->sizes[x2->ndim - 1] != a->m)
    return dist_fail_unimpl("X1 and X2 must have the same number of columns");
  a->r1 = x1->sizes[x1->ndim - 2];
  a->r2 = x2->sizes[x2->ndim - 2];
  /* Batch dims: right-aligned broadcast of x1's and x2's leading dims. */
  int32_t n1 = x1->ndim - 2, n2 = x2->ndim - 2;
  a->nbatch = n1 > n2 ? n1 : n2;
  a->batch = 1;
  for (int32_t d = 0; d < a->nbatch; ++d) {
    int32_t d1 = d - (a->nbatch - n1), d2 = d - (a->nbatch - n2);
    int64_t s1 = d1 >= 0 ? x1->sizes[d1] : 1, s2 = d2 >= 0 ? x2->sizes[d2] : 1;
    if (s1 != s2 && s1 != 1 && s2 != 1) return dist_fail_unimpl("batch dims do not broadcast");
    a->bsizes[d] = s1 == 1 ? s2 : s1;
    a->batch *= a->bsizes[d];
  }
  tpu_view_t* s = &a->shape;
  s->dtype = dt;
  switch (a->kind) {
    case DIST_CDIST:
      s->ndim = a->nbatch + 2;
      memcpy(s->sizes, a->bsizes, sizeof(int64_t) * (size_t)a->nbatch);
      s->sizes[a->nbatch] = a->r1, s->sizes[a->nbatch + 1] = a->r2;
      break;
    case DIST_CDIST_BACKWARD:
      s->ndim = a->nbatch + 2;
      memcpy(s->sizes, a->bsizes, sizeof(int64_t) * (size_t)a->nbatch);
      s->sizes[a->nbatch] = a->r1, s->sizes[a->nbatch + 1] = a->m;
      break;
    case DIST_PDIST:
      s->ndim = 1;
      s->sizes[0] = a->r1 * (a->r1 - 1) / 2;
      break;
    case DIST_PDIST_BACKWARD:
      *s = *x1;
      break;
  }
  tpu_view_set_contiguous(s);
  if (a->kind == DIST_CDIST_BACKWARD || a->kind == DIST_PDIST_BACKWARD) {
    a->grad = ku_input(def, node, "grad_output");
    a->dist = ku_input(def, node, pd ? "pdist" : "cdist");
    if (!a->grad || !a->dist || a->grad->dtype != dt || a->dist->dtype != dt)
      return dist_fail_unimpl("cdist backward needs grad and distances of the input dtype");
    int64_t want = pd ? a->r1 * (a->r1 - 1) / 2 : a->batch * a->r1 * a->r2;
    if (tpu_view_numel(a->grad) != want || tpu_view_numel(a->dist) != want)
      return dist_fail_unimpl("cdist backward: grad and distances have the wrong size");
  }
  return TPU_OK;
}

dist_mode_t tpu_dist_mode(double p) {
  return p == 0.0 ? DMODE_P0
         : p == 1.0 ? DMODE_P1
         : p == 2.0 ? DMODE_P2
         : isinf(p) ? DMODE_INF
         : p < 2.0  ? DMODE_LT2
                    : DMODE_GEN;
}

/* ---- packing ------------------------------------------------------------------- */

/* x ([..., rows, M], batch dims broadcast to a->bsizes) into a contiguous
 * [batch, rows, M] buffer of `dt`, or [batch, M, rows] when `transpose`. */
static void pack(const dist_args_t* a, const tpu_view_t* x, tpu_dtype_t dt, bool transpose,
                 void* buf) {
  int64_t sizes[TPU_MAX_DIMS];
  int32_t nd = a->nbatch + 2;
  memcpy(sizes, a->bsizes, sizeof(int64_t) * (size_t)a->nbatch);
  sizes[nd - 2] = x->sizes[x->ndim - 2];
  sizes[nd - 1] = x->sizes[x->ndim - 1];
  tpu_view_t src;
  view_expand(x, nd, sizes, &src);
  if (transpose) {
    int64_t t = src.sizes[nd - 2];
    src.sizes[nd - 2] = src.sizes[nd - 1], src.sizes[nd - 1] = t;
    t = src.strides[nd - 2];
    src.strides[nd - 2] = src.strides[nd - 1], src.strides[nd - 1] = t;
  }
  tpu_view_t dst = view_of(buf, dt, nd, src.sizes);
  view_copy(&dst, &src);
}

/* A view of n contiguous elements (any shape with that numel works for the
 * grad / distance inputs: they are read in logical order). */
static void pack_flat(const tpu_view_t* x, tpu_dtype_t dt, void* buf) {
  tpu_view_t dst = view_of(buf, dt, x->ndim, x->sizes);
  view_copy(&dst, x);
}

/* ---- typed loops ----------------------------------------------------------------- */

typedef struct dist_job {
  const dist_args_t* a;
  dist_mode_t mode;
  double p;
  const void* x1;  /* [batch, r1, M] */
  const void* x2;  /* forward: [batch, M, r2]; backward: [batch, r2, M] */
  const void* g;   /* backward: [batch, r1, r2] */
  const void* d;   /* backward: [batch, r1, r2] */
  void* out;       /* forward: [batch, r1, r2]; backward: [batch, r1, M] */
} dist_job_t;

#define DIST_LOOPS(C, T, ABS, POW, SQRT)                                                 \
  static void fwd_##C(void* arg, int64_t begin, int64_t end) {                           \
    const dist_job_t* j = (const dist_job_t*)arg;                                        \
    const dist_args_t* a = j->a;                                                         \
    int64_t M = a->m, R = a->r2;                                                         \
    T p = (T)j->p, s[DIST_BLOCK];                                                        \
    for (int64_t row = begin; row < end; ++row) {                                        \
      int64_t b = row / a->r1;                                                           \
      const T* x = (const T*)j->x1 + row * M;                                            \
      const T* xt = (const T*)j->x2 + b * M * R;                                         \
      T* o = (T*)j->out + row * R;                                                       \
      for (int64_t j0 = 0; j0 < R; j0 += DIST_BLOCK) {                                   \
        int64_t nb = R - j0 < DIST_BLOCK ? R - j0 : DIST_BLOCK;                          \
        for (int64_t q = 0; q < nb; ++q) s[q] = 0;                                       \
        for (int64_t k = 0; k < M; ++k) {                                                \
          T xk = x[k];                                                                   \
          const T* y = xt + k * R + j0;                                                  \
          switch (j->mode) {                                                             \
            case DMODE_P0:                                                               \
              for (int64_t q = 0; q < nb; ++q) s[q] += (T)(xk != y[q]);                  \
              break;                                                                     \
            case DMODE_P1:                                                               \
              for (int64_t q = 0; q < nb; ++q) s[q] += ABS(xk - y[q]);                   \
              break;                                                                     \
            case DMODE_P2:                                                               \
              for (int64_t q = 0; q < nb; ++q) s[q] += (xk - y[q]) * (xk - y[q]);        \
              break;                                                                     \
            case DMODE_INF:                                                              \
              for (int64_t q = 0; q < nb; ++q) {                                         \
                T v = ABS(xk - y[q]);                                                    \
                s[q] = v > s[q] ? v : s[q];                                              \
              }                                                                          \
              break;                                                                     \
            default:                                                                     \
              for (int64_t q = 0; q < nb; ++q) s[q] += POW(ABS(xk - y[q]), p);           \
              break;                                                                     \
          }                                                                              \
        }                                                                                \
        for (int64_t q = 0; q < nb; ++q)                                                 \
          o[j0 + q] = j->mode == DMODE_P2                                     ? SQRT(s[q]) \
                      : (j->mode == DMODE_P0 || j->mode == DMODE_P1 || j->mode == DMODE_INF) \
                          ? s[q]                                                         \
                          : POW(s[q], (T)1 / p);                                         \
      }                                                                                  \
    }                                                                                    \
  }                                                                                      \
  static void bwd_##C(void* arg, int64_t begin, int64_t end) {                           \
    const dist_job_t* j = (const dist_job_t*)arg;                                        \
    const dist_args_t* a = j->a;                                                         \
    int64_t M = a->m, R = a->r2;                                                         \
    T p = (T)j->p;                                                                       \
    for (int64_t row = begin; row < end; ++row) {                                        \
      int64_t b = row / a->r1;                                                           \
      const T* x = (const T*)j->x1 + row * M;                                            \
      const T* g = (const T*)j->g + row * R;                                             \
      const T* dd = (const T*)j->d + row * R;                                            \
      T* o = (T*)j->out + row * M;                                                       \
      for (int64_t k = 0; k < M; ++k) o[k] = 0;                                          \
      if (j->mode == DMODE_P0) continue;                                                 \
      for (int64_t c = 0; c < R; ++c) {                                                  \
        const T* y = (const T*)j->x2 + (b * R + c) * M;                                  \
        T gc = g[c], dc = dd[c];                                                         \
        switch (j->mode) {                                                               \
          case DMODE_P1:                                                                 \
            for (int64_t k = 0; k < M; ++k) {                                            \
              T v = x[k] - y[k];                                                         \
              o[k] += gc * (T)((v > 0) - (v < 0));                                       \
            }                                                                            \
            break;                                                                       \
          case DMODE_P2: {                                                               \
            if (dc == 0) break;                                                          \
            T cf = gc / dc;                                                              \
            for (int64_t k = 0; k < M; ++k) o[k] += cf * (x[k] - y[k]);                  \
            break;                                                                       \
          }                                                                              \
          case DMODE_INF:                                                                \
            for (int64_t k = 0; k < M; ++k) {                                            \
              T v = x[k] - y[k];                                                         \
              o[k] += gc * (T)((v > 0) - (v < 0)) * (T)(ABS(v) == dc);                   \
            }                                                                            \
            break;                                                                       \
          case DMODE_LT2: {                                                              \
            if (dc == 0) break;                                                          \
            T den = POW(dc, p - 1);                                                      \
            for (int64_t k = 0; k < M; ++k) {                                            \
              T v = x[k] - y[k];                                                         \
              if (v == 0 && p < 1) continue;                                             \
              o[k] += (T)((v > 0) - (v < 0)) * POW(ABS(v), p - 1) * gc / den;            \
            }                                                                            \
            break;                                                                       \
          }                                                                              \
          default: {                                                                     \
            if (dc == 0) break;                                                          \
            T den = POW(dc, p - 1);                                                      \
            for (int64_t k = 0; k < M; ++k) {                                            \
              T v = x[k] - y[k];                                                         \
              o[k] += v * POW(ABS(v), p - 2) * gc / den;                                 \
            }                                                                            \
            break;                                                                       \
          }                                                                              \
        }                                                                                \
      }                                                                                  \
    }                                                                                    \
  }
DIST_LOOPS(F32, float, fabsf, powf, sqrtf)
DIST_LOOPS(F64, double, fabs, pow, sqrt)
#undef DIST_LOOPS

typedef void (*dist_loop_fn)(void* arg, int64_t begin, int64_t end);
static const dist_loop_fn k_fwd[TPU_COMPUTE_COUNT] = {[TPU_COMPUTE_F32] = fwd_F32,
                                                     [TPU_COMPUTE_F64] = fwd_F64};
static const dist_loop_fn k_bwd[TPU_COMPUTE_COUNT] = {[TPU_COMPUTE_F32] = bwd_F32,
                                                     [TPU_COMPUTE_F64] = bwd_F64};

/* ---- the kernel ------------------------------------------------------------------- */

static int64_t grain_for(int64_t per_row) {
  return per_row >= DIST_GRAIN_WORK ? 1 : DIST_GRAIN_WORK / (per_row > 0 ? per_row : 1);
}

/* The full [batch, r1, r2] distances of packed x1 / transposed x2 into out. */
static void run_forward(const dist_args_t* a, tpu_dtype_t dt, const void* x1, const void* x2t,
                        void* out) {
  dist_job_t j = {a, tpu_dist_mode(a->p), a->p, x1, x2t, NULL, NULL, out};
  tpu_parallel_for(a->batch * a->r1, grain_for(a->r2 * a->m), k_fwd[tpu_dtype_compute(dt)], &j);
}

static void run_backward(const dist_args_t* a, tpu_dtype_t dt, const void* x1, const void* x2,
                         const void* g, const void* d, void* out) {
  dist_job_t j = {a, tpu_dist_mode(a->p), a->p, x1, x2, g, d, out};
  tpu_parallel_for(a->batch * a->r1, grain_for(a->r2 * a->m), k_bwd[tpu_dtype_compute(dt)], &j);
}

static tpu_status_t distance_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                    tpu_exec_ctx_t* ctx) {
  (void)ctx;
  dist_args_t a;
  TPU_RETURN_IF_ERROR(tpu_dist_parse(def, node, &a));
  if (node->num_outputs < 1 || !views_same_shape(&node->outputs[0], &a.shape))
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output has the wrong shape");
  const tpu_view_t* out = &node->outputs[0];
  if (tpu_view_numel(out) == 0) return TPU_OK;
  tpu_dtype_t dt = a.shape.dtype;
  size_t es = tpu_dtype_size(dt);
  int64_t n1 = a.batch * a.r1 * a.m, n2 = a.batch * a.r2 * a.m, nd = a.batch * a.r1 * a.r2;
  bool pd = a.kind == DIST_PDIST || a.kind == DIST_PDIST_BACKWARD;
  bool bwd = a.kind == DIST_CDIST_BACKWARD || a.kind == DIST_PDIST_BACKWARD;
  int64_t nout = bwd ? n1 : nd;
  char* mem = (char*)malloc(es * (size_t)(n1 + n2 + nout + (bwd ? 2 * nd : 0)));
  if (!mem) TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for distance buffers");
  char *x1 = mem, *x2 = x1 + es * n1, *res = x2 + es * n2, *g = res + es * nout, *d = g + es * nd;
  pack(&a, a.x1, dt, false, x1);
  pack(&a, a.x2, dt, !bwd, x2);
  if (!bwd) {
    run_forward(&a, dt, x1, x2, res);
    if (!pd) {
      tpu_view_t r = view_of(res, dt, a.shape.ndim, a.shape.sizes);
      view_copy(out, &r);
    } else { /* the upper triangle, row by row */
      int64_t n = a.r1, k = 0;
      for (int64_t i = 0; i + 1 < n; ++i) {
        tpu_view_t src = view_of(res + es * (i * n + i + 1), dt, 1, &(int64_t){n - i - 1});
        tpu_view_t dst = *out;
        dst.addr += (uint64_t)(k * out->strides[0]) * es;
        dst.sizes[0] = n - i - 1;
        view_copy(&dst, &src);
        k += n - i - 1;
      }
    }
  } else {
    if (!pd) {
      pack_flat(a.grad, dt, g);
      pack_flat(a.dist, dt, d);
    } else { /* symmetric [n, n] gradient and distances, zero diagonal */
      int64_t n = a.r1;
      char *gc = (char*)malloc(es * (size_t)(2 * (nd > 0 ? nd : 1)));
      if (!gc) {
        free(mem);
        TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for distance buffers");
      }
      int64_t np = n * (n - 1) / 2;
      pack_flat(a.grad, dt, gc);
      pack_flat(a.dist, dt, gc + es * np);
      memset(g, 0, es * (size_t)nd);
      memset(d, 0, es * (size_t)nd);
      for (int64_t i = 0, k = 0; i < n; ++i)
        for (int64_t c = i + 1; c < n; ++c, ++k) {
          memcpy(g + es * (i * n + c), gc + es * k, es);
          memcpy(g + es * (c * n + i), gc + es * k, es);
          memcpy(d + es * (i * n + c), gc + es * (np + k), es);
          memcpy(d + es * (c * n + i), gc + es * (np + k), es);
        }
      free(gc);
    }
    run_backward(&a, dt, x1, x2, g, d, res);
    tpu_view_t r = view_of(res, dt, a.shape.ndim, a.shape.sizes);
    view_copy(out, &r);
  }
  free(mem);
  return TPU_OK;
}

static tpu_status_t distance_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                   tpu_view_t* outs) {
  dist_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_dist_parse(def, node, &a)));
  outs[0] = a.shape;
  return TPU_OK;
}

static tpu_status_t distance_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  dist_args_t a;
  return ku_unimplemented(tpu_dist_parse(def, node, &a));
}

static const dist_spec_t k_cdist = {DIST_CDIST}, k_cdist_bwd = {DIST_CDIST_BACKWARD},
                         k_pdist = {DIST_PDIST}, k_pdist_bwd = {DIST_PDIST_BACKWARD};

#define DIST_ROW(name_, inputs_, attrs_, aten_, spec) \
  {.name = name_, .inputs = inputs_, .attrs = attrs_, .outputs = "out", .aten = aten_, \
   .kernel = distance_kernel, .infer = distance_infer, .check = distance_check, .impl = &spec}

static const tpu_op_def_t k_rows[] = {
    DIST_ROW("cdist_forward", "x1,x2", "p,compute_mode", "_cdist_forward _cdist_forward.out",
             k_cdist),
    DIST_ROW("cdist_backward", "grad_output,x1,x2,cdist", "p",
             "_cdist_backward _cdist_backward.out", k_cdist_bwd),
    DIST_ROW("pdist_forward", "self", "p", "_pdist_forward _pdist_forward.out", k_pdist),
    DIST_ROW("pdist_backward", "grad_output,self,pdist", "p",
             "_pdist_backward _pdist_backward.out", k_pdist_bwd),
};

const tpu_op_family_t tpu_family_distance = {"distance", k_rows,
                                             (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
