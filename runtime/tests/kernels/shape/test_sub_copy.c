/* test_sub_copy.c — the sub_copy family: channel_shuffle against its
 * reference (dtypes, odd shapes, strided inputs and outputs, arguments that
 * fall back) and narrow_copy against element-by-element reads. */
#include <string.h>

#include "kernel_test_util.h"

tpu_status_t tpu_channel_shuffle_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                           tpu_exec_ctx_t* ctx);

typedef struct cs_case {
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t sizes[5];
  int64_t groups;
  tt_layout_t in_layout, out_layout;
} cs_case_t;

static const cs_case_t k_cases[] = {
    {TPU_DTYPE_F32, 4, {2, 6, 3, 5}, 3, TT_CONTIG, TT_CONTIG},
    {TPU_DTYPE_F64, 3, {3, 8, 7}, 2, TT_TRANSPOSED, TT_GAPS},
    {TPU_DTYPE_BF16, 4, {1, 12, 1, 9}, 4, TT_REVERSED, TT_CONTIG},
    {TPU_DTYPE_F16, 5, {2, 4, 2, 3, 3}, 4, TT_PADDED, TT_CONTIG},
    {TPU_DTYPE_I64, 3, {5, 9, 11}, 3, TT_CONTIG, TT_REVERSED},
    {TPU_DTYPE_U8, 4, {4, 16, 33, 17}, 8, TT_GAPS, TT_CONTIG},
    {TPU_DTYPE_BOOL, 3, {2, 6, 4}, 6, TT_CONTIG, TT_CONTIG},
    {TPU_DTYPE_I32, 3, {0, 6, 4}, 2, TT_CONTIG, TT_CONTIG},
};

TEST(channel_shuffle_cases) {
  const tpu_op_def_t* def = tt_def("channel_shuffle");
  if (!def) return;
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) {
    const cs_case_t* c = &k_cases[i];
    char what[64];
    snprintf(what, sizeof(what), "channel_shuffle case %d (%s)", (int)i, tpu_dtype_name(c->dtype));
    tt_t x = tt_make(c->dtype, c->ndim, c->sizes, c->in_layout);
    tt_fill(&x.view, -50, 50, 0);
    tpu_value_t in[1] = {tt_value(&x.view)};
    tpu_attr_t attrs[1] = {tt_int(c->groups)};
    tpu_view_t shape;
    tpu_node_t node = tt_node(in, 1, NULL, 0, attrs, 1);
    CHECK_OK(def->check(def, &node));
    CHECK_OK(def->infer(def, &node, &shape));
    tt_t got = tt_like(&shape, c->out_layout), want = tt_like(&shape, TT_CONTIG);
    node.num_outputs = 1;
    node.outputs = &got.view;
    CHECK_OK(tt_run(def->kernel, def, &node));
    node.outputs = &want.view;
    CHECK_OK(tt_run(tpu_channel_shuffle_reference, def, &node));
    tt_compare(what, &got.view, &want.view, 0.0);
    tt_free(&got);
    tt_free(&want);
    tt_free(&x);
  }
}

TEST(channel_shuffle_semantics) {
  const tpu_op_def_t* def = tt_def("channel_shuffle");
  if (!def) return;
  /* [1, 6, 1] with groups 2: channels 0 3 1 4 2 5. */
  int64_t s[3] = {1, 6, 1};
  tt_t x = tt_make(TPU_DTYPE_F32, 3, s, TT_CONTIG), o = tt_make(TPU_DTYPE_F32, 3, s, TT_CONTIG);
  for (int i = 0; i < 6; ++i) tt_set(&x.view, i, i);
  tpu_value_t in[1] = {tt_value(&x.view)};
  tpu_attr_t attrs[1] = {tt_int(2)};
  tpu_node_t node = tt_node(in, 1, &o.view, 1, attrs, 1);
  CHECK_OK(tt_run(def->kernel, def, &node));
  const double want[6] = {0, 3, 1, 4, 2, 5};
  for (int i = 0; i < 6; ++i) CHECK(tt_get(&o.view, i) == want[i]);
  attrs[0] = tt_int(4); /* 6 channels do not split into 4 groups */
  node = tt_node(in, 1, NULL, 0, attrs, 1);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  attrs[0] = tt_int(0);
  node = tt_node(in, 1, NULL, 0, attrs, 1);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&x);
  tt_free(&o);
}

TEST(narrow_copy_cases) {
  const tpu_op_def_t* def = tt_def("narrow_copy");
  if (!def) return;
  /* (layout, dim, start, length) over a [4, 7, 5] tensor, several dtypes. */
  const struct { tt_layout_t layout; int64_t dim, start, length; tpu_dtype_t dt; } cases[] = {
      {TT_CONTIG, 1, 2, 3, TPU_DTYPE_F32},   {TT_TRANSPOSED, -1, -3, 2, TPU_DTYPE_F64},
      {TT_REVERSED, 0, 0, 4, TPU_DTYPE_I16}, {TT_GAPS, 2, 5, 0, TPU_DTYPE_BF16},
      {TT_PADDED, 1, 6, 1, TPU_DTYPE_BOOL},
  };
  int64_t s[3] = {4, 7, 5};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    tt_t x = tt_make(cases[i].dt, 3, s, cases[i].layout);
    tt_fill(&x.view, -9, 9, 0);
    tpu_value_t in[1] = {tt_value(&x.view)};
    tpu_attr_t attrs[3] = {tt_int(cases[i].dim), tt_int(cases[i].start), tt_int(cases[i].length)};
    tpu_view_t shape;
    tpu_node_t node = tt_node(in, 1, NULL, 0, attrs, 3);
    CHECK_OK(def->check(def, &node));
    CHECK_OK(def->infer(def, &node, &shape));
    tt_t o = tt_like(&shape, TT_GAPS);
    node.num_outputs = 1;
    node.outputs = &o.view;
    CHECK_OK(tt_run(def->kernel, def, &node));
    int32_t d = (int32_t)(cases[i].dim < 0 ? cases[i].dim + 3 : cases[i].dim);
    int64_t st = cases[i].start < 0 ? cases[i].start + s[d] : cases[i].start;
    int64_t n = tpu_view_numel(&o.view);
    for (int64_t k = 0; k < n; ++k) { /* o's logical index k -> x's index */
      int64_t idx[3], rem = k;
      for (int32_t e = 2; e >= 0; --e) {
        idx[e] = rem % o.view.sizes[e];
        rem /= o.view.sizes[e];
      }
      idx[d] += st;
      CHECK(tt_get(&o.view, k) == tt_get(&x.view, (idx[0] * s[1] + idx[1]) * s[2] + idx[2]));
    }
    tt_free(&o);
    tt_free(&x);
  }
  /* Arguments PyTorch rejects fall back. */
  tt_t x = tt_make(TPU_DTYPE_F32, 3, s, TT_CONTIG);
  tpu_value_t in[1] = {tt_value(&x.view)};
  const int64_t bad[4][3] = {{3, 0, 1}, {-4, 0, 1}, {1, 8, 0}, {1, 3, 5}};
  for (int i = 0; i < 4; ++i) {
    tpu_attr_t attrs[3] = {tt_int(bad[i][0]), tt_int(bad[i][1]), tt_int(bad[i][2])};
    tpu_node_t node = tt_node(in, 1, NULL, 0, attrs, 3);
    CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  }
  tt_free(&x);
}
