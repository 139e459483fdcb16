#!/usr/bin/env python3
"""Regenerate the transformers reference goldens under tests/reference/goldens/.

    /tmp/ref/bin/python scripts/make_reference_goldens.py

(any Python with transformers 5.x and jinja2 >= 3.1.6 works; torch is not needed). The
expected outputs come from transformers itself (scripts/reference_render.py), never from
chatgate, so tests/template_reference.rs checks our renderer against the real thing.

What gets rendered:
  * every tests/reference/templates/*.jinja (adversarial mini-templates, one per rule) over
    every input of tests/reference/inputs.json;
  * every real template in tests/corpus/templates over the same inputs and over the corpus
    conversations (tests/corpus/goldens/conversations.json), with the bos/eos tokens the
    corpus goldens use for it;
  * the chat template of every model directory in tests/corpus/models, loaded with
    AutoTokenizer (its own special tokens), over the same inputs and conversations.

Each input is rendered with add_generation_prompt false and true, and with
continue_final_message when its last message is from the assistant. strftime_now is left out
(time-dependent); it is unit-tested against chrono instead.
"""
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import reference_render as rr  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

REF = ROOT / "tests" / "reference"
CORPUS = (ROOT / "tests" / "corpus").resolve()
DEFAULT_TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}


def load_inputs():
    inputs = json.loads((REF / "inputs.json").read_text(encoding="utf-8"))
    corpus = json.loads((CORPUS / "goldens" / "conversations.json").read_text(encoding="utf-8"))
    corpus_inputs = [dict(c, id="corpus:" + c["id"]) for c in corpus]
    return inputs, corpus_inputs


def jobs_for(inp, default_tokens):
    """The render requests made for one input."""
    tokens = inp.get("special_tokens", default_tokens)
    base = {
        "input": inp["id"],
        "messages": inp["messages"],
        "tools": inp.get("tools"),
        "documents": inp.get("documents"),
        "extra": inp.get("extra", {}),
        "special_tokens": tokens,
    }
    variants = [(False, False), (True, False)]
    if inp["messages"] and inp["messages"][-1].get("role") == "assistant":
        variants.append((False, True))
    for agp, cfm in variants:
        yield dict(base, add_generation_prompt=agp, continue_final_message=cfm)


def case_record(job, result):
    case = {
        "input": job["input"],
        "add_generation_prompt": job["add_generation_prompt"],
        "continue_final_message": job["continue_final_message"],
        "special_tokens": job["special_tokens"],
    }
    if "error" in result:
        case["error"] = result["error"]
        case["error_type"] = result["error_type"]
    else:
        case["text"] = result["text"]
        case["spans"] = result["spans"]
    return case


def render_all(template, inputs, default_tokens, tok=None):
    cases = []
    for inp in inputs:
        for job in jobs_for(inp, default_tokens):
            job = dict(job, template=template)
            cases.append(case_record(job, rr.render_job(job, tok=tok)))
    return cases


def write(name, payload):
    out = REF / "goldens" / f"{name}.json"
    out.write_text(json.dumps(payload, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    n_err = sum("error" in c for c in payload["cases"])
    print(f"{out.relative_to(ROOT)}: {len(payload['cases'])} cases ({n_err} errors)")


def main():
    inputs, corpus_inputs = load_inputs()
    (REF / "goldens").mkdir(parents=True, exist_ok=True)
    for old in (REF / "goldens").glob("*.json"):
        old.unlink()
    meta = {"transformers": transformers.__version__}

    for path in sorted((REF / "templates").glob("*.jinja")):
        with open(path, encoding="utf-8", newline="") as f:
            template = f.read()
        write(
            "mini__" + path.stem,
            dict(meta, template=f"templates/{path.name}", cases=render_all(template, inputs, DEFAULT_TOKENS)),
        )

    for path in sorted((CORPUS / "templates").glob("*.jinja")):
        golden = CORPUS / "goldens" / f"template__{path.stem}.json"
        source = json.loads(golden.read_text(encoding="utf-8"))["source"] if golden.exists() else {}
        tokens = {k: source[k] for k in ("bos_token", "eos_token") if source.get(k) is not None} or DEFAULT_TOKENS
        with open(path, encoding="utf-8", newline="") as f:
            template = f.read()
        write(
            "corpus_template__" + path.stem,
            dict(
                meta,
                template=f"corpus:templates/{path.name}",
                cases=render_all(template, inputs + corpus_inputs, tokens),
            ),
        )

    for model_dir in sorted(p for p in (CORPUS / "models").iterdir() if p.is_dir()):
        has_template = (model_dir / "chat_template.jinja").exists()
        config = model_dir / "tokenizer_config.json"
        if not has_template and not (config.exists() and json.loads(config.read_text()).get("chat_template")):
            continue
        tok = AutoTokenizer.from_pretrained(str(model_dir))
        template = tok.chat_template
        if isinstance(template, dict):
            template = template["default"]
            tok.chat_template = template
        tokens = dict(tok.special_tokens_map)
        cases = []
        for inp in inputs + corpus_inputs:
            for job in jobs_for(inp, tokens):
                if "special_tokens" in inp:
                    # model goldens always use the model's own tokens
                    job["special_tokens"] = tokens
                job = dict(job, template=template)
                cases.append(case_record(job, rr.render_job(job, tok=tok)))
        write(
            "corpus_model__" + model_dir.name,
            dict(meta, template=f"corpus:models/{model_dir.name}", template_source=template, cases=cases),
        )


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
