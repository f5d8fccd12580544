/* registry.c — gathers every kernel family's op rows into one table, and
 * the shape/dtype helpers shared by the families' infer functions. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernel.h"
#include "tpu/ops.h"

/* Every family the runtime executes. Add one line per family. */
#define TPU_FAMILIES(X) \
  X(elementwise)        \
  X(elementwise_special)\
  X(elementwise_complex)\
  X(special_functions)  \
  X(activation)         \
  X(copy)               \
  X(reduce)             \
  X(softmax)            \
  X(norm)               \
  X(batch_norm)         \
  X(group_norm)         \
  X(upsample)           \
  X(grid_sample)        \
  X(loss)               \
  X(pointwise_loss)     \
  X(sub_copy)           \
  X(margin_loss)        \
  X(multilabel_margin_loss) \
  X(fractional_max_pool) \
  X(ctc_loss)           \
  X(matmul)             \
  X(matmul_int8)        \
  X(index)              \
  X(index_adv)          \
  X(scatter_reduce)     \
  X(embedding_bag)      \
  X(random)             \
  X(shape)              \
  X(sort)               \
  X(scan)               \
  X(distance)           \
  X(renorm_histc)       \
  X(conv)               \
  X(attention)          \
  X(paged_attention)    \
  X(pool)               \
  X(pad)                \
  X(weight_norm)        \
  X(unique)             \
  X(linalg)             \
  X(linalg_simple)      \
  X(linalg_decomp)      \
  X(linalg_matfn)       \
  X(linalg_eig)         \
  X(histogram)          \
  X(fft)                \
  X(rnn_cell)           \
  X(optim)              \
  X(amp_scale)          \
  X(assert_async)       \
  /* one line per family, each ending in a backslash */

#define TPU_X_(f) extern const tpu_op_family_t tpu_family_##f;
TPU_FAMILIES(TPU_X_)
#undef TPU_X_

static const tpu_op_family_t* const g_families[] = {
#define TPU_X_(f) &tpu_family_##f,
    TPU_FAMILIES(TPU_X_)
#undef TPU_X_
};
enum { NUM_FAMILIES = sizeof(g_families) / sizeof(g_families[0]) };

/* The flat table is built on first use; rows are borrowed from families. */
static const tpu_op_def_t** g_ops;
static const char** g_op_family;
static int32_t* g_op_counts; /* attrs, outputs per op */
static uint32_t* g_op_mutated; /* per op: bit k when input k is written in place ('!') */
static int32_t g_op_count = -1;
static int32_t g_op_failed_rows; /* rows the failed build could not hold (0: built) */

static void build_table(void) {
  int32_t total = 0;
  for (int f = 0; f < NUM_FAMILIES; ++f) total += g_families[f]->count;
  const tpu_op_def_t** ops = malloc(sizeof(*ops) * (size_t)(total ? total : 1));
  const char** fam = malloc(sizeof(*fam) * (size_t)(total ? total : 1));
  int32_t* counts = malloc(sizeof(*counts) * 2 * (size_t)(total ? total : 1));
  uint32_t* mutated = calloc((size_t)(total ? total : 1), sizeof(*mutated));
  if (!ops || !fam || !counts || !mutated) {
    free(ops);
    free(fam);
    free(counts);
    free(mutated);
    g_op_count = 0; /* every lookup misses; tpu_op_table_status says why */
    g_op_failed_rows = total ? total : 1;
    return;
  }
  int32_t k = 0;
  for (int f = 0; f < NUM_FAMILIES; ++f)
    for (int32_t i = 0; i < g_families[f]->count; ++i) {
      ops[k] = &g_families[f]->ops[i];
      counts[2 * k] = tpu_spec_count(ops[k]->attrs);
      counts[2 * k + 1] = tpu_spec_count(ops[k]->outputs);
      int32_t num_inputs = tpu_spec_count(ops[k]->inputs);
      for (int32_t input = 0; input < num_inputs && input < 32; ++input)
        if (tpu_spec_flags(ops[k]->inputs, input) & TPU_SPEC_MUTATED) mutated[k] |= 1u << input;
      fam[k++] = g_families[f]->name;
    }
  g_ops = ops;
  g_op_family = fam;
  g_op_counts = counts;
  g_op_mutated = mutated;
  g_op_count = total;
}

static void ensure_table(void) {
  /* Built once under the runtime's init (single-threaded) or the first
   * lookup; a pthread_once keeps concurrent first lookups safe. */
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, build_table);
}

tpu_status_t tpu_op_table_status(void) {
  ensure_table();
  if (!g_op_failed_rows) return TPU_OK;
  return tpu_status_make(TPU_CODE_OUT_OF_MEMORY,
                         "op registry: allocating the table of %d ops failed", g_op_failed_rows);
}

int32_t tpu_op_count(void) {
  ensure_table();
  return g_op_count;
}

const tpu_op_def_t* tpu_op_def(tpu_op_id_t id) {
  ensure_table();
  return (id >= 0 && id < g_op_count) ? g_ops[id] : NULL;
}

const char* tpu_op_family_of(tpu_op_id_t id) {
  ensure_table();
  return (id >= 0 && id < g_op_count) ? g_op_family[id] : NULL;
}

int32_t tpu_op_num_attrs(tpu_op_id_t id) {
  ensure_table();
  return (id >= 0 && id < g_op_count) ? g_op_counts[2 * id] : 0;
}

uint32_t tpu_op_mutated_inputs(tpu_op_id_t id) {
  ensure_table();
  return (id >= 0 && id < g_op_count) ? g_op_mutated[id] : 0;
}

int32_t tpu_op_num_outputs(tpu_op_id_t id) {
  ensure_table();
  return (id >= 0 && id < g_op_count) ? g_op_counts[2 * id + 1] : 0;
}

tpu_op_id_t tpu_op_lookup(const char* name) {
  ensure_table();
  for (int32_t i = 0; i < g_op_count; ++i)
    if (strcmp(g_ops[i]->name, name) == 0) return i;
  return -1;
}

/* ---- comma-separated specs ------------------------------------------------ */

int32_t tpu_spec_count(const char* spec) {
  if (!spec || !*spec) return 0;
  int32_t n = 1;
  for (const char* p = spec; *p; ++p) n += (*p == ',');
  return n;
}

int32_t tpu_spec_index(const char* spec, const char* name) {
  if (!spec || !*spec) return -1;
  size_t len = strlen(name);
  int32_t index = 0;
  const char* p = spec;
  while (*p) {
    const char* end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    size_t m = n;
    while (m && strchr("*!?#^", p[m - 1])) m--; /* "exp_avgs*!" is exp_avgs */
    if (m == len && strncmp(p, name, len) == 0) return index;
    if (!end) break;
    p = end + 1;
    index++;
  }
  return -1;
}

uint32_t tpu_spec_flags(const char* spec, int32_t index) {
  if (!spec || index < 0) return 0;
  const char* p = spec;
  for (int32_t i = 0; i < index; ++i) {
    p = strchr(p, ',');
    if (!p) return 0;
    p++;
  }
  size_t n = strcspn(p, ",");
  uint32_t flags = 0;
  while (n && strchr("*!?#^", p[n - 1])) {
    char c = p[--n];
    flags |= c == '*' ? TPU_SPEC_LIST : c == '!' ? TPU_SPEC_MUTATED
             : c == '?' ? TPU_SPEC_OPTIONAL : c == '#' ? TPU_SPEC_NUMBER : TPU_SPEC_HOST_INTS;
  }
  return flags;
}

/* ---- checks and inference -------------------------------------------------- */

/* Whether a node has a complex operand (view, output or dtype attr). */
static bool has_complex(const tpu_node_t* node, bool outputs) {
  for (int32_t i = 0; i < node->num_inputs; ++i)
    if (node->inputs[i].kind == TPU_VALUE_VIEW && tpu_dtype_is_complex(node->inputs[i].u.view.dtype))
      return true;
  for (int32_t o = 0; outputs && node->outputs && o < node->num_outputs; ++o)
    if (tpu_dtype_is_complex(node->outputs[o].dtype)) return true;
  for (int32_t a = 0; a < node->num_attrs && a < TPU_MAX_ATTRS; ++a)
    if (node->attrs[a].kind == TPU_ATTR_DTYPE && tpu_dtype_is_complex(node->attrs[a].u.dtype))
      return true;
  return false;
}

/* The node's wide unsigned dtype: INVALID when it has none, COUNT when it
 * has two different ones (views, outputs, scalars or dtype attrs). */
static tpu_dtype_t unsigned_dtype(const tpu_node_t* node, bool outputs) {
  tpu_dtype_t found = TPU_DTYPE_INVALID;
#define NOTE_(d)                                                          \
  do {                                                                    \
    tpu_dtype_t d_ = (d);                                                 \
    if (tpu_dtype_is_wide_unsigned(d_))                                   \
      found = found == TPU_DTYPE_INVALID || found == d_ ? d_ : TPU_DTYPE_COUNT; \
  } while (0)
  for (int32_t i = 0; i < node->num_inputs; ++i) {
    const tpu_value_t* v = &node->inputs[i];
    if (v->kind == TPU_VALUE_VIEW) NOTE_(v->u.view.dtype);
    if (v->kind == TPU_VALUE_SCALAR) NOTE_(v->u.scalar.dtype);
  }
  for (int32_t o = 0; outputs && node->outputs && o < node->num_outputs; ++o)
    NOTE_(node->outputs[o].dtype);
  for (int32_t a = 0; a < node->num_attrs && a < TPU_MAX_ATTRS; ++a)
    if (node->attrs[a].kind == TPU_ATTR_DTYPE) NOTE_(node->attrs[a].u.dtype);
#undef NOTE_
  return found;
}

static bool has_unsigned(const tpu_node_t* node, bool outputs) {
  return unsigned_dtype(node, outputs) != TPU_DTYPE_INVALID;
}

/* An integer value wrapped to the range of the signed dtype `twin`. */
static int64_t wrap_to(int64_t v, tpu_dtype_t twin) {
  switch (twin) {
    case TPU_DTYPE_I16: return (int16_t)(uint16_t)(uint64_t)v;
    case TPU_DTYPE_I32: return (int32_t)(uint32_t)(uint64_t)v;
    default: return v;
  }
}

#define AS_SIGNED_MAX 8 /* operands of a TPU_OP_UNSIGNED_AS_SIGNED node */

/* A TPU_OP_UNSIGNED_AS_SIGNED node on the signed twin of its one wide
 * unsigned dtype, stored in the caller's arrays; false when it is not of
 * that form (another integer or floating view, a floating scalar, a dtype
 * attr, too many operands). */
static bool unsigned_as_signed(const tpu_node_t* node, tpu_node_t* out, tpu_value_t* inputs,
                               tpu_view_t* outputs) {
  tpu_dtype_t u = unsigned_dtype(node, node->outputs != NULL);
  tpu_dtype_t twin = tpu_dtype_signed_twin(u);
  if (twin == TPU_DTYPE_INVALID || node->num_inputs > AS_SIGNED_MAX ||
      node->num_outputs > AS_SIGNED_MAX)
    return false;
  for (int32_t a = 0; a < node->num_attrs && a < TPU_MAX_ATTRS; ++a)
    if (node->attrs[a].kind == TPU_ATTR_DTYPE) return false;
  *out = *node;
  for (int32_t i = 0; i < node->num_inputs; ++i) {
    tpu_value_t* v = &inputs[i];
    *v = node->inputs[i];
    if (v->kind == TPU_VALUE_VIEW) {
      if (v->u.view.dtype != u && v->u.view.dtype != TPU_DTYPE_BOOL) return false;
      if (v->u.view.dtype == u) v->u.view.dtype = twin;
    } else if (v->kind == TPU_VALUE_SCALAR) {
      tpu_scalar_t* s = &v->u.scalar;
      if (tpu_dtype_is_floating(s->dtype) || tpu_dtype_is_complex(s->dtype)) return false;
      if (s->dtype != TPU_DTYPE_BOOL) s->v.i = wrap_to(s->v.i, twin);
      if ((s->is_tensor && s->dtype != TPU_DTYPE_BOOL) || s->dtype == u) s->dtype = twin;
    }
  }
  for (int32_t o = 0; node->outputs && o < node->num_outputs; ++o) {
    outputs[o] = node->outputs[o];
    if (outputs[o].dtype == u) outputs[o].dtype = twin;
    if (tpu_view_is_absent(&outputs[o])) continue;
    if (outputs[o].dtype != twin && outputs[o].dtype != TPU_DTYPE_BOOL) return false;
  }
  out->inputs = inputs;
  out->outputs = node->outputs ? outputs : NULL;
  return true;
}

static bool as_signed_row(const tpu_op_def_t* def, const tpu_node_t* node, bool outputs) {
  return (def->flags & TPU_OP_UNSIGNED_AS_SIGNED) && has_unsigned(node, outputs);
}

/* Wide unsigned operands reach only rows that declare a way to take them. */
static tpu_status_t check_unsigned(const tpu_op_def_t* def, const tpu_node_t* node,
                                   bool outputs) {
  if ((def->flags & TPU_OP_UNSIGNED) || !has_unsigned(node, outputs)) return TPU_OK;
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: operands of dtype %s", def->name,
                         tpu_dtype_name(unsigned_dtype(node, outputs) == TPU_DTYPE_COUNT
                                            ? TPU_DTYPE_U64
                                            : unsigned_dtype(node, outputs)));
}

/* Complex operands reach only rows that declare TPU_OP_COMPLEX. */
static tpu_status_t check_complex(const tpu_op_def_t* def, const tpu_node_t* node, bool outputs) {
  if ((def->flags & TPU_OP_COMPLEX) || !has_complex(node, outputs)) return TPU_OK;
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: complex operands", def->name);
}

/* A complex view as its (..., 2) real view; a real view of >= 1 dims gains a
 * trailing dim of 1. False when there is no room for the dim. */
static bool view_as_real_pairs(const tpu_view_t* v, tpu_view_t* r) {
  *r = *v;
  if (tpu_view_is_absent(v)) return true;
  bool c = tpu_dtype_is_complex(v->dtype);
  if (!c && v->ndim == 0) return true;
  if (v->ndim >= TPU_MAX_DIMS) return false;
  r->ndim = v->ndim + 1;
  r->sizes[v->ndim] = c ? 2 : 1;
  r->strides[v->ndim] = 1;
  if (c) {
    r->dtype = tpu_dtype_part(v->dtype);
    for (int32_t d = 0; d < v->ndim; ++d) r->strides[d] = v->strides[d] * 2;
  }
  return true;
}

bool tpu_node_complex_as_real(const tpu_node_t* node, tpu_node_t* out, tpu_value_t* inputs,
                              tpu_view_t* outputs) {
  if (node->num_inputs < 1 || node->inputs[0].kind != TPU_VALUE_VIEW ||
      !tpu_dtype_is_complex(node->inputs[0].u.view.dtype))
    return false;
  for (int32_t a = 0; a < node->num_attrs && a < TPU_MAX_ATTRS; ++a)
    if (node->attrs[a].kind == TPU_ATTR_DTYPE && tpu_dtype_is_complex(node->attrs[a].u.dtype))
      return false;
  *out = *node;
  for (int32_t i = 0; i < node->num_inputs; ++i) {
    inputs[i] = node->inputs[i];
    if (inputs[i].kind == TPU_VALUE_SCALAR && tpu_dtype_is_complex(inputs[i].u.scalar.dtype))
      return false; /* a complex number: not real-linear */
    if (inputs[i].kind != TPU_VALUE_VIEW) continue;
    if (i > 0 && tpu_dtype_is_complex(inputs[i].u.view.dtype)) return false;
    if (!view_as_real_pairs(&node->inputs[i].u.view, &inputs[i].u.view)) return false;
  }
  for (int32_t o = 0; node->outputs && o < node->num_outputs; ++o) {
    const tpu_view_t* v = &node->outputs[o];
    if (!tpu_view_is_absent(v) && !tpu_dtype_is_complex(v->dtype)) return false;
    if (!view_as_real_pairs(v, &outputs[o])) return false;
  }
  out->inputs = inputs;
  out->outputs = node->outputs ? outputs : NULL;
  return true;
}

#define AS_REAL_MAX 8 /* operands of the rows that take TPU_OP_COMPLEX_AS_REAL */

static bool as_real_row(const tpu_op_def_t* def, const tpu_node_t* node) {
  return (def->flags & TPU_OP_COMPLEX_AS_REAL) && node->num_inputs <= AS_REAL_MAX &&
         node->num_outputs <= AS_REAL_MAX;
}

#define AS_BITS_MAX 16 /* operands of a TPU_OP_COMPLEX_AS_BITS node */

/* A TPU_OP_COMPLEX_AS_BITS node with complex64 views as int64 ones and wide
 * unsigned views as their signed twins, stored in the caller's arrays; false
 * when it is not of that form. */
static bool complex_as_bits(const tpu_node_t* node, tpu_node_t* out, tpu_value_t* inputs,
                            tpu_view_t* outputs) {
  if (node->num_inputs > AS_BITS_MAX || node->num_outputs > AS_BITS_MAX) return false;
  for (int32_t a = 0; a < node->num_attrs && a < TPU_MAX_ATTRS; ++a)
    if (node->attrs[a].kind == TPU_ATTR_DTYPE && tpu_dtype_is_storage_only(node->attrs[a].u.dtype))
      return false;
  if (unsigned_dtype(node, node->outputs != NULL) == TPU_DTYPE_COUNT) return false;
  *out = *node;
  for (int32_t i = 0; i < node->num_inputs; ++i) {
    inputs[i] = node->inputs[i];
    if (inputs[i].kind == TPU_VALUE_SCALAR && tpu_dtype_is_storage_only(inputs[i].u.scalar.dtype))
      return false;
    if (inputs[i].kind != TPU_VALUE_VIEW) continue;
    tpu_dtype_t d = inputs[i].u.view.dtype;
    if (tpu_dtype_is_wide_unsigned(d)) inputs[i].u.view.dtype = tpu_dtype_signed_twin(d);
    if (!tpu_dtype_is_complex(d)) continue;
    if (d != TPU_DTYPE_C64) return false;
    inputs[i].u.view.dtype = TPU_DTYPE_I64;
  }
  for (int32_t o = 0; node->outputs && o < node->num_outputs; ++o) {
    outputs[o] = node->outputs[o];
    tpu_dtype_t d = outputs[o].dtype;
    if (tpu_dtype_is_wide_unsigned(d)) outputs[o].dtype = tpu_dtype_signed_twin(d);
    if (!tpu_dtype_is_complex(d)) continue;
    if (d != TPU_DTYPE_C64) return false;
    outputs[o].dtype = TPU_DTYPE_I64;
  }
  out->inputs = inputs;
  out->outputs = node->outputs ? outputs : NULL;
  return true;
}

static bool as_bits_row(const tpu_op_def_t* def, const tpu_node_t* node, bool outputs) {
  return (def->flags & TPU_OP_COMPLEX_AS_BITS) &&
         (has_complex(node, outputs) || has_unsigned(node, outputs));
}

bool tpu_node_runs_as_is(const tpu_node_t* node) {
  return !has_complex(node, true) && !has_unsigned(node, true);
}

tpu_status_t tpu_node_execute(const tpu_node_t* node, tpu_exec_ctx_t* ctx) {
  const tpu_op_def_t* def = tpu_op_def(node->op);
  tpu_node_t real_node; /* a real-linear op on complex operands: on their real views */
  tpu_value_t real_in[AS_REAL_MAX];
  tpu_view_t real_out[AS_REAL_MAX];
  bool as_real = (def->flags & TPU_OP_COMPLEX_AS_REAL) && node->num_inputs <= AS_REAL_MAX &&
                 node->num_outputs <= AS_REAL_MAX &&
                 tpu_node_complex_as_real(node, &real_node, real_in, real_out);
  tpu_value_t bits_in[AS_BITS_MAX];
  tpu_view_t bits_out[AS_BITS_MAX];
  if (!as_real && as_bits_row(def, node, true) &&
      complex_as_bits(node, &real_node, bits_in, bits_out))
    as_real = true;
  if (!as_real && as_signed_row(def, node, true) &&
      unsigned_as_signed(node, &real_node, bits_in, bits_out))
    as_real = true;
  tpu_status_t s = def->kernel(def, as_real ? &real_node : node, ctx);
  if (s != TPU_OK) return tpu_status_annotate(s, "in op '%s' on tpu:%d", def->name, ctx->chip_index);
  return TPU_OK;
}

/* tpu_op_check of a node that a row flag rewrote (complex as real or bits,
 * unsigned as signed). A rewrite that left a storage-only dtype behind (an
 * absent output's or a stray scalar's) is refused here rather than
 * rewritten again: the check would recurse without end. */
static tpu_status_t check_rewritten(const tpu_op_def_t* def, const tpu_node_t* r) {
  if (has_complex(r, true) || has_unsigned(r, true))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: operands of a storage-only dtype",
                           def->name);
  return tpu_op_check(r);
}

/* tpu_op_check of a node tpu_node_validate has accepted. */
static tpu_status_t check_validated(const tpu_node_t* node) {
  const tpu_op_def_t* def = tpu_op_def(node->op);
  if (!node->outputs && node->num_outputs > 0)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "%s: outputs not set (tpu_op_infer gives their metadata)", def->name);
  if (as_real_row(def, node) && has_complex(node, true)) {
    tpu_node_t r;
    tpu_value_t in[AS_REAL_MAX];
    tpu_view_t out[AS_REAL_MAX];
    if (tpu_node_complex_as_real(node, &r, in, out)) return check_rewritten(def, &r);
    if (!(def->flags & TPU_OP_COMPLEX))
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: complex operands", def->name);
  }
  if (as_bits_row(def, node, true)) {
    tpu_node_t r;
    tpu_value_t in[AS_BITS_MAX];
    tpu_view_t out[AS_BITS_MAX];
    if (!complex_as_bits(node, &r, in, out))
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: complex operands", def->name);
    return check_rewritten(def, &r);
  }
  if (as_signed_row(def, node, true)) {
    tpu_node_t r;
    tpu_value_t in[AS_SIGNED_MAX];
    tpu_view_t out[AS_SIGNED_MAX];
    if (!unsigned_as_signed(node, &r, in, out))
      return check_unsigned(&(tpu_op_def_t){.name = def->name}, node, true);
    return check_rewritten(def, &r);
  }
  TPU_RETURN_IF_ERROR(check_unsigned(def, node, true));
  TPU_RETURN_IF_ERROR(check_complex(def, node, true));
  TPU_RETURN_IF_ERROR(tpu_op_check_out_overlap(node));
  return def->check ? def->check(def, node) : TPU_OK;
}

tpu_status_t tpu_op_check(const tpu_node_t* node) {
  TPU_RETURN_IF_ERROR(tpu_node_validate(node, false));
  return check_validated(node);
}

/* Submission's check (tpu/ir.h): validated once, with addresses. */
tpu_status_t tpu_node_verify(const tpu_node_t* node, int32_t index) {
  tpu_status_t s = tpu_node_validate(node, true);
  if (s == TPU_OK) s = check_validated(node);
  return s == TPU_OK ? TPU_OK : tpu_status_annotate(s, "node %d", index);
}

bool tpu_op_draws_random(const tpu_node_t* node) {
  const tpu_op_def_t* def = node ? tpu_op_def(node->op) : NULL;
  if (!def || tpu_spec_index(def->attrs, "seed") < 0) return false;
  return def->draws ? def->draws(def, node) : true;
}

tpu_status_t tpu_op_check_out_overlap(const tpu_node_t* node) {
  const tpu_op_def_t* def = tpu_op_def(node->op);
  if (!def || !(def->flags & TPU_OP_OUT_NO_OVERLAP)) return TPU_OK;
  for (int32_t o = 0; o < node->num_outputs; ++o)
    for (int32_t i = 0; i < node->num_inputs; ++i)
      if (node->inputs[i].kind == TPU_VALUE_VIEW &&
          tpu_views_may_overlap(&node->outputs[o], &node->inputs[i].u.view))
        return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                               "unsupported operation: some elements of the input tensor and "
                               "the written-to tensor refer to a single memory location. "
                               "Please clone() the tensor before performing the operation.");
  return TPU_OK;
}

tpu_status_t tpu_op_infer(const tpu_node_t* node, tpu_view_t* out_views) {
  if (!node) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "no node");
  tpu_node_t unset_outputs = *node; /* not read: not validated */
  unset_outputs.outputs = NULL;
  TPU_RETURN_IF_ERROR(tpu_node_validate(&unset_outputs, false));
  const tpu_op_def_t* def = tpu_op_def(node->op);
  if (!def->infer)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s has no shape function", def->name);
  if (as_real_row(def, node) && has_complex(node, false)) {
    tpu_node_t r, unset = *node;
    tpu_value_t in[AS_REAL_MAX];
    tpu_view_t out[AS_REAL_MAX];
    unset.outputs = NULL; /* not set yet: not read */
    if (!tpu_node_complex_as_real(&unset, &r, in, out)) {
      if (def->flags & TPU_OP_COMPLEX) return def->infer(def, node, out_views);
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: complex operands", def->name);
    }
    TPU_RETURN_IF_ERROR(def->infer(def, &r, out_views));
    for (int32_t o = 0; o < tpu_op_num_outputs(node->op); ++o) { /* (..., 2) back to complex */
      tpu_view_t* v = &out_views[o];
      if (tpu_view_is_absent(v)) continue;
      tpu_dtype_t c = tpu_dtype_to_complex(v->dtype);
      if (v->ndim < 1 || v->sizes[v->ndim - 1] != 2 || c == TPU_DTYPE_INVALID)
        return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: complex operands", def->name);
      v->ndim--;
      v->dtype = c;
      tpu_view_set_contiguous(v);
    }
    return TPU_OK;
  }
  if (as_bits_row(def, node, false)) {
    tpu_node_t r, unset = *node;
    tpu_value_t in[AS_BITS_MAX];
    tpu_view_t out[AS_BITS_MAX];
    unset.outputs = NULL; /* not set yet: not read */
    if (!complex_as_bits(&unset, &r, in, out))
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: complex operands", def->name);
    TPU_RETURN_IF_ERROR(def->infer(def, &r, out_views));
    tpu_dtype_t u = unsigned_dtype(node, false);
    bool complex = has_complex(node, false);
    for (int32_t o = 0; o < tpu_op_num_outputs(node->op); ++o) { /* the data's dtype back */
      tpu_view_t* v = &out_views[o];
      if (tpu_view_is_absent(v)) continue;
      if (complex && v->dtype == TPU_DTYPE_I64) v->dtype = TPU_DTYPE_C64;
      else if (u != TPU_DTYPE_INVALID && v->dtype == tpu_dtype_signed_twin(u)) v->dtype = u;
    }
    return TPU_OK;
  }
  if (as_signed_row(def, node, false)) {
    tpu_node_t r, unset = *node;
    tpu_value_t in[AS_SIGNED_MAX];
    tpu_view_t out[AS_SIGNED_MAX];
    unset.outputs = NULL; /* not set yet: not read */
    if (!unsigned_as_signed(&unset, &r, in, out))
      return check_unsigned(&(tpu_op_def_t){.name = def->name}, node, false);
    TPU_RETURN_IF_ERROR(def->infer(def, &r, out_views));
    tpu_dtype_t u = unsigned_dtype(node, false);
    for (int32_t o = 0; o < tpu_op_num_outputs(node->op); ++o) /* the twin back to unsigned */
      if (!tpu_view_is_absent(&out_views[o]) && out_views[o].dtype == tpu_dtype_signed_twin(u))
        out_views[o].dtype = u;
    return TPU_OK;
  }
  TPU_RETURN_IF_ERROR(check_unsigned(def, node, false));
  TPU_RETURN_IF_ERROR(check_complex(def, node, false));
  return def->infer(def, node, out_views);
}

void tpu_view_set_contiguous(tpu_view_t* view) {
  int64_t stride = 1;
  for (int32_t i = view->ndim - 1; i >= 0; --i) {
    view->strides[i] = stride;
    /* Only an empty view's strides can overflow (a non-empty one's are at
     * most its element count): they saturate, and address nothing. */
    if (view->sizes[i] > 1 && __builtin_mul_overflow(stride, view->sizes[i], &stride))
      stride = INT64_MAX;
  }
}

/* Categories: 0 bool, 1 integer (the wide unsigned ones too), 2 floating,
 * 3 complex. */
static int category(tpu_dtype_t d) {
  return tpu_dtype_is_complex(d)    ? 3
         : tpu_dtype_is_floating(d) ? 2
         : (tpu_dtype_is_integral(d) || tpu_dtype_is_wide_unsigned(d)) ? 1
                                                                         : 0;
}

tpu_dtype_t tpu_result_type(const tpu_value_t* inputs, int32_t count) {
  /* Three tiers as in c10's ResultTypeState. */
  tpu_dtype_t dim_t = TPU_DTYPE_INVALID, zero_t = TPU_DTYPE_INVALID, scalar_t = TPU_DTYPE_INVALID;
  for (int32_t i = 0; i < count; ++i) {
    const tpu_value_t* v = &inputs[i];
    tpu_dtype_t* slot;
    tpu_dtype_t d;
    if (v->kind == TPU_VALUE_VIEW) {
      d = v->u.view.dtype;
      slot = v->u.view.ndim > 0 ? &dim_t : &zero_t;
    } else if (v->kind == TPU_VALUE_SCALAR && v->u.scalar.is_tensor) {
      d = v->u.scalar.dtype;
      slot = &zero_t;
    } else if (v->kind == TPU_VALUE_SCALAR) {
      /* Python floats promote to the default dtype (float32) at most,
       * Python complex numbers to the default complex dtype (complex64). */
      d = v->u.scalar.dtype == TPU_DTYPE_F64    ? TPU_DTYPE_F32
          : v->u.scalar.dtype == TPU_DTYPE_C128 ? TPU_DTYPE_C64
                                                : v->u.scalar.dtype;
      slot = &scalar_t;
    } else {
      continue;
    }
    *slot = *slot == TPU_DTYPE_INVALID ? d : tpu_dtype_promote(*slot, d);
  }
  tpu_dtype_t result = dim_t;
  tpu_dtype_t lower[2] = {zero_t, scalar_t};
  for (int k = 0; k < 2; ++k) {
    if (lower[k] == TPU_DTYPE_INVALID) continue;
    if (result == TPU_DTYPE_INVALID) {
      result = lower[k];
    } else if (category(lower[k]) == 3 && category(result) == 2) {
      /* complex over floating keeps the floating value type (c10's
       * combine_categories): float64 * 1j is complex128; a half type's
       * complex (complex32) is not a tpu dtype: INVALID */
      result = tpu_dtype_to_complex(result);
      if (result == TPU_DTYPE_INVALID) return TPU_DTYPE_INVALID;
    } else if (category(lower[k]) > category(result)) {
      /* A lower tier only matters when it is of a higher category; then the
       * result is its dtype (for scalars: the default of that category). */
      result = (k == 1 && category(lower[k]) == 2) ? TPU_DTYPE_F32
               : (k == 1 && category(lower[k]) == 1) ? TPU_DTYPE_I64
                                                      : lower[k];
    }
  }
  return result == TPU_DTYPE_INVALID ? TPU_DTYPE_F32 : result;
}

tpu_status_t tpu_broadcast_shapes(const tpu_value_t* inputs, int32_t count, int64_t* out_sizes,
                                  int32_t* out_ndim) {
  int32_t ndim = 0;
  for (int32_t i = 0; i < count; ++i)
    if (inputs[i].kind == TPU_VALUE_VIEW && inputs[i].u.view.ndim > ndim)
      ndim = inputs[i].u.view.ndim;
  for (int32_t d = 0; d < ndim; ++d) out_sizes[d] = 1;
  for (int32_t i = 0; i < count; ++i) {
    if (inputs[i].kind != TPU_VALUE_VIEW) continue;
    const tpu_view_t* v = &inputs[i].u.view;
    for (int32_t d = 0; d < v->ndim; ++d) {
      int32_t o = ndim - v->ndim + d;
      int64_t s = v->sizes[d];
      if (s == out_sizes[o] || s == 1) continue;
      if (out_sizes[o] != 1)
        return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                               "The size of tensor a (%lld) must match the size of tensor b "
                               "(%lld) at non-singleton dimension %d",
                               (long long)out_sizes[o], (long long)s, o);
      out_sizes[o] = s;
    }
  }
  *out_ndim = ndim;
  return TPU_OK;
}

void tpu_value_to_view(const tpu_value_t* value, tpu_dtype_t dtype, uint64_t* storage,
                       tpu_view_t* out_view) {
  if (value->kind == TPU_VALUE_VIEW) {
    *out_view = value->u.view;
    return;
  }
  memset(out_view, 0, sizeof(*out_view));
  /* The scalar holds an int64 (v.i) or a double (v.f); convert from that. */
  tpu_dtype_t held = tpu_dtype_is_floating(value->u.scalar.dtype) ? TPU_DTYPE_F64 : TPU_DTYPE_I64;
  tpu_dtype_t dst = dtype == TPU_DTYPE_INVALID ? value->u.scalar.dtype : dtype;
  *storage = 0;
  tpu_convert(storage, dst, 1, &value->u.scalar.v, held, 1, 1);
  out_view->addr = (uint64_t)(uintptr_t)storage;
  out_view->dtype = dst;
  out_view->ndim = 0;
}
