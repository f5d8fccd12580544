"""The fast subset of the model-architecture sweep, for CI.

The issue's key architectures (``model_sweep.KEY_ARCHS``: GPT-2, Llama,
Mistral, Mixtral, Qwen2, Qwen3, Gemma, Phi, BERT, RoBERTa, T5, BART, ViT,
CLIP, Whisper and timm's ResNet, ConvNeXt and Swin), built tiny with random
weights, must give the CPU's outputs on tpu, the CPU's gradients and the
CPU's parameters after one optimizer step, with no CPU fallback in the
forward or the backward. The comparison is the sweep's own
(:func:`torch_tpu.tools.model_sweep.check_arch`), so this test and
``python -m torch_tpu.tools.model_sweep`` cannot drift apart.
"""
import pytest

import torch_tpu
from torch_tpu.tools import model_sweep


@pytest.fixture(autouse=True)
def _silent_fallbacks():
    prev = torch_tpu._C.fallback_mode()
    torch_tpu.set_fallback_mode("silent")
    yield
    torch_tpu.set_fallback_mode(prev)


@pytest.mark.parametrize("arch", model_sweep.KEY_ARCHS)
def test_key_architecture_matches_cpu_natively(arch):
    rec = model_sweep.check_arch(arch)
    assert rec["status"] == "pass", rec
    assert rec["fwd_fallbacks"] == {}, rec["fwd_fallbacks"]
    assert rec.get("bwd_fallbacks") == {}, rec.get("bwd_fallbacks")


def test_shrunk_configs_are_tiny():
    # The shrinker keeps widths, layers and vocabularies small and consistent.
    cfg = model_sweep.tiny_config("llama")
    assert cfg.hidden_size == 32 and cfg.num_hidden_layers == 2
    assert cfg.hidden_size % cfg.num_attention_heads == 0
    assert cfg.num_attention_heads % cfg.num_key_value_heads == 0
    assert cfg.vocab_size <= 1024 and cfg.eos_token_id < cfg.vocab_size
    qwen = model_sweep.tiny_config("qwen2")
    assert len(qwen.layer_types) == qwen.num_hidden_layers
