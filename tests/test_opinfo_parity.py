"""Operator parity against PyTorch's own test data, for CI.

A fixed list of (OpInfo, dtype) pairs that pass today on tpu with no CPU
fallback at all (taken from the full sweep, ``python -m
torch_tpu.tools.coverage``, see docs/coverage.md): each must keep giving the
CPU's results on every sample the OpInfo database makes for it and keep
running natively. The comparison is the tool's own
(:func:`torch_tpu.tools.coverage.check_pair`), so this test and the sweep
cannot drift apart.

A pair that regresses fails here. A pair that is fixed in the sweep can be
added to PAIRS; one that is removed from it on purpose (an op moved to a
fallback, say) is removed here in the same change.
"""
import pytest
import torch

import torch_tpu
from torch_tpu.tools import coverage

# (op_db key: name or name.variant_test_name, dtype)
PAIRS = [
    # elementwise, unary
    ("abs", "float32"), ("abs", "int64"),
    ("neg", "int8"),
    ("exp", "float32"), ("exp", "bfloat16"),
    ("log", "float64"),
    ("sqrt", "float16"),
    ("rsqrt", "float32"),
    ("sin", "float32"), ("sin", "bfloat16"),
    ("tanh", "float16"),
    ("sigmoid", "float32"),
    ("erf", "float32"),
    ("floor", "float32"),
    ("round", "float32"),
    ("reciprocal", "float32"),
    ("sign", "int32"),
    ("bitwise_not", "int64"),
    ("logical_not", "bool"),
    ("nn.functional.relu", "float32"), ("nn.functional.relu", "bfloat16"),
    ("nn.functional.gelu", "float32"),
    ("nn.functional.silu", "bfloat16"),
    # elementwise, binary and ternary
    ("add", "float32"), ("add", "int64"), ("add", "bool"), ("add", "bfloat16"),
    ("sub", "int32"),
    ("mul", "float16"), ("mul", "uint8"),
    ("div.no_rounding_mode", "float32"), ("div.no_rounding_mode", "int64"),
    ("pow", "float32"),
    ("maximum", "float32"),
    ("minimum", "int16"),
    ("eq", "float32"),
    ("lt", "int64"),
    ("ge", "float16"),
    ("bitwise_and", "int32"),
    ("remainder", "float32"),
    ("fmod", "int64"),
    ("logical_and", "bool"),
    ("where", "float32"),
    ("clamp", "float32"),
    # reductions
    ("sum", "float32"), ("sum", "int64"), ("sum", "bfloat16"),
    ("mean", "float32"), ("mean", "float16"),
    ("prod", "int32"),
    ("amax", "float32"),
    ("amin", "int64"),
    ("argmax", "float32"),
    ("argmin", "bfloat16"),
    ("all", "bool"),
    ("any", "float32"),
    ("var", "float32"),
    ("std", "float64"),
    ("max.reduction_with_dim", "float32"),
    ("logsumexp", "float32"),
    ("histogramdd", "float32"), ("histogram", "float64"),
    # matmul
    ("mm", "float32"), ("mm", "bfloat16"), ("mm", "float64"),
    ("bmm", "float32"),
    ("addmm", "float32"), ("addmm", "bfloat16"),
    ("baddbmm", "float32"),
    ("mv", "float32"),
    ("dot", "int64"),
    ("matmul", "float32"), ("matmul", "bfloat16"),
    ("nn.functional.linear", "float32"),
    # softmax, layer_norm, losses
    ("softmax", "float32"), ("softmax", "bfloat16"),
    ("log_softmax", "float32"),
    ("_softmax_backward_data", "float32"),
    ("nn.functional.layer_norm", "float32"), ("nn.functional.layer_norm", "bfloat16"),
    ("native_layer_norm", "float32"),
    ("nn.functional.nll_loss", "float32"),
    ("nn.functional.cross_entropy", "float32"),
    # indexing
    ("index_select", "float32"), ("index_select", "int64"), ("index_select", "bool"),
    ("take_along_dim", "float32"),
    ("scatter_add", "float32"),
    ("index_add", "bfloat16"),
    # cat and friends, copies, views
    ("cat", "float32"), ("cat", "bool"), ("cat", "bfloat16"),
    ("stack", "int64"),
    ("to", "bfloat16"),
    ("clone", "float32"),
    ("contiguous", "int8"),
    ("permute", "float32"),
    ("transpose", "float16"),
]


@pytest.fixture(scope="module")
def op_by_key():
    return {coverage.op_key(op): op for op in coverage.load_op_db()}


def test_pairs_are_unique_and_known(op_by_key):
    assert len(set(PAIRS)) == len(PAIRS)
    for key, dtype in PAIRS:
        assert key in op_by_key, f"{key} is not in op_db"
        assert coverage.DTYPE_NAMES[dtype] in coverage.op_dtypes(op_by_key[key]), \
            f"op_db does not list {dtype} for {key} on the CPU"


@pytest.mark.parametrize("key,dtype", PAIRS, ids=[f"{k}-{d}" for k, d in PAIRS])
def test_parity(op_by_key, key, dtype):
    rec = coverage.check_pair(op_by_key[key], coverage.DTYPE_NAMES[dtype])
    assert rec["cpu_ran"] > 0, f"no sample of {key} {dtype} runs on the CPU: {rec['message']}"
    assert rec["status"] == "pass", (
        f"{key} {dtype}: {rec['status']} ({rec['passed']}/{rec['cpu_ran']} samples pass): "
        f"{rec['message']}")
    assert not rec["fallbacks"], f"{key} {dtype} fell back to the CPU: {rec['fallbacks']}"


# ---- the comparison itself catches what it must ---------------------------------------


def _sample(*args, **kwargs):
    from torch.testing._internal.opinfo.core import SampleInput
    return SampleInput(*args, **kwargs)


def test_compare_catches_wrong_values_shapes_dtypes():
    x = torch.tensor([1.0, 2.0, float("nan")])
    assert coverage.compare(x.clone(), x) is None                       # NaN == NaN
    assert "differ" in coverage.compare(torch.tensor([1.0, 2.1, float("nan")]), x)
    assert "differ" in coverage.compare(torch.tensor([1.0, 2.0, 0.0]), x)
    assert "shape" in coverage.compare(x[:2], x)
    assert "dtype" in coverage.compare(x.double(), x)
    i = torch.tensor([3, 4], dtype=torch.int64)
    assert "exact" in coverage.compare(torch.tensor([3, 5]), i)
    assert coverage.compare((x, i), [x, i]) is None                     # tuple vs list
    assert coverage.compare((x, i), (x, i + 1)) is not None
    # half types: PyTorch's compare-with-CPU tolerance
    h = torch.tensor([1.0], dtype=torch.float16)
    assert coverage.compare(h + 0.0009765625, h) is None
    assert coverage.compare(h + 0.0078125, h) is not None


def test_half_types_differing_from_cpu_are_judged_by_float64():
    """A bfloat16 result far from the CPU's passes when it is as close as the
    CPU's to the float64 computation of the sample (the CPU's own bfloat16
    rounding varies with its kernels), and fails when it is not."""
    x = torch.linspace(-1, 1, 50).to(torch.bfloat16)
    # on the CPU in bfloat16: 100 + t rounds t to multiples of 0.5 (the
    # float64 run is exact); on tpu: exact
    lossy_cpu = lambda t: t * 3 if t.device.type == "tpu" else (t + 100 - 100) * 3  # noqa: E731
    assert coverage.check_sample(lossy_cpu, _sample(x))[0] == "pass"
    wrong_tpu = lambda t: (t + 100 - 100) * 3 + (0.25 if t.device.type == "tpu" else 0)  # noqa: E731
    assert coverage.check_sample(wrong_tpu, _sample(x))[0] == "fail"


def test_check_sample_flags_wrong_results_and_fallbacks():
    x = torch.randn(4, 5)
    wrong = lambda t: t + (1 if t.device.type == "tpu" else 0)  # noqa: E731
    assert coverage.check_sample(wrong, _sample(x))[0] == "fail"
    on_cpu = lambda t: (t * 2).cpu()  # noqa: E731
    status, msg, _ = coverage.check_sample(on_cpu, _sample(x))
    assert status == "fail" and "cpu" in msg
    status, _, fallbacks = coverage.check_sample(torch.add, _sample(x, args=(x,)))
    assert status == "pass" and not fallbacks
    # an op without a native kernel: the pass is recorded with its fallback
    aten, fn = next(((a, f) for a, f in [
        ("histogram", lambda t: torch.histogram(t, bins=4)[0]),
        ("tpu_fb::affine", lambda t: torch.ops.tpu_fb.affine(t)),
    ] if a not in " ".join(torch_tpu.native_ops())), (None, None))
    if aten is None:
        pytest.fail("every candidate has a native kernel now: pick an op that still falls back")
    mode = torch_tpu._C.fallback_mode()
    status, _, fallbacks = coverage.check_sample(fn, _sample(x.abs() + 0.5))
    assert status == "pass" and any(aten in k for k in fallbacks), fallbacks
    assert torch_tpu._C.fallback_mode() == mode  # "silent" only during the run


def test_check_sample_tpu_error_and_cpu_error():
    x = torch.randn(3)

    def only_cpu(t):
        if t.device.type == "tpu":
            raise RuntimeError("boom")
        return t

    status, msg, _ = coverage.check_sample(only_cpu, _sample(x))
    assert status == "error" and "boom" in msg
    status, _, _ = coverage.check_sample(lambda t: t.view(7), _sample(x))
    assert status == "cpu-error"


def test_samples_keep_layout_and_aliasing():
    base = torch.arange(24.0).reshape(4, 6)
    view = base[:, 1::2]                      # strided, offset
    expanded = torch.arange(3.0).expand(4, 3)  # stride 0
    moved = coverage.to_tpu((view, expanded, base, "cpu", {"device": torch.device("cpu")}))
    tv, te, tb, dev, kw = moved
    assert tv.stride() == view.stride() and tv.storage_offset() == view.storage_offset()
    assert te.stride() == expanded.stride()
    assert tv.untyped_storage().data_ptr() == tb.untyped_storage().data_ptr()  # one storage
    assert dev == "tpu" and kw["device"].type == "tpu"
    assert torch.equal(tv.cpu(), view) and torch.equal(te.cpu(), expanded)


# ---- property checks (random and uninitialised outputs) can fail -------------------------


def _prop(fn, sample, key):
    """The verdict of check_sample on fn for a sample, judged as op_db's `key`."""
    return coverage.check_sample(fn, sample, policy="none", prop=key)[:2]


def _on_tpu(t):
    return t.device.type == "tpu"


def test_property_check_passes_real_random_and_empty_ops():
    x = torch.empty(10, 10)
    assert _prop(torch.Tensor.uniform_, _sample(x, args=(-2, 3)), "uniform")[0] == \
        coverage.PASS_PROPERTY
    assert _prop(torch.bernoulli, _sample(torch.rand(6, 7)), "bernoulli")[0] == \
        coverage.PASS_PROPERTY
    assert _prop(torch.empty_strided, _sample((5, 5), args=((1, 5),),
                                              kwargs={"device": "cpu"}),
                 "empty_strided")[0] == coverage.PASS_PROPERTY


def test_property_check_fails_values_outside_the_support():
    def uniform_off(t, lo, hi):  # tpu shifts its draws past `hi`
        r = t.uniform_(lo, hi)
        return r + (hi - lo) if _on_tpu(r) else r
    status, msg = _prop(uniform_off, _sample(torch.empty(50), args=(0, 1)), "uniform")
    assert status == "fail" and "outside" in msg, msg

    def bernoulli_two(p):  # tpu gives 2 where it should give 1
        r = torch.bernoulli(p)
        return r * 2 if _on_tpu(r) else r
    status, msg = _prop(bernoulli_two, _sample(torch.full((20,), 0.5)), "bernoulli")
    assert status == "fail" and "not 0 or 1" in msg, msg

    def randint_high(high, size, device=None):  # tpu reaches `high` itself
        r = torch.randint(high, size, device=device)
        return r + 1 if _on_tpu(r) else r
    status, msg = _prop(randint_high, _sample(4, args=((30,),), kwargs={"device": "cpu"}),
                        "randint")
    assert status == "fail" and "[0, 4)" in msg, msg

    def dropout_wrong_scale(t, p, training):  # kept values x / p instead of x / (1 - p)
        r = torch.nn.functional.dropout(t, p, training)
        return r * (1 - p) / p if _on_tpu(r) else r
    status, msg = _prop(dropout_wrong_scale,
                        _sample(torch.randn(8, 8), args=(0.25, True)), "nn.functional.dropout")
    assert status == "fail" and "neither dropped nor" in msg, msg

    def dropout2d_elementwise(t, p, training):  # tpu drops elements, not channels
        f = torch.nn.functional
        return f.dropout(t, p, training) if _on_tpu(t) else f.dropout2d(t, p, training)
    status, msg = _prop(dropout2d_elementwise,
                        _sample(torch.randn(2, 6, 4, 4), args=(0.5, True)),
                        "nn.functional.dropout2d")
    assert status == "fail" and "partly dropped" in msg, msg

    def multinomial_repeats(p, n, replacement=False):  # tpu draws with replacement
        return torch.multinomial(p, n, replacement=replacement or _on_tpu(p))
    status, msg = _prop(multinomial_repeats, _sample(torch.ones(2, 4), args=(4,)),
                        "multinomial")
    assert status == "fail" and "repeated" in msg, msg


def test_property_check_fails_a_result_the_seed_does_not_decide():
    gen = torch.Generator().manual_seed(0)

    def unseeded(t, lo, hi):  # tpu draws from a generator torch.manual_seed leaves alone
        if _on_tpu(t):
            return (torch.rand(t.shape, generator=gen) * (hi - lo) + lo).to(t.device)
        return t.uniform_(lo, hi)
    status, msg = _prop(unseeded, _sample(torch.empty(40), args=(0, 1)), "uniform")
    assert status == "fail" and "not deterministic" in msg, msg


def test_property_check_fails_a_wrong_distribution():
    def uniform_half(t, lo, hi):  # in [lo, hi), but only its lower half
        return t.uniform_(lo, (lo + hi) / 2) if _on_tpu(t) else t.uniform_(lo, hi)
    status, msg = _prop(uniform_half, _sample(torch.empty(100), args=(0, 1)), "uniform")
    assert status == "fail" and "KS" in msg, msg

    def dropout_most(t, p, training):  # 0 or x / (1 - p), but drops 90%, not p = 50%
        if not _on_tpu(t):
            return torch.nn.functional.dropout(t, p, training)
        keep = (torch.rand(t.shape) >= 0.9).to(t.device)
        return torch.where(keep, t / (1 - p), torch.zeros_like(t))
    status, msg = _prop(dropout_most, _sample(torch.randn(10, 10), args=(0.5, True)),
                        "nn.functional.dropout")
    assert status == "fail" and ("KS" in msg or "mean" in msg), msg

    def normal_shifted(mean, std):  # finite, deterministic, one sigma off
        r = torch.normal(mean, std)
        return r + std if _on_tpu(r) else r
    status, msg = _prop(normal_shifted, _sample(torch.zeros(10, 10), args=(torch.ones(10, 10),)),
                        "normal")
    assert status == "fail" and ("KS" in msg or "mean" in msg), msg


def test_property_check_fails_wrong_metadata_of_empty_outputs():
    def strided_ignored(size, stride, **kw):  # tpu ignores the strides asked for
        return torch.empty(size, **kw) if kw["device"] == "tpu" else \
            torch.empty_strided(size, stride, **kw)
    status, msg = _prop(strided_ignored, _sample((5, 5), args=((1, 5),),
                                                 kwargs={"device": "cpu"}), "empty_strided")
    assert status == "fail" and "strides" in msg, msg

    def like_contiguous(t):  # tpu drops preserve_format's strides
        return torch.empty_like(t, memory_format=torch.contiguous_format) if _on_tpu(t) \
            else torch.empty_like(t)
    status, msg = _prop(like_contiguous, _sample(torch.empty(4, 6).t()), "empty_like")
    assert status == "fail" and "strides" in msg, msg

    def grad_lost(size, **kw):
        return torch.empty(size, **{**kw, "requires_grad": kw["device"] != "tpu"})
    status, msg = _prop(grad_lost, _sample((3,), kwargs={"device": "cpu",
                                                         "dtype": torch.float32}), "empty")
    assert status == "fail" and "requires_grad" in msg, msg


def test_property_rule_the_cpu_breaks_leaves_the_pair_unchecked():
    doubled = lambda p: torch.bernoulli(p) * 2  # noqa: E731  (both sides: the rule is wrong)
    status, msg = _prop(doubled, _sample(torch.full((20,), 0.5)), "bernoulli")
    assert status == "unchecked" and "CPU" in msg, msg


def test_totals_count_property_passes_as_passing():
    pairs = [dict(status=s, fallbacks={}) for s in ("pass", coverage.PASS_PROPERTY,
                                                    "unchecked", "fail")]
    t = coverage.totals([{"op": "x", "category": "other", "pairs": pairs, "errors": None}])
    assert (t["pass"], t["pass_property"], t["unchecked"], t["fail"]) == (2, 1, 1, 1)
    assert any("pass (property):" in ln and " 1 " in ln for ln in coverage.total_lines(t))


def test_property_of_narrowing_conversions_ignores_only_what_does_not_fit():
    x = torch.tensor([1.7, -2.5, 300.0, float("inf")])

    def off_where_undefined(t):  # 300 and inf do not fit int8: any value will do
        r = t.char()
        return torch.where(t.abs() > 127, torch.full_like(r, 5), r) if _on_tpu(t) else r
    assert _prop(off_where_undefined, _sample(x), "char")[0] == coverage.PASS_PROPERTY

    def off_where_defined(t):  # -2.5 fits: it must give -2
        r = t.char()
        return r + (t < 0).char() if _on_tpu(t) else r
    status, msg = _prop(off_where_defined, _sample(x), "char")
    assert status == "fail" and "fit differ" in msg, msg
