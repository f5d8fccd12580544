/* eig.c — the linalg_eig family: eigenvalues and eigenvectors of general
 * (non-symmetric) square matrices, through LAPACK's geev.
 *
 *   linalg_eig(self)       -> (eigenvalues [..., n], eigenvectors [..., n, n])
 *   linalg_eigvals(self)   -> eigenvalues [..., n]   (_linalg_eigvals, linalg_eigvals.out)
 *
 * Inputs float32/float64 run sgeev/dgeev, complex64/complex128 run cgeev/zgeev
 * (the precision PyTorch's CPU kernel uses); the results are always complex
 * (the input's complex dtype). Only right eigenvectors are computed (jobvl 'N',
 * as the CPU does) and geev's normalisation is kept: each vector has unit
 * Euclidean norm and its largest component real. For real input a complex pair
 * (wi[j] > 0) comes as columns j, j+1 of vr and becomes vr[:, j] ± i vr[:, j+1],
 * PyTorch's linalg_eig_make_complex_eigenvectors rule. Eigenvectors are unique
 * only up to a unit factor: those of real eigenvalues and of complex input come out
 * as CPU's, but a complex pair of a real input can differ from CPU's by a sign
 * (geev's final rotation takes the sign from dlartg, whose convention changed in
 * LAPACK 3.10: OpenBLAS's is the new one, the MKL PyTorch ships the old one).
 *
 * Errors as on the CPU: linalg_eig of a matrix with an inf or NaN raises
 * "torch.linalg.eig: input tensor should not contain infs or NaNs."; eigvals does
 * not check on the CPU, where such a matrix gives MKL-specific values, a LAPACK
 * argument error or a crash (a NaN below the diagonal segfaults torch 2.14's CPU
 * kernel): here every eigenvalue of a matrix with an inf or NaN is NaN, and geev
 * (whose xerbla would print) is not called for it. A geev that does not converge
 * (info > 0) fails the node with PyTorch's message (a RuntimeError; PyTorch raises
 * LinAlgError, a RuntimeError subclass). Batches run in parallel (la_run); each
 * matrix is gathered into column-major scratch. Half and integer inputs, and
 * out= tensors of another dtype, go to the CPU fallback, which raises or casts
 * as PyTorch does.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/linalg/linalg.h"

#define BAD(...) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, __VA_ARGS__)

/* A batch fn's result for a non-finite input (not a LAPACK info). */
#define EIG_NONFINITE INT_MIN

/* geev of one precision: jobvr 'V' or 'N'; w holds n complex eigenvalues
 * (complex geev) or wr[n] then wi[n] (real geev); rwork 2n reals (complex only).
 * lwork -1 queries: the optimal size is work[0] (its real part). */
typedef int (*eig_geev_fn)(char jobvr, int n, void* a, int lda, void* w, void* vr, int ldvr,
                           void* work, int lwork, void* rwork);

typedef struct eig_impl {
  tpu_dtype_t in;   /* the input dtype */
  tpu_dtype_t part; /* its real part dtype (the work dtype of la_impl) */
  tpu_dtype_t cx;   /* the result dtype */
  bool complex_in;
  eig_geev_fn geev;
} eig_impl_t;

#ifdef TPU_HAVE_OPENBLAS
void scipy_sgeev_(const char*, const char*, const int*, float*, const int*, float*, float*,
                  float*, const int*, float*, const int*, float*, const int*, int*, size_t,
                  size_t);
void scipy_dgeev_(const char*, const char*, const int*, double*, const int*, double*, double*,
                  double*, const int*, double*, const int*, double*, const int*, int*, size_t,
                  size_t);
void scipy_cgeev_(const char*, const char*, const int*, void*, const int*, void*, void*,
                  const int*, void*, const int*, void*, const int*, float*, int*, size_t, size_t);
void scipy_zgeev_(const char*, const char*, const int*, void*, const int*, void*, void*,
                  const int*, void*, const int*, void*, const int*, double*, int*, size_t,
                  size_t);

#define EIG_REAL_GEEV(P, T)                                                                     \
  static int P##_geev(char jobvr, int n, void* a, int lda, void* w, void* vr, int ldvr,         \
                      void* work, int lwork, void* rwork) {                                     \
    (void)rwork;                                                                                \
    int info = 0, one = 1;                                                                      \
    char jobvl = 'N';                                                                           \
    T* wr = (T*)w;                                                                              \
    T vl[1];                                                                                    \
    scipy_##P##geev_(&jobvl, &jobvr, &n, (T*)a, &lda, wr, wr + n, vl, &one, (T*)vr, &ldvr,      \
                     (T*)work, &lwork, &info, 1, 1);                                            \
    return info;                                                                                \
  }
#define EIG_COMPLEX_GEEV(P, T)                                                                  \
  static int P##_geev(char jobvr, int n, void* a, int lda, void* w, void* vr, int ldvr,         \
                      void* work, int lwork, void* rwork) {                                     \
    int info = 0, one = 1;                                                                      \
    char jobvl = 'N';                                                                           \
    T vl[2];                                                                                    \
    scipy_##P##geev_(&jobvl, &jobvr, &n, a, &lda, w, vl, &one, vr, &ldvr, work, &lwork,         \
                     (T*)rwork, &info, 1, 1);                                                   \
    return info;                                                                                \
  }
EIG_REAL_GEEV(s, float)
EIG_REAL_GEEV(d, double)
EIG_COMPLEX_GEEV(c, float)
EIG_COMPLEX_GEEV(z, double)

static const eig_impl_t k_impls[] = {
    {TPU_DTYPE_F32, TPU_DTYPE_F32, TPU_DTYPE_C64, false, s_geev},
    {TPU_DTYPE_F64, TPU_DTYPE_F64, TPU_DTYPE_C128, false, d_geev},
    {TPU_DTYPE_C64, TPU_DTYPE_F32, TPU_DTYPE_C64, true, c_geev},
    {TPU_DTYPE_C128, TPU_DTYPE_F64, TPU_DTYPE_C128, true, z_geev},
};
#endif

static const eig_impl_t* eig_impl_for(tpu_dtype_t dtype) {
#ifdef TPU_HAVE_OPENBLAS
  for (size_t i = 0; i < sizeof(k_impls) / sizeof(k_impls[0]); ++i)
    if (k_impls[i].in == dtype) return &k_impls[i];
#endif
  (void)dtype;
  return NULL;
}

/* la_job_t first, so that a batch fn's job is an eig_job_t. */
typedef struct eig_job {
  la_job_t j;
  const eig_impl_t* e;
  const la_impl_t* pi; /* the part dtype's table: element get/set */
  bool vectors, check_finite;
} eig_job_t;

static const tpu_view_t* out_at(const tpu_node_t* node, int32_t i) {
  if (i >= node->num_outputs || tpu_view_is_absent(&node->outputs[i])) return NULL;
  return &node->outputs[i];
}

/* m: 0 A, 1 eigenvalues, 2 eigenvectors. */
static int eig_batch(const la_job_t* jb, int64_t b, char* ws) {
  const eig_job_t* ej = (const eig_job_t*)jb;
  const eig_impl_t* e = ej->e;
  const la_impl_t* pi = ej->pi;
  int64_t n = jb->n;
  size_t ps = tpu_dtype_size(e->part), cs = 2 * ps, is = e->complex_in ? cs : ps;
  char* at = ws;
  char* a = la_take(&at, n * n, is);
  char* w = la_take(&at, 2 * n, ps);                     /* complex w[n] or wr[n], wi[n] */
  char* vr = la_take(&at, ej->vectors ? n * n : 1, is);
  char* rwork = la_take(&at, 2 * n, ps);
  char* cvec = la_take(&at, ej->vectors && !e->complex_in ? n * n : 1, cs);
  char* cval = la_take(&at, e->complex_in ? 1 : n, cs);
  char* work = la_take(&at, jb->lwork, is);
  la_load(&jb->m[0], la_off(&jb->bt, &jb->m[0], b), a, e->in, la_ld(n));
  bool finite = true;
  for (int64_t i = 0, parts = n * n * (e->complex_in ? 2 : 1); i < parts && finite; ++i)
    finite = isfinite(pi->get(a, i));
  if (!finite && ej->check_finite) return EIG_NONFINITE;
  if (!finite) { /* eigvals: NaN eigenvalues, without calling geev (see the top) */
    for (int64_t i = 0; i < 2 * n; ++i) pi->set(e->complex_in ? w : cval, i, NAN);
    la_store(&jb->m[1], la_off(&jb->bt, &jb->m[1], b), e->complex_in ? w : cval, e->cx,
             la_ld(n));
    return 0;
  }
  int info = 0;
  if (n)
    info = e->geev(ej->vectors ? 'V' : 'N', (int)n, a, la_ld(n), w, vr, la_ld(n), work,
                   (int)jb->lwork, rwork);
  if (e->complex_in) {
    la_store(&jb->m[1], la_off(&jb->bt, &jb->m[1], b), w, e->cx, la_ld(n));
    if (ej->vectors) la_store(&jb->m[2], la_off(&jb->bt, &jb->m[2], b), vr, e->cx, la_ld(n));
    return info;
  }
  /* real geev: wr + i wi, and conjugate pairs of vectors from columns j, j+1 */
  for (int64_t i = 0; i < n; ++i) {
    pi->set(cval, 2 * i, pi->get(w, i));
    pi->set(cval, 2 * i + 1, pi->get(w, n + i));
  }
  la_store(&jb->m[1], la_off(&jb->bt, &jb->m[1], b), cval, e->cx, la_ld(n));
  if (!ej->vectors) return info;
  for (int64_t c = 0; c < n; ++c) {
    bool pair = pi->get(w, n + c) != 0.0 && c + 1 < n;
    for (int64_t r = 0; r < n; ++r) {
      double re = pi->get(vr, c * n + r), im = pair ? pi->get(vr, (c + 1) * n + r) : 0.0;
      pi->set(cvec, 2 * (c * n + r), re);
      pi->set(cvec, 2 * (c * n + r) + 1, im);
      if (pair) {
        pi->set(cvec, 2 * ((c + 1) * n + r), re);
        pi->set(cvec, 2 * ((c + 1) * n + r) + 1, -im);
      }
    }
    if (pair) ++c;
  }
  la_store(&jb->m[2], la_off(&jb->bt, &jb->m[2], b), cvec, e->cx, la_ld(n));
  return info;
}

static tpu_status_t eig_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_exec_ctx_t* ctx) {
  (void)ctx;
  eig_job_t ej;
  memset(&ej, 0, sizeof(ej));
  la_job_t* j = &ej.j;
  const tpu_view_t* A = &node->inputs[0].u.view;
  ej.e = eig_impl_for(A->dtype);
  if (!ej.e || A->ndim < 2) BAD("%s: unsupported input", def->name);
  ej.pi = la_impl_for(ej.e->part);
  ej.vectors = strcmp(def->name, "linalg_eig") == 0;
  ej.check_finite = ej.vectors;
  j->im = ej.pi;
  j->m[0] = la_mat(A);
  const la_mat_t* ms[1] = {&j->m[0]};
  la_bat_of(&j->bt, ms, 1);
  int64_t n = j->n = j->m[0].rows;
  const char* api = ej.vectors ? "linalg.eig" : "linalg.eigvals";
  if (j->m[0].cols != n) BAD("%s: A must be batches of square matrices", api);
  const tpu_view_t* vals = out_at(node, 0);
  if (!vals || vals->ndim < 1) BAD("%s: eigenvalues of unexpected shape", api);
  j->m[1] = la_vec(vals);
  if (!la_shape_is(&j->m[1], &j->bt, n, 1)) BAD("%s: eigenvalues of unexpected shape", api);
  if (ej.vectors) {
    const tpu_view_t* vecs = out_at(node, 1);
    if (!vecs || vecs->ndim < 2) BAD("%s: eigenvectors of unexpected shape", api);
    j->m[2] = la_mat(vecs);
    if (!la_shape_is(&j->m[2], &j->bt, n, n)) BAD("%s: eigenvectors of unexpected shape", api);
  }
  size_t ps = tpu_dtype_size(ej.e->part), cs = 2 * ps;
  size_t is = ej.e->complex_in ? cs : ps;
  j->lwork = 1;
  if (n) {
    double q[4] = {0, 0, 0, 0}; /* room for one complex128 */
    double qw[4], qa[4];
    int info = ej.e->geev(ej.vectors ? 'V' : 'N', (int)n, qa, la_ld(n), qw, qa, la_ld(n), q, -1,
                          qw);
    if (info != 0) BAD("%s: LAPACK workspace query failed (info %d)", api, info);
    double opt = ej.pi->get(q, 0);
    j->lwork = opt > 1 ? (int64_t)opt + 1 : 1;
  }
  j->ws_bytes = la_bytes(n * n, is) + la_bytes(2 * n, ps) +
                la_bytes(ej.vectors ? n * n : 1, is) + la_bytes(2 * n, ps) +
                la_bytes(ej.vectors && !ej.e->complex_in ? n * n : 1, cs) +
                la_bytes(ej.e->complex_in ? 1 : n, cs) + la_bytes(j->lwork, is);
  j->fn = eig_batch;
  j->work = 10 * n * n * n;
  TPU_RETURN_IF_ERROR(la_run(j));
  if (j->err_info == EIG_NONFINITE)
    BAD("torch.linalg.eig: input tensor should not contain infs or NaNs.");
  if (j->err_info > 0)
    BAD("torch.%s: The algorithm failed to converge because the input matrix is "
        "ill-conditioned or has too many repeated eigenvalues (error code: %d).",
        api, j->err_info);
  if (j->err_info < 0) BAD("%s: LAPACK argument %d was invalid", api, -j->err_info);
  return TPU_OK;
}

/* Native: a float32/float64/complex64/complex128 batch of square matrices whose
 * outputs are the input's complex dtype; anything else takes the CPU fallback. */
static tpu_status_t eig_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  const tpu_view_t* a = ku_input(def, node, "self");
  if (!a) return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: self must be a tensor", def->name);
  const eig_impl_t* e = eig_impl_for(a->dtype);
  if (!e || !la_impl_for(e->part))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s of %s", def->name,
                           tpu_dtype_name(a->dtype));
  if (a->ndim < 2 || a->sizes[a->ndim - 1] != a->sizes[a->ndim - 2])
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s expects square matrices", def->name);
  if (a->sizes[a->ndim - 1] > 0x3fffffff)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "dimension too large for LAPACK");
  if (node->outputs)
    for (int32_t i = 0; i < node->num_outputs; ++i) {
      const tpu_view_t* o = &node->outputs[i];
      if (!tpu_view_is_absent(o) && o->dtype != e->cx)
        return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: output of dtype %s", def->name,
                               tpu_dtype_name(o->dtype));
    }
  return TPU_OK;
}


/* eigenvalues [..., n] contiguous; eigenvectors [..., n, n] with column-major matrices, the
 * layout of PyTorch's CPU kernel (its meta kernel gives the CUDA one when run on meta
 * tensors). Anything else is left to the meta kernel, which raises PyTorch's errors. */
static tpu_status_t eig_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_view_t* outs) {
  const tpu_view_t* a = ku_input(def, node, "self");
  const eig_impl_t* e = a ? eig_impl_for(a->dtype) : NULL;
  if (!e || a->ndim < 2 || a->sizes[a->ndim - 1] != a->sizes[a->ndim - 2])
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: left to the meta kernel", def->name);
  int32_t r = a->ndim - 2;
  int64_t n = a->sizes[r];
  tpu_view_t* v = &outs[0];
  memset(v, 0, sizeof(*v));
  v->dtype = e->cx;
  v->ndim = a->ndim - 1;
  for (int32_t d = 0; d <= r; ++d) v->sizes[d] = a->sizes[d];
  tpu_view_set_contiguous(v);
  if (strcmp(def->name, "linalg_eig") != 0) return TPU_OK;
  tpu_view_t* m = &outs[1];
  memset(m, 0, sizeof(*m));
  m->dtype = e->cx;
  m->ndim = a->ndim;
  for (int32_t d = 0; d < a->ndim; ++d) m->sizes[d] = a->sizes[d];
  tpu_view_set_contiguous(m);
  m->strides[r] = 1, m->strides[r + 1] = n > 1 ? n : 1;
  return TPU_OK;
}

static const tpu_op_def_t k_rows[] = {
    {.name = "linalg_eig", .inputs = "self", .attrs = "", .outputs = "eigenvalues,eigenvectors",
     .aten = "linalg_eig linalg_eig.out", .kernel = eig_kernel, .infer = eig_infer,
     .check = eig_check, .flags = TPU_OP_COMPLEX},
    {.name = "linalg_eigvals", .inputs = "self", .attrs = "", .outputs = "out",
     .aten = "_linalg_eigvals linalg_eigvals.out", .kernel = eig_kernel, .infer = eig_infer,
     .check = eig_check, .flags = TPU_OP_COMPLEX},
};

const tpu_op_family_t tpu_family_linalg_eig = {"linalg_eig", k_rows,
                                               (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
