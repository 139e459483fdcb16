#!/usr/bin/env bash
# Long prompts in-process against llama.cpp on the same GGUF, in one run: `chatgate serve` (the
# in-process model, one thread) and llama-cpp-python (one thread for prefill and decode) serve
# the file side by side, and each gets the same completions request — a prompt of N tokens,
# one output token, greedy — three times per length; the line per length is each server's
# median wall time (which is its prefill: one token out) and the in-process speed as a multiple
# of llama.cpp's (its time ÷ ours).
#
#   scripts/experiments/long-prompt-prefill.sh                    # Gemma 3 270M (real weights)
#   scripts/experiments/long-prompt-prefill.sh FILE.gguf [N...]   # a file of your own, lengths
#
# Opt-in, NOT part of CI. Needs CHATGATE_LLAMA_PYTHON (scripts/servers/install-llama-cpp-python.sh)
# and, for the default file, CHATGATE_REAL_MODELS (scripts/models/install-real-weights.sh).
# CHATGATE_BIN (default target/release/chatgate). The prompt is "Run K:" (a new K each request:
# llama-cpp-python reuses its cache for a repeated prompt) and the word "hello" N times; its token
# count is what each server's `usage.prompt_tokens` says, printed beside N.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(realpath "${CHATGATE_BIN:-target/release/chatgate}")
py=${CHATGATE_LLAMA_PYTHON:?set CHATGATE_LLAMA_PYTHON (scripts/servers/install-llama-cpp-python.sh prints it)}
gguf=${1:-${CHATGATE_REAL_MODELS:?set CHATGATE_REAL_MODELS or name a GGUF}/gemma-3-270m-it-template.gguf}
shift || true
lengths=("$@")
[ ${#lengths[@]} -gt 0 ] || lengths=(500 1000 2000 4000)
out=$(mktemp -d /tmp/chatgate-long-prompt.XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

ours=$(free_port)
CANDLE_NUM_THREADS=1 RAYON_NUM_THREADS=1 "$bin" serve --model "$gguf" --port "$ours" --model-name m \
  >"$out/chatgate.log" 2>&1 &
ours_pid=$!
theirs=$(free_port)
"$py" -m llama_cpp.server --model "$gguf" --model_alias m --host 127.0.0.1 --port "$theirs" \
  --n_ctx 8192 --n_threads 1 --n_threads_batch 1 >"$out/llama.log" 2>&1 &
theirs_pid=$!
trap 'kill "$ours_pid" "$theirs_pid" 2>/dev/null; wait 2>/dev/null' EXIT
for port in "$ours" "$theirs"; do
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null && break
    sleep 0.2
  done
done

python3 - "$ours" "$theirs" "${lengths[@]}" <<'PY'
import json, statistics, sys, time, urllib.request
ours, theirs, lengths = sys.argv[1], sys.argv[2], [int(n) for n in sys.argv[3:]]

sent = 0

def once(port, n):
    # A new first word every time: llama-cpp-python reuses the cache of a repeated prompt.
    global sent
    sent += 1
    body = {"model": "m", "prompt": f"Run {sent}: " + "hello " * n, "max_tokens": 1,
            "temperature": 0}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    t = time.perf_counter()
    reply = json.load(urllib.request.urlopen(req, timeout=600))
    return time.perf_counter() - t, reply["usage"]["prompt_tokens"]

print("| words | prompt tokens | chatgate serve (s) | llama-cpp-python (s) | in-process speed ÷ llama.cpp's |")
print("|---:|---:|---:|---:|---:|")
for n in lengths:
    a = [once(ours, n) for _ in range(3)]
    b = [once(theirs, n) for _ in range(3)]
    ta, tb = statistics.median(x for x, _ in a), statistics.median(x for x, _ in b)
    print(f"| {n} | {a[0][1]} / {b[0][1]} | {ta:.2f} | {tb:.2f} | {tb / ta:.2f}× |")
PY
