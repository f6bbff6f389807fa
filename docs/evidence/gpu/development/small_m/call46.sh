#!/usr/bin/env bash
# Call 46: the folded dgrad's fold tile of 1024 rows (H3C_DGRAD_FOLD_TILE; 256 up to 113e0fe), so that its split at
# M <= 64 writes and reads back a quarter of the partials. One device call from the repository root, carrying .deps:
# build; test_gpu_gemm at small size (its two folded shapes: 64 -> 2048, two whole fold tiles; 72 -> 1160, a partial
# one); test_gpu_gemm at full size on the AdaLN shape at M in {1, 7, 12, 16, 17, 33, 64, 925, 4253} (every
# configuration against configuration 0 on the same rows); one-row bench_gemm of the AdaLN dgrad, the dispatcher at M
# in {1, 3, 12, 17, 33, 64, 925, 4253, 8349} and configurations 3 and 7 at M in {1, 12, 16}, twice.
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b46; T0=$(date +%s); mkdir -p $OUT
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
el
H3S_GPU_TEST_SMALL=1 timeout 60 $B/test_gpu_gemm > $OUT/small.log 2>&1; echo "small rc=$?"; grep -E "FAIL" $OUT/small.log | head; tail -n 1 $OUT/small.log
H3S_GEMM_SHAPES=2688x32256 H3S_GEMM_MS=1,7,12,16,17,33,64,925,4253 timeout 240 $B/test_gpu_gemm > $OUT/test_gpu_gemm.log 2>&1
echo "full rc=$?"; grep -E "FAIL" $OUT/test_gpu_gemm.log | head -8; grep -E "2688 -> 32256" $OUT/test_gpu_gemm.log | head -3; tail -n 1 $OUT/test_gpu_gemm.log
el
run(){ echo -n "$*: "; timeout 20 $B/bench_gemm --only "$@" 2>&1 | tail -n 1; }
{
for rep in 1 2; do
  for M in 1 3 12 17 33 64 925 4253 8349; do run 2688 32256 $M --phase dgrad; done
  for M in 1 12 16; do for c in 3 7; do run 2688 32256 $M --phase dgrad --config $c; done; done
done
} > $OUT/bench.txt 2>&1
cat $OUT/bench.txt
el
