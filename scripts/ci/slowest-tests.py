#!/usr/bin/env python3
"""Print the slowest tests of a nextest JUnit file, and their share of the summed test time.

    python3 scripts/ci/slowest-tests.py target/nextest/ci/junit.xml [N]

.ci/run prints it after the test step, so a test that grows slow is seen the day it does. The
JUnit file is nextest's (`[profile.ci.junit]` in .config/nextest.toml); per-test times are wall
seconds of each test's own process.
"""
import sys
import xml.etree.ElementTree as ET


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"slowest-tests: cannot read {path}: {e}", file=sys.stderr)
        return 2
    cases = []
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        cases.append((float(case.get("time", "0") or 0), name))
    cases.sort(reverse=True)
    total = sum(t for t, _ in cases)
    print(f"{len(cases)} tests, {total:.0f} s of test time in all; the {min(n, len(cases))} slowest:")
    for t, name in cases[:n]:
        share = 100 * t / total if total else 0
        print(f"{t:8.1f} s  {share:4.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
