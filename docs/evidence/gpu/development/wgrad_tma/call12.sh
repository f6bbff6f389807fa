#!/usr/bin/env bash
# Both prepared GEMM patches on the H200 in one device call (call 10's files did not come back, and call 11 was not
# run): run from the repository root with gemm-short-a.patch and wgrad-tma.patch applied, carrying .deps:
#   1. build the tree (B1) and the same tree with gemm-short-a.patch reversed (B0), side by side;
#   2. B1: test_gpu_gemm at small size plain and under memcheck, racecheck, synccheck and initcheck;
#   3. bench_gemm --only K N M --phase P, one process per line, B0 then B1, at M = 12 and 64, forward and dgrad, on
#      the five shapes (the short-A copy against the 64-row box);
#   4. B1: bench_gemm --only K N M --phase wgrad --wgrad-config C, one process per line, F32 and BF16 dw: C = 1
#      against 5 at M = 12 and 64, C = 0 against 4 at M = 925 and 2048, on the five shapes;
#   5. B1: racecheck and synccheck on bench_gemm at 2688 -> 32256, M = 129 (more tiles than multiprocessors, so that
#      the persistent CTAs of the bulk-store configurations run a second tile and reuse their staging boxes):
#      forward configuration 0, wgrad configurations 4 and 5, dgrad configuration 0, wgrad 4 and 5 with BF16 dw;
#      a run starts only in the call's first 500 s (the rest are reported as skipped).
# The three tables are written straight to the output folder (they come back even if the call is cut short), the
# logs as all.tgz at the end.
# The full test_gpu_gemm (every configuration at every M of the issue, M = 33 among them) is the evidence run's.
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
mkdir -p $OUT/r; T0=$(date +%s)
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
P=docs/evidence/gpu/development/gemm_short_a/gemm-short-a.patch
rm -rf /tmp/src0 && mkdir /tmp/src0 && cp -r . /tmp/src0/ && (cd /tmp/src0 && patch -R -p1 -s < $P) || { echo "cannot reverse the patch"; exit 1; }
for t in 1 0; do
  S=$([ $t = 1 ] && echo . || echo /tmp/src0)
  ( cmake -S $S -B /tmp/b$t -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" \
      && ninja -C /tmp/b$t -j8 bench_gemm test_gpu_gemm ) > $OUT/r/build$t.log 2>&1 &
done
wait
for t in 1 0; do [ -x /tmp/b$t/bench_gemm ] && [ -x /tmp/b$t/test_gpu_gemm ] || { tail -30 $OUT/r/build$t.log; exit 1; }; done
echo "build $(( $(date +%s) - T0 ))s"
B=/tmp/b1
H3S_GPU_TEST_SMALL=1 timeout 30 $B/test_gpu_gemm > $OUT/r/small.log 2>&1; echo "small rc=$?"; tail -n 2 $OUT/r/small.log
for tool in memcheck racecheck synccheck initcheck; do
  H3S_GPU_TEST_SMALL=1 timeout 60 compute-sanitizer --tool $tool $B/test_gpu_gemm > $OUT/r/${tool}_small.log 2>&1
  echo "$tool rc=$?"; tail -n 1 $OUT/r/${tool}_small.log
done
el
SH=("5376 7168" "7168 5376" "5376 28672" "14336 5376" "2688 32256")
for M in 12 64; do for ph in forward dgrad; do for sh in "${SH[@]}"; do for t in 0 1; do
  echo -n "$sh $M $ph b$t: "; timeout 20 /tmp/b$t/bench_gemm --only $sh $M --phase $ph 2>&1 | tail -n 1
done; done; done; done > $OUT/bench_short_a.txt
el
for bf in "" "--dw-bf16"; do for sh in "${SH[@]}"; do
  for M in 12 64; do for c in 1 5; do
    echo -n "$sh $M w$c $bf: "; timeout 20 $B/bench_gemm --only $sh $M --phase wgrad --wgrad-config $c $bf 2>&1 | tail -n 1
  done; done
  for M in 925 2048; do for c in 0 4; do
    echo -n "$sh $M w$c $bf: "; timeout 20 $B/bench_gemm --only $sh $M --phase wgrad --wgrad-config $c $bf 2>&1 | tail -n 1
  done; done
done; done > $OUT/bench_wgrad_configs.txt
el
for tool in racecheck synccheck; do
  for run in "--phase forward --config 0" "--phase wgrad --wgrad-config 4" "--phase wgrad --wgrad-config 5" \
      "--phase dgrad --config 0" "--phase wgrad --wgrad-config 4 --dw-bf16" "--phase wgrad --wgrad-config 5 --dw-bf16"; do
    if [ $(( $(date +%s) - T0 )) -gt 500 ]; then echo "$tool $run: skipped (time)"; continue; fi
    echo -n "$tool $run: "
    timeout 45 compute-sanitizer --tool $tool $B/bench_gemm --only 2688 32256 129 --reps 1 --warmup 1 $run \
      > $OUT/r/san.txt 2>&1; echo "rc=$? $(grep -E 'SUMMARY' $OUT/r/san.txt | tail -n 1)"
    cat $OUT/r/san.txt >> $OUT/r/sanitizer_m129.log
  done
done | tee $OUT/sanitizer_m129_summary.txt
rm -f $OUT/r/san.txt
el
cd $OUT && tar czf all.tgz r && rm -rf r
