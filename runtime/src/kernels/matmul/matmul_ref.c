/* matmul_ref.c — the matmul family's reference: for every output element a
 * plain dot product over strided views, accumulated in double (floating
 * dtypes) or wrapping int64 (integers), then beta * bias + alpha * sum.
 * Slow and obviously right; the C tests compare the kernels against it. */

#include "kernels/matmul/matmul.h"
#include "kernels/common/view_walk.h"

static int64_t at3(const tpu_view_t* v, int64_t b, int64_t i, int64_t j) {
  return b * v->strides[0] + i * v->strides[1] + j * v->strides[2];
}

tpu_status_t tpu_matmul_reference(const tpu_op_def_t* def, const tpu_node_t* node) {
  mm_problem_t p;
  TPU_RETURN_IF_ERROR(tpu_mm_problem(def, node, &node->outputs[0], &p));
  bool floating = tpu_dtype_is_floating(p.dtype);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        int64_t dst = at3(&p.c, b, i, j);
        if (floating) {
          double sum = 0.0;
          for (int64_t k = 0; k < p.k; ++k)
            sum += view_get_f64(&p.a, at3(&p.a, b, i, k)) * view_get_f64(&p.b, at3(&p.b, b, k, j));
          double r = p.alpha * sum;
          if (p.has_bias) r += p.beta * view_get_f64(&p.bias, at3(&p.bias, b, i, j));
          view_set_f64(&p.c, dst, r);
        } else {
          uint64_t sum = 0;
          for (int64_t k = 0; k < p.k; ++k)
            sum += (uint64_t)view_get_i64(&p.a, at3(&p.a, b, i, k)) *
                   (uint64_t)view_get_i64(&p.b, at3(&p.b, b, k, j));
          uint64_t r = (uint64_t)p.ialpha * sum;
          if (p.has_bias)
            r += (uint64_t)p.ibeta * (uint64_t)view_get_i64(&p.bias, at3(&p.bias, b, i, j));
          view_set_i64(&p.c, dst, (int64_t)r);
        }
      }
  return TPU_OK;
}
