#!/usr/bin/env bash
# build everything; test_gpu_gemm at full size (every configuration and the dispatcher on the same rows, the
# invariance count); bench_gemm (full) with nvidia-smi clocks; every other GPU test (ctest -R gpu -E test_gpu_gemm)
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
mkdir -p $OUT/r; B=/tmp/ev; T0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/r/build.log 2>&1
ninja -C $B -j16 >> $OUT/r/build.log 2>&1 || { tail -30 $OUT/r/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 ))s"
H3S_GEMM_INVARIANCE_JSON=$OUT/r/gemm_invariance.json timeout 380 $B/test_gpu_gemm > $OUT/r/test_gpu_gemm.log 2>&1; echo "test_gpu_gemm rc=$?"; tail -n 3 $OUT/r/test_gpu_gemm.log
echo "elapsed $(( $(date +%s) - T0 ))s"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 1000 > $OUT/r/clocks.csv 2>&1 & SMI=$!
timeout 60 $B/bench_gemm --reps 10 --warmup 3 --invariance $OUT/r/gemm_invariance.json --json $OUT/r/bench_gemm.json > $OUT/r/bench_gemm.log 2>&1; echo "bench rc=$?"
kill $SMI
echo "elapsed $(( $(date +%s) - T0 ))s"
R=$(( 585 - ($(date +%s) - T0) ))
(cd $B && timeout $R ctest -R gpu -E test_gpu_gemm --output-on-failure --timeout 300 -V) > $OUT/r/ctest.log 2>&1; echo "ctest rc=$?"
grep -E "Test +#[0-9]+:|tests passed|tests failed" $OUT/r/ctest.log
echo "elapsed $(( $(date +%s) - T0 ))s"
cd $OUT && tar czf all.tgz r && rm -rf r
