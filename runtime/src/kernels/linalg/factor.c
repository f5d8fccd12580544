/* factor.c — the linalg family: factorisations and the solves built on them.
 *
 *   linalg_cholesky_ex       potrf (upper reads and writes the upper triangle)
 *   _cholesky_solve_helper   potrs      cholesky_inverse  potri, symmetrised
 *   linalg_lu_factor_ex      getrf      linalg_lu / lu_unpack  P, L, U from getrf
 *   linalg_lu_solve          getrs ('N' / 'T'; left=False solves the transpose)
 *   _linalg_solve_ex         getrf of A's batches, then getrs over the broadcast batch
 *   linalg_inv_ex            getrf + getrs against the identity (PyTorch's solve(A, I))
 *   _linalg_det, _linalg_slogdet  getrf of A^T (as PyTorch); product / log-sum of U's
 *                            diagonal, pivot sign
 *   linalg_solve_triangular, triangular_solve  trsm
 *   linalg_ldl_factor_ex, linalg_ldl_solve      sytrf('L') of tril(A), sytrs
 * Every op gathers each matrix into column-major scratch (linalg.h), runs
 * the routine, and scatters the results into its outputs, whose shapes come
 * from PyTorch's meta kernels (the rows have no infer); the kernels check
 * them before writing. `info` outputs carry LAPACK's info as PyTorch does
 * (the non-_ex ops raise LinAlgError from it in PyTorch's own composite
 * _linalg_check_errors); rows refuse check_errors=True (the CPU raises).
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

static bool fits_int(int64_t a) { return a >= 0 && a <= 0x7fffffff / 2; }

/* Common check: the named inputs are float32/float64 of one dtype, matrices
 * of rank >= 2 (`vec_ok`: the second may be a vector), dims fit LAPACK, no
 * check_errors=True, and the listed flags hold. */
static tpu_status_t check_mats(const tpu_op_def_t* def, const tpu_node_t* node, const char* names) {
  TPU_RETURN_IF_ERROR(la_check_floats(def, node, names, NULL));
  if (attr_b(def, node, "check_errors", false))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "check_errors=True runs on the CPU");
  for (int32_t i = 0; i < node->num_inputs; ++i) {
    if (node->inputs[i].kind != TPU_VALUE_VIEW) continue;
    const tpu_view_t* v = &node->inputs[i].u.view;
    for (int32_t d = 0; d < v->ndim; ++d)
      if (!fits_int(v->sizes[d]))
        return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "dimension too large for LAPACK");
  }
  return TPU_OK;
}

static tpu_status_t check_square(const tpu_op_def_t* def, const tpu_node_t* node) {
  TPU_RETURN_IF_ERROR(check_mats(def, node, def->inputs));
  const tpu_view_t* a = &node->inputs[0].u.view;
  if (a->ndim < 2 || a->sizes[a->ndim - 1] != a->sizes[a->ndim - 2])
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "expects square matrices");
  return TPU_OK;
}

/* An output of the batch shape of bt and rows x cols matrices (a 1-D
 * `vec` output is rows long; `scalar`: just the batch). */
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
static bool out_scalar(const tpu_node_t* node, int32_t i, const la_bat_t* bt, la_mat_t* m) {
  const tpu_view_t* v = out_at(node, i);
  if (!v) return false;
  *m = la_scalar(v);
  return la_bat_is(bt, m);
}

/* Pivots of batch b (k of them, 1-based) as int32, checked to lie in [1, n]. */
static bool load_pivots(const la_job_t* j, const la_mat_t* p, int64_t b, int* ipiv, int64_t k,
                        int64_t n) {
  tpu_convert(ipiv, TPU_DTYPE_I32, 1, view_at(p->v, la_off(&j->bt, p, b)), p->v->dtype, p->rs, k);
  for (int64_t i = 0; i < k; ++i)
    if (ipiv[i] < 1 || ipiv[i] > n) return false;
  return true;
}
static void store_ints(const la_job_t* j, const la_mat_t* p, int64_t b, const int* v, int64_t k) {
  tpu_convert(view_at(p->v, la_off(&j->bt, p, b)), p->v->dtype, p->rs, v, TPU_DTYPE_I32, 1, k);
}
static void store_int(const la_job_t* j, const la_mat_t* p, int64_t b, int64_t x) {
  view_set_i64(p->v, la_off(&j->bt, p, b), x);
}

static void job_init(la_job_t* j, const tpu_node_t* node) {
  memset(j, 0, sizeof(*j));
  j->im = la_impl_for(node->inputs[0].u.view.dtype);
}

static tpu_status_t finish(la_job_t* j) { return la_run(j); }

/* ---- cholesky ---------------------------------------------------------------------- */

/* m: 0 A, 1 L, 2 info; f[0] upper */
static int chol_batch(const la_job_t* j, int64_t b, char* ws) {
  int64_t n = j->n;
  la_load(&j->m[0], la_off(&j->bt, &j->m[0], b), ws, j->im->w, la_ld(n));
  int info = n ? j->im->potrf(j->f[0] ? 'U' : 'L', (int)n, ws, la_ld(n)) : 0;
  la_zero_tri(ws, j->im->w, la_ld(n), n, n, !j->f[0]);
  la_store(&j->m[1], la_off(&j->bt, &j->m[1], b), ws, j->im->w, la_ld(n));
  store_int(j, &j->m[2], b, info);
  return 0;
}

static tpu_status_t cholesky_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                    tpu_exec_ctx_t* ctx) {
  la_job_t j;
  job_init(&j, node);
  j.m[0] = la_mat(&node->inputs[0].u.view);
  const la_mat_t* ms[1] = {&j.m[0]};
  la_bat_of(&j.bt, ms, 1);
  j.n = j.m[0].rows;
  if (!out_mat(node, 0, &j.bt, j.n, j.n, &j.m[1]) || !out_scalar(node, 1, &j.bt, &j.m[2]))
    BAD("cholesky: outputs of unexpected shapes");
  j.f[0] = attr_b(def, node, "upper", false);
  j.ws_bytes = la_bytes(j.n * j.n, tpu_dtype_size(j.im->w));
  j.fn = chol_batch;
  j.work = j.n * j.n * j.n / 3;
  return finish(&j);
}

/* _cholesky_solve_helper(self=B, A=L, upper): m: 0 B, 1 L, 2 out */
static int chol_solve_batch(const la_job_t* j, int64_t b, char* ws) {
  int64_t n = j->n, k = j->k;
  char* a = ws;
  char* x = ws + la_bytes(n * n, tpu_dtype_size(j->im->w));
  la_load(&j->m[1], la_off(&j->bt, &j->m[1], b), a, j->im->w, la_ld(n));
  la_load(&j->m[0], la_off(&j->bt, &j->m[0], b), x, j->im->w, la_ld(n));
  if (n && k) j->im->potrs(j->f[0] ? 'U' : 'L', (int)n, (int)k, a, la_ld(n), x, la_ld(n));
  la_store(&j->m[2], la_off(&j->bt, &j->m[2], b), x, j->im->w, la_ld(n));
  return 0;
}

static tpu_status_t chol_solve_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                      tpu_exec_ctx_t* ctx) {
  la_job_t j;
  job_init(&j, node);
  j.m[0] = la_mat(&node->inputs[0].u.view);
  j.m[1] = la_mat(&node->inputs[1].u.view);
  const la_mat_t* ms[2] = {&j.m[0], &j.m[1]};
  if (!la_bat_of(&j.bt, ms, 2)) BAD("cholesky_solve: batch dims do not broadcast");
  j.n = j.m[1].rows, j.k = j.m[0].cols;
  if (j.m[1].cols != j.n || j.m[0].rows != j.n) BAD("cholesky_solve: incompatible shapes");
  if (!out_mat(node, 0, &j.bt, j.n, j.k, &j.m[2])) BAD("cholesky_solve: unexpected output");
  j.f[0] = attr_b(def, node, "upper", false);
  size_t es = tpu_dtype_size(j.im->w);
  j.ws_bytes = la_bytes(j.n * j.n, es) + la_bytes(j.n * j.k, es);
  j.fn = chol_solve_batch;
  j.work = j.n * j.n * (j.k + 1);
  return finish(&j);
}

/* cholesky_inverse(self=L, upper): m: 0 L, 1 out */
static int chol_inv_batch(const la_job_t* j, int64_t b, char* ws) {
  int64_t n = j->n;
  const la_impl_t* im = j->im;
  la_load(&j->m[0], la_off(&j->bt, &j->m[0], b), ws, im->w, la_ld(n));
  int info = n ? im->potri(j->f[0] ? 'U' : 'L', (int)n, ws, la_ld(n)) : 0;
  for (int64_t c = 0; c < n; ++c) /* mirror the computed triangle */
    for (int64_t r = c + 1; r < n; ++r) {
      if (j->f[0])
        im->set(ws, c * n + r, im->get(ws, r * n + c)); /* (r, c) from (c, r) */
      else
        im->set(ws, r * n + c, im->get(ws, c * n + r)); /* (c, r) from (r, c) */
    }
  la_store(&j->m[1], la_off(&j->bt, &j->m[1], b), ws, im->w, la_ld(n));
  return info;
}

static tpu_status_t chol_inv_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                    tpu_exec_ctx_t* ctx) {
  la_job_t j;
  job_init(&j, node);
  j.m[0] = la_mat(&node->inputs[0].u.view);
  const la_mat_t* ms[1] = {&j.m[0]};
  la_bat_of(&j.bt, ms, 1);
  j.n = j.m[0].rows;
  if (!out_mat(node, 0, &j.bt, j.n, j.n, &j.m[1])) BAD("cholesky_inverse: unexpected output");
  j.f[0] = attr_b(def, node, "upper", false);
  j.ws_bytes = la_bytes(j.n * j.n, tpu_dtype_size(j.im->w));
  j.fn = chol_inv_batch;
  j.work = j.n * j.n * j.n;
  TPU_RETURN_IF_ERROR(finish(&j));
  if (j.err_info > 0)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "cholesky_inverse: The diagonal element %d is zero, the inversion "
                           "could not be completed because the input matrix is singular.",
                           j.err_info);
  return TPU_OK;
}

/* ---- LU ------------------------------------------------------------------------------ */

/* P (rows x rows) from getrf's k pivots: column i holds a 1 at row perm[i]. */
static void store_perm(const la_job_t* j, const la_mat_t* P, int64_t b, const int* ipiv,
                       int64_t k, int64_t rows, char* scratch) {
  int* perm = (int*)scratch;
  for (int64_t i = 0; i < rows; ++i) perm[i] = (int)i;
  for (int64_t i = 0; i < k; ++i) {
    int t = perm[i];
    perm[i] = perm[ipiv[i] - 1];
    perm[ipiv[i] - 1] = t;
  }
  int64_t off = la_off(&j->bt, P, b);
  const double zero = 0.0, one = 1.0;
  for (int64_t c = 0; c < rows; ++c) {
    tpu_convert(view_at(P->v, off + c * P->cs), P->v->dtype, P->rs, &zero, TPU_DTYPE_F64, 0,
                rows);
    tpu_convert(view_at(P->v, off + c * P->cs + perm[c] * P->rs), P->v->dtype, 1, &one,
                TPU_DTYPE_F64, 0, 1);
  }
}

/* L (rows x k, unit lower) and U (k x cols, upper) from an LU in ws (ld rows). */
static void store_lu_parts(const la_job_t* j, const la_mat_t* L, const la_mat_t* U, int64_t b,
                           const char* lu, int64_t rows) {
  la_store_tri(L, la_off(&j->bt, L, b), lu, j->im->w, la_ld(rows), true, true);
  la_store_tri(U, la_off(&j->bt, U, b), lu, j->im->w, la_ld(rows), false, false);
}

/* lu_factor_ex: m: 0 A, 1 LU, 2 pivots, 3 info.
 * linalg_lu:    m: 0 A, 4 P, 5 L, 6 U (f[1]: lu_unpack from inputs LU, pivots;
 *               f[2] unpack data, f[3] unpack pivots). */
static int lu_batch(const la_job_t* j, int64_t b, char* ws) {
  int64_t m = j->n, n = j->k, k = m < n ? m : n;
  size_t es = tpu_dtype_size(j->im->w);
  char* at = ws;
  char* a = la_take(&at, m * n, es);
  int* ipiv = (int*)la_take(&at, k, sizeof(int));
  char* perm = la_take(&at, m, sizeof(int));
  la_load(&j->m[0], la_off(&j->bt, &j->m[0], b), a, j->im->w, la_ld(m));
  int info = 0;
  if (j->f[1]) { /* lu_unpack: the pivots are an input */
    if (j->f[3] && !load_pivots(j, &j->m[1], b, ipiv, k, m)) return -1;
  } else if (k) {
    info = j->im->getrf((int)m, (int)n, a, la_ld(m), ipiv);
  }
  if (j->m[1].v && !j->f[1]) {
    la_store(&j->m[1], la_off(&j->bt, &j->m[1], b), a, j->im->w, la_ld(m));
    store_ints(j, &j->m[2], b, ipiv, k);
    store_int(j, &j->m[3], b, info);
  }
  if (j->m[4].v && j->f[3]) store_perm(j, &j->m[4], b, ipiv, k, m, perm);
  if (j->m[5].v && j->f[2]) store_lu_parts(j, &j->m[5], &j->m[6], b, a, m);
  return 0;
}

static tpu_status_t lu_setup(la_job_t* j, const tpu_node_t* node) {
  if (node->num_inputs < 1 || node->inputs[0].kind != TPU_VALUE_VIEW ||
      node->inputs[0].u.view.ndim < 2)
    BAD("linalg.lu: A must have at least 2 dimensions");
  j->m[0] = la_mat(&node->inputs[0].u.view);
  const la_mat_t* ms[1] = {&j->m[0]};
  la_bat_of(&j->bt, ms, 1);
  j->n = j->m[0].rows, j->k = j->m[0].cols;
  int64_t k = j->n < j->k ? j->n : j->k;
  size_t es = tpu_dtype_size(j->im->w);
  j->ws_bytes = la_bytes(j->n * j->k, es) + la_bytes(k, sizeof(int)) + la_bytes(j->n, sizeof(int));
  j->fn = lu_batch;
  j->work = j->n * j->k * k;
  return TPU_OK;
}

static tpu_status_t lu_factor_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                     tpu_exec_ctx_t* ctx) {
  la_job_t j;
  job_init(&j, node);
  TPU_RETURN_IF_ERROR(lu_setup(&j, node));
  int64_t k = j.n < j.k ? j.n : j.k;
  if (!out_mat(node, 0, &j.bt, j.n, j.k, &j.m[1]) || !out_vec(node, 1, &j.bt, k, &j.m[2]) ||
      !out_scalar(node, 2, &j.bt, &j.m[3]))
    BAD("lu_factor: outputs of unexpected shapes");
  return finish(&j);
}

/* linalg_lu(A, pivot) -> P, L, U and lu_unpack(LU, pivots, unpack_data, unpack_pivots). */
static tpu_status_t lu_unpacked_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                       tpu_exec_ctx_t* ctx) {
  la_job_t j;
  job_init(&j, node);
  TPU_RETURN_IF_ERROR(lu_setup(&j, node));
  bool unpack = strcmp(def->name, "linalg_lu_unpack") == 0;
  j.f[1] = unpack;
  j.f[2] = unpack ? attr_b(def, node, "unpack_data", true) : true;
  j.f[3] = unpack ? attr_b(def, node, "unpack_pivots", true) : true;
  int64_t m = j.n, n = j.k, k = m < n ? m : n;
  if (unpack) {
    const tpu_view_t* piv = &node->inputs[1].u.view;
    if (piv->ndim < 1) BAD("lu_unpack: pivots must be at least 1-D");
    j.m[1] = la_vec(piv);
    if (j.f[3] && !la_shape_is(&j.m[1], &j.bt, k, 1)) BAD("lu_unpack: pivots of unexpected shape");
  }
  if (j.f[3] && !out_mat(node, 0, &j.bt, m, m, &j.m[4])) BAD("lu: P of unexpected shape");
  if (j.f[2] && (!out_mat(node, 1, &j.bt, m, k, &j.m[5]) || !out_mat(node, 2, &j.bt, k, n, &j.m[6])))
    BAD("lu: L or U of unexpected shape");
  if (!unpack) j.m[1].v = NULL;
  TPU_RETURN_IF_ERROR(finish(&j));
  if (j.err_info < 0)
    BAD("lu_unpack: the pivots are out of range (expected values in [1, %lld])", (long long)m);
  return TPU_OK;
}

/* ---- solves through LU ------------------------------------------------------------------ */

/* m: 0 LU, 1 pivots, 2 B, 3 X; f[0] transposed problem (left=False), c[0] getrs trans;
 * f[1]: factor m[4] (A) first into m[0]/m[1] (handled by the caller's phase 1). */
static int lu_solve_batch(const la_job_t* j, int64_t b, char* ws) {
  int64_t n = j->n, k = j->k;
  size_t es = tpu_dtype_size(j->im->w);
  char* at = ws;
  char* a = la_take(&at, n * n, es);
  int* ipiv = (int*)la_take(&at, n, sizeof(int));
  char* x = la_take(&at, n * k, es);
  la_load(&j->m[0], la_off(&j->bt, &j->m[0], b), a, j->im->w, la_ld(n));
  if (!load_pivots(j, &j->m[1], b, ipiv, n, n)) return -1;
  la_load(&j->m[2], la_off(&j->bt, &j->m[2], b), x, j->im->w, la_ld(n));
  if (n && k) j->im->getrs(j->c[0], (int)n, (int)k, a, la_ld(n), ipiv, x, la_ld(n));
  la_store(&j->m[3], la_off(&j->bt, &j->m[3], b), x, j->im->w, la_ld(n));
  return 0;
}

static void lu_solve_sizes(la_job_t* j) {
  size_t es = tpu_dtype_size(j->im->w);
  j->ws_bytes = la_bytes(j->n * j->n, es) + la_bytes(j->n, sizeof(int)) + la_bytes(j->n * j->k, es);
  j->fn = lu_solve_batch;
  j->work = j->n * j->n * (j->k + 1);
}

/* linalg_lu_solve(LU, pivots, B, left, adjoint) */
static tpu_status_t lu_solve_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                    tpu_exec_ctx_t* ctx) {
  la_job_t j;
  job_init(&j, node);
  bool left = attr_b(def, node, "left", true), adjoint = attr_b(def, node, "adjoint", false);
  const tpu_view_t* piv = &node->inputs[1].u.view;
  if (piv->ndim < 1) BAD("lu_solve: pivots must be at least 1-D");
  j.m[0] = la_mat(&node->inputs[0].u.view);
  j.m[1] = la_vec(piv);
  j.m[2] = la_mat(&node->inputs[2].u.view);
  const tpu_view_t* o = out_at(node, 0);
  if (!o || o->ndim < 2) BAD("lu_solve: unexpected output");
  j.m[3] = la_mat(o);
  if (!left) j.m[2] = la_mat_t_(j.m[2]), j.m[3] = la_mat_t_(j.m[3]);
  /* left: A X = B (or A^T X = B); right: X A = B is A^T X^T = B^T (X A^T = B: A X^T = B^T) */
  j.c[0] = (left == adjoint) ? 'T' : 'N';
  const la_mat_t* ms[3] = {&j.m[0], &j.m[1], &j.m[2]};
  if (!la_bat_of(&j.bt, ms, 3)) BAD("lu_solve: batch dims do not broadcast");
  j.n = j.m[0].rows, j.k = j.m[2].cols;
  if (j.m[0].cols != j.n || j.m[1].rows != j.n || j.m[2].rows != j.n ||
      !la_shape_is(&j.m[3], &j.bt, j.n, j.k))
    BAD("lu_solve: incompatible shapes");
  lu_solve_sizes(&j);
  TPU_RETURN_IF_ERROR(finish(&j));
  if (j.err_info < 0) BAD("lu_solve: the pivots are out of range");
  return TPU_OK;
}

/* Is B a (batch of) vector(s) for A (PyTorch's linalg_solve_is_vector_rhs)? */
static bool solve_is_vector_rhs(const tpu_view_t* a, const tpu_view_t* b) {
  if (b->ndim == 1) return true;
  if (b->ndim != a->ndim - 1) return false;
  for (int32_t d = 0; d < b->ndim; ++d)
    if (b->sizes[d] != a->sizes[d]) return false;
  return true;
}

/* _linalg_solve_ex(A, B, left, check_errors) -> result, LU, pivots, info */
static tpu_status_t solve_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_exec_ctx_t* ctx) {
  const tpu_view_t* A = &node->inputs[0].u.view;
  const tpu_view_t* B = &node->inputs[1].u.view;
  bool left = attr_b(def, node, "left", true);
  bool vec = solve_is_vector_rhs(A, B);
  /* phase 1: LU of A's batches */
  la_job_t f;
  job_init(&f, node);
  TPU_RETURN_IF_ERROR(lu_setup(&f, node));
  if (f.n != f.k) BAD("linalg.solve: A must be batches of square matrices");
  if (!out_mat(node, 1, &f.bt, f.n, f.n, &f.m[1]) || !out_vec(node, 2, &f.bt, f.n, &f.m[2]) ||
      !out_scalar(node, 3, &f.bt, &f.m[3]))
    BAD("linalg.solve: outputs of unexpected shapes");
  /* phase 2: the solve over the broadcast batch (checked before anything runs) */
  la_job_t j;
  job_init(&j, node);
  j.m[0] = f.m[1];
  j.m[1] = f.m[2];
  const tpu_view_t* o = out_at(node, 0);
  if (!o || o->ndim < 1) BAD("linalg.solve: unexpected result");
  if (vec) {
    j.m[2] = la_vec(B), j.m[3] = la_vec(o);
  } else {
    if (B->ndim < 2 || o->ndim < 2) BAD("linalg.solve: unexpected B");
    j.m[2] = la_mat(B), j.m[3] = la_mat(o);
    if (!left) j.m[2] = la_mat_t_(j.m[2]), j.m[3] = la_mat_t_(j.m[3]);
  }
  j.c[0] = left ? 'N' : 'T';
  const la_mat_t* ms[3] = {&j.m[0], &j.m[1], &j.m[2]};
  if (!la_bat_of(&j.bt, ms, 3)) BAD("linalg.solve: batch dims do not broadcast");
  j.n = f.n, j.k = j.m[2].cols;
  if (j.m[2].rows != j.n || !la_shape_is(&j.m[3], &j.bt, j.n, j.k))
    BAD("linalg.solve: incompatible shapes");
  lu_solve_sizes(&j);
  TPU_RETURN_IF_ERROR(finish(&f));
  return finish(&j);
}

/* linalg_inv_ex(A) -> inverse, info: m: 0 A, 1 inverse, 2 info */
static int inv_batch(const la_job_t* j, int64_t b, char* ws) {
  int64_t n = j->n;
  const la_impl_t* im = j->im;
  size_t es = tpu_dtype_size(im->w);
  char* at = ws;
  char* a = la_take(&at, n * n, es);
  int* ipiv = (int*)la_take(&at, n, sizeof(int));
  char* x = la_take(&at, n * n, es);
  la_load(&j->m[0], la_off(&j->bt, &j->m[0], b), a, im->w, la_ld(n));
  memset(x, 0, (size_t)(n * n) * es);
  for (int64_t i = 0; i < n; ++i) im->set(x, i * n + i, 1.0);
  int info = n ? im->getrf((int)n, (int)n, a, la_ld(n), ipiv) : 0;
  if (n) im->getrs('N', (int)n, (int)n, a, la_ld(n), ipiv, x, la_ld(n));
  la_store(&j->m[1], la_off(&j->bt, &j->m[1], b), x, im->w, la_ld(n));
  store_int(j, &j->m[2], b, info);
  return 0;
}

static tpu_status_t inv_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_exec_ctx_t* ctx) {
  la_job_t j;
  job_init(&j, node);
  j.m[0] = la_mat(&node->inputs[0].u.view);
  const la_mat_t* ms[1] = {&j.m[0]};
  la_bat_of(&j.bt, ms, 1);
  j.n = j.m[0].rows;
  if (!out_mat(node, 0, &j.bt, j.n, j.n, &j.m[1]) || !out_scalar(node, 1, &j.bt, &j.m[2]))
    BAD("linalg.inv: outputs of unexpected shapes");
  size_t es = tpu_dtype_size(j.im->w);
  j.ws_bytes = 2 * la_bytes(j.n * j.n, es) + la_bytes(j.n, sizeof(int));
  j.fn = inv_batch;
  j.work = 2 * j.n * j.n * j.n;
  return finish(&j);
}

/* _linalg_det(A) -> result, LU, pivots; _linalg_slogdet(A) -> sign, logabsdet, LU, pivots.
 * m: 0 A, 1 LU, 2 pivots, 3 det or sign, 4 logabsdet (slogdet: f[0]) */
static int det_batch(const la_job_t* j, int64_t b, char* ws) {
  int64_t n = j->n;
  const la_impl_t* im = j->im;
  size_t es = tpu_dtype_size(im->w);
  char* at = ws;
  char* a = la_take(&at, n * n, es);
  int* ipiv = (int*)la_take(&at, n, sizeof(int));
  la_load(&j->m[0], la_off(&j->bt, &j->m[0], b), a, im->w, la_ld(n));
  if (n) im->getrf((int)n, (int)n, a, la_ld(n), ipiv);
  la_store(&j->m[1], la_off(&j->bt, &j->m[1], b), a, im->w, la_ld(n));
  store_ints(j, &j->m[2], b, ipiv, n);
  double sign = 1.0, logabs = 0.0, det = 1.0;
  for (int64_t i = 0; i < n; ++i) {
    double d = im->get(a, i * n + i);
    if (ipiv[i] != i + 1) sign = -sign, det = -det;
    det *= d;
    sign *= d > 0 ? 1.0 : (d < 0 ? -1.0 : (d == 0 ? 0.0 : d));
    logabs += log(fabs(d));
  }
  if (j->f[0]) {
    view_set_f64(j->m[3].v, la_off(&j->bt, &j->m[3], b), sign);
    view_set_f64(j->m[4].v, la_off(&j->bt, &j->m[4], b), logabs);
  } else {
    view_set_f64(j->m[3].v, la_off(&j->bt, &j->m[3], b), det);
  }
  return 0;
}

static tpu_status_t det_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_exec_ctx_t* ctx) {
  la_job_t j;
  job_init(&j, node);
  bool slog = strcmp(def->name, "linalg_slogdet") == 0;
  /* PyTorch factors A^T (its LU and pivots are those of A.mT; det(A^T) = det(A)) */
  j.m[0] = la_mat_t_(la_mat(&node->inputs[0].u.view));
  const la_mat_t* ms[1] = {&j.m[0]};
  la_bat_of(&j.bt, ms, 1);
  j.n = j.m[0].rows;
  int32_t first = slog ? 2 : 1;
  if (!out_mat(node, first, &j.bt, j.n, j.n, &j.m[1]) ||
      !out_vec(node, first + 1, &j.bt, j.n, &j.m[2]) || !out_scalar(node, 0, &j.bt, &j.m[3]) ||
      (slog && !out_scalar(node, 1, &j.bt, &j.m[4])))
    BAD("det: outputs of unexpected shapes");
  j.f[0] = slog;
  size_t es = tpu_dtype_size(j.im->w);
  j.ws_bytes = la_bytes(j.n * j.n, es) + la_bytes(j.n, sizeof(int));
  j.fn = det_batch;
  j.work = j.n * j.n * j.n;
  return finish(&j);
}

/* ---- triangular solves ---------------------------------------------------------------- */

/* m: 0 A, 1 B, 2 X, 3 M (triangular_solve's copy of A, or unused);
 * c[0] side, c[1] uplo; f[0] transpose A, f[1] unit diagonal */
static int trsm_batch(const la_job_t* j, int64_t b, char* ws) {
  int64_t n = j->n, rows = j->m[1].rows, cols = j->m[1].cols;
  size_t es = tpu_dtype_size(j->im->w);
  char* at = ws;
  char* a = la_take(&at, n * n, es);
  char* x = la_take(&at, rows * cols, es);
  la_load(&j->m[0], la_off(&j->bt, &j->m[0], b), a, j->im->w, la_ld(n));
  la_load(&j->m[1], la_off(&j->bt, &j->m[1], b), x, j->im->w, la_ld(rows));
  if (rows && cols)
    j->im->trsm(j->c[0], j->c[1], j->f[0] ? 'T' : 'N', j->f[1] ? 'U' : 'N', (int)rows, (int)cols,
                a, la_ld(n), x, la_ld(rows));
  la_store(&j->m[2], la_off(&j->bt, &j->m[2], b), x, j->im->w, la_ld(rows));
  if (j->m[3].v) la_store(&j->m[3], la_off(&j->bt, &j->m[3], b), a, j->im->w, la_ld(n));
  return 0;
}

/* linalg_solve_triangular(self=A, B, upper, left, unitriangular) and
 * triangular_solve(self=B, A, upper, transpose, unitriangular) -> X, M */
static tpu_status_t trsm_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  la_job_t j;
  job_init(&j, node);
  bool legacy = strcmp(def->name, "linalg_triangular_solve") == 0;
  const tpu_view_t* A = ku_input(def, node, legacy ? "A" : "self");
  const tpu_view_t* B = ku_input(def, node, legacy ? "self" : "B");
  const tpu_view_t* X = out_at(node, 0);
  if (!A || !B || !X || A->ndim < 2 || B->ndim < 2 || X->ndim < 2)
    BAD("triangular solve: expects matrices");
  bool left = legacy ? true : attr_b(def, node, "left", true);
  j.m[0] = la_mat(A), j.m[1] = la_mat(B), j.m[2] = la_mat(X);
  j.c[0] = left ? 'L' : 'R';
  j.c[1] = attr_b(def, node, "upper", true) ? 'U' : 'L';
  j.f[0] = legacy && attr_b(def, node, "transpose", false);
  j.f[1] = attr_b(def, node, "unitriangular", false);
  const la_mat_t* ms[2] = {&j.m[0], &j.m[1]};
  if (!la_bat_of(&j.bt, ms, 2)) BAD("triangular solve: batch dims do not broadcast");
  j.n = j.m[0].rows;
  int64_t need = left ? j.m[1].rows : j.m[1].cols;
  if (j.m[0].cols != j.n || need != j.n ||
      !la_shape_is(&j.m[2], &j.bt, j.m[1].rows, j.m[1].cols))
    BAD("triangular solve: incompatible shapes");
  if (legacy) {
    const tpu_view_t* M = out_at(node, 1);
    if (M && tpu_view_numel(M) > 0) {
      if (M->ndim < 2) BAD("triangular_solve: unexpected M");
      j.m[3] = la_mat(M);
      if (!la_shape_is(&j.m[3], &j.bt, j.n, j.n)) BAD("triangular_solve: unexpected M");
    }
  }
  size_t es = tpu_dtype_size(j.im->w);
  j.ws_bytes = la_bytes(j.n * j.n, es) + la_bytes(j.m[1].rows * j.m[1].cols, es);
  j.fn = trsm_batch;
  j.work = j.n * j.n * (left ? j.m[1].cols : j.m[1].rows);
  return finish(&j);
}

/* ---- LDLᵀ (Bunch-Kaufman) ------------------------------------------------------------- */

/* linalg_ldl_factor_ex(self, hermitian, check_errors) -> LD, pivots, info: sytrf('L') of
 * tril(self), as PyTorch (the strict upper triangle of LD stays zero).
 * m: 0 A, 1 LD, 2 pivots, 3 info */
static int ldl_batch(const la_job_t* j, int64_t b, char* ws) {
  int64_t n = j->n;
  size_t es = tpu_dtype_size(j->im->w);
  char* at = ws;
  char* a = la_take(&at, n * n, es);
  int* ipiv = (int*)la_take(&at, n, sizeof(int));
  char* work = la_take(&at, j->lwork, es);
  la_load(&j->m[0], la_off(&j->bt, &j->m[0], b), a, j->im->w, la_ld(n));
  int info = n ? j->im->sytrf('L', (int)n, a, la_ld(n), ipiv, work, (int)j->lwork) : 0;
  la_store_tri(&j->m[1], la_off(&j->bt, &j->m[1], b), a, j->im->w, la_ld(n), true, false);
  store_ints(j, &j->m[2], b, ipiv, n);
  store_int(j, &j->m[3], b, info);
  return 0;
}

static tpu_status_t ldl_factor_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                      tpu_exec_ctx_t* ctx) {
  la_job_t j;
  job_init(&j, node);
  j.m[0] = la_mat(&node->inputs[0].u.view);
  const la_mat_t* ms[1] = {&j.m[0]};
  la_bat_of(&j.bt, ms, 1);
  j.n = j.m[0].rows;
  if (!out_mat(node, 0, &j.bt, j.n, j.n, &j.m[1]) || !out_vec(node, 1, &j.bt, j.n, &j.m[2]) ||
      !out_scalar(node, 2, &j.bt, &j.m[3]))
    BAD("ldl_factor: outputs of unexpected shapes");
  j.lwork = 1;
  if (j.n) {
    char q[16];
    int iq = 0;
    j.im->sytrf('L', (int)j.n, q, la_ld(j.n), &iq, q, -1);
    double x = j.im->get(q, 0);
    j.lwork = x > 1 ? (int64_t)x + 1 : 1;
  }
  size_t es = tpu_dtype_size(j.im->w);
  j.ws_bytes = la_bytes(j.n * j.n, es) + la_bytes(j.n, sizeof(int)) + la_bytes(j.lwork, es);
  j.fn = ldl_batch;
  j.work = j.n * j.n * j.n / 3;
  return finish(&j);
}

/* sytrs('L') pivots: |p| in [1, n]; a 2x2 block is two equal negative entries. */
static bool ldl_pivots_ok(const int* ipiv, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    int p = ipiv[k];
    if (p > 0 && p <= n) continue;
    if (p < 0 && -p <= n && k + 1 < n && ipiv[k + 1] == p) {
      ++k;
      continue;
    }
    return false;
  }
  return true;
}

/* linalg_ldl_solve(LD, pivots, B, hermitian): m: 0 LD, 1 pivots, 2 B, 3 out */
static int ldl_solve_batch(const la_job_t* j, int64_t b, char* ws) {
  int64_t n = j->n, k = j->k;
  size_t es = tpu_dtype_size(j->im->w);
  char* at = ws;
  char* a = la_take(&at, n * n, es);
  int* ipiv = (int*)la_take(&at, n, sizeof(int));
  char* x = la_take(&at, n * k, es);
  la_load(&j->m[0], la_off(&j->bt, &j->m[0], b), a, j->im->w, la_ld(n));
  tpu_convert(ipiv, TPU_DTYPE_I32, 1, view_at(j->m[1].v, la_off(&j->bt, &j->m[1], b)),
              j->m[1].v->dtype, j->m[1].rs, n);
  if (!ldl_pivots_ok(ipiv, n)) return -1;
  la_load(&j->m[2], la_off(&j->bt, &j->m[2], b), x, j->im->w, la_ld(n));
  if (n && k) j->im->sytrs('L', (int)n, (int)k, a, la_ld(n), ipiv, x, la_ld(n));
  la_store(&j->m[3], la_off(&j->bt, &j->m[3], b), x, j->im->w, la_ld(n));
  return 0;
}

static tpu_status_t ldl_solve_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                     tpu_exec_ctx_t* ctx) {
  la_job_t j;
  job_init(&j, node);
  const tpu_view_t* piv = &node->inputs[1].u.view;
  const tpu_view_t* o = out_at(node, 0);
  if (piv->ndim < 1 || !o || o->ndim < 2) BAD("ldl_solve: unexpected operands");
  j.m[0] = la_mat(&node->inputs[0].u.view);
  j.m[1] = la_vec(piv);
  j.m[2] = la_mat(&node->inputs[2].u.view);
  j.m[3] = la_mat(o);
  const la_mat_t* ms[3] = {&j.m[0], &j.m[1], &j.m[2]};
  if (!la_bat_of(&j.bt, ms, 3)) BAD("ldl_solve: batch dims do not broadcast");
  j.n = j.m[0].rows, j.k = j.m[2].cols;
  if (j.m[0].cols != j.n || j.m[1].rows != j.n || j.m[2].rows != j.n ||
      !la_shape_is(&j.m[3], &j.bt, j.n, j.k))
    BAD("ldl_solve: incompatible shapes");
  size_t es = tpu_dtype_size(j.im->w);
  j.ws_bytes = la_bytes(j.n * j.n, es) + la_bytes(j.n, sizeof(int)) + la_bytes(j.n * j.k, es);
  j.fn = ldl_solve_batch;
  j.work = j.n * j.n * (j.k + 1);
  TPU_RETURN_IF_ERROR(finish(&j));
  if (j.err_info < 0) BAD("ldl_solve: invalid pivots");
  return TPU_OK;
}

/* ---- checks and rows ------------------------------------------------------------------- */

static tpu_status_t check_lu(const tpu_op_def_t* def, const tpu_node_t* node) {
  TPU_RETURN_IF_ERROR(check_mats(def, node, "A"));
  if (!attr_b(def, node, "pivot", true))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "LU without pivoting runs on the CPU");
  return node->inputs[0].u.view.ndim >= 2
             ? TPU_OK
             : tpu_status_make(TPU_CODE_UNIMPLEMENTED, "expects matrices");
}

static tpu_status_t check_two(const tpu_op_def_t* def, const tpu_node_t* node) {
  /* the floating inputs: every row here lists them first, pivots (ints) aside */
  const char* names = strcmp(def->name, "linalg_lu_solve") == 0 ? "LU,B" : def->inputs;
  if (strcmp(def->name, "linalg_ldl_solve") == 0) names = "LD,B";
  if (strcmp(def->name, "linalg_lu_unpack") == 0) names = "LU_data";
  TPU_RETURN_IF_ERROR(check_mats(def, node, names));
  for (int32_t i = 0; i < node->num_inputs; ++i) {
    if (node->inputs[i].kind != TPU_VALUE_VIEW)
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "expects tensors");
    const tpu_view_t* v = &node->inputs[i].u.view;
    if (v->ndim < 1) return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "expects matrices");
    if (!tpu_dtype_is_floating(v->dtype) && v->dtype != TPU_DTYPE_I32)
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "pivots must be int32");
  }
  return TPU_OK;
}

static const tpu_op_def_t k_rows[] = {
    {.name = "linalg_cholesky", .inputs = "self", .attrs = "upper,check_errors",
     .outputs = "L,info", .aten = "linalg_cholesky_ex linalg_cholesky_ex.L",
     .kernel = cholesky_kernel, .infer = NULL, .check = check_square},
    {.name = "linalg_cholesky_solve", .inputs = "self,A", .attrs = "upper", .outputs = "out",
     .aten = "_cholesky_solve_helper _cholesky_solve_helper.out", .kernel = chol_solve_kernel,
     .infer = NULL, .check = check_two},
    {.name = "linalg_cholesky_inverse", .inputs = "self", .attrs = "upper", .outputs = "out",
     .aten = "cholesky_inverse cholesky_inverse.out", .kernel = chol_inv_kernel, .infer = NULL,
     .check = check_square},
    {.name = "linalg_lu_factor", .inputs = "A", .attrs = "pivot,check_errors",
     .outputs = "LU,pivots,info", .aten = "linalg_lu_factor_ex linalg_lu_factor_ex.out",
     .kernel = lu_factor_kernel, .infer = NULL, .check = check_lu},
    {.name = "linalg_lu", .inputs = "A", .attrs = "pivot", .outputs = "P,L,U",
     .aten = "linalg_lu linalg_lu.out", .kernel = lu_unpacked_kernel, .infer = NULL,
     .check = check_lu},
    {.name = "linalg_lu_unpack", .inputs = "LU_data,LU_pivots",
     .attrs = "unpack_data,unpack_pivots", .outputs = "P,L,U", .aten = "lu_unpack lu_unpack.out",
     .kernel = lu_unpacked_kernel, .infer = NULL, .check = check_two},
    {.name = "linalg_lu_solve", .inputs = "LU,pivots,B", .attrs = "left,adjoint", .outputs = "out",
     .aten = "linalg_lu_solve linalg_lu_solve.out", .kernel = lu_solve_kernel, .infer = NULL,
     .check = check_two},
    {.name = "linalg_solve", .inputs = "A,B", .attrs = "left,check_errors",
     .outputs = "result,LU,pivots,info", .aten = "_linalg_solve_ex _linalg_solve_ex.result",
     .kernel = solve_kernel, .infer = NULL, .check = check_two},
    {.name = "linalg_inv", .inputs = "A", .attrs = "check_errors", .outputs = "inverse,info",
     .aten = "linalg_inv_ex linalg_inv_ex.inverse", .kernel = inv_kernel, .infer = NULL,
     .check = check_square},
    {.name = "linalg_det", .inputs = "A", .attrs = "", .outputs = "result,LU,pivots",
     .aten = "_linalg_det _linalg_det.result", .kernel = det_kernel, .infer = NULL,
     .check = check_square},
    {.name = "linalg_slogdet", .inputs = "A", .attrs = "", .outputs = "sign,logabsdet,LU,pivots",
     .aten = "_linalg_slogdet _linalg_slogdet.sign", .kernel = det_kernel, .infer = NULL,
     .check = check_square},
    {.name = "linalg_ldl_factor", .inputs = "self", .attrs = "hermitian,check_errors",
     .outputs = "LD,pivots,info", .aten = "linalg_ldl_factor_ex linalg_ldl_factor_ex.out",
     .kernel = ldl_factor_kernel, .infer = NULL, .check = check_square},
    {.name = "linalg_ldl_solve", .inputs = "LD,pivots,B", .attrs = "hermitian", .outputs = "out",
     .aten = "linalg_ldl_solve linalg_ldl_solve.out", .kernel = ldl_solve_kernel, .infer = NULL,
     .check = check_two},
    {.name = "linalg_solve_triangular", .inputs = "self,B", .attrs = "upper,left,unitriangular",
     .outputs = "out", .aten = "linalg_solve_triangular linalg_solve_triangular.out",
     .kernel = trsm_kernel, .infer = NULL, .check = check_two},
    {.name = "linalg_triangular_solve", .inputs = "self,A",
     .attrs = "upper,transpose,unitriangular", .outputs = "X,M",
     .aten = "triangular_solve triangular_solve.X", .kernel = trsm_kernel, .infer = NULL,
     .check = check_two},
};

const tpu_op_family_t tpu_family_linalg = {"linalg", k_rows,
                                           (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
