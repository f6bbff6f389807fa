#!/usr/bin/env python3
"""Set the rows of several bench_gemm JSON files side by side: how far each row moves between runs.

    python3 scripts/bench_spread.py RUN.json RUN.json [...] [--bar 1.10] [--min-m 925] [--json OUT]

Every file must be a bench_gemm JSON ("rows" of shape, phase, M, strict_ms, cublas_ms, ratio) with the same rows.
For each row the script prints the ratio of every run, their median, and the spread (largest minus smallest ratio),
then, for the rows at M >= --min-m, how many runs put each row over --bar and how many rows are over the bar in
each run and by their median ratio. --json writes the same as a JSON object. The runs' order is the order given.
Exit status: 0, or 2 when a file cannot be read or the files do not hold the same rows.
"""
import argparse
import json
import statistics
import sys


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
        rows = doc["rows"]
        return {(r["shape"], r["phase"], int(r["M"])): r for r in rows}, doc
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"bench_spread: {path}: {e}", file=sys.stderr)
        sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="bench_gemm JSON files, two or more")
    ap.add_argument("--bar", type=float, default=1.10, help="the ratio bar (default 1.10)")
    ap.add_argument("--min-m", type=int, default=925, help="the bar applies at M >= this (default 925)")
    ap.add_argument("--json", help="also write the table here (refused if the file exists)")
    a = ap.parse_args()
    if len(a.runs) < 2:
        ap.error("give two or more runs")
    runs = [load(p) for p in a.runs]
    keys = list(runs[0][0])
    for p, (rows, _) in zip(a.runs, runs):
        if set(rows) != set(keys):
            print(f"bench_spread: {p} does not hold the same rows as {a.runs[0]}", file=sys.stderr)
            return 2
    out = []
    print(f"{'shape':>11} {'phase':8} {'M':>6}  " + " ".join(f"run{i + 1:<3}" for i in range(len(runs)))
          + "  median  spread")
    for k in keys:
        ratios = [rows[k]["ratio"] for rows, _ in runs]
        med = statistics.median(ratios)
        spread = max(ratios) - min(ratios)
        out.append({"shape": k[0], "phase": k[1], "M": k[2], "ratios": ratios, "median": round(med, 4),
                    "spread": round(spread, 4)})
        print(f"{k[0]:>11} {k[1]:8} {k[2]:>6}  " + " ".join(f"{r:6.3f}" for r in ratios)
              + f"  {med:6.3f}  {spread:6.3f}")
    big = [o for o in out if o["M"] >= a.min_m]
    per_run = [sum(1 for o in big if o["ratios"][i] > a.bar) for i in range(len(runs))]
    over_med = [o for o in big if o["median"] > a.bar]
    ever = [o for o in big if max(o["ratios"]) > a.bar]
    spreads = sorted(o["spread"] for o in big)
    print(f"\nat M >= {a.min_m} ({len(big)} rows): over {a.bar} per run: {per_run}; by the median: {len(over_med)}"
          + "".join(f"\n  median over: {o['shape']} {o['phase']} M = {o['M']}: {o['median']:.3f}" for o in over_med))
    for o in ever:
        n = sum(1 for r in o["ratios"] if r > a.bar)
        print(f"  over in {n} of {len(runs)} runs: {o['shape']} {o['phase']} M = {o['M']}: "
              + ", ".join(f"{r:.3f}" for r in o["ratios"]))
    print(f"  spread of a row between runs: median {statistics.median(spreads):.3f}, largest {spreads[-1]:.3f}")
    if a.json:
        try:
            with open(a.json, "x") as f:
                json.dump({"runs": a.runs, "source_commits": [d.get("source_commit") for _, d in runs],
                           "bar": a.bar, "min_m": a.min_m, "over_per_run": per_run,
                           "over_by_median": len(over_med), "rows": out}, f, indent=1)
                f.write("\n")
        except OSError as e:
            print(f"bench_spread: {a.json}: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
