"""``torch.tpu.memory``: the CUDA memory-snapshot API for tpu memory.

``_record_memory_history()`` starts recording every device block the bridge's
allocator hands out or takes back, and every segment the runtime's caching
allocator maps from the chip or returns to it, with the Python frames (and
with ``stacks="all"`` the C++ frames) of the code that allocated or freed;
``_snapshot()`` returns the dictionary ``torch.cuda.memory._snapshot()``
returns (``segments``, ``device_traces``, ``allocator_settings``), which
``torch.cuda._memory_viz`` (and pytorch.org/memory_viz, given
``_dump_snapshot``'s pickle) reads.

``segments`` is the caching allocator's real layout at the snapshot
(``tpu_memory_snapshot``): each segment mapped from a chip with all the
blocks that tile it, allocated ("active_allocated"), freed but awaiting
another stream ("active_pending_free") or cached ("inactive"); blocks
allocated before recording started are there too (without frames).

What differs from CUDA's: a segment's own ``frames`` and those of
``segment_alloc`` / ``segment_free`` entries are empty (the runtime maps
segments under its allocator's lock, where gathering frames could wait for
the GIL), and a free is one ``free_completed`` entry at the time the tensor
dies (no ``free_requested``; a block another stream still uses shows as
``active_pending_free`` in ``segments`` until it is reusable).
"""
import pickle
from typing import Any, Optional

from torch_tpu import _C

__all__: list = []

_FRAMES = {"python": 1, "all": 2}


def _record_memory_history(enabled: Optional[str] = "all", context: Optional[str] = "all",
                           stacks: str = "python", max_entries: int = 100000,
                           device: Any = None, **kwargs) -> None:
    """Starts (``enabled`` "all", or "state": live blocks only, no trace) or
    stops (``None``) recording. ``context``: whose frames are kept, as
    CUDA's: None none, "state" / "alloc" those of allocations, "all" those
    of frees too; ``stacks`` "python" or "all" (Python and C++).
    ``max_entries`` bounds the trace (oldest entries are dropped first);
    stopping discards what was recorded, as CUDA's does."""
    if enabled not in (None, "all", "state"):
        raise ValueError(f"enabled must be None, 'all' or 'state', got {enabled!r}")
    if context not in (None, "state", "alloc", "all"):
        raise ValueError(f"context must be None, 'state', 'alloc' or 'all', got {context!r}")
    if stacks not in _FRAMES:
        raise ValueError(f"stacks must be 'python' or 'all', got {stacks!r}")
    if int(max_entries) < 1:
        raise ValueError("max_entries must be positive")
    frames = _FRAMES[stacks] if context is not None else 0
    _C._record_memory_history(enabled is not None, enabled == "all", frames,
                              frames if context == "all" else 0, int(max_entries))


def _snapshot(device: Any = None) -> dict:
    """The recorded history and the allocator's segments, in torch.cuda's format."""
    trace, segments = _C._memory_history()
    devices = max([e["device"] for e in trace] + [s["device"] for s in segments] + [0]) + 1
    device_traces: list = [[] for _ in range(devices)]
    streams = {}
    for e in trace:
        if e["action"] == "alloc":
            streams[e["addr"]] = e["stream"]
        stream = streams.get(e["addr"], 0) if e["stream"] < 0 else e["stream"]
        device_traces[e["device"]].append({
            "action": e["action"], "addr": e["addr"], "size": e["size"],
            "stream": stream, "time_us": e["time_us"], "frames": e["frames"],
        })
    return {"segments": segments, "device_traces": device_traces,
            "allocator_settings": {"PYTORCH_ALLOC_CONF": "", "backend": "tpu"}}


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickles ``_snapshot()`` to ``filename`` (for pytorch.org/memory_viz)."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)
