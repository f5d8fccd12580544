/* kernel_util.h — what the kernel families share besides tpu_convert
 * (internal to src/kernels and their tests):
 *   - reading a node by name: a row's attrs and inputs are looked up through
 *     its spec strings, so one kernel can serve rows whose ATen schemas
 *     carry different argument subsets (sum.dim_IntList vs sum.default);
 *   - PyTorch's dim wrapping and its error;
 *   - turning argument errors into UNIMPLEMENTED for infer/check;
 *   - walking strided views: view_walk.h, included here;
 *   - the memory format of a result that follows its input (ku_layout_like);
 *   - sizes printed as PyTorch's messages print them (ku_format_sizes).
 * Everything is static inline; nothing here allocates.
 */
#ifndef TPU_KERNELS_KERNEL_UTIL_H_
#define TPU_KERNELS_KERNEL_UTIL_H_

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kernel.h"
#include "kernels/common/view_walk.h"

/* The node's attribute called `name` in the row's attrs spec; NULL when the
 * row has no such attribute (the tpu_attr_* readers then give the default). */
static inline const tpu_attr_t* ku_attr(const tpu_op_def_t* def, const tpu_node_t* node,
                                        const char* name) {
  int32_t i = tpu_spec_index(def->attrs, name);
  return (i >= 0 && i < node->num_attrs) ? &node->attrs[i] : NULL;
}

/* The input called `name` as a view; NULL when absent, None or a scalar. */
static inline const tpu_view_t* ku_input(const tpu_op_def_t* def, const tpu_node_t* node,
                                         const char* name) {
  int32_t i = tpu_spec_index(def->inputs, name);
  if (i < 0 || i >= node->num_inputs || node->inputs[i].kind != TPU_VALUE_VIEW) return NULL;
  return &node->inputs[i].u.view;
}

/* Turns a failed argument check into UNIMPLEMENTED (keeping its message),
 * for infer and check functions: the bridge then asks PyTorch's meta kernel
 * (which raises PyTorch's own error for bad arguments) or falls back. */
static inline tpu_status_t ku_unimplemented(tpu_status_t s) {
  if (s == TPU_OK || tpu_status_code(s) == TPU_CODE_UNIMPLEMENTED) return s;
  tpu_status_t u = tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s", tpu_status_message(s));
  tpu_status_free(s);
  return u;
}

/* Whether s is TPU_OK; a failure is freed (for callers that only need to
 * know, such as the fusion `rows` functions). */
static inline bool ku_ok(tpu_status_t s) {
  if (s == TPU_OK) return true;
  tpu_status_free(s);
  return false;
}

/* PyTorch's maybe_wrap_dim: [-ndim, ndim) with a 0-dim tensor taking -1 and 0. */
static inline tpu_status_t ku_wrap_dim(int64_t dim, int32_t ndim, int32_t* out) {
  int32_t n = ndim > 0 ? ndim : 1;
  if (dim < -n || dim >= n)
    return tpu_status_make(TPU_CODE_INDEX_ERROR,
                           "Dimension out of range (expected to be in range of [%d, %d], but "
                           "got %lld)",
                           -n, n - 1, (long long)dim);
  *out = (int32_t)(dim < 0 ? dim + n : dim);
  return TPU_OK;
}

/* Outputs of a dim op (values, and indices when n == 2): of the parsed
 * shapes and dtypes, not overlapping the input unless they are the very same
 * view (rows are read before they are written), not overlapping each other.
 * UNIMPLEMENTED otherwise; OK before outputs exist (shape inference). */
static inline tpu_status_t ku_check_dim_outputs(const tpu_node_t* node, const tpu_view_t* in,
                                               const tpu_view_t* shapes, int n) {
  if (node->num_outputs == 0) return TPU_OK;
  if (node->num_outputs < n)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "missing outputs");
  for (int i = 0; i < n; ++i) {
    const tpu_view_t* o = &node->outputs[i];
    if (!views_same_shape(o, &shapes[i]) || o->dtype != shapes[i].dtype)
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "output of another shape or dtype");
    if (o->addr > 1 && views_overlap(o, in) && !views_same(o, in))
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "output overlaps the input");
  }
  if (n == 2 && node->outputs[0].addr > 1 && views_overlap(&node->outputs[0], &node->outputs[1]))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "outputs overlap");
  return TPU_OK;
}

/* Lays `s` out as PyTorch lays out the result of an op on `x` that keeps its
 * memory format: channels-last (NHWC / NDHWC, computed from s's own sizes)
 * when x is a 4-D or 5-D channels-last tensor with more than one channel,
 * contiguous otherwise (suggest_memory_format's rule). */
static inline void ku_layout_like(tpu_view_t* s, const tpu_view_t* x) {
  tpu_view_set_contiguous(s);
  if ((x->ndim != 4 && x->ndim != 5) || x->sizes[1] == 1) return;
  int64_t st[TPU_MAX_DIMS], acc = 1;
  st[1] = acc;
  acc *= x->sizes[1];
  for (int32_t d = x->ndim - 1; d >= 2; --d) {
    st[d] = acc;
    acc *= x->sizes[d];
  }
  st[0] = acc;
  for (int32_t d = 0; d < x->ndim; ++d)
    if (x->sizes[d] > 1 && x->strides[d] != st[d]) return;
  acc = 1;
  s->strides[1] = acc;
  acc *= s->sizes[1];
  for (int32_t d = s->ndim - 1; d >= 2; --d) {
    s->strides[d] = acc;
    acc *= s->sizes[d];
  }
  s->strides[0] = acc;
}

/* Writes a view's sizes as PyTorch prints them in messages ("[3, 5]", "[]"
 * for 0-dim) into buf (cap bytes, always terminated); returns buf. */
static inline const char* ku_format_sizes(const tpu_view_t* v, char* buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int32_t d = 0; d < v->ndim && n < cap; ++d)
    n += (size_t)snprintf(buf + n, cap - n, d ? ", %lld" : "%lld", (long long)v->sizes[d]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

#endif /* TPU_KERNELS_KERNEL_UTIL_H_ */
