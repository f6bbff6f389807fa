#!/usr/bin/env bash
# Calls 38/39: main (0ebed9d's stage-per-iteration producer of configurations 6/7, not run before) and branch
# gemm-kps-next (its tree exported to out/kps, carried beside .deps) side by side. STEP=a: build both; each one's
# test_gpu_gemm at small size under memcheck, racecheck and synccheck; main at full size at M in {1, 7, 12, 16};
# one-row bench_gemm at M = 12, main and branch alternating row by row. STEP=b (same warm machine): the branch at
# full size at M in {1, 7, 12, 16, 17, 33, 64}; one-row bench at M = 64.
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
BM=/tmp/b38m; BK=/tmp/b38k; T0=$(date +%s); mkdir -p $OUT
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
SH=("5376 7168" "7168 5376" "5376 28672" "14336 5376" "2688 32256")
run(){ local b=$1; shift; echo -n "$*: "; timeout 20 $b/bench_gemm --only "$@" 2>&1 | tail -n 1; }
if [ "${STEP:-a}" = a ]; then
  ( cmake -S . -B $BM -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" &&
    ninja -C $BM -j8 bench_gemm test_gpu_gemm ) > $OUT/build_main.log 2>&1 &
  ( cmake -S out/kps -B $BK -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" &&
    ninja -C $BK -j8 bench_gemm test_gpu_gemm ) > $OUT/build_kps.log 2>&1 &
  wait
  for b in main kps; do tail -n 2 $OUT/build_$b.log; grep C7514 $OUT/build_$b.log | head -3; done
  [ -x $BM/test_gpu_gemm ] && [ -x $BK/test_gpu_gemm ] || exit 1
  el
  for b in main kps; do
    d=$BM; [ $b = kps ] && d=$BK
    H3S_GPU_TEST_SMALL=1 timeout 60 $d/test_gpu_gemm > $OUT/small_$b.log 2>&1; echo "$b small rc=$?"
    grep -E "FAIL" $OUT/small_$b.log | head; tail -n 1 $OUT/small_$b.log
    for t in memcheck racecheck synccheck; do
      echo -n "$b $t: "; H3S_GPU_TEST_SMALL=1 timeout 90 compute-sanitizer --tool $t $d/test_gpu_gemm 2>&1 | tail -n 1; done
    el
  done
  H3S_GEMM_MS=1,7,12,16 timeout 100 $BM/test_gpu_gemm > $OUT/full_main.log 2>&1
  echo "main full rc=$?"; grep -E "elements differ|FAIL|row_invariance" $OUT/full_main.log | head -8; tail -n 1 $OUT/full_main.log
  el
  {
  for sh in "${SH[@]}"; do for ph in forward dgrad; do
    for c in 6 7 dispatch; do
      cc=(--config $c); [ $c = dispatch ] && cc=()
      echo -n "main "; run $BM $sh 12 --phase $ph "${cc[@]}"; echo -n "kps  "; run $BK $sh 12 --phase $ph "${cc[@]}"; done
    for c in 2 3; do echo -n "kps  "; run $BK $sh 12 --phase $ph --config $c; done
  done; done
  } > $OUT/bench12.txt 2>&1
  cat $OUT/bench12.txt
  el
else
  H3S_GEMM_MS=1,7,12,16,17,33,64 timeout 250 $BK/test_gpu_gemm > $OUT/full_kps.log 2>&1
  echo "kps full rc=$?"; grep -E "elements differ|FAIL|row_invariance" $OUT/full_kps.log | head -8; tail -n 1 $OUT/full_kps.log
  el
  {
  for sh in "${SH[@]}"; do for ph in forward dgrad; do
    for c in 2 3 dispatch; do
      cc=(--config $c); [ $c = dispatch ] && cc=()
      echo -n "main "; run $BM $sh 64 --phase $ph "${cc[@]}"; echo -n "kps  "; run $BK $sh 64 --phase $ph "${cc[@]}"; done
  done; done
  } > $OUT/bench64.txt 2>&1
  cat $OUT/bench64.txt
  el
fi
