"""Special functions / search / segment benchmark: tpu vs PyTorch CPU, side by
side in one run.

Cases: Bessel Y0, modified Bessel K0, Airy Ai and igamma over 1M float32;
frexp of 1M float32; isin of 1M int64 against 10k values; segment_reduce
(sum and max, forward and fwd+bwd) of 100k x 64 float32 in 1000 segments;
logspace of 1M float32. Each round times tpu then CPU (alternating, so both
see the same machine load); the table shows the best round of each.

Prints a table and writes bench/results/special3.json.
Usage: python bench/bench_special3.py [--rounds N]
"""
import argparse
import json

import torch

import torch_tpu  # noqa: F401
from side_by_side import compare, report

N = 1 << 20


def _inputs(dev):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(N, generator=g) * 20 + 0.01
    a = torch.rand(N, generator=g) * 10 + 0.1
    e = torch.randint(0, 1 << 20, (N,), generator=g)
    t = torch.randint(0, 1 << 20, (10000,), generator=g)
    d = torch.randn(100000, 64, generator=g)
    lengths = torch.full((1000,), 100, dtype=torch.long)
    out = {"x": x, "a": a, "e": e, "t": t, "d": d, "lengths": lengths}
    return {k: v.to(dev) for k, v in out.items()}


def _seg_bwd(reduce):
    def fn(v, dev):
        d = v["d"].detach().requires_grad_()
        y = torch.segment_reduce(d, reduce, lengths=v["lengths"])
        y.sum().backward()
        return d.grad
    return fn


CASES = {
    "special.bessel_y0 1M f32": lambda v, dev: torch.special.bessel_y0(v["x"]),
    "special.modified_bessel_k0 1M f32": lambda v, dev: torch.special.modified_bessel_k0(v["x"]),
    "special.airy_ai 1M f32": lambda v, dev: torch.special.airy_ai(v["x"] - 10),
    "igamma 1M f32": lambda v, dev: torch.igamma(v["a"], v["x"]),
    "frexp 1M f32": lambda v, dev: torch.frexp(v["x"]),
    "isin 1M int64 in 10k": lambda v, dev: torch.isin(v["e"], v["t"]),
    "segment_reduce sum 100kx64": lambda v, dev: torch.segment_reduce(v["d"], "sum",
                                                                       lengths=v["lengths"]),
    "segment_reduce max 100kx64": lambda v, dev: torch.segment_reduce(v["d"], "max",
                                                                       lengths=v["lengths"]),
    "segment_reduce sum fwd+bwd": _seg_bwd("sum"),
    "segment_reduce max fwd+bwd": _seg_bwd("max"),
    "logspace 1M f32": lambda v, dev: torch.logspace(-3, 3, N, device=dev),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    vals = {d: _inputs(d) for d in ("cpu", "tpu")}
    rows = [compare(name, {d: (lambda d=d, fn=fn: fn(vals[d], d)) for d in vals}, args.rounds)
            for name, fn in CASES.items()]
    report(rows, "special3", args.rounds, width=36)


if __name__ == "__main__":
    main()
