/* rnn_cell_ref.c — the rnn_cell family's reference kernel: element (b, j)
 * of the hidden state at a time, every operand read and every result written
 * one element at a time (view_get_f64 / view_set_f64), the formulas of
 * rnn_cell.h in double, the bias gradients summed over the batch in order. */
#include "kernels/nn/rnn_cell.h"

static double get2(const tpu_view_t* v, int64_t r, int64_t c) {
  return view_get_f64(v, r * v->strides[0] + c * v->strides[1]);
}
static void set2(const tpu_view_t* v, int64_t r, int64_t c, double x) {
  view_set_f64(v, r * v->strides[0] + c * v->strides[1], x);
}
static double bias(const tpu_view_t* v, int64_t c) {
  return v ? view_get_f64(v, c * v->strides[0]) : 0.0;
}

static void forward(const rc_args_t* a, const tpu_node_t* node) {
  const int64_t H = a->hidden;
  const tpu_view_t* o = node->outputs;
  for (int64_t b = 0; b < a->batch; ++b)
    for (int64_t j = 0; j < H; ++j) {
      double s[4];
      for (int g = 0; g < a->gates; ++g)
        s[g] = get2(a->ig, b, g * H + j) + get2(a->hg, b, g * H + j);
      double prev = get2(a->prev, b, j);
      if (a->impl->kind == RC_LSTM) {
        for (int g = 0; g < 4; ++g) s[g] += bias(a->ib, g * H + j) + bias(a->hb, g * H + j);
        double i = rc_sigmoid(s[0]), f = rc_sigmoid(s[1]), c = tanh(s[2]), og = rc_sigmoid(s[3]);
        double cy = f * prev + i * c;
        set2(&o[0], b, j, og * tanh(cy));
        set2(&o[1], b, j, cy);
        set2(&o[2], b, j, i), set2(&o[2], b, H + j, f);
        set2(&o[2], b, 2 * H + j, c), set2(&o[2], b, 3 * H + j, og);
      } else {
        double r = rc_sigmoid(s[0] + bias(a->ib, j) + bias(a->hb, j));
        double z = rc_sigmoid(s[1] + bias(a->ib, H + j) + bias(a->hb, H + j));
        double hn = get2(a->hg, b, 2 * H + j) + bias(a->hb, 2 * H + j);
        double n = tanh(get2(a->ig, b, 2 * H + j) + bias(a->ib, 2 * H + j) + r * hn);
        set2(&o[0], b, j, n + z * (prev - n));
        set2(&o[1], b, j, r), set2(&o[1], b, H + j, z), set2(&o[1], b, 2 * H + j, n);
        set2(&o[1], b, 3 * H + j, prev), set2(&o[1], b, 4 * H + j, hn);
      }
    }
}

static void backward(const rc_args_t* a, const tpu_node_t* node) {
  const int64_t H = a->hidden;
  const tpu_view_t* o = node->outputs;
  for (int64_t b = 0; b < a->batch; ++b)
    for (int64_t j = 0; j < H; ++j) {
      double gh = a->ghy ? get2(a->ghy, b, j) : 0.0;
      if (a->impl->kind == RC_LSTM) {
        double gc = a->gcy ? get2(a->gcy, b, j) : 0.0;
        double i = get2(a->ws, b, j), f = get2(a->ws, b, H + j);
        double c = get2(a->ws, b, 2 * H + j), og = get2(a->ws, b, 3 * H + j);
        double t = tanh(get2(a->cy, b, j));
        double dc = gh * og * (1 - t * t) + gc; /* d loss / d cy */
        set2(&o[0], b, j, dc * c * i * (1 - i));
        set2(&o[0], b, H + j, dc * get2(a->cx, b, j) * f * (1 - f));
        set2(&o[0], b, 2 * H + j, dc * i * (1 - c * c));
        set2(&o[0], b, 3 * H + j, gh * t * og * (1 - og));
        set2(&o[1], b, j, dc * f);
      } else {
        double r = get2(a->ws, b, j), z = get2(a->ws, b, H + j), n = get2(a->ws, b, 2 * H + j);
        double hx = get2(a->ws, b, 3 * H + j), hn = get2(a->ws, b, 4 * H + j);
        double dn = gh * (1 - z) * (1 - n * n); /* d loss / d (pre-tanh n) */
        double dr = dn * hn * r * (1 - r), dz = gh * (hx - n) * z * (1 - z);
        set2(&o[0], b, j, dr), set2(&o[0], b, H + j, dz), set2(&o[0], b, 2 * H + j, dn);
        set2(&o[1], b, j, dr), set2(&o[1], b, H + j, dz), set2(&o[1], b, 2 * H + j, dn * r);
        set2(&o[2], b, j, gh * z);
      }
    }
  if (!a->has_bias) return;
  for (int k = 0; k < (a->impl->kind == RC_LSTM ? 1 : 2); ++k) {
    const tpu_view_t* gates = &o[k];
    const tpu_view_t* sum = &o[a->impl->kind == RC_LSTM ? 2 : 3 + k];
    for (int64_t c = 0; c < a->gates * H; ++c) {
      double s = 0.0;
      for (int64_t b = 0; b < a->batch; ++b) s += get2(gates, b, c); /* as stored */
      view_set_f64(sum, c * sum->strides[0], s);
    }
  }
}

tpu_status_t tpu_rc_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  (void)ctx;
  rc_args_t a;
  TPU_RETURN_IF_ERROR(tpu_rc_parse(def, node, &a));
  if (node->num_outputs < a.nout) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "too few outputs");
  if (a.none) return TPU_OK;
  if (a.impl->backward) backward(&a, node);
  else forward(&a, node);
  return TPU_OK;
}
