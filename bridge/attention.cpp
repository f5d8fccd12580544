// attention.cpp — scaled_dot_product_attention's route to the runtime's
// attention family (runtime/src/kernels/attention/attention.c).
//
// F.scaled_dot_product_attention asks the device's _fused_sdp_choice stub
// for a backend. Ours answers "overrideable" when the runtime's check for the
// sdpa_flash row accepts the arguments (dtypes, ranks, head dims, GQA
// shapes), else "math" (which composes native ops). PyTorch then calls
// _scaled_dot_product_fused_attention_overrideable (bool masks already
// turned into additive float ones, grouped K/V heads passed as they are) and
// autograd its _backward. Those schemas return SymInts and nine values,
// which the generic binding does not express, so both are registered here:
// each builds one runtime node by name and submits it like dispatch.cpp.
// Dropout draws Philox counters offset + ((b*H + h)*L + i)*S + j; the forward
// returns seed and offset as CPU int64 scalars, which the backward reads to
// regenerate the same mask.
#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "tpu_bridge.h"

namespace torch_tpu {
namespace {

constexpr int64_t kMathBackend = 0;          // sdp::SDPBackend::math
constexpr int64_t kOverrideableBackend = 4;  // sdp::SDPBackend::overrideable

tpu_attr_t attr_none() {
  tpu_attr_t a;
  std::memset(&a, 0, sizeof(a));
  return a;
}
tpu_attr_t attr_int(int64_t v, tpu_attr_kind_t kind = TPU_ATTR_INT) {
  tpu_attr_t a = attr_none();
  a.kind = kind;
  a.u.i = v;
  return a;
}
tpu_attr_t attr_float(std::optional<double> v) {
  tpu_attr_t a = attr_none();
  if (v.has_value()) {
    a.kind = TPU_ATTR_FLOAT;
    a.u.f = *v;
  }
  return a;
}

// A tensor as a node input: None when undefined; false when it is not a tpu
// tensor of `device` (or has no view).
bool to_value(const at::Tensor& t, c10::DeviceIndex device, tpu_value_t* v) {
  std::memset(v, 0, sizeof(*v));
  if (!t.defined()) return true;
  if (t.device().type() != c10::DeviceType::PrivateUse1 || t.device().index() != device ||
      t.is_nested())
    return false;
  v->kind = TPU_VALUE_VIEW;
  return make_view(t, &v->u.view);
}

at::Tensor alloc(const tpu_view_t& v, c10::DeviceIndex device) {
  std::vector<int64_t> sizes(v.sizes, v.sizes + v.ndim), strides(v.strides, v.strides + v.ndim);
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device));
  return at::detail::empty_strided_generic(sizes, strides, device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           to_scalar_type(v.dtype));
}

struct Node {
  tpu_node_t node{};
  tpu_value_t inputs[8];
  tpu_view_t outputs[4];
  c10::DeviceIndex device = -1;

  // Fills the node for op `name`; false when an input is not on our device.
  bool init(const char* name, std::initializer_list<const at::Tensor*> tensors,
            std::initializer_list<tpu_attr_t> attrs) {
    node.op = tpu_op_lookup(name);
    if (node.op < 0) return false;
    device = (*tensors.begin())->device().index();
    int i = 0;
    for (const at::Tensor* t : tensors)
      if (!to_value(*t, device, &inputs[i++])) return false;
    node.inputs = inputs;
    node.num_inputs = i;
    node.outputs = outputs;
    node.num_outputs = tpu_op_num_outputs(node.op);
    node.num_attrs = 0;
    for (const tpu_attr_t& a : attrs) node.attrs[node.num_attrs++] = a;
    return true;
  }
  // Output metadata and the runtime's check: TPU_OK when it runs natively.
  tpu_status_t infer_and_check() {
    TPU_RETURN_IF_ERROR(tpu_op_infer(&node, outputs));
    return tpu_op_check(&node);
  }
  void submit() {
    tpu_stream_t* stream = current_runtime_stream(device);
    check(tpu_stream_submit_node(stream, &node));
    maybe_block(stream);
  }
};

bool on_tpu(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// query/key/value as the kernel takes them: all 3-D or all 4-D with equal
// batch sizes (and heads, or grouped heads). Operands that broadcast (a 3-D
// query with 4-D key/value, size-1 batch or head dims) are expanded to 4-D
// views of the broadcast shape (no copies); `expanded` says so, and the
// output is then viewed back to the broadcast rank. False: not expressible.
struct Operands {
  at::Tensor q, k, v;
  bool expanded = false;
  int64_t out_rank = 4;
};

bool prepare(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool allow_gqa,
             Operands* o) {
  o->q = q, o->k = k, o->v = v;
  if (q.dim() < 3 || q.dim() > 4 || k.dim() < 3 || k.dim() > 4 || v.dim() < 3 || v.dim() > 4)
    return false;
  o->out_rank = std::max({q.dim(), k.dim(), v.dim()});
  auto pad = [](const at::Tensor& t) { return t.dim() == 4 ? t : t.unsqueeze(0); };
  at::Tensor q4 = pad(q), k4 = pad(k), v4 = pad(v);
  if (q.dim() == k.dim() && k.dim() == v.dim() && q4.size(0) == k4.size(0) &&
      k4.size(0) == v4.size(0) && k4.size(1) == v4.size(1) &&
      (q4.size(1) == k4.size(1) || (allow_gqa && k4.size(1) > 0 && q4.size(1) % k4.size(1) == 0)))
    return true;  // the kernel's own shapes
  auto bc = [](int64_t a, int64_t b, int64_t* out) {
    if (a != b && a != 1 && b != 1) return false;
    *out = a == 1 ? b : a;
    return true;
  };
  int64_t B, Hkv, H;
  if (!bc(q4.size(0), k4.size(0), &B) || !bc(B, v4.size(0), &B) ||
      !bc(k4.size(1), v4.size(1), &Hkv))
    return false;
  H = q4.size(1);
  if (H != Hkv && Hkv == 1) Hkv = H;                 // key/value heads broadcast
  else if (H != Hkv && H == 1) H = Hkv;              // query heads broadcast
  else if (H != Hkv && !(allow_gqa && H % Hkv == 0)) return false;
  o->q = q4.expand({B, H, q4.size(2), q4.size(3)});
  o->k = k4.expand({B, Hkv, k4.size(2), k4.size(3)});
  o->v = v4.expand({B, Hkv, v4.size(2), v4.size(3)});
  o->expanded = true;
  return true;
}

// torch.compile traces with tensors that have no data (FakeTensor,
// FunctionalTensor) and maybe symbolic sizes; the stub is called with them.
bool traced(const at::Tensor& t) {
  if (!t.defined()) return false;
  c10::DispatchKeySet ks = t.key_set();
  return ks.has(c10::DispatchKey::Python) || ks.has(c10::DispatchKey::Functionalize) ||
         t.unsafeGetTensorImpl()->has_symbolic_sizes_strides() || !t.has_storage();
}

// A size as the check sees it while tracing: a symbolic one (never 0 or 1:
// Dynamo specializes those) stands in as a large value, equal for equal
// expressions, so shape equalities hold without adding a guard. Below 2^15,
// so that a 4-d view's element count fits the runtime's checked int64
// arithmetic (tpu_node_validate).
int64_t traced_size(const c10::SymInt& s) {
  if (auto v = s.maybe_as_int()) return *v;
  return 1024 + (int64_t)(std::hash<std::string>{}(s.toSymNodeImplUnowned()->str()) % (1 << 14));
}

// A head dim (the last one): the kernel takes 1..256, so a symbolic one adds
// the guard `dim <= 256` (not a specialisation) and stands in below it.
int64_t traced_head_dim(const c10::SymInt& s) {
  if (auto v = s.maybe_as_int()) return *v;
  if (!s.sym_le(c10::SymInt(256)).guard_bool(__FILE__, __LINE__)) return 1 << 20;
  return 2 + (int64_t)(std::hash<std::string>{}(s.toSymNodeImplUnowned()->str()) % 255);
}

// The choice for traced tensors: their shapes and dtypes only (no data
// address is read; operands that need broadcasting get the math backend).
int64_t traced_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                      const at::Tensor& mask, double dropout_p, bool is_causal,
                      std::optional<double> scale) {
  Node n;
  n.node.op = tpu_op_lookup("sdpa_flash");
  if (n.node.op < 0) return kMathBackend;
  n.device = query.device().index();
  const at::Tensor* ts[4] = {&query, &key, &value, &mask};
  for (int i = 0; i < 4; ++i) {
    const at::Tensor& t = *ts[i];
    tpu_value_t* v = &n.inputs[i];
    std::memset(v, 0, sizeof(*v));
    if (!t.defined()) continue;
    if (!on_tpu(t) || t.device().index() != n.device || t.is_nested() || t.dim() > TPU_MAX_DIMS)
      return kMathBackend;
    v->kind = TPU_VALUE_VIEW;
    v->u.view.dtype = to_tpu_dtype(t.scalar_type());
    if (v->u.view.dtype == TPU_DTYPE_INVALID) return kMathBackend;
    v->u.view.addr = 4096 * (uint64_t)(i + 1);  // never read
    v->u.view.ndim = (int32_t)t.dim();
    for (int64_t d = 0; d < t.dim(); ++d) {
      v->u.view.sizes[d] = d + 1 == t.dim() && i < 3 ? traced_head_dim(t.sym_size(d))
                                                    : traced_size(t.sym_size(d));
      v->u.view.strides[d] = traced_size(t.sym_stride(d));
    }
  }
  n.node.inputs = n.inputs;
  n.node.num_inputs = 4;
  n.node.outputs = n.outputs;
  n.node.num_outputs = tpu_op_num_outputs(n.node.op);
  tpu_attr_t attrs[6] = {attr_float(dropout_p), attr_int(is_causal, TPU_ATTR_BOOL),
                         attr_int(0, TPU_ATTR_BOOL), attr_float(scale), attr_int(0), attr_int(0)};
  n.node.num_attrs = 6;
  for (int i = 0; i < 6; ++i) n.node.attrs[i] = attrs[i];
  tpu_status_t s = n.infer_and_check();
  bool ok = s == TPU_OK;
  tpu_status_free(s);
  return ok ? kOverrideableBackend : kMathBackend;
}

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p,
                         bool is_causal, std::optional<double> scale, bool enable_gqa) {
  if (!at::globalContext().userEnabledOverrideableSDP()) return kMathBackend;
  if (!on_tpu(query) || !on_tpu(key) || !on_tpu(value)) return kMathBackend;
  if (traced(query) || traced(key) || traced(value) || (attn_mask && traced(*attn_mask))) {
    auto sz = [](const at::Tensor& t, int64_t d) { return traced_size(t.sym_size(d)); };
    if (query.dim() < 3 || query.dim() > 4 || query.dim() != key.dim() ||
        key.dim() != value.dim() || sz(query, 0) != sz(key, 0) || sz(key, 0) != sz(value, 0) ||
        (query.dim() == 4 && !enable_gqa && sz(query, 1) != sz(key, 1)))
      return kMathBackend;  // as prepare() decides for real tensors (no broadcasting here)
    return traced_choice(query, key, value, attn_mask ? *attn_mask : at::Tensor(), dropout_p,
                         is_causal, scale);
  }
  Operands ops;
  if (!prepare(query, key, value, enable_gqa, &ops)) return kMathBackend;  // math raises errors
  at::Tensor mask = attn_mask.has_value() ? *attn_mask : at::Tensor();
  Node n;
  if (!n.init("sdpa_flash", {&ops.q, &ops.k, &ops.v, &mask},
              {attr_float(dropout_p), attr_int(is_causal, TPU_ATTR_BOOL),
               attr_int(0, TPU_ATTR_BOOL), attr_float(scale), attr_int(0), attr_int(0)}))
    return kMathBackend;
  tpu_status_t s = n.infer_and_check();
  bool ok = s == TPU_OK;
  tpu_status_free(s);
  return ok ? kOverrideableBackend : kMathBackend;
}

// The forward's output in the query's memory layout, as PyTorch's meta
// function of the op (alloc_with_matching_layout) tells torch.compile's
// traced graphs, which then view it without a copy (the kernel writes
// through strides).
at::Tensor alloc_like_query(const at::Tensor& query, const at::Tensor& value) {
  std::vector<int64_t> shape = query.sizes().vec();
  shape.back() = value.size(-1);
  if (query.sizes().vec() == shape) return at::empty_like(query.transpose(1, 2)).transpose(1, 2);
  if (query.dim() != 4) return at::empty(shape, query.options());
  std::vector<int64_t> order = {0, 1, 2, 3};
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return query.stride(a) > query.stride(b); });
  std::vector<int64_t> permuted(4), back(4);
  for (int64_t i = 0; i < 4; ++i) permuted[i] = shape[order[i]], back[order[i]] = i;
  return at::empty(permuted, query.options()).permute(back);
}

at::Tensor cpu_scalar(uint64_t v) {
  return at::scalar_tensor((int64_t)v, at::TensorOptions().dtype(at::kLong));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
           at::Tensor, at::Tensor>
sdpa_forward(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
             const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
             bool return_debug_mask, std::optional<double> scale) {
  at::Tensor bias = attn_bias.has_value() ? *attn_bias : at::Tensor();
  Node n;
  TORCH_CHECK(on_tpu(query), "expected a tpu query");
  Operands ops;
  TORCH_CHECK_NOT_IMPLEMENTED(prepare(query, key, value, true, &ops),
                              "scaled_dot_product_attention: shapes the tpu kernel does not take");
  TORCH_CHECK(n.init("sdpa_flash", {&ops.q, &ops.k, &ops.v, &bias},
                     {attr_float(dropout_p), attr_int(is_causal, TPU_ATTR_BOOL),
                      attr_int(return_debug_mask, TPU_ATTR_BOOL), attr_float(scale), attr_int(0),
                      attr_int(0)}),
              "scaled_dot_product_attention: all tensors must be on ", query.device());
  c10::DeviceGuard guard(query.device());
  check(n.infer_and_check());
  at::Tensor out = ops.expanded ? alloc(n.outputs[0], n.device) : alloc_like_query(query, value),
             lse = alloc(n.outputs[1], n.device);
  make_view(out, &n.outputs[0]);
  make_view(lse, &n.outputs[1]);
  uint64_t seed = 0, offset = 0;
  if (dropout_p > 0) {  // one Philox counter per element of the attention matrix
    int64_t rows = 1;  // B * H * L
    for (int64_t d = 0; d + 1 < ops.q.dim(); ++d) rows *= ops.q.size(d);
    int64_t count = std::max<int64_t>(1, rows * ops.k.size(-2));
    reserve_philox(std::nullopt, n.device, (uint64_t)count, &seed, &offset);
    n.node.attrs[4] = attr_int((int64_t)seed);
    n.node.attrs[5] = attr_int((int64_t)offset);
  }
  n.submit();
  count_native("_scaled_dot_product_fused_attention_overrideable");
  auto empty = at::empty({0}, query.options().dtype(at::kLong));
  if (ops.expanded && ops.out_rank == 3) out = out.squeeze(0);
  return {out,
          lse,
          empty,
          empty,
          c10::SymInt(query.size(-2)),
          c10::SymInt(key.size(-2)),
          cpu_scalar(seed),
          cpu_scalar(offset),
          at::empty({0}, query.options())};
}

uint64_t scalar_of(const at::Tensor& t) {
  if (!t.defined() || t.numel() != 1) return 0;
  return (uint64_t)t.item<int64_t>();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
    const at::Tensor& value, const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask,
    const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& cum_seq_q,
    const at::Tensor& cum_seq_k, c10::SymInt max_q, c10::SymInt max_k, double dropout_p,
    bool is_causal, const at::Tensor& philox_seed, const at::Tensor& philox_offset,
    std::optional<double> scale) {
  tpu_attr_t mask = attr_none();
  mask.kind = TPU_ATTR_INTS;
  mask.count = 4;
  for (int i = 0; i < 4; ++i) mask.u.ints[i] = grad_input_mask[i];
  uint64_t seed = dropout_p > 0 ? scalar_of(philox_seed) : 0;
  uint64_t offset = dropout_p > 0 ? scalar_of(philox_offset) : 0;
  Node n;
  TORCH_CHECK(on_tpu(query), "expected a tpu query");
  Operands ops;
  TORCH_CHECK_NOT_IMPLEMENTED(prepare(query, key, value, true, &ops),
                              "scaled_dot_product_attention: shapes the tpu kernel does not take");
  at::Tensor go = grad_out, o = out, bias = attn_bias;
  if (ops.expanded && ops.out_rank == 3) go = go.unsqueeze(0), o = o.unsqueeze(0);
  const c10::ScalarType dtype = query.scalar_type();
  const bool half = dtype == at::kHalf || dtype == at::kBFloat16;
  if (ops.expanded && half) {  // broadcast gradients are summed in float32, rounded once
    for (at::Tensor* t : {&go, &o, &ops.q, &ops.k, &ops.v}) *t = t->to(at::kFloat);
    if (bias.defined() && bias.scalar_type() == dtype) bias = bias.to(at::kFloat);
  }
  TORCH_CHECK(n.init("sdpa_flash_backward",
                     {&go, &ops.q, &ops.k, &ops.v, &bias, &o, &logsumexp},
                     {mask, attr_float(dropout_p), attr_int(is_causal, TPU_ATTR_BOOL),
                      attr_float(scale), attr_int((int64_t)seed), attr_int((int64_t)offset)}),
              "scaled_dot_product_attention backward: all tensors must be on ", query.device());
  c10::DeviceGuard guard(query.device());
  check(n.infer_and_check());
  at::Tensor grads[4];
  for (int i = 0; i < 4; ++i) {
    if (i == 3 && !(attn_bias.defined() && grad_input_mask[3])) continue;  // an empty view
    // the layout of the operand, as the meta function promises torch.compile
    grads[i] = i < 3 && !ops.expanded ? at::empty_like(i == 0 ? query : i == 1 ? key : value)
                                      : alloc(n.outputs[i], n.device);
    make_view(grads[i], &n.outputs[i]);
  }
  n.submit();
  count_native("_scaled_dot_product_fused_attention_overrideable_backward");
  if (ops.expanded) {  // sum over the broadcast dims (native reductions)
    const at::Tensor* orig[3] = {&query, &key, &value};
    for (int i = 0; i < 3; ++i)
      grads[i] = at::sum_to(grads[i], orig[i]->sizes()).view(orig[i]->sizes()).to(dtype);
    if (grads[3].defined()) grads[3] = grads[3].to(attn_bias.scalar_type());
  }
  return {grads[0], grads[1], grads[2], grads[3]};
}

}  // namespace
}  // namespace torch_tpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_tpu::fused_sdp_choice)
}  // namespace at::native

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", TORCH_FN(torch_tpu::fused_sdp_choice));
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(torch_tpu::sdpa_forward));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward",
         TORCH_FN(torch_tpu::sdpa_backward));
}
