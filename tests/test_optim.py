"""The optim family: torch.optim.Adam / AdamW with fused=True (ATen's _fused_adam_ /
_fused_adamw_; Hugging Face's Trainer defaults to it) run natively, one node per
parameter. Each test compares against the same optimizer on CPU (whose fused kernel
PyTorch ships), over several steps, with fallbacks set to raise: every floating
dtype, amsgrad, maximize, weight decay, a tensor learning rate, GradScaler's
grad_scale / found_inf, strict and DEFER_AND_FUSE modes; and the arguments that go
to the CPU kernel (which then raises PyTorch's own errors). Then GradScaler's own
ops (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_), directly and
in a float16 training loop."""
import contextlib

import pytest
import torch

import torch_tpu
from conftest import no_fallback

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
TOL = {torch.float64: 1e-10, torch.float32: 2e-6, torch.bfloat16: 2e-2, torch.float16: 2e-3}
CONFIGS = {
    "default": {},
    "amsgrad_decay": {"amsgrad": True, "weight_decay": 0.1},
    "maximize": {"maximize": True, "weight_decay": 0.02},
    "tensor_lr": {"lr": "tensor"},
}
MODES = {"strict": torch_tpu.EagerMode.DEFER_NEVER, "defer": torch_tpu.EagerMode.DEFER_AND_FUSE}


def _close(got, want, dtype):
    tol = TOL[dtype]
    torch.testing.assert_close(got.cpu().double(), want.double(), atol=tol, rtol=tol)


def _optimizers(cls, dtype, config, shapes=((37, 5), (100,), (3, 4, 5))):
    gen = torch.Generator().manual_seed(0)
    init = [torch.randn(s, generator=gen).to(dtype) for s in shapes]
    pairs = []
    for device in ("cpu", "tpu"):
        params = [p.clone().to(device).requires_grad_() for p in init]
        kw = dict(CONFIGS[config])
        if kw.get("lr") == "tensor":
            kw["lr"] = torch.tensor(0.01)
        pairs.append((params, cls(params, fused=True, **kw)))
    return pairs


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW], ids=lambda c: c.__name__)
def test_fused_adam_matches_cpu(cls, dtype, config, mode):
    (cpu_params, cpu_opt), (tpu_params, tpu_opt) = _optimizers(cls, dtype, config)
    gen = torch.Generator().manual_seed(1)
    with no_fallback(), torch_tpu.set_eager_mode(MODES[mode]):
        for _ in range(3):
            for p, q in zip(cpu_params, tpu_params):
                g = torch.randn(p.shape, generator=gen).to(dtype)
                p.grad, q.grad = g.clone(), g.to("tpu")
            cpu_opt.step()
            tpu_opt.step()
    assert torch_tpu.native_counts().get(f"_fused_{cls.__name__.lower()}_", 0) >= 1 or \
        torch_tpu.native_counts().get(f"_fused_{cls.__name__.lower()}_.tensor_lr", 0) >= 1
    for p, q in zip(cpu_params, tpu_params):
        _close(q.detach(), p.detach(), dtype)
        for key in ("exp_avg", "exp_avg_sq", "step") + (("max_exp_avg_sq",) if "amsgrad" in config else ()):
            _close(tpu_opt.state[q][key], cpu_opt.state[p][key], dtype)


def _direct_args(device, dtype, n=257):
    gen = torch.Generator().manual_seed(2)
    lists = [[torch.randn(n, generator=gen).to(dtype).to(device) for _ in range(2)] for _ in range(3)]
    sq = [torch.rand(n, generator=gen).to(dtype).to(device) for _ in range(2)]
    steps = [torch.tensor(3.0, device=device) for _ in range(2)]
    return lists[0], lists[1], lists[2], sq, [], steps


@pytest.mark.parametrize("found_inf", [0.0, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_grad_scale_and_found_inf(dtype, found_inf):
    """GradScaler's arguments: grads are unscaled in place and the step taken, or
    (found_inf == 1) nothing is written at all."""
    outs = {}
    for device in ("cpu", "tpu"):
        args = _direct_args(device, dtype)
        scale = torch.tensor(256.0, device=device)
        inf = torch.tensor(found_inf, device=device)
        ctx = no_fallback() if device == "tpu" else contextlib.nullcontext()
        with ctx:
            torch._fused_adamw_(*args, lr=1e-2, beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8,
                                amsgrad=False, maximize=False, grad_scale=scale, found_inf=inf)
        outs[device] = args
    before = _direct_args("cpu", dtype)
    for k in range(4):
        for got, want, orig in zip(outs["tpu"][k], outs["cpu"][k], before[k]):
            _close(got, want, dtype)
            if found_inf:
                assert torch.equal(got.cpu(), orig)


def test_other_arguments_fall_back_or_raise_like_cpu():
    """A non-contiguous grad runs on the CPU (counted) with the same result;
    lists of different lengths raise the CPU kernel's RuntimeError."""
    want = _direct_args("cpu", torch.float32)
    got = _direct_args("tpu", torch.float32)
    got[1][0] = torch.stack([got[1][0], got[1][0]], 1)[:, 0]  # same values, stride 2
    kw = dict(lr=1e-2, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False,
              maximize=False)
    torch_tpu.reset_counts()
    torch._fused_adam_(*want, **kw)
    torch._fused_adam_(*got, **kw)
    assert torch_tpu.fallback_counts().get("aten::_fused_adam_", 0) == 1
    for k in (0, 2, 3):
        for a, b in zip(got[k], want[k]):
            _close(a, b, torch.float32)
    bad_cpu, bad_tpu = _direct_args("cpu", torch.float32), _direct_args("tpu", torch.float32)
    errors = []
    for args in (bad_cpu, bad_tpu):
        args[2].pop()
        with pytest.raises(Exception) as e:
            torch._fused_adam_(*args, **kw)
        errors.append(type(e.value))
    assert errors[0] is errors[1]


def test_fused_adamw_trains_a_model_like_cpu():
    """A small MLP over 5 steps: losses equal to CPU's within tolerance."""
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    losses = {}
    for device in ("cpu", "tpu"):
        m = torch.nn.Sequential(*[torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)])
        m.load_state_dict(base.state_dict())
        m.to(device)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2, fused=True)
        ctx = no_fallback() if device == "tpu" else contextlib.nullcontext()
        out = []
        with ctx:
            for _ in range(5):
                loss = torch.nn.functional.mse_loss(m(x.to(device)), y.to(device))
                loss.backward()
                opt.step()
                opt.zero_grad()
                out.append(loss.item())
        losses[device] = out
    torch.testing.assert_close(losses["tpu"], losses["cpu"], atol=1e-5, rtol=1e-5)


# ---- GradScaler: _amp_foreach_non_finite_check_and_unscale_ / _amp_update_scale_ ----

@pytest.mark.parametrize("bad", [None, float("inf"), float("nan")], ids=["finite", "inf", "nan"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_amp_unscale_matches_cpu(dtype, bad):
    """Every gradient is multiplied by inv_scale in place; found_inf turns 1 when
    any of them holds an inf or nan (here the second of three), else stays 0."""
    gen = torch.Generator().manual_seed(3)
    grads = [torch.randn(s, generator=gen).mul(1000).to(dtype) for s in ((37, 5), (40000,), (0,))]
    if bad is not None:
        grads[1][12345] = bad
    results = []
    for device in ("cpu", "tpu"):
        gs = [g.clone().to(device) for g in grads]
        found = torch.zeros(1, device=device)
        inv = torch.full((1,), 1 / 1024, device=device)
        with no_fallback() if device == "tpu" else contextlib.nullcontext():
            torch._amp_foreach_non_finite_check_and_unscale_(gs, found, inv)
        results.append((gs, found))
    (want, want_found), (got, got_found) = results
    assert got_found.item() == want_found.item() == (0.0 if bad is None else 1.0)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.cpu(), b, atol=0, rtol=0, equal_nan=True)


def test_amp_update_scale_matches_cpu():
    """The scale's state machine over a run of steps: grows every growth_interval
    clean steps, backs off and resets on an overflow, keeps a scale whose growth
    would overflow float32."""
    states = []
    for device in ("cpu", "tpu"):
        scale = torch.full((1,), 2.0 ** 127, device=device)
        tracker = torch.zeros(1, dtype=torch.int32, device=device)
        seen = []
        with no_fallback() if device == "tpu" else contextlib.nullcontext():
            for found in (0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0):
                torch._amp_update_scale_(scale, tracker, torch.full((1,), float(found), device=device),
                                         2.0, 0.5, 2)
                seen.append((scale.item(), tracker.item()))
        states.append(seen)
    assert states[0] == states[1]
    assert states[0][1] == (2.0 ** 127, 0)  # growth to 2**128 would overflow: kept


def test_amp_ops_raise_like_cpu():
    """Operands the CPU kernels refuse (a float64 found_inf, a float32 growth
    tracker) raise the CPU's error type and message."""
    messages = []
    for device in ("cpu", "tpu"):
        with pytest.raises(RuntimeError) as e1:
            torch._amp_foreach_non_finite_check_and_unscale_(
                [torch.ones(3, device=device)], torch.zeros(1, dtype=torch.float64, device=device),
                torch.ones(1, device=device))
        with pytest.raises(RuntimeError) as e2:
            torch._amp_update_scale_(torch.ones(1, device=device), torch.zeros(1, device=device),
                                     torch.zeros(1, device=device), 2.0, 0.5, 2)
        messages.append((str(e1.value).splitlines()[0], str(e2.value).splitlines()[0]))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("mode", MODES)
def test_grad_scaler_fp16_training_matches_cpu(mode):
    """torch.amp.GradScaler("tpu") with float16 autocast over 6 steps, one of them
    overflowing (skipped, scale backed off): losses, scales and weights equal CPU's
    and no op falls back."""
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    runs = {}
    for device in ("cpu", "tpu"):
        m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
        m.load_state_dict(base.state_dict())
        m.to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 16, growth_interval=2)
        ctx = contextlib.ExitStack()
        if device == "tpu":
            ctx.enter_context(no_fallback())
            ctx.enter_context(torch_tpu.set_eager_mode(MODES[mode]))
        out = []
        with ctx:
            for step in range(6):
                opt.zero_grad()
                with torch.autocast(device, dtype=torch.float16):
                    loss = torch.nn.functional.mse_loss(m(x.to(device)).float(), y.to(device))
                if step == 3:
                    loss = loss * float("inf")
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                out.append((loss.item(), scaler.get_scale()))
        runs[device] = (out, [p.detach().cpu() for p in m.parameters()])
    (cpu_out, cpu_w), (tpu_out, tpu_w) = runs["cpu"], runs["tpu"]
    assert [s for _, s in tpu_out] == [s for _, s in cpu_out]
    assert tpu_out[3][1] < tpu_out[2][1]  # the overflow backed the scale off
    torch.testing.assert_close([l for l, _ in tpu_out], [l for l, _ in cpu_out], atol=1e-5, rtol=1e-5)
    for a, b in zip(tpu_w, cpu_w):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
