"""``torch.tpu.comm``: collectives between the chips of this process, shaped
like ``torch.cuda.comm`` (``broadcast``, ``broadcast_coalesced``,
``reduce_add``, ``scatter``, ``gather``) plus list forms like
``torch.cuda.nccl`` (``all_reduce``, ``all_gather``, ``reduce_scatter``).

Each call is one collective of the runtime over the chips involved
(``tpu_comm_create_local``): one part per chip, queued on that chip's current
stream, and the parts meet when every chip's queue reaches them. Data moves
chip to chip directly: each chip's worker reads the other chips' buffers in
place (no staging copy through shared memory, unlike the multi-process
``tpu_dist`` path). Like CUDA's, the calls return at once; work queued before
them on each chip finishes before any chip reads, work queued after them runs
once every chip is done. A failure (a chip whose queue never reaches its part
within ``timeout`` seconds) is raised by the next call or by ``synchronize()``.
"""
import sys
from typing import Optional, Sequence

import torch

from torch_tpu import _C

__all__ = ["broadcast", "broadcast_coalesced", "reduce_add", "scatter", "gather", "all_reduce",
           "all_gather", "reduce_scatter", "synchronize"]

_OPS = {"sum": 0, "avg": 1, "min": 2, "max": 3, "product": 4, "prod": 4}

timeout = 300.0  # seconds a chip waits for the others


def _chip(d) -> int:
    if isinstance(d, int):
        return d
    d = torch.device(d)
    if d.type != "tpu":
        raise ValueError(f"torch.tpu.comm: expected a tpu device, got {d}")
    return torch.tpu.current_device() if d.index is None else d.index


def _dev(chip: int) -> torch.device:
    return torch.device("tpu", chip)


def _op(op) -> int:
    if isinstance(op, str):
        return _OPS[op.lower()]
    name = str(getattr(op, "name", op)).split(".")[-1].lower()  # torch.distributed.ReduceOp
    if name not in _OPS:
        raise ValueError(f"torch.tpu.comm: unsupported reduce op {op}")
    return _OPS[name]


def _run(kind, chips, sends, recvs, count, root=0, op=0):
    _C._chips_collective(kind, chips, sends, recvs, count, root, op, timeout)


def synchronize() -> None:
    """Waits until every collective issued so far has run; raises the first failure."""
    _C._chips_wait()


def broadcast(tensor: torch.Tensor, devices: Optional[Sequence] = None, *,
              out: Optional[Sequence[torch.Tensor]] = None) -> tuple:
    """Copies ``tensor`` to ``devices`` (or into the tensors of ``out``).
    The result on the tensor's own chip is the tensor itself."""
    if (devices is None) == (out is None):
        raise RuntimeError("Exactly one of 'devices' and 'out' must be specified")
    chips = [_chip(o.device) for o in out] if out is not None else [_chip(d) for d in devices]
    src = tensor
    if src.device.type != "tpu" or src.device.index not in chips:
        src = src.to(_dev(chips[0]))
    root = chips.index(src.device.index)
    src = src.contiguous()
    if out is not None:
        for o in out:
            if o.shape != tensor.shape or o.dtype != tensor.dtype or not o.is_contiguous():
                raise RuntimeError("torch.tpu.comm.broadcast: out tensors must be contiguous, of the "
                                   "input's shape and dtype")
        outs = list(out)
    else:
        outs = [src if i == root else torch.empty_like(src, device=_dev(c)) for i, c in enumerate(chips)]
    if len(chips) > 1 and src.numel():
        _run("broadcast", chips, [src if i == root else None for i in range(len(chips))], outs, src.numel(), root)
    elif outs[root] is not src:
        outs[root].copy_(src)
    return tuple(outs)


def broadcast_coalesced(tensors: Sequence[torch.Tensor], devices: Sequence, buffer_size: int = 10485760) -> tuple:
    """Broadcasts tensors (all on ``devices[0]``'s chip) to ``devices``: one
    collective per dtype over their concatenation. Returns one tuple of
    tensors per device; the first holds the inputs themselves."""
    chips = [_chip(d) for d in devices]
    for t in tensors:
        if t.device.type != "tpu" or t.device.index != chips[0]:
            raise RuntimeError("torch.tpu.comm.broadcast_coalesced: the tensors must be on devices[0]")
    result = [[None] * len(tensors) for _ in chips]
    result[0] = list(tensors)
    groups = {}
    for i, t in enumerate(tensors):
        groups.setdefault(t.dtype, []).append(i)
    for idx in groups.values():
        flat = torch.cat([tensors[i].reshape(-1) for i in idx]) if idx else None
        copies = broadcast(flat, chips)
        for c in range(1, len(chips)):
            off = 0
            for i in idx:
                n = tensors[i].numel()
                result[c][i] = copies[c][off:off + n].view(tensors[i].shape)
                off += n
    return tuple(tuple(r) for r in result)


def reduce_add(inputs: Sequence[torch.Tensor], destination=None) -> torch.Tensor:
    """Sums tensors of one shape and dtype, one per chip, onto ``destination``
    (default: the current device)."""
    dest = _chip(destination) if destination is not None else torch.tpu.current_device()
    chips = [_chip(t.device) for t in inputs]
    for t in inputs:
        if t.shape != inputs[0].shape or t.dtype != inputs[0].dtype:
            raise ValueError("torch.tpu.comm.reduce_add: inputs must have one shape and dtype")
    root = chips.index(dest) if dest in chips else 0
    srcs = [t.contiguous() for t in inputs]
    out = torch.empty_like(srcs[root])
    if len(chips) == 1:
        out.copy_(srcs[0])
    elif out.numel():
        _run("reduce", chips, srcs, [out if i == root else None for i in range(len(chips))], out.numel(), root)
    return out if chips[root] == dest else out.to(_dev(dest))


def scatter(tensor: torch.Tensor, devices: Optional[Sequence] = None, chunk_sizes: Optional[Sequence[int]] = None,
            dim: int = 0, streams=None, *, out: Optional[Sequence[torch.Tensor]] = None) -> tuple:
    """Splits ``tensor`` along ``dim`` over ``devices`` (``torch.chunk``'s
    split unless ``chunk_sizes``). An even split of dim 0 of a tensor on one
    of the chips is one collective; other splits copy each chunk to its chip."""
    if (devices is None) == (out is None):
        raise RuntimeError("Exactly one of 'devices' and 'out' must be specified")
    chips = [_chip(o.device) for o in out] if out is not None else [_chip(d) for d in devices]
    n, dim = len(chips), dim % max(tensor.dim(), 1)
    even = (chunk_sizes is None and dim == 0 and tensor.dim() > 0 and tensor.size(0) % n == 0 and out is None
            and tensor.device.type == "tpu" and tensor.device.index in chips)
    if not even:
        parts = tensor.split(list(chunk_sizes), dim) if chunk_sizes is not None else tensor.chunk(n, dim)
        if out is not None:
            for o, p in zip(out, parts):
                o.copy_(p)
            return tuple(out)
        return tuple(p.to(_dev(c)) for p, c in zip(parts, chips))
    root = chips.index(tensor.device.index)
    src = tensor.contiguous()
    shape = (tensor.size(0) // n,) + tuple(tensor.shape[1:])
    outs = [torch.empty(shape, dtype=tensor.dtype, device=_dev(c)) for c in chips]
    if src.numel():
        _run("scatter", chips, [src if i == root else None for i in range(n)], outs, src.numel() // n, root)
    return tuple(outs)


def gather(tensors: Sequence[torch.Tensor], dim: int = 0, destination=None, *, out: Optional[torch.Tensor] = None):
    """Concatenates tensors (one per chip) along ``dim`` on ``destination``
    (default: the current device; -1 or "cpu": the CPU). Tensors of one
    shape gathered along dim 0 onto one of their chips: one collective."""
    if out is not None:
        destination = out.device
    cpu = destination == -1 or (destination is not None and torch.device(destination).type == "cpu")
    dest = None if cpu else (_chip(destination) if destination is not None else torch.tpu.current_device())
    chips = [_chip(t.device) for t in tensors]
    d = dim % max(tensors[0].dim(), 1)
    same = all(t.shape == tensors[0].shape and t.dtype == tensors[0].dtype for t in tensors)
    if cpu or dest not in chips or d != 0 or not same or tensors[0].dim() == 0 or len(set(chips)) != len(chips):
        target = torch.device("cpu") if cpu else _dev(dest)
        res = torch.cat([t.to(target) for t in tensors], dim)
        if out is not None:
            out.copy_(res)
            return out
        return res
    root = chips.index(dest)
    srcs = [t.contiguous() for t in tensors]
    shape = (tensors[0].size(0) * len(chips),) + tuple(tensors[0].shape[1:])
    res = out if out is not None and out.is_contiguous() else torch.empty(shape, dtype=tensors[0].dtype,
                                                                          device=_dev(dest))
    if res.numel():
        _run("gather", chips, srcs, [res if i == root else None for i in range(len(chips))], srcs[0].numel(), root)
    if out is not None and res is not out:
        out.copy_(res)
        return out
    return res


def all_reduce(inputs: Sequence[torch.Tensor], outputs: Optional[Sequence[torch.Tensor]] = None, op="sum") -> None:
    """Reduces tensors of one shape and dtype, one per chip, into every one of
    them (or into ``outputs``), like ``torch.cuda.nccl.all_reduce``."""
    outputs = list(inputs) if outputs is None else list(outputs)
    chips = [_chip(t.device) for t in inputs]
    for t in list(inputs) + outputs:
        if not t.is_contiguous() or t.numel() != inputs[0].numel() or t.dtype != inputs[0].dtype:
            raise ValueError("torch.tpu.comm.all_reduce: contiguous tensors of one size and dtype")
    if inputs[0].numel():
        _run("all_reduce", chips, list(inputs), outputs, inputs[0].numel(), 0, _op(op))


def all_gather(inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> None:
    """outputs[i] (on chip i) receives every input, in chip order."""
    chips = [_chip(t.device) for t in inputs]
    if inputs[0].numel():
        _run("all_gather", chips, list(inputs), list(outputs), inputs[0].numel())


def reduce_scatter(inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor], op="sum") -> None:
    """outputs[i] (on chip i) receives the reduction of part i of every input."""
    chips = [_chip(t.device) for t in inputs]
    if outputs[0].numel():
        _run("reduce_scatter", chips, list(inputs), list(outputs), outputs[0].numel(), 0, _op(op))


torch.tpu.comm = sys.modules[__name__]
sys.modules["torch.tpu.comm"] = sys.modules[__name__]
