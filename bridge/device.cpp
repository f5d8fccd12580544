// device.cpp — the tpu device as PyTorch sees it: the DeviceGuardImpl (devices,
// real streams and events on the runtime), the PrivateUse1 hooks, and the
// per-chip Philox generators.
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/GeneratorImpl.h>

#include <atomic>
#include <deque>
#include <mutex>

#include "tpu_bridge.h"

namespace torch_tpu {

namespace {
thread_local c10::DeviceIndex t_device = 0;
thread_local c10::StreamId t_stream[TPU_MAX_CHIPS] = {};
thread_local int t_launch_blocking = -1;
std::atomic<uint32_t> g_next_pool_stream[TPU_MAX_CHIPS];
}  // namespace

int device_count() noexcept {
  return tpu_chip_count();
}

static void check_index(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < device_count(), "Invalid device ordinal tpu:", (int)index,
              " (this process has ", device_count(), " tpu chips; set TORCH_TPU_NUM_CHIPS)");
}

c10::DeviceIndex current_device() { return t_device; }

void set_thread_launch_blocking(int mode) { t_launch_blocking = mode; }

void maybe_block(tpu_stream_t* stream) {
  // The runtime already waits in process-wide blocking mode.
  if (t_launch_blocking == 1 && !tpu_launch_blocking()) check(tpu_stream_synchronize(stream));
}

void set_current_device(c10::DeviceIndex index) {
  check_index(index);
  t_device = index;
}

tpu_chip_t* chip(c10::DeviceIndex index) {
  check_index(index);
  tpu_chip_t* c = nullptr;
  check(tpu_chip_get(index, &c));
  return c;
}

tpu_stream_t* runtime_stream(c10::DeviceIndex index, c10::StreamId id) {
  tpu_stream_t* s = nullptr;
  check(tpu_stream_get(chip(index), (int)id, &s));
  return s;
}

tpu_stream_t* current_runtime_stream(c10::DeviceIndex index) {
  return runtime_stream(index, t_stream[index]);
}

c10::Stream current_stream(c10::DeviceIndex index) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, index),
                     t_stream[index]);
}

// ---- DeviceGuardImpl ---------------------------------------------------------

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return kType; }

  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    if (d.index() != old.index()) set_current_device(d.index());
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kType, t_device); }
  void setDevice(c10::Device d) const override { set_current_device(d.index()); }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < device_count()) t_device = d.index();
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return (c10::DeviceIndex)device_count();
  }

  c10::Stream getStream(c10::Device d) const override {
    return current_stream(d.has_index() ? d.index() : current_device());
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::UNSAFE,
                       c10::Device(kType, d.has_index() ? d.index() : current_device()), 0);
  }
  c10::Stream getNewStream(c10::Device d, int priority = 0) const override {
    return getStreamFromGlobalPool(d, priority < 0);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool = false) const override {
    c10::DeviceIndex index = d.has_index() ? d.index() : current_device();
    check_index(index);
    uint32_t n = g_next_pool_stream[index]++;
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, index),
                       1 + (n % (TPU_STREAMS_PER_CHIP - 1)));
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    auto old = current_stream(s.device_index());
    t_stream[s.device_index()] = s.id();
    return old;
  }
  bool queryStream(const c10::Stream& s) const override {
    return tpu_stream_query(runtime_stream(s.device_index(), s.id()));
  }
  void synchronizeStream(const c10::Stream& s) const override {
    check(tpu_stream_synchronize(runtime_stream(s.device_index(), s.id())));
  }
  void synchronizeDevice(const c10::DeviceIndex index) const override {
    check(tpu_chip_synchronize(chip(index)));
  }
  void recordDataPtrOnStream(const c10::DataPtr& ptr, const c10::Stream& s) const override {
    if (ptr.get_context())
      tpu_block_record_stream(static_cast<tpu_block_t*>(ptr.get_context()),
                              runtime_stream(s.device_index(), s.id()));
  }

  // Events: a void* holding a tpu_event_t*, created on first record.
  void record(void** event, const c10::Stream& s, const c10::DeviceIndex,
              const c10::EventFlag flag) const override {
    if (!*event) {
      tpu_event_t* e = nullptr;
      check(tpu_event_create(flag == c10::EventFlag::BACKEND_DEFAULT, &e));
      *event = e;
    }
    check(tpu_event_record(static_cast<tpu_event_t*>(*event),
                           runtime_stream(s.device_index(), s.id())));
  }
  void block(void* event, const c10::Stream& s) const override {
    if (!event) return;
    check(tpu_stream_wait_event(runtime_stream(s.device_index(), s.id()),
                                static_cast<tpu_event_t*>(event)));
  }
  bool queryEvent(void* event) const override {
    return !event || tpu_event_query(static_cast<tpu_event_t*>(event));
  }
  void synchronizeEvent(void* event) const override {
    if (event) check(tpu_event_synchronize(static_cast<tpu_event_t*>(event)));
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    tpu_event_release(static_cast<tpu_event_t*>(event));
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "Both events must be recorded before calculating elapsed time.");
    double ms = 0;
    check(tpu_event_elapsed_ms(static_cast<tpu_event_t*>(start), static_cast<tpu_event_t*>(end),
                               &ms));
    return ms;
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

// ---- Generator -----------------------------------------------------------------
// Counter-based: (seed, offset). An RNG op with N outputs takes counters
// [offset, offset + N); results depend on nothing else.

struct PhiloxGenerator final : public c10::GeneratorImpl {
  explicit PhiloxGenerator(c10::DeviceIndex index)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, index),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}

  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    uint64_t s = c10::detail::getNonDeterministicRandom(false);
    set_current_seed(s);
    return s;
  }
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  void set_state(const c10::TensorImpl& state) override {
    TORCH_CHECK(state.numel() == 16 && state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
                "RNG state must be a torch.ByteTensor of 16 bytes");
    const uint8_t* p = static_cast<const uint8_t*>(state.data());
    std::memcpy(&seed_, p, 8);
    std::memcpy(&offset_, p + 8, 8);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    auto t = at::empty({16}, at::TensorOptions().dtype(at::kByte));
    uint8_t* p = t.data_ptr<uint8_t>();
    std::memcpy(p, &seed_, 8);
    std::memcpy(p + 8, &offset_, 8);
    return t.getIntrusivePtr();
  }
  uint64_t reserve(uint64_t count) {
    uint64_t start = offset_;
    offset_ += (count + 3) / 4 * 4;
    return start;
  }

 private:
  PhiloxGenerator* clone_impl() const override {
    auto* g = new PhiloxGenerator(device().index());
    g->seed_ = seed_;
    g->offset_ = offset_;
    return g;
  }
  uint64_t seed_ = c10::default_rng_seed_val;
  uint64_t offset_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::once_flag once;
  static std::deque<at::Generator> gens;
  std::call_once(once, [] {
    for (int i = 0; i < device_count(); ++i) gens.emplace_back(at::make_generator<PhiloxGenerator>(i));
  });
  check_index(device);
  return gens[device];
}

namespace {
std::atomic<uint64_t> g_rng_draws{0};
}  // namespace

uint64_t rng_draws() { return g_rng_draws.load(std::memory_order_relaxed); }

void reserve_philox(const std::optional<at::Generator>& gen, c10::DeviceIndex device,
                    uint64_t count, uint64_t* out_seed, uint64_t* out_offset) {
  g_rng_draws.fetch_add(1, std::memory_order_relaxed);
  at::Generator g = (gen.has_value() && gen->defined()) ? *gen : default_generator(device);
  TORCH_CHECK(g.device().type() == c10::DeviceType::PrivateUse1,
              "Expected a 'tpu' device type for generator but found '", g.device().type(), "'");
  auto* impl = static_cast<PhiloxGenerator*>(g.unsafeGetGeneratorImpl());
  std::lock_guard<std::mutex> lock(g.mutex());
  *out_seed = impl->current_seed();
  *out_offset = impl->reserve(count);
}

// ---- Hooks ----------------------------------------------------------------------

struct Hooks final : public at::PrivateUse1HooksInterface {
  void init() const override { check(tpu_runtime_init()); }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index < 0 ? current_device() : index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return at::make_generator<PhiloxGenerator>(index < 0 ? current_device() : index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    int i = tpu_chip_of_address((uint64_t)(uintptr_t)data);
    TORCH_CHECK(i >= 0, "pointer ", data, " is not tpu device memory");
    return at::Device(c10::DeviceType::PrivateUse1, (c10::DeviceIndex)i);
  }
  bool isPinnedPtr(const void* data) const override { return tpu_host_is_pinned(data); }
  at::Allocator* getPinnedMemoryAllocator() const override {
    return at::getHostAllocator(at::kPrivateUse1);
  }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return (c10::DeviceIndex)device_count(); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  void setCurrentDevice(c10::DeviceIndex index) const override { set_current_device(index); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    auto old = current_device();
    set_current_device(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage, newsize);
  }
};

static bool register_hooks() {
  at::RegisterPrivateUse1HooksInterface(new Hooks());
  return true;
}
static bool g_hooks_registered = register_hooks();

}  // namespace torch_tpu
