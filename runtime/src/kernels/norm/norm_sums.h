/* norm_sums.h — the normalisation families' row reductions over double
 * buffers, with four independent accumulators: without them a sum is one
 * dependent chain of additions (latency bound, and the compiler may not
 * reorder floating-point sums to vectorise it); and the tree sum of the
 * float lanes of the float32 fast paths. Internal to src/kernels. */
#ifndef TPU_KERNELS_NORM_SUMS_H_
#define TPU_KERNELS_NORM_SUMS_H_

#include <stdint.h>
#include <string.h>

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

/* The sum of 32 float lanes l[0..32), added in double as a tree: depth 5
 * instead of a chain of 32 dependent additions, which for short rows
 * (n = 128) cost more than the row itself. */
typedef float ns_f32x8 __attribute__((vector_size(32)));
typedef double ns_f64x8 __attribute__((vector_size(64)));
static inline double ns_lanes32(const float* l) {
  ns_f32x8 a, b, c, d;
  memcpy(&a, l, sizeof a);
  memcpy(&b, l + 8, sizeof b);
  memcpy(&c, l + 16, sizeof c);
  memcpy(&d, l + 24, sizeof d);
  ns_f64x8 t = (__builtin_convertvector(a, ns_f64x8) + __builtin_convertvector(b, ns_f64x8)) +
               (__builtin_convertvector(c, ns_f64x8) + __builtin_convertvector(d, ns_f64x8));
  return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
}

#endif /* TPU_KERNELS_NORM_SUMS_H_ */
