#!/usr/bin/env bash
# device call 1: evidence at HEAD, then ncu strict forward vs cuBLASLt at 5376x7168, M = 8349
set -u
SRC=$PWD
mkdir -p $OUT/ev $OUT/ncu
( H3S_SOURCE_COMMIT=$1 H3S_GPU_CTEST_EXCLUDE=test_gpu_gemm H3S_GPU_BUILD=/tmp/ev1 OUT=$OUT/ev timeout 470 bash scripts/gpu_evidence.sh > $OUT/ev/run.txt 2>&1; echo "gpu_evidence rc=$?" >> $OUT/ev/run.txt ) 
tail -5 $OUT/ev/run.txt
B=/tmp/ev1
if [ -x $B/bench_gemm ]; then
  for sh in "5376 7168 8349" "2688 32256 925"; do
    timeout 60 $B/bench_gemm --only $sh --phase forward --reps 10 2>&1 | tail -3
  done
  timeout 90 ncu --kernel-name regex:'wg_gemm|nvjet|sm90|gemm' --launch-skip 6 --launch-count 4 \
    --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum.per_second,dram__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__cluster_dim_x,launch__block_size,launch__shared_mem_per_block_dynamic \
    $B/bench_gemm --only 5376 7168 8349 --phase forward --reps 2 --warmup 1 > $OUT/ncu/ncu_fwd.txt 2>&1
  tail -60 $OUT/ncu/ncu_fwd.txt
fi
cd $OUT && tar czf all.tgz ev ncu && rm -rf ev ncu && ls -la
