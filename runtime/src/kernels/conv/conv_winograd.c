/* conv_winograd.c — 3x3, stride-1, dilation-1 float32 convolutions by
 * Winograd's F(2x2, 3x3) (the convolution family's fast path; conv.c
 * decides when it runs, see tpu_conv_winograd_fits).
 *
 * out[n, g*co + k, y, x] = bias[g*co + k]
 *     + sum_{c < ci, a, b < 3} in[n, g*ci + c, y - pad_h + a, x - pad_w + b] * w(g, k, c, a, b)
 * (input outside [0, H) x [0, W) reads 0). The output is cut into 2x2 tiles
 * whose 4x4 input patches d give, per tile and channel, V = Bᵀ d B; the
 * weights give U = G g Gᵀ (once per call); for each of the 16 positions
 * (ξ, ν) of the 4x4 transformed tile, M[ξν] = U[ξν] (co x ci) @ V[ξν]
 * (ci x tiles) is one sgemm; the tile is then Aᵀ M A. That is 16 products
 * of ci x co per tile instead of 36 (2.25x fewer multiplies); the input and
 * output transforms only add and subtract, and the weight transform scales
 * by 1/2 and 1/4 (exact in binary), so the results differ from a direct
 * sum only by rounding.
 *
 * Work units are (sample, block of tile rows); a unit transforms the
 * block's input for every channel of a group into V[16][ci][T], runs the
 * 16 GEMMs into M[16][co][T] and transforms M into the output, so V and M
 * (T tiles, a few hundred) stay in L2. Scratch is one allocation per pool
 * chunk, reused across its units.
 *
 * The weight gradient (tpu_conv_winograd_dw) runs the same input transform
 * and transforms each 2x2 tile of the output's gradient into dM = A dY Aᵀ
 * (4x4); per position e, dU[e] (co x ci) += dM[e] (co x T) @ V[e]ᵀ (T x ci)
 * over the unit's tiles, in a private dU per pool chunk; the chunks' sums
 * are added in double and dw = Gᵀ dU G. Per tile 16 products of ci x co
 * instead of im2col's 36.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv/conv.h"
#include "kernels/common/kernel_util.h"
#include "kernels/common/vmath.h" /* TPU_TARGET_CLONES */

#ifdef TPU_HAVE_OPENBLAS
#include <cblas.h>
#endif

#define WINO_TILES 224       /* most tiles per unit */
#define WINO_MIN_TILES 64    /* fewest tiles per sample (tpu_conv_winograd_fits) */
#define WINO_SCRATCH (1 << 19) /* bytes of V and M per unit (they stay in L2) */
#define WINO_MAX_TW 1024     /* widest tile row (V and M hold whole tile rows) */

/* Transform loops for AVX-512 / AVX2 too (the runtime's baseline is SSE2). */
#define WINO_CLONES TPU_TARGET_CLONES("avx512f", "avx2", "default") /* vmath.h */

static inline int64_t wmin(int64_t a, int64_t b) { return a < b ? a : b; }

/* Scratch of the calling pool thread, kept between calls (grown on demand,
 * zeroed when allocated, freed when the thread exits): the vector loops'
 * padding then holds finite leftovers, never uninitialised memory. */
static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
typedef struct scratch {
  float* p;
  int64_t cap;
} scratch_t;
static void scratch_free(void* v) {
  scratch_t* s = (scratch_t*)v;
  free(s->p);
  free(s);
}
static void scratch_init(void) { (void)pthread_key_create(&g_scratch_key, scratch_free); }
static float* thread_scratch(int64_t n) {
  pthread_once(&g_scratch_once, scratch_init);
  scratch_t* s = (scratch_t*)pthread_getspecific(g_scratch_key);
  if (!s) {
    s = (scratch_t*)calloc(1, sizeof(*s));
    if (!s || pthread_setspecific(g_scratch_key, s) != 0) {
      free(s);
      return NULL;
    }
  }
  if (s->cap < n) {
    free(s->p);
    s->p = (float*)calloc((size_t)n, sizeof(float));
    s->cap = s->p ? n : 0;
  }
  return s->p;
}
static inline int64_t wmax(int64_t a, int64_t b) { return a > b ? a : b; }

bool tpu_conv_winograd_fits(const tpu_conv_wino_t* w) {
#ifndef TPU_HAVE_OPENBLAS
  (void)w;
  return false;
#else
  int64_t th = (w->Ho + 1) / 2, tw = (w->Wo + 1) / 2;
  /* small channel counts make small GEMMs (im2col's K = 9 ci does better) */
  if (w->ci < 16 || w->co < 16 || w->Ho < 2 || w->Wo < 2 || tw > WINO_MAX_TW) return false;
  if (w->Ho != w->H + 2 * w->pad_h - 2 || w->Wo != w->W + 2 * w->pad_w - 2) return false;
  /* a unit holds one sample's tiles at most, and each of its 16 GEMMs packs
   * a co x ci slice of U: with few tiles per sample the packing outweighs
   * the products (512 channels at 7x7, 16 tiles: 16 against im2col's 3 ms) */
  if (th * tw < WINO_MIN_TILES) return false;
  /* int GEMM dimensions */
  int64_t rows = wmax(1, (WINO_TILES + tw / 2) / tw);
  if (w->ci * w->co > (1 << 28) || rows * tw * wmax(w->ci, w->co) > (1 << 28)) return false;
  return true;
#endif
}

typedef struct wt_job {
  const tpu_conv_wino_t* w;
  float* U;
} wt_job_t;

/* U[g][16][co][ci] = G g Gᵀ, g the 3x3 kernel of (group, k, c), for output
 * channels (group, k) in [begin, end). */
static void weight_transform(void* arg, int64_t begin, int64_t end) {
  const tpu_conv_wino_t* w = ((wt_job_t*)arg)->w;
  float* U = ((wt_job_t*)arg)->U;
  for (int64_t gk = begin; gk < end; ++gk) {
    int64_t grp = gk / w->co, k = gk % w->co;
    {
      for (int64_t c = 0; c < w->ci; ++c) {
        float g[3][3];
        for (int a = 0; a < 3; ++a)
          for (int b = 0; b < 3; ++b)
            g[a][b] = w->flip ? w->w[((grp * w->ci + c) * w->co + k) * 9 + (2 - a) * 3 + (2 - b)]
                              : w->w[((grp * w->co + k) * w->ci + c) * 9 + a * 3 + b];
        /* t = G g (4x3), G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1] */
        float t[4][3], u[4][4];
        for (int b = 0; b < 3; ++b) {
          t[0][b] = g[0][b];
          t[1][b] = 0.5f * (g[0][b] + g[1][b] + g[2][b]);
          t[2][b] = 0.5f * (g[0][b] - g[1][b] + g[2][b]);
          t[3][b] = g[2][b];
        }
        for (int a = 0; a < 4; ++a) {
          u[a][0] = t[a][0];
          u[a][1] = 0.5f * (t[a][0] + t[a][1] + t[a][2]);
          u[a][2] = 0.5f * (t[a][0] - t[a][1] + t[a][2]);
          u[a][3] = t[a][2];
        }
        float* dst = U + (grp * 16) * w->co * w->ci + k * w->ci + c;
        for (int e = 0; e < 16; ++e) dst[e * w->co * w->ci] = u[e / 4][e % 4];
      }
    }
  }
}

/* Loops over tiles run in whole vectors of WINO_VEC: rows of scratch are
 * padded, and what the padding computes is never stored to the output. */
#define WINO_VEC 16
static inline int64_t round_vec(int64_t n) { return (n + WINO_VEC - 1) / WINO_VEC * WINO_VEC; }

/* V[e][t] (e = 4 i + j, stride vs between e) for one channel and one tile
 * row: input rows iy0 .. iy0 + 3 of plane x (H x W), tiles t < tw reading
 * columns 2 t - pad_w .. + 3; writes t < round_vec(tw) (the tail is junk
 * the next row or the padding of V absorbs). mr = round_vec(tw) + WINO_VEC;
 * P: 2 mr floats, E/O: 4 mr floats each. */
WINO_CLONES static void input_row(const float* x, int64_t H, int64_t W, int64_t iy0,
                                  int64_t pad_w, int64_t tw, int64_t mr, float* restrict P,
                                  float* restrict E, float* restrict O, float* restrict V,
                                  int64_t vs) {
  /* P[j] = column j - pad_w of a row (0 outside the image) for j < 2 mr */
  const int64_t jlo = wmin(wmax(pad_w, 0), 2 * mr), jhi = wmax(jlo, wmin(W + pad_w, 2 * mr));
  for (int i = 0; i < 4; ++i) {
    float* restrict e = E + i * mr;
    float* restrict o = O + i * mr;
    int64_t iy = iy0 + i;
    if (iy < 0 || iy >= H) {
      memset(e, 0, sizeof(float) * (size_t)mr), memset(o, 0, sizeof(float) * (size_t)mr);
      continue;
    }
    memset(P, 0, sizeof(float) * (size_t)jlo);
    memcpy(P + jlo, x + iy * W + jlo - pad_w, sizeof(float) * (size_t)(jhi - jlo));
    memset(P + jhi, 0, sizeof(float) * (size_t)(2 * mr - jhi));
    for (int64_t t0 = 0; t0 < mr; t0 += WINO_VEC)
      for (int k = 0; k < WINO_VEC; ++k) {
        e[t0 + k] = P[2 * (t0 + k)];
        o[t0 + k] = P[2 * (t0 + k) + 1];
      }
  }
  /* Bᵀ over rows (Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]), in place:
   * row 0 = d0 - d2, row 1 = d1 + d2, row 2 = d2 - d1, row 3 = d1 - d3 */
  for (int p = 0; p < 2; ++p) {
    float* restrict r0 = p ? O : E;
    float* restrict r1 = r0 + mr;
    float* restrict r2 = r0 + 2 * mr;
    float* restrict r3 = r0 + 3 * mr;
    for (int64_t t0 = 0; t0 < mr; t0 += WINO_VEC)
      for (int k = 0; k < WINO_VEC; ++k) {
        int64_t t = t0 + k;
        float d0 = r0[t], d1 = r1[t], d2 = r2[t], d3 = r3[t];
        r0[t] = d0 - d2, r1[t] = d1 + d2, r2[t] = d2 - d1, r3[t] = d1 - d3;
      }
  }
  /* B over columns: tile t's columns are e[t], o[t], e[t+1], o[t+1] */
  const int64_t tr = round_vec(tw);
  for (int i = 0; i < 4; ++i) {
    const float* restrict e = E + i * mr;
    const float* restrict o = O + i * mr;
    float* restrict v0 = V + (4 * i) * vs;
    float* restrict v1 = v0 + vs;
    float* restrict v2 = v0 + 2 * vs;
    float* restrict v3 = v0 + 3 * vs;
    for (int64_t t0 = 0; t0 < tr; t0 += WINO_VEC)
      for (int k = 0; k < WINO_VEC; ++k) {
        int64_t t = t0 + k;
        v0[t] = e[t] - e[t + 1];
        v1[t] = o[t] + e[t + 1];
        v2[t] = e[t + 1] - o[t];
        v3[t] = o[t] - o[t + 1];
      }
  }
}

/* One tile row of one output channel: M[e][t] (stride ms between e; t <
 * round_vec(tw) readable) to output rows oy, oy + 1 (the second only if
 * < Ho) of plane y (Ho x Wo), plus bias. tmp: 4 round_vec(tw) floats. */
WINO_CLONES static void output_row(const float* restrict M, int64_t ms, int64_t tw, float bias,
                                   float* restrict y, int64_t Ho, int64_t Wo, int64_t oy,
                                   float* restrict tmp) {
  const int64_t tr = round_vec(tw);
  float* restrict y00 = tmp;
  float* restrict y01 = tmp + tr;
  float* restrict y10 = tmp + 2 * tr;
  float* restrict y11 = tmp + 3 * tr;
  for (int64_t t0 = 0; t0 < tr; t0 += WINO_VEC)
    for (int k = 0; k < WINO_VEC; ++k) {
      int64_t t = t0 + k;
      /* Aᵀ = [1 1 1 0; 0 1 -1 -1] over rows, then over columns */
      float a[4], b[4];
      for (int j = 0; j < 4; ++j) {
        float m0 = M[j * ms + t], m1 = M[(4 + j) * ms + t];
        float m2 = M[(8 + j) * ms + t], m3 = M[(12 + j) * ms + t];
        a[j] = m0 + m1 + m2;
        b[j] = m1 - m2 - m3;
      }
      y00[t] = a[0] + a[1] + a[2] + bias;
      y01[t] = a[1] - a[2] - a[3] + bias;
      y10[t] = b[0] + b[1] + b[2] + bias;
      y11[t] = b[1] - b[2] - b[3] + bias;
    }
  const int64_t full = Wo / 2;
  float* restrict r0 = y + oy * Wo;
  for (int64_t t = 0; t < full; ++t) r0[2 * t] = y00[t], r0[2 * t + 1] = y01[t];
  if (Wo & 1) r0[2 * full] = y00[full];
  if (oy + 1 < Ho) {
    float* restrict r1 = r0 + Wo;
    for (int64_t t = 0; t < full; ++t) r1[2 * t] = y10[t], r1[2 * t + 1] = y11[t];
    if (Wo & 1) r1[2 * full] = y10[full];
  }
}

/* One unit's scratch (the calling thread's, zeroed once: the padding the
 * vector loops read is never uninitialised): V (16 x ci rows) and M (16 x co
 * rows) of ld floats, ld covering `rows` tile rows of tw tiles plus a vector
 * of slack; the input-row buffers P (2 mr), E and O (4 mr each) and T
 * (4 round_vec(tw): output_row's tmp, or grad_row's rows). NULL when out of
 * memory. */
typedef struct wino_scratch {
  float *V, *M, *P, *E, *O, *T;
  int64_t mr, ld;
} wino_scratch_t;

static bool wino_scratch(const tpu_conv_wino_t* w, int64_t tw, int64_t rows, wino_scratch_t* out) {
  const int64_t tr = round_vec(tw), mr = tr + WINO_VEC, ld = round_vec(rows * tw) + WINO_VEC;
  const int64_t nv = 16 * w->ci * ld, nm = 16 * w->co * ld;
  float* s = thread_scratch(nv + nm + 2 * mr + 8 * mr + 4 * tr + 64);
  if (!s) return false;
  out->V = s, out->M = s + nv, out->P = out->M + nm, out->E = out->P + 2 * mr;
  out->O = out->E + 4 * mr, out->T = out->O + 4 * mr;
  out->mr = mr, out->ld = ld;
  return true;
}

typedef struct wino_job {
  const tpu_conv_wino_t* w;
  const float* U;
  int64_t th, tw, rows, nblk; /* tile rows per unit, units per sample */
  atomic_int failed;
} wino_job_t;

static void wino_units(void* arg, int64_t begin, int64_t end) {
  wino_job_t* j = (wino_job_t*)arg;
  const tpu_conv_wino_t* w = j->w;
  const int64_t tw = j->tw, ci = w->ci, co = w->co;
  wino_scratch_t sc;
  if (!wino_scratch(w, tw, j->rows, &sc)) {
    atomic_store(&j->failed, 1);
    return;
  }
  float *V = sc.V, *M = sc.M, *P = sc.P, *E = sc.E, *O = sc.O, *tmp = sc.T;
  const int64_t mr = sc.mr, ld = sc.ld;
  const int64_t in_plane = w->H * w->W, out_plane = w->Ho * w->Wo;
  for (int64_t u = begin; u < end; ++u) {
    int64_t n = u / j->nblk, ty0 = (u % j->nblk) * j->rows;
    int64_t nrows = wmin(j->rows, j->th - ty0), Tn = nrows * tw;
    for (int64_t grp = 0; grp < w->groups; ++grp) {
      const float* x = w->in + (n * w->groups + grp) * ci * in_plane;
      float* y = w->out + (n * w->groups + grp) * co * out_plane;
      for (int64_t c = 0; c < ci; ++c)
        for (int64_t r = 0; r < nrows; ++r)
          input_row(x + c * in_plane, w->H, w->W, 2 * (ty0 + r) - w->pad_h, w->pad_w, tw, mr, P,
                    E, O, V + c * ld + r * tw, ci * ld);
      const float* U = j->U + grp * 16 * co * ci;
#ifdef TPU_HAVE_OPENBLAS
      for (int e = 0; e < 16; ++e)
        scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)co, (int)Tn, (int)ci,
                          1.0f, U + e * co * ci, (int)ci, V + e * ci * ld, (int)ld, 0.0f,
                          M + e * co * ld, (int)ld);
#endif
      for (int64_t k = 0; k < co; ++k) {
        float b = w->bias ? w->bias[grp * co + k] : 0.0f;
        for (int64_t r = 0; r < nrows; ++r)
          output_row(M + k * ld + r * tw, co * ld, tw, b, y + k * out_plane, w->Ho, w->Wo,
                     2 * (ty0 + r), tmp);
      }
    }
  }
}

tpu_status_t tpu_conv_winograd(const tpu_conv_wino_t* w) {
  wino_job_t j;
  memset(&j, 0, sizeof(j));
  j.w = w;
  j.th = (w->Ho + 1) / 2, j.tw = (w->Wo + 1) / 2;
  if (w->n == 0) return TPU_OK;
  float* U = (float*)malloc(sizeof(float) * (size_t)(w->groups * 16 * w->co * w->ci + 16));
  if (!U) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "convolution scratch allocation failed");
  wt_job_t wt = {w, U};
  tpu_parallel_for(w->groups * w->co, wmax(1, 2048 / w->ci), weight_transform, &wt);
  j.U = U;
  /* tile rows per unit: about WINO_TILES tiles, fewer while there are under
   * two units per thread */
  int64_t threads = tpu_parallel_threads();
  int64_t tiles = wmax(16, wmin(WINO_TILES, WINO_SCRATCH / (64 * (w->ci + w->co))));
  j.rows = wmin(j.th, wmax(1, (tiles + j.tw / 2) / j.tw));
  while (j.rows > 1 && w->n * ((j.th + j.rows - 1) / j.rows) < 2 * threads) j.rows = (j.rows + 1) / 2;
  j.nblk = (j.th + j.rows - 1) / j.rows;
  atomic_init(&j.failed, 0);
  int64_t units = w->n * j.nblk, unit_work = 16 * j.rows * j.tw * w->ci * w->co * w->groups;
  tpu_parallel_for(units, unit_work >= (1 << 18) ? 1 : units, wino_units, &j);
  free(U);
  if (atomic_load(&j.failed))
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "convolution scratch allocation failed");
  return TPU_OK;
}

/* ---- the weight gradient ------------------------------------------------------------ */

/* Tiles per unit of the weight gradient: its GEMMs sum over tiles (K), so
 * longer blocks make fewer, larger products; V and dM of a unit stay in L2. */
#define WINO_DW_TILES 448
#define WINO_DW_SCRATCH (1 << 20)
#define WINO_DW_MIN_TILES 64

/* dM[e][t] = (A dY Aᵀ)[e] (e = 4 i + j, stride ms between e) for one output
 * channel and one tile row: rows oy, oy + 1 (the second 0 at Ho) of plane
 * dy (Ho x Wo), tile t reading columns 2 t, 2 t + 1 (0 at Wo); writes t <
 * round_vec(tw), tiles past tw as 0. Y: 4 round_vec(tw) floats. */
WINO_CLONES static void grad_row(const float* restrict dy, int64_t Ho, int64_t Wo, int64_t oy,
                                 int64_t tw, float* restrict Y, float* restrict M, int64_t ms) {
  const int64_t tr = round_vec(tw), full = Wo / 2;
  for (int r = 0; r < 2; ++r) {
    float* restrict ye = Y + 2 * r * tr;
    float* restrict yo = ye + tr;
    int64_t t = 0;
    if (oy + r < Ho) {
      const float* restrict src = dy + (oy + r) * Wo;
      for (; t < full; ++t) ye[t] = src[2 * t], yo[t] = src[2 * t + 1];
      if (Wo & 1) ye[t] = src[2 * t], yo[t] = 0.0f, ++t;
    }
    for (; t < tr; ++t) ye[t] = yo[t] = 0.0f;
  }
  const float* restrict y0e = Y;
  const float* restrict y0o = Y + tr;
  const float* restrict y1e = Y + 2 * tr;
  const float* restrict y1o = Y + 3 * tr;
  /* A = [1 0; 1 1; 1 -1; 0 -1]: rows i of A dY are dY0, dY0 + dY1,
   * dY0 - dY1, -dY1; columns j of (A dY) Aᵀ likewise from its two columns */
  for (int64_t t0 = 0; t0 < tr; t0 += WINO_VEC) {
    /* one vector of tiles into a local block, then 16 vector stores (the
     * stores' rows at stride ms could overlap for all the compiler knows) */
    float blk[16][WINO_VEC];
    for (int k = 0; k < WINO_VEC; ++k) {
      int64_t t = t0 + k;
      float a0 = y0e[t], b0 = y0o[t], a1 = y1e[t], b1 = y1o[t];
      float re[4] = {a0, a0 + a1, a0 - a1, -a1};
      float ro[4] = {b0, b0 + b1, b0 - b1, -b1};
      for (int i = 0; i < 4; ++i) {
        blk[4 * i][k] = re[i];
        blk[4 * i + 1][k] = re[i] + ro[i];
        blk[4 * i + 2][k] = re[i] - ro[i];
        blk[4 * i + 3][k] = -ro[i];
      }
    }
    for (int e = 0; e < 16; ++e) memcpy(M + e * ms + t0, blk[e], sizeof(blk[e]));
  }
}

typedef struct wino_dw_job {
  const tpu_conv_wino_t* w;
  int64_t th, tw, rows, units, chunks; /* rows: tile rows per unit, over the batch */
  float* part; /* per chunk: dU[group][16][co][ci] */
  atomic_int failed;
} wino_dw_job_t;

/* Each chunk sums dU over its units (n, block of tile rows) into its own part. */
static void wino_dw_chunks(void* arg, int64_t begin, int64_t end) {
  wino_dw_job_t* j = (wino_dw_job_t*)arg;
  const tpu_conv_wino_t* w = j->w;
  const int64_t tw = j->tw, ci = w->ci, co = w->co, usize = w->groups * 16 * co * ci;
  wino_scratch_t sc;
  if (!wino_scratch(w, tw, j->rows, &sc)) {
    atomic_store(&j->failed, 1);
    return;
  }
  float *V = sc.V, *M = sc.M, *P = sc.P, *E = sc.E, *O = sc.O, *Y = sc.T;
  const int64_t mr = sc.mr, ld = sc.ld;
  const int64_t in_plane = w->H * w->W, out_plane = w->Ho * w->Wo;
  for (int64_t ch = begin; ch < end; ++ch) {
    float* dU = j->part + ch * usize;
    int64_t u0 = ch * j->units / j->chunks, u1 = (ch + 1) * j->units / j->chunks;
    for (int64_t u = u0; u < u1; ++u) {
      /* the unit's tile rows, numbered over the batch (a unit may span samples) */
      int64_t gr0 = u * j->rows, nrows = wmin(j->rows, w->n * j->th - gr0), Tn = nrows * tw;
      for (int64_t grp = 0; grp < w->groups; ++grp) {
        for (int64_t r = 0; r < nrows; ++r) {
          int64_t n = (gr0 + r) / j->th, ty = (gr0 + r) % j->th;
          const float* x = w->in + (n * w->groups + grp) * ci * in_plane;
          const float* dy = w->gout + (n * w->groups + grp) * co * out_plane;
          for (int64_t c = 0; c < ci; ++c)
            input_row(x + c * in_plane, w->H, w->W, 2 * ty - w->pad_h, w->pad_w, tw, mr, P, E, O,
                      V + c * ld + r * tw, ci * ld);
          for (int64_t k = 0; k < co; ++k)
            grad_row(dy + k * out_plane, w->Ho, w->Wo, 2 * ty, tw, Y, M + k * ld + r * tw, co * ld);
        }
#ifdef TPU_HAVE_OPENBLAS
        float* dUg = dU + grp * 16 * co * ci;
        for (int e = 0; e < 16; ++e)
          scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)co, (int)ci, (int)Tn,
                            1.0f, M + e * co * ld, (int)ld, V + e * ci * ld, (int)ld,
                            u == u0 ? 0.0f : 1.0f, dUg + e * co * ci, (int)ci);
#endif
      }
    }
  }
}

/* dw = Gᵀ dU G for output channels (group, k) in [begin, end): dU summed
 * over the chunks, vectors over c. */
WINO_CLONES static void wino_dw_finish(void* arg, int64_t begin, int64_t end) {
  wino_dw_job_t* j = (wino_dw_job_t*)arg;
  const tpu_conv_wino_t* w = j->w;
  const int64_t ci = w->ci, co = w->co, usize = w->groups * 16 * co * ci;
  float* u = (float*)malloc(sizeof(float) * (size_t)(16 * ci));
  if (!u) {
    atomic_store(&j->failed, 1);
    return;
  }
  for (int64_t gk = begin; gk < end; ++gk) {
    int64_t grp = gk / co, k = gk % co;
    for (int e = 0; e < 16; ++e) {
      float* restrict ue = u + e * ci;
      const float* src = j->part + ((grp * 16 + e) * co + k) * ci;
      memcpy(ue, src, sizeof(float) * (size_t)ci);
      for (int64_t ch = 1; ch < j->chunks; ++ch) {
        const float* restrict sc = src + ch * usize;
        for (int64_t c = 0; c < ci; ++c) ue[c] += sc[c];
      }
    }
    float* restrict dst = w->out + (grp * co + k) * ci * 9;
    /* G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]: t = dU G, then Gᵀ t */
    for (int64_t c = 0; c < ci; ++c) {
      float t[4][3];
      for (int i = 0; i < 4; ++i) {
        float u0 = u[(4 * i) * ci + c], u1 = u[(4 * i + 1) * ci + c];
        float u2 = u[(4 * i + 2) * ci + c], u3 = u[(4 * i + 3) * ci + c];
        t[i][0] = u0 + 0.5f * (u1 + u2);
        t[i][1] = 0.5f * (u1 - u2);
        t[i][2] = 0.5f * (u1 + u2) + u3;
      }
      for (int b = 0; b < 3; ++b) {
        dst[c * 9 + b] = t[0][b] + 0.5f * (t[1][b] + t[2][b]);
        dst[c * 9 + 3 + b] = 0.5f * (t[1][b] - t[2][b]);
        dst[c * 9 + 6 + b] = 0.5f * (t[1][b] + t[2][b]) + t[3][b];
      }
    }
  }
  free(u);
}

tpu_status_t tpu_conv_winograd_dw(const tpu_conv_wino_t* w) {
  const int64_t ci = w->ci, co = w->co, usize = w->groups * 16 * co * ci;
  if (w->n == 0) {
    memset(w->out, 0, sizeof(float) * (size_t)(w->groups * co * ci * 9));
    return TPU_OK;
  }
  wino_dw_job_t j;
  memset(&j, 0, sizeof(j));
  j.w = w;
  j.th = (w->Ho + 1) / 2, j.tw = (w->Wo + 1) / 2;
  int64_t threads = tpu_parallel_threads();
  int64_t tiles = wmax(WINO_DW_MIN_TILES, wmin(WINO_DW_TILES, WINO_DW_SCRATCH / (64 * (ci + co))));
  int64_t all_rows = w->n * j.th;
  j.rows = wmin(all_rows, wmax(1, (tiles + j.tw / 2) / j.tw));
  while (j.rows > 1 && (all_rows + j.rows - 1) / j.rows < 2 * threads &&
         (j.rows + 1) / 2 * j.tw >= WINO_DW_MIN_TILES)
    j.rows = (j.rows + 1) / 2;
  j.units = (all_rows + j.rows - 1) / j.rows;
  int64_t work = 16 * w->n * j.th * j.tw * ci * co * w->groups;
  j.chunks = wmax(1, wmin(wmin(threads, j.units), work / (1 << 20)));
  atomic_init(&j.failed, 0);
  j.part = (float*)malloc(sizeof(float) * (size_t)(j.chunks * usize + 16));
  if (!j.part) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "convolution scratch allocation failed");
  tpu_parallel_for(j.chunks, 1, wino_dw_chunks, &j);
  if (atomic_load(&j.failed)) {
    free(j.part);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "convolution scratch allocation failed");
  }
  tpu_parallel_for(w->groups * co, wmax(1, 4096 / ci), wino_dw_finish, &j);
  free(j.part);
  if (atomic_load(&j.failed))
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "convolution scratch allocation failed");
  return TPU_OK;
}
