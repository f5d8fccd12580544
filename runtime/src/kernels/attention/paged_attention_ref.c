/* paged_attention_ref.c — plain references for the paged KV-cache rows
 * (paged_attention.h): one element at a time through view_get_f64 /
 * view_set_f64, attention in double over whole score rows (no blocking, no
 * online softmax), for tests/test_paged_attention.c to check the optimised
 * kernels against. */
#include <math.h>
#include <stdlib.h>

#include "kernels/attention/paged_attention.h"

/* cache[blk, off, h, 0..n) = src[t, h, 0..n). */
static void write_row(const tpu_view_t* cache, int64_t blk, int64_t off, int64_t h,
                      const tpu_view_t* src, int64_t t, int64_t n) {
  for (int64_t d = 0; d < n; ++d)
    view_set_f64(cache,
                 blk * cache->strides[0] + off * cache->strides[1] + h * cache->strides[2] +
                     d * cache->strides[3],
                 view_get_f64(src, t * src->strides[0] + h * src->strides[1] +
                                       d * src->strides[2]));
}

tpu_status_t tpu_paged_write_reference(const tpu_op_def_t* def, const tpu_node_t* node) {
  paged_write_args_t a;
  TPU_RETURN_IF_ERROR(tpu_paged_write_parse(def, node, &a));
  TPU_RETURN_IF_ERROR(tpu_paged_write_check_slots(&a));
  for (int64_t t = 0; t < a.T; ++t) {
    int64_t s = paged_int1(&a.slots, t);
    if (s < 0) continue;
    int64_t blk = s / a.bs, off = s % a.bs;
    for (int64_t h = 0; h < a.Hkv; ++h) {
      write_row(&a.key_cache, blk, off, h, &a.key, t, a.D);
      write_row(&a.value_cache, blk, off, h, &a.value, t, a.Dv);
    }
  }
  return TPU_OK;
}

/* Element d of cache head hk at sequence position j (through the table). */
static double cache_at(const paged_attn_args_t* a, const tpu_view_t* c, int64_t b, int64_t j,
                       int64_t hk, int64_t d) {
  int64_t blk = paged_int2(&a->table, b, j / a->bs);
  return view_get_f64(c, blk * c->strides[0] + (j % a->bs) * c->strides[1] +
                             hk * c->strides[2] + d * c->strides[3]);
}

tpu_status_t tpu_paged_attention_reference(const tpu_op_def_t* def, const tpu_node_t* node) {
  paged_attn_args_t a;
  TPU_RETURN_IF_ERROR(tpu_paged_attn_parse(def, node, &a));
  int64_t* ints = malloc(sizeof(int64_t) * (size_t)(2 * a.B + 2));
  int64_t max_len = 1;
  if (!ints) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "paged_attention reference");
  tpu_status_t s = tpu_paged_attn_read_lengths(&a, ints, ints + a.B + 1);
  if (s != TPU_OK) {
    free(ints);
    return s;
  }
  const int64_t *qsl = ints, *lens = ints + a.B + 1;
  for (int64_t b = 0; b < a.B; ++b) max_len = lens[b] > max_len ? lens[b] : max_len;
  double* p = malloc(sizeof(double) * (size_t)max_len);
  double* o = malloc(sizeof(double) * (size_t)(a.Dv > 0 ? a.Dv : 1));
  if (!p || !o) {
    free(ints), free(p), free(o);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "paged_attention reference");
  }
  const tpu_view_t* out = &node->outputs[0];
  const int64_t G = a.Hq / a.Hkv;
  for (int64_t t = qsl[a.B]; t < a.T; ++t) /* padding rows */
    for (int64_t h = 0; h < a.Hq; ++h)
      for (int64_t d = 0; d < a.Dv; ++d)
        view_set_f64(out, t * out->strides[0] + h * out->strides[1] + d * out->strides[2], 0.0);
  for (int64_t b = 0; b < a.B; ++b) {
    int64_t q_len = qsl[b + 1] - qsl[b];
    for (int64_t i = 0; i < q_len; ++i) {
      int64_t t = qsl[b] + i, pos = lens[b] - q_len + i;
      for (int64_t h = 0; h < a.Hq; ++h) {
        int64_t hk = h / G;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < lens[b]; ++j) {
          double sc = 0;
          for (int64_t d = 0; d < a.D; ++d)
            sc += view_get_f64(&a.q, t * a.q.strides[0] + h * a.q.strides[1] +
                                         d * a.q.strides[2]) *
                  cache_at(&a, &a.kc, b, j, hk, d);
          sc *= a.scale;
          if (a.softcap > 0) sc = a.softcap * tanh(sc / a.softcap);
          if (!paged_visible(&a, pos, j)) sc = -INFINITY;
          p[j] = sc;
          if (sc > mx) mx = sc;
        }
        for (int64_t d = 0; d < a.Dv; ++d) o[d] = 0;
        for (int64_t j = 0; j < lens[b] && mx > -INFINITY; ++j) {
          double e = exp(p[j] - mx);
          sum += e;
          for (int64_t d = 0; d < a.Dv; ++d) o[d] += e * cache_at(&a, &a.vc, b, j, hk, d);
        }
        for (int64_t d = 0; d < a.Dv; ++d)
          view_set_f64(out, t * out->strides[0] + h * out->strides[1] + d * out->strides[2],
                       sum > 0 ? o[d] / sum : 0.0);
      }
    }
  }
  free(ints), free(p), free(o);
  return TPU_OK;
}
