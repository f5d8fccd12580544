// distributed.cpp — the `tpu_dist` c10d backend: a c10d::Backend whose
// collectives are the runtime's (tpu/collectives.h), enqueued on the current
// stream of the tensors' chip. torch_tpu/distributed.py registers it with
// torch.distributed.Backend.register_backend("tpu_dist", ..., devices=["tpu"]).
//
// Work objects hold the runtime requests of what they enqueued: wait()
// blocks until they ran and raises their status through check() (a timeout
// becomes DistBackendError naming the collective and the missing ranks).
// Futures are completed by one completion thread per backend, in order, so
// their callbacks never run on a stream's worker. That thread never drops
// the tensors a finished Work kept: they may hold Python objects, and a
// thread that releases one takes the GIL inside a (noexcept) destructor,
// where CPython, if the interpreter is finalizing, ends the thread with
// pthread_exit: std::terminate. They go to the releaser thread (see
// Releaser).
//
// Between hosts (a group whose ranks are not all on one host, as
// torch_tpu/distributed.py detects through the store), the backend holds a
// ProcessGroupGloo made on the same store and runs every collective through
// it over host staging buffers: enqueued on the same stream are the copies
// device->host, a host function that runs the Gloo collective (and waits for
// it, with the collective's timeout), the copies host->device, and a host
// function that completes the request. The stream order, Work, futures and
// timeouts are therefore the same as on the shared-memory path.
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
#include <map>
#include <optional>
#include <functional>
#include <mutex>
#include <thread>
#include <atomic>

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
  }

  // Called by the releaser, with the GIL: the inputs and staging buffers
  // are no longer needed once the collectives ran.
  void release_kept() { keep_.clear(); }

 private:
  std::vector<tpu_coll_request_t*> requests_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_;  // inputs and staging buffers, until the collectives ran
  int source_rank_;
  c10::intrusive_ptr<at::ivalue::Future> future_;
};

// Drops finished Work (its kept tensors, and the completer's reference) on
// a thread of its own that holds the GIL while it does, so no destructor
// ever waits for the GIL. Releasing a tensor that Python saw gives the GIL
// up and takes it back (THPVariable_dealloc); a thread that takes it while
// the interpreter finalizes is ended there, inside a destructor. So
// finalization must not start while a batch is released: close(), run by
// an atexit hook (init_distributed), which Python runs before it
// finalizes, waits for the batch in progress, and later batches are left
// to the process exit. One per process, never destroyed, like local_state().
class Releaser {
 public:
  static Releaser& get() {
    static Releaser* r = started_ = new Releaser();
    return *r;
  }
  // At exit, with the GIL held; does nothing if no Work was ever released.
  static void close() {
    if (Releaser* r = started_.load()) r->close_now();
  }
  void push(c10::intrusive_ptr<WorkTPU> work) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(work.release());
    }
    cv_.notify_one();
  }

 private:
  Releaser() { std::thread([this] { loop(); }).detach(); }

  void loop() {
    for (;;) {
      std::vector<WorkTPU*> batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        batch.swap(queue_);
        if (closed_) continue;  // exiting: left to the process exit
        busy_ = true;
      }
      release(batch);
      {
        std::lock_guard<std::mutex> lock(mu_);
        busy_ = false;
      }
      idle_.notify_all();
    }
  }

  static void release(const std::vector<WorkTPU*>& batch) {
    PyGILState_STATE gil = PyGILState_Ensure();
    for (WorkTPU* w : batch) {
      auto work = c10::intrusive_ptr<WorkTPU>::reclaim(w);
      work->release_kept();
    }
    PyGILState_Release(gil);
  }

  void close_now() {
    py::gil_scoped_release no_gil;  // the batch in progress needs it
    std::unique_lock<std::mutex> lock(mu_);
    closed_ = true;
    idle_.wait(lock, [this] { return !busy_; });
  }

  static inline std::atomic<Releaser*> started_{nullptr};
  std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::vector<WorkTPU*> queue_;
  bool busy_ = false, closed_ = false;
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
      Releaser::get().push(std::move(work));
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<WorkTPU>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

// PREMUL_SUM (FSDP2's reductions with a gradient divide factor, as
// TorchTitan sets it) is SUM over inputs scaled by the op's factor:
// to_reduce_op maps it to SUM where the caller has scaled them (allow_premul)
// with premul() below, and refuses it elsewhere.
tpu_reduce_op_t to_reduce_op(const c10d::ReduceOp& op, bool allow_premul = false) {
  switch (op.op_) {
    case c10d::ReduceOp::PREMUL_SUM:
      TORCH_CHECK(allow_premul, "tpu_dist supports PREMUL_SUM in all_reduce and "
                  "reduce_scatter only");
      return TPU_REDUCE_SUM;
    case c10d::ReduceOp::SUM: return TPU_REDUCE_SUM;
    case c10d::ReduceOp::AVG: return TPU_REDUCE_AVG;
    case c10d::ReduceOp::PRODUCT: return TPU_REDUCE_PRODUCT;
    case c10d::ReduceOp::MIN: return TPU_REDUCE_MIN;
    case c10d::ReduceOp::MAX: return TPU_REDUCE_MAX;
    default:
      TORCH_CHECK(false, "tpu_dist does not support reduce op ", (int)op.op_,
                  " (supported: SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM)");
  }
}

// For PREMUL_SUM: `t` times the op's factor (a number, or a one-element
// tensor), queued on the current stream ahead of the collective; in place
// for the in-place collectives (all_reduce), else a new tensor. Any other
// op: `t` itself.
at::Tensor premul(const at::Tensor& t, const c10d::ReduceOp& op, bool in_place) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return t;
  auto* factor = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(factor, "tpu_dist: PREMUL_SUM without a factor");
  if (factor->tensor_factor.defined()) {
    at::Tensor f = factor->tensor_factor.to(t.device(), t.scalar_type());
    return in_place ? at::Tensor(t).mul_(f) : t.mul(f);
  }
  return in_place ? at::Tensor(t).mul_(factor->double_factor) : t.mul(factor->double_factor);
}

// ---- Between hosts: Gloo over staged host buffers ---------------------------------------------

// The first failure of the Gloo path: later collectives fail at once with it
// (like an aborted communicator).
struct InterState {
  std::mutex mu;
  std::string error;

  // Progress, for the message of a collective that fails: the number of the
  // last collective this rank started through the whole group's Gloo,
  // published to the store (key tpu_dist/progress/RANK) by a thread at most
  // every 200 ms, so a failing rank can name the ranks that never started it.
  std::atomic<uint64_t> started{0};

  void start_publishing(c10::intrusive_ptr<c10d::Store> store, int rank, int size) {
    store_ = std::move(store);
    rank_ = rank;
    size_ = size;
    publisher_ = std::thread([this] { publish_loop(); });
  }

  ~InterState() {
    if (!publisher_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(pub_mu_);
      stop_ = true;
    }
    pub_cv_.notify_all();
    publisher_.join();
  }

  // "; rank 1 did not arrive (last seen starting collective #1)" for every rank
  // whose published progress is below `seq` (empty when none, or unknown).
  std::string missing(uint64_t seq) {
    if (!store_) return "";
    std::string out;
    try {
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        std::string key = progress_key(p);
        uint64_t at = 0;
        if (store_->check({key})) {
          auto v = store_->get(key);
          at = std::stoull(std::string(v.begin(), v.end()));
        }
        if (at >= seq) continue;
        out += "; rank " + std::to_string(p) + " did not arrive (" +
               (at ? "last seen starting collective #" + std::to_string(at) : std::string("not seen starting any")) +
               ")";
      }
    } catch (...) {
      return out;  // the store is gone too: what is known
    }
    return out;
  }

 private:
  static std::string progress_key(int rank) { return "tpu_dist/progress/" + std::to_string(rank); }

  void publish_loop() {
    uint64_t published = 0;
    std::unique_lock<std::mutex> lock(pub_mu_);
    while (!stop_) {
      pub_cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stop_; });
      uint64_t now = started.load();
      if (stop_ || now == published) continue;
      lock.unlock();
      try {
        std::string v = std::to_string(now);
        store_->set(progress_key(rank_), std::vector<uint8_t>(v.begin(), v.end()));
        published = now;
      } catch (...) {
      }
      lock.lock();
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_ = 0, size_ = 0;
  std::mutex pub_mu_;
  std::condition_variable pub_cv_;
  bool stop_ = false;
  std::thread publisher_;
};

// One collective through Gloo: what runs on the stream worker.
struct StagedOp {
  std::vector<at::Tensor> host;  // staging buffers, alive until the copies back ran
  std::function<void()> body;    // the Gloo collective on them; throws on failure
  tpu_coll_request_t* req = nullptr;
  std::string what;  // "all_reduce (collective #3, Gloo between hosts) on rank 0 of 2"
  std::shared_ptr<InterState> state;
  tpu_comm_t* local = nullptr;  // hierarchical: the host's communicator, aborted on failure
  uint64_t seq = 0;             // its number (progress)
  bool whole_group = false;     // on the whole group's Gloo (progress, missing ranks)
  ~StagedOp() {
    tpu_coll_request_release(req);
    if (local) tpu_comm_release(local);
  }
};
using StagedRef = std::shared_ptr<StagedOp>;

void staged_run(void* arg) {
  std::unique_ptr<StagedRef> holder(static_cast<StagedRef*>(arg));
  StagedOp& op = **holder;
  {
    std::lock_guard<std::mutex> lock(op.state->mu);
    if (!op.state->error.empty()) {
      tpu_coll_request_complete(op.req, tpu_status_make(TPU_CODE_ABORTED,
          "%s: not run, the Gloo transport failed earlier: %s", op.what.c_str(),
          op.state->error.c_str()));
      return;
    }
  }
  if (op.whole_group) op.state->started.store(op.seq);
  std::string msg;
  try {
    op.body();
    return;
  } catch (const std::exception& e) {
    msg = e.what();
  } catch (...) {
    msg = "unknown error";
  }
  auto nl = msg.find('\n');
  if (nl != std::string::npos) msg.resize(nl);
  bool timed_out = msg.find("imed out") != std::string::npos || msg.find("imeout") != std::string::npos;
  std::string full = op.what + (timed_out ? " timed out: " : " failed: ") + msg;
  if (op.whole_group) full += op.state->missing(op.seq);
  {
    std::lock_guard<std::mutex> lock(op.state->mu);
    if (op.state->error.empty()) op.state->error = full;
  }
  // The host's other ranks wait in the broadcast that follows: fail them too.
  if (op.local) tpu_comm_abort(op.local, full.c_str());
  tpu_coll_request_complete(op.req, tpu_status_make(timed_out ? TPU_CODE_DEADLINE_EXCEEDED
                                                              : TPU_CODE_ABORTED, "%s", full.c_str()));
}

// Hierarchical all_reduce: one request for its parts, completed after them.
struct CompositeOp {
  std::vector<tpu_coll_request_t*> parts;
  tpu_coll_request_t* req = nullptr;
  std::string what;  // prefixed to a failure's message
  ~CompositeOp() {
    for (auto* p : parts) tpu_coll_request_release(p);
    tpu_coll_request_release(req);
  }
};

void composite_finish(void* arg) {
  std::unique_ptr<CompositeOp> op(static_cast<CompositeOp*>(arg));
  tpu_status_t first = TPU_OK;
  for (auto* p : op->parts) {  // done: they ran earlier on this stream
    tpu_status_t s = tpu_coll_request_wait(p);
    if (first == TPU_OK) first = s;
    else tpu_status_free(s);
  }
  if (first != TPU_OK) {
    tpu_status_t annotated = tpu_status_make(tpu_status_code(first), "%s: %s", op->what.c_str(),
                                             tpu_status_message(first));
    tpu_status_free(first);
    first = annotated;
  }
  tpu_coll_request_complete(op->req, first);
}

void staged_finish(void* arg) {
  std::unique_ptr<StagedRef> holder(static_cast<StagedRef*>(arg));
  tpu_coll_request_complete((*holder)->req, TPU_OK);  // dropped if the body failed
}

c10d::ReduceOp to_c10d_op(tpu_reduce_op_t op) {
  switch (op) {
    case TPU_REDUCE_MIN: return c10d::ReduceOp::MIN;
    case TPU_REDUCE_MAX: return c10d::ReduceOp::MAX;
    case TPU_REDUCE_PRODUCT: return c10d::ReduceOp::PRODUCT;
    default: return c10d::ReduceOp::SUM;  // AVG: a sum, divided after
  }
}

// Reductions run in the dtype's compute type (half types in float32, as on
// the shared-memory path); int16, which Gloo lacks, in int32 (wraps the same).
at::ScalarType gloo_type(at::ScalarType t) {
  if (t == at::kHalf || t == at::kBFloat16) return at::kFloat;
  if (t == at::kShort) return at::kInt;
  return t;
}

class BackendTPU : public c10d::Backend {
 public:
  // inter: Gloo over the whole group (several hosts), else null. leaders:
  // Gloo between the hosts' first ranks (hierarchical all_reduce; null on the
  // other ranks); host/local_rank/local_size: this rank's host and its place
  // there, whose ranks then share a communicator (local_size 0: none).
  BackendTPU(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
             std::chrono::milliseconds timeout, c10::intrusive_ptr<c10d::Backend> inter,
             c10::intrusive_ptr<c10d::Backend> leaders, int host, int local_rank, int local_size,
             std::string host_ranks)
      : c10d::Backend(rank, size), timeout_(timeout), inter_(std::move(inter)),
        leaders_(std::move(leaders)), host_(host), local_rank_(local_rank),
        host_ranks_(std::move(host_ranks)) {
    if (inter_) inter_state_->start_publishing(store, rank, size);
    if (inter_ && local_size <= 0) return;  // between hosts, flat: no shared-memory communicator
    if (!inter_) local_size = size, local_rank = rank;
    tpu_comm_id_t id;
    const std::string key = inter_ ? "tpu_dist/comm_id/host" + std::to_string(host) : "tpu_dist/comm_id";
    if (local_rank == 0) {
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
      s = tpu_comm_create(&id, local_size, local_rank, timeout.count(), &comm_);
    } else {
      s = tpu_comm_create(&id, local_size, local_rank, timeout.count(), &comm_);
    }
    check(s);
    // Buffers allocated from now on can be read in place by the peers
    // (large collectives skip the staging); a driver that cannot share
    // memory just keeps staging.
    tpu_status_free(tpu_comm_share_chip_memory(tpu_stream_chip(current_runtime_stream(current_device()))));
  }

  ~BackendTPU() override {
    completer_.reset();  // waits for pending futures (each bounded by its timeout)
    if (comm_) tpu_comm_release(comm_);
  }

  const std::string getBackendName() const override { return "tpu_dist"; }

  // Collectives the shared-memory communicator ran (-1: none), for tests.
  int64_t collectives_run() const { return comm_ ? (int64_t)tpu_comm_sequence(comm_) : -1; }

  void setTimeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }

  void abort() override {
    if (comm_) tpu_comm_abort(comm_, "aborted by the process group");
    std::lock_guard<std::mutex> lock(inter_state_->mu);
    if (inter_state_->error.empty()) inter_state_->error = "aborted by the process group";
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    auto& t = single(tensors, "broadcast");
    return run(c10d::OpType::BROADCAST, t, {t}, [&](const at::Tensor& dense, tpu_coll_args_t& a) {
      a.kind = TPU_COLL_BROADCAST;
      a.send = a.recv = device_addr(dense);
      a.count = dense.numel();
      a.root = (int)opts.rootRank;
    }, opts.timeout);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    auto& t = single(tensors, "allreduce");
    tpu_reduce_op_t op = to_reduce_op(opts.reduceOp, true);
    premul(t, opts.reduceOp, true);
    return run(c10d::OpType::ALLREDUCE, t, {t}, [&](const at::Tensor& dense, tpu_coll_args_t& a) {
      a.kind = TPU_COLL_ALL_REDUCE;
      a.send = a.recv = device_addr(dense);
      a.count = dense.numel();
      a.op = op;
    }, opts.timeout);
  }

  // Coalescing (ProcessGroup::startCoalescing / endCoalescing, as PyTorch's
  // _coalescing_manager and batch_isend_irecv use them): the collectives
  // issued in between are queued as usual; endCoalescing returns one Work
  // for all of them. The fast-path forms that PyTorch gathers inside the
  // region (allreduce_coalesced, allgather_into_tensor_coalesced,
  // reduce_scatter_tensor_coalesced) each run as one collective of the
  // runtime over all their tensors (tpu_coll_args_t.segments).
  bool supportsCoalescing() const override { return true; }

  void startCoalescing() override {
    coalescing_ = true;
    coalesced_.clear();
  }

  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    coalescing_ = false;
    auto parts = std::move(coalesced_);
    coalesced_.clear();
    std::vector<at::Tensor> outputs;
    for (auto& p : parts)
      for (auto& t : p->result()) outputs.push_back(t);
    return c10::make_intrusive<CoalescedWork>(rank_, c10d::OpType::COALESCED, std::move(parts),
                                              std::move(outputs));
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    if (!inter_) {
      tpu_reduce_op_t op = to_reduce_op(opts.reduceOp, true);
      std::vector<at::Tensor> dense;
      std::vector<tpu_coll_segment_t> segs;
      for (auto& t : tensors) {
        check_same(t, tensors, "allreduce_coalesced");
        premul(t, opts.reduceOp, true);
        dense.push_back(t.is_contiguous() ? t : t.contiguous());
        segs.push_back({device_addr(dense.back()), device_addr(dense.back()), (size_t)t.numel()});
      }
      return run_segments(c10d::OpType::ALLREDUCE_COALESCED, TPU_COLL_ALL_REDUCE, op, tensors, dense,
                          segs, {}, opts.timeout);
    }
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
      a.send = a.recv = device_addr(dense);
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
      a.send = device_addr(in);
      a.recv = device_addr(dense);
      a.count = in.numel();
    }, opts.timeout, {in});
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    TORCH_CHECK(outputs.size() == inputs.size(), "tpu_dist: as many outputs as inputs");
    if (!inter_) {
      std::vector<at::Tensor> dense, ins;
      std::vector<tpu_coll_segment_t> segs;
      for (size_t i = 0; i < outputs.size(); ++i) {
        check_same(outputs[i], outputs, "all_gather_into_tensor_coalesced");
        check_same(inputs[i], outputs, "all_gather_into_tensor_coalesced");
        TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * size_,
                    "tpu_dist all_gather_into_tensor_coalesced: each output must have world_size "
                    "times its input's elements");
        ins.push_back(inputs[i].contiguous());
        dense.push_back(outputs[i].is_contiguous() ? outputs[i] : outputs[i].contiguous());
        segs.push_back({device_addr(ins.back()), device_addr(dense.back()), (size_t)ins.back().numel()});
      }
      return run_segments(c10d::OpType::COALESCED, TPU_COLL_ALL_GATHER, TPU_REDUCE_SUM, outputs, dense,
                          segs, ins, opts.timeout);
    }
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
    a.send = device_addr(src);
    a.recv = device_addr(flat);
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
    a.send = device_addr(src);
    a.recv = root ? device_addr(flat) : 0;
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
      a.send = root ? device_addr(flat) : 0;
      a.recv = device_addr(dense);
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
    tpu_reduce_op_t op = to_reduce_op(opts.reduceOp, true);
    auto in = premul(input, opts.reduceOp, false).contiguous();
    return run(c10d::OpType::_REDUCE_SCATTER_BASE, output, {output}, [&](const at::Tensor& dense, tpu_coll_args_t& a) {
      a.kind = TPU_COLL_REDUCE_SCATTER;
      a.send = device_addr(in);
      a.recv = device_addr(dense);
      a.count = dense.numel();
      a.op = op;
    }, opts.timeout, {in});
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK(outputs.size() == inputs.size(), "tpu_dist: as many outputs as inputs");
    if (!inter_) {
      tpu_reduce_op_t op = to_reduce_op(opts.reduceOp, true);
      std::vector<at::Tensor> dense, ins;
      std::vector<tpu_coll_segment_t> segs;
      for (size_t i = 0; i < outputs.size(); ++i) {
        check_same(outputs[i], outputs, "reduce_scatter_tensor_coalesced");
        check_same(inputs[i], outputs, "reduce_scatter_tensor_coalesced");
        TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * size_,
                    "tpu_dist reduce_scatter_tensor_coalesced: each input must have world_size "
                    "times its output's elements");
        ins.push_back(premul(inputs[i], opts.reduceOp, false).contiguous());
        dense.push_back(outputs[i].is_contiguous() ? outputs[i] : outputs[i].contiguous());
        segs.push_back({device_addr(ins.back()), device_addr(dense.back()), (size_t)dense.back().numel()});
      }
      return run_segments(c10d::OpType::COALESCED, TPU_COLL_REDUCE_SCATTER, op, outputs, dense, segs,
                          ins, opts.timeout);
    }
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
      a.send = device_addr(in);
      a.recv = device_addr(dense);
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
    a.send = device_addr(send);
    a.recv = device_addr(recv);
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
    a.send = device_addr(src);
    a.count = src.numel();
    a.root = dst;
    auto req = enqueue(t, a);
    return finish(c10d::OpType::SEND, {req}, {}, {src});
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    auto& t = single(tensors, "recv");
    auto work = run(c10d::OpType::RECV, t, {t}, [&](const at::Tensor& dense, tpu_coll_args_t& a) {
      a.kind = TPU_COLL_RECV;
      a.recv = device_addr(dense);
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
    return finish(c10d::OpType::BARRIER, {enqueue_on(dev, a)}, {}, {});
  }

 private:
  at::Tensor& single(std::vector<at::Tensor>& tensors, const char* what) {
    TORCH_CHECK(tensors.size() == 1, "tpu_dist ", what, ": one tensor per process (got ",
                tensors.size(), ")");
    check_tensor(tensors[0], what);
    return tensors[0];
  }

  // A tensor of a coalesced collective: on the first tensor's chip, of its dtype.
  void check_same(const at::Tensor& t, const std::vector<at::Tensor>& all, const char* what) {
    check_tensor(t, what);
    TORCH_CHECK(t.device() == all[0].device(), "tpu_dist ", what, ": tensors on different chips (",
                t.device(), " and ", all[0].device(), ")");
    TORCH_CHECK(t.scalar_type() == all[0].scalar_type(), "tpu_dist ", what,
                ": tensors must have one dtype (got ", t.scalar_type(), " and ", all[0].scalar_type(), ")");
  }

  // One runtime collective over several tensors (coalesced forms): results
  // land in `dense` (contiguous), copied into `targets` where they differ.
  c10::intrusive_ptr<c10d::Work> run_segments(c10d::OpType type, tpu_coll_kind_t kind, tpu_reduce_op_t op,
                                              std::vector<at::Tensor>& targets, std::vector<at::Tensor> dense,
                                              const std::vector<tpu_coll_segment_t>& segs,
                                              std::vector<at::Tensor> keep, std::chrono::milliseconds timeout) {
    if (targets.empty()) return finish(type, {}, {}, {});
    tpu_coll_args_t a = args(kind, targets[0], timeout);
    a.op = op;
    a.segments = segs.data();
    a.nsegments = segs.size();
    auto req = enqueue(targets[0], a);
    for (size_t i = 0; i < targets.size(); ++i)
      if (!dense[i].is_same(targets[i])) targets[i].copy_(dense[i]);
    for (auto& d : dense) keep.push_back(d);
    return finish(type, {req}, targets, std::move(keep));
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
    return enqueue_on(on.device().index(), a);
  }

  // The one place a collective is issued: the shared-memory communicator, or
  // Gloo between hosts.
  tpu_coll_request_t* enqueue_on(c10::DeviceIndex dev, tpu_coll_args_t& a) {
    tpu_stream_t* st = current_runtime_stream(dev);
    if (inter_ && comm_ && a.kind == TPU_COLL_ALL_REDUCE) return enqueue_hierarchical(st, a);
    if (inter_) return enqueue_gloo(st, a, inter_, rank_, size_);
    tpu_coll_request_t* req = nullptr;
    check(tpu_comm_enqueue(comm_, st, &a, &req));
    return req;
  }

  // all_reduce between hosts, hierarchically: reduce to the host's first
  // rank (shared memory), all_reduce between those (Gloo), broadcast inside
  // each host (shared memory). A Gloo failure aborts the host's communicator,
  // so its other ranks fail too instead of taking the leader's buffer.
  tpu_coll_request_t* enqueue_hierarchical(tpu_stream_t* st, const tpu_coll_args_t& a) {
    TORCH_CHECK(!(a.dtype == TPU_DTYPE_BOOL && a.op == TPU_REDUCE_AVG),
                "tpu_dist all_reduce: AVG is not defined for bool");
    auto op = std::make_unique<CompositeOp>();
    check(tpu_coll_request_create(&op->req));
    const uint64_t seq = ++inter_seq_;
    op->what = "all_reduce (hierarchical #" + std::to_string(seq) + ") on rank " +
               std::to_string(rank_) + " of " + std::to_string(size_) + ", rank " +
               std::to_string(local_rank_) + " of host " + std::to_string(host_) + " (" +
               host_ranks_ + ")";
    tpu_coll_args_t r = a;
    r.kind = TPU_COLL_REDUCE;
    r.root = 0;
    if (r.op == TPU_REDUCE_AVG) r.op = TPU_REDUCE_SUM;  // divided by the world size between hosts
    tpu_coll_request_t* part = nullptr;
    check(tpu_comm_enqueue(comm_, st, &r, &part));
    op->parts.push_back(part);
    try {
      if (local_rank_ == 0) {
        tpu_coll_args_t g = a;
        g.send = a.recv;
        op->parts.push_back(enqueue_gloo(st, g, leaders_, host_, leaders_->getSize(), size_, seq));
      }
      tpu_coll_args_t b = a;
      b.kind = TPU_COLL_BROADCAST;
      b.send = b.recv = a.recv;
      b.root = 0;
      part = nullptr;
      check(tpu_comm_enqueue(comm_, st, &b, &part));
      op->parts.push_back(part);
    } catch (...) {
      tpu_comm_abort(comm_, "tpu_dist: a hierarchical all_reduce could not be queued");
      tpu_status_free(tpu_stream_synchronize(st));
      throw;
    }
    tpu_coll_request_t* caller = op->req;
    tpu_coll_request_retain(caller);
    CompositeOp* raw = op.release();
    tpu_status_t s = tpu_stream_host_fn(st, composite_finish, raw);
    if (s != TPU_OK) {
      delete raw;
      tpu_coll_request_release(caller);
      check(s);
    }
    return caller;
  }

  // A collective through Gloo over host staging buffers (see the top), as
  // rank `me` of the `n` of `gloo`; AVG divides by `divisor` (default n).
  tpu_coll_request_t* enqueue_gloo(tpu_stream_t* st, const tpu_coll_args_t& a,
                                   c10::intrusive_ptr<c10d::Backend> gloo, int me, int n,
                                   int divisor = 0, uint64_t seq = 0) {
    if (divisor <= 0) divisor = n;
    const char* name = tpu_coll_name(a.kind);
    bool rooted = a.kind == TPU_COLL_BROADCAST || a.kind == TPU_COLL_REDUCE ||
                  a.kind == TPU_COLL_GATHER || a.kind == TPU_COLL_SCATTER ||
                  a.kind == TPU_COLL_SEND || a.kind == TPU_COLL_RECV;
    TORCH_CHECK(!rooted || (a.root >= 0 && a.root < n), "tpu_dist ", name, ": rank ", a.root,
                " is not in the group of ", n);
    TORCH_CHECK(!((a.kind == TPU_COLL_SEND || a.kind == TPU_COLL_RECV) && a.root == me),
                "tpu_dist ", name, ": the peer is this rank");
    bool reduces = a.kind == TPU_COLL_ALL_REDUCE || a.kind == TPU_COLL_REDUCE ||
                   a.kind == TPU_COLL_REDUCE_SCATTER;
    TORCH_CHECK(!(reduces && a.dtype == TPU_DTYPE_BOOL && a.op == TPU_REDUCE_AVG),
                "tpu_dist ", name, ": AVG is not defined for bool");
    if (!seq) seq = ++inter_seq_;  // (after the checks: every rank numbers the same calls)
    const at::ScalarType dtype = a.kind == TPU_COLL_BARRIER ? at::kByte : to_scalar_type(a.dtype);
    const int64_t elem = a.kind == TPU_COLL_BARRIER ? 1 : (int64_t)tpu_dtype_size(a.dtype);
    const int64_t count = (int64_t)a.count;
    const std::chrono::milliseconds t(a.timeout_ms > 0 ? a.timeout_ms : (int64_t)timeout_.count());
    // Gloo stops the collective at its own timeout; the wait has a margin over it.
    const auto wait_t = t + std::chrono::milliseconds(2000);
    const tpu_reduce_op_t rop = a.op;
    auto bytes = [](int64_t nb) { return at::empty({nb}, at::kByte); };
    // n equal parts of a flat buffer (views).
    auto parts = [](const at::Tensor& flat, int n, int64_t len) {
      std::vector<at::Tensor> v;
      for (int p = 0; p < n; ++p) v.push_back(flat.narrow(0, p * len, len));
      return v;
    };

    auto op = std::make_shared<StagedOp>();
    op->state = inter_state_;
    op->seq = seq;
    op->whole_group = gloo.get() == inter_.get();
    op->what = std::string(name) + " (collective #" + std::to_string(seq) +
               ", Gloo between hosts) on rank " + std::to_string(rank_) + " of " + std::to_string(size_);
    if (gloo.get() == leaders_.get() && comm_) {
      op->what += " (host " + std::to_string(me) + " of " + std::to_string(n) + ")";
      tpu_comm_retain(comm_);
      op->local = comm_;
    }
    std::vector<std::pair<at::Tensor, uint64_t>> in, out;  // (host buffer, device address)
    auto finish_avg = [rop, divisor](at::Tensor& g) {
      if (rop != TPU_REDUCE_AVG) return;
      if (at::isFloatingType(g.scalar_type())) g.div_(divisor);
      else g.div_(divisor, "trunc");
    };
    switch (a.kind) {
      case TPU_COLL_ALL_REDUCE:
      case TPU_COLL_REDUCE: {
        auto h = at::empty({count}, dtype);
        in.push_back({h, a.send});
        bool all = a.kind == TPU_COLL_ALL_REDUCE;
        if (all || me == a.root) out.push_back({h, a.recv});
        int root = a.root;
        op->body = [=]() mutable {
          auto g = h.scalar_type() == gloo_type(dtype) ? h : h.to(gloo_type(dtype));
          std::vector<at::Tensor> v{g};
          if (all) {
            c10d::AllreduceOptions o;
            o.reduceOp = to_c10d_op(rop);
            o.timeout = t;
            gloo->allreduce(v, o)->wait(wait_t);
          } else {
            c10d::ReduceOptions o;
            o.reduceOp = to_c10d_op(rop);
            o.rootRank = root;
            o.timeout = t;
            gloo->reduce(v, o)->wait(wait_t);
          }
          finish_avg(g);
          if (!g.is_same(h)) h.copy_(g);
        };
        break;
      }
      case TPU_COLL_BROADCAST: {
        auto h = bytes(count * elem);
        if (me == a.root) in.push_back({h, a.send});
        else out.push_back({h, a.recv});
        int root = a.root;
        op->body = [=]() {
          std::vector<at::Tensor> v{h};
          c10d::BroadcastOptions o;
          o.rootRank = root;
          o.timeout = t;
          gloo->broadcast(v, o)->wait(wait_t);
        };
        break;
      }
      case TPU_COLL_ALL_GATHER:
      case TPU_COLL_GATHER: {
        auto hin = bytes(count * elem);
        in.push_back({hin, a.send});
        bool all = a.kind == TPU_COLL_ALL_GATHER;
        bool receives = all || me == a.root;
        auto hout = bytes(receives ? n * count * elem : 0);
        if (receives) out.push_back({hout, a.recv});
        int root = a.root;
        op->body = [=]() {
          std::vector<at::Tensor> inputs{hin};
          std::vector<std::vector<at::Tensor>> outputs(1);
          if (receives) outputs[0] = parts(hout, n, count * elem);
          if (all) {
            c10d::AllgatherOptions o;
            o.timeout = t;
            gloo->allgather(outputs, inputs, o)->wait(wait_t);
          } else {
            c10d::GatherOptions o;
            o.rootRank = root;
            o.timeout = t;
            if (!receives) outputs.clear();
            gloo->gather(outputs, inputs, o)->wait(wait_t);
          }
        };
        break;
      }
      case TPU_COLL_SCATTER: {
        bool root = me == a.root;
        auto hin = bytes(root ? n * count * elem : 0);
        if (root) in.push_back({hin, a.send});
        auto hout = bytes(count * elem);
        out.push_back({hout, a.recv});
        int r = a.root;
        op->body = [=]() {
          std::vector<at::Tensor> outputs{hout};
          std::vector<std::vector<at::Tensor>> inputs;
          if (root) inputs.push_back(parts(hin, n, count * elem));
          c10d::ScatterOptions o;
          o.rootRank = r;
          o.timeout = t;
          gloo->scatter(outputs, inputs, o)->wait(wait_t);
        };
        break;
      }
      case TPU_COLL_REDUCE_SCATTER: {
        auto hin = at::empty({n * count}, dtype);
        auto hout = at::empty({count}, dtype);
        in.push_back({hin, a.send});
        out.push_back({hout, a.recv});
        op->body = [=]() mutable {
          auto gt = gloo_type(dtype);
          auto gin = hin.scalar_type() == gt ? hin : hin.to(gt);
          auto gout = hout.scalar_type() == gt ? hout : at::empty({count}, gt);
          c10d::ReduceScatterOptions o;
          o.reduceOp = to_c10d_op(rop);
          o.timeout = t;
          gloo->_reduce_scatter_base(gout, gin, o)->wait(wait_t);
          finish_avg(gout);
          if (!gout.is_same(hout)) hout.copy_(gout);
        };
        break;
      }
      case TPU_COLL_ALL_TO_ALL: {
        std::vector<int64_t> sb(n), rb(n);
        int64_t st_total = 0, rt_total = 0;
        for (int p = 0; p < n; ++p) {
          sb[p] = (int64_t)(a.send_counts ? a.send_counts[p] : a.count) * elem;
          rb[p] = (int64_t)(a.recv_counts ? a.recv_counts[p] : a.count) * elem;
          st_total += sb[p];
          rt_total += rb[p];
        }
        TORCH_CHECK(!a.send_displs && !a.recv_displs, "tpu_dist all_to_all over Gloo: packed buffers only");
        auto hin = bytes(st_total), hout = bytes(rt_total);
        in.push_back({hin, a.send});
        out.push_back({hout, a.recv});
        op->body = [=]() mutable {
          c10d::AllToAllOptions o;
          o.timeout = t;
          gloo->alltoall_base(hout, hin, rb, sb, o)->wait(wait_t);
        };
        break;
      }
      case TPU_COLL_SEND: {
        auto h = bytes(count * elem);
        in.push_back({h, a.send});
        int peer = a.root;
        op->body = [=]() {
          std::vector<at::Tensor> v{h};
          gloo->send(v, peer, 0)->wait(wait_t);
        };
        break;
      }
      case TPU_COLL_RECV: {
        auto h = bytes(count * elem);
        out.push_back({h, a.recv});
        int peer = a.root;
        op->body = [=]() {
          std::vector<at::Tensor> v{h};
          gloo->recv(v, peer, 0)->wait(wait_t);
        };
        break;
      }
      case TPU_COLL_BARRIER: {
        op->body = [=]() {
          c10d::BarrierOptions o;
          o.timeout = t;
          gloo->barrier(o)->wait(wait_t);
        };
        break;
      }
      default:
        TORCH_CHECK(false, "tpu_dist: ", name, " is not supported over Gloo");
    }
    for (auto& p : in) op->host.push_back(p.first);
    for (auto& p : out) op->host.push_back(p.first);
    check(tpu_coll_request_create(&op->req));
    tpu_coll_request_t* caller_req = op->req;  // the caller's reference; op holds another
    tpu_coll_request_retain(caller_req);
    // Queue: copies in, the Gloo collective, copies back, completion. On a
    // failure to queue, wait for what was queued (it uses the host buffers).
    tpu_status_t s = TPU_OK;
    for (auto& p : in)
      if (s == TPU_OK && p.first.numel())
        s = tpu_stream_copy(st, TPU_COPY_D2H, device_addr(p.first), p.second, (size_t)p.first.numel() * p.first.element_size());
    if (s == TPU_OK) {
      auto* h = new StagedRef(op);
      s = tpu_stream_host_fn(st, staged_run, h);
      if (s != TPU_OK) delete h;
    }
    for (auto& p : out)
      if (s == TPU_OK && p.first.numel())
        s = tpu_stream_copy(st, TPU_COPY_H2D, p.second, device_addr(p.first), (size_t)p.first.numel() * p.first.element_size());
    if (s == TPU_OK) {
      auto* h = new StagedRef(op);
      s = tpu_stream_host_fn(st, staged_finish, h);
      if (s != TPU_OK) delete h;
    }
    if (s != TPU_OK) {
      tpu_status_free(tpu_stream_synchronize(st));
      check(s);
    }
    return caller_req;
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
    if (coalescing_) coalesced_.push_back(work);
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
  c10::intrusive_ptr<c10d::Backend> inter_;  // Gloo between hosts; null: shared memory
  c10::intrusive_ptr<c10d::Backend> leaders_;  // hierarchical: Gloo between the hosts' first ranks
  int host_ = 0, local_rank_ = 0;
  std::string host_ranks_;  // "its ranks 1, 3" (messages name host-local ranks)
  std::shared_ptr<InterState> inter_state_ = std::make_shared<InterState>();
  uint64_t inter_seq_ = 0;
  std::vector<c10::intrusive_ptr<WorkTPU>> pending_;
  bool coalescing_ = false;                              // between startCoalescing and endCoalescing
  std::vector<c10::intrusive_ptr<WorkTPU>> coalesced_;  // what was issued there
  std::unique_ptr<Completer> completer_ = std::make_unique<Completer>();
};

}  // namespace

void init_distributed(py::module& m) {
  py::module_::import("atexit").attr("register")(py::cpp_function([] { Releaser::close(); }));
  m.def("_dist_collectives_run", [](const c10::intrusive_ptr<c10d::Backend>& backend) -> int64_t {
    auto* b = dynamic_cast<BackendTPU*>(backend.get());
    TORCH_CHECK(b, "not a tpu_dist backend");
    return b->collectives_run();
  });
  m.def(
      "_dist_create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::duration<float> timeout, c10::intrusive_ptr<c10d::Backend> inter,
         c10::intrusive_ptr<c10d::Backend> leaders, int host, int local_rank,
         int local_size, std::string host_ranks) -> c10::intrusive_ptr<c10d::Backend> {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
        TORCH_CHECK(!leaders || local_rank == 0, "tpu_dist: only a host's first rank joins the leaders");
        TORCH_CHECK(!inter || local_size <= 0 || local_rank != 0 || leaders,
                    "tpu_dist: a host's first rank needs the leaders' group");
        return c10::make_intrusive<BackendTPU>(store, rank, size, ms, std::move(inter), std::move(leaders),
                                               host, local_rank, local_size, std::move(host_ranks));
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::arg("inter") = c10::intrusive_ptr<c10d::Backend>(),
      py::arg("leaders") = c10::intrusive_ptr<c10d::Backend>(), py::arg("host") = 0,
      py::arg("local_rank") = 0, py::arg("local_size") = 0, py::arg("host_ranks") = "");
}

}  // namespace torch_tpu
