#!/usr/bin/env bash
# The in-process model against llama.cpp on the same GGUF, in one run: for each file, the suite
# `chatgate init --model FILE` writes, benched twice with `chatgate bench` (same prompts, same
# client, same definitions) — once in-process (candle, one thread) and once against
# llama-cpp-python serving the same file (one thread for decode and prefill) — and one line per
# file: output tokens/s, TTFT p50 and TPOT p50 of each, and chatgate's speed as a fraction of
# llama.cpp's.
#
#   scripts/experiments/in-process-vs-llama-cpp.sh                   # the real weights' files
#   scripts/experiments/in-process-vs-llama-cpp.sh A.gguf B.gguf     # files of your own
#
# Opt-in, NOT part of CI. Needs CHATGATE_LLAMA_PYTHON (scripts/servers/install-llama-cpp-python.sh)
# and, for the default files, CHATGATE_REAL_MODELS (scripts/models/install-real-weights.sh; the
# Gemma 3 one carries its chat template, SmolLM2's its own). CHATGATE_BIN (default
# target/release/chatgate); IPL_OUT (default a new temp dir) keeps each run's output.
# Columns: tok/s = output tokens per second over the bench (closed loop, the suite's latency
# prompts); TTFT and TPOT p50 in ms, as chatgate defines them (docs/design/METRICS.md); × =
# in-process tok/s ÷ llama.cpp tok/s (≥ 1 is faster), and llama.cpp's TTFT ÷ in-process TTFT.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(realpath "${CHATGATE_BIN:-target/release/chatgate}")
py=${CHATGATE_LLAMA_PYTHON:?set CHATGATE_LLAMA_PYTHON (scripts/servers/install-llama-cpp-python.sh prints it)}
out=${IPL_OUT:-$(mktemp -d /tmp/chatgate-in-process-vs-llama-cpp.XXXXXX)}
if [ $# -eq 0 ]; then
  real=${CHATGATE_REAL_MODELS:?set CHATGATE_REAL_MODELS (scripts/models/install-real-weights.sh prints it) or name GGUF files}
  set -- "$real/gemma-3-270m-it-template.gguf" "$real/smollm2-135m-instruct-q4_0.gguf" "$real/smollm2-135m-instruct-q4_1.gguf"
fi
export CANDLE_NUM_THREADS=1 RAYON_NUM_THREADS=1

# figure FILE WHAT: one figure of `bench --format json` (tok/s, or a metric's p50 in ms).
figure() {
  python3 - "$@" <<'PY' 2>/dev/null || echo -
import json, sys
doc = json.load(open(sys.argv[1]))
if sys.argv[2] == "tok/s":
    print(f"{doc['totals']['output_throughput']:.1f}")
else:
    print(f"{next(r['p50'] for r in doc['latency'] if r['metric'] == sys.argv[2]):.1f}")
PY
}

printf '%-34s | %-23s | %-23s | %s\n' "file" "in-process tok/s TTFT TPOT" "llama.cpp tok/s TTFT TPOT" "× tok/s, × TTFT"
for gguf in "$@"; do
  name=$(basename "$gguf" .gguf)
  dir=$out/$name
  mkdir -p "$dir"
  cp "$gguf" "$dir/$name.gguf"
  (cd "$dir" && "$bin" init suite.toml --model "$name.gguf" >init.log 2>&1) || { echo "$name: init failed (see $dir/init.log)" >&2; continue; }
  (cd "$dir" && "$bin" bench suite.toml --no-progress --format json >in-process.json 2>in-process.err) || true
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  model=$(sed -n 's/^model = "\(.*\)"$/\1/p' "$dir/suite.toml" | tail -1)
  "$py" -m llama_cpp.server --model "$dir/$name.gguf" --model_alias "$model" --host 127.0.0.1 --port "$port" \
    --n_threads 1 --n_threads_batch 1 --n_ctx 2048 >"$dir/llama-cpp-python.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1 && break; sleep 0.2; done
  (cd "$dir" && "$bin" bench suite.toml --target "http://127.0.0.1:$port" --no-progress --format json >llama-cpp.json 2>llama-cpp.err) || true
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
  ours_tps=$(figure "$dir/in-process.json" tok/s); theirs_tps=$(figure "$dir/llama-cpp.json" tok/s)
  o_ttft=$(figure "$dir/in-process.json" ttft); o_tpot=$(figure "$dir/in-process.json" tpot)
  t_ttft=$(figure "$dir/llama-cpp.json" ttft); t_tpot=$(figure "$dir/llama-cpp.json" tpot)
  ratio=$(python3 -c "
try: print(f'{float(\"$ours_tps\") / float(\"$theirs_tps\"):.2f}, {float(\"$t_ttft\") / float(\"$o_ttft\"):.2f}')
except Exception: print('-')")
  printf '%-34s | %6s %7s %7s | %6s %7s %7s | %s\n' "$name" "$ours_tps" "$o_ttft" "$o_tpot" "$theirs_tps" "$t_ttft" "$t_tpot" "$ratio"
done
echo "(each run's output: $out)"
