// tpu_bridge.h — what the bridge's files share: the one place runtime
// statuses become PyTorch exceptions, dtype mapping, and device/stream state.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Stream.h>

#include <map>
#include <string>
#include <vector>

extern "C" {
#include "tpu/config.h"
#include "tpu/defer.h"
#include "tpu/ops.h"
#include "tpu/runtime.h"
}

namespace torch_tpu {

// Raises the PyTorch exception matching a failed status (consumes it);
// returns for TPU_OK. This is the only place statuses become exceptions.
void check(tpu_status_t status);

// dtype mapping (both directions); kInvalid / TPU_DTYPE_INVALID when absent.
tpu_dtype_t to_tpu_dtype(c10::ScalarType type);
c10::ScalarType to_scalar_type(tpu_dtype_t dtype);

// The calling thread's current device and its current stream there.
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);
int device_count() noexcept;
tpu_chip_t* chip(c10::DeviceIndex index);
tpu_stream_t* runtime_stream(c10::DeviceIndex index, c10::StreamId id);
tpu_stream_t* current_runtime_stream(c10::DeviceIndex index);
c10::Stream current_stream(c10::DeviceIndex index);

// A tensor's storage as a runtime view (device address, dtype, sizes,
// strides); false if it has too many dims or an unsupported dtype.
bool make_view(const at::Tensor& t, tpu_view_t* out_view);

// Launch blocking for the calling thread: -1 follows the process-wide
// setting (tpu_launch_blocking), 0/1 override it on this thread only.
void set_thread_launch_blocking(int mode);
// Waits for `stream` when the calling thread runs in launch-blocking mode.
void maybe_block(tpu_stream_t* stream);

// A tensor's data as a runtime device address (collectives' send/recv).
inline uint64_t device_addr(const at::Tensor& t) { return (uint64_t)(uintptr_t)t.data_ptr(); }

// Device allocator (c10::DeviceAllocator) of the tpu device.
c10::Allocator* device_allocator();
// A DataPtr owning `block` (freed with it), as the device allocator makes.
c10::DataPtr block_data_ptr(tpu_block_t* block, c10::DeviceIndex device);
// The runtime block a DataPtr of the device allocator owns, or nullptr.
const tpu_block_t* data_ptr_block(const c10::DataPtr& ptr);

// Philox generator state: reserves `count` counters of the device's (or the
// given) generator, returning its seed and the first counter.
void reserve_philox(const std::optional<at::Generator>& gen, c10::DeviceIndex device,
                    uint64_t count, uint64_t* out_seed, uint64_t* out_offset);
const at::Generator& default_generator(c10::DeviceIndex device);
// How many times any tpu generator handed out counters (a capture checks
// that each draw belongs to a node it recorded).
uint64_t rng_draws();
// After reserve_philox for a node about to be submitted on the device's
// current stream, whose attrs seed_attr / offset_attr hold the counters:
// tells a capture of the calling thread (replay.cpp), which then gives the
// node fresh counters on each replay.
void note_random_node(c10::DeviceIndex device, const std::optional<at::Generator>& gen,
                      uint64_t count, int seed_attr, int offset_attr);

// Grows a storage to at least `nbytes`, preserving its contents.
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes);

// The op path: registration of every runtime op's ATen overloads, and the
// counters Python reads.
void init_dispatch();
// profiler.cpp: device memory reported to torch.profiler (profile_memory) and
// to the allocation history (torch.tpu.memory._record_memory_history).
void note_device_alloc(tpu_block_t* block, c10::DeviceIndex device, int stream, size_t requested);
void note_device_free(tpu_block_t* block);
void count_native(const std::string& name);
// The counted CPU fallback (dispatch.cpp), for ops registered by hand
// (histogram.cpp) whose arguments the runtime does not take.
void counted_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
std::map<std::string, int64_t> native_counts();
// Native calls per ATen op whose output shape came from PyTorch's meta kernel
// (the runtime's row has no shape function, or it declined the call).
std::map<std::string, int64_t> meta_shape_counts();
std::map<std::string, int64_t> fallback_counts();
void reset_counts();
std::vector<std::string> native_op_names();
std::vector<std::string> binding_errors();
void set_fallback_mode(const std::string& mode);
std::string fallback_mode();

}  // namespace torch_tpu
