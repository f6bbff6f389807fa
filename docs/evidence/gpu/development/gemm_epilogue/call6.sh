#!/usr/bin/env bash
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
mkdir -p $OUT/r; B=/tmp/b6; T0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/r/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/r/build.log 2>&1 || { tail -30 $OUT/r/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 ))s"
H3S_GPU_TEST_SMALL=1 timeout 30 $B/test_gpu_gemm > $OUT/r/small.log 2>&1; echo "small rc=$?"; tail -n 2 $OUT/r/small.log
H3S_GPU_TEST_SMALL=1 timeout 40 compute-sanitizer --tool racecheck $B/test_gpu_gemm > $OUT/r/racecheck_small.log 2>&1; echo "racecheck rc=$?"; tail -n 2 $OUT/r/racecheck_small.log
H3S_GPU_TEST_SMALL=1 timeout 20 compute-sanitizer --tool memcheck $B/test_gpu_gemm > $OUT/r/memcheck_small.log 2>&1; echo "memcheck rc=$?"; tail -n 2 $OUT/r/memcheck_small.log
echo "elapsed $(( $(date +%s) - T0 ))s"
for M in 8349 925; do for sh in "5376 7168" "7168 5376" "5376 28672" "14336 5376" "2688 32256"; do for c in 0 4; do
  [ $(( $(date +%s) - T0 )) -gt 120 ] && break 3
  echo -n "$sh $M c$c: "; timeout 20 $B/bench_gemm --only $sh $M --phase forward --config $c 2>&1 | tail -n 1
done; done; done | tee $OUT/r/bench_c0_c4.txt
echo "elapsed $(( $(date +%s) - T0 ))s"
R=$(( 185 - ($(date +%s) - T0) ))
[ $R -gt 20 ] && H3S_GEMM_SHAPES=5376x7168,2688x32256 H3S_GEMM_MS=7,1133 H3S_GEMM_INVARIANCE_JSON=$OUT/r/invariance.json timeout $R $B/test_gpu_gemm > $OUT/r/test_gpu_gemm.log 2>&1; echo "test_gpu_gemm rc=$?"; grep -E "differ|failed" $OUT/r/test_gpu_gemm.log | tail -n 6
echo "elapsed $(( $(date +%s) - T0 ))s"
cd $OUT && tar czf all.tgz r && rm -rf r
