#!/usr/bin/env bash
# The GitHub Action's gate step: runs `chatgate gate`, keeps every report, and turns the JSON
# report into step outputs and the job summary. It always exits 0: the action's last step exits
# with the gate's code, after the PR comment and the pending snapshots' upload have run.
#   CHATGATE, INPUT_SUITE (required); INPUT_TARGET, INPUT_STACK, INPUT_ARGS, INPUT_REPORT_DIR,
#   INPUT_HISTORY (optional); GITHUB_OUTPUT, GITHUB_STEP_SUMMARY (set by the runner).
set -uo pipefail

: "${CHATGATE:?the chatgate binary (from the install step)}"
: "${INPUT_SUITE:?the suite input is required}"
out=${GITHUB_OUTPUT:-/dev/stdout}
summary=${GITHUB_STEP_SUMMARY:-/dev/null}
dir=${INPUT_REPORT_DIR:-chatgate-reports}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# A report left by an earlier run in the same folder must not speak for this one.
rm -f "$dir"/gate.json "$dir"/gate.junit.xml "$dir"/gate.md "$dir"/gate.html "$dir"/gate.sarif "$dir"/gate.stderr

args=(gate "$INPUT_SUITE" --no-progress --format json
  --junit "$dir/gate.junit.xml" --markdown "$dir/gate.md" --html "$dir/gate.html"
  --sarif "$dir/gate.sarif")
[ -n "${INPUT_TARGET:-}" ] && args+=(--target "$INPUT_TARGET")
[ -n "${INPUT_STACK:-}" ] && args+=(--stack "$INPUT_STACK")
[ -n "${INPUT_HISTORY:-}" ] && args+=(--history "$INPUT_HISTORY")
# More arguments, split on whitespace as a shell would, never evaluated.
read -r -a extra <<< "${INPUT_ARGS:-}"
# (macOS runners' bash 3.2 calls an empty array unbound under set -u.)
if [ -n "${INPUT_ARGS:-}" ]; then args+=("${extra[@]}"); fi

# Snapshots this run leaves pending are the .snap.new files newer than this stamp.
stamp="$dir/.started"
: > "$stamp"
"$CHATGATE" "${args[@]}" > "$dir/gate.json" 2> "$dir/gate.stderr"
code=$?
cat "$dir/gate.stderr" >&2

# verdict, first broken boundary and check from the JSON report (empty when none was written:
# bad input stops the gate before a report exists, and the message is on stderr).
read_report() {
  python3 - "$dir/gate.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1], encoding="utf-8"))
except (OSError, ValueError):
    print("\t\t")
    sys.exit(0)
fb = r.get("first_broken") or {}
print(f"{r.get('verdict', '')}\t{fb.get('boundary', '')}\t{fb.get('check', '')}")
PY
}
IFS=$'\t' read -r verdict boundary check < <(read_report)
if [ -z "$verdict" ]; then
  case $code in
    2) verdict=bad-input ;;
    3) verdict=unreachable ;;
    *) verdict=error ;;
  esac
fi

pending=$(find "$PWD" -name '*.snap.new' -newer "$stamp" -type f 2>/dev/null | sort)
rm -f "$stamp"

if [ -s "$dir/gate.md" ]; then
  cat "$dir/gate.md" >> "$summary"
else
  {
    echo "### chatgate: $verdict (exit $code)"
    echo
    echo '```'
    tail -n 40 "$dir/gate.stderr"
    echo '```'
  } >> "$summary"
fi

{
  echo "verdict=$verdict"
  echo "exit-code=$code"
  echo "first-broken-boundary=$boundary"
  echo "first-broken-check=$check"
  echo "report-json=$dir/gate.json"
  echo "junit=$dir/gate.junit.xml"
  echo "markdown=$dir/gate.md"
  echo "html=$dir/gate.html"
  echo "sarif=$dir/gate.sarif"
  # For a name unique per suite (an artifact name may appear once per workflow run).
  echo "suite-slug=$(printf '%s' "$INPUT_SUITE" | tr -c 'A-Za-z0-9._-' '-')"
  # A multi-line output: a delimiter no path can contain.
  echo "pending-snapshots<<CHATGATE_EOF_$$"
  [ -n "$pending" ] && echo "$pending"
  echo "CHATGATE_EOF_$$"
} >> "$out"
exit 0
