// histogram.cpp — torch.histogramdd's first step, aten::_histogramdd_bin_edges,
// on the runtime's histogram family (runtime/src/kernels/reduce/histogram.c).
//
// Its schema returns Tensor[] (one edges tensor per coordinate of the input,
// self viewed as (M, N)), which a row's fixed outputs do not express. Here:
// the host-side checks PyTorch makes first (rank, the range's length and
// values, the number of bin counts; same exception type and message), then
// one "histogramdd_bin_edges" node per coordinate d, given that coordinate's
// bin count and its two range values; the node takes the column's min and max
// on the device when no range is given, so nothing is read back. Arguments
// the row refuses (another dtype: CPU raises or computes; a bin count below
// -1) take the counted CPU fallback, as any op. The counting steps
// (_histogramdd_from_bin_cts / _from_bin_tensors) are ordinary rows.
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cstring>

#include "tpu_bridge.h"

namespace torch_tpu {
namespace {

void histogramdd_bin_edges(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // (Tensor self, int[] bins, *, float[]? range, Tensor? weight, bool density) -> Tensor[]
  auto args = torch::jit::last(*stack, 5);
  const at::Tensor self = args[0].toTensor();
  const std::vector<int64_t> bins = args[1].toIntVector();
  std::optional<std::vector<double>> range;
  if (!args[2].isNone()) range = args[2].toDoubleVector();
  TORCH_CHECK(self.dim() >= 2, "torch.histogramdd: input tensor should have at least 2 dimensions");
  const int64_t n = self.size(-1);
  if (range)
    TORCH_CHECK((int64_t)range->size() == 2 * n, "torch.histogramdd: for a ", n,
                "-dimensional histogram range should have ", 2 * n, " elements, but got ",
                range->size());
  const tpu_op_id_t row = tpu_op_lookup("histogramdd_bin_edges");
  const c10::DeviceIndex device = self.device().index();
  const bool takes = row >= 0 && (self.scalar_type() == at::kFloat ||
                                  self.scalar_type() == at::kDouble);
  if (takes && range)  // the CPU's order: the range's checks come before the bins' count
    for (int64_t d = 0; d < n; ++d) {
      const double lo = (*range)[2 * d], hi = (*range)[2 * d + 1];
      TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi), "torch.histogramdd: dimension ", d,
                  "'s range [", lo, ", ", hi, "] is not finite");
      TORCH_CHECK(lo <= hi, "torch.histogramdd: min should not exceed max, but got min ", lo,
                  " max ", hi, " for dimension ", d);
    }
  if (takes)
    TORCH_CHECK(n == (int64_t)bins.size(),
                "histogramdd: The size of bins must be equal to the innermost dimension of the "
                "input.");
  // One node per coordinate, all checked before any is submitted.
  tpu_value_t input{};
  std::vector<tpu_node_t> nodes(takes ? (size_t)n : 0);
  std::vector<tpu_view_t> outs(nodes.size());
  std::vector<at::Tensor> edges;
  bool native = takes && self.device().type() == c10::DeviceType::PrivateUse1 &&
                make_view(self, &input.u.view);
  input.kind = TPU_VALUE_VIEW;
  for (int64_t d = 0; d < (int64_t)nodes.size() && native; ++d) {
    tpu_node_t& node = nodes[d];
    node.op = row;
    node.inputs = &input;
    node.num_inputs = 1;
    node.num_attrs = 3;
    node.attrs[0].kind = TPU_ATTR_INT;
    node.attrs[0].u.i = bins[d];
    node.attrs[1].kind = TPU_ATTR_INT;
    node.attrs[1].u.i = d;
    if (range) {
      node.attrs[2].kind = TPU_ATTR_FLOATS;
      node.attrs[2].count = 2;
      node.attrs[2].u.floats[0] = (*range)[2 * d];
      node.attrs[2].u.floats[1] = (*range)[2 * d + 1];
    }
    node.num_outputs = 1;
    node.outputs = &outs[d];
    tpu_status_t s = tpu_op_infer(&node, &outs[d]);
    if (s == TPU_OK) s = tpu_op_check(&node);
    if (tpu_status_code(s) == TPU_CODE_UNIMPLEMENTED) {
      tpu_status_free(s);
      native = false;
      break;
    }
    check(s);
    edges.push_back(at::empty({outs[d].sizes[0]}, self.options()));
    TORCH_INTERNAL_ASSERT(make_view(edges.back(), &outs[d]));
  }
  if (!native) {
    counted_fallback(op, stack);
    return;
  }
  c10::DeviceGuard guard(self.device());
  tpu_stream_t* stream = current_runtime_stream(device);
  for (tpu_node_t& node : nodes) {
    check(tpu_stream_submit_node(stream, &node));
    maybe_block(stream);
  }
  count_native("_histogramdd_bin_edges");
  torch::jit::drop(*stack, 5);
  torch::jit::push(*stack, c10::List<at::Tensor>(edges));
}

}  // namespace
}  // namespace torch_tpu

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_histogramdd_bin_edges",
         torch::CppFunction::makeFromBoxedFunction<&torch_tpu::histogramdd_bin_edges>());
}
