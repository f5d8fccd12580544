"""``torch_tpu._internal.profiler``: the published names over torch.profiler.

``ProfilerActivity.TPU`` is PyTorch's ``ProfilerActivity.PrivateUse1``, and
``profile()`` is ``torch.profiler.profile`` recording CPU and TPU activity
unless told otherwise (docs/profiler.md)."""
import torch.profiler as _tp

__all__ = ["ProfilerActivity", "profile"]


class ProfilerActivity:
    CPU = _tp.ProfilerActivity.CPU
    TPU = _tp.ProfilerActivity.PrivateUse1


def profile(*args, activities=None, **kwargs) -> _tp.profile:
    if activities is None:
        activities = [ProfilerActivity.CPU, ProfilerActivity.TPU]
    return _tp.profile(*args, activities=activities, **kwargs)
