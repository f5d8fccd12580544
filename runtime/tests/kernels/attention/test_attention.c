/* test_attention.c — the attention family against its reference kernel.
 *
 * attention_cases: (dtype, shape, GQA, mask kind, causal, dropout, layout,
 * rank) run sdpa_flash through the optimised kernel and the reference and
 * compare output and logsumexp; then sdpa_flash_backward (on the optimised
 * forward's output) through both, comparing every gradient (the mask's too
 * when it is float). Shapes cover several query/key blocks, ragged tails,
 * different query/key lengths, head dims up to 256, fully masked rows.
 * attention_semantics pins fallbacks and a few exact values.
 */
#include "kernels/attention/attention.h"

#include "kernel_test_util.h"

enum { NO_MASK = 0, MASK_FULL, MASK_LS, MASK_BOOL_KEYS, MASK_BOOL_FULL };

typedef struct attn_case {
  tpu_dtype_t dtype;
  int64_t B, H, Hkv, L, S, D, Dv;
  int mask;
  bool causal;
  double dropout;
  bool transposed; /* q/k/v stored [B, L, H, D] and viewed as [B, H, L, D] */
  bool rank3;
  double scale; /* 0: default */
} attn_case_t;

#define F32 TPU_DTYPE_F32
#define F64 TPU_DTYPE_F64
#define F16 TPU_DTYPE_F16
#define BF16 TPU_DTYPE_BF16

static const attn_case_t k_cases[] = {
    {F32, 1, 2, 2, 5, 7, 8, 8, NO_MASK, false, 0, false, false, 0},
    {F32, 2, 3, 3, 70, 150, 16, 16, NO_MASK, true, 0, false, false, 0},
    {F64, 2, 4, 2, 65, 130, 12, 20, MASK_FULL, false, 0, true, false, 0},
    {F32, 1, 4, 1, 33, 300, 32, 32, MASK_LS, false, 0, false, false, 0.3},
    {F64, 2, 2, 2, 40, 40, 8, 8, MASK_BOOL_KEYS, false, 0, false, false, 0},
    {F32, 2, 2, 1, 20, 17, 8, 8, MASK_BOOL_FULL, false, 0, true, false, 0},
    {F64, 1, 2, 2, 130, 129, 16, 16, NO_MASK, true, 0.3, false, false, 0},
    {F32, 2, 2, 2, 64, 200, 8, 8, MASK_FULL, false, 0.5, false, false, 0},
    {F16, 1, 2, 2, 70, 70, 64, 64, NO_MASK, true, 0, false, false, 0},
    {BF16, 1, 4, 2, 50, 90, 32, 32, MASK_LS, false, 0, true, false, 0},
    {F32, 2, 1, 1, 30, 45, 256, 256, NO_MASK, false, 0, false, true, 0},
    {F64, 3, 1, 1, 9, 12, 5, 3, MASK_LS, false, 0.2, false, true, 0},
    {F32, 1, 2, 2, 200, 60, 8, 8, NO_MASK, true, 0, false, false, 0},
    /* several forward query blocks (128 rows) and key blocks (512 keys),
     * the last of each partial */
    {F32, 1, 2, 1, 300, 1100, 16, 16, NO_MASK, false, 0, false, false, 0},
    {F32, 1, 2, 2, 600, 600, 32, 32, NO_MASK, true, 0, true, false, 0},
    {F64, 1, 1, 1, 260, 700, 8, 8, MASK_FULL, false, 0.2, false, false, 0},
    /* the AVX-512 softmax step (row tails n % 16 != 0), tiled K^T with a
     * partial last tile, grouped-query heads, strided operands */
    {F32, 2, 4, 2, 333, 333, 64, 64, NO_MASK, true, 0, true, false, 0},
    {F32, 1, 2, 1, 77, 269, 24, 40, MASK_FULL, false, 0.25, false, false, 0},
};

/* A [B, H, rows, cols] tensor, contiguous or stored [B, rows, H, cols]. */
static tt_t make4(tpu_dtype_t dt, int64_t B, int64_t H, int64_t R, int64_t C, bool transposed,
                  bool rank3) {
  if (rank3) {
    int64_t s[3] = {B, R, C};
    return tt_make(dt, 3, s, TT_CONTIG);
  }
  int64_t s[4] = {B, transposed ? R : H, transposed ? H : R, C};
  tt_t t = tt_make(dt, 4, s, TT_CONTIG);
  if (transposed) { /* swap dims 1 and 2 of the view */
    int64_t sz = t.view.sizes[1], st = t.view.strides[1];
    t.view.sizes[1] = t.view.sizes[2], t.view.strides[1] = t.view.strides[2];
    t.view.sizes[2] = sz, t.view.strides[2] = st;
  }
  return t;
}

static tt_t make_mask(const attn_case_t* c) {
  tpu_dtype_t dt = c->mask >= MASK_BOOL_KEYS ? TPU_DTYPE_BOOL : c->dtype;
  tt_t m;
  if (c->mask == MASK_FULL) {
    if (c->rank3) {
      int64_t s[3] = {c->B, c->L, c->S};
      m = tt_make(dt, 3, s, TT_CONTIG);
    } else {
      int64_t s[4] = {c->B, c->H, c->L, c->S};
      m = tt_make(dt, 4, s, TT_CONTIG);
    }
  } else if (c->mask == MASK_LS) {
    int64_t s[2] = {c->L, c->S};
    m = tt_make(dt, 2, s, TT_CONTIG);
  } else if (c->mask == MASK_BOOL_KEYS) {
    int64_t s[4] = {c->B, 1, 1, c->S};
    m = tt_make(dt, 4, s, TT_CONTIG);
  } else {
    int64_t s[4] = {c->B, 1, c->L, c->S};
    m = tt_make(dt, 4, s, TT_GAPS);
  }
  tt_fill(&m.view, -2.0, 2.0, 0.0);
  if (c->mask == MASK_FULL) /* one fully masked row */
    for (int64_t j = 0; j < c->S; ++j) tt_set(&m.view, c->S + j, -INFINITY);
  if (c->mask == MASK_BOOL_FULL) /* row 1 of batch 0 fully masked */
    for (int64_t j = 0; j < c->S; ++j) tt_set(&m.view, c->S + j, 0.0);
  return m;
}

static double tol_of(tpu_dtype_t dt) {
  return dt == F64 ? 1e-9 : dt == F32 ? 2e-4 : 8 * tt_tol(dt);
}

static void run_case(int idx, const attn_case_t* c) {
  char what[64];
  tt_t q = make4(c->dtype, c->B, c->H, c->L, c->D, c->transposed, c->rank3);
  tt_t k = make4(c->dtype, c->B, c->Hkv, c->S, c->D, c->transposed, c->rank3);
  tt_t v = make4(c->dtype, c->B, c->Hkv, c->S, c->Dv, c->transposed, c->rank3);
  tt_fill(&q.view, -1.5, 1.5, 0.0), tt_fill(&k.view, -1.5, 1.5, 0.0);
  tt_fill(&v.view, -1.0, 1.0, 0.0);
  tt_t m = {0};
  if (c->mask) m = make_mask(c);
  const tpu_op_def_t* fwd = tt_def("sdpa_flash");
  const tpu_op_def_t* bwd = tt_def("sdpa_flash_backward");
  if (!fwd || !bwd) return;
  tpu_value_t in[4] = {tt_value(&q.view), tt_value(&k.view), tt_value(&v.view),
                       tt_value(c->mask ? &m.view : NULL)};
  tpu_attr_t at[6] = {tt_float(c->dropout), tt_bool(c->causal), tt_bool(false),
                      c->scale > 0 ? tt_float(c->scale) : tt_none(), tt_int(1234), tt_int(77)};
  tpu_node_t node = tt_node(in, 4, NULL, 2, at, 6);
  tpu_view_t shapes[4];
  node.op = tpu_op_lookup("sdpa_flash");
  CHECK_OK(tpu_op_infer(&node, shapes));
  tt_t out[2], ref[2];
  tpu_view_t ov[2], rv[2];
  for (int i = 0; i < 2; ++i) {
    out[i] = tt_like(&shapes[i], i == 0 ? TT_GAPS : TT_CONTIG), ov[i] = out[i].view;
    ref[i] = tt_like(&shapes[i], TT_CONTIG), rv[i] = ref[i].view;
  }
  node.outputs = ov;
  CHECK_OK(tt_run(fwd->kernel, fwd, &node));
  node.outputs = rv;
  CHECK_OK(tpu_attention_reference(fwd, &node));
  double tol = tol_of(c->dtype);
  snprintf(what, sizeof(what), "case %d output", idx);
  tt_compare(what, &ov[0], &rv[0], tol);
  snprintf(what, sizeof(what), "case %d logsumexp", idx);
  tt_compare(what, &ov[1], &rv[1], c->dtype == F64 ? 1e-9 : 1e-4);

  /* backward on the optimised forward's output */
  tt_t go = tt_like(&shapes[0], c->transposed ? TT_REVERSED : TT_CONTIG);
  tt_fill(&go.view, -1.0, 1.0, 0.0);
  bool mask_grad = c->mask && c->mask < MASK_BOOL_KEYS;
  int64_t gm[4] = {1, 1, 1, mask_grad};
  tpu_value_t bin[7] = {tt_value(&go.view), in[0], in[1], in[2], in[3], tt_value(&ov[0]),
                        tt_value(&ov[1])};
  tpu_attr_t bat[6] = {tt_ints(4, gm), at[0], at[1], at[3], at[4], at[5]};
  tpu_node_t bn = tt_node(bin, 7, NULL, 4, bat, 6);
  bn.op = tpu_op_lookup("sdpa_flash_backward");
  tpu_view_t bshapes[4];
  CHECK_OK(tpu_op_infer(&bn, bshapes));
  tt_t gout[4], gref[4];
  tpu_view_t gov[4], grv[4];
  for (int i = 0; i < 4; ++i) {
    gout[i] = tt_like(&bshapes[i], i == 1 ? TT_GAPS : TT_CONTIG), gov[i] = gout[i].view;
    gref[i] = tt_like(&bshapes[i], TT_CONTIG), grv[i] = gref[i].view;
    if (tpu_view_numel(&bshapes[i]) == 0) gov[i].addr = grv[i].addr = 0;
  }
  bn.outputs = gov;
  CHECK_OK(tt_run(bwd->kernel, bwd, &bn));
  bn.outputs = grv;
  CHECK_OK(tpu_attention_reference(bwd, &bn));
  static const char* names[4] = {"grad_query", "grad_key", "grad_value", "grad_attn_bias"};
  for (int i = 0; i < (mask_grad ? 4 : 3); ++i) {
    snprintf(what, sizeof(what), "case %d %s", idx, names[i]);
    tt_compare(what, &gov[i], &grv[i], c->dtype == F64 ? 1e-8 : 2 * tol + 2e-4);
  }
  CHECK(mask_grad || tpu_view_numel(&bshapes[3]) == 0);
  for (int i = 0; i < 4; ++i) tt_free(&gout[i]), tt_free(&gref[i]);
  for (int i = 0; i < 2; ++i) tt_free(&out[i]), tt_free(&ref[i]);
  tt_free(&go), tt_free(&q), tt_free(&k), tt_free(&v);
  if (c->mask) tt_free(&m);
}

TEST(attention_cases) {
  for (int i = 0; i < (int)(sizeof(k_cases) / sizeof(k_cases[0])); ++i) run_case(i, &k_cases[i]);
}

static tpu_status_t check_of(tpu_dtype_t dt, int64_t H, int64_t Hkv, int64_t D, bool causal,
                             bool mask, double p) {
  int64_t sq[4] = {1, H, 4, D}, sk[4] = {1, Hkv, 4, D}, sm[2] = {4, 4};
  tt_t q = tt_make(dt, 4, sq, TT_CONTIG), k = tt_make(dt, 4, sk, TT_CONTIG),
       m = tt_make(dt, 2, sm, TT_CONTIG);
  tpu_value_t in[4] = {tt_value(&q.view), tt_value(&k.view), tt_value(&k.view),
                       tt_value(mask ? &m.view : NULL)};
  tpu_attr_t at[6] = {tt_float(p), tt_bool(causal), tt_bool(false), tt_none(), tt_int(0),
                      tt_int(0)};
  tpu_view_t outs[2] = {{0}};
  tpu_node_t node = tt_node(in, 4, outs, 2, at, 6);
  node.op = tpu_op_lookup("sdpa_flash");
  /* The bridge's order: the outputs' metadata, then the check (before
   * their memory is allocated). */
  tpu_status_t s = tpu_op_infer(&node, outs);
  if (s == TPU_OK) s = tpu_op_check(&node);
  tt_free(&q), tt_free(&k), tt_free(&m);
  return s;
}

TEST(attention_semantics) {
  CHECK_OK(check_of(F32, 4, 2, 64, true, false, 0.1));
  CHECK_OK(check_of(BF16, 2, 2, 256, false, true, 0.0));
  CHECK_CODE(check_of(TPU_DTYPE_I64, 2, 2, 8, false, false, 0), TPU_CODE_UNIMPLEMENTED);
  CHECK_CODE(check_of(F32, 3, 2, 8, false, false, 0), TPU_CODE_UNIMPLEMENTED);
  CHECK_CODE(check_of(F32, 2, 2, 257, false, false, 0), TPU_CODE_UNIMPLEMENTED);
  CHECK_CODE(check_of(F32, 2, 2, 8, true, true, 0), TPU_CODE_UNIMPLEMENTED);
  CHECK_CODE(check_of(F32, 2, 2, 8, false, false, 1.0), TPU_CODE_UNIMPLEMENTED);

  /* One key: the output is that key's value, logsumexp its score. */
  int64_t sq[4] = {1, 1, 3, 2}, sk[4] = {1, 1, 1, 2};
  tt_t q = tt_make(F32, 4, sq, TT_CONTIG), k = tt_make(F32, 4, sk, TT_CONTIG),
       v = tt_make(F32, 4, sk, TT_CONTIG);
  tt_fill_value(&q.view, 1.0), tt_fill_value(&k.view, 2.0), tt_fill_value(&v.view, -3.0);
  tpu_value_t in[4] = {tt_value(&q.view), tt_value(&k.view), tt_value(&v.view), tt_value(NULL)};
  tpu_attr_t at[6] = {tt_float(0), tt_bool(false), tt_bool(false), tt_float(0.5), tt_int(0),
                      tt_int(0)};
  int64_t so[4] = {1, 1, 3, 2}, sl[3] = {1, 1, 3};
  tt_t o = tt_make(F32, 4, so, TT_CONTIG), l = tt_make(F32, 3, sl, TT_CONTIG);
  tpu_view_t outs[2] = {o.view, l.view};
  tpu_node_t node = tt_node(in, 4, outs, 2, at, 6);
  const tpu_op_def_t* fwd = tt_def("sdpa_flash");
  if (fwd) CHECK_OK(tt_run(fwd->kernel, fwd, &node));
  CHECK_NEAR(tt_get(&o.view, 5), -3.0, 1e-6);
  CHECK_NEAR(tt_get(&l.view, 2), 2.0, 1e-6); /* 0.5 * (1*2 + 1*2) */
  tt_free(&q), tt_free(&k), tt_free(&v), tt_free(&o), tt_free(&l);
}
