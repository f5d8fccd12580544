"""Indexing benchmark: tpu vs PyTorch CPU side by side, in one run.

1. index.Tensor gather of 1M rows (x[idx], x: [100k, 64] float32);
2. index_put_ with accumulate=True (1M rows of 64 into [100k, 64]);
3. embedding_bag forward+backward (vocab 100k, dim 128, bags of 20,
   batch 1024, mode sum and mean);
4. nonzero / boolean-mask select of 4M elements (data-dependent sizes).

Best of N alternating rounds (tpu, cpu, tpu, cpu, ...), so both see the same
machine load. Prints a table and writes bench/results/index.json.
Usage: python bench/bench_index.py [--quick]
"""
import argparse
import json
import os
import time

import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401


def sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


def side_by_side(make, run, repeats):
    """Best seconds per call on tpu and on cpu (alternating rounds)."""
    state = {d: make(d) for d in ("tpu", "cpu")}
    for d in state:  # warm up
        run(state[d])
        sync(d)
    best = {}
    for _ in range(repeats):
        for d in ("tpu", "cpu"):
            t0 = time.perf_counter()
            run(state[d])
            sync(d)
            t = time.perf_counter() - t0
            best[d] = min(best.get(d, t), t)
    return best["tpu"], best["cpu"]


def gather_case(rows):
    def make(d):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(100_000, 64, generator=g)
        idx = torch.randint(0, 100_000, (rows,), generator=g)
        return x.to(d), idx.to(d)

    return make, lambda s: s[0][s[1]]


def index_put_case(rows):
    def make(d):
        g = torch.Generator().manual_seed(1)
        idx = torch.randint(0, 100_000, (rows,), generator=g)
        vals = torch.randn(rows, 64, generator=g)
        return torch.zeros(100_000, 64).to(d), idx.to(d), vals.to(d)

    return make, lambda s: s[0].index_put_((s[1],), s[2], accumulate=True)


def embedding_bag_case(mode, batch=1024, bag=20, vocab=100_000, dim=128):
    def make(d):
        g = torch.Generator().manual_seed(2)
        w = torch.randn(vocab, dim, generator=g).to(d).requires_grad_()
        idx = torch.randint(0, vocab, (batch * bag,), generator=g).to(d)
        offs = torch.arange(0, batch * bag, bag).to(d)
        grad = torch.randn(batch, dim, generator=g).to(d)
        return w, idx, offs, grad

    def run(s):
        w, idx, offs, grad = s
        w.grad = None
        out = F.embedding_bag(idx, w, offs, mode=mode)
        out.backward(grad)

    return make, run


def mask_case(n):
    def make(d):
        g = torch.Generator().manual_seed(3)
        return torch.randn(n, generator=g).to(d)

    return make, lambda x: x[x > 0.5]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    reps = 3 if args.quick else 7
    rows = 200_000 if args.quick else 1_000_000
    cases = [
        (f"index.Tensor gather x[idx], {rows} rows of 64 f32", *gather_case(rows)),
        (f"index_put_ accumulate, {rows} rows of 64 f32", *index_put_case(rows)),
        ("embedding_bag sum fwd+bwd (100k x 128, 1024 bags of 20)", *embedding_bag_case("sum")),
        ("embedding_bag mean fwd+bwd (100k x 128, 1024 bags of 20)", *embedding_bag_case("mean")),
        ("embedding_bag max fwd+bwd (100k x 128, 1024 bags of 20)", *embedding_bag_case("max")),
        ("x[x > 0.5] mask select, 4M f32", *mask_case(4_000_000)),
    ]
    results = []
    print(f"{'case':62s} {'tpu ms':>9s} {'cpu ms':>9s} {'cpu/tpu':>8s}")
    for name, make, run in cases:
        t, c = side_by_side(make, run, reps)
        results.append({"case": name, "tpu_ms": t * 1e3, "cpu_ms": c * 1e3, "speedup": c / t})
        print(f"{name:62s} {t * 1e3:9.2f} {c * 1e3:9.2f} {c / t:8.2f}x", flush=True)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "index.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"threads": torch.get_num_threads(), "results": results}, f, indent=1)
    print("wrote", out)


if __name__ == "__main__":
    main()
