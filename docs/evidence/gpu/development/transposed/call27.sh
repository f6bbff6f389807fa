#!/usr/bin/env bash
# Transposed configurations (forward/dgrad configuration 4, the folded dgrad's 4, wgrad configuration 9) on the
# H200 in one device call from the repository root, carrying .deps:
#   1. build bench_gemm and test_gpu_gemm; test_gpu_gemm at small size (every configuration, bits);
#   2. bench_gemm --only K N M, one process per line: forward and dgrad configurations 0, 1 and 4 at M = 925, 1133
#      on every shape (M = 925, 4253); wgrad F32 dw configurations 7 and 9 on 7168 -> 5376 at M = 925 ... 8349;
#   3. test_gpu_gemm at full size at M in {7, 925, 4253} (every configuration against configuration 0).
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b27; T0=$(date +%s); mkdir -p $OUT
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
el
H3S_GPU_TEST_SMALL=1 timeout 60 $B/test_gpu_gemm > $OUT/small.log 2>&1; echo "small rc=$?"; grep -E "FAIL" $OUT/small.log | head; tail -n 1 $OUT/small.log
el
SH=("5376 7168" "7168 5376" "5376 28672" "14336 5376" "2688 32256")
run(){ echo -n "$*: "; timeout 30 $B/bench_gemm --only "$@" 2>&1 | tail -n 1; }
{
for M in 925 4253; do for sh in "${SH[@]}"; do for ph in forward dgrad; do for c in 0 1 4; do
  run $sh $M --phase $ph --config $c; done; done; done; done
for M in 925 1133 4253 8349; do for c in 7 9; do run 7168 5376 $M --phase wgrad --wgrad-config $c; done; done
} > $OUT/bench.txt
cat $OUT/bench.txt
el
H3S_GEMM_MS=7,925,4253 timeout 240 $B/test_gpu_gemm > $OUT/test_gpu_gemm.log 2>&1
echo "test rc=$?"; grep -E "elements differ|FAIL|row_invariance" $OUT/test_gpu_gemm.log | head -30; tail -n 1 $OUT/test_gpu_gemm.log
el
