"""Paged attention benchmark: one decode step of a serving batch on tpu
(torch.ops.tpu.paged_attention over the paged KV cache, the runtime's
kernel) against the same computation in PyTorch CPU (gather each sequence's
blocks, then F.scaled_dot_product_attention with grouped-query heads).

Default: 32 sequences x 512 context tokens, Hq 32 / Hkv 8 / head 128,
block size 16, shuffled block tables; bfloat16 and float32. Best of N
rounds (and each side's min-max over them), tpu and CPU alternating so both see the same machine load; also
the cache write of the step's 32 new tokens (paged_kv_write_ vs CPU
index_put_). Prints the instruction path and the load average before and
after: figures from a shared machine are only meaningful side by side.

Usage: PYTHONPATH=. python bench/bench_paged_attention.py [--rounds 10]
       [--seqs 32] [--context 512] [--block-size 16]
"""
import argparse
import os
import time

import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401
from bench_roof import simd_path  # the same clones (VM_SIMD_CLONES) as the paged kernel


def make(B, ctx, Hq, Hkv, D, bs, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    nb = -(-ctx // bs)
    N = B * nb + 8
    table = torch.randperm(N, generator=g)[:B * nb].view(B, nb).to(torch.int32)
    kc = torch.randn(N, bs, Hkv, D, generator=g).to(dtype)
    vc = torch.randn(N, bs, Hkv, D, generator=g).to(dtype)
    q = torch.randn(B, Hq, D, generator=g).to(dtype)
    qsl = torch.arange(B + 1, dtype=torch.int32)
    lens = torch.full((B,), ctx, dtype=torch.int32)
    pos = torch.full((B,), ctx - 1)
    slots = (table[torch.arange(B), pos // bs].long() * bs + pos % bs)
    k_new = torch.randn(B, Hkv, D, generator=g).to(dtype)
    v_new = torch.randn(B, Hkv, D, generator=g).to(dtype)
    return dict(q=q, kc=kc, vc=vc, qsl=qsl, lens=lens, table=table, slots=slots, k=k_new,
                v=v_new)


def cpu_decode(c, scale, ctx):
    """The same step in PyTorch CPU: gather the blocks, SDPA (GQA)."""
    k = c["kc"][c["table"].long()].flatten(1, 2)[:, :ctx]  # [B, ctx, Hkv, D]
    v = c["vc"][c["table"].long()].flatten(1, 2)[:, :ctx]
    return F.scaled_dot_product_attention(c["q"].unsqueeze(2), k.transpose(1, 2),
                                          v.transpose(1, 2), scale=scale, enable_gqa=True)


def timed(fn, sync, results, key):
    """Appends one call's seconds (synchronised) to results[key]."""
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    results.setdefault(key, []).append(time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seqs", type=int, default=32)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--block-size", type=int, default=16)
    a = ap.parse_args()
    B, ctx, Hq, Hkv, D, bs = a.seqs, a.context, 32, 8, 128, a.block_size
    print(f"torch {torch.__version__}, torch CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, torch threads {torch.get_num_threads()}; "
          f"tpu kernel path {simd_path()['tpu_ew_f32_clone']}, pool threads {os.cpu_count()}")
    print(f"decode step: {B} seqs x {ctx} context, Hq {Hq} / Hkv {Hkv} / D {D}, block {bs}")
    print("load average (start)", os.getloadavg())
    scale = D ** -0.5
    tsync = torch.tpu.synchronize
    print(f"{'dtype':>9} {'op':>16} {'tpu ms':>9} {'cpu ms':>9} {'cpu/tpu':>8}   "
          f"(best of the rounds; then min-max of each)")
    for dtype in (torch.bfloat16, torch.float32):
        c = make(B, ctx, Hq, Hkv, D, bs, dtype)
        t = {k: v.to("tpu") for k, v in c.items()}
        out = torch.ops.tpu.paged_attention(t["q"], t["kc"], t["vc"], t["qsl"], t["lens"],
                                            t["table"], scale)
        ref = cpu_decode(c, scale, ctx).squeeze(2)
        err = (out.cpu().float() - ref.float()).abs().max().item()
        res = {}
        calls = {
            ("attn", "tpu"): lambda: torch.ops.tpu.paged_attention(
                t["q"], t["kc"], t["vc"], t["qsl"], t["lens"], t["table"], scale),
            ("attn", "cpu"): lambda: cpu_decode(c, scale, ctx),
            ("write", "tpu"): lambda: torch.ops.tpu.paged_kv_write_(
                t["k"], t["v"], t["kc"], t["vc"], t["slots"]),
            ("write", "cpu"): lambda: (
                c["kc"].__setitem__((c["slots"] // bs, c["slots"] % bs), c["k"]),
                c["vc"].__setitem__((c["slots"] // bs, c["slots"] % bs), c["v"])),
        }
        for key, fn in calls.items():  # warm-up
            fn()
        tsync()
        for _ in range(a.rounds):
            for key, fn in calls.items():
                timed(fn, tsync if key[1] == "tpu" else (lambda: None), res, key)
        for op in ("attn", "write"):
            tps, cps = ([x * 1e3 for x in res[(op, d)]] for d in ("tpu", "cpu"))
            tp, cp = min(tps), min(cps)
            name = "paged_attention" if op == "attn" else "paged_kv_write_"
            print(f"{str(dtype).replace('torch.', ''):>9} {name:>16} {tp:9.3f} {cp:9.3f} "
                  f"{cp / tp:8.2f}   tpu {tp:.3f}-{max(tps):.3f}, cpu {cp:.3f}-{max(cps):.3f}")
        print(f"          max |tpu - cpu| of the attention output: {err:.2e}")
    print("load average (end)", os.getloadavg())


if __name__ == "__main__":
    main()
