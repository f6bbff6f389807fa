#!/usr/bin/env bash
# Call 42: where call 41's fused fold loses its time. A development build with H3S_FOLD_DEV: 0 as designed, 1
# without the consumers' per-thread fence before the flag's release (bar.sync, then one thread's st.release), 2
# with no flags and no folding at all (timing only: dx is not computed). One-row bench_gemm of the AdaLN dgrad at
# M = 12 and 64, groups of 1 and 8 tiles, twice; small test with H3S_FOLD_DEV=1.
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b42; T0=$(date +%s); mkdir -p $OUT
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
el
H3S_FOLD_DEV=1 H3S_GPU_TEST_SMALL=1 timeout 60 $B/test_gpu_gemm > $OUT/small.log 2>&1; echo "small dev=1 rc=$?"; tail -n 1 $OUT/small.log
run(){ echo -n "dev=$H3S_FOLD_DEV G=$H3S_FOLD_GROUP $*: "; timeout 20 $B/bench_gemm --only "$@" 2>&1 | tail -n 1; }
{
for rep in 1 2; do for M in 12 64; do for G in 1 8; do for d in 0 1 2; do
  H3S_FOLD_DEV=$d H3S_FOLD_GROUP=$G run 2688 32256 $M --phase dgrad
done; done; done; done
} > $OUT/bench.txt 2>&1
cat $OUT/bench.txt
el
