/* test.h — the runtime's C test harness.
 *
 * TEST(name) { ... } registers a test; CHECK(cond) / CHECK_OK(status) /
 * CHECK_NEAR(a, b, tol) record a failure (with file:line) and go on. The
 * runner (test_main.c) runs every test, or those whose name contains any of
 * its arguments (less those containing an argument given as -SUBSTRING), and
 * ends with the line "N passed, N failed".
 */
#ifndef TPU_TEST_H_
#define TPU_TEST_H_

#include <math.h>
#include <stdio.h>

#include "tpu/runtime.h"
#include "tpu/status.h"

typedef void (*tpu_test_fn)(void);
void tpu_test_register(const char* name, tpu_test_fn fn);
void tpu_test_fail(const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define TEST(name)                                                              \
  static void name(void);                                                       \
  __attribute__((constructor)) static void tpu_test_reg_##name(void) {          \
    tpu_test_register(#name, name);                                             \
  }                                                                             \
  static void name(void)

#define CHECK(cond)                                                             \
  do {                                                                          \
    if (!(cond)) tpu_test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);         \
  } while (0)

#define CHECK_OK(expr)                                                          \
  do {                                                                          \
    tpu_status_t s_ = (expr);                                                   \
    if (s_ != TPU_OK) {                                                         \
      tpu_test_fail(__FILE__, __LINE__, "%s: %s", #expr, tpu_status_message(s_)); \
      tpu_status_free(s_);                                                      \
    }                                                                           \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                   \
  do {                                                                          \
    double a_ = (double)(a), b_ = (double)(b);                                  \
    if (!(fabs(a_ - b_) <= (tol) * (1.0 + fabs(b_))))                           \
      tpu_test_fail(__FILE__, __LINE__, "%s=%g vs %s=%g", #a, a_, #b, b_);      \
  } while (0)

/* Stream 0 of chip 0 (borrowed), for tests that submit to the runtime. */
static inline tpu_stream_t* test_stream0(void) {
  tpu_chip_t* chip = NULL;
  tpu_stream_t* stream = NULL;
  CHECK_OK(tpu_chip_get(0, &chip));
  CHECK_OK(tpu_stream_get(chip, 0, &stream));
  return stream;
}

#endif /* TPU_TEST_H_ */
