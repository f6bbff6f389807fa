#!/usr/bin/env bash
# the block benchmark first (bench/provider/run_gpu_bench.sh), then scripts/gpu_evidence.sh without test_gpu_gemm
# (run at full size in the previous call), Python included, in the time left
set -u
T0=$(date +%s); mkdir -p $OUT/bb
H3S_BENCH_BUILD=/tmp/ev OUT=$OUT/bb timeout 200 bash bench/provider/run_gpu_bench.sh > $OUT/bb/run.txt 2>&1; echo "block bench rc=$?"
tail -n 25 $OUT/bb/bench_block_tables.txt 2>/dev/null
echo "elapsed $(( $(date +%s) - T0 ))s"
R=$(( 590 - ($(date +%s) - T0) ))
H3S_GPU_CTEST_EXCLUDE=test_gpu_gemm H3S_GPU_BUILD=/tmp/ev OUT=$OUT/ev timeout $R bash scripts/gpu_evidence.sh > $OUT/ev.txt 2>&1; echo "gpu_evidence rc=$?"
grep -E "passed|failed|differ|drift|sanitizer|trajectory|replay|python" $OUT/ev.txt | tail -30
echo "elapsed $(( $(date +%s) - T0 ))s"
cd $OUT && tar czf all.tgz bb ev ev.txt && rm -rf bb ev ev.txt
