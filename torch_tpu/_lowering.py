"""Lowering one ATen graph to the runtime: what ``torch.compile(backend="tpu")``
runs for each forward, backward or inference graph AOTAutograd hands over.

A lowered graph (:class:`Lowered`) runs the graph's generated Python code
under DEFER_AND_FUSE on the calling thread, so every ATen call becomes one
node of the stream's pending graph and the graph is flushed as one program
at its end (the same graph IR and fusion compiler as DEFER_AND_FUSE eager).
It calls each op on its C++ entry (``OpOverload._op``) instead of through
``torch.ops.aten.<op>.<overload>``: :func:`graph_code` lets FX generate the
code with each overload standing in as a :class:`DirectOp` global, and
:func:`forward_from_code` binds those globals to the entries (~0.5 us an op
less: four attribute lookups and OpOverload.__call__'s Python frame).

Layering: dynamo.py (the backend, registration) and _compile_cache.py (the
on-disk cache) both build on this module; it imports neither. The backend
that a graph loaded outside any compile reports to is registered here by
dynamo.py (:func:`set_default_backend`).
"""
import functools
import importlib
import sys
import types

import torch

_DEFER = None  # EagerMode.DEFER_AND_FUSE, set by Lowered
_default_backend = None


def set_default_backend(backend) -> None:
    """The backend whose stats a graph loaded from the cache outside a
    compile (a deep copy, a later load) reports to (dynamo.py's default)."""
    global _default_backend
    _default_backend = backend


def default_backend():
    return _default_backend


# ---- which ops the runtime runs ----------------------------------------------------------------


def op_name(op) -> str:
    """'add.Tensor' / 'relu' (the spelling of torch_tpu.native_ops(), '.default' dropped)."""
    name = op.name()
    return name.split("::", 1)[1] if "::" in name else name


@functools.lru_cache(maxsize=1)
def native_names() -> frozenset:
    import torch_tpu
    return frozenset(n[:-len(".default")] if n.endswith(".default") else n
                     for n in torch_tpu.native_ops())



_KERNEL_KEYS = ("PrivateUse1", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
                "CompositeExplicitAutogradNonFunctional")


def non_native_ops(gm) -> list:
    """ATen ops of the graph with neither a native tpu kernel nor a tpu or
    composite registration: they run through the CPU fallback."""
    native, out = native_names(), []
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            aten = node.target.namespace == "aten"
            name = op_name(node.target) if aten else node.target.name()
            if ((not aten or name not in native) and name not in out
                    and not any(has(node.target.name(), k) for k in _KERNEL_KEYS)):
                out.append(name)
    return out


def views_to_reshapes(gm) -> None:
    """The traced graph assumes the strides of PyTorch's meta functions (e.g.
    elementwise results in their inputs' permuted layout, so a later
    ``.contiguous()`` was traced away); the runtime's kernels may return
    another layout of the same values. Every ``view`` becomes ``reshape``:
    the same view wherever one exists, a copy only where ``view`` would fail."""
    aten = torch.ops.aten
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in (aten.view.default, aten._unsafe_view.default):
            node.target = aten.reshape.default
            changed = True
    if changed:
        gm.recompile()


# ---- the generated code, each op called on its C++ entry -------------------------------------


class DirectOp:
    """Stands for one operator overload in a lowered graph's code. FX gives an
    object of a module outside torch a global of its own in the generated
    code (an overload of torch's would be spelled ``torch.ops.ns.op.ovl``);
    :func:`forward_from_code` binds that global to the overload's C++ entry.
    Called directly (debug code), it calls the overload."""

    __slots__ = ("overload", "__name__")

    def __init__(self, overload):
        self.overload = overload
        self.__name__ = overload.name().replace("::", "_").replace(".", "_")

    def __call__(self, *args, **kwargs):
        return self.overload(*args, **kwargs)


DirectOp.__module__ = __name__  # torch_tpu._lowering: not torch's, so FX names a global
_direct_ops = {}


def _direct(target):
    """The DirectOp of an overload whose C++ entry can be called directly
    (not one with a Python dispatcher), else None."""
    if (not isinstance(target, torch._ops.OpOverload)
            or getattr(target, "_pyobj_dispatcher", None) is not None):
        return None
    op = _direct_ops.get(target)
    if op is None:
        op = _direct_ops[target] = DirectOp(target)
    return op


def graph_code(gm):
    """(source, globals, attributes) of the graph's generated forward with
    each direct-callable op a DirectOp global, written as ``("op", name)``;
    other globals as ``("module", name)`` or ``("value", object)``; the
    attributes its ``get_attr`` nodes read. None where the graph calls
    submodules or reads nested attributes (its GraphModule runs it then)."""
    attrs = {}
    for n in gm.graph.nodes:
        if n.op == "call_module" or (n.op == "get_attr" and "." in n.target):
            return None
        if n.op == "get_attr":
            attrs[n.target] = getattr(gm, n.target)
    swapped = []
    try:
        for n in gm.graph.nodes:
            op = _direct(n.target) if n.op == "call_function" else None
            if op is not None:
                swapped.append((n, n.target))
                n.target = op
        pc = gm.graph.python_code("self")
    finally:
        for n, target in swapped:
            n.target = target
    glob = {}
    for k, v in pc.globals.items():
        if isinstance(v, DirectOp):
            glob[k] = ("op", v.overload.name())
        elif isinstance(v, types.ModuleType):
            glob[k] = ("module", v.__name__)
        else:
            glob[k] = ("value", v)
    return pc.src, glob, attrs


def _overload(name: str):
    """torch.ops.<ns>.<op>.<overload> from its name ('aten::add.Tensor')."""
    ns, _, rest = name.partition("::")
    op, _, ovl = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, ns), op), ovl or "default")


def forward_from_code(code):
    """The callable forward(*inputs) of graph_code's result: its source
    executed with the ops bound to their C++ entries."""
    src, glob, attrs = code
    g = {}
    for k, (how, v) in glob.items():
        if how == "op":
            g[k] = _overload(v)._op
        elif how == "module":
            g[k] = importlib.import_module(v)
        else:
            g[k] = v
    exec(compile(src, "<torch_tpu lowered graph>", "exec"), g)  # noqa: S102  (FX's code)
    return functools.partial(g["forward"], types.SimpleNamespace(**attrs))


# ---- one lowered graph -------------------------------------------------------------------------


class Lowered:
    """One ATen graph lowered to the runtime: called (boxed: one list of
    arguments) it records the graph's ops into this thread's pending graph
    under DEFER_AND_FUSE and flushes them as one program when the graph ends
    (unless the caller is itself deferring: then the ops join its graph)."""

    def __init__(self, gm, kind, backend, rewrite=True):
        # in the instance's __dict__: Dynamo's disable() wrapper of the
        # backward copies it (functools.wraps), so both are called boxed
        self._boxed_call = True
        if rewrite:
            views_to_reshapes(gm)
        self.gm, self.kind, self.backend = gm, kind, backend
        # the generated straight-line code (no module hooks), ops called directly
        code = graph_code(gm)
        self.forward = forward_from_code(code) if code is not None else gm.forward
        self.nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")
        self.non_native = non_native_ops(gm)
        self._init_mode()

    @classmethod
    def from_code(cls, forward, kind, backend, nodes, non_native, gm_getter):
        """A graph loaded from the on-disk cache as its generated code (its
        GraphModule, for debug output only, is loaded by gm_getter on use)."""
        self = cls.__new__(cls)
        self._boxed_call = True
        self._gm_getter, self.kind, self.backend = gm_getter, kind, backend
        self.forward, self.nodes, self.non_native = forward, nodes, list(non_native)
        self._init_mode()
        return self

    @property
    def gm(self):
        if "_gm" not in self.__dict__:
            self._gm = self._gm_getter()
        return self._gm

    @gm.setter
    def gm(self, value):
        self._gm = value

    def _init_mode(self):
        from torch_tpu._internal import execution_mode
        global _DEFER
        _DEFER = execution_mode.EagerMode.DEFER_AND_FUSE
        self._mode = execution_mode
        self._replay = execution_mode._C.Replay() if self.backend.replay_enabled() else None

    def __call__(self, *args):
        # AOTAutograd calls it boxed: one list, ours to clear, so inputs die
        # as early as possible. (Graph inputs are tensors and numbers, never
        # lists: a direct unboxed call is told apart.)
        if len(args) == 1 and type(args[0]) is list:
            lst = args[0]
            args = tuple(lst)
            lst.clear()
        self.backend.stats["calls"] += 1
        em = self._mode
        if em.get_eager_mode() is _DEFER:  # the caller defers: the ops join its graph
            return self._run(args)
        # set_eager_mode(DEFER_AND_FUSE) inlined (this is every call's overhead)
        stack = getattr(em._local, "stack", None)
        if stack is None:
            stack = em._local.stack = []
        stack.append(_DEFER)
        em._apply_thread(_DEFER)
        try:
            return self._run(args)
        finally:
            stack.pop()
            em._apply_thread(stack[-1] if stack else None)
            em._C.flush("mode_switch")

    def _run(self, args):
        """The graph's results: replayed from a capture of an earlier call
        with inputs laid out alike, else computed by the graph's code (and
        captured, while captures of this graph keep succeeding)."""
        replay = self._replay
        if replay is None:
            return self.forward(*args)
        out = replay.run(args)
        if out is not None:
            self.backend.stats["replays"] += 1
            return out
        if not replay.begin(args):
            return self.forward(*args)
        try:
            out = self.forward(*args)
        except BaseException:
            replay.abort()
            raise
        why = replay.end(out)
        if why is not None and self.backend.debug:
            print(f"[torch_tpu.compile] {self.kind} graph not replayable: {why}", file=sys.stderr)
        return out
