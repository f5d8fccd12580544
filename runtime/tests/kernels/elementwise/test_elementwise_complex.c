/* test_elementwise_complex.c — the complex product (mul's complex path) and
 * polar, table-driven against a plain double-precision reference: dtypes,
 * broadcasting, strided layouts, real and number operands, in-place, and the
 * checks that send other forms to the CPU fallback. */
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

/* ---- the complex math of the elementwise rows (complex_math.c) ----------------- */

/* A plain reference per op: C99's functions over double complex. */
typedef double _Complex cxd;
typedef cxd (*cx_ref_fn)(const cxd* in);

static cxd r_add(const cxd* x) { return x[0] + x[1]; }
static cxd r_sub(const cxd* x) { return x[0] - x[1]; }
static cxd r_rsub(const cxd* x) { return x[1] - x[0]; }
static cxd r_mul(const cxd* x) { return x[0] * x[1]; }
static cxd r_div(const cxd* x) { return x[0] / x[1]; }
static cxd r_pow(const cxd* x) { return cpow(x[0], x[1]); }
static cxd r_eq(const cxd* x) { return x[0] == x[1]; }
static cxd r_ne(const cxd* x) { return x[0] != x[1]; }
static cxd r_neg(const cxd* x) { return -x[0]; }
static cxd r_reciprocal(const cxd* x) { return 1 / x[0]; }
static cxd r_abs(const cxd* x) { return cabs(x[0]); }
static cxd r_angle(const cxd* x) { return carg(x[0]); }
static cxd r_sgn(const cxd* x) { return x[0] / cabs(x[0]); }
static cxd r_exp(const cxd* x) { return cexp(x[0]); }
static cxd r_exp2(const cxd* x) { return cpow(2, x[0]); }
static cxd r_expm1(const cxd* x) { return cexp(x[0]) - 1; }
static cxd r_log(const cxd* x) { return clog(x[0]); }
static cxd r_log2(const cxd* x) { return clog(x[0]) / log(2); }
static cxd r_log10(const cxd* x) { return clog(x[0]) / log(10); }
static cxd r_log1p(const cxd* x) { return clog(1 + x[0]); }
static cxd r_sqrt(const cxd* x) { return csqrt(x[0]); }
static cxd r_rsqrt(const cxd* x) { return 1 / csqrt(x[0]); }
static cxd r_sigmoid(const cxd* x) { return 1 / (1 + cexp(-x[0])); }
static cxd r_sin(const cxd* x) { return csin(x[0]); }
static cxd r_cos(const cxd* x) { return ccos(x[0]); }
static cxd r_tan(const cxd* x) { return ctan(x[0]); }
static cxd r_asin(const cxd* x) { return casin(x[0]); }
static cxd r_acos(const cxd* x) { return cacos(x[0]); }
static cxd r_atan(const cxd* x) { return catan(x[0]); }
static cxd r_sinh(const cxd* x) { return csinh(x[0]); }
static cxd r_cosh(const cxd* x) { return ccosh(x[0]); }
static cxd r_tanh(const cxd* x) { return ctanh(x[0]); }
static cxd r_asinh(const cxd* x) { return casinh(x[0]); }
static cxd r_acosh(const cxd* x) { return cacosh(x[0]); }
static cxd r_atanh(const cxd* x) { return catanh(x[0]); }
static cxd r_where(const cxd* x) { return creal(x[0]) != 0 ? x[1] : x[2]; }
static cxd r_lerp(const cxd* x) { return x[0] + x[2] * (x[1] - x[0]); }
static cxd r_addcmul(const cxd* x) { return x[0] + x[1] * x[2]; }
static cxd r_addcdiv(const cxd* x) { return x[0] + x[1] / x[2]; }

typedef struct cx_op_case {
  const char* op;
  int32_t nin;
  cx_ref_fn ref;
  int32_t result; /* 0: the complex dtype, 1: its part dtype, 2: bool */
} cx_op_case_t;

#define CXU(op) {#op, 1, r_##op, 0}
static const cx_op_case_t g_cx_ops[] = {
    {"add", 2, r_add, 0}, {"sub", 2, r_sub, 0}, {"rsub", 2, r_rsub, 0}, {"mul", 2, r_mul, 0},
    {"div", 2, r_div, 0}, {"pow", 2, r_pow, 0}, {"eq", 2, r_eq, 2},     {"ne", 2, r_ne, 2},
    {"abs", 1, r_abs, 1}, {"angle", 1, r_angle, 1}, CXU(neg), CXU(reciprocal), CXU(sgn),
    CXU(exp), CXU(exp2), CXU(expm1), CXU(log), CXU(log2), CXU(log10), CXU(log1p), CXU(sqrt),
    CXU(rsqrt), CXU(sigmoid), CXU(sin), CXU(cos), CXU(tan), CXU(asin), CXU(acos), CXU(atan),
    CXU(sinh), CXU(cosh), CXU(tanh), CXU(asinh), CXU(acosh), CXU(atanh),
    {"where", 3, r_where, 0}, {"lerp", 3, r_lerp, 0}, {"addcmul", 3, r_addcmul, 0},
    {"addcdiv", 3, r_addcdiv, 0},
};

/* Parts are compared relative to the whole value's magnitude `scale` (a
 * complex64 pow, in float math as PyTorch's, errs relative to |w|). */
static bool cx_close(double g, double w, double scale, double tol) {
  if (isnan(w) || isnan(g)) return isnan(w) && isnan(g);
  if (isinf(w) || isinf(g)) return g == w;
  return fabs(g - w) <= tol * (1 + scale);
}

/* Every op with complex math, complex64 and complex128, against the
 * reference: strided and broadcast operands, a real operand mixed in (its
 * imaginary part 0), the result dtype each op promises. */
TEST(elementwise_complex_math_matches_reference) {
  const tpu_dtype_t cds[2] = {TPU_DTYPE_C64, TPU_DTYPE_C128};
  for (size_t c = 0; c < sizeof(g_cx_ops) / sizeof(g_cx_ops[0]); ++c) {
    const cx_op_case_t* k = &g_cx_ops[c];
    const tpu_op_def_t* def = tt_def(k->op);
    for (int t = 0; t < 2; ++t) {
      int64_t full[2] = {5, 6}, row[1] = {6};
      tt_t in[3];
      tpu_value_t vals[3];
      for (int32_t i = 0; i < k->nin; ++i) {
        bool cond = strcmp(k->op, "where") == 0 && i == 0;
        /* operand 1 a broadcast row; lerp's weight real (its dtype must
         * match in PyTorch, so complex too); operand 2 of addcmul real */
        tpu_dtype_t d = cond ? TPU_DTYPE_BOOL
                        : (i == 2 && strcmp(k->op, "addcmul") == 0) ? TPU_DTYPE_F32
                                                                     : cds[t];
        in[i] = i == 1 ? tt_make(d, 1, row, TT_GAPS)
                       : tt_make(d, 2, full, i == 0 ? TT_TRANSPOSED : TT_CONTIG);
        if (cond)
          tt_fill_ints(&in[i].view, 3, 0, 1);
        else
          cx_fill(&in[i].view);
        vals[i] = tt_value(&in[i].view);
      }
      tpu_attr_t none[4] = {tt_none(), tt_none(), tt_none(), tt_none()}; /* defaults */
      tpu_node_t node = tt_node(vals, k->nin, NULL, 0, none, tpu_spec_count(def->attrs));
      node.op = tpu_op_lookup(k->op);
      node.num_outputs = 1;
      tpu_view_t shape;
      CHECK_OK(tpu_op_infer(&node, &shape));
      tpu_dtype_t want = k->result == 0   ? cds[t]
                         : k->result == 1 ? tpu_dtype_part(cds[t])
                                          : TPU_DTYPE_BOOL;
      if (shape.dtype != want)
        tpu_test_fail(__FILE__, __LINE__, "%s: result %s, want %s", k->op,
                      tpu_dtype_name(shape.dtype), tpu_dtype_name(want));
      tt_t o = tt_like(&shape, TT_PADDED);
      node.outputs = &o.view;
      CHECK_OK(tpu_op_check(&node));
      tpu_exec_ctx_t ctx = {0};
      CHECK_OK(tpu_node_execute(&node, &ctx));
      double tol = t == 0 ? 2e-6 : 1e-12;
      for (int64_t e = 0; e < 30; ++e) {
        cxd x[3];
        for (int32_t i = 0; i < k->nin; ++i) {
          double re, im;
          cx_get(&in[i].view, bcast_index(&o.view, &in[i].view, e), &re, &im);
          x[i] = CMPLX(re, im);
        }
        if (t == 0) /* complex64 operands were rounded to float */
          for (int32_t i = 0; i < k->nin; ++i) x[i] = CMPLX((float)creal(x[i]), (float)cimag(x[i]));
        cxd w = k->ref(x);
        double gr, gi;
        cx_get(&o.view, e, &gr, &gi);
        double scale = isfinite(cabs(w)) ? cabs(w) : 0;
        if (!cx_close(gr, creal(w), scale, tol) ||
            (k->result == 0 && !cx_close(gi, cimag(w), scale, tol)))
          tpu_test_fail(__FILE__, __LINE__, "%s %s element %lld: (%g, %g) want (%g, %g)", k->op,
                        tpu_dtype_name(cds[t]), (long long)e, gr, gi, creal(w), cimag(w));
      }
      for (int32_t i = 0; i < k->nin; ++i) tt_free(&in[i]);
      tt_free(&o);
    }
  }
}

/* Forms the complex math refuses with UNIMPLEMENTED (the CPU fallback then
 * runs or raises them as PyTorch does): an op without complex math (erf), a
 * real out= of a complex result, div with a rounding mode. */
TEST(elementwise_complex_math_refusals) {
  int64_t s[1] = {8};
  tt_t x = tt_make(TPU_DTYPE_C64, 1, s, TT_CONTIG), y = tt_make(TPU_DTYPE_C64, 1, s, TT_CONTIG);
  tt_t real_out = tt_make(TPU_DTYPE_F32, 1, s, TT_CONTIG);
  cx_fill(&x.view);
  cx_fill(&y.view);
  tpu_value_t in[2] = {tt_value(&x.view), tt_value(&y.view)};
  tpu_node_t node = tt_node(in, 1, &y.view, 1, NULL, 0);
  node.op = tpu_op_lookup("erf");
  CHECK(tt_code(tpu_op_check(&node)) == TPU_CODE_UNIMPLEMENTED);
  tpu_attr_t alpha = tt_none();
  node = tt_node(in, 2, &real_out.view, 1, &alpha, 1);
  node.op = tpu_op_lookup("add");
  CHECK(tt_code(tpu_op_check(&node)) == TPU_CODE_UNIMPLEMENTED);
  tt_t o = tt_make(TPU_DTYPE_C64, 1, s, TT_CONTIG);
  tpu_attr_t mode = {.kind = TPU_ATTR_STR, .u.str = "floor"};
  node = tt_node(in, 2, &o.view, 1, &mode, 1);
  node.op = tpu_op_lookup("div");
  CHECK(tt_code(tpu_op_check(&node)) == TPU_CODE_UNIMPLEMENTED);
  /* abs of complex64 is float32: its out= takes that */
  node = tt_node(in, 1, &real_out.view, 1, NULL, 0);
  node.op = tpu_op_lookup("abs");
  CHECK_OK(tpu_op_check(&node));
  tt_free(&x);
  tt_free(&y);
  tt_free(&real_out);
  tt_free(&o);
}

/* complex(real, imag) and its dtype rule. */
TEST(elementwise_complex_from_parts) {
  int64_t s[2] = {4, 3}, s1 = 3;
  tt_t r = tt_make(TPU_DTYPE_F64, 2, s, TT_TRANSPOSED), i = tt_make(TPU_DTYPE_F64, 1, &s1, TT_GAPS);
  tt_fill(&r.view, -3, 3, 0);
  tt_fill(&i.view, -3, 3, 0);
  tpu_value_t in[2] = {tt_value(&r.view), tt_value(&i.view)};
  tpu_node_t node = tt_node(in, 2, NULL, 0, NULL, 0);
  node.op = tpu_op_lookup("complex");
  node.num_outputs = 1;
  tpu_view_t shape;
  CHECK_OK(tpu_op_infer(&node, &shape));
  CHECK(shape.dtype == TPU_DTYPE_C128 && shape.ndim == 2);
  tt_t o = tt_like(&shape, TT_GAPS);
  node.outputs = &o.view;
  CHECK_OK(tpu_op_check(&node));
  tpu_exec_ctx_t ctx = {0};
  CHECK_OK(tpu_node_execute(&node, &ctx));
  for (int64_t e = 0; e < 12; ++e) {
    double gr, gi;
    cx_get(&o.view, e, &gr, &gi);
    CHECK(gr == tt_get(&r.view, e) && gi == tt_get(&i.view, e % 3));
  }
  tt_t f = tt_make(TPU_DTYPE_F32, 1, &s1, TT_CONTIG); /* float64 with float32: PyTorch raises */
  in[1] = tt_value(&f.view);
  node.outputs = NULL;
  CHECK(tt_code(tpu_op_infer(&node, &shape)) == TPU_CODE_UNIMPLEMENTED);
  tt_free(&r);
  tt_free(&i);
  tt_free(&o);
  tt_free(&f);
}
