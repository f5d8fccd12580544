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
from conftest import no_fallback


def _close(actual, expected, dtype):
    # bfloat16 keeps 8 bits: one rounding of a float32 sum; the CPU's own
    # bfloat16 GEMM may round its partial sums differently.
    tol = {torch.bfloat16: 2e-2, torch.float16: 2e-3}.get(dtype, 1e-5)
    torch.testing.assert_close(actual.cpu().float(), expected.float(), rtol=tol, atol=tol)


def test_matrix_unit_reports_itself():
    mu = torch_tpu.matrix_unit()
    assert set(mu) >= {"library", "isa", "bfloat16", "gemms", "declined", "convs",
                       "conv_declined", "conv_split", "conv_gemm"}
    assert mu["library"].startswith("oneDNN ")
    flags = open("/proc/cpuinfo").read().split() if os.path.exists("/proc/cpuinfo") else []
    if os.environ.get("TORCH_TPU_MXU") == "0" or os.environ.get("ONEDNN_MAX_CPU_ISA"):
        return  # the unit may be off by request
    if "amx_bf16" in flags:
        assert mu["isa"] == "amx_bf16" and mu["bfloat16"]
    elif "avx512_bf16" in flags:
        assert mu["isa"] == "avx512_bf16" and mu["bfloat16"]
    elif "avx512f" in flags:
        assert mu["isa"].startswith("avx512_f32") and not mu["bfloat16"] and mu["float32"]
    else:
        assert mu["isa"].startswith("off") and not mu["bfloat16"] and not mu["float32"]
    assert mu["float32"] == ("avx512f" in flags)
    # float16 on oneDNN's AVX512-FP16 brgemm (Sapphire Rapids and later)
    assert mu["float16"] == ("avx512_fp16" in flags and mu["bfloat16"])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(64, 96, 80), (130, 257, 33), (7, 3, 500)])
def test_half_mm_runs_on_the_unit_and_matches_cpu(shape, dtype):
    m, k, n = shape
    g = torch.Generator().manual_seed(m + k + n)
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(n, k, generator=g).to(dtype)
    bias = torch.randn(n, generator=g).to(dtype)
    before = torch_tpu.matrix_unit()
    got = [a.tpu() @ b.tpu().t(), F.linear(a.tpu(), b.tpu(), bias.tpu()),
           torch.addmm(bias.tpu(), a.tpu(), b.tpu().t(), beta=0.5, alpha=2.0)]
    want = [a @ b.t(), F.linear(a, b, bias), torch.addmm(bias, a, b.t(), beta=0.5, alpha=2.0)]
    for x, y in zip(got, want):
        _close(x, y, dtype)
    after = torch_tpu.matrix_unit()
    if after[str(dtype).split(".")[1]]:
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
        "assert torch_tpu.matrix_unit()['gemms'] == 0\n"
        "x = torch.randn(2, 8, 9, 9, generator=g).bfloat16()\n"
        "w = (torch.randn(16, 8, 3, 3, generator=g) / 8).bfloat16()\n"
        "y = torch.nn.functional.conv2d(x.tpu(), w.tpu(), stride=2, padding=1)\n"
        "want = torch.nn.functional.conv2d(x, w, stride=2, padding=1)\n"
        "torch.testing.assert_close(y.cpu().float(), want.float(), rtol=2e-2, atol=2e-2)\n"
        "assert torch_tpu.matrix_unit()['convs'] == 0\n")
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


# ---- int8: torch._int_mm and aten._weight_int8pack_mm -------------------------------


@pytest.mark.parametrize("m,k,n", [(33, 64, 48), (1, 300, 70), (70, 129, 65)])
@pytest.mark.parametrize("a_dtype", [torch.int8, torch.uint8])
def test_int_mm_matches_cpu_exactly(m, k, n, a_dtype):
    g = torch.Generator().manual_seed(m * k + n)
    lo = 0 if a_dtype == torch.uint8 else -128
    a = torch.randint(lo, lo + 256, (m, k), generator=g).to(a_dtype)
    b = torch.randint(-128, 128, (k, n), generator=g).to(torch.int8)
    # the exact sums (int64 matmul on the CPU): PyTorch's own CPU _int_mm
    # saturates int16 partial sums where oneDNN runs AVX2 code
    # (ONEDNN_MAX_CPU_ISA=AVX2), so it is no reference there
    want = (a.long() @ b.long()).int()
    before = torch_tpu.fallback_counts().get("aten::_int_mm", 0)
    at, btpu = a.tpu(), b.tpu()
    hits = torch_tpu.weight_cache_stats()["hits"]
    for _ in range(3):  # mat2 read plain, then laid out blocked and kept, then cached
        got = torch._int_mm(at, btpu)
        assert got.dtype == torch.int32 and got.device.type == "tpu"
        assert torch.equal(got.cpu(), want)
    if torch_tpu.matrix_unit()["int8"]:
        assert torch_tpu.weight_cache_stats()["hits"] > hits
    bt = b.t().contiguous().t()  # a column-major mat2
    assert torch.equal(torch._int_mm(a.tpu(), bt.tpu()).cpu(), want)
    assert torch_tpu.fallback_counts().get("aten::_int_mm", 0) == before


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("m", [1, 3, 70])
def test_weight_int8pack_mm_matches_cpu(dtype, m):
    # weight-only int8: x [m, k] @ (w [n, k] int8)^T * scales [n]; k a
    # multiple of 8 (PyTorch's CPU kernel crashes on some other k)
    k, n = 64 * 3, 1037
    g = torch.Generator().manual_seed(m)
    x = torch.randn(m, k, generator=g).to(dtype)
    w = torch.randint(-128, 128, (n, k), generator=g).to(torch.int8)
    s = (torch.rand(n, generator=g) / 32).to(dtype)
    op = torch.ops.aten._weight_int8pack_mm
    before = torch_tpu.fallback_counts().get("aten::_weight_int8pack_mm", 0)
    got = op(x.tpu(), w.tpu(), s.tpu())
    assert got.dtype == dtype and got.shape == (m, n)
    want = op(x, w, s)
    if dtype == torch.float32:  # sums of 192 terms of about 16: summation order
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-4)
    else:
        _close(got, want, dtype)
    assert torch_tpu.fallback_counts().get("aten::_weight_int8pack_mm", 0) == before


def test_int8_products_raise_what_cpu_raises():
    a = torch.randint(-128, 128, (4, 8), dtype=torch.int8)
    b = torch.randint(-128, 128, (8, 4), dtype=torch.int8)
    x, s = torch.randn(4, 8).bfloat16(), torch.rand(4).bfloat16()
    op = torch.ops.aten._weight_int8pack_mm
    cases = [
        lambda d: torch._int_mm(a.float().to(d), b.to(d)),          # self not int8
        lambda d: torch._int_mm(a.to(d), b[:5].to(d)),              # k mismatch
        lambda d: op(x.to(d), b.t().contiguous().to(d), s.float().to(d)),  # scales' dtype
        lambda d: op(x.to(d), b.t().contiguous().to(d), s[:3].to(d)),      # scales' size
        lambda d: op(x.t().contiguous().t().to(d), b.t().contiguous().to(d), s.to(d)),
    ]
    for f in cases:
        with pytest.raises(RuntimeError) as cpu_err:
            f("cpu")
        with pytest.raises(type(cpu_err.value)):
            f("tpu")


# ---- float32 matmul precision (torch.set_float32_matmul_precision / torch.tpu.precision) ----


def _precision_error(dev_a, dev_b, ref):
    got = (dev_a @ dev_b).cpu().double()
    return ((got - ref).abs().max() / ref.abs().max()).item()


def test_float32_precision_levels():
    g = torch.Generator().manual_seed(4)
    a = torch.randn(96, 300, generator=g)
    b = torch.randn(300, 80, generator=g)
    ref = a.double() @ b.double()
    at, bt = a.tpu(), b.tpu()
    unit = torch_tpu.matrix_unit()["bfloat16"]
    f32 = int(torch_tpu.matrix_unit()["float32"])  # "highest": one float32 GEMM on the unit
    errors, gemms = {}, {}
    for p in (torch.tpu.Precision.HIGHEST, torch.tpu.Precision.HIGH, torch.tpu.Precision.DEFAULT):
        before = torch_tpu.matrix_unit()["gemms"]
        with torch.tpu.precision(p):
            assert torch.get_float32_matmul_precision() == p.value
            errors[p.name] = _precision_error(at, bt, ref)
        gemms[p.name] = torch_tpu.matrix_unit()["gemms"] - before
        assert torch.get_float32_matmul_precision() == "highest"  # restored
    assert errors["HIGHEST"] < 1e-6 and gemms["HIGHEST"] == f32
    if unit:
        assert gemms == {"HIGHEST": f32, "HIGH": 3, "DEFAULT": 1}
        assert errors["HIGH"] < 2e-5, errors          # bfloat16x3: near float32
        assert 5e-4 < errors["DEFAULT"] < 1e-2, errors  # one bfloat16 pass
    else:
        assert max(errors.values()) < 1e-6 and sum(gemms.values()) == 3 * f32


def test_precision_names_and_torch_setting_agree():
    with torch.tpu.precision("high"):
        assert torch.tpu.get_precision() is torch.tpu.Precision.HIGH
    with torch.tpu.precision("DEFAULT"):
        assert torch.get_float32_matmul_precision() == "medium"
    torch.set_float32_matmul_precision("medium")
    try:
        assert torch.tpu.get_precision() is torch.tpu.Precision.DEFAULT
    finally:
        torch.set_float32_matmul_precision("highest")
    with pytest.raises(ValueError):
        torch.tpu.set_precision("fast")


def test_a_deferred_matmul_keeps_the_precision_it_was_issued_under():
    if not torch_tpu.matrix_unit()["bfloat16"]:
        pytest.skip("no matrix unit on this CPU: every precision is float32")
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(64, 256, generator=g), torch.randn(256, 64, generator=g)
    ref = a.double() @ b.double()
    with torch_tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        with torch.tpu.precision("medium"):
            y = a.tpu() @ b.tpu()        # recorded, not yet run
        z = a.tpu() @ b.tpu()            # highest
        ym, zm = y.cpu().double(), z.cpu().double()
    assert ((ym - ref).abs().max() / ref.abs().max()).item() > 5e-4
    assert ((zm - ref).abs().max() / ref.abs().max()).item() < 1e-6


# ---- convolutions (runtime/src/kernels/conv/conv_mxu.c) ----------------------------------

# (C_in, C_out, kernel, stride, padding, dilation, groups, H=W): ResNet-like
# layers, small enough to be quick: a 3x3, a strided 3x3, the 1x1s of a
# bottleneck and its strided shortcut, the 7x7 stem, a dilated and a grouped
# 3x3, a depthwise 3x3.
CONV_CASES = [(32, 32, 3, 1, 1, 1, 1, 14), (32, 64, 3, 2, 1, 1, 1, 15),
              (64, 16, 1, 1, 0, 1, 1, 14), (16, 64, 1, 1, 0, 1, 1, 14),
              (32, 64, 1, 2, 0, 1, 1, 15), (3, 16, 7, 2, 3, 1, 1, 32),
              (16, 16, 3, 1, 2, 2, 1, 12), (32, 64, 3, 1, 1, 1, 2, 10),
              (32, 32, 3, 1, 1, 1, 32, 12)]


def _conv_close(actual, expected):
    # one bfloat16 rounding each of float32 sums (the CPU's are oneDNN's too,
    # in another order): relative to the tensor's scale
    expected = expected.float()
    scale = expected.abs().max().item()
    torch.testing.assert_close(actual.cpu().float(), expected, rtol=2e-2, atol=1e-2 * scale)


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("channels_last", [False, True])
def test_bfloat16_conv2d_runs_on_the_unit_and_matches_cpu(case, channels_last):
    ci, co, k, s, p, d, groups, hw = case
    g = torch.Generator().manual_seed(ci * co + k + hw)
    x = torch.randn(2, ci, hw, hw, generator=g).bfloat16()
    w = (torch.randn(co, ci // groups, k, k, generator=g) / (ci // groups * k * k) ** 0.5).bfloat16()
    b = torch.randn(co, generator=g).bfloat16()
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    results = {}
    before = torch_tpu.matrix_unit()
    for dev in ("tpu", "cpu"):
        xd = x.to(dev).requires_grad_()
        wd = w.to(dev).requires_grad_()
        bd = b.to(dev).requires_grad_()
        y = F.conv2d(xd, wd, bd, stride=s, padding=p, dilation=d, groups=groups)
        gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(7)).bfloat16()
        y.backward(gy.to(dev))
        results[dev] = [y.detach(), xd.grad, wd.grad, bd.grad]
    torch.tpu.synchronize()  # the counters move when the queued products have run
    after = torch_tpu.matrix_unit()
    for got, want in zip(results["tpu"], results["cpu"]):
        assert got.dtype == torch.bfloat16
        _conv_close(got, want)
    if after["bfloat16"]:
        # forward, the input gradient, the weight gradient (with the bias's)
        assert after["convs"] == before["convs"] + 3
        assert after["conv_declined"] == before["conv_declined"]
    else:
        assert after["convs"] == before["convs"]


def test_bfloat16_conv_split_over_the_pool_and_unsplit_match_cpu():
    # batch 3 (uneven image parts), 48 output channels (uneven channel
    # parts of the weight gradient): split over the pool's threads by
    # default, one OpenMP team with TORCH_TPU_CONV_SPLIT=0 (read per product)
    g = torch.Generator().manual_seed(11)
    x = torch.randn(3, 32, 12, 12, generator=g).bfloat16()
    w = (torch.randn(48, 32, 3, 3, generator=g) / 17).bfloat16()
    gy = torch.randn(3, 48, 12, 12, generator=g).bfloat16()
    want = [F.conv2d(x, w, padding=1)] + list(torch.ops.aten.convolution_backward(
        gy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, False])[:2])
    xd, wd, gyd = x.tpu(), w.tpu(), gy.tpu()
    for split in (True, False):
        if not split:
            torch_tpu._C.set_runtime_config("TORCH_TPU_CONV_SPLIT", "0")
        try:
            before = torch_tpu.matrix_unit()
            got = [F.conv2d(xd, wd, padding=1)] + list(torch.ops.aten.convolution_backward(
                gyd, xd, wd, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                [True, True, False])[:2])
            torch.tpu.synchronize()
        finally:
            torch_tpu._C.set_runtime_config("TORCH_TPU_CONV_SPLIT", None)
        after = torch_tpu.matrix_unit()
        for a, b in zip(got, want):
            _conv_close(a, b)
        if after["bfloat16"]:
            assert after["convs"] == before["convs"] + 3
            threads = torch_tpu.pool_stats()["threads"]
            split_ran = 3 if split and threads > 1 else 0
            assert after["conv_split"] == before["conv_split"] + split_ran


# 1x1 convolutions (no padding, one group) run as GEMMs (conv_gemm counts
# them): on NCHW tensors of 384 or more positions where the tensors lie, per
# image, all three products (conv_mxu_1x1.c); on channels_last tensors the
# forward and input gradient as one GEMM with the positions as rows
# (conv_mxu_rows.c); smaller NCHW images and the rest on oneDNN's
# convolution primitives, as with TORCH_TPU_CONV_GEMM=0. Odd channel counts
# and positions, batch 1 (split over channels) and 3, with and without a
# bias. ResNet-50's 56x56 layers (256->64, 64->256): where the CPU has AMX
# their per-image forward and input-gradient GEMMs would miss the tiles, so
# those run with each image's positions as the rows (conv_mxu_1x1.c). On
# AMX the forward and input gradient run per image from 192 positions
# (14x14), the weight gradient from 384.
POINTWISE_CASES = [(1, 17, 33, 19, 21, True), (3, 24, 40, 23, 17, False),
                   (3, 64, 48, 20, 21, True), (1, 256, 64, 28, 28, False),
                   (2, 5, 7, 20, 20, True), (2, 24, 40, 7, 9, True),
                   (2, 256, 64, 56, 56, True), (2, 64, 256, 56, 56, False),
                   (2, 64, 32, 14, 14, True)]


@pytest.mark.parametrize("case", POINTWISE_CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("path", ["gemm", "gemm_unsplit", "primitives", "channels_last"])
def test_bfloat16_conv1x1_runs_as_gemm_and_matches_cpu(case, path):
    n, ci, co, h, w_, with_bias = case
    g = torch.Generator().manual_seed(ci * co + h)
    x = torch.randn(n, ci, h, w_, generator=g).bfloat16()
    w = (torch.randn(co, ci, 1, 1, generator=g) / ci ** 0.5).bfloat16()
    b = torch.randn(co, generator=g).bfloat16() if with_bias else None
    gy = torch.randn(n, co, h, w_, generator=g).bfloat16()
    if path == "channels_last":  # the rows path's (in place where it can)
        x = x.contiguous(memory_format=torch.channels_last)
        gy = gy.contiguous(memory_format=torch.channels_last)
    env = {"gemm_unsplit": ("TORCH_TPU_CONV_SPLIT", "0"),
           "primitives": ("TORCH_TPU_CONV_GEMM", "0")}.get(path)
    results = {}
    before = torch_tpu.matrix_unit()
    if env:
        torch_tpu._C.set_runtime_config(env[0], env[1])
    try:
        for dev in ("tpu", "cpu"):
            xd = x.to(dev).requires_grad_()
            wd = w.to(dev).requires_grad_()
            bd = b.to(dev).requires_grad_() if with_bias else None
            y = F.conv2d(xd, wd, bd)
            y.backward(gy.to(dev))
            results[dev] = [y.detach(), xd.grad, wd.grad] + ([bd.grad] if with_bias else [])
        torch.tpu.synchronize()
    finally:
        if env:
            torch_tpu._C.set_runtime_config(env[0], None)
    after = torch_tpu.matrix_unit()
    for got, want in zip(results["tpu"], results["cpu"]):
        assert got.dtype == torch.bfloat16
        _conv_close(got, want)
    if after["bfloat16"]:
        assert after["convs"] == before["convs"] + 3
        assert after["conv_declined"] == before["conv_declined"]
        tiles = after["isa"].startswith("amx")
        per_image = 3 if h * w_ >= 384 else 2 if tiles and h * w_ >= 192 else 0
        gemm = {"gemm": per_image, "gemm_unsplit": per_image, "channels_last": 2}.get(path, 0)
        assert after["conv_gemm"] == before["conv_gemm"] + gemm
        if path == "gemm_unsplit":
            assert after["conv_split"] == before["conv_split"]
    else:
        assert after["convs"] == before["convs"]


# Strided 1x1 convolutions (ResNet's downsampling projection), NCHW and
# channels_last, 1-D/2-D/3-D, and transposed ones with output padding (the
# input gradient's positions off the grid are zero): the forward and input
# gradient as one GEMM with the grid positions as rows (conv_mxu_rows.c),
# the weight gradient on the primitives, all against CPU.
STRIDED_1X1_CASES = [(2, 24, 40, (9, 11), 2, False, True, False),
                     (1, 33, 17, (15, 13), 2, True, False, False),
                     (3, 32, 48, (14, 14), 2, True, True, False),
                     (2, 16, 24, (31,), 2, False, True, False),
                     (2, 16, 24, (5, 6, 7), 2, True, True, False),
                     (2, 16, 24, (9, 9), 3, False, False, False),
                     (2, 24, 16, (6, 7), 2, False, False, True),
                     (1, 24, 16, (5, 4), 2, True, False, True)]


@pytest.mark.parametrize("case", STRIDED_1X1_CASES, ids=lambda c: "x".join(map(str, c)))
def test_bfloat16_strided_and_channels_last_conv1x1_run_as_gemm_and_match_cpu(case):
    n, ci, co, size, stride, channels_last, with_bias, transposed = case
    nsp = len(size)
    g = torch.Generator().manual_seed(ci * co + sum(size))
    x = torch.randn(n, ci, *size, generator=g).bfloat16()
    wshape = (ci, co) if transposed else (co, ci)
    w = (torch.randn(*wshape, *([1] * nsp), generator=g) / ci ** 0.5).bfloat16()
    b = torch.randn(co, generator=g).bfloat16() if with_bias else None
    if channels_last:
        fmt = torch.channels_last if nsp == 2 else torch.channels_last_3d
        x = x.contiguous(memory_format=fmt)
    opad = [1] * nsp if transposed else [0] * nsp

    def conv(xd, wd, bd):
        return torch.ops.aten.convolution(xd, wd, bd, [stride] * nsp, [0] * nsp, [1] * nsp,
                                          transposed, opad, 1)

    results = {}
    before = torch_tpu.matrix_unit()
    for dev in ("tpu", "cpu"):
        xd = x.to(dev).requires_grad_()
        wd = w.to(dev).requires_grad_()
        bd = b.to(dev).requires_grad_() if with_bias else None
        y = conv(xd, wd, bd)
        gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(5)).bfloat16()
        y.backward(gy.to(dev))
        results[dev] = [y.detach(), xd.grad, wd.grad] + ([bd.grad] if with_bias else [])
    torch.tpu.synchronize()
    after = torch_tpu.matrix_unit()
    for got, want in zip(results["tpu"], results["cpu"]):
        assert got.dtype == torch.bfloat16
        _conv_close(got, want)
    if after["bfloat16"]:
        assert after["convs"] == before["convs"] + 3
        assert after["conv_declined"] == before["conv_declined"]
        assert after["conv_gemm"] == before["conv_gemm"] + 2


def test_bfloat16_conv1d_conv3d_and_transposed_match_cpu():
    g = torch.Generator().manual_seed(11)
    cases = [
        (F.conv1d, torch.randn(2, 16, 40, generator=g), torch.randn(24, 16, 5, generator=g) / 9,
         dict(stride=2, padding=2)),
        (F.conv3d, torch.randn(1, 8, 6, 7, 8, generator=g),
         torch.randn(16, 8, 2, 3, 3, generator=g) / 9, dict(padding=1)),
        (F.conv_transpose2d, torch.randn(2, 16, 7, 6, generator=g),
         torch.randn(16, 8, 3, 3, generator=g) / 9, dict(stride=2, padding=1, output_padding=1)),
    ]
    before = torch_tpu.matrix_unit()
    for fn, x, w, kw in cases:
        x, w = x.bfloat16(), w.bfloat16()
        ys = {}
        for dev in ("tpu", "cpu"):
            xd, wd = x.to(dev).requires_grad_(), w.to(dev).requires_grad_()
            y = fn(xd, wd, **kw)
            y.float().square().sum().backward()
            ys[dev] = [y.detach(), xd.grad, wd.grad]
        for got, want in zip(ys["tpu"], ys["cpu"]):
            _conv_close(got, want)
    torch.tpu.synchronize()  # the counters move when the queued products have run
    after = torch_tpu.matrix_unit()
    if after["bfloat16"]:
        assert after["convs"] == before["convs"] + 3 * len(cases)
        assert after["conv_declined"] == before["conv_declined"]


def test_bfloat16_transposed_conv_with_bias_is_declined_and_counted():
    g = torch.Generator().manual_seed(12)
    x = torch.randn(2, 8, 5, 5, generator=g).bfloat16()
    w = (torch.randn(8, 4, 3, 3, generator=g) / 9).bfloat16()
    b = torch.randn(4, generator=g).bfloat16()
    before = torch_tpu.matrix_unit()
    got = F.conv_transpose2d(x.tpu(), w.tpu(), b.tpu(), stride=2)
    _conv_close(got, F.conv_transpose2d(x, w, b, stride=2))
    torch.tpu.synchronize()  # the counters move when the queued products have run
    after = torch_tpu.matrix_unit()
    if after["bfloat16"]:  # oneDNN's backward data, which it would run on, has no bias
        assert after["conv_declined"] == before["conv_declined"] + 1
        assert after["convs"] == before["convs"]


def test_float32_convolutions_stay_off_the_unit():
    g = torch.Generator().manual_seed(13)
    x, w = torch.randn(2, 16, 10, 10, generator=g), torch.randn(16, 16, 3, 3, generator=g)
    before = torch_tpu.matrix_unit()
    torch.testing.assert_close(F.conv2d(x.tpu(), w.tpu(), padding=1).cpu(),
                               F.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-4)
    torch.tpu.synchronize()  # the counters move when the queued products have run
    after = torch_tpu.matrix_unit()
    assert (after["convs"], after["conv_declined"]) == (before["convs"], before["conv_declined"])


def test_addmm_out_aliasing_self_runs_natively():
    """addmm(c, a, b, alpha=-1, out=c), the form LinearCrossEntropyLoss's
    backward uses 677 times a step, is addmm_: native, not the CPU fallback.
    An out= that aliases self with another shape (a broadcast bias) still
    goes to the CPU, which resizes it as PyTorch does."""
    torch.manual_seed(0)
    a, b, c = torch.randn(6, 5), torch.randn(5, 4), torch.randn(6, 4)
    ct = c.to("tpu")
    with no_fallback():
        torch.addmm(ct, a.to("tpu"), b.to("tpu"), alpha=-1, out=ct)
        got = ct.cpu()
    torch.testing.assert_close(got, torch.addmm(c, a, b, alpha=-1))
    bias = torch.randn(4)
    bt = bias.to("tpu")
    torch_tpu.reset_counts()
    r = torch.addmm(bt, a.to("tpu"), b.to("tpu"), out=bt)
    assert torch_tpu.fallback_counts().get("aten::addmm.out", 0) == 1
    torch.testing.assert_close(r.cpu(), torch.addmm(bias, a, b))


# (m, k, n): rows split (64+ rows), column split (fewer rows; a kept B with
# the LM-head shape by columns), a batch folded into rows, odd edges.
SPLIT_SHAPES = [(200, 96, 300), (40, 64, 300), (130, 257, 200), (8, 768, 4100), (256, 48, 129)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", SPLIT_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemms_split_over_the_pool_match_cpu(shape, dtype):
    # The unit runs a GEMM as parts over the compute pool (mxu.c): by rows
    # (a transposed A copied dense per part), or by 64-column blocks of B
    # (slices of a kept B's blocked form, a scratch C). Each layout of A and
    # B, a weight read three times (plain, laid out, from the cache), and a
    # beta addend must give CPU's results, and every product must reach the
    # unit, none declined.
    m, k, n = shape
    g = torch.Generator().manual_seed(m * 7 + n)
    mk = lambda *s: torch.randn(*s, generator=g).to(dtype)  # noqa: E731
    a, at = mk(m, k), mk(k, m).t()                    # row-major / transposed A
    b, bt = mk(k, n), mk(n, k).t()                    # row-major / transposed B
    c0 = mk(m, n)

    def close(got, want):  # float32: sums of k products of unit normals, in another order
        if dtype == torch.float32:
            torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=4e-6 * k ** 0.5)
        else:
            _close(got, want, dtype)
    before = torch_tpu.matrix_unit()
    runs = 0
    with no_fallback():
        for x in (a, at):
            for w in (b, bt):
                xd, wd = x.to("tpu"), w.to("tpu")
                if w is bt:
                    wd = w.t().contiguous().to("tpu").t()  # keep the transposed layout
                if x is at:
                    xd = x.t().contiguous().to("tpu").t()
                for _ in range(3):
                    close(xd @ wd, x @ w)
                    runs += 1
                close(torch.addmm(c0.to("tpu"), xd, wd, beta=0.5), torch.addmm(c0, x, w, beta=0.5))
                runs += 1
    after = torch_tpu.matrix_unit()
    if after["bfloat16" if dtype == torch.bfloat16 else "float32"]:
        assert after["declined"] == before["declined"]
        assert after["gemms"] == before["gemms"] + runs
