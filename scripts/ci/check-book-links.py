#!/usr/bin/env python3
"""Check every link of the chatgate book (docs/, built by mdBook) and of the README.

    mdbook build docs && python3 scripts/ci/check-book-links.py [target/book]

Two passes, Python 3 standard library only:

1. The built HTML (default target/book, where docs/book.toml's build-dir puts it): every
   relative href/src must name a file that exists in the build, and every #anchor must be an
   id (or name) in the page it points to — a heading renamed or a page moved breaks a link here.
2. The Markdown sources (docs/**/*.md and README.md): a link that leaves the book for the
   repository — https://github.com/chatgate/chatgate/blob|tree/<ref>/PATH, or a relative path —
   must name a path that exists in this checkout.
(docs/checks.md's tables are generated from the check registry and kept by a test,
tests/it/checks_doc.rs, not here.)

Exit 0 when every link resolves; exit 1 with one line per broken link (file: link: why);
exit 2 when the build folder is missing (run `mdbook build docs` first).
"""
import html.parser
import os
import re
import sys
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOOK_SRC = os.path.join(ROOT, "docs")
REPO_URL = re.compile(r"^https://github\.com/chatgate/chatgate/(?:blob|tree|edit)/[^/]+/(.+)$")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//")


class Links(html.parser.HTMLParser):
    """The ids of a page and the links it makes."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.links = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id",) or (name == "name" and tag == "a"):
                self.ids.add(value)
            if (name == "href" and tag in ("a", "link", "area")) or (
                name == "src" and tag in ("img", "script", "iframe", "source")
            ):
                self.links.append(value)


def parse(path, cache={}):
    if path not in cache:
        p = Links()
        with open(path, encoding="utf-8") as f:
            p.feed(f.read())
        cache[path] = p
    return cache[path]


def check_html(build):
    problems = []
    for dirpath, _, files in os.walk(build):
        for name in sorted(files):
            if not name.endswith(".html"):
                continue
            page = os.path.join(dirpath, name)
            rel_page = os.path.relpath(page, build)
            for link in parse(page).links:
                if EXTERNAL.match(link):
                    continue
                target, _, fragment = link.partition("#")
                target = urllib.parse.unquote(target.split("?", 1)[0])
                if target:
                    path = os.path.normpath(os.path.join(dirpath, target))
                    if not path.startswith(os.path.normpath(build) + os.sep):
                        problems.append(f"{rel_page}: {link}: points outside the book (link the repository file by its GitHub URL)")
                        continue
                    if os.path.isdir(path):
                        path = os.path.join(path, "index.html")
                    if not os.path.exists(path):
                        problems.append(f"{rel_page}: {link}: no such file in the build")
                        continue
                else:
                    path = page
                if fragment and path.endswith(".html"):
                    fragment = urllib.parse.unquote(fragment)
                    if fragment not in parse(path).ids:
                        problems.append(f"{rel_page}: {link}: no anchor #{fragment} in {os.path.relpath(path, build)}")
    return problems


MD_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
MD_REF = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)


def md_links(text):
    text = FENCE.sub("", text)
    text = CODE_SPAN.sub("", text)
    return MD_LINK.findall(text) + MD_REF.findall(text)


def check_sources():
    problems = []
    sources = [os.path.join(ROOT, "README.md")]
    for dirpath, _, files in os.walk(BOOK_SRC):
        sources += [os.path.join(dirpath, f) for f in sorted(files) if f.endswith(".md")]
    for src in sources:
        rel_src = os.path.relpath(src, ROOT)
        with open(src, encoding="utf-8") as f:
            links = md_links(f.read())
        for link in links:
            m = REPO_URL.match(link)
            if m:
                path = urllib.parse.unquote(m.group(1).split("#", 1)[0].split("?", 1)[0]).rstrip("/")
                if not os.path.exists(os.path.join(ROOT, path)):
                    problems.append(f"{rel_src}: {link}: no {path} in the repository")
                continue
            if EXTERNAL.match(link) or link.startswith("#"):
                continue
            target = urllib.parse.unquote(link.split("#", 1)[0])
            path = os.path.normpath(os.path.join(os.path.dirname(src), target))
            inside_book = path == BOOK_SRC or path.startswith(BOOK_SRC + os.sep)
            if src != sources[0] and not inside_book:
                problems.append(f"{rel_src}: {link}: leaves the book; link {os.path.relpath(path, ROOT)} by its GitHub URL")
            elif not os.path.exists(path):
                problems.append(f"{rel_src}: {link}: no such file {os.path.relpath(path, ROOT)}")
    return problems


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "book"))
    if not os.path.isfile(os.path.join(build, "index.html")):
        print(f"check-book-links: {build} has no index.html; run `mdbook build docs` first", file=sys.stderr)
        return 2
    problems = check_html(build) + check_sources()
    for p in problems:
        print(p)
    pages = sum(1 for _, _, fs in os.walk(build) for f in fs if f.endswith(".html"))
    if problems:
        print(f"check-book-links: {len(problems)} broken link(s)", file=sys.stderr)
        return 1
    print(f"check-book-links: every link resolves ({pages} HTML pages, the Markdown sources and README.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
