"""Execution modes (EagerMode, launch blocking: global and thread-local),
`python -m torch_tpu`, the torch.backends autoload entry point, and
torch.autocast("tpu")."""
import os
import re
import threading

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu
from conftest import TPU0, assert_same, check_result, make, run_checks, run_python, sync
from torch_tpu import EagerMode


def expected_default_mode():
    if os.environ.get("TPU_LAUNCH_BLOCKING") == "1":
        return EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
    if os.environ.get("TORCH_TPU_DEFER_AND_FUSE") == "1":
        return EagerMode.DEFER_AND_FUSE
    return EagerMode.DEFER_NEVER


def test_import_paths():
    from torch_tpu._internal.execution_mode import EagerMode as E2
    from torch_tpu._internal.execution_mode import set_eager_mode as s2
    assert E2 is EagerMode
    assert s2 is torch_tpu.set_eager_mode
    assert torch_tpu.eager_mode is torch_tpu.set_eager_mode
    assert {m.name for m in EagerMode} >= {"DEFER_NEVER", "DEFER_NEVER_AND_LAUNCH_BLOCKING"}


def test_default_mode():
    assert torch_tpu.get_eager_mode() is expected_default_mode()
    assert torch_tpu._C.launch_blocking() == (expected_default_mode()
                                              is EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING)


def compute_and_compare():
    a, b = make((32, 16), seed=1), make((16, 8), seed=2)
    assert_same(torch.softmax(a.to("tpu") @ b.to("tpu"), -1), torch.softmax(a @ b, -1),
                atol=1e-5, rtol=1e-5)


def test_context_manager_sets_and_restores():
    before = torch_tpu.get_eager_mode()
    with torch_tpu.set_eager_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING) as m:
        assert m is EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
        assert torch_tpu.get_eager_mode() is EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
        compute_and_compare()
        with torch_tpu.eager_mode(EagerMode.DEFER_NEVER):
            assert torch_tpu.get_eager_mode() is EagerMode.DEFER_NEVER  # inner wins
            compute_and_compare()
        assert torch_tpu.get_eager_mode() is EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
    assert torch_tpu.get_eager_mode() is before
    with pytest.raises(ZeroDivisionError):
        with torch_tpu.set_eager_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
            1 / 0
    assert torch_tpu.get_eager_mode() is before


def test_context_manager_is_thread_local():
    seen = {}
    started, release = threading.Event(), threading.Event()

    def other():
        started.set()
        release.wait(30)
        seen["mode"] = torch_tpu.get_eager_mode()
        a = make((8, 8), seed=3)
        seen["ok"] = torch.equal((a.to("tpu") * 2).cpu(), a * 2)

    t = threading.Thread(target=other)
    with torch_tpu.set_eager_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
        t.start()
        started.wait(30)
        release.set()
        t.join(30)
        assert torch_tpu.get_eager_mode() is EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
    assert seen["mode"] is expected_default_mode()
    assert seen["ok"]


def test_global_setter_sets_and_restores():
    before = torch_tpu.get_eager_mode()
    try:
        torch_tpu.set_global_eager_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING)
        assert torch_tpu.get_eager_mode() is EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
        assert torch_tpu._C.launch_blocking()
        other = []
        t = threading.Thread(target=lambda: other.append(torch_tpu.get_eager_mode()))
        t.start()
        t.join()
        assert other == [EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING]  # global: every thread
        compute_and_compare()
        with torch_tpu.set_eager_mode(EagerMode.DEFER_NEVER):  # a local override wins
            assert torch_tpu.get_eager_mode() is EagerMode.DEFER_NEVER
        torch_tpu.set_global_eager_mode(EagerMode.DEFER_NEVER)
        assert torch_tpu.get_eager_mode() is EagerMode.DEFER_NEVER
        assert not torch_tpu._C.launch_blocking()
        compute_and_compare()
    finally:
        torch_tpu.set_global_eager_mode(before)
    assert torch_tpu.get_eager_mode() is before


def test_modes_reject_non_enum_values():
    with pytest.raises(TypeError):
        torch_tpu.set_global_eager_mode("defer_never")
    with pytest.raises(TypeError):
        with torch_tpu.set_eager_mode(1):
            pass
    assert torch_tpu.get_eager_mode() is expected_default_mode()


def _div_by_zero_inputs():
    return (torch.tensor([4, 5, 6], dtype=torch.int32, device="tpu"),
            torch.tensor([1, 0, 2], dtype=torch.int32, device="tpu"))


def test_default_mode_reports_errors_at_sync_not_at_the_op():
    """DEFER_NEVER is asynchronous: the failing op returns, its error comes
    at the next synchronisation."""
    if expected_default_mode() is not EagerMode.DEFER_NEVER:
        pytest.skip("TPU_LAUNCH_BLOCKING=1 in the environment")
    a, z = _div_by_zero_inputs()
    r = torch.div(a, z, rounding_mode="floor")  # must not raise here
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        r.cpu()
    compute_and_compare()


@pytest.mark.parametrize("how", ["context", "global"])
def test_launch_blocking_reports_errors_at_the_op(how):
    a, z = _div_by_zero_inputs()
    if how == "context":
        with torch_tpu.set_eager_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
            with pytest.raises(RuntimeError, match="ZeroDivisionError"):
                torch.div(a, z, rounding_mode="floor")
    else:
        torch_tpu.set_global_eager_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING)
        try:
            with pytest.raises(RuntimeError, match="ZeroDivisionError"):
                torch.div(a, z, rounding_mode="floor")
        finally:
            torch_tpu.set_global_eager_mode(EagerMode.DEFER_NEVER)
    sync()  # nothing left pending
    compute_and_compare()


# ---- environment: TPU_LAUNCH_BLOCKING, python -m torch_tpu, autoload -----------------------

LAUNCH_BLOCKING_ENV = r'''
from torch_tpu import EagerMode

@check
def mode_from_env():
    assert torch_tpu.get_eager_mode() is EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
    assert torch_tpu._C.launch_blocking()

@check
def errors_at_the_op():
    a = torch.tensor([1, 2], dtype=torch.int32, device="tpu")
    z = torch.tensor([0, 1], dtype=torch.int32, device="tpu")
    try:
        torch.div(a, z, rounding_mode="floor")
    except RuntimeError as e:
        assert "ZeroDivisionError" in str(e)
    else:
        raise AssertionError("launch blocking did not raise at the op")
    torch.tpu.synchronize()

@check
def results_correct():
    x = torch.randn(16, 16)
    assert_close((x.tpu() @ x.tpu()).cpu(), x @ x, atol=1e-4, rtol=1e-4)
'''


@pytest.mark.parametrize("name", ["mode_from_env", "errors_at_the_op", "results_correct"])
def test_tpu_launch_blocking_env(launch_blocking_results, name):
    check_result(launch_blocking_results, name)


@pytest.fixture(scope="module")
def launch_blocking_results():
    return run_checks(LAUNCH_BLOCKING_ENV, TPU_LAUNCH_BLOCKING="1")


def test_python_m_torch_tpu_reports():
    p = run_python("import runpy; runpy.run_module('torch_tpu', run_name='__main__')",
                   TORCH_TPU_NUM_CHIPS="2", TORCH_TPU_MEMORY_GB="3")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert re.search(r"chips: 2\b", out), out
    assert "tpu:0" in out and "tpu:1" in out, out
    assert re.search(r"memory 3\.0 GiB", out), out
    m = re.search(r"native ATen overloads: (\d+)", out)
    assert m, out
    assert int(m.group(1)) == len(torch_tpu.native_ops()) > 0
    assert "binding errors" not in out, out
    assert "accelerator: tpu" in out, out


def test_python_m_torch_tpu_as_module():
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "torch_tpu"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert re.search(r"chips: \d+", p.stdout) and "native ATen overloads" in p.stdout


def test_runtime_settings_read_once_listed_and_checked():
    """One table of the runtime's settings (tpu/config.h): python -m torch_tpu
    lists each, marks the ones set, and a value that does not parse is named
    on stderr and listed as invalid (the default in use), not taken quietly."""
    import subprocess
    import sys
    env = dict(os.environ, TORCH_TPU_DEFER_MAX_NODES="12x", TORCH_TPU_CONV_SPLIT="0",
               TORCH_TPU_FALLBACK="silent")
    p = subprocess.run([sys.executable, "-m", "torch_tpu"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert "TORCH_TPU_DEFER_MAX_NODES=12x is not a valid value" in p.stderr, p.stderr
    assert "* TORCH_TPU_DEFER_MAX_NODES=1024  ['12x' is invalid" in p.stdout, p.stdout
    assert "* TORCH_TPU_CONV_SPLIT=0:" in p.stdout and "* TORCH_TPU_FALLBACK=silent:" in p.stdout
    assert "fallback mode: silent" in p.stdout
    names = re.findall(r"^  [* ] (\w+)=", p.stdout, re.M)
    assert len(names) == len(set(names)) >= 20, names
    # the runtime reads its settings once: a change to the environment later
    # does not reach it; set_runtime_config does
    r = run_python("""
        import os, torch, torch_tpu
        from torch_tpu import _C
        value = lambda n: {e["name"]: e["value"] for e in _C.runtime_config()}[n]
        os.environ["TORCH_TPU_DEFER_MAX_NODES"] = "5"
        a = value("TORCH_TPU_DEFER_MAX_NODES")
        _C.set_runtime_config("TORCH_TPU_DEFER_MAX_NODES", "5")
        b = value("TORCH_TPU_DEFER_MAX_NODES")
        try:
            _C.set_runtime_config("TORCH_TPU_DEFER_MAX_NODES", "five")
        except Exception as e:
            c = type(e).__name__
        try:
            _C.set_runtime_config("TORCH_TPU_NO_SUCH", "1")
        except ValueError as e:
            d = "ValueError"
        print(a, b, c, d)
    """, TORCH_TPU_DEFER_MAX_NODES=None)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-4:] == ["1024", "5", "ValueError", "ValueError"], r.stdout


def test_autoload_with_plain_import_torch():
    p = run_python("""
        import sys
        import torch
        x = torch.ones(2, device="tpu")
        print(x.device, x.cpu().tolist(), (x + 1).cpu().tolist())
        print("loaded:", "torch_tpu" in sys.modules)
    """, TORCH_DEVICE_BACKEND_AUTOLOAD=None)
    assert p.returncode == 0, p.stderr
    assert "tpu:0 [1.0, 1.0] [2.0, 2.0]" in p.stdout, p.stdout
    assert "loaded: True" in p.stdout


def test_autoload_disabled():
    p = run_python("""
        import sys
        import torch
        assert "torch_tpu" not in sys.modules
        assert torch._C._get_privateuse1_backend_name() != "tpu"
        assert not hasattr(torch, "tpu")
        try:
            torch.ones(2, device="tpu")
        except RuntimeError as e:
            print("refused:", e)
        else:
            print("tpu available")
    """, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert p.returncode == 0, p.stderr
    assert "refused:" in p.stdout, p.stdout


# ---- autocast -------------------------------------------------------------------------------


def test_autocast_settings():
    assert torch.amp.is_autocast_available("tpu")
    assert torch.get_autocast_dtype("tpu") == torch.bfloat16
    assert not torch.is_autocast_enabled("tpu")
    with torch.autocast("tpu"):
        assert torch.is_autocast_enabled("tpu")
    assert not torch.is_autocast_enabled("tpu")


def test_autocast_linear_bf16_and_softmax_fp32():
    torch.manual_seed(0)
    lin = nn.Linear(16, 8)
    x = make((4, 16), seed=5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref_lin = lin(x)
    assert ref_lin.dtype == torch.bfloat16
    ref_soft = torch.softmax(ref_lin.float(), -1)

    lin_t = nn.Linear(16, 8).tpu()
    lin_t.load_state_dict(lin.state_dict())
    with torch.autocast("tpu"):
        y = lin_t(x.tpu())
        s = torch.softmax(y, -1)
        ls = F.log_softmax(y, -1)
        mm = x.tpu() @ x.tpu().t()
    assert y.dtype == torch.bfloat16 and y.device == TPU0
    assert s.dtype == torch.float32
    assert ls.dtype == torch.float32
    assert mm.dtype == torch.bfloat16
    assert_same(y, ref_lin, atol=2e-2, rtol=2e-2)
    assert_same(s, ref_soft, atol=1e-2, rtol=2e-2)
    assert_same(ls, torch.log_softmax(ref_lin.float(), -1), atol=2e-2, rtol=2e-2)
    # outside the region, float32 again
    assert lin_t(x.tpu()).dtype == torch.float32


def test_autocast_fp16_and_backward():
    torch.manual_seed(1)
    lin = nn.Linear(8, 4)
    x = make((3, 8), seed=6)
    lin_t = nn.Linear(8, 4).tpu()
    lin_t.load_state_dict(lin.state_dict())
    with torch.autocast("tpu", dtype=torch.float16):
        y = lin_t(x.tpu())
    assert y.dtype == torch.float16
    with torch.autocast("cpu", dtype=torch.float16):
        ref = lin(x)
    assert_same(y, ref, atol=1e-2, rtol=1e-2)
    # gradients flow back to float32 parameters
    with torch.autocast("tpu"):
        loss = F.cross_entropy(lin_t(x.tpu()), torch.tensor([0, 1, 3], device="tpu"))
    assert loss.dtype == torch.float32
    loss.backward()
    assert lin_t.weight.grad.dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref_loss = F.cross_entropy(lin(x).float(), torch.tensor([0, 1, 3]))
    ref_loss.backward()
    assert_same(loss, ref_loss, atol=2e-2, rtol=2e-2)
    assert_same(lin_t.weight.grad, lin.weight.grad, atol=2e-2, rtol=5e-2)
