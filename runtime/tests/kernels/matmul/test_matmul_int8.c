/* Tests of the int8 products (kernels/matmul/matmul_int8.c): torch._int_mm and
 * aten._weight_int8pack_mm against plain loops over every layout, size tail
 * and dtype the kernels split on, at each gemv kernel level this CPU has;
 * and the argument checks. */
#include "kernels/matmul/matmul.h"
#include "kernel_test_util.h"
#include "tpu/runtime.h"

typedef struct int_mm_case {
  tpu_dtype_t a_dtype;
  int64_t m, k, n;
  tt_layout_t a_layout, b_layout, c_layout;
} int_mm_case_t;

static const int_mm_case_t k_int_mm[] = {
    {TPU_DTYPE_I8, 5, 7, 3, TT_CONTIG, TT_CONTIG, TT_CONTIG},
    {TPU_DTYPE_I8, 33, 64, 48, TT_CONTIG, TT_TRANSPOSED, TT_CONTIG},
    {TPU_DTYPE_U8, 17, 40, 24, TT_CONTIG, TT_CONTIG, TT_CONTIG},
    {TPU_DTYPE_U8, 9, 30, 11, TT_TRANSPOSED, TT_PADDED, TT_TRANSPOSED},
    {TPU_DTYPE_I8, 1, 300, 70, TT_CONTIG, TT_CONTIG, TT_PADDED},
    {TPU_DTYPE_I8, 70, 129, 65, TT_PADDED, TT_TRANSPOSED, TT_CONTIG},
    {TPU_DTYPE_I8, 4, 0, 3, TT_CONTIG, TT_CONTIG, TT_CONTIG},
};

static void check_int_mm(const int_mm_case_t* c, size_t index) {
  const tpu_op_def_t* def = tt_def("int_mm");
  if (!def) return;
  int64_t as[2] = {c->m, c->k}, bs[2] = {c->k, c->n}, cs[2] = {c->m, c->n};
  tt_t a = tt_make(c->a_dtype, 2, as, c->a_layout), b = tt_make(TPU_DTYPE_I8, 2, bs, c->b_layout);
  tt_t out = tt_make(TPU_DTYPE_I32, 2, cs, c->c_layout);
  tt_fill_ints(&a.view, 11 + index, c->a_dtype == TPU_DTYPE_U8 ? 0 : -128,
               c->a_dtype == TPU_DTYPE_U8 ? 255 : 127);
  tt_fill_ints(&b.view, 13 + index, -128, 127);
  tt_fill_value(&out.view, 12345);
  tpu_value_t in[2] = {tt_value(&a.view), tt_value(&b.view)};
  tpu_node_t node = tt_node(in, 2, &out.view, 1, NULL, 0);
  node.op = tpu_op_lookup("int_mm");
  CHECK_CODE(def->check(def, &node), TPU_CODE_OK);
  CHECK_CODE(tt_run(def->kernel, def, &node), TPU_CODE_OK);
  int64_t worst = 0;
  for (int64_t i = 0; i < c->m; ++i)
    for (int64_t j = 0; j < c->n; ++j) {
      int64_t want = 0;
      for (int64_t kk = 0; kk < c->k; ++kk)
        want += (int64_t)tt_get(&a.view, i * c->k + kk) * (int64_t)tt_get(&b.view, kk * c->n + j);
      int64_t got = (int64_t)tt_get(&out.view, i * c->n + j);
      if (got != want) worst = got - want;
    }
  if (worst != 0)
    tpu_test_fail(__FILE__, __LINE__, "_int_mm case %zu (%lldx%lldx%lld): off by %lld", index,
                  (long long)c->m, (long long)c->k, (long long)c->n, (long long)worst);
  tt_free(&a);
  tt_free(&b);
  tt_free(&out);
}

/* Where the CPU has VNNI or AMX-INT8 the unit runs the contiguous cases (and
 * declines none of them); every case matches the plain sums either way. */
TEST(int_mm_matches_plain_sums) {
  tpu_mxu_info_t before, after;
  tpu_mxu_get_info(&before);
  for (size_t i = 0; i < sizeof(k_int_mm) / sizeof(k_int_mm[0]); ++i)
    check_int_mm(&k_int_mm[i], i);
  tpu_mxu_get_info(&after);
  if (after.int8) CHECK(after.gemms > before.gemms);
  else CHECK(after.gemms == before.gemms);
}

typedef struct w8_case {
  tpu_dtype_t dtype;
  int64_t m, k, n;
  int64_t a_pad;      /* extra elements per row of self */
  int64_t s_stride;   /* of scales */
} w8_case_t;

static const w8_case_t k_w8[] = {
    {TPU_DTYPE_F32, 1, 64, 48, 0, 1},
    {TPU_DTYPE_BF16, 1, 768, 1037, 0, 1},   /* a decode step: column blocks, tails */
    {TPU_DTYPE_F16, 3, 37, 300, 5, 2},      /* k tail, padded rows, strided scales */
    {TPU_DTYPE_BF16, 70, 45, 130, 0, 1},    /* more rows than a unit's block */
    {TPU_DTYPE_F32, 130, 16, 129, 1, 3},
    {TPU_DTYPE_F16, 2, 1, 5, 0, 1},
};

static void check_w8(const w8_case_t* c, size_t index, int level) {
  const tpu_op_def_t* def = tt_def("weight_int8pack_mm");
  if (!def) return;
  int64_t as[2] = {c->m, c->k + c->a_pad}, bs[2] = {c->n, c->k}, cs[2] = {c->m, c->n};
  int64_t ss[1] = {c->n * c->s_stride};
  tt_t a = tt_make(c->dtype, 2, as, TT_CONTIG), b = tt_make(TPU_DTYPE_I8, 2, bs, TT_CONTIG);
  tt_t s = tt_make(c->dtype, 1, ss, TT_CONTIG), out = tt_make(c->dtype, 2, cs, TT_CONTIG);
  tt_fill_ints(&a.view, 3 + index, -4, 4);
  tt_fill_ints(&b.view, 5 + index, -128, 127);
  tt_fill_ints(&s.view, 7 + index, -3, 3);
  tt_fill_value(&out.view, NAN);
  tpu_view_t av = a.view, sv = s.view;
  av.sizes[1] = c->k;
  sv.sizes[0] = c->n, sv.strides[0] = c->s_stride;
  tpu_value_t in[3] = {tt_value(&av), tt_value(&b.view), tt_value(&sv)};
  tpu_node_t node = tt_node(in, 3, &out.view, 1, NULL, 0);
  node.op = tpu_op_lookup("weight_int8pack_mm");
  CHECK_CODE(def->check(def, &node), TPU_CODE_OK);
  CHECK_CODE(tt_run(def->kernel, def, &node), TPU_CODE_OK);
  double worst = 0;
  for (int64_t i = 0; i < c->m; ++i)
    for (int64_t j = 0; j < c->n; ++j) {
      double sum = 0;
      for (int64_t kk = 0; kk < c->k; ++kk)
        sum += tt_get(&a.view, i * (c->k + c->a_pad) + kk) * tt_get(&b.view, j * c->k + kk);
      double want = sum * tt_get(&s.view, j * c->s_stride);
      double got = tt_get(&out.view, i * c->n + j);
      double d = tt_rel_diff(got, want);
      if (!(d <= worst)) worst = d;
    }
  if (!(worst <= tt_tol(c->dtype)))
    tpu_test_fail(__FILE__, __LINE__, "_weight_int8pack_mm case %zu (%s %lldx%lldx%lld, level %d): diff %g",
                  index, tpu_dtype_name(c->dtype), (long long)c->m, (long long)c->k,
                  (long long)c->n, level, worst);
  tt_free(&a);
  tt_free(&b);
  tt_free(&s);
  tt_free(&out);
}

TEST(weight_int8pack_mm_matches_plain_sums) {
  int best = tpu_mm_gemv_set_level(-1);
  for (int level = best; level >= 0; --level) {
    int got = tpu_mm_gemv_set_level(level);
    for (size_t i = 0; i < sizeof(k_w8) / sizeof(k_w8[0]); ++i) check_w8(&k_w8[i], i, got);
  }
  tpu_mm_gemv_set_level(-1);
}

/* What PyTorch's CPU kernels refuse, check refuses (UNIMPLEMENTED: the bridge
 * then raises PyTorch's own error) and the kernel refuses (INVALID_ARGUMENT). */
TEST(int8_products_refuse_bad_arguments) {
  const tpu_op_def_t* im = tt_def("int_mm");
  const tpu_op_def_t* w8 = tt_def("weight_int8pack_mm");
  if (!im || !w8) return;
  int64_t s44[2] = {4, 4}, s34[2] = {3, 4}, s4[1] = {4}, s3[1] = {3};
  tt_t i8 = tt_make(TPU_DTYPE_I8, 2, s44, TT_CONTIG), i8t = tt_make(TPU_DTYPE_I8, 2, s44, TT_TRANSPOSED);
  tt_t f32 = tt_make(TPU_DTYPE_F32, 2, s44, TT_CONTIG), f32t = tt_make(TPU_DTYPE_F32, 2, s44, TT_TRANSPOSED);
  tt_t i8_34 = tt_make(TPU_DTYPE_I8, 2, s34, TT_CONTIG), i32 = tt_make(TPU_DTYPE_I32, 2, s44, TT_CONTIG);
  tt_t sc = tt_make(TPU_DTYPE_F32, 1, s4, TT_CONTIG), sc3 = tt_make(TPU_DTYPE_F32, 1, s3, TT_CONTIG);
  tt_t sc16 = tt_make(TPU_DTYPE_BF16, 1, s4, TT_CONTIG), o = tt_make(TPU_DTYPE_F32, 2, s44, TT_CONTIG);
  struct {
    const tpu_op_def_t* def;
    tpu_view_t in[3];
    int n;
    tpu_view_t* out;
  } bad[] = {
      {im, {f32.view, i8.view}, 2, &i32.view},     /* self not int8 */
      {im, {i8.view, f32.view}, 2, &i32.view},     /* mat2 not int8 */
      {im, {i8.view, i8_34.view}, 2, &i32.view},   /* self.size(1) != mat2.size(0) */
      {w8, {i8.view, i8.view, sc.view}, 3, &o.view},        /* A not float */
      {w8, {f32t.view, i8.view, sc.view}, 3, &o.view},      /* A's rows not contiguous */
      {w8, {f32.view, i8t.view, sc.view}, 3, &o.view},      /* B not contiguous */
      {w8, {f32.view, f32.view, sc.view}, 3, &o.view},      /* B not int8 */
      {w8, {f32.view, i8.view, sc3.view}, 3, &o.view},      /* scales' size */
      {w8, {f32.view, i8.view, sc16.view}, 3, &o.view},     /* scales' dtype */
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    tpu_value_t in[3];
    for (int k = 0; k < bad[i].n; ++k) in[k] = tt_value(&bad[i].in[k]);
    tpu_node_t node = tt_node(in, bad[i].n, bad[i].out, 1, NULL, 0);
    tpu_status_t s = bad[i].def->check(bad[i].def, &node);
    if (tpu_status_code(s) != TPU_CODE_UNIMPLEMENTED)
      tpu_test_fail(__FILE__, __LINE__, "bad case %zu: check gave %s", i,
                    tpu_status_code_name(tpu_status_code(s)));
    tpu_status_free(s);
    CHECK_CODE(tt_run(bad[i].def->kernel, bad[i].def, &node), TPU_CODE_INVALID_ARGUMENT);
  }
  tt_free(&i8), tt_free(&i8t), tt_free(&f32), tt_free(&f32t), tt_free(&i8_34), tt_free(&i32);
  tt_free(&sc), tt_free(&sc3), tt_free(&sc16), tt_free(&o);
}
