/* sort_ref.c — the sort family's reference kernel: per row, a stable
 * insertion sort of (value, index) in double with NaN largest, and the
 * answer read off it; searchsorted by counting. Ties that CPU's unstable
 * algorithms order their own way (sort, topk, mode) get the stable order
 * here: the test compares values and checks indices point at them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sort/sort.h"

typedef struct rv {
  double v;
  int64_t i;
} rv_t;

static bool ref_less(double a, double b, bool desc) {
  if (desc) return (isnan(a) && !isnan(b)) || a > b;
  return (!isnan(a) && isnan(b)) || a < b;
}

static void ref_stable_sort(rv_t* r, int64_t n, bool desc) {
  for (int64_t i = 1; i < n; ++i) {
    rv_t x = r[i];
    int64_t j = i;
    while (j > 0 && ref_less(x.v, r[j - 1].v, desc)) r[j] = r[j - 1], --j;
    r[j] = x;
  }
}

/* Offset of coordinates c (ndim entries) in v. */
static int64_t ref_off(const tpu_view_t* v, const int64_t* c) {
  int64_t o = 0;
  for (int32_t d = 0; d < v->ndim; ++d) o += c[d] * v->strides[d];
  return o;
}

/* Output coordinates: the input's with dim set to j, or dim dropped. */
static int64_t out_off(const tpu_view_t* o, const int64_t* c, int32_t nd, int32_t dim,
                       int64_t j) {
  int64_t oc[TPU_MAX_DIMS];
  int32_t k = 0;
  for (int32_t d = 0; d < nd; ++d) {
    if (d == dim && o->ndim < nd) continue;
    oc[k++] = d == dim ? j : c[d];
  }
  return ref_off(o, oc);
}

static tpu_status_t search_reference(const tpu_op_def_t* def, const tpu_node_t* node) {
  bool bucket = ((const sort_impl_t*)def->impl)->kind == SK_BUCKETIZE;
  const tpu_view_t* bd = ku_input(def, node, bucket ? "boundaries" : "sorted_sequence");
  const tpu_view_t* x = ku_input(def, node, "self");
  const tpu_view_t* sorter = ku_input(def, node, "sorter");
  if (!bd || !x) return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "reference: tensors only");
  bool right = tpu_attr_bool(ku_attr(def, node, "right"), false);
  const tpu_attr_t* side = ku_attr(def, node, "side");
  if (side && side->kind == TPU_ATTR_STR && strcmp(side->u.str, "right") == 0) right = true;
  const tpu_view_t* out = &node->outputs[0];
  int64_t len = bd->sizes[bd->ndim - 1], inner = x->ndim ? x->sizes[x->ndim - 1] : 1;
  int64_t c[TPU_MAX_DIMS], bc[TPU_MAX_DIMS];
  for (int64_t q = 0; q < tpu_view_numel(x); ++q) {
    int64_t rem = q;
    for (int32_t d = x->ndim - 1; d >= 0; --d) c[d] = rem % x->sizes[d], rem /= x->sizes[d];
    double val = view_get_f64(x, ref_off(x, c));
    int64_t row = bd->ndim == 1 ? 0 : q / inner, count = 0;
    rem = row;
    for (int32_t d = bd->ndim - 2; d >= 0; --d) bc[d] = rem % bd->sizes[d], rem /= bd->sizes[d];
    for (int64_t j = 0; j < len; ++j) {
      bc[bd->ndim - 1] = j;
      if (sorter) bc[bd->ndim - 1] = view_get_i64(sorter, ref_off(sorter, bc));
      double b = view_get_f64(bd, ref_off(bd, bc));
      count += right ? (b <= val) : (b < val);
    }
    view_set_i64(out, ref_off(out, c), count);
  }
  return TPU_OK;
}

tpu_status_t tpu_sort_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  (void)ctx;
  sort_kind_t kind = ((const sort_impl_t*)def->impl)->kind;
  if (kind == SK_SEARCH || kind == SK_BUCKETIZE) return search_reference(def, node);
  sort_args_t a;
  TPU_RETURN_IF_ERROR(tpu_sort_parse(def, node, &a));
  const tpu_view_t* in = a.in;
  int32_t nd = in->ndim;
  bool all = kind == SK_MEDIAN_ALL || kind == SK_NANMEDIAN_ALL;
  int64_t n = a.n, rows = all ? 1 : (n ? tpu_view_numel(in) / n : 0);
  if (!all && n == 0) return TPU_OK;
  rv_t* r = malloc(sizeof(rv_t) * (size_t)(n > 0 ? n : 1));
  if (!r) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "reference");
  int64_t c[TPU_MAX_DIMS] = {0};
  for (int64_t row = 0; row < rows; ++row) {
    int64_t rem = row;
    for (int32_t d = nd - 1; d >= 0 && !all; --d) {
      if (d == a.dim) continue;
      c[d] = rem % in->sizes[d];
      rem /= in->sizes[d];
    }
    for (int64_t j = 0; j < n; ++j) {
      if (all) {
        int64_t q = j;
        for (int32_t d = nd - 1; d >= 0; --d) c[d] = q % in->sizes[d], q /= in->sizes[d];
      } else if (nd) {
        c[a.dim] = j;
      }
      r[j].v = view_get_f64(in, ref_off(in, c));
      r[j].i = j;
    }
    bool desc = (kind == SK_SORT && a.descending) || (kind == SK_TOPK && a.largest);
    ref_stable_sort(r, n, desc);
    int64_t nans = 0, m = 1;
    for (int64_t j = 0; j < n; ++j) nans += isnan(r[j].v);
    rv_t res = {NAN, 0};
    switch (kind) {
      case SK_SORT: m = n; break;
      case SK_TOPK: m = a.k; break;
      case SK_KTH: res = r[a.k - 1]; break;
      case SK_MEDIAN:
        if (nans) {
          res.i = n;
          for (int64_t j = 0; j < n; ++j)
            if (isnan(r[j].v) && r[j].i < res.i) res = r[j];
        } else {
          res = r[(n - 1) / 2];
        }
        break;
      case SK_NANMEDIAN:
        if (n - nans > 0) res = r[(n - nans - 1) / 2];
        break;
      case SK_MODE: {
        int64_t best = 0, freq = 0;
        for (int64_t j = 0; j < n; ++j) {
          freq++;
          if (j == n - 1 || r[j].v != r[j + 1].v) {
            if (freq > best) best = freq, res = r[j];
            freq = 0;
          }
        }
        break;
      }
      case SK_MEDIAN_ALL:
      case SK_NANMEDIAN_ALL:
        if (n > 0 && (nans == 0 || (kind == SK_NANMEDIAN_ALL && nans < n)))
          res = r[(n - nans - 1) / 2];
        break;
      default: break;
    }
    if (all) {
      view_set_f64(&node->outputs[0], 0, res.v);
      break;
    }
    for (int64_t j = 0; j < m; ++j) {
      rv_t e = (kind == SK_SORT || kind == SK_TOPK) ? r[j] : res;
      view_set_f64(&node->outputs[0], out_off(&node->outputs[0], c, nd, a.dim, j), e.v);
      view_set_i64(&node->outputs[1], out_off(&node->outputs[1], c, nd, a.dim, j), e.i);
    }
  }
  free(r);
  return TPU_OK;
}
