#!/usr/bin/env bash
# Call 50: how much of the small-M rows' time is the gap before a lone call's first kernel. bench_gemm with --chain 1
# (each sample one product, as the full benchmark times it) and --chain 10 (ten products back to back per sample, the
# launches queued ahead of the device as in a model's pass), alternating, on the AdaLN projection (forward, dgrad,
# wgrad) and 7168 -> 5376 (forward, dgrad) at M in {1, 12, 64}. One device call from the repository root, carrying
# .deps.
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b50; mkdir -p $OUT
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
run(){ echo -n "$*: "; timeout 20 $B/bench_gemm --only "$@" 2>&1 | tail -n 1; }
{
for M in 1 12 64; do
  for ph in forward dgrad wgrad; do for c in 1 10; do run 2688 32256 $M --phase $ph --chain $c; done; done
  for ph in forward dgrad; do for c in 1 10; do run 7168 5376 $M --phase $ph --chain $c; done; done
done
} > $OUT/bench.txt 2>&1
cat $OUT/bench.txt
