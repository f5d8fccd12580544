"""Compiled mode: ``torch.compile(model, backend="tpu")``.

Dynamo captures Python into FX graphs; AOTAutograd turns each into ATen
graphs (forward and backward for training, one graph for inference) with the
decompositions this runtime wants (:func:`decompositions`: PyTorch's core ATen
decompositions minus every op the runtime runs natively, so ``gelu``,
``native_layer_norm``, ``_softmax``, ``native_dropout``, ... stay whole).

Each ATen graph is lowered into the runtime's graph IR by running it under
DEFER_AND_FUSE on the calling thread: every ATen call becomes one node of the
stream's pending graph (the same nodes strict eager submits one at a time),
and the whole graph is flushed at its end (and after each GEMM, convolution
or attention, which then start running) into the fusion compiler, whose
programs are cached by structure (never by sizes), so one compiled graph
serves every size of a dynamic dimension without a recompile. There is one
graph IR and one fusion compiler for DEFER_AND_FUSE and compiled mode.

Importing torch_tpu costs nothing here until ``torch._dynamo`` is imported
(a post-import hook then registers the backend ``"tpu"`` and the Dynamo
device interface for ``tpu``); compiling CPU code is never affected. With
tpu inputs and no backend named (Inductor, the default), the graph is handed
to this backend: Inductor's own ``tpu`` code generator is Pallas (JAX) for
Google TPUs, which cannot drive this runtime. See docs/compile.md.
"""
import collections.abc
import functools
import importlib.abc
import importlib.util
import os
import sys
import threading
import warnings

import torch

from torch_tpu import _lowering

__all__ = ["TpuBackend", "tpu_backend", "decompositions", "graph_uses_tpu"]

_DEVICE = "tpu"


# ---- the decomposition table ----------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _decompositions() -> dict:
    from torch._decomp import core_aten_decompositions
    native = _lowering.native_names()
    return {op: fn for op, fn in core_aten_decompositions().items()
            if _lowering.op_name(op) not in native}


class _LazyDecompositions(collections.abc.Mapping):
    """The decomposition table, built on first use: building it costs
    ~0.5 s per process, and a graph loaded from the on-disk cache never
    reads it."""

    def _table(self):
        return _decompositions()

    def __getitem__(self, op):
        return self._table()[op]

    def __iter__(self):
        return iter(self._table())

    def __len__(self):
        return len(self._table())

    def __contains__(self, op):
        return op in self._table()


def decompositions() -> dict:
    """{OpOverload: decomposition}: core ATen decompositions of the ops the
    runtime has no native kernel for (a copy: callers may change it)."""
    return dict(_decompositions())


# ---- lowering an ATen graph --------------------------------------------------------------------


def graph_uses_tpu(gm, example_inputs=()) -> bool:
    """Whether a Dynamo graph reads or makes tpu tensors (its inputs, or the
    example values Dynamo recorded on its nodes)."""
    for t in example_inputs:
        if isinstance(t, torch.Tensor) and t.device.type == _DEVICE:
            return True
    for node in getattr(gm, "graph", None).nodes if hasattr(gm, "graph") else ():
        for key in ("example_value", "val"):
            v = node.meta.get(key)
            vs = v if isinstance(v, (list, tuple)) else (v,)
            if any(isinstance(x, torch.Tensor) and x.device.type == _DEVICE for x in vs):
                return True
    return False




class TpuBackend:
    """The ``"tpu"`` Dynamo backend with options:

    - ``debug``: print each ATen graph lowered (kind, node count, the ops with
      no native kernel that will take the CPU fallback) and its code;
    - ``dynamic``: what :meth:`compile` passes to ``torch.compile`` (None:
      PyTorch's default, static first then automatically dynamic);
    - ``decompositions``: a table replacing :func:`decompositions`;
    - ``cache``: keep lowered graphs on disk (PyTorch's AOTAutograd cache,
      under ``$TORCH_TPU_CACHE_DIR``, default ``~/.cache/torch_tpu``) so that
      another process compiling the same graph for the same input metadata
      skips AOTAutograd and the lowering. None: on unless
      ``TORCH_TPU_COMPILE_CACHE=0``. Not with a custom ``decompositions``
      table (it is not part of the key);
    - ``dynamo_cache``: with :meth:`compile` only, also keep Dynamo's traced
      bytecode and guards on disk (PyTorch's caching precompile), so another
      process skips Dynamo's tracing too (plain modules and functions, and
      transformers models: four gaps of PyTorch's precompile for decorated
      forwards are filled, see torch_tpu/_compile_cache.py); where Dynamo
      still cannot serialise or reload a frame's guards the model compiles as
      without it, with a warning;
    - ``replay``: after a graph's first call for a layout of its inputs,
      later calls with inputs laid out alike replay the runtime work that call
      recorded (its nodes, relocated to the new inputs, and its allocations)
      instead of running the graph's code op by op through the dispatcher
      (``torch_tpu/_C`` ``Replay``, runtime/include/tpu/capture.h); nodes
      that draw random numbers get fresh Philox counters on each replay. A
      graph that reads values on the host, takes a CPU fallback, has dynamic
      shapes or whose inputs are not tpu tensors keeps running op by op.
      None: on unless ``TORCH_TPU_COMPILE_REPLAY=0``.

    ``torch.compile(m, backend=TpuBackend(debug=True))`` or
    ``TpuBackend(dynamic=True).compile(m)``. ``stats`` counts graphs lowered
    by kind (whether compiled or loaded from the cache), the graphs loaded from
    the cache (``cache_hits``), calls, and the calls replayed (``replays``)."""

    def __init__(self, debug: bool = False, dynamic=None, decompositions=None, cache=None,
                 dynamo_cache: bool = False, replay=None):
        self.debug, self.dynamic = bool(debug), dynamic
        self._decomps = decompositions
        self.cache, self.dynamo_cache, self.replay = cache, bool(dynamo_cache), replay
        self.stats = {"forward": 0, "backward": 0, "inference": 0, "cache_hits": 0, "calls": 0,
                      "replays": 0}
        self.graphs = []  # (kind, node count, non-native ops) per lowered graph

    def compile(self, model, **kwargs):
        """torch.compile(model, backend=self, dynamic=self.dynamic, **kwargs)
        (with ``dynamo_cache``: Dynamo's package loaded from and saved to disk)."""
        kwargs.setdefault("dynamic", self.dynamic)
        if self.dynamo_cache and self.cache_enabled():
            from torch_tpu import _compile_cache as cc
            return cc.compile_with_dynamo_cache(self, model, kwargs)
        return torch.compile(model, backend=self, **kwargs)

    def replay_enabled(self) -> bool:
        if self.replay is not None:
            return bool(self.replay)
        return os.environ.get("TORCH_TPU_COMPILE_REPLAY", "1") != "0"

    def cache_enabled(self) -> bool:
        if self._decomps is not None:
            return False
        from torch_tpu import integrations  # the key needs torch_tpu's part (torch_compile.py)
        if not integrations.apply("torch._functorch._aot_autograd.autograd_cache"):
            return False
        if self.cache is not None:
            return bool(self.cache)
        return os.environ.get("TORCH_TPU_COMPILE_CACHE", "1") != "0"

    def _record(self, kind, lowered, cached, gm=None):
        self.stats[kind] += 1
        self.stats["cache_hits"] += bool(cached)
        self.graphs.append((kind, lowered.nodes, tuple(lowered.non_native)))
        if self.debug:
            print(f"[torch_tpu.compile] {kind} graph{' (from the cache)' if cached else ''}: "
                  f"{lowered.nodes} ATen ops; without a tpu kernel (CPU fallback): "
                  f"{', '.join(lowered.non_native) or 'none'}", file=sys.stderr)
            print(lowered.gm.code, file=sys.stderr)

    def _lower(self, kind):
        def compiler(gm, example_inputs):
            lowered = _lowering.Lowered(gm, kind, self)
            self._record(kind, lowered, cached=False)
            return lowered
        return compiler

    def __call__(self, gm, example_inputs):
        from torch._dynamo.backends.common import aot_autograd
        if not self.cache_enabled():
            decomps = self._decomps if self._decomps is not None else _decompositions()
            return aot_autograd(fw_compiler=self._lower("forward"), bw_compiler=self._lower("backward"),
                                inference_compiler=self._lower("inference"), decompositions=decomps,
                                keep_inference_input_mutations=True)(gm, example_inputs)
        from torch_tpu import _compile_cache as cc
        with cc.enabled(self):
            return aot_autograd(fw_compiler=cc.serializable("forward", self),
                                bw_compiler=cc.serializable("backward", self),
                                inference_compiler=cc.serializable("inference", self),
                                decompositions=_LazyDecompositions(),
                                keep_inference_input_mutations=True)(gm, example_inputs)


_default = TpuBackend()
_lowering.set_default_backend(_default)


def tpu_backend(gm, example_inputs):
    """The backend function registered as ``"tpu"`` (a default TpuBackend)."""
    return _default(gm, example_inputs)


# ---- the Dynamo device interface -------------------------------------------------------------------


def _make_interface():
    from torch._dynamo.device_interface import DeviceInterface

    tpu = torch.tpu

    class TpuInterface(DeviceInterface):
        """torch_tpu's device to Dynamo (streams, events, device queries)."""

        device = tpu.device
        Event = torch.Event
        Stream = tpu.Stream

        class Worker:
            @staticmethod
            def set_device(device: int) -> None:
                tpu.set_device(device)

            @staticmethod
            def current_device() -> int:
                return tpu.current_device()

            @staticmethod
            def get_device_properties(device=None):
                return tpu.get_device_properties(device)

        current_device = staticmethod(tpu.current_device)
        set_device = staticmethod(tpu.set_device)
        device_count = staticmethod(tpu.device_count)
        is_available = staticmethod(tpu.is_available)
        stream = staticmethod(tpu.stream)
        current_stream = staticmethod(tpu.current_stream)
        set_stream = staticmethod(tpu.set_stream)
        synchronize = staticmethod(tpu.synchronize)
        get_device_properties = staticmethod(tpu.get_device_properties)
        memory_allocated = staticmethod(tpu.memory_allocated)

        @staticmethod
        def maybe_exchange_device(device: int) -> int:
            prev = tpu.current_device()
            if device != prev:
                tpu.set_device(device)
            return prev

        exchange_device = maybe_exchange_device

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            return tpu.current_stream(device_idx).stream_id

        @staticmethod
        def get_compute_capability(device=None):
            return "host"

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return True

        @classmethod
        def is_dtype_supported(cls, dtype, including_emulation: bool = False) -> bool:
            return True

        @staticmethod
        def is_triton_capable(device=None) -> bool:
            return False

    return TpuInterface


# ---- registration (when torch._dynamo is imported) ---------------------------------------------------


_registered = False
_lock = threading.Lock()


def _register_with_dynamo() -> None:
    """Registers the backend "tpu" and the tpu device interface. Runs once,
    after torch._dynamo finished importing."""
    global _registered
    with _lock:
        if _registered:
            return
        _registered = True
    from torch._dynamo import device_interface
    from torch._dynamo.backends import registry
    # Dynamo registers its built-in interfaces (one named "tpu", for Google
    # TPUs through Pallas) on first use: let it, then replace that one.
    device_interface.get_registered_device_interfaces()
    device_interface.register_interface_for_device(_DEVICE, _make_interface())
    # The torch_dynamo_backends entry point may have been discovered and be
    # loading this module right now: lookup_backend registers it then.
    if _DEVICE not in registry._COMPILER_FNS and registry._BACKENDS.get(_DEVICE) is None:
        registry.register_backend(compiler_fn=tpu_backend, name=_DEVICE)


class _DynamoImportHook(importlib.abc.MetaPathFinder):
    """Runs _register_with_dynamo right after ``import torch._dynamo`` completes
    (importing torch._dynamo from torch_tpu's import would add seconds to
    every ``import torch``, which autoloads torch_tpu)."""

    def __init__(self):
        self._busy = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch._dynamo" or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
            try:
                _register_with_dynamo()
            except Exception as e:  # noqa: BLE001  (never break torch._dynamo's import)
                warnings.warn(f"torch_tpu: registering the 'tpu' compile backend failed: {e!r}")

        spec.loader.exec_module = exec_then_register
        return spec


def _route_tpu_graphs(gm, example_inputs):
    """torch.compile's default backend (Inductor) hands graphs that use tpu
    tensors here (integrations/torch_compile.py); None for every other graph."""
    return tpu_backend(gm, example_inputs) if graph_uses_tpu(gm, example_inputs) else None


def install() -> None:
    """Called by ``import torch_tpu``."""
    from torch_tpu import integrations
    from torch_tpu.integrations import torch_compile
    torch_compile.set_inductor_router(_route_tpu_graphs)
    integrations.apply("torch")
    if "torch._dynamo" in sys.modules and hasattr(sys.modules["torch._dynamo"], "optimize"):
        _register_with_dynamo()
    elif not any(isinstance(f, _DynamoImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _DynamoImportHook())
