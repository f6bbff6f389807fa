#!/usr/bin/env bash
# wgrad configuration 6 (configuration 4, the fold with bulk stores, on a persistent grid at every M) on the H200, in
# one device call from the repository root, carrying .deps:
#   1. build; test_gpu_gemm at small size plain and under memcheck and racecheck;
#   2. bench_gemm --only K N M --phase wgrad --wgrad-config C, one process per line, on the five shapes: F32 dw,
#      C = 0, 4 and 6 at M = 4253 and 8349, C = 2 and 6 at M = 33396; BF16 dw, C = 0 and 6 at M = 4253 and 8349;
#   3. test_gpu_gemm with H3S_GEMM_MS=12: among its comparisons every fold configuration (6 among them) against
#      configuration 0 at M in {257, 1133, 4253} on every H3 shape, F32 and BF16 dw;
#   4. racecheck on bench_gemm at 2688 -> 32256, M = 2100, configuration 6 (a reduction of 33 blocks, past the
#      short-reduction bound, where configuration 4 runs one CTA per tile and 6 runs each CTA over several tiles).
# Steps 3 and 4 start only in the call's first 290 s and 350 s (else reported as skipped).
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
mkdir -p $OUT/r; B=/tmp/b15; T0=$(date +%s)
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/r/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/r/build.log 2>&1 || { tail -30 $OUT/r/build.log; exit 1; }
el
H3S_GPU_TEST_SMALL=1 timeout 30 $B/test_gpu_gemm > $OUT/r/small.log 2>&1; echo "small rc=$?"; tail -n 2 $OUT/r/small.log
for tool in memcheck racecheck; do
  H3S_GPU_TEST_SMALL=1 timeout 60 compute-sanitizer --tool $tool $B/test_gpu_gemm > $OUT/r/${tool}_small.log 2>&1
  echo "$tool rc=$?"; tail -n 1 $OUT/r/${tool}_small.log
done
el
SH=("5376 7168" "7168 5376" "5376 28672" "14336 5376" "2688 32256")
{
for sh in "${SH[@]}"; do
  for M in 4253 8349; do for c in 0 4 6; do
    echo -n "$sh $M w$c: "; timeout 20 $B/bench_gemm --only $sh $M --phase wgrad --wgrad-config $c 2>&1 | tail -n 1
  done; done
  for c in 2 6; do
    echo -n "$sh 33396 w$c: "; timeout 30 $B/bench_gemm --only $sh 33396 --phase wgrad --wgrad-config $c 2>&1 | tail -n 1
  done
  for M in 4253 8349; do for c in 0 6; do
    echo -n "$sh $M w$c --dw-bf16: "
    timeout 20 $B/bench_gemm --only $sh $M --phase wgrad --wgrad-config $c --dw-bf16 2>&1 | tail -n 1
  done; done
done
} > $OUT/bench_wgrad_persist.txt
el
if [ $(( $(date +%s) - T0 )) -le 290 ]; then
  H3S_GEMM_MS=12 timeout 120 $B/test_gpu_gemm > $OUT/r/test_gpu_gemm_ms12.log 2>&1
  echo "test_gpu_gemm (H3S_GEMM_MS=12) rc=$?"; grep -E "configuration 6|differ" $OUT/r/test_gpu_gemm_ms12.log | tail -n 4
  tail -n 2 $OUT/r/test_gpu_gemm_ms12.log
else echo "test_gpu_gemm (H3S_GEMM_MS=12): skipped (time)"; fi
el
if [ $(( $(date +%s) - T0 )) -le 350 ]; then
  timeout 60 compute-sanitizer --tool racecheck $B/bench_gemm --only 2688 32256 2100 --phase wgrad --wgrad-config 6 \
    --reps 1 --warmup 1 > $OUT/r/racecheck_c6_m2100.log 2>&1
  echo "racecheck configuration 6, M = 2100: rc=$? $(grep -E 'SUMMARY' $OUT/r/racecheck_c6_m2100.log | tail -n 1)"
  grep "Race reported" $OUT/r/racecheck_c6_m2100.log | grep -vc nvjet | sed 's/^/  hazards outside cuBLASLt kernels: /'
else echo "racecheck configuration 6: skipped (time)"; fi
el
cd $OUT && tar czf all.tgz r && rm -rf r
