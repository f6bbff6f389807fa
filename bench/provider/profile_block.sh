#!/usr/bin/env bash
# Kernel-level profile of one strict H3 block (release geometry, S = 925) on the GPU: runs
# bench_gpu_block once (B = 1 and B = 4, one timed run and one per-node run each) under Nsight
# Compute, collecting only each kernel's duration, and summarises it by kernel and by node.
# A profile, not a benchmark: Nsight Compute serialises the kernels (clocks and caches left as they
# are: --clock-control none --cache-control none),
# but the per-node split follows the bench's node order.  From the repository root:
#
#   BUILD=<build dir with bench_gpu_block> OUT=<dir> [SEQ=925] bash bench/provider/profile_block.sh
#
# SEQ (default 925) is passed as bench_gpu_block's --seqs: one S only, since ncu_summary.py reads the first
# B = 1 segment of the run.
#
# Writes $OUT/ncu_block.csv (raw) and $OUT/profile_block.txt (the summary).
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$SRC/build}
OUT=${OUT:-$SRC/out/profile}
mkdir -p "$OUT"
if ! command -v ncu >/dev/null 2>&1; then
    echo "profile_block: SKIP: Nsight Compute (ncu) not found" | tee "$OUT/profile_block.txt"
    exit 0
fi
if [ ! -x "$BUILD/bench_gpu_block" ]; then
    echo "profile_block: $BUILD/bench_gpu_block not built (cmake -DH3S_CUDA=ON, target bench_gpu_block)" >&2
    exit 2
fi
ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
    "$BUILD/bench_gpu_block" --seqs "${SEQ:-925}" --reps 1 --warmup 0 --profile-reps 1 >"$OUT/ncu_block.csv" 2>"$OUT/ncu_block.err"
rc=$?
python3 "$SRC/bench/provider/ncu_summary.py" "$OUT/ncu_block.csv" | tee "$OUT/profile_block.txt"
exit $rc
