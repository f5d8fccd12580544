"""arange, linspace, logspace, eye, flip, roll, triu, tril, unfold_backward: native on tpu,
equal to CPU."""
import pytest
import torch

import torch_tpu

DTYPES = [torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64]

CASES = {
    "arange": lambda d, dt: torch.arange(-3, 17, 2, dtype=dt, device=d),
    "arange_float_step": lambda d, dt: torch.arange(0.5, 9.7, 0.3, device=d).to(dt),
    "linspace": lambda d, dt: torch.linspace(-2, 5, 33, device=d).to(dt),
    "flip": lambda d, dt: torch.arange(60, device=d).reshape(3, 4, 5).to(dt).flip(0, 2),
    "roll": lambda d, dt: torch.arange(24, device=d).reshape(4, 6).to(dt).roll((1, -2), (0, 1)),
    "roll_flat": lambda d, dt: torch.arange(24, device=d).reshape(4, 6).to(dt).t().roll(5),
    "triu": lambda d, dt: torch.arange(35, device=d).reshape(5, 7).to(dt).triu(1),
    "tril_batched": lambda d, dt: torch.arange(60, device=d).reshape(3, 4, 5).to(dt).tril(-1),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_shape_op_native_and_equal(name, dtype):
    fn = CASES[name]
    torch_tpu.reset_counts()
    got = fn("tpu", dtype)
    assert torch_tpu.fallback_counts() == {}, torch_tpu.fallback_counts()
    torch.testing.assert_close(got.cpu(), fn("cpu", dtype), rtol=0, atol=0)


FACTORIES = {
    "arange": lambda d, dt: torch.arange(17, dtype=dt, device=d),
    "arange_range": lambda d, dt: torch.arange(-3, 17, 2, dtype=dt, device=d),
    "arange_fraction": lambda d, dt: torch.arange(0.5, 9.7, 0.3, dtype=dt, device=d),
    "linspace": lambda d, dt: torch.linspace(1, 50, 33, dtype=dt, device=d),
    "logspace": lambda d, dt: torch.logspace(0, 2, 9, dtype=dt, device=d),
    "eye": lambda d, dt: torch.eye(5, dtype=dt, device=d),
    "eye_nm": lambda d, dt: torch.eye(3, 6, dtype=dt, device=d),
}


# (arange with fractional bounds over integer dtypes, whose start and step
# are truncated, is test_logspace_arange_forms's)
FACTORY_CASES = [(name, dt) for name in sorted(FACTORIES)
                 for dt in DTYPES + [torch.uint8, torch.int16]
                 if "fraction" not in name or dt.is_floating_point]


@pytest.mark.parametrize("name,dtype", FACTORY_CASES, ids=str)
def test_factories_size_their_output_without_the_meta_kernel(name, dtype):
    """The runtime's shape functions size arange/linspace/logspace/eye from
    the out= tensor's dtype, as PyTorch's meta kernels (Python for these ops,
    35-200 us a call) would: same values as CPU, no meta dispatch, no
    fallback; an out= tensor of another size is resized as on CPU."""
    fn = FACTORIES[name]
    torch_tpu.reset_counts()
    got = fn("tpu", dtype)
    assert torch_tpu.fallback_counts() == {}, torch_tpu.fallback_counts()
    assert torch_tpu.meta_shape_counts() == {}, torch_tpu.meta_shape_counts()
    torch.testing.assert_close(got.cpu(), fn("cpu", dtype), rtol=0, atol=0)
    out_t, out_c = torch.full((2, 2), 7, dtype=dtype, device="tpu"), torch.full((2, 2), 7, dtype=dtype)
    torch.arange(4, 11, 3, out=out_t), torch.arange(4, 11, 3, out=out_c)
    torch.testing.assert_close(out_t.cpu(), out_c, rtol=0, atol=0)


def test_factory_errors_match_cpu():
    """Arguments PyTorch rejects: the same exception type and message as CPU."""
    for fn in (lambda d: torch.arange(0, 10, 0, device=d), lambda d: torch.arange(5, 0, 1, device=d),
               lambda d: torch.eye(-1, device=d), lambda d: torch.linspace(0, 1, -2, device=d),
               lambda d: torch.arange(0, float("inf"), device=d)):
        with pytest.raises(Exception) as cpu:
            fn("cpu")
        with pytest.raises(type(cpu.value)) as tpu:
            fn("tpu")
        assert str(tpu.value) == str(cpu.value)


def test_triu_in_place_on_a_view():
    base = torch.arange(36.0).reshape(6, 6)
    t = base.to("tpu")
    t[1:5, 1:5].triu_(1)
    base[1:5, 1:5].triu_(1)
    torch.testing.assert_close(t.cpu(), base, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape,dim,size,step", [((10,), 0, 3, 1), ((4, 11), 1, 2, 4),
                                                 ((6, 5, 3), 0, 4, 2), ((2, 7, 9), -1, 9, 1)])
def test_unfold_backward_native_and_equal(shape, dim, size, step, dtype):
    """Tensor.unfold's gradient (overlapping windows, gaps, a leftover tail)
    runs natively and equals CPU autograd's."""
    x = torch.randn(shape).to(dtype)
    xt = x.to("tpu").requires_grad_()
    x.requires_grad_()
    g = torch.randn(x.unfold(dim, size, step).shape).to(dtype)
    torch_tpu.reset_counts()
    (xt.unfold(dim, size, step) * g.to("tpu")).sum().backward()
    assert torch_tpu.fallback_counts() == {}, torch_tpu.fallback_counts()
    (x.unfold(dim, size, step) * g).sum().backward()
    tol = 1e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-6
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=tol, atol=tol)
