#!/usr/bin/env bash
# The full GEMM benchmark three more times at c389c4a (the evidence commit; src, tests and bench unchanged since),
# back to back in one device call after the evidence run's own (../../bench_gemm.json), to see how far each row's
# ratio moves between runs of the same kernels. From the repository root, carrying .deps, OUT set (about 2 minutes):
#   H3S_SOURCE_COMMIT=c389c4a97bd4fbf392b0b490163f6c99486faf75 OUT=<dir> \
#       bash docs/evidence/gpu/development/final_c389c4a/repeat.sh
# Files: run1.json .. run3.json (bench_gemm's JSON, the invariance count left at -1: no test ran in this call) and
# run1.log .. run3.log; scripts/bench_spread.py then sets each row's ratios side by side.
set -u
. scripts/dev_call.sh
B=/tmp/brep
dev_build $B bench_gemm || exit 1
dev_elapsed
for i in 1 2 3; do
    "$B/bench_gemm" --reps 10 --warmup 3 --json "$OUT/run$i.json" >"$OUT/run$i.log" 2>&1
    echo "run $i: rc=$? $(head -n 1 "$OUT/run$i.log")"
    dev_elapsed
done
