#!/usr/bin/env python3
"""The hostile-server battery (the test tests/it/hostile_servers.rs runs it): `chatgate gate` and
`chatgate bench` against every mode of scripts/ci/hostile-server.py, each asserting

  - exit code 1 or 3 (never 0, 2, a panic's 101 or a signal),
  - wall time under the bound docs/commands/gate.md states for the suite's timeouts,
  - peak RSS under the bound it states,
  - no file over the size bound and no `.chatgate-*.tmp` left in the suite's folder,
  - the canary API key in no output, report, snapshot or file.

    python3 scripts/ci/hostile-battery.py target/release/chatgate [MODE...]

The suite is a copy of suites/smoke.toml in a scratch folder, with short timeouts and the
canary key, so nothing in the repository is touched.
"""
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODES = ["endless", "giant-line", "giant-json", "no-headers", "stall", "stall-all", "slow-loris",
         "429", "503", "bad-utf8", "reset", "echo-key"]
CANARY = "sk-canary-7f3e9d2c41b8a6e5"
# The suite's timeouts (seconds) and concurrency, and the bounds docs/commands/gate.md states.
CONNECT, READ, TOTAL = 1, 2, 4
CONCURRENCY = 2
# docs/commands/gate.md: after the introspection (one total timeout), about (3 + concurrency) × total; the
# offline chain, the candle reference and process start come on top (a few seconds).
TIME_BOUND_S = (1 + 3 + CONCURRENCY) * TOTAL + 20
RSS_BOUND_MB = 320
FILE_BOUND_MB = 16


def scratch_suite(root):
    """A copy of the smoke suite, its model and snapshots, with the battery's [target]."""
    for d in ("models/tiny-chat", "snapshots/smoke"):
        shutil.copytree(os.path.join(ROOT, d), os.path.join(root, d))
    os.makedirs(os.path.join(root, "suites"))
    for f in ("smoke.lock.json", "smoke.prompts.jsonl"):
        shutil.copy(os.path.join(ROOT, "suites", f), os.path.join(root, "suites", f))
    text = open(os.path.join(ROOT, "suites/smoke.toml")).read()
    extra = (f'api_key_env = "CHATGATE_CANARY_KEY"\nconnect_timeout_s = {CONNECT}\n'
             f'read_timeout_s = {READ}\ntotal_timeout_s = {TOTAL}\n')
    text = text.replace("[target]\n", "[target]\n" + extra, 1)
    text = re.sub(r"(\[server\][^\[]*?concurrency = )\d+", rf"\g<1>{CONCURRENCY}", text)
    path = os.path.join(root, "suites/smoke.toml")
    open(path, "w").write(text)
    return path


def start_server(mode):
    p = subprocess.Popen([sys.executable, os.path.join(ROOT, "scripts/ci/hostile-server.py"), "0", mode],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    port = int(line.rsplit(":", 1)[1])
    return p, f"http://127.0.0.1:{port}"


def run(cmd, env, cwd):
    """(exit code or -signal, wall s, peak RSS MB, stdout+stderr) of one command."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    # Read while waiting: a full pipe must not stall the child.
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    code = os.waitstatus_to_exitcode(status)
    return code, wall, usage.ru_maxrss / 1024, out.decode("utf-8", "replace")


def files_under(root):
    for d, _, names in os.walk(root):
        for n in names:
            yield os.path.join(d, n)


def one(chatgate, mode):
    """Every check for one mode; returns (mode, lines, failures)."""
    root = tempfile.mkdtemp(prefix=f"chatgate-hostile-{mode}-")
    lines, failures = [], []
    server = None
    try:
        suite = scratch_suite(root)
        server, url = start_server(mode)
        env = dict(os.environ, CHATGATE_CANARY_KEY=CANARY, NO_COLOR="1")
        reports = os.path.join(root, "reports")
        os.makedirs(reports)
        commands = [
            ("gate", [chatgate, "gate", suite, "--target", url, "--no-progress", "--format", "json",
                      "--junit", os.path.join(reports, "g.xml"), "--markdown", os.path.join(reports, "g.md"),
                      "--html", os.path.join(reports, "g.html")]),
            ("bench", [chatgate, "bench", suite, "--target", url, "--format", "json"]),
            ("bench load", [chatgate, "bench", suite, "--target", url, "--mode", "load", "--rate", "20",
                            "--requests", "40", "--format", "json"]),
        ]
        for name, cmd in commands:
            code, wall, rss, out = run(cmd, env, root)
            last = out.strip().splitlines()[-1][:160] if out.strip() else ""
            lines.append(f"{mode:11} {name:10} exit {code:3}  {wall:5.1f} s  {rss:6.0f} MB  {last}")
            if code not in (1, 3):
                failures.append(f"{mode} {name}: exit {code}\n{out[-2000:]}")
            if wall > TIME_BOUND_S:
                failures.append(f"{mode} {name}: {wall:.1f} s > {TIME_BOUND_S} s")
            if rss > RSS_BOUND_MB:
                failures.append(f"{mode} {name}: {rss:.0f} MB RSS > {RSS_BOUND_MB} MB")
            if CANARY in out:
                failures.append(f"{mode} {name}: the canary key is in the output")
            if "panicked" in out:
                failures.append(f"{mode} {name}: panicked\n{out[-2000:]}")
        for f in files_under(root):
            size = os.path.getsize(f)
            if size > FILE_BOUND_MB << 20:
                failures.append(f"{mode}: {f} is {size >> 20} MiB")
            if os.path.basename(f).startswith(".chatgate-"):
                failures.append(f"{mode}: a temporary file was left: {f}")
            with open(f, "rb") as fh:
                if CANARY.encode() in fh.read():
                    failures.append(f"{mode}: the canary key is in {os.path.relpath(f, root)}")
    finally:
        if server:
            server.kill()
            server.wait()
        shutil.rmtree(root, ignore_errors=True)
    return mode, lines, failures


def main():
    chatgate = os.path.abspath(sys.argv[1])
    modes = sys.argv[2:] or MODES
    print(f"bounds: exit 1 or 3, wall <= {TIME_BOUND_S} s (connect/read/total = {CONNECT}/{READ}/{TOTAL} s, "
          f"concurrency {CONCURRENCY}), peak RSS <= {RSS_BOUND_MB} MB, files <= {FILE_BOUND_MB} MiB, no key")
    failures = []
    # Most of the time is spent waiting on timeouts: a few modes at once.
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        for mode, lines, fails in pool.map(lambda m: one(chatgate, m), modes):
            print("\n".join(lines), flush=True)
            failures += fails
    if failures:
        print("\nFAILED:\n" + "\n".join(failures), file=sys.stderr)
        return 1
    print(f"\nall {len(modes)} hostile servers: bounded, no key leaked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
