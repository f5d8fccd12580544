/* null_driver.c — a driver with no chips. It keeps the HAL interface honest
 * (everything above compiles and links against a second driver) and lets the
 * runtime start where no device exists: every call that needs a chip fails
 * with UNAVAILABLE. Select it with TORCH_TPU_DRIVER=null. */
#include "../fusion/fusion.h"
#include "tpu/hal.h"

static tpu_status_t unavailable(void) {
  return tpu_status_make(TPU_CODE_UNAVAILABLE, "the null driver has no chips");
}

static int null_chip_count(void) { return 0; }
static tpu_status_t null_chip_open(int index, uint64_t capacity, tpu_hal_chip_t** out_chip) {
  *out_chip = NULL;
  return unavailable();
}
static void null_chip_close(tpu_hal_chip_t* chip) {}
static tpu_status_t null_memory_map(tpu_hal_chip_t* chip, uint64_t bytes, uint64_t* out_addr) {
  *out_addr = 0;
  return unavailable();
}
static void null_memory_unmap(tpu_hal_chip_t* chip, uint64_t addr, uint64_t bytes) {}
static bool null_owns_address(const tpu_hal_chip_t* chip, uint64_t addr) { return false; }
static tpu_status_t null_queue_create(tpu_hal_chip_t* chip, tpu_hal_queue_t** out_queue) {
  *out_queue = NULL;
  return unavailable();
}
static void null_queue_destroy(tpu_hal_queue_t* queue) {}
static tpu_status_t null_queue_submit(tpu_hal_queue_t* queue, tpu_hal_command_t* command) {
  if (command->kind == TPU_HAL_CMD_EXEC) {
    tpu_graph_release(command->u.exec.graph);
    tpu_program_release(command->u.exec.program);
  }
  return unavailable();
}
static tpu_status_t null_queue_wait_idle(tpu_hal_queue_t* queue) { return TPU_OK; }
static bool null_queue_is_idle(tpu_hal_queue_t* queue) { return true; }
static tpu_status_t null_queue_take_error(tpu_hal_queue_t* queue) { return TPU_OK; }
static void null_queue_add_stats(tpu_hal_queue_t* queue, tpu_queue_stats_t* out_stats) {}
static tpu_status_t null_event_create(bool timing, tpu_hal_event_t** out_event) {
  *out_event = NULL;
  return unavailable();
}
static void null_event_retain(tpu_hal_event_t* event) {}
static void null_event_release(tpu_hal_event_t* event) {}
static uint64_t null_event_seq(tpu_hal_event_t* event) { return 0; }
static bool null_event_reached(tpu_hal_event_t* event, uint64_t seq) { return true; }
static void null_event_wait(tpu_hal_event_t* event, uint64_t seq) {}
static int64_t null_event_time_ns(tpu_hal_event_t* event) { return -1; }

const tpu_hal_driver_t tpu_null_driver = {
    .name = "null",
    .chip_count = null_chip_count,
    .chip_open = null_chip_open,
    .chip_close = null_chip_close,
    .memory_map = null_memory_map,
    .memory_unmap = null_memory_unmap,
    .owns_address = null_owns_address,
    .queue_create = null_queue_create,
    .queue_destroy = null_queue_destroy,
    .queue_submit = null_queue_submit,
    .queue_wait_idle = null_queue_wait_idle,
    .queue_is_idle = null_queue_is_idle,
    .queue_take_error = null_queue_take_error,
    .queue_add_stats = null_queue_add_stats,
    .event_create = null_event_create,
    .event_retain = null_event_retain,
    .event_release = null_event_release,
    .event_next_seq = null_event_seq,
    .event_last_seq = null_event_seq,
    .event_reached = null_event_reached,
    .event_wait = null_event_wait,
    .event_time_ns = null_event_time_ns,
};
