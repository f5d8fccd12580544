/* kernels/elementwise/executor.c — the elementwise executor (see elementwise.h).
 *
 *   1. dtype ranges: which Python numbers fit a dtype (values themselves
 *      are converted by tpu_convert, convert.c, which has typed loops and
 *      SIMD half paths for the contiguous runs tiles move);
 *   2. planning: a node's common/result dtypes, tile function and
 *      parameters, from its row's tpu_ew_impl_t;
 *   3. layout: operands broadcast to the output's shape (stride 0), size-1
 *      dims dropped, dims ordered by the output's strides and collapsed where
 *      every operand is contiguous across them;
 *   4. tiles: the output is split into tiles (pieces of one row, or several
 *      short rows), run in parallel; operands are used in place when they
 *      already hold the compute type contiguously, else converted through
 *      per-thread scratch.
 */
#include "kernels/elementwise/elementwise.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define EW_MAX_OPS (1 + TPU_EW_MAX_INPUTS)
/* Elements one thread handles before work is split. */
#define EW_GRAIN 32768

/* ---- 1. dtype ranges -------------------------------------------------------- */

/* Largest finite value of each floating dtype (0: not floating). */
#define EW_FMAX_BOOL 0.0
#define EW_FMAX_U8 0.0
#define EW_FMAX_I8 0.0
#define EW_FMAX_I16 0.0
#define EW_FMAX_I32 0.0
#define EW_FMAX_I64 0.0
#define EW_FMAX_F16 65504.0
#define EW_FMAX_BF16 3.3895313892515355e38
#define EW_FMAX_F32 FLT_MAX
#define EW_FMAX_F64 DBL_MAX

/* Facts per dtype: integer width/signedness and float range. */
typedef struct ew_dtype_info {
  int8_t bits;
  bool is_signed;
  double fmax;
} ew_dtype_info_t;

#define EW_X_(E, n, T, C, K) \
  [TPU_DTYPE_##E] = {(int8_t)(8 * sizeof(T)), (T)-1 < (T)0, EW_FMAX_##E},
#define EW_U_(E, n, T, C, K) [TPU_DTYPE_##E] = {(int8_t)(8 * sizeof(T)), false, 0.0},
static const ew_dtype_info_t g_info[TPU_DTYPE_COUNT] = {TPU_DTYPE_LIST(EW_X_)
                                                             TPU_DTYPE_UNSIGNED_LIST(EW_U_)};
#undef EW_U_
#undef EW_X_

double tpu_ew_dtype_max(tpu_dtype_t dtype) {
  return dtype >= 0 && dtype < TPU_DTYPE_COUNT ? g_info[dtype].fmax : 0.0;
}

bool tpu_ew_scalar_fits(const tpu_scalar_t* s, tpu_dtype_t dtype) {
  if (tpu_dtype_is_complex(dtype)) dtype = tpu_dtype_part(dtype); /* the real part's range */
  if (dtype < 0 || dtype >= TPU_DTYPE_COUNT || dtype == TPU_DTYPE_BOOL) return true;
  if (tpu_dtype_is_complex(s->dtype)) { /* each part as a float */
    for (int p = 0; p < 2; ++p) {
      tpu_scalar_t part = {.dtype = TPU_DTYPE_F64, .v.f = s->v.c[p]};
      if (!tpu_ew_scalar_fits(&part, dtype)) return false;
    }
    return true;
  }
  bool from_float = tpu_dtype_is_floating(s->dtype);
  double v = from_float ? s->v.f : (double)s->v.i;
  if (tpu_dtype_is_floating(dtype)) return isinf(v) || isnan(v) || fabs(v) <= g_info[dtype].fmax;
  if (!from_float && g_info[dtype].bits == 64) return true;
  double hi = ldexp(1.0, g_info[dtype].is_signed ? g_info[dtype].bits - 1 : g_info[dtype].bits);
  double lo = g_info[dtype].is_signed ? -hi : -(hi - 1);
  return v >= lo && v < hi;
}

/* ---- 2. planning ----------------------------------------------------------- */

/* PyTorch's canCast: no floating -> integral, no non-bool -> bool. */
static bool ew_can_cast(tpu_dtype_t from, tpu_dtype_t to) {
  if (tpu_dtype_is_floating(from) && !tpu_dtype_is_floating(to) && to != TPU_DTYPE_BOOL)
    return false;
  if (from != TPU_DTYPE_BOOL && to == TPU_DTYPE_BOOL) return false;
  return true;
}

static bool ew_is_half(tpu_dtype_t d) { return d == TPU_DTYPE_F16 || d == TPU_DTYPE_BF16; }

/* div's rounding_mode (attr 0): 0 none, 1 trunc, 2 floor. */
static tpu_status_t ew_rounding_mode(const tpu_node_t* node, int32_t* mode) {
  *mode = 0;
  if (node->num_attrs < 1 || node->attrs[0].kind == TPU_ATTR_NONE) return TPU_OK;
  const tpu_attr_t* a = &node->attrs[0];
  if (a->kind == TPU_ATTR_STR && strcmp(a->u.str, "trunc") == 0) {
    *mode = 1;
  } else if (a->kind == TPU_ATTR_STR && strcmp(a->u.str, "floor") == 0) {
    *mode = 2;
  } else {
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "div expected rounding_mode to be one of None, 'trunc', or 'floor' "
                           "but found '%s'",
                           a->kind == TPU_ATTR_STR ? a->u.str : "?");
  }
  return TPU_OK;
}

static tpu_status_t ew_unsupported(const tpu_op_def_t* def, const char* why, tpu_dtype_t d) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: %s (%s) not supported natively", def->name,
                         why, tpu_dtype_name(d));
}

/* Reads the impl's number attrs into the params, with PyTorch's checks. */
tpu_status_t tpu_ew_parse_params(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_ew_plan_t* plan) {
  const tpu_ew_impl_t* impl = plan->impl;
  for (int32_t j = 0; j < impl->num_params; ++j) {
    const tpu_attr_t* a = j < node->num_attrs ? &node->attrs[j] : NULL;
    tpu_scalar_t s = {.dtype = TPU_DTYPE_F64, .v.f = impl->dflt[j]};
    if (a && (a->kind == TPU_ATTR_INT || a->kind == TPU_ATTR_BOOL)) {
      s.dtype = a->kind == TPU_ATTR_INT ? TPU_DTYPE_I64 : TPU_DTYPE_BOOL;
      s.v.i = a->u.i;
    } else if (a && a->kind == TPU_ATTR_FLOAT) {
      s.v.f = a->u.f;
    } else if (a && a->kind == TPU_ATTR_COMPLEX && tpu_dtype_is_complex(plan->result)) {
      /* complex nodes only (cx_plan): the imaginary part beside f */
      s.v.f = a->u.floats[0];
      plan->params.fi[j] = a->u.floats[1];
    } else if (a && a->kind != TPU_ATTR_NONE) {
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: attr %d is not a number",
                             def->name, j);
    }
    bool is_float = s.dtype == TPU_DTYPE_F64;
    plan->params.f[j] = is_float ? s.v.f : (double)s.v.i;
    if (is_float)
      tpu_convert(&plan->params.i[j], TPU_DTYPE_I64, 1, &s.v.f, TPU_DTYPE_F64, 1, 1);
    else
      plan->params.i[j] = s.v.i;
    if ((impl->checked_params >> j & 1) && !tpu_ew_scalar_fits(&s, plan->common))
      return ew_unsupported(def, "value cannot be converted without overflow", plan->common);
    if (j == 0 && (impl->flags & TPU_EW_ALPHA) && a) {
      if (a->kind == TPU_ATTR_FLOAT && !tpu_dtype_is_floating(plan->common))
        return ew_unsupported(def, "floating alpha with integral inputs", plan->common);
      if (a->kind == TPU_ATTR_BOOL && plan->common != TPU_DTYPE_BOOL)
        return ew_unsupported(def, "boolean alpha with non-boolean results", plan->common);
    }
  }
  return TPU_OK;
}

tpu_status_t tpu_ew_promote(const tpu_op_def_t* def, const tpu_node_t* node,
                            tpu_dtype_t* out_dtype) {
  const tpu_ew_impl_t* impl = (const tpu_ew_impl_t*)def->impl;
  int32_t nin = node->num_inputs;
  if (nin < 1 || nin > TPU_EW_MAX_INPUTS || nin != tpu_spec_count(def->inputs))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: expected %d inputs, got %d", def->name,
                           tpu_spec_count(def->inputs), nin);
  tpu_value_t promoted[TPU_EW_MAX_INPUTS];
  int32_t np = 0;
  for (int32_t k = 0; k < nin; ++k)
    if ((impl->promote == 0 || (impl->promote >> k & 1)) && node->inputs[k].kind != TPU_VALUE_NONE)
      promoted[np++] = node->inputs[k];
  if (np == 0) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: no operands", def->name);
  *out_dtype = tpu_result_type(promoted, np);
  if (*out_dtype == TPU_DTYPE_INVALID) /* complex32 (a half type and a complex operand) */
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s: a complex result of a half type",
                           def->name);
  return TPU_OK;
}

tpu_status_t tpu_ew_plan(const tpu_op_def_t* def, const tpu_node_t* node, tpu_ew_plan_t* plan) {
  const tpu_ew_impl_t* impl = (const tpu_ew_impl_t*)def->impl;
  int32_t nin = node->num_inputs;
  memset(plan, 0, sizeof(*plan));
  plan->impl = impl;
  tpu_dtype_t rt;
  TPU_RETURN_IF_ERROR(tpu_ew_promote(def, node, &rt));
  tpu_dtype_t as_float = tpu_dtype_is_floating(rt) ? rt : TPU_DTYPE_F32;
  switch (impl->rule) {
    case TPU_EW_PROMOTE:
      plan->common = plan->result = rt;
      break;
    case TPU_EW_FLOAT:
      plan->common = plan->result = as_float;
      break;
    case TPU_EW_BOOL_OUT:
      plan->common = rt;
      plan->result = TPU_DTYPE_BOOL;
      break;
    case TPU_EW_FIRST:
      plan->common = plan->result = node->inputs[0].kind == TPU_VALUE_VIEW
                                        ? node->inputs[0].u.view.dtype
                                        : node->inputs[0].u.scalar.dtype;
      break;
    case TPU_EW_DIV:
      TPU_RETURN_IF_ERROR(ew_rounding_mode(node, &plan->params.mode));
      plan->common = plan->result = plan->params.mode ? rt : as_float;
      break;
  }
  for (int32_t k = 0; k < nin; ++k) {
    const tpu_value_t* v = &node->inputs[k];
    if ((impl->bool_in >> k & 1) &&
        (v->kind != TPU_VALUE_VIEW || v->u.view.dtype != TPU_DTYPE_BOOL))
      return ew_unsupported(def, "non-bool mask or condition",
                            v->kind == TPU_VALUE_VIEW ? v->u.view.dtype : v->u.scalar.dtype);
    if ((impl->flags & TPU_EW_NO_BOOL) && v->kind != TPU_VALUE_NONE &&
        (v->kind == TPU_VALUE_VIEW ? v->u.view.dtype : v->u.scalar.dtype) == TPU_DTYPE_BOOL)
      return ew_unsupported(def, "bool operand", TPU_DTYPE_BOOL);
    if ((impl->flags & TPU_EW_SAME_DTYPE) && v->kind == TPU_VALUE_VIEW &&
        v->u.view.dtype != plan->common)
      return ew_unsupported(def, "inputs of different dtypes", v->u.view.dtype);
    if ((impl->flags & TPU_EW_VALUE_0DIM) && k == nin - 1 && v->kind == TPU_VALUE_VIEW &&
        v->u.view.ndim != 0)
      return ew_unsupported(def, "value tensor with dims", v->u.view.dtype);
    if ((impl->checked >> k & 1) && v->kind == TPU_VALUE_SCALAR && !v->u.scalar.is_tensor &&
        !tpu_ew_scalar_fits(&v->u.scalar, plan->common))
      return ew_unsupported(def, "value cannot be converted without overflow", plan->common);
  }
  plan->ct = tpu_dtype_compute(plan->common);
  plan->fn = impl->fn[plan->ct];
  if (!plan->fn) return ew_unsupported(def, "dtype", plan->common);
  TPU_RETURN_IF_ERROR(tpu_ew_parse_params(def, node, plan));
  return impl->prepare ? impl->prepare(node, plan->common, &plan->params) : TPU_OK;
}

/* ---- 3. layout --------------------------------------------------------------- */

typedef struct ew_layout {
  int32_t ndim; /* >= 1; the last dim is the innermost */
  int32_t nops; /* operand 0 is the output */
  int64_t numel;
  int64_t sizes[TPU_MAX_DIMS];
  int64_t strides[EW_MAX_OPS][TPU_MAX_DIMS];
} ew_layout_t;

/* True when dim a should be inner to dim b: the first operand whose strides
 * along both are nonzero and differ decides. */
static bool ew_dim_inner(const ew_layout_t* L, int32_t a, int32_t b) {
  for (int32_t k = 0; k < L->nops; ++k) {
    int64_t sa = L->strides[k][a], sb = L->strides[k][b];
    if (sa == 0 || sb == 0 || sa == sb) continue;
    return sa < sb;
  }
  return false;
}

static void ew_swap_dims(ew_layout_t* L, int32_t a, int32_t b) {
  int64_t t = L->sizes[a];
  L->sizes[a] = L->sizes[b];
  L->sizes[b] = t;
  for (int32_t k = 0; k < L->nops; ++k) {
    t = L->strides[k][a];
    L->strides[k][a] = L->strides[k][b];
    L->strides[k][b] = t;
  }
}

/* views[0] is the output; views[k] may be NULL (absent input). */
static tpu_status_t ew_layout_init(ew_layout_t* L, const tpu_view_t* const* views, int32_t nops) {
  const tpu_view_t* out = views[0];
  int32_t nd = out->ndim;
  L->nops = nops;
  L->ndim = 0;
  L->numel = tpu_view_numel(out);
  for (int32_t k = 1; k < nops; ++k)
    if (views[k] && views[k]->ndim > nd)
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "output with %d dims doesn't match the broadcast shape of an input "
                             "with %d dims",
                             nd, views[k]->ndim);
  for (int32_t d = 0; d < nd; ++d) {
    int64_t size = out->sizes[d];
    for (int32_t k = 1; k < nops; ++k) {
      const tpu_view_t* v = views[k];
      int32_t vd = v ? d - (nd - v->ndim) : -1;
      if (vd >= 0 && v->sizes[vd] != size && v->sizes[vd] != 1)
        return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                               "The size of tensor a (%lld) must match the size of tensor b "
                               "(%lld) at non-singleton dimension %d",
                               (long long)size, (long long)v->sizes[vd], d);
    }
    if (size == 1) continue;
    if (out->strides[d] == 0 && L->numel > 0)
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "unsupported operation: more than one element of the written-to "
                             "tensor refers to a single memory location. Please clone() the "
                             "tensor before performing the operation.");
    int32_t j = L->ndim++;
    L->sizes[j] = size;
    L->strides[0][j] = out->strides[d];
    for (int32_t k = 1; k < nops; ++k) {
      const tpu_view_t* v = views[k];
      int32_t vd = v ? d - (nd - v->ndim) : -1;
      L->strides[k][j] = (vd >= 0 && v->sizes[vd] == size) ? v->strides[vd] : 0;
    }
  }
  /* Insertion sort: the output's smallest strides innermost. */
  for (int32_t i = 1; i < L->ndim; ++i)
    for (int32_t j = i; j > 0 && ew_dim_inner(L, j - 1, j); --j) ew_swap_dims(L, j - 1, j);
  /* Collapse dims contiguous in every operand. */
  int32_t m = 0;
  for (int32_t i = 0; i < L->ndim; ++i) {
    bool merge = m > 0;
    for (int32_t k = 0; merge && k < nops; ++k)
      merge = L->strides[k][m - 1] == L->strides[k][i] * L->sizes[i];
    if (merge) {
      L->sizes[m - 1] *= L->sizes[i];
      for (int32_t k = 0; k < nops; ++k) L->strides[k][m - 1] = L->strides[k][i];
    } else {
      L->sizes[m] = L->sizes[i];
      for (int32_t k = 0; k < nops; ++k) L->strides[k][m] = L->strides[k][i];
      m++;
    }
  }
  L->ndim = m;
  if (m == 0) { /* a single element */
    L->ndim = 1;
    L->sizes[0] = 1;
    for (int32_t k = 0; k < nops; ++k) L->strides[k][0] = 0;
  }
  return TPU_OK;
}

/* Whether operand k's strides are the contiguous strides of the layout. */
static bool ew_layout_flat(const ew_layout_t* L, int32_t k) {
  int64_t expected = 1;
  for (int32_t d = L->ndim - 1; d >= 0; --d) {
    if (L->sizes[d] != 1 && L->strides[k][d] != expected) return false;
    expected *= L->sizes[d];
  }
  return true;
}

/* PyTorch's non-overlapping-and-dense: strides, sorted, are contiguous ones. */
static bool ew_dense(const tpu_view_t* v) {
  int64_t size[TPU_MAX_DIMS], stride[TPU_MAX_DIMS];
  int32_t n = 0;
  for (int32_t d = 0; d < v->ndim; ++d) {
    if (v->sizes[d] == 1) continue;
    int32_t j = n++;
    for (; j > 0 && stride[j - 1] > v->strides[d]; --j) {
      size[j] = size[j - 1];
      stride[j] = stride[j - 1];
    }
    size[j] = v->sizes[d];
    stride[j] = v->strides[d];
  }
  int64_t expected = 1;
  for (int32_t j = 0; j < n; ++j) {
    if (stride[j] != expected) return false;
    expected *= size[j];
  }
  return true;
}

/* PyTorch's partial-overlap error: two dense views over intersecting
 * memory that are not the same elements in the same layout. */
static bool ew_partial_overlap(const tpu_view_t* a, const tpu_view_t* b) {
  if (tpu_view_numel(a) == 0 || tpu_view_numel(b) == 0 || !ew_dense(a) || !ew_dense(b))
    return false;
  uint64_t lo[2] = {a->addr, b->addr}, hi[2];
  const tpu_view_t* v[2] = {a, b};
  for (int i = 0; i < 2; ++i)
    hi[i] = lo[i] + (uint64_t)tpu_view_numel(v[i]) * tpu_dtype_size(v[i]->dtype);
  if (lo[0] >= hi[1] || lo[1] >= hi[0]) return false;
  bool same = lo[0] == lo[1] && hi[0] == hi[1] && a->ndim == b->ndim;
  for (int32_t d = 0; same && d < a->ndim; ++d)
    same = a->sizes[d] == b->sizes[d] && (a->sizes[d] == 1 || a->strides[d] == b->strides[d]);
  return !same;
}

/* ---- 4. tiles ---------------------------------------------------------------- */

typedef struct ew_operand {
  char* base;
  tpu_dtype_t dtype;
  tpu_compute_type_t ct; /* the type the tile function sees */
  tpu_dtype_t cdtype;    /* its storage dtype */
  tpu_dtype_t via;       /* values pass through this dtype (INVALID: none) */
  int64_t esize;
  bool present;
  bool flat;     /* contiguous in the layout's order: a tile is at its linear index */
  bool konst;    /* one value for every element */
  bool same;     /* usable in place: dtype is cdtype and no via */
  int32_t slot;  /* scratch slot for cdtype values, -1 when always used in place */
  int32_t vslot; /* scratch slot for via values, or -1 */
} ew_operand_t;

typedef struct ew_exec {
  ew_layout_t L;
  ew_operand_t op[EW_MAX_OPS];
  int64_t inner, rows;
  int64_t per_row;       /* tiles per row when rows are long, else 0 */
  int64_t rows_per_tile; /* rows per tile when rows are short */
  int64_t ntiles;
  int32_t nslots;
  tpu_ew_tile_fn fn; /* NULL: converting copy of operand 1 into operand 0 */
  const tpu_ew_params_t* params;
  atomic_int error;
} ew_exec_t;

typedef struct ew_tile {
  int64_t row, col, len, nrows, lin;
} ew_tile_t;

/* Position of a row start: index over the outer dims and operand offsets. */
typedef struct ew_pos {
  int64_t idx[TPU_MAX_DIMS];
  int64_t off[EW_MAX_OPS];
} ew_pos_t;

static void ew_tile_at(const ew_exec_t* e, int64_t t, ew_tile_t* tile) {
  if (e->per_row) {
    tile->row = t / e->per_row;
    tile->col = (t % e->per_row) * TPU_EW_TILE;
    tile->len = e->inner - tile->col < TPU_EW_TILE ? e->inner - tile->col : TPU_EW_TILE;
    tile->nrows = 1;
  } else {
    tile->row = t * e->rows_per_tile;
    tile->col = 0;
    tile->nrows = e->rows - tile->row < e->rows_per_tile ? e->rows - tile->row : e->rows_per_tile;
    tile->len = tile->nrows * e->inner;
  }
  tile->lin = tile->row * e->inner + tile->col;
}

static void ew_pos_init(const ew_exec_t* e, ew_pos_t* p, int64_t row, int64_t col) {
  const ew_layout_t* L = &e->L;
  int32_t last = L->ndim - 1;
  for (int32_t k = 0; k < L->nops; ++k) p->off[k] = col * L->strides[k][last];
  for (int32_t d = last - 1; d >= 0; --d) {
    p->idx[d] = row % L->sizes[d];
    row /= L->sizes[d];
    for (int32_t k = 0; k < L->nops; ++k) p->off[k] += p->idx[d] * L->strides[k][d];
  }
}

static void ew_pos_next_row(const ew_exec_t* e, ew_pos_t* p) {
  const ew_layout_t* L = &e->L;
  for (int32_t d = L->ndim - 2; d >= 0; --d) {
    for (int32_t k = 0; k < L->nops; ++k) p->off[k] += L->strides[k][d];
    if (++p->idx[d] < L->sizes[d]) return;
    for (int32_t k = 0; k < L->nops; ++k) p->off[k] -= L->sizes[d] * L->strides[k][d];
    p->idx[d] = 0;
  }
}

/* Converts operand k's part of a tile between memory and `buf`, whose
 * elements have dtype `bt` (load: memory -> buf; else buf -> memory). */
static void ew_move(const ew_exec_t* e, int32_t k, const ew_tile_t* tile, const ew_pos_t* start,
                    char* buf, tpu_dtype_t bt, bool load) {
  const ew_operand_t* o = &e->op[k];
  int64_t stride = e->L.strides[k][e->L.ndim - 1];
  int64_t seg = tile->nrows == 1 ? tile->len : e->inner;
  int64_t bsize = (int64_t)tpu_dtype_size(bt);
  ew_pos_t p = *start;
  for (int64_t r = 0; r < tile->nrows; ++r) {
    char* mem = o->base + p.off[k] * o->esize;
    char* b = buf + r * seg * bsize;
    if (load)
      tpu_convert(b, bt, 1, mem, o->dtype, stride, seg);
    else
      tpu_convert(mem, o->dtype, stride, b, bt, 1, seg);
    if (r + 1 < tile->nrows) ew_pos_next_row(e, &p);
  }
}

static void ew_copy_tile(const ew_exec_t* e, const ew_tile_t* tile) {
  const ew_operand_t *d = &e->op[0], *s = &e->op[1];
  int64_t ds = e->L.strides[0][e->L.ndim - 1], ss = e->L.strides[1][e->L.ndim - 1];
  int64_t seg = tile->nrows == 1 ? tile->len : e->inner;
  ew_pos_t p;
  ew_pos_init(e, &p, tile->row, tile->col);
  for (int64_t r = 0; r < tile->nrows; ++r) {
    tpu_convert(d->base + p.off[0] * d->esize, d->dtype, ds, s->base + p.off[1] * s->esize,
                s->dtype, ss, seg);
    if (r + 1 < tile->nrows) ew_pos_next_row(e, &p);
  }
}

static void ew_fail(ew_exec_t* e, int code) {
  int expected = 0;
  atomic_compare_exchange_strong(&e->error, &expected, code);
}

static bool ew_direct(const ew_exec_t* e, const ew_operand_t* o, int32_t k, const ew_tile_t* t) {
  return o->same && (o->flat || (t->nrows == 1 && e->L.strides[k][e->L.ndim - 1] == 1));
}

#define EW_SLOT_BYTES (TPU_EW_TILE * 8)
#define EW_ROW_TILE (TPU_EW_TILE / 4)

/* Input k of a tile as an array of its compute type. */
static const void* ew_input(const ew_exec_t* e, int32_t k, const ew_tile_t* tile,
                            const ew_pos_t* pos, char* scratch) {
  const ew_operand_t* o = &e->op[k];
  if (!o->present) return NULL;
  if (ew_direct(e, o, k, tile)) return o->base + (o->flat ? tile->lin : pos->off[k]) * o->esize;
  char* buf = scratch + o->slot * EW_SLOT_BYTES;
  if (o->konst) return buf; /* filled once per chunk */
  if (o->via == TPU_DTYPE_INVALID) {
    ew_move(e, k, tile, pos, buf, o->cdtype, true);
  } else {
    char* vbuf = scratch + o->vslot * EW_SLOT_BYTES;
    ew_move(e, k, tile, pos, vbuf, o->via, true);
    tpu_convert(buf, o->cdtype, 1, vbuf, o->via, 1, tile->len);
  }
  return buf;
}

/* Writes a tile's results (in `out`, compute type) to the output. */
static void ew_output(const ew_exec_t* e, const ew_tile_t* tile, const ew_pos_t* pos, char* out,
                      char* scratch) {
  const ew_operand_t* o = &e->op[0];
  if (o->via == TPU_DTYPE_INVALID) {
    ew_move(e, 0, tile, pos, out, o->cdtype, false);
  } else {
    char* vbuf = scratch + o->vslot * EW_SLOT_BYTES;
    tpu_convert(vbuf, o->via, 1, out, o->cdtype, 1, tile->len);
    ew_move(e, 0, tile, pos, vbuf, o->via, false);
  }
}

static void ew_chunk(void* arg, int64_t t0, int64_t t1) {
  ew_exec_t* e = (ew_exec_t*)arg;
  if (atomic_load(&e->error)) return;
  char* scratch = NULL;
  if (e->nslots > 0 && !(scratch = malloc((size_t)e->nslots * EW_SLOT_BYTES))) {
    ew_fail(e, TPU_EW_ERR_NO_MEMORY);
    return;
  }
  /* Constant inputs are converted once per chunk. */
  int64_t fill = e->L.numel < TPU_EW_TILE ? e->L.numel : TPU_EW_TILE;
  for (int32_t k = 1; k < e->L.nops; ++k) {
    const ew_operand_t* o = &e->op[k];
    if (!o->present || !o->konst || o->slot < 0) continue;
    uint64_t one = 0;
    tpu_dtype_t t = o->via != TPU_DTYPE_INVALID ? o->via : o->dtype;
    tpu_convert(&one, t, 1, o->base, o->dtype, 1, 1);
    tpu_convert(scratch + o->slot * EW_SLOT_BYTES, o->cdtype, 1, &one, t, 0, fill);
  }
  for (int64_t t = t0; t < t1; ++t) {
    ew_tile_t tile;
    ew_pos_t pos;
    ew_tile_at(e, t, &tile);
    if (!e->fn) {
      ew_copy_tile(e, &tile);
      continue;
    }
    ew_pos_init(e, &pos, tile.row, tile.col);
    const void* in[TPU_EW_MAX_INPUTS];
    for (int32_t k = 1; k < e->L.nops; ++k) in[k - 1] = ew_input(e, k, &tile, &pos, scratch);
    const ew_operand_t* o = &e->op[0];
    bool direct = ew_direct(e, o, 0, &tile);
    char* out = direct ? o->base + (o->flat ? tile.lin : pos.off[0]) * o->esize
                       : scratch + o->slot * EW_SLOT_BYTES;
    int rc = e->fn(out, in, tile.len, e->params);
    if (rc) {
      ew_fail(e, rc);
      break;
    }
    if (!direct) ew_output(e, &tile, &pos, out, scratch);
  }
  free(scratch);
}

static void ew_operand_init(ew_exec_t* e, int32_t k, const tpu_view_t* v, tpu_compute_type_t ct,
                            tpu_dtype_t via) {
  ew_operand_t* o = &e->op[k];
  memset(o, 0, sizeof(*o));
  o->slot = o->vslot = -1;
  o->via = TPU_DTYPE_INVALID;
  if (!v) return;
  o->present = true;
  o->base = (char*)tpu_view_ptr(v);
  o->dtype = v->dtype;
  o->ct = ct;
  o->cdtype = tpu_compute_storage_dtype(ct);
  o->esize = (int64_t)tpu_dtype_size(v->dtype);
  o->flat = ew_layout_flat(&e->L, k);
  o->konst = true;
  for (int32_t d = 0; d < e->L.ndim; ++d) o->konst = o->konst && e->L.strides[k][d] == 0;
  if (!e->fn) return; /* a copy converts directly */
  if (via != o->cdtype && via != v->dtype) o->via = via;
  o->same = o->cdtype == v->dtype && o->via == TPU_DTYPE_INVALID;
  bool single_rows = e->per_row > 0 || e->rows_per_tile == 1;
  bool always_direct =
      o->same && (o->flat || (single_rows && e->L.strides[k][e->L.ndim - 1] == 1));
  if (!always_direct) o->slot = e->nslots++;
  if (!always_direct && o->via != TPU_DTYPE_INVALID && !o->konst) o->vslot = e->nslots++;
}

/* Runs fn (or a converting copy when fn is NULL) over views[0] (output) and
 * views[1..nops) (inputs, NULL when absent). cts[k] is the compute type the
 * tile function sees for operand k; vias[k] a dtype its values are rounded
 * to on the way (PyTorch casts inputs to the common dtype and computes the
 * result in it before casting to the output's dtype), or INVALID.
 * Inlined into its callers (tpu_ew_kernel, the planned kernel, the copy):
 * called out of line, strict eager's path paid ~30 instructions a node
 * more. */
static inline __attribute__((always_inline)) tpu_status_t ew_run(
    const tpu_view_t* const* views, int32_t nops, tpu_ew_tile_fn fn,
    const tpu_ew_params_t* params, const tpu_compute_type_t* cts, const tpu_dtype_t* vias) {
  ew_exec_t e;
  TPU_RETURN_IF_ERROR(ew_layout_init(&e.L, views, nops));
  for (int32_t k = 1; k < nops; ++k)
    if (views[k] && ew_partial_overlap(views[0], views[k]))
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "unsupported operation: some elements of the input tensor and the "
                             "written-to tensor refer to a single memory location. Please "
                             "clone() the tensor before performing the operation.");
  if (e.L.numel == 0) return TPU_OK;
  e.fn = fn;
  e.params = params;
  e.nslots = 0;
  atomic_init(&e.error, 0);
  e.inner = e.L.sizes[e.L.ndim - 1];
  e.rows = e.L.numel / e.inner;
  /* Rows of at least EW_ROW_TILE elements are tiles of their own (split
   * when longer than a tile): an operand contiguous along rows but not
   * across them (a broadcast bias, a strided slice) is then read in place
   * instead of gathered into scratch row by row. */
  if (e.inner >= EW_ROW_TILE) {
    e.per_row = (e.inner + TPU_EW_TILE - 1) / TPU_EW_TILE;
    e.rows_per_tile = 1;
    e.ntiles = e.rows * e.per_row;
  } else {
    e.per_row = 0;
    e.rows_per_tile = TPU_EW_TILE / e.inner;
    e.ntiles = (e.rows + e.rows_per_tile - 1) / e.rows_per_tile;
  }
  for (int32_t k = 0; k < nops; ++k) ew_operand_init(&e, k, views[k], cts[k], vias[k]);
  int64_t per_tile = e.L.numel / e.ntiles;
  int64_t grain = per_tile >= EW_GRAIN ? 1 : EW_GRAIN / (per_tile > 0 ? per_tile : 1);
  tpu_parallel_for(e.ntiles, grain, ew_chunk, &e);
  switch (atomic_load(&e.error)) {
    case 0:
      return TPU_OK;
    case TPU_EW_ERR_ZERO_DIV:
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "ZeroDivisionError");
    default:
      return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "elementwise scratch allocation failed");
  }
}

/* ---- row functions --------------------------------------------------------- */

/* The kernel after planning: the node (not complex) with its plan. */
static inline __attribute__((always_inline)) tpu_status_t ew_run_planned(
    const tpu_op_def_t* def, const tpu_node_t* node, const tpu_ew_plan_t* plan) {
  if (node->num_outputs != 1)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: expected 1 output", def->name);
  const tpu_view_t* out = &node->outputs[0];
  if (!ew_can_cast(plan->result, out->dtype))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "result type %s can't be cast to the desired output type %s",
                           tpu_dtype_name(plan->result), tpu_dtype_name(out->dtype));
  const tpu_ew_impl_t* impl = plan->impl;
  uint64_t storage[TPU_EW_MAX_INPUTS];
  tpu_view_t scalars[TPU_EW_MAX_INPUTS];
  const tpu_view_t* views[EW_MAX_OPS] = {out};
  tpu_compute_type_t cts[EW_MAX_OPS];
  cts[0] = impl->rule == TPU_EW_BOOL_OUT ? TPU_COMPUTE_B8 : plan->ct;
  /* Python numbers become constants of the common dtype (PyTorch casts
   * them), or of the compute type for opmath ops on half tensors. */
  tpu_dtype_t scalar_dtype = ((impl->flags & TPU_EW_OPMATH_SCALAR) && ew_is_half(plan->common))
                                 ? tpu_compute_storage_dtype(plan->ct)
                                 : plan->common;
  for (int32_t k = 0; k < node->num_inputs; ++k) {
    const tpu_value_t* v = &node->inputs[k];
    cts[k + 1] = (impl->bool_in >> k & 1) ? TPU_COMPUTE_B8 : plan->ct;
    bool value = (impl->flags & TPU_EW_VALUE_0DIM) && k == node->num_inputs - 1;
    if (v->kind == TPU_VALUE_VIEW && value) {
      /* A 0-dim value tensor is read first, as PyTorch's value.item() (it
       * may be an element of the output). */
      storage[k] = 0;
      tpu_convert(&storage[k], plan->common, 1, tpu_view_ptr(&v->u.view), v->u.view.dtype, 1, 1);
      memset(&scalars[k], 0, sizeof(scalars[k]));
      scalars[k].addr = (uint64_t)(uintptr_t)&storage[k];
      scalars[k].dtype = plan->common;
      views[k + 1] = &scalars[k];
    } else if (v->kind == TPU_VALUE_VIEW) {
      views[k + 1] = &v->u.view;
    } else if (v->kind == TPU_VALUE_SCALAR) {
      tpu_value_to_view(v, scalar_dtype, &storage[k], &scalars[k]);
      views[k + 1] = &scalars[k];
    } else {
      views[k + 1] = NULL;
    }
  }
  /* Tensors reach the tile function as the common dtype, and results
   * leave it as the result dtype (vias only matter when those are narrower
   * than the compute type). Python numbers were converted above. */
  tpu_dtype_t vias[EW_MAX_OPS];
  vias[0] = out->dtype != plan->result ? plan->result : TPU_DTYPE_INVALID;
  for (int32_t k = 0; k < node->num_inputs; ++k)
    vias[k + 1] = (node->inputs[k].kind == TPU_VALUE_VIEW && !(impl->bool_in >> k & 1))
                      ? plan->common
                      : TPU_DTYPE_INVALID;
  return ew_run(views, 1 + node->num_inputs, plan->fn, &plan->params, cts, vias);
}

tpu_status_t tpu_ew_kernel(const tpu_op_def_t* def, const tpu_node_t* node, tpu_exec_ctx_t* ctx) {
  (void)ctx;
  if (tpu_ew_node_is_complex(node)) return tpu_ew_cx_kernel(def, node);
  tpu_ew_plan_t plan;
  TPU_RETURN_IF_ERROR(tpu_ew_plan(def, node, &plan));
  return ew_run_planned(def, node, &plan);
}

tpu_status_t tpu_ew_kernel_planned(const tpu_op_def_t* def, const tpu_node_t* node,
                                   const tpu_ew_plan_t* plan) {
  return ew_run_planned(def, node, plan);
}

tpu_status_t tpu_ew_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* out_views) {
  if (tpu_ew_node_is_complex(node)) return tpu_ew_cx_infer(def, node, out_views);
  tpu_ew_plan_t plan;
  TPU_RETURN_IF_ERROR(tpu_ew_plan(def, node, &plan));
  tpu_view_t* out = &out_views[0];
  memset(out, 0, sizeof(*out));
  TPU_RETURN_IF_ERROR(
      tpu_broadcast_shapes(node->inputs, node->num_inputs, out->sizes, &out->ndim));
  out->dtype = plan.result;
  tpu_view_set_contiguous(out);
  return TPU_OK;
}

tpu_status_t tpu_ew_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  if (tpu_ew_node_is_complex(node)) return tpu_ew_cx_check(def, node);
  tpu_ew_plan_t plan;
  return tpu_ew_plan(def, node, &plan);
}

tpu_status_t tpu_ew_copy(const tpu_view_t* dst, const tpu_view_t* src) {
  const tpu_view_t* views[2] = {dst, src};
  const tpu_compute_type_t cts[2] = {tpu_dtype_compute(dst->dtype), tpu_dtype_compute(src->dtype)};
  const tpu_dtype_t vias[2] = {TPU_DTYPE_INVALID, TPU_DTYPE_INVALID};
  return ew_run(views, 2, NULL, NULL, cts, vias);
}

/* ---- sub-nodes ----------------------------------------------------------------- */

static const char* const g_sub_inputs[TPU_EW_MAX_INPUTS + 1] = {"", "a", "a,b", "a,b,c",
                                                                 "a,b,c,d"};

static tpu_status_t ew_sub_node(const tpu_ew_impl_t* impl, const char* name,
                                const tpu_value_t* inputs, int32_t nin, const tpu_attr_t* attrs,
                                int32_t nattrs, const tpu_view_t* out, tpu_op_def_t* def,
                                tpu_node_t* node) {
  if (nin < 1 || nin > TPU_EW_MAX_INPUTS || nattrs < 0 || nattrs > TPU_MAX_ATTRS)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s: bad sub-node", name);
  memset(def, 0, sizeof(*def));
  def->name = name;
  def->inputs = g_sub_inputs[nin];
  def->attrs = "";
  def->outputs = "out";
  def->impl = impl;
  memset(node, 0, sizeof(*node));
  node->op = -1;
  node->num_inputs = nin;
  node->num_outputs = out ? 1 : 0;
  node->num_attrs = nattrs;
  node->inputs = (tpu_value_t*)inputs;
  node->outputs = (tpu_view_t*)out;
  for (int32_t j = 0; j < nattrs; ++j) node->attrs[j] = attrs[j];
  return TPU_OK;
}

tpu_status_t tpu_ew_run_impl(const tpu_ew_impl_t* impl, const char* name,
                             const tpu_value_t* inputs, int32_t nin, const tpu_attr_t* attrs,
                             int32_t nattrs, const tpu_view_t* out) {
  tpu_op_def_t def;
  tpu_node_t node;
  TPU_RETURN_IF_ERROR(ew_sub_node(impl, name, inputs, nin, attrs, nattrs, out, &def, &node));
  return tpu_ew_kernel(&def, &node, NULL);
}

tpu_status_t tpu_ew_result_dtype(const tpu_ew_impl_t* impl, const char* name,
                                 const tpu_value_t* inputs, int32_t nin, const tpu_attr_t* attrs,
                                 int32_t nattrs, tpu_dtype_t* dtype) {
  tpu_op_def_t def;
  tpu_node_t node;
  tpu_ew_plan_t plan;
  TPU_RETURN_IF_ERROR(ew_sub_node(impl, name, inputs, nin, attrs, nattrs, NULL, &def, &node));
  TPU_RETURN_IF_ERROR(tpu_ew_plan(&def, &node, &plan));
  *dtype = plan.result;
  return TPU_OK;
}
