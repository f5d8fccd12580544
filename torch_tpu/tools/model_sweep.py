"""The model-architecture sweep: every Hugging Face transformers architecture
(and timm's vision models, where timm is installed), built tiny with random
weights, run on CPU and on tpu and compared.

``python -m torch_tpu.tools.model_sweep [--only NAME,...] [--no-timm]
[--out docs/model-sweep.md] [--json bench/results/model_sweep.json]``

For every model type of transformers' auto mappings the sweep

1. builds a tiny configuration from the type's default one (:func:`shrink`:
   widths, layers, heads, experts, vocabulary, image and audio sizes made
   small, sub-configurations shrunk the same way, special token ids kept
   inside the vocabulary),
2. picks the main head the auto mappings give the type (causal LM, masked
   LM, seq2seq LM, speech seq2seq, image classification, CTC, audio or
   sequence classification, else the base model) and makes inputs for the
   arguments its ``forward`` takes (token ids, pixels, audio features),
3. runs forward on CPU with a fixed seed, then on a tpu copy of the same
   weights, and compares every floating output (:func:`compare`),
4. for the main heads, runs backward of the model's loss (or of the mean
   square of its first output), compares every parameter's gradient, takes
   one SGD step on both and compares the updated parameters,
5. records the CPU fallbacks (``torch_tpu.fallback_counts()``) of the tpu
   forward and of the tpu backward and step, separately.

Statuses: ``pass`` (tpu matches), ``fail`` (values differ), ``error`` (tpu
raised where CPU did not), ``cpu-error`` (the tiny model does not build or run
on the CPU: not counted), ``crash`` / ``timeout`` (the worker died or stalled).
Each architecture runs in a worker process, so a crash costs one entry.

:func:`check_arch` is the comparison that the CI test
``tests/test_model_sweep.py`` shares with this tool.
"""
import argparse
import copy
import inspect
import json
import math
import os
import selectors
import subprocess
import sys
import time
import warnings

import torch

import torch_tpu

SEED = 0
BATCH, SEQ = 2, 16
FWD_TOL = 1e-4   # max |tpu - cpu| / max(1, max |cpu|), float32 forward outputs
GRAD_TOL = 1e-3  # the same over each parameter's gradient, scaled by the largest gradient
LR = 0.1

# Architectures whose forward and backward must pass with zero fallbacks
# (the list); tests/test_model_sweep.py runs them in CI.
KEY_ARCHS = [
    "gpt2", "llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "phi",
    "bert", "roberta", "t5", "bart", "vit", "clip", "whisper",
    "timm:resnet18", "timm:convnext_atto", "timm:swin_tiny_patch4_window7_224",
]

# ---------------------------------------------------------------------------
# Tiny configurations

_WIDTH = {"hidden_size", "d_model", "n_embd", "embed_dim", "hidden_dim", "dim",
          "projection_dim", "word_embed_proj_dim", "embedding_size", "d_embed",
          "text_embed_dim", "vision_embed_dim", "projection_size", "encoder_hidden_size",
          "classifier_proj_size", "proj_dim", "emb_dim", "n_embed", "block_size"}
_FFN = {"intermediate_size", "d_ff", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim",
        "n_inner", "d_inner", "moe_intermediate_size", "shared_expert_intermediate_size",
        "mlp_dim", "ffn_hidden_size", "hidden_act_dim"}
_LAYERS = {"num_hidden_layers", "n_layer", "num_layers", "encoder_layers", "decoder_layers",
           "num_decoder_layers", "n_layers", "num_encoder_layers", "depth", "n_layers_per_block"}
_HEADS = {"num_attention_heads", "n_head", "num_heads", "encoder_attention_heads",
          "decoder_attention_heads", "n_heads", "attention_heads"}
_KV_HEADS = {"num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num"}
_HEAD_DIM = {"head_dim", "d_kv", "kv_channels", "attention_head_size", "qk_rope_head_dim",
             "qk_nope_head_dim", "v_head_dim"}
_EXPERTS = {"num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"}
_POSITIONS = {"max_position_embeddings", "n_positions", "max_target_positions",
              "n_ctx", "max_seq_len", "seq_length"}

TINY_WIDTH, TINY_FFN, TINY_HEADS, TINY_KV, TINY_LAYERS = 32, 64, 4, 2, 2
TINY_VOCAB, TINY_IMAGE = 1024, 64


def _is_config_dict(v):
    return isinstance(v, dict) and "model_type" in v


def _scale_list(v, cap):
    """A list of widths scaled so its largest entry is at most ``cap``."""
    if not v or not all(isinstance(x, int) and x > 0 for x in v) or max(v) <= cap:
        return v
    f = max(v) / cap
    return [max(1, int(round(x / f))) for x in v]


def shrink(d, widths=True):
    """Shrink a config dict (``Config().to_dict()``) in place to a tiny model.
    With ``widths=False`` hidden sizes, heads and head dims stay as they are
    (for architectures whose shapes do not survive a generic shrink)."""
    layers = {}  # original layer count -> tiny one
    for k, v in list(d.items()):
        if _is_config_dict(v):
            shrink(v, widths)
        elif isinstance(v, bool) or v is None:
            continue
        elif isinstance(v, int):
            if not widths and (k in _WIDTH or k in _FFN or k in _HEADS or k in _KV_HEADS
                               or k in _HEAD_DIM):
                continue
            if k in _WIDTH and v > TINY_WIDTH:
                d[k] = TINY_WIDTH
            elif k in _FFN and v > TINY_FFN:
                d[k] = TINY_FFN
            elif k in _LAYERS and v > TINY_LAYERS and not (k == "num_layers" and "depths" in d):
                d[k], layers[v] = TINY_LAYERS, TINY_LAYERS
            elif k in _HEADS and v > TINY_HEADS:
                d[k] = TINY_HEADS
            elif k in _EXPERTS and v > 4:
                d[k] = 4
            elif k == "num_experts_per_tok" and v > 2:
                d[k] = 2
            elif k in _POSITIONS and v > 512:
                d[k] = 512
            elif k == "max_source_positions" and v > 64:
                d[k] = 32
            elif k == "vocab_size" and v > TINY_VOCAB:
                d[k] = TINY_VOCAB
            elif k == "image_size" and v > TINY_IMAGE:
                p = d.get("patch_size", 1)
                if isinstance(p, int) and p and TINY_IMAGE % p == 0:
                    d[k] = TINY_IMAGE
        elif isinstance(v, (list, tuple)) and v and all(isinstance(x, int) for x in v):
            if k in ("depths", "layers", "num_layers", "block_repeats", "stage_depths"):
                d[k] = [1] * len(v)
            elif widths and k in ("hidden_sizes", "embed_dims", "conv_dim", "widths",
                                  "channels", "embed_dim", "hidden_dims",
                                  "encoder_hidden_sizes"):
                d[k] = _scale_list(list(v), 64)
            elif widths and k in ("num_heads", "num_attention_heads", "heads") and v[0] > 0:
                d[k] = [max(1, x // v[0]) for x in v]
    # Per-layer lists (layer_types, ...) follow the layer count.
    for k, v in list(d.items()):
        if (isinstance(v, (list, tuple)) and len(v) in layers and v
                and all(isinstance(x, (str, bool)) for x in v)):
            d[k] = list(v[:layers[len(v)]])
    if not widths:
        return d
    # Heads must divide the width; key/value heads must divide heads.
    width = next((d[k] for k in ("hidden_size", "d_model", "n_embd", "embed_dim")
                  if isinstance(d.get(k), int) and not isinstance(d.get(k), bool)), None)
    heads_key = next((k for k in _HEADS if isinstance(d.get(k), int)), None)
    if width and heads_key and width % d[heads_key]:
        d[heads_key] = 2 if width % 2 == 0 else 1
    heads = d.get(heads_key) if heads_key else None
    for k in _KV_HEADS:
        if isinstance(d.get(k), int) and heads and (d[k] > heads or heads % d[k]):
            d[k] = heads
        elif isinstance(d.get(k), int) and heads and d[k] > TINY_KV and d[k] < heads:
            d[k] = TINY_KV
    for k in _HEAD_DIM:
        if isinstance(d.get(k), int) and d[k] > 8:
            d[k] = (width // heads) if (width and heads) else 8
    vocab = d.get("vocab_size")
    if isinstance(vocab, int):
        for k, v in list(d.items()):
            if k.endswith("token_id") and isinstance(v, int) and v >= vocab:
                d[k] = vocab - 1
            elif k.endswith("token_id") and isinstance(v, list):
                d[k] = [min(x, vocab - 1) if isinstance(x, int) else x for x in v]
    return d


def _clamp_token_ids(d, vocab):
    """Special token ids (here and in sub-configs) inside the smallest vocabulary."""
    for k, v in list(d.items()):
        if _is_config_dict(v):
            _clamp_token_ids(v, vocab)
        elif k.endswith("token_id") and isinstance(v, int) and not isinstance(v, bool):
            d[k] = min(v, vocab - 1)
        elif k.endswith("token_id") and isinstance(v, list):
            d[k] = [min(x, vocab - 1) if isinstance(x, int) else x for x in v]


def _vocabs(d):
    out = [d["vocab_size"]] if isinstance(d.get("vocab_size"), int) else []
    for v in d.values():
        if _is_config_dict(v):
            out += _vocabs(v)
    return out


def tiny_config(model_type, widths=True):
    from transformers import CONFIG_MAPPING
    cls = CONFIG_MAPPING[model_type]
    d = shrink(cls().to_dict(), widths)
    vocabs = [v for v in _vocabs(d) if v > 8]
    if vocabs:
        _clamp_token_ids(d, min(vocabs))
    d.pop("transformers_version", None)
    return cls.from_dict(d)


# ---------------------------------------------------------------------------
# Model and inputs

HEAD_ORDER = [  # (mapping, kind); kind "train" heads also run backward and a step
    ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "train"),
    ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "train"),
    ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "train"),
    ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", "train"),
    ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "train"),
    ("MODEL_FOR_CTC_MAPPING_NAMES", "train"),
    ("MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES", "forward"),
    ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "forward"),
    ("MODEL_MAPPING_NAMES", "forward"),
]


def model_types():
    from transformers.models.auto import configuration_auto
    return sorted(configuration_auto.CONFIG_MAPPING_NAMES)


def pick_head(model_type):
    """(class name, train?) of the main head for a model type, or None."""
    from transformers.models.auto import modeling_auto
    for mapping, kind in HEAD_ORDER:
        names = getattr(modeling_auto, mapping, {})
        name = names.get(model_type)
        if isinstance(name, (list, tuple)):
            name = name[0] if name else None
        if name:
            return name, kind == "train"
    # Sub-model types (blip_text_model, ...) are in no mapping: their model
    # class is named after their config class.
    import transformers
    from transformers import CONFIG_MAPPING
    name = CONFIG_MAPPING[model_type].__name__.replace("Config", "Model")
    return (name, False) if hasattr(transformers, name) else None


def _get(cfg, *names, default=None):
    for sub in (cfg, getattr(cfg, "text_config", None), getattr(cfg, "vision_config", None),
                getattr(cfg, "audio_config", None), getattr(cfg, "encoder", None)):
        if sub is None:
            continue
        for n in names:
            v = getattr(sub, n, None)
            if v is not None:
                return v
    return default


def make_inputs(model, cfg, gen):
    """Inputs for the arguments ``model.forward`` takes, on CPU."""
    params = inspect.signature(model.forward).parameters
    vocab = _get(cfg, "vocab_size", default=TINY_VOCAB)
    vocab = vocab if isinstance(vocab, int) and vocab > 8 else TINY_VOCAB
    ids = lambda: torch.randint(3, vocab, (BATCH, SEQ), generator=gen)
    out = {}
    if "input_ids" in params:
        out["input_ids"] = ids()
        if "attention_mask" in params:
            out["attention_mask"] = torch.ones(BATCH, SEQ, dtype=torch.long)
    if "decoder_input_ids" in params and getattr(cfg, "is_encoder_decoder", False):
        out["decoder_input_ids"] = ids()
    if "pixel_values" in params:
        vc = getattr(cfg, "vision_config", None) or cfg
        size = getattr(vc, "image_size", 64)
        size = size[0] if isinstance(size, (list, tuple)) else size
        ch = getattr(vc, "num_channels", 3)
        out["pixel_values"] = torch.randn(BATCH, ch, size, size, generator=gen)
    if "input_features" in params:
        mel = _get(cfg, "num_mel_bins", "feature_size", default=80)
        src = _get(cfg, "max_source_positions", default=32)
        out["input_features"] = torch.randn(BATCH, mel, 2 * src, generator=gen)
    if "input_values" in params:
        out["input_values"] = torch.randn(BATCH, 4000, generator=gen)
    return out


def add_labels(model_name, inputs, cfg, gen):
    if any(k in model_name for k in ("ForCausalLM", "ForMaskedLM", "ForConditionalGeneration")):
        if "input_ids" in inputs or "decoder_input_ids" in inputs:
            ref = inputs.get("decoder_input_ids", inputs.get("input_ids"))
            inputs["labels"] = ref.clone()
    elif "ForImageClassification" in model_name:
        inputs["labels"] = torch.randint(0, max(2, getattr(cfg, "num_labels", 2)), (BATCH,),
                                         generator=gen)


MAX_PARAMS = 40_000_000  # the milder shrink is used only below this size


def build(model_type, widths=True):
    import transformers
    head = pick_head(model_type)
    if head is None:
        raise LookupError(f"no model class for {model_type}")
    name, train = head
    cfg = tiny_config(model_type, widths)
    if not widths:  # count parameters on the meta device before building for real
        with torch.device("meta"):
            n = sum(p.numel() for p in getattr(transformers, name)(cfg).parameters())
        if n > MAX_PARAMS:
            raise MemoryError(f"{n / 1e6:.0f}M parameters without shrinking widths")
    torch.manual_seed(SEED)
    model = getattr(transformers, name)(cfg).float().eval()
    gen = torch.Generator().manual_seed(SEED)
    inputs = make_inputs(model, cfg, gen)
    if train:
        add_labels(name, inputs, cfg, gen)
    return name, train, model, inputs


def build_timm(name):
    import timm
    torch.manual_seed(SEED)
    model = timm.create_model(name, pretrained=False, num_classes=10).float().eval()
    cfg = model.pretrained_cfg or {}
    size = cfg.get("input_size", (3, 224, 224))
    gen = torch.Generator().manual_seed(SEED)
    inputs = {"x": torch.randn(BATCH, *size, generator=gen)}
    return type(model).__name__, True, model, inputs


# ---------------------------------------------------------------------------
# Comparison

def _tensors(obj, path="out"):
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, dict) or hasattr(obj, "items"):
        for k, v in obj.items():
            yield from _tensors(v, f"{path}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{path}[{i}]")


def _to(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    return obj


def scaled_error(actual, expected):
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to(torch.float64)
    if a.shape != e.shape:
        return math.inf
    if e.numel() == 0:
        return 0.0
    both_nan = a.isnan() & e.isnan()
    diff = (a - e).abs().masked_fill(both_nan, 0)
    if diff.isnan().any():
        return math.inf
    return (diff.max() / max(1.0, e.abs().nan_to_num(0, 0, 0).max().item())).item()


def compare(actual, expected):
    """Largest scaled error over the floating tensors of two outputs."""
    got = dict(_tensors(actual))
    worst = 0.0
    for path, e in _tensors(expected):
        a = got.get(path)
        if a is None:
            return math.inf, f"{path} missing on tpu"
        if a.device.type != "tpu":
            return math.inf, f"{path} is on {a.device}"
        if e.is_floating_point():
            worst = max(worst, scaled_error(a, e))
        elif not torch.equal(a.cpu(), e):
            return math.inf, f"{path} differs"
    return worst, None


def _loss(out):
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if loss is not None:
        return loss
    first = next(t for _, t in _tensors(out) if t.is_floating_point())
    return first.float().pow(2).mean()


def _grad_error(m_tpu, m_cpu):
    grads = [(n, p.grad) for n, p in m_cpu.named_parameters()
             if p.grad is not None and p.grad.numel()]
    scale = max([g.abs().max().item() for _, g in grads] + [1e-6])
    tpu = dict(m_tpu.named_parameters())
    worst, where = 0.0, None
    for n, g in grads:
        gt = tpu[n].grad
        if gt is None:
            return math.inf, f"no gradient for {n} on tpu"
        err = (gt.cpu().double() - g.double()).abs().max().item() / scale
        if not err <= worst:
            worst, where = err, n
    return worst, where


def check_arch(arch):
    """Run one architecture on CPU and tpu; returns the result record."""
    rec = {"arch": arch, "status": None}
    # The generic shrink first; if that model does not run on the CPU, one
    # with the default widths (layers, vocabulary and sizes still shrunk).
    for widths in ((True,) if arch.startswith("timm:") else (True, False)):
        try:
            if arch.startswith("timm:"):
                name, train, model, inputs = build_timm(arch[5:])
            else:
                name, train, model, inputs = build(arch, widths)
            rec["model"], rec["widths_shrunk"] = name, widths
            rec["params"] = sum(p.numel() for p in model.parameters())
            torch.manual_seed(SEED)
            with torch.no_grad():
                expected = model(**inputs)
            break
        except Exception as e:  # the tiny model does not run on the CPU
            rec["status"] = "cpu-error"  # report the generic shrink's error
            rec.setdefault("error", f"{type(e).__name__}: {str(e)[:300]}")
    else:
        return rec
    rec.pop("error", None)
    m_tpu = copy.deepcopy(model).to("tpu")
    inp_tpu = _to(inputs, "tpu")
    torch_tpu.reset_counts()
    try:
        torch.manual_seed(SEED)
        with torch.no_grad():
            actual = m_tpu(**inp_tpu)
        torch.tpu.synchronize()
        err, why = compare(actual, expected)
        rec["fwd_error"] = err
        rec["fwd_fallbacks"] = dict(torch_tpu.fallback_counts())
        if not err <= FWD_TOL:
            rec.update(status="fail", error=why or f"forward error {err:.3g}")
            return rec
        if train:
            torch_tpu.reset_counts()
            for m, inp in ((model, inputs), (m_tpu, inp_tpu)):
                torch.manual_seed(SEED)
                _loss(m(**inp)).backward()
            gerr, where = _grad_error(m_tpu, model)
            for m in (model, m_tpu):
                torch.optim.SGD(m.parameters(), lr=LR).step()
            perr = max([scaled_error(pt, pc) for pc, pt in
                        zip(model.parameters(), m_tpu.parameters())] + [0.0])
            torch.tpu.synchronize()
            rec["bwd_fallbacks"] = dict(torch_tpu.fallback_counts())
            rec["grad_error"], rec["step_error"] = gerr, perr
            if not gerr <= GRAD_TOL:
                rec.update(status="fail", error=f"gradient error {gerr:.3g} at {where}")
                return rec
            if not perr <= FWD_TOL * 10:
                rec.update(status="fail", error=f"after one SGD step: error {perr:.3g}")
                return rec
        rec["status"] = "pass"
    except Exception as e:
        rec.update(status="error", error=f"{type(e).__name__}: {str(e)[:300]}")
        rec.setdefault("fwd_fallbacks", dict(torch_tpu.fallback_counts()))
    return rec


# ---------------------------------------------------------------------------
# timm

def timm_archs():
    """One small model per timm architecture module (the first of its
    registered names, preferring the smallest variant names)."""
    try:
        import timm
    except ImportError:
        return []
    from timm.models import _registry
    by_module = {}
    for name in timm.list_models():
        mod = _registry._model_to_module.get(name, "?")
        by_module.setdefault(mod, []).append(name)
    pref = ("atto", "femto", "pico", "nano", "tiny", "small", "18", "xxs", "xs", "s", "b0")
    out = []
    for mod, names in sorted(by_module.items()):
        ranked = sorted(names, key=lambda n: (min([i for i, p in enumerate(pref) if p in n]
                                                   + [len(pref)]), len(n), n))
        out.append("timm:" + ranked[0])
    return out


# ---------------------------------------------------------------------------
# Sweep driver: one worker process at a time, restarted after a crash.

_MARK = "@@model_sweep "


def _worker(archs):
    warnings.filterwarnings("ignore")
    torch_tpu.set_fallback_mode("silent")
    # Models may print to stdout: the worker's own lines carry a marker.
    for arch in archs:
        print(_MARK + json.dumps({"start": arch}), flush=True)
        t0 = time.perf_counter()
        rec = check_arch(arch)
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        print(_MARK + json.dumps(rec), flush=True)


def sweep(archs, timeout, report):
    results, todo = {}, list(archs)
    while todo:
        cmd = [sys.executable, "-m", "torch_tpu.tools.model_sweep", "--worker", ",".join(todo)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        current, deadline = None, time.monotonic() + timeout
        while True:
            ready = sel.select(timeout=max(0.1, deadline - time.monotonic()))
            if not ready and time.monotonic() >= deadline:
                proc.kill()
                if current is not None:
                    results[current] = {"arch": current, "status": "timeout"}
                    report(results[current])
                break
            line = proc.stdout.readline()
            if not line:
                proc.wait()
                if current is not None and current not in results:
                    results[current] = {"arch": current, "status": "crash",
                                        "error": f"worker exit {proc.returncode}"}
                    report(results[current])
                break
            if not line.startswith(_MARK):
                continue
            msg = json.loads(line[len(_MARK):])
            if "start" in msg:
                current, deadline = msg["start"], time.monotonic() + timeout
            else:
                results[msg["arch"]] = msg
                report(msg)
                current, deadline = None, time.monotonic() + timeout
        todo = [a for a in todo if a not in results]
    return [results[a] for a in archs]


def sweep_parallel(archs, timeout, report, jobs):
    """:func:`sweep` over ``jobs`` interleaved shares of ``archs`` at once."""
    import threading
    shares = [archs[i::jobs] for i in range(jobs)]
    out, lock = {}, threading.Lock()

    def locked_report(r):
        with lock:
            report(r)

    def run(share):
        for r in sweep(share, timeout, locked_report):
            out[r["arch"]] = r
    threads = [threading.Thread(target=run, args=(s,)) for s in shares if s]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [out[a] for a in archs]


def totals(results):
    ran = [r for r in results if r["status"] != "cpu-error"]
    passed = [r for r in ran if r["status"] == "pass"]
    clean = [r for r in passed if not r.get("fwd_fallbacks") and not r.get("bwd_fallbacks")]
    return {"total": len(results), "ran_on_cpu": len(ran), "pass": len(passed),
            "pass_no_fallback": len(clean)}


def write_markdown(path, results, t, command, elapsed):
    def pct(a, b):
        return f"{100.0 * a / b:.1f}%" if b else "n/a"
    lines = [
        "# Model-architecture sweep", "",
        f"Generated by `{command}` in {elapsed / 60:.1f} min (torch {torch.__version__}).", "",
        f"- architectures: {t['total']}; build and run on CPU: {t['ran_on_cpu']}",
        f"- pass on tpu: {t['pass']} ({pct(t['pass'], t['ran_on_cpu'])} of those that run on CPU)",
        f"- pass with no CPU fallback, forward and backward: {t['pass_no_fallback']} "
        f"({pct(t['pass_no_fallback'], t['ran_on_cpu'])})", "",
        "Key architectures (must pass with zero fallbacks):", "",
        "| arch | model | status | fwd err | grad err | fallbacks |", "|---|---|---|---|---|---|"]
    by = {r["arch"]: r for r in results}

    def row(r):
        fb = sorted(set(r.get("fwd_fallbacks", {})) | set(r.get("bwd_fallbacks", {})))
        fe = r.get("fwd_error")
        ge = r.get("grad_error")
        return (f"| {r['arch']} | {r.get('model', '')} | {r['status']} | "
                f"{'' if fe is None else f'{fe:.1e}'} | {'' if ge is None else f'{ge:.1e}'} | "
                f"{', '.join(fb)} |")
    lines += [row(by[a]) for a in KEY_ARCHS if a in by]
    lines += ["", "## Not passing on tpu (of those that run on CPU)", "",
              "| arch | model | status | error | fallbacks |", "|---|---|---|---|---|"]
    for r in results:
        if r["status"] not in ("pass", "cpu-error"):
            fb = sorted(set(r.get("fwd_fallbacks", {})) | set(r.get("bwd_fallbacks", {})))
            err = str(r.get("error", "")).replace("|", "\\|").replace("\n", " ")[:160]
            lines.append(f"| {r['arch']} | {r.get('model', '')} | {r['status']} | {err} | "
                         f"{', '.join(fb)} |")
    counts = {}
    for r in results:
        for op, n in {**r.get("fwd_fallbacks", {}), **r.get("bwd_fallbacks", {})}.items():
            counts[op] = counts.get(op, 0) + 1
    lines += ["", "## Ops that fell back, by number of architectures", "",
              "| op | architectures |", "|---|---|"]
    lines += [f"| {op} | {n} |" for op, n in sorted(counts.items(), key=lambda x: -x[1])]
    lines += ["", "## All architectures", "",
              "| arch | model | status | fwd err | grad err | fallbacks |", "|---|---|---|---|---|---|"]
    lines += [row(r) for r in results if r["status"] != "cpu-error"]
    lines += ["", f"Not counted (the tiny model does not build or run on CPU): "
              f"{t['total'] - t['ran_on_cpu']} architectures, listed in the JSON output."]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", help="comma-separated model types (timm models as timm:NAME)")
    p.add_argument("--no-timm", action="store_true")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per architecture")
    p.add_argument("--jobs", type=int, default=2, help="worker processes at once")
    p.add_argument("--out", help="markdown report path")
    p.add_argument("--json", help="JSON results path")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        _worker(args.worker.split(","))
        return 0
    if args.only:
        archs = args.only.split(",")
    else:
        archs = model_types() + ([] if args.no_timm else timm_archs())
    t0 = time.time()

    def report(r):
        extra = r.get("error", "")
        fb = sorted(set(r.get("fwd_fallbacks", {})) | set(r.get("bwd_fallbacks", {})))
        print(f"{r['arch']:40s} {r['status']:9s} {', '.join(fb)[:60]} {str(extra)[:100]}",
              flush=True)
    results = sweep_parallel(archs, args.timeout, report, max(1, args.jobs))
    t = totals(results)
    print(json.dumps(t))
    command = "python -m torch_tpu.tools.model_sweep" + (
        " " + " ".join(argv if argv is not None else sys.argv[1:]))
    if args.out:
        write_markdown(args.out, results, t, command.strip(), time.time() - t0)
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"totals": t, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
