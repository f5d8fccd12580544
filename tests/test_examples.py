"""The copyable examples under examples/ run as a user runs them, and their
own --check (the same work on the CPU, compared) passes: a Trainer fine-tune
in float16 (GradScaler on tpu; the CPU runs float32) and bfloat16, a
diffusers DDPM pipeline in DEFER_AND_FUSE, a two-worker Ray Train job."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(script, *args, **env):
    run = subprocess.run([sys.executable, os.path.join(ROOT, "examples", script), *args],
                         capture_output=True, text=True, timeout=600, cwd=ROOT,
                         env=dict(os.environ, **env))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_finetune_trainer_example_matches_cpu(precision):
    out = _run("finetune_trainer.py", "--check", "--precision", precision, "--steps", "4")
    assert f"trained on tpu:0 ({precision})" in out, out
    assert "largest difference" in out, out


def test_diffusers_pipeline_example_matches_cpu(tmp_path):
    png = tmp_path / "images.png"
    out = _run("diffusers_pipeline.py", "--check", "--mode", "defer", "--steps", "4",
               "--out", str(png))
    assert "CPU fallbacks: 0" in out and "largest pixel difference" in out, out
    assert png.stat().st_size > 0


def test_ray_train_example_trains_on_two_chips_like_one_cpu_process():
    """Two Ray Train workers on distinct chips, DDP over tpu_dist, no CPU
    fallback (set to raise); the example's --check compares the weights with
    one CPU process over the whole batch."""
    out = _run("ray_train.py", "--check", "--epochs", "2", TORCH_TPU_FALLBACK="error")
    assert "worker 0: tpu:0 (chip 0), tpu_dist" in out, out
    assert "worker 1: tpu:0 (chip 1), tpu_dist" in out, out
    assert out.count("CPU fallbacks: 0") == 2 and "largest weight difference" in out, out
