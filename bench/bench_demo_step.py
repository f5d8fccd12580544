"""The training step of scripts/demo.sh, timed per step: PyTorch CPU eager,
tpu strict eager and tpu DEFER_AND_FUSE side by side in one process.

The model, optimizer and step are examples/train_gpt.py's (a 0.47M-parameter
GPT, batch 8 x 64 tokens, AdamW foreach=False, a host read of the loss every
step), the three copies from identical weights. Each round runs --steps
steps of every configuration, the order rotating from round to round; the
per-step time of a round is its wall time over its steps. Reported: min and
median over --rounds rounds, each tpu configuration over PyTorch CPU (>1:
tpu faster), the thread settings, the load average before and after, and per
step the compute pool's counters (torch_tpu.pool_stats: jobs split, worker
polls that found a job / ran out / were cut as descheduled, sleeps, wake-ups).

PyTorch runs at its default thread settings. --passive also runs the whole
benchmark again in a fresh process with OMP_WAIT_POLICY=PASSIVE (PyTorch's
and oneDNN's OpenMP threads sleep at once instead of spinning after a
parallel region) and prints both runs side by side, labelled.

Usage: python bench/bench_demo_step.py [--rounds 15] [--steps 8] [--passive]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

CONFIGS = ("cpu", "strict", "defer")
THREAD_VARS = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "MKL_NUM_THREADS",
               "TORCH_TPU_NUM_THREADS", "TORCH_TPU_PIN_THREADS", "TORCH_TPU_POOL_SPIN_US",
               "TORCH_TPU_QUEUE_SPIN_US")


def measure(rounds, steps, warmup):
    """Runs the benchmark in this process; returns a dict of results."""
    import torch
    import torch.nn.functional as F
    import torch_tpu
    from train_gpt import GPT, synthetic_batches

    vocab, dim, heads, layers, seq, batch = 256, 128, 4, 2, 64, 8
    torch.manual_seed(0)
    reference = GPT(vocab, dim, heads, layers, seq)
    models, opts = {}, {}
    for cfg in CONFIGS:
        m = GPT(vocab, dim, heads, layers, seq)
        m.load_state_dict(reference.state_dict())
        m = m.to("cpu" if cfg == "cpu" else "tpu")
        models[cfg] = m
        opts[cfg] = torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.01, foreach=False)
    data = list(synthetic_batches(steps, batch, seq, vocab))

    def run(cfg, n):
        device = "cpu" if cfg == "cpu" else "tpu"
        model, opt = models[cfg], opts[cfg]
        if cfg == "defer":  # global: backward runs on autograd's thread
            torch_tpu.set_global_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE)
        try:
            t0 = time.perf_counter()
            for i in range(n):
                x, y = data[i % len(data)]
                x, y = x.to(device), y.to(device)
                logits = model(x)
                loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                loss.item()
            return (time.perf_counter() - t0) / n
        finally:
            if cfg == "defer":
                torch_tpu.set_global_eager_mode(torch_tpu.EagerMode.DEFER_NEVER)

    for cfg in CONFIGS:
        run(cfg, warmup)
    pool_stats = getattr(torch_tpu, "pool_stats", None)  # absent in older builds
    times = {cfg: [] for cfg in CONFIGS}
    counters = {cfg: {} for cfg in CONFIGS}
    load_start = os.getloadavg()
    for r in range(rounds):
        order = CONFIGS[r % 3:] + CONFIGS[:r % 3]
        for cfg in order:
            before = pool_stats() if pool_stats else {}
            times[cfg].append(run(cfg, steps))
            after = pool_stats() if pool_stats else {}
            for k, v in after.items():
                if k not in ("threads", "spin_ns"):
                    counters[cfg][k] = counters[cfg].get(k, 0) + v - before[k]
    load_end = os.getloadavg()
    total = rounds * steps
    return {
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "pool_threads": pool_stats()["threads"] if pool_stats else None,
        "env": {k: os.environ[k] for k in THREAD_VARS if k in os.environ},
        "load": [load_start, load_end],
        "ms": {cfg: [1e3 * t for t in ts] for cfg, ts in times.items()},
        "per_step": {cfg: {k: v / total for k, v in c.items()} for cfg, c in counters.items()},
        "rounds": rounds, "steps": steps,
    }


def summarise(res, label):
    print(f"== {label}: torch {res['torch']}, torch threads {res['torch_threads']}, "
          f"tpu pool threads {res['pool_threads']}, thread variables {res['env'] or 'none'}")
    (a1, a5, a15), (b1, b5, b15) = res["load"]
    print(f"   load average {a1:.2f} {a5:.2f} {a15:.2f} -> {b1:.2f} {b5:.2f} {b15:.2f}; "
          f"{res['rounds']} rounds x {res['steps']} steps per configuration")
    cpu_med = statistics.median(res["ms"]["cpu"])
    cpu_min = min(res["ms"]["cpu"])
    for cfg in CONFIGS:
        ms = res["ms"][cfg]
        med, lo = statistics.median(ms), min(ms)
        ratio = "" if cfg == "cpu" else \
            f"  vs cpu {cpu_med / med:.2f}x median, {cpu_min / lo:.2f}x min"
        print(f"   {cfg:>7s}: {med:7.2f} ms/step median, {lo:7.2f} min, {max(ms):7.2f} max{ratio}")
    for cfg in ("strict", "defer"):
        c = res["per_step"][cfg]
        if c:
            print(f"   {cfg:>7s} pool per step: " + ", ".join(
                f"{k} {v:.1f}" for k, v in c.items()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--passive", action="store_true",
                    help="also run with OMP_WAIT_POLICY=PASSIVE (fresh process), side by side")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.json:
        print("RESULT " + json.dumps(measure(a.rounds, a.steps, a.warmup)), flush=True)
        return
    import torch_tpu
    print(f"torch_tpu from {os.path.dirname(torch_tpu.__file__)}, {os.cpu_count()} cores")
    if not a.passive:
        summarise(measure(a.rounds, a.steps, a.warmup), "default thread settings")
        return
    runs = []
    for label, extra in (("default thread settings", {}),
                         ("OMP_WAIT_POLICY=PASSIVE", {"OMP_WAIT_POLICY": "PASSIVE"})):
        env = dict(os.environ)
        env.pop("OMP_WAIT_POLICY", None)
        env.update(extra)
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--json",
                              "--rounds", str(a.rounds), "--steps", str(a.steps),
                              "--warmup", str(a.warmup)],
                             env=env, check=True, capture_output=True, text=True).stdout
        line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1]
        runs.append((label, json.loads(line[len("RESULT "):])))
    for label, res in runs:
        summarise(res, label)


if __name__ == "__main__":
    main()
