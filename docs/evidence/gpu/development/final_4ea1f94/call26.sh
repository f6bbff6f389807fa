#!/usr/bin/env bash
# After the evidence at 1d6b04e the wgrad dispatch was restated through one helper (host code only; the PTX of
# src/cuda/linear.cu is byte for byte 1d6b04e's).  This call checks the restated dispatch on the H200, from the
# repository root at 4ea1f94, carrying .deps: build; test_gpu_gemm at small size (every wgrad configuration and the
# dispatcher against the fold, F32 and BF16 dw); every other GPU test (ctest -R gpu -E test_gpu_gemm).
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
B=/tmp/b26; T0=$(date +%s); mkdir -p $OUT
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 ))s"
H3S_GPU_TEST_SMALL=1 timeout 60 $B/test_gpu_gemm > $OUT/test_gpu_gemm_small.log 2>&1; echo "small rc=$?"
tail -n 2 $OUT/test_gpu_gemm_small.log
(cd $B && timeout 300 ctest -R gpu -E test_gpu_gemm --output-on-failure --timeout 200 -V) > $OUT/ctest_gpu.log 2>&1
echo "ctest rc=$?"; grep -E "tests passed|tests failed|Passed|Failed" $OUT/ctest_gpu.log | tail -n 12
echo "elapsed $(( $(date +%s) - T0 ))s"
