// replay.cpp — torch_tpu._C.Replay: a compiled graph's calls replayed from
// one captured call (runtime/include/tpu/capture.h), without the dispatcher.
//
// The first call for a layout of the inputs runs the graph's code as usual
// while the runtime captures what it records; the capture is kept when
// nothing happened that a replay cannot reproduce (the runtime checks
// flushes, queued commands and operands; here: random numbers drawn other
// than by the recorded nodes (theirs get fresh counters on replay), inputs
// that are not tpu tensors or that share storage, results that are not
// tensors of the region's own memory or views of inputs, results requiring
// grad). Later calls with inputs laid out alike (dtype, sizes, strides,
// storage offset and size) replay it: the same nodes on the new inputs'
// addresses, fresh blocks for the region's allocations, and the results
// rebuilt as tensors over the blocks it left allocated.
#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "tpu_bridge.h"

extern "C" {
#include "tpu/capture.h"
}

namespace py = pybind11;

namespace torch_tpu {
namespace {

// At most this many input layouts are kept per graph.
constexpr size_t kMaxTemplates = 4;
// A graph whose captures failed this often is not captured again.
constexpr int kMaxFailures = 2;

// Random numbers drawn by a captured call's nodes, in order: the generator and
// how many Philox counters each took (a replay reserves as many again).
struct Draws {
  std::vector<at::Generator> gens;
  std::vector<uint64_t> counts;
};

// The draws of the call this thread is capturing, or nullptr.
thread_local Draws* t_draws = nullptr;

struct Inputs {
  std::vector<at::Tensor> tensors;
  std::vector<int64_t> key;  // per input: dtype, ndim, sizes, strides, offset, nbytes
  std::vector<uint64_t> addr, bytes;
  c10::DeviceIndex device = -1;
};

// Reads the graph's arguments; false unless every one is a tpu tensor with
// storage, all on one device, no two sharing storage.
bool collect(const py::sequence& args, Inputs* in) {
  if (!PyTuple_Check(args.ptr()) && !PyList_Check(args.ptr())) return false;
  size_t n = (size_t)PySequence_Fast_GET_SIZE(args.ptr());
  in->tensors.reserve(n);
  in->key.reserve(n * 8);
  in->addr.reserve(n);
  in->bytes.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    PyObject* obj = PySequence_Fast_GET_ITEM(args.ptr(), i);
    if (!THPVariable_Check(obj)) return false;
    const at::Tensor& t = THPVariable_Unpack(obj);
    if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1 || !t.has_storage())
      return false;
    if (in->device < 0) in->device = t.device().index();
    if (t.device().index() != in->device) return false;
    const c10::Storage& st = t.storage();
    in->key.push_back((int64_t)t.scalar_type());
    in->key.push_back(t.dim());
    for (int64_t s : t.sizes()) in->key.push_back(s);
    for (int64_t s : t.strides()) in->key.push_back(s);
    in->key.push_back(t.storage_offset());
    in->key.push_back((int64_t)st.nbytes());
    in->addr.push_back((uint64_t)(uintptr_t)st.data());
    in->bytes.push_back(st.nbytes());
    in->tensors.push_back(t);
  }
  if (in->device < 0) return false;
  std::vector<uint64_t> bases;
  bases.reserve(n);
  for (size_t i = 0; i < n; ++i)
    if (in->addr[i]) bases.push_back(in->addr[i]);
  std::sort(bases.begin(), bases.end());
  return std::adjacent_find(bases.begin(), bases.end()) == bases.end();
}

// How one result of the graph is rebuilt.
struct OutSpec {
  enum Kind { LIVE, INPUT_VIEW, INPUT_SELF, EMPTY, OBJECT } kind;
  int32_t index = -1;  // live block (LIVE) or input (INPUT_*)
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  py::object object;  // OBJECT: None or a Python number
};

struct Template {
  std::vector<int64_t> key;
  Draws draws;
  tpu_capture_t* capture = nullptr;
  std::vector<OutSpec> outs;
  bool as_list = false;
  ~Template() { tpu_capture_release(capture); }
};

at::Tensor over_storage(const c10::Storage& storage, const OutSpec& o) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::Storage(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      caffe2::TypeMeta::fromScalarType(o.dtype));
  impl->set_sizes_and_strides(o.sizes, o.strides, o.offset);
  return at::Tensor(std::move(impl));
}

class Replay {
 public:
  // The results of a replay for these arguments, or None when no capture
  // matches their layout.
  py::object run(const py::sequence& args) {
    if (templates_.empty()) return py::none();
    Inputs in;
    if (!collect(args, &in)) return py::none();
    Template* tp = nullptr;
    for (auto& t : templates_)
      if (t->key == in.key) tp = t.get();
    if (!tp) return py::none();
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, in.device));
    tpu_stream_t* stream = current_runtime_stream(in.device);
    int32_t nlive = tpu_capture_live_count(tp->capture);
    std::vector<tpu_block_t*> live((size_t)nlive + 1, nullptr);
    size_t ndraws = tp->draws.counts.size();
    std::vector<uint64_t> seed(ndraws + 1), offset(ndraws + 1);
    for (size_t k = 0; k < ndraws; ++k)  // the counters op-by-op calls would take, in order
      reserve_philox(tp->draws.gens[k], in.device, tp->draws.counts[k], &seed[k], &offset[k]);
    check(tpu_capture_replay(tp->capture, stream, in.addr.data(), seed.data(), offset.data(),
                             live.data()));
    std::vector<c10::Storage> storages;
    storages.reserve((size_t)nlive);
    for (int32_t i = 0; i < nlive; ++i)
      storages.emplace_back(c10::Storage::use_byte_size_t(),
                            (size_t)tpu_capture_live_bytes(tp->capture, i),
                            block_data_ptr(live[(size_t)i], in.device), device_allocator(),
                            /*resizable=*/true);
    py::list out;
    for (const OutSpec& o : tp->outs) {
      switch (o.kind) {
        case OutSpec::LIVE:
          out.append(py::reinterpret_steal<py::object>(
              THPVariable_Wrap(over_storage(storages[(size_t)o.index], o))));
          break;
        case OutSpec::INPUT_VIEW:  // a real view (autograd sees it as eager does)
          out.append(py::reinterpret_steal<py::object>(THPVariable_Wrap(
              in.tensors[(size_t)o.index].as_strided(o.sizes, o.strides, o.offset))));
          break;
        case OutSpec::INPUT_SELF:
          out.append(py::reinterpret_borrow<py::object>(
              PySequence_Fast_GET_ITEM(args.ptr(), o.index)));
          break;
        case OutSpec::EMPTY:
          out.append(py::reinterpret_steal<py::object>(THPVariable_Wrap(at::empty_strided(
              o.sizes, o.strides,
              at::TensorOptions()
                  .dtype(o.dtype)
                  .device(c10::Device(c10::DeviceType::PrivateUse1, in.device))))));
          break;
        case OutSpec::OBJECT:
          out.append(o.object);
          break;
      }
    }
    replays_++;
    if (tp->as_list) return std::move(out);
    return py::tuple(out);
  }

  // Starts capturing this call; false when it cannot be (then run the graph
  // as usual and do not call end).
  bool begin(const py::sequence& args) {
    if (failures_ >= kMaxFailures || templates_.size() >= kMaxTemplates || pending_) return false;
    auto in = std::make_unique<Inputs>();
    if (!collect(args, in.get())) {
      fail("the inputs are not tpu tensors of distinct storages on one device");
      return false;
    }
    stream_ = runtime_stream_for(in->device);
    tpu_status_t s =
        tpu_capture_begin(stream_, in->addr.data(), in->bytes.data(), (int32_t)in->addr.size());
    if (s != TPU_OK) {  // the stream captures for another graph (another thread)
      tpu_status_free(s);
      return false;
    }
    rng0_ = rng_draws();
    pending_ = std::move(in);
    draws_ = Draws();
    t_draws = &draws_;
    return true;
  }

  // Ends the capture begun for this call, given its results; keeps it when
  // it can be replayed. Returns None, or why it was not kept.
  py::object end(const py::object& results) {
    if (!pending_) return py::str("not capturing");
    std::unique_ptr<Inputs> in = std::move(pending_);
    t_draws = nullptr;
    tpu_capture_t* cap = nullptr;
    const char* why = nullptr;
    check(tpu_capture_end(stream_, &cap, &why));
    auto tp = std::make_unique<Template>();
    tp->capture = cap;
    tp->draws = std::move(draws_);
    std::string reason = why ? why : "";
    if (cap && (rng_draws() - rng0_ != tp->draws.counts.size() ||
                (size_t)tpu_capture_random_count(cap) != tp->draws.counts.size()))
      reason = "it draws random numbers outside the nodes it records";
    if (cap && reason.empty()) reason = describe(results, *in, tp.get());
    if (!reason.empty()) {
      fail(reason);
      return py::str(reason);
    }
    tp->key = std::move(in->key);
    templates_.push_back(std::move(tp));
    captures_++;
    return py::none();
  }

  // Ends a capture whose call raised.
  void abort() {
    if (!pending_) return;
    pending_.reset();
    t_draws = nullptr;
    tpu_capture_t* cap = nullptr;
    const char* why = nullptr;
    tpu_status_t s = tpu_capture_end(stream_, &cap, &why);
    tpu_status_free(s);
    tpu_capture_release(cap);
  }

  py::dict stats() const {
    py::dict d;
    d["captures"] = captures_;
    d["replays"] = replays_;
    d["failures"] = failures_;
    d["reason"] = last_reason_;
    int64_t nodes = 0;
    for (auto& t : templates_) nodes += tpu_capture_node_count(t->capture);
    d["nodes"] = nodes;
    return d;
  }

 private:
  static tpu_stream_t* runtime_stream_for(c10::DeviceIndex device) {
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device));
    return current_runtime_stream(device);
  }

  void fail(const std::string& reason) {
    failures_++;
    last_reason_ = reason;
  }

  // Fills tp->outs from the captured call's results; returns why they cannot
  // be rebuilt, or "".
  static std::string describe(const py::object& results, const Inputs& in, Template* tp) {
    if (!py::isinstance<py::list>(results) && !py::isinstance<py::tuple>(results))
      return "the graph's results are not a list or tuple";
    tp->as_list = py::isinstance<py::list>(results);
    int32_t nlive = tpu_capture_live_count(tp->capture);
    std::vector<bool> used((size_t)nlive, false);
    for (const py::handle& r : results) {
      OutSpec o;
      if (r.is_none() || PyLong_CheckExact(r.ptr()) || PyFloat_CheckExact(r.ptr()) ||
          PyBool_Check(r.ptr())) {
        o.kind = OutSpec::OBJECT;
        o.object = py::reinterpret_borrow<py::object>(r);
        tp->outs.push_back(std::move(o));
        continue;
      }
      if (!THPVariable_Check(r.ptr())) return "a result is neither a tensor nor a number";
      const at::Tensor& t = THPVariable_Unpack(r.ptr());
      if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1 ||
          t.device().index() != in.device || !t.has_storage())
        return "a result is not a tpu tensor on the inputs' device";
      o.dtype = t.scalar_type();
      o.sizes = t.sizes().vec();
      o.strides = t.strides().vec();
      o.offset = t.storage_offset();
      for (size_t i = 0; i < in.tensors.size() && o.index < 0; ++i)
        if (in.tensors[i].unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
          o.kind = OutSpec::INPUT_SELF;
          o.index = (int32_t)i;
        }
      const c10::Storage& st = t.storage();
      uint64_t base = (uint64_t)(uintptr_t)st.data();
      if (o.index < 0 && st.nbytes() == 0) {
        o.kind = OutSpec::EMPTY;
        o.index = 0;
      }
      if (o.index < 0) {
        const tpu_block_t* blk = data_ptr_block(st.data_ptr());
        int32_t k = blk ? tpu_capture_live_index(tp->capture, blk) : -1;
        if (k >= 0) {
          if (st.nbytes() != tpu_capture_live_bytes(tp->capture, k))
            return "a result's storage is not the block the region allocated";
          o.kind = OutSpec::LIVE;
          o.index = k;
          used[(size_t)k] = true;
        }
      }
      for (size_t i = 0; i < in.tensors.size() && o.index < 0; ++i)
        if (base && base == in.addr[i] && st.nbytes() == in.bytes[i]) {
          o.kind = OutSpec::INPUT_VIEW;
          o.index = (int32_t)i;
        }
      if (o.index < 0) return "a result's memory is neither an input's nor the region's own";
      if ((o.kind == OutSpec::LIVE || o.kind == OutSpec::EMPTY) && t.requires_grad())
        return "a result requires grad";
      tp->outs.push_back(std::move(o));
    }
    for (int32_t k = 0; k < nlive; ++k)
      if (!used[(size_t)k]) return "memory the region allocated is kept outside its results";
    return "";
  }

  std::vector<std::unique_ptr<Template>> templates_;
  std::unique_ptr<Inputs> pending_;
  Draws draws_;
  tpu_stream_t* stream_ = nullptr;
  uint64_t rng0_ = 0;
  int failures_ = 0;
  int64_t captures_ = 0, replays_ = 0;
  std::string last_reason_;
};

}  // namespace

void note_random_node(c10::DeviceIndex device, const std::optional<at::Generator>& gen,
                      uint64_t count, int seed_attr, int offset_attr) {
  if (!t_draws) return;
  t_draws->gens.push_back((gen.has_value() && gen->defined()) ? *gen : default_generator(device));
  t_draws->counts.push_back(count);
  check(tpu_capture_mark_random(current_runtime_stream(device), seed_attr, offset_attr));
}

void init_replay(py::module& m) {
  py::class_<Replay>(m, "Replay",
                     "A compiled graph's captured runtime work, replayed per input layout")
      .def(py::init<>())
      .def("run", &Replay::run)
      .def("begin", &Replay::begin)
      .def("end", &Replay::end)
      .def("abort", &Replay::abort)
      .def("stats", &Replay::stats);
}

}  // namespace torch_tpu
