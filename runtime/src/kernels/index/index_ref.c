/* index_ref.c — the index family's reference: one element at a time, by
 * coordinates, with every value read and written through tpu_convert (sums
 * in double, or wrapping int64 for integers). Shares argument parsing with
 * index.c (tpu_ix_parse) so both implement the same semantics; the C tests
 * compare the kernels against it. */
#include <stdlib.h>
#include <string.h>

#include "kernels/index/index.h"
#include "kernels/common/view_walk.h"

static void unravel(int64_t i, int32_t ndim, const int64_t* sizes, int64_t* coord) {
  for (int32_t d = ndim - 1; d >= 0; --d) {
    coord[d] = i % sizes[d];
    i /= sizes[d];
  }
}

/* Element offset of `coord` (a 0-dim view takes coordinate [0]). */
static int64_t offset_of(const tpu_view_t* v, const int64_t* coord) {
  int64_t off = 0;
  for (int32_t d = 0; d < v->ndim; ++d) off += coord[d] * v->strides[d];
  return off;
}

static int64_t get_i(const tpu_view_t* v, const int64_t* coord) {
  return view_get_i64(v, offset_of(v, coord));
}

static double get_f(const tpu_view_t* v, const int64_t* coord) {
  return view_get_f64(v, offset_of(v, coord));
}

static void copy_elem(const tpu_view_t* dst, const int64_t* dc, const tpu_view_t* src,
                      const int64_t* sc) {
  tpu_convert(view_at(dst, offset_of(dst, dc)), dst->dtype, 1, view_at(src, offset_of(src, sc)),
              src->dtype, 1, 1);
}

/* dst[dc] += alpha * src[sc] (src NULL: += alpha). */
static void add_elem(const tpu_view_t* dst, const int64_t* dc, const tpu_view_t* src,
                     const int64_t* sc, double alpha, int64_t ialpha) {
  int64_t off = offset_of(dst, dc);
  if (tpu_dtype_is_floating(dst->dtype))
    view_set_f64(dst, off, get_f(dst, dc) + alpha * get_f(src, sc));
  else
    view_set_i64(dst, off,
                 (int64_t)((uint64_t)get_i(dst, dc) + (uint64_t)ialpha * (uint64_t)get_i(src, sc)));
}

static int32_t rank1(const tpu_view_t* v) { return v->ndim ? v->ndim : 1; }

static int64_t size_at(const tpu_view_t* v, int32_t d) { return v->ndim ? v->sizes[d] : 1; }

static int64_t numel1(const tpu_view_t* v, int64_t* sizes) {
  for (int32_t d = 0; d < rank1(v); ++d) sizes[d] = size_at(v, d);
  return tpu_view_numel(v);
}

static tpu_status_t ref_cat(const tpu_node_t* node, const ix_args_t* a, const tpu_view_t* out) {
  int64_t offset = 0, c[TPU_MAX_DIMS];
  for (int32_t i = 0; i < node->num_inputs; ++i) {
    const tpu_view_t* v = &node->inputs[i].u.view;
    if (v->ndim == 1 && v->sizes[0] == 0) continue;
    for (int64_t e = 0; e < tpu_view_numel(v); ++e) {
      unravel(e, v->ndim, v->sizes, c);
      int64_t dc[TPU_MAX_DIMS];
      memcpy(dc, c, sizeof(c));
      dc[a->dim] += offset;
      copy_elem(out, dc, v, c);
    }
    offset += v->sizes[a->dim];
  }
  return TPU_OK;
}

static tpu_status_t ref_embedding(const ix_args_t* a, const tpu_view_t* out) {
  int64_t n = tpu_view_numel(a->index), d = a->sizes[1], c[TPU_MAX_DIMS], oc[2];
  int64_t* counts = calloc((size_t)a->num_weights + 1, sizeof(int64_t));
  double* acc = calloc((size_t)(a->num_weights * d) + 1, sizeof(double));
  tpu_status_t st = TPU_OK;
  if (!counts || !acc) st = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "reference scratch");
  for (int64_t i = 0; st == TPU_OK && i < n; ++i) {
    unravel(i, a->index->ndim, a->index->sizes, c);
    int64_t p = get_i(a->index, c);
    if (p < 0 || p >= a->num_weights) st = tpu_ix_out_of_bounds(TPU_CODE_INDEX_ERROR, p, 0, a->num_weights);
    else counts[p]++;
  }
  for (int64_t i = 0; st == TPU_OK && i < n; ++i) {
    unravel(i, a->index->ndim, a->index->sizes, c);
    int64_t p = get_i(a->index, c);
    if (p == a->padding_idx) continue;
    double scale = a->scale_grad_by_freq ? 1.0 / (double)counts[p] : 1.0;
    for (int64_t x = 0; x < d; ++x) {
      c[a->index->ndim] = x;
      acc[p * d + x] += get_f(a->self, c) * scale;
    }
  }
  for (int64_t e = 0; st == TPU_OK && e < a->num_weights * d; ++e) {
    oc[0] = e / d, oc[1] = e % d;
    view_set_f64(out, offset_of(out, oc), acc[e]);
  }
  free(counts);
  free(acc);
  return st;
}

tpu_status_t tpu_index_reference(const tpu_op_def_t* def, const tpu_node_t* node) {
  ix_args_t a;
  TPU_RETURN_IF_ERROR(tpu_ix_parse(def, node, &a));
  const tpu_view_t* out = &node->outputs[0];
  TPU_RETURN_IF_ERROR(tpu_ix_check_out(&a, out));
  if (a.kind == IX_CAT) return ref_cat(node, &a, out);
  if (a.kind == IX_EMBEDDING_BACKWARD) return ref_embedding(&a, out);
  int64_t c[TPU_MAX_DIMS], sc[TPU_MAX_DIMS], sizes[TPU_MAX_DIMS], zero[TPU_MAX_DIMS] = {0};
  int64_t bound = size_at(a.self, a.dim);
  if (a.kind == IX_INDEX_SELECT || a.kind == IX_GATHER) {
    int64_t n = numel1(out, sizes);
    for (int64_t e = 0; e < n; ++e) {
      unravel(e, rank1(out), sizes, c);
      int64_t ic[1] = {c[a.dim]};
      int64_t p = a.kind == IX_GATHER ? get_i(a.index, c) : get_i(a.index, ic);
      if (p < 0 || p >= bound) return tpu_ix_out_of_bounds(TPU_CODE_INDEX_ERROR, p, a.dim, bound);
      memcpy(sc, c, sizeof(c));
      sc[a.dim] = p;
      copy_elem(out, c, a.self, sc);
    }
    return TPU_OK;
  }
  int64_t n = numel1(a.self, sizes); /* scatter-like: out = self, then updates */
  for (int64_t e = 0; e < n; ++e) {
    unravel(e, rank1(a.self), sizes, c);
    copy_elem(out, c, a.self, c);
  }
  bool by_row = a.kind == IX_INDEX_ADD;
  n = numel1(by_row ? a.src : a.index, sizes);
  uint64_t scalar;
  tpu_view_t value;
  if (a.value) tpu_value_to_view(a.value, a.dtype, &scalar, &value);
  for (int64_t e = 0; e < n; ++e) {
    unravel(e, rank1(by_row ? a.src : a.index), sizes, c);
    int64_t ic[1] = {c[a.dim]};
    int64_t p = by_row ? get_i(a.index, ic) : get_i(a.index, c);
    if (p < 0 || p >= bound) return tpu_ix_out_of_bounds(TPU_CODE_INDEX_ERROR, p, a.dim, bound);
    memcpy(sc, c, sizeof(c));
    sc[a.dim] = p;
    if (a.kind == IX_SCATTER_ADD || a.kind == IX_INDEX_ADD)
      add_elem(out, sc, a.src, c, by_row ? a.alpha : 1.0, by_row ? a.ialpha : 1);
    else if (a.value)
      copy_elem(out, sc, &value, zero);
    else
      copy_elem(out, sc, a.src, c);
  }
  return TPU_OK;
}
