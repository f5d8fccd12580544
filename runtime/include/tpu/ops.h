/* tpu/ops.h — the op table: every op the runtime executes, described as data.
 *
 * Each op is one tpu_op_def_t row, written once, in the kernel family that
 * implements it (src/kernels/<family>.c). A row says
 *   - name:     the runtime's name ("add", "sum", "mm"),
 *   - inputs:   comma-separated names of its tensor/scalar operands, matched
 *               by name against an ATen schema's arguments ("self,other");
 *               a trailing '*' marks a tensor-list operand ("tensors*"),
 *               a trailing '!' an operand the kernel writes in place (a
 *               mutated input such as batch norm's "running_mean!"; a
 *               TPU_OP_FOREACH row's lists may be both: "exp_avgs*!"),
 *               a trailing '?' an operand that may be absent (an optional
 *               "weight?"), a trailing '#' one that may be a number in a
 *               row that is not TPU_OP_POINTWISE ("value#"; pointwise rows
 *               take numbers for every operand). tpu_op_check and
 *               tpu_op_infer refuse a node whose required operand is absent
 *               (INVALID_ARGUMENT) or that passes a number elsewhere
 *               (UNIMPLEMENTED: the CPU fallback runs it),
 *   - attrs:    comma-separated names of its non-tensor arguments ("alpha"),
 *               stored in node->attrs in this order,
 *   - outputs:  names of the ATen out= arguments it writes ("out" or
 *               "values,indices"); functional forms allocate them,
 *   - aten:     the ATen overloads this op implements, space separated
 *               ("add.Tensor add_.Tensor add.out"),
 *   - kernel:   runs one node on the host driver,
 *   - infer:    output metadata for functional forms (NULL: the bridge asks
 *               PyTorch's meta kernels),
 *   - check:    whether a concrete node (dtypes, ranks) runs natively
 *               (NULL: always); UNIMPLEMENTED means "fall back".
 * The registry gathers all families' rows; an op's id is its row index.
 */
#ifndef TPU_OPS_H_
#define TPU_OPS_H_

#include "tpu/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_exec_ctx tpu_exec_ctx_t; /* see src/kernel.h */
typedef struct tpu_op_def tpu_op_def_t;

typedef tpu_status_t (*tpu_kernel_fn)(const tpu_op_def_t* def, const tpu_node_t* node,
                                      tpu_exec_ctx_t* ctx);
/* Fills dtype, ndim, sizes and (contiguous) strides of each output view from
 * the node's inputs and attrs; `node->outputs` is not read. The factory rows
 * (arange, linspace, logspace, eye: no tensor input decides their dtype, and
 * PyTorch's functional forms call their out= overloads) read one thing the
 * caller sets: out_views[0].dtype, the out= tensor's dtype (anything else
 * there, e.g. TPU_DTYPE_INVALID: UNIMPLEMENTED). Other rows ignore what
 * out_views holds. */
typedef tpu_status_t (*tpu_infer_fn)(const tpu_op_def_t* def, const tpu_node_t* node,
                                     tpu_view_t* out_views);
typedef tpu_status_t (*tpu_check_fn)(const tpu_op_def_t* def, const tpu_node_t* node);
/* Row-local ops (optional): returns k >= 1 when, for every index of the
 * node's leading k dims (its rows), the outputs at that index depend only on
 * the same index of the row inputs (bit j of *out_row_inputs set for input j)
 * and on the other inputs as a whole; every output and row input then has
 * those k leading dims. Returns 0 when this node is not (e.g. a reduction
 * over dim 0). The fusion compiler runs such nodes a block of rows at a
 * time, together with pointwise neighbours. */
typedef int32_t (*tpu_rows_fn)(const tpu_op_def_t* def, const tpu_node_t* node,
                               uint32_t* out_row_inputs);
/* Random rows (a "seed" attr; optional): whether this node draws numbers.
 * The bridge reserves Philox offsets from the generator only for a node
 * that draws (rrelu_with_noise in evaluation does not, as on the CPU). */
typedef bool (*tpu_draws_fn)(const tpu_op_def_t* def, const tpu_node_t* node);

struct tpu_op_def {
  const char* name;
  const char* inputs;
  const char* attrs;
  const char* outputs;
  const char* aten;
  tpu_kernel_fn kernel;
  tpu_infer_fn infer;
  tpu_check_fn check;
  const void* impl; /* family-private data (e.g. an elementwise op's tile functions) */
  uint32_t flags;   /* TPU_OP_* below; 0 for most rows */
  tpu_rows_fn rows; /* NULL: not row-local */
  tpu_draws_fn draws; /* NULL: a row with a seed attr always draws */
};

/* PyTorch rejects outputs that share memory with an input for this op
 * ("some elements of the input tensor and the written-to tensor refer to a
 * single memory location"): tpu_op_check returns INVALID_ARGUMENT for them. */
#define TPU_OP_OUT_NO_OVERLAP 1u
/* The kernel handles outputs that share memory with inputs itself, as
 * TensorIterator does (an output may be exactly one of the inputs; partial
 * overlap is an error): elementwise rows. Other rows whose out= overlaps an
 * input are run by the bridge from copies, on the CPU. */
#define TPU_OP_OWN_OVERLAP_CHECK 2u
/* Pointwise: output element i depends only on element i of each input
 * broadcast to the output's shape (right-aligned, size-1 dims repeat), so
 * the kernel may run on any slice of the output with the matching slices of
 * the inputs. The fusion compiler tiles runs of such nodes together. */
#define TPU_OP_POINTWISE 16u
/* The row takes complex operands (complex64/complex128 views, or a complex
 * dtype attr); its own check says which. Without this flag tpu_op_check and
 * tpu_op_infer refuse such nodes (UNIMPLEMENTED: the CPU fallback runs
 * them), so kernels written for real dtypes never see a complex one. */
#define TPU_OP_COMPLEX 4u
/* The row reads complex Python numbers: complex scalar inputs (x * 1j) and
 * complex number attrs (TPU_ATTR_COMPLEX: alpha=2j), as the elementwise
 * rows' complex kernels do (with TPU_OP_COMPLEX). Every other row refuses
 * them (UNIMPLEMENTED: the CPU fallback runs them), so a kernel that reads
 * numbers as v.f / v.i or tpu_attr_float never sees a complex one. */
#define TPU_OP_COMPLEX_NUMBERS 2048u
/* The op is real-linear in input 0 (mul by a real factor, zero_): a node
 * whose input 0 is complex and whose other operands are real runs on real
 * views (tpu_node_complex_as_real): each complex view becomes its (..., 2)
 * real view, each real view of one or more dims gains a trailing dim of 1
 * (broadcast over the pair), and the row's own check, infer and kernel see
 * only real dtypes. Other complex nodes are refused, unless the row is also
 * TPU_OP_COMPLEX: then they reach its own check, infer and kernel (mul: a
 * complex product). */
#define TPU_OP_COMPLEX_AS_REAL 8u
/* The op only moves elements (gather, index_select, index): a node with
 * complex64 operands runs on them as int64 views of the same layout (8
 * bytes each, bit for bit), so its row's check, infer and kernel see only
 * real dtypes; int64 outputs of such a node are the complex data. A
 * complex128 operand, or a complex dtype attr, is refused. Wide unsigned
 * operands run as their signed twins the same way (see below). */
#define TPU_OP_COMPLEX_AS_BITS 128u
/* The row takes the wide unsigned dtypes (uint16/32/64, tpu/dtype.h) as they
 * are: its kernel moves them with tpu_convert (copy, fill). */
#define TPU_OP_UNSIGNED 512u
/* The result's bits do not depend on signedness (bitwise and/or/xor/not,
 * eq, ne): a node whose integer operands all have one wide unsigned dtype
 * runs on views of its signed twin (uint32 -> int32), integer scalars
 * wrapped to the twin's range; floating scalars and mixed dtypes are
 * refused. Rows with TPU_OP_COMPLEX_AS_BITS take the wide unsigned dtypes
 * the same way, mixed with other dtypes too (the element moves only). Any
 * other row refuses them (UNIMPLEMENTED: the CPU fallback runs them). */
#define TPU_OP_UNSIGNED_AS_SIGNED 1024u
/* Heavy: a GEMM, convolution or attention, which no pointwise or row group
 * holds. DEFER_AND_FUSE cuts the pending graph just after such a node (flush
 * reason "pipeline"), once the heavy nodes since the last cut read and wrote
 * 256 Ki elements in all (src/defer.c), so the node and what was recorded
 * before it run while the program records on. After a heavy row that also
 * takes an epilogue (below) the cut waits for up to 16 pointwise nodes, so
 * they can join its GEMM group; the first other node is cut before. The cut
 * depends on the op sequence and shapes alone (every rank cuts alike). */
#define TPU_OP_HEAVY 32u
/* Takes an epilogue (with TPU_OP_HEAVY): a GEMM whose result C (2-D, or 3-D
 * batched) the kernel computes block by block; the fusion compiler may fold
 * the pointwise nodes that consume C into it (a GEMM group, fusion.h), and
 * they then run on each block of C as soon as it is final, while it is
 * still in cache, instead of as a separate pass over memory. */
#define TPU_OP_EPILOGUE 256u

/* Foreach: the row's tensor-list inputs ("params*!") are parallel lists, as
 * in PyTorch's fused optimizers. The bridge makes one node per list index,
 * each list giving that index's element (an empty list: an absent input),
 * so a node has one input per spec entry and '!' marks what it writes. */
#define TPU_OP_FOREACH 64u

/* A kernel family's rows. */
typedef struct tpu_op_family {
  const char* name;
  const tpu_op_def_t* ops;
  int32_t count;
} tpu_op_family_t;

/* The registry: built once, read-only afterwards; all results are borrowed.
 * tpu_runtime_init builds it and fails with tpu_op_table_status's error when
 * its allocation failed (then the table is empty: every lookup misses). */
tpu_status_t tpu_op_table_status(void); /* TPU_OK, or OUT_OF_MEMORY; caller frees */
int32_t tpu_op_count(void);
const tpu_op_def_t* tpu_op_def(tpu_op_id_t id); /* NULL when out of range */
tpu_op_id_t tpu_op_lookup(const char* name);     /* -1 when unknown */
/* Counts of the op's attrs and outputs (its specs, counted once). */
int32_t tpu_op_num_attrs(tpu_op_id_t id);
int32_t tpu_op_num_outputs(tpu_op_id_t id);
/* Bit k set when the op's input k is written in place (marked '!'). */
uint32_t tpu_op_mutated_inputs(tpu_op_id_t id);
const char* tpu_op_family_of(tpu_op_id_t id);
/* INVALID_ARGUMENT when the node's op is TPU_OP_OUT_NO_OVERLAP and one of its
 * outputs shares memory with an input (tpu_op_check runs it too; the bridge
 * also runs it on out= tensors before resizing them, as PyTorch does). */
tpu_status_t tpu_op_check_out_overlap(const tpu_node_t* node);

/* Counts of names in a comma-separated spec, and the index of `name` in it
 * (-1 if absent). Trailing marks ('*', '!', '?', '#', '^') on an entry are
 * ignored for matching. */
int32_t tpu_spec_count(const char* spec);
int32_t tpu_spec_index(const char* spec, const char* name);
/* The marks on entry `index` of an inputs spec (0 when out of range). */
#define TPU_SPEC_LIST 1u     /* '*': a tensor list */
#define TPU_SPEC_MUTATED 2u  /* '!': written in place */
#define TPU_SPEC_OPTIONAL 4u /* '?': may be absent */
#define TPU_SPEC_NUMBER 8u   /* '#': may be a number */
/* '^': an int list (int[] argument) or a host integer tensor: the bridge
 * binds a device copy of its values (int64) as the input view, as PyTorch
 * reads such lengths on the host (_ctc_loss's input_lengths). */
#define TPU_SPEC_HOST_INTS 16u
uint32_t tpu_spec_flags(const char* spec, int32_t index);

/* Whether a node is well formed for its op, whatever its op's own check
 * says: a known op; counts of inputs, attrs and outputs the op takes; value
 * and attr kinds in range; every dtype a real enum value; views of at most
 * TPU_MAX_DIMS dims, non-negative sizes and strides whose element count and
 * byte span fit int64 (empty views too); with `addresses` (a node about to
 * run), at most TPU_MAX_VIEW_ELEMENTS elements and backed by memory unless
 * empty; scalars of a real dtype; int-list entries within +-2^40; strings
 * NUL-terminated; required operands present (marks above). Outputs are
 * checked when `node->outputs` is set. INVALID_ARGUMENT, or UNIMPLEMENTED
 * for what the CPU fallback can run (a number where the row takes tensors,
 * a huge int-list entry, more than TPU_MAX_DIMS dims), naming the operand.
 * tpu_op_infer and tpu_op_check run it on metadata (addresses may still be
 * unset), submission with addresses. */
tpu_status_t tpu_node_validate(const tpu_node_t* node, bool addresses);

/* For a TPU_OP_COMPLEX_AS_REAL row: `*out` becomes `node` with complex views
 * as real ones (inputs and outputs stored in the caller's arrays of
 * num_inputs / num_outputs entries). False when the node has no complex
 * operand or is not of the accepted form (a complex input 0, real others). */
bool tpu_node_complex_as_real(const tpu_node_t* node, tpu_node_t* out, tpu_value_t* inputs,
                              tpu_view_t* outputs);

/* tpu_op_infer fills out_views (tpu_op_num_outputs entries) with the
 * metadata of a node's outputs; node->outputs is not read (a factory row
 * reads out_views[0].dtype: see tpu_infer_fn). tpu_op_check says
 * whether the node, its outputs set (INVALID_ARGUMENT when they are not),
 * runs natively: tpu_node_validate, then the op's own check (if any). */
tpu_status_t tpu_op_check(const tpu_node_t* node);
tpu_status_t tpu_op_infer(const tpu_node_t* node, tpu_view_t* out_views);

/* Whether a node of a row with a "seed" attr draws random numbers (its
 * def's draws, true without one); false for other rows and unknown ops. */
bool tpu_op_draws_random(const tpu_node_t* node);

/* PyTorch's result_type over a node's inputs: dimensioned tensors outrank
 * zero-dim tensors, which outrank scalars, within the highest category
 * (complex over floating keeps the floating value type: float64 and a
 * complex number give complex128). INVALID when the result is a dtype tpu
 * lacks (complex32: a half type and a complex operand). */
tpu_dtype_t tpu_result_type(const tpu_value_t* inputs, int32_t count);

/* Broadcasts input shapes (views and scalars) into out_sizes / *out_ndim. */
tpu_status_t tpu_broadcast_shapes(const tpu_value_t* inputs, int32_t count,
                                  int64_t* out_sizes, int32_t* out_ndim);

/* Sets contiguous strides for view->sizes. */
void tpu_view_set_contiguous(tpu_view_t* view);

#ifdef __cplusplus
}
#endif
#endif /* TPU_OPS_H_ */
