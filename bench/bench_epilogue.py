"""GEMM epilogues on and off, side by side: DEFER_AND_FUSE with the fusion
compiler folding a GEMM's pointwise consumers into it (GEMM groups) against
the same mode with them run as separate fused kernels
(torch_tpu._C.set_gemm_epilogues(False)), in one process, alternating rounds.

Cases: Linear + GELU + residual add at GPT-2 MLP shapes (float32, and
bfloat16 tensors), and transformers' GPT2LMHeadModel forward (4 layers,
n_embd 768, seq 128, batch 1 and 4; no_grad) in float32 and under bf16
autocast. Default thread settings. Ratio x = off_ms / on_ms (x > 1: the
epilogues help). Prints min and median over the rounds, the load average,
torch_tpu.matrix_unit() (which GEMM path ran) and the epilogue counts.
Usage: python bench/bench_epilogue.py [--rounds N] [--no-model]
"""
import argparse
import contextlib
import os
import statistics
import time

import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu import _C


def timed(fn, rounds):
    times = {"off": [], "on": []}
    for mode in times:  # warm-up: compile both programs
        _C.set_gemm_epilogues(mode == "on")
        fn()
        torch.tpu.synchronize()
    for _ in range(rounds):
        for mode in times:
            _C.set_gemm_epilogues(mode == "on")
            t0 = time.perf_counter()
            fn()
            torch.tpu.synchronize()
            times[mode].append(time.perf_counter() - t0)
    _C.set_gemm_epilogues(True)
    return times


def report(name, times):
    mn = {k: min(v) * 1e3 for k, v in times.items()}
    md = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(f"{name:44s} off {mn['off']:8.3f} on {mn['on']:8.3f} ms (min)  "
          f"x {mn['off'] / mn['on']:.3f} min, {md['off'] / md['on']:.3f} median", flush=True)


def linear_cases(rounds):
    for dtype in (torch.float32, torch.bfloat16):
        for b, s, k, n in ((1, 8, 768, 3072), (1, 128, 768, 3072), (4, 128, 768, 3072),
                           (4, 128, 3072, 768)):
            g = torch.Generator().manual_seed(0)
            x = torch.randn(b, s, k, generator=g).to("tpu", dtype)
            w = (torch.randn(n, k, generator=g) * 0.02).to("tpu", dtype)
            bias = torch.randn(n, generator=g).to("tpu", dtype)
            r = torch.randn(b, s, n, generator=g).to("tpu", dtype)
            fn = lambda: F.gelu(F.linear(x, w, bias)) + r  # noqa: E731
            report(f"linear+gelu+add {b}x{s}x{k}->{n} {str(dtype)[6:]}", timed(fn, rounds))


def model_cases(rounds):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=4, n_embd=768, n_head=12, vocab_size=50257, n_positions=128)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).eval().to("tpu")
    for autocast in (False, True):
        for b in (1, 4):
            ids = torch.randint(0, cfg.vocab_size, (b, 128)).to("tpu")
            ctx = (lambda: torch.autocast("tpu", dtype=torch.bfloat16)) if autocast else contextlib.nullcontext

            def fn():
                with torch.no_grad(), ctx():
                    model(ids)
            report(f"GPT-2 4L h768 seq128 b{b}" + (" bf16 autocast" if autocast else " fp32"),
                   timed(fn, rounds))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--no-model", action="store_true")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"matrix unit {torch_tpu.matrix_unit()}")
    print("load average (start)", os.getloadavg())
    torch_tpu.reset_defer_metrics()
    with torch_tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        linear_cases(args.rounds)
        if not args.no_model:
            model_cases(args.rounds)
    m = torch_tpu.defer_metrics()
    print(f"gemm_epilogues {m['gemm_epilogues']}, epilogue_nodes {m['epilogue_nodes']}, "
          f"fused_kernels {m['fused_kernels']}")
    print("load average (end)", os.getloadavg())
    print(f"matrix unit after: {torch_tpu.matrix_unit()}")


if __name__ == "__main__":
    main()
