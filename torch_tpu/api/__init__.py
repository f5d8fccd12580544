"""The published TorchTPU's older device entry point, ``torch_tpu.api``
(deprecated there in favour of ``torch.device("tpu")``; kept so that scripts
and launch helpers written for it run).

``tpu_device()`` is cached like an ``functools.lru_cache`` function (it has
``cache_clear``): it returns the current tpu device when first called and
the same device afterwards, until ``tpu_device.cache_clear()``.
"""
import functools
import warnings

import torch

from torch_tpu import _C
from torch_tpu.api import _device_module  # noqa: F401


@functools.lru_cache(maxsize=None)
def tpu_device() -> torch.device:
    """The current tpu device, ``torch.device("tpu", torch.tpu.current_device())``.
    Deprecated in the published API: prefer ``torch.device("tpu")``."""
    warnings.warn("torch_tpu.api.tpu_device() is deprecated: use torch.device('tpu')",
                  DeprecationWarning, stacklevel=2)
    return torch.device("tpu", _C.current_device())


__all__ = ["tpu_device"]
