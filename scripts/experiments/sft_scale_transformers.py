#!/usr/bin/env python3
"""The Python competitor of the SFT scale benchmark (scripts/experiments/sft-scale.sh): what a user writes to
check golden SFT rows against the serving tokenizer + chat template with transformers 5.

    PY=~/.cache/chatgate/venv-transformers-serve/bin/python
    $PY scripts/experiments/sft_scale_transformers.py MODEL_DIR ROWS.jsonl [--workers 1]

Streams the JSONL; for every row renders and tokenizes its messages with
    tok.apply_chat_template(messages, tokenize=True, return_dict=True,
                            return_assistant_tokens_mask=<template has {% generation %}>)
(transformers 5 returns a BatchEncoding when tokenize=True — with or without return_dict — so
["input_ids"] is read from it), and counts the rows whose input_ids, or assistant_mask when the
row carries one, differ. Prints one JSON line: {rows, mismatches, first_mismatches, seconds, ...};
"seconds" is the whole run including imports and tokenizer loading, like the wall time of a CLI;
"startup_seconds" (import + tokenizer load) and "loop_seconds" (the loop; with --workers > 1 also
starting the pool) split it.

--workers 1 (default) is the plain single-process loop. --workers N > 1 is the variant a user
might reach for on a multi-core box: the tokenizer loaded once, then multiprocessing.Pool(N) forked
(the workers inherit it), rows sent in chunks of 1000 lines (imap keeps the file streamed and the
order).
"""
import argparse
import json
import re
import sys
import time

T0 = time.perf_counter()
from transformers import AutoTokenizer, __version__ as TRANSFORMERS_VERSION  # noqa: E402

_tok = None
_mask = False


def _load(model_dir):
    global _tok, _mask
    _tok = AutoTokenizer.from_pretrained(model_dir)
    _mask = re.search(r"\{%-?\s*generation\s*-?%\}", _tok.chat_template or "") is not None


def check_row(line):
    """True when transformers reproduces the row's ids (and mask), else False."""
    row = json.loads(line)
    enc = _tok.apply_chat_template(row["messages"], tools=row.get("tools"), tokenize=True,
                                   return_dict=True, return_assistant_tokens_mask=_mask)
    if list(enc["input_ids"]) != row["input_ids"]:
        return False
    if _mask and "assistant_mask" in row and list(enc["assistant_masks"]) != row["assistant_mask"]:
        return False
    return True


def _check_chunk(lines):
    return [check_row(line) for line in lines]


def _chunks(f, size):
    chunk = []
    for line in f:
        if line.strip():
            chunk.append(line)
            if len(chunk) == size:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("rows")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()

    rows = mismatches = 0
    first = []
    with open(args.rows) as f:
        if args.workers <= 1:
            _load(args.model_dir)
            t_loop = time.perf_counter()
            for line in f:
                if not line.strip():
                    continue
                rows += 1
                if not check_row(line):
                    mismatches += 1
                    if len(first) < 4:
                        first.append(rows)
        else:
            import multiprocessing as mp
            # Load once in the parent; the forked workers inherit the imports and the tokenizer
            # (loading in a Pool initializer instead repeats transformers' lazy imports per worker).
            _load(args.model_dir)
            t_loop = time.perf_counter()
            with mp.get_context("fork").Pool(args.workers) as pool:
                for results in pool.imap(_check_chunk, _chunks(f, 1000)):
                    for ok in results:
                        rows += 1
                        if not ok:
                            mismatches += 1
                            if len(first) < 4:
                                first.append(rows)
    t_end = time.perf_counter()
    print(json.dumps({"rows": rows, "mismatches": mismatches, "first_mismatches": first,
                      "workers": max(args.workers, 1), "transformers": TRANSFORMERS_VERSION,
                      "seconds": round(t_end - T0, 3), "startup_seconds": round(t_loop - T0, 3),
                      "loop_seconds": round(t_end - t_loop, 3)}))


if __name__ == "__main__":
    main()
