#!/usr/bin/env bash
# Where configuration 6 (64 x 16 transposed, M <= 16) waits: ncu's full set on the strict forward 7168 -> 5376 at
# M = 12 and on cuBLASLt's kernel for the same product, with the warp-stall metrics as raw CSV (one device call from
# the repository root, carrying .deps).
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b35; mkdir -p $OUT
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
for k in wg_gemm nvjet; do
  timeout 150 ncu --clock-control none -k regex:$k -c 1 --set full -o $OUT/$k \
    $B/bench_gemm --only 7168 5376 12 --phase forward --reps 1 --warmup 0 > $OUT/ncu_$k.log 2>&1
  ncu --import $OUT/$k.ncu-rep --page details > $OUT/${k}_details.txt 2>&1
  ncu --import $OUT/$k.ncu-rep --page raw --csv 2>/dev/null | python3 -c '
import csv,sys
rows=list(csv.reader(sys.stdin))
h,u,v=rows[0],rows[1],rows[2]
for i,n in enumerate(h):
    if "stall" in n or "dram__bytes" in n or "l1tex__m_" in n or "sm__cycles_active" in n or "gpc__cycles_elapsed.max" in n or "tma" in n.lower():
        print(n,u[i],v[i])' > $OUT/${k}_raw.txt
  rm -f $OUT/$k.ncu-rep
done
grep -E "pcsamp_warps_issue_stalled_[a-z_]+ " $OUT/wg_gemm_raw.txt | sort -k3 -n -r | head -12
grep -E "Duration|DRAM Throughput" $OUT/*_details.txt
