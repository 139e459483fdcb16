"""A real client of the client matrix: LangChain's ChatOpenAI (PyPI `langchain-openai`), as an
app built on LangChain uses it.

    python langchain_openai.py

Runs a plain chat, a streamed chat and a streamed tool call against OPENAI_BASE_URL (which
`chatgate client-probe` points at its proxy), prints what it read as one JSON line per call, and
for a call that raises prints `FAILED <call>: <error>` to stderr and exits 1 at the end. Used by
tests/it/client_matrix.rs; the versions are pinned in tests/clients/requirements.txt.
"""
import json
import os
import sys

from langchain_openai import ChatOpenAI

MESSAGES = [("user", "What is the weather in Zürich?")]
TOOL = {"type": "function", "function": {
    "name": "get_weather",
    "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}}

llm = ChatOpenAI(model="model", base_url=os.environ["OPENAI_BASE_URL"], max_retries=0, timeout=30,
                 max_tokens=48)


def chat():
    return {"content": llm.invoke(MESSAGES).content}


def stream():
    return {"content": "".join(chunk.content for chunk in llm.stream(MESSAGES))}


def tool_stream():
    acc = None
    for chunk in llm.bind_tools([TOOL]).stream(MESSAGES):
        acc = chunk if acc is None else acc + chunk
    calls = acc.tool_calls if acc is not None else []
    if not calls:
        raise RuntimeError("the stream carried no tool call")
    return {"tool_calls": [{"name": c["name"], "arguments": c["args"]} for c in calls]}


failed = False
for name, call in [("chat", chat), ("stream", stream), ("tool-stream", tool_stream)]:
    try:
        print(json.dumps({name: call()}, ensure_ascii=False), flush=True)
    except Exception as e:  # the probe reports the client's own error, whatever it is
        print(f"FAILED {name}: {type(e).__name__}: {e}".replace("\n", " "), file=sys.stderr, flush=True)
        failed = True
sys.exit(1 if failed else 0)
