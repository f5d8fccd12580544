/* host_driver.h — what the host driver offers beyond the HAL table, for the
 * runtime's deferred mode (defer.c). Private to the runtime.
 *
 * The host driver's executable (tpu_hal_executable_t) is a fusion program:
 * the fusion compiler (src/fusion/) and the kernels (src/kernels/) are the
 * host driver's implementation, not part of the HAL. The deferred mode
 * compiles a flushed recording with that compiler (program cache, flush
 * memo) and hands the result to the driver as an opaque executable; under
 * any other driver it submits the recording without one (node by node).
 */
#ifndef TPU_HAL_HOST_DRIVER_H_
#define TPU_HAL_HOST_DRIVER_H_

#include "tpu/hal.h"

struct tpu_program;

/* The host driver's executable for `program`; takes the caller's reference
 * to it (released with the executable). NULL for NULL. */
tpu_hal_executable_t* tpu_host_executable(struct tpu_program* program);

#endif /* TPU_HAL_HOST_DRIVER_H_ */
