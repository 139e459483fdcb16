#!/usr/bin/env bash
# Side by side: the same loads through chatgate bench, guidellm and aiperf, against a server
# whose own timestamps are the reference (scripts/experiments/known_timing_server.py: first token held
# SBS_TTFT_MS after the request body is read, then one token every SBS_ITL_MS), and each tool's
# TTFT error against the server's own hold printed per run.
#
# Opt-in, NOT part of CI: it installs guidellm and aiperf from PyPI into cached venvs outside the
# clone (~/.cache/chatgate/venv-guidellm, ~/.cache/chatgate/venv-aiperf; guidellm pulls torch
# with its CUDA wheels, ~5.5 GB, about 4 minutes the first time). Everything else is loopback.
#
#   scripts/experiments/side-by-side.sh                 # all three tools, 3 loads, 2 rounds (~8 minutes)
#   SBS_TOOLS="chatgate aiperf" SBS_REPS=1 scripts/experiments/side-by-side.sh
#
# Loads (the same for every tool): c1 = closed loop, concurrency 1; c32 = closed loop,
# concurrency 32; open = open loop at SBS_RATE req/s, constant arrivals. Every request asks for
# SBS_OSL output tokens; prompts are ~SBS_ISL tokens (they do not change the server's timing).
#
# Columns: done = requests the tool counted as successful / requests the server logged in the
# same window; rate = the tool's achieved request rate; TTFT p50/p99 = the tool's own figures;
# hold p50/p99 = the server's own (first content chunk written - body read, CLOCK_MONOTONIC);
# err = tool - server at that percentile; joined = median of per-request (tool - server) where
# the tool records an id the server logged (guidellm: response id; aiperf: X-Request-ID);
# send late = open loop only: actual send - scheduled send, each tool's own timestamps (chatgate:
# its drift; guidellm: request_start - targeted_start; aiperf keeps no scheduled time, so
# request_start_ns - (t0 + i / rate) with t0 putting its least late request on time, a lower
# bound); cpu = user+sys seconds of the tool and all its children; rss = peak RSS of the largest single
# process (GNU time %M: aiperf's and guidellm's worker processes are not summed); load avg = the
# 1-minute load average just before the run (it still carries the previous run's own load);
# other cores = CPU used during the run by everything but the tool and the server (/proc/stat).
#
# Environment: CHATGATE_BIN (default target/release/chatgate), SBS_TOOLS, SBS_REPS (2),
# SBS_N_C1 (60), SBS_N_C32 (640), SBS_N_OPEN (1000), SBS_RATE (200), SBS_OSL (16), SBS_ISL (32),
# SBS_TTFT_MS (50), SBS_ITL_MS (10), SBS_OUT (a new temp dir), SBS_CACHE (~/.cache/chatgate),
# SBS_PYTHON (a Python 3.10-3.13 for the venvs), SBS_NO_INSTALL=1 (skip a missing tool instead
# of installing it), GUIDELLM__MAX_WORKER_PROCESSES (1) and SBS_AIPERF_WORKERS (1): each tool's
# worker processes, one by default on this 2-core class of machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

bin=${CHATGATE_BIN:-target/release/chatgate}
tools=${SBS_TOOLS:-chatgate guidellm aiperf}
reps=${SBS_REPS:-2}
n_c1=${SBS_N_C1:-60}
n_c32=${SBS_N_C32:-640}
n_open=${SBS_N_OPEN:-1000}
rate=${SBS_RATE:-200}
osl=${SBS_OSL:-16}
isl=${SBS_ISL:-32}
ttft_ms=${SBS_TTFT_MS:-50}
itl_ms=${SBS_ITL_MS:-10}
cache=${SBS_CACHE:-$HOME/.cache/chatgate}
out=${SBS_OUT:-$(mktemp -d /tmp/chatgate-side-by-side.XXXXXX)}
tokenizer=$root/models/tiny-chat
guidellm_pin=0.8.1
aiperf_pin=0.13.0
seed=42

die() { echo "side-by-side: $*" >&2; exit 1; }
[ -x /usr/bin/time ] || die "/usr/bin/time (GNU time) is missing: apt-get install time"
command -v python3 >/dev/null || die "python3 is missing (the server and the analysis are stdlib Python)"
[ -f "$tokenizer/tokenizer.json" ] || die "$tokenizer/tokenizer.json is missing"
mkdir -p "$out" "$cache"
echo "side-by-side: results in $out"

# --- the tools --------------------------------------------------------------------------------

pick_python() {
  for p in ${SBS_PYTHON:-} python3.11 python3.12 python3.13 python3.10 python3; do
    command -v "$p" >/dev/null 2>&1 || continue
    "$p" -c 'import sys; sys.exit(not ((3, 10) <= sys.version_info[:2] <= (3, 13)))' 2>/dev/null \
      && { echo "$p"; return 0; }
  done
  return 1
}

# ensure_venv NAME PACKAGE VERSION: the venv's bin dir on stdout, or a reason on stderr and rc 1.
ensure_venv() {
  local venv=$cache/venv-$1 pkg=$2 ver=$3 have=""
  [ -x "$venv/bin/python" ] && have=$("$venv/bin/python" -c \
    "import importlib.metadata as m; print(m.version('$pkg'))" 2>/dev/null || true)
  if [ "$have" != "$ver" ]; then
    if [ -n "${SBS_NO_INSTALL:-}" ]; then
      echo "$pkg==$ver is not installed in $venv (SBS_NO_INSTALL is set)" >&2; return 1
    fi
    local py; py=$(pick_python) || { echo "no Python 3.10-3.13 to make $venv" >&2; return 1; }
    echo "side-by-side: installing $pkg==$ver into $venv (with $py) ..." >&2
    { [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"; } >&2 || return 1
    "$venv/bin/python" -m pip install --quiet "$pkg==$ver" >"$out/install-$pkg.log" 2>&1 || {
      echo "pip install $pkg==$ver failed (tail of $out/install-$pkg.log):" >&2
      tail -n 5 "$out/install-$pkg.log" >&2; return 1; }
  fi
  "$venv/bin/python" -m pip freeze >"$out/freeze-$pkg.txt" 2>/dev/null || true
  echo "$venv/bin"
}

declare -A ok
for t in $tools; do
  case $t in
    chatgate)
      if [ -x "$bin" ]; then ok[chatgate]=$bin
      else echo "side-by-side: SKIP chatgate: $bin is missing (cargo build --release)" >&2; fi ;;
    guidellm)
      if d=$(ensure_venv guidellm guidellm "$guidellm_pin") && [ -x "$d/guidellm" ]; then
        ok[guidellm]=$d/guidellm
      else echo "side-by-side: SKIP guidellm: it could not be installed (see above)" >&2; fi ;;
    aiperf)
      if d=$(ensure_venv aiperf aiperf "$aiperf_pin") && [ -x "$d/aiperf" ]; then
        ok[aiperf]=$d/aiperf
      else echo "side-by-side: SKIP aiperf: it could not be installed (see above)" >&2; fi ;;
    *) die "unknown tool '$t' in SBS_TOOLS (chatgate, guidellm, aiperf)" ;;
  esac
done
n_ok=0
for t in $tools; do [ -z "${ok[$t]:-}" ] || n_ok=$((n_ok + 1)); done
[ "$n_ok" -gt 0 ] || die "no tool to run"
for t in $tools; do [ -n "${ok[$t]:-}" ] && echo "  $t: ${ok[$t]}"; done
[ -n "${ok[chatgate]:-}" ] && "$bin" --version >"$out/version-chatgate.txt" 2>&1 || true

# No tool may reach a model hub: every hub URL points at a closed loopback port, so a stray call
# fails at once instead of leaving the machine. guidellm also runs in HF offline mode; aiperf does
# not, because aiperf 0.13.0 in offline mode resolves a local tokenizer *directory* through
# snapshot_download and fails (HFValidationError); given an absolute path it never asks the hub.
export HF_ENDPOINT=http://127.0.0.1:9 HF_HUB_DISABLE_TELEMETRY=1 DO_NOT_TRACK=1
export GUIDELLM__MAX_WORKER_PROCESSES=${GUIDELLM__MAX_WORKER_PROCESSES:-1}
aiperf_workers=${SBS_AIPERF_WORKERS:-1}

# --- the server -------------------------------------------------------------------------------

log=$out/server.jsonl
: >"$log"
python3 scripts/experiments/known_timing_server.py --port 0 --ready-file "$out/port" --ttft-ms "$ttft_ms" \
  --itl-ms "$itl_ms" --default-tokens "$osl" --log "$log" 2>"$out/server.err" &
spid=$!
cleanup() { kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM
for _ in $(seq 100); do [ -s "$out/port" ] && break; kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
[ -s "$out/port" ] || die "the known-timing server did not start: $(cat "$out/server.err")"
port=$(cat "$out/port")
url=http://127.0.0.1:$port
curl -sf "$url/health" >/dev/null || die "the known-timing server does not answer on $url"
echo "side-by-side: known-timing server on $url (TTFT $ttft_ms ms, ITL $itl_ms ms, $osl tokens)"

# chatgate's input: prompts of ~ISL words and one suite per closed-loop load ([latency] repeats
# x prompts = the request count; warm-up 0, like the other two tools' defaults).
python3 - "$out" "$isl" <<'EOF'
import json, sys
out, isl = sys.argv[1], int(sys.argv[2])
words = ("the was and you day went number city saw said count has capital word are big little "
         "farm likes happy all yard legs that looked sun took home near door plus").split()
with open(f"{out}/prompts.jsonl", "w") as f:
    for i in range(1000):
        f.write(json.dumps({"id": f"p{i:04d}", "prompt": " ".join(
            words[(i * 7 + j * 3) % len(words)] for j in range(isl))}) + "\n")
EOF
suite() {  # suite NAME CONCURRENCY REQUESTS -> path (requests rounded up to a multiple of 4)
  local f=$out/$1.toml per=$(( ($3 + 3) / 4 ))
  head -n "$per" "$out/prompts.jsonl" >"$out/$1.prompts.jsonl"
  cat >"$f" <<EOF
name = "side-by-side-$1"
[model]
dir = "$tokenizer"
[target]
url = "$url"
model = "stand-in"
[replay]
prompts = "$1.prompts.jsonl"
snapshots = "snapshots-$1"
max_tokens = $osl
temperature = 0.0
[latency]
repeats = 4
concurrency = $2
warmup = 0
EOF
  echo "$f"
}

# --- one run ----------------------------------------------------------------------------------

# The whole machine's busy CPU ticks and the server's own, so that the table can say how many
# cores everything else (a compiler, say) used during each run.
busy_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat; }
server_ticks() { awk '{print $14 + $15}' "/proc/$spid/stat"; }

# run TOOL LOAD REP: the tool's command, timed, with the server log's line range and the load.
run() {
  local tool=$1 load=$2 rep=$3 dir=$out/$1-$2-$3 n conc cmd=()
  mkdir -p "$dir"
  case $load in c1) n=$n_c1; conc=1 ;; c32) n=$n_c32; conc=32 ;; open) n=$n_open; conc=0 ;; esac
  case $tool in
    chatgate)
      if [ "$load" = open ]; then
        cmd=("$bin" bench "$(suite open 1 "$n")" --mode load --rate "$rate" --requests "$n"
             --arrival constant --seed "$seed" --warmup 0 --format json)
      else
        cmd=("$bin" bench "$(suite "$load" "$conc" "$n")" --format json)
      fi ;;
    guidellm)
      local profile=kind=concurrent,streams=$conc
      [ "$load" = c1 ] && profile=kind=synchronous
      [ "$load" = open ] && profile=kind=constant,rate=$rate
      cmd=(env HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 "${ok[guidellm]}" run
           --backend "kind=openai_http,target=$url,model=stand-in,request_format=/v1/chat/completions"
           --tokenizer "kind=huggingface_auto,model=$tokenizer"
           --data "kind=synthetic_text,prompt_tokens=$isl,output_tokens=$osl"
           --profile "$profile" --constraint "kind=max_requests,count=$n"
           --seed "kind=static,value=$seed" --output "kind=json,path=$dir/guidellm.json"
           --disable-console-interactive) ;;
    aiperf)
      local sched=(--concurrency "$conc")
      [ "$load" = open ] && sched=(--request-rate "$rate" --arrival-pattern constant)
      cmd=("${ok[aiperf]}" profile --model stand-in --url "$url" --endpoint-type chat --streaming
           --tokenizer "$tokenizer" --isl "$isl" --isl-stddev 0 --osl "$osl" --osl-stddev 0
           --random-seed "$seed" "${sched[@]}" --request-count "$n" --workers-max "$aiperf_workers"
           --record-processors 1 --no-server-metrics --no-gpu-telemetry --ui-type none
           --export-level records --artifact-dir "$dir/aiperf") ;;
  esac
  printf '%q ' "${cmd[@]}" >"$dir/command.txt"
  cut -d' ' -f1-3 /proc/loadavg >"$dir/loadavg"
  local before after rc=0 cpu0 cpu1
  before=$(wc -l <"$log")
  cpu0="$(busy_ticks) $(server_ticks)"
  /usr/bin/time -f '%e %U %S %M' -o "$dir/time" timeout 600 "${cmd[@]}" \
    >"$dir/stdout" 2>"$dir/stderr" || rc=$?
  cpu1="$(busy_ticks) $(server_ticks)"
  echo "$cpu0 $cpu1 $(getconf CLK_TCK)" >"$dir/cpu"
  sleep 0.5  # let the server log the last stream
  after=$(wc -l <"$log")
  echo "$before $after $rc" >"$dir/window"
  printf '  %-8s %-4s round %s: exit %s, %s server requests, load %s\n' "$tool" "$load" "$rep" \
    "$rc" "$((after - before))" "$(cat "$dir/loadavg")"
  if [ "$rc" -ne 0 ] && [ "$tool" != chatgate ]; then
    echo "    (see $dir/stderr: $(tail -n 1 "$dir/stderr" | cut -c1-160))"
  fi
}

loads="c1 c32 open"
echo "side-by-side: $reps round(s) of: c1 x $n_c1, c32 x $n_c32, open loop $rate/s x $n_open"
order=""
for t in $tools; do [ -n "${ok[$t]:-}" ] && order="$order $t"; done
for rep in $(seq "$reps"); do
  # Alternate the tool order between rounds so that a drifting background load (a compiler)
  # does not always land on the same tool.
  this=$order
  [ $((rep % 2)) -eq 0 ] && this=$(echo $order | tr ' ' '\n' | tac | tr '\n' ' ')
  for load in $loads; do
    for tool in $this; do run "$tool" "$load" "$rep"; done
  done
done

# --- the table --------------------------------------------------------------------------------

python3 - "$out" "$ttft_ms" "$rate" <<'EOF'
import json, os, sys
out, ttft, rate = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
server = [json.loads(l) for l in open(f"{out}/server.jsonl")]

def pct(xs, q):  # numpy-linear percentile
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

def chatgate(d):
    doc = json.load(open(f"{d}/stdout"))
    ttft = next(r for r in doc["latency"] if r["metric"] == "ttft")
    late = []
    if doc["mode"] == "load":
        s = doc["summary"]
        done, dur = s["requests"] - s["errors"], s["duration_s"]
        late = [(s.get("drift") or {}).get("p50"), (s.get("drift") or {}).get("p99")]
    else:
        t = doc["totals"]
        done, dur = t["requests"] - t["errors"], t["duration_s"]
    return dict(done=done, rate=done / dur if dur else None, p50=ttft["p50"], p99=ttft["p99"],
                joined={}, late=late)

def guidellm(d):
    b = json.load(open(f"{d}/guidellm.json"))["benchmarks"][0]
    m = b["metrics"]["time_to_first_token_ms"]["successful"]["percentiles"]
    ok = b["requests"]["successful"]
    joined = {r["response_id"]: r["time_to_first_token_ms"] for r in ok if r.get("response_id")}
    late = []
    if b["config"].get("strategy", {}).get("type_") in ("constant", "poisson", "async"):
        t = [r["info"]["timings"] for r in ok]  # request_start - the scheduled (targeted) start
        late = [(x["request_start"] - x["targeted_start"]) * 1000 for x in t
                if x.get("request_start") and x.get("targeted_start")]
        late = [pct(late, 50), pct(late, 99)]
    return dict(done=len(ok), rate=len(ok) / b["duration"] if b["duration"] else None,
                p50=m["p50"], p99=m["p99"], joined=joined, late=late)

def aiperf(d):
    s = json.load(open(f"{d}/aiperf/profile_export_aiperf.json"))
    joined, starts, credits = {}, [], []
    for line in open(f"{d}/aiperf/profile_export.jsonl"):
        r = json.loads(line)
        v = (r.get("metrics") or {}).get("time_to_first_token")
        if v is not None:
            joined[r["metadata"]["x_request_id"]] = v["value"]
        starts.append(r["metadata"]["request_start_ns"])
        credits.append(r["metadata"]["credit_issued_ns"])
    late = []
    if os.path.basename(d).split("-")[1] == "open":
        # constant arrivals, request i due at t0 + i / rate; aiperf records no scheduled time, so
        # t0 is chosen to put the least late request on time: a lower bound on its lateness
        off = [x / 1e6 - i * 1000 / rate for i, x in enumerate(sorted(starts))]
        late = [o - min(off) for o in off]
        late = [pct(late, 50), pct(late, 99)]
    done = int(s.get("request_count", {}).get("avg", 0)) - len(s.get("error_summary") or [])
    return dict(done=done, rate=s["request_throughput"]["avg"],
                p50=s["time_to_first_token"]["p50"], p99=s["time_to_first_token"]["p99"],
                joined=joined, late=late)

readers = {"chatgate": chatgate, "guidellm": guidellm, "aiperf": aiperf}
rows = []
for name in sorted(os.listdir(out)):
    d = f"{out}/{name}"
    if not os.path.isfile(f"{d}/window"):
        continue
    tool, load, rep = name.split("-")
    a, b, rc = map(int, open(f"{d}/window").read().split())
    win = server[a:b]
    hold = [r["hold_ms"] for r in win if r["hold_ms"] is not None]
    wall, user, sys_, rss = open(f"{d}/time").read().split()[-4:]
    b0, s0, b1, s1, hz = (map(int, open(f"{d}/cpu").read().split()) if os.path.exists(f"{d}/cpu")
                          else (0, 0, 0, 0, 1))
    tool_cpu = float(user) + float(sys_)
    server_cpu = (s1 - s0) / hz
    other = (max(0.0, (b1 - b0) / hz - server_cpu - tool_cpu) / float(wall)
             if float(wall) and b1 else None)
    row = dict(tool=tool, load=load, rep=int(rep), loadavg=open(f"{d}/loadavg").read().split()[0],
               other_cores=other, server_cores=server_cpu / float(wall) if float(wall) else None,
               rc=rc, server_n=len(win), hold50=pct(hold, 50), hold99=pct(hold, 99),
               cpu=tool_cpu, rss_mb=int(rss) / 1024, wall=float(wall))
    try:
        row.update(readers[tool](d))
    except Exception as e:  # a failed run: say so in the row
        row.update(done=None, rate=None, p50=None, p99=None, joined={}, late=[],
                   error=f"{type(e).__name__}: {e}")
    late = row.pop("late") or [None, None]
    row["late50"], row["late99"] = late
    by_id = {r["id"]: r["hold_ms"] for r in win}
    by_id.update({r["x_request_id"]: r["hold_ms"] for r in win if r.get("x_request_id")})
    diffs = [v - by_id[k] for k, v in row.pop("joined").items() if by_id.get(k) is not None]
    row["joined50"] = pct(diffs, 50)
    row["joined_n"] = len(diffs)
    rows.append(row)

order = {"c1": 0, "c32": 1, "open": 2}
tools = {"chatgate": 0, "guidellm": 1, "aiperf": 2}
rows.sort(key=lambda r: (order[r["load"]], tools[r["tool"]], r["rep"]))
json.dump(rows, open(f"{out}/results.json", "w"), indent=1)
f = lambda v, p=1: "—" if v is None else f"{v + 0.0:.{p}f}".replace("-0.00", "0.00")
def err(x, y):
    return None if x is None or y is None else x - y
head = ("| load | tool | round | load avg | other cores | done (tool/server) | rate /s | TTFT p50 | "
        "TTFT p99 | hold p50 | hold p99 | err p50 | err p99 | joined err p50 | send late p50/p99 | "
        "CPU s | peak RSS MB | wall s |")
lines = [head, "|" + "|".join(["---"] * 18) + "|"]
for r in rows:
    lines.append("| " + " | ".join([
        r["load"], r["tool"], str(r["rep"]), r["loadavg"], f(r["other_cores"], 2),
        f"{'—' if r['done'] is None else r['done']}/{r['server_n']}" + ("" if r["rc"] == 0 else f" (exit {r['rc']})"),
        f(r["rate"]), f(r["p50"], 2), f(r["p99"], 2), f(r["hold50"], 2), f(r["hold99"], 2),
        f(err(r["p50"], r["hold50"]), 2), f(err(r["p99"], r["hold99"]), 2),
        f(r["joined50"], 2),
        "—" if r["late50"] is None else f"{f(r['late50'], 1)}/{f(r['late99'], 1)}",
        f(r["cpu"]), f(r["rss_mb"], 0), f(r["wall"])]) + " |")
    if r.get("error"):
        lines.append(f"|  | ↳ {r['error'][:120]} |" + " |" * 16)
table = "\n".join(lines)
open(f"{out}/table.md", "w").write(table + "\n")
print()
print(f"TTFT in ms; the server holds the first token {ttft:g} ms (hold = what it actually did).")
print(table)
EOF
echo
echo "side-by-side: per-run files, results.json and table.md in $out"
