/* tpu/config.h — every setting the runtime (and the bridge) takes from the
 * environment, in one table.
 *
 * TPU_CONFIG_LIST is the only place a variable is named. The whole table is
 * read once, on the first call of any function below (thread-safe), each
 * value parsed by its kind:
 *   BOOL   "0" or "1";
 *   INT    a decimal integer within [min, max];
 *   FLOAT  a decimal number within [min, max];
 *   STRING one of the entry's choices (a '|'-separated list).
 * A variable set to something else is not used: its entry keeps the default
 * and is marked invalid, one line on stderr says so when the table is read,
 * and `python -m torch_tpu` lists it. Later changes to the environment do not
 * reach the runtime (as with PyTorch's own variables); a test that needs
 * another value calls tpu_config_set.
 */
#ifndef TPU_CONFIG_H_
#define TPU_CONFIG_H_

#include <stdbool.h>
#include <stdint.h>

#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_config_kind {
  TPU_CONFIG_BOOL = 0,
  TPU_CONFIG_INT,
  TPU_CONFIG_FLOAT,
  TPU_CONFIG_STRING,
} tpu_config_kind_t;

/* X(ID, variable, kind, default, min, max, choices, what it does). min/max
 * bound INT and FLOAT values; choices list a STRING's values. */
#define TPU_CONFIG_LIST(X)                                                                          \
  X(DRIVER, "TORCH_TPU_DRIVER", STRING, "host", 0, 0, "host|null",                                 \
    "the HAL driver: host (the software TPU) or null (no chips)")                                  \
  X(NUM_CHIPS, "TORCH_TPU_NUM_CHIPS", INT, "1", 1, 8, NULL, "chips of the host driver")             \
  X(MEMORY_GB, "TORCH_TPU_MEMORY_GB", FLOAT, "16", 0.001, 1048576, NULL,                            \
    "memory capacity of each chip, GiB")                                                           \
  X(LAUNCH_BLOCKING, "TPU_LAUNCH_BLOCKING", BOOL, "0", 0, 0, NULL,                                  \
    "1: every op waits for its completion")                                                        \
  X(NUM_THREADS, "TORCH_TPU_NUM_THREADS", INT, "0", 0, 64, NULL,                                    \
    "compute pool threads (0: one per online core)")                                               \
  X(POOL_SPIN_US, "TORCH_TPU_POOL_SPIN_US", INT, "100", 0, 100000, NULL,                            \
    "most microseconds an idle compute thread polls before sleeping")                              \
  X(PIN_THREADS, "TORCH_TPU_PIN_THREADS", STRING, "auto", 0, 0, "auto|on|off",                       \
    "pin compute threads to cores (auto: when the pool spans every core, one rank per host)")     \
  X(QUEUE_SPIN_US, "TORCH_TPU_QUEUE_SPIN_US", INT, "200", 0, 100000, NULL,                          \
    "most microseconds an idle queue worker polls before sleeping")                                \
  X(DEVICE_SCHED, "TORCH_TPU_DEVICE_SCHED", STRING, "batch", 0, 0, "batch|normal",                   \
    "the device threads' policy (batch: waking them never preempts the host thread)")             \
  X(MXU, "TORCH_TPU_MXU", BOOL, "1", 0, 0, NULL, "0: no matrix unit (half GEMMs widened to float32)") \
  X(WEIGHT_CACHE_MB, "TORCH_TPU_WEIGHT_CACHE_MB", INT, "1024", 0, 1048576, NULL,                    \
    "the matrix unit's packed-weight cache, MiB (0: off)")                                         \
  X(CONV_SPLIT, "TORCH_TPU_CONV_SPLIT", BOOL, "1", 0, 0, NULL,                                      \
    "0: convolutions run on one oneDNN team instead of split over the compute pool")               \
  X(CONV_GEMM, "TORCH_TPU_CONV_GEMM", BOOL, "1", 0, 0, NULL,                                        \
    "0: bfloat16 1x1 convolutions run on oneDNN's primitives, not as GEMMs")                       \
  X(GEMM_EPILOGUE, "TORCH_TPU_GEMM_EPILOGUE", BOOL, "1", 0, 0, NULL,                                \
    "0: pointwise work after a GEMM is not folded into it (initial value)")                        \
  X(FUSION_DIRECT, "TORCH_TPU_FUSION_DIRECT", BOOL, "1", 0, 0, NULL,                                \
    "0: fused row groups always run through scratch tiles")                                        \
  X(DEFER_AND_FUSE, "TORCH_TPU_DEFER_AND_FUSE", BOOL, "0", 0, 0, NULL,                              \
    "1: DEFER_AND_FUSE is the initial global mode")                                                \
  X(DEFER_MAX_NODES, "TORCH_TPU_DEFER_MAX_NODES", INT, "1024", 1, 1048576, NULL,                    \
    "nodes a pending graph holds before it is flushed")                                            \
  X(DEFER_PIPELINE, "TORCH_TPU_DEFER_PIPELINE", BOOL, "1", 0, 0, NULL,                              \
    "0: no pipeline cut after a heavy node")                                                       \
  X(DEFER_SCHEDULE, "TORCH_TPU_DEFER_SCHEDULE", BOOL, "1", 0, 0, NULL,                              \
    "0: a flush keeps the recorded order (no phase 0)")                                            \
  X(DEFER_MEMO_CHECK, "TORCH_TPU_DEFER_MEMO_CHECK", BOOL, "0", 0, 0, NULL,                          \
    "1: every flush memo hit is checked against the full front end")                               \
  X(DEFER_LOG, "TORCH_TPU_DEFER_LOG", INT, "0", 0, 2, NULL, "1-2: log flushes and cuts on stderr")  \
  X(DIST_CHUNK_KB, "TPU_DIST_CHUNK_KB", INT, "2048", 1, 1048576, NULL,                              \
    "tpu_dist: bytes of each rank's collective slot, KiB")                                         \
  X(DIST_DIRECT, "TPU_DIST_DIRECT", BOOL, "1", 0, 0, NULL,                                          \
    "tpu_dist: 0: large messages go through the slots, never direct")                              \
  X(DIST_DIRECT_MIN_KB, "TPU_DIST_DIRECT_MIN_KB", INT, "1024", 1, 1048576, NULL,                    \
    "tpu_dist: smallest message read directly from its owner, KiB")                                \
  X(DIST_STREAM_MIN_KB, "TPU_DIST_STREAM_MIN_KB", INT, "32768", 1, 1048576, NULL,                   \
    "tpu_dist: smallest copy written with streaming stores, KiB")                                  \
  X(FALLBACK, "TORCH_TPU_FALLBACK", STRING, "warn", 0, 0, "warn|silent|error",                      \
    "CPU fallback: warn once per op, silent, or error (NotImplementedError)")

typedef enum tpu_config_id {
#define TPU_CONFIG_ENUM_(id, var, kind, dflt, lo, hi, choices, help) TPU_CONFIG_##id,
  TPU_CONFIG_LIST(TPU_CONFIG_ENUM_)
#undef TPU_CONFIG_ENUM_
      TPU_CONFIG_COUNT
} tpu_config_id_t;

/* One entry as the table holds it. Strings are static (name, help, choices,
 * default) or owned by the table (value, raw); borrowed by the caller until
 * the next tpu_config_set of the entry. */
typedef struct tpu_config_entry {
  const char* name;     /* the environment variable */
  tpu_config_kind_t kind;
  const char* help;
  const char* choices;  /* STRING: '|'-separated values; NULL otherwise */
  const char* fallback; /* the default, as text */
  const char* raw;      /* the variable's text; NULL when unset */
  bool invalid;         /* raw did not parse: the default is in use */
  int64_t i;            /* BOOL (0/1) and INT values */
  double f;             /* FLOAT values */
  const char* s;        /* STRING values (one of choices) */
} tpu_config_entry_t;

/* The value in use (unset or invalid: the default). tpu_config_int serves
 * BOOL and INT entries, tpu_config_float FLOAT ones, tpu_config_string
 * STRING ones (a static string, never NULL). */
bool tpu_config_bool(tpu_config_id_t id);
int64_t tpu_config_int(tpu_config_id_t id);
double tpu_config_float(tpu_config_id_t id);
const char* tpu_config_string(tpu_config_id_t id);

/* Entry `id` (0 <= id < TPU_CONFIG_COUNT) into *out_entry (borrowed strings);
 * INVALID_ARGUMENT for another id or a NULL out_entry. */
tpu_status_t tpu_config_entry(int32_t id, tpu_config_entry_t* out_entry);

/* Replaces entry `id`'s value by `text` parsed as the environment would be
 * (NULL: as if unset); INVALID_ARGUMENT, entry unchanged, when it does not
 * parse. For tests and comparisons: not while work that reads it runs. */
tpu_status_t tpu_config_set(tpu_config_id_t id, const char* text);

#ifdef __cplusplus
}
#endif

#endif /* TPU_CONFIG_H_ */
