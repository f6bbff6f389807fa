#!/usr/bin/env bash
# Branch gemm-band (not yet run on a GPU): forward/dgrad configurations 8 and 9, the bands (the whole waves of
# configuration 0 or 5, then 1's or 4's tiles on the rows left, a second launch). One device call from the repository
# root, carrying .deps: build; test_gpu_gemm at small size (the bands on 4096 -> 4096 at M = 1133) plain and under
# memcheck, racecheck and synccheck; one-row bench_gemm, twice, of the six rows the dispatcher moves to a band (the
# band against the configuration it replaces) and of 5376 -> 7168 forward at M = 4253 (configuration 1 against band
# 8); the folded AdaLN dgrad's split in configurations 3, 6 (now configuration 6's kernel: four blocks per stage, one
# CTA per multiprocessor) and 7 at M in {1, 12, 16, 33, 64}; test_gpu_gemm at full size on 14336 -> 5376 and 7168 -> 5376 at M in {925, 4253} (configurations 0-9 and the
# dispatcher against configuration 0's rows).
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b51; T0=$(date +%s); mkdir -p $OUT
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
  for r in "5376 7168 4253 --phase dgrad" "7168 5376 4253 --phase forward" "5376 28672 4253 --phase dgrad" \
           "14336 5376 4253 --phase forward"; do run $r; run $r --config 0; done
  for r in "14336 5376 925 --phase dgrad" "2688 32256 925 --phase forward"; do run $r; run $r --config 5; done
  run 5376 7168 4253 --phase forward; run 5376 7168 4253 --phase forward --config 8
  for M in 1 12 16 33 64; do for c in 3 6 7; do run 2688 32256 $M --phase dgrad --config $c; done; done
done
} > $OUT/bench.txt 2>&1
cat $OUT/bench.txt
el
H3S_GEMM_SHAPES=14336x5376,7168x5376 H3S_GEMM_MS=925,4253 timeout 200 $B/test_gpu_gemm > $OUT/test_gpu_gemm.log 2>&1
echo "full rc=$?"; grep -E "FAIL" $OUT/test_gpu_gemm.log | head -8; grep -E "elements differ" $OUT/test_gpu_gemm.log | head -4; tail -n 1 $OUT/test_gpu_gemm.log
el
