"""torch itself: the places where a torch 2.14 API checks a fixed list of
device types and so refuses ``tpu`` although the op runs there.

* ``torch.nn.attention.flex_attention``: ``_validate_device`` accepts only
  cuda, cpu, xpu, hpu and mps ("FlexAttention is only supported on CUDA,
  CPU, HPU, or MPS devices"). Eager flex_attention runs the higher-order
  op's dense implementation, made of ordinary ATen ops, forward and backward
  (its autograd formula is device-independent), so it runs natively on
  tpu; under ``torch.compile(backend="tpu")`` the op reaches our compiler
  as the same composition. TorchTitan's models use it for every attention.

Retire when torch's allowlist admits the PrivateUse1 backend (the check
consulting ``torch._C._get_privateuse1_backend_name()``, or
``torch.accelerator``, instead of a literal set).
"""
import functools

SUPPORTED = ("2.14", "2.15")


def patch_flex_attention(module) -> None:
    """``torch.nn.attention.flex_attention``: its device check passes tpu."""
    original = module._validate_device
    if getattr(original, "_torch_tpu_original", None) is not None:
        return

    @functools.wraps(original)
    def _validate_device(query, key, value):
        if query.device.type == "tpu":
            return  # forward and backward both run on tpu
        return original(query, key, value)

    _validate_device._torch_tpu_original = original
    module._validate_device = _validate_device
