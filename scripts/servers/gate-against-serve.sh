#!/usr/bin/env bash
# Start the real `chatgate serve` binary on a free loopback port (optionally with --fault NAME
# ...), run `chatgate gate SUITE --target` against it with every report format, then stop the
# server. Exits with the gate's exit code; the server's log is printed when the gate fails.
#   scripts/servers/gate-against-serve.sh suites/smoke.toml [--fault slow-decode ...]
set -uo pipefail
cd "$(dirname "$0")/../.."
suite=${1:?usage: scripts/servers/gate-against-serve.sh SUITE.toml [serve flags...]}
shift
bin=${CHATGATE_BIN:-target/release/chatgate}
out=${CHATGATE_REPORTS:-target/gate-reports}
mkdir -p "$out"
log=$(mktemp)
"$bin" serve --model models/tiny-chat --port 0 "$@" >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -f "$log"' EXIT
url=""
for _ in $(seq 1 100); do
  url=$(sed -n 's/^listening on \(http:[^ ]*\).*/\1/p' "$log" | head -n 1)
  [ -n "$url" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$url" ]; then
  echo "gate-against-serve: the server did not start:" >&2
  cat "$log" >&2
  exit 3
fi
"$bin" gate "$suite" --target "$url" --no-progress \
  --junit "$out/gate.junit.xml" --markdown "$out/gate.md" --html "$out/gate.html"
code=$?
if [ "$code" -ne 0 ]; then
  echo "gate-against-serve: gate exited $code; server log:" >&2
  cat "$log" >&2
fi
exit "$code"
