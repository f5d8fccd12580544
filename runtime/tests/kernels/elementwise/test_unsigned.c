/* test_unsigned.c — the wide unsigned dtypes (uint16, uint32, uint64) as the
 * op registry routes them: copy and fill take them as they are, bit-level
 * rows (eq, bitwise_and, mul, ...) and element-moving rows (index_select,
 * index, flip) run them as their signed twins, everything else refuses them
 * (UNIMPLEMENTED: the CPU fallback), and the twin never leaks into a
 * result's dtype. Values near the top of each range are the ones a signed
 * reading would get wrong. */
#include <string.h>

#include "kernel_test_util.h"
#include "test.h"

static const tpu_dtype_t g_wide[] = {TPU_DTYPE_U16, TPU_DTYPE_U32, TPU_DTYPE_U64};

/* Element k of a contiguous wide unsigned buffer, and its largest value. */
static uint64_t uget(const void* p, tpu_dtype_t d, int64_t k) {
  switch (d) {
    case TPU_DTYPE_U16: return ((const uint16_t*)p)[k];
    case TPU_DTYPE_U32: return ((const uint32_t*)p)[k];
    default: return ((const uint64_t*)p)[k];
  }
}
static void uset(void* p, tpu_dtype_t d, int64_t k, uint64_t v) {
  switch (d) {
    case TPU_DTYPE_U16: ((uint16_t*)p)[k] = (uint16_t)v; break;
    case TPU_DTYPE_U32: ((uint32_t*)p)[k] = (uint32_t)v; break;
    default: ((uint64_t*)p)[k] = v; break;
  }
}
static uint64_t umax(tpu_dtype_t d) {
  return d == TPU_DTYPE_U16 ? 0xffffu : d == TPU_DTYPE_U32 ? 0xffffffffu : ~0ull;
}

static tpu_view_t view1(tpu_dtype_t d, int64_t n, void* p) {
  tpu_view_t v;
  memset(&v, 0, sizeof(v));
  v.dtype = d;
  v.ndim = 1;
  v.sizes[0] = n;
  v.strides[0] = 1;
  v.addr = (uint64_t)(uintptr_t)p;
  return v;
}

enum { N = 6 };

/* {1, 2, top, top - 1, top/2 + 1, 0}: the top half reads negative as signed. */
static void fill_values(void* p, tpu_dtype_t d) {
  uint64_t top = umax(d);
  uint64_t v[N] = {1, 2, top, top - 1, top / 2 + 1, 0};
  for (int k = 0; k < N; ++k) uset(p, d, k, v[k]);
}

/* Infers, checks and runs a node with one output into `out`; its status. */
static tpu_status_t run_node(const char* op, tpu_value_t* in, int32_t nin, const tpu_attr_t* attrs,
                             int32_t nattrs, tpu_view_t* out, void* out_mem) {
  tpu_node_t node = tt_node(in, nin, NULL, 0, attrs, nattrs);
  node.op = tpu_op_lookup(op);
  node.num_outputs = 1;
  tpu_view_t shape;
  tpu_status_t s = tpu_op_infer(&node, &shape);
  if (s != TPU_OK) return s;
  *out = shape;
  out->addr = (uint64_t)(uintptr_t)out_mem;
  node.outputs = out;
  s = tpu_op_check(&node);
  if (s != TPU_OK) return s;
  tpu_exec_ctx_t ctx = {0};
  return tpu_node_execute(&node, &ctx);
}

TEST(unsigned_bit_rows_run_as_signed_twins) {
  for (size_t t = 0; t < sizeof(g_wide) / sizeof(g_wide[0]); ++t) {
    tpu_dtype_t d = g_wide[t];
    uint64_t a[N], b[N], got[N];
    fill_values(a, d);
    for (int k = 0; k < N; ++k) uset(b, d, k, uget(a, d, N - 1 - k) ^ 0x5u);
    tpu_view_t av = view1(d, N, a), bv = view1(d, N, b), out;
    tpu_value_t in[2] = {tt_value(&av), tt_value(&bv)};
    static const char* const ops[] = {"bitwise_and", "bitwise_or", "bitwise_xor", "mul"};
    for (int o = 0; o < 4; ++o) {
      CHECK_OK(run_node(ops[o], in, 2, NULL, 0, &out, got));
      CHECK(out.dtype == d);
      for (int k = 0; k < N; ++k) {
        uint64_t x = uget(a, d, k), y = uget(b, d, k);
        uint64_t want = o == 0 ? x & y : o == 1 ? x | y : o == 2 ? x ^ y : x * y;
        CHECK(uget(got, d, k) == (want & umax(d)));
      }
    }
    uint8_t eq[N];
    tpu_value_t same[2] = {tt_value(&av), tt_value(&av)};
    CHECK_OK(run_node("eq", same, 2, NULL, 0, &out, eq));
    CHECK(out.dtype == TPU_DTYPE_BOOL);
    for (int k = 0; k < N; ++k) CHECK(eq[k] == 1);
    /* a Python number above the signed twin's range compares as unsigned */
    tpu_value_t num[2] = {tt_value(&av), {.kind = TPU_VALUE_SCALAR}};
    num[1].u.scalar.dtype = TPU_DTYPE_I64;
    num[1].u.scalar.v.i = (int64_t)umax(d);
    CHECK_OK(run_node("eq", num, 2, NULL, 0, &out, eq));
    for (int k = 0; k < N; ++k) CHECK(eq[k] == (k == 2));
  }
}

TEST(unsigned_copy_converts_as_unsigned) {
  for (size_t t = 0; t < sizeof(g_wide) / sizeof(g_wide[0]); ++t) {
    tpu_dtype_t d = g_wide[t];
    uint64_t a[N];
    double f[N];
    fill_values(a, d);
    tpu_view_t av = view1(d, N, a), out;
    tpu_value_t in[1] = {tt_value(&av)};
    tpu_node_t node = tt_node(in, 1, &out, 1, NULL, 0);
    node.op = tpu_op_lookup("copy");
    out = view1(TPU_DTYPE_F64, N, f);
    CHECK_OK(tpu_op_check(&node));
    tpu_exec_ctx_t ctx = {0};
    CHECK_OK(tpu_node_execute(&node, &ctx));
    for (int k = 0; k < N; ++k) CHECK(f[k] == (double)uget(a, d, k));
  }
}

TEST(unsigned_element_moves_keep_bits) {
  for (size_t t = 0; t < sizeof(g_wide) / sizeof(g_wide[0]); ++t) {
    tpu_dtype_t d = g_wide[t];
    uint64_t a[N], got[N];
    fill_values(a, d);
    int64_t idx[3] = {2, 4, 0};
    tpu_view_t av = view1(d, N, a), iv = view1(TPU_DTYPE_I64, 3, idx), out;
    tpu_value_t in[2] = {tt_value(&av), tt_value(&iv)};
    tpu_attr_t dim = tt_int(0);
    CHECK_OK(run_node("index_select", in, 2, &dim, 1, &out, got));
    CHECK(out.dtype == d);
    for (int k = 0; k < 3; ++k) CHECK(uget(got, d, k) == uget(a, d, idx[k]));
    int64_t dims[1] = {0};
    tpu_attr_t flip_dims = tt_ints(1, dims);
    CHECK_OK(run_node("flip", in, 1, &flip_dims, 1, &out, got));
    CHECK(out.dtype == d);
    for (int k = 0; k < N; ++k) CHECK(uget(got, d, k) == uget(a, d, N - 1 - k));
  }
}

TEST(unsigned_refused_where_signedness_matters) {
  for (size_t t = 0; t < sizeof(g_wide) / sizeof(g_wide[0]); ++t) {
    tpu_dtype_t d = g_wide[t];
    uint64_t a[N], got[N];
    fill_values(a, d);
    tpu_view_t av = view1(d, N, a), out;
    tpu_value_t in[2] = {tt_value(&av), tt_value(&av)};
    /* arithmetic and ordering: PyTorch CPU has none for these dtypes either */
    static const char* const ops[] = {"lt", "maximum", "ge", "remainder"};
    for (int o = 0; o < 4; ++o) {
      tpu_status_t s = run_node(ops[o], in, 2, NULL, 0, &out, got);
      if (tpu_status_code(s) != TPU_CODE_UNIMPLEMENTED)
        tpu_test_fail(__FILE__, __LINE__, "%s on %s: %s", ops[o], tpu_dtype_name(d),
                      s ? tpu_status_message(s) : "ok");
      tpu_status_free(s);
    }
    /* a floating number, or another integer dtype, is not a bit-level case */
    tpu_value_t num[2] = {tt_value(&av), {.kind = TPU_VALUE_SCALAR}};
    num[1].u.scalar.dtype = TPU_DTYPE_F64;
    num[1].u.scalar.v.f = 2.5;
    CHECK(tt_code(run_node("eq", num, 2, NULL, 0, &out, got)) == TPU_CODE_UNIMPLEMENTED);
    int32_t other[N] = {0};
    tpu_view_t ov = view1(TPU_DTYPE_I32, N, other);
    tpu_value_t mixed[2] = {tt_value(&av), tt_value(&ov)};
    CHECK(tt_code(run_node("bitwise_and", mixed, 2, NULL, 0, &out, got)) ==
          TPU_CODE_UNIMPLEMENTED);
  }
}

TEST(unsigned_promotion_follows_pytorch) {
  CHECK(tpu_dtype_promote(TPU_DTYPE_U32, TPU_DTYPE_U32) == TPU_DTYPE_U32);
  CHECK(tpu_dtype_promote(TPU_DTYPE_U16, TPU_DTYPE_F32) == TPU_DTYPE_F32);
  CHECK(tpu_dtype_promote(TPU_DTYPE_C64, TPU_DTYPE_U64) == TPU_DTYPE_C64);
  CHECK(tpu_dtype_promote(TPU_DTYPE_U32, TPU_DTYPE_I64) == TPU_DTYPE_INVALID);
  CHECK(tpu_dtype_promote(TPU_DTYPE_U16, TPU_DTYPE_U32) == TPU_DTYPE_INVALID);
  CHECK(tpu_dtype_promote(TPU_DTYPE_BOOL, TPU_DTYPE_U64) == TPU_DTYPE_INVALID);
  CHECK(tpu_dtype_signed_twin(TPU_DTYPE_U32) == TPU_DTYPE_I32);
  CHECK(tpu_dtype_signed_twin(TPU_DTYPE_U8) == TPU_DTYPE_INVALID);
  CHECK(!tpu_dtype_is_integral(TPU_DTYPE_U64) && tpu_dtype_is_storage_only(TPU_DTYPE_U16));
}
