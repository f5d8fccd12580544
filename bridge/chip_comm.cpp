// chip_comm.cpp — torch.tpu.comm: collectives between the chips of one
// process (like torch.cuda.comm / torch.cuda.nccl), on the runtime's local
// communicators (tpu/collectives.h). torch_tpu/comm.py is the Python side.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tpu_bridge.h"

extern "C" {
#include "tpu/collectives.h"
}

namespace py = pybind11;

namespace torch_tpu {
namespace {

// One communicator per set of chips (tpu_comm_create_local), made on first
// use. A collective is one part per chip, each enqueued on that chip's
// current stream; the parts rendezvous when every chip's queue reaches
// them, so the work queued before them on each chip is done before any
// chip reads its buffers, and the work queued after them waits until every
// chip is done with them. The call returns at once; its tensors are kept
// alive until the parts ran, and a failure (a timeout: a chip whose queue
// never reaches its part) is raised by the next call or by _chips_wait.
struct LocalParts {
  std::vector<tpu_coll_request_t*> reqs;
  std::vector<at::Tensor> keep;
  ~LocalParts() {
    for (auto* r : reqs) tpu_coll_request_release(r);
  }
};

struct LocalState {
  std::mutex mu;
  std::map<std::vector<int64_t>, std::vector<tpu_comm_t*>> comms;
  std::deque<std::unique_ptr<LocalParts>> pending;
};

LocalState& local_state() {
  static LocalState* s = new LocalState();  // process lifetime (workers may use it at exit)
  return *s;
}

// Drops finished collectives (all of them when `wait`); returns the first failure.
tpu_status_t local_reap(LocalState& st, bool wait) {
  tpu_status_t first = TPU_OK;
  for (auto it = st.pending.begin(); it != st.pending.end();) {
    bool done = true;
    for (auto* r : (*it)->reqs) done = done && tpu_coll_request_done(r);
    if (!done && !wait) {
      ++it;
      continue;
    }
    for (auto* r : (*it)->reqs) {
      tpu_status_t s = tpu_coll_request_wait(r);
      if (first == TPU_OK) first = s;
      else tpu_status_free(s);
    }
    it = st.pending.erase(it);
  }
  return first;
}

void chips_collective(const std::string& kind_name, std::vector<int64_t> chips,
                      std::vector<std::optional<at::Tensor>> sends, std::vector<std::optional<at::Tensor>> recvs,
                      int64_t count, int64_t root, int64_t op, double timeout_s, int64_t skip) {
  static const std::map<std::string, tpu_coll_kind_t> kinds = {
      {"all_reduce", TPU_COLL_ALL_REDUCE}, {"reduce", TPU_COLL_REDUCE},
      {"broadcast", TPU_COLL_BROADCAST},   {"all_gather", TPU_COLL_ALL_GATHER},
      {"gather", TPU_COLL_GATHER},         {"scatter", TPU_COLL_SCATTER},
      {"reduce_scatter", TPU_COLL_REDUCE_SCATTER}};
  auto k = kinds.find(kind_name);
  TORCH_CHECK(k != kinds.end(), "torch.tpu.comm: unknown collective ", kind_name);
  const size_t n = chips.size();
  TORCH_CHECK(n >= 1 && n <= TPU_COMM_MAX_RANKS && sends.size() == n && recvs.size() == n,
              "torch.tpu.comm: one send and one recv entry per chip");
  auto parts = std::make_unique<LocalParts>();
  std::vector<tpu_coll_args_t> args(n);
  for (size_t i = 0; i < n; ++i) {
    TORCH_CHECK(chips[i] >= 0 && chips[i] < tpu_chip_count(), "torch.tpu.comm: no chip ", chips[i]);
    for (size_t j = 0; j < i; ++j) TORCH_CHECK(chips[j] != chips[i], "torch.tpu.comm: chip ", chips[i], " twice");
    tpu_coll_args_t& a = args[i];
    a = tpu_coll_args_t{};
    a.kind = k->second;
    a.count = (size_t)count;
    a.root = (int)root;
    a.op = (tpu_reduce_op_t)op;
    a.timeout_ms = (int64_t)(timeout_s * 1000);
    bool typed = false;
    for (auto* t : {&sends[i], &recvs[i]}) {
      if (!t->has_value()) continue;
      const at::Tensor& x = **t;
      TORCH_CHECK(x.device().type() == c10::DeviceType::PrivateUse1 && x.device().index() == chips[i] &&
                      x.is_contiguous(),
                  "torch.tpu.comm: buffers must be contiguous tpu tensors on their chip");
      TORCH_CHECK_TYPE(to_tpu_dtype(x.scalar_type()) != TPU_DTYPE_INVALID, "torch.tpu.comm: unsupported dtype ",
                       x.scalar_type());
      a.dtype = to_tpu_dtype(x.scalar_type());
      typed = true;
      parts->keep.push_back(x);
    }
    TORCH_CHECK(typed, "torch.tpu.comm: chip ", chips[i], " has no buffer");
    a.send = sends[i].has_value() ? device_addr(*sends[i]) : 0;
    a.recv = recvs[i].has_value() ? device_addr(*recvs[i]) : 0;
  }
  LocalState& st = local_state();
  std::lock_guard<std::mutex> lock(st.mu);
  check(local_reap(st, false));
  auto& comms = st.comms[chips];
  if (!comms.empty()) {
    tpu_status_t e = tpu_comm_error(comms[0]);
    if (e != TPU_OK) {  // aborted (a timeout): start afresh
      tpu_status_free(e);
      for (auto* c : comms) tpu_comm_release(c);
      comms.clear();
    }
  }
  if (comms.empty()) {
    comms.resize(n);
    tpu_status_t s = tpu_comm_create_local((int)n, 0, comms.data());
    if (s != TPU_OK) {
      comms.clear();
      check(s);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if ((int64_t)i == skip) continue;  // tests: a chip whose queue never reaches its part
    tpu_coll_request_t* req = nullptr;
    tpu_status_t s = tpu_comm_enqueue(comms[i], current_runtime_stream((c10::DeviceIndex)chips[i]), &args[i], &req);
    if (s != TPU_OK) {  // the parts queued so far would wait for this one: fail them now
      tpu_comm_abort(comms[0], "torch.tpu.comm: a chip's part could not be queued");
      st.pending.push_back(std::move(parts));
      check(s);
    }
    parts->reqs.push_back(req);
  }
  st.pending.push_back(std::move(parts));
}

}  // namespace

void init_chip_comm(py::module& m) {
  m.def("_chips_collective", &chips_collective, py::arg("kind"), py::arg("chips"), py::arg("sends"),
        py::arg("recvs"), py::arg("count"), py::arg("root") = 0, py::arg("op") = 0, py::arg("timeout_s") = 0.0, py::arg("skip") = -1);
  m.def("_chips_wait", [] {
    LocalState& st = local_state();
    tpu_status_t s;
    {
      py::gil_scoped_release no_gil;
      std::lock_guard<std::mutex> lock(st.mu);
      s = local_reap(st, true);
    }
    check(s);
  });
}

}  // namespace torch_tpu
