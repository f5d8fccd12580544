"""Operator parity against PyTorch's own test data (the OpInfo database).

``python -m torch_tpu.tools.coverage [--ops NAME,...] [--dtypes ...]
[--samples N] [--out docs/coverage.md] [--json bench/results/coverage.json]``

For every OpInfo of ``torch.testing._internal.common_methods_invocations.op_db``,
every dtype it supports on the CPU (restricted to the ten dtypes tpu has) and
at most ``--samples`` (default 8) samples of ``op.sample_inputs("cpu",
dtype)`` per (op, dtype), spread evenly over the first ``4 * --samples`` the
OpInfo makes, the op runs on a tpu copy of the sample and on the CPU, and
the two results are compared in the manner of PyTorch's ``test_compare_cpu``
(outputs passed through the sample's ``output_process_fn_grad``, NaNs equal)
with the tolerances of :data:`TOLERANCES`. During the tpu run the fallback
mode is "silent" and ``torch_tpu.fallback_counts()`` is reset and read around
each sample, so every (op, dtype) records whether any ATen op fell back to
the CPU, and which.

Statuses of an (op, dtype) pair:

- ``pass``: every sample that ran on the CPU gave the same result on tpu.
- ``fail``: some sample gave a different result on tpu (values, shape,
  dtype, or a result tensor that does not live on tpu).
- ``error``: some sample raised on tpu where the CPU did not.
- ``pass-property`` (reported as "pass (property)", counted as passing):
  the values cannot be compared (random or uninitialised output) and tpu
  keeps what the op promises instead: metadata for uninitialised outputs;
  determinism under ``torch.manual_seed``, the support of every value and a
  distribution that agrees with the CPU's for random ones (see
  :mod:`torch_tpu.tools.coverage_props`).
- ``unchecked``: ran on tpu with matching shapes and dtypes, values not
  comparable and no property check for the op: the op_db marks the op's
  output as random or uninitialised, or the op draws random numbers (tpu's
  generator is not the CPU's), or the op_db says some inputs have undefined
  results and those differ.
- ``cpu-error-skipped``: every sample raised on the CPU (nothing to compare).
- ``crash`` / ``timeout``: the worker process died (twice) or stalled there.

For ops with ``error_inputs`` the tool also checks that tpu raises the
exception type the CPU raises, counted separately.

The sweep runs in worker processes (``--jobs``, default 2) fed one op at a
time, so a crash or a hang costs one (op, dtype), not the sweep;
``--no-isolate`` runs everything in this process.

:func:`check_sample` and :func:`check_pair` are the comparison that the CI
test ``tests/test_opinfo_parity.py`` shares with this tool.
"""
import argparse
import collections
import itertools
import json
import math
import os
import re
import selectors
import subprocess
import sys
import tempfile
import time
import warnings

import torch

import torch_tpu  # (before torch.testing internals: registers the tpu device)

DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
]
DTYPE_NAMES = {str(d).replace("torch.", ""): d for d in DTYPES}

# (atol, rtol) per floating dtype; integers and bool compare exactly.
# Half types: PyTorch's test_compare_cpu tolerance (1e-3 both); bfloat16 keeps
# that atol but uses torch.testing's own bfloat16 rtol (1.6e-2, one bfloat16
# ulp: 2**-7 = 7.8e-3 relative, so two results one rounding apart still agree).
TOLERANCES = {
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-3, 1.6e-2),
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-7, 1e-7),
}

DEFAULT_SAMPLES = 8
PASS_PROPERTY = "pass-property"  # values not comparable; the op's promises checked instead
TPU = torch.device("tpu")


def dtype_name(d):
    return str(d).replace("torch.", "")


# ---- the OpInfo database ----------------------------------------------------------------


def load_op_db():
    """``op_db`` (imported here: torch.testing's internals need expecttest).
    Importing them freezes torch.backends' flags for the whole process
    (``disable_global_flags()``); the state found is put back."""
    import torch.backends
    frozen = torch.backends.flags_frozen()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
    if not frozen and torch.backends.flags_frozen():
        torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True
    return op_db


def op_key(op):
    """A unique name: ``name`` or ``name.variant_test_name``."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


_MATMUL = {"mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv", "addr", "mv", "dot", "vdot",
           "matmul", "inner", "outer", "einsum", "tensordot", "kron", "chain_matmul",
           "linalg.multi_dot", "linalg.vecdot", "linalg.matmul", "nn.functional.linear",
           "nn.functional.bilinear", "__rmatmul__", "ger", "cdist", "corrcoef", "cov"}
_INDEXING = {"index_select", "gather", "scatter", "scatter_add", "scatter_reduce", "index_add",
             "index_copy", "index_fill", "index_put", "index_reduce", "take", "take_along_dim",
             "put", "masked_fill", "masked_scatter", "masked_select", "nonzero", "nonzero_static",
             "__getitem__", "embedding", "nn.functional.embedding", "nn.functional.embedding_bag",
             "where", "argwhere", "searchsorted", "bucketize", "select_scatter",
             "slice_scatter", "diagonal_scatter", "as_strided_scatter", "_unsafe_masked_index",
             "_unsafe_masked_index_put_accumulate", "unique", "unique_consecutive"}
_SHAPE = {"cat", "stack", "hstack", "vstack", "dstack", "column_stack", "row_stack",
          "concat", "concatenate", "split", "chunk", "tensor_split", "split_with_sizes",
          "unbind", "flip", "fliplr", "flipud", "roll", "rot90", "repeat", "repeat_interleave",
          "tile", "expand", "expand_as", "expand_copy", "broadcast_to", "broadcast_tensors",
          "permute", "transpose", "t", "view", "view_as", "reshape", "reshape_as", "flatten",
          "unflatten", "squeeze", "unsqueeze", "narrow", "narrow_copy", "select", "diag",
          "diag_embed", "diagonal", "tril", "triu", "movedim", "moveaxis", "swapaxes",
          "swapdims", "as_strided", "clone", "contiguous", "ravel", "atleast_1d",
          "atleast_2d", "atleast_3d", "block_diag", "cartesian_prod", "combinations",
          "meshgrid", "hsplit", "vsplit", "dsplit", "pad", "nn.functional.pad", "unfold",
          "unfold_copy", "resize_", "resize_as_", "to", "view_copy", "T", "H", "mT", "mH",
          "adjoint", "alias_copy", "permute_copy", "unsqueeze_copy", "squeeze_copy",
          "transpose_copy", "t_copy", "diagonal_copy", "split_with_sizes_copy"}
_FACTORY = {"arange", "linspace", "logspace", "full", "full_like", "zeros", "zeros_like",
            "ones", "ones_like", "empty", "empty_like", "empty_strided", "empty_permuted",
            "new_full", "new_ones", "new_zeros", "new_empty", "new_empty_strided", "eye",
            "scalar_tensor", "tril_indices", "triu_indices", "rand_like", "randn_like",
            "randint_like", "randint", "bernoulli", "normal", "multinomial", "item"}


_REDUCTION = {"max", "min", "var_mean", "std_mean", "median", "nanmedian", "aminmax",
              "logsumexp", "norm", "dist", "quantile", "nanquantile", "mode", "allclose",
              "equal", "cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "diff",
              "histc", "histogram", "histogramdd", "bincount", "trapz", "trapezoid",
              "cumulative_trapezoid", "renorm", "_segment_reduce", "gradient"}
_SORT = {"sort", "msort", "argsort", "topk", "kthvalue", "isin", "unravel_index"}
_NN = {"softmax", "log_softmax", "_softmax_backward_data", "native_layer_norm", "native_group_norm", "native_batch_norm",
       "_native_batch_norm_legit", "_batch_norm_with_update", "constant_pad_nd",
       "_upsample_bilinear2d_aa", "max_pool2d_with_indices_backward",
       "native_dropout_backward", "grid_sampler_2d", "grid_sampler_3d",
       "torch.ops.aten._safe_softmax.default", "torch.ops.aten._flash_attention_forward",
       "torch.ops.aten._efficient_attention_forward", "torch._scaled_mm",
       "torch._scaled_mm_v2"}
_ELEMENTWISE = {"addcmul", "addcdiv", "clamp", "lerp", "logaddexp2", "cross",
                "jiterator_4inputs_with_extra_args", "jiterator_2inputs_2outputs", "zero_"}
_RANDOM = {"cauchy", "exponential", "geometric", "log_normal", "uniform", "randn"}
_VIEWS = {"view_as_real", "view_as_complex", "resolve_conj", "resolve_neg", "unsafe_chunk",
          "unsafe_split", "sum_to_size", "broadcast_shapes", "slice", "as_strided_copy",
          "unbind_copy", "diagflat", "_chunk_cat"}
CATEGORIES = ["elementwise unary", "elementwise binary", "elementwise other", "reduction",
              "sort/search", "matmul", "linalg", "nn.functional", "indexing", "shape/view",
              "factory/random", "fft", "special", "masked", "signal windows", "sparse",
              "other"]


def category(op):
    """A coarse family, for the per-category totals (one of CATEGORIES)."""
    from torch.testing._internal.opinfo.core import (BinaryUfuncInfo, ReductionOpInfo,
                                                     UnaryUfuncInfo)
    n = op.name
    if n.startswith("fft.") or n in {"stft", "istft"}:
        return "fft"
    if n.startswith("sparse.") or n == "to_sparse":
        return "sparse"
    if n in _MATMUL:
        return "matmul"
    if n.startswith("linalg.") or n in {"cholesky", "cholesky_inverse", "cholesky_solve",
                                        "inverse", "det", "logdet", "slogdet", "lu", "lu_solve",
                                        "lu_unpack", "qr", "svd", "svd_lowrank", "pca_lowrank",
                                        "geqrf", "ormqr", "pinverse", "triangular_solve",
                                        "matrix_exp", "trace", "symeig", "eig"}:
        return "linalg"
    if n.startswith("special."):
        return "special"
    if n.startswith("masked."):
        return "masked"
    if n.startswith("signal."):
        return "signal windows"
    if n in _INDEXING:
        return "indexing"
    if n in _SHAPE or n in _VIEWS:
        return "shape/view"
    if n in _FACTORY or n in _RANDOM:
        return "factory/random"
    if n.startswith("nn.functional.") or n in _NN:
        return "nn.functional"
    if n in _SORT:
        return "sort/search"
    if isinstance(op, ReductionOpInfo) or n in _REDUCTION:
        return "reduction"
    if isinstance(op, UnaryUfuncInfo):
        return "elementwise unary"
    if isinstance(op, BinaryUfuncInfo):
        return "elementwise binary"
    if n in _ELEMENTWISE:
        return "elementwise other"
    return "other"


def select_ops(op_db, names=None):
    """The OpInfos named (by key or by name: a name selects all its variants)."""
    if not names:
        return list(op_db)
    wanted = set(names)
    chosen = [op for op in op_db if op_key(op) in wanted or op.name in wanted]
    known = {op_key(op) for op in op_db} | {op.name for op in op_db}
    missing = sorted(wanted - known)
    if missing:
        raise SystemExit(f"unknown ops: {', '.join(missing)}")
    return chosen


def op_dtypes(op, dtypes=None):
    """The dtypes of ``dtypes`` (default: all ten) that op supports on the CPU."""
    supported = op.supported_dtypes("cpu")
    return [d for d in (dtypes or DTYPES) if d in supported]


def compare_policy(op, dtype):
    """How to compare op's values at dtype, from the op_db's own skips of
    TestCommon.test_compare_cpu (those on every device): ``("compare",
    None)``; ``("none", reason)`` when the output is random or uninitialised
    (values never compared); ``("soft", reason)`` when some inputs give
    undefined values (compared; a mismatch makes the pair "unchecked", not
    "fail")."""
    import inspect
    for d in getattr(op, "decorators", ()):
        if getattr(d, "test_name", None) != "test_compare_cpu" or d.device_type is not None:
            continue
        if d.dtypes is not None and dtype not in d.dtypes:
            continue
        for dec in d.decorators:
            if "skip" not in getattr(dec, "__qualname__", ""):
                continue  # expectedFailure and the like: compare anyway
            try:
                reason = inspect.getclosurevars(dec).nonlocals.get("reason", "skipped")
            except (TypeError, ValueError):
                reason = "skipped"
            if "downcasting" in reason and not dtype.is_floating_point:
                continue  # integer -> narrower integer wraps the same everywhere
            if "non-deterministic" in reason or "downcasting" in reason:
                return "none", reason
            return "soft", reason
    return "compare", None


def samples(op, dtype, cap=DEFAULT_SAMPLES):
    """At most ``cap`` samples, spread evenly over the first ``4 * cap`` the
    OpInfo makes (the OpInfo seeds the RNG itself: the same samples every run)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pool = list(itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=False),
                                     4 * cap))
    if len(pool) <= cap:
        return pool
    idx = sorted({round(i * (len(pool) - 1) / (cap - 1)) for i in range(cap)}) if cap > 1 else [0]
    return [pool[i] for i in idx]


# ---- moving samples and comparing results ---------------------------------------------


def _is_cpu_device(v):
    if isinstance(v, torch.device):
        return v.type == "cpu"
    return isinstance(v, str) and (v == "cpu" or v.startswith("cpu:"))


class _Mover:
    """Copies a sample's input/args/kwargs to tpu: tensors (nested in lists,
    tuples, dicts) keep their exact layout (size, strides, storage offset,
    expanded or overlapping views, and aliasing between tensors of the sample:
    each CPU storage becomes one tpu storage, viewed alike); CPU device
    arguments become tpu ones. ``moved`` says whether anything was moved (a
    sample with neither tensors nor a device argument is device-independent)."""

    def __init__(self):
        self.storages = {}
        self.moved = False

    def tensor(self, obj):
        if obj.device.type != "cpu":
            return obj  # meta tensors (error inputs use them) stay as they are
        self.moved = True
        if obj.layout != torch.strided:
            return obj.to(TPU)  # (raises: tpu has strided tensors only)
        src = obj.detach()
        # The lazy conjugate and negative bits are metadata, not storage:
        # move the stored values and set the bits again on the tpu view.
        conj, neg = src.is_conj(), src.is_neg()
        if conj:
            src = src.conj()
        if neg:
            src = torch._neg_view(src)
        st = src.untyped_storage()
        key = (st.data_ptr(), st.nbytes(), src.dtype)
        base = self.storages.get(key) if key[0] else None
        whole = src.is_contiguous() and src.storage_offset() == 0 and \
            st.nbytes() == src.numel() * src.element_size()
        if base is not None:
            t = base.as_strided(src.size(), src.stride(), src.storage_offset())
        elif whole:
            t = src.to(TPU)
            if key[0]:
                self.storages[key] = t.view(-1)
        else:
            n = st.nbytes() // src.element_size()
            flat = torch.empty(0, dtype=src.dtype).set_(st, 0, (n,), (1,))
            base = flat.to(TPU)
            if key[0]:
                self.storages[key] = base
            t = base.as_strided(src.size(), src.stride(), src.storage_offset())
        if neg:
            t = torch._neg_view(t)
        if conj:
            t = t.conj()
        if obj.requires_grad:
            t.requires_grad_(True)
        return t

    def __call__(self, obj):
        if isinstance(obj, torch.Tensor):
            return self.tensor(obj)
        if _is_cpu_device(obj):
            self.moved = True
            return torch.device("tpu") if isinstance(obj, torch.device) else "tpu"
        return _map_nested(obj, self)


def to_tpu(obj):
    """A tpu copy of obj (see :class:`_Mover`)."""
    return _Mover()(obj)


def to_cpu(obj):
    """The result with every tensor moved to the CPU; returns (result, devices
    of the tensors found) so that callers can check where results lived."""
    devices = []

    def walk(o):
        if isinstance(o, torch.Tensor):
            devices.append(o.device.type)
            return o.detach().cpu()
        if isinstance(o, tuple) and hasattr(o, "_fields"):
            return type(o)(*(walk(x) for x in o))
        if isinstance(o, (tuple, list)):
            return type(o)(walk(x) for x in o)
        if isinstance(o, dict):
            return {k: walk(v) for k, v in o.items()}
        return o

    return walk(obj), devices


def tolerance(dtype):
    """(atol, rtol) for results of dtype (0, 0 for integers and bool)."""
    return TOLERANCES.get(dtype, (0.0, 0.0))


def _fmt(v):
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def compare_tensors(actual, expected, path="result"):
    """None if the tpu tensor (already on the CPU) matches the CPU one, else a
    one-line description of the first difference."""
    if actual.shape != expected.shape:
        return f"{path}: shape {tuple(actual.shape)} != cpu {tuple(expected.shape)}"
    if actual.dtype != expected.dtype:
        return f"{path}: dtype {dtype_name(actual.dtype)} != cpu {dtype_name(expected.dtype)}"
    if expected.numel() == 0:
        return None
    if expected.is_complex():
        return compare_tensors(torch.view_as_real(actual.resolve_conj().resolve_neg()),
                               torch.view_as_real(expected.resolve_conj().resolve_neg()), path)
    if not expected.is_floating_point():
        bad = actual != expected
        if not bool(bad.any()):
            return None
        n = int(bad.sum())
        i = tuple(int(x) for x in bad.nonzero()[0])
        return (f"{path}: {n}/{expected.numel()} elements differ (exact compare), e.g. at {i}: "
                f"tpu {_fmt(actual[i].item())} vs cpu {_fmt(expected[i].item())}")
    atol, rtol = tolerance(expected.dtype)
    a, e = actual.double(), expected.double()
    nan_a, nan_e = torch.isnan(a), torch.isnan(e)
    with torch.no_grad():
        diff = (a - e).abs()
        close = (a == e) | (nan_a & nan_e) | (diff <= atol + rtol * e.abs())
    close &= nan_a == nan_e
    if bool(close.all()):
        return None
    bad = ~close
    n = int(bad.sum())
    i = tuple(int(x) for x in bad.nonzero()[0])
    finite = bad & torch.isfinite(diff)
    worst = f", max abs diff {float(diff[finite].max()):.3g}" if bool(finite.any()) else ""
    return (f"{path}: {n}/{expected.numel()} elements differ (atol={atol:g}, rtol={rtol:g})"
            f"{worst}, e.g. at {i}: tpu {_fmt(actual[i].item())} vs cpu "
            f"{_fmt(expected[i].item())}")


def compare(actual, expected, values=True, path="result"):
    """None if the tpu result (moved to the CPU) matches the CPU result, else a
    one-line message. ``values=False`` compares structure, shapes and dtypes
    only (for ops whose output is random or uninitialised)."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            return f"{path}: tpu gives {type(actual).__name__}, cpu a tensor"
        if not values:
            if actual.shape != expected.shape:
                return f"{path}: shape {tuple(actual.shape)} != cpu {tuple(expected.shape)}"
            if actual.dtype != expected.dtype:
                return (f"{path}: dtype {dtype_name(actual.dtype)} != cpu "
                        f"{dtype_name(expected.dtype)}")
            return None
        return compare_tensors(actual, expected, path)
    if isinstance(expected, (tuple, list)):
        if not isinstance(actual, (tuple, list)) or len(actual) != len(expected):
            return f"{path}: tpu gives {_short(actual)}, cpu {_short(expected)}"
        for k, (a, e) in enumerate(zip(actual, expected)):
            m = compare(a, e, values, f"{path}[{k}]")
            if m:
                return m
        return None
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(actual) != set(expected):
            return f"{path}: tpu gives {_short(actual)}, cpu {_short(expected)}"
        for k in expected:
            m = compare(actual[k], expected[k], values, f"{path}[{k!r}]")
            if m:
                return m
        return None
    if not values:
        return None
    if isinstance(expected, float) and isinstance(actual, (float, int)):
        if math.isnan(expected) and math.isnan(actual):
            return None
        atol, rtol = TOLERANCES[torch.float64]
        if actual == expected or abs(actual - expected) <= atol + rtol * abs(expected):
            return None
        return f"{path}: tpu {_fmt(actual)} vs cpu {_fmt(expected)}"
    if actual != expected:
        return f"{path}: tpu {_short(actual)} vs cpu {_short(expected)}"
    return None


def _short(v, n=80):
    s = repr(v)
    return s if len(s) <= n else s[:n] + "..."


def _err(e):
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    if len(first) > 300:
        first = first[:300] + "..."
    return f"{type(e).__name__}: {first}"


def _sync_clean():
    """Synchronise, swallowing (and so clearing) a pending asynchronous error."""
    try:
        torch.tpu.synchronize()
    except Exception:  # noqa: BLE001
        pass


# ---- one sample, one (op, dtype) ----------------------------------------------------------


def _map_nested(obj, fn):
    """fn applied to each element of a plain tuple, list or dict; other
    objects (named tuples included) are returned as they are."""
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(fn(o) for o in obj)
    if isinstance(obj, list):
        return [fn(o) for o in obj]
    if isinstance(obj, dict):
        return {k: fn(v) for k, v in obj.items()}
    return obj


def _clone(obj):
    """obj with every tensor cloned (nested in lists, tuples, dicts)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    return _map_nested(obj, _clone)


_HALF = (torch.float16, torch.bfloat16)

# Ops whose float32 (and complex64) CPU results lose about eps32 * (largest
# magnitude) in their small elements (matrix_exp of the op_db's large-norm
# samples, where the CPU works in float32): tpu computes them in float64
# (complex128), so where the two differ by
# more than float32's tolerance the float64 computation decides, as for the
# half types (tensor-scaled: the error scales with the result's largest entry).
_EXACT_DECIDES_F32 = {"matrix_exp", "linalg.matrix_exp"}
# Ops whose half-type CPU kernels overflow to inf/NaN where the float64
# computation is finite (matrix_exp works in the half type: randn * 0.1
# already): there the CPU's non-finite element counts as infinitely far from
# the exact result, so a finite tpu element close to it is as close or closer.
_CPU_HALF_OVERFLOWS = {"matrix_exp", "linalg.matrix_exp"}


def _upcast(obj, dtypes=_HALF):
    """obj with every tensor of `dtypes` (float16/bfloat16) as a float64 copy,
    every other tensor cloned (nested in lists, tuples, dicts)."""
    if isinstance(obj, torch.Tensor):
        return _wide(obj.detach()) if obj.dtype in dtypes else obj.detach().clone()
    return _map_nested(obj, lambda o: _upcast(o, dtypes))


def _wide(t):
    """t as float64, or complex128 when complex (.double() would drop the
    imaginary part)."""
    return t.to(torch.complex128) if t.is_complex() else t.double()


def _tensors(obj):
    """The tensors of a (nested) result, in order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


def as_close_as_cpu(actual, expected, exact, tensor_scale=False, dtypes=_HALF,
                    cpu_overflows=False):
    """Whether tpu's half-type results are, element by element, at least as
    close to the float64 computation of the same sample (`exact`) as the
    CPU's, give or take the dtype's tolerance (relative to each element, or
    with ``tensor_scale`` to the tensor's largest magnitude: for results that
    are differences of terms of that size, such as a normalisation's
    gradient); other results must match the CPU's as usual. The CPU's own half-type rounding depends on its kernels
    (oneDNN keeps float32 accumulators on CPUs with AVX-512 BF16 and rounds
    partial sums on others), so where the two disagree by more than the
    tolerance the exact result decides. ``dtypes``: which results are judged
    so (the half types unless told otherwise). ``cpu_overflows``: where the
    CPU's element is inf/NaN and the exact one finite, the CPU's error is
    infinite (ops in _CPU_HALF_OVERFLOWS)."""
    a_l, e_l, r_l = _tensors(actual), _tensors(expected), _tensors(exact)
    if not e_l or not len(a_l) == len(e_l) == len(r_l):
        return False
    for a, e, r in zip(a_l, e_l, r_l):
        if e.dtype not in dtypes:
            if compare_tensors(a, e) is not None:
                return False
            continue
        if a.shape != e.shape or a.dtype != e.dtype or r.shape != e.shape:
            return False
        atol, rtol = tolerance(e.dtype)
        a64, e64, r64 = _wide(a), _wide(e), _wide(r)
        if cpu_overflows:  # the CPU's non-finite elements are infinitely wrong
            e64 = torch.where(~torch.isfinite(e64) & torch.isfinite(r64),
                              torch.full_like(e64, float("inf")), e64)
        if not torch.equal(torch.isnan(a64), torch.isnan(e64)):
            return False
        fin = ~torch.isnan(e64)
        err_a, err_e = (a64 - r64).abs()[fin], (e64 - r64).abs()[fin]
        mag = r64.abs()[fin]
        if tensor_scale and mag.numel():
            mag = mag.max()
        if not bool((err_a <= err_e + atol + rtol * mag).all()):
            return False
    return True


def _run_cpu(op, sample, inp, args, kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sample.output_process_fn_grad(op(inp, *args, **kwargs))


# tpu errors that say an argument must stay on the CPU (e.g. tensor_split's
# tensor_indices_or_sections): the sample runs again with its non-input
# tensors left there, as a device test suite builds such samples.
_WANTS_CPU = re.compile(r"to be on cpu|must be on cpu|on cpu, but", re.IGNORECASE)


def _run_tpu(op, sample, keep_args_on_cpu=False):
    """Moves the sample to tpu and runs op there. Returns (result moved to
    the CPU, devices the result tensors lived on, fallbacks, moved) or raises
    (with ``moving`` set on the exception when moving the sample failed)."""
    mover = _Mover()
    try:
        t_input = mover(sample.input)
        if keep_args_on_cpu:
            t_args, t_kwargs = sample.args, {
                k: ("tpu" if _is_cpu_device(v) else v) for k, v in sample.kwargs.items()}
        else:
            t_args, t_kwargs = mover((sample.args, sample.kwargs))
        torch.tpu.synchronize()
    except Exception as e:  # noqa: BLE001
        e.moving = True
        raise
    if not mover.moved:
        return None, [], {}, False
    torch_tpu.reset_counts()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            actual = op(t_input, *t_args, **t_kwargs)
        torch.tpu.synchronize()
    except Exception as e:  # noqa: BLE001
        e.fallbacks = torch_tpu.fallback_counts()
        raise
    fallbacks = torch_tpu.fallback_counts()
    actual, devices = to_cpu(actual)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        actual = sample.output_process_fn_grad(actual)
    return actual, devices, fallbacks, True


def _property(prop, op, sample, spare, fallbacks):
    """The property check of ``prop`` (an op_db key with a check in
    coverage_props) as a check_sample verdict."""
    from torch_tpu.tools import coverage_props
    mode = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("silent")
    # the check reseeds both generators many times: later samples (and ops)
    # see the state they would have seen without it
    states = torch.random.get_rng_state(), torch.tpu.get_rng_state()
    try:
        status, msg = coverage_props.check(op, sample, spare, prop)
    except Exception as e:  # noqa: BLE001
        _sync_clean()
        return "error", "property check: " + _err(e), fallbacks
    finally:
        torch_tpu.set_fallback_mode(mode)
        torch.random.set_rng_state(states[0])
        torch.tpu.set_rng_state(states[1])
    return status, msg, fallbacks


def check_sample(op, sample, policy="compare", prop=None):
    """Runs one sample on the CPU and on tpu and compares. Returns
    ``(status, message, fallbacks)``; status is one of

    - "pass", "fail" (the results differ, or a result tensor is not on tpu),
      "error" (tpu raises where the CPU does not);
    - "unchecked": values not compared, because ``policy`` is "none", or the
      values differ but the op draws random numbers (on the CPU it moves the
      generator's state), or policy is "soft" and the values differ (shapes and dtypes match);
    - where ``prop`` (the op's op_db key) has a property check
      (:mod:`torch_tpu.tools.coverage_props`), those cases give its verdict
      instead: "pass-property", "fail" or "unchecked";
    - "cpu-error" (the CPU raises: nothing to compare) or "cpu-only" (the
      sample has neither a tensor nor a device argument: nothing on tpu).

    fallbacks: {ATen op: calls} that fell back to the CPU during the tpu run
    (fallback mode "silent" meanwhile)."""
    # The tpu copy is made before the CPU runs, and the CPU's second run (the
    # RNG check) uses a clone, so an op that writes into its input sees the
    # same values everywhere.
    spare = _clone((sample.input, sample.args, sample.kwargs))
    mode = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("silent")
    tpu_error = None
    try:
        try:
            actual, devices, fallbacks, moved = _run_tpu(op, sample)
        except Exception as e:  # noqa: BLE001
            _sync_clean()
            tpu_error = e
            if not getattr(e, "moving", False) and _WANTS_CPU.search(str(e)):
                try:
                    actual, devices, fallbacks, moved = _run_tpu(op, sample, True)
                    tpu_error = None
                except Exception:  # noqa: BLE001
                    _sync_clean()
    finally:
        torch_tpu.set_fallback_mode(mode)
    if tpu_error is None and not moved:
        return "cpu-only", None, {}
    try:
        expected = _run_cpu(op, sample, sample.input, sample.args, sample.kwargs)
    except Exception as e:  # noqa: BLE001
        return "cpu-error", _err(e), {}
    if tpu_error is not None:
        prefix = "moving the sample to tpu: " if getattr(tpu_error, "moving", False) else ""
        return "error", prefix + _err(tpu_error), getattr(tpu_error, "fallbacks", {})
    off = [d for d in devices if d != "tpu"]
    if off:
        return "fail", f"result: a tensor lives on {off[0]}, not tpu", fallbacks
    try:
        msg = compare(actual, expected, values=policy != "none")
    except Exception as e:  # noqa: BLE001
        return "error", "comparing: " + _err(e), fallbacks
    if policy == "none":
        if msg:
            return "fail", msg, fallbacks
        if prop:
            return _property(prop, op, sample, spare, fallbacks)
        return "unchecked", None, fallbacks
    if not msg:
        return "pass", None, fallbacks
    if compare(actual, expected, values=False):
        return "fail", msg, fallbacks  # shapes or dtypes differ: no excuse
    if any(t.dtype in _HALF for t in _tensors(expected)):
        try:
            exact = _run_cpu(op, sample, *_upcast(spare))
            overflows = hasattr(op, "variant_test_name") and op_key(op) in _CPU_HALF_OVERFLOWS
            if as_close_as_cpu(actual, expected, exact, cpu_overflows=overflows):
                return "pass", None, fallbacks
        except Exception:  # noqa: BLE001  (no float64 kernel: the CPU's result decides)
            pass
    elif (hasattr(op, "variant_test_name") and op_key(op) in _EXACT_DECIDES_F32
          and any(t.dtype in (torch.float32, torch.complex64) for t in _tensors(expected))):
        f32 = (torch.float32, torch.complex64)
        exact = _run_cpu(op, sample, *_upcast(spare, f32))
        if as_close_as_cpu(actual, expected, exact, tensor_scale=True, dtypes=f32):
            return "pass", None, fallbacks
    if policy == "soft":
        if prop:
            return _property(prop, op, sample, spare, fallbacks)
        return "unchecked", f"values differ where the op_db allows it: {msg}", fallbacks
    # Does the op draw random numbers (then values are not comparable: tpu's
    # generator is Philox, the CPU's is a Mersenne twister)? Run it on the CPU
    # once more and see whether the CPU generator's state moved or the op
    # seeded it (OpInfos of random ops call torch.manual_seed(42) inside
    # freeze_rng_state, which puts every generator's state back).
    seeded = []
    real_seed = torch.manual_seed

    def seed(s):
        seeded.append(s)
        return real_seed(s)

    try:
        state = torch.random.get_rng_state()
        torch.manual_seed = seed
        try:
            _run_cpu(op, sample, *_clone(spare))
        finally:
            torch.manual_seed = real_seed
        if seeded or not torch.equal(state, torch.random.get_rng_state()):
            if prop:
                return _property(prop, op, sample, spare, fallbacks)
            return "unchecked", f"the op draws random numbers: {msg}", fallbacks
    except Exception:  # noqa: BLE001
        pass
    return "fail", msg, fallbacks


def check_pair(op, dtype, cap=DEFAULT_SAMPLES):
    """Every sample of (op, dtype): a dict with status, sample counts, the
    fallback ops (with calls), the first failure and the time taken."""
    t0 = time.perf_counter()
    rec = {"op": op_key(op), "dtype": dtype_name(dtype), "category": category(op),
           "status": None, "samples": 0, "cpu_ran": 0, "passed": 0, "fallbacks": {},
           "message": None, "seconds": 0.0}
    from torch_tpu.tools import coverage_props
    policy, reason = compare_policy(op, dtype)
    prop = rec["op"] if coverage_props.has_check(rec["op"]) else None
    if policy == "none":
        rec["note"] = f"values not compared (op_db: {reason})"
    try:
        todo = samples(op, dtype, cap)
    except Exception as e:  # noqa: BLE001
        rec.update(status="cpu-error-skipped", message="making samples: " + _err(e),
                   seconds=round(time.perf_counter() - t0, 4))
        return rec
    counts = collections.Counter()
    first = {}
    fallbacks = collections.Counter()
    for k, s in enumerate(todo):
        status, msg, fb = check_sample(op, s, policy, prop)
        counts[status] += 1
        fallbacks.update(fb)
        if msg and status not in first:
            first[status] = f"sample {k}: {msg}"
    rec["samples"] = len(todo)
    rec["cpu_ran"] = len(todo) - counts["cpu-error"] - counts["cpu-only"]
    rec["passed"] = counts["pass"] + counts[PASS_PROPERTY]
    rec["fallbacks"] = dict(fallbacks)
    if counts["error"]:
        rec["status"], rec["message"] = "error", first["error"]
    elif counts["fail"]:
        rec["status"], rec["message"] = "fail", first["fail"]
    elif rec["cpu_ran"] == 0:
        rec["status"] = "cpu-error-skipped"
        rec["message"] = first.get("cpu-error", "no sample runs on tpu (no tensor, no device)")
    elif counts["unchecked"]:
        rec["status"] = "unchecked"
        rec["message"] = first.get("unchecked")
    elif counts[PASS_PROPERTY]:
        rec["status"] = PASS_PROPERTY
        rec["note"] = coverage_props.note(rec["op"])
    else:
        rec["status"] = "pass"
    rec["seconds"] = round(time.perf_counter() - t0, 4)
    return rec


def check_error_inputs(op):
    """For each of op's error_inputs that raises on the CPU: does tpu raise the
    same exception type? A dict of counts and the first mismatch."""
    rec = {"op": op_key(op), "total": 0, "cpu_raised": 0, "same_type": 0, "message": None}
    if getattr(op, "error_inputs_func", None) is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            errs = list(op.error_inputs("cpu"))
    except Exception as e:  # noqa: BLE001
        rec["message"] = "making error inputs: " + _err(e)
        return rec
    mode = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("silent")
    try:
        for ei in errs:
            rec["total"] += 1
            s = ei.sample_input
            try:
                t_input, t_args, t_kwargs = to_tpu((s.input, s.args, s.kwargs))
            except Exception as e:  # noqa: BLE001
                _sync_clean()
                t_input = e
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    op(s.input, *s.args, **s.kwargs)
                continue  # the CPU does not raise: nothing to compare
            except Exception as e:  # noqa: BLE001
                want = type(e)
            rec["cpu_raised"] += 1
            if isinstance(t_input, Exception):
                got, err = type(t_input), t_input
            else:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        r = op(t_input, *t_args, **t_kwargs)
                    to_cpu(r)
                    torch.tpu.synchronize()
                    got, err = None, None
                except Exception as e:  # noqa: BLE001
                    _sync_clean()
                    got, err = type(e), e
            if got is want:
                rec["same_type"] += 1
            elif rec["message"] is None:
                rec["message"] = (f"cpu raises {want.__name__}, tpu "
                                  + (f"raises {_err(err)}" if got else "raises nothing"))
    finally:
        torch_tpu.set_fallback_mode(mode)
    return rec if rec["total"] else None


def check_op(op, dtypes=None, cap=DEFAULT_SAMPLES, errors=True, on_pair=None, skip=()):
    """All (op, dtype) pairs of op, then its error inputs:
    ``{"op", "pairs": [...], "errors": {...} or None}``. ``skip``: dtype names
    (and "__errors__") not to run (they crashed a worker before)."""
    pairs = []
    for d in op_dtypes(op, dtypes):
        if dtype_name(d) in skip:
            continue
        if on_pair:
            on_pair(op, d)
        pairs.append(check_pair(op, d, cap))
    err = None
    if errors and "__errors__" not in skip:
        if on_pair:
            on_pair(op, None)
        err = check_error_inputs(op)
    return {"op": op_key(op), "category": category(op), "pairs": pairs, "errors": err}


# ---- the sweep ----------------------------------------------------------------------------


def op_line(res):
    """One summary line for an op."""
    c = collections.Counter(p["status"] for p in res["pairs"])
    nofb = sum(1 for p in res["pairs"]
               if p["status"] in ("pass", PASS_PROPERTY) and not p["fallbacks"])
    t = sum(p["seconds"] for p in res["pairs"])
    parts = [f"{res['op']:<44} pairs {len(res['pairs']):2d}",
             f"pass {c['pass']:2d} (native {nofb:2d})",
             f"fail {c['fail']:2d}", f"error {c['error']:2d}"]
    for s in (PASS_PROPERTY, "unchecked", "cpu-error-skipped", "crash", "timeout"):
        if c[s]:
            parts.append(f"{s} {c[s]}")
    e = res.get("errors")
    if e and e["cpu_raised"]:
        parts.append(f"error-inputs {e['same_type']}/{e['cpu_raised']}")
    parts.append(f"{t:6.2f}s")
    return "  ".join(parts)


def sweep_in_process(ops, dtypes, cap, errors, report):
    results = []
    for op in ops:
        try:
            res = check_op(op, dtypes, cap, errors)
        except Exception as e:  # noqa: BLE001  (the sweep goes on)
            _sync_clean()
            res = {"op": op_key(op), "category": category(op), "errors": None,
                   "pairs": [dict(op=op_key(op), dtype=dtype_name(d), category=category(op),
                                  status="error", samples=0, cpu_ran=0, passed=0,
                                  fallbacks={}, message="sweep: " + _err(e), seconds=0.0)
                             for d in op_dtypes(op, dtypes)]}
        results.append(res)
        report(res)
    return results


_MARK = "@@COVERAGE@@"


def _worker_main(args):
    """Worker: reads op keys from stdin, one a line; writes, on stdout, a
    'begin' message before each (op, dtype) and a 'done' message per op."""
    op_db = load_op_db()
    by_key = {op_key(op): op for op in op_db}
    dtypes = _parse_dtypes(args.dtypes)
    out = sys.stdout

    def emit(obj):
        out.write(_MARK + json.dumps(obj) + "\n")
        out.flush()

    # Test hook for the isolation: "crash:KEY:DTYPE" or "hang:KEY:DTYPE"
    # (DTYPE "errors" for the error inputs) makes this worker die or stall there.
    fault = os.environ.get("TORCH_TPU_COVERAGE_FAULT", "").split(":")

    def on_pair(op, d):
        dn = dtype_name(d) if d is not None else None
        emit({"begin": op_key(op), "dtype": dn})
        if len(fault) == 3 and fault[1] == op_key(op) and fault[2] == (dn or "errors"):
            if fault[0] == "crash":
                os.abort()
            time.sleep(1e6)

    emit({"ready": True})
    for line in sys.stdin:
        if not line.strip():
            continue
        key, _, skip = line.strip().partition("\t")
        op = by_key[key]
        try:
            res = check_op(op, dtypes, args.samples, not args.no_error_inputs, on_pair,
                           set(skip.split(",")) if skip else ())
        except Exception as e:  # noqa: BLE001
            _sync_clean()
            res = {"op": key, "category": category(op), "errors": None,
                   "pairs": [dict(op=key, dtype=dtype_name(d), category=category(op),
                                  status="error", samples=0, cpu_ran=0, passed=0,
                                  fallbacks={}, message="sweep: " + _err(e), seconds=0.0)
                             for d in op_dtypes(op, dtypes)]}
        emit({"done": res})


class _Worker:
    def __init__(self, args):
        cmd = [sys.executable, "-m", "torch_tpu.tools.coverage", "--worker",
               "--samples", str(args.samples)]
        if args.dtypes:
            cmd += ["--dtypes", args.dtypes]
        if args.no_error_inputs:
            cmd.append("--no-error-inputs")
        self.stderr = tempfile.TemporaryFile(mode="w+")
        env = dict(os.environ)
        env.setdefault("TORCH_TPU_FALLBACK", "silent")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True, bufsize=1, env=env)
        self.buf = ""
        self.current = None      # (op key, dtype name or None) being run
        self.op = None           # the op key sent
        self.last = time.monotonic()
        self.ready = False

    def send(self, key, skip=()):
        self.op, self.current = key, None
        self.last = time.monotonic()
        self.proc.stdin.write(key + ("\t" + ",".join(sorted(skip)) if skip else "") + "\n")
        self.proc.stdin.flush()

    def stderr_tail(self, n=600):
        try:
            self.stderr.seek(0)
            s = self.stderr.read()
        except Exception:  # noqa: BLE001
            return ""
        lines = [ln for ln in s.splitlines() if ln.strip() and "Warning" not in ln]
        return " | ".join(lines[-4:])[-n:]

    def kill(self):
        try:
            self.proc.kill()
        except Exception:  # noqa: BLE001
            pass
        self.proc.wait()


def sweep_isolated(ops, dtypes, args, report):
    """Runs ops in ``args.jobs`` worker processes fed one op at a time; a
    worker that dies or stalls costs the (op, dtype) it was running (status
    crash / timeout); the rest of that op's dtypes are retried in a new one."""
    queue = collections.deque(op_key(op) for op in ops)
    by_key = {op_key(op): op for op in ops}
    partial = {}  # key -> pairs recorded for crashed/stalled dtypes
    skip_dtypes = collections.defaultdict(set)
    results = {}
    sel = selectors.DefaultSelector()
    workers = []

    def start():
        w = _Worker(args)
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        workers.append(w)
        return w

    def feed(w):
        while queue:
            key = queue.popleft()
            if key in results:
                continue
            w.send(key, skip_dtypes.get(key, ()))
            return True
        return False

    attempts = collections.Counter()
    startup_failures = [0]

    def crash_record(key, dtype, status, msg):
        return dict(op=key, dtype=dtype, category=category(by_key[key]), status=status,
                    samples=0, cpu_ran=0, passed=0, fallbacks={}, message=msg, seconds=0.0)

    def retire(w, status, msg):
        sel.unregister(w.proc.stdout)
        workers.remove(w)
        w.kill()
        if not w.ready:
            # died before it could take an op (torch_tpu failing to import,
            # e.g. while the extension is being rebuilt): wait, retry a while
            startup_failures[0] += 1
            if startup_failures[0] > 30:
                raise SystemExit(f"coverage: workers keep dying at start-up: {msg}")
            print(f"coverage: a worker died at start-up, retrying in 10 s: {msg}",
                  file=sys.stderr, flush=True)
            time.sleep(10)
            return
        startup_failures[0] = 0
        if w.op is None:
            return
        key = w.op
        print(f"coverage: {status} in {key} "
              f"{(w.current[1] or 'error inputs') if w.current else '(before start)'}: {msg}",
              file=sys.stderr, flush=True)
        if w.current is None:
            # before anything of the op began: retry it, twice at most
            attempts[key] += 1
            if attempts[key] > 2:
                res = {"op": key, "category": category(by_key[key]), "errors": None,
                       "pairs": [crash_record(key, dtype_name(d), status, msg)
                                 for d in op_dtypes(by_key[key], dtypes)]}
                results[key] = res
                report(res)
            else:
                queue.appendleft(key)
            return
        cur = w.current[1]
        attempts[(key, cur)] += 1
        if status == "crash" and attempts[(key, cur)] == 1:
            # once more, in a fresh worker: a crash that repeats is the op's
            # (one that does not: e.g. the extension replaced under a worker)
            queue.appendleft(key)
            return
        if cur is not None:
            # that (op, dtype) is recorded as crashed; the op's other dtypes
            # run again in a new worker
            partial.setdefault(key, []).append(crash_record(key, cur, status, msg))
            skip_dtypes[key].add(cur)
        else:
            # in the error inputs: the pairs run again, the error inputs not
            skip_dtypes[key].add("__errors__")
            partial[key + "#errors"] = f"{status}: {msg}"
        queue.appendleft(key)

    for _ in range(max(1, min(args.jobs, len(queue)))):
        start()
    while workers:
        events = sel.select(timeout=1.0)
        for sk, _ in events:
            w = sk.data
            chunk = os.read(w.proc.stdout.fileno(), 1 << 16).decode(errors="replace")
            if not chunk:
                code = w.proc.wait()
                msg = f"worker died (exit {code}): {w.stderr_tail()}"
                retire(w, "crash", msg)
                if queue and len(workers) < args.jobs:
                    start()
                continue
            w.buf += chunk
            w.last = time.monotonic()
            *lines, w.buf = w.buf.split("\n")
            for line in lines:
                if not line.startswith(_MARK):
                    continue
                msg = json.loads(line[len(_MARK):])
                if "ready" in msg:
                    w.ready = True
                    if not feed(w):
                        w.proc.stdin.close()
                elif "begin" in msg:
                    w.current = (msg["begin"], msg["dtype"])
                elif "done" in msg:
                    res = msg["done"]
                    key = res["op"]
                    done_before = partial.pop(key, [])
                    if done_before:
                        res["pairs"] = done_before + res["pairs"]
                        order = {dtype_name(d): i for i, d in enumerate(DTYPES)}
                        res["pairs"].sort(key=lambda p: order.get(p["dtype"], 99))
                    em = partial.pop(key + "#errors", None)
                    if em:
                        res["errors"] = {"op": key, "total": 0, "cpu_raised": 0,
                                         "same_type": 0, "message": em}
                    results[key] = res
                    report(res)
                    w.op, w.current = None, None
                    if not feed(w):
                        w.proc.stdin.close()
        now = time.monotonic()
        for w in list(workers):
            if w.ready and w.op is not None and now - w.last > args.stall_timeout:
                retire(w, "timeout", f"no progress for {args.stall_timeout:.0f} s")
                if queue and len(workers) < args.jobs:
                    start()
    return [results[op_key(op)] for op in ops if op_key(op) in results]


# ---- reports ---------------------------------------------------------------------------


def totals(results):
    """Total counts over all (op, dtype) pairs, overall and per category."""
    def count(pairs):
        c = collections.Counter(p["status"] for p in pairs)
        ran = sum(1 for p in pairs if p["status"] != "cpu-error-skipped")
        passing = ("pass", PASS_PROPERTY)
        return {"pairs": len(pairs), "ran_on_cpu": ran,
                "pass": c["pass"] + c[PASS_PROPERTY], "pass_property": c[PASS_PROPERTY],
                "pass_no_fallback": sum(1 for p in pairs
                                        if p["status"] in passing and not p["fallbacks"]),
                "fail": c["fail"], "error": c["error"], "unchecked": c["unchecked"],
                "unchecked_no_fallback": sum(1 for p in pairs if p["status"] == "unchecked"
                                             and not p["fallbacks"]),
                "cpu_error_skipped": c["cpu-error-skipped"], "crash": c["crash"],
                "timeout": c["timeout"]}

    pairs = [p for r in results for p in r["pairs"]]
    out = {"ops": len(results), **count(pairs)}
    cats = collections.defaultdict(list)
    for r in results:
        cats[r["category"]].extend(r["pairs"])
    order = {c: i for i, c in enumerate(CATEGORIES)}
    out["by_category"] = {k: count(cats[k]) for k in sorted(cats, key=lambda c: order.get(c, 99))}
    errs = [r["errors"] for r in results if r.get("errors")]
    out["error_inputs"] = {"ops": len(errs), "inputs": sum(e["total"] for e in errs),
                           "cpu_raised": sum(e["cpu_raised"] for e in errs),
                           "same_type": sum(e["same_type"] for e in errs)}
    return out


def normalise_cause(msg):
    """A failure message with its particulars (numbers, shapes, values,
    sample index) removed, so that equal causes group together."""
    if not msg:
        return ""
    m = re.sub(r"^sample \d+: ", "", msg)
    m = re.sub(r"e\.g\. at .*$", "", m)
    m = re.sub(r"result(\[[^\]]*\])*", "result", m)
    m = re.sub(r"'[^']*'", "'…'", m)
    m = re.sub(r"\([^()]*\)", "(…)", m)
    m = re.sub(r"[-+]?\d[\d.e+-]*", "N", m)
    return m.strip(" ,")[:160]


def top_causes(results, n=10):
    """The n most common normalised failure causes among failing/erroring
    pairs: [(cause, count, example pair, example message)]."""
    groups = collections.defaultdict(list)
    for r in results:
        for p in r["pairs"]:
            if p["status"] in ("fail", "error", "crash", "timeout"):
                groups[(p["status"], normalise_cause(p["message"]))].append(p)
    ranked = sorted(groups.items(), key=lambda kv: -len(kv[1]))[:n]
    return [(f"{st}: {cause}", len(ps), f"{ps[0]['op']} {ps[0]['dtype']}", ps[0]["message"])
            for (st, cause), ps in ranked]


def top_fallbacks(results, n=25):
    """ATen ops that fell back most often: [(aten op, (op, dtype) pairs, calls)]."""
    pairs = collections.Counter()
    calls = collections.Counter()
    for r in results:
        for p in r["pairs"]:
            for k, v in p["fallbacks"].items():
                pairs[k] += 1
                calls[k] += v
    return [(k, pairs[k], calls[k]) for k, _ in pairs.most_common(n)]


def slowest(results, n=15):
    """[(seconds over all dtypes, op key)] of the n slowest ops."""
    return sorted(((round(sum(p["seconds"] for p in r["pairs"]), 2), r["op"])
                   for r in results), reverse=True)[:n]


def core_aten_ops():
    """The overloads of PyTorch's Core ATen opset (tagged ``core``), as
    "name" or "name.overload" strings (every registered aten operator is
    looked at, not only those Python has touched)."""
    out = []
    for full in torch._C._dispatch_get_all_op_names():
        if not full.startswith("aten::"):
            continue
        name, _, ov = full[6:].partition(".")
        try:
            op = getattr(getattr(torch.ops.aten, name), ov or "default")
        except Exception:  # noqa: BLE001
            continue
        if torch.Tag.core in op.tags:
            out.append(f"{name}.{ov}" if ov else name)
    return sorted(set(out))


def core_op_table(results):
    """How tpu serves each Core ATen overload: [(overload, served by,
    (op, dtype) pairs of the sweep in which an overload of the same ATen op
    fell back to the CPU)].

    served by: "runtime" (a runtime op row is bound to it), "bridge" (the
    bridge's own PrivateUse1 kernel: views, factories, copies), "decomposition"
    (PyTorch decomposes it into other ops before it reaches the device), or
    "fallback" (it reaches the device and only the CPU fallback serves it)."""
    from torch._C import _dispatch_has_kernel_for_dispatch_key as has_kernel
    native = set(torch_tpu.native_ops())
    fell = collections.Counter()
    for r in results:
        for p in r["pairs"]:
            for k in {k.split("::")[-1].split(".")[0] for k in p["fallbacks"]}:
                fell[k] += 1
    rows = []
    for ov in core_aten_ops():
        full = "aten::" + ov
        if ov in native or f"{ov}.default" in native:
            served = "runtime"
        elif has_kernel(full, "PrivateUse1"):
            served = "bridge"
        elif any(has_kernel(full, k) for k in (
                "CompositeImplicitAutograd", "CompositeExplicitAutograd",
                "CompositeExplicitAutogradNonFunctional")):
            served = "decomposition"
        else:
            served = "fallback"
        rows.append((ov, served, fell[ov.split(".")[0]]))
    return rows


def _md_escape(s):
    return (s or "").replace("|", "\\|").replace("\n", " ")


def total_lines(t, elapsed=None):
    def pct(a, b):
        return f"{100.0 * a / b:.1f}%" if b else "-"
    lines = [
        f"(op, dtype) pairs run on CPU: {t['ran_on_cpu']} "
        f"({t['ops']} OpInfos, {t['pairs']} pairs, {t['cpu_error_skipped']} skipped: "
        f"every sample raised on the CPU)",
        f"passing on tpu:               {t['pass']} ({pct(t['pass'], t['ran_on_cpu'])}; "
        f"{t.get('pass_property', 0)} of them by property check)",
        f"  pass (property):            {t.get('pass_property', 0)} (random, uninitialised or "
        f"partly undefined output: the op's promises checked instead of values)",
        f"passing with no fallback:     {t['pass_no_fallback']} "
        f"({pct(t['pass_no_fallback'], t['ran_on_cpu'])})",
        f"failing:                      {t['fail'] + t['error'] + t['crash'] + t['timeout']} "
        f"(wrong result {t['fail']}, error on tpu {t['error']}, crash {t['crash']}, "
        f"timeout {t['timeout']})",
        f"unchecked (random/uninitialised output, no property check, ran): {t['unchecked']} "
        f"(no fallback {t['unchecked_no_fallback']})",
        f"error inputs: tpu raises the CPU's exception type for "
        f"{t['error_inputs']['same_type']}/{t['error_inputs']['cpu_raised']} "
        f"(of {t['error_inputs']['ops']} ops with error_inputs)",
    ]
    if elapsed is not None:
        lines.append(f"time: {elapsed:.0f} s")
    return lines


def write_markdown(path, results, t, command, elapsed, cap):
    dts = ", ".join(dtype_name(d) for d in DTYPES)
    L = ["# Operator parity against PyTorch's OpInfo database", "",
         f"Generated by `{command}` (torch {torch.__version__}, torch_tpu "
         f"{torch_tpu.__version__}, {elapsed:.0f} s). Each (op, dtype) pair runs at most "
         f"{cap} samples of `op.sample_inputs('cpu', dtype)` on the CPU and on tpu and "
         f"compares them (see `torch_tpu/tools/coverage.py` for statuses and tolerances: "
         f"float16 atol=rtol=1e-3, bfloat16 atol=1e-3 rtol=1.6e-2, float32 1e-5, "
         f"float64 1e-7, integers and bool exact). Dtypes: {dts}.", "",
         "Pairs whose output is random or uninitialised cannot be compared value by value. "
         "Where the tool knows what the op promises (`torch_tpu/tools/coverage_props.py`) "
         "they are checked by property and reported as \"pass (property)\", counted as "
         "passing: uninitialised outputs (empty, empty_like, empty_strided, ...) must match "
         "the CPU's shape, dtype, layout, strides, storage offset and requires_grad and live "
         "on tpu; random outputs (rand-like factories, bernoulli, dropout variants, normal, "
         "multinomial, ...) must be identical twice under the same `torch.manual_seed`, keep "
         "every value of every draw in the op's support (bernoulli in {0, 1}, randint in "
         "[low, high), dropout 0 or x/(1-p), multinomial valid indices, ...), and pooled draws "
         "with the sample's own arguments must agree with the CPU's pooled draws (two-sample "
         "Kolmogorov-Smirnov test and z-test of the means, 5 sigma); float to narrower integer "
         "conversions (byte, char, ...), undefined where a value does not fit, must equal the "
         "CPU's wherever it fits. Pairs of random or uninitialised output with no such check "
         "stay \"unchecked\".", "",
         "## Totals", "", "```", *total_lines(t), "```", "",
         "| category | pairs run on CPU | pass | of which pass (property) | "
         "pass, no fallback | fail | error | unchecked |",
         "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for k, c in t["by_category"].items():
        L.append(f"| {k} | {c['ran_on_cpu']} | {c['pass']} | {c.get('pass_property', 0)} | "
                 f"{c['pass_no_fallback']} | {c['fail']} | "
                 f"{c['error'] + c['crash'] + c['timeout']} | {c['unchecked']} |")
    core = core_op_table(results)
    served = collections.Counter(r[1] for r in core)
    clean = sum(1 for r in core if r[1] != "fallback" and not r[2])
    L += ["", "## Core ATen opset", "",
          f"{len(core)} overloads tagged `core` in torch {torch.__version__}: served by a "
          f"runtime kernel {served['runtime']}, by a bridge kernel (views, factories, copies) "
          f"{served['bridge']}, by PyTorch's decomposition into other ops "
          f"{served['decomposition']}, by the CPU fallback only {served['fallback']}. "
          f"Native with no fallback seen in this sweep: {clean}/{len(core)}. "
          "The last column counts the (op, dtype) pairs in which an overload of the same "
          "ATen op fell back to the CPU.", "",
          "| overload | served by | pairs with a fallback of this op |", "|---|---|---:|"]
    for ov, how, n in core:
        L.append(f"| `{ov}` | {how} | {n or ''} |")
    L += ["", "## Most common failure causes", "",
          "| cause | pairs | example | example message |", "|---|---:|---|---|"]
    for cause, n, ex, msg in top_causes(results, 15):
        L.append(f"| {_md_escape(cause)} | {n} | {ex} | {_md_escape(msg)[:300]} |")
    L += ["", "## ATen ops that fell back to the CPU most often", "",
          "| ATen op | (op, dtype) pairs | calls |", "|---|---:|---:|"]
    for k, n, c in top_fallbacks(results, 30):
        L.append(f"| `{k}` | {n} | {c} |")
    L += ["", "## Slowest ops", "", "| op | seconds (all dtypes, CPU + tpu) |", "|---|---:|"]
    for secs, key in slowest(results, 15):
        L.append(f"| {key} | {secs:.2f} |")
    L += ["", "## Every (op, dtype) pair", "",
          "Status per pair; `fb` marks a pair during whose tpu run some ATen op fell back "
          "to the CPU (the ops are listed in the JSON). Message: the first failure.", "",
          "| op | category | dtype | status | samples passed / run on CPU | fb | seconds | "
          "message |", "|---|---|---|---|---:|---|---:|---|"]
    for r in results:
        for p in r["pairs"]:
            fb = "fb" if p["fallbacks"] else ""
            msg = p["message"] if p["status"] not in ("pass", PASS_PROPERTY) else ""
            if not msg and p.get("note"):
                msg = p["note"]
            status = "pass (property)" if p["status"] == PASS_PROPERTY else p["status"]
            L.append(f"| {r['op']} | {r['category']} | {p['dtype']} | {status} | "
                     f"{p['passed']}/{p['cpu_ran']} | {fb} | {p['seconds']:.2f} | "
                     f"{_md_escape(msg)[:240]} |")
    L += ["", "## Error inputs", "",
          "| op | error inputs | CPU raised | tpu raised the same type | first mismatch |",
          "|---|---:|---:|---:|---|"]
    for r in results:
        e = r.get("errors")
        if e:
            L.append(f"| {r['op']} | {e['total']} | {e['cpu_raised']} | {e['same_type']} | "
                     f"{_md_escape(e['message'])[:240]} |")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def _parse_dtypes(s):
    if not s:
        return None
    out = []
    for name in s.split(","):
        name = name.strip().replace("torch.", "")
        if name not in DTYPE_NAMES:
            raise SystemExit(f"unknown dtype {name!r}; one of {', '.join(DTYPE_NAMES)}")
        out.append(DTYPE_NAMES[name])
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m torch_tpu.tools.coverage",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", help="comma-separated OpInfo names or name.variant keys "
                                 "(default: all of op_db)")
    p.add_argument("--dtypes", help="comma-separated dtypes (default: the ten tpu dtypes)")
    p.add_argument("--samples", type=int, default=DEFAULT_SAMPLES,
                   help=f"samples per (op, dtype) (default {DEFAULT_SAMPLES})")
    p.add_argument("--out", help="markdown table to write (e.g. docs/coverage.md)")
    p.add_argument("--json", help="JSON results to write (e.g. bench/results/coverage.json)")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--no-isolate", action="store_true",
                   help="run in this process (a crash ends the sweep)")
    p.add_argument("--no-error-inputs", action="store_true", help="skip error_inputs checks")
    p.add_argument("--stall-timeout", type=float, default=300.0,
                   help="kill a worker that reports no progress for this long (s)")
    p.add_argument("--quiet", action="store_true", help="no per-op lines")
    p.add_argument("--from-json", help="write --out from a saved --json run instead of sweeping "
                   "(the Core ATen table reflects this build's kernels)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return _worker_main(args)
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        write_markdown(args.out, saved["results"], saved["totals"], saved["command"],
                       saved["seconds"], saved["samples_per_pair"])
        print(f"wrote {args.out}")
        return 0

    op_db = load_op_db()
    names = [n.strip() for n in args.ops.split(",") if n.strip()] if args.ops else None
    ops = select_ops(op_db, names)
    dtypes = _parse_dtypes(args.dtypes)
    t0 = time.perf_counter()

    def report(res):
        if not args.quiet:
            print(op_line(res), flush=True)

    if args.no_isolate:
        results = sweep_in_process(ops, dtypes, args.samples, not args.no_error_inputs, report)
    else:
        results = sweep_isolated(ops, dtypes, args, report)
    elapsed = time.perf_counter() - t0
    t = totals(results)
    print()
    for line in total_lines(t, elapsed):
        print(line)
    print("\nby category (run on CPU / pass / of which property / pass no fallback / fail / "
          "error):")
    for k, c in t["by_category"].items():
        print(f"  {k:<20} {c['ran_on_cpu']:5d} {c['pass']:5d} {c['pass_property']:5d} "
              f"{c['pass_no_fallback']:5d} "
              f"{c['fail']:5d} {c['error'] + c['crash'] + c['timeout']:5d}")
    command = "python -m torch_tpu.tools.coverage " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:]))
    if args.out:
        write_markdown(args.out, results, t, command.strip(), elapsed, args.samples)
        print(f"wrote {args.out}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"command": command.strip(), "torch": torch.__version__,
                       "samples_per_pair": args.samples, "seconds": round(elapsed, 1),
                       "tolerances": {dtype_name(k): v for k, v in TOLERANCES.items()},
                       "totals": t, "results": results}, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
