/* advanced_args.c — argument parsing and validation of the index_adv
 * family (advanced.c): index lists with None gaps and bool masks, the
 * indexing result's layout [O..., B..., I...], and every other row's shape
 * and dtype rules. Shared by the kernels and the reference (advanced_ref.c).
 */
#include <string.h>

#include "kernels/index/advanced.h"
#include "kernels/common/kernel_util.h"

/* ---- arguments --------------------------------------------------------------- */

static tpu_status_t unimpl(const char* what) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s", what);
}

static bool is_index_dtype(tpu_dtype_t d) { return d == TPU_DTYPE_I64 || d == TPU_DTYPE_I32; }

static const tpu_view_t* in_view(const tpu_node_t* node, int32_t i) {
  return (i >= 0 && i < node->num_inputs && node->inputs[i].kind == TPU_VALUE_VIEW)
             ? &node->inputs[i].u.view
             : NULL;
}

/* Right-aligned broadcast of `sizes` into the running shape. */
bool tpu_ax_bcast(int32_t* nd, int64_t* out, int32_t n, const int64_t* sizes) {
  int32_t r = n > *nd ? n : *nd;
  int64_t res[TPU_MAX_DIMS];
  for (int32_t d = 0; d < r; ++d) {
    int32_t a = d - (r - *nd), b = d - (r - n);
    int64_t x = a >= 0 ? out[a] : 1, y = b >= 0 ? sizes[b] : 1;
    if (x != y && x != 1 && y != 1) return false;
    res[d] = x == 1 ? y : x;
  }
  *nd = r;
  memcpy(out, res, sizeof(int64_t) * (size_t)r);
  return true;
}

/* The terms of an index list (inputs [first, first + n)) and the result
 * layout. `count` is the mask's number of ones, -1 when unknown (then the
 * index shape B is not computed). */
static tpu_status_t parse_terms(const tpu_node_t* node, int32_t first, int32_t n, int64_t count,
                                ax_args_t* a) {
  const tpu_view_t* self = a->self;
  int32_t d = 0;
  a->nterms = 0, a->mask_term = -1;
  for (int32_t k = 0; k < n; ++k) {
    const tpu_value_t* v = &node->inputs[first + k];
    if (v->kind == TPU_VALUE_NONE) {
      d++;
      continue;
    }
    if (v->kind != TPU_VALUE_VIEW) return unimpl("a scalar index");
    const tpu_view_t* t = &v->u.view;
    ax_term_t* term = &a->terms[a->nterms];
    term->idx = t, term->dim = d, term->ndims = 1, term->mask = false;
    if (t->dtype == TPU_DTYPE_BOOL) {
      if (t->ndim == 0 || a->mask_term >= 0) return unimpl("0-dim or several bool masks");
      if (d + t->ndim > self->ndim) return unimpl("too many indices");
      for (int32_t m = 0; m < t->ndim; ++m)
        if (t->sizes[m] != self->sizes[d + m]) return unimpl("mask shape mismatch");
      term->mask = true, term->ndims = t->ndim;
      a->mask_term = a->nterms;
    } else if (!is_index_dtype(t->dtype)) {
      return unimpl("index dtype");
    }
    d += term->ndims;
    a->nterms++;
  }
  if (d > self->ndim) return unimpl("too many indices");
  if (a->nterms == 0) return unimpl("no index tensors");
  a->adjacent = true;
  for (int32_t k = 1; k < a->nterms; ++k)
    if (a->terms[k].dim != a->terms[k - 1].dim + a->terms[k - 1].ndims) a->adjacent = false;
  bool indexed[TPU_MAX_DIMS] = {false};
  for (int32_t k = 0; k < a->nterms; ++k)
    for (int32_t m = 0; m < a->terms[k].ndims; ++m) indexed[a->terms[k].dim + m] = true;
  a->nO = a->nI = 0;
  for (int32_t s = 0; s < self->ndim; ++s) {
    if (indexed[s]) continue;
    if (a->adjacent && s < a->terms[0].dim) a->odims[a->nO++] = s;
    else a->idims[a->nI++] = s;
  }
  a->bnd = -1;
  if (a->mask_term >= 0 && count < 0) return TPU_OK;
  a->bnd = 0;
  for (int32_t k = 0; k < a->nterms; ++k) {
    const ax_term_t* t = &a->terms[k];
    int64_t c[1] = {count};
    if (!(t->mask ? tpu_ax_bcast(&a->bnd, a->bsizes, 1, c)
                  : tpu_ax_bcast(&a->bnd, a->bsizes, t->idx->ndim, t->idx->sizes)))
      return unimpl("index shapes do not broadcast");
  }
  if (a->nO + a->bnd + a->nI > TPU_MAX_DIMS) return unimpl("result of more than 12 dims");
  return TPU_OK;
}

void tpu_ax_result_of_terms(ax_args_t* a) {
  a->ndim = 0;
  for (int32_t k = 0; k < a->nO; ++k) a->sizes[a->ndim++] = a->self->sizes[a->odims[k]];
  for (int32_t k = 0; k < a->bnd; ++k) a->sizes[a->ndim++] = a->bsizes[k];
  for (int32_t k = 0; k < a->nI; ++k) a->sizes[a->ndim++] = a->self->sizes[a->idims[k]];
}

static void set_result(ax_args_t* a, const tpu_view_t* like, tpu_dtype_t dt) {
  a->ndim = like->ndim;
  memcpy(a->sizes, like->sizes, sizeof(a->sizes));
  a->dtype = dt;
}

static int64_t sync_attr(const tpu_op_def_t* def, const tpu_node_t* node) {
  const tpu_attr_t* s = ku_attr(def, node, "sync_size");
  return (s && s->kind == TPU_ATTR_INT) ? s->u.i : -1;
}

static tpu_status_t parse_kind(const tpu_op_def_t* def, const tpu_node_t* node, ax_kind_t kind,
                               int64_t count, ax_args_t* a) {
  a->kind = kind;
  a->self = in_view(node, 0);
  if (!a->self) return unimpl("self is not a tensor");
  tpu_dtype_t dt = a->self->dtype;
  switch (kind) {
    case AX_INDEX:
    case AX_INDEX_PUT: {
      int32_t fixed = tpu_spec_count(def->inputs) - 1; /* inputs besides the list */
      int32_t n = node->num_inputs - fixed;
      if (kind == AX_INDEX_PUT) {
        a->src = in_view(node, node->num_inputs - 1);
        a->accumulate = tpu_attr_bool(ku_attr(def, node, "accumulate"), false);
        if (!a->src || (a->src->dtype != dt && a->src->ndim != 0))
          return unimpl("values dtype differs from self");
      }
      if (n < 0) return unimpl("index list");
      TPU_RETURN_IF_ERROR(parse_terms(node, 1, n, count, a));
      if (kind == AX_INDEX) {
        if (a->bnd < 0) return unimpl("needs the mask's count (sync_size)");
        tpu_ax_result_of_terms(a);
        a->dtype = dt;
        return TPU_OK;
      }
      set_result(a, a->self, dt);
      if (a->bnd >= 0) { /* values must broadcast to the indexing result */
        ax_args_t r = *a;
        tpu_ax_result_of_terms(&r);
        tpu_view_t e;
        if (!view_expand(a->src, r.ndim, r.sizes, &e)) return unimpl("values shape");
      }
      return TPU_OK;
    }
    case AX_TAKE:
    case AX_PUT:
      a->index = in_view(node, 1);
      if (!a->index || a->index->dtype != TPU_DTYPE_I64) return unimpl("take/put index dtype");
      if (kind == AX_TAKE) {
        set_result(a, a->index, dt);
        return TPU_OK;
      }
      a->src = in_view(node, 2);
      a->accumulate = tpu_attr_bool(ku_attr(def, node, "accumulate"), false);
      if (!a->src || a->src->dtype != dt ||
          tpu_view_numel(a->src) != tpu_view_numel(a->index))
        return unimpl("put source");
      set_result(a, a->self, dt);
      return TPU_OK;
    case AX_INDEX_FILL:
    case AX_INDEX_COPY: {
      a->index = in_view(node, 1);
      if (!a->index || a->index->dtype != TPU_DTYPE_I64 || a->index->ndim > 1)
        return unimpl("index_fill/index_copy index");
      TPU_RETURN_IF_ERROR(ku_unimplemented(
          ku_wrap_dim(tpu_attr_int(ku_attr(def, node, "dim"), 0), a->self->ndim, &a->dim)));
      if (kind == AX_INDEX_FILL) {
        a->value = node->num_inputs > 2 ? &node->inputs[2] : NULL;
        if (!a->value || a->value->kind == TPU_VALUE_NONE) return unimpl("fill value");
        if (a->value->kind == TPU_VALUE_VIEW &&
            (a->value->u.view.ndim != 0 || a->value->u.view.dtype != dt))
          return unimpl("index_fill value tensor");
        if (a->value->kind == TPU_VALUE_SCALAR && !tpu_dtype_is_floating(dt) &&
            tpu_dtype_is_floating(a->value->u.scalar.dtype))
          return unimpl("float value for an integer tensor");
      } else {
        a->src = in_view(node, 2);
        if (!a->src || a->src->dtype != dt || a->src->ndim != a->self->ndim) return unimpl("source");
        int64_t n = tpu_view_numel(a->index);
        for (int32_t d = 0; d < a->self->ndim; ++d)
          if (a->src->sizes[d] != (d == a->dim ? n : a->self->sizes[d])) return unimpl("source shape");
        if (a->self->ndim == 0 && n != 1) return unimpl("0-dim index_copy");
      }
      set_result(a, a->self, dt);
      return TPU_OK;
    }
    case AX_MASKED_SELECT:
    case AX_MASKED_SCATTER: {
      a->mask = in_view(node, 1);
      if (!a->mask || a->mask->dtype != TPU_DTYPE_BOOL) return unimpl("mask dtype");
      if (kind == AX_MASKED_SCATTER) {
        a->src = in_view(node, 2);
        a->ndim = a->self->ndim, a->dtype = dt;
        memcpy(a->sizes, a->self->sizes, sizeof(a->sizes));
        if (!a->src || a->src->dtype != dt ||
            !tpu_ax_bcast(&a->ndim, a->sizes, a->mask->ndim, a->mask->sizes))
          return unimpl("masked_scatter arguments");
        return TPU_OK;
      }
      int32_t nd = a->self->ndim;
      int64_t s[TPU_MAX_DIMS];
      memcpy(s, a->self->sizes, sizeof(int64_t) * (size_t)nd);
      if (!tpu_ax_bcast(&nd, s, a->mask->ndim, a->mask->sizes)) return unimpl("mask shape");
      if (count < 0) return unimpl("needs the mask's count (sync_size)");
      a->bnd = nd;
      memcpy(a->bsizes, s, sizeof(s));
      a->ndim = 1, a->sizes[0] = count, a->dtype = dt;
      return TPU_OK;
    }
    case AX_NONZERO:
    case AX_NONZERO_STATIC:
      if (kind == AX_NONZERO_STATIC) {
        count = tpu_attr_int(ku_attr(def, node, "size"), -1);
        a->fill = tpu_attr_int(ku_attr(def, node, "fill_value"), -1);
        if (count < 0) return unimpl("nonzero_static size");
      }
      if (count < 0) return unimpl("needs the number of nonzeros (sync_size)");
      a->ndim = 2, a->sizes[0] = count, a->sizes[1] = a->self->ndim, a->dtype = TPU_DTYPE_I64;
      return TPU_OK;
    case AX_REPEAT: {
      const tpu_attr_t* os = ku_attr(def, node, "output_size");
      if (os && os->kind == TPU_ATTR_INT) count = os->u.i;
      if (!is_index_dtype(dt) || a->self->ndim != 1) return unimpl("repeats must be 1-D int");
      if (count < 0) return unimpl("needs the sum of repeats (sync_size)");
      a->ndim = 1, a->sizes[0] = count, a->dtype = dt;
      return TPU_OK;
    }
    case AX_COUNT:
      break;
  }
  return unimpl("unknown kind");
}

tpu_status_t tpu_ax_parse(const tpu_op_def_t* def, const tpu_node_t* node, int64_t count,
                          ax_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->mask_term = -1;
  const ax_spec_t* spec = (const ax_spec_t*)def->impl;
  a->sync = sync_attr(def, node);
  if (spec->kind == AX_COUNT) {
    TPU_RETURN_IF_ERROR(parse_kind(def, node, spec->counts, 0, a));
    if (spec->counts == AX_INDEX && a->mask_term < 0) return unimpl("no mask to count");
    a->kind = AX_COUNT;
    a->counted = spec->counts;
    a->ndim = 0, a->dtype = TPU_DTYPE_I64;
    return TPU_OK;
  }
  return parse_kind(def, node, spec->kind, count >= 0 ? count : a->sync, a);
}

