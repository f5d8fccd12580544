"""vLLM serving on tpu through the torch_tpu.vllm platform plugin (issue 26).

A tiny random-weight LlamaForCausalLM and a word-level tokenizer are built
locally (there is no model hub); vLLM's LLM.generate, greedy, on prompts of
different lengths, and `vllm serve`'s /v1/completions must give exactly the
tokens HF generate gives on CPU. The KV cache's default size follows
torch_tpu/vllm/memory.py's rule.

vLLM comes from requirements-vllm.txt, installed by scripts/setup.sh without
its own pins (its wheels pin another torch and transformers), and the plugin's
entry point from pyproject.toml by the editable install of this checkout.
"""

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest
import torch

from torch_tpu.vllm.memory import (RULE_DEMAND, RULE_DEMAND_CAPPED, RULE_EXPLICIT, RULE_FRACTION,
                                   kv_cache_bytes)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vllm is not installed (scripts/setup.sh installs it from requirements-vllm.txt)")

PROMPTS = [
    "w7",
    "w1 w2 w3",
    " ".join(f"w{i}" for i in range(10, 30)),            # spans two 16-token blocks
    " ".join(f"w{(7 * i) % 250}" for i in range(37)),    # three blocks
]
MAX_TOKENS = 20  # decoding crosses block boundaries
MAX_MODEL_LEN, MAX_NUM_SEQS, BLOCK = 128, 4, 16
# One KV block of every layer: 2 layers x (K, V) x 16 tokens x 2 kv heads x head dim 16, fp32.
BLOCK_BYTES = 2 * 2 * BLOCK * 2 * 16 * 4


def _make_model(path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"w{i}": 3 + i for i in range(253)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                  eos_token="</s>")
    tok.save_pretrained(path)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(path)
    return tok, model


def _hf_greedy(tok, model, max_tokens=MAX_TOKENS):
    prompt_ids, out = [], []
    for p in PROMPTS:
        ids = tok(p, return_tensors="pt").input_ids
        with torch.no_grad():
            g = model.generate(ids, max_new_tokens=max_tokens, min_new_tokens=max_tokens,
                               do_sample=False)
        prompt_ids.append(ids[0].tolist())
        out.append(g[0, ids.shape[1]:].tolist())
    return prompt_ids, out


_CHILD = '''
import json, sys
import torch
from vllm import LLM, SamplingParams
from vllm.platforms import current_platform

model_dir, prompts, max_tokens = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
# No kv_cache_memory_bytes, default gpu_memory_utilization: the tpu platform's default size.
llm = LLM(model=model_dir, dtype="float32", max_model_len=128, block_size=16,
          enforce_eager=True, max_num_seqs=4, seed=0)
params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
outs = llm.generate(prompts, params)
# Again: prefix caching now serves the prompts' full blocks, so prefill starts mid-sequence
# (fewer new tokens than context), and the short prompts decode beside it.
again = llm.generate(prompts[::-1], params)[::-1]
runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
ctx = llm.llm_engine.vllm_config.compilation_config.static_forward_context
attn = [m for m in ctx.values() if hasattr(m, "impl")]
storages = {kv.untyped_storage().data_ptr(): kv.untyped_storage().nbytes()
            for kv in runner.kv_caches}
print("@@RESULT@@" + json.dumps(dict(
    platform=type(current_platform).__qualname__,
    device_type=current_platform.device_type,
    dispatch_key=current_platform.dispatch_key,
    dist_backend=current_platform.dist_backend,
    param_devices=sorted({p.device.type for p in runner.model.parameters()}),
    kv_devices=sorted({kv.device.type for kv in runner.kv_caches}),
    kv_written=all(bool(kv.cpu().abs().sum() > 0) for kv in runner.kv_caches),
    num_gpu_blocks=llm.llm_engine.vllm_config.cache_config.num_gpu_blocks,
    kv_bytes=sum(storages.values()),
    impls=sorted({type(m.impl).__qualname__ for m in attn}),
    prompt_ids=[o.prompt_token_ids for o in outs],
    tokens=[list(o.outputs[0].token_ids) for o in outs],
    cached=[o.num_cached_tokens for o in again],
    tokens_again=[list(o.outputs[0].token_ids) for o in again])), flush=True)
'''


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO] + env.get("PYTHONPATH", "").split(os.pathsep))
    env["VLLM_PLUGINS"] = "tpu"                    # only our platform plugin
    return env


@needs_vllm
def test_generate_matches_hf_cpu(tmp_path):
    model_dir = tmp_path / "tiny-llama"
    tok, model = _make_model(model_dir)
    ref_prompt_ids, ref = _hf_greedy(tok, model)

    env = _env()
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"    # engine core in this process, to inspect it
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(_CHILD), str(model_dir),
                        json.dumps(PROMPTS), str(MAX_TOKENS)],
                       capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("@@RESULT@@")]
    assert lines, f"child failed (rc={p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    r = json.loads(lines[0][len("@@RESULT@@"):])

    assert r["platform"] == "TpuPlatform"
    assert (r["device_type"], r["dispatch_key"], r["dist_backend"]) == \
        ("tpu", "PrivateUse1", "tpu_dist")
    assert r["param_devices"] == ["tpu"] and r["kv_devices"] == ["tpu"]
    assert r["impls"] == ["TpuPagedAttentionImpl"]
    assert r["kv_written"]
    # The default KV cache holds max_num_seqs requests of max_model_len tokens plus the null
    # block (memory.py), not 0.92 of the chip's 16 GiB.
    blocks = MAX_NUM_SEQS * (MAX_MODEL_LEN // BLOCK) + 1
    assert r["num_gpu_blocks"] == blocks
    assert r["kv_bytes"] == blocks * BLOCK_BYTES
    assert r["prompt_ids"] == ref_prompt_ids
    assert r["tokens"] == ref
    assert r["cached"][2] >= 16 and r["cached"][3] >= 32, r["cached"]
    assert r["tokens_again"] == ref


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The server is on localhost: a proxy from the environment (http_proxy) must not
# be asked for it.
_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url, timeout=5):
    with _LOCAL.open(url, timeout=timeout) as r:
        return r.status, r.read().decode()


SERVE_MAX_TOKENS = 8
SERVE_UTILIZATION = 0.01   # a fraction the user gives is vLLM's rule (memory.py rule 2)
SERVE_START_TIMEOUT_S = 300


@needs_vllm
def test_serve_completion_matches_hf_cpu(tmp_path):
    """`vllm serve` as a user starts it (engine core in its own process, the default), one
    OpenAI /v1/completions request with all prompts, greedy: tokens and text equal HF
    generate on CPU; the KV cache is the fraction of the chip the user asked for."""
    model_dir = tmp_path / "tiny-llama"
    tok, model = _make_model(model_dir)
    ref_prompt_ids, ref = _hf_greedy(tok, model, SERVE_MAX_TOKENS)

    port = _free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model_dir),
           "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "tiny",
           "--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN),
           "--max-num-seqs", str(MAX_NUM_SEQS), "--enforce-eager", "--seed", "0",
           "--gpu-memory-utilization", str(SERVE_UTILIZATION)]
    log_path = tmp_path / "serve.log"
    base = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log:
        # Its own process group: the API server and its engine-core child end together.
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=_env(), cwd=REPO,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + SERVE_START_TIMEOUT_S
        while True:
            assert proc.poll() is None, \
                f"server exited (rc={proc.returncode}):\n{log_path.read_text()[-6000:]}"
            assert time.monotonic() < deadline, \
                f"no /health in {SERVE_START_TIMEOUT_S} s:\n{log_path.read_text()[-6000:]}"
            try:
                if _get(base + "/health", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)

        body = json.dumps(dict(model="tiny", prompt=PROMPTS, max_tokens=SERVE_MAX_TOKENS,
                               temperature=0, ignore_eos=True, return_token_ids=True)).encode()
        req = urllib.request.Request(base + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with _LOCAL.open(req, timeout=120) as r:
            assert r.status == 200
            resp = json.loads(r.read())
        metrics = _get(base + "/metrics")[1]
    finally:
        for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                pass

    choices = sorted(resp["choices"], key=lambda c: c["index"])
    assert resp["object"] == "text_completion" and len(choices) == len(PROMPTS)
    assert [c["prompt_token_ids"] for c in choices] == ref_prompt_ids
    assert [c["token_ids"] for c in choices] == ref
    # vLLM drops special tokens from text by default and detokenizes after the prompt, so
    # this decoder-less word-level tokenizer's words come with a leading space.
    assert [c["text"].split() for c in choices] == \
        [tok.decode(t, skip_special_tokens=True).split() for t in ref]
    assert resp["usage"]["completion_tokens"] == SERVE_MAX_TOKENS * len(PROMPTS)
    # The user's fraction, not the default rule's 33 blocks: 0.01 of the chip less what the
    # engine holds (weights, a few MiB of buffers) when it sizes the cache.
    info = [ln for ln in metrics.splitlines() if ln.startswith("vllm:cache_config_info")]
    assert info, metrics[-3000:]
    blocks = int(info[0].split('num_gpu_blocks="')[1].split('"')[0])
    total = torch.tpu.mem_get_info()[1]
    assert (int(total * SERVE_UTILIZATION) - (64 << 20)) // BLOCK_BYTES <= blocks \
        <= int(total * SERVE_UTILIZATION) // BLOCK_BYTES, blocks


def test_kv_cache_rule():
    """memory.py's rules, without vLLM: explicit bytes, a user's fraction, the default."""
    gib = 1 << 30
    chip = dict(free=15 * gib, total=16 * gib)       # 1 GiB already in use
    one = dict(max_num_seqs=4, request_bytes=8 * BLOCK_BYTES, block_bytes=BLOCK_BYTES)
    default = 0.92
    demand = (4 * 8 + 1) * BLOCK_BYTES
    fraction = int(16 * gib * 0.5) - gib
    assert kv_cache_bytes(explicit_bytes=1 << 22, utilization=default, default_utilization=default,
                          **chip, **one) == (1 << 22, RULE_EXPLICIT)
    # Explicit bytes win over a fraction too, and need no free memory (vLLM's meaning).
    assert kv_cache_bytes(explicit_bytes=1 << 22, utilization=0.5, default_utilization=default,
                          free=0, total=16 * gib, **one) == (1 << 22, RULE_EXPLICIT)
    assert kv_cache_bytes(explicit_bytes=None, utilization=0.5, default_utilization=default,
                          **chip, **one) == (fraction, RULE_FRACTION)
    assert kv_cache_bytes(explicit_bytes=None, utilization=default, default_utilization=default,
                          **chip, **one) == (demand, RULE_DEMAND)
    # A demand past the default fraction's budget gets that budget (vLLM's own rule).
    big = dict(max_num_seqs=256, request_bytes=gib, block_bytes=BLOCK_BYTES)
    assert kv_cache_bytes(explicit_bytes=None, utilization=default, default_utilization=default,
                          **chip, **big) == (int(16 * gib * default) - gib, RULE_DEMAND_CAPPED)
    with pytest.raises(ValueError, match="no memory left for the KV cache"):
        kv_cache_bytes(explicit_bytes=None, utilization=0.05, default_utilization=default,
                       **chip, **one)
