/* registry.c — the HAL's driver list and the command descriptor check every
 * driver runs on submission (tpu/hal.h). */
#include <string.h>

#include "tpu/config.h"
#include "tpu/hal.h"

static const tpu_hal_driver_t* const g_drivers[] = {&tpu_host_driver, &tpu_null_driver};

const tpu_hal_driver_t* const* tpu_hal_drivers(int* out_count) {
  *out_count = (int)(sizeof(g_drivers) / sizeof(g_drivers[0]));
  return g_drivers;
}

/* TORCH_TPU_DRIVER (tpu/config.h, whose choices are these drivers' names). */
const tpu_hal_driver_t* tpu_hal_driver(void) {
  const char* name = tpu_config_string(TPU_CONFIG_DRIVER);
  int n = 0;
  const tpu_hal_driver_t* const* all = tpu_hal_drivers(&n);
  for (int i = 0; i < n; ++i)
    if (strcmp(name, all[i]->name) == 0) return all[i];
  return all[0];
}

static tpu_status_t bad(const char* what) {
  return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "HAL command: %s", what);
}

tpu_status_t tpu_hal_command_check(const tpu_hal_command_t* c) {
  if (!c) return bad("NULL descriptor");
  switch (c->kind) {
    case TPU_HAL_CMD_EXEC:
      return c->u.exec.graph ? TPU_OK : bad("EXEC without a graph");
    case TPU_HAL_CMD_COPY:
      if ((unsigned)c->u.copy.kind >= TPU_HAL_COPY_KIND_COUNT) return bad("unknown copy kind");
      if (c->u.copy.bytes == 0) return TPU_OK;
      if (c->u.copy.dst == 0 || c->u.copy.src == 0) return bad("copy to or from address 0");
      if (c->u.copy.dst + c->u.copy.bytes < c->u.copy.dst ||
          c->u.copy.src + c->u.copy.bytes < c->u.copy.src)
        return bad("copy range wraps around the address space");
      return TPU_OK;
    case TPU_HAL_CMD_RECORD:
      if (!c->u.event.event) return bad("RECORD without an event");
      return c->u.event.seq ? TPU_OK : bad("RECORD of sequence 0");
    case TPU_HAL_CMD_WAIT:
      return c->u.event.event ? TPU_OK : bad("WAIT without an event");
    case TPU_HAL_CMD_HOST_FN:
      return c->u.host.fn ? TPU_OK : bad("HOST_FN without a function");
    case TPU_HAL_CMD_KIND_COUNT:
      break;
  }
  return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "HAL command: unknown kind %d", (int)c->kind);
}
