"""bench/bench_kernels.py's workloads, once each at tiny sizes on tpu, checked
against the same workload on CPU (so the benchmark cannot silently time wrong
computations). No timing."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import bench_kernels  # noqa: E402
import torch_tpu  # noqa: E402

WORKLOADS = (
    bench_kernels.attention_workloads([16, 37], H=2, D=64)
    + bench_kernels.norm_workloads(6, 40)
    + bench_kernels.conv_workloads(batch=2, spatial=9)
    + bench_kernels.block_workloads(batch=2, seq=12, hidden=64, heads=4)
    # (label, tokens, dim, vocab, heads, attention length): column tails, 4 x 2 x 6 x 6 scores
    + bench_kernels.small_workloads(shapes=(("tiny", 24, 40, 30, 2, 6),))
    + bench_kernels.small_workloads(torch.bfloat16, shapes=(("tiny", 24, 40, 30, 2, 6),))
)


@pytest.mark.parametrize("w", WORKLOADS, ids=[f"{w.name}-{w.mode}" for w in WORKLOADS])
def test_workload_matches_cpu(w):
    before = dict(torch_tpu.fallback_counts())
    got = w.make("tpu")()
    bench_kernels.sync("tpu")
    assert dict(torch_tpu.fallback_counts()) == before, "the tpu side ran ops on the CPU fallback"
    want = w.make("cpu")()
    assert len(got) == len(want) and len(got) >= 1
    if w.mode == "fwd+bwd":
        assert len(got) >= 2, "forward+backward must return gradients"
    for i, (g, e) in enumerate(zip(got, want)):
        assert g.device.type == "tpu", f"result {i} on {g.device}"
        assert e.device.type == "cpu"
        assert g.shape == e.shape and g.dtype == e.dtype
        assert torch.isfinite(e).all()
        tol = 2e-2 if e.dtype == torch.bfloat16 else 1e-4  # bfloat16: ~2 of its ulps
        torch.testing.assert_close(g.detach().cpu(), e.detach(), rtol=tol, atol=tol,
                                   msg=lambda m: f"{w.name} {w.mode} result {i}: {m}")


def test_block_same_weights():
    w = bench_kernels.block_models(64, 4, "rms")
    for (n, a), (_, b) in zip(w["cpu"].named_parameters(), w["tpu"].named_parameters()):
        assert b.device.type == "tpu"
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=0, atol=0, msg=n)


def test_block_uses_causal_attention():
    """Changing a later token must not change earlier outputs (causal mask)."""
    m = bench_kernels.block_models(64, 4, "layer")["tpu"]
    x = torch.randn(1, 8, 64).to("tpu")
    y = m(x)
    x2 = x.clone()
    x2[:, -1] += 1.0
    y2 = m(x2)
    torch.testing.assert_close(y2[:, :-1].cpu(), y[:, :-1].cpu())
    assert not torch.allclose(y2[:, -1].cpu(), y[:, -1].cpu())
