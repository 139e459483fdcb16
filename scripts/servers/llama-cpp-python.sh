#!/usr/bin/env bash
# Run a suite's gate against a real llama-cpp-python server serving a GGUF on a free loopback
# port; the server is started and stopped here, and its log is printed when the gate fails.
#   scripts/servers/llama-cpp-python.sh [SUITE.toml] [--model FILE.gguf] [-- extra server flags]
# Needs llama-cpp-python[server]==0.3.36: scripts/servers/install-llama-cpp-python.sh installs it (as
# .ci/run does) into the venv this script uses by default; CHATGATE_LLAMA_PYTHON names another.
set -uo pipefail
cd "$(dirname "$0")/../.."
suite=suites/llama-cpp-python.toml
model=models/tiny-chat/model.gguf
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then suite=$1; shift; fi
if [ "${1:-}" = "--model" ]; then model=$2; shift 2; fi
[ "${1:-}" = "--" ] && shift
python=${CHATGATE_LLAMA_PYTHON:-${CHATGATE_LLAMA_VENV:-$HOME/.cache/chatgate/venv-llama-cpp-python-0.3.36}/bin/python}
bin=${CHATGATE_BIN:-target/release/chatgate}
out=${CHATGATE_REPORTS:-target/gate-reports/llama-cpp-python}
mkdir -p "$out"
port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') || {
  echo "llama-cpp-python.sh: no python at $python (set CHATGATE_LLAMA_PYTHON)" >&2; exit 2; }
log="$out/server.log"
"$python" -m llama_cpp.server --model "$model" --model_alias tiny-chat --host 127.0.0.1 --port "$port" \
  --n_ctx 2048 --seed 42 --n_threads 1 --n_threads_batch 1 --interrupt_requests False "$@" >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null' EXIT
ready=""
for _ in $(seq 1 300); do
  if curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1; then ready=1; break; fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
if [ -z "$ready" ]; then
  echo "llama-cpp-python.sh: the server did not become ready:" >&2
  cat "$log" >&2
  exit 3
fi
"$bin" gate "$suite" --target "http://127.0.0.1:$port" --no-progress \
  --junit "$out/gate.junit.xml" --markdown "$out/gate.md" --html "$out/gate.html"
code=$?
if [ "$code" -ne 0 ]; then
  echo "llama-cpp-python.sh: gate exited $code; server log ($log):" >&2
  cat "$log" >&2
fi
exit "$code"
