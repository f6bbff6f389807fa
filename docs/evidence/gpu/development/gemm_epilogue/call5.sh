#!/usr/bin/env bash
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
mkdir -p $OUT/r; B=/tmp/b5; T0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON -DCMAKE_CUDA_FLAGS=-lineinfo "${EXTRA_CMAKE[@]}" > $OUT/r/build.log 2>&1
ninja -C $B -j16 bench_gemm >> $OUT/r/build.log 2>&1 || { tail -30 $OUT/r/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 ))s"
for M in 8349 925; do for sh in "5376 7168" "2688 32256"; do for ph in forward dgrad; do for ns in 0 1; do
  echo -n "$sh $M $ph nostore=$ns: "; H3S_EXP_NOSTORE=$ns timeout 30 $B/bench_gemm --only $sh $M --phase $ph 2>&1 | tail -n 1
done; done; done; done | tee $OUT/r/nostore.txt
timeout 120 ncu --kernel-name regex:'wg_gemm' --launch-skip 3 --launch-count 1 --section WarpStateStats --section SchedulerStats --section SpeedOfLight --section MemoryWorkloadAnalysis \
   $B/bench_gemm --only 5376 7168 8349 --phase forward --config 0 --reps 2 --warmup 1 > $OUT/r/ncu_sections.txt 2>&1
grep -E "Stall|Warp Cycles|Issued|Eligible|Active Warps|Throughput|Busy" $OUT/r/ncu_sections.txt | head -40
timeout 150 ncu --kernel-name regex:'wg_gemm' --launch-skip 3 --launch-count 1 --section SourceCounters --section WarpStateStats \
   -o $OUT/r/prof $B/bench_gemm --only 5376 7168 8349 --phase forward --config 0 --reps 2 --warmup 1 > /dev/null 2>&1
timeout 60 ncu -i $OUT/r/prof.ncu-rep --page source --print-source sass --csv > $OUT/r/sass_source.csv 2>&1
wc -l $OUT/r/sass_source.csv; head -c 600 $OUT/r/sass_source.csv
echo "elapsed $(( $(date +%s) - T0 ))s"
cd $OUT && tar czf all.tgz r && rm -rf r
