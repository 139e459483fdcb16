#!/usr/bin/env python3
"""Verify the transformers-5 tokenization rule (see transformers-tokenization.md).

Run:  HF_HUB_OFFLINE=1 /root/.cache/chatgate/venv-transformers/bin/python /work/notes/verify_transformers_rule.py
Part A: goldens   -> Tokenizer.from_str(rule_json).encode(text, add_special_tokens=False).ids == ids_transformers
Part B: variants  -> copies of corpus dirs with edited tokenizer_config/config; rule vs live transformers 5.23.
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizers import Tokenizer  # noqa: E402

from transformers_rule import resolve_class, transformers_tokenizer_json  # noqa: E402

C = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "corpus")
VAR = "/root/.cache/chatgate/variants"
GOLDENS = ["TinyLlama-1.1B-Chat-v1.0", "Phi-3-mini-4k-instruct", "Mistral-7B-Instruct-v0.3", "Qwen2.5-0.5B-Instruct"]

try:
    import transformers
    from transformers import AutoTokenizer
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES
    MAPPING = dict(TOKENIZER_MAPPING_NAMES)
except ImportError:  # Part A only needs `tokenizers`
    transformers = None
    MAPPING = None


def rule_tokenizer(model_dir):
    cls, mode, tj = transformers_tokenizer_json(model_dir, resolve_class(model_dir, MAPPING))
    return cls, mode, Tokenizer.from_str(json.dumps(tj))


def part_a():
    print("== Part A: goldens (rule vs ids_transformers; raw tokenizer.json vs ids_tokenizers)")
    allok = True
    for name in GOLDENS:
        d = f"{C}/models/{name}"
        g = json.load(open(f"{C}/goldens/model__{name}.json"))
        cls, mode, rule = rule_tokenizer(d)
        raw = Tokenizer.from_file(f"{d}/tokenizer.json")
        cases = [c for c in g["cases"] if "text" in c]
        n = len(cases)
        ok_rule = sum(rule.encode(c["text"], add_special_tokens=False).ids == c["ids_transformers"] for c in cases)
        ok_raw = sum(raw.encode(c["text"], add_special_tokens=False).ids == c["ids_tokenizers"] for c in cases)
        drift = sum(c["ids_tokenizers"] != c["ids_transformers"] for c in cases)
        live = "-"
        if transformers is not None:
            tok = AutoTokenizer.from_pretrained(d)
            live_ok = sum(tok(c["text"], add_special_tokens=False)["input_ids"] == c["ids_transformers"] for c in cases)
            live = f"{live_ok}/{n} ({type(tok).__name__})"
        allok &= ok_rule == n and ok_raw == n
        print(f"{name}: class={cls} mode={mode} rule==ids_transformers {ok_rule}/{n}; "
              f"raw==ids_tokenizers {ok_raw}/{n}; cases where the two goldens differ {drift}/{n}; "
              f"live transformers==ids_transformers {live}")
    return allok


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


def variant(name, base, tc_edit=None, cfg=None, drop_cfg=False, tj_edit=None):
    """Copy corpus model `base` to VAR/name, edit tokenizer_config.json / config.json."""
    d = f"{VAR}/{name}"
    if os.path.isdir(d):
        shutil.rmtree(d)
    shutil.copytree(f"{C}/models/{base}", d)
    for root, dirs, files in os.walk(d):
        os.chmod(root, 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    if tc_edit is not None:
        p = f"{d}/tokenizer_config.json"
        tc = json.load(open(p)) if os.path.isfile(p) else {}
        for k, v in tc_edit.items():
            if v is DEL:
                tc.pop(k, None)
            else:
                tc[k] = v
        json.dump(tc, open(p, "w"))
    if tj_edit is not None:
        tj = json.load(open(f"{d}/tokenizer.json"))
        tj_edit(tj)
        json.dump(tj, open(f"{d}/tokenizer.json", "w"))
    if drop_cfg and os.path.isfile(f"{d}/config.json"):
        os.remove(f"{d}/config.json")
    if cfg is not None:
        json.dump(cfg, open(f"{d}/config.json", "w"))
    return d


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
    ("tl_pp_null_add_bos_true", TL, {"add_bos_token": True, "add_eos_token": True}, None, False,
     lambda tj: tj.update(post_processor=None)),
    ("tl_gemma_cls_no_pp", TL, {"tokenizer_class": "GemmaTokenizer", "legacy": True}, None, False,
     lambda tj: tj.update(post_processor=None)),
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


def structural_diff(a, b):
    """Fields of two serialized tokenizers that differ (both serialized by tokenizers' own to_str)."""
    out = []
    for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder", "added_tokens"):
        if a.get(k) != b.get(k):
            out.append(k)
    for k in set(a["model"]) | set(b["model"]):
        if a["model"].get(k) != b["model"].get(k):
            out.append("model." + k)
    return out


def part_b():
    if transformers is None:
        print("== Part B skipped (transformers not importable)")
        return True
    print(f"== Part B: synthetic variants (transformers {transformers.__version__}); {len(STRINGS)} strings "
          "(+ the base model's golden texts) x add_special_tokens in (False, True); plus backend JSON comparison")
    allok = True
    for name, base, tce, cfg, drop, *tje in VARIANTS:
        d = variant(name, base, tce, cfg, drop, tje[0] if tje else None)
        tok = AutoTokenizer.from_pretrained(d)
        live_cls = type(tok).__name__
        cls, mode, rule = rule_tokenizer(d)
        raw = Tokenizer.from_file(f"{d}/tokenizer.json")
        ok = {False: 0, True: 0}
        differs_raw = 0
        first_bad = None
        gpath = f"{C}/goldens/model__{base}.json"
        gtexts = [c["text"] for c in json.load(open(gpath))["cases"] if "text" in c] if os.path.isfile(gpath) else []
        strings = STRINGS + gtexts
        for s in strings:
            for ast in (False, True):
                a = tok(s, add_special_tokens=ast)["input_ids"]
                b = rule.encode(s, add_special_tokens=ast).ids
                ok[ast] += a == b
                if a != b and first_bad is None:
                    first_bad = (s, ast, a, b)
            differs_raw += tok(s, add_special_tokens=False)["input_ids"] != raw.encode(s, add_special_tokens=False).ids
        n = len(strings)
        struct = structural_diff(json.loads(rule.to_str()), json.loads(tok.backend_tokenizer.to_str()))
        good = ok[False] == n and ok[True] == n and live_cls == cls and not struct
        allok &= good
        print(f"{'OK ' if good else 'BAD'} {name}: live={live_cls} rule={cls}/{mode} "
              f"equal(ast=False) {ok[False]}/{n} equal(ast=True) {ok[True]}/{n} live!=raw_json {differs_raw}/{n}"
              + f" backend-json-fields {'identical' if not struct else 'DIFFER: ' + str(struct)}"
              + (f"  FIRST MISMATCH {first_bad}" if first_bad else ""))
    return allok


def part_c():
    """BOS facts: apply_chat_template(tokenize=True) uses add_special_tokens=False; add_bos_token in
    tokenizer_config.json is ignored when tokenizer.json exists (its post_processor decides)."""
    if transformers is None:
        return True
    print("== Part C: BOS / add_special_tokens facts")
    convs = {c["id"]: c for c in json.load(open(f"{C}/goldens/conversations.json"))}
    ok = True
    for name in GOLDENS:
        d = f"{C}/models/{name}"
        tok = AutoTokenizer.from_pretrained(d)
        g = json.load(open(f"{C}/goldens/model__{name}.json"))
        n = same = 0
        for c in g["cases"]:
            if "text" not in c:
                continue
            conv = convs[c["id"]]
            kw = {"tools": conv["tools"]} if conv.get("tools") else {}
            ids = list(tok.apply_chat_template(conv["messages"], add_generation_prompt=c["add_generation_prompt"],
                                               tokenize=True, return_dict=True, **kw)["input_ids"])
            n += 1
            same += ids == tok(c["text"], add_special_tokens=False)["input_ids"] == c["ids_transformers"]
        _, _, rule = rule_tokenizer(d)
        with_bos = tok("Hi")["input_ids"]
        ok &= same == n and with_bos == rule.encode("Hi", add_special_tokens=True).ids
        print(f"{name}: apply_chat_template(tokenize=True) == tok(text, add_special_tokens=False) == golden {same}/{n};"
              f" tok('Hi') (add_special_tokens=True) = {with_bos}")
    for name, expect_bos in (("tl_add_bos_false", True), ("tl_pp_null_add_bos_true", False)):
        d = f"{VAR}/{name}"
        if not os.path.isdir(d):
            continue
        ids = AutoTokenizer.from_pretrained(d)("Hi")["input_ids"]
        good = (ids[0] == 1) == expect_bos
        ok &= good
        print(f"{'OK ' if good else 'BAD'} {name}: tok('Hi') = {ids} (BOS expected: {expect_bos})")
    return ok


if __name__ == "__main__":
    a = part_a()
    b = part_b() if "--goldens-only" not in sys.argv else True
    c = part_c() if "--goldens-only" not in sys.argv else True
    print("ALL OK" if a and b and c else "SOME FAILED")
    sys.exit(0 if a and b and c else 1)
