"""Summarise an Nsight Compute CSV of gpu__time_duration.sum (bench/provider/profile_block.sh).

bench_gpu_block fills its tensors (fill_random_kernel), then runs one timed forward + backward and one
per-node forward + backward, first at B = 1, then at B = 4 (after filling again).  The B = 1 segment is
the launches between the first run of fills and the next fill; its first half is the timed forward +
backward (with the rotary table, computed once per call, at its start).  Prints the total time per kernel
name over that half, largest first, then the launches in order."""
import csv
import sys
from collections import OrderedDict

FILL = "fill_random_kernel"


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
        rows.append((int(r["ID"]), r["Kernel Name"].split("(")[0][:100], ns))
    rows.sort()
    start = 0
    while start < len(rows) and rows[start][1] == FILL:
        start += 1
    end = start
    while end < len(rows) and rows[end][1] != FILL:
        end += 1
    segment = rows[start:end]
    if not segment:
        print("no B = 1 launches found (no kernel between the fills)")
        return 1
    timed = segment[: (len(segment) + 1) // 2]
    tot = OrderedDict()
    for _, name, ns in timed:
        c, t = tot.get(name, (0, 0.0))
        tot[name] = (c + 1, t + ns)
    total = sum(t for _, t in tot.values())
    print(f"{len(rows)} kernels in the run; B = 1 timed forward + backward: {len(timed)} launches, "
          f"{total / 1e6:.3f} ms of kernel time")
    for name, (c, t) in sorted(tot.items(), key=lambda kv: -kv[1][1]):
        print(f"{t / 1e3:10.1f} us {c:4d}x  {name}")
    print("\nlaunch order (B = 1 timed forward + backward):")
    for i, name, ns in timed:
        print(f"{i:5d} {ns / 1e3:9.1f} us  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
