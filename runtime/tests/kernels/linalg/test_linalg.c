/* test_linalg.c — the linalg families.
 *
 * linalg_simple (trace, linalg_cross, addbmm): a table of cases (dtypes,
 * odd shapes, transposed / padded / broadcast layouts) compares the kernel
 * with the plain reference.
 * LAPACK-backed rows: each case builds random well-conditioned matrices
 * (batched, in contiguous, transposed and padded layouts), runs the kernel,
 * and checks the factorisation identity in double: L·Lᵀ = A, P·L·U = A,
 * A·X = B (left and right), A·inv(A) = I, det = product of a reference
 * elimination, Q·R = A with QᵀQ = I, U·S·Vᵀ = A, A·V = V·diag(w); plus info
 * outputs, and the checks' refusals (half and integer dtypes, check_errors).
 */
#include <complex.h>
#include <math.h>
#include <string.h>
#undef I /* the tests name identity matrices I; complex code says _Complex_I */

#include "kernel_test_util.h"
#include "kernels/linalg/linalg.h"

static const tt_layout_t k_layouts[] = {TT_CONTIG, TT_TRANSPOSED, TT_PADDED};

/* ---- matrices as [batch, rows, cols] --------------------------------------------- */

static double el(const tpu_view_t* v, int64_t b, int64_t i, int64_t j) {
  int32_t r = v->ndim - 2;
  int64_t off = (r > 0 ? b * v->strides[0] : 0) + i * v->strides[r] + j * v->strides[r + 1];
  return view_get_f64(v, off);
}
static void set_el(const tpu_view_t* v, int64_t b, int64_t i, int64_t j, double x) {
  int32_t r = v->ndim - 2;
  int64_t off = (r > 0 ? b * v->strides[0] : 0) + i * v->strides[r] + j * v->strides[r + 1];
  view_set_f64(v, off, x);
}
static double vel(const tpu_view_t* v, int64_t b, int64_t i) { /* [batch, n] or [n] */
  return view_get_f64(v, (v->ndim > 1 ? b * v->strides[0] : 0) + i * v->strides[v->ndim - 1]);
}

static tt_t mats(tpu_dtype_t dt, int64_t batch, int64_t r, int64_t c, tt_layout_t lay) {
  int64_t s[3] = {batch, r, c};
  return tt_make(dt, 3, s, lay);
}
static tt_t vecs(tpu_dtype_t dt, int64_t batch, int64_t n) {
  int64_t s[2] = {batch, n};
  return tt_make(dt, 2, s, TT_CONTIG);
}
static tt_t scalars(tpu_dtype_t dt, int64_t batch) {
  int64_t s[1] = {batch};
  return tt_make(dt, 1, s, TT_CONTIG);
}

/* Random entries in [-1, 1]; `diag` added on the diagonal (well conditioned);
 * `spd`: A = M Mᵀ + diag·I instead. */
static void fill_mats(const tpu_view_t* v, double diag, bool spd) {
  int64_t nb = v->sizes[0], r = v->sizes[1], c = v->sizes[2];
  for (int64_t b = 0; b < nb; ++b) {
    double m[16 * 16];
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) m[i * c + j] = 2.0 * tt_rand() - 1.0;
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) {
        double x = m[i * c + j];
        if (spd) {
          x = 0;
          for (int64_t k = 0; k < c; ++k) x += m[i * c + k] * m[j * c + k];
        }
        set_el(v, b, i, j, x + (i == j ? diag : 0.0));
      }
  }
}

/* max |(X·Y)[b] - Z[b]| over the batch, with op flags transposing X or Y. */
static double prod_diff(const tpu_view_t* x, bool tx, const tpu_view_t* y, bool ty,
                        const tpu_view_t* z) {
  double worst = 0.0;
  int64_t nb = z->sizes[0], r = z->sizes[1], c = z->sizes[2];
  int64_t k = tx ? x->sizes[1] : x->sizes[2];
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) {
        double s = 0;
        for (int64_t t = 0; t < k; ++t)
          s += (tx ? el(x, b, t, i) : el(x, b, i, t)) * (ty ? el(y, b, j, t) : el(y, b, t, j));
        double d = fabs(s - el(z, b, i, j));
        if (d > worst || d != d) worst = d != d ? INFINITY : d;
      }
  return worst;
}

static double tol_of(tpu_dtype_t dt) { return dt == TPU_DTYPE_F32 ? 2e-4 : 1e-10; }

static tpu_status_t run(const char* op, tpu_value_t* in, int32_t nin, tpu_view_t* out,
                        int32_t nout, const tpu_attr_t* attrs, int32_t nattrs) {
  const tpu_op_def_t* def = tt_def(op);
  if (!def) return tpu_status_make(TPU_CODE_INTERNAL, "no row %s", op);
  tpu_node_t node = tt_node(in, nin, out, nout, attrs, nattrs);
  node.op = tpu_op_lookup(op);
  if (def->check) TPU_RETURN_IF_ERROR(def->check(def, &node));
  return tt_run(def->kernel, def, &node);
}

static const tpu_dtype_t k_floats[] = {TPU_DTYPE_F32, TPU_DTYPE_F64};
static const int64_t k_sizes[][2] = {{1, 1}, {3, 3}, {2, 5}, {4, 7}, {1, 12}};

/* ---- cholesky ------------------------------------------------------------------------ */

TEST(linalg_cholesky_identity) {
  for (size_t d = 0; d < 2; ++d)
    for (size_t l = 0; l < 3; ++l)
      for (size_t s = 0; s < 5; ++s)
        for (int upper = 0; upper < 2; ++upper) {
          tpu_dtype_t dt = k_floats[d];
          int64_t nb = k_sizes[s][0], n = k_sizes[s][1];
          tt_t a = mats(dt, nb, n, n, k_layouts[l]), L = mats(dt, nb, n, n, k_layouts[2 - l]);
          tt_t info = scalars(TPU_DTYPE_I32, nb);
          fill_mats(&a.view, (double)n, true);
          tpu_value_t in[1] = {tt_value(&a.view)};
          tpu_view_t out[2] = {L.view, info.view};
          tpu_attr_t at[2] = {tt_bool(upper), tt_bool(false)};
          CHECK_OK(run("linalg_cholesky", in, 1, out, 2, at, 2));
          /* lower: L Lᵀ = A; upper: Uᵀ U = A; the other triangle is zero */
          double diff = upper ? prod_diff(&L.view, true, &L.view, false, &a.view)
                              : prod_diff(&L.view, false, &L.view, true, &a.view);
          if (!(diff < tol_of(dt) * n))
            tpu_test_fail(__FILE__, __LINE__, "cholesky %s n=%lld upper=%d layout %zu: %g",
                          tpu_dtype_name(dt), (long long)n, upper, l, diff);
          for (int64_t b = 0; b < nb; ++b) {
            CHECK(view_get_i64(&info.view, b * info.view.strides[0]) == 0);
            for (int64_t i = 0; i < n; ++i)
              for (int64_t j = 0; j < n; ++j)
                if (upper ? i > j : i < j) CHECK(el(&L.view, b, i, j) == 0.0);
          }
          tt_free(&a), tt_free(&L), tt_free(&info);
        }
}

TEST(linalg_cholesky_info_and_checks) {
  int64_t s[2] = {2, 2};
  tt_t a = tt_make(TPU_DTYPE_F64, 2, s, TT_CONTIG), L = tt_make(TPU_DTYPE_F64, 2, s, TT_CONTIG);
  tt_t info = tt_make(TPU_DTYPE_I32, 0, s, TT_CONTIG);
  double v[4] = {1, 2, 2, 1}; /* not positive-definite: the leading minor of order 2 fails */
  for (int i = 0; i < 4; ++i) tt_set(&a.view, i, v[i]);
  tpu_value_t in[1] = {tt_value(&a.view)};
  tpu_view_t out[2] = {L.view, info.view};
  tpu_attr_t at[2] = {tt_bool(false), tt_bool(false)};
  CHECK_OK(run("linalg_cholesky", in, 1, out, 2, at, 2));
  CHECK(view_get_i64(&info.view, 0) == 2);
  at[1] = tt_bool(true); /* check_errors: the CPU raises LinAlgError */
  CHECK_CODE(run("linalg_cholesky", in, 1, out, 2, at, 2), TPU_CODE_UNIMPLEMENTED);
  tt_t h = tt_make(TPU_DTYPE_F16, 2, s, TT_CONTIG), i32 = tt_make(TPU_DTYPE_I32, 2, s, TT_CONTIG);
  at[1] = tt_bool(false);
  in[0] = tt_value(&h.view);
  CHECK_CODE(run("linalg_cholesky", in, 1, out, 2, at, 2), TPU_CODE_UNIMPLEMENTED);
  in[0] = tt_value(&i32.view);
  CHECK_CODE(run("linalg_inv", in, 1, out, 2, at, 1), TPU_CODE_UNIMPLEMENTED);
  CHECK_CODE(run("linalg_svd", in, 1, out, 2, at, 2), TPU_CODE_UNIMPLEMENTED);
  tt_free(&a), tt_free(&L), tt_free(&info), tt_free(&h), tt_free(&i32);
}

/* ---- LU, solve, inverse, determinant ------------------------------------------------------ */

TEST(linalg_lu_unpack_identity) {
  for (size_t d = 0; d < 2; ++d)
    for (size_t l = 0; l < 3; ++l)
      for (size_t s = 0; s < 5; ++s)
        for (int wide = 0; wide < 2; ++wide) {
          tpu_dtype_t dt = k_floats[d];
          int64_t nb = k_sizes[s][0], m = k_sizes[s][1], n = wide ? m + 2 : (m > 2 ? m - 1 : m);
          int64_t k = m < n ? m : n;
          tt_t a = mats(dt, nb, m, n, k_layouts[l]);
          tt_t P = mats(dt, nb, m, m, TT_CONTIG), L = mats(dt, nb, m, k, k_layouts[l]);
          tt_t U = mats(dt, nb, k, n, TT_PADDED), PL = mats(TPU_DTYPE_F64, nb, m, k, TT_CONTIG);
          fill_mats(&a.view, 0.0, false);
          tpu_value_t in[1] = {tt_value(&a.view)};
          tpu_view_t out[3] = {P.view, L.view, U.view};
          tpu_attr_t at[1] = {tt_bool(true)};
          CHECK_OK(run("linalg_lu", in, 1, out, 3, at, 1));
          for (int64_t b = 0; b < nb; ++b) /* PL = P·L */
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < k; ++j) {
                double x = 0;
                for (int64_t t = 0; t < m; ++t) x += el(&P.view, b, i, t) * el(&L.view, b, t, j);
                set_el(&PL.view, b, i, j, x);
              }
          double diff = prod_diff(&PL.view, false, &U.view, false, &a.view);
          if (!(diff < tol_of(dt) * (double)(m + n)))
            tpu_test_fail(__FILE__, __LINE__, "lu %s %lldx%lld layout %zu: |PLU - A| = %g",
                          tpu_dtype_name(dt), (long long)m, (long long)n, l, diff);
          tt_free(&a), tt_free(&P), tt_free(&L), tt_free(&U), tt_free(&PL);
        }
}

TEST(linalg_solve_and_inverse_identities) {
  for (size_t d = 0; d < 2; ++d)
    for (size_t l = 0; l < 3; ++l)
      for (size_t s = 0; s < 5; ++s)
        for (int left = 0; left < 2; ++left) {
          tpu_dtype_t dt = k_floats[d];
          int64_t nb = k_sizes[s][0], n = k_sizes[s][1], k = 3;
          double tol = tol_of(dt) * n * 10;
          tt_t a = mats(dt, nb, n, n, k_layouts[l]);
          tt_t B = left ? mats(dt, nb, n, k, k_layouts[2 - l]) : mats(dt, nb, k, n, k_layouts[l]);
          tt_t X = left ? mats(dt, nb, n, k, k_layouts[l]) : mats(dt, nb, k, n, TT_TRANSPOSED);
          tt_t LU = mats(dt, nb, n, n, TT_TRANSPOSED), piv = vecs(TPU_DTYPE_I32, nb, n);
          tt_t info = scalars(TPU_DTYPE_I32, nb), inv = mats(dt, nb, n, n, k_layouts[l]);
          tt_t eye = mats(TPU_DTYPE_F64, nb, n, n, TT_CONTIG);
          fill_mats(&a.view, 2.0 * n, false);
          fill_mats(&B.view, 0.0, false);
          tpu_value_t in[2] = {tt_value(&a.view), tt_value(&B.view)};
          tpu_view_t out[4] = {X.view, LU.view, piv.view, info.view};
          tpu_attr_t at[2] = {tt_bool(left), tt_bool(false)};
          CHECK_OK(run("linalg_solve", in, 2, out, 4, at, 2));
          double diff = left ? prod_diff(&a.view, false, &X.view, false, &B.view)
                             : prod_diff(&X.view, false, &a.view, false, &B.view);
          if (!(diff < tol))
            tpu_test_fail(__FILE__, __LINE__, "solve %s n=%lld left=%d layout %zu: %g",
                          tpu_dtype_name(dt), (long long)n, left, l, diff);
          /* lu_solve with the factorisation reproduces the solve */
          tt_t X2 = left ? mats(dt, nb, n, k, TT_CONTIG) : mats(dt, nb, k, n, TT_CONTIG);
          tpu_value_t in3[3] = {tt_value(&LU.view), tt_value(&piv.view), tt_value(&B.view)};
          tpu_attr_t at2[2] = {tt_bool(left), tt_bool(false)};
          CHECK_OK(run("linalg_lu_solve", in3, 3, &X2.view, 1, at2, 2));
          CHECK(tt_max_rel_diff(&X2.view, &X.view) < tol);
          /* inverse */
          tpu_view_t out2[2] = {inv.view, info.view};
          CHECK_OK(run("linalg_inv", in, 1, out2, 2, at + 1, 1));
          for (int64_t b = 0; b < nb; ++b)
            for (int64_t i = 0; i < n; ++i) set_el(&eye.view, b, i, i, 1.0);
          diff = prod_diff(&a.view, false, &inv.view, false, &eye.view);
          if (!(diff < tol))
            tpu_test_fail(__FILE__, __LINE__, "inv %s n=%lld layout %zu: %g", tpu_dtype_name(dt),
                          (long long)n, l, diff);
          for (int64_t b = 0; b < nb; ++b) CHECK(view_get_i64(&info.view, b) == 0);
          tt_free(&a), tt_free(&B), tt_free(&X), tt_free(&X2), tt_free(&LU), tt_free(&piv);
          tt_free(&info), tt_free(&inv), tt_free(&eye);
        }
}

/* det by a reference Gaussian elimination with partial pivoting, in double. */
static double ref_det(const tpu_view_t* a, int64_t b) {
  int64_t n = a->sizes[1];
  double m[12 * 12], det = 1.0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) m[i * n + j] = el(a, b, i, j);
  for (int64_t c = 0; c < n; ++c) {
    int64_t p = c;
    for (int64_t r = c + 1; r < n; ++r)
      if (fabs(m[r * n + c]) > fabs(m[p * n + c])) p = r;
    if (p != c) {
      det = -det;
      for (int64_t j = 0; j < n; ++j) {
        double t = m[c * n + j];
        m[c * n + j] = m[p * n + j], m[p * n + j] = t;
      }
    }
    det *= m[c * n + c];
    if (m[c * n + c] == 0.0) return 0.0;
    for (int64_t r = c + 1; r < n; ++r) {
      double f = m[r * n + c] / m[c * n + c];
      for (int64_t j = c; j < n; ++j) m[r * n + j] -= f * m[c * n + j];
    }
  }
  return det;
}

TEST(linalg_det_and_slogdet) {
  for (size_t d = 0; d < 2; ++d)
    for (size_t l = 0; l < 3; ++l)
      for (size_t s = 0; s < 5; ++s) {
        tpu_dtype_t dt = k_floats[d];
        int64_t nb = k_sizes[s][0], n = k_sizes[s][1];
        tt_t a = mats(dt, nb, n, n, k_layouts[l]);
        tt_t LU = mats(dt, nb, n, n, TT_TRANSPOSED), piv = vecs(TPU_DTYPE_I32, nb, n);
        tt_t det = scalars(dt, nb), sign = scalars(dt, nb), logabs = scalars(dt, nb);
        fill_mats(&a.view, 0.5, false);
        if (nb > 1) /* a singular matrix: two equal rows */
          for (int64_t j = 0; j < n && n > 1; ++j) set_el(&a.view, 1, 1, j, el(&a.view, 1, 0, j));
        tpu_value_t in[1] = {tt_value(&a.view)};
        tpu_view_t out[3] = {det.view, LU.view, piv.view};
        CHECK_OK(run("linalg_det", in, 1, out, 3, NULL, 0));
        tpu_view_t out2[4] = {sign.view, logabs.view, LU.view, piv.view};
        CHECK_OK(run("linalg_slogdet", in, 1, out2, 4, NULL, 0));
        for (int64_t b = 0; b < nb; ++b) {
          double want = ref_det(&a.view, b), got = view_get_f64(&det.view, b);
          double sg = view_get_f64(&sign.view, b), la = view_get_f64(&logabs.view, b);
          double t = tol_of(dt) * 10 * (1 + fabs(want));
          if (!(fabs(got - want) < t || (fabs(want) < 1e-12 && fabs(got) < 1e-5)))
            tpu_test_fail(__FILE__, __LINE__, "det %s n=%lld: %g vs %g", tpu_dtype_name(dt),
                          (long long)n, got, want);
          if (fabs(want) > 1e-6 && !(fabs(sg * exp(la) - want) < t))
            tpu_test_fail(__FILE__, __LINE__, "slogdet %s n=%lld: %g*exp(%g) vs %g",
                          tpu_dtype_name(dt), (long long)n, sg, la, want);
        }
        tt_free(&a), tt_free(&LU), tt_free(&piv), tt_free(&det), tt_free(&sign),
            tt_free(&logabs);
      }
}

TEST(linalg_triangular_solve_identity) {
  for (size_t d = 0; d < 2; ++d)
    for (size_t l = 0; l < 3; ++l)
      for (int flags = 0; flags < 8; ++flags) {
        bool upper = flags & 1, left = flags & 2, unit = flags & 4;
        tpu_dtype_t dt = k_floats[d];
        int64_t nb = 3, n = 5, k = 4;
        tt_t a = mats(dt, nb, n, n, k_layouts[l]), tri = mats(TPU_DTYPE_F64, nb, n, n, 0);
        tt_t B = left ? mats(dt, nb, n, k, k_layouts[2 - l]) : mats(dt, nb, k, n, k_layouts[l]);
        tt_t X = left ? mats(dt, nb, n, k, TT_PADDED) : mats(dt, nb, k, n, TT_TRANSPOSED);
        fill_mats(&a.view, 3.0, false);
        fill_mats(&B.view, 0.0, false);
        for (int64_t b = 0; b < nb; ++b) /* the triangle the solve reads */
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j)
              set_el(&tri.view, b, i, j,
                     i == j ? (unit ? 1.0 : el(&a.view, b, i, j))
                            : ((upper ? j > i : j < i) ? el(&a.view, b, i, j) : 0.0));
        tpu_value_t in[2] = {tt_value(&a.view), tt_value(&B.view)};
        tpu_attr_t at[3] = {tt_bool(upper), tt_bool(left), tt_bool(unit)};
        CHECK_OK(run("linalg_solve_triangular", in, 2, &X.view, 1, at, 3));
        double diff = left ? prod_diff(&tri.view, false, &X.view, false, &B.view)
                           : prod_diff(&X.view, false, &tri.view, false, &B.view);
        if (!(diff < tol_of(dt) * 10))
          tpu_test_fail(__FILE__, __LINE__, "solve_triangular %s flags %d layout %zu: %g",
                        tpu_dtype_name(dt), flags, l, diff);
        tt_free(&a), tt_free(&tri), tt_free(&B), tt_free(&X);
      }
}

/* ---- QR, SVD, eigh ------------------------------------------------------------------------- */

TEST(linalg_qr_identity) {
  for (size_t d = 0; d < 2; ++d)
    for (size_t l = 0; l < 3; ++l)
      for (size_t s = 0; s < 5; ++s)
        for (int wide = 0; wide < 2; ++wide) {
          tpu_dtype_t dt = k_floats[d];
          int64_t nb = k_sizes[s][0], m = k_sizes[s][1], n = wide ? m + 2 : (m > 2 ? m - 2 : m);
          int64_t k = m < n ? m : n;
          tt_t a = mats(dt, nb, m, n, k_layouts[l]);
          tt_t Q = mats(dt, nb, m, k, k_layouts[2 - l]), R = mats(dt, nb, k, n, k_layouts[l]);
          tt_t I = mats(TPU_DTYPE_F64, nb, k, k, TT_CONTIG);
          fill_mats(&a.view, 0.0, false);
          tpu_value_t in[1] = {tt_value(&a.view)};
          tpu_view_t out[2] = {Q.view, R.view};
          tpu_attr_t at[1] = {{.kind = TPU_ATTR_STR}};
          strcpy(at[0].u.str, "reduced");
          CHECK_OK(run("linalg_qr", in, 1, out, 2, at, 1));
          for (int64_t b = 0; b < nb; ++b)
            for (int64_t i = 0; i < k; ++i) set_el(&I.view, b, i, i, 1.0);
          double d1 = prod_diff(&Q.view, false, &R.view, false, &a.view);
          double d2 = prod_diff(&Q.view, true, &Q.view, false, &I.view);
          if (!(d1 < tol_of(dt) * 10 && d2 < tol_of(dt) * 10))
            tpu_test_fail(__FILE__, __LINE__, "qr %s %lldx%lld layout %zu: %g %g",
                          tpu_dtype_name(dt), (long long)m, (long long)n, l, d1, d2);
          tt_free(&a), tt_free(&Q), tt_free(&R), tt_free(&I);
        }
}

TEST(linalg_svd_identity) {
  for (size_t d = 0; d < 2; ++d)
    for (size_t l = 0; l < 3; ++l)
      for (size_t s = 0; s < 5; ++s)
        for (int wide = 0; wide < 2; ++wide) {
          tpu_dtype_t dt = k_floats[d];
          int64_t nb = k_sizes[s][0], m = k_sizes[s][1], n = wide ? m + 3 : (m > 2 ? m - 1 : m);
          int64_t k = m < n ? m : n;
          tt_t a = mats(dt, nb, m, n, k_layouts[l]);
          tt_t U = mats(dt, nb, m, k, k_layouts[2 - l]), S = vecs(dt, nb, k);
          tt_t V = mats(dt, nb, k, n, k_layouts[l]), US = mats(TPU_DTYPE_F64, nb, m, k, 0);
          fill_mats(&a.view, 0.0, false);
          tpu_value_t in[1] = {tt_value(&a.view)};
          tpu_view_t out[3] = {U.view, S.view, V.view};
          tpu_attr_t at[2] = {tt_bool(false), tt_bool(true)};
          CHECK_OK(run("linalg_svd", in, 1, out, 3, at, 2));
          for (int64_t b = 0; b < nb; ++b)
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < k; ++j)
                set_el(&US.view, b, i, j, el(&U.view, b, i, j) * vel(&S.view, b, j));
          double diff = prod_diff(&US.view, false, &V.view, false, &a.view);
          bool sorted = true;
          for (int64_t b = 0; b < nb; ++b)
            for (int64_t j = 1; j < k; ++j) sorted &= vel(&S.view, b, j - 1) >= vel(&S.view, b, j);
          if (!(diff < tol_of(dt) * 10) || !sorted)
            tpu_test_fail(__FILE__, __LINE__, "svd %s %lldx%lld layout %zu: %g sorted %d",
                          tpu_dtype_name(dt), (long long)m, (long long)n, l, diff, sorted);
          tt_free(&a), tt_free(&U), tt_free(&S), tt_free(&V), tt_free(&US);
        }
}

TEST(linalg_eigh_identity) {
  for (size_t d = 0; d < 2; ++d)
    for (size_t l = 0; l < 3; ++l)
      for (size_t s = 0; s < 5; ++s) {
        tpu_dtype_t dt = k_floats[d];
        int64_t nb = k_sizes[s][0], n = k_sizes[s][1];
        tt_t a = mats(dt, nb, n, n, k_layouts[l]), w = vecs(dt, nb, n);
        tt_t V = mats(dt, nb, n, n, k_layouts[2 - l]), VW = mats(TPU_DTYPE_F64, nb, n, n, 0);
        fill_mats(&a.view, 0.0, true);
        tpu_value_t in[1] = {tt_value(&a.view)};
        tpu_view_t out[2] = {w.view, V.view};
        tpu_attr_t at[2] = {{.kind = TPU_ATTR_STR}, tt_bool(true)};
        strcpy(at[0].u.str, l == 1 ? "U" : "L");
        CHECK_OK(run("linalg_eigh", in, 1, out, 2, at, 2));
        for (int64_t b = 0; b < nb; ++b)
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j)
              set_el(&VW.view, b, i, j, el(&V.view, b, i, j) * vel(&w.view, b, j));
        double diff = prod_diff(&a.view, false, &V.view, false, &VW.view); /* A V = V diag(w) */
        if (!(diff < tol_of(dt) * 10 * n))
          tpu_test_fail(__FILE__, __LINE__, "eigh %s n=%lld layout %zu: %g", tpu_dtype_name(dt),
                        (long long)n, l, diff);
        tt_free(&a), tt_free(&w), tt_free(&V), tt_free(&VW);
      }
}

/* ---- linalg_simple against its reference --------------------------------------------------- */

typedef struct simple_case {
  const char* op;
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t a[3], b[3], out[3]; /* shapes: self, second operand, result */
  tt_layout_t layout;
  int64_t dim;
  tt_layout_t bias_layout; /* addbmm: self's layout (TT_BROADCAST: a row vector) */
} simple_case_t;

static const simple_case_t k_simple[] = {
    {"trace", TPU_DTYPE_F32, 2, {5, 7}, {0}, {0}, TT_CONTIG, 0, TT_CONTIG},
    {"trace", TPU_DTYPE_F64, 2, {6, 4}, {0}, {0}, TT_TRANSPOSED, 0, TT_CONTIG},
    {"trace", TPU_DTYPE_BF16, 2, {9, 9}, {0}, {0}, TT_PADDED, 0, TT_CONTIG},
    {"trace", TPU_DTYPE_I8, 2, {4, 4}, {0}, {0}, TT_CONTIG, 0, TT_CONTIG},
    {"trace", TPU_DTYPE_I64, 2, {3, 8}, {0}, {0}, TT_PADDED, 0, TT_CONTIG},
    {"trace", TPU_DTYPE_BOOL, 2, {3, 3}, {0}, {0}, TT_CONTIG, 0, TT_CONTIG},
    {"trace", TPU_DTYPE_F32, 2, {0, 3}, {0}, {0}, TT_CONTIG, 0, TT_CONTIG},
    {"linalg_cross", TPU_DTYPE_F32, 2, {5, 3}, {5, 3}, {5, 3}, TT_CONTIG, -1, TT_CONTIG},
    {"linalg_cross", TPU_DTYPE_F64, 3, {3, 4, 2}, {3, 4, 2}, {3, 4, 2}, TT_TRANSPOSED, 0, TT_CONTIG},
    {"linalg_cross", TPU_DTYPE_F16, 2, {7, 3}, {1, 3}, {7, 3}, TT_PADDED, 1, TT_CONTIG},
    {"linalg_cross", TPU_DTYPE_I32, 3, {2, 3, 5}, {2, 3, 5}, {2, 3, 5}, TT_PADDED, 1, TT_CONTIG},
    {"linalg_cross", TPU_DTYPE_U8, 2, {3, 3}, {3, 3}, {3, 3}, TT_CONTIG, 0, TT_CONTIG},
    {"addbmm", TPU_DTYPE_F32, 3, {4, 3, 5}, {4, 5, 6}, {3, 6}, TT_CONTIG, 0, TT_CONTIG},
    {"addbmm", TPU_DTYPE_F64, 3, {2, 7, 1}, {2, 1, 3}, {7, 3}, TT_TRANSPOSED, 0, TT_BROADCAST},
    {"addbmm", TPU_DTYPE_BF16, 3, {3, 4, 4}, {3, 4, 2}, {4, 2}, TT_PADDED, 0, TT_CONTIG},
    {"addbmm", TPU_DTYPE_I64, 3, {5, 2, 3}, {5, 3, 4}, {2, 4}, TT_PADDED, 0, TT_TRANSPOSED},
    {"addbmm", TPU_DTYPE_I16, 3, {0, 2, 3}, {0, 3, 4}, {2, 4}, TT_CONTIG, 0, TT_CONTIG},
};

TEST(linalg_simple_matches_reference) {
  for (size_t i = 0; i < sizeof(k_simple) / sizeof(k_simple[0]); ++i) {
    const simple_case_t* c = &k_simple[i];
    const tpu_op_def_t* def = tt_def(c->op);
    if (!def) continue;
    bool trace = c->op[0] == 't', mm = c->op[0] == 'a';
    int32_t ond = trace ? 0 : (mm ? 2 : c->ndim);
    tpu_dtype_t odt = trace && !tpu_dtype_is_floating(c->dtype) ? TPU_DTYPE_I64 : c->dtype;
    tt_t a = tt_make(c->dtype, trace ? 2 : c->ndim, c->a, c->layout);
    tt_t b = tt_make(c->dtype, trace ? 2 : c->ndim, trace ? c->a : c->b, c->layout);
    int64_t bias_s[2] = {c->out[0], c->out[1]};
    if (c->bias_layout == TT_BROADCAST) bias_s[0] = 1;
    tt_t bias = tt_make(c->dtype, 2, bias_s, c->bias_layout == TT_BROADCAST ? 0 : c->bias_layout);
    tt_t out = tt_make(odt, ond, c->out, TT_PADDED), want = tt_make(odt, ond, c->out, TT_CONTIG);
    bool fl = tpu_dtype_is_floating(c->dtype);
    if (fl)
      tt_fill(&a.view, -2, 2, 0), tt_fill(&b.view, -2, 2, 0), tt_fill(&bias.view, -2, 2, 0);
    else
      tt_fill_ints(&a.view, 7 + i, -9, 9), tt_fill_ints(&b.view, 11 + i, -9, 9),
          tt_fill_ints(&bias.view, 3 + i, -9, 9);
    tpu_value_t in[3];
    tpu_attr_t at[2];
    int32_t nin, nat;
    if (trace) {
      in[0] = tt_value(&a.view), nin = 1, nat = 0;
    } else if (mm) {
      in[0] = tt_value(&bias.view), in[1] = tt_value(&a.view), in[2] = tt_value(&b.view), nin = 3;
      at[0] = fl ? tt_float(0.5) : tt_int(2), at[1] = fl ? tt_float(-1.5) : tt_int(3), nat = 2;
    } else {
      in[0] = tt_value(&a.view), in[1] = tt_value(&b.view), nin = 2;
      at[0] = tt_int(c->dim), nat = 1;
    }
    tpu_node_t node = tt_node(in, nin, &out.view, 1, at, nat);
    node.op = tpu_op_lookup(c->op);
    CHECK_OK(def->check(def, &node));
    CHECK_OK(tt_run(def->kernel, def, &node));
    node.outputs = &want.view;
    CHECK_OK(tpu_linalg_simple_reference(def, &node));
    double tol = c->dtype == TPU_DTYPE_BF16 ? 2e-2 : c->dtype == TPU_DTYPE_F16 ? 2e-3
                 : c->dtype == TPU_DTYPE_F32 ? 1e-5 : 1e-12;
    if (!fl) tol = 0;
    if (tt_compare(c->op, &out.view, &want.view, tol))
      tpu_test_fail(__FILE__, __LINE__, "case %zu (%s %s)", i, c->op, tpu_dtype_name(c->dtype));
    tt_free(&a), tt_free(&b), tt_free(&bias), tt_free(&out), tt_free(&want);
  }
}

TEST(linalg_simple_checks) {
  int64_t s3[2] = {2, 3}, s33[3] = {2, 3, 3};
  tt_t a = tt_make(TPU_DTYPE_BOOL, 2, s3, TT_CONTIG), b = tt_make(TPU_DTYPE_BOOL, 2, s3, 0);
  tt_t c = tt_make(TPU_DTYPE_F32, 3, s33, TT_CONTIG), d = tt_make(TPU_DTYPE_F64, 3, s33, 0);
  const tpu_op_def_t* cross = tt_def("linalg_cross");
  const tpu_op_def_t* addbmm = tt_def("addbmm");
  if (!cross || !addbmm) return;
  tpu_value_t in[3] = {tt_value(&a.view), tt_value(&b.view), tt_value(&c.view)};
  tpu_node_t node = tt_node(in, 2, NULL, 0, NULL, 0);
  CHECK_CODE(cross->check(cross, &node), TPU_CODE_UNIMPLEMENTED); /* bool: as the CPU */
  in[0] = tt_value(&c.view), in[1] = tt_value(&c.view), in[2] = tt_value(&d.view);
  node = tt_node(in, 3, NULL, 0, NULL, 0);
  CHECK_CODE(addbmm->check(addbmm, &node), TPU_CODE_UNIMPLEMENTED); /* mixed dtypes */
  tt_free(&a), tt_free(&b), tt_free(&c), tt_free(&d);
}

/* ---- LDLᵀ, least squares, matrix exponential, Householder products ------------------------ */

TEST(linalg_ldl_solve_identity) {
  for (size_t d = 0; d < 2; ++d)
    for (size_t l = 0; l < 3; ++l)
      for (size_t s = 0; s < 5; ++s) {
        tpu_dtype_t dt = k_floats[d];
        int64_t nb = k_sizes[s][0], n = k_sizes[s][1], k = 2;
        tt_t a = mats(dt, nb, n, n, k_layouts[l]), B = mats(dt, nb, n, k, k_layouts[2 - l]);
        tt_t LD = mats(dt, nb, n, n, TT_TRANSPOSED), piv = vecs(TPU_DTYPE_I32, nb, n);
        tt_t info = scalars(TPU_DTYPE_I32, nb), X = mats(dt, nb, n, k, TT_PADDED);
        fill_mats(&a.view, 0.0, false);
        for (int64_t b = 0; b < nb; ++b) /* symmetric, indefinite, well conditioned */
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j <= i; ++j) {
              double x = i == j ? (i % 2 ? -3.0 : 3.0) + el(&a.view, b, i, j) * 0.1
                                : el(&a.view, b, i, j) * 0.5;
              set_el(&a.view, b, i, j, x), set_el(&a.view, b, j, i, x);
            }
        fill_mats(&B.view, 0.0, false);
        tpu_value_t in[1] = {tt_value(&a.view)};
        tpu_view_t out[3] = {LD.view, piv.view, info.view};
        tpu_attr_t at[2] = {tt_bool(false), tt_bool(false)};
        CHECK_OK(run("linalg_ldl_factor", in, 1, out, 3, at, 2));
        tpu_value_t in3[3] = {tt_value(&LD.view), tt_value(&piv.view), tt_value(&B.view)};
        CHECK_OK(run("linalg_ldl_solve", in3, 3, &X.view, 1, at, 1));
        double diff = prod_diff(&a.view, false, &X.view, false, &B.view);
        if (!(diff < tol_of(dt) * 20 * n))
          tpu_test_fail(__FILE__, __LINE__, "ldl %s n=%lld layout %zu: %g", tpu_dtype_name(dt),
                        (long long)n, l, diff);
        tt_free(&a), tt_free(&B), tt_free(&LD), tt_free(&piv), tt_free(&info), tt_free(&X);
      }
  /* pivots that would send sytrs out of bounds are refused */
  int64_t s2[2] = {2, 2}, s1[1] = {2};
  tt_t LD = tt_make(TPU_DTYPE_F64, 2, s2, TT_CONTIG), B = tt_make(TPU_DTYPE_F64, 2, s2, 0);
  tt_t X = tt_make(TPU_DTYPE_F64, 2, s2, TT_CONTIG), piv = tt_make(TPU_DTYPE_I32, 1, s1, 0);
  tt_set(&piv.view, 0, 1), tt_set(&piv.view, 1, -2); /* a 2x2 block starting at the end */
  tpu_value_t in3[3] = {tt_value(&LD.view), tt_value(&piv.view), tt_value(&B.view)};
  tpu_attr_t at[1] = {tt_bool(false)};
  CHECK_CODE(run("linalg_ldl_solve", in3, 3, &X.view, 1, at, 1), TPU_CODE_INVALID_ARGUMENT);
  tt_free(&LD), tt_free(&B), tt_free(&X), tt_free(&piv);
}

TEST(linalg_lstsq_normal_equations) {
  const char* drivers[] = {"gels", "gelsy", "gelsd", "gelss"};
  for (size_t d = 0; d < 2; ++d)
    for (size_t l = 0; l < 3; ++l)
      for (size_t dr = 0; dr < 4; ++dr) {
        tpu_dtype_t dt = k_floats[d];
        int64_t nb = 3, m = 7, n = 4, k = 2;
        tt_t a = mats(dt, nb, m, n, k_layouts[l]), B = mats(dt, nb, m, k, k_layouts[2 - l]);
        tt_t X = mats(dt, nb, n, k, TT_CONTIG), R = mats(TPU_DTYPE_F64, nb, m, k, TT_CONTIG);
        int64_t rs[2] = {nb, k}, ss[2] = {nb, n}, z[1] = {0};
        bool svd = dr >= 2;
        tt_t res = dr == 1 ? tt_make(dt, 1, z, 0) : tt_make(dt, 2, rs, TT_CONTIG); /* gelsy: none */
        tt_t rank = dr == 0 ? tt_make(TPU_DTYPE_I64, 1, z, 0) : scalars(TPU_DTYPE_I64, nb);
        tt_t sv = svd ? tt_make(dt, 2, ss, TT_CONTIG) : tt_make(dt, 1, z, 0);
        fill_mats(&a.view, 0.0, false);
        fill_mats(&B.view, 0.0, false);
        tpu_value_t in[2] = {tt_value(&a.view), tt_value(&B.view)};
        tpu_view_t out[4] = {X.view, res.view, rank.view, sv.view};
        tpu_attr_t at[3] = {tt_none(), {.kind = TPU_ATTR_STR}, tt_int(1)}; /* every rank is n */
        strcpy(at[1].u.str, drivers[dr]);
        CHECK_OK(run("linalg_lstsq", in, 2, out, 4, at, 3));
        /* R = A X - B is orthogonal to A's columns: Aᵀ R = 0; residuals = |R_col|² */
        for (int64_t b = 0; b < nb; ++b)
          for (int64_t i = 0; i < m; ++i)
            for (int64_t c = 0; c < k; ++c) {
              double x = -el(&B.view, b, i, c);
              for (int64_t t = 0; t < n; ++t) x += el(&a.view, b, i, t) * el(&X.view, b, t, c);
              set_el(&R.view, b, i, c, x);
            }
        double worst = 0;
        for (int64_t b = 0; b < nb; ++b)
          for (int64_t t = 0; t < n; ++t)
            for (int64_t c = 0; c < k; ++c) {
              double x = 0;
              for (int64_t i = 0; i < m; ++i) x += el(&a.view, b, i, t) * el(&R.view, b, i, c);
              if (fabs(x) > worst) worst = fabs(x);
            }
        for (int64_t b = 0; b < nb && dr != 1; ++b)
          for (int64_t c = 0; c < k; ++c) {
            double r2 = 0;
            for (int64_t i = 0; i < m; ++i) r2 += el(&R.view, b, i, c) * el(&R.view, b, i, c);
            CHECK(fabs(r2 - vel(&res.view, b, c)) < tol_of(dt) * 100 * (1 + r2));
          }
        for (int64_t b = 0; b < nb && dr != 0; ++b) CHECK(view_get_i64(&rank.view, b) == n);
        if (!(worst < tol_of(dt) * 100))
          tpu_test_fail(__FILE__, __LINE__, "lstsq %s %s layout %zu: |Aᵀ(AX-B)| = %g",
                        drivers[dr], tpu_dtype_name(dt), l, worst);
        tt_free(&a), tt_free(&B), tt_free(&X), tt_free(&R), tt_free(&res), tt_free(&rank),
            tt_free(&sv);
      }
}

TEST(linalg_matrix_exp_identity) {
  /* exp(A)·exp(-A) = I, and exp of a diagonal matrix */
  for (size_t l = 0; l < 3; ++l)
    for (size_t s = 0; s < 5; ++s) {
      int64_t nb = k_sizes[s][0], n = k_sizes[s][1];
      tt_t a = mats(TPU_DTYPE_F64, nb, n, n, k_layouts[l]), na = mats(TPU_DTYPE_F64, nb, n, n, 0);
      tt_t e1 = mats(TPU_DTYPE_F64, nb, n, n, k_layouts[2 - l]), e2 = mats(TPU_DTYPE_F64, nb, n, n, 0);
      tt_t I = mats(TPU_DTYPE_F64, nb, n, n, TT_CONTIG);
      fill_mats(&a.view, 0.0, false);
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t i = 0; i < n; ++i) {
          set_el(&I.view, b, i, i, 1.0);
          for (int64_t j = 0; j < n; ++j) {
            set_el(&a.view, b, i, j, el(&a.view, b, i, j) * (1.0 + (double)b)); /* norms up to ~12 */
            set_el(&na.view, b, i, j, -el(&a.view, b, i, j));
          }
        }
      tpu_value_t in[1] = {tt_value(&a.view)};
      CHECK_OK(run("linalg_matrix_exp", in, 1, &e1.view, 1, NULL, 0));
      in[0] = tt_value(&na.view);
      CHECK_OK(run("linalg_matrix_exp", in, 1, &e2.view, 1, NULL, 0));
      double diff = prod_diff(&e1.view, false, &e2.view, false, &I.view);
      if (!(diff < 1e-7))
        tpu_test_fail(__FILE__, __LINE__, "matrix_exp n=%lld layout %zu: |e^A e^-A - I| = %g",
                      (long long)n, l, diff);
      tt_free(&a), tt_free(&na), tt_free(&e1), tt_free(&e2), tt_free(&I);
    }
  int64_t s2[2] = {2, 2};
  tt_t d = tt_make(TPU_DTYPE_F64, 2, s2, TT_CONTIG), e = tt_make(TPU_DTYPE_F64, 2, s2, 0);
  tt_set(&d.view, 0, 1.5), tt_set(&d.view, 3, -20.0);
  tpu_value_t in[1] = {tt_value(&d.view)};
  CHECK_OK(run("linalg_matrix_exp", in, 1, &e.view, 1, NULL, 0));
  CHECK(fabs(tt_get(&e.view, 0) - exp(1.5)) < 1e-13 * exp(1.5));
  CHECK(fabs(tt_get(&e.view, 3) - exp(-20.0)) < 1e-22 && tt_get(&e.view, 1) == 0.0);
  tt_t f = tt_make(TPU_DTYPE_F16, 2, s2, TT_CONTIG), g = tt_make(TPU_DTYPE_F16, 2, s2, 0);
  tt_set(&f.view, 0, 0.5), tt_set(&f.view, 3, -1.0);
  in[0] = tt_value(&f.view); /* half types: float64 work, rounded once (kernels/linalg/matfn.c) */
  CHECK_OK(run("linalg_matrix_exp", in, 1, &g.view, 1, NULL, 0));
  CHECK(fabs(tt_get(&g.view, 0) - exp(0.5)) <= 0x1p-11 * exp(0.5));
  CHECK(fabs(tt_get(&g.view, 3) - exp(-1.0)) <= 0x1p-11 && tt_get(&g.view, 1) == 0.0);
  tt_free(&g);
  /* An infinite entry: no scaling brings the norm down (the squaring count
   * overflowed int, undefined behaviour the fuzzer found): NaN out. */
  tt_set(&d.view, 1, INFINITY);
  in[0] = tt_value(&d.view);
  CHECK_OK(run("linalg_matrix_exp", in, 1, &e.view, 1, NULL, 0));
  for (int64_t k = 0; k < 4; ++k) CHECK(isnan(tt_get(&e.view, k)));
  tt_free(&d), tt_free(&e), tt_free(&f);
}

/* Reference exp of the n x n row-major complex matrix a (n <= 12) into r: Taylor
 * series to 40 terms in long double complex after scaling by 2^-s to a norm
 * below 1/2, squared back. */
static void ref_expm_cx(const long double complex* a, int64_t n, long double complex* r) {
  long double complex x[144], t[144], u[144];
  long double norm = 0;
  for (int64_t j = 0; j < n; ++j) {
    long double c = 0;
    for (int64_t i = 0; i < n; ++i) c += cabsl(a[i * n + j]);
    if (c > norm) norm = c;
  }
  int s = 0;
  while (ldexpl(norm, -s) > 0.5L) ++s;
  for (int64_t k = 0; k < n * n; ++k) x[k] = a[k] * ldexpl(1.0L, -s);
  for (int64_t k = 0; k < n * n; ++k) t[k] = r[k] = (k % (n + 1) == 0) ? 1.0L : 0.0L;
  for (int m = 1; m <= 40; ++m) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        long double complex acc = 0;
        for (int64_t k = 0; k < n; ++k) acc += t[i * n + k] * x[k * n + j];
        u[i * n + j] = acc / m;
      }
    for (int64_t k = 0; k < n * n; ++k) t[k] = u[k], r[k] += u[k];
  }
  for (int q = 0; q < s; ++q) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        long double complex acc = 0;
        for (int64_t k = 0; k < n; ++k) acc += r[i * n + k] * r[k * n + j];
        u[i * n + j] = acc;
      }
    memcpy(r, u, sizeof(u[0]) * (size_t)(n * n));
  }
}

/* The real reference: ref_expm_cx's series on a matrix with no imaginary
 * part (its products and sums then are the real ones, exactly). */
static void ref_expm(const double* a, int64_t n, double* e) {
  long double complex ac[144], r[144];
  for (int64_t k = 0; k < n * n; ++k) ac[k] = a[k];
  ref_expm_cx(ac, n, r);
  for (int64_t k = 0; k < n * n; ++k) e[k] = (double)creall(r[k]);
}

TEST(linalg_matrix_exp_reference) {
  /* float32 and float64 against ref_expm, every layout and size, norms from ~0.1 to
   * ~30 (scaling and squaring); both dtypes compute in float64, so a float32 result
   * is within its own rounding of the exact one: |err| <= tol * max|exp(A)|. */
  static const struct {
    tpu_dtype_t dt;
    double scale, tol;
  } cases[] = {{TPU_DTYPE_F32, 0.05, 2e-7}, {TPU_DTYPE_F32, 1.0, 2e-7}, {TPU_DTYPE_F32, 4.0, 2e-7},
               {TPU_DTYPE_F64, 0.05, 1e-13}, {TPU_DTYPE_F64, 1.0, 1e-13}, {TPU_DTYPE_F64, 4.0, 1e-12}};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c)
    for (size_t l = 0; l < 3; ++l)
      for (size_t s = 0; s < 5; ++s) {
        tpu_dtype_t dt = cases[c].dt;
        int64_t nb = k_sizes[s][0], n = k_sizes[s][1];
        tt_t a = mats(dt, nb, n, n, k_layouts[l]), e = mats(dt, nb, n, n, k_layouts[2 - l]);
        fill_mats(&a.view, 0.0, false);
        for (int64_t b = 0; b < nb; ++b)
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j)
              set_el(&a.view, b, i, j, el(&a.view, b, i, j) * cases[c].scale);
        tpu_value_t in[1] = {tt_value(&a.view)};
        CHECK_OK(run("linalg_matrix_exp", in, 1, &e.view, 1, NULL, 0));
        for (int64_t b = 0; b < nb; ++b) {
          double am[144], want[144], big = 0, worst = 0;
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) am[i * n + j] = el(&a.view, b, i, j);
          ref_expm(am, n, want);
          for (int64_t k = 0; k < n * n; ++k) big = fmax(big, fabs(want[k]));
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double d = fabs(el(&e.view, b, i, j) - want[i * n + j]);
              worst = d != d ? INFINITY : fmax(worst, d);
            }
          if (!(worst <= cases[c].tol * big))
            tpu_test_fail(__FILE__, __LINE__, "matrix_exp %s scale %g n=%lld layout %zu: err %g, max %g",
                          tpu_dtype_name(dt), cases[c].scale, (long long)n, l, worst, big);
        }
        tt_free(&a), tt_free(&e);
      }
}


TEST(linalg_matrix_exp_complex_reference) {
  /* complex64 / complex128 through the real 2n x 2n embedding (kernels/linalg/
   * matfn.c), computed in float64: within the result dtype's rounding of the
   * exact exponential, norms ~0.2 to ~12, strided views. */
  const tpu_dtype_t dts[2] = {TPU_DTYPE_C64, TPU_DTYPE_C128};
  const double scales[3] = {0.1, 1.0, 3.0};
  for (int d = 0; d < 2; ++d)
    for (int sc = 0; sc < 3; ++sc)
      for (int l = 0; l < 2; ++l) {
        int64_t nb = 2, n = 4, sz[3] = {nb, n, n};
        tt_t a = tt_make(dts[d], 3, sz, l ? TT_TRANSPOSED : TT_CONTIG);
        tt_t e = tt_make(dts[d], 3, sz, l ? TT_CONTIG : TT_PADDED);
        long double complex am[2][16], want[16];
        for (int64_t k = 0; k < nb * n * n; ++k) {
          double z[2] = {scales[sc] * (2 * tt_rand() - 1), scales[sc] * (2 * tt_rand() - 1)};
          void* p = view_at(&a.view, tt_offset(&a.view, k));
          tpu_convert(p, dts[d], 1, z, TPU_DTYPE_C128, 1, 1);
          tpu_convert(z, TPU_DTYPE_C128, 1, p, dts[d], 1, 1); /* as stored */
          am[k / 16][k % 16] = z[0] + z[1] * (long double complex)_Complex_I;
        }
        tpu_value_t in[1] = {tt_value(&a.view)};
        CHECK_OK(run("linalg_matrix_exp", in, 1, &e.view, 1, NULL, 0));
        for (int64_t b = 0; b < nb; ++b) {
          ref_expm_cx(am[b], n, want);
          double big = 0, worst = 0;
          for (int64_t k = 0; k < 16; ++k) big = fmax(big, (double)cabsl(want[k]));
          for (int64_t k = 0; k < 16; ++k) {
            double g[2];
            tpu_convert(g, TPU_DTYPE_C128, 1, view_at(&e.view, tt_offset(&e.view, b * 16 + k)),
                        dts[d], 1, 1);
            double err = (double)cabsl(g[0] + g[1] * (long double complex)_Complex_I - want[k]);
            worst = err != err ? INFINITY : fmax(worst, err);
          }
          double tol = d == 0 ? 2e-7 : 1e-13;
          if (!(worst <= tol * big))
            tpu_test_fail(__FILE__, __LINE__, "matrix_exp %s scale %g layout %d: err %g, max %g",
                          tpu_dtype_name(dts[d]), scales[sc], l, worst, big);
        }
        tt_free(&a), tt_free(&e);
      }
}

TEST(linalg_householder_geqrf_ormqr) {
  for (size_t d = 0; d < 2; ++d)
    for (size_t l = 0; l < 3; ++l) {
      tpu_dtype_t dt = k_floats[d];
      int64_t nb = 2, m = 6, n = 4, k = 3;
      tt_t a = mats(dt, nb, m, n, k_layouts[l]), qa = mats(dt, nb, m, n, TT_TRANSPOSED);
      tt_t tau = vecs(dt, nb, n), Q = mats(dt, nb, m, n, k_layouts[2 - l]);
      tt_t R = mats(TPU_DTYPE_F64, nb, n, n, TT_CONTIG), C = mats(dt, nb, m, k, k_layouts[l]);
      tt_t QC = mats(dt, nb, m, k, TT_PADDED), QtQC = mats(dt, nb, m, k, TT_CONTIG);
      fill_mats(&a.view, 0.0, false);
      fill_mats(&C.view, 0.0, false);
      tpu_value_t in[1] = {tt_value(&a.view)};
      tpu_view_t out[2] = {qa.view, tau.view};
      CHECK_OK(run("geqrf", in, 1, out, 2, NULL, 0));
      tpu_value_t in2[2] = {tt_value(&qa.view), tt_value(&tau.view)};
      CHECK_OK(run("linalg_householder_product", in2, 2, &Q.view, 1, NULL, 0));
      for (int64_t b = 0; b < nb; ++b) /* R: the upper triangle geqrf left in qa */
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = i; j < n; ++j) set_el(&R.view, b, i, j, el(&qa.view, b, i, j));
      double diff = prod_diff(&Q.view, false, &R.view, false, &a.view);
      /* ormqr applies the full Q and then Qᵀ: back to C */
      tpu_value_t in3[3] = {tt_value(&qa.view), tt_value(&tau.view), tt_value(&C.view)};
      tpu_attr_t at[2] = {tt_bool(true), tt_bool(false)};
      CHECK_OK(run("ormqr", in3, 3, &QC.view, 1, at, 2));
      in3[2] = tt_value(&QC.view);
      at[1] = tt_bool(true);
      CHECK_OK(run("ormqr", in3, 3, &QtQC.view, 1, at, 2));
      double back = tt_max_rel_diff(&QtQC.view, &C.view);
      if (!(diff < tol_of(dt) * 10 && back < tol_of(dt) * 10))
        tpu_test_fail(__FILE__, __LINE__, "householder %s layout %zu: |QR - A| %g, ormqr %g",
                      tpu_dtype_name(dt), l, diff, back);
      tt_free(&a), tt_free(&qa), tt_free(&tau), tt_free(&Q), tt_free(&R), tt_free(&C),
          tt_free(&QC), tt_free(&QtQC);
    }
}
