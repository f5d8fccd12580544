/* test_shape.c — the shape family (shape.c) against its reference
 * (tpu_shape_reference): tables of arange/linspace ranges over every dtype
 * and strided outputs, flip/roll/triu/tril over dtypes, dims and layouts of
 * self and out (and in-place triu/tril), some known values, and the
 * fallbacks (bool ranges, bad dims, overlapping outputs). Every compared
 * case also checks the row's shape function against the output's shape. */
#include "kernel_test_util.h"

tpu_status_t tpu_shape_reference(const tpu_op_def_t* def, const tpu_node_t* node);

static const tpu_dtype_t k_dtypes[] = {TPU_DTYPE_BOOL, TPU_DTYPE_U8,  TPU_DTYPE_I8,
                                       TPU_DTYPE_I16,  TPU_DTYPE_I32, TPU_DTYPE_I64,
                                       TPU_DTYPE_F16,  TPU_DTYPE_BF16, TPU_DTYPE_F32,
                                       TPU_DTYPE_F64};
#define NDT ((int)(sizeof(k_dtypes) / sizeof(k_dtypes[0])))

/* Runs kernel and reference into two outputs of `shape` (kernel's in
 * `layout`); fails on any difference. */
static void run_compare(const char* what, const tpu_op_def_t* def, tpu_value_t* in, int32_t nin,
                        const tpu_attr_t* attrs, int32_t nattrs, const tpu_view_t* shape,
                        tt_layout_t layout) {
  tt_t out = tt_like(shape, layout), want = tt_like(shape, TT_CONTIG);
  tt_fill_value(&out.view, 7), tt_fill_value(&want.view, 5);
  tpu_node_t node = tt_node(in, nin, &out.view, 1, attrs, nattrs);
  node.op = tpu_op_lookup(def->name);
  CHECK_OK(def->check(def, &node));
  /* The shape function sizes the same output (a factory row given the out=
   * tensor's dtype, as the bridge passes it: ops.h). */
  tpu_node_t full = node; /* every attr of the row, as the bridge passes them */
  for (int32_t k = nattrs; k < tpu_op_num_attrs(node.op); ++k) full.attrs[k] = tt_none();
  full.num_attrs = tpu_op_num_attrs(node.op);
  tpu_view_t inferred = {.dtype = shape->dtype};
  CHECK_OK(tpu_op_infer(&full, &inferred));
  /* (tril/triu_indices: their dtype attr decides; the tests' out= tensors
   * may be of another integer dtype, which the bridge accepts.) */
  CHECK(inferred.dtype == shape->dtype || strstr(def->name, "_indices"));
  CHECK(inferred.ndim == shape->ndim);
  for (int32_t d = 0; d < shape->ndim; ++d) CHECK(inferred.sizes[d] == shape->sizes[d]);
  CHECK_OK(tt_run(def->kernel, def, &node));
  node.outputs = &want.view;
  CHECK_OK(tpu_shape_reference(def, &node));
  tt_compare(what, &out.view, &want.view, 0.0);
  tt_free(&out), tt_free(&want);
}

typedef struct seq_case {
  const char* op;
  double a, b, c; /* start, end, step (linspace: c = steps) */
  bool ints;      /* Scalars as INT attrs */
} seq_case_t;

TEST(shape_arange_linspace_table) {
  static const seq_case_t cases[] = {
      {"arange", 0, 10, 1, true},      {"arange", -3, 17, 4, true},
      {"arange", 20, -5, -3, true},    {"arange", 0, 0, 1, true},
      {"arange", 0.5, 9.7, 0.3, false}, {"arange", 1, -1, -0.25, false},
      {"arange", 0, 100000, 1, true},  {"arange", -2.5, 40.25, 1.5, false},
      {"arange", -2.5, 40.25, 0.125, false}, {"arange", 3, -1, -0.0625, false},
      {"linspace", 0, 1, 5, false},    {"linspace", -3, 100, 17, true},
      {"linspace", 10, -10, 1, true},  {"linspace", 2, 3, 0, true},
      {"linspace", 0, 50, 51, true},   {"linspace", -1.5, 2.75, 100001, false},
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    const seq_case_t* sc = &cases[c];
    const tpu_op_def_t* def = tt_def(sc->op);
    if (!def) return;
    bool lin = sc->op[0] == 'l';
    tpu_attr_t attrs[3] = {sc->ints ? tt_int((int64_t)sc->a) : tt_float(sc->a),
                           sc->ints ? tt_int((int64_t)sc->b) : tt_float(sc->b),
                           (sc->ints || lin) ? tt_int((int64_t)sc->c) : tt_float(sc->c)};
    for (int t = 1; t < NDT; ++t) {
      tpu_dtype_t dt = k_dtypes[t];
      if (!sc->ints && !tpu_dtype_is_floating(dt)) continue;
      if (dt == TPU_DTYPE_U8 && (sc->a < 0 || sc->b < 0)) continue;
      if (tpu_dtype_size(dt) == 1 && (fabs(sc->a) > 127 || fabs(sc->b) > 127)) continue;
      if (!lin && tpu_dtype_size(dt) <= 2 && sc->b > 2000) continue;
      int64_t n;
      if (lin) {
        n = (int64_t)sc->c;
      } else if (sc->ints) {
        int64_t st = (int64_t)sc->c, sg = st > 0 ? 1 : -1;
        n = ((int64_t)sc->b - (int64_t)sc->a + st - sg) / st;
      } else {
        n = (int64_t)ceil((sc->b - sc->a) / sc->c);
      }
      tpu_view_t shape = {.dtype = dt, .ndim = 1, .sizes = {n}};
      for (int layout = 0; layout < 2; ++layout) {
        char what[64];
        snprintf(what, sizeof(what), "%s case %zu %s", sc->op, c, tpu_dtype_name(dt));
        run_compare(what, def, NULL, 0, attrs, 3, &shape, layout ? TT_GAPS : TT_CONTIG);
      }
    }
  }
}

TEST(shape_known_values) {
  const tpu_op_def_t *ar = tt_def("arange"), *ls = tt_def("linspace");
  if (!ar || !ls) return;
  int64_t s3[1] = {3}, s5[1] = {5};
  tt_t a = tt_make(TPU_DTYPE_F32, 1, s3, TT_CONTIG), l = tt_make(TPU_DTYPE_F64, 1, s5, TT_CONTIG);
  tpu_attr_t aa[3] = {tt_int(1), tt_float(2.0), tt_float(0.4)};
  tpu_node_t node = tt_node(NULL, 0, &a.view, 1, aa, 3);
  CHECK_OK(tt_run(ar->kernel, ar, &node));
  CHECK_NEAR(tt_get(&a.view, 0), 1.0, 0);
  CHECK_NEAR(tt_get(&a.view, 2), (double)(float)1.8, 0);
  tpu_attr_t la[3] = {tt_float(0.0), tt_float(1.0), tt_int(5)};
  node = tt_node(NULL, 0, &l.view, 1, la, 3);
  CHECK_OK(tt_run(ls->kernel, ls, &node));
  for (int k = 0; k < 5; ++k) CHECK_NEAR(tt_get(&l.view, k), 0.25 * k, 0);
  tt_free(&a), tt_free(&l);
}

typedef struct lay_case {
  const char* op;
  int32_t nd;
  int64_t sizes[4];
  int32_t nints;
  int64_t ints[3]; /* flip: dims; roll: shifts */
  int32_t ndims;
  int64_t dims[3]; /* roll: dims */
  int64_t diag;
} lay_case_t;

TEST(shape_layout_table) {
  static const lay_case_t cases[] = {
      {"flip", 2, {3, 4}, 1, {0}, 0, {0}, 0},
      {"flip", 3, {2, 3, 4}, 2, {-1, 0}, 0, {0}, 0},
      {"flip", 3, {2, 3, 4}, 3, {0, 1, 2}, 0, {0}, 0},
      {"flip", 1, {7}, 0, {0}, 0, {0}, 0},
      {"flip", 4, {2, 1, 5, 3}, 2, {1, 2}, 0, {0}, 0},
      {"roll", 2, {3, 4}, 1, {1}, 1, {0}, 0},
      {"roll", 2, {3, 4}, 2, {-1, 5}, 2, {1, 0}, 0},
      {"roll", 3, {2, 3, 4}, 3, {1, 2, -7}, 3, {0, 1, 2}, 0},
      {"roll", 3, {2, 3, 4}, 1, {5}, 0, {0}, 0},
      {"roll", 2, {4, 5}, 2, {1, 2}, 2, {1, 1}, 0},
      {"roll", 1, {9}, 1, {-4}, 1, {0}, 0},
      {"triu", 2, {4, 5}, 0, {0}, 0, {0}, 0},
      {"triu", 3, {2, 5, 4}, 0, {0}, 0, {0}, -2},
      {"triu", 3, {3, 3, 6}, 0, {0}, 0, {0}, 3},
      {"tril", 2, {4, 5}, 0, {0}, 0, {0}, 1},
      {"tril", 4, {2, 2, 3, 5}, 0, {0}, 0, {0}, -1},
      {"tril", 2, {6, 3}, 0, {0}, 0, {0}, 9},
      {"triu", 2, {3, 3}, 0, {0}, 0, {0}, -9},
  };
  static const tt_layout_t layouts[] = {TT_CONTIG, TT_TRANSPOSED, TT_PADDED, TT_GAPS};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    const lay_case_t* lc = &cases[c];
    const tpu_op_def_t* def = tt_def(lc->op);
    if (!def) return;
    tpu_attr_t attrs[2];
    int32_t nattrs = 1;
    if (lc->op[0] == 't') {
      attrs[0] = tt_int(lc->diag);
    } else {
      attrs[0] = tt_ints(lc->nints, lc->ints);
      if (lc->op[0] == 'r') attrs[1] = tt_ints(lc->ndims, lc->dims), nattrs = 2;
    }
    for (int t = 0; t < NDT; ++t) {
      for (int sl = 0; sl < 4; ++sl) {
        for (int ol = 0; ol < 3; ++ol) {
          tt_t self = tt_make(k_dtypes[t], lc->nd, lc->sizes, layouts[sl]);
          tt_fill(&self.view, -50, 50, 0);
          tpu_value_t in[1] = {tt_value(&self.view)};
          tpu_view_t shape = {0};
          tpu_node_t node = tt_node(in, 1, NULL, 0, attrs, nattrs);
          CHECK_OK(def->infer(def, &node, &shape));
          char what[64];
          snprintf(what, sizeof(what), "%s case %zu %s layouts %d/%d", lc->op, c,
                   tpu_dtype_name(k_dtypes[t]), sl, ol);
          run_compare(what, def, in, 1, attrs, nattrs, &shape, layouts[ol]);
          tt_free(&self);
        }
      }
    }
  }
}

TEST(shape_tri_inplace) {
  int64_t sizes[3] = {2, 4, 6};
  for (int up = 0; up < 2; ++up) {
    const tpu_op_def_t* def = tt_def(up ? "triu" : "tril");
    if (!def) return;
    for (int t = 0; t < NDT; ++t) {
      for (int64_t diag = -2; diag <= 2; ++diag) {
        tt_t self = tt_make(k_dtypes[t], 3, sizes, TT_PADDED);
        tt_t orig = tt_make(k_dtypes[t], 3, sizes, TT_CONTIG);
        tt_t want = tt_make(k_dtypes[t], 3, sizes, TT_CONTIG);
        tt_fill(&self.view, -9, 9, 0);
        for (int64_t k = 0; k < 48; ++k) tt_set(&orig.view, k, tt_get(&self.view, k));
        tpu_attr_t a = tt_int(diag);
        tpu_value_t in[1] = {tt_value(&self.view)};
        tpu_node_t node = tt_node(in, 1, &self.view, 1, &a, 1);
        CHECK_OK(def->check(def, &node));
        CHECK_OK(tt_run(def->kernel, def, &node));
        in[0] = tt_value(&orig.view);
        node.outputs = &want.view;
        CHECK_OK(tpu_shape_reference(def, &node));
        tt_compare("tri in-place", &self.view, &want.view, 0.0);
        tt_free(&self), tt_free(&orig), tt_free(&want);
      }
    }
  }
}

TEST(shape_fallbacks) {
  const tpu_op_def_t *ar = tt_def("arange"), *flip = tt_def("flip"), *roll = tt_def("roll"),
                     *triu = tt_def("triu");
  if (!ar || !flip || !roll || !triu) return;
  int64_t s3[1] = {3}, s34[2] = {3, 4};
  tt_t b = tt_make(TPU_DTYPE_BOOL, 1, s3, TT_CONTIG), f = tt_make(TPU_DTYPE_F32, 1, s3, 0);
  tpu_attr_t aa[3] = {tt_int(0), tt_int(3), tt_int(1)};
  tpu_node_t node = tt_node(NULL, 0, &b.view, 1, aa, 3);
  CHECK_CODE(ar->check(ar, &node), TPU_CODE_UNIMPLEMENTED); /* bool */
  node.outputs = &f.view;
  CHECK_OK(ar->check(ar, &node));
  aa[2] = tt_int(0);
  node = tt_node(NULL, 0, &f.view, 1, aa, 3);
  CHECK_CODE(ar->check(ar, &node), TPU_CODE_UNIMPLEMENTED); /* step 0 */
  aa[2] = tt_int(-1);
  node = tt_node(NULL, 0, &f.view, 1, aa, 3);
  CHECK_CODE(ar->check(ar, &node), TPU_CODE_UNIMPLEMENTED); /* sign */
  aa[2] = tt_int(2);
  node = tt_node(NULL, 0, &f.view, 1, aa, 3);
  CHECK_CODE(ar->check(ar, &node), TPU_CODE_UNIMPLEMENTED); /* size mismatch */
  /* The shape function needs the out= tensor's dtype (ops.h): without one,
   * or for a bool sequence, the bridge asks PyTorch's meta kernel. */
  node.op = tpu_op_lookup("arange");
  tpu_view_t want = {.dtype = TPU_DTYPE_INVALID};
  CHECK_CODE(tpu_op_infer(&node, &want), TPU_CODE_UNIMPLEMENTED);
  want.dtype = TPU_DTYPE_BOOL;
  CHECK_CODE(tpu_op_infer(&node, &want), TPU_CODE_UNIMPLEMENTED);
  want.dtype = TPU_DTYPE_I32;
  CHECK_OK(tpu_op_infer(&node, &want));
  CHECK(want.dtype == TPU_DTYPE_I32 && want.ndim == 1 && want.sizes[0] == 2 && want.strides[0] == 1);

  tt_t m = tt_make(TPU_DTYPE_F32, 2, s34, TT_CONTIG), o = tt_make(TPU_DTYPE_F32, 2, s34, 0);
  tpu_value_t in[1] = {tt_value(&m.view)};
  int64_t dup[2] = {0, -2}, bad[1] = {2};
  tpu_attr_t fa = tt_ints(2, dup);
  node = tt_node(in, 1, &o.view, 1, &fa, 1);
  CHECK_CODE(flip->check(flip, &node), TPU_CODE_UNIMPLEMENTED); /* duplicate dims */
  fa = tt_ints(1, bad);
  node = tt_node(in, 1, &o.view, 1, &fa, 1);
  CHECK_CODE(flip->check(flip, &node), TPU_CODE_UNIMPLEMENTED); /* dim out of range */
  fa = tt_ints(1, dup);
  node = tt_node(in, 1, &m.view, 1, &fa, 1);
  CHECK_CODE(flip->check(flip, &node), TPU_CODE_UNIMPLEMENTED); /* out is self */
  tpu_attr_t ra[2] = {tt_ints(2, dup), tt_ints(1, bad)};
  node = tt_node(in, 1, &o.view, 1, ra, 2);
  CHECK_CODE(roll->check(roll, &node), TPU_CODE_UNIMPLEMENTED); /* shifts vs dims */
  tt_t v = tt_make(TPU_DTYPE_F32, 1, s3, 0);
  tpu_value_t vin[1] = {tt_value(&v.view)};
  tpu_attr_t ta = tt_int(0);
  node = tt_node(vin, 1, &f.view, 1, &ta, 1);
  CHECK_CODE(triu->check(triu, &node), TPU_CODE_UNIMPLEMENTED); /* 1-D */
  tt_free(&b), tt_free(&f), tt_free(&m), tt_free(&o), tt_free(&v);
}

TEST(shape_eye_table) {
  const tpu_op_def_t* def = tt_def("eye");
  if (!def) return;
  static const int64_t cases[][3] = {{3, 3, 0}, {4, 7, 1}, {7, 4, 1}, {1, 1, 1}, {0, 5, 1},
                                     {5, 0, 1}, {300, 260, 1}, {6, 6, -1}};
  static const tt_layout_t layouts[] = {TT_CONTIG, TT_TRANSPOSED, TT_PADDED, TT_GAPS};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    for (int t = 0; t < NDT; ++t) {
      for (int l = 0; l < 4; ++l) {
        tpu_view_t shape = {.dtype = k_dtypes[t], .ndim = 2, .sizes = {cases[c][0], cases[c][1]}};
        /* cases[c][2]: 1 passes m, 0 passes n only (eye.out), -1 passes m as None */
        tpu_attr_t attrs[2] = {tt_int(cases[c][0]),
                               cases[c][2] > 0 ? tt_int(cases[c][1]) : tt_none()};
        char what[64];
        snprintf(what, sizeof(what), "eye case %zu %s layout %d", c, tpu_dtype_name(k_dtypes[t]),
                 l);
        run_compare(what, def, NULL, 0, attrs, cases[c][2] ? 2 : 1, &shape, layouts[l]);
      }
    }
  }
  /* known values, and the fallbacks: negative n, an output of the wrong shape */
  int64_t s23[2] = {2, 3};
  tt_t o = tt_make(TPU_DTYPE_F32, 2, s23, TT_TRANSPOSED);
  tt_fill_value(&o.view, 9);
  tpu_attr_t a[2] = {tt_int(2), tt_int(3)};
  tpu_node_t node = tt_node(NULL, 0, &o.view, 1, a, 2);
  CHECK_OK(tt_run(def->kernel, def, &node));
  for (int k = 0; k < 6; ++k) CHECK_NEAR(tt_get(&o.view, k), (k == 0 || k == 4) ? 1.0 : 0.0, 0);
  a[1] = tt_int(4);
  node = tt_node(NULL, 0, &o.view, 1, a, 2);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  a[0] = tt_int(-2), a[1] = tt_int(3);
  node = tt_node(NULL, 0, &o.view, 1, a, 2);
  CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&o);
}

/* logspace over every non-bool dtype (the kernel against the reference,
 * contiguous and strided), known values, and tril/triu_indices against a
 * plain double loop over the matrix. */
TEST(shape_logspace_tri_indices_table) {
  const tpu_op_def_t* ls = tt_def("logspace");
  if (!ls) return;
  static const struct {
    double a, b;
    int64_t steps;
    double base;
    bool ints;
  } cases[] = {{0, 3, 4, 10, true}, {-2, 2, 9, 2, true}, {1, 0, 1, 10, true},
               {0, 5, 0, 3, true},  {-1.5, 2.25, 1001, 2.5, false}, {0, 1, 40001, 10, false}};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c)
    for (int t = 1; t < NDT; ++t) {
      tpu_dtype_t dt = k_dtypes[t];
      if (!cases[c].ints && !tpu_dtype_is_floating(dt)) continue;
      if (dt == TPU_DTYPE_U8 && cases[c].a < 0) continue;
      tpu_attr_t attrs[4] = {cases[c].ints ? tt_int((int64_t)cases[c].a) : tt_float(cases[c].a),
                             cases[c].ints ? tt_int((int64_t)cases[c].b) : tt_float(cases[c].b),
                             tt_int(cases[c].steps), tt_float(cases[c].base)};
      tpu_view_t shape = {.dtype = dt, .ndim = 1, .sizes = {cases[c].steps}};
      for (int layout = 0; layout < 2; ++layout) {
        char what[64];
        snprintf(what, sizeof(what), "logspace case %zu %s", c, tpu_dtype_name(dt));
        run_compare(what, ls, NULL, 0, attrs, 4, &shape, layout ? TT_GAPS : TT_CONTIG);
      }
    }
  int64_t s4[1] = {4};
  tt_t l = tt_make(TPU_DTYPE_F64, 1, s4, TT_CONTIG);
  tpu_attr_t la[4] = {tt_int(0), tt_int(3), tt_int(4), tt_float(10.0)};
  tpu_node_t node = tt_node(NULL, 0, &l.view, 1, la, 4);
  CHECK_OK(tt_run(ls->kernel, ls, &node));
  for (int k = 0; k < 4; ++k) CHECK_NEAR(tt_get(&l.view, k), pow(10.0, k), 1e-12);
  tt_free(&l);

  const char* tri[2] = {"tril_indices", "triu_indices"};
  for (int u = 0; u < 2; ++u) {
    const tpu_op_def_t* def = tt_def(tri[u]);
    if (!def) return;
    for (int64_t r = 0; r <= 7; r += 1)
      for (int64_t cc = 0; cc <= 9; cc += 3)
        for (int64_t off = -8; off <= 10; off += 3) {
          tpu_attr_t attrs[3] = {tt_int(r), tt_int(cc), tt_int(off)};
          tpu_node_t n0 = tt_node(NULL, 0, NULL, 0, attrs, 3);
          tpu_view_t inferred;
          CHECK_OK(def->infer(def, &n0, &inferred));
          /* Pairs by the definition. */
          int64_t want = 0;
          for (int64_t i = 0; i < r; ++i)
            for (int64_t j = 0; j < cc; ++j) want += u ? j - i >= off : j - i <= off;
          CHECK(inferred.sizes[1] == want && inferred.dtype == TPU_DTYPE_I64);
          for (int layout = 0; layout < 2; ++layout) {
            tpu_view_t shape = inferred;
            shape.dtype = layout ? TPU_DTYPE_I32 : TPU_DTYPE_I64;
            char what[64];
            snprintf(what, sizeof(what), "%s %lld %lld %lld", tri[u], (long long)r, (long long)cc,
                     (long long)off);
            run_compare(what, def, NULL, 0, attrs, 3, &shape, layout ? TT_TRANSPOSED : TT_CONTIG);
          }
        }
    /* float32 / negative sizes: the CPU's errors. */
    int64_t s2[2] = {2, 3};
    tt_t f = tt_make(TPU_DTYPE_F32, 2, s2, TT_CONTIG);
    tpu_attr_t ok[3] = {tt_int(2), tt_int(2), tt_int(0)}, neg[3] = {tt_int(-1), tt_int(2), tt_int(0)};
    tpu_node_t nf = tt_node(NULL, 0, &f.view, 1, ok, 3);
    CHECK_CODE(def->check(def, &nf), TPU_CODE_UNIMPLEMENTED);
    tpu_node_t nn = tt_node(NULL, 0, NULL, 0, neg, 3);
    tpu_view_t iv;
    CHECK_CODE(def->infer(def, &nn, &iv), TPU_CODE_UNIMPLEMENTED);
    tt_free(&f);
  }

  /* arange over an integer dtype with Python floats: the double range's
   * size, truncated start and step (0.5 -> 0 repeats start). */
  const tpu_op_def_t* ar = tt_def("arange");
  int64_t s128[1] = {128};
  tt_t a = tt_make(TPU_DTYPE_I64, 1, s128, TT_CONTIG);
  tpu_attr_t aa[3] = {tt_int(3), tt_int(67), tt_float(0.5)};
  tpu_node_t na = tt_node(NULL, 0, &a.view, 1, aa, 3);
  CHECK_OK(ar->check(ar, &na));
  CHECK_OK(tt_run(ar->kernel, ar, &na));
  CHECK(tt_get(&a.view, 0) == 3 && tt_get(&a.view, 127) == 3);
  tt_free(&a);
}

/* unfold_backward against the scatter-add reference: overlapping windows
 * (step < size), gaps (step > size), a leftover tail, size 0 and 1, every
 * dim position, over dtypes (bool is UNIMPLEMENTED) and grad/out layouts. */
TEST(shape_unfold_backward_table) {
  static const struct {
    int32_t nd;
    int64_t sizes[3];
    int64_t dim, size, step;
  } cases[] = {
      {1, {10}, 0, 3, 1}, {1, {10}, 0, 3, 2},  {1, {11}, 0, 2, 4},  {2, {3, 9}, 1, 4, 3},
      {2, {9, 3}, 0, 4, 3}, {3, {2, 7, 3}, 1, 7, 1}, {3, {2, 7, 3}, -1, 1, 1}, {2, {5, 6}, 1, 0, 2},
      {3, {3, 2, 8}, 2, 5, 2},
  };
  static const tt_layout_t layouts[] = {TT_CONTIG, TT_TRANSPOSED, TT_PADDED, TT_GAPS};
  const tpu_op_def_t* def = tt_def("unfold_backward");
  if (!def) return;
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    int32_t nd = cases[c].nd, dim = (int32_t)(cases[c].dim < 0 ? cases[c].dim + nd : cases[c].dim);
    int64_t gsizes[4];
    for (int32_t d = 0; d < nd; ++d) gsizes[d] = cases[c].sizes[d];
    gsizes[dim] = (cases[c].sizes[dim] - cases[c].size) / cases[c].step + 1;
    gsizes[nd] = cases[c].size;
    tpu_attr_t attrs[4] = {tt_ints(nd, cases[c].sizes), tt_int(cases[c].dim), tt_int(cases[c].size),
                           tt_int(cases[c].step)};
    for (int t = 1; t < NDT; ++t)
      for (int gl = 0; gl < 4; ++gl)
        for (int ol = 0; ol < 3; ++ol) {
          tt_t grad = tt_make(k_dtypes[t], nd + 1, gsizes, layouts[gl]);
          tt_fill(&grad.view, -50, 50, 0);
          tpu_value_t in[1] = {tt_value(&grad.view)};
          tpu_view_t shape = {0};
          tpu_node_t node = tt_node(in, 1, NULL, 0, attrs, 4);
          CHECK_OK(def->infer(def, &node, &shape));
          char what[80];
          snprintf(what, sizeof(what), "unfold_backward case %zu %s layouts %d/%d", c,
                   tpu_dtype_name(k_dtypes[t]), gl, ol);
          run_compare(what, def, in, 1, attrs, 4, &shape, layouts[ol]);
          tt_free(&grad);
        }
  }
  /* size larger than the dim, a zero step and a grad of the wrong shape fall back */
  int64_t s1[1] = {4}, g1[2] = {2, 3};
  tt_t grad = tt_make(TPU_DTYPE_F32, 2, g1, TT_CONTIG);
  tt_t out = tt_make(TPU_DTYPE_F32, 1, s1, TT_CONTIG);
  tpu_value_t in[1] = {tt_value(&grad.view)};
  tpu_attr_t bad[3][4] = {{tt_ints(1, s1), tt_int(0), tt_int(5), tt_int(1)},
                          {tt_ints(1, s1), tt_int(0), tt_int(3), tt_int(0)},
                          {tt_ints(1, s1), tt_int(0), tt_int(2), tt_int(1)}};
  for (int b = 0; b < 3; ++b) {
    tpu_node_t node = tt_node(in, 1, &out.view, 1, bad[b], 4);
    CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  }
  tt_free(&grad), tt_free(&out);
}
