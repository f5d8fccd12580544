// core_ops.cpp — the ops every PrivateUse1 backend must provide by hand:
// tensor creation, views and storage manipulation, copies across devices,
// and reading a scalar back. Everything else goes through dispatch.cpp.
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/_unsafe_view_native.h>
#include <ATen/ops/alias_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "tpu_bridge.h"

namespace torch_tpu {
namespace {

constexpr c10::DispatchKeySet kKeys{c10::DispatchKey::PrivateUse1};

void check_options(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(!layout.has_value() || *layout == c10::Layout::Strided,
              "tpu tensors support only the strided layout");
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  check_options(layout, pin_memory);
  c10::Device d = device.value_or(c10::Device(c10::DeviceType::PrivateUse1, current_device()));
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, d.has_index() ? d.index() : current_device()));
  return at::detail::empty_generic(size, device_allocator(), kKeys,
                                   dtype.value_or(c10::get_default_dtype_as_scalartype()),
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  check_options(layout, pin_memory);
  c10::Device d = device.value_or(c10::Device(c10::DeviceType::PrivateUse1, current_device()));
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, d.has_index() ? d.index() : current_device()));
  return at::detail::empty_strided_generic(size, stride, device_allocator(), kKeys,
                                           dtype.value_or(c10::get_default_dtype_as_scalartype()));
}

// A tensor of zeros with no storage behind it (the ZeroTensor key), as the
// CPU and CUDA kernels make it: autograd returns one for gradients known to
// be zero (sgn's backward); ops that meet it materialise zeros through the
// ZeroTensor fallback, on the device.
at::Tensor efficientzerotensor(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device,
                               std::optional<bool> pin_memory) {
  check_options(layout, pin_memory);
  c10::Device d = device.value_or(c10::Device(c10::DeviceType::PrivateUse1, current_device()));
  if (!d.has_index()) d = c10::Device(c10::DeviceType::PrivateUse1, current_device());
  at::native::ZeroTensorAllocator allocator(d);
  auto keys = kKeys | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
  return at::detail::empty_generic(size, &allocator, keys,
                                   dtype.value_or(c10::get_default_dtype_as_scalartype()),
                                   std::nullopt);
}

// ---- storage manipulation --------------------------------------------------------

void maybe_grow_storage(const at::Tensor& self) {
  if (self.numel() == 0) return;
  int64_t max_index = 0;
  for (int64_t d = 0; d < self.dim(); ++d) max_index += (self.size(d) - 1) * self.stride(d);
  size_t needed = (size_t)(self.storage_offset() + max_index + 1) * self.element_size();
  const c10::Storage& storage = self.storage();
  if (needed > storage.nbytes()) {
    c10::DeviceGuard guard(self.device());
    resize_storage_bytes(storage, needed);
  }
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  for (auto s : sizes) TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s);
  impl->set_sizes_contiguous(sizes);
  if (memory_format.has_value() && *memory_format != c10::MemoryFormat::Preserve)
    impl->empty_tensor_restride(*memory_format);
  maybe_grow_storage(self);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, c10::SymInt offset,
                        c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  auto* impl = self.unsafeGetTensorImpl();
  if (!impl->storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  impl->set_sizes_and_strides(C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                              offset.expect_int());
  maybe_grow_storage(self);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t n = (int64_t)(source.nbytes() / self.element_size());
  return set_storage(self, source, 0, c10::SymIntArrayRef({c10::SymInt(n)}),
                     c10::SymIntArrayRef({c10::SymInt(1)}));
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& src) {
  if (self.is_same(src)) return self;
  return set_storage(self, src.storage(), src.sym_storage_offset(), src.sym_sizes(),
                     src.sym_strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(), true);
  return set_storage(self, storage, 0, c10::SymIntArrayRef({c10::SymInt(0)}),
                     c10::SymIntArrayRef({c10::SymInt(1)}));
}

// ---- copies -----------------------------------------------------------------------

bool dense_contiguous(const at::Tensor& t) { return t.is_contiguous(); }

// A device-to-device copy with conversion and broadcasting, by the runtime's
// "copy" op, on the destination's current stream.
void device_copy(const at::Tensor& dst, const at::Tensor& src) {
  static const tpu_op_id_t copy_op = tpu_op_lookup("copy");
  TORCH_CHECK(copy_op >= 0, "the runtime has no copy op");
  at::Tensor s = src.expand(dst.sizes());
  tpu_value_t in{};
  tpu_view_t out{};
  in.kind = TPU_VALUE_VIEW;
  TORCH_CHECK(make_view(s, &in.u.view) && make_view(dst, &out),
              "copy_: dtype ", src.scalar_type(), " -> ", dst.scalar_type(),
              " is not supported on tpu");
  tpu_node_t node{};
  node.op = copy_op;
  node.num_inputs = node.num_outputs = 1;
  node.inputs = &in;
  node.outputs = &out;
  tpu_stream_t* stream = current_runtime_stream(dst.device().index());
  check(tpu_stream_submit_node(stream, &node));
  maybe_block(stream);
  count_native("copy_");
}

void copy_h2d(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  c10::DeviceGuard guard(dst.device());
  at::Tensor host = src.to(dst.scalar_type()).expand(dst.sizes()).contiguous();
  at::Tensor target = dense_contiguous(dst) ? dst : at::empty(dst.sizes(), dst.options());
  tpu_stream_t* stream = current_runtime_stream(dst.device().index());
  size_t bytes = host.nbytes();
  uint64_t to = (uint64_t)(uintptr_t)target.data_ptr();
  uint64_t from = (uint64_t)(uintptr_t)host.data_ptr();
  if (non_blocking && tpu_host_is_pinned(host.data_ptr())) {
    check(tpu_stream_copy_pinned(stream, TPU_COPY_H2D, to, from, bytes));
  } else {
    // Pageable memory: the copy has run when we return (like CUDA).
    check(tpu_stream_copy(stream, TPU_COPY_H2D, to, from, bytes));
    check(tpu_stream_synchronize(stream));
  }
  if (!target.is_same(dst)) device_copy(dst, target);
}

void copy_d2h(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  c10::DeviceGuard guard(src.device());
  at::Tensor dev = dense_contiguous(src) ? src : src.contiguous();
  bool direct = dst.is_contiguous() && dst.scalar_type() == src.scalar_type() &&
                dst.sizes() == src.sizes();
  at::Tensor host = direct ? dst : at::empty(src.sizes(), src.options().device(at::kCPU));
  tpu_stream_t* stream = current_runtime_stream(src.device().index());
  uint64_t to = (uint64_t)(uintptr_t)host.data_ptr();
  uint64_t from = (uint64_t)(uintptr_t)dev.data_ptr();
  if (direct && non_blocking && tpu_host_is_pinned(host.data_ptr())) {
    check(tpu_stream_copy_pinned(stream, TPU_COPY_D2H, to, from, host.nbytes()));
    return;
  }
  check(tpu_stream_copy(stream, TPU_COPY_D2H, to, from, host.nbytes()));
  check(tpu_stream_synchronize(stream));
  if (!direct) dst.copy_(host);
}

void copy_d2d(const at::Tensor& dst, const at::Tensor& src) {
  if (src.device() == dst.device()) {
    c10::DeviceGuard guard(dst.device());
    device_copy(dst, src);
    return;
  }
  // Across chips: stage a contiguous copy of src on its chip, wait for it,
  // then move the bytes on the destination's stream.
  at::Tensor staged;
  {
    c10::DeviceGuard guard(src.device());
    staged = src.to(dst.scalar_type()).expand(dst.sizes()).contiguous();
    check(tpu_stream_synchronize(current_runtime_stream(src.device().index())));
  }
  c10::DeviceGuard guard(dst.device());
  at::Tensor target = dst.is_contiguous() ? dst : at::empty(dst.sizes(), dst.options());
  tpu_stream_t* stream = current_runtime_stream(dst.device().index());
  check(tpu_stream_copy(stream, TPU_COPY_D2D, (uint64_t)(uintptr_t)target.data_ptr(),
                        (uint64_t)(uintptr_t)staged.data_ptr(), staged.nbytes()));
  // The staging buffer belongs to src's chip and stream: keep it until the
  // copy has run.
  check(tpu_stream_synchronize(stream));
  if (!target.is_same(dst)) device_copy(dst, target);
}

// Complex tensors live on tpu as storage (the runtime computes in real
// dtypes, so complex ops take the counted fallback): copies move them as
// their real views, (..., 2) pairs of float, float16 or double. Conjugate and
// negative bits of the source are applied to the destination after the copy.
void copy_with_bits(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor src = self;
  bool conj = src.is_conj(), neg = src.is_neg();
  if (conj) src = src.conj();          // the same memory, conjugate bit cleared
  if (neg) src = src._neg_view();      // likewise for the negative bit
  at::Tensor real_dst = dst.is_complex() ? at::view_as_real(dst) : dst;
  if (src.is_complex() && dst.is_complex()) {
    real_dst.copy_(at::view_as_real(src), non_blocking);
  } else if (dst.is_complex()) {       // real -> complex: imaginary part 0
    real_dst.select(-1, 0).copy_(src, non_blocking);
    real_dst.select(-1, 1).zero_();
  } else if (src.is_complex()) {       // complex -> real keeps the real part
    TORCH_WARN_ONCE("Casting complex values to real discards the imaginary part");
    dst.copy_(at::view_as_real(src).select(-1, 0), non_blocking);
    conj = false;
  } else {
    dst.copy_(src, non_blocking);
  }
  if (conj) real_dst.select(-1, 1).neg_();
  if (neg) real_dst.neg_();
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.defined() && dst.defined(), "copy_: undefined tensor");
  if (dst.numel() == 0) return dst;
  if (self.is_complex() || dst.is_complex() || self.is_neg()) {
    copy_with_bits(self, dst, non_blocking);
    return dst;
  }
  bool src_dev = self.device().type() == c10::DeviceType::PrivateUse1;
  bool dst_dev = dst.device().type() == c10::DeviceType::PrivateUse1;
  TORCH_CHECK(to_tpu_dtype(self.scalar_type()) != TPU_DTYPE_INVALID &&
                  to_tpu_dtype(dst.scalar_type()) != TPU_DTYPE_INVALID,
              "copy_: dtype ", (src_dev ? dst : self).scalar_type(),
              " is not supported on tpu");
  if (src_dev && dst_dev) copy_d2d(dst, self);
  else if (dst_dev) copy_h2d(dst, self, non_blocking);
  else copy_d2h(dst, self, non_blocking);
  return dst;
}

// aten::copy, the functional copy_ (functionalization emits it): a fresh
// tensor laid out like self with src's values. PyTorch's composite clones
// self first (a copy that is then overwritten); a dense self only needs its
// layout. Other layouts (overlapping, with gaps) keep the composite, whose
// clone_preserve_strides reproduces them.
at::Tensor functional_copy(const at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  if (!self.is_non_overlapping_and_dense()) return at::native::copy(self, src, non_blocking);
  at::Tensor r = at::empty_strided(self.sizes(), self.strides(), self.options());
  r.copy_(src, non_blocking);
  return r;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_output(dst, self.sizes());
  return copy_from(self, dst, false);
}

void record_stream(at::Tensor& self, c10::Stream stream) {
  auto* ctx = self.storage().data_ptr().get_context();
  if (ctx && stream.device_type() == c10::DeviceType::PrivateUse1)
    tpu_block_record_stream(static_cast<tpu_block_t*>(ctx),
                            runtime_stream(stream.device_index(), stream.id()));
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  // self has one element but any shape ([], [1], [1, 1], ...).
  at::Tensor host = at::empty(self.sizes(), self.options().device(at::kCPU));
  copy_d2h(host, self, false);
  return host.item();
}

// nn.Module.to() keeps Parameter objects (and so tied weights) only when the
// moved tensor's impl is "shallow-copy compatible" with the original. c10's
// check knows the built-in dense backends, not PrivateUse1, so answer it for
// pairs of dense strided tensors on tpu and CPU.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == at::kStrided &&
           (t.device().type() == c10::DeviceType::PrivateUse1 || t.device().is_cpu());
  };
  if (dense(self) && dense(from)) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

// aten::equal returns a Python bool, which the generic (tensor-returning)
// binding cannot express: same sizes, then a native eq + all reduction and
// one host read of the result (values compare after promotion, NaN != NaN,
// as PyTorch CPU's equal).
bool equal(const at::Tensor& self, const at::Tensor& other) {
  if (!self.sizes().equals(other.sizes())) return false;
  return at::eq(self, other).all().item<bool>();
}

}  // namespace

// copy_from reads the conjugate and negative bits itself; without these
// fallthroughs PyTorch's Conjugate/Negative fallbacks would resolve the source
// with a clone, which copies through _copy_from again, without end.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

// Sparse layouts (COO, CSR, CSC, BSR, BSC) are not implemented on tpu: its
// tensors are strided (docs/architecture.md, "Limits"). Every op that reaches
// tpu's sparse dispatch keys (making a sparse tensor on tpu, or running on
// one) raises NotImplementedError here, naming the op and what to do, in
// place of PyTorch's "Could not run ... with arguments from the 'Sparsetpu'
// backend".
void refuse_sparse(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  (void)stack;
  TORCH_CHECK_NOT_IMPLEMENTED(false, "torch_tpu: ", op.schema().operator_name(),
                              " reached tpu's sparse backend: sparse tensors are not supported "
                              "on tpu, whose tensors are strided. Keep sparse tensors on the "
                              "CPU, or convert them with .to_dense() before moving them to tpu.");
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("_efficientzerotensor", TORCH_FN(efficientzerotensor));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
  m.impl("set_.source_Storage", TORCH_FN(set_source_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_source_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("copy", TORCH_FN(functional_copy));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("equal", TORCH_FN(equal));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}

}  // namespace torch_tpu
