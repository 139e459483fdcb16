#!/usr/bin/env bash
# The real Gemma 3 270M weights (install-real-weights.sh's gemma-3-270m-it-template.gguf) as a
# transformers checkpoint, cached beside them, and print the folder:
#   gemma-3-270m-it-hf/   Gemma3ForCausalLM (model_type gemma3_text), bf16 safetensors,
#                         config.json, tokenizer.json and the chat template, written by
#                         transformers' own GGUF loader (gguf_to_transformers.py): the Q4_K_M
#                         weights dequantized, as a user who exports a fine-tune to safetensors has
# usage: install-real-transformers.sh TRANSFORMERS_PYTHON   (CHATGATE_REAL_MODELS: the weights)
set -euo pipefail
py=${1:?usage: install-real-transformers.sh TRANSFORMERS_PYTHON}
dir=${CHATGATE_REAL_MODELS:?set CHATGATE_REAL_MODELS (install-real-weights.sh prints it)}
here=$(cd "$(dirname "$0")" && pwd)
src=$dir/gemma-3-270m-it-template.gguf
out=$dir/gemma-3-270m-it-hf
# Rebuilt when the GGUF or the converter changes (the stamp holds both hashes).
stamp="$(sha256sum "$src" "$here/gguf_to_transformers.py" | cut -d' ' -f1 | tr '\n' ' ')"
if [ ! -s "$out/model.safetensors" ] || [ "$(cat "$out/.stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "converting $src to a transformers checkpoint (~1 min)" >&2
  rm -rf "$out.part"
  # gguf-py, which transformers' GGUF loader imports, from install-real-weights.sh's venv.
  gguf_venv=$(dirname "$dir")/venv-gguf-0.19.0
  [ -x "$gguf_venv/bin/gguf-new-metadata" ] || {
    "$py" -m venv "$gguf_venv" >&2
    "$gguf_venv/bin/pip" install --quiet 'gguf==0.19.0' >&2
  }
  gguf_site=$(ls -d "$gguf_venv"/lib/python3*/site-packages)
  PYTHONPATH=$gguf_site "$py" "$here/gguf_to_transformers.py" "$src" "$out.part" \
    >"$dir/gguf-to-transformers.log" 2>&1 || { tail -20 "$dir/gguf-to-transformers.log" >&2; exit 1; }
  echo "$stamp" >"$out.part/.stamp"
  rm -rf "$out"
  mv "$out.part" "$out"
fi
echo "$out"
