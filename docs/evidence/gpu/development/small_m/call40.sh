#!/usr/bin/env bash
# Call 40: the folded dgrad's split with its fold inside the kernel (split_fold_warp: three producer warps fold the
# partials of an earlier output tile, flags per work item, partial lines discarded from L2 once folded) instead of a
# second kernel. One device call from the repository root, carrying .deps: build; test_gpu_gemm at small size (now
# with the folded 72 -> 1160) plain and under memcheck, racecheck and synccheck; at full size at M in
# {1, 7, 12, 16, 17, 33, 64}; one-row bench_gemm of the AdaLN dgrad (2688 -> 32256) at M = 3, 12, 64, dispatcher and
# forced 3, 6, 7, each twice.
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b40; T0=$(date +%s); mkdir -p $OUT
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
el
H3S_GPU_TEST_SMALL=1 timeout 60 $B/test_gpu_gemm > $OUT/small.log 2>&1; echo "small rc=$?"; grep -E "FAIL" $OUT/small.log | head; tail -n 1 $OUT/small.log
for t in memcheck racecheck synccheck; do
  H3S_GPU_TEST_SMALL=1 timeout 120 compute-sanitizer --tool $t $B/test_gpu_gemm > $OUT/san_$t.log 2>&1
  echo "$t rc=$?: $(tail -n 1 $OUT/san_$t.log)"; done
el
run(){ echo -n "$*: "; timeout 20 $B/bench_gemm --only "$@" 2>&1 | tail -n 1; }
{
for rep in 1 2; do for M in 3 12 64; do
  run 2688 32256 $M --phase dgrad
  for c in 3 6 7; do run 2688 32256 $M --phase dgrad --config $c; done
done; done
} > $OUT/bench.txt 2>&1
cat $OUT/bench.txt
el
H3S_GEMM_MS=1,7,12,16,17,33,64 timeout 250 $B/test_gpu_gemm > $OUT/test_gpu_gemm.log 2>&1
echo "full rc=$?"; grep -E "FAIL" $OUT/test_gpu_gemm.log | head -8; grep -E "elements differ" $OUT/test_gpu_gemm.log | grep -v " 0 elements differ" | head; tail -n 1 $OUT/test_gpu_gemm.log
el
