/* matmul.h — the matmul family's private interface (matmul.c, matmul_ref.c,
 * tests/test_matmul.c).
 *
 * Every op of the family (mm, bmm, addmm, baddbmm, mv, addmv, dot) is one
 * batched problem  C[b] = beta * bias[b] + alpha * (A[b] @ B[b])  whose
 * operands are 3-D [batch, rows, cols] views; a row's `impl` (mm_spec_t)
 * says how its inputs map onto it. Each row's last attr, "matmul_precision",
 * is filled by the bridge (absent: highest).
 */
#ifndef TPU_KERNELS_MATMUL_H_
#define TPU_KERNELS_MATMUL_H_

#include <stdbool.h>
#include <stdint.h>

#include "kernel.h"
#include "tpu/ops.h"

typedef struct mm_spec {
  bool has_bias;          /* input 0 is `self`, added as beta * self; attrs "beta,alpha" */
  int32_t a_rank, b_rank; /* factor ranks: mm 2,2; bmm 3,3; mv 2,1; dot 1,1 */
} mm_spec_t;

/* torch.set_float32_matmul_precision, as the bridge records it on each node
 * (at::Float32MatmulPrecision's order): float32 GEMMs in float32, as three
 * bfloat16 passes (hi*hi + hi*lo + lo*hi), or as one, on the matrix unit. */
enum { MM_PRECISION_HIGHEST = 0, MM_PRECISION_HIGH = 1, MM_PRECISION_MEDIUM = 2 };

typedef struct mm_problem {
  int64_t batch, m, n, k;
  tpu_dtype_t dtype;          /* of A, B and bias */
  tpu_view_t a, b, c, bias;   /* [batch,m,k], [batch,k,n], [batch,m,n], [batch,m,n] */
  bool has_bias;              /* false also when beta == 0: self is then ignored */
  double alpha, beta;         /* floating dtypes (complex numbers: the real parts) */
  double alpha_im, beta_im;   /* complex numbers' imaginary parts (complex operands only) */
  int32_t precision;          /* float32: MM_PRECISION_* (attr "matmul_precision") */
  int64_t ialpha, ibeta;      /* integer dtypes */
  const tpu_graph_t* graph;   /* the graph the node runs in (tpu_exec_ctx_t), or NULL */
} mm_problem_t;

/* Validates the node's inputs and gives the result's shape and dtype. */
tpu_status_t tpu_mm_result(const tpu_op_def_t* def, const tpu_node_t* node, int32_t* ndim,
                           int64_t* sizes, tpu_dtype_t* dtype);

/* tpu_mm_result, then what BLAS needs of the node: every operand of the
 * result's dtype (*out_dtype) and every dim of the factors and the result
 * within int; UNIMPLEMENTED (the CPU fallback) otherwise. */
tpu_status_t tpu_mm_blas_shape(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_dtype_t* out_dtype);

/* Builds the problem of a node writing `out` (validated against the result). */
tpu_status_t tpu_mm_problem(const tpu_op_def_t* def, const tpu_node_t* node,
                            const tpu_view_t* out, mm_problem_t* p);

/* Whether C may be written while the problem runs: it overlaps neither
 * factor, and the bias is C itself (the in-place forms) or apart from it.
 * The paths that write C directly (BLAS in place, the matrix unit, the
 * gemv) take only such problems. */
bool tpu_mm_c_writable(const mm_problem_t* p);

/* A GEMM group's epilogue (fusion/epilogue.c): `run` is called once for
 * every block [i0, i0 + m) x [j0, j0 + n) of batch `bi` of C, as soon as
 * that block is final, on the compute pool's threads, several at once and in
 * any order; `block` numbers the blocks alike on every run of the same
 * problem (it orders errors). Blocks cover C exactly once. */
typedef struct mm_epilogue {
  void (*run)(void* arg, int64_t block, int64_t bi, int64_t i0, int64_t m, int64_t j0,
              int64_t n);
  void* arg;
} mm_epilogue_t;

/* Runs a node of a TPU_OP_EPILOGUE row (mm, bmm, addmm, baddbmm) as its
 * kernel does, and `ep` (borrowed; NULL: none) on every block of its result
 * as the BLAS path finishes it. *out_ran says whether the epilogue ran on
 * every block: it did on the BLAS path, even where a block's GEMM failed
 * (that block's values are unspecified, as a failed op's output is); false
 * when one call computed C (the matrix unit, the gemv) or the node was
 * refused, and the caller then runs the epilogue over all of C. `ctx` is
 * the kernel's (the graph it runs in). */
tpu_status_t tpu_mm_run(const tpu_node_t* node, const mm_epilogue_t* ep, tpu_exec_ctx_t* ctx,
                        bool* out_ran);

/* A float16/bfloat16 problem with one row or one column of C, whose matrix
 * has a dense dimension, as a matrix-vector product that streams the matrix
 * once (matmul_gemv.c). *out_done false (TPU_OK): not taken, the caller runs
 * it as a GEMM. C must be of the problem's dtype. */
tpu_status_t tpu_mm_half_gemv(const mm_problem_t* p, bool* out_done);

/* acc[c] = sum_{i<k} x[i] * m[c * sj + i] for c < cols: dot products of a
 * float32 vector with int8 columns (each dense), in float32, at the gemv's
 * kernel level (matmul_gemv.c). */
void tpu_mm_dot_i8(const float* x, int64_t k, const int8_t* m, int64_t sj, int64_t cols,
                   float* acc);

/* For tests: caps the gemv's kernels at `level` (2 AVX-512, 1 AVX2,
 * 0 portable; -1 lifts the cap) and returns the level that runs, which is at
 * most what the CPU has. Process-wide. */
int tpu_mm_gemv_set_level(int level);

/* Plain reference: triple loop, double (or wrapping int64) accumulation. */
tpu_status_t tpu_matmul_reference(const tpu_op_def_t* def, const tpu_node_t* node);

/* Complex operands (matmul_complex.c): the family's row functions hand a
 * node with a complex input to these (cgemm / zgemm per matrix). */
bool tpu_mm_is_complex(const tpu_node_t* node);
tpu_status_t tpu_mm_cx_check(const tpu_op_def_t* def, const tpu_node_t* node);
tpu_status_t tpu_mm_cx_kernel(const tpu_op_def_t* def, const tpu_node_t* node);

#endif /* TPU_KERNELS_MATMUL_H_ */
