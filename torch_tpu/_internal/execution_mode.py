"""Execution modes of the tpu device (the published TorchTPU API).

``EagerMode.DEFER_NEVER`` (default) dispatches ops one at a time,
asynchronously and in order on the current stream, like CUDA.
``EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING`` makes every op wait for its
completion (also selected by ``TPU_LAUNCH_BLOCKING=1``); errors then surface
at the op that caused them.

The mode is global (``set_global_eager_mode`` / assigning ``eager_mode``) and
can be overridden per thread with the ``set_eager_mode(...)`` context manager
(also available as ``eager_mode(...)``); an inner context wins.
"""
import contextlib
import enum
import os
import threading

from torch_tpu import _C


class EagerMode(enum.Enum):
    DEFER_NEVER = "defer_never"
    DEFER_NEVER_AND_LAUNCH_BLOCKING = "defer_never_and_launch_blocking"


_global_mode = (
    EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
    if os.environ.get("TPU_LAUNCH_BLOCKING") == "1"
    else EagerMode.DEFER_NEVER
)
_local = threading.local()


def _blocking(mode: EagerMode) -> bool:
    return mode is EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING


def get_eager_mode() -> EagerMode:
    """The mode in force on this thread."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else _global_mode


def set_global_eager_mode(mode: EagerMode) -> None:
    """Sets the process-wide mode (threads without a local override)."""
    global _global_mode
    if not isinstance(mode, EagerMode):
        raise TypeError(f"expected an EagerMode, got {mode!r}")
    _global_mode = mode
    _C.set_launch_blocking(_blocking(mode))


@contextlib.contextmanager
def set_eager_mode(mode: EagerMode):
    """Runs the body in `mode` on this thread; restores the previous mode."""
    if not isinstance(mode, EagerMode):
        raise TypeError(f"expected an EagerMode, got {mode!r}")
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(mode)
    _C.set_thread_launch_blocking(int(_blocking(mode)))
    try:
        yield mode
    finally:
        stack.pop()
        _C.set_thread_launch_blocking(int(_blocking(stack[-1])) if stack else -1)


eager_mode = set_eager_mode
