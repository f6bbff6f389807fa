#!/usr/bin/env bash
# Branch gemm-tail (configuration 10, the short band; the folding pass's batches from partial 0; bench_gemm's copy
# timing through time_impl), before its full evidence run: build; test_gpu_gemm at small size; one-row bench_gemm,
# twice, of the folded AdaLN dgrad at M in {1, 12, 16, 33, 64} (the dispatcher: the split and the folding pass; call 51
# has main's times of the same rows) and of the two short-band rows; test_gpu_gemm small also under memcheck; every kernel of the AdaLN dgrad row at M = 1 and
# 12 with its duration (the folding pass was 5.2 / 5.7 us in call 49). One device call from the repository root,
# carrying .deps (about 3 minutes).
set -u
. scripts/dev_call.sh
B=/tmp/b55
dev_build $B bench_gemm test_gpu_gemm || exit 1
dev_elapsed
dev_small_test $B memcheck
{
for rep in 1 2; do
  for M in 1 12 16 33 64; do dev_row $B 2688 32256 $M --phase dgrad; done
  dev_row $B 5376 7168 4253 --phase forward; dev_row $B 7168 5376 4253 --phase dgrad
done
} > $OUT/bench.txt 2>&1
cat $OUT/bench.txt
dev_elapsed
for M in 1 12; do
  timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size \
    $B/bench_gemm --only 2688 32256 $M --phase dgrad --reps 1 --warmup 0 > $OUT/kernels_M$M.txt 2>&1
  grep -E "^  [A-Za-z_].*\(|gpu__time_duration" $OUT/kernels_M$M.txt | tail -16
done
dev_elapsed
