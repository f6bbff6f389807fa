#!/usr/bin/env bash
# The wgrad with bulk stores (wgrad-tma.patch) on the H200, in one device call.  Run from the repository root with the
# patch applied (git apply docs/evidence/gpu/development/wgrad_tma/wgrad-tma.patch), carrying .deps:
#   1. build; test_gpu_gemm at small size plain and under memcheck, racecheck and synccheck;
#   2. test_gpu_gemm with H3S_GEMM_MS=12: the wgrad's one-tile comparisons (configurations 1 and 5 and the dispatcher
#      against the fold at M in {1, 7, 77, 256}) and fold comparisons (every fold configuration, 4 among them, against
#      configuration 0 at M in {257, 1133, 4253}), F32 and BF16 dw, on every H3 shape;
#   3. bench_gemm --only K N M --phase wgrad --wgrad-config C, one process per line, F32 and BF16 dw: C = 1 against 5
#      at M = 12 and 64, C = 0 against 4 at M = 925, 1133 and 2048, on the five shapes;
#   4. the full bench_gemm (the dispatcher's choice) as JSON;
#   5. racecheck and synccheck on bench_gemm at 2688 -> 32256, M = 129 (more tiles than multiprocessors, so that the
#      persistent CTAs of the bulk-store configurations run a second tile and reuse their staging boxes, which the
#      small test shapes do not reach): forward configuration 0, dgrad configuration 0 and wgrad configurations 4 and
#      5 (F32 and BF16 dw), one repetition each.
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
mkdir -p $OUT/r; B=/tmp/b11; T0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/r/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/r/build.log 2>&1 || { tail -30 $OUT/r/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 ))s"
H3S_GPU_TEST_SMALL=1 timeout 30 $B/test_gpu_gemm > $OUT/r/small.log 2>&1; echo "small rc=$?"; tail -n 2 $OUT/r/small.log
for tool in memcheck racecheck synccheck; do
  H3S_GPU_TEST_SMALL=1 timeout 60 compute-sanitizer --tool $tool $B/test_gpu_gemm > $OUT/r/${tool}_small.log 2>&1
  echo "$tool rc=$?"; tail -n 1 $OUT/r/${tool}_small.log
done
echo "elapsed $(( $(date +%s) - T0 ))s"
# Step 5 runs here, before steps 2-4: racecheck first, then synccheck; a run starts only in the call's first 240 s (the
# rest are reported as skipped), so that steps 2-4 keep their time.
for tool in racecheck synccheck; do
  for run in "--phase forward --config 0" "--phase wgrad --wgrad-config 4" "--phase wgrad --wgrad-config 5" \
      "--phase dgrad --config 0" "--phase wgrad --wgrad-config 4 --dw-bf16" "--phase wgrad --wgrad-config 5 --dw-bf16"; do
    if [ $(( $(date +%s) - T0 )) -gt 240 ]; then echo "$tool $run: skipped (time)"; continue; fi
    echo -n "$tool $run: "
    timeout 60 compute-sanitizer --tool $tool $B/bench_gemm --only 2688 32256 129 --reps 1 --warmup 1 $run \
      > $OUT/r/san.txt 2>&1; echo "rc=$? $(grep -E 'SUMMARY' $OUT/r/san.txt | tail -n 1)"
    cat $OUT/r/san.txt >> $OUT/r/sanitizer_m129.log
  done
done
echo "elapsed $(( $(date +%s) - T0 ))s"
H3S_GEMM_MS=12 H3S_GEMM_INVARIANCE_JSON=$OUT/r/invariance.json timeout 240 $B/test_gpu_gemm > $OUT/r/test_gpu_gemm.log 2>&1
echo "test_gpu_gemm rc=$?"; grep -E "wgrad|differ" $OUT/r/test_gpu_gemm.log | tail -n 12
echo "elapsed $(( $(date +%s) - T0 ))s"
for bf in "" "--dw-bf16"; do for sh in "5376 7168" "7168 5376" "5376 28672" "14336 5376" "2688 32256"; do
  for M in 12 64; do for c in 1 5; do
    echo -n "$sh $M w$c $bf: "; timeout 20 $B/bench_gemm --only $sh $M --phase wgrad --wgrad-config $c $bf 2>&1 | tail -n 1
  done; done
  for M in 925 1133 2048; do for c in 0 4; do
    echo -n "$sh $M w$c $bf: "; timeout 20 $B/bench_gemm --only $sh $M --phase wgrad --wgrad-config $c $bf 2>&1 | tail -n 1
  done; done
done; done | tee $OUT/r/bench_wgrad_configs.txt
echo "elapsed $(( $(date +%s) - T0 ))s"
timeout 90 $B/bench_gemm --reps 10 --warmup 3 --json $OUT/r/bench_gemm.json > $OUT/r/bench_gemm.log 2>&1; echo "bench rc=$?"
echo "elapsed $(( $(date +%s) - T0 ))s"
cd $OUT && tar czf all.tgz r && rm -rf r
