"""TpuPlatform: vLLM's view of the tpu device (see torch_tpu/vllm/__init__.py)."""

import torch

import torch_tpu  # noqa: F401  (registers the device, torch.tpu and tpu_dist)
from vllm.logger import init_logger
from vllm.platforms.interface import Platform, PlatformEnum

logger = init_logger(__name__)


ATTN_BACKEND_NAME = "TPU_PAGED_ATTN"
ATTN_BACKEND_PATH = "torch_tpu.vllm.attention.TpuPagedAttentionBackend"


def _register_attention_backend() -> None:
    """Adds TPU_PAGED_ATTN to vLLM's backend enum (once per process)."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend
    if ATTN_BACKEND_NAME not in AttentionBackendEnum.__members__:
        register_backend(ATTN_BACKEND_NAME, ATTN_BACKEND_PATH)


_register_attention_backend()


class TpuPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name: str = "tpu"
    device_type: str = "tpu"
    dispatch_key: str = "PrivateUse1"
    dist_backend: str = "tpu_dist"
    device_control_env_var: str = "TPU_VISIBLE_CHIPS"
    simple_compile_backend: str = "tpu"

    @property
    def supported_dtypes(self) -> list:
        return [torch.float32, torch.bfloat16, torch.float16]

    @classmethod
    def import_kernels(cls) -> None:
        """vLLM's compiled kernels (vllm._C*) are CUDA or CPU builds; tpu runs none of them."""

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.tpu.get_device_name(device_id)

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return torch.tpu.mem_get_info(device_id)[1]

    @classmethod
    def mem_get_info(cls, device_id: int = 0):
        return torch.tpu.mem_get_info(device_id)

    @classmethod
    def get_current_memory_usage(cls, device=None) -> float:
        return float(torch.tpu.memory_allocated(device))

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.tpu.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.tpu.manual_seed_all(seed)

    @classmethod
    def synchronize(cls) -> None:
        torch.tpu.synchronize()

    @classmethod
    def empty_cache(cls) -> None:
        torch.tpu.empty_cache()

    @classmethod
    def inference_mode(cls):
        return torch.no_grad()

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return False

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None) -> str:
        if attn_selector_config.use_mla or attn_selector_config.use_sparse:
            raise NotImplementedError("tpu: MLA and sparse attention are not supported")
        return ATTN_BACKEND_PATH

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        return ("vllm.distributed.device_communicators.base_device_communicator."
                "DeviceCommunicatorBase")

    @classmethod
    def get_punica_wrapper(cls) -> str:
        raise NotImplementedError("tpu: LoRA is not supported")

    @classmethod
    def supports_structured_output(cls) -> bool:
        return False

    @classmethod
    def register_triton_kernel_overrides(cls) -> None:
        """PyTorch stand-ins for the Triton kernels the V1 runner launches (there is no
        Triton backend for tpu): only ComputeSlotMappingKernel runs without speculative
        decoding, mamba layers or context parallelism, which this platform does not take."""
        from vllm.triton_utils.dispatcher import register_kernels
        register_kernels({
            "vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel": _compute_slot_mapping,
        })

    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        from vllm.config import CompilationMode
        from vllm.config.compilation import CUDAGraphMode
        parallel = vllm_config.parallel_config
        if parallel.worker_cls == "auto":
            parallel.worker_cls = "torch_tpu.vllm.worker.TpuWorker"
        if parallel.world_size > 1:
            raise NotImplementedError("tpu: tensor/pipeline parallelism is not supported yet")
        cache = vllm_config.cache_config
        if cache is not None and not cache.user_specified_block_size:
            cache.block_size = 16
        # Async scheduling overlaps steps with CUDA streams and events; tpu runs in order.
        vllm_config.scheduler_config.async_scheduling = False
        comp = vllm_config.compilation_config
        if comp.mode != CompilationMode.NONE:
            logger.warning("tpu: vLLM's torch.compile modes are not supported yet; running "
                           "eager (compilation mode %s -> NONE)", comp.mode)
        comp.mode = CompilationMode.NONE
        comp.cudagraph_mode = CUDAGraphMode.NONE
        comp.cudagraph_capture_sizes = []


def _compute_slot_mapping(num_tokens, max_num_tokens, query_start_loc, positions, block_table,
                          block_table_stride, slot_mapping, KV_CACHE_BLOCK_SIZE,
                          TOTAL_CP_WORLD_SIZE=1, TOTAL_CP_RANK=0, CP_KV_CACHE_INTERLEAVE_SIZE=1,
                          PAD_ID=-1, BLOCK_SIZE=1024):
    """slot_mapping[t] = block_table[req(t), pos(t) // bs] * bs + pos(t) % bs for the batch's
    tokens, PAD_ID for the rest (vLLM's ComputeSlotMappingKernel without context parallelism).
    Computed on the host from the step's small index tensors, then copied to slot_mapping."""
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError("tpu: context parallelism is not supported")
    bs = KV_CACHE_BLOCK_SIZE
    qsl = query_start_loc.cpu().long()
    pos = positions[:num_tokens].cpu().long()
    lens = qsl[1:] - qsl[:-1]
    req = torch.repeat_interleave(torch.arange(lens.numel()), lens)[:num_tokens]
    table = block_table.cpu()
    slots = torch.full((max_num_tokens,), PAD_ID, dtype=torch.int64)
    slots[:num_tokens] = table[req, pos // bs].long() * bs + pos % bs
    slot_mapping[:max_num_tokens].copy_(slots.to(slot_mapping.device, slot_mapping.dtype))
