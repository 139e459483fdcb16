#!/usr/bin/env bash
# The README's path on a real model behind a slow real server, timed: llama-cpp-python serving a
# GGUF (default: the real Gemma 3 270M with its chat template, where logprobs cost 0.4 s a token
# on a 262k vocabulary), then `chatgate init --target`, `gate --update` and three `gate` runs —
# each with one core kept busy by another process, as on a shared CI runner or staging host
# (GSS_BUSY=0: a quiet machine). One line per run: its exit code, wall seconds and the report's
# own time lines (`time: …` by stage, then the online chain's slow steps).
#
#   scripts/experiments/gate-on-a-slow-server.sh              # the real Gemma 3 file
#   scripts/experiments/gate-on-a-slow-server.sh FILE.gguf    # a file of your own
#
# Opt-in, NOT part of CI. Needs CHATGATE_LLAMA_PYTHON (scripts/servers/install-llama-cpp-python.sh)
# and, for the default file, CHATGATE_REAL_MODELS (scripts/models/install-real-weights.sh).
# CHATGATE_BIN (default target/release/chatgate); GSS_OUT (default a new temp dir) keeps the
# suite, the reports and the server's log.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(realpath "${CHATGATE_BIN:-target/release/chatgate}")
py=${CHATGATE_LLAMA_PYTHON:?set CHATGATE_LLAMA_PYTHON (scripts/servers/install-llama-cpp-python.sh prints it)}
out=${GSS_OUT:-$(mktemp -d /tmp/chatgate-gate-on-a-slow-server.XXXXXX)}
busy=${GSS_BUSY:-1}
gguf=${1:-${CHATGATE_REAL_MODELS:?set CHATGATE_REAL_MODELS or name a GGUF}/gemma-3-270m-it-template.gguf}
name=$(basename "$gguf" .gguf)
cp "$gguf" "$out/$name.gguf"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$py" -m llama_cpp.server --model "$out/$name.gguf" --model_alias "$name" --host 127.0.0.1 --port "$port" \
  --n_ctx 4096 >"$out/llama-cpp-python.log" 2>&1 &
server=$!
burner=
cleanup() {
  [ -n "$burner" ] && kill "$burner" 2>/dev/null
  kill "$server" 2>/dev/null
  wait 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1 && break; sleep 0.2; done
(cd "$out" && "$bin" init suite.toml --model "$name.gguf" --target "http://127.0.0.1:$port" >init.log 2>&1)

# run LABEL ARGS...: one gate, timed, with the other work running when asked.
run() {
  local label=$1
  shift
  if [ "$busy" = 1 ]; then
    python3 -c 'while True: pass' &
    burner=$!
  fi
  local t0 rc=0
  t0=$(date +%s.%N)
  (cd "$out" && "$bin" gate suite.toml --no-progress "$@" >"$label.out" 2>&1) || rc=$?
  local took
  took=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  if [ -n "$burner" ]; then
    kill "$burner" 2>/dev/null
    wait "$burner" 2>/dev/null || true
    burner=
  fi
  echo "$label: exit $rc, $took s"
  grep -E '^(time:|  [a-z][a-z /]*: )' "$out/$label.out" || true
}
run update --update
run gate-1
run gate-2
run gate-3
echo "(suite, reports and server log: $out)"
