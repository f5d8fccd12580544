"""Matrix-unit benchmark: tpu GEMMs vs PyTorch CPU GEMMs, side by side in one run.

The tpu's "matrix unit" runs bfloat16 GEMMs on the CPU's AMX / AVX512-BF16
through oneDNN; this measures it neutrally against what PyTorch CPU does
with the same tensors on the same machine:

1. GEMMs, each in float32, bfloat16 and float16 (tpu and CPU in the same
   dtype): 128x768 @ 768x3072, 512x768 @ 768x768, 2048^3, 1x768 @ 768x50257
   (a decode LM head), and F.linear(x, W, b) with x [128,768], W [3072,768],
   b [3072]. ms and GFLOP/s (2*M*N*K / s) per device.
2. A GPT-2-shaped forward (4 layers, n_embd 768, 12 heads, vocab 50257;
   transformers' GPT2LMHeadModel with random weights when transformers
   imports, else the same shape in plain torch.nn), seq 128, batch 1 and 8,
   under torch.no_grad() and torch.autocast(device_type=dev,
   dtype=torch.bfloat16); and the same model in plain float32, which gives
   the tpu's bf16-vs-its-own-fp32 ratio. One model (same weights) is put on
   each device with .to(dev).

Peers run as a user runs them: default PyTorch thread settings, no
OMP_WAIT_POLICY, no thread counts set. tpu and CPU run in one process in
alternating rounds (one warm-up call each first, as side_by_side.compare);
each case records min and median over the rounds for both devices.

Ratio convention: x = cpu_ms / tpu_ms, so x > 1 means the tpu is faster.
The table's x columns use the min and the median times.

3. int8: torch._int_mm and aten._weight_int8pack_mm (weight-only int8).
4. `generate()` with bfloat16 weights (batch 1, greedy, KV cache), a
   Llama-shaped training step under bf16 autocast with AdamW, and the
   convolutions of ResNet-50's bottleneck blocks in bfloat16 and float32
   (forward, input gradient, weight gradient; sums per pass).

Prints machine facts (torch version, CPU capability, CPU flags, load
average, torch_tpu.matrix_unit()), the table, matrix_unit() again (its
counts show which path ran), and writes bench/results/matmul.json.
Usage: python bench/bench_matmul.py [--quick] [--rounds N] [--model auto|transformers|nn]
                                    [--no-model] [--no-conv] [--conv-only] [--conv-split-ab]
                                    [--conv-gemm-ab] [--conv-1x1] [--int8-only] [--out PATH]
  --quick: 5 rounds, skips the 2048^3 GEMM and batch 8 (about 1-2 minutes).
"""
import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from side_by_side import sync  # noqa: E402

DEVICES = ("tpu", "cpu")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2")


# ---------------------------------------------------------------- timing

SETTLE_S = [0.05]  # idle time before each side of a round (--settle)


def compare_spread(calls, rounds):
    """side_by_side.compare, keeping every round: one warm-up call each, then
    `rounds` alternating rounds (tpu then cpu), the device synchronised inside
    the timed region. Returns {dev: [seconds, ...]}.

    Before each timed call the loop sleeps SETTLE_S and makes one untimed
    call, as bench_kernels.py does: at the default OMP_WAIT_POLICY PyTorch
    CPU's OpenMP worker spins for a few ms after a parallel region, on a core
    the tpu's next kernel needs (2048^3 bfloat16 right after a CPU GEMM:
    14.2 ms, 10.6 after 5 ms of idle), and the first call after an idle
    spell is cold on either side; a loop that runs one device back to back
    pays neither."""
    for d in calls:
        calls[d]()
        sync(d.split("_")[0])
    times = {d: [] for d in calls}
    for _ in range(rounds):
        for d in calls:
            if SETTLE_S[0] > 0:
                time.sleep(SETTLE_S[0])
                calls[d]()  # untimed (see above)
            sync(d.split("_")[0])
            t0 = time.perf_counter()
            calls[d]()
            sync(d.split("_")[0])
            times[d].append(time.perf_counter() - t0)
    return times


def row_from(case, dtype, times, flops):
    r = {"case": case, "dtype": dtype, "flops": flops}
    for d in DEVICES:
        r[f"{d}_min_ms"] = min(times[d]) * 1e3
        r[f"{d}_median_ms"] = statistics.median(times[d]) * 1e3
        r[f"{d}_all_ms"] = [t * 1e3 for t in times[d]]
        r[f"{d}_gflops"] = flops / min(times[d]) / 1e9 if flops else None
    r["x_min"] = r["cpu_min_ms"] / r["tpu_min_ms"]
    r["x_median"] = r["cpu_median_ms"] / r["tpu_median_ms"]
    return r


# ---------------------------------------------------------------- facts

def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return {fl: fl in have for fl in FLAGS}
    except OSError:
        pass
    return {fl: None for fl in FLAGS}


def matrix_unit_info():
    info = getattr(torch_tpu, "matrix_unit", None)
    if not callable(info):
        return None
    try:
        return info()
    except Exception as e:  # report, do not hide
        return {"error": f"{type(e).__name__}: {e}"}


def show_matrix_unit(label, mu):
    if mu is None:
        print(f"{label}: not available in this build")
    else:
        print(f"{label}: {json.dumps(mu, default=str)}")


# ---------------------------------------------------------------- GEMMs

def gemm_cases(quick):
    """(name, make(device, dtype) -> args, fn(*args), flops)."""
    def mm(m, k, n):
        def make(dev, dt):
            g = torch.Generator().manual_seed(m * 7 + k * 3 + n)
            return (torch.randn(m, k, generator=g).to(dt).to(dev),
                    torch.randn(k, n, generator=g).to(dt).to(dev))
        return (f"{m}x{k} @ {k}x{n}", make, torch.matmul, 2 * m * n * k)

    def linear(m, k, n):
        def make(dev, dt):
            g = torch.Generator().manual_seed(m + k + n)
            return (torch.randn(m, k, generator=g).to(dt).to(dev),
                    (torch.randn(n, k, generator=g) / k ** 0.5).to(dt).to(dev),
                    torch.randn(n, generator=g).to(dt).to(dev))
        return (f"linear x[{m},{k}] W[{n},{k}] b", make, F.linear, 2 * m * n * k)

    cases = [mm(128, 768, 3072), mm(512, 768, 768)]
    if not quick:
        cases.append(mm(2048, 2048, 2048))
    cases += [mm(1, 768, 50257), linear(128, 768, 3072)]
    return cases


def run_gemms(quick, rounds):
    rows = []
    for name, make, fn, flops in gemm_cases(quick):
        for dname, dt in DTYPES.items():
            try:
                args = {d: make(d, dt) for d in DEVICES}
                times = compare_spread({d: (lambda d=d: fn(*args[d])) for d in DEVICES}, rounds)
                r = row_from(name, dname, times, flops)
            except Exception as e:
                r = {"case": name, "dtype": dname, "error": f"{type(e).__name__}: {e}"}
            rows.append(r)
            print_row(r)
            args = None
    return rows


# ---------------------------------------------------------------- model

N_LAYER, N_EMBD, N_HEAD, VOCAB, N_POS, SEQ = 4, 768, 12, 50257, 256, 128


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(N_EMBD), nn.LayerNorm(N_EMBD)
        self.c_attn, self.c_proj = nn.Linear(N_EMBD, 3 * N_EMBD), nn.Linear(N_EMBD, N_EMBD)
        self.c_fc, self.mlp_proj = nn.Linear(N_EMBD, 4 * N_EMBD), nn.Linear(4 * N_EMBD, N_EMBD)

    def forward(self, x):
        B, S, E = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(E, dim=-1)
        q, k, v = (t.view(B, S, N_HEAD, E // N_HEAD).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(a.transpose(1, 2).reshape(B, S, E))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class NNGPT2(nn.Module):
    """GPT-2 shape in plain torch.nn (tied LM head), for when transformers is absent."""

    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, N_EMBD), nn.Embedding(N_POS, N_EMBD)
        self.h = nn.ModuleList(Block() for _ in range(N_LAYER))
        self.ln_f = nn.LayerNorm(N_EMBD)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for b in self.h:
            x = b(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def build_model(kind):
    torch.manual_seed(0)
    if kind in ("auto", "transformers"):
        try:
            from transformers import GPT2Config, GPT2LMHeadModel
            cfg = GPT2Config(n_layer=N_LAYER, n_embd=N_EMBD, n_head=N_HEAD, n_positions=N_POS,
                             vocab_size=VOCAB)
            m = GPT2LMHeadModel(cfg).eval()
            return m, "transformers GPT2LMHeadModel", lambda m, ids: m(input_ids=ids,
                                                                       use_cache=False).logits
        except ImportError:
            if kind == "transformers":
                raise
    return NNGPT2().eval(), "plain torch.nn GPT-2", lambda m, ids: m(ids)


def model_flops(batch):
    """Matmul FLOPs of one forward: the linear layers, the LM head and the
    attention products QK^T and AV (counted full, not causal-halved)."""
    tok = batch * SEQ
    return (2 * tok * (N_LAYER * 12 * N_EMBD ** 2 + VOCAB * N_EMBD)
            + 4 * batch * N_LAYER * SEQ * SEQ * N_EMBD)


def run_models(kind, batches, rounds):
    base, label, fwd = build_model(kind)
    print(f"model: {label}, {N_LAYER} layers, n_embd {N_EMBD}, {N_HEAD} heads, seq {SEQ}")
    models = {d: copy.deepcopy(base).to(d) for d in DEVICES}
    rows = []
    for b in batches:
        g = torch.Generator().manual_seed(b)
        ids_cpu = torch.randint(0, VOCAB, (b, SEQ), generator=g)
        ids = {d: ids_cpu.to(d) for d in DEVICES}
        for mode in ("autocast-bf16", "float32"):
            def call(d, mode=mode):
                with torch.no_grad():
                    if mode == "autocast-bf16":
                        with torch.autocast(device_type=d, dtype=torch.bfloat16):
                            return fwd(models[d], ids[d])
                    return fwd(models[d], ids[d])
            name = f"gpt2 fwd b{b} s{SEQ}"
            try:
                times = compare_spread({d: (lambda d=d: call(d)) for d in DEVICES}, rounds)
                r = row_from(name, mode, times, model_flops(b))
                r["tokens"] = b * SEQ
            except Exception as e:
                r = {"case": name, "dtype": mode, "error": f"{type(e).__name__}: {e}"}
            rows.append(r)
            print_row(r)
        bf, fp = rows[-2], rows[-1]
        if "error" not in bf and "error" not in fp:
            for d in DEVICES:
                bf[f"{d}_bf16_vs_own_fp32_min"] = fp[f"{d}_min_ms"] / bf[f"{d}_min_ms"]
                bf[f"{d}_bf16_vs_own_fp32_median"] = fp[f"{d}_median_ms"] / bf[f"{d}_median_ms"]
            print(f"  b{b}: autocast-bf16 vs own float32 (fp32_ms/bf16_ms, min/median): "
                  f"tpu {bf['tpu_bf16_vs_own_fp32_min']:.2f}/{bf['tpu_bf16_vs_own_fp32_median']:.2f}"
                  f"  cpu {bf['cpu_bf16_vs_own_fp32_min']:.2f}/{bf['cpu_bf16_vs_own_fp32_median']:.2f}",
                  flush=True)
    if hasattr(base, "generate"):
        rows.append(run_generate(base, rounds))
    return rows, label


GEN_PROMPT, GEN_NEW = 16, 32


def run_generate(base, rounds):
    """Greedy `generate()` of GEN_NEW tokens (KV cache on) after a
    GEN_PROMPT-token prompt, batch 1, with the model's weights in bfloat16
    (model.to(torch.bfloat16)): the decode loop is one-row GEMMs that stream
    each weight once per token. Reported as tokens/s per device in the row's
    `*_tokens_per_s`; x is cpu_ms / tpu_ms as everywhere."""
    models = {d: copy.deepcopy(base).to(torch.bfloat16).to(d) for d in DEVICES}
    ids_cpu = torch.randint(0, VOCAB, (1, GEN_PROMPT), generator=torch.Generator().manual_seed(7))
    ids = {d: ids_cpu.to(d) for d in DEVICES}

    def call(d):
        with torch.no_grad():
            return models[d].generate(ids[d], max_new_tokens=GEN_NEW, min_new_tokens=GEN_NEW,
                                      do_sample=False, pad_token_id=0)
    name = f"generate b1 {GEN_PROMPT}+{GEN_NEW} tok"
    try:
        same = torch.equal(call("tpu").cpu(), call("cpu"))
        times = compare_spread({d: (lambda d=d: call(d)) for d in DEVICES}, rounds)
        r = row_from(name, "bfloat16", times, None)
        for d in DEVICES:
            r[f"{d}_tokens_per_s"] = GEN_NEW / min(times[d])
        r["same_tokens"] = same
    except Exception as e:  # noqa: BLE001 - the row reports it
        r = {"case": name, "dtype": "bfloat16", "error": f"{type(e).__name__}: {e}"}
    print_row(r)
    if "error" not in r:
        print(f"  generate: tokens/s tpu {r['tpu_tokens_per_s']:.1f}, cpu {r['cpu_tokens_per_s']:.1f}; "
              f"same greedy tokens as cpu: {r['same_tokens']}", flush=True)
    return r


def run_int8(rounds):
    """torch._int_mm (int8 x int8 -> int32) and aten._weight_int8pack_mm
    (bf16 activations x int8 weight [n, k] with per-channel scales: weight-
    only int8 quantisation's linear layer), tpu against PyTorch CPU."""
    rows = []
    g = torch.Generator().manual_seed(9)
    for m, k, n in ((128, 768, 3072), (512, 768, 768)):
        a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
        b = torch.randint(-128, 128, (k, n), generator=g, dtype=torch.int8)
        ad, bd = {d: a.to(d) for d in DEVICES}, {d: b.to(d) for d in DEVICES}
        times = compare_spread({d: (lambda d=d: torch._int_mm(ad[d], bd[d])) for d in DEVICES},
                               rounds)
        r = row_from(f"_int_mm {m}x{k} @ {k}x{n}", "int8", times, 2 * m * k * n)
        rows.append(r)
        print_row(r)
    for m, k, n in ((1, 768, 50257), (128, 768, 3072)):
        x = torch.randn(m, k, generator=g).bfloat16()
        w = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
        sc = (torch.rand(n, generator=g) / 64).bfloat16()
        xd, wd, sd = ({d: t.to(d) for d in DEVICES} for t in (x, w, sc))
        op = torch.ops.aten._weight_int8pack_mm
        times = compare_spread({d: (lambda d=d: op(xd[d], wd[d], sd[d])) for d in DEVICES},
                               rounds)
        r = row_from(f"w8 {m}x{k} @ int8[{n},{k}]^T", "bf16 x int8", times, 2 * m * k * n)
        rows.append(r)
        print_row(r)
    return rows


# ResNet-50's bottleneck convolutions (C_in, C_out, kernel, H=W), one of
# each stage's three, at batch 4 with padding k // 2: forward, the input
# gradient and the weight gradient (aten.convolution_backward with one
# output asked for, as autograd asks when only that one is needed).
RESNET_CONVS = [(256, 64, 1, 56), (64, 64, 3, 56), (64, 256, 1, 56), (512, 128, 1, 28),
                (128, 128, 3, 28), (1024, 256, 1, 14), (256, 256, 3, 14), (2048, 512, 1, 7),
                (512, 512, 3, 7)]
CONV_BATCH = 4
CONV_PASSES = {"fwd": None, "dgrad": [True, False, False], "wgrad": [False, True, False]}


def with_setting(fn, name, value):
    """fn with the runtime setting `name` (tpu/config.h) at `value` while it
    runs (the matrix unit reads its switches when a product runs:
    synchronised inside)."""
    def call():
        torch_tpu._C.set_runtime_config(name, value)
        try:
            fn()
            torch.tpu.synchronize()
        finally:
            torch_tpu._C.set_runtime_config(name, None)
    return call


def unsplit(fn):
    """fn with the matrix unit's convolutions on one OpenMP team each
    (TORCH_TPU_CONV_SPLIT=0)."""
    return with_setting(fn, "TORCH_TPU_CONV_SPLIT", "0")


def run_convs(rounds, split_ab=False, gemm_ab=False):
    """split_ab: bfloat16 rows also time the tpu with its convolutions
    unsplit (tpu_team), in the same alternating rounds. gemm_ab: bfloat16
    1x1 rows also time the tpu with its 1x1 GEMM path off
    (TORCH_TPU_CONV_GEMM=0: oneDNN's convolution primitives, tpu_prims)."""
    rows = []
    for dt_name in ("bfloat16", "float32"):
        dt = DTYPES[dt_name]
        for pass_name, mask in CONV_PASSES.items():
            total = {d: 0.0 for d in DEVICES}
            for ci, co, k, hw in RESNET_CONVS:
                g = torch.Generator().manual_seed(ci + co + k)
                x = torch.randn(CONV_BATCH, ci, hw, hw, generator=g).to(dt)
                w = (torch.randn(co, ci, k, k, generator=g) * 0.05).to(dt)
                go = torch.randn(CONV_BATCH, co, hw, hw, generator=g).to(dt)
                xs, ws, gos = ({d: t.to(d) for d in DEVICES} for t in (x, w, go))
                p = k // 2
                if mask is None:
                    calls = {d: (lambda d=d: F.conv2d(xs[d], ws[d], padding=p)) for d in DEVICES}
                else:
                    calls = {d: (lambda d=d: torch.ops.aten.convolution_backward(
                        gos[d], xs[d], ws[d], None, [1, 1], [p, p], [1, 1], False, [0, 0], 1,
                        mask)) for d in DEVICES}
                if split_ab and dt_name == "bfloat16":
                    calls["tpu_team"] = unsplit(calls["tpu"])
                if gemm_ab and dt_name == "bfloat16" and k == 1:
                    calls["tpu_prims"] = with_setting(calls["tpu"], "TORCH_TPU_CONV_GEMM", "0")
                times = compare_spread(calls, rounds)
                r = row_from(f"conv {pass_name} {ci}->{co} {k}x{k} {hw}x{hw} N{CONV_BATCH}",
                             dt_name, times, 2 * CONV_BATCH * co * ci * k * k * hw * hw)
                for d in DEVICES:
                    total[d] += r[f"{d}_min_ms"]
                rows.append(r)
                print_row(r)
                if "tpu_team" in times:
                    tt = [t * 1e3 for t in times["tpu_team"]]
                    r["tpu_team_min_ms"], r["tpu_team_median_ms"] = min(tt), statistics.median(tt)
                    r["tpu_team_all_ms"] = tt
                    total["tpu_team"] = total.get("tpu_team", 0.0) + min(tt)
                    print(f"{'  the same, tpu unsplit (one OpenMP team)':{W}} {dt_name:>13} "
                          f"{min(tt):9.3f} {statistics.median(tt):9.3f}  x(split) "
                          f"{min(tt) / r['tpu_min_ms']:.2f} min {statistics.median(tt) / r['tpu_median_ms']:.2f} median", flush=True)
                if "tpu_prims" in times:
                    tt = [t * 1e3 for t in times["tpu_prims"]]
                    r["tpu_prims_min_ms"], r["tpu_prims_median_ms"] = min(tt), statistics.median(tt)
                    r["tpu_prims_all_ms"] = tt
                    print(f"{'  the same, tpu 1x1 GEMM path off':{W}} {dt_name:>13} "
                          f"{min(tt):9.3f} {statistics.median(tt):9.3f}  x(gemm) "
                          f"{min(tt) / r['tpu_min_ms']:.2f} min {statistics.median(tt) / r['tpu_median_ms']:.2f} median", flush=True)
            print(f"  resnet-50 bottleneck convs {pass_name}, {dt_name}, sum of mins: "
                  f"tpu {total['tpu']:.1f} ms, cpu {total['cpu']:.1f} ms, "
                  f"x {total['cpu'] / total['tpu']:.2f}"
                  + (f"; tpu unsplit {total['tpu_team']:.1f} ms, x {total['cpu'] / total['tpu_team']:.2f}"
                     if "tpu_team" in total else ""), flush=True)
            rows.append({"case": f"resnet-50 bottleneck convs {pass_name} (sum of mins)",
                         "dtype": dt_name, "tpu_ms": total["tpu"], "cpu_ms": total["cpu"],
                         "x": total["cpu"] / total["tpu"]})
    return rows


# ResNet-50's 1x1 convolutions beyond the bottleneck rows above, bfloat16,
# batch 4 (C_in, C_out, H=W of the input, stride, memory format): the
# stride-2 downsampling projections of stages 2-4 in NCHW, and 1x1 layers in
# channels_last (stride 1 and 2).
RESNET_1X1_EXTRA = [(256, 512, 56, 2, "nchw"), (512, 1024, 28, 2, "nchw"),
                    (1024, 2048, 14, 2, "nchw"), (256, 1024, 14, 1, "nchw"),
                    (512, 2048, 7, 1, "nchw"),
                    (256, 64, 56, 1, "channels_last"), (1024, 256, 14, 1, "channels_last"),
                    (2048, 512, 7, 1, "channels_last"), (512, 1024, 28, 2, "channels_last")]


def run_convs_1x1(rounds, gemm_ab=False):
    """RESNET_1X1_EXTRA in bfloat16: forward, input gradient, weight gradient;
    gemm_ab also times the tpu with TORCH_TPU_CONV_GEMM=0 (tpu_prims)."""
    rows = []
    dt = torch.bfloat16
    for pass_name, mask in CONV_PASSES.items():
        total = {"tpu": 0.0, "cpu": 0.0, "tpu_prims": 0.0}
        for ci, co, hw, st, fmt in RESNET_1X1_EXTRA:
            mf = torch.channels_last if fmt == "channels_last" else torch.contiguous_format
            g = torch.Generator().manual_seed(ci + co + st)
            ho = (hw - 1) // st + 1
            x = torch.randn(CONV_BATCH, ci, hw, hw, generator=g).to(dt).to(memory_format=mf)
            w = (torch.randn(co, ci, 1, 1, generator=g) * 0.05).to(dt).to(memory_format=mf)
            go = torch.randn(CONV_BATCH, co, ho, ho, generator=g).to(dt).to(memory_format=mf)
            xs, ws, gos = ({d: t.to(d) for d in DEVICES} for t in (x, w, go))
            if mask is None:
                calls = {d: (lambda d=d: F.conv2d(xs[d], ws[d], stride=st)) for d in DEVICES}
            else:
                calls = {d: (lambda d=d: torch.ops.aten.convolution_backward(
                    gos[d], xs[d], ws[d], None, [st, st], [0, 0], [1, 1], False, [0, 0], 1,
                    mask)) for d in DEVICES}
            if gemm_ab:
                calls["tpu_prims"] = with_setting(calls["tpu"], "TORCH_TPU_CONV_GEMM", "0")
            times = compare_spread(calls, rounds)
            r = row_from(f"conv1x1 {pass_name} {ci}->{co} s{st} {hw}x{hw} {fmt} N{CONV_BATCH}",
                         "bfloat16", times, 2 * CONV_BATCH * co * ci * ho * ho)
            rows.append(r)
            print_row(r)
            for d in DEVICES:
                total[d] += r[f"{d}_min_ms"]
            if "tpu_prims" in times:
                tt = [t * 1e3 for t in times["tpu_prims"]]
                r["tpu_prims_min_ms"], r["tpu_prims_median_ms"] = min(tt), statistics.median(tt)
                r["tpu_prims_all_ms"] = tt
                total["tpu_prims"] += min(tt)
                print(f"{'  the same, tpu 1x1 GEMM path off':{W}} {'bfloat16':>13} "
                      f"{min(tt):9.3f} {statistics.median(tt):9.3f}  x(gemm) "
                      f"{min(tt) / r['tpu_min_ms']:.2f} min {statistics.median(tt) / r['tpu_median_ms']:.2f} median", flush=True)
        print(f"  resnet-50 1x1 extra convs {pass_name}, bfloat16, sum of mins: "
              f"tpu {total['tpu']:.1f} ms, cpu {total['cpu']:.1f} ms, "
              f"x {total['cpu'] / total['tpu']:.2f}"
              + (f"; tpu GEMM path off {total['tpu_prims']:.1f} ms" if gemm_ab else ""), flush=True)
        rows.append({"case": f"resnet-50 1x1 extra convs {pass_name} (sum of mins)",
                     "dtype": "bfloat16", "tpu_ms": total["tpu"], "cpu_ms": total["cpu"],
                     "x": total["cpu"] / total["tpu"],
                     **({"tpu_prims_ms": total["tpu_prims"]} if gemm_ab else {})})
    return rows


def run_train(rounds):
    """A Llama-shaped training step (transformers LlamaForCausalLM: hidden
    512, 4 layers, 8 heads / 4 KV heads, MLP 1376, vocab 8000; batch 4 x
    seq 128) under bf16 autocast with AdamW: forward, backward, step."""
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        print(f"llama train step: skipped ({e})")
        return []
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=4, vocab_size=8000,
                      max_position_embeddings=256)
    base = LlamaForCausalLM(cfg)
    ids_cpu = torch.randint(0, cfg.vocab_size, (4, 128), generator=torch.Generator().manual_seed(5))
    models = {d: copy.deepcopy(base).to(d) for d in DEVICES}
    opts = {d: torch.optim.AdamW(models[d].parameters(), lr=1e-4) for d in DEVICES}
    ids = {d: ids_cpu.to(d) for d in DEVICES}

    def step(d):
        with torch.autocast(device_type=d, dtype=torch.bfloat16):
            loss = models[d](input_ids=ids[d], labels=ids[d]).loss
        loss.backward()
        opts[d].step()
        opts[d].zero_grad(set_to_none=True)
        return loss.item()
    name = "llama train step b4 s128"
    try:
        times = compare_spread({d: (lambda d=d: step(d)) for d in DEVICES}, rounds)
        r = row_from(name, "autocast-bf16", times, None)
    except Exception as e:  # noqa: BLE001 - the row reports it
        r = {"case": name, "dtype": "autocast-bf16", "error": f"{type(e).__name__}: {e}"}
    print_row(r)
    return [r]


# ---------------------------------------------------------------- output

W = 30
HEADER = (f"{'case':{W}} {'dtype':>13} {'tpu min':>9} {'tpu med':>9} {'cpu min':>9} "
          f"{'cpu med':>9} {'tpu GF/s':>9} {'cpu GF/s':>9} {'x min':>6} {'x med':>6}")


def print_row(r):
    if "error" in r:
        print(f"{r['case']:{W}} {r['dtype']:>13}  ERROR {r['error'][:120]}", flush=True)
        return
    print(f"{r['case']:{W}} {r['dtype']:>13} {r['tpu_min_ms']:9.3f} {r['tpu_median_ms']:9.3f} "
          f"{r['cpu_min_ms']:9.3f} {r['cpu_median_ms']:9.3f} {gf(r['tpu_gflops'])} "
          f"{gf(r['cpu_gflops'])} {r['x_min']:6.2f} {r['x_median']:6.2f}", flush=True)


def gf(v):
    return f"{v:9.1f}" if v is not None else f"{'-':>9}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true",
                    help="5 rounds, skip the 2048^3 GEMM and batch 8")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per case (default 7; quick 5)")
    ap.add_argument("--model", choices=("auto", "transformers", "nn"), default="auto")
    ap.add_argument("--no-model", action="store_true",
                    help="no GPT-2 forward, generate() or Llama training step")
    ap.add_argument("--no-conv", action="store_true", help="no ResNet-50 convolutions")
    ap.add_argument("--conv-only", action="store_true",
                    help="only the ResNet-50 convolutions (no GEMM, int8 or model rows)")
    ap.add_argument("--int8-only", action="store_true",
                    help="only the int8 rows (torch._int_mm, aten._weight_int8pack_mm)")
    ap.add_argument("--conv-split-ab", action="store_true",
                    help="bfloat16 convolutions also with the tpu's split over the pool off "
                         "(TORCH_TPU_CONV_SPLIT=0), in the same alternating rounds")
    ap.add_argument("--conv-gemm-ab", action="store_true",
                    help="bfloat16 1x1 convolutions also with the tpu's 1x1 GEMM path off "
                         "(TORCH_TPU_CONV_GEMM=0: oneDNN's convolution primitives), in the "
                         "same alternating rounds")
    ap.add_argument("--conv-1x1", action="store_true",
                    help="also ResNet-50's other 1x1 convolutions in bfloat16 (stride-2 "
                         "downsampling, 14x14/7x7 expansions, channels_last); with "
                         "--conv-gemm-ab also with the 1x1 GEMM paths off")
    ap.add_argument("--settle", type=float, default=SETTLE_S[0],
                    help="seconds of idle, then one untimed call, before each timed call "
                         "(default 0.05; 0: none)")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/matmul.json)")
    a = ap.parse_args()
    rounds = a.rounds or (5 if a.quick else 7)
    SETTLE_S[0] = a.settle
    batches = [1] if a.quick else [1, 8]

    load_start = os.getloadavg()
    flags = cpu_flags()
    mu_before = matrix_unit_info()
    print(f"torch {torch.__version__}, torch_tpu at {os.path.dirname(torch_tpu.__file__)}")
    print(f"cpu capability: {torch.backends.cpu.get_cpu_capability()}; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
          f"torch threads {torch.get_num_threads()} (defaults, none set here)")
    print("cpu flags: " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in flags.items()))
    print(f"loadavg at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    show_matrix_unit("matrix_unit", mu_before)
    print(f"{a.settle} s idle and one untimed call before each timed call; OMP_WAIT_POLICY="
          f"{os.environ.get('OMP_WAIT_POLICY', 'unset (libgomp default)')}")
    print(f"rounds {rounds} (alternating tpu, cpu; min and median); times in ms; "
          f"GF/s from min; x = cpu_ms / tpu_ms (>1: tpu faster)")
    print(HEADER)
    t0 = time.perf_counter()
    rows = [] if a.conv_only or a.int8_only else run_gemms(a.quick, rounds)
    if not a.conv_only:
        rows += run_int8(rounds)
    model_label = None
    if not a.no_model and not a.conv_only and not a.int8_only:
        mrows, model_label = run_models(a.model, batches, rounds)
        rows += mrows
        rows += run_train(rounds)
    if not a.no_conv and not a.int8_only:
        rows += run_convs(rounds, a.conv_split_ab, a.conv_gemm_ab)
    if a.conv_1x1:
        rows += run_convs_1x1(rounds, a.conv_gemm_ab)
    load_end = os.getloadavg()
    mu_after = matrix_unit_info()
    print(f"loadavg at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}; "
          f"wall {time.perf_counter() - t0:.1f} s")
    show_matrix_unit("matrix_unit after", mu_after)

    out = a.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                "matmul.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"convention": "x = cpu_ms / tpu_ms, >1 means tpu faster",
                   "machine": {"torch": torch.__version__,
                               "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                               "cpu_flags": flags, "cpu_count": os.cpu_count(),
                               "torch_threads": torch.get_num_threads(),
                               "processor": platform.processor() or platform.machine()},
                   "loadavg_start": load_start, "loadavg_end": load_end,
                   "matrix_unit_before": mu_before, "matrix_unit_after": mu_after,
                   "rounds": rounds, "quick": a.quick, "model": model_label, "rows": rows},
                  f, indent=1, default=str)
    print("wrote", out)


if __name__ == "__main__":
    main()
