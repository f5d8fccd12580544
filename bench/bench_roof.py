"""Fused elementwise chains against the memory-bandwidth roof (issue 23).

Chains (float32, ROWS x 1024; rows 2048 = 8 MiB per tensor, cache-resident
in this machine's 32 MiB L3, and 8192 = 32 MiB per tensor, DRAM-sized):
  gelu       x + 0.5 * gelu(x * 1.7 + 0.1)            exact-erf GELU (the default)
  gelu_tanh  x + 0.5 * gelu(x * 1.7 + 0.1, 'tanh')    the tanh-approximation control
  rms_silu   rms_norm(x, (1024,)) * silu(g)
  axpby      x * 0.5 + g * 1.5 - 0.25                   memory-bound controls: no
  relu_res   relu(x * 1.7 + 0.1) + g                    transcendental, 12 B/element

Columns, run in alternating rounds in one process (every column sees the same
load), each round ~--round-time seconds of back-to-back calls, each call
timed on its own (the tpu columns synchronise inside the timed region):
  defer      tpu under DEFER_AND_FUSE: the chain is one fused program
  strict     tpu strict eager (one kernel per op), for context
  defer_nodewise  DEFER_AND_FUSE with the interpreter's direct path off
             (TORCH_TPU_FUSION_DIRECT=0, set per call): the fused group run
             node by node over tiles, as every group holding a mul ran
             before 2026-12-06 (roof23); an in-process A/B of that change
  cpu        PyTorch CPU eager at its default thread settings
  inductor   torch.compile(backend="inductor") on CPU (--columns to add it)
and the bandwidth probes of the same size:
  copy_cpu   torch CPU dst.copy_(src) (ATen's parallel copy over the pool)
  triad_cpu  torch.add(b, c, alpha=3, out=a) on CPU (two reads, one write)
  copy_tpu   tpu dst.copy_(src) in strict eager (the runtime's own copy)
Bandwidth of a probe = bytes it moves at minimum (read each input once, write
the output once; write-allocate traffic not counted, as for the chains) /
its min time. The roof bandwidth of a size is the best probe's; a chain's
roof time = its minimum bytes (gelu: 8 B/element, the others 12) / that
bandwidth, and "% of roof" = roof time / the chain's min time (= achieved
GB/s / roof GB/s). Per cell: min and median over all calls of all rounds.

Where arithmetic binds instead: each chain's compute cost is measured as the
marginal time per element of its DEFER_AND_FUSE program between two
cache-hot sizes (--hot-rows, default 16 and 256 rows: inputs and output in
the cores' L2, so memory does not bind; the difference cancels the per-call
cost of recording and flushing), at the same pool threads. Its compute time
at a size = that ns/element x elements; "% of bound" = max(roof time,
compute time) / the chain's min time.

Prints the load average before and after, thread settings (tpu pool,
PyTorch intra-op threads, OMP_WAIT_POLICY), the SIMD path of the float32
elementwise kernels (the target_clones version the CPU's features select) and
PyTorch's CPU capability; checks DEFER_AND_FUSE's result bitwise against
strict's; writes raw JSON (every call's time) to bench/results/roof.json.

Between a CPU and a tpu column the loop sleeps SETTLE_S (PyTorch's OpenMP
threads spin for a while after a parallel region) and each column makes one
untimed call first (see bench_defer.py's docstring for both).

Usage: python bench/bench_roof.py [--rows 2048,8192] [--chains gelu,gelu_tanh,rms_silu,axpby,relu_res]
       [--columns defer,strict,cpu] [--rounds 5] [--round-time 0.25] [--threads 2]
       [--out PATH]
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

if __name__ == "__main__":
    for _i, _a in enumerate(sys.argv):  # the tpu pool is sized when the runtime starts
        if _a == "--threads" and _i + 1 < len(sys.argv):
            os.environ["TORCH_TPU_NUM_THREADS"] = sys.argv[_i + 1]

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_tpu  # noqa: E402

SETTLE_S = 0.1
HIDDEN = 1024
CHAIN_BYTES = {"gelu": 8, "gelu_tanh": 8, "rms_silu": 12, "axpby": 12, "relu_res": 12}  # minimum bytes per element
PROBE_BYTES = {"copy_cpu": 8, "triad_cpu": 12, "copy_tpu": 8}
CHAIN_COLUMNS = ("defer", "strict", "cpu", "inductor", "defer_nodewise")


def chain_fn(name):
    if name == "gelu":
        return lambda x, g: x + 0.5 * F.gelu(x * 1.7 + 0.1)
    if name == "gelu_tanh":
        return lambda x, g: x + 0.5 * F.gelu(x * 1.7 + 0.1, approximate="tanh")
    if name == "rms_silu":
        return lambda x, g: F.rms_norm(x, (x.shape[-1],)) * F.silu(g)
    if name == "axpby":
        return lambda x, g: x * 0.5 + g * 1.5 - 0.25
    if name == "relu_res":
        return lambda x, g: torch.relu(x * 1.7 + 0.1) + g
    raise ValueError(name)


def simd_path():
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    v4 = {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"} <= flags
    v3 = {"avx2", "fma", "bmi2"} <= flags
    clone = ("arch=x86-64-v4 (AVX-512)" if v4 else "avx2" if v3 else "default (SSE2)")
    cap = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "?")()
    return {"tpu_ew_f32_clone": clone, "torch_cpu_capability": cap,
            "machine": platform.machine()}


def make_column(col, chain, rows, xs):
    """A zero-argument callable running one call of `col` (a chain column or a
    probe) on inputs xs (CPU tensors), and the device it runs on."""
    x_cpu, g_cpu = xs
    if col in ("defer", "strict", "defer_nodewise"):
        x, g = x_cpu.to("tpu"), g_cpu.to("tpu")
        fn = chain_fn(chain)
        mode = (torch_tpu.EagerMode.DEFER_NEVER if col == "strict"
                else torch_tpu.EagerMode.DEFER_AND_FUSE)
        nodewise = col == "defer_nodewise"

        def run():
            torch_tpu.set_global_eager_mode(mode)
            if nodewise:
                torch_tpu._C.set_runtime_config("TORCH_TPU_FUSION_DIRECT", "0")
            try:
                y = fn(x, g)
                torch.tpu.synchronize()
            finally:
                if nodewise:
                    torch_tpu._C.set_runtime_config("TORCH_TPU_FUSION_DIRECT", None)
                torch_tpu.set_global_eager_mode(torch_tpu.EagerMode.DEFER_NEVER)
            return y
        return run, "tpu"
    if col == "cpu":
        fn = chain_fn(chain)
        return (lambda: fn(x_cpu, g_cpu)), "cpu"
    if col == "inductor":
        fn = torch.compile(chain_fn(chain), backend="inductor")
        return (lambda: fn(x_cpu, g_cpu)), "cpu"
    if col == "copy_cpu":
        dst = torch.empty_like(x_cpu)
        return (lambda: dst.copy_(x_cpu)), "cpu"
    if col == "triad_cpu":
        dst = torch.empty_like(x_cpu)
        return (lambda: torch.add(x_cpu, g_cpu, alpha=3.0, out=dst)), "cpu"
    if col == "copy_tpu":
        src = x_cpu.to("tpu")
        dst = torch.empty_like(src)

        def run():
            dst.copy_(src)
            torch.tpu.synchronize()
            return dst
        return run, "tpu"
    raise ValueError(col)


def time_columns(cols, rounds, round_time):
    """cols: name -> (callable, device). Alternating rounds; returns name -> list of call times (s)."""
    times = {c: [] for c in cols}
    prev_dev = None
    for r in range(rounds):
        order = list(cols) if r % 2 == 0 else list(reversed(cols))
        for c in order:
            fn, dev = cols[c]
            if prev_dev is not None and dev != prev_dev:
                time.sleep(SETTLE_S)
            fn()  # untimed: wakes the device's threads, refills caches
            t_end = time.perf_counter() + round_time
            while True:
                t0 = time.perf_counter()
                fn()
                t1 = time.perf_counter()
                times[c].append(t1 - t0)
                if t1 >= t_end:
                    break
            prev_dev = dev
    return times


def summary(ts):
    return {"min_s": min(ts), "median_s": statistics.median(ts), "calls": len(ts)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="2048,8192")
    ap.add_argument("--chains", default="gelu,gelu_tanh,rms_silu,axpby,relu_res")
    ap.add_argument("--columns", default="defer,strict,cpu")
    ap.add_argument("--probes", default="copy_cpu,triad_cpu,copy_tpu")
    ap.add_argument("--hot-rows", default="16,256", help="two cache-hot sizes for the compute cost")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--round-time", type=float, default=0.25)
    ap.add_argument("--threads", type=int, default=None, help="tpu pool threads (default: its own)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "results", "roof.json"))
    a = ap.parse_args()
    chains = [c for c in a.chains.split(",") if c]
    columns = [c for c in a.columns.split(",") if c]
    probes = [c for c in a.probes.split(",") if c]
    for c in columns:
        if c not in CHAIN_COLUMNS:
            ap.error(f"unknown column {c}")

    load0 = os.getloadavg()
    settings = {
        "tpu_pool_threads": os.environ.get("TORCH_TPU_NUM_THREADS", "(runtime default)"),
        "torch_num_threads": torch.get_num_threads(),
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "(unset: libgomp default)"),
        "TORCH_TPU_FUSION_DIRECT": os.environ.get("TORCH_TPU_FUSION_DIRECT", "(unset: on)"),
        "cpus": os.cpu_count(),
    }
    simd = simd_path()
    print(f"load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    print("threads:", ", ".join(f"{k}={v}" for k, v in settings.items()))
    print("SIMD:", ", ".join(f"{k}={v}" for k, v in simd.items()))
    print(f"rounds {a.rounds} x ~{a.round_time}s per column, alternating; min / median per call\n")

    result = {"load_before": load0, "settings": settings, "simd": simd, "args": vars(a),
              "sizes": {}}
    # compute cost per element: DEFER_AND_FUSE chains on two cache-hot sizes
    hot = [int(r) for r in a.hot_rows.split(",") if r]
    compute_ns = {}
    if len(hot) == 2 and "defer" in columns:
        gen = torch.Generator().manual_seed(1)
        hcols = {}
        for hr in hot:
            hx = (torch.randn(hr, HIDDEN, generator=gen), torch.randn(hr, HIDDEN, generator=gen))
            for ch in chains:
                hcols[f"{ch}@{hr}"] = make_column("defer", ch, hr, hx)
        hraw = time_columns(hcols, a.rounds, a.round_time / 2)
        print(f"compute cost (DEFER_AND_FUSE, marginal between {hot[0]} and {hot[1]} cache-hot "
              "rows, min times):")
        print("| chain | min us at %d rows | min us at %d rows | ns/element |" % tuple(hot))
        print("|---|---|---|---|")
        for ch in chains:
            t0, t1 = min(hraw[f"{ch}@{hot[0]}"]), min(hraw[f"{ch}@{hot[1]}"])
            compute_ns[ch] = (t1 - t0) * 1e9 / ((hot[1] - hot[0]) * HIDDEN)
            print(f"| {ch} | {t0*1e6:.1f} | {t1*1e6:.1f} | {compute_ns[ch]:.3f} |")
        print()
        result["compute"] = {"hot_rows": hot, "ns_per_element": compute_ns, "raw_s": hraw}
    for rows in [int(r) for r in a.rows.split(",") if r]:
        n = rows * HIDDEN
        gen = torch.Generator().manual_seed(0)
        xs = (torch.randn(rows, HIDDEN, generator=gen), torch.randn(rows, HIDDEN, generator=gen))
        cols = {}
        for p in probes:
            cols[p] = make_column(p, None, rows, xs)
        for ch in chains:
            for c in columns:
                cols[f"{ch}/{c}"] = make_column(c, ch, rows, xs)
        # correctness: DEFER_AND_FUSE against strict, bitwise
        exact = {}
        for ch in chains:
            if "defer" in columns and "strict" in columns:
                yd, ys = cols[f"{ch}/defer"][0]().cpu(), cols[f"{ch}/strict"][0]().cpu()
                exact[ch] = bool(torch.equal(yd, ys))
        raw = time_columns(cols, a.rounds, a.round_time)
        sz = {"rows": rows, "hidden": HIDDEN, "elements": n, "probes": {}, "chains": {},
              "defer_equals_strict": exact, "raw_s": raw}
        bw = {}
        for p in probes:
            s = summary(raw[p])
            s["GBps_min_time"] = PROBE_BYTES[p] * n / s["min_s"] / 1e9
            s["GBps_median_time"] = PROBE_BYTES[p] * n / s["median_s"] / 1e9
            sz["probes"][p] = s
            bw[p] = s["GBps_min_time"]
        roof_bw = max(bw.values()) if bw else float("nan")
        roof_probe = max(bw, key=bw.get) if bw else None
        sz["roof_GBps"], sz["roof_probe"] = roof_bw, roof_probe
        mib = n * 4 / 2**20
        print(f"## {rows} x {HIDDEN} float32 ({mib:.0f} MiB per tensor)")
        print("| probe | min us | median us | GB/s (min) | GB/s (median) |")
        print("|---|---|---|---|---|")
        for p in probes:
            s = sz["probes"][p]
            print(f"| {p} | {s['min_s']*1e6:.0f} | {s['median_s']*1e6:.0f} | "
                  f"{s['GBps_min_time']:.1f} | {s['GBps_median_time']:.1f} |")
        print(f"roof bandwidth: {roof_bw:.1f} GB/s ({roof_probe})\n")
        print("| chain | column | min us | median us | GB/s (min) | % of roof (min) "
              "| % of roof (median) | compute us | % of bound (min) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for ch in chains:
            nbytes = CHAIN_BYTES[ch] * n
            roof_s = nbytes / (roof_bw * 1e9)
            comp_s = compute_ns[ch] * n * 1e-9 if ch in compute_ns else float("nan")
            bound_s = max(roof_s, comp_s) if ch in compute_ns else roof_s
            sz["chains"][ch] = {"min_bytes": nbytes, "roof_s": roof_s, "compute_s": comp_s,
                                "bound": "compute" if comp_s > roof_s else "memory"}
            for c in columns:
                s = summary(raw[f"{ch}/{c}"])
                s["GBps"] = nbytes / s["min_s"] / 1e9
                s["pct_roof_min"] = 100 * roof_s / s["min_s"]
                s["pct_roof_median"] = 100 * roof_s / s["median_s"]
                s["ns_per_element_min"] = s["min_s"] * 1e9 / n
                s["pct_bound_min"] = 100 * bound_s / s["min_s"]
                sz["chains"][ch][c] = s
                print(f"| {ch} | {c} | {s['min_s']*1e6:.0f} | {s['median_s']*1e6:.0f} | "
                      f"{s['GBps']:.1f} | {s['pct_roof_min']:.0f}% | {s['pct_roof_median']:.0f}% | "
                      f"{comp_s*1e6:.0f} | {s['pct_bound_min']:.0f}% |")
        if exact:
            print("DEFER_AND_FUSE == strict (bitwise):",
                  ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in exact.items()))
        print()
        result["sizes"][str(rows)] = sz
    load1 = os.getloadavg()
    result["load_after"] = load1
    print(f"load average after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f)
    print(f"raw results: {a.out}")


if __name__ == "__main__":
    main()
