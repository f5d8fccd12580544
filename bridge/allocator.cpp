// allocator.cpp — the tpu device allocator (a c10::DeviceAllocator over the
// runtime's caching allocator, so torch.accelerator's memory API works) and
// the pinned host allocator (at::HostAllocator over runtime pinned memory).
// Neither ever takes the GIL.
#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <atomic>
#include <mutex>

#include "tpu_bridge.h"

namespace torch_tpu {

namespace {

void free_block(void* ctx) {
  tpu_block_t* block = static_cast<tpu_block_t*>(ctx);
  note_device_free(block);
  tpu_block_free(block);
}

void copy_stat(const tpu_stat_t (&src)[TPU_POOL_COUNT], c10::CachingAllocator::StatArray& dst) {
  for (int i = 0; i < TPU_POOL_COUNT; ++i) {
    dst[i].current = src[i].current;
    dst[i].peak = src[i].peak;
    dst[i].allocated = src[i].allocated;
    dst[i].freed = src[i].freed;
  }
}

struct DeviceAllocator final : public c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex device = current_device();
    tpu_block_t* block = nullptr;
    tpu_stream_t* stream = current_runtime_stream(device);
    check(tpu_block_alloc(stream, nbytes, &block));
    note_device_alloc(block, device, tpu_stream_index(stream), nbytes);
    void* addr = reinterpret_cast<void*>((uintptr_t)tpu_block_addr(block));
    return {addr, block, &free_block, c10::Device(c10::DeviceType::PrivateUse1, device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    // Device-to-device, ordered on the current stream.
    tpu_stream_t* s = current_runtime_stream(current_device());
    check(tpu_stream_copy(s, TPU_COPY_D2D, (uint64_t)(uintptr_t)dest, (uint64_t)(uintptr_t)src,
                          count));
  }
  bool initialized() override { return device_count() > 0; }
  void emptyCache(c10::MempoolId_t) override {
    for (int i = 0; i < device_count(); ++i) {
      // Cached blocks may still be referenced by queued work of their own
      // stream; wait for it before handing memory back.
      check(tpu_chip_synchronize(chip(i)));
      tpu_memory_empty_cache(chip(i));
    }
  }
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (ptr.get_context())
      tpu_block_record_stream(static_cast<tpu_block_t*>(ptr.get_context()),
                              runtime_stream(stream.device_index(), stream.id()));
  }
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    tpu_memory_stats_t s;
    tpu_memory_get_stats(chip(device), &s);
    c10::CachingDeviceAllocator::DeviceStats out;
    copy_stat(s.allocation, out.allocation);
    copy_stat(s.segment, out.segment);
    copy_stat(s.active, out.active);
    copy_stat(s.inactive_split, out.inactive_split);
    copy_stat(s.allocated_bytes, out.allocated_bytes);
    copy_stat(s.reserved_bytes, out.reserved_bytes);
    copy_stat(s.active_bytes, out.active_bytes);
    copy_stat(s.inactive_split_bytes, out.inactive_split_bytes);
    copy_stat(s.requested_bytes, out.requested_bytes);
    out.num_alloc_retries = s.num_alloc_retries;
    out.num_ooms = s.num_ooms;
    out.num_sync_all_streams = s.num_sync_all_streams;
    out.max_split_size = s.max_split_size;
    return out;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    tpu_memory_reset_accumulated(chip(device));
  }
  void resetPeakStats(c10::DeviceIndex device) override { tpu_memory_reset_peak(chip(device)); }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    uint64_t free_bytes = 0, total = 0;
    tpu_memory_info(chip(device), &free_bytes, &total);
    return {free_bytes, total};
  }
};

DeviceAllocator g_device_allocator;

// ---- pinned host memory ---------------------------------------------------------

void free_pinned(void* ctx) { tpu_host_free(ctx); }

struct HostAllocator final : public at::HostAllocator {
  at::DataPtr allocate(size_t nbytes) override {
    void* p = nullptr;
    if (nbytes) check(tpu_host_alloc(nbytes, &p));
    if (p) {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.active_requests.increase(1);
      stats_.active_bytes.increase(nbytes);
      stats_.allocations.increase(1);
      stats_.allocated_bytes.increase(nbytes);
      stats_.num_host_alloc++;
    }
    return {p, p, &free_pinned, at::DeviceType::CPU};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  // Queued copies hold their own reference to pinned memory, so no event
  // is needed to keep it alive.
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.active_requests.reset_accumulated();
    stats_.active_bytes.reset_accumulated();
    stats_.allocations.reset_accumulated();
    stats_.allocated_bytes.reset_accumulated();
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.active_requests.reset_peak();
    stats_.active_bytes.reset_peak();
    stats_.allocations.reset_peak();
    stats_.allocated_bytes.reset_peak();
  }

 private:
  std::mutex mu_;
  at::HostStats stats_;
};

HostAllocator g_host_allocator;

}  // namespace

c10::Allocator* device_allocator() { return &g_device_allocator; }

c10::DataPtr block_data_ptr(tpu_block_t* block, c10::DeviceIndex device) {
  void* addr = reinterpret_cast<void*>((uintptr_t)tpu_block_addr(block));
  return {addr, block, &free_block, c10::Device(c10::DeviceType::PrivateUse1, device)};
}

const tpu_block_t* data_ptr_block(const c10::DataPtr& ptr) {
  return ptr.get_deleter() == &free_block ? static_cast<const tpu_block_t*>(ptr.get_context())
                                          : nullptr;
}

void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  size_t old = storage.nbytes();
  c10::DataPtr fresh = g_device_allocator.allocate(nbytes);
  size_t keep = std::min(old, nbytes);
  if (keep && storage.data()) {
    tpu_stream_t* s = current_runtime_stream(current_device());
    check(tpu_stream_copy(s, TPU_COPY_D2D, (uint64_t)(uintptr_t)fresh.get(),
                          (uint64_t)(uintptr_t)storage.data(), keep));
  }
  storage.set_data_ptr_noswap(std::move(fresh));
  storage.set_nbytes(nbytes);
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_device_allocator);
REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &g_host_allocator);

}  // namespace torch_tpu
