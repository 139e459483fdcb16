"""TTFT as a plain Python client measures it, for comparison with chatgate's own figure.

Streams each prompt of a chatgate prompt JSONL to an OpenAI-compatible server with httpx and
records TTFT = first SSE event that carries content − just before the request is sent (the same
definition as METRICS.md). Prints one JSON object: {"ttft_ms": [...], "p50": ..., "p90": ...}.

    python scripts/experiments/ttft_python_client.py URL MODEL PROMPTS.jsonl REPEATS [EXTRA_JSON]
"""
import json
import sys
import time

import httpx


def prompts(path):
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("//"):
                continue
            row = json.loads(line)
            if "sampled" in row.get("tags", []):
                continue
            msgs = row.get("messages") or [{"role": "user", "content": row["prompt"]}]
            yield row, msgs


def percentile(xs, p):
    xs = sorted(xs)
    h = (len(xs) - 1) * p
    lo = int(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def main():
    url, model, path, repeats = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    extra = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    ttfts = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(repeats):
            for row, msgs in prompts(path):
                body = {"model": model, "messages": msgs, "stream": True, "temperature": 0,
                        "max_tokens": row.get("max_tokens", 48), "seed": row.get("seed", 0)}
                if row.get("stop"):
                    body["stop"] = row["stop"]
                body.update(extra)
                t_send = time.perf_counter()
                with client.stream("POST", "/v1/chat/completions", json=body) as r:
                    first = None
                    for line in r.iter_lines():
                        if not line.startswith("data:"):
                            continue
                        data = line[5:].strip()
                        if data == "[DONE]":
                            break
                        chunk = json.loads(data)
                        for c in chunk.get("choices", []):
                            if (c.get("delta") or {}).get("content") and first is None:
                                first = time.perf_counter()
                if first is not None:
                    ttfts.append((first - t_send) * 1e3)
    print(json.dumps({"client": "python httpx " + httpx.__version__, "n": len(ttfts),
                      "p50": percentile(ttfts, 0.5), "p90": percentile(ttfts, 0.9), "ttft_ms": ttfts}))


if __name__ == "__main__":
    main()
