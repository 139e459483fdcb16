#!/usr/bin/env bash
# SFT scale benchmark (issue 13): `chatgate check` on N golden SFT rows vs the Python loop a user
# writes with transformers 5 (apply_chat_template(tokenize=True) + comparison), same rows, same run.
#
#   scripts/experiments/sft-scale.sh                          # 100000 healthy rows: both must find 0 mismatches
#   scripts/experiments/sft-scale.sh --corrupt-every 1000     # rows 1000, 2000, … corrupted: both must count 100
#   scripts/experiments/sft-scale.sh --rows 20000 --no-mp --keep
#
# Options:
#   --rows N             rows to generate (default 100000)
#   --corrupt-every K    corrupt every K-th row (scripts/fixtures/gen_sft_rows.py --corrupt-every; default 0)
#   --seed S             generator seed (default 13)
#   --no-mp              skip the second Python row (multiprocessing, 2 workers)
#   --timeout S          kill a tool that runs longer than S seconds (default 600)
#   --keep               keep the temp dir (rows, suite, lock, raw outputs)
# Environment:
#   CHATGATE_BIN                  the binary (default target/release/chatgate)
#   CHATGATE_TRANSFORMERS_PYTHON  python with transformers 5 (default
#                                 ~/.cache/chatgate/venv-transformers-serve/bin/python,
#                                 made by scripts/servers/install-transformers-serve.sh)
#   TMPDIR                        where the temp dir goes (never inside the clone)
#
# Each tool runs under /usr/bin/time -f '%e %U %S %M' (wall s, user s, sys s, peak RSS KiB; for a
# process tree %M is the largest single process, not the sum). rows/s = rows / wall, the whole
# process (start-up included). "mismatches": chatgate's count is the sum of "in N of M
# conversations" over its template.parity error findings; Python's is rows whose input_ids or
# assistant_mask differ. Exit 0 when both tools agree with the expected count, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)

rows=100000 corrupt=0 seed=13 mp=1 limit=600 keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) rows=$2; shift 2 ;;
    --corrupt-every) corrupt=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --no-mp) mp=0; shift ;;
    --timeout) limit=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "sft-scale.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

bin=${CHATGATE_BIN:-$repo/target/release/chatgate}
py=${CHATGATE_TRANSFORMERS_PYTHON:-$HOME/.cache/chatgate/venv-transformers-serve/bin/python}
model=$repo/models/tiny-chat
[ -x "$bin" ] || { echo "sft-scale.sh: no chatgate binary at $bin (cargo build --release, or set CHATGATE_BIN)" >&2; exit 2; }
[ -x "$py" ] || { echo "sft-scale.sh: no python at $py (scripts/servers/install-transformers-serve.sh, or set CHATGATE_TRANSFORMERS_PYTHON)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "sft-scale.sh: needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/chatgate-sft-scale.XXXXXX")
case "$work" in "$repo"/*) echo "sft-scale.sh: TMPDIR is inside the clone" >&2; exit 2 ;; esac
if [ "$keep" = 1 ]; then trap 'echo "kept: $work"' EXIT; else trap 'rm -rf "$work"' EXIT; fi

echo "== machine"
echo "nproc $(nproc); load average (1/5/15 min) $(cut -d' ' -f1-3 /proc/loadavg); $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); $(awk '/MemTotal/ {printf "%.1f GiB RAM", $2/1048576}' /proc/meminfo)"
echo "chatgate: $bin ($("$bin" --version), git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ', dirty tree'))"
echo "python: $("$py" -c 'import sys, transformers, tokenizers; print(sys.version.split()[0], "transformers", transformers.__version__, "tokenizers", tokenizers.__version__)')"

echo "== generate $rows rows (seed $seed, corrupt every ${corrupt:-0})"
"$py" scripts/fixtures/gen_sft_rows.py "$work/sft.jsonl" --rows "$rows" --seed "$seed" --corrupt-every "$corrupt" --model "$model" 2>"$work/gen.log" \
  || { cat "$work/gen.log" >&2; exit 2; }
expected=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["corrupted_rows"])' "$work/sft.jsonl.meta.json")
echo "$(du -h "$work/sft.jsonl" | cut -f1) in $work/sft.jsonl; $(cat "$work/gen.log")"

# The offline parts of suites/smoke.toml, absolute paths; no [target]/[replay]/[latency], so
# `check` runs only the offline chain. The lock pins the weights/tokenizer/template (without one,
# check reports lock warnings).
cat > "$work/suite.toml" <<EOF
name = "sft-scale"

[model]
dir = "$model"
add_special_tokens = false

[sft]
golden = "$work/sft.jsonl"

[generation]
do_sample = true
temperature = 0.7
top_p = 0.9

[lock]
path = "suite.lock.json"
EOF
"$bin" lock "$work/suite.toml" >"$work/lock.log" 2>&1 || { cat "$work/lock.log" >&2; exit 2; }

# run NAME CMD...: stdout → $work/NAME.out, stderr → $work/NAME.err, /usr/bin/time → $work/NAME.time
run() {
  local name=$1; shift
  echo "== $name (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  local rc=0
  /usr/bin/time -o "$work/$name.time" -f '%e %U %S %M' timeout "$limit" "$@" >"$work/$name.out" 2>"$work/$name.err" || rc=$?
  echo "$rc" > "$work/$name.rc"
  echo "exit $rc; wall/user/sys/maxrss-KiB: $(tail -n1 "$work/$name.time")"
  [ "$rc" = 124 ] && echo "   killed after ${limit}s"
  [ "$rc" -gt 1 ] && { sed 's/^/   /' "$work/$name.err" | tail -n 5; }
  return 0
}

run chatgate "$bin" check "$work/suite.toml" --format json
run python "$py" scripts/experiments/sft_scale_transformers.py "$model" "$work/sft.jsonl"
tools="chatgate python"
if [ "$mp" = 1 ]; then
  run python-mp2 "$py" scripts/experiments/sft_scale_transformers.py "$model" "$work/sft.jsonl" --workers 2
  tools="$tools python-mp2"
fi
echo "== after: load average $(cut -d' ' -f1-3 /proc/loadavg)"

"$py" - "$work" "$rows" "$expected" $tools <<'EOF'
import json, re, sys
work, rows, expected, tools = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
label = {"chatgate": "chatgate check", "python": "transformers loop (1 proc)",
         "python-mp2": "transformers loop (Pool 2)"}
table, ok = [], True
for t in tools:
    wall, user, sys_, kib = open(f"{work}/{t}.time").read().split("\n")[-2].split()[:4] \
        if open(f"{work}/{t}.time").read().strip() else ("nan",) * 4
    rc = int(open(f"{work}/{t}.rc").read())
    out = open(f"{work}/{t}.out").read()
    found, note = None, ""
    try:
        doc = json.loads(out)
        if t == "chatgate":
            errors = [f for f in doc["findings"] if f["severity"] == "error"]
            found = 0
            for f in errors:
                m = re.search(r"in (\d+) of (\d+) conversations", f["message"])
                if f["check"] == "template.parity" and m:
                    found += int(m.group(1))
            others = [f"{f['check']}: {f['message']}" for f in errors if f["check"] != "template.parity"]
            warns = sorted({f["check"] for f in doc["findings"] if f["severity"] == "warning"})
            note = f"verdict {doc['verdict']}; {len(errors)} error finding(s)"
            for f in errors:
                if f["check"] == "template.parity":
                    ev = f.get("evidence", {})
                    note += f"; template.parity: {f['message']} (first: {ev.get('first conversation')}, " \
                            f"classes seen: {ev.get('classes seen')})"
            if others:
                note += "; errors besides template.parity: " + " | ".join(others)
            if warns:
                note += "; warnings: " + ", ".join(warns)
        else:
            found = doc["mismatches"]
            note = f"startup {doc['startup_seconds']} s, loop {doc['loop_seconds']} s " \
                   f"({doc['rows'] / doc['loop_seconds']:.0f} rows/s in the loop)"
            if doc["rows"] != rows:
                note += f"; read {doc['rows']} rows!"
    except (ValueError, KeyError):
        note = f"exit {rc}, no report" + (" (timed out)" if rc == 124 else "")
    if found != expected:
        ok = False
    table.append((label[t], float(wall), float(user) + float(sys_), int(kib) / 1024 if kib != "nan" else float("nan"), found, note))

print(f"\n{'tool':<28} {'rows':>7} {'wall s':>8} {'rows/s':>9} {'CPU s':>8} {'peak RSS MiB':>13} {'mismatches':>11}")
for name, wall, cpu, mib, found, _ in table:
    print(f"{name:<28} {rows:>7} {wall:>8.2f} {rows / wall:>9.0f} {cpu:>8.2f} {mib:>13.1f} {str(found):>11}")
print(f"expected mismatching rows: {expected}")
for name, *_, note in table:
    print(f"  {name}: {note}")
cg = table[0]
for name, wall, *_ in table[1:]:
    print(f"speed ratio chatgate vs {name}: {wall / cg[1]:.1f}x (wall)")
print("counts agree with the corrupted rows" if ok else "MISMATCH: a tool's count differs from the corrupted rows")
sys.exit(0 if ok else 1)
EOF
