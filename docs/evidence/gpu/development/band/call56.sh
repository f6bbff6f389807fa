#!/usr/bin/env bash
# Branch gemm-l2 (on gemm-tail): the folded AdaLN dgrad's split streams its weight evict-first and stores its partials
# evict-last, the folding pass is a programmatic dependent launch that discards the partials' lines from L2 once
# added. One device call from the repository root, carrying .deps (about 3 minutes): build; test_gpu_gemm at small
# size plain and under memcheck and synccheck; test_gpu_gemm at full size on 2688 -> 32256 at M <= 925 (the split,
# forced 3/6/7, against the other configurations); one-row bench_gemm, twice, of the AdaLN dgrad at M in {1, 12, 16,
# 33, 64} (call 55 has gemm-tail's times of the same rows), and with --chain 10 at M = 12 and 64; ncu of the split
# and the folding pass at M = 12 and 64 (duration, DRAM bytes read and written).
set -u
. scripts/dev_call.sh
B=/tmp/b56
dev_build $B bench_gemm test_gpu_gemm || exit 1
dev_elapsed
H3S_DEV_SAN_TIMEOUT=150 dev_small_test $B memcheck synccheck
dev_elapsed
H3S_GEMM_SHAPES=2688x32256 H3S_GEMM_MS=1,2,7,12,16,17,33,64,925 timeout 150 $B/test_gpu_gemm >$OUT/full.log 2>&1
echo "full rc=$?: $(tail -n 1 $OUT/full.log)"
grep -E "FAIL" $OUT/full.log | head -8
dev_elapsed
{
for rep in 1 2; do
  for M in 1 12 16 33 64; do dev_row $B 2688 32256 $M --phase dgrad; done
  for M in 12 64; do dev_row $B 2688 32256 $M --phase dgrad --chain 10; done
done
} >$OUT/bench.txt 2>&1
cat $OUT/bench.txt
dev_elapsed
for M in 12 64; do
  timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    -k regex:"wg_gemm|split_fold|splitK" $B/bench_gemm --only 2688 32256 $M --phase dgrad --reps 1 --warmup 0 \
    >$OUT/kernels_M$M.txt 2>&1
  grep -E "^  [A-Za-z_].*\(|gpu__time_duration|dram__bytes" $OUT/kernels_M$M.txt | sed -E 's/\(CUtensorMap.*//' | tail -24
done
dev_elapsed
