"""accelerate (and so the Hugging Face Trainer): tpu as the accelerator.

accelerate 1.x picks its device, its distributed back-end and its memory
budget from a fixed list of known back-ends (cuda, mps, npu, xpu, hpu, ...),
so on tpu it trains on the CPU, silently, or crashes where transformers has
already put the model on ``tpu:0``. Six functions are patched:

* ``PartialState.default_device``: ``tpu`` when no other accelerator is.
* ``PartialState._prepare_backend``: under torchrun (``LOCAL_RANK`` set),
  back-end ``"cpu:gloo,tpu:tpu_dist"`` (tpu tensors through tpu_dist, the
  CPU tensors accelerate broadcasts, such as RNG states, through Gloo) with
  ``DistributedType.MULTI_CPU``, the one distributed type whose code paths
  are device-neutral: DDP without ``device_ids``, process group created by
  accelerate itself.
* ``PartialState.set_device``: with that back-end, ``tpu:LOCAL_RANK``.
* ``utils.modeling.get_max_memory``: tpu chips by index, their free memory
  from ``torch.tpu.mem_get_info``, and ``"tpu:N"``/``torch.device`` keys in a
  user's ``max_memory`` (``device_map="auto"``, ``infer_auto_device_map``).
* ``utils.modeling.get_grad_scaler``: ``torch.amp.GradScaler("tpu")`` when
  the state's device is tpu (it would build a CUDA scaler).
* ``Accelerator.__init__``: float16 mixed precision refuses devices outside
  a literal tuple (``("xpu", "cuda", ...)``); the function is rebuilt with
  ``"tpu"`` added to that one constant and nothing else changed. The patch
  is refused (``status()`` says so) unless exactly one such tuple is found.

Retire when accelerate dispatches on ``torch.accelerator`` (the device-generic
API of torch 2.6+) in those six places; the proposed upstream change is in
``docs/upstream/accelerate-tpu.patch``.
"""
import functools
import os
import types

import torch

SUPPORTED = ("1.10", "1.16")

TPU_BACKEND = "cpu:gloo,tpu:tpu_dist"


def _tpu_available() -> bool:
    return torch.tpu.is_available() and torch.tpu.device_count() > 0


def _patch(owner, name, make):
    original = owner.__dict__[name]
    if getattr(original, "_torch_tpu_original", None) is not None:
        return original  # applied already
    wrapper = make(original)
    wrapper._torch_tpu_original = original
    setattr(owner, name, wrapper)
    return wrapper


def _default_device(original_property):
    fget = original_property.fget

    @functools.wraps(fget)
    def default_device(self):
        device = fget(self)
        if device.type == "cpu" and _tpu_available():
            return torch.device("tpu", torch.tpu.current_device())
        return device

    default_device._torch_tpu_original = original_property
    return property(default_device)


def _prepare_backend(original):
    @functools.wraps(original)
    def _prepare_backend(self, cpu=False, sagemaker_dp=False, backend=None):
        from accelerate.utils import DistributedType

        chosen, distributed_type = original(self, cpu, sagemaker_dp, backend)
        under_launcher = int(os.environ.get("LOCAL_RANK", -1)) != -1
        wants_tpu = backend is None or "tpu_dist" in backend
        if distributed_type == DistributedType.NO and under_launcher and not cpu and wants_tpu \
                and _tpu_available():
            return backend or TPU_BACKEND, DistributedType.MULTI_CPU
        return chosen, distributed_type

    return _prepare_backend


def _set_device(original):
    @functools.wraps(original)
    def set_device(self):
        if self.device is None and self.backend and "tpu_dist" in self.backend:
            index = self.local_process_index % torch.tpu.device_count()
            self.device = torch.device("tpu", index)
            torch.tpu.set_device(self.device)
            return
        original(self)

    return set_device


def _tpu_key(key):
    """A ``max_memory`` key naming a tpu chip, as its index; others unchanged."""
    if isinstance(key, str) and (key == "tpu" or key.startswith("tpu:")):
        key = torch.device(key)
    if isinstance(key, torch.device) and key.type == "tpu":
        return key.index if key.index is not None else 0
    return key


def _get_max_memory(original, convert_file_size_to_int):
    @functools.wraps(original)
    def get_max_memory(max_memory=None):
        if not _tpu_available() or torch.cuda.is_available():
            return original(max_memory)
        if max_memory is None:
            import psutil

            budget = {i: torch.tpu.mem_get_info(i)[0] for i in range(torch.tpu.device_count())}
            budget["cpu"] = psutil.virtual_memory().available
            return budget
        budget = {}
        for key, value in max_memory.items():
            key = _tpu_key(key)
            budget[key] = convert_file_size_to_int(value) if isinstance(value, str) else value
        chips = sorted(k for k in budget if isinstance(k, int))
        count = torch.tpu.device_count()
        for k in chips:
            if not 0 <= k < count:
                raise ValueError(f"Device tpu:{k} is not available: this process has {count} tpu chips")
        order = chips + [k for k in ("cpu", "disk") if k in budget]
        for k in budget:
            if k not in order:
                raise ValueError(f"Device {k} is not recognized, available devices are integers or "
                                 "'tpu:N' (tpu chips), 'cpu' and 'disk'")
        return {k: budget[k] for k in order}

    return get_max_memory


def _on_tpu_state() -> bool:
    from accelerate.state import AcceleratorState

    device = getattr(AcceleratorState(), "device", None)
    return device is not None and device.type == "tpu"


def _get_grad_scaler(original):
    @functools.wraps(original)
    def get_grad_scaler(distributed_type=None, **kwargs):
        if _on_tpu_state() and not torch.cuda.is_available():
            return torch.amp.GradScaler("tpu", **kwargs)
        return original(distributed_type, **kwargs)

    return get_grad_scaler


# The literal in Accelerator.__init__ naming the devices fp16 accepts.
_FP16_DEVICE_MARKERS = {"cuda", "xpu", "mps"}


def _fp16_accepts_tpu(init):
    """``init`` rebuilt with ``"tpu"`` added to its fp16 device tuple."""
    code = init.__code__
    consts = list(code.co_consts)
    found = [i for i, c in enumerate(consts)
             if isinstance(c, tuple) and _FP16_DEVICE_MARKERS <= set(c)]
    if len(found) != 1:
        raise RuntimeError("Accelerator.__init__: expected one fp16 device tuple, "
                           f"found {len(found)}")
    if "tpu" not in consts[found[0]]:
        consts[found[0]] = consts[found[0]] + ("tpu",)
    rebuilt = types.FunctionType(code.replace(co_consts=tuple(consts)), init.__globals__,
                                 init.__name__, init.__defaults__, init.__closure__)
    rebuilt.__kwdefaults__ = init.__kwdefaults__
    return functools.update_wrapper(rebuilt, init)


def patch_state(state_module) -> None:
    """``accelerate.state``: the device, back-end and distributed type."""
    state = state_module.PartialState
    prop = state.__dict__["default_device"]
    if getattr(prop.fget, "_torch_tpu_original", None) is None:
        state.default_device = _default_device(prop)
    _patch(state, "_prepare_backend", _prepare_backend)
    _patch(state, "set_device", _set_device)


def patch_modeling(modeling) -> None:
    """``accelerate.utils.modeling``: the memory budget of ``device_map="auto"``."""
    from torch_tpu.integrations import replace_everywhere

    original = modeling.get_max_memory
    if getattr(original, "_torch_tpu_original", None) is None:
        patched = _get_max_memory(original, modeling.convert_file_size_to_int)
        patched._torch_tpu_original = original
        modeling.get_max_memory = patched
        replace_everywhere(original, patched)
    original = modeling.get_grad_scaler
    if getattr(original, "_torch_tpu_original", None) is None:
        patched = _get_grad_scaler(original)
        patched._torch_tpu_original = original
        modeling.get_grad_scaler = patched
        replace_everywhere(original, patched)


def patch_accelerator(accelerator_module) -> None:
    """``accelerate.accelerator``: float16 mixed precision (GradScaler) on tpu."""
    _patch(accelerator_module.Accelerator, "__init__", _fp16_accepts_tpu)
