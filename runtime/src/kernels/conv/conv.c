/* conv.c — the convolution family: convolution, convolution_backward,
 * im2col, col2im (geometry and the X/Y/W formulation: conv.h).
 * convolution_backward's gradients masked off by output_mask are absent
 * (undefined tensors, as on the CPU): neither allocated nor written.
 *
 * Operands are first made contiguous in the compute type (float32 for the
 * half types, float64, or int64 held as uint64 so integer sums wrap as
 * PyTorch's do): a float32/float64 tensor that already is contiguous NC...
 * is used in place, others (half types, channels_last or any strides) are
 * converted once by view_copy; an output that is not such a tensor (or
 * overlaps an input) is computed in scratch and converted into it. So a
 * half-type result is rounded once, when it is stored: no column sum,
 * col2im accumulation or bias add is rounded to the half type on the way
 * (PyTorch's CPU rounds float16 column sums on machines without AVX-512
 * FP16; tests judge such differences against float64).
 *
 * The products run as GEMMs (OpenBLAS sgemm/dgemm, single-threaded, or a
 * plain wrapping loop for integers) over blocks of grid positions (columns):
 *   CONV_Y  units (n, group, column block): im2col of the block, one GEMM
 *           (1x1: whole samples, no im2col);
 *   CONV_X  units (n, group, channel block): per column block one GEMM into
 *           columns, then col2im adds them into the unit's own channels;
 *   CONV_W  chunks of (n, column block) items, each accumulating a private
 *           copy of dW, summed at the end.
 * A 1x1 window with stride 1 and no padding skips im2col (the image is the
 * column matrix). Float32 3x3 windows with stride and dilation 1, enough
 * channels and at least 64 output tiles per sample run Winograd's F(2x2, 3x3)
 * instead (conv_winograd.c), for CONV_Y,
 * CONV_X and CONV_W alike. Depthwise problems (one image and one grid channel per
 * group) run direct loops over rows instead of GEMMs. Units are spread over
 * tpu_parallel_for; tiny problems stay on one thread.
 *
 * bfloat16 convolutions go to the matrix unit first (conv_mxu.c); what it
 * declines or leaves (grad_bias alone, a transposed bias gradient) runs here.
 *
 * Files: conv_parse.c (argument checks, shapes), conv_loops.h (the typed
 * loops), conv_ref.c (the reference), conv_mxu.c (the matrix unit's
 * convolution primitives), conv_mxu_1x1.c (its 1x1 products as GEMMs on
 * NCHW), this file (plans, kernels, rows).
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv/conv.h"
#include "kernels/common/kernel_util.h"

#ifdef TPU_HAVE_OPENBLAS
#include <cblas.h>
#endif

#define CONV_SMALL_WORK (1 << 18) /* multiply-adds below which work stays on one thread */
#define CONV_COLS_TARGET (1 << 20) /* elements of one column block of im2col for CONV_W */
                                   /* (GEMMs re-pack the weight per block: blocks stay large) */
/* CONV_Y: column blocks (of the image itself when pointwise) of about 1 MiB
 * of float32, so the GEMM's packed B panel and the block of output stay in
 * L2 (OpenBLAS sgemm runs ~10% faster there than on 4 MiB blocks). */
#define CONV_Y_COLS (1 << 18)
/* The 1x1 micro-kernel's range: positions per sample (8 full panels), and
 * weight elements (256 KiB of float32, its transpose stays in L2). */
#define CONV_PW_MIN_POSITIONS 384
#define CONV_PW_MAX_WEIGHT (1 << 16)

#include "kernels/conv/conv_loops.h"

CONV_TYPED(float, f32, float, )
CONV_TYPED(double, f64, double, )
CONV_TYPED(uint64_t, u64, uint64_t, )
/* The same loops built for AVX2 (the default build targets baseline x86-64),
 * chosen at run time; with floating-point contraction off (ISO C mode) they
 * compute the same values. */
#define CONV_AVX2 __attribute__((target("avx2")))
CONV_TYPED(float, f32_avx2, float, CONV_AVX2)
CONV_TYPED(double, f64_avx2, double, CONV_AVX2)

/* ---- GEMMs ------------------------------------------------------------------------ */

#ifdef TPU_HAVE_OPENBLAS
#define CONV_T(t) ((t) ? CblasTrans : CblasNoTrans)
static void gemm_f32(bool ta, bool tb, int m, int n, int k, const void* a, int lda, const void* b,
                     int ldb, int beta, void* c, int ldc) {
  scipy_cblas_sgemm(CblasRowMajor, CONV_T(ta), CONV_T(tb), m, n, k, 1.0f, a, lda, b, ldb,
                    (float)beta, c, ldc);
}
static void gemm_f64(bool ta, bool tb, int m, int n, int k, const void* a, int lda, const void* b,
                     int ldb, int beta, void* c, int ldc) {
  scipy_cblas_dgemm(CblasRowMajor, CONV_T(ta), CONV_T(tb), m, n, k, 1.0, a, lda, b, ldb,
                    (double)beta, c, ldc);
}
#undef CONV_T
static void blas_init(void) { scipy_openblas_set_num_threads(1); }
#endif

/* Integers: row-major C = op(A) op(B) (+ C), wrapping. */
static void gemm_u64(bool ta, bool tb, int m, int n, int k, const void* av, int lda,
                     const void* bv, int ldb, int beta, void* cv, int ldc) {
  const uint64_t *a = (const uint64_t*)av, *b = (const uint64_t*)bv;
  uint64_t* c = (uint64_t*)cv;
  for (int i = 0; i < m; ++i) {
    uint64_t* cr = c + (int64_t)i * ldc;
    if (!beta) memset(cr, 0, sizeof(uint64_t) * (size_t)n);
    for (int kk = 0; kk < k; ++kk) {
      uint64_t x = ta ? a[(int64_t)kk * lda + i] : a[(int64_t)i * lda + kk];
      if (!x) continue;
      if (!tb) {
        const uint64_t* br = b + (int64_t)kk * ldb;
        for (int j = 0; j < n; ++j) cr[j] += x * br[j];
      } else {
        for (int j = 0; j < n; ++j) cr[j] += x * b[(int64_t)j * ldb + kk];
      }
    }
  }
}

#define CONV_OPS(SFX, GEMM)                                                                 \
  {GEMM,        im2col_##SFX, col2im_##SFX, add_rows_##SFX, fill_##SFX,     dw_y_##SFX,     \
   dw_x_##SFX,  dw_w_##SFX,   dwp_y_##SFX,  dwp_x_##SFX,    dwp_w_##SFX,    sum_rows_##SFX, \
   sum_##SFX,   fold_##SFX,   from_double_##SFX}

#ifdef TPU_HAVE_OPENBLAS
static const conv_ops_t k_ops_by_type[TPU_COMPUTE_COUNT] = {
    [TPU_COMPUTE_F32] = CONV_OPS(f32, gemm_f32),
    [TPU_COMPUTE_F64] = CONV_OPS(f64, gemm_f64),
    [TPU_COMPUTE_I64] = CONV_OPS(u64, gemm_u64),
};
static const conv_ops_t k_ops_avx2[TPU_COMPUTE_COUNT] = {
    [TPU_COMPUTE_F32] = CONV_OPS(f32_avx2, gemm_f32),
    [TPU_COMPUTE_F64] = CONV_OPS(f64_avx2, gemm_f64),
    [TPU_COMPUTE_I64] = CONV_OPS(u64, gemm_u64),
};
#else
static const conv_ops_t k_ops_by_type[TPU_COMPUTE_COUNT] = {
    [TPU_COMPUTE_I64] = CONV_OPS(u64, gemm_u64),
};
static const conv_ops_t k_ops_avx2[TPU_COMPUTE_COUNT] = {
    [TPU_COMPUTE_I64] = CONV_OPS(u64, gemm_u64),
};
#endif

static const conv_ops_t* ops_for(tpu_compute_type_t ct) {
  static atomic_int avx2 = -1;
  int v = atomic_load(&avx2);
  if (v < 0) atomic_store(&avx2, v = __builtin_cpu_supports("avx2") ? 1 : 0);
  return v ? &k_ops_avx2[ct] : &k_ops_by_type[ct];
}

/* ---- operands ------------------------------------------------------------------------ */

/* A tensor as a contiguous compute-type buffer: in place when it is one. */
typedef struct operand {
  const tpu_view_t* view;
  char* p;
  void* own;
} operand_t;

static tpu_status_t load(const tpu_view_t* v, tpu_dtype_t work, operand_t* o) {
  o->view = v;
  o->own = NULL;
  if (v->dtype == work && tpu_view_is_contiguous(v)) {
    o->p = (char*)tpu_view_ptr(v);
    return TPU_OK;
  }
  int64_t n = tpu_view_numel(v);
  o->own = malloc((size_t)(n > 0 ? n : 1) * tpu_dtype_size(work));
  if (!o->own) TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "convolution scratch allocation failed");
  o->p = (char*)o->own;
  tpu_view_t dst = view_of(o->own, work, v->ndim, v->sizes);
  view_copy(&dst, v);
  return TPU_OK;
}

/* An output: written in place when it is a contiguous compute-type tensor
 * overlapping none of `inputs`, else in scratch (store() copies it out). */
static tpu_status_t prepare(const tpu_view_t* v, tpu_dtype_t work, const tpu_view_t* const* inputs,
                            int n_inputs, operand_t* o) {
  o->view = v;
  o->own = NULL;
  bool direct = v->dtype == work && tpu_view_is_contiguous(v);
  for (int i = 0; direct && i < n_inputs; ++i)
    direct = !inputs[i] || !views_overlap(v, inputs[i]);
  if (direct) {
    o->p = (char*)tpu_view_ptr(v);
    return TPU_OK;
  }
  int64_t n = tpu_view_numel(v);
  o->own = malloc((size_t)(n > 0 ? n : 1) * tpu_dtype_size(work));
  if (!o->own) TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "convolution scratch allocation failed");
  o->p = (char*)o->own;
  return TPU_OK;
}

static void store(operand_t* o, tpu_dtype_t work) {
  if (!o->own) return;
  tpu_view_t src = view_of(o->own, work, o->view->ndim, o->view->sizes);
  view_copy(o->view, &src);
}

static void release(operand_t* o) {
  free(o->own);
  o->own = NULL;
}

/* ---- plans ------------------------------------------------------------------------------ */

typedef struct plan {
  const conv_geom_t* g;
  const conv_ops_t* ops;
  int64_t esz, pS, pG, pK;
  char *x, *y, *w;  /* X, Y, W buffers (read or written per product) */
  const char* bias; /* over Y's channels (CONV_Y) or X's (CONV_X), or NULL */
  bool pointwise;   /* 1x1 window, stride 1, no padding: im2col is the identity */
  float* wt;        /* CONV_Y pointwise float32: Wᵀ per group for tpu_conv_pw_f32, or NULL */
  bool f32;         /* float32 compute type */
  int64_t plane;    /* depthwise plane form: scratch elements (0: row loops) */
  int64_t jb, nj;   /* column block and blocks per (n, group) */
  int64_t cb, ncb;  /* CONV_X: channel block and blocks per (n, group) */
  int64_t chunks, items; /* CONV_W */
  char* partial;    /* CONV_W: one dW per chunk */
  atomic_int failed;
} plan_t;

static char* x_at(const plan_t* p, int64_t n, int64_t grp) {
  return p->x + ((n * p->g->groups + grp) * p->g->cx) * p->pS * p->esz;
}
static char* y_at(const plan_t* p, int64_t n, int64_t grp) {
  return p->y + ((n * p->g->groups + grp) * p->g->cy) * p->pG * p->esz;
}
static char* w_at(const plan_t* p, char* w, int64_t grp) {
  return w + grp * p->g->cy * p->g->cx * p->pK * p->esz;
}

/* Scratch of one pool chunk, grown on demand. */
typedef struct buf {
  void* p;
  size_t cap;
} buf_t;

static void* buf_get(buf_t* b, int64_t bytes) {
  if (b->cap < (size_t)bytes + 64) {
    free(b->p);
    b->p = malloc((size_t)bytes + 64);
    b->cap = b->p ? (size_t)bytes + 64 : 0;
  }
  return b->p;
}

static bool is_pointwise(const conv_geom_t* g) {
  for (int d = 0; d < 3; ++d)
    if (g->K[d] != 1 || g->stride[d] != 1 || g->pad[d] != 0) return false;
  return true;
}

static int64_t grain_for(int64_t unit_work) {
  return unit_work >= CONV_SMALL_WORK ? 1 : CONV_SMALL_WORK / (unit_work > 0 ? unit_work : 1);
}

static void init_plan(plan_t* p, const conv_geom_t* g, tpu_compute_type_t ct) {
  memset(p, 0, sizeof(*p));
  p->g = g;
  p->ops = ops_for(ct);
  p->esz = (int64_t)tpu_compute_size(ct);
  p->pS = prod3(g->S), p->pG = prod3(g->G), p->pK = prod3(g->K);
  p->pointwise = is_pointwise(g);
  p->f32 = ct == TPU_COMPUTE_F32;
  /* depthwise plane form: stride 1, at most 2-D, modest planes */
  int64_t Wp = g->S[2] + 2 * g->pad[2], Hp = g->S[1] + 2 * g->pad[1];
  if (g->K[0] == 1 && g->S[0] == 1 && g->stride[1] == 1 && g->stride[2] == 1 &&
      Hp * Wp <= (1 << 20) && p->pK <= 64)
    p->plane = Hp * Wp + (g->K[2] - 1) * g->dil[2] + g->G[1] * Wp;
  atomic_init(&p->failed, 0);
}

/* Column blocks of about `target` elements of the column matrix each (the
 * image itself when pointwise: whole samples when target is 0), smaller
 * while there are fewer than two units per thread. */
static void set_blocks(plan_t* p, int64_t target) {
  const conv_geom_t* g = p->g;
  int64_t rows = g->cx * p->pK > 0 ? g->cx * p->pK : 1;
  int64_t jb = p->pointwise && !target ? max64(p->pG, 1)
                                       : (max64(64, target / rows) + 15) / 16 * 16;
  int64_t threads = tpu_parallel_threads(), outer = g->n * g->groups;
  while (jb > 32 && outer * ((p->pG + jb - 1) / jb) < 2 * threads) jb /= 2;
  p->jb = min64(jb, max64(p->pG, 1));
  p->nj = (p->pG + p->jb - 1) / p->jb;
}

/* CONV_Y: Y = W @ im2col(X) (+ bias), units (n, group, column block). */
static void conv_y_units(void* arg, int64_t begin, int64_t end) {
  plan_t* p = (plan_t*)arg;
  const conv_geom_t* g = p->g;
  buf_t cols = {0};
  int64_t k = g->cx * p->pK;
  for (int64_t u = begin; u < end; ++u) {
    int64_t n = u / (g->groups * p->nj), grp = (u / p->nj) % g->groups, j0 = (u % p->nj) * p->jb;
    int64_t jn = min64(p->jb, p->pG - j0);
    char* yc = y_at(p, n, grp) + j0 * p->esz;
    const char* bias = p->bias ? p->bias + grp * g->cy * p->esz : NULL;
    if (k == 0 || g->cy == 0) {
      p->ops->fill(yc, g->cy, jn, p->pG, bias);
      continue;
    }
    if (p->wt) {
      tpu_conv_pw_f32(p->wt + grp * g->cy * k, (const float*)x_at(p, n, grp) + j0, p->pS,
                      (float*)yc, p->pG, g->cy, k, jn, (const float*)bias);
      continue;
    }
    const char* b = x_at(p, n, grp) + j0 * p->esz;
    int ldb = (int)p->pS;
    if (!p->pointwise) {
      void* c = buf_get(&cols, k * jn * p->esz);
      if (!c) {
        atomic_store(&p->failed, 1);
        break;
      }
      p->ops->im2col(g, x_at(p, n, grp), 0, g->cx, j0, jn, c);
      b = c, ldb = (int)jn;
    }
    p->ops->gemm(false, false, (int)g->cy, (int)jn, (int)k, w_at(p, p->w, grp), (int)k, b, ldb,
                 0, yc, (int)p->pG);
    /* the bias while the block is still in cache (the same sum as a GEMM
     * with beta 1 over a bias fill: the product, then the bias) */
    if (bias) p->ops->add_rows(yc, g->cy, jn, p->pG, bias);
  }
  free(cols.p);
}

/* CONV_X: X = col2im(W^T @ Y) (+ bias), units (n, group, channel block).
 * As PyTorch's CPU kernels: one GEMM into the columns of every position,
 * col2im adding rows in order, the bias last (so sums are formed in the
 * same order). */
static void conv_x_units(void* arg, int64_t begin, int64_t end) {
  plan_t* p = (plan_t*)arg;
  const conv_geom_t* g = p->g;
  buf_t cols = {0};
  for (int64_t u = begin; u < end; ++u) {
    int64_t n = u / (g->groups * p->ncb), grp = (u / p->ncb) % g->groups;
    int64_t c0 = (u % p->ncb) * p->cb, c1 = min64(g->cx, c0 + p->cb), nc = c1 - c0;
    char* xg = x_at(p, n, grp);
    char* img = xg + c0 * p->pS * p->esz;
    p->ops->fill(img, nc, p->pS, p->pS, NULL);
    if (g->cy > 0 && nc > 0) {
      const char* yg = y_at(p, n, grp);
      const char* wg = w_at(p, p->w, grp);
      int lda = (int)(g->cx * p->pK);
      if (p->pointwise) {
        p->ops->gemm(true, false, (int)nc, (int)p->pG, (int)g->cy, wg + c0 * p->esz, lda, yg,
                     (int)p->pG, 1, img, (int)p->pS);
      } else {
        void* c = buf_get(&cols, nc * p->pK * p->pG * p->esz);
        if (!c) {
          atomic_store(&p->failed, 1);
          break;
        }
        p->ops->gemm(true, false, (int)(nc * p->pK), (int)p->pG, (int)g->cy,
                     wg + c0 * p->pK * p->esz, lda, yg, (int)p->pG, 0, c, (int)p->pG);
        p->ops->col2im(g, xg, c0, c1, 0, p->pG, c);
      }
    }
    if (p->bias) {
      p->ops->add_rows(img, nc, p->pS, p->pS, p->bias + (grp * g->cx + c0) * p->esz);
    }
  }
  free(cols.p);
}

/* CONV_W: each chunk sums Y @ im2col(X)^T over its (n, column block) items
 * into its own copy of dW. */
static void conv_w_chunks(void* arg, int64_t begin, int64_t end) {
  plan_t* p = (plan_t*)arg;
  const conv_geom_t* g = p->g;
  int64_t wsize = g->groups * g->cy * g->cx * p->pK, k = g->cx * p->pK;
  buf_t cols = {0};
  for (int64_t ch = begin; ch < end; ++ch) {
    char* part = p->partial + ch * wsize * p->esz;
    memset(part, 0, (size_t)(wsize * p->esz));
    int64_t i0 = ch * p->items / p->chunks, i1 = (ch + 1) * p->items / p->chunks;
    for (int64_t it = i0; it < i1 && k > 0 && g->cy > 0; ++it) {
      int64_t n = it / p->nj, j0 = (it % p->nj) * p->jb, jn = min64(p->jb, p->pG - j0);
      for (int64_t grp = 0; grp < g->groups; ++grp) {
        const char* b = x_at(p, n, grp) + j0 * p->esz;
        int ldb = (int)p->pS;
        if (!p->pointwise) {
          void* c = buf_get(&cols, k * jn * p->esz);
          if (!c) {
            atomic_store(&p->failed, 1);
            free(cols.p);
            return;
          }
          p->ops->im2col(g, x_at(p, n, grp), 0, g->cx, j0, jn, c);
          b = c, ldb = (int)jn;
        }
        p->ops->gemm(false, true, (int)g->cy, (int)k, (int)jn, y_at(p, n, grp) + j0 * p->esz,
                     (int)p->pG, b, ldb, 1, w_at(p, part, grp), (int)k);
      }
    }
  }
  free(cols.p);
}

/* Sums the chunks' partial dWs into p->w, over ranges of elements. */
static void conv_w_reduce(void* arg, int64_t begin, int64_t end) {
  plan_t* p = (plan_t*)arg;
  int64_t wsize = p->g->groups * p->g->cy * p->g->cx * p->pK;
  p->ops->sum_rows(p->w + begin * p->esz, p->partial + begin * p->esz, p->chunks, wsize,
                   end - begin);
}

/* Depthwise (cx == cy == 1): units (n, channel) for Y and X, channels for W. */
static void* plane_scratch(plan_t* p) {
  if (!p->plane) return NULL;
  void* s = malloc((size_t)(p->plane * p->esz));
  if (!s) atomic_store(&p->failed, 1);
  return s;
}

static void dw_y_units(void* arg, int64_t begin, int64_t end) {
  plan_t* p = (plan_t*)arg;
  void* scratch = plane_scratch(p);
  if (p->plane && !scratch) return;
  for (int64_t u = begin; u < end; ++u) {
    int64_t n = u / p->g->groups, c = u % p->g->groups;
    char* y = y_at(p, n, c);
    p->ops->fill(y, 1, p->pG, p->pG, p->bias ? p->bias + c * p->esz : NULL);
    if (scratch) p->ops->dwp_y(p->g, x_at(p, n, c), w_at(p, p->w, c), y, scratch);
    else p->ops->dw_y(p->g, x_at(p, n, c), w_at(p, p->w, c), y);
  }
  free(scratch);
}

static void dw_x_units(void* arg, int64_t begin, int64_t end) {
  plan_t* p = (plan_t*)arg;
  void* scratch = plane_scratch(p);
  if (p->plane && !scratch) return;
  for (int64_t u = begin; u < end; ++u) {
    int64_t n = u / p->g->groups, c = u % p->g->groups;
    char* x = x_at(p, n, c);
    p->ops->fill(x, 1, p->pS, p->pS, NULL);
    if (scratch) p->ops->dwp_x(p->g, x, w_at(p, p->w, c), y_at(p, n, c), scratch);
    else p->ops->dw_x(p->g, x, w_at(p, p->w, c), y_at(p, n, c));
    if (p->bias) p->ops->add_rows(x, 1, p->pS, p->pS, p->bias + c * p->esz);
  }
  free(scratch);
}

static void dw_w_units(void* arg, int64_t begin, int64_t end) {
  plan_t* p = (plan_t*)arg;
  double* acc = (double*)malloc(sizeof(double) * (size_t)p->pK);
  void* rows = malloc((size_t)(p->pK * p->g->G[2] * p->esz));
  if (!acc || !rows) {
    atomic_store(&p->failed, 1);
    free(acc), free(rows);
    return;
  }
  void* scratch = plane_scratch(p);
  /* plane form: per-tap rows of G1 * Wp lanes, summed over the batch */
  int64_t lanes = p->g->G[1] * (p->g->S[2] + 2 * p->g->pad[2]);
  void* prow = scratch ? malloc((size_t)(p->pK * lanes * p->esz)) : NULL;
  if (scratch && !prow) {
    atomic_store(&p->failed, 1);
    free(acc), free(rows), free(scratch);
    return;
  }
  for (int64_t c = begin; c < end; ++c) {
    memset(acc, 0, sizeof(double) * (size_t)p->pK);
    if (prow) {
      memset(prow, 0, (size_t)(p->pK * lanes * p->esz));
      for (int64_t n = 0; n < p->g->n; ++n)
        p->ops->dwp_w(p->g, x_at(p, n, c), y_at(p, n, c), prow, scratch);
      for (int64_t k = 0; k < p->pK; ++k)
        acc[k] = p->ops->fold((char*)prow + k * lanes * p->esz, lanes);
    } else {
      for (int64_t n = 0; n < p->g->n; ++n)
        p->ops->dw_w(p->g, x_at(p, n, c), acc, y_at(p, n, c), rows);
    }
    p->ops->from_double(w_at(p, p->w, c), acc, p->pK);
  }
  free(acc), free(rows), free(scratch), free(prow);
}

static bool is_depthwise(const plan_t* p) {
  return p->g->cx == 1 && p->g->cy == 1 && p->g->groups > 1 && !p->pointwise;
}

static tpu_status_t finish(plan_t* p) {
  if (atomic_load(&p->failed))
    TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "convolution scratch allocation failed");
  return TPU_OK;
}

/* Winograd F(2x2, 3x3) (conv_winograd.c) for float32 2-D 3x3 windows with
 * stride and dilation 1, when it fits, in direction `dir`: CONV_Y (Y from
 * X), CONV_X (X from Y: a correlation of Y with the flipped weight, padded by
 * 2 - pad) or CONV_W (dW from X and Y). Returns false (nothing done) when the
 * problem does not qualify. */
enum { WINO_Y, WINO_X, WINO_W };
static bool try_winograd(plan_t* p, int dir, tpu_status_t* s) {
  const conv_geom_t* g = p->g;
  if (!p->f32 || g->K[0] != 1 || g->K[1] != 3 || g->K[2] != 3 ||
      g->S[0] != 1 || g->G[0] != 1 || g->pad[0] != 0)
    return false;
  for (int d = 1; d < 3; ++d)
    if (g->stride[d] != 1 || g->dil[d] != 1) return false;
  tpu_conv_wino_t w = {.n = g->n, .groups = g->groups, .w = (const float*)p->w,
                       .bias = (const float*)p->bias, .flip = dir == WINO_X};
  if (dir == WINO_X) {
    w.ci = g->cy, w.co = g->cx, w.H = g->G[1], w.W = g->G[2], w.Ho = g->S[1], w.Wo = g->S[2];
    w.pad_h = 2 - g->pad[1], w.pad_w = 2 - g->pad[2];
    w.in = (const float*)p->y, w.out = (float*)p->x;
  } else {
    w.ci = g->cx, w.co = g->cy, w.H = g->S[1], w.W = g->S[2], w.Ho = g->G[1], w.Wo = g->G[2];
    w.pad_h = g->pad[1], w.pad_w = g->pad[2];
    w.in = (const float*)p->x, w.out = (float*)p->y;
  }
  if (dir == WINO_W) w.w = NULL, w.bias = NULL, w.gout = (const float*)p->y, w.out = (float*)p->w;
  if (!tpu_conv_winograd_fits(&w)) return false;
  *s = dir == WINO_W ? tpu_conv_winograd_dw(&w) : tpu_conv_winograd(&w);
  return true;
}

static tpu_status_t run_y(plan_t* p) {
  const conv_geom_t* g = p->g;
  tpu_status_t ws;
  if (try_winograd(p, WINO_Y, &ws)) return ws;
  if (is_depthwise(p)) {
    tpu_parallel_for(g->n * g->groups, grain_for(p->pG * p->pK), dw_y_units, p);
    return finish(p);
  }
  set_blocks(p, CONV_Y_COLS);
  /* The micro-kernel sweeps its weight once per 48-position panel: it wins
   * on large images with small weights (a ResNet bottleneck's 256->64 at
   * 56x56), and loses up to 5x to sgemm on small grids with large weights
   * (512->2048 at 7x7: 6.5 against 1.3 ms), where panels are few and the
   * weight does not stay in L2. */
  if (p->pointwise && p->f32 && g->cx > 0 && g->cy > 0 && p->pG >= CONV_PW_MIN_POSITIONS &&
      g->cx * g->cy <= CONV_PW_MAX_WEIGHT && tpu_conv_pw_f32_available()) {
    /* the 1x1 micro-kernel (conv_pointwise.c) broadcasts from Wᵀ: pack it once */
    int64_t per = g->cy * g->cx;
    p->wt = (float*)malloc((size_t)(g->groups * per) * sizeof(float) + 64);
    if (!p->wt) TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "convolution scratch allocation failed");
    /* in 32 x 32 tiles: a row-by-row transpose of a large weight misses
     * the cache on every store (7 ms for 2048 x 512, more than the GEMM) */
    const float* w = (const float*)p->w;
    for (int64_t grp = 0; grp < g->groups; ++grp)
      for (int64_t co0 = 0; co0 < g->cy; co0 += 32)
        for (int64_t c0 = 0; c0 < g->cx; c0 += 32)
          for (int64_t co = co0; co < min64(co0 + 32, g->cy); ++co)
            for (int64_t c = c0; c < min64(c0 + 32, g->cx); ++c)
              p->wt[grp * per + c * g->cy + co] = w[grp * per + co * g->cx + c];
  }
  int64_t units = g->n * g->groups * p->nj;
  tpu_parallel_for(units, grain_for(g->cy * p->jb * g->cx * p->pK), conv_y_units, p);
  free(p->wt);
  p->wt = NULL;
  return finish(p);
}

static tpu_status_t run_x(plan_t* p) {
  const conv_geom_t* g = p->g;
  tpu_status_t ws;
  if (try_winograd(p, WINO_X, &ws)) return ws;
  if (is_depthwise(p)) {
    tpu_parallel_for(g->n * g->groups, grain_for(p->pG * p->pK), dw_x_units, p);
    return finish(p);
  }
  int64_t threads = tpu_parallel_threads(), outer = g->n * g->groups;
  if (outer == 0) return TPU_OK;
  p->ncb = outer >= 2 * threads ? 1 : min64(max64(g->cx, 1), (2 * threads + outer - 1) / outer);
  p->cb = (max64(g->cx, 1) + p->ncb - 1) / p->ncb;
  p->ncb = (max64(g->cx, 1) + p->cb - 1) / p->cb;
  tpu_parallel_for(outer * p->ncb, grain_for(g->cy * p->pG * p->cb * p->pK), conv_x_units, p);
  return finish(p);
}

static tpu_status_t run_w(plan_t* p) {
  const conv_geom_t* g = p->g;
  int64_t wsize = g->groups * g->cy * g->cx * p->pK;
  tpu_status_t ws;
  if (try_winograd(p, WINO_W, &ws)) return ws;
  if (is_depthwise(p)) {
    tpu_parallel_for(g->groups, grain_for(g->n * p->pG * p->pK), dw_w_units, p);
    return finish(p);
  }
  set_blocks(p, p->pointwise ? 0 : CONV_COLS_TARGET);
  p->items = g->n * p->nj;
  int64_t work = wsize * p->pG * g->n;
  p->chunks = min64(min64(p->items, tpu_parallel_threads()), max64(1, work / CONV_SMALL_WORK));
  if (p->chunks < 1) p->chunks = 1;
  p->partial = (char*)malloc((size_t)(p->chunks * wsize * p->esz + 64));
  if (!p->partial) TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "convolution scratch allocation failed");
  tpu_parallel_for(p->chunks, 1, conv_w_chunks, p);
  if (!atomic_load(&p->failed)) tpu_parallel_for(wsize, WALK_GRAIN, conv_w_reduce, p);
  free(p->partial);
  p->partial = NULL;
  return finish(p);
}

/* grad_bias[c] = sum over n and positions of grad_output[n, c]. */
typedef struct bias_job {
  const conv_ops_t* ops;
  const char* go;
  int64_t n, c, inner, esz;
  double* out;
} bias_job_t;

static void bias_channels(void* arg, int64_t begin, int64_t end) {
  bias_job_t* j = (bias_job_t*)arg;
  for (int64_t c = begin; c < end; ++c) {
    double s = 0;
    for (int64_t n = 0; n < j->n; ++n)
      s += j->ops->sum(j->go + ((n * j->c + c) * j->inner) * j->esz, j->inner);
    j->out[c] = s;
  }
}

/* im2col / col2im: units (n, channel block); Y is the column matrix. */
static void im2col_units(void* arg, int64_t begin, int64_t end) {
  plan_t* p = (plan_t*)arg;
  for (int64_t u = begin; u < end; ++u) {
    int64_t n = u / p->ncb, c0 = (u % p->ncb) * p->cb, c1 = min64(p->g->cx, c0 + p->cb);
    p->ops->im2col(p->g, x_at(p, n, 0), c0, c1, 0, p->pG,
                   y_at(p, n, 0) + c0 * p->pK * p->pG * p->esz);
  }
}

static void col2im_units(void* arg, int64_t begin, int64_t end) {
  plan_t* p = (plan_t*)arg;
  for (int64_t u = begin; u < end; ++u) {
    int64_t n = u / p->ncb, c0 = (u % p->ncb) * p->cb, c1 = min64(p->g->cx, c0 + p->cb);
    char* x = x_at(p, n, 0);
    p->ops->fill(x + c0 * p->pS * p->esz, c1 - c0, p->pS, p->pS, NULL);
    p->ops->col2im(p->g, x, c0, c1, 0, p->pG, y_at(p, n, 0) + c0 * p->pK * p->pG * p->esz);
  }
}

/* ---- the kernel ---------------------------------------------------------------------- */

/* The compute type of a dtype here: bool (im2col/col2im only) as 0/1
 * integers, whose col2im sums convert back to bool as PyTorch's += does. */
static tpu_compute_type_t compute_type(tpu_dtype_t dtype) {
  tpu_compute_type_t ct = tpu_dtype_compute(dtype);
  return ct == TPU_COMPUTE_B8 ? TPU_COMPUTE_I64 : ct;
}

static tpu_status_t conv_run(const conv_args_t* a, const tpu_node_t* node) {
  tpu_compute_type_t ct = compute_type(a->dtype);
  if (!k_ops_by_type[ct].gemm)
    TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "convolution of %s", tpu_dtype_name(a->dtype));
#ifdef TPU_HAVE_OPENBLAS
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, blas_init);
#endif
  tpu_dtype_t work = tpu_compute_storage_dtype(ct);
  const conv_geom_t* g = &a->g;
  plan_t p;
  init_plan(&p, g, ct);
  const tpu_view_t* ins[4] = {a->input, a->weight, a->bias, a->grad_out};
  operand_t in = {0}, w = {0}, bias = {0}, go = {0}, out[3] = {{0}};
  tpu_status_t s = TPU_OK;
  conv_kind_t kind = a->impl->kind;
  /* backward reads the input only for grad_weight, the weight only for grad_input */
  bool bwd = kind == CONV_BACKWARD;
  if (!bwd || a->mask[1]) s = load(a->input, work, &in);
  if (s == TPU_OK && a->weight && (!bwd || a->mask[0])) s = load(a->weight, work, &w);
  if (s == TPU_OK && a->bias) s = load(a->bias, work, &bias);
  if (s == TPU_OK && a->grad_out) s = load(a->grad_out, work, &go);
  for (int i = 0; s == TPU_OK && i < a->num_outputs; ++i)
    if (kind != CONV_BACKWARD || a->mask[i]) s = prepare(&node->outputs[i], work, ins, 4, &out[i]);
  if (s == TPU_OK) {
    switch (kind) {
      case CONV_FORWARD:
        p.w = w.p;
        p.bias = bias.p;
        if (a->transposed) p.x = out[0].p, p.y = in.p, s = run_x(&p);
        else p.x = in.p, p.y = out[0].p, s = run_y(&p);
        break;
      case CONV_BACKWARD:
        p.w = w.p;
        if (a->mask[0]) {
          if (a->transposed) p.x = go.p, p.y = out[0].p, s = run_y(&p);
          else p.x = out[0].p, p.y = go.p, s = run_x(&p);
        }
        if (s == TPU_OK && a->mask[1]) {
          p.w = out[1].p;
          if (a->transposed) p.x = go.p, p.y = in.p;
          else p.x = in.p, p.y = go.p;
          s = run_w(&p);
        }
        if (s == TPU_OK && a->mask[2]) {
          int64_t c = a->grad_out->sizes[1], inner = tpu_view_numel(a->grad_out);
          inner = c * g->n > 0 ? inner / (c * g->n) : 0;
          bias_job_t j = {p.ops, go.p, g->n, c, inner, p.esz,
                          malloc(sizeof(double) * (size_t)(c + 1))};
          if (!j.out) {
            s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "convolution scratch allocation failed");
          } else {
            tpu_parallel_for(c, grain_for(g->n * inner), bias_channels, &j);
            p.ops->from_double(out[2].p, j.out, c);
            free(j.out);
          }
        }
        break;
      case CONV_IM2COL:
      case CONV_COL2IM: {
        /* One unit per (n, channel block); Y plays the columns' part. */
        conv_geom_t cg = *g;
        cg.cy = cg.cx * p.pK; /* rows of one sample's column matrix */
        p.g = &cg;
        int64_t threads = tpu_parallel_threads();
        p.ncb = g->n >= 2 * threads ? 1 : min64(g->cx, (2 * threads + g->n - 1) / max64(g->n, 1));
        p.cb = (g->cx + p.ncb - 1) / p.ncb;
        p.ncb = (g->cx + p.cb - 1) / p.cb;
        p.x = kind == CONV_IM2COL ? in.p : out[0].p;
        p.y = kind == CONV_IM2COL ? out[0].p : in.p;
        tpu_parallel_for(g->n * p.ncb, grain_for(p.cb * p.pK * p.pG),
                         kind == CONV_IM2COL ? im2col_units : col2im_units, &p);
        break;
      }
    }
  }
  for (int i = 0; s == TPU_OK && i < a->num_outputs; ++i)
    if (kind != CONV_BACKWARD || a->mask[i]) store(&out[i], work);
  release(&in), release(&w), release(&bias), release(&go);
  for (int i = 0; i < 3; ++i) release(&out[i]);
  return s;
}

static tpu_status_t conv_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  conv_args_t a;
  TPU_RETURN_IF_ERROR(tpu_conv_parse(def, node, &a));
  if (node->num_outputs < a.num_outputs)
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "expected %d outputs", a.num_outputs);
  for (int i = 0; i < a.num_outputs; ++i)
    if ((a.impl->kind != CONV_BACKWARD || a.mask[i]) &&
        (!views_same_shape(&node->outputs[i], &a.shape[i]) ||
         node->outputs[i].dtype != a.shape[i].dtype))
      TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output %d has the wrong shape or dtype", i);
  /* the matrix unit first (conv_mxu.c); what it did not compute, here */
  bool done[3];
  TPU_RETURN_IF_ERROR(tpu_conv_mxu(&a, node, ctx ? ctx->graph : NULL, done));
  if (a.impl->kind == CONV_FORWARD && done[0]) return TPU_OK;
  if (a.impl->kind == CONV_BACKWARD) {
    for (int i = 0; i < 3; ++i) a.mask[i] = a.mask[i] && !done[i];
    if (!a.mask[0] && !a.mask[1] && !a.mask[2]) return TPU_OK;
  }
  return conv_run(&a, node);
}

static tpu_status_t conv_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_view_t* out_views) {
  conv_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_conv_parse(def, node, &a)));
  for (int i = 0; i < a.num_outputs; ++i) {
    out_views[i] = a.shape[i];
    /* convolution_backward: gradients masked off by output_mask are absent
     * (undefined tensors), as on the CPU */
    if (a.impl->kind == CONV_BACKWARD && !a.mask[i]) {
      memset(&out_views[i], 0, sizeof(out_views[i]));
      out_views[i].dtype = TPU_DTYPE_INVALID;
    }
  }
  return TPU_OK;
}

/* Native: what parse accepts, with a GEMM for the compute type. */
static tpu_status_t conv_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  conv_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_conv_parse(def, node, &a)));
  if (!k_ops_by_type[compute_type(a.dtype)].gemm)
    TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, "convolution of %s", tpu_dtype_name(a.dtype));
  return TPU_OK;
}

static const conv_impl_t k_forward = {CONV_FORWARD}, k_backward = {CONV_BACKWARD},
                         k_im2col = {CONV_IM2COL}, k_col2im = {CONV_COL2IM};

static const tpu_op_def_t k_rows[] = {
    {.name = "convolution", .inputs = "input,weight,bias?",
     .attrs = "stride,padding,dilation,transposed,output_padding,groups", .outputs = "out",
     .aten = "convolution.default convolution.out", .kernel = conv_kernel, .infer = conv_infer,
     .check = conv_check, .impl = &k_forward, .flags = TPU_OP_HEAVY},
    {.name = "convolution_backward", .inputs = "grad_output,input,weight",
     .attrs = "bias_sizes,stride,padding,dilation,transposed,output_padding,groups,output_mask",
     .outputs = "out0,out1,out2", .aten = "convolution_backward.default convolution_backward.out",
     .kernel = conv_kernel, .infer = conv_infer, .check = conv_check, .impl = &k_backward,
     .flags = TPU_OP_HEAVY},
    {.name = "im2col", .inputs = "self", .attrs = "kernel_size,dilation,padding,stride",
     .outputs = "out", .aten = "im2col.default im2col.out", .kernel = conv_kernel,
     .infer = conv_infer, .check = conv_check, .impl = &k_im2col},
    {.name = "col2im", .inputs = "self",
     .attrs = "output_size,kernel_size,dilation,padding,stride", .outputs = "out",
     .aten = "col2im.default col2im.out", .kernel = conv_kernel, .infer = conv_infer,
     .check = conv_check, .impl = &k_col2im},
};

const tpu_op_family_t tpu_family_conv = {"conv", k_rows,
                                         (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
