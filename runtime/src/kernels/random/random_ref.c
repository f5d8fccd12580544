/* random_ref.c — the random family's reference: one element at a time in
 * row-major order, each drawing Philox block offset + i and applying the
 * transforms of random.h, reading and writing through tpu_convert. The
 * kernels must match it bit for bit whatever their tiling, threads and the
 * outputs' strides; the distributions themselves are tested statistically. */
#include "kernels/random/random.h"
#include "kernels/common/view_walk.h"

static char* elem(const tpu_view_t* v, const int64_t* coord) {
  int64_t off = 0;
  for (int32_t d = 0; d < v->ndim; ++d) off += coord[d] * v->strides[d];
  return view_at(v, off);
}

/* One floating element in compute type T: uniform, normal, dropout (x is the
 * input, *mask its draw) or dropout backward (x the gradient, *mask given). */
#define REF_FLOAT(C, T)                                                                  \
  static void ref_##C(const rng_args_t* a, const uint32_t w[4], const char* x_ptr,       \
                      tpu_dtype_t x_dtype, uint8_t* mask, const double* aux, char* dst) { \
    T v = 0, x = 0;                                                                      \
    if (x_ptr) tpu_convert(&x, TPU_DTYPE_##C, 1, x_ptr, x_dtype, 1, 1);                  \
    if (a->kind == RNG_UNIFORM) {                                                        \
      v = (T)a->lo + (T)(a->hi - a->lo) * rng_unit_##C(w);                               \
      tpu_convert(dst, a->dtype, 1, &v, TPU_DTYPE_##C, 1, 1);                            \
      tpu_convert(&v, TPU_DTYPE_##C, 1, dst, a->dtype, 1, 1);                            \
      if (v >= (T)a->hi) v = (T)a->lo;                                                   \
    } else if (a->kind == RNG_NORMAL) {                                                  \
      v = (T)a->lo + (T)a->hi * rng_normal_##C(w);                                       \
    } else if (a->kind == RNG_EXPONENTIAL) {                                             \
      v = rng_exponential_##C(w, (T)a->lo);                                              \
    } else if (a->kind == RNG_CAUCHY) {                                                  \
      v = rng_cauchy_##C(w, (T)a->lo, (T)a->hi);                                         \
    } else if (a->kind == RNG_LOG_NORMAL) {                                              \
      v = rng_log_normal_##C(w, (T)a->lo, (T)a->hi);                                     \
    } else if (a->kind == RNG_NORMAL_T) {                                                \
      v = (T)aux[0] + (T)aux[1] * rng_normal_##C(w);                                     \
    } else {                                                                             \
      if (a->kind == RNG_DROPOUT) *mask = rng_bernoulli(w, a->keep);                     \
      v = x * (T)*mask * (T)a->scale;                                                    \
    }                                                                                    \
    tpu_convert(dst, a->dtype, 1, &v, TPU_DTYPE_##C, 1, 1);                              \
  }
REF_FLOAT(F32, float)
REF_FLOAT(F64, double)
#undef REF_FLOAT

tpu_status_t tpu_random_reference(const tpu_op_def_t* def, const tpu_node_t* node) {
  rng_args_t a;
  TPU_RETURN_IF_ERROR(tpu_rng_parse(def, node, &a));
  const tpu_view_t* out = &node->outputs[0];
  tpu_view_t in = {0}, mask_in = {0};
  if (a.kind == RNG_DROPOUT || a.kind == RNG_DROPOUT_BACKWARD)
    view_expand(a.input, out->ndim, out->sizes, &in);
  if (a.kind == RNG_DROPOUT_BACKWARD) view_expand(a.mask, out->ndim, out->sizes, &mask_in);
  tpu_view_t aux_v[2] = {{0}, {0}};
  const tpu_view_t* aux_src[2] = {a.kind == RNG_NORMAL_T ? a.mean_t : a.p_t, a.std_t};
  for (int q = 0; q < 2; ++q)
    if (aux_src[q]) view_expand(aux_src[q], out->ndim, out->sizes, &aux_v[q]);
  bool f64 = tpu_dtype_compute(a.dtype) == TPU_COMPUTE_F64;
  int64_t coord[TPU_MAX_DIMS];
  for (int64_t i = 0; i < tpu_view_numel(out); ++i) {
    int64_t rem = i;
    for (int32_t d = out->ndim - 1; d >= 0; --d) {
      coord[d] = rem % out->sizes[d];
      rem /= out->sizes[d];
    }
    char* dst = elem(out, coord);
    uint32_t w[4];
    rng_block(a.seed, a.offset, i, w);
    double aux[2] = {a.lo, a.hi};
    for (int q = 0; q < 2; ++q)
      if (aux_src[q])
        tpu_convert(&aux[q], TPU_DTYPE_F64, 1, elem(&aux_v[q], coord), aux_v[q].dtype, 1, 1);
    if (a.kind == RNG_BERNOULLI_T) {
      uint8_t b = rng_bernoulli(w, aux[0]);
      tpu_convert(dst, a.dtype, 1, &b, TPU_DTYPE_BOOL, 1, 1);
    } else if (a.kind == RNG_POISSON || a.kind == RNG_GAMMA) {
      double v = a.kind == RNG_POISSON
                     ? rng_poisson(a.seed, a.offset, i, aux[0])
                     : rng_gamma(a.seed, a.offset, i, aux[0], tpu_rng_gamma_tiny(a.dtype));
      tpu_convert(dst, a.dtype, 1, &v, TPU_DTYPE_F64, 1, 1);
    } else if (a.kind == RNG_GEOMETRIC) {
      double v = rng_geometric(w, a.lo);
      tpu_convert(dst, a.dtype, 1, &v, TPU_DTYPE_F64, 1, 1);
    } else if (a.kind == RNG_BERNOULLI) {
      uint8_t b = rng_bernoulli(w, a.lo);
      tpu_convert(dst, a.dtype, 1, &b, TPU_DTYPE_BOOL, 1, 1);
    } else if (a.kind == RNG_RANDOM) {
      int64_t v = rng_integer(w, a.from, a.range);
      tpu_convert(dst, a.dtype, 1, &v, TPU_DTYPE_I64, 1, 1);
    } else if (a.kind == RNG_DROPOUT && !a.train) {
      *(uint8_t*)elem(&node->outputs[1], coord) = 1;
      tpu_convert(dst, a.dtype, 1, elem(&in, coord), in.dtype, 1, 1);
    } else {
      uint8_t mask = a.kind == RNG_DROPOUT_BACKWARD ? *(const uint8_t*)elem(&mask_in, coord) : 0;
      const char* x = in.addr ? elem(&in, coord) : NULL;
      if (f64)
        ref_F64(&a, w, x, in.dtype, &mask, aux, dst);
      else
        ref_F32(&a, w, x, in.dtype, &mask, aux, dst);
      if (a.kind == RNG_DROPOUT) *(uint8_t*)elem(&node->outputs[1], coord) = mask;
    }
  }
  return TPU_OK;
}
