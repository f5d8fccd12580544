"""DEFER_AND_FUSE: eager semantics, deferred and fused execution.

Every test runs the same program in strict eager (or on the CPU) and in
DEFER_AND_FUSE mode and compares results, and checks the flush points the
mode documents through ``torch_tpu.defer_metrics()`` / ``defer_cuts()``.
"""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu import EagerMode

from conftest import TPU, assert_same, check_result, make, run_checks

DEFER = EagerMode.DEFER_AND_FUSE


@pytest.fixture(autouse=True)
def _clean_defer_state():
    """Each test starts from strict eager globally (the suite may run under
    TORCH_TPU_DEFER_AND_FUSE=1) with fresh metrics."""
    previous = torch_tpu._internal.execution_mode._global_mode
    torch_tpu.set_global_eager_mode(EagerMode.DEFER_NEVER)
    torch.tpu.synchronize()
    torch_tpu.reset_defer_metrics()
    yield
    torch.tpu.synchronize()
    torch_tpu.set_global_eager_mode(previous)


def _reasons():
    return torch_tpu.defer_metrics()["flushes_by_reason"]


@torch.library.custom_op("tpu_test::cpu_only_double", mutates_args=(), device_types="cpu")
def _cpu_only_double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


# ---- results equal strict eager -------------------------------------------------------


def _gelu_chain(x, w, b):
    return F.gelu(x @ w + b) * 0.5 + x


def _residual_layernorm(x, r, weight, bias):
    h = x + r
    return F.layer_norm(h, (h.shape[-1],), weight, bias) * 2 - 1


def _rmsnorm_silu_gate(x, g, up, weight):
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
    return F.silu(h * g) * up


def _fused_rmsnorm_silu(x, g, weight):
    return F.rms_norm(x, weight.shape, weight, eps=1e-6) * F.silu(g)


def _layernorm_stats(x, r, weight, bias):  # mean and rstd written to memory
    out, mean, rstd = torch.ops.aten.native_layer_norm(x * r, weight.shape, weight, bias, 1e-5)
    return torch.cat([out.flatten(), mean.flatten(), rstd.flatten()])


def _rmsnorm_stats(x, weight):
    out, rstd = torch.ops.aten._fused_rms_norm(x - 1.5, weight.shape, weight, None)
    return torch.cat([out.flatten(), rstd.flatten()])


@pytest.mark.parametrize("fn,shapes", [
    (_gelu_chain, [(4, 33, 64), (64, 64), (64,)]),
    (_residual_layernorm, [(3, 17, 96), (3, 17, 96), (96,), (96,)]),
    (_residual_layernorm, [(70, 1000), (1, 1000), (1000,), (1000,)]),  # broadcast rows
    (_rmsnorm_silu_gate, [(2, 65, 128), (2, 65, 128), (2, 65, 128), (128,)]),
    (_fused_rmsnorm_silu, [(2, 33, 640), (2, 33, 640), (640,)]),
    (_layernorm_stats, [(5, 7, 200), (5, 7, 200), (200,), (200,)]),
    (_rmsnorm_stats, [(9, 300), (300,)]),
])
def test_chains_match_strict_and_fuse(fn, shapes):
    args = [make(s, seed=i) for i, s in enumerate(shapes)]
    dev = [a.to(TPU) for a in args]
    strict = fn(*dev).cpu()
    with torch_tpu.set_eager_mode(DEFER):
        out = fn(*dev)
        deferred = out.cpu()
    assert_same(deferred, strict, exact=True)
    assert_same(deferred, fn(*args), atol=1e-5, rtol=1e-5)
    m = torch_tpu.defer_metrics()
    assert m["fused_kernels"] >= 1 and m["fused_nodes"] >= 2, m
    assert m["elided_buffers"] >= 1, m


def _roof_gelu(x, g):
    return x + 0.5 * F.gelu(x * 1.7 + 0.1)


def _roof_gelu_tanh(x, g):
    return x + 0.5 * F.gelu(x * 1.7 + 0.1, approximate="tanh")


def _roof_rms_silu(x, g):
    return F.rms_norm(x, (x.shape[-1],)) * F.silu(g)


@pytest.mark.parametrize("fn", [_roof_gelu, _roof_gelu_tanh, _roof_rms_silu])
@pytest.mark.parametrize("rows", [37, 3100])
def test_roof_chains_match_strict(fn, rows):
    """bench_roof.py's chains (scalar mul and add, gelu, rms_norm, silu): one
    fused program, bit-identical to strict eager. 3100 rows of 1024 puts
    over 32 MiB of operands in the group, so its output is written with
    streaming stores where the last-level cache is 32 MiB or less."""
    x, g = make((rows, 1024), seed=0), make((rows, 1024), seed=1)
    dx, dg = x.to(TPU), g.to(TPU)
    strict = fn(dx, dg).cpu()
    torch_tpu.reset_defer_metrics()
    with torch_tpu.set_eager_mode(DEFER):
        deferred = fn(dx, dg).cpu()
    assert_same(deferred, strict, exact=True)
    assert_same(deferred, fn(x, g), atol=1e-5, rtol=1e-5)
    m = torch_tpu.defer_metrics()
    assert m["fused_kernels"] == 1 and m["fused_nodes"] >= 3, m


def _llama_rmsnorm(x, w):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * h.to(x.dtype)


def _softmax_epilogue(x, r):
    return torch.softmax(x * 0.125 + r, dim=-1) * 2.0 - 1.0


def _softmax_dim1(x, r):  # rows are dim 0 only; dims 2 and 3 stay whole
    return torch.softmax(x + r, dim=1).mul(3.0)


def _centre_var(x, r):  # keepdim=False reduction unsqueezed back, var, sum
    h = x - r
    c = h - h.mean(dim=-1).unsqueeze(-1)
    return c / (c.var(dim=-1, keepdim=True) + 1.0).sqrt() + h.sum(-1, keepdim=True)


def _log_softmax_lse(x, r):
    return torch.log_softmax(x, -1).exp() + torch.logsumexp(x + r, -1, keepdim=True)


@pytest.mark.parametrize("fn,shapes,fused", [
    (_llama_rmsnorm, [(3, 37, 96), (96,)], 6),
    (_softmax_epilogue, [(2, 4, 33, 70), (2, 4, 33, 70)], 5),
    (_softmax_dim1, [(5, 6, 7, 9), (5, 6, 7, 9)], 3),
    (_centre_var, [(4, 300), (4, 300)], None),
    (_log_softmax_lse, [(130, 257), (130, 257)], None),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_row_local_groups_match_strict(fn, shapes, fused, dtype):
    """Reductions over trailing dims, softmax and norms run by blocks of rows
    with their pointwise neighbours: bit-identical to strict eager."""
    args = [make(s, dtype=dtype, seed=i) for i, s in enumerate(shapes)]
    dev = [a.to(TPU) for a in args]
    strict = fn(*dev).cpu()
    torch_tpu.reset_defer_metrics()
    with torch_tpu.set_eager_mode(DEFER):
        deferred = fn(*dev).cpu()
    assert_same(deferred, strict, exact=True)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype != torch.bfloat16 else dict(atol=3e-2, rtol=3e-2)
    assert_same(deferred, fn(*args), **tol)
    m = torch_tpu.defer_metrics()
    if fused is not None and dtype == torch.float32:  # other dtypes add conversions
        assert m["fused_kernels"] == 1 and m["fused_nodes"] == fused, m
    assert m["fused_kernels"] >= 1 and m["elided_buffers"] >= 1, m


def test_row_group_with_in_place_updates_and_views():
    """In-place writes inside a row group (x += 1 then softmax(x), x *= 2),
    and a transposed read that must cut the group."""
    x0 = make((24, 40), seed=3)
    def f(x):
        x.add_(1.0)
        s = torch.softmax(x, -1)
        x.mul_(2.0)
        t = x.t().contiguous().t()  # a copy through a transposed view
        return s + x.mean(-1, keepdim=True) + t
    strict = f(x0.clone().to(TPU)).cpu()
    with torch_tpu.set_eager_mode(DEFER):
        deferred = f(x0.clone().to(TPU)).cpu()
    assert_same(deferred, strict, exact=True)
    assert_same(deferred, f(x0.clone()), atol=1e-5, rtol=1e-5)


def test_dtypes_and_broadcasting_match_strict():
    for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.int32):
        x = make((5, 1, 40), dtype=dtype, seed=1).to(TPU)
        y = make((7, 40), dtype=dtype, seed=2).to(TPU)
        def f(a, b):
            return ((a + b) * 3 - b).abs() + (a * b)
        strict = f(x, y).cpu()
        with torch_tpu.set_eager_mode(DEFER):
            deferred = f(x, y).cpu()
        assert_same(deferred, strict, exact=True)


def test_broadcast_dims_with_nonzero_strides_match_cpu():
    """A broadcast operand whose size-1 dims keep real strides (w.view(1, -1),
    w[None], m[:1]) is read as broadcast on every fused path; the tiled
    direct path once stepped by such a stride and read past the vector
    (DoRA's magnitude scale in PEFT's backward)."""
    g, w, m = make((32, 64), seed=1), make((64,), seed=2), make((32, 64), seed=3)
    cases = {
        "row_view": lambda g, w, m: (g * w.view(1, -1)) * g,
        "row_index": lambda g, w, m: (g + w[None]).relu() * 2,
        "first_row": lambda g, w, m: ((g - m[:1]) * 3).tanh(),
    }
    for name, f in cases.items():
        want = f(g, w, m)
        with torch_tpu.set_eager_mode(DEFER):
            got = f(g.to(TPU), w.to(TPU), m.to(TPU)).cpu()
        assert_same(got, want, atol=1e-6, rtol=1e-6)  # case: name


# ---- flush triggers ---------------------------------------------------------------------


def test_host_reads_flush():
    x = torch.ones(10, device=TPU)
    with torch_tpu.set_eager_mode(DEFER):
        y = x * 3
        assert torch_tpu.defer_metrics()["flushes"] == 0  # recorded, not run
        assert y.sum().item() == 30.0
        assert _reasons()["copy_to_host"] == 1
        z = y + 1
        assert z.tolist() == [4.0] * 10
        assert _reasons()["copy_to_host"] == 2
        w = z * 2
        assert "8." in str(w)  # printing reads values (several flushes)
        assert _reasons()["copy_to_host"] >= 3


def test_synchronize_events_and_explicit_flush():
    x = torch.ones(10, device=TPU)
    with torch_tpu.set_eager_mode(DEFER):
        y = x + 1
        torch.tpu.synchronize()
        assert _reasons()["synchronize"] == 1
        y.mul_(2)
        ev = torch.tpu.Event()
        ev.record()
        assert _reasons()["event"] == 1
        ev.synchronize()
        y.add_(1)
        torch_tpu.flush()
        assert _reasons()["explicit"] == 1
    assert y.cpu().tolist() == [5.0] * 10


def test_fallback_flushes_and_names_the_op():
    x = torch.arange(6.0, device=TPU)
    with torch_tpu.set_eager_mode(DEFER):
        y = x + 1
        z = _cpu_only_double(y)  # no tpu kernel: the counted CPU fallback
        assert _reasons()["fallback"] == 1
        out = (z - 1).cpu()
    assert out.tolist() == [(v + 1) * 2 - 1 for v in range(6)]


def test_size_limit_cuts_long_graphs():
    torch_tpu.set_defer_max_nodes(8)
    try:
        x = torch.zeros(100, device=TPU)
        with torch_tpu.set_eager_mode(DEFER):
            for _ in range(20):
                x.add_(1)
            assert _reasons()["size_limit"] == 2
            assert x.cpu()[0].item() == 20
    finally:
        torch_tpu.set_defer_max_nodes(1024)


def test_pipeline_cut_follows_heavy_work_not_each_heavy_op():
    """A GEMM cuts the graph (reason "pipeline") once the GEMMs since the last
    cut touched 256Ki elements: ten small ones (3 x 64 x 64 elements each)
    do not, then one large one (3 x 512 x 512) does. The cut waits for the
    pointwise nodes after the GEMM (its epilogue: 16 at most) and comes
    before the next other node; with epilogues off, right after the GEMM."""
    small = [torch.randn(64, 64, device=TPU) / 8 for _ in range(2)]
    big = [torch.randn(512, 512, device=TPU) for _ in range(2)]
    with torch_tpu.set_eager_mode(DEFER):
        h = small[0]
        for _ in range(10):
            h = (h @ small[1]).tanh()
        assert _reasons()["pipeline"] == 0
        out = big[0] @ big[1]
        out = out.relu() * 0.5
        assert _reasons()["pipeline"] == 0
        h = h @ small[1]
        assert _reasons()["pipeline"] == 1
        got_h, got = h.cpu(), out.cpu()
    assert torch_tpu.defer_metrics()["gemm_epilogues"] >= 1
    want_h = small[0].cpu()
    for _ in range(10):
        want_h = (want_h @ small[1].cpu()).tanh()
    assert_same(got_h, want_h @ small[1].cpu(), atol=1e-4, rtol=1e-3)
    assert_same(got, (big[0].cpu() @ big[1].cpu()).relu() * 0.5, atol=1e-3, rtol=1e-4)


def test_pipeline_cut_waits_for_at_most_16_pointwise_nodes():
    big = [torch.randn(512, 512, device=TPU) for _ in range(2)]
    with torch_tpu.set_eager_mode(DEFER):
        out = big[0] @ big[1]
        for i in range(16):
            assert _reasons()["pipeline"] == 0, i
            out = out * 0.5
        assert _reasons()["pipeline"] == 1
        got = out.cpu()
    assert_same(got, (big[0].cpu() @ big[1].cpu()) * 0.5 ** 16, atol=1e-6, rtol=1e-4)


def test_pipeline_cut_right_after_the_gemm_without_epilogues():
    from torch_tpu import _C
    big = [torch.randn(512, 512, device=TPU) for _ in range(2)]
    _C.set_gemm_epilogues(False)
    try:
        with torch_tpu.set_eager_mode(DEFER):
            out = big[0] @ big[1]
            assert _reasons()["pipeline"] == 1
            got = out.relu().cpu()
    finally:
        _C.set_gemm_epilogues(True)
    assert torch_tpu.defer_metrics()["gemm_epilogues"] == 0
    assert_same(got, (big[0].cpu() @ big[1].cpu()).relu(), atol=1e-3, rtol=1e-4)


def test_leaving_the_mode_flushes():
    x = torch.ones(4, device=TPU)
    with torch_tpu.set_eager_mode(DEFER):
        x.mul_(5)
    assert _reasons()["mode_switch"] == 1
    assert x.cpu().tolist() == [5.0] * 4


# ---- semantics: aliasing, in-place, interleaving ---------------------------------------


def test_views_and_inplace_on_graph_inputs():
    def prog(base):
        v = base.view(4, 6)
        v[1].add_(10)              # in place through a view
        t = base.t()               # transposed alias, read after the write
        base.mul_(2)               # in place on the graph input
        out = t * 1 + v.sum(0)     # reads both aliases after the update
        base[:, 0] = -1            # strided write into the input
        return out, base
    a = make((6, 4), seed=3)
    strict = [r.cpu() for r in prog(a.to(TPU))]
    with torch_tpu.set_eager_mode(DEFER):
        deferred = [r.cpu() for r in prog(a.to(TPU))]
    cpu = prog(a.clone())
    for d, s, c in zip(deferred, strict, cpu):
        assert_same(d, s, exact=True)
        assert_same(d, c)


def test_interleaving_with_fallbacks_and_mode_switches():
    x = make((3, 8), seed=4)
    def prog(t):
        a = t * 2 + 1
        b = _cpu_only_double(a)
        with torch_tpu.set_eager_mode(EagerMode.DEFER_NEVER):
            c = b - t            # strict op in the middle: flushes first
        d = (c * c).relu()
        return d
    strict = prog(x.to(TPU)).cpu()
    with torch_tpu.set_eager_mode(DEFER):
        deferred = prog(x.to(TPU)).cpu()
    assert_same(deferred, strict, exact=True)
    assert_same(deferred, prog(x))


def test_same_program_same_cuts():
    def prog():
        x = torch.arange(64.0, device=TPU).reshape(8, 8)
        for i in range(5):
            x = (x * 1.5 - i).tanh() + x
            if i % 2:
                _ = x.sum().item()
        return x.cpu()
    with torch_tpu.set_eager_mode(DEFER):
        torch_tpu.reset_defer_metrics()
        first_out = prog()
        first = torch_tpu.defer_cuts()
        torch_tpu.reset_defer_metrics()
        second_out = prog()
        second = torch_tpu.defer_cuts()
    assert first == second and len(first) >= 3
    assert_same(first_out, second_out, exact=True)


# ---- autograd, RNG, memory, caching -----------------------------------------------------


def test_autograd_and_rng_match_strict():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Dropout(0.3),
                                torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)).to(TPU)
    x = make((8, 16), seed=5).to(TPU)

    def step():
        torch.manual_seed(0)
        model.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        return loss.detach().cpu(), [p.grad.cpu() for p in model.parameters()]
    strict_loss, strict_grads = step()
    torch_tpu.set_global_eager_mode(DEFER)  # backward runs on autograd's thread
    try:
        loss, grads = step()
    finally:
        torch_tpu.set_global_eager_mode(EagerMode.DEFER_NEVER)
    assert_same(loss, strict_loss, exact=True)
    for g, s in zip(grads, strict_grads):
        assert_same(g, s, exact=True)
    assert torch_tpu.defer_metrics()["nodes_recorded"] >= 16  # forward and backward


def test_dead_intermediates_lower_peak_memory():
    x = torch.randn(512, 1024, device=TPU)  # 2 MiB

    def prog():
        y = (x * 2 + 1).sigmoid() * x - 3   # four 2 MiB intermediates
        return y.sum().item()
    peaks = {}
    for mode in (EagerMode.DEFER_NEVER, DEFER):
        torch.tpu.synchronize()
        base = torch.tpu.memory_allocated()
        torch.tpu.reset_peak_memory_stats()
        with torch_tpu.set_eager_mode(mode):
            value = prog()
        torch.tpu.synchronize()
        peaks[mode] = torch.tpu.max_memory_allocated() - base
        assert torch.tpu.memory_allocated() == base
        peaks[(mode, "value")] = value
    assert peaks[DEFER] < peaks[EagerMode.DEFER_NEVER], peaks
    assert abs(peaks[(DEFER, "value")] - peaks[(EagerMode.DEFER_NEVER, "value")]) < 1e-2
    assert torch_tpu.defer_metrics()["elided_bytes"] >= 3 * 2 * 1024 * 1024


def test_reused_range_counts_once_in_peak():
    """A buffer written and freed inside a deferred graph, whose range a later
    buffer of the same graph reuses and keeps past the flush: the peak counts
    each tenant only while it holds the range (it had counted the later one
    from the earlier one's write, above strict eager's figure)."""
    x = torch.randn(256, 1024, device=TPU)  # 1 MiB

    def prog():
        a = x.cumsum(1)      # written, then dies
        b = a.cumsum(1)
        del a
        c = b.cumsum(1)      # allocated into a's block: alive at the end
        return b, c
    peaks, outs = {}, {}
    for mode in (EagerMode.DEFER_NEVER, DEFER):
        torch.tpu.synchronize()
        base = torch.tpu.memory_allocated()
        torch.tpu.reset_peak_memory_stats()
        with torch_tpu.set_eager_mode(mode):
            outs[mode] = prog()
        torch.tpu.synchronize()
        peaks[mode] = torch.tpu.max_memory_allocated() - base
        assert torch.tpu.memory_allocated() - base == 2 * 1024 * 1024
        del outs[mode]
    assert peaks[DEFER] == peaks[EagerMode.DEFER_NEVER] == 2 * 1024 * 1024, peaks


@pytest.mark.parametrize("shape,kwargs", [
    ((64, 1000), dict()),
    ((64, 1000), dict(reduction="sum", ignore_index=3)),
    ((64, 1000), dict(reduction="none", weight=True)),
    ((4, 10, 3, 5), dict(weight=True)),                    # nll_loss2d: classes in dim 1
])
def test_cross_entropy_backward_fuses_and_matches_cpu(shape, kwargs):
    """log_softmax_backward(nll_loss_backward(...)) is one row group: the
    one-hot gradient between them stays in scratch (never written), and the
    gradient equals PyTorch CPU's."""
    torch.manual_seed(0)
    x = torch.randn(*shape)
    t = torch.randint(0, shape[1], (shape[0],) + shape[2:])
    kwargs = dict(kwargs)
    w = torch.rand(shape[1]) + 0.5 if kwargs.pop("weight", False) else None

    def run(dev):
        xd = x.to(dev, copy=True).requires_grad_()
        loss = F.cross_entropy(xd, t.to(dev), weight=None if w is None else w.to(dev), **kwargs)
        loss.backward(torch.ones_like(loss))
        return loss.detach(), xd.grad
    want = run("cpu")
    torch_tpu.reset_defer_metrics()
    torch_tpu.set_global_eager_mode(DEFER)  # backward runs on autograd's thread
    try:
        got = run(TPU)
        torch.tpu.synchronize()
    finally:
        torch_tpu.set_global_eager_mode(EagerMode.DEFER_NEVER)
    assert_same(got, want, atol=1e-5, rtol=1e-5)
    one_hot = 4 * x.numel()  # the nll_loss_backward output: elided
    assert torch_tpu.defer_metrics()["elided_bytes"] >= one_hot


def test_cross_entropy_backward_lowers_peak():
    x = torch.randn(512, 2048, device=TPU, requires_grad=True)  # 4 MiB
    t = torch.randint(0, 2048, (512,), device=TPU)
    peaks = {}
    for mode in (EagerMode.DEFER_NEVER, DEFER):
        torch_tpu.set_global_eager_mode(mode)
        try:
            loss = F.cross_entropy(x, t)
            torch.tpu.synchronize()
            torch.tpu.reset_peak_memory_stats()
            base = torch.tpu.memory_allocated()
            loss.backward()
            torch.tpu.synchronize()
        finally:
            torch_tpu.set_global_eager_mode(EagerMode.DEFER_NEVER)
        peaks[mode] = torch.tpu.max_memory_allocated() - base
        x.grad = None
    # strict: the one-hot gradient and the input gradient together; DEFER: the latter only
    assert peaks[DEFER] + 4 * 1024 * 1024 <= peaks[EagerMode.DEFER_NEVER], peaks


@pytest.mark.parametrize("opt_cls,kwargs", [
    (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
    (torch.optim.Adam, dict(lr=1e-2, amsgrad=True)),
    (torch.optim.SGD, dict(lr=1e-2, momentum=0.9, nesterov=True)),
])
def test_foreach_optimizer_step_fuses_per_tensor_and_lowers_peak(opt_cls, kwargs):
    """A foreach optimizer records each op over the whole parameter list;
    the fusion compiler's schedule phase regroups the ops per tensor, so the
    step equals strict eager bit for bit and its parameter-sized temporaries
    (Adam's sqrt(v) list) stay in scratch instead of raising the peak."""
    shapes = [(256, 512), (512,), (512, 256), (7, 33), (1024, 64)]

    def run(mode):
        params = [torch.nn.Parameter(make(s, seed=i).to(TPU)) for i, s in enumerate(shapes)]
        opt = opt_cls(params, foreach=True, **kwargs)
        peaks = []
        for step in range(3):
            for i, p in enumerate(params):
                p.grad = make(p.shape, seed=10 * step + i).to(TPU)
            torch.tpu.synchronize()
            base = torch.tpu.memory_allocated()
            torch.tpu.reset_peak_memory_stats()
            with torch_tpu.set_eager_mode(mode):
                opt.step()
            torch.tpu.synchronize()
            peaks.append(torch.tpu.max_memory_allocated() - base)
        return [p.detach().cpu() for p in params], peaks
    strict, strict_peaks = run(EagerMode.DEFER_NEVER)
    torch_tpu.reset_defer_metrics()
    fused, fused_peaks = run(DEFER)
    for a, b in zip(fused, strict):
        assert_same(a, b, exact=True)
    m = torch_tpu.defer_metrics()
    assert m["fused_kernels"] >= 3 * len(shapes)
    if opt_cls is not torch.optim.SGD:  # Adam's temporaries: one parameter-sized list
        assert max(fused_peaks[1:]) < max(strict_peaks[1:]), (fused_peaks, strict_peaks)
        assert m["elided_bytes"] >= 2 * sum(4 * torch.Size(s).numel() for s in shapes)


def test_unwritten_allocation_freed_before_a_flush_is_never_counted():
    torch.tpu.reset_accumulated_memory_stats()
    with torch_tpu.set_eager_mode(DEFER):
        t = torch.empty(1000, device=TPU)
        del t
        u = torch.empty(1000, device=TPU)
        stats = torch.tpu.memory_stats()  # reading the statistics counts live blocks
        assert stats["allocation.all.allocated"] == 1
        assert stats["allocated_bytes.all.current"] >= 4096
        del u


def test_growing_shapes_reuse_programs():
    """A decode-like loop: the sequence grows every step, the structure does
    not, so programs are compiled in the first steps only."""
    cache = torch.zeros(1, 0, 32, device=TPU)
    w = make((32, 32), seed=6).to(TPU)
    compiled = []
    with torch_tpu.set_eager_mode(DEFER):
        for step in range(12):
            tok = torch.full((1, 1, 32), float(step), device=TPU)
            cache = torch.cat([cache, tok], dim=1)
            h = F.silu(cache @ w) * 0.1 + cache
            _ = h[:, -1].sum().item()
            compiled.append(torch_tpu.defer_metrics()["programs_compiled"])
    assert compiled[-1] == compiled[3], compiled
    assert torch_tpu.defer_metrics()["cache_hits"] >= 8


def test_async_errors_surface_at_sync_and_name_the_op():
    a = torch.tensor([1, 2, 3], device=TPU)
    with torch_tpu.set_eager_mode(DEFER):
        b = a // 0
        c = b + 1
        with pytest.raises(RuntimeError, match="div"):
            c.cpu()
    # the stream works again afterwards
    assert (a + 1).cpu().tolist() == [2, 3, 4]


def test_environment_variable_selects_the_mode():
    results = run_checks("""
        @check
        def env_mode():
            assert torch_tpu.get_eager_mode() is torch_tpu.EagerMode.DEFER_AND_FUSE
            x = torch.ones(4, device="tpu") * 2
            assert torch_tpu.defer_metrics()["flushes"] == 0
            assert x.cpu().tolist() == [2.0] * 4
            assert torch_tpu.defer_metrics()["flushes_by_reason"]["copy_to_host"] == 1
    """, TORCH_TPU_DEFER_AND_FUSE="1")
    check_result(results, "env_mode")


def test_collectives_are_flush_points():
    results = run_checks("""
        import tempfile
        import torch.distributed as dist

        @check
        def collective_flushes():
            store = dist.FileStore(tempfile.mktemp(), 1)
            dist.init_process_group("tpu_dist", store=store, rank=0, world_size=1)
            try:
                x = torch.ones(4, device="tpu")
                with torch_tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
                    y = x * 3
                    assert torch_tpu.defer_metrics()["flushes"] == 0
                    dist.all_reduce(y)  # runs after the recorded x * 3, in stream order
                    assert torch_tpu.defer_metrics()["flushes_by_reason"]["host_fn"] == 1
                    assert (y + 1).cpu().tolist() == [4.0] * 4
            finally:
                dist.destroy_process_group()
    """)
    check_result(results, "collective_flushes")


# ---- GEMM epilogues --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gemm_epilogue_folds_bias_activation_and_residual(dtype):
    """A linear layer's bias, GELU and residual add (over its 3-D view of the
    2-D GEMM result) run inside the GEMM as its epilogue: the same values as
    strict eager, bit for bit, and as the CPU's; defer_metrics counts it."""
    lin = torch.nn.Linear(64, 96).to(TPU, dtype)
    x = make((2, 33, 64), seed=1).to(TPU, dtype)
    r = make((2, 33, 96), seed=2).to(TPU, dtype)

    def f(lin, x, r):
        return F.gelu(lin(x)) * 0.5 + r

    strict = f(lin, x, r).cpu()
    torch_tpu.reset_defer_metrics()
    with torch_tpu.set_eager_mode(DEFER):
        deferred = f(lin, x, r).cpu()
    m = torch_tpu.defer_metrics()
    assert m["gemm_epilogues"] == 1 and m["epilogue_nodes"] == 3, m
    assert_same(deferred, strict, exact=True)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert_same(deferred, f(lin.cpu(), x.cpu(), r.cpu()), atol=tol, rtol=tol)


def test_gemm_epilogue_off_gives_the_same_values():
    from torch_tpu import _C
    a, b, r = make((48, 40), seed=3).to(TPU), make((40, 56), seed=4).to(TPU), make((56,), seed=5).to(TPU)
    outs = {}
    for on in (True, False):
        _C.set_gemm_epilogues(on)
        try:
            torch_tpu.reset_defer_metrics()
            with torch_tpu.set_eager_mode(DEFER):
                outs[on] = ((a @ b).relu() + r).cpu()
            assert torch_tpu.defer_metrics()["gemm_epilogues"] == int(on)
        finally:
            _C.set_gemm_epilogues(True)
    assert_same(outs[True], outs[False], exact=True)
