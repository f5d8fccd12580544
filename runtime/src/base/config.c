/* config.c — the runtime's settings table (tpu/config.h): read from the
 * environment once, parsed by kind, served by id.
 *
 * The table is filled under pthread_once on first use. Values are atomics so
 * that tpu_config_set (tests) and readers on other threads never race; a
 * STRING value is kept as an index into its choices. */
#include "tpu/config.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct spec {
  const char* name;
  tpu_config_kind_t kind;
  const char* fallback;
  double lo, hi;
  const char* choices;
  const char* help;
} spec_t;

static const spec_t k_specs[TPU_CONFIG_COUNT] = {
#define TPU_CONFIG_SPEC_(id, var, kind_, dflt, lo_, hi_, choices_, help_)                    \
  [TPU_CONFIG_##id] = {.name = var, .kind = TPU_CONFIG_##kind_, .fallback = dflt, .lo = lo_, \
                       .hi = hi_, .choices = choices_, .help = help_},
    TPU_CONFIG_LIST(TPU_CONFIG_SPEC_)
#undef TPU_CONFIG_SPEC_
};

enum { MAX_CHOICES = 8, MAX_CHOICE_LEN = 32, MAX_RAW = 128 };

typedef struct value {
  _Atomic int64_t i;      /* BOOL, INT; STRING: the choice's index */
  _Atomic double f;       /* FLOAT */
  atomic_bool invalid;
  atomic_bool set;        /* raw holds text */
  char raw[MAX_RAW];      /* the text as read (truncated), for the listing */
} value_t;

static value_t g_values[TPU_CONFIG_COUNT];
static char g_choice[TPU_CONFIG_COUNT][MAX_CHOICES][MAX_CHOICE_LEN];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_choice_count[TPU_CONFIG_COUNT];
static pthread_mutex_t g_set_mu = PTHREAD_MUTEX_INITIALIZER; /* raw text: set and entry */

/* Splits entry `id`'s choices into g_choice (once, in read_all). */
static int split_choices(int id) {
  const char* c = k_specs[id].choices;
  int n = 0;
  while (c && *c && n < MAX_CHOICES) {
    size_t len = strcspn(c, "|");
    if (len >= MAX_CHOICE_LEN) len = MAX_CHOICE_LEN - 1;
    memcpy(g_choice[id][n], c, len);
    g_choice[id][n][len] = '\0';
    ++n;
    c += strcspn(c, "|");
    if (*c == '|') ++c;
  }
  return n;
}

/* Parses `text` as entry `id` would take it; false when it does not parse. */
static bool parse(int id, const char* text, int64_t* out_i, double* out_f) {
  const spec_t* s = &k_specs[id];
  char* end = NULL;
  switch (s->kind) {
    case TPU_CONFIG_BOOL:
      if (strcmp(text, "0") == 0 || strcmp(text, "1") == 0) {
        *out_i = text[0] == '1';
        return true;
      }
      return false;
    case TPU_CONFIG_INT: {
      errno = 0;
      long long v = strtoll(text, &end, 10);
      if (errno || end == text || *end || (double)v < s->lo || (double)v > s->hi) return false;
      *out_i = v;
      return true;
    }
    case TPU_CONFIG_FLOAT: {
      errno = 0;
      double v = strtod(text, &end);
      if (errno || end == text || *end || !isfinite(v) || v < s->lo || v > s->hi) return false;
      *out_f = v;
      return true;
    }
    case TPU_CONFIG_STRING: {
      for (int k = 0; k < g_choice_count[id]; ++k)
        if (strcmp(text, g_choice[id][k]) == 0) {
          *out_i = k;
          return true;
        }
      return false;
    }
  }
  return false;
}

/* Entry `id` from `text` (NULL: unset). Returns whether text parsed. */
static bool assign(int id, const char* text) {
  value_t* v = &g_values[id];
  int64_t i = 0;
  double f = 0;
  parse(id, k_specs[id].fallback, &i, &f); /* the defaults parse (tests/test_config.c) */
  bool valid = true;
  if (text) {
    int64_t ti = 0;
    double tf = 0;
    valid = parse(id, text, &ti, &tf);
    if (valid) {
      i = ti;
      f = tf;
    }
    snprintf(v->raw, sizeof v->raw, "%s", text);
  }
  atomic_store(&v->i, i);
  atomic_store(&v->f, f);
  atomic_store(&v->invalid, !valid);
  atomic_store(&v->set, text != NULL);
  return valid;
}

static void read_all(void) {
  for (int id = 0; id < TPU_CONFIG_COUNT; ++id) g_choice_count[id] = split_choices(id);
  for (int id = 0; id < TPU_CONFIG_COUNT; ++id) {
    const char* text = getenv(k_specs[id].name);
    if (!assign(id, text))
      fprintf(stderr,
              "torch_tpu: %s=%s is not a valid value (%s); the default %s is used\n",
              k_specs[id].name, text,
              k_specs[id].kind == TPU_CONFIG_BOOL     ? "0 or 1"
              : k_specs[id].kind == TPU_CONFIG_STRING ? k_specs[id].choices
                                                      : "a number in range",
              k_specs[id].fallback);
  }
}

static inline void ensure(void) { pthread_once(&g_once, read_all); }

static bool in_range(tpu_config_id_t id) { return (int)id >= 0 && id < TPU_CONFIG_COUNT; }

bool tpu_config_bool(tpu_config_id_t id) { return tpu_config_int(id) != 0; }

int64_t tpu_config_int(tpu_config_id_t id) {
  if (!in_range(id)) return 0;
  ensure();
  return atomic_load_explicit(&g_values[id].i, memory_order_relaxed);
}

double tpu_config_float(tpu_config_id_t id) {
  if (!in_range(id)) return 0;
  ensure();
  return atomic_load_explicit(&g_values[id].f, memory_order_relaxed);
}

const char* tpu_config_string(tpu_config_id_t id) {
  if (!in_range(id) || k_specs[id].kind != TPU_CONFIG_STRING) return "";
  ensure();
  return g_choice[id][atomic_load_explicit(&g_values[id].i, memory_order_relaxed)];
}

tpu_status_t tpu_config_entry(int32_t id, tpu_config_entry_t* out_entry) {
  if (!out_entry) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "tpu_config_entry: out_entry is NULL");
  if (id < 0 || id >= TPU_CONFIG_COUNT)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "tpu_config_entry: no entry %d (there are %d)",
                           (int)id, (int)TPU_CONFIG_COUNT);
  ensure();
  const spec_t* s = &k_specs[id];
  value_t* v = &g_values[id];
  pthread_mutex_lock(&g_set_mu);
  *out_entry = (tpu_config_entry_t){
      .name = s->name,
      .kind = s->kind,
      .help = s->help,
      .choices = s->choices,
      .fallback = s->fallback,
      .raw = atomic_load(&v->set) ? v->raw : NULL,
      .invalid = atomic_load(&v->invalid),
      .i = atomic_load(&v->i),
      .f = atomic_load(&v->f),
      .s = s->kind == TPU_CONFIG_STRING ? g_choice[id][atomic_load(&v->i)] : NULL,
  };
  pthread_mutex_unlock(&g_set_mu);
  return TPU_OK;
}

tpu_status_t tpu_config_set(tpu_config_id_t id, const char* text) {
  if (!in_range(id))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "tpu_config_set: no entry %d", (int)id);
  ensure();
  int64_t i = 0;
  double f = 0;
  if (text && !parse(id, text, &i, &f))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "tpu_config_set: %s=%s does not parse",
                           k_specs[id].name, text);
  pthread_mutex_lock(&g_set_mu);
  assign(id, text);
  pthread_mutex_unlock(&g_set_mu);
  return TPU_OK;
}
