"""DEFER_AND_FUSE benchmark (issue 4), side by side in one run.

Columns: strict eager tpu (the default mode), DEFER_AND_FUSE tpu (the same
code under ``torch_tpu.set_global_eager_mode(EagerMode.DEFER_AND_FUSE)``; "n/a"
while the mode does not exist), PyTorch CPU eager, and
``torch.compile(backend="inductor")`` on CPU. Each workload runs its columns
in alternating rounds (all see the same machine load), best of >= --rounds
rounds (more, up to 25, until every column ran --min-time seconds); the tpu
columns synchronise (``torch.tpu.synchronize()``) inside the timed region.

Between a CPU column and a tpu column (either way) the loop sleeps SETTLE_S:
PyTorch CPU's OpenMP threads keep spinning for a while after a parallel
region, and a tpu column timed in that window measured up to 4x slower. After
the sleep, the next column makes one untimed call: the first call out of idle
pays for waking the device's threads and refilling the caches the other
device's column evicted, and timing it charged that to whichever column
comes first in the order (a GELU chain's compiled column, first after the
CPU ones, measured 1.38 ms against DEFER's 1.00 ms behind it; 1.06 against
1.04 when it came second).

Workloads (sizes: the SIZES table below; "default" = the issue's sizes, "quick"
for CI-like runs on the 2-core machine, "smoke" = tiny, 1 round, for
tests/test_bench_defer.py; --gpt2-batches, --gpt2-seq, ... override them):
1. GPT-2-small-shaped forward (transformers GPT2LMHeadModel from a GPT2Config
   with random weights: 768 wide, 12 heads, vocab 50257; 12 layers, quick 4),
   no_grad, tokens/s;
2. one training step (forward, backward, AdamW step) of a Llama-shaped model
   (LlamaConfig: 6 layers, hidden 384, MLP 1024, 6 heads / 2 KV heads, vocab
   8192: 17M params), tokens/s;
3. HF generate() of 100 new tokens, greedy, with a KV cache (GPT-2 tiny: 2
   layers, 128 wide, 4 heads, vocab 50257; prompt 16, batch 1), new tokens/s;
   Inductor compiles the model's forward with dynamic=True;
4. elementwise-heavy chains as small nn.Modules, forward, no_grad, Melem/s:
   GELU(x*w+b), LayerNorm(x+r) (residual + LayerNorm), RMSNorm(x)*SiLU(gate);
5. workloads 1 and 2 under torch.autocast(dtype=torch.bfloat16) on each
   column's device: the GEMMs on the matrix unit, so the rest shows.

Reports throughput per column, DEFER/strict and DEFER/Inductor and their
geometric means over workloads, peak device memory per tpu column
(torch.tpu.max_memory_allocated() after reset_peak_memory_stats(), one call),
Inductor compile time (first call minus best call), CPU fallbacks per tpu
column, every tpu/Inductor column's first result against CPU eager's, and,
when ``torch_tpu.defer_metrics()`` exists, its change over the warm-up calls
and over the timed rounds (fused-program compiles, cache hits/misses,
flushes by reason). Prints markdown tables, writes bench/results/defer.json.

Each workload group (--only's numbers) runs in a process of its own
(isolated_rows): a row measured after other rows in one process depends on
them (the allocators', caches' and threads' states their models leave: the
chains ran 1.1-1.7x slower in every column after the model rows,
bench/RESULTS.md 2026-12-07). --same-process runs them all in this one.
Usage: python bench/bench_defer.py [--quick | --smoke] [--rounds N] [--min-time S]
       [--only 1,2,3,4,5] [--columns strict,defer,cpu,inductor] [--threads T] [--out PATH]
       [--same-process]
"""
import argparse
import contextlib
import copy
import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import time

if __name__ == "__main__":
    for _i, _a in enumerate(sys.argv):  # the tpu pool is sized when the runtime starts
        if _a == "--threads" and _i + 1 < len(sys.argv):
            os.environ["TORCH_TPU_NUM_THREADS"] = sys.argv[_i + 1]
    # OMP_WAIT_POLICY stays as the environment has it (unset: libgomp's
    # default, as a user runs PyTorch): the columns are separated by idle
    # time instead (SETTLE_S), and the header prints the setting.

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_tpu  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_kernels import fmt, sync  # noqa: E402

COLUMNS = ("strict", "defer", "cpu", "inductor")
SETTLE_S = 0.1  # idle time between CPU and tpu columns (see the docstring)
TITLES = {"strict": "strict eager tpu", "defer": "DEFER_AND_FUSE tpu",
          "cpu": "PyTorch CPU eager", "inductor": "Inductor CPU"}
DEFER = getattr(torch_tpu.EagerMode, "DEFER_AND_FUSE", None)
SIZES = {  # smoke also shrinks the models: GPT-2 64 wide / vocab 256, Llama 2 layers / hidden 32
    "default": dict(gpt2_batches="1,8", gpt2_seq=512, gpt2_layers=12, llama_batch=4, llama_seq=256,
                    new_tokens=100, chain_rows=8192, chain_hidden=1024),
    "quick": dict(gpt2_batches="1,8", gpt2_seq=128, gpt2_layers=4, llama_batch=2, llama_seq=128,
                  new_tokens=100, chain_rows=2048, chain_hidden=1024),
    "smoke": dict(gpt2_batches="1,2", gpt2_seq=16, gpt2_layers=2, llama_batch=2, llama_seq=8,
                  new_tokens=8, chain_rows=8, chain_hidden=32)}


# Columns running a torch.compile'd model: column -> (device, backend).
# bench_compile.py adds its compiled-tpu column here.
COMPILED_COLUMNS = {"inductor": ("cpu", "inductor")}
# Whether the compiled columns' training step also compiles the optimizer
# step (torch.compile(opt.step, backend=...)): bench_compile.py turns it on
# (its --optimizer eager turns it off); here every column's AdamW runs eagerly.
COMPILE_OPTIMIZER_STEP = [False]


def device_of(col):
    if col in COMPILED_COLUMNS:
        return COMPILED_COLUMNS[col][0]
    return "tpu" if col in ("strict", "defer") else "cpu"


@contextlib.contextmanager
def _global_mode(m):
    """The mode for every thread (autograd runs backward on its own thread,
    which follows the global mode, not a thread-local context)."""
    torch_tpu.set_global_eager_mode(m)
    try:
        yield
    finally:
        torch_tpu.set_global_eager_mode(torch_tpu.EagerMode.DEFER_NEVER)


def mode(col):
    return _global_mode(DEFER) if col == "defer" else contextlib.nullcontext()


def defer_metrics():
    fn = getattr(torch_tpu, "defer_metrics", None)
    if DEFER is None or fn is None:
        return None
    m = fn()
    for conv in (dict, lambda o: o._asdict(), vars):
        try:
            return json.loads(json.dumps(conv(m), default=str))
        except Exception:
            pass
    return {"value": str(m)}


def delta(a, b):
    """b - a for the numbers of two metrics snapshots (nested dicts / lists); other values from b."""
    if isinstance(b, dict):
        a = a if isinstance(a, dict) else {}
        return {k: delta(a.get(k), v) for k, v in b.items()}
    if isinstance(b, list) and isinstance(a, list) and len(a) == len(b):
        return [delta(x, y) for x, y in zip(a, b)]
    if isinstance(b, (int, float)) and not isinstance(b, bool) and isinstance(a, (int, float)):
        return b - a
    return b


class Workload:
    """One row. make(col) returns a zero-argument callable running the workload
    once for that column and returning its result tensors; `amount` of `unit`
    per call (scaled by `scale`); `check` = (rtol, atol) for comparing the first
    results with PyTorch CPU eager's (atol None: exact)."""

    def __init__(self, num, name, unit, amount, make, scale=1.0, check=(1e-4, 1e-5)):
        self.num, self.name, self.unit, self.amount = num, name, unit, amount
        self.make, self.scale, self.check = make, scale, check


def compiled(module, dynamic=False, col="inductor"):
    return torch.compile(module, backend=COMPILED_COLUMNS[col][1], dynamic=dynamic)


def per_column_models(build):
    """build() -> CPU module (seeded); the same weights for every column: one tpu
    copy shared by strict and DEFER (inference), the CPU module compiled for Inductor
    (and the device's module for any other compiled column)."""
    cache = {}

    def get(col):
        if not cache:
            torch.manual_seed(0)
            cpu = build().eval()
            cache.update(cpu=cpu, tpu=copy.deepcopy(cpu).to("tpu"))
        if col in COMPILED_COLUMNS:
            if col not in cache:
                cache[col] = compiled(cache[device_of(col)], col=col)
            return cache[col]
        return cache[device_of(col)]
    return get


def inference(get, inputs, forward):
    """make(col) of an inference workload: forward(module, *inputs) under no_grad."""
    def make(col):
        m, args = get(col), [t.to(device_of(col)) for t in inputs]

        def run():
            with torch.no_grad():
                return (forward(m, *args),)
        return run
    return make


# ---- 1. GPT-2-small-shaped forward -------------------------------------------------


def bf16_autocast(x):
    """torch.autocast on the device of tensor x, in bfloat16."""
    return torch.autocast(device_type=x.device.type, dtype=torch.bfloat16)


def gpt2_workloads(batches, seq, layers=12, width=768, heads=12, vocab=50257, autocast=False):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab, n_positions=max(1024, seq),
                     bos_token_id=vocab - 1, eos_token_id=vocab - 1)
    get = per_column_models(lambda: GPT2LMHeadModel(cfg))
    out = []

    def forward(m, x):
        if not autocast:
            return m(input_ids=x, use_cache=False).logits
        with bf16_autocast(x):
            return m(input_ids=x, use_cache=False).logits.float()
    for b in batches:
        ids = torch.randint(0, vocab, (b, seq), generator=torch.Generator().manual_seed(b))
        make = inference(get, (ids,), forward)
        out.append(Workload(5 if autocast else 1,
                            f"GPT-2 fwd {layers}L h{width} b{b} seq{seq}" + (" bf16 autocast" if autocast else ""),
                            "tokens/s", b * seq, make, check=(5e-2, 5e-2) if autocast else (1e-3, 1e-3)))
    return out


# ---- 2. Llama-shaped training step -------------------------------------------------


def llama_config(layers=6, hidden=384, inter=1024, heads=6, kv_heads=2, vocab=8192):
    from transformers import LlamaConfig
    return LlamaConfig(num_hidden_layers=layers, hidden_size=hidden, intermediate_size=inter,
                       num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab,
                       max_position_embeddings=1024, tie_word_embeddings=False)


def llama_train_workload(batch, seq, cfg, autocast=False):
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    base = LlamaForCausalLM(cfg)
    nparams = sum(p.numel() for p in base.parameters())
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(2))

    def make(col):  # each column trains its own copy from the same initial weights
        m = copy.deepcopy(base).to(device_of(col)).train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        f, x = (compiled(m, col=col) if col in COMPILED_COLUMNS else m), ids.to(device_of(col))
        step = (compiled(opt.step, col=col) if col in COMPILED_COLUMNS and COMPILE_OPTIMIZER_STEP[0]
                else opt.step)

        def run():
            if autocast:
                with bf16_autocast(x):
                    loss = f(input_ids=x, labels=x).loss
            else:
                loss = f(input_ids=x, labels=x).loss
            loss.backward()
            step()
            opt.zero_grad(set_to_none=True)
            return (loss.detach(),)
        return run
    return Workload(5 if autocast else 2,
                    f"Llama train step (AdamW) {nparams / 1e6:.3g}M params b{batch} seq{seq}"
                    + (" bf16 autocast" if autocast else ""),
                    "tokens/s", batch * seq, make, check=(2e-2, 2e-2) if autocast else (1e-4, 1e-4))


# ---- 3. HF generate() with a KV cache ----------------------------------------------


def generate_workload(new_tokens, prompt=16, batch=1, layers=2, width=128, heads=4, vocab=50257):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab,
                     bos_token_id=vocab - 1, eos_token_id=vocab - 1)
    torch.manual_seed(0)
    base = GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, vocab, (batch, prompt), generator=torch.Generator().manual_seed(3))
    models = {}

    def make(col):
        key = col if col in COMPILED_COLUMNS else device_of(col)  # strict and DEFER share one
        if key not in models:
            m = base if key == "cpu" else copy.deepcopy(base).to(device_of(col))
            if key in COMPILED_COLUMNS:  # dynamic shapes: the KV cache grows every token
                m.forward = compiled(m.forward, dynamic=True, col=col)
            models[key] = m
        m, x = models[key], ids.to(device_of(col))

        def run():
            with torch.no_grad():
                return (m.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new_tokens,
                                   min_new_tokens=new_tokens, do_sample=False, use_cache=True,
                                   pad_token_id=0),)
        return run
    return Workload(3, f"generate {new_tokens} tokens GPT-2 {layers}L h{width} greedy KV cache b{batch}",
                    "tokens/s", batch * new_tokens, make, check=(0, None))


# ---- 4. elementwise-heavy chains ---------------------------------------------------


class Chain(nn.Module):
    """One of the elementwise-heavy chains (KINDS), with affine parameters w, b."""
    KINDS = ("GELU(x*w+b)", "LayerNorm(x+r)", "RMSNorm(x)*SiLU(gate)")

    def __init__(self, kind, h):
        super().__init__()
        self.kind = kind
        self.w, self.b = nn.Parameter(torch.rand(h) + 0.5), nn.Parameter(torch.rand(h) - 0.5)

    def forward(self, x, y):
        if self.kind == 0:
            return F.gelu(x * self.w + self.b)
        if self.kind == 1:  # residual + LayerNorm
            return F.layer_norm(x + y, self.w.shape, self.w, self.b)
        return F.rms_norm(x, self.w.shape, self.w, eps=1e-6) * F.silu(y)  # RMSNorm + SiLU gating


def chain_workloads(rows, hidden):
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(rows, hidden, generator=g), torch.randn(rows, hidden, generator=g)
    out = []
    for kind, name in enumerate(Chain.KINDS):
        get = per_column_models(lambda kind=kind: Chain(kind, hidden))

        make = inference(get, (x, y), lambda m, a, b: m(a, b))
        out.append(Workload(4, f"{name} {rows}x{hidden}", "Melem/s", rows * hidden, make, scale=1e-6))
    return out


# ---- measurement -------------------------------------------------------------------


def call(col, fn, fallbacks):
    """One timed call (the tpu columns synchronise inside the timed region);
    adds the CPU fallbacks it ran to `fallbacks`."""
    before = torch_tpu.fallback_counts()
    t0 = time.perf_counter()
    with mode(col):
        out = fn()
        sync(device_of(col))
    t = time.perf_counter() - t0
    for k, v in torch_tpu.fallback_counts().items():
        if v != before.get(k, 0) and device_of(col) == "tpu":
            fallbacks[k] = fallbacks.get(k, 0) + v - before.get(k, 0)
    return t, out


def compare(got, want, rtol, atol):
    res = {"allclose": len(got) == len(want), "max_abs_diff": 0.0}
    for g, e in zip(got, want):
        g, e = g.detach().cpu(), e.detach()
        if g.shape != e.shape or g.dtype != e.dtype:
            return {"allclose": False, "max_abs_diff": None}
        ok = torch.equal(g, e) if atol is None else torch.allclose(g, e, rtol=rtol, atol=atol)
        res["allclose"] &= bool(ok)
        res["max_abs_diff"] = max(res["max_abs_diff"], (g.double() - e.double()).abs().max().item())
    return res


def peak_memory(col, fn):
    """(peak, peak above what was allocated before) over one call, bytes."""
    gc.collect()
    sync("tpu")
    base = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    with mode(col):
        fn()
        sync("tpu")
    peak = torch.tpu.max_memory_allocated()
    return peak, peak - base


def measure(w, cols, rounds, min_time, max_rounds=25):
    """Warm-up (2 calls per column; the first results are checked against CPU
    eager's), then alternating timed rounds (an untimed call after each switch
    of device), then one call per tpu column for its peak memory."""
    fns = {c: w.make(c) for c in cols}
    r = {c: {"fallbacks": {}} for c in cols}
    first, m0 = {}, defer_metrics()
    for c in cols:
        r[c]["first_call_s"], first[c] = call(c, fns[c], r[c]["fallbacks"])
        call(c, fns[c], r[c]["fallbacks"])
    check = {c: compare(first[c], first["cpu"], *w.check) for c in cols if c != "cpu"}
    del first
    m1, best, spent, n = defer_metrics(), {}, dict.fromkeys(cols, 0.0), 0
    while n < rounds or (n < max_rounds and min(spent.values()) < min_time):
        n += 1
        for i, c in enumerate(cols):
            if device_of(c) != device_of(cols[i - 1]):
                time.sleep(SETTLE_S)
                call(c, fns[c], r[c]["fallbacks"])  # untimed wake-up (see the docstring)
            t, _ = call(c, fns[c], r[c]["fallbacks"])
            spent[c] += t
            best[c] = min(best.get(c, t), t)
    m2 = defer_metrics()
    for c in cols:
        r[c].update(best_s=best[c], throughput=w.amount / best[c] * w.scale)
        if device_of(c) == "tpu":
            r[c]["peak_bytes"], r[c]["peak_above_start_bytes"] = peak_memory(c, fns[c])
    metrics = None if m0 is None else {"warmup": delta(m0, m1), "timed": delta(m1, m2)}
    return r, n, check, metrics


def isolated_rows(script, groups):
    """The rows of `script` run once per workload group, each group in a
    process of its own (this process's arguments but --only and --out, plus
    --same-process), in group order. Each child prints its own progress and
    table; a child that fails fails the run."""
    args, skip = [], False
    for x in sys.argv[1:]:
        if skip:
            skip = False
        elif x in ("--only", "--out"):
            skip = True
        elif not x.startswith(("--only=", "--out=")):
            args.append(x)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_groups_") as d:
        for g in groups:
            path = os.path.join(d, f"group_{g}.json")
            print(f"\n== workload group {g}, in a process of its own", flush=True)
            subprocess.run([sys.executable, script, *args, "--same-process", "--only", g, "--out", path],
                           check=True)
            with open(path) as f:
                rows += json.load(f)["rows"]
    return rows


def ratio(row, a, b):
    ca, cb = row["columns"].get(a), row["columns"].get(b)
    return ca["throughput"] / cb["throughput"] if ca and cb else None


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def cell(v, f=fmt):
    return "n/a" if v is None else f(v)


def flat(d, pre=""):
    if not isinstance(d, dict):
        return {pre: d} if d not in (0, None, {}, "") else {}
    out = {}
    for k, v in d.items():
        out.update(flat(v, f"{pre}.{k}" if pre else str(k)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="CI-like sizes (see the docstring), 2 rounds")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, 1 round (tests)")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds per column (default 3, quick 2)")
    ap.add_argument("--min-time", type=float, default=None, help="seconds per column (default 1, quick 0.3)")
    ap.add_argument("--threads", type=int, default=0, help="threads of the tpu pool and of torch")
    ap.add_argument("--only", default="1,2,3,4,5", help="workload numbers")
    ap.add_argument("--columns", default=",".join(COLUMNS))
    for k, v in SIZES["default"].items():
        ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=None)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "results", "defer.json"))
    ap.add_argument("--same-process", action="store_true",
                    help="every workload group in this process (a row then depends on the rows before it)")
    a = ap.parse_args()
    size = "smoke" if a.smoke else "quick" if a.quick else "default"
    sz = {k: getattr(a, k) or v for k, v in SIZES[size].items()}
    rounds = a.rounds or {"smoke": 1, "quick": 2, "default": 3}[size]
    min_time = a.min_time if a.min_time is not None else {"smoke": 0.0, "quick": 0.3, "default": 1.0}[size]
    pool = torch_tpu._C.compute_threads()
    torch.set_num_threads(a.threads or pool)
    torch._dynamo.config.cache_size_limit = 64
    cols = [c for c in a.columns.split(",") if c in COLUMNS and (c != "defer" or DEFER is not None)]
    assert "cpu" in cols, "the CPU eager column is the reference of the output checks"
    groups = [g for g in a.only.split(",") if g]
    isolate = len(groups) > 1 and not a.same_process
    only, tiny, work = set() if isolate else set(groups), size == "smoke", []
    if "1" in only:
        work += gpt2_workloads([int(b) for b in sz["gpt2_batches"].split(",")], sz["gpt2_seq"],
                               sz["gpt2_layers"], *((64, 4, 256) if tiny else ()))
    if "2" in only:
        work.append(llama_train_workload(sz["llama_batch"], sz["llama_seq"],
                                         llama_config(2, 32, 64, 4, 2, 128) if tiny else llama_config()))
    if "3" in only:
        work.append(generate_workload(sz["new_tokens"], vocab=256 if tiny else 50257))
    if "4" in only:
        work += chain_workloads(sz["chain_rows"], sz["chain_hidden"])
    if "5" in only:
        work += gpt2_workloads([int(b) for b in sz["gpt2_batches"].split(",")], sz["gpt2_seq"],
                               sz["gpt2_layers"], *((64, 4, 256) if tiny else ()), autocast=True)
        work.append(llama_train_workload(sz["llama_batch"], sz["llama_seq"],
                                         llama_config(2, 32, 64, 4, 2, 128) if tiny else llama_config(),
                                         autocast=True))
    threads = {"torch_cpu": torch.get_num_threads(), "tpu_pool": pool,
               "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY")}
    print(f"threads: torch {threads['torch_cpu']}, tpu pool {pool}, OMP_WAIT_POLICY "
          f"{threads['OMP_WAIT_POLICY'] or 'unset (libgomp default)'}; DEFER_AND_FUSE: "
          f"{'available' if DEFER is not None else 'n/a (not in torch_tpu.EagerMode)'}; sizes: {size}; "
          f"best of >= {rounds} alternating rounds (up to 25 until each column ran {min_time} s); "
          f"{'each workload group in a process of its own' if isolate else 'one process'}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)

    rows, t_start = [], time.perf_counter()
    if isolate:
        rows = isolated_rows(os.path.abspath(__file__), groups)
    for w in work:
        r, n, check, metrics = measure(w, cols, rounds, min_time)
        w.make = None  # frees this workload's models (weights of earlier rows stay out of the peaks)
        gc.collect()
        row = {"workload_num": w.num, "workload": w.name, "unit": w.unit, "amount": w.amount,
               "rounds": n, "columns": {c: r.get(c) for c in COLUMNS}, "check_vs_cpu": check,
               "defer_metrics": metrics}
        row["defer_over_strict"] = ratio(row, "defer", "strict")
        row["defer_over_inductor"] = ratio(row, "defer", "inductor")
        row["strict_over_cpu"] = ratio(row, "strict", "cpu")
        row["defer_over_strict_peak_bytes"] = (r["defer"]["peak_bytes"] / r["strict"]["peak_bytes"]
                                               if "defer" in r and "strict" in r else None)
        ind = r.get("inductor")
        row["inductor_compile_s"] = ind["first_call_s"] - ind["best_s"] if ind else None
        rows.append(row)
        print(f"  {w.name}: " + ", ".join(f"{c} {fmt(r[c]['throughput'])}" for c in cols)
              + f" {w.unit}; best of {n}" + "".join(f"; {c} vs cpu: {'ok' if v['allclose'] else 'MISMATCH'}"
                                                   for c, v in check.items()), flush=True)
    summary = {k: geomean([r[k] for r in rows]) for k in
               ("defer_over_strict", "defer_over_inductor", "strict_over_cpu")}
    summary["inductor_over_cpu"] = geomean([ratio(r, "inductor", "cpu") for r in rows])
    elapsed = time.perf_counter() - t_start

    print("\nthroughput (higher is better); peak = tpu max_memory_allocated over one call "
          "(after reset_peak_memory_stats; includes weights)\n")
    print("| # | workload | unit | " + " | ".join(TITLES[c] for c in COLUMNS) +
          " | DEFER/strict | DEFER/Inductor | peak MiB strict | peak MiB DEFER | Inductor compile s |")
    print("|---" * 12 + "|")
    mib = lambda v: f"{v / 2**20:.1f}"  # noqa: E731
    for r in rows:
        c = r["columns"]
        print(f"| {r['workload_num']} | {r['workload']} | {r['unit']} | "
              + " | ".join(cell(c[k] and c[k]["throughput"]) for k in COLUMNS)
              + f" | {cell(r['defer_over_strict'], '{:.2f}'.format)} | "
                f"{cell(r['defer_over_inductor'], '{:.2f}'.format)} | "
                f"{cell(c['strict'] and c['strict'].get('peak_bytes'), mib)} | "
                f"{cell(c['defer'] and c['defer'].get('peak_bytes'), mib)} | "
                f"{cell(r['inductor_compile_s'], '{:.1f}'.format)} |")
    print(f"| | geometric mean | | | | | | {cell(summary['defer_over_strict'], '{:.2f}'.format)} | "
          f"{cell(summary['defer_over_inductor'], '{:.2f}'.format)} | | | |")
    print("\ngeometric means over the workloads: " + ", ".join(
        f"{k.replace('_over_', '/')} {cell(v, '{:.2f}'.format)}" for k, v in summary.items()))
    if any(r["defer_metrics"] for r in rows):
        print("\n| workload | defer_metrics() change over warm-up (2 calls) | over the timed rounds |")
        print("|---|---|---|")
        for r in rows:
            m = r["defer_metrics"] or {}
            print(f"| {r['workload']} | " + " | ".join(
                ", ".join(f"{k}={v}" for k, v in flat(m.get(p)).items()) or "-" for p in ("warmup", "timed"))
                + " |")
    fbs = {f"{r['workload']} [{c}]": r["columns"][c]["fallbacks"] for r in rows for c in ("strict", "defer")
           if r["columns"][c] and r["columns"][c]["fallbacks"]}
    print(f"\ntpu CPU fallbacks: {fbs or 'none'}; {elapsed:.0f} s; load average at the end "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"size": size, "threads": threads, "min_rounds": rounds, "min_time_s": min_time,
                   "defer_mode": DEFER.name if DEFER is not None else None,
                   "defer_metrics_api": defer_metrics() is not None, "defer_metrics_end": defer_metrics(), "columns": list(COLUMNS),
                   "columns_run": cols, "sizes": sz, "torch": torch.__version__, "seconds": elapsed,
                   "groups_isolated": isolate, "load_average_end": os.getloadavg(),
                   "rows": rows, "geomean": summary}, f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
