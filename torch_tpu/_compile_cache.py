"""On-disk cache of compiled graphs for ``torch.compile(backend="tpu")``.

PyTorch's own AOTAutograd cache (``AOTAutogradCache``, bundled entries) does
the work: our forward/backward/inference compilers are
``SerializableAOTDispatchCompiler``s returning :class:`TpuOutputCode`, an
``OutputCode`` that pickles the lowered ATen graph (a ``GraphModule``, after
our rewrites). A second process compiling the same Dynamo graph with the same
input metadata (shapes or the symbolic shapes' guards, dtypes, strides,
requires_grad), the same torch version and configs and the same torch_tpu
(:func:`cache_tag`) finds the entry and skips AOTAutograd's tracing,
partitioning and our lowering: it unpickles the graphs and AOTAutograd's
runtime wrappers. Dynamo's bytecode tracing still runs (it produces the key).

Opt-in (``TpuBackend(dynamo_cache=True).compile(model)``): Dynamo's caching
precompile stores the traced bytecode and guards too (packages under
``$TORCH_TPU_CACHE_DIR/dynamo/<tag>``), so another process skips Dynamo's
tracing as well, where Dynamo can serialise the frame's guards. Four gaps
of PyTorch 2.14's precompile that transformers models hit are filled while it
is on (torch_tpu/integrations/torch_compile.py, which holds every patch of
torch's compile internals, each with the upstream change that retires it).

Entries live under ``$TORCH_TPU_CACHE_DIR/aotautograd`` (default
``~/.cache/torch_tpu``), apart from Inductor's cache: the directory is
switched only while this backend compiles. Imported on first compile only
(``torch._inductor`` is heavy).
"""
import contextlib
import functools
import hashlib
import os
import pickle
import threading

import torch
from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
from torch._inductor.output_code import OutputCode

from torch_tpu import _lowering, integrations
from torch_tpu.integrations import torch_compile as _patches

FORMAT = 3  # bump when TpuOutputCode's pickled form changes

_local = threading.local()


def cache_dir() -> str:
    """$TORCH_TPU_CACHE_DIR, default ~/.cache/torch_tpu."""
    d = os.environ.get("TORCH_TPU_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "torch_tpu")
    return os.path.abspath(d)


@functools.lru_cache(maxsize=1)
def _source_hash() -> str:
    h = hashlib.sha256()
    for mod in ("dynamo.py", "_lowering.py", "_compile_cache.py", "integrations/torch_compile.py"):
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), mod), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def cache_tag() -> str:
    """What besides PyTorch's own key (graph, input metadata, torch version and
    configs) a cached entry depends on: torch_tpu's version, the set of ops the
    runtime runs natively (it decides the decompositions) and the lowering's
    source. Read on every compile (a test changes the version)."""
    import torch_tpu
    ops = hashlib.sha256("\n".join(sorted(torch_tpu.native_ops())).encode()).hexdigest()[:16]
    return f"torch_tpu-{torch_tpu.__version__}-f{FORMAT}-ops{ops}-src{_source_hash()}"


@contextlib.contextmanager
def enabled(backend):
    """While `backend` compiles: AOTAutograd's cache on, bundled, in our
    directory, keyed with cache_tag(); backward graphs compiled at once (so the
    entry is complete and written while the directory is ours)."""
    prev = getattr(_local, "backend", None), getattr(_patches.scope, "aot_dir", None)
    _local.backend = backend
    _patches.scope.aot_dir = os.path.join(cache_dir(), "aotautograd")
    _patches.scope.key_tag = cache_tag
    try:
        with torch._functorch.config.patch(bundled_autograd_cache=True, enable_autograd_cache=True,
                                           force_non_lazy_backward_lowering=True), \
                torch.compiler.config.patch(force_disable_caches=False), \
                torch._inductor.config.patch(fx_graph_cache=True):
            yield
    finally:
        _local.backend, _patches.scope.aot_dir = prev


def current_backend():
    return getattr(_local, "backend", None)


def _graph_code(gm):
    """_lowering.graph_code(gm) where its globals pickle (then the entry
    rebuilds the forward from the code alone), else None."""
    code = _lowering.graph_code(gm)
    if code is None:
        return None
    try:
        pickle.dumps(code[1])
    except Exception:  # noqa: BLE001  (then the GraphModule is loaded instead)
        return None
    return code


class _PickledGraph:
    """A GraphModule pickled on its own, inside the entry (unpickled: bytes,
    loaded only when the graph is asked for)."""

    def __init__(self, gm):
        self.gm = gm

    def __reduce__(self):
        return bytes, (pickle.dumps(self.gm),)


class TpuOutputCode(OutputCode):
    """One lowered ATen graph (forward, backward or inference) as AOTAutograd's
    cache stores it: the graph's generated Python code (source, globals,
    constants) and the pickled GraphModule. On load the runtime callable
    (_lowering.Lowered) is rebuilt from the code alone (unpickling a GraphModule
    re-traces and regenerates its code: ~0.2 s per graph of a small model at
    every warm start); the GraphModule is unpickled only when asked for
    (debug output, or serialising a graph loaded without its code)."""

    def __init__(self, gm, kind, backend):
        self._boxed_call = True
        self.kind = kind
        self.lowered = _lowering.Lowered(gm, kind, backend)  # rewrites gm (views -> reshapes)
        self._gm, self._gm_bytes, self._code = gm, None, None
        self._info = (self.lowered.nodes, list(self.lowered.non_native))

    @property
    def gm(self):
        if self._gm is None:
            self._gm = pickle.loads(self._gm_bytes)
        return self._gm

    def __call__(self, inputs):
        return self.lowered(inputs)

    def __getstate__(self):
        d = dict(self.__dict__)
        d["lowered"] = None
        if self._gm is not None:
            d["_gm"] = None
            d["_gm_bytes"] = self._gm_bytes or _PickledGraph(self._gm)
            d["_code"] = self._code or _graph_code(self._gm)
        return d

    def __copy__(self):
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo):
        """A copy sharing the graph: the GraphModule is never changed after
        the lowering's rewrites, and AOTAutograd's bundled cache deep-copies
        every entry it loads or records (keeping a copy to serialise again),
        which otherwise copies each graph node by node (~0.1-0.3 s per
        training entry of a small model at every warm start)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.lowered = None
        memo[id(self)] = new
        return new

    def prepare_for_serialization(self) -> None:
        self.lowered = None

    def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
        if self.lowered is None:  # loaded from the cache (or a deep copy)
            backend = current_backend() or _lowering.default_backend()
            if self._gm is None and self._code is not None:
                self.lowered = _lowering.Lowered.from_code(_lowering.forward_from_code(self._code),
                                                           self.kind, backend,
                                                  *self._info, gm_getter=lambda: self.gm)
            else:
                self.lowered = _lowering.Lowered(self.gm, self.kind, backend, rewrite=False)
            backend._record(self.kind, self.lowered, cached=True)

    def set_triton_bundle(self, triton_bundle) -> None:
        pass


def serializable(kind, backend):
    """A fw/bw/inference compiler AOTAutograd may cache."""
    def compile_graph(gm, example_inputs):
        out = TpuOutputCode(gm, kind, backend)
        backend._record(kind, out.lowered, cached=False, gm=gm)
        return out
    return SerializableAOTDispatchCompiler(TpuOutputCode, compile_graph)


# ---- Dynamo's precompile: the traced bytecode and guards too (opt-in) ----------------------------


def dynamo_cache_dir() -> str:
    """Dynamo packages, per cache_tag() (the packages hold our graphs)."""
    tag = hashlib.sha256(cache_tag().encode()).hexdigest()[:16]
    return os.path.join(cache_dir(), "dynamo", tag)


@contextlib.contextmanager
def precompile_scope(backend):
    """Dynamo's caching precompile on (a process-wide Dynamo switch: on only
    while a model compiled by TpuBackend.compile(..., dynamo cache) is being
    wrapped or called), its packages in dynamo_cache_dir(), and our graph
    cache on. Dynamo logs a warning per guard it drops for precompile: quiet."""
    import logging
    for name in ("torch._dynamo.package", "torch._dynamo.guards", "torch._dynamo.codegen",
                 "torch._dynamo.output_graph"):
        integrations.apply(name)
    prev = getattr(_patches.scope, "dynamo_dir", None)
    _patches.scope.dynamo_dir = dynamo_cache_dir()
    guards_log = logging.getLogger("torch._dynamo.guards")
    level = guards_log.level
    guards_log.setLevel(logging.ERROR)
    try:
        with torch._dynamo.config.patch(caching_precompile=True), enabled(backend):
            yield
    finally:
        guards_log.setLevel(level)
        _patches.scope.dynamo_dir = prev


def _graphs_compiled() -> int:
    from torch._dynamo.utils import counters
    return int(counters["stats"].get("unique_graphs", 0))


def _save(backend) -> None:
    from torch._dynamo.precompile_context import PrecompileContext
    try:
        with precompile_scope(backend):
            PrecompileContext.save_to_dynamo_cache()
        backend.stats["dynamo_saves"] = backend.stats.get("dynamo_saves", 0) + 1
    except Exception as e:  # noqa: BLE001  (the cache is an optimisation)
        import warnings
        warnings.warn(f"torch_tpu: saving the Dynamo package failed: {e!r}")


def scoped(fn, backend):
    """fn (a compiled function or an OptimizedModule's forward) called with
    precompile on; the package is saved after a call that compiled a graph."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        before = _graphs_compiled()
        with precompile_scope(backend):
            out = fn(*args, **kwargs)
        if _graphs_compiled() != before:
            _save(backend)
        return out
    return call


def compile_with_dynamo_cache(backend, model, kwargs):
    """torch.compile(model, backend=backend, **kwargs) with Dynamo's package
    loaded from / saved to disk. A package that fails to load (guards that do
    not deserialise) is ignored: the model compiles as without it."""
    import warnings
    from torch._dynamo.utils import counters
    try:
        with precompile_scope(backend):
            out = torch.compile(model, backend=backend, **kwargs)
    except Exception as e:  # noqa: BLE001
        warnings.warn(f"torch_tpu: the Dynamo package of {getattr(model, '__qualname__', type(model))} "
                      f"did not load ({e!r}); compiling without it")
        counters["dynamo_cache"]["torch_tpu_load_failed"] += 1
        return torch.compile(model, backend=backend, **kwargs)
    backend.stats["dynamo_hits"] = int(counters["dynamo_cache"].get("dynamo_cache_hit", 0))
    if isinstance(out, torch.nn.Module):
        out.forward = scoped(out.forward, backend)
        return out
    return scoped(out, backend)
