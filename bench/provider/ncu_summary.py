"""Summarise an Nsight Compute CSV of gpu__time_duration.sum (bench/provider/profile_block.sh).

The run holds, per batch size, one timed forward + backward and one per-node forward + backward;
the kernels of the first batch size (B = 1) are the first half of the launches.  Prints the total
time per kernel name over that first timed forward + backward, largest first."""
import csv
import sys
from collections import OrderedDict


def main(path):
    rows = []
    with open(path, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        try:
            ns = float(r["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            continue
        rows.append((int(r["ID"]), r["Kernel Name"], ns))
    rows.sort()
    n = len(rows)
    if n == 0:
        print("no kernels found")
        return 1
    quarter = rows[: n // 4]  # B = 1: timed forward + backward
    tot = OrderedDict()
    for _, name, ns in quarter:
        short = name.split("(")[0][:90]
        c, t = tot.get(short, (0, 0.0))
        tot[short] = (c + 1, t + ns)
    total = sum(t for _, t in tot.values())
    print(f"{n} kernels in the run; the first quarter ({len(quarter)} launches, B = 1 timed fwd+bwd): "
          f"{total / 1e6:.3f} ms of kernel time")
    for name, (c, t) in sorted(tot.items(), key=lambda kv: -kv[1][1]):
        print(f"{t / 1e3:10.1f} us {c:4d}x  {name}")
    print("\nlaunch order (first quarter):")
    for i, name, ns in quarter:
        print(f"{i:5d} {ns / 1e3:9.1f} us  {name.split('(')[0][:100]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
