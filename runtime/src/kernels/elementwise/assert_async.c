/* assert_async.c — torch._assert_async: a check of a device value that does
 * not wait for it. The node runs in stream order like any other; a zero
 * value makes the kernel fail, and the failure surfaces at the next
 * synchronisation (item(), a copy to the host, torch.tpu.synchronize()),
 * naming this op, as a device-side assert does on an accelerator. The
 * calling thread never blocks on the value: TorchTitan checks RoPE position
 * ids this way every step.
 *
 * Values follow PyTorch CPU's is_nonzero: one element of a real dtype, and
 * NaN counts as nonzero. Other element counts and complex values take the
 * CPU fallback, which raises PyTorch's own synchronous error.
 */
#include <string.h>

#include "kernels/common/kernel_util.h"

static tpu_status_t assert_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  const tpu_view_t* self = ku_input(def, node, "self");
  if (!self) return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "assert_async: a number operand");
  if (tpu_view_numel(self) != 1)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED,
                           "assert_async: %lld elements (PyTorch raises: ambiguous)",
                           (long long)tpu_view_numel(self));
  return TPU_OK;
}

static tpu_status_t assert_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_view_t* out_views) {
  (void)out_views; /* no outputs */
  return assert_check(def, node);
}

static tpu_status_t assert_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx) {
  (void)ctx;
  TPU_RETURN_IF_ERROR(assert_check(def, node));
  const tpu_view_t* self = ku_input(def, node, "self");
  bool nonzero;
  if (tpu_dtype_is_floating(self->dtype)) {
    double x = view_get_f64(self, 0);
    nonzero = x != 0.0; /* NaN != 0 */
  } else {
    nonzero = view_get_i64(self, 0) != 0;
  }
  if (nonzero) return TPU_OK;
  const tpu_attr_t* msg = ku_attr(def, node, "assert_msg");
  if (!msg || msg->kind != TPU_ATTR_STR)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "Expected Tensor with single nonzero value, but got zero");
  return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s",
                         msg->u.str[0] ? msg->u.str : "Assertion is failed");
}

static const tpu_op_def_t g_rows[] = {
    {.name = "assert_async", .inputs = "self", .attrs = "assert_msg", .outputs = "",
     .aten = "_assert_async _assert_async.msg", .kernel = assert_kernel, .infer = assert_infer,
     .check = assert_check, .impl = NULL, .flags = 0},
};

const tpu_op_family_t tpu_family_assert_async = {"assert_async", g_rows,
                                                 (int32_t)(sizeof(g_rows) / sizeof(g_rows[0]))};
