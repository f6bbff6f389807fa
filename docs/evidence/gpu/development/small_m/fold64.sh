#!/usr/bin/env bash
# Runs on branch gemm-fold64 (its tree checked out): configurations 2 and 5 exist there only.
# Branch gemm-fold64 (compiled, ptxas clean, not yet run on a GPU): the folded dgrad's forced configuration 2 becomes
# dgrad_fold64, the register fold on 64 x 64 tiles with a 13-stage ring, one CTA per multiprocessor: at M <= 64 one
# CTA per 64 output columns (42 for the AdaLN projection), no partials in memory; forced 5 dgrad_fold64k, the same
# with two reduction blocks per stage (6 stages of 32 KB). One device call from the
# repository root, carrying .deps: build; test_gpu_gemm at small size plain and under memcheck, racecheck and
# synccheck; one-row bench_gemm of the AdaLN dgrad at M in {1, 3, 12, 17, 33, 64} with configurations 2, 5, 3 (the
# split of 64 x 64 items) and the dispatcher, twice; then test_gpu_gemm at full size on the AdaLN shape at M in
# {1, 7, 12, 17, 33, 64, 925} (configurations 2 and 5 against 0 on the same rows).
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/bf64; T0=$(date +%s); mkdir -p $OUT
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
for rep in 1 2; do for M in 1 3 12 17 33 64; do
  for c in 2 5 3; do run 2688 32256 $M --phase dgrad --config $c; done; run 2688 32256 $M --phase dgrad
done; done
} > $OUT/bench.txt 2>&1
cat $OUT/bench.txt
el
H3S_GEMM_SHAPES=2688x32256 H3S_GEMM_MS=1,7,12,17,33,64,925 timeout 200 $B/test_gpu_gemm > $OUT/test_gpu_gemm.log 2>&1
echo "full rc=$?"; grep -E "FAIL" $OUT/test_gpu_gemm.log | head -8; grep -E "elements differ" $OUT/test_gpu_gemm.log | head -3; tail -n 1 $OUT/test_gpu_gemm.log
el
