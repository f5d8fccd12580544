/* test_elementwise_complex.c — the complex product (mul's complex path) and
 * polar, table-driven against a plain double-precision reference: dtypes,
 * broadcasting, strided layouts, real and number operands, in-place, and the
 * checks that send other forms to the CPU fallback. */
#include <math.h>
#include <string.h>

#include "kernel_test_util.h"
#include "kernels/fft/fft.h"
#include "test.h"

/* A view's element k as (re, im); real views have im 0. */
static void cx_get(const tpu_view_t* v, int64_t k, double* re, double* im) {
  tpu_view_t r = fft_part_view(v, 0);
  *re = tt_get(&r, k);
  *im = 0;
  if (tpu_dtype_is_complex(v->dtype)) {
    tpu_view_t i = fft_part_view(v, 1);
    *im = tt_get(&i, k);
  }
}

static void cx_fill(const tpu_view_t* v) {
  tpu_view_t r = fft_part_view(v, 0);
  tt_fill(&r, -2, 2, 0);
  if (tpu_dtype_is_complex(v->dtype)) {
    tpu_view_t i = fft_part_view(v, 1);
    tt_fill(&i, -2, 2, 0);
  }
}

/* Element k of `out`'s shape in a view broadcast to it. */
static int64_t bcast_index(const tpu_view_t* out, const tpu_view_t* v, int64_t k) {
  int64_t idx = 0, mul = 1;
  for (int32_t d = out->ndim - 1; d >= 0; --d) {
    int64_t i = k % out->sizes[d];
    k /= out->sizes[d];
    int32_t s = d - (out->ndim - v->ndim);
    if (s < 0) continue;
    if (v->sizes[s] > 1) idx += i * mul;
    mul *= v->sizes[s];
  }
  return idx;
}

typedef struct mul_case {
  tpu_dtype_t a, b; /* TPU_DTYPE_INVALID for b: a Python number */
  int32_t andim, bndim;
  int64_t asz[3], bsz[3];
  tt_layout_t alay, blay;
  tpu_dtype_t want; /* result dtype */
} mul_case_t;

static const mul_case_t g_mul_cases[] = {
    /* RoPE: (B, S, H, D/2) complex64 times (1, S, 1, D/2) */
    {TPU_DTYPE_C64, TPU_DTYPE_C64, 3, 3, {4, 3, 8}, {1, 3, 8}, TT_CONTIG, TT_CONTIG, TPU_DTYPE_C64},
    {TPU_DTYPE_C64, TPU_DTYPE_C64, 2, 2, {5, 7}, {5, 7}, TT_TRANSPOSED, TT_GAPS, TPU_DTYPE_C64},
    {TPU_DTYPE_C128, TPU_DTYPE_C128, 2, 1, {3, 4}, {4}, TT_PADDED, TT_CONTIG, TPU_DTYPE_C128},
    {TPU_DTYPE_C64, TPU_DTYPE_C128, 1, 1, {9}, {9}, TT_CONTIG, TT_GAPS, TPU_DTYPE_C128},
    /* a real self times a complex other (complex * real is the as-real path) */
    {TPU_DTYPE_F32, TPU_DTYPE_C64, 2, 2, {3, 5}, {3, 5}, TT_CONTIG, TT_REVERSED, TPU_DTYPE_C64},
    {TPU_DTYPE_F64, TPU_DTYPE_C64, 2, 2, {2, 6}, {2, 6}, TT_CONTIG, TT_CONTIG, TPU_DTYPE_C128},
    {TPU_DTYPE_BF16, TPU_DTYPE_C64, 1, 1, {8}, {8}, TT_CONTIG, TT_CONTIG, TPU_DTYPE_C64},
    /* a zero-dim complex tensor broadcast over a complex one */
    {TPU_DTYPE_C64, TPU_DTYPE_C64, 2, 0, {4, 4}, {0}, TT_CONTIG, TT_CONTIG, TPU_DTYPE_C64},
};

TEST(elementwise_complex_mul_matches_reference) {
  const tpu_op_def_t* def = tt_def("mul");
  for (size_t c = 0; c < sizeof(g_mul_cases) / sizeof(g_mul_cases[0]); ++c) {
    const mul_case_t* k = &g_mul_cases[c];
    tt_t a = tt_make(k->a, k->andim, k->asz, k->alay), b = tt_make(k->b, k->bndim, k->bsz, k->blay);
    cx_fill(&a.view);
    cx_fill(&b.view);
    tpu_value_t in[2] = {tt_value(&a.view), tt_value(&b.view)};
    tpu_node_t node = tt_node(in, 2, NULL, 0, NULL, 0);
    node.op = tpu_op_lookup("mul");
    node.num_outputs = 1;
    tpu_view_t shape;
    CHECK_OK(tpu_op_infer(&node, &shape));
    CHECK(shape.dtype == k->want);
    tt_t o = tt_like(&shape, TT_GAPS);
    node.outputs = &o.view;
    CHECK_OK(tpu_op_check(&node));
    CHECK_OK(tt_run(def->kernel, def, &node));
    const bool single = k->want == TPU_DTYPE_C64;
    for (int64_t e = 0; e < tpu_view_numel(&o.view); ++e) {
      double ar, ai, br, bi, gr, gi;
      cx_get(&a.view, bcast_index(&o.view, &a.view, e), &ar, &ai);
      cx_get(&b.view, bcast_index(&o.view, &b.view, e), &br, &bi);
      cx_get(&o.view, e, &gr, &gi);
      double wr = ar * br - ai * bi, wi = ar * bi + ai * br;
      double tol = single ? 1e-5 : 1e-12;
      if (fabs(gr - wr) > tol * (1 + fabs(wr)) || fabs(gi - wi) > tol * (1 + fabs(wi)))
        tpu_test_fail(__FILE__, __LINE__, "case %zu element %lld: (%g, %g) want (%g, %g)", c,
                      (long long)e, gr, gi, wr, wi);
    }
    tt_free(&a);
    tt_free(&b);
    tt_free(&o);
  }
}

/* self * number, in place into self (mul_), and the as-real form still
 * taking complex * real. */
TEST(elementwise_complex_mul_inplace_and_numbers) {
  const tpu_op_def_t* def = tt_def("mul");
  int64_t s[2] = {3, 4};
  tt_t x = tt_make(TPU_DTYPE_C64, 2, s, TT_CONTIG), y = tt_make(TPU_DTYPE_C64, 2, s, TT_CONTIG);
  cx_fill(&x.view);
  cx_fill(&y.view);
  double xr[12], xi[12];
  for (int64_t e = 0; e < 12; ++e) cx_get(&x.view, e, &xr[e], &xi[e]);
  tpu_value_t in[2] = {tt_value(&x.view), tt_value(&y.view)};
  tpu_node_t node = tt_node(in, 2, &x.view, 1, NULL, 0); /* x *= y */
  node.op = tpu_op_lookup("mul");
  CHECK_OK(tpu_op_check(&node));
  CHECK_OK(tt_run(def->kernel, def, &node));
  for (int64_t e = 0; e < 12; ++e) {
    double yr, yi, gr, gi;
    cx_get(&y.view, e, &yr, &yi);
    cx_get(&x.view, e, &gr, &gi);
    CHECK(fabs(gr - (xr[e] * yr - xi[e] * yi)) < 1e-5 && fabs(gi - (xr[e] * yi + xi[e] * yr)) < 1e-5);
  }
  /* a number times a complex other: 2.5 * y */
  tpu_value_t num = {.kind = TPU_VALUE_SCALAR};
  num.u.scalar.dtype = TPU_DTYPE_F64;
  num.u.scalar.v.f = 2.5;
  tpu_value_t in2[2] = {num, tt_value(&y.view)};
  tt_t o = tt_make(TPU_DTYPE_C64, 2, s, TT_CONTIG);
  node = tt_node(in2, 2, &o.view, 1, NULL, 0);
  node.op = tpu_op_lookup("mul");
  CHECK_OK(tpu_op_check(&node));
  CHECK_OK(tt_run(def->kernel, def, &node));
  for (int64_t e = 0; e < 12; ++e) {
    double yr, yi, gr, gi;
    cx_get(&y.view, e, &yr, &yi);
    cx_get(&o.view, e, &gr, &gi);
    CHECK(gr == (double)(float)(2.5f * (float)yr) && gi == (double)(float)(2.5f * (float)yi));
  }
  tt_free(&x);
  tt_free(&y);
  tt_free(&o);
}

/* Forms the complex path refuses: a real out= (PyTorch raises), a wider
 * out= (cast: CPU), partial overlap, a broadcast output. */
TEST(elementwise_complex_mul_refusals) {
  int64_t s[2] = {4, 4}, s1 = 16;
  tt_t x = tt_make(TPU_DTYPE_C64, 2, s, TT_CONTIG), y = tt_make(TPU_DTYPE_C64, 2, s, TT_CONTIG);
  tt_t real_out = tt_make(TPU_DTYPE_F32, 2, s, TT_CONTIG);
  tt_t wide = tt_make(TPU_DTYPE_C128, 2, s, TT_CONTIG);
  tpu_value_t in[2] = {tt_value(&x.view), tt_value(&y.view)};
  tpu_node_t node = tt_node(in, 2, &real_out.view, 1, NULL, 0);
  node.op = tpu_op_lookup("mul");
  CHECK(tt_code(tpu_op_check(&node)) == TPU_CODE_UNIMPLEMENTED);
  node.outputs = &wide.view;
  CHECK(tt_code(tpu_op_check(&node)) == TPU_CODE_UNIMPLEMENTED);
  tpu_view_t shifted = x.view; /* x's storage one element on: partial overlap */
  shifted.sizes[0] = 3;
  shifted.addr += tpu_dtype_size(TPU_DTYPE_C64);
  tpu_value_t in3[2] = {tt_value(&shifted), tt_value(&shifted)};
  tpu_view_t part = x.view;
  part.sizes[0] = 3;
  node = tt_node(in3, 2, &part, 1, NULL, 0);
  node.op = tpu_op_lookup("mul");
  CHECK(tt_code(tpu_op_check(&node)) == TPU_CODE_INVALID_ARGUMENT);
  tpu_view_t bout = y.view; /* dim 0 broadcast: several elements per address */
  bout.strides[0] = 0;
  node = tt_node(in, 2, &bout, 1, NULL, 0);
  node.op = tpu_op_lookup("mul");
  CHECK(tt_code(tpu_op_check(&node)) == TPU_CODE_INVALID_ARGUMENT);
  (void)s1;
  tt_free(&x);
  tt_free(&y);
  tt_free(&real_out);
  tt_free(&wide);
}

TEST(elementwise_complex_polar_matches_reference) {
  const tpu_op_def_t* def = tt_def("polar");
  const tpu_dtype_t dts[2] = {TPU_DTYPE_F32, TPU_DTYPE_F64};
  for (int t = 0; t < 2; ++t) {
    int64_t s[2] = {6, 5}, s1 = 5;
    tt_t r = tt_make(dts[t], 2, s, TT_TRANSPOSED), a = tt_make(dts[t], 1, &s1, TT_GAPS);
    tt_fill(&r.view, 0, 3, 0);
    tt_fill(&a.view, -7, 7, 0);
    tpu_value_t in[2] = {tt_value(&r.view), tt_value(&a.view)};
    tpu_node_t node = tt_node(in, 2, NULL, 0, NULL, 0);
    node.op = tpu_op_lookup("polar");
    node.num_outputs = 1;
    tpu_view_t shape;
    CHECK_OK(tpu_op_infer(&node, &shape));
    CHECK(shape.dtype == tpu_dtype_to_complex(dts[t]) && shape.ndim == 2 && shape.sizes[0] == 6);
    tt_t o = tt_like(&shape, TT_PADDED);
    node.outputs = &o.view;
    CHECK_OK(tpu_op_check(&node));
    CHECK_OK(tt_run(def->kernel, def, &node));
    double tol = t == 0 ? 2e-6 : 1e-14;
    for (int64_t e = 0; e < 30; ++e) {
      double x = tt_get(&r.view, e), th = tt_get(&a.view, e % 5), gr, gi;
      cx_get(&o.view, e, &gr, &gi);
      CHECK(fabs(gr - x * cos(th)) <= tol * 4 && fabs(gi - x * sin(th)) <= tol * 4);
    }
    tt_free(&r);
    tt_free(&a);
    tt_free(&o);
  }
  /* mixed dtypes: PyTorch raises; the fallback runs it */
  int64_t n = 4;
  tt_t r = tt_make(TPU_DTYPE_F32, 1, &n, TT_CONTIG), a = tt_make(TPU_DTYPE_F64, 1, &n, TT_CONTIG);
  tpu_value_t in[2] = {tt_value(&r.view), tt_value(&a.view)};
  tpu_node_t node = tt_node(in, 2, NULL, 0, NULL, 0);
  node.op = tpu_op_lookup("polar");
  node.num_outputs = 1;
  tpu_view_t shape;
  CHECK(tt_code(tpu_op_infer(&node, &shape)) == TPU_CODE_UNIMPLEMENTED);
  tt_free(&r);
  tt_free(&a);
}

/* TPU_OP_COMPLEX_AS_BITS (gather): complex64 moves as int64 bits; the
 * output is complex64 again; complex128 is refused (CPU fallback). */
TEST(elementwise_complex_gather_as_bits) {
  int64_t s[2] = {5, 3}, is[2] = {4, 3};
  tt_t x = tt_make(TPU_DTYPE_C64, 2, s, TT_TRANSPOSED), idx = tt_make(TPU_DTYPE_I64, 2, is, TT_CONTIG);
  cx_fill(&x.view);
  tt_fill_ints(&idx.view, 7, 0, 4);
  tpu_attr_t dim = tt_int(0);
  tpu_value_t in[2] = {tt_value(&x.view), tt_value(&idx.view)};
  tpu_node_t node = tt_node(in, 2, NULL, 0, &dim, 1);
  node.op = tpu_op_lookup("gather");
  node.num_outputs = 1;
  tpu_view_t shape;
  CHECK_OK(tpu_op_infer(&node, &shape));
  CHECK(shape.dtype == TPU_DTYPE_C64 && shape.sizes[0] == 4 && shape.sizes[1] == 3);
  tt_t o = tt_like(&shape, TT_CONTIG);
  node.outputs = &o.view;
  CHECK_OK(tpu_op_check(&node));
  tpu_exec_ctx_t ctx = {0};
  CHECK_OK(tpu_node_execute(&node, &ctx));
  for (int64_t e = 0; e < 12; ++e) {
    int64_t i = (int64_t)tt_get(&idx.view, e), j = e % 3;
    double gr, gi, wr, wi;
    cx_get(&o.view, e, &gr, &gi);
    cx_get(&x.view, i * 3 + j, &wr, &wi);
    CHECK(gr == wr && gi == wi);
  }
  tt_t w = tt_make(TPU_DTYPE_C128, 2, s, TT_CONTIG);
  in[0] = tt_value(&w.view);
  node.outputs = NULL;
  CHECK(tt_code(tpu_op_infer(&node, &shape)) == TPU_CODE_UNIMPLEMENTED);
  tt_free(&x);
  tt_free(&idx);
  tt_free(&o);
  tt_free(&w);
}
