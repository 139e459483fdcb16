#!/usr/bin/env bash
# Install `transformers serve` (transformers[serving]==5.23.0 with torch==2.15.0, both from PyPI)
# into a venv outside the clone, and print that venv's python. `transformers serve` is the
# reference OpenAI-compatible server of the HF stack; it runs on CPU here (--device cpu).
# A venv that already imports the pinned versions is reused, so only the first run on a
# machine pays the install (~2.5 min, ~2.8 GB download, 5.6 GB on disk).
#   scripts/servers/install-transformers-serve.sh            # prints the python path
#   export CHATGATE_TRANSFORMERS_PYTHON=$(scripts/servers/install-transformers-serve.sh)
#   "$(dirname "$CHATGATE_TRANSFORMERS_PYTHON")/transformers" serve DIR --device cpu ...
# CHATGATE_TRANSFORMERS_VENV overrides the venv's folder.
# PyPI has no CPU-only torch for Linux x86-64: its torch is the CUDA build, and the CUDA
# libraries (nvidia-*) must be installed too, since libtorch links them even to run on CPU
# (import fails without them). No GPU or driver is needed. See
# docs/research/transformers-serve.md.
set -euo pipefail
venv=${CHATGATE_TRANSFORMERS_VENV:-$HOME/.cache/chatgate/venv-transformers-serve}
check='import importlib.metadata as m, torch, fastapi, uvicorn, openai, transformers.cli.serving.chat_completion
assert m.version("transformers") == "5.23.0" and m.version("torch") == "2.15.0", "wrong versions"'
if ! "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  echo "installing transformers[serving]==5.23.0 and torch==2.15.0 into $venv (a few minutes: ~2.8 GB download)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --no-cache-dir --quiet 'transformers[serving]==5.23.0' 'torch==2.15.0' >&2
  "$venv/bin/python" -c "$check" >&2
fi
echo "$venv/bin/python"
