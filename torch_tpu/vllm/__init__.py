"""vLLM platform plugin for the tpu device (issue 26).

vLLM (0.33) finds it through the ``vllm.platform_plugins`` entry point
``tpu = torch_tpu.vllm:register`` (pyproject.toml); ``VLLM_PLUGINS=tpu``
makes it the only plugin vLLM loads. The pieces, each vLLM's CPU one moved
to the tpu device:

- platform.py: ``TpuPlatform`` (device_type "tpu", dispatch key
  PrivateUse1, dist backend tpu_dist, TPU_VISIBLE_CHIPS, memory from
  torch.tpu), the config it forces (eager, no CUDA graphs, no async
  scheduling, one chip), and the PyTorch stand-ins for the runner's Triton
  kernels;
- attention.py: ``TpuPagedAttentionBackend``, whose KV cache writes and
  attention are torch.ops.tpu.paged_kv_write_ / paged_attention;
- worker.py: ``TpuWorker`` and ``TpuModelRunner`` (model, inputs, KV cache
  and sampler on tpu);
- memory.py: the KV cache's size when the user gives none (what
  ``max_num_seqs`` requests of ``max_model_len`` tokens fill, not 0.92 of the
  chip's memory, which on the software chip is the host's).

Installation: scripts/setup.sh installs vLLM 0.33.0 and the packages its
paths import from requirements-vllm.txt with --no-deps (vLLM's wheels pin
torch 2.14.0, transformers < 5.21 and CUDA-only packages, which would
replace this project's pins). vLLM's compiled extensions (CUDA builds) are
not loaded: nothing here needs them.
"""


def register():
    """Entry point of vllm.platform_plugins: TpuPlatform's qualname, or None with no chip."""
    import torch

    import torch_tpu  # noqa: F401  (an import error is vLLM's to report)
    if torch.tpu.device_count() < 1:
        return None
    return "torch_tpu.vllm.platform.TpuPlatform"
