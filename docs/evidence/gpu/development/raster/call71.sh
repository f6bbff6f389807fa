#!/usr/bin/env bash
# Call 71 (branch gemm-192): configuration 12, 192 x 192 tiles on three consumer warpgroups (11% less shared-memory
# traffic per product than 0's 128 x 256), forced on the whole bench_gemm table against the dispatcher's choice, two
# runs of each in turn, after test_gpu_gemm at small size (every configuration, 12 included, on the same rows). From the
# repository root with OUT set, carrying .deps (about 3 minutes):
#   OUT=<dir> bash docs/evidence/gpu/development/raster/call71.sh
# Files: small.log, dflt1.json, c12_1.json, dflt2.json, c12_2.json (and their logs, packed in logs.tgz); then here
# `python3 scripts/bench_spread.py` on each pair.
set -u
. scripts/dev_call.sh
B=/tmp/b71
dev_build $B bench_gemm test_gpu_gemm || exit 1
dev_elapsed
dev_small_test $B
dev_elapsed
L=/tmp/b71/logs
rm -rf "$L" && mkdir -p "$L"
for rep in 1 2; do
    "$B/bench_gemm" --reps 10 --warmup 3 --json "$OUT/dflt$rep.json" >"$L/dflt$rep.log" 2>&1
    echo "default $rep: rc=$?"
    "$B/bench_gemm" --reps 10 --warmup 3 --config 12 --json "$OUT/c12_$rep.json" >"$L/c12_$rep.log" 2>&1
    echo "config 12 $rep: rc=$?"
    dev_elapsed
done
python3 - "$OUT" <<'PY'
import json, os, sys
d = sys.argv[1]
def rows(n):
    return {(r["shape"], r["phase"], r["M"]): r for r in json.load(open(os.path.join(d, n)))["rows"]}
a1, a2, b1, b2 = rows("dflt1.json"), rows("dflt2.json"), rows("c12_1.json"), rows("c12_2.json")
print("shape phase M | default ms (ratio) x2 | config 12 ms (ratio) x2 | 12 / default")
for k in a1:
    if k[1] == "wgrad" or k[2] < 925:
        continue
    sd = (a1[k]["strict_ms"] + a2[k]["strict_ms"]) / 2
    s12 = (b1[k]["strict_ms"] + b2[k]["strict_ms"]) / 2
    print(k[0], k[1], k[2], "|", a1[k]["strict_ms"], a1[k]["ratio"], a2[k]["strict_ms"], a2[k]["ratio"], "|",
          b1[k]["strict_ms"], b1[k]["ratio"], b2[k]["strict_ms"], b2[k]["ratio"], "|", round(s12 / sd, 4))
PY
tar czf "$OUT/logs.tgz" -C /tmp/b71 logs
dev_elapsed
