/* conv_mxu_1x1.c — 1x1 convolutions on the matrix unit as plain GEMMs
 * (conv.h: tpu_conv_mxu_1x1; the unit: mxu.h).
 *
 * A convolution with a 1x1 kernel, stride 1, no padding and one group is a
 * GEMM per image: with the spatial dims of an image flattened to P
 * positions, X[n] is a [cx, P] matrix and Y[n] a [cy, P] one, and
 *   CONV_Y  Y[n]  = W · X[n]             (+ bias[co] on row co)
 *   CONV_X  X[n]  = Wᵀ · Y[n]
 *   CONV_W  dW    = Σ_n Y[n] · X[n]ᵀ     (the bias gradient: Σ_n,p Y[n])
 * with W the [cy, cx] matrix of the weight. On PyTorch's NCHW layout those
 * matrices have dense rows (positions), so the unit's bfloat16 GEMM
 * (tpu_mxu_gemm: oneDNN's brgemm matmul) reads and writes the tensors where
 * they are. oneDNN's convolution primitives (conv_mxu.c) want the blocked
 * nChw16c layout instead, and reordering X in and Y out on every call took
 * about a third of a 56x56 ResNet-50 1x1 layer's time (bench/RESULTS.md,
 * issue 21). The bias of CONV_Y is laid into Y first and the GEMM adds onto
 * it (beta 1: one rounding of the float32 sum plus the bias). CONV_W sums
 * the images' products into a float32 scratch dW (beta 1 from the second
 * image on) and rounds once at the end, as the convolution primitive does.
 *
 * Which problems: what conv_mxu.c offers the unit (bfloat16) with that
 * geometry, whose X and Y have their spatial dims collapsing into one dense
 * run (NCHW, any batch and channel strides) of at least
 * tpu_conv_gemm_min_positions(dir) positions (conv.h: 384, or 192 for the
 * forward and input gradient on AMX tiles); the weight any strides (the unit
 * copies a weight with neither dense rows nor columns). Others return not
 * done: the forward and input gradient at stride 2 or of channels_last
 * operands go to conv_mxu_rows.c (one GEMM with the positions as rows),
 * the rest to conv_mxu.c's primitives. Why the size: measured side by side on
 * ResNet-50's 1x1 layers at batch 4 (Zen 4, AVX512-BF16, 2 cores, load
 * 13), primitives' time / GEMMs' (min) for forward, input and weight
 * gradient: 1.16-1.39 at 56x56, 1.10-1.14 at 28x28, but 0.90-0.92 at
 * 14x14 and 0.65-0.78 (forward, input gradient) at 7x7, where each image's
 * GEMM lays out its operands for the kernel (the input gradient's Wᵀ, 1M
 * elements against 49 positions) while the primitives read their blocked
 * weight from the weight cache (conv_mxu_rows.c's one GEMM against the
 * cached weight lost there too, 0.64-0.94x, for the transposes NCHW needs).
 * By positions: where the CPU has AMX tiles but oneDNN would run the
 * forward's or input gradient's per-image GEMM on its AVX512-BF16 kernel
 * (mxu.h: tpu_mxu_gemm_on_tiles; few input channels against many
 * positions, e.g. [64, 256] @ [256, 3136] of ResNet-50's 56x56 layers,
 * about 7x slower there), each image runs as the transposed product
 * instead, its positions the rows (Yᵀ = Xᵀ · Wᵀ, Xᵀ = Yᵀ · W: [3136, 256]
 * @ [256, 64] stays on the tiles), the image read transposed where it
 * lies and the [P, C] result transposed into place by the same thread, so
 * an image is one piece of work with no pass between (conv_mxu_rows.c's
 * gather, GEMM and scatter are three, each waiting for the slowest
 * thread: 1.2-2.3 against 2.8-3.6 ms min, load 4.8). Should the unit
 * decline such a GEMM, *out_rows sends the product to conv_mxu_rows.c.
 * TORCH_TPU_CONV_GEMM=0 turns this path off
 * (read per call, for side-by-side measurements).
 *
 * Threads: as conv_mxu.c splits its primitives, over the compute pool with
 * one single-threaded GEMM per piece of work (mxu_gemm_t.serial): CONV_Y /
 * CONV_X over the images (and, with fewer images than threads, over the
 * channels each writes), CONV_W over the rows of dW = Σ Y[n] · X[n]ᵀ, or
 * of dWᵀ = Σ X[n] · Y[n]ᵀ
 * where X has more channels than Y (the kernel lays its right factor out
 * for each part, so the smaller one is that), in blocks of 16 (32 or more
 * rows), the bias gradient a part of its own. Parts are row blocks because
 * the unit's kernels take a strided row (A, C) but not a right factor or a
 * result with gaps between its rows (brgemm declines those). A product
 * that ran split is counted in tpu_mxu_info_t's conv_split, like the
 * primitives'. TORCH_TPU_CONV_SPLIT=0 (or a pool of one thread) runs each
 * GEMM on the unit's OpenMP team instead (tpu_mxu_gemm as a matmul runs).
 */
#include <stdlib.h>
#include <string.h>

#include "tpu/config.h"
#include "kernels/conv/conv.h"
#include "kernels/common/kernel_util.h"
#include "kernels/matmul/mxu.h"

#define MAX_PARTS 64 /* threads a product splits over, at most */

/* An operand [N, C, spatial...] as N matrices [C, P] with dense rows. */
typedef struct img_mat {
  uint64_t addr;
  tpu_dtype_t dtype;
  int64_t c, p, sn, sc; /* channels, positions, image and channel strides */
} img_mat_t;

static bool as_images(const tpu_view_t* v, img_mat_t* out) {
  int64_t expect = 1;
  for (int d = v->ndim - 1; d >= 2; --d) {
    if (v->sizes[d] == 1) continue;
    if (v->strides[d] != expect) return false;
    expect *= v->sizes[d];
  }
  out->addr = v->addr, out->dtype = v->dtype;
  out->c = v->sizes[1], out->p = expect, out->sn = v->strides[0], out->sc = v->strides[1];
  for (int d = 2; d < v->ndim; ++d)
    if (v->sizes[d] == 0) out->p = 0;
  return true;
}

/* mxu_matrix at element offset `off` of base `addr`. */
static tpu_view_t mat(uint64_t addr, tpu_dtype_t dt, int64_t off, int64_t rows, int64_t cols,
                      int64_t rs, int64_t cs) {
  return mxu_matrix(addr + (uint64_t)(off * (int64_t)tpu_dtype_size(dt)), dt, rows, cols, rs, cs);
}

/* One problem, and the pieces of work its parts take. */
typedef struct pw_problem {
  int dir;
  img_mat_t x, y;
  tpu_view_t w;           /* [cy, cx, 1...] */
  const tpu_view_t* bias; /* CONV_Y: added; CONV_W: the gradient written; or NULL */
  int64_t n;
  /* CONV_W: the float32 sum, dW [cy, cx] or (transposed) dWᵀ [cx, cy],
   * row-major */
  float* acc;
  bool transposed;
  /* CONV_X split into row blocks: Wᵀ as a dense row-major copy (the kernel
   * takes a block of a transposed matrix's rows only whole), else NULL */
  uint16_t* wt;
  /* parts: `per_image` row blocks of each image's output (CONV_Y / CONV_X)
   * or of the sum (CONV_W), over `rows` rows (mxu_row_part); CONV_W
   * with a bias: one more part, the bias gradient */
  int64_t per_image, rows, count;
  bool serial;
  /* CONV_Y / CONV_X off the AMX tiles: each part a block of an image's
   * positions as the GEMM's rows (Yᵀ = Xᵀ · Wᵀ, Xᵀ = Yᵀ · W), the result
   * transposed into place; `rows` are then the positions. bias_row: the
   * bias as a dense row (NULL: none, or the view itself) */
  bool by_positions;
  uint16_t* bias_row;
  tpu_status_t* status; /* per part */
  bool* done;           /* per part: the unit ran its GEMMs */
} pw_problem_t;

static tpu_status_t gemm(const pw_problem_t* pb, tpu_view_t a, tpu_view_t b, tpu_view_t c,
                         float beta, bool* out_done) {
  mxu_gemm_t g;
  memset(&g, 0, sizeof g);
  g.a = a, g.b = b, g.c = c, g.alpha = 1.0f, g.beta = beta;
  g.graph = NULL; /* activations: never the weight cache's */
  g.serial = pb->serial;
  g.team = true; /* the per-image GEMMs' tile checks assume the whole product */
  return tpu_mxu_gemm(&g, out_done);
}

/* CONV_Y / CONV_X: the GEMM of output channels [r0, r1) of image n,
 * C = A · B (beta and the bias aside). */
static void image_gemm(const pw_problem_t* pb, int64_t n, int64_t r0, int64_t r1, tpu_view_t* out_a,
                       tpu_view_t* out_b, tpu_view_t* out_c) {
  const img_mat_t *in = pb->dir == CONV_DIR_Y ? &pb->x : &pb->y,
                  *out = pb->dir == CONV_DIR_Y ? &pb->y : &pb->x;
  int64_t rows = r1 - r0, P = in->p;
  tpu_dtype_t dt = pb->w.dtype;
  const int64_t* ws = pb->w.strides;
  /* rows of W [cy, cx] for CONV_Y; of Wᵀ [cx, cy] for CONV_X */
  *out_a = pb->dir == CONV_DIR_Y ? mat(pb->w.addr, dt, r0 * ws[0], rows, in->c, ws[0], ws[1])
           : pb->wt ? mat((uint64_t)(uintptr_t)pb->wt, dt, r0 * in->c, rows, in->c, in->c, 1)
                    : mat(pb->w.addr, dt, r0 * ws[1], rows, in->c, ws[1], ws[0]);
  *out_b = mat(in->addr, in->dtype, n * in->sn, in->c, P, in->sc, 1);
  *out_c = mat(out->addr, out->dtype, n * out->sn + r0 * out->sc, rows, P, out->sc, 1);
}

/* CONV_Y / CONV_X: output channels [r0, r1) of image n. */
static tpu_status_t run_image(pw_problem_t* pb, int64_t n, int64_t r0, int64_t r1,
                              bool* out_done) {
  const img_mat_t* out = pb->dir == CONV_DIR_Y ? &pb->y : &pb->x;
  int64_t rows = r1 - r0, P = out->p;
  tpu_view_t a, b, c;
  image_gemm(pb, n, r0, r1, &a, &b, &c);
  float beta = 0.0f;
  if (pb->bias) { /* Y's rows start from the bias; the GEMM adds onto it */
    const tpu_view_t* bv = pb->bias;
    const char* bp = (const char*)tpu_view_ptr(bv);
    size_t es = tpu_dtype_size(bv->dtype);
    for (int64_t r = 0; r < rows; ++r) {
      uint16_t v;
      memcpy(&v, bp + (size_t)((r0 + r) * bv->strides[0]) * es, sizeof v);
      uint16_t* row = (uint16_t*)tpu_view_ptr(&c) + r * out->sc;
      for (int64_t j = 0; j < P; ++j) row[j] = v;
    }
    beta = 1.0f;
  }
  return gemm(pb, a, b, c, beta, out_done);
}

/* CONV_Y / CONV_X by positions: positions [p0, p1) of image n as the rows
 * of one GEMM on the tiles ([p1 - p0, K] · [K, C], the image read
 * transposed in place), its [p1 - p0, C] result transposed into the
 * output in 16 x 16 tiles; all on the calling thread. */
static tpu_status_t run_positions(pw_problem_t* pb, int64_t n, int64_t p0, int64_t p1,
                                  bool* out_done) {
  bool fwd = pb->dir == CONV_DIR_Y;
  const img_mat_t *in = fwd ? &pb->x : &pb->y, *out = fwd ? &pb->y : &pb->x;
  int64_t rows = p1 - p0, C = out->c;
  tpu_dtype_t dt = pb->w.dtype;
  const int64_t* ws = pb->w.strides;
  size_t bytes = (size_t)(rows * C) * sizeof(uint16_t);
  uint16_t* m = tpu_scratch_alloc(bytes ? bytes : 1);
  if (!m) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matrix unit: no %zu bytes of scratch", bytes);
  mxu_gemm_t g;
  memset(&g, 0, sizeof g);
  g.a = mat(in->addr, in->dtype, n * in->sn + p0, rows, in->c, 1, in->sc);
  /* Wᵀ [cx, cy] (forward) or W [cy, cx] (input gradient) */
  g.b = fwd ? mat(pb->w.addr, dt, 0, in->c, C, ws[1], ws[0])
            : mat(pb->w.addr, dt, 0, in->c, C, ws[0], ws[1]);
  g.c = mat((uint64_t)(uintptr_t)m, dt, 0, rows, C, C, 1);
  g.alpha = 1.0f, g.serial = pb->serial, g.team = true;
  if (pb->bias) {
    const tpu_view_t* bv = pb->bias;
    g.has_bias = true;
    g.bias = pb->bias_row ? mat((uint64_t)(uintptr_t)pb->bias_row, bv->dtype, 0, 1, C, C, 1)
                          : mat(bv->addr, bv->dtype, 0, 1, C, C, 1);
    g.bias.strides[0] = 0;
  }
  tpu_status_t st = tpu_mxu_gemm(&g, out_done);
  if (st == TPU_OK && *out_done) {
    uint16_t* dst = (uint16_t*)(uintptr_t)out->addr + n * out->sn + p0;
    int64_t sc = out->sc, c0 = 0;
    for (; c0 + 16 <= C; c0 += 16) {
      int64_t p = 0;
      for (; p + 16 <= rows; p += 16) tpu_conv_transpose16(m + p * C + c0, C, dst + c0 * sc + p, sc);
      for (; p < rows; ++p)
        for (int64_t c = c0; c < c0 + 16; ++c) dst[c * sc + p] = m[p * C + c];
    }
    for (int64_t p = 0; p < rows; ++p)
      for (int64_t c = c0; c < C; ++c) dst[c * sc + p] = m[p * C + c];
  }
  tpu_scratch_free(m);
  return st;
}

/* CONV_W: rows [r0, r1) of the sum (dW's output channels, or dWᵀ's input
 * channels), every image summed in float32, rounded into W. */
static tpu_status_t run_weight_rows(pw_problem_t* pb, int64_t r0, int64_t r1, bool* out_done) {
  /* dW = Σ Y[n] · X[n]ᵀ, or dWᵀ = Σ X[n] · Y[n]ᵀ */
  const img_mat_t *l = pb->transposed ? &pb->x : &pb->y, *r = pb->transposed ? &pb->y : &pb->x;
  int64_t rows = r1 - r0, cols = r->c, P = pb->x.p;
  *out_done = true;
  for (int64_t n = 0; n < pb->n && *out_done; ++n) {
    tpu_view_t a = mat(l->addr, l->dtype, n * l->sn + r0 * l->sc, rows, P, l->sc, 1);
    tpu_view_t b = mat(r->addr, r->dtype, n * r->sn, P, cols, 1, r->sc);
    tpu_view_t c = mat((uint64_t)(uintptr_t)pb->acc, TPU_DTYPE_F32, r0 * cols, rows, cols, cols, 1);
    TPU_RETURN_IF_ERROR(gemm(pb, a, b, c, n ? 1.0f : 0.0f, out_done));
  }
  if (!*out_done) return TPU_OK;
  char* wp = (char*)tpu_view_ptr(&pb->w);
  size_t es = tpu_dtype_size(pb->w.dtype);
  int64_t rs = pb->transposed ? pb->w.strides[1] : pb->w.strides[0],
          cs = pb->transposed ? pb->w.strides[0] : pb->w.strides[1];
  for (int64_t i = r0; i < r1; ++i)
    for (int64_t k = 0; k < cols; ++k) {
      uint16_t v = tpu_f32_to_bf16(pb->acc[i * cols + k]);
      memcpy(wp + (size_t)(i * rs + k * cs) * es, &v, sizeof v);
    }
  return TPU_OK;
}

/* The bias gradient: the sum of Y over images and positions, per channel. */
static void run_bias_grad(pw_problem_t* pb) {
  const tpu_view_t* bv = pb->bias;
  char* bp = (char*)tpu_view_ptr(bv);
  size_t es = tpu_dtype_size(bv->dtype);
  for (int64_t r = 0; r < pb->y.c; ++r) {
    double sum = 0.0;
    for (int64_t n = 0; n < pb->n; ++n) {
      const uint16_t* row =
          (const uint16_t*)(uintptr_t)pb->y.addr + n * pb->y.sn + r * pb->y.sc;
      for (int64_t j = 0; j < pb->y.p; ++j) sum += tpu_bf16_to_f32(row[j]);
    }
    uint16_t v = tpu_f32_to_bf16((float)sum);
    memcpy(bp + (size_t)(r * bv->strides[0]) * es, &v, sizeof v);
  }
}

/* Part i of pb: row block i % per_image (of image i / per_image); CONV_W
 * with a bias: part `count` is the bias gradient. */
static void run_part(pw_problem_t* pb, int64_t i) {
  pb->done[i] = true;
  if (pb->dir == CONV_DIR_W && i == pb->count) {
    run_bias_grad(pb);
    return;
  }
  int64_t r0, r1;
  mxu_row_part(pb->rows, pb->per_image, i % pb->per_image, &r0, &r1);
  if (pb->by_positions)
    pb->status[i] = run_positions(pb, i / pb->per_image, r0, r1, &pb->done[i]);
  else if (pb->dir == CONV_DIR_W)
    pb->status[i] = run_weight_rows(pb, r0, r1, &pb->done[i]);
  else
    pb->status[i] = run_image(pb, i / pb->per_image, r0, r1, &pb->done[i]);
}

static void parts_run(void* arg, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) run_part((pw_problem_t*)arg, i);
}

int64_t tpu_conv_gemm_min_positions(int dir) {
  return dir != CONV_DIR_W && tpu_mxu_has_tiles() ? TPU_CONV_GEMM_MIN_POSITIONS_TILES
                                                  : TPU_CONV_GEMM_MIN_POSITIONS;
}

bool tpu_conv_mxu_1x1_fits(const conv_args_t* a) {
  const conv_geom_t* g = &a->g;
  if (g->groups != 1 || a->dtype != TPU_DTYPE_BF16 || !tpu_config_bool(TPU_CONFIG_CONV_GEMM)) return false;
  for (int d = 0; d < 3; ++d)
    if (g->K[d] != 1 || g->stride[d] != 1 || g->pad[d] != 0) return false;
  return true;
}

tpu_status_t tpu_conv_mxu_1x1(int dir, const tpu_view_t* x, const tpu_view_t* w,
                              const tpu_view_t* y, const tpu_view_t* bias, bool* out_rows,
                              bool* out_done) {
  *out_done = false;
  *out_rows = false;
  pw_problem_t* pb = calloc(1, sizeof *pb);
  if (!pb) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matrix unit: no memory for a plan");
  pb->dir = dir, pb->w = *w, pb->bias = bias, pb->n = x->sizes[0];
  tpu_status_t st = TPU_OK;
  if (!as_images(x, &pb->x) || !as_images(y, &pb->y) || pb->x.p != pb->y.p ||
      w->sizes[0] != pb->y.c || w->sizes[1] != pb->x.c || (bias && bias->ndim != 1) ||
      pb->x.p < tpu_conv_gemm_min_positions(dir)) {
    free(pb);
    return TPU_OK; /* not this path's: the primitives' */
  }
  int threads = tpu_config_bool(TPU_CONFIG_CONV_SPLIT) ? tpu_parallel_threads() : 1;
  if (threads > MAX_PARTS) threads = MAX_PARTS;
  /* the rows each part computes a block of: the output's channels; the
   * weight gradient as dW = Σ Y Xᵀ or dWᵀ = Σ X Yᵀ, whichever has the
   * smaller right factor (each part lays all of it out for the kernel) */
  pb->transposed = dir == CONV_DIR_W && pb->x.c > pb->y.c;
  pb->rows = dir == CONV_DIR_Y ? pb->y.c
             : dir == CONV_DIR_X ? pb->x.c
             : pb->transposed ? pb->x.c : pb->y.c;
  int64_t blocks = pb->rows / 16;
  /* CONV_Y / CONV_X: one part per image, and fewer images than threads
   * in blocks of rows too (32 or more); the weight gradient: blocks of
   * rows */
  bool by_rows = dir == CONV_DIR_W || pb->n < threads;
  int64_t want = dir == CONV_DIR_W ? threads : (threads + pb->n - 1) / pb->n;
  pb->per_image = by_rows && threads > 1 && blocks >= 2
                      ? (blocks < want ? blocks : want)
                      : 1;
  int64_t units;
  if (dir != CONV_DIR_W) {
    /* the first part's GEMM (all parts are alike but the last row block):
     * off the tiles (mxu.h: tpu_mxu_gemm_on_tiles), the rows path's one
     * GEMM over all images' positions, which stays on them, is the faster
     * (its transposes in and out included) */
    int64_t r0, r1;
    mxu_row_part(pb->rows, pb->per_image, 0, &r0, &r1);
    mxu_gemm_t probe;
    memset(&probe, 0, sizeof probe);
    image_gemm(pb, 0, r0, r1, &probe.a, &probe.b, &probe.c);
    probe.alpha = 1.0f, probe.beta = bias ? 1.0f : 0.0f;
    probe.serial = threads > 1 && pb->n * pb->per_image > 1;
    if (!tpu_mxu_gemm_on_tiles(&probe)) {
      /* by positions, a whole image a part (a block of an image's
       * positions would be a transposed A with gaps, which brgemm
       * declines) */
      pb->by_positions = true;
      pb->rows = pb->x.p;
      pb->per_image = 1;
      if (bias && bias->strides[0] != 1 && pb->y.c > 1) {
        pb->bias_row = malloc((size_t)pb->y.c * sizeof *pb->bias_row);
        if (!pb->bias_row) {
          free(pb);
          return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matrix unit: no memory for a bias");
        }
        const uint16_t* bp = (const uint16_t*)tpu_view_ptr(bias);
        for (int64_t i = 0; i < pb->y.c; ++i) pb->bias_row[i] = bp[i * bias->strides[0]];
      }
    }
    units = pb->n * pb->per_image;
    if (dir == CONV_DIR_X && pb->per_image > 1 && !pb->by_positions) {
      int64_t cy = pb->y.c, cx = pb->x.c;
      pb->wt = tpu_scratch_alloc((size_t)(cx * cy) * sizeof(uint16_t));
      if (!pb->wt) {
        free(pb);
        return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matrix unit: no scratch for a weight");
      }
      const uint16_t* wp = (const uint16_t*)tpu_view_ptr(w);
      for (int64_t k = 0; k < cx; ++k)
        for (int64_t r = 0; r < cy; ++r)
          pb->wt[k * cy + r] = wp[r * w->strides[0] + k * w->strides[1]];
    }
  } else {
    size_t bytes = (size_t)(pb->y.c * pb->x.c) * sizeof(float);
    pb->acc = tpu_scratch_alloc(bytes ? bytes : 1);
    if (!pb->acc) {
      free(pb);
      return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matrix unit: no %zu bytes of scratch", bytes);
    }
    pb->count = pb->per_image;
    units = pb->count + (bias != NULL);
  }
  pb->status = calloc((size_t)units, sizeof *pb->status);
  pb->done = calloc((size_t)units, sizeof *pb->done);
  if (!pb->status || !pb->done) {
    free(pb->status), free(pb->done), tpu_scratch_free(pb->acc), tpu_scratch_free(pb->wt);
    free(pb->bias_row), free(pb);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matrix unit: no memory for a plan");
  }
  /* split over the pool (each GEMM on its part's thread alone), else each
   * GEMM on the unit's OpenMP team in turn */
  bool split = threads > 1 && units > 1;
  pb->serial = split;
  if (split) {
    tpu_parallel_for(units, 1, parts_run, pb);
  } else {
    for (int64_t i = 0; i < units; ++i) run_part(pb, i);
  }
  bool done = true, by_positions = pb->by_positions;
  for (int64_t i = 0; i < units; ++i) {
    if (st == TPU_OK)
      st = pb->status[i];
    else if (pb->status[i] != TPU_OK)
      tpu_status_free(pb->status[i]);
    done = done && pb->done[i];
  }
  tpu_scratch_free(pb->acc);
  tpu_scratch_free(pb->wt);
  free(pb->bias_row);
  free(pb->status), free(pb->done), free(pb);
  if (st != TPU_OK) return st;
  /* A GEMM the unit declined (counted there) leaves the product to the
   * primitives, which rewrite every output; by positions, to the rows
   * path first (*out_rows). */
  if (!done) {
    *out_rows = by_positions;
    return TPU_OK;
  }
  if (split) tpu_mxu_count_conv_split();
  tpu_mxu_count_conv_gemm();
  *out_done = true;
  return TPU_OK;
}
