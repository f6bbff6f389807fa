#!/usr/bin/env bash
# Call 49: where the folded AdaLN dgrad's time goes at few rows after the 1024-row fold tile (d4fc25b): every kernel
# of one bench_gemm row (strict split, folding pass, cuBLASLt) with its duration, then ncu's full set on the split
# kernel and the folding pass at M = 1 and 12 (warp stalls and DRAM figures as raw CSV). One device call from the
# repository root, carrying .deps.
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b49; mkdir -p $OUT
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
for M in 1 12; do
  timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size \
    $B/bench_gemm --only 2688 32256 $M --phase dgrad --reps 1 --warmup 0 > $OUT/kernels_M$M.txt 2>&1
  grep -E "^  [A-Za-z_].*\(|gpu__time_duration|dram__bytes|launch__grid" $OUT/kernels_M$M.txt | tail -40
  for k in wg_gemm split_fold; do
    timeout 120 ncu --clock-control none -k regex:$k -c 1 --set full -o $OUT/${k}_M$M \
      $B/bench_gemm --only 2688 32256 $M --phase dgrad --reps 1 --warmup 0 > $OUT/ncu_${k}_M$M.log 2>&1
    ncu --import $OUT/${k}_M$M.ncu-rep --page details > $OUT/${k}_M${M}_details.txt 2>&1
    ncu --import $OUT/${k}_M$M.ncu-rep --page raw --csv 2>/dev/null | python3 -c '
import csv,sys
rows=list(csv.reader(sys.stdin))
h,u,v=rows[0],rows[1],rows[2]
for i,n in enumerate(h):
    if "stall" in n or "dram__bytes" in n or "dram__throughput" in n or "sm__cycles_active" in n or "gpc__cycles_elapsed.max" in n or "lts__t_sectors" in n:
        print(n,u[i],v[i])' > $OUT/${k}_M${M}_raw.txt
    rm -f $OUT/${k}_M$M.ncu-rep
  done
  grep -E "pcsamp_warps_issue_stalled_[a-z_]+ " $OUT/wg_gemm_M${M}_raw.txt | sort -k3 -n -r | head -8
  grep -E "^    Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy" $OUT/*_M${M}_details.txt
done
