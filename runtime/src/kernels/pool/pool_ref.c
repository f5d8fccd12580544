/* pool_ref.c — the pooling family's reference kernel.
 *
 * Planes and output positions in logical order, each element read and
 * written on its own (view_get/view_set), windows worked out from PyTorch's
 * definitions directly (no tables), sums in double (int64 for integer
 * average pooling), gradients accumulated in double. Used by tests only.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/pool/pool.h"

/* Offset of (plane, spatial position sp[3]) in a view with `lead` plane dims. */
static int64_t offset(const tpu_view_t* v, int32_t lead, int64_t plane, const int64_t* sp) {
  int64_t off = 0;
  for (int32_t d = lead - 1; d >= 0; --d) {
    off += (plane % v->sizes[d]) * v->strides[d];
    plane /= v->sizes[d];
  }
  int32_t n = v->ndim - lead;
  for (int32_t t = 3 - n; t < 3; ++t) off += sp[t] * v->strides[lead + t - (3 - n)];
  return off;
}

/* Offset of logical (row-major) element k. */
static int64_t logical_off(const tpu_view_t* v, int64_t k) {
  int64_t off = 0;
  for (int32_t d = v->ndim - 1; d >= 0; --d) {
    off += (k % v->sizes[d]) * v->strides[d];
    k /= v->sizes[d];
  }
  return off;
}

/* The input positions of output position o along spatial dim t: a list
 * (in increasing order) and the divisor contribution (avg: unclipped size). */
static int64_t window(const pool_args_t* a, int32_t t, int64_t o, int64_t nout, int64_t* list,
                      int64_t* full) {
  int64_t in = a->in[t], n = 0;
  switch (a->impl->kind) {
    case POOL_MAX:
      for (int64_t k = 0; k < a->k[t]; ++k) {
        int64_t i = o * a->s[t] - a->p[t] + k * a->d[t];
        if (i >= 0 && i < in) list[n++] = i;
      }
      *full = n;
      break;
    case POOL_AVG: {
      int64_t start = o * a->s[t] - a->p[t];
      int64_t end = start + a->k[t];
      if (end > in + a->p[t]) end = in + a->p[t];
      *full = end - start;
      for (int64_t i = start; i < end; ++i)
        if (i >= 0 && i < in) list[n++] = i;
      break;
    }
    default: {
      int64_t lo = (int64_t)floor((double)(o * in) / (double)nout);
      int64_t hi = (int64_t)ceil((double)((o + 1) * in) / (double)nout);
      for (int64_t i = lo; i < hi; ++i) list[n++] = i;
      *full = n;
    }
  }
  return n;
}

/* max_unpool: zeros, then each element of self at its index, in order. */
static tpu_status_t unpool_reference(const tpu_op_def_t* def, const tpu_node_t* node) {
  const tpu_view_t *x, *idx, *o = &node->outputs[0];
  int64_t osz[3];
  TPU_RETURN_IF_ERROR(tpu_unpool_parse(def, node, &x, &idx, osz));
  int32_t n = o->ndim - ((const pool_impl_t*)def->impl)->nsp;
  int64_t planes = 1, pin = 1, pout = 1;
  for (int32_t d = 0; d < o->ndim; ++d) *(d < n ? &planes : &pout) *= o->sizes[d];
  for (int32_t d = n; d < x->ndim; ++d) pin *= x->sizes[d];
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t k = 0; k < pout; ++k) view_set_f64(o, logical_off(o, p * pout + k), 0.0);
    for (int64_t i = 0; i < pin; ++i) {
      int64_t t = view_get_i64(idx, logical_off(idx, p * pin + i));
      if (t < 0 || t >= pout) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "invalid max index");
      view_set_f64(o, logical_off(o, p * pout + t), view_get_f64(x, logical_off(x, p * pin + i)));
    }
  }
  return TPU_OK;
}

tpu_status_t tpu_pool_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  if (strncmp(def->name, "max_unpool", 10) == 0) return unpool_reference(def, node);
  pool_args_t a;
  TPU_RETURN_IF_ERROR(tpu_pool_parse(def, node, &a));
  const pool_impl_t* im = a.impl;
  bool mx = im->kind == POOL_MAX || im->kind == POOL_ADAPTIVE_MAX;
  bool integral = tpu_dtype_is_integral(a.x->dtype);
  int64_t out[3];
  tpu_pool_out_sizes(&a, node, out);
  const tpu_view_t* o = &node->outputs[0];
  int64_t is = a.in[0] * a.in[1] * a.in[2];
  int64_t maxw = 1;
  for (int t = 0; t < 3; ++t) maxw = maxw > a.in[t] + 2 * a.k[t] ? maxw : a.in[t] + 2 * a.k[t];
  int64_t* lists = (int64_t*)malloc(sizeof(int64_t) * (size_t)(3 * maxw));
  double* acc = (double*)malloc(sizeof(double) * (size_t)(is > 0 ? is : 1));
  if (!lists || !acc) {
    free(lists), free(acc);
    TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "reference: no memory");
  }
  for (int64_t pl = 0; pl < a.planes; ++pl) {
    if (im->backward)
      for (int64_t i = 0; i < is; ++i) acc[i] = 0.0;
    int64_t op[3];
    for (op[0] = 0; op[0] < out[0]; ++op[0])
      for (op[1] = 0; op[1] < out[1]; ++op[1])
        for (op[2] = 0; op[2] < out[2]; ++op[2]) {
          int64_t cnt[3], full[3], *l[3];
          for (int t = 0; t < 3; ++t) {
            l[t] = lists + t * maxw;
            cnt[t] = window(&a, t, op[t], out[t], l[t], &full[t]);
          }
          int64_t divisor = a.has_divisor ? a.divisor
                            : a.count_include_pad ? full[0] * full[1] * full[2]
                                                  : cnt[0] * cnt[1] * cnt[2];
          int64_t ksz = cnt[0] * cnt[1] * cnt[2];
          if (!im->backward) {
            double best = -INFINITY, sum = 0.0;
            int64_t isum = 0, bi = -1;
            for (int64_t i0 = 0; i0 < cnt[0]; ++i0)
              for (int64_t i1 = 0; i1 < cnt[1]; ++i1)
                for (int64_t i2 = 0; i2 < cnt[2]; ++i2) {
                  int64_t sp[3] = {l[0][i0], l[1][i1], l[2][i2]};
                  int64_t flat = (sp[0] * a.in[1] + sp[1]) * a.in[2] + sp[2];
                  double v = view_get_f64(a.x, offset(a.x, a.lead, pl, sp));
                  if (bi < 0) bi = flat; /* the first element starts the search */
                  if (v > best || isnan(v)) best = v, bi = flat;
                  sum += v;
                  isum += view_get_i64(a.x, offset(a.x, a.lead, pl, sp));
                }
            int64_t off = offset(o, a.lead, pl, op);
            if (mx) {
              view_set_f64(o, off, best);
              view_set_i64(&node->outputs[1], offset(&node->outputs[1], a.lead, pl, op), bi);
            } else if (ksz == 0) {
              view_set_f64(o, off, 0.0);
            } else if (im->kind == POOL_AVG && integral) {
              view_set_i64(o, off, isum / divisor);
            } else {
              view_set_f64(o, off, sum / (double)(im->kind == POOL_AVG ? divisor : ksz));
            }
          } else {
            double g = view_get_f64(a.g, offset(a.g, a.lead, pl, op));
            if (mx) {
              int64_t i = view_get_i64(a.idx, offset(a.idx, a.lead, pl, op));
              if (i < 0 || i >= is) {
                free(lists), free(acc);
                TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "Found an invalid max index");
              }
              acc[i] += g;
              continue;
            }
            if (ksz == 0) continue;
            double delta = g / (double)(im->kind == POOL_AVG ? divisor : ksz);
            if (integral) delta = (double)(view_get_i64(a.g, offset(a.g, a.lead, pl, op)) / divisor);
            for (int64_t i0 = 0; i0 < cnt[0]; ++i0)
              for (int64_t i1 = 0; i1 < cnt[1]; ++i1)
                for (int64_t i2 = 0; i2 < cnt[2]; ++i2)
                  acc[(l[0][i0] * a.in[1] + l[1][i1]) * a.in[2] + l[2][i2]] += delta;
          }
        }
    if (im->backward) {
      int64_t sp[3];
      for (sp[0] = 0; sp[0] < a.in[0]; ++sp[0])
        for (sp[1] = 0; sp[1] < a.in[1]; ++sp[1])
          for (sp[2] = 0; sp[2] < a.in[2]; ++sp[2])
            view_set_f64(o, offset(o, a.lead, pl, sp),
                         acc[(sp[0] * a.in[1] + sp[1]) * a.in[2] + sp[2]]);
    }
  }
  free(lists);
  free(acc);
  return TPU_OK;
}
