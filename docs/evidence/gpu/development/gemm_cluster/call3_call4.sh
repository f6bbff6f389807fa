#!/usr/bin/env bash
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
mkdir -p $OUT/r; B=/tmp/b2; T0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/r/build.log 2>&1
ninja -C $B -j16 bench_gemm test_gpu_gemm >> $OUT/r/build.log 2>&1 || { tail -30 $OUT/r/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 ))s"
for mode in 3 4; do H3S_CL_MODE=$mode H3S_GPU_TEST_SMALL=1 timeout 60 $B/test_gpu_gemm 2>&1 | tail -n 2 | sed "s/^/mode $mode small: /"; done
for M in 8349 4253; do for sh in "5376 7168" "14336 5376"; do
  echo -n "$sh $M c0: "; timeout 30 $B/bench_gemm --only $sh $M --phase forward --config 0 2>&1 | tail -n 1
  for mode in 2 3 4; do echo -n "$sh $M c4 mode $mode: "; H3S_CL_MODE=$mode timeout 30 $B/bench_gemm --only $sh $M --phase forward --config 4 2>&1 | tail -n 1; done
done; done | tee $OUT/r/modes.txt
for mode in 3 4; do
H3S_CL_MODE=$mode timeout 60 ncu --kernel-name regex:'wg_gemm' --launch-skip 3 --launch-count 1 \
    --metrics gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_bytes.sum.per_second \
    $B/bench_gemm --only 5376 7168 8349 --phase forward --config 4 --reps 2 --warmup 1 2>&1 | grep -E "duration|hmma|lts__" | sed "s/^/mode $mode /"
done | tee $OUT/r/ncu_modes.txt
echo "elapsed $(( $(date +%s) - T0 ))s"
cd $OUT && tar czf all.tgz r && rm -rf r
