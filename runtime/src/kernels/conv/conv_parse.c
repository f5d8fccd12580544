/* conv_parse.c — the convolution family's argument checks and shapes
 * (shared by the kernels in conv.c and the reference in conv_ref.c).
 *
 * A node is validated as PyTorch validates the call, and what PyTorch
 * rejects (bad shapes, negative padding, mixed dtypes) is refused with
 * UNIMPLEMENTED by infer/check, so the CPU fallback raises PyTorch's own
 * error. Dtypes: the floating types everywhere; integers only for the
 * convolutions PyTorch's CPU kernels run on them (int64 everywhere; the
 * narrower integers only without dilation and not transposed); bool only
 * for im2col/col2im (col2im then ORs overlapping values, as PyTorch's bool
 * += does).
 */
#include <limits.h>
#include <string.h>

#include "kernels/conv/conv.h"
#include "kernels/common/kernel_util.h"

#define CONV_FAIL(...) TPU_KERNEL_FAIL(TPU_CODE_UNIMPLEMENTED, __VA_ARGS__)

/* An int-list attr of `nsp` values (one value is repeated), right-aligned
 * into out[3] whose leading entries get `fill`. */
static tpu_status_t int_list(const tpu_op_def_t* def, const tpu_node_t* node, const char* name,
                             int32_t nsp, int64_t fill, int64_t out[3]) {
  const tpu_attr_t* a = ku_attr(def, node, name);
  if (!a || a->kind != TPU_ATTR_INTS || (a->count != 1 && a->count != nsp))
    CONV_FAIL("expected %s to be a list of %d ints", name, nsp);
  for (int32_t d = 0; d < 3; ++d) {
    int32_t i = d - (3 - nsp);
    out[d] = i < 0 ? fill : a->u.ints[a->count == 1 ? 0 : i];
  }
  return TPU_OK;
}

static tpu_status_t window_attrs(const tpu_op_def_t* def, const tpu_node_t* node, conv_args_t* a,
                                 const char* stride, const char* pad, const char* dil) {
  conv_geom_t* g = &a->g;
  TPU_RETURN_IF_ERROR(int_list(def, node, stride, a->nsp, 1, g->stride));
  TPU_RETURN_IF_ERROR(int_list(def, node, pad, a->nsp, 0, g->pad));
  TPU_RETURN_IF_ERROR(int_list(def, node, dil, a->nsp, 1, g->dil));
  for (int32_t d = 0; d < 3; ++d) {
    if (g->stride[d] < 1) CONV_FAIL("non-positive stride is not supported");
    if (g->pad[d] < 0) CONV_FAIL("negative padding is not supported");
    if (g->dil[d] < 1) CONV_FAIL("dilation should be greater than zero");
  }
  return TPU_OK;
}

/* Grid extent of an image extent: (S + 2p - d(K-1) - 1) / s + 1, or -1. */
static int64_t grid_size(const conv_geom_t* g, int32_t d, int64_t S) {
  int64_t span = S + 2 * g->pad[d] - g->dil[d] * (g->K[d] - 1) - 1;
  return span < 0 ? -1 : span / g->stride[d] + 1;
}

static int64_t prod3(const int64_t* v) { return v[0] * v[1] * v[2]; }

/* Dims BLAS takes as ints. */
static tpu_status_t check_blas_dims(const conv_geom_t* g) {
  int64_t pK = prod3(g->K);
  int64_t dims[5] = {prod3(g->S), prod3(g->G), g->cx * pK, g->cy, g->cx};
  for (int i = 0; i < 5; ++i)
    if (dims[i] > INT_MAX) CONV_FAIL("convolution too large for BLAS");
  return TPU_OK;
}

/* convolution / convolution_backward. */
static tpu_status_t parse_conv(const tpu_op_def_t* def, const tpu_node_t* node, conv_args_t* a) {
  bool backward = a->impl->kind == CONV_BACKWARD;
  const tpu_view_t* x = a->input = ku_input(def, node, "input");
  const tpu_view_t* w = a->weight = ku_input(def, node, "weight");
  a->bias = backward ? NULL : ku_input(def, node, "bias");
  a->grad_out = backward ? ku_input(def, node, "grad_output") : NULL;
  if (!x || !w || (backward && !a->grad_out))
    CONV_FAIL("expected input, weight (and grad_output) tensors");
  if (x->ndim < 3 || x->ndim > 5 || w->ndim != x->ndim)
    CONV_FAIL("expected a batched 3-D, 4-D or 5-D input and a weight of the same rank");
  a->nsp = x->ndim - 2;
  a->dtype = x->dtype;
  if (w->dtype != x->dtype || (a->bias && a->bias->dtype != x->dtype) ||
      (backward && a->grad_out->dtype != x->dtype))
    CONV_FAIL("Input type and weight type should be the same");
  a->transposed = tpu_attr_bool(ku_attr(def, node, "transposed"), false);
  TPU_RETURN_IF_ERROR(window_attrs(def, node, a, "stride", "padding", "dilation"));
  conv_geom_t* g = &a->g;
  int64_t opad[3];
  TPU_RETURN_IF_ERROR(int_list(def, node, "output_padding", a->nsp, 0, opad));
  g->groups = tpu_attr_int(ku_attr(def, node, "groups"), 1);
  if (g->groups < 1) CONV_FAIL("non-positive groups is not supported");
  for (int32_t d = 0; d < 3; ++d) {
    int32_t i = d - (3 - a->nsp);
    g->K[d] = i < 0 ? 1 : w->sizes[2 + i];
    if (g->K[d] < 1) CONV_FAIL("kernel size can't be zero");
  }
  /* Floats everywhere; int64 everywhere; other integers as PyTorch's CPU
   * kernels take them (no dilation, not transposed); never bool. */
  bool dilated = g->dil[0] != 1 || g->dil[1] != 1 || g->dil[2] != 1;
  if (!tpu_dtype_is_floating(a->dtype) &&
      (backward || a->dtype == TPU_DTYPE_BOOL ||
       (a->dtype != TPU_DTYPE_I64 && (dilated || a->transposed))))
    CONV_FAIL("convolution of %s is not supported", tpu_dtype_name(a->dtype));
  int64_t n = x->sizes[0], cin = x->sizes[1], cout;
  int64_t out_sizes[5] = {n};
  if (!a->transposed) {
    if (w->sizes[1] * g->groups != cin || w->sizes[0] % g->groups != 0)
      CONV_FAIL("weight does not match input channels and groups");
    cout = w->sizes[0];
    g->cx = w->sizes[1], g->cy = cout / g->groups;
    for (int32_t d = 0; d < 3; ++d) {
      int32_t i = d - (3 - a->nsp);
      g->S[d] = i < 0 ? 1 : x->sizes[2 + i];
      g->G[d] = grid_size(g, d, g->S[d]);
      if (g->G[d] < 1) CONV_FAIL("Calculated output size is too small");
      if (i >= 0) out_sizes[2 + i] = g->G[d];
    }
  } else {
    if (w->sizes[0] != cin || cin % g->groups != 0)
      CONV_FAIL("weight does not match input channels and groups");
    cout = w->sizes[1] * g->groups;
    g->cx = w->sizes[1], g->cy = cin / g->groups;
    for (int32_t d = 0; d < 3; ++d) {
      int32_t i = d - (3 - a->nsp);
      if (opad[d] < 0 || (opad[d] >= g->stride[d] && opad[d] >= g->dil[d]))
        CONV_FAIL("output padding must be smaller than either stride or dilation");
      g->G[d] = i < 0 ? 1 : x->sizes[2 + i];
      g->S[d] = (g->G[d] - 1) * g->stride[d] - 2 * g->pad[d] + g->dil[d] * (g->K[d] - 1) +
                opad[d] + 1;
      if (g->S[d] < 1) CONV_FAIL("Calculated output size is too small");
      if (i >= 0) out_sizes[2 + i] = g->S[d];
    }
  }
  out_sizes[1] = cout;
  g->n = n;
  if (a->bias && (a->bias->ndim != 1 || a->bias->sizes[0] != cout))
    CONV_FAIL("bias must be a vector of the output channels");
  TPU_RETURN_IF_ERROR(check_blas_dims(g));
  if (!backward) {
    a->shape[0] = view_of(NULL, a->dtype, x->ndim, out_sizes);
    a->num_outputs = 1;
    return TPU_OK;
  }
  const tpu_view_t* go = a->grad_out;
  bool same = go->ndim == x->ndim;
  for (int32_t d = 0; same && d < x->ndim; ++d) same = go->sizes[d] == out_sizes[d];
  if (!same) CONV_FAIL("grad_output has the wrong shape");
  const tpu_attr_t* mask = ku_attr(def, node, "output_mask");
  for (int i = 0; i < 3; ++i)
    a->mask[i] = !(mask && mask->kind == TPU_ATTR_INTS && i < mask->count) || mask->u.ints[i];
  /* grad_bias has bias_sizes (autograd passes [0] without a bias, and then
   * does not ask for it) */
  const tpu_attr_t* bs = ku_attr(def, node, "bias_sizes");
  int64_t nb = cout;
  if (bs && bs->kind == TPU_ATTR_INTS) {
    if (bs->count != 1 || bs->u.ints[0] < 0) CONV_FAIL("bias_sizes must be one size");
    nb = bs->u.ints[0];
  }
  if (a->mask[2] && nb != cout) CONV_FAIL("bias_sizes does not match the output channels");
  a->shape[0] = view_of(NULL, a->dtype, x->ndim, x->sizes);
  a->shape[1] = view_of(NULL, a->dtype, w->ndim, w->sizes);
  a->shape[2] = view_of(NULL, a->dtype, 1, &nb);
  a->num_outputs = 3;
  return TPU_OK;
}

/* im2col / col2im (2-D, batched or not). */
static tpu_status_t parse_cols(const tpu_op_def_t* def, const tpu_node_t* node, conv_args_t* a) {
  bool to_cols = a->impl->kind == CONV_IM2COL;
  const tpu_view_t* x = a->input = ku_input(def, node, "self");
  if (!x) CONV_FAIL("expected a tensor");
  a->nsp = 2;
  a->dtype = x->dtype;
  if (!tpu_dtype_is_floating(x->dtype) && x->dtype != TPU_DTYPE_BOOL)
    CONV_FAIL("%s of %s is not supported",
                                                  to_cols ? "im2col" : "col2im",
                                                  tpu_dtype_name(x->dtype));
  conv_geom_t* g = &a->g;
  TPU_RETURN_IF_ERROR(int_list(def, node, "kernel_size", 2, 1, g->K));
  TPU_RETURN_IF_ERROR(window_attrs(def, node, a, "stride", "padding", "dilation"));
  if (g->K[1] < 1 || g->K[2] < 1) CONV_FAIL("kernel size should be greater than zero");
  g->groups = 1;
  int64_t pK = g->K[1] * g->K[2];
  int32_t lead = to_cols ? x->ndim - 3 : x->ndim - 2; /* 1 when batched */
  if (lead != 0 && lead != 1) CONV_FAIL("unexpected input rank %d", x->ndim);
  a->batched = lead == 1;
  g->n = a->batched ? x->sizes[0] : 1;
  if (to_cols) {
    g->cx = x->sizes[lead];
    g->S[0] = 1, g->S[1] = x->sizes[lead + 1], g->S[2] = x->sizes[lead + 2];
    if (g->cx == 0 || g->S[1] == 0 || g->S[2] == 0)
      CONV_FAIL("Expected non-empty 3D or 4D input tensor");
  } else {
    int64_t osz[3] = {1, 1, 1};
    TPU_RETURN_IF_ERROR(int_list(def, node, "output_size", 2, 1, osz));
    g->S[0] = 1, g->S[1] = osz[1], g->S[2] = osz[2];
    if (osz[1] < 1 || osz[2] < 1) CONV_FAIL("output_size should be greater than zero");
    if (x->sizes[lead] == 0 || x->sizes[lead] % pK != 0 || x->sizes[lead + 1] == 0)
      CONV_FAIL("expected size of input's dimension 1 to be divisible by the kernel size");
    g->cx = x->sizes[lead] / pK;
  }
  g->G[0] = 1;
  for (int32_t d = 1; d < 3; ++d) {
    g->G[d] = grid_size(g, d, g->S[d]);
    if (g->G[d] < 1) CONV_FAIL("Given input and parameters, the output size is too small");
  }
  int64_t L = g->G[1] * g->G[2];
  if (!to_cols && x->sizes[lead + 1] != L) CONV_FAIL("expected input's last dim to be %lld",
                                                     (long long)L);
  TPU_RETURN_IF_ERROR(check_blas_dims(g));
  int64_t sizes[4] = {g->n}, *s = sizes + lead;
  int32_t ndim;
  if (to_cols) {
    s[0] = g->cx * pK, s[1] = L, ndim = lead + 2;
  } else {
    s[0] = g->cx, s[1] = g->S[1], s[2] = g->S[2], ndim = lead + 3;
  }
  a->shape[0] = view_of(NULL, a->dtype, ndim, sizes);
  a->num_outputs = 1;
  return TPU_OK;
}

tpu_status_t tpu_conv_parse(const tpu_op_def_t* def, const tpu_node_t* node, conv_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->impl = (const conv_impl_t*)def->impl;
  a->g.cy = 0;
  if (a->impl->kind == CONV_FORWARD || a->impl->kind == CONV_BACKWARD)
    return parse_conv(def, node, a);
  return parse_cols(def, node, a);
}
