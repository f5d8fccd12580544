"""Shared helpers of the torch_tpu test suite.

Every numerical test runs the same computation on the CPU and on tpu and
compares the two with ``torch.testing.assert_close`` (see :func:`check`).
Tests that need a differently configured runtime (several chips, a small
memory capacity, environment switches) run a child Python process with
:func:`run_python` / :func:`run_checks`.
"""
import contextlib
import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

import torch_tpu

TPU = torch.device("tpu")
TPU0 = torch.device("tpu", 0)

ALL_DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
]
INT_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
HALF_DTYPES = [torch.float16, torch.bfloat16]


def dtype_id(d):
    return str(d).replace("torch.", "")


# ---- OpInfo pairs ---------------------------------------------------------------------


def opinfo_pairs(names, dtypes=ALL_DTYPES, variants=False):
    """pytest params (op, dtype) for the OpInfo entries whose key is in
    `names` (and their variants "name.variant" when `variants`), for each of
    `dtypes` the CPU supports."""
    from torch_tpu.tools import coverage
    out = []
    for op in coverage.load_op_db():
        key = coverage.op_key(op)
        if not any(key == n or (variants and key.startswith(n + ".")) for n in names):
            continue
        supported = op.supported_dtypes("cpu")
        out += [pytest.param(op, dt, id=f"{key}-{dtype_id(dt)}") for dt in dtypes if dt in supported]
    return out


# ---- ops that always take the CPU fallback ------------------------------------------------
# ATen ops keep gaining native kernels; these test-only ops have a CPU kernel
# and never a tpu one, so the fallback tests always exercise the fallback.
_FALLBACK_LIB = torch.library.Library("tpu_fb", "DEF")
_FALLBACK_LIB.define("affine(Tensor x) -> Tensor")
_FALLBACK_LIB.define("affine_(Tensor(a!) x) -> Tensor(a!)")
_FALLBACK_LIB.define("affine.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
_FALLBACK_LIB.define("scale_(Tensor(a!) x, Tensor y) -> Tensor(a!)")


def _affine_out(x, *, out):
    out.resize_(x.shape)
    return out.copy_(x * 1.5 + 0.25)


_FALLBACK_LIB.impl("affine", lambda x: x * 1.5 + 0.25, "CPU")
_FALLBACK_LIB.impl("affine_", lambda x: x.mul_(1.5).add_(0.25), "CPU")
_FALLBACK_LIB.impl("affine.out", _affine_out, "CPU")
_FALLBACK_LIB.impl("scale_", lambda x, y: x.mul_(y).add_(0.25), "CPU")


# ---- tensors -----------------------------------------------------------------------


def make(shape, dtype=torch.float32, seed=0, low=None, high=None, requires_grad=False,
         noncontig=False):
    """A deterministic CPU tensor. Floats are N(0, 1) unless low/high is given;
    integers are drawn from a range that every integer dtype can hold (uint8:
    non-negative). With noncontig=True the result is a strided view with the
    same values (every other column of a wider tensor)."""
    g = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    full_shape = shape[:-1] + (shape[-1] * 2,) if noncontig and shape else shape
    if dtype == torch.bool:
        t = torch.randint(0, 2, full_shape, generator=g).bool()
    elif dtype.is_floating_point:
        if low is None and high is None:
            t = torch.randn(full_shape, generator=g, dtype=torch.float64)
        else:
            lo = -1.0 if low is None else low
            hi = 1.0 if high is None else high
            t = torch.rand(full_shape, generator=g, dtype=torch.float64) * (hi - lo) + lo
        t = t.to(dtype)
    else:
        lo = (0 if dtype == torch.uint8 else -50) if low is None else low
        hi = 50 if high is None else high
        t = torch.randint(int(lo), int(hi), full_shape, generator=g).to(dtype)
    if noncontig and shape:
        t = t[..., ::2]
        assert not t.is_contiguous() or t.numel() <= 1
    if requires_grad:
        t.requires_grad_(True)
    return t


def to_tpu(obj, device=TPU):
    """Tensors (nested in lists/tuples/dicts) copied to tpu; keeps strides of
    non-contiguous tensors by copying into an equally strided tpu tensor."""
    if isinstance(obj, torch.Tensor):
        if obj.is_contiguous() or obj.dim() == 0 or 0 in obj.stride():
            # (expanded tensors cannot be the destination of a copy: copied dense)
            t = obj.detach().to(device)
        else:
            t = torch.empty_strided(obj.size(), obj.stride(), dtype=obj.dtype, device=device)
            t.copy_(obj.detach())
        if obj.requires_grad:
            t.requires_grad_(True)
        return t
    if isinstance(obj, tuple):
        return tuple(to_tpu(o, device) for o in obj)
    if isinstance(obj, list):
        return [to_tpu(o, device) for o in obj]
    if isinstance(obj, dict):
        return {k: to_tpu(v, device) for k, v in obj.items()}
    return obj


def to_cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, (tuple, list)):
        return type(obj)(to_cpu(o) for o in obj) if not hasattr(obj, "_fields") else \
            type(obj)(*(to_cpu(o) for o in obj))
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    return obj


def assert_on_tpu(obj, index=None):
    if isinstance(obj, torch.Tensor):
        assert obj.device.type == "tpu", f"result lives on {obj.device}, expected tpu"
        if index is not None:
            assert obj.device.index == index, f"result lives on {obj.device}, expected tpu:{index}"
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            assert_on_tpu(o, index)
    elif isinstance(obj, dict):
        for o in obj.values():
            assert_on_tpu(o, index)


def assert_same(actual, expected, atol=None, rtol=None, exact=False, check_dtype=True,
                msg=None):
    """actual (tpu results, possibly nested) equals expected (CPU results)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"expected a tensor, got {type(actual)}"
        assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
        if check_dtype:
            assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
        a = actual.detach().cpu()
        if exact:
            atol = rtol = 0.0
        torch.testing.assert_close(a, expected.detach(), atol=atol, rtol=rtol, equal_nan=True,
                                   check_dtype=check_dtype, msg=msg)
    elif isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), \
            f"{actual!r} vs {expected!r}"
        for a, e in zip(actual, expected):
            assert_same(a, e, atol=atol, rtol=rtol, exact=exact, check_dtype=check_dtype,
                        msg=msg)
    elif isinstance(expected, dict):
        assert set(actual) == set(expected)
        for k in expected:
            assert_same(actual[k], expected[k], atol=atol, rtol=rtol, exact=exact,
                        check_dtype=check_dtype, msg=msg)
    elif isinstance(expected, float):
        assert actual == pytest.approx(expected, rel=rtol or 1e-6, abs=atol or 1e-6, nan_ok=True)
    else:
        assert actual == expected


def sync():
    torch.tpu.synchronize()


@contextlib.contextmanager
def no_fallback():
    """Fallbacks raise inside; on leaving, synchronises and asserts that none
    was counted."""
    torch_tpu.reset_counts()
    prev = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("error")
    try:
        yield
        torch.tpu.synchronize()
    finally:
        torch_tpu.set_fallback_mode(prev)
    assert torch_tpu.fallback_counts() == {}


def raised_type(fn):
    """The type of the exception fn raises (on tpu: at the call or at the
    next synchronisation), or None."""
    try:
        r = fn()
        if isinstance(r, torch.Tensor) and r.device.type == "tpu":
            r.cpu()
        sync()
    except Exception as e:  # noqa: BLE001
        sync_clean()
        return type(e), e
    return None, None


def sync_clean():
    """Synchronise, swallowing (and so clearing) a pending asynchronous error."""
    try:
        sync()
    except Exception:  # noqa: BLE001
        pass


def check(fn, *args, atol=None, rtol=None, exact=False, check_dtype=True, tpu_args=None,
          **kwargs):
    """Runs fn(*args, **kwargs) on the CPU tensors given and on tpu copies of
    them, and compares: values, shapes, dtypes, and that tpu results live on
    tpu. If the CPU raises, tpu must raise the same exception type (at the
    call or at the next synchronisation). Returns (tpu_result, cpu_result)."""
    t_args = to_tpu(args) if tpu_args is None else tpu_args
    t_kwargs = to_tpu(kwargs)
    try:
        expected = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        got, err = raised_type(lambda: fn(*t_args, **t_kwargs))
        assert got is type(e), (
            f"CPU raises {type(e).__name__}({e}); tpu "
            + (f"raises {got.__name__}({err})" if got else "raises nothing"))
        return None, None
    actual = fn(*t_args, **t_kwargs)
    assert_on_tpu(actual)
    assert_same(actual, expected, atol=atol, rtol=rtol, exact=exact, check_dtype=check_dtype)
    return actual, expected


def assert_same_error(cpu_fn, tpu_fn):
    """tpu_fn raises exactly the exception type cpu_fn raises; returns the tpu
    exception."""
    try:
        cpu_fn()
    except Exception as e:  # noqa: BLE001
        expected = type(e)
    else:
        raise AssertionError("the CPU reference does not raise")
    got, err = raised_type(tpu_fn)
    assert got is expected, f"CPU raises {expected.__name__}, tpu " + (
        f"raises {got.__name__}: {err}" if got else "raises nothing")
    return err


# ---- child processes -----------------------------------------------------------------


def child_env(**overrides):
    env = dict(os.environ)
    for k, v in overrides.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def run_python(code, timeout=120, args=(), **env):
    """Runs `code` in a fresh interpreter of this environment."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=timeout,
                          env=child_env(**env))


_CHECKS_PRELUDE = '''
import json, sys, traceback
import torch
import torch_tpu
from torch.testing import assert_close
_results = {}
def check(fn):
    try:
        fn()
        _results[fn.__name__] = "ok"
    except BaseException as e:  # noqa
        _results[fn.__name__] = traceback.format_exc()[-3000:]
        for i in range(torch.tpu.device_count()):
            try:
                torch.tpu.synchronize(i)
            except Exception:
                pass
    return fn
'''
_CHECKS_EPILOGUE = '\nprint("@@RESULTS@@" + json.dumps(_results), flush=True)\n'


def run_checks(body, timeout=180, **env):
    """Runs `body` (functions decorated with @check, defined at top level) in a
    child process; returns {check name: "ok" or the traceback}."""
    code = _CHECKS_PRELUDE + textwrap.dedent(body) + _CHECKS_EPILOGUE
    p = run_python(code, timeout=timeout, **env)
    for line in p.stdout.splitlines():
        if line.startswith("@@RESULTS@@"):
            return json.loads(line[len("@@RESULTS@@"):])
    raise AssertionError(f"child process failed (rc={p.returncode}):\nstdout:\n{p.stdout[-3000:]}"
                         f"\nstderr:\n{p.stderr[-5000:]}")


def check_result(results, name):
    assert name in results, f"check {name} did not run; ran: {sorted(results)}"
    assert results[name] == "ok", f"{name} failed in the child process:\n{results[name]}"


# ---- threads ----------------------------------------------------------------------------


def run_threads(fn, n):
    """Runs fn(i) for i in range(n) on n threads started together; re-raises
    the first exception; returns the results in order."""
    barrier = threading.Barrier(n)
    results = [None] * n
    errors = []

    def body(i):
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hangs"
    if errors:
        raise errors[0]
    return results


# ---- fixtures ---------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _tpu_state_guard():
    """Each test starts and ends on tpu:0's default stream, in the global
    eager mode and fallback mode it found, with no asynchronous error left
    pending (a leftover error fails the test that caused it)."""
    from torch_tpu._internal import execution_mode as em
    mode = em._global_mode
    fallback = torch_tpu._C.fallback_mode()
    yield
    leftover = None
    try:
        sync()
    except Exception as e:  # noqa: BLE001
        leftover = e
        sync_clean()
    if em._global_mode is not mode:
        torch_tpu.set_global_eager_mode(mode)
    if torch_tpu._C.fallback_mode() != fallback:
        torch_tpu.set_fallback_mode(fallback)
    if torch.tpu.current_device() != 0:
        torch.tpu.set_device(0)
    if torch.tpu.current_stream() != torch.tpu.default_stream():
        torch.tpu.set_stream(torch.tpu.default_stream())
    if leftover is not None:
        pytest.fail(f"the test left an asynchronous tpu error pending: {leftover!r}")


@pytest.fixture
def strict_global():
    """Strict eager globally (the suite may run under TORCH_TPU_DEFER_AND_FUSE=1,
    where a compiled graph's ops join the caller's pending graph)."""
    previous = torch_tpu._internal.execution_mode._global_mode
    torch_tpu.set_global_eager_mode(torch_tpu.EagerMode.DEFER_NEVER)
    yield
    torch.tpu.synchronize()
    torch_tpu.set_global_eager_mode(previous)
