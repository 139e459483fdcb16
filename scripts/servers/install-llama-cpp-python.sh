#!/usr/bin/env bash
# Install llama-cpp-python[server]==0.3.36 (a real third-party OpenAI-compatible server the tests
# run the gate against) into a venv outside the clone, and print that venv's python. A venv that
# already imports it is reused, so only the first run on a machine pays the ~4-5 min build.
#   scripts/servers/install-llama-cpp-python.sh            # prints the python path
#   export CHATGATE_LLAMA_PYTHON=$(scripts/servers/install-llama-cpp-python.sh)
# CHATGATE_LLAMA_VENV overrides the venv's folder. The tests, scripts/servers/llama-cpp-python.sh and
# .ci/run all default to the same folder.
set -euo pipefail
venv=${CHATGATE_LLAMA_VENV:-$HOME/.cache/chatgate/venv-llama-cpp-python-0.3.36}
if ! "$venv/bin/python" -c "import llama_cpp.server" >/dev/null 2>&1; then
  echo "installing llama-cpp-python[server]==0.3.36 into $venv (a few minutes: it builds llama.cpp)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  # Lean flags (no -march=native, no llava): portable and about half the build time.
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" \
    "$venv/bin/pip" install --no-cache-dir --quiet 'llama-cpp-python[server]==0.3.36' >&2
fi
echo "$venv/bin/python"
