// profiler.cpp — torch.profiler sees the tpu: the runtime's device events
// (tpu/profiler.h) handed to PyTorch's Kineto as a PrivateUse1 activity
// profiler, device memory reported to the profiler, and the allocation
// history behind torch.tpu.memory._record_memory_history / _snapshot.
//
// Native path (torch 2.14): torch::profiler::impl::PrivateUse1ProfilerRegistry
// forwards our libkineto::IActivityProfiler to Kineto. With
// ProfilerActivity.PrivateUse1 requested, Kineto opens a session on it:
// start/stop run the runtime's recorder, pushCorrelationId (called on the
// thread entering each host op) becomes the id stamped on the commands that
// op queues, and processTrace hands each device event to Kineto linked to
// that op's activity. PyTorch then counts the device time on the op
// (key_averages' device_time columns) and writes the events on their own
// rows (pid: the chip, tid: the stream) in export_chrome_trace.
#define USE_KINETO 1
#define FMT_HEADER_ONLY 1
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <libkineto.h>
#include <output_base.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <c10/core/Allocator.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "tpu/defer.h"
#include "tpu/profiler.h"
#include "tpu_bridge.h"

namespace py = pybind11;

namespace torch_tpu {

namespace {

// Resource ids of the rows that are not a stream's kernels.
constexpr int64_t kFlushRow = 1000;   // + stream: that stream's flush markers
constexpr int64_t kMemoryRow = 2000;  // the chip's allocator events

int64_t realtime_minus_monotonic() {
  int64_t mono = tpu_profiler_now_ns();
  int64_t real = std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  return real - mono;
}

std::vector<tpu_prof_event_t> drain_all() {
  std::vector<tpu_prof_event_t> all;
  std::vector<tpu_prof_event_t> chunk(4096);
  for (int c = 0; c < TPU_MAX_CHIPS; ++c) {
    size_t n = 0;
    do {
      check(tpu_profiler_drain(c, chunk.data(), chunk.size(), &n));
      all.insert(all.end(), chunk.begin(), chunk.begin() + (ptrdiff_t)n);
    } while (n == chunk.size());
  }
  return all;
}

const char* kind_name(int32_t kind) {
  static const char* const names[] = {"kernel", "fused", "memcpy", "collective",
                                      "host_fn", "flush", "alloc", "free"};
  return (unsigned)kind < TPU_PROF_KIND_COUNT ? names[kind] : "?";
}

// The correlation ids Kineto pushes on a thread nest (an op inside an op):
// the innermost is the one the runtime stamps.
thread_local std::vector<uint64_t> t_correlation_stack;

class TpuSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    offset_ns_ = realtime_minus_monotonic();
    tpu_profiler_config_t cfg = {};
    tpu_status_t s = tpu_profiler_start(&cfg);
    if (s != TPU_OK) {
      errors_.push_back(tpu_status_message(s));
      tpu_status_free(s);
      return;
    }
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    tpu_profiler_stop();
    events_ = drain_all();
    tpu_profiler_stats_t st;
    tpu_profiler_get_stats(&st);
    if (st.dropped > 0)
      errors_.push_back("tpu profiler: " + std::to_string(st.dropped) +
                        " device events dropped (buffer full)");
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked, int64_t, int64_t) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(0, 0, "tpu");
    for (const tpu_prof_event_t& e : events_) {
      if (e.kind == TPU_PROF_ALLOC || e.kind == TPU_PROF_FREE) continue;  // c10's memory events
      libkineto::ActivityType type = e.kind == TPU_PROF_FLUSH ? libkineto::ActivityType::GPU_USER_ANNOTATION
                                     : e.kind == TPU_PROF_COPY ? libkineto::ActivityType::GPU_MEMCPY
                                                               : libkineto::ActivityType::CONCURRENT_KERNEL;
      buffer_->emplace_activity(buffer_->span, type, std::string(e.name));
      libkineto::GenericTraceActivity& a = *buffer_->activities.back();
      // A flush is a marker: an instant where its program was queued (its
      // host time, front end and program cache, is in "host_us"), so that
      // device time sums only what the chip ran.
      a.startTime = (e.kind == TPU_PROF_FLUSH ? e.end_ns : e.start_ns) + offset_ns_;
      a.endTime = e.end_ns + offset_ns_;
      a.device = e.chip;
      a.resource = e.kind == TPU_PROF_FLUSH ? kFlushRow + e.stream : e.stream;
      a.id = (int32_t)e.correlation;
      a.linked = e.correlation ? linked((int32_t)e.correlation) : nullptr;
      a.addMetadataQuoted("device_type", "tpu");
      a.addMetadata("chip", e.chip);
      a.addMetadata("stream", e.stream);
      a.addMetadataQuoted("kind", kind_name(e.kind));
      if (e.bytes >= 0) a.addMetadata("bytes", e.bytes);
      if (e.flops >= 0) a.addMetadata("flops", e.flops);
      if (e.kind == TPU_PROF_FLUSH) {
        a.addMetadataQuoted("reason", tpu_flush_reason_name((tpu_flush_reason_t)e.flush_reason));
        a.addMetadataQuoted("program", e.cache_hit ? "cache hit" : "compiled");
        a.addMetadata("nodes", e.nodes);
        a.addMetadata("host_us", (double)(e.end_ns - e.start_ns) / 1e3);
      } else if (e.kind == TPU_PROF_FUSED) {
        a.addMetadata("nodes", e.nodes);
      }
      rows_.insert({e.chip, a.resource});
      logger.handleGenericActivity(a);
    }
    status_ = libkineto::TraceStatus::READY;
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{0, 0, "tpu:0", "tpu"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (auto [chip, row] : rows_) {
      std::string name = row >= kMemoryRow  ? "tpu:" + std::to_string(chip) + " memory"
                         : row >= kFlushRow ? "tpu:" + std::to_string(chip) + " stream " +
                                                  std::to_string(row - kFlushRow) + " flushes"
                                            : "tpu:" + std::to_string(chip) + " stream " +
                                                  std::to_string(row);
      out.push_back(libkineto::ResourceInfo{row, row, chip, name});
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

  void pushCorrelationId(uint64_t id) override {
    t_correlation_stack.push_back(id);
    tpu_profiler_set_correlation(id);
  }
  void popCorrelationId() override {
    if (!t_correlation_stack.empty()) t_correlation_stack.pop_back();
    tpu_profiler_set_correlation(t_correlation_stack.empty() ? 0 : t_correlation_stack.back());
  }

 private:
  int64_t offset_ns_ = 0;
  std::vector<tpu_prof_event_t> events_;
  std::vector<std::string> errors_;
  std::set<std::pair<int64_t, int64_t>> rows_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};

class TpuActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return activities_;
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& types, const libkineto::Config&) override {
    for (auto t : types)
      if (activities_.count(t)) return std::make_unique<TpuSession>();
    return nullptr;
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t, int64_t, const std::set<libkineto::ActivityType>& types,
      const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_{"tpu"};
  std::set<libkineto::ActivityType> activities_{
      libkineto::ActivityType::CONCURRENT_KERNEL, libkineto::ActivityType::GPU_MEMCPY,
      libkineto::ActivityType::GPU_USER_ANNOTATION, libkineto::ActivityType::PRIVATEUSE1_RUNTIME};
};

// ---- device memory: the profiler's memory events and the history ----------

std::atomic<bool> g_history_on{false};
std::mutex g_history_mu;
struct HistoryEntry {
  std::string action;  // "alloc" or "free_completed"
  uint64_t addr;
  int64_t size, requested;
  int device, stream;
  int64_t time_us;
};
std::deque<HistoryEntry> g_history;  // under g_history_mu
size_t g_history_max = 100000;
std::map<uint64_t, HistoryEntry> g_live;  // live blocks while recording, by address

void note_history(const char* action, tpu_block_t* block, int device, int stream, int64_t requested) {
  HistoryEntry e{action, tpu_block_addr(block), (int64_t)tpu_block_size(block), requested,
                 device, stream,
                 std::chrono::duration_cast<std::chrono::microseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count()};
  std::lock_guard<std::mutex> lock(g_history_mu);
  if (e.action == "alloc") g_live[e.addr] = e;
  else g_live.erase(e.addr);
  g_history.push_back(std::move(e));
  while (g_history.size() > g_history_max) g_history.pop_front();
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

}  // namespace

void note_device_alloc(tpu_block_t* block, c10::DeviceIndex device, int stream, size_t requested) {
  if (!block) return;
  if (c10::memoryProfilingEnabled()) report_memory(block, device, (int64_t)tpu_block_size(block));
  if (g_history_on.load(std::memory_order_relaxed))
    note_history("alloc", block, device, stream, (int64_t)requested);
}

void note_device_free(tpu_block_t* block) {
  if (!block) return;
  bool history = g_history_on.load(std::memory_order_relaxed);
  bool report = c10::memoryProfilingEnabled();
  if (!report && !history) return;
  int device = tpu_chip_of_address(tpu_block_addr(block));
  if (report) report_memory(block, device, -(int64_t)tpu_block_size(block));
  if (history) note_history("free_completed", block, device, -1, 0);
}

void init_profiler(py::module& m) {
  torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
      [] { return std::make_unique<TpuActivityProfiler>(); });

  // The recorder on its own, for tests and for tools without torch.profiler.
  m.def("_profiler_start", [](int64_t events_per_chip, bool memory) {
    tpu_profiler_config_t cfg = {events_per_chip, memory};
    check(tpu_profiler_start(&cfg));
  });
  m.def("_profiler_stop", [] { tpu_profiler_stop(); });
  m.def("_profiler_enabled", [] { return tpu_profiler_enabled(); });
  m.def("_profiler_stats", [] {
    tpu_profiler_stats_t s;
    tpu_profiler_get_stats(&s);
    py::dict d;
    d["recorded"] = s.recorded;
    d["dropped"] = s.dropped;
    return d;
  });
  m.def("_profiler_drain", [] {
    py::list out;
    for (const tpu_prof_event_t& e : drain_all()) {
      py::dict d;
      d["kind"] = kind_name(e.kind);
      d["name"] = std::string(e.name);
      d["chip"] = e.chip;
      d["stream"] = e.stream;
      d["start_ns"] = e.start_ns;
      d["end_ns"] = e.end_ns;
      d["correlation"] = e.correlation;
      d["bytes"] = e.bytes;
      d["flops"] = e.flops;
      d["nodes"] = e.nodes;
      d["addr"] = e.addr;
      if (e.kind == TPU_PROF_FLUSH) {
        d["reason"] = tpu_flush_reason_name((tpu_flush_reason_t)e.flush_reason);
        d["cache_hit"] = (bool)e.cache_hit;
      }
      out.append(d);
    }
    return out;
  });
  m.def("_profiler_set_correlation",
        [](uint64_t id) { return tpu_profiler_set_correlation(id); });

  m.def("_record_memory_history", [](bool enabled, size_t max_entries) {
    std::lock_guard<std::mutex> lock(g_history_mu);
    if (enabled) {
      g_history_max = max_entries;
      while (g_history.size() > g_history_max) g_history.pop_front();
    } else {
      g_history.clear();
      g_live.clear();
    }
    g_history_on.store(enabled);
  });
  m.def("_memory_history", [] {
    std::lock_guard<std::mutex> lock(g_history_mu);
    auto entry = [](const HistoryEntry& e) {
      py::dict d;
      d["action"] = e.action;
      d["addr"] = e.addr;
      d["size"] = e.size;
      d["requested"] = e.requested;
      d["device"] = e.device;
      d["stream"] = e.stream;
      d["time_us"] = e.time_us;
      return d;
    };
    py::list trace, live;
    for (const HistoryEntry& e : g_history) trace.append(entry(e));
    for (const auto& [addr, e] : g_live) live.append(entry(e));
    return py::make_tuple(trace, live);
  });
}

}  // namespace torch_tpu
