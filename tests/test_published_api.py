"""The published TorchTPU API names (issue 29), used as its docs and
tutorials use them, checked against the runtime state behind them."""
import json
import os
import sys
import time
import warnings

import pytest
import torch

import torch_tpu
from torch_tpu import EagerMode
from torch_tpu._internal import execution_mode as em
from torch_tpu._internal import sync

from conftest import run_python


def _delta(before, after, key):
    return after[key] - before[key]


# ---- torch_tpu.api -------------------------------------------------------------------


def test_api_tpu_device_is_the_cached_current_device():
    import torch_tpu.api as api
    api.tpu_device.cache_clear()
    with pytest.warns(DeprecationWarning, match="tpu_device"):
        dev = api.tpu_device()
    assert dev == torch.device("tpu", torch.tpu.current_device())
    assert api.tpu_device() is dev and api.tpu_device.cache_info().hits == 1
    x = torch.ones(2, device=api.tpu_device())
    assert x.device == dev
    api.tpu_device.cache_clear()
    assert api.tpu_device.cache_info().currsize == 0


def test_api_tpu_device_follows_set_device_after_cache_clear():
    r = run_python("""
        import warnings, torch, torch_tpu.api as api
        warnings.simplefilter("ignore")
        a = api.tpu_device()
        torch.tpu.set_device(1)
        b = api.tpu_device()
        api.tpu_device.cache_clear()
        print(a, b, api.tpu_device())
    """, TORCH_TPU_NUM_CHIPS=2)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["tpu:0", "tpu:0", "tpu:1"]


def test_device_module_class_is_torch_tpu():
    from torch_tpu.api._device_module import DeviceModule
    assert DeviceModule.device_count() == torch.tpu.device_count()
    assert DeviceModule.current_device() == torch.tpu.current_device()
    assert DeviceModule.synchronize is torch.tpu.synchronize
    assert DeviceModule._get_cache_stats().num_cache_reqs >= 0
    with pytest.raises(AttributeError, match="no_such_name"):
        DeviceModule.no_such_name
    with pytest.raises(TypeError):
        DeviceModule()


# ---- precision ----------------------------------------------------------------------------


@pytest.fixture
def matmul_precision():
    old = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(old)


def test_precision_context_manager_and_setter(matmul_precision):
    P = torch.tpu.Precision
    torch.set_float32_matmul_precision("highest")
    with torch.tpu.precision(P.HIGH) as p:
        assert p is P.HIGH and torch.get_float32_matmul_precision() == "high"
        with torch.tpu.precision("DEFAULT"):
            assert torch.tpu.get_precision() is P.DEFAULT
        assert torch.get_float32_matmul_precision() == "high"
    assert torch.get_float32_matmul_precision() == "highest"
    torch.tpu.precision(P.DEFAULT)  # the setter form
    assert torch.get_float32_matmul_precision() == "medium"
    with pytest.raises(ValueError, match="unknown precision"):
        torch.tpu.precision("fp64")


def test_precision_changes_float32_matmul_results(matmul_precision):
    a = torch.randn(64, 256, dtype=torch.float64)
    b = torch.randn(256, 64, dtype=torch.float64)
    ref = a @ b
    at, bt = a.float().to("tpu"), b.float().to("tpu")
    err = {}
    for p in torch.tpu.Precision:
        with torch.tpu.precision(p):
            err[p] = ((at @ bt).cpu().double() - ref).abs().max().item()
    assert err[torch.tpu.Precision.HIGHEST] < 1e-3
    if torch_tpu.matrix_unit()["bfloat16"]:  # one bfloat16 pass is visibly coarser
        assert err[torch.tpu.Precision.DEFAULT] > 10 * err[torch.tpu.Precision.HIGHEST]


@pytest.fixture
def excess_flag():
    mod = torch.backends.tpu
    old = mod._allow_excess_precision
    mod._warned = False
    yield mod
    mod._allow_excess_precision = old


def test_allow_excess_precision_flag(excess_flag):
    assert torch.backends.tpu.allow_excess_precision is True  # the published default
    torch.backends.tpu.allow_excess_precision = False
    assert torch.backends.tpu.allow_excess_precision is False
    with pytest.warns(UserWarning, match="allow_excess_precision=True has no effect"):
        torch.backends.tpu.allow_excess_precision = True
    assert torch.backends.tpu.allow_excess_precision is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.backends.tpu.allow_excess_precision = True  # warned once only
    with pytest.raises(TypeError, match="must be a bool"):
        torch.backends.tpu.allow_excess_precision = 1
    assert torch.backends.tpu.is_available()


@pytest.mark.parametrize("allow", [False, True])
def test_no_excess_precision_in_fused_or_compiled_programs(excess_flag, allow, strict_global):
    """The precision tutorial's check: bf16 (1+2^-6) @ (1+2^-7) * float32 1
    rounds the product to bfloat16 (bit 13 dropped) in strict eager, and the
    fused GEMM epilogue and the compiled graph round it alike."""
    warnings.simplefilter("ignore")
    eye = torch.eye(256, dtype=torch.bfloat16, device="tpu")
    a, b = eye.clone() * (1 + 2**-6), eye.clone() * (1 + 2**-7)
    one = torch.tensor([1.0], dtype=torch.float32, device="tpu")

    def mul_add(a, b, c):
        return a @ b * c

    rounded, excess = 1.0 + 2**-6 + 2**-7, 1.0 + 2**-6 + 2**-7 + 2**-13
    torch.backends.tpu.allow_excess_precision = allow
    assert mul_add(a, b, one)[0, 0].item() == rounded
    torch.tpu._clear_cache()
    m0 = torch_tpu.defer_metrics()
    with torch_tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
        fused = mul_add(a, b, one)
        assert "gemm+epilogue" in sync.graph_text([fused])
        fused = fused[0, 0].item()
    assert _delta(m0, torch_tpu.defer_metrics(), "gemm_epilogues") >= 1
    torch.compiler.reset()
    compiled = torch.compile(mul_add, backend="tpu")(a, b, one)[0, 0].item()
    assert fused == rounded and compiled == rounded and rounded != excess


# ---- program cache and HBM telemetry ---------------------------------------------------------


def test_cache_stats_as_the_compilation_cache_tutorial_uses_them():
    torch.tpu._clear_cache()
    s0 = torch.tpu._get_cache_stats()
    assert s0.per_entry_stats == [] and s0.num_entries == 0
    m0 = torch_tpu.defer_metrics()
    t0 = time.time()
    with torch_tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
        x = torch.randn(32, 128, device="tpu")
        y = x @ x.T
        _ = y.cpu()  # materialization: compiles
        x2 = torch.randn(32, 128, device="tpu")
        y2 = x2 @ x2.T
        _ = y2.cpu()  # the same graph: a hit
    s1 = torch.tpu._get_cache_stats()
    m1 = torch_tpu.defer_metrics()
    reqs = s1.num_cache_reqs - s0.num_cache_reqs
    hits = s1.num_cache_hits - s0.num_cache_hits
    assert reqs == _delta(m0, m1, "flushes") and reqs >= 2
    assert hits == _delta(m0, m1, "cache_hits") and hits >= 1
    assert s1.num_cache_misses - s0.num_cache_misses == _delta(m0, m1, "programs_compiled")
    assert s1.num_entries == len(s1.per_entry_stats) == _delta(m0, m1, "programs_compiled")
    assert s1.num_evictions == s0.num_evictions  # far below the cache's limit
    assert sum(e.read_count for e in s1.per_entry_stats) == hits
    structures = {cut[3] for cut in torch_tpu.defer_cuts()}
    for e in s1.per_entry_stats:
        assert e.structure in structures
        assert e.compilation_duration > 0
        assert t0 - 1 <= e.last_read <= time.time() + 1
    assert s1.host_bytes > 0


def test_strict_eager_asks_the_program_cache_nothing(strict_global):
    s0 = torch.tpu._get_cache_stats()
    (torch.randn(8, 8, device="tpu") * 2).sum().item()
    assert torch.tpu._get_cache_stats().num_cache_reqs == s0.num_cache_reqs


def test_clear_cache_makes_the_next_flush_compile():
    def step():
        with torch_tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
            x = torch.randn(16, device="tpu")
            return ((x * 3).relu() + 1).cpu()

    step()
    m0 = torch_tpu.defer_metrics()
    step()
    assert _delta(m0, torch_tpu.defer_metrics(), "programs_compiled") == 0
    torch.tpu._clear_cache()
    assert torch.tpu._get_cache_stats().num_entries == 0
    m1 = torch_tpu.defer_metrics()
    step()
    assert _delta(m1, torch_tpu.defer_metrics(), "programs_compiled") >= 1
    assert torch.tpu._get_cache_stats().num_entries >= 1


def test_hbm_usage_summary_reads_the_allocator():
    from torch_tpu.device import _fmt_bytes
    x = torch.empty(3 * 1024 * 1024, dtype=torch.uint8, device="tpu")
    text = torch.tpu._hbm_usage_summary()
    stats = torch.tpu.memory_stats()
    assert text.startswith(f"tpu:0: {_fmt_bytes(stats['allocated_bytes.all.current'])} allocated")
    assert f"{_fmt_bytes(stats['reserved_bytes.all.current'])} reserved" in text
    assert f"of {_fmt_bytes(torch.tpu.get_device_properties().total_memory)}" in text
    n = torch.tpu._get_cache_stats().num_entries
    assert f"for {n} programs" in text
    del x


# ---- torch_tpu._internal.utils ------------------------------------------------------------------


def test_assert_close_as_the_numerical_parity_tutorial_uses_it():
    from torch_tpu._internal.utils import utils
    model_cpu = torch.nn.Linear(10, 10).to(torch.bfloat16)
    model_tpu = torch.nn.Linear(10, 10).to("tpu").to(torch.bfloat16)
    model_tpu.load_state_dict(model_cpu.state_dict())
    inp = torch.randn(5, 10).to(torch.bfloat16)
    out_cpu, out_tpu = model_cpu(inp), model_tpu(inp.to("tpu"))
    try:
        utils.assert_close(out_tpu.cpu(), out_cpu, rtol=1.6e-2, atol=1e-5,
                           check_value=utils.CheckValueMode.STRICT)
    except AssertionError as e:
        assert "Tolerance Suggestions" in str(e)
    utils.assert_close(out_tpu, out_cpu, rtol=0.1, atol=0.1,
                       check_value=utils.CheckValueMode.LOOSE)  # tpu tensors compare on CPU


def _suggested(text, name):
    line = next(l for l in text.splitlines() if l.startswith(f"- {name} >= "))
    return float(line.split()[3])


def test_assert_close_strict_suggestions_pass_and_modes_differ():
    from torch_tpu._internal.utils import utils
    expected = torch.tensor([1.0, 2.0, 4.0])
    actual = torch.tensor([1.0, 2.1, 4.0])
    with pytest.raises(AssertionError) as info:
        utils.assert_close(actual, expected, rtol=1e-3, atol=1e-3)
    text = str(info.value)
    assert "Mismatched elements: 1 / 3 (33.3%)" in text
    assert "at index (1,)" in text and "To pass STRICT mode, you need BOTH" in text
    rtol, atol = _suggested(text, "rtol"), _suggested(text, "atol")
    assert rtol == pytest.approx(0.05, rel=1e-4) and atol == pytest.approx(0.1, rel=1e-4)
    utils.assert_close(actual, expected, rtol=rtol * 1.001, atol=atol * 1.001)
    with pytest.raises(AssertionError):  # STRICT needs both
        utils.assert_close(actual, expected, rtol=1e-3, atol=atol * 1.001)
    utils.assert_close(actual, expected, rtol=1e-3, atol=atol * 1.001,
                       check_value=utils.CheckValueMode.LOOSE)  # LOOSE: atol alone
    # An expected 0 against a tiny value: LOOSE passes below atol, STRICT does not.
    z, tiny = torch.zeros(2), torch.tensor([0.0, 1e-6])
    utils.assert_close(tiny, z, rtol=1e-2, atol=1e-5, check_value=utils.CheckValueMode.LOOSE)
    with pytest.raises(AssertionError):
        utils.assert_close(tiny, z, rtol=1e-2, atol=1e-5)
    utils.assert_close(tiny * 100, z, check_value=utils.CheckValueMode.SKIP)
    with pytest.raises(AssertionError, match="shape"):
        utils.assert_close(torch.zeros(3), z, check_value=utils.CheckValueMode.SKIP)
    with pytest.raises(AssertionError, match="dtype"):
        utils.assert_close(z.double(), z)
    with pytest.raises(TypeError):
        utils.assert_close(z, z, check_value="strict")
    utils.assert_close({"a": [z, 1.0]}, {"a": [z.clone(), 1.0]})


def test_assert_close_default_tolerances_follow_dtype():
    from torch_tpu._internal.utils import CheckValueMode, assert_close
    loose = CheckValueMode.LOOSE
    one = torch.ones(4, dtype=torch.bfloat16)
    step = one * (1 + 2**-7)  # one bfloat16 ulp above 1
    assert_close(step, one, check_value=loose)  # bfloat16: rtol 1.6e-2, atol 1e-5
    with pytest.raises(AssertionError, match="up to 1e-05 allowed"):
        assert_close(step, one)  # STRICT needs atol too
    with pytest.raises(AssertionError):
        assert_close(step.float(), one.float(), check_value=loose)  # float32: 1.3e-6, 1e-5


def test_op_tracer_records_ops_and_native_counts():
    from torch_tpu._internal.utils import utils
    x = torch.randn(4, 4, device="tpu")
    with utils.OpTracer() as t:
        y = (x + 1).sum()
    names = [op[0] for op in t.ops]
    assert "aten::add.Tensor" in names and "aten::sum" in names
    assert t.native.get("add.Tensor", 0) >= 1 and not t.fallback  # the bridge's names
    text = t._pformat()
    assert "aten::add.Tensor(float32[4x4]@tpu:0" in text and "native" in text
    assert y.item() == pytest.approx((x + 1).sum().item(), rel=1e-6)


def test_format_model():
    from torch_tpu._internal.utils import utils
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.BatchNorm1d(3)).to("tpu")
    m[0].bias.requires_grad_(False)
    text = utils.format_model(m)
    assert "0: Linear [15 params]" in text
    assert "param weight: float32[3x4]@tpu:0" in text and "param bias: float32[3]@tpu:0 (frozen)" in text
    assert "buffer running_mean: float32[3]@tpu:0" in text
    assert "total: 21 parameters (18 trainable)" in text and "devices: tpu:0" in text
    with pytest.raises(TypeError):
        utils.format_model(torch.ones(1))


# ---- torch_tpu._internal.sync ----------------------------------------------------------------------


def test_synchronize_materialises_the_pending_graph():
    m0 = torch_tpu.defer_metrics()
    with torch_tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
        x = torch.arange(6, dtype=torch.float32, device="tpu")
        y = x * 2 + 1
        text = sync.graph_text([y])
        assert " = mul(" in text and " = add(" in text and ": tiled, 2 node(s)" in text
        assert torch_tpu.defer_metrics()["flushes"] == m0["flushes"]  # the text runs nothing
        sync.synchronize([y], wait=True)
        m1 = torch_tpu.defer_metrics()
        assert m1["flushes_by_reason"]["synchronize"] == m0["flushes_by_reason"]["synchronize"] + 1
        assert sync.graph_text([y]) == ""
        z = y * 3
        sync.synchronize(z, wait=False)
        assert sync.graph_text(z) == ""
    assert z.cpu().tolist() == [(2 * i + 1) * 3 for i in range(6)]


def test_synchronize_rejects_what_is_not_a_tpu_tensor():
    with pytest.raises(ValueError, match="tpu tensors"):
        sync.synchronize([torch.ones(1)])
    with pytest.raises(TypeError):
        sync.synchronize([1.0])
    with pytest.raises(NotImplementedError, match="graph_text"):
        sync.computation_mlir([torch.ones(1, device="tpu")])


# ---- eager modes -------------------------------------------------------------------------------------


def test_internal_defer_all_keeps_its_graph_pending_past_the_context(strict_global):
    m0 = torch_tpu.defer_metrics()
    with torch_tpu.set_eager_mode(EagerMode.INTERNAL_DEFER_ALL):
        assert torch_tpu.get_eager_mode() is EagerMode.INTERNAL_DEFER_ALL
        x = torch.full((4,), 2.0, device="tpu")
        y = x * x
    assert " = mul(" in sync.graph_text([y])  # still pending after the exit
    assert _delta(m0, torch_tpu.defer_metrics(), "flushes") == 0
    assert y.cpu().tolist() == [4.0] * 4  # the host read flushes it
    with torch_tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
        y = x * 3
    assert sync.graph_text([y]) == ""  # DEFER_AND_FUSE flushes on exit
    m1 = torch_tpu.defer_metrics()
    assert _delta(m0, m1, "flushes") == 2 and m1["flushes_by_reason"]["mode_switch"] >= 1


def test_internal_defer_all_then_strict_op_keeps_order(strict_global):
    x = torch.ones(3, device="tpu")
    with torch_tpu.set_eager_mode(EagerMode.INTERNAL_DEFER_ALL):
        x.mul_(5)
    x.add_(1)  # a strict op on the stream flushes the pending graph first
    assert x.cpu().tolist() == [6.0] * 3


def test_defer_and_fuse_with_o1_is_deprecated_defer_and_fuse():
    with pytest.warns(DeprecationWarning, match="DEFER_AND_FUSE_WITH_O1"):
        mode = EagerMode.DEFER_AND_FUSE_WITH_O1
    assert mode is EagerMode.DEFER_AND_FUSE
    with pytest.warns(DeprecationWarning):
        assert EagerMode["DEFER_AND_FUSE_WITH_O1"] is EagerMode.DEFER_AND_FUSE
    with pytest.warns(DeprecationWarning):
        assert EagerMode("defer_and_fuse_with_o1") is EagerMode.DEFER_AND_FUSE
    assert "DEFER_AND_FUSE_WITH_O1" not in EagerMode.__members__
    with pytest.raises(AttributeError):
        EagerMode.NO_SUCH_MODE
    with pytest.raises(ValueError):
        EagerMode("no_such_mode")


# ---- environment variables ---------------------------------------------------------------------------


def test_env_mapping_and_warnings_once(monkeypatch):
    from torch_tpu import _env
    monkeypatch.setattr(_env, "_warned", set())
    env = {"TPU_DEFER_AND_FUSE": "1", "XLA_FLAGS": "--xla_dump_to=/tmp",
           "TORCH_TPU_TOPOLOGY": "2x2", "TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT": "/tmp/tt3",
           "TORCH_TPU_INTERNAL_ENABLE_DEBUG_CHECKS": "1"}
    with pytest.warns(UserWarning) as rec:
        _env.apply(env)
    messages = [str(w.message) for w in rec]
    assert any(m.startswith("XLA_FLAGS is set but has no effect") for m in messages)
    assert any(m.startswith("TORCH_TPU_TOPOLOGY is set but has no effect") for m in messages)
    assert env["TORCH_TPU_DEFER_AND_FUSE"] == "1" and env["TORCH_TPU_CACHE_DIR"] == "/tmp/tt3"
    assert env["TORCH_TPU_FALLBACK"] == "error" and env["TPU_LAUNCH_BLOCKING"] == "1"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _env.apply(dict(env))  # once per variable
    env2 = {"TPU_DEFER_AND_FUSE": "1", "TORCH_TPU_DEFER_AND_FUSE": "0"}
    _env.apply(env2)
    assert env2["TORCH_TPU_DEFER_AND_FUSE"] == "0"  # the new name wins
    with pytest.warns(UserWarning, match="remote"):
        _env.apply({"TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT": "gs://bucket/cache"})


def test_env_variables_at_import():
    code = """
        import json, torch, torch_tpu
        from torch_tpu import _C
        print(json.dumps([torch_tpu.get_eager_mode().name, _C.fallback_mode()]))
    """
    r = run_python(code, TPU_DEFER_AND_FUSE="1", TORCH_TPU_DEFER_AND_FUSE=None,
                   XLA_FLAGS="--foo", TPU_LAUNCH_BLOCKING=None)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1])[0] == "DEFER_AND_FUSE"
    assert r.stderr.count("XLA_FLAGS is set but has no effect") == 1
    r = run_python(code, TORCH_TPU_INTERNAL_ENABLE_DEBUG_CHECKS="1", TORCH_TPU_DEFER_AND_FUSE=None,
                   TPU_LAUNCH_BLOCKING=None, TORCH_TPU_FALLBACK=None)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == ["DEFER_NEVER_AND_LAUNCH_BLOCKING", "error"]


# ---- single-host launcher ---------------------------------------------------------------------------

_SCRIPT = """
import json, os, sys
import torch, torch.distributed as dist
import torch_tpu
dist.init_process_group("tpu_dist")
x = torch.full((2,), float(dist.get_rank() + 1), device="tpu")
dist.all_reduce(x)
res = {"name": __name__, "argv": sys.argv, "rank": dist.get_rank(),
      "world": dist.get_world_size(), "chips": torch.tpu.device_count(),
      "visible": os.environ.get("TPU_VISIBLE_CHIPS"), "local": os.environ.get("LOCAL_RANK"),
      "sum": x.cpu().tolist()}
with open(os.path.join(os.environ["RESULT_DIR"], f"{dist.get_rank()}.json"), "w") as f:
    json.dump(res, f)
dist.destroy_process_group()
"""

_LAUNCH_ENV = {k: None for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                 "MASTER_ADDR", "MASTER_PORT", "TPU_VISIBLE_CHIPS",
                                 "TORCH_TPU_NUM_CHIPS", "TORCH_TPU_SINGLEHOST_WRAPPER")}
_WRAPPER = "torch_tpu._internal.distributed.launchers.singlehost_wrapper"


def _results(directory):
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]


def test_singlehost_wrapper_runs_a_script_as_main(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    r = run_python(f"import runpy, sys; sys.argv = ['w', {str(script)!r}, '--lr', '3'];"
                   f"runpy.run_module({_WRAPPER!r}, run_name='__main__', alter_sys=True)",
                   timeout=180, RESULT_DIR=tmp_path, **_LAUNCH_ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    (res,) = _results(tmp_path)
    assert res["name"] == "__main__" and res["argv"] == [str(script), "--lr", "3"]
    assert (res["rank"], res["world"], res["chips"], res["visible"]) == (0, 1, 1, "0")
    assert res["sum"] == [1.0, 1.0]


def test_singlehost_wrapper_under_torchrun(tmp_path):
    import subprocess
    from conftest import child_env
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:0", "-m", _WRAPPER, str(script)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                       env=child_env(**_LAUNCH_ENV, OMP_NUM_THREADS="1", RESULT_DIR=tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    res = _results(tmp_path)
    assert [d["rank"] for d in res] == [0, 1]
    for d in res:
        assert d["world"] == 2 and d["chips"] == 1 and d["visible"] == d["local"]
        assert d["sum"] == [3.0, 3.0]


def test_singlehost_wrapper_refuses_more_local_ranks_than_chips():
    from torch_tpu._internal.distributed.launchers import singlehost_wrapper as w
    with pytest.raises(ValueError, match="8 chips per host"):
        w.plan_env({"LOCAL_RANK": "9", "WORLD_SIZE": "10"})
    assert w.plan_env({"LOCAL_RANK": "1", "WORLD_SIZE": "2"}) == {"TPU_VISIBLE_CHIPS": "1"}
    assert w.plan_env({"LOCAL_RANK": "1", "WORLD_SIZE": "2", "TPU_VISIBLE_CHIPS": "3"}) == {}
