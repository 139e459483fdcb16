#!/usr/bin/env python3
"""The `ci` profile's slot overrides name the same tests as the default profile's groups.

nextest has no named filtersets, so .config/nextest.toml writes the paced latency tests
(priority 100) and the exclusive short ones (priority 90) twice: once in the default profile
(their order) and once in the `ci` profile (their slots, where every other test takes two). A
test added to one list and not the other would run beside heavy tests in CI, or hold every
slot: this fails the run and says which list to copy.

usage: check-nextest-slots.py .config/nextest.toml
"""
import sys
import tomllib


def main(path):
    with open(path, "rb") as f:
        config = tomllib.load(f)
    profiles = config.get("profile", {})
    default = profiles.get("default", {}).get("overrides", [])
    ci = profiles.get("ci", {}).get("overrides", [])
    by_priority = {o.get("priority"): o.get("filter") for o in default}
    by_slots = {str(o.get("threads-required")): o.get("filter") for o in ci}
    wanted = [
        ("paced latency tests", by_priority.get(100), by_slots.get("1")),
        ("exclusive latency tests", by_priority.get(90), by_slots.get("num-test-threads")),
    ]
    bad = False
    for name, in_default, in_ci in wanted:
        if in_default is None or in_default != in_ci:
            bad = True
            print(f"{path}: the {name}' filter differs between the default profile and the ci profile", file=sys.stderr)
            print(f"  default: {in_default}\n  ci:      {in_ci}", file=sys.stderr)
    if by_slots.get("2") != "all()" or list(by_slots)[-1] != "2":
        bad = True
        print(f"{path}: the ci profile's last override must give every other test two slots (filter = 'all()', threads-required = 2)", file=sys.stderr)
    if bad:
        print("copy the default profile's filter into the ci profile (or the other way round)", file=sys.stderr)
        return 1
    print(f"{path}: the ci profile's slots name the default profile's groups")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
