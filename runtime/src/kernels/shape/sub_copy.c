/* sub_copy.c — the sub_copy family: copies of rearranged or narrowed views
 * of self, each one parallel converting copy (view_copy), every dtype.
 *
 * channel_shuffle: self [N, C, *] seen as [N, g, C/g, *],
 * the two group dims swapped, read back as [N, C, *]:
 *   out[n, i * g + j, ...] = self[n, j * (C/g) + i, ...].
 * The kernel lays both tensors out as [N, C/g, g, *] views (the input's
 * channel stride split into (stride, stride * C/g), the output's into
 * (stride * g, stride)) and runs one parallel converting copy (view_copy),
 * so every dtype and any input strides take the same path. The reference
 * maps element by element. PyTorch's argument errors (fewer than 3 dims,
 * groups <= 0, C not divisible by groups) fall back and raise there.
 *
 * narrow_copy: self narrowed on dim to [start, start + length) (a negative
 * start counts from the end), copied into a contiguous result. Argument
 * errors (dim or range out of bounds, a 0-dim self) fall back, so the CPU
 * raises PyTorch's own errors.
 */
#include <string.h>

#include "kernels/common/kernel_util.h"

static tpu_status_t cs_parse(const tpu_op_def_t* def, const tpu_node_t* node, int64_t* groups) {
  const tpu_view_t* x = ku_input(def, node, "self");
  *groups = tpu_attr_int(ku_attr(def, node, "groups"), 0);
  if (!x || x->ndim < 3 || x->ndim + 1 > TPU_MAX_DIMS || *groups <= 0 ||
      x->sizes[1] % *groups != 0)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "channel_shuffle: arguments PyTorch rejects");
  return TPU_OK;
}

static tpu_status_t cs_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* out) {
  int64_t g;
  TPU_RETURN_IF_ERROR(cs_parse(def, node, &g));
  out[0] = *ku_input(def, node, "self");
  out[0].addr = 0;
  tpu_view_set_contiguous(&out[0]);
  return TPU_OK;
}

static tpu_status_t cs_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  int64_t g;
  TPU_RETURN_IF_ERROR(cs_parse(def, node, &g));
  if (node->num_outputs > 0 && node->outputs[0].addr > 1 &&
      !views_same_shape(&node->outputs[0], ku_input(def, node, "self")))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "channel_shuffle: output of another shape");
  return TPU_OK;
}

/* v [N, C, *] as [N, C/g, g, *]: the channel c = i * a + j * b. */
static tpu_view_t split_channels(const tpu_view_t* v, int64_t g, bool input) {
  tpu_view_t r = *v;
  int64_t cg = v->sizes[1] / g, s = v->strides[1];
  r.ndim = v->ndim + 1;
  for (int32_t d = v->ndim - 1; d >= 2; --d) {
    r.sizes[d + 1] = v->sizes[d];
    r.strides[d + 1] = v->strides[d];
  }
  r.sizes[1] = cg;
  r.sizes[2] = g;
  r.strides[1] = input ? s : s * g; /* input channel j * (C/g) + i, output i * g + j */
  r.strides[2] = input ? s * cg : s;
  return r;
}

static tpu_status_t cs_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  (void)ctx;
  int64_t g;
  TPU_RETURN_IF_ERROR(cs_parse(def, node, &g));
  const tpu_view_t* x = ku_input(def, node, "self");
  if (node->num_outputs < 1 || !views_same_shape(&node->outputs[0], x))
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "channel_shuffle: output has the wrong shape");
  if (tpu_view_numel(x) == 0) return TPU_OK;
  tpu_view_t src = split_channels(x, g, true), dst = split_channels(&node->outputs[0], g, false);
  view_copy(&dst, &src);
  return TPU_OK;
}

/* The reference: output element by element from the channel map. */
tpu_status_t tpu_channel_shuffle_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                           tpu_exec_ctx_t* ctx);
tpu_status_t tpu_channel_shuffle_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                           tpu_exec_ctx_t* ctx) {
  (void)ctx;
  int64_t g;
  TPU_RETURN_IF_ERROR(cs_parse(def, node, &g));
  const tpu_view_t* x = ku_input(def, node, "self");
  const tpu_view_t* o = &node->outputs[0];
  int64_t numel = tpu_view_numel(x), cg = x->sizes[1] / g;
  for (int64_t k = 0; k < numel; ++k) {
    int64_t rem = k, xo = 0, oo = 0;
    for (int32_t d = x->ndim - 1; d >= 0; --d) {
      int64_t i = rem % x->sizes[d];
      rem /= x->sizes[d];
      oo += i * o->strides[d];
      xo += (d == 1 ? (i % g) * cg + i / g : i) * x->strides[d];
    }
    memcpy(view_at(o, oo), view_at(x, xo), tpu_dtype_size(x->dtype));
  }
  return TPU_OK;
}

/* ---- narrow_copy ------------------------------------------------------------------ */

/* The narrowed view of self; UNIMPLEMENTED for arguments PyTorch rejects. */
static tpu_status_t nc_parse(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* sub) {
  const tpu_view_t* x = ku_input(def, node, "self");
  int64_t dim = tpu_attr_int(ku_attr(def, node, "dim"), 0);
  int64_t start = tpu_attr_int(ku_attr(def, node, "start"), 0);
  int64_t length = tpu_attr_int(ku_attr(def, node, "length"), 0);
  if (!x || x->ndim == 0 || dim < -x->ndim || dim >= x->ndim)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "narrow_copy: bad dim");
  int32_t d = (int32_t)(dim < 0 ? dim + x->ndim : dim);
  int64_t size = x->sizes[d];
  if (start < -size || start > size)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "narrow_copy: start out of range");
  if (start < 0) start += size;
  if (length < 0 || start > size - length)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "narrow_copy: length out of range");
  *sub = *x;
  sub->sizes[d] = length;
  if (length > 0) sub->addr = x->addr + (uint64_t)(start * x->strides[d]) * tpu_dtype_size(x->dtype);
  return TPU_OK;
}

static tpu_status_t nc_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* out) {
  tpu_view_t sub;
  TPU_RETURN_IF_ERROR(nc_parse(def, node, &sub));
  out[0] = sub;
  out[0].addr = 0;
  tpu_view_set_contiguous(&out[0]);
  return TPU_OK;
}

static tpu_status_t nc_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  tpu_view_t sub;
  TPU_RETURN_IF_ERROR(nc_parse(def, node, &sub));
  if (node->num_outputs > 0 && node->outputs[0].addr > 1 &&
      !views_same_shape(&node->outputs[0], &sub))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "narrow_copy: output of another shape");
  return TPU_OK;
}

static tpu_status_t nc_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  (void)ctx;
  tpu_view_t sub;
  TPU_RETURN_IF_ERROR(nc_parse(def, node, &sub));
  if (node->num_outputs < 1 || !views_same_shape(&node->outputs[0], &sub))
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "narrow_copy: output has the wrong shape");
  if (tpu_view_numel(&sub) > 0) view_copy(&node->outputs[0], &sub);
  return TPU_OK;
}

static const tpu_op_def_t k_rows[] = {
    {.name = "narrow_copy", .inputs = "self", .attrs = "dim,start,length", .outputs = "out",
     .aten = "narrow_copy narrow_copy.out", .kernel = nc_kernel, .infer = nc_infer,
     .check = nc_check, .impl = NULL},
    {.name = "channel_shuffle", .inputs = "self", .attrs = "groups", .outputs = "out",
     .aten = "channel_shuffle channel_shuffle.out", .kernel = cs_kernel, .infer = cs_infer,
     .check = cs_check, .impl = NULL},
};

const tpu_op_family_t tpu_family_sub_copy = {
    "sub_copy", k_rows, (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
