/* tpu/ir.h — the graph IR: the one representation every execution mode uses.
 *
 * A graph is an ordered list of nodes. A node names an op of the op table
 * (tpu/ops.h) and carries
 *   - inputs:  values, each a strided view of device memory or an immediate
 *              scalar (Python numbers passed to ATen ops),
 *   - outputs: strided views of device memory the node writes,
 *   - attrs:   the op's non-tensor arguments, in the order its definition
 *              lists them (ints, floats, bools, int lists, dtypes, strings).
 * Strict eager submits one-node graphs; DeferAndFuse records many-node graphs;
 * the torch.compile backend lowers FX graphs into the same nodes.
 *
 * Views hold device addresses, never host pointers. On the host driver a
 * kernel may dereference a device address (tpu_view_ptr); nothing above the
 * HAL may.
 */
#ifndef TPU_IR_H_
#define TPU_IR_H_

#include <stdbool.h>
#include <stdint.h>

#include "tpu/dtype.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_MAX_DIMS 12
#define TPU_MAX_ATTRS 8
#define TPU_MAX_INTS 12 /* longest int-list attribute */
/* Longest string attribute, with its NUL: the int list's bytes, so the attr
 * union does not grow (an assert message; longer strings: CPU fallback). */
#define TPU_MAX_STR 96
/* Most elements a view of a submitted node may index (broadcast views
 * included; tpu_node_validate): 2^48, more than any chip holds, and small
 * enough that a kernel's scratch size (elements x element size x a small
 * factor) cannot overflow. */
#define TPU_MAX_VIEW_ELEMENTS (1LL << 48)

/* A strided view of device memory. Strides are in elements and may be 0
 * (broadcast) or negative-free (PyTorch strides are never negative). */
typedef struct tpu_view {
  uint64_t addr; /* device address of element [0, ..., 0] */
  tpu_dtype_t dtype;
  int32_t ndim;
  int64_t sizes[TPU_MAX_DIMS];
  int64_t strides[TPU_MAX_DIMS];
} tpu_view_t;

int64_t tpu_view_numel(const tpu_view_t* view);
/* The bytes [*out_lo, *out_hi) a view can touch (strides are non-negative);
 * an empty view touches none (*out_lo == *out_hi). */
static inline void tpu_view_bytes(const tpu_view_t* v, uint64_t* out_lo, uint64_t* out_hi) {
  uint64_t span = 1;
  *out_lo = *out_hi = v->addr;
  for (int32_t d = 0; d < v->ndim; ++d) {
    if (v->sizes[d] == 0) return;
    span += (uint64_t)((v->sizes[d] - 1) * v->strides[d]);
  }
  *out_hi = v->addr + span * tpu_dtype_size(v->dtype);
}
/* Whether two views can touch a common byte (their address ranges meet;
 * empty views overlap nothing). Conservative for interleaved strides. */
bool tpu_views_may_overlap(const tpu_view_t* a, const tpu_view_t* b);
/* An absent output: a result the op leaves undefined (PyTorch returns an
 * undefined tensor, e.g. a backward op's masked-off gradients). Shape
 * functions mark one with dtype TPU_DTYPE_INVALID (and nothing else set);
 * the bridge then allocates nothing and returns an undefined tensor, and the
 * kernel must not write it. */
static inline bool tpu_view_is_absent(const tpu_view_t* view) {
  return view->dtype == TPU_DTYPE_INVALID && view->addr == 0;
}
bool tpu_view_is_contiguous(const tpu_view_t* view);
/* The host pointer a kernel on the host driver may use for this view. */
static inline void* tpu_view_ptr(const tpu_view_t* view) {
  return (void*)(uintptr_t)view->addr;
}

typedef enum tpu_value_kind {
  TPU_VALUE_NONE = 0, /* an absent optional input */
  TPU_VALUE_VIEW,
  TPU_VALUE_SCALAR,
} tpu_value_kind_t;

/* An immediate scalar. For a Python number, `dtype` is BOOL, I64, F64 or
 * C128 (the Python type: in type promotion it ranks below tensors, a float
 * as the default dtype float32, a complex as complex64). A zero-dim CPU
 * tensor passed to a device op also travels as a scalar, with its own dtype
 * and `is_tensor` set (it ranks as a zero-dim tensor). Integers and bools are
 * held in `v.i`, floating values in `v.f`, complex ones (C64, C128) in `v.c`
 * (real, imaginary). Only rows flagged TPU_OP_COMPLEX_NUMBERS (tpu/ops.h)
 * take a complex scalar; the others refuse it (UNIMPLEMENTED). */
typedef struct tpu_scalar {
  tpu_dtype_t dtype;
  bool is_tensor;
  union {
    double f;
    int64_t i;
    double c[2];
  } v;
} tpu_scalar_t;

typedef struct tpu_value {
  tpu_value_kind_t kind;
  union {
    tpu_view_t view;
    tpu_scalar_t scalar;
  } u;
} tpu_value_t;

typedef enum tpu_attr_kind {
  TPU_ATTR_NONE = 0, /* absent optional (None) */
  TPU_ATTR_INT,
  TPU_ATTR_FLOAT,
  TPU_ATTR_BOOL,
  TPU_ATTR_INTS,
  TPU_ATTR_DTYPE,
  TPU_ATTR_STR,
  TPU_ATTR_FLOATS, /* a float list (float[]), up to TPU_MAX_INTS doubles */
  /* a complex number (alpha=2j): real and imaginary parts in floats[0..1],
   * count 2; only rows flagged TPU_OP_COMPLEX_NUMBERS (tpu/ops.h) take it,
   * the others refuse it (UNIMPLEMENTED) */
  TPU_ATTR_COMPLEX,
} tpu_attr_kind_t;

typedef struct tpu_attr {
  tpu_attr_kind_t kind;
  int32_t count; /* for INTS, FLOATS and COMPLEX (2) */
  union {
    int64_t i;       /* INT, BOOL (0/1) */
    double f;        /* FLOAT */
    tpu_dtype_t dtype;
    int64_t ints[TPU_MAX_INTS];
    double floats[TPU_MAX_INTS]; /* FLOATS; COMPLEX: real, imaginary */
    char str[TPU_MAX_STR];
  } u;
} tpu_attr_t;

/* Attribute readers with defaults for NONE; they borrow. tpu_attr_int of a
 * FLOAT truncates, saturating at the int64 range (NaN reads 0). */
int64_t tpu_attr_int(const tpu_attr_t* attr, int64_t dflt);
double tpu_attr_float(const tpu_attr_t* attr, double dflt); /* INT promotes */
bool tpu_attr_bool(const tpu_attr_t* attr, bool dflt);

typedef int32_t tpu_op_id_t;

/* One op application. Inputs/outputs are stored in the graph's arrays; the
 * node records where its slice starts. */
typedef struct tpu_node {
  tpu_op_id_t op;
  int32_t num_inputs;
  int32_t num_outputs;
  int32_t num_attrs;
  tpu_value_t* inputs;  /* borrowed from the graph */
  tpu_view_t* outputs;  /* borrowed from the graph */
  tpu_attr_t attrs[TPU_MAX_ATTRS];
} tpu_node_t;

typedef struct tpu_graph tpu_graph_t;

/* Creates an empty graph; the caller owns it. */
tpu_status_t tpu_graph_create(tpu_graph_t** out_graph);
/* Creates an empty graph with room for `nodes` nodes, `inputs` input values
 * and `outputs` output views (as tpu_graph_reserve, a hint); the caller
 * owns it. It may reuse the arrays of a graph released before (ir.c keeps
 * a few), so a recording that repeats allocates nothing. */
tpu_status_t tpu_graph_create_reserved(int32_t nodes, int64_t inputs, int64_t outputs,
                                       tpu_graph_t** out_graph);
/* Releases a graph and everything it holds; NULL is fine. */
void tpu_graph_release(tpu_graph_t* graph);

/* Appends a node; the graph copies inputs, outputs and attrs. */
tpu_status_t tpu_graph_add_node(tpu_graph_t* graph, tpu_op_id_t op,
                                const tpu_value_t* inputs, int32_t num_inputs,
                                const tpu_view_t* outputs, int32_t num_outputs,
                                const tpu_attr_t* attrs, int32_t num_attrs);
/* Appends a copy of `node` (borrowed), as tpu_graph_add_node does.
 * Both stamp the new node with the calling thread's profiler correlation
 * (tpu_profiler_correlation: the host op recording it, 0 when none). */
tpu_status_t tpu_graph_append(tpu_graph_t* graph, const tpu_node_t* node);
/* Appends a copy of node `index` of `src` (borrowed) keeping its
 * correlation: what copies a recording (reordering, flushing) uses, so a
 * node stays charged to the op that recorded it, not to the one copying. */
tpu_status_t tpu_graph_append_from(tpu_graph_t* graph, const tpu_graph_t* src, int32_t index);
/* The correlation node `index` was stamped with (0: none or no such node). */
uint64_t tpu_graph_node_correlation(const tpu_graph_t* graph, int32_t index);
/* Creates a graph holding a copy of `node` (borrowed); the caller owns it. */
tpu_status_t tpu_graph_from_node(const tpu_node_t* node, tpu_graph_t** out_graph);
/* Reorders the nodes in place: node i becomes the node that was at
 * order[i] (a permutation of 0..n-1, else INVALID_ARGUMENT and nothing
 * changes). The nodes keep their operands. */
tpu_status_t tpu_graph_permute(tpu_graph_t* graph, const int32_t* order);
int32_t tpu_graph_node_count(const tpu_graph_t* graph);
/* Makes room for `nodes` nodes, `inputs` input values and `outputs` output
 * views in all, so that appending up to them does not move the arrays (a
 * hint: appending past them grows the graph as usual). */
tpu_status_t tpu_graph_reserve(tpu_graph_t* graph, int32_t nodes, int64_t inputs,
                               int64_t outputs);
/* How many input values and output views the graph's nodes hold in all. */
void tpu_graph_operand_counts(const tpu_graph_t* graph, int64_t* out_inputs,
                              int64_t* out_outputs);
/* Borrowed; valid until the graph is changed or released. */
const tpu_node_t* tpu_graph_node(const tpu_graph_t* graph, int32_t index);

/* Checks every node as tpu_op_check does (tpu/ops.h): well formed, and run
 * natively by its op. */
tpu_status_t tpu_graph_verify(const tpu_graph_t* graph);
/* Checks one node (borrowed) likewise; `index` names it in the message. */
tpu_status_t tpu_node_verify(const tpu_node_t* node, int32_t index);

#ifdef __cplusplus
}
#endif
#endif /* TPU_IR_H_ */
