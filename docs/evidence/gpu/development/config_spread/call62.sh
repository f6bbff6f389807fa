#!/usr/bin/env bash
# Call 62: bench_gemm with a settling pass before each row and its halves in the order strict, cuBLASLt, cuBLASLt,
# strict (the full table three times, back to back), at sources whose src and tests equal c389c4a's (the full test's
# invariance count taken from ../final_c389c4a/gemm_invariance.json). From the repository root with OUT set and
# H3S_SOURCE_COMMIT the commit run, carrying .deps:
#   H3S_SOURCE_COMMIT=<commit> OUT=<dir> bash docs/evidence/gpu/development/config_spread/call62.sh
# Files: run1.json .. run3.json, run1.log .. run3.log (each ending with nvidia-smi's SM clock, power and temperature
# every second of that run).
set -u
. scripts/dev_call.sh
B=/tmp/b62
dev_build $B bench_gemm || exit 1
dev_elapsed
# the three runs (the loop that ran here is now scripts/dev_call.sh's dev_tables, unchanged)
dev_tables $B 3 docs/evidence/gpu/development/final_c389c4a/gemm_invariance.json
