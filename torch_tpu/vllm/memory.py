"""How many bytes the tpu platform gives vLLM's KV cache (TpuWorker.determine_available_memory).

vLLM's GPU rule reserves ``gpu_memory_utilization`` (default 0.92) of the
chip's memory, less what is in use, and fills it with KV blocks. On the
software chip that memory is the host's: ``torch.tpu.mem_get_info`` reports
a nominal 16 GiB, so the GPU rule would allocate (and zero) ~14 GiB of host
memory for any model, a tiny one included. So, in order:

1. ``kv_cache_memory_bytes`` given: exactly that (vLLM's meaning).
2. ``gpu_memory_utilization`` given, i.e. not vLLM's default: vLLM's rule,
   that fraction of the chip's memory less what is in use.
3. Neither (the default): what the scheduler can fill at once, ``max_num_seqs``
   requests of ``max_model_len`` tokens each plus one block of every layer
   (vLLM's null block), capped by rule 2's budget at the default fraction.
   For a model whose layers share one attention spec that is
   ``max_num_seqs * ceil(max_model_len / block_size) + 1`` blocks: no request
   is ever preempted for lack of blocks, and prefix-cache hits are kept only
   in blocks no running request holds. A long context or many sequences
   reach the cap, and then rule 3 is vLLM's own rule.

vLLM passes its default fraction to the worker whether or not the user typed
it, so ``--gpu-memory-utilization 0.92`` reads as "not given"; pass
``kv_cache_memory_bytes`` (or another fraction) to get a larger cache.
This module imports nothing from vLLM, so the rule is testable without it.
"""

RULE_EXPLICIT = "kv_cache_memory_bytes"
RULE_FRACTION = "gpu_memory_utilization"
RULE_DEMAND = "max_num_seqs x max_model_len"
RULE_DEMAND_CAPPED = "max_num_seqs x max_model_len, capped by gpu_memory_utilization"


def kv_cache_bytes(*, explicit_bytes, utilization, default_utilization, free, total,
                   max_num_seqs, request_bytes, block_bytes):
    """(bytes, rule) for the KV cache, by the rules in this module's docstring.

    explicit_bytes: kv_cache_memory_bytes or None; utilization: the config's
    gpu_memory_utilization and default_utilization vLLM's default for it;
    free, total: the chip's memory (torch.tpu.mem_get_info) after the model is
    loaded; request_bytes: the KV bytes of one request of max_model_len tokens
    over all layers (vLLM's max_memory_usage_bytes); block_bytes: one block of
    every layer. Raises ValueError when rule 2's budget is needed and empty."""
    if explicit_bytes is not None:
        return int(explicit_bytes), RULE_EXPLICIT
    budget = int(total * utilization) - (total - free)
    if budget <= 0:
        raise ValueError(f"tpu: no memory left for the KV cache ({free} of {total} bytes "
                         f"free, gpu_memory_utilization={utilization})")
    if utilization != default_utilization:
        return budget, RULE_FRACTION
    demand = max_num_seqs * request_bytes + block_bytes
    if demand > budget:
        return budget, RULE_DEMAND_CAPPED
    return demand, RULE_DEMAND
