"""uint8 image resampling: tpu vs PyTorch CPU, side by side in one run.

Cases: bilinear 2x upsampling of a batch of 8 RGB 224x224 images, bilinear
and antialiased bilinear/bicubic downsampling of an RGB 1024x1024 image
(channels-first and channels-last), bilinear 64 -> 224 of 16 small images.
Each round times tpu then CPU (alternating); the table shows the best round.

Prints a table and writes bench/results/upsample_u8.json.
Usage: python bench/bench_upsample_u8.py [--rounds N]
"""
import argparse

import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401
from side_by_side import compare, report

CASES = [
    ("bilinear 8x3x224^2 -> 448^2", (8, 3, 224, 224), (448, 448), "bilinear", False, False),
    ("bilinear 3x1024^2 -> 512^2", (1, 3, 1024, 1024), (512, 512), "bilinear", False, False),
    ("bilinear 3x1024^2 -> 512^2 CL", (1, 3, 1024, 1024), (512, 512), "bilinear", False, True),
    ("bilinear aa 3x1024^2 -> 256^2", (1, 3, 1024, 1024), (256, 256), "bilinear", True, False),
    ("bicubic aa 3x1024^2 -> 256^2", (1, 3, 1024, 1024), (256, 256), "bicubic", True, False),
    ("bilinear 16x3x64^2 -> 224^2", (16, 3, 64, 64), (224, 224), "bilinear", False, False),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rows = []
    g = torch.Generator().manual_seed(0)
    for name, shape, size, mode, aa, cl in CASES:
        x = torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)
        if cl:
            x = x.contiguous(memory_format=torch.channels_last)
        xs = {"cpu": x, "tpu": x.to("tpu")}
        calls = {d: (lambda d=d: F.interpolate(xs[d], size=size, mode=mode, antialias=aa,
                                               align_corners=False)) for d in xs}
        rows.append(compare(name, calls, args.rounds))
    report(rows, "upsample_u8", args.rounds, width=34)


if __name__ == "__main__":
    main()
