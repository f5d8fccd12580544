"""``torch.backends.tpu``: the tpu backend's flags, as the published TorchTPU
names them.

``allow_excess_precision`` (default True, as published) gives the compiler
the option, not the obligation, to drop intermediate down-casts, so a chain
of half-type ops could carry float32 values between them. torch_tpu's fusion
compiler never uses that option: every intermediate, in a fused kernel's
scratch as in memory, a GEMM epilogue included, is rounded to its dtype as
strict eager rounds it, so DEFER_AND_FUSE and compiled results equal strict
eager's bit for bit. False (no excess precision) is therefore always
honoured; setting True, which asks for something this backend does not do,
warns once saying so.
"""
import sys
import types
import warnings

import torch


class _TpuBackendModule(types.ModuleType):
    def __init__(self):
        super().__init__("torch.backends.tpu", __doc__)
        self._allow_excess_precision = True
        self._warned = False

    @property
    def allow_excess_precision(self) -> bool:
        return self._allow_excess_precision

    @allow_excess_precision.setter
    def allow_excess_precision(self, value) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"torch.backends.tpu.allow_excess_precision must be a bool, "
                            f"got {type(value).__name__}")
        if value and not self._warned:
            self._warned = True
            warnings.warn("torch.backends.tpu.allow_excess_precision=True has no effect in "
                          "torch_tpu: fused and compiled programs round every intermediate "
                          "to its dtype (results equal strict eager's, as with False)",
                          UserWarning, stacklevel=2)
        self._allow_excess_precision = value

    @staticmethod
    def is_available() -> bool:
        from torch_tpu import _C
        return _C.device_count() > 0

    @staticmethod
    def is_built() -> bool:
        return True


def install() -> None:
    if isinstance(getattr(torch.backends, "tpu", None), _TpuBackendModule):
        return
    mod = _TpuBackendModule()
    sys.modules["torch.backends.tpu"] = mod
    torch.backends.tpu = mod
