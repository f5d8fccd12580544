/* test.h — the runtime's C test harness.
 *
 * TEST(name) { ... } registers a test; CHECK(cond) / CHECK_OK(status) /
 * CHECK_NEAR(a, b, tol) record a failure (with file:line) and go on. The
 * runner (test_main.c) runs every test, or those whose name contains any of
 * its arguments (less those containing an argument given as -SUBSTRING), and
 * ends with the line "N passed, N failed". Registration has no fixed limit;
 * a test that cannot be registered (out of memory) fails the whole run
 * before any test runs (exit status 2) rather than being left out.
 */
#ifndef TPU_TEST_H_
#define TPU_TEST_H_

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "tpu/runtime.h"
#include "tpu/status.h"

typedef void (*tpu_test_fn)(void);

/* Registers a test (called by TEST's constructor; name is borrowed and must
 * outlive the run, as a string literal does). */
void tpu_test_register(const char* name, tpu_test_fn fn);

/* The runner's growable table of tests: entries[0..count) are owned by the
 * registry (free with tpu_test_registry_free); dropped counts registrations
 * that could not be stored, which the runner treats as a failed run. A
 * zero-initialised registry is empty and valid. Exposed so the harness's own
 * test (test_harness.c) can check it keeps every registration. */
typedef struct tpu_test_entry {
  const char* name;
  tpu_test_fn fn;
} tpu_test_entry_t;
typedef struct tpu_test_registry {
  tpu_test_entry_t* entries;
  size_t count, capacity, dropped;
} tpu_test_registry_t;

/* Appends (name, fn), growing the table; false (and dropped + 1) when the
 * table cannot grow. */
bool tpu_test_registry_add(tpu_test_registry_t* reg, const char* name, tpu_test_fn fn);
void tpu_test_registry_free(tpu_test_registry_t* reg);
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
