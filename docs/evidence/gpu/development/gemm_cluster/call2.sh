#!/usr/bin/env bash
# device call 2: cluster configurations 4/5 (forward, dgrad): bits, sanitizer, speed against 0/1, ncu
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
mkdir -p $OUT/r
B=/tmp/b2
T0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/r/build.log 2>&1
ninja -C $B -j16 test_gpu_gemm bench_gemm >> $OUT/r/build.log 2>&1 || { tail -30 $OUT/r/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 ))s"
cuobjdump --dump-resource-usage $B/CMakeFiles/h3s_cuda_kernels.dir/src/cuda/linear.cu.o 2>&1 | grep -A1 "wg_gemm" > $OUT/r/resources.txt
grep -c "" $OUT/r/resources.txt
# bits: small shapes under sanitizers, then full-size shapes at a few M
H3S_GPU_TEST_SMALL=1 timeout 120 compute-sanitizer --tool memcheck $B/test_gpu_gemm > $OUT/r/memcheck_small.log 2>&1; echo "memcheck rc=$?"; tail -2 $OUT/r/memcheck_small.log
H3S_GPU_TEST_SMALL=1 timeout 120 compute-sanitizer --tool racecheck $B/test_gpu_gemm > $OUT/r/racecheck_small.log 2>&1; echo "racecheck rc=$?"; tail -2 $OUT/r/racecheck_small.log
H3S_GEMM_MS=7,1133,4253 H3S_GEMM_INVARIANCE_JSON=$OUT/r/invariance.json timeout 240 $B/test_gpu_gemm > $OUT/r/test_gpu_gemm.log 2>&1; echo "test_gpu_gemm rc=$?"; grep -i "differ\|fail" $OUT/r/test_gpu_gemm.log | tail -8
echo "elapsed $(( $(date +%s) - T0 ))s"
# speed: configurations side by side, one process per line
for M in 4253 925 8349; do
 for sh in "5376 7168" "7168 5376" "5376 28672" "14336 5376" "2688 32256"; do
  for ph in forward dgrad; do
   [ "$ph" = dgrad ] && [ "$sh" = "2688 32256" ] && continue
   for c in 0 4 1 5; do
     [ $(( $(date +%s) - T0 )) -gt 480 ] && break 4
     echo -n "$sh $M $ph c$c: "; timeout 30 $B/bench_gemm --only $sh $M --phase $ph --config $c --reps 10 2>&1 | tail -1
   done
  done
 done
done > $OUT/r/bench_configs.txt
cat $OUT/r/bench_configs.txt
echo "elapsed $(( $(date +%s) - T0 ))s"
if [ $(( $(date +%s) - T0 )) -lt 500 ]; then
timeout 60 ncu --kernel-name regex:'wg_gemm' --launch-skip 3 --launch-count 1 \
    --metrics gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_bytes.sum.per_second,launch__grid_size,launch__cluster_dim_x \
    $B/bench_gemm --only 5376 7168 8349 --phase forward --config 4 --reps 2 --warmup 1 > $OUT/r/ncu_c4.txt 2>&1
grep -E "wg_gemm|duration|hmma|lts__|grid_size|cluster" $OUT/r/ncu_c4.txt | cut -c1-150
fi
cd $OUT && tar czf all.tgz r && rm -rf r
