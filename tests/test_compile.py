"""Compiled mode: ``torch.compile(..., backend="tpu")`` (docs/compile.md).

Every test compares a compiled tpu run with eager (tpu or CPU) and checks
that the compiled code really ran (a compile counter, the backend's stats)
with no CPU fallback.
"""
import copy
import json
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch._dynamo.testing
import torch_tpu
from torch_tpu.tools import coverage

from conftest import TPU, assert_same, child_env, opinfo_pairs


torch._dynamo.config.cache_size_limit = 64
CompileCounter = torch._dynamo.testing.CompileCounterWithBackend


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(tmp_path_factory):
    """The on-disk compile cache of this module's tests (and their children)."""
    import os
    old = os.environ.get("TORCH_TPU_CACHE_DIR")
    os.environ["TORCH_TPU_CACHE_DIR"] = str(tmp_path_factory.mktemp("tpu_compile_cache"))
    yield
    if old is None:
        os.environ.pop("TORCH_TPU_CACHE_DIR", None)
    else:
        os.environ["TORCH_TPU_CACHE_DIR"] = old


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    torch.tpu.synchronize()
    torch_tpu.reset_counts()
    mode = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("silent")
    yield
    torch_tpu.set_fallback_mode(mode)
    torch._dynamo.reset()


def _no_fallbacks():
    torch.tpu.synchronize()
    assert torch_tpu.fallback_counts() == {}, torch_tpu.fallback_counts()


# ---- registration ------------------------------------------------------------------------------


def test_backend_and_device_interface_registered():
    from torch._dynamo.backends.registry import lookup_backend
    from torch._dynamo.device_interface import get_interface_for_device
    assert lookup_backend("tpu") is torch_tpu.dynamo.tpu_backend
    iface = get_interface_for_device("tpu")
    assert iface.device_count() == torch.tpu.device_count()
    assert iface.current_device() == torch.tpu.current_device()
    assert isinstance(iface.current_stream(), torch.Stream)
    iface.synchronize()


_LAZY_REGISTRATION = r'''
import sys, importlib.metadata
import torch
import torch_tpu
assert "torch._dynamo" not in sys.modules, "importing torch_tpu imported torch._dynamo"
from torch._dynamo.backends import registry
from torch._dynamo.device_interface import get_interface_for_device
assert registry.lookup_backend("tpu") is torch_tpu.dynamo.tpu_backend
assert get_interface_for_device("tpu").__module__ == "torch_tpu.dynamo"
print("ok")
'''

_ENTRY_POINT = r'''
import sys, importlib.metadata
import torch._dynamo
from torch._dynamo.backends import registry
assert "torch_tpu" not in sys.modules
registry._BACKENDS["tpu"] = importlib.metadata.EntryPoint(
    name="tpu", value="torch_tpu.dynamo:tpu_backend", group="torch_dynamo_backends")
fn = registry.lookup_backend("tpu")  # loads torch_tpu through the entry point
import torch_tpu
assert fn is torch_tpu.dynamo.tpu_backend
from torch._dynamo.device_interface import get_interface_for_device
assert get_interface_for_device("tpu").__module__ == "torch_tpu.dynamo"
x = torch.randn(3, device="tpu")
assert torch.equal(torch.compile(lambda t: t * 2 + 1, backend="tpu")(x).cpu(), (x * 2 + 1).cpu())
print("ok")
'''


@pytest.mark.parametrize("code,autoload", [(_LAZY_REGISTRATION, "1"), (_ENTRY_POINT, "0")],
                         ids=["import-then-dynamo", "entry-point-first"])
def test_registration_paths(code, autoload):
    """import torch (autoloading torch_tpu) does not import torch._dynamo; the
    backend and interface appear once it is imported; the torch_dynamo_backends
    entry point loading torch_tpu first registers the backend once."""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=child_env(TORCH_DEVICE_BACKEND_AUTOLOAD=autoload))
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]


def test_decompositions_keep_native_ops_whole():
    d = torch_tpu.dynamo.decompositions()
    aten = torch.ops.aten
    for op in (aten.gelu.default, aten.native_layer_norm.default, aten._softmax.default,
               aten.native_dropout.default, aten.addmm.default):
        assert op not in d, op
    from torch._decomp import core_aten_decompositions
    core = core_aten_decompositions()
    native = set(torch_tpu.native_ops())
    kept = [op for op in core if op in d]
    assert kept and all(torch_tpu._lowering.op_name(op) not in native for op in kept)


def test_lowering_is_one_deferred_graph(strict_global):
    """An ATen graph runs as one pending graph, flushed at its end: the GEMM
    touches 3 x 512 x 512 elements, over the pipeline cut's threshold, but
    the cut waits for its pointwise consumers, and none other follows them;
    the fusion compiler folds them into the GEMM as its epilogue."""
    def f(x, w, b):
        return F.gelu(x @ w + b) * 0.5 + x

    args = [torch.randn(512, 512), torch.randn(512, 512), torch.randn(512)]
    cnt = CompileCounter("tpu")
    cf = torch.compile(f, backend=cnt, fullgraph=True)
    dev = [a.to(TPU) for a in args]
    cf(*dev)  # compiles
    torch.tpu.synchronize()
    torch_tpu.reset_defer_metrics()
    out = cf(*dev)
    torch.tpu.synchronize()
    m = torch_tpu.defer_metrics()
    assert cnt.frame_count == 1
    assert m["flushes"] == 1 and m["nodes_recorded"] >= 4, m
    assert m["flushes_by_reason"]["pipeline"] == 0, m
    assert m["flushes_by_reason"]["mode_switch"] == 1, m
    assert m["cache_hits"] == 1 and m["programs_compiled"] == 0, m
    assert m["gemm_epilogues"] == 1 and m["epilogue_nodes"] >= 3, m
    assert m["fused_kernels"] >= 1 and m["elided_buffers"] >= 1, m
    assert_same(out, f(*args), atol=1e-4, rtol=1e-4)
    _no_fallbacks()


def test_lowered_code_calls_op_entries_directly():
    """The lowered graph's code calls each ATen overload on its C++ entry
    (FX generates it with DirectOp globals; no rewriting of its text), keeps
    the GraphModule's own targets, and computes what the graph computes."""
    import torch.fx as fx
    from torch_tpu import _lowering
    g = fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(torch.ops.aten.mul.Tensor, (x, x))
    g.output(g.call_function(torch.ops.aten.add.Tensor, (y, 1), {"alpha": 2}))
    gm = fx.GraphModule(torch.nn.Module(), g)
    src, glob, attrs = _lowering.graph_code(gm)
    assert sorted(v for how, v in glob.values() if how == "op") == ["aten::add.Tensor", "aten::mul.Tensor"]
    assert "torch.ops" not in src, src
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [
        torch.ops.aten.mul.Tensor, torch.ops.aten.add.Tensor]
    forward = _lowering.forward_from_code((src, glob, attrs))
    bound = {forward.func.__globals__[k] for k, (how, _) in glob.items() if how == "op"}
    assert bound == {torch.ops.aten.mul.Tensor._op, torch.ops.aten.add.Tensor._op}
    t = torch.randn(5)
    assert torch.equal(forward(t.to("tpu")).cpu(), t * t + 2)


def test_backend_debug_lists_graphs_and_fallback_ops(capfd):
    """A custom op with a CPU kernel only (and a fake implementation, which
    tracing needs) stays in the graph and takes the CPU fallback there."""
    if not torch._C._dispatch_has_kernel_for_dispatch_key("tpu_fb::affine", "Meta"):
        try:
            torch.library.register_fake("tpu_fb::affine")(lambda x: torch.empty_like(x))
        except RuntimeError:
            pass
    backend = torch_tpu.TpuBackend(debug=True)

    def f(x):
        return torch.ops.tpu_fb.affine(x.exp()) + 1  # conftest's op with a CPU kernel only

    x = torch.randn(6)
    out = torch.compile(f, backend=backend)(x.to(TPU))
    assert_same(out, x.exp() * 1.5 + 0.25 + 1, atol=1e-6, rtol=1e-6)
    err = capfd.readouterr().err
    line = next(ln for ln in err.splitlines() if ln.startswith("[torch_tpu.compile] inference graph"))
    assert line.endswith("(CPU fallback): tpu_fb::affine"), line
    assert backend.graphs == [("inference", 3, ("tpu_fb::affine",))], backend.graphs
    torch.tpu.synchronize()
    assert torch_tpu.fallback_counts() == {"tpu_fb::affine": 1}, torch_tpu.fallback_counts()


# ---- OpInfo parity through torch.compile ------------------------------------------------------------


class _CompiledOp:
    """An OpInfo whose call compiles the op with backend "tpu" when a tpu
    tensor is among the arguments (the CPU reference stays eager)."""

    def __init__(self, op, backend):
        self._op = op
        self._compiled = torch.compile(op.op, backend=backend, dynamic=False)

    def __getattr__(self, name):
        return getattr(self._op, name)

    def __call__(self, *args, **kwargs):
        flat = torch.utils._pytree.tree_leaves((args, kwargs))
        if any(isinstance(t, torch.Tensor) and t.device.type == "tpu" for t in flat):
            return self._compiled(*args, **kwargs)
        return self._op(*args, **kwargs)


OPINFO_SUBSET = ["add", "mul", "sub", "div", "where", "clamp", "exp", "tanh", "sigmoid", "sum",
                 "mean", "amax", "softmax", "nn.functional.gelu", "nn.functional.silu",
                 "nn.functional.layer_norm", "matmul", "cat", "transpose", "addmm"]


@pytest.mark.parametrize("op,dtype", opinfo_pairs(OPINFO_SUBSET, [torch.float32, torch.bfloat16]))
def test_opinfo_through_compile(op, dtype):
    cnt = CompileCounter("tpu")
    rec = coverage.check_pair(_CompiledOp(op, cnt), dtype, cap=2)
    assert rec["status"] == "pass", rec
    assert rec["fallbacks"] == {}, rec["fallbacks"]
    assert rec["passed"] > 0 and cnt.frame_count >= 1, (rec, cnt.frame_count)


# ---- no backend named, CPU code unaffected --------------------------------------------------------


def test_default_backend_runs_tpu_graphs_on_tpu():
    def f(x):
        return torch.softmax(x * 2, -1) + 1

    x = torch.randn(4, 16)
    before = dict(torch_tpu.dynamo._default.stats)
    out = torch.compile(f)(x.to(TPU))  # Inductor, the default, hands the graph over
    assert out.device.type == "tpu"
    assert_same(out, f(x), atol=1e-6, rtol=1e-6)
    assert torch_tpu.dynamo._default.stats["inference"] == before["inference"] + 1
    _no_fallbacks()


_CPU_COMPILE = r'''
import json, os, sys
import torch
if sys.argv[1] == "with":
    import torch_tpu
assert ("torch_tpu" in sys.modules) == (sys.argv[1] == "with")
from torch._dynamo.utils import counters
def f(x, y):
    return torch.nn.functional.gelu(x @ y).sum(-1) * 3 + x.mean()
g = torch.Generator().manual_seed(0)
x, y = torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)
out = torch.compile(f, backend="inductor")(x, y)
print("@@" + json.dumps({"out": out.tolist(), "stats": dict(counters["stats"]),
                         "frames": dict(counters["frames"]),
                         "inductor": sorted(k for k in counters["inductor"] if "cache" not in k)}))
'''


def test_cpu_inductor_compile_unaffected_by_import():
    """The same Inductor compile of a CPU function, in two processes (at once),
    one with torch_tpu imported and one without: same result, same counters."""
    procs = {which: subprocess.Popen(
        [sys.executable, "-c", _CPU_COMPILE, which], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=child_env(TORCH_DEVICE_BACKEND_AUTOLOAD=autoload,
                                 TORCHINDUCTOR_FORCE_DISABLE_CACHES="1"))
        for which, autoload in (("with", "1"), ("without", "0"))}
    res = {}
    for which, p in procs.items():
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        res[which] = json.loads(out.split("@@", 1)[1])
    assert res["with"]["out"] == res["without"]["out"]
    assert res["with"]["stats"] == res["without"]["stats"]
    assert res["with"]["frames"] == res["without"]["frames"]
    assert res["with"]["inductor"] == res["without"]["inductor"] and res["with"]["inductor"]


# ---- dynamic shapes, recompiles, graph breaks ------------------------------------------------------


def _f(x):
    return torch.relu(x) * 2 + x.sum(-1, keepdim=True)


@pytest.mark.parametrize("dynamic,frames", [(True, 1), (False, 4), (None, 2)])
def test_recompiles_on_shape_change(dynamic, frames):
    """dynamic=True: one graph for every size; dynamic=False: one per size;
    default: static, then one automatically dynamic graph."""
    cnt = CompileCounter("tpu")
    cf = torch.compile(_f, backend=cnt, dynamic=dynamic)
    for n in (3, 5, 7, 9):
        x = torch.randn(n, 6)
        assert_same(cf(x.to(TPU)), _f(x), atol=1e-6, rtol=1e-6)
    assert cnt.frame_count == frames
    _no_fallbacks()


def test_mark_dynamic_no_recompile():
    cnt = CompileCounter("tpu")
    cf = torch.compile(_f, backend=cnt)
    for n in (3, 5, 7, 11):
        x = torch.randn(n, 6)
        xt = x.to(TPU)
        torch._dynamo.mark_dynamic(xt, 0)
        assert_same(cf(xt), _f(x), atol=1e-6, rtol=1e-6)
    assert cnt.frame_count == 1
    _no_fallbacks()


def test_dynamic_graph_reuses_fused_program_across_sizes(strict_global):
    cf = torch.compile(_f, backend="tpu", dynamic=True)
    cf(torch.randn(3, 6, device=TPU))
    torch.tpu.synchronize()
    torch_tpu.reset_defer_metrics()
    for n in (5, 17, 33):
        cf(torch.randn(n, 6, device=TPU))
    torch.tpu.synchronize()
    m = torch_tpu.defer_metrics()
    assert m["programs_compiled"] == 0 and m["cache_hits"] >= 3, m


def test_graph_break_runs_pieces_between_in_eager():
    seen = []

    def f(x):
        y = x.sin() * 2
        seen.append(y.sum().item())  # a graph break: .item() and a Python side effect
        return y.cos() + 1

    cnt = CompileCounter("tpu")
    x = torch.randn(10)
    out = torch.compile(f, backend=cnt)(x.to(TPU))
    assert cnt.frame_count == 2  # the pieces before and after the break
    assert_same(out, f(x), atol=1e-6, rtol=1e-6)
    assert seen[0] == pytest.approx(seen[1], rel=1e-5)
    _no_fallbacks()


# ---- RNG, inference_mode, no_grad --------------------------------------------------------------------


def test_dropout_rng_matches_eager():
    def f(x):
        return F.dropout(x, 0.3, training=True) * 3 + F.dropout(x, 0.6, training=True)

    x = torch.randn(64, 33, device=TPU)
    torch.manual_seed(7)
    eager = [f(x).cpu() for _ in range(2)]
    cf = torch.compile(f, backend="tpu")
    torch.manual_seed(7)
    compiled = [cf(x).cpu() for _ in range(2)]
    for e, c in zip(eager, compiled):
        assert torch.equal(e, c)
    assert not torch.equal(compiled[0], compiled[1])
    _no_fallbacks()


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 8))


@pytest.mark.parametrize("ctx", [torch.no_grad, torch.inference_mode])
def test_no_grad_and_inference_mode(ctx):
    m = _mlp().to(TPU)
    cm = torch.compile(m, backend="tpu")
    x = torch.randn(5, 16)
    with ctx():
        out = cm(x.to(TPU))
        want = m(x.to(TPU))
    assert not out.requires_grad
    assert_same(out, want.cpu(), atol=1e-5, rtol=1e-5)
    _no_fallbacks()


# ---- training --------------------------------------------------------------------------------------


def test_gradients_match_cpu_autograd():
    m_cpu = _mlp()
    m = copy.deepcopy(m_cpu).to(TPU)
    backend = torch_tpu.TpuBackend()
    cm = torch.compile(m, backend=backend)
    x = torch.randn(6, 16)
    xt = x.to(TPU).requires_grad_()
    xc = x.clone().requires_grad_()
    torch_tpu.set_fallback_mode("error")
    cm(xt).pow(2).mean().backward()
    m_cpu(xc).pow(2).mean().backward()
    assert backend.stats["forward"] == 1 and backend.stats["backward"] == 1, backend.stats
    assert_same(xt.grad, xc.grad, atol=1e-5, rtol=1e-4)
    for (n, p), pc in zip(m.named_parameters(), m_cpu.parameters()):
        assert_same(p.grad, pc.grad, atol=1e-5, rtol=1e-4, msg=n)
    _no_fallbacks()


def test_training_20_steps_loss_curve_matches_eager():
    def run(compiled):
        m = _mlp().to(TPU)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        f = torch.compile(m, backend="tpu") if compiled else m
        g = torch.Generator().manual_seed(1)
        losses = []
        for _ in range(20):
            x, y = torch.randn(8, 16, generator=g).to(TPU), torch.randn(8, 8, generator=g).to(TPU)
            loss = F.mse_loss(f(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
        return losses

    eager, compiled = run(False), run(True)
    assert compiled == pytest.approx(eager, rel=1e-4, abs=1e-5)
    assert compiled[-1] < compiled[0]
    _no_fallbacks()


def test_optimizer_step_compiles():
    def params():
        torch.manual_seed(3)
        ps = [nn.Parameter(torch.randn(7, 5)), nn.Parameter(torch.randn(5))]
        for p in ps:
            p.grad = torch.randn_like(p)
        return ps

    ref = params()
    ref_opt = torch.optim.Adam(ref, lr=0.1)
    ps = [nn.Parameter(p.detach().to(TPU)) for p in params()]
    for p, r in zip(ps, ref):
        p.grad = r.grad.to(TPU)
    opt = torch.optim.Adam(ps, lr=0.1)
    cnt = CompileCounter("tpu")
    step = torch.compile(opt.step, backend=cnt)
    for _ in range(2):
        ref_opt.step()
        step()
    assert cnt.frame_count >= 1
    for p, r in zip(ps, ref):
        assert_same(p.detach(), r.detach(), atol=1e-5, rtol=1e-5)
    _no_fallbacks()


# ---- model sweep (tiny HF configs, random weights) ---------------------------------------------------


@pytest.mark.parametrize("arch", ["gpt2", "bert", "llama"])
def test_model_sweep_compiled(arch):
    """The model sweep's tiny configs: compiled forward (no_grad) against CPU
    eager, then a compiled training forward and backward against CPU autograd."""
    pytest.importorskip("transformers")
    from torch_tpu.tools import model_sweep as ms
    name, train, model, inputs = ms.build(arch)
    with torch.no_grad():
        expected = model(**inputs)
    m_tpu = copy.deepcopy(model).to(TPU)
    backend = torch_tpu.TpuBackend()
    cm = torch.compile(m_tpu, backend=backend)
    inp = ms._to(inputs, "tpu")
    with torch.no_grad():
        actual = cm(**inp)
    err, why = ms.compare(actual, expected)
    assert err <= ms.FWD_TOL, (err, why)
    assert backend.stats["inference"] >= 1, backend.stats
    if train:
        ms._loss(model(**inputs)).backward()
        ms._loss(cm(**inp)).backward()
        gerr, where = ms._grad_error(m_tpu, model)
        assert gerr <= ms.GRAD_TOL, (gerr, where)
        assert backend.stats["forward"] >= 1 and backend.stats["backward"] >= 1, backend.stats
    _no_fallbacks()


def test_generate_static_kv_cache_compiled_forward():
    """HF generate() with a static KV cache and model.forward compiled: the
    greedy tokens equal CPU eager's, and the forward compiles twice (prefill
    and decode), not once per token."""
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=256, max_position_embeddings=128)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 256, (1, 7), generator=torch.Generator().manual_seed(1))
    kw = dict(max_new_tokens=12, min_new_tokens=12, do_sample=False, pad_token_id=0,
              cache_implementation="static")
    with torch.no_grad():
        want = model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    m = model.to(TPU)
    cnt = CompileCounter("tpu")
    m.forward = torch.compile(m.forward, backend=cnt)
    with torch.no_grad():
        got = m.generate(ids.to(TPU), attention_mask=torch.ones_like(ids).to(TPU), **kw)
    assert got.shape == (1, 19) and torch.equal(got.cpu(), want)
    assert cnt.frame_count == 2, cnt.frame_count
    _no_fallbacks()


def test_sdpa_dynamic_seq_and_backward():
    """Attention traced with symbolic sequence lengths: one graph for every
    length, the runtime's attention kernel (no math fallback), gradients."""
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(
            q.shape[0], q.shape[2], -1)

    cnt = CompileCounter("tpu")
    cf = torch.compile(f, backend=cnt, dynamic=True)
    for L in (5, 9, 17):
        qkv = [torch.randn(2, 4, L, 16, requires_grad=True) for _ in range(3)]
        dev = [t.detach().to(TPU).requires_grad_() for t in qkv]
        torch_tpu.reset_counts()
        out = cf(*dev)
        assert torch_tpu.native_counts().get("_scaled_dot_product_fused_attention_overrideable", 0) == 1
        want = f(*qkv)
        assert_same(out, want, atol=1e-5, rtol=1e-4)
        out.pow(2).sum().backward()
        want.pow(2).sum().backward()
        for d, c in zip(dev, qkv):
            assert_same(d.grad, c.grad, atol=1e-4, rtol=1e-4)
    assert cnt.frame_count == 1
    _no_fallbacks()


# ---- the on-disk cache ---------------------------------------------------------------------------

_CACHED = r'''
import json, sys
import torch, torch.nn as nn
import torch_tpu
from torch._dynamo.utils import counters
if sys.argv[1] == "version":
    torch_tpu.__version__ += "+changed"
torch.manual_seed(0)
act = nn.SiLU() if sys.argv[1] == "graph" else nn.GELU()
m = nn.Sequential(nn.Linear(16, 32), act, nn.LayerNorm(32), nn.Linear(32, 8)).to("tpu")
backend = torch_tpu.TpuBackend(cache=sys.argv[2] == "on")
cm = torch.compile(m, backend=backend)
g = torch.Generator().manual_seed(1)
x = torch.randn(6, 16, generator=g).to("tpu").requires_grad_()
torch_tpu.set_fallback_mode("error")
out = cm(x)
out.pow(2).mean().backward()
with torch.no_grad():
    inf = cm(x * 2)
print("@@" + json.dumps({"stats": backend.stats, "aot": dict(counters["aot_autograd"]),
                         "out": out.tolist(), "inf": inf.tolist(), "grad": x.grad.tolist(),
                         "wgrad": m[0].weight.grad.tolist()}))
'''


def test_disk_cache_second_process(tmp_path):
    """A second process with a warm cache loads the forward, backward and
    inference graphs instead of running AOTAutograd and the lowering, with
    equal results; a changed graph or torch_tpu version misses; cache=False
    neither reads nor writes it."""
    def run(which, cache="on"):
        r = subprocess.run([sys.executable, "-c", _CACHED, which, cache], capture_output=True,
                           text=True, timeout=300, env=child_env(TORCH_TPU_CACHE_DIR=tmp_path))
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.split("@@", 1)[1])

    off = run("base", "off")
    assert off["stats"]["cache_hits"] == 0 and not off["aot"].get("autograd_cache_saved")
    assert not (tmp_path / "aotautograd").exists()
    cold = run("base")
    assert cold["stats"]["cache_hits"] == 0 and cold["aot"]["autograd_cache_saved"] == 2, cold
    warm = run("base")
    assert warm["aot"].get("autograd_cache_hit") == 2 and not warm["aot"].get("autograd_cache_miss")
    assert warm["stats"]["cache_hits"] == 3, warm["stats"]  # forward, backward, inference
    assert {k: warm["stats"][k] for k in ("forward", "backward", "inference")} == \
        {"forward": 1, "backward": 1, "inference": 1}
    for k in ("out", "inf", "grad", "wgrad"):
        assert warm[k] == cold[k] == off[k], k
    for which in ("graph", "version"):
        other = run(which)
        assert other["stats"]["cache_hits"] == 0 and other["aot"].get("autograd_cache_miss") == 2, \
            (which, other["aot"])


_DYNAMO_CACHED = r'''
import json, sys, warnings
import torch, torch.nn as nn
import torch_tpu
from torch._dynamo.utils import counters


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.n, self.b = nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 8)

    def forward(self, x):
        return self.b(self.n(torch.nn.functional.gelu(self.a(x))))


torch.manual_seed(0)
m = MLP().to("tpu")
backend = torch_tpu.TpuBackend(dynamo_cache=True)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    cm = backend.compile(m)
    x = torch.randn(6, 16, generator=torch.Generator().manual_seed(1)).to("tpu").requires_grad_()
    torch_tpu.set_fallback_mode("error")
    out = cm(x)
    out.pow(2).mean().backward()
print("@@" + json.dumps({"stats": backend.stats, "dynamo": dict(counters["dynamo_cache"]),
                         "graphs": int(counters["stats"].get("unique_graphs", 0)),
                         "out": out.tolist(), "grad": x.grad.tolist(),
                         "warnings": [str(w.message) for w in caught if "torch_tpu" in str(w.message)]}))
'''


def test_dynamo_cache_second_process_skips_tracing(tmp_path):
    """TpuBackend(dynamo_cache=True).compile(module): a second process loads
    Dynamo's package (traced bytecode, guards) and our graphs: no frame is
    traced, no graph lowered, same forward and gradients."""
    def run():
        r = subprocess.run([sys.executable, "-c", _DYNAMO_CACHED], capture_output=True, text=True,
                           timeout=300, env=child_env(TORCH_TPU_CACHE_DIR=tmp_path))
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.split("@@", 1)[1])

    cold, warm = run(), run()
    assert cold["graphs"] == 1 and cold["dynamo"].get("dynamo_cache_miss") == 1, cold
    assert cold["stats"]["dynamo_saves"] >= 1 and not cold["warnings"], cold
    assert warm["graphs"] == 0 and warm["dynamo"].get("dynamo_cache_hit") == 1, warm
    assert warm["stats"]["cache_hits"] == 2 and warm["stats"]["dynamo_hits"] == 1, warm["stats"]
    assert not warm["warnings"], warm["warnings"]
    assert warm["out"] == cold["out"] and warm["grad"] == cold["grad"]


_DYNAMO_CACHED_LLAMA = r"""
import json, sys, warnings
import torch
import torch_tpu
from torch._dynamo.utils import counters
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
m = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                 num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, max_position_embeddings=64)).to("tpu")
backend = torch_tpu.TpuBackend(dynamo_cache=True)


def step(cm, seq):
    ids = torch.randint(0, 64, (2, seq), generator=torch.Generator().manual_seed(seq)).to("tpu")
    m.zero_grad()
    out = cm(input_ids=ids, labels=ids)
    out.loss.backward()
    return [out.loss.item(), m.get_input_embeddings().weight.grad.tolist()]


res = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    cm = backend.compile(m)
    torch_tpu.set_fallback_mode("error")
    res["first"] = step(cm, 16)
    res["graphs_first"] = int(counters["stats"].get("unique_graphs", 0))
    if sys.argv[1] == "warm":  # another length: a guard fails, a recompile, right results
        res["other"] = step(cm, 12)
        res["graphs_other"] = int(counters["stats"].get("unique_graphs", 0)) - res["graphs_first"]
        res["eager_other"] = step(m, 12)
res["dynamo"] = dict(counters["dynamo_cache"])
res["stats"] = backend.stats
res["warnings"] = [str(w.message) for w in caught if "torch_tpu" in str(w.message)]
print("@@" + json.dumps(res))
"""


def test_dynamo_cache_transformers_llama_second_process(tmp_path):
    """The Dynamo package of a transformers model (its decorated forward:
    guards on the decorator's closure, code run in the decorator's module,
    a ModelOutput rebuilt through `collections`) saves and reloads: a second
    process runs a tiny Llama's training step with no Dynamo tracing and
    equal loss and gradients; another length there fails a guard and
    recompiles with eager's results."""
    pytest.importorskip("transformers")

    def run(which):
        r = subprocess.run([sys.executable, "-c", _DYNAMO_CACHED_LLAMA, which], capture_output=True,
                           text=True, timeout=300, env=child_env(TORCH_TPU_CACHE_DIR=tmp_path))
        assert r.returncode == 0, r.stderr[-3000:]
        assert "Error while creating guard" not in r.stderr, r.stderr[-3000:]
        return json.loads(r.stdout.split("@@", 1)[1])

    cold, warm = run("cold"), run("warm")
    assert cold["graphs_first"] == 1 and cold["dynamo"].get("dynamo_cache_miss") == 1, cold["dynamo"]
    assert cold["stats"]["dynamo_saves"] >= 1 and not cold["warnings"], cold["warnings"]
    assert not warm["warnings"], warm["warnings"]
    assert warm["dynamo"].get("dynamo_cache_hit") == 1, warm["dynamo"]
    assert warm["graphs_first"] == 0 and warm["stats"]["cache_hits"] == 2, warm["stats"]
    assert warm["first"] == cold["first"]
    assert warm["graphs_other"] == 1
    assert_same(torch.tensor(warm["other"][1]), torch.tensor(warm["eager_other"][1]), atol=1e-5, rtol=1e-4)
    assert abs(warm["other"][0] - warm["eager_other"][0]) < 1e-5


# ---- the benchmark script ------------------------------------------------------------------------


def test_bench_compile_smoke(tmp_path):
    """bench/bench_compile.py end to end at smoke sizes (the chains; no
    Inductor: its cold compiles are slow here): every column's first result
    matches CPU eager's, one Dynamo graph, no recompiles. No timing assertions."""
    import os
    out = tmp_path / "compile.json"
    bench = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "bench_compile.py")
    r = subprocess.run([sys.executable, bench, "--smoke", "--only", "4", "--columns",
                        "compiled,defer,strict,cpu", "--out", str(out)],
                       capture_output=True, text=True, timeout=600, env=child_env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = json.loads(out.read_text())
    assert len(d["rows"]) == 3
    for row in d["rows"]:
        assert all(v["allclose"] for v in row["check_vs_cpu"].values()), row["check_vs_cpu"]
        c = row["columns"]["compiled"]
        assert c["graphs_first_call"] == 1 and c["recompiles_timed"] == 0, c
        assert c["fallbacks"] == {} and row["columns"]["inductor"] is None
