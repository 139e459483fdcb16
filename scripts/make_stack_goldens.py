#!/usr/bin/env python3
"""Goldens for the `transformers` stack profile: live transformers ids on edited model directories.

Each variant is a copy of a model in tests/corpus/models with tokenizer_config.json / config.json /
tokenizer.json edited (legacy, add_prefix_space, tokenizer_class, model_type, added-token flags,
named special tokens, a null post-processor, ...). For every variant this records the class
AutoTokenizer picks and the ids `tok(text, add_special_tokens=False|True)` gives on a fixed list
of strings plus the base model's golden texts. tests/it/render_contract.rs rebuilds the same
directories and checks `chatgate::stack` predicts every id.

Run (no network needed; the model files are in the repo):
    python3 -m venv /tmp/venv-tf && /tmp/venv-tf/bin/pip install transformers==5.23.0 tokenizers jinja2
    HF_HUB_OFFLINE=1 /tmp/venv-tf/bin/python scripts/make_stack_goldens.py
Writes tests/corpus/goldens/stack_variants.json.
"""
import json
import os
import shutil
import sys
import tempfile

import tokenizers
import transformers
from transformers import AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C = os.path.join(ROOT, "tests", "corpus")
OUT = os.path.join(C, "goldens", "stack_variants.json")

STRINGS = [
    "Hello", " Hello", "  Hello", "Hello world", "Hello  world ", "\nHello", "\n\nHi\n", "",
    " ", "\t tab", "héllo 日本語 🤖 \u00a0x", "a\r\nb",
    "<s>Hello", "<s> Hello", "<s>\nHello", "</s>Hello", "</s> Hello", "</s>\nHello</s>\n",
    "<|user|>\nHello!</s>\n<|assistant|>\n", "<|user|>\nHi<|end|>\n<|assistant|>\n",
    "[INST] What is 2+2? [/INST]", "<s>[INST] Hi [/INST] Yo</s>[INST]  x [/INST]",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", "x<|endoftext|> y",
    "<unk>", "  <s>  ", "Hello</s>", "<|end|>\n<|user|>", "<<SYS>>\nsys\n<</SYS>>\n\n",
    "<|im_end|>  \n x <|im_end|>", "a <tool_call> b", "x <|img|> <|a|> Hello <pad>", "Hello</s>  \n  there",
]


DEL = object()
TL, PHI, MIS, QW, SMOL, G2 = ("TinyLlama-1.1B-Chat-v1.0", "Phi-3-mini-4k-instruct", "Mistral-7B-Instruct-v0.3",
                              "Qwen2.5-0.5B-Instruct", "SmolLM2-135M-Instruct", "gpt2-xl")
VARIANTS = [
    # name, base, tokenizer_config edits, config.json (None = keep), drop config.json
    ("tl_corpus", TL, None, None, False),
    ("tl_legacy_true", TL, {"legacy": True}, None, False),
    ("tl_legacy_absent", TL, {"legacy": DEL}, None, False),
    ("tl_legacy_null", TL, {"legacy": None}, None, False),
    ("tl_aps_false", TL, {"add_prefix_space": False}, None, False),
    ("tl_aps_false_legacy_true", TL, {"add_prefix_space": False, "legacy": True}, None, False),
    ("tl_aps_true_legacy_true", TL, {"add_prefix_space": True, "legacy": True}, None, False),
    ("tl_class_LlamaTokenizerFast", TL, {"tokenizer_class": "LlamaTokenizerFast"}, None, False),
    ("tl_class_PreTrainedTokenizerFast", TL, {"tokenizer_class": "PreTrainedTokenizerFast"}, None, False),
    ("tl_class_absent_cfg_llama", TL, {"tokenizer_class": DEL}, None, False),
    ("tl_class_GemmaTokenizer", TL, {"tokenizer_class": "GemmaTokenizer"}, None, False),
    ("tl_class_unknown", TL, {"tokenizer_class": "FooBarTokenizer"}, None, False),
    ("tl_class_PreTrainedTokenizer", TL, {"tokenizer_class": "PreTrainedTokenizer"}, None, False),
    ("tl_cfg_mistral", TL, None, {"model_type": "mistral"}, False),
    ("tl_cfg_gemma", TL, None, {"model_type": "gemma"}, False),
    ("tl_cfg_phi3", TL, None, {"model_type": "phi3"}, False),
    ("tl_no_cfg", TL, None, None, True),
    ("tl_add_bos_false", TL, {"add_bos_token": False}, None, False),
    ("tl_eos_rstrip_in_tc", TL, {"added_tokens_decoder": {
        "0": {"content": "<unk>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True},
        "1": {"content": "<s>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True},
        "2": {"content": "</s>", "lstrip": True, "normalized": False, "rstrip": True, "single_word": False, "special": True}}},
     None, False),
    ("tl_extra_special_gap", TL, {"added_tokens_decoder": {
        "0": {"content": "<unk>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True},
        "1": {"content": "<s>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True},
        "2": {"content": "</s>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True},
        "32005": {"content": "<|user|>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}},
        "additional_special_tokens": ["<|assistant|>"]}, None, False),
    ("tl_pttf_new_named_tokens", TL, {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>",
                                      "sep_token": "\u2581Hello", "image_token": "<|img|>",
                                      "additional_special_tokens": ["<|a|>", "<|user|>"]}, None, False),
    ("tl_pttf_eos_rstrip_in_tc", TL, {"tokenizer_class": "PreTrainedTokenizerFast", "added_tokens_decoder": {
        "2": {"content": "</s>", "lstrip": True, "normalized": False, "rstrip": True, "single_word": False, "special": True}}},
     None, False),
    ("tl_eos_special_false", TL, {"added_tokens_decoder": {
        "2": {"content": "</s>", "lstrip": False, "normalized": True, "rstrip": False, "single_word": False, "special": False}}},
     None, False),
    ("tl_no_added_tokens_decoder", TL, {"added_tokens_decoder": DEL}, None, False),
    ("tl_pp_null_add_bos_true", TL, {"add_bos_token": True, "add_eos_token": True}, None, False, "pp-null"),
    ("tl_gemma_cls_no_pp", TL, {"tokenizer_class": "GemmaTokenizer", "legacy": True}, None, False, "pp-null"),
    ("phi3_corpus_no_cfg", PHI, None, None, False),
    ("phi3_cfg_phi3", PHI, None, {"model_type": "phi3"}, False),
    ("phi3_cfg_phi3_hf_style", PHI, None, {"model_type": "phi3", "architectures": ["Phi3ForCausalLM"],
                                           "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config",
                                                        "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"},
                                           "transformers_version": "4.40.2", "vocab_size": 32064}, False),
    ("phi3_cfg_llama", PHI, None, {"model_type": "llama"}, False),
    ("phi3_legacy_true", PHI, {"legacy": True}, None, False),
    ("mistral_corpus", MIS, None, None, False),
    ("mistral_no_cfg", MIS, None, None, True),
    ("mistral_no_cfg_legacy_true", MIS, {"legacy": True}, None, True),
    ("mistral_cfg_llama", MIS, None, {"model_type": "llama"}, False),
    ("qwen_corpus_no_cfg", QW, None, None, False),
    ("qwen_cfg_qwen2", QW, None, {"model_type": "qwen2"}, False),
    ("qwen_aps_true", QW, {"add_prefix_space": True}, None, False),
    ("qwen_class_PreTrainedTokenizerFast", QW, {"tokenizer_class": "PreTrainedTokenizerFast"}, None, False),
    ("qwen_class_absent_cfg_qwen2", QW, {"tokenizer_class": DEL}, {"model_type": "qwen2"}, False),
    ("qwen_flags_in_tc", QW, {"added_tokens_decoder": {
        "151645": {"content": "<|im_end|>", "lstrip": True, "normalized": False, "rstrip": True, "single_word": False, "special": True},
        "151657": {"content": "<tool_call>", "lstrip": True, "normalized": False, "rstrip": True, "single_word": False, "special": False}}},
     None, False),
    ("qwen_pttf_flags_in_tc", QW, {"tokenizer_class": "PreTrainedTokenizerFast", "added_tokens_decoder": {
        "151645": {"content": "<|im_end|>", "lstrip": True, "normalized": False, "rstrip": True, "single_word": False, "special": True}}},
     None, False),
    ("smol_corpus_cfg_llama_no_tc", SMOL, None, None, False),
    ("smol_llama3_style_PTTF", SMOL, {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|im_start|>",
                                      "eos_token": "<|im_end|>"}, None, False),
    ("smol_declared_LlamaTokenizerFast_bytelevel", SMOL, {"tokenizer_class": "LlamaTokenizerFast"}, None, False),
    ("smol_declared_GPT2Tokenizer", SMOL, {"tokenizer_class": "GPT2Tokenizer"}, None, False),
    ("gpt2_corpus_cfg_gpt2_no_tc", G2, None, None, False),
    ("gpt2_aps_true", G2, {"add_prefix_space": True}, None, False),
]




def edit_record(tc_edit):
    if tc_edit is None:
        return None
    return {k: ({"$delete": True} if v is DEL else v) for k, v in tc_edit.items()}


def make(tmp, name, base, tc_edit, cfg, drop, tj_null_pp):
    d = os.path.join(tmp, name)
    shutil.copytree(os.path.join(C, "models", base), d)
    if tc_edit is not None:
        p = os.path.join(d, "tokenizer_config.json")
        tc = json.load(open(p)) if os.path.isfile(p) else {}
        for k, v in tc_edit.items():
            if v is DEL:
                tc.pop(k, None)
            else:
                tc[k] = v
        json.dump(tc, open(p, "w"))
    if tj_null_pp:
        p = os.path.join(d, "tokenizer.json")
        tj = json.load(open(p))
        tj["post_processor"] = None
        json.dump(tj, open(p, "w"))
    if drop and os.path.isfile(os.path.join(d, "config.json")):
        os.remove(os.path.join(d, "config.json"))
    if cfg is not None:
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    return d


def main():
    out = {"source": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                      "script": "scripts/make_stack_goldens.py"},
           "strings": STRINGS, "variants": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name, base, tce, cfg, drop, *tje in VARIANTS:
            d = make(tmp, name, base, tce, cfg, drop, bool(tje))
            tok = AutoTokenizer.from_pretrained(d)
            gpath = os.path.join(C, "goldens", f"model__{base}.json")
            gtexts = ([c["text"] for c in json.load(open(gpath))["cases"] if "text" in c]
                      if os.path.isfile(gpath) else [])
            texts = STRINGS + gtexts
            out["variants"].append({
                "name": name, "base": base, "tokenizer_config": edit_record(tce), "config": cfg,
                "drop_config": drop, "tokenizer_json_post_processor_null": bool(tje),
                "class": type(tok).__name__.removesuffix("Fast"),
                "extra_strings": gtexts,
                "ids": [tok(s, add_special_tokens=False)["input_ids"] for s in texts],
                "ids_special": [tok(s, add_special_tokens=True)["input_ids"] for s in texts],
            })
            print(name, type(tok).__name__, file=sys.stderr)
    with open(OUT, "w") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
