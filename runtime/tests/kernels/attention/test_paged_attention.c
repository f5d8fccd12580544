/* test_paged_attention.c — the paged KV-cache family against its references.
 *
 * paged_attention_cases: (dtype, block size, heads, GQA, head dims, a batch
 * of (new tokens, context length) sequences, causal, sliding window,
 * softcap, padding rows, strided cache) build a cache whose blocks are
 * handed out in a shuffled order (non-contiguous tables, unused entries
 * holding garbage), fill it through paged_kv_write (optimised and reference
 * on two copies, compared exactly, with padding slots), then run
 * paged_attention through the optimised kernel and the reference.
 * paged_attention_errors: every bad descriptor gives its status.
 */
#include "kernels/attention/paged_attention.h"

#include "kernel_test_util.h"

#define F32 TPU_DTYPE_F32
#define F16 TPU_DTYPE_F16
#define BF16 TPU_DTYPE_BF16
#define MAX_SEQS 6

typedef struct pa_case {
  tpu_dtype_t dtype;
  int64_t bs, Hq, Hkv, D, Dv;
  int nseq;
  int64_t q_len[MAX_SEQS], seq_len[MAX_SEQS];
  bool causal;
  int64_t window;
  double softcap;
  int64_t pad_rows; /* query rows past query_start_loc[B] */
  bool strided;     /* caches stored [N, Hkv, bs, D] and viewed as [N, bs, Hkv, D] */
} pa_case_t;

static const pa_case_t k_cases[] = {
    /* decode batches of mixed lengths */
    {F32, 16, 4, 4, 32, 32, 4, {1, 1, 1, 1}, {1, 17, 40, 100}, true, -1, 0, 0, false},
    {F32, 32, 8, 2, 64, 64, 5, {1, 1, 1, 1, 1}, {33, 64, 5, 200, 31}, true, -1, 0, 3, false},
    {BF16, 16, 8, 2, 128, 128, 3, {1, 1, 1}, {77, 16, 300}, true, -1, 0, 0, false},
    {F16, 32, 4, 1, 64, 64, 3, {1, 1, 1}, {50, 1, 129}, true, -1, 0, 0, true},
    /* prefill (q_len == seq_len), several query chunks */
    {F32, 16, 4, 2, 32, 32, 2, {40, 7}, {40, 7}, true, -1, 0, 0, false},
    {BF16, 32, 2, 2, 64, 64, 1, {70}, {70}, true, -1, 0, 2, false},
    /* prefill with a cached prefix, mixed with decode */
    {F32, 16, 6, 3, 16, 16, 3, {20, 1, 5}, {50, 33, 5}, true, -1, 0, 0, true},
    {F16, 16, 4, 2, 32, 32, 2, {33, 3}, {64, 90}, true, -1, 0, 0, false},
    /* sliding window, softcap, both */
    {F32, 16, 4, 2, 32, 32, 3, {1, 30, 4}, {100, 60, 20}, true, 24, 0, 0, false},
    {BF16, 32, 4, 4, 32, 32, 2, {1, 20}, {70, 45}, true, -1, 30.0, 0, false},
    {F32, 16, 2, 1, 32, 32, 2, {17, 1}, {40, 80}, true, 16, 5.0, 1, true},
    /* non-causal (encoder-style), value head dim differing from the key's */
    {F32, 16, 2, 2, 16, 24, 2, {10, 4}, {10, 30}, false, -1, 0, 0, false},
    /* empty sequences among others */
    {F32, 16, 2, 1, 8, 8, 3, {0, 2, 0}, {0, 20, 9}, true, -1, 0, 0, false},
};

static uint64_t g_state = 12345;

/* A cache [N, bs, H, D], contiguous or stored [N, H, bs, D]. */
static tt_t make_cache(tpu_dtype_t dt, int64_t N, int64_t bs, int64_t H, int64_t D,
                       bool strided) {
  int64_t s[4] = {N, strided ? H : bs, strided ? bs : H, D};
  tt_t t = tt_make(dt, 4, s, TT_CONTIG);
  if (strided) {
    int64_t sz = t.view.sizes[1], st = t.view.strides[1];
    t.view.sizes[1] = t.view.sizes[2], t.view.strides[1] = t.view.strides[2];
    t.view.sizes[2] = sz, t.view.strides[2] = st;
  }
  return t;
}

static tt_t make_ints(int32_t ndim, const int64_t* sizes, tpu_dtype_t dt) {
  return tt_make(dt, ndim, sizes, TT_CONTIG);
}

static double tol_of(tpu_dtype_t dt) { return dt == F32 ? 2e-4 : 8 * tt_tol(dt); }

static void run_case(int idx, const pa_case_t* c) {
  char what[64];
  const tpu_op_def_t* wdef = tt_def("paged_kv_write");
  const tpu_op_def_t* adef = tt_def("paged_attention");
  if (!wdef || !adef) return;
  int64_t B = c->nseq, M = 0, used = 0, T = c->pad_rows, total_ctx = 0;
  for (int b = 0; b < B; ++b) {
    int64_t nb = (c->seq_len[b] + c->bs - 1) / c->bs;
    M = nb + 1 > M ? nb + 1 : M; /* one spare entry per row */
    used += nb, T += c->q_len[b], total_ctx += c->seq_len[b];
  }
  int64_t N = used + 3;
  /* A shuffled assignment of blocks 0..N-1 to the sequences' table rows. */
  int64_t* perm = malloc(sizeof(int64_t) * (size_t)N);
  for (int64_t i = 0; i < N; ++i) perm[i] = i;
  for (int64_t i = N - 1; i > 0; --i) {
    int64_t k = tt_rand_int(&g_state, 0, i), x = perm[i];
    perm[i] = perm[k], perm[k] = x;
  }
  int64_t st[2] = {B, M}, sq[1] = {B + 1}, sl[1] = {B};
  tt_t table = make_ints(2, st, TPU_DTYPE_I32), qsl = make_ints(1, sq, TPU_DTYPE_I32),
       lens = make_ints(1, sl, TPU_DTYPE_I32);
  int64_t next = 0, row = 0;
  for (int b = 0; b < B; ++b) {
    int64_t nb = (c->seq_len[b] + c->bs - 1) / c->bs;
    for (int64_t j = 0; j < M; ++j)
      tt_set(&table.view, b * M + j, j < nb ? (double)perm[next++] : 999999.0); /* garbage */
    tt_set(&qsl.view, b, (double)row);
    tt_set(&lens.view, b, (double)c->seq_len[b]);
    row += c->q_len[b];
  }
  tt_set(&qsl.view, B, (double)row);

  /* Every context token written through paged_kv_write, plus padding slots. */
  int64_t W = total_ctx + 4;
  int64_t sk[3] = {W, c->Hkv, c->D}, sv[3] = {W, c->Hkv, c->Dv}, ss[1] = {W};
  tt_t key = tt_make(c->dtype, 3, sk, TT_CONTIG), val = tt_make(c->dtype, 3, sv, TT_GAPS);
  tt_t slots = make_ints(1, ss, TPU_DTYPE_I64);
  tt_fill(&key.view, -1.5, 1.5, 0.0), tt_fill(&val.view, -1.0, 1.0, 0.0);
  int64_t w = 0;
  for (int b = 0; b < B; ++b)
    for (int64_t p = 0; p < c->seq_len[b]; ++p) {
      if (w % 7 == 3) tt_set(&slots.view, w++, -1.0); /* a padding token */
      int64_t blk = (int64_t)tt_get(&table.view, b * M + p / c->bs);
      tt_set(&slots.view, w++, (double)(blk * c->bs + p % c->bs));
    }
  while (w < W) tt_set(&slots.view, w++, -1.0);

  tt_t kc[2], vc[2];
  for (int i = 0; i < 2; ++i) {
    kc[i] = make_cache(c->dtype, N, c->bs, c->Hkv, c->D, c->strided);
    vc[i] = make_cache(c->dtype, N, c->bs, c->Hkv, c->Dv, c->strided);
    tt_fill_value(&kc[i].view, 7.0), tt_fill_value(&vc[i].view, -7.0); /* unused slots */
    tpu_value_t win[5] = {tt_value(&key.view), tt_value(&val.view), tt_value(&kc[i].view),
                          tt_value(&vc[i].view), tt_value(&slots.view)};
    tpu_node_t wn = tt_node(win, 5, NULL, 0, NULL, 0);
    wn.op = tpu_op_lookup("paged_kv_write");
    CHECK_OK(tpu_op_check(&wn));
    CHECK_OK(i == 0 ? tt_run(wdef->kernel, wdef, &wn) : tpu_paged_write_reference(wdef, &wn));
  }
  snprintf(what, sizeof(what), "case %d key_cache", idx);
  tt_compare(what, &kc[0].view, &kc[1].view, 0.0);
  snprintf(what, sizeof(what), "case %d value_cache", idx);
  tt_compare(what, &vc[0].view, &vc[1].view, 0.0);

  int64_t sqr[3] = {T, c->Hq, c->D};
  tt_t q = tt_make(c->dtype, 3, sqr, c->strided ? TT_GAPS : TT_CONTIG);
  tt_fill(&q.view, -1.5, 1.5, 0.0);
  tpu_value_t in[6] = {tt_value(&q.view),     tt_value(&kc[0].view), tt_value(&vc[0].view),
                       tt_value(&qsl.view),   tt_value(&lens.view),  tt_value(&table.view)};
  double scale = 1.0 / sqrt((double)c->D);
  tpu_attr_t at[4] = {tt_float(scale), tt_bool(c->causal), tt_int(c->window),
                      tt_float(c->softcap)};
  tpu_node_t node = tt_node(in, 6, NULL, 1, at, 4);
  node.op = tpu_op_lookup("paged_attention");
  tpu_view_t shape;
  CHECK_OK(tpu_op_infer(&node, &shape));
  CHECK(shape.ndim == 3 && shape.sizes[0] == T && shape.sizes[1] == c->Hq &&
        shape.sizes[2] == c->Dv && shape.dtype == c->dtype);
  tt_t out = tt_like(&shape, c->strided ? TT_GAPS : TT_CONTIG), ref = tt_like(&shape, TT_CONTIG);
  tt_fill_value(&out.view, 5.0); /* padding rows must become zeros */
  node.outputs = &out.view;
  CHECK_OK(tpu_op_check(&node));
  CHECK_OK(tt_run(adef->kernel, adef, &node));
  node.outputs = &ref.view;
  CHECK_OK(tpu_paged_attention_reference(adef, &node));
  snprintf(what, sizeof(what), "case %d output", idx);
  tt_compare(what, &out.view, &ref.view, tol_of(c->dtype));
  for (int64_t k = row * c->Hq * c->Dv; k < T * c->Hq * c->Dv; ++k)
    CHECK(tt_get(&out.view, k) == 0.0);

  for (int i = 0; i < 2; ++i) tt_free(&kc[i]), tt_free(&vc[i]);
  tt_free(&q), tt_free(&out), tt_free(&ref), tt_free(&key), tt_free(&val), tt_free(&slots);
  tt_free(&table), tt_free(&qsl), tt_free(&lens);
  free(perm);
}

TEST(paged_attention_cases) {
  for (int i = 0; i < (int)(sizeof(k_cases) / sizeof(k_cases[0])); ++i) run_case(i, &k_cases[i]);
}

/* ---- errors ------------------------------------------------------------------------ */

typedef struct err_setup {
  tt_t q, kc, vc, qsl, lens, table, out;
  tpu_attr_t at[4];
} err_setup_t;

/* A valid decode of two sequences (lengths 5 and 20, block size 8, 4 blocks),
 * which each error test then breaks in one place. */
static void err_init(err_setup_t* e, tpu_dtype_t dt) {
  int64_t sq[3] = {2, 4, 8}, sc[4] = {4, 8, 2, 8}, s1[1] = {3}, s2[1] = {2}, st[2] = {2, 3};
  e->q = tt_make(dt, 3, sq, TT_CONTIG), e->out = tt_make(dt, 3, sq, TT_CONTIG);
  e->kc = tt_make(dt, 4, sc, TT_CONTIG), e->vc = tt_make(dt, 4, sc, TT_CONTIG);
  e->qsl = tt_make(TPU_DTYPE_I32, 1, s1, TT_CONTIG);
  e->lens = tt_make(TPU_DTYPE_I32, 1, s2, TT_CONTIG);
  e->table = tt_make(TPU_DTYPE_I32, 2, st, TT_CONTIG);
  tt_set(&e->qsl.view, 1, 1), tt_set(&e->qsl.view, 2, 2);
  tt_set(&e->lens.view, 0, 5), tt_set(&e->lens.view, 1, 20);
  tt_set(&e->table.view, 0, 3), tt_set(&e->table.view, 3, 0), tt_set(&e->table.view, 4, 1);
  tt_set(&e->table.view, 5, 2);
  e->at[0] = tt_float(0.3), e->at[1] = tt_bool(true), e->at[2] = tt_int(-1);
  e->at[3] = tt_float(0.0);
}

static void err_free(err_setup_t* e) {
  tt_free(&e->q), tt_free(&e->kc), tt_free(&e->vc), tt_free(&e->qsl), tt_free(&e->lens);
  tt_free(&e->table), tt_free(&e->out);
}

/* The check, then (when it passes) the kernel and the reference, which must agree. */
static tpu_status_t err_run(err_setup_t* e) {
  tpu_value_t in[6] = {tt_value(&e->q.view),    tt_value(&e->kc.view),
                       tt_value(&e->vc.view),   tt_value(&e->qsl.view),
                       tt_value(&e->lens.view), tt_value(&e->table.view)};
  tpu_node_t node = tt_node(in, 6, &e->out.view, 1, e->at, 4);
  node.op = tpu_op_lookup("paged_attention");
  tpu_status_t s = tpu_op_check(&node);
  if (s != TPU_OK) return s;
  const tpu_op_def_t* def = tpu_op_def(node.op);
  tpu_status_t r = tpu_paged_attention_reference(def, &node);
  s = tt_run(def->kernel, def, &node);
  CHECK(tpu_status_code(r) == tpu_status_code(s));
  tpu_status_free(r);
  return s;
}

TEST(paged_attention_errors) {
  err_setup_t e;
  err_init(&e, F32);
  CHECK_OK(err_run(&e));
  tt_set(&e.table.view, 5, 4); /* a block past the cache's 4 */
  CHECK_CODE(err_run(&e), TPU_CODE_INDEX_ERROR);
  tt_set(&e.table.view, 5, -1);
  CHECK_CODE(err_run(&e), TPU_CODE_INDEX_ERROR);
  tt_set(&e.table.view, 5, 2);
  tt_set(&e.lens.view, 1, 25); /* beyond 3 blocks of 8 */
  CHECK_CODE(err_run(&e), TPU_CODE_INVALID_ARGUMENT);
  tt_set(&e.lens.view, 1, 0); /* fewer than its one new token */
  CHECK_CODE(err_run(&e), TPU_CODE_INVALID_ARGUMENT);
  tt_set(&e.lens.view, 1, 20);
  tt_set(&e.qsl.view, 2, 3); /* past num_tokens */
  CHECK_CODE(err_run(&e), TPU_CODE_INVALID_ARGUMENT);
  tt_set(&e.qsl.view, 2, 2), tt_set(&e.qsl.view, 0, 1);
  CHECK_CODE(err_run(&e), TPU_CODE_INVALID_ARGUMENT);
  tt_set(&e.qsl.view, 0, 0);
  e.at[2] = tt_int(0);
  CHECK_CODE(err_run(&e), TPU_CODE_INVALID_ARGUMENT);
  e.at[1] = tt_bool(false), e.at[2] = tt_int(4);
  CHECK_CODE(err_run(&e), TPU_CODE_INVALID_ARGUMENT);
  e.at[1] = tt_bool(true), e.at[2] = tt_int(-1), e.at[3] = tt_float(-1.0);
  CHECK_CODE(err_run(&e), TPU_CODE_INVALID_ARGUMENT);
  e.at[3] = tt_float(0.0);
  CHECK_OK(err_run(&e));
  /* shapes: GQA ratio, head dims, batch sizes, ranks, dtypes */
  e.q.view.sizes[1] = 3;
  CHECK_CODE(err_run(&e), TPU_CODE_INVALID_ARGUMENT);
  e.q.view.sizes[1] = 4, e.q.view.sizes[2] = 4;
  CHECK_CODE(err_run(&e), TPU_CODE_INVALID_ARGUMENT);
  e.q.view.sizes[2] = 8, e.lens.view.sizes[0] = 1;
  CHECK_CODE(err_run(&e), TPU_CODE_INVALID_ARGUMENT);
  e.lens.view.sizes[0] = 2, e.table.view.ndim = 1;
  CHECK_CODE(err_run(&e), TPU_CODE_INVALID_ARGUMENT);
  e.table.view.ndim = 2, e.table.view.dtype = TPU_DTYPE_F32;
  CHECK_CODE(err_run(&e), TPU_CODE_INVALID_ARGUMENT);
  e.table.view.dtype = TPU_DTYPE_I32, e.vc.view.dtype = TPU_DTYPE_F64;
  CHECK_CODE(err_run(&e), TPU_CODE_INVALID_ARGUMENT);
  e.vc.view.dtype = F32, e.vc.view.sizes[1] = 4;
  CHECK_CODE(err_run(&e), TPU_CODE_INVALID_ARGUMENT);
  e.vc.view.sizes[1] = 8, e.q.view.ndim = 2;
  CHECK_CODE(err_run(&e), TPU_CODE_INVALID_ARGUMENT);
  e.q.view.ndim = 3;
  CHECK_OK(err_run(&e));
  err_free(&e);
  err_init(&e, TPU_DTYPE_F64);
  CHECK_CODE(err_run(&e), TPU_CODE_UNIMPLEMENTED);
  err_free(&e);

  /* paged_kv_write: slots past the cache, shape and dtype mismatches */
  int64_t sk[3] = {3, 2, 8}, sc[4] = {4, 8, 2, 8}, ss[1] = {3};
  tt_t k = tt_make(F32, 3, sk, TT_CONTIG), kc = tt_make(F32, 4, sc, TT_CONTIG);
  tt_t slots = tt_make(TPU_DTYPE_I64, 1, ss, TT_CONTIG);
  tt_fill(&k.view, -1, 1, 0), tt_fill_value(&kc.view, 9.0);
  tt_set(&slots.view, 0, 31), tt_set(&slots.view, 1, -1), tt_set(&slots.view, 2, 32);
  tpu_value_t win[5] = {tt_value(&k.view), tt_value(&k.view), tt_value(&kc.view),
                        tt_value(&kc.view), tt_value(&slots.view)};
  tpu_node_t wn = tt_node(win, 5, NULL, 0, NULL, 0);
  wn.op = tpu_op_lookup("paged_kv_write");
  const tpu_op_def_t* wdef = tt_def("paged_kv_write");
  CHECK_OK(tpu_op_check(&wn));
  if (wdef) {
    CHECK_CODE(tt_run(wdef->kernel, wdef, &wn), TPU_CODE_INDEX_ERROR);
    CHECK_CODE(tpu_paged_write_reference(wdef, &wn), TPU_CODE_INDEX_ERROR);
    CHECK(tt_get(&kc.view, 31 * 16) == 9.0); /* nothing written */
    tt_set(&slots.view, 2, 0);
    CHECK_OK(tt_run(wdef->kernel, wdef, &wn));
    CHECK(tt_get(&kc.view, 31 * 16 + 3) == tt_get(&k.view, 3));
  }
  win[4].u.view.dtype = TPU_DTYPE_F32;
  CHECK_CODE(tpu_op_check(&wn), TPU_CODE_INVALID_ARGUMENT);
  win[4].u.view.dtype = TPU_DTYPE_I64, win[4].u.view.sizes[0] = 2;
  CHECK_CODE(tpu_op_check(&wn), TPU_CODE_INVALID_ARGUMENT);
  win[4].u.view.sizes[0] = 3, win[0].u.view.dtype = TPU_DTYPE_BF16;
  CHECK_CODE(tpu_op_check(&wn), TPU_CODE_INVALID_ARGUMENT);
  win[0].u.view.dtype = F32, win[0].u.view.sizes[1] = 1;
  CHECK_CODE(tpu_op_check(&wn), TPU_CODE_INVALID_ARGUMENT);
  tt_free(&k), tt_free(&kc), tt_free(&slots);
}
