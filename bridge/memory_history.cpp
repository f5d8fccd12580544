// memory_history.cpp — device memory seen by the profiler: each block the
// bridge's allocator hands out or takes back reported to torch.profiler
// (profile_memory=True), and the history behind
// torch.tpu.memory._record_memory_history / _snapshot (torch_tpu/memory.py).
//
// The history is a bounded trace of "alloc" / "free_completed" (from the
// bridge's allocator) and "segment_alloc" / "segment_free" (from the
// runtime's caching allocator, through its segment observer), each with the
// Python (and, with stacks="all", C++) frames of the code that asked when
// frames are on: torch's CapturedTraceback, the mechanism behind
// torch.cuda.memory._record_memory_history, symbolised only when a snapshot
// is taken. The snapshot's segments are the runtime's real layout
// (tpu_memory_snapshot), blocks allocated before recording included.
//
// Cost with history off: one relaxed atomic load per allocation and free,
// and no segment observer installed.
#define FMT_HEADER_ONLY 1
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <c10/core/Allocator.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "tpu_bridge.h"

namespace py = pybind11;

namespace torch {
// libtorch_python's symboliser (torch/csrc/profiler/python/combined_traceback.h,
// whose header needs nlohmann/json, which torch's wheel does not ship):
// one list of {"filename", "line", "name"} frames per traceback. Needs the GIL.
std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
}  // namespace torch

namespace torch_tpu {

namespace {

// What the history records (set by _record_memory_history).
enum Frames { kNoFrames = 0, kPython = 1, kPythonAndCpp = 2 };
std::atomic<bool> g_history_on{false};
std::atomic<int> g_alloc_frames{kNoFrames};  // frames of allocations
std::atomic<int> g_free_frames{kNoFrames};   // frames of frees (context="all")
std::atomic<bool> g_keep_trace{true};        // enabled="state": live blocks only

struct HistoryEntry {
  const char* action;  // "alloc", "free_completed", "segment_alloc", "segment_free"
  uint64_t addr;
  int64_t size, requested;
  int device, stream;
  int64_t time_us;
  std::shared_ptr<torch::CapturedTraceback> frames;  // null: not recorded
};

std::mutex g_history_mu;  // taken inside the runtime allocator's lock (segment observer)
std::deque<HistoryEntry> g_history;       // under g_history_mu
size_t g_history_max = 100000;            // under g_history_mu
std::map<uint64_t, HistoryEntry> g_live;  // blocks allocated while recording, by address

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::shared_ptr<torch::CapturedTraceback> gather(int mode) {
  if (mode == kNoFrames) return nullptr;
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false,
                                          /*cpp=*/mode == kPythonAndCpp);
}

void note_history(HistoryEntry e) {
  // Dropped entries (their frames) are destroyed outside the lock.
  std::vector<HistoryEntry> dropped;
  {
    std::lock_guard<std::mutex> lock(g_history_mu);
    if (!g_history_on.load(std::memory_order_relaxed)) return;  // stopped meanwhile
    if (e.action[0] == 'a') g_live[e.addr] = e;
    else if (e.action[0] == 'f') g_live.erase(e.addr);
    if (!g_keep_trace.load(std::memory_order_relaxed)) return;
    g_history.push_back(std::move(e));
    while (g_history.size() > g_history_max) {
      dropped.push_back(std::move(g_history.front()));
      g_history.pop_front();
    }
  }
}

// The runtime's segment observer (installed only while recording). It runs
// under the allocator's lock: no frames (gathering them may wait for the
// GIL, whose holder may wait for that lock).
void note_segment(void*, int device, int stream, uint64_t addr, uint64_t size, bool mapped) {
  note_history(HistoryEntry{mapped ? "segment_alloc" : "segment_free", addr, (int64_t)size, 0,
                            device, stream, now_us(), nullptr});
}

void report_memory(tpu_block_t* block, int device, int64_t delta) {
  tpu_memory_stats_t s;
  tpu_memory_get_stats(chip((c10::DeviceIndex)device), &s);
  c10::reportMemoryUsageToProfiler(reinterpret_cast<void*>((uintptr_t)tpu_block_addr(block)),
                                   delta, (size_t)s.allocated_bytes[TPU_POOL_ALL].current,
                                   (size_t)s.reserved_bytes[TPU_POOL_ALL].current,
                                   c10::Device(c10::DeviceType::PrivateUse1,
                                               (c10::DeviceIndex)device));
}

py::list frames_of(const std::shared_ptr<torch::CapturedTraceback>& tb,
                   std::map<torch::CapturedTraceback*, py::object>& symbolized) {
  if (!tb) return py::list();
  auto it = symbolized.find(tb.get());
  return it == symbolized.end() ? py::list() : py::list(it->second);
}

}  // namespace

void note_device_alloc(tpu_block_t* block, c10::DeviceIndex device, int stream, size_t requested) {
  if (!block) return;
  if (c10::memoryProfilingEnabled()) report_memory(block, device, (int64_t)tpu_block_size(block));
  if (g_history_on.load(std::memory_order_relaxed))
    note_history(HistoryEntry{"alloc", tpu_block_addr(block), (int64_t)tpu_block_size(block),
                              (int64_t)requested, device, stream, now_us(),
                              gather(g_alloc_frames.load(std::memory_order_relaxed))});
}

void note_device_free(tpu_block_t* block) {
  if (!block) return;
  bool history = g_history_on.load(std::memory_order_relaxed);
  bool report = c10::memoryProfilingEnabled();
  if (!report && !history) return;
  int device = tpu_chip_of_address(tpu_block_addr(block));
  if (report) report_memory(block, device, -(int64_t)tpu_block_size(block));
  if (history)
    note_history(HistoryEntry{"free_completed", tpu_block_addr(block),
                              (int64_t)tpu_block_size(block), 0, device, -1, now_us(),
                              gather(g_free_frames.load(std::memory_order_relaxed))});
}

void init_memory_history(py::module& m) {
  // enabled: recording on; keep_trace: false for enabled="state";
  // alloc_frames / free_frames: 0 none, 1 Python, 2 Python and C++.
  m.def("_record_memory_history", [](bool enabled, bool keep_trace, int alloc_frames,
                                     int free_frames, size_t max_entries) {
    std::deque<HistoryEntry> old;  // destroyed after the lock, with the GIL held
    {
      std::lock_guard<std::mutex> lock(g_history_mu);
      if (enabled) {
        g_history_max = max_entries;
        while (g_history.size() > g_history_max) g_history.pop_front();
        g_keep_trace.store(keep_trace);
        g_alloc_frames.store(alloc_frames);
        g_free_frames.store(free_frames);
      } else {
        old.swap(g_history);
        g_live.clear();
      }
      g_history_on.store(enabled);
    }
    tpu_memory_set_segment_observer(enabled ? note_segment : nullptr, nullptr);
  });

  // (device_traces entries, segments), torch.cuda.memory._snapshot's shapes.
  m.def("_memory_history", [] {
    // The layout first (the allocator's lock), then the history (its own):
    // the observer takes them in that order.
    struct ChipLayout {
      int device;
      std::vector<tpu_segment_info_t> segments;
      std::vector<tpu_block_info_t> blocks;
    };
    std::vector<ChipLayout> layouts;
    for (int d = 0; d < device_count(); ++d) {
      ChipLayout l{d, {}, {}};
      size_t ns = 0, nb = 0;
      for (;;) {
        check(tpu_memory_snapshot(chip((c10::DeviceIndex)d), l.segments.data(),
                                  l.segments.size(), l.blocks.data(), l.blocks.size(), &ns, &nb));
        bool fits = ns <= l.segments.size() && nb <= l.blocks.size();
        l.segments.resize(ns + (fits ? 0 : 16));
        l.blocks.resize(nb + (fits ? 0 : 64));
        if (fits) break;
      }
      layouts.push_back(std::move(l));
    }
    std::vector<HistoryEntry> trace;
    std::map<uint64_t, HistoryEntry> live;
    {
      std::lock_guard<std::mutex> lock(g_history_mu);
      trace.assign(g_history.begin(), g_history.end());
      live = g_live;
    }
    // One symbolisation for every traceback (frames shared between entries).
    std::vector<torch::CapturedTraceback*> tbs;
    for (const HistoryEntry& e : trace)
      if (e.frames) tbs.push_back(e.frames.get());
    for (const auto& [addr, e] : live)
      if (e.frames) tbs.push_back(e.frames.get());
    std::map<torch::CapturedTraceback*, py::object> symbolized;
    if (!tbs.empty()) {
      std::vector<py::object> frames = torch::py_symbolize(tbs);
      for (size_t i = 0; i < tbs.size(); ++i) symbolized[tbs[i]] = frames[i];
    }

    py::list traces;
    for (const HistoryEntry& e : trace) {
      py::dict d;
      d["action"] = e.action;
      d["addr"] = e.addr;
      d["size"] = e.size;
      d["requested"] = e.requested;
      d["device"] = e.device;
      d["stream"] = e.stream;
      d["time_us"] = e.time_us;
      d["frames"] = frames_of(e.frames, symbolized);
      traces.append(d);
    }
    static const char* const states[] = {"inactive", "active_allocated", "active_pending_free"};
    py::list segments;
    for (const ChipLayout& l : layouts) {
      for (const tpu_segment_info_t& s : l.segments) {
        py::list blocks;
        for (size_t k = s.first_block; k < s.first_block + s.num_blocks; ++k) {
          const tpu_block_info_t& b = l.blocks[k];
          py::dict bd;
          bd["address"] = b.addr;
          bd["size"] = b.size;
          bd["requested_size"] = b.requested;
          bd["state"] = states[b.state >= 0 && b.state <= 2 ? b.state : 0];
          auto it = live.find(b.addr);
          bool ours = b.state == TPU_BLOCK_ACTIVE_ALLOCATED && it != live.end();
          bd["frames"] = ours ? frames_of(it->second.frames, symbolized) : py::list();
          blocks.append(bd);
        }
        py::dict sd;
        sd["device"] = l.device;
        sd["address"] = s.addr;
        sd["total_size"] = s.total_size;
        sd["allocated_size"] = s.allocated_size;
        sd["active_size"] = s.active_size;
        sd["requested_size"] = s.requested_size;
        sd["stream"] = s.stream;
        sd["segment_type"] = s.pool == TPU_POOL_SMALL ? "small" : "large";
        sd["segment_pool_id"] = py::make_tuple(0, 0);
        sd["is_expandable"] = false;
        sd["frames"] = py::list();
        sd["blocks"] = blocks;
        segments.append(sd);
      }
    }
    return py::make_tuple(traces, segments);
  });
}

}  // namespace torch_tpu
