"""Local stand-ins for the assets TorchTitan's llama3 debug config reads from
its source tree (``tests/assets/tokenizer``, ``tests/assets/c4_test``), which
its wheel does not ship and no model hub can provide here: a byte-level BPE
tokenizer trained on a synthetic corpus, and that corpus as c4-style JSON
lines. ``make(root)`` writes both under ``root/tests/assets``."""
import json
import os
import random


def make(root):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    assets = os.path.join(root, "tests", "assets")
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8)))
             for _ in range(400)]
    docs = [" ".join(rng.choice(words) for _ in range(rng.randint(200, 600))) for _ in range(200)]
    os.makedirs(os.path.join(assets, "c4_test"), exist_ok=True)
    with open(os.path.join(assets, "c4_test", "data.json"), "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<|begin_of_text|>", "<|end_of_text|>", "<unk>"]
    tok.train_from_iterator(docs, trainers.BpeTrainer(
        vocab_size=2000, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    os.makedirs(os.path.join(assets, "tokenizer"), exist_ok=True)
    tok.save(os.path.join(assets, "tokenizer", "tokenizer.json"))
    with open(os.path.join(assets, "tokenizer", "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": special[0], "eos_token": special[1],
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f)
    return assets
