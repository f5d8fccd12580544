/* test_matmul.c — the matmul family against its reference (matmul_ref.c):
 * a table of ops x dtypes x shapes x layouts (transposed and padded factors,
 * strided and column-major outputs, broadcast and in-place bias), plus shape
 * errors, checks and shape inference. */
#include <math.h>

#include "kernels/matmul/matmul.h"
#include "kernel_test_util.h"
#include "tpu/runtime.h"

enum { BIAS_FULL = 0, BIAS_ROW, BIAS_SCALAR, BIAS_INPLACE };

typedef struct mm_case {
  const char* op;
  tpu_dtype_t dtype;
  int64_t batch, m, n, k;
  int a_layout, b_layout, c_layout, bias;
  double beta, alpha;
} mm_case_t;

static const mm_case_t k_cases[] = {
    {"mm", TPU_DTYPE_F32, 1, 5, 7, 3, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_F32, 1, 9, 4, 6, TT_TRANSPOSED, TT_TRANSPOSED, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_F32, 1, 9, 4, 6, TT_PADDED, TT_TRANSPOSED, TT_TRANSPOSED, 0, 0, 1},
    {"mm", TPU_DTYPE_F32, 1, 6, 5, 4, TT_CONTIG, TT_PADDED, TT_PADDED, 0, 0, 1},
    {"mm", TPU_DTYPE_F64, 1, 8, 3, 5, TT_TRANSPOSED, TT_CONTIG, TT_TRANSPOSED, 0, 0, 1},
    {"mm", TPU_DTYPE_F16, 1, 7, 6, 9, TT_PADDED, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_BF16, 1, 7, 6, 9, TT_CONTIG, TT_TRANSPOSED, TT_PADDED, 0, 0, 1},
    {"mm", TPU_DTYPE_BF16, 1, 4, 3, 5, TT_PADDED, TT_PADDED, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_I64, 1, 6, 5, 7, TT_TRANSPOSED, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_I32, 1, 3, 9, 4, TT_CONTIG, TT_PADDED, TT_TRANSPOSED, 0, 0, 1},
    {"mm", TPU_DTYPE_U8, 1, 4, 4, 4, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_I8, 1, 5, 2, 3, TT_PADDED, TT_TRANSPOSED, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_F32, 1, 1, 1, 1, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_F32, 1, 1, 8, 5, TT_TRANSPOSED, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_F32, 1, 4, 3, 0, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_I64, 1, 4, 3, 0, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_F32, 1, 0, 3, 4, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_F32, 1, 100, 90, 80, TT_CONTIG, TT_TRANSPOSED, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_I64, 1, 60, 70, 50, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    /* large enough to be split into row blocks over the pool */
    {"mm", TPU_DTYPE_F32, 1, 70, 65, 60, TT_TRANSPOSED, TT_PADDED, TT_TRANSPOSED, 0, 0, 1},
    {"mm", TPU_DTYPE_F16, 1, 64, 70, 80, TT_PADDED, TT_CONTIG, TT_PADDED, 0, 0, 1},
    {"mm", TPU_DTYPE_I32, 1, 64, 64, 64, TT_CONTIG, TT_TRANSPOSED, TT_TRANSPOSED, 0, 0, 1},
    {"addmm", TPU_DTYPE_F32, 1, 80, 70, 50, TT_CONTIG, TT_CONTIG, TT_TRANSPOSED, BIAS_INPLACE,
     0.5, 2},
    /* a row-major float32 B of 32,768 elements or more, laid out blocked by
     * column ranges over the pool, with a transposed A made dense by tiles
     * per row part; padded layouts (n = 250, k = 129) by one reorder */
    {"mm", TPU_DTYPE_F32, 1, 96, 256, 192, TT_TRANSPOSED, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_F32, 1, 80, 250, 200, TT_CONTIG, TT_CONTIG, TT_PADDED, 0, 0, 1},
    {"mm", TPU_DTYPE_F32, 1, 70, 256, 129, TT_PADDED, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"addmm", TPU_DTYPE_F32, 1, 128, 320, 160, TT_TRANSPOSED, TT_CONTIG, TT_CONTIG, BIAS_ROW, 1,
     1},
    {"mm", TPU_DTYPE_BF16, 1, 96, 128, 100, TT_TRANSPOSED, TT_TRANSPOSED, TT_CONTIG, 0, 0, 1},
    {"bmm", TPU_DTYPE_F32, 2, 40, 64, 48, TT_TRANSPOSED, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    /* one or two rows, split into column blocks (decode steps) */
    {"mm", TPU_DTYPE_F32, 1, 1, 300, 500, TT_CONTIG, TT_TRANSPOSED, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_F64, 1, 1, 300, 500, TT_PADDED, TT_CONTIG, TT_PADDED, 0, 0, 1},
    {"mm", TPU_DTYPE_I64, 1, 1, 200, 700, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"addmm", TPU_DTYPE_F32, 1, 2, 260, 600, TT_CONTIG, TT_TRANSPOSED, TT_TRANSPOSED, BIAS_ROW,
     1, 1},
    {"addmm", TPU_DTYPE_BF16, 1, 1, 330, 500, TT_CONTIG, TT_TRANSPOSED, TT_CONTIG, BIAS_INPLACE,
     0.5, 2},
    {"addmm", TPU_DTYPE_F64, 1, 80, 70, 50, TT_PADDED, TT_CONTIG, TT_PADDED, BIAS_ROW, 1, 1},
    {"baddbmm", TPU_DTYPE_F32, 3, 64, 64, 64, TT_TRANSPOSED, TT_CONTIG, TT_TRANSPOSED, BIAS_FULL,
     1, -1},
    {"bmm", TPU_DTYPE_F32, 4, 5, 6, 7, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"bmm", TPU_DTYPE_F32, 16, 6, 5, 4, TT_TRANSPOSED, TT_PADDED, TT_TRANSPOSED, 0, 0, 1},
    {"bmm", TPU_DTYPE_F64, 3, 7, 2, 5, TT_PADDED, TT_TRANSPOSED, TT_PADDED, 0, 0, 1},
    {"bmm", TPU_DTYPE_BF16, 5, 3, 4, 6, TT_CONTIG, TT_TRANSPOSED, TT_CONTIG, 0, 0, 1},
    {"bmm", TPU_DTYPE_F16, 2, 3, 4, 6, TT_TRANSPOSED, TT_CONTIG, TT_PADDED, 0, 0, 1},
    {"bmm", TPU_DTYPE_I16, 6, 3, 4, 5, TT_CONTIG, TT_TRANSPOSED, TT_CONTIG, 0, 0, 1},
    {"bmm", TPU_DTYPE_F32, 2, 70, 80, 60, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"bmm", TPU_DTYPE_F32, 0, 3, 4, 5, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"addmm", TPU_DTYPE_F32, 1, 5, 6, 4, TT_CONTIG, TT_CONTIG, TT_CONTIG, BIAS_FULL, 0.5, 2},
    {"addmm", TPU_DTYPE_F32, 1, 5, 6, 4, TT_TRANSPOSED, TT_CONTIG, TT_CONTIG, BIAS_ROW, 1, 1},
    {"addmm", TPU_DTYPE_F32, 1, 5, 6, 4, TT_CONTIG, TT_PADDED, TT_TRANSPOSED, BIAS_SCALAR, -2, 3},
    {"addmm", TPU_DTYPE_F32, 1, 5, 6, 4, TT_CONTIG, TT_CONTIG, TT_PADDED, BIAS_INPLACE, 2, 1},
    {"addmm", TPU_DTYPE_F32, 1, 5, 6, 4, TT_CONTIG, TT_CONTIG, TT_TRANSPOSED, BIAS_INPLACE, 1, 1},
    {"addmm", TPU_DTYPE_F32, 1, 5, 6, 4, TT_CONTIG, TT_CONTIG, TT_CONTIG, BIAS_FULL, 0, 1},
    {"addmm", TPU_DTYPE_F32, 1, 5, 6, 0, TT_CONTIG, TT_CONTIG, TT_CONTIG, BIAS_ROW, 2, 1},
    {"addmm", TPU_DTYPE_F64, 1, 3, 8, 5, TT_TRANSPOSED, TT_TRANSPOSED, TT_CONTIG, BIAS_ROW, 0.25, -1},
    {"addmm", TPU_DTYPE_BF16, 1, 4, 5, 6, TT_CONTIG, TT_CONTIG, TT_CONTIG, BIAS_FULL, 1, 0.5},
    {"addmm", TPU_DTYPE_F16, 1, 4, 5, 6, TT_CONTIG, TT_TRANSPOSED, TT_CONTIG, BIAS_INPLACE, 1, 1},
    {"addmm", TPU_DTYPE_I64, 1, 4, 5, 6, TT_CONTIG, TT_CONTIG, TT_PADDED, BIAS_ROW, 3, -2},
    {"addmm", TPU_DTYPE_I32, 1, 4, 5, 6, TT_PADDED, TT_CONTIG, TT_CONTIG, BIAS_INPLACE, 2, 2},
    {"baddbmm", TPU_DTYPE_F32, 3, 4, 5, 6, TT_CONTIG, TT_TRANSPOSED, TT_CONTIG, BIAS_FULL, 1, 1},
    {"baddbmm", TPU_DTYPE_F32, 3, 4, 5, 6, TT_CONTIG, TT_CONTIG, TT_CONTIG, BIAS_ROW, 0.5, 2},
    {"baddbmm", TPU_DTYPE_F64, 2, 4, 5, 6, TT_PADDED, TT_CONTIG, TT_CONTIG, BIAS_INPLACE, 2, 1},
    {"baddbmm", TPU_DTYPE_BF16, 2, 4, 5, 6, TT_CONTIG, TT_CONTIG, TT_TRANSPOSED, BIAS_SCALAR, 1, 1},
    {"baddbmm", TPU_DTYPE_I64, 3, 2, 3, 4, TT_TRANSPOSED, TT_CONTIG, TT_CONTIG, BIAS_FULL, 1, 3},
    {"mv", TPU_DTYPE_F32, 1, 7, 1, 5, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"mv", TPU_DTYPE_F32, 1, 7, 1, 5, TT_TRANSPOSED, TT_PADDED, TT_PADDED, 0, 0, 1},
    {"mv", TPU_DTYPE_F16, 1, 6, 1, 3, TT_PADDED, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"mv", TPU_DTYPE_I64, 1, 6, 1, 3, TT_TRANSPOSED, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"addmv", TPU_DTYPE_F32, 1, 7, 1, 5, TT_CONTIG, TT_CONTIG, TT_CONTIG, BIAS_FULL, 0.5, 2},
    {"addmv", TPU_DTYPE_F64, 1, 7, 1, 5, TT_TRANSPOSED, TT_CONTIG, TT_PADDED, BIAS_INPLACE, 1, 1},
    {"addmv", TPU_DTYPE_BF16, 1, 7, 1, 5, TT_CONTIG, TT_CONTIG, TT_CONTIG, BIAS_SCALAR, 1, 1},
    {"dot", TPU_DTYPE_F32, 1, 1, 1, 17, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"dot", TPU_DTYPE_F64, 1, 1, 1, 9, TT_PADDED, TT_PADDED, TT_CONTIG, 0, 0, 1},
    {"dot", TPU_DTYPE_BF16, 1, 1, 1, 9, TT_CONTIG, TT_PADDED, TT_CONTIG, 0, 0, 1},
    {"dot", TPU_DTYPE_I32, 1, 1, 1, 9, TT_PADDED, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"dot", TPU_DTYPE_F32, 1, 1, 1, 0, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"vdot", TPU_DTYPE_F64, 1, 1, 1, 13, TT_PADDED, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"vdot", TPU_DTYPE_I64, 1, 1, 1, 9, TT_CONTIG, TT_PADDED, TT_CONTIG, 0, 0, 1},
    /* bfloat16 on the matrix unit (where the CPU has one): linear layers,
     * attention-shaped batches, biases of every kind, transposed outputs */
    {"mm", TPU_DTYPE_BF16, 1, 64, 96, 128, TT_CONTIG, TT_TRANSPOSED, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_BF16, 1, 1, 300, 64, TT_CONTIG, TT_TRANSPOSED, TT_CONTIG, 0, 0, 1},
    {"addmm", TPU_DTYPE_BF16, 1, 33, 70, 48, TT_CONTIG, TT_TRANSPOSED, TT_CONTIG, BIAS_ROW, 1, 1},
    {"addmm", TPU_DTYPE_BF16, 1, 40, 50, 64, TT_TRANSPOSED, TT_CONTIG, TT_CONTIG, BIAS_FULL,
     0.5, 2},
    {"addmm", TPU_DTYPE_BF16, 1, 40, 50, 64, TT_CONTIG, TT_CONTIG, TT_PADDED, BIAS_SCALAR, -1, 1},
    {"baddbmm", TPU_DTYPE_BF16, 4, 16, 24, 40, TT_CONTIG, TT_TRANSPOSED, TT_CONTIG, BIAS_INPLACE,
     1, 0.125},
    {"bmm", TPU_DTYPE_BF16, 3, 20, 30, 40, TT_TRANSPOSED, TT_CONTIG, TT_TRANSPOSED, 0, 0, 1},
    {"bmm", TPU_DTYPE_BF16, 6, 17, 9, 33, TT_PADDED, TT_TRANSPOSED, TT_CONTIG, 0, 0, 1},
    {"mv", TPU_DTYPE_BF16, 1, 70, 1, 40, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"dot", TPU_DTYPE_BF16, 1, 1, 1, 100, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    /* half-type gemv (one row or column of C): both forms of the matrix,
     * tails of every length, broadcast and batched vectors */
    {"mm", TPU_DTYPE_F16, 1, 1, 1037, 301, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_BF16, 1, 1, 1037, 37, TT_PADDED, TT_TRANSPOSED, TT_PADDED, 0, 0, 1},
    {"mm", TPU_DTYPE_BF16, 1, 1, 600, 1, TT_CONTIG, TT_TRANSPOSED, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_F16, 1, 1, 600, 1, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"mm", TPU_DTYPE_BF16, 1, 530, 1, 45, TT_TRANSPOSED, TT_CONTIG, TT_TRANSPOSED, 0, 0, 1},
    {"mv", TPU_DTYPE_F16, 1, 600, 1, 45, TT_CONTIG, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"mv", TPU_DTYPE_BF16, 1, 530, 1, 20, TT_TRANSPOSED, TT_PADDED, TT_CONTIG, 0, 0, 1},
    {"addmv", TPU_DTYPE_BF16, 1, 513, 1, 70, TT_CONTIG, TT_CONTIG, TT_PADDED, BIAS_FULL, 0.5,
     2},
    {"addmm", TPU_DTYPE_F16, 1, 1, 700, 33, TT_CONTIG, TT_CONTIG, TT_CONTIG, BIAS_ROW, 1, -1},
    {"addmm", TPU_DTYPE_F16, 1, 1, 700, 64, TT_CONTIG, TT_TRANSPOSED, TT_CONTIG, BIAS_INPLACE,
     -1, 0.5},
    {"bmm", TPU_DTYPE_BF16, 6, 1, 700, 64, TT_CONTIG, TT_TRANSPOSED, TT_CONTIG, 0, 0, 1},
    {"bmm", TPU_DTYPE_F16, 3, 1, 64, 530, TT_PADDED, TT_CONTIG, TT_CONTIG, 0, 0, 1},
    {"baddbmm", TPU_DTYPE_BF16, 2, 1, 90, 17, TT_CONTIG, TT_CONTIG, TT_CONTIG, BIAS_SCALAR, 2,
     1},
    {"bmm", TPU_DTYPE_F16, 4, 70, 1, 9, TT_TRANSPOSED, TT_PADDED, TT_TRANSPOSED, 0, 0, 1},
};

/* Operand shapes of a case: A, B and the result. */
static void case_shapes(const mm_spec_t* s, const mm_case_t* c, int32_t nd[3],
                        int64_t sz[3][3]) {
  const int64_t a3[3] = {c->batch, c->m, c->k}, b3[3] = {c->batch, c->k, c->n};
  nd[0] = s->a_rank, nd[1] = s->b_rank;
  for (int32_t d = 0; d < s->a_rank; ++d) sz[0][d] = a3[3 - s->a_rank + d];
  for (int32_t d = 0; d < s->b_rank; ++d) sz[1][d] = b3[d + (s->b_rank == 3 ? 0 : 1)];
  if (s->a_rank == 3) {
    nd[2] = 3, sz[2][0] = c->batch, sz[2][1] = c->m, sz[2][2] = c->n;
  } else if (s->b_rank == 2) {
    nd[2] = 2, sz[2][0] = c->m, sz[2][1] = c->n;
  } else {
    nd[2] = s->a_rank - 1, sz[2][0] = c->m;
  }
}

/* Runs one case through the kernel and the reference; returns the worst
 * relative difference (INFINITY on a status failure). */
static double run_case(const mm_case_t* c) {
  const tpu_op_def_t* def = tt_def(c->op);
  if (!def) return INFINITY;
  const mm_spec_t* s = (const mm_spec_t*)def->impl;
  int32_t nd[3];
  int64_t sz[3][3];
  case_shapes(s, c, nd, sz);
  tt_t a = tt_make(c->dtype, nd[0], sz[0], c->a_layout);
  tt_t b = tt_make(c->dtype, nd[1], sz[1], c->b_layout);
  tt_t out = tt_make(c->dtype, nd[2], sz[2], c->c_layout);
  tt_t want = tt_make(c->dtype, nd[2], sz[2], TT_CONTIG);
  tt_fill_ints(&a.view, 1, -3, 3);
  tt_fill_ints(&b.view, 2, -3, 3);
  /* Garbage (NaN for floats) where beta == 0 must not leak in. */
  tt_fill_value(&out.view, tpu_dtype_is_floating(c->dtype) ? NAN : 77);
  tt_t bias = {0}, bias_copy = {0};
  if (s->has_bias) {
    int64_t row[1] = {sz[2][nd[2] - 1]};
    if (c->bias == BIAS_INPLACE) {
      bias = out;
      tt_fill_ints(&out.view, 3, -4, 4);
    } else {
      bias = c->bias == BIAS_FULL  ? tt_make(c->dtype, nd[2], sz[2], TT_PADDED)
             : c->bias == BIAS_ROW ? tt_make(c->dtype, 1, row, TT_PADDED)
                                   : tt_make(c->dtype, 0, row, TT_CONTIG);
      tt_fill_ints(&bias.view, 3, -4, 4);
    }
    bias_copy = tt_make(c->dtype, bias.view.ndim, bias.view.sizes, TT_CONTIG);
    for (int64_t i = 0; i < tpu_view_numel(&bias.view); ++i)
      tt_set(&bias_copy.view, i, tt_get(&bias.view, i));
  }
  tpu_value_t in[3];
  int32_t n = 0;
  if (s->has_bias) in[n++] = tt_value(&bias.view);
  in[n++] = tt_value(&a.view);
  in[n++] = tt_value(&b.view);
  tpu_attr_t attrs[2] = {tt_float(c->beta), tt_float(c->alpha)};
  if (!tpu_dtype_is_floating(c->dtype))
    attrs[0] = tt_int((int64_t)c->beta), attrs[1] = tt_int((int64_t)c->alpha);
  tpu_node_t node = {.op = tpu_op_lookup(c->op), .num_inputs = n, .num_outputs = 1,
                     .num_attrs = s->has_bias ? 2 : 0, .inputs = in, .outputs = &out.view};
  memcpy(node.attrs, attrs, sizeof(attrs));
  tpu_exec_ctx_t ctx = {0};
  double worst = INFINITY;
  tpu_status_t st = def->check(def, &node);
  if (st == TPU_OK) st = def->kernel(def, &node, &ctx);
  if (s->has_bias) in[0] = tt_value(&bias_copy.view);
  node.outputs = &want.view;
  if (st == TPU_OK) st = tpu_matmul_reference(def, &node);
  if (st == TPU_OK) {
    worst = tt_max_rel_diff(&out.view, &want.view);
  } else {
    tpu_test_fail(__FILE__, __LINE__, "%s: %s", c->op, tpu_status_message(st));
    tpu_status_free(st);
  }
  if (s->has_bias && c->bias != BIAS_INPLACE) tt_free(&bias);
  if (s->has_bias) tt_free(&bias_copy);
  tt_free(&a);
  tt_free(&b);
  tt_free(&out);
  tt_free(&want);
  return worst;
}

static void check_cases(int gemv_level) {
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) {
    const mm_case_t* c = &k_cases[i];
    /* Inputs are small integers: sums are exact in float32; a half result
     * is the exact value rounded once, like the reference's. */
    double tol = c->dtype == TPU_DTYPE_BF16 ? 1e-2 : c->dtype == TPU_DTYPE_F16 ? 1e-3 : 1e-6;
    double worst = run_case(c);
    if (!(worst <= tol))
      tpu_test_fail(__FILE__, __LINE__,
                    "case %zu (%s %s %lldx%lldx%lldx%lld, gemv level %d): diff %g", i, c->op,
                    tpu_dtype_name(c->dtype), (long long)c->batch, (long long)c->m,
                    (long long)c->n, (long long)c->k, gemv_level, worst);
  }
}

/* Every case, with the half-type gemv's kernels at each level this CPU has
 * (AVX-512, AVX2, portable). */
TEST(matmul_matches_reference) {
  int best = tpu_mm_gemv_set_level(-1);
  for (int level = best; level >= 0; --level) check_cases(tpu_mm_gemv_set_level(level));
  tpu_mm_gemv_set_level(-1);
}

/* Where the CPU has AVX512-BF16 or AMX, bfloat16 GEMMs run on the matrix
 * unit (and none is declined for a plain layout); elsewhere (or with
 * TORCH_TPU_MXU=0) none is offered to it and the float32 path gives the same
 * results. */
/* bfloat16, and float16 where the CPU has AVX512-FP16, on the unit; both
 * match the reference either way. */
TEST(matmul_half_types_run_on_the_matrix_unit) {
  const tpu_dtype_t dtypes[2] = {TPU_DTYPE_BF16, TPU_DTYPE_F16};
  for (int d = 0; d < 2; ++d) {
    tpu_mxu_info_t before, after;
    tpu_mxu_get_info(&before);
    const mm_case_t c = {"addmm", dtypes[d], 1, 48, 64, 96, TT_CONTIG, TT_TRANSPOSED,
                         TT_CONTIG, BIAS_ROW, 1, 1};
    double worst = run_case(&c);
    tpu_mxu_get_info(&after);
    CHECK(worst <= (dtypes[d] == TPU_DTYPE_BF16 ? 1e-2 : 2e-3));
    CHECK(strlen(after.isa) > 0 && strlen(after.library) > 0);
    if (dtypes[d] == TPU_DTYPE_BF16 ? after.bfloat16 : after.float16) {
      CHECK(after.gemms == before.gemms + 1);
      CHECK(after.declined == before.declined);
    } else {
      CHECK(after.gemms == before.gemms && after.declined == before.declined);
    }
  }
}

static tpu_node_t two_input_node(const char* op, tpu_value_t* in, tpu_view_t* out) {
  tpu_node_t node = {.op = tpu_op_lookup(op), .num_inputs = 2, .num_outputs = 1, .inputs = in,
                     .outputs = out};
  return node;
}

TEST(matmul_shape_errors_and_checks) {
  const tpu_op_def_t* mm = tt_def("mm");
  const tpu_op_def_t* bmm = tt_def("bmm");
  if (!mm || !bmm) return;
  int64_t s23[2] = {2, 3}, s45[2] = {4, 5}, s35[2] = {3, 5};
  tt_t a = tt_make(TPU_DTYPE_F32, 2, s23, TT_CONTIG), b = tt_make(TPU_DTYPE_F32, 2, s45, 0);
  tt_t c = tt_make(TPU_DTYPE_F32, 2, s35, TT_CONTIG), d = tt_make(TPU_DTYPE_F64, 2, s35, 0);
  tt_t e = tt_make(TPU_DTYPE_BOOL, 2, s23, TT_CONTIG), f = tt_make(TPU_DTYPE_BOOL, 2, s35, 0);
  tpu_value_t in[2] = {tt_value(&a.view), tt_value(&b.view)};
  tpu_view_t outs[1];
  tpu_node_t node = two_input_node("mm", in, outs);
  tpu_status_t st = mm->infer(mm, &node, outs);
  CHECK(tpu_status_code(st) == TPU_CODE_INVALID_ARGUMENT);
  CHECK(st && strstr(tpu_status_message(st), "cannot be multiplied (2x3 and 4x5)"));
  tpu_status_free(st);
  in[1] = tt_value(&c.view);
  CHECK_OK(mm->infer(mm, &node, outs));
  CHECK(outs[0].ndim == 2 && outs[0].sizes[0] == 2 && outs[0].sizes[1] == 5);
  CHECK(outs[0].dtype == TPU_DTYPE_F32 && outs[0].strides[0] == 5 && outs[0].strides[1] == 1);
  CHECK_OK(mm->check(mm, &node));
  in[1] = tt_value(&d.view); /* mixed dtypes: PyTorch's CPU kernel reports the error */
  CHECK_CODE(mm->check(mm, &node), TPU_CODE_UNIMPLEMENTED);
  in[0] = tt_value(&e.view), in[1] = tt_value(&f.view); /* bool is not run natively */
  CHECK_CODE(mm->check(mm, &node), TPU_CODE_UNIMPLEMENTED);
  node = two_input_node("bmm", in, outs);
  in[0] = tt_value(&a.view), in[1] = tt_value(&c.view);
  CHECK_CODE(bmm->infer(bmm, &node, outs), TPU_CODE_INVALID_ARGUMENT);
  /* out of the wrong dtype for the kernel */
  node = two_input_node("mm", in, &d.view);
  tpu_exec_ctx_t ctx = {0};
  CHECK_CODE(mm->kernel(mm, &node, &ctx), TPU_CODE_INVALID_ARGUMENT);
  tt_free(&a), tt_free(&b), tt_free(&c), tt_free(&d), tt_free(&e), tt_free(&f);
}

TEST(matmul_rows_name_their_overloads) {
  const char* want[][2] = {{"mm", "mm.out"}, {"addmm", "addmm_"}, {"baddbmm", "baddbmm.out"},
                           {"addmv", "addmv_"}, {"dot", "dot.out"}, {"bmm", "bmm.out"},
                           {"mv", "mv.out"}};
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); ++i) {
    const tpu_op_def_t* def = tt_def(want[i][0]);
    CHECK(def && strstr(def->aten, want[i][1]));
    CHECK(def && tpu_spec_count(def->outputs) == 1);
  }
}

/* Worst |got - want| over max |want|, want computed in double. */
static double precision_error(int level, bool addmm, int64_t* out_gemms) {
  const int64_t m = 48, k = 200, n = 40;
  int64_t as[2] = {m, k}, bs[2] = {k, n}, cs[2] = {m, n}, bias_s[1] = {n};
  tt_t a = tt_make(TPU_DTYPE_F32, 2, as, TT_CONTIG), b = tt_make(TPU_DTYPE_F32, 2, bs, TT_TRANSPOSED);
  tt_t c = tt_make(TPU_DTYPE_F32, 2, cs, TT_CONTIG), bias = tt_make(TPU_DTYPE_F32, 1, bias_s, TT_CONTIG);
  uint64_t seed = 99;
  for (int64_t i = 0; i < m * k; ++i) tt_set(&a.view, i, (double)tt_rand_int(&seed, -1000000, 1000000) / 1e6);
  for (int64_t i = 0; i < k * n; ++i) tt_set(&b.view, i, (double)tt_rand_int(&seed, -1000000, 1000000) / 1e6);
  for (int64_t i = 0; i < n; ++i) tt_set(&bias.view, i, (double)tt_rand_int(&seed, -1000, 1000) / 7e2);
  const double beta = 0.5, alpha = 2.0;
  tpu_value_t in[3];
  int32_t ni = 0;
  if (addmm) in[ni++] = tt_value(&bias.view);
  in[ni++] = tt_value(&a.view);
  in[ni++] = tt_value(&b.view);
  tpu_attr_t attrs[3] = {tt_float(beta), tt_float(alpha), tt_int(level)};
  tpu_node_t node = addmm ? tt_node(in, ni, &c.view, 1, attrs, 3) : tt_node(in, ni, &c.view, 1, &attrs[2], 1);
  const char* op = addmm ? "addmm" : "mm";
  node.op = tpu_op_lookup(op);
  const tpu_op_def_t* def = tt_def(op);
  tpu_mxu_info_t before, after;
  tpu_mxu_get_info(&before);
  CHECK_CODE(def->check(def, &node), TPU_CODE_OK);
  CHECK_CODE(tt_run(def->kernel, def, &node), TPU_CODE_OK);
  tpu_mxu_get_info(&after);
  *out_gemms = (int64_t)(after.gemms - before.gemms);
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t kk = 0; kk < k; ++kk) want += tt_get(&a.view, i * k + kk) * tt_get(&b.view, kk * n + j);
      if (addmm) want = alpha * want + beta * tt_get(&bias.view, j);
      double d = fabs(tt_get(&c.view, i * n + j) - want);
      worst = d > worst ? d : worst;
      scale = fabs(want) > scale ? fabs(want) : scale;
    }
  tt_free(&a), tt_free(&b), tt_free(&c), tt_free(&bias);
  return worst / scale;
}

/* torch.set_float32_matmul_precision through the node's "matmul_precision":
 * highest stays float32 (OpenBLAS, or one float32 GEMM on the unit on
 * AVX-512 CPUs); high is bfloat16x3 on the matrix unit
 * (three GEMMs, error near float32's), medium one bfloat16 pass (one GEMM,
 * error near bfloat16's). Without a unit every level is float32. */
TEST(matmul_float32_precision_levels) {
  for (int addmm = 0; addmm < 2; ++addmm) {
    int64_t g0, g1, g2;
    double e0 = precision_error(MM_PRECISION_HIGHEST, addmm, &g0);
    double e1 = precision_error(MM_PRECISION_HIGH, addmm, &g1);
    double e2 = precision_error(MM_PRECISION_MEDIUM, addmm, &g2);
    tpu_mxu_info_t info;
    tpu_mxu_get_info(&info);
    CHECK(g0 == (info.float32 ? 1 : 0) && e0 < 1e-6);
    if (info.bfloat16) {
      CHECK(g1 == 3 && g2 == 1);
      CHECK(e1 < 2e-5);          /* measured about 2e-6 */
      CHECK(e2 < 1e-2);          /* measured about 2e-3 */
      CHECK(e2 > 20 * e1);       /* medium really is one bfloat16 pass */
      CHECK(e1 > e0 || e1 < 1e-6);
    } else {
      CHECK(g1 == 0 && g2 == 0 && e1 < 1e-6 && e2 < 1e-6);
    }
    if (!(e1 < 2e-5 && e2 < 1e-2))
      tpu_test_fail(__FILE__, __LINE__, "errors (addmm %d): highest %g high %g medium %g", addmm,
                    e0, e1, e2);
  }
}
