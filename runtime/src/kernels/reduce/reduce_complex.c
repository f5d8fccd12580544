/* reduce_complex.c — sum and mean of complex tensors: the same reduction of
 * the real family over the tensor's (..., 2) real view, with the pair dim
 * kept, so complex64 and complex128 accumulate as their parts do (in
 * double) and round once.
 *
 * The node is rewritten for the "sum" or "mean" row (the forms with dims):
 * the dims become an explicit list of the complex tensor's dims, made
 * non-negative (an absent or empty list: all of them, as PyTorch's dim=[]
 * and the sum.default form mean), keepdim is kept, a complex dtype
 * argument becomes its part dtype, and a complex out= its real view (a 0-dim
 * input reduces a [1, 2] view over its leading dim). A real dtype argument
 * or a real out= (PyTorch raises or casts) is UNIMPLEMENTED: the CPU
 * fallback does what PyTorch does.
 */
#include <string.h>

#include "kernels/reduce/reduce.h"

bool tpu_reduce_is_complex(const tpu_node_t* node) {
  return node->num_inputs >= 1 && node->inputs[0].kind == TPU_VALUE_VIEW &&
         tpu_dtype_is_complex(node->inputs[0].u.view.dtype);
}

/* A complex view as its (..., 2) view of the part dtype. */
static void pairs(const tpu_view_t* v, tpu_view_t* r) {
  *r = *v;
  r->dtype = tpu_dtype_part(v->dtype);
  for (int32_t d = 0; d < v->ndim; ++d) r->strides[d] = 2 * v->strides[d];
  r->sizes[v->ndim] = 2;
  r->strides[v->ndim] = 1;
  r->ndim = v->ndim + 1;
}

typedef struct cx_reduction {
  const tpu_op_def_t* def; /* the real row: "sum" or "mean" */
  tpu_node_t node;
  tpu_value_t in;
  tpu_view_t out;
} cx_reduction_t;

static tpu_status_t refuse(const tpu_op_def_t* def, const char* why) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s of a complex tensor: %s", def->name, why);
}

static tpu_status_t rewrite(const tpu_op_def_t* def, const tpu_node_t* node, cx_reduction_t* r) {
  const reduce_impl_t* impl = (const reduce_impl_t*)def->impl;
  const tpu_view_t* in = &node->inputs[0].u.view;
  if (in->ndim >= TPU_MAX_DIMS - 1) return refuse(def, "its number of dims");
  if (impl->acc != RACC_SUM) return refuse(def, "not a sum");
  memset(r, 0, sizeof(*r));
  r->def = tpu_op_def(tpu_op_lookup(impl->out == ROUT_MEAN ? "mean" : "sum"));
  if (!r->def) return refuse(def, "no real row");
  /* the real row's attrs: dim, keepdim, dtype */
  r->node = *node;
  memset(r->node.attrs, 0, sizeof(r->node.attrs));
  r->node.num_attrs = 3;
  const tpu_attr_t* dim = ku_attr(def, node, "dim");
  tpu_attr_t* dims = &r->node.attrs[0];
  dims->kind = TPU_ATTR_INTS;
  if (in->ndim == 0) { /* one element: a reduction over the leading dim of a [1, 2] view */
    dims->u.ints[0] = 0;
    dims->count = 1;
  } else if (!dim || dim->kind == TPU_ATTR_NONE ||
             (dim->kind == TPU_ATTR_INTS && dim->count == 0)) {
    for (int32_t d = 0; d < in->ndim; ++d) dims->u.ints[d] = d;
    dims->count = in->ndim;
  } else {
    int32_t count = dim->kind == TPU_ATTR_INTS ? dim->count : 1;
    if (count > TPU_MAX_INTS) return refuse(def, "its dim list");
    for (int32_t k = 0; k < count; ++k) {
      int64_t d = dim->kind == TPU_ATTR_INTS ? dim->u.ints[k] : dim->u.i;
      if (d < -in->ndim || d >= in->ndim) return refuse(def, "a dim out of range");
      dims->u.ints[k] = d < 0 ? d + in->ndim : d;
    }
    dims->count = count;
  }
  const tpu_attr_t* keep = ku_attr(def, node, "keepdim");
  r->node.attrs[1] = (tpu_attr_t){.kind = TPU_ATTR_BOOL, .u.i = keep ? tpu_attr_bool(keep, false) : 0};
  const tpu_attr_t* dtype = ku_attr(def, node, "dtype");
  r->node.attrs[2] = (tpu_attr_t){.kind = TPU_ATTR_NONE};
  if (dtype && dtype->kind == TPU_ATTR_DTYPE) {
    if (!tpu_dtype_is_complex(dtype->u.dtype)) return refuse(def, "a real dtype argument");
    r->node.attrs[2] = (tpu_attr_t){.kind = TPU_ATTR_DTYPE, .u.dtype = tpu_dtype_part(dtype->u.dtype)};
  }
  r->node.op = tpu_op_lookup(r->def->name);
  r->in = node->inputs[0];
  pairs(in, &r->in.u.view);
  if (in->ndim == 0) {
    tpu_view_t* v = &r->in.u.view;
    v->ndim = 2;
    v->sizes[0] = 1, v->sizes[1] = 2;
    v->strides[0] = 2, v->strides[1] = 1;
    r->node.attrs[1].u.i = 0; /* keepdim: the 0-dim result either way */
  }
  r->node.inputs = &r->in;
  r->node.num_inputs = 1;
  r->node.outputs = NULL;
  if (node->outputs && node->num_outputs >= 1) {
    if (!tpu_dtype_is_complex(node->outputs[0].dtype) || node->outputs[0].ndim >= TPU_MAX_DIMS)
      return refuse(def, "a real output");
    pairs(&node->outputs[0], &r->out);
    r->node.outputs = &r->out;
  }
  return TPU_OK;
}

tpu_status_t tpu_reduce_cx_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_view_t* out_views) {
  cx_reduction_t r;
  TPU_RETURN_IF_ERROR(rewrite(def, node, &r));
  TPU_RETURN_IF_ERROR(r.def->infer(r.def, &r.node, out_views));
  tpu_view_t* v = &out_views[0]; /* (..., 2) back to complex */
  v->ndim--;
  v->dtype = tpu_dtype_to_complex(v->dtype);
  tpu_view_set_contiguous(v);
  return TPU_OK;
}

tpu_status_t tpu_reduce_cx_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  cx_reduction_t r;
  TPU_RETURN_IF_ERROR(rewrite(def, node, &r));
  return r.def->check(r.def, &r.node);
}

tpu_status_t tpu_reduce_cx_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx) {
  cx_reduction_t r;
  TPU_RETURN_IF_ERROR(rewrite(def, node, &r));
  return r.def->kernel(r.def, &r.node, ctx);
}
