"""Generate images with a diffusers pipeline on tpu.

A DDPM pipeline over a small UNet (random weights from a config: no model
hub needed) moves to tpu with ``.to("tpu")``, as it would to ``"cuda"``.
The sampling noise comes from a CPU generator, so the same seed gives the
same images on every device.

    python examples/diffusers_pipeline.py                   # strict eager
    python examples/diffusers_pipeline.py --mode defer      # DEFER_AND_FUSE
    python examples/diffusers_pipeline.py --check           # and compare with the CPU
    python examples/diffusers_pipeline.py --out images.png

``--check`` runs the pipeline on the CPU too and exits non-zero when any
pixel differs by more than 1e-3.
"""
import argparse
import sys
import time

import torch
from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

import torch_tpu

MODES = {"strict": torch_tpu.EagerMode.DEFER_NEVER, "defer": torch_tpu.EagerMode.DEFER_AND_FUSE}


def make_unet():
    torch.manual_seed(0)
    return UNet2DModel(sample_size=32, in_channels=3, out_channels=3, layers_per_block=1,
                       block_out_channels=(32, 64), norm_num_groups=8,
                       down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                       up_block_types=("AttnUpBlock2D", "UpBlock2D"))


def generate(unet, device, steps, batch, seed):
    pipe = DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=1000)).to(device)
    pipe.set_progress_bar_config(disable=True)
    start = time.perf_counter()
    out = pipe(batch_size=batch, num_inference_steps=steps, output_type="np",
               generator=torch.Generator("cpu").manual_seed(seed))
    return torch.from_numpy(out.images), time.perf_counter() - start


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=MODES, default="strict")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--check", action="store_true", help="compare the images with the CPU's")
    p.add_argument("--out", help="save the images side by side as a PNG")
    a = p.parse_args()
    unet = make_unet()
    with torch_tpu.set_eager_mode(MODES[a.mode]):
        images, seconds = generate(unet, "tpu", a.steps, a.batch, a.seed)
    print(f"tpu ({a.mode}): {tuple(images.shape)} images, {a.steps} steps in {seconds:.2f} s; "
          f"CPU fallbacks: {sum(torch_tpu.fallback_counts().values())}")
    if a.out:
        from PIL import Image

        row = (torch.cat(list(images), dim=1) * 255).round().to(torch.uint8).numpy()
        Image.fromarray(row).save(a.out)
        print(f"saved {a.out}")
    if not a.check:
        return 0
    want, cpu_seconds = generate(unet, "cpu", a.steps, a.batch, a.seed)
    worst = (images - want).abs().max().item()
    print(f"cpu: {cpu_seconds:.2f} s; largest pixel difference {worst:.2e}")
    if worst > 1e-3:
        print("FAIL: the images differ from the CPU's")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
