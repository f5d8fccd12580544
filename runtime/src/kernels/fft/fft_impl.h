/* fft_impl.h — the FFT core, included by fft.c with
 *   FT   the compute type (float or double),
 *   FS   a name suffix (f32, f64),
 *   FDT, FCDT  the real and complex dtypes of FT.
 * A plan for a length n and a sign: an iterative self-sorting (Stockham)
 * mixed-radix transform over radices 4, 2, 3, 5 (and plain DFT butterflies
 * for prime factors up to FFT_MAX_RADIX), or, for lengths with larger prime
 * factors, Bluestein's algorithm (a chirp convolution through a
 * 2,3,5-smooth transform of length m >= 2n-1). Twiddles are
 * computed in float64 from exact angle indices and stored in FT. Data are
 * interleaved (re, im) pairs of FT.
 */
#ifndef FFT_MAX_RADIX
#define FFT_MAX_RADIX 31 /* larger prime factors take Bluestein's algorithm */
#endif
#define FFT_CAT2(a, b) a##_##b
#define FFT_CAT(a, b) FFT_CAT2(a, b)
#define F_(name) FFT_CAT(name, FS)

typedef struct F_(fft_plan) {
  int64_t n;
  int sign;
  int nf;
  int64_t fac[64];
  FT* tw;          /* stage twiddles, stage after stage */
  FT* roots;       /* per stage of a generic (prime > 5) radix R: exp(sign 2 pi i k / R), k < R */
  int64_t work;    /* complex elements of scratch fft_exec needs */
  /* Bluestein */
  int64_t m;
  struct F_(fft_plan) * sub; /* forward plan of length m */
  FT* chirp;                 /* n: exp(sign * i pi t^2 / n) */
  FT* bk;                    /* m: the transformed conjugate chirp, divided by m */
} F_(fft_plan_t);

static void F_(fft_plan_free)(F_(fft_plan_t) * p) {
  if (!p) return;
  free(p->tw);
  free(p->roots);
  free(p->chirp);
  free(p->bk);
  F_(fft_plan_free)(p->sub);
  free(p);
}

static void F_(fft_exec)(const F_(fft_plan_t) * p, FT* x, FT* work);

/* exp(sign * 2 pi i k / n) from the exact index k mod n, in float64. */
static inline void F_(fft_root)(int sign, int64_t k, int64_t n, FT* out) {
  k %= n;
  double a = (double)sign * 2.0 * M_PI * (double)k / (double)n;
  out[0] = (FT)cos(a);
  out[1] = (FT)sin(a);
}

static F_(fft_plan_t) * F_(fft_plan_make)(int64_t n, int sign);

static int F_(fft_factor)(int64_t n, int64_t* fac) {
  int nf = 0;
  while (n % 4 == 0) fac[nf++] = 4, n /= 4;
  while (n % 2 == 0) fac[nf++] = 2, n /= 2;
  while (n % 3 == 0) fac[nf++] = 3, n /= 3;
  while (n % 5 == 0) fac[nf++] = 5, n /= 5;
  for (int64_t r = 7; r <= FFT_MAX_RADIX && n > 1; r += 2)
    while (n % r == 0) fac[nf++] = r, n /= r;
  return n == 1 ? nf : -1;
}

static F_(fft_plan_t) * F_(fft_plan_make)(int64_t n, int sign) {
  F_(fft_plan_t)* p = calloc(1, sizeof(*p));
  if (!p) return NULL;
  p->n = n;
  p->sign = sign;
  p->nf = F_(fft_factor)(n, p->fac);
  if (p->nf >= 0) {
    int64_t total = 0, L = 1;
    for (int s = 0; s < p->nf; ++s) total += L * (p->fac[s] - 1), L *= p->fac[s];
    p->tw = malloc(sizeof(FT) * 2 * (size_t)(total > 0 ? total : 1));
    p->roots = malloc(sizeof(FT) * 2 * FFT_MAX_RADIX * (size_t)(p->nf > 0 ? p->nf : 1));
    if (!p->tw || !p->roots) goto fail;
    for (int s = 0; s < p->nf; ++s)
      for (int64_t k = 0; k < p->fac[s]; ++k)
        F_(fft_root)(sign, k, p->fac[s], p->roots + 2 * (FFT_MAX_RADIX * s + k));
    FT* t = p->tw;
    L = 1;
    for (int s = 0; s < p->nf; ++s) {
      int64_t r = p->fac[s], Lp = L * r;
      for (int64_t j = 0; j < L; ++j)
        for (int64_t q = 1; q < r; ++q, t += 2) F_(fft_root)(sign, j * q, Lp, t);
      L = Lp;
    }
    p->work = n;
    return p;
  }
  /* Bluestein: X[k] = c[k] sum_t (x[t] c[t]) conj(c[k - t]), c[t] = exp(sign i pi t^2 / n). */
  int64_t m = 2 * n - 1;
  for (;; ++m) { /* 2,3,5-smooth */
    int64_t r = m;
    while (r % 2 == 0) r /= 2;
    while (r % 3 == 0) r /= 3;
    while (r % 5 == 0) r /= 5;
    if (r == 1) break;
  }
  p->m = m;
  p->sub = F_(fft_plan_make)(m, -1);
  p->chirp = malloc(sizeof(FT) * 2 * (size_t)n);
  p->bk = calloc((size_t)(2 * m), sizeof(FT));
  FT* tmp = malloc(sizeof(FT) * 2 * (size_t)m);
  if (!p->sub || !p->chirp || !p->bk || !tmp) {
    free(tmp);
    goto fail;
  }
  for (int64_t t = 0; t < n; ++t) /* t^2 mod 2n keeps the angle exact */
    F_(fft_root)(sign, (int64_t)(((unsigned __int128)t * (unsigned __int128)t) % (unsigned __int128)(2 * n)), 2 * n,
                 p->chirp + 2 * t);
  for (int64_t t = 0; t < n; ++t) {
    FT re = p->chirp[2 * t] / (FT)m, im = -p->chirp[2 * t + 1] / (FT)m;
    p->bk[2 * t] = re, p->bk[2 * t + 1] = im;
    if (t) p->bk[2 * (m - t)] = re, p->bk[2 * (m - t) + 1] = im;
  }
  F_(fft_exec)(p->sub, p->bk, tmp);
  free(tmp);
  p->work = 2 * m + p->sub->work;
  return p;
fail:
  F_(fft_plan_free)(p);
  return NULL;
}

/* One Stockham stage of radix R: y[j + L u + L R k] = sum_q w_R^{uq} (w_{LR}^{jq} x[j + L k + L r' q]). */
#ifndef FFT_CMUL
#define FFT_CMUL(ar, ai, br, bi, outr, outi) \
  do {                                       \
    FT cr_ = (ar) * (br) - (ai) * (bi);      \
    FT ci_ = (ar) * (bi) + (ai) * (br);      \
    outr = cr_, outi = ci_;                  \
  } while (0)
#endif

/* Butterflies number k * L + j (k < r', j < L); [b, e) of them. A stage per
 * radix, so the R inputs live in registers; BFLY computes br/bi from ar/ai. */
#define FFT_STAGE(NAME, R, ...)                                                              \
  static void F_(NAME)(const FT* restrict x, FT* restrict y, int64_t n, int64_t L,         \
                       const FT* restrict tw, const FT* restrict rt, int sign, int64_t b,  \
                       int64_t e) {                                                         \
    (void)rt;                                                                               \
    const int64_t rp = n / (L * R), xs = L * rp;                                            \
    const FT s = (FT)sign;                                                                  \
    (void)s;                                                                                \
    for (int64_t k = b / L; k < rp && k * L < e; ++k) {                                     \
      const FT* xk = x + 2 * (L * k);                                                       \
      FT* yk = y + 2 * (L * R * k);                                                         \
      int64_t j0 = k * L < b ? b - k * L : 0, j1 = e - k * L < L ? e - k * L : L;          \
      for (int64_t j = j0; j < j1; ++j) {                                                   \
        FT ar[R], ai[R], br[R], bi[R];                                                      \
        ar[0] = xk[2 * j], ai[0] = xk[2 * j + 1];                                           \
        if (L == 1) {                                                                       \
          for (int q = 1; q < R; ++q)                                                       \
            ar[q] = xk[2 * (j + q * xs)], ai[q] = xk[2 * (j + q * xs) + 1];                 \
        } else {                                                                            \
          const FT* w = tw + 2 * (R - 1) * j;                                               \
          for (int q = 1; q < R; ++q) {                                                     \
            FT xr = xk[2 * (j + q * xs)], xi = xk[2 * (j + q * xs) + 1];                    \
            FT wr = w[2 * (q - 1)], wi = w[2 * (q - 1) + 1];                                \
            ar[q] = xr * wr - xi * wi, ai[q] = xr * wi + xi * wr;                           \
          }                                                                                 \
        }                                                                                   \
        __VA_ARGS__                                                                         \
        for (int u = 0; u < R; ++u)                                                         \
          yk[2 * (j + L * u)] = br[u], yk[2 * (j + L * u) + 1] = bi[u];                     \
      }                                                                                     \
    }                                                                                       \
  }

FFT_STAGE(fft_stage2, 2, {
  br[0] = ar[0] + ar[1], bi[0] = ai[0] + ai[1];
  br[1] = ar[0] - ar[1], bi[1] = ai[0] - ai[1];
})

FFT_STAGE(fft_stage4, 4, {
  FT t0r = ar[0] + ar[2], t0i = ai[0] + ai[2], t1r = ar[0] - ar[2], t1i = ai[0] - ai[2];
  FT t2r = ar[1] + ar[3], t2i = ai[1] + ai[3], t3r = ar[1] - ar[3], t3i = ai[1] - ai[3];
  FT ur = -s * t3i, ui = s * t3r; /* w4 * t3, w4 = sign * i */
  br[0] = t0r + t2r, bi[0] = t0i + t2i;
  br[2] = t0r - t2r, bi[2] = t0i - t2i;
  br[1] = t1r + ur, bi[1] = t1i + ui;
  br[3] = t1r - ur, bi[3] = t1i - ui;
})

FFT_STAGE(fft_stage3, 3, {
  const FT h = (FT)0.86602540378443864676;
  FT tr = ar[1] + ar[2], ti = ai[1] + ai[2], dr = ar[1] - ar[2], di = ai[1] - ai[2];
  FT mr = ar[0] - (FT)0.5 * tr, mi = ai[0] - (FT)0.5 * ti;
  FT nr = -s * h * di, ni = s * h * dr; /* sign * i * (sqrt(3)/2) * d */
  br[0] = ar[0] + tr, bi[0] = ai[0] + ti;
  br[1] = mr + nr, bi[1] = mi + ni;
  br[2] = mr - nr, bi[2] = mi - ni;
})

FFT_STAGE(fft_stage5, 5, {
  const FT c1 = (FT)0.30901699437494742410, c2 = (FT)-0.80901699437494742410;
  const FT s1 = (FT)0.95105651629515357212, s2 = (FT)0.58778525229247312917;
  FT t1r = ar[1] + ar[4], t1i = ai[1] + ai[4], d1r = ar[1] - ar[4], d1i = ai[1] - ai[4];
  FT t2r = ar[2] + ar[3], t2i = ai[2] + ai[3], d2r = ar[2] - ar[3], d2i = ai[2] - ai[3];
  FT m1r = ar[0] + c1 * t1r + c2 * t2r, m1i = ai[0] + c1 * t1i + c2 * t2i;
  FT m2r = ar[0] + c2 * t1r + c1 * t2r, m2i = ai[0] + c2 * t1i + c1 * t2i;
  FT e1r = s1 * d1r + s2 * d2r, e1i = s1 * d1i + s2 * d2i;
  FT e2r = s2 * d1r - s1 * d2r, e2i = s2 * d1i - s1 * d2i;
  FT n1r = -s * e1i, n1i = s * e1r, n2r = -s * e2i, n2i = s * e2r;
  br[0] = ar[0] + t1r + t2r, bi[0] = ai[0] + t1i + t2i;
  br[1] = m1r + n1r, bi[1] = m1i + n1i;
  br[4] = m1r - n1r, bi[4] = m1i - n1i;
  br[2] = m2r + n2r, bi[2] = m2i + n2i;
  br[3] = m2r - n2r, bi[3] = m2i - n2i;
})

/* A prime radix R (7..FFT_MAX_RADIX): the plain R-point DFT with the roots rt. */
static void F_(fft_stage_generic)(const FT* restrict x, FT* restrict y, int64_t n, int64_t L,
                                  int64_t R, const FT* restrict tw, const FT* restrict rt,
                                  int64_t b, int64_t e) {
  const int64_t rp = n / (L * R), xs = L * rp;
  for (int64_t k = b / L; k < rp && k * L < e; ++k) {
    const FT* xk = x + 2 * (L * k);
    FT* yk = y + 2 * (L * R * k);
    int64_t j0 = k * L < b ? b - k * L : 0, j1 = e - k * L < L ? e - k * L : L;
    for (int64_t j = j0; j < j1; ++j) {
      FT ar[FFT_MAX_RADIX], ai[FFT_MAX_RADIX];
      const FT* w = tw + 2 * (R - 1) * j;
      ar[0] = xk[2 * j], ai[0] = xk[2 * j + 1];
      for (int64_t q = 1; q < R; ++q) {
        FT xr = xk[2 * (j + q * xs)], xi = xk[2 * (j + q * xs) + 1];
        FT wr = L > 1 ? w[2 * (q - 1)] : (FT)1, wi = L > 1 ? w[2 * (q - 1) + 1] : (FT)0;
        ar[q] = xr * wr - xi * wi, ai[q] = xr * wi + xi * wr;
      }
      for (int64_t u = 0; u < R; ++u) {
        FT sr = ar[0], si = ai[0];
        for (int64_t q = 1, uq = u; q < R; ++q, uq = (uq + u) % R) {
          FT wr = rt[2 * uq], wi = rt[2 * uq + 1];
          sr += ar[q] * wr - ai[q] * wi;
          si += ar[q] * wi + ai[q] * wr;
        }
        yk[2 * (j + L * u)] = sr, yk[2 * (j + L * u) + 1] = si;
      }
    }
  }
}

static void F_(fft_stage)(const FT* restrict x, FT* restrict y, int64_t n, int64_t L, int64_t R,
                          const FT* restrict tw, const FT* restrict rt, int sign, int64_t b,
                          int64_t e) {
  if (R == 4) F_(fft_stage4)(x, y, n, L, tw, rt, sign, b, e);
  else if (R == 2) F_(fft_stage2)(x, y, n, L, tw, rt, sign, b, e);
  else if (R == 3) F_(fft_stage3)(x, y, n, L, tw, rt, sign, b, e);
  else if (R == 5) F_(fft_stage5)(x, y, n, L, tw, rt, sign, b, e);
  else F_(fft_stage_generic)(x, y, n, L, R, tw, rt, b, e);
}
#undef FFT_STAGE

typedef struct F_(fft_stage_job) {
  const FT* x;
  FT* y;
  int64_t n, L, R;
  const FT* tw;
  const FT* rt;
  int sign;
} F_(fft_stage_job_t);

static void F_(fft_stage_chunk)(void* arg, int64_t b, int64_t e) {
  const F_(fft_stage_job_t)* j = (const F_(fft_stage_job_t)*)arg;
  F_(fft_stage)(j->x, j->y, j->n, j->L, j->R, j->tw, j->rt, j->sign, b, e);
}

/* Long transforms split each stage over the compute pool (inside a parallel
 * pass over lines the pool is busy and this runs serially). */
#define FFT_STAGE_PARALLEL (1 << 15)
#define FFT_STAGE_GRAIN (1 << 13)

/* x (n complex) <- its transform; work holds p->work complex elements. */
static void F_(fft_exec)(const F_(fft_plan_t) * p, FT* x, FT* work) {
  const int64_t n = p->n;
  if (n <= 1) return;
  if (p->nf >= 0) {
    FT *a = x, *b = work;
    const FT* tw = p->tw;
    int64_t L = 1;
    for (int s = 0; s < p->nf; ++s) {
      int64_t R = p->fac[s];
      const FT* rt = p->roots + 2 * FFT_MAX_RADIX * s;
      if (n >= FFT_STAGE_PARALLEL) {
        F_(fft_stage_job_t) job = {a, b, n, L, R, tw, rt, p->sign};
        tpu_parallel_for(n / R, FFT_STAGE_GRAIN, F_(fft_stage_chunk), &job);
      } else {
        F_(fft_stage)(a, b, n, L, R, tw, rt, p->sign, 0, n / R);
      }
      tw += 2 * L * (R - 1);
      L *= R;
      FT* t = a;
      a = b, b = t;
    }
    if (a != x) memcpy(x, a, sizeof(FT) * 2 * (size_t)n);
    return;
  }
  const int64_t m = p->m;
  FT *a = work, *sub_work = work + 2 * m;
  for (int64_t t = 0; t < n; ++t) {
    FT cr = p->chirp[2 * t], ci = p->chirp[2 * t + 1];
    FFT_CMUL(x[2 * t], x[2 * t + 1], cr, ci, a[2 * t], a[2 * t + 1]);
  }
  memset(a + 2 * n, 0, sizeof(FT) * 2 * (size_t)(m - n));
  F_(fft_exec)(p->sub, a, sub_work);
  /* times bk, conjugated: the inverse transform as a forward one of the conjugate */
  for (int64_t k = 0; k < m; ++k) {
    FT r, i;
    FFT_CMUL(a[2 * k], a[2 * k + 1], p->bk[2 * k], p->bk[2 * k + 1], r, i);
    a[2 * k] = r, a[2 * k + 1] = -i;
  }
  F_(fft_exec)(p->sub, a, sub_work);
  for (int64_t k = 0; k < n; ++k) {
    FT cr = p->chirp[2 * k], ci = p->chirp[2 * k + 1];
    FFT_CMUL(a[2 * k], -a[2 * k + 1], cr, ci, x[2 * k], x[2 * k + 1]);
  }
}

/* ---- real transforms through a half-length complex one ---------------------------- */

/* A line transform of the family: length n, with what it needs. */
typedef struct F_(fft_line_plan) {
  fft_kind_t kind; /* of this pass: FFT_C2C, FFT_R2C or FFT_C2R */
  int64_t n;
  F_(fft_plan_t) * full; /* length n (c2c; odd real lengths) */
  F_(fft_plan_t) * half; /* length n/2 (even real lengths) */
  FT* rtw;               /* n/2+1: exp(sign * 2 pi i k / n) for the real post/pre-processing */
  int64_t work;          /* FT elements of scratch per line */
} F_(fft_line_plan_t);

static void F_(fft_line_plan_free)(F_(fft_line_plan_t) * lp) {
  F_(fft_plan_free)(lp->full);
  F_(fft_plan_free)(lp->half);
  free(lp->rtw);
  lp->full = lp->half = NULL;
  lp->rtw = NULL;
}

static bool F_(fft_line_plan_init)(F_(fft_line_plan_t) * lp, fft_kind_t kind, int64_t n, int sign) {
  memset(lp, 0, sizeof(*lp));
  lp->kind = kind;
  lp->n = n;
  bool half = kind != FFT_C2C && n % 2 == 0 && n >= 2;
  if (half) {
    lp->half = F_(fft_plan_make)(n / 2, sign);
    lp->rtw = malloc(sizeof(FT) * 2 * (size_t)(n / 2 + 1));
    if (!lp->half || !lp->rtw) return false;
    for (int64_t k = 0; k <= n / 2; ++k) F_(fft_root)(sign, k, n, lp->rtw + 2 * k);
    lp->work = 2 * (n + 2) + 2 * lp->half->work;
  } else {
    lp->full = F_(fft_plan_make)(n, sign);
    if (!lp->full) return false;
    lp->work = 2 * (n + 2) + 2 * lp->full->work;
  }
  return true;
}

/* r2c of one line: x (n reals, in buf) -> X[0..n/2] (in buf, n/2+1 complex);
 * buf holds n + 2 FT pairs. */
static void F_(fft_r2c_line)(const F_(fft_line_plan_t) * lp, FT* buf, FT* work) {
  const int64_t n = lp->n;
  if (lp->half) {
    const int64_t h = n / 2;
    F_(fft_exec)(lp->half, buf, work); /* z[k] = x[2k] + i x[2k+1] */
    /* X[k] = E + w^k O, E = (Z[k] + conj Z[h-k]) / 2, O = (Z[k] - conj Z[h-k]) / 2i.
     * Pairs (k, h-k) are done together, in place. */
    FT z0r = buf[0], z0i = buf[1];
    buf[0] = z0r + z0i, buf[1] = 0;
    buf[2 * h] = z0r - z0i, buf[2 * h + 1] = 0;
    for (int64_t k = 1; k <= h - k; ++k) {
      int64_t j = h - k;
      FT ar = buf[2 * k], ai = buf[2 * k + 1], br = buf[2 * j], bi = buf[2 * j + 1];
      /* for k: Zk = a, Zc = conj(b); for j: Zk = b, Zc = conj(a) */
      FT er = (ar + br) * (FT)0.5, ei = (ai - bi) * (FT)0.5;  /* E_k */
      FT or_ = (ai + bi) * (FT)0.5, oi = (br - ar) * (FT)0.5; /* O_k = (a - conj b) / 2i */
      FT wr = lp->rtw[2 * k], wi = lp->rtw[2 * k + 1];
      FT tr, ti;
      FFT_CMUL(wr, wi, or_, oi, tr, ti);
      FT xkr = er + tr, xki = ei + ti;
      /* E_j = conj(E_k), O_j = conj(-O_k)... computed directly */
      FT fr = (br + ar) * (FT)0.5, fi = (bi - ai) * (FT)0.5;
      FT pr = (bi + ai) * (FT)0.5, pi = (ar - br) * (FT)0.5;
      FT vr = lp->rtw[2 * j], vi = lp->rtw[2 * j + 1];
      FT ur, ui;
      FFT_CMUL(vr, vi, pr, pi, ur, ui);
      buf[2 * k] = xkr, buf[2 * k + 1] = xki;
      buf[2 * j] = fr + ur, buf[2 * j + 1] = fi + ui;
    }
    return;
  }
  /* odd n (or 1): as a complex transform with zero imaginary parts */
  FT* c = work;
  FT* w2 = work + 2 * n;
  for (int64_t t = 0; t < n; ++t) c[2 * t] = buf[t], c[2 * t + 1] = 0;
  F_(fft_exec)(lp->full, c, w2);
  memcpy(buf, c, sizeof(FT) * 2 * (size_t)(n / 2 + 1));
}

/* c2r of one line: X[0..n/2] (in buf) -> x (n reals, in buf). */
static void F_(fft_c2r_line)(const F_(fft_line_plan_t) * lp, FT* buf, FT* work) {
  const int64_t n = lp->n;
  if (lp->half) {
    const int64_t h = n / 2;
    /* Z[k] = E + i O, E = X[k] + conj X[h-k], O = (X[k] - conj X[h-k]) w^k (w = exp(+2 pi i/n)):
     * Z = 2 FFT(x_even + i x_odd); imaginary parts of X[0], X[h] are ignored. */
    FT x0 = buf[0], xh = buf[2 * h];
    buf[0] = x0 + xh, buf[1] = x0 - xh; /* E = x0 + xh, O = x0 - xh: Z = E + iO */
    for (int64_t k = 1; k <= h - k; ++k) {
      int64_t j = h - k;
      FT ar = buf[2 * k], ai = buf[2 * k + 1], br = buf[2 * j], bi = buf[2 * j + 1];
      if (j == k) { /* the middle term: X[k] and conj X[k] */
        FT er = 2 * ar, ei = 0, dr = 0, di = 2 * ai;
        FT tr, ti;
        FFT_CMUL(dr, di, lp->rtw[2 * k], lp->rtw[2 * k + 1], tr, ti);
        buf[2 * k] = er - ti, buf[2 * k + 1] = ei + tr;
        break;
      }
      FT er = ar + br, ei = ai - bi, dr = ar - br, di = ai + bi; /* for k */
      FT fr = br + ar, fi = bi - ai, gr = br - ar, gi = bi + ai; /* for j */
      FT tr, ti, ur, ui;
      FFT_CMUL(dr, di, lp->rtw[2 * k], lp->rtw[2 * k + 1], tr, ti);
      FFT_CMUL(gr, gi, lp->rtw[2 * j], lp->rtw[2 * j + 1], ur, ui);
      buf[2 * k] = er - ti, buf[2 * k + 1] = ei + tr;
      buf[2 * j] = fr - ui, buf[2 * j + 1] = fi + ur;
    }
    F_(fft_exec)(lp->half, buf, work); /* buf now holds x as n reals */
    return;
  }
  FT* c = work;
  FT* w2 = work + 2 * n;
  c[0] = buf[0], c[1] = 0;
  for (int64_t k = 1; k <= (n - 1) / 2; ++k) {
    c[2 * k] = buf[2 * k], c[2 * k + 1] = buf[2 * k + 1];
    c[2 * (n - k)] = buf[2 * k], c[2 * (n - k) + 1] = -buf[2 * k + 1];
  }
  F_(fft_exec)(lp->full, c, w2);
  for (int64_t t = 0; t < n; ++t) buf[t] = c[2 * t];
}


/* ---- passes: one line transform along one dim of every line ----------------------- */

typedef struct F_(fft_pass) {
  const F_(fft_line_plan_t) * lp;
  const tpu_view_t *src, *dst;
  int32_t dim;
  int64_t src_len, dst_len; /* elements read / written along dim */
  walk_t lines;             /* the other dims: view 0 src, 1 dst */
  FT scale;
  int failed;
} F_(fft_pass_t);

/* One gathered line in buf (n reals or src_len complex values) -> its
 * transform, scaled (dst_len complex values or n reals). */
static void F_(fft_line)(const F_(fft_pass_t) * P, FT* buf, FT* work) {
  const F_(fft_line_plan_t)* lp = P->lp;
  const int64_t n = lp->n;
  int64_t out_reals;
  if (lp->kind == FFT_C2C) {
    F_(fft_exec)(lp->full, buf, work);
    out_reals = 2 * P->dst_len;
  } else if (lp->kind == FFT_R2C) {
    F_(fft_r2c_line)(lp, buf, work);
    for (int64_t j = n / 2 + 1; j < P->dst_len; ++j) /* two-sided: the conjugate half */
      buf[2 * j] = buf[2 * (n - j)], buf[2 * j + 1] = -buf[2 * (n - j) + 1];
    out_reals = 2 * P->dst_len;
  } else {
    F_(fft_c2r_line)(lp, buf, work);
    out_reals = P->dst_len;
  }
  if (P->scale != (FT)1)
    for (int64_t j = 0; j < out_reals; ++j) buf[j] *= P->scale;
}

/* Lines whose neighbours are adjacent in memory (a transform along an outer
 * dim) move in blocks of up to FFT_BLOCK lines: element t of every line of
 * the block is one contiguous run, so the strided walk touches each cache
 * line once; the block is transposed in a buffer. */
#define FFT_BLOCK 16

static void F_(fft_pass_lines)(void* arg, int64_t begin, int64_t end) {
  F_(fft_pass_t)* P = (F_(fft_pass_t)*)arg;
  const F_(fft_line_plan_t)* lp = P->lp;
  const int64_t n = lp->n;
  const bool cin = lp->kind != FFT_R2C, cout = lp->kind != FFT_C2R;
  const tpu_dtype_t it = cin ? FCDT : FDT, ot = cout ? FCDT : FDT;
  const int64_t iw = cin ? 2 : 1, ow = cout ? 2 : 1; /* FT values per element */
  const int64_t ss = P->src->strides[P->dim], ds = P->dst->strides[P->dim];
  const int32_t last = P->lines.ndim - 1;
  int64_t B = 1;
  if (last >= 0 && P->lines.strides[0][last] == 1 && P->lines.strides[1][last] == 1 &&
      (ss != 1 || ds != 1)) {
    B = ((int64_t)1 << 16) / (n + 1);
    if (B > FFT_BLOCK) B = FFT_BLOCK;
  }
  FT* buf = malloc(sizeof(FT) * 2 * (size_t)(n + 2));
  FT* work = malloc(sizeof(FT) * (size_t)(lp->work > 0 ? lp->work : 1));
  FT *gin = NULL, *gout = NULL;
  if (B > 1) {
    gin = malloc(sizeof(FT) * (size_t)(B * P->src_len * iw));
    gout = malloc(sizeof(FT) * (size_t)(B * P->dst_len * ow));
    if (!gin || !gout) B = 1;
  }
  if (!buf || !work) {
    __atomic_store_n(&P->failed, 1, __ATOMIC_RELAXED);
    begin = end;
  }
  for (int64_t k = begin; k < end;) {
    int64_t offs[2];
    walk_offsets(&P->lines, P->lines.ndim, k, offs);
    int64_t g = 1;
    if (B > 1) {
      int64_t row_left = P->lines.sizes[last] - k % P->lines.sizes[last];
      g = B < end - k ? B : end - k;
      if (g > row_left) g = row_left;
    }
    if (g == 1) {
      tpu_convert(buf, it, 1, view_at(P->src, offs[0]), P->src->dtype, ss, P->src_len);
      F_(fft_line)(P, buf, work);
      tpu_convert(view_at(P->dst, offs[1]), P->dst->dtype, ds, buf, ot, 1, P->dst_len);
      ++k;
      continue;
    }
    for (int64_t t = 0; t < P->src_len; ++t)
      tpu_convert(gin + t * B * iw, it, 1, view_at(P->src, offs[0] + t * ss), P->src->dtype, 1, g);
    for (int64_t b = 0; b < g; ++b) {
      for (int64_t t = 0; t < P->src_len; ++t)
        for (int64_t c = 0; c < iw; ++c) buf[t * iw + c] = gin[(t * B + b) * iw + c];
      F_(fft_line)(P, buf, work);
      for (int64_t t = 0; t < P->dst_len; ++t)
        for (int64_t c = 0; c < ow; ++c) gout[(t * B + b) * ow + c] = buf[t * ow + c];
    }
    for (int64_t t = 0; t < P->dst_len; ++t)
      tpu_convert(view_at(P->dst, offs[1] + t * ds), P->dst->dtype, 1, gout + t * B * ow, ot, 1, g);
    k += g;
  }
  free(buf);
  free(work);
  free(gin);
  free(gout);
}
#undef FFT_BLOCK

/* ---- a cache of line plans (twiddles cost more than a short transform) --------------- */

#define FFT_CACHE 16
typedef struct F_(fft_cache_entry) {
  F_(fft_line_plan_t) lp;
  int sign;
  int users; /* passes holding it; evicted only at 0 */
  uint64_t used;
  bool valid;
} F_(fft_cache_entry_t);

static F_(fft_cache_entry_t) F_(g_fft_cache)[FFT_CACHE];
static pthread_mutex_t F_(g_fft_cache_mu) = PTHREAD_MUTEX_INITIALIZER;
static uint64_t F_(g_fft_cache_clock);

/* A shared plan for (kind, n, sign), or NULL (out of memory); release it with fft_plan_put. */
static F_(fft_cache_entry_t) * F_(fft_plan_get)(fft_kind_t kind, int64_t n, int sign) {
  pthread_mutex_lock(&F_(g_fft_cache_mu));
  F_(fft_cache_entry_t)* hit = NULL;
  F_(fft_cache_entry_t)* victim = NULL;
  for (int i = 0; i < FFT_CACHE; ++i) {
    F_(fft_cache_entry_t)* e = &F_(g_fft_cache)[i];
    if (e->valid && e->lp.kind == kind && e->lp.n == n && e->sign == sign) hit = e;
    if (!e->valid || (e->users == 0 && (!victim || (victim->valid && e->used < victim->used))))
      if (!victim || victim->valid) victim = e;
  }
  if (!hit && victim) {
    if (victim->valid) F_(fft_line_plan_free)(&victim->lp);
    victim->valid = false;
    if (F_(fft_line_plan_init)(&victim->lp, kind, n, sign)) {
      victim->valid = true;
      victim->sign = sign;
      victim->users = 0;
      hit = victim;
    } else {
      F_(fft_line_plan_free)(&victim->lp);
    }
  }
  if (hit) {
    hit->users++;
    hit->used = ++F_(g_fft_cache_clock);
  }
  pthread_mutex_unlock(&F_(g_fft_cache_mu));
  return hit;
}

static void F_(fft_plan_put)(F_(fft_cache_entry_t) * e) {
  pthread_mutex_lock(&F_(g_fft_cache_mu));
  e->users--;
  pthread_mutex_unlock(&F_(g_fft_cache_mu));
}

/* dst = transform of src along dim (lines of src_len in, dst_len out); src and dst
 * agree on the other dims; they may be the same view. Plans come from the
 * cache, or (every entry busy) are made for this pass. */
static tpu_status_t F_(fft_pass_run)(fft_kind_t kind, const tpu_view_t* src, const tpu_view_t* dst,
                                     int32_t dim, int64_t n, int sign, double scale) {
  F_(fft_line_plan_t) own;
  memset(&own, 0, sizeof(own));
  F_(fft_cache_entry_t)* cached = F_(fft_plan_get)(kind, n, sign);
  if (!cached && !F_(fft_line_plan_init)(&own, kind, n, sign)) {
    F_(fft_line_plan_free)(&own);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "fft: out of host memory for a plan");
  }
  F_(fft_pass_t) P;
  memset(&P, 0, sizeof(P));
  P.lp = cached ? &cached->lp : &own;
  P.src = src;
  P.dst = dst;
  P.dim = dim;
  P.src_len = kind == FFT_C2R ? n / 2 + 1 : n;
  P.dst_len = dst->sizes[dim];
  P.scale = (FT)scale;
  walk_start(&P.lines, 2);
  for (int32_t d = 0; d < dst->ndim; ++d) {
    if (d == dim) continue;
    int64_t st[2] = {src->strides[d], dst->strides[d]};
    walk_push(&P.lines, dst->sizes[d], st);
  }
  int64_t nlines = P.lines.numel;
  int64_t grain = 65536 / (n + 1);
  tpu_parallel_for(nlines, grain > 1 ? grain : 1, F_(fft_pass_lines), &P);
  if (cached) F_(fft_plan_put)(cached);
  else F_(fft_line_plan_free)(&own);
  if (P.failed) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "fft: out of host memory");
  return TPU_OK;
}

static tpu_status_t F_(fft_run)(const fft_args_t* a, const tpu_view_t* out) {
  const int32_t nd = a->ndims, last = a->dims[nd - 1];
  const tpu_view_t* in = a->in;
  if (a->kind == FFT_R2C) {
    TPU_RETURN_IF_ERROR(F_(fft_pass_run)(FFT_R2C, in, out, last, in->sizes[last], -1,
                                         nd == 1 ? a->scale : 1.0));
    for (int32_t i = 0; i + 1 < nd; ++i)
      TPU_RETURN_IF_ERROR(F_(fft_pass_run)(FFT_C2C, out, out, a->dims[i], out->sizes[a->dims[i]],
                                           -1, i + 2 == nd ? a->scale : 1.0));
    return TPU_OK;
  }
  if (a->kind == FFT_C2C) {
    for (int32_t i = 0; i < nd; ++i)
      TPU_RETURN_IF_ERROR(F_(fft_pass_run)(FFT_C2C, i == 0 ? in : out, out, a->dims[i],
                                           out->sizes[a->dims[i]], a->sign,
                                           i + 1 == nd ? a->scale : 1.0));
    return TPU_OK;
  }
  /* c2r: the other dims backward into a buffer of the half spectrum, then the last dim */
  const int64_t n = a->last_size, h = n / 2 + 1;
  tpu_view_t half = *in;
  half.sizes[last] = h;
  if (nd == 1) return F_(fft_pass_run)(FFT_C2R, &half, out, last, n, +1, a->scale);
  int64_t numel = tpu_view_numel(&half);
  void* mem = malloc(sizeof(FT) * 2 * (size_t)(numel > 0 ? numel : 1));
  if (!mem) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "fft: out of host memory");
  tpu_view_t tmp = view_of(mem, FCDT, half.ndim, half.sizes);
  tpu_status_t s = TPU_OK;
  for (int32_t i = 0; i + 1 < nd && s == TPU_OK; ++i)
    s = F_(fft_pass_run)(FFT_C2C, i == 0 ? &half : &tmp, &tmp, a->dims[i], tmp.sizes[a->dims[i]],
                         +1, 1.0);
  if (s == TPU_OK) s = F_(fft_pass_run)(FFT_C2R, &tmp, out, last, n, +1, a->scale);
  free(mem);
  return s;
}

#undef FFT_STAGE_PARALLEL
#undef FFT_CACHE
#undef FFT_STAGE_GRAIN
#undef F_
#undef FFT_CAT
#undef FFT_CAT2
