#!/usr/bin/env bash
# After call65.sh (configuration 11 faster at the cap on the 5376 -> 28672 forward at M = 33396), the raster groups of
# call64.sh on configurations 0 and 11, bench rows only (the sanitizers and the raster test ran in call65.sh on the
# same tree). One device call from the repository root with OUT set, carrying .deps (about 3 minutes):
#   OUT=<dir> bash docs/evidence/gpu/development/raster/call66.sh
set -u
. scripts/dev_call.sh
B=/tmp/b65
dev_build $B bench_gemm test_gpu_gemm || exit 1
dev_elapsed
{
for rep in 1 2; do
  for c in 0 11; do
    for g in 8 16 32; do
      dev_row $B 5376 28672 33396 --phase forward --reps 30 --config $c --raster $g 0 0
    done
  done
done
} >$OUT/bench.txt 2>&1
cat $OUT/bench.txt
dev_elapsed
