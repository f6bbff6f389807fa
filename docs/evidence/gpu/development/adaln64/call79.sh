#!/usr/bin/env bash
# Call 79: call78.sh's measurements (the cluster fold of the folded AdaLN dgrad at M <= 64, adaln-cluster-fold.patch
# applied), then every other GPU test (ctest -R gpu -E test_gpu_gemm: the refusals of device positions and timesteps
# in test_gpu_ops, the model's rope table and timestep sinusoid without the second value check) and Nsight Compute's
# speed-of-light section of the folded dgrad kernels at M = 64, with and without the cluster fold.
# From the repository root with OUT set, carrying .deps (about 7 minutes):
#   OUT=<dir> bash docs/evidence/gpu/development/adaln64/call79.sh
set -u
B=/tmp/b78
. scripts/dev_call.sh
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" \
    >"$OUT/build_all.log" 2>&1 && ninja -C "$B" -j"$(nproc)" >>"$OUT/build_all.log" 2>&1 ||
    { tail -30 "$OUT/build_all.log"; exit 1; }
dev_elapsed
bash docs/evidence/gpu/development/adaln64/call78.sh
(cd "$B" && timeout 200 ctest -R gpu -E test_gpu_gemm --output-on-failure --timeout 150) >"$OUT/ctest_gpu.log" 2>&1
echo "ctest gpu rc=$?: $(grep -E "tests passed|Total Test" "$OUT/ctest_gpu.log" | tr '\n' ' ')"
grep -E "Failed|\*\*\*" "$OUT/ctest_gpu.log" | head
dev_elapsed
for x in 0 3 2; do
    echo "== split-cluster $x"
    flag=()
    [ $x = 0 ] || flag=(--split-cluster $x)
    timeout 100 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis -k regex:dgrad "$B/bench_gemm" --only 2688 \
        32256 64 --phase dgrad "${flag[@]}" --reps 1 --warmup 0 2>&1 |
        grep -E "^  [a-z_:<>0-9, ]+\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Max Bandwidth" | head -30
done >"$OUT/ncu.log" 2>&1
dev_elapsed
