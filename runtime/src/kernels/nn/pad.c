/* pad.c — the padding family, forward and backward:
 *   constant_pad_nd (any dtype, any rank, negative pads crop),
 *   reflection_pad{1,2,3}d (+_backward), replication_pad{1,2,3}d (+_backward).
 * (F.pad's circular mode is a composite of slices and copies in PyTorch: it
 * runs on the copy family; its backward on slice_backward and add.)
 *
 * constant_pad_nd: one converting view copy of the kept block (view_copy)
 * and fills of the border slabs around it (a walk with a stride-0 source),
 * both parallel; no per-element index work.
 * reflection/replication forward: output rows (all dims but the last) are
 * spread over tpu_parallel_for; each row maps its leading padded dims to an
 * input row through per-dim index tables and moves the last dim element by
 * element through its table (typed by element size: no conversion).
 * Backward: per plane (the non-padded leading dims), grad_output (gathered
 * into a compute-type buffer unless already contiguous in it) is added into
 * a zeroed compute-type grad_input plane in output order (rounding to the
 * storage type after each addition for half types, as the CPU kernels do),
 * in place when grad_input's plane is contiguous in the compute type, else
 * in a buffer scattered into grad_input.
 *
 * Index rules: reflect i = o - lo, -i if negative, 2 (I - 1) - i past the end;
 * replicate clamps o - lo into [0, I) (negative pads crop). Arguments PyTorch rejects (pads not
 * below the input size for reflect, empty inputs, bad pad lists, bool
 * inputs for reflect/replicate) are UNIMPLEMENTED: the CPU then raises.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/pool/pool.h"

typedef enum { PAD_CONSTANT = 0, PAD_REFLECT, PAD_REPLICATE } pad_mode_t;

typedef struct pad_impl {
  pad_mode_t mode;
  int32_t nsp; /* padded dims (reflect/replicate) */
  bool backward;
} pad_impl_t;

typedef struct pad_args {
  const pad_impl_t* impl;
  const tpu_view_t* x; /* self */
  const tpu_view_t* g; /* backward: grad_output */
  int32_t ndim, first; /* rank; first padded dim */
  int64_t lo[TPU_MAX_DIMS], hi[TPU_MAX_DIMS]; /* per dim of x (0 where not padded) */
  int64_t out[TPU_MAX_DIMS];                  /* padded sizes */
  const tpu_attr_t* value;
} pad_args_t;

static tpu_status_t unimpl(const char* what) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s", what);
}

static tpu_status_t pad_parse(const tpu_op_def_t* def, const tpu_node_t* node, pad_args_t* a) {
  memset(a, 0, sizeof(*a));
  const pad_impl_t* im = (const pad_impl_t*)def->impl;
  a->impl = im;
  a->x = ku_input(def, node, "self");
  if (!a->x) return unimpl("pad: expected a tensor 'self'");
  const tpu_view_t* x = a->x;
  a->ndim = x->ndim;
  const tpu_attr_t* pd = ku_attr(def, node, im->mode == PAD_CONSTANT ? "pad" : "padding");
  if (!pd || pd->kind != TPU_ATTR_INTS || pd->count % 2) return unimpl("pad: bad pad list");
  int32_t k = pd->count / 2;
  if (im->mode == PAD_CONSTANT) {
    if (k > x->ndim) return unimpl("pad: pad list longer than the input's rank");
    a->value = ku_attr(def, node, "value");
  } else {
    if (k != im->nsp || (x->ndim != k + 1 && x->ndim != k + 2))
      return unimpl("pad: unsupported input rank");
    if (x->dtype == TPU_DTYPE_BOOL) return unimpl("pad: bool input");
    if (im->backward && !tpu_dtype_is_floating(x->dtype))
      return unimpl("pad backward: integer input");
  }
  a->first = x->ndim - k;
  for (int32_t d = 0; d < x->ndim; ++d) {
    a->out[d] = x->sizes[d];
    if (d < a->first) {
      if (im->mode != PAD_CONSTANT && x->sizes[d] == 0 && !(d == 0 && a->first == 2))
        return unimpl("pad: empty input");
      continue;
    }
    int32_t p = 2 * (x->ndim - 1 - d);
    a->lo[d] = pd->u.ints[p];
    a->hi[d] = pd->u.ints[p + 1];
    if (__builtin_add_overflow(x->sizes[d], a->lo[d], &a->out[d]) ||
        __builtin_add_overflow(a->out[d], a->hi[d], &a->out[d]))
      return unimpl("pad: output size overflows");
    if (a->out[d] < 0) return unimpl("pad: negative output size");
    if (im->mode == PAD_CONSTANT) continue;
    if (x->sizes[d] <= 0 || a->out[d] <= 0) return unimpl("pad: empty input or output");
    if (im->mode == PAD_REFLECT && (a->lo[d] >= x->sizes[d] || a->hi[d] >= x->sizes[d]))
      return unimpl("pad: padding size should be less than the input dimension");
  }
  if (im->backward) {
    a->g = ku_input(def, node, "grad_output");
    if (!a->g || a->g->dtype != x->dtype || a->g->ndim != x->ndim)
      return unimpl("pad backward: grad_output");
    for (int32_t d = 0; d < x->ndim; ++d)
      if (a->g->sizes[d] != a->out[d]) return unimpl("pad backward: grad_output shape");
  }
  return TPU_OK;
}

static tpu_status_t pad_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  pad_args_t a;
  return pad_parse(def, node, &a);
}

static int64_t src_index(pad_mode_t m, int64_t o, int64_t lo, int64_t in) {
  int64_t i = o - lo;
  if (m == PAD_REFLECT) return i < 0 ? -i : i >= in ? 2 * (in - 1) - i : i;
  return i < 0 ? 0 : i >= in ? in - 1 : i;
}

/* ---- constant_pad_nd ------------------------------------------------------------------ */

typedef struct fill_job {
  walk_t walk;
  char* base;
  tpu_dtype_t dtype;
  int64_t esize;
  uint64_t value[2]; /* one element of dtype (complex128 takes both words) */
} fill_job_t;

static void fill_run(void* arg, const int64_t* offs, const int64_t* steps, int64_t n,
                     int64_t first) {
  const fill_job_t* f = (const fill_job_t*)arg;
  tpu_convert(f->base + offs[0] * f->esize, f->dtype, steps[0], f->value, f->dtype, 0, n);
}

static void fill_chunk(void* arg, int64_t begin, int64_t end) {
  fill_job_t* f = (fill_job_t*)arg;
  walk_range(&f->walk, begin, end, fill_run, f);
}

static void view_fill(const tpu_view_t* v, const uint64_t* value) {
  fill_job_t f;
  walk_init_tail(&f.walk, v, 0);
  f.base = (char*)tpu_view_ptr(v);
  f.dtype = v->dtype;
  f.esize = (int64_t)tpu_dtype_size(v->dtype);
  f.value[0] = value[0];
  f.value[1] = value[1];
  if (f.walk.numel > 0) tpu_parallel_for(f.walk.numel, WALK_GRAIN, fill_chunk, &f);
}

/* The sub-view of v with dim d narrowed to [start, start + len). */
static void narrow(tpu_view_t* v, int32_t d, int64_t start, int64_t len) {
  v->addr += (uint64_t)(start * v->strides[d] * (int64_t)tpu_dtype_size(v->dtype));
  v->sizes[d] = len;
}

static tpu_status_t constant_pad(const pad_args_t* a, const tpu_view_t* out) {
  const tpu_view_t* x = a->x;
  uint64_t value[2] = {0, 0}; /* complex: (value, 0) */
  const tpu_attr_t* va = a->value;
  if (va && va->kind == TPU_ATTR_FLOAT)
    tpu_convert(value, out->dtype, 1, &va->u.f, TPU_DTYPE_F64, 1, 1);
  else if (va && (va->kind == TPU_ATTR_INT || va->kind == TPU_ATTR_BOOL))
    tpu_convert(value, out->dtype, 1, &va->u.i, TPU_DTYPE_I64, 1, 1);
  /* The kept block: out [ostart, ostart + n) <- x [istart, istart + n) per dim. */
  tpu_view_t keep_out = *out, keep_in = *x, rest = *out;
  int64_t ostart[TPU_MAX_DIMS], n[TPU_MAX_DIMS];
  bool empty = false;
  for (int32_t d = 0; d < a->ndim; ++d) {
    int64_t is = a->lo[d] < 0 ? -a->lo[d] : 0, cut = a->hi[d] < 0 ? -a->hi[d] : 0;
    ostart[d] = a->lo[d] > 0 ? a->lo[d] : 0;
    n[d] = x->sizes[d] - is - cut;
    if (n[d] < 0) n[d] = 0;
    if (n[d] == 0) empty = true;
    narrow(&keep_out, d, ostart[d], n[d]);
    narrow(&keep_in, d, is, n[d]);
  }
  if (!empty && tpu_view_numel(&keep_out) > 0) view_copy(&keep_out, &keep_in);
  /* The border: for each dim d, the slabs before and after the kept range,
   * with dims before d narrowed to their kept ranges (no element twice). */
  for (int32_t d = 0; d < a->ndim; ++d) {
    if (empty) { /* nothing kept: the border is everything */
      if (tpu_view_numel(out) > 0) view_fill(out, value);
      break;
    }
    tpu_view_t before = rest, after = rest;
    narrow(&before, d, 0, ostart[d]);
    narrow(&after, d, ostart[d] + n[d], a->out[d] - ostart[d] - n[d]);
    if (tpu_view_numel(&before) > 0) view_fill(&before, value);
    if (tpu_view_numel(&after) > 0) view_fill(&after, value);
    narrow(&rest, d, ostart[d], n[d]);
  }
  return TPU_OK;
}

/* ---- reflection / replication ---------------------------------------------------------- */

/* Same-dtype element moves by element size (1, 2, 4, 8 bytes): the edge
 * elements of a row are single elements, too short for tpu_convert calls. */
#define PAD_MOVES(X) X(1, uint8_t) X(2, uint16_t) X(4, uint32_t) X(8, uint64_t)
typedef void (*pad_move_fn)(char* dst, int64_t ds, const char* src, int64_t ss,
                            const int64_t* map, int64_t n);
#define PAD_MOVE(N, U)                                                                  \
  static void move_##N(char* dst_, int64_t ds, const char* src_, int64_t ss,           \
                       const int64_t* map, int64_t n) {                                \
    U* dst = (U*)dst_;                                                                  \
    const U* src = (const U*)src_;                                                  \
    for (int64_t o = 0; o < n; ++o) dst[o * ds] = src[map[o] * ss];                     \
  }
PAD_MOVES(PAD_MOVE)
#undef PAD_MOVE

static pad_move_fn move_for(int64_t esize) {
#define PAD_MOVE_PICK(N, U) \
  if (esize == N) return move_##N;
  PAD_MOVES(PAD_MOVE_PICK)
#undef PAD_MOVE_PICK
  return NULL;
}

typedef struct pad_job {
  const pad_args_t* a;
  pad_mode_t mode;
  const tpu_view_t* out;
  const int64_t* map[TPU_MAX_DIMS]; /* padded dims: source index per output index */
  int64_t esize;
  pad_move_fn move; /* rows moved element by element through the last map */
  /* backward */
  int32_t lead;      /* plane dims */
  int64_t in[3], o[3];
  const int64_t* m3[3]; /* maps of the (front-padded to 3) spatial dims */
  walk_t planes;     /* views: grad_output, grad_input */
  walk_t gsp, isp;   /* spatial walks of grad_output / grad_input */
  tpu_dtype_t cdt;
  bool direct[2]; /* grad_output / grad_input planes contiguous in the compute type */
  float (*rnd)(float);
  atomic_int failed;
} pad_job_t;

static void pad_rows(void* arg, int64_t begin, int64_t end) {
  const pad_job_t* j = (const pad_job_t*)arg;
  const pad_args_t* a = j->a;
  const tpu_view_t *x = a->x, *out = j->out;
  const int32_t last = a->ndim - 1;
  const int64_t* m = j->map[last];
  const int64_t olast = a->out[last];
  for (int64_t r = begin; r < end; ++r) {
    int64_t rem = r, xo = 0, oo = 0;
    for (int32_t d = last - 1; d >= 0; --d) {
      int64_t i = rem % a->out[d];
      rem /= a->out[d];
      oo += i * out->strides[d];
      xo += (d >= a->first ? j->map[d][i] : i) * x->strides[d];
    }
    const char* src = view_at(x, xo);
    char* dst = view_at(out, oo);
    if (j->move) {
      j->move(dst, out->strides[last], src, x->strides[last], m, olast);
      continue;
    }
    for (int64_t o = 0; o < olast;) {
      int64_t s = m[o], len = 1;
      while (o + len < olast && m[o + len] == s + len) ++len;
      tpu_convert(dst + o * out->strides[last] * j->esize, out->dtype, out->strides[last],
                  src + s * x->strides[last] * j->esize, x->dtype, x->strides[last], len);
      o += len;
    }
  }
}

static float rnd_f16(float x) { return tpu_f16_to_f32(tpu_f32_to_f16(x)); }
static float rnd_bf16(float x) { return tpu_bf16_to_f32(tpu_f32_to_bf16(x)); }

#define PAD_TYPES(X) X(F32, float, 1) X(F64, double, 0)
typedef void (*pad_bwd_fn)(const pad_job_t* j, const void* g, void* gi);
#define PAD_DEFINE(CT, T, R)                                                            \
  static void bwd_##CT(const pad_job_t* j, const void* g_, void* gi_) {                \
    const T* g = (const T*)g_;                                                          \
    T* gi = (T*)gi_;                                                                    \
    const int64_t* const* mp = j->m3;                                                   \
    memset(gi, 0, sizeof(T) * (size_t)(j->in[0] * j->in[1] * j->in[2]));               \
    int64_t k = 0;                                                                      \
    for (int64_t od = 0; od < j->o[0]; ++od) {                                          \
      int64_t sd = mp[0][od];                                                           \
      for (int64_t oh = 0; oh < j->o[1]; ++oh) {                                        \
        int64_t sh = mp[1][oh];                                                         \
        T* row = gi + (sd * j->in[1] + sh) * j->in[2];                                  \
        for (int64_t ow = 0; ow < j->o[2]; ++ow, ++k) {                                 \
          T* e = row + mp[2][ow];                                                       \
          *e = *e + g[k];                                                               \
          if (R && j->rnd) *e = (T)j->rnd((float)*e);                                   \
        }                                                                               \
      }                                                                                 \
    }                                                                                   \
  }
PAD_TYPES(PAD_DEFINE)
#undef PAD_DEFINE
static const pad_bwd_fn k_pad_bwd[TPU_COMPUTE_COUNT] = {
#define PAD_ROW(CT, T, R) [TPU_COMPUTE_##CT] = bwd_##CT,
    PAD_TYPES(PAD_ROW)
#undef PAD_ROW
};

static void pad_planes(void* arg, int64_t begin, int64_t end) {
  pad_job_t* j = (pad_job_t*)arg;
  size_t cs = tpu_dtype_size(j->cdt);
  int64_t ni = j->in[0] * j->in[1] * j->in[2], no = j->o[0] * j->o[1] * j->o[2];
  char* gb = (char*)malloc(cs * (size_t)(no > 0 ? no : 1));
  char* ib = (char*)malloc(cs * (size_t)(ni > 0 ? ni : 1));
  if (!gb || !ib) {
    atomic_store(&j->failed, 1);
    free(gb), free(ib);
    return;
  }
  const tpu_view_t *g = j->a->g, *gi = j->out;
  int64_t offs[2];
  for (int64_t p = begin; p < end; ++p) {
    walk_offsets(&j->planes, j->planes.ndim, p, offs);
    const void* gp = gb;
    void* ip = ib;
    if (j->direct[0])
      gp = view_at(g, offs[0]);
    else
      walk_gather(gb, j->cdt, view_at(g, offs[0]), g->dtype, &j->gsp, 0, no);
    if (j->direct[1]) ip = view_at(gi, offs[1]);
    k_pad_bwd[tpu_dtype_compute(j->cdt)](j, gp, ip);
    if (!j->direct[1]) walk_scatter(view_at(gi, offs[1]), gi->dtype, &j->isp, 0, ib, j->cdt, ni);
  }
  free(gb);
  free(ib);
}

static tpu_status_t pad_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_exec_ctx_t* ctx) {
  pad_args_t a;
  TPU_RETURN_IF_ERROR(pad_parse(def, node, &a));
  const pad_impl_t* im = a.impl;
  if (node->num_outputs < 1 || !node->outputs)
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "expected an output");
  const tpu_view_t* out = &node->outputs[0];
  const tpu_view_t* want = im->backward ? a.x : NULL;
  bool ok = out->dtype == a.x->dtype && out->ndim == a.ndim;
  for (int32_t d = 0; ok && d < a.ndim; ++d)
    ok = out->sizes[d] == (want ? want->sizes[d] : a.out[d]);
  if (!ok) TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output has the wrong shape or dtype");
  if (im->mode == PAD_CONSTANT) return constant_pad(&a, out);

  pad_job_t j;
  memset(&j, 0, sizeof(j));
  j.a = &a;
  j.mode = im->mode;
  j.out = out;
  j.esize = (int64_t)tpu_dtype_size(out->dtype);
  j.move = move_for(j.esize);
  int64_t total = 0;
  for (int32_t d = a.first; d < a.ndim; ++d) total += a.out[d];
  int64_t* maps = (int64_t*)malloc(sizeof(int64_t) * (size_t)(total + 1));
  if (!maps) TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for padding tables");
  int64_t* m = maps;
  for (int32_t d = a.first; d < a.ndim; ++d) {
    for (int64_t o = 0; o < a.out[d]; ++o) m[o] = src_index(im->mode, o, a.lo[d], a.x->sizes[d]);
    j.map[d] = m;
    m += a.out[d];
  }
  const tpu_view_t* big = im->backward ? a.g : out;
  if (tpu_view_numel(big) == 0) {
    free(maps);
    return TPU_OK;
  }
  if (!im->backward) {
    int64_t rows = tpu_view_numel(out) / a.out[a.ndim - 1];
    int64_t grain = a.out[a.ndim - 1] >= 4096 ? 1 : 4096 / a.out[a.ndim - 1];
    tpu_parallel_for(rows, grain, pad_rows, &j);
    free(maps);
    return TPU_OK;
  }
  /* Backward: planes of up to 3 spatial dims (padded at the front to 3). */
  j.lead = a.first;
  int32_t k = a.ndim - a.first;
  static const int64_t zero_map[1] = {0};
  for (int32_t t = 0; t < 3; ++t) {
    int32_t d = a.first + t - (3 - k);
    j.in[t] = t < 3 - k ? 1 : a.x->sizes[d];
    j.o[t] = t < 3 - k ? 1 : a.out[d];
    j.m3[t] = t < 3 - k ? zero_map : j.map[d]; /* size 1 in and out: index 0 */
  }
  j.cdt = tpu_compute_storage_dtype(tpu_dtype_compute(a.x->dtype));
  j.rnd = a.x->dtype == TPU_DTYPE_F16 ? rnd_f16 : a.x->dtype == TPU_DTYPE_BF16 ? rnd_bf16 : NULL;
  walk_start(&j.planes, 2);
  for (int32_t d = 0; d < a.first; ++d) {
    int64_t st[2] = {a.g->strides[d], out->strides[d]};
    walk_push(&j.planes, a.x->sizes[d], st);
  }
  walk_init_tail(&j.gsp, a.g, a.first);
  walk_init_tail(&j.isp, out, a.first);
  const walk_t* sp[2] = {&j.gsp, &j.isp};
  const tpu_view_t* vs[2] = {a.g, out};
  for (int i = 0; i < 2; ++i)
    j.direct[i] = vs[i]->dtype == j.cdt &&
                  (sp[i]->ndim == 0 || (sp[i]->ndim == 1 && sp[i]->strides[0][0] == 1));
  atomic_init(&j.failed, 0);
  int64_t work = j.o[0] * j.o[1] * j.o[2];
  tpu_parallel_for(j.planes.numel, work >= 8192 ? 1 : 8192 / (work > 0 ? work : 1), pad_planes,
                   &j);
  free(maps);
  if (atomic_load(&j.failed))
    TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for padding planes");
  return TPU_OK;
}

/* ---- the reference ---------------------------------------------------------------------- */

/* Element by element: forward reads x at the mapped index (or the value);
 * backward adds grad_output into a double grad_input, in output order. */
tpu_status_t tpu_pad_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_exec_ctx_t* ctx) {
  pad_args_t a;
  TPU_RETURN_IF_ERROR(pad_parse(def, node, &a));
  const tpu_view_t* out = &node->outputs[0];
  const tpu_view_t* x = a.x;
  int64_t total = 1;
  for (int32_t d = 0; d < a.ndim; ++d) total *= a.out[d];
  double* acc = NULL;
  if (a.impl->backward) {
    acc = (double*)calloc((size_t)(tpu_view_numel(x) + 1), sizeof(double));
    if (!acc) TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "reference: no memory");
  }
  double value = 0.0;
  if (a.value) value = tpu_attr_float(a.value, 0.0);
  for (int64_t k = 0; k < total; ++k) {
    int64_t rem = k, oo = 0, xo = 0, flat = 0, mul = 1;
    bool inside = true;
    const tpu_view_t* ov = a.impl->backward ? a.g : out;
    for (int32_t d = a.ndim - 1; d >= 0; --d) {
      int64_t o = rem % a.out[d];
      rem /= a.out[d];
      oo += o * ov->strides[d];
      int64_t i = o - a.lo[d];
      if (a.impl->mode == PAD_REFLECT) {
        if (i < 0) i = -i;
        if (i >= x->sizes[d]) i = 2 * (x->sizes[d] - 1) - i;
      } else if (a.impl->mode == PAD_REPLICATE) {
        i = i < 0 ? 0 : i >= x->sizes[d] ? x->sizes[d] - 1 : i;
      } else if (i < 0 || i >= x->sizes[d]) {
        inside = false;
      }
      xo += i * x->strides[d];
      flat += i * mul;
      mul *= x->sizes[d];
    }
    if (a.impl->backward) {
      acc[flat] += view_get_f64(a.g, oo);
    } else if (!inside) {
      if (a.value && a.value->kind != TPU_ATTR_FLOAT)
        view_set_i64(out, oo, a.value->u.i);
      else
        view_set_f64(out, oo, value);
    } else if (tpu_dtype_is_floating(x->dtype)) {
      view_set_f64(out, oo, view_get_f64(x, xo));
    } else {
      view_set_i64(out, oo, view_get_i64(x, xo));
    }
  }
  if (acc) {
    int64_t n = tpu_view_numel(x);
    for (int64_t k = 0; k < n; ++k) {
      int64_t rem = k, off = 0;
      for (int32_t d = a.ndim - 1; d >= 0; --d) {
        off += (rem % x->sizes[d]) * out->strides[d];
        rem /= x->sizes[d];
      }
      view_set_f64(out, off, acc[k]);
    }
    free(acc);
  }
  return TPU_OK;
}

/* ---- the op table -------------------------------------------------------------------------- */

static const pad_impl_t k_const = {PAD_CONSTANT, 0, false};
static const pad_impl_t k_refl[3][2] = {{{PAD_REFLECT, 1, false}, {PAD_REFLECT, 1, true}},
                                        {{PAD_REFLECT, 2, false}, {PAD_REFLECT, 2, true}},
                                        {{PAD_REFLECT, 3, false}, {PAD_REFLECT, 3, true}}};
static const pad_impl_t k_repl[3][2] = {{{PAD_REPLICATE, 1, false}, {PAD_REPLICATE, 1, true}},
                                        {{PAD_REPLICATE, 2, false}, {PAD_REPLICATE, 2, true}},
                                        {{PAD_REPLICATE, 3, false}, {PAD_REPLICATE, 3, true}}};

#define PROW(name_, in, outs, aten_, impl_) \
  {.name = name_, .inputs = in, .attrs = "padding", .outputs = outs, .aten = aten_, \
   .kernel = pad_kernel, .infer = NULL, .check = pad_check, .impl = impl_}
#define PAD_PAIR(kind, n, tab)                                                                  \
  PROW(#kind "_pad" #n "d", "self", "out", #kind "_pad" #n "d.default " #kind "_pad" #n "d.out", \
       &tab[n - 1][0]),                                                                         \
      PROW(#kind "_pad" #n "d_backward", "grad_output,self", "grad_input",                       \
           #kind "_pad" #n "d_backward.default " #kind "_pad" #n "d_backward.grad_input",        \
           &tab[n - 1][1])

static const tpu_op_def_t k_rows[] = {
    {.name = "constant_pad_nd", .inputs = "self", .attrs = "pad,value", .outputs = "out",
     .aten = "constant_pad_nd.default constant_pad_nd.out", .kernel = pad_kernel, .infer = NULL,
     .check = pad_check, .impl = &k_const, .flags = TPU_OP_COMPLEX}, /* complex: storage moves and a (value, 0) border */
    PAD_PAIR(reflection, 1, k_refl),  PAD_PAIR(reflection, 2, k_refl),
    PAD_PAIR(reflection, 3, k_refl),  PAD_PAIR(replication, 1, k_repl),
    PAD_PAIR(replication, 2, k_repl), PAD_PAIR(replication, 3, k_repl),
};

const tpu_op_family_t tpu_family_pad = {"pad", k_rows,
                                        (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
