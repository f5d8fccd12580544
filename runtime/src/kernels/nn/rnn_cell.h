/* rnn_cell.h — the rnn_cell family's private interface, shared by rnn_cell.c
 * (rows, parsing, the optimised kernels), rnn_cell_ref.c (the reference) and
 * tests/test_rnn_cell.c.
 *
 * PyTorch's fused recurrent cells, which nn.LSTM / nn.LSTMCell / nn.GRU /
 * nn.GRUCell call on every device but the CPU (ATen has no CPU kernel for
 * them, so the CPU fallback cannot run them):
 *
 *   _thnn_fused_lstm_cell(input_gates [B,4H], hidden_gates [B,4H], cx [B,H],
 *                         input_bias? [4H], hidden_bias? [4H])
 *     -> hy [B,H], cy [B,H], workspace [B,4H]
 *     gates in the order i, f, g, o: i = sigmoid(xi + hi + bi + b'i), f, o
 *     likewise, g = tanh(...); cy = f*cx + i*g; hy = o*tanh(cy); the
 *     workspace holds the activated gates i, f, g, o.
 *   _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy,
 *                         workspace, has_bias)
 *     -> grad_gates [B,4H], grad_cx [B,H], grad_bias [4H] (sum of grad_gates
 *     over the batch; undefined without has_bias); every result undefined
 *     when both gradients are.
 *   _thnn_fused_gru_cell(input_gates [B,3H], hidden_gates [B,3H], hx [B,H],
 *                         input_bias? [3H], hidden_bias? [3H])
 *     -> hy [B,H], workspace [B,5H]
 *     gates r, z, n: r = sigmoid(xr + hr + br + b'r), z likewise,
 *     n = tanh(xn + bn + r*(hn + b'n)); hy = n + z*(hx - n); the workspace
 *     holds r, z, n, hx and hn + b'n.
 *   _thnn_fused_gru_cell_backward(grad_hy [B,H], workspace [B,5H], has_bias)
 *     -> grad_input_gates [B,3H], grad_hidden_gates [B,3H], grad_hx [B,H],
 *        grad_input_bias [3H], grad_hidden_bias [3H] (the gates summed over
 *        the batch; undefined without has_bias).
 *
 * Floating dtypes only (all operands of one dtype); half types compute in
 * float32 and store the workspace rounded, as CUDA's kernels do.
 */
#ifndef TPU_KERNELS_RNN_CELL_H_
#define TPU_KERNELS_RNN_CELL_H_

#include <math.h>
#include <stdbool.h>

#include "kernels/common/kernel_util.h"

enum { RC_LSTM = 0, RC_GRU = 1 };

typedef struct rc_impl {
  int kind;
  bool backward;
} rc_impl_t;

#define RC_MAX_OUT 5

typedef struct rc_args {
  const rc_impl_t* impl;
  tpu_dtype_t dtype;
  int64_t batch, hidden;
  int64_t gates; /* 4 (LSTM) or 3 (GRU) */
  /* forward */
  const tpu_view_t *ig, *hg, *prev, *ib, *hb; /* ib/hb NULL without bias */
  /* backward */
  const tpu_view_t *ghy, *gcy, *cx, *cy, *ws; /* ghy/gcy may be NULL (LSTM) */
  bool has_bias;
  bool none;                  /* LSTM backward without gradients: every result undefined */
  tpu_view_t shape[RC_MAX_OUT]; /* results (absent: dtype INVALID, addr 0) */
  int32_t nout;
} rc_args_t;

tpu_status_t tpu_rc_parse(const tpu_op_def_t* def, const tpu_node_t* node, rc_args_t* a);

static inline double rc_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* The reference kernel: element by element in double, read and written one
 * at a time. */
tpu_status_t tpu_rc_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx);

extern const tpu_op_family_t tpu_family_rnn_cell;

#endif /* TPU_KERNELS_RNN_CELL_H_ */
