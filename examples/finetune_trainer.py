"""Fine-tune a causal language model with the Hugging Face Trainer on tpu.

Nothing here names the device: with torch_tpu installed, accelerate (and so
the Trainer) picks ``tpu`` as it would pick ``cuda``. The model is a small
GPT-2 built from a config with random weights (no model hub needed) and the
data a synthetic token stream; swap in ``from_pretrained`` and a real
dataset for a real fine-tune.

    python examples/finetune_trainer.py                 # bf16 on tpu
    python examples/finetune_trainer.py --precision fp16
    torchrun --nproc_per_node=2 examples/finetune_trainer.py   # DDP over tpu_dist
    python examples/finetune_trainer.py --check         # and compare with the CPU

``--check`` runs the same fine-tune with ``use_cpu=True`` in a second process
and exits non-zero when the losses differ by more than the precision allows.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

import torch_tpu  # noqa: F401  (registers the tpu device; torch also autoloads it)


class Tokens(torch.utils.data.Dataset):
    """A fixed synthetic corpus: 64 sequences of 32 tokens."""

    def __init__(self, vocab=256, length=32, count=64):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (count, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def fine_tune(precision, use_cpu, steps):
    torch.manual_seed(0)
    # Dropout off: tpu and CPU draw different random streams, and --check
    # compares the two runs step by step.
    model = GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=64, n_embd=128, n_layer=2,
                                       n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
                                       attn_pdrop=0.0))
    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="finetune-"), max_steps=steps, logging_steps=1,
        per_device_train_batch_size=8 // int(os.environ.get("WORLD_SIZE", 1)),
        learning_rate=1e-3, seed=0, report_to=[], save_strategy="no", disable_tqdm=True,
        bf16=precision == "bf16", fp16=precision == "fp16", use_cpu=use_cpu)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens())
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return losses, str(next(trainer.model.parameters()).device)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="bf16")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--check", action="store_true", help="compare the losses with the CPU's")
    p.add_argument("--use-cpu", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    losses, device = fine_tune(a.precision, a.use_cpu, a.steps)
    if a.use_cpu:  # the --check run's second process
        print(json.dumps(losses))
        return 0
    print(f"trained on {device} ({a.precision}): losses {[round(x, 4) for x in losses]}")
    if not a.check:
        return 0
    # accelerate runs no fp16 autocast on the CPU: fp16 is compared with fp32 there.
    cpu_precision = "fp32" if a.precision == "fp16" else a.precision
    run = subprocess.run([sys.executable, __file__, "--use-cpu", "--steps", str(a.steps),
                          "--precision", cpu_precision], capture_output=True, text=True, check=True)
    cpu = json.loads(run.stdout.strip().splitlines()[-1])
    tol = {"fp32": 1e-4, "bf16": 5e-2, "fp16": 5e-3}[a.precision]
    worst = max(abs(x - y) for x, y in zip(losses, cpu))
    print(f"cpu ({cpu_precision}): losses {[round(x, 4) for x in cpu]}; largest difference {worst:.2e}")
    if worst > tol:
        print(f"FAIL: the losses differ by more than {tol}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
