/* fft.c — the fft family: _fft_r2c, _fft_c2c, _fft_c2r and their out=
 * forms (what every torch.fft function, stft and their backward passes
 * call), with any number of transformed dims, the three normalization modes,
 * onesided and two-sided r2c, and arbitrary input/output strides.
 *
 * A transform is a sequence of passes, one per dim (see fft.h for the order
 * PyTorch uses); a pass cuts the tensor into lines along its dim, gathers
 * each line into a contiguous buffer (converting), transforms it and
 * scatters it back, lines spread over tpu_parallel_for. The 1-D transforms
 * are fft_impl.h's, instantiated for float64 (the template takes any
 * floating type). float32 tensors are transformed in float64 too: lines are
 * converted on gather and rounded once on scatter. In float32 arithmetic the
 * results of integer-valued inputs with cancelling sums (rfft2/hfft2 OpInfo
 * samples) differed from pocketfft's by more than the 1e-5 tolerance
 * PyTorch's OpInfo comparisons use; in float64 they match to a rounding.
 * Even-length real transforms run as a
 * half-length complex transform plus a twiddle pass. The normalization
 * factor is applied by the last pass.
 *
 * Also here: conj_physical (ihfft2/ihfftn call it between transforms), the
 * one complex elementwise op the fft functions need besides mul by a real
 * factor and zero_ (those run on real views: TPU_OP_COMPLEX_AS_REAL).
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fft/fft.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#define FT double
#define FS f64
#define FDT TPU_DTYPE_F64
#define FCDT TPU_DTYPE_C128
#include "kernels/fft/fft_impl.h"
#undef FT
#undef FS
#undef FDT
#undef FCDT

static tpu_status_t unimpl(const char* msg) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s", msg);
}

tpu_status_t tpu_fft_parse(const tpu_op_def_t* def, const tpu_node_t* node, fft_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->kind = ((const fft_impl_t*)def->impl)->kind;
  a->in = ku_input(def, node, "self");
  if (!a->in) return unimpl("fft: expected a tensor");
  const tpu_view_t* in = a->in;
  bool cin = tpu_dtype_is_complex(in->dtype);
  tpu_dtype_t part = tpu_dtype_part(in->dtype);
  if (part != TPU_DTYPE_F32 && part != TPU_DTYPE_F64)
    return unimpl("fft: only float32/float64 and complex64/complex128 inputs");
  if (cin != (a->kind != FFT_R2C)) return unimpl("fft: input of the wrong kind");
  a->part = part;
  const tpu_attr_t* dims = ku_attr(def, node, "dim");
  if (!dims || dims->kind != TPU_ATTR_INTS || dims->count < 1 || dims->count > in->ndim)
    return unimpl("fft: needs a non-empty dim list");
  a->ndims = dims->count;
  bool seen[TPU_MAX_DIMS] = {false};
  for (int32_t i = 0; i < a->ndims; ++i) {
    TPU_RETURN_IF_ERROR(ku_wrap_dim(dims->u.ints[i], in->ndim, &a->dims[i]));
    if (in->ndim == 0 || seen[a->dims[i]]) return unimpl("fft: repeated dims");
    seen[a->dims[i]] = true;
  }
  int64_t norm = tpu_attr_int(ku_attr(def, node, "normalization"), 0);
  if (norm < 0 || norm > 2) return unimpl("fft: unknown normalization");
  const int32_t last = a->dims[a->ndims - 1];
  a->shape = *in;
  a->shape.addr = 0;
  if (a->kind == FFT_R2C) {
    a->sign = -1;
    a->onesided = tpu_attr_bool(ku_attr(def, node, "onesided"), true);
    a->shape.dtype = tpu_dtype_to_complex(part);
    if (a->onesided) a->shape.sizes[last] = in->sizes[last] / 2 + 1;
  } else if (a->kind == FFT_C2C) {
    a->sign = tpu_attr_bool(ku_attr(def, node, "forward"), true) ? -1 : 1;
  } else {
    a->sign = 1;
    a->last_size = tpu_attr_int(ku_attr(def, node, "last_dim_size"), 0);
    if (a->last_size < 1 || in->sizes[last] < a->last_size / 2 + 1)
      return unimpl("fft: c2r needs last_dim_size/2+1 inputs along the last dim");
    a->shape.dtype = part;
    a->shape.sizes[last] = a->last_size;
  }
  tpu_view_set_contiguous(&a->shape);
  double n = 1;
  for (int32_t i = 0; i < a->ndims; ++i) {
    int64_t size = a->kind == FFT_C2R ? a->shape.sizes[a->dims[i]] : in->sizes[a->dims[i]];
    if (size < 1) return unimpl("fft: a transformed dim is empty");
    n *= (double)size;
  }
  a->scale = norm == 0 ? 1.0 : norm == 1 ? 1.0 / sqrt(n) : 1.0 / n;
  return TPU_OK;
}

static tpu_status_t fft_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_view_t* out_views) {
  fft_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_fft_parse(def, node, &a)));
  out_views[0] = a.shape;
  return TPU_OK;
}

static tpu_status_t fft_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  fft_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_fft_parse(def, node, &a)));
  if (node->num_outputs == 0) return TPU_OK;
  const tpu_view_t* o = &node->outputs[0];
  if (!views_same_shape(o, &a.shape) || o->dtype != a.shape.dtype)
    return unimpl("fft: output of another shape or dtype");
  if (o->addr > 1 && views_overlap(o, a.in)) return unimpl("fft: output overlaps the input");
  return TPU_OK;
}

typedef tpu_status_t (*fft_run_fn)(const fft_args_t* a, const tpu_view_t* out);
static const fft_run_fn k_run[TPU_COMPUTE_COUNT] = {
    [TPU_COMPUTE_F32] = fft_run_f64, /* see the note at the top */
    [TPU_COMPUTE_F64] = fft_run_f64,
};

static tpu_status_t fft_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_exec_ctx_t* ctx) {
  (void)ctx;
  fft_args_t a;
  TPU_RETURN_IF_ERROR(tpu_fft_parse(def, node, &a));
  const tpu_view_t* out = &node->outputs[0];
  if (tpu_view_numel(out) == 0) return TPU_OK;
  return k_run[tpu_dtype_compute(a.part)](&a, out);
}

/* ---- conj_physical: what ihfft2/ihfftn call between their transforms -------------- */

static tpu_status_t conj_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_view_t* out_views) {
  const tpu_view_t* in = ku_input(def, node, "self");
  if (!in) return unimpl("conj_physical: expected a tensor");
  out_views[0] = *in;
  out_views[0].addr = 0;
  tpu_view_set_contiguous(&out_views[0]);
  return TPU_OK;
}

static tpu_status_t conj_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  tpu_view_t shape;
  TPU_RETURN_IF_ERROR(conj_infer(def, node, &shape));
  const tpu_view_t* in = ku_input(def, node, "self");
  return ku_check_dim_outputs(node, in, &shape, 1);
}

typedef struct conj_job {
  walk_t walk; /* view 0: output imaginary parts, 1: input imaginary parts */
  char *dst, *src;
  tpu_dtype_t dtype;
  int64_t size;
} conj_job_t;

static void conj_run(void* arg, const int64_t* offs, const int64_t* steps, int64_t n,
                     int64_t first) {
  (void)first;
  const conj_job_t* j = (const conj_job_t*)arg;
  double buf[256];
  for (int64_t i = 0; i < n; i += 256) {
    int64_t m = n - i < 256 ? n - i : 256;
    tpu_convert(buf, TPU_DTYPE_F64, 1, j->src + (offs[1] + i * steps[1]) * j->size, j->dtype,
                steps[1], m);
    for (int64_t e = 0; e < m; ++e) buf[e] = -buf[e];
    tpu_convert(j->dst + (offs[0] + i * steps[0]) * j->size, j->dtype, steps[0], buf,
                TPU_DTYPE_F64, 1, m);
  }
}

static void conj_chunk(void* arg, int64_t begin, int64_t end) {
  conj_job_t* j = (conj_job_t*)arg;
  walk_range(&j->walk, begin, end, conj_run, j);
}

/* out = conj(self): the real parts copied, the imaginary parts negated; a real
 * tensor is copied. */
static tpu_status_t conj_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  (void)ctx;
  TPU_RETURN_IF_ERROR(conj_check(def, node));
  const tpu_view_t* in = ku_input(def, node, "self");
  const tpu_view_t* out = &node->outputs[0];
  if (!tpu_dtype_is_complex(in->dtype)) {
    view_copy(out, in);
    return TPU_OK;
  }
  tpu_view_t ore = fft_part_view(out, 0), ire = fft_part_view(in, 0);
  view_copy(&ore, &ire);
  tpu_view_t oim = fft_part_view(out, 1), iim = fft_part_view(in, 1);
  conj_job_t j;
  const tpu_view_t* views[2] = {&oim, &iim};
  walk_init_views(&j.walk, 2, views);
  j.dst = (char*)tpu_view_ptr(&oim);
  j.src = (char*)tpu_view_ptr(&iim);
  j.dtype = oim.dtype;
  j.size = (int64_t)tpu_dtype_size(oim.dtype);
  tpu_parallel_for(j.walk.numel, WALK_GRAIN, conj_chunk, &j);
  return TPU_OK;
}

static const fft_impl_t k_r2c = {FFT_R2C}, k_c2c = {FFT_C2C}, k_c2r = {FFT_C2R};

static const tpu_op_def_t k_rows[] = {
    {.name = "fft_r2c", .inputs = "self", .attrs = "dim,normalization,onesided", .outputs = "out",
     .aten = "_fft_r2c _fft_r2c.out", .kernel = fft_kernel, .infer = fft_infer, .check = fft_check,
     .impl = &k_r2c, .flags = TPU_OP_COMPLEX},
    {.name = "fft_c2c", .inputs = "self", .attrs = "dim,normalization,forward", .outputs = "out",
     .aten = "_fft_c2c _fft_c2c.out", .kernel = fft_kernel, .infer = fft_infer, .check = fft_check,
     .impl = &k_c2c, .flags = TPU_OP_COMPLEX},
    {.name = "fft_c2r", .inputs = "self", .attrs = "dim,normalization,last_dim_size",
     .outputs = "out", .aten = "_fft_c2r _fft_c2r.out", .kernel = fft_kernel, .infer = fft_infer,
     .check = fft_check, .impl = &k_c2r, .flags = TPU_OP_COMPLEX},
    {.name = "conj_physical", .inputs = "self", .attrs = "", .outputs = "out",
     .aten = "_conj_physical conj_physical.out conj_physical_", .kernel = conj_kernel,
     .infer = conj_infer, .check = conj_check, .impl = NULL, .flags = TPU_OP_COMPLEX},
};

const tpu_op_family_t tpu_family_fft = {"fft", k_rows,
                                        (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
