/* reduce_complex.c — reductions of complex tensors.
 *
 * sum and mean: the same reduction of the real family over the tensor's
 * (..., 2) real view, with the pair dim kept, so complex64 and complex128
 * accumulate as their parts do (in double) and round once.
 *
 * The node is rewritten for the "sum" or "mean" row (the forms with dims):
 * the dims become an explicit list of the complex tensor's dims, made
 * non-negative (an absent or empty list: all of them, as PyTorch's dim=[]
 * and the sum.default form mean), keepdim is kept, a complex dtype
 * argument becomes its part dtype, and a complex out= its real view (a 0-dim
 * input reduces a [1, 2] view over its leading dim). A real dtype argument
 * or a real out= (PyTorch raises or casts) is UNIMPLEMENTED: the CPU
 * fallback does what PyTorch does.
 *
 * prod and the vector norms (linalg_vector_norm, norm: any order): plain
 * loops, one output at a time over its reduced elements in logical order
 * (outputs spread over the compute pool), in double complex: the product
 * is c10's schoolbook one, a norm is the real norm of |z| (hypot), written
 * in the part dtype (complex64 -> float32), as PyTorch's. Shapes, dims and
 * the order's rules come from tpu_reduce_parse on the input's part dtype. A
 * dtype argument must be complex (prod: the result's; norms: its part is
 * the result's); a real one is UNIMPLEMENTED (PyTorch raises).
 *
 * var and std (a real result, as PyTorch's): ATen's std_var_out takes the
 * variance of the real parts and of the imaginary parts (with the same
 * correction), each stored in the part dtype, adds them there and, for std,
 * takes the square root there. Here each part's variance is a two-pass one
 * in double (mean, then squared deviations; Welford's to rounding), then
 * rounded, added and rooted in the part dtype as ATen does. var_mean and
 * std_mean also write the mean, complex(mean of the real parts, mean of the
 * imaginary parts), each part rounded to the part dtype.
 */
#include <complex.h>
#include <math.h>
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

/* ---- prod and norms: plain loops ---------------------------------------------- */

typedef struct cx_plain {
  reduce_args_t a;   /* parsed on the part dtype's twin of the input */
  tpu_view_t in;     /* the complex input */
  tpu_dtype_t out_dtype;
  bool prod;
  reduce_out_t out; /* the row's output kind (ROUT_VAR, ROUT_STD...: the moments) */
} cx_plain_t;

static bool is_moments(reduce_out_t out) {
  return out == ROUT_VAR || out == ROUT_STD || out == ROUT_VAR_MEAN || out == ROUT_STD_MEAN;
}

static bool plain_acc(const tpu_op_def_t* def) {
  const reduce_impl_t* impl = (const reduce_impl_t*)def->impl;
  return impl->acc == RACC_PROD || impl->acc == RACC_NORM ||
         (impl->acc == RACC_MOMENTS && is_moments(impl->out));
}

static tpu_status_t plain_parse(const tpu_op_def_t* def, const tpu_node_t* node, cx_plain_t* c) {
  memset(c, 0, sizeof(*c));
  c->in = node->inputs[0].u.view;
  c->prod = ((const reduce_impl_t*)def->impl)->acc == RACC_PROD;
  c->out = ((const reduce_impl_t*)def->impl)->out;
  tpu_node_t real = *node;
  tpu_value_t in = node->inputs[0];
  in.u.view.dtype = tpu_dtype_part(c->in.dtype);
  real.inputs = &in;
  int32_t di = tpu_spec_index(def->attrs, "dtype");
  tpu_dtype_t want = TPU_DTYPE_INVALID;
  if (di >= 0 && di < real.num_attrs && real.attrs[di].kind == TPU_ATTR_DTYPE) {
    want = real.attrs[di].u.dtype;
    if (!tpu_dtype_is_complex(want)) return refuse(def, "a real dtype argument");
    real.attrs[di].kind = TPU_ATTR_NONE;
  }
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_reduce_parse(def, &real, &c->a)));
  c->a.in = &c->in;
  if (want == TPU_DTYPE_INVALID) want = c->in.dtype;
  c->out_dtype = c->prod ? want : tpu_dtype_part(want);
  c->a.shape[0].dtype = c->out_dtype;
  c->a.shape[1].dtype = c->in.dtype; /* var_mean, std_mean: the complex mean */
  return TPU_OK;
}

typedef struct plain_job {
  const cx_plain_t* c;
  const tpu_view_t* out;
  const tpu_view_t* mean; /* var_mean, std_mean: the second output; else NULL */
} plain_job_t;

static inline _Complex double load_cx(const tpu_view_t* v, int64_t off) {
  _Complex double z;
  tpu_convert(&z, TPU_DTYPE_C128, 1, view_at(v, off), v->dtype, 1, 1);
  return z;
}

/* The element offset of the k-th reduced element (row-major over the
 * reduced dims' sizes and strides) from base. */
static inline int64_t reduced_offset(int64_t base, int64_t k, const int64_t* sizes,
                                     const int64_t* strides, int32_t n) {
  for (int32_t d = n - 1; d >= 0; --d) {
    base += (k % sizes[d]) * strides[d];
    k /= sizes[d];
  }
  return base;
}

static double norm_of(const cx_plain_t* c, const tpu_view_t* in, int64_t base,
                      const int64_t* red_sizes, const int64_t* red_strides, int32_t nred) {
  double p = c->a.ord, acc = p == -INFINITY ? INFINITY : 0.0;
  bool nan = false;
  for (int64_t k = 0; k < c->a.n; ++k) {
    _Complex double z = load_cx(in, reduced_offset(base, k, red_sizes, red_strides, nred));
    double x = hypot(creal(z), cimag(z));
    nan |= isnan(x);
    if (p == 0.0) acc += x != 0.0;
    else if (p == INFINITY) acc = x > acc ? x : acc;
    else if (p == -INFINITY) acc = x < acc ? x : acc;
    else if (p == 1.0) acc += x;
    else if (p == 2.0) acc += x * x;
    else acc += pow(x, p);
  }
  if (nan) return NAN;
  if (p == 0.0 || isinf(p) || p == 1.0) return acc;
  return p == 2.0 ? sqrt(acc) : pow(acc, 1.0 / p);
}

/* var or std of the reduced elements from base: var(real parts) + var(imag parts),
 * each rounded to the part dtype, summed there (std: rooted there), as ATen; the
 * parts' means in mean[2]. */
static double moments_of(const cx_plain_t* c, const tpu_view_t* in, int64_t base,
                         const int64_t* red_sizes, const int64_t* red_strides, int32_t nred,
                         double* mean) {
  double mre = 0.0, mim = 0.0, m2re = 0.0, m2im = 0.0, n = (double)c->a.n;
  for (int64_t k = 0; k < c->a.n; ++k) {
    _Complex double z = load_cx(in, reduced_offset(base, k, red_sizes, red_strides, nred));
    mre += creal(z), mim += cimag(z);
  }
  mre /= n, mim /= n; /* no elements: NaN, as the CPU's */
  mean[0] = mre, mean[1] = mim;
  for (int64_t k = 0; k < c->a.n; ++k) {
    _Complex double z = load_cx(in, reduced_offset(base, k, red_sizes, red_strides, nred));
    double dr = creal(z) - mre, di = cimag(z) - mim;
    m2re += dr * dr, m2im += di * di;
  }
  double div = n - c->a.correction > 0.0 ? n - c->a.correction : 0.0;
  double vre = m2re / div, vim = m2im / div;
  bool root = c->out == ROUT_STD || c->out == ROUT_STD_MEAN;
  if (c->out_dtype == TPU_DTYPE_F32) {
    float v = (float)vre + (float)vim;
    return root ? (double)sqrtf(v) : (double)v;
  }
  return root ? sqrt(vre + vim) : vre + vim;
}

static void plain_chunk(void* arg, int64_t begin, int64_t end) {
  const plain_job_t* j = (const plain_job_t*)arg;
  const cx_plain_t* c = j->c;
  const tpu_view_t* in = &c->in;
  const tpu_view_t* out = j->out;
  /* kept dims (logical order) with their output dims; reduced dims */
  int64_t ksz[TPU_MAX_DIMS], kin[TPU_MAX_DIMS], kout[TPU_MAX_DIMS], kmean[TPU_MAX_DIMS];
  int64_t rsz[TPU_MAX_DIMS], rin[TPU_MAX_DIMS];
  int32_t nk = 0, nr = 0, od = 0;
  for (int32_t d = 0; d < in->ndim; ++d) {
    if (c->a.reduced[d]) {
      rsz[nr] = in->sizes[d], rin[nr++] = in->strides[d];
      if (c->a.keepdim) od++;
    } else {
      kmean[nk] = j->mean ? j->mean->strides[od] : 0;
      ksz[nk] = in->sizes[d], kin[nk] = in->strides[d], kout[nk++] = out->strides[od++];
    }
  }
  for (int64_t o = begin; o < end; ++o) {
    int64_t ib = 0, ob = 0, mb = 0, r = o;
    for (int32_t d = nk - 1; d >= 0; --d) {
      ib += (r % ksz[d]) * kin[d];
      ob += (r % ksz[d]) * kout[d];
      mb += (r % ksz[d]) * kmean[d];
      r /= ksz[d];
    }
    if (c->prod) {
      double re = 1.0, im = 0.0;
      for (int64_t k = 0; k < c->a.n; ++k) {
        _Complex double z = load_cx(in, reduced_offset(ib, k, rsz, rin, nr));
        double a = creal(z), b = cimag(z), t = re * a - im * b; /* c10's product */
        im = re * b + im * a;
        re = t;
      }
      double pair[2] = {re, im};
      tpu_convert(view_at(out, ob), out->dtype, 1, pair, TPU_DTYPE_C128, 1, 1);
    } else {
      double mean[2];
      double x = is_moments(c->out) ? moments_of(c, in, ib, rsz, rin, nr, mean)
                                    : norm_of(c, in, ib, rsz, rin, nr);
      tpu_convert(view_at(out, ob), out->dtype, 1, &x, TPU_DTYPE_F64, 1, 1);
      if (j->mean)
        tpu_convert(view_at(j->mean, mb), j->mean->dtype, 1, mean, TPU_DTYPE_C128, 1, 1);
    }
  }
}

static tpu_status_t plain_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  cx_plain_t c;
  TPU_RETURN_IF_ERROR(plain_parse(def, node, &c));
  if (node->num_outputs < c.a.num_outputs) return refuse(def, "no output");
  for (int32_t i = 0; i < c.a.num_outputs; ++i) {
    const tpu_view_t* out = &node->outputs[i];
    if (!views_same_shape(out, &c.a.shape[i]))
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: output %d has the wrong shape",
                             def->name, i);
    if (out->dtype != c.a.shape[i].dtype) return refuse(def, "an output of another dtype");
    if (tpu_views_may_overlap(out, &c.in)) return refuse(def, "an output overlapping the input");
  }
  return TPU_OK;
}

/* ---- the rows' entry points ---------------------------------------------------- */

tpu_status_t tpu_reduce_cx_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_view_t* out_views) {
  if (plain_acc(def)) {
    cx_plain_t c;
    TPU_RETURN_IF_ERROR(plain_parse(def, node, &c));
    for (int32_t i = 0; i < c.a.num_outputs; ++i) out_views[i] = c.a.shape[i];
    return TPU_OK;
  }
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
  if (plain_acc(def)) return plain_check(def, node);
  cx_reduction_t r;
  TPU_RETURN_IF_ERROR(rewrite(def, node, &r));
  return r.def->check(r.def, &r.node);
}

tpu_status_t tpu_reduce_cx_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx) {
  if (plain_acc(def)) {
    TPU_RETURN_IF_ERROR(plain_check(def, node));
    cx_plain_t c;
    TPU_RETURN_IF_ERROR(plain_parse(def, node, &c));
    plain_job_t j = {&c, &node->outputs[0], c.a.num_outputs == 2 ? &node->outputs[1] : NULL};
    int64_t outs = tpu_view_numel(&c.a.shape[0]);
    int64_t n = c.a.n > 0 ? c.a.n : 1;
    tpu_parallel_for(outs, n >= 4096 ? 1 : 4096 / n, plain_chunk, &j);
    return TPU_OK;
  }
  cx_reduction_t r;
  TPU_RETURN_IF_ERROR(rewrite(def, node, &r));
  return r.def->kernel(r.def, &r.node, ctx);
}
