/* attention.h — the attention family's private interface (attention.c,
 * attention_ref.c, tests/test_attention.c): argument parsing shared by the
 * optimised kernels, the reference and the checks.
 *
 * Rows (bound by bridge/attention.cpp, not by the generic binding: the ATen
 * schemas return SymInts and nine values):
 *   sdpa_flash            query,key,value,attn_bias -> output,logsumexp
 *   sdpa_flash_backward   grad_out,query,key,value,attn_bias,out,logsumexp
 *                         -> grad_query,grad_key,grad_value,grad_attn_bias
 * Shapes: query [B,H,L,D] (or [B,L,D]), key [B,Hkv,S,D], value [B,Hkv,S,Dv]
 * with H % Hkv == 0 (grouped-query attention: query head h reads key/value
 * head h / (H / Hkv)); attn_bias (bool: true takes part, or additive float)
 * broadcastable to [B,H,L,S]; output [B,H,L,Dv]; logsumexp [B,H,L] in the
 * work type (float32, float64 for float64 inputs). is_causal keeps key j for
 * query i when j <= i (PyTorch's tril of ones(L, S)). Dropout keeps
 * element (b,h,i,j) of the attention matrix when Philox draw
 * offset + ((b*H + h)*L + i)*S + j under `seed` is below 1 - p (random.h's
 * rng_bernoulli), so backward regenerates the forward's mask exactly.
 */
#ifndef TPU_KERNELS_ATTENTION_H_
#define TPU_KERNELS_ATTENTION_H_

#include <stdbool.h>
#include <stdint.h>

#include "kernels/common/kernel_util.h"

#define ATTN_MAX_HEAD_DIM 256

typedef struct attn_args {
  bool backward;
  tpu_dtype_t dtype; /* of query/key/value (and the gradients) */
  tpu_dtype_t work;  /* F32 or F64 */
  int64_t B, H, Hkv, L, S, D, Dv;
  bool rank3; /* [B,L,D] operands (H = Hkv = 1) */
  /* 4-D views [B,H|Hkv,rows,cols] of the operands (rank-3 ones get H = 1). */
  tpu_view_t q, k, v, go, o, lse;
  bool has_bias;
  tpu_view_t bias; /* expanded to [B,H,L,S] (stride 0 where broadcast) */
  tpu_view_t bias_orig;
  double scale, dropout;
  bool causal;
  uint64_t seed, offset;
  bool grad_mask[4];
  bool grad_bias; /* backward writes grad_attn_bias */
} attn_args_t;

tpu_status_t tpu_attn_parse(const tpu_op_def_t* def, const tpu_node_t* node, attn_args_t* a);

/* Plain reference: one query row at a time, in double, whole score rows. */
tpu_status_t tpu_attention_reference(const tpu_op_def_t* def, const tpu_node_t* node);

/* The Philox counter index of attention element (b, h, i, j). */
static inline int64_t attn_rng_index(const attn_args_t* a, int64_t b, int64_t h, int64_t i,
                                     int64_t j) {
  return ((b * a->H + h) * a->L + i) * a->S + j;
}

/* 4-D view of an operand: [B, H, rows, cols] (rank 3: H = 1). */
static inline tpu_view_t attn_as4(const tpu_view_t* v) {
  if (v->ndim == 4) return *v;
  tpu_view_t r = *v;
  r.ndim = 4;
  r.sizes[0] = v->sizes[0], r.strides[0] = v->strides[0];
  r.sizes[1] = 1, r.strides[1] = 0;
  for (int d = 1; d < 3; ++d) r.sizes[d + 1] = v->sizes[d], r.strides[d + 1] = v->strides[d];
  return r;
}

#endif /* TPU_KERNELS_ATTENTION_H_ */
