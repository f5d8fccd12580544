// dispatch.cpp — the one generic path from ATen to the runtime, and the
// counted CPU fallback for everything else.
//
// For every ATen overload named in a runtime op's `aten` list, one boxed
// kernel is registered, carrying a Binding built once from the schema: which
// schema arguments are the op's inputs, attrs and out= outputs (matched by
// name, see tpu/ops.h). A call then
//   1. turns tensors into views and numbers into scalars (devices checked),
//   2. gets output metadata from the runtime's shape function, or else from
//      PyTorch's meta kernel (redispatch on meta tensors),
//   3. asks the runtime whether it runs this node natively (dtypes...); if
//      not, the call goes to the CPU fallback, counted like any other,
//   4. allocates functional outputs / resizes out= tensors, and submits the
//      node to the current stream (tpu_stream_submit_node): strict eager
//      runs it as a graph of its own, DEFER_AND_FUSE (or a capture) appends
//      it to the stream's pending graph (tpu/defer.h). A foreach row
//      submits one node per list element, in list order.
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <atomic>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <set>

#include "tpu_bridge.h"

namespace torch_tpu {
namespace {

constexpr int kMaxOutputs = 8;

enum class Role { Ignore, Input, InputList, Attr, Out, SelfOut, Generator };

struct ArgRole {
  Role role = Role::Ignore;
  int index = -1;           // input position / attr index / output index
  bool is_dtype = false;    // ScalarType attrs arrive as ints
  bool also_input = false;  // an in-place self the op also reads
  bool mutated = false;     // an input the kernel writes in place ("running_mean!")
  bool host_ints = false;   // an int list or host integer tensor, bound as a device copy ('^')
};

struct Binding {
  std::string aten;
  tpu_op_id_t op = -1;
  const tpu_op_def_t* def = nullptr;
  std::vector<ArgRole> args;
  int num_inputs = 0, num_attrs = 0, num_outputs = 0;
  bool inplace = false, has_out = false;
  int self_input = -1;  // in-place: the input that self also binds (-1: none)
  bool mutates_input = false;  // some input is marked '!' in the row
  int seed_attr = -1, offset_attr = -1;
  int sync_attr = -1;         // "sync_size": filled from the count row's result
  int precision_attr = -1;    // "matmul_precision": torch's float32 matmul precision
  tpu_op_id_t count_op = -1;  // the row "<name>_count"
  size_t num_returns = 0;
  std::optional<c10::OperatorHandle> handle;
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> meta_shapes{0};  // calls whose output shape came from PyTorch's meta kernel
};

std::deque<Binding> g_bindings;  // stable addresses
std::vector<std::string> g_binding_errors;

// ---- fallback accounting ------------------------------------------------------

std::mutex g_count_mu;
std::map<std::string, int64_t> g_fallback_counts, g_native_counts;
std::set<std::string> g_warned;

enum class FallbackMode { Unread, Warn, Silent, Error };
// TORCH_TPU_FALLBACK (tpu/config.h), read on first use: torch_tpu sets the
// environment after loading this library and before the runtime's settings
// are read; set_fallback_mode() wins over it.
std::atomic<FallbackMode> g_fallback_mode{FallbackMode::Unread};

FallbackMode parse_fallback_mode(const std::string& mode) {
  return mode == "error" ? FallbackMode::Error : mode == "silent" ? FallbackMode::Silent : FallbackMode::Warn;
}

FallbackMode current_fallback_mode() {
  FallbackMode m = g_fallback_mode.load();
  if (m == FallbackMode::Unread) {
    FallbackMode from_env = parse_fallback_mode(tpu_config_string(TPU_CONFIG_FALLBACK));
    g_fallback_mode.compare_exchange_strong(m, from_env);
    m = g_fallback_mode.load();
  }
  return m;
}

void run_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = c10::toString(op.operator_name());
  bool warn = false;
  {
    std::lock_guard<std::mutex> lock(g_count_mu);
    g_fallback_counts[name]++;
    warn = current_fallback_mode() == FallbackMode::Warn && g_warned.insert(name).second;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(current_fallback_mode() != FallbackMode::Error, name,
                              " has no native tpu kernel (TORCH_TPU_FALLBACK=error)");
  if (warn)
    TORCH_WARN("torch_tpu: ", name,
               " ran on the CPU (no native tpu kernel for these arguments); calls are counted "
               "in torch_tpu.fallback_counts().");
  // Deferred work runs first, so the log names the op that cut the graph.
  check(tpu_defer_flush_all(TPU_FLUSH_FALLBACK, name.c_str()));
  at::native::cpu_fallback(op, stack);
}

void boxed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_fallback(op, stack);
}

// ---- building a node from a call --------------------------------------------------

struct Call {
  tpu_value_t inputs[64];
  int num_inputs = 0;
  tpu_attr_t attrs[TPU_MAX_ATTRS];
  tpu_view_t outputs[kMaxOutputs];
  c10::DeviceIndex device = -1;
};

// A call without tensors whose `device` argument is a tpu: sets call.device.
bool factory_device(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args, Call& call) {
  const auto& schema = op.schema().arguments();
  for (size_t i = 0; i < args.size() && i < schema.size(); ++i) {
    if (schema[i].name() != "device" || !args[i].isDevice()) continue;
    c10::Device d = args[i].toDevice();
    if (d.type() != c10::DeviceType::PrivateUse1) return false;
    call.device = d.has_index() ? d.index() : c10::impl::getDeviceGuardImpl(d.type())->getDevice().index();
    return true;
  }
  return false;
}

// The factory arguments a native factory call accepts: its tpu device, a
// strided layout, pin_memory False.
bool factory_arg(const c10::Argument& arg, const c10::IValue& iv) {
  if (arg.name() == "device") return iv.isDevice() && iv.toDevice().type() == c10::DeviceType::PrivateUse1;
  if (arg.name() == "layout") return iv.isInt() && iv.toInt() == (int64_t)c10::kStrided;
  if (arg.name() == "pin_memory") return iv.isBool() && !iv.toBool();
  return false;
}

[[noreturn]] void device_mismatch(const c10::Device& a, const c10::Device& b) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
                     "devices, ", a, " and ", b, "!");
}

void note_device(Call& call, const at::Tensor& t) {
  if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) return;
  if (call.device < 0) call.device = t.device().index();
  else if (call.device != t.device().index())
    device_mismatch(c10::Device(c10::DeviceType::PrivateUse1, call.device), t.device());
}

bool add_tensor_input(Call& call, const at::Tensor& t) {
  if (call.num_inputs >= 64) return false;
  tpu_value_t& v = call.inputs[call.num_inputs++];
  std::memset(&v, 0, sizeof(v));
  if (!t.defined()) {
    v.kind = TPU_VALUE_NONE;
    return true;
  }
  if (t.device().type() == c10::DeviceType::PrivateUse1) {
    v.kind = TPU_VALUE_VIEW;
    return make_view(t, &v.u.view);
  }
  if (t.device().is_cpu() && t.dim() == 0) {  // a number, or a zero-dim CPU tensor
    tpu_dtype_t dt = to_tpu_dtype(t.scalar_type());
    if (dt == TPU_DTYPE_INVALID) return false;
    v.kind = TPU_VALUE_SCALAR;
    bool wrapped = t.unsafeGetTensorImpl()->is_wrapped_number();
    v.u.scalar.is_tensor = !wrapped;
    if (tpu_dtype_is_complex(dt)) {  // held as (real, imaginary) doubles; a Python complex: C128
      tpu_convert(v.u.scalar.v.c, TPU_DTYPE_C128, 1, t.const_data_ptr(), dt, 1, 1);
      v.u.scalar.dtype = wrapped ? TPU_DTYPE_C128 : dt;
      return true;
    }
    // Read the host value in place (a CPU tensor's storage is host memory).
    bool floating = tpu_dtype_is_floating(dt);
    tpu_convert(&v.u.scalar.v, floating ? TPU_DTYPE_F64 : TPU_DTYPE_I64, 1, t.const_data_ptr(), dt,
                1, 1);
    if (floating) v.u.scalar.dtype = wrapped ? TPU_DTYPE_F64 : dt;
    else v.u.scalar.dtype = wrapped ? (dt == TPU_DTYPE_BOOL ? TPU_DTYPE_BOOL : TPU_DTYPE_I64) : dt;
    return true;
  }
  device_mismatch(call.device >= 0 ? c10::Device(c10::DeviceType::PrivateUse1, call.device)
                                   : c10::Device(c10::DeviceType::PrivateUse1, 0),
                  t.device());
}

// A device tensor with a lazy conjugate or negative bit: PyTorch's Conjugate
// and Negative fallbacks pass such tensors through to a few ops that resolve
// the bits themselves (mm, addmm, bmm, baddbmm, dot, vdot). Its values are
// materialised on the device (resolve_conj / resolve_neg, native) into a
// tensor kept in `held` until the node is submitted, as add_host_ints_input
// keeps its copies; any other input is bound as it is.
bool add_resolved_input(Call& call, const at::Tensor& t, std::vector<at::Tensor>& held) {
  if (t.defined() && t.device().type() == c10::DeviceType::PrivateUse1 &&
      (t.is_conj() || t.is_neg())) {
    held.push_back(t.resolve_conj().resolve_neg());
    return add_tensor_input(call, held.back());
  }
  return add_tensor_input(call, t);
}

// An input marked '^' (an int list, or an integer tensor PyTorch reads on the
// host): a device tensor of ours is bound as it is; an int list or a host
// tensor becomes a device int64 copy, kept in `held` until the node is
// submitted (the caching allocator orders its reuse after the node). False
// (the CPU fallback) for anything else.
bool add_host_ints_input(Call& call, const c10::IValue& iv, std::vector<at::Tensor>& held) {
  at::Tensor host;
  if (iv.isIntList()) {
    host = at::tensor(iv.toIntVector(), at::kLong);
  } else if (iv.isTensor()) {
    const at::Tensor& t = iv.toTensor();
    if (!t.defined() || !c10::isIntegralType(t.scalar_type(), /*includeBool=*/false)) return false;
    if (t.device().type() == c10::DeviceType::PrivateUse1) return add_tensor_input(call, t);
    if (!t.device().is_cpu()) return false;
    host = t.to(at::kLong);
  } else {
    return false;
  }
  held.push_back(host.to(c10::Device(c10::DeviceType::PrivateUse1, call.device)));
  return add_tensor_input(call, held.back());
}

bool add_scalar_input(Call& call, const c10::IValue& iv) {
  if (call.num_inputs >= 64) return false;
  tpu_value_t& v = call.inputs[call.num_inputs++];
  std::memset(&v, 0, sizeof(v));
  if (iv.isNone()) {
    v.kind = TPU_VALUE_NONE;
    return true;
  }
  v.kind = TPU_VALUE_SCALAR;
  if (iv.isDouble()) {
    v.u.scalar.dtype = TPU_DTYPE_F64;
    v.u.scalar.v.f = iv.toDouble();
  } else if (iv.isBool()) {
    v.u.scalar.dtype = TPU_DTYPE_BOOL;
    v.u.scalar.v.i = iv.toBool();
  } else if (iv.isInt()) {
    v.u.scalar.dtype = TPU_DTYPE_I64;
    v.u.scalar.v.i = iv.toInt();
  } else if (iv.isComplexDouble()) {  // rows without TPU_OP_COMPLEX_NUMBERS refuse it
    c10::complex<double> z = iv.toComplexDouble();
    v.u.scalar.dtype = TPU_DTYPE_C128;
    v.u.scalar.v.c[0] = z.real();
    v.u.scalar.v.c[1] = z.imag();
  } else {
    return false;  // symbolic numbers
  }
  return true;
}

bool to_attr(const c10::IValue& iv, bool is_dtype, tpu_attr_t* a) {
  std::memset(a, 0, sizeof(*a));
  if (iv.isNone()) {
    a->kind = TPU_ATTR_NONE;
  } else if (is_dtype && iv.isInt()) {
    a->kind = TPU_ATTR_DTYPE;
    a->u.dtype = to_tpu_dtype(static_cast<c10::ScalarType>(iv.toInt()));
    return a->u.dtype != TPU_DTYPE_INVALID;
  } else if (iv.isBool()) {
    a->kind = TPU_ATTR_BOOL;
    a->u.i = iv.toBool();
  } else if (iv.isInt()) {
    a->kind = TPU_ATTR_INT;
    a->u.i = iv.toInt();
  } else if (iv.isSymInt()) {
    auto s = iv.toSymInt();
    if (!s.is_heap_allocated()) {
      a->kind = TPU_ATTR_INT;
      a->u.i = s.as_int_unchecked();
    } else {
      return false;
    }
  } else if (iv.isDouble()) {
    a->kind = TPU_ATTR_FLOAT;
    a->u.f = iv.toDouble();
  } else if (iv.isComplexDouble()) {  // alpha=2j: rows without TPU_OP_COMPLEX_NUMBERS refuse it
    c10::complex<double> z = iv.toComplexDouble();
    a->kind = TPU_ATTR_COMPLEX;
    a->count = 2;
    a->u.floats[0] = z.real();
    a->u.floats[1] = z.imag();
  } else if (iv.isIntList() || iv.isSymIntList() || iv.isBoolList()) {
    std::vector<int64_t> values;
    if (iv.isBoolList()) {
      for (bool b : iv.toBoolList()) values.push_back(b);
    } else if (iv.isIntList()) {
      values = iv.toIntVector();
    } else {
      for (const auto& s : iv.toSymIntVector()) {
        if (s.is_heap_allocated()) return false;
        values.push_back(s.as_int_unchecked());
      }
    }
    if (values.size() > TPU_MAX_INTS) return false;
    a->kind = TPU_ATTR_INTS;
    a->count = (int32_t)values.size();
    for (size_t i = 0; i < values.size(); ++i) a->u.ints[i] = values[i];
  } else if (iv.isDoubleList()) {
    c10::List<double> values = iv.toDoubleList();
    if (values.size() > TPU_MAX_INTS) return false;
    a->kind = TPU_ATTR_FLOATS;
    a->count = (int32_t)values.size();
    for (size_t i = 0; i < values.size(); ++i) a->u.floats[i] = values.get(i);
  } else if (iv.isString()) {
    const auto& s = iv.toStringRef();
    if (s.size() + 1 > TPU_MAX_STR) return false;
    a->kind = TPU_ATTR_STR;
    std::memcpy(a->u.str, s.c_str(), s.size() + 1);
  } else {
    return false;
  }
  return true;
}

bool is_default(const c10::Argument& arg, const c10::IValue& iv) {
  if (iv.isNone()) return true;
  if (!arg.default_value().has_value()) return false;
  const c10::IValue& d = *arg.default_value();
  if (d.isNone()) return iv.isNone();
  return c10::_fastEqualsForContainer(d, iv);
}

// Output metadata from PyTorch's meta kernel: the call's tensors as meta
// tensors, redispatched to Meta. Fills meta_outs (functional results, or the
// meta self/out tensors after the kernel resized them). False when there is
// no meta kernel or it rejects the call.
bool meta_outputs(const c10::OperatorHandle& op, const Binding& b, c10::ArrayRef<c10::IValue> args,
                  std::vector<at::Tensor>& meta_outs) {
  auto to_meta = [](const at::Tensor& t) {
    if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) return t;
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
  };
  torch::jit::Stack meta_stack;
  std::vector<at::Tensor> written;
  meta_stack.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& iv = args[i];
    if (iv.isTensor()) {
      at::Tensor m = to_meta(iv.toTensor());
      if (b.args[i].role == Role::Out || b.args[i].role == Role::SelfOut) written.push_back(m);
      meta_stack.emplace_back(m);
    } else if (iv.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : iv.toTensorList()) list.push_back(to_meta(t));
      meta_stack.emplace_back(list);
    } else if (iv.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> list;
      for (const std::optional<at::Tensor> t : iv.toOptionalTensorList())
        list.push_back(t.has_value() ? std::optional<at::Tensor>(to_meta(*t)) : std::nullopt);
      meta_stack.emplace_back(list);
    } else if (b.args[i].role == Role::Generator) {
      meta_stack.emplace_back(c10::IValue());
    } else {
      meta_stack.emplace_back(iv);
    }
  }
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
  } catch (const std::exception&) {
    // No meta kernel, or the meta kernel (C++ or Python) rejects the call:
    // the CPU kernel then runs it, and raises exactly the error PyTorch
    // raises on CPU.
    return false;
  }
  if (b.inplace || b.has_out) {
    meta_outs = std::move(written);
  } else {
    for (const c10::IValue& r : meta_stack) {
      if (r.isTensor()) meta_outs.push_back(r.toTensor());
      else if (r.isNone()) meta_outs.emplace_back();  // an undefined result
      else if (r.isTensorList())
        for (const at::Tensor& t : r.toTensorList()) meta_outs.push_back(t);
    }
  }
  return true;
}

at::Tensor alloc_output(const tpu_view_t& v, c10::DeviceIndex device) {
  std::vector<int64_t> sizes(v.sizes, v.sizes + v.ndim), strides(v.strides, v.strides + v.ndim);
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device));
  return at::detail::empty_strided_generic(sizes, strides, device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           to_scalar_type(v.dtype));
}

std::string shape_str(const tpu_view_t& v) {
  std::string s = "[";
  for (int i = 0; i < v.ndim; ++i) s += (i ? ", " : "") + std::to_string(v.sizes[i]);
  return s + "]";
}

// ---- running a call -------------------------------------------------------------

// Absent attrs are None. The runtime-filled "matmul_precision" takes
// torch.get_float32_matmul_precision() now, at dispatch (0 highest, 1 high,
// 2 medium): a deferred or captured node keeps the setting it was recorded
// under.
void clear_attrs(const Binding* b, Call& call) {
  std::memset(call.attrs, 0, sizeof(tpu_attr_t) * b->num_attrs);
  if (b->precision_attr >= 0) {
    call.attrs[b->precision_attr].kind = TPU_ATTR_INT;
    call.attrs[b->precision_attr].u.i = (int64_t)at::globalContext().float32MatmulPrecision();
  }
}

void submit_node(c10::DeviceIndex device, const tpu_node_t& node) {
  tpu_stream_t* stream = current_runtime_stream(device);
  check(tpu_stream_submit_node(stream, &node));
  maybe_block(stream);
}

// A data-dependent output size (nonzero, masked_select, index with a bool
// mask): runs the row's "<name>_count" companion on the same inputs, reads
// its 0-dim int64 result (a sync, which also raises its errors) and stores
// it in the node's "sync_size" attr. False when the count row does not run
// this node natively.
bool sync_count(Binding* b, Call& call, tpu_node_t& node) {
  tpu_node_t cnode = node;
  tpu_view_t cview{};
  cnode.op = b->count_op;
  cnode.num_outputs = 1;
  cnode.num_attrs = tpu_op_num_attrs(b->count_op);
  cnode.outputs = &cview;
  tpu_view_t want{};
  tpu_status_t s = tpu_op_infer(&cnode, &want);
  if (tpu_status_code(s) == TPU_CODE_UNIMPLEMENTED) {
    tpu_status_free(s);
    return false;
  }
  check(s);
  cview = want;
  cview.addr = 1;  // placeholder until allocated below, as in run_native
  s = tpu_op_check(&cnode);
  if (s != TPU_OK) {
    tpu_status_free(s);
    return false;
  }
  at::Tensor count = alloc_output(want, call.device);
  make_view(count, &cview);
  submit_node(call.device, cnode);
  int64_t n = count.item<int64_t>();
  node.attrs[b->sync_attr].kind = TPU_ATTR_INT;
  node.attrs[b->sync_attr].u.i = n;
  call.attrs[b->sync_attr] = node.attrs[b->sync_attr];
  return true;
}

enum class Outcome { Done, NeedMeta, Fallback };

bool same_view(const tpu_view_t& a, const tpu_view_t& b) {
  if (a.addr != b.addr || a.dtype != b.dtype || a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d)
    if (a.sizes[d] != b.sizes[d] || a.strides[d] != b.strides[d]) return false;
  return true;
}

// The input that an in-place overload of `def` binds to self (addmm_: input
// 0), or -1 when the row has no in-place overload. Scans the bindings: only
// called when an out= overlaps an input.
int inplace_self_input(const tpu_op_def_t* def) {
  for (const Binding& b : g_bindings)
    if (b.def == def && b.inplace && b.self_input >= 0) return b.self_input;
  return -1;
}

// An out= tensor that shares memory with an input: a kernel would read what
// it has already written, so such calls go to the CPU, which computes them
// from copies. Rows that check overlap themselves (TPU_OP_OWN_OVERLAP_CHECK:
// elementwise, as TensorIterator does) and ops PyTorch refuses it for
// (TPU_OP_OUT_NO_OVERLAP, raised in tpu_op_check) stay native, and so does
// an out= that is exactly the input the row's in-place overload writes and
// already has the result's shape `want` (addmm(c, a, b, out=c) is addmm_:
// the kernel takes that aliasing; a resize would move the input's memory).
bool out_overlaps_input(const Binding* b, const Call& call, const tpu_view_t& out,
                        const tpu_view_t& want) {
  if (b->def->flags & (TPU_OP_OUT_NO_OVERLAP | TPU_OP_OWN_OVERLAP_CHECK)) return false;
  int self = -2;  // not looked up yet
  for (int i = 0; i < call.num_inputs; ++i) {
    if (call.inputs[i].kind != TPU_VALUE_VIEW ||
        !tpu_views_may_overlap(&call.inputs[i].u.view, &out))
      continue;
    bool sized = out.ndim == want.ndim &&
                 std::equal(out.sizes, out.sizes + out.ndim, want.sizes);
    if (sized && same_view(call.inputs[i].u.view, out)) {
      if (self == -2) self = inplace_self_input(b->def);
      if (i == self) continue;
    }
    return true;
  }
  return false;
}

// Runs a call whose inputs and attrs are in `call` and whose given outputs
// (in-place self, out=) are borrowed in `given` (nullptr where an output is
// fresh): output metadata from the runtime's shape function (or `meta`, when
// given), checks, allocation of fresh outputs (into `fresh`), submission.
Outcome run_native(Binding* b, Call& call, const at::Tensor* const* given, at::Tensor* fresh,
                   const std::optional<at::Generator>& gen, const tpu_view_t* meta) {
  tpu_node_t node{};
  node.op = b->op;
  node.num_inputs = call.num_inputs;
  node.num_outputs = b->num_outputs;
  node.num_attrs = b->num_attrs;
  node.inputs = call.inputs;
  node.outputs = call.outputs;
  std::memcpy(node.attrs, call.attrs, sizeof(tpu_attr_t) * b->num_attrs);

  tpu_view_t inferred[kMaxOutputs];
  if (meta) {
    std::memcpy(inferred, meta, sizeof(tpu_view_t) * b->num_outputs);
  } else {
    if (!b->def->infer) return Outcome::NeedMeta;
    std::memset(inferred, 0, sizeof(tpu_view_t) * b->num_outputs);
    for (int k = 0; k < b->num_outputs; ++k)  // a factory row's dtype (ops.h)
      inferred[k].dtype = given[k] ? to_tpu_dtype(given[k]->scalar_type()) : TPU_DTYPE_INVALID;
    tpu_status_t s = tpu_op_infer(&node, inferred);
    if (tpu_status_code(s) == TPU_CODE_UNIMPLEMENTED && b->count_op >= 0 &&
        node.attrs[b->sync_attr].kind == TPU_ATTR_NONE && sync_count(b, call, node)) {
      tpu_status_free(s);
      s = tpu_op_infer(&node, inferred);
    }
    if (tpu_status_code(s) == TPU_CODE_UNIMPLEMENTED) {
      tpu_status_free(s);
      return Outcome::NeedMeta;
    }
    check(s);
  }
  // Outputs: given (in-place, out=) or fresh.
  for (int k = 0; k < b->num_outputs; ++k) {
    const tpu_view_t& want = inferred[k];
    if (tpu_view_is_absent(&want)) {  // an undefined result: nothing allocated or written
      std::memset(&call.outputs[k], 0, sizeof(tpu_view_t));
      call.outputs[k].dtype = TPU_DTYPE_INVALID;
      continue;
    }
    if (given[k]) {
      const at::Tensor& out = *given[k];
      if (out.device().type() != c10::DeviceType::PrivateUse1 || out.device().index() != call.device)
        device_mismatch(c10::Device(c10::DeviceType::PrivateUse1, call.device), out.device());
      c10::ScalarType want_t = to_scalar_type(want.dtype);
      TORCH_CHECK(c10::canCast(want_t, out.scalar_type()), "result type ", want_t,
                  " can't be cast to the desired output type ", out.scalar_type());
      if (b->inplace && k == 0) {
        TORCH_CHECK(out.dim() == want.ndim &&
                        std::equal(out.sizes().begin(), out.sizes().end(), want.sizes),
                    "output with shape ", out.sizes(), " doesn't match the broadcast shape ",
                    shape_str(want));
      } else {
        // Rows whose op refuses overlapping out= (TPU_OP_OUT_NO_OVERLAP) check
        // the tensor as given, before resizing, as PyTorch does for them.
        TORCH_CHECK(!(b->def->flags & TPU_OP_OUT_NO_OVERLAP) ||
                        at::has_internal_overlap(out) != at::MemOverlap::Yes,
                    "unsupported operation: more than one element of the written-to tensor "
                    "refers to a single memory location. Please clone() the tensor before "
                    "performing the operation.");
        tpu_view_t before;
        if (out.numel() > 0 && make_view(out, &before)) {
          if (out_overlaps_input(b, call, before, want)) return Outcome::Fallback;
          // PyTorch checks these before resizing: test the out= tensor as given.
          tpu_view_t saved = call.outputs[k];
          call.outputs[k] = before;
          tpu_node_t probe = node;
          probe.num_outputs = k + 1;
          tpu_status_t st = tpu_op_check_out_overlap(&probe);
          call.outputs[k] = saved;
          check(st);
        }
        at::native::resize_output(out, c10::IntArrayRef(want.sizes, want.ndim));
        // As PyTorch's out= kernels (assert_no_internal_overlap): an out=
        // tensor whose elements share memory (an expanded view) is refused.
        TORCH_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes,
                    "unsupported operation: more than one element of the written-to tensor "
                    "refers to a single memory location. Please clone() the tensor before "
                    "performing the operation.");
      }
      if (!make_view(out, &call.outputs[k])) return Outcome::Fallback;
    } else {
      call.outputs[k] = want;
      call.outputs[k].addr = 1;  // placeholder until allocated below
    }
  }
  // Does the runtime run this node natively?
  tpu_status_t s = tpu_op_check(&node);
  if (tpu_status_code(s) == TPU_CODE_UNIMPLEMENTED) {
    tpu_status_free(s);
    return Outcome::Fallback;
  }
  check(s);
  for (int k = 0; k < b->num_outputs; ++k) {
    if (given[k] || tpu_view_is_absent(&call.outputs[k])) continue;
    fresh[k] = alloc_output(inferred[k], call.device);
    make_view(fresh[k], &call.outputs[k]);
  }
  if (b->seed_attr >= 0 && tpu_op_draws_random(&node)) {
    const at::Tensor& out0 = given[0] ? *given[0] : fresh[0];
    uint64_t seed = 0, offset = 0;
    uint64_t count = (uint64_t)std::max<int64_t>(1, out0.numel());
    reserve_philox(gen, call.device, count, &seed, &offset);
    note_random_node(call.device, gen, count, b->seed_attr, b->offset_attr);
    node.attrs[b->seed_attr].kind = TPU_ATTR_INT;
    node.attrs[b->seed_attr].u.i = (int64_t)seed;
    node.attrs[b->offset_attr].kind = TPU_ATTR_INT;
    node.attrs[b->offset_attr].u.i = (int64_t)offset;
  }
  submit_node(call.device, node);
  b->calls.fetch_add(1, std::memory_order_relaxed);
  return Outcome::Done;
}

// A TPU_OP_FOREACH row (the fused optimizers): the schema's tensor lists are
// parallel, and node e takes element e of each (an empty list: an absent
// input), the other arguments alike. All elements run natively or the whole
// call goes to the CPU; the nodes are submitted in list order.
void foreach_call(Binding* b, const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = b->args.size();
  c10::ArrayRef<c10::IValue> args(stack->data() + stack->size() - n, n);
  Call proto;
  size_t len = 0;
  bool native = b->num_outputs == 0 && b->num_returns == 0;
  for (size_t i = 0; i < n && native; ++i) {
    const c10::IValue& iv = args[i];
    if (iv.isTensor()) note_device(proto, iv.toTensor());
    if (b->args[i].role != Role::InputList) continue;
    if (!iv.isTensorList()) {
      native = false;
      break;
    }
    c10::List<at::Tensor> list = iv.toTensorList();
    if (list.size() && len && list.size() != len) native = false;  // CPU raises the error
    if (list.size()) len = list.size();
    for (const at::Tensor& t : list) {
      note_device(proto, t);
      native = native && t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
    }
  }
  if (!native || len == 0 || proto.device < 0) {
    run_fallback(op, stack);
    return;
  }
  // Node e of the call, built into `call` (false: not native). Built twice,
  // to check every element and then to submit: a Call is large, and a
  // model's parameter list long.
  Call call;
  tpu_node_t node{};
  auto build = [&](size_t e) {
    call.num_inputs = 0;  // add_tensor_input clears each value it adds
    call.device = proto.device;
    clear_attrs(b, call);
    for (size_t i = 0; i < n; ++i) {
      const ArgRole& r = b->args[i];
      const c10::IValue& iv = args[i];
      bool ok = false;
      switch (r.role) {
        case Role::InputList: {
          c10::List<at::Tensor> list = iv.toTensorList();
          ok = add_tensor_input(call, list.size() ? list.get(e) : at::Tensor());
          break;
        }
        case Role::Input:
          ok = iv.isTensor() ? add_tensor_input(call, iv.toTensor())
               : iv.isNone() ? add_tensor_input(call, at::Tensor())
                             : add_scalar_input(call, iv);
          break;
        case Role::Attr:
          ok = to_attr(iv, r.is_dtype, &call.attrs[r.index]);
          break;
        case Role::Ignore:
          ok = is_default(op.schema().arguments()[i], iv);
          break;
        default:
          break;
      }
      if (!ok) return false;
    }
    node = tpu_node_t{};
    node.op = b->op;
    node.num_inputs = call.num_inputs;
    node.num_attrs = b->num_attrs;
    node.inputs = call.inputs;
    std::memcpy(node.attrs, call.attrs, sizeof(tpu_attr_t) * b->num_attrs);
    return true;
  };
  for (size_t e = 0; e < len && native; ++e) {
    native = build(e);
    if (!native) break;
    tpu_status_t s = tpu_op_check(&node);
    if (tpu_status_code(s) == TPU_CODE_UNIMPLEMENTED) {
      tpu_status_free(s);
      native = false;
    } else {
      check(s);
    }
  }
  if (!native) {
    run_fallback(op, stack);
    return;
  }
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, proto.device));
  for (size_t e = 0; e < len; ++e) {
    TORCH_INTERNAL_ASSERT(build(e));
    submit_node(proto.device, node);
  }
  b->calls.fetch_add(1, std::memory_order_relaxed);
  torch::jit::drop(*stack, n);
}

// The general path: any schema, arguments as IValues on the stack.
void boxed_call(Binding* b, const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (b->def->flags & TPU_OP_FOREACH) {
    foreach_call(b, op, stack);
    return;
  }
  const size_t n = b->args.size();
  // The call's arguments, borrowed from the stack (popped only on success).
  c10::ArrayRef<c10::IValue> args(stack->data() + stack->size() - n, n);
  Call call;
  clear_attrs(b, call);
  std::optional<at::Generator> gen;
  const at::Tensor* given[kMaxOutputs] = {};
  at::Tensor fresh[kMaxOutputs];
  std::vector<at::Tensor> held;  // device copies of host int inputs ('^') and of conj/neg
                                 // views, alive until submitted
  bool native = true;

  // Pass 1: the device of the call.
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& iv = args[i];
    if (iv.isTensor()) note_device(call, iv.toTensor());
    else if (iv.isTensorList())
      for (const at::Tensor& t : iv.toTensorList()) note_device(call, t);
  }
  // A factory without tensors (tril_indices): the device comes from its
  // `device` argument; that argument, a strided layout and pin_memory=False
  // are then what the call is for, not arguments the row must bind.
  bool factory = false;
  if (call.device < 0) factory = factory_device(op, args, call);
  if (call.device < 0) {  // only CPU operands: nothing of ours is involved
    run_fallback(op, stack);
    return;
  }
  // Pass 2: inputs, attrs, outputs.
  for (size_t i = 0; i < n && native; ++i) {
    const ArgRole& r = b->args[i];
    const c10::IValue& iv = args[i];
    switch (r.role) {
      case Role::Input:
        // A mutated input must be a tensor of ours: the kernel writes it
        // (a CPU tensor, or None where the kernel needs one, goes to the CPU).
        if (r.mutated && iv.isTensor() && iv.toTensor().defined() &&
            iv.toTensor().device().type() != c10::DeviceType::PrivateUse1) {
          native = false;
          break;
        }
        if (r.host_ints) {
          native = add_host_ints_input(call, iv, held);
          break;
        }
        native = iv.isTensor() ? add_resolved_input(call, iv.toTensor(), held)
                 : iv.isNone() ? add_tensor_input(call, at::Tensor())
                               : add_scalar_input(call, iv);
        break;
      case Role::InputList:
        if (iv.isTensorList()) {
          for (const at::Tensor& t : iv.toTensorList()) native = native && add_tensor_input(call, t);
        } else if (iv.isOptionalTensorList()) {
          // A CPU tensor among the indices: the CPU fallback handles mixed devices.
          for (const std::optional<at::Tensor> t : iv.toOptionalTensorList())
            native = native && !(t.has_value() && t->defined() &&
                                 t->device().type() != c10::DeviceType::PrivateUse1) &&
                     add_tensor_input(call, t.has_value() ? *t : at::Tensor());
        } else {
          native = false;
        }
        break;
      case Role::Attr:
        native = to_attr(iv, r.is_dtype, &call.attrs[r.index]);
        break;
      case Role::Out:
      case Role::SelfOut:
        given[r.index] = &iv.toTensor();
        if (r.also_input) native = add_tensor_input(call, iv.toTensor());
        break;
      case Role::Generator:
        if (!iv.isNone()) gen = iv.toGenerator();
        break;
      case Role::Ignore:
        native = is_default(op.schema().arguments()[i], iv) ||
                 (factory && factory_arg(op.schema().arguments()[i], iv));
        break;
    }
  }
  if (!native) {
    run_fallback(op, stack);
    return;
  }
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, call.device));
  Outcome outcome = run_native(b, call, given, fresh, gen, nullptr);
  if (outcome == Outcome::NeedMeta) {
    b->meta_shapes.fetch_add(1, std::memory_order_relaxed);
    std::vector<at::Tensor> metas;
    tpu_view_t views[kMaxOutputs];
    bool ok = meta_outputs(op, *b, args, metas) && (int)metas.size() >= b->num_outputs;
    for (int k = 0; ok && k < b->num_outputs; ++k) {
      if (!metas[k].defined()) {  // an undefined result (see tpu_view_is_absent)
        std::memset(&views[k], 0, sizeof(tpu_view_t));
        views[k].dtype = TPU_DTYPE_INVALID;
        continue;
      }
      ok = make_view(metas[k], &views[k]);
    }
    outcome = ok ? run_native(b, call, given, fresh, gen, views) : Outcome::Fallback;
  }
  if (outcome != Outcome::Done) {
    run_fallback(op, stack);
    return;
  }
  at::Tensor results[kMaxOutputs];
  for (size_t k = 0; k < b->num_returns; ++k)
    results[k] = given[k] ? *given[k] : std::move(fresh[k]);
  torch::jit::drop(*stack, n);  // `given` points into the stack: copied above
  for (size_t k = 0; k < b->num_returns; ++k) stack->emplace_back(std::move(results[k]));
}

// The boxed kernel registered for each bound overload.
struct NativeKernel final : public c10::OperatorKernel {
  explicit NativeKernel(Binding* binding) : b(binding) {}
  Binding* b;
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    boxed_call(b, op, stack);
  }
};

// ---- unboxed entries for the hot signatures ------------------------------------------
// Boxing copies every tensor into an IValue, and each copy of a tensor that
// Python holds touches its PyObject (under the GIL). Overloads whose
// arguments are only tensors, scalars, ints and bools (in a few common
// orders) get a typed kernel that reads its
// arguments in place; anything unusual (CPU operands, a shape function that
// defers to PyTorch's meta kernel, a fallback) takes the boxed path.

bool typed_arg(Binding* b, Call& call, const at::Tensor** given, size_t i, const at::Tensor& t) {
  const ArgRole& r = b->args[i];
  if (!t.defined()) return false;
  if (t.device().type() != c10::DeviceType::PrivateUse1)  // a CPU number, as an input
    return r.role == Role::Input && !r.host_ints && t.device().is_cpu() && t.dim() == 0 &&
           add_tensor_input(call, t);
  if (call.device < 0) call.device = t.device().index();
  else if (call.device != t.device().index()) return false;
  switch (r.role) {
    case Role::Input:
      return add_tensor_input(call, t);
    case Role::SelfOut:
      given[r.index] = &t;
      return !r.also_input || add_tensor_input(call, t);
    default:
      return false;
  }
}

bool typed_arg(Binding* b, Call& call, const at::Tensor**, size_t i, const c10::Scalar& v) {
  const ArgRole& r = b->args[i];
  c10::IValue iv(v);  // a number: no tensor, no refcount traffic
  if (r.role == Role::Input) return add_scalar_input(call, iv);
  if (r.role == Role::Attr) return to_attr(iv, false, &call.attrs[r.index]);
  return r.role == Role::Ignore && is_default(b->handle->schema().arguments()[i], iv);
}

bool typed_int_attr(Binding* b, Call& call, size_t i, tpu_attr_kind_t kind, int64_t v) {
  const ArgRole& r = b->args[i];
  if (r.role != Role::Attr) return false;
  call.attrs[r.index].kind = kind;
  call.attrs[r.index].u.i = v;
  return true;
}

bool typed_arg(Binding* b, Call& call, const at::Tensor**, size_t i, int64_t v) {
  return typed_int_attr(b, call, i, TPU_ATTR_INT, v);
}

bool typed_arg(Binding* b, Call& call, const at::Tensor**, size_t i, bool v) {
  return typed_int_attr(b, call, i, TPU_ATTR_BOOL, v);
}

template <class... Args>
bool typed_fast(Binding* b, at::Tensor* fresh, const Args&... args) {
  Call call;
  clear_attrs(b, call);
  const at::Tensor* given[kMaxOutputs] = {};
  size_t i = 0;
  bool ok = (typed_arg(b, call, given, i++, args) && ...);
  if (!ok || call.device < 0) return false;
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, call.device));
  return run_native(b, call, given, fresh, std::nullopt, nullptr) == Outcome::Done;
}

template <class... Args>
torch::jit::Stack boxed_from_typed(Binding* b, const Args&... args) {
  torch::jit::Stack stack;
  stack.reserve(sizeof...(Args));
  (stack.emplace_back(args), ...);
  boxed_call(b, *b->handle, &stack);
  return stack;
}

// How ATen passes an argument of type A: numbers by value, the rest by
// const reference (the kernel's C++ signature must match exactly).
template <class A>
using Param = std::conditional_t<std::is_arithmetic_v<A>, A, const A&>;

// Functional: Tensor f(args...).
template <class... Args>
struct TypedFunctional {
  Binding* b;
  at::Tensor operator()(Param<Args>... args) const {
    at::Tensor fresh[kMaxOutputs];
    if (typed_fast(b, fresh, args...)) return std::move(fresh[0]);
    return boxed_from_typed(b, args...)[0].toTensor();
  }
};

// In-place: Tensor& f_(Tensor& self, args...).
template <class... Args>
struct TypedInplace {
  Binding* b;
  at::Tensor& operator()(at::Tensor& self, Param<Args>... args) const {
    at::Tensor fresh[kMaxOutputs];
    if (!typed_fast(b, fresh, self, args...)) boxed_from_typed(b, self, args...);
    return self;
  }
};

// The typed kernel for an overload, or an empty CppFunction-less result.
std::optional<torch::CppFunction> typed_kernel(Binding* b) {
  const c10::FunctionSchema& schema = b->handle->schema();
  if (schema.returns().size() != 1 || b->has_out || b->seed_attr >= 0 || b->mutates_input)
    return std::nullopt;
  std::string sig;
  for (const c10::Argument& a : schema.arguments()) {
    auto kind = a.real_type()->kind();
    if (kind == c10::TypeKind::TensorType) sig += 'T';
    else if (kind == c10::TypeKind::NumberType) sig += 'S';
    else if (kind == c10::TypeKind::IntType) sig += 'I';
    else if (kind == c10::TypeKind::BoolType) sig += 'B';
    else return std::nullopt;
  }
  using T = at::Tensor;
  using S = c10::Scalar;
  if (b->inplace) {
    if (sig == "T") return torch::CppFunction(TypedInplace<>{b});
    if (sig == "TT") return torch::CppFunction(TypedInplace<T>{b});
    if (sig == "TS") return torch::CppFunction(TypedInplace<S>{b});
    if (sig == "TTS") return torch::CppFunction(TypedInplace<T, S>{b});
    return std::nullopt;
  }
  if (sig == "T") return torch::CppFunction(TypedFunctional<T>{b});
  if (sig == "TT") return torch::CppFunction(TypedFunctional<T, T>{b});
  if (sig == "TS") return torch::CppFunction(TypedFunctional<T, S>{b});
  if (sig == "TTS") return torch::CppFunction(TypedFunctional<T, T, S>{b});
  if (sig == "TTT") return torch::CppFunction(TypedFunctional<T, T, T>{b});
  if (sig == "TIB") return torch::CppFunction(TypedFunctional<T, int64_t, bool>{b});
  return std::nullopt;
}

// ---- building bindings -------------------------------------------------------------

bool is_scalar_type_arg(const c10::Argument& arg) {
  auto t = arg.real_type();
  if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
  return t->kind() == c10::TypeKind::ScalarTypeType;
}

std::string bind_one(const std::string& aten, tpu_op_id_t id, Binding& b) {
  auto dot = aten.find('.');
  std::string name = "aten::" + aten.substr(0, dot);
  std::string overload = dot == std::string::npos ? "" : aten.substr(dot + 1);
  if (overload == "default") overload = "";
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  if (!handle) return aten + ": no such ATen overload";
  // A CompositeImplicitAutograd overload without an autograd kernel of its own
  // gets its derivative from its decomposition; a device kernel for it would be
  // reached with autograd already skipped, so gradients would silently stop.
  if (handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
      !handle->hasKernelForDispatchKey(c10::DispatchKey::Autograd))
    return aten + ": CompositeImplicitAutograd (decomposes before reaching the device)";
  const c10::FunctionSchema& schema = handle->schema();
  const tpu_op_def_t* def = tpu_op_def(id);
  b.handle = *handle;
  b.aten = aten;
  b.op = id;
  b.def = def;
  b.num_inputs = tpu_spec_count(def->inputs);
  b.num_attrs = tpu_spec_count(def->attrs);
  b.num_outputs = tpu_spec_count(def->outputs);
  b.num_returns = schema.returns().size();
  if (b.num_outputs > kMaxOutputs || b.num_attrs > TPU_MAX_ATTRS)
    return aten + ": too many outputs or attrs for the bridge";
  b.seed_attr = tpu_spec_index(def->attrs, "seed");
  b.offset_attr = tpu_spec_index(def->attrs, "offset");
  b.sync_attr = tpu_spec_index(def->attrs, "sync_size");
  b.precision_attr = tpu_spec_index(def->attrs, "matmul_precision");
  if (b.sync_attr >= 0) b.count_op = tpu_op_lookup((std::string(def->name) + "_count").c_str());
  int out_pos = 0;
  bool list_input = false;
  std::vector<int> inputs_seen;
  for (const c10::Argument& arg : schema.arguments()) {
    ArgRole r;
    const std::string& an = arg.name();
    bool written = arg.alias_info() && arg.alias_info()->isWrite();
    int in_idx = tpu_spec_index(def->inputs, an.c_str());
    int at_idx = tpu_spec_index(def->attrs, an.c_str());
    // A mutated input: the row marks it '!' ("running_mean!"); the kernel
    // writes it in place (batch norm's running statistics, rrelu's noise).
    // It binds as an input, whether or not the schema marks it written.
    // A foreach row's lists may be mutated too ("exp_avgs*!"): each node
    // then writes one element of each.
    const bool foreach = def->flags & TPU_OP_FOREACH;
    const uint32_t marks = tpu_spec_flags(def->inputs, in_idx);
    if ((marks & TPU_SPEC_MUTATED) && (foreach || !(marks & TPU_SPEC_LIST))) {
      if (arg.kwarg_only() || (arg.type()->kind() == c10::TypeKind::ListType && !foreach))
        return aten + ": argument '" + an + "' cannot be a mutated input";
      r.mutated = true;
      b.mutates_input = true;
      written = false;
    }
    if (written && arg.kwarg_only()) {
      r.role = Role::Out;
      r.index = out_pos++;
      b.has_out = true;
    } else if (written) {
      // In-place: self is output 0, and also an input when the op reads it.
      r.role = Role::SelfOut;
      r.index = out_pos++;
      b.inplace = true;
      if (in_idx >= 0) {
        r.also_input = true;
        b.self_input = in_idx;
        inputs_seen.push_back(in_idx);
      }
    } else if (arg.type()->kind() == c10::TypeKind::GeneratorType ||
               (arg.type()->cast<c10::OptionalType>() &&
                arg.type()->cast<c10::OptionalType>()->getElementType()->kind() ==
                    c10::TypeKind::GeneratorType)) {
      r.role = Role::Generator;
    } else if (in_idx >= 0) {
      bool is_list = marks & TPU_SPEC_LIST;
      r.role = is_list ? Role::InputList : Role::Input;
      r.index = in_idx;
      r.host_ints = marks & TPU_SPEC_HOST_INTS;
      list_input = list_input || is_list;
      inputs_seen.push_back(in_idx);
    } else if (at_idx >= 0) {
      r.role = Role::Attr;
      r.index = at_idx;
      r.is_dtype = is_scalar_type_arg(arg);
    } else if (an == "seed" || an == "offset") {
      return aten + ": argument '" + an + "' collides with the runtime's RNG attrs";
    }
    b.args.push_back(r);
  }
  // Inputs must appear in the schema in the op's order (the node's order).
  for (size_t i = 1; i < inputs_seen.size(); ++i)
    if (inputs_seen[i] < inputs_seen[i - 1])
      return aten + ": schema argument order differs from the op's input order";
  if (!list_input && (int)inputs_seen.size() != b.num_inputs)
    return aten + ": binds " + std::to_string(inputs_seen.size()) + " of the op's " +
           std::to_string(b.num_inputs) + " inputs";
  if (out_pos && out_pos != b.num_outputs)
    return aten + ": " + std::to_string(out_pos) + " written arguments, op has " +
           std::to_string(b.num_outputs) + " outputs";
  return "";
}

std::unique_ptr<torch::Library> g_library;

void register_native_ops() {
  g_library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                               c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  std::set<std::string> seen;
  for (tpu_op_id_t id = 0; id < tpu_op_count(); ++id) {
    const tpu_op_def_t* def = tpu_op_def(id);
    std::string list = def->aten ? def->aten : "";
    size_t pos = 0;
    while (pos < list.size()) {
      size_t end = list.find(' ', pos);
      if (end == std::string::npos) end = list.size();
      std::string aten = list.substr(pos, end - pos);
      pos = end + 1;
      if (aten.empty()) continue;
      if (!seen.insert(aten).second) {
        g_binding_errors.push_back(aten + ": bound by two runtime ops");
        continue;
      }
      g_bindings.emplace_back();
      Binding& b = g_bindings.back();
      std::string err = bind_one(aten, id, b);
      if (!err.empty()) {
        g_binding_errors.push_back(std::string(def->name) + ": " + err);
        g_bindings.pop_back();
        continue;
      }
      std::string reg = aten;  // "sum.default" registers as "sum"
      if (reg.size() > 8 && reg.compare(reg.size() - 8, 8, ".default") == 0)
        reg.resize(reg.size() - 8);
      if (auto typed = typed_kernel(&b))
        g_library->impl(reg.c_str(), std::move(*typed));
      else
        g_library->impl(reg.c_str(), torch::CppFunction::makeFromBoxedFunctor(
                                          std::make_unique<NativeKernel>(&b)));
    }
  }
}

}  // namespace

void counted_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_fallback(op, stack);
}

void count_native(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_count_mu);
  g_native_counts[name]++;
}


std::map<std::string, int64_t> native_counts() {
  std::lock_guard<std::mutex> lock(g_count_mu);
  std::map<std::string, int64_t> out = g_native_counts;
  for (const Binding& b : g_bindings) {
    int64_t c = b.calls.load();
    if (c) out[b.aten] += c;
  }
  return out;
}

std::map<std::string, int64_t> meta_shape_counts() {
  std::map<std::string, int64_t> out;
  for (const Binding& b : g_bindings) {
    int64_t c = b.meta_shapes.load();
    if (c) out[b.aten] += c;
  }
  return out;
}

std::map<std::string, int64_t> fallback_counts() {
  std::lock_guard<std::mutex> lock(g_count_mu);
  return g_fallback_counts;
}

void reset_counts() {
  std::lock_guard<std::mutex> lock(g_count_mu);
  g_native_counts.clear();
  g_fallback_counts.clear();
  for (Binding& b : g_bindings) b.calls = 0, b.meta_shapes = 0;
}

std::vector<std::string> native_op_names() {
  std::vector<std::string> out;
  for (const Binding& b : g_bindings) out.push_back(b.aten);
  return out;
}

std::vector<std::string> binding_errors() { return g_binding_errors; }

void set_fallback_mode(const std::string& mode) {
  TORCH_CHECK(mode == "warn" || mode == "silent" || mode == "error",
              "fallback mode must be 'warn', 'silent' or 'error', not '", mode, "'");
  g_fallback_mode = parse_fallback_mode(mode);
}

std::string fallback_mode() {
  switch (current_fallback_mode()) {
    case FallbackMode::Error: return "error";
    case FallbackMode::Silent: return "silent";
    default: return "warn";
  }
}

void init_dispatch() {
  static std::once_flag once;
  std::call_once(once, register_native_ops);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&boxed_fallback>());
}

}  // namespace torch_tpu

