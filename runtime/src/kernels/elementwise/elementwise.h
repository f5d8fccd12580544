/* kernels/elementwise/elementwise.h — the elementwise family's private interface, shared
 * by executor.c (the executor), op_table.c (tile functions and op
 * rows), copy.c (copy and fill) and tests/test_elementwise.c.
 *
 * An elementwise op is described by a tpu_ew_impl_t (the row's `impl`):
 *   - a dtype rule: which dtype the op computes in ("common") and which dtype
 *     its functional form returns ("result"),
 *   - one tile function per compute type (tpu/dtype.h: B8, I64, F32, F64),
 *     NULL where PyTorch does not support the dtype (check then answers
 *     UNIMPLEMENTED and the bridge falls back to CPU, which raises PyTorch's
 *     own error),
 *   - how its number attributes (alpha, min_val, ...) become tile parameters.
 *
 * The executor (tpu_ew_kernel) broadcasts the inputs to the output's shape,
 * orders and collapses dims, and runs the output in tiles of up to
 * TPU_EW_TILE elements, in parallel. For each tile, every input is handed to
 * the tile function as a contiguous array of its compute type: in place when
 * the tensor already is one, else gathered and converted into per-thread
 * scratch. The result is written in place or converted and scattered. A tile
 * function is therefore a plain loop over arrays that the compiler
 * vectorises; the output array may be exactly input 0's array (in-place ops).
 *
 * Values follow PyTorch's TensorIterator: tensors are cast to the common
 * dtype, Python numbers too (except opmath ops on half tensors, which keep
 * them in float32), the op computes in the common dtype's compute type, and
 * the result is rounded to the result dtype before it is cast to an output
 * of another dtype (out=, in-place). Partial overlap of an input with the
 * output is PyTorch's "unsupported operation" error; an output broadcast
 * over a dim (stride 0) too.
 */
#ifndef TPU_KERNELS_ELEMENTWISE_H_
#define TPU_KERNELS_ELEMENTWISE_H_

#include <stdbool.h>
#include <stdint.h>

#include "kernel.h"

#define TPU_EW_MAX_INPUTS 4
#define TPU_EW_MAX_PARAMS 4
/* Elements per tile: the scratch of one operand is at most 16 KiB. */
#define TPU_EW_TILE 2048

/* Per-node parameters of a tile function: the op's number attributes, each
 * as a double (floating compute) and as an int64 (integer/bool compute), and
 * an op-specific mode (rounding mode, approximation, exponent special case). */
typedef struct tpu_ew_params {
  double f[TPU_EW_MAX_PARAMS];
  double fi[TPU_EW_MAX_PARAMS]; /* a complex number attr's imaginary part (complex nodes) */
  int64_t i[TPU_EW_MAX_PARAMS];
  int32_t mode;
} tpu_ew_params_t;

/* Computes out[0..n) from in[k][0..n). Arrays hold the compute type of the
 * op (the output of a BOOL_OUT op and inputs named in `bool_in` are B8);
 * in[k] is NULL for an absent optional input. Returns 0, or a TPU_EW_ERR_*
 * code that stops the node. */
typedef int (*tpu_ew_tile_fn)(void* out, const void* const* in, int64_t n,
                              const tpu_ew_params_t* p);

enum { TPU_EW_ERR_ZERO_DIV = 1, TPU_EW_ERR_NO_MEMORY = 2 };

typedef enum tpu_ew_rule {
  TPU_EW_PROMOTE = 0, /* common = result = result_type(promoted inputs) */
  TPU_EW_FLOAT,       /* the same, with bool/integer results becoming float32 */
  TPU_EW_BOOL_OUT,    /* common = result_type(inputs), result = bool */
  TPU_EW_FIRST,       /* common = result = dtype of input 0 (masked_fill, fill) */
  TPU_EW_DIV,         /* FLOAT without a rounding mode (attr 0), PROMOTE with one */
} tpu_ew_rule_t;

enum tpu_ew_flags {
  /* Python numbers keep float precision when the common dtype is a half type
   * (PyTorch reads them as opmath values: add, sub, mul, div, lerp). */
  TPU_EW_OPMATH_SCALAR = 1 << 0,
  /* Every tensor input must already have the common dtype (lerp). */
  TPU_EW_SAME_DTYPE = 1 << 1,
  /* The last input, when a tensor, must be 0-dim (masked_fill value, fill). */
  TPU_EW_VALUE_0DIM = 1 << 2,
  /* Attr 0 is `alpha`: not floating for integer/bool results, bool only for
   * bool results. */
  TPU_EW_ALPHA = 1 << 3,
  /* No operand may be bool, tensor or number (sub: PyTorch refuses it). */
  TPU_EW_NO_BOOL = 1 << 4,
  /* On complex operands the result is real, of their part dtype (abs,
   * angle); the impl's cx function writes it as the real part. */
  TPU_EW_CX_PART = 1 << 5,
};

/* Op-specific validation and parameter setup, after the generic parsing
 * (params->f/i hold the number attrs). May set params->mode. Returns
 * UNIMPLEMENTED for arguments PyTorch rejects (the CPU fallback raises the
 * exact error) and INVALID_ARGUMENT for ones that are plainly malformed. */
typedef tpu_status_t (*tpu_ew_prepare_fn)(const tpu_node_t* node, tpu_dtype_t common,
                                          tpu_ew_params_t* params);

/* Complex math (complex.c runs it, complex_math.c defines it). A node with a
 * complex operand (tpu/dtype.h: complex64, complex128) runs on its impl's
 * `cx` function: every operand is converted to double complex (a real one
 * has imaginary part 0, a bool condition is 1 or 0), the function computes
 * out[0..n) from in[k][0..n) (NULL for an absent optional input), and the
 * result is rounded once to the result dtype (a real or bool result is the
 * real part); params->mode says which precision the math rounds to. An impl without one leaves complex nodes to the CPU fallback
 * (UNIMPLEMENTED). */
typedef double _Complex tpu_ew_cx_t;

/* re + i im. C11's CMPLX is not portable: glibc's <complex.h> defines it
 * only for GCC >= 4.7, and clang reports itself as GCC 4.2 (the fuzzing
 * build). C11 lays a complex number out as its two parts. */
static inline tpu_ew_cx_t tpu_ew_cx_make(double re, double im) {
  union {
    tpu_ew_cx_t z;
    double p[2];
  } u = {.p = {re, im}};
  return u.z;
}
/* params->mode of a complex node: its math rounds to complex64 (ops that
 * must follow PyTorch's float math read it) or to complex128. */
enum { TPU_EW_CX_DOUBLE = 0, TPU_EW_CX_SINGLE = 1 };
typedef void (*tpu_ew_cx_fn)(tpu_ew_cx_t* out, const tpu_ew_cx_t* const* in, int64_t n,
                             const tpu_ew_params_t* params);

/* The ops with complex math, one tpu_ew_cx_<op> each. */
#define TPU_EW_CX_LIST(X)                                                                      \
  X(add) X(sub) X(rsub) X(mul) X(div) X(pow) X(neg) X(reciprocal) X(abs) X(angle) X(sgn) X(exp) \
  X(exp2) X(expm1) X(log) X(log2) X(log10) X(log1p) X(sqrt) X(rsqrt) X(sigmoid) X(sin) X(cos)   \
  X(tan) X(asin) X(acos) X(atan) X(sinh) X(cosh) X(tanh) X(asinh) X(acosh) X(atanh) X(eq)     \
  X(ne) X(where) X(masked_fill) X(lerp) X(addcmul) X(addcdiv)
#define TPU_EW_CX_DECLARE(op)                                                           \
  void tpu_ew_cx_##op(tpu_ew_cx_t* out, const tpu_ew_cx_t* const* in, int64_t n, \
                      const tpu_ew_params_t* params);
TPU_EW_CX_LIST(TPU_EW_CX_DECLARE)
#undef TPU_EW_CX_DECLARE

typedef struct tpu_ew_impl {
  tpu_ew_rule_t rule;
  uint8_t promote;        /* inputs taking part in type promotion (bit k: input k), 0: all */
  uint8_t bool_in;        /* inputs read as B8 (conditions, masks): must be bool tensors */
  uint8_t checked;        /* inputs whose Python number must fit the common dtype */
  uint8_t flags;          /* tpu_ew_flags */
  uint8_t num_params;     /* leading attrs read as numbers into the params */
  uint8_t checked_params; /* of those, the ones that must fit the common dtype */
  double dflt[TPU_EW_MAX_PARAMS]; /* values of absent (None) number attrs */
  tpu_ew_prepare_fn prepare;      /* optional */
  tpu_ew_tile_fn fn[TPU_COMPUTE_COUNT];
  tpu_ew_cx_fn cx; /* complex operands; NULL: they fall back */
} tpu_ew_impl_t;

/* A node resolved against its impl: dtypes, tile function, parameters. */
typedef struct tpu_ew_plan {
  const tpu_ew_impl_t* impl;
  tpu_dtype_t common; /* dtype the op computes in (before widening to compute type) */
  tpu_dtype_t result; /* dtype of a functional output */
  tpu_compute_type_t ct;
  tpu_ew_tile_fn fn;
  tpu_ew_params_t params;
} tpu_ew_plan_t;

tpu_status_t tpu_ew_plan(const tpu_op_def_t* def, const tpu_node_t* node, tpu_ew_plan_t* plan);
/* The dtype the node's promoted inputs (the impl's `promote` set) give
 * (tpu_result_type); INVALID_ARGUMENT for a wrong input count or none. */
tpu_status_t tpu_ew_promote(const tpu_op_def_t* def, const tpu_node_t* node,
                            tpu_dtype_t* out_dtype);

/* The row functions of every elementwise op. */
tpu_status_t tpu_ew_kernel(const tpu_op_def_t* def, const tpu_node_t* node, tpu_exec_ctx_t* ctx);
/* tpu_ew_kernel with the plan tpu_ew_plan gave for this node or for one
 * equal to it but for addresses and shapes (the fusion interpreter's
 * per-node plans: fusion.h): the node must not be complex, nor of an impl
 * with TPU_EW_VALUE_0DIM (whose plan reads a shape). Borrows both. */
tpu_status_t tpu_ew_kernel_planned(const tpu_op_def_t* def, const tpu_node_t* node,
                                   const tpu_ew_plan_t* plan);
tpu_status_t tpu_ew_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* out_views);
tpu_status_t tpu_ew_check(const tpu_op_def_t* def, const tpu_node_t* node);
/* The same three for a node with a complex operand (complex.c; the
 * functions above hand such nodes on to these). */
bool tpu_ew_node_is_complex(const tpu_node_t* node);
tpu_status_t tpu_ew_cx_kernel(const tpu_op_def_t* def, const tpu_node_t* node);
tpu_status_t tpu_ew_cx_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                             tpu_view_t* out_views);
tpu_status_t tpu_ew_cx_check(const tpu_op_def_t* def, const tpu_node_t* node);
/* The impl's number attrs read into plan->params (plan->impl and
 * plan->common set), with PyTorch's range checks. */
tpu_status_t tpu_ew_parse_params(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_ew_plan_t* plan);

/* dst = src converted to dst's dtype, src broadcast to dst's shape (any
 * dtype pair, any strides; a same-dtype copy moves bits unchanged). */
tpu_status_t tpu_ew_copy(const tpu_view_t* dst, const tpu_view_t* src);

/* Whether a Python number fits `dtype` without overflow (c10's checked
 * conversion: uint8 takes [-255, 255], floats any finite value in range or
 * inf/nan, bool anything). */
bool tpu_ew_scalar_fits(const tpu_scalar_t* s, tpu_dtype_t dtype);

/* Largest finite value of a floating dtype (0 for others). */
double tpu_ew_dtype_max(tpu_dtype_t dtype);

/* Runs `impl` as a one-output elementwise node named `name` over `inputs`
 * (nin of them) with `attrs`, writing `out`: the building block of ops
 * that are several elementwise passes (glu: two halves of one input;
 * _prelu_kernel_backward, log_sigmoid_forward: two outputs). */
tpu_status_t tpu_ew_run_impl(const tpu_ew_impl_t* impl, const char* name,
                             const tpu_value_t* inputs, int32_t nin, const tpu_attr_t* attrs,
                             int32_t nattrs, const tpu_view_t* out);
/* The result dtype of `impl` over these inputs (for infer functions). */
tpu_status_t tpu_ew_result_dtype(const tpu_ew_impl_t* impl, const char* name,
                                 const tpu_value_t* inputs, int32_t nin, const tpu_attr_t* attrs,
                                 int32_t nattrs, tpu_dtype_t* dtype);

extern const tpu_op_family_t tpu_family_elementwise;
extern const tpu_op_family_t tpu_family_elementwise_special;
extern const tpu_op_family_t tpu_family_elementwise_complex;
extern const tpu_op_family_t tpu_family_activation;
extern const tpu_op_family_t tpu_family_copy;

#endif /* TPU_KERNELS_ELEMENTWISE_H_ */
