"""FFT benchmark: tpu vs PyTorch CPU (pocketfft), side by side in one run.

Cases: rfft and fft (complex input) of 4096 points (a batch of 256 rows and
a single row) and of 2^20 points, a 2-D fft of 512x512 complex64, a batched
rfft2, and a prime length (Bluestein) — float32 unless named. Each round
times tpu then CPU (alternating, so both see the same machine load); the
table shows the best round of each.

Prints a table and writes bench/results/fft.json.
Usage: python bench/bench_fft.py [--rounds N]
"""
import argparse
import json

import torch

import torch_tpu  # noqa: F401
from side_by_side import compare, report


def real(*shape, dtype=torch.float32):
    return lambda: torch.randn(*shape, dtype=dtype)


def cplx(*shape, dtype=torch.complex64):
    return lambda: torch.randn(*shape, dtype=dtype)


CASES = {
    "rfft 4096": (real(4096), lambda x: torch.fft.rfft(x)),
    "rfft 256x4096": (real(256, 4096), lambda x: torch.fft.rfft(x)),
    "fft 4096 c64": (cplx(4096), lambda x: torch.fft.fft(x)),
    "fft 256x4096 c64": (cplx(256, 4096), lambda x: torch.fft.fft(x)),
    "rfft 2^20": (real(1 << 20), lambda x: torch.fft.rfft(x)),
    "rfft 2^20 f64": (real(1 << 20, dtype=torch.float64), lambda x: torch.fft.rfft(x)),
    "fft 2^20 c64": (cplx(1 << 20), lambda x: torch.fft.fft(x)),
    "irfft 2^20": (cplx(1 << 19 | 1), lambda x: torch.fft.irfft(x)),
    "fft2 512x512 c64": (cplx(512, 512), lambda x: torch.fft.fft2(x)),
    "rfft2 16x512x512": (real(16, 512, 512), lambda x: torch.fft.rfft2(x)),
    "fft 64x4099 c64 (prime)": (cplx(64, 4099), lambda x: torch.fft.fft(x)),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    for name, (make, fn) in CASES.items():
        x = {"cpu": make()}
        x["tpu"] = x["cpu"].to("tpu")
        rows.append(compare(name, {d: (lambda d=d: fn(x[d])) for d in x}, args.rounds))
    report(rows, "fft", args.rounds, width=32)


if __name__ == "__main__":
    main()
