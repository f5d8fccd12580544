/* scan.c — the scan family: cumsum, cumprod (functional, out= and in-place),
 * _cummax_helper/_cummin_helper (what cummax/cummin call) and
 * _logcumsumexp. Backward passes are PyTorch's composites over native ops
 * (flip + cumsum, scatter_add, ...).
 *
 * Numerics are PyTorch CPU's: the input is first cast to the result dtype,
 * then accumulated element after element along dim in the CPU acc_type
 * (float64 for float32/float64, float32 for half types, int64 wrapping for
 * integers), each partial result rounded to the result dtype: results equal
 * CPU's bit for bit. logcumsumexp is CPU's _log_add_exp_helper.
 *
 * Layout: the dims other than dim form a row iterator (walk_t over input and
 * outputs, ordered by the input's strides). When its innermost dim is
 * contiguous in the input (a scan over an outer dim), LANES neighbouring
 * rows are scanned together, one step of all lanes per tpu_convert, so the
 * inner loop runs over contiguous memory; otherwise each row is scanned in
 * CHUNK-element pieces gathered along dim. Work items (rows or lane blocks)
 * are spread over tpu_parallel_for. Per-type code is generated once per
 * accumulator type and picked from a table. Complex cumsum, cumprod
 * (complex64/complex128, or a complex dtype=) and logcumsumexp take scan_cx
 * below.
 */
#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/elementwise/elementwise.h" /* tpu_ew_cx_make */
#include "kernels/reduce/scan.h"

#define LANES 512
#define CHUNK 1024

static inline int64_t wadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static inline int64_t wmul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

/* _log_add_exp_helper(x, y) with std::min/std::max's NaN behaviour. */
static inline double lae_f64(double x, double y) {
  double mn = isnan(y) ? y : (y < x ? y : x);
  double mx = isnan(y) ? y : (x < y ? y : x);
  if (mn != mx || isfinite(mn)) return log1p(exp(mn - mx)) + mx;
  return x;
}
static inline float lae_f32(float x, float y) {
  float mn = isnan(y) ? y : (y < x ? y : x);
  float mx = isnan(y) ? y : (x < y ? y : x);
  if (mn != mx || isfinite(mn)) return log1pf(expf(mn - mx)) + mx;
  return x;
}
static inline int64_t lae_i64(int64_t x, int64_t y) {
  (void)y;
  return x;
}

#define SC_ISNAN(x) ((x) != (x))

/* T steps of L lanes: x and y are [T][L]; acc/ai hold each lane's state;
 * i0 is the position along dim of the first step. */
#define SCAN_DEFINE(S, A, ADD, MUL, LAE)                                                     \
  static void init_##S(scan_kind_t kind, void* accp, int64_t L) {                          \
    A* acc = (A*)accp;                                                                     \
    A v = kind == SC_CUMPROD ? (A)1 : (A)0;                                                \
    if (kind == SC_LOGCUMSUMEXP) v = (A)-INFINITY;                                         \
    for (int64_t l = 0; l < L; ++l) acc[l] = v;                                            \
  }                                                                                        \
  static void steps_##S(scan_kind_t kind, void* accp, int64_t* ai, const void* xp, void* yp, \
                        int64_t* yi, int64_t L, int64_t T, int64_t i0) {                   \
    A* acc = (A*)accp;                                                                     \
    const A* x = (const A*)xp;                                                             \
    A* y = (A*)yp;                                                                         \
    switch (kind) {                                                                        \
      case SC_CUMSUM:                                                                      \
        if (L == 1) {                                                                      \
          A s = acc[0];                                                                    \
          for (int64_t t = 0; t < T; ++t) y[t] = s = ADD(s, x[t]);                         \
          acc[0] = s;                                                                      \
          break;                                                                           \
        }                                                                                  \
        for (int64_t t = 0; t < T; ++t)                                                    \
          for (int64_t l = 0; l < L; ++l) y[t * L + l] = acc[l] = ADD(acc[l], x[t * L + l]); \
        break;                                                                             \
      case SC_CUMPROD:                                                                     \
        for (int64_t t = 0; t < T; ++t)                                                    \
          for (int64_t l = 0; l < L; ++l) y[t * L + l] = acc[l] = MUL(acc[l], x[t * L + l]); \
        break;                                                                             \
      case SC_LOGCUMSUMEXP:                                                                \
        for (int64_t t = 0; t < T; ++t)                                                    \
          for (int64_t l = 0; l < L; ++l) y[t * L + l] = acc[l] = LAE(x[t * L + l], acc[l]); \
        break;                                                                             \
      case SC_CUMMAX:                                                                      \
      case SC_CUMMIN: {                                                                    \
        bool mx = kind == SC_CUMMAX;                                                       \
        for (int64_t t = 0; t < T; ++t) {                                                  \
          int64_t i = i0 + t;                                                              \
          for (int64_t l = 0; l < L; ++l) {                                                \
            A c = x[t * L + l], o = acc[l];                                                \
            if (i == 0 || SC_ISNAN(c) || (!SC_ISNAN(o) && (mx ? c >= o : c <= o))) {       \
              acc[l] = c;                                                                  \
              ai[l] = i;                                                                   \
            }                                                                              \
            y[t * L + l] = acc[l];                                                         \
            yi[t * L + l] = ai[l];                                                         \
          }                                                                                \
        }                                                                                  \
        break;                                                                             \
      }                                                                                    \
    }                                                                                      \
  }

#define PLUS(a, b) ((a) + (b))
#define TIMES(a, b) ((a) * (b))
SCAN_DEFINE(i64, int64_t, wadd, wmul, lae_i64)
SCAN_DEFINE(f32, float, PLUS, TIMES, lae_f32)
SCAN_DEFINE(f64, double, PLUS, TIMES, lae_f64)

typedef struct acc_ops {
  void (*init)(scan_kind_t kind, void* acc, int64_t L);
  void (*steps)(scan_kind_t kind, void* acc, int64_t* ai, const void* x, void* y, int64_t* yi,
                int64_t L, int64_t T, int64_t i0);
} acc_ops_t;

/* Indexed by the accumulator's compute type. */
static const acc_ops_t k_acc_ops[TPU_COMPUTE_COUNT] = {
    [TPU_COMPUTE_B8] = {init_i64, steps_i64},
    [TPU_COMPUTE_I64] = {init_i64, steps_i64},
    [TPU_COMPUTE_F32] = {init_f32, steps_f32},
    [TPU_COMPUTE_F64] = {init_f64, steps_f64},
};
/* CPU's acc_type (is_cuda=false) of each compute type of the result. */
static const tpu_dtype_t k_acc_dtype[TPU_COMPUTE_COUNT] = {
    [TPU_COMPUTE_B8] = TPU_DTYPE_I64, [TPU_COMPUTE_I64] = TPU_DTYPE_I64,
    [TPU_COMPUTE_F32] = TPU_DTYPE_F64, [TPU_COMPUTE_F64] = TPU_DTYPE_F64};

/* ---- parsing ------------------------------------------------------------------- */

static tpu_status_t unimpl(const char* what) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s", what);
}

tpu_status_t tpu_scan_parse(const tpu_op_def_t* def, const tpu_node_t* node, scan_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->kind = ((const scan_impl_t*)def->impl)->kind;
  a->in = ku_input(def, node, "self");
  if (!a->in) return unimpl("expected a tensor for 'self'");
  const tpu_view_t* in = a->in;
  int64_t dim = tpu_attr_int(ku_attr(def, node, "dim"), 0);
  TPU_RETURN_IF_ERROR(ku_wrap_dim(dim, in->ndim, &a->dim));
  a->n = in->ndim ? in->sizes[a->dim] : 1;
  tpu_dtype_t out = in->dtype;
  if (a->kind == SC_CUMSUM || a->kind == SC_CUMPROD) {
    const tpu_attr_t* dt = ku_attr(def, node, "dtype");
    if (dt && dt->kind == TPU_ATTR_DTYPE) out = dt->u.dtype;
    else if (!tpu_dtype_is_floating(in->dtype) && !tpu_dtype_is_complex(in->dtype))
      out = TPU_DTYPE_I64;
    /* complex to real (PyTorch raises or casts): the fallback */
    if (tpu_dtype_is_complex(in->dtype) && !tpu_dtype_is_complex(out))
      return unimpl("a complex scan into a real dtype");
  } else if (tpu_dtype_is_complex(in->dtype) && a->kind != SC_LOGCUMSUMEXP) {
    return unimpl("cummax, cummin of a complex tensor");
  }
  if (a->kind == SC_LOGCUMSUMEXP && !tpu_dtype_is_floating(in->dtype) &&
      !tpu_dtype_is_complex(in->dtype))
    return unimpl("logcumsumexp: no integer kernel on CPU");
  tpu_compute_type_t ct = tpu_dtype_compute(out);
  /* Half types accumulate in float32 (their compute type); float32 in float64. */
  a->acc = tpu_dtype_size(out) == 2 && tpu_dtype_is_floating(out) ? TPU_DTYPE_F32 : k_acc_dtype[ct];
  if (a->kind == SC_CUMMAX || a->kind == SC_CUMMIN) a->acc = tpu_compute_storage_dtype(ct);
  if (a->acc == TPU_DTYPE_BOOL) a->acc = TPU_DTYPE_I64;
  if (tpu_dtype_is_complex(out)) a->acc = TPU_DTYPE_C128; /* scan_cx */
  a->num_outputs = (a->kind == SC_CUMMAX || a->kind == SC_CUMMIN) ? 2 : 1;
  a->shape[0] = *in;
  a->shape[0].addr = 0;
  a->shape[0].dtype = out;
  tpu_view_set_contiguous(&a->shape[0]);
  a->shape[1] = a->shape[0];
  a->shape[1].dtype = TPU_DTYPE_I64;
  return TPU_OK;
}

static tpu_status_t scan_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_view_t* out_views) {
  scan_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_scan_parse(def, node, &a)));
  for (int i = 0; i < a.num_outputs; ++i) out_views[i] = a.shape[i];
  return TPU_OK;
}

static tpu_status_t scan_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  scan_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_scan_parse(def, node, &a)));
  return ku_check_dim_outputs(node, a.in, a.shape, a.num_outputs);
}

/* ---- the kernel ---------------------------------------------------------------- */

typedef struct scan_plan {
  const scan_args_t* a;
  const acc_ops_t* ops;
  const tpu_view_t* out[2];
  walk_t rows;       /* views: input, values, indices */
  int32_t outer;     /* row dims indexed per item (all of them, or all but the lanes dim) */
  int64_t lanes;     /* lanes dim size (1: row mode) */
  int64_t lstride[3];/* lanes dim strides */
  int64_t steps[3];  /* strides along dim */
  int64_t blocks;    /* lane blocks per outer row */
  tpu_dtype_t mid;   /* result dtype the input is cast to first */
  int failed;
} scan_plan_t;

/* Moves L elements of a step between a contiguous buffer and a view. */
static void load(const scan_plan_t* p, void* buf, void* tmp, const char* src, int64_t stride,
                 int64_t cnt) {
  const scan_args_t* a = p->a;
  if (p->mid == a->in->dtype) {
    tpu_convert(buf, a->acc, 1, src, a->in->dtype, stride, cnt);
  } else {
    tpu_convert(tmp, p->mid, 1, src, a->in->dtype, stride, cnt);
    tpu_convert(buf, a->acc, 1, tmp, p->mid, 1, cnt);
  }
}

static void scan_items(void* arg, int64_t begin, int64_t end) {
  scan_plan_t* p = (scan_plan_t*)arg;
  const scan_args_t* a = p->a;
  const tpu_view_t* in = a->in;
  bool lanes = p->lanes > 1;
  int64_t L = lanes ? LANES : 1, T = lanes ? 1 : CHUNK, cap = L * T;
  double *x = malloc(sizeof(double) * (size_t)cap), *y = malloc(sizeof(double) * (size_t)cap);
  double* tmp = malloc(sizeof(double) * (size_t)cap);
  int64_t *yi = malloc(sizeof(int64_t) * (size_t)cap), *ai = malloc(sizeof(int64_t) * (size_t)L);
  double* acc = malloc(sizeof(double) * (size_t)L);
  if (!x || !y || !tmp || !yi || !ai || !acc) {
    __atomic_store_n(&p->failed, 1, __ATOMIC_RELAXED);
    begin = end;
  }
  bool idx = a->num_outputs == 2;
  for (int64_t it = begin; it < end; ++it) {
    int64_t offs[3], r = lanes ? it / p->blocks : it, lb = lanes ? it % p->blocks : 0;
    walk_offsets(&p->rows, p->outer, r, offs);
    int64_t l0 = lb * LANES, nl = lanes ? p->lanes - l0 : 1;
    if (nl > LANES) nl = LANES;
    for (int v = 0; v < 3; ++v) offs[v] += l0 * p->lstride[v];
    p->ops->init(a->kind, acc, nl);
    for (int64_t i0 = 0; i0 < a->n; i0 += T) {
      int64_t t = lanes ? 1 : (a->n - i0 < T ? a->n - i0 : T);
      int64_t cnt = lanes ? nl : t;
      int64_t istep = lanes ? p->lstride[0] : p->steps[0];
      int64_t ostep = lanes ? p->lstride[1] : p->steps[1];
      int64_t xstep = lanes ? p->lstride[2] : p->steps[2];
      load(p, x, tmp, view_at(in, offs[0] + i0 * p->steps[0]), istep, cnt);
      p->ops->steps(a->kind, acc, ai, x, y, yi, lanes ? nl : 1, t, i0);
      tpu_convert(view_at(p->out[0], offs[1] + i0 * p->steps[1]), p->out[0]->dtype, ostep, y,
                  a->acc, 1, cnt);
      if (idx)
        tpu_convert(view_at(p->out[1], offs[2] + i0 * p->steps[2]), TPU_DTYPE_I64, xstep, yi,
                    TPU_DTYPE_I64, 1, cnt);
    }
  }
  free(x);
  free(y);
  free(tmp);
  free(yi);
  free(ai);
  free(acc);
}

/* ---- complex cumsum, cumprod and logcumsumexp ----------------------------------- */

static inline bool cx_isnan(double complex z) { return isnan(creal(z)) || isnan(cimag(z)); }

/* c10's complex log1p: log|1 + z| through log1p near 0 (underflow: x itself). */
static double complex c10_log1p(double complex z) {
  double x = creal(z), y = cimag(z), theta = atan2(y, x + 1.0);
  if (cabs(z) < 0.5) {
    double r = x * (2.0 + x) + y * y;
    return r == 0 ? tpu_ew_cx_make(x, theta) : tpu_ew_cx_make(0.5 * log1p(r), theta);
  }
  return tpu_ew_cx_make(log(hypot(x + 1.0, y)), theta);
}

/* CPU's complex _log_add_exp_helper(x, y): min and max by real part (a NaN in
 * either part wins, y's first), NaN infectious, equal infinite real parts
 * special-cased, else log1p(exp(min - max)) + max. */
static double complex lae_cx(double complex x, double complex y) {
  double complex mn = y, mx = x;
  if (cx_isnan(y)) mx = y;
  else if (cx_isnan(x)) mn = x;
  else if (creal(x) < creal(y)) mn = x, mx = y;
  if (cx_isnan(mn)) return tpu_ew_cx_make(NAN, NAN);
  if (!isfinite(creal(mn)) && creal(mn) == creal(mx))
    return creal(mn) < 0 ? mn : clog(cexp(mn) + cexp(mx));
  return c10_log1p(cexp(mn - mx)) + mx;
}

/* One row (the elements along dim) at a time, in double complex as the CPU's
 * acc_type (complex<double>), each partial result rounded to the output's
 * dtype as it is stored; the product is c10's schoolbook one, logcumsumexp
 * starts from (-inf, 0) and folds lae_cx(element, acc). Rows are the
 * index combinations of the other dims, spread over the compute pool. */
typedef struct scan_cx_job {
  const scan_args_t* a;
  const tpu_view_t* out;
} scan_cx_job_t;

static void scan_cx_rows(void* arg, int64_t begin, int64_t end) {
  const scan_cx_job_t* j = (const scan_cx_job_t*)arg;
  const scan_args_t* a = j->a;
  const tpu_view_t *in = a->in, *out = j->out;
  bool prod = a->kind == SC_CUMPROD, lse = a->kind == SC_LOGCUMSUMEXP;
  int64_t step_in = in->ndim ? in->strides[a->dim] : 0;
  int64_t step_out = out->ndim ? out->strides[a->dim] : 0;
  for (int64_t r = begin; r < end; ++r) {
    int64_t ib = 0, ob = 0, q = r;
    for (int32_t d = in->ndim - 1; d >= 0; --d) {
      if (d == a->dim) continue;
      ib += (q % in->sizes[d]) * in->strides[d];
      ob += (q % in->sizes[d]) * out->strides[d];
      q /= in->sizes[d];
    }
    double acc[2] = {prod ? 1.0 : lse ? -INFINITY : 0.0, 0.0}, z[2];
    for (int64_t i = 0; i < a->n; ++i) {
      tpu_convert(z, TPU_DTYPE_C128, 1, view_at(in, ib + i * step_in), in->dtype, 1, 1);
      if (lse) {
        double complex r = lae_cx(tpu_ew_cx_make(z[0], z[1]), tpu_ew_cx_make(acc[0], acc[1]));
        acc[0] = creal(r);
        acc[1] = cimag(r);
      } else if (prod) {
        double re = acc[0] * z[0] - acc[1] * z[1];
        acc[1] = acc[0] * z[1] + acc[1] * z[0];
        acc[0] = re;
      } else {
        acc[0] += z[0];
        acc[1] += z[1];
      }
      tpu_convert(view_at(out, ob + i * step_out), out->dtype, 1, acc, TPU_DTYPE_C128, 1, 1);
    }
  }
}

static tpu_status_t scan_cx_kernel(const scan_args_t* a, const tpu_view_t* out) {
  int64_t rows = a->n > 0 ? tpu_view_numel(a->in) / a->n : 0;
  if (rows == 0 || a->n == 0) return TPU_OK;
  scan_cx_job_t j = {a, out};
  tpu_parallel_for(rows, a->n >= 4096 ? 1 : 4096 / a->n, scan_cx_rows, &j);
  return TPU_OK;
}

static tpu_status_t scan_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  (void)ctx;
  scan_args_t a;
  TPU_RETURN_IF_ERROR(tpu_scan_parse(def, node, &a));
  tpu_status_t s = ku_check_dim_outputs(node, a.in, a.shape, a.num_outputs);
  if (s) {
    tpu_status_t e = tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s", tpu_status_message(s));
    tpu_status_free(s);
    return e;
  }
  if (a.acc == TPU_DTYPE_C128) return scan_cx_kernel(&a, &node->outputs[0]);
  const tpu_view_t* in = a.in;
  scan_plan_t p;
  memset(&p, 0, sizeof(p));
  p.a = &a;
  p.ops = &k_acc_ops[tpu_dtype_compute(a.acc)];
  p.out[0] = &node->outputs[0];
  p.out[1] = a.num_outputs == 2 ? &node->outputs[1] : &node->outputs[0];
  p.mid = p.out[0]->dtype;
  if (a.kind == SC_CUMMAX || a.kind == SC_CUMMIN) p.mid = in->dtype;
  int32_t nd = in->ndim;
  if (nd > 0)
    for (int v = 0; v < 3; ++v) p.steps[v] = (v == 0 ? in : p.out[v - 1])->strides[a.dim];
  walk_start(&p.rows, 3);
  for (int32_t d = 0; d < nd; ++d) {
    if (d == a.dim) continue;
    int64_t st[3] = {in->strides[d], p.out[0]->strides[d], p.out[1]->strides[d]};
    walk_add(&p.rows, in->sizes[d], st);
  }
  walk_order(&p.rows);
  int64_t rows = p.rows.numel;
  if (rows == 0 || a.n == 0) return TPU_OK;
  p.outer = p.rows.ndim;
  p.lanes = 1;
  int32_t last = p.rows.ndim - 1;
  if (last >= 0 && p.rows.strides[0][last] == 1 && p.steps[0] != 1 && a.n > 1) {
    p.outer = last;
    p.lanes = p.rows.sizes[last];
    for (int v = 0; v < 3; ++v) p.lstride[v] = p.rows.strides[v][last];
  }
  int64_t items;
  if (p.lanes > 1) {
    p.blocks = (p.lanes + LANES - 1) / LANES;
    items = walk_outer_numel(&p.rows, p.outer) * p.blocks;
  } else {
    items = rows;
  }
  int64_t work = (rows * a.n) / (items > 0 ? items : 1);
  int64_t grain = work >= 16384 ? 1 : 16384 / (work > 0 ? work : 1);
  tpu_parallel_for(items, grain, scan_items, &p);
  if (p.failed) TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for a scan");
  return TPU_OK;
}

/* ---- the op table ---------------------------------------------------------------- */

static const scan_impl_t k_cumsum = {SC_CUMSUM}, k_cumprod = {SC_CUMPROD},
                         k_cummax = {SC_CUMMAX}, k_cummin = {SC_CUMMIN},
                         k_lcse = {SC_LOGCUMSUMEXP};

static const tpu_op_def_t k_rows[] = {
    {.name = "cumsum", .inputs = "self", .attrs = "dim,dtype", .outputs = "out",
     .aten = "cumsum cumsum.out cumsum_", .kernel = scan_kernel, .infer = scan_infer,
     .check = scan_check, .impl = &k_cumsum, .flags = TPU_OP_COMPLEX},
    {.name = "cumprod", .inputs = "self", .attrs = "dim,dtype", .outputs = "out",
     .aten = "cumprod cumprod.out cumprod_", .kernel = scan_kernel, .infer = scan_infer,
     .check = scan_check, .impl = &k_cumprod, .flags = TPU_OP_COMPLEX},
    {.name = "cummax_helper", .inputs = "self", .attrs = "dim", .outputs = "values,indices",
     .aten = "_cummax_helper", .kernel = scan_kernel, .infer = scan_infer, .check = scan_check,
     .impl = &k_cummax},
    {.name = "cummin_helper", .inputs = "self", .attrs = "dim", .outputs = "values,indices",
     .aten = "_cummin_helper", .kernel = scan_kernel, .infer = scan_infer, .check = scan_check,
     .impl = &k_cummin},
    {.name = "logcumsumexp", .inputs = "self", .attrs = "dim", .outputs = "out",
     .aten = "_logcumsumexp _logcumsumexp.out", .kernel = scan_kernel, .infer = scan_infer,
     .check = scan_check, .impl = &k_lcse, .flags = TPU_OP_COMPLEX},
};

const tpu_op_family_t tpu_family_scan = {"scan", k_rows,
                                         (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
