#!/usr/bin/env bash
# The fold without selects, and wgrad configuration 6 taken by the dispatcher for F32 dw, on the H200 in one device
# call from the repository root, carrying .deps:
#   1. build the tree; bench_gemm --only K N M --phase wgrad [--wgrad-config C] [--dw-bf16], one process per line:
#      F32 dw configurations 0 and 6 and the dispatcher at M = 8352 and 4256 (as the probe calls 16 and 17 measured,
#      before this change), BF16 dw configuration 0 at M = 8352 on three shapes;
#   2. test_gpu_gemm at small size plain, under memcheck and under racecheck;
#   3. memcheck and racecheck on configuration 6 over a long reduction on a persistent grid with more tiles than
#      multiprocessors (bench_gemm --only 2688 1536 2100: 168 tiles, 33 reduction blocks).
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b18; T0=$(date +%s); mkdir -p $OUT
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
el
SH=("5376 7168" "7168 5376" "5376 28672" "14336 5376" "2688 32256")
run(){ echo -n "$1 $2 $3 $4${5:+ $5}: "; timeout 20 $B/bench_gemm --only $1 $2 $3 --phase wgrad $4 ${5:-} 2>&1 | tail -n 1; }
{
for M in 8352 4256; do for sh in "${SH[@]}"; do
  for c in "--wgrad-config 0" "--wgrad-config 6" ""; do run $sh $M "$c"; done
done; done
for sh in "5376 7168" "7168 5376" "5376 28672"; do run $sh 8352 "--wgrad-config 0" --dw-bf16; done
} > $OUT/bench_wgrad.txt
cat $OUT/bench_wgrad.txt | awk '{print $1,$2,$3,$4,$5,$(NF-4),$(NF-3),$(NF-2)}'
el
H3S_GPU_TEST_SMALL=1 timeout 40 $B/test_gpu_gemm > $OUT/small.log 2>&1; echo "small rc=$?"; tail -n 1 $OUT/small.log
for tool in memcheck racecheck; do
  H3S_GPU_TEST_SMALL=1 timeout 90 compute-sanitizer --tool $tool $B/test_gpu_gemm > $OUT/${tool}_small.log 2>&1
  echo "$tool small rc=$?"; tail -n 1 $OUT/${tool}_small.log
  timeout 60 compute-sanitizer --tool $tool $B/bench_gemm --only 2688 1536 2100 --phase wgrad --wgrad-config 6 \
    --reps 1 --warmup 1 > $OUT/${tool}_c6_m2100.log 2>&1
  echo "$tool configuration 6 rc=$? $(grep -E 'SUMMARY' $OUT/${tool}_c6_m2100.log | tail -n 1)"
  grep -c "Race reported\|Invalid" $OUT/${tool}_c6_m2100.log | sed 's/^/  reports (any kernel): /'
done
el
