#!/usr/bin/env bash
# Branch gemm-split-wide (cd96e63; run as call 60, outputs in call60/, results in ../band.md; the hook and
# --split-wide exist on that branch only): the folded AdaLN dgrad's split in tiles twice as wide along
# the weight's output columns (128 x 16 transposed at M <= 16, 64 x 128 above; the weight's rows read in 256-byte runs,
# 21 column tiles, one CTA per multiprocessor), a test hook (h3c_gemm_split_wide, bench_gemm --split-wide) while it is
# measured against the default tiles. One device call from the repository root, carrying .deps (about 4 minutes):
# build; test_gpu_gemm at small size plain and under memcheck and synccheck (the wide split runs there on the two
# folded small shapes); at full size on 2688 -> 32256 at M <= 64 (every configuration, and the wide split against the
# reference); one-row bench_gemm, twice, of the AdaLN dgrad at M in {1, 12, 16, 17, 33, 64}, default and wide, and
# with --chain 10 at M = 12 and 64; ncu of the split kernels and the folding pass at M = 12 and 64, caches left as the
# run leaves them (--cache-control none), so that the folding pass's reads from L2 show.
set -u
. scripts/dev_call.sh
B=/tmp/b60
dev_build $B bench_gemm test_gpu_gemm || exit 1
dev_elapsed
H3S_DEV_SAN_TIMEOUT=150 dev_small_test $B memcheck synccheck
dev_elapsed
H3S_GEMM_SHAPES=2688x32256 H3S_GEMM_MS=1,2,7,12,16,17,33,64 timeout 150 $B/test_gpu_gemm >$OUT/full.log 2>&1
echo "full rc=$?: $(tail -n 1 $OUT/full.log)"
grep -E "FAIL|elements differ" $OUT/full.log | head -8
dev_elapsed
{
for rep in 1 2; do
  for M in 1 12 16 17 33 64; do
    dev_row $B 2688 32256 $M --phase dgrad
    dev_row $B 2688 32256 $M --phase dgrad --split-wide
  done
  for M in 12 64; do
    dev_row $B 2688 32256 $M --phase dgrad --chain 10
    dev_row $B 2688 32256 $M --phase dgrad --chain 10 --split-wide
  done
done
} >$OUT/bench.txt 2>&1
cat $OUT/bench.txt
dev_elapsed
for M in 12 64; do
  for W in "" --split-wide; do
    timeout 60 ncu --clock-control none --cache-control none \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
      -k regex:"wg_gemm|split_fold" $B/bench_gemm --only 2688 32256 $M --phase dgrad --reps 1 --warmup 0 $W \
      >$OUT/kernels_M$M${W:+_wide}.txt 2>&1
    echo "M = $M ${W:-default}:"
    grep -E "^  [A-Za-z_].*\(|gpu__time_duration|dram__bytes|hit_rate" $OUT/kernels_M$M${W:+_wide}.txt |
      sed -E 's/\(CUtensorMap.*//' | tail -16
  done
done
dev_elapsed
