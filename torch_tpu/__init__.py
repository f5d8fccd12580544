"""torch_tpu: ``tpu`` as a native PyTorch device.

Importing this package (or ``import torch``, through the ``torch.backends``
autoload entry point) renames PyTorch's PrivateUse1 backend to ``tpu``, loads
the bridge (``torch_tpu._C``: allocator, device guard, hooks, generator, op
registration) and installs ``torch.tpu``. Programs then use ``device="tpu"``,
``Tensor.tpu()``, ``torch.accelerator`` and ``torch.autocast("tpu")`` as they
would with CUDA.
"""
import os

import torch

__version__ = "0.1.0"

if torch._C._get_privateuse1_backend_name() != "tpu":
    torch.utils.rename_privateuse1_backend("tpu")

from torch_tpu import _C  # noqa: E402


def _apply_visible_chips() -> None:
    """TPU_VISIBLE_CHIPS=2,3: this process sees those chips as tpu:0, tpu:1
    (set before the runtime starts). Without it or TORCH_TPU_NUM_CHIPS, a
    process started by torchrun sees one chip per local process
    (LOCAL_WORLD_SIZE), as a CUDA process sees every local GPU, so
    ``torch.tpu.set_device(LOCAL_RANK)`` works."""
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    if local.isdigit() and int(local) > 1:  # the ranks share this host's cores: pin nothing
        os.environ.setdefault("TORCH_TPU_PIN_THREADS", "off")
    env = os.environ.get("TPU_VISIBLE_CHIPS")
    if not env:
        if "TORCH_TPU_NUM_CHIPS" not in os.environ and local.isdigit() and int(local) > 1:
            os.environ["TORCH_TPU_NUM_CHIPS"] = local
        return
    chips = [c.strip() for c in env.split(",") if c.strip()]
    if not chips or not all(c.isdigit() and int(c) < 8 for c in chips) or len(set(chips)) != len(chips):
        raise RuntimeError(f"TPU_VISIBLE_CHIPS={env!r}: expected distinct chip numbers 0..7, "
                           "separated by commas")
    os.environ["TORCH_TPU_NUM_CHIPS"] = str(len(chips))


from torch_tpu import _env  # noqa: E402

_env_set = _env.apply()  # the published API's environment variables, before the runtime starts
if "TORCH_TPU_FALLBACK" in _env_set:  # the bridge read it when it was loaded
    _C.set_fallback_mode(_env_set["TORCH_TPU_FALLBACK"])
_apply_visible_chips()
_C._init()

from torch_tpu import device as _device_module  # noqa: E402

torch._register_device_module("tpu", _device_module)
torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True,
                                                     for_storage=True)
torch.set_autocast_dtype("tpu", torch.bfloat16)

from torch_tpu import _backend_config  # noqa: E402

_backend_config.install()  # torch.backends.tpu (allow_excess_precision)

from torch_tpu._internal import profiler as _profiler  # noqa: E402

_profiler.install()  # torch.profiler.xprof_trace_handler

from torch_tpu._internal.execution_mode import (  # noqa: E402
    EagerMode,
    defer_cuts,
    defer_metrics,
    eager_mode,
    flush,
    get_eager_mode,
    reset_defer_metrics,
    set_defer_max_nodes,
    set_eager_mode,
    set_global_eager_mode,
)


from torch_tpu import distributed  # noqa: E402,F401  (registers the tpu_dist backend)
from torch_tpu import comm  # noqa: E402,F401  (torch.tpu.comm: collectives between chips)
from torch_tpu import dynamo as _dynamo  # noqa: E402
from torch_tpu.dynamo import TpuBackend  # noqa: E402

_dynamo.install()  # torch.compile(backend="tpu"), once torch._dynamo is imported

from torch_tpu import integrations as _integrations  # noqa: E402

_integrations.install()  # accelerate, safetensors: tpu support when they are imported

from torch_tpu import paged_attention  # noqa: E402,F401  (torch.ops.tpu.paged_*: CPU, fake)


def fallback_counts() -> dict:
    """Calls per ATen op that ran on the CPU because no native kernel took them."""
    return dict(_C.fallback_counts())


def native_counts() -> dict:
    """Calls per ATen op that ran natively on the tpu runtime."""
    return dict(_C.native_counts())


def meta_shape_counts() -> dict:
    """Native calls per ATen op whose output shape came from PyTorch's meta
    kernel rather than the runtime's shape function: each costs a dispatch on
    meta tensors (a Python function for some ops, tens of microseconds)."""
    return dict(_C.meta_shape_counts())


def reset_counts() -> None:
    """Zeroes the native, fallback and meta-shape counters."""
    _C.reset_counts()


def native_ops() -> list:
    """The ATen overloads with a native tpu kernel."""
    return sorted(_C.native_op_names())


def matrix_unit() -> dict:
    """The host driver's matrix unit: the library and instruction set its
    bfloat16 GEMMs run on ('amx_bf16', 'avx512_bf16', 'avx512_f32 (...)' or
    'off (why)'), whether bfloat16, float32 and int8 GEMMs use it, how many
    GEMMs it ran or declined (those ran on the caller's own path), how many
    bfloat16 convolution products (forward, input or weight gradient) it ran
    ('convs') or declined ('conv_declined'), how many of those it ran split
    over the compute pool's threads ('conv_split') and how many of those
    were 1x1 products run as GEMMs instead of oneDNN's convolution
    primitives ('conv_gemm'; their GEMMs count in 'gemms' too), and its weight
    cache ('weight_cache': see weight_cache_stats)."""
    info = dict(_C.matrix_unit())
    info["weight_cache"] = weight_cache_stats()
    return info


def weight_cache_stats() -> dict:
    """The matrix unit's weight cache: blocked copies of GEMM operands read
    again unchanged (weights), so a decode or evaluation loop lays each out
    once. 'entries' and 'bytes' held (host memory, not the device's),
    'limit_bytes' (TORCH_TPU_WEIGHT_CACHE_MB, default 1024; see
    set_weight_cache_limit), 'hits', 'packs' (copies made), 'evictions' (to
    stay within the limit) and 'drops' (the tensor was written or freed).
    torch.tpu.empty_cache() empties it. The counters count work that has run
    (torch.tpu.synchronize() first to include work just issued)."""
    return dict(_C.weight_cache_stats())


def queue_stats(device=None) -> dict:
    """How the chip's streams have run their commands since the process
    started: 'inline_commands' (small work, or work the host waits for at
    once, run by the submitting thread while the queue was idle),
    'queued_commands' (handed to the stream's worker), 'worker_wakeups'
    (hand-offs that had to wake a sleeping worker), 'syncs' and
    'sync_sleeps' (waits for the queue that outlasted the poll and slept).
    A loop's steady state shows in their rates per step (bench/bench_drift.py)."""
    return dict(_C.queue_stats(_device_module._index(device)))


def pool_stats() -> dict:
    """How the process's compute pool (the cores kernels split their loops
    over) has run since it started: 'threads' (its size), 'jobs' (loops
    split over it), 'serial_busy' (loops run serially because it ran another
    job), 'exclusive' (runs of the matrix unit's own threads on its cores),
    'spin_hits' / 'spin_misses' (worker polls between jobs that found the
    next job / ran out), 'spin_backoffs' (polls cut to the minimum because
    the cores were oversubscribed: a poll descheduled, or a wake-up slower
    than the longest poll), 'sleeps', 'wakeups' (jobs that signalled
    sleeping workers), 'empty_takes' (a worker reached a job already done),
    'caller_sleeps' (a kernel slept waiting for a worker's chunk),
    'spin_ns' (the current poll length), 'pinned' (threads pinned to a
    core of their own: the workers and chip 0's queue worker, see
    TORCH_TPU_PIN_THREADS) and 'batch_threads' (the device's threads, pool
    and queue workers, scheduled SCHED_BATCH so that waking them never
    preempts the host thread: TORCH_TPU_DEVICE_SCHED). TORCH_TPU_POOL_SPIN_US
    sets the longest poll (default 100; 0: workers sleep between jobs)."""
    return dict(_C.pool_stats())


def set_weight_cache_limit(nbytes: int) -> None:
    """Bounds the weight cache (bytes; 0 turns it off), evicting down to it."""
    if int(nbytes) < 0:
        raise ValueError(f"the weight cache limit must be >= 0, got {nbytes}")
    _C.set_weight_cache_limit(int(nbytes))


def set_fallback_mode(mode: str) -> None:
    """'warn' (default: warn once per op), 'silent', or 'error' (raise
    NotImplementedError instead of falling back). Also TORCH_TPU_FALLBACK."""
    _C.set_fallback_mode(mode)


__all__ = [
    "EagerMode",
    "TpuBackend",
    "defer_cuts",
    "defer_metrics",
    "eager_mode",
    "fallback_counts",
    "flush",
    "matrix_unit",
    "pool_stats",
    "queue_stats",
    "set_weight_cache_limit",
    "weight_cache_stats",
    "get_eager_mode",
    "native_counts",
    "meta_shape_counts",
    "native_ops",
    "reset_counts",
    "reset_defer_metrics",
    "set_defer_max_nodes",
    "set_eager_mode",
    "set_fallback_mode",
    "set_global_eager_mode",
]
