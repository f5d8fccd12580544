/* test_vmath.c — the SIMD float32 math of kernels/common/vmath.h against libm. */
#include <math.h>

#include "kernels/common/vmath.h"
#include "test.h"

static double ulps(float got, double want) {
  float w = (float)want;
  float step = nextafterf(fabsf(w), INFINITY) - fabsf(w);
  return fabs((double)got - want) / step;
}

TEST(vmath_exp_within_two_ulp) {
  double worst = 0;
  /* A million points across the fast range, each with its two neighbours. */
  const int64_t n = 1000000;
  for (int64_t k = 0; k <= n; ++k) {
    float x = VM_EXP_LO + (VM_EXP_HI - VM_EXP_LO) * (float)k / (float)n;
    float xs[3] = {nextafterf(x, -INFINITY), x, nextafterf(x, INFINITY)};
    for (int j = 0; j < 3; ++j) {
      if (!vm_exp_ok(xs[j])) continue;
      double u = ulps(vm_expf(xs[j]), exp((double)xs[j]));
      if (u > worst) worst = u;
    }
  }
  CHECK(worst <= 2.0);
  CHECK(ulps(vm_expf(VM_EXP_HI), exp((double)VM_EXP_HI)) <= 2.0);
  CHECK(ulps(vm_expf(VM_EXP_LO), exp((double)VM_EXP_LO)) <= 2.0);
}

TEST(vmath_exp_shifted_handles_the_edges) {
  float in[11] = {0.f, 1.f, -1.f, 100.f, -200.f, INFINITY, -INFINITY, NAN, 88.5f, -87.5f, 3.f};
  float out[11];
  double sum = vm_exp_shifted(out, in, 0.0f, 11);
  for (int i = 0; i < 11; ++i) {
    float want = expf(in[i]);
    if (isnan(want)) CHECK(isnan(out[i]));
    else if (isinf(want) || want == 0.0f) CHECK(out[i] == want);
    else CHECK(ulps(out[i], exp((double)in[i])) <= 2.0);
  }
  CHECK(isnan(sum));
  float row[20];
  for (int i = 0; i < 20; ++i) row[i] = (float)(i % 7) - 3.0f;
  CHECK(vm_max(row, 20) == 3.0f);
  row[13] = NAN;
  CHECK(isnan(vm_max(row, 20)));
  CHECK_NEAR(vm_sum(row, 13), -3.0, 1e-12); /* -3..3 then -3..2 */
}
