"""Compiled mode benchmark (issue 5), side by side in one run.

Columns: ``torch.compile(backend="tpu")`` on tpu, DEFER_AND_FUSE tpu, strict
eager tpu, PyTorch CPU eager, and ``torch.compile(backend="inductor")`` on
CPU, on the workloads of bench/bench_defer.py (imported from it, with its
sizes, its alternating best-of-N rounds and its checks of every column's first
result against CPU eager's): GPT-2 forward, a Llama training step (AdamW),
HF generate() with a KV cache (the compiled columns compile the model's
forward with dynamic=True), and the elementwise chains.

Also reported per workload: cold compile time of the compiled tpu column and
of Inductor (first call minus best call: Dynamo, AOTAutograd and the
backend's own work, plus the first run's fusion-program compiles; Inductor's
on-disk caches are off unless --inductor-cache, so its compiles are cold), and the
Dynamo recompiles during the timed rounds (``torch._dynamo.utils.counters``:
frames compiled after the warm-up).
Writes bench/results/compile.json.
Usage: python bench/bench_compile.py [--quick | --smoke] [--rounds N] [--min-time S]
       [--only 1,2,3,4] [--columns compiled,defer,strict,cpu,inductor] [--threads T]
       [--inductor-cache] [--out PATH]
"""
import argparse
import gc
import json
import os
import sys
import time

if __name__ == "__main__":
    for _i, _a in enumerate(sys.argv):  # the tpu pool is sized when the runtime starts
        if _a == "--threads" and _i + 1 < len(sys.argv):
            os.environ["TORCH_TPU_NUM_THREADS"] = sys.argv[_i + 1]

import torch  # noqa: E402

import torch_tpu  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_defer as bd  # noqa: E402
from bench_kernels import fmt  # noqa: E402

bd.COMPILED_COLUMNS["compiled"] = ("tpu", "tpu")
COLUMNS = ("compiled", "defer", "strict", "cpu", "inductor")
TITLES = {"compiled": "compiled tpu", **bd.TITLES}


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
        r[c]["recompiles_timed"] = sum(counts[c][2:2 + n])
        r[c]["compile_s"] = r[c]["first_call_s"] - r[c]["best_s"]
    return r, n, check, metrics


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="bench_defer's quick sizes, 2 rounds")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, 1 round (tests)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--min-time", type=float, default=None)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--only", default="1,2,3,4")
    ap.add_argument("--columns", default=",".join(COLUMNS))
    ap.add_argument("--inductor-cache", action="store_true",
                    help="let Inductor use its on-disk caches (warm compiles)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "results", "compile.json"))
    a = ap.parse_args()
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
    cols = [c for c in a.columns.split(",") if c in COLUMNS]
    assert "cpu" in cols, "the CPU eager column is the reference of the output checks"
    only, tiny, work = set(a.only.split(",")), size == "smoke", []
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
    print(f"threads: torch {torch.get_num_threads()}, tpu pool {pool}; sizes: {size}; best of >= "
          f"{rounds} alternating rounds (up to 25 until each column ran {min_time} s)", flush=True)

    rows, t0 = [], time.perf_counter()
    for w in work:
        r, n, check, metrics = measure(w, cols, rounds, min_time)
        w.make = None
        gc.collect()
        row = {"workload_num": w.num, "workload": w.name, "unit": w.unit, "amount": w.amount,
               "rounds": n, "columns": {c: r.get(c) for c in COLUMNS}, "check_vs_cpu": check,
               "defer_metrics": metrics}
        for a_, b_ in (("compiled", "inductor"), ("compiled", "defer"), ("compiled", "strict"),
                       ("compiled", "cpu")):
            row[f"{a_}_over_{b_}"] = bd.ratio(row, a_, b_)
        ci, cc = r.get("inductor"), r.get("compiled")
        row["compile_s_over_inductor"] = (cc["compile_s"] / ci["compile_s"]
                                          if ci and cc and ci["compile_s"] > 0 else None)
        rows.append(row)
        print(f"  {w.name}: " + ", ".join(f"{c} {fmt(r[c]['throughput'])}" for c in cols)
              + f" {w.unit}; best of {n}" + "".join(f"; {c} vs cpu: {'ok' if v['allclose'] else 'MISMATCH'}"
                                                   for c, v in check.items()), flush=True)
    keys = ("compiled_over_inductor", "compiled_over_defer", "compiled_over_strict", "compiled_over_cpu",
            "compile_s_over_inductor")
    summary = {k: bd.geomean([r[k] for r in rows]) for k in keys}
    elapsed = time.perf_counter() - t0

    two = "{:.2f}".format
    print("\nthroughput (higher is better); compile s = first call minus best call; "
          "graphs = Dynamo graphs compiled on the first call / during the timed rounds\n")
    print("| # | workload | unit | " + " | ".join(TITLES[c] for c in COLUMNS) +
          " | compiled/Inductor | compiled/DEFER | compile s tpu | compile s Inductor | "
          "graphs tpu (first/timed) | graphs Inductor (first/timed) |")
    print("|---" * 14 + "|")
    for r in rows:
        c = r["columns"]

        def g(col):
            return f"{c[col]['graphs_first_call']}/{c[col]['recompiles_timed']}" if c.get(col) else "n/a"
        print(f"| {r['workload_num']} | {r['workload']} | {r['unit']} | "
              + " | ".join(bd.cell(c[k] and c[k]["throughput"]) for k in COLUMNS)
              + f" | {bd.cell(r['compiled_over_inductor'], two)} | {bd.cell(r['compiled_over_defer'], two)}"
              + f" | {bd.cell(c['compiled'] and c['compiled']['compile_s'], '{:.1f}'.format)}"
              + f" | {bd.cell(c['inductor'] and c['inductor']['compile_s'], '{:.1f}'.format)}"
              + f" | {g('compiled')} | {g('inductor')} |")
    print("\ngeometric means over the workloads: " + ", ".join(
        f"{k.replace('_over_', '/')} {bd.cell(v, two)}" for k, v in summary.items()))
    fbs = {f"{r['workload']} [{c}]": r["columns"][c]["fallbacks"] for r in rows
           for c in ("compiled", "strict", "defer") if r["columns"].get(c) and r["columns"][c]["fallbacks"]}
    print(f"\ntpu CPU fallbacks: {fbs or 'none'}; {elapsed:.0f} s")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"size": size, "sizes": sz, "min_rounds": rounds, "min_time_s": min_time,
                   "columns": list(COLUMNS), "columns_run": cols, "torch": torch.__version__,
                   "inductor_cache": a.inductor_cache,
                   "threads": {"torch_cpu": torch.get_num_threads(), "tpu_pool": pool},
                   "seconds": elapsed, "rows": rows, "geomean": summary}, f, indent=1, default=str)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
