/* test_main.c — runs the registered C tests and prints "N passed, N failed". */
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

/* Every registration is kept: the table grows as constructors register.
 * A registration that cannot be stored (out of memory) is counted and fails
 * the run before any test runs, so a test is never dropped silently. */
static tpu_test_registry_t g_registry;
static int g_failures_in_test;

bool tpu_test_registry_add(tpu_test_registry_t* reg, const char* name, tpu_test_fn fn) {
  if (reg->count == reg->capacity) {
    size_t cap = reg->capacity ? reg->capacity * 2 : 64;
    tpu_test_entry_t* grown = realloc(reg->entries, cap * sizeof(*grown));
    if (!grown) {
      reg->dropped++;
      return false;
    }
    reg->entries = grown;
    reg->capacity = cap;
  }
  reg->entries[reg->count].name = name;
  reg->entries[reg->count].fn = fn;
  reg->count++;
  return true;
}

void tpu_test_registry_free(tpu_test_registry_t* reg) {
  free(reg->entries);
  *reg = (tpu_test_registry_t){0};
}

void tpu_test_register(const char* name, tpu_test_fn fn) {
  if (!tpu_test_registry_add(&g_registry, name, fn))
    fprintf(stderr, "test registration failed (out of memory): %s\n", name);
}

void tpu_test_fail(const char* file, int line, const char* fmt, ...) {
  va_list ap;
  if (g_failures_in_test++ >= 8) return; /* keep reports short */
  fprintf(stderr, "  %s:%d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static int compare_names(const void* a, const void* b) {
  return strcmp(((const tpu_test_entry_t*)a)->name, ((const tpu_test_entry_t*)b)->name);
}

/* The arguments are filters: a test runs when its name contains one of the
 * plain ones (or there are none) and none of those given as -SUBSTRING. */
static int selected(const char* name, int nfilters, char* const* filters) {
  int includes = 0, included = 0;
  for (int k = 0; k < nfilters; ++k) {
    if (filters[k][0] == '-') {
      if (strstr(name, filters[k] + 1)) return 0;
    } else {
      includes++;
      if (strstr(name, filters[k])) included = 1;
    }
  }
  return included || includes == 0;
}

int main(int argc, char** argv) {
  int passed = 0, failed = 0;
  if (g_registry.dropped) {
    fprintf(stderr, "FAIL: %zu test(s) could not be registered; not running\n",
            g_registry.dropped);
    return 2;
  }
  /* Run in name order so output is stable whatever the link order. */
  const tpu_test_entry_t* tests = g_registry.entries;
  if (g_registry.count)
    qsort(g_registry.entries, g_registry.count, sizeof(tpu_test_entry_t), compare_names);
  for (size_t i = 0; i < g_registry.count; ++i) {
    if (!selected(tests[i].name, argc - 1, argv + 1)) continue;
    g_failures_in_test = 0;
    tests[i].fn();
    if (g_failures_in_test) {
      fprintf(stderr, "FAIL %s\n", tests[i].name);
      failed++;
    } else {
      passed++;
    }
  }
  printf("%d passed, %d failed\n", passed, failed);
  tpu_test_registry_free(&g_registry);
  return failed ? 1 : 0;
}
