"""A real client of the client matrix: the OpenAI Python SDK (PyPI `openai`), as an app uses it.

    python openai_python.py

Runs a plain chat, a streamed chat and a streamed tool call against OPENAI_BASE_URL (which
`chatgate client-probe` points at its proxy), prints what it read as one JSON line per call, and
for a call that raises prints `FAILED <call>: <error>` to stderr and exits 1 at the end. Used by
tests/it/client_matrix.rs; the versions are pinned in tests/clients/requirements.txt.
"""
import json
import sys

from openai import OpenAI

MESSAGES = [{"role": "user", "content": "What is the weather in Zürich?"}]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather",
    "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}}]

client = OpenAI(max_retries=0, timeout=30)


def chat():
    r = client.chat.completions.create(model="model", messages=MESSAGES, max_tokens=48)
    return {"content": r.choices[0].message.content}


def stream():
    text = ""
    for chunk in client.chat.completions.create(model="model", messages=MESSAGES, max_tokens=48, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    return {"content": text}


def tool_stream():
    calls = {}
    for chunk in client.chat.completions.create(
            model="model", messages=MESSAGES, max_tokens=48, tools=TOOLS, stream=True):
        for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            call = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            call["name"] += (tc.function and tc.function.name) or ""
            call["arguments"] += (tc.function and tc.function.arguments) or ""
    if not calls:
        raise RuntimeError("the stream carried no tool call")
    return {"tool_calls": [{"name": c["name"], "arguments": json.loads(c["arguments"])}
                           for _, c in sorted(calls.items())]}


failed = False
for name, call in [("chat", chat), ("stream", stream), ("tool-stream", tool_stream)]:
    try:
        print(json.dumps({name: call()}, ensure_ascii=False), flush=True)
    except Exception as e:  # the probe reports the client's own error, whatever it is
        print(f"FAILED {name}: {type(e).__name__}: {e}".replace("\n", " "), file=sys.stderr, flush=True)
        failed = True
sys.exit(1 if failed else 0)
