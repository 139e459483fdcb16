#!/usr/bin/env bash
# Start `transformers serve` (the venv of scripts/servers/install-transformers-serve.sh) on a model
# folder in the background, on CPU, offline, on loopback; wait until GET /health answers 200;
# print the base URL on stdout and leave the server running. See
# docs/research/transformers-serve.md for its quirks (no [DONE], /v1/models never lists the
# model, "model" must be the served path or absent, 422 on unknown fields).
#   url=$(scripts/servers/transformers-serve.sh /tmp/tsm/qwen/model [PORT])   # PORT: default a free one
#   ... ; kill "$(cat "$TS_PIDFILE")"        # the pid is also printed on stderr
# Env: CHATGATE_TRANSFORMERS_VENV (venv folder), TS_LOG (server log, default a temp file),
# TS_PIDFILE (default $TS_LOG.pid), TS_TIMEOUT (seconds to wait, default 180).
set -euo pipefail
dir=$(cd "${1:?usage: scripts/servers/transformers-serve.sh MODEL_DIR [PORT]}" && pwd)
venv=${CHATGATE_TRANSFORMERS_VENV:-$HOME/.cache/chatgate/venv-transformers-serve}
port=${2:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
log=${TS_LOG:-$(mktemp -t transformers-serve.XXXXXX.log)}
pidfile=${TS_PIDFILE:-$log.pid}
# An empty private HF cache: no hub access, and /v1/models answers 200 [] instead of 500.
hf_home=$(mktemp -d -t ts-hf.XXXXXX) && mkdir -p "$hf_home/hub"
# The model is addressed by its absolute path: requests must send that path as "model" (or none).
HF_HOME=$hf_home HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} \
  nohup "$venv/bin/transformers" serve "$dir" --device cpu --host 127.0.0.1 --port "$port" \
  --default-seed 42 >"$log" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$pidfile"
# Startup is 13-30 s on a busy 2-core machine (torch import + model load before the socket opens).
for _ in $(seq 1 $((${TS_TIMEOUT:-180} * 2))); do
  if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
    echo "transformers-serve: pid $pid, log $log" >&2
    echo "http://127.0.0.1:$port"
    exit 0
  fi
  kill -0 "$pid" 2>/dev/null || { echo "transformers-serve: the server exited:" >&2; cat "$log" >&2; exit 3; }
  sleep 0.5
done
echo "transformers-serve: no answer from /health after ${TS_TIMEOUT:-180} s; stopping it:" >&2
kill "$pid" 2>/dev/null || true
cat "$log" >&2
exit 3
