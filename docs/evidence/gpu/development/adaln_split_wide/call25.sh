#!/usr/bin/env bash
# The AdaLN projection's folded dgrad at M <= 64 on 256-column split items (forced configuration 2) against the
# 64-column items (configuration 3, the dispatcher's), on the H200 in one device call from the repository root,
# carrying .deps:
#   1. build bench_gemm and test_gpu_gemm;
#   2. test_gpu_gemm on the AdaLN shape at full size (every configuration and the dispatcher at every M of the test,
#      configuration 2 at M <= 64 being the new items), cut after that shape's line;
#   3. test_gpu_gemm at small size plain, under memcheck and under racecheck (its folded 64 -> 2048 shape takes
#      configuration 2's items at M <= 64);
#   4. bench_gemm --only 2688 32256 M --phase dgrad --config C, one process per line, C in {3, 2}, M in {1, 3, 12,
#      17, 33, 64}.
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b25; T0=$(date +%s); mkdir -p $OUT
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
el
run(){ echo -n "$*: "; timeout 30 $B/bench_gemm --only "$@" 2>&1 | tail -n 1; }
{ for M in 1 3 12 17 33 64; do for c in 3 2; do run 2688 32256 $M --phase dgrad --config $c; done; done; } > $OUT/bench.txt
cut -c1-150 $OUT/bench.txt
el
H3S_GEMM_SHAPES=2688x32256 timeout 45 $B/test_gpu_gemm > $OUT/test_gpu_gemm_adaln.log 2>&1
echo "adaln test rc=$? (124: cut after the shape, as intended)"; grep -E "2688 -> 32256: [0-9]+ runs|FAIL" $OUT/test_gpu_gemm_adaln.log | head
el
H3S_GPU_TEST_SMALL=1 timeout 40 $B/test_gpu_gemm > $OUT/small.log 2>&1; echo "small rc=$?"; tail -n 1 $OUT/small.log
for tool in memcheck racecheck; do
  H3S_GPU_TEST_SMALL=1 timeout 100 compute-sanitizer --tool $tool $B/test_gpu_gemm > $OUT/${tool}_small.log 2>&1
  echo "$tool small rc=$?"; tail -n 3 $OUT/${tool}_small.log
done
el
