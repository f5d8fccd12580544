/* test_matmul_complex.c — the matmul family on complex operands
 * (matmul_complex.c) against a plain triple loop: mm, bmm, addmm, baddbmm
 * and addmv with beta and alpha (real, or complex numbers: alpha=2j; a zero
 * beta ignores self), mv, dot and vdot (self conjugated), strided factors,
 * both complex dtypes; and the forms left to the CPU fallback. */
#include <complex.h>
#include <math.h>
#include <string.h>

#include "kernel_test_util.h"
#include "kernels/fft/fft.h"
#include "test.h"

/* C11's CMPLX where <complex.h> lacks it (glibc defines it for GCC >= 4.7
 * only; clang reports 4.2). */
#ifndef CMPLX
#define CMPLX(re, im) ((double)(re) + (double)(im) * (double _Complex)_Complex_I)
#endif

static double _Complex cget(const tpu_view_t* v, int64_t k) {
  tpu_view_t re = fft_part_view(v, 0), im = fft_part_view(v, 1);
  return CMPLX(tt_get(&re, k), tt_get(&im, k));
}

static void cfill(const tpu_view_t* v) {
  tpu_view_t re = fft_part_view(v, 0), im = fft_part_view(v, 1);
  tt_fill(&re, -1, 1, 0);
  tt_fill(&im, -1, 1, 0);
}

typedef struct cmm_case {
  const char* op;
  int32_t nin;             /* factors, after self for the bias forms */
  int32_t ndim[3];         /* of each input */
  int64_t sizes[3][3];
  double beta, alpha;      /* the bias forms */
  double beta_im, alpha_im; /* non-zero: complex number attrs */
} cmm_case_t;

static const cmm_case_t g_cases[] = {
    {"mm", 2, {2, 2}, {{3, 4}, {4, 5}}, 0, 1, 0, 0},
    {"bmm", 2, {3, 3}, {{2, 3, 4}, {2, 4, 2}}, 0, 1, 0, 0},
    {"addmm", 3, {2, 2, 2}, {{3, 5}, {3, 4}, {4, 5}}, 0.5, 2, 0, 0},
    {"mv", 2, {2, 1}, {{3, 4}, {4}}, 0, 1, 0, 0},
    {"dot", 2, {1, 1}, {{6}, {6}}, 0, 1, 0, 0},
    {"vdot", 2, {1, 1}, {{6}, {6}}, 0, 1, 0, 0},
    {"addmm", 3, {2, 2, 2}, {{3, 5}, {3, 4}, {4, 5}}, 1, 0, -1, 2},
    {"addmm", 3, {2, 2, 2}, {{3, 5}, {3, 4}, {4, 5}}, 0, 0, 0, 0.5}, /* beta 0: no bias */
    {"baddbmm", 3, {3, 3, 3}, {{2, 3, 2}, {2, 3, 4}, {2, 4, 2}}, 0, 1, 2, -1},
    {"addmv", 3, {1, 2, 1}, {{3}, {3, 4}, {4}}, 0.5, 0, 0.5, 3},
};

static tpu_attr_t number(double re, double im) {
  if (im == 0) return tt_float(re);
  return (tpu_attr_t){.kind = TPU_ATTR_COMPLEX, .count = 2, .u.floats = {re, im}};
}

static bool bias0(const cmm_case_t* k) { return k->nin == 3 && k->beta == 0 && k->beta_im == 0; }

TEST(matmul_complex_matches_reference) {
  const tpu_dtype_t dts[2] = {TPU_DTYPE_C64, TPU_DTYPE_C128};
  for (size_t c = 0; c < sizeof(g_cases) / sizeof(g_cases[0]); ++c) {
    const cmm_case_t* k = &g_cases[c];
    const tpu_op_def_t* def = tt_def(k->op);
    for (int t = 0; t < 2; ++t) {
      tt_t in[3];
      tpu_value_t vals[3];
      for (int32_t i = 0; i < k->nin; ++i) {
        in[i] = tt_make(dts[t], k->ndim[i], k->sizes[i], i == 1 ? TT_TRANSPOSED : TT_GAPS);
        cfill(&in[i].view);
        if (i == 0 && bias0(k)) tt_fill_value(&in[i].view, NAN); /* ignored, as on CPU */
        vals[i] = tt_value(&in[i].view);
      }
      tpu_attr_t attrs[3] = {number(k->beta, k->beta_im), number(k->alpha, k->alpha_im),
                             tt_none()};
      bool bias = k->nin == 3;
      tpu_node_t node = bias ? tt_node(vals, 3, NULL, 0, attrs, 3)
                             : tt_node(vals, 2, NULL, 0, &attrs[2], 1);
      node.op = tpu_op_lookup(k->op);
      node.num_outputs = 1;
      tpu_view_t shape;
      CHECK_OK(tpu_op_infer(&node, &shape));
      CHECK(shape.dtype == dts[t]);
      tt_t o = tt_like(&shape, TT_PADDED);
      node.outputs = &o.view;
      CHECK_OK(tpu_op_check(&node));
      tpu_exec_ctx_t ctx = {0};
      CHECK_OK(tpu_node_execute(&node, &ctx));
      /* reference over [batch, m, n] with A [batch, m, kk] and B [batch, kk, n] */
      const tpu_view_t* A = &in[bias ? 1 : 0].view;
      const tpu_view_t* B = &in[bias ? 2 : 1].view;
      int64_t batch = A->ndim == 3 ? A->sizes[0] : 1;
      int64_t m = A->ndim >= 2 ? A->sizes[A->ndim - 2] : 1;
      int64_t kk = A->sizes[A->ndim - 1];
      int64_t n = B->ndim >= 2 ? B->sizes[B->ndim - 1] : 1;
      double tol = t == 0 ? 1e-5 : 1e-12;
      for (int64_t bi = 0; bi < batch; ++bi)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double _Complex w = 0;
            for (int64_t l = 0; l < kk; ++l) {
              double _Complex x = cget(A, (bi * m + i) * kk + l);
              if (strcmp(k->op, "vdot") == 0) x = conj(x);
              w += x * cget(B, (bi * kk + l) * n + j);
            }
            int64_t e = (bi * m + i) * n + j;
            double _Complex beta = CMPLX(k->beta, k->beta_im), alpha = CMPLX(k->alpha, k->alpha_im);
            if (bias) w = (beta != 0 ? beta * cget(&in[0].view, e) : 0) + alpha * w;
            double _Complex g = cget(&o.view, e);
            if (cabs(g - w) > tol * (1 + cabs(w)))
              tpu_test_fail(__FILE__, __LINE__, "%s %s element %lld: (%g, %g) want (%g, %g)",
                            k->op, tpu_dtype_name(dts[t]), (long long)e, creal(g), cimag(g),
                            creal(w), cimag(w));
          }
      for (int32_t i = 0; i < k->nin; ++i) tt_free(&in[i]);
      tt_free(&o);
      (void)def;
    }
  }
}

/* Mixed dtypes and an output overlapping a factor fall back. */
TEST(matmul_complex_refusals) {
  int64_t s[2] = {3, 3};
  tt_t a = tt_make(TPU_DTYPE_C64, 2, s, TT_CONTIG), b = tt_make(TPU_DTYPE_C128, 2, s, TT_CONTIG);
  tpu_attr_t prec = tt_none();
  tpu_value_t in[2] = {tt_value(&a.view), tt_value(&b.view)};
  tpu_node_t node = tt_node(in, 2, &a.view, 1, &prec, 1);
  node.op = tpu_op_lookup("mm");
  CHECK(tt_code(tpu_op_check(&node)) == TPU_CODE_UNIMPLEMENTED);
  in[1] = tt_value(&a.view);
  node = tt_node(in, 2, &a.view, 1, &prec, 1); /* a = a @ a */
  node.op = tpu_op_lookup("mm");
  CHECK(tt_code(tpu_op_check(&node)) == TPU_CODE_UNIMPLEMENTED);
  tt_free(&a);
  tt_free(&b);
}

/* A complex number attr on real operands falls back (the CPU raises). */
TEST(matmul_complex_number_on_real_refused) {
  int64_t s[2] = {3, 3};
  tt_t a = tt_make(TPU_DTYPE_F32, 2, s, TT_CONTIG), o = tt_make(TPU_DTYPE_F32, 2, s, TT_CONTIG);
  tpu_attr_t attrs[3] = {tt_float(1), number(0, 2), tt_none()};
  tpu_value_t in[3] = {tt_value(&a.view), tt_value(&a.view), tt_value(&a.view)};
  tpu_node_t node = tt_node(in, 3, &o.view, 1, attrs, 3);
  node.op = tpu_op_lookup("addmm");
  CHECK(tt_code(tpu_op_check(&node)) == TPU_CODE_UNIMPLEMENTED);
  tt_free(&a), tt_free(&o);
}
