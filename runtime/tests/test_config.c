/* test_config.c — the settings table (tpu/config.h): every default parses as
 * its kind, values parse or are refused as documented, bad ids get a status. */
#include <string.h>

#include "test.h"
#include "tpu/config.h"
#include "tpu/hal.h"

/* Whether `s` is INVALID_ARGUMENT (consumed). */
static bool refused(tpu_status_t s) {
  bool ok = s != TPU_OK && tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT;
  tpu_status_free(s);
  return ok;
}

TEST(config_every_entry_has_a_valid_default) {
  for (int32_t id = 0; id < TPU_CONFIG_COUNT; ++id) {
    tpu_config_entry_t e;
    CHECK_OK(tpu_config_entry(id, &e));
    CHECK(e.name && strncmp(e.name, "T", 1) == 0 && e.help && e.fallback);
    /* a default that does not parse would leave the value 0: set it back
     * explicitly and compare */
    tpu_config_entry_t before = e;
    CHECK_OK(tpu_config_set((tpu_config_id_t)id, e.fallback));
    CHECK_OK(tpu_config_entry(id, &e));
    CHECK(!e.invalid);
    CHECK(e.i == before.i || before.raw != NULL);
    CHECK_OK(tpu_config_set((tpu_config_id_t)id, before.raw));
    for (int32_t other = 0; other < id; ++other) {
      tpu_config_entry_t o;
      CHECK_OK(tpu_config_entry(other, &o));
      CHECK(strcmp(o.name, e.name) != 0); /* each variable once */
    }
  }
}

TEST(config_values_parse_by_kind) {
  CHECK_OK(tpu_config_set(TPU_CONFIG_DEFER_MAX_NODES, "77"));
  CHECK(tpu_config_int(TPU_CONFIG_DEFER_MAX_NODES) == 77);
  /* out of range, not a number, trailing junk: refused, value unchanged */
  CHECK(refused(tpu_config_set(TPU_CONFIG_DEFER_MAX_NODES, "0")));
  CHECK(refused(tpu_config_set(TPU_CONFIG_DEFER_MAX_NODES, "12x")));
  CHECK(refused(tpu_config_set(TPU_CONFIG_DEFER_MAX_NODES, "")));
  CHECK(tpu_config_int(TPU_CONFIG_DEFER_MAX_NODES) == 77);
  CHECK_OK(tpu_config_set(TPU_CONFIG_DEFER_MAX_NODES, NULL));
  CHECK(tpu_config_int(TPU_CONFIG_DEFER_MAX_NODES) == 1024);

  CHECK_OK(tpu_config_set(TPU_CONFIG_CONV_SPLIT, "0"));
  CHECK(!tpu_config_bool(TPU_CONFIG_CONV_SPLIT));
  CHECK(refused(tpu_config_set(TPU_CONFIG_CONV_SPLIT, "yes")));
  CHECK_OK(tpu_config_set(TPU_CONFIG_CONV_SPLIT, NULL));
  CHECK(tpu_config_bool(TPU_CONFIG_CONV_SPLIT));

  CHECK_OK(tpu_config_set(TPU_CONFIG_MEMORY_GB, "0.5"));
  CHECK(tpu_config_float(TPU_CONFIG_MEMORY_GB) == 0.5);
  CHECK(refused(tpu_config_set(TPU_CONFIG_MEMORY_GB, "-1")));
  CHECK(refused(tpu_config_set(TPU_CONFIG_MEMORY_GB, "nan")));
  CHECK_OK(tpu_config_set(TPU_CONFIG_MEMORY_GB, NULL));
  CHECK(tpu_config_float(TPU_CONFIG_MEMORY_GB) == 16.0);

  CHECK_OK(tpu_config_set(TPU_CONFIG_FALLBACK, "error"));
  CHECK(strcmp(tpu_config_string(TPU_CONFIG_FALLBACK), "error") == 0);
  CHECK(refused(tpu_config_set(TPU_CONFIG_FALLBACK, "err")));
  CHECK(strcmp(tpu_config_string(TPU_CONFIG_FALLBACK), "error") == 0);
  CHECK_OK(tpu_config_set(TPU_CONFIG_FALLBACK, NULL));
  CHECK(strcmp(tpu_config_string(TPU_CONFIG_FALLBACK), "warn") == 0);
}

TEST(config_bad_ids_get_a_status) {
  tpu_config_entry_t e;
  CHECK(refused(tpu_config_entry(-1, &e)));
  CHECK(refused(tpu_config_entry(TPU_CONFIG_COUNT, &e)));
  CHECK(refused(tpu_config_entry(0, NULL)));
  CHECK(refused(tpu_config_set((tpu_config_id_t)TPU_CONFIG_COUNT, "1")));
  CHECK(tpu_config_int((tpu_config_id_t)-3) == 0);
  CHECK(strcmp(tpu_config_string(TPU_CONFIG_NUM_CHIPS), "") == 0); /* not a STRING entry */
}

/* TORCH_TPU_DRIVER's choices name every registered driver. */
TEST(config_driver_choices_name_every_driver) {
  int n = 0;
  const tpu_hal_driver_t* const* all = tpu_hal_drivers(&n);
  CHECK(n >= 2);
  for (int i = 0; i < n; ++i) {
    CHECK_OK(tpu_config_set(TPU_CONFIG_DRIVER, all[i]->name));
    CHECK(strcmp(tpu_config_string(TPU_CONFIG_DRIVER), all[i]->name) == 0);
  }
  CHECK_OK(tpu_config_set(TPU_CONFIG_DRIVER, NULL));
}
