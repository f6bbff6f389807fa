#!/usr/bin/env bash
# Branch gemm-cluster-mc (on gemm-raster; compiled, not yet run on a GPU): forward/dgrad configuration 11, configuration
# 0 on 2-CTA clusters sharing the B block by TMA multicast (forced only), with the CTA-scope arrivals that made the
# clustered kernel of 197d2ba level with configuration 0 (../gemm_cluster.md). What it is to measure: whether the
# 5376 -> 28672 forward at M = 33396, a power gap at the 700 W cap (1.15x cuBLASLt in the settled benchmark, 1.025x at
# locked clocks, 1.76x cuBLASLt's L2 bytes: ../config_spread.md), runs faster at the cap with B read once per pair of
# tiles, alone and with the raster hooks of call64.sh. One device call from the repository root with OUT set,
# carrying .deps (about 6 minutes):
#   OUT=<dir> bash docs/evidence/gpu/development/raster/call65.sh
# build; test_gpu_gemm at small size (configuration 11 on every small shape and M, the raster part) plain and under
# memcheck and synccheck (racecheck, about 150 s, is left to the evidence run); at full size on 5376 -> 28672 at M in {925, 4253, 33396} (every configuration
# against configuration 0's rows); one-row bench_gemm, settled halves of 30 samples, of that forward and dgrad at
# M = 33396 and the forward at 8349 in configurations 0 and 11 (11 also with the raster "16 2 1"), twice; ncu at
# locked base clocks of configurations 0 and 11 on the forward at 33396 (time, L2 and memory bytes, tensor pipe).
set -u
. scripts/dev_call.sh
B=/tmp/b65
dev_build $B bench_gemm test_gpu_gemm || exit 1
dev_elapsed
H3S_DEV_SAN_TIMEOUT=120 dev_small_test $B memcheck synccheck
grep -E "raster groups|elements differ" $OUT/small.log | head -12
# a lent device returns at most 8 files: the sanitizer logs packed into one at once
tar czf $OUT/san.tgz -C $OUT $(cd $OUT && ls san_*.log) && rm -f $OUT/san_*.log
dev_elapsed
H3S_GEMM_SHAPES=5376x28672 H3S_GEMM_MS=925,4253,33396 timeout 180 $B/test_gpu_gemm >$OUT/full.log 2>&1
echo "full rc=$?: $(tail -n 1 $OUT/full.log)"
grep -E "FAIL|elements differ" $OUT/full.log | head -8
dev_elapsed
{
for rep in 1 2; do
  for ph in forward dgrad; do
    dev_row $B 5376 28672 33396 --phase $ph --reps 30 --config 0
    dev_row $B 5376 28672 33396 --phase $ph --reps 30 --config 11
  done
  dev_row $B 5376 28672 33396 --phase forward --reps 30 --config 11 --raster 16 2 1
  dev_row $B 5376 7168 8349 --phase forward --config 0
  dev_row $B 5376 7168 8349 --phase forward --config 11
done
} >$OUT/bench.txt 2>&1
cat $OUT/bench.txt
dev_elapsed
for c in 0 11; do
  [ $(($(date +%s) - DEV_T0)) -lt 500 ] || { echo "ncu of configuration $c left out: past 500 s"; continue; }
  timeout 40 ncu --clock-control base -c 1 -k regex:"wg_gemm" \
    --metrics gpu__time_duration.sum,lts__t_bytes.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
    $B/bench_gemm --only 5376 28672 33396 --phase forward --reps 1 --warmup 0 --config $c >$OUT/ncu_c$c.txt 2>&1
  echo "configuration $c:"
  grep -E "gpu__time|lts__t_bytes|dram__bytes|hmma" $OUT/ncu_c$c.txt
done
dev_elapsed
