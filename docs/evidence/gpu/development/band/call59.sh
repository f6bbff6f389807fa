#!/usr/bin/env bash
# After call 58's rest stage, whose racecheck of test_gpu_gemm at small size stopped at gpu_evidence.sh's 100 s limit
# (the four small shapes done without a hazard): that run alone, to its end, on 771f708's build. One device call from
# the repository root, carrying .deps (about 3.5 minutes).
set -u
. scripts/dev_call.sh
B=/tmp/b57
dev_build $B test_gpu_gemm || exit 1
dev_elapsed
H3S_GPU_TEST_SMALL=1 timeout 255 compute-sanitizer --tool racecheck --error-exitcode 3 $B/test_gpu_gemm \
    >$OUT/san_racecheck_gemm.log 2>&1
echo "racecheck rc=$?"
grep -v "^ *ok" $OUT/san_racecheck_gemm.log | tail -25
dev_elapsed
