/* test_reduce_complex.c — sum and mean of complex tensors (reduce_complex.c)
 * against a plain double loop: dims negative and positive, keepdim, all
 * dims (sum.default, dim=[]), strided input, a complex dtype argument; var
 * and std (a real result: var of the real parts + var of the imaginary
 * parts, with the correction) against a plain two-pass loop; and the forms
 * left to the CPU fallback. */
#include <math.h>
#include <string.h>

#include "kernel_test_util.h"
#include "kernels/fft/fft.h"
#include "test.h"

typedef struct cx_sum_case {
  const char* op; /* sum, sum_all, mean, mean_all */
  tpu_dtype_t dtype;
  int32_t ndims; /* dims listed; -1: the attr absent (all) */
  int64_t dims[2];
  bool keepdim;
} cx_sum_case_t;

static const cx_sum_case_t g_cases[] = {
    {"sum", TPU_DTYPE_C64, 1, {-1}, false},   {"sum", TPU_DTYPE_C128, 2, {0, 2}, true},
    {"sum", TPU_DTYPE_C64, 0, {0}, false},    {"sum_all", TPU_DTYPE_C128, -1, {0}, false},
    {"mean", TPU_DTYPE_C64, 1, {1}, true},    {"mean", TPU_DTYPE_C128, 1, {-3}, false},
    {"mean_all", TPU_DTYPE_C64, -1, {0}, false},
};

TEST(reduce_complex_sum_mean_match_reference) {
  for (size_t c = 0; c < sizeof(g_cases) / sizeof(g_cases[0]); ++c) {
    const cx_sum_case_t* k = &g_cases[c];
    const tpu_op_def_t* def = tt_def(k->op);
    int64_t s[3] = {3, 4, 5};
    tt_t x = tt_make(k->dtype, 3, s, TT_TRANSPOSED);
    tpu_view_t re = fft_part_view(&x.view, 0), im = fft_part_view(&x.view, 1);
    tt_fill(&re, -2, 2, 0);
    tt_fill(&im, -2, 2, 0);
    bool reduced[3] = {k->ndims <= 0, k->ndims <= 0, k->ndims <= 0};
    for (int32_t i = 0; i < k->ndims; ++i) reduced[(k->dims[i] + 3) % 3] = true;
    tpu_attr_t attrs[3];
    int32_t nattrs = 0;
    if (k->ndims >= 0) {
      attrs[nattrs++] = tt_ints(k->ndims, k->dims);
      attrs[nattrs++] = tt_bool(k->keepdim);
    }
    attrs[nattrs++] = tt_none();
    tpu_value_t in = tt_value(&x.view);
    tpu_node_t node = tt_node(&in, 1, NULL, 0, attrs, nattrs);
    node.op = tpu_op_lookup(k->op);
    node.num_outputs = 1;
    tpu_view_t shape;
    CHECK_OK(tpu_op_infer(&node, &shape));
    CHECK(shape.dtype == k->dtype);
    tt_t o = tt_like(&shape, TT_CONTIG);
    node.outputs = &o.view;
    CHECK_OK(tpu_op_check(&node));
    tpu_exec_ctx_t ctx = {0};
    CHECK_OK(tpu_node_execute(&node, &ctx));
    /* reference: accumulate each element into its output position */
    double want[2][60];
    int64_t count[60];
    memset(want, 0, sizeof(want));
    memset(count, 0, sizeof(count));
    int64_t nout = tpu_view_numel(&o.view);
    for (int64_t e = 0; e < 60; ++e) {
      int64_t i[3] = {e / 20, e / 5 % 4, e % 5}, pos = 0;
      for (int32_t d = 0; d < 3; ++d)
        if (!reduced[d]) pos = pos * s[d] + i[d];
      want[0][pos] += tt_get(&re, e);
      want[1][pos] += tt_get(&im, e);
      count[pos]++;
    }
    bool mean = strncmp(k->op, "mean", 4) == 0;
    tpu_view_t ore = fft_part_view(&o.view, 0), oim = fft_part_view(&o.view, 1);
    double tol = k->dtype == TPU_DTYPE_C64 ? 1e-5 : 1e-12;
    for (int64_t p = 0; p < nout; ++p) {
      double wr = mean ? want[0][p] / count[p] : want[0][p];
      double wi = mean ? want[1][p] / count[p] : want[1][p];
      if (fabs(tt_get(&ore, p) - wr) > tol * (1 + fabs(wr)) ||
          fabs(tt_get(&oim, p) - wi) > tol * (1 + fabs(wi)))
        tpu_test_fail(__FILE__, __LINE__, "case %zu output %lld: (%g, %g) want (%g, %g)", c,
                      (long long)p, tt_get(&ore, p), tt_get(&oim, p), wr, wi);
    }
    (void)def;
    tt_free(&x);
    tt_free(&o);
  }
}

/* A real dtype argument and a real out= fall back; a 0-dim input sums to
 * itself. */
TEST(reduce_complex_refusals) {
  int64_t s[1] = {6};
  tt_t x = tt_make(TPU_DTYPE_C64, 1, s, TT_CONTIG), z = tt_make(TPU_DTYPE_C64, 0, s, TT_CONTIG);
  tt_t real_out = tt_make(TPU_DTYPE_F32, 0, s, TT_CONTIG);
  tpu_attr_t attrs[1] = {tt_dtype(TPU_DTYPE_F32)};
  tpu_value_t in = tt_value(&x.view);
  tpu_node_t node = tt_node(&in, 1, NULL, 0, attrs, 1);
  node.op = tpu_op_lookup("sum_all");
  node.num_outputs = 1;
  tpu_view_t shape;
  CHECK(tt_code(tpu_op_infer(&node, &shape)) == TPU_CODE_UNIMPLEMENTED);
  attrs[0] = tt_none();
  node = tt_node(&in, 1, &real_out.view, 1, attrs, 1);
  node.op = tpu_op_lookup("sum_all");
  CHECK(tt_code(tpu_op_check(&node)) == TPU_CODE_UNIMPLEMENTED);
  tpu_value_t zin = tt_value(&z.view);
  tpu_view_t zre = fft_part_view(&z.view, 0), zim = fft_part_view(&z.view, 1);
  tt_fill_value(&zre, 1.5);
  tt_fill_value(&zim, -2.5);
  node = tt_node(&zin, 1, NULL, 0, attrs, 1);
  node.op = tpu_op_lookup("sum_all");
  node.num_outputs = 1;
  CHECK_OK(tpu_op_infer(&node, &shape));
  CHECK(shape.ndim == 0 && shape.dtype == TPU_DTYPE_C64);
  tt_t zo = tt_like(&shape, TT_CONTIG);
  node.outputs = &zo.view;
  CHECK_OK(tpu_op_check(&node));
  tpu_exec_ctx_t ctx = {0};
  CHECK_OK(tpu_node_execute(&node, &ctx));
  tpu_view_t ore = fft_part_view(&zo.view, 0), oim = fft_part_view(&zo.view, 1);
  CHECK(tt_get(&ore, 0) == 1.5 && tt_get(&oim, 0) == -2.5);
  tt_free(&zo);
  tt_free(&x);
  tt_free(&z);
  tt_free(&real_out);
}

typedef struct cx_var_case {
  const char* op; /* var, std */
  tpu_dtype_t dtype;
  int32_t ndims; /* dims listed; -1: None (all) */
  int64_t dims[2];
  double correction;
  bool keepdim;
} cx_var_case_t;

static const cx_var_case_t g_var_cases[] = {
    {"var", TPU_DTYPE_C64, 1, {-1}, 1.0, false}, {"var", TPU_DTYPE_C128, 2, {0, 2}, 0.0, true},
    {"std", TPU_DTYPE_C64, -1, {0}, 1.0, false}, {"std", TPU_DTYPE_C128, 1, {1}, 2.0, false},
    {"var", TPU_DTYPE_C128, 1, {0}, 7.0, false}, /* n - correction < 0: a zero divisor */
};

TEST(reduce_complex_var_std_match_reference) {
  for (size_t c = 0; c < sizeof(g_var_cases) / sizeof(g_var_cases[0]); ++c) {
    const cx_var_case_t* k = &g_var_cases[c];
    int64_t s[3] = {3, 4, 5};
    tt_t x = tt_make(k->dtype, 3, s, TT_PADDED);
    tpu_view_t re = fft_part_view(&x.view, 0), im = fft_part_view(&x.view, 1);
    tt_fill(&re, 5, 9, 0); /* a mean far from 0 */
    tt_fill(&im, -3, 1, 0);
    bool reduced[3] = {k->ndims < 0, k->ndims < 0, k->ndims < 0};
    for (int32_t i = 0; i < k->ndims; ++i) reduced[(k->dims[i] + 3) % 3] = true;
    tpu_attr_t attrs[3] = {k->ndims < 0 ? tt_none() : tt_ints(k->ndims, k->dims),
                           tt_float(k->correction), tt_bool(k->keepdim)};
    tpu_value_t in = tt_value(&x.view);
    tpu_node_t node = tt_node(&in, 1, NULL, 0, attrs, 3);
    node.op = tpu_op_lookup(k->op);
    node.num_outputs = 1;
    tpu_view_t shape;
    CHECK_OK(tpu_op_infer(&node, &shape));
    CHECK(shape.dtype == tpu_dtype_part(k->dtype));
    tt_t o = tt_like(&shape, TT_CONTIG);
    node.outputs = &o.view;
    CHECK_OK(tpu_op_check(&node));
    tpu_exec_ctx_t ctx = {0};
    CHECK_OK(tpu_node_execute(&node, &ctx));
    /* reference: per output, the two parts' means, then their squared deviations */
    double sum[2][60], m2[2][60];
    int64_t count[60], pos_of[60];
    memset(sum, 0, sizeof(sum)), memset(m2, 0, sizeof(m2)), memset(count, 0, sizeof(count));
    for (int64_t e = 0; e < 60; ++e) {
      int64_t i[3] = {e / 20, e / 5 % 4, e % 5}, pos = 0;
      for (int32_t d = 0; d < 3; ++d)
        if (!reduced[d]) pos = pos * s[d] + i[d];
      pos_of[e] = pos;
      sum[0][pos] += tt_get(&re, e), sum[1][pos] += tt_get(&im, e);
      count[pos]++;
    }
    for (int64_t e = 0; e < 60; ++e) {
      int64_t p = pos_of[e];
      double dr = tt_get(&re, e) - sum[0][p] / (double)count[p];
      double di = tt_get(&im, e) - sum[1][p] / (double)count[p];
      m2[0][p] += dr * dr, m2[1][p] += di * di;
    }
    double tol = k->dtype == TPU_DTYPE_C64 ? 1e-5 : 1e-12;
    for (int64_t p = 0; p < tpu_view_numel(&o.view); ++p) {
      double div = (double)count[p] - k->correction;
      double want = div > 0 ? (m2[0][p] + m2[1][p]) / div : INFINITY;
      if (strcmp(k->op, "std") == 0) want = sqrt(want);
      double got = tt_get(&o.view, p);
      if (!(isinf(want) ? got == want : fabs(got - want) <= tol * (1 + fabs(want))))
        tpu_test_fail(__FILE__, __LINE__, "case %zu output %lld: %g want %g", c, (long long)p,
                      got, want);
    }
    tt_free(&x);
    tt_free(&o);
  }
}

/* var_mean / std_mean: the real var (std) and the complex mean of the parts. */
TEST(reduce_complex_var_mean) {
  int64_t s[2] = {4, 6}, r[1] = {1};
  tt_t x = tt_make(TPU_DTYPE_C128, 2, s, TT_TRANSPOSED);
  tpu_view_t re = fft_part_view(&x.view, 0), im = fft_part_view(&x.view, 1);
  tt_fill(&re, -2, 2, 0);
  tt_fill(&im, 1, 3, 0);
  const char* ops[2] = {"var_mean", "std_mean"};
  for (int k = 0; k < 2; ++k) {
    tpu_attr_t attrs[3] = {tt_ints(1, r), tt_float(1.0), tt_bool(false)};
    tpu_value_t in = tt_value(&x.view);
    tpu_node_t node = tt_node(&in, 1, NULL, 0, attrs, 3);
    node.op = tpu_op_lookup(ops[k]);
    node.num_outputs = 2;
    tpu_view_t shape[2];
    CHECK_OK(tpu_op_infer(&node, shape));
    CHECK(shape[0].dtype == TPU_DTYPE_F64 && shape[1].dtype == TPU_DTYPE_C128);
    tt_t o0 = tt_like(&shape[0], TT_CONTIG), o1 = tt_like(&shape[1], TT_CONTIG);
    tpu_view_t outs[2] = {o0.view, o1.view};
    node.outputs = outs;
    CHECK_OK(tpu_op_check(&node));
    tpu_exec_ctx_t ctx = {0};
    CHECK_OK(tpu_node_execute(&node, &ctx));
    tpu_view_t mre = fft_part_view(&o1.view, 0), mim = fft_part_view(&o1.view, 1);
    for (int64_t i = 0; i < 4; ++i) {
      double sr = 0, si = 0, m2 = 0;
      for (int64_t j = 0; j < 6; ++j) sr += tt_get(&re, i * 6 + j), si += tt_get(&im, i * 6 + j);
      sr /= 6, si /= 6;
      for (int64_t j = 0; j < 6; ++j) {
        double dr = tt_get(&re, i * 6 + j) - sr, di = tt_get(&im, i * 6 + j) - si;
        m2 += dr * dr + di * di;
      }
      double want = k ? sqrt(m2 / 5) : m2 / 5;
      CHECK(fabs(tt_get(&o0.view, i) - want) <= 1e-12 * (1 + want));
      CHECK(fabs(tt_get(&mre, i) - sr) <= 1e-12 && fabs(tt_get(&mim, i) - si) <= 1e-12);
    }
    tt_free(&o0), tt_free(&o1);
  }
  tt_free(&x);
}
