"""``torch.tpu``: the device module of the tpu backend, shaped like
``torch.cuda``. Devices, streams and events are the runtime's; memory
statistics come from the runtime's caching allocator."""
import contextlib
import enum
from typing import Any, Optional, Union

import torch

from torch_tpu import _C

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


@contextlib.contextmanager
def precision(p):
    """``with torch.tpu.precision(torch.tpu.Precision.HIGH): ...``: the
    float32 matmul precision inside the block, restored on exit. Each op
    keeps the setting it was issued under, also when it runs later
    (DEFER_AND_FUSE, captured graphs)."""
    old = torch.get_float32_matmul_precision()
    set_precision(p)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


def _is_in_bad_fork() -> bool:
    return False


def __getattr__(name: str) -> Any:
    if name == "default_generators":
        return _default_generators()
    raise AttributeError(f"module 'torch.tpu' has no attribute '{name}'")
