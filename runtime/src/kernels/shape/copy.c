/* kernels/shape/copy.c — the copy family: "copy" (device-to-device copies with
 * dtype conversion and arbitrary strides, used by the bridge; no ATen
 * binding), "fill" (fill_ and its functional/out forms) and "zero" (zero_).
 *
 * Both run on the elementwise executor's converting copy (tpu_ew_copy): the
 * source is broadcast to the destination's shape, dims are collapsed and
 * ordered by the destination's strides, and each run is converted with
 * generated per-dtype loops (same-dtype runs are copied bit for bit).
 * All three take the wide unsigned dtypes (TPU_OP_UNSIGNED): tpu_convert
 * moves them. fill also takes complex tensors and complex numbers
 * (TPU_OP_COMPLEX, TPU_OP_COMPLEX_NUMBERS): torch.full(..., 1j), the
 * value tensor of where(cond, x, 1j).
 */
#include <string.h>

#include "kernels/elementwise/elementwise.h"

/* ---- copy(src) -> out ---------------------------------------------------------- */

static tpu_status_t copy_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  (void)ctx;
  if (node->num_inputs != 1 || node->num_outputs != 1 || node->inputs[0].kind != TPU_VALUE_VIEW)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: expected a source tensor and an output",
                           def->name);
  return tpu_ew_copy(&node->outputs[0], &node->inputs[0].u.view);
}

/* Shape function of all three rows: the output is input 0's shape and dtype,
 * contiguous. */
static tpu_status_t like_input0_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                      tpu_view_t* out_views) {
  if (node->num_inputs < 1 || node->inputs[0].kind != TPU_VALUE_VIEW)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: expected a tensor input", def->name);
  out_views[0] = node->inputs[0].u.view;
  out_views[0].addr = 0;
  tpu_view_set_contiguous(&out_views[0]);
  return TPU_OK;
}

/* ---- fill(self, value) -> out ------------------------------------------------------
 * `self` only gives the functional form its shape and dtype; the kernel
 * writes the output (which is self for fill_). */

static tpu_status_t fill_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  if (node->num_inputs != 2 || node->inputs[0].kind != TPU_VALUE_VIEW)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: expected self and value", def->name);
  const tpu_value_t* value = &node->inputs[1];
  tpu_dtype_t dtype = node->inputs[0].u.view.dtype;
  if (value->kind == TPU_VALUE_VIEW && value->u.view.ndim != 0)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED,
                           "fill_ only supports 0-dimension value tensor but got tensor with %d "
                           "dimensions.",
                           value->u.view.ndim);
  /* a complex number or tensor into a real tensor: PyTorch raises, or casts
   * with a warning; the fallback does either */
  bool cx_value = value->kind == TPU_VALUE_SCALAR ? tpu_dtype_is_complex(value->u.scalar.dtype)
                  : value->kind == TPU_VALUE_VIEW ? tpu_dtype_is_complex(value->u.view.dtype)
                                                  : false;
  if (cx_value && !tpu_dtype_is_complex(dtype))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: a complex value into %s", def->name,
                           tpu_dtype_name(dtype));
  if (value->kind == TPU_VALUE_SCALAR && !tpu_ew_scalar_fits(&value->u.scalar, dtype))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED,
                           "value cannot be converted to type %s without overflow",
                           tpu_dtype_name(dtype));
  if (value->kind == TPU_VALUE_NONE)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: value is None", def->name);
  return TPU_OK;
}

static tpu_status_t fill_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  (void)ctx;
  TPU_RETURN_IF_ERROR(fill_check(def, node));
  if (node->num_outputs != 1)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: expected 1 output", def->name);
  const tpu_view_t* out = &node->outputs[0];
  const tpu_value_t* v = &node->inputs[1];
  uint64_t storage[2] = {0, 0}; /* one element of out's dtype (complex128: 16 bytes) */
  tpu_view_t value;
  bool cx_number = v->kind == TPU_VALUE_SCALAR && tpu_dtype_is_complex(v->u.scalar.dtype);
  if (v->kind == TPU_VALUE_VIEW || cx_number) { /* a view: read first (it may be in out) */
    if (cx_number)
      tpu_convert(storage, out->dtype, 1, v->u.scalar.v.c, TPU_DTYPE_C128, 1, 1);
    else
      tpu_convert(storage, out->dtype, 1, tpu_view_ptr(&v->u.view), v->u.view.dtype, 1, 1);
    memset(&value, 0, sizeof(value));
    value.addr = (uint64_t)(uintptr_t)storage;
    value.dtype = out->dtype;
  } else {
    tpu_value_to_view(v, out->dtype, storage, &value);
  }
  if (tpu_dtype_is_complex(out->dtype)) { /* as (..., 2) part-dtype views: each part */
    if (out->ndim >= TPU_MAX_DIMS)
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: too many dims", def->name);
    tpu_view_t pairs = *out, src = *out;
    pairs.dtype = src.dtype = tpu_dtype_part(out->dtype);
    for (int32_t d = 0; d < out->ndim; ++d) pairs.strides[d] *= 2, src.strides[d] = 0;
    pairs.sizes[out->ndim] = src.sizes[out->ndim] = 2;
    pairs.strides[out->ndim] = src.strides[out->ndim] = 1;
    pairs.ndim = src.ndim = out->ndim + 1;
    src.addr = value.addr;
    return tpu_ew_copy(&pairs, &src);
  }
  return tpu_ew_copy(out, &value);
}

static tpu_status_t fill_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_view_t* out_views) {
  TPU_RETURN_IF_ERROR(fill_check(def, node));
  return like_input0_infer(def, node, out_views);
}

/* ---- zero(self) -> out: fill with 0 ------------------------------------------------ */

static tpu_status_t zero_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  (void)ctx;
  if (node->num_outputs != 1)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: expected 1 output", def->name);
  const tpu_view_t* out = &node->outputs[0];
  tpu_value_t zero;
  memset(&zero, 0, sizeof(zero));
  zero.kind = TPU_VALUE_SCALAR;
  zero.u.scalar.dtype = TPU_DTYPE_I64;
  uint64_t storage = 0;
  tpu_view_t value;
  tpu_value_to_view(&zero, out->dtype, &storage, &value);
  return tpu_ew_copy(out, &value);
}

static const tpu_op_def_t g_rows[] = {
    {.name = "zero", .inputs = "self", .attrs = "", .outputs = "out",
     .aten = "zero_ zero zero.out", .kernel = zero_kernel, .infer = like_input0_infer,
     .check = NULL, .impl = NULL, .flags = TPU_OP_COMPLEX_AS_REAL | TPU_OP_UNSIGNED},
    {.name = "copy", .inputs = "src", .attrs = "", .outputs = "out", .aten = "",
     .kernel = copy_kernel, .infer = like_input0_infer, .check = NULL, .impl = NULL,
     .flags = TPU_OP_UNSIGNED},
    {.name = "fill", .inputs = "self,value#", .attrs = "", .outputs = "out",
     .aten = "fill.Scalar fill.Tensor fill.Scalar_out fill.Tensor_out fill_.Scalar fill_.Tensor",
     .kernel = fill_kernel, .infer = fill_infer, .check = fill_check, .impl = NULL,
     .flags = TPU_OP_UNSIGNED | TPU_OP_COMPLEX | TPU_OP_COMPLEX_NUMBERS},
};

const tpu_op_family_t tpu_family_copy = {"copy", g_rows,
                                         (int32_t)(sizeof(g_rows) / sizeof(g_rows[0]))};
