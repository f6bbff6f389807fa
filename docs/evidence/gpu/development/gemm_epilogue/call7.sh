#!/usr/bin/env bash
# build; small-shape test_gpu_gemm plain and under racecheck/memcheck/synccheck; configurations 0, 1, 4, 5
# side by side (forward and dgrad) at M = 8349 and 925; the full bench_gemm with the dispatcher's choice
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
mkdir -p $OUT/r; B=/tmp/b7; T0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/r/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/r/build.log 2>&1 || { tail -30 $OUT/r/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 ))s"
H3S_GPU_TEST_SMALL=1 timeout 30 $B/test_gpu_gemm > $OUT/r/small.log 2>&1; echo "small rc=$?"; tail -n 2 $OUT/r/small.log
for tool in racecheck memcheck synccheck; do
  H3S_GPU_TEST_SMALL=1 timeout 60 compute-sanitizer --tool $tool $B/test_gpu_gemm > $OUT/r/${tool}_small.log 2>&1; echo "$tool rc=$?"; tail -n 1 $OUT/r/${tool}_small.log
done
echo "elapsed $(( $(date +%s) - T0 ))s"
for M in 8349 925; do for ph in forward dgrad; do for sh in "5376 7168" "7168 5376" "5376 28672" "14336 5376" "2688 32256"; do for c in 0 1 4 5; do
  echo -n "$sh $M c$c: "; timeout 20 $B/bench_gemm --only $sh $M --phase $ph --config $c 2>&1 | tail -n 1
done; done; done; done | tee $OUT/r/bench_configs.txt
echo "elapsed $(( $(date +%s) - T0 ))s"
timeout 120 $B/bench_gemm --reps 10 --warmup 3 --json $OUT/r/bench_gemm.json > $OUT/r/bench_gemm.log 2>&1; echo "bench rc=$?"
grep -E "forward|dgrad" $OUT/r/bench_gemm.log | awk '$3>=925' | awk '{printf "%s %s %s %s\n", $1,$2,$3,$8}' | column -c 200
echo "elapsed $(( $(date +%s) - T0 ))s"
cd $OUT && tar czf all.tgz r && rm -rf r
