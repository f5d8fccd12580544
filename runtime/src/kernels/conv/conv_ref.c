/* conv_ref.c — the convolution family's reference: every operand read into
 * a double array (logical row-major order), then one loop over every
 * (sample, group, grid channel, image channel, tap, grid position) tuple
 * whose image position is inside the image, accumulating the product the
 * op needs (conv.h: CONV_Y, CONV_X, CONV_W; im2col/col2im copy). Slow and
 * obviously right; the C tests compare the kernels against it. */
#include <stdlib.h>
#include <string.h>

#include "kernels/conv/conv.h"
#include "kernels/common/kernel_util.h"

static int64_t offset_of(const tpu_view_t* v, int64_t k) {
  int64_t off = 0;
  for (int32_t d = v->ndim - 1; d >= 0; --d) {
    off += (k % v->sizes[d]) * v->strides[d];
    k /= v->sizes[d];
  }
  return off;
}

static double* read_all(const tpu_view_t* v, int64_t n) {
  double* r = (double*)calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  if (r && v)
    for (int64_t k = 0; k < n; ++k) r[k] = view_get_f64(v, offset_of(v, k));
  return r;
}

static void write_all(const tpu_view_t* v, const double* r) {
  int64_t n = tpu_view_numel(v);
  for (int64_t k = 0; k < n; ++k) view_set_f64(v, offset_of(v, k), r[k]);
}

enum { P_Y, P_X, P_W, P_COLS, P_IMAGE };

/* The loop over every tuple; `what` says which array accumulates. */
static void pairs(const conv_geom_t* g, int what, double* x, double* y, double* w) {
  const int64_t pK = g->K[0] * g->K[1] * g->K[2], pG = g->G[0] * g->G[1] * g->G[2];
  bool cols = what == P_COLS || what == P_IMAGE;
  int64_t cy = cols ? 1 : g->cy;
  for (int64_t n = 0; n < g->n; ++n)
    for (int64_t grp = 0; grp < g->groups; ++grp)
      for (int64_t r = 0; r < cy; ++r)
        for (int64_t c = 0; c < g->cx; ++c)
          for (int64_t k = 0; k < pK; ++k)
            for (int64_t j = 0; j < pG; ++j) {
              int64_t kk[3] = {k / (g->K[1] * g->K[2]), (k / g->K[2]) % g->K[1], k % g->K[2]};
              int64_t jj[3] = {j / (g->G[1] * g->G[2]), (j / g->G[2]) % g->G[1], j % g->G[2]};
              int64_t xi = n * g->groups * g->cx + grp * g->cx + c;
              bool inside = true;
              for (int d = 0; d < 3; ++d) {
                int64_t pos = jj[d] * g->stride[d] - g->pad[d] + kk[d] * g->dil[d];
                inside = inside && pos >= 0 && pos < g->S[d];
                xi = xi * g->S[d] + pos;
              }
              if (!inside) continue;
              if (cols) {
                int64_t ci = ((n * g->cx + c) * pK + k) * pG + j;
                if (what == P_COLS) y[ci] = x[xi];
                else x[xi] += y[ci];
                continue;
              }
              int64_t yi = (n * g->groups * g->cy + grp * g->cy + r) * pG + j;
              int64_t wi = ((grp * g->cy + r) * g->cx + c) * pK + k;
              if (what == P_Y) y[yi] += w[wi] * x[xi];
              else if (what == P_X) x[xi] += w[wi] * y[yi];
              else w[wi] += y[yi] * x[xi];
            }
}

/* out[n, c, ...] = bias[c] for a [N, C, inner] array. */
static void add_bias(double* out, const double* bias, int64_t n, int64_t c, int64_t inner) {
  for (int64_t i = 0; i < n * c * inner; ++i) out[i] += bias[(i / inner) % c];
}

tpu_status_t tpu_conv_reference(const tpu_op_def_t* def, const tpu_node_t* node) {
  conv_args_t a;
  TPU_RETURN_IF_ERROR(tpu_conv_parse(def, node, &a));
  const conv_geom_t* g = &a.g;
  const int64_t pK = g->K[0] * g->K[1] * g->K[2];
  const int64_t pS = g->S[0] * g->S[1] * g->S[2], pG = g->G[0] * g->G[1] * g->G[2];
  int64_t nx = g->n * g->groups * g->cx * pS, nw = g->groups * g->cy * g->cx * pK;
  int64_t ny = g->n * g->groups * g->cy * pG;
  if (a.impl->kind == CONV_IM2COL || a.impl->kind == CONV_COL2IM) ny = g->n * g->cx * pK * pG;
  double *x = NULL, *y = NULL, *w = NULL, *b = NULL;
  tpu_status_t s = TPU_OK;
  bool oom = false;
  switch (a.impl->kind) {
    case CONV_FORWARD: {
      bool t = a.transposed;
      x = read_all(t ? NULL : a.input, nx);
      y = read_all(t ? a.input : NULL, ny);
      w = read_all(a.weight, nw);
      if (!x || !y || !w) {
          oom = true;
          break;
        }
      pairs(g, t ? P_X : P_Y, x, y, w);
      int64_t c = a.shape[0].sizes[1];
      b = read_all(a.bias, c);
      if (b && a.bias) add_bias(t ? x : y, b, g->n, c, t ? pS : pG);
      write_all(&node->outputs[0], t ? x : y);
      break;
    }
    case CONV_BACKWARD: {
      bool t = a.transposed;
      const tpu_view_t* xv = t ? a.grad_out : a.input;
      const tpu_view_t* yv = t ? a.input : a.grad_out;
      if (a.mask[0]) {
        x = read_all(t ? xv : NULL, nx);
        y = read_all(t ? NULL : yv, ny);
        w = read_all(a.weight, nw);
        if (!x || !y || !w) {
          oom = true;
          break;
        }
        pairs(g, t ? P_Y : P_X, x, y, w);
        write_all(&node->outputs[0], t ? y : x);
        free(x), free(y), free(w);
        x = y = w = NULL;
      }
      if (a.mask[1]) {
        x = read_all(xv, nx);
        y = read_all(yv, ny);
        w = read_all(NULL, nw);
        if (!x || !y || !w) {
          oom = true;
          break;
        }
        pairs(g, P_W, x, y, w);
        write_all(&node->outputs[1], w);
      }
      if (a.mask[2]) {
        int64_t c = a.shape[2].sizes[0];
        int64_t inner = (c * g->n) != 0 ? tpu_view_numel(a.grad_out) / (c * g->n) : 0;
        double* go = read_all(a.grad_out, tpu_view_numel(a.grad_out));
        b = read_all(NULL, c);
        if (!go || !b) {
          free(go);
          oom = true;
          break;
        }
        for (int64_t i = 0; i < g->n * c * inner; ++i) b[(i / inner) % c] += go[i];
        free(go);
        write_all(&node->outputs[2], b);
      }
      break;
    }
    case CONV_IM2COL:
    case CONV_COL2IM: {
      bool to_cols = a.impl->kind == CONV_IM2COL;
      x = read_all(to_cols ? a.input : NULL, nx);
      y = read_all(to_cols ? NULL : a.input, ny);
      if (!x || !y) {
        oom = true;
        break;
      }
      pairs(g, to_cols ? P_COLS : P_IMAGE, x, y, NULL);
      write_all(&node->outputs[0], to_cols ? y : x);
      break;
    }
  }
  if (oom) s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "reference allocation failed");
  free(x), free(y), free(w), free(b);
  return s;
}
