// autocast.cpp — torch.autocast("tpu"): PyTorch's standard policy lists
// (lower-precision ops such as matmul and linear, fp32 ops such as softmax
// and losses, promote ops) registered for AutocastPrivateUse1. The default
// autocast dtype for tpu is bfloat16 (set from Python at load).
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torch_tpu {
namespace {
using at::Tensor;
using namespace at::autocast;

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TPU_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TPU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TPU_FP32_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TPU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(TPU_LOWER)
  AT_FORALL_FP32(TPU_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TPU_FP32_OPT_DTYPE)
  AT_FORALL_PROMOTE(TPU_PROMOTE)
#undef TPU_LOWER
#undef TPU_FP32
#undef TPU_FP32_OPT_DTYPE
#undef TPU_PROMOTE
}

}  // namespace
}  // namespace torch_tpu
