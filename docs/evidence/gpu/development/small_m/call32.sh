#!/usr/bin/env bash
# The 64 x 16 transposed configurations (forward/dgrad 6 and 7, the folded dgrad's split at M <= 16), on the H200 in
# one device call from the repository root, carrying .deps:
#   1. build bench_gemm and test_gpu_gemm; test_gpu_gemm at small size (every configuration, bits);
#   2. test_gpu_gemm at full size at M in {1, 7, 12, 16, 64, 925};
#   3. bench_gemm --only K N M, one process per line: forward and dgrad at M = 12 and 16, configurations 2, 3, 6, 7
#      and the dispatcher, on every shape;
#   4. ncu on the M = 12 forward 7168 -> 5376 and the AdaLN dgrad at M = 12 (the dispatcher's kernels and cuBLASLt's).
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b32; T0=$(date +%s); mkdir -p $OUT
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
grep C7514 $OUT/build.log | head -3
el
H3S_GPU_TEST_SMALL=1 timeout 120 $B/test_gpu_gemm > $OUT/small.log 2>&1; echo "small rc=$?"; grep -E "FAIL" $OUT/small.log | head; tail -n 1 $OUT/small.log
el
SH=("5376 7168" "7168 5376" "5376 28672" "14336 5376" "2688 32256")
run(){ echo -n "$*: "; timeout 30 $B/bench_gemm --only "$@" 2>&1 | tail -n 1; }
{
for M in 12 16; do for sh in "${SH[@]}"; do for ph in forward dgrad; do
  for c in 2 3 6 7; do run $sh $M --phase $ph --config $c; done; run $sh $M --phase $ph; done; done; done
} > $OUT/bench.txt 2>&1
cat $OUT/bench.txt
el
if command -v ncu >/dev/null; then
  timeout 60 ncu --clock-control none -k regex:'wg_gemm|nvjet|split_fold' --section SpeedOfLight --section LaunchStats \
    $B/bench_gemm --only 7168 5376 12 --phase forward --reps 1 --warmup 0 > $OUT/ncu_fwd.txt 2>&1
  timeout 60 ncu --clock-control none -k regex:'wg_gemm|nvjet|split_fold|gemv|sm90' --section SpeedOfLight --section LaunchStats \
    $B/bench_gemm --only 2688 32256 12 --phase dgrad --reps 1 --warmup 0 > $OUT/ncu_adaln.txt 2>&1
  grep -hE "^  [a-zA-Z_].*\(|Duration|DRAM Throughput" $OUT/ncu_fwd.txt $OUT/ncu_adaln.txt | cut -c1-120
fi
el
H3S_GEMM_MS=1,7,12,16,17,64,925 timeout 240 $B/test_gpu_gemm > $OUT/test_gpu_gemm.log 2>&1
echo "test rc=$?"; grep -E "elements differ|FAIL|row_invariance" $OUT/test_gpu_gemm.log | head -30; tail -n 1 $OUT/test_gpu_gemm.log
el
