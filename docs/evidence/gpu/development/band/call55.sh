#!/usr/bin/env bash
# Branch gemm-tail (configuration 10, the short band; the folding pass's batches from partial 0; bench_gemm's copy
# timing through time_impl), before its full evidence run: build; test_gpu_gemm at small size; one-row bench_gemm,
# twice, of the folded AdaLN dgrad at M in {1, 12, 16, 33, 64} (the dispatcher: the split and the folding pass; call 51
# has main's times of the same rows) and of the two short-band rows; every kernel of the AdaLN dgrad row at M = 1 and
# 12 with its duration (the folding pass was 5.2 / 5.7 us in call 49). One device call from the repository root,
# carrying .deps (about 3 minutes).
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b55; T0=$(date +%s); mkdir -p $OUT
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
el
H3S_GPU_TEST_SMALL=1 timeout 90 $B/test_gpu_gemm > $OUT/small.log 2>&1; echo "small rc=$?"; grep -E "FAIL" $OUT/small.log | head; tail -n 1 $OUT/small.log
run(){ echo -n "$*: "; timeout 20 $B/bench_gemm --only "$@" 2>&1 | tail -n 1; }
{
for rep in 1 2; do
  for M in 1 12 16 33 64; do run 2688 32256 $M --phase dgrad; done
  run 5376 7168 4253 --phase forward; run 7168 5376 4253 --phase dgrad
done
} > $OUT/bench.txt 2>&1
cat $OUT/bench.txt
el
for M in 1 12; do
  timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size \
    $B/bench_gemm --only 2688 32256 $M --phase dgrad --reps 1 --warmup 0 > $OUT/kernels_M$M.txt 2>&1
  grep -E "^  [A-Za-z_].*\(|gpu__time_duration" $OUT/kernels_M$M.txt | tail -16
done
el
