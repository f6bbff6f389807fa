#!/usr/bin/env bash
# The 128 x 232 transposed configuration (forward/dgrad configuration 5) beside 0, 1 and 4, on the H200 in one device
# call from the repository root, carrying .deps:
#   1. build bench_gemm and test_gpu_gemm; test_gpu_gemm at small size (every configuration, bits);
#   2. bench_gemm --only K N M, one process per line: forward and dgrad configurations 0, 1, 4, 5 and the dispatcher
#      at M = 925 on every shape, the dispatcher at M = 1133 and 4253;
#   3. test_gpu_gemm at full size at M in {925, 4253}.
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b28; T0=$(date +%s); mkdir -p $OUT
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
grep C7514 $OUT/build.log | head -3
el
H3S_GPU_TEST_SMALL=1 timeout 60 $B/test_gpu_gemm > $OUT/small.log 2>&1; echo "small rc=$?"; grep -E "FAIL" $OUT/small.log | head; tail -n 1 $OUT/small.log
el
SH=("5376 7168" "7168 5376" "5376 28672" "14336 5376" "2688 32256")
run(){ echo -n "$*: "; timeout 30 $B/bench_gemm --only "$@" 2>&1 | tail -n 1; }
{
for sh in "${SH[@]}"; do for ph in forward dgrad; do for c in 0 1 4 5; do
  run $sh 925 --phase $ph --config $c; done; run $sh 925 --phase $ph; done; done
for M in 1133 4253; do for sh in "${SH[@]}"; do for ph in forward dgrad; do run $sh $M --phase $ph; done; done; done
} > $OUT/bench.txt
cat $OUT/bench.txt
el
H3S_GEMM_MS=925,4253 timeout 220 $B/test_gpu_gemm > $OUT/test_gpu_gemm.log 2>&1
echo "test rc=$?"; grep -E "elements differ|FAIL|row_invariance" $OUT/test_gpu_gemm.log | head -30; tail -n 1 $OUT/test_gpu_gemm.log
el
