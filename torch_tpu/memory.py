"""``torch.tpu.memory``: the CUDA memory-snapshot API for tpu memory.

``_record_memory_history()`` starts recording every device block the bridge's
allocator hands out or takes back; ``_snapshot()`` returns the dictionary
``torch.cuda.memory._snapshot()`` returns (``segments``, ``device_traces``,
``allocator_settings``), which ``torch.cuda._memory_viz`` (and
pytorch.org/memory_viz, given ``_dump_snapshot``'s pickle) reads.

What differs from CUDA's: no stack frames are recorded (``frames`` is empty),
and ``segments`` lists the blocks live at the snapshot, one segment per block
(the runtime's caching allocator does not export its segment layout; its
reserved bytes are in ``torch.tpu.memory_reserved()``). Blocks allocated
before recording started are not in ``segments``.
"""
import pickle
from typing import Any, Optional

from torch_tpu import _C

__all__: list = []


def _record_memory_history(enabled: Optional[str] = "all", context: Any = None,
                           stacks: str = "python", max_entries: int = 100000,
                           device: Any = None, **kwargs) -> None:
    """Starts (``enabled`` "all" or "state") or stops (``None``) recording.
    ``max_entries`` bounds the trace (oldest entries are dropped first);
    stopping discards what was recorded, as CUDA's does."""
    if enabled not in (None, "all", "state"):
        raise ValueError(f"enabled must be None, 'all' or 'state', got {enabled!r}")
    if int(max_entries) < 1:
        raise ValueError("max_entries must be positive")
    _C._record_memory_history(enabled is not None, int(max_entries))


def _block(e: dict) -> dict:
    return {"address": e["addr"], "size": e["size"], "requested_size": e["requested"],
            "state": "active_allocated", "frames": []}


def _snapshot(device: Any = None) -> dict:
    """The recorded history and the live blocks, in torch.cuda's format."""
    trace, live = _C._memory_history()
    devices = max([e["device"] for e in trace + live] + [0]) + 1
    segments = []
    for e in live:
        segments.append({
            "device": e["device"], "address": e["addr"], "total_size": e["size"],
            "allocated_size": e["size"], "active_size": e["size"],
            "requested_size": e["requested"], "stream": e["stream"],
            "segment_type": "small" if e["size"] <= (1 << 20) else "large",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
            "blocks": [_block(e)],
        })
    device_traces: list = [[] for _ in range(devices)]
    streams = {}
    for e in trace:
        if e["action"] == "alloc":
            streams[e["addr"]] = e["stream"]
        stream = streams.get(e["addr"], 0) if e["stream"] < 0 else e["stream"]
        device_traces[e["device"]].append({
            "action": e["action"], "addr": e["addr"], "size": e["size"],
            "stream": stream, "time_us": e["time_us"], "frames": [],
        })
    return {"segments": segments, "device_traces": device_traces,
            "allocator_settings": {"PYTORCH_ALLOC_CONF": "", "backend": "tpu"}}


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickles ``_snapshot()`` to ``filename`` (for pytorch.org/memory_viz)."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)
