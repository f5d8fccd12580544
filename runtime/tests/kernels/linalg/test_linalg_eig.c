/* test_linalg_eig.c — the linalg_eig family (geev; runtime/src/kernels/linalg/eig.c).
 *
 * A table of cases (float32/float64/complex64/complex128 inputs, batches, 0x0 and
 * 1x1 matrices, contiguous / transposed / padded layouts of input and outputs)
 * runs linalg_eig and linalg_eigvals and checks in double complex: A·V = V·diag(w),
 * unit-norm eigenvectors, sum(w) = trace(A), eigvals = eig's eigenvalues, and for a
 * real input that complex eigenvalues come in conjugate pairs with conjugate
 * vectors. Then known spectra (a rotation: ±i; a triangular matrix: its diagonal),
 * the non-finite input rules, and the check's refusals.
 */
#include <complex.h>
#include <math.h>
#include <string.h>

#include "kernel_test_util.h"

typedef double _Complex cplx;

/* Element (b, i, j) of a [batch, rows, cols] view (or (b, i) of [batch, n]) as a
 * double complex, for real and complex dtypes. */
static int64_t off3(const tpu_view_t* v, int64_t b, int64_t i, int64_t j) {
  if (v->ndim == 2) return b * v->strides[0] + i * v->strides[1];
  return b * v->strides[0] + i * v->strides[1] + j * v->strides[2];
}
static cplx cget(const tpu_view_t* v, int64_t b, int64_t i, int64_t j) {
  int64_t o = off3(v, b, i, j);
  const char* p = view_at(v, o);
  switch (v->dtype) { /* test-only reader of the four dtypes these rows take */
    case TPU_DTYPE_C64: return ((const float*)p)[0] + I * ((const float*)p)[1];
    case TPU_DTYPE_C128: return ((const double*)p)[0] + I * ((const double*)p)[1];
    default: return view_get_f64(v, o);
  }
}
static void cset(const tpu_view_t* v, int64_t b, int64_t i, int64_t j, cplx x) {
  int64_t o = off3(v, b, i, j);
  char* p = view_at(v, o);
  switch (v->dtype) {
    case TPU_DTYPE_C64: ((float*)p)[0] = (float)creal(x), ((float*)p)[1] = (float)cimag(x); break;
    case TPU_DTYPE_C128: ((double*)p)[0] = creal(x), ((double*)p)[1] = cimag(x); break;
    default: view_set_f64(v, o, creal(x));
  }
}

static tpu_status_t run(const char* op, const tpu_view_t* a, tpu_view_t* out, int32_t nout) {
  const tpu_op_def_t* def = tt_def(op);
  tpu_value_t in[1] = {tt_value(a)};
  tpu_node_t node = tt_node(in, 1, out, nout, NULL, 0);
  node.op = tpu_op_lookup(op);
  if (def->check) TPU_RETURN_IF_ERROR(def->check(def, &node));
  return tt_run(def->kernel, def, &node);
}

static tpu_dtype_t cx_of(tpu_dtype_t dt) {
  return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_C64 ? TPU_DTYPE_C64 : TPU_DTYPE_C128;
}
static double tol_of(tpu_dtype_t dt) { return cx_of(dt) == TPU_DTYPE_C64 ? 1e-4 : 1e-11; }

typedef struct eig_case {
  tpu_dtype_t dtype;
  int64_t batch, n;
  tt_layout_t in_layout, vec_layout;
} eig_case_t;

static const eig_case_t k_cases[] = {
    {TPU_DTYPE_F32, 1, 1, TT_CONTIG, TT_CONTIG},       {TPU_DTYPE_F32, 3, 5, TT_TRANSPOSED, TT_CONTIG},
    {TPU_DTYPE_F32, 2, 9, TT_PADDED, TT_TRANSPOSED},   {TPU_DTYPE_F64, 2, 0, TT_CONTIG, TT_CONTIG},
    {TPU_DTYPE_F64, 0, 4, TT_CONTIG, TT_CONTIG},       {TPU_DTYPE_F64, 4, 7, TT_CONTIG, TT_TRANSPOSED},
    {TPU_DTYPE_F64, 1, 12, TT_TRANSPOSED, TT_PADDED},  {TPU_DTYPE_C64, 1, 1, TT_CONTIG, TT_CONTIG},
    {TPU_DTYPE_C64, 3, 6, TT_PADDED, TT_TRANSPOSED},   {TPU_DTYPE_C128, 2, 5, TT_TRANSPOSED, TT_CONTIG},
    {TPU_DTYPE_C128, 1, 10, TT_CONTIG, TT_PADDED},
};

TEST(linalg_eig_identities) {
  for (size_t c = 0; c < sizeof(k_cases) / sizeof(k_cases[0]); ++c) {
    const eig_case_t* k = &k_cases[c];
    int64_t nb = k->batch, n = k->n;
    bool real_in = !tpu_dtype_is_complex(k->dtype);
    tpu_dtype_t cx = cx_of(k->dtype);
    int64_t ms[3] = {nb, n, n}, vs[2] = {nb, n};
    tt_t a = tt_make(k->dtype, 3, ms, k->in_layout);
    tt_t w = tt_make(cx, 2, vs, TT_CONTIG), V = tt_make(cx, 3, ms, k->vec_layout);
    tt_t w2 = tt_make(cx, 2, vs, TT_PADDED);
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j)
          cset(&a.view, b, i, j, (2 * tt_rand() - 1) + (real_in ? 0 : I * (2 * tt_rand() - 1)));
    tpu_view_t out[2] = {w.view, V.view};
    CHECK_OK(run("linalg_eig", &a.view, out, 2));
    tpu_view_t out2[1] = {w2.view};
    CHECK_OK(run("linalg_eigvals", &a.view, out2, 1));
    double tol = tol_of(k->dtype) * (n > 1 ? n : 1), worst = 0;
    for (int64_t b = 0; b < nb; ++b) {
      cplx tr = 0, sum = 0;
      for (int64_t i = 0; i < n; ++i) tr += cget(&a.view, b, i, i);
      for (int64_t j = 0; j < n; ++j) {
        cplx lam = cget(&w.view, b, j, 0);
        sum += lam;
        worst = fmax(worst, cabs(lam - cget(&w2.view, b, j, 0)));
        double norm = 0;
        for (int64_t i = 0; i < n; ++i) { /* (A v - lam v)_i */
          cplx s = 0;
          for (int64_t t = 0; t < n; ++t) s += cget(&a.view, b, i, t) * cget(&V.view, b, t, j);
          worst = fmax(worst, cabs(s - lam * cget(&V.view, b, i, j)));
          norm += creal(cget(&V.view, b, i, j) * conj(cget(&V.view, b, i, j)));
        }
        worst = fmax(worst, fabs(sqrt(norm) - 1));
        if (real_in && cimag(lam) > 0) { /* the next one is its conjugate, and its vector */
          CHECK(j + 1 < n && cabs(cget(&w.view, b, j + 1, 0) - conj(lam)) == 0);
          for (int64_t i = 0; i < n; ++i)
            CHECK(cget(&V.view, b, i, j + 1) == conj(cget(&V.view, b, i, j)));
        }
      }
      worst = fmax(worst, cabs(tr - sum));
    }
    if (!(worst < tol))
      tpu_test_fail(__FILE__, __LINE__, "eig case %zu (%s %lldx%lld): %g", c,
                    tpu_dtype_name(k->dtype), (long long)nb, (long long)n, worst);
    tt_free(&a), tt_free(&w), tt_free(&V), tt_free(&w2);
  }
}

TEST(linalg_eig_known_spectra) {
  int64_t s2[2] = {2, 2}, s1[1] = {2}, s3[2] = {3, 3}, s31[1] = {3};
  for (int d = 0; d < 2; ++d) {
    tpu_dtype_t dt = d ? TPU_DTYPE_F64 : TPU_DTYPE_F32;
    tt_t rot = tt_make(dt, 2, s2, TT_CONTIG), w = tt_make(cx_of(dt), 1, s1, TT_CONTIG);
    tt_set(&rot.view, 1, -1.0), tt_set(&rot.view, 2, 1.0); /* [[0, -1], [1, 0]] */
    tpu_view_t out[1] = {w.view};
    CHECK_OK(run("linalg_eigvals", &rot.view, out, 1));
    double* p = (double*)w.mem;
    float* q = (float*)w.mem;
    double re0 = d ? p[0] : q[0], im0 = d ? p[1] : q[1], re1 = d ? p[2] : q[2], im1 = d ? p[3] : q[3];
    CHECK(fabs(re0) < 1e-6 && fabs(re1) < 1e-6 && fabs(im0 - 1) < 1e-6 && fabs(im1 + 1) < 1e-6);
    tt_free(&rot), tt_free(&w);
    /* upper triangular: the diagonal, in order */
    tt_t tri = tt_make(dt, 2, s3, TT_TRANSPOSED), w3 = tt_make(cx_of(dt), 1, s31, TT_CONTIG);
    const double diag[3] = {2.0, -3.0, 0.5};
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = i; j < 3; ++j)
        view_set_f64(&tri.view, i * tri.view.strides[0] + j * tri.view.strides[1],
                     i == j ? diag[i] : 1.0 + (double)(i + j));
    tpu_view_t out3[1] = {w3.view};
    CHECK_OK(run("linalg_eigvals", &tri.view, out3, 1));
    for (int64_t i = 0; i < 3; ++i) {
      double re = d ? ((double*)w3.mem)[2 * i] : ((float*)w3.mem)[2 * i];
      double im = d ? ((double*)w3.mem)[2 * i + 1] : ((float*)w3.mem)[2 * i + 1];
      CHECK(fabs(re - diag[i]) < 1e-6 && im == 0.0);
    }
    tt_free(&tri), tt_free(&w3);
  }
}

TEST(linalg_eig_nonfinite_and_refusals) {
  int64_t ms[3] = {2, 2, 2}, vs[2] = {2, 2};
  tt_t a = tt_make(TPU_DTYPE_F64, 3, ms, TT_CONTIG);
  tt_t w = tt_make(TPU_DTYPE_C128, 2, vs, TT_CONTIG), V = tt_make(TPU_DTYPE_C128, 3, ms, TT_CONTIG);
  double* m = (double*)a.mem;
  m[0] = m[3] = m[4] = m[7] = 1.0;
  m[6] = NAN; /* batch 1, below the diagonal */
  tpu_view_t out[2] = {w.view, V.view};
  tpu_status_t s = run("linalg_eig", &a.view, out, 2);
  CHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT);
  CHECK(strstr(tpu_status_message(s), "input tensor should not contain infs or NaNs") != NULL);
  tpu_status_free(s);
  tpu_view_t out1[1] = {w.view}; /* eigvals: NaN for batch 1 only */
  CHECK_OK(run("linalg_eigvals", &a.view, out1, 1));
  const double* e = (const double*)w.mem;
  CHECK(e[0] == 1.0 && e[1] == 0.0 && e[2] == 1.0 && e[3] == 0.0);
  for (int i = 4; i < 8; ++i) CHECK(isnan(e[i]));
  /* refusals (the CPU fallback): half input, an output of another dtype, non-square */
  tt_t h = tt_make(TPU_DTYPE_F16, 3, ms, TT_CONTIG), wf = tt_make(TPU_DTYPE_C64, 2, vs, TT_CONTIG);
  CHECK(tt_code(run("linalg_eigvals", &h.view, out1, 1)) == TPU_CODE_UNIMPLEMENTED);
  tpu_view_t outf[1] = {wf.view};
  CHECK(tt_code(run("linalg_eigvals", &a.view, outf, 1)) == TPU_CODE_UNIMPLEMENTED);
  int64_t ns[3] = {2, 2, 3};
  tt_t r = tt_make(TPU_DTYPE_F64, 3, ns, TT_CONTIG);
  CHECK(tt_code(run("linalg_eigvals", &r.view, out1, 1)) == TPU_CODE_UNIMPLEMENTED);
  tt_free(&a), tt_free(&w), tt_free(&V), tt_free(&h), tt_free(&wf), tt_free(&r);
}
