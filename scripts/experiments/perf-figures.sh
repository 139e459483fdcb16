#!/usr/bin/env bash
# Reproduce the gate and client figures of docs/benchmarks.md (besides the criterion benches):
#   1. gate wall time for suites/smoke.toml (the main job, in-process), 5 runs;
#   2. TTFT measured by chatgate vs a plain Python client (httpx) against the same
#      llama-cpp-python server in the same run, interleaved, 3 rounds;
#   3. the load generator's achieved vs requested rate and its send-time error, open loop at
#      50 req/s (Poisson, seeded) against `chatgate serve`.
# Needs target/release/chatgate and llama-cpp-python (CHATGATE_LLAMA_PYTHON, with httpx).
set -euo pipefail
cd "$(dirname "$0")/../.."
export CANDLE_NUM_THREADS=1 RAYON_NUM_THREADS=1
bin=target/release/chatgate
py=${CHATGATE_LLAMA_PYTHON:-.venv-llama/bin/python}
"$py" -c "import httpx" 2>/dev/null || "$py" -m pip install --quiet httpx==0.28.1
free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "1. gate wall time, suites/smoke.toml in-process (5 runs, ms):"
for _ in 1 2 3 4 5; do
  s=$(date +%s%N); "$bin" gate suites/smoke.toml --no-progress >/dev/null; e=$(date +%s%N)
  echo $(( (e - s) / 1000000 ))
done | tee /tmp/chatgate-walls | tr '\n' ' '; echo; echo "   median $(median < /tmp/chatgate-walls) ms"

port=$(free_port)
"$py" -m llama_cpp.server --model models/tiny-chat/model.gguf --model_alias tiny-chat --host 127.0.0.1 \
  --port "$port" --n_ctx 2048 --seed 42 --n_threads 1 --n_threads_batch 1 --interrupt_requests False \
  >/tmp/perf-llama.log 2>&1 &
lpid=$!
trap 'kill $lpid ${spid:-} 2>/dev/null || true' EXIT
until curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null; do sleep 0.2; done
echo "2. TTFT against llama-cpp-python on 127.0.0.1:$port (p50 ms over the 11 greedy smoke prompts x 3):"
for round in 1 2 3; do
  cg=$("$bin" bench suites/llama-cpp-python.toml --target "http://127.0.0.1:$port" --format json \
    | "$py" -c 'import json,sys; d=json.load(sys.stdin); print([r for r in d["latency"] if r["metric"]=="ttft"][0]["p50"])')
  pc=$("$py" scripts/experiments/ttft_python_client.py "http://127.0.0.1:$port" tiny-chat suites/smoke.prompts.jsonl 3 \
    '{"repeat_penalty": 1.0}' | "$py" -c 'import json,sys; print(json.load(sys.stdin)["p50"])')
  echo "   round $round: chatgate $cg ms, python httpx $pc ms"
done

port2=$(free_port)
"$bin" serve --model models/tiny-chat --port "$port2" >/tmp/perf-serve.log 2>&1 &
spid=$!
until curl -sf "http://127.0.0.1:$port2/health" >/dev/null; do sleep 0.2; done
echo "3. open loop, 50 req/s Poisson (seed 7), 200 requests, against chatgate serve:"
"$bin" bench suites/smoke.toml --target "http://127.0.0.1:$port2" --mode load --rate 50 --requests 200 \
  --arrival poisson --seed 7 --format text | tail -n 1
