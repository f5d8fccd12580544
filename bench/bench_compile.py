"""Compiled mode benchmark (issue 5), side by side in one run.

Columns: ``torch.compile(backend="tpu")`` on tpu, DEFER_AND_FUSE tpu, strict
eager tpu, PyTorch CPU eager, and ``torch.compile(backend="inductor")`` on
CPU, on the workloads of bench/bench_defer.py (imported from it, with its
sizes, its alternating best-of-N rounds and its checks of every column's first
result against CPU eager's): GPT-2 forward, a Llama training step (AdamW),
HF generate() with a KV cache (the compiled columns compile the model's
forward with dynamic=True), and the elementwise chains; plus (here) 5. HF
generate() with a static KV cache, 6. a training step of a ~100M-parameter
Llama-shaped model (--quick: batch 1, seq 128) and 7. workloads 1 and 2
under bf16 autocast. In the training rows both compiled columns compile the
model and AdamW's step (``torch.compile(opt.step)`` with the column's
backend; --optimizer eager: AdamW runs eagerly, in strict eager for the
compiled tpu column).

Also reported per workload: cold compile time of the compiled tpu column and
of Inductor (first call minus best call: Dynamo, AOTAutograd and the
backend's own work, plus the first run's fusion-program compiles; Inductor's
on-disk caches are off unless --inductor-cache, and ours is an empty directory
unless --tpu-cache, so both compile cold), and the
Dynamo recompiles during the timed rounds (``torch._dynamo.utils.counters``:
frames compiled after the warm-up).

--startup: cold and warm start-up of the compiled column in separate
processes. Per workload, a child process (this script, --startup-child) runs
the workload's first two compiled calls with an empty on-disk compile cache
(TORCH_TPU_CACHE_DIR, a fresh directory), then another child with the cache
the first one left. Each reports its first call (Dynamo's bytecode tracing,
AOTAutograd or the cache load, our lowering, the first run's fusion-program
compiles and the run itself), the best of the next --steady-calls (3) calls,
and Dynamo's compile_times() split of the first; start-up = the
torch.compile(...) call (where Dynamo's package is loaded, if any) plus the
first call minus that steady-state call (the imports of torch._dynamo and
AOTAutograd, which every process pays once, cold or warm, are reported
apart). Each cell runs --startup-repeats (3) such cold/warm pairs, each with a
fresh cache directory, and keeps each phase's least start-up (one process's
figure swings up to 2x on this shared machine; every run's is in the JSON).
--startup-columns adds
compiled_dynamo (TpuBackend(dynamo_cache=True): Dynamo's traced bytecode and
guards cached too) and inductor (its own caches, in a fresh
TORCHINDUCTOR_CACHE_DIR per workload, cold then warm) for comparison.
Each workload group (--only's numbers) runs in a process of its own
(bench_defer.isolated_rows; --same-process: all in this one): a row measured
after others in one process depends on them.
Writes bench/results/compile.json (or compile_startup.json with --startup).
Usage: python bench/bench_compile.py [--quick | --smoke] [--rounds N] [--min-time S]
       [--only 1,2,3,4,5,6,7] [--columns compiled,defer,strict,cpu,inductor[,compiled_op]] [--threads T]
       [--optimizer compiled|eager]
       [--inductor-cache] [--tpu-cache] [--out PATH] [--same-process]
       python bench/bench_compile.py --startup [--quick | --smoke] [--only ...]
       [--startup-columns compiled,inductor] [--startup-repeats R] [--steady-calls N]
"""
import argparse
import gc
import json
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

import torch_tpu  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_defer as bd  # noqa: E402
from bench_kernels import fmt  # noqa: E402

bd.COMPILED_COLUMNS["compiled"] = ("tpu", "tpu")
# --startup only: the compiled column with Dynamo's package cached too
# (TpuBackend(dynamo_cache=True).compile(...))
bd.COMPILED_COLUMNS["compiled_dynamo"] = ("tpu", torch_tpu.TpuBackend(dynamo_cache=True))
# --columns ...,compiled_op: the compiled column with replay off (every call
# runs the graph's code op by op through the dispatcher), for the A/B of replay
bd.COMPILED_COLUMNS["compiled_op"] = ("tpu", torch_tpu.TpuBackend(replay=False))
COLUMNS = ("compiled", "defer", "strict", "cpu", "inductor")
EXTRA_COLUMNS = ("compiled_op",)
WRAP_S = [0.0]  # seconds spent in torch.compile(...) itself (wrapping; loads Dynamo's package)
_bd_compiled = bd.compiled


def _compiled(module, dynamic=False, col="inductor"):
    t = time.perf_counter()
    try:
        backend = bd.COMPILED_COLUMNS[col][1]
        if isinstance(backend, torch_tpu.TpuBackend):
            return backend.compile(module, dynamic=dynamic)
        return _bd_compiled(module, dynamic=dynamic, col=col)
    finally:
        WRAP_S[0] += time.perf_counter() - t


bd.compiled = _compiled
TITLES = {"compiled": "compiled tpu", "compiled_op": "compiled tpu, replay off", **bd.TITLES}


def frames_compiled():
    from torch._dynamo.utils import counters
    return int(counters["stats"].get("unique_graphs", 0))


def measure(w, cols, rounds, min_time):
    """bench_defer's measurement, with Dynamo's graph count before and after
    the warm-up and after the timed rounds."""
    counts = {}
    orig_call = bd.call

    def call(col, fn, fallbacks):
        before = frames_compiled()
        out = orig_call(col, fn, fallbacks)
        counts.setdefault(col, []).append(frames_compiled() - before)
        return out

    bd.call = call
    try:
        r, n, check, metrics = bd.measure(w, cols, rounds, min_time)
    finally:
        bd.call = orig_call
    for c in cols:
        r[c]["graphs_first_call"] = counts[c][0]
        r[c]["graphs_second_call"] = counts[c][1]
        r[c]["recompiles_timed"] = sum(counts[c][2:])  # timed rounds and their wake-up calls
        r[c]["compile_s"] = r[c]["first_call_s"] - r[c]["best_s"]
    return r, n, check, metrics


# 6. a ~100M-parameter Llama-shaped training step (forward, backward, AdamW): 12 layers,
# hidden 768, MLP 2048, 12 heads / 4 KV heads, vocab 16000 (100.1M parameters); (batch, seq)
LLAMA100M_SIZES = {"default": (2, 256), "quick": (1, 128), "smoke": (2, 8)}


def LLAMA100M_CONFIG():
    return bd.llama_config(12, 768, 2048, 12, 4, 16000)


def generate_static_workload(new_tokens, prompt=16, batch=1, vocab=50257, tiny=False):
    """5. HF generate() with a static KV cache (cache_implementation="static"),
    a Llama-shaped model (2 layers, 128 wide, 4 heads / 2 KV heads); the
    compiled columns compile model.forward with PyTorch's default dynamic=None:
    one graph for the prefill and one for every decode step (the cache's
    shapes never change)."""
    import copy
    from transformers import LlamaForCausalLM
    cfg = bd.llama_config(2, 32 if tiny else 128, 64 if tiny else 344, 4, 2, vocab)
    torch.manual_seed(0)
    base = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, vocab, (batch, prompt), generator=torch.Generator().manual_seed(3))
    models = {}

    def make(col):
        key = col if col in bd.COMPILED_COLUMNS else bd.device_of(col)
        if key not in models:
            m = base if key == "cpu" else copy.deepcopy(base).to(bd.device_of(col))
            if key in bd.COMPILED_COLUMNS:
                m.forward = bd.compiled(m.forward, dynamic=None, col=col)
            models[key] = m
        m, x = models[key], ids.to(bd.device_of(col))

        def run():
            with torch.no_grad():
                return (m.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new_tokens,
                                   min_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                                   cache_implementation="static"),)
        return run
    return bd.Workload(5, f"generate {new_tokens} tokens Llama 2L h{cfg.hidden_size} greedy static KV cache "
                          f"b{batch}", "tokens/s", batch * new_tokens, make, check=(0, None))


def workloads(only, size, sz):
    only, tiny, work = set(only.split(",")), size == "smoke", []
    if "1" in only:
        work += bd.gpt2_workloads([int(b) for b in sz["gpt2_batches"].split(",")], sz["gpt2_seq"],
                                  sz["gpt2_layers"], *((64, 4, 256) if tiny else ()))
    if "2" in only:
        work.append(bd.llama_train_workload(sz["llama_batch"], sz["llama_seq"],
                                            bd.llama_config(2, 32, 64, 4, 2, 128) if tiny
                                            else bd.llama_config()))
    if "3" in only:
        work.append(bd.generate_workload(sz["new_tokens"], vocab=256 if tiny else 50257))
    if "4" in only:
        work += bd.chain_workloads(sz["chain_rows"], sz["chain_hidden"])
    if "5" in only:
        work.append(generate_static_workload(sz["new_tokens"], vocab=256 if tiny else 50257, tiny=tiny))
    if "6" in only:
        batch, seq = LLAMA100M_SIZES[size]
        w = bd.llama_train_workload(batch, seq, bd.llama_config(2, 32, 64, 4, 2, 128) if tiny
                                    else LLAMA100M_CONFIG())
        w.num = 6
        work.append(w)
    if "7" in only:  # workloads 1 and 2 under bf16 autocast (bench_defer's 5)
        for w in bd.gpt2_workloads([int(b) for b in sz["gpt2_batches"].split(",")], sz["gpt2_seq"],
                                   sz["gpt2_layers"], *((64, 4, 256) if tiny else ()), autocast=True):
            w.num = 7
            work.append(w)
        w = bd.llama_train_workload(sz["llama_batch"], sz["llama_seq"],
                                    bd.llama_config(2, 32, 64, 4, 2, 128) if tiny else bd.llama_config(),
                                    autocast=True)
        w.num = 7
        work.append(w)
    return work


# ---- start-up: cold and warm caches, separate processes ---------------------------------------------


def startup_child(a, size, sz):
    """One process: the first call and the steady-state calls of one
    workload's compiled column (or Inductor's); prints one JSON line."""
    t0 = time.perf_counter()
    import torch._dynamo  # noqa: F401  (imports every process pays once, cold or warm: not start-up)
    import torch._functorch.aot_autograd  # noqa: F401
    from torch_tpu import _compile_cache  # noqa: F401
    torch.compile(lambda x: x, backend="eager")  # the rest of torch.compile's imports (networkx, ...)
    imports = time.perf_counter() - t0
    from torch._dynamo.utils import compilation_time_metrics, counters
    col = a.startup_column
    t0 = time.perf_counter()
    w = workloads(a.only, size, sz)[a.startup_child]
    fn = w.make(col)
    build = time.perf_counter() - t0
    dev = bd.device_of(col)
    t = time.perf_counter()
    fn()
    bd.sync(dev)
    first = time.perf_counter() - t
    steady = []  # the steady-state call: the best of the next few (one call swings 10-50% here)
    for _ in range(a.steady_calls):
        t = time.perf_counter()
        fn()
        bd.sync(dev)
        steady.append(time.perf_counter() - t)
    second = min(steady)
    raw = {k: sum(v) for k, v in compilation_time_metrics.items()}
    pick = {"dynamo_total_s": "_compile.compile_inner", "bytecode_tracing_s": "bytecode_tracing",
            "backend_s": "OutputGraph.call_user_compiler", "aot_trace_s": "create_aot_dispatcher_function",
            "build_guards_s": "build_guards"}
    out = {"workload": w.name, "column": col, "imports_s": imports, "build_s": build,
           "compile_call_s": WRAP_S[0], "first_call_s": first,
           "second_call_s": second, "steady_calls_s": steady, "startup_s": WRAP_S[0] + first - second,
           "graphs": frames_compiled(), "aot_cache": dict(counters["aot_autograd"]),
           "inductor_cache": {k: v for k, v in counters["inductor"].items() if "cache" in k}}
    for k, v in pick.items():
        out[k] = float(raw.get(v, 0.0) or 0.0)
    backend = bd.COMPILED_COLUMNS.get(col, (None, None))[1]
    if hasattr(backend, "stats"):
        out["tpu_stats"] = dict(backend.stats)
    print("@@" + json.dumps(out), flush=True)


def startup_process(a, size, i, col, env, what):
    """One --startup-child process for workload i and column col; its JSON."""
    cmd = [sys.executable, os.path.abspath(__file__), "--startup-child", str(i), "--startup-column", col,
           "--only", a.only, "--inductor-cache", "--steady-calls", str(a.steady_calls),
           "--optimizer", a.optimizer]
    if size != "default":
        cmd.append("--" + size)
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    wall = time.perf_counter() - t
    if r.returncode != 0 or "@@" not in r.stdout:
        raise RuntimeError(f"startup child failed ({what}):\n" + r.stdout[-2000:] + r.stderr[-4000:])
    res = json.loads(r.stdout.split("@@", 1)[1])
    res["process_s"] = wall
    return res


def startup(a, size):
    repeats = a.startup_repeats or (1 if size == "smoke" else 3)
    cols = [c for c in a.startup_columns.split(",") if c in ("compiled", "compiled_dynamo", "inductor")]
    sz = dict(bd.SIZES[size])
    names = [w.name for w in workloads(a.only, size, sz)]  # builds the models once; cheap next to compiles
    gc.collect()
    rows, t_start = [], time.perf_counter()
    for i, name in enumerate(names):
        row = {"workload": name}
        for col in cols:
            runs = {"cold": [], "warm": []}
            for _ in range(repeats):  # each repeat: a fresh cache directory, cold then warm
                with tempfile.TemporaryDirectory(prefix="tpu_startup_") as tmp:
                    env = dict(os.environ, TORCH_TPU_CACHE_DIR=os.path.join(tmp, "tpu"),
                               TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"))
                    for phase in ("cold", "warm"):
                        runs[phase].append(startup_process(a, size, i, col, env, f"{name}, {col}, {phase}"))
            for phase, rs in runs.items():  # the repeat with the least start-up stands for the phase
                row[f"{col}_{phase}"] = dict(min(rs, key=lambda r: r["startup_s"]),
                                             startup_s_runs=[r["startup_s"] for r in rs])
            c, w_ = row[f"{col}_cold"], row[f"{col}_warm"]
            row[f"{col}_startup_ratio"] = c["startup_s"] / w_["startup_s"] if w_["startup_s"] > 0 else None
            print(f"  {name} [{col}]: start-up cold {c['startup_s']:.2f} s (Dynamo tracing "
                  f"{c['bytecode_tracing_s']:.2f}, backend {c['backend_s']:.2f}), "
                  f"warm {w_['startup_s']:.2f} s (tracing {w_['bytecode_tracing_s']:.2f}, "
                  f"backend {w_['backend_s']:.2f}); cold/warm {row[f'{col}_startup_ratio'] or 0:.1f}x; "
                  f"cache {w_['aot_cache']}", flush=True)
        rows.append(row)
    elapsed = time.perf_counter() - t_start
    f1 = "{:.2f}".format
    print(f"\nstart-up = torch.compile() + first call - the best of the next {a.steady_calls} calls, each in a "
          f"fresh process; cold: empty on-disk caches, warm: the caches the cold process left; the least of "
          f"{repeats} such pairs per phase (every run's figure in the JSON, startup_s_runs)\n")
    hdr = "| workload | column | start-up s cold | warm | cold/warm | Dynamo tracing s cold / warm | " \
          "backend s cold / warm (AOTAutograd + lowering, or cache load) | graphs |"
    print(hdr)
    print("|---" * 8 + "|")
    for r in rows:
        for col in cols:
            c, w_ = r[f"{col}_cold"], r[f"{col}_warm"]
            print(f"| {r['workload']} | {col} | {f1(c['startup_s'])} | {f1(w_['startup_s'])} | "
                  f"{f1(r[f'{col}_startup_ratio'] or 0)} | {f1(c['bytecode_tracing_s'])} / "
                  f"{f1(w_['bytecode_tracing_s'])} | {f1(c['backend_s'])} / {f1(w_['backend_s'])} | "
                  f"{c['graphs']} |")
    summary = {f"{col}_startup_ratio": bd.geomean([r[f"{col}_startup_ratio"] for r in rows]) for col in cols}
    print("\ngeometric means cold/warm: " + ", ".join(f"{k} {bd.cell(v, f1)}" for k, v in summary.items())
          + f"; {elapsed:.0f} s")
    out = a.out if a.out_given else a.out.replace("compile.json", "compile_startup.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"size": size, "columns": cols, "torch": torch.__version__, "seconds": elapsed,
                   "rows": rows, "geomean": summary}, f, indent=1, default=str)
    print("wrote", out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="bench_defer's quick sizes, 2 rounds")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, 1 round (tests)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--min-time", type=float, default=None)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--optimizer", choices=("compiled", "eager"), default="compiled",
                    help="training rows (2, 6, 7): the compiled columns also compile AdamW's step "
                         "(torch.compile(opt.step), the column's backend), or run it eagerly "
                         "(strict eager for compiled tpu)")
    ap.add_argument("--only", default="1,2,3,4,5,6,7")
    ap.add_argument("--columns", default=",".join(COLUMNS))
    ap.add_argument("--inductor-cache", action="store_true",
                    help="let Inductor use its on-disk caches (warm compiles)")
    ap.add_argument("--tpu-cache", action="store_true",
                    help="use the on-disk compile cache in TORCH_TPU_CACHE_DIR (else an empty one)")
    ap.add_argument("--startup", action="store_true", help="cold vs warm start-up, separate processes")
    ap.add_argument("--startup-columns", default="compiled,compiled_dynamo")
    ap.add_argument("--startup-repeats", type=int, default=None,
                    help="cold+warm process pairs per cell, the least start-up of each phase kept "
                         "(default 3, smoke 1)")
    ap.add_argument("--steady-calls", type=int, default=3,
                    help="calls after the first; the best of them is the steady state subtracted")
    ap.add_argument("--startup-child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--startup-column", default="compiled", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None)
    ap.add_argument("--same-process", action="store_true",
                    help="every workload group in this process (a row then depends on the rows before it)")
    a = ap.parse_args()
    a.out_given = a.out is not None
    bd.COMPILE_OPTIMIZER_STEP[0] = a.optimizer == "compiled"
    if a.out is None:
        a.out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "compile.json")
    size = "smoke" if a.smoke else "quick" if a.quick else "default"
    sz = dict(bd.SIZES[size])
    rounds = a.rounds or {"smoke": 1, "quick": 2, "default": 3}[size]
    min_time = a.min_time if a.min_time is not None else {"smoke": 0.0, "quick": 0.3, "default": 1.0}[size]
    pool = torch_tpu._C.compute_threads()
    torch.set_num_threads(a.threads or pool)
    torch._dynamo.config.cache_size_limit = 64
    if not a.inductor_cache:
        from torch._inductor import config as inductor_config
        inductor_config.force_disable_caches = True
    if a.startup_child is not None:
        return startup_child(a, size, sz)
    if a.startup:
        return startup(a, size)
    if not a.tpu_cache:  # cold compiles: an empty on-disk cache of our own
        os.environ["TORCH_TPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="tpu_compile_cache_")
    cols = [c for c in a.columns.split(",") if c in COLUMNS + EXTRA_COLUMNS]
    shown = COLUMNS + tuple(c for c in EXTRA_COLUMNS if c in cols)
    assert "cpu" in cols, "the CPU eager column is the reference of the output checks"
    groups = [g for g in a.only.split(",") if g]
    isolate = len(groups) > 1 and not a.same_process
    work = [] if isolate else workloads(a.only, size, sz)
    print(f"threads: torch {torch.get_num_threads()}, tpu pool {pool}, OMP_WAIT_POLICY "
          f"{os.environ.get('OMP_WAIT_POLICY', 'unset (libgomp default)')}; sizes: {size}; best of >= "
          f"{rounds} alternating rounds (up to 25 until each column ran {min_time} s); training rows: "
          f"optimizer step {a.optimizer} in the compiled columns; "
          f"{'each workload group in a process of its own' if isolate else 'one process'}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)

    rows, t0 = [], time.perf_counter()
    if isolate:
        rows = bd.isolated_rows(os.path.abspath(__file__), groups)
    for w in work:
        r, n, check, metrics = measure(w, cols, rounds, min_time)
        w.make = None
        gc.collect()
        row = {"workload_num": w.num, "workload": w.name, "unit": w.unit, "amount": w.amount,
               "rounds": n, "columns": {c: r.get(c) for c in shown}, "check_vs_cpu": check,
               "defer_metrics": metrics}
        for a_, b_ in (("compiled", "inductor"), ("compiled", "defer"), ("compiled", "strict"),
                       ("compiled", "cpu"), ("compiled", "compiled_op")):
            row[f"{a_}_over_{b_}"] = bd.ratio(row, a_, b_)
        ci, cc = r.get("inductor"), r.get("compiled")
        row["compile_s_over_inductor"] = (cc["compile_s"] / ci["compile_s"]
                                          if ci and cc and ci["compile_s"] > 0 else None)
        rows.append(row)
        print(f"  {w.name}: " + ", ".join(f"{c} {fmt(r[c]['throughput'])}" for c in cols)
              + f" {w.unit}; best of {n}" + "".join(f"; {c} vs cpu: {'ok' if v['allclose'] else 'MISMATCH'}"
                                                   for c, v in check.items()), flush=True)
    keys = ("compiled_over_inductor", "compiled_over_defer", "compiled_over_strict", "compiled_over_cpu",
            "compile_s_over_inductor") + (("compiled_over_compiled_op",) if "compiled_op" in cols else ())
    summary = {k: bd.geomean([r[k] for r in rows]) for k in keys}
    elapsed = time.perf_counter() - t0

    two = "{:.2f}".format
    print("\nthroughput (higher is better); compile s = first call minus best call; "
          "graphs = Dynamo graphs compiled on the first call / during the timed rounds\n")
    print("| # | workload | unit | " + " | ".join(TITLES[c] for c in shown) +
          " | compiled/Inductor | compiled/DEFER | compile s tpu | compile s Inductor | "
          "graphs tpu (first/timed) | graphs Inductor (first/timed) |")
    print("|---" * (9 + len(shown)) + "|")
    for r in rows:
        c = r["columns"]

        def g(col):
            return f"{c[col]['graphs_first_call']}/{c[col]['recompiles_timed']}" if c.get(col) else "n/a"
        print(f"| {r['workload_num']} | {r['workload']} | {r['unit']} | "
              + " | ".join(bd.cell(c[k] and c[k]["throughput"]) for k in shown)
              + f" | {bd.cell(r['compiled_over_inductor'], two)} | {bd.cell(r['compiled_over_defer'], two)}"
              + f" | {bd.cell(c['compiled'] and c['compiled']['compile_s'], '{:.1f}'.format)}"
              + f" | {bd.cell(c['inductor'] and c['inductor']['compile_s'], '{:.1f}'.format)}"
              + f" | {g('compiled')} | {g('inductor')} |")
    print("\ngeometric means over the workloads: " + ", ".join(
        f"{k.replace('_over_', '/')} {bd.cell(v, two)}" for k, v in summary.items()))
    fbs = {f"{r['workload']} [{c}]": r["columns"][c]["fallbacks"] for r in rows
           for c in ("compiled", "strict", "defer") if r["columns"].get(c) and r["columns"][c]["fallbacks"]}
    load = os.getloadavg()
    print(f"\ntpu CPU fallbacks: {fbs or 'none'}; {elapsed:.0f} s; load average at the end "
          f"{' '.join(f'{x:.2f}' for x in load)}")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"size": size, "sizes": sz, "min_rounds": rounds, "min_time_s": min_time,
                   "columns": list(shown), "columns_run": cols, "torch": torch.__version__,
                   "inductor_cache": a.inductor_cache, "optimizer": a.optimizer,
                   "threads": {"torch_cpu": torch.get_num_threads(), "tpu_pool": pool,
                               "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY")},
                   "seconds": elapsed, "load_average_end": load, "groups_isolated": isolate,
                   "rows": rows, "geomean": summary},
                  f, indent=1, default=str)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
