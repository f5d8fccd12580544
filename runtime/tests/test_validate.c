/* test_validate.c — the public C API refuses malformed nodes with a status
 * (tpu_node_validate, tpu_op_check, tpu_op_infer, submission): one test per
 * class of bad descriptor the fuzz target found (runtime/fuzz/). */
#include <math.h>
#include <string.h>

#include "kernel_test_util.h"
#include "test.h"
#include "tpu/ops.h"

static tpu_stream_t* default_stream(void) {
  tpu_chip_t* chip = NULL;
  tpu_stream_t* stream = NULL;
  CHECK_OK(tpu_runtime_init());
  CHECK_OK(tpu_chip_get(0, &chip));
  if (chip) CHECK_OK(tpu_stream_get(chip, 0, &stream));
  return stream;
}

/* A node of op `name` on the given operands, outputs from its shape function. */
static tpu_node_t node_of(const char* name, tpu_value_t* in, int32_t n_in, tpu_view_t* out,
                          const tpu_attr_t* attrs) {
  tpu_op_id_t op = tpu_op_lookup(name);
  tpu_node_t node = tt_node(in, n_in, out, tpu_op_num_outputs(op), attrs, tpu_op_num_attrs(op));
  node.op = op;
  return node;
}

/* check, infer and submission all refuse the node with `code`. */
static void expect_refused(tpu_node_t* node, tpu_status_code_t code) {
  tpu_view_t inferred[8];
  memset(inferred, 0, sizeof(inferred));
  CHECK_CODE(tpu_op_check(node), code);
  CHECK_CODE(tpu_op_infer(node, inferred), code);
  tpu_stream_t* stream = default_stream();
  if (stream) CHECK_CODE(tpu_stream_submit_node(stream, node), code);
}

TEST(validate_refuses_an_absent_required_input) {
  int64_t sz[1] = {4};
  tt_t t = tt_make(TPU_DTYPE_F32, 1, sz, TT_CONTIG), o = tt_make(TPU_DTYPE_F32, 1, sz, TT_CONTIG);
  tpu_value_t in[3] = {tt_value(NULL), tt_value(&t.view), tt_value(&t.view)};
  tpu_attr_t attrs[1] = {tt_none()};
  tpu_view_t outs[2] = {o.view, o.view};
  tpu_node_t add = node_of("add", in, 2, outs, attrs);
  expect_refused(&add, TPU_CODE_INVALID_ARGUMENT);
  in[1] = tt_value(NULL); /* _prelu_kernel_backward(None, None, t) */
  tpu_node_t prelu = node_of("_prelu_kernel_backward", in, 3, outs, attrs);
  expect_refused(&prelu, TPU_CODE_INVALID_ARGUMENT);
  /* An optional one ("weight?") may be absent. */
  CHECK(tpu_spec_flags(tpu_op_def(tpu_op_lookup("layer_norm"))->inputs, 1) & TPU_SPEC_OPTIONAL);
  CHECK(!(tpu_spec_flags(tpu_op_def(tpu_op_lookup("layer_norm"))->inputs, 0) &
          TPU_SPEC_OPTIONAL));
  tt_free(&t), tt_free(&o);
}

TEST(validate_refuses_a_check_before_the_outputs_are_set) {
  tpu_attr_t attrs[3] = {tt_int(0), tt_int(10), tt_int(1)};
  tpu_node_t arange = node_of("arange", NULL, 0, NULL, attrs);
  CHECK_CODE(tpu_op_check(&arange), TPU_CODE_INVALID_ARGUMENT);
}

TEST(validate_refuses_dtypes_outside_the_enum) {
  static const int bad[] = {-7, -1, TPU_DTYPE_COUNT, 99};
  int64_t sz[1] = {4};
  tt_t t = tt_make(TPU_DTYPE_F32, 1, sz, TT_CONTIG);
  tpu_attr_t attrs[2] = {tt_int(1), tt_int(2)};
  for (int k = 0; k < 4; ++k) {
    tpu_value_t in[1] = {tt_value(&t.view)};
    in[0].u.view.dtype = (tpu_dtype_t)bad[k];
    tpu_view_t outs[1] = {t.view};
    tpu_node_t view_dtype = node_of("random", in, 1, outs, attrs);
    expect_refused(&view_dtype, TPU_CODE_INVALID_ARGUMENT);
    in[0] = tt_value(&t.view);
    outs[0].dtype = (tpu_dtype_t)bad[k];
    tpu_node_t out_dtype = node_of("random", in, 1, outs, attrs);
    CHECK_CODE(tpu_op_check(&out_dtype), TPU_CODE_INVALID_ARGUMENT);
    tpu_value_t s = {.kind = TPU_VALUE_SCALAR};
    s.u.scalar.dtype = (tpu_dtype_t)bad[k];
    tpu_value_t ins[2] = {tt_value(&t.view), s};
    tpu_attr_t alpha[1] = {tt_none()};
    tpu_view_t o[1] = {t.view};
    tpu_node_t scalar_dtype = node_of("add", ins, 2, o, alpha);
    expect_refused(&scalar_dtype, TPU_CODE_INVALID_ARGUMENT);
    tpu_attr_t cum[2] = {tt_int(0), tt_dtype((tpu_dtype_t)bad[k])};
    tpu_node_t attr_dtype = node_of("cumsum", ins, 1, o, cum);
    expect_refused(&attr_dtype, TPU_CODE_INVALID_ARGUMENT);
  }
  tt_free(&t);
}

/* A complex number (scalar or TPU_ATTR_COMPLEX) reaches only rows flagged
 * TPU_OP_COMPLEX_NUMBERS, and among them only kernels that read it: the
 * others refuse it (UNIMPLEMENTED: the CPU fallback), never read its real
 * part. A complex attr of other than 2 parts is malformed. */
TEST(validate_refuses_a_complex_number_where_unread) {
  int64_t sz[1] = {2};
  tt_t t = tt_make(TPU_DTYPE_F32, 1, sz, TT_CONTIG);
  tpu_value_t s = {.kind = TPU_VALUE_SCALAR};
  s.u.scalar.dtype = TPU_DTYPE_C128;
  s.u.scalar.v.c[0] = 1.0;
  s.u.scalar.v.c[1] = 2.0;
  s.u.scalar.is_tensor = true;
  tpu_value_t in[1] = {s};
  tpu_view_t outs[1] = {t.view};
  outs[0].dtype = TPU_DTYPE_BOOL;
  tpu_node_t isnan_node = node_of("isnan", in, 1, outs, NULL); /* no complex kernel */
  expect_refused(&isnan_node, TPU_CODE_UNIMPLEMENTED);
  tpu_value_t ab[2] = {tt_value(&t.view), tt_value(&t.view)};
  tpu_view_t sum[1] = {t.view};
  tpu_attr_t alpha = {.kind = TPU_ATTR_COMPLEX, .count = 3};
  tpu_node_t add = node_of("add", ab, 2, sum, &alpha);
  expect_refused(&add, TPU_CODE_INVALID_ARGUMENT);
  tt_free(&t);
}

TEST(attr_int_saturates_floats_outside_int64) {
  tpu_attr_t a = tt_float(NAN);
  CHECK(tpu_attr_int(&a, 7) == 0);
  a = tt_float(INFINITY);
  CHECK(tpu_attr_int(&a, 7) == INT64_MAX);
  a = tt_float(-1e300);
  CHECK(tpu_attr_int(&a, 7) == INT64_MIN);
  a = tt_float(-2.75);
  CHECK(tpu_attr_int(&a, 7) == -2);
  /* eye(n=inf): refused with a status, not an undefined conversion. */
  int64_t sz[2] = {2, 2};
  tt_t o = tt_make(TPU_DTYPE_F32, 2, sz, TT_CONTIG);
  tpu_attr_t attrs[2] = {tt_float(INFINITY), tt_float(NAN)};
  tpu_view_t outs[1] = {o.view};
  tpu_node_t eye = node_of("eye", NULL, 0, outs, attrs);
  tpu_status_t s = tpu_op_check(&eye);
  CHECK(s != TPU_OK);
  tpu_status_free(s);
  tt_free(&o);
}

TEST(validate_refuses_sizes_whose_product_overflows) {
  int64_t sz[1] = {4};
  tt_t t = tt_make(TPU_DTYPE_F32, 1, sz, TT_CONTIG);
  tpu_value_t in[2] = {tt_value(&t.view), tt_value(&t.view)};
  in[0].u.view.ndim = 2; /* 2^62 x 3, broadcast over one element */
  in[0].u.view.sizes[0] = 1LL << 62, in[0].u.view.sizes[1] = 3;
  in[0].u.view.strides[0] = in[0].u.view.strides[1] = 0;
  tpu_attr_t alpha[1] = {tt_none()};
  tpu_view_t outs[1];
  memset(outs, 0x5a, sizeof(outs)); /* infer must leave a refused node's outputs */
  tpu_view_t before = outs[0];
  tpu_node_t add = node_of("add", in, 2, NULL, alpha);
  CHECK_CODE(tpu_op_infer(&add, outs), TPU_CODE_INVALID_ARGUMENT);
  CHECK(memcmp(&before, &outs[0], sizeof(before)) == 0);
  /* An empty view too: kernels do their offset arithmetic on its sizes. */
  in[0].u.view.sizes[1] = 0, in[0].u.view.strides[0] = 3;
  CHECK_CODE(tpu_op_infer(&add, outs), TPU_CODE_INVALID_ARGUMENT);
  tt_free(&t);
}

/* Every linalg row, submitted (without its check) on operands of rank 0 and
 * 1 with one-element outputs: refused or run within bounds, never a read of
 * sizes[ndim - 2]. ASan and UBSan, in the test command, see the reads. */
TEST(linalg_rows_refuse_operands_of_too_low_rank) {
  tpu_stream_t* stream = default_stream();
  if (!stream) return;
  int64_t one[1] = {1};
  tt_t scalar = tt_make(TPU_DTYPE_F32, 0, one, TT_CONTIG);
  tt_t vec = tt_make(TPU_DTYPE_F32, 1, one, TT_CONTIG);
  int refused = 0, ops = 0;
  for (tpu_op_id_t op = 0; op < tpu_op_count(); ++op) {
    const char* family = tpu_op_family_of(op);
    if (strncmp(family, "linalg", 6) != 0) continue;
    const tpu_op_def_t* def = tpu_op_def(op);
    int32_t n_in = tpu_spec_count(def->inputs), n_out = tpu_op_num_outputs(op);
    if (n_in > 8 || n_out > 8) continue;
    for (int rank = 0; rank < 2; ++rank) {
      tpu_value_t in[8];
      tpu_view_t outs[8];
      tt_t* t = rank ? &vec : &scalar;
      for (int32_t i = 0; i < n_in; ++i) in[i] = tt_value(&t->view);
      for (int32_t k = 0; k < n_out; ++k) outs[k] = t->view;
      tpu_attr_t attrs[TPU_MAX_ATTRS];
      for (int32_t k = 0; k < TPU_MAX_ATTRS; ++k) attrs[k] = tt_none();
      tpu_node_t node = node_of(def->name, in, n_in, outs, attrs);
      tpu_status_t s = tpu_stream_submit_node(stream, &node);
      if (s == TPU_OK) s = tpu_stream_synchronize(stream);
      refused += s != TPU_OK;
      ops++;
      tpu_status_free(s);
    }
  }
  CHECK(ops > 20);
  CHECK(refused > ops / 2); /* the matrix ops refuse them */
  tt_free(&scalar), tt_free(&vec);
}
