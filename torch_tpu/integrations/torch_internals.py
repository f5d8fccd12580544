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

And one place where torch hangs instead of failing, on every backend:

* ``torch.distributed.rendezvous._create_c10d_store``: under ``torchrun
  --master_port=0`` the agent hosts its store on a free port but hands the
  workers ``MASTER_PORT=0``; with ``TORCHELASTIC_USE_AGENT_STORE`` each worker
  then connects to port 0 and retries until the store timeout (minutes; Gloo
  on the CPU hangs the same way), pytorch/pytorch#130656. The patch raises a
  ValueError naming the cause and the launch that works
  (``--rdzv-backend=c10d --rdzv-endpoint=HOST:0``). Retire when torchrun
  exports the port its agent store bound.
"""
import functools
import os

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


def patch_rendezvous(module) -> None:
    """``torch.distributed.rendezvous``: port 0 of torchrun's agent store fails
    at once instead of hanging."""
    original = module._create_c10d_store
    if getattr(original, "_torch_tpu_original", None) is not None:
        return

    @functools.wraps(original)
    def _create_c10d_store(hostname, port, rank, world_size, timeout, use_libuv=True):
        if port == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" \
                and os.environ.get("MASTER_PORT") == "0":
            raise ValueError(
                "MASTER_PORT=0 under torchrun: the launcher's store listens on another port that "
                "it does not pass on, so every rank would wait for it until the timeout "
                "(pytorch/pytorch#130656). Launch with --rdzv-backend=c10d "
                "--rdzv-endpoint=HOST:0 to let torchrun pick a free port, or pass a free "
                "--master_port.")
        return original(hostname, port, rank, world_size, timeout, use_libuv)

    _create_c10d_store._torch_tpu_original = original
    module._create_c10d_store = _create_c10d_store
