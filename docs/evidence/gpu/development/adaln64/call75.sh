#!/usr/bin/env bash
# Call 75: where mode 1 of the split (arrival flags) loses its 13-15 us (calls 73, 74).  Nsight Compute serialises the
# kernels, so the split's own duration shows whether setting the flags slows it, and the folding pass's duration what
# adding all 32 partials costs once they are all stored.  Per M in 12, 64 and mode in 0, 1: every kernel's duration,
# DRAM and L2 bytes (caches not flushed).  It runs on main's tree at 3f8ee8d with adaln-split-flags.patch applied
# (`git apply docs/evidence/gpu/development/adaln64/adaln-split-flags.patch`; the patch is the state of call 77).
# From the repository root with OUT set, carrying .deps (about 2 minutes):
#   OUT=<dir> bash docs/evidence/gpu/development/adaln64/call75.sh
set -u
. scripts/dev_call.sh
B=/tmp/b75
dev_build $B bench_gemm || exit 1
dev_elapsed
for M in 12 64; do
    for mode in 0 1; do
        timeout 100 ncu --clock-control none --cache-control none \
            --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,launch__grid_size \
            "$B/bench_gemm" --only 2688 32256 $M --phase dgrad --reps 2 --warmup 0 --split-mode $mode \
            >"$OUT/kernels_M${M}_mode$mode.txt" 2>&1
        echo "M $M mode $mode:"
        grep -E "^  [A-Za-z_].*\(|gpu__time_duration" "$OUT/kernels_M${M}_mode$mode.txt" |
            sed -E 's/\(CUtensorMap.*//; s/\(long.*//; s/\(cublasLt::.*//' | grep -v fill_random | tail -12
    done
done
dev_elapsed
