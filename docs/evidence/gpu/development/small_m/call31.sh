#!/usr/bin/env bash
# M <= 64: where the strict kernels' time goes (one device call from the repository root, carrying .deps, which holds
# the probe patch as .deps/probe.patch (kept beside this script as probe.patch) as well as the build's packages):
#   1. build bench_gemm and test_gpu_gemm; test_gpu_gemm at small size (the wgrad configurations removed again);
#   2. the same tree with the probe patch (-DH3S_PROBE: H3S_PROBE_MODE 1 = the ring streams every block but no MMA
#      runs, 2 = the ring is filled once and the MMAs run on it without waiting; H3S_PROBE_BATCH G = the producer
#      waits for G free stages and issues G blocks back to back); its results are wrong by design, timing only;
#   3. bench_gemm --only K N M, one process per line;
#   4. ncu on the M = 12 forward 7168 -> 5376 (strict configuration 3 and cuBLASLt) and the AdaLN dgrad at M = 12.
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b31; BP=/tmp/b31p; T0=$(date +%s); mkdir -p $OUT
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
mkdir -p /tmp/srcp && tar --exclude='./build*' --exclude=./.git -cf - . | tar -C /tmp/srcp -xf - && (cd /tmp/srcp && patch -p1 -s < .deps/probe.patch) || exit 1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
cmake -S /tmp/srcp -B $BP -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DCMAKE_CUDA_FLAGS=-DH3S_PROBE "${EXTRA_CMAKE[@]}" > $OUT/buildp.log 2>&1
ninja -C $BP -j8 bench_gemm >> $OUT/buildp.log 2>&1 &
ninja -C $B -j8 bench_gemm test_gpu_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
wait; [ -x $BP/bench_gemm ] || { tail -30 $OUT/buildp.log; exit 1; }
el
H3S_GPU_TEST_SMALL=1 timeout 120 $B/test_gpu_gemm > $OUT/small.log 2>&1; echo "small rc=$?"; grep -E "FAIL" $OUT/small.log | head; tail -n 1 $OUT/small.log
el
run(){ echo -n "$*: "; timeout 30 $B/bench_gemm --only "$@" 2>&1 | tail -n 1; }
prb(){ echo -n "probe mode=$1 batch=$2 ${*:3}: "; H3S_PROBE_MODE=$1 H3S_PROBE_BATCH=$2 timeout 30 $BP/bench_gemm --only "${@:3}" 2>&1 | tail -n 1; }
{
for r in "7168 5376 12 --phase forward" "7168 5376 64 --phase forward" "14336 5376 12 --phase forward" \
         "5376 28672 12 --phase dgrad" "2688 32256 12 --phase dgrad" "2688 32256 64 --phase dgrad" \
         "2688 32256 12 --phase forward" "5376 7168 12 --phase forward"; do run $r; done
run 7168 5376 12 --phase forward --config 2
run 5376 28672 12 --phase dgrad --config 2
for m in 0 1 2; do prb $m 1 7168 5376 12 --phase forward --config 3; done
for b in 2 4 8; do prb 0 $b 7168 5376 12 --phase forward --config 3; done
for m in 0 1 2; do prb $m 1 5376 28672 12 --phase dgrad --config 3; done
for b in 2 4 8; do prb 0 $b 5376 28672 12 --phase dgrad --config 3; done
for m in 0 1; do prb $m 1 2688 32256 12 --phase forward; done
for b in 2 3; do prb 0 $b 2688 32256 12 --phase forward; done
for m in 0 1 2; do prb $m 1 2688 32256 12 --phase dgrad; done
for b in 2 4; do prb 0 $b 2688 32256 12 --phase dgrad; done
} > $OUT/bench.txt 2>&1
cat $OUT/bench.txt
el
if command -v ncu >/dev/null; then
  timeout 150 ncu --clock-control none -c 6 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section LaunchStats --section SourceCounters \
    $B/bench_gemm --only 7168 5376 12 --phase forward --reps 1 --warmup 0 > $OUT/ncu_fwd.txt 2>&1
  echo "ncu fwd rc=$?"
  timeout 100 ncu --clock-control none -c 6 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section LaunchStats \
    $B/bench_gemm --only 2688 32256 12 --phase dgrad --reps 1 --warmup 0 > $OUT/ncu_adaln.txt 2>&1
  echo "ncu adaln rc=$?"
  grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|L2 Hit|Registers Per|Grid Size|Stall|Warp Cycles Per Issued" $OUT/ncu_fwd.txt | head -80
fi
el
