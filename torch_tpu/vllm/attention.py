"""TpuPagedAttentionBackend: vLLM attention over a paged KV cache, on
torch.ops.tpu.paged_kv_write_ and torch.ops.tpu.paged_attention
(torch_tpu/paged_attention.py says what they compute).

vLLM hands each layer a cache whose logical shape is
[num_blocks, num_kv_heads, block_size, 2 * head_size] (keys in the first
head_size channels, values in the rest), laid out physically as
supported_kv_cache_layouts() asks ([num_blocks, block_size, heads, 2D]).
The ops take [num_blocks, block_size, heads, head_size] with any strides, so
the key and value caches are strided views of that one tensor.
"""

from dataclasses import dataclass
from typing import ClassVar

import torch

import torch_tpu.paged_attention  # noqa: F401  (CPU impls and fake kernels of the ops)
from vllm.v1.attention.backend import (AttentionBackend, AttentionImpl, AttentionMetadataBuilder,
                                       AttentionType, CommonAttentionMetadata)
from vllm.v1.kv_cache_interface import KVCacheLayout


class TpuPagedAttentionBackend(AttentionBackend):
    forward_includes_kv_cache_update: bool = False
    supported_dtypes: ClassVar[list] = [torch.float32, torch.bfloat16, torch.float16]
    supported_kv_cache_dtypes: ClassVar[list] = ["auto"]

    @staticmethod
    def get_name() -> str:
        return "TPU_PAGED_ATTN"

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return [d for d in range(8, 513, 8)]

    @classmethod
    def supported_kv_cache_layouts(cls):
        return (KVCacheLayout.LBNHC,)

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER

    @staticmethod
    def get_impl_cls():
        return TpuPagedAttentionImpl

    @staticmethod
    def get_builder_cls():
        return TpuPagedAttentionMetadataBuilder


@dataclass
class TpuPagedAttentionMetadata:
    num_actual_tokens: int
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    causal: bool = True


class TpuPagedAttentionMetadataBuilder(AttentionMetadataBuilder[TpuPagedAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> TpuPagedAttentionMetadata:
        m = common_attn_metadata
        if not isinstance(m.causal, bool):
            raise NotImplementedError("tpu paged attention: per-token causality is not supported")
        n = m.num_reqs
        return TpuPagedAttentionMetadata(
            num_actual_tokens=m.num_actual_tokens,
            query_start_loc=m.query_start_loc[:n + 1],
            seq_lens=m.seq_lens[:n],
            block_table=m.block_table_tensor[:n],
            slot_mapping=m.slot_mapping[:m.num_actual_tokens],
            causal=m.causal)


def _split(kv_cache: torch.Tensor, head_size: int):
    """[blocks, heads, block_size, 2D] (any strides) -> key, value [blocks, block_size, heads, D]."""
    kv = kv_cache.transpose(1, 2)
    return kv[..., :head_size], kv[..., head_size:]


class TpuPagedAttentionImpl(AttentionImpl):
    def __init__(self, num_heads, head_size, scale, num_kv_heads, alibi_slopes, sliding_window,
                 kv_cache_dtype, logits_soft_cap=None, attn_type=AttentionType.DECODER,
                 kv_sharing_target_layer_name=None, sinks=None):
        if alibi_slopes is not None or sinks is not None:
            raise NotImplementedError("tpu paged attention: ALiBi and sinks are not supported")
        if attn_type != AttentionType.DECODER:
            raise NotImplementedError(f"tpu paged attention: {attn_type} attention is not "
                                      "supported")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.sliding_window = -1 if sliding_window is None else int(sliding_window)
        self.softcap = float(logits_soft_cap or 0.0)
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.attn_type = attn_type

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping) -> None:
        key_cache, value_cache = _split(kv_cache, self.head_size)
        n = slot_mapping.shape[0]
        torch.ops.tpu.paged_kv_write_(key[:n], value[:n], key_cache, value_cache, slot_mapping)

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output,
                output_scale=None, output_block_scale=None):
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("tpu paged attention: fused output quantization")
        if attn_metadata is None:  # profiling run
            return output
        m = attn_metadata
        t = m.num_actual_tokens
        key_cache, value_cache = _split(kv_cache, self.head_size)
        out = torch.ops.tpu.paged_attention(
            query[:t], key_cache, value_cache, m.query_start_loc, m.seq_lens, m.block_table,
            self.scale, m.causal, self.sliding_window, self.softcap)
        output[:t].copy_(out.view(output[:t].shape))
        return output
