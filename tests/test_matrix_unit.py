"""The matrix unit: bfloat16 GEMMs on the CPU's matrix engine (oneDNN on AMX
or AVX512-BF16), and the half-type gemv of one-row products.

Results are compared with PyTorch CPU's; the unit's counters say which path
ran, so a GEMM that silently stopped reaching the unit fails here."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_tpu


def _close(actual, expected, dtype):
    # bfloat16 keeps 8 bits: one rounding of a float32 sum; the CPU's own
    # bfloat16 GEMM may round its partial sums differently.
    tol = {torch.bfloat16: 2e-2, torch.float16: 2e-3}.get(dtype, 1e-5)
    torch.testing.assert_close(actual.cpu().float(), expected.float(), rtol=tol, atol=tol)


def test_matrix_unit_reports_itself():
    mu = torch_tpu.matrix_unit()
    assert set(mu) >= {"library", "isa", "bfloat16", "gemms", "declined"}
    assert mu["library"].startswith("oneDNN ")
    flags = open("/proc/cpuinfo").read().split() if os.path.exists("/proc/cpuinfo") else []
    if os.environ.get("TORCH_TPU_MXU") == "0" or os.environ.get("ONEDNN_MAX_CPU_ISA"):
        return  # the unit may be off by request
    if "amx_bf16" in flags:
        assert mu["isa"] == "amx_bf16" and mu["bfloat16"]
    elif "avx512_bf16" in flags:
        assert mu["isa"] == "avx512_bf16" and mu["bfloat16"]
    else:
        assert mu["isa"].startswith("off") and not mu["bfloat16"]


@pytest.mark.parametrize("shape", [(64, 96, 80), (130, 257, 33), (7, 3, 500)])
def test_bfloat16_mm_runs_on_the_unit_and_matches_cpu(shape):
    m, k, n = shape
    g = torch.Generator().manual_seed(m + k + n)
    a = torch.randn(m, k, generator=g).bfloat16()
    b = torch.randn(n, k, generator=g).bfloat16()
    bias = torch.randn(n, generator=g).bfloat16()
    before = torch_tpu.matrix_unit()
    got = [a.tpu() @ b.tpu().t(), F.linear(a.tpu(), b.tpu(), bias.tpu()),
           torch.addmm(bias.tpu(), a.tpu(), b.tpu().t(), beta=0.5, alpha=2.0)]
    want = [a @ b.t(), F.linear(a, b, bias), torch.addmm(bias, a, b.t(), beta=0.5, alpha=2.0)]
    for x, y in zip(got, want):
        _close(x, y, torch.bfloat16)
    after = torch_tpu.matrix_unit()
    if after["bfloat16"]:
        assert after["gemms"] == before["gemms"] + 3
        assert after["declined"] == before["declined"]
    else:
        assert after["gemms"] == before["gemms"]


def test_bfloat16_bmm_and_baddbmm_on_strided_operands():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 3, 40, 16, generator=g).bfloat16()    # attention-shaped
    kt = torch.randn(2, 3, 16, 40, generator=g).bfloat16()
    base = torch.randn(6, 40, 40, generator=g).bfloat16()
    got = torch.matmul(q.tpu(), kt.tpu())
    _close(got, torch.matmul(q, kt), torch.bfloat16)
    qt = q.reshape(6, 40, 16).transpose(1, 2)                  # column-major factors
    got = torch.baddbmm(base.tpu(), qt.tpu().transpose(1, 2), kt.reshape(6, 16, 40).tpu(),
                        beta=-1.0, alpha=0.25)
    want = torch.baddbmm(base, qt.transpose(1, 2), kt.reshape(6, 16, 40), beta=-1.0, alpha=0.25)
    _close(got, want, torch.bfloat16)
    out = torch.empty(6, 40, 40, dtype=torch.bfloat16, device="tpu").transpose(1, 2)
    torch.bmm(qt.transpose(1, 2).tpu(), kt.reshape(6, 16, 40).tpu(), out=out)
    _close(out, torch.bmm(qt.transpose(1, 2), kt.reshape(6, 16, 40)), torch.bfloat16)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_one_row_products_stream_the_weight_and_match_cpu(dtype):
    # a decode step: one token times a linear weight (dot form) and times a
    # row-major matrix (axpy form), mv, and a batched decode attention
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 300, generator=g).to(dtype)
    w = torch.randn(1037, 300, generator=g).to(dtype)
    v = torch.randn(300, 1037, generator=g).to(dtype)
    bias = torch.randn(1037, generator=g).to(dtype)
    q = torch.randn(6, 1, 64, generator=g).to(dtype)
    k = torch.randn(6, 700, 64, generator=g).to(dtype)
    before = torch_tpu.matrix_unit()["gemms"]
    _close(F.linear(x.tpu(), w.tpu(), bias.tpu()), F.linear(x, w, bias), dtype)
    _close(x.tpu() @ v.tpu(), x @ v, dtype)
    _close(torch.mv(w.tpu(), x[0].tpu()), torch.mv(w, x[0]), dtype)
    _close(q.tpu() @ k.tpu().transpose(1, 2), q @ k.transpose(1, 2), dtype)
    assert torch_tpu.matrix_unit()["gemms"] == before  # the gemv, not the unit


def test_unit_off_gives_the_same_results():
    code = (
        "import torch, torch_tpu\n"
        "mu = torch_tpu.matrix_unit()\n"
        "assert mu['isa'] == 'off (TORCH_TPU_MXU=0)' and not mu['bfloat16'], mu\n"
        "g = torch.Generator().manual_seed(3)\n"
        "a = torch.randn(50, 70, generator=g).bfloat16()\n"
        "b = torch.randn(70, 40, generator=g).bfloat16()\n"
        "torch.testing.assert_close((a.tpu() @ b.tpu()).cpu().float(), (a @ b).float(),\n"
        "                           rtol=2e-2, atol=2e-2)\n"
        "assert torch_tpu.matrix_unit()['gemms'] == 0\n")
    env = dict(os.environ, TORCH_TPU_MXU="0")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_python_m_torch_tpu_names_the_engine():
    r = subprocess.run([sys.executable, "-m", "torch_tpu"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    line = [s for s in r.stdout.splitlines() if s.startswith("matrix unit:")]
    assert line and torch_tpu.matrix_unit()["isa"] in line[0], r.stdout
