#!/usr/bin/env python3
"""Where the family matrix's time goes, per server column, as a Markdown table.

    python3 scripts/ci/matrix-timings.py [target/matrix-timings.jsonl]

tests/it/family_matrix.rs appends one JSON line per cell (a family on a server) to
target/matrix-timings.jsonl: its wall seconds, the seconds spent starting servers (the healthy
stand-in's and each fault's served copy), `chatgate init`, and each gate phase summed over the
cell's gates (`gate --update`, the gate, one gate per fault) with the requests each phase sent.
The table sums them per column, so docs/development.md can say how much of a cell is server
start, model load, probes and replay. Remove the file before a run to measure that run alone.
"""
import json
import sys
from collections import defaultdict

PHASES = [
    ("load", "load (suite, target, reference)"),
    ("offline chain", "offline chain"),
    ("online chain", "online chain (probes)"),
    ("replay", "replay"),
    ("latency", "latency"),
]


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else "target/matrix-timings.jsonl"
    try:
        lines = [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]
    except (OSError, json.JSONDecodeError) as e:
        print(f"matrix-timings: cannot read {path}: {e}", file=sys.stderr)
        return 2
    cols = defaultdict(lambda: defaultdict(float))
    for c in lines:
        col = cols[c["server"]]
        col["cells"] += 1
        col["total"] += c["total_s"]
        col["start"] += c["server_start_s"]
        col["starts"] += c["server_starts"]
        col["init"] += c["init_s"]
        col["gates"] += c["gates"]
        for name, p in c["phases"].items():
            col[name] += p["seconds"]
            col[name + " requests"] += p["requests"]
    servers = sorted(cols)
    print("| seconds (summed over the column's cells) | " + " | ".join(servers) + " |")
    print("|---|" + "---:|" * len(servers))

    def row(label, key, requests=False):
        cells = []
        for s in servers:
            v = cols[s][key]
            total = cols[s]["total"] or 1
            cell = f"{v:.0f} ({100 * v / total:.0f}%)"
            if requests and cols[s][key + " requests"]:
                cell += f", {cols[s][key + ' requests']:.0f} req"
            cells.append(cell)
        print(f"| {label} | " + " | ".join(cells) + " |")

    print("| cells · gates · server starts | " + " | ".join(
        f"{cols[s]['cells']:.0f} · {cols[s]['gates']:.0f} · {cols[s]['starts']:.0f}" for s in servers) + " |")
    print("| **wall, all cells** | " + " | ".join(f"**{cols[s]['total']:.0f}**" for s in servers) + " |")
    row("server start (stand-in and fault copies)", "start")
    row("`chatgate init`", "init")
    for key, label in PHASES:
        row(label, key, requests=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
