#!/usr/bin/env bash
# Branch gemm-kps-next (not run yet): KPS, the reduction blocks per ring stage, as a configuration parameter;
# configurations 6 at 4 blocks per stage (5 stages of 40 KB), 7 at 2 (5 of 20 KB), and the 64 x 64 configurations
# 2 and 3 (and the folded dgrad's split at 16 < M <= 64) at 2 (3 and 6 stages of 32 KB). The same MMAs in the same
# order. One device call from the repository root, carrying .deps: build; test_gpu_gemm at small size (tiles of odd
# block counts: K = 136 and 264 end in a partial stage), at full size at M in {1, 7, 12, 16, 17, 33, 64}; one-row
# bench_gemm at M = 12 and 64 (configurations 2, 3, 6, 7 and the dispatcher), to compare with call 36's rows; the
# same sanitizers as call 37.
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/bkps; T0=$(date +%s); mkdir -p $OUT
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
grep C7514 $OUT/build.log | head -3
el
H3S_GPU_TEST_SMALL=1 timeout 60 $B/test_gpu_gemm > $OUT/small.log 2>&1; echo "small rc=$?"; grep -E "FAIL" $OUT/small.log | head; tail -n 1 $OUT/small.log
for t in memcheck racecheck synccheck; do
  H3S_GPU_TEST_SMALL=1 timeout 60 compute-sanitizer --tool $t $B/test_gpu_gemm 2>&1 | tail -n 1; done
el
SH=("5376 7168" "7168 5376" "5376 28672" "14336 5376" "2688 32256")
run(){ echo -n "$*: "; timeout 20 $B/bench_gemm --only "$@" 2>&1 | tail -n 1; }
{
for M in 12 64; do for sh in "${SH[@]}"; do for ph in forward dgrad; do
  for c in 2 3 6 7; do run $sh $M --phase $ph --config $c; done; run $sh $M --phase $ph; done; done; done
} > $OUT/bench.txt 2>&1
cat $OUT/bench.txt
el
H3S_GEMM_MS=1,7,12,16,17,33,64 timeout 200 $B/test_gpu_gemm > $OUT/test_gpu_gemm.log 2>&1
echo "test rc=$?"; grep -E "elements differ|FAIL|row_invariance" $OUT/test_gpu_gemm.log | head -8; tail -n 1 $OUT/test_gpu_gemm.log
el
