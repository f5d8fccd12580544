// paged_attention.cpp — torch.ops.tpu.paged_kv_write_ and
// torch.ops.tpu.paged_attention, the paged KV-cache ops a serving engine's
// attention backend calls (runtime/src/kernels/attention/paged_attention.h
// says what they compute and assume).
//
// The schemas live in the "tpu" namespace (defined here, so they exist as
// soon as _C loads); this file registers their PrivateUse1 kernels, which
// build one runtime node by name and submit it to the current stream like
// dispatch.cpp: strict eager runs it as a graph of its own, DEFER_AND_FUSE
// appends it to the pending graph (paged_kv_write's caches are '!' inputs,
// so later readers order after the write). torch_tpu/paged_attention.py
// registers the CPU reference of the same schemas and the fake kernels.
// Metadata errors (shapes, dtypes) raise at the call; errors found in the
// data (a slot or table entry out of range, a sequence longer than its
// table) are the queued kernel's and raise at the next synchronisation,
// as any queued op's do.
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "tpu_bridge.h"

namespace torch_tpu {
namespace {

struct PagedNode {
  tpu_node_t node{};
  tpu_value_t inputs[6];
  tpu_view_t outputs[1];
  c10::DeviceIndex device = -1;

  void init(const char* op, std::initializer_list<const at::Tensor*> tensors) {
    node.op = tpu_op_lookup(op);
    TORCH_CHECK(node.op >= 0, op, ": the runtime has no such op");
    const at::Tensor& first = **tensors.begin();
    TORCH_CHECK(first.device().type() == c10::DeviceType::PrivateUse1, op,
                ": expected tpu tensors, got ", first.device());
    device = first.device().index();
    int i = 0;
    for (const at::Tensor* t : tensors) {
      tpu_value_t* v = &inputs[i++];
      std::memset(v, 0, sizeof(*v));
      TORCH_CHECK(t->defined() && t->device() == first.device(), op,
                  ": expected all tensors on ", first.device(), ", got ",
                  t->defined() ? t->device().str() : std::string("None"));
      TORCH_CHECK(make_view(*t, &v->u.view), op, ": a tensor of dtype ", t->scalar_type(),
                  " or ", t->dim(), " dims the runtime cannot take");
      v->kind = TPU_VALUE_VIEW;
    }
    node.inputs = inputs;
    node.num_inputs = i;
    node.outputs = outputs;
    node.num_outputs = tpu_op_num_outputs(node.op);
  }
  void submit() {
    tpu_stream_t* stream = current_runtime_stream(device);
    check(tpu_stream_submit_node(stream, &node));
    maybe_block(stream);
  }
};

tpu_attr_t attr(tpu_attr_kind_t kind, int64_t i, double f) {
  tpu_attr_t a;
  std::memset(&a, 0, sizeof(a));
  a.kind = kind;
  if (kind == TPU_ATTR_FLOAT) a.u.f = f;
  else a.u.i = i;
  return a;
}

void paged_kv_write_(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                     const at::Tensor& value_cache, const at::Tensor& slot_mapping) {
  PagedNode n;
  n.init("paged_kv_write", {&key, &value, &key_cache, &value_cache, &slot_mapping});
  n.node.num_attrs = 0;
  c10::DeviceGuard guard(key.device());
  check(tpu_op_check(&n.node));
  n.submit();
  count_native("tpu::paged_kv_write_");
}

at::Tensor paged_attention(const at::Tensor& query, const at::Tensor& key_cache,
                           const at::Tensor& value_cache, const at::Tensor& query_start_loc,
                           const at::Tensor& seq_lens, const at::Tensor& block_table,
                           double scale, bool causal, int64_t sliding_window, double softcap) {
  PagedNode n;
  n.init("paged_attention",
         {&query, &key_cache, &value_cache, &query_start_loc, &seq_lens, &block_table});
  n.node.attrs[0] = attr(TPU_ATTR_FLOAT, 0, scale);
  n.node.attrs[1] = attr(TPU_ATTR_BOOL, causal, 0);
  n.node.attrs[2] = attr(TPU_ATTR_INT, sliding_window, 0);
  n.node.attrs[3] = attr(TPU_ATTR_FLOAT, 0, softcap);
  n.node.num_attrs = 4;
  c10::DeviceGuard guard(query.device());
  check(tpu_op_infer(&n.node, n.outputs));
  check(tpu_op_check(&n.node));
  const tpu_view_t& o = n.outputs[0];
  at::Tensor out = at::empty({o.sizes[0], o.sizes[1], o.sizes[2]}, query.options());
  TORCH_CHECK(make_view(out, &n.outputs[0]), "paged_attention: output view");
  n.submit();
  count_native("tpu::paged_attention");
  return out;
}

}  // namespace
}  // namespace torch_tpu

TORCH_LIBRARY_FRAGMENT(tpu, m) {
  m.def(
      "paged_kv_write_(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, "
      "Tensor slot_mapping) -> ()");
  m.def(
      "paged_attention(Tensor query, Tensor key_cache, Tensor value_cache, "
      "Tensor query_start_loc, Tensor seq_lens, Tensor block_table, float scale, "
      "bool causal=True, int sliding_window=-1, float softcap=0.0) -> Tensor");
}

TORCH_LIBRARY_IMPL(tpu, PrivateUse1, m) {
  m.impl("paged_kv_write_", TORCH_FN(torch_tpu::paged_kv_write_));
  m.impl("paged_attention", TORCH_FN(torch_tpu::paged_attention));
}
