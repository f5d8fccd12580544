/* status.c — heap-allocated statuses (see tpu/status.h). */
#include "tpu/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tpu_status_s {
  tpu_status_code_t code;
  char message[];
};

/* Returned when even the status cannot be allocated. */
static struct {
  tpu_status_code_t code;
  char message[32];
} g_oom_status = {TPU_CODE_OUT_OF_MEMORY, "host out of memory"};

static int is_static(tpu_status_t s) { return (void*)s == (void*)&g_oom_status; }

tpu_status_t tpu_status_makev(tpu_status_code_t code, const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) n = 0;
  tpu_status_t s = malloc(sizeof(*s) + (size_t)n + 1);
  if (!s) return (tpu_status_t)(void*)&g_oom_status;
  s->code = code == TPU_CODE_OK ? TPU_CODE_INTERNAL : code;
  vsnprintf(s->message, (size_t)n + 1, fmt, ap);
  return s;
}

tpu_status_t tpu_status_make(tpu_status_code_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tpu_status_t s = tpu_status_makev(code, fmt, ap);
  va_end(ap);
  return s;
}

tpu_status_t tpu_status_annotate(tpu_status_t status, const char* fmt, ...) {
  if (status == TPU_OK || is_static(status)) return status;
  char prefix[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof(prefix), fmt, ap);
  va_end(ap);
  tpu_status_t s = tpu_status_make(status->code, "%s: %s", prefix, status->message);
  if (is_static(s)) return status;
  tpu_status_free(status);
  return s;
}

tpu_status_code_t tpu_status_code(tpu_status_t status) {
  return status ? status->code : TPU_CODE_OK;
}

const char* tpu_status_message(tpu_status_t status) { return status ? status->message : ""; }

const char* tpu_status_code_name(tpu_status_code_t code) {
  static const char* const names[] = {"OK",           "INVALID_ARGUMENT", "INDEX_ERROR",
                                      "TYPE_ERROR",   "OUT_OF_MEMORY",    "UNIMPLEMENTED",
                                      "INTERNAL",     "UNAVAILABLE",      "DEADLINE_EXCEEDED",
                                      "ABORTED"};
  return (unsigned)code < sizeof(names) / sizeof(names[0]) ? names[code] : "UNKNOWN";
}

void tpu_status_free(tpu_status_t status) {
  if (status && !is_static(status)) free(status);
}
