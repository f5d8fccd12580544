"""uint8 bilinear resampling (upsample_bilinear2d, _upsample_bilinear2d_aa,
_upsample_bicubic2d_aa): (the OpInfo entries that reach them:
test_opinfo_native.py) (b) a seeded sweep of shapes, scale factors,
align_corners, layouts and modes is bit-for-bit CPU's result, (c) the shapes
left to CPU (upsample.c's header) give CPU's result through the fallback."""
import random

import pytest
import torch
import torch.nn.functional as F

import torch_tpu


class _error_mode:
    def __enter__(self):
        self.prev = torch_tpu._C.fallback_mode()
        torch_tpu.set_fallback_mode("error")
        torch_tpu.reset_counts()

    def __exit__(self, *exc):
        torch_tpu.set_fallback_mode(self.prev)


def _cases(seed, n):
    rnd = random.Random(seed)
    for _ in range(n):
        mode, aa = rnd.choice([("bilinear", False), ("bilinear", True), ("bicubic", True)])
        c = rnd.choice([1, 2, 3, 4])
        shape = (rnd.choice([1, 2]), c, rnd.randint(2, 30), rnd.randint(2, 30))
        kw = dict(mode=mode, align_corners=rnd.random() < 0.4, antialias=aa)
        if rnd.random() < 0.5:
            kw["scale_factor"] = (rnd.choice([0.5, 0.7, 1.0, 1.3, 2.0, 3.1]),
                                  rnd.choice([0.4, 1.0, 1.5, 2.0, 3.7]))
            kw["recompute_scale_factor"] = False
        else:
            kw["size"] = (rnd.randint(1, 40), rnd.randint(1, 40))
        yield shape, rnd.choice(["contiguous", "channels_last", "strided"]), kw


@pytest.mark.parametrize("seed", range(4))
def test_bit_exact_sweep(seed):
    torch.manual_seed(seed)
    checked = differs_from_float = 0
    for shape, layout, kw in _cases(seed, 60):
        x = torch.randint(0, 256, shape, dtype=torch.uint8)
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        elif layout == "strided":
            x = torch.randint(0, 256, shape[:3] + (2 * shape[3],), dtype=torch.uint8)[..., ::2]
        try:
            want = F.interpolate(x, **kw)
        except RuntimeError:
            continue  # e.g. a scale factor giving an empty output
        with _error_mode():
            got = F.interpolate(x.to("tpu"), **kw).cpu()
        assert torch_tpu.fallback_counts() == {}
        assert torch.equal(got, want), (shape, layout, kw)
        fl = F.interpolate(x.double(), **kw).round().clamp(0, 255).to(torch.uint8)
        differs_from_float += not torch.equal(fl, want)
        checked += 1
    assert checked >= 40
    assert differs_from_float > 0  # the cases exercise CPU's integer rounding


def test_left_to_cpu_shapes():
    """>4 channels to width 1 (CPU's values follow its own path) and 3
    channels to 1 x 1 (CPU raises): the fallback gives CPU's behaviour."""
    x = torch.randint(0, 256, (1, 5, 6, 5), dtype=torch.uint8)
    torch_tpu.reset_counts()
    got = F.interpolate(x.to("tpu"), size=(7, 1), mode="bilinear").cpu()
    assert torch.equal(got, F.interpolate(x, size=(7, 1), mode="bilinear"))
    assert torch_tpu.fallback_counts()
    x3 = torch.randint(0, 256, (1, 3, 6, 5), dtype=torch.uint8)
    with pytest.raises(RuntimeError):
        F.interpolate(x3, size=(1, 1), mode="bilinear")
    with pytest.raises(RuntimeError):
        F.interpolate(x3.to("tpu"), size=(1, 1), mode="bilinear").cpu()
