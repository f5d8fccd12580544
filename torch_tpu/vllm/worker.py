"""TpuWorker and TpuModelRunner: vLLM's GPU worker and CPU model runner on the
tpu device. The runner's host-side bookkeeping stays in CPU tensors and is
copied to its tpu twins each step (vLLM's CpuGpuBuffer); the model, its
inputs, the KV cache and the sampler run on tpu."""

import contextlib

import torch

from vllm.config.cache import CacheConfig
from vllm.logger import init_logger
from vllm.platforms import current_platform
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.core.kv_cache_planning import max_memory_usage_bytes
from vllm.v1.worker import cpu_model_runner as _cpu
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.worker_base import CompilationTimes

from torch_tpu.vllm.memory import kv_cache_bytes

logger = init_logger(__name__)


class TpuModelRunner(_cpu.CPUModelRunner):
    def __init__(self, vllm_config, device: torch.device):
        if device.type != "tpu":
            raise ValueError(f"TpuModelRunner needs a tpu device, got {device}")
        # GPUModelRunner makes CUDA streams and events; the CPU runner's wrapper turns them
        # into no-ops (steps run in order on tpu). Unlike CPUModelRunner, the device
        # buffers stay on tpu.
        with _cpu._torch_cuda_wrapper():
            GPUModelRunner.__init__(self, vllm_config, device)
        self.use_cuda_graph = False

    def _sync_device(self) -> None:
        torch.tpu.synchronize(self.device)

    def _to_list(self, sampled_token_ids: torch.Tensor) -> list:
        return sampled_token_ids.cpu().tolist()


class TpuWorker(Worker):
    def init_device(self):
        self.device = torch.device("tpu", self.local_rank)
        torch.tpu.set_device(self.device)
        init_worker_distributed_environment(self.vllm_config, self.rank,
                                            self.distributed_init_method, self.local_rank,
                                            current_platform.dist_backend)
        set_random_seed(self.model_config.seed)
        self.model_runner = TpuModelRunner(self.vllm_config, self.device)

    def _maybe_get_memory_pool_context(self, tag: str):
        if self.vllm_config.model_config.enable_sleep_mode:
            raise NotImplementedError("tpu: sleep mode is not supported")
        return contextlib.nullcontext()

    def sleep(self, level: int = 1) -> None:
        raise NotImplementedError("tpu: sleep mode is not supported")

    def wake_up(self, tags=None) -> None:
        raise NotImplementedError("tpu: sleep mode is not supported")

    def determine_available_memory(self) -> int:
        """Bytes for the KV cache, by torch_tpu/vllm/memory.py's rules: kv_cache_memory_bytes
        when given, else a gpu_memory_utilization the user gave, else (the default) what
        max_num_seqs requests of max_model_len tokens fill, capped by the default fraction."""
        specs = list(self.model_runner.get_kv_cache_spec().values())
        free, total = torch.tpu.mem_get_info(self.device)
        nbytes, rule = kv_cache_bytes(
            explicit_bytes=self.cache_config.kv_cache_memory_bytes,
            utilization=self.cache_config.gpu_memory_utilization,
            default_utilization=CacheConfig.__pydantic_fields__["gpu_memory_utilization"].default,
            free=free, total=total,
            max_num_seqs=self.scheduler_config.max_num_seqs,
            request_bytes=max_memory_usage_bytes(self.vllm_config, specs),
            block_bytes=sum(spec.page_size_bytes for spec in specs))
        logger.info("tpu: %.1f MiB for the KV cache (rule: %s; chip %.1f of %.1f GiB free)",
                    nbytes / 2**20, rule, free / 2**30, total / 2**30)
        return nbytes

    def compile_or_warm_up_model(self) -> CompilationTimes:
        # Eager only (TpuPlatform forces CompilationMode.NONE): nothing to compile.
        set_random_seed(self.model_config.seed)
        return CompilationTimes(language_model=0.0, encoder=0.0)
