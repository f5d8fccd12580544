// module.cpp — torch_tpu._C: the Python entry points of the bridge. Each is a
// thin call into the runtime or the bridge; Python builds the torch.tpu API
// on top of them.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include "tpu/program_cache.h"
#include "tpu_bridge.h"

namespace py = pybind11;
using namespace torch_tpu;

namespace torch_tpu {
void init_distributed(py::module& m);  // distributed.cpp
void init_chip_comm(py::module& m);    // chip_comm.cpp
void init_replay(py::module& m);       // replay.cpp
void init_profiler(py::module& m);     // profiler.cpp (and memory_history.cpp)
}

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_tpu bridge: PyTorch's PrivateUse1 device backed by the torch_tpu runtime";
  m.def("_init", [] {
    check(tpu_runtime_init());
    init_dispatch();
  });
  m.def("device_count", [] { return device_count(); });
  m.def("current_device", [] { return (int)current_device(); });
  m.def("set_device", [](int index) { set_current_device((c10::DeviceIndex)index); });
  m.def("synchronize", [](int index) {
    py::gil_scoped_release no_gil;
    check(tpu_chip_synchronize(chip((c10::DeviceIndex)index)));
  });
  m.def("driver_name", [] { return std::string(tpu_driver_name()); });
  m.def("compute_threads", [] { return tpu_compute_threads(); });
  m.def("runtime_config", [] {
    // Every setting of tpu/config.h: its variable, what was set, the value in use.
    py::list out;
    for (int32_t id = 0; id < TPU_CONFIG_COUNT; ++id) {
      tpu_config_entry_t e;
      check(tpu_config_entry(id, &e));
      py::dict d;
      d["name"] = std::string(e.name);
      d["help"] = std::string(e.help);
      d["default"] = std::string(e.fallback);
      d["set"] = e.raw ? py::object(py::str(e.raw)) : py::object(py::none());
      d["invalid"] = e.invalid;
      switch (e.kind) {
        case TPU_CONFIG_BOOL: d["value"] = py::bool_(e.i != 0); break;
        case TPU_CONFIG_INT: d["value"] = py::int_(e.i); break;
        case TPU_CONFIG_FLOAT: d["value"] = py::float_(e.f); break;
        case TPU_CONFIG_STRING: d["value"] = py::str(e.s); break;
      }
      out.append(d);
    }
    return out;
  });
  m.def(
      "set_runtime_config",
      [](const std::string& name, std::optional<std::string> value) {
        // For tests and side-by-side benchmarks: as if the variable had been
        // set to `value` (None: unset) when the settings were read.
        for (int32_t id = 0; id < TPU_CONFIG_COUNT; ++id) {
          tpu_config_entry_t e;
          check(tpu_config_entry(id, &e));
          if (name == e.name) {
            tpu_status_t st = tpu_config_set((tpu_config_id_t)id, value ? value->c_str() : nullptr);
            std::string why = st ? tpu_status_message(st) : "";
            tpu_status_free(st);
            TORCH_CHECK_VALUE(why.empty(), why);
            return;
          }
        }
        TORCH_CHECK_VALUE(false, "no runtime setting named ", name);
      },
      py::arg("name"), py::arg("value"));
  m.def("matrix_unit", [] {
    tpu_mxu_info_t info;
    tpu_mxu_get_info(&info);
    py::dict d;
    d["library"] = std::string(info.library);
    d["isa"] = std::string(info.isa);
    d["bfloat16"] = info.bfloat16;
    d["float32"] = info.float32;
    d["int8"] = info.int8;
    d["float16"] = info.float16;
    d["gemms"] = info.gemms;
    d["declined"] = info.declined;
    d["convs"] = info.convs;
    d["conv_declined"] = info.conv_declined;
    d["conv_split"] = info.conv_split;
    d["conv_gemm"] = info.conv_gemm;
    return d;
  });
  m.def("weight_cache_stats", [] {
    tpu_weight_cache_stats_t s;
    tpu_weight_cache_get_stats(&s);
    py::dict d;
    d["entries"] = s.entries;
    d["bytes"] = s.bytes;
    d["limit_bytes"] = s.limit_bytes;
    d["hits"] = s.hits;
    d["packs"] = s.packs;
    d["evictions"] = s.evictions;
    d["drops"] = s.drops;
    return d;
  });
  m.def("queue_stats", [](int index) {
    tpu_queue_stats_t s;
    tpu_chip_queue_stats(chip((c10::DeviceIndex)index), &s);
    py::dict d;
    d["inline_commands"] = s.inline_commands;
    d["queued_commands"] = s.queued_commands;
    d["worker_wakeups"] = s.worker_wakeups;
    d["syncs"] = s.syncs;
    d["sync_sleeps"] = s.sync_sleeps;
    return d;
  });
  m.def("pool_stats", []() {
    tpu_pool_stats_t s;
    tpu_pool_stats(&s);
    py::dict d;
    d["threads"] = s.threads;
    d["jobs"] = s.jobs;
    d["serial_busy"] = s.serial_busy;
    d["exclusive"] = s.exclusive;
    d["spin_hits"] = s.spin_hits;
    d["spin_misses"] = s.spin_misses;
    d["spin_backoffs"] = s.spin_backoffs;
    d["sleeps"] = s.sleeps;
    d["wakeups"] = s.wakeups;
    d["empty_takes"] = s.empty_takes;
    d["caller_sleeps"] = s.caller_sleeps;
    d["spin_ns"] = s.spin_ns;
    d["pinned"] = s.pinned;
    d["batch_threads"] = s.batch_threads;
    return d;
  });
  m.def("set_weight_cache_limit", [](int64_t bytes) { tpu_weight_cache_set_limit(bytes); });
  m.def("memory_capacity", [](int index) { return tpu_chip_capacity(chip((c10::DeviceIndex)index)); });
  m.def("set_launch_blocking", [](bool on) { tpu_set_launch_blocking(on); });
  m.def("set_thread_launch_blocking", [](int mode) { set_thread_launch_blocking(mode); });
  m.def("launch_blocking", [] { return tpu_launch_blocking(); });
  m.def("set_defer", [](bool on) { tpu_defer_set_global(on); });
  m.def("set_thread_defer", [](int mode) { tpu_defer_set_thread(mode); });
  m.def("defer_active", [] { return tpu_defer_active(); });
  m.def("set_defer_max_nodes", [](int n) { tpu_defer_set_max_nodes(n); });
  m.def("set_gemm_epilogues", [](bool on) { tpu_defer_set_gemm_epilogues(on); });
  m.def("gemm_epilogues", [] { return tpu_defer_gemm_epilogues(); });
  m.def("flush", [](const std::string& reason) {
    py::gil_scoped_release no_gil;
    check(tpu_defer_flush_all(reason == "mode_switch" ? TPU_FLUSH_MODE_SWITCH : TPU_FLUSH_EXPLICIT,
                              nullptr));
  });
  m.def("defer_metrics", [] {
    tpu_defer_metrics_t s;
    tpu_defer_get_metrics(&s);
    std::map<std::string, int64_t> by_reason;
    for (int r = 0; r < TPU_FLUSH_REASON_COUNT; ++r)
      by_reason[tpu_flush_reason_name((tpu_flush_reason_t)r)] = s.flushes_by_reason[r];
    py::dict d;
    d["nodes_recorded"] = s.nodes_recorded;
    d["flushes"] = s.flushes;
    d["flushes_by_reason"] = by_reason;
    d["programs_compiled"] = s.programs_compiled;
    d["cache_hits"] = s.cache_hits;
    d["flush_repeats"] = s.flush_repeats;
    d["flush_repeats_raw"] = s.flush_repeats_raw;
    d["fused_kernels"] = s.fused_kernels;
    d["fused_nodes"] = s.fused_nodes;
    d["elided_buffers"] = s.elided_buffers;
    d["elided_bytes"] = s.elided_bytes;
    d["gemm_epilogues"] = s.gemm_epilogues;
    d["epilogue_nodes"] = s.epilogue_nodes;
    return d;
  });
  m.def("reset_defer_metrics", [] { tpu_defer_reset_metrics(); });
  m.def("defer_cuts", [] {
    std::vector<tpu_defer_cut_t> cuts(TPU_DEFER_CUT_LOG);
    int32_t n = tpu_defer_get_cuts(cuts.data(), (int32_t)cuts.size());
    std::vector<std::tuple<std::string, int, int, uint64_t>> out;
    for (int32_t i = 0; i < n; ++i)
      out.emplace_back(tpu_flush_reason_name(cuts[i].reason), cuts[i].nodes, cuts[i].groups,
                       cuts[i].structure);
    return out;
  });
  m.def("program_cache_stats", [] {
    tpu_program_cache_stats_t st;
    int32_t n = 0;
    check(tpu_program_cache_get_stats(0, &st, nullptr, &n));
    // Entries may be added between the two calls: the second copies at most
    // the room it was given, and reports how many it copied.
    std::vector<tpu_program_cache_entry_t> entries((size_t)st.entries + 16);
    check(tpu_program_cache_get_stats((int32_t)entries.size(), &st, entries.data(), &n));
    py::dict d;
    d["requests"] = st.requests;
    d["hits"] = st.hits;
    d["compiles"] = st.compiles;
    d["uncached"] = st.uncached;
    d["evictions"] = st.evictions;
    d["entries"] = st.entries;
    d["host_bytes"] = st.host_bytes;
    py::list list;
    for (int32_t i = 0; i < n; ++i) {
      py::dict e;
      e["structure"] = entries[i].structure;
      e["nodes"] = entries[i].nodes;
      e["kernels"] = entries[i].kernels;
      e["read_count"] = entries[i].read_count;
      e["compile_ns"] = entries[i].compile_ns;
      e["last_read_ns"] = entries[i].last_read_ns;
      list.append(e);
    }
    d["per_entry"] = list;
    return d;
  });
  m.def("clear_program_cache", [] { check(tpu_program_cache_clear()); });
  m.def("pending_text", [](int index) {
    char* text = nullptr;
    check(tpu_stream_pending_text(current_runtime_stream((c10::DeviceIndex)index), &text));
    std::string out(text ? text : "");
    free(text);
    return out;
  });
  m.def("flush_stream", [](int index, bool wait) {
    tpu_stream_t* stream = current_runtime_stream((c10::DeviceIndex)index);
    py::gil_scoped_release no_gil;
    check(tpu_stream_flush(stream, TPU_FLUSH_SYNCHRONIZE, "torch_tpu._internal.sync.synchronize"));
    if (wait) check(tpu_stream_synchronize(stream));
  });
  m.def("default_generator", [](int index) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator((c10::DeviceIndex)index)));
  });
  m.def("native_counts", [] { return native_counts(); });
  m.def("meta_shape_counts", [] { return meta_shape_counts(); });
  m.def("fallback_counts", [] { return fallback_counts(); });
  m.def("reset_counts", [] { reset_counts(); });
  m.def("native_op_names", [] { return native_op_names(); });
  m.def("binding_errors", [] { return binding_errors(); });
  m.def("set_fallback_mode", [](const std::string& mode) { set_fallback_mode(mode); });
  m.def("fallback_mode", [] { return fallback_mode(); });
  init_distributed(m);
  init_chip_comm(m);
  init_replay(m);
  init_profiler(m);
  m.def("runtime_ops", [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (tpu_op_id_t i = 0; i < tpu_op_count(); ++i)
      out.emplace_back(tpu_op_def(i)->name, tpu_op_family_of(i));
    return out;
  });
}
