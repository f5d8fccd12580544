// distributed.cpp — the `tpu_dist` c10d backend: a c10d::Backend whose
// collectives are the runtime's (tpu/collectives.h), enqueued on the current
// stream of the tensors' chip. torch_tpu/distributed.py registers it with
// torch.distributed.Backend.register_backend("tpu_dist", ..., devices=["tpu"]).
//
// Work objects hold the runtime requests of what they enqueued: wait()
// blocks until they ran and raises their status through check() (a timeout
// becomes DistBackendError naming the collective and the missing ranks).
// Futures are completed by one completion thread per backend, in order, so
// their callbacks never run on a stream's worker.
//
// Tensors must be dense tpu tensors; non-contiguous ones are staged through
// contiguous copies (enqueued on the same stream, so ordering holds). The
// list forms (allgather, gather, scatter, reduce_scatter, alltoall) stage
// through one flat tensor and the flat collective.
#include <ATen/core/ivalue.h>
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "tpu_bridge.h"

extern "C" {
#include "tpu/collectives.h"
}

namespace py = pybind11;

namespace torch_tpu {
namespace {

// A copy of a runtime status as an exception (for futures).
std::exception_ptr status_exception(tpu_status_t s) {
  try {
    check(s);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

class WorkTPU : public c10d::Work {
 public:
  WorkTPU(int rank, c10d::OpType type, std::vector<tpu_coll_request_t*> requests,
          std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep, int source_rank = -1)
      : c10d::Work(rank, type),
        requests_(std::move(requests)),
        outputs_(std::move(outputs)),
        keep_(std::move(keep)),
        source_rank_(source_rank),
        future_(c10::make_intrusive<at::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  ~WorkTPU() override {
    for (auto* r : requests_) tpu_coll_request_release(r);
  }

  bool isCompleted() override {
    for (auto* r : requests_)
      if (!tpu_coll_request_done(r)) return false;
    return true;
  }

  bool isSuccess() const override {
    for (auto* r : requests_) {
      if (!tpu_coll_request_done(r)) return false;
      tpu_status_t s = tpu_coll_request_wait(r);
      bool ok = s == TPU_OK;
      tpu_status_free(s);
      if (!ok) return false;
    }
    return true;
  }

  // The first failure of its collectives, or TPU_OK; waits for all of them.
  tpu_status_t wait_status() {
    tpu_status_t first = TPU_OK;
    for (auto* r : requests_) {
      tpu_status_t s = tpu_coll_request_wait(r);
      if (first == TPU_OK) first = s;
      else tpu_status_free(s);
    }
    return first;
  }

  bool wait(std::chrono::milliseconds /*timeout*/) override {
    // Every collective has its own deadline: this never waits longer.
    tpu_status_t s;
    if (PyGILState_Check()) {
      py::gil_scoped_release no_gil;
      s = wait_status();
    } else {
      s = wait_status();
    }
    check(s);
    return true;
  }

  void synchronize() override { wait(kNoTimeout); }

  int sourceRank() const override { return source_rank_; }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Called by the completion thread.
  void complete() {
    tpu_status_t s = wait_status();
    if (s == TPU_OK) {
      future_->markCompleted(c10::IValue(outputs_));
    } else {
      future_->setError(status_exception(s));
    }
    keep_.clear();
  }

 private:
  std::vector<tpu_coll_request_t*> requests_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_;  // inputs and staging buffers, until the collectives ran
  int source_rank_;
  c10::intrusive_ptr<at::ivalue::Future> future_;
};

// Completes futures in order, off the streams' workers.
class Completer {
 public:
  Completer() : thread_([this] { loop(); }) {}
  ~Completer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void push(c10::intrusive_ptr<WorkTPU> work) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(work));
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    for (;;) {
      c10::intrusive_ptr<WorkTPU> work;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        work = std::move(queue_.front());
        queue_.pop_front();
      }
      work->complete();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<WorkTPU>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

tpu_reduce_op_t to_reduce_op(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return TPU_REDUCE_SUM;
    case c10d::ReduceOp::AVG: return TPU_REDUCE_AVG;
    case c10d::ReduceOp::PRODUCT: return TPU_REDUCE_PRODUCT;
    case c10d::ReduceOp::MIN: return TPU_REDUCE_MIN;
    case c10d::ReduceOp::MAX: return TPU_REDUCE_MAX;
    default:
      TORCH_CHECK(false, "tpu_dist does not support reduce op ", (int)op.op_,
                  " (supported: SUM, AVG, PRODUCT, MIN, MAX)");
  }
}

uint64_t addr(const at::Tensor& t) { return (uint64_t)(uintptr_t)t.data_ptr(); }

class BackendTPU : public c10d::Backend {
 public:
  BackendTPU(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
             std::chrono::milliseconds timeout)
      : c10d::Backend(rank, size), timeout_(timeout) {
    tpu_comm_id_t id;
    const std::string key = "tpu_dist/comm_id";
    if (rank == 0) {
      check(tpu_comm_unique_id(&id));
      store->set(key, std::vector<uint8_t>(id.bytes, id.bytes + sizeof(id.bytes)));
    } else {
      auto bytes = store->get(key);
      TORCH_CHECK(bytes.size() == sizeof(id.bytes), "tpu_dist: malformed communicator id in the store");
      memcpy(id.bytes, bytes.data(), sizeof(id.bytes));
    }
    tpu_status_t s;
    if (PyGILState_Check()) {
      py::gil_scoped_release no_gil;
      s = tpu_comm_create(&id, size, rank, timeout.count(), &comm_);
    } else {
      s = tpu_comm_create(&id, size, rank, timeout.count(), &comm_);
    }
    check(s);
  }

  ~BackendTPU() override {
    completer_.reset();  // waits for pending futures (each bounded by its timeout)
    tpu_comm_release(comm_);
  }

  const std::string getBackendName() const override { return "tpu_dist"; }

  void setTimeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }

  void abort() override { tpu_comm_abort(comm_, "aborted by the process group"); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    auto& t = single(tensors, "broadcast");
    return run(c10d::OpType::BROADCAST, t, {t}, [&](const at::Tensor& dense, tpu_coll_args_t& a) {
      a.kind = TPU_COLL_BROADCAST;
      a.send = a.recv = addr(dense);
      a.count = dense.numel();
      a.root = (int)opts.rootRank;
    }, opts.timeout);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    auto& t = single(tensors, "allreduce");
    tpu_reduce_op_t op = to_reduce_op(opts.reduceOp);
    return run(c10d::OpType::ALLREDUCE, t, {t}, [&](const at::Tensor& dense, tpu_coll_args_t& a) {
      a.kind = TPU_COLL_ALL_REDUCE;
      a.send = a.recv = addr(dense);
      a.count = dense.numel();
      a.op = op;
    }, opts.timeout);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{t};
      auto w = c10::static_intrusive_pointer_cast<WorkTPU>(allreduce(one, opts));
      pending_.push_back(w);
    }
    return collect(c10d::OpType::ALLREDUCE_COALESCED, tensors);
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    auto& t = single(tensors, "reduce");
    tpu_reduce_op_t op = to_reduce_op(opts.reduceOp);
    return run(c10d::OpType::REDUCE, t, {t}, [&](const at::Tensor& dense, tpu_coll_args_t& a) {
      a.kind = TPU_COLL_REDUCE;
      a.send = a.recv = addr(dense);
      a.count = dense.numel();
      a.op = op;
      a.root = (int)opts.rootRank;
    }, opts.timeout);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    check_tensor(output, "all_gather_into_tensor");
    check_tensor(input, "all_gather_into_tensor");
    TORCH_CHECK(output.numel() == input.numel() * size_,
                "tpu_dist all_gather_into_tensor: output must have world_size times the input's "
                "elements");
    TORCH_CHECK(output.scalar_type() == input.scalar_type(),
                "tpu_dist all_gather_into_tensor: output and input dtypes differ");
    auto in = input.contiguous();
    return run(c10d::OpType::_ALLGATHER_BASE, output, {output}, [&](const at::Tensor& dense, tpu_coll_args_t& a) {
      a.kind = TPU_COLL_ALL_GATHER;
      a.send = addr(in);
      a.recv = addr(dense);
      a.count = in.numel();
    }, opts.timeout, {in});
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    TORCH_CHECK(outputs.size() == inputs.size(), "tpu_dist: as many outputs as inputs");
    for (size_t i = 0; i < outputs.size(); ++i)
      pending_.push_back(c10::static_intrusive_pointer_cast<WorkTPU>(
          _allgather_base(outputs[i], inputs[i], opts)));
    return collect(c10d::OpType::COALESCED, outputs);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    auto& in = single(inputs, "allgather");
    TORCH_CHECK(outputs.size() == 1 && (int)outputs[0].size() == size_,
                "tpu_dist allgather: one list of world_size output tensors");
    for (auto& o : outputs[0]) {
      check_tensor(o, "allgather");
      TORCH_CHECK(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(),
                  "tpu_dist allgather: output tensors must match the input's size and dtype");
    }
    auto src = in.contiguous();
    auto flat = at::empty({(int64_t)size_ * in.numel()}, in.options());
    tpu_coll_args_t a = args(TPU_COLL_ALL_GATHER, src, opts.timeout);
    a.send = addr(src);
    a.recv = addr(flat);
    a.count = src.numel();
    auto req = enqueue(in, a);
    for (int p = 0; p < size_; ++p)
      outputs[0][p].copy_(flat.narrow(0, (int64_t)p * in.numel(), in.numel()).view(outputs[0][p].sizes()));
    return finish(c10d::OpType::ALLGATHER, {req}, outputs[0], {src, flat});
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    auto& in = single(inputs, "gather");
    bool root = rank_ == opts.rootRank;
    if (root)
      TORCH_CHECK(outputs.size() == 1 && (int)outputs[0].size() == size_,
                  "tpu_dist gather: the root needs one list of world_size output tensors");
    auto src = in.contiguous();
    auto flat = root ? at::empty({(int64_t)size_ * in.numel()}, in.options()) : src;
    tpu_coll_args_t a = args(TPU_COLL_GATHER, src, opts.timeout);
    a.send = addr(src);
    a.recv = root ? addr(flat) : 0;
    a.count = src.numel();
    a.root = (int)opts.rootRank;
    auto req = enqueue(in, a);
    std::vector<at::Tensor> outs;
    if (root) {
      for (int p = 0; p < size_; ++p)
        outputs[0][p].copy_(flat.narrow(0, (int64_t)p * in.numel(), in.numel()).view(outputs[0][p].sizes()));
      outs = outputs[0];
    }
    return finish(c10d::OpType::GATHER, {req}, outs, {src, flat});
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    auto& out = single(outputs, "scatter");
    bool root = rank_ == opts.rootRank;
    at::Tensor flat;
    if (root) {
      TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == size_,
                  "tpu_dist scatter: the root needs one list of world_size input tensors");
      std::vector<at::Tensor> parts;
      for (auto& t : inputs[0]) parts.push_back(t.reshape({-1}));
      flat = at::cat(parts);
    }
    return run(c10d::OpType::SCATTER, out, {out}, [&](const at::Tensor& dense, tpu_coll_args_t& a) {
      a.kind = TPU_COLL_SCATTER;
      a.send = root ? addr(flat) : 0;
      a.recv = addr(dense);
      a.count = dense.numel();
      a.root = (int)opts.rootRank;
    }, opts.timeout, root ? std::vector<at::Tensor>{flat} : std::vector<at::Tensor>{});
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    check_tensor(output, "reduce_scatter_tensor");
    check_tensor(input, "reduce_scatter_tensor");
    TORCH_CHECK(input.numel() == output.numel() * size_,
                "tpu_dist reduce_scatter_tensor: input must have world_size times the output's "
                "elements");
    tpu_reduce_op_t op = to_reduce_op(opts.reduceOp);
    auto in = input.contiguous();
    return run(c10d::OpType::_REDUCE_SCATTER_BASE, output, {output}, [&](const at::Tensor& dense, tpu_coll_args_t& a) {
      a.kind = TPU_COLL_REDUCE_SCATTER;
      a.send = addr(in);
      a.recv = addr(dense);
      a.count = dense.numel();
      a.op = op;
    }, opts.timeout, {in});
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK(outputs.size() == inputs.size(), "tpu_dist: as many outputs as inputs");
    for (size_t i = 0; i < outputs.size(); ++i)
      pending_.push_back(c10::static_intrusive_pointer_cast<WorkTPU>(
          _reduce_scatter_base(outputs[i], inputs[i], opts)));
    return collect(c10d::OpType::COALESCED, outputs);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    auto& out = single(outputs, "reduce_scatter");
    TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == size_,
                "tpu_dist reduce_scatter: one list of world_size input tensors");
    std::vector<at::Tensor> parts;
    for (auto& t : inputs[0]) {
      TORCH_CHECK(t.numel() == out.numel(), "tpu_dist reduce_scatter: inputs must match the output's size");
      parts.push_back(t.reshape({-1}));
    }
    auto flat = at::cat(parts);
    return _reduce_scatter_base(out, flat, opts);
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override {
    check_tensor(output, "all_to_all_single");
    check_tensor(input, "all_to_all_single");
    std::vector<size_t> sc(size_), rc(size_);
    split_counts(input, input_splits, sc, "input");
    split_counts(output, output_splits, rc, "output");
    // A separate input buffer: the collective reads input while writing output.
    auto in = (input.is_contiguous() && !input.is_same(output)) ? input : input.clone(at::MemoryFormat::Contiguous);
    return run(c10d::OpType::ALLTOALL_BASE, output, {output}, [&](const at::Tensor& dense, tpu_coll_args_t& a) {
      a.kind = TPU_COLL_ALL_TO_ALL;
      a.send = addr(in);
      a.recv = addr(dense);
      a.send_counts = sc.data();
      a.recv_counts = rc.data();
    }, opts.timeout, {in});
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    TORCH_CHECK((int)outputs.size() == size_ && (int)inputs.size() == size_,
                "tpu_dist alltoall: world_size input and output tensors");
    std::vector<size_t> sc(size_), rc(size_);
    std::vector<at::Tensor> parts;
    for (int p = 0; p < size_; ++p) {
      check_tensor(inputs[p], "alltoall");
      check_tensor(outputs[p], "alltoall");
      sc[p] = inputs[p].numel();
      rc[p] = outputs[p].numel();
      parts.push_back(inputs[p].reshape({-1}));
    }
    auto send = at::cat(parts);
    int64_t total = 0;
    for (auto c : rc) total += (int64_t)c;
    auto recv = at::empty({total}, outputs[0].options());
    tpu_coll_args_t a = args(TPU_COLL_ALL_TO_ALL, send, opts.timeout);
    a.send = addr(send);
    a.recv = addr(recv);
    a.send_counts = sc.data();
    a.recv_counts = rc.data();
    auto req = enqueue(outputs[0], a);
    int64_t off = 0;
    for (int p = 0; p < size_; ++p) {
      outputs[p].copy_(recv.narrow(0, off, (int64_t)rc[p]).view(outputs[p].sizes()));
      off += (int64_t)rc[p];
    }
    return finish(c10d::OpType::ALLTOALL, {req}, outputs, {send, recv});
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    auto& t = single(tensors, "send");
    auto src = t.contiguous();
    tpu_coll_args_t a = args(TPU_COLL_SEND, src, c10d::kUnsetTimeout);
    a.send = addr(src);
    a.count = src.numel();
    a.root = dst;
    auto req = enqueue(t, a);
    return finish(c10d::OpType::SEND, {req}, {}, {src});
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    auto& t = single(tensors, "recv");
    auto work = run(c10d::OpType::RECV, t, {t}, [&](const at::Tensor& dense, tpu_coll_args_t& a) {
      a.kind = TPU_COLL_RECV;
      a.recv = addr(dense);
      a.count = dense.numel();
      a.root = src;
    }, c10d::kUnsetTimeout, {}, src);
    return work;
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    c10::DeviceIndex dev = getBoundDeviceId() ? getBoundDeviceId()->index() : current_device();
    if (!opts.device_ids.empty()) dev = (c10::DeviceIndex)opts.device_ids[0];
    tpu_coll_args_t a{};
    a.kind = TPU_COLL_BARRIER;
    a.timeout_ms = timeout_ms(opts.timeout);
    tpu_coll_request_t* req = nullptr;
    check(tpu_comm_enqueue(comm_, current_runtime_stream(dev), &a, &req));
    return finish(c10d::OpType::BARRIER, {req}, {}, {});
  }

 private:
  at::Tensor& single(std::vector<at::Tensor>& tensors, const char* what) {
    TORCH_CHECK(tensors.size() == 1, "tpu_dist ", what, ": one tensor per process (got ",
                tensors.size(), ")");
    check_tensor(tensors[0], what);
    return tensors[0];
  }

  void check_tensor(const at::Tensor& t, const char* what) {
    TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, "tpu_dist ", what,
                ": tensors must be on the tpu device (got ", t.device(), ")");
    TORCH_CHECK(t.layout() == c10::kStrided, "tpu_dist ", what, ": only dense tensors");
    TORCH_CHECK_TYPE(to_tpu_dtype(t.scalar_type()) != TPU_DTYPE_INVALID, "tpu_dist ", what,
                     ": unsupported dtype ", t.scalar_type());
  }

  void split_counts(const at::Tensor& t, const std::vector<int64_t>& splits,
                    std::vector<size_t>& out, const char* which) {
    int64_t rows = t.dim() ? t.size(0) : 1;
    int64_t per_row = rows ? t.numel() / rows : 0;
    if (splits.empty()) {
      TORCH_CHECK(rows % size_ == 0, "tpu_dist all_to_all_single: ", which,
                  " dim 0 must divide by world_size");
      for (auto& c : out) c = (size_t)(rows / size_ * per_row);
      return;
    }
    TORCH_CHECK((int)splits.size() == size_, "tpu_dist all_to_all_single: ", which,
                " split sizes must have world_size entries");
    int64_t sum = 0;
    for (int p = 0; p < size_; ++p) {
      TORCH_CHECK(splits[p] >= 0, "tpu_dist all_to_all_single: negative split size");
      out[p] = (size_t)(splits[p] * per_row);
      sum += splits[p];
    }
    TORCH_CHECK(sum == rows, "tpu_dist all_to_all_single: ", which, " split sizes sum to ", sum,
                ", dim 0 is ", rows);
  }

  int64_t timeout_ms(std::chrono::milliseconds t) const {
    return t == c10d::kUnsetTimeout ? (int64_t)timeout_.count() : (int64_t)t.count();
  }

  tpu_coll_args_t args(tpu_coll_kind_t kind, const at::Tensor& t, std::chrono::milliseconds timeout) {
    tpu_coll_args_t a{};
    a.kind = kind;
    a.dtype = to_tpu_dtype(t.scalar_type());
    a.timeout_ms = timeout_ms(timeout);
    return a;
  }

  tpu_coll_request_t* enqueue(const at::Tensor& on, tpu_coll_args_t& a) {
    tpu_stream_t* st = current_runtime_stream(on.device().index());
    tpu_coll_request_t* req = nullptr;
    check(tpu_comm_enqueue(comm_, st, &a, &req));
    return req;
  }

  // One collective whose result lands in `target`: through a contiguous
  // staging copy when target is not contiguous.
  c10::intrusive_ptr<c10d::Work> run(c10d::OpType type, at::Tensor& target,
                                     std::vector<at::Tensor> outputs,
                                     const std::function<void(const at::Tensor&, tpu_coll_args_t&)>& fill,
                                     std::chrono::milliseconds timeout,
                                     std::vector<at::Tensor> keep = {}, int source_rank = -1) {
    at::Tensor dense = target.is_contiguous() ? target : target.contiguous();
    tpu_coll_args_t a = args(TPU_COLL_BARRIER, dense, timeout);
    fill(dense, a);
    a.dtype = to_tpu_dtype(dense.scalar_type());
    auto req = enqueue(target, a);
    if (!dense.is_same(target)) target.copy_(dense);
    keep.push_back(dense);
    return finish(type, {req}, std::move(outputs), std::move(keep), source_rank);
  }

  c10::intrusive_ptr<c10d::Work> finish(c10d::OpType type, std::vector<tpu_coll_request_t*> reqs,
                                        std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep,
                                        int source_rank = -1) {
    auto work = c10::make_intrusive<WorkTPU>(rank_, type, std::move(reqs), std::move(outputs),
                                             std::move(keep), source_rank);
    completer_->push(work);
    return work;
  }

  // One Work for the collectives just run one by one (coalesced forms).
  c10::intrusive_ptr<c10d::Work> collect(c10d::OpType type, std::vector<at::Tensor> outputs) {
    auto parts = std::move(pending_);
    pending_.clear();
    auto work = c10::make_intrusive<CoalescedWork>(rank_, type, std::move(parts), std::move(outputs));
    return work;
  }

  // Waits on each part; its future completes when every part's has.
  class CoalescedWork : public c10d::Work {
   public:
    CoalescedWork(int rank, c10d::OpType type, std::vector<c10::intrusive_ptr<WorkTPU>> parts,
                  std::vector<at::Tensor> outputs)
        : c10d::Work(rank, type), parts_(std::move(parts)), outputs_(std::move(outputs)) {
      future_ = c10::make_intrusive<at::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()));
      // Completes when every part's future has (the first error wins).
      struct State {
        std::mutex mu;
        size_t left;
        std::exception_ptr error;
      };
      auto state = std::make_shared<State>();
      state->left = parts_.size();
      auto fut = future_;
      auto outs = outputs_;
      if (parts_.empty()) fut->markCompleted(c10::IValue(outs));
      for (auto& p : parts_) {
        p->getFuture()->addCallback([state, fut, outs](c10::ivalue::Future& f) {
          std::exception_ptr err;
          bool last;
          {
            std::lock_guard<std::mutex> lock(state->mu);
            if (f.hasError() && !state->error) state->error = f.exception_ptr();
            last = --state->left == 0;
            err = state->error;
          }
          if (!last) return;
          if (err) fut->setError(err);
          else fut->markCompleted(c10::IValue(outs));
        });
      }
    }
    bool isCompleted() override {
      for (auto& p : parts_)
        if (!p->isCompleted()) return false;
      return true;
    }
    bool wait(std::chrono::milliseconds timeout) override {
      for (auto& p : parts_) p->wait(timeout);
      return true;
    }
    std::vector<at::Tensor> result() override { return outputs_; }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

   private:
    std::vector<c10::intrusive_ptr<WorkTPU>> parts_;
    std::vector<at::Tensor> outputs_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
  };

  tpu_comm_t* comm_ = nullptr;
  std::chrono::milliseconds timeout_;
  std::vector<c10::intrusive_ptr<WorkTPU>> pending_;
  std::unique_ptr<Completer> completer_ = std::make_unique<Completer>();
};

}  // namespace

void init_distributed(py::module& m) {
  m.def(
      "_dist_create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::duration<float> timeout) -> c10::intrusive_ptr<c10d::Backend> {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
        return c10::make_intrusive<BackendTPU>(store, rank, size, ms);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"));
}

}  // namespace torch_tpu
