"""Kernel benchmark: tpu vs PyTorch CPU, side by side in one run.

One command for the kernel families of the issue, each timed on tpu tensors
and on CPU tensors in alternating rounds (both sides see the same machine
load), reduced to the best round each; the ratio is tpu throughput / CPU
throughput (>1: tpu faster). Each workload runs at least --rounds rounds
per side (default 5), and more (up to 25) while either side has spent under
--min-time seconds (default 1), so short workloads get more chances to run
unperturbed on a shared machine. Between the two sides of a round the loop
sleeps SETTLE_S, as bench_defer.py and bench_roof.py do: at the default
OMP_WAIT_POLICY PyTorch CPU's OpenMP worker keeps spinning for a while
after a parallel region, into whatever is timed next; `--settle 0` turns
it off. The sleep is followed by one untimed round on the side about to be
timed, as in bench_defer.py and bench_roof.py: on this VM the first calls
after 10 ms or more of idle are cold for PyTorch CPU and tpu alike (CPU's
sum(0) of 128x3072 at the default OpenMP setting: 12 us warm, ~5 ms for
the first call after 20-50 ms idle and ~1 ms for the second), and a loop
that runs back to back never pays that.

1. attention: F.scaled_dot_product_attention (batch 1, 8 heads, head_dim 64,
   causal, float32) at seq 512 / 2048 / 8192, forward and forward+backward,
   query tokens/s; and the tpu's peak device memory per seq (forward and
   forward+backward, torch.tpu.max_memory_allocated after
   reset_peak_memory_stats, minus the inputs), which grows linearly with seq;
2. layer_norm, rms_norm and softmax (last dim), 4096 x 4096 float32, forward
   and forward+backward, GB/s of tensors read and written;
3. conv2d, ResNet-like shapes (N=8: C64 56x56 3x3, C128 28x28 3x3, 1x1
   256->64 56x56), forward and forward+backward, GFLOP/s;
4. a pre-norm transformer block (LayerNorm or RMSNorm, causal multi-head
   attention through F.scaled_dot_product_attention, GELU MLP; hidden 512,
   8 heads, seq 512, batch 4, float32), forward+backward tokens/s: the same
   nn.Module with the same weights on tpu and on CPU;
5. small ops (`--only small`, not in the default set): the per-call time,
   in microseconds, of the small kernels of a GPT training step at the
   shapes of examples/train_gpt.py (8 x 64 = 512 tokens, dim 128, vocab 256,
   4 heads) and of GPT-2 (128 / 1024 tokens x 768, vocab 50257, 12 heads):
   embedding and its backward, column sums (bias gradients), layer_norm and
   its backward, softmax, cross_entropy. Each round runs the op enough times
   for about 2 ms, then synchronises, so the tpu figure is dispatch (bridge)
   + queueing + kernel per call. `--dtype bfloat16` runs them in bfloat16.

Threads: the tpu's kernel pool is fixed when the runtime starts
(TORCH_TPU_NUM_THREADS, default: cores); PyTorch CPU is set to the same
count (torch.set_num_threads). `--threads T` sets both.

Prints a markdown table, writes bench/results/kernels.json.
Usage: python bench/bench_kernels.py [--quick] [--rounds N] [--min-time S] [--threads T] [--only attention,norm,conv,block,small] [--dtype float32|bfloat16]

The workload builders (attention_workloads, norm_workloads, conv_workloads,
block_workloads, small_workloads) are shared with tests/test_bench_kernels.py, which runs them
once at tiny sizes and checks tpu against CPU.
"""
import argparse
import copy
import json
import os
import sys
import time


def _pre_parse_threads(argv):
    """--threads must reach the tpu runtime before it starts (at import)."""
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return None


if __name__ == "__main__":
    _t = _pre_parse_threads(sys.argv[1:])
    if _t:
        os.environ["TORCH_TPU_NUM_THREADS"] = _t
    # OMP_WAIT_POLICY stays as the environment has it (unset: libgomp's
    # default, as a user runs PyTorch): the columns are separated by idle
    # time instead (SETTLE_S), and the header prints the setting.

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_tpu  # noqa: E402,F401

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_attention  # noqa: E402
import bench_conv  # noqa: E402

DEVICES = ("tpu", "cpu")


def sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


class Workload:
    """One benchmark row. make(device) returns a zero-argument callable that
    runs the workload once on that device and returns its result tensors
    (the same inputs on both devices). `amount` is the work of one call in
    `unit` numerator (tokens, bytes, flops); throughput = amount / seconds."""

    def __init__(self, section, name, mode, unit, amount, make, scale=1.0):
        self.section, self.name, self.mode = section, name, mode
        self.unit, self.amount, self.make, self.scale = unit, amount, make, scale


# ---- 1. attention --------------------------------------------------------------------


def sdpa_call(device, L, H, D, backward, causal=True):
    q, k, v = bench_attention.inputs(device, L, H, D, backward)

    def run():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        if not backward:
            return (out,)
        return (out,) + torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    return run


def attention_workloads(seqs, H=8, D=64):
    out = []
    for L in seqs:
        for backward in (False, True):
            out.append(Workload("attention", f"sdpa causal b1 {H}h d{D} seq {L}", "fwd+bwd" if backward else "fwd",
                                "tokens/s", L,
                                lambda d, L=L, b=backward: sdpa_call(d, L, H, D, b)))
    return out


def attention_peak_memory(L, H=8, D=64, causal=True):
    """tpu peak bytes above the inputs: (forward, forward+backward)."""
    q, k, v = bench_attention.inputs("tpu", L, H, D, False)
    sync("tpu")
    base = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    sync("tpu")
    fwd = torch.tpu.max_memory_allocated() - base
    del q, k, v, out
    fwd_bwd = bench_attention.peak_memory(L, H, D, causal)
    return fwd, fwd_bwd


# ---- 2. norms and softmax ------------------------------------------------------------


def _norm_inputs(device, rows, hidden, grad):
    g = torch.Generator().manual_seed(rows + hidden)
    x = torch.randn(rows, hidden, generator=g)
    w = torch.randn(hidden, generator=g)
    b = torch.randn(hidden, generator=g)
    dy = torch.randn(rows, hidden, generator=g)
    x, w, b, dy = (t.to(device) for t in (x, w, b, dy))
    if grad:
        for t in (x, w, b):
            t.requires_grad_()
    return x, w, b, dy


def norm_call(device, op, rows, hidden, backward):
    x, w, b, dy = _norm_inputs(device, rows, hidden, backward)
    if op == "layer_norm":
        f, leaves = (lambda: F.layer_norm(x, (hidden,), w, b)), (x, w, b)
    elif op == "rms_norm":
        f, leaves = (lambda: F.rms_norm(x, (hidden,), w, eps=1e-6)), (x, w)
    else:
        f, leaves = (lambda: torch.softmax(x, dim=-1)), (x,)

    def run():
        y = f()
        if not backward:
            return (y,)
        return (y,) + torch.autograd.grad(y, leaves, dy)
    return run


# bytes moved per element of the rows x hidden tensor (float32: 4 bytes each):
# forward reads x, writes y; backward reads x (or y for softmax) and dy, writes dx
# (layer_norm backward also re-reads x for the weight/bias grads)
NORM_TRAFFIC = {("layer_norm", False): 2, ("layer_norm", True): 6,
                ("rms_norm", False): 2, ("rms_norm", True): 5,
                ("softmax", False): 2, ("softmax", True): 5}


def norm_workloads(rows, hidden):
    out = []
    for op in ("layer_norm", "rms_norm", "softmax"):
        for backward in (False, True):
            nbytes = NORM_TRAFFIC[(op, backward)] * rows * hidden * 4
            out.append(Workload("norm", f"{op} {rows}x{hidden}", "fwd+bwd" if backward else "fwd",
                                "GB/s", nbytes,
                                lambda d, op=op, b=backward: norm_call(d, op, rows, hidden, b),
                                scale=1e-9))
    return out


# ---- 3. conv2d ----------------------------------------------------------------------

CONV_SHAPES = {k: bench_conv.SHAPES[k] for k in ("3x3 C64 56x56", "3x3 C128 28x28", "1x1 256->64 56x56")}


def conv_call(device, shape, backward):
    args = bench_conv.make(shape, device)
    fn = (bench_conv.forward_backward if backward else bench_conv.forward)(args)
    return lambda: tuple(fn()) if backward else (fn(),)


def conv_workloads(batch=None, spatial=None):
    """CONV_SHAPES; batch / spatial (H = W) override for quick or tiny runs."""
    out = []
    for name, shape in CONV_SHAPES.items():
        if batch is not None:
            shape = (batch,) + shape[1:]
        if spatial is not None:
            shape = shape[:2] + (spatial, spatial) + shape[4:]
        for backward in (False, True):
            mult = 3 if backward else 1  # backward: grad input + grad weight
            out.append(Workload("conv", f"conv2d {name} N={shape[0]}", "fwd+bwd" if backward else "fwd",
                                "GFLOP/s", mult * bench_conv.flops(shape),
                                lambda d, s=shape, b=backward: conv_call(d, s, b), scale=1e-9))
    return out


# ---- 4. transformer block -----------------------------------------------------------


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, hidden=512, heads=8, norm="layer"):
        super().__init__()
        Norm = nn.LayerNorm if norm == "layer" else nn.RMSNorm
        self.heads = heads
        self.norm1, self.norm2 = Norm(hidden), Norm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        B, L, C = x.shape
        qkv = self.qkv(self.norm1(x)).view(B, L, 3, self.heads, C // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, L, C))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


def block_models(hidden, heads, norm):
    """The same Block (same weights) for each device."""
    torch.manual_seed(0)
    cpu = Block(hidden, heads, norm)
    with torch.no_grad():  # non-trivial norm affine parameters
        for n in (cpu.norm1, cpu.norm2):
            n.weight.uniform_(0.5, 1.5)
            if getattr(n, "bias", None) is not None:
                n.bias.uniform_(-0.5, 0.5)
    return {"cpu": cpu, "tpu": copy.deepcopy(cpu).to("tpu")}


def block_call(device, model, batch, seq, hidden):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, seq, hidden, generator=g).to(device).requires_grad_()
    dy = torch.randn(batch, seq, hidden, generator=g).to(device)
    params = list(model.parameters())

    def run():
        y = model(x)
        return (y,) + torch.autograd.grad(y, [x] + params, dy)
    return run


def block_workloads(batch, seq, hidden=512, heads=8):
    out = []
    for norm in ("layer", "rms"):
        models = {}

        def make(d, norm=norm, models=models):
            if not models:
                models.update(block_models(hidden, heads, norm))
            return block_call(d, models[d], batch, seq, hidden)
        label = "LayerNorm" if norm == "layer" else "RMSNorm"
        out.append(Workload("block", f"block {label} h{hidden} {heads}h seq{seq} b{batch}",
                            "fwd+bwd", "tokens/s", batch * seq, make))
    return out


# ---- 5. small ops at the train_gpt and GPT-2 shapes ----------------------------------

# (label, tokens, dim, vocab, heads, attention length)
SMALL_SHAPES = (("train_gpt", 512, 128, 256, 4, 64),
                ("gpt2 T128", 128, 768, 50257, 12, 128),
                ("gpt2 T1024", 1024, 768, 50257, 12, 1024))


def _small_op(device, op, tokens, dim, vocab, heads, seq, dtype):
    """Inputs on `device` and a zero-argument call of one aten op."""
    g = torch.Generator().manual_seed(tokens + dim)
    rnd = lambda *s: torch.randn(*s, generator=g).to(dtype).to(device)
    if op == "embedding":
        w, idx = rnd(vocab, dim), torch.randint(0, vocab, (tokens,), generator=g).to(device)
        return lambda: F.embedding(idx, w)
    if op == "embedding_backward":
        gy, idx = rnd(tokens, dim), torch.randint(0, vocab, (tokens,), generator=g).to(device)
        return lambda: torch.ops.aten.embedding_dense_backward(gy, idx, vocab, -1, False)
    if op.startswith("sum0"):
        x = rnd(tokens, dim * int(op[6:]))
        return lambda: x.sum(0)
    if op == "layer_norm":
        x, w, b = rnd(tokens, dim), rnd(dim), rnd(dim)
        return lambda: F.layer_norm(x, (dim,), w, b)
    if op == "layer_norm_backward":
        x, w, b, dy = rnd(tokens, dim), rnd(dim), rnd(dim), rnd(tokens, dim)
        _, mean, rstd = torch.ops.aten.native_layer_norm(x, (dim,), w, b, 1e-5)
        return lambda: torch.ops.aten.native_layer_norm_backward(dy, x, (dim,), mean, rstd, w, b,
                                                                 [True, True, True])
    if op == "softmax":
        x = rnd(tokens // seq, heads, seq, seq)
        return lambda: torch.softmax(x, dim=-1)
    if op == "cross_entropy":
        logits = rnd(tokens, vocab)
        tgt = torch.randint(0, vocab, (tokens,), generator=g).to(device)
        return lambda: F.cross_entropy(logits, tgt)
    raise ValueError(op)


SMALL_OPS = ("embedding", "embedding_backward", "sum0 x1", "sum0 x3", "sum0 x4", "layer_norm",
             "layer_norm_backward", "softmax", "cross_entropy")


def small_workloads(dtype=torch.float32, shapes=SMALL_SHAPES):
    out = []
    for label, tokens, dim, vocab, heads, seq in shapes:
        for op in SMALL_OPS:
            if op == "cross_entropy" and tokens * vocab > (1 << 24):
                continue  # GPT-2 at 1024 tokens: 200 MB of logits, not a small op
            if op == "softmax" and seq * seq * heads > (1 << 22):
                continue

            def make(d, op=op, a=(tokens, dim, vocab, heads, seq)):
                call = _small_op(d, op, *a, dtype)
                call()  # calls per round: about 2 ms of this device's time
                sync(d)
                t0 = time.perf_counter()
                call()
                sync(d)
                reps = max(1, min(400, int(2e-3 / max(time.perf_counter() - t0, 1e-7))))
                reps = 1 << (reps.bit_length() - 1)

                def run():
                    for _ in range(reps - 1):
                        call()
                    out = call()  # the last call's results, for tests/test_bench_kernels.py
                    return out if isinstance(out, tuple) else (out,)
                run.reps = reps
                return run
            name = op if not op.startswith("sum0") else f"sum(dim 0) of {tokens}x{dim * int(op[6:])}"
            out.append(Workload("small", f"{label} {name} {str(dtype)[6:]}", "fwd", "us/call", 1, make))
    return out


# ---- timing -------------------------------------------------------------------------


SETTLE_S = [0.05]  # idle time between the two sides of a round (--settle)


def measure(w, rounds, min_time=0.0, max_rounds=25):
    """Best seconds per call on each device, tpu and CPU rounds alternating:
    at least `rounds` rounds, more (up to max_rounds) while either side has
    spent less than min_time seconds, so short workloads get more chances
    to run unperturbed on a shared machine. Returns (best, rounds run)."""
    fns = {d: w.make(d) for d in DEVICES}
    for d, fn in fns.items():  # warm up
        fn()
        sync(d)
    best, spent, n = {}, dict.fromkeys(DEVICES, 0.0), 0
    reps = {d: getattr(fn, "reps", 1) for d, fn in fns.items()}
    while n < rounds or (n < max_rounds and min(spent.values()) < min_time):
        n += 1
        for d, fn in fns.items():
            if SETTLE_S[0] > 0:
                time.sleep(SETTLE_S[0])
                fn()  # untimed: the first calls after an idle spell are cold (see the docstring)
                sync(d)
            t0 = time.perf_counter()
            fn()
            sync(d)
            t = time.perf_counter() - t0
            spent[d] += t
            best[d] = min(best.get(d, t / reps[d]), t / reps[d])  # per call
    return best, n


def fmt(v):
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true",
                    help="attention seq 512/2048, 1024-row norms, conv N=2, block batch 2, 2 rounds")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds per side (default 5, quick 2)")
    ap.add_argument("--min-time", type=float, default=None,
                    help="keep alternating (up to 25 rounds) until each side has run this many "
                         "seconds (default 1.0, quick 0.3)")
    ap.add_argument("--threads", type=int, default=0,
                    help="threads of both sides (tpu pool and torch); default: the tpu pool's")
    ap.add_argument("--only", default="attention,norm,conv,block")
    ap.add_argument("--seqs", default=None, help="attention sequence lengths (default 512,2048,8192)")
    ap.add_argument("--dtype", default="float32", help="dtype of the small ops (float32, bfloat16)")
    ap.add_argument("--match", default="", help="run only the workloads whose name contains this")
    ap.add_argument("--settle", type=float, default=SETTLE_S[0],
                    help="seconds idle before each side of a round (default %(default)s; 0: none)")
    a = ap.parse_args()
    rounds = a.rounds or (2 if a.quick else 5)
    SETTLE_S[0] = a.settle
    if a.min_time is None:
        a.min_time = 0.3 if a.quick else 1.0
    pool = torch_tpu._C.compute_threads()
    torch.set_num_threads(a.threads or pool)
    threads = {"torch_cpu": torch.get_num_threads(), "tpu_pool": pool,
               "TORCH_TPU_NUM_THREADS": os.environ.get("TORCH_TPU_NUM_THREADS"),
               "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY")}
    if threads["torch_cpu"] != pool:
        print(f"warning: torch threads {threads['torch_cpu']} != tpu pool {pool}")
    print(f"threads: PyTorch CPU torch.get_num_threads() = {threads['torch_cpu']}, "
          f"tpu pool = {pool} (TORCH_TPU_NUM_THREADS={threads['TORCH_TPU_NUM_THREADS'] or 'unset: cores'}); "
          f"rounds: best of >= {rounds} alternating (more, up to 25, until each side ran {a.min_time} s), "
          f"{a.settle} s idle before each side; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset (libgomp default)')}",
          flush=True)

    only = set(a.only.split(","))
    seqs = [int(s) for s in (a.seqs or ("512,2048" if a.quick else "512,2048,8192")).split(",")]
    work = []
    if "attention" in only:
        work += attention_workloads(seqs)
    if "norm" in only:
        work += norm_workloads(1024 if a.quick else 4096, 4096)
    if "conv" in only:
        work += conv_workloads(2 if a.quick else None)
    if "block" in only:
        work += block_workloads(2 if a.quick else 4, 512)
    if "small" in only:
        work += small_workloads(getattr(torch, a.dtype))
    work = [w for w in work if a.match in w.name]

    rows = []
    fallbacks0 = dict(torch_tpu.fallback_counts())
    t_start = time.perf_counter()
    for w in work:
        best, n = measure(w, rounds, a.min_time)
        if w.unit == "us/call":  # lower is better: the ratio stays CPU time / tpu time
            tp = {d: best[d] * 1e6 for d in DEVICES}
            tp["ratio"] = best["cpu"] / best["tpu"]
        else:
            tp = {d: w.amount / best[d] * w.scale for d in DEVICES}
            tp["ratio"] = tp["tpu"] / tp["cpu"]
        row = {"section": w.section, "workload": w.name, "pass": w.mode, "unit": w.unit,
               "tpu": tp["tpu"], "cpu": tp["cpu"], "ratio": tp["ratio"],
               "tpu_ms": best["tpu"] * 1e3, "cpu_ms": best["cpu"] * 1e3, "rounds": n}
        rows.append(row)
        print(f"  {w.name} {w.mode}: tpu {fmt(tp['tpu'])} {w.unit} ({row['tpu_ms']:.1f} ms), "
              f"cpu {fmt(tp['cpu'])} ({row['cpu_ms']:.1f} ms), ratio {row['ratio']:.2f}, best of {n}", flush=True)

    memory = []
    if "attention" in only:
        for L in seqs:
            fwd, fb = attention_peak_memory(L)
            memory.append({"seq": L, "tpu_peak_bytes_fwd": fwd, "tpu_peak_bytes_fwd_bwd": fb,
                           "score_matrix_bytes": 8 * L * L * 4})
    elapsed = time.perf_counter() - t_start
    fallbacks = {k: v - fallbacks0.get(k, 0) for k, v in torch_tpu.fallback_counts().items()
                 if v != fallbacks0.get(k, 0)}

    print()
    print(f"threads: PyTorch CPU {threads['torch_cpu']}, tpu pool {pool}; best of >= {rounds} "
          f"alternating rounds (up to 25 until each side ran {a.min_time} s); ratio = tpu throughput / CPU throughput "
          f"(us/call rows: CPU time / tpu time); load average {os.getloadavg()}")
    print()
    print("| workload | pass | tpu | PyTorch CPU | unit | tpu/CPU |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['pass']} | {fmt(r['tpu'])} | {fmt(r['cpu'])} | "
              f"{r['unit']} | {r['ratio']:.2f} |")
    if memory:
        print()
        print("| attention seq (causal, 8 heads, d64) | tpu peak fwd MiB | tpu peak fwd+bwd MiB | "
              "fwd+bwd KiB per token | L x L float32 scores of all 8 heads (quadratic), MiB |")
        print("|---|---|---|---|---|")
        for m in memory:
            print(f"| {m['seq']} | {m['tpu_peak_bytes_fwd'] / 2**20:.1f} | "
                  f"{m['tpu_peak_bytes_fwd_bwd'] / 2**20:.1f} | "
                  f"{m['tpu_peak_bytes_fwd_bwd'] / m['seq'] / 2**10:.1f} | "
                  f"{m['score_matrix_bytes'] / 2**20:.0f} |")
    print(f"\ntpu ops run through the CPU fallback: {fallbacks or 'none'} ({elapsed:.0f} s)")
    os.makedirs(os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"), exist_ok=True)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "kernels.json")
    with open(path, "w") as f:
        json.dump({"threads": threads, "min_rounds": rounds, "min_time_s": a.min_time,
                   "quick": a.quick, "seconds": elapsed, "cpu_fallbacks": fallbacks,
                   "rows": rows, "attention_memory": memory}, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
