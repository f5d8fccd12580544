/* kernels/shape/shape.c — the shape family: range factories and layout ops.
 *   arange   (arange.start_out; the functional forms route to it),
 *   linspace (linspace.out),
 *   logspace (logspace.out; the functional and Tensor forms route to it),
 *   flip     (flip, flip.out),
 *   roll     (roll, roll.out),
 *   triu/tril (functional, out= and in-place forms),
 *   eye      (eye.out, eye.m_out; the functional forms route to them),
 *   tril_indices / triu_indices (functional and out= forms),
 *   unfold_backward (unfold's gradient: windows summed back into the input).
 *
 * No kernel switches on dtype: values are computed in int64, float32 or
 * float64 (as PyTorch's CPU kernels compute them) into small contiguous
 * buffers and written through walk_scatter / tpu_convert, reproducing the
 * CPU kernels' rounding bit for bit (fused multiply-adds, arange's vector
 * lanes, linspace's per-operation rounding in half types); flip and roll are
 * converting view copies (view_copy) of reversed or shifted sub-views (roll
 * without dims moves runs of the flattened tensor through a buffer), and
 * triu/tril copy or zero one row run per tpu_convert call. unfold_backward
 * gathers: each output element sums the window elements that cover it, in
 * window order, so it writes every element once and needs no zeroing.
 *
 * arange, linspace, logspace and eye take their Scalars as attrs and their
 * dtype from the out tensor, which the caller of tpu_op_infer passes in
 * out_views[0].dtype (ops.h): their shape functions size the result from the
 * attrs and that dtype as PyTorch's meta kernels do (those are Python for
 * these ops, ~35-200 us a call), and their checks repeat the computation
 * against the out= tensor. Arguments PyTorch rejects, bool outputs of the
 * sequences and overlapping operands are UNIMPLEMENTED, so the bridge asks
 * PyTorch's meta kernel or falls back to CPU (which raises PyTorch's own
 * error).
 *
 * tpu_shape_reference is the plain per-element reference the test compares
 * against.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/kernel_util.h"

tpu_status_t tpu_shape_reference(const tpu_op_def_t* def, const tpu_node_t* node);

#define SHAPE_BUF 256

static tpu_status_t unimpl(const char* what) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s", what);
}

/* The node's output, or NULL (none, or absent: every row here writes one). */
static const tpu_view_t* out_view(const tpu_node_t* node) {
  if (node->num_outputs < 1 || !node->outputs || tpu_view_is_absent(&node->outputs[0])) return NULL;
  return &node->outputs[0];
}

/* A Scalar attr as double / as int64 (Scalar::to<int64_t>: truncation). */
static double attr_f64(const tpu_attr_t* a) {
  if (!a) return 0.0;
  return a->kind == TPU_ATTR_FLOAT ? a->u.f : (double)a->u.i;
}
static bool attr_i64(const tpu_attr_t* a, int64_t* out) {
  if (!a || a->kind == TPU_ATTR_NONE) return false;
  if (a->kind != TPU_ATTR_FLOAT) {
    *out = a->u.i;
    return true;
  }
  double f = a->u.f;
  if (!(f > -9.2e18 && f < 9.2e18)) return false;
  *out = (int64_t)f;
  return true;
}

/* A value rounded through dtype (float32 arithmetic of half types). */
static float round_through(float x, tpu_dtype_t dt) {
  uint64_t tmp = 0;
  float r;
  tpu_convert(&tmp, dt, 1, &x, TPU_DTYPE_F32, 1, 1);
  tpu_convert(&r, TPU_DTYPE_F32, 1, &tmp, dt, 1, 1);
  return r;
}

/* ---- arange / linspace: parameters --------------------------------------------- */

typedef enum { SEQ_INT, SEQ_F32, SEQ_F64 } seq_kind_t;

typedef struct seq {
  bool linspace;
  seq_kind_t kind;
  int64_t n;
  /* arange: start + step * i. linspace: i < half ? start + step * i
   * : end - step * (n - i - 1) (steps == 1: start). */
  int64_t istart, istep;
  double dstart, dstep, dend;
  float fstart, fstep, fend;
  int64_t half;
  tpu_dtype_t rdt; /* the output dtype (linspace over half types rounds every operation) */
  int64_t lanes;   /* arange: ATen's vector width for the dtype (32 bytes) */
  /* logspace: base ^ (linspace's exponent in double: dstart + dstep * i, or
   * dend - dstep * (n - i - 1) past the middle); steps == 1: base ^ dstart. */
  bool logspace;
  double base;
} seq_t;

static tpu_status_t parse_arange(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_dtype_t dt, seq_t* s) {
  memset(s, 0, sizeof(*s));
  const tpu_attr_t *a0 = ku_attr(def, node, "start"), *a1 = ku_attr(def, node, "end"),
                   *a2 = ku_attr(def, node, "step");
  if (!a0 || !a1 || a0->kind == TPU_ATTR_NONE || a1->kind == TPU_ATTR_NONE)
    return unimpl("arange: missing start/end");
  if (dt == TPU_DTYPE_BOOL) return unimpl("arange: bool output");
  double start = attr_f64(a0), end = attr_f64(a1);
  double step = (a2 && a2->kind != TPU_ATTR_NONE) ? attr_f64(a2) : 1.0;
  double size_d;
  if (tpu_dtype_is_integral(dt)) {
    int64_t xs, xe, xst = 1;
    if (!attr_i64(a0, &xs) || !attr_i64(a1, &xe) ||
        (a2 && a2->kind != TPU_ATTR_NONE && !attr_i64(a2, &xst)))
      return unimpl("arange: range does not fit int64");
    bool fractional = a0->kind == TPU_ATTR_FLOAT || a1->kind == TPU_ATTR_FLOAT ||
                      (a2 && a2->kind == TPU_ATTR_FLOAT);
    if (fractional) {
      /* Python floats for an integer dtype: the size from the double range
       * (as the CPU sizes it), the values from the truncated start and step
       * (a step truncated to 0 repeats start, as on the CPU). */
      if (!(step > 0 || step < 0)) return unimpl("step must be nonzero");
      if (!isfinite(start) || !isfinite(end)) return unimpl("unsupported range");
      if (!((step > 0 && end >= start) || (step < 0 && end <= start)))
        return unimpl("upper bound and larger bound inconsistent with step sign");
      size_d = ceil((end - start) / step);
    } else if (xst == 0) {
      return unimpl("step must be nonzero");
    } else if (!((xst > 0 && xe >= xs) || (xst < 0 && xe <= xs))) {
      return unimpl("upper bound and larger bound inconsistent with step sign");
    } else if (dt == TPU_DTYPE_I64) {
      int64_t sgn = (xst > 0) - (xst < 0), span; /* xst - sgn moves toward 0: no overflow */
      if (__builtin_sub_overflow(xe, xs, &span) || __builtin_add_overflow(span, xst - sgn, &span))
        return unimpl("arange: range does not fit int64"); /* more elements than any tensor */
      size_d = (double)(span / xst);
    } else {
      size_d = ceil((end - start) / step);
    }
    s->kind = SEQ_INT;
    s->istart = xs, s->istep = xst;
  } else {
    bool half = tpu_dtype_size(dt) == 2;
    double xs = start, xe = end, xst = step;
    if (half) xs = (float)start, xe = (float)end, xst = (float)step;
    if (!(xst > 0 || xst < 0)) return unimpl("step must be nonzero");
    if (!isfinite(xs) || !isfinite(xe)) return unimpl("unsupported range");
    if (!((xst > 0 && xe >= xs) || (xst < 0 && xe <= xs)))
      return unimpl("upper bound and larger bound inconsistent with step sign");
    size_d = ceil((end - start) / step);
    s->kind = half ? SEQ_F32 : SEQ_F64;
    s->rdt = dt;
    s->lanes = 32 / (int64_t)tpu_dtype_size(dt);
    s->fstart = (float)start, s->fstep = (float)step;
    s->dstart = start, s->dstep = step;
  }
  if (!(size_d >= 0 && size_d <= 9.2e18)) return unimpl("arange: invalid size");
  s->n = (int64_t)size_d;
  return TPU_OK;
}

static tpu_status_t parse_linspace(const tpu_op_def_t* def, const tpu_node_t* node,
                                   tpu_dtype_t dt, seq_t* s) {
  memset(s, 0, sizeof(*s));
  s->linspace = true;
  const tpu_attr_t *a0 = ku_attr(def, node, "start"), *a1 = ku_attr(def, node, "end"),
                   *a2 = ku_attr(def, node, "steps");
  if (!a0 || !a1 || !a2 || a0->kind == TPU_ATTR_NONE || a1->kind == TPU_ATTR_NONE ||
      a2->kind != TPU_ATTR_INT)
    return unimpl("linspace: missing arguments");
  if (dt == TPU_DTYPE_BOOL) return unimpl("linspace: bool output");
  s->n = a2->u.i;
  if (s->n < 0) return unimpl("number of steps must be non-negative");
  s->half = s->n / 2;
  if (tpu_dtype_is_integral(dt)) {
    int64_t xs, xe, ws = 0, we = 0, bs = 0, be = 0;
    if (!attr_i64(a0, &xs) || !attr_i64(a1, &xe)) return unimpl("linspace: out of range");
    /* Scalar::to<scalar_t>: values must survive the round trip. */
    tpu_convert(&ws, dt, 1, &xs, TPU_DTYPE_I64, 1, 1);
    tpu_convert(&we, dt, 1, &xe, TPU_DTYPE_I64, 1, 1);
    tpu_convert(&bs, TPU_DTYPE_I64, 1, &ws, dt, 1, 1);
    tpu_convert(&be, TPU_DTYPE_I64, 1, &we, dt, 1, 1);
    if (bs != xs || be != xe) return unimpl("linspace: value out of the dtype's range");
    s->kind = SEQ_INT;
    s->dstart = (double)xs, s->dend = (double)xe;
    s->dstep = s->n > 1 ? ((double)xe - (double)xs) / (double)(s->n - 1) : 0.0;
  } else if (tpu_dtype_compute(dt) == TPU_COMPUTE_F32) {
    /* c10::Half / BFloat16 arithmetic: each operation rounds to the type. */
    s->kind = SEQ_F32;
    s->rdt = dt;
    float fs = round_through((float)attr_f64(a0), dt), fe = round_through((float)attr_f64(a1), dt);
    s->fstart = fs, s->fend = fe;
    s->fstep = s->n > 1 ? round_through(round_through(fe - fs, dt) /
                                            round_through((float)(s->n - 1), dt), dt)
                        : 0.0f;
  } else {
    s->kind = SEQ_F64;
    s->dstart = attr_f64(a0), s->dend = attr_f64(a1);
    s->dstep = s->n > 1 ? (s->dend - s->dstart) / (double)(s->n - 1) : 0.0;
  }
  return TPU_OK;
}

/* A double rounded to a floating dtype and back (Scalar::to<scalar_t>). */
static double round_f64(double x, tpu_dtype_t dt) {
  uint64_t tmp = 0;
  double r;
  tpu_convert(&tmp, dt, 1, &x, TPU_DTYPE_F64, 1, 1);
  tpu_convert(&r, TPU_DTYPE_F64, 1, &tmp, dt, 1, 1);
  return r;
}

/* ATen's logspace_out: the exponents as linspace's, computed in double from
 * start/end converted to the output dtype (their difference taken in that
 * dtype), the power in double (an integer dtype's base as float first),
 * then converted to the output. */
static tpu_status_t parse_logspace(const tpu_op_def_t* def, const tpu_node_t* node,
                                   tpu_dtype_t dt, seq_t* s) {
  memset(s, 0, sizeof(*s));
  s->logspace = true;
  s->kind = SEQ_F64;
  const tpu_attr_t *a0 = ku_attr(def, node, "start"), *a1 = ku_attr(def, node, "end"),
                   *a2 = ku_attr(def, node, "steps"), *a3 = ku_attr(def, node, "base");
  if (!a0 || !a1 || !a2 || a0->kind == TPU_ATTR_NONE || a1->kind == TPU_ATTR_NONE ||
      a2->kind != TPU_ATTR_INT)
    return unimpl("logspace: missing arguments");
  if (dt == TPU_DTYPE_BOOL) return unimpl("logspace: bool output");
  s->n = a2->u.i;
  if (s->n < 0) return unimpl("number of steps must be non-negative");
  s->half = s->n / 2;
  s->base = (a3 && a3->kind != TPU_ATTR_NONE) ? attr_f64(a3) : 10.0;
  if (s->n == 1) {
    s->dstart = attr_f64(a0);
    return TPU_OK;
  }
  if (tpu_dtype_is_integral(dt)) {
    int64_t xs, xe, ws = 0, we = 0, bs = 0, be = 0;
    if (!attr_i64(a0, &xs) || !attr_i64(a1, &xe)) return unimpl("logspace: out of range");
    tpu_convert(&ws, dt, 1, &xs, TPU_DTYPE_I64, 1, 1);
    tpu_convert(&we, dt, 1, &xe, TPU_DTYPE_I64, 1, 1);
    tpu_convert(&bs, TPU_DTYPE_I64, 1, &ws, dt, 1, 1);
    tpu_convert(&be, TPU_DTYPE_I64, 1, &we, dt, 1, 1);
    if (bs != xs || be != xe) return unimpl("logspace: value out of the dtype's range");
    s->base = (double)(float)s->base;
    s->dstart = (double)xs, s->dend = (double)xe;
    s->dstep = s->n > 1 ? (double)(int64_t)((uint64_t)xe - (uint64_t)xs) / (double)(s->n - 1) : 0.0;
  } else {
    s->dstart = round_f64(attr_f64(a0), dt), s->dend = round_f64(attr_f64(a1), dt);
    double diff = dt == TPU_DTYPE_F64 ? s->dend - s->dstart
                                      : round_f64((double)((float)s->dend - (float)s->dstart), dt);
    s->dstep = s->n > 1 ? diff / (double)(s->n - 1) : 0.0;
  }
  return TPU_OK;
}

static double seq_log(const seq_t* s, int64_t i) {
  if (s->n == 1) return pow(s->base, s->dstart);
  return pow(s->base, i < s->half ? s->dstart + s->dstep * (double)i
                                  : s->dend - s->dstep * (double)(s->n - i - 1));
}

/* The sequence of dtype dt that the node's attrs describe. */
static tpu_status_t parse_seq_as(const tpu_op_def_t* def, const tpu_node_t* node, tpu_dtype_t dt,
                                 seq_t* s) {
  bool lin = strcmp(def->name, "linspace") == 0, log = strcmp(def->name, "logspace") == 0;
  return lin ? parse_linspace(def, node, dt, s)
       : log ? parse_logspace(def, node, dt, s)
             : parse_arange(def, node, dt, s);
}

static tpu_status_t parse_seq(const tpu_op_def_t* def, const tpu_node_t* node, seq_t* s) {
  const tpu_view_t* out = out_view(node);
  if (!out) return unimpl("expected an output");
  TPU_RETURN_IF_ERROR(parse_seq_as(def, node, out->dtype, s));
  if (tpu_view_numel(out) != s->n)
    return unimpl("output size does not match the range");
  return TPU_OK;
}

/* A factory row's dtype: the out= tensor's, which the caller passes in
 * out_views[0].dtype (ops.h); complex results are left to PyTorch's meta
 * kernels, as the kernels refuse them. */
static tpu_status_t factory_dtype(const tpu_view_t* out_views, tpu_dtype_t* out_dt) {
  tpu_dtype_t dt = out_views[0].dtype;
  if (dt < 0 || dt >= TPU_DTYPE_COUNT || tpu_dtype_is_complex(dt))
    return unimpl("the out= tensor's dtype is not given");
  *out_dt = dt;
  return TPU_OK;
}

static tpu_status_t seq_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_view_t* out_views) {
  tpu_dtype_t dt = TPU_DTYPE_INVALID;
  seq_t s;
  TPU_RETURN_IF_ERROR(factory_dtype(out_views, &dt));
  TPU_RETURN_IF_ERROR(parse_seq_as(def, node, dt, &s));
  out_views[0] = view_of(NULL, dt, 1, &s.n);
  return TPU_OK;
}

/* Element i, as the kernel's compute type. */
static int64_t seq_int(const seq_t* s, int64_t i) {
  if (!s->linspace) return (int64_t)((uint64_t)s->istart + (uint64_t)s->istep * (uint64_t)i);
  return 0; /* linspace over integers computes in double */
}
/* PyTorch's CPU build contracts start + step * i into a fused multiply-add;
 * fma/fmaf give the same single rounding. */
/* ATen's floating arange (one parallel chunk, i.e. up to 32768 elements)
 * runs pairs of vectors of `lanes` elements over [0, n - n % (2 * lanes)):
 * lane k of the vector starting at g is fma(k, step, base), base being
 * element g computed as a scalar and rounded to the output dtype; the rest
 * is scalar. Returns g and sets *k (-1 for a scalar element). */
static int64_t arange_group(const seq_t* s, int64_t i, int64_t* k) {
  int64_t w = s->lanes;
  if (w > 0 && i < (s->n / (2 * w)) * 2 * w) {
    *k = i % w;
    return i - *k;
  }
  *k = -1;
  return i;
}

static double seq_f64(const seq_t* s, int64_t i) {
  if (!s->linspace) {
    int64_t k, g = arange_group(s, i, &k);
    double base = fma(s->dstep, (double)g, s->dstart);
    if (k < 0) return base;
    if (s->rdt == TPU_DTYPE_F32) base = (double)(float)base;
    return fma((double)k, s->dstep, base);
  }
  if (s->n == 1) return s->dstart;
  return i < s->half ? fma(s->dstep, (double)i, s->dstart)
                     : fma(-s->dstep, (double)(s->n - i - 1), s->dend);
}
static float seq_f32(const seq_t* s, int64_t i) {
  if (!s->linspace) {
    int64_t k, g = arange_group(s, i, &k);
    float base = fmaf(s->fstep, (float)g, s->fstart);
    if (k < 0) return base;
    return fmaf((float)k, s->fstep, round_through(base, s->rdt));
  }
  if (s->n == 1) return s->fstart;
  tpu_dtype_t r = s->rdt;
  if (tpu_dtype_size(r) != 2)
    return i < s->half ? fmaf(s->fstep, (float)i, s->fstart)
                       : fmaf(-s->fstep, (float)(s->n - i - 1), s->fend);
  return i < s->half ? s->fstart + round_through(s->fstep * round_through((float)i, r), r)
                     : s->fend - round_through(s->fstep * round_through((float)(s->n - i - 1), r), r);
}

/* Rounds n floats through dtype r (a whole run per tpu_convert call). */
static void round_buf(float* f, int64_t n, tpu_dtype_t r) {
  uint16_t tmp[SHAPE_BUF];
  tpu_convert(tmp, r, 1, f, TPU_DTYPE_F32, 1, n);
  tpu_convert(f, TPU_DTYPE_F32, 1, tmp, r, 1, n);
}

/* Elements [k, k + n) of a float32 sequence into f. */
static void seq_f32_run(const seq_t* s, int64_t k, int64_t n, float* f) {
  if (!s->linspace || s->n == 1 || tpu_dtype_size(s->rdt) != 2) {
    for (int64_t t = 0; t < n; ++t) f[t] = seq_f32(s, k + t);
    return;
  }
  for (int64_t t = 0; t < n; ++t) f[t] = (float)(k + t < s->half ? k + t : s->n - (k + t) - 1);
  round_buf(f, n, s->rdt);
  for (int64_t t = 0; t < n; ++t) f[t] *= s->fstep;
  round_buf(f, n, s->rdt);
  for (int64_t t = 0; t < n; ++t) f[t] = k + t < s->half ? s->fstart + f[t] : s->fend - f[t];
}
static bool seq_uses_int(const seq_t* s) { return s->kind == SEQ_INT && !s->linspace; }

typedef struct seq_job {
  const seq_t* s;
  walk_t walk;
  char* base;
  tpu_dtype_t dtype;
} seq_job_t;

static void seq_chunk(void* arg, int64_t begin, int64_t end) {
  const seq_job_t* j = (const seq_job_t*)arg;
  const seq_t* s = j->s;
  union {
    int64_t i[SHAPE_BUF];
    double d[SHAPE_BUF];
    float f[SHAPE_BUF];
  } buf;
  for (int64_t k = begin; k < end; k += SHAPE_BUF) {
    int64_t n = end - k < SHAPE_BUF ? end - k : SHAPE_BUF;
    tpu_dtype_t bt;
    if (s->logspace) {
      for (int64_t t = 0; t < n; ++t) buf.d[t] = seq_log(s, k + t);
      bt = TPU_DTYPE_F64;
    } else if (seq_uses_int(s)) {
      for (int64_t t = 0; t < n; ++t) buf.i[t] = seq_int(s, k + t);
      bt = TPU_DTYPE_I64;
    } else if (s->kind == SEQ_F32) {
      seq_f32_run(s, k, n, buf.f);
      bt = TPU_DTYPE_F32;
    } else {
      for (int64_t t = 0; t < n; ++t) buf.d[t] = seq_f64(s, k + t);
      bt = TPU_DTYPE_F64;
    }
    walk_scatter(j->base, j->dtype, &j->walk, k, &buf, bt, n);
  }
}

static tpu_status_t seq_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  seq_t s;
  return ku_unimplemented(parse_seq(def, node, &s));
}

static tpu_status_t seq_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_exec_ctx_t* ctx) {
  (void)ctx;
  seq_t s;
  tpu_status_t st = parse_seq(def, node, &s);
  if (st != TPU_OK) {
    tpu_status_t e = tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s", tpu_status_message(st));
    tpu_status_free(st);
    return e;
  }
  const tpu_view_t* out = out_view(node);
  seq_job_t j = {&s, {0}, (char*)tpu_view_ptr(out), out->dtype};
  walk_init_tail(&j.walk, out, 0);
  tpu_parallel_for(s.n, WALK_GRAIN, seq_chunk, &j);
  return TPU_OK;
}

/* ---- flip / roll / triu / tril: shared checks ------------------------------------- */

static tpu_status_t layout_common(const tpu_node_t* node, const tpu_view_t* self,
                                  bool allow_same) {
  const tpu_view_t* out = out_view(node);
  if (!self || !out) return unimpl("expected self and an output");
  if (!views_same_shape(self, out)) return unimpl("output shape differs from self");
  if (views_overlap(self, out) && !(allow_same && views_same(self, out)))
    return unimpl("output overlaps self");
  return TPU_OK;
}

static tpu_status_t self_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_view_t* out_views) {
  const tpu_view_t* self = ku_input(def, node, "self");
  if (!self) return unimpl("expected self");
  out_views[0] = *self;
  out_views[0].addr = 0;
  tpu_view_set_contiguous(&out_views[0]);
  return TPU_OK;
}

/* ---- flip ---------------------------------------------------------------------- */

/* flipped[d]: whether dim d is reversed. */
static tpu_status_t parse_flip(const tpu_op_def_t* def, const tpu_node_t* node,
                               bool* flipped) {
  const tpu_view_t* self = ku_input(def, node, "self");
  const tpu_attr_t* dims = ku_attr(def, node, "dims");
  if (!self || !dims || dims->kind != TPU_ATTR_INTS) return unimpl("flip: expected self, dims");
  for (int32_t d = 0; d < TPU_MAX_DIMS; ++d) flipped[d] = false;
  for (int32_t i = 0; i < dims->count; ++i) {
    int32_t d = 0;
    TPU_RETURN_IF_ERROR(ku_unimplemented(ku_wrap_dim(dims->u.ints[i], self->ndim, &d)));
    if (flipped[d]) return unimpl("dims has duplicates");
    flipped[d] = true;
  }
  return TPU_OK;
}

static tpu_status_t flip_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  bool flipped[TPU_MAX_DIMS];
  TPU_RETURN_IF_ERROR(parse_flip(def, node, flipped));
  return layout_common(node, ku_input(def, node, "self"), false);
}

static tpu_status_t flip_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_view_t* out_views) {
  bool flipped[TPU_MAX_DIMS];
  TPU_RETURN_IF_ERROR(parse_flip(def, node, flipped));
  return self_infer(def, node, out_views);
}

static tpu_status_t flip_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  (void)ctx;
  bool flipped[TPU_MAX_DIMS];
  TPU_RETURN_IF_ERROR(ku_unimplemented(flip_check(def, node)));
  TPU_RETURN_IF_ERROR(parse_flip(def, node, flipped));
  const tpu_view_t* self = ku_input(def, node, "self");
  const tpu_view_t* out = out_view(node);
  if (tpu_view_numel(out) == 0) return TPU_OK;
  /* A reversed view of self: negative strides from the last element. */
  tpu_view_t src = *self;
  int64_t esize = (int64_t)tpu_dtype_size(self->dtype), shift = 0;
  for (int32_t d = 0; d < self->ndim; ++d) {
    if (!flipped[d]) continue;
    shift += (self->sizes[d] - 1) * self->strides[d];
    src.strides[d] = -self->strides[d];
  }
  src.addr = self->addr + (uint64_t)(shift * esize);
  view_copy(out, &src);
  return TPU_OK;
}

/* ---- roll ---------------------------------------------------------------------- */

typedef struct roll_args {
  bool flat; /* no dims: roll the flattened tensor */
  int64_t shift[TPU_MAX_DIMS]; /* per dim, in [0, size) */
} roll_args_t;

static tpu_status_t parse_roll(const tpu_op_def_t* def, const tpu_node_t* node,
                               roll_args_t* r) {
  const tpu_view_t* self = ku_input(def, node, "self");
  const tpu_attr_t* shifts = ku_attr(def, node, "shifts");
  const tpu_attr_t* dims = ku_attr(def, node, "dims");
  if (!self || !shifts || shifts->kind != TPU_ATTR_INTS) return unimpl("roll: expected shifts");
  int32_t ndims = (dims && dims->kind == TPU_ATTR_INTS) ? dims->count : 0;
  if (dims && dims->kind != TPU_ATTR_INTS && dims->kind != TPU_ATTR_NONE)
    return unimpl("roll: bad dims");
  memset(r, 0, sizeof(*r));
  if (ndims == 0) {
    if (shifts->count != 1) return unimpl("roll: shifts must have one element without dims");
    r->flat = true;
    int64_t n = tpu_view_numel(self);
    r->shift[0] = n > 0 ? ((shifts->u.ints[0] % n) + n) % n : 0;
    return TPU_OK;
  }
  if (shifts->count != ndims) return unimpl("shifts and dimensions must align");
  if (self->ndim == 0) return unimpl("roll: dims given for a 0-dim tensor"); /* IndexError */
  for (int32_t i = 0; i < ndims; ++i) {
    int32_t d = 0;
    TPU_RETURN_IF_ERROR(ku_unimplemented(ku_wrap_dim(dims->u.ints[i], self->ndim, &d)));
    int64_t n = self->ndim ? self->sizes[d] : 1;
    if (n > 0) r->shift[d] = (((r->shift[d] + shifts->u.ints[i] % n) % n) + n) % n;
  }
  return TPU_OK;
}

static tpu_status_t roll_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  roll_args_t r;
  TPU_RETURN_IF_ERROR(parse_roll(def, node, &r));
  const tpu_view_t* self = ku_input(def, node, "self");
  return layout_common(node, self, false);
}

static tpu_status_t roll_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_view_t* out_views) {
  roll_args_t r;
  TPU_RETURN_IF_ERROR(parse_roll(def, node, &r));
  return self_infer(def, node, out_views);
}

/* Roll of the flattened tensor: out element k (row-major) is self element
 * (k - shift) mod n, moved in runs of SHAPE_BUF through a buffer in self's
 * dtype (each run split where the source wraps). */
typedef struct flat_roll_job {
  walk_t wself, wout; /* logical order */
  const tpu_view_t *self, *out;
  int64_t shift, n;
} flat_roll_job_t;

static void flat_roll_chunks(void* arg, int64_t begin, int64_t end) {
  const flat_roll_job_t* j = (const flat_roll_job_t*)arg;
  uint64_t buf[SHAPE_BUF];
  for (int64_t c = begin; c < end; ++c) {
    int64_t k = c * SHAPE_BUF, stop = k + SHAPE_BUF < j->n ? k + SHAPE_BUF : j->n;
    while (k < stop) {
      int64_t src = (k - j->shift + j->n) % j->n;
      int64_t len = stop - k;
      if (len > j->n - src) len = j->n - src;
      walk_gather(buf, j->self->dtype, tpu_view_ptr(j->self), j->self->dtype, &j->wself, src, len);
      walk_scatter(tpu_view_ptr(j->out), j->out->dtype, &j->wout, k, buf, j->self->dtype, len);
      k += len;
    }
  }
}

static tpu_status_t roll_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  (void)ctx;
  roll_args_t r;
  TPU_RETURN_IF_ERROR(ku_unimplemented(roll_check(def, node)));
  TPU_RETURN_IF_ERROR(parse_roll(def, node, &r));
  tpu_view_t self = *ku_input(def, node, "self"), out = *out_view(node);
  int64_t numel = tpu_view_numel(&out);
  if (numel == 0) return TPU_OK;
  if (r.flat) {
    flat_roll_job_t j = {{0}, {0}, &self, &out, r.shift[0], numel};
    walk_init_tail(&j.wself, &self, 0);
    walk_init_tail(&j.wout, &out, 0);
    tpu_parallel_for((numel + SHAPE_BUF - 1) / SHAPE_BUF, WALK_GRAIN / SHAPE_BUF, flat_roll_chunks,
                     &j);
    return TPU_OK;
  }
  int32_t rolled[TPU_MAX_DIMS], k = 0;
  for (int32_t d = 0; d < self.ndim; ++d)
    if (r.shift[d] != 0) rolled[k++] = d;
  int64_t esz = (int64_t)tpu_dtype_size(self.dtype), osz = (int64_t)tpu_dtype_size(out.dtype);
  /* One block per choice of segment along each rolled dim:
   * src [0, n - s) -> dst [s, n), and src [n - s, n) -> dst [0, s). */
  for (int64_t mask = 0; mask < ((int64_t)1 << k); ++mask) {
    tpu_view_t src = self, dst = out;
    for (int32_t j = 0; j < k; ++j) {
      int32_t d = rolled[j];
      int64_t n = self.sizes[d], s = r.shift[d];
      bool wrap = (mask >> j) & 1;
      int64_t src0 = wrap ? n - s : 0, dst0 = wrap ? 0 : s;
      src.sizes[d] = dst.sizes[d] = wrap ? s : n - s;
      src.addr += (uint64_t)(src0 * self.strides[d] * esz);
      dst.addr += (uint64_t)(dst0 * out.strides[d] * osz);
    }
    view_copy(&dst, &src);
  }
  return TPU_OK;
}

/* ---- triu / tril ------------------------------------------------------------- */

static tpu_status_t tri_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  const tpu_view_t* self = ku_input(def, node, "self");
  if (!self || self->ndim < 2) return unimpl("input tensor must have at least 2 dimensions");
  TPU_RETURN_IF_ERROR(layout_common(node, self, true));
  if (out_view(node)->dtype != self->dtype) return unimpl("output dtype differs from self");
  return TPU_OK;
}

static tpu_status_t tri_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_view_t* out_views) {
  const tpu_view_t* self = ku_input(def, node, "self");
  if (!self || self->ndim < 2) return unimpl("input tensor must have at least 2 dimensions");
  return self_infer(def, node, out_views);
}

typedef struct tri_job {
  walk_t batch; /* view 0: out, 1: self, over the leading dims */
  const tpu_view_t *out, *self;
  int64_t rows, cols, diag;
  bool upper;
} tri_job_t;

static void tri_rows(void* arg, int64_t begin, int64_t end) {
  const tri_job_t* j = (const tri_job_t*)arg;
  const tpu_view_t *out = j->out, *self = j->self;
  int32_t nd = out->ndim;
  tpu_dtype_t dt = out->dtype;
  const double zero = 0.0;
  for (int64_t r = begin; r < end; ++r) {
    int64_t b = r / j->rows, i = r % j->rows, offs[WALK_MAX_VIEWS];
    walk_offsets(&j->batch, j->batch.ndim, b, offs);
    char* o = view_at(out, offs[0] + i * out->strides[nd - 2]);
    const char* s = view_at(self, offs[1] + i * self->strides[nd - 2]);
    int64_t os = out->strides[nd - 1], ss = self->strides[nd - 1];
    int64_t esz = (int64_t)tpu_dtype_size(dt), N = j->cols;
    /* Columns [lo, hi) are kept; the rest become zero. */
    int64_t lo, hi;
    if (j->upper) {
      int64_t c = i + j->diag;
      lo = c < 0 ? 0 : (c > N ? N : c), hi = N;
    } else {
      int64_t c = i + j->diag + 1;
      lo = 0, hi = c < 0 ? 0 : (c > N ? N : c);
    }
    if (lo > 0) tpu_convert(o, dt, os, &zero, TPU_DTYPE_F64, 0, lo);
    if (hi > lo && o != s) tpu_convert(o + lo * os * esz, dt, os, s + lo * ss * esz, dt, ss, hi - lo);
    if (hi < N) tpu_convert(o + hi * os * esz, dt, os, &zero, TPU_DTYPE_F64, 0, N - hi);
  }
}

static tpu_status_t tri_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_exec_ctx_t* ctx) {
  (void)ctx;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tri_check(def, node)));
  tri_job_t j;
  j.self = ku_input(def, node, "self");
  j.out = out_view(node);
  j.upper = strcmp(def->name, "triu") == 0;
  j.diag = tpu_attr_int(ku_attr(def, node, "diagonal"), 0);
  int32_t nd = j.out->ndim;
  j.rows = j.out->sizes[nd - 2];
  j.cols = j.out->sizes[nd - 1];
  /* Past either corner every diagonal keeps all or nothing: clamped, so
   * i + diag cannot overflow. */
  int64_t reach = j.rows + j.cols;
  j.diag = j.diag > reach ? reach : j.diag < -reach ? -reach : j.diag;
  const int64_t* strides[2] = {j.out->strides, j.self->strides};
  walk_init(&j.batch, nd - 2, j.out->sizes, 2, strides);
  int64_t total = j.batch.numel * j.rows;
  if (total == 0 || j.cols == 0) return TPU_OK;
  int64_t grain = WALK_GRAIN / j.cols;
  tpu_parallel_for(total, grain > 0 ? grain : 1, tri_rows, &j);
  return TPU_OK;
}

/* ---- eye --------------------------------------------------------------------- */

/* n rows, m columns (eye.out: m = n); out must already be [n, m]. */
/* eye's [n, m] from its attrs (m absent: n). */
static tpu_status_t eye_size(const tpu_op_def_t* def, const tpu_node_t* node, int64_t* n,
                             int64_t* m) {
  *n = tpu_attr_int(ku_attr(def, node, "n"), -1);
  *m = tpu_attr_int(ku_attr(def, node, "m"), *n);
  if (*n < 0 || *m < 0) return unimpl("n and m must be non-negative");
  return TPU_OK;
}

static tpu_status_t parse_eye(const tpu_op_def_t* def, const tpu_node_t* node, int64_t* n,
                              int64_t* m) {
  const tpu_view_t* out = out_view(node);
  TPU_RETURN_IF_ERROR(eye_size(def, node, n, m));
  if (!out || out->ndim != 2 || out->sizes[0] != *n || out->sizes[1] != *m)
    return unimpl("output must be [n, m]");
  return TPU_OK;
}

static tpu_status_t eye_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_view_t* out_views) {
  tpu_dtype_t dt = TPU_DTYPE_INVALID;
  TPU_RETURN_IF_ERROR(factory_dtype(out_views, &dt));
  int64_t nm[2];
  TPU_RETURN_IF_ERROR(eye_size(def, node, &nm[0], &nm[1]));
  out_views[0] = view_of(NULL, dt, 2, nm);
  return TPU_OK;
}

static tpu_status_t eye_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  int64_t n, m;
  return parse_eye(def, node, &n, &m);
}

typedef struct eye_job {
  const tpu_view_t* out;
} eye_job_t;

static void eye_rows(void* arg, int64_t begin, int64_t end) {
  const tpu_view_t* out = ((const eye_job_t*)arg)->out;
  const double zero = 0.0, one = 1.0;
  tpu_dtype_t dt = out->dtype;
  int64_t m = out->sizes[1], rs = out->strides[0], cs = out->strides[1];
  for (int64_t i = begin; i < end; ++i) {
    char* row = view_at(out, i * rs);
    tpu_convert(row, dt, cs, &zero, TPU_DTYPE_F64, 0, m);
    if (i < m) tpu_convert(view_at(out, i * rs + i * cs), dt, 1, &one, TPU_DTYPE_F64, 0, 1);
  }
}

static tpu_status_t eye_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_exec_ctx_t* ctx) {
  (void)ctx;
  int64_t n, m;
  TPU_RETURN_IF_ERROR(ku_unimplemented(parse_eye(def, node, &n, &m)));
  if (n == 0 || m == 0) return TPU_OK;
  eye_job_t j = {out_view(node)};
  int64_t grain = WALK_GRAIN / m;
  tpu_parallel_for(n, grain > 0 ? grain : 1, eye_rows, &j);
  return TPU_OK;
}

/* ---- tril_indices / triu_indices ------------------------------------------------- */

/* ATen's get_tril_size. */
static int64_t tril_size(int64_t row, int64_t col, int64_t offset) {
  if (row == 0 || col == 0) return 0;
  int64_t first = offset > 0 ? (col < 1 + offset ? col : 1 + offset) : (row + offset > 0);
  int64_t last = col < row + offset ? col : row + offset;
  if (last < 0) last = 0;
  int64_t all = row < row + offset ? row : row + offset;
  if (all < 0) all = 0;
  int64_t trap = last - first + 1;
  int64_t size = ((first + last) * trap) >> 1;
  if (all - trap > 0) size += (all - trap) * col;
  return size;
}

typedef struct tri_idx {
  bool upper;
  int64_t row, col, offset, size;
  tpu_dtype_t dtype;
} tri_idx_t;

/* `out`: the output when known (check, kernel); NULL for shape inference,
 * which must not read node->outputs. */
static tpu_status_t parse_tri_idx(const tpu_op_def_t* def, const tpu_node_t* node,
                                  const tpu_view_t* out, tri_idx_t* t) {
  memset(t, 0, sizeof(*t));
  t->upper = def->name[2] == 'i' && def->name[3] == 'u';
  const tpu_attr_t *r = ku_attr(def, node, "row"), *c = ku_attr(def, node, "col"),
                   *dt = ku_attr(def, node, "dtype");
  if (!r || !c || r->kind != TPU_ATTR_INT || c->kind != TPU_ATTR_INT)
    return unimpl("tri_indices: row and col expected");
  t->row = r->u.i, t->col = c->u.i;
  t->offset = tpu_attr_int(ku_attr(def, node, "offset"), 0);
  if (t->row < 0 || t->col < 0) return unimpl("row and col must be non-negative");
  if (t->row > (int64_t)1 << 31 || t->col > (int64_t)1 << 31 ||
      t->offset > (int64_t)1 << 31 || t->offset < -((int64_t)1 << 31))
    return unimpl("tri_indices: too large");
  t->size = t->upper ? t->row * t->col - tril_size(t->row, t->col, t->offset - 1)
                     : tril_size(t->row, t->col, t->offset);
  t->dtype = out ? out->dtype : (dt && dt->kind == TPU_ATTR_DTYPE) ? dt->u.dtype : TPU_DTYPE_I64;
  if (t->dtype != TPU_DTYPE_I64 && t->dtype != TPU_DTYPE_I32)
    return unimpl("tri_indices: int32 and int64 only, as the CPU");
  if (out && (out->ndim != 2 || out->sizes[0] != 2 || out->sizes[1] != t->size))
    return unimpl("tri_indices: output of another shape");
  return TPU_OK;
}

static tpu_status_t tri_idx_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  tri_idx_t t;
  return parse_tri_idx(def, node, out_view(node), &t);
}

static tpu_status_t tri_idx_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_view_t* out) {
  tri_idx_t t;
  TPU_RETURN_IF_ERROR(parse_tri_idx(def, node, NULL, &t));
  const int64_t sizes[2] = {2, t.size};
  *out = view_of(NULL, t.dtype, 2, sizes);
  return TPU_OK;
}

/* The pair at position i (ATen walks them in row-major order). */
static void tri_idx_start(const tri_idx_t* t, int64_t* r, int64_t* c) {
  if (t->upper) *r = 0, *c = t->offset > 0 ? t->offset : 0;
  else *r = t->offset < 0 ? -t->offset : 0, *c = 0;
}
static void tri_idx_next(const tri_idx_t* t, int64_t* r, int64_t* c) {
  *c += 1;
  if (t->upper) {
    if (*c >= t->col) *r += 1, *c = *r + t->offset > 0 ? *r + t->offset : 0;
  } else if (*c > *r + t->offset || *c >= t->col) {
    *r += 1, *c = 0;
  }
}

static tpu_status_t tri_idx_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                   tpu_exec_ctx_t* ctx) {
  (void)ctx;
  tri_idx_t t;
  const tpu_view_t* out = out_view(node);
  TPU_RETURN_IF_ERROR(ku_unimplemented(parse_tri_idx(def, node, out, &t)));
  walk_t w;
  walk_init_tail(&w, out, 0);
  int64_t rb[SHAPE_BUF], cb[SHAPE_BUF], r, c;
  tri_idx_start(&t, &r, &c);
  for (int64_t k = 0; k < t.size; k += SHAPE_BUF) {
    int64_t n = t.size - k < SHAPE_BUF ? t.size - k : SHAPE_BUF;
    for (int64_t q = 0; q < n; ++q) {
      rb[q] = r, cb[q] = c;
      tri_idx_next(&t, &r, &c);
    }
    walk_scatter(tpu_view_ptr(out), out->dtype, &w, k, rb, TPU_DTYPE_I64, n);
    walk_scatter(tpu_view_ptr(out), out->dtype, &w, t.size + k, cb, TPU_DTYPE_I64, n);
  }
  return TPU_OK;
}

/* ---- unfold_backward --------------------------------------------------------------- */

/* grad_in has input_sizes' shape with dim's extent replaced by the number of
 * windows, plus a trailing window axis of `size`. */
typedef struct unfold_args {
  int32_t dim, ndim;
  int64_t size, step, nwin;
} unfold_args_t;

static tpu_status_t parse_unfold(const tpu_op_def_t* def, const tpu_node_t* node,
                                 unfold_args_t* u) {
  const tpu_view_t* grad = ku_input(def, node, "grad_in");
  const tpu_attr_t* sizes = ku_attr(def, node, "input_sizes");
  if (!grad || !sizes || sizes->kind != TPU_ATTR_INTS || sizes->count < 1)
    return unimpl("unfold_backward: expected grad_in and input_sizes of 1 or more dims");
  if (grad->dtype == TPU_DTYPE_BOOL) return unimpl("unfold_backward: bool");
  u->ndim = sizes->count;
  TPU_RETURN_IF_ERROR(
      ku_unimplemented(ku_wrap_dim(tpu_attr_int(ku_attr(def, node, "dim"), 0), u->ndim, &u->dim)));
  u->size = tpu_attr_int(ku_attr(def, node, "size"), -1);
  u->step = tpu_attr_int(ku_attr(def, node, "step"), 0);
  int64_t len = sizes->u.ints[u->dim];
  if (u->step < 1 || u->size < 0 || u->size > len)
    return unimpl("unfold_backward: size or step out of range");
  u->nwin = (len - u->size) / u->step + 1;
  if (grad->ndim != u->ndim + 1 || grad->sizes[u->ndim] != u->size)
    return unimpl("unfold_backward: grad_in's shape does not match");
  for (int32_t d = 0; d < u->ndim; ++d)
    if (grad->sizes[d] != (d == u->dim ? u->nwin : sizes->u.ints[d]))
      return unimpl("unfold_backward: grad_in's shape does not match");
  return TPU_OK;
}

static tpu_status_t unfold_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_view_t* out_views) {
  unfold_args_t u;
  TPU_RETURN_IF_ERROR(parse_unfold(def, node, &u));
  const tpu_view_t* grad = ku_input(def, node, "grad_in");
  const tpu_attr_t* sizes = ku_attr(def, node, "input_sizes");
  out_views[0] = *grad;
  out_views[0].addr = 0;
  out_views[0].ndim = u.ndim;
  for (int32_t d = 0; d < u.ndim; ++d) out_views[0].sizes[d] = sizes->u.ints[d];
  tpu_view_set_contiguous(&out_views[0]);
  return TPU_OK;
}

static tpu_status_t unfold_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  tpu_view_t want; /* unfold_infer parses and validates the arguments */
  TPU_RETURN_IF_ERROR(ku_unimplemented(unfold_infer(def, node, &want)));
  const tpu_view_t *out = out_view(node), *grad = ku_input(def, node, "grad_in");
  if (!out || out->dtype != grad->dtype || !views_same_shape(out, &want))
    return unimpl("unfold_backward: output shape or dtype");
  if (views_overlap(out, grad)) return unimpl("unfold_backward: output overlaps grad_in");
  return TPU_OK;
}

typedef struct unfold_job {
  const unfold_args_t* u;
  const tpu_view_t *grad, *out;
  bool ints;
} unfold_job_t;

/* Output elements [begin, end) in logical order: each sums grad_in over the
 * windows w with w * step <= p < w * step + size (p its index along dim). */
static void unfold_chunk(void* arg, int64_t begin, int64_t end) {
  const unfold_job_t* j = (const unfold_job_t*)arg;
  const unfold_args_t* u = j->u;
  const tpu_view_t *out = j->out, *g = j->grad;
  int64_t idx[TPU_MAX_DIMS];
  for (int64_t k = begin; k < end; ++k) {
    int64_t rest = k, goff = 0, ooff = 0;
    for (int32_t d = u->ndim - 1; d >= 0; --d) {
      idx[d] = rest % out->sizes[d];
      rest /= out->sizes[d];
      ooff += idx[d] * out->strides[d];
      if (d != u->dim) goff += idx[d] * g->strides[d];
    }
    int64_t p = idx[u->dim];
    int64_t w_lo = p < u->size ? 0 : (p - u->size) / u->step + 1;
    int64_t w_hi = p / u->step < u->nwin - 1 ? p / u->step : u->nwin - 1;
    double sf = 0.0;
    uint64_t si = 0;
    for (int64_t w = w_lo; w <= w_hi; ++w) {
      int64_t o = goff + w * g->strides[u->dim] + (p - w * u->step) * g->strides[u->ndim];
      if (j->ints)
        si += (uint64_t)view_get_i64(g, o);
      else
        sf += view_get_f64(g, o);
    }
    if (j->ints)
      view_set_i64(out, ooff, (int64_t)si);
    else
      view_set_f64(out, ooff, sf);
  }
}

static tpu_status_t unfold_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx) {
  (void)ctx;
  unfold_args_t u;
  TPU_RETURN_IF_ERROR(ku_unimplemented(unfold_check(def, node)));
  TPU_RETURN_IF_ERROR(parse_unfold(def, node, &u));
  unfold_job_t j = {&u, ku_input(def, node, "grad_in"), out_view(node),
                    !tpu_dtype_is_floating(out_view(node)->dtype)};
  tpu_parallel_for(tpu_view_numel(j.out), WALK_GRAIN / 8, unfold_chunk, &j);
  return TPU_OK;
}

/* ---- the reference: one element at a time ------------------------------------ */

static void ref_copy(const tpu_view_t* out, int64_t oo, const tpu_view_t* self, int64_t so) {
  if (tpu_dtype_is_floating(self->dtype) || tpu_dtype_is_floating(out->dtype))
    view_set_f64(out, oo, view_get_f64(self, so));
  else
    view_set_i64(out, oo, view_get_i64(self, so));
}

/* Logical index k of `v`'s shape as a multi-index. */
static void ref_index(const tpu_view_t* v, int64_t k, int64_t* idx) {
  for (int32_t d = v->ndim - 1; d >= 0; --d) {
    idx[d] = k % v->sizes[d];
    k /= v->sizes[d];
  }
}

static int64_t ref_offset(const tpu_view_t* v, const int64_t* idx) {
  int64_t off = 0;
  for (int32_t d = 0; d < v->ndim; ++d) off += idx[d] * v->strides[d];
  return off;
}

tpu_status_t tpu_shape_reference(const tpu_op_def_t* def, const tpu_node_t* node) {
  const tpu_view_t* out = out_view(node);
  if (!out) return unimpl("expected an output");
  int64_t n = tpu_view_numel(out), idx[TPU_MAX_DIMS], sidx[TPU_MAX_DIMS];
  if (strcmp(def->name, "arange") == 0 || strcmp(def->name, "linspace") == 0 ||
      strcmp(def->name, "logspace") == 0) {
    seq_t s;
    TPU_RETURN_IF_ERROR(parse_seq(def, node, &s));
    for (int64_t k = 0; k < n; ++k) {
      ref_index(out, k, idx);
      int64_t off = ref_offset(out, idx);
      if (s.logspace) {
        double e = s.n == 1 ? s.dstart : k < s.n / 2 ? s.dstart + s.dstep * (double)k
                                                     : s.dend - s.dstep * (double)(s.n - k - 1);
        view_set_f64(out, off, pow(s.base, e));
      } else if (seq_uses_int(&s))
        view_set_i64(out, off, s.istart + s.istep * k);
      else if (s.kind == SEQ_F32)
        view_set_f64(out, off, (double)seq_f32(&s, k));
      else
        view_set_f64(out, off, seq_f64(&s, k));
    }
    return TPU_OK;
  }
  if (strcmp(def->name, "eye") == 0) {
    int64_t en, em;
    TPU_RETURN_IF_ERROR(parse_eye(def, node, &en, &em));
    for (int64_t k = 0; k < n; ++k) {
      ref_index(out, k, idx);
      view_set_f64(out, ref_offset(out, idx), idx[0] == idx[1] ? 1.0 : 0.0);
    }
    return TPU_OK;
  }
  if (strcmp(def->name, "tril_indices") == 0 || strcmp(def->name, "triu_indices") == 0) {
    tri_idx_t t;
    TPU_RETURN_IF_ERROR(parse_tri_idx(def, node, out, &t));
    int64_t k = 0;
    for (int64_t i = 0; i < t.row; ++i)
      for (int64_t j = 0; j < t.col; ++j) {
        if (t.upper ? j - i < t.offset : j - i > t.offset) continue;
        if (k >= t.size) return unimpl("tri_indices: size mismatch");
        view_set_i64(out, k * out->strides[1], i);
        view_set_i64(out, out->strides[0] + k * out->strides[1], j);
        ++k;
      }
    return k == t.size ? TPU_OK : unimpl("tri_indices: size mismatch");
  }
  if (strcmp(def->name, "unfold_backward") == 0) {
    unfold_args_t u;
    TPU_RETURN_IF_ERROR(parse_unfold(def, node, &u));
    const tpu_view_t* g = ku_input(def, node, "grad_in");
    double* acc = (double*)calloc((size_t)(n > 0 ? n : 1), sizeof(double)); /* row-major sums */
    if (!acc) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "unfold_backward reference");
    for (int64_t k = 0; k < tpu_view_numel(g); ++k) { /* scatter-add every grad element */
      ref_index(g, k, sidx);
      int64_t flat = 0;
      for (int32_t d = 0; d < u.ndim; ++d)
        flat = flat * out->sizes[d] + (d == u.dim ? sidx[d] * u.step + sidx[u.ndim] : sidx[d]);
      acc[flat] += tpu_dtype_is_floating(out->dtype) ? view_get_f64(g, ref_offset(g, sidx))
                                                     : (double)view_get_i64(g, ref_offset(g, sidx));
    }
    for (int64_t k = 0; k < n; ++k) {
      ref_index(out, k, idx);
      if (tpu_dtype_is_floating(out->dtype))
        view_set_f64(out, ref_offset(out, idx), acc[k]);
      else
        view_set_i64(out, ref_offset(out, idx), (int64_t)acc[k]);
    }
    free(acc);
    return TPU_OK;
  }
  const tpu_view_t* self = ku_input(def, node, "self");
  if (!self) return unimpl("expected self");
  if (strcmp(def->name, "flip") == 0) {
    bool flipped[TPU_MAX_DIMS];
    TPU_RETURN_IF_ERROR(parse_flip(def, node, flipped));
    for (int64_t k = 0; k < n; ++k) {
      ref_index(out, k, idx);
      for (int32_t d = 0; d < out->ndim; ++d)
        sidx[d] = flipped[d] ? out->sizes[d] - 1 - idx[d] : idx[d];
      ref_copy(out, ref_offset(out, idx), self, ref_offset(self, sidx));
    }
    return TPU_OK;
  }
  if (strcmp(def->name, "roll") == 0) {
    roll_args_t r;
    TPU_RETURN_IF_ERROR(parse_roll(def, node, &r));
    for (int64_t k = 0; k < n; ++k) {
      ref_index(out, k, idx);
      if (r.flat) {
        ref_index(self, (k - r.shift[0] + n) % n, sidx);
      } else {
        for (int32_t d = 0; d < out->ndim; ++d)
          sidx[d] = (idx[d] - r.shift[d] + out->sizes[d]) % out->sizes[d];
      }
      ref_copy(out, ref_offset(out, idx), self, ref_offset(self, sidx));
    }
    return TPU_OK;
  }
  if (strcmp(def->name, "triu") == 0 || strcmp(def->name, "tril") == 0) {
    if (out->ndim < 2) return unimpl("expected at least 2 dims");
    bool upper = def->name[3] == 'u';
    int64_t diag = tpu_attr_int(ku_attr(def, node, "diagonal"), 0);
    for (int64_t k = 0; k < n; ++k) {
      ref_index(out, k, idx);
      int64_t i = idx[out->ndim - 2], c = idx[out->ndim - 1];
      bool keep = upper ? c - i >= diag : c - i <= diag;
      if (keep)
        ref_copy(out, ref_offset(out, idx), self, ref_offset(self, idx));
      else
        view_set_f64(out, ref_offset(out, idx), 0.0);
    }
    return TPU_OK;
  }
  return unimpl("not a shape op");
}

static const tpu_op_def_t g_rows[] = {
    {.name = "arange", .inputs = "", .attrs = "start,end,step", .outputs = "out",
     .aten = "arange.start_out", .kernel = seq_kernel, .infer = seq_infer, .check = seq_check,
     .impl = NULL},
    {.name = "linspace", .inputs = "", .attrs = "start,end,steps", .outputs = "out",
     .aten = "linspace.out", .kernel = seq_kernel, .infer = seq_infer, .check = seq_check,
     .impl = NULL},
    {.name = "logspace", .inputs = "", .attrs = "start,end,steps,base", .outputs = "out",
     .aten = "logspace.out", .kernel = seq_kernel, .infer = seq_infer, .check = seq_check,
     .impl = NULL},
    {.name = "flip", .inputs = "self", .attrs = "dims", .outputs = "out", .aten = "flip flip.out",
     .kernel = flip_kernel, .infer = flip_infer, .check = flip_check, .impl = NULL,
     .flags = TPU_OP_COMPLEX_AS_BITS},
    {.name = "roll", .inputs = "self", .attrs = "shifts,dims", .outputs = "out",
     .aten = "roll roll.out", .kernel = roll_kernel, .infer = roll_infer, .check = roll_check,
     .impl = NULL},
    {.name = "triu", .inputs = "self", .attrs = "diagonal", .outputs = "out",
     .aten = "triu triu.out triu_", .kernel = tri_kernel, .infer = tri_infer, .check = tri_check,
     .impl = NULL},
    {.name = "tril", .inputs = "self", .attrs = "diagonal", .outputs = "out",
     .aten = "tril tril.out tril_", .kernel = tri_kernel, .infer = tri_infer, .check = tri_check,
     .impl = NULL},
    {.name = "eye", .inputs = "", .attrs = "n,m", .outputs = "out", .aten = "eye.out eye.m_out",
     .kernel = eye_kernel, .infer = eye_infer, .check = eye_check, .impl = NULL},
    {.name = "tril_indices", .inputs = "", .attrs = "row,col,offset,dtype", .outputs = "out",
     .aten = "tril_indices tril_indices.out", .kernel = tri_idx_kernel, .infer = tri_idx_infer,
     .check = tri_idx_check, .impl = NULL},
    {.name = "triu_indices", .inputs = "", .attrs = "row,col,offset,dtype", .outputs = "out",
     .aten = "triu_indices triu_indices.out", .kernel = tri_idx_kernel, .infer = tri_idx_infer,
     .check = tri_idx_check, .impl = NULL},
    {.name = "unfold_backward", .inputs = "grad_in", .attrs = "input_sizes,dim,size,step",
     .outputs = "out", .aten = "unfold_backward unfold_backward.out", .kernel = unfold_kernel,
     .infer = unfold_infer, .check = unfold_check, .impl = NULL},
};

const tpu_op_family_t tpu_family_shape = {"shape", g_rows,
                                          (int32_t)(sizeof(g_rows) / sizeof(g_rows[0]))};
