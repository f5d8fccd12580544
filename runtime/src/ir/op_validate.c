/* validate.c — tpu_node_validate: whether a node is well formed for its op
 * (tpu/ops.h), before any op's own check, shape function or kernel reads it.
 *
 * Everything a descriptor can get wrong that would make a kernel read out of
 * bounds or compute with undefined behaviour is refused here, once, for
 * every op: counts, kinds and dtypes out of range, size arithmetic that
 * overflows, absent operands an op needs. What is left to the op's check is
 * what only the op knows (ranks, dtypes it supports, attr ranges).
 */
#include <stdio.h>
#include <string.h>

#include "tpu/ops.h"

#define MAX_NODE_INPUTS 4096 /* far above any real list (the bridge stops at 64) */

static tpu_status_t invalid(const tpu_op_def_t* def, const char* fmt, const char* what,
                            int32_t index) {
  char msg[160];
  snprintf(msg, sizeof(msg), fmt, what, index);
  return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: %s", def->name, msg);
}

/* The bytes a view spans, overflow-checked. Kernels do their size and
 * offset arithmetic in int64 whether or not a view is empty, so the product
 * of its non-zero sizes and the sum of size x stride over its dims must fit
 * int64 too. */
static bool view_extent(const tpu_view_t* v, bool addresses, uint64_t* out_bytes) {
  /* Metadata alone (a shape check while tracing) may describe more than a
   * chip holds; what runs may not. */
  const uint64_t max_numel = addresses ? (uint64_t)TPU_MAX_VIEW_ELEMENTS : (uint64_t)INT64_MAX;
  uint64_t numel = 1, reach = 0, span = 1;
  bool empty = false;
  for (int32_t d = 0; d < v->ndim; ++d) {
    uint64_t size = (uint64_t)v->sizes[d], stride = (uint64_t)v->strides[d], step;
    empty |= size == 0;
    if (size == 0) size = 1;
    if (__builtin_mul_overflow(numel, size, &numel) || numel > max_numel ||
        __builtin_mul_overflow(size, stride, &step) || __builtin_add_overflow(reach, step, &reach) ||
        reach > (uint64_t)INT64_MAX)
      return false;
    span += (size - 1) * stride; /* at most reach */
  }
  *out_bytes = empty ? 0 : span * (uint64_t)tpu_dtype_size(v->dtype);
  return (empty || span <= (uint64_t)INT64_MAX / 16) &&
         (!addresses || v->addr + *out_bytes >= v->addr);
}

static tpu_status_t validate_view(const tpu_op_def_t* def, const tpu_view_t* v, const char* what,
                                  int32_t index, bool addresses) {
  if (v->dtype < 0 || v->dtype >= TPU_DTYPE_COUNT)
    return invalid(def, "%s %d has a dtype outside the enum", what, index);
  if (v->ndim > TPU_MAX_DIMS) /* the CPU fallback runs what no view can describe */
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: more than %d dims", def->name,
                           TPU_MAX_DIMS);
  if (v->ndim < 0) return invalid(def, "%s %d has a negative rank", what, index);
  for (int32_t d = 0; d < v->ndim; ++d)
    if (v->sizes[d] < 0 || v->strides[d] < 0)
      return invalid(def, "%s %d has a negative size or stride", what, index);
  uint64_t bytes;
  if (!view_extent(v, addresses, &bytes))
    return invalid(def, "%s %d: its sizes overflow (int64, or 2^48 elements to run)", what, index);
  if (addresses && v->addr == 0 && bytes != 0)
    return invalid(def, "%s %d has no device memory", what, index);
  return TPU_OK;
}

static tpu_status_t validate_scalar(const tpu_op_def_t* def, const tpu_scalar_t* s,
                                    int32_t index) {
  if (s->dtype < 0 || s->dtype >= TPU_DTYPE_COUNT)
    return invalid(def, "%s %d has a dtype outside the enum", "scalar input", index);
  if (tpu_dtype_is_complex(s->dtype) && !(def->flags & TPU_OP_COMPLEX_NUMBERS))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: input %d as a complex number", def->name,
                           index);
  return TPU_OK;
}

/* The spec entry that input `i` binds. Inputs map one to one, except that a
 * row's one list entry ("tensors*", not a foreach row's) takes the inputs
 * left over. -1: the node's input count does not fit the row. */
static int32_t entry_of(const tpu_op_def_t* def, int32_t entries, int32_t list_entry,
                        int32_t num_inputs, int32_t i) {
  if (list_entry < 0) return num_inputs == entries ? i : -1;
  int32_t after = entries - 1 - list_entry; /* entries after the list */
  if (num_inputs < entries - 1) return -1;
  if (i < list_entry) return i;
  if (i >= num_inputs - after) return entries - (num_inputs - i);
  return list_entry;
}

/* The row's one list entry (not a foreach row's), -1 when it has none, -2
 * when it has several (the inputs cannot then be matched to entries). */
static int32_t list_entry_of(const tpu_op_def_t* def, int32_t entries) {
  if (def->flags & TPU_OP_FOREACH) return -1;
  int32_t found = -1;
  for (int32_t e = 0; e < entries; ++e)
    if (tpu_spec_flags(def->inputs, e) & TPU_SPEC_LIST) found = found == -1 ? e : -2;
  return found;
}

static tpu_status_t validate_inputs(const tpu_op_def_t* def, const tpu_node_t* node,
                                    bool addresses) {
  if (node->num_inputs < 0 || node->num_inputs > MAX_NODE_INPUTS ||
      (node->num_inputs > 0 && !node->inputs))
    return invalid(def, "%s count %d is out of range", "input", node->num_inputs);
  int32_t entries = tpu_spec_count(def->inputs);
  int32_t list_entry = list_entry_of(def, entries);
  for (int32_t i = 0; i < node->num_inputs; ++i) {
    const tpu_value_t* v = &node->inputs[i];
    int32_t e = list_entry == -2 ? -2 : entry_of(def, entries, list_entry, node->num_inputs, i);
    if (e == -1)
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: takes %d inputs, given %d",
                             def->name, entries, node->num_inputs);
    uint32_t marks = e >= 0 ? tpu_spec_flags(def->inputs, e) : TPU_SPEC_OPTIONAL | TPU_SPEC_NUMBER;
    if (def->flags & (TPU_OP_POINTWISE | TPU_OP_FOREACH)) marks |= TPU_SPEC_NUMBER;
    if (def->flags & TPU_OP_FOREACH) marks |= TPU_SPEC_OPTIONAL; /* an empty list */
    switch (v->kind) {
      case TPU_VALUE_VIEW:
        TPU_RETURN_IF_ERROR(validate_view(def, &v->u.view, "input", i, addresses));
        break;
      case TPU_VALUE_SCALAR:
        TPU_RETURN_IF_ERROR(validate_scalar(def, &v->u.scalar, i));
        if (!(marks & TPU_SPEC_NUMBER))
          return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: input %d as a number", def->name, i);
        break;
      case TPU_VALUE_NONE:
        if (!(marks & (TPU_SPEC_OPTIONAL | TPU_SPEC_LIST)))
          return invalid(def, "%s %d is required but absent", "input", i);
        break;
      default:
        return invalid(def, "%s %d has a value kind outside the enum", "input", i);
    }
  }
  return TPU_OK;
}

static tpu_status_t validate_attr(const tpu_op_def_t* def, const tpu_attr_t* a, int32_t k) {
  switch (a->kind) {
    case TPU_ATTR_NONE:
    case TPU_ATTR_INT:
    case TPU_ATTR_FLOAT:
    case TPU_ATTR_BOOL:
      return TPU_OK;
    case TPU_ATTR_INTS:
      if (a->count < 0 || a->count > TPU_MAX_INTS)
        return invalid(def, "%s %d: int list length out of range", "attr", k);
      /* Int lists are shapes, dims, windows and paddings, which kernels
       * multiply and add: entries past 2^40 go to the CPU fallback. */
      for (int32_t i = 0; i < a->count; ++i)
        if (a->u.ints[i] > (1LL << 40) || a->u.ints[i] < -(1LL << 40))
          return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: attr %d holds %lld", def->name, k,
                                 (long long)a->u.ints[i]);
      return TPU_OK;
    case TPU_ATTR_FLOATS:
      if (a->count < 0 || a->count > TPU_MAX_INTS)
        return invalid(def, "%s %d: float list length out of range", "attr", k);
      return TPU_OK;
    case TPU_ATTR_COMPLEX:
      if (a->count != 2) return invalid(def, "%s %d: a complex number not of 2 parts", "attr", k);
      if (!(def->flags & TPU_OP_COMPLEX_NUMBERS))
        return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: attr %d as a complex number",
                               def->name, k);
      return TPU_OK;
    case TPU_ATTR_DTYPE:
      if (a->u.dtype < 0 || a->u.dtype >= TPU_DTYPE_COUNT)
        return invalid(def, "%s %d has a dtype outside the enum", "attr", k);
      return TPU_OK;
    case TPU_ATTR_STR:
      if (!memchr(a->u.str, '\0', TPU_MAX_STR))
        return invalid(def, "%s %d: string without its NUL", "attr", k);
      return TPU_OK;
    default:
      return invalid(def, "%s %d has a kind outside the enum", "attr", k);
  }
}

tpu_status_t tpu_node_validate(const tpu_node_t* node, bool addresses) {
  if (!node) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "no node");
  const tpu_op_def_t* def = tpu_op_def(node->op);
  if (!def) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "unknown op id %d", node->op);
  if (node->num_attrs != tpu_op_num_attrs(node->op) || node->num_attrs > TPU_MAX_ATTRS)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: %d attrs, expected %d", def->name,
                           node->num_attrs, tpu_op_num_attrs(node->op));
  if (node->num_outputs != tpu_op_num_outputs(node->op))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: %d outputs, expected %d", def->name,
                           node->num_outputs, tpu_op_num_outputs(node->op));
  TPU_RETURN_IF_ERROR(validate_inputs(def, node, addresses));
  for (int32_t k = 0; k < node->num_attrs; ++k)
    TPU_RETURN_IF_ERROR(validate_attr(def, &node->attrs[k], k));
  for (int32_t k = 0; node->outputs && k < node->num_outputs; ++k)
    if (!tpu_view_is_absent(&node->outputs[k]))
      TPU_RETURN_IF_ERROR(validate_view(def, &node->outputs[k], "output", k, addresses));
  return TPU_OK;
}
