#!/usr/bin/env bash
# The overlapped fold at short reductions: build as call 21 does, then bench_gemm --only K N M, one process per
# line, F32 dw configurations 4 (the dispatcher's at M <= 2048 before) and 7, BF16 dw configurations 0 and 8, at
# M = 925, 1133 and 2048 on every H3 shape.  (Its first run, without the build lines, reached a fresh machine with
# no build and measured nothing; the lines were added and it ran again.)
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b21; T0=$(date +%s); mkdir -p $OUT
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 ))s"
SH=("5376 7168" "7168 5376" "5376 28672" "14336 5376" "2688 32256")
run(){ echo -n "$*: "; timeout 30 $B/bench_gemm --only "$@" 2>&1 | tail -n 1; }
{
for M in 925 1133 2048; do for sh in "${SH[@]}"; do
  for c in 4 7; do run $sh $M --phase wgrad --wgrad-config $c; done
  for c in 0 8; do run $sh $M --phase wgrad --wgrad-config $c --dw-bf16; done
done; done
} > $OUT/bench.txt
cut -c1-150 $OUT/bench.txt
echo "elapsed $(( $(date +%s) - T0 ))s"
