#!/usr/bin/env bash
# Opt-in (not run by CI): the family matrix's fifth column, llama.cpp's own `llama-server`.
# Builds llama-server once (scripts/servers/llama-server.sh's build, cached outside the clone, ~12
# minutes on 2 cores) unless CHATGATE_LLAMA_SERVER names a binary, then runs the stand-ins of
# every family through init --stack llama.cpp, gate --update and three gates on it, and the
# faults on the fault rows, and llama-server's own /metrics read by a capacity step
# (family_matrix::llama_server_metrics_agree_with_the_client). The block <!-- family-llama-server --> of docs/matrices/family.md must equal the run;
#   CHATGATE_BLESS=1 scripts/servers/llama-server-matrix.sh     rewrites it (review the diff first).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${CHATGATE_LLAMA_SERVER:-$(scripts/servers/llama-server.sh --build-only)}
CHATGATE_LLAMA_SERVER=$bin cargo nextest run --release --features llama-server --no-capture \
  -E 'test(/^family_matrix::.*::llama_server$/) | test(family_matrix::llama_server_metrics_agree_with_the_client)'
