"""Where a training step's time goes on tpu: torch.profiler on the demo's GPT
(examples/train_gpt.py), in strict eager and in DEFER_AND_FUSE.

For each mode: a few warm-up steps (the first steps compile programs and fill
the caches), then --steps profiled steps with
``activities=[CPU, PrivateUse1]``. Prints the ops sorted by device time and
the DEFER_AND_FUSE flush markers (reason, program cache hit or compile), and
writes a chrome trace per mode (open it in Perfetto or chrome://tracing: the
host threads, then one row per chip stream, and one for its flushes).

    python examples/profile_gpt.py --steps 3 --trace-dir /tmp
"""
import argparse
import collections
import os

import torch
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import torch_tpu
from train_gpt import GPT, synthetic_batches


def step(model, opt, x, y, vocab):
    loss = F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


def profile_mode(mode, args):
    torch.manual_seed(0)
    model = GPT(args.vocab, args.dim, args.heads, args.layers, args.seq).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, foreach=False)
    batches = list(synthetic_batches(args.warmup + args.steps, args.batch, args.seq, args.vocab))
    batches = [(x.to("tpu"), y.to("tpu")) for x, y in batches]
    torch_tpu.set_global_eager_mode(mode)  # global: backward runs on autograd's thread
    try:
        for x, y in batches[: args.warmup]:
            step(model, opt, x, y, args.vocab)
        torch.tpu.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            losses = [step(model, opt, x, y, args.vocab) for x, y in batches[args.warmup:]]
    finally:
        torch_tpu.set_global_eager_mode(torch_tpu.EagerMode.DEFER_NEVER)
    print(f"\n==== {mode.name}: {args.steps} steps profiled, losses {[round(l, 4) for l in losses]}")
    print(prof.key_averages().table(sort_by="device_time_total", row_limit=args.rows))
    dev = [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]
    flushes = collections.Counter(e.name for e in dev if e.name.startswith("flush"))
    busy = sum(e.time_range.elapsed_us() for e in dev) / 1e3
    print(f"device busy {busy:.1f} ms over {len(dev) - sum(flushes.values())} kernels; "
          f"flushes: {dict(flushes) if flushes else 'none (strict)'}")
    if args.trace_dir:
        path = os.path.join(args.trace_dir, f"gpt_{mode.name.lower()}.json")
        prof.export_chrome_trace(path)
        print(f"chrome trace: {path}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--rows", type=int, default=15)
    p.add_argument("--trace-dir", default=None)
    args = p.parse_args()
    for mode in (torch_tpu.EagerMode.DEFER_NEVER, torch_tpu.EagerMode.DEFER_AND_FUSE):
        profile_mode(mode, args)


if __name__ == "__main__":
    main()
