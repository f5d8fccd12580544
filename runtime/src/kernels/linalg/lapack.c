/* lapack.c — the typed LAPACK tables of the linalg families.
 *
 * The scipy-openblas32 library prefixes every symbol with `scipy_` (its
 * lapack.h mangles names without the prefix), so the Fortran entry points
 * the families use are declared here, once per precision by LA_DECLS, and
 * wrapped (LA_WRAPPERS) into la_impl_t tables that take void* matrices and
 * return `info`. la_impl_for indexes the tables by dtype: float32 and
 * float64 only (half and integer dtypes have no LAPACK).
 */
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "kernels/linalg/linalg.h"

#ifdef TPU_HAVE_OPENBLAS
#include <cblas.h>

/* Fortran LAPACK, 32-bit integers, hidden string lengths at the end. */
#define LA_DECLS(P, T)                                                                            \
  void scipy_##P##potrf_(const char*, const int*, T*, const int*, int*, size_t);                  \
  void scipy_##P##potrs_(const char*, const int*, const int*, const T*, const int*, T*,           \
                         const int*, int*, size_t);                                               \
  void scipy_##P##potri_(const char*, const int*, T*, const int*, int*, size_t);                  \
  void scipy_##P##getrf_(const int*, const int*, T*, const int*, int*, int*);                     \
  void scipy_##P##getrs_(const char*, const int*, const int*, const T*, const int*, const int*,   \
                         T*, const int*, int*, size_t);                                           \
  void scipy_##P##geqrf_(const int*, const int*, T*, const int*, T*, T*, const int*, int*);       \
  void scipy_##P##orgqr_(const int*, const int*, const int*, T*, const int*, const T*, T*,        \
                         const int*, int*);                                                       \
  void scipy_##P##ormqr_(const char*, const char*, const int*, const int*, const int*, const T*,  \
                         const int*, const T*, T*, const int*, T*, const int*, int*, size_t,      \
                         size_t);                                                                 \
  void scipy_##P##syevd_(const char*, const char*, const int*, T*, const int*, T*, T*,            \
                         const int*, int*, const int*, int*, size_t, size_t);                     \
  void scipy_##P##gesdd_(const char*, const int*, const int*, T*, const int*, T*, T*, const int*, \
                         T*, const int*, T*, const int*, int*, int*, size_t);                     \
  void scipy_##P##gelsy_(const int*, const int*, const int*, T*, const int*, T*, const int*,      \
                         int*, const T*, int*, T*, const int*, int*);                             \
  void scipy_##P##gelsd_(const int*, const int*, const int*, T*, const int*, T*, const int*, T*,  \
                         const T*, int*, T*, const int*, int*, int*);                             \
  void scipy_##P##gels_(const char*, const int*, const int*, const int*, T*, const int*, T*,      \
                        const int*, T*, const int*, int*, size_t);                               \
  void scipy_##P##gelss_(const int*, const int*, const int*, T*, const int*, T*, const int*, T*,  \
                         const T*, int*, T*, const int*, int*);                                   \
  void scipy_##P##sytrf_(const char*, const int*, T*, const int*, int*, T*, const int*, int*,     \
                         size_t);                                                                 \
  void scipy_##P##sytrs_(const char*, const int*, const int*, const T*, const int*, const int*,   \
                         T*, const int*, int*, size_t);                                           \
  void scipy_##P##trsm_(const char*, const char*, const char*, const char*, const int*,           \
                        const int*, const T*, const T*, const int*, T*, const int*, size_t,       \
                        size_t, size_t, size_t);

LA_DECLS(s, float)
LA_DECLS(d, double)

#define LA_WRAPPERS(P, T, CB)                                                                     \
  static int P##_potrf(char uplo, int n, void* a, int lda) {                                      \
    int info = 0;                                                                                 \
    scipy_##P##potrf_(&uplo, &n, (T*)a, &lda, &info, 1);                                          \
    return info;                                                                                  \
  }                                                                                               \
  static int P##_potrs(char uplo, int n, int nrhs, const void* a, int lda, void* b, int ldb) {    \
    int info = 0;                                                                                 \
    scipy_##P##potrs_(&uplo, &n, &nrhs, (const T*)a, &lda, (T*)b, &ldb, &info, 1);                \
    return info;                                                                                  \
  }                                                                                               \
  static int P##_potri(char uplo, int n, void* a, int lda) {                                      \
    int info = 0;                                                                                 \
    scipy_##P##potri_(&uplo, &n, (T*)a, &lda, &info, 1);                                          \
    return info;                                                                                  \
  }                                                                                               \
  static int P##_getrf(int m, int n, void* a, int lda, int* ipiv) {                               \
    int info = 0;                                                                                 \
    scipy_##P##getrf_(&m, &n, (T*)a, &lda, ipiv, &info);                                          \
    return info;                                                                                  \
  }                                                                                               \
  static int P##_getrs(char trans, int n, int nrhs, const void* a, int lda, const int* ipiv,      \
                       void* b, int ldb) {                                                        \
    int info = 0;                                                                                 \
    scipy_##P##getrs_(&trans, &n, &nrhs, (const T*)a, &lda, ipiv, (T*)b, &ldb, &info, 1);         \
    return info;                                                                                  \
  }                                                                                               \
  static void P##_trsm(char side, char uplo, char transa, char diag, int m, int n, const void* a, \
                       int lda, void* b, int ldb) {                                               \
    T one = 1;                                                                                    \
    scipy_##P##trsm_(&side, &uplo, &transa, &diag, &m, &n, &one, (const T*)a, &lda, (T*)b, &ldb,  \
                     1, 1, 1, 1);                                                                 \
  }                                                                                               \
  static int P##_geqrf(int m, int n, void* a, int lda, void* tau, void* work, int lwork) {        \
    int info = 0;                                                                                 \
    scipy_##P##geqrf_(&m, &n, (T*)a, &lda, (T*)tau, (T*)work, &lwork, &info);                     \
    return info;                                                                                  \
  }                                                                                               \
  static int P##_orgqr(int m, int n, int k, void* a, int lda, const void* tau, void* work,        \
                       int lwork) {                                                               \
    int info = 0;                                                                                 \
    scipy_##P##orgqr_(&m, &n, &k, (T*)a, &lda, (const T*)tau, (T*)work, &lwork, &info);           \
    return info;                                                                                  \
  }                                                                                               \
  static int P##_ormqr(char side, char trans, int m, int n, int k, const void* a, int lda,        \
                       const void* tau, void* c, int ldc, void* work, int lwork) {                \
    int info = 0;                                                                                 \
    scipy_##P##ormqr_(&side, &trans, &m, &n, &k, (const T*)a, &lda, (const T*)tau, (T*)c, &ldc,   \
                      (T*)work, &lwork, &info, 1, 1);                                             \
    return info;                                                                                  \
  }                                                                                               \
  static int P##_syevd(char jobz, char uplo, int n, void* a, int lda, void* w, void* work,        \
                       int lwork, int* iwork, int liwork) {                                       \
    int info = 0;                                                                                 \
    scipy_##P##syevd_(&jobz, &uplo, &n, (T*)a, &lda, (T*)w, (T*)work, &lwork, iwork, &liwork,     \
                      &info, 1, 1);                                                               \
    return info;                                                                                  \
  }                                                                                               \
  static int P##_gesdd(char jobz, int m, int n, void* a, int lda, void* s, void* u, int ldu,      \
                       void* vt, int ldvt, void* work, int lwork, int* iwork) {                   \
    int info = 0;                                                                                 \
    scipy_##P##gesdd_(&jobz, &m, &n, (T*)a, &lda, (T*)s, (T*)u, &ldu, (T*)vt, &ldvt, (T*)work,    \
                      &lwork, iwork, &info, 1);                                                   \
    return info;                                                                                  \
  }                                                                                               \
  static int P##_gelsy(int m, int n, int nrhs, void* a, int lda, void* b, int ldb, int* jpvt,     \
                       double rcond, int* rank, void* work, int lwork) {                          \
    int info = 0;                                                                                 \
    T rc = (T)rcond;                                                                              \
    scipy_##P##gelsy_(&m, &n, &nrhs, (T*)a, &lda, (T*)b, &ldb, jpvt, &rc, rank, (T*)work, &lwork, \
                      &info);                                                                     \
    return info;                                                                                  \
  }                                                                                               \
  static int P##_gelsd(int m, int n, int nrhs, void* a, int lda, void* b, int ldb, void* s,       \
                       double rcond, int* rank, void* work, int lwork, int* iwork) {              \
    int info = 0;                                                                                 \
    T rc = (T)rcond;                                                                              \
    scipy_##P##gelsd_(&m, &n, &nrhs, (T*)a, &lda, (T*)b, &ldb, (T*)s, &rc, rank, (T*)work,        \
                      &lwork, iwork, &info);                                                      \
    return info;                                                                                  \
  }                                                                                               \
  static int P##_gels(int m, int n, int nrhs, void* a, int lda, void* b, int ldb, void* work,   \
                      int lwork) {                                                                \
    int info = 0;                                                                                 \
    char t = 'N';                                                                                 \
    scipy_##P##gels_(&t, &m, &n, &nrhs, (T*)a, &lda, (T*)b, &ldb, (T*)work, &lwork, &info, 1);    \
    return info;                                                                                  \
  }                                                                                               \
  static int P##_gelss(int m, int n, int nrhs, void* a, int lda, void* b, int ldb, void* s,       \
                       double rcond, int* rank, void* work, int lwork) {                          \
    int info = 0;                                                                                 \
    T rc = (T)rcond;                                                                              \
    scipy_##P##gelss_(&m, &n, &nrhs, (T*)a, &lda, (T*)b, &ldb, (T*)s, &rc, rank, (T*)work, &lwork,\
                      &info);                                                                     \
    return info;                                                                                  \
  }                                                                                               \
  static int P##_sytrf(char uplo, int n, void* a, int lda, int* ipiv, void* work, int lwork) {    \
    int info = 0;                                                                                 \
    scipy_##P##sytrf_(&uplo, &n, (T*)a, &lda, ipiv, (T*)work, &lwork, &info, 1);                  \
    return info;                                                                                  \
  }                                                                                               \
  static int P##_sytrs(char uplo, int n, int nrhs, const void* a, int lda, const int* ipiv,       \
                       void* b, int ldb) {                                                        \
    int info = 0;                                                                                 \
    scipy_##P##sytrs_(&uplo, &n, &nrhs, (const T*)a, &lda, ipiv, (T*)b, &ldb, &info, 1);          \
    return info;                                                                                  \
  }                                                                                               \
  static void P##_gemm(char ta, char tb, int m, int n, int k, double alpha, const void* a,        \
                       int lda, const void* b, int ldb, double beta, void* c, int ldc) {          \
    CB(CblasColMajor, ta == 'N' ? CblasNoTrans : CblasTrans,                                      \
       tb == 'N' ? CblasNoTrans : CblasTrans, m, n, k, (T)alpha, (const T*)a, lda, (const T*)b,   \
       ldb, (T)beta, (T*)c, ldc);                                                                 \
  }                                                                                               \
  static void P##_from_rows(void* dst, int64_t ldd, const void* src, int64_t rows,            \
                            int64_t cols) {                                                       \
    T* d = (T*)dst;                                                                               \
    const T* s = (const T*)src;                                                                   \
    for (int64_t i = 0; i < rows; ++i)                                                            \
      for (int64_t j = 0; j < cols; ++j) d[j * ldd + i] = s[i * cols + j];                        \
  }                                                                                               \
  static void P##_to_rows(void* dst, const void* src, int64_t lds, int64_t rows, int64_t cols) {  \
    T* d = (T*)dst;                                                                               \
    const T* s = (const T*)src;                                                                   \
    for (int64_t i = 0; i < rows; ++i)                                                            \
      for (int64_t j = 0; j < cols; ++j) d[i * cols + j] = s[j * lds + i];                        \
  }                                                                                               \
  static double P##_get(const void* p, int64_t i) { return (double)((const T*)p)[i]; }            \
  static void P##_set(void* p, int64_t i, double x) { ((T*)p)[i] = (T)x; }                        \
  static const la_impl_t k_##P = {0,        P##_potrf, P##_potrs, P##_potri, P##_getrf,           \
                                  P##_getrs, P##_trsm,  P##_geqrf, P##_orgqr, P##_ormqr,          \
                                  P##_syevd, P##_gesdd, P##_gelsy, P##_gelsd, P##_gels,           \
                                  P##_gelss, P##_sytrf, P##_sytrs, P##_gemm,  P##_from_rows,      \
                                  P##_to_rows, P##_get, P##_set};

LA_WRAPPERS(s, float, scipy_cblas_sgemm)
LA_WRAPPERS(d, double, scipy_cblas_dgemm)

/* Indexed by dtype; the work dtype is filled in by la_impl_for. */
static la_impl_t g_impl[TPU_DTYPE_COUNT];
static bool g_has[TPU_DTYPE_COUNT];

static void init_once(void) {
  scipy_openblas_set_num_threads(1);
  g_impl[TPU_DTYPE_F32] = k_s;
  g_impl[TPU_DTYPE_F32].w = TPU_DTYPE_F32;
  g_impl[TPU_DTYPE_F64] = k_d;
  g_impl[TPU_DTYPE_F64].w = TPU_DTYPE_F64;
  g_has[TPU_DTYPE_F32] = g_has[TPU_DTYPE_F64] = true;
}

void la_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, init_once);
}

const la_impl_t* la_impl_for(tpu_dtype_t dtype) {
  la_init();
  if (dtype < 0 || dtype >= TPU_DTYPE_COUNT || !g_has[dtype]) return NULL;
  return &g_impl[dtype];
}
#else
void la_init(void) {}
const la_impl_t* la_impl_for(tpu_dtype_t dtype) {
  (void)dtype;
  return NULL;
}
#endif

tpu_status_t la_check_floats(const tpu_op_def_t* def, const tpu_node_t* node, const char* names,
                             const la_impl_t** impl) {
  tpu_dtype_t dt = TPU_DTYPE_INVALID;
  char buf[128];
  size_t len = strlen(names);
  if (len >= sizeof(buf)) len = sizeof(buf) - 1;
  memcpy(buf, names, len);
  buf[len] = 0;
  for (char* tok = buf; tok && *tok;) {
    char* comma = strchr(tok, ',');
    if (comma) *comma = 0;
    const tpu_view_t* v = ku_input(def, node, tok);
    if (!v) return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "'%s' must be a tensor", tok);
    if (dt == TPU_DTYPE_INVALID) dt = v->dtype;
    if (v->dtype != dt) return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "mixed dtypes");
    tok = comma ? comma + 1 : NULL;
  }
  const la_impl_t* im = la_impl_for(dt);
  if (!im) return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "linalg of %s", tpu_dtype_name(dt));
  for (int32_t i = 0; i < node->num_outputs; ++i) {
    const tpu_view_t* o = &node->outputs[i];
    if (tpu_view_is_absent(o)) continue;
    if (tpu_dtype_is_floating(o->dtype) && o->dtype != dt)
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "output of another dtype");
  }
  if (impl) *impl = im;
  return TPU_OK;
}

/* ---- the batch driver ---------------------------------------------------------- */

#include <stdatomic.h>
#include <stdlib.h>

typedef struct la_run_ctx {
  la_job_t* j;
  atomic_int oom;
  atomic_int info;
} la_run_ctx_t;

static void la_chunk(void* arg, int64_t begin, int64_t end) {
  la_run_ctx_t* c = (la_run_ctx_t*)arg;
  char* ws = malloc(c->j->ws_bytes + 64);
  if (!ws) {
    atomic_store(&c->oom, 1);
    return;
  }
  for (int64_t b = begin; b < end; ++b) {
    int r = c->j->fn(c->j, b, ws);
    if (r != 0) {
      int zero = 0;
      atomic_compare_exchange_strong(&c->info, &zero, r);
    }
  }
  free(ws);
}

tpu_status_t la_run(la_job_t* j) {
  j->err_info = 0;
  j->oom = 0;
  if (j->bt.count == 0) return TPU_OK;
  la_run_ctx_t c;
  c.j = j;
  atomic_init(&c.oom, 0);
  atomic_init(&c.info, 0);
  tpu_parallel_for(j->bt.count, la_grain(j->work), la_chunk, &c);
  j->err_info = atomic_load(&c.info);
  if (atomic_load(&c.oom))
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "linalg scratch allocation failed");
  return TPU_OK;
}
