/* test_conv_mxu.c — bfloat16 convolutions on the matrix unit (conv_mxu.c)
 * against the family's reference (conv_ref.c, sums in double): forward,
 * input gradient, weight and bias gradients, over strides, padding,
 * dilation, groups, depthwise, 1x1, 1-D/3-D, transposed and strided or
 * permuted operands, with random values (not small integers: a layout or
 * stride mistake then moves every sum). The unit's counters must show that
 * it ran each product (and declined only what it should: the transposed
 * convolution with a bias). Each case runs split over the pool's threads
 * (the default where the pool has more than one) and on one OpenMP team
 * (TORCH_TPU_CONV_SPLIT=0). Skipped where the CPU has no unit for
 * bfloat16. */
#include <string.h>

#include "kernel_test_util.h"
#include "kernels/conv/conv.h"
#include "kernels/matmul/mxu.h"
#include "tpu/config.h"

typedef struct mxu_case {
  int nsp;
  int64_t n, cin, cout, groups;
  int64_t size[3], k[3];
  int64_t stride, pad, dil, opad;
  bool transposed, bias;
  tt_layout_t layout;
  /* What oneDNN offers for the weight gradient on AVX512-BF16 without AMX
   * (2.6, measured on the Zen 4 machine; on AMX its brgemm convolutions take
   * both, 2.6 and 3.2 alike, and it runs whole: amx):
   * only im2col + GEMM for the grouped weight gradient, which the unit runs
   * a group at a time (w_by_group); nor ungrouped (8 output channels):
   * declined (w_declined). */
  bool w_by_group;
  bool w_declined;
} mxu_case_t;

/* Whether the unit's bfloat16 kernels are AMX's (tpu_mxu_info_t.isa). */
static bool amx(void) {
  tpu_mxu_info_t info;
  tpu_mxu_get_info(&info);
  return strncmp(info.isa, "amx", 3) == 0;
}

static const mxu_case_t k_cases[] = {
    /* 3x3 stride 1 padded, with a bias */
    {2, 2, 16, 32, 1, {12, 10}, {3, 3}, 1, 1, 1, 0, false, true, TT_CONTIG, false, false},
    /* stride 2, permuted operands (reordered in and out) */
    {2, 2, 8, 16, 1, {11, 9}, {3, 3}, 2, 1, 1, 0, false, false, TT_REVERSED, false, false},
    /* dilated, padded-stride operands */
    {2, 1, 16, 16, 1, {13, 12}, {3, 3}, 1, 2, 2, 0, false, true, TT_PADDED, false, false},
    /* groups (8 input channels each: the weight gradient has only oneDNN's
     * im2col + GEMM, run a group at a time) */
    {2, 2, 16, 32, 2, {9, 10}, {3, 3}, 1, 1, 1, 0, false, true, TT_CONTIG, true, false},
    /* 1x1 stride 2 on an odd image (the right padding oneDNN needs is -1) */
    {2, 2, 32, 16, 1, {9, 9}, {1, 1}, 2, 0, 1, 0, false, false, TT_CONTIG, false, false},
    /* 1x1 stride 1 (a pointwise layer) */
    {2, 3, 64, 32, 1, {7, 7}, {1, 1}, 1, 0, 1, 0, false, true, TT_CONTIG, false, false},
    /* a ResNet stem: 3 input channels, 7x7 stride 2 */
    {2, 2, 3, 16, 1, {20, 18}, {7, 7}, 2, 3, 1, 0, false, true, TT_CONTIG, false, false},
    /* channels not a multiple of 16, an odd batch (uneven parts), padded
     * strides */
    {2, 3, 24, 40, 1, {8, 9}, {3, 3}, 1, 1, 1, 0, false, true, TT_PADDED, false, false},
    /* groups of 16 input channels */
    {2, 2, 64, 64, 4, {10, 10}, {3, 3}, 1, 1, 1, 0, false, true, TT_CONTIG, false, false},
    /* depthwise */
    {2, 2, 16, 16, 16, {10, 11}, {3, 3}, 1, 1, 1, 0, false, true, TT_CONTIG, false, false},
    /* 1-D and 3-D */
    {1, 2, 16, 24, 1, {31}, {5}, 2, 2, 1, 0, false, true, TT_CONTIG, false, false},
    {3, 1, 8, 16, 1, {5, 6, 7}, {2, 3, 3}, 1, 1, 1, 0, false, true, TT_CONTIG, false, false},
    /* transposed (no bias: a bias is declined, below), stride 2 with output
     * padding, groups */
    {2, 2, 16, 8, 1, {6, 7}, {3, 3}, 2, 1, 1, 1, true, false, TT_CONTIG, false, false},
    {2, 1, 16, 16, 2, {5, 6}, {3, 3}, 2, 0, 1, 0, true, false, TT_REVERSED, false, true},
};

static void attrs_of(const mxu_case_t* c, bool backward, const int64_t* mask, tpu_attr_t* at,
                     int* out_n) {
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
  *out_n = n;
}

/* Whether products split over the pool (conv_mxu.c): the pool has more
 * than one thread and TORCH_TPU_CONV_SPLIT is not 0. */
static bool split_on(void) {
  return tpu_parallel_threads() > 1 && tpu_config_bool(TPU_CONFIG_CONV_SPLIT);
}

/* The forward convolution of case `c` on the operands `in` (x, w, bias),
 * its attrs written into `at`, run by the kernel into a new contiguous
 * output (returned; the caller frees it), with the unit's counters just
 * before and after. *out_node is the node run (inputs `in`, attrs `at`;
 * outputs unset). */
static tt_t run_forward_counted(const tpu_op_def_t* fwd, const mxu_case_t* c, tpu_value_t* in,
                                tpu_attr_t* at, tpu_node_t* out_node, tpu_mxu_info_t* out_before,
                                tpu_mxu_info_t* out_after) {
  int na;
  attrs_of(c, false, NULL, at, &na);
  *out_node = tt_node(in, 3, NULL, 1, at, na);
  out_node->op = tpu_op_lookup("convolution");
  tpu_view_t shape[1];
  CHECK_OK(fwd->infer(fwd, out_node, shape));
  tt_t out = tt_like(&shape[0], TT_CONTIG);
  tpu_mxu_get_info(out_before);
  out_node->outputs = &out.view;
  CHECK_OK(tt_run(fwd->kernel, fwd, out_node));
  tpu_mxu_get_info(out_after);
  out_node->outputs = NULL;
  return out;
}

/* Runs `def` on the unit (with `outs`) and the reference (with `wants`),
 * compares the outputs that are on, and checks the counters moved by
 * `ran` convolutions and `declined` refusals, of which between split_lo
 * and split_hi split over the pool. With `declined_lo` below `declined`,
 * between declined_lo and `declined` of the products may have run instead
 * (ran + declined stays the total). */
static void run_compare(size_t i, const char* what, const tpu_op_def_t* def, tpu_node_t* node,
                        tt_t* outs, tt_t* wants, int nout, const bool* on, uint64_t ran,
                        uint64_t declined, uint64_t declined_lo, uint64_t split_lo,
                        uint64_t split_hi) {
  tpu_view_t ov[3], wv[3];
  for (int k = 0; k < nout; ++k) ov[k] = outs[k].view, wv[k] = wants[k].view;
  tpu_mxu_info_t before, after;
  tpu_mxu_get_info(&before);
  node->outputs = ov;
  tpu_status_t s = def->check(def, node);
  if (s == TPU_OK) s = tt_run(def->kernel, def, node);
  tpu_mxu_get_info(&after);
  node->outputs = wv;
  if (s == TPU_OK) s = tpu_conv_reference(def, node);
  node->outputs = NULL;
  if (s != TPU_OK) {
    tpu_test_fail(__FILE__, __LINE__, "%s case %zu: %s", what, i, tpu_status_message(s));
    tpu_status_free(s);
    return;
  }
  uint64_t got_ran = after.convs - before.convs, got_declined = after.conv_declined - before.conv_declined;
  if (got_ran + got_declined != ran + declined || got_declined < declined_lo ||
      got_declined > declined)
    tpu_test_fail(__FILE__, __LINE__, "%s case %zu: unit ran %llu (want %llu), declined %llu (want %llu)",
                  what, i, (unsigned long long)(after.convs - before.convs), (unsigned long long)ran,
                  (unsigned long long)(after.conv_declined - before.conv_declined),
                  (unsigned long long)declined);
  uint64_t split = after.conv_split - before.conv_split;
  if (split < split_lo || split > split_hi)
    tpu_test_fail(__FILE__, __LINE__, "%s case %zu: %llu split (want %llu to %llu)", what, i,
                  (unsigned long long)split, (unsigned long long)split_lo,
                  (unsigned long long)split_hi);
  for (int k = 0; k < nout; ++k) {
    if (!on[k]) continue;
    /* both rounded to bfloat16 once (|d| / (1 + |want|) <= 2^-8 each),
     * the unit's float32 sums in another order */
    double worst = tt_max_rel_diff(&ov[k], &wv[k]);
    if (!(worst <= 1e-2))
      tpu_test_fail(__FILE__, __LINE__, "%s case %zu output %d: diff %g", what, i, k, worst);
  }
}

/* Whether a case is a 1x1 convolution with no padding and one group with
 * TORCH_TPU_CONV_GEMM on, which products of it run as GEMMs: all three on
 * conv_mxu_1x1.c's per-image GEMMs (NCHW at stride 1 with
 * TPU_CONV_GEMM_MIN_POSITIONS or more positions); else the forward and
 * input gradient as one GEMM with the positions as rows (conv_mxu_rows.c)
 * where the operand they read has dense channels (channels_last, or one
 * position; both read operands have the case's layout) or the stride is not
 * 1; the rest on the primitives. */
enum { PRIMITIVES, PER_IMAGE, ROWS, BY_POSITIONS };

static bool one_by_one(const mxu_case_t* c) {
  bool pw = c->groups == 1 && c->pad == 0 && tpu_config_bool(TPU_CONFIG_CONV_GEMM);
  for (int d = 0; d < c->nsp; ++d) pw = pw && c->k[d] == 1;
  return pw;
}

/* conv_mxu_1x1.c's first per-image GEMM of the forward (fwd) or input
 * gradient of a PER_IMAGE case, as it asks tpu_mxu_gemm_on_tiles: rows M
 * (the channels written, in a row block when one image splits over them)
 * of W (forward, DIR_Y of a convolution) or Wᵀ (as a strided view) times
 * the image's [K, P] matrix. Off the tiles it runs by positions (each
 * image's positions the rows of one GEMM, an image a part). */
static bool per_image_on_tiles(const mxu_case_t* c, bool fwd, int64_t positions) {
  /* a transposed convolution's forward is the input-gradient product */
  bool dir_y = fwd != c->transposed;
  int64_t m = fwd ? c->cout : c->cin, k = fwd ? c->cin : c->cout;
  int threads = split_on() ? tpu_parallel_threads() : 1;
  int64_t blocks = m / 16, want = (threads + c->n - 1) / c->n;
  int64_t per = c->n < threads && threads > 1 && blocks >= 2 ? (blocks < want ? blocks : want) : 1;
  int64_t r0, r1;
  mxu_row_part(m, per, 0, &r0, &r1);
  mxu_gemm_t g;
  memset(&g, 0, sizeof g);
  uint64_t at = 4096; /* only the layouts matter: nothing runs */
  g.a = dir_y ? mxu_matrix(at, TPU_DTYPE_BF16, r1 - r0, k, k, 1)
              : mxu_matrix(at, TPU_DTYPE_BF16, r1 - r0, k, 1, m);
  g.b = mxu_matrix(at, TPU_DTYPE_BF16, k, positions, positions, 1);
  g.c = mxu_matrix(at, TPU_DTYPE_BF16, r1 - r0, positions, positions, 1);
  g.alpha = 1.0f, g.beta = fwd && !c->transposed && c->bias ? 1.0f : 0.0f;
  g.serial = threads > 1 && c->n * per > 1;
  return tpu_mxu_gemm_on_tiles(&g);
}

static int path_of(const mxu_case_t* c) {
  if (!one_by_one(c)) return PRIMITIVES;
  int64_t positions = 1;
  for (int d = 0; d < c->nsp; ++d) positions *= c->size[d];
  if (c->stride == 1 && c->layout == TT_CONTIG &&
      positions >= tpu_conv_gemm_min_positions(CONV_DIR_W))
    return PER_IMAGE;
  bool dense = c->layout == TT_CHANNELS_LAST || (c->layout == TT_CONTIG && positions == 1);
  return c->stride != 1 || dense ? ROWS : PRIMITIVES; /* ROWS: not the weight gradient */
}

/* The path of the forward (fwd) or the input gradient: per image from
 * fewer positions on the AMX tiles (tpu_conv_gemm_min_positions), and a
 * per-image one whose GEMM would miss the tiles by positions (counted as
 * GEMMs either way). */
static int path_of_dir(const mxu_case_t* c, bool fwd) {
  if (!one_by_one(c)) return PRIMITIVES;
  int64_t positions = 1;
  for (int d = 0; d < c->nsp; ++d) positions *= c->size[d];
  if (c->stride == 1 && c->layout == TT_CONTIG &&
      positions >= tpu_conv_gemm_min_positions(CONV_DIR_Y))
    return per_image_on_tiles(c, fwd, positions) ? PER_IMAGE : BY_POSITIONS;
  return path_of(c) == PER_IMAGE ? PRIMITIVES : path_of(c);
}

/* Whether conv_mxu_rows.c splits a product's GEMM over the pool: into row
 * blocks of 32 or more, two or more of them; its rows are the grid
 * positions (Y's: the output's, or a transposed convolution's input's) of
 * all images. */
static bool rows_split(const mxu_case_t* c) {
  int64_t rows = c->n;
  for (int d = 0; d < c->nsp; ++d)
    rows *= c->transposed ? c->size[d] : (c->size[d] - 1) / c->stride + 1;
  int64_t parts = rows / 32 < tpu_parallel_threads() ? rows / 32 : tpu_parallel_threads();
  return parts >= 2;
}

/* Whether the forward (fwd) or the input gradient splits over the pool:
 * on the primitives and conv_mxu_1x1.c's per-image GEMMs over the images
 * (2 or more), the latter with one image over the 32 or more channels it
 * writes; conv_mxu_rows.c's GEMM over its rows. */
static bool images_split(const mxu_case_t* c, bool fwd) {
  if (!split_on()) return false;
  int path = path_of_dir(c, fwd);
  if (path == PER_IMAGE) return c->n >= 2 || (fwd ? c->cout : c->cin) >= 32;
  if (path == ROWS) return rows_split(c);
  return c->n >= 2; /* the primitives, and by positions */
}

static void run_case(size_t i, const mxu_case_t* c, bool bias_override, const int64_t* mask) {
  const tpu_op_def_t* fwd = tt_def("convolution");
  const tpu_op_def_t* bwd = tt_def("convolution_backward");
  if (!fwd || !bwd) return;
  tpu_dtype_t dt = TPU_DTYPE_BF16;
  bool bias = c->bias || bias_override;
  int32_t nd = c->nsp + 2;
  int64_t xs[5] = {c->n, c->cin}, ws[5];
  ws[0] = c->transposed ? c->cin : c->cout;
  ws[1] = c->transposed ? c->cout / c->groups : c->cin / c->groups;
  for (int d = 0; d < c->nsp; ++d) xs[2 + d] = c->size[d], ws[2 + d] = c->k[d];
  tt_layout_t ol =
      c->layout == TT_CONTIG || c->layout == TT_CHANNELS_LAST ? c->layout : TT_PADDED;
  tt_t x = tt_make(dt, nd, xs, c->layout), w = tt_make(dt, nd, ws, c->layout);
  tt_t b = tt_make(dt, 1, &c->cout, TT_PADDED);
  tt_fill(&x.view, -1, 1, 0), tt_fill(&w.view, -1, 1, 0), tt_fill(&b.view, -1, 1, 0);
  tpu_value_t in[3] = {tt_value(&x.view), tt_value(&w.view), tt_value(bias ? &b.view : NULL)};
  tpu_attr_t at[8];
  int na;
  attrs_of(c, false, NULL, at, &na);
  tpu_node_t node = tt_node(in, 3, NULL, 1, at, na);
  node.op = tpu_op_lookup("convolution");
  tpu_view_t shape[3];
  CHECK_OK(fwd->infer(fwd, &node, shape));
  tt_t out = tt_like(&shape[0], ol), want = tt_like(&shape[0], TT_CONTIG);
  tt_fill_value(&out.view, NAN);
  bool on[3] = {true, false, false};
  /* a transposed convolution with a bias: declined (backward data has none) */
  bool declined = c->transposed && bias;
  if (mask[0] || mask[1] || mask[2])
  {
    /* split over the images where there are two or more */
    uint64_t sp = !declined && images_split(c, true);
    run_compare(i, "forward", fwd, &node, &out, &want, 1, on, declined ? 0 : 1, declined ? 1 : 0,
                declined ? 1 : 0, sp, sp);
  }
  tt_t go = tt_like(&shape[0], c->layout);
  tt_fill(&go.view, -1, 1, 0);
  tpu_value_t bin[3] = {tt_value(&go.view), tt_value(&x.view), tt_value(&w.view)};
  attrs_of(c, true, mask, at, &na);
  tpu_node_t bn = tt_node(bin, 3, NULL, 3, at, na);
  bn.op = tpu_op_lookup("convolution_backward");
  tpu_view_t bs[3];
  CHECK_OK(bwd->infer(bwd, &bn, bs));
  tt_t outs[3], wants[3];
  for (int k = 0; k < 3; ++k) {
    outs[k] = tt_like(&bs[k], k == 0 ? ol : TT_CONTIG);
    wants[k] = tt_like(&bs[k], TT_CONTIG);
    tt_fill_value(&outs[k].view, NAN);
    on[k] = mask[k] != 0;
  }
  /* the input gradient and the weight gradient (with the bias's) */
  /* the input gradient split over the images, the weight gradient over
   * channels (where it has 32 or more) or a group at a time */
  /* On AMX both run whole (exact counts below). Without AMX the flags are
   * 2.6's measured choices; a newer oneDNN may run those products whole, so
   * there either outcome is accepted, counted consistently. */
  bool by_group = c->w_by_group && !amx(), declines = c->w_declined && !amx();
  uint64_t w_declined = mask[1] && declines, ran = (mask[0] != 0) + (mask[1] != 0) - w_declined;
  uint64_t lo = (mask[0] && images_split(c, false)) + (mask[1] && by_group);
  uint64_t hi = lo + (mask[1] && !by_group && !declines && split_on());
  if (mask[1] && (by_group || declines)) lo = (mask[0] && images_split(c, false)), hi = lo + 1;
  run_compare(i, "backward", bwd, &bn, outs, wants, 3, on, ran, w_declined, 0, lo, hi);
  for (int k = 0; k < 3; ++k) tt_free(&outs[k]), tt_free(&wants[k]);
  tt_free(&go), tt_free(&out), tt_free(&want);
  tt_free(&x), tt_free(&w), tt_free(&b);
}

TEST(conv_mxu_bfloat16_matches_reference) {
  if (!tpu_mxu_supports(TPU_DTYPE_BF16)) return; /* no unit on this CPU */
  const int64_t all[3] = {1, 1, 1};
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i)
    run_case(i, &k_cases[i], false, all);
}

/* The same on one OpenMP team per product (no split, but the grouped
 * weight gradient's route a group at a time). */
TEST(conv_mxu_bfloat16_unsplit_matches_reference) {
  if (!tpu_mxu_supports(TPU_DTYPE_BF16)) return;
  const int64_t all[3] = {1, 1, 1};
  CHECK_OK(tpu_config_set(TPU_CONFIG_CONV_SPLIT, "0"));
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); ++i)
    run_case(i, &k_cases[i], false, all);
  CHECK_OK(tpu_config_set(TPU_CONFIG_CONV_SPLIT, NULL));
}

TEST(conv_mxu_masks_and_declines) {
  if (!tpu_mxu_supports(TPU_DTYPE_BF16)) return;
  /* each gradient alone, and the bias's alone (not the unit's: the sum of
   * grad_output on the float32 path) */
  const int64_t masks[3][3] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}};
  for (int m = 0; m < 3; ++m) run_case(0, &k_cases[0], false, masks[m]);
  /* a transposed convolution with a bias: forward declined, backward ran */
  const int64_t all[3] = {1, 1, 1};
  run_case(11, &k_cases[11], true, all);
}

/* float32 is not offered to the unit (conv_mxu.c): nothing counted. */
TEST(conv_mxu_float32_stays_on_its_path) {
  const tpu_op_def_t* fwd = tt_def("convolution");
  if (!fwd) return;
  int64_t xs[4] = {1, 8, 6, 6}, ws[4] = {8, 8, 3, 3};
  tt_t x = tt_make(TPU_DTYPE_F32, 4, xs, TT_CONTIG), w = tt_make(TPU_DTYPE_F32, 4, ws, TT_CONTIG);
  tt_fill(&x.view, -1, 1, 0), tt_fill(&w.view, -1, 1, 0);
  tpu_value_t in[3] = {tt_value(&x.view), tt_value(&w.view), tt_value(NULL)};
  const mxu_case_t c = {2, 1, 8, 8, 1, {6, 6}, {3, 3}, 1, 1, 1, 0, false, false, TT_CONTIG, false, false};
  tpu_attr_t at[8];
  tpu_node_t node;
  tpu_mxu_info_t before, after;
  tt_t out = run_forward_counted(fwd, &c, in, at, &node, &before, &after);
  tt_t want = tt_like(&out.view, TT_CONTIG);
  node.outputs = &want.view;
  CHECK_OK(tpu_conv_reference(fwd, &node));
  CHECK(tt_max_rel_diff(&out.view, &want.view) <= 1e-5);
  CHECK(after.convs == before.convs && after.conv_declined == before.conv_declined);
  tt_free(&x), tt_free(&w), tt_free(&out), tt_free(&want);
}

/* 1x1 convolutions with no padding and one group run as GEMMs: on the
 * operands' NCHW layout per image (conv_mxu_1x1.c: stride 1, images of
 * TPU_CONV_GEMM_MIN_POSITIONS or more positions), else as one GEMM with the
 * grid positions as rows (conv_mxu_rows.c: the forward and input gradient
 * at stride 2 or of channels_last operands; the rest, small NCHW images at
 * stride 1 and those weight gradients, on the primitives). Forward, input
 * and weight gradients (with the bias's) against
 * the reference, odd channel counts and positions (not multiples of the
 * kernels' 16/32 or of a column block), batches of 1 (split over
 * positions) and 3 (uneven image parts), with and without a bias; the
 * unit's conv_gemm counter must show which products ran as GEMMs, and its
 * conv_split counter on which path (run_compare). */
static const mxu_case_t k_pointwise[] = {
    {2, 1, 17, 33, 1, {19, 21}, {1, 1}, 1, 0, 1, 0, false, true, TT_CONTIG, false, false},
    {2, 3, 24, 40, 1, {23, 17}, {1, 1}, 1, 0, 1, 0, false, false, TT_CONTIG, false, false},
    {2, 3, 40, 24, 1, {20, 21}, {1, 1}, 1, 0, 1, 0, false, true, TT_CONTIG, false, false},
    /* one image: split over the channels it writes */
    {2, 1, 64, 48, 1, {15, 27}, {1, 1}, 1, 0, 1, 0, false, false, TT_CONTIG, false, false},
    /* few channels (no 16-channel block), 1-D and 3-D */
    {1, 2, 5, 7, 1, {401}, {1}, 1, 0, 1, 0, false, true, TT_CONTIG, false, false},
    {3, 2, 32, 16, 1, {8, 7, 7}, {1, 1, 1}, 1, 0, 1, 0, false, true, TT_CONTIG, false, false},
    /* transposed 1x1 (no bias): its forward is the input-gradient GEMM */
    {2, 2, 48, 20, 1, {20, 20}, {1, 1}, 1, 0, 1, 0, true, false, TT_CONTIG, false, false},
    /* small images, padded strides and permutations at stride 1: the
     * primitives; channels_last: positions as rows (in place) */
    {2, 3, 24, 40, 1, {7, 9}, {1, 1}, 1, 0, 1, 0, false, true, TT_CONTIG, false, false},
    {2, 1, 96, 40, 1, {7, 7}, {1, 1}, 1, 0, 1, 0, false, false, TT_CONTIG, false, false},
    {2, 2, 24, 40, 1, {20, 20}, {1, 1}, 1, 0, 1, 0, false, true, TT_PADDED, false, false},
    {2, 2, 24, 40, 1, {20, 20}, {1, 1}, 1, 0, 1, 0, false, true, TT_REVERSED, false, false},
    {2, 2, 24, 40, 1, {20, 20}, {1, 1}, 1, 0, 1, 0, false, true, TT_CHANNELS_LAST, false, false},
    {2, 1, 33, 17, 1, {9, 13}, {1, 1}, 1, 0, 1, 0, false, false, TT_CHANNELS_LAST, false, false},
    /* 14x14: per image for the forward and input gradient on AMX tiles,
     * the weight gradient (and all three without tiles) on the primitives */
    {2, 2, 64, 32, 1, {14, 14}, {1, 1}, 1, 0, 1, 0, false, true, TT_CONTIG, false, false},
    {2, 1, 40, 48, 1, {13, 17}, {1, 1}, 1, 0, 1, 0, false, false, TT_CONTIG, false, false},
    /* one position per image: rows are images */
    {2, 3, 20, 12, 1, {1, 1}, {1, 1}, 1, 0, 1, 0, false, true, TT_CONTIG, false, false},
    /* stride 2 (a strided subsample; the input gradient zero off the grid),
     * NCHW and channels_last, odd images, 1-D, 2-D, 3-D */
    {2, 3, 24, 40, 1, {9, 11}, {1, 1}, 2, 0, 1, 0, false, true, TT_CONTIG, false, false},
    {2, 1, 17, 33, 1, {15, 13}, {1, 1}, 2, 0, 1, 0, false, false, TT_CONTIG, false, false},
    {2, 2, 33, 17, 1, {11, 10}, {1, 1}, 2, 0, 1, 0, false, true, TT_CHANNELS_LAST, false, false},
    {2, 1, 40, 24, 1, {23, 21}, {1, 1}, 2, 0, 1, 0, false, false, TT_CHANNELS_LAST, false, false},
    {1, 2, 16, 12, 1, {31}, {1}, 2, 0, 1, 0, false, true, TT_CONTIG, false, false},
    {3, 2, 16, 24, 1, {5, 6, 7}, {1, 1, 1}, 2, 0, 1, 0, false, true, TT_CHANNELS_LAST, false, false},
    {2, 2, 16, 24, 1, {9, 9}, {1, 1}, 3, 0, 1, 0, false, false, TT_PADDED, false, false},
    /* transposed, stride 2 with output padding (positions off the grid) */
    {2, 2, 16, 24, 1, {6, 7}, {1, 1}, 2, 0, 1, 1, true, false, TT_CONTIG, false, false},
    {2, 1, 24, 16, 1, {5, 4}, {1, 1}, 2, 0, 1, 0, true, false, TT_CHANNELS_LAST, false, false},
};

static void pointwise_cases(bool gemm_on) {
  const int64_t all[3] = {1, 1, 1};
  for (size_t i = 0; i < sizeof(k_pointwise) / sizeof(k_pointwise[0]); ++i) {
    const mxu_case_t* c = &k_pointwise[i];
    tpu_mxu_info_t before, after;
    tpu_mxu_get_info(&before);
    run_case(100 + i, c, false, all);
    tpu_mxu_get_info(&after);
    uint64_t want = !gemm_on ? 0
                             : (path_of_dir(c, true) != PRIMITIVES) +
                                   (path_of_dir(c, false) != PRIMITIVES) +
                                   (path_of(c) == PER_IMAGE);
    if (after.conv_gemm - before.conv_gemm != want)
      tpu_test_fail(__FILE__, __LINE__, "pointwise case %zu: %llu products as GEMMs (want %llu)",
                    i, (unsigned long long)(after.conv_gemm - before.conv_gemm),
                    (unsigned long long)want);
  }
}

TEST(conv_mxu_pointwise_gemm_matches_reference) {
  if (!tpu_mxu_supports(TPU_DTYPE_BF16)) return;
  pointwise_cases(true);
  /* each gradient alone (the bias's alone is not the unit's) */
  const int64_t masks[2][3] = {{1, 0, 0}, {0, 1, 1}};
  for (int m = 0; m < 2; ++m) run_case(100, &k_pointwise[0], false, masks[m]);
}

TEST(conv_mxu_pointwise_gemm_unsplit_matches_reference) {
  if (!tpu_mxu_supports(TPU_DTYPE_BF16)) return;
  CHECK_OK(tpu_config_set(TPU_CONFIG_CONV_SPLIT, "0"));
  pointwise_cases(true);
  CHECK_OK(tpu_config_set(TPU_CONFIG_CONV_SPLIT, NULL));
}

/* TORCH_TPU_CONV_GEMM=0: the same problems on the convolution primitives. */
TEST(conv_mxu_pointwise_gemm_off_uses_the_primitives) {
  if (!tpu_mxu_supports(TPU_DTYPE_BF16)) return;
  CHECK_OK(tpu_config_set(TPU_CONFIG_CONV_GEMM, "0"));
  pointwise_cases(false);
  CHECK_OK(tpu_config_set(TPU_CONFIG_CONV_GEMM, NULL));
}

/* oneDNN 3.2's matmul runs a bfloat16 GEMM it deems small on AVX512-BF16
 * even where the CPU has AMX tiles (mxu.h: tpu_mxu_gemm_on_tiles), which
 * caught ResNet-50's 56x56 1x1 layers as per-image GEMMs ([64, 256] @
 * [256, 3136]: about 100 GFLOP/s against 700-900 on the tiles); with the
 * positions as rows ([3136, 256] @ [256, 64], the image read transposed)
 * they stay on the tiles. So conv_mxu_1x1.c runs such a forward or input
 * gradient by positions, a whole image a part: one image is one GEMM,
 * where the per-image path splits it over two channel blocks. */
TEST(conv_mxu_pointwise_off_the_tiles_runs_by_positions) {
  if (!tpu_mxu_supports(TPU_DTYPE_BF16)) return;
  mxu_gemm_t img, rows;
  memset(&img, 0, sizeof img), memset(&rows, 0, sizeof rows);
  img.a = mxu_matrix(4096, TPU_DTYPE_BF16, 64, 256, 256, 1);
  img.b = mxu_matrix(4096, TPU_DTYPE_BF16, 256, 3136, 3136, 1);
  img.c = mxu_matrix(4096, TPU_DTYPE_BF16, 64, 3136, 3136, 1);
  rows.a = mxu_matrix(4096, TPU_DTYPE_BF16, 3136, 256, 1, 3136);
  rows.b = mxu_matrix(4096, TPU_DTYPE_BF16, 256, 64, 1, 256);
  rows.c = mxu_matrix(4096, TPU_DTYPE_BF16, 3136, 64, 64, 1);
  img.alpha = rows.alpha = 1.0f;
  img.serial = rows.serial = true;
  CHECK(tpu_mxu_gemm_on_tiles(&rows));
  CHECK(tpu_mxu_gemm_on_tiles(&img) == !amx());
  /* the layer itself (batch 2, and 1 with a bias), each product against
   * the reference */
  const mxu_case_t c = {2, 2, 256, 64, 1, {56, 56}, {1, 1}, 1, 0, 1, 0, false, false, TT_CONTIG, false, false};
  const mxu_case_t c1 = {2, 1, 64, 256, 1, {56, 56}, {1, 1}, 1, 0, 1, 0, false, true, TT_CONTIG, false, false};
  const int64_t all[3] = {1, 1, 1};
  run_case(200, &c, false, all);
  run_case(201, &c1, false, all);
  /* one image, 256 -> 64: by positions one GEMM, unsplit; per image two
   * channel blocks side by side where the pool has two threads */
  const tpu_op_def_t* fwd = tt_def("convolution");
  int64_t xs[4] = {1, 256, 56, 56}, ws[4] = {64, 256, 1, 1};
  tt_t x = tt_make(TPU_DTYPE_BF16, 4, xs, TT_CONTIG), w = tt_make(TPU_DTYPE_BF16, 4, ws, TT_CONTIG);
  tt_fill(&x.view, -1, 1, 0), tt_fill(&w.view, -1, 1, 0);
  tpu_value_t in[3] = {tt_value(&x.view), tt_value(&w.view), tt_value(NULL)};
  tpu_attr_t at[8];
  tpu_node_t node;
  tpu_mxu_info_t before, after;
  tt_t out = run_forward_counted(fwd, &c, in, at, &node, &before, &after);
  CHECK(after.conv_gemm == before.conv_gemm + 1);
  uint64_t parts = amx() || !split_on() ? 1u : 2u;
  CHECK(after.gemms - before.gemms == parts);
  CHECK(after.conv_split - before.conv_split == (parts > 1 ? 1u : 0u));
  tt_free(&x), tt_free(&w), tt_free(&out);
}
