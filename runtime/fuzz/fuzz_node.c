/* fuzz_node.c — decodes a fuzz input into a node and runs it (fuzz_node.h). */
#include "fuzz_node.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>

#include "tpu/ops.h"
#include "tpu/runtime.h"

enum {
  MAX_INPUTS = 10,
  MAX_OUTPUTS = 8,
  MAX_BLOCKS = MAX_INPUTS + MAX_OUTPUTS,
  MAX_VIEW_BYTES = 1 << 16, /* larger views are shrunk to fit */
  MAX_OUTPUT_BYTES = 1 << 22,
};

/* ---- reading the input ------------------------------------------------------- */

typedef struct reader {
  const uint8_t* data;
  size_t size, pos;
} reader_t;

/* The next byte; 0 once the input is spent (so every input decodes). */
static uint8_t next(reader_t* r) { return r->pos < r->size ? r->data[r->pos++] : 0; }

static uint64_t next_u64(reader_t* r) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= (uint64_t)next(r) << (8 * i);
  return v;
}

static const int64_t k_ints[] = {0, 1, 2, -1, 3, -2, 4, 5, 7, 16, -3, 1LL << 40, INT64_MAX,
                                 INT64_MIN, (1LL << 62), -(1LL << 62)};
static const double k_floats[] = {0.0, 1.0, -1.0, 0.5, 2.0, 3.5, -0.25, 1e-300, 1e300, -1e300,
                                  INFINITY, -INFINITY, NAN, 9.3e18, -9.3e18, 1e-7};
static const char* const k_strings[] = {
    "mean",     "sum",    "none",   "reflect", "replicate", "circular", "constant", "add",
    "multiply", "prod",   "amax",   "amin",    "bilinear",  "nearest",  "bicubic",  "zeros",
    "border",   "tanh",   "linear", "reduced", "complete",  "r",        "L",        "U",
    "forward",  "backward", "ortho", "floor",  "trunc",     "fro",      "nuc",      "",
};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int64_t pick_int(reader_t* r) { return k_ints[next(r) % COUNT(k_ints)]; }

/* Mostly a valid dtype; sometimes a value outside the enum. */
static tpu_dtype_t pick_dtype(reader_t* r) {
  static const int k_bad[] = {-1, -7, TPU_DTYPE_COUNT, 99, 1 << 20};
  uint8_t b = next(r);
  if (b >= 240) return (tpu_dtype_t)k_bad[b % COUNT(k_bad)];
  return (tpu_dtype_t)(b % TPU_DTYPE_COUNT);
}

/* ---- device memory ----------------------------------------------------------- */

typedef struct arena {
  tpu_stream_t* stream;
  tpu_block_t* blocks[MAX_BLOCKS];
  int count;
} arena_t;

/* Device memory of `bytes` (at least 1) filled from the input; 0 on failure. */
static uint64_t arena_alloc(arena_t* a, reader_t* r, size_t bytes) {
  if (a->count == MAX_BLOCKS) return 0;
  if (bytes == 0) bytes = 1;
  tpu_block_t* block = NULL;
  tpu_status_t s = tpu_block_alloc(a->stream, bytes, &block);
  if (s != TPU_OK) {
    tpu_status_free(s);
    return 0;
  }
  a->blocks[a->count++] = block;
  uint8_t* p = (uint8_t*)(uintptr_t)tpu_block_addr(block); /* the host driver's memory */
  uint8_t seed = next(r);
  for (size_t i = 0; i < bytes; ++i) p[i] = (uint8_t)(seed + i * 37u + (i >> 7));
  return tpu_block_addr(block);
}

static void arena_free(arena_t* a) {
  for (int i = 0; i < a->count; ++i) tpu_block_free(a->blocks[i]);
  a->count = 0;
}

/* The bytes a view spans; false when that overflows. */
static bool view_span(const tpu_view_t* v, size_t* out_bytes) {
  size_t esize = (v->dtype >= 0 && v->dtype < TPU_DTYPE_COUNT) ? tpu_dtype_size(v->dtype) : 8;
  uint64_t span = 1;
  int32_t ndim = v->ndim < 0 ? 0 : (v->ndim > TPU_MAX_DIMS ? TPU_MAX_DIMS : v->ndim);
  for (int32_t d = 0; d < ndim; ++d) {
    if (v->sizes[d] <= 0) {
      *out_bytes = 0;
      return v->sizes[d] == 0;
    }
    uint64_t step;
    if (__builtin_mul_overflow((uint64_t)(v->sizes[d] - 1), (uint64_t)v->strides[d], &step) ||
        __builtin_add_overflow(span, step, &span))
      return false;
  }
  return !__builtin_mul_overflow(span, (uint64_t)esize, out_bytes);
}

/* ---- building the node ------------------------------------------------------- */

static void make_view(reader_t* r, arena_t* a, tpu_view_t* v) {
  memset(v, 0, sizeof(*v));
  v->dtype = pick_dtype(r);
  uint8_t nd = next(r);
  v->ndim = nd >= 250 ? (int32_t)(nd - 240) - 3 : nd % 5; /* sometimes -1..12, out of range */
  int32_t ndim = v->ndim < 0 ? 0 : (v->ndim > TPU_MAX_DIMS ? TPU_MAX_DIMS : v->ndim);
  for (int32_t d = 0; d < ndim; ++d) {
    uint8_t b = next(r);
    v->sizes[d] = b == 255 ? (1LL << 62) : b == 254 ? -1 : b == 253 ? 3 : b % 4;
  }
  bool contiguous = next(r) < 192;
  int64_t stride = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    if (contiguous) {
      v->strides[d] = stride;
      if (v->sizes[d] > 1 && v->sizes[d] < (1LL << 20) && stride <= (1LL << 40))
        stride *= v->sizes[d];
    } else {
      uint8_t b = next(r);
      v->strides[d] = b == 255 ? -1 : b % 4; /* 0: broadcast; -1: refused */
    }
  }
  size_t bytes;
  bool fits = view_span(v, &bytes);
  int64_t numel = 1; /* the element count, capped at 2^20 */
  for (int32_t d = 0; d < ndim && fits; ++d) {
    if (v->sizes[d] > 0) numel = v->sizes[d] >= (1LL << 20) ? (1LL << 20) : numel * v->sizes[d];
    if (numel > (1LL << 20)) numel = 1LL << 20;
  }
  if (fits && (bytes > MAX_VIEW_BYTES || numel >= (1LL << 20))) { /* too large: shrink it */
    for (int32_t d = 0; d < ndim; ++d)
      if (v->sizes[d] > 1) v->sizes[d] = 1;
    fits = view_span(v, &bytes);
  }
  /* A view whose extent overflows cannot be backed; it gets a small block,
   * and the runtime must refuse it from its sizes alone. */
  v->addr = arena_alloc(a, r, fits ? bytes : 64);
  if (next(r) == 255) v->addr = 0; /* no memory: refused unless empty */
}

static void make_scalar(reader_t* r, tpu_scalar_t* s) {
  memset(s, 0, sizeof(*s));
  s->dtype = pick_dtype(r);
  s->is_tensor = next(r) & 1;
  uint8_t how = next(r);
  if (how < 96) s->v.f = k_floats[how % COUNT(k_floats)];
  else if (how < 192) s->v.i = k_ints[how % COUNT(k_ints)];
  else s->v.i = (int64_t)next_u64(r);
}

static void make_attr(reader_t* r, tpu_attr_t* attr) {
  memset(attr, 0, sizeof(*attr));
  uint8_t kind = next(r);
  attr->kind = kind >= 250 ? (tpu_attr_kind_t)(kind - 240) : (tpu_attr_kind_t)(kind % 7);
  switch (attr->kind) {
    case TPU_ATTR_INT: attr->u.i = pick_int(r); break;
    case TPU_ATTR_BOOL: attr->u.i = next(r) & 1; break;
    case TPU_ATTR_FLOAT: attr->u.f = k_floats[next(r) % COUNT(k_floats)]; break;
    case TPU_ATTR_DTYPE: attr->u.dtype = pick_dtype(r); break;
    case TPU_ATTR_INTS: {
      uint8_t c = next(r);
      attr->count = c >= 250 ? (int32_t)c - 250 + TPU_MAX_INTS - 1 : c % 5; /* up to MAX+4 */
      if (c == 249) attr->count = -1;
      for (int32_t i = 0; i < TPU_MAX_INTS; ++i) attr->u.ints[i] = i < 5 ? pick_int(r) : 1;
      break;
    }
    case TPU_ATTR_STR: {
      uint8_t b = next(r);
      if (b == 255) memset(attr->u.str, 'x', TPU_MAX_STR); /* no NUL */
      else strcpy(attr->u.str, k_strings[b % COUNT(k_strings)]);
      break;
    }
    default: attr->u.i = (int64_t)next_u64(r); break; /* NONE, or a kind out of range */
  }
}

/* An output for a row without a shape function (the bridge then takes its
 * metadata from PyTorch's meta kernel): contiguous, of input 0's shape, that
 * shape less its last dims, or random; false when it cannot be backed. */
static bool make_output(reader_t* r, arena_t* a, const tpu_node_t* node, tpu_view_t* v) {
  memset(v, 0, sizeof(*v));
  uint8_t how = next(r);
  const tpu_value_t* in0 = node->num_inputs > 0 ? &node->inputs[0] : NULL;
  if (how < 160 && in0 && in0->kind == TPU_VALUE_VIEW && in0->u.view.ndim >= 0 &&
      in0->u.view.ndim <= TPU_MAX_DIMS) {
    *v = in0->u.view;
    int32_t drop = how % 4 == 3 ? 2 : how % 4 == 2 ? 1 : 0;
    v->ndim = v->ndim > drop ? v->ndim - drop : 0;
    if (how & 64) v->dtype = pick_dtype(r);
  } else {
    v->dtype = pick_dtype(r);
    v->ndim = next(r) % 5;
    for (int32_t d = 0; d < v->ndim; ++d) v->sizes[d] = next(r) % 4;
  }
  tpu_view_set_contiguous(v);
  size_t bytes;
  if (!view_span(v, &bytes) || bytes > MAX_OUTPUT_BYTES) return false;
  v->addr = arena_alloc(a, r, bytes);
  return v->addr != 0;
}

/* ---- running it -------------------------------------------------------------- */

static tpu_stream_t* fuzz_stream(void) {
  static tpu_stream_t* stream;
  if (!stream) {
    tpu_chip_t* chip = NULL;
    tpu_status_t s = tpu_runtime_init();
    if (s == TPU_OK) s = tpu_chip_get(0, &chip);
    if (s == TPU_OK) s = tpu_stream_get(chip, 0, &stream);
    tpu_status_free(s);
  }
  return stream;
}

/* With TPU_FUZZ_VERBOSE set, the decoded node, for reading a crasher. */
static void describe(const tpu_node_t* n) {
  if (!getenv("TPU_FUZZ_VERBOSE")) return;
  fprintf(stderr, "op %s: %d inputs, %d attrs, %d outputs\n", tpu_op_def(n->op)->name,
          n->num_inputs, n->num_attrs, n->num_outputs);
  for (int32_t i = 0; i < n->num_inputs; ++i) {
    const tpu_value_t* v = &n->inputs[i];
    if (v->kind == TPU_VALUE_VIEW) {
      fprintf(stderr, "  in %d: view dtype %d ndim %d addr %#llx sizes", i, v->u.view.dtype,
              v->u.view.ndim, (unsigned long long)v->u.view.addr);
      for (int32_t d = 0; d < v->u.view.ndim && d < TPU_MAX_DIMS; ++d)
        fprintf(stderr, " %lld/%lld", (long long)v->u.view.sizes[d],
                (long long)v->u.view.strides[d]);
      fputc('\n', stderr);
    } else if (v->kind == TPU_VALUE_SCALAR) {
      fprintf(stderr, "  in %d: scalar dtype %d tensor %d bits %#llx\n", i, v->u.scalar.dtype,
              v->u.scalar.is_tensor, (unsigned long long)v->u.scalar.v.i);
    } else {
      fprintf(stderr, "  in %d: kind %d\n", i, v->kind);
    }
  }
  for (int32_t k = 0; k < n->num_attrs && k < TPU_MAX_ATTRS; ++k)
    fprintf(stderr, "  attr %d: kind %d i %lld f %g count %d\n", k, n->attrs[k].kind,
            (long long)n->attrs[k].u.i, n->attrs[k].u.f, n->attrs[k].count);
}

/* Whether `s` failed; frees it. */
static bool failed(tpu_status_t s) {
  bool bad = s != TPU_OK;
  tpu_status_free(s);
  return bad;
}

int tpu_fuzz_node(const uint8_t* data, size_t size) {
  tpu_stream_t* stream = fuzz_stream();
  if (!stream || tpu_op_count() <= 0) return 0;
  reader_t r = {data, size, 0};
  arena_t arena = {stream, {0}, 0};

  tpu_node_t node;
  memset(&node, 0, sizeof(node));
  uint16_t op = (uint16_t)(next(&r) | next(&r) << 8);
  node.op = op % tpu_op_count();
  uint8_t shape = next(&r); /* how far the counts stray from the op's */
  const tpu_op_def_t* def = tpu_op_def(node.op);
  /* The orthogonal polynomials loop to their degree, read from the data, as
   * PyTorch's CPU kernels do: a degree of 2^62 is a hang, not a bug. */
  if (strstr(def->name, "polynomial")) return 0;
  int32_t num_inputs = tpu_spec_count(def->inputs);
  if (shape & 1) num_inputs += (int32_t)(next(&r) % 5) - 2;
  if (num_inputs < 0) num_inputs = 0;
  if (num_inputs > MAX_INPUTS) num_inputs = MAX_INPUTS;
  node.num_inputs = num_inputs;
  node.num_attrs = tpu_op_num_attrs(node.op);
  if (shape & 2) node.num_attrs = (int32_t)(next(&r) % (TPU_MAX_ATTRS + 3)) - 1;
  node.num_outputs = tpu_op_num_outputs(node.op);
  if (node.num_outputs > MAX_OUTPUTS) return 0;

  tpu_value_t inputs[MAX_INPUTS];
  tpu_view_t outputs[MAX_OUTPUTS];
  memset(outputs, 0, sizeof(outputs));
  node.inputs = inputs;
  for (int32_t i = 0; i < num_inputs; ++i) {
    memset(&inputs[i], 0, sizeof(inputs[i]));
    uint8_t kind = next(&r);
    inputs[i].kind = kind < 160 ? TPU_VALUE_VIEW : kind < 224 ? TPU_VALUE_SCALAR
                   : kind < 250 ? TPU_VALUE_NONE : (tpu_value_kind_t)(kind - 240);
    if (inputs[i].kind == TPU_VALUE_VIEW) make_view(&r, &arena, &inputs[i].u.view);
    else if (inputs[i].kind == TPU_VALUE_SCALAR) make_scalar(&r, &inputs[i].u.scalar);
  }
  for (int32_t k = 0; k < TPU_MAX_ATTRS; ++k) make_attr(&r, &node.attrs[k]);

  describe(&node);
  /* The bridge's order. A check before the outputs are set (ops.h allows
   * it), then infer, allocate, check again and submit. */
  if (shape & 4) failed(tpu_op_check(&node));
  node.outputs = outputs;
  for (int32_t k = 0; k < MAX_OUTPUTS; ++k) { /* an out= tensor's dtype, or none (ops.h) */
    memset(&outputs[k], 0, sizeof(outputs[k]));
    outputs[k].dtype = (tpu_dtype_t)((int32_t)(next(&r) % (TPU_DTYPE_COUNT + 1)) - 1);
  }
  bool ok = !failed(tpu_op_infer(&node, outputs));
  if (!ok) memset(outputs, 0, sizeof(outputs)); /* the dtypes were for infer only */
  if (!def->infer) { /* the meta kernel's outputs, as far as the runtime knows: any */
    ok = true;
    for (int32_t k = 0; ok && k < node.num_outputs; ++k)
      ok = make_output(&r, &arena, &node, &outputs[k]);
  }
  for (int32_t k = 0; ok && def->infer && k < node.num_outputs; ++k) {
    if (tpu_view_is_absent(&outputs[k])) continue;
    size_t bytes;
    ok = view_span(&outputs[k], &bytes) && bytes <= MAX_OUTPUT_BYTES;
    if (ok) ok = (outputs[k].addr = arena_alloc(&arena, &r, bytes)) != 0;
  }
  if (ok && !failed(tpu_op_check(&node))) {
    bool ran = !failed(tpu_stream_submit_node(stream, &node));
    ran = !failed(tpu_stream_synchronize(stream)) && ran;
    if (ran && getenv("TPU_FUZZ_STATS")) fprintf(stderr, "ran %s\n", def->name);
  } else if (shape & 8) {
    /* A node its check refused (or whose outputs could not be had),
     * submitted anyway: submission must refuse it too. */
    if (!failed(tpu_stream_submit_node(stream, &node))) failed(tpu_stream_synchronize(stream));
  }
  failed(tpu_stream_synchronize(stream));
  arena_free(&arena);
  return 0;
}
