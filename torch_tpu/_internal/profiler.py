"""``torch_tpu._internal.profiler``: the published names over torch.profiler.

``ProfilerActivity.TPU`` is PyTorch's ``ProfilerActivity.PrivateUse1``, and
``profile()`` is ``torch.profiler.profile`` recording CPU and TPU activity
unless told otherwise (docs/profiler.md). ``xprof_trace_handler`` (the
published ``torch.profiler.xprof_trace_handler``, installed there by
``install()``) writes each trace where TensorBoard's profile plugin reads it:
PyTorch's ``tensorboard_trace_handler``, whose chrome traces carry the tpu's
device rows."""
import torch.profiler as _tp

__all__ = ["ProfilerActivity", "profile", "xprof_trace_handler"]


class ProfilerActivity:
    CPU = _tp.ProfilerActivity.CPU
    TPU = _tp.ProfilerActivity.PrivateUse1


def profile(*args, activities=None, **kwargs) -> _tp.profile:
    if activities is None:
        activities = [ProfilerActivity.CPU, ProfilerActivity.TPU]
    return _tp.profile(*args, activities=activities, **kwargs)


def xprof_trace_handler(dir_name: str, worker_name=None, use_gzip: bool = False):
    """An ``on_trace_ready`` handler writing ``<dir_name>/<worker>.<time>.pt.trace.json``
    for TensorBoard (the published name of ``tensorboard_trace_handler``)."""
    return _tp.tensorboard_trace_handler(dir_name, worker_name=worker_name, use_gzip=use_gzip)


def install() -> None:
    """Adds ``xprof_trace_handler`` to ``torch.profiler`` (a new name, not a
    patch: torch.profiler has none of that name to replace)."""
    if not hasattr(_tp, "xprof_trace_handler"):
        _tp.xprof_trace_handler = xprof_trace_handler
