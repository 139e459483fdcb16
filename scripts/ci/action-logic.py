#!/usr/bin/env python3
"""The GitHub Action's logic (action.yml, action/), run here the way a runner runs it.

  1. install.sh downloads a release archive laid out as dist lays it out, over real HTTP on
     loopback, checks its sha256, caches it per version (a second install needs no network), and
     refuses an archive whose checksum does not match.
  2. gate.sh on the example project (`chatgate example`): a pass gives verdict/exit-code/reports
     outputs and the job summary; an edited accepted snapshot gives exit 1, the first broken
     boundary, and the pending .snap.new as an absolute path for the artifact upload; a missing
     suite gives bad-input with the error in the summary.
  3. comment.py against a loopback stand-in of GitHub's issue-comments REST endpoints: the first run
     posts one comment, the second finds it past the first page (150 other comments) and edits
     it; the token is sent as a Bearer header and never printed.
Usage: action-logic.py CHATGATE_BIN
"""
import hashlib
import http.server
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ACTION = REPO / "action"


def check(cond, what):
    if not cond:
        raise SystemExit(f"action-logic: FAILED: {what}")
    print(f"  ok  {what}")


def outputs(path):
    """Parse a $GITHUB_OUTPUT file (name=value lines and name<<DELIM blocks)."""
    out, lines = {}, Path(path).read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            j = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1 : j])
            i = j + 1
            continue
        name, value = line.split("=", 1)
        out[name] = value
        i += 1
    return out


def serve(directory, handler_cls=None):
    if handler_cls is None:
        class Files(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **kw):
                super().__init__(*a, directory=str(directory), **kw)

        handler_cls = Files
    handler_cls.log_message = lambda *a: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_cls)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


def triple():
    m = platform.machine()
    return {"x86_64": "x86_64-unknown-linux-gnu", "aarch64": "aarch64-unknown-linux-gnu"}[m]


def install(env, tmp):
    out = tmp / "install.out"
    out.write_text("")
    p = subprocess.run(["bash", str(ACTION / "install.sh")], env={**env, "GITHUB_OUTPUT": str(out)},
                       capture_output=True, text=True, timeout=120)
    return p, outputs(out) if out.read_text() else {}


def test_install(binary, tmp):
    print("install.sh")
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.split()[-1]
    name = f"chatgate-{triple()}"
    rel = tmp / "releases" / "download" / f"v{version}"
    rel.mkdir(parents=True)
    stage = tmp / "stage" / name
    stage.mkdir(parents=True)
    shutil.copy2(binary, stage / "chatgate")
    archive = rel / f"{name}.tar.xz"
    with tarfile.open(archive, "w:xz", preset=0) as t:
        t.add(stage, arcname=name)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    (rel / f"{name}.tar.xz.sha256").write_text(f"{digest} *{name}.tar.xz\n")

    httpd, url = serve(tmp / "releases")
    env = {**os.environ, "CHATGATE_VERSION": version, "CHATGATE_TOOL_CACHE": str(tmp / "toolcache"),
           "CHATGATE_RELEASES_URL": url}
    p, o = install(env, tmp)
    check(p.returncode == 0, f"installs v{version} from the release archive ({p.stderr.strip()})")
    check(o.get("binary") == str(tmp / "toolcache" / version / "chatgate"), "binary output is the cached path")
    got = subprocess.run([o["binary"], "--version"], capture_output=True, text=True).stdout
    check(version in got, "the installed binary runs")
    httpd.shutdown()

    p, o = install(env, tmp)
    check(p.returncode == 0 and "cached" in p.stderr, "a second install uses the cache, no network")

    (rel / f"{name}.tar.xz.sha256").write_text("0" * 64 + f" *{name}.tar.xz\n")
    httpd, url = serve(tmp / "releases")
    p, _ = install({**env, "CHATGATE_RELEASES_URL": url, "CHATGATE_TOOL_CACHE": str(tmp / "toolcache2")}, tmp)
    check(p.returncode == 2 and "does not match" in p.stderr, "an archive whose sha256 differs is refused")
    check(not (tmp / "toolcache2" / version / "chatgate").exists(), "and nothing is installed")
    httpd.shutdown()

    httpd, url = serve(tmp / "releases")
    (rel / f"{name}.tar.xz.sha256").write_text(f"{digest} *{name}.tar.xz\n")
    p, o = install({**env, "CHATGATE_VERSION": f"v{version}", "CHATGATE_RELEASES_URL": url}, tmp)
    httpd.shutdown()
    check(p.returncode == 0 and o.get("binary") == str(tmp / "toolcache" / f"v{version}" / "chatgate"),
          "a v-prefixed version installs into the folder action.yml's cache step names")

    p, _ = install({**env, "CHATGATE_VERSION": "main && echo pwned"}, tmp)
    check(p.returncode == 2 and "not a release number" in p.stderr, "a malformed version is refused")
    p, o = install({**env, "CHATGATE_VERSION": str(binary)}, tmp)
    check(p.returncode == 0 and o.get("binary") == str(Path(binary).resolve()), "a path to a binary is used as is")


def gate(binary, project, tmp, **inputs):
    out, summary = tmp / "gate.out", tmp / "summary.md"
    out.write_text("")
    summary.write_text("")
    env = {**os.environ, "CHATGATE": binary, "GITHUB_OUTPUT": str(out), "GITHUB_STEP_SUMMARY": str(summary),
           **{f"INPUT_{k.upper()}": v for k, v in inputs.items()}}
    p = subprocess.run(["bash", str(ACTION / "gate.sh")], cwd=project, env=env, capture_output=True,
                       text=True, timeout=600)
    check(p.returncode == 0, "gate.sh itself exits 0 (the action's last step carries the code)")
    return outputs(out), summary.read_text()


def test_gate(binary, tmp):
    print("gate.sh")
    project = tmp / "project"
    subprocess.run([binary, "example", str(project)], check=True, capture_output=True)
    o, summary = gate(binary, project, tmp, suite="suites/smoke.toml")
    check(o["verdict"] == "pass" and o["exit-code"] == "0", f"the example passes: {o['verdict']} {o['exit-code']}")
    check(o["first-broken-boundary"] == "", "no broken boundary on a pass")
    for key in ("report-json", "junit", "markdown", "html", "sarif"):
        check(Path(o[key]).is_absolute() and Path(o[key]).stat().st_size > 0, f"{key} report written")
    check(summary.strip() == Path(o["markdown"]).read_text().strip(), "the job summary is the Markdown report")
    check(o["pending-snapshots"] == "", "no pending snapshots")
    check(o["suite-slug"] == "suites-smoke.toml", f"a suite slug for the artifact's name: {o['suite-slug']}")

    # sky's comparator is exact: a different accepted text is a regression.
    snap = project / "snapshots" / "smoke" / "sky.snap"
    snap.write_text(snap.read_text().replace('text: "The sky is blue."', 'text: "The sky is green."'))
    o, summary = gate(binary, project, tmp, suite="suites/smoke.toml", args="--deadline 600")
    check(o["verdict"] == "fail" and o["exit-code"] == "1", f"an edited snapshot fails the gate: {o['verdict']} {o['exit-code']}")
    check(o["first-broken-boundary"] != "" and o["first-broken-check"] != "",
          f"the first broken boundary is named: {o['first-broken-boundary']} ({o['first-broken-check']})")
    pending = [Path(p) for p in o["pending-snapshots"].splitlines()]
    check(pending == [snap.with_name("sky.snap.new")] and pending[0].exists(),
          f"the pending snapshot is listed for upload: {pending}")
    check("sky is blue" in pending[0].read_text(), "the pending file is this run's reply")
    check("sky is green" in snap.read_text(), "the accepted snapshot is left as it was")

    o, summary = gate(binary, project, tmp, suite="suites/missing.toml")
    check(o["verdict"] == "bad-input" and o["exit-code"] == "2", f"a missing suite is bad input: {o['verdict']}")
    check("missing.toml" in summary, "the error is in the job summary")


class GitHubComments(http.server.BaseHTTPRequestHandler):
    """GitHub's issue-comment endpoints as documented (list with paging, create, update), for
    repository acme/model and pull request 7 only: any other path is a 404, and every request
    must carry the token; `refuse` answers 403 to writes, as a fork's read-only token gets."""
    comments, auth_seen, requests, refuse = [], [], [], False

    def allowed(self, method, path):
        self.requests.append((method, path))
        self.auth_seen.append(self.headers.get("Authorization"))
        if self.headers.get("Authorization") != "Bearer ghs_secret_token_value":
            self.send(401, {"message": "Bad credentials"})
            return False
        if method != "GET" and self.refuse:
            self.send(403, {"message": "Resource not accessible by integration"})
            return False
        return True

    def send(self, code, payload):
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        from urllib.parse import urlparse, parse_qs
        u = urlparse(self.path)
        if not self.allowed("GET", u.path):
            return
        if u.path != "/repos/acme/model/issues/7/comments":
            return self.send(404, {"message": "Not Found"})
        q = parse_qs(u.query)
        per, page = int(q["per_page"][0]), int(q["page"][0])
        self.send(200, self.comments[(page - 1) * per : page * per])

    def body(self):
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def do_POST(self):
        if not self.allowed("POST", self.path):
            return
        if self.path != "/repos/acme/model/issues/7/comments":
            return self.send(404, {"message": "Not Found"})
        c = {"id": 1000 + len(self.comments), "body": self.body()["body"]}
        self.comments.append(c)
        self.send(201, c)

    def do_PATCH(self):
        if not self.allowed("PATCH", self.path):
            return
        prefix = "/repos/acme/model/issues/comments/"
        c = next((c for c in self.comments if self.path == f"{prefix}{c['id']}"), None)
        if c is None:
            return self.send(404, {"message": "Not Found"})
        c["body"] = self.body()["body"]
        self.send(200, c)


def test_comment(tmp):
    print("comment.py")
    GitHubComments.comments[:] = [{"id": i, "body": f"a reviewer's comment {i}"} for i in range(150)]
    httpd, url = serve(None, GitHubComments)
    md = tmp / "gate.md"
    env = {**os.environ, "GITHUB_TOKEN": "ghs_secret_token_value", "GITHUB_REPOSITORY": "acme/model",
           "PR_NUMBER": "7", "MARKDOWN": str(md), "INPUT_SUITE": "suites/smoke.toml", "GITHUB_API_URL": url}
    runs = []
    for text in ("first run: PASS", "second run: FAIL at replay"):
        md.write_text(text)
        runs.append(subprocess.run([sys.executable, str(ACTION / "comment.py")], env=env, capture_output=True,
                                   text=True, timeout=60))
    httpd.shutdown()
    ours = [c for c in GitHubComments.comments if "chatgate-comment" in c["body"]]
    check(all(r.returncode == 0 for r in runs), "both runs comment: " + " / ".join(r.stdout.strip() for r in runs))
    check(len(ours) == 1 and ours[0]["body"].endswith("second run: FAIL at replay"),
          "one comment, edited in place, found past the first page")
    check(len(GitHubComments.comments) == 151, "the other comments are untouched")
    check(set(GitHubComments.auth_seen) == {"Bearer ghs_secret_token_value"}, "the token goes in every request's header")
    check({m for m, _ in GitHubComments.requests} == {"GET", "POST", "PATCH"}, "list, create and edit were all used")
    check(all("ghs_secret" not in r.stdout + r.stderr for r in runs), "and never into the output")

    # A fork's pull request: the token may read, not write.
    GitHubComments.refuse = True
    httpd, url = serve(None, GitHubComments)
    md.write_text("third run: PASS")
    r = subprocess.run([sys.executable, str(ACTION / "comment.py")], env={**env, "GITHUB_API_URL": url},
                       capture_output=True, text=True, timeout=60)
    httpd.shutdown()
    check(r.returncode == 0 and "::warning" in r.stdout and "403" in r.stdout,
          f"a refused comment is a warning, not a failed job: {r.stdout.strip()}")
    check(ours[0]["body"].endswith("second run: FAIL at replay"), "and the comment is unchanged")
    r = subprocess.run([sys.executable, str(ACTION / "comment.py")], env={**env, "PR_NUMBER": ""},
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "PR_NUMBER" in r.stderr, "a missing setting is an error naming it")


def main():
    binary = str(Path(sys.argv[1]).resolve())
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        test_install(binary, tmp)
        test_gate(binary, tmp)
        test_comment(tmp)
    print("action-logic: all passed")


if __name__ == "__main__":
    main()
