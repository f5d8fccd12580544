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
is on (see precompile_scope): a decorated method's original function in the
guards, the module a decorator's wrapper code runs in, modules the generated
code loads by id, and property getters compiled as frames; and a recompile
after a loaded package no longer collides with its globals' names.

Entries live under ``$TORCH_TPU_CACHE_DIR/aotautograd`` (default
``~/.cache/torch_tpu``), apart from Inductor's cache: the directory is
switched only while this backend compiles. Imported on first compile only
(``torch._inductor`` is heavy).
"""
import contextlib
import functools
import hashlib
import importlib
import inspect
import os
import pickle
import sys
import threading
import types

import torch
from torch._functorch._aot_autograd import autograd_cache
from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
from torch._inductor.output_code import OutputCode

FORMAT = 2  # bump when TpuOutputCode's pickled form changes

_local = threading.local()


def cache_dir() -> str:
    """$TORCH_TPU_CACHE_DIR, default ~/.cache/torch_tpu."""
    d = os.environ.get("TORCH_TPU_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "torch_tpu")
    return os.path.abspath(d)


@functools.lru_cache(maxsize=1)
def _source_hash() -> str:
    h = hashlib.sha256()
    for mod in ("dynamo.py", "_compile_cache.py"):
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


_orig_tmp_dir = autograd_cache.AOTAutogradCache._get_tmp_dir.__func__


def _tmp_dir(cls):
    d = getattr(_local, "dir", None)
    return os.path.join(d, "aotautograd") if d else _orig_tmp_dir(cls)


autograd_cache.AOTAutogradCache._get_tmp_dir = classmethod(_tmp_dir)

_orig_hash_details = autograd_cache.AOTAutogradCacheDetails._init_fx_graph_hash_details


def _hash_details(self, gm, example_inputs, fx_config):
    """The key's Inductor part (FxGraphHashDetails: Inductor's configs, the
    hash of torch's sources, registering every Inductor code generator to hash
    custom ones: seconds per process) replaced, for this backend, by what a
    tpu graph depends on besides the graph, its inputs and AOTAutograd's
    configs (the rest of AOTAutogradCacheDetails): torch's version, Python's,
    and cache_tag()."""
    if getattr(_local, "dir", None) is None:
        return _orig_hash_details(self, gm, example_inputs, fx_config)
    self.gm = gm
    self.example_inputs = list(example_inputs)
    self.cache_key_tag = cache_tag()
    self.versions = (torch.__version__, sys.version, torch.version.git_version)


autograd_cache.AOTAutogradCacheDetails._init_fx_graph_hash_details = _hash_details


@contextlib.contextmanager
def enabled(backend):
    """While `backend` compiles: AOTAutograd's cache on, bundled, in our
    directory, keyed with cache_tag(); backward graphs compiled at once (so the
    entry is complete and written while the directory is ours)."""
    prev = getattr(_local, "dir", None), getattr(_local, "backend", None)
    _local.dir, _local.backend = cache_dir(), backend
    try:
        with torch._functorch.config.patch(bundled_autograd_cache=True, enable_autograd_cache=True,
                                           force_non_lazy_backward_lowering=True), \
                torch.compiler.config.patch(force_disable_caches=False), \
                torch._inductor.config.patch(fx_graph_cache=True):
            yield
    finally:
        _local.dir, _local.backend = prev


def current_backend():
    return getattr(_local, "backend", None)


def _graph_code(gm):
    """(source, globals, attributes) of the lowered graph's generated Python
    code, enough to rebuild its forward without the GraphModule; None where
    the graph calls submodules or nested attributes."""
    attrs = {}
    for n in gm.graph.nodes:
        if n.op == "call_module" or (n.op == "get_attr" and "." in n.target):
            return None
        if n.op == "get_attr":
            attrs[n.target] = getattr(gm, n.target)
    pc = gm.graph.python_code("self")
    glob = {k: (("module", v.__name__) if isinstance(v, types.ModuleType) else ("value", v))
            for k, v in pc.globals.items()}
    try:
        pickle.dumps(glob)
    except Exception:  # noqa: BLE001  (then the GraphModule is loaded instead)
        return None
    return pc.src, glob, attrs


class _PickledGraph:
    """A GraphModule pickled on its own, inside the entry (unpickled: bytes,
    loaded only when the graph is asked for)."""

    def __init__(self, gm):
        self.gm = gm

    def __reduce__(self):
        return bytes, (pickle.dumps(self.gm),)


def _forward_from_code(code):
    src, glob, attrs = code
    from torch_tpu.dynamo import flat_forward
    g = {k: (importlib.import_module(v) if how == "module" else v) for k, (how, v) in glob.items()}
    owner = types.SimpleNamespace(**attrs)
    fast = flat_forward(src, g, owner)
    if fast is not None:
        return fast
    exec(compile(src, "<torch_tpu lowered graph>", "exec"), g)  # noqa: S102  (our own pickled graph)
    return functools.partial(g["forward"], owner)


class TpuOutputCode(OutputCode):
    """One lowered ATen graph (forward, backward or inference) as AOTAutograd's
    cache stores it: the graph's generated Python code (source, globals,
    constants) and the pickled GraphModule. On load the runtime callable
    (_Lowered) is rebuilt from the code alone (unpickling a GraphModule
    re-traces and regenerates its code: ~0.2 s per graph of a small model at
    every warm start); the GraphModule is unpickled only when asked for
    (debug output, or serialising a graph loaded without its code)."""

    def __init__(self, gm, kind, backend):
        from torch_tpu.dynamo import _Lowered
        self._boxed_call = True
        self.kind = kind
        self.lowered = _Lowered(gm, kind, backend)  # rewrites gm (views -> reshapes)
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
            from torch_tpu.dynamo import _Lowered, _default
            backend = current_backend() or _default
            if self._gm is None and self._code is not None:
                self.lowered = _Lowered.from_code(_forward_from_code(self._code), self.kind, backend,
                                                  *self._info, gm_getter=lambda: self.gm)
            else:
                self.lowered = _Lowered(self.gm, self.kind, backend, rewrite=False)
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


def _unpickle_wrapped_function(module: str, qualname: str, depth: int):
    """The function `depth` ``__wrapped__`` steps below ``module.qualname``."""
    f = importlib.import_module(module)
    for name in qualname.split("."):
        f = getattr(f, name)
    for _ in range(depth):
        f = f.__wrapped__
    return f


def _wrapped_path(obj):
    """(module, qualname, depth) of a module-level function that a decorator
    (``functools.wraps``) replaced under its own name, e.g. the original of
    transformers' ``@can_return_tuple`` forward, reached from the decorated
    one through ``__wrapped__``; None otherwise."""
    if not inspect.isfunction(obj) or "<locals>" in obj.__qualname__:
        return None
    mod = sys.modules.get(obj.__module__)
    if mod is None:
        return None
    f = mod
    for name in obj.__qualname__.split("."):
        f = getattr(f, name, None)
    depth = 0
    while f is not obj and depth < 8 and callable(f) and hasattr(f, "__wrapped__"):
        f, depth = f.__wrapped__, depth + 1
    return (obj.__module__, obj.__qualname__, depth) if f is obj and depth else None


def _install_guard_pickling() -> None:
    """Dynamo serialises the objects its guards read by module and qualified
    name, and gives up (a ``_Missing`` value whose guards then fail to load)
    on a function that is not what its name resolves to. The original of a
    decorated method is one (transformers' forwards are wrapped by
    ``@can_return_tuple``, whose frame guards on its closure's ``func``):
    it is saved as the name plus the number of ``__wrapped__`` steps."""
    from torch._dynamo import guards
    cls = guards.GuardsStatePickler
    orig = cls.reducer_override
    if getattr(orig, "_torch_tpu", False):
        return

    def reducer_override(self, obj):
        if inspect.isfunction(obj):
            path = _wrapped_path(obj)
            if path is not None:
                return _unpickle_wrapped_function, path
        return orig(self, obj)

    reducer_override._torch_tpu = True
    cls.reducer_override = reducer_override


def _install_package_module_fix() -> None:
    """Dynamo's package records the module whose globals the compiled
    function's code uses as ``fn.__module__``; a decorator's wrapper copies
    the wrapped function's ``__module__`` (``functools.wraps``) while its code
    runs in the decorator's module (transformers' forwards: the code of
    ``deprecate_kwarg``'s wrapper, in transformers.utils.deprecation, named
    after the model's module). On load the package then installs the
    compiled code's helpers (import aliases, compiled functions) into the
    wrong module and the code fails with a NameError. The entry is recorded
    with the module the code's globals belong to."""
    from torch._dynamo import package
    cls = package.CompilePackage
    orig = cls.initialize
    if getattr(orig, "_torch_tpu", False):
        return

    def initialize(self, fn, dynamo=None, ignore_inlined_sources=False):
        orig(self, fn, dynamo, ignore_inlined_sources)
        f = self._innermost_fn
        g = getattr(f, "__globals__", None) or {}
        name = g.get("__name__")
        entry = self._codes.get(getattr(f, "__code__", None))
        if (dynamo is None and entry is not None and name and name != entry.python_module
                and getattr(sys.modules.get(name), "__dict__", None) is g):
            entry.python_module = name

    initialize._torch_tpu = True
    cls.initialize = initialize


def _install_module_loads() -> None:
    """The code Dynamo generates loads some Python modules (``collections``
    to rebuild an ``OrderedDict``, e.g. transformers' ModelOutput) through a
    global named after the module's id, installed in the traced function's
    module at trace time; a package does not record it, so the reloaded code
    fails with a NameError. With a package being recorded, such a module is
    loaded through Dynamo's import aliases instead (``__import_<name>``,
    which the package records and installs on load)."""
    from torch._dynamo import codegen
    cls = codegen.PyCodegen
    orig = cls.create_load_python_module
    if getattr(orig, "_torch_tpu", False):
        return

    def create_load_python_module(self, mod):
        tx = self.tx
        if (isinstance(mod, types.ModuleType) and getattr(tx, "package", None) is not None
                and sys.modules.get(mod.__name__) is mod and hasattr(tx, "import_source")):
            return self.create_load_global(tx.import_source(mod.__name__).global_name, add=True)
        return orig(self, mod)

    create_load_python_module._torch_tpu = True
    cls.create_load_python_module = create_load_python_module


def _install_property_sources() -> None:
    """A package names every function whose frame Dynamo compiled by its
    qualified name, to find its code in another process; a property's getter
    (transformers' ``PreTrainedModel.loss_function``, compiled as its own
    frame after a graph break) is not reachable that way and the save fails.
    It is named ``<class>.<property>`` plus ``fget.__code__``."""
    from torch._dynamo import package
    orig = package._get_code_source
    if getattr(orig, "_torch_tpu", False):
        return

    def _get_code_source(code):
        try:
            return orig(code)
        except package.PackageError:
            obj, path = inspect.getmodule(code), []
            for part in getattr(code, "co_qualname", "").split("."):
                obj = getattr(obj, part, None)
                path.append(part)
                if isinstance(obj, property):
                    for acc in ("fget", "fset", "fdel"):
                        if getattr(getattr(obj, acc), "__code__", None) is code:
                            return ".".join(path), f"{acc}.__code__"
                    break
            raise

    _get_code_source._torch_tpu = True
    package._get_code_source = _get_code_source


def _install_unique_globals() -> None:
    """Dynamo names the globals it installs in a traced function's module
    (``__builtins_dict___0``, ...) with a per-process counter; a loaded
    package installed its own under the same names, so a recompile of that
    function in the process (a guard failed: another shape) asserted that the
    name exists. Names already taken are skipped."""
    from torch._dynamo import bytecode_transformation, output_graph
    cls = output_graph.OutputGraph
    if getattr(cls.install_global, "_torch_tpu", False):
        return

    def install_global(self, prefix, value):
        name = bytecode_transformation.unique_id(prefix)
        while name in self.global_scope:
            name = bytecode_transformation.unique_id(prefix)
        self.install_global_unsafe(name, value)
        return name

    install_global._torch_tpu = True
    cls.install_global = install_global


def _install_dynamo_dir() -> None:
    from torch._dynamo import package
    cls = type(package.DynamoCache)
    if getattr(cls.path_prefix, "_torch_tpu", False):
        return
    orig = cls.path_prefix

    def path_prefix(self):
        d = getattr(_local, "dynamo_dir", None)
        return d if d else orig(self)

    path_prefix._torch_tpu = True
    cls.path_prefix = path_prefix


@contextlib.contextmanager
def precompile_scope(backend):
    """Dynamo's caching precompile on (a process-wide Dynamo switch: on only
    while a model compiled by TpuBackend.compile(..., dynamo cache) is being
    wrapped or called), its packages in dynamo_cache_dir(), and our graph
    cache on. Dynamo logs a warning per guard it drops for precompile: quiet."""
    import logging
    _install_dynamo_dir()
    _install_guard_pickling()
    _install_package_module_fix()
    _install_module_loads()
    _install_property_sources()
    _install_unique_globals()
    prev = getattr(_local, "dynamo_dir", None)
    _local.dynamo_dir = dynamo_cache_dir()
    guards_log = logging.getLogger("torch._dynamo.guards")
    level = guards_log.level
    guards_log.setLevel(logging.ERROR)
    try:
        with torch._dynamo.config.patch(caching_precompile=True), enabled(backend):
            yield
    finally:
        guards_log.setLevel(level)
        _local.dynamo_dir = prev


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
