#!/usr/bin/env python3
"""Prints criterion's last results as a Markdown table: median and median absolute deviation.

    cargo bench --bench layer && python3 benches/summarize.py

Reads target/criterion/**/new/{benchmark,estimates}.json; criterion's own console output shows the
mean's confidence interval instead.
"""

import json
import pathlib
import sys


def fmt(ns: float) -> str:
    if ns >= 1_000_000:
        return f"{ns / 1_000_000:.2f} ms"
    if ns >= 1_000:
        return f"{ns / 1_000:.2f} µs"
    return f"{ns:.0f} ns"


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/criterion")
    rows = []
    for bench in sorted(root.glob("**/new/benchmark.json")):
        meta = json.loads(bench.read_text())
        est = json.loads((bench.parent / "estimates.json").read_text())
        median = est["median"]["point_estimate"]
        mad = est["median_abs_dev"]["point_estimate"]
        elements = (meta.get("throughput") or {}).get("Elements")
        rate = f"{elements / median * 1e9:,.0f}/s" if elements else ""
        rows.append((meta["full_id"], median, mad, rate))
    if not rows:
        print(f"no criterion results under {root}", file=sys.stderr)
        return 1
    print("| bench | median | MAD | rate |")
    print("|---|---:|---:|---:|")
    for full_id, median, mad, rate in rows:
        print(f"| `{full_id}` | {fmt(median)} | ±{fmt(mad)} | {rate} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
