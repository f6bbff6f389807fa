#!/usr/bin/env bash
# Branch gemm-tail (not yet run on a GPU): forward/dgrad configuration 10, the short band (configuration 0's whole
# waves of 132 tiles, then the rows left, at most 64, in their small-M configuration, a second launch). One device
# call from the repository root, carrying .deps: build; test_gpu_gemm at small size (the short band on 4096 -> 4096 at
# M = 1030 and 1060) plain and under memcheck, racecheck and synccheck; one-row bench_gemm, twice, of the two rows the
# dispatcher moves to it (5376 -> 7168 forward and 7168 -> 5376 dgrad at M = 4253, 29 rows left) against the
# configurations it replaces (1, 8) and 0; test_gpu_gemm at full size on 5376 -> 7168 and 7168 -> 5376 at M = 4253.
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b54; T0=$(date +%s); mkdir -p $OUT
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
el
H3S_GPU_TEST_SMALL=1 timeout 90 $B/test_gpu_gemm > $OUT/small.log 2>&1; echo "small rc=$?"; grep -E "FAIL" $OUT/small.log | head; tail -n 1 $OUT/small.log
for t in memcheck racecheck synccheck; do
  H3S_GPU_TEST_SMALL=1 timeout 150 compute-sanitizer --tool $t $B/test_gpu_gemm > $OUT/san_$t.log 2>&1
  echo "$t rc=$?: $(tail -n 1 $OUT/san_$t.log)"; done
el
run(){ echo -n "$*: "; timeout 20 $B/bench_gemm --only "$@" 2>&1 | tail -n 1; }
{
for rep in 1 2; do
  r="5376 7168 4253 --phase forward"; run $r; run $r --config 1; run $r --config 8; run $r --config 0
  r="7168 5376 4253 --phase dgrad"; run $r; run $r --config 1; run $r --config 0
done
} > $OUT/bench.txt 2>&1
cat $OUT/bench.txt
el
H3S_GEMM_SHAPES=5376x7168,7168x5376 H3S_GEMM_MS=4253 timeout 120 $B/test_gpu_gemm > $OUT/test_gpu_gemm.log 2>&1
echo "full rc=$?"; grep -E "FAIL" $OUT/test_gpu_gemm.log | head -8; grep -E "elements differ" $OUT/test_gpu_gemm.log | head -4; tail -n 1 $OUT/test_gpu_gemm.log
el
