/* attention.c — the attention family: scaled dot-product attention forward
 * and backward, tiled and memory-efficient (flash-style, online softmax).
 *
 * Forward: work units are (batch, head, block of ATTN_FWD_BQ query rows), spread
 * over tpu_parallel_for. A unit walks the key/value blocks of ATTN_FWD_BK keys
 * (only those a causal mask leaves), computing scores S = scale Q Kᵀ with
 * one GEMM, adding the bias (bool masks become 0 / -inf), masking, and
 * updating a running row maximum m, sum l and output accumulator
 * acc = Σ p V (a second GEMM), rescaled by exp(m_old - m_new) when the
 * maximum grows. Dropout multiplies p by keep / (1 - p_drop) before the
 * second GEMM (l uses the undropped p). The unit writes out = acc / l and
 * logsumexp = m + log l. Nothing of size L x S is ever stored: scratch is
 * ATTN_FWD_BQ x ATTN_FWD_BK scores plus a row block of the output per unit.
 *
 * Backward: work units are (batch, key/value head), so every gradient a
 * unit writes is its own (grouped query heads share a unit). For each query
 * head of the group, D_i = dO_i · O_i, then per key block j and query block
 * i the probabilities are recomputed from logsumexp (P = exp(S - lse)),
 * dV_j += (P∘Z)ᵀ dO_i, dP = (dO_i V_jᵀ)∘Z, dS = P∘(dP - D), dQ_i += scale dS K_j,
 * dK_j += scale dSᵀ Q_i (Z: the dropout mask / keep, regenerated from
 * Philox), and grad_attn_bias gathers dS (summed over broadcast dims; units
 * that would share bias elements run one after another).
 *
 * Work type: float32 (half types and float32) or float64; block GEMMs run on
 * OpenBLAS sgemm/dgemm (single-threaded; the pool provides the threads).
 * Operands BLAS cannot read in place (other dtypes, inner stride != 1) are
 * converted once into contiguous work-type copies (linear in L or S); the
 * forward also transposes K once per head so both block GEMMs are NN (which
 * OpenBLAS runs without packing at these sizes), in contiguous tiles of a
 * key block each. The float32 row max / exp
 * loops are compiled for AVX-512 and AVX2 as well (target_clones).
 */
#include "kernels/attention/attention.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/random/random.h"
#include "kernels/common/vmath.h"

#ifdef TPU_HAVE_OPENBLAS
#include <cblas.h>
#endif

#define ATTN_BQ 64  /* backward: query rows per block */
#define ATTN_BK 128 /* backward: keys per block */
/* Forward blocks. OpenBLAS runs the two block GEMMs (64 x 128 x d64 and
 * 64 x d64 x 128) through its unpacked "small" kernels, with the scores
 * (32 KiB) staying in L1 for the row loops; larger blocks (128 x 512,
 * 64 x 256) switch it to packed GEMMs and measured slower, as does a causal
 * mask's waste on the diagonal block (about BQ / 2 keys per row). */
#define ATTN_FWD_BQ 64
#define ATTN_FWD_BK 128
#define ATTN_ROW_MAX (ATTN_FWD_BK > ATTN_BK ? ATTN_FWD_BK : ATTN_BK) /* longest score row */
#define ATTN_SMALL_WORK (1 << 16) /* multiply-adds below which one thread runs */

/* ---- parsing ------------------------------------------------------------------ */

static bool is_backward(const tpu_op_def_t* def) { return def->impl != NULL; }

static tpu_status_t unimpl(const char* what) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "scaled_dot_product_attention: %s", what);
}

tpu_status_t tpu_attn_parse(const tpu_op_def_t* def, const tpu_node_t* node, attn_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->backward = is_backward(def);
  const tpu_view_t* q = ku_input(def, node, "query");
  const tpu_view_t* k = ku_input(def, node, "key");
  const tpu_view_t* v = ku_input(def, node, "value");
  const tpu_view_t* bias = ku_input(def, node, "attn_bias");
  if (!q || !k || !v)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "query, key and value must be tensors");
  a->dtype = q->dtype;
  if (!tpu_dtype_is_floating(a->dtype)) return unimpl("non-floating dtype");
  if (k->dtype != a->dtype || v->dtype != a->dtype) return unimpl("mixed dtypes");
  if ((q->ndim != 3 && q->ndim != 4) || k->ndim != q->ndim || v->ndim != q->ndim)
    return unimpl("operands must all be 3-D or all 4-D");
  a->work = tpu_compute_storage_dtype(tpu_dtype_compute(a->dtype));
  a->rank3 = q->ndim == 3;
  a->q = attn_as4(q), a->k = attn_as4(k), a->v = attn_as4(v);
  a->B = a->q.sizes[0], a->H = a->q.sizes[1], a->L = a->q.sizes[2], a->D = a->q.sizes[3];
  a->Hkv = a->k.sizes[1], a->S = a->k.sizes[2], a->Dv = a->v.sizes[3];
  if (a->k.sizes[0] != a->B || a->v.sizes[0] != a->B || a->v.sizes[1] != a->Hkv ||
      a->v.sizes[2] != a->S || a->k.sizes[3] != a->D)
    return unimpl("query/key/value shapes do not match");
  if (a->Hkv == 0 || a->H % a->Hkv != 0) return unimpl("query heads not a multiple of key heads");
  if (a->D == 0 || a->D > ATTN_MAX_HEAD_DIM || a->Dv > ATTN_MAX_HEAD_DIM)
    return unimpl("head dim must be in [1, 256]");
  a->causal = tpu_attr_bool(ku_attr(def, node, "is_causal"), false);
  a->dropout = tpu_attr_float(ku_attr(def, node, "dropout_p"), 0.0);
  if (!(a->dropout >= 0.0 && a->dropout < 1.0)) return unimpl("dropout_p must be in [0, 1)");
  const tpu_attr_t* sc = ku_attr(def, node, "scale");
  a->scale = (sc && sc->kind != TPU_ATTR_NONE) ? tpu_attr_float(sc, 1.0) : 1.0 / sqrt((double)a->D);
  a->seed = (uint64_t)tpu_attr_int(ku_attr(def, node, "seed"), 0);
  a->offset = (uint64_t)tpu_attr_int(ku_attr(def, node, "offset"), 0);
  if (bias) {
    if (a->causal) return unimpl("attn_mask with is_causal");
    if (bias->dtype != TPU_DTYPE_BOOL && bias->dtype != a->dtype)
      return unimpl("attn_mask dtype must be bool or the query's");
    int64_t shape[4] = {a->B, a->H, a->L, a->S};
    int64_t shape3[3] = {a->B, a->L, a->S};
    tpu_view_t e;
    if (!(a->rank3 ? view_expand(bias, 3, shape3, &e) : view_expand(bias, 4, shape, &e)))
      return unimpl("attn_mask does not broadcast to [B, H, L, S]");
    a->has_bias = true;
    a->bias = attn_as4(&e);
    a->bias_orig = *bias;
  }
  if (a->backward) {
    const tpu_view_t* go = ku_input(def, node, "grad_out");
    const tpu_view_t* o = ku_input(def, node, "out");
    const tpu_view_t* lse = ku_input(def, node, "logsumexp");
    if (!go || !o || !lse) return unimpl("backward needs grad_out, out and logsumexp");
    if (go->dtype != a->dtype || o->dtype != a->dtype || lse->dtype != a->work ||
        go->ndim != q->ndim || o->ndim != q->ndim || lse->ndim != q->ndim - 1)
      return unimpl("backward operand dtypes or ranks");
    a->go = attn_as4(go), a->o = attn_as4(o);
    a->lse = *lse;
    if (a->rank3) { /* [B, L] -> [B, 1, L] */
      a->lse.ndim = 3;
      a->lse.sizes[2] = lse->sizes[1], a->lse.strides[2] = lse->strides[1];
      a->lse.sizes[1] = 1, a->lse.strides[1] = 0;
    }
    for (int d = 0; d < 4; ++d)
      if (a->go.sizes[d] != a->o.sizes[d] || a->o.sizes[d] != (d == 3 ? a->Dv : a->q.sizes[d]) ||
          (d < 3 && a->lse.sizes[d] != a->q.sizes[d]))
        return unimpl("backward operand shapes");
    const tpu_attr_t* gm = ku_attr(def, node, "grad_input_mask");
    for (int i = 0; i < 4; ++i)
      a->grad_mask[i] = gm && gm->kind == TPU_ATTR_INTS && i < gm->count ? gm->u.ints[i] != 0
                                                                           : i < 3;
    a->grad_bias = a->has_bias && a->grad_mask[3];
    if (a->grad_bias && a->bias_orig.dtype == TPU_DTYPE_BOOL) return unimpl("grad of a bool mask");
  }
  return TPU_OK;
}

static void set_shape(tpu_view_t* out, const tpu_view_t* like, tpu_dtype_t dtype, int32_t ndim,
                      int64_t last) {
  memset(out, 0, sizeof(*out));
  out->dtype = dtype;
  out->ndim = ndim;
  for (int32_t d = 0; d < ndim; ++d) out->sizes[d] = like->sizes[d];
  if (last >= 0) out->sizes[ndim - 1] = last;
  tpu_view_set_contiguous(out);
}

static tpu_status_t attn_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* outs) {
  attn_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_attn_parse(def, node, &a)));
  const tpu_view_t* q = ku_input(def, node, "query");
  const tpu_view_t* k = ku_input(def, node, "key");
  const tpu_view_t* v = ku_input(def, node, "value");
  if (!a.backward) {
    set_shape(&outs[0], q, a.dtype, q->ndim, a.Dv);
    set_shape(&outs[1], q, a.work, q->ndim - 1, -1);
    return TPU_OK;
  }
  set_shape(&outs[0], q, a.dtype, q->ndim, -1);
  set_shape(&outs[1], k, a.dtype, k->ndim, -1);
  set_shape(&outs[2], v, a.dtype, v->ndim, -1);
  if (a.grad_bias) {
    set_shape(&outs[3], &a.bias_orig, a.bias_orig.dtype, a.bias_orig.ndim, -1);
  } else {
    int64_t zero = 0;
    outs[3] = view_of(NULL, a.dtype, 1, &zero);
  }
  return TPU_OK;
}

static tpu_status_t attn_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  attn_args_t a;
  return ku_unimplemented(tpu_attn_parse(def, node, &a));
}

/* ---- operands in the work type ------------------------------------------------ */

/* A [B, H, rows, cols] operand BLAS can read: unit column stride, work type. */
typedef struct amat {
  const char* base;
  int64_t sb, sh, sr; /* strides in elements */
  void* owned;        /* a converted copy, or NULL */
} amat_t;

static bool amat_init(amat_t* m, const tpu_view_t* v, tpu_dtype_t work) {
  memset(m, 0, sizeof(*m));
  bool rows_ok = v->strides[2] >= v->sizes[3] || v->sizes[2] <= 1;
  if (v->dtype == work && (v->strides[3] == 1 || v->sizes[3] == 1) && rows_ok &&
      v->strides[2] < (1 << 30)) {
    m->base = (const char*)tpu_view_ptr(v);
    m->sb = v->strides[0], m->sh = v->strides[1];
    m->sr = v->sizes[2] <= 1 ? v->sizes[3] : v->strides[2];
    return true;
  }
  int64_t n = tpu_view_numel(v);
  m->owned = tpu_scratch_alloc((size_t)(n > 0 ? n : 1) * tpu_dtype_size(work));
  if (!m->owned) return false;
  tpu_view_t dst = view_of(m->owned, work, 4, v->sizes);
  view_copy(&dst, v);
  m->base = (const char*)m->owned;
  m->sb = dst.strides[0], m->sh = dst.strides[1], m->sr = dst.strides[2];
  if (m->sr < 1) m->sr = 1;
  return true;
}

static inline const void* amat_row(const amat_t* m, size_t es, int64_t b, int64_t h, int64_t i) {
  return m->base + (size_t)(b * m->sb + h * m->sh + i * m->sr) * es;
}

/* ---- GEMM --------------------------------------------------------------------- */

/* C (row-major, ldc) = alpha op(A) op(B) + beta C. */
typedef void (*attn_gemm_fn)(bool ta, bool tb, int m, int n, int k, double alpha, const void* a,
                             int lda, const void* b, int ldb, double beta, void* c, int ldc);

#ifdef TPU_HAVE_OPENBLAS
#define AT_T(t) ((t) ? CblasTrans : CblasNoTrans)
static void gemm_F32(bool ta, bool tb, int m, int n, int k, double alpha, const void* a, int lda,
                     const void* b, int ldb, double beta, void* c, int ldc) {
  scipy_cblas_sgemm(CblasRowMajor, AT_T(ta), AT_T(tb), m, n, k, (float)alpha, a, lda, b, ldb,
                    (float)beta, c, ldc);
}
static void gemm_F64(bool ta, bool tb, int m, int n, int k, double alpha, const void* a, int lda,
                     const void* b, int ldb, double beta, void* c, int ldc) {
  scipy_cblas_dgemm(CblasRowMajor, AT_T(ta), AT_T(tb), m, n, k, alpha, a, lda, b, ldb, beta, c,
                    ldc);
}
#undef AT_T
#else
#define AT_PLAIN_GEMM(W, T)                                                                    \
  static void gemm_##W(bool ta, bool tb, int m, int n, int k, double alpha, const void* a,     \
                       int lda, const void* b, int ldb, double beta, void* c, int ldc) {       \
    const T *A = (const T*)a, *Bm = (const T*)b;                                               \
    T* C = (T*)c;                                                                              \
    for (int i = 0; i < m; ++i)                                                                \
      for (int j = 0; j < n; ++j) {                                                            \
        T s = 0;                                                                               \
        for (int p = 0; p < k; ++p)                                                            \
          s += (ta ? A[p * lda + i] : A[i * lda + p]) * (tb ? Bm[j * ldb + p] : Bm[p * ldb + j]); \
        C[i * ldc + j] = (T)(alpha * s + (beta == 0 ? 0 : beta * C[i * ldc + j]));             \
      }                                                                                        \
  }
AT_PLAIN_GEMM(F32, float)
AT_PLAIN_GEMM(F64, double)
#undef AT_PLAIN_GEMM
#endif

/* ---- the job ------------------------------------------------------------------ */

typedef struct attn_job {
  attn_args_t a;
  amat_t q, k, v, go, o;
  const tpu_view_t* out[4];
  void* kt;             /* forward: keys transposed in tiles, [B, Hkv, S / BK, D, BK] work type */
  void* gbias;          /* backward: grad_attn_bias accumulator (work type, bias_orig's shape) */
  int64_t gb_str[4];    /* its strides over [B, H, L, S] (0 where broadcast) */
  int64_t nqb;          /* query blocks */
  int64_t nkb;          /* forward: key blocks (tiles of kt) */
  atomic_int failed;
} attn_job_t;

/* One bias row segment (b, h, i, [j0, j0+n)) in the work type into dst;
 * bool masks become 0 (kept) / -inf. */
static void bias_row(const attn_args_t* a, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n,
                     void* dst) {
  const tpu_view_t* bv = &a->bias;
  const char* src = view_at(bv, b * bv->strides[0] + h * bv->strides[1] + i * bv->strides[2] +
                                    j0 * bv->strides[3]);
  if (bv->dtype == TPU_DTYPE_BOOL) {
    const uint8_t* m = (const uint8_t*)src;
    for (int64_t c = 0; c < n; ++c) {
      double x = m[c * bv->strides[3]] ? 0.0 : -INFINITY;
      tpu_convert((char*)dst + c * tpu_dtype_size(a->work), a->work, 1, &x, TPU_DTYPE_F64, 1, 1);
    }
    return;
  }
  tpu_convert(dst, a->work, 1, src, bv->dtype, bv->strides[3], n);
}

/* Row helpers of the tile template: maximum, and exp(x - shift) in place
 * returning the sum (float32 through the SIMD exp of vmath.h). */
/* The float32 row loops run per score element, as often as the GEMMs'
 * multiply-adds per head dim: built for AVX-512 and AVX2 too (GCC's
 * target_clones picks one at load time), since the runtime's baseline is
 * SSE2. */
#define AT_CLONES TPU_TARGET_CLONES("avx512f", "avx2", "default") /* vmath.h */

AT_CLONES float tpu_attn_row_max_f32(const float* x, int64_t n);
AT_CLONES double tpu_attn_row_exp_f32(float* x, float shift, int64_t n);

static inline __attribute__((always_inline)) float row_max_f32_inl(const float* x, int64_t n) {
  /* maxps-shaped (vectorises); a NaN score still reaches the output through exp */
  float m[16];
  for (int j = 0; j < 16; ++j) m[j] = -INFINITY;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
  /* lanes folded by halves (vector shuffles, not 16 scalar steps) */
  for (int h = 8; h >= 1; h /= 2)
    for (int j = 0; j < h; ++j) m[j] = m[j + h] > m[j] ? m[j + h] : m[j];
  float r = m[0];
  for (; i < n; ++i) r = x[i] > r ? x[i] : r;
  return r;
}

static inline __attribute__((always_inline)) double row_exp_f32_inl(float* x, float shift,
                                                                    int64_t n) {
  /* One in-place pass: exp and the sum together (16 float lanes; a row is
   * at most ATTN_ROW_MAX long). Scores here are <= shift (shift is the row
   * maximum), so the only arguments outside vm_expf's range are below
   * VM_EXP_LO (masked -inf included): their exp, below 2^-125, is flushed to
   * 0, which no float32 sum of terms up to 1 can see. NaN stays NaN. */
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) {
      float v = x[i + j] - shift;
      float e = v < VM_EXP_LO ? 0.0f : vm_expf(v);
      x[i + j] = e;
      acc[j] += e;
    }
  double sum = 0.0;
  for (; i < n; ++i) {
    float v = x[i] - shift;
    float e = v < VM_EXP_LO ? 0.0f : vm_expf(v);
    x[i] = e;
    sum += e;
  }
  for (int h = 8; h >= 1; h /= 2)
    for (int j = 0; j < h; ++j) acc[j] += acc[j + h];
  return sum + acc[0];
}

AT_CLONES float tpu_attn_row_max_f32(const float* x, int64_t n) { return row_max_f32_inl(x, n); }
AT_CLONES double tpu_attn_row_exp_f32(float* x, float shift, int64_t n) {
  return row_exp_f32_inl(x, shift, n);
}

/* The online-softmax step of a block of score rows (row r: n scores at
 * s + r n; running maximum m[r] and sum l[r]): new maximum, exp(score -
 * maximum) in place, the sums; corr[r] gets the factor the row's output
 * accumulator must be scaled by (1: none). A row whose maximum is still
 * -inf (all masked) becomes zeros. One call per block keeps the per-row
 * work inline (the row max / exp loops above, unchanged numerics). */
#define AT_BLOCK_BODY(T, MAXF, EXPF)                                          \
  for (int64_t r = 0; r < rows; ++r) {                                        \
    T* row = s + r * n;                                                       \
    T mx = (T)MAXF(row, n);                                                   \
    T mnew = mx > m[r] || mx != mx ? mx : m[r];                               \
    if (mnew == -INFINITY) {                                                  \
      memset(row, 0, (size_t)n * sizeof(T));                                  \
      corr[r] = 1;                                                            \
      continue;                                                               \
    }                                                                         \
    T c = m[r] == -INFINITY ? 0 : (T)exp((double)(m[r] - mnew));              \
    double sum = EXPF(row, mnew, n);                                          \
    l[r] = (T)(l[r] * c + sum);                                               \
    m[r] = mnew;                                                              \
    corr[r] = c;                                                              \
  }
AT_CLONES void tpu_attn_block_f32(float* s, int64_t rows, int64_t n, float* m, float* l,
                                  float* corr);
AT_CLONES void tpu_attn_block_f32(float* s, int64_t rows, int64_t n, float* m, float* l,
                                  float* corr) {
  AT_BLOCK_BODY(float, row_max_f32_inl, row_exp_f32_inl)
}

/* The same step written for AVX-512 with FMA (chosen at run time when the
 * CPU has it): exp by vm_exp512 (vmath512.h); arguments below VM_EXP_LO
 * still give 0 and NaN stays NaN. */
#if defined(__x86_64__) && defined(__GNUC__)
#include "kernels/common/vmath512.h"
#define AT_AVX512 __attribute__((target("avx512f,fma")))
#define vm_exp512_lo(x) vm_exp512((x), VM_EXP_LO)

/* x[i] = exp(x[i] - shift) for i < n, returning the sum. */
AT_AVX512 static double at_row_exp512(float* row, float shift, int64_t n) {
  const int64_t nv = n / 16;
  const __mmask16 tail = (__mmask16)((1u << (n % 16)) - 1);
  const __m512 sh = _mm512_set1_ps(shift);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t v = 0;
  for (; v + 2 <= nv; v += 2) { /* two independent chains */
    __m512 e0 = vm_exp512_lo(_mm512_sub_ps(_mm512_loadu_ps(row + 16 * v), sh));
    __m512 e1 = vm_exp512_lo(_mm512_sub_ps(_mm512_loadu_ps(row + 16 * v + 16), sh));
    _mm512_storeu_ps(row + 16 * v, e0);
    _mm512_storeu_ps(row + 16 * v + 16, e1);
    acc0 = _mm512_add_ps(acc0, e0);
    acc1 = _mm512_add_ps(acc1, e1);
  }
  for (; v < nv; ++v) {
    __m512 e0 = vm_exp512_lo(_mm512_sub_ps(_mm512_loadu_ps(row + 16 * v), sh));
    _mm512_storeu_ps(row + 16 * v, e0);
    acc0 = _mm512_add_ps(acc0, e0);
  }
  if (tail) {
    __m512 e0 = vm_exp512_lo(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, row + 16 * nv), sh));
    e0 = _mm512_maskz_mov_ps(tail, e0);
    _mm512_mask_storeu_ps(row + 16 * nv, tail, e0);
    acc0 = _mm512_add_ps(acc0, e0);
  }
  return (double)_mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

AT_AVX512 static void attn_block_f32_avx512(float* s, int64_t rows, int64_t n, float* m,
                                             float* l, float* corr) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  const int64_t nv = n / 16;
  const __mmask16 tail = (__mmask16)((1u << (n % 16)) - 1);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * n;
    __m512 mv = ninf; /* max(x, m) keeps m for NaN x, as the scalar loop */
    for (int64_t v = 0; v < nv; ++v) mv = _mm512_max_ps(_mm512_loadu_ps(row + 16 * v), mv);
    if (tail) mv = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, tail, row + 16 * nv), mv);
    float mx = _mm512_reduce_max_ps(mv);
    float mnew = mx > m[r] || mx != mx ? mx : m[r];
    if (mnew == -INFINITY) {
      memset(row, 0, (size_t)n * sizeof(float));
      corr[r] = 1;
      continue;
    }
    float c = m[r] == -INFINITY ? 0 : (float)exp((double)(m[r] - mnew));
    double sum = at_row_exp512(row, mnew, n);
    l[r] = (float)(l[r] * c + sum);
    m[r] = mnew;
    corr[r] = c;
  }
}
#endif

static bool have_avx512(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  static atomic_int avx512 = -1;
  int v = atomic_load(&avx512);
  if (v < 0) {
    v = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma") ? 1 : 0;
    atomic_store(&avx512, v);
  }
  return v != 0;
#else
  return false;
#endif
}

static void attn_block_f32(float* s, int64_t rows, int64_t n, float* m, float* l, float* corr) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (have_avx512()) {
    attn_block_f32_avx512(s, rows, n, m, l, corr);
    return;
  }
#endif
  tpu_attn_block_f32(s, rows, n, m, l, corr);
}

static inline float at_max_F32(const float* x, int64_t n) { return tpu_attn_row_max_f32(x, n); }
static inline double at_exps_F32(float* x, float shift, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (have_avx512()) return at_row_exp512(x, shift, n);
#endif
  return tpu_attn_row_exp_f32(x, shift, n);
}
static inline double at_max_F64(const double* x, int64_t n) {
  double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = x[i] > m || x[i] != x[i] ? x[i] : m;
  return m;
}
static inline double at_exps_F64(double* x, double shift, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += x[i] = exp(x[i] - shift);
  return s;
}
static inline void at_block_F32(float* s, int64_t rows, int64_t n, float* m, float* l,
                                float* corr) {
  attn_block_f32(s, rows, n, m, l, corr);
}
static inline void at_block_F64(double* s, int64_t rows, int64_t n, double* m, double* l,
                                double* corr) {
  AT_BLOCK_BODY(double, at_max_F64, at_exps_F64)
}

/* A logsumexp view ([B,H,L] or [B,L]) as [B,H,L]. */
static tpu_view_t lse3(const tpu_view_t* v, bool rank3) {
  tpu_view_t r = *v;
  if (!rank3) return r;
  r.ndim = 3;
  r.sizes[2] = v->sizes[1], r.strides[2] = v->strides[1];
  r.sizes[1] = 1, r.strides[1] = 0;
  return r;
}

#define AT_W F32
#define AT_TYPE float
#include "kernels/attention/attention_tile.h"
#undef AT_W
#undef AT_TYPE
#define AT_W F64
#define AT_TYPE double
#include "kernels/attention/attention_tile.h"
#undef AT_W
#undef AT_TYPE

typedef void (*attn_chunk_fn)(void* arg, int64_t begin, int64_t end);
static const attn_chunk_fn k_fwd[TPU_COMPUTE_COUNT] = {[TPU_COMPUTE_F32] = attn_fwd_chunk_F32,
                                                       [TPU_COMPUTE_F64] = attn_fwd_chunk_F64};
static const attn_chunk_fn k_bwd[TPU_COMPUTE_COUNT] = {[TPU_COMPUTE_F32] = attn_bwd_chunk_F32,
                                                       [TPU_COMPUTE_F64] = attn_bwd_chunk_F64};

#ifdef TPU_HAVE_OPENBLAS
static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;
static void blas_single_thread(void) { scipy_openblas_set_num_threads(1); }
#endif

static void job_free(attn_job_t* j) {
  tpu_scratch_free(j->q.owned), tpu_scratch_free(j->k.owned), tpu_scratch_free(j->v.owned);
  tpu_scratch_free(j->go.owned), tpu_scratch_free(j->o.owned);
  free(j->gbias), tpu_scratch_free(j->kt);
}

/* Tiles [begin, end) of the forward's K^T (attn_job_t.kt), from the keys in
 * the work type (j->k: the input itself, or its converted copy), so the
 * transposing copy moves work-type elements rather than converting each
 * one through a strided loop; spread over the pool. */
static void kt_tiles(void* arg, int64_t begin, int64_t end) {
  attn_job_t* j = (attn_job_t*)arg;
  const attn_args_t* a = &j->a;
  size_t es = tpu_dtype_size(a->work);
  for (int64_t t = begin; t < end; ++t) {
    int64_t kb = t % j->nkb, hk = t / j->nkb % a->Hkv, b = t / j->nkb / a->Hkv;
    int64_t j0 = kb * ATTN_FWD_BK, cnt = a->S - j0 < ATTN_FWD_BK ? a->S - j0 : ATTN_FWD_BK;
    /* keys [j0, j0 + cnt) of (b, hk), as [D, cnt] */
    int64_t sizes[2] = {a->D, cnt};
    tpu_view_t src = view_of((void*)amat_row(&j->k, es, b, hk, j0), a->work, 2, sizes);
    src.strides[0] = 1, src.strides[1] = j->k.sr; /* amat_t rows are dense */
    tpu_view_t dst = view_of((char*)j->kt + (size_t)(t * a->D * ATTN_FWD_BK) * es, a->work, 2,
                             (int64_t[2]){a->D, ATTN_FWD_BK});
    dst.sizes[1] = cnt;
    view_copy(&dst, &src);
  }
}

static tpu_status_t attn_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  (void)ctx;
  attn_job_t* j = calloc(1, sizeof(*j));
  if (!j) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "attention job");
  tpu_status_t s = tpu_attn_parse(def, node, &j->a);
  if (s != TPU_OK) {
    free(j);
    return s;
  }
#ifdef TPU_HAVE_OPENBLAS
  pthread_once(&g_blas_once, blas_single_thread);
#endif
  attn_args_t* a = &j->a;
  for (int i = 0; i < node->num_outputs && i < 4; ++i) j->out[i] = &node->outputs[i];
  bool ok = amat_init(&j->q, &a->q, a->work) && amat_init(&j->k, &a->k, a->work) &&
            amat_init(&j->v, &a->v, a->work);
  if (ok && a->backward) ok = amat_init(&j->go, &a->go, a->work) && amat_init(&j->o, &a->o, a->work);
  if (ok && !a->backward) {
    /* K^T in tiles of ATTN_FWD_BK keys, [B, Hkv, key block, D, ATTN_FWD_BK]
     * (the last tile's tail unused), so Q K^T runs as a plain NN GEMM on a
     * contiguous panel: one [D, S] matrix per head would put the panel's
     * rows S floats apart, which for power-of-two S maps them onto a few
     * cache sets (sgemm measured at half speed for S = 2048). */
    int64_t nkb = j->nkb = (a->S + ATTN_FWD_BK - 1) / ATTN_FWD_BK;
    int64_t n = a->B * a->Hkv * nkb * a->D * ATTN_FWD_BK;
    j->kt = tpu_scratch_alloc((size_t)(n > 0 ? n : 1) * tpu_dtype_size(a->work));
    ok = j->kt != NULL;
    if (ok) tpu_parallel_for(a->B * a->Hkv * nkb, 1, kt_tiles, j);
  }
  int64_t gb_numel = a->grad_bias ? tpu_view_numel(&a->bias_orig) : 0;
  if (ok && a->grad_bias) {
    j->gbias = calloc((size_t)(gb_numel > 0 ? gb_numel : 1), tpu_dtype_size(a->work));
    ok = j->gbias != NULL;
    tpu_view_t gv = view_of(j->gbias, a->work, a->bias_orig.ndim, a->bias_orig.sizes), e;
    int64_t shape[4] = {a->B, a->H, a->L, a->S}, shape3[3] = {a->B, a->L, a->S};
    if (a->rank3) view_expand(&gv, 3, shape3, &e);
    else view_expand(&gv, 4, shape, &e);
    e = attn_as4(&e);
    for (int d = 0; d < 4; ++d) j->gb_str[d] = e.strides[d];
  }
  if (!ok) {
    job_free(j);
    free(j);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "attention scratch allocation failed");
  }
  atomic_init(&j->failed, 0);
  tpu_compute_type_t ct = tpu_dtype_compute(a->dtype);
  double work = (double)a->B * a->H * a->L * a->S * (a->D + a->Dv);
  if (!a->backward) {
    j->nqb = (a->L + ATTN_FWD_BQ - 1) / ATTN_FWD_BQ;
    int64_t units = a->B * a->H * j->nqb;
    tpu_parallel_for(units, work < ATTN_SMALL_WORK ? (units > 0 ? units : 1) : 1, k_fwd[ct], j);
  } else {
    int64_t units = a->B * a->Hkv;
    /* Units sharing grad_attn_bias elements (bias broadcast over batch or
     * heads) run in one chunk. */
    bool shared = a->grad_bias && ((a->B > 1 && j->gb_str[0] == 0) ||
                                   (a->Hkv > 1 && j->gb_str[1] == 0));
    int64_t grain = (work < ATTN_SMALL_WORK || shared) ? (units > 0 ? units : 1) : 1;
    tpu_parallel_for(units, grain, k_bwd[ct], j);
    if (a->grad_bias && !atomic_load(&j->failed)) {
      tpu_view_t src = view_of(j->gbias, a->work, a->bias_orig.ndim, a->bias_orig.sizes);
      view_copy(&node->outputs[3], &src);
    }
  }
  int failed = atomic_load(&j->failed);
  job_free(j);
  free(j);
  if (failed) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "attention scratch allocation failed");
  return TPU_OK;
}

/* ---- rows ----------------------------------------------------------------------- */

static const int k_backward_flag = 1;

static const tpu_op_def_t k_ops[] = {
    {.name = "sdpa_flash", .inputs = "query,key,value,attn_bias?",
     .attrs = "dropout_p,is_causal,return_debug_mask,scale,seed,offset",
     .outputs = "output,logsumexp", .aten = NULL, .kernel = attn_kernel, .infer = attn_infer,
     .check = attn_check, .impl = NULL, .flags = TPU_OP_HEAVY},
    {.name = "sdpa_flash_backward", .inputs = "grad_out,query,key,value,attn_bias?,out,logsumexp",
     .attrs = "grad_input_mask,dropout_p,is_causal,scale,seed,offset",
     .outputs = "grad_query,grad_key,grad_value,grad_attn_bias", .aten = NULL,
     .kernel = attn_kernel, .infer = attn_infer, .check = attn_check, .impl = &k_backward_flag,
     .flags = TPU_OP_HEAVY},
};

const tpu_op_family_t tpu_family_attention = {"attention", k_ops,
                                              (int32_t)(sizeof(k_ops) / sizeof(k_ops[0]))};
