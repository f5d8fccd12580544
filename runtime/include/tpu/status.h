/* tpu/status.h — how every fallible runtime call reports failure.
 *
 * A tpu_status_t is NULL on success (TPU_OK). On failure it is a heap object
 * carrying a code and a message; the caller owns it and must either return it
 * further up, or consume it with tpu_status_free(). Library code never aborts
 * the process: every failure travels up as a status.
 */
#ifndef TPU_STATUS_H_
#define TPU_STATUS_H_

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_status_code {
  TPU_CODE_OK = 0,
  TPU_CODE_INVALID_ARGUMENT,  /* bad shape, bad attribute: RuntimeError */
  TPU_CODE_INDEX_ERROR,       /* index out of range: IndexError */
  TPU_CODE_TYPE_ERROR,        /* dtype not accepted: TypeError */
  TPU_CODE_OUT_OF_MEMORY,     /* device memory exhausted: torch.OutOfMemoryError */
  TPU_CODE_UNIMPLEMENTED,     /* op/dtype not supported natively: NotImplementedError */
  TPU_CODE_INTERNAL,          /* a runtime invariant broke */
  TPU_CODE_UNAVAILABLE,       /* device missing / driver failed */
  TPU_CODE_DEADLINE_EXCEEDED, /* a collective's peers did not arrive in time: DistBackendError */
  TPU_CODE_ABORTED,           /* a communicator was aborted (by a peer's failure): DistBackendError */
} tpu_status_code_t;

typedef struct tpu_status_s* tpu_status_t;
#define TPU_OK ((tpu_status_t)0)

/* Creates a status (owned by the caller). printf-style message.
 * Never fails: if memory is short it returns a static, message-less status. */
tpu_status_t tpu_status_make(tpu_status_code_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
tpu_status_t tpu_status_makev(tpu_status_code_t code, const char* fmt, va_list ap);

/* Prefixes "what: " to the message of status (consumed), returns the result. */
tpu_status_t tpu_status_annotate(tpu_status_t status, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Accessors borrow; the message lives as long as the status. */
tpu_status_code_t tpu_status_code(tpu_status_t status);
const char* tpu_status_message(tpu_status_t status);
const char* tpu_status_code_name(tpu_status_code_t code);

/* Releases a status; NULL is fine. */
void tpu_status_free(tpu_status_t status);

#define TPU_RETURN_IF_ERROR(expr)          \
  do {                                     \
    tpu_status_t tpu_s_ = (expr);          \
    if (tpu_s_ != TPU_OK) return tpu_s_;   \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif /* TPU_STATUS_H_ */
