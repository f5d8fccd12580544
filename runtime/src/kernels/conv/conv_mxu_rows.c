/* conv_mxu_rows.c — 1x1 convolutions on the matrix unit with the grid
 * positions as GEMM rows (conv.h: tpu_conv_mxu_rows; the unit: mxu.h).
 *
 * A convolution with a 1x1 kernel, no padding and one group, at any
 * stride, reads X only at the grid's positions (image position = grid
 * position * stride). Laid out with the R = N * P grid positions of all
 * images as rows and the channels as columns, Xr [R, cx] and Yr [R, cy],
 * its forward and input gradient are single GEMMs:
 *   CONV_Y  Yr  = Xr · Wᵀ        (+ bias[co] on column co, in the kernel)
 *   CONV_X  dXr = dYr · W        (image positions off the grid: zero)
 * with W the [cy, cx] matrix of the weight. The right factor is the weight
 * (Wᵀ or W as a strided view of it), so the unit multiplies it in its
 * blocked layout from the weight cache (mxu_pack.h: from its second
 * sighting, while nothing writes it), where the per-image GEMMs of
 * conv_mxu_1x1.c, with the image as the right factor, have the kernel lay
 * out an activation on every call; one GEMM over all images also gives the
 * kernel R rows to block instead of P.
 *
 * Layout: an operand whose channels are dense and whose grid positions are
 * evenly spaced across all images (channels_last at stride 1) is that
 * matrix already and is read or written in place; any other (NCHW, a
 * stride-2 subsample) is gathered into a dense scratch matrix and, written,
 * scattered back: for NCHW a transpose, in 16 x 16 tiles in AVX2 registers
 * where 16 grid positions are one dense run (the unit runs only on
 * AVX512-BF16 CPUs); the copies split over the compute pool.
 *
 * Threads: each GEMM splits into blocks of its rows (16-multiples, 32 or
 * more each) over the compute pool, one single-threaded GEMM per part
 * (mxu_gemm_t.serial), as conv_mxu_1x1.c splits; counted in conv_split.
 * TORCH_TPU_CONV_SPLIT=0 (or a pool of one) runs it on the unit's OpenMP
 * team instead.
 *
 * Which problems: tpu_conv_mxu tries conv_mxu_1x1.c first (NCHW, stride 1,
 * 384+ positions per image) and this path next, for the forward and input
 * gradient whose operand read (X, or dY) has dense channels
 * (channels_last, or one position) or whose grid is strided (ResNet's
 * stride-2 projection). The rest goes to oneDNN's primitives: NCHW at
 * stride 1 below 384 positions, where the transposes in and out cost more
 * than the primitives' blocked reorders (0.64-0.94x at ResNet-50's 14x14
 * and 7x7 layers, load 5.7), and every weight gradient (dW = dYrᵀ Xr as one
 * GEMM measured 0.67-0.90x: bench/RESULTS.md, issue 21).
 * One exception: conv_mxu_1x1.c passes on NCHW at stride 1 too
 * (any_layout) when the unit declined its GEMMs by positions (those it
 * runs where the per-image ones would miss the AMX tiles).
 * TORCH_TPU_CONV_GEMM=0 turns it off with the other path; a product run
 * here counts in tpu_mxu_info_t's conv_gemm.
 */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "tpu/config.h"
#include "kernels/conv/conv.h"
#include "kernels/common/kernel_util.h"
#include "kernels/matmul/mxu.h"

#define ROW_BLOCK 32 /* rows (grid positions) per piece of a gather / scatter */

/* One operand [N, C, spatial...] read or written at the grid's positions. */
typedef struct side {
  uint16_t* base; /* the view's first element */
  int64_t c, sn, sc;
  int64_t* off; /* element offset of grid position p < P within an image (owned) */
  /* the view is the [R, C] matrix itself: channels dense, row r = n * P + p
   * at r * rs */
  bool direct;
  int64_t rs;
} side_t;

/* Fills s for view v read at grid positions (grid sizes `grid`, image steps
 * `step` per spatial dim: the stride on X, 1 on Y). False when out of
 * memory. */
static bool side_init(side_t* s, const tpu_view_t* v, int nsp, const int64_t* grid,
                      const int64_t* step, int64_t P) {
  s->base = (uint16_t*)tpu_view_ptr(v);
  s->c = v->sizes[1], s->sn = v->strides[0], s->sc = v->strides[1];
  s->off = malloc((size_t)(P ? P : 1) * sizeof *s->off);
  if (!s->off) return false;
  int64_t idx[3] = {0, 0, 0};
  for (int64_t p = 0; p < P; ++p) {
    int64_t o = 0;
    for (int d = 0; d < nsp; ++d) o += idx[d] * step[d] * v->strides[2 + d];
    s->off[p] = o;
    for (int d = nsp - 1; d >= 0; --d) { /* the next position, row-major */
      if (++idx[d] < grid[d]) break;
      idx[d] = 0;
    }
  }
  int64_t rs = P > 1 ? s->off[1] : s->sn;
  bool even = (s->c == 1 || s->sc == 1) && rs >= s->c && s->off[0] == 0;
  for (int64_t p = 0; p < P && even; ++p) even = s->off[p] == p * rs;
  if (even && v->sizes[0] > 1) even = s->sn == P * rs;
  if (even && P == 1 && v->sizes[0] > 1) rs = s->sn; /* one position: rows are images */
  s->direct = even && rs > 0;
  s->rs = rs;
  return true;
}

/* mxu_matrix of the elements at `p`. */
static tpu_view_t mat(void* p, tpu_dtype_t dt, int64_t rows, int64_t cols, int64_t rs,
                      int64_t cs) {
  return mxu_matrix((uint64_t)(uintptr_t)p, dt, rows, cols, rs, cs);
}

/* ---- gathers and scatters ------------------------------------------------ */

typedef struct rows_problem {
  int nsp;
  int64_t n, P, R;
  int64_t grid[3], step[3];
  side_t x, y;
} rows_problem_t;

static const int64_t k_ones[3] = {1, 1, 1};

typedef enum move_kind {
  TO_ROWS,   /* m [R, C] (row-major) <- the side */
  FROM_ROWS, /* the side <- m [R, C] */
} move_kind_t;

typedef struct move_job {
  const side_t* s;
  uint16_t* m;
  int64_t P, R, blocks; /* blocks of ROW_BLOCK rows per image */
  move_kind_t kind;
} move_job_t;

/* dst[j * ld_dst + i] = src[i * ld_src + j] for i, j < 16: a 16 x 16 tile of
 * 16-bit elements transposed in AVX2 registers (the unit runs only on
 * AVX512-BF16 CPUs, which have AVX2). */
__attribute__((target("avx2"))) void tpu_conv_transpose16(const uint16_t* src, int64_t ld_src,
                                                         uint16_t* dst, int64_t ld_dst) {
  __m256i r[16], a[16], b[16], c[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm256_loadu_si256((const __m256i*)(src + i * ld_src));
  /* pairs of rows interleaved by 16, 32 and 64 bits: c[k] (k < 8) holds
   * column k of rows 0-7 in its low lane and column k + 8 in its high
   * one; c[k + 8] the same for rows 8-15 */
  for (int h = 0; h < 16; h += 8) {
    for (int i = 0; i < 8; i += 2) {
      a[h + i] = _mm256_unpacklo_epi16(r[h + i], r[h + i + 1]);
      a[h + i + 1] = _mm256_unpackhi_epi16(r[h + i], r[h + i + 1]);
    }
    for (int i = 0; i < 8; i += 4)
      for (int k = 0; k < 2; ++k) {
        b[h + i + 2 * k] = _mm256_unpacklo_epi32(a[h + i + k], a[h + i + k + 2]);
        b[h + i + 2 * k + 1] = _mm256_unpackhi_epi32(a[h + i + k], a[h + i + k + 2]);
      }
    for (int k = 0; k < 4; ++k) {
      c[h + 2 * k] = _mm256_unpacklo_epi64(b[h + k], b[h + k + 4]);
      c[h + 2 * k + 1] = _mm256_unpackhi_epi64(b[h + k], b[h + k + 4]);
    }
  }
  for (int k = 0; k < 8; ++k) {
    _mm256_storeu_si256((__m256i*)(dst + k * ld_dst), _mm256_permute2x128_si256(c[k], c[k + 8], 0x20));
    _mm256_storeu_si256((__m256i*)(dst + (k + 8) * ld_dst),
                        _mm256_permute2x128_si256(c[k], c[k + 8], 0x31));
  }
}

/* Whether positions [p0, p1) lie in one dense run of memory. */
static bool dense_run(const int64_t* off, int64_t p0, int64_t p1) {
  for (int64_t p = p0 + 1; p < p1; ++p)
    if (off[p] != off[p - 1] + 1) return false;
  return true;
}

static void move_piece(const move_job_t* j, int64_t i) {
  const side_t* s = j->s;
  int64_t n = i / j->blocks, p0 = i % j->blocks * ROW_BLOCK;
  int64_t p1 = p0 + ROW_BLOCK < j->P ? p0 + ROW_BLOCK : j->P, C = s->c;
  uint16_t* img = s->base + n * s->sn;
  int64_t r0 = n * j->P;
  bool to = j->kind == TO_ROWS;
  if (s->sc == 1 || C == 1) {
    for (int64_t p = p0; p < p1; ++p) {
      uint16_t* row = j->m + (r0 + p) * C;
      if (to)
        memcpy(row, img + s->off[p], (size_t)C * sizeof *row);
      else
        memcpy(img + s->off[p], row, (size_t)C * sizeof *row);
    }
    return;
  }
  for (int64_t c0 = 0; c0 < C; c0 += 16) { /* a transpose, 16 channels at a time */
    int64_t c1 = c0 + 16 < C ? c0 + 16 : C;
    int64_t p = p0;
    /* 16 x 16 tiles where 16 positions lie in a dense run */
    for (; c1 - c0 == 16 && p + 16 <= p1 && dense_run(s->off, p, p + 16); p += 16) {
      uint16_t* row = j->m + (r0 + p) * C + c0;
      uint16_t* pos = img + s->off[p] + c0 * s->sc;
      if (to)
        tpu_conv_transpose16(pos, s->sc, row, C);
      else
        tpu_conv_transpose16(row, C, pos, s->sc);
    }
    for (; p < p1; ++p) {
      uint16_t* row = j->m + (r0 + p) * C;
      uint16_t* pos = img + s->off[p];
      if (to)
        for (int64_t c = c0; c < c1; ++c) row[c] = pos[c * s->sc];
      else
        for (int64_t c = c0; c < c1; ++c) pos[c * s->sc] = row[c];
    }
  }
}

static void move_run(void* arg, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) move_piece((const move_job_t*)arg, i);
}

/* Moves side s's values at the grid positions to or from m (kind). */
static void move(const rows_problem_t* pb, const side_t* s, uint16_t* m, move_kind_t kind) {
  int64_t N = pb->n, P = pb->P;
  move_job_t j = {s, m, P, N * P, (P + ROW_BLOCK - 1) / ROW_BLOCK, kind};
  if (N * j.blocks > 0) tpu_parallel_for(N * j.blocks, 4, move_run, &j);
}

/* Zeroes every element of the image side view v (a CONV_X output whose
 * positions are not all on the grid). */
typedef struct zero_job {
  const tpu_view_t* v;
} zero_job_t;

static void zero_run(void* arg, int64_t begin, int64_t end) {
  const tpu_view_t* v = ((const zero_job_t*)arg)->v;
  int nsp = v->ndim - 2;
  int64_t sz[3] = {1, 1, 1}, st[3] = {0, 0, 0};
  for (int d = 0; d < nsp; ++d) sz[3 - nsp + d] = v->sizes[2 + d], st[3 - nsp + d] = v->strides[2 + d];
  uint16_t* base = (uint16_t*)tpu_view_ptr(v);
  for (int64_t i = begin; i < end; ++i) { /* image i / C, channel i % C */
    uint16_t* plane = base + i / v->sizes[1] * v->strides[0] + i % v->sizes[1] * v->strides[1];
    for (int64_t a = 0; a < sz[0]; ++a)
      for (int64_t b = 0; b < sz[1]; ++b) {
        uint16_t* line = plane + a * st[0] + b * st[1];
        if (st[2] == 1)
          memset(line, 0, (size_t)sz[2] * sizeof *line);
        else
          for (int64_t k = 0; k < sz[2]; ++k) line[k * st[2]] = 0;
      }
  }
}

/* ---- the products ------------------------------------------------------------ */

static tpu_status_t no_scratch(size_t bytes) {
  return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matrix unit: no %zu bytes of scratch", bytes);
}

/* One GEMM split into row blocks of A and C, one single-threaded GEMM per
 * part on the compute pool, as conv_mxu_1x1.c splits (DNNL_VERBOSE on the
 * 2-core Zen 4, 12544x64 @ 64x256: 1.9 ms on a 2-thread OpenMP team, 0.93
 * ms for each of two serial halves side by side). */
#define SPLIT_MAX 64
typedef struct split_job {
  mxu_gemm_t g;
  int64_t rows, parts;
  tpu_status_t st[SPLIT_MAX];
  bool done[SPLIT_MAX];
} split_job_t;

static tpu_view_t row_block(tpu_view_t v, int64_t r0, int64_t r1) {
  v.addr += (uint64_t)(r0 * v.strides[1] * (int64_t)tpu_dtype_size(v.dtype));
  v.sizes[1] = r1 - r0;
  return v;
}

static void split_run(void* arg, int64_t begin, int64_t end) {
  split_job_t* j = (split_job_t*)arg;
  for (int64_t i = begin; i < end; ++i) {
    int64_t r0, r1;
    mxu_row_part(j->rows, j->parts, i, &r0, &r1);
    mxu_gemm_t g = j->g;
    g.a = row_block(g.a, r0, r1), g.c = row_block(g.c, r0, r1);
    g.serial = true;
    j->st[i] = tpu_mxu_gemm(&g, &j->done[i]);
  }
}

static tpu_status_t run_gemm(tpu_view_t a, tpu_view_t b, tpu_view_t c, const tpu_view_t* bias,
                             const tpu_graph_t* graph, bool* out_done) {
  split_job_t* j = calloc(1, sizeof *j);
  if (!j) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matrix unit: no memory for a plan");
  mxu_gemm_t* g = &j->g;
  g->a = a, g->b = b, g->c = c, g->alpha = 1.0f, g->beta = 0.0f;
  g->graph = graph; /* B: the weight (CONV_Y / CONV_X) may come from the cache */
  if (bias) g->has_bias = true, g->bias = *bias;
  int threads = tpu_config_bool(TPU_CONFIG_CONV_SPLIT) ? tpu_parallel_threads() : 1;
  j->rows = a.sizes[1];
  j->parts = threads < j->rows / 32 ? threads : j->rows / 32; /* 32+ rows a part */
  if (j->parts > SPLIT_MAX) j->parts = SPLIT_MAX;
  tpu_status_t st = TPU_OK;
  if (j->parts < 2) {
    g->team = true; /* unsplit (TORCH_TPU_CONV_SPLIT=0, or few rows): the team, as before */
    st = tpu_mxu_gemm(g, out_done);
  } else {
    tpu_parallel_for(j->parts, 1, split_run, j);
    *out_done = true;
    for (int64_t i = 0; i < j->parts; ++i) {
      if (st == TPU_OK)
        st = j->st[i];
      else if (j->st[i] != TPU_OK)
        tpu_status_free(j->st[i]);
      *out_done = *out_done && j->done[i];
    }
    if (st == TPU_OK && *out_done) tpu_mxu_count_conv_split();
  }
  free(j);
  return st;
}

/* The matrix of side s: the view itself (direct) or a scratch `*out_m`
 * (gathered when `read`). */
static tpu_status_t rows_of(const rows_problem_t* pb, const side_t* s, bool read,
                            uint16_t** out_m, tpu_view_t* out_v) {
  *out_m = NULL;
  if (s->direct) {
    *out_v = mat(s->base, TPU_DTYPE_BF16, pb->R, s->c, s->rs, 1);
    return TPU_OK;
  }
  size_t bytes = (size_t)(pb->R * s->c) * sizeof(uint16_t);
  *out_m = tpu_scratch_alloc(bytes ? bytes : 1);
  if (!*out_m) return no_scratch(bytes);
  if (read) move(pb, s, *out_m, TO_ROWS);
  *out_v = mat(*out_m, TPU_DTYPE_BF16, pb->R, s->c, s->c, 1);
  return TPU_OK;
}

static tpu_status_t run_y(const rows_problem_t* pb, const tpu_view_t* w, const tpu_view_t* bias,
                          const tpu_graph_t* graph, bool* out_done) {
  uint16_t *xm = NULL, *ym = NULL, *bm = NULL;
  tpu_view_t a, c, bv;
  tpu_status_t st = rows_of(pb, &pb->x, true, &xm, &a);
  if (st == TPU_OK) st = rows_of(pb, &pb->y, false, &ym, &c);
  if (st == TPU_OK && bias) { /* the kernel's bias: a dense row */
    bv = mat(tpu_view_ptr(bias), bias->dtype, 1, pb->y.c, pb->y.c, bias->strides[0]);
    bv.strides[0] = 0;
    if (bias->strides[0] != 1 && pb->y.c > 1) {
      bm = malloc((size_t)pb->y.c * sizeof *bm);
      if (!bm) st = no_scratch((size_t)pb->y.c * sizeof *bm);
      const uint16_t* bp = (const uint16_t*)tpu_view_ptr(bias);
      for (int64_t i = 0; bm && i < pb->y.c; ++i) bm[i] = bp[i * bias->strides[0]];
      bv = mat(bm, bias->dtype, 1, pb->y.c, pb->y.c, 1);
      bv.strides[0] = 0;
    }
  }
  /* Wᵀ [cx, cy] as a view of W [cy, cx] */
  tpu_view_t b = mat(tpu_view_ptr(w), TPU_DTYPE_BF16, pb->x.c, pb->y.c, w->strides[1], w->strides[0]);
  if (st == TPU_OK) st = run_gemm(a, b, c, bias ? &bv : NULL, graph, out_done);
  if (st == TPU_OK && *out_done && ym) move(pb, &pb->y, ym, FROM_ROWS);
  tpu_scratch_free(xm), tpu_scratch_free(ym), free(bm);
  return st;
}

static tpu_status_t run_x(const rows_problem_t* pb, const tpu_view_t* x, const tpu_view_t* w,
                          const tpu_graph_t* graph, bool* out_done) {
  uint16_t *ym = NULL, *xm = NULL;
  tpu_view_t a, c;
  tpu_status_t st = rows_of(pb, &pb->y, true, &ym, &a);
  if (st == TPU_OK) st = rows_of(pb, &pb->x, false, &xm, &c);
  tpu_view_t b = mat(tpu_view_ptr(w), TPU_DTYPE_BF16, pb->y.c, pb->x.c, w->strides[0], w->strides[1]);
  if (st == TPU_OK) st = run_gemm(a, b, c, NULL, graph, out_done);
  if (st == TPU_OK && *out_done) {
    /* image positions off the grid get no contribution: zero */
    bool covered = true;
    for (int d = 0; d < pb->nsp; ++d)
      covered = covered && pb->step[d] == 1 && x->sizes[2 + d] == pb->grid[d];
    if (!covered) {
      zero_job_t z = {x};
      tpu_parallel_for(pb->n * pb->x.c, 16, zero_run, &z);
    }
    /* (an X with such positions is never written in place: xm holds it) */
    if (xm) move(pb, &pb->x, xm, FROM_ROWS);
  }
  tpu_scratch_free(ym), tpu_scratch_free(xm);
  return st;
}

bool tpu_conv_mxu_rows_fits(const conv_args_t* a) {
  const conv_geom_t* g = &a->g;
  if (g->groups != 1 || a->dtype != TPU_DTYPE_BF16 || !tpu_config_bool(TPU_CONFIG_CONV_GEMM)) return false;
  for (int d = 0; d < 3; ++d)
    if (g->K[d] != 1 || g->pad[d] != 0) return false;
  return true;
}

tpu_status_t tpu_conv_mxu_rows(const conv_args_t* a, int dir, const tpu_view_t* x,
                               const tpu_view_t* w, const tpu_view_t* y, const tpu_view_t* bias,
                               const tpu_graph_t* graph, bool any_layout, bool* out_done) {
  *out_done = false;
  rows_problem_t pb;
  memset(&pb, 0, sizeof pb);
  pb.nsp = a->nsp, pb.n = x->sizes[0], pb.P = 1;
  if (x->ndim != pb.nsp + 2 || y->ndim != pb.nsp + 2 || w->sizes[0] != y->sizes[1] ||
      w->sizes[1] != x->sizes[1] || (bias && bias->ndim != 1))
    return TPU_OK; /* not this path's: the primitives' */
  for (int d = 0; d < pb.nsp; ++d) {
    pb.grid[d] = y->sizes[2 + d], pb.step[d] = a->g.stride[3 - pb.nsp + d];
    pb.P *= pb.grid[d];
    if (pb.grid[d] > 0 && (pb.grid[d] - 1) * pb.step[d] >= x->sizes[2 + d]) return TPU_OK;
  }
  pb.R = pb.n * pb.P;
  if (!side_init(&pb.x, x, pb.nsp, pb.grid, pb.step, pb.P)) {
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matrix unit: no memory for a plan");
  }
  if (!side_init(&pb.y, y, pb.nsp, pb.grid, k_ones, pb.P)) {
    free(pb.x.off);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matrix unit: no memory for a plan");
  }
  /* Which products (see the top): the forward and input gradient where
   * the operand they read has dense channels or the grid is strided */
  bool strided = false;
  for (int d = 0; d < pb.nsp; ++d) strided = strided || pb.step[d] != 1;
  const side_t* in = dir == CONV_DIR_Y ? &pb.x : &pb.y;
  if (dir == CONV_DIR_W || (!strided && !any_layout && in->sc != 1 && in->c != 1)) {
    free(pb.x.off), free(pb.y.off);
    return TPU_OK;
  }
  /* CONV_X writes X; where X has positions off the grid it is zeroed and
   * the product scattered into it, so never written in place */
  if (dir == CONV_DIR_X) {
    for (int d = 0; d < pb.nsp; ++d)
      if (pb.step[d] != 1 || x->sizes[2 + d] != pb.grid[d]) pb.x.direct = false;
  }
  tpu_status_t st = dir == CONV_DIR_Y ? run_y(&pb, w, bias, graph, out_done)
                                      : run_x(&pb, x, w, graph, out_done);
  free(pb.x.off), free(pb.y.off);
  if (st == TPU_OK && *out_done) tpu_mxu_count_conv_gemm();
  return st;
}
