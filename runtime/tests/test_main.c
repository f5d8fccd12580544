/* test_main.c — runs the registered C tests and prints "N passed, N failed". */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#define MAX_TESTS 1024

static struct {
  const char* name;
  tpu_test_fn fn;
} g_tests[MAX_TESTS];
static int g_count;
static int g_failures_in_test;

void tpu_test_register(const char* name, tpu_test_fn fn) {
  if (g_count < MAX_TESTS) {
    g_tests[g_count].name = name;
    g_tests[g_count].fn = fn;
    g_count++;
  }
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
  const char* x = *(const char* const*)a;
  const char* y = *(const char* const*)b;
  return strcmp(x, y);
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
  /* Run in name order so output is stable whatever the link order. */
  qsort(g_tests, (size_t)g_count, sizeof(g_tests[0]), compare_names);
  for (int i = 0; i < g_count; ++i) {
    if (!selected(g_tests[i].name, argc - 1, argv + 1)) continue;
    g_failures_in_test = 0;
    g_tests[i].fn();
    if (g_failures_in_test) {
      fprintf(stderr, "FAIL %s\n", g_tests[i].name);
      failed++;
    } else {
      passed++;
    }
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
