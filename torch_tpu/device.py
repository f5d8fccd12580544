"""``torch.tpu``: the device module of the tpu backend, shaped like
``torch.cuda``. Devices, streams and events are the runtime's; memory
statistics come from the runtime's caching allocator."""
import contextlib
import enum
from typing import Any, Optional, Union

import torch

from torch_tpu import _C
from torch_tpu import memory  # noqa: F401  (torch.tpu.memory: the snapshot API)

_DeviceLike = Union[torch.device, str, int, None]
_PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1


def _index(device: _DeviceLike = None) -> int:
    if device is None:
        return _C.current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    if d.type != "tpu":
        raise ValueError(f"Expected a tpu device, but got: {d}")
    return _C.current_device() if d.index is None else d.index


def is_available() -> bool:
    return _C.device_count() > 0


def is_initialized() -> bool:
    return True


def init() -> None:
    """The runtime starts when torch_tpu is imported; kept for API parity."""


def device_count() -> int:
    return _C.device_count()


def current_device() -> int:
    return _C.current_device()


def set_device(device: _DeviceLike) -> None:
    _C.set_device(_index(device))


class device:
    """Context manager that changes the current tpu device."""

    def __init__(self, device: _DeviceLike):
        self.idx = _index(device)
        self.prev = -1

    def __enter__(self):
        self.prev = _C.current_device()
        _C.set_device(self.idx)

    def __exit__(self, *exc):
        _C.set_device(self.prev)
        return False


def synchronize(device: _DeviceLike = None) -> None:
    """Waits for all work queued on the device; raises the first error of it."""
    _C.synchronize(_index(device))


# ---- streams and events ---------------------------------------------------------


class Stream(torch.Stream):
    """An in-order queue of the runtime. ``Stream()`` takes one from the
    device's pool; ``priority`` is accepted for API parity."""

    def __new__(cls, device: _DeviceLike = None, priority: int = 0, **kwargs):
        if kwargs:
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device("tpu", _index(device)), priority=priority)


class _EventMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, torch.Event) and obj.device.type == "tpu"


class Event(metaclass=_EventMeta):
    """``torch.tpu.Event(...)`` makes a ``torch.Event`` on the tpu device.

    It returns a plain ``torch.Event`` (PyTorch's ``elapsed_time`` and
    ``wait_event`` accept only that exact type); ``isinstance(e,
    torch.tpu.Event)`` holds for every tpu event."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False):
        return torch.Event(device=torch.device("tpu", _C.current_device()),
                           enable_timing=enable_timing, blocking=blocking,
                           interprocess=interprocess)


def current_stream(device: _DeviceLike = None) -> torch.Stream:
    return torch.accelerator.current_stream(_index(device))


def default_stream(device: _DeviceLike = None) -> torch.Stream:
    return torch.Stream(stream_id=0, device_index=_index(device), device_type=_PRIVATEUSE1)


def set_stream(stream: torch.Stream) -> None:
    torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(s: Optional[torch.Stream]):
    """Makes `s` the current stream of its device inside the block."""
    if s is None:
        yield
        return
    prev = torch.accelerator.current_stream(s.device_index)
    torch.accelerator.set_stream(s)
    try:
        yield
    finally:
        torch.accelerator.set_stream(prev)


# ---- memory -----------------------------------------------------------------------


def memory_stats(device: _DeviceLike = None) -> dict:
    """torch.accelerator.memory_stats, plus the matrix unit's weight cache
    ("weight_cache.bytes", ".entries", ".limit_bytes", ".hits", ".packs",
    ".evictions", ".drops"; host memory shared by every chip)."""
    stats = torch.accelerator.memory_stats(_index(device))
    for key, value in _C.weight_cache_stats().items():
        stats["weight_cache." + key] = value
    return stats


def memory_allocated(device: _DeviceLike = None) -> int:
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device: _DeviceLike = None) -> int:
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device: _DeviceLike = None) -> int:
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device: _DeviceLike = None) -> int:
    return torch.accelerator.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: _DeviceLike = None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    torch.accelerator.empty_cache()


def mem_get_info(device: _DeviceLike = None) -> tuple:
    """(free, total) device memory in bytes."""
    return torch.accelerator.get_memory_info(_index(device))


# ---- RNG ----------------------------------------------------------------------------


def _generator(device: _DeviceLike = None) -> torch.Generator:
    return _C.default_generator(_index(device))


def _default_generators():
    return tuple(_C.default_generator(i) for i in range(device_count()))


def manual_seed(seed: int) -> None:
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _C.default_generator(i).manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    for i in range(device_count()):
        _C.default_generator(i).seed()


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: _DeviceLike = None) -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = None) -> None:
    _generator(device).set_state(new_state)


def get_rng_state_all() -> list:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for i, s in enumerate(new_states):
        set_rng_state(s, i)


# ---- properties -----------------------------------------------------------------------


class _DeviceProperties:
    def __init__(self, index: int):
        self.name = get_device_name(index)
        self.total_memory = _C.memory_capacity(index)
        self.multi_processor_count = _C.compute_threads()
        self.driver = _C.driver_name()
        self.index = index

    def __repr__(self):
        return (f"_TpuDeviceProperties(name='{self.name}', total_memory="
                f"{self.total_memory // (1024 * 1024)}MB, multi_processor_count="
                f"{self.multi_processor_count}, driver='{self.driver}')")


def get_device_name(device: _DeviceLike = None) -> str:
    _index(device)
    return f"torch_tpu software TPU ({_C.driver_name()} driver)"


def get_device_properties(device: _DeviceLike = None) -> _DeviceProperties:
    return _DeviceProperties(_index(device))


def get_device_capability(device: _DeviceLike = None) -> tuple:
    return (1, 0)


def get_amp_supported_dtype() -> list:
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


class Precision(enum.Enum):
    """float32 matmul precision, named as the published TorchTPU names it
    (StableHLO's dot precision). It is torch.set_float32_matmul_precision's
    setting, so either API changes both:

    - ``HIGHEST`` ("highest", PyTorch's default): float32 GEMMs;
    - ``HIGH`` ("high"): bfloat16x3 on the matrix unit, each factor split
      into bfloat16 hi + lo parts (relative error about 1e-5);
    - ``DEFAULT`` ("medium"): one bfloat16 pass (about 3e-3).

    GEMMs of one row or column stay float32, as does everything on a CPU
    without a matrix unit."""
    DEFAULT = "medium"
    HIGH = "high"
    HIGHEST = "highest"


def _as_precision(p) -> "Precision":
    if isinstance(p, Precision):
        return p
    if isinstance(p, str):
        key = p.lower()
        for member in Precision:
            if key in (member.name.lower(), member.value):
                return member
    raise ValueError(f"unknown precision {p!r}: expected one of {[m.name for m in Precision]} "
                     f"or torch's 'highest', 'high', 'medium'")


def get_precision() -> Precision:
    """The current float32 matmul precision."""
    return Precision(torch.get_float32_matmul_precision())


def set_precision(p) -> None:
    """Sets the float32 matmul precision (a Precision or its name)."""
    torch.set_float32_matmul_precision(_as_precision(p).value)


class precision:
    """The float32 matmul precision, as a context manager or a setter:

    - ``with torch.tpu.precision(torch.tpu.Precision.HIGH): ...`` sets it
      for the block and restores the previous one on exit;
    - ``torch.tpu.precision(torch.tpu.Precision.HIGH)`` alone sets it (like
      ``torch.set_grad_enabled``), as ``set_precision`` does.

    Each op keeps the setting it was issued under, also when it runs later
    (DEFER_AND_FUSE, captured graphs)."""

    def __init__(self, p):
        self.prev = torch.get_float32_matmul_precision()
        self.value = _as_precision(p)
        set_precision(self.value)

    def __enter__(self):
        return self.value

    def __exit__(self, *exc):
        torch.set_float32_matmul_precision(self.prev)
        return False


# ---- program cache and memory telemetry (published private names) ----------------


class _CacheEntryStats:
    """One cached fused program: ``read_count`` (times served from the cache
    after its compile), ``compilation_duration`` (microseconds the compile
    took), ``last_read`` (``time.time()`` seconds of its last use; its
    compile is the first), and ``structure`` (the structural hash, as in
    ``torch_tpu.defer_cuts()``), ``nodes``, ``kernels``."""

    __slots__ = ("read_count", "compilation_duration", "last_read", "structure", "nodes", "kernels")

    def __init__(self, e: dict):
        self.read_count = e["read_count"]
        self.compilation_duration = e["compile_ns"] / 1000.0
        self.last_read = e["last_read_ns"] / 1e9
        self.structure = e["structure"]
        self.nodes = e["nodes"]
        self.kernels = e["kernels"]

    def __repr__(self):
        return (f"CacheEntryStats(read_count={self.read_count}, compilation_duration="
                f"{self.compilation_duration:.1f}us, last_read={self.last_read:.6f}, "
                f"structure={self.structure:016x}, nodes={self.nodes}, kernels={self.kernels})")


class _CacheStats:
    """The fused-program cache since the process started: ``num_cache_reqs``
    (programs asked for: every DEFER_AND_FUSE flush, compiled graphs
    included), ``num_cache_hits``, ``num_cache_misses`` (compiles),
    ``num_entries`` (held now), ``num_evictions`` (least recently read
    programs dropped to make room), ``num_uncached`` (compiled but not kept:
    out of host memory), ``host_bytes`` and ``per_entry_stats``.
    Strict eager runs precompiled kernels and asks for no program."""

    def __init__(self, d: dict):
        self.num_cache_reqs = d["requests"]
        self.num_cache_hits = d["hits"]
        self.num_cache_misses = d["compiles"]
        self.num_uncached = d["uncached"]
        self.num_evictions = d["evictions"]
        self.num_entries = d["entries"]
        self.host_bytes = d["host_bytes"]
        self.per_entry_stats = [_CacheEntryStats(e) for e in d["per_entry"]]

    def __repr__(self):
        return (f"CacheStats(num_cache_reqs={self.num_cache_reqs}, num_cache_hits="
                f"{self.num_cache_hits}, num_entries={self.num_entries}, per_entry_stats="
                f"[{len(self.per_entry_stats)} entries])")


def _get_cache_stats() -> _CacheStats:
    """Statistics of the runtime's fused-program cache (see _CacheStats)."""
    return _CacheStats(_C.program_cache_stats())


def _clear_cache() -> None:
    """Drops every cached fused program: each structure compiles again at its
    next flush. The request and hit totals go on counting."""
    _C.clear_program_cache()


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f}{unit}" if unit != "B" else f"{n}B"
        n /= 1024
    return f"{n}B"


def _hbm_usage_summary(device: _DeviceLike = None) -> str:
    """Device memory ("HBM") of the chip, from the caching allocator's
    statistics: in use by tensors (and peak), reserved by the allocator, free
    and capacity; then the fused-program cache, whose programs live in host
    memory and take no device memory (the published API reports only its
    executables' HBM here)."""
    idx = _index(device)
    st = torch.accelerator.memory_stats(idx)
    free, total = torch.accelerator.get_memory_info(idx)
    cache = _C.program_cache_stats()
    return (f"tpu:{idx}: {_fmt_bytes(st.get('allocated_bytes.all.current', 0))} allocated "
            f"(peak {_fmt_bytes(st.get('allocated_bytes.all.peak', 0))}), "
            f"{_fmt_bytes(st.get('reserved_bytes.all.current', 0))} reserved, "
            f"{_fmt_bytes(free)} free of {_fmt_bytes(total)}; "
            f"compilation cache: 0B of device memory for {cache['entries']} programs "
            f"({_fmt_bytes(cache['host_bytes'])} of host memory)")


def _is_in_bad_fork() -> bool:
    return False


def __getattr__(name: str) -> Any:
    if name == "default_generators":
        return _default_generators()
    raise AttributeError(f"module 'torch.tpu' has no attribute '{name}'")
