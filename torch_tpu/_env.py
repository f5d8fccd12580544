"""The published TorchTPU's documented environment variables, read once at
import (before the runtime starts).

Each variable the published API documents is either honoured here (with what
it does on the software TPU) or, where it means nothing here (XLA and libtpu
flags, slice topology, the XLA compile caches' tiers), named in a warning,
once per process: setting it changes nothing, and the warning says so.
:func:`report` lists the ones set and what each does here.
"""
import os
import warnings

# Honoured: variable -> what it does here.
HONOURED = {
    "TORCH_TPU_DEFER_AND_FUSE": "=1: EagerMode.DEFER_AND_FUSE is the initial global mode",
    "TPU_DEFER_AND_FUSE": "legacy spelling of TORCH_TPU_DEFER_AND_FUSE (which wins when both are set)",
    "TPU_LAUNCH_BLOCKING": "=1: EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING is the initial global mode",
    "TPU_VISIBLE_CHIPS": "the chips this process sees, renumbered from tpu:0",
    "TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT":
        "a local directory: torch.compile(backend='tpu')'s on-disk cache (TORCH_TPU_CACHE_DIR) "
        "when TORCH_TPU_CACHE_DIR is unset; a remote URL (gs://...) is not supported and warns",
    "TORCH_TPU_INTERNAL_ENABLE_DEBUG_CHECKS":
        "=1: CPU fallbacks raise instead of running (set_fallback_mode('error')) and every op "
        "waits for completion (launch blocking), so a failure surfaces at its op",
    "TORCH_SHOW_CPP_STACKTRACES": "PyTorch's own: C++ stack traces in errors",
}

# Accepted and ignored, with the reason given in the warning.
IGNORED = {
    "TORCH_TPU_INTERNAL_XLA_OPTIONS": "there is no XLA compiler (fusion is torch_tpu's own)",
    "XLA_FLAGS": "there is no XLA compiler",
    "LIBTPU_INIT_ARGS": "there is no libtpu",
    "TORCH_TPU_TIER2_COMPILATION_CACHE":
        "fused programs compile in microseconds and are cached in-process; there is no "
        "shared-memory tier",
    "TORCH_TPU_TIER3_COMPILATION_CACHE_LOCAL_BACKUP_TASK": "there is no remote cache tier",
    "TORCH_TPU_TOPOLOGY": "the software TPU has no slice topology (chips: TORCH_TPU_NUM_CHIPS)",
    "TORCH_TPU_SLICEBUILDER_ADDRESSES":
        "the software TPU has no slice builder (ranks meet through torch.distributed's store)",
    "TORCH_TPU_INTERNAL_DETECT_REPEATED_OPS":
        "DEFER_AND_FUSE cuts depend on the op sequence only; there is no repeated-op heuristic",
    "TORCH_TPU_INTERNAL_MATERIALIZE_COLLECTIVE_TENSORS":
        "collectives always flush the pending graph (they run on the stream in order)",
    "TORCH_TPU_INTERNAL_SPLIT_RNG_STATE_UPDATE": "RNG is counter-based Philox per chip",
    "TORCH_TPU_INTERNAL_DISABLE_INPLACE_BUFFER_DONATION":
        "in-place ops write their buffers directly; there is no donation",
    "TORCH_TPU_INTERNAL_HANDSHAKE_STAGE": "there is no ZMQ handshake between ranks",
    "TORCH_TPU_INTERNAL_ALLOW_XLA_BACKEND": "there is no XLA backend to load",
}

_warned = set()

# The process environment as it was before ``import torch_tpu`` changed it
# (set by the first apply() on os.environ): launchers re-executing a process
# start from it.
ORIGINAL = None


def _warn_once(name: str, why: str) -> None:
    if name in _warned:
        return
    _warned.add(name)
    warnings.warn(f"{name} is set but has no effect in torch_tpu: {why}", UserWarning, stacklevel=3)


def apply(environ=None) -> dict:
    """Maps the honoured variables onto the ones the runtime reads, and warns
    (once each) for the ignored ones that are set; returns the variables it
    set. Called by ``import torch_tpu`` before the runtime starts."""
    global ORIGINAL
    env = os.environ if environ is None else environ
    before = dict(env)
    if environ is None and ORIGINAL is None:
        ORIGINAL = before
    if "TPU_DEFER_AND_FUSE" in env and "TORCH_TPU_DEFER_AND_FUSE" not in env:
        env["TORCH_TPU_DEFER_AND_FUSE"] = env["TPU_DEFER_AND_FUSE"]
    root = env.get("TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT")
    if root:
        if "://" in root:
            _warn_once("TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT",
                       f"{root!r} is remote; only a local directory is supported "
                       "(it becomes TORCH_TPU_CACHE_DIR)")
        elif "TORCH_TPU_CACHE_DIR" not in env:
            env["TORCH_TPU_CACHE_DIR"] = root
    if env.get("TORCH_TPU_INTERNAL_ENABLE_DEBUG_CHECKS", "0") not in ("", "0"):
        env.setdefault("TORCH_TPU_FALLBACK", "error")
        env.setdefault("TPU_LAUNCH_BLOCKING", "1")
    for name, why in IGNORED.items():
        if name in env:
            _warn_once(name, why)
    return {k: v for k, v in env.items() if before.get(k) != v}


def report() -> dict:
    """Every documented variable that is set, with what it does here."""
    out = {}
    for name, what in HONOURED.items():
        if name in os.environ:
            out[name] = "honoured: " + what
    for name, why in IGNORED.items():
        if name in os.environ:
            out[name] = "ignored: " + why
    return out
