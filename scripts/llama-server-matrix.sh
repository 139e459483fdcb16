#!/usr/bin/env bash
# Opt-in (not run by CI): the family matrix's fifth column, llama.cpp's own `llama-server`.
# Builds llama-server once (scripts/llama-server.sh's cached build in target/llama-server/, ~12
# minutes on 2 cores) unless CHATGATE_LLAMA_SERVER names a binary, then runs the stand-ins of
# every family through init --stack llama.cpp, gate --update and three gates on it, and the
# faults on the fault rows. The README block <!-- family-llama-server --> must equal the run;
#   CHATGATE_BLESS=1 scripts/llama-server-matrix.sh     rewrites it (review the diff first).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${CHATGATE_LLAMA_SERVER:-$PWD/target/llama-server/build/bin/llama-server}
if [ ! -x "$bin" ]; then
  # llama-server.sh builds it, then gates tiny-chat on it: a first proof that the build serves.
  scripts/llama-server.sh
fi
CHATGATE_LLAMA_SERVER=$bin cargo test --release --features llama-server --test it family_on_llama_server -- --nocapture
