#!/usr/bin/env python3
"""Build tests/fixtures/tiny-chatml: a small, complete Hugging Face model directory.

It is the stand-in for a trained checkpoint in the offline-chain tests: a byte-level BPE
tokenizer trained here, a ChatML chat template with {% generation %} tags, config.json,
generation_config.json, special_tokens_map.json and random-init Llama weights in
model.safetensors (the weights only need to be real bytes in the real format: the offline
chain hashes them, it does not run them).

The SFT goldens (sft.jsonl) are produced by transformers itself —
`apply_chat_template(tokenize=True, return_assistant_tokens_mask=True)` — so the tests compare
chatgate against an independent implementation, never against its own output.

Reproduce (deterministic; needs no network beyond PyPI):
    python3 -m venv /tmp/ref
    /tmp/ref/bin/pip install 'transformers==5.23.0' 'tokenizers==0.23.3' jinja2 safetensors numpy
    /tmp/ref/bin/python scripts/make_fixture.py tests/fixtures/tiny-chatml
"""
import json
import os
import sys

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SPECIALS = ["<s>", "</s>", "<|im_start|>", "<|im_end|>", "<pad>"]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{ '\\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

CONVERSATIONS = [
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "2+2 is 4."}],
    [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Name a prime number."},
        {"role": "assistant", "content": "7."},
    ],
    [
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me the capital of France."},
        {"role": "assistant", "content": "The capital of France is Paris."},
    ],
    [{"role": "user", "content": "  spaces  around\n\nand\tabs "}, {"role": "assistant", "content": "Noted."}],
    [{"role": "user", "content": "naïve café — 日本 🤖"}, {"role": "assistant", "content": "Unicode is fine."}],
    [{"role": "user", "content": "Write code: def f(x): return x*2"}, {"role": "assistant", "content": "def f(x):\n    return x * 2"}],
    [{"role": "user", "content": "Count to three."}, {"role": "assistant", "content": "One, two, three."}],
    [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Color of the sky?"},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "And grass?"},
        {"role": "assistant", "content": "Green."},
    ],
]

CORPUS = """The quick brown fox jumps over the lazy dog. A small model answers short questions.
What is two plus two? Two plus two is four. The capital of France is Paris. Hello, how can I help?
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2024. Code: def f(x): return x * 2; for i in range(3): print(i)
Colors: red, green, blue, yellow. The sky is blue and the grass is green. One, two, three, four, five.
Unicode: naïve café — 日本語 🤖 ∑ x² ≠ y. Questions end with a question mark? Answers end with a period.
system user assistant. You are a helpful assistant. Be brief. Be polite. Count to ten. Name a prime.
"""


def train_tokenizer(path, corpus_lines=None):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = corpus_lines
    if lines is None:
        lines = CORPUS.splitlines() * 8
        for conv in CONVERSATIONS:
            lines += [m["content"] for m in conv]
    tok.train_from_iterator(lines, trainer=trainer)
    tok.save(path)
    return tok


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def main(out):
    os.makedirs(out, exist_ok=True)
    tok = train_tokenizer(os.path.join(out, "tokenizer.json"))
    vocab = tok.get_vocab_size()
    ids = {t: tok.token_to_id(t) for t in SPECIALS}

    write_json(
        os.path.join(out, "tokenizer_config.json"),
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<s>",
            "eos_token": "<|im_end|>",
            "pad_token": "<pad>",
            "unk_token": None,
            "add_bos_token": False,
            "model_max_length": 512,
            "added_tokens_decoder": {
                str(ids[t]): {"content": t, "special": True, "lstrip": False, "rstrip": False,
                              "normalized": False, "single_word": False}
                for t in SPECIALS
            },
            "chat_template": CHAT_TEMPLATE,
        },
    )
    write_json(
        os.path.join(out, "special_tokens_map.json"),
        {"bos_token": "<s>", "eos_token": "<|im_end|>", "pad_token": "<pad>"},
    )
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": ids["<s>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<pad>"],
        "torch_dtype": "float32",
    }
    write_json(os.path.join(out, "config.json"), config)
    write_json(
        os.path.join(out, "generation_config.json"),
        {
            "bos_token_id": ids["<s>"],
            "eos_token_id": [ids["<|im_end|>"], ids["</s>"]],
            "pad_token_id": ids["<pad>"],
            "do_sample": True,
            "temperature": 0.7,
            "top_p": 0.9,
            "max_new_tokens": 64,
        },
    )

    rng = np.random.default_rng(1234)
    h, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    def w(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)
    tensors = {"model.embed_tokens.weight": w(vocab, h), "model.norm.weight": np.ones(h, np.float32),
               "lm_head.weight": w(vocab, h)}
    for i in range(layers):
        p = f"model.layers.{i}."
        for name in ["q_proj", "k_proj", "v_proj", "o_proj"]:
            tensors[p + f"self_attn.{name}.weight"] = w(h, h)
        tensors[p + "mlp.gate_proj.weight"] = w(inter, h)
        tensors[p + "mlp.up_proj.weight"] = w(inter, h)
        tensors[p + "mlp.down_proj.weight"] = w(h, inter)
        tensors[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        tensors[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})

    # The SFT goldens: what transformers' training path feeds the model (TRL uses exactly
    # apply_chat_template(tokenize=True, return_dict=True) with the assistant mask).
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(out)
    with open(os.path.join(out, "sft.jsonl"), "w", encoding="utf-8") as f:
        for conv in CONVERSATIONS:
            enc = hf.apply_chat_template(conv, tokenize=True, return_dict=True,
                                         return_assistant_tokens_mask=True)
            row = {"messages": conv, "input_ids": list(enc["input_ids"]),
                   "assistant_mask": list(enc["assistant_masks"])}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    # A different tokenizer with the same size and special tokens: what "the tokenizer was
    # swapped" looks like when nothing as crude as the vocabulary size gives it away.
    other = [line[::-1] for line in CORPUS.splitlines()] * 8 + ["zebra quartz jigsaw vexing"] * 20
    train_tokenizer(os.path.join(os.path.dirname(out.rstrip("/")), "swapped-tokenizer.json"), other)

    import tokenizers
    import transformers
    write_json(os.path.join(out, "sft.provenance.json"),
               {"produced_by": "scripts/make_fixture.py",
                "transformers": transformers.__version__, "tokenizers": tokenizers.__version__})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/tiny-chatml")
