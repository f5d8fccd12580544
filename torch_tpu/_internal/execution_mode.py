"""Execution modes of the tpu device (the published TorchTPU API).

``EagerMode.DEFER_NEVER`` (default) dispatches ops one at a time,
asynchronously and in order on the current stream, like CUDA.
``EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING`` makes every op wait for its
completion (also selected by ``TPU_LAUNCH_BLOCKING=1``); errors then surface
at the op that caused them.
``EagerMode.DEFER_AND_FUSE`` records ops instead of running them and runs
them, fused, when a value is needed (``.item()``, ``.cpu()``, printing,
synchronisation, events, a CPU fallback, a collective, the graph-size limit,
``torch_tpu.flush()``); also selected by ``TORCH_TPU_DEFER_AND_FUSE=1``.
Results, in-place updates, views, autograd and RNG are those of strict eager.
``EagerMode.INTERNAL_DEFER_ALL`` (the published mode compiled graphs run in)
records and fuses as ``DEFER_AND_FUSE`` does, with one difference: leaving it
(a context's exit, or switching the global mode away) does not flush; what
it recorded stays pending and runs at the next flush point (a host read,
synchronisation, an event, a strict-mode op on the stream, ...), so the work
of consecutive regions joins one graph. The deprecated
``EagerMode.DEFER_AND_FUSE_WITH_O1`` is accepted (attribute, ``EagerMode[...]``
and ``EagerMode("defer_and_fuse_with_o1")``) with a DeprecationWarning and is
``DEFER_AND_FUSE`` (the O1/O2 XLA optimisation levels do not exist here).

The mode is global (``set_global_eager_mode`` / assigning ``eager_mode``) and
can be overridden per thread with the ``set_eager_mode(...)`` context manager
(also available as ``eager_mode(...)``); an inner context wins. Leaving a
deferring context flushes what it recorded. Autograd runs backward on its own
device thread, which follows the global mode: set it globally to defer
backward too.
"""
import contextlib
import enum
import threading

from torch_tpu import _C


_DEPRECATED = {"DEFER_AND_FUSE_WITH_O1": "DEFER_AND_FUSE"}


def _deprecated(name: str):
    import warnings
    target = _DEPRECATED[name]
    warnings.warn(f"EagerMode.{name} is deprecated; it is EagerMode.{target} "
                  "(torch_tpu has no XLA optimisation levels)", DeprecationWarning, stacklevel=3)
    return EagerMode[target]


class _EagerModeMeta(enum.EnumMeta):
    def __getattr__(cls, name):
        if name in _DEPRECATED:
            return _deprecated(name)
        raise AttributeError(f"type object 'EagerMode' has no attribute '{name}'")

    def __getitem__(cls, name):
        if name in _DEPRECATED:
            return _deprecated(name)
        return super().__getitem__(name)


class EagerMode(enum.Enum, metaclass=_EagerModeMeta):
    DEFER_NEVER = "defer_never"
    DEFER_NEVER_AND_LAUNCH_BLOCKING = "defer_never_and_launch_blocking"
    DEFER_AND_FUSE = "defer_and_fuse"
    INTERNAL_DEFER_ALL = "internal_defer_all"

    @classmethod
    def _missing_(cls, value):
        if isinstance(value, str) and value.upper() in _DEPRECATED:
            return _deprecated(value.upper())
        return None


def _initial_mode() -> EagerMode:
    """From the runtime's settings (tpu/config.h), the one reading of
    TPU_LAUNCH_BLOCKING and TORCH_TPU_DEFER_AND_FUSE (the legacy
    TPU_DEFER_AND_FUSE counts when the latter is unset: torch_tpu._env copies
    it over before the runtime reads its settings)."""
    settings = {e["name"]: e["value"] for e in _C.runtime_config()}
    if settings["TPU_LAUNCH_BLOCKING"]:
        return EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
    if settings["TORCH_TPU_DEFER_AND_FUSE"]:
        return EagerMode.DEFER_AND_FUSE
    return EagerMode.DEFER_NEVER


_global_mode = _initial_mode()
_local = threading.local()


def _blocking(mode: EagerMode) -> bool:
    return mode is EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING


def _defer(mode: EagerMode) -> bool:
    return mode is EagerMode.DEFER_AND_FUSE or mode is EagerMode.INTERNAL_DEFER_ALL


def _flushes_on_exit(mode: EagerMode) -> bool:
    """Leaving this mode for a strict one flushes what it recorded."""
    return mode is EagerMode.DEFER_AND_FUSE


def get_eager_mode() -> EagerMode:
    """The mode in force on this thread."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else _global_mode


def _check(mode) -> None:
    if not isinstance(mode, EagerMode):
        raise TypeError(f"expected an EagerMode, got {mode!r}")


def set_global_eager_mode(mode: EagerMode) -> None:
    """Sets the process-wide mode (threads without a local override)."""
    global _global_mode
    _check(mode)
    leaving_defer = _flushes_on_exit(_global_mode) and not _defer(mode)
    _global_mode = mode
    _C.set_launch_blocking(_blocking(mode))
    _C.set_defer(_defer(mode))
    if leaving_defer:
        _C.flush("mode_switch")


def _apply_thread(mode) -> None:
    if mode is None:
        _C.set_thread_launch_blocking(-1)
        _C.set_thread_defer(-1)
    else:
        _C.set_thread_launch_blocking(int(_blocking(mode)))
        _C.set_thread_defer(int(_defer(mode)))


@contextlib.contextmanager
def set_eager_mode(mode: EagerMode):
    """Runs the body in `mode` on this thread; restores the previous mode."""
    _check(mode)
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(mode)
    _apply_thread(mode)
    try:
        yield mode
    finally:
        stack.pop()
        _apply_thread(stack[-1] if stack else None)
        if _flushes_on_exit(mode) and not _defer(get_eager_mode()):
            _C.flush("mode_switch")


eager_mode = set_eager_mode


def flush() -> None:
    """Runs everything recorded in DEFER_AND_FUSE mode (on every chip and
    stream) now; asynchronous like any launch."""
    _C.flush("explicit")


def defer_metrics() -> dict:
    """Counters of the deferred mode since the last reset: nodes recorded,
    flushes (total and by reason), fused programs compiled and cache hits,
    fused kernels and the nodes in them, intermediates never written, and
    of the fused kernels the GEMMs run with an epilogue (gemm_epilogues) and
    the pointwise nodes folded into them (epilogue_nodes)."""
    return dict(_C.defer_metrics())


def reset_defer_metrics() -> None:
    _C.reset_defer_metrics()


def defer_cuts() -> list:
    """The last flushes, oldest first: (reason, nodes, kernels, structure
    hash). Identical programs give identical lists."""
    return list(_C.defer_cuts())


def set_defer_max_nodes(n: int) -> None:
    """The pending-graph node limit (default 1024; TORCH_TPU_DEFER_MAX_NODES)."""
    if n <= 0:
        raise ValueError(f"the node limit must be positive, got {n}")
    _C.set_defer_max_nodes(int(n))


_C.set_defer(_defer(_global_mode))
