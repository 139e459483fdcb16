#!/usr/bin/env bash
# The fingerprint's reference at real sizes (docs/checkpoint-at-scale.md): random bf16 weights at
# the exact shapes of Qwen2.5-0.5B, Llama-3.2-1B and Llama-3.2-3B (scripts/experiments/real_shape.py,
# GBs: written under $OUT, not committed), then for each local reference kind, in a process of its
# own, `cargo bench --bench fingerprint` (the teacher-forced pass a gate pays per probe, the load
# time, the estimate) under /usr/bin/time for its peak memory.
#   scripts/experiments/fingerprint-at-scale.sh [OUT]        (default /tmp/chatgate-shapes; ~40 min, 13 GB RAM at 3B)
# Needs the transformers serve venv (torch) of scripts/servers/install-transformers-serve.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/chatgate-shapes}
python=${CHATGATE_TRANSFORMERS_VENV:-$HOME/.cache/chatgate/venv-transformers-serve}/bin/python
mkdir -p "$out"
shapes=()
for shape in qwen2.5-0.5b llama-3.2-1b llama-3.2-3b; do
  [ -f "$out/$shape/model.safetensors" ] || "$python" scripts/experiments/real_shape.py --shape "$shape" --seed 0 --out "$out/$shape"
  shapes+=("$out/$shape")
done
for shape in "${shapes[@]}"; do
  # The Q8_0 GGUF is made once, beside the shape (model-q8_0.gguf), outside the measured runs.
  [ -f "$shape/model-q8_0.gguf" ] || CHATGATE_BENCH_SHAPES=$shape CHATGATE_BENCH_KINDS=q8_0 \
    cargo bench --locked --bench fingerprint -- --list >/dev/null
  for kind in float q8_0; do
    echo "== $(basename "$shape") $kind"
    CHATGATE_BENCH_SHAPES=$shape CHATGATE_BENCH_KINDS=$kind \
      /usr/bin/time -f "peak RSS %M KB, wall %e s (whole bench process)" \
      cargo bench --locked --bench fingerprint -- "$(basename "$shape")/$kind" 2>&1 \
      | grep -E "parameters held as|time:|peak RSS" || true
  done
done
