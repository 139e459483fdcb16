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

# The strings and the variants are the research verifier's (docs/research), so the goldens
# check exactly what was verified there.
sys.path.insert(0, os.path.join(ROOT, "docs", "research"))
from verify_transformers_rule import DEL, STRINGS, VARIANTS  # noqa: E402


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
            # A tokenizer.json edit in VARIANTS always nulls the post-processor.
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
