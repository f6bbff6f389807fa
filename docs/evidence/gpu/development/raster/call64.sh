#!/usr/bin/env bash
# Branch gemm-raster (not yet run on a GPU): the tile raster's group size and L2 policies for the operands' copies as a
# test hook (h3c_gemm_raster, bench_gemm --raster GROUP HINT_A HINT_B), to measure whether the 5376 -> 28672 forward
# at M = 33396 (1.15x cuBLASLt at the 700 W cap in the settled benchmark, 1.025x at locked clocks; 17.8-19.4 GB read
# from memory against cuBLASLt's 9.8-10.6: ../config_spread.md, call 63) loses less clock with less memory traffic.
# In configuration 0 (not transposed) operand A is x, whose group of tile-rows every wave of the group reuses, and B
# the weight, whose columns one wave uses: "2 1" keeps A (evict-last) and streams B (evict-first). x's lines marked
# evict-last may stay in L2 after strict's pass and change the cuBLASLt pass after it: read the strict times across
# settings (and ncu's traffic), not only the ratios.
# One device call from the repository root with OUT set, carrying .deps (about 5 minutes):
#   OUT=<dir> bash docs/evidence/gpu/development/raster/call64.sh
# build; test_gpu_gemm at small size (raster_invariance among the rest) plain and under memcheck and synccheck; at
# full size on 5376 -> 28672 at M = 4253 (the configurations, the wgrad parts and raster_invariance); one-row
# bench_gemm of that forward at M = 33396 (and at 4253) under each setting, twice, settled halves of 30 samples; ncu
# of strict's kernel at locked base clocks under each setting (time, L2 and memory bytes).
set -u
. scripts/dev_call.sh
B=/tmp/b64
dev_build $B bench_gemm test_gpu_gemm || exit 1
dev_elapsed
H3S_DEV_SAN_TIMEOUT=150 dev_small_test $B memcheck synccheck
grep -E "raster groups" $OUT/small.log
dev_elapsed
H3S_GEMM_SHAPES=5376x28672 H3S_GEMM_MS=4253 timeout 240 $B/test_gpu_gemm >$OUT/full.log 2>&1
echo "full rc=$?: $(tail -n 1 $OUT/full.log)"
grep -E "FAIL|elements differ" $OUT/full.log | head -8
dev_elapsed
SETTINGS="16,0,0 8,0,0 32,0,0 16,2,1 8,2,1 32,2,1"
{
for rep in 1 2; do
  for st in $SETTINGS; do
    dev_row $B 5376 28672 33396 --phase forward --reps 30 --raster ${st//,/ }
  done
  for st in 16,0,0 16,2,1; do
    dev_row $B 5376 28672 4253 --phase forward --raster ${st//,/ }
  done
done
} >$OUT/bench.txt 2>&1
cat $OUT/bench.txt
dev_elapsed
for st in $SETTINGS; do
  timeout 60 ncu --clock-control base -c 1 -k regex:"wg_gemm" \
    --metrics gpu__time_duration.sum,lts__t_bytes.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
    $B/bench_gemm --only 5376 28672 33396 --phase forward --reps 1 --warmup 0 --raster ${st//,/ } \
    >$OUT/ncu_${st//,/_}.txt 2>&1
  echo "raster $st:"
  grep -E "gpu__time|lts__t_bytes|dram__bytes|hmma" $OUT/ncu_${st//,/_}.txt
done
dev_elapsed
# a lent device returns at most 8 files: the ncu outputs packed into one
tar czf $OUT/ncu.tgz -C $OUT $(cd $OUT && ls ncu_*.txt) && rm -f $OUT/ncu_*.txt
