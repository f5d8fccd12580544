/* renorm_histc.c — two slice/bin reductions with PyTorch CPU semantics:
 *
 * renorm(self, p, dim, maxnorm): each slice along `dim` whose p-norm exceeds
 *   maxnorm is scaled by maxnorm / (norm + 1e-7), the factor rounded to
 *   self's dtype as ATen's renorm_scale_factor does. The walk pushes `dim`
 *   first, so slice i is elements [i S, (i + 1) S) of it; norms (double
 *   accumulation, orders 1, 2, inf and general p) and the scaling run one
 *   slice per parallel item, gathering BUF elements at a time.
 * histc(self, bins, min, max): counts of elements in `bins` equal bins
 *   between min and max (the data's extrema when min == max, widened by 1
 *   when those are equal too); elements outside [min, max] and NaN are
 *   ignored, the position is ATen's linear interpolation
 *   (x - min) * bins / (max - min) in self's precision, max falls in the last
 *   bin. Chunks count into private int64 histograms summed in order.
 *   Integer inputs (as CUDA allows) compute positions in the integer type.
 * Both refuse (fall back, PyTorch raising its error) what ATen rejects.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reduce/renorm_histc.h"

/* Only elementwise-identical (in, out) pairs run in place: renorm_ writes
 * each element after reading it. */

#define RH_BUF 1024
#define RH_CHUNK 65536

/* ---- renorm -------------------------------------------------------------------- */

tpu_status_t tpu_renorm_parse(const tpu_op_def_t* def, const tpu_node_t* node, renorm_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->in = ku_input(def, node, "self");
  if (!a->in) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "renorm needs a tensor");
  if (!tpu_dtype_is_floating(a->in->dtype))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "renorm of %s", tpu_dtype_name(a->in->dtype));
  a->p = tpu_attr_float(ku_attr(def, node, "p"), 2.0);
  a->maxnorm = tpu_attr_float(ku_attr(def, node, "maxnorm"), 1.0);
  if (!(a->p > 0.0) || !(a->maxnorm >= 0.0) || a->in->ndim < 1)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "renorm: p > 0, maxnorm >= 0, 1-D or more");
  return ku_unimplemented(ku_wrap_dim(tpu_attr_int(ku_attr(def, node, "dim"), 0), a->in->ndim,
                                      &a->dim));
}

/* Dims of `v` with `dim` first, as a walk over (in, out). */
static void renorm_walk(const renorm_args_t* a, const tpu_view_t* out, walk_t* w) {
  walk_start(w, 2);
  int64_t st[2] = {a->in->strides[a->dim], out->strides[a->dim]};
  walk_push(w, a->in->sizes[a->dim], st);
  for (int32_t d = 0; d < a->in->ndim; ++d) {
    if (d == a->dim) continue;
    int64_t s[2] = {a->in->strides[d], out->strides[d]};
    walk_push(w, a->in->sizes[d], s);
  }
}

double tpu_renorm_factor(const renorm_args_t* a, double norm) {
  double f = norm > a->maxnorm ? a->maxnorm / (norm + 1e-7) : 1.0;
  uint64_t storage;
  tpu_convert(&storage, a->in->dtype, 1, &f, TPU_DTYPE_F64, 1, 1);
  tpu_convert(&f, TPU_DTYPE_F64, 1, &storage, a->in->dtype, 1, 1);
  return f;
}

typedef struct renorm_job {
  const renorm_args_t* a;
  walk_t w, wo; /* (in, out), and the same dims with out as view 0 */
  const char* in;
  char* out;
  tpu_dtype_t out_dtype;
  int64_t slice;
} renorm_job_t;

static void renorm_slices(void* arg, int64_t begin, int64_t end) {
  const renorm_job_t* j = (const renorm_job_t*)arg;
  const renorm_args_t* a = j->a;
  double buf[RH_BUF];
  for (int64_t i = begin; i < end; ++i) {
    int64_t k0 = i * j->slice, k1 = k0 + j->slice;
    double acc = 0.0;
    for (int64_t k = k0; k < k1; k += RH_BUF) {
      int64_t n = k1 - k < RH_BUF ? k1 - k : RH_BUF;
      walk_gather(buf, TPU_DTYPE_F64, j->in, a->in->dtype, &j->w, k, n);
      if (a->p == 2.0)
        for (int64_t e = 0; e < n; ++e) acc += buf[e] * buf[e];
      else if (a->p == 1.0)
        for (int64_t e = 0; e < n; ++e) acc += fabs(buf[e]);
      else if (isinf(a->p)) {
        for (int64_t e = 0; e < n; ++e)
          if (acc == acc && !(fabs(buf[e]) <= acc)) acc = fabs(buf[e]); /* NaN sticks */
      } else
        for (int64_t e = 0; e < n; ++e) acc += pow(fabs(buf[e]), a->p);
    }
    double norm = a->p == 2.0 ? sqrt(acc) : (a->p == 1.0 || isinf(a->p)) ? acc : pow(acc, 1.0 / a->p);
    double f = tpu_renorm_factor(a, norm);
    for (int64_t k = k0; k < k1; k += RH_BUF) {
      int64_t n = k1 - k < RH_BUF ? k1 - k : RH_BUF;
      walk_gather(buf, TPU_DTYPE_F64, j->in, a->in->dtype, &j->w, k, n);
      for (int64_t e = 0; e < n; ++e) buf[e] *= f;
      walk_scatter(j->out, j->out_dtype, &j->wo, k, buf, TPU_DTYPE_F64, n);
    }
  }
}

static tpu_status_t renorm_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx) {
  (void)ctx;
  renorm_args_t a;
  TPU_RETURN_IF_ERROR(tpu_renorm_parse(def, node, &a));
  const tpu_view_t* out = &node->outputs[0];
  if (node->num_outputs < 1 || !views_same_shape(out, a.in))
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output has the wrong shape");
  renorm_job_t j = {&a, {0}, {0}, (const char*)tpu_view_ptr(a.in), (char*)tpu_view_ptr(out),
                    out->dtype, 0};
  renorm_walk(&a, out, &j.w);
  j.wo = j.w;
  for (int32_t d = 0; d < j.wo.ndim; ++d) j.wo.strides[0][d] = j.w.strides[1][d];
  int64_t slices = a.in->sizes[a.dim];
  if (slices == 0 || j.w.numel == 0) return TPU_OK;
  j.slice = j.w.numel / slices;
  int64_t grain = j.slice >= WALK_GRAIN ? 1 : WALK_GRAIN / (j.slice > 0 ? j.slice : 1);
  tpu_parallel_for(slices, grain, renorm_slices, &j);
  return TPU_OK;
}

static tpu_status_t renorm_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_view_t* outs) {
  renorm_args_t a;
  TPU_RETURN_IF_ERROR(tpu_renorm_parse(def, node, &a));
  outs[0] = *a.in;
  tpu_view_set_contiguous(&outs[0]);
  return TPU_OK;
}

static tpu_status_t renorm_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  renorm_args_t a;
  return tpu_renorm_parse(def, node, &a);
}

/* ---- histc -------------------------------------------------------------------- */

tpu_status_t tpu_histc_parse(const tpu_op_def_t* def, const tpu_node_t* node, histc_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->in = ku_input(def, node, "self");
  if (!a->in) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "histc needs a tensor");
  /* Integer inputs count as on CUDA (the CPU has no integer histc; models
   * such as transformers' MoE routers histogram expert ids off the CPU):
   * positions then truncate in the integer type. */
  if (!tpu_dtype_is_floating(a->in->dtype) && !tpu_dtype_is_integral(a->in->dtype))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "histc of %s", tpu_dtype_name(a->in->dtype));
  a->bins = tpu_attr_int(ku_attr(def, node, "bins"), 100);
  a->min = tpu_attr_float(ku_attr(def, node, "min"), 0.0);
  a->max = tpu_attr_float(ku_attr(def, node, "max"), 0.0);
  if (a->bins <= 0 || !(a->min <= a->max) || isinf(a->min) || isinf(a->max))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "histc: bins > 0 and finite min <= max");
  a->shape.dtype = a->in->dtype;
  a->shape.ndim = 1;
  a->shape.sizes[0] = a->bins;
  tpu_view_set_contiguous(&a->shape);
  return TPU_OK;
}

/* x rounded to the dtype (ATen computes histc positions in self's type). */
static double rnd(double x, tpu_dtype_t dt) {
  if (dt == TPU_DTYPE_F64) return x;
  uint64_t s;
  double y;
  tpu_convert(&s, dt, 1, &x, TPU_DTYPE_F64, 1, 1);
  tpu_convert(&y, TPU_DTYPE_F64, 1, &s, dt, 1, 1);
  return y;
}

int64_t tpu_histc_bin(const histc_args_t* a, double x, double lo, double hi) {
  if (!(x >= lo && x <= hi)) return -1;
  tpu_dtype_t dt = a->in->dtype;
  double pos = rnd(rnd(rnd(x - lo, dt) * (double)a->bins, dt) / rnd(hi - lo, dt), dt);
  /* An edge range that rounds to zero makes pos inf or NaN: the last bin,
   * or the first, rather than an undefined conversion. */
  if (!(pos < (double)a->bins)) return pos != pos ? 0 : a->bins - 1;
  return pos < 0 ? 0 : (int64_t)pos;
}

/* The edges histc uses: [min, max], or the data's extrema, as stored. */
tpu_status_t tpu_histc_edges(const histc_args_t* a, double* lo, double* hi) {
  *lo = a->min, *hi = a->max;
  int64_t n = tpu_view_numel(a->in);
  if (*lo == *hi && n > 0) {
    double mn = INFINITY, mx = -INFINITY;
    bool nan = false;
    for (int64_t k = 0; k < n; ++k) {
      int64_t off = 0, r = k;
      for (int32_t d = a->in->ndim - 1; d >= 0; --d) {
        off += (r % a->in->sizes[d]) * a->in->strides[d];
        r /= a->in->sizes[d];
      }
      double x = view_get_f64(a->in, off);
      nan |= x != x;
      mn = x < mn ? x : mn;
      mx = x > mx ? x : mx;
    }
    if (nan || isinf(mn) || isinf(mx))
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "torch.histogramdd: dimension 0's range [%g, %g] is not finite",
                             nan ? NAN : mn, nan ? NAN : mx);
    *lo = mn, *hi = mx;
  }
  if (*lo == *hi) *lo -= 1, *hi += 1;
  *lo = rnd(*lo, a->in->dtype);
  *hi = rnd(*hi, a->in->dtype);
  return TPU_OK;
}

typedef struct histc_job {
  const histc_args_t* a;
  walk_t w;
  const char* in;
  double lo, hi;
  int64_t* counts; /* [chunks][bins] */
} histc_job_t;

static void histc_chunks(void* arg, int64_t begin, int64_t end) {
  const histc_job_t* j = (const histc_job_t*)arg;
  double buf[RH_BUF];
  for (int64_t c = begin; c < end; ++c) {
    int64_t* h = j->counts + c * j->a->bins;
    int64_t k1 = (c + 1) * RH_CHUNK < j->w.numel ? (c + 1) * RH_CHUNK : j->w.numel;
    for (int64_t k = c * RH_CHUNK; k < k1; k += RH_BUF) {
      int64_t n = k1 - k < RH_BUF ? k1 - k : RH_BUF;
      walk_gather(buf, TPU_DTYPE_F64, j->in, j->a->in->dtype, &j->w, k, n);
      for (int64_t e = 0; e < n; ++e) {
        int64_t b = tpu_histc_bin(j->a, buf[e], j->lo, j->hi);
        if (b >= 0) h[b]++;
      }
    }
  }
}

static tpu_status_t histc_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_exec_ctx_t* ctx) {
  (void)ctx;
  histc_args_t a;
  TPU_RETURN_IF_ERROR(tpu_histc_parse(def, node, &a));
  const tpu_view_t* out = &node->outputs[0];
  if (node->num_outputs < 1 || !views_same_shape(out, &a.shape))
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output has the wrong shape");
  histc_job_t j = {&a, {0}, (const char*)tpu_view_ptr(a.in), 0, 0, NULL};
  TPU_RETURN_IF_ERROR(tpu_histc_edges(&a, &j.lo, &j.hi));
  const tpu_view_t* views[1] = {a.in};
  walk_init_views(&j.w, 1, views);
  int64_t chunks = (j.w.numel + RH_CHUNK - 1) / RH_CHUNK;
  if (chunks < 1) chunks = 1;
  j.counts = (int64_t*)calloc((size_t)(chunks * a.bins), sizeof(int64_t));
  if (!j.counts) TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for histc");
  if (tpu_view_numel(a.in) > 0) tpu_parallel_for(chunks, 1, histc_chunks, &j);
  for (int64_t c = 1; c < chunks; ++c)
    for (int64_t b = 0; b < a.bins; ++b) j.counts[b] += j.counts[c * a.bins + b];
  tpu_view_t src = view_of(j.counts, TPU_DTYPE_I64, 1, &a.bins);
  view_copy(out, &src);
  free(j.counts);
  return TPU_OK;
}

static tpu_status_t histc_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_view_t* outs) {
  histc_args_t a;
  TPU_RETURN_IF_ERROR(tpu_histc_parse(def, node, &a));
  outs[0] = a.shape;
  return TPU_OK;
}

static tpu_status_t histc_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  histc_args_t a;
  return tpu_histc_parse(def, node, &a);
}

static const tpu_op_def_t k_rows[] = {
    {.name = "renorm", .inputs = "self", .attrs = "p,dim,maxnorm", .outputs = "out",
     .aten = "renorm renorm.out renorm_", .kernel = renorm_kernel, .infer = renorm_infer,
     .check = renorm_check, .impl = NULL},
    {.name = "histc", .inputs = "self", .attrs = "bins,min,max", .outputs = "out",
     .aten = "histc histc.out", .kernel = histc_kernel, .infer = histc_infer, .check = histc_check,
     .impl = NULL},
};

const tpu_op_family_t tpu_family_renorm_histc = {"renorm_histc", k_rows,
                                                 (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
