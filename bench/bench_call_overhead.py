"""Per-call overhead of a small compiled graph (docs/compile.md, "Replay").

A GPT-2 decode-sized call (2 layers, 128 wide, vocabulary 1,000, one token,
no KV cache: about 136 ATen ops, every one tiny), in one process, the
columns alternated over the rounds:
  - the eager module under DEFER_AND_FUSE,
  - torch.compile(backend=TpuBackend(replay=False)): the graph's code runs op
    by op through the dispatcher on every call,
  - torch.compile(backend=TpuBackend(replay=True)): later calls replay the
    runtime work of the first.
Reports, per column, the best over the rounds of the calling thread's host
CPU time per call and of the wall time per call (100 calls, then one
synchronize), and checks that every column's logits equal eager's.

Usage: python bench/bench_call_overhead.py [--rounds 7] [--calls 100]
"""
import argparse
import os
import time

# OMP_WAIT_POLICY stays as the environment has it (the header prints it).

import torch  # noqa: E402

import torch_tpu  # noqa: E402
from torch_tpu import TpuBackend  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=100)
    a = ap.parse_args()
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=64,
                     bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg).eval().to("tpu")
    ids = torch.randint(0, 1000, (1, 1), device="tpu")
    defer = torch_tpu.EagerMode.DEFER_AND_FUSE
    columns = {"eager DEFER_AND_FUSE": (model.forward, None)}
    for replay in (False, True):
        backend = TpuBackend(replay=replay, cache=False)
        columns[f"compiled, replay {'on' if replay else 'off'}"] = (
            torch.compile(model.forward, backend=backend), backend)

    def calls(fn, n):
        with torch_tpu.set_eager_mode(defer):
            for _ in range(n):
                out = fn(ids, use_cache=False).logits
        return out

    best = {k: [float("inf"), float("inf")] for k in columns}
    with torch.no_grad():
        for fn, _ in columns.values():
            calls(fn, 3)
            torch.tpu.synchronize()
        for _ in range(a.rounds):
            for name, (fn, _) in columns.items():
                torch.tpu.synchronize()
                t0, w0 = time.thread_time(), time.perf_counter()
                calls(fn, a.calls)
                t1 = time.thread_time()
                torch.tpu.synchronize()
                w1 = time.perf_counter()
                best[name][0] = min(best[name][0], (t1 - t0) / a.calls * 1e6)
                best[name][1] = min(best[name][1], (w1 - w0) / a.calls * 1e6)
        want = calls(columns["eager DEFER_AND_FUSE"][0], 1).cpu()
        print(f"OMP_WAIT_POLICY {os.environ.get('OMP_WAIT_POLICY', 'unset (libgomp default)')}, "
              f"torch threads {torch.get_num_threads()}")
        print("| | host µs per call | wall µs per call | logits equal eager's | replays |")
        print("|---|---:|---:|---|---:|")
        for name, (fn, backend) in columns.items():
            same = torch.equal(calls(fn, 1).cpu(), want)
            replays = backend.stats["replays"] if backend else "-"
            print(f"| {name} | {best[name][0]:,.0f} | {best[name][1]:,.0f} | {same} | {replays} |")


if __name__ == "__main__":
    main()
