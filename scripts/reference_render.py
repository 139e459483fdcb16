#!/usr/bin/env python3
"""Render chat templates with transformers itself: the reference chatgate's renderer must match.

Usage (needs transformers 5.x + jinja2 >= 3.1.6; torch is not needed):

    python scripts/reference_render.py jobs.jsonl > results.jsonl
    echo '{"id": "x", "template": "{{ messages[0].content }}", "messages": [...]}' | \
        python scripts/reference_render.py -

Each input line is a JSON job:

    {"id": ..., "template": "<jinja source>", "messages": [...],
     "tools": [...] | null, "documents": [...] | null,
     "add_generation_prompt": false, "continue_final_message": false,
     "special_tokens": {"bos_token": "<s>", ...},   # only the ones that are set
     "extra": {...}}                                 # extra template kwargs

Each output line is {"id", "text", "spans"} or {"id", "error", "error_type"}. "spans" are the
`{% generation %}` offsets transformers records (code points); they are only computed when the
template has generation tags and continue_final_message is off (transformers refuses to combine
the two).

The text comes from `PreTrainedTokenizerFast.apply_chat_template(..., tokenize=False)` on a
throw-away tokenizer that carries the job's special tokens and template, i.e. the exact code path
users hit (None-dropping, reasoning aliasing, special-token kwargs, continue_final_message).
"""
import json
import re
import sys
import warnings

warnings.filterwarnings("ignore")

import transformers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from tokenizers.models import WordLevel  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402
from transformers.utils import chat_template_utils  # noqa: E402

transformers.logging.set_verbosity_error()

SPECIAL_NAMES = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]
GENERATION_RE = re.compile(r"\{%-?\s*generation\s*-?%\}")


def make_tokenizer(template, special_tokens):
    """A minimal fast tokenizer carrying `template` and the given special tokens."""
    backend = Tokenizer(WordLevel({"[unk-internal]": 0}, unk_token="[unk-internal]"))
    kwargs = {k: v for k, v in (special_tokens or {}).items() if k in SPECIAL_NAMES and v is not None}
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, **kwargs)
    tok.chat_template = template
    return tok


def render_with(tok, job):
    """Render one job with an existing tokenizer (its own template and special tokens)."""
    extra = dict(job.get("extra") or {})
    messages = job["messages"]
    text = tok.apply_chat_template(
        messages,
        tools=job.get("tools"),
        documents=job.get("documents"),
        add_generation_prompt=bool(job.get("add_generation_prompt", False)),
        continue_final_message=bool(job.get("continue_final_message", False)),
        tokenize=False,
        **extra,
    )
    result = {"text": text}
    template = tok.chat_template
    if isinstance(template, str) and GENERATION_RE.search(template) and not job.get("continue_final_message"):
        # The same inputs apply_chat_template builds, rendered with the assistant tracker on.
        chat = [{k: v for k, v in m.items() if v is not None} for m in messages]
        rendered, indices = chat_template_utils.render_jinja_template(
            conversations=[chat],
            tools=job.get("tools"),
            documents=job.get("documents"),
            chat_template=template,
            return_assistant_tokens_mask=True,
            add_generation_prompt=bool(job.get("add_generation_prompt", False)),
            **{**tok.special_tokens_map, **extra},
        )
        if rendered[0] != text:
            raise RuntimeError("tracked render differs from apply_chat_template")
        result["spans"] = [list(span) for span in indices[0]]
    else:
        result["spans"] = []
    return result


def render_job(job, tok=None):
    """Render one job; returns {"text", "spans"} or {"error", "error_type"}."""
    try:
        if tok is None:
            tok = make_tokenizer(job["template"], job.get("special_tokens"))
        return render_with(tok, job)
    except Exception as e:  # noqa: BLE001 - every failure is a result to compare against
        return {"error": f"{type(e).__name__}: {e}", "error_type": type(e).__name__}


def main(argv):
    src = sys.stdin if len(argv) < 2 or argv[1] == "-" else open(argv[1], encoding="utf-8")
    for line in src:
        if not line.strip():
            continue
        job = json.loads(line)
        out = {"id": job.get("id")}
        out.update(render_job(job))
        sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv)
