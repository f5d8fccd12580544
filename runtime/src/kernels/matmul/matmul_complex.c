/* matmul_complex.c — the matmul family on complex64 and complex128 operands:
 * mm, bmm, addmm, baddbmm, mv, addmv, dot and vdot (which conjugates self).
 *
 * Each matrix of the batch is copied into dense row-major scratch and
 * multiplied by OpenBLAS cgemm / zgemm (scipy-openblas's symbols, one
 * thread as the real paths run it), with alpha and beta the attrs (real, or
 * complex numbers: alpha=2j); C is then copied into the output view. The bias is read into C before anything is written, so
 * the in-place forms (addmm_: out is self) work; an output overlapping a
 * factor is left to the CPU fallback, as are mixed dtypes and builds
 * without BLAS.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul/matmul.h"
#include "kernels/common/view_walk.h"

#ifdef TPU_HAVE_OPENBLAS
#include <cblas.h>
#endif

bool tpu_mm_is_complex(const tpu_node_t* node) {
  for (int32_t i = 0; i < node->num_inputs; ++i)
    if (node->inputs[i].kind == TPU_VALUE_VIEW && tpu_dtype_is_complex(node->inputs[i].u.view.dtype))
      return true;
  return false;
}

tpu_status_t tpu_mm_cx_check(const tpu_op_def_t* def, const tpu_node_t* node) {
#ifndef TPU_HAVE_OPENBLAS
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: complex operands without BLAS", def->name);
#else
  tpu_dtype_t dtype;
  TPU_RETURN_IF_ERROR(tpu_mm_blas_shape(def, node, &dtype));
  if (!node->outputs) return TPU_OK;
  const tpu_view_t* out = &node->outputs[0];
  if (out->dtype != dtype)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: %s out= of a %s product", def->name,
                           tpu_dtype_name(out->dtype), tpu_dtype_name(dtype));
  for (int32_t i = 0; i < node->num_inputs; ++i) {
    const tpu_view_t* in = &node->inputs[i].u.view;
    bool bias = i == 0 && ((const mm_spec_t*)def->impl)->has_bias;
    if (views_overlap(out, in) && !(bias && views_same(out, in)))
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: output overlaps a factor", def->name);
  }
  return TPU_OK;
#endif
}

#ifdef TPU_HAVE_OPENBLAS
/* Matrix bi of a [batch, rows, cols] view. */
static tpu_view_t matrix(const tpu_view_t* v3, int64_t bi) {
  tpu_view_t r = *v3;
  r.ndim = 2;
  r.sizes[0] = v3->sizes[1], r.sizes[1] = v3->sizes[2];
  r.strides[0] = v3->strides[1], r.strides[1] = v3->strides[2];
  r.addr = (uint64_t)(uintptr_t)view_at(v3, bi * v3->strides[0]);
  return r;
}

/* A dense row-major rows x cols view over `buf`. */
static tpu_view_t dense(void* buf, tpu_dtype_t dtype, int64_t rows, int64_t cols) {
  tpu_view_t r;
  memset(&r, 0, sizeof(r));
  r.addr = (uint64_t)(uintptr_t)buf;
  r.dtype = dtype;
  r.ndim = 2;
  r.sizes[0] = rows, r.sizes[1] = cols;
  tpu_view_set_contiguous(&r);
  return r;
}

static void conjugate(void* buf, tpu_dtype_t dtype, int64_t n) {
  if (dtype == TPU_DTYPE_C64)
    for (int64_t e = 0; e < n; ++e) ((float*)buf)[2 * e + 1] = -((float*)buf)[2 * e + 1];
  else
    for (int64_t e = 0; e < n; ++e) ((double*)buf)[2 * e + 1] = -((double*)buf)[2 * e + 1];
}
#endif

tpu_status_t tpu_mm_cx_kernel(const tpu_op_def_t* def, const tpu_node_t* node) {
  TPU_RETURN_IF_ERROR(tpu_mm_cx_check(def, node));
#ifndef TPU_HAVE_OPENBLAS
  return TPU_OK; /* not reached: the check refused */
#else
  mm_problem_t p;
  TPU_RETURN_IF_ERROR(tpu_mm_problem(def, node, &node->outputs[0], &p));
  if (tpu_view_numel(&p.c) == 0) return TPU_OK;
  const size_t es = tpu_dtype_size(p.dtype);
  const int64_t m = p.m, n = p.n, k = p.k;
  char* a = malloc(es * (size_t)(m * k + 1));
  char* b = malloc(es * (size_t)(k * n + 1));
  char* c = malloc(es * (size_t)(m * n + 1));
  if (!a || !b || !c) {
    free(a), free(b), free(c);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "%s: complex scratch allocation failed",
                           def->name);
  }
  const bool conj_a = strcmp(def->name, "vdot") == 0;
  const double alpha[2] = {p.alpha, p.alpha_im};
  const double beta[2] = {p.has_bias ? p.beta : 0.0, p.has_bias ? p.beta_im : 0.0};
  const float alpha_f[2] = {(float)alpha[0], (float)alpha[1]};
  const float beta_f[2] = {(float)beta[0], (float)beta[1]};
  const int lda = (int)(k > 0 ? k : 1), ldb = (int)(n > 0 ? n : 1), ldc = (int)(n > 0 ? n : 1);
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    tpu_view_t da = dense(a, p.dtype, m, k), db = dense(b, p.dtype, k, n),
               dc = dense(c, p.dtype, m, n);
    tpu_view_t sa = matrix(&p.a, bi), sb = matrix(&p.b, bi), sc = matrix(&p.c, bi);
    view_copy(&da, &sa);
    view_copy(&db, &sb);
    if (conj_a) conjugate(a, p.dtype, m * k);
    if (p.has_bias) {
      tpu_view_t sbias = matrix(&p.bias, bi);
      view_copy(&dc, &sbias);
    } else {
      memset(c, 0, es * (size_t)(m * n));
    }
    if (p.dtype == TPU_DTYPE_C64)
      scipy_cblas_cgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, alpha_f, a,
                  lda, b, ldb, beta_f, c, ldc);
    else
      scipy_cblas_zgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, alpha, a,
                  lda, b, ldb, beta, c, ldc);
    view_copy(&sc, &dc);
  }
  free(a), free(b), free(c);
  return TPU_OK;
#endif
}
