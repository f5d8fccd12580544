/* scan.h — the scan family's private interface, shared by scan.c (rows,
 * parsing, the kernels), scan_ref.c (the reference kernel) and
 * tests/test_scan.c.
 *
 * cumsum/cumprod write in the result dtype (dtype=, else int64 for integer
 * and bool inputs) and accumulate in PyTorch CPU's acc_type of it (float64
 * for float32 and float64, float32 for half types, int64 for integers), one
 * element after the other along dim, so results equal CPU's bit for bit;
 * logcumsumexp (floating and complex) likewise; cummax/cummin (_cummax_helper,
 * _cummin_helper) write values and the index of the last extremum (NaN
 * wins, ties take the later index). Complex cumsum/cumprod/logcumsumexp accumulate in
 * double complex (CPU's complex<double> acc_type), acc = C128.
 */
#ifndef TPU_KERNELS_SCAN_H_
#define TPU_KERNELS_SCAN_H_

#include <stdbool.h>

#include "kernels/common/kernel_util.h"

typedef enum scan_kind { SC_CUMSUM = 0, SC_CUMPROD, SC_CUMMAX, SC_CUMMIN, SC_LOGCUMSUMEXP } scan_kind_t;

typedef struct scan_impl {
  scan_kind_t kind;
} scan_impl_t;

typedef struct scan_args {
  scan_kind_t kind;
  const tpu_view_t* in;
  int32_t dim; /* wrapped; 0 for a 0-dim input */
  int64_t n;   /* elements along dim */
  tpu_dtype_t acc; /* storage dtype of the accumulator (I64, F32, F64; C128: complex) */
  int32_t num_outputs;
  tpu_view_t shape[2];
} scan_args_t;

tpu_status_t tpu_scan_parse(const tpu_op_def_t* def, const tpu_node_t* node, scan_args_t* a);

/* The reference kernel: per output element, a plain loop over the elements
 * before it, in the accumulator type. */
tpu_status_t tpu_scan_reference(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx);

extern const tpu_op_family_t tpu_family_scan;

#endif /* TPU_KERNELS_SCAN_H_ */
