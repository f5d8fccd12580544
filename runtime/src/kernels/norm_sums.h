/* norm_sums.h — the normalisation families' row reductions over double
 * buffers, with four independent accumulators: without them a sum is one
 * dependent chain of additions (latency bound, and the compiler may not
 * reorder floating-point sums to vectorise it). Internal to src/kernels. */
#ifndef TPU_KERNELS_NORM_SUMS_H_
#define TPU_KERNELS_NORM_SUMS_H_

#include <stdint.h>

/* sum of x[i] */
static inline double ns_sum(const double* x, int64_t n) {
  double a[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) a[j] += x[i + j];
  for (; i < n; ++i) a[0] += x[i];
  return (a[0] + a[1]) + (a[2] + a[3]);
}

/* sum of x[i] - m */
static inline double ns_sumdev(const double* x, int64_t n, double m) {
  double a[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) a[j] += x[i + j] - m;
  for (; i < n; ++i) a[0] += x[i] - m;
  return (a[0] + a[1]) + (a[2] + a[3]);
}

/* sum of (x[i] - m)^2 */
static inline double ns_sqdev(const double* x, int64_t n, double m) {
  double a[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) a[j] += (x[i + j] - m) * (x[i + j] - m);
  for (; i < n; ++i) a[0] += (x[i] - m) * (x[i] - m);
  return (a[0] + a[1]) + (a[2] + a[3]);
}

/* sum of g[i] * (x[i] - m) */
static inline double ns_dotdev(const double* g, const double* x, int64_t n, double m) {
  double a[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) a[j] += g[i + j] * (x[i + j] - m);
  for (; i < n; ++i) a[0] += g[i] * (x[i] - m);
  return (a[0] + a[1]) + (a[2] + a[3]);
}

#endif /* TPU_KERNELS_NORM_SUMS_H_ */
