/* advanced_ref.c — plain reference of the index_adv family: one element at
 * a time over logical (row-major) numbers, bytes copied as they are, sums in
 * double (floating) or int64. Shares only argument parsing with the kernels. */
#include <stdlib.h>
#include <string.h>

#include "kernels/index/advanced.h"
#include "kernels/common/kernel_util.h"

static int64_t offset_of(const tpu_view_t* v, const int64_t* coords) {
  int64_t off = 0;
  for (int32_t d = 0; d < v->ndim; ++d) off += coords[d] * v->strides[d];
  return off;
}

static void coords_of(int32_t nd, const int64_t* sizes, int64_t lin, int64_t* c) {
  for (int32_t d = nd - 1; d >= 0; --d) c[d] = lin % sizes[d], lin /= sizes[d];
}

/* Value of a (broadcast) index tensor at B coordinates bc. */
static int64_t index_at(const tpu_view_t* t, int32_t bnd, const int64_t* bc) {
  int64_t off = 0;
  for (int32_t d = 0; d < t->ndim; ++d) {
    int32_t b = d + bnd - t->ndim;
    if (t->sizes[d] > 1) off += bc[b] * t->strides[d];
  }
  return view_get_i64(t, off);
}

/* Row-major number of the k-th nonzero of v (-1 when none). */
static int64_t kth_nonzero(const tpu_view_t* v, int64_t k) {
  int64_t c[TPU_MAX_DIMS];
  for (int64_t i = 0; i < tpu_view_numel(v); ++i) {
    coords_of(v->ndim, v->sizes, i, c);
    if (view_get_f64(v, offset_of(v, c)) != 0 && k-- == 0) return i;
  }
  return -1;
}

static void move(const tpu_view_t* dst, int64_t doff, const tpu_view_t* src, int64_t soff,
                 bool add) {
  if (!add) {
    memcpy(view_at(dst, doff), view_at(src, soff), tpu_dtype_size(dst->dtype));
  } else if (tpu_dtype_is_floating(dst->dtype)) {
    view_set_f64(dst, doff, view_get_f64(dst, doff) + view_get_f64(src, soff));
  } else {
    view_set_i64(dst, doff, (int64_t)((uint64_t)view_get_i64(dst, doff) +
                                      (uint64_t)view_get_i64(src, soff)));
  }
}

static tpu_status_t oob(int64_t i, int32_t d, int64_t n) {
  return tpu_status_make(TPU_CODE_INDEX_ERROR,
                         "index %lld is out of bounds for dimension %d with size %lld",
                         (long long)i, d, (long long)n);
}

/* Self coordinates of element (O, B, I) = c of the indexing result. */
static tpu_status_t self_coords(const ax_args_t* a, const int64_t* c, const tpu_view_t* self,
                                int64_t* sc) {
  for (int32_t k = 0; k < a->nO; ++k) sc[a->odims[k]] = c[k];
  for (int32_t k = 0; k < a->nI; ++k) sc[a->idims[k]] = c[a->nO + a->bnd + k];
  const int64_t* bc = c + a->nO;
  for (int32_t k = 0; k < a->nterms; ++k) {
    const ax_term_t* t = &a->terms[k];
    if (t->mask) {
      int64_t which = a->bnd ? bc[a->bnd - 1] : 0;
      int64_t lin = kth_nonzero(t->idx, which), mc[TPU_MAX_DIMS];
      coords_of(t->ndims, t->idx->sizes, lin, mc);
      for (int32_t m = 0; m < t->ndims; ++m) sc[t->dim + m] = mc[m];
    } else {
      int64_t x = index_at(t->idx, a->bnd, bc), n = self->sizes[t->dim];
      if (x < -n || x >= n) return oob(x, t->dim, n);
      sc[t->dim] = x < 0 ? x + n : x;
    }
  }
  return TPU_OK;
}

tpu_status_t tpu_ax_reference(const tpu_op_def_t* def, const tpu_node_t* node) {
  ax_args_t a;
  TPU_RETURN_IF_ERROR(tpu_ax_parse(def, node, -1, &a));
  const tpu_view_t* out = &node->outputs[0];
  int64_t c[TPU_MAX_DIMS], sc[TPU_MAX_DIMS];
  switch (a.kind) {
    case AX_INDEX:
      for (int64_t r = 0; r < tpu_view_numel(out); ++r) {
        coords_of(out->ndim, out->sizes, r, c);
        TPU_RETURN_IF_ERROR(self_coords(&a, c, a.self, sc));
        move(out, offset_of(out, c), a.self, offset_of(a.self, sc), false);
      }
      return TPU_OK;
    case AX_INDEX_PUT: {
      view_copy(out, a.self);
      if (a.mask_term >= 0) { /* B with the mask's count */
        int64_t n = 0;
        while (kth_nonzero(a.terms[a.mask_term].idx, n) >= 0) n++;
        TPU_RETURN_IF_ERROR(tpu_ax_parse(def, node, n, &a));
      }
      ax_args_t r = a;
      r.ndim = 0;
      for (int32_t k = 0; k < a.nO; ++k) r.sizes[r.ndim++] = a.self->sizes[a.odims[k]];
      for (int32_t k = 0; k < a.bnd; ++k) r.sizes[r.ndim++] = a.bsizes[k];
      for (int32_t k = 0; k < a.nI; ++k) r.sizes[r.ndim++] = a.self->sizes[a.idims[k]];
      tpu_view_t vals, v0 = *a.src;
      uint64_t storage = 0;
      if (v0.dtype != a.dtype) {
        tpu_convert(&storage, a.dtype, 1, tpu_view_ptr(&v0), v0.dtype, 1, 1);
        v0 = view_of(&storage, a.dtype, 0, NULL);
      }
      if (!view_expand(&v0, r.ndim, r.sizes, &vals))
        return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "values shape");
      int64_t total = 1;
      for (int32_t d = 0; d < r.ndim; ++d) total *= r.sizes[d];
      for (int64_t e = 0; e < total; ++e) { /* bounds first: nothing written on error */
        coords_of(r.ndim, r.sizes, e, c);
        TPU_RETURN_IF_ERROR(self_coords(&a, c, out, sc));
      }
      for (int64_t e = 0; e < total; ++e) {
        coords_of(r.ndim, r.sizes, e, c);
        TPU_RETURN_IF_ERROR(self_coords(&a, c, out, sc));
        move(out, offset_of(out, sc), &vals, offset_of(&vals, c), a.accumulate);
      }
      return TPU_OK;
    }
    case AX_TAKE:
    case AX_PUT: {
      int64_t n = tpu_view_numel(a.index), bound = tpu_view_numel(a.self);
      if (a.kind == AX_PUT) view_copy(out, a.self);
      const tpu_view_t* flat = a.kind == AX_PUT ? out : a.self;
      for (int64_t e = 0; e < n; ++e) {
        coords_of(a.index->ndim, a.index->sizes, e, c);
        int64_t x = view_get_i64(a.index, offset_of(a.index, c));
        if (x < -bound || x >= bound)
          return tpu_status_make(TPU_CODE_INDEX_ERROR,
                                 "out of range: tried to access index %lld on a tensor of %lld "
                                 "elements.",
                                 (long long)x, (long long)bound);
        coords_of(flat->ndim, flat->sizes, x < 0 ? x + bound : x, sc);
        if (a.kind == AX_TAKE) {
          coords_of(out->ndim, out->sizes, e, c);
          move(out, offset_of(out, c), a.self, offset_of(a.self, sc), false);
        } else {
          coords_of(a.src->ndim, a.src->sizes, e, c);
          move(out, offset_of(out, sc), a.src, offset_of(a.src, c), a.accumulate);
        }
      }
      return TPU_OK;
    }
    case AX_INDEX_FILL:
    case AX_INDEX_COPY: {
      view_copy(out, a.self);
      int64_t n = tpu_view_numel(a.index), size = out->ndim ? out->sizes[a.dim] : 1;
      uint64_t storage = 0;
      tpu_view_t val;
      if (a.value && a.value->kind == TPU_VALUE_VIEW) val = a.value->u.view;
      else if (a.value) tpu_value_to_view(a.value, a.dtype, &storage, &val);
      for (int64_t j = 0; j < n; ++j) {
        int64_t x = view_get_i64(a.index, j * (a.index->ndim ? a.index->strides[0] : 0));
        bool fill = a.kind == AX_INDEX_FILL;
        if (x < (fill ? -size : 0) || x >= size) return oob(x, a.dim, size);
        if (x < 0) x += size;
        for (int64_t e = 0; e < tpu_view_numel(out); ++e) {
          coords_of(out->ndim, out->sizes, e, c);
          if (out->ndim && c[a.dim] != x) continue;
          int64_t doff = offset_of(out, c);
          if (out->ndim) c[a.dim] = j;
          move(out, doff, fill ? &val : a.src, fill ? 0 : offset_of(a.src, c), false);
        }
      }
      return TPU_OK;
    }
    case AX_MASKED_SELECT: {
      tpu_view_t m, s;
      view_expand(a.mask, a.bnd, a.bsizes, &m), view_expand(a.self, a.bnd, a.bsizes, &s);
      int64_t k = 0;
      for (int64_t e = 0; e < tpu_view_numel(&m); ++e) {
        coords_of(m.ndim, m.sizes, e, c);
        if (view_get_i64(&m, offset_of(&m, c)))
          move(out, k++ * (out->ndim ? out->strides[0] : 0), &s, offset_of(&s, c), false);
      }
      return TPU_OK;
    }
    case AX_MASKED_SCATTER: {
      tpu_view_t se;
      view_expand(a.self, out->ndim, out->sizes, &se);
      view_copy(out, &se);
      tpu_view_t m;
      view_expand(a.mask, out->ndim, out->sizes, &m);
      int64_t k = 0;
      for (int64_t e = 0; e < tpu_view_numel(&m); ++e) {
        coords_of(m.ndim, m.sizes, e, c);
        if (!view_get_i64(&m, offset_of(&m, c))) continue;
        if (k >= tpu_view_numel(a.src))
          return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                                 "Number of elements of source < number of ones in mask");
        coords_of(a.src->ndim, a.src->sizes, k++, sc);
        move(out, offset_of(out, c), a.src, offset_of(a.src, sc), false);
      }
      return TPU_OK;
    }
    case AX_NONZERO:
    case AX_NONZERO_STATIC:
      for (int64_t r = 0; r < out->sizes[0]; ++r) {
        int64_t lin = kth_nonzero(a.self, r);
        if (lin >= 0) coords_of(a.self->ndim, a.self->sizes, lin, sc);
        for (int32_t d = 0; d < a.self->ndim; ++d)
          view_set_i64(out, r * out->strides[0] + d * out->strides[1], lin >= 0 ? sc[d] : a.fill);
      }
      return TPU_OK;
    case AX_REPEAT: {
      int64_t k = 0;
      for (int64_t i = 0; i < a.self->sizes[0]; ++i) {
        int64_t r = view_get_i64(a.self, i * a.self->strides[0]);
        if (r < 0) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "repeats can not be negative");
        for (int64_t t = 0; t < r; ++t, ++k) {
          if (k >= out->sizes[0]) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "size");
          view_set_i64(out, k * out->strides[0], i);
        }
      }
      return TPU_OK;
    }
    case AX_COUNT:
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "count rows have no reference");
  }
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "unknown kind");
}
