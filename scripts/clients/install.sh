#!/usr/bin/env bash
# Install the real clients of the client matrix (tests/it/client_matrix.rs) outside the clone,
# keyed by their pins, and print the Python clients' interpreter:
#   - the OpenAI Python SDK and langchain-openai (PyPI; tests/clients/requirements.txt) into a
#     venv, $CHATGATE_CACHE/venv-clients-<hash of the pins>;
#   - the OpenAI Node SDK and the Vercel AI SDK (npm; tests/clients/package.json and its lock)
#     into $CHATGATE_CACHE/node-clients-<hash of the lock>, linked as tests/clients/node_modules
#     so the scripts there resolve them.
# A second run with the same pins installs nothing (~30 s the first time).
#   export CHATGATE_CLIENTS_PYTHON=$(scripts/clients/install.sh)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
clients=$repo/tests/clients
cache=${CHATGATE_CACHE:-$HOME/.cache/chatgate}
mkdir -p "$cache"

# The key is the pins' contents alone: `sha256sum FILE` prints the path too, and a key made of
# that changed with every clone's folder, so each fresh clone installed the clients again.
key() { cat "$@" | sha256sum | cut -c1-12; }

venv=$cache/venv-clients-$(key "$clients/requirements.txt")
if ! "$venv/bin/python" -c 'import openai, langchain_openai' >/dev/null 2>&1; then
  echo "installing the Python clients (tests/clients/requirements.txt) into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --no-cache-dir --quiet -r "$clients/requirements.txt" >&2
fi

node_dir=$cache/node-clients-$(key "$clients/package.json" "$clients/package-lock.json")
if [ ! -f "$node_dir/installed" ]; then
  echo "installing the Node clients (tests/clients/package.json) into $node_dir" >&2
  rm -rf "$node_dir"
  mkdir -p "$node_dir"
  cp "$clients/package.json" "$clients/package-lock.json" "$node_dir/"
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
  touch "$node_dir/installed"
fi
# A real folder there (an `npm install` run by hand) would take the link inside it.
[ -e "$clients/node_modules" ] && [ ! -L "$clients/node_modules" ] && rm -rf "$clients/node_modules"
ln -sfn "$node_dir/node_modules" "$clients/node_modules"

echo "$venv/bin/python"
