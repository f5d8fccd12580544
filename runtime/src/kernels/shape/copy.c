/* kernels/shape/copy.c — the copy family: "copy" (device-to-device copies with
 * dtype conversion and arbitrary strides, used by the bridge; no ATen
 * binding), "fill" (fill_ and its functional/out forms) and "zero" (zero_).
 *
 * Both run on the elementwise executor's converting copy (tpu_ew_copy): the
 * source is broadcast to the destination's shape, dims are collapsed and
 * ordered by the destination's strides, and each run is converted with
 * generated per-dtype loops (same-dtype runs are copied bit for bit).
 * All three take the wide unsigned dtypes (TPU_OP_UNSIGNED): tpu_convert
 * moves them.
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
  uint64_t storage = 0;
  tpu_view_t value;
  if (v->kind == TPU_VALUE_VIEW) { /* read first: it may be an element of out */
    tpu_convert(&storage, out->dtype, 1, tpu_view_ptr(&v->u.view), v->u.view.dtype, 1, 1);
    memset(&value, 0, sizeof(value));
    value.addr = (uint64_t)(uintptr_t)&storage;
    value.dtype = out->dtype;
  } else {
    tpu_value_to_view(v, out->dtype, &storage, &value);
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
     .flags = TPU_OP_UNSIGNED},
};

const tpu_op_family_t tpu_family_copy = {"copy", g_rows,
                                         (int32_t)(sizeof(g_rows) / sizeof(g_rows[0]))};
