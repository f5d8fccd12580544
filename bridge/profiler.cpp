// profiler.cpp — torch.profiler sees the tpu: the runtime's device events
// (tpu/profiler.h) handed to PyTorch's Kineto as PrivateUse1 activity
// profilers, one per chip. (Device memory for the profiler and the memory
// history: memory_history.cpp.)
//
// Native path (torch 2.14): torch::profiler::impl::PrivateUse1ProfilerRegistry
// forwards chip 0's libkineto::IActivityProfiler to Kineto, and the other
// chips' are registered with Kineto beside it. With
// ProfilerActivity.PrivateUse1 requested, Kineto opens a session on each:
// start/stop run the runtime's recorder, pushCorrelationId (called on the
// thread entering each host op) becomes the id stamped on the commands and
// deferred nodes that op queues, and processTrace hands each device event to
// Kineto linked to that op's activity. PyTorch then counts the device time
// on the op (key_averages' device_time columns) and writes the events on
// their own rows (process "TPU <chip>", pid the chip; thread "stream <n>",
// tid the stream) in export_chrome_trace.
#define USE_KINETO 1
#define FMT_HEADER_ONLY 1
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <libkineto.h>
#include <output_base.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
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

void drain_chip(int c, std::vector<tpu_prof_event_t>& all) {
  std::vector<tpu_prof_event_t> chunk(4096);
  size_t n = 0;
  do {
    check(tpu_profiler_drain(c, chunk.data(), chunk.size(), &n));
    all.insert(all.end(), chunk.begin(), chunk.begin() + (ptrdiff_t)n);
  } while (n == chunk.size());
}

std::vector<tpu_prof_event_t> drain_all() {
  std::vector<tpu_prof_event_t> all;
  for (int c = 0; c < TPU_MAX_CHIPS; ++c) drain_chip(c, all);
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

// One session per chip, so that each chip is its own named trace process
// (Kineto takes one DeviceInfo per session). Chip 0's session owns the
// recorder (starts it, reports drops) and the correlation ids; every
// session stops it (the first stop wins) and drains its own chip.
class TpuSession final : public libkineto::IActivityProfilerSession {
 public:
  explicit TpuSession(int chip) : chip_(chip) {}

  void start() override {
    offset_ns_ = realtime_minus_monotonic();
    if (chip_ != 0) {
      status_ = libkineto::TraceStatus::RECORDING;
      return;
    }
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
    events_.clear();
    drain_chip(chip_, events_);
    tpu_profiler_stats_t st;
    tpu_profiler_get_stats(&st);
    if (chip_ == 0 && st.dropped > 0)
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
        // The group is charged to its earliest-recorded op (`External id`);
        // the other ops that recorded its nodes:
        std::string others = "[";
        for (int32_t k = 0; k < e.num_others; ++k)
          others += (k ? "," : "") + std::to_string(e.others[k]);
        if (e.others_truncated) others += std::string(e.num_others ? "," : "") + "-1";
        a.addMetadata("other_ops", others + "]");
      }
      rows_.insert({e.chip, a.resource});
      logger.handleGenericActivity(a);
    }
    status_ = libkineto::TraceStatus::READY;
  }

  // Process "TPU <chip>" (pid: the chip index); chips other than 0 only
  // when they ran something.
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    if (chip_ != 0 && events_.empty()) return nullptr;
    return std::make_unique<libkineto::DeviceInfo>(
        libkineto::DeviceInfo{chip_, chip_, "TPU " + std::to_string(chip_), "tpu"});
  }

  // Its rows (tid): "stream <n>" and "stream <n> flushes".
  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (auto [chip, row] : rows_) {
      std::string name = row >= kMemoryRow  ? "memory"
                         : row >= kFlushRow ? "stream " + std::to_string(row - kFlushRow) + " flushes"
                                            : "stream " + std::to_string(row);
      out.push_back(libkineto::ResourceInfo{row, row, chip, name});
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

  void pushCorrelationId(uint64_t id) override {
    if (chip_ != 0) return;
    t_correlation_stack.push_back(id);
    tpu_profiler_set_correlation(id);
  }
  void popCorrelationId() override {
    if (chip_ != 0) return;
    if (!t_correlation_stack.empty()) t_correlation_stack.pop_back();
    tpu_profiler_set_correlation(t_correlation_stack.empty() ? 0 : t_correlation_stack.back());
  }

 private:
  int chip_;
  int64_t offset_ns_ = 0;
  std::vector<tpu_prof_event_t> events_;
  std::vector<std::string> errors_;
  std::set<std::pair<int64_t, int64_t>> rows_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};

class TpuActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  explicit TpuActivityProfiler(int chip) : chip_(chip), name_("tpu:" + std::to_string(chip)) {}
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return activities_;
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& types, const libkineto::Config&) override {
    if (chip_ >= tpu_chip_count()) return nullptr;  // no such chip in this process
    for (auto t : types)
      if (activities_.count(t)) return std::make_unique<TpuSession>(chip_);
    return nullptr;
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t, int64_t, const std::set<libkineto::ActivityType>& types,
      const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  int chip_;
  std::string name_;
  std::set<libkineto::ActivityType> activities_{
      libkineto::ActivityType::CONCURRENT_KERNEL, libkineto::ActivityType::GPU_MEMCPY,
      libkineto::ActivityType::GPU_USER_ANNOTATION, libkineto::ActivityType::PRIVATEUSE1_RUNTIME};
};

}  // namespace

void init_memory_history(py::module& m);  // memory_history.cpp

void init_profiler(py::module& m) {
  // Chip 0 through PyTorch's PrivateUse1 registry; the others (a session
  // each, see TpuSession) as Kineto child profilers beside it.
  torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
      [] { return std::make_unique<TpuActivityProfiler>(0); });
  for (int c = 1; c < TPU_MAX_CHIPS; ++c)
    libkineto::api().registerProfilerFactory(
        [c] { return std::make_unique<TpuActivityProfiler>(c); });

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

  init_memory_history(m);
}

}  // namespace torch_tpu
