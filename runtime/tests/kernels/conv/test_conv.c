/* test_conv.c — the convolution family against its reference (conv_ref.c):
 * a table of convolutions (1-D/2-D/3-D, transposed, stride, padding,
 * dilation, groups, depthwise, 1x1, bias, dtypes, strided and permuted
 * layouts) run forward and backward, im2col/col2im cases, and the checks
 * that refuse what PyTorch rejects or the family does not run. */
#include "kernel_test_util.h"
#include "kernels/conv/conv.h"

typedef struct conv_case {
  int nsp;
  int64_t n, cin, cout, groups;
  int64_t size[3], k[3];
  int64_t stride, pad, dil, opad;
  bool transposed, bias;
  tpu_dtype_t dtype;
  tt_layout_t layout;
} conv_case_t;

#define F32 TPU_DTYPE_F32
#define F64 TPU_DTYPE_F64
static const conv_case_t k_cases[] = {
    {2, 2, 3, 4, 1, {7, 6}, {3, 3}, 1, 1, 1, 0, false, true, F32, TT_CONTIG},
    {2, 2, 3, 4, 1, {9, 8}, {3, 2}, 2, 0, 1, 0, false, false, F64, TT_PADDED},
    {2, 1, 3, 2, 1, {9, 10}, {3, 3}, 1, 2, 2, 0, false, true, F32, TT_REVERSED},
    {2, 2, 4, 6, 2, {6, 7}, {3, 3}, 1, 1, 1, 0, false, true, F32, TT_CONTIG},
    {2, 2, 4, 4, 4, {8, 7}, {3, 3}, 1, 1, 1, 0, false, true, F32, TT_CONTIG},
    {2, 2, 4, 4, 4, {9, 9}, {3, 3}, 2, 2, 2, 0, false, false, F64, TT_REVERSED},
    {2, 1, 3, 6, 3, {6, 6}, {3, 3}, 1, 1, 1, 0, false, true, F32, TT_PADDED},
    {2, 2, 8, 5, 1, {5, 6}, {1, 1}, 1, 0, 1, 0, false, true, F32, TT_CONTIG},
    {2, 2, 8, 5, 1, {5, 6}, {1, 1}, 1, 0, 1, 0, false, true, F32, TT_REVERSED},
    {2, 2, 6, 4, 1, {7, 6}, {1, 1}, 2, 0, 1, 0, false, false, F32, TT_CONTIG},
    {2, 2, 6, 6, 3, {5, 5}, {1, 1}, 1, 0, 1, 0, false, true, F64, TT_CONTIG},
    {1, 2, 3, 2, 1, {11}, {3}, 2, 1, 1, 0, false, true, F32, TT_CONTIG},
    {1, 3, 4, 4, 4, {13}, {5}, 1, 2, 2, 0, false, true, F64, TT_PADDED},
    {3, 2, 2, 3, 1, {4, 5, 6}, {2, 3, 3}, 1, 1, 1, 0, false, true, F32, TT_CONTIG},
    {3, 1, 4, 4, 2, {5, 4, 6}, {3, 2, 2}, 2, 1, 1, 0, false, false, F64, TT_REVERSED},
    {2, 2, 3, 4, 1, {5, 4}, {3, 3}, 2, 1, 1, 1, true, true, F32, TT_CONTIG},
    {2, 1, 4, 6, 2, {4, 5}, {3, 2}, 2, 0, 2, 1, true, false, F64, TT_PADDED},
    {2, 2, 4, 4, 4, {5, 6}, {3, 3}, 2, 1, 1, 1, true, true, F32, TT_CONTIG},
    {2, 2, 4, 8, 1, {5, 5}, {1, 1}, 1, 0, 1, 0, true, true, F32, TT_REVERSED},
    {1, 2, 3, 2, 1, {6}, {4}, 3, 1, 1, 2, true, true, F32, TT_CONTIG},
    {3, 1, 2, 3, 1, {3, 4, 3}, {2, 3, 2}, 2, 1, 1, 0, true, true, F32, TT_CONTIG},
    {2, 2, 3, 4, 1, {7, 6}, {3, 3}, 1, 1, 1, 0, false, true, TPU_DTYPE_F16, TT_CONTIG},
    {2, 2, 4, 4, 2, {7, 6}, {3, 3}, 2, 1, 1, 0, false, true, TPU_DTYPE_BF16, TT_REVERSED},
    {2, 2, 3, 4, 1, {4, 5}, {3, 3}, 2, 1, 1, 1, true, true, TPU_DTYPE_BF16, TT_CONTIG},
    {2, 2, 4, 4, 4, {6, 6}, {3, 3}, 1, 1, 1, 0, false, true, TPU_DTYPE_F16, TT_PADDED},
    {2, 2, 3, 4, 1, {7, 6}, {3, 3}, 1, 1, 1, 0, false, true, TPU_DTYPE_I64, TT_CONTIG},
    {2, 2, 3, 4, 1, {7, 6}, {3, 3}, 2, 1, 2, 0, false, false, TPU_DTYPE_I64, TT_PADDED},
    {2, 2, 3, 4, 1, {4, 5}, {3, 3}, 2, 1, 1, 1, true, true, TPU_DTYPE_I64, TT_CONTIG},
    {2, 2, 3, 4, 1, {7, 6}, {3, 3}, 1, 1, 1, 0, false, true, TPU_DTYPE_I32, TT_REVERSED},
    {2, 2, 4, 4, 4, {7, 6}, {3, 3}, 1, 1, 1, 0, false, true, TPU_DTYPE_I8, TT_CONTIG},
    {1, 1, 2, 3, 1, {40}, {3}, 1, 1, 1, 0, false, true, TPU_DTYPE_U8, TT_CONTIG},
    /* large enough for several column blocks and units over the pool */
    {2, 1, 16, 8, 1, {24, 24}, {3, 3}, 1, 1, 1, 0, false, true, F32, TT_CONTIG},
    {2, 3, 8, 16, 1, {20, 20}, {3, 3}, 1, 1, 1, 0, true, true, F32, TT_CONTIG},
    {2, 4, 16, 16, 16, {20, 20}, {3, 3}, 1, 1, 1, 0, false, true, F32, TT_REVERSED},
    {2, 2, 32, 16, 1, {16, 16}, {1, 1}, 1, 0, 1, 0, false, false, F32, TT_CONTIG},
    /* depthwise, stride 1: the plane form (dilated, asymmetric, transposed) */
    {2, 2, 4, 4, 4, {9, 8}, {3, 2}, 1, 2, 2, 0, false, true, F64, TT_PADDED},
    {2, 1, 3, 3, 3, {5, 7}, {2, 4}, 1, 0, 1, 0, false, false, F32, TT_CONTIG},
    {2, 2, 4, 4, 4, {6, 5}, {3, 3}, 1, 1, 2, 0, true, true, F32, TT_CONTIG},
    /* float32 3x3 stride 1 with >= 16 channels: Winograd F(2x2, 3x3) (forward,
     * grad_input, transposed): odd sizes, padding 0/1/2, groups, batch 1,
     * several tile-row blocks, strided layouts */
    {2, 1, 16, 16, 1, {7, 9}, {3, 3}, 1, 1, 1, 0, false, true, F32, TT_CONTIG},
    {2, 2, 32, 48, 2, {10, 11}, {3, 3}, 1, 0, 1, 0, false, false, F32, TT_PADDED},
    {2, 2, 16, 24, 1, {6, 5}, {3, 3}, 1, 2, 1, 0, false, true, F32, TT_REVERSED},
    {2, 1, 24, 16, 1, {41, 30}, {3, 3}, 1, 1, 1, 0, false, true, F32, TT_CONTIG},
    {2, 2, 16, 32, 1, {9, 8}, {3, 3}, 1, 1, 1, 0, true, true, F32, TT_CONTIG},
    {2, 1, 32, 16, 1, {5, 6}, {3, 3}, 1, 0, 1, 0, true, false, F32, TT_PADDED},
    {2, 2, 16, 16, 1, {7, 9}, {3, 3}, 1, 1, 1, 0, false, true, TPU_DTYPE_BF16, TT_CONTIG},
    /* Winograd runs from 64 tiles per sample (WINO_MIN_TILES): the same forms
     * at that size (the smaller ones above now take im2col) */
    {2, 2, 32, 48, 2, {18, 19}, {3, 3}, 1, 0, 1, 0, false, false, F32, TT_PADDED},
    {2, 2, 16, 24, 1, {14, 13}, {3, 3}, 1, 2, 1, 0, false, true, F32, TT_REVERSED},
    {2, 2, 16, 32, 1, {17, 16}, {3, 3}, 1, 1, 1, 0, true, true, F32, TT_CONTIG},
    {2, 1, 32, 16, 1, {13, 14}, {3, 3}, 1, 0, 1, 0, true, false, F32, TT_PADDED},
    {2, 2, 16, 16, 1, {15, 17}, {3, 3}, 1, 1, 1, 0, false, true, TPU_DTYPE_BF16, TT_CONTIG},
    /* the weight gradient's Winograd units spanning samples, several units
     * per pool chunk, chunks summed (and with groups) */
    {2, 4, 32, 32, 1, {24, 24}, {3, 3}, 1, 1, 1, 0, false, true, F32, TT_CONTIG},
    {2, 3, 32, 32, 2, {18, 17}, {3, 3}, 1, 1, 1, 0, false, false, F32, TT_PADDED},
    /* float32 1x1 stride 1, no padding: the AVX-512 micro-kernel (conv_pointwise.c)
     * where the CPU has it: output channels not a multiple of its 8-row tile,
     * positions not a multiple of its 48-column panel (masked tails of 1, 2
     * and 3 vectors), several panels (prefetch), groups, 1-D/3-D, half types */
    {2, 2, 12, 18, 2, {7, 9}, {1, 1}, 1, 0, 1, 0, false, true, F32, TT_CONTIG},
    {2, 3, 64, 64, 1, {14, 14}, {1, 1}, 1, 0, 1, 0, false, true, F32, TT_CONTIG},
    {2, 1, 1, 1, 1, {3, 3}, {1, 1}, 1, 0, 1, 0, false, true, F32, TT_CONTIG},
    {1, 2, 5, 17, 1, {50}, {1}, 1, 0, 1, 0, false, false, F32, TT_PADDED},
    {1, 1, 7, 3, 1, {33}, {1}, 1, 0, 1, 0, false, true, F32, TT_CONTIG},
    {3, 2, 6, 10, 1, {3, 4, 5}, {1, 1, 1}, 1, 0, 1, 0, false, true, F32, TT_REVERSED},
    {2, 2, 16, 9, 1, {6, 8}, {1, 1}, 1, 0, 1, 0, false, true, TPU_DTYPE_F16, TT_CONTIG},
    {2, 1, 40, 24, 1, {30, 31}, {1, 1}, 1, 0, 1, 0, false, false, TPU_DTYPE_BF16, TT_CONTIG},
    /* the micro-kernel runs from 384 positions per sample (conv.c,
     * CONV_PW_MIN_POSITIONS): the same tails there */
    {2, 2, 12, 18, 2, {20, 21}, {1, 1}, 1, 0, 1, 0, false, true, F32, TT_CONTIG},
    {1, 2, 5, 17, 1, {401}, {1}, 1, 0, 1, 0, false, false, F32, TT_PADDED},
    {1, 1, 7, 3, 1, {386}, {1}, 1, 0, 1, 0, false, true, F32, TT_CONTIG},
    {3, 2, 6, 10, 1, {6, 8, 9}, {1, 1, 1}, 1, 0, 1, 0, false, true, F32, TT_REVERSED},
    {2, 2, 16, 9, 1, {20, 20}, {1, 1}, 1, 0, 1, 0, false, true, TPU_DTYPE_F16, TT_CONTIG},
    /* and past its range (weight over 2^16 elements): sgemm */
    {2, 1, 260, 270, 1, {20, 20}, {1, 1}, 1, 0, 1, 0, false, true, F32, TT_CONTIG},
    /* empty batch */
    {2, 0, 3, 4, 1, {5, 5}, {3, 3}, 1, 1, 1, 0, false, true, F32, TT_CONTIG},
};

typedef struct conv_run {
  tt_t x, w, b, go, out[3], want[3];
  tpu_value_t in[3];
  tpu_attr_t attrs[8];
  tpu_node_t node;
} conv_run_t;

static void fill_attrs(const conv_case_t* c, bool backward, tpu_attr_t* at, int* na,
                       const int64_t* mask) {
  int64_t s[3] = {c->stride, c->stride, c->stride}, p[3] = {c->pad, c->pad, c->pad};
  int64_t d[3] = {c->dil, c->dil, c->dil}, o[3] = {c->opad, c->opad, c->opad};
  int n = 0;
  if (backward) at[n++] = c->bias ? tt_ints(1, &c->cout) : tt_none();
  at[n++] = tt_ints(c->nsp, s);
  at[n++] = tt_ints(c->nsp, p);
  at[n++] = tt_ints(c->nsp, d);
  at[n++] = tt_bool(c->transposed);
  at[n++] = tt_ints(c->nsp, o);
  at[n++] = tt_int(c->groups);
  if (backward) at[n++] = tt_ints(3, mask);
  *na = n;
}

static double tol_of(tpu_dtype_t dt) {
  return dt == TPU_DTYPE_BF16 ? 1e-2 : dt == TPU_DTYPE_F16 ? 1e-3 : 1e-6;
}

/* Runs the kernel and the reference on `node` (outputs `outs` / `wants`). */
static void compare(const char* what, size_t i, const tpu_op_def_t* def, tpu_node_t* node,
                    tt_t* outs, tt_t* wants, int nout, const bool* on, tpu_dtype_t dt) {
  tpu_view_t ov[3], wv[3];
  for (int k = 0; k < nout; ++k) ov[k] = outs[k].view, wv[k] = wants[k].view;
  node->outputs = ov;
  tpu_status_t s = def->check(def, node);
  if (s == TPU_OK) s = tt_run(def->kernel, def, node);
  node->outputs = wv;
  if (s == TPU_OK) s = tpu_conv_reference(def, node);
  node->outputs = NULL;
  if (s != TPU_OK) {
    tpu_test_fail(__FILE__, __LINE__, "%s case %zu: %s", what, i, tpu_status_message(s));
    tpu_status_free(s);
    return;
  }
  for (int k = 0; k < nout; ++k) {
    if (!on[k]) continue;
    double worst = tt_max_rel_diff(&ov[k], &wv[k]);
    if (!(worst <= tol_of(dt)))
      tpu_test_fail(__FILE__, __LINE__, "%s case %zu output %d (%s): diff %g", what, i, k,
                    tpu_dtype_name(dt), worst);
  }
}

static void run_case(size_t i, const conv_case_t* c, const int64_t* mask) {
  const tpu_op_def_t* fwd = tt_def("convolution");
  const tpu_op_def_t* bwd = tt_def("convolution_backward");
  if (!fwd || !bwd) return;
  int32_t nd = c->nsp + 2;
  int64_t xs[5] = {c->n, c->cin}, ws[5];
  ws[0] = c->transposed ? c->cin : c->cout;
  ws[1] = c->transposed ? c->cout / c->groups : c->cin / c->groups;
  for (int d = 0; d < c->nsp; ++d) xs[2 + d] = c->size[d], ws[2 + d] = c->k[d];
  tt_layout_t ol = c->layout == TT_CONTIG ? TT_CONTIG : TT_PADDED;
  tt_t x = tt_make(c->dtype, nd, xs, c->layout), w = tt_make(c->dtype, nd, ws, c->layout);
  tt_t b = tt_make(c->dtype, 1, &c->cout, TT_PADDED);
  tt_fill_ints(&x.view, 11 + i, -3, 3);
  tt_fill_ints(&w.view, 22 + i, -3, 3);
  tt_fill_ints(&b.view, 33 + i, -3, 3);
  tpu_value_t in[3] = {tt_value(&x.view), tt_value(&w.view), tt_value(c->bias ? &b.view : NULL)};
  tpu_attr_t at[8];
  int na;
  fill_attrs(c, false, at, &na, NULL);
  tpu_node_t node = tt_node(in, 3, NULL, 1, at, na);
  node.op = tpu_op_lookup("convolution");
  tpu_view_t shape[3];
  tpu_status_t s = fwd->infer(fwd, &node, shape);
  if (s != TPU_OK) {
    tpu_test_fail(__FILE__, __LINE__, "case %zu: infer: %s", i, tpu_status_message(s));
    tpu_status_free(s);
  } else {
    tt_t out = tt_like(&shape[0], ol), want = tt_like(&shape[0], TT_CONTIG);
    tt_fill_value(&out.view, tpu_dtype_is_floating(c->dtype) ? NAN : 77);
    bool on[1] = {true};
    compare("forward", i, fwd, &node, &out, &want, 1, on, c->dtype);
    if (tpu_dtype_is_floating(c->dtype)) {
      /* backward, with grad_output shaped like the result */
      tt_t go = tt_like(&shape[0], c->layout);
      tt_fill_ints(&go.view, 44 + i, -3, 3);
      tpu_value_t bin[3] = {tt_value(&go.view), tt_value(&x.view), tt_value(&w.view)};
      fill_attrs(c, true, at, &na, mask);
      tpu_node_t bn = tt_node(bin, 3, NULL, 3, at, na);
      bn.op = tpu_op_lookup("convolution_backward");
      tpu_view_t bs[3];
      s = bwd->infer(bwd, &bn, bs);
      if (s != TPU_OK) {
        tpu_test_fail(__FILE__, __LINE__, "case %zu: backward infer: %s", i,
                      tpu_status_message(s));
        tpu_status_free(s);
      } else {
        tt_t outs[3], wants[3];
        bool bon[3];
        for (int k = 0; k < 3; ++k) {
          outs[k] = tt_like(&bs[k], k == 0 ? ol : TT_CONTIG);
          wants[k] = tt_like(&bs[k], TT_CONTIG);
          tt_fill_value(&outs[k].view, NAN);
          bon[k] = mask[k] != 0;
        }
        compare("backward", i, bwd, &bn, outs, wants, 3, bon, c->dtype);
        for (int k = 0; k < 3; ++k) tt_free(&outs[k]), tt_free(&wants[k]);
      }
      tt_free(&go);
    }
    tt_free(&out);
    tt_free(&want);
  }
  tt_free(&x);
  tt_free(&w);
  tt_free(&b);
}

TEST(conv_matches_reference) {
  const int64_t all[3] = {1, 1, 1};
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i) run_case(i, &k_cases[i], all);
}

TEST(conv_backward_output_mask) {
  const int64_t masks[3][3] = {{1, 0, 0}, {0, 1, 1}, {0, 0, 1}};
  for (int m = 0; m < 3; ++m) {
    run_case(0, &k_cases[0], masks[m]);
    run_case(15, &k_cases[15], masks[m]);
    run_case(4, &k_cases[4], masks[m]);
  }
}

/* im2col and col2im: batched and not, any layout. */
typedef struct cols_case {
  bool batched;
  int64_t n, c, h, w;
  int64_t k[2], dil[2], pad[2], stride[2];
  tpu_dtype_t dtype;
  tt_layout_t layout;
} cols_case_t;

static const cols_case_t k_cols[] = {
    {true, 2, 3, 7, 8, {2, 3}, {1, 2}, {1, 0}, {2, 1}, F32, TT_CONTIG},
    {true, 1, 2, 6, 6, {3, 3}, {1, 1}, {1, 1}, {1, 1}, F64, TT_REVERSED},
    {false, 1, 4, 5, 9, {2, 2}, {2, 1}, {0, 2}, {1, 3}, TPU_DTYPE_F16, TT_PADDED},
    {true, 3, 2, 5, 5, {1, 1}, {1, 1}, {0, 0}, {1, 1}, TPU_DTYPE_BF16, TT_CONTIG},
    {true, 2, 2, 6, 5, {3, 2}, {1, 1}, {1, 1}, {1, 1}, TPU_DTYPE_BOOL, TT_PADDED},
};

TEST(conv_im2col_col2im_match_reference) {
  const tpu_op_def_t* i2c = tt_def("im2col");
  const tpu_op_def_t* c2i = tt_def("col2im");
  if (!i2c || !c2i) return;
  for (size_t i = 0; i < sizeof(k_cols) / sizeof(k_cols[0]); ++i) {
    const cols_case_t* c = &k_cols[i];
    int lead = c->batched ? 1 : 0;
    int64_t xs[4] = {c->n, c->c, c->h, c->w};
    tt_t x = tt_make(c->dtype, 3 + lead, xs + 1 - lead, c->layout);
    tt_fill_ints(&x.view, 5 + i, c->dtype == TPU_DTYPE_BOOL ? 0 : -4, 4);
    tpu_attr_t at[5] = {tt_ints(2, c->k), tt_ints(2, c->dil), tt_ints(2, c->pad),
                        tt_ints(2, c->stride)};
    tpu_value_t in[1] = {tt_value(&x.view)};
    tpu_node_t node = tt_node(in, 1, NULL, 1, at, 4);
    tpu_view_t shape[1];
    CHECK_OK(i2c->infer(i2c, &node, shape));
    tt_t cols = tt_like(&shape[0], c->layout), want = tt_like(&shape[0], TT_CONTIG);
    bool on[1] = {true};
    compare("im2col", i, i2c, &node, &cols, &want, 1, on, c->dtype);
    /* col2im of those columns back to the image's shape */
    int64_t osz[2] = {c->h, c->w};
    tpu_attr_t bat[5] = {tt_ints(2, osz), at[0], at[1], at[2], at[3]};
    tpu_value_t bin[1] = {tt_value(&want.view)};
    tpu_node_t bn = tt_node(bin, 1, NULL, 1, bat, 5);
    tpu_view_t bs[1];
    CHECK_OK(c2i->infer(c2i, &bn, bs));
    CHECK(views_same_shape(&bs[0], &x.view));
    tt_t img = tt_like(&bs[0], c->layout), iw = tt_like(&bs[0], TT_CONTIG);
    compare("col2im", i, c2i, &bn, &img, &iw, 1, on, c->dtype);
    tt_free(&x), tt_free(&cols), tt_free(&want), tt_free(&img), tt_free(&iw);
  }
}

/* What PyTorch rejects, and what the family does not run, is UNIMPLEMENTED. */
TEST(conv_checks_refuse) {
  const tpu_op_def_t* fwd = tt_def("convolution");
  if (!fwd) return;
  const conv_case_t base = k_cases[0];
  struct {
    conv_case_t c;
    tpu_dtype_t wdtype;
    int64_t wch;
  } bad[] = {
      {base, TPU_DTYPE_F64, 0},                         /* mixed dtypes */
      {base, F32, 2},                                   /* weight channels != input channels */
      {{2, 1, 3, 4, 1, {2, 2}, {3, 3}, 1, 0, 1, 0, false, false, F32, TT_CONTIG}, F32, 0},
      {{2, 1, 3, 4, 1, {5, 5}, {3, 3}, 1, -1, 1, 0, false, false, F32, TT_CONTIG}, F32, 0},
      {{2, 1, 3, 4, 1, {5, 5}, {3, 3}, 0, 0, 1, 0, false, false, F32, TT_CONTIG}, F32, 0},
      {{2, 1, 3, 4, 1, {5, 5}, {3, 3}, 2, 0, 1, 2, true, false, F32, TT_CONTIG}, F32, 0},
      {{2, 1, 3, 4, 1, {5, 5}, {3, 3}, 1, 0, 1, 0, false, false, TPU_DTYPE_BOOL, TT_CONTIG},
       TPU_DTYPE_BOOL, 0},
      {{2, 1, 3, 4, 1, {5, 5}, {3, 3}, 1, 0, 2, 0, false, false, TPU_DTYPE_I32, TT_CONTIG},
       TPU_DTYPE_I32, 0},
      {{2, 1, 3, 4, 1, {5, 5}, {3, 3}, 2, 0, 1, 0, true, false, TPU_DTYPE_I16, TT_CONTIG},
       TPU_DTYPE_I16, 0},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    const conv_case_t* c = &bad[i].c;
    int64_t xs[4] = {c->n, c->cin, c->size[0], c->size[1]};
    int64_t ws[4] = {c->transposed ? c->cin : c->cout, bad[i].wch ? bad[i].wch : c->cin, c->k[0],
                     c->k[1]};
    if (c->transposed) ws[1] = c->cout;
    tt_t x = tt_make(c->dtype, 4, xs, TT_CONTIG), w = tt_make(bad[i].wdtype, 4, ws, TT_CONTIG);
    tpu_value_t in[3] = {tt_value(&x.view), tt_value(&w.view), tt_value(NULL)};
    tpu_attr_t at[8];
    int na;
    fill_attrs(c, false, at, &na, NULL);
    tpu_node_t node = tt_node(in, 3, NULL, 1, at, na);
    tpu_view_t shape[1];
    CHECK_CODE(fwd->infer(fwd, &node, shape), TPU_CODE_UNIMPLEMENTED);
    CHECK_CODE(fwd->check(fwd, &node), TPU_CODE_UNIMPLEMENTED);
    tt_free(&x);
    tt_free(&w);
  }
}
