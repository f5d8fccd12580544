"""safetensors: ``load_file(path, device="tpu")`` and ``safe_open(path, "pt", device="tpu:1")``.

safetensors parses ``device`` in Rust against a fixed list ("cpu", "cuda",
"mps", "npu", "xpu", "xla", "hpu", ...) and rejects "tpu" ("device tpu is
invalid"), while a bare index (``device=1``) is accepted and means the
current accelerator's chip 1, which is tpu here. The wrapper turns every tpu
spelling into that index before the Rust parser sees it.

Retire when safetensors accepts PrivateUse1 device names (``Device::Other``
in ``bindings/python/src/lib.rs``, resolved through
``torch._C._get_privateuse1_backend_name()``).
"""
import functools

import torch

SUPPORTED = ("0.4", "0.9")


def _as_index(device):
    """A tpu device (str, torch.device) as its chip index; others unchanged."""
    if isinstance(device, str) and (device == "tpu" or device.startswith("tpu:")):
        device = torch.device(device)
    if isinstance(device, torch.device) and device.type == "tpu":
        return device.index if device.index is not None else torch.tpu.current_device()
    return device


def patch_package(package) -> None:
    """``safetensors``: its ``safe_open``, which ``load_file`` and
    ``safetensors.torch`` use."""
    from torch_tpu.integrations import replace_everywhere

    original = package.safe_open
    if getattr(original, "_torch_tpu_original", None) is not None:
        return

    @functools.wraps(original, assigned=("__module__", "__name__", "__qualname__", "__doc__"))
    def safe_open(filename, framework, device="cpu", **kwargs):
        return original(filename, framework, device=_as_index(device), **kwargs)

    safe_open._torch_tpu_original = original
    package.safe_open = safe_open
    replace_everywhere(original, safe_open)


def patch_torch(st) -> None:
    """``safetensors.torch``: rebinds the ``safe_open`` it imported by name."""
    import safetensors

    if getattr(st.safe_open, "_torch_tpu_original", None) is None:
        st.safe_open = safetensors.safe_open
