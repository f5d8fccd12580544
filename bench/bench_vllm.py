"""Batched offline generation: vLLM on tpu (the torch_tpu.vllm platform
plugin, paged KV cache and native paged attention) against Hugging Face
`generate()` on tpu and on PyTorch CPU, in one process, rounds alternating.

The model is a Llama-shaped decoder with random weights built from a config
(there is no model hub) and a word-level tokenizer, saved to a temporary
directory; default 8 layers x 512 hidden (8 heads, 4 KV heads), vocab 8,192,
about 30M parameters. Every run generates `--new` tokens greedily for each of
`--prompts` prompts of 16 to 64 tokens (ignore_eos / min_new_tokens, so all
runs produce the same number of tokens); HF takes the prompts as one
left-padded batch with its dynamic KV cache. Throughput = generated tokens /
wall seconds of the whole call (prefill included), best of `--rounds`.
vLLM's own CPU backend is not a column: its CPU kernels ship only in vLLM's
CPU builds, which are built against other torch versions than this
project's (the PyPI wheel is the CUDA build).

Peers run as a user would run them: HF at PyTorch's default thread settings,
vLLM with the torch thread count vLLM sets for serving (1).
Prints the load average before and after and the matrix unit's path.

Usage: PYTHONPATH=. python bench/bench_vllm.py [--dtype float32|bfloat16]
       [--prompts 32] [--new 128] [--rounds 3] [--layers 8] [--hidden 512]
"""
import argparse
import copy
import json
import os
import tempfile
import time

os.environ.setdefault("VLLM_PLUGINS", "tpu")                  # only our platform plugin
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine in this process

import torch  # noqa: E402

import torch_tpu  # noqa: E402,F401

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def build_model(path, layers, hidden, vocab):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    words = {"<pad>": 0, "<s>": 1, "</s>": 2}
    words.update({f"w{i}": 3 + i for i in range(vocab - 3)})
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<pad>", pad_token="<pad>",
                                  bos_token="<s>", eos_token="</s>", padding_side="left")
    tok.save_pretrained(path)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 11 // 4,
                      num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=4,
                      max_position_embeddings=512, bos_token_id=1, eos_token_id=2,
                      pad_token_id=0, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(path)
    return tok, model


def make_prompts(n, vocab):
    g = torch.Generator().manual_seed(1)
    prompts = []
    for i in range(n):
        length = 16 + (i * 37) % 49  # 16..64 tokens
        ids = torch.randint(3, vocab - 3, (length,), generator=g)
        prompts.append(" ".join(f"w{int(t)}" for t in ids))
    return prompts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", choices=DTYPES, default="float32")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=8192)
    a = ap.parse_args()
    dtype = DTYPES[a.dtype]
    from vllm import LLM, SamplingParams

    load0 = os.getloadavg()
    default_threads = torch.get_num_threads()
    tmp = tempfile.mkdtemp(prefix="bench_vllm_")
    tok, base = build_model(tmp, a.layers, a.hidden, a.vocab)
    prompts = make_prompts(a.prompts, a.vocab)
    params = sum(p.numel() for p in base.parameters())
    max_len = 64 + a.new + 16
    llm = LLM(model=tmp, dtype=a.dtype, max_model_len=max_len, block_size=16,
              enforce_eager=True, max_num_seqs=a.prompts, seed=0,
              # every sequence's whole context, keys and values, 4 KV heads, float32 size
              kv_cache_memory_bytes=2 * a.prompts * max_len * a.layers * 2 * 4 * (a.hidden // 8) * 4)
    serving_threads = torch.get_num_threads()  # vLLM sets 1 for serving (torch_utils.py)
    sampling = SamplingParams(temperature=0.0, max_tokens=a.new, ignore_eos=True)
    hf = {"cpu": copy.deepcopy(base).to(dtype), "tpu": copy.deepcopy(base).to(dtype).to("tpu")}
    batch = tok(prompts, return_tensors="pt", padding=True)

    def run_vllm():
        torch.set_num_threads(serving_threads)
        outs = llm.generate(prompts, sampling, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs)

    def run_hf(device):
        def call():
            torch.set_num_threads(default_threads)  # as an HF script alone runs
            with torch.no_grad():
                out = hf[device].generate(
                    input_ids=batch.input_ids.to(device),
                    attention_mask=batch.attention_mask.to(device), do_sample=False,
                    max_new_tokens=a.new, min_new_tokens=a.new, pad_token_id=0)
            if device == "tpu":
                torch.tpu.synchronize()
            return (out.shape[1] - batch.input_ids.shape[1]) * out.shape[0]
        return call

    runs = {"vllm tpu": run_vllm, "hf tpu": run_hf("tpu"), "hf cpu": run_hf("cpu")}
    print(f"model: Llama {a.layers} layers x {a.hidden}, vocab {a.vocab}, "
          f"{params / 1e6:.1f}M parameters, {a.dtype}; {a.prompts} prompts of 16-64 tokens, "
          f"{a.new} new tokens each (greedy)")
    print(f"torch {torch.__version__}; torch threads: {default_threads} (default) for HF, "
          f"{serving_threads} (set by vLLM) for vLLM; "
          f"matrix unit: {torch_tpu.matrix_unit()['isa']}; loadavg at start "
          f"{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    for name, fn in runs.items():  # warm-up: each path once
        t = time.perf_counter()
        fn()
        print(f"  warm-up {name}: {time.perf_counter() - t:.1f} s", flush=True)
    best, tokens = {}, {}
    for r in range(a.rounds):
        for name, fn in runs.items():
            t = time.perf_counter()
            tokens[name] = fn()
            dt = time.perf_counter() - t
            best[name] = min(best.get(name, dt), dt)
            print(f"  round {r + 1} {name}: {dt:.2f} s", flush=True)
    load1 = os.getloadavg()
    print(f"{'path':10} {'tokens':>7} {'best s':>8} {'tokens/s':>9} {'x hf cpu':>9}")
    rows = []
    for name in runs:
        tps = tokens[name] / best[name]
        x = tps / (tokens["hf cpu"] / best["hf cpu"])
        rows.append({"path": name, "tokens": tokens[name], "best_s": best[name],
                     "tokens_per_s": tps, "x_hf_cpu": x})
        print(f"{name:10} {tokens[name]:7d} {best[name]:8.2f} {tps:9.1f} {x:9.2f}")
    print(f"loadavg at end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                       f"vllm_{a.dtype}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"args": vars(a), "params": params, "loadavg_start": load0,
                   "loadavg_end": load1, "rows": rows}, f, indent=1)
    print("wrote", out)


if __name__ == "__main__":
    main()
