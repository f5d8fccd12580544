/* test_harness.c — the C test runner itself: its registry keeps every
 * registration, far past the 1,024 tests the old fixed table held (it
 * dropped the rest silently), in order, with none counted as dropped. */
#include <stdint.h>

#include "test.h"

static void harness_dummy(void) {}

TEST(harness_registry_keeps_every_registration) {
  enum { N = 5000 };
  static char names[N]; /* distinct addresses stand for distinct names */
  tpu_test_registry_t reg = {0};
  for (size_t i = 0; i < N; ++i) CHECK(tpu_test_registry_add(&reg, &names[i], harness_dummy));
  CHECK(reg.count == N && reg.dropped == 0 && reg.capacity >= N);
  size_t misplaced = 0;
  for (size_t i = 0; i < reg.count; ++i)
    misplaced += reg.entries[i].name != &names[i] || reg.entries[i].fn != harness_dummy;
  CHECK(misplaced == 0);
  tpu_test_registry_free(&reg);
  CHECK(reg.entries == NULL && reg.count == 0 && reg.capacity == 0);
}
