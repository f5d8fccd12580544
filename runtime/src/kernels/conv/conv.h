/* conv.h — the convolution family's private interface (conv.c, conv_ref.c,
 * tests/test_conv.c).
 *
 * Every op of the family is written in one geometry, whatever the op:
 *   - X, the "image" side: [N, groups * cx, S0, S1, S2],
 *   - Y, the "grid" side:  [N, groups * cy, G0, G1, G2],
 *   - W, the weight:       [groups * cy, cx, K0, K1, K2],
 * tied by  image position = grid position * stride - padding + k * dilation
 * (per spatial dim; 1-D and 2-D problems get leading dims of size 1). A
 * convolution has X = input, Y = output, W = weight; a transposed
 * convolution has X = output, Y = input (its weight [Cin, Cout/g, K...] is
 * already [groups * cy, cx, K...]). Three products cover everything:
 *   CONV_Y  Y  = W  @ im2col(X)   (+ bias over Y's channels)
 *   CONV_X  X  = col2im(W^T @ Y)  (+ bias over X's channels)
 *   CONV_W  dW = sum_n Y @ im2col(X)^T
 * convolution: CONV_Y, or CONV_X when transposed; convolution_backward:
 * grad_input by CONV_X (CONV_Y when transposed), grad_weight by CONV_W,
 * grad_bias a sum of grad_output; im2col / col2im are the image <-> columns
 * maps themselves (cx = C, one group).
 */
#ifndef TPU_KERNELS_CONV_H_
#define TPU_KERNELS_CONV_H_

#include <stdbool.h>
#include <stdint.h>

#include "kernel.h"
#include "tpu/ops.h"

typedef enum conv_kind { CONV_FORWARD = 0, CONV_BACKWARD, CONV_IM2COL, CONV_COL2IM } conv_kind_t;

typedef struct conv_impl {
  conv_kind_t kind;
} conv_impl_t;

/* The shared geometry (spatial dims padded to 3). */
typedef struct conv_geom {
  int64_t n, groups, cx, cy;
  int64_t S[3], G[3], K[3], stride[3], pad[3], dil[3];
} conv_geom_t;

/* A node, parsed and validated. */
typedef struct conv_args {
  const conv_impl_t* impl;
  conv_geom_t g;
  int32_t nsp;         /* spatial dims of the caller's tensors (1..3) */
  bool transposed;
  bool batched;        /* im2col/col2im: the input had a batch dim */
  tpu_dtype_t dtype;   /* of every tensor operand */
  /* forward: input, weight, bias (or NULL); backward: grad_output too;
   * im2col/col2im: input only. */
  const tpu_view_t *input, *weight, *bias, *grad_out;
  bool mask[3];        /* backward: which outputs to compute */
  tpu_view_t shape[3]; /* outputs' dtype, ndim, sizes (contiguous strides) */
  int32_t num_outputs;
} conv_args_t;

/* Validates the node's inputs and attrs (INVALID_ARGUMENT or UNIMPLEMENTED
 * for what PyTorch rejects or the family does not run) and fills `a`. */
tpu_status_t tpu_conv_parse(const tpu_op_def_t* def, const tpu_node_t* node, conv_args_t* a);

/* Plain reference: loops over every (grid position, kernel tap) pair,
 * accumulating in double. */
tpu_status_t tpu_conv_reference(const tpu_op_def_t* def, const tpu_node_t* node);

/* Winograd F(2x2, 3x3) for float32 3x3 convolutions with stride 1 and
 * dilation 1 (conv_winograd.c): per sample n and group g,
 *   out[n, g*co + k, y, x] = bias[g*co + k] (or 0) + sum over c < ci, a, b < 3 of
 *     in[n, g*ci + c, y - pad_h + a, x - pad_w + b] * w(g, k, c, a, b),
 * input outside H x W reading 0; w(g, k, c, a, b) is
 *   w[g*co + k, c, a, b]          (flip false: a convolution's weight), or
 *   w[g*ci + c, k, 2 - a, 2 - b]  (flip true: the gradient of the input of
 *                                  one, or a transposed convolution).
 * All tensors contiguous. Needs Ho = H + 2 pad_h - 2 and Wo = W + 2 pad_w - 2. */
typedef struct tpu_conv_wino {
  int64_t n, groups, ci, co, H, W, Ho, Wo, pad_h, pad_w;
  const float *in, *w, *bias;
  float* out;
  bool flip;
  const float* gout; /* tpu_conv_winograd_dw: the gradient of out (Ho x Wo planes) */
} tpu_conv_wino_t;

/* Whether the Winograd path takes this problem (sizes where it pays). */
bool tpu_conv_winograd_fits(const tpu_conv_wino_t* w);
tpu_status_t tpu_conv_winograd(const tpu_conv_wino_t* w);
/* The weight gradient of the same convolution (flip false): writes
 *   dw[g*co + k, c, a, b] = sum over n, y < Ho, x < Wo of
 *     gout[n, g*co + k, y, x] * in[n, g*ci + c, y - pad_h + a, x - pad_w + b]
 * into `out` (w, bias and flip unused), from 16 GEMMs per block of tiles in
 * the Winograd domain (dU = sum over tiles of (A dY Aᵀ) (Bᵀ d B)ᵀ, then
 * dw = Gᵀ dU G). Same conditions as tpu_conv_winograd_fits. */
tpu_status_t tpu_conv_winograd_dw(const tpu_conv_wino_t* w);

/* The float32 1x1 forward micro-kernel (conv_pointwise.c): Y[co, j] = sum_c
 * Wt[c, co] X[c, j] (+ bias[co]) for co < cy, c < k, j < n; X and Y rows at
 * leading dims ldx and ldy, Wt packed [k][cy]. Only where available() says
 * the CPU runs it (AVX-512F). */
bool tpu_conv_pw_f32_available(void);
void tpu_conv_pw_f32(const float* wt, const float* x, int64_t ldx, float* y, int64_t ldy,
                     int64_t cy, int64_t k, int64_t n, const float* bias);

/* The matrix unit's convolutions (conv_mxu.c): runs the products of a
 * parsed convolution / convolution_backward node that the unit takes on it,
 * writing node->outputs; out_done[i] says which outputs it wrote (the
 * caller computes the others). What it declines is counted there. `graph`:
 * the node's (tpu_exec_ctx_t's), or NULL. */
tpu_status_t tpu_conv_mxu(const conv_args_t* a, const tpu_node_t* node, const tpu_graph_t* graph,
                          bool out_done[3]);

/* The three products, as the unit's convolution code names them. */
typedef enum conv_dir { CONV_DIR_Y, CONV_DIR_X, CONV_DIR_W } conv_dir_t;

/* 1x1 convolutions as GEMMs on the operands' own layout (conv_mxu_1x1.c),
 * tried by tpu_conv_mxu first (then conv_mxu_rows.c, then oneDNN's
 * convolution primitives).
 * fits: the geometry is the path's (a bfloat16 1x1 kernel, stride 1, no
 * padding, one group; TORCH_TPU_CONV_GEMM not 0).
 * tpu_conv_mxu_1x1 runs product `dir` on X, W, Y (and the bias: added for
 * CONV_DIR_Y, its gradient written for CONV_DIR_W; or NULL), writing the
 * product's outputs (which overlap no input: the caller checked);
 * *out_done false (TPU_OK) when the operands' layout is not the path's
 * (spatial dims not one dense run), the images have fewer than
 * tpu_conv_gemm_min_positions(dir) positions, or the unit declined a GEMM: the caller
 * then runs the product its own way, rewriting every output. *out_rows
 * true (with *out_done false): the unit declined the GEMMs this path ran
 * by positions (where the per-image ones would miss the CPU's AMX tiles:
 * mxu.h, tpu_mxu_gemm_on_tiles), so the caller should offer the product
 * to tpu_conv_mxu_rows with any_layout. Counted in
 * tpu_mxu_info_t (conv_gemm, conv_split) when it ran; the caller counts
 * convs. */
bool tpu_conv_mxu_1x1_fits(const conv_args_t* a);
/* Positions per image below which the path leaves a product to the
 * primitives (per-image GEMMs lost to them there: ResNet-50's 1x1 layers at
 * 14x14 and 7x7 on AVX512-BF16). On AMX tiles the forward and input
 * gradient keep their GEMMs down to TPU_CONV_GEMM_MIN_POSITIONS_TILES: at
 * 14x14 (1024->256, batch 4) they beat the primitives by 1.1-1.5x, at 7x7
 * (2048->512) the input gradient lost (0.6x: each image's GEMM lays out
 * the 1M-element Wᵀ) and the forward tied; the weight gradient lost at
 * both (0.5x, and 13x at 7x7). tpu_conv_gemm_min_positions(dir) gives the
 * one that applies. */
#define TPU_CONV_GEMM_MIN_POSITIONS 384
#define TPU_CONV_GEMM_MIN_POSITIONS_TILES 192
int64_t tpu_conv_gemm_min_positions(int dir);
tpu_status_t tpu_conv_mxu_1x1(int dir, const tpu_view_t* x, const tpu_view_t* w,
                              const tpu_view_t* y, const tpu_view_t* bias, bool* out_rows,
                              bool* out_done);

/* 1x1 convolutions as one GEMM with the grid positions of all images as
 * rows (conv_mxu_rows.c), tried by tpu_conv_mxu after tpu_conv_mxu_1x1
 * and before the primitives. fits: a bfloat16 1x1 kernel, no padding, one
 * group; TORCH_TPU_CONV_GEMM not 0. tpu_conv_mxu_rows runs product `dir`
 * as tpu_conv_mxu_1x1 does (same operands, bias and outputs; `a` for the
 * geometry; `graph`: the node's, for the weight cache, or NULL) when it is
 * the forward or the input gradient and the operand it reads has dense
 * channels (channels_last) or the stride is not 1 or `any_layout` (see
 * tpu_conv_mxu_1x1's out_rows); else, or when the unit
 * declined its GEMM, *out_done false (TPU_OK). Counted in conv_gemm (and
 * conv_split) when it ran. */
bool tpu_conv_mxu_rows_fits(const conv_args_t* a);
/* dst[j * ld_dst + i] = src[i * ld_src + j] for i, j < 16 (16-bit
 * elements, in AVX2 registers; conv_mxu_rows.c). */
void tpu_conv_transpose16(const uint16_t* src, int64_t ld_src, uint16_t* dst, int64_t ld_dst);
tpu_status_t tpu_conv_mxu_rows(const conv_args_t* a, int dir, const tpu_view_t* x,
                               const tpu_view_t* w, const tpu_view_t* y, const tpu_view_t* bias,
                               const tpu_graph_t* graph, bool any_layout, bool* out_done);

#endif /* TPU_KERNELS_CONV_H_ */
