"""Numerical-parity and op-tracing helpers (the published
``torch_tpu._internal.utils.utils``; ``from torch_tpu._internal.utils import
utils`` and ``torch_tpu._internal.utils.assert_close`` both work).

- :func:`assert_close` compares tensors (or nested lists, tuples, dicts of
  them) with a :class:`CheckValueMode`; tpu tensors are compared on the CPU.
  On failure the message says how many elements differ, the greatest
  absolute and relative differences and where, and the tolerances that
  would pass ("Tolerance Suggestions").
- :class:`OpTracer` records the ATen ops a block runs, with their operands'
  shapes and dtypes and whether the tpu runtime ran them natively or through
  the CPU fallback (the bridge's counters); ``_pformat()`` prints them.
- :func:`format_model` describes a module: its tree, and per parameter and
  buffer the shape, dtype and device, with totals.
"""
import enum
import math
from typing import Any, Optional

import torch
from torch.testing._comparison import default_tolerances
from torch.utils import _pytree
from torch.utils._python_dispatch import TorchDispatchMode

_REL_FLOOR = 1e-7  # STRICT's relative check divides by at least this


class CheckValueMode(enum.Enum):
    """How :func:`assert_close` checks values.

    - ``SKIP``: shapes and dtypes only;
    - ``LOOSE``: PyTorch's rule, ``|a - e| <= atol + rtol * |e|``;
    - ``STRICT`` (default): both ``|a - e| <= atol`` and
      ``|a - e| <= rtol * max(|e|, 1e-7)``: the relative bound holds for small
      values too, so an expected 0 with a small nonzero actual fails even
      below atol (use LOOSE there)."""
    SKIP = "skip"
    LOOSE = "loose"
    STRICT = "strict"


def _sci_up(v: float) -> str:
    """v in scientific notation, rounded up to one decimal."""
    if v == 0 or not math.isfinite(v):
        return f"{v:.1e}"
    e = math.floor(math.log10(abs(v)))
    m = math.ceil(v / 10 ** e * 10) / 10
    if m >= 10:
        m, e = 1.0, e + 1
    return f"{m:.1f}e{e:+03d}"


def _index(flat: int, shape) -> tuple:
    out = []
    for size in reversed(shape):
        out.append(flat % size if size else 0)
        flat //= size if size else 1
    return tuple(reversed(out))


def _compare(actual: torch.Tensor, expected: torch.Tensor, rtol, atol, mode, equal_nan,
             check_dtype, path) -> Optional[str]:
    where = f" at {path}" if path else ""
    if actual.shape != expected.shape:
        return f"The values for attribute 'shape' do not match{where}: {actual.shape} != {expected.shape}."
    if check_dtype and actual.dtype != expected.dtype:
        return f"The values for attribute 'dtype' do not match{where}: {actual.dtype} != {expected.dtype}."
    if mode is CheckValueMode.SKIP:
        return None
    d_rtol, d_atol = default_tolerances(actual, expected)
    rtol = d_rtol if rtol is None else float(rtol)
    atol = d_atol if atol is None else float(atol)
    a = actual.detach().to("cpu")
    e = expected.detach().to("cpu")
    if a.is_complex() or e.is_complex():
        a, e = a.to(torch.complex128), e.to(torch.complex128)
    elif a.dtype == torch.bool and e.dtype == torch.bool:
        a, e = a.to(torch.int64), e.to(torch.int64)
    else:
        a, e = a.to(torch.float64), e.to(torch.float64)
    diff = (a - e).abs()
    mag = e.abs()
    nan_a, nan_e = a.isnan(), e.isnan()
    both_nan = nan_a & nan_e if equal_nan else torch.zeros_like(nan_a)
    exact = (a == e) | both_nan  # infinities of one sign, equal values
    rel = diff / mag.clamp_min(_REL_FLOOR)
    if mode is CheckValueMode.STRICT:
        ok = exact | ((diff <= atol) & (rel <= rtol))
    else:
        ok = exact | (diff <= atol + rtol * mag)
    ok &= ~((nan_a | nan_e) & ~both_nan)
    bad = int((~ok).sum())
    if bad == 0:
        return None
    total = ok.numel()
    finite_diff = torch.where(ok | diff.isnan(), torch.zeros_like(diff), diff)
    finite_rel = torch.where(ok | rel.isnan(), torch.zeros_like(rel), rel)
    ia = int(finite_diff.reshape(-1).argmax())
    ir = int(finite_rel.reshape(-1).argmax())
    max_abs = float(diff.reshape(-1)[ia])
    max_rel = float(rel.reshape(-1)[ir])
    # Over every element that is not exactly equal: what would make them pass.
    inexact = ~exact
    need_abs = float(diff[inexact].max()) if bool(inexact.any()) else 0.0
    need_rel = float(rel[inexact].max()) if bool(inexact.any()) else 0.0
    lines = [f"Tensor-likes are not close{where}!", "",
             f"Mismatched elements: {bad} / {total} ({100.0 * bad / total:.1f}%)",
             f"Greatest absolute difference: {max_abs:.6g} at index {_index(ia, a.shape)} "
             f"(up to {atol:g} allowed)",
             f"Greatest relative difference: {max_rel:.6g} at index {_index(ir, a.shape)} "
             f"(up to {rtol:g} allowed)", "", "Tolerance Suggestions:"]
    if bool(((nan_a | nan_e) & ~both_nan).any()):
        lines.append("NaN where the other tensor has a number: no tolerance passes "
                     "(equal_nan=True accepts NaN against NaN only).")
    elif mode is CheckValueMode.STRICT:
        lines += ["Strict check failed.", "To pass STRICT mode, you need BOTH:",
                  f"- rtol >= {need_rel:.6g} ({_sci_up(need_rel)})",
                  f"- atol >= {need_abs:.6g} ({_sci_up(need_abs)})"]
    else:
        # With rtol kept: the atol that passes; with atol kept: the rtol.
        need_atol = float((diff - rtol * mag)[inexact].max())
        slack = (diff - atol)[inexact] / mag[inexact].clamp_min(_REL_FLOOR)
        need_rtol = float(slack.max())
        lines += ["Loose check failed.", "To pass LOOSE mode, you need EITHER:",
                  f"- atol >= {need_atol:.6g} ({_sci_up(need_atol)}) with rtol={rtol:g}",
                  f"- rtol >= {need_rtol:.6g} ({_sci_up(need_rtol)}) with atol={atol:g}"]
    return "\n".join(lines)


def assert_close(actual: Any, expected: Any, rtol: Optional[float] = None,
                 atol: Optional[float] = None,
                 check_value: CheckValueMode = CheckValueMode.STRICT, *,
                 equal_nan: bool = False, check_dtype: bool = True,
                 msg: Optional[str] = None) -> None:
    """Asserts that `actual` (e.g. a tpu result) is close to `expected` (the
    CPU reference). Both may be tensors, numbers or nested lists, tuples and
    dicts of them; tpu tensors are compared on the CPU (no device check).
    `rtol`/`atol` default to PyTorch's per-dtype tolerances
    (``torch.testing.assert_close``'s); both or neither must be given.
    Raises AssertionError with the mismatch report and tolerance
    suggestions; TypeError for a bad `check_value`."""
    if not isinstance(check_value, CheckValueMode):
        raise TypeError(f"check_value must be a CheckValueMode, got {check_value!r}")
    if (rtol is None) != (atol is None):
        raise ValueError("Both 'rtol' and 'atol' must be either specified or omitted, "
                         f"but got rtol={rtol} and atol={atol}")
    a_leaves, a_spec = _pytree.tree_flatten(actual)
    e_leaves, e_spec = _pytree.tree_flatten(expected)
    if a_spec != e_spec:
        raise AssertionError(f"The structures differ:\n{a_spec}\n!=\n{e_spec}")
    errors = []
    for k, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        path = f"item {k}" if len(a_leaves) > 1 else ""
        if not isinstance(a, torch.Tensor) or not isinstance(e, torch.Tensor):
            if isinstance(a, (int, float, complex, bool)) and isinstance(e, (int, float, complex, bool)):
                a, e = torch.tensor(a), torch.tensor(e)
                check = False
            elif a == e:
                continue
            else:
                errors.append(f"{a!r} != {e!r}" + (f" at {path}" if path else ""))
                continue
        else:
            check = check_dtype
        err = _compare(a, e, rtol, atol, check_value, equal_nan, check, path)
        if err:
            errors.append(err)
    if errors:
        text = "\n\n".join(errors)
        raise AssertionError(f"{msg}\n\n{text}" if msg else text)


# ---- op tracing ------------------------------------------------------------------------


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        shape = "x".join(str(s) for s in x.shape) or "scalar"
        return f"{str(x.dtype).replace('torch.', '')}[{shape}]@{x.device}"
    if isinstance(x, (list, tuple)):
        inner = ", ".join(_describe(v) for v in x[:4])
        return f"[{inner}{', ...' if len(x) > 4 else ''}]"
    return repr(x) if isinstance(x, (int, float, bool, type(None), str)) else type(x).__name__


class OpTracer(TorchDispatchMode):
    """Records the ATen ops run inside ``with OpTracer() as t:``: each call's
    overload, operands and results (shape, dtype, device), and per op how
    often the tpu runtime ran it natively or through the CPU fallback (the
    bridge's own counters, ``torch_tpu.native_counts()`` /
    ``fallback_counts()``, over the block). ``t.ops`` is the list of calls,
    ``t.native`` / ``t.fallback`` the counts, ``t._pformat()`` the text."""

    def __init__(self, max_ops: int = 100_000):
        super().__init__()
        self.max_ops = max_ops
        self.ops = []
        self.dropped = 0
        self.native = {}
        self.fallback = {}

    def __enter__(self):
        from torch_tpu import _C
        self._native0 = dict(_C.native_counts())
        self._fallback0 = dict(_C.fallback_counts())
        return super().__enter__()

    def __exit__(self, *exc):
        from torch_tpu import _C
        out = super().__exit__(*exc)
        for attr, now, before in (("native", _C.native_counts(), self._native0),
                                  ("fallback", _C.fallback_counts(), self._fallback0)):
            delta = {k: v - before.get(k, 0) for k, v in dict(now).items() if v - before.get(k, 0)}
            setattr(self, attr, delta)
        return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if len(self.ops) < self.max_ops:
            self.ops.append((str(func.name()), [_describe(a) for a in args],
                             {k: _describe(v) for k, v in kwargs.items()}, _describe(result)))
        else:
            self.dropped += 1
        return result

    def _pformat(self) -> str:
        lines = [f"OpTracer: {len(self.ops) + self.dropped} op call(s)"]
        for i, (name, args, kwargs, result) in enumerate(self.ops):
            kw = "".join(f", {k}={v}" for k, v in kwargs.items())
            lines.append(f"  {i:4d} {name}({', '.join(args)}{kw}) -> {result}")
        if self.dropped:
            lines.append(f"  ... {self.dropped} more not kept (max_ops={self.max_ops})")
        if self.native or self.fallback:
            lines.append("tpu runtime: native / CPU fallback calls per op")
            for name in sorted(set(self.native) | set(self.fallback)):
                lines.append(f"  {name}: {self.native.get(name, 0)} native, "
                             f"{self.fallback.get(name, 0)} fallback")
        return "\n".join(lines)

    def __str__(self):
        return self._pformat()


# ---- models ------------------------------------------------------------------------------


def format_model(model: torch.nn.Module, max_depth: Optional[int] = None) -> str:
    """A module's tree, one line per submodule with its own parameters and
    buffers (name, shape, dtype, device), then totals: parameters, trainable
    ones, bytes, and the devices and dtypes used."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"format_model expects an nn.Module, got {type(model).__name__}")
    lines = []
    devices, dtypes = set(), set()

    def walk(name, mod, depth):
        if max_depth is not None and depth > max_depth:
            return
        pad = "  " * depth
        own = sum(p.numel() for p in mod.parameters(recurse=False))
        lines.append(f"{pad}{name or '(root)'}: {type(mod).__name__}"
                     + (f" [{own:,} params]" if own else ""))
        for kind, items in (("param", mod.named_parameters(recurse=False)),
                            ("buffer", mod.named_buffers(recurse=False))):
            for pname, t in items:
                if t is None:
                    continue
                devices.add(str(t.device))
                dtypes.add(str(t.dtype).replace("torch.", ""))
                flag = "" if kind == "buffer" or t.requires_grad else " (frozen)"
                lines.append(f"{pad}  {kind} {pname}: {_describe(t)}{flag}")
        for cname, child in mod.named_children():
            walk(cname, child, depth + 1)

    walk("", model, 0)
    params = list(model.parameters())
    total = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    nbytes = sum(p.numel() * p.element_size() for p in params) + sum(
        b.numel() * b.element_size() for b in model.buffers())
    lines.append(f"total: {total:,} parameters ({trainable:,} trainable), {nbytes:,} bytes "
                 f"with buffers; devices: {', '.join(sorted(devices)) or '-'}; "
                 f"dtypes: {', '.join(sorted(dtypes)) or '-'}")
    return "\n".join(lines)


__all__ = ["CheckValueMode", "OpTracer", "assert_close", "format_model"]
