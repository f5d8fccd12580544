// status.cpp — runtime statuses become PyTorch exceptions here, and only here;
// and the dtype table between c10::ScalarType and tpu_dtype_t.
#include <c10/util/Exception.h>

#include "tpu_bridge.h"

namespace torch_tpu {

void check(tpu_status_t status) {
  if (status == TPU_OK) return;
  std::string msg = tpu_status_message(status);
  tpu_status_code_t code = tpu_status_code(status);
  tpu_status_free(status);
  switch (code) {
    case TPU_CODE_OUT_OF_MEMORY:
      TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
    case TPU_CODE_INDEX_ERROR:
      TORCH_CHECK_INDEX(false, msg);
    case TPU_CODE_TYPE_ERROR:
      TORCH_CHECK_TYPE(false, msg);
    case TPU_CODE_UNIMPLEMENTED:
      TORCH_CHECK_NOT_IMPLEMENTED(false, msg);
    case TPU_CODE_INVALID_ARGUMENT:
      TORCH_CHECK(false, msg);
    case TPU_CODE_DEADLINE_EXCEEDED:
    case TPU_CODE_ABORTED:
      C10_THROW_ERROR(DistBackendError, msg);
    default:
      TORCH_CHECK(false, "tpu runtime error (", tpu_status_code_name(code), "): ", msg);
  }
}

// One row per dtype the runtime knows, in TPU_DTYPE_ALL_LIST order.
#define TPU_SCALAR_TYPES(X)                                                    \
  X(BOOL, Bool) X(U8, Byte) X(I8, Char) X(I16, Short) X(I32, Int) X(I64, Long) \
  X(F16, Half) X(BF16, BFloat16) X(F32, Float) X(F64, Double)                  \
  X(C64, ComplexFloat) X(C128, ComplexDouble)                                 \
  X(U16, UInt16) X(U32, UInt32) X(U64, UInt64)

tpu_dtype_t to_tpu_dtype(c10::ScalarType type) {
  switch (type) {
#define TPU_X_(E, S)           \
  case c10::ScalarType::S:     \
    return TPU_DTYPE_##E;
    TPU_SCALAR_TYPES(TPU_X_)
#undef TPU_X_
    default:
      return TPU_DTYPE_INVALID;
  }
}

c10::ScalarType to_scalar_type(tpu_dtype_t dtype) {
  switch (dtype) {
#define TPU_X_(E, S)       \
  case TPU_DTYPE_##E:      \
    return c10::ScalarType::S;
    TPU_SCALAR_TYPES(TPU_X_)
#undef TPU_X_
    default:
      return c10::ScalarType::Undefined;
  }
}

bool make_view(const at::Tensor& t, tpu_view_t* v) {
  // Lazy conjugate/negative bits are not in the memory a view reads.
  if (t.dim() > TPU_MAX_DIMS || t.is_conj() || t.is_neg()) return false;
  v->dtype = to_tpu_dtype(t.scalar_type());
  if (v->dtype == TPU_DTYPE_INVALID) return false;
  v->addr = (uint64_t)(uintptr_t)t.data_ptr();
  v->ndim = (int32_t)t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) {
    v->sizes[d] = t.size(d);
    v->strides[d] = t.stride(d);
  }
  return true;
}

}  // namespace torch_tpu
