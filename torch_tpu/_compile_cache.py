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

Entries live under ``$TORCH_TPU_CACHE_DIR/aotautograd`` (default
``~/.cache/torch_tpu``), apart from Inductor's cache: the directory is
switched only while this backend compiles. Imported on first compile only
(``torch._inductor`` is heavy).
"""
import contextlib
import functools
import hashlib
import os
import sys
import threading

import torch
from torch._functorch._aot_autograd import autograd_cache
from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
from torch._inductor.output_code import OutputCode

FORMAT = 1  # bump when TpuOutputCode's pickled form changes

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


class TpuOutputCode(OutputCode):
    """One lowered ATen graph (forward, backward or inference) as AOTAutograd's
    cache stores it: the GraphModule is pickled (its generated code and
    attributes); the runtime callable (_Lowered) is rebuilt on load."""

    def __init__(self, gm, kind, backend):
        from torch_tpu.dynamo import _Lowered
        self._boxed_call = True
        self.kind = kind
        self.lowered = _Lowered(gm, kind, backend)  # rewrites gm (views -> reshapes)
        self.gm = gm

    def __call__(self, inputs):
        return self.lowered(inputs)

    def __getstate__(self):
        d = dict(self.__dict__)
        d["lowered"] = None
        return d

    def prepare_for_serialization(self) -> None:
        self.lowered = None

    def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
        if self.lowered is None:  # loaded from the cache
            from torch_tpu.dynamo import _Lowered, _default
            backend = current_backend() or _default
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
