"""Bessel/Airy and igamma special functions, angle/frexp/clamp, the factories
(logspace, arange, tril/triu_indices), isin and _segment_reduce (their OpInfo entries: test_opinfo_native.py):
gradients (where PyTorch defines them)
match CPU autograd with no fallback; tril/triu_indices and isin forms the
OpInfo samples do not reach."""
import pytest
import torch

import torch_tpu


@pytest.fixture
def no_fallback():
    torch_tpu.reset_counts()
    mode = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("error")
    try:
        yield
    finally:
        torch_tpu.set_fallback_mode(mode)
    assert torch_tpu.fallback_counts() == {}


def _grads(fn, *xs):
    """Gradients of sum(fn(*xs) * w) on tpu and on CPU, for the inputs that
    require grad."""
    outs = []
    for dev in ("cpu", "tpu"):
        args = [x.detach().to(dev).requires_grad_(x.requires_grad) for x in xs]
        y = fn(*args)
        w = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape).to(dev)
        (y * w).sum().backward()
        outs.append([a.grad.cpu() for a in args if a.requires_grad])
    return outs


@pytest.mark.parametrize("name", ["igamma", "igammac"])
def test_igamma_gradient(name, no_fallback):
    a = torch.rand(6, 7, dtype=torch.float64) * 5 + 0.1
    x = (torch.rand(6, 7, dtype=torch.float64) * 8 + 0.05).requires_grad_()
    fn = getattr(torch, name)
    cpu, tpu = _grads(fn, a, x)
    torch.testing.assert_close(tpu[0], cpu[0])


def test_angle_frexp_clamp_gradients(no_fallback):
    x = torch.randn(5, 9, dtype=torch.float64).requires_grad_()
    for fn in (torch.angle, lambda t: torch.frexp(t).mantissa,
               lambda t: torch.clamp_min(t, 0.1), lambda t: torch.clamp_max(t, -0.2)):
        cpu, tpu = _grads(fn, x)
        torch.testing.assert_close(tpu[0], cpu[0])


def test_bessel_values_and_out_forms(no_fallback):
    """Float evaluation as CPU (float32 in float), the out= forms, strided
    inputs and the edge values 0, negatives, inf and NaN."""
    x = torch.tensor([0.0, -1.5, 1e-3, 0.5, 2.0, 4.9, 5.1, 8.5, 30.0, 120.0,
                      float("inf"), -float("inf"), float("nan")], dtype=torch.float64)
    names = ["bessel_y0", "bessel_y1", "modified_bessel_i0", "modified_bessel_i1",
             "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0",
             "scaled_modified_bessel_k1", "spherical_bessel_j0", "airy_ai"]
    for name in names:
        fn = getattr(torch.special, name)
        for dt in (torch.float32, torch.float64):
            xc = x.to(dt)
            want = fn(xc)
            torch.testing.assert_close(fn(xc.to("tpu")).cpu(), want, equal_nan=True)
            out = torch.empty(2 * len(x), dtype=dt, device="tpu")[::2]
            fn(xc.to("tpu"), out=out)
            torch.testing.assert_close(out.cpu(), want, equal_nan=True)
        m = torch.randn(40, 30, dtype=torch.float32) * 6
        torch.testing.assert_close(fn(m.to("tpu").t()).cpu(), fn(m.t()), equal_nan=True)


def test_tri_indices_forms(no_fallback):
    for row, col in ((0, 0), (1, 5), (7, 3), (4, 4), (9, 13)):
        for off in (-12, -2, 0, 1, 5, 20):
            for dt in (torch.int64, torch.int32):
                for fn in (torch.tril_indices, torch.triu_indices):
                    got = fn(row, col, off, dtype=dt, device="tpu")
                    want = fn(row, col, off, dtype=dt)
                    assert got.device.type == "tpu" and got.dtype == want.dtype
                    assert torch.equal(got.cpu(), want), (fn, row, col, off)


def test_tri_indices_errors():
    for fn in (torch.tril_indices, torch.triu_indices):
        with pytest.raises(RuntimeError):
            fn(-1, 3, device="tpu")
        with pytest.raises((RuntimeError, NotImplementedError)):
            fn(3, 3, dtype=torch.float32, device="tpu")


def test_isin_forms(no_fallback):
    e = torch.tensor([[1.0, float("nan"), -0.0, 3.5], [7.0, 2.0, 0.0, 1e30]])
    t = torch.tensor([0.0, 2.0, float("nan"), 1e30, 9.0], dtype=torch.float64)
    et, tt = e.to("tpu"), t.to("tpu")
    for inv in (False, True):
        assert torch.equal(torch.isin(et, tt, invert=inv).cpu(), torch.isin(e, t, invert=inv))
        assert torch.equal(torch.isin(et, 2.0, invert=inv).cpu(), torch.isin(e, 2.0, invert=inv))
        assert torch.equal(torch.isin(7, tt, invert=inv).cpu(), torch.isin(7, t, invert=inv))
        out = torch.empty(2, 4, dtype=torch.bool, device="tpu")
        torch.isin(et.t(), tt, invert=inv, out=out.t())
        assert torch.equal(out.t().cpu(), torch.isin(e.t(), t, invert=inv))
    big = torch.randint(0, 10000, (5000,))
    test = torch.randint(0, 10000, (3000,))
    assert torch.equal(torch.isin(big.to("tpu"), test.to("tpu")).cpu(), torch.isin(big, test))


def test_logspace_arange_forms(no_fallback):
    for dt in (torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int16):
        for start, end, steps, base in ((0, 3, 7, 10.0), (-2, 2, 1, 2.0), (1, -1, 50, 3.0)):
            got = torch.logspace(start, end, steps, base, dtype=dt, device="tpu")
            torch.testing.assert_close(got.cpu(), torch.logspace(start, end, steps, base, dtype=dt))
    for args in ((0, 64, 0.5), (5, 0, -0.5), (-0.9, 2.1, 2.0), (0.0, -8.000001, -4.0)):
        for dt in (torch.int64, torch.int32):
            got = torch.arange(*args, dtype=dt, device="tpu")
            assert torch.equal(got.cpu(), torch.arange(*args, dtype=dt)), args


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
def test_segment_reduce_forward_backward(reduce, no_fallback):
    """Lengths and offsets, axis 0 and 1, empty segments, an initial value,
    ties (max/min) and zeros (prod): values and gradients as CPU's."""
    torch.manual_seed(0)
    data = torch.randn(3, 10, 4, dtype=torch.float64)
    data[0, 2] = data[0, 3]        # ties
    data[1, 5, 1] = 0.0            # a zero for prod
    lengths = torch.tensor([[2, 0, 5, 3], [1, 4, 4, 1], [10, 0, 0, 0]])
    offsets = torch.cat([torch.zeros(3, 1, dtype=torch.long), lengths.cumsum(1)], 1)
    for axis_data, kw in ((data, dict(lengths=lengths, axis=1)),
                          (data, dict(offsets=offsets, axis=1)),
                          (data, dict(lengths=lengths.int(), axis=1, initial=0.5)),
                          (data[0], dict(lengths=lengths[0], axis=0))):
        for dt in (torch.float64, torch.float32, torch.bfloat16):
            x = axis_data.to(dt)
            kt = {k: (v.to("tpu") if torch.is_tensor(v) else v) for k, v in kw.items()}
            want = torch.segment_reduce(x, reduce, **kw)
            got = torch.segment_reduce(x.to("tpu"), reduce, **kt)
            torch.testing.assert_close(got.cpu(), want, equal_nan=True)
        if reduce == "mean" and "initial" not in kw:
            continue  # empty segments give NaN outputs; their gradients are NaN-free anyway
        xc = axis_data.clone().requires_grad_()
        xt = axis_data.to("tpu").requires_grad_()
        kt = {k: (v.to("tpu") if torch.is_tensor(v) else v) for k, v in kw.items()}
        yc = torch.segment_reduce(xc, reduce, **kw)
        yt = torch.segment_reduce(xt, reduce, **kt)
        w = torch.randn(yc.shape, dtype=yc.dtype)
        (torch.nan_to_num(yc, 0.0, 0.0, 0.0) * w).sum().backward()
        (torch.nan_to_num(yt, 0.0, 0.0, 0.0) * w.to("tpu")).sum().backward()
        torch.testing.assert_close(xt.grad.cpu(), xc.grad)


def test_segment_reduce_errors():
    x = torch.randn(6, device="tpu")
    with pytest.raises(RuntimeError):
        torch.segment_reduce(x, "sum", lengths=torch.tensor([2, 2], device="tpu"))
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError):
        torch.segment_reduce(x, "sum", lengths=torch.tensor([7, -1], device="tpu"))
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError):
        torch.segment_reduce(x, "sum")
