"""The matrix unit's weight cache: a weight read again unchanged is laid out
once (hits counted), every way a program changes a weight is seen (the next
GEMM reads the new values, compared with PyTorch CPU on the same weights),
and float32 results are the same bits whether or not the cache holds the
weight (bfloat16, and float32 through W.t(), read a weight's first use
plain: kernels/matmul/mxu_pack.h).

Without a matrix unit for a dtype (an AVX2 CPU, bfloat16 without
AVX512-BF16) nothing is cached, and the same checks hold."""
import pytest
import torch
import torch.nn as nn

import torch_tpu

DTYPES = [torch.bfloat16, torch.float32]


def _unit(dtype):
    mu = torch_tpu.matrix_unit()
    return mu["bfloat16"] if dtype == torch.bfloat16 else mu["float32"]


def _stats():
    torch.tpu.synchronize()  # the counters count work that has run
    return torch_tpu.weight_cache_stats()


def _close(got, want, dtype):
    # float32: another summation order than MKL's (oneDNN's brgemm on AVX-512
    # CPUs) gives up to ~2e-5 at K = 256; a stale weight is off by ~1e-1.
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
    torch.testing.assert_close(got.cpu().float(), want.float(), rtol=tol, atol=tol)


def _pair(dtype, seed=0, bias=True):
    """A Linear on CPU and its copy on tpu (sizes that reach the unit in
    float32 too: 32 x 256 x 384 multiply-adds per row block)."""
    torch.manual_seed(seed)
    cpu = nn.Linear(256, 384, bias=bias).to(dtype)
    dev = nn.Linear(256, 384, bias=bias).to(dtype).to("tpu")
    dev.load_state_dict(cpu.state_dict())
    return cpu, dev


def _x(dtype, seed=1):
    return torch.randn(32, 256, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_unchanged_weight_is_laid_out_once(dtype):
    torch.tpu.empty_cache()
    cpu, dev = _pair(dtype)
    x = _x(dtype)
    xt = x.to("tpu")
    before = _stats()
    outs = [dev(xt).cpu() for _ in range(4)]
    after = _stats()
    for y in outs:
        _close(y, cpu(x), dtype)
        assert torch.equal(y, outs[1])  # from the second call on: the blocked kernel
        if dtype == torch.float32:  # the first call reads W.t() plain, later ones blocked:
            assert torch.equal(y, outs[0])  # oneDNN's float32 kernels give the same bits
    if _unit(dtype):
        assert after["hits"] - before["hits"] == 2      # calls 3 and 4
        assert after["entries"] - before["entries"] == 1
        assert after["bytes"] > before["bytes"]
    else:
        assert after["packs"] == before["packs"] and after["entries"] == before["entries"]
    stats = torch.tpu.memory_stats()
    assert stats["weight_cache.entries"] == _stats()["entries"]
    assert stats["weight_cache.limit_bytes"] > 0
    torch.tpu.empty_cache()
    assert _stats()["entries"] == 0 and _stats()["bytes"] == 0


def _warm(dev, xt):
    for _ in range(3):
        dev(xt)


def _change_no_grad_inplace(cpu, dev):
    with torch.no_grad():
        cpu.weight.mul_(-0.5)
        dev.weight.mul_(-0.5)


def _change_data_copy(cpu, dev):
    new = torch.randn_like(cpu.weight)
    cpu.weight.data.copy_(new)
    dev.weight.data.copy_(new.to("tpu"))  # a device-to-device copy, no version bump


def _change_from_host(cpu, dev):
    new = torch.randn_like(cpu.weight)
    cpu.weight.data.copy_(new)
    with torch.no_grad():
        dev.weight.copy_(new)  # a host-to-device copy into the same storage


def _change_load_state_dict(cpu, dev):
    sd = {k: torch.randn_like(v) for k, v in cpu.state_dict().items()}
    cpu.load_state_dict(sd)
    dev.load_state_dict(sd)


def _change_new_parameter(cpu, dev):
    new = torch.randn_like(cpu.weight)
    cpu.weight = nn.Parameter(new.clone())
    dev.weight = nn.Parameter(new.to("tpu"))  # the old storage is freed; its block may be reused


def _change_fill(cpu, dev):
    with torch.no_grad():
        cpu.weight[:, :7].fill_(0.25)
        dev.weight[:, :7].fill_(0.25)


CHANGES = [_change_no_grad_inplace, _change_data_copy, _change_from_host,
           _change_load_state_dict, _change_new_parameter, _change_fill]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("change", CHANGES, ids=lambda f: f.__name__[len("_change_"):])
def test_every_way_of_changing_a_weight_is_seen(dtype, change):
    cpu, dev = _pair(dtype, seed=3)
    x = _x(dtype)
    xt = x.to("tpu")
    _warm(dev, xt)
    change(cpu, dev)
    _close(dev(xt), cpu(x), dtype)
    _close(dev(xt), cpu(x), dtype)  # and again, from the cache


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("opt", ["fused", "foreach", "for_loop"])
def test_optimizer_steps_between_forwards_are_seen(dtype, opt):
    """Each forward after a step reads the stepped weights: it is compared
    with CPU's linear on the device's own current parameters. (Not with a
    CPU-trained twin: AdamW turns a gradient's last-bit difference near zero
    into a whole lr-sized update, so trajectories part by ~1e-3 whatever the
    cache does.)"""
    _, dev = _pair(dtype, seed=5)
    kw = {"fused": dict(fused=True), "foreach": dict(foreach=True),
          "for_loop": dict(foreach=False)}[opt]
    opt_ = torch.optim.AdamW(dev.parameters(), lr=1e-2, **kw)
    x = _x(dtype)
    xt = x.to("tpu")
    for _ in range(3):
        with torch.no_grad():  # an evaluation pass that warms the cache
            for _ in range(2):
                dev(xt)
        before = dev.weight.detach().cpu()
        opt_.zero_grad()
        dev(xt).float().square().mean().backward()
        opt_.step()
        with torch.no_grad():
            w, b = dev.weight.cpu(), dev.bias.cpu()
            assert (w - before).abs().max() > 1e-3  # the step changed the weight
            _close(dev(xt), nn.functional.linear(x, w, b), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_change_in_the_same_deferred_graph_is_seen(dtype):
    cpu, dev = _pair(dtype, seed=7)
    x = _x(dtype)
    xt = x.to("tpu")
    _warm(dev, xt)
    with torch_tpu.eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE), torch.no_grad():
        y1 = dev(xt)
        dev.weight.add_(0.125)  # recorded between the two GEMMs, flushed with them
        y2 = dev(xt)
        torch_tpu.flush()
    with torch.no_grad():
        want1 = cpu(x)
        cpu.weight.add_(0.125)
        want2 = cpu(x)
    _close(y1, want1, dtype)
    _close(y2, want2, dtype)


def test_a_write_on_another_stream_is_seen():
    cpu, dev = _pair(torch.bfloat16, seed=9)
    x = _x(torch.bfloat16)
    xt = x.to("tpu")
    _warm(dev, xt)
    new = torch.randn_like(cpu.weight)
    s = torch.tpu.Stream()
    with torch.tpu.stream(s), torch.no_grad():
        dev.weight.copy_(new.to("tpu", non_blocking=True))
    torch.tpu.current_stream().wait_stream(s)
    cpu.weight.data.copy_(new)
    _close(dev(xt), cpu(x), torch.bfloat16)


def test_the_limit_bounds_the_cache_and_zero_turns_it_off():
    limit = _stats()["limit_bytes"]
    try:
        torch.tpu.empty_cache()
        pairs = [_pair(torch.bfloat16, seed=s) for s in range(3)]
        xt = _x(torch.bfloat16).to("tpu")
        _warm(pairs[0][1], xt)
        one = _stats()["bytes"]
        if not _unit(torch.bfloat16):
            assert one == 0
            return
        torch_tpu.set_weight_cache_limit(one + one // 2)
        before = _stats()
        for _ in range(2):
            for cpu, dev in pairs:
                _warm(dev, xt)
                _close(dev(xt), cpu(_x(torch.bfloat16)), torch.bfloat16)
        after = _stats()
        assert after["bytes"] <= one + one // 2
        assert after["evictions"] > before["evictions"]  # counted, not silent
        torch_tpu.set_weight_cache_limit(0)
        assert _stats()["entries"] == 0
        _warm(pairs[0][1], xt)
        assert _stats()["entries"] == 0
        with pytest.raises(ValueError):
            torch_tpu.set_weight_cache_limit(-1)
    finally:
        torch_tpu.set_weight_cache_limit(limit)
