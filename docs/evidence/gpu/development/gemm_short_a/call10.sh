#!/usr/bin/env bash
# The short-A copy (gemm-short-a.patch) on the H200, side by side with the tree without it, in one device call.
# Run from the repository root with the patch applied (git apply docs/evidence/gpu/development/gemm_short_a/
# gemm-short-a.patch), carrying .deps:
#   1. build the patched tree (B1) and the same tree with the patch reversed (B0);
#   2. B1: test_gpu_gemm at small size plain and under memcheck, racecheck, synccheck and initcheck (the zeroed rows
#      of the A slots must count as initialised);
#   3. B1: test_gpu_gemm at M in {1, 2, 7, 12, 33, 64} on every H3 shape (every configuration and the dispatcher
#      against the 33396-row reference), the invariance count as JSON;
#   4. bench_gemm --only K N M --phase P, one process per line, B0 then B1, at M = 12 and 64, forward and dgrad, on
#      the five shapes;
#   5. B0: configurations 0 and 1 forced (--config), forward and dgrad, at M in {1133, 4253, 33396} on the five
#      shapes: the per-round cost of a 128 x 192 tile against a 128 x 256 one for the dispatcher's factor
#      (docs/evidence/gpu/development/gemm_epilogue.md, "The dispatcher's factor").
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
mkdir -p $OUT/r; T0=$(date +%s)
P=docs/evidence/gpu/development/gemm_short_a/gemm-short-a.patch
rm -rf /tmp/src0 && mkdir /tmp/src0 && cp -r . /tmp/src0/ && (cd /tmp/src0 && patch -R -p1 -s < $P) || { echo "cannot reverse the patch"; exit 1; }
for t in 1 0; do
  S=$([ $t = 1 ] && echo . || echo /tmp/src0)
  cmake -S $S -B /tmp/b$t -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/r/build$t.log 2>&1
  ninja -C /tmp/b$t -j16 bench_gemm test_gpu_gemm >> $OUT/r/build$t.log 2>&1 || { tail -30 $OUT/r/build$t.log; exit 1; }
done
echo "build $(( $(date +%s) - T0 ))s"
B=/tmp/b1
H3S_GPU_TEST_SMALL=1 timeout 30 $B/test_gpu_gemm > $OUT/r/small.log 2>&1; echo "small rc=$?"; tail -n 2 $OUT/r/small.log
for tool in memcheck racecheck synccheck initcheck; do
  H3S_GPU_TEST_SMALL=1 timeout 60 compute-sanitizer --tool $tool $B/test_gpu_gemm > $OUT/r/${tool}_small.log 2>&1
  echo "$tool rc=$?"; tail -n 1 $OUT/r/${tool}_small.log
done
echo "elapsed $(( $(date +%s) - T0 ))s"
H3S_GEMM_MS=1,2,7,12,33,64 H3S_GEMM_INVARIANCE_JSON=$OUT/r/invariance.json timeout 240 $B/test_gpu_gemm > $OUT/r/test_gpu_gemm.log 2>&1
echo "test_gpu_gemm rc=$?"; tail -n 2 $OUT/r/test_gpu_gemm.log
echo "elapsed $(( $(date +%s) - T0 ))s"
for M in 12 64; do for ph in forward dgrad; do for sh in "5376 7168" "7168 5376" "5376 28672" "14336 5376" "2688 32256"; do
  for t in 0 1; do
    echo -n "$sh $M b$t: "; timeout 20 /tmp/b$t/bench_gemm --only $sh $M --phase $ph 2>&1 | tail -n 1
  done
done; done; done | tee $OUT/r/bench_short_a.txt
echo "elapsed $(( $(date +%s) - T0 ))s"
for M in 1133 4253 33396; do for ph in forward dgrad; do for sh in "5376 7168" "7168 5376" "5376 28672" "14336 5376" "2688 32256"; do
  for c in 0 1; do
    echo -n "$sh $M c$c: "; timeout 20 /tmp/b0/bench_gemm --only $sh $M --phase $ph --config $c 2>&1 | tail -n 1
  done
done; done; done | tee $OUT/r/bench_c0_c1.txt
echo "elapsed $(( $(date +%s) - T0 ))s"
cd $OUT && tar czf all.tgz r && rm -rf r
