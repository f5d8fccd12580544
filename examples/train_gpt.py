"""The main job: train a small GPT-style language model on tpu, check it
against the same run on the CPU, then generate tokens.

A program moves to tpu by its device string alone: the model, optimizer and
training loop below are plain PyTorch, run once with device="tpu" and once
with device="cpu" from identical initial weights.

Prints the loss per step on both devices (and their difference), training and
generation throughput on tpu, peak device memory and the CPU-fallback count.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu


class Block(nn.Module):
    def __init__(self, dim, heads, max_len):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)
        mask = torch.ones(max_len, max_len, dtype=torch.bool).triu(1)
        self.register_buffer("causal", mask, persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        att = att.masked_fill(self.causal[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, dim, heads, layers, max_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, max_len) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.register_buffer("positions", torch.arange(max_len), persistent=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(self.positions[: idx.shape[1]])
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def synthetic_batches(steps, batch, seq, vocab, seed=0):
    """Sequences following x[i+1] = (5 * x[i] + 3) mod vocab, with noise."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        start = torch.randint(0, vocab, (batch, 1), generator=g)
        seqs = [start]
        for _ in range(seq):
            seqs.append((seqs[-1] * 5 + 3) % vocab)
        data = torch.cat(seqs, dim=1)
        noise = torch.rand(data.shape, generator=g) < 0.05
        data = torch.where(noise, torch.randint(0, vocab, data.shape, generator=g), data)
        yield data[:, :-1], data[:, 1:]


def train(model, device, args):
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, foreach=False)
    losses = []
    t0 = time.perf_counter()
    for x, y in synthetic_batches(args.steps, args.batch, args.seq, args.vocab):
        x, y = x.to(device), y.to(device)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    elapsed = time.perf_counter() - t0
    return losses, args.steps * args.batch * args.seq / elapsed


@torch.no_grad()
def generate(model, device, prompt, new_tokens):
    idx = prompt.to(device)
    t0 = time.perf_counter()
    for _ in range(new_tokens):
        logits = model(idx[:, -model.positions.shape[0]:])
        nxt = logits[:, -1, :].argmax(dim=-1, keepdim=True)
        idx = torch.cat([idx, nxt], dim=1)
    out = idx.cpu()
    return out, new_tokens * prompt.shape[0] / (time.perf_counter() - t0)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--new-tokens", type=int, default=32)
    args = p.parse_args()

    torch.manual_seed(0)
    reference = GPT(args.vocab, args.dim, args.heads, args.layers, args.seq)
    cpu_model = GPT(args.vocab, args.dim, args.heads, args.layers, args.seq)
    cpu_model.load_state_dict(reference.state_dict())
    defer_model = GPT(args.vocab, args.dim, args.heads, args.layers, args.seq)
    defer_model.load_state_dict(reference.state_dict())
    print(f"torch {torch.__version__}, torch_tpu {torch_tpu.__version__}, "
          f"device {torch.tpu.get_device_name()}, accelerator "
          f"{torch.accelerator.current_accelerator()}")
    print(f"model: {sum(p.numel() for p in reference.parameters()) / 1e6:.2f}M parameters, "
          f"{args.layers} layers, dim {args.dim}, vocab {args.vocab}, seq {args.seq}")

    torch_tpu.reset_counts()
    torch.tpu.reset_peak_memory_stats()
    tpu_losses, tpu_tps = train(reference, "tpu", args)
    strict_peak = torch.tpu.max_memory_allocated()
    reference.zero_grad(set_to_none=True)  # the deferred run's baseline: this model's weights
    cpu_losses, cpu_tps = train(cpu_model, "cpu", args)
    # The same training in DEFER_AND_FUSE (global: backward runs on autograd's thread).
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    torch_tpu.reset_defer_metrics()
    torch_tpu.set_global_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE)
    try:
        defer_losses, defer_tps = train(defer_model, "tpu", args)
    finally:
        torch_tpu.set_global_eager_mode(torch_tpu.EagerMode.DEFER_NEVER)
    defer_peak = torch.tpu.max_memory_allocated() - base
    m = torch_tpu.defer_metrics()
    print(f"{'step':>4} {'loss tpu':>10} {'loss cpu':>10} {'|diff|':>9}")
    worst = 0.0
    for i, (a, b) in enumerate(zip(tpu_losses, cpu_losses)):
        worst = max(worst, abs(a - b))
        print(f"{i:>4} {a:>10.5f} {b:>10.5f} {abs(a - b):>9.2e}")
    print(f"train: {tpu_tps:,.0f} tokens/s on tpu, {cpu_tps:,.0f} tokens/s on cpu")
    defer_diff = max(abs(a - b) for a, b in zip(defer_losses, tpu_losses))
    print(f"DEFER_AND_FUSE: {defer_tps:,.0f} tokens/s ({defer_tps / tpu_tps:.2f}x strict), "
          f"peak {defer_peak / 2**20:.1f} MiB vs {strict_peak / 2**20:.1f} MiB strict, "
          f"max |loss diff| vs strict {defer_diff:.1e}; {m['flushes']} flushes, "
          f"{m['programs_compiled']} programs compiled, {m['cache_hits']} cache hits, "
          f"{m['fused_kernels']} fused kernels, {m['elided_buffers']} intermediates elided")

    prompt = torch.tensor([[1, 8, 43]])
    out_tpu, gen_tps = generate(reference, "tpu", prompt, args.new_tokens)
    out_cpu, _ = generate(cpu_model, "cpu", prompt, args.new_tokens)
    print(f"generate: {gen_tps:,.1f} tokens/s on tpu; tokens {out_tpu[0, :16].tolist()}...")
    print(f"generated tokens equal on tpu and cpu: {torch.equal(out_tpu, out_cpu)}")
    peak = torch.tpu.max_memory_allocated()
    fallbacks = torch_tpu.fallback_counts()
    print(f"peak device memory: {peak / 2**20:.1f} MiB")
    print(f"CPU fallbacks: {sum(fallbacks.values())} calls {fallbacks if fallbacks else ''}")
    ok = (worst < 1e-3 * max(1.0, max(cpu_losses)) and tpu_losses[-1] < tpu_losses[0]
          and defer_diff < 1e-4 * max(1.0, max(tpu_losses)))
    print("RESULT:", "OK" if ok else "MISMATCH", f"(max |loss diff| {worst:.2e})")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
