"""torch.compile's internals: what torch 2.14's compile stack offers no hook
for that ``torch.compile(backend="tpu")`` needs. Every patch here is inert
unless this backend is at work: it consults :data:`scope`, which
torch_tpu/_compile_cache.py sets only while the backend compiles or loads
(or, for the Inductor route, a graph holds tpu tensors).

AOTAutograd's cache (``torch._functorch._aot_autograd.autograd_cache``),
applied on import like the library patches:

* ``AOTAutogradCache._get_tmp_dir``: the cache directory is a process-wide
  setting of Inductor's; ours lives in ``$TORCH_TPU_CACHE_DIR`` so tpu
  entries never mix with Inductor's. Retire when AOTAutograd takes a cache
  directory per compile (a ``cache_dir`` on the compiler or its config).
* ``AOTAutogradCacheDetails._init_fx_graph_hash_details``: the key's
  Inductor part (its configs, a hash of torch's sources, every registered
  code generator: seconds per process) means nothing for a graph Inductor
  never sees; for this backend it is torch's and Python's versions plus
  torch_tpu's tag. Retire when a ``SerializableAOTDispatchCompiler`` can
  supply its own key details.

Dynamo's caching precompile (``torch._dynamo.package``, ``.guards``,
``.codegen``, ``.output_graph``), applied on first use of
``TpuBackend(dynamo_cache=True)`` only: four gaps that transformers' models
hit, and the package directory.

* ``DynamoCache.path_prefix``: packages in our directory, per torch_tpu tag.
  Retire with a per-call package directory in ``torch._dynamo.package``.
* ``GuardsStatePickler.reducer_override``: the original of a decorated
  function (transformers' ``@can_return_tuple`` forwards) is not what its
  name resolves to and pickles as ``_Missing``; it is saved as the name plus
  the number of ``__wrapped__`` steps. Retire when Dynamo follows
  ``__wrapped__`` when pickling guard sources.
* ``CompilePackage.initialize``: records the module a decorator's wrapper
  code runs in, not the ``__module__`` that ``functools.wraps`` copied.
  Retire when the package uses ``fn.__globals__["__name__"]``.
* ``PyCodegen.create_load_python_module``: modules the generated code loads
  by id go through Dynamo's recorded import aliases. Retire when packages
  record those globals.
* ``package._get_code_source``: a property getter compiled as a frame is
  named ``<class>.<property>`` plus ``fget.__code__``. Retire when packages
  resolve property accessors.
* ``OutputGraph.install_global``: a recompile after a loaded package skips
  global names the package already installed. Retire when the counter
  behind ``unique_id`` accounts for names installed by a package load.

torch itself (``torch``):

* ``_TorchCompileInductorWrapper.__call__``: ``torch.compile`` with no
  backend (Inductor) hands graphs that use tpu tensors to the registered
  router (dynamo.py's backend); Inductor's own ``tpu`` code generator is
  Pallas for Google TPUs and cannot drive this runtime. Every other graph
  goes to Inductor untouched. Retire when Inductor dispatches per device to
  a backend registered for PrivateUse1.

Versions: ``SUPPORTED``, checked by torch_tpu.integrations (outside it the
patches are not applied, with one warning).
"""
import functools
import importlib
import inspect
import sys
import threading
import types

SUPPORTED = ("2.14", "2.15")

# Set by torch_tpu/_compile_cache.py while the tpu backend compiles or loads:
#   aot_dir     the AOTAutograd cache's directory (None: not ours, patches inert)
#   key_tag     callable -> the tag of torch_tpu's part of the key
#   dynamo_dir  Dynamo's package directory during a precompile scope
scope = threading.local()

_router = None  # fn(gm, example_inputs) -> compiled, or None when it is not a tpu graph


def set_inductor_router(router) -> None:
    """Where torch.compile's default backend sends graphs: ``router(gm,
    inputs)`` returns the compiled graph, or None to let Inductor compile."""
    global _router
    _router = router


def _marked(fn):
    fn._torch_tpu = True
    return fn


def _is_ours(fn) -> bool:
    return getattr(fn, "_torch_tpu", False)


# ---- AOTAutograd's cache -----------------------------------------------------------------------


def patch_autograd_cache(module) -> None:
    cache, details = module.AOTAutogradCache, module.AOTAutogradCacheDetails
    if not _is_ours(cache._get_tmp_dir):
        orig_tmp_dir = cache._get_tmp_dir.__func__

        @_marked
        def _get_tmp_dir(cls):
            d = getattr(scope, "aot_dir", None)
            return d if d else orig_tmp_dir(cls)

        cache._get_tmp_dir = classmethod(_get_tmp_dir)
    if not _is_ours(details._init_fx_graph_hash_details):
        orig_details = details._init_fx_graph_hash_details

        @_marked
        def _init_fx_graph_hash_details(self, gm, example_inputs, fx_config):
            if getattr(scope, "aot_dir", None) is None:
                return orig_details(self, gm, example_inputs, fx_config)
            import torch
            self.gm = gm
            self.example_inputs = list(example_inputs)
            self.cache_key_tag = scope.key_tag()
            self.versions = (torch.__version__, sys.version, torch.version.git_version)

        details._init_fx_graph_hash_details = _init_fx_graph_hash_details


# ---- Dynamo's caching precompile ------------------------------------------------------------------


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
    (``functools.wraps``) replaced under its own name, reached from the
    decorated one through ``__wrapped__``; None otherwise."""
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


def patch_guards(module) -> None:
    cls = module.GuardsStatePickler
    orig = cls.reducer_override
    if _is_ours(orig):
        return

    @_marked
    def reducer_override(self, obj):
        if inspect.isfunction(obj):
            path = _wrapped_path(obj)
            if path is not None:
                return _unpickle_wrapped_function, path
        return orig(self, obj)

    cls.reducer_override = reducer_override


def patch_package(module) -> None:
    prefix_cls = type(module.DynamoCache)
    if not _is_ours(prefix_cls.path_prefix):
        orig_prefix = prefix_cls.path_prefix

        @_marked
        def path_prefix(self):
            d = getattr(scope, "dynamo_dir", None)
            return d if d else orig_prefix(self)

        prefix_cls.path_prefix = path_prefix

    cls = module.CompilePackage
    if not _is_ours(cls.initialize):
        orig_init = cls.initialize

        @_marked
        def initialize(self, fn, dynamo=None, ignore_inlined_sources=False):
            orig_init(self, fn, dynamo, ignore_inlined_sources)
            f = self._innermost_fn
            g = getattr(f, "__globals__", None) or {}
            name = g.get("__name__")
            entry = self._codes.get(getattr(f, "__code__", None))
            if (dynamo is None and entry is not None and name and name != entry.python_module
                    and getattr(sys.modules.get(name), "__dict__", None) is g):
                entry.python_module = name

        cls.initialize = initialize

    if not _is_ours(module._get_code_source):
        orig_source = module._get_code_source

        @_marked
        def _get_code_source(code):
            try:
                return orig_source(code)
            except module.PackageError:
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

        module._get_code_source = _get_code_source


def patch_codegen(module) -> None:
    cls = module.PyCodegen
    orig = cls.create_load_python_module
    if _is_ours(orig):
        return

    @_marked
    def create_load_python_module(self, mod):
        tx = self.tx
        if (isinstance(mod, types.ModuleType) and getattr(tx, "package", None) is not None
                and sys.modules.get(mod.__name__) is mod and hasattr(tx, "import_source")):
            return self.create_load_global(tx.import_source(mod.__name__).global_name, add=True)
        return orig(self, mod)

    cls.create_load_python_module = create_load_python_module


def patch_output_graph(module) -> None:
    cls = module.OutputGraph
    if _is_ours(cls.install_global):
        return
    from torch._dynamo import bytecode_transformation

    @_marked
    def install_global(self, prefix, value):
        name = bytecode_transformation.unique_id(prefix)
        while name in self.global_scope:
            name = bytecode_transformation.unique_id(prefix)
        self.install_global_unsafe(name, value)
        return name

    cls.install_global = install_global


# ---- torch.compile's default backend -------------------------------------------------------------


def patch_inductor_default(module) -> None:
    wrapper = getattr(module, "_TorchCompileInductorWrapper", None)
    call = getattr(wrapper, "__call__", None)
    if call is None or _is_ours(call):
        return

    @_marked
    @functools.wraps(call)
    def __call__(self, model_, inputs_, *args, **kwargs):
        if _router is not None:
            compiled = _router(model_, inputs_)
            if compiled is not None:
                return compiled
        return call(self, model_, inputs_, *args, **kwargs)

    wrapper.__call__ = __call__


__all__ = ["SUPPORTED", "scope", "set_inductor_router", "patch_autograd_cache", "patch_guards",
           "patch_package", "patch_codegen", "patch_output_graph", "patch_inductor_default"]
