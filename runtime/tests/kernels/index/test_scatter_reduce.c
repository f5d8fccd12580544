/* test_scatter_reduce.c — the scatter_reduce family (scatter_reduce.c)
 * against its reference: scatter_reduce and index_reduce for every reduction,
 * dtype and include_self over strided operands (small and split over
 * threads), the legacy scatter forms, int32 indices, and the errors
 * (out-of-range index, unsupported reduction). */
#include "kernel_test_util.h"

#define F32 TPU_DTYPE_F32
#define I64 TPU_DTYPE_I64

tpu_status_t scatter_reduce_reference(const tpu_op_def_t* def, const tpu_node_t* node);

static double run_sr(const char* op, tpu_value_t* in, int32_t nin, const tpu_attr_t* attrs,
                     int32_t nattrs, int layout) {
  const tpu_op_def_t* def = tt_def(op);
  if (!def) return INFINITY;
  tpu_node_t node = {.op = tpu_op_lookup(op), .num_inputs = nin, .num_outputs = 1,
                     .num_attrs = nattrs, .inputs = in};
  if (nattrs) memcpy(node.attrs, attrs, sizeof(tpu_attr_t) * (size_t)nattrs);
  tpu_view_t shape;
  CHECK_OK(def->check(def, &node));
  CHECK_OK(def->infer(def, &node, &shape));
  tt_t out = tt_make(shape.dtype, shape.ndim, shape.sizes, layout);
  tt_t want = tt_make(shape.dtype, shape.ndim, shape.sizes, TT_CONTIG);
  tpu_exec_ctx_t ctx = {0};
  node.outputs = &out.view;
  double worst = INFINITY;
  tpu_status_t s = def->kernel(def, &node, &ctx);
  if (s == TPU_OK) {
    node.outputs = &want.view;
    s = scatter_reduce_reference(def, &node);
  }
  if (s == TPU_OK) worst = tt_max_rel_diff(&out.view, &want.view);
  else tpu_test_fail(__FILE__, __LINE__, "%s: %s", op, tpu_status_message(s));
  tpu_status_free(s);
  tt_free(&out), tt_free(&want);
  return worst;
}

static tpu_attr_t tt_str(const char* s) {
  tpu_attr_t a = {.kind = TPU_ATTR_STR};
  strncpy(a.u.str, s, TPU_MAX_STR - 1);
  return a;
}

TEST(scatter_reduce_matches_reference) {
  const char* reds[5] = {"sum", "prod", "mean", "amax", "amin"};
  tpu_dtype_t dts[5] = {F32, TPU_DTYPE_F64, TPU_DTYPE_BF16, I64, TPU_DTYPE_I16};
  int64_t s_self[2] = {6, 5}, s_idx[2] = {9, 4}, s_src[2] = {10, 5}, s_j[1] = {7}, s_so[2] = {6, 7};
  int64_t b_self[2] = {50, 2000}, b_idx[2] = {300, 2000};
  for (int r = 0; r < 5; ++r)
    for (int k = 0; k < 5; ++k)
      for (int inc = 0; inc < 2; ++inc) {
        tpu_dtype_t dt = dts[k];
        double tol = dt == TPU_DTYPE_BF16 ? 2e-2 : tpu_dtype_is_floating(dt) ? 1e-5 : 0;
        tt_t self = tt_make(dt, 2, s_self, k % 2 ? TT_TRANSPOSED : TT_CONTIG);
        tt_t idx = tt_make(I64, 2, s_idx, TT_PADDED), src = tt_make(dt, 2, s_src, TT_CONTIG);
        tt_fill_ints(&self.view, 1 + k, -4, 4), tt_fill_ints(&idx.view, 2 + r, 0, 5);
        tt_fill_ints(&src.view, 3 + inc, -3, 3);
        tpu_value_t in[3] = {tt_value(&self.view), tt_value(&idx.view), tt_value(&src.view)};
        tpu_attr_t at[3] = {tt_int(0), tt_str(reds[r]), tt_bool(inc)};
        double w = run_sr("scatter_reduce", in, 3, at, 3, TT_PADDED);
        /* along dim 1, big enough to split over threads */
        tt_t bself = tt_make(dt, 2, b_self, TT_CONTIG), bidx = tt_make(I64, 2, b_idx, TT_CONTIG);
        tt_t bsrc = tt_make(dt, 2, b_idx, TT_TRANSPOSED);
        tt_fill_ints(&bself.view, 5, -2, 2), tt_fill_ints(&bidx.view, 6, 0, 49);
        tt_fill_ints(&bsrc.view, 7, -2, 2);
        if (r == 1) tt_fill_ints(&bsrc.view, 7, 1, 1);
        tpu_value_t bin[3] = {tt_value(&bself.view), tt_value(&bidx.view), tt_value(&bsrc.view)};
        w = fmax(w, run_sr("scatter_reduce", bin, 3, at, 3, TT_CONTIG));
        if (r != 0) { /* index_reduce along dim 1, a negative dim */
          tt_t j = tt_make(I64, 1, s_j, TT_GAPS), so = tt_make(dt, 2, s_so, TT_PADDED);
          tt_fill_ints(&j.view, 8, 0, 4), tt_fill_ints(&so.view, 9, -3, 3);
          tpu_value_t jin[3] = {tt_value(&self.view), tt_value(&j.view), tt_value(&so.view)};
          tpu_attr_t jat[3] = {tt_int(-1), tt_str(reds[r]), tt_bool(inc)};
          w = fmax(w, run_sr("index_reduce", jin, 3, jat, 3, TT_TRANSPOSED));
          tt_free(&j), tt_free(&so);
        }
        if (!(w <= tol))
          tpu_test_fail(__FILE__, __LINE__, "%s %s include_self=%d: diff %g", reds[r],
                        tpu_dtype_name(dt), inc, w);
        tt_free(&self), tt_free(&idx), tt_free(&src), tt_free(&bself), tt_free(&bidx),
            tt_free(&bsrc);
      }
  /* the legacy forms and the errors */
  tt_t self = tt_make(F32, 2, s_self, TT_CONTIG), idx = tt_make(I64, 2, s_idx, TT_CONTIG);
  tt_t src = tt_make(F32, 2, s_src, TT_CONTIG);
  tt_fill_ints(&self.view, 1, -4, 4), tt_fill_ints(&idx.view, 2, 0, 5), tt_fill_ints(&src.view, 3, -3, 3);
  tpu_value_t in[3] = {tt_value(&self.view), tt_value(&idx.view), tt_value(&src.view)};
  tpu_attr_t at[2] = {tt_int(0), tt_str("multiply")};
  CHECK(run_sr("scatter_reduce_legacy", in, 3, at, 2, TT_CONTIG) <= 1e-6);
  { /* int32 indices (PyTorch accepts them for scatter too) */
    tt_t idx32 = tt_make(TPU_DTYPE_I32, 2, s_idx, TT_CONTIG);
    tt_fill_ints(&idx32.view, 2, 0, 5);
    in[1] = tt_value(&idx32.view);
    CHECK(run_sr("scatter_reduce_legacy", in, 3, at, 2, TT_TRANSPOSED) <= 1e-6);
    in[1] = tt_value(&idx.view);
    tt_free(&idx32);
  }
  in[2].kind = TPU_VALUE_SCALAR, in[2].u.scalar.dtype = TPU_DTYPE_F64, in[2].u.scalar.v.f = 1.5;
  at[1] = tt_str("add");
  CHECK(run_sr("scatter_value_reduce", in, 3, at, 2, TT_PADDED) <= 1e-6);
  tt_set(&idx.view, 5, 6); /* out of range: RuntimeError, nothing written */
  in[2] = tt_value(&src.view);
  tt_t out = tt_make(F32, 2, s_self, TT_CONTIG);
  const tpu_op_def_t* def = tt_def("scatter_reduce");
  tpu_node_t node = {.op = tpu_op_lookup("scatter_reduce"), .num_inputs = 3, .num_outputs = 1,
                     .num_attrs = 3, .inputs = in, .outputs = &out.view};
  node.attrs[0] = tt_int(0), node.attrs[1] = tt_str("sum"), node.attrs[2] = tt_bool(true);
  tpu_exec_ctx_t ctx = {0};
  if (def) {
    tpu_status_t s = def->kernel(def, &node, &ctx);
    CHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT &&
          strstr(tpu_status_message(s), "index 6 is out of bounds for dimension 0 with size 6"));
    tpu_status_free(s);
    node.attrs[1] = tt_str("median");
    CHECK_CODE(def->check(def, &node), TPU_CODE_UNIMPLEMENTED);
  }
  tt_free(&self), tt_free(&idx), tt_free(&src), tt_free(&out);
}
