#!/usr/bin/env python3
"""The GitHub Action's PR comment: one comment per suite, updated in place on every later run.

The comment carries a hidden marker naming the suite; the first run posts it, later runs find it
(paging through the PR's comments) and edit it, so a PR gated twenty times has one comment, not
twenty. Standard library only (the runner's python3).

Environment: GITHUB_TOKEN, GITHUB_REPOSITORY (owner/name), PR_NUMBER, MARKDOWN (the gate's
Markdown summary), INPUT_SUITE; GITHUB_API_URL (default https://api.github.com).
Exit 0 when the comment is posted or updated, and also when GitHub refuses it or cannot be
reached: then a workflow warning names the request (a fork's read-only token must not turn a
passing gate into a failed job; the gate's own step carries the verdict). Exit 2 when the
environment lacks what it needs. The token is never printed.
"""
import json
import os
import sys
import urllib.error
import urllib.request

# GitHub refuses comment bodies over 65536 characters.
MAX_BODY = 65000
TIMEOUT_S = 30


def marker(suite):
    return f"<!-- chatgate-comment suite={suite} -->"


def body(suite, markdown_path):
    try:
        with open(markdown_path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        text = f"chatgate wrote no Markdown summary ({e.strerror}); see the job's log."
    head = marker(suite) + "\n"
    if len(head) + len(text) > MAX_BODY:
        note = "\n\n… (cut: the whole report is in the job summary and the HTML report)"
        text = text[: MAX_BODY - len(head) - len(note)] + note
    return head + text


class Refused(Exception):
    """GitHub answered with an error, or could not be reached."""


class GitHub:
    def __init__(self, api, repo, token):
        self.api, self.repo, self.token = api.rstrip("/"), repo, token

    def call(self, method, path, payload=None):
        req = urllib.request.Request(
            self.api + path,
            method=method,
            data=None if payload is None else json.dumps(payload).encode(),
            headers={
                "Authorization": f"Bearer {self.token}",
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
                return json.loads(r.read(8 << 20) or b"null")
        except urllib.error.HTTPError as e:
            raise Refused(f"{method} {path}: GitHub answered {e.code} {e.reason}")
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise Refused(f"{method} {path}: {e}")

    def find(self, pr, mark):
        page = 1
        while True:
            batch = self.call("GET", f"/repos/{self.repo}/issues/{pr}/comments?per_page=100&page={page}")
            for c in batch or []:
                if mark in (c.get("body") or ""):
                    return c["id"]
            if not batch or len(batch) < 100:
                return None
            page += 1


def main():
    env = os.environ
    missing = [k for k in ("GITHUB_TOKEN", "GITHUB_REPOSITORY", "PR_NUMBER", "MARKDOWN", "INPUT_SUITE") if not env.get(k)]
    if missing:
        print("chatgate comment: missing " + ", ".join(missing), file=sys.stderr)
        sys.exit(2)
    gh = GitHub(env.get("GITHUB_API_URL", "https://api.github.com"), env["GITHUB_REPOSITORY"], env["GITHUB_TOKEN"])
    pr, suite = env["PR_NUMBER"], env["INPUT_SUITE"]
    text = body(suite, env["MARKDOWN"])
    try:
        existing = gh.find(pr, marker(suite))
        if existing is None:
            gh.call("POST", f"/repos/{gh.repo}/issues/{pr}/comments", {"body": text})
            print(f"chatgate comment: posted on #{pr}")
        else:
            gh.call("PATCH", f"/repos/{gh.repo}/issues/comments/{existing}", {"body": text})
            print(f"chatgate comment: updated comment {existing} on #{pr}")
    except Refused as e:
        # A workflow command: shown as an annotation on the run, the job goes on.
        print(f"::warning title=chatgate PR comment not posted::{e}")


if __name__ == "__main__":
    main()
