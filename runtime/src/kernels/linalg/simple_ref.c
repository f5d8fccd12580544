/* simple_ref.c — plain references of the linalg_simple family (trace,
 * linalg_cross, addbmm) for its tests: element-by-element loops in double
 * (floating results) or wrapping int64 (integer results), over row-major
 * element numbers of the output, with no merging, blocking or BLAS. */
#include "kernels/linalg/linalg.h"


/* The offset of row-major element e of `shape` in view v (broadcast right-aligned). */
static int64_t ref_off(const tpu_view_t* shape, const tpu_view_t* v, int64_t e) {
  int64_t off = 0;
  for (int32_t d = shape->ndim - 1; d >= 0; --d) {
    int64_t i = e % shape->sizes[d];
    e /= shape->sizes[d];
    int32_t s = d - (shape->ndim - v->ndim);
    if (s >= 0 && v->sizes[s] != 1) off += i * v->strides[s];
  }
  return off;
}

static tpu_status_t ref_trace(const tpu_view_t* a, const tpu_view_t* o) {
  int64_t n = a->sizes[0] < a->sizes[1] ? a->sizes[0] : a->sizes[1];
  double s = 0.0;
  uint64_t si = 0;
  for (int64_t i = 0; i < n; ++i) {
    s += view_get_f64(a, i * a->strides[0] + i * a->strides[1]);
    si += (uint64_t)view_get_i64(a, i * a->strides[0] + i * a->strides[1]);
  }
  if (tpu_dtype_is_floating(o->dtype))
    view_set_f64(o, 0, s);
  else
    view_set_i64(o, 0, (int64_t)si);
  return TPU_OK;
}

static tpu_status_t ref_cross(const tpu_view_t* a, const tpu_view_t* b, const tpu_view_t* o,
                              int64_t dim_attr) {
  int32_t dim = 0;
  TPU_RETURN_IF_ERROR(ku_wrap_dim(dim_attr, o->ndim, &dim));
  bool fl = tpu_dtype_is_floating(o->dtype);
  for (int64_t e = 0; e < tpu_view_numel(o); ++e) {
    /* element e's coordinate along dim, and the first element of its 3-vector */
    int64_t inner = 1;
    for (int32_t d = dim + 1; d < o->ndim; ++d) inner *= o->sizes[d];
    int64_t c = (e / inner) % 3, e0 = e - c * inner;
    int64_t i1 = (c + 1) % 3, i2 = (c + 2) % 3;
    int64_t x1 = ref_off(o, a, e0 + i1 * inner), x2 = ref_off(o, a, e0 + i2 * inner);
    int64_t y1 = ref_off(o, b, e0 + i1 * inner), y2 = ref_off(o, b, e0 + i2 * inner);
    int64_t oo = ref_off(o, o, e);
    if (fl)
      view_set_f64(o, oo, view_get_f64(a, x1) * view_get_f64(b, y2) -
                              view_get_f64(a, x2) * view_get_f64(b, y1));
    else
      view_set_i64(o, oo, (int64_t)((uint64_t)view_get_i64(a, x1) * (uint64_t)view_get_i64(b, y2) -
                                    (uint64_t)view_get_i64(a, x2) * (uint64_t)view_get_i64(b, y1)));
  }
  return TPU_OK;
}

static tpu_status_t ref_addbmm(const tpu_op_def_t* def, const tpu_node_t* node,
                               const tpu_view_t* o) {
  const tpu_view_t* self = ku_input(def, node, "self");
  const tpu_view_t* b1 = ku_input(def, node, "batch1");
  const tpu_view_t* b2 = ku_input(def, node, "batch2");
  bool fl = tpu_dtype_is_floating(o->dtype);
  const tpu_attr_t* beta = ku_attr(def, node, "beta");
  const tpu_attr_t* alpha = ku_attr(def, node, "alpha");
  double fb = tpu_attr_float(beta, 1.0), fa = tpu_attr_float(alpha, 1.0);
  int64_t ib = tpu_attr_int(beta, 1), ia = tpu_attr_int(alpha, 1);
  for (int64_t r = 0; r < o->sizes[0]; ++r)
    for (int64_t c = 0; c < o->sizes[1]; ++c) {
      int64_t e = r * o->sizes[1] + c;
      double s = 0.0;
      uint64_t si = 0;
      for (int64_t bi = 0; bi < b1->sizes[0]; ++bi)
        for (int64_t t = 0; t < b1->sizes[2]; ++t) {
          int64_t x = bi * b1->strides[0] + r * b1->strides[1] + t * b1->strides[2];
          int64_t y = bi * b2->strides[0] + t * b2->strides[1] + c * b2->strides[2];
          s += view_get_f64(b1, x) * view_get_f64(b2, y);
          si += (uint64_t)view_get_i64(b1, x) * (uint64_t)view_get_i64(b2, y);
        }
      int64_t so = ref_off(o, self, e), oo = ref_off(o, o, e);
      if (fl)
        view_set_f64(o, oo, (fb != 0.0 ? fb * view_get_f64(self, so) : 0.0) + fa * s);
      else
        view_set_i64(o, oo, (int64_t)((ib != 0 ? (uint64_t)ib * (uint64_t)view_get_i64(self, so)
                                               : 0) +
                                      (uint64_t)ia * si));
    }
  return TPU_OK;
}

tpu_status_t tpu_linalg_simple_reference(const tpu_op_def_t* def, const tpu_node_t* node) {
  const tpu_view_t* o = &node->outputs[0];
  const char* n = def->name;
  if (n[0] == 't') return ref_trace(ku_input(def, node, "self"), o);
  if (n[0] == 'l')
    return ref_cross(ku_input(def, node, "self"), ku_input(def, node, "other"), o,
                     tpu_attr_int(ku_attr(def, node, "dim"), -1));
  return ref_addbmm(def, node, o);
}
