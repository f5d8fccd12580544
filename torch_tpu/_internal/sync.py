"""Explicit materialisation of chosen tensors (the published
``torch_tpu._internal.sync``), and the text of what would be materialised.

In DEFER_AND_FUSE the ops that produce a tensor are recorded in its chip's
stream's pending graph; :func:`synchronize` flushes that graph (reason
``synchronize`` in ``torch_tpu.defer_metrics()``) and, with ``wait=True``,
waits until it has run, raising the first error of the work it waited for.
In strict eager nothing is pending and it only waits. A pending graph runs
as a whole: the other tensors recorded in it are materialised too.

:func:`graph_text` returns the program those graphs would run, as the
runtime's graph IR (kernels, nodes, views, scratch slots; the
``TORCH_TPU_DEFER_LOG=2`` dump) without running anything.
"""
from typing import Iterable, Union

import torch

from torch_tpu import _C

_Tensors = Union[torch.Tensor, Iterable[torch.Tensor]]


def _devices(tensors: _Tensors) -> list:
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    try:
        items = list(tensors)
    except TypeError:
        raise TypeError(f"expected a tensor or an iterable of tensors, got "
                        f"{type(tensors).__name__}") from None
    devices = []
    for t in items:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"expected tensors, got {type(t).__name__}")
        if t.device.type != "tpu":
            raise ValueError(f"expected tpu tensors, got one on {t.device}")
        index = t.device.index if t.device.index is not None else _C.current_device()
        if index not in devices:
            devices.append(index)
    return devices


def synchronize(tensors: _Tensors, wait: bool = True) -> None:
    """Materialises `tensors`: flushes the pending graph of the current
    stream of each of their chips; with ``wait`` waits for that stream
    (its errors are raised here). ``wait=False`` returns once the work is
    queued."""
    for index in _devices(tensors):
        _C.flush_stream(index, bool(wait))


def graph_text(tensors: _Tensors = None) -> str:
    """The program that materialising `tensors` would run now (the pending
    graphs of the current streams of their chips; of the current chip when
    None), as text; "" when nothing is pending. Nothing runs and the
    program cache is not touched."""
    devices = [_C.current_device()] if tensors is None else _devices(tensors)
    parts = []
    for index in devices:
        text = _C.pending_text(index)
        if text:
            parts.append(f"# tpu:{index}\n{text}" if len(devices) > 1 else text)
    return "".join(parts)


def computation_mlir(tensors: _Tensors = None) -> str:
    """The published API's older dump, as StableHLO MLIR. torch_tpu has no
    XLA and no MLIR: this raises, naming :func:`graph_text`."""
    raise NotImplementedError("torch_tpu has no StableHLO/MLIR: use "
                              "torch_tpu._internal.sync.graph_text(tensors) for the runtime's "
                              "graph IR of the pending program")
