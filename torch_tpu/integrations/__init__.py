"""Contained patches that give third-party libraries tpu support.

Some libraries choose a device from a fixed list of known back-ends
(accelerate's ``PartialState``, safetensors' device parser) and so never
pick ``tpu``. Each such library has one module here, which

* declares the versions it was written and tested against
  (``SUPPORTED``, a ``(low, high)`` pair: ``low <= version < high``);
* patches the fewest functions that make the library's ordinary code work
  on tpu, each wrapper naming the upstream change that would retire it;
* is applied, one part per library module it patches, as soon as that
  module has finished executing (a post-import hook), or at once if it was
  imported before torch_tpu; no user code changes.

Parts hook the module that defines the patched function, not the
library's top-level package: torch's device-backend autoload imports
torch_tpu while a library's ``__init__`` is still running (accelerate
imports torch first), when the rest of the library does not exist yet.

A library outside its supported range is left unpatched, with one warning
naming the range; ``status()`` reports what was applied, skipped or failed.
``TORCH_TPU_INTEGRATIONS=0`` turns every patch off.
"""
import importlib
import importlib.abc
import importlib.util
import os
import sys
import warnings

# library module -> (submodule of this package, its function that patches it)
_TARGETS = {
    "accelerate.state": ("accelerate", "patch_state"),
    "accelerate.utils.modeling": ("accelerate", "patch_modeling"),
    "accelerate.accelerator": ("accelerate", "patch_accelerator"),
    "safetensors": ("safetensors", "patch_package"),
    "safetensors.torch": ("safetensors", "patch_torch"),
    "torch.nn.attention.flex_attention": ("torch_internals", "patch_flex_attention"),
    "torch.distributed.rendezvous": ("torch_internals", "patch_rendezvous"),
    "ray.train.v2.api.config": ("ray_train", "patch_config"),
    "torch._functorch._aot_autograd.autograd_cache": ("torch_compile", "patch_autograd_cache"),
}

# Parts applied only when torch_tpu asks (apply()), not on import: torch.compile
# internals needed only once the tpu backend is in use.
_ON_DEMAND = {
    "torch": ("torch_compile", "patch_inductor_default"),
    "torch._dynamo.package": ("torch_compile", "patch_package"),
    "torch._dynamo.guards": ("torch_compile", "patch_guards"),
    "torch._dynamo.codegen": ("torch_compile", "patch_codegen"),
    "torch._dynamo.output_graph": ("torch_compile", "patch_output_graph"),
}

# library -> "applied <version>" | "skipped: <why>" | "failed: <why>"
_status = {}
# library modules whose part has run (applied, skipped or failed)
_done = set()
# library modules found half-imported by install(): applied at the next import
_pending = set()


def status() -> dict:
    """What each integration did in this process, by library name."""
    return dict(_status)


def _version_tuple(text: str) -> tuple:
    parts = []
    for piece in text.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _initializing(module) -> bool:
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def apply(name: str) -> bool:
    """Applies the part for library module ``name`` (imported first; an
    on-demand part, or an import-time one not yet applied), once. Whether
    it is in place (False: skipped or failed, with a warning)."""
    if os.environ.get("TORCH_TPU_INTEGRATIONS", "1") == "0":
        return False
    importlib.import_module(name)
    _apply(name)
    return _status.get(name.partition(".")[0], "").startswith("applied")


def _apply(name: str) -> None:
    """Runs the part that patches library module ``name`` (once)."""
    if name in _done:
        return
    _done.add(name)
    _pending.discard(name)
    library = name.partition(".")[0]
    if _status.get(library, "applied").startswith(("skipped", "failed")):
        return  # one verdict per library: an earlier part was refused
    patcher_name, part = _TARGETS[name] if name in _TARGETS else _ON_DEMAND[name]
    patcher = importlib.import_module(f"{__name__}.{patcher_name}")
    version = str(getattr(sys.modules.get(library), "__version__", "0"))
    low, high = patcher.SUPPORTED
    if not (_version_tuple(low) <= _version_tuple(version) < _version_tuple(high)):
        _status[library] = f"skipped: {library} {version} is outside the tested range [{low}, {high})"
        warnings.warn(f"torch_tpu: {library} {version} is outside the range its tpu integration "
                      f"was tested with ([{low}, {high})); it is not patched, so {library} may "
                      "not see tpu devices", RuntimeWarning, stacklevel=3)
        return
    try:
        getattr(patcher, part)(sys.modules[name])
    except Exception as exc:  # a library change we did not foresee: say so, do not break the import
        _status[library] = f"failed: {name}: {type(exc).__name__}: {exc}"
        warnings.warn(f"torch_tpu: patching {name} ({library} {version}) for tpu failed ({exc}); "
                      f"{library} may not see tpu devices", RuntimeWarning, stacklevel=3)
        return
    _status[library] = f"applied {version}"


def _apply_pending() -> None:
    for name in list(_pending):
        module = sys.modules.get(name)
        if module is not None and not _initializing(module):
            _apply(name)


class _Loader(importlib.abc.Loader):
    """Runs the real loader, then the library's patch."""

    def __init__(self, inner, name):
        self._inner, self._name = inner, name

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        _apply(self._name)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loader of each target library's top-level module."""

    def find_spec(self, fullname, path=None, target=None):
        if _pending:
            _apply_pending()
        if fullname not in _TARGETS or fullname in _done:
            return None
        sys.meta_path.remove(self)  # find the real spec without finding ourselves
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _Loader(spec.loader, fullname)
        return spec


def replace_everywhere(old, new) -> None:
    """Points every module attribute bound to ``old`` (a function imported
    by name into other modules) at ``new``."""
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not namespace:
            continue
        for key, value in list(namespace.items()):
            if value is old:
                namespace[key] = new


def install() -> None:
    """Patches the target libraries already imported and hooks the others."""
    if os.environ.get("TORCH_TPU_INTEGRATIONS", "1") == "0":
        return
    for name in _TARGETS:
        module = sys.modules.get(name)
        if module is not None:
            if _initializing(module):
                _pending.add(name)
            else:
                _apply(name)
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
