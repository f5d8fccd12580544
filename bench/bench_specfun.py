"""The special functions of specfun.h / specfun_t.h: tpu vs PyTorch CPU,
side by side in one run.

Cases: Bessel J0/Y0/Y1, modified Bessel I0/K0/K1 (and the scaled K1), Airy
Ai, spherical j0, i0e, ndtri, erfinv, digamma, polygamma(1) and zeta over
1M elements (float32 and float64), and igamma/igammac over 1M pairs in
three regions: small a (power series / continued fraction), a ~ x large
(Temme's expansion) and a small with x tiny (the small-x series). Each
round times tpu then CPU (alternating, so both see the same machine load);
the table shows the best round of each.

Prints a table and writes bench/results/specfun.json.
Usage: python bench/bench_specfun.py [--rounds N]
"""
import argparse

import torch

import torch_tpu  # noqa: F401
from side_by_side import compare, report

N = 1 << 20


def _inputs(dev):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(N, generator=g, dtype=torch.float64) * 20 + 0.01
    a = torch.rand(N, generator=g, dtype=torch.float64) * 10 + 0.1
    big = torch.rand(N, generator=g, dtype=torch.float64) * 900 + 100
    near = big * (1 + (torch.rand(N, generator=g, dtype=torch.float64) - 0.5) * 0.2)
    p = torch.rand(N, generator=g, dtype=torch.float64) * 0.998 + 0.001
    out = {}
    for dt, tag in ((torch.float32, "f32"), (torch.float64, "f64")):
        out[tag] = {k: v.to(dt).to(dev) for k, v in
                    dict(x=x, a=a, big=big, near=near, p=p, y=2 * p - 1,
                         small=x / 20).items()}
    return out


def _unary(fn, key="x", shift=0.0):
    return lambda v: fn(v[key] + shift) if shift else fn(v[key])


UNARY = {
    "special.bessel_j0": _unary(torch.special.bessel_j0),
    "special.bessel_y0": _unary(torch.special.bessel_y0),
    "special.bessel_y1": _unary(torch.special.bessel_y1),
    "special.modified_bessel_i0": _unary(torch.special.modified_bessel_i0),
    "special.modified_bessel_k0": _unary(torch.special.modified_bessel_k0),
    "special.modified_bessel_k1": _unary(torch.special.modified_bessel_k1),
    "special.scaled_modified_bessel_k1": _unary(torch.special.scaled_modified_bessel_k1),
    "special.airy_ai": _unary(torch.special.airy_ai, shift=-10.0),
    "special.spherical_bessel_j0": _unary(torch.special.spherical_bessel_j0),
    "special.i0e": _unary(torch.special.i0e),
    "special.ndtri": _unary(torch.special.ndtri, "p"),
    "erfinv": _unary(torch.erfinv, "y"),
    "digamma": _unary(torch.digamma, shift=-10.0),
    "polygamma(1)": _unary(lambda t: torch.polygamma(1, t), shift=-10.0),
    "special.zeta(x+1, a)": lambda v: torch.special.zeta(v["x"] + 1, v["a"]),
    "igamma small a": lambda v: torch.igamma(v["a"], v["x"]),
    "igammac small a": lambda v: torch.igammac(v["a"], v["x"]),
    "igamma a~x large": lambda v: torch.igamma(v["big"], v["near"]),
    "igammac small x": lambda v: torch.igammac(v["small"], v["small"]),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    vals = {d: _inputs(d) for d in ("cpu", "tpu")}
    rows = []
    for tag in ("f32", "f64"):
        for name, fn in UNARY.items():
            calls = {d: (lambda d=d, fn=fn: fn(vals[d][tag])) for d in vals}
            rows.append(compare(f"{name} 1M {tag}", calls, args.rounds))
    report(rows, "specfun", args.rounds, width=40)


if __name__ == "__main__":
    main()
