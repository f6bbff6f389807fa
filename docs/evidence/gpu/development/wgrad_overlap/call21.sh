#!/usr/bin/env bash
# The overlapped fold (wgrad configurations 7 and 8, the folded dgrad's default) on the H200 in one device call from
# the repository root, carrying .deps:
#   1. build bench_gemm and test_gpu_gemm;
#   2. bench_gemm --only K N M, one process per line: F32 dw configurations 6 and 7 at M = 4253 and 8349, 2 (the
#      dispatcher's) and 7 at 33396; BF16 dw configurations 0 and 8 at 8349; the AdaLN shape's folded dgrad with
#      configuration 1 (the register fold) and 0 (overlapped) at M = 925, 4253 and 8349;
#   3. test_gpu_gemm on the AdaLN shape at M in {12, 925, 4253} (every dgrad configuration) and the wgrad fold
#      configurations on every shape (M in {257, 1024, 1133, 4253}, F32 and BF16 dw), then at small size.
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b21; T0=$(date +%s); mkdir -p $OUT
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
el
SH=("5376 7168" "7168 5376" "5376 28672" "14336 5376" "2688 32256")
run(){ echo -n "$*: "; timeout 30 $B/bench_gemm --only "$@" 2>&1 | tail -n 1; }
{
for M in 4253 8349; do for sh in "${SH[@]}"; do for c in 6 7; do run $sh $M --phase wgrad --wgrad-config $c; done; done; done
for sh in "${SH[@]}"; do for c in 2 7; do run $sh 33396 --phase wgrad --wgrad-config $c; done; done
for sh in "${SH[@]}"; do for c in 0 8; do run $sh 8349 --phase wgrad --wgrad-config $c --dw-bf16; done; done
for M in 925 4253 8349; do for c in 1 0; do run 2688 32256 $M --phase dgrad --config $c; done; done
} > $OUT/bench.txt
cat $OUT/bench.txt
el
H3S_GEMM_SHAPES=2688x32256 H3S_GEMM_MS=12,925,4253 timeout 200 $B/test_gpu_gemm > $OUT/test_gpu_gemm.log 2>&1
echo "test rc=$?"; grep -E "elements differ|FAIL|row_invariance" $OUT/test_gpu_gemm.log | head -30; tail -n 1 $OUT/test_gpu_gemm.log
el
H3S_GPU_TEST_SMALL=1 timeout 40 $B/test_gpu_gemm > $OUT/small.log 2>&1; echo "small rc=$?"; tail -n 1 $OUT/small.log
el
