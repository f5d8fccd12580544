/* linalg.h — the linalg families' private interface (lapack.c,
 * factor.c, decomp.c, their tests).
 *
 * LAPACK is column-major: every kernel gathers each matrix of a batch from
 * its strided view into a column-major scratch matrix (converting to the
 * work dtype), runs the routine there and scatters the results back into
 * the (any-strided) outputs. A matrix is described by la_mat_t: its view,
 * how many leading dims are batch dims, its rows/cols and their strides;
 * swapping rows and cols (la_mat_t_) reads the transpose for free.
 *
 * Batches: a node's batch shape is the broadcast of its operands' batch
 * dims (la_bat_t); la_off gives an operand's element offset of batch b,
 * with stride 0 along the dims it broadcasts. Batches run in parallel with
 * tpu_parallel_for (grain chosen so small problems stay on one thread);
 * OpenBLAS itself is single-threaded (matmul.c sets it so).
 *
 * Dtypes: float32 and float64 run natively (la_impl_for gives the typed
 * LAPACK table, NULL for any other dtype: PyTorch CPU has no half or
 * integer linalg, so the check falls back and the CPU raises its error).
 */
#ifndef TPU_KERNELS_LINALG_H_
#define TPU_KERNELS_LINALG_H_

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/common/kernel_util.h"

/* ---- typed LAPACK ------------------------------------------------------------- */

/* One table per work dtype; each wrapper returns LAPACK's info. Workspace
 * sizes come from the *_lwork queries. Matrices are column-major. */
typedef struct la_impl {
  tpu_dtype_t w; /* the work dtype: F32 or F64 */
  int (*potrf)(char uplo, int n, void* a, int lda);
  int (*potrs)(char uplo, int n, int nrhs, const void* a, int lda, void* b, int ldb);
  int (*potri)(char uplo, int n, void* a, int lda);
  int (*getrf)(int m, int n, void* a, int lda, int* ipiv);
  int (*getrs)(char trans, int n, int nrhs, const void* a, int lda, const int* ipiv, void* b,
               int ldb);
  void (*trsm)(char side, char uplo, char transa, char diag, int m, int n, const void* a,
               int lda, void* b, int ldb);
  int (*geqrf)(int m, int n, void* a, int lda, void* tau, void* work, int lwork);
  int (*orgqr)(int m, int n, int k, void* a, int lda, const void* tau, void* work, int lwork);
  int (*ormqr)(char side, char trans, int m, int n, int k, const void* a, int lda,
               const void* tau, void* c, int ldc, void* work, int lwork);
  int (*syevd)(char jobz, char uplo, int n, void* a, int lda, void* w, void* work, int lwork,
               int* iwork, int liwork);
  int (*gesdd)(char jobz, int m, int n, void* a, int lda, void* s, void* u, int ldu, void* vt,
               int ldvt, void* work, int lwork, int* iwork);
  int (*gelsy)(int m, int n, int nrhs, void* a, int lda, void* b, int ldb, int* jpvt,
               double rcond, int* rank, void* work, int lwork);
  int (*gelsd)(int m, int n, int nrhs, void* a, int lda, void* b, int ldb, void* s,
               double rcond, int* rank, void* work, int lwork, int* iwork);
  int (*gels)(int m, int n, int nrhs, void* a, int lda, void* b, int ldb, void* work, int lwork);
  int (*gelss)(int m, int n, int nrhs, void* a, int lda, void* b, int ldb, void* s,
               double rcond, int* rank, void* work, int lwork);
  int (*sytrf)(char uplo, int n, void* a, int lda, int* ipiv, void* work, int lwork);
  int (*sytrs)(char uplo, int n, int nrhs, const void* a, int lda, const int* ipiv, void* b,
               int ldb);
  void (*gemm)(char ta, char tb, int m, int n, int k, double alpha, const void* a, int lda,
               const void* b, int ldb, double beta, void* c, int ldc);
  /* dst (column-major, leading dim ldd) = src (row-major rows x cols, contiguous), and
   * the inverse (dst row-major contiguous from src column-major with ld lds). */
  void (*from_rows)(void* dst, int64_t ldd, const void* src, int64_t rows, int64_t cols);
  void (*to_rows)(void* dst, const void* src, int64_t lds, int64_t rows, int64_t cols);
  /* One element of a work buffer as a double, and back. */
  double (*get)(const void* p, int64_t i);
  void (*set)(void* p, int64_t i, double x);
} la_impl_t;

/* The table for `dtype`; NULL unless float32 or float64. */
const la_impl_t* la_impl_for(tpu_dtype_t dtype);
/* Sets OpenBLAS to one thread (once): the compute pool splits the batches. */
void la_init(void);

/* ---- batches and matrices ------------------------------------------------------ */

typedef struct la_bat {
  int32_t nb;
  int64_t sizes[TPU_MAX_DIMS];
  int64_t count;
} la_bat_t;

/* A matrix operand: view v's dims [0, nb) are batch dims, then rows, cols
 * with strides rs, cs (a vector operand is a column: cols 1). */
typedef struct la_mat {
  const tpu_view_t* v;
  int32_t nb;
  int64_t rows, cols, rs, cs;
} la_mat_t;

static inline la_mat_t la_mat(const tpu_view_t* v) {
  if (v->ndim < 2) { /* checks refuse these; read as a column, never out of bounds */
    la_mat_t c = {v, 0, v->ndim ? v->sizes[0] : 1, 1, v->ndim ? v->strides[0] : 1, 1};
    return c;
  }
  la_mat_t m = {v, v->ndim - 2, v->sizes[v->ndim - 2], v->sizes[v->ndim - 1],
                v->strides[v->ndim - 2], v->strides[v->ndim - 1]};
  return m;
}
/* A [..., n] view as a batch of n x 1 columns. */
static inline la_mat_t la_vec(const tpu_view_t* v) {
  la_mat_t m = {v, v->ndim - 1, v->sizes[v->ndim - 1], 1, v->strides[v->ndim - 1], 0};
  return m;
}
/* A [...] view as a batch of 1 x 1 matrices. */
static inline la_mat_t la_scalar(const tpu_view_t* v) {
  la_mat_t m = {v, v->ndim, 1, 1, 0, 0};
  return m;
}
static inline la_mat_t la_mat_t_(la_mat_t m) {
  int64_t r = m.rows, rs = m.rs;
  m.rows = m.cols, m.rs = m.cs;
  m.cols = r, m.cs = rs;
  return m;
}

/* The broadcast of the batch dims of `n` matrices. False when they do not broadcast. */
static inline bool la_bat_of(la_bat_t* bt, const la_mat_t* const* ms, int n) {
  bt->nb = 0;
  for (int i = 0; i < n; ++i)
    if (ms[i]->nb > bt->nb) bt->nb = ms[i]->nb;
  for (int32_t d = 0; d < bt->nb; ++d) bt->sizes[d] = 1;
  for (int i = 0; i < n; ++i)
    for (int32_t s = 0; s < ms[i]->nb; ++s) {
      int32_t d = s + bt->nb - ms[i]->nb;
      int64_t z = ms[i]->v->sizes[s];
      if (z == bt->sizes[d] || z == 1) continue;
      if (bt->sizes[d] != 1) return false;
      bt->sizes[d] = z;
    }
  bt->count = 1;
  for (int32_t d = 0; d < bt->nb; ++d) bt->count *= bt->sizes[d];
  return true;
}

/* The offset (in elements) of batch b of m, broadcasting its batch dims. */
static inline int64_t la_off(const la_bat_t* bt, const la_mat_t* m, int64_t b) {
  int64_t off = 0;
  for (int32_t d = bt->nb - 1; d >= 0; --d) {
    int64_t i = b % bt->sizes[d];
    b /= bt->sizes[d];
    int32_t s = d - (bt->nb - m->nb);
    if (s >= 0 && m->v->sizes[s] != 1) off += i * m->v->strides[s];
  }
  return off;
}

/* Whether m's batch dims equal bt's (it is a result, written once per batch). */
static inline bool la_bat_is(const la_bat_t* bt, const la_mat_t* m) {
  if (m->nb != bt->nb) return false;
  for (int32_t d = 0; d < bt->nb; ++d)
    if (m->v->sizes[d] != bt->sizes[d]) return false;
  return true;
}

/* Matrix m at offset `off` to/from a column-major buffer of dtype w (leading dim ld),
 * converting. Fast paths: a column-major matrix moves in one call; a small row-major
 * one in one call through a row-major copy that is transposed in the work dtype. */
#define LA_SMALL_ELEMS 4096
static inline void la_load(const la_mat_t* m, int64_t off, void* buf, tpu_dtype_t w,
                           int64_t ld) {
  const size_t es = tpu_dtype_size(w);
  int64_t n = m->rows * m->cols;
  if (n == 0) return;
  if ((m->rs == 1 || m->rows == 1) && (m->cs == m->rows || m->cols == 1) && ld == m->rows) {
    tpu_convert(buf, w, 1, view_at(m->v, off), m->v->dtype, 1, n);
    return;
  }
  const la_impl_t* im = la_impl_for(w);
  if (im && m->cs == 1 && m->rs == m->cols && n <= LA_SMALL_ELEMS) {
    double tmp[LA_SMALL_ELEMS];
    tpu_convert(tmp, w, 1, view_at(m->v, off), m->v->dtype, 1, n);
    im->from_rows(buf, ld, tmp, m->rows, m->cols);
    return;
  }
  for (int64_t j = 0; j < m->cols; ++j)
    tpu_convert((char*)buf + (size_t)(j * ld) * es, w, 1, view_at(m->v, off + j * m->cs),
                m->v->dtype, m->rs, m->rows);
}
static inline void la_store(const la_mat_t* m, int64_t off, const void* buf, tpu_dtype_t w,
                            int64_t ld) {
  const size_t es = tpu_dtype_size(w);
  int64_t n = m->rows * m->cols;
  if (n == 0) return;
  if ((m->rs == 1 || m->rows == 1) && (m->cs == m->rows || m->cols == 1) && ld == m->rows) {
    tpu_convert(view_at(m->v, off), m->v->dtype, 1, buf, w, 1, n);
    return;
  }
  const la_impl_t* im = la_impl_for(w);
  if (im && m->cs == 1 && m->rs == m->cols && n <= LA_SMALL_ELEMS) {
    double tmp[LA_SMALL_ELEMS];
    im->to_rows(tmp, buf, ld, m->rows, m->cols);
    tpu_convert(view_at(m->v, off), m->v->dtype, 1, tmp, w, 1, n);
    return;
  }
  for (int64_t j = 0; j < m->cols; ++j)
    tpu_convert(view_at(m->v, off + j * m->cs), m->v->dtype, m->rs,
                (const char*)buf + (size_t)(j * ld) * es, w, 1, m->rows);
}
/* Zeroes the strict upper (lower = true) or strict lower triangle of a column-major
 * rows x cols buffer (leading dim ld), so that la_store writes a triangular factor. */
static inline void la_zero_tri(void* buf, tpu_dtype_t w, int64_t ld, int64_t rows, int64_t cols,
                               bool lower) {
  const size_t es = tpu_dtype_size(w);
  for (int64_t j = 0; j < cols; ++j) {
    char* col = (char*)buf + (size_t)(j * ld) * es;
    int64_t d = j < rows ? j : rows;
    if (lower)
      memset(col, 0, (size_t)d * es);
    else if (d + 1 < rows)
      memset(col + (size_t)(d + 1) * es, 0, (size_t)(rows - d - 1) * es);
  }
}

/* Stores the lower (or upper) triangle of buf, diagonal included, and 0
 * elsewhere; `unit` writes 1 on the diagonal instead (L of an LU). */
static inline void la_store_tri(const la_mat_t* m, int64_t off, const void* buf, tpu_dtype_t w,
                                int64_t ld, bool lower, bool unit) {
  const size_t es = tpu_dtype_size(w), os = tpu_dtype_size(m->v->dtype);
  const double zero = 0.0, one = 1.0;
  for (int64_t j = 0; j < m->cols; ++j) {
    char* col = view_at(m->v, off + j * m->cs);
    const char* src = (const char*)buf + (size_t)(j * ld) * es;
    int64_t d = j < m->rows ? j : m->rows; /* rows above the diagonal */
    int64_t below = d < m->rows ? d + 1 : m->rows;
    /* above the diagonal: rows [0, d) */
    if (lower)
      tpu_convert(col, m->v->dtype, m->rs, &zero, TPU_DTYPE_F64, 0, d);
    else
      tpu_convert(col, m->v->dtype, m->rs, src, w, 1, d);
    if (d < m->rows) { /* the diagonal */
      if (unit)
        tpu_convert(col + (size_t)(d * m->rs) * os, m->v->dtype, 1, &one, TPU_DTYPE_F64, 0, 1);
      else
        tpu_convert(col + (size_t)(d * m->rs) * os, m->v->dtype, 1, src + (size_t)d * es, w, 1, 1);
    }
    /* below: rows [below, rows) */
    if (lower)
      tpu_convert(col + (size_t)(below * m->rs) * os, m->v->dtype, m->rs, src + (size_t)below * es,
                  w, 1, m->rows - below);
    else
      tpu_convert(col + (size_t)(below * m->rs) * os, m->v->dtype, m->rs, &zero, TPU_DTYPE_F64, 0,
                  m->rows - below);
  }
}

/* Whether m has exactly `rows` x `cols` matrices over the batch bt. */
static inline bool la_shape_is(const la_mat_t* m, const la_bat_t* bt, int64_t rows,
                               int64_t cols) {
  return la_bat_is(bt, m) && m->rows == rows && m->cols == cols;
}

/* Parallel grain (batches per chunk) for matrices of about `work` flops. */
static inline int64_t la_grain(int64_t work) {
  const int64_t small = 1 << 16;
  return work >= small ? 1 : small / (work > 0 ? work : 1);
}


/* ---- running a node over its batches ------------------------------------------- */

typedef struct la_job la_job_t;
/* Computes batch b with `ws` (j->ws_bytes of scratch); returns LAPACK's
 * info when it is an error the node reports, else 0. */
typedef int (*la_batch_fn)(const la_job_t* j, int64_t b, char* ws);

#define LA_MAX_MATS 8
struct la_job {
  const la_impl_t* im;
  la_bat_t bt;
  la_mat_t m[LA_MAX_MATS]; /* operands and results, as the op lays them out */
  int64_t n, k, p;         /* problem dims, per op */
  int64_t lwork, liwork;   /* LAPACK workspace (queried once) */
  bool f[4];               /* flags, per op */
  char c[2];               /* LAPACK characters, per op */
  double x;                /* a number, per op */
  size_t ws_bytes;
  la_batch_fn fn;
  int64_t work;            /* flops of one batch, for the grain */
  /* results of the run */
  int err_info;            /* the first nonzero fn result, 0 if none */
  int oom;
};

/* Runs j->fn over j->bt's batches: OUT_OF_MEMORY when scratch is short;
 * otherwise OK (the caller reads j->err_info). */
tpu_status_t la_run(la_job_t* j);

/* The element size of the work dtype and the i-th element of a buffer. */
static inline char* la_el(const la_job_t* j, char* p, int64_t i) {
  return p + (size_t)i * tpu_dtype_size(j->im->w);
}
/* Scratch layout helper: advances *at by `elems` of `size` bytes, 64-aligned. */
static inline char* la_take(char** at, int64_t elems, size_t size) {
  char* p = *at;
  size_t bytes = ((size_t)(elems > 0 ? elems : 1) * size + 63) & ~(size_t)63;
  *at += bytes;
  return p;
}
static inline size_t la_bytes(int64_t elems, size_t size) {
  return ((size_t)(elems > 0 ? elems : 1) * size + 63) & ~(size_t)63;
}
static inline int la_ld(int64_t n) { return (int)(n > 1 ? n : 1); }

/* Views of an op's named outputs/inputs, as matrices (rank checked): */
static inline bool la_rank_at_least(const tpu_view_t* v, int32_t r) { return v && v->ndim >= r; }

/* Floating operands of one dtype that LAPACK runs: the common dtype, else UNIMPLEMENTED. */
tpu_status_t la_check_floats(const tpu_op_def_t* def, const tpu_node_t* node, const char* names,
                             const la_impl_t** impl);

/* Plain reference of the linalg_simple rows (trace, linalg_cross, addbmm), for the tests. */
tpu_status_t tpu_linalg_simple_reference(const tpu_op_def_t* def, const tpu_node_t* node);

#endif /* TPU_KERNELS_LINALG_H_ */
