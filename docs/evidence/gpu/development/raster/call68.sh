#!/usr/bin/env bash
# Call 68 (prepared, not yet run): the full bench_gemm table three times back to back at main's head (whose src and
# tests give c093d54's PTX), with the invariance count from ../final_c093d54/gemm_invariance.json, then
# the six rows that read over 1.10 in c093d54's one run (raster.md) in one-row processes, three each: whether they are
# over by their median, as the 5376 -> 28672 forward at M = 33396 was at 82eb208, or only in that run. From the
# repository root with OUT set and H3S_SOURCE_COMMIT the commit run, carrying .deps (about 4 minutes):
#   H3S_SOURCE_COMMIT=<commit> OUT=<dir> bash docs/evidence/gpu/development/raster/call68.sh
# Files: run1.json .. run3.json, run1.log .. run3.log (each ending with nvidia-smi's SM clock, power and temperature
# every second of that run), rows.txt; then `python3 scripts/bench_spread.py run1.json run2.json run3.json` here.
set -u
. scripts/dev_call.sh
B=/tmp/b68
dev_build $B bench_gemm || exit 1
dev_elapsed
dev_tables $B 3 docs/evidence/gpu/development/final_c093d54/gemm_invariance.json
{
for rep in 1 2 3; do
    for row in "5376 7168 925 forward" "5376 7168 4253 forward" "2688 32256 4253 forward" "5376 7168 4253 dgrad" \
               "7168 5376 925 dgrad" "7168 5376 925 wgrad"; do
        set -- $row
        dev_row $B $1 $2 $3 --phase $4
    done
done
} >"$OUT/rows.txt" 2>&1
cat "$OUT/rows.txt"
dev_elapsed
