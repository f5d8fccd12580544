/* test_optim.c — the optim family (fused Adam / AdamW) against its reference.
 *
 * adam_cases: (row, dtype, elements, amsgrad, maximize, weight decay, grad
 * scale, lr as a tensor, step) run the same node through the kernel and the
 * reference on copies of the same state and compare every written operand:
 * every floating dtype, sizes below, at and past the half types' chunk and
 * big enough to split over threads, no elements. adam_semantics pins one
 * AdamW step by hand, found_inf skipping the step, and the operands that
 * fall back.
 */
#include <string.h>

#include "kernels/optim/optim.h"

#include "kernel_test_util.h"

typedef struct adam_case {
  bool adamw;
  tpu_dtype_t dtype;
  int64_t numel;
  bool amsgrad, maximize;
  double weight_decay;
  bool scaled, lr_tensor;
  double step;
} adam_case_t;

#define F32 TPU_DTYPE_F32
#define F64 TPU_DTYPE_F64
#define F16 TPU_DTYPE_F16
#define BF16 TPU_DTYPE_BF16

static const adam_case_t k_cases[] = {
    {true, F32, 7, false, false, 0.01, false, false, 1},
    {true, F32, 100003, true, false, 0.1, true, true, 5},
    {false, F32, 513, false, true, 0.0, false, false, 2},
    {false, F64, 1000, true, true, 0.05, true, false, 3},
    {true, F64, 1, false, false, 0.0, false, true, 1},
    {true, F16, 1030, false, false, 0.01, true, false, 4},
    {false, BF16, 511, true, false, 0.02, false, true, 7},
    {true, BF16, 40000, false, true, 0.01, false, false, 2},
    {true, F32, 0, false, false, 0.01, false, false, 1},
};

enum { P, G, M, V, VMAX, NSTATE };

typedef struct adam_state {
  tt_t t[NSTATE];
  tt_t step, lr, scale, found;
  tpu_value_t in[9];
  tpu_attr_t attrs[6];
} adam_state_t;

/* The state of one case, filled from seed-independent values of the test's
 * generator; `from`, when given, is copied instead. */
static void make_state(const adam_case_t* c, const adam_state_t* from, adam_state_t* s) {
  int64_t n = c->numel, one = 1;
  for (int k = 0; k < NSTATE; ++k) {
    s->t[k] = tt_make(c->dtype, 1, &n, TT_CONTIG);
    if (from) view_copy(&s->t[k].view, &from->t[k].view);
    else tt_fill(&s->t[k].view, k >= V ? 0.0 : -2.0, 2.0, 0);
  }
  s->step = tt_make(F32, 1, &one, TT_CONTIG);
  s->lr = tt_make(F64, 1, &one, TT_CONTIG);
  s->scale = tt_make(F32, 1, &one, TT_CONTIG);
  s->found = tt_make(F32, 1, &one, TT_CONTIG);
  tt_fill_value(&s->step.view, c->step);
  tt_fill_value(&s->lr.view, 1e-2);
  tt_fill_value(&s->scale.view, 512.0);
  tt_fill_value(&s->found.view, 0.0);
  for (int k = 0; k < NSTATE; ++k)
    s->in[k] = tt_value(k == VMAX && !c->amsgrad ? NULL : &s->t[k].view);
  s->in[5] = tt_value(&s->step.view);
  if (c->lr_tensor) {
    s->in[6] = tt_value(&s->lr.view);
  } else {
    memset(&s->in[6], 0, sizeof(s->in[6]));
    s->in[6].kind = TPU_VALUE_SCALAR;
    s->in[6].u.scalar.dtype = F64;
    s->in[6].u.scalar.v.f = 1e-2;
  }
  s->in[7] = tt_value(c->scaled ? &s->scale.view : NULL);
  s->in[8] = tt_value(&s->found.view);
  s->attrs[0] = tt_float(0.9);
  s->attrs[1] = tt_float(0.999);
  s->attrs[2] = tt_float(c->weight_decay);
  s->attrs[3] = tt_float(1e-8);
  s->attrs[4] = tt_bool(c->amsgrad);
  s->attrs[5] = tt_bool(c->maximize);
}

static void free_state(adam_state_t* s) {
  for (int k = 0; k < NSTATE; ++k) tt_free(&s->t[k]);
  tt_free(&s->step);
  tt_free(&s->lr);
  tt_free(&s->scale);
  tt_free(&s->found);
}

static void run_case(int index, const adam_case_t* c) {
  const tpu_op_def_t* def = tt_def(c->adamw ? "fused_adamw" : "fused_adam");
  if (!def) return;
  char what[96];
  snprintf(what, sizeof(what), "case %d %s (%s, %lld)", index, def->name,
           tpu_dtype_name(c->dtype), (long long)c->numel);
  adam_state_t got, want;
  make_state(c, NULL, &got);
  make_state(c, &got, &want);
  tpu_node_t node = tt_node(got.in, 9, NULL, 0, got.attrs, 6);
  CHECK_OK(def->check(def, &node));
  CHECK_OK(tt_run(def->kernel, def, &node));
  node = tt_node(want.in, 9, NULL, 0, want.attrs, 6);
  CHECK_OK(tt_run(tpu_adam_reference, def, &node));
  static const char* const k_names[] = {"param", "grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  for (int k = 0; k < NSTATE && c->numel > 0; ++k) {
    if (k == VMAX && !c->amsgrad) continue;
    char w[160];
    snprintf(w, sizeof(w), "%s %s", what, k_names[k]);
    tt_compare(w, &got.t[k].view, &want.t[k].view, 4 * tt_tol(c->dtype) + 1e-12);
  }
  free_state(&got);
  free_state(&want);
}

TEST(adam_cases) {
  for (int i = 0; i < (int)(sizeof(k_cases) / sizeof(k_cases[0])); ++i) run_case(i, &k_cases[i]);
}

TEST(adam_semantics) {
  const tpu_op_def_t* adamw = tt_def("fused_adamw");
  if (!adamw) return;
  /* One AdamW step by hand: p = 1, g = 0.5, m = v = 0, step 1, lr 0.1,
   * weight decay 0.01: p = 0.999 - 1 * 0.05 / (sqrt(2.5e-4) / sqrt(1e-3) + eps)
   * = 0.899, m = 0.05, v = 2.5e-4. */
  adam_case_t c = {true, F64, 1, false, false, 0.01, false, false, 1};
  adam_state_t s;
  make_state(&c, NULL, &s);
  tt_fill_value(&s.t[P].view, 1.0);
  tt_fill_value(&s.t[G].view, 0.5);
  tt_fill_value(&s.t[M].view, 0.0);
  tt_fill_value(&s.t[V].view, 0.0);
  s.in[6].u.scalar.v.f = 0.1;
  tpu_node_t node = tt_node(s.in, 9, NULL, 0, s.attrs, 6);
  CHECK_OK(tt_run(adamw->kernel, adamw, &node));
  CHECK_NEAR(tt_get(&s.t[P].view, 0), 0.899, 1e-7);
  CHECK_NEAR(tt_get(&s.t[M].view, 0), 0.05, 1e-12);
  CHECK_NEAR(tt_get(&s.t[V].view, 0), 2.5e-4, 1e-15);
  CHECK_NEAR(tt_get(&s.t[G].view, 0), 0.5, 0); /* unscaled: the grad is not written */

  /* found_inf == 1: GradScaler skips the step; nothing is written, the
   * grad not unscaled either. */
  s.in[7] = tt_value(&s.scale.view);
  tt_fill_value(&s.found.view, 1.0);
  CHECK_OK(tt_run(adamw->kernel, adamw, &node));
  CHECK_NEAR(tt_get(&s.t[P].view, 0), 0.899, 1e-7);
  CHECK_NEAR(tt_get(&s.t[G].view, 0), 0.5, 0);
  CHECK_NEAR(tt_get(&s.t[M].view, 0), 0.05, 1e-12);

  /* What falls back: mixed dtypes, a non-contiguous operand, aliasing
   * operands, max_exp_avg_sqs without amsgrad, a step of several elements. */
  tt_fill_value(&s.found.view, 0.0);
  int64_t n = 1, two = 2;
  tt_t f32 = tt_make(F32, 1, &n, TT_CONTIG), gaps = tt_make(F64, 1, &two, TT_GAPS);
  tt_t steps = tt_make(F32, 1, &two, TT_CONTIG);
  tpu_value_t keep = s.in[M];
  s.in[M] = tt_value(&f32.view);
  CHECK_CODE(adamw->check(adamw, &node), TPU_CODE_UNIMPLEMENTED);
  s.in[M] = tt_value(&gaps.view);
  s.in[P] = tt_value(&gaps.view);
  s.in[G] = tt_value(&gaps.view);
  CHECK_CODE(adamw->check(adamw, &node), TPU_CODE_UNIMPLEMENTED);
  s.in[P] = tt_value(&s.t[P].view);
  s.in[G] = tt_value(&s.t[P].view);
  s.in[M] = keep;
  CHECK_CODE(adamw->check(adamw, &node), TPU_CODE_UNIMPLEMENTED);
  s.in[G] = tt_value(&s.t[G].view);
  CHECK_OK(adamw->check(adamw, &node));
  s.in[VMAX] = tt_value(&s.t[VMAX].view);
  CHECK_CODE(adamw->check(adamw, &node), TPU_CODE_UNIMPLEMENTED);
  s.in[VMAX] = tt_value(NULL);
  s.in[5] = tt_value(&steps.view);
  CHECK_CODE(adamw->check(adamw, &node), TPU_CODE_UNIMPLEMENTED);
  tt_free(&f32);
  tt_free(&gaps);
  tt_free(&steps);
  free_state(&s);
}
