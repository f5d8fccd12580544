/* matmul.c — the matmul family: mm, bmm, addmm, baddbmm, mv, addmv, dot, vdot.
 *
 * Each node becomes one batched problem C[b] = beta*bias[b] + alpha*A[b]@B[b]
 * (matmul.h) run as GEMMs:
 *   float16 / bfloat16 one row or column of C: a gemv that streams the
 *                      matrix once (matmul_gemv.c),
 *   bfloat16           the matrix unit (mxu.h: oneDNN on AMX or AVX512-BF16,
 *                      float32 accumulation), where the CPU has one (float16
 *                      too, on AVX512-FP16); float32
 *                      too under torch.set_float32_matmul_precision("high":
 *                      bfloat16x3, "medium": one bfloat16 pass),
 *   float32            on AVX-512 CPUs, GEMMs of one B matrix (a weight) and
 *                      at least MM_SMALL_WORK multiply-adds: the matrix
 *                      unit's float32 brgemm on its blocked B (weight cache),
 *   float32 / float64  otherwise OpenBLAS sgemm / dgemm,
 *   float16 / bfloat16 otherwise converted to f32, sgemm (f32 accumulation),
 *                      rounded back (scipy-openblas32 has no sbgemm/shgemm),
 *   integers           a blocked loop in wrapping int64 arithmetic.
 * An operand that is a row- or column-major matrix (any leading dimension)
 * is passed to BLAS in place with the matching transposition flag; others
 * are copied to a contiguous scratch matrix first. The result is written in
 * place when `out` is a row- or column-major float32/float64 matrix that
 * does not overlap A or B, else computed in scratch and converted into `out`
 * (which may be any strided view).
 *
 * A GEMM group's epilogue (tpu_mm_run) runs on each unit's block of C right
 * after the unit computes it; after the paths that compute C in one call
 * (matrix unit, gemv) its caller runs it over C.
 *
 * Threading: OpenBLAS is set to one thread and the compute pool runs units
 * (partition): whole matrices when the batch has at least twice the thread
 * count, else each matrix cut into a grid of R row blocks by C column
 * blocks (each unit at least MM_BLOCK_WORK multiply-adds and MM_MIN_COLS
 * columns, column blocks rounded to 16 elements), the grid with enough
 * units that packs least (R * n + C * m rows of k): a decode step's one row
 * times the vocabulary projection splits by columns. Units are handed out
 * in runs of at least MM_SMALL_WORK multiply-adds, so GEMMs share the pool's
 * thread budget with every other kernel and tiny problems stay on one
 * thread. bool is not supported (as in PyTorch's CPU kernels): the check
 * falls back.
 */
#include "kernels/matmul/matmul.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/matmul/mxu.h"
#include "kernels/common/view_walk.h"

#ifdef TPU_HAVE_OPENBLAS
#include <cblas.h>
#endif

/* Multiply-adds below which work stays on one thread, and the least a row
 * block of a large matrix gets. */
#define MM_SMALL_WORK (1 << 18)
#define MM_BLOCK_WORK (1 << 16)
#define MM_MIN_COLS 64 /* the narrowest column block */

/* ---- shapes ----------------------------------------------------------------- */

static const mm_spec_t* spec_of(const tpu_op_def_t* def) { return (const mm_spec_t*)def->impl; }

static tpu_status_t input_view(const tpu_node_t* node, int32_t i, const tpu_view_t** out) {
  if (i >= node->num_inputs || node->inputs[i].kind != TPU_VALUE_VIEW)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "input %d must be a tensor", i);
  *out = &node->inputs[i].u.view;
  return TPU_OK;
}

tpu_status_t tpu_mm_result(const tpu_op_def_t* def, const tpu_node_t* node, int32_t* ndim,
                           int64_t* sizes, tpu_dtype_t* dtype) {
  const mm_spec_t* s = spec_of(def);
  const tpu_view_t *a = NULL, *b = NULL, *bias = NULL;
  int32_t first = s->has_bias ? 1 : 0;
  TPU_RETURN_IF_ERROR(input_view(node, first, &a));
  TPU_RETURN_IF_ERROR(input_view(node, first + 1, &b));
  if (s->has_bias) TPU_RETURN_IF_ERROR(input_view(node, 0, &bias));
  if (a->ndim != s->a_rank || b->ndim != s->b_rank)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "expected %dD and %dD operands, but got %dD and %dD tensors",
                           s->a_rank, s->b_rank, a->ndim, b->ndim);
  const int64_t* as = a->sizes;
  const int64_t* bs = b->sizes;
  if (s->a_rank == 3) {
    if (bs[0] != as[0] || bs[1] != as[2])
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "Expected size for first two dimensions of batch2 tensor to be: "
                             "[%lld, %lld] but got: [%lld, %lld].",
                             (long long)as[0], (long long)as[2], (long long)bs[0],
                             (long long)bs[1]);
    *ndim = 3;
    sizes[0] = as[0], sizes[1] = as[1], sizes[2] = bs[2];
  } else if (s->a_rank == 2 && s->b_rank == 2) {
    if (as[1] != bs[0])
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                             (long long)as[0], (long long)as[1], (long long)bs[0],
                             (long long)bs[1]);
    *ndim = 2;
    sizes[0] = as[0], sizes[1] = bs[1];
  } else if (s->a_rank == 2) {
    if (as[1] != bs[0])
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "size mismatch, got mat (%lldx%lld), vec (%lld)",
                             (long long)as[0], (long long)as[1], (long long)bs[0]);
    *ndim = 1;
    sizes[0] = as[0];
  } else {
    if (as[0] != bs[0])
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "inconsistent tensor size, expected tensor [%lld] and src [%lld] to "
                             "have the same number of elements, but got %lld and %lld elements "
                             "respectively",
                             (long long)as[0], (long long)bs[0], (long long)as[0],
                             (long long)bs[0]);
    *ndim = 0;
  }
  tpu_view_t expanded;
  if (bias && !view_expand(bias, *ndim, sizes, &expanded))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "self of %d dims cannot be broadcast to the result's %d-dim shape",
                           bias->ndim, *ndim);
  *dtype = a->dtype;
  return TPU_OK;
}

/* A view of `ndim` dims as [batch, rows, cols]: rank 0 -> [1,1,1], 1 -> a row
 * (`as_row`) or a column, 2 -> [1,r,c]. */
static tpu_view_t as_3d(const tpu_view_t* v, bool as_row) {
  tpu_view_t r = *v;
  r.ndim = 3;
  int32_t lead = 3 - v->ndim;
  for (int32_t d = 0; d < 3; ++d) {
    int32_t s = d - lead;
    r.sizes[d] = s >= 0 ? v->sizes[s] : 1;
    r.strides[d] = s >= 0 ? v->strides[s] : 0;
  }
  if (v->ndim == 1 && !as_row) { /* a column [1, n, 1] */
    r.sizes[1] = v->sizes[0], r.strides[1] = v->strides[0];
    r.sizes[2] = 1, r.strides[2] = 0;
  }
  return r;
}

tpu_status_t tpu_mm_problem(const tpu_op_def_t* def, const tpu_node_t* node,
                            const tpu_view_t* out, mm_problem_t* p) {
  const mm_spec_t* s = spec_of(def);
  int32_t ndim;
  int64_t sizes[TPU_MAX_DIMS];
  tpu_dtype_t dtype;
  TPU_RETURN_IF_ERROR(tpu_mm_result(def, node, &ndim, sizes, &dtype));
  bool same = out->ndim == ndim;
  for (int32_t d = 0; same && d < ndim; ++d) same = out->sizes[d] == sizes[d];
  if (!same)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "out has the wrong shape (%d dims)",
                           out->ndim);
  if (out->dtype != dtype)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "Expected out tensor to have dtype %s, but got %s instead",
                           tpu_dtype_name(dtype), tpu_dtype_name(out->dtype));
  int32_t first = s->has_bias ? 1 : 0;
  const tpu_view_t* a = &node->inputs[first].u.view;
  const tpu_view_t* b = &node->inputs[first + 1].u.view;
  p->dtype = dtype;
  p->a = as_3d(a, true);
  p->b = as_3d(b, false);
  p->c = as_3d(out, ndim != 1);
  p->batch = p->c.sizes[0], p->m = p->c.sizes[1], p->n = p->c.sizes[2], p->k = p->a.sizes[2];
  const tpu_attr_t* beta = node->num_attrs > 0 ? &node->attrs[0] : NULL;
  const tpu_attr_t* alpha = node->num_attrs > 1 ? &node->attrs[1] : NULL;
  p->beta = s->has_bias ? tpu_attr_float(beta, 1.0) : 0.0;
  p->alpha = s->has_bias ? tpu_attr_float(alpha, 1.0) : 1.0;
  p->ibeta = s->has_bias ? tpu_attr_int(beta, 1) : 0;
  p->ialpha = s->has_bias ? tpu_attr_int(alpha, 1) : 1;
  p->alpha_im = p->beta_im = 0.0; /* complex numbers (alpha=2j): complex operands only */
  if (s->has_bias && beta && beta->kind == TPU_ATTR_COMPLEX)
    p->beta = beta->u.floats[0], p->beta_im = beta->u.floats[1];
  if (s->has_bias && alpha && alpha->kind == TPU_ATTR_COMPLEX)
    p->alpha = alpha->u.floats[0], p->alpha_im = alpha->u.floats[1];
  int32_t pi = s->has_bias ? 2 : 0; /* "matmul_precision", after beta and alpha */
  p->precision = (int32_t)tpu_attr_int(node->num_attrs > pi ? &node->attrs[pi] : NULL,
                                       MM_PRECISION_HIGHEST);
  if (p->precision < MM_PRECISION_HIGHEST || p->precision > MM_PRECISION_MEDIUM)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "matmul_precision must be 0, 1 or 2");
  bool floating = tpu_dtype_is_floating(dtype) || tpu_dtype_is_complex(dtype);
  p->has_bias =
      s->has_bias && (floating ? p->beta != 0.0 || p->beta_im != 0.0 : p->ibeta != 0);
  if (p->has_bias) {
    tpu_view_t expanded;
    view_expand(&node->inputs[0].u.view, ndim, sizes, &expanded);
    p->bias = as_3d(&expanded, ndim != 1);
  }
  return TPU_OK;
}

/* ---- BLAS ------------------------------------------------------------------- */

/* How BLAS (row-major) reads a rows x cols matrix with strides (rs, cs):
 * false when it cannot, else the transposition flag and leading dimension. */
static bool blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool* trans,
                        int64_t* ld) {
  if (cs == 1 || cols == 1) {
    int64_t l = rows == 1 ? (cols > 1 ? cols : 1) : rs;
    if (l >= cols && l >= 1 && l <= INT_MAX) return *trans = false, *ld = l, true;
  }
  if (rs == 1 || rows == 1) {
    int64_t l = cols == 1 ? (rows > 1 ? rows : 1) : cs;
    if (l >= rows && l >= 1 && l <= INT_MAX) return *trans = true, *ld = l, true;
  }
  return false;
}

/* C (row-major, ldc) = alpha * op(A) @ op(B) + beta * C, C in float32/float64. */
typedef void (*gemm_fn)(bool ta, bool tb, int m, int n, int k, double alpha, const void* a,
                        int lda, const void* b, int ldb, double beta, void* c, int ldc);

#ifdef TPU_HAVE_OPENBLAS
#define MM_T(t) ((t) ? CblasTrans : CblasNoTrans)
/* One row or one column of C is a matrix-vector product: gemv reads the
 * matrix once, where gemm would first pack all of it (decode steps multiply
 * one token by the whole vocabulary projection). */
#define MM_GEMM(P, T)                                                                        \
  static void gemm_##P(bool ta, bool tb, int m, int n, int k, double alpha, const void* a,   \
                       int lda, const void* b, int ldb, double beta, void* c, int ldc) {     \
    if ((m == 1 && n > 1) || (n == 1 && m > 1)) { /* beta 0: C may hold NaN */              \
      for (int i = 0; beta == 0.0 && i < (m == 1 ? n : m); ++i)                              \
        ((T*)c)[m == 1 ? i : (int64_t)i * ldc] = 0;                                          \
    }                                                                                        \
    if (m == 1 && n > 1) /* c = op(B)^T a */                                                 \
      scipy_cblas_##P##gemv(CblasRowMajor, tb ? CblasNoTrans : CblasTrans, tb ? n : k,       \
                            tb ? k : n, (T)alpha, b, ldb, a, ta ? lda : 1, (T)beta, c, 1);   \
    else if (n == 1 && m > 1) /* c = op(A) b */                                              \
      scipy_cblas_##P##gemv(CblasRowMajor, MM_T(ta), ta ? k : m, ta ? m : k, (T)alpha, a,    \
                            lda, b, tb ? 1 : ldb, (T)beta, c, ldc);                          \
    else                                                                                     \
      scipy_cblas_##P##gemm(CblasRowMajor, MM_T(ta), MM_T(tb), m, n, k, (T)alpha, a, lda, b, \
                            ldb, (T)beta, c, ldc);                                           \
  }
MM_GEMM(s, float)
MM_GEMM(d, double)
#undef MM_GEMM
#undef MM_T

/* OpenBLAS runs single-threaded: the compute pool splits GEMMs into row
 * blocks and batches, so BLAS never competes with the pool for cores (its
 * spinning threads degrade by orders of magnitude when cores are busy). */
static void blas_init(void) { scipy_openblas_set_num_threads(1); }

/* The GEMM for each compute type: floats through OpenBLAS, integers below. */
static const gemm_fn k_blas[TPU_COMPUTE_COUNT] = {[TPU_COMPUTE_F32] = gemm_s,
                                                  [TPU_COMPUTE_F64] = gemm_d};
#else
static const gemm_fn k_blas[TPU_COMPUTE_COUNT] = {0};
#endif

/* ---- integer GEMM ------------------------------------------------------------ */

/* Wrapping int64 arithmetic (PyTorch's integer overflow wraps too). */
#define MM_WRAP(x) ((uint64_t)(x))
#define MM_KBLOCK 64  /* a 64 x 256 block of B (128 KiB) is reused by every row */
#define MM_NBLOCK 256

typedef struct igemm_job {
  int64_t m, n, k;
  const int64_t *a, *b; /* contiguous [m,k], [k,n] */
  int64_t* c;           /* contiguous [m,n], holds the bias (or anything if beta == 0) */
  int64_t alpha, beta;
} igemm_job_t;

static void igemm(const igemm_job_t* j) {
  for (int64_t e = 0; e < j->m * j->n; ++e)
    j->c[e] = j->beta == 0 ? 0 : (int64_t)(MM_WRAP(j->c[e]) * MM_WRAP(j->beta));
  for (int64_t k0 = 0; k0 < j->k; k0 += MM_KBLOCK) {
    int64_t k1 = k0 + MM_KBLOCK < j->k ? k0 + MM_KBLOCK : j->k;
    for (int64_t x0 = 0; x0 < j->n; x0 += MM_NBLOCK) {
      int64_t x1 = x0 + MM_NBLOCK < j->n ? x0 + MM_NBLOCK : j->n;
      for (int64_t i = 0; i < j->m; ++i) {
        int64_t* c = j->c + i * j->n;
        for (int64_t kk = k0; kk < k1; ++kk) {
          uint64_t aik = MM_WRAP(j->a[i * j->k + kk]) * MM_WRAP(j->alpha);
          const int64_t* b = j->b + kk * j->n;
          for (int64_t x = x0; x < x1; ++x) c[x] = (int64_t)(MM_WRAP(c[x]) + aik * MM_WRAP(b[x]));
        }
      }
    }
  }
}

/* ---- plan and execution ------------------------------------------------------ */

/* A node runs as units: blocks of one batch's C (row blocks, each split
 * into column blocks), spread over the pool. */
typedef struct mm_plan {
  mm_problem_t p;
  tpu_dtype_t work;     /* what the GEMM reads and writes: F32, F64 or I64 */
  gemm_fn gemm;         /* NULL: the integer loop */
  bool c_direct;        /* BLAS may write `out` in place (dtype, no overlap) */
  bool bias_is_c;       /* in-place form: the bias already sits in C */
  int64_t rows, blocks; /* rows of C per unit, row blocks per batch */
  int64_t cols, cblocks; /* columns of C per unit, column blocks per row block */
  const mm_epilogue_t* ep; /* run on each unit's block of C, or NULL */
  atomic_int failed;    /* a unit's scratch allocation failed */
} mm_plan_t;

/* Rows [i0, i0 + m) and columns [j0, j0 + n) of batch `bi` of a 3-D
 * operand, as a 2-D view. */
static tpu_view_t block2d(const tpu_view_t* v, int64_t bi, int64_t i0, int64_t m, int64_t j0,
                          int64_t n) {
  tpu_view_t r = *v;
  r.addr = (uint64_t)(uintptr_t)view_at(
      v, bi * v->strides[0] + i0 * v->strides[1] + j0 * v->strides[2]);
  r.ndim = 2;
  r.sizes[0] = m, r.sizes[1] = n;
  r.strides[0] = v->strides[1], r.strides[1] = v->strides[2];
  return r;
}

/* Scratch of one pool chunk, grown on demand. */
typedef struct mm_buf {
  void* p;
  size_t cap;
} mm_buf_t;

static void* buf_get(mm_buf_t* b, int64_t elems, tpu_dtype_t dtype) {
  size_t bytes = (size_t)elems * tpu_dtype_size(dtype) + 64;
  if (b->cap < bytes) {
    tpu_scratch_free(b->p);
    b->p = tpu_scratch_alloc(bytes);
    b->cap = b->p ? bytes : 0;
  }
  return b->p;
}

/* Pointer, transposition and leading dimension of a factor: the view itself
 * when BLAS can read it, else a contiguous copy (NULL if out of memory). */
static const void* factor(const mm_plan_t* pl, const tpu_view_t* v, mm_buf_t* buf, bool* trans,
                          int* ld) {
  int64_t l;
  if (pl->gemm && v->dtype == pl->work && pl->p.k > 0 &&
      blas_layout(v->sizes[0], v->sizes[1], v->strides[0], v->strides[1], trans, &l)) {
    *ld = (int)l;
    return tpu_view_ptr(v);
  }
  void* p = buf_get(buf, v->sizes[0] * v->sizes[1], pl->work);
  if (!p) return NULL;
  tpu_view_t dst = view_of(p, pl->work, 2, v->sizes);
  view_copy(&dst, v);
  *trans = false;
  *ld = (int)(v->sizes[1] > 1 ? v->sizes[1] : 1);
  return p;
}

/* Unit `u`'s block of C: batch *bi, rows [*i0, *i0 + *m), columns
 * [*j0, *j0 + *n) (m or n 0 past the edge). */
static void unit_block(const mm_plan_t* pl, int64_t u, int64_t* bi, int64_t* i0, int64_t* m,
                       int64_t* j0, int64_t* n) {
  const mm_problem_t* p = &pl->p;
  int64_t per_batch = pl->blocks * pl->cblocks;
  *bi = u / per_batch;
  *i0 = (u % per_batch) / pl->cblocks * pl->rows, *j0 = u % pl->cblocks * pl->cols;
  *m = p->m - *i0 < pl->rows ? p->m - *i0 : pl->rows;
  *n = p->n - *j0 < pl->cols ? p->n - *j0 : pl->cols;
}

/* Computes unit `u`; false when scratch could not be allocated. */
static bool run_unit(const mm_plan_t* pl, int64_t u, mm_buf_t bufs[3]) {
  const mm_problem_t* p = &pl->p;
  int64_t bi, i0, m, j0, n;
  unit_block(pl, u, &bi, &i0, &m, &j0, &n);
  if (m <= 0 || n <= 0) return true;
  bool ta, tb, tc = false;
  int lda, ldb;
  int64_t ldc = 1;
  tpu_view_t av = block2d(&p->a, bi, i0, m, 0, p->k), bv = block2d(&p->b, bi, 0, p->k, j0, n);
  tpu_view_t out = block2d(&p->c, bi, i0, m, j0, n), c = out;
  const void* a = factor(pl, &av, &bufs[0], &ta, &lda);
  const void* b = factor(pl, &bv, &bufs[1], &tb, &ldb);
  if (!a || !b) return false;
  bool direct = pl->c_direct && blas_layout(m, n, out.strides[0], out.strides[1], &tc, &ldc);
  if (!direct) {
    void* cp = buf_get(&bufs[2], m * n, pl->work);
    if (!cp) return false;
    c = view_of(cp, pl->work, 2, out.sizes);
    ldc = n > 1 ? n : 1;
    tc = false;
  }
  if (p->has_bias && !(direct && pl->bias_is_c)) {
    tpu_view_t bias = block2d(&p->bias, bi, i0, m, j0, n);
    view_copy(&c, &bias);
  }
  if (pl->gemm) {
    double beta = p->has_bias ? p->beta : 0.0;
    if (tc) /* C column-major: C^T = B^T A^T */
      pl->gemm(!tb, !ta, (int)n, (int)m, (int)p->k, p->alpha, b, ldb, a, lda, beta,
               tpu_view_ptr(&c), (int)ldc);
    else
      pl->gemm(ta, tb, (int)m, (int)n, (int)p->k, p->alpha, a, lda, b, ldb, beta,
               tpu_view_ptr(&c), (int)ldc);
  } else {
    igemm_job_t j = {m, n, p->k, a, b, tpu_view_ptr(&c), p->ialpha, p->has_bias ? p->ibeta : 0};
    igemm(&j);
  }
  if (!direct) view_copy(&out, &c);
  return true;
}

/* Runs units [begin, end), each followed by the epilogue on its block. After
 * a failed unit the GEMM stops, but the epilogue still runs on every block
 * (mm_epilogue_t: its nodes run once on every element). */
static void run_units(void* arg, int64_t begin, int64_t end) {
  mm_plan_t* pl = (mm_plan_t*)arg;
  mm_buf_t bufs[3] = {{0}};
  bool failed = false;
  for (int64_t u = begin; u < end && !(failed && !pl->ep); ++u) {
    if (!failed && !run_unit(pl, u, bufs)) {
      atomic_store(&pl->failed, 1);
      failed = true;
    }
    int64_t bi, i0, m, j0, n;
    unit_block(pl, u, &bi, &i0, &m, &j0, &n);
    if (pl->ep && m > 0 && n > 0) pl->ep->run(pl->ep->arg, u, bi, i0, m, j0, n);
  }
  for (int i = 0; i < 3; ++i) tpu_scratch_free(bufs[i].p);
}

static bool fits_blas(const mm_problem_t* p) {
  return p->m <= INT_MAX && p->n <= INT_MAX && p->k <= INT_MAX;
}

/* Splits the batch into units: whole matrices when there are enough, else
 * each matrix into a grid of row blocks by column blocks (at least
 * MM_BLOCK_WORK multiply-adds and MM_MIN_COLS columns each), 2 per thread.
 * Each unit's GEMM packs its whole slice of A and of B, so of the grids with
 * enough units the one that packs least is taken: R row blocks by C column
 * blocks pack R copies of B and C copies of A, R * n + C * m rows of k. A
 * linear layer over few tokens (m small, n large) splits by columns; each
 * unit then packs only its share of the weight. */
static void partition(mm_plan_t* pl) {
  const mm_problem_t* p = &pl->p;
  int64_t want = 2 * tpu_parallel_threads(), work = p->m * p->n * (p->k > 0 ? p->k : 1);
  int64_t units = p->batch < want ? (want + p->batch - 1) / p->batch : 1;
  int64_t max_units = work / MM_BLOCK_WORK > 1 ? work / MM_BLOCK_WORK : 1;
  int64_t max_r = p->m, max_c = p->n / MM_MIN_COLS > 1 ? p->n / MM_MIN_COLS : 1;
  if (units > max_units) units = max_units;
  int64_t best_r = 1, best_c = 1, best_cost = -1;
  for (int64_t r = 1; r <= units && r <= max_r; ++r) {
    int64_t c = (units + r - 1) / r;
    if (c > max_c) continue;
    int64_t cost = r * p->n + c * p->m;
    if (best_cost < 0 || cost < best_cost) best_r = r, best_c = c, best_cost = cost;
  }
  if (best_cost < 0) /* too few columns for the units: row blocks only */
    best_r = units < max_r ? units : max_r, best_c = 1;
  pl->rows = (p->m + best_r - 1) / best_r;
  pl->blocks = (p->m + pl->rows - 1) / pl->rows;
  /* column blocks of whole 64-byte lines of C (float32) where they can be */
  int64_t cols = (p->n + best_c - 1) / best_c;
  if (best_c > 1) cols = (cols + 15) / 16 * 16;
  pl->cols = cols < p->n ? cols : p->n;
  pl->cblocks = (p->n + pl->cols - 1) / pl->cols;
}

bool tpu_mm_c_writable(const mm_problem_t* p) {
  return !views_overlap(&p->c, &p->a) && !views_overlap(&p->c, &p->b) &&
         !(p->has_bias && !views_same(&p->bias, &p->c) && views_overlap(&p->bias, &p->c));
}

/* The bias into C (unless it is C) for the matrix unit's sum post-op. */
static void bias_into_c(const mm_problem_t* p) {
  if (p->has_bias && !views_same(&p->bias, &p->c)) view_copy(&p->c, &p->bias);
}

/* The problem on the matrix unit, when it takes it: bfloat16, or float32 at
 * precision "highest" with one B matrix for the batch (a weight) and enough
 * work to repay oneDNN's per-call cost (the other precisions are
 * run_f32_on_mxu's). C must be writable (tpu_mm_c_writable). *out_done
 * false: the BLAS path runs. */
static tpu_status_t run_on_mxu(const mm_problem_t* p, bool* out_done) {
  *out_done = false;
  if (!tpu_mxu_supports(p->dtype) || p->k == 0 || !tpu_mm_c_writable(p)) return TPU_OK;
  if (p->dtype == TPU_DTYPE_F32 &&
      (p->precision != MM_PRECISION_HIGHEST || p->m < 2 || p->n < 2 ||
       p->m * p->n * p->k < MM_SMALL_WORK || (p->b.sizes[0] > 1 && p->b.strides[0] != 0)))
    return TPU_OK;
  mxu_gemm_t g = {.a = p->a, .b = p->b, .c = p->c, .alpha = (float)p->alpha,
                  .beta = p->has_bias ? (float)p->beta : 0.0f, .graph = p->graph};
  /* A Linear's bias (a dense row vector, beta = alpha = 1, C row-major)
   * goes into the kernel; any other addend is copied into C and summed, as
   * is a float16 bias (oneDNN 3.2's AVX512-FP16 kernel declines one). */
  const tpu_view_t* bv = &p->bias;
  if (p->has_bias && p->dtype != TPU_DTYPE_F16 && p->beta == 1.0 && p->alpha == 1.0 &&
      !views_same(bv, &p->c) &&
      (bv->sizes[0] == 1 || bv->strides[0] == 0) && (bv->sizes[1] == 1 || bv->strides[1] == 0) &&
      (bv->sizes[2] == 1 || bv->strides[2] == 1) && (p->c.sizes[2] == 1 || p->c.strides[2] == 1)) {
    g.has_bias = true, g.bias = *bv, g.beta = 0.0f;
  } else {
    bias_into_c(p);
  }
  return tpu_mxu_gemm(&g, out_done);
}

/* The bfloat16 parts of a float32 operand, dense, in one buffer owned by the
 * caller (*out_buf, for tpu_scratch_free): hi = bf16(x) and, with
 * `want_lo`, lo = bf16(x - hi), so that x = hi + lo to about 2^-16 |x|
 * (lo is 0 where hi is not finite). A broadcast batch (stride 0) stays one matrix. */
static tpu_status_t bf16_parts(const tpu_view_t* v, bool want_lo, void** out_buf,
                               tpu_view_t* out_hi, tpu_view_t* out_lo) {
  int64_t sizes[3] = {v->strides[0] == 0 ? 1 : v->sizes[0], v->sizes[1], v->sizes[2]};
  int64_t n = sizes[0] * sizes[1] * sizes[2];
  size_t bytes = (size_t)n * (sizeof(float) + (want_lo ? 2 : 1) * sizeof(uint16_t));
  float* f = tpu_scratch_alloc(bytes ? bytes : 1);
  *out_buf = f;
  if (!f)
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matmul: no %zu bytes for bfloat16 parts",
                           bytes);
  tpu_view_t src = *v, dense = view_of(f, TPU_DTYPE_F32, 3, sizes);
  src.sizes[0] = sizes[0];
  view_copy(&dense, &src);
  uint16_t *hi = (uint16_t*)(f + n), *lo = hi + n;
  tpu_convert(hi, TPU_DTYPE_BF16, 1, f, TPU_DTYPE_F32, 1, n);
  *out_hi = view_of(hi, TPU_DTYPE_BF16, 3, sizes);
  if (want_lo) {
    for (int64_t i = 0; i < n; ++i) {
      float h = tpu_bf16_to_f32(hi[i]);
      lo[i] = isfinite(h) ? tpu_f32_to_bf16(f[i] - h) : 0;
    }
    *out_lo = view_of(lo, TPU_DTYPE_BF16, 3, sizes);
  }
  if (v->strides[0] == 0) {
    out_hi->sizes[0] = v->sizes[0], out_hi->strides[0] = 0;
    if (want_lo) out_lo->sizes[0] = v->sizes[0], out_lo->strides[0] = 0;
  }
  return TPU_OK;
}

/* A float32 problem under torch.set_float32_matmul_precision("high" or
 * "medium") on the matrix unit: bfloat16x3 (lo*hi + hi*lo + hi*hi, small
 * terms first, each pass summed into C) or one bfloat16 pass, float32
 * accumulation throughout. One-row and one-column products stay float32:
 * they are bound by memory, not by the multiplier. */
static tpu_status_t run_f32_on_mxu(const mm_problem_t* p, bool* out_done) {
  *out_done = false;
  if (p->dtype != TPU_DTYPE_F32 || p->precision == MM_PRECISION_HIGHEST ||
      !tpu_mxu_supports(TPU_DTYPE_BF16) || p->k == 0 || p->m == 1 || p->n == 1 ||
      !tpu_mm_c_writable(p))
    return TPU_OK;
  bool three = p->precision == MM_PRECISION_HIGH;
  void *abuf = NULL, *bbuf = NULL;
  tpu_view_t ahi, alo, bhi, blo;
  tpu_status_t st = bf16_parts(&p->a, three, &abuf, &ahi, &alo);
  if (st == TPU_OK) st = bf16_parts(&p->b, three, &bbuf, &bhi, &blo);
  if (st == TPU_OK) {
    bias_into_c(p);
    const tpu_view_t* pass[3][2] = {{&alo, &bhi}, {&ahi, &blo}, {&ahi, &bhi}};
    for (int i = three ? 0 : 2; i < 3 && st == TPU_OK; ++i) {
      bool first = i == (three ? 0 : 2), done = false;
      /* graph NULL: B is this call's scratch, never cached */
      mxu_gemm_t g = {.a = *pass[i][0], .b = *pass[i][1], .c = p->c, .alpha = (float)p->alpha,
                      .beta = first ? (p->has_bias ? (float)p->beta : 0.0f) : 1.0f};
      st = tpu_mxu_gemm(&g, &done);
      if (st == TPU_OK && !done && !first)
        st = tpu_status_make(TPU_CODE_INTERNAL, "matrix unit declined a bfloat16x3 pass");
      if (st == TPU_OK && !done) break; /* first pass declined: the float32 path */
      *out_done = done;
    }
  }
  tpu_scratch_free(abuf);
  tpu_scratch_free(bbuf);
  return st;
}

/* The node, then the epilogue `ep` (NULL: none) on C; see tpu_mm_run. */
static tpu_status_t mm_run(const tpu_op_def_t* def, const tpu_node_t* node,
                           const mm_epilogue_t* ep, tpu_exec_ctx_t* ctx, bool* out_ran) {
  *out_ran = false;
  if (node->num_outputs < 1)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "missing output");
  mm_plan_t pl = {.ep = ep};
  mm_problem_t* p = &pl.p;
  TPU_RETURN_IF_ERROR(tpu_mm_problem(def, node, &node->outputs[0], p));
  p->graph = ctx ? ctx->graph : NULL;
  if (p->batch * p->m * p->n == 0) return *out_ran = true, TPU_OK;
  bool done;
  tpu_status_t (*const whole[])(const mm_problem_t*, bool*) = {tpu_mm_half_gemv, run_on_mxu,
                                                                run_f32_on_mxu};
  for (size_t w = 0; w < sizeof(whole) / sizeof(whole[0]); ++w) {
    TPU_RETURN_IF_ERROR(whole[w](p, &done));
    if (done) return TPU_OK; /* C in one call: the caller runs the epilogue */
  }
  tpu_compute_type_t ct = tpu_dtype_compute(p->dtype);
  pl.gemm = k_blas[ct];
  if (ct == TPU_COMPUTE_B8 || (pl.gemm == NULL && ct != TPU_COMPUTE_I64) ||
      (pl.gemm && !fits_blas(p)))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "matmul of %s is not supported",
                           tpu_dtype_name(p->dtype));
#ifdef TPU_HAVE_OPENBLAS
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, blas_init);
#endif
  pl.work = tpu_compute_storage_dtype(ct);
  pl.c_direct = pl.gemm && p->c.dtype == pl.work && tpu_mm_c_writable(p);
  pl.bias_is_c = p->has_bias && views_same(&p->bias, &p->c);
  atomic_init(&pl.failed, 0);
  partition(&pl);
  int64_t unit_work = pl.rows * pl.cols * (p->k > 0 ? p->k : 1);
  tpu_parallel_for(p->batch * pl.blocks * pl.cblocks,
                   unit_work >= MM_SMALL_WORK ? 1 : MM_SMALL_WORK / unit_work,
                   run_units, &pl);
  *out_ran = true;
  if (atomic_load(&pl.failed))
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matmul scratch allocation failed");
  return TPU_OK;
}

static tpu_status_t matmul_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx) {
  if (tpu_mm_is_complex(node)) return tpu_mm_cx_kernel(def, node);
  bool ran;
  return mm_run(def, node, NULL, ctx, &ran);
}

tpu_status_t tpu_mm_run(const tpu_node_t* node, const mm_epilogue_t* ep, tpu_exec_ctx_t* ctx,
                        bool* out_ran) {
  *out_ran = false;
  const tpu_op_def_t* def = tpu_op_def(node->op);
  if (!def || def->kernel != matmul_kernel || !(def->flags & TPU_OP_EPILOGUE))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "op '%s' takes no epilogue",
                           def ? def->name : "?");
  return mm_run(def, node, ep, ctx, out_ran);
}

static tpu_status_t matmul_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_view_t* outs) {
  tpu_view_t* o = &outs[0];
  TPU_RETURN_IF_ERROR(tpu_mm_result(def, node, &o->ndim, o->sizes, &o->dtype));
  o->addr = 0;
  tpu_view_set_contiguous(o);
  return TPU_OK;
}

tpu_status_t tpu_mm_blas_shape(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_dtype_t* out_dtype) {
  int32_t ndim;
  int64_t sizes[TPU_MAX_DIMS];
  TPU_RETURN_IF_ERROR(tpu_mm_result(def, node, &ndim, sizes, out_dtype));
  for (int32_t i = 0; i < node->num_inputs; ++i)
    if (node->inputs[i].u.view.dtype != *out_dtype)
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: mixed dtypes", def->name);
  for (int32_t d = 0; d < ndim; ++d)
    if (sizes[d] > INT_MAX)
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: dimension too large for BLAS", def->name);
  for (int32_t i = 0; i < node->num_inputs; ++i) {
    const tpu_view_t* v = &node->inputs[i].u.view;
    for (int32_t d = 0; d < v->ndim; ++d)
      if (v->sizes[d] > INT_MAX)
        return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: dimension too large for BLAS",
                               def->name);
  }
  return TPU_OK;
}

/* Native: one dtype for every operand, not bool, floats only with BLAS and
 * with dims that fit its 32-bit integers. */
static tpu_status_t matmul_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  if (tpu_mm_is_complex(node)) return tpu_mm_cx_check(def, node);
  for (int32_t i = 0; i < node->num_attrs; ++i) /* alpha=2j on real operands: CPU raises */
    if (node->attrs[i].kind == TPU_ATTR_COMPLEX)
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: a complex scalar on real operands",
                             def->name);
  tpu_dtype_t dtype;
  TPU_RETURN_IF_ERROR(tpu_mm_blas_shape(def, node, &dtype));
  tpu_compute_type_t ct = tpu_dtype_compute(dtype);
  if (ct == TPU_COMPUTE_B8 || (ct != TPU_COMPUTE_I64 && !k_blas[ct]))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "matmul of %s", tpu_dtype_name(dtype));
  return TPU_OK;
}

static const mm_spec_t k_mm = {false, 2, 2}, k_bmm = {false, 3, 3}, k_addmm = {true, 2, 2},
                       k_baddbmm = {true, 3, 3}, k_mv = {false, 2, 1}, k_addmv = {true, 2, 1},
                       k_dot = {false, 1, 1};

#define MM_ROW_FLAGS(name_, inputs_, attrs_, aten_, spec, flags_) \
  {.name = name_, .inputs = inputs_, .attrs = attrs_, .outputs = "out", .aten = aten_, \
   .kernel = matmul_kernel, .infer = matmul_infer, .check = matmul_check, .impl = &spec, \
   .flags = flags_}
/* GEMMs (a 2-D or batched 3-D C) take epilogues; mv, addmv and dot do not. */
#define MM_ROW(name, inputs, attrs, aten, spec) \
  MM_ROW_FLAGS(name, inputs, attrs, aten, spec, TPU_OP_HEAVY | TPU_OP_EPILOGUE | TPU_OP_COMPLEX)
#define MV_ROW(name, inputs, attrs, aten, spec) \
  MM_ROW_FLAGS(name, inputs, attrs, aten, spec, TPU_OP_HEAVY | TPU_OP_COMPLEX)
/* ... with beta and alpha, which may be complex numbers (complex operands only). */
#define MM_ROW_AB(name, inputs, attrs, aten, spec)                                         \
  MM_ROW_FLAGS(name, inputs, attrs, aten, spec,                                            \
               TPU_OP_HEAVY | TPU_OP_EPILOGUE | TPU_OP_COMPLEX | TPU_OP_COMPLEX_NUMBERS)
#define MV_ROW_AB(name, inputs, attrs, aten, spec) \
  MM_ROW_FLAGS(name, inputs, attrs, aten, spec, TPU_OP_HEAVY | TPU_OP_COMPLEX | TPU_OP_COMPLEX_NUMBERS)

static const tpu_op_def_t k_ops[] = {
    MM_ROW("mm", "self,mat2", "matmul_precision", "mm mm.out", k_mm),
    MM_ROW("bmm", "self,mat2", "matmul_precision", "bmm bmm.out", k_bmm),
    MM_ROW_AB("addmm", "self,mat1,mat2", "beta,alpha,matmul_precision", "addmm addmm_ addmm.out",
           k_addmm),
    MM_ROW_AB("baddbmm", "self,batch1,batch2", "beta,alpha,matmul_precision",
           "baddbmm baddbmm_ baddbmm.out", k_baddbmm),
    MV_ROW("mv", "self,vec", "matmul_precision", "mv mv.out", k_mv),
    MV_ROW_AB("addmv", "self,mat,vec", "beta,alpha,matmul_precision", "addmv addmv_ addmv.out",
           k_addmv),
    MV_ROW("dot", "self,tensor", "matmul_precision", "dot dot.out", k_dot),
    /* vdot conjugates self (complex operands: matmul_complex.c). */
    MV_ROW("vdot", "self,other", "matmul_precision", "vdot vdot.out", k_dot),
};

const tpu_op_family_t tpu_family_matmul = {"matmul", k_ops,
                                           (int32_t)(sizeof(k_ops) / sizeof(k_ops[0]))};
