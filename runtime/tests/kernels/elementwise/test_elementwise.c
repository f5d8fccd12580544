/* test_elementwise.c — the elementwise and copy families against a plain
 * reference.
 *
 * The reference (k_cases) restates each op from PyTorch's semantics: its
 * dtype rule, the dtypes it supports, and its value as a formula over
 * doubles (floating common dtype) or int64 (bool/integer common dtype).
 * Inputs are read as PyTorch does (cast to the common dtype first) and the
 * result is cast to the output dtype; the kernel must agree within the
 * output's precision (exactly for integers and bools).
 *
 * ew_ops_same_dtype runs every case over every dtype in several layouts:
 * contiguous, broadcast, transposed/sliced inputs, Python-number operands,
 * in-place (output == input 0, also strided), out= with a strided float64
 * output, 0-dim, empty and multi-tile parallel shapes. ew_ops_mixed_dtypes
 * runs the cases with two or more inputs over all dtype pairs. The other
 * tests pin dtype rules, casts of 0-dim tensors and Python numbers, errors
 * (ZeroDivisionError, bad casts, overlap) and CPU fallbacks against values
 * checked with PyTorch, and the converting copy and fill against tpu_convert
 * (which test_dtype.c checks against the cast rules).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_test_util.h"
#include "kernels/elementwise/elementwise.h"

/* ---- reference cases ----------------------------------------------------------- */

enum { R_PROMOTE, R_FLOAT, R_BOOL, R_FIRST };
enum { SB = 1, SI = 2, SF = 4 }; /* supported common dtypes: bool, integer, floating */

typedef double (*ref_f_fn)(const double* x, const double* p);
typedef int64_t (*ref_i_fn)(const int64_t* x, const int64_t* p);

typedef struct ew_case {
  const char* op;
  int rule;
  uint8_t nin;
  uint8_t support;
  uint8_t promote;   /* inputs in the result type (0: all) */
  uint8_t bool_in;   /* bool condition/mask inputs */
  uint8_t scalar_ok; /* inputs the schema lets be Python numbers */
  uint8_t nonzero;   /* divisors: test data avoids 0 */
  uint8_t none;      /* inputs passed as None */
  bool opmath;       /* Python numbers keep float precision with half tensors */
  bool value_0dim;   /* the last input is a 0-dim tensor */
  bool same_dtype;   /* every tensor must share one dtype */
  uint8_t float_in;  /* inputs that must be floating tensors */
  bool no_bool;      /* any bool operand (tensor or number) is refused */
  int nattrs;
  tpu_attr_t attrs[4];
  ref_f_fn f;
  ref_i_fn i;
  ref_i_fn bool_i; /* for a bool common dtype, when it differs from i */
} ew_case_t;

#define AI(v) {.kind = TPU_ATTR_INT, .u.i = (v)}
#define AF(v) {.kind = TPU_ATTR_FLOAT, .u.f = (v)}
#define AB(v) {.kind = TPU_ATTR_BOOL, .u.i = (v)}
#define AS(s) {.kind = TPU_ATTR_STR, .u.str = s}
#define AN {.kind = TPU_ATTR_NONE}

#define EW_PI 3.14159265358979323846

static uint64_t wrap(int64_t v) { return (uint64_t)v; }
static double rsig(double v) { return 1.0 / (1.0 + exp(-v)); }
static double rmax(double a, double b) { return isnan(a) || isnan(b) ? NAN : (a > b ? a : b); }
static double rmin(double a, double b) { return isnan(a) || isnan(b) ? NAN : (a < b ? a : b); }
static double rsign(double v) { return v > 0 ? 1 : (v < 0 ? -1 : 0); }
static int64_t rpowi(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : (a == -1 ? (b % 2 ? -1 : 1) : 0);
  uint64_t r = 1;
  for (int64_t k = 0; k < b; ++k) r *= (uint64_t)a;
  return (int64_t)r;
}
static double rfloordiv(double a, double b) { return floor(a / b); }
static double rpymod(double a, double b) { return a - b * floor(a / b); }
static double rgelu_tanh(double v) {
  return 0.5 * v * (1 + tanh(sqrt(2 / EW_PI) * (v + 0.044715 * v * v * v)));
}
static double rgelu_tanh_grad(double v) { /* d/dv of 0.5 v (1 + tanh(k (v + a v^3))) */
  double k = sqrt(2 / EW_PI), t = tanh(k * (v + 0.044715 * v * v * v));
  return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v);
}

#define RF(name, expr) \
  static double rf_##name(const double* x, const double* p) { (void)p; return (expr); }
#define RI(name, expr) \
  static int64_t ri_##name(const int64_t* x, const int64_t* p) { (void)p; return (expr); }
#define RFI(name, expr) RF(name, expr) RI(name, expr) /* the same formula for both */

RF(add, x[0] + p[0] * x[1])
RI(add, (int64_t)(wrap(x[0]) + wrap(p[0]) * wrap(x[1])))
RF(sub, x[0] - p[0] * x[1])
RI(sub, (int64_t)(wrap(x[0]) - wrap(p[0]) * wrap(x[1])))
RF(rsub, x[1] - p[0] * x[0])
RI(rsub, (int64_t)(wrap(x[1]) - wrap(p[0]) * wrap(x[0])))
RF(mul, x[0] * x[1])
RI(mul, (int64_t)(wrap(x[0]) * wrap(x[1])))
RF(div, x[0] / x[1])
RF(div_trunc, trunc(x[0] / x[1]))
RI(div_trunc, x[0] / x[1])
RF(div_floor, rfloordiv(x[0], x[1]))
RI(div_floor, (int64_t)floor((double)x[0] / (double)x[1]))
RF(remainder, rpymod(x[0], x[1]))
RI(remainder, (int64_t)rpymod((double)x[0], (double)x[1]))
RF(fmod, fmod(x[0], x[1]))
RI(fmod, (int64_t)fmod((double)x[0], (double)x[1]))
RF(pow, pow(x[0], x[1]))
RI(pow, rpowi(x[0], x[1]))
RF(maximum, rmax(x[0], x[1]))
RI(maximum, x[0] > x[1] ? x[0] : x[1])
RF(minimum, rmin(x[0], x[1]))
RI(minimum, x[0] < x[1] ? x[0] : x[1])
RF(clamp, isnan(x[1]) || isnan(x[2]) ? NAN : rmin(rmax(x[0], x[1]), x[2]))
RI(clamp, x[0] < x[1] ? (x[1] > x[2] ? x[2] : x[1]) : (x[0] > x[2] ? x[2] : x[0]))
RF(clamp_hi, rmin(x[0], x[2]))
RI(clamp_hi, x[0] < x[2] ? x[0] : x[2])
RF(neg, -x[0])
RI(neg, (int64_t)(0 - wrap(x[0])))
RF(abs, fabs(x[0]))
RI(abs, x[0] < 0 ? -x[0] : x[0])
RF(sign, rsign(x[0]))
RI(sign, (int64_t)rsign((double)x[0]))
RF(exp, exp(x[0]))
RF(exp2, exp2(x[0]))
RF(expm1, expm1(x[0]))
RF(log, log(x[0]))
RF(log2, log2(x[0]))
RF(log10, log10(x[0]))
RF(log1p, log1p(x[0]))
RF(sqrt, sqrt(x[0]))
RF(rsqrt, 1 / sqrt(x[0]))
RF(reciprocal, 1 / x[0])
RF(sin, sin(x[0]))
RF(cos, cos(x[0]))
RF(tan, tan(x[0]))
RF(tanh, tanh(x[0]))
RF(sigmoid, rsig(x[0]))
RF(erf, erf(x[0]))
RF(floor, floor(x[0]))
RF(ceil, ceil(x[0]))
RF(round, nearbyint(x[0]))
RF(round_dec2, nearbyint(x[0] * 100) / 100)
RF(round_decm1, nearbyint(x[0] / 10) * 10)
RF(trunc, trunc(x[0]))
RI(ident, x[0])
RFI(relu, x[0] < 0 ? 0 : x[0])
RF(gelu, 0.5 * x[0] * (1 + erf(x[0] / sqrt(2))))
RF(gelu_tanh, rgelu_tanh(x[0]))
RF(silu, x[0] * rsig(x[0]))
RF(hardtanh, rmin(rmax(x[0], p[0]), p[1]))
RI(hardtanh, x[0] < p[0] ? p[0] : (x[0] > p[1] ? p[1] : x[0]))
RF(leaky_relu, x[0] > 0 ? x[0] : x[0] * p[0])
RF(elu, x[0] > 0 ? x[0] * p[1] : p[0] * p[1] * (exp(x[0] * p[2]) - 1))
RFI(threshold, x[0] <= p[0] ? p[1] : x[0])
RFI(eq, x[0] == x[1])
RFI(ne, x[0] != x[1])
RFI(lt, x[0] < x[1])
RFI(le, x[0] <= x[1])
RFI(gt, x[0] > x[1])
RFI(ge, x[0] >= x[1])
RFI(logical_not, x[0] == 0)
RFI(logical_and, x[0] != 0 && x[1] != 0)
RFI(logical_or, x[0] != 0 || x[1] != 0)
RFI(logical_xor, (x[0] != 0) != (x[1] != 0))
RI(bitwise_and, x[0] & x[1])
RI(bitwise_or, x[0] | x[1])
RI(bitwise_xor, x[0] ^ x[1])
RI(bitwise_not, ~x[0])
RFI(where, x[0] != 0 ? x[1] : x[2])
RFI(masked_fill, x[1] != 0 ? x[2] : x[0])
RF(lerp, x[0] + x[2] * (x[1] - x[0]))
RF(addcmul, x[0] + p[0] * x[1] * x[2])
RI(addcmul, (int64_t)(wrap(x[0]) + wrap(p[0]) * wrap(x[1]) * wrap(x[2])))
RF(addcdiv, x[0] + p[0] * x[1] / x[2])
RF(gelu_backward, x[0] * (0.5 * (1 + erf(x[1] / sqrt(2))) +
                          x[1] * exp(-0.5 * x[1] * x[1]) / sqrt(2 * EW_PI)))
RF(gelu_backward_tanh, x[0] * rgelu_tanh_grad(x[1]))
RF(silu_backward, x[0] * rsig(x[1]) * (1 + x[1] * (1 - rsig(x[1]))))
RF(sigmoid_backward, x[0] * (1 - x[1]) * x[1])
RF(tanh_backward, x[0] * (1 - x[1] * x[1]))
RFI(threshold_backward, x[1] <= p[0] ? 0 : x[0])
RF(hardtanh_backward, x[1] <= p[0] || x[1] >= p[1] ? 0 : x[0])
RF(leaky_relu_backward, x[1] > 0 ? x[0] : x[0] * p[0])
RF(elu_backward, x[1] > 0 ? x[0] * p[1] : x[0] * p[2] * p[0] * p[1] * exp(x[1] * p[2]))

#define UN(op, rule, sup, F, I) {op, rule, 1, sup, .f = F, .i = I}
#define BIN(op, rule, sup, F, I) {op, rule, 2, sup, .scalar_ok = 2, .f = F, .i = I}
#define PRED_CASE(op) BIN(#op, R_BOOL, SB | SI | SF, rf_##op, ri_##op)
#define FLOAT_UNARY(op) UN(#op, R_FLOAT, SB | SI | SF, rf_##op, NULL)

static const ew_case_t k_cases[] = {
    {"add", R_PROMOTE, 2, SB | SI | SF, .scalar_ok = 2, .opmath = true, .nattrs = 1,
     .attrs = {AI(2)}, .f = rf_add, .i = ri_add},
    {"sub", R_PROMOTE, 2, SI | SF, .scalar_ok = 2, .opmath = true, .no_bool = true, .nattrs = 1,
     .attrs = {AI(3)}, .f = rf_sub, .i = ri_sub},
    {"rsub", R_PROMOTE, 2, SI | SF, .scalar_ok = 2, .opmath = true, .no_bool = true, .nattrs = 1,
     .attrs = {AI(3)}, .f = rf_rsub, .i = ri_rsub},
    {"mul", R_PROMOTE, 2, SB | SI | SF, .scalar_ok = 2, .opmath = true, .f = rf_mul, .i = ri_mul},
    {"div", R_FLOAT, 2, SB | SI | SF, .scalar_ok = 2, .nonzero = 2, .opmath = true, .nattrs = 1,
     .attrs = {AN}, .f = rf_div},
    {"div", R_PROMOTE, 2, SI | SF, .scalar_ok = 2, .nonzero = 2, .opmath = true, .nattrs = 1,
     .attrs = {AS("trunc")}, .f = rf_div_trunc, .i = ri_div_trunc},
    {"div", R_PROMOTE, 2, SI | SF, .scalar_ok = 2, .nonzero = 2, .opmath = true, .nattrs = 1,
     .attrs = {AS("floor")}, .f = rf_div_floor, .i = ri_div_floor},
    {"remainder", R_PROMOTE, 2, SI | SF, .scalar_ok = 3, .nonzero = 2, .f = rf_remainder,
     .i = ri_remainder},
    {"fmod", R_PROMOTE, 2, SI | SF, .scalar_ok = 2, .nonzero = 2, .f = rf_fmod, .i = ri_fmod},
    {"pow", R_PROMOTE, 2, SI | SF, .scalar_ok = 3, .f = rf_pow, .i = ri_pow},
    BIN("maximum", R_PROMOTE, SB | SI | SF, rf_maximum, ri_maximum),
    BIN("minimum", R_PROMOTE, SB | SI | SF, rf_minimum, ri_minimum),
    {"clamp", R_PROMOTE, 3, SI | SF, .scalar_ok = 6, .f = rf_clamp, .i = ri_clamp},
    {"clamp_min", R_PROMOTE, 2, SB | SI | SF, .scalar_ok = 2, .f = rf_maximum, .i = ri_maximum},
    {"clamp_max", R_PROMOTE, 2, SB | SI | SF, .scalar_ok = 2, .f = rf_minimum, .i = ri_minimum},
    UN("neg", R_PROMOTE, SI | SF, rf_neg, ri_neg),
    UN("abs", R_PROMOTE, SI | SF, rf_abs, ri_abs),
    UN("sign", R_PROMOTE, SB | SI | SF, rf_sign, ri_sign),
    FLOAT_UNARY(exp), FLOAT_UNARY(exp2), FLOAT_UNARY(expm1), FLOAT_UNARY(log),
    FLOAT_UNARY(log2), FLOAT_UNARY(log10), FLOAT_UNARY(log1p), FLOAT_UNARY(sqrt),
    FLOAT_UNARY(rsqrt), FLOAT_UNARY(reciprocal), FLOAT_UNARY(sin), FLOAT_UNARY(cos),
    FLOAT_UNARY(tan), FLOAT_UNARY(tanh), FLOAT_UNARY(sigmoid), FLOAT_UNARY(erf),
    UN("floor", R_PROMOTE, SI | SF, rf_floor, ri_ident),
    UN("ceil", R_PROMOTE, SI | SF, rf_ceil, ri_ident),
    UN("trunc", R_PROMOTE, SI | SF, rf_trunc, ri_ident),
    {"round", R_PROMOTE, 1, SI | SF, .nattrs = 1, .attrs = {AI(0)}, .f = rf_round, .i = ri_ident},
    {"round", R_PROMOTE, 1, SF, .nattrs = 1, .attrs = {AI(2)}, .f = rf_round_dec2},
    {"round", R_PROMOTE, 1, SF, .nattrs = 1, .attrs = {AI(-1)}, .f = rf_round_decm1},
    UN("relu", R_PROMOTE, SI | SF, rf_relu, ri_relu),
    {"gelu", R_PROMOTE, 1, SF, .nattrs = 1, .attrs = {AS("none")}, .f = rf_gelu},
    {"gelu", R_PROMOTE, 1, SF, .nattrs = 1, .attrs = {AS("tanh")}, .f = rf_gelu_tanh},
    UN("silu", R_PROMOTE, SF, rf_silu, NULL),
    {"hardtanh", R_PROMOTE, 1, SI | SF, .nattrs = 2, .attrs = {AF(-1.5), AF(2.5)},
     .f = rf_hardtanh, .i = ri_hardtanh},
    {"leaky_relu", R_PROMOTE, 1, SF, .nattrs = 1, .attrs = {AF(0.25)}, .f = rf_leaky_relu},
    {"elu", R_PROMOTE, 1, SF, .nattrs = 3, .attrs = {AF(1.5), AF(2.0), AF(0.5)}, .f = rf_elu},
    {"threshold", R_PROMOTE, 1, SI | SF, .nattrs = 2, .attrs = {AI(1), AI(7)}, .f = rf_threshold,
     .i = ri_threshold},
    PRED_CASE(eq), PRED_CASE(ne), PRED_CASE(lt), PRED_CASE(le), PRED_CASE(gt), PRED_CASE(ge),
    UN("logical_not", R_BOOL, SB | SI | SF, rf_logical_not, ri_logical_not),
    {"logical_and", R_BOOL, 2, SB | SI | SF, .f = rf_logical_and, .i = ri_logical_and},
    {"logical_or", R_BOOL, 2, SB | SI | SF, .f = rf_logical_or, .i = ri_logical_or},
    {"logical_xor", R_BOOL, 2, SB | SI | SF, .f = rf_logical_xor, .i = ri_logical_xor},
    BIN("bitwise_and", R_PROMOTE, SB | SI, NULL, ri_bitwise_and),
    BIN("bitwise_or", R_PROMOTE, SB | SI, NULL, ri_bitwise_or),
    BIN("bitwise_xor", R_PROMOTE, SB | SI, NULL, ri_bitwise_xor),
    {"bitwise_not", R_PROMOTE, 1, SB | SI, .i = ri_bitwise_not, .bool_i = ri_logical_not},
    {"where", R_PROMOTE, 3, SB | SI | SF, .promote = 6, .bool_in = 1, .scalar_ok = 6,
     .f = rf_where, .i = ri_where},
    {"masked_fill", R_FIRST, 3, SB | SI | SF, .bool_in = 2, .scalar_ok = 4, .value_0dim = true,
     .f = rf_masked_fill, .i = ri_masked_fill},
    {"lerp", R_PROMOTE, 3, SF, .scalar_ok = 4, .opmath = true, .same_dtype = true,
     .f = rf_lerp},
    {"addcmul", R_PROMOTE, 3, SI | SF, .nattrs = 1, .attrs = {AI(2)}, .f = rf_addcmul,
     .i = ri_addcmul},
    {"addcdiv", R_PROMOTE, 3, SF, .nonzero = 4, .float_in = 6, .nattrs = 1, .attrs = {AF(0.5)},
     .f = rf_addcdiv},
    {"gelu_backward", R_PROMOTE, 2, SF, .nattrs = 1, .attrs = {AN}, .f = rf_gelu_backward},
    {"gelu_backward", R_PROMOTE, 2, SF, .nattrs = 1, .attrs = {AS("tanh")},
     .f = rf_gelu_backward_tanh},
    BIN("silu_backward", R_PROMOTE, SF, rf_silu_backward, NULL),
    BIN("sigmoid_backward", R_PROMOTE, SF, rf_sigmoid_backward, NULL),
    BIN("tanh_backward", R_PROMOTE, SF, rf_tanh_backward, NULL),
    {"threshold_backward", R_PROMOTE, 2, SI | SF, .nattrs = 1, .attrs = {AI(1)},
     .f = rf_threshold_backward, .i = ri_threshold_backward},
    {"hardtanh_backward", R_PROMOTE, 2, SF, .nattrs = 2, .attrs = {AF(-1), AF(2)},
     .f = rf_hardtanh_backward},
    {"leaky_relu_backward", R_PROMOTE, 2, SF, .nattrs = 2, .attrs = {AF(0.5), AB(0)},
     .f = rf_leaky_relu_backward},
    {"elu_backward", R_PROMOTE, 2, SF, .nattrs = 4, .attrs = {AF(1.5), AF(2), AF(0.5), AB(0)},
     .f = rf_elu_backward},
};
enum { NUM_CASES = sizeof(k_cases) / sizeof(k_cases[0]) };

/* clamp with a bound of None, as extra cases. */
static const ew_case_t k_clamp_none[] = {
    {"clamp", R_PROMOTE, 3, SI | SF, .none = 4, .f = rf_maximum, .i = ri_maximum},
    {"clamp", R_PROMOTE, 3, SI | SF, .none = 2, .f = rf_clamp_hi, .i = ri_clamp_hi},
};

/* ---- host tensors and nodes ------------------------------------------------------ */

static int64_t numel_of(int32_t ndim, const int64_t* sizes) {
  int64_t n = 1;
  for (int32_t d = 0; d < ndim; ++d) n *= sizes[d];
  return n;
}

/* Element address of `v` at the output index `idx` (right-aligned broadcast). */
static char* elem_at(const tpu_view_t* v, int32_t out_ndim, const int64_t* idx) {
  int64_t off = 0;
  for (int32_t d = 0; d < v->ndim; ++d) {
    int32_t o = out_ndim - v->ndim + d;
    if (v->sizes[d] > 1) off += idx[o] * v->strides[d];
  }
  return (char*)tpu_view_ptr(v) + off * (int64_t)tpu_dtype_size(v->dtype);
}

static void unravel(int64_t k, int32_t ndim, const int64_t* sizes, int64_t* idx) {
  for (int32_t d = ndim - 1; d >= 0; --d) {
    idx[d] = k % sizes[d];
    k /= sizes[d];
  }
}

static int64_t rnd(int64_t lo, int64_t hi) { return tt_rand_int(&tt_rng_state, lo, hi); }

/* Test values: quarters in [-4, 4] for floats, [-10, 10] (uint8 [0, 20]) for
 * integers, 0/1 for bool; `nonzero` skips 0. */
static void fill_values(tt_t* t, bool nonzero) {
  int64_t idx[TPU_MAX_DIMS], n = numel_of(t->view.ndim, t->view.sizes);
  for (int64_t k = 0; k < n; ++k) {
    double v;
    do {
      if (tpu_dtype_is_floating(t->view.dtype))
        v = (double)rnd(-16, 16) / 4;
      else if (t->view.dtype == TPU_DTYPE_BOOL)
        v = (double)rnd(0, 1);
      else
        v = (double)(t->view.dtype == TPU_DTYPE_U8 ? rnd(0, 20) : rnd(-10, 10));
    } while (nonzero && v == 0);
    unravel(k, t->view.ndim, t->view.sizes, idx);
    tpu_convert(elem_at(&t->view, t->view.ndim, idx), t->view.dtype, 1, &v, TPU_DTYPE_F64, 1, 1);
  }
}

static const tpu_op_def_t* find_def(const char* name) {
  const tpu_op_family_t* fams[2] = {&tpu_family_elementwise, &tpu_family_copy};
  for (int f = 0; f < 2; ++f)
    for (int32_t i = 0; i < fams[f]->count; ++i)
      if (strcmp(fams[f]->ops[i].name, name) == 0) return &fams[f]->ops[i];
  return NULL;
}

static tpu_value_t vint(int64_t i) {
  return (tpu_value_t){.kind = TPU_VALUE_SCALAR, .u.scalar = {.dtype = TPU_DTYPE_I64, .v.i = i}};
}
static tpu_value_t vfloat(double f) {
  return (tpu_value_t){.kind = TPU_VALUE_SCALAR, .u.scalar = {.dtype = TPU_DTYPE_F64, .v.f = f}};
}

/* Runs a node through check, infer (when out is NULL: a fresh contiguous
 * output is made and returned in *made) and the kernel. */
static tpu_status_t run_node(const char* op, tpu_value_t* in, int32_t nin, const tpu_attr_t* attrs,
                             int32_t nattrs, tpu_view_t* out, tt_t* made) {
  const tpu_op_def_t* def = find_def(op);
  if (!def) return tpu_status_make(TPU_CODE_INTERNAL, "no op %s", op);
  tpu_view_t o;
  tpu_node_t node = {.op = tpu_op_lookup(op), .num_inputs = nin, .num_outputs = 1,
                     .num_attrs = nattrs, .inputs = in, .outputs = &o};
  for (int32_t j = 0; j < nattrs; ++j) node.attrs[j] = attrs[j];
  if (def->check) TPU_RETURN_IF_ERROR(def->check(def, &node));
  if (out) {
    o = *out;
  } else {
    TPU_RETURN_IF_ERROR(def->infer(def, &node, &o));
    *made = tt_make(o.dtype, o.ndim, o.sizes, TT_CONTIG);
    o = made->view;
  }
  tpu_exec_ctx_t ctx = {0};
  return def->kernel(def, &node, &ctx);
}

/* ---- the reference ---------------------------------------------------------------- */

static bool is_half(tpu_dtype_t d) { return d == TPU_DTYPE_F16 || d == TPU_DTYPE_BF16; }

/* The case's common dtype for these inputs (NONE inputs skipped). */
static tpu_dtype_t case_common(const ew_case_t* c, const tpu_value_t* in) {
  if (c->rule == R_FIRST) return in[0].u.view.dtype;
  tpu_value_t vals[4];
  int32_t n = 0;
  for (int k = 0; k < c->nin; ++k)
    if ((!c->promote || (c->promote >> k & 1)) && in[k].kind != TPU_VALUE_NONE) vals[n++] = in[k];
  tpu_dtype_t rt = tpu_result_type(vals, n);
  return (c->rule == R_FLOAT && !tpu_dtype_is_floating(rt)) ? TPU_DTYPE_F32 : rt;
}

static bool case_supports(const ew_case_t* c, tpu_dtype_t common) {
  int cls = tpu_dtype_is_floating(common) ? SF : (common == TPU_DTYPE_BOOL ? SB : SI);
  return (c->support & cls) != 0;
}

/* Reads input k at idx as PyTorch does: cast to the common dtype (bool for
 * masks; float32 for opmath Python numbers with half tensors). */
static void ref_input(const ew_case_t* c, const tpu_value_t* v, int k, tpu_dtype_t common,
                      int32_t ndim, const int64_t* idx, double* f, int64_t* i) {
  tpu_dtype_t as = (c->bool_in >> k & 1) ? TPU_DTYPE_BOOL : common;
  uint64_t tmp = 0;
  if (v->kind == TPU_VALUE_VIEW) {
    tpu_convert(&tmp, as, 1, elem_at(&v->u.view, ndim, idx), v->u.view.dtype, 1, 1);
  } else if (v->kind == TPU_VALUE_SCALAR) {
    if (c->opmath && is_half(common)) as = TPU_DTYPE_F32;
    tpu_dtype_t held = tpu_dtype_is_floating(v->u.scalar.dtype) ? TPU_DTYPE_F64 : TPU_DTYPE_I64;
    tpu_convert(&tmp, as, 1, &v->u.scalar.v, held, 1, 1);
  } else {
    *f = NAN;
    *i = 0;
    return;
  }
  tpu_convert(f, TPU_DTYPE_F64, 1, &tmp, as, 1, 1);
  tpu_convert(i, TPU_DTYPE_I64, 1, &tmp, as, 1, 1);
}

static double tol_of(tpu_dtype_t d) {
  return d == TPU_DTYPE_F16 ? 2e-3 : d == TPU_DTYPE_BF16 ? 1.6e-2 : d == TPU_DTYPE_F32 ? 1e-5 : 1e-11;
}

/* Compares out (shape ndim/sizes) against the reference. */
static void check_values(const ew_case_t* c, const tpu_value_t* in, const tpu_view_t* out,
                         const char* variant) {
  tpu_dtype_t common = case_common(c, in);
  bool fdom = tpu_dtype_is_floating(common);
  double p[4] = {0};
  int64_t pi[4] = {0};
  for (int j = 0; j < c->nattrs; ++j) {
    p[j] = tpu_attr_float(&c->attrs[j], 0);
    pi[j] = tpu_attr_int(&c->attrs[j], 0);
  }
  double tol = fmax(tol_of(common), tol_of(out->dtype));
  int64_t idx[TPU_MAX_DIMS], n = tpu_view_numel(out);
  int failures = 0;
  for (int64_t k = 0; k < n && failures < 3; ++k) {
    unravel(k, out->ndim, out->sizes, idx);
    double xf[4];
    int64_t xi[4];
    for (int j = 0; j < c->nin; ++j) ref_input(c, &in[j], j, common, out->ndim, idx, &xf[j], &xi[j]);
    double ef = 0, got = 0;
    int64_t ei = 0;
    uint64_t tmp = 0;
    tpu_dtype_t rdt = c->rule == R_BOOL ? TPU_DTYPE_BOOL : common;
    if (fdom) {
      ef = c->f(xf, p);
      tpu_convert(&tmp, rdt, 1, &ef, TPU_DTYPE_F64, 1, 1);
    } else {
      ei = (common == TPU_DTYPE_BOOL && c->bool_i ? c->bool_i : c->i)(xi, pi);
      tpu_convert(&tmp, rdt, 1, &ei, TPU_DTYPE_I64, 1, 1);
    }
    double want;
    tpu_convert(&want, TPU_DTYPE_F64, 1, &tmp, rdt, 1, 1);
    uint64_t wide = 0;
    tpu_convert(&wide, out->dtype, 1, &want, TPU_DTYPE_F64, 1, 1);
    tpu_convert(&want, TPU_DTYPE_F64, 1, &wide, out->dtype, 1, 1);
    tpu_convert(&got, TPU_DTYPE_F64, 1, elem_at(out, out->ndim, idx), out->dtype, 1, 1);
    bool ok = (isnan(want) && isnan(got)) || want == got ||
              (tpu_dtype_is_floating(out->dtype) && fdom && !isinf(want) &&
               fabs(got - want) <= tol * (1 + fabs(want)));
    if (!ok) {
      failures++;
      tpu_test_fail(__FILE__, __LINE__, "%s[%s] %s common=%s out=%s elem %lld: got %.9g want %.9g "
                    "(x0=%g x1=%g)", c->op, c->nattrs && c->attrs[0].kind == TPU_ATTR_STR ?
                    c->attrs[0].u.str : "", variant, tpu_dtype_name(common),
                    tpu_dtype_name(out->dtype), (long long)k, got, want, xf[0],
                    c->nin > 1 ? xf[1] : 0.0);
    }
  }
}

/* ---- one case, one layout ---------------------------------------------------------- */

typedef struct variant {
  const char* name;
  int32_t ndim[4];
  int64_t sizes[4][3];
  int layout[4]; /* per operand, an index into k_layouts */
  int scalar; /* 0: none, 1: int 3 in the last scalar_ok input, 2: float 1.5 */
  int inplace;
  bool out_f64_transposed;
} variant_t;

static const tt_layout_t k_layouts[3] = {TT_CONTIG, TT_REVERSED, TT_GAPS};

static const variant_t k_variants[] = {
    {"contig", {3, 3, 3, 3}, {{3, 5, 7}, {3, 5, 7}, {3, 5, 7}}, {0, 0, 0}, 0, 0, false},
    {"broadcast", {2, 3, 1, 3}, {{5, 1}, {3, 1, 7}, {7}}, {0, 0, 0}, 0, 0, false},
    {"strided", {3, 3, 3, 3}, {{3, 5, 7}, {3, 5, 7}, {3, 5, 7}}, {1, 2, 1}, 0, 0, false},
    {"scalar_int", {3, 3, 3, 3}, {{3, 5, 7}, {3, 5, 7}, {3, 5, 7}}, {2, 0, 0}, 1, 0, false},
    {"scalar_float", {3, 3, 3, 3}, {{3, 5, 7}, {3, 5, 7}, {3, 5, 7}}, {0, 1, 0}, 2, 0, false},
    {"inplace", {3, 2, 3, 3}, {{3, 5, 7}, {5, 7}, {3, 5, 7}}, {0, 0, 0}, 0, 1, false},
    {"inplace_strided", {3, 3, 1, 3}, {{3, 5, 7}, {3, 5, 7}, {7}}, {1, 0, 2}, 0, 1, false},
    {"out_f64_strided", {3, 2, 3, 3}, {{3, 5, 7}, {1, 7}, {3, 5, 7}}, {0, 0, 1}, 0, 0, true},
    {"zero_dim", {0, 0, 0, 0}, {{0}, {0}, {0}}, {0, 0, 0}, 0, 0, false},
    {"empty", {2, 2, 2, 2}, {{0, 5}, {0, 5}, {1, 5}}, {0, 0, 0}, 0, 0, false},
    {"tiles_rows", {2, 1, 2, 2}, {{37, 1100}, {1100}, {37, 1100}}, {0, 0, 0}, 0, 0, false},
    {"tiles_long", {2, 2, 2, 2}, {{2, 25000}, {2, 25000}, {2, 1}}, {0, 1, 0}, 0, 0, false},
};
enum { NUM_VARIANTS = sizeof(k_variants) / sizeof(k_variants[0]) };

/* Runs case c with the given input dtypes in layout v: the kernel must
 * match the reference, or answer UNIMPLEMENTED where PyTorch has no kernel. */
static void run_case(const ew_case_t* c, const tpu_dtype_t* dtypes, const variant_t* v) {
  tt_t tensors[4];
  memset(tensors, 0, sizeof(tensors));
  tpu_value_t in[4];
  int last_scalar = -1;
  for (int k = 0; k < c->nin; ++k)
    if (c->scalar_ok >> k & 1) last_scalar = k;
  for (int k = 0; k < c->nin; ++k) {
    if (c->none >> k & 1) {
      in[k].kind = TPU_VALUE_NONE;
      continue;
    }
    if (v->scalar && k == last_scalar) {
      in[k] = v->scalar == 1 ? vint(3) : vfloat(1.5);
      continue;
    }
    tpu_dtype_t dt = (c->bool_in >> k & 1) ? TPU_DTYPE_BOOL : dtypes[k];
    bool zero_dim = c->value_0dim && k == c->nin - 1;
    tensors[k] = tt_make(dt, zero_dim ? 0 : v->ndim[k], v->sizes[k], k_layouts[v->layout[k]]);
    fill_values(&tensors[k], c->nonzero >> k & 1);
    in[k] = tt_value(&tensors[k].view);
  }
  tpu_dtype_t common = case_common(c, in);
  bool supported = case_supports(c, common);
  for (int k = 0; supported && c->same_dtype && k < c->nin; ++k)
    supported = in[k].kind != TPU_VALUE_VIEW || in[k].u.view.dtype == common;
  for (int k = 0; k < c->nin; ++k) {
    if ((c->float_in >> k & 1) && !tpu_dtype_is_floating(in[k].u.view.dtype)) supported = false;
    tpu_dtype_t dk = in[k].kind == TPU_VALUE_VIEW ? in[k].u.view.dtype : in[k].u.scalar.dtype;
    if (c->no_bool && in[k].kind != TPU_VALUE_NONE && dk == TPU_DTYPE_BOOL) supported = false;
  }
  tpu_dtype_t result = c->rule == R_BOOL ? TPU_DTYPE_BOOL : common;
  int64_t bsizes[TPU_MAX_DIMS];
  int32_t bndim = 0;
  tpu_status_t st = tpu_broadcast_shapes(in, c->nin, bsizes, &bndim);
  CHECK(st == TPU_OK);
  tpu_status_free(st);
  tt_t out = {0}, made = {0};
  tpu_view_t* outp = NULL;
  if (v->inplace) {
    if (in[0].kind != TPU_VALUE_VIEW || in[0].u.view.dtype != result ||
        in[0].u.view.ndim != bndim)
      goto done;
    outp = &in[0].u.view;
  } else if (v->out_f64_transposed) {
    out = tt_make(TPU_DTYPE_F64, bndim, bsizes, TT_REVERSED);
    outp = &out.view;
  }
  /* The reference reads a copy of input 0, which an in-place run overwrites. */
  tpu_value_t ref_in[4];
  memcpy(ref_in, in, sizeof(ref_in));
  tt_t saved = {0};
  if (v->inplace) {
    saved = tt_make(in[0].u.view.dtype, in[0].u.view.ndim, in[0].u.view.sizes, TT_CONTIG);
    int64_t idx[TPU_MAX_DIMS], n = tpu_view_numel(&saved.view);
    for (int64_t k = 0; k < n; ++k) {
      unravel(k, saved.view.ndim, saved.view.sizes, idx);
      tpu_convert(elem_at(&saved.view, saved.view.ndim, idx), saved.view.dtype, 1,
                  elem_at(&in[0].u.view, saved.view.ndim, idx), saved.view.dtype, 1, 1);
    }
    ref_in[0] = tt_value(&saved.view);
  }
  st = run_node(c->op, in, c->nin, c->attrs, c->nattrs, outp, &made);
  if (!supported) {
    if (tpu_status_code(st) != TPU_CODE_UNIMPLEMENTED)
      tpu_test_fail(__FILE__, __LINE__, "%s %s common %s: expected UNIMPLEMENTED, got %s", c->op,
                    v->name, tpu_dtype_name(common), st ? tpu_status_message(st) : "OK");
  } else if (st != TPU_OK) {
    tpu_test_fail(__FILE__, __LINE__, "%s %s common %s: %s", c->op, v->name,
                  tpu_dtype_name(common), tpu_status_message(st));
  } else {
    const tpu_view_t* o = outp ? outp : &made.view;
    if (!outp && (o->dtype != result || o->ndim != bndim))
      tpu_test_fail(__FILE__, __LINE__, "%s %s: infer gave %s/%d dims, want %s/%d", c->op,
                    v->name, tpu_dtype_name(o->dtype), o->ndim, tpu_dtype_name(result), bndim);
    else
      check_values(c, ref_in, o, v->name);
  }
  free(saved.mem);
  tpu_status_free(st);
done:
  free(made.mem);
  free(out.mem);
  for (int k = 0; k < c->nin; ++k) free(tensors[k].mem);
}

static const tpu_dtype_t k_all[] = {TPU_DTYPE_BOOL, TPU_DTYPE_U8,  TPU_DTYPE_I8,
                                    TPU_DTYPE_I16,  TPU_DTYPE_I32, TPU_DTYPE_I64,
                                    TPU_DTYPE_F16,  TPU_DTYPE_BF16, TPU_DTYPE_F32,
                                    TPU_DTYPE_F64};
enum { NUM_DTYPES = sizeof(k_all) / sizeof(k_all[0]) };

/* ---- tests ------------------------------------------------------------------------------ */

static bool is_tiled_variant(const variant_t* v) { return v->sizes[0][1] >= 1000; }

TEST(ew_ops_same_dtype) {
  for (int ci = 0; ci < NUM_CASES; ++ci)
    for (int di = 0; di < NUM_DTYPES; ++di)
      for (int vi = 0; vi < NUM_VARIANTS; ++vi) {
        tpu_dtype_t d = k_all[di];
        if (is_tiled_variant(&k_variants[vi]) && d != TPU_DTYPE_F32 && d != TPU_DTYPE_F16 &&
            d != TPU_DTYPE_I32)
          continue;
        tpu_dtype_t dtypes[4] = {d, d, d, d};
        run_case(&k_cases[ci], dtypes, &k_variants[vi]);
      }
  for (int ci = 0; ci < 2; ++ci)
    for (int di = 0; di < NUM_DTYPES; ++di)
      for (int vi = 0; vi < 3; ++vi) {
        tpu_dtype_t dtypes[4] = {k_all[di], k_all[di], k_all[di], k_all[di]};
        run_case(&k_clamp_none[ci], dtypes, &k_variants[vi]);
      }
}

TEST(ew_ops_mixed_dtypes) {
  for (int ci = 0; ci < NUM_CASES; ++ci)
    for (int a = 0; a < NUM_DTYPES; ++a)
      for (int b = 0; b < NUM_DTYPES; ++b) {
        const ew_case_t* c = &k_cases[ci];
        if (c->nin == 1) continue;
        /* Input 0 and the first non-mask input after it get dtypes a and b. */
        tpu_dtype_t dtypes[4] = {k_all[a], k_all[b], k_all[b], k_all[a]};
        if (c->bool_in == 1) dtypes[1] = k_all[a];
        run_case(c, dtypes, &k_variants[1]);
      }
}

/* A 1-d tensor of doubles converted to `dtype`. */
static tt_t vec(tpu_dtype_t dtype, int64_t n, const double* values) {
  tt_t t = tt_make(dtype, 1, &n, TT_CONTIG);
  tpu_convert(t.mem, dtype, 1, values, TPU_DTYPE_F64, 1, n);
  return t;
}

static bool near(double got, double want) {
  return got == want || fabs(got - want) <= 1e-6 * (1 + fabs(want));
}

/* Runs a functional node; returns its status and (if OK) the output as doubles. */
static tpu_status_t eval(const char* op, tpu_value_t* in, int32_t nin, const tpu_attr_t* attrs,
                         int32_t nattrs, tpu_dtype_t* dtype, double* values) {
  tt_t made = {0};
  tpu_status_t st = run_node(op, in, nin, attrs, nattrs, NULL, &made);
  if (st == TPU_OK) {
    *dtype = made.view.dtype;
    tpu_convert(values, TPU_DTYPE_F64, 1, made.mem, made.view.dtype, 1, tpu_view_numel(&made.view));
  }
  free(made.mem);
  return st;
}

#define EXPECT2(op, in, nattrs, attrs, want_dtype, w0, w1)                        \
  do {                                                                           \
    tpu_dtype_t dt_ = TPU_DTYPE_INVALID;                                         \
    double got_[8] = {0};                                                        \
    CHECK_OK(eval(op, in, (int32_t)(sizeof(in) / sizeof(in[0])), attrs, nattrs, &dt_, got_)); \
    CHECK(dt_ == (want_dtype));                                                  \
    CHECK(near(got_[0], w0) && near(got_[1], w1));                               \
  } while (0)

/* Results checked with PyTorch 2.x on CPU. */
TEST(ew_semantics_match_pytorch) {
  const double a12[2] = {1, 2}, a32[2] = {3, 2}, a3m3[2] = {3, -3}, tf[2] = {1, 0};
  tt_t i64 = vec(TPU_DTYPE_I64, 2, a12), u8 = vec(TPU_DTYPE_U8, 2, a12);
  tt_t i8 = vec(TPU_DTYPE_I8, 2, a12), i8b = vec(TPU_DTYPE_I8, 2, a32);
  tt_t f16 = vec(TPU_DTYPE_F16, 2, a32), mask = vec(TPU_DTYPE_BOOL, 2, tf);
  tt_t i3 = vec(TPU_DTYPE_I64, 2, a3m3);
  const double small[2] = {1e-3, 1e-3};
  tt_t f16s = vec(TPU_DTYPE_F16, 2, small);
  const tpu_attr_t none[1] = {AN}, floor_mode[1] = {AS("floor")}, alpha1[1] = {AI(1)};
  {
    tpu_value_t in[2] = {tt_value(&i64.view), vfloat(2.5)};
    EXPECT2("add", in, 1, alpha1, TPU_DTYPE_F32, 3.5, 4.5);
  }
  {
    tpu_value_t in[2] = {tt_value(&i8.view), vint(300)};
    EXPECT2("add", in, 1, alpha1, TPU_DTYPE_I8, 45, 46);
  }
  {
    tpu_value_t in[2] = {tt_value(&u8.view), tt_value(&i8.view)};
    EXPECT2("mul", in, 0, NULL, TPU_DTYPE_I16, 1, 4);
  }
  {
    tpu_value_t in[2] = {tt_value(&f16s.view), vfloat(1e5)}; /* opmath: not 1e5 as half (inf) */
    EXPECT2("mul", in, 0, NULL, TPU_DTYPE_F16, 100.0625, 100.0625);
  }
  {
    tpu_value_t in[2] = {tt_value(&f16.view), vfloat(1e5)};
    EXPECT2("lt", in, 0, NULL, TPU_DTYPE_BOOL, 1, 1);
  }
  {
    tpu_value_t in[2] = {tt_value(&u8.view), vint(-1)}; /* -1 wraps to 255 as uint8 */
    EXPECT2("lt", in, 0, NULL, TPU_DTYPE_BOOL, 1, 1);
  }
  {
    tpu_value_t in[2] = {tt_value(&u8.view), vint(256)}; /* 256 wraps to 0 */
    EXPECT2("lt", in, 0, NULL, TPU_DTYPE_BOOL, 0, 0);
  }
  {
    tpu_value_t in[3] = {tt_value(&mask.view), tt_value(&i8.view), tt_value(&f16.view)};
    EXPECT2("where", in, 0, NULL, TPU_DTYPE_F16, 1, 2);
  }
  {
    tpu_value_t in[3] = {tt_value(&mask.view), vint(1), vfloat(2.5)};
    EXPECT2("where", in, 0, NULL, TPU_DTYPE_F32, 1, 2.5);
  }
  {
    tpu_value_t in[3] = {tt_value(&mask.view), vint(1), vint(2)};
    EXPECT2("where", in, 0, NULL, TPU_DTYPE_I64, 1, 2);
  }
  {
    tpu_value_t in[2] = {tt_value(&i64.view), tt_value(&i3.view)};
    EXPECT2("div", in, 1, none, TPU_DTYPE_F32, 1.0 / 3, -2.0 / 3);
    EXPECT2("div", in, 1, floor_mode, TPU_DTYPE_I64, 0, -1);
  }
  {
    tpu_value_t in[3] = {tt_value(&i64.view), tt_value(&mask.view), vfloat(2.7)};
    EXPECT2("masked_fill", in, 0, NULL, TPU_DTYPE_I64, 2, 2);
  }
  {
    tpu_value_t in[3] = {tt_value(&i64.view), vfloat(1.5), {.kind = TPU_VALUE_NONE}};
    EXPECT2("clamp", in, 0, NULL, TPU_DTYPE_F32, 1.5, 2);
  }
  {
    tpu_value_t in[2] = {vint(2), tt_value(&i64.view)};
    EXPECT2("pow", in, 0, NULL, TPU_DTYPE_I64, 2, 4);
  }
  {
    tpu_value_t in[2] = {vint(1000), tt_value(&i8.view)}; /* 1000 -> int8 -24 */
    EXPECT2("pow", in, 0, NULL, TPU_DTYPE_I8, -24, 64);
  }
  {
    tpu_value_t in[2] = {tt_value(&i8b.view), vint(5)};
    EXPECT2("pow", in, 0, NULL, TPU_DTYPE_I8, -13, 32);
  }
  {
    tpu_value_t in[2] = {vint(5), tt_value(&i3.view)};
    EXPECT2("remainder", in, 0, NULL, TPU_DTYPE_I64, 2, -1);
  }
  {
    const double m128[2] = {-128, 3};
    tt_t t = vec(TPU_DTYPE_I8, 2, m128);
    tpu_value_t in[1] = {tt_value(&t.view)};
    EXPECT2("abs", in, 0, NULL, TPU_DTYPE_I8, -128, 3);
    free(t.mem);
  }
  {
    const double x[2] = {-7.5, 7.5};
    tt_t t = vec(TPU_DTYPE_F32, 2, x);
    tpu_value_t in[2] = {tt_value(&t.view), vint(2)};
    EXPECT2("div", in, 1, floor_mode, TPU_DTYPE_F32, -4, 3);
    tpu_value_t z[2] = {tt_value(&t.view), vint(0)};
    EXPECT2("div", z, 1, floor_mode, TPU_DTYPE_F32, -INFINITY, INFINITY);
    free(t.mem);
  }
  {
    /* 0-dim tensors are cast to the common dtype first: 300 -> int8 44;
     * int32 2049 -> float16 2048. */
    const double v3[3] = {1, 44, 100}, big[1] = {2049};
    tt_t a = vec(TPU_DTYPE_I8, 3, v3), b = vec(TPU_DTYPE_I32, 1, big);
    tt_t s300 = tt_make(TPU_DTYPE_I64, 0, NULL, TT_CONTIG);
    tt_t one = tt_make(TPU_DTYPE_F16, 0, NULL, TT_CONTIG);
    *(int64_t*)s300.mem = 300;
    *(uint16_t*)one.mem = 0x3c00; /* 1.0 */
    tpu_value_t lt[2] = {tt_value(&a.view), tt_value(&s300.view)};
    tpu_value_t add[2] = {tt_value(&b.view), tt_value(&one.view)};
    EXPECT2("eq", lt, 0, NULL, TPU_DTYPE_BOOL, 0, 1);
    EXPECT2("add", add, 1, alpha1, TPU_DTYPE_F16, 2048, 0); /* one element */
    free(a.mem), free(b.mem), free(s300.mem), free(one.mem);
  }
  free(i64.mem), free(u8.mem), free(i8.mem), free(i8b.mem), free(f16.mem), free(mask.mem);
  free(i3.mem), free(f16s.mem);
}

static void expect_code(const char* op, tpu_value_t* in, int32_t nin, const tpu_attr_t* attrs,
                        int32_t nattrs, tpu_view_t* out, tpu_status_code_t code, int line) {
  tt_t made = {0};
  tpu_status_t st = run_node(op, in, nin, attrs, nattrs, out, &made);
  if (tpu_status_code(st) != code)
    tpu_test_fail(__FILE__, line, "%s: expected %s, got %s (%s)", op, tpu_status_code_name(code),
                  tpu_status_code_name(tpu_status_code(st)), st ? tpu_status_message(st) : "");
  tpu_status_free(st);
  free(made.mem);
}
#define EXPECT_CODE(op, in, attrs, nattrs, out, code) \
  expect_code(op, in, (int32_t)(sizeof(in) / sizeof(in[0])), attrs, nattrs, out, code, __LINE__)

TEST(ew_errors_and_fallbacks) {
  const double v[3] = {1, 0, 2};
  int64_t n3 = 3, n4 = 4;
  tt_t i32 = vec(TPU_DTYPE_I32, 3, v), f32 = vec(TPU_DTYPE_F32, 3, v), b = vec(TPU_DTYPE_BOOL, 3, v);
  tt_t u8 = vec(TPU_DTYPE_U8, 3, v), f64 = vec(TPU_DTYPE_F64, 3, v), i8 = vec(TPU_DTYPE_I8, 3, v);
  tt_t f4 = tt_make(TPU_DTYPE_F32, 1, &n4, TT_CONTIG);
  const tpu_attr_t floor_mode[1] = {AS("floor")}, bad_mode[1] = {AS("round")};
  const tpu_attr_t alpha_half[1] = {AF(0.5)}, alpha_true[1] = {AB(1)}, foo[1] = {AS("foo")};
  const tpu_attr_t dec1[1] = {AI(1)}, leaky_bad[2] = {AF(-0.1), AB(1)};
  const tpu_status_code_t U = TPU_CODE_UNIMPLEMENTED, I = TPU_CODE_INVALID_ARGUMENT;
  {
    tpu_value_t in[2] = {tt_value(&f32.view), tt_value(&i32.view)}; /* i32 holds a 0 */
    tpu_value_t ii[2] = {tt_value(&i32.view), tt_value(&i32.view)};
    EXPECT_CODE("div", in, floor_mode, 1, NULL, TPU_CODE_OK);
    EXPECT_CODE("div", ii, floor_mode, 1, NULL, I);
    EXPECT_CODE("remainder", ii, NULL, 0, NULL, I);
    EXPECT_CODE("fmod", ii, NULL, 0, NULL, I);
    EXPECT_CODE("div", ii, bad_mode, 1, NULL, I);
    EXPECT_CODE("add", ii, alpha_half, 1, NULL, U);
    EXPECT_CODE("add", ii, alpha_true, 1, NULL, U);
    EXPECT_CODE("bitwise_and", in, NULL, 0, NULL, U);
    EXPECT_CODE("add", in, NULL, 0, &i32.view, I); /* float result into an int out */
    EXPECT_CODE("add", ii, NULL, 0, &b.view, I);   /* int result into a bool out */
    EXPECT_CODE("add", in, NULL, 0, &f4.view, I);  /* shapes [3] and out [4] */
    tt_t made = {0};
    tpu_status_t st = run_node("div", ii, 2, floor_mode, 1, NULL, &made);
    CHECK(st && strcmp(tpu_status_message(st), "ZeroDivisionError") == 0);
    tpu_status_free(st);
    free(made.mem);
  }
  {
    tpu_value_t bb[2] = {tt_value(&b.view), tt_value(&b.view)}, bo[1] = {tt_value(&b.view)};
    tpu_value_t io[1] = {tt_value(&i32.view)};
    EXPECT_CODE("sub", bb, NULL, 0, NULL, U);
    EXPECT_CODE("neg", bo, NULL, 0, NULL, U);
    EXPECT_CODE("abs", bo, NULL, 0, NULL, U);
    EXPECT_CODE("relu", bo, NULL, 0, NULL, U);
    EXPECT_CODE("gelu", io, NULL, 0, NULL, U);
    EXPECT_CODE("round", io, dec1, 1, NULL, U);
    tpu_value_t fo[1] = {tt_value(&f32.view)};
    EXPECT_CODE("gelu", fo, foo, 1, NULL, I);
  }
  {
    tpu_value_t m_u8[3] = {tt_value(&f32.view), tt_value(&u8.view), vfloat(1)};
    tpu_value_t c_u8[3] = {tt_value(&u8.view), tt_value(&f32.view), tt_value(&f32.view)};
    tpu_value_t lerp_mixed[3] = {tt_value(&f32.view), tt_value(&f64.view), vfloat(0.5)};
    tpu_value_t addcdiv_int[3] = {tt_value(&f32.view), tt_value(&i32.view), tt_value(&f32.view)};
    tpu_value_t pow_neg[2] = {tt_value(&i32.view), vint(-1)};
    tpu_value_t mf_over[3] = {tt_value(&i8.view), tt_value(&b.view), vint(300)};
    tpu_value_t mf_1d[3] = {tt_value(&f32.view), tt_value(&b.view), tt_value(&f32.view)};
    tpu_value_t clamp_over[3] = {tt_value(&i8.view), vint(300), {.kind = TPU_VALUE_NONE}};
    tpu_value_t clamp_none[3] = {tt_value(&i8.view), tt_value(NULL), tt_value(NULL)};
    tpu_value_t fill_over[2] = {tt_value(&i8.view), vint(300)};
    tpu_value_t fill_1d[2] = {tt_value(&i8.view), tt_value(&f32.view)};
    tpu_value_t leaky[2] = {tt_value(&f32.view), tt_value(&f32.view)};
    EXPECT_CODE("masked_fill", m_u8, NULL, 0, NULL, U);
    EXPECT_CODE("where", c_u8, NULL, 0, NULL, U);
    EXPECT_CODE("lerp", lerp_mixed, NULL, 0, NULL, U);
    EXPECT_CODE("addcdiv", addcdiv_int, NULL, 0, NULL, U);
    EXPECT_CODE("pow", pow_neg, NULL, 0, NULL, U);
    EXPECT_CODE("masked_fill", mf_over, NULL, 0, NULL, U);
    EXPECT_CODE("masked_fill", mf_1d, NULL, 0, NULL, U);
    EXPECT_CODE("clamp", clamp_over, NULL, 0, NULL, U);
    EXPECT_CODE("clamp", clamp_none, NULL, 0, NULL, U);
    EXPECT_CODE("fill", fill_over, NULL, 0, NULL, U);
    EXPECT_CODE("fill", fill_1d, NULL, 0, NULL, U);
    EXPECT_CODE("leaky_relu_backward", leaky, leaky_bad, 2, NULL, U);
  }
  {
    /* Output broadcast over a dim (stride 0) is rejected. */
    tpu_view_t expanded = f32.view;
    expanded.strides[0] = 0;
    tpu_value_t in[2] = {tt_value(&f32.view), tt_value(&f32.view)};
    EXPECT_CODE("mul", in, NULL, 0, &expanded, I);
    (void)n3;
  }
  {
    /* Overlap: partial, or full with another layout, is PyTorch's error;
     * interleaved slices and exact in-place aliasing are fine. */
    int64_t n6 = 6, n2x2[2] = {2, 2};
    tt_t x = tt_make(TPU_DTYPE_F32, 1, &n6, TT_CONTIG);
    tt_t sq = tt_make(TPU_DTYPE_F32, 2, n2x2, TT_CONTIG);
    tpu_view_t head = x.view, tail = x.view, even = x.view, odd = x.view, t = sq.view;
    head.sizes[0] = tail.sizes[0] = 5;
    tail.addr += 4;
    even.sizes[0] = odd.sizes[0] = 3;
    even.strides[0] = odd.strides[0] = 2;
    odd.addr += 4;
    t.strides[0] = 1, t.strides[1] = 2;
    tpu_value_t shifted[2] = {tt_value(&tail), tt_value(&head)};
    tpu_value_t inter[2] = {tt_value(&even), tt_value(&odd)};
    tpu_value_t trans[2] = {tt_value(&sq.view), tt_value(&t)}, copy_in[1] = {tt_value(&head)};
    EXPECT_CODE("add", shifted, NULL, 0, &tail, I);
    EXPECT_CODE("add", trans, NULL, 0, &sq.view, I);
    EXPECT_CODE("copy", copy_in, NULL, 0, &tail, I);
    EXPECT_CODE("add", inter, NULL, 0, &even, TPU_CODE_OK);
    /* fill_ and masked_fill_ read a 0-dim value first, even from the output. */
    tpu_view_t x1 = x.view;
    x1.ndim = 0;
    x1.addr += 4;
    ((float*)x.mem)[1] = 7;
    tpu_value_t fill_in[2] = {tt_value(&x.view), tt_value(&x1)};
    tpu_value_t add0[2] = {tt_value(&x.view), tt_value(&x1)};
    EXPECT_CODE("fill", fill_in, NULL, 0, &x.view, TPU_CODE_OK);
    CHECK(((float*)x.mem)[0] == 7 && ((float*)x.mem)[5] == 7);
    EXPECT_CODE("add", add0, NULL, 0, &x.view, I);
    free(x.mem), free(sq.mem);
  }
  free(i32.mem), free(f32.mem), free(b.mem), free(u8.mem), free(f64.mem), free(i8.mem);
  free(f4.mem);
}

TEST(ew_copy_and_fill) {
  int64_t shape[3] = {3, 40, 50}, row[2] = {40, 1};
  for (int s = 0; s < NUM_DTYPES; ++s)
    for (int d = 0; d < NUM_DTYPES; ++d)
      for (int bcast = 0; bcast < 2; ++bcast) {
        tt_t src = bcast ? tt_make(k_all[s], 2, row, TT_CONTIG)
                         : tt_make(k_all[s], 3, shape, TT_REVERSED);
        tt_t dst = tt_make(k_all[d], 3, shape, bcast ? TT_CONTIG : TT_GAPS);
        fill_values(&src, false);
        tpu_value_t in[1] = {tt_value(&src.view)};
        tt_t made = {0};
        CHECK_OK(run_node("copy", in, 1, NULL, 0, &dst.view, &made));
        int64_t idx[3], n = tpu_view_numel(&dst.view);
        for (int64_t k = 0; k < n; ++k) {
          unravel(k, 3, shape, idx);
          uint64_t want = 0;
          tpu_convert(&want, k_all[d], 1, elem_at(&src.view, 3, idx), k_all[s], 1, 1);
          if (memcmp(&want, elem_at(&dst.view, 3, idx), tpu_dtype_size(k_all[d])) != 0) {
            tpu_test_fail(__FILE__, __LINE__, "copy %s -> %s differs at %lld",
                          tpu_dtype_name(k_all[s]), tpu_dtype_name(k_all[d]), (long long)k);
            break;
          }
        }
        free(src.mem), free(dst.mem);
      }
  /* fill_: Python numbers and 0-dim tensors into strided outputs. */
  for (int d = 0; d < NUM_DTYPES; ++d) {
    tt_t dst = tt_make(k_all[d], 3, shape, TT_GAPS);
    tt_t zero_dim = tt_make(TPU_DTYPE_F64, 0, shape, TT_CONTIG);
    *(double*)zero_dim.mem = 3.0;
    tpu_value_t values[2] = {vfloat(2.5), tt_value(&zero_dim.view)};
    for (int k = 0; k < 2; ++k) {
      tpu_value_t in[2] = {tt_value(&dst.view), values[k]};
      tt_t made = {0};
      CHECK_OK(run_node("fill", in, 2, NULL, 0, &dst.view, &made));
      double want = k == 0 ? 2.5 : 3.0, got = 0;
      uint64_t w = 0;
      tpu_convert(&w, k_all[d], 1, &want, TPU_DTYPE_F64, 1, 1);
      tpu_convert(&want, TPU_DTYPE_F64, 1, &w, k_all[d], 1, 1);
      int64_t idx[3] = {2, 39, 49};
      tpu_convert(&got, TPU_DTYPE_F64, 1, elem_at(&dst.view, 3, idx), k_all[d], 1, 1);
      CHECK(got == want);
    }
    free(dst.mem), free(zero_dim.mem);
  }
}

TEST(ew_rows_registered) {
  const char* names[] = {"add", "where", "masked_fill", "gelu_backward", "copy", "fill"};
  for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); ++k) {
    tpu_op_id_t id = tpu_op_lookup(names[k]);
    CHECK(id >= 0);
    CHECK(id < 0 || tpu_op_def(id) == find_def(names[k]));
  }
  for (int32_t i = 0; i < tpu_family_elementwise.count; ++i) {
    const tpu_op_def_t* def = &tpu_family_elementwise.ops[i];
    CHECK(def->impl != NULL && def->kernel && def->infer && def->check);
    CHECK(tpu_spec_count(def->inputs) <= TPU_EW_MAX_INPUTS);
  }
}
