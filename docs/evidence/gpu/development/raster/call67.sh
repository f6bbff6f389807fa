#!/usr/bin/env bash
# After call65.sh / call66.sh: configurations 0 and 11 side by side on the other long rows where the dispatcher takes 0
# (every shape at M = 33396, the wide ones at 8349), to choose where configuration 11 should replace it. One device
# call from the repository root with OUT set, carrying .deps (about 3 minutes):
#   OUT=<dir> bash docs/evidence/gpu/development/raster/call67.sh
set -u
. scripts/dev_call.sh
B=/tmp/b65
dev_build $B bench_gemm || exit 1
dev_elapsed
{
for row in "5376 7168 33396 forward" "7168 5376 33396 forward" "14336 5376 33396 forward" \
           "5376 7168 33396 dgrad" "7168 5376 33396 dgrad" "14336 5376 33396 dgrad" \
           "5376 28672 8349 forward" "14336 5376 8349 dgrad" "5376 7168 8349 dgrad"; do
  set -- $row
  for c in 0 11; do
    dev_row $B $1 $2 $3 --phase $4 --config $c
  done
done
} >$OUT/bench.txt 2>&1
cat $OUT/bench.txt
dev_elapsed
