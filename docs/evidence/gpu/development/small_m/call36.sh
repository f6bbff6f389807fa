#!/usr/bin/env bash
# Branch small-m-kps2: configurations 6 and 7 with two reduction blocks per ring stage (10 and 5 stages of 20 KB
# instead of 20 and 10 of 10 KB), the same MMAs in the same order. One device call from the repository root,
# carrying .deps: build; test_gpu_gemm at small size and at full size at M in {1, 7, 12, 16}; bench_gemm --only at
# M = 12, configurations 6 and 7 and the dispatcher, forward and dgrad on every shape.
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b36; T0=$(date +%s); mkdir -p $OUT
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
grep C7514 $OUT/build.log | head -3
el
H3S_GPU_TEST_SMALL=1 timeout 60 $B/test_gpu_gemm > $OUT/small.log 2>&1; echo "small rc=$?"; grep -E "FAIL" $OUT/small.log | head; tail -n 1 $OUT/small.log
SH=("5376 7168" "7168 5376" "5376 28672" "14336 5376" "2688 32256")
run(){ echo -n "$*: "; timeout 20 $B/bench_gemm --only "$@" 2>&1 | tail -n 1; }
{
for sh in "${SH[@]}"; do for ph in forward dgrad; do
  for c in 6 7; do run $sh 12 --phase $ph --config $c; done; run $sh 12 --phase $ph; done; done
} > $OUT/bench.txt 2>&1
cat $OUT/bench.txt
el
H3S_GEMM_MS=1,7,12,16 timeout 100 $B/test_gpu_gemm > $OUT/test_gpu_gemm.log 2>&1
echo "test rc=$?"; grep -E "elements differ|FAIL|row_invariance" $OUT/test_gpu_gemm.log | head -8; tail -n 1 $OUT/test_gpu_gemm.log
el
