#!/usr/bin/env python3
"""Capture golden SFT rows for `[sft] golden` from the training tokenizer, as TRL/transformers
tokenize conversational data.

    pip install "transformers==5.23.0" jinja2      # tokenizing needs no torch
    python scripts/capture_sft_golden.py MODEL_DIR conversations.jsonl sft.jsonl

conversations.jsonl: one {"messages": [...]} per line. Checked against tests/fixtures/tiny-chatml
(its sft.jsonl is reproduced exactly, masks included) and Qwen2.5 (no {% generation %}: warns).
"""
import json, re, sys
from transformers import AutoTokenizer

model_dir, conversations_file, out_file = sys.argv[1:4]
tok = AutoTokenizer.from_pretrained(model_dir)
# return_assistant_tokens_mask needs {% generation %} blocks in the template; without them
# transformers returns all-zero masks, so leave the mask out.
has_tags = re.search(r"\{%-?\s*generation\s*-?%\}", tok.chat_template or "") is not None
if not has_tags:
    print("warning: the chat template has no {% generation %} block: no assistant_mask captured", file=sys.stderr)
with open(conversations_file) as src, open(out_file, "w") as out:
    for line in src:
        messages = json.loads(line)["messages"]
        enc = tok.apply_chat_template(messages, tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=has_tags)
        row = {"messages": messages, "input_ids": list(enc["input_ids"])}
        if has_tags:
            row["assistant_mask"] = list(enc["assistant_masks"])
        out.write(json.dumps(row) + "\n")
