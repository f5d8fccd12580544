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

Graphs holding foreach ops (a compiled optimizer step) are rewritten first
(:func:`split_foreach`, :func:`chain_by_parameter`, :func:`write_into_inputs`)
so that each parameter's update is recorded as one chain that writes its
results in place, which the fusion compiler runs as one fused kernel.

Layering: dynamo.py (the backend, registration) and _compile_cache.py (the
on-disk cache) both build on this module; it imports neither. The backend
that a graph loaded outside any compile reports to is registered here by
dynamo.py (:func:`set_default_backend`).
"""
import functools
import importlib
import operator
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


# ---- foreach graphs: per-tensor chains -------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _foreach_table():
    """{foreach overload: (per-tensor overload, how)}: how names the per-element
    call: "unary" f(x_i); "scalar" f(x_i, s); "scalars" f(x_i, s_i); "list"
    f(x_i, y_i, *rest); "tensor" f(x_i, t, *rest); "ternary" f(x_i, y_i, z_i)
    with a scalar weight or value (also per element for the ScalarList forms);
    "pow_scalar" f(s, x_i). Ops absent stay whole (still correct, unsplit)."""
    aten, t = torch.ops.aten, {}

    def add(fe, one, how):
        fe_op = getattr(getattr(aten, fe, None), how[0], None)
        if fe_op is not None and one is not None:
            t[fe_op] = (one, how[1])
    for name in ("sqrt", "rsqrt", "neg", "reciprocal", "exp", "log", "abs", "sign", "sigmoid", "tanh",
                 "zero", "trunc", "floor", "ceil", "round", "frac", "expm1", "log1p", "sin", "cos"):
        add("_foreach_" + name, getattr(getattr(aten, name, None), "default", None), ("default", "unary"))
    for name in ("add", "sub", "mul", "div"):
        p = getattr(aten, name)
        add("_foreach_" + name, p.Scalar, ("Scalar", "scalar"))
        add("_foreach_" + name, p.Scalar, ("ScalarList", "scalars"))
        add("_foreach_" + name, p.Tensor, ("List", "list"))
        add("_foreach_" + name, p.Tensor, ("Tensor", "tensor"))
    add("_foreach_lerp", aten.lerp.Scalar, ("Scalar", "ternary_weight"))
    add("_foreach_lerp", aten.lerp.Scalar, ("ScalarList", "ternary_weights"))
    add("_foreach_lerp", aten.lerp.Tensor, ("List", "ternary"))
    for name in ("addcmul", "addcdiv"):
        add("_foreach_" + name, getattr(aten, name).default, ("Scalar", "ternary_value"))
        add("_foreach_" + name, getattr(aten, name).default, ("ScalarList", "ternary_values"))
    add("_foreach_pow", aten.pow.Scalar, ("ScalarAndTensor", "pow_scalar"))
    add("_foreach_pow", aten.pow.Tensor_Scalar, ("Scalar", "scalar"))
    add("_foreach_pow", aten.pow.Tensor_Tensor, ("List", "list"))
    add("_foreach_maximum", aten.maximum.default, ("List", "list"))
    add("_foreach_minimum", aten.minimum.default, ("List", "list"))
    return t


def _schema_values(node):
    """The node's arguments in its schema's order, defaults filled in."""
    out = []
    for i, a in enumerate(node.target._schema.arguments):
        if i < len(node.args):
            out.append(node.args[i])
        elif a.name in node.kwargs:
            out.append(node.kwargs[a.name])
        elif a.has_default_value():
            out.append(a.default_value)
        else:
            return None
    return out


def _element_call(how, v, i):
    """(args, kwargs) of the per-tensor call for element i."""
    if how == "unary":
        return (v[0][i],), {}
    if how == "scalar":
        return (v[0][i], v[1]), {}
    if how == "scalars":
        return (v[0][i], v[1][i]), {}
    if how in ("list", "tensor"):
        other = v[1][i] if how == "list" else v[1]
        alpha = v[2] if len(v) > 2 else 1
        return (v[0][i], other), ({} if alpha == 1 else {"alpha": alpha})
    if how == "ternary":
        return (v[0][i], v[1][i], v[2][i]), {}
    if how == "ternary_weight":
        return (v[0][i], v[1][i], v[2]), {}
    if how == "ternary_weights":
        return (v[0][i], v[1][i], v[2][i]), {}
    if how == "ternary_value":
        return (v[0][i], v[1][i], v[2][i]), ({} if v[3] == 1 else {"value": v[3]})
    if how == "ternary_values":
        return (v[0][i], v[1][i], v[2][i]), {"value": v[3][i]}
    if how == "pow_scalar":
        return (v[0], v[1][i]), {}
    raise AssertionError(how)


def split_foreach(gm) -> int:
    """Each out-of-place ``_foreach_*`` op (what AOTAutograd's
    functionalisation makes of a foreach optimizer's in-place ops) whose
    results are only indexed becomes one op per tensor: on tpu a foreach op
    runs as exactly those per-tensor ops (PyTorch's composite loop), so the
    values are the same, and the per-tensor nodes can then be ordered into
    per-parameter chains (:func:`chain_by_parameter`). Returns the number of
    foreach ops split."""
    table, graph, n_split = _foreach_table(), gm.graph, 0
    for node in list(graph.nodes):
        entry = table.get(node.target) if node.op == "call_function" else None
        if entry is None:
            continue
        one, how = entry
        v = _schema_values(node)
        lists = [x for x in (v or ()) if isinstance(x, (list, tuple))]
        if not lists or any(u.target is not operator.getitem or not isinstance(u.args[1], int)
                            for u in node.users):
            continue
        n = len(lists[0])
        vals = node.meta.get("val")
        with graph.inserting_before(node):
            parts = []
            for i in range(n):
                args, kwargs = _element_call(how, v, i)
                p = graph.call_function(one, args, kwargs)
                if isinstance(vals, (list, tuple)) and i < len(vals):
                    p.meta["val"] = vals[i]
                parts.append(p)
        for u in list(node.users):
            u.replace_all_uses_with(parts[u.args[1]])
            graph.erase_node(u)
        graph.erase_node(node)
        n_split += 1
    if n_split:
        graph.eliminate_dead_code()
        gm.recompile()
    return n_split


def _aliasing_readers(node, out):
    """Every node reading `node`'s memory: its users, and through each user
    whose result may alias its input (a view), that user's readers."""
    for u in node.users:
        if u in out:
            continue
        out.add(u)
        if _may_alias(u):
            _aliasing_readers(u, out)
    return out


def _may_alias(node) -> bool:
    """Whether a node's result may share memory with an input (a view, or
    anything not an ATen overload with alias-free returns)."""
    t = node.target
    return (t is operator.getitem or not isinstance(t, torch._ops.OpOverload)
            or any(r.alias_info is not None for r in t._schema.returns))


def chain_by_parameter(gm) -> bool:
    """Orders a functionalised optimizer graph (per-tensor ops, then one
    ``copy_`` of each updated value into its input) chain by chain: each
    update's whole chain (its step count, moments, parameter), and each
    ``copy_`` into an input right after the last node reading that input and
    its new value exist, so the runtime records one parameter's nodes
    together and the fusion compiler makes each chain one fused kernel (as
    DEFER_AND_FUSE does for the eager step; PyTorch's graph lists each
    foreach op's per-tensor nodes together and every ``copy_`` at the end).
    Only for graphs whose only mutations are ``copy_`` into inputs (each at
    most once, its result unused) and that draw no random numbers: the
    reordered graph then computes what the traced one does. Returns whether
    it reordered."""
    graph = gm.graph
    copies, dsts = [], set()
    for n in graph.nodes:
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
            continue
        if torch.Tag.nondeterministic_seeded in n.target.tags:
            return False
        if n.target is torch.ops.aten.copy_.default:
            dst = n.args[0]
            if (not isinstance(dst, torch.fx.Node) or dst.op != "placeholder" or dst in dsts
                    or n.users or n.kwargs.get("non_blocking")):
                return False
            dsts.add(dst)
            copies.append(n)
        elif n.target._schema.is_mutable:
            return False
    if not copies:
        return False
    # a copy_ into an input waits for every other reader of that input
    gate = {c: _aliasing_readers(c.args[0], set()) - {c} for c in copies}
    if any(r.op != "call_function" for g in gate.values() for r in g):
        return False  # an input the graph also returns: keep the traced order
    waiting = {}  # node -> copies whose gate or source includes it
    for c in copies:
        for d in gate[c] | {c.args[1]}:
            if isinstance(d, torch.fx.Node):
                waiting.setdefault(d, []).append(c)
    done, order = set(), []
    for n in graph.nodes:
        if n.op == "placeholder" or n.op == "get_attr":
            done.add(n)

    def deps(n):
        return list(n.all_input_nodes) + (sorted(gate[n], key=index.get) if n in gate else [])

    index = {n: i for i, n in enumerate(graph.nodes)}

    def emit(root):
        stack = [(root, False)]
        while stack:
            n, expanded = stack.pop()
            if n in done:
                continue
            if not expanded:
                stack.append((n, True))
                stack.extend((d, False) for d in reversed(deps(n)) if d not in done)
                continue
            done.add(n)
            order.append(n)
            for c in waiting.get(n, ()):  # copies this node was the last to wait for
                if c not in done and all(d in done for d in deps(c)):
                    stack.append((c, False))

    for c in copies:
        emit(c)
    out = next(n for n in graph.nodes if n.op == "output")
    for n in graph.nodes:  # what no copy_ needs: the outputs' chains, then the rest
        if n.op == "call_function" and n not in done:
            emit(n)
    for n in order:
        out.prepend(n)
    graph.lint()
    gm.recompile()
    return True


def _out_overload(op):
    """The ``out=`` overload of a functional overload (its arguments plus
    ``out``), or None."""
    names = [a.name for a in op._schema.arguments]
    for cand in (op._overloadname + "_out", "out"):
        o = getattr(op.overloadpacket, cand, None)
        if o is not None and [a.name for a in o._schema.arguments] == names + ["out"]:
            return o
    return None


def _same_layout(a, b) -> bool:
    va, vb = a.meta.get("val"), b.meta.get("val")
    return (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor) and va.dtype == vb.dtype
            and va.device == vb.device and tuple(va.shape) == tuple(vb.shape)
            and tuple(va.stride()) == tuple(vb.stride()))


def write_into_inputs(gm) -> int:
    """After :func:`chain_by_parameter`: each ``copy_(input, value)`` whose
    value an op computes after the input's last other reader becomes that
    op's ``out=`` form writing the input (AdamW's ``lerp`` into exp_avg,
    ``addcmul`` into exp_avg_sq, ``addcdiv`` into the parameter), as the
    eager step's in-place ops do; later readers of the value read the input,
    which holds it. The fusion compiler fuses such a write into its chain;
    it runs a ``copy_`` alone. Returns the number of copies removed."""
    graph, n_done = gm.graph, 0
    index = {n: i for i, n in enumerate(graph.nodes)}
    for c in [n for n in graph.nodes if n.target is torch.ops.aten.copy_.default]:
        dst, src = c.args[0], c.args[1]
        if (not isinstance(src, torch.fx.Node) or src not in index or src.op != "call_function"
                or not isinstance(src.target, torch._ops.OpOverload) or "out" in src.kwargs
                or not _same_layout(src, dst)):
            continue
        out_op = _out_overload(src.target)
        if out_op is None:
            continue
        readers = _aliasing_readers(dst, set()) - {c, src}
        if any(index[r] > index[src] for r in readers):
            continue  # the input's old value is read after the new one exists
        if any(a in readers and _may_alias(a) for a in src.all_input_nodes):
            continue  # the op reads the input through a view while writing it
        if dst in src.all_input_nodes and torch.Tag.pointwise not in src.target.tags:
            continue  # out= may alias an input only element for element
        if any(u.op == "output" for u in src.users):
            continue  # a returned value stays its own tensor, not the input
        with graph.inserting_before(src):
            w = graph.call_function(out_op, src.args, {**src.kwargs, "out": dst})
        w.meta = dict(src.meta)
        index[w] = index[src]
        graph.erase_node(c)
        src.replace_all_uses_with(w)
        graph.erase_node(src)
        n_done += 1
    if n_done:
        graph.lint()
        gm.recompile()
    return n_done


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
            if split_foreach(gm) and chain_by_parameter(gm):
                write_into_inputs(gm)
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
