/* test_unique.c — the unique family (unique.c) against its reference
 * (tpu_unique_reference): unique / unique_consecutive / bincount over dtypes,
 * layouts, NaNs, repeated values and empty inputs, through the count row
 * (sync_size) and then the op; known values and the fallbacks/errors. */
#include "kernel_test_util.h"

tpu_status_t tpu_unique_reference(const tpu_op_def_t* def, const tpu_node_t* node);

static const tpu_dtype_t k_dtypes[] = {TPU_DTYPE_BOOL, TPU_DTYPE_U8,  TPU_DTYPE_I8,
                                       TPU_DTYPE_I16,  TPU_DTYPE_I32, TPU_DTYPE_I64,
                                       TPU_DTYPE_F16,  TPU_DTYPE_BF16, TPU_DTYPE_F32,
                                       TPU_DTYPE_F64};
#define NDT ((int)(sizeof(k_dtypes) / sizeof(k_dtypes[0])))

/* Runs the count row (kernel and reference must agree), then the op with
 * sync_size filled in, kernel vs reference. attrs[nattrs-1] is sync_size. */
static void run_case(const char* what, const char* op, tpu_value_t* in, int32_t nin,
                     tpu_attr_t* attrs, int32_t nattrs, int32_t nout, tt_layout_t layout) {
  char cname[64];
  snprintf(cname, sizeof(cname), "%s_count", op);
  const tpu_op_def_t *def = tt_def(op), *cdef = tt_def(cname);
  if (!def || !cdef) return;
  attrs[nattrs - 1] = tt_none();
  tpu_view_t shapes[3];
  tpu_node_t node = tt_node(in, nin, NULL, 0, attrs, nattrs);
  CHECK_CODE(def->infer(def, &node, shapes), TPU_CODE_UNIMPLEMENTED); /* needs sync_size */
  CHECK_OK(cdef->check(cdef, &node));
  tt_t cnt = tt_make(TPU_DTYPE_I64, 0, NULL, TT_CONTIG), rcnt = tt_make(TPU_DTYPE_I64, 0, NULL, 0);
  node = tt_node(in, nin, &cnt.view, 1, attrs, nattrs);
  CHECK_OK(tt_run(cdef->kernel, cdef, &node));
  node.outputs = &rcnt.view;
  CHECK_OK(tpu_unique_reference(cdef, &node));
  int64_t k = (int64_t)tt_get(&cnt.view, 0);
  if (k != (int64_t)tt_get(&rcnt.view, 0)) {
    fprintf(stderr, "%s: count %lld vs %lld\n", what, (long long)k,
            (long long)tt_get(&rcnt.view, 0));
    CHECK(false);
  }
  attrs[nattrs - 1] = tt_int(k);
  node = tt_node(in, nin, NULL, 0, attrs, nattrs);
  CHECK_OK(def->infer(def, &node, shapes));
  tt_t got[3], want[3];
  tpu_view_t gv[3], wv[3];
  for (int32_t o = 0; o < nout; ++o) {
    got[o] = tt_like(&shapes[o], layout), want[o] = tt_like(&shapes[o], TT_CONTIG);
    tt_fill_value(&got[o].view, 3), tt_fill_value(&want[o].view, 5);
    gv[o] = got[o].view, wv[o] = want[o].view;
  }
  node = tt_node(in, nin, gv, nout, attrs, nattrs);
  CHECK_OK(def->check(def, &node));
  CHECK_OK(tt_run(def->kernel, def, &node));
  node.outputs = wv;
  CHECK_OK(tpu_unique_reference(def, &node));
  for (int32_t o = 0; o < nout; ++o) {
    if (tpu_view_numel(&shapes[o]) > 0) tt_compare(what, &gv[o], &wv[o], 0.0);
    tt_free(&got[o]), tt_free(&want[o]);
  }
  /* a stale sync_size is an error, not a write out of bounds */
  if (nout == 3) {
    attrs[nattrs - 1] = tt_int(k + 1);
    node = tt_node(in, nin, NULL, 0, attrs, nattrs);
    CHECK_OK(def->infer(def, &node, shapes));
    tt_t b[3];
    tpu_view_t bv[3];
    for (int o = 0; o < 3; ++o) b[o] = tt_like(&shapes[o], TT_CONTIG), bv[o] = b[o].view;
    node = tt_node(in, nin, bv, 3, attrs, nattrs);
    CHECK_CODE(tt_run(def->kernel, def, &node), TPU_CODE_INTERNAL);
    for (int o = 0; o < 3; ++o) tt_free(&b[o]);
  }
  tt_free(&cnt), tt_free(&rcnt);
}

typedef struct uq_case {
  int32_t nd;
  int64_t sizes[3];
  int lo, hi; /* value range (few distinct values: repeats and runs) */
  double nan_rate;
} uq_case_t;

TEST(unique_table) {
  static const uq_case_t cases[] = {
      {1, {20}, -3, 3, 0},    {2, {7, 9}, 0, 4, 0.2}, {3, {3, 4, 5}, -50, 50, 0},
      {1, {0}, 0, 1, 0},      {1, {1}, 2, 2, 0},      {2, {33, 17}, -1000, 1000, 0.05},
      {2, {6, 6}, 1, 1, 0.5},
  };
  static const tt_layout_t layouts[] = {TT_CONTIG, TT_TRANSPOSED, TT_PADDED};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    const uq_case_t* uc = &cases[c];
    for (int t = 0; t < NDT; ++t) {
      tpu_dtype_t dt = k_dtypes[t];
      if (dt == TPU_DTYPE_U8 && uc->lo < 0) continue;
      if (tpu_dtype_size(dt) == 1 && uc->hi > 127) continue;
      for (int l = 0; l < 3; ++l) {
        tt_t x = tt_make(dt, uc->nd, uc->sizes, layouts[l]);
        tt_fill(&x.view, uc->lo, uc->hi, tpu_dtype_is_floating(dt) ? uc->nan_rate : 0);
        for (int64_t i = 0; i < tpu_view_numel(&x.view); ++i) /* integral values: repeats */
          if (!isnan(tt_get(&x.view, i))) tt_set(&x.view, i, floor(tt_get(&x.view, i)));
        tpu_value_t in[2] = {tt_value(&x.view), {.kind = TPU_VALUE_NONE}};
        for (int flags = 0; flags < 4; ++flags) {
          char what[96];
          snprintf(what, sizeof(what), "case %zu %s layout %d flags %d", c, tpu_dtype_name(dt),
                   l, flags);
          tpu_attr_t ua[4] = {tt_bool(true), tt_bool(flags & 1), tt_bool(flags & 2), tt_none()};
          run_case(what, "unique", in, 1, ua, 4, 3, layouts[(l + flags) % 3]);
          tpu_attr_t ca[4] = {tt_bool(flags & 1), tt_bool(flags & 2), tt_none(), tt_none()};
          run_case(what, "unique_consecutive", in, 1, ca, 4, 3, layouts[(l + flags) % 3]);
        }
        if (tpu_dtype_is_integral(dt) && uc->nd == 1 && uc->lo >= 0) {
          for (int w = 0; w < 4; ++w) {
            static const tpu_dtype_t wdt[] = {TPU_DTYPE_F32, TPU_DTYPE_F64, TPU_DTYPE_BF16,
                                              TPU_DTYPE_I32};
            tt_t wt = tt_make(wdt[w], 1, uc->sizes, layouts[l]);
            tt_fill(&wt.view, -2, 2, 0);
            tpu_value_t bin[2] = {tt_value(&x.view), w == 3 ? in[1] : tt_value(&wt.view)};
            for (int64_t minlength = 0; minlength <= 10; minlength += 10) {
              char what[96];
              snprintf(what, sizeof(what), "bincount case %zu %s w %d min %lld", c,
                       tpu_dtype_name(dt), w, (long long)minlength);
              tpu_attr_t ba[2] = {tt_int(minlength), tt_none()};
              run_case(what, "bincount", bin, 2, ba, 2, 1, layouts[l]);
            }
            tt_free(&wt);
          }
        }
        tt_free(&x);
      }
    }
  }
}

TEST(unique_known_and_errors) {
  const tpu_op_def_t *u = tt_def("unique"), *bc = tt_def("bincount_count"),
                     *b = tt_def("bincount"), *uc = tt_def("unique_consecutive");
  if (!u || !bc || !b || !uc) return;
  int64_t s6[1] = {6};
  tt_t x = tt_make(TPU_DTYPE_F32, 1, s6, TT_CONTIG);
  const double xs[6] = {2, NAN, -1, 2, NAN, -0.0};
  for (int i = 0; i < 6; ++i) tt_set(&x.view, i, xs[i]);
  tpu_value_t in[2] = {tt_value(&x.view), {.kind = TPU_VALUE_NONE}};
  tpu_attr_t ua[4] = {tt_bool(true), tt_bool(true), tt_bool(true), tt_int(5)};
  int64_t s5[1] = {5};
  tt_t o = tt_make(TPU_DTYPE_F32, 1, s5, 0), inv = tt_make(TPU_DTYPE_I64, 1, s6, 0),
       cnt = tt_make(TPU_DTYPE_I64, 1, s5, 0);
  tpu_view_t outs[3] = {o.view, inv.view, cnt.view};
  tpu_node_t node = tt_node(in, 1, outs, 3, ua, 4);
  CHECK_OK(tt_run(u->kernel, u, &node));
  const double wo[5] = {-1, 0, 2, NAN, NAN};
  const int64_t wi[6] = {2, 3, 0, 2, 4, 1}, wc[5] = {1, 1, 2, 1, 1};
  for (int k = 0; k < 5; ++k) {
    if (isnan(wo[k]))
      CHECK(isnan(tt_get(&o.view, k)));
    else
      CHECK_NEAR(tt_get(&o.view, k), wo[k], 0);
    CHECK_NEAR(tt_get(&cnt.view, k), (double)wc[k], 0);
  }
  for (int k = 0; k < 6; ++k) CHECK_NEAR(tt_get(&inv.view, k), (double)wi[k], 0);
  /* unique_consecutive with a dim out of range falls back (PyTorch's IndexError) */
  tpu_attr_t ca[4] = {tt_bool(false), tt_bool(false), tt_int(1), tt_none()};
  node = tt_node(in, 1, NULL, 0, ca, 4);
  CHECK_CODE(uc->check(uc, &node), TPU_CODE_UNIMPLEMENTED);
  /* bincount: a negative value is a RuntimeError; floats and 2-d fall back */
  int64_t s3[1] = {3}, s22[2] = {2, 2};
  tt_t neg = tt_make(TPU_DTYPE_I64, 1, s3, 0), cout = tt_make(TPU_DTYPE_I64, 0, NULL, 0);
  tt_set(&neg.view, 0, 1), tt_set(&neg.view, 1, -1), tt_set(&neg.view, 2, 0);
  tpu_value_t nin[2] = {tt_value(&neg.view), {.kind = TPU_VALUE_NONE}};
  tpu_attr_t ba[2] = {tt_int(0), tt_none()};
  node = tt_node(nin, 2, &cout.view, 1, ba, 2);
  CHECK_OK(bc->check(bc, &node));
  CHECK_CODE(tt_run(bc->kernel, bc, &node), TPU_CODE_INVALID_ARGUMENT);
  nin[0] = tt_value(&x.view);
  node = tt_node(nin, 2, &cout.view, 1, ba, 2);
  CHECK_CODE(bc->check(bc, &node), TPU_CODE_UNIMPLEMENTED);
  tt_t m = tt_make(TPU_DTYPE_I64, 2, s22, 0);
  nin[0] = tt_value(&m.view);
  node = tt_node(nin, 2, &cout.view, 1, ba, 2);
  CHECK_CODE(bc->check(bc, &node), TPU_CODE_UNIMPLEMENTED);
  ba[0] = tt_int(-1);
  nin[0] = tt_value(&neg.view);
  node = tt_node(nin, 2, &cout.view, 1, ba, 2);
  CHECK_CODE(b->check(b, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&x), tt_free(&o), tt_free(&inv), tt_free(&cnt), tt_free(&neg), tt_free(&cout);
  tt_free(&m);
}

TEST(unique_dim_table) {
  static const uq_case_t cases[] = {
      {2, {9, 4}, 0, 2, 0}, {3, {3, 5, 2}, 0, 1, 0}, {2, {1, 6}, -3, 3, 0}, {3, {4, 2, 7}, 0, 3, 0},
      {1, {12}, 0, 3, 0},
  };
  static const tt_layout_t layouts[] = {TT_CONTIG, TT_TRANSPOSED, TT_PADDED};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    const uq_case_t* uc = &cases[c];
    for (int t = 0; t < NDT; ++t) {
      tpu_dtype_t dt = k_dtypes[t];
      if (dt == TPU_DTYPE_U8 && uc->lo < 0) continue;
      for (int l = 0; l < 3; ++l) {
        tt_t x = tt_make(dt, uc->nd, uc->sizes, layouts[l]);
        tt_fill(&x.view, uc->lo, uc->hi, 0);
        for (int64_t i = 0; i < tpu_view_numel(&x.view); ++i)
          tt_set(&x.view, i, floor(tt_get(&x.view, i)));
        /* repeat slice 0 along dim 0 so that there are equal slices */
        tpu_value_t in[1] = {tt_value(&x.view)};
        for (int32_t dim = -1; dim < uc->nd; ++dim) {
          char what[96];
          snprintf(what, sizeof(what), "dim case %zu %s layout %d dim %d", c, tpu_dtype_name(dt),
                   l, dim);
          tpu_attr_t ua[5] = {tt_int(dim), tt_bool(true), tt_bool(l & 1), tt_bool(true), tt_none()};
          run_case(what, "unique_dim", in, 1, ua, 5, 3, layouts[(l + 1) % 3]);
          tpu_attr_t ca[4] = {tt_bool(true), tt_bool(false), tt_int(dim), tt_none()};
          run_case(what, "unique_consecutive", in, 1, ca, 4, 3, layouts[(l + 2) % 3]);
        }
        tt_free(&x);
      }
    }
  }
}

/* isin: kernel against the quadratic reference over dtypes, layouts, invert,
 * mixed dtypes, NaNs and a Python-number operand; bool is the CPU's error. */
TEST(unique_isin_table) {
  const tpu_op_def_t *def = tt_def("isin"), *ts = tt_def("isin_tensor_scalar"),
                     *st = tt_def("isin_scalar_tensor");
  if (!def || !ts || !st) return;
  int64_t es[2] = {37, 130}, tsz[1] = {53};
  for (int t = 1; t < NDT; ++t)
    for (int layout = 0; layout < 3; ++layout)
      for (int inv = 0; inv < 2; ++inv) {
        tpu_dtype_t dt = k_dtypes[t], tdt = layout == 2 ? TPU_DTYPE_F64 : dt;
        tt_t e = tt_make(dt, 2, es, layout == 1 ? TT_TRANSPOSED : layout == 2 ? TT_GAPS : TT_CONTIG);
        tt_t te = tt_make(tdt, 1, tsz, layout ? TT_GAPS : TT_CONTIG);
        tt_fill(&e.view, 0, 60, 0);
        tt_fill(&te.view, 0, 60, 0);
        if (tpu_dtype_is_floating(dt)) tt_set(&e.view, 3, NAN), tt_set(&te.view, 1, NAN);
        tt_t out = tt_make(TPU_DTYPE_BOOL, 2, es, layout ? TT_GAPS : TT_CONTIG);
        tt_t want = tt_make(TPU_DTYPE_BOOL, 2, es, TT_CONTIG);
        tpu_value_t in[2] = {tt_value(&e.view), tt_value(&te.view)};
        tpu_attr_t attrs[2] = {tt_bool(false), tt_bool(inv)};
        tpu_node_t node = tt_node(in, 2, NULL, 0, attrs, 2);
        tpu_view_t inferred;
        CHECK_OK(def->infer(def, &node, &inferred));
        CHECK(inferred.dtype == TPU_DTYPE_BOOL && views_same_shape(&inferred, &e.view));
        node = tt_node(in, 2, &out.view, 1, attrs, 2);
        CHECK_OK(def->check(def, &node));
        CHECK_OK(tt_run(def->kernel, def, &node));
        node.outputs = &want.view;
        CHECK_OK(tpu_unique_reference(def, &node));
        char what[64];
        snprintf(what, sizeof(what), "isin %s layout %d invert %d", tpu_dtype_name(dt), layout, inv);
        tt_compare(what, &out.view, &want.view, 0.0);
        /* Tensor_Scalar with a Python int. */
        tpu_value_t sc[2] = {tt_value(&e.view), {0}};
        sc[1].kind = TPU_VALUE_SCALAR;
        sc[1].u.scalar.dtype = TPU_DTYPE_I64;
        sc[1].u.scalar.v.i = 7;
        node = tt_node(sc, 2, &out.view, 1, attrs, 2);
        CHECK_OK(tt_run(ts->kernel, ts, &node));
        node.outputs = &want.view;
        CHECK_OK(tpu_unique_reference(ts, &node));
        tt_compare(what, &out.view, &want.view, 0.0);
        tt_free(&e), tt_free(&te), tt_free(&out), tt_free(&want);
      }
  /* Scalar_Tensor: a 0-dim result. */
  int64_t four = 4;
  tt_t te = tt_make(TPU_DTYPE_I32, 1, &four, TT_CONTIG), o = tt_make(TPU_DTYPE_BOOL, 0, NULL, 0);
  for (int k = 0; k < 4; ++k) tt_set(&te.view, k, 2 * k);
  tpu_value_t in[2] = {{0}, tt_value(&te.view)};
  in[0].kind = TPU_VALUE_SCALAR;
  in[0].u.scalar.dtype = TPU_DTYPE_I64;
  in[0].u.scalar.v.i = 4;
  tpu_attr_t attrs[2] = {tt_bool(false), tt_bool(false)};
  tpu_node_t node = tt_node(in, 2, &o.view, 1, attrs, 2);
  CHECK_OK(tt_run(st->kernel, st, &node));
  CHECK(tt_get(&o.view, 0) == 1);
  in[0].u.scalar.v.i = 5;
  CHECK_OK(tt_run(st->kernel, st, &node));
  CHECK(tt_get(&o.view, 0) == 0);
  /* bool: not supported by the CPU kernel. */
  tt_t b = tt_make(TPU_DTYPE_BOOL, 1, &four, TT_CONTIG), bo = tt_make(TPU_DTYPE_BOOL, 1, &four, 0);
  tpu_value_t bb[2] = {tt_value(&b.view), tt_value(&b.view)};
  node = tt_node(bb, 2, &bo.view, 1, attrs, 2);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&te), tt_free(&o), tt_free(&b), tt_free(&bo);
}
