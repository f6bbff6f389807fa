#!/usr/bin/env bash
# Call 41: call 40's fused fold with the work items in groups of H3S_FOLD_GROUP output tiles (fold tile by fold
# tile within a group, so that the items in flight read whole stretches of the weight's rows; call 40 ran them tile
# by tile and lost 30-75 us). Build; test_gpu_gemm at small size plain and under memcheck, racecheck, synccheck;
# one-row bench_gemm of the AdaLN dgrad (2688 -> 32256) at M = 12 and 64 for groups of 1, 4, 8, 16 and 42 tiles,
# twice, and the 5376 -> 28672 dgrad at M = 64 (a kernel that shares the configuration, not the split) once.
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b41; T0=$(date +%s); mkdir -p $OUT
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
el
H3S_GPU_TEST_SMALL=1 timeout 60 $B/test_gpu_gemm > $OUT/small.log 2>&1; echo "small rc=$?"; grep -E "FAIL" $OUT/small.log | head; tail -n 1 $OUT/small.log
for t in memcheck racecheck synccheck; do
  H3S_GPU_TEST_SMALL=1 timeout 120 compute-sanitizer --tool $t $B/test_gpu_gemm > $OUT/san_$t.log 2>&1
  echo "$t rc=$?: $(tail -n 1 $OUT/san_$t.log)"; done
el
run(){ echo -n "G=${H3S_FOLD_GROUP:-8} $*: "; timeout 20 $B/bench_gemm --only "$@" 2>&1 | tail -n 1; }
{
for rep in 1 2; do for M in 12 64; do for G in 1 4 8 16 42; do
  H3S_FOLD_GROUP=$G run 2688 32256 $M --phase dgrad
done; done; done
run 5376 28672 64 --phase dgrad
} > $OUT/bench.txt 2>&1
cat $OUT/bench.txt
el
