/* attention_ref.c — plain reference for the attention family: one query row
 * at a time, whole score rows, every element read and written through
 * view_get_f64 / view_set_f64, all arithmetic in double. The backward
 * recomputes softmax itself (it reads neither `out` nor `logsumexp` beyond
 * their presence) and forms D_i = Σ_j P_ij dP_ij directly. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention/attention.h"
#include "kernels/random/random.h"

static int64_t off4(const tpu_view_t* v, int64_t b, int64_t h, int64_t i, int64_t c) {
  return b * v->strides[0] + h * v->strides[1] + i * v->strides[2] + c * v->strides[3];
}

/* Scores of row (b, h, i) into p[S] as probabilities; false for a fully masked row. */
static bool ref_probs(const attn_args_t* a, int64_t b, int64_t h, int64_t i, double* p,
                      double* lse) {
  int64_t hk = h / (a->H / a->Hkv);
  double mx = -INFINITY;
  for (int64_t j = 0; j < a->S; ++j) {
    double s = 0;
    for (int64_t c = 0; c < a->D; ++c)
      s += view_get_f64(&a->q, off4(&a->q, b, h, i, c)) * view_get_f64(&a->k, off4(&a->k, b, hk, j, c));
    s *= a->scale;
    if (a->has_bias) {
      double x = view_get_f64(&a->bias, off4(&a->bias, b, h, i, j));
      s += a->bias.dtype == TPU_DTYPE_BOOL ? (x != 0 ? 0.0 : -INFINITY) : x;
    }
    if (a->causal && j > i) s = -INFINITY;
    p[j] = s;
    if (s > mx || s != s) mx = s;
  }
  if (mx == -INFINITY) return false;
  double sum = 0;
  for (int64_t j = 0; j < a->S; ++j) sum += p[j] = exp(p[j] - mx);
  for (int64_t j = 0; j < a->S; ++j) p[j] /= sum;
  *lse = mx + log(sum);
  return true;
}

/* Dropout factor of element (b, h, i, j): 0 or 1 / (1 - p). */
static double ref_keep(const attn_args_t* a, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (a->dropout <= 0) return 1.0;
  uint32_t w[4];
  rng_block(a->seed, a->offset, attn_rng_index(a, b, h, i, j), w);
  return rng_bernoulli(w, 1.0 - a->dropout) ? 1.0 / (1.0 - a->dropout) : 0.0;
}

tpu_status_t tpu_attention_reference(const tpu_op_def_t* def, const tpu_node_t* node) {
  attn_args_t a;
  TPU_RETURN_IF_ERROR(tpu_attn_parse(def, node, &a));
  int64_t group = a.H / a.Hkv;
  double* p = malloc((size_t)(a.S + 1) * sizeof(double));
  double* dp = malloc((size_t)(a.S + 1) * sizeof(double));
  double *dq = NULL, *dk = NULL, *dv = NULL, *gb = NULL;
  tpu_view_t o4 = attn_as4(&node->outputs[0]);
  tpu_view_t gq = o4, gk = o4, gv = o4, gbv, gbe = o4;
  if (a.backward) {
    gq = attn_as4(&node->outputs[0]), gk = attn_as4(&node->outputs[1]);
    gv = attn_as4(&node->outputs[2]);
    dq = calloc((size_t)(a.B * a.H * a.L * a.D + 1), sizeof(double));
    dk = calloc((size_t)(a.B * a.Hkv * a.S * a.D + 1), sizeof(double));
    dv = calloc((size_t)(a.B * a.Hkv * a.S * a.Dv + 1), sizeof(double));
    if (a.grad_bias) {
      gb = calloc((size_t)(tpu_view_numel(&a.bias_orig) + 1), sizeof(double));
      gbv = view_of(gb, TPU_DTYPE_F64, a.bias_orig.ndim, a.bias_orig.sizes);
      int64_t shape[4] = {a.B, a.H, a.L, a.S}, shape3[3] = {a.B, a.L, a.S};
      if (a.rank3) view_expand(&gbv, 3, shape3, &gbe);
      else view_expand(&gbv, 4, shape, &gbe);
      gbe = attn_as4(&gbe);
    }
  }
  if (!p || !dp || (a.backward && (!dq || !dk || !dv || (a.grad_bias && !gb)))) {
    free(p), free(dp), free(dq), free(dk), free(dv), free(gb);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "attention reference");
  }
  tpu_view_t l3 = a.backward ? a.lse : node->outputs[1];
  if (!a.backward && a.rank3) {
    l3.ndim = 3;
    l3.sizes[2] = node->outputs[1].sizes[1], l3.strides[2] = node->outputs[1].strides[1];
    l3.sizes[1] = 1, l3.strides[1] = 0;
  }
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.H; ++h) {
      int64_t hk = h / group;
      for (int64_t i = 0; i < a.L; ++i) {
        double lse = -INFINITY;
        bool any = ref_probs(&a, b, h, i, p, &lse);
        if (!a.backward) {
          for (int64_t c = 0; c < a.Dv; ++c) {
            double s = 0;
            for (int64_t j = 0; any && j < a.S; ++j)
              s += p[j] * ref_keep(&a, b, h, i, j) * view_get_f64(&a.v, off4(&a.v, b, hk, j, c));
            view_set_f64(&o4, off4(&o4, b, h, i, c), s);
          }
          view_set_f64(&l3, b * l3.strides[0] + h * l3.strides[1] + i * l3.strides[2], lse);
          continue;
        }
        if (!any) continue;
        double di = 0;
        for (int64_t j = 0; j < a.S; ++j) {
          double s = 0;
          for (int64_t c = 0; c < a.Dv; ++c)
            s += view_get_f64(&a.go, off4(&a.go, b, h, i, c)) *
                 view_get_f64(&a.v, off4(&a.v, b, hk, j, c));
          dp[j] = s * ref_keep(&a, b, h, i, j);
          di += p[j] * dp[j];
        }
        for (int64_t j = 0; j < a.S; ++j) {
          double ds = p[j] * (dp[j] - di), pz = p[j] * ref_keep(&a, b, h, i, j);
          for (int64_t c = 0; c < a.D; ++c) {
            dq[((b * a.H + h) * a.L + i) * a.D + c] +=
                a.scale * ds * view_get_f64(&a.k, off4(&a.k, b, hk, j, c));
            dk[((b * a.Hkv + hk) * a.S + j) * a.D + c] +=
                a.scale * ds * view_get_f64(&a.q, off4(&a.q, b, h, i, c));
          }
          for (int64_t c = 0; c < a.Dv; ++c)
            dv[((b * a.Hkv + hk) * a.S + j) * a.Dv + c] +=
                pz * view_get_f64(&a.go, off4(&a.go, b, h, i, c));
          if (gb) gb[off4(&gbe, b, h, i, j)] += ds;
        }
      }
    }
  if (a.backward) {
    int64_t sq[4] = {a.B, a.H, a.L, a.D}, sk[4] = {a.B, a.Hkv, a.S, a.D},
            sv[4] = {a.B, a.Hkv, a.S, a.Dv};
    tpu_view_t x = view_of(dq, TPU_DTYPE_F64, 4, sq);
    view_copy(&gq, &x);
    x = view_of(dk, TPU_DTYPE_F64, 4, sk);
    view_copy(&gk, &x);
    x = view_of(dv, TPU_DTYPE_F64, 4, sv);
    view_copy(&gv, &x);
    if (gb) view_copy(&node->outputs[3], &gbv);
  }
  free(p), free(dp), free(dq), free(dk), free(dv), free(gb);
  return TPU_OK;
}
