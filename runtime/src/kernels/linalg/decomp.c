/* decomp.c — the linalg_decomp family: orthogonal decompositions.
 *
 *   _linalg_svd(A, full_matrices, compute_uv)  gesdd ('A' / 'S' / 'N')
 *   _linalg_eigh(A, UPLO, compute_v)           syevd
 *   linalg_qr(A, mode)                         geqrf, then orgqr for Q
 *   geqrf(self)                                geqrf (a and tau)
 *   linalg_householder_product(input, tau)     orgqr
 *   ormqr(self, input2=tau, input3=C, left, transpose)  ormqr
 *   linalg_matrix_sqrth(A), linalg_polar(A)   from syevd / gesdd and two GEMMs
 * As in factor.c: every matrix is gathered into column-major scratch,
 * LAPACK's workspace sizes are queried once per node, batches run in
 * parallel, outputs come from PyTorch's meta kernels (geqrf has none: its
 * row infers them). A routine that does not converge (info > 0) makes the
 * node fail with PyTorch's message (a RuntimeError; PyTorch raises
 * LinAlgError, a RuntimeError subclass).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/linalg/linalg.h"

#define BAD(...) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, __VA_ARGS__)

static bool attr_b(const tpu_op_def_t* def, const tpu_node_t* node, const char* name, bool d) {
  return tpu_attr_bool(ku_attr(def, node, name), d);
}
static const tpu_view_t* out_at(const tpu_node_t* node, int32_t i) {
  if (i >= node->num_outputs || tpu_view_is_absent(&node->outputs[i])) return NULL;
  return &node->outputs[i];
}
static bool out_mat(const tpu_node_t* node, int32_t i, const la_bat_t* bt, int64_t rows,
                    int64_t cols, la_mat_t* m) {
  const tpu_view_t* v = out_at(node, i);
  if (!v || v->ndim < 2) return false;
  *m = la_mat(v);
  return la_shape_is(m, bt, rows, cols);
}
static bool out_vec(const tpu_node_t* node, int32_t i, const la_bat_t* bt, int64_t n,
                    la_mat_t* m) {
  const tpu_view_t* v = out_at(node, i);
  if (!v || v->ndim < 1) return false;
  *m = la_vec(v);
  return la_shape_is(m, bt, n, 1);
}
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The single input matrix: batch, rows (n), cols (k). */
static void setup_one(la_job_t* j, const tpu_node_t* node) {
  memset(j, 0, sizeof(*j));
  j->im = la_impl_for(node->inputs[0].u.view.dtype);
  j->m[0] = la_mat(&node->inputs[0].u.view);
  const la_mat_t* ms[1] = {&j->m[0]};
  la_bat_of(&j->bt, ms, 1);
  j->n = j->m[0].rows, j->k = j->m[0].cols;
}

static int64_t queried(const la_impl_t* im, const char* q) {
  double x = im->get(q, 0);
  return x > 1 ? (int64_t)x + 1 : 1;
}

/* ---- svd ------------------------------------------------------------------------------ */

/* m: 0 A, 1 U, 2 S, 3 Vh; c[0] jobz; p: U's and Vh's inner size (m or k / n or k) */
static int svd_batch(const la_job_t* j, int64_t b, char* ws) {
  int64_t m = j->n, n = j->k, k = min64(m, n);
  const la_impl_t* im = j->im;
  size_t es = tpu_dtype_size(im->w);
  char jobz = j->c[0];
  int64_t ucols = jobz == 'A' ? m : k, vrows = jobz == 'A' ? n : k;
  char* at = ws;
  char* a = la_take(&at, m * n, es);
  char* s = la_take(&at, k, es);
  char* u = la_take(&at, jobz == 'N' ? 1 : m * ucols, es);
  char* vt = la_take(&at, jobz == 'N' ? 1 : vrows * n, es);
  int* iwork = (int*)la_take(&at, 8 * k, sizeof(int));
  char* work = la_take(&at, j->lwork, es);
  la_load(&j->m[0], la_off(&j->bt, &j->m[0], b), a, im->w, la_ld(m));
  int info = 0;
  if (k)
    info = im->gesdd(jobz, (int)m, (int)n, a, la_ld(m), s, u, la_ld(m), vt, la_ld(vrows), work,
                     (int)j->lwork, iwork);
  else if (jobz != 'N') { /* empty: U and Vh are identities (complete) or empty */
    memset(u, 0, la_bytes(m * ucols, es));
    memset(vt, 0, la_bytes(vrows * n, es));
    for (int64_t i = 0; i < min64(m, ucols); ++i) im->set(u, i * m + i, 1.0);
    for (int64_t i = 0; i < min64(vrows, n); ++i) im->set(vt, i * vrows + i, 1.0);
  }
  la_store(&j->m[2], la_off(&j->bt, &j->m[2], b), s, im->w, la_ld(k));
  if (jobz != 'N') {
    la_store(&j->m[1], la_off(&j->bt, &j->m[1], b), u, im->w, la_ld(m));
    la_store(&j->m[3], la_off(&j->bt, &j->m[3], b), vt, im->w, la_ld(vrows));
  }
  return info;
}

static tpu_status_t svd_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_exec_ctx_t* ctx) {
  la_job_t j;
  setup_one(&j, node);
  bool full = attr_b(def, node, "full_matrices", false);
  bool uv = attr_b(def, node, "compute_uv", true);
  j.c[0] = uv ? (full ? 'A' : 'S') : 'N';
  int64_t m = j.n, n = j.k, k = min64(m, n);
  int64_t ucols = full ? m : k, vrows = full ? n : k;
  if (!out_vec(node, 1, &j.bt, k, &j.m[2])) BAD("linalg.svd: S of unexpected shape");
  if (uv && (!out_mat(node, 0, &j.bt, m, ucols, &j.m[1]) ||
             !out_mat(node, 2, &j.bt, vrows, n, &j.m[3])))
    BAD("linalg.svd: U or Vh of unexpected shape");
  j.lwork = 1;
  if (k) {
    char q[16];
    int iw = 0;
    j.im->gesdd(j.c[0], (int)m, (int)n, q, la_ld(m), q, q, la_ld(m), q, la_ld(vrows), q, -1,
                &iw);
    j.lwork = queried(j.im, q);
  }
  size_t es = tpu_dtype_size(j.im->w);
  j.ws_bytes = la_bytes(m * n, es) + la_bytes(k, es) + la_bytes(m * ucols, es) +
               la_bytes(vrows * n, es) + la_bytes(8 * k, sizeof(int)) + la_bytes(j.lwork, es);
  j.fn = svd_batch;
  j.work = m * n * k * 4;
  TPU_RETURN_IF_ERROR(la_run(&j));
  if (j.err_info > 0)
    BAD("linalg.svd: The algorithm failed to converge because the input matrix is "
        "ill-conditioned or has too many repeated singular values (error code: %d).",
        j.err_info);
  if (j.err_info < 0) BAD("linalg.svd: LAPACK argument %d was invalid", -j.err_info);
  return TPU_OK;
}

/* ---- eigh ------------------------------------------------------------------------------ */

/* m: 0 A, 1 eigenvalues, 2 eigenvectors; c[0] jobz, c[1] uplo */
static int eigh_batch(const la_job_t* j, int64_t b, char* ws) {
  int64_t n = j->n;
  const la_impl_t* im = j->im;
  size_t es = tpu_dtype_size(im->w);
  char* at = ws;
  char* a = la_take(&at, n * n, es);
  char* w = la_take(&at, n, es);
  int* iwork = (int*)la_take(&at, j->liwork, sizeof(int));
  char* work = la_take(&at, j->lwork, es);
  la_load(&j->m[0], la_off(&j->bt, &j->m[0], b), a, im->w, la_ld(n));
  int info = n ? im->syevd(j->c[0], j->c[1], (int)n, a, la_ld(n), w, work, (int)j->lwork, iwork,
                           (int)j->liwork)
               : 0;
  la_store(&j->m[1], la_off(&j->bt, &j->m[1], b), w, im->w, la_ld(n));
  if (j->c[0] == 'V') la_store(&j->m[2], la_off(&j->bt, &j->m[2], b), a, im->w, la_ld(n));
  return info;
}

static tpu_status_t eigh_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  la_job_t j;
  setup_one(&j, node);
  const tpu_attr_t* uplo = ku_attr(def, node, "UPLO");
  bool v = attr_b(def, node, "compute_v", true);
  j.c[0] = v ? 'V' : 'N';
  j.c[1] = (uplo && uplo->kind == TPU_ATTR_STR && (uplo->u.str[0] == 'U' || uplo->u.str[0] == 'u'))
               ? 'U'
               : 'L';
  int64_t n = j.n;
  if (j.k != n) BAD("linalg.eigh: A must be batches of square matrices");
  if (!out_vec(node, 0, &j.bt, n, &j.m[1]) || (v && !out_mat(node, 1, &j.bt, n, n, &j.m[2])))
    BAD("linalg.eigh: outputs of unexpected shapes");
  j.lwork = j.liwork = 1;
  if (n) {
    char q[16];
    int iq = 0;
    j.im->syevd(j.c[0], j.c[1], (int)n, q, la_ld(n), q, q, -1, &iq, -1);
    j.lwork = queried(j.im, q);
    j.liwork = iq > 1 ? iq : 1;
  }
  size_t es = tpu_dtype_size(j.im->w);
  j.ws_bytes = la_bytes(n * n, es) + la_bytes(n, es) + la_bytes(j.liwork, sizeof(int)) +
               la_bytes(j.lwork, es);
  j.fn = eigh_batch;
  j.work = 4 * n * n * n;
  TPU_RETURN_IF_ERROR(la_run(&j));
  if (j.err_info > 0)
    BAD("linalg.eigh: The algorithm failed to converge because the input matrix is "
        "ill-conditioned or has too many repeated eigenvalues (error code: %d).",
        j.err_info);
  return TPU_OK;
}

static tpu_status_t eigh_check_uplo(const tpu_op_def_t* def, const tpu_node_t* node) {
  const tpu_attr_t* uplo = ku_attr(def, node, "UPLO");
  if (uplo && uplo->kind == TPU_ATTR_STR) {
    const char* s = uplo->u.str;
    if (!((s[0] == 'L' || s[0] == 'U' || s[0] == 'l' || s[0] == 'u') && s[1] == 0))
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "UPLO must be 'L' or 'U'");
  }
  return TPU_OK;
}

/* ---- QR family ------------------------------------------------------------------------- */

/* linalg_qr (f[0]: Q wanted, f[1]: complete), geqrf (f[2]), householder_product (f[3]).
 * m: 0 A, 1 Q / a / out, 2 R / tau, 3 tau input (householder) */
static int qr_batch(const la_job_t* j, int64_t b, char* ws) {
  int64_t m = j->n, n = j->k, k = min64(m, n);
  const la_impl_t* im = j->im;
  size_t es = tpu_dtype_size(im->w);
  int64_t cols = j->f[1] ? max64(m, n) : n;
  char* at = ws;
  char* a = la_take(&at, m * cols, es);
  char* tau = la_take(&at, max64(k, j->p), es);
  char* work = la_take(&at, j->lwork, es);
  la_load(&j->m[0], la_off(&j->bt, &j->m[0], b), a, im->w, la_ld(m));
  int info = 0;
  if (j->f[3]) { /* householder_product: orgqr of the given reflectors */
    la_load(&j->m[3], la_off(&j->bt, &j->m[3], b), tau, im->w, 1);
    if (m && n) info = im->orgqr((int)m, (int)n, (int)j->p, a, la_ld(m), tau, work, (int)j->lwork);
    la_store(&j->m[1], la_off(&j->bt, &j->m[1], b), a, im->w, la_ld(m));
    return info;
  }
  if (k) info = im->geqrf((int)m, (int)n, a, la_ld(m), tau, work, (int)j->lwork);
  if (j->f[2]) { /* geqrf: a and tau as they are */
    la_store(&j->m[1], la_off(&j->bt, &j->m[1], b), a, im->w, la_ld(m));
    la_store(&j->m[2], la_off(&j->bt, &j->m[2], b), tau, im->w, 1);
    return info;
  }
  la_store_tri(&j->m[2], la_off(&j->bt, &j->m[2], b), a, im->w, la_ld(m), false, false);
  if (j->f[0]) {
    int64_t qc = j->f[1] ? m : k;
    if (m && qc) info = im->orgqr((int)m, (int)qc, (int)k, a, la_ld(m), tau, work, (int)j->lwork);
    la_store(&j->m[1], la_off(&j->bt, &j->m[1], b), a, im->w, la_ld(m));
  }
  return info;
}

static void qr_sizes(la_job_t* j) {
  int64_t m = j->n, n = j->k, k = min64(m, n);
  int64_t cols = j->f[1] ? max64(m, n) : n;
  char q[16];
  j->lwork = 1;
  if (k || j->f[3]) {
    if (!j->f[3] && k) {
      j->im->geqrf((int)m, (int)n, q, la_ld(m), q, q, -1);
      j->lwork = max64(j->lwork, queried(j->im, q));
    }
    int64_t qc = j->f[3] ? n : (j->f[1] ? m : k);
    int64_t kk = j->f[3] ? j->p : k;
    if ((j->f[0] || j->f[3]) && m && qc) {
      j->im->orgqr((int)m, (int)qc, (int)kk, q, la_ld(m), q, q, -1);
      j->lwork = max64(j->lwork, queried(j->im, q));
    }
  }
  size_t es = tpu_dtype_size(j->im->w);
  j->ws_bytes = la_bytes(m * cols, es) + la_bytes(max64(k, j->p), es) + la_bytes(j->lwork, es);
  j->fn = qr_batch;
  j->work = 4 * m * n * k;
}

static tpu_status_t qr_status(const la_job_t* j, const char* what) {
  if (j->err_info != 0) BAD("%s: LAPACK failed (info %d)", what, j->err_info);
  return TPU_OK;
}

static tpu_status_t qr_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  la_job_t j;
  setup_one(&j, node);
  const tpu_attr_t* mode = ku_attr(def, node, "mode");
  const char* md = (mode && mode->kind == TPU_ATTR_STR) ? mode->u.str : "reduced";
  j.f[0] = strcmp(md, "r") != 0;
  j.f[1] = strcmp(md, "complete") == 0;
  int64_t m = j.n, n = j.k, k = min64(m, n);
  int64_t rr = j.f[1] ? m : k, qc = j.f[1] ? m : k;
  if (!out_mat(node, 1, &j.bt, rr, n, &j.m[2])) BAD("linalg.qr: R of unexpected shape");
  if (j.f[0] && !out_mat(node, 0, &j.bt, m, qc, &j.m[1])) BAD("linalg.qr: Q of unexpected shape");
  qr_sizes(&j);
  TPU_RETURN_IF_ERROR(la_run(&j));
  return qr_status(&j, "linalg.qr");
}

static tpu_status_t qr_check_mode(const tpu_op_def_t* def, const tpu_node_t* node) {
  const tpu_attr_t* mode = ku_attr(def, node, "mode");
  if (mode && mode->kind == TPU_ATTR_STR && strcmp(mode->u.str, "reduced") &&
      strcmp(mode->u.str, "complete") && strcmp(mode->u.str, "r"))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "qr mode");
  return TPU_OK;
}

static tpu_status_t geqrf_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_exec_ctx_t* ctx) {
  la_job_t j;
  setup_one(&j, node);
  j.f[2] = true;
  int64_t k = min64(j.n, j.k);
  if (!out_mat(node, 0, &j.bt, j.n, j.k, &j.m[1]) || !out_vec(node, 1, &j.bt, k, &j.m[2]))
    BAD("geqrf: outputs of unexpected shapes");
  qr_sizes(&j);
  TPU_RETURN_IF_ERROR(la_run(&j));
  return qr_status(&j, "geqrf");
}

/* geqrf has no meta kernel: a is A's shape (column-major, as the CPU's), tau batch + min(m, n). */
static tpu_status_t geqrf_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_view_t* outs) {
  const tpu_view_t* a = ku_input(def, node, "self");
  if (!a || a->ndim < 2) return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "geqrf of a matrix");
  tpu_view_t* o = &outs[0];
  memset(o, 0, sizeof(*o));
  o->dtype = a->dtype;
  o->ndim = a->ndim;
  for (int32_t d = 0; d < a->ndim; ++d) o->sizes[d] = a->sizes[d];
  tpu_view_set_contiguous(o);
  int32_t r = a->ndim - 2;
  int64_t m = a->sizes[r], n = a->sizes[r + 1];
  o->strides[r] = 1, o->strides[r + 1] = m > 1 ? m : 1; /* column-major matrices */
  tpu_view_t* t = &outs[1];
  memset(t, 0, sizeof(*t));
  t->dtype = a->dtype;
  t->ndim = a->ndim - 1;
  for (int32_t d = 0; d < r; ++d) t->sizes[d] = a->sizes[d];
  t->sizes[r] = min64(m, n);
  tpu_view_set_contiguous(t);
  return TPU_OK;
}

static tpu_status_t householder_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                       tpu_exec_ctx_t* ctx) {
  la_job_t j;
  setup_one(&j, node);
  j.f[3] = true;
  const tpu_view_t* tau = &node->inputs[1].u.view;
  if (tau->ndim < 1) BAD("householder_product: tau must be at least 1-D");
  j.m[3] = la_vec(tau);
  j.p = j.m[3].rows;
  if (!la_bat_is(&j.bt, &j.m[3]) || j.p > j.k || j.k > j.n)
    BAD("householder_product: incompatible shapes");
  if (!out_mat(node, 0, &j.bt, j.n, j.k, &j.m[1])) BAD("householder_product: unexpected output");
  qr_sizes(&j);
  TPU_RETURN_IF_ERROR(la_run(&j));
  return qr_status(&j, "linalg.householder_product");
}

/* ormqr(self=A reflectors, input2=tau, input3=C, left, transpose): m: 0 A, 1 tau, 2 C, 3 out;
 * c[0] side, c[1] trans; n = C rows, k = C cols, p = reflectors */
static int ormqr_batch(const la_job_t* j, int64_t b, char* ws) {
  const la_impl_t* im = j->im;
  size_t es = tpu_dtype_size(im->w);
  int64_t ar = j->m[0].rows, p = j->p, mr = j->n, nc = j->k;
  char* at = ws;
  char* a = la_take(&at, ar * j->m[0].cols, es);
  char* tau = la_take(&at, p, es);
  char* c = la_take(&at, mr * nc, es);
  char* work = la_take(&at, j->lwork, es);
  la_load(&j->m[0], la_off(&j->bt, &j->m[0], b), a, im->w, la_ld(ar));
  la_load(&j->m[1], la_off(&j->bt, &j->m[1], b), tau, im->w, 1);
  la_load(&j->m[2], la_off(&j->bt, &j->m[2], b), c, im->w, la_ld(mr));
  int info = 0;
  if (mr && nc)
    info = im->ormqr(j->c[0], j->c[1], (int)mr, (int)nc, (int)p, a, la_ld(ar), tau, c, la_ld(mr),
                     work, (int)j->lwork);
  la_store(&j->m[3], la_off(&j->bt, &j->m[3], b), c, im->w, la_ld(mr));
  return info;
}

static tpu_status_t ormqr_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_exec_ctx_t* ctx) {
  la_job_t j;
  memset(&j, 0, sizeof(j));
  j.im = la_impl_for(node->inputs[0].u.view.dtype);
  const tpu_view_t *A = &node->inputs[0].u.view, *tau = &node->inputs[1].u.view,
                   *C = &node->inputs[2].u.view;
  const tpu_view_t* o = out_at(node, 0);
  if (A->ndim < 2 || tau->ndim < 1 || C->ndim < 2 || !o || o->ndim < 2)
    BAD("ormqr: expects matrices");
  bool left = attr_b(def, node, "left", true);
  j.c[0] = left ? 'L' : 'R';
  j.c[1] = attr_b(def, node, "transpose", false) ? 'T' : 'N';
  j.m[0] = la_mat(A), j.m[1] = la_vec(tau), j.m[2] = la_mat(C), j.m[3] = la_mat(o);
  const la_mat_t* ms[1] = {&j.m[2]};
  la_bat_of(&j.bt, ms, 1);
  j.n = j.m[2].rows, j.k = j.m[2].cols, j.p = j.m[1].rows;
  int64_t need = left ? j.n : j.k;
  if (!la_bat_is(&j.bt, &j.m[0]) || !la_bat_is(&j.bt, &j.m[1]) || j.m[0].rows != need ||
      j.p > j.m[0].cols || j.p > need || !la_shape_is(&j.m[3], &j.bt, j.n, j.k))
    BAD("ormqr: incompatible shapes");
  j.lwork = 1;
  if (j.n && j.k) {
    char q[16];
    j.im->ormqr(j.c[0], j.c[1], (int)j.n, (int)j.k, (int)j.p, q, la_ld(j.m[0].rows), q, q,
                la_ld(j.n), q, -1);
    j.lwork = queried(j.im, q);
  }
  size_t es = tpu_dtype_size(j.im->w);
  j.ws_bytes = la_bytes(j.m[0].rows * j.m[0].cols, es) + la_bytes(j.p, es) +
               la_bytes(j.n * j.k, es) + la_bytes(j.lwork, es);
  j.fn = ormqr_batch;
  j.work = 4 * j.n * j.k * (j.p + 1);
  TPU_RETURN_IF_ERROR(la_run(&j));
  return qr_status(&j, "ormqr");
}

/* ---- functions of the decompositions -------------------------------------------------- */

/* linalg_matrix_sqrth(A) = V diag(sqrt(w)) Vᵀ from syevd('V', 'L') (negative eigenvalues
 * give NaN, as the CPU's sqrt does); linalg_polar(A) -> U = W Vᵀ, H = V diag(s) Vᵀ from
 * gesdd('S') of A = W diag(s) Vᵀ (m >= n).
 * m: 0 A, 1 X / U, 2 H; f[0] polar */
static int matfn_batch(const la_job_t* j, int64_t b, char* ws) {
  int64_t m = j->n, n = j->k;
  const la_impl_t* im = j->im;
  size_t es = tpu_dtype_size(im->w);
  char* at = ws;
  char* a = la_take(&at, m * n, es);
  char* s = la_take(&at, n, es);
  char* u = la_take(&at, m * n, es);
  char* vt = la_take(&at, n * n, es);
  char* t = la_take(&at, m * n, es);
  int* iwork = (int*)la_take(&at, j->liwork, sizeof(int));
  char* work = la_take(&at, j->lwork, es);
  la_load(&j->m[0], la_off(&j->bt, &j->m[0], b), a, im->w, la_ld(m));
  int info = 0;
  if (!j->f[0]) { /* sqrth: a holds V (column-major), s the eigenvalues */
    if (n) info = im->syevd('V', 'L', (int)n, a, la_ld(n), s, work, (int)j->lwork, iwork,
                            (int)j->liwork);
    for (int64_t c = 0; c < n; ++c) {
      double r = sqrt(im->get(s, c));
      for (int64_t i = 0; i < n; ++i) im->set(t, c * n + i, im->get(a, c * n + i) * r);
    }
    if (n) im->gemm('N', 'T', (int)n, (int)n, (int)n, 1.0, t, la_ld(n), a, la_ld(n), 0.0, u,
                    la_ld(n));
    la_store(&j->m[1], la_off(&j->bt, &j->m[1], b), u, im->w, la_ld(n));
    return info;
  }
  if (m && n)
    info = im->gesdd('S', (int)m, (int)n, a, la_ld(m), s, u, la_ld(m), vt, la_ld(n), work,
                     (int)j->lwork, iwork);
  if (m && n) /* U = W Vᵀ (m x n) */
    im->gemm('N', 'N', (int)m, (int)n, (int)n, 1.0, u, la_ld(m), vt, la_ld(n), 0.0, t, la_ld(m));
  la_store(&j->m[1], la_off(&j->bt, &j->m[1], b), t, im->w, la_ld(m));
  for (int64_t c = 0; c < n; ++c) /* a = diag(s) Vᵀ, then H = V (diag(s) Vᵀ) */
    for (int64_t i = 0; i < n; ++i) im->set(a, c * n + i, im->get(s, i) * im->get(vt, c * n + i));
  if (n) im->gemm('T', 'N', (int)n, (int)n, (int)n, 1.0, vt, la_ld(n), a, la_ld(n), 0.0, t,
                  la_ld(n));
  la_store(&j->m[2], la_off(&j->bt, &j->m[2], b), t, im->w, la_ld(n));
  return info;
}

static tpu_status_t matfn_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_exec_ctx_t* ctx) {
  la_job_t j;
  setup_one(&j, node);
  bool polar = strcmp(def->name, "linalg_polar") == 0;
  j.f[0] = polar;
  int64_t m = j.n, n = j.k;
  if (polar ? m < n : m != n) BAD("%s: unexpected shape", def->name);
  if (!out_mat(node, 0, &j.bt, m, n, &j.m[1]) || (polar && !out_mat(node, 1, &j.bt, n, n, &j.m[2])))
    BAD("%s: outputs of unexpected shapes", def->name);
  char q[16];
  int iq = 1;
  j.lwork = j.liwork = 1;
  if (m && n) {
    if (polar) {
      j.im->gesdd('S', (int)m, (int)n, q, la_ld(m), q, q, la_ld(m), q, la_ld(n), q, -1, &iq);
      j.liwork = 8 * n;
    } else {
      j.im->syevd('V', 'L', (int)n, q, la_ld(n), q, q, -1, &iq, -1);
      j.liwork = iq > 1 ? iq : 1;
    }
    j.lwork = queried(j.im, q);
  }
  size_t es = tpu_dtype_size(j.im->w);
  j.ws_bytes = 3 * la_bytes(m * n, es) + la_bytes(n, es) + la_bytes(n * n, es) +
               la_bytes(j.liwork, sizeof(int)) + la_bytes(j.lwork, es);
  j.fn = matfn_batch;
  j.work = 8 * m * n * n;
  TPU_RETURN_IF_ERROR(la_run(&j));
  if (j.err_info > 0) BAD("%s: the algorithm failed to converge (error code: %d).", def->name,
                          j.err_info);
  return TPU_OK;
}

static tpu_status_t matfn_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  TPU_RETURN_IF_ERROR(la_check_floats(def, node, def->inputs, NULL));
  const tpu_view_t* a = &node->inputs[0].u.view;
  if (a->ndim < 2) return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "expects matrices");
  int64_t m = a->sizes[a->ndim - 2], n = a->sizes[a->ndim - 1];
  bool polar = strcmp(def->name, "linalg_polar") == 0;
  if ((polar ? m < n : m != n) || m > 0x3fffffff)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s of these shapes", def->name);
  return TPU_OK;
}

/* ---- checks and rows --------------------------------------------------------------------- */

static tpu_status_t check_inputs(const tpu_op_def_t* def, const tpu_node_t* node) {
  TPU_RETURN_IF_ERROR(la_check_floats(def, node, def->inputs, NULL));
  for (int32_t i = 0; i < node->num_inputs; ++i) {
    const tpu_view_t* v = &node->inputs[i].u.view;
    if (v->ndim < (i == 1 && node->num_inputs > 1 ? 1 : 2))
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "expects matrices");
    for (int32_t d = 0; d < v->ndim; ++d)
      if (v->sizes[d] > 0x3fffffff)
        return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "dimension too large for LAPACK");
  }
  TPU_RETURN_IF_ERROR(eigh_check_uplo(def, node));
  return qr_check_mode(def, node);
}

static const tpu_op_def_t k_rows[] = {
    {.name = "linalg_svd", .inputs = "A", .attrs = "full_matrices,compute_uv", .outputs = "U,S,Vh",
     .aten = "_linalg_svd _linalg_svd.U", .kernel = svd_kernel, .infer = NULL,
     .check = check_inputs},
    {.name = "linalg_eigh", .inputs = "A", .attrs = "UPLO,compute_v",
     .outputs = "eigenvalues,eigenvectors", .aten = "_linalg_eigh _linalg_eigh.eigenvalues",
     .kernel = eigh_kernel, .infer = NULL, .check = check_inputs},
    {.name = "linalg_qr", .inputs = "A", .attrs = "mode", .outputs = "Q,R",
     .aten = "linalg_qr linalg_qr.out", .kernel = qr_kernel, .infer = NULL, .check = check_inputs},
    {.name = "geqrf", .inputs = "self", .attrs = "", .outputs = "a,tau", .aten = "geqrf geqrf.a",
     .kernel = geqrf_kernel, .infer = geqrf_infer, .check = check_inputs},
    {.name = "linalg_householder_product", .inputs = "input,tau", .attrs = "", .outputs = "out",
     .aten = "linalg_householder_product linalg_householder_product.out",
     .kernel = householder_kernel, .infer = NULL, .check = check_inputs},
    {.name = "linalg_matrix_sqrth", .inputs = "self", .attrs = "", .outputs = "out",
     .aten = "linalg_matrix_sqrth linalg_matrix_sqrth.out", .kernel = matfn_kernel, .infer = NULL,
     .check = matfn_check},
    {.name = "linalg_polar", .inputs = "A", .attrs = "", .outputs = "U,H",
     .aten = "linalg_polar linalg_polar.out", .kernel = matfn_kernel, .infer = NULL,
     .check = matfn_check},
    {.name = "ormqr", .inputs = "self,input2,input3", .attrs = "left,transpose", .outputs = "out",
     .aten = "ormqr ormqr.out", .kernel = ormqr_kernel, .infer = NULL, .check = check_inputs},
};

const tpu_op_family_t tpu_family_linalg_decomp = {"linalg_decomp", k_rows,
                                                  (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
