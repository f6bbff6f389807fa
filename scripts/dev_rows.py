#!/usr/bin/env python3
"""The rows of a development call's bench_gemm JSON files as one table (docs/evidence/gpu/development/*/call*.sh).

    python3 scripts/dev_rows.py DIR FIELD...

Each file DIR/*.json (sorted by name) is named <rep>_<variant>_..., and each of its "rows" gives one line: the rep and
the variant, then shape, M, phase, strict_ms, cublas_ms and ratio, then the given FIELDs of the row, in order, under
the header names `name=field` gives them (a FIELD without `=` is its own name). A file that cannot be read gives a
line that says so."""
import glob
import json
import os
import sys


def main(argv):
    if len(argv) < 2 or not os.path.isdir(argv[1]):
        print("usage: dev_rows.py DIR [NAME=]FIELD...", file=sys.stderr)
        return 2
    fields = [a.split("=", 1) if "=" in a else [a, a] for a in argv[2:]]
    print(" ".join(["rep variant shape M phase strict_ms cublas_ms ratio"] + [n for n, _ in fields]))
    for f in sorted(glob.glob(os.path.join(argv[1], "*.json"))):
        n = os.path.basename(f)[:-5].split("_")
        try:
            with open(f) as fh:
                rows = json.load(fh)["rows"]
        except (OSError, ValueError, KeyError) as e:
            print(os.path.basename(f), "unreadable:", e)
            continue
        for r in rows:
            base = [n[0], n[1] if len(n) > 1 else "-", r["shape"], r["M"], r["phase"], r["strict_ms"], r["cublas_ms"],
                    r["ratio"]]
            print(*(base + [r.get(k) for _, k in fields]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
