"""Run TorchTitan's llama3 debug model on two tpu chips: FSDP2 over tpu_dist.

TorchTitan itself, unmodified, launched as its README says:

    torchrun --nproc_per_node=2 -m torchtitan.train \\
        --module llama3 --config llama3_debugmodel --training.steps 5

TorchTitan picks ``tpu`` as the accelerator (``torch.accelerator``), builds
its FSDP2 mesh on ``tpu_dist`` and runs RoPE's complex math and
``flex_attention`` natively. The debug config reads a tokenizer and the
``c4_test`` dataset from TorchTitan's source tree (``tests/assets``), which
its wheel does not ship; this script writes small stand-ins there (a
byte-level BPE tokenizer and a synthetic corpus) unless ``--assets`` names
a directory that already has them, then launches the run and prints the
losses.

    python examples/torchtitan_debug_run.py            # 5 steps, seeded
    python examples/torchtitan_debug_run.py --check    # and check the run

``--check`` sets ``TORCH_TPU_FALLBACK=error`` (a CPU fallback fails the
run) and exits non-zero unless both ranks log the same losses, starting
near ln(vocab) and falling at every step. TorchTitan cannot run on the CPU,
so the comparison with the CPU is per part: tests/test_complex_ops.py.
"""
import argparse
import json
import math
import os
import random
import re
import socket
import subprocess
import sys
import tempfile


def make_assets(root):
    """Writes root/tests/assets/{tokenizer,c4_test}: stand-ins for the files
    TorchTitan's llama3 debug config reads. Returns the assets directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    assets = os.path.join(root, "tests", "assets")
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8)))
             for _ in range(400)]
    docs = [" ".join(rng.choice(words) for _ in range(rng.randint(200, 600))) for _ in range(200)]
    os.makedirs(os.path.join(assets, "c4_test"), exist_ok=True)
    with open(os.path.join(assets, "c4_test", "data.json"), "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<|begin_of_text|>", "<|end_of_text|>", "<unk>"]
    tok.train_from_iterator(docs, trainers.BpeTrainer(
        vocab_size=2000, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    os.makedirs(os.path.join(assets, "tokenizer"), exist_ok=True)
    tok.save(os.path.join(assets, "tokenizer", "tokenizer.json"))
    with open(os.path.join(assets, "tokenizer", "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": special[0], "eos_token": special[1],
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f)
    return assets


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--assets", help="a directory holding tests/assets (TorchTitan's source tree)")
    p.add_argument("--check", action="store_true", help="fail unless the run trains as expected")
    a = p.parse_args()
    workdir = a.assets or tempfile.mkdtemp(prefix="torchtitan-")
    if not os.path.isdir(os.path.join(workdir, "tests", "assets", "tokenizer")):
        make_assets(workdir)
    env = dict(os.environ)
    if a.check:
        env["TORCH_TPU_FALLBACK"] = "error"
    # Seeded (TorchTitan's initialisation is not) with a one-step warm-up, so
    # every step moves the weights and the losses repeat from run to run.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           "--master_addr=127.0.0.1", f"--master_port={free_port()}", "-m", "torchtitan.train",
           "--module", "llama3", "--config", "llama3_debugmodel",
           "--training.steps", str(a.steps), "--training.seq_len", "256",
           "--training.local_batch_size", "2", "--debug.seed", "0",
           "--lr-scheduler.warmup-steps", "1", "--validator.no-enable", "--checkpoint.no-enable"]
    run = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=900)
    log = re.sub(r"\x1b\[[0-9;]*m", "", run.stdout + run.stderr)
    if run.returncode != 0:
        print(log[-4000:])
        print(f"FAIL: torchrun exited with {run.returncode}")
        return 1
    per_step = {}
    for step, loss in re.findall(r"step:\s+(\d+)\s+\S*loss:\s+([0-9.]+)", log):
        per_step.setdefault(int(step), set()).add(float(loss))
    curve = [min(per_step[s]) for s in sorted(per_step)]
    print(f"device: {'tpu' if 'TPU capacity: torch_tpu' in log else 'not tpu'}; "
          f"losses: {' '.join(f'{x:.5f}' for x in curve)}")
    if not a.check:
        return 0
    problems = []
    if "TPU capacity: torch_tpu" not in log:
        problems.append("TorchTitan did not run on tpu")
    if sorted(per_step) != list(range(1, a.steps + 1)):
        problems.append(f"logged steps {sorted(per_step)}")
    if any(len(v) != 1 for v in per_step.values()):
        problems.append(f"the ranks disagree: {per_step}")
    if not all(math.isfinite(x) for x in curve) or abs(curve[0] - math.log(2048)) > 1.5:
        problems.append("the first loss is not near ln(vocab)")
    if not all(b < a for a, b in zip(curve, curve[1:])) or curve[-1] > curve[0] - 0.05:
        problems.append("the loss does not fall at every step")
    for problem in problems:
        print("FAIL:", problem)
    if not problems:
        print("check: both ranks agree, the loss falls at every step, no CPU fallback")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
