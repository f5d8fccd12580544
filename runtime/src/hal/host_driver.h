/* host_driver.h — the host driver's files among themselves (private to
 * src/hal/): host_driver.c (chips, queues, events, the table) and
 * host_compile.c (executable_prepare's compiler side).
 *
 * The host driver's executable (tpu_hal_executable_t) is a fusion program:
 * the fusion compiler (src/fusion/) and the kernels (src/kernels/) are the
 * host driver's implementation, not part of the HAL. Nothing above the HAL
 * includes this header: the runtime hands the driver a recording through
 * executable_prepare and gets an opaque executable back.
 */
#ifndef TPU_HAL_HOST_DRIVER_H_
#define TPU_HAL_HOST_DRIVER_H_

#include "hal/flush_memo.h"
#include "tpu/hal.h"

struct tpu_program;

/* The host driver's executable for `program`; takes the caller's reference
 * to it (released with the executable). NULL for NULL. */
tpu_hal_executable_t* tpu_host_executable(struct tpu_program* program);

/* executable_prepare for a queue whose memo of repeated recordings is
 * `memo` (host_compile.c): *out as tpu/hal.h describes it. */
tpu_status_t tpu_host_compile(tpu_flush_memo_t* memo, tpu_hal_recording_t* recording,
                              tpu_hal_prepared_t* out);

/* recording_text (host_compile.c): the program `recording` compiles to,
 * formatted as TORCH_TPU_DEFER_LOG=2 prints it, compiled on copies without
 * the program cache. */
tpu_status_t tpu_host_recording_text(const tpu_hal_recording_t* recording, char** out_text);

#endif /* TPU_HAL_HOST_DRIVER_H_ */
