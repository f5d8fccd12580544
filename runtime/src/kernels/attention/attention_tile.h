/* attention_tile.h — the attention kernels' work-type template, included by
 * attention.c once per work type with AT_W (F32 / F64) and AT_TYPE (float /
 * double) defined. See attention.c for the algorithm. */
#define AT_CAT2(a, b) a##_##b
#define AT_CAT1(a, b) AT_CAT2(a, b)
#define AT_CAT(a) AT_CAT1(a, AT_W)

/* Forward units [begin, end): (batch, head, query block). */
static void AT_CAT(attn_fwd_chunk)(void* arg, int64_t begin, int64_t end) {
  attn_job_t* j = (attn_job_t*)arg;
  const attn_args_t* a = &j->a;
  typedef AT_TYPE T;
  const size_t es = sizeof(T);
  const int64_t BQ = ATTN_FWD_BQ, BK = ATTN_FWD_BK, D = a->D, Dv = a->Dv;
  T* sbuf = malloc((size_t)(BQ * BK) * es);
  T* acc = malloc((size_t)(BQ * Dv) * es);
  T* brow = malloc((size_t)BK * es);
  if (!sbuf || !acc || !brow) {
    atomic_store(&j->failed, 1);
    free(sbuf), free(acc), free(brow);
    return;
  }
  T m[ATTN_FWD_BQ], l[ATTN_FWD_BQ], lv[ATTN_FWD_BQ], cr[ATTN_FWD_BQ];
  const int64_t group = a->H / a->Hkv;
  const double keep = 1.0 - a->dropout;
  const T inv_keep = (T)(1.0 / keep);
  const tpu_view_t o4 = attn_as4(j->out[0]);
  const tpu_view_t l3 = lse3(j->out[1], a->rank3);
  for (int64_t u = begin; u < end; ++u) {
    int64_t b = u / (a->H * j->nqb), h = (u / j->nqb) % a->H, i0 = (u % j->nqb) * BQ;
    int64_t rows = a->L - i0 < BQ ? a->L - i0 : BQ, hk = h / group;
    const T* Q = (const T*)amat_row(&j->q, es, b, h, i0);
    memset(acc, 0, (size_t)(rows * Dv) * es);
    for (int64_t r = 0; r < rows; ++r) m[r] = -INFINITY, l[r] = 0;
    int64_t jend = a->causal ? (a->S < i0 + rows ? a->S : i0 + rows) : a->S;
    for (int64_t j0 = 0; j0 < jend; j0 += BK) {
      int64_t n = jend - j0 < BK ? jend - j0 : BK;
      const T* KT = (const T*)j->kt + ((b * a->Hkv + hk) * j->nkb + j0 / BK) * D * BK;
      AT_CAT(gemm)(false, false, (int)rows, (int)n, (int)D, a->scale, Q, (int)j->q.sr, KT,
                   (int)BK, 0.0, sbuf, (int)n);
      for (int64_t r = 0; (a->has_bias || (a->causal && j0 + n > i0)) && r < rows; ++r) {
        T* row = sbuf + r * n;
        int64_t i = i0 + r;
        if (a->has_bias) {
          bias_row(a, b, h, i, j0, n, brow);
          for (int64_t c = 0; c < n; ++c) row[c] += brow[c];
        }
        if (a->causal)
          for (int64_t c = i + 1 - j0 > 0 ? i + 1 - j0 : 0; c < n; ++c) row[c] = -INFINITY;
      }
      AT_CAT(at_block)(sbuf, rows, n, m, l, cr);
      for (int64_t r = 0; r < rows; ++r) {
        T* row = sbuf + r * n;
        int64_t i = i0 + r;
        if (cr[r] != 1) {
          T* ar = acc + r * Dv;
          for (int64_t c = 0; c < Dv; ++c) ar[c] *= cr[r];
        }
        if (a->dropout > 0 && m[r] != -INFINITY) {
          uint32_t w[4];
          for (int64_t c = 0; c < n; ++c) {
            rng_block(a->seed, a->offset, attn_rng_index(a, b, h, i, j0 + c), w);
            row[c] = rng_bernoulli(w, keep) ? row[c] * inv_keep : 0;
          }
        }
      }
      const T* V = (const T*)amat_row(&j->v, es, b, hk, j0);
      AT_CAT(gemm)(false, false, (int)rows, (int)Dv, (int)n, 1.0, sbuf, (int)n, V, (int)j->v.sr,
                   1.0, acc, (int)Dv);
    }
    for (int64_t r = 0; r < rows; ++r) {
      T* ar = acc + r * Dv;
      T inv = l[r] == 0 ? 0 : 1 / l[r];
      for (int64_t c = 0; c < Dv; ++c) ar[c] *= inv;
      lv[r] = l[r] == 0 ? (T)-INFINITY : (T)(m[r] + log((double)l[r]));
      char* dst = view_at(&o4, b * o4.strides[0] + h * o4.strides[1] + (i0 + r) * o4.strides[2]);
      tpu_convert(dst, o4.dtype, o4.strides[3], ar, a->work, 1, Dv);
    }
    tpu_convert(view_at(&l3, b * l3.strides[0] + h * l3.strides[1] + i0 * l3.strides[2]), l3.dtype,
                l3.strides[2], lv, a->work, 1, rows);
  }
  free(sbuf), free(acc), free(brow);
}

/* Writes rows [0, rows) of a [rows, cols] work-type matrix to (b, h) of a 4-D view. */
static void AT_CAT(store_rows)(const tpu_view_t* v4, int64_t b, int64_t h, const AT_TYPE* src,
                               int64_t rows, int64_t cols, tpu_dtype_t work) {
  for (int64_t i = 0; i < rows; ++i)
    tpu_convert(view_at(v4, b * v4->strides[0] + h * v4->strides[1] + i * v4->strides[2]),
                v4->dtype, v4->strides[3], src + i * cols, work, 1, cols);
}

/* Backward units [begin, end): (batch, key/value head). */
static void AT_CAT(attn_bwd_chunk)(void* arg, int64_t begin, int64_t end) {
  attn_job_t* j = (attn_job_t*)arg;
  const attn_args_t* a = &j->a;
  typedef AT_TYPE T;
  const size_t es = sizeof(T);
  const int64_t BQ = ATTN_BQ, BK = ATTN_BK, D = a->D, Dv = a->Dv, L = a->L, S = a->S;
  T* P = malloc((size_t)(BQ * BK) * es);
  T* dP = malloc((size_t)(BQ * BK) * es);
  T* Pd = malloc((size_t)(BQ * BK) * es);
  T* brow = malloc((size_t)BK * es);
  T* dK = malloc((size_t)(S * D + 1) * es);
  T* dV = malloc((size_t)(S * Dv + 1) * es);
  T* dQ = malloc((size_t)(L * D + 1) * es);
  T* Dvec = malloc((size_t)(L + 1) * es);
  T* lse = malloc((size_t)(L + 1) * es);
  if (!P || !dP || !Pd || !brow || !dK || !dV || !dQ || !Dvec || !lse) {
    atomic_store(&j->failed, 1);
    goto done;
  }
  const int64_t group = a->H / a->Hkv;
  const double keep = 1.0 - a->dropout;
  const T inv_keep = (T)(1.0 / keep);
  const tpu_view_t gq = attn_as4(j->out[0]), gk = attn_as4(j->out[1]), gv = attn_as4(j->out[2]);
  T* gb = (T*)j->gbias;
  for (int64_t u = begin; u < end; ++u) {
    int64_t b = u / a->Hkv, hk = u % a->Hkv;
    memset(dK, 0, (size_t)(S * D) * es);
    memset(dV, 0, (size_t)(S * Dv) * es);
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      for (int64_t i = 0; i < L; ++i) {
        const T* gr = (const T*)amat_row(&j->go, es, b, h, i);
        const T* orow = (const T*)amat_row(&j->o, es, b, h, i);
        double s = 0;
        for (int64_t c = 0; c < Dv; ++c) s += (double)gr[c] * orow[c];
        Dvec[i] = (T)s;
      }
      tpu_convert(lse, a->work, 1,
                  view_at(&a->lse, b * a->lse.strides[0] + h * a->lse.strides[1]), a->lse.dtype,
                  a->lse.strides[2], L);
      memset(dQ, 0, (size_t)(L * D) * es);
      for (int64_t j0 = 0; j0 < S; j0 += BK) {
        int64_t n = S - j0 < BK ? S - j0 : BK;
        const T* K = (const T*)amat_row(&j->k, es, b, hk, j0);
        const T* V = (const T*)amat_row(&j->v, es, b, hk, j0);
        for (int64_t i0 = a->causal ? j0 : 0; i0 < L; i0 += BQ) {
          int64_t rows = L - i0 < BQ ? L - i0 : BQ;
          const T* Q = (const T*)amat_row(&j->q, es, b, h, i0);
          const T* GO = (const T*)amat_row(&j->go, es, b, h, i0);
          AT_CAT(gemm)(false, true, (int)rows, (int)n, (int)D, a->scale, Q, (int)j->q.sr, K,
                       (int)j->k.sr, 0.0, P, (int)n);
          AT_CAT(gemm)(false, true, (int)rows, (int)n, (int)Dv, 1.0, GO, (int)j->go.sr, V,
                       (int)j->v.sr, 0.0, dP, (int)n);
          T* PV = a->dropout > 0 ? Pd : P; /* what multiplied V in the forward */
          for (int64_t r = 0; r < rows; ++r) {
            int64_t i = i0 + r;
            T *p = P + r * n, *dp = dP + r * n, *pd = Pd + r * n;
            if (lse[i] == -INFINITY) {
              memset(p, 0, (size_t)n * es), memset(dp, 0, (size_t)n * es);
              memset(pd, 0, (size_t)n * es);
              continue;
            }
            if (a->has_bias) {
              bias_row(a, b, h, i, j0, n, brow);
              for (int64_t c = 0; c < n; ++c) p[c] += brow[c];
            }
            if (a->causal)
              for (int64_t c = i + 1 - j0 > 0 ? i + 1 - j0 : 0; c < n; ++c) p[c] = -INFINITY;
            AT_CAT(at_exps)(p, lse[i], n);
            if (a->dropout > 0) {
              uint32_t w[4];
              for (int64_t c = 0; c < n; ++c) {
                rng_block(a->seed, a->offset, attn_rng_index(a, b, h, i, j0 + c), w);
                T z = rng_bernoulli(w, keep) ? inv_keep : 0;
                pd[c] = p[c] * z;
                dp[c] *= z;
              }
            }
            T di = Dvec[i];
            for (int64_t c = 0; c < n; ++c) dp[c] = p[c] * (dp[c] - di);
            if (gb) {
              T* g = gb + b * j->gb_str[0] + h * j->gb_str[1] + i * j->gb_str[2];
              for (int64_t c = 0; c < n; ++c) g[(j0 + c) * j->gb_str[3]] += dp[c];
            }
          }
          AT_CAT(gemm)(true, false, (int)n, (int)Dv, (int)rows, 1.0, PV, (int)n, GO,
                       (int)j->go.sr, 1.0, dV + j0 * Dv, (int)Dv);
          AT_CAT(gemm)(false, false, (int)rows, (int)D, (int)n, a->scale, dP, (int)n, K,
                       (int)j->k.sr, 1.0, dQ + i0 * D, (int)D);
          AT_CAT(gemm)(true, false, (int)n, (int)D, (int)rows, a->scale, dP, (int)n, Q,
                       (int)j->q.sr, 1.0, dK + j0 * D, (int)D);
        }
      }
      AT_CAT(store_rows)(&gq, b, h, dQ, L, D, a->work);
    }
    AT_CAT(store_rows)(&gk, b, hk, dK, S, D, a->work);
    AT_CAT(store_rows)(&gv, b, hk, dV, S, Dv, a->work);
  }
done:
  free(P), free(dP), free(Pd), free(brow), free(dK), free(dV), free(dQ), free(Dvec), free(lse);
}

#undef AT_CAT
#undef AT_CAT1
#undef AT_CAT2
