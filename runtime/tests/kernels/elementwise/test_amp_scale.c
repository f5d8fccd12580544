/* test_amp_scale.c — the amp_scale family (GradScaler's ops).
 *
 * unscale_cases: (dtype, elements, inv_scale, where a non-finite value
 * sits) run one gradient through amp_unscale's kernel and its reference on
 * copies and compare the gradient and found_inf: every floating dtype, sizes
 * below, at and past the half types' chunk and big enough to split over
 * threads, no elements, inv_scale 1 (nothing written). update_scale pins
 * the GradScaler state machine by hand; both tests check what falls back.
 */
#include <math.h>
#include <string.h>

#include "kernels/elementwise/amp_scale.h"

#include "kernel_test_util.h"

typedef struct unscale_case {
  tpu_dtype_t dtype;
  int64_t numel;
  double inv_scale;
  int64_t bad_at; /* -1: every value finite */
  double bad;     /* the value put there: inf, -inf or nan */
} unscale_case_t;

static const unscale_case_t k_cases[] = {
    {TPU_DTYPE_F32, 7, 1.0 / 512, -1, 0},
    {TPU_DTYPE_F32, 100003, 1.0 / 65536, 99999, INFINITY},
    {TPU_DTYPE_F64, 1000, 0.25, 3, NAN},
    {TPU_DTYPE_F16, 1030, 1.0 / 1024, 1029, -INFINITY},
    {TPU_DTYPE_BF16, 70001, 1.0 / 8, -1, 0},
    {TPU_DTYPE_BF16, 511, 1.0, 0, NAN},
    {TPU_DTYPE_F32, 0, 0.5, -1, 0},
};

static void run_case(int index, const unscale_case_t* c) {
  const tpu_op_def_t* def = tt_def("amp_unscale");
  if (!def) return;
  char what[96];
  snprintf(what, sizeof(what), "case %d (%s, %lld)", index, tpu_dtype_name(c->dtype),
           (long long)c->numel);
  int64_t n = c->numel, one = 1;
  tt_t grad[2], found[2], inv = tt_make(TPU_DTYPE_F32, 1, &one, TT_CONTIG);
  tt_fill_value(&inv.view, c->inv_scale);
  for (int k = 0; k < 2; ++k) {
    grad[k] = tt_make(c->dtype, 1, &n, TT_CONTIG);
    found[k] = tt_make(TPU_DTYPE_F32, 1, &one, TT_CONTIG);
    if (k == 0) tt_fill(&grad[0].view, -1000.0, 1000.0, 0);
    else view_copy(&grad[1].view, &grad[0].view);
    if (c->bad_at >= 0) tt_set(&grad[k].view, c->bad_at, c->bad);
  }
  for (int k = 0; k < 2; ++k) {
    tpu_value_t in[3] = {tt_value(&grad[k].view), tt_value(&found[k].view), tt_value(&inv.view)};
    tpu_node_t node = tt_node(in, 3, NULL, 0, NULL, 0);
    CHECK_OK(def->check(def, &node));
    CHECK_OK(tt_run(k == 0 ? def->kernel : tpu_amp_unscale_reference, def, &node));
  }
  tt_compare(what, &grad[0].view, &grad[1].view, tt_tol(c->dtype));
  CHECK_NEAR(tt_get(&found[0].view, 0), c->bad_at >= 0 ? 1.0 : 0.0, 0);
  CHECK_NEAR(tt_get(&found[1].view, 0), tt_get(&found[0].view, 0), 0);
  for (int k = 0; k < 2; ++k) {
    tt_free(&grad[k]);
    tt_free(&found[k]);
  }
  tt_free(&inv);
}

TEST(unscale_cases) {
  for (int i = 0; i < (int)(sizeof(k_cases) / sizeof(k_cases[0])); ++i) run_case(i, &k_cases[i]);
}

TEST(unscale_semantics) {
  const tpu_op_def_t* def = tt_def("amp_unscale");
  if (!def) return;
  int64_t one = 1, three = 3, six = 6;
  tt_t g = tt_make(TPU_DTYPE_F32, 1, &three, TT_CONTIG);
  tt_t found = tt_make(TPU_DTYPE_F32, 1, &one, TT_CONTIG);
  tt_t inv = tt_make(TPU_DTYPE_F32, 1, &one, TT_CONTIG);
  tt_set(&g.view, 0, 2.0);
  tt_set(&g.view, 1, -4.0);
  tt_set(&g.view, 2, 8.0);
  tt_fill_value(&inv.view, 0.5);
  tt_fill_value(&found.view, 1.0); /* an earlier gradient's overflow stays noted */
  tpu_value_t in[3] = {tt_value(&g.view), tt_value(&found.view), tt_value(&inv.view)};
  tpu_node_t node = tt_node(in, 3, NULL, 0, NULL, 0);
  CHECK_OK(tt_run(def->kernel, def, &node));
  CHECK_NEAR(tt_get(&g.view, 0), 1.0, 0);
  CHECK_NEAR(tt_get(&g.view, 1), -2.0, 0);
  CHECK_NEAR(tt_get(&g.view, 2), 4.0, 0);
  CHECK_NEAR(tt_get(&found.view, 0), 1.0, 0);

  /* What falls back: found_inf or inv_scale of another dtype or size, an
   * integer or non-contiguous gradient, a gradient aliasing found_inf. */
  tt_t f64 = tt_make(TPU_DTYPE_F64, 1, &one, TT_CONTIG), two = tt_make(TPU_DTYPE_F32, 1, &three, TT_CONTIG);
  tt_t ints = tt_make(TPU_DTYPE_I32, 1, &three, TT_CONTIG), gaps = tt_make(TPU_DTYPE_F32, 1, &six, TT_GAPS);
  in[1] = tt_value(&f64.view);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  in[1] = tt_value(&found.view);
  in[2] = tt_value(&two.view);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  in[2] = tt_value(&inv.view);
  in[0] = tt_value(&ints.view);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  in[0] = tt_value(&gaps.view);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  in[0] = tt_value(&found.view);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  in[0] = tt_value(&g.view);
  CHECK_OK(def->check(def, &node));
  tt_free(&g);
  tt_free(&found);
  tt_free(&inv);
  tt_free(&f64);
  tt_free(&two);
  tt_free(&ints);
  tt_free(&gaps);
}

/* One _amp_update_scale_ call: scale, tracker and found_inf in, both back. */
static void update(const tpu_op_def_t* def, float* scale, int32_t* tracker, float found_inf,
                   int64_t interval) {
  int64_t one = 1;
  tt_t s = tt_make(TPU_DTYPE_F32, 1, &one, TT_CONTIG), t = tt_make(TPU_DTYPE_I32, 1, &one, TT_CONTIG);
  tt_t f = tt_make(TPU_DTYPE_F32, 1, &one, TT_CONTIG);
  tt_fill_value(&s.view, *scale);
  tt_fill_value(&t.view, *tracker);
  tt_fill_value(&f.view, found_inf);
  tpu_value_t in[3] = {tt_value(&s.view), tt_value(&t.view), tt_value(&f.view)};
  tpu_attr_t attrs[3] = {tt_float(2.0), tt_float(0.5), tt_int(interval)};
  tpu_view_t out = s.view;
  tpu_node_t node = tt_node(in, 3, &out, 1, attrs, 3);
  CHECK_OK(def->check(def, &node));
  CHECK_OK(tt_run(def->kernel, def, &node));
  *scale = (float)tt_get(&s.view, 0);
  *tracker = (int32_t)tt_get(&t.view, 0);
  tt_free(&s);
  tt_free(&t);
  tt_free(&f);
}

TEST(update_scale) {
  const tpu_op_def_t* def = tt_def("amp_update_scale");
  if (!def) return;
  float scale = 65536.0f;
  int32_t tracker = 0;
  update(def, &scale, &tracker, 0.0f, 3); /* counts on */
  CHECK(scale == 65536.0f && tracker == 1);
  update(def, &scale, &tracker, 0.0f, 3);
  CHECK(scale == 65536.0f && tracker == 2);
  update(def, &scale, &tracker, 0.0f, 3); /* the interval: grows, resets */
  CHECK(scale == 131072.0f && tracker == 0);
  update(def, &scale, &tracker, 1.0f, 3); /* an overflow: backs off, resets */
  CHECK(scale == 65536.0f && tracker == 0);
  scale = 3e38f; /* growing would overflow float32: the scale stays */
  tracker = 1;
  update(def, &scale, &tracker, 0.0f, 2);
  CHECK(scale == 3e38f && tracker == 0);

  /* What falls back: a float64 scale, a float32 tracker. */
  int64_t one = 1;
  tt_t d = tt_make(TPU_DTYPE_F64, 1, &one, TT_CONTIG), f = tt_make(TPU_DTYPE_F32, 1, &one, TT_CONTIG);
  tpu_value_t in[3] = {tt_value(&d.view), tt_value(&f.view), tt_value(&f.view)};
  tpu_attr_t attrs[3] = {tt_float(2.0), tt_float(0.5), tt_int(2)};
  tpu_view_t out = d.view;
  tpu_node_t node = tt_node(in, 3, &out, 1, attrs, 3);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  in[0] = tt_value(&f.view);
  out = f.view;
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&d);
  tt_free(&f);
}
