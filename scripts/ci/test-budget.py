#!/usr/bin/env python3
"""Test time per group against the budget written in .config/test-budget.toml.

    python3 scripts/ci/test-budget.py target/nextest/ci/junit.xml [.config/test-budget.toml]

Each test belongs to the group whose `modules` start its name (`family_matrix::qwen25::…`, a
library test's `chain::template::…`); a test no group claims, or that two claim, is listed and
makes the run fail, so a new test file gets its boundary the day it lands. A group over its budget is printed with `OVER`, so a change that adds
minutes names itself in the run that adds them. Times are each test process's wall seconds from
nextest's JUnit file; two tests run at once on CI's 2 cores, so the test step's wall time is
about half their sum. Exit status: 0, or 1 when a test has no group (2: unreadable input). A
group over its budget does not fail the run: timings vary with the machine's load, and CI's
own limit is the hard one.
"""
import re
import sys
import tomllib
import xml.etree.ElementTree as ET


def load_groups(path):
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    groups = []
    for g in doc.get("group", []):
        mods = "|".join(re.escape(m) for m in g["modules"])
        groups.append((g["name"], re.compile(rf"^({mods})::"), float(g["budget_s"])))
    return doc.get("total_budget_s"), groups


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    junit = sys.argv[1]
    config = sys.argv[2] if len(sys.argv) > 2 else ".config/test-budget.toml"
    try:
        total_budget, groups = load_groups(config)
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError, tomllib.TOMLDecodeError, KeyError, re.error) as e:
        print(f"test-budget: cannot read the input: {e}", file=sys.stderr)
        return 2
    spent = {name: [0, 0.0] for name, _, _ in groups}
    orphans = []
    total = 0.0
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        t = float(case.get("time", "0") or 0)
        total += t
        owners = [g for g, rx, _ in groups if rx.search(name)]
        if len(owners) == 1:
            spent[owners[0]][0] += 1
            spent[owners[0]][1] += t
        else:
            orphans.append((t, f"{name} ({' and '.join(owners) if owners else 'no group'})"))
    print(f"{'group':<34} {'tests':>5} {'time s':>8} {'budget s':>9}")
    over = []
    for gname, _, budget in groups:
        n, t = spent[gname]
        mark = ""
        if t > budget:
            mark = f"  OVER by {t - budget:.0f} s"
            over.append(gname)
        print(f"{gname:<34} {n:>5} {t:>8.0f} {budget:>9.0f}{mark}")
    if orphans:
        t = sum(t for t, _ in orphans)
        print(f"{'(no group, or two)':<34} {len(orphans):>5} {t:>8.0f} {'-':>9}  NO BUDGET")
    line = f"{'all tests':<34} {sum(n for n, _ in spent.values()) + len(orphans):>5} {total:>8.0f}"
    if total_budget is not None:
        line += f" {float(total_budget):>9.0f}"
        if total > float(total_budget):
            line += f"  OVER by {total - float(total_budget):.0f} s"
            over.append("all tests")
    print(line)
    if over:
        print()
        print("!! over budget: " + ", ".join(over))
        print("!! a group's budget is in .config/test-budget.toml; find what grew (docs/development.md)")
    if orphans:
        print()
        print("test-budget: these tests belong to no group of " + config + ", or to two (one module, one group):")
        for t, name in sorted(orphans, reverse=True):
            print(f"  {t:8.1f} s  {name}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
