/* test_upsample.c — the upsample family on exact cases, over layouts and dtypes:
 *   - linear modes (align_corners) reproduce a linear ramp exactly;
 *   - nearest 2x copies input[o / 2]; nearest-exact 3x reads input[o / 3];
 *   - backward conserves the sum of grad_output (weights sum to one);
 *   - bad arguments fall back.
 */
#include "kernel_test_util.h"

typedef struct up_case {
  const char* op;
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t in[5];
  int64_t out[3];
  tt_layout_t layout;
} up_case_t;

static const up_case_t k_cases[] = {
    {"upsample_bilinear2d", TPU_DTYPE_F32, 4, {2, 3, 4, 5}, {7, 9}, TT_CONTIG},
    {"upsample_bilinear2d", TPU_DTYPE_F64, 4, {2, 3, 4, 5}, {3, 2}, TT_REVERSED},
    {"upsample_linear1d", TPU_DTYPE_F64, 3, {2, 3, 6}, {11}, TT_GAPS},
    {"upsample_trilinear3d", TPU_DTYPE_F64, 5, {1, 2, 3, 4, 5}, {5, 3, 8}, TT_PADDED},
};

/* value of a linear ramp at spatial coordinates (last k dims) */
static double ramp(const double* c, int k) {
  double v = 0.0;
  for (int d = 0; d < k; ++d) v = v * 10.0 + c[d];
  return v;
}

static void run_case(int index, const up_case_t* c) {
  const tpu_op_def_t* def = tt_def(c->op);
  if (!def) return;
  int k = c->ndim - 2;
  tt_t x = tt_make(c->dtype, c->ndim, c->in, c->layout);
  int64_t n = tpu_view_numel(&x.view);
  for (int64_t i = 0; i < n; ++i) {
    double co[3];
    int64_t r = i;
    for (int d = k - 1; d >= 0; --d) {
      co[d] = (double)(r % c->in[2 + d]);
      r /= c->in[2 + d];
    }
    tt_set(&x.view, i, ramp(co, k));
  }
  tpu_value_t in[1] = {tt_value(&x.view)};
  tpu_attr_t attrs[7] = {tt_ints(k, c->out), tt_none(), tt_bool(true), tt_none(),
                         tt_none(), tt_none(), tt_none()};
  tpu_node_t node = tt_node(in, 1, NULL, 0, attrs, 7);
  tpu_view_t shape;
  CHECK_OK(def->check(def, &node));
  CHECK_OK(def->infer(def, &node, &shape));
  tt_t y = tt_like(&shape, TT_GAPS);
  node.outputs = &y.view;
  node.num_outputs = 1;
  CHECK_OK(tt_run(def->kernel, def, &node));
  int bad = 0;
  for (int64_t i = 0; i < tpu_view_numel(&y.view); ++i) {
    double co[3];
    int64_t r = i;
    for (int d = k - 1; d >= 0; --d) {
      int64_t o = r % c->out[d], isz = c->in[2 + d], osz = c->out[d];
      co[d] = osz > 1 ? (double)o * (double)(isz - 1) / (double)(osz - 1) : 0.0;
      r /= c->out[d];
    }
    double want = ramp(co, k), got = tt_get(&y.view, i);
    if (!(fabs(got - want) <= 1e-4 * (1 + fabs(want))) && bad++ < 3)
      tpu_test_fail(__FILE__, __LINE__, "case %d element %lld: got %g want %g", index,
                    (long long)i, got, want);
  }
  /* Backward conserves the sum of grad_output. */
  char bname[64];
  snprintf(bname, sizeof(bname), "%s_backward", c->op);
  const tpu_op_def_t* bwd = tt_def(bname);
  if (bwd) {
    tt_fill(&y.view, -1, 1, 0);
    double total = 0.0;
    for (int64_t i = 0; i < tpu_view_numel(&y.view); ++i) total += tt_get(&y.view, i);
    tpu_value_t bin[1] = {tt_value(&y.view)};
    tpu_attr_t battrs[7] = {tt_ints(k, c->out), tt_ints(c->ndim, c->in), tt_bool(true),
                            tt_none(), tt_none(), tt_none(), tt_none()};
    tpu_node_t bnode = tt_node(bin, 1, NULL, 0, battrs, 7);
    tpu_view_t bshape;
    CHECK_OK(bwd->infer(bwd, &bnode, &bshape));
    tt_t gi = tt_like(&bshape, c->layout == TT_PADDED ? TT_PADDED : TT_CONTIG);
    bnode.outputs = &gi.view;
    bnode.num_outputs = 1;
    CHECK_OK(tt_run(bwd->kernel, bwd, &bnode));
    double sum = 0.0;
    for (int64_t i = 0; i < tpu_view_numel(&gi.view); ++i) sum += tt_get(&gi.view, i);
    CHECK_NEAR(sum, total, 1e-3 * (1 + fabs(total)));
    tt_free(&gi);
  }
  tt_free(&x);
  tt_free(&y);
}

TEST(upsample_cases) {
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) run_case((int)i, &k_cases[i]);
}

TEST(upsample_nearest) {
  const tpu_op_def_t* def = tt_def("upsample_nearest2d");
  const tpu_op_def_t* ex = tt_def("upsample_nearest_exact1d");
  if (!def || !ex) return;
  int64_t s[4] = {1, 2, 3, 4}, o[2] = {6, 8};
  tt_t x = tt_make(TPU_DTYPE_U8, 4, s, TT_TRANSPOSED);
  for (int64_t i = 0; i < 24; ++i) tt_set(&x.view, i, (double)i);
  tpu_value_t in[1] = {tt_value(&x.view)};
  tpu_attr_t attrs[7] = {tt_ints(2, o), tt_none(), tt_none(), tt_none(),
                         tt_none(), tt_none(), tt_none()};
  tpu_node_t node = tt_node(in, 1, NULL, 0, attrs, 7);
  tpu_view_t shape;
  CHECK_OK(def->infer(def, &node, &shape));
  tt_t y = tt_like(&shape, TT_CONTIG);
  node.outputs = &y.view;
  node.num_outputs = 1;
  CHECK_OK(tt_run(def->kernel, def, &node));
  for (int64_t i = 0; i < 96; ++i) {
    int64_t c = i / 48, h = (i / 8) % 6, w = i % 8;
    CHECK_NEAR(tt_get(&y.view, i), (double)(c * 12 + (h / 2) * 4 + w / 2), 0);
  }
  tt_free(&y);
  /* nearest-exact 1d, 3x: floor((o + 0.5) / 3). */
  int64_t s1[3] = {1, 1, 4}, o1[1] = {12};
  tt_t x1 = tt_make(TPU_DTYPE_F32, 3, s1, TT_CONTIG);
  for (int64_t i = 0; i < 4; ++i) tt_set(&x1.view, i, (double)i);
  in[0] = tt_value(&x1.view);
  attrs[0] = tt_ints(1, o1);
  node = tt_node(in, 1, NULL, 0, attrs, 7);
  CHECK_OK(ex->infer(ex, &node, &shape));
  tt_t y1 = tt_like(&shape, TT_CONTIG);
  node.outputs = &y1.view;
  node.num_outputs = 1;
  CHECK_OK(tt_run(ex->kernel, ex, &node));
  for (int64_t i = 0; i < 12; ++i) CHECK_NEAR(tt_get(&y1.view, i), (double)(i / 3), 0);
  /* Wrong ranks, integer linear inputs and empty sizes fall back. */
  const tpu_op_def_t* bil = tt_def("upsample_bilinear2d");
  tt_t xi = tt_make(TPU_DTYPE_I32, 4, s, TT_CONTIG);
  in[0] = tt_value(&xi.view);
  attrs[0] = tt_ints(2, o);
  node = tt_node(in, 1, NULL, 0, attrs, 7);
  CHECK_CODE(bil->check(bil, &node), TPU_CODE_UNIMPLEMENTED);
  in[0] = tt_value(&x1.view);
  CHECK_CODE(bil->check(bil, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&xi);
  tt_free(&x1);
  tt_free(&y1);
  tt_free(&x);
}

TEST(upsample_antialias_identity) {
  /* Same input and output size: the antialiasing filters reduce to the identity. */
  const char* names[2] = {"upsample_bilinear2d_aa", "upsample_bicubic2d_aa"};
  int64_t s[4] = {2, 3, 5, 6}, o[2] = {5, 6};
  for (int k = 0; k < 2; ++k) {
    const tpu_op_def_t* def = tt_def(names[k]);
    if (!def) return;
    tt_t x = tt_make(TPU_DTYPE_F64, 4, s, k ? TT_REVERSED : TT_GAPS);
    tt_fill(&x.view, -1, 1, 0);
    tpu_value_t in[1] = {tt_value(&x.view)};
    tpu_attr_t attrs[7] = {tt_ints(2, o), tt_none(), tt_bool(false), tt_none(),
                           tt_none(), tt_none(), tt_none()};
    tpu_node_t node = tt_node(in, 1, NULL, 0, attrs, 7);
    tpu_view_t shape;
    CHECK_OK(def->check(def, &node));
    CHECK_OK(def->infer(def, &node, &shape));
    tt_t y = tt_like(&shape, TT_CONTIG);
    node.outputs = &y.view;
    node.num_outputs = 1;
    CHECK_OK(tt_run(def->kernel, def, &node));
    tt_compare(names[k], &y.view, &x.view, 1e-12);
    tt_free(&x);
    tt_free(&y);
  }
}

/* ---- uint8 filter modes -------------------------------------------------------------- */

typedef struct u8_case {
  const char* op;
  bool align;
  int64_t in[4], out[2];
  tt_layout_t layout;
} u8_case_t;

/* Runs op on a uint8 input (values from vals, or a pseudo-random pattern)
 * into a contiguous output; NULL status pointer: expects OK. */
static tt_t u8_run(const u8_case_t* c, const uint8_t* vals) {
  const tpu_op_def_t* def = tt_def(c->op);
  tt_t x = tt_make(TPU_DTYPE_U8, 4, c->in, c->layout);
  int64_t n = tpu_view_numel(&x.view);
  for (int64_t i = 0; i < n; ++i)
    tt_set(&x.view, i, vals ? (double)vals[i] : (double)((i * 73 + (i / 7) * 151 + 11) % 256));
  tpu_value_t in[1] = {tt_value(&x.view)};
  tpu_attr_t attrs[7] = {tt_ints(2, c->out), tt_none(), tt_bool(c->align), tt_none(),
                         tt_none(), tt_none(), tt_none()};
  tpu_node_t node = tt_node(in, 1, NULL, 0, attrs, 7);
  tpu_view_t shape;
  CHECK_OK(def->check(def, &node));
  CHECK_OK(def->infer(def, &node, &shape));
  tt_t y = tt_like(&shape, TT_CONTIG);
  node.outputs = &y.view;
  node.num_outputs = 1;
  CHECK_OK(tt_run(def->kernel, def, &node));
  tt_free(&x);
  return y;
}

TEST(upsample_u8_cpu_values) {
  /* CPU's (torch 2.14) uint8 results for a 3 x 4 image: they differ from the
   * rounded float result (e.g. 117 vs 118 first row), which the integer
   * weights and the uint8 intermediate image explain. */
  static const uint8_t img[12] = {0, 37, 255, 90, 12, 200, 7, 64, 250, 3, 128, 129};
  static const struct {
    u8_case_t c;
    uint8_t want[35];
  } k[] = {
      {{"upsample_bilinear2d", false, {1, 1, 3, 4}, {5, 3}, TT_CONTIG},
       {6, 146, 117, 21, 129, 92, 43, 104, 55, 143, 81, 99, 209, 66, 129}},
      {{"upsample_bilinear2d", true, {1, 1, 3, 4}, {5, 7}, TT_CONTIG},
       {0,  19,  37,  146, 255, 173, 90, 6,   63,  119, 125, 131, 105, 77, 12, 106, 200, 104,
        7,  36,  64,  131, 117, 102, 85, 68,  83,  97,  250, 127, 3,   66, 128, 129, 129}},
      {{"upsample_bilinear2d_aa", false, {1, 1, 3, 4}, {2, 3}, TT_CONTIG},
       {32, 130, 105, 136, 80, 98}},
      {{"upsample_bicubic2d_aa", false, {1, 1, 3, 4}, {4, 2}, TT_CONTIG},
       {41, 169, 74, 92, 111, 68, 129, 112}},
  };
  for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); ++i) {
    if (!tt_def(k[i].c.op)) continue;
    tt_t y = u8_run(&k[i].c, img);
    for (int64_t e = 0; e < k[i].c.out[0] * k[i].c.out[1]; ++e)
      if (tt_get(&y.view, e) != (double)k[i].want[e])
        tpu_test_fail(__FILE__, __LINE__, "case %d element %lld: got %g want %d", (int)i,
                      (long long)e, tt_get(&y.view, e), k[i].want[e]);
    tt_free(&y);
  }
}

/* Reference for the plain bilinear uint8 rule, written from its definition:
 * triangle weights around the source index, normalised, scaled to integers
 * by 2^p, width pass then height pass, each rounded and clamped. */
static void ref_weights(int64_t in, int64_t out, bool align, int64_t* ix, int32_t* q, int* prec) {
  double w[2 * 512], wmax = 0;
  double scale = align ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0)
                       : (double)in / (double)out;
  for (int64_t o = 0; o < out; ++o) {
    double src = align ? scale * (double)o : scale * ((double)o + 0.5) - 0.5;
    int64_t lo = (int64_t)floor(src);
    double tot = 0;
    for (int j = 0; j < 2; ++j) {
      int64_t p = lo + j;
      double v = 1.0 - fabs((double)p - src);
      bool ok = p >= 0 && p < in && v > 0;
      ix[2 * o + j] = ok ? p : 0;
      w[2 * o + j] = ok ? v : 0.0;
      tot += w[2 * o + j];
    }
    for (int j = 0; j < 2; ++j) {
      w[2 * o + j] /= tot;
      if (w[2 * o + j] > wmax) wmax = w[2 * o + j];
    }
  }
  int p = 0;
  while (p < 22 && floor(0.5 + wmax * (double)(1 << (p + 1))) < 32768.0) ++p;
  for (int64_t i = 0; i < 2 * out; ++i) q[i] = (int32_t)floor(0.5 + w[i] * (double)(1 << p));
  *prec = p;
}

static int ref_px(int64_t acc, int p) {
  acc = (acc + ((int64_t)1 << (p - 1))) >> p;
  return acc < 0 ? 0 : acc > 255 ? 255 : (int)acc;
}

TEST(upsample_u8_bilinear_reference) {
  const tpu_op_def_t* def = tt_def("upsample_bilinear2d");
  if (!def) return;
  static const u8_case_t cases[] = {
      {"upsample_bilinear2d", false, {2, 3, 9, 13}, {17, 5}, TT_TRANSPOSED},
      {"upsample_bilinear2d", true, {1, 2, 16, 7}, {31, 29}, TT_GAPS},
      {"upsample_bilinear2d", false, {2, 4, 40, 33}, {7, 33}, TT_REVERSED},
      {"upsample_bilinear2d", true, {1, 1, 5, 6}, {5, 1}, TT_CONTIG},
      {"upsample_bilinear2d", false, {3, 2, 1, 64}, {3, 200}, TT_PADDED},
  };
  int64_t ixh[1024], ixw[1024];
  int32_t qh[1024], qw[1024];
  for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ++ci) {
    const u8_case_t* c = &cases[ci];
    tt_t y = u8_run(c, NULL);
    int64_t N = c->in[0], C = c->in[1], H = c->in[2], W = c->in[3], oH = c->out[0],
            oW = c->out[1];
    int ph = 0, pw = 0;
    ref_weights(H, oH, c->align, ixh, qh, &ph);
    ref_weights(W, oW, c->align, ixw, qw, &pw);
    int bad = 0;
    static int mid[64 * 256];
    for (int64_t pl = 0; pl < N * C; ++pl) {
      /* the input pattern of u8_run, by logical (row-major) index */
      int64_t base = pl * H * W;
#define PX(h, w) ((int)(((base + (h) * W + (w)) * 73 + ((base + (h) * W + (w)) / 7) * 151 + 11) % 256))
      for (int64_t h = 0; h < H; ++h)
        for (int64_t o = 0; o < oW; ++o)
          mid[h * oW + o] = oW == W ? PX(h, o)
                                    : ref_px((int64_t)PX(h, ixw[2 * o]) * qw[2 * o] +
                                                 (int64_t)PX(h, ixw[2 * o + 1]) * qw[2 * o + 1],
                                             pw);
#undef PX
      for (int64_t o = 0; o < oH; ++o)
        for (int64_t x = 0; x < oW; ++x) {
          int want = oH == H ? mid[o * oW + x]
                             : ref_px((int64_t)mid[ixh[2 * o] * oW + x] * qh[2 * o] +
                                          (int64_t)mid[ixh[2 * o + 1] * oW + x] * qh[2 * o + 1],
                                      ph);
          double got = tt_get(&y.view, (pl * oH + o) * oW + x);
          if (got != (double)want && bad++ < 3)
            tpu_test_fail(__FILE__, __LINE__, "case %d plane %lld (%lld, %lld): got %g want %d",
                          (int)ci, (long long)pl, (long long)o, (long long)x, got, want);
        }
    }
    tt_free(&y);
  }
}

TEST(upsample_u8_left_to_cpu) {
  /* More than 4 channels to width 1, 3 channels to 1 x 1, integer types
   * other than uint8, and the backward of a uint8 grad: UNIMPLEMENTED. */
  const tpu_op_def_t* def = tt_def("upsample_bilinear2d");
  const tpu_op_def_t* cub = tt_def("upsample_bicubic2d");
  if (!def || !cub) return;
  int64_t s5[4] = {1, 5, 4, 4}, s3[4] = {1, 3, 4, 4}, o1[2] = {6, 1}, o11[2] = {1, 1},
          o2[2] = {6, 2};
  tt_t x5 = tt_make(TPU_DTYPE_U8, 4, s5, TT_CONTIG), x3 = tt_make(TPU_DTYPE_U8, 4, s3, TT_CONTIG);
  tpu_value_t in[1] = {tt_value(&x5.view)};
  tpu_attr_t attrs[7] = {tt_ints(2, o1), tt_none(), tt_bool(false), tt_none(),
                         tt_none(), tt_none(), tt_none()};
  tpu_node_t node = tt_node(in, 1, NULL, 0, attrs, 7);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  attrs[0] = tt_ints(2, o2);
  node = tt_node(in, 1, NULL, 0, attrs, 7);
  CHECK_OK(def->check(def, &node));
  CHECK_CODE(cub->check(cub, &node), TPU_CODE_UNIMPLEMENTED); /* plain bicubic uint8 */
  in[0] = tt_value(&x3.view);
  attrs[0] = tt_ints(2, o11);
  node = tt_node(in, 1, NULL, 0, attrs, 7);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&x5);
  tt_free(&x3);
}
