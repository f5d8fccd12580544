"""Foundation benchmark: side by side, in one run.

1. per-op latency for small tensors: tpu (strict eager, asynchronous) vs
   PyTorch CPU eager, issuing the same op stream and waiting at the end;
2. elementwise bandwidth: tpu add/mul on large float32 tensors vs a plain
   memcpy (libc) of the same bytes;
3. GEMM GFLOP/s: tpu mm vs OpenBLAS (the library the runtime uses) called
   directly through ctypes, in float32 and float64.

Prints a table and writes bench/results/foundation.json.
Usage: python bench/bench_foundation.py [--quick]
"""
import argparse
import ctypes
import json
import os
import statistics
import time

import numpy as np
import scipy_openblas32
import torch

import torch_tpu  # noqa: F401


def best_of(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


# ---- 1. small-op latency --------------------------------------------------------

SMALL_OPS = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "relu": lambda a, b: torch.relu(a),
    "exp": lambda a, b: torch.exp(a),
    "sum": lambda a, b: a.sum(),
    "softmax": lambda a, b: torch.softmax(a, dim=-1),
    "mm": lambda a, b: a @ b,
}


def latency_pair(op, n_iter, repeats):
    """Per-op microseconds on tpu and cpu, measured in alternating rounds (so
    both see the same machine load) and reduced to the best round each."""
    args = {d: (torch.randn(32, 32).to(d), torch.randn(32, 32).to(d)) for d in ("tpu", "cpu")}
    best = {}
    for d, (a, b) in args.items():
        for _ in range(50):
            op(a, b)
        sync(d)
    for _ in range(repeats):
        for d, (a, b) in args.items():
            t0 = time.perf_counter()
            for _ in range(n_iter):
                op(a, b)
            sync(d)
            t = (time.perf_counter() - t0) / n_iter * 1e6
            best[d] = min(best.get(d, t), t)
    return best["tpu"], best["cpu"]


# ---- 2. bandwidth -----------------------------------------------------------------

def memcpy_bandwidth(nbytes, repeats):
    libc = ctypes.CDLL(None)
    libc.memcpy.restype = ctypes.c_void_p
    libc.memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    libc.memcpy(dst.ctypes.data, src.ctypes.data, nbytes)
    best, _ = best_of(lambda: libc.memcpy(dst.ctypes.data, src.ctypes.data, nbytes), repeats)
    return 2 * nbytes / best / 1e9  # read + write


def elementwise_bandwidth(device, n, repeats):
    a = torch.randn(n).to(device)
    b = torch.randn(n).to(device)
    out = torch.empty(n).to(device)

    def run():
        torch.add(a, b, out=out)
        sync(device)

    run()
    best, _ = best_of(run, repeats)
    return 3 * n * 4 / best / 1e9


def copy_bandwidth(device, n, repeats):
    a = torch.randn(n).to(device)
    out = torch.empty(n).to(device)

    def run():
        out.copy_(a)
        sync(device)

    run()
    best, _ = best_of(run, repeats)
    return 2 * n * 4 / best / 1e9


# ---- 3. GEMM ---------------------------------------------------------------------------

def blas_gflops(n, dtype, repeats):
    lib = ctypes.CDLL(os.path.join(scipy_openblas32.get_lib_dir(),
                                   f"lib{scipy_openblas32.get_library()}.so"))
    fn = lib.scipy_cblas_sgemm if dtype == np.float32 else lib.scipy_cblas_dgemm
    scalar = ctypes.c_float if dtype == np.float32 else ctypes.c_double
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                   ctypes.c_int, scalar, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                   ctypes.c_int, scalar, ctypes.c_void_p, ctypes.c_int]
    threads = torch_tpu._C.compute_threads()
    lib.scipy_openblas_set_num_threads(threads)
    a = np.random.rand(n, n).astype(dtype)
    b = np.random.rand(n, n).astype(dtype)
    c = np.zeros((n, n), dtype=dtype)

    def run():
        fn(101, 111, 111, n, n, n, 1.0, a.ctypes.data, n, b.ctypes.data, n, 0.0, c.ctypes.data, n)

    run()
    best, _ = best_of(run, repeats)
    return 2 * n ** 3 / best / 1e9


def tpu_gflops(n, dtype, repeats):
    a = torch.rand(n, n, dtype=dtype).to("tpu")
    b = torch.rand(n, n, dtype=dtype).to("tpu")
    out = torch.empty(n, n, dtype=dtype).to("tpu")

    def run():
        torch.mm(a, b, out=out)
        torch.tpu.synchronize()

    run()
    best, _ = best_of(run, repeats)
    return 2 * n ** 3 / best / 1e9


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    reps = 3 if args.quick else 7
    n_iter = 200 if args.quick else 2000
    results = {"latency_us": {}, "bandwidth_gbs": {}, "gemm_gflops": {},
               "threads": torch_tpu._C.compute_threads(), "torch": torch.__version__}

    print("== small-op latency (32x32 float32), microseconds per op")
    print(f"{'op':<10}{'tpu':>10}{'cpu':>10}{'tpu/cpu':>10}")
    for name, op in SMALL_OPS.items():
        t, c = latency_pair(op, n_iter, reps)
        results["latency_us"][name] = {"tpu": t, "cpu": c, "ratio": t / c}
        print(f"{name:<10}{t:>10.2f}{c:>10.2f}{t / c:>10.2f}")

    n = (1 << 22) if args.quick else (1 << 25)
    mc = memcpy_bandwidth(n * 4, reps)
    add = elementwise_bandwidth("tpu", n, reps)
    cpy = copy_bandwidth("tpu", n, reps)
    cpu_add = elementwise_bandwidth("cpu", n, reps)
    results["bandwidth_gbs"] = {"memcpy": mc, "tpu_add": add, "tpu_copy": cpy, "cpu_add": cpu_add,
                                "elements": n}
    print(f"== elementwise bandwidth, {n * 4 / 2**20:.0f} MiB float32 operands, GB/s")
    print(f"memcpy {mc:.1f} | tpu add {add:.1f} ({add / mc:.0%} of memcpy) | "
          f"tpu copy {cpy:.1f} ({cpy / mc:.0%}) | cpu add {cpu_add:.1f}")

    print("== GEMM, GFLOP/s")
    for size in ((512, 1024) if args.quick else (512, 1024, 2048)):
        for tdt, ndt in ((torch.float32, np.float32), (torch.float64, np.float64)):
            t = tpu_gflops(size, tdt, reps)
            b = blas_gflops(size, ndt, reps)
            key = f"{size}_{str(tdt).split('.')[-1]}"
            results["gemm_gflops"][key] = {"tpu": t, "openblas": b, "ratio": t / b}
            print(f"{key:<16} tpu {t:8.1f}  openblas {b:8.1f}  ratio {t / b:6.1%}")

    out = os.path.join(os.path.dirname(__file__), "results", "foundation.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
